//! RFC 7807 `application/problem+json` documents: the one shape of every
//! error Autumn sends to an API client.
//!
//! - [`ProblemCode`] is the type of a document's stable, machine-readable
//!   `code`. Every code Autumn answers with is a named constant: those of
//!   the HTTP statuses in [`codes`], the guards' in
//!   `autumn_idempotency::codes`, the framework's in `autumn_core::codes`.
//! - [`ProblemDetails`] is what a rejection or an error says about itself:
//!   status, code, detail, `Retry-After`, `type`, extra members and headers.
//! - [`render_problem`] is the one renderer;
//!   [`problem_into_response!`](crate::problem_into_response) gives a type
//!   its `IntoResponse` through it. Every document it renders is logged
//!   once, on [`REJECTION_LOG_TARGET`] at debug.
//! - [`Problem`] is an error of an app's own that should look like Autumn's.
//!
//! The guards' rejections (`autumn_idempotency`), the cross-origin check,
//! sessions, tenancy, API tokens, app state, error pages and
//! `autumn_core::AutumnError` all implement [`ProblemDetails`] and answer
//! through [`render_problem`]. [`problem_response`] and [`problem_document`]
//! write the document alone: they neither log nor know any type.

pub mod codes;

use std::borrow::Cow;
use std::fmt;

use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode, header};

/// The tracing target every rendered problem document is logged on, at
/// debug: `[log] level = "info,autumn::rejection=debug"` shows each
/// rejection's status and code, and nothing else of it.
pub const REJECTION_LOG_TARGET: &str = "autumn::rejection";

/// The problem `type` of a document that names none: RFC 7807's
/// `about:blank`, meaning the status says it all.
pub const ABOUT_BLANK: &str = "about:blank";

/// A problem document's stable, machine-readable `code`, such as
/// `idempotency_key_in_flight`: what a client matches on, where the
/// `detail` is for people and may change.
///
/// A `Copy` wrapper over a `&'static str`, so that codes are named
/// constants (see [`codes`]) rather than strings typed at each answer.
///
/// ```
/// use autumn_base::problem::{ProblemCode, codes};
///
/// const ORDER_CLOSED: ProblemCode = ProblemCode::new("order_closed");
/// assert_eq!(ORDER_CLOSED.as_str(), "order_closed");
/// assert_eq!(ORDER_CLOSED, "order_closed");
/// assert_eq!(ORDER_CLOSED.to_string(), "order_closed");
/// assert_eq!(ProblemCode::for_status(http::StatusCode::NOT_FOUND), codes::NOT_FOUND);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProblemCode(&'static str);

impl ProblemCode {
    /// The code `code`: lowercase words joined by `_`, by convention.
    pub const fn new(code: &'static str) -> Self {
        Self(code)
    }

    /// The code as it appears in the document.
    pub const fn as_str(self) -> &'static str {
        self.0
    }

    /// The code of `status`, for an error nothing more is known about:
    /// `not_found` for 404, `internal_error` for 500, `client_error` or
    /// `server_error` for a status without a code of its own.
    pub const fn for_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => codes::BAD_REQUEST,
            401 => codes::UNAUTHORIZED,
            403 => codes::FORBIDDEN,
            404 => codes::NOT_FOUND,
            405 => codes::METHOD_NOT_ALLOWED,
            406 => codes::NOT_ACCEPTABLE,
            408 => codes::REQUEST_TIMEOUT,
            409 => codes::CONFLICT,
            410 => codes::GONE,
            411 => codes::LENGTH_REQUIRED,
            413 => codes::PAYLOAD_TOO_LARGE,
            414 => codes::URI_TOO_LONG,
            415 => codes::UNSUPPORTED_MEDIA_TYPE,
            422 => codes::UNPROCESSABLE_ENTITY,
            429 => codes::TOO_MANY_REQUESTS,
            431 => codes::REQUEST_HEADER_FIELDS_TOO_LARGE,
            500 => codes::INTERNAL_ERROR,
            501 => codes::NOT_IMPLEMENTED,
            502 => codes::BAD_GATEWAY,
            503 => codes::SERVICE_UNAVAILABLE,
            504 => codes::GATEWAY_TIMEOUT,
            s if s < 500 => codes::CLIENT_ERROR,
            _ => codes::SERVER_ERROR,
        }
    }
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl AsRef<str> for ProblemCode {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl From<ProblemCode> for &'static str {
    fn from(code: ProblemCode) -> Self {
        code.0
    }
}

impl PartialEq<str> for ProblemCode {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ProblemCode {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<ProblemCode> for str {
    fn eq(&self, other: &ProblemCode) -> bool {
        self == other.0
    }
}

impl PartialEq<ProblemCode> for &str {
    fn eq(&self, other: &ProblemCode) -> bool {
        *self == other.0
    }
}

/// What a rejection or an error says about itself, for its problem
/// document: everything [`render_problem`] needs.
///
/// Only the status and the code are required; the `detail` is the
/// `Display` unless a type says otherwise (a 5xx whose message must not
/// reach the client). Give the type its `IntoResponse` with
/// [`problem_into_response!`](crate::problem_into_response).
///
/// ```
/// use autumn_base::problem::{ProblemCode, ProblemDetails};
/// use axum::response::IntoResponse;
/// use http::StatusCode;
///
/// /// Every code this app answers with, in one place.
/// mod codes {
///     use autumn_base::problem::ProblemCode;
///     pub const ORDER_CLOSED: ProblemCode = ProblemCode::new("order_closed");
/// }
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("order {0} is closed; open a new one")]
/// struct OrderClosed(u32);
///
/// impl ProblemDetails for OrderClosed {
///     fn problem_status(&self) -> StatusCode {
///         StatusCode::CONFLICT
///     }
///
///     fn problem_code(&self) -> Option<ProblemCode> {
///         Some(codes::ORDER_CLOSED)
///     }
///
///     fn problem_retry_after(&self) -> Option<u32> {
///         Some(30)
///     }
/// }
///
/// autumn_base::problem_into_response!(OrderClosed);
///
/// let response = OrderClosed(7).into_response();
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// assert_eq!(response.headers()["retry-after"], "30");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
pub trait ProblemDetails: fmt::Display {
    /// The response's status.
    fn problem_status(&self) -> StatusCode;

    /// The stable machine-readable `code`: one of the crate's named
    /// constants. `None` only for an error its author gave no code (an
    /// app's `AutumnError`); the document then has no `code` member.
    fn problem_code(&self) -> Option<ProblemCode>;

    /// The `detail`: what went wrong, for a client developer to act on.
    /// By default the `Display`.
    fn problem_detail(&self) -> Cow<'_, str> {
        Cow::Owned(self.to_string())
    }

    /// The problem `type`, a URI; by default [`ABOUT_BLANK`].
    fn problem_type(&self) -> &str {
        ABOUT_BLANK
    }

    /// The seconds after which trying again may succeed, sent as
    /// `Retry-After`; by default none.
    fn problem_retry_after(&self) -> Option<u32> {
        None
    }

    /// Members after the standard ones (RFC 7807's extension members), for
    /// what clients act on by machine; by default none.
    fn problem_members(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }

    /// Headers the answer carries besides `Content-Type` and
    /// `Retry-After`, such as a 401's `WWW-Authenticate`; by default none.
    fn problem_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    /// Logs what the server's operators must act on and the client is not
    /// told: the store error behind a 503, a handler's internal failure, an
    /// extractor whose layer is missing. Called once by [`render_problem`],
    /// before it renders; by default nothing, since the renderer's own
    /// debug line says all that a refusal of the client's request needs.
    fn log_for_operators(&self) {}
}

/// The one renderer: `problem`'s document, with `Content-Type:
/// application/problem+json`, `Retry-After` and `problem`'s own headers.
///
/// Each call logs one event on [`REJECTION_LOG_TARGET`] at debug, with the
/// `status` and the `code`. Never the detail: an app's message or a header
/// a client sent can carry what a log must not keep.
///
/// ```
/// use autumn_base::Problem;
/// use autumn_base::problem::render_problem;
/// use http::StatusCode;
///
/// let response = render_problem(&Problem::new(StatusCode::GONE, "order_gone", "order 7 was deleted"));
/// assert_eq!(response.status(), StatusCode::GONE);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
pub fn render_problem<P: ProblemDetails + ?Sized>(problem: &P) -> Response {
    problem.log_for_operators();
    let status = problem.problem_status();
    let code = problem.problem_code().map(ProblemCode::as_str);
    tracing::debug!(
        target: REJECTION_LOG_TARGET,
        status = status.as_u16(),
        code,
        "error answered"
    );
    let mut response = problem_document(
        status,
        code,
        &problem.problem_detail(),
        Some(problem.problem_type()),
        problem.problem_members(),
    );
    let headers = response.headers_mut();
    if let Some(seconds) = problem.problem_retry_after() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    for (name, value) in problem.problem_headers() {
        headers.insert(name, value);
    }
    response
}

/// Gives each type named its `IntoResponse`: [`render_problem`] of itself.
///
/// Every type implementing [`ProblemDetails`] answers through this macro,
/// so every problem document has one shape and one log line. A macro, not a
/// blanket `impl<T: ProblemDetails> IntoResponse for T`: both traits would
/// be foreign to the crates whose types need it.
///
/// ```
/// use autumn_base::problem::{ProblemCode, ProblemDetails};
/// use axum::response::IntoResponse;
/// use http::StatusCode;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("no invoice {0}")]
/// struct NoInvoice(u32);
///
/// impl ProblemDetails for NoInvoice {
///     fn problem_status(&self) -> StatusCode {
///         StatusCode::NOT_FOUND
///     }
///
///     fn problem_code(&self) -> Option<ProblemCode> {
///         Some(ProblemCode::new("invoice_unknown"))
///     }
/// }
///
/// autumn_base::problem_into_response!(NoInvoice);
///
/// assert_eq!(NoInvoice(3).into_response().status(), StatusCode::NOT_FOUND);
/// ```
#[macro_export]
macro_rules! problem_into_response {
    ($($problem:ty),+ $(,)?) => {$(
        impl $crate::__private::IntoResponse for $problem {
            fn into_response(self) -> $crate::__private::Response {
                $crate::problem::render_problem(&self)
            }
        }
    )+};
}

/// Writes an RFC 7807 problem document: `type`, `title` (the status's
/// reason phrase), `status`, `detail` and, when given, a stable
/// machine-readable `code`, with `Content-Type: application/problem+json`.
///
/// The writer under [`render_problem`], which types answer through: this
/// one logs nothing.
///
/// ```
/// use autumn_base::problem_response;
/// use http::StatusCode;
///
/// let response = problem_response(StatusCode::CONFLICT, Some("order_closed"), "the order is closed");
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
pub fn problem_response(status: StatusCode, code: Option<&str>, detail: &str) -> Response {
    problem_document(status, code, detail, None, Vec::new())
}

/// [`problem_response`] with a `type` other than `about:blank` and more
/// members (RFC 7807's extension members), in the order given after the
/// standard ones.
///
/// ```
/// use autumn_base::problem::problem_document;
/// use http::StatusCode;
///
/// let response = problem_document(
///     StatusCode::CONFLICT,
///     Some("order_closed"),
///     "the order is closed",
///     Some("https://example.com/problems/order-closed"),
///     vec![("retry_after", serde_json::Value::from(1))],
/// );
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
pub fn problem_document(
    status: StatusCode,
    code: Option<&str>,
    detail: &str,
    problem_type: Option<&str>,
    members: Vec<(&'static str, serde_json::Value)>,
) -> Response {
    let mut body = serde_json::json!({
        "type": problem_type.unwrap_or(ABOUT_BLANK),
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if let Some(fields) = body.as_object_mut() {
        if let Some(code) = code {
            fields.insert("code".to_owned(), code.into());
        }
        for (name, value) in members {
            fields.insert(name.to_owned(), value);
        }
    }
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// An RFC 7807 problem document with a `code`, for an error of an app's own
/// that should look like Autumn's.
///
/// ```
/// use autumn_base::Problem;
/// use axum::response::IntoResponse;
/// use http::StatusCode;
///
/// let problem = Problem::new(StatusCode::CONFLICT, "order_closed", "the order is closed");
/// assert_eq!(problem.code(), "order_closed");
/// let response = problem.into_response();
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    code: ProblemCode,
    detail: String,
}

impl Problem {
    /// A problem with this status, a stable machine-readable `code`, and a
    /// `detail` a client developer can act on.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code: ProblemCode::new(code),
            detail: detail.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code, e.g. `idempotency_key_in_flight`.
    pub fn code(&self) -> &'static str {
        self.code.as_str()
    }

    /// The human-readable explanation.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// The detail, as the document's `detail` member says it.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl ProblemDetails for Problem {
    fn problem_status(&self) -> StatusCode {
        self.status
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.code)
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.detail)
    }
}

crate::problem_into_response!(Problem);

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::BodyExt as _;
    use tracing::field::{Field, Visit};
    use tracing::{Event, Level, Metadata, Subscriber, span};

    use super::*;

    async fn body(response: Response) -> String {
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    /// One logged event: its target, level, and fields as `name=value`.
    type Logged = (String, Level, String);

    /// Keeps every event, so a test sees what was logged and where.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<Logged>>>);

    impl Capture {
        fn events(&self) -> Vec<Logged> {
            self.0.lock().expect("not poisoned").clone()
        }
    }

    struct Fields(String);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            self.0.push_str(&format!("{}={value:?}", field.name()));
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }

        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }

        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            let metadata = event.metadata();
            self.0.lock().expect("not poisoned").push((
                metadata.target().to_owned(),
                *metadata.level(),
                fields.0,
            ));
        }

        fn enter(&self, _: &span::Id) {}

        fn exit(&self, _: &span::Id) {}
    }

    /// A rejection using every part of the trait, with a detail that must
    /// not reach the log.
    #[derive(Debug, thiserror::Error)]
    #[error("the token s3cret is not valid")]
    struct Refused {
        reported: Arc<Mutex<u32>>,
    }

    impl ProblemDetails for Refused {
        fn problem_status(&self) -> StatusCode {
            StatusCode::UNAUTHORIZED
        }

        fn problem_code(&self) -> Option<ProblemCode> {
            Some(ProblemCode::new("token_refused"))
        }

        fn problem_type(&self) -> &str {
            "urn:test:refused"
        }

        fn problem_retry_after(&self) -> Option<u32> {
            Some(3)
        }

        fn problem_members(&self) -> Vec<(&'static str, serde_json::Value)> {
            vec![("new_token_needed", true.into())]
        }

        fn problem_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
            vec![(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))]
        }

        fn log_for_operators(&self) {
            *self.reported.lock().expect("not poisoned") += 1;
        }
    }

    crate::problem_into_response!(Refused);

    #[tokio::test]
    async fn the_renderer_writes_every_part_and_logs_status_and_code_once() {
        let capture = Capture::default();
        let reported = Arc::new(Mutex::new(0));
        let refused = Refused {
            reported: reported.clone(),
        };
        let response =
            tracing::subscriber::with_default(capture.clone(), || refused.into_response());
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = value.to_str().expect("ASCII");
                (name.as_str().to_owned(), value.to_owned())
            })
            .collect();
        assert_eq!(
            headers,
            [
                ("content-type", "application/problem+json"),
                ("retry-after", "3"),
                ("www-authenticate", "Bearer"),
            ]
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
        );
        assert_eq!(
            body(response).await,
            r#"{"code":"token_refused","detail":"the token s3cret is not valid","new_token_needed":true,"status":401,"title":"Unauthorized","type":"urn:test:refused"}"#
        );
        assert_eq!(*reported.lock().expect("not poisoned"), 1);
        let events = capture.events();
        assert_eq!(
            events,
            [(
                REJECTION_LOG_TARGET.to_owned(),
                Level::DEBUG,
                r#"message=error answered status=401 code="token_refused""#.to_owned(),
            )]
        );
        assert_eq!(REJECTION_LOG_TARGET, "autumn::rejection");
        assert!(!events[0].2.contains("s3cret"), "the detail is not logged");
    }

    #[tokio::test]
    async fn renders_one_shape_with_and_without_a_code() {
        let with = problem_response(StatusCode::CONFLICT, Some("x_y"), "try \"later\"");
        assert_eq!(
            with.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert_eq!(
            body(with).await,
            r#"{"code":"x_y","detail":"try \"later\"","status":409,"title":"Conflict","type":"about:blank"}"#
        );
        let without = problem_response(StatusCode::NOT_FOUND, None, "no order 2");
        assert_eq!(
            body(without).await,
            r#"{"detail":"no order 2","status":404,"title":"Not Found","type":"about:blank"}"#
        );
    }

    #[tokio::test]
    async fn a_problem_renders_through_the_one_renderer() {
        let response =
            Problem::new(StatusCode::GONE, "order_gone", "order 7 was deleted").into_response();
        assert_eq!(response.status(), StatusCode::GONE);
        assert_eq!(
            body(response).await,
            r#"{"code":"order_gone","detail":"order 7 was deleted","status":410,"title":"Gone","type":"about:blank"}"#
        );
    }

    #[test]
    fn every_status_has_a_snake_case_code() {
        for status in 100..=599 {
            let status = StatusCode::from_u16(status).expect("a status");
            let code = ProblemCode::for_status(status).as_str();
            assert!(
                !code.is_empty()
                    && code
                        .bytes()
                        .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
                "{status}: {code}"
            );
        }
        assert_eq!(
            ProblemCode::for_status(StatusCode::IM_A_TEAPOT),
            codes::CLIENT_ERROR
        );
        assert_eq!(
            ProblemCode::for_status(StatusCode::INSUFFICIENT_STORAGE),
            codes::SERVER_ERROR
        );
    }
}
