//! [`CatchPanicLayer`]: catching panics, applied to a service.

use tower::Layer;

use super::service::CatchPanic;

/// Catches panics of the services under it. See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> CatchPanic<S> {
        CatchPanic::new(inner)
    }
}
