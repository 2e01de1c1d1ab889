//! [`RequestLog`]: gives each request its id and its logging scope, and
//! notes what the access line will need.

use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::response::Response;
use tower::Service;

use super::ClientOf;
use super::future::{Logged, ResponseFuture, Scope};
use super::headers::ResponseHeaders;
use super::id::{REQUEST_ID, RequestId};
use crate::telemetry::{text, trace};

/// The service made by [`RequestLogLayer`](super::RequestLogLayer).
#[derive(Debug, Clone)]
pub(crate) struct RequestLog<S> {
    inner: S,
    /// How the access line finds the client; `None`: no access line.
    access_log: Option<ClientOf>,
    headers: Option<ResponseHeaders>,
    /// Whether traces are exported: each request then has a span, joined
    /// to its caller's trace.
    traced: bool,
}

impl<S> RequestLog<S> {
    /// `inner`, logged when `access_log` says how to find the client, its
    /// responses given `headers`.
    pub(super) fn new(
        inner: S,
        access_log: Option<ClientOf>,
        headers: Option<ResponseHeaders>,
        traced: bool,
    ) -> Self {
        Self {
            inner,
            access_log,
            headers,
            traced,
        }
    }
}

impl<S> Service<Request> for RequestLog<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        with_room_for_the_framework(request.extensions_mut());
        let id = request
            .headers()
            .get(&REQUEST_ID)
            .and_then(RequestId::from_header)
            .unwrap_or_else(RequestId::generate);
        // Handlers and proxied calls see the id the response will carry.
        request.headers_mut().insert(REQUEST_ID, id.0.clone());
        let method = request.method().clone();
        // Autumn's own plain-text subscriber keeps the request's scope
        // itself; any other gets a span. The id alone: it ties each line to
        // the access line, which has the method and path; every field here
        // is formatted on every request.
        let scope = if self.traced {
            // Exported traces need a span even under the plain-text
            // subscriber: the caller's trace is its parent.
            Scope::Span(trace::request_span(&id, &method, request.headers()))
        } else {
            match text::PlainText::current_direct() {
                Some(direct) => Scope::Direct(direct),
                None => Scope::Span(tracing::info_span!("request", request_id = %id)),
            }
        };
        // The path only: a query string may carry what must not be logged.
        let logged = self.access_log.map(|client_of| Logged {
            method,
            // Shares the request's bytes: no copy.
            uri: request.uri().clone(),
            // Read now, from the headers the client sent: what the handler's
            // `ClientIp` sees.
            client: client_of(request.headers()),
            started,
        });
        request.extensions_mut().insert(id.clone());
        ResponseFuture::new(
            self.inner.call(request),
            scope,
            id,
            logged,
            self.headers.clone(),
        )
    }
}

/// Gives `extensions` room for what the framework's layers insert (the
/// request id, the session, the scope, the state, the route's match...):
/// grown one insert at a time, the map would be allocated three times and
/// rehashed twice on every request. One allocation, from an empty map made
/// once per thread with that room.
fn with_room_for_the_framework(extensions: &mut http::Extensions) {
    /// Distinct types to make the room with, then taken out again.
    #[derive(Clone)]
    struct Slot<const N: usize>;

    fn roomy() -> http::Extensions {
        let mut roomy = http::Extensions::new();
        macro_rules! room {
            ($($n:literal)*) => {
                $( roomy.insert(Slot::<$n>); )*
                $( roomy.remove::<Slot<$n>>(); )*
            };
        }
        // Past 7 entries the map moves to its next size, which holds 14.
        room!(0 1 2 3 4 5 6 7 8);
        roomy
    }

    thread_local! {
        static ROOMY: http::Extensions = roomy();
    }
    let mut fresh = ROOMY.with(Clone::clone);
    fresh.extend(std::mem::take(extensions));
    *extensions = fresh;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn making_room_keeps_what_the_request_carried_and_adds_nothing() {
        #[derive(Clone, Debug, PartialEq)]
        struct Carried(u8);
        let mut extensions = http::Extensions::new();
        extensions.insert(Carried(7));
        with_room_for_the_framework(&mut extensions);
        assert_eq!(extensions.len(), 1);
        assert_eq!(extensions.get::<Carried>(), Some(&Carried(7)));
        let mut empty = http::Extensions::new();
        with_room_for_the_framework(&mut empty);
        assert!(empty.is_empty());
    }
}
