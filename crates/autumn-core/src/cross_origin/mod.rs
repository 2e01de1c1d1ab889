//! Cross-origin protection: a mutating request that a browser sends on
//! behalf of another site is refused before any of the app's code runs.
//!
//! One-time submit tokens stop a form from being posted twice; they do not
//! stop a page on another site from posting it once. Browsers say where a
//! request comes from, so the check needs no token and no session:
//!
//! - `GET`, `HEAD` and `OPTIONS` always pass: they must not change anything.
//! - A path under one of the [exempt paths](CrossOriginLayer::with_exempt_paths)
//!   passes (by whole segments: `/api` covers `/api/x`, not `/apiary`).
//! - With a `Sec-Fetch-Site` header (every current browser sends one):
//!   `same-origin` and `none` (typed in the address bar, a bookmark) pass;
//!   `same-site` and `cross-site` are refused, unless the request's
//!   `Origin` is a [trusted origin](TrustedOrigin).
//! - Without `Sec-Fetch-Site`: no `Origin` either passes (not a browser:
//!   curl, a server, a mobile app); an `Origin` whose `host[:port]` is the
//!   request's `Host` passes (the scheme cannot be compared, `Host` has
//!   none); a trusted origin passes; anything else is refused.
//!
//! A refusal is a [`CrossOriginRejection`]: 403 with a problem document
//! whose `code` is `cross_origin_request_refused`. The algorithm is the one
//! of Go's `net/http.CrossOriginProtection` (Go 1.25).
//!
//! While `[security.cross_origin] enabled = true` (the default), the app
//! builder installs [`CrossOriginLayer`] inside the error pages, the panic
//! catcher and the request timeout, and outside the session, tenancy and
//! scope layers, the app's own layers and both guards, so a forged request
//! reaches no app layer, no guard, no store and no handler. On a plain axum
//! router, add it yourself:
//!
//! ```
//! use autumn_core::cross_origin::CrossOriginLayer;
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = CrossOriginLayer::new()
//!     .with_trusted_origin("https://admin.example.com".parse()?)
//!     .with_exempt_paths(vec!["/webhooks".to_owned()]);
//! let app = Router::new()
//!     .route("/transfer", post(|| async { "sent" }))
//!     .layer(layer);
//!
//! let forged = Request::post("/transfer")
//!     .header("sec-fetch-site", "cross-site")
//!     .header("origin", "https://evil.example")
//!     .body(Body::empty())?;
//! let response = app.clone().oneshot(forged).await?;
//! assert_eq!(response.status(), StatusCode::FORBIDDEN);
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//!
//! let own = Request::post("/transfer")
//!     .header("sec-fetch-site", "same-origin")
//!     .body(Body::empty())?;
//! assert_eq!(app.clone().oneshot(own).await?.status(), StatusCode::OK);
//!
//! let curl = Request::post("/transfer").body(Body::empty())?;
//! assert_eq!(app.oneshot(curl).await?.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```

mod future;
mod layer;
mod origin;
mod rejection;
mod service;

pub use future::ResponseFuture;
pub use layer::CrossOriginLayer;
pub use origin::{InvalidOrigin, TrustedOrigin};
pub use rejection::CrossOriginRejection;
pub use service::CrossOrigin;
