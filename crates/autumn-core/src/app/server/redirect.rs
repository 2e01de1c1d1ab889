//! `[server.tls] redirect_port`: a plain-HTTP listener whose every answer
//! is a permanent redirect (308, so a POST stays a POST) to the same host,
//! path and query over HTTPS on the app's port.
//!
//! It runs no route and touches no store: a client that came over plain
//! HTTP is sent to HTTPS before anything of its request is acted on.

use std::borrow::Cow;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::codes;

/// The redirecting app, for an HTTPS port `https_port`.
pub(crate) fn router(https_port: u16) -> Router {
    Router::new().fallback(move |request: Request| async move { redirect(&request, https_port) })
}

fn redirect(request: &Request, https_port: u16) -> Response {
    let Some(host) = host_of(request) else {
        return RedirectRefusal::NoHost.into_response();
    };
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let location = if https_port == 443 {
        format!("https://{host}{target}")
    } else {
        format!("https://{host}:{https_port}{target}")
    };
    match HeaderValue::from_str(&location) {
        Ok(value) => (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, value)],
            format!("This server is served over HTTPS: {location}\n"),
        )
            .into_response(),
        Err(_) => RedirectRefusal::Unwritable.into_response(),
    }
}

/// The host the client asked for, without its port: from the Host header,
/// or from an absolute request target.
fn host_of(request: &Request) -> Option<String> {
    let raw = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))?;
    let authority: http::uri::Authority = raw.parse().ok()?;
    let host = authority.host();
    (!host.is_empty()).then(|| host.to_owned())
}

/// Why a request to the redirect port cannot be redirected.
#[derive(Debug, thiserror::Error)]
enum RedirectRefusal {
    /// No Host header and no absolute target.
    #[error("the request names no host")]
    NoHost,
    /// The host or target holds bytes a header cannot carry.
    #[error("the host or target cannot be written into a Location header")]
    Unwritable,
}

impl ProblemDetails for RedirectRefusal {
    fn problem_status(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(codes::HTTPS_REDIRECT_IMPOSSIBLE)
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        Cow::Borrowed(match self {
            Self::NoHost => {
                "this port only redirects to HTTPS, and the request names no host (no Host header) to redirect to; send it to https:// directly"
            }
            Self::Unwritable => {
                "this port only redirects to HTTPS, and the request's host or target cannot be written into a Location header; send it to https:// directly"
            }
        })
    }
}

autumn_base::problem_into_response!(RedirectRefusal);

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    fn request(target: &str, host: Option<&str>) -> Request {
        let mut builder = http::Request::builder().method("POST").uri(target);
        if let Some(host) = host {
            builder = builder.header(header::HOST, host);
        }
        builder.body(Body::empty()).expect("a request")
    }

    #[test]
    fn the_redirect_keeps_host_path_and_query_and_drops_the_plain_port() {
        let response = redirect(&request("/orders?page=2", Some("shop.example:8080")), 8443);
        assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(
            response.headers()[header::LOCATION],
            "https://shop.example:8443/orders?page=2"
        );
        let response = redirect(&request("/", Some("shop.example")), 443);
        assert_eq!(
            response.headers()[header::LOCATION],
            "https://shop.example/"
        );
    }

    #[test]
    fn a_request_without_a_host_gets_a_problem_not_a_redirect() {
        let response = redirect(&request("/orders", None), 443);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
