//! [`RequestLogLayer`]: the request id, the access log and the response's
//! last headers, applied to a service.

use tower::Layer;

use super::ClientOf;
use super::headers::ResponseHeaders;
use super::service::RequestLog;

/// Gives each request its id and span, and writes its access log line
/// (when `access_log`) once the response head is ready, naming the client
/// `client_of` finds.
///
/// The response's last headers go on here too: its `x-request-id` and the
/// [`ResponseHeaders`] given with [`with_response_headers`](Self::with_response_headers)
/// (the security headers), in one pass over the finished response rather
/// than in a layer of their own, which would move every response through
/// one more future.
#[derive(Debug, Clone)]
pub(crate) struct RequestLogLayer {
    access_log: bool,
    client_of: ClientOf,
    headers: Option<ResponseHeaders>,
    traced: bool,
}

impl RequestLogLayer {
    pub(crate) fn new(access_log: bool, client_of: ClientOf) -> Self {
        Self {
            access_log,
            client_of,
            headers: None,
            traced: false,
        }
    }

    /// Gives every request a span that joins the trace its caller names in
    /// `traceparent`: while traces are exported.
    pub(crate) fn traced(mut self, traced: bool) -> Self {
        self.traced = traced;
        self
    }

    /// Sets `headers` on every response that has none of its own.
    pub(crate) fn with_response_headers(mut self, headers: Option<ResponseHeaders>) -> Self {
        self.headers = headers;
        self
    }
}

impl<S> Layer<S> for RequestLogLayer {
    type Service = RequestLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestLog::new(
            inner,
            self.access_log.then_some(self.client_of),
            self.headers.clone(),
            self.traced,
        )
    }
}
