//! App state: values the app shares with every handler, such as a client
//! or a pool, registered with
//! [`AppBuilder::with_state`](crate::AppBuilder::with_state) and read with
//! the [`State`] extractor.
//!
//! Autumn's routes are axum `MethodRouter<()>`s built by the route macros,
//! so axum's own `State<S>` (which needs a `Router<S>` typed with the state)
//! cannot reach them. Instead the registered values travel together, in one
//! shared map under a private type, in the request's extensions, which keeps
//! them apart from the app's own extensions of the same type; [`State<S>`]
//! reads its value from there.

use std::any::type_name;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use axum::extract::FromRequestParts;
use http::StatusCode;
use http::request::Parts;

/// A value registered with
/// [`AppBuilder::with_state`](crate::AppBuilder::with_state), cloned for
/// each request that asks for it.
///
/// Share a pool or a client by registering it once; keep what must be
/// mutable behind an `Arc<Mutex<..>>` or an atomic, since every request
/// gets its own clone.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use autumn_core::state::State;
///
/// #[derive(Clone)]
/// struct Counter(Arc<AtomicU64>);
///
/// async fn visit(State(counter): State<Counter>) -> String {
///     let seen = counter.0.fetch_add(1, Ordering::Relaxed) + 1;
///     format!("visit {seen}")
/// }
///
/// let app = autumn_core::app()
///     .with_state(Counter(Arc::new(AtomicU64::new(0))))
///     .merge(axum::Router::new().route("/", axum::routing::get(visit)));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct State<S>(pub S);

/// How a state value travels in the request's extensions: wrapped, so an
/// app's `String` state never meets another layer's `String` extension.
///
/// Put in the app's one shared map by `AppBuilder::with_state`; that map
/// reaches each request as one `Shared` extension, which the state layer
/// (`States::layer`, outside the app's own layers) inserts. Read by the
/// [`State`] extractor alone.
#[derive(Clone)]
pub(crate) struct Registered<S>(pub(crate) S);

/// Why the [`State`] extractor failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StateRejection {
    /// 500 `state_missing`: no value of the type was registered.
    #[error(
        "this handler takes State<{type_name}>, but the app has no state of that type; register it with app().with_state(..)"
    )]
    Missing {
        /// The state type the handler asked for.
        type_name: &'static str,
    },
}

impl ProblemDetails for StateRejection {
    fn problem_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        match self {
            Self::Missing { .. } => Some(crate::codes::STATE_MISSING),
        }
    }

    /// The app is misconfigured: every request to this handler fails until
    /// the operators register the state.
    fn log_for_operators(&self) {
        tracing::error!(error = %self, "state extractor rejected");
    }
}

autumn_base::problem_into_response!(StateRejection);

impl<S, B> FromRequestParts<B> for State<S>
where
    S: Clone + Send + Sync + 'static,
    B: Send + Sync,
{
    type Rejection = StateRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &B) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Shared>()
            .and_then(|shared| shared.0.get::<Registered<S>>())
            .map(|registered| State(registered.0.clone()))
            .ok_or(StateRejection::Missing {
                type_name: type_name::<S>(),
            })
    }
}

/// The values registered so far, by type.
#[derive(Clone, Default)]
pub(crate) struct States(http::Extensions);

/// How the registered values reach a request: one shared map in one
/// extension, so a request costs one reference count, not a copy of the
/// map and of every value in it.
///
/// Inserted by the state layer ([`States::layer`]), mounted only when the
/// app registered a value, inside the scope layer and outside the app's own
/// layers (so their middleware reads state too); read by the [`State`]
/// extractor.
#[derive(Clone)]
struct Shared(std::sync::Arc<http::Extensions>);

impl States {
    pub(crate) fn insert<S: Clone + Send + Sync + 'static>(&mut self, state: S) {
        self.0.insert(Registered(state));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A layer giving each request the registered values.
    pub(crate) fn layer(
        self,
    ) -> tower::util::MapRequestLayer<
        impl Fn(axum::extract::Request) -> axum::extract::Request + Clone,
    > {
        let shared = Shared(std::sync::Arc::new(self.0));
        tower::util::MapRequestLayer::new(move |mut request: axum::extract::Request| {
            request.extensions_mut().insert(shared.clone());
            request
        })
    }
}
