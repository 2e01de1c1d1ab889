//! RFC 7807 `application/problem+json` documents: the one shape of every
//! error Autumn sends to an API client.
//!
//! [`problem_response`] is the renderer; [`Problem`] is an error of an app's
//! own that should look like Autumn's. The guards' rejections
//! (`autumn_idempotency`), the cross-origin check, sessions, tenancy, API
//! tokens, error pages and `autumn_core::AutumnError` all answer through it.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

/// Renders an RFC 7807 problem document: `type`, `title` (the status's
/// reason phrase), `status`, `detail` and, when given, a stable
/// machine-readable `code`, with `Content-Type: application/problem+json`.
///
/// The one renderer of problem documents in Autumn: the guards' rejections
/// and `autumn_core::AutumnError` all answer through it.
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
        "type": problem_type.unwrap_or("about:blank"),
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
    code: &'static str,
    detail: String,
}

impl Problem {
    /// A problem with this status, a stable machine-readable `code`, and a
    /// `detail` a client developer can act on.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code, e.g. `idempotency_key_in_flight`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable explanation.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        problem_response(self.status, Some(self.code), &self.detail)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

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
}
