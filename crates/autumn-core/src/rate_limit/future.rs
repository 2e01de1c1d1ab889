//! The future of a [`RateLimitService`](super::RateLimitService) call.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use axum::response::Response;

/// The answer of a rate-limited route: boxed, since deciding awaits the
/// counts' backend before the route runs.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;
