//! Who is asking, as the app tells the guards through request extensions:
//! the [`IdempotencyScope`] a storage key is made with, and [`OpaqueCaller`]
//! when the app cannot show how it decided.

/// Who is asking: the parts of the request that keep one caller's records
/// apart from another's (session, tenant, principal, bearer credential).
///
/// Request extension. Inserted by Autumn's scope layer (outside the app's
/// own layers, on a request a guard may act on) unless one is there already;
/// the principal layer of `AppBuilder::scope_by`, and Autumn's
/// `RequireApiToken` added with `AppBuilder::layer` or
/// `AppBuilder::api_tokens`, then swap its `authorization` part for the
/// principal. Read by both guards: the
/// [`IdempotencyLayer`](crate::IdempotencyLayer) folds it into every storage
/// key, the [`SubmitTokenLayer`](crate::submit::SubmitTokenLayer) binds a
/// token to it when no [`TokenBinding`](crate::submit::TokenBinding) is
/// there. Without one, the idempotency layer scopes by the raw
/// `Authorization` header alone.
///
/// ```
/// use autumn_idempotency::IdempotencyScope;
///
/// let scope = IdempotencyScope::default().with_part("tenant", "acme");
/// assert_ne!(scope, IdempotencyScope::default());
/// ```
///
/// Its `Debug` output names the parts but never shows their values (session
/// ids and bearer tokens are secrets):
///
/// ```
/// use autumn_idempotency::IdempotencyScope;
///
/// let scope = IdempotencyScope::default().with_part("bearer", "s3cret-token");
/// let shown = format!("{scope:?}");
/// assert!(shown.contains("bearer") && !shown.contains("s3cret-token"));
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct IdempotencyScope {
    encoded: Vec<u8>,
}

impl IdempotencyScope {
    /// Adds a named part (e.g. `"session"`, `"tenant"`, `"principal"`,
    /// `"bearer"`). Parts are length-prefixed, so no two different lists of
    /// parts encode the same.
    #[must_use]
    pub fn with_part(mut self, kind: &str, value: impl AsRef<[u8]>) -> Self {
        for part in [kind.as_bytes(), value.as_ref()] {
            self.encoded
                .extend_from_slice(&(part.len() as u64).to_be_bytes());
            self.encoded.extend_from_slice(part);
        }
        self
    }

    /// The same scope without its parts named `kind`: a layer that resolves
    /// the caller better than a raw header did (the principal behind a
    /// bearer token) drops the raw part before adding its own.
    ///
    /// ```
    /// use autumn_idempotency::IdempotencyScope;
    ///
    /// let raw = IdempotencyScope::default()
    ///     .with_part("session", "abc")
    ///     .with_part("authorization", "Bearer one");
    /// let resolved = raw.without_part("authorization").with_part("principal", "agent-7");
    /// let refreshed = IdempotencyScope::default()
    ///     .with_part("session", "abc")
    ///     .with_part("authorization", "Bearer two")
    ///     .without_part("authorization")
    ///     .with_part("principal", "agent-7");
    /// assert_eq!(resolved, refreshed);
    /// ```
    #[must_use]
    pub fn without_part(self, kind: &str) -> Self {
        let mut kept = Self::default();
        let mut rest = self.encoded.as_slice();
        while let Some((name, after)) = split_part(rest) {
            let Some((value, after)) = split_part(after) else {
                break;
            };
            if name != kind.as_bytes() {
                kept = kept.with_part(&String::from_utf8_lossy(name), value);
            }
            rest = after;
        }
        kept
    }

    /// The canonical bytes folded into the storage key.
    pub fn as_bytes(&self) -> &[u8] {
        &self.encoded
    }

    /// Whether no part was added: the scope of an anonymous caller, whose
    /// `Idempotency-Key` is then the only thing that tells its records from
    /// another anonymous caller's.
    pub fn is_empty(&self) -> bool {
        self.encoded.is_empty()
    }
}

/// The scope the idempotency layer keys a request by: the one in its
/// extensions, else one made of its raw `Authorization` header alone.
pub(crate) fn request_scope<'a>(
    extensions: &'a http::Extensions,
    headers: &http::HeaderMap,
) -> std::borrow::Cow<'a, IdempotencyScope> {
    match extensions.get::<IdempotencyScope>() {
        Some(scope) => std::borrow::Cow::Borrowed(scope),
        None => std::borrow::Cow::Owned(match headers.get(http::header::AUTHORIZATION) {
            Some(value) => IdempotencyScope::default().with_part("authorization", value.as_bytes()),
            None => IdempotencyScope::default(),
        }),
    }
}

/// Whether a request comes from a caller with no identity: the scope the
/// layer would key it by has no part (no session, tenant, principal or
/// `Authorization`). The one test of "anonymous" the layer applies.
pub(crate) fn is_anonymous(extensions: &http::Extensions, headers: &http::HeaderMap) -> bool {
    request_scope(extensions, headers).is_empty()
}

impl std::fmt::Debug for IdempotencyScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Redacted(usize);
        impl std::fmt::Debug for Redacted {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "<redacted, {} bytes>", self.0)
            }
        }
        let mut map = f.debug_map();
        let mut rest = self.encoded.as_slice();
        // Walks the length-prefixed (kind, value) pairs `with_part` wrote.
        while let Some((kind, after)) = split_part(rest) {
            let Some((value, after)) = split_part(after) else {
                break;
            };
            map.entry(&String::from_utf8_lossy(kind), &Redacted(value.len()));
            rest = after;
        }
        map.finish()
    }
}

/// One length-prefixed part and what follows it.
fn split_part(encoded: &[u8]) -> Option<(&[u8], &[u8])> {
    let (length, rest) = encoded.split_first_chunk::<8>()?;
    let length = usize::try_from(u64::from_be_bytes(*length)).ok()?;
    (length <= rest.len()).then(|| rest.split_at(length))
}

/// Put in a request's extensions by a layer that decided who the caller is
/// where the idempotency layer cannot see it (an authentication layer
/// wrapped in a `ServiceBuilder` stack, say): the scope still keeps callers
/// apart, but nothing proves a retry passed the same checks, so a hit on a
/// record answers 409 `idempotency_replay_unavailable` instead of a replay.
/// The first run is recorded as usual.
///
/// Inserted by Autumn's `RequireApiToken` when it is mounted anywhere but
/// with `AppBuilder::layer` itself (or by an app's own authentication
/// layer); read by the [`IdempotencyLayer`](crate::IdempotencyLayer) when a
/// claim finds a completed record.
///
/// ```
/// use autumn_idempotency::OpaqueCaller;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(OpaqueCaller);
/// assert!(request.extensions().get::<OpaqueCaller>().is_some());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpaqueCaller;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_parts_and_hides_their_values() {
        let scope = IdempotencyScope::default()
            .with_part("session", "sess-4f1c9e")
            .with_part("bearer", "Bearer tok_live_secret");
        let shown = format!("{scope:?}");
        assert!(!shown.contains("sess-4f1c9e"), "{shown}");
        assert!(!shown.contains("tok_live_secret"), "{shown}");
        assert!(
            shown.contains("\"session\"") && shown.contains("\"bearer\""),
            "{shown}"
        );
        assert_eq!(format!("{:?}", IdempotencyScope::default()), "{}");
    }

    #[test]
    fn a_request_is_anonymous_only_without_any_scope_part() {
        let headers = http::HeaderMap::new();
        let mut extensions = http::Extensions::new();
        assert!(is_anonymous(&extensions, &headers));
        let mut authorized = http::HeaderMap::new();
        authorized.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer t"),
        );
        assert!(!is_anonymous(&extensions, &authorized));
        // A scope the app put there is the one that counts, even an empty one.
        extensions.insert(IdempotencyScope::default());
        assert!(is_anonymous(&extensions, &authorized));
        extensions.insert(IdempotencyScope::default().with_part("session", "s"));
        assert!(!is_anonymous(&extensions, &headers));
    }
}
