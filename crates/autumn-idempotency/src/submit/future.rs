//! The response future of [`SubmitTokenService`](super::SubmitTokenService).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::Response;
use http::{HeaderValue, header};
use pin_project_lite::pin_project;

use super::extract::Mint;
use crate::detach::Guarded;

pin_project! {
    /// Response future of [`SubmitTokenService`](super::SubmitTokenService).
    ///
    /// A request the layer does not guard is the inner service's own future;
    /// a guarded form post runs boxed and, once it holds its token's lock,
    /// runs to completion even if the client hangs up. A response whose
    /// handler took a token is made `private, no-cache` for shared caches.
    ///
    /// Like any future, it must not be polled again once it returned its
    /// response: a guarded post panics with "polled after completion".
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
        mint: Arc<Mint>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F> {
        Plain { #[pin] future: F },
        Guarded { guarded: Guarded },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn plain(future: F, mint: Arc<Mint>) -> Self {
        Self {
            kind: Kind::Plain { future },
            mint,
        }
    }

    pub(super) fn guarded(guarded: Guarded, mint: Arc<Mint>) -> Self {
        Self {
            kind: Kind::Guarded { guarded },
            mint,
        }
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match this.kind.project() {
            KindProjection::Plain { future } => match std::task::ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
            KindProjection::Guarded { guarded } => std::task::ready!(guarded.poll(cx)),
        };
        // A page that carries a token must not be served to someone else by
        // a shared cache.
        if this.mint.was_used() {
            keep_private(response.headers_mut());
            response.extensions_mut().insert(super::TokenMinted);
        }
        Poll::Ready(Ok(response))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// Makes a response that carries a minted token uncacheable by shared
/// caches. Not `no-store`: that would keep it out of the browser's
/// back/forward cache, and Back would fetch a new token.
fn keep_private(headers: &mut http::HeaderMap) {
    const PRIVATE: HeaderValue = HeaderValue::from_static("private, no-cache");
    let Some(current) = headers.get(header::CACHE_CONTROL) else {
        headers.insert(header::CACHE_CONTROL, PRIVATE);
        return;
    };
    if !shared_cacheable(headers) {
        return;
    }
    // Once per process: a handler that does this does it on every request.
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            cache_control = ?current,
            "a response carrying a submit token had a Cache-Control that lets shared caches store it; replaced with `private, no-cache` so one token is not served to many users"
        );
    });
    headers.insert(header::CACHE_CONTROL, PRIVATE);
}

/// Whether the `Cache-Control` directives let a shared cache (a CDN, a
/// proxy) store the response: unless they say `private` or `no-store`, or
/// say `public` or `s-maxage` anyway.
fn shared_cacheable(headers: &http::HeaderMap) -> bool {
    let mut private = false;
    let mut public = false;
    for value in headers.get_all(header::CACHE_CONTROL) {
        // An unreadable header is not trusted to be private.
        let Ok(value) = value.to_str() else {
            return true;
        };
        for directive in value.split(',') {
            let (name, argument) = match directive.split_once('=') {
                Some((name, argument)) => (name.trim(), Some(argument)),
                None => (directive.trim(), None),
            };
            // `private="set-cookie"` keeps only that header private: the
            // page itself may still be stored.
            if (name.eq_ignore_ascii_case("private") && argument.is_none())
                || name.eq_ignore_ascii_case("no-store")
            {
                private = true;
            } else if name.eq_ignore_ascii_case("public") || name.eq_ignore_ascii_case("s-maxage") {
                public = true;
            }
        }
    }
    public || !private
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_or_unstored_pages_keep_their_cache_control() {
        let cacheable = |values: &[&'static str]| {
            let mut headers = http::HeaderMap::new();
            for value in values {
                headers.append(header::CACHE_CONTROL, HeaderValue::from_static(value));
            }
            shared_cacheable(&headers)
        };
        assert!(cacheable(&["public, max-age=600"]));
        assert!(cacheable(&["max-age=600"]));
        assert!(cacheable(&["no-cache"]));
        assert!(cacheable(&["private", "public"]));
        assert!(cacheable(&["private, s-maxage=60"]));
        assert!(!cacheable(&["private, max-age=60"]));
        assert!(!cacheable(&["No-Store"]));
        assert!(cacheable(&["private=\"set-cookie\""]));
        assert!(!cacheable(&["private=\"set-cookie\"", "no-store"]));
    }
}
