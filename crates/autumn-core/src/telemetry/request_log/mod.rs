//! The request id and access log: [`RequestLogLayer`], outermost of the
//! framework's layers.
//!
//! One middleware, laid out as every middleware here is: the layer
//! (`layer.rs`), its service (`service.rs`) and the service's future
//! (`future.rs`); beside them the [`RequestId`] it gives each request
//! (`id.rs`) and the [`ResponseHeaders`] it puts on each response
//! (`headers.rs`), which the app's security headers use.

mod future;
mod headers;
mod id;
mod layer;
mod service;

pub(crate) use headers::ResponseHeaders;
pub use id::{REQUEST_ID_HEADER, RequestId};
pub(crate) use layer::RequestLogLayer;

/// How the access line learns a request's client address: given by the
/// app, which knows the connection (and its trusted proxies) the request
/// came on.
pub(crate) type ClientOf = fn(&http::HeaderMap) -> std::net::IpAddr;
