//! `[server.timeouts] request_timeout_ms`: a request whose answer is not
//! ready in time is dropped and answered 408.
//!
//! Most requests are answered on their first poll, before any timer could
//! matter, so the timer is armed only when the request first has to wait:
//! a request that never waits registers nothing with the runtime's timer
//! (registering and cancelling one on every request cost more than the
//! rest of the layer). The deadline still counts from when the request
//! arrived.
//!
//! A module of its own, in the layout every middleware here follows
//! (`layer.rs`, `service.rs`, `future.rs`), so that the app builder only
//! names the layer and the timer logic can be read and tested alone.

mod future;
mod layer;
mod service;

pub(crate) use layer::RequestTimeoutLayer;
