//! [`ExemptPaths`]: the path prefixes a guard skips, shared by every layer
//! that takes an `exempt_paths` setting so they all match the same way.

/// Path prefixes matched by whole segments: `/api` covers `/api` and
/// `/api/x`, not `/apiary`; a prefix ending in `/` (`/webhooks/`) covers
/// only what is below it.
///
/// ```
/// use autumn_base::ExemptPaths;
///
/// let exempt = ExemptPaths::new(["/api", "/webhooks/"]);
/// assert!(exempt.covers("/api"));
/// assert!(exempt.covers("/api/orders"));
/// assert!(!exempt.covers("/apiary"));
/// assert!(exempt.covers("/webhooks/stripe"));
/// assert!(!exempt.covers("/webhooks"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExemptPaths(Vec<String>);

impl ExemptPaths {
    /// These prefixes.
    pub fn new<I>(prefixes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self(prefixes.into_iter().map(Into::into).collect())
    }

    /// Whether `path` is one of the prefixes or below one of them.
    pub fn covers(&self, path: &str) -> bool {
        self.0.iter().any(|prefix| is_under(path, prefix))
    }

    /// The prefixes, as given.
    pub fn prefixes(&self) -> &[String] {
        &self.0
    }
}

impl From<Vec<String>> for ExemptPaths {
    fn from(prefixes: Vec<String>) -> Self {
        Self(prefixes)
    }
}

/// Whether `path` is `prefix` or below it, by whole segments.
fn is_under(path: &str, prefix: &str) -> bool {
    let Some(below) = path.strip_prefix(prefix) else {
        return false;
    };
    below.is_empty() || below.starts_with('/') || prefix.ends_with('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments() {
        assert!(is_under("/api", "/api"));
        assert!(is_under("/api/x", "/api"));
        assert!(!is_under("/apiary", "/api"));
        assert!(is_under("/webhooks/in", "/webhooks/"));
        assert!(!is_under("/webhooks", "/webhooks/"));
        assert!(is_under("/anything", "/"));
        assert!(!is_under("/ap", "/api"));
    }

    #[test]
    fn no_prefixes_cover_nothing() {
        assert!(!ExemptPaths::default().covers("/"));
        assert!(ExemptPaths::new(["/a", "/b"]).covers("/b/c"));
    }
}
