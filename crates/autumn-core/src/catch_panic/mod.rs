//! A panic in a handler (or in a layer under this one) answered as a 500
//! problem document, never a dropped connection.
//!
//! tower-http's `CatchPanic` does the same but boxes every response body
//! into a type of its own, which the error pages above then box again; the
//! app's bodies are already `axum::body::Body`, so here they pass as they
//! are.
//!
//! A module of its own, in the layout every middleware here follows
//! (`layer.rs`, `service.rs`, `future.rs`): it has nothing to do with how
//! error pages are rendered, only with turning a panic into a response.

mod future;
mod layer;
mod service;

pub(crate) use layer::CatchPanicLayer;
