//! How a request's route reaches the metrics layer: the router matches the
//! path far inside the layer, and the request (with its `MatchedPath`)
//! does not come back out. Rather than put a shared cell on every request
//! (an allocation each), the layer listens on this thread while it calls or
//! polls the services inside it, and the route's label layer, which axum
//! calls from within that call or poll, says here which route it is.
//!
//! Every framework layer between the two calls its inner service on the
//! request's own task, so the label is heard by the request it belongs to;
//! listening is undone when the call returns, panics included, so a label
//! never leaks to another request on the thread. A route whose service is
//! called from another task (an app layer that spawns one) is counted
//! `unmatched`.

use std::cell::Cell;
use std::sync::Arc;

use super::state::RouteMetrics;

/// What the thread has heard.
#[derive(Default)]
enum Heard {
    /// No metrics layer is listening.
    #[default]
    Nobody,
    /// A metrics layer is listening; no route has spoken.
    Listening,
    /// A route spoke.
    Route(Arc<RouteMetrics>),
}

thread_local! {
    static HEARD: Cell<Heard> = const { Cell::new(Heard::Nobody) };
}

/// Puts back what the thread had heard before a [`listen`] started.
struct Restore(Option<Heard>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            // Only fails while the thread is exiting, when nothing listens.
            let _ = HEARD.try_with(|heard| heard.set(before));
        }
    }
}

/// Runs `f` listening for a route label; returns what `f` returned and the
/// route that spoke during it, if any.
pub(crate) fn listen<T>(f: impl FnOnce() -> T) -> (T, Option<Arc<RouteMetrics>>) {
    let mut restore = Restore(Some(HEARD.replace(Heard::Listening)));
    let value = f();
    let heard = match restore.0.take() {
        Some(before) => HEARD.replace(before),
        None => Heard::Nobody,
    };
    let route = match heard {
        Heard::Route(route) => Some(route),
        Heard::Nobody | Heard::Listening => None,
    };
    (value, route)
}

/// Whether a metrics layer is listening on this thread now.
pub(crate) fn listening() -> bool {
    HEARD
        .try_with(|heard| {
            let current = heard.take();
            let listening = !matches!(current, Heard::Nobody);
            heard.set(current);
            listening
        })
        .unwrap_or(false)
}

/// Tells the listening metrics layer, if any, that its request reached
/// `route`; the innermost route to speak wins.
pub(crate) fn say(route: &Arc<RouteMetrics>) {
    let _ = HEARD.try_with(|heard| match heard.take() {
        Heard::Nobody => {}
        Heard::Listening | Heard::Route(_) => heard.set(Heard::Route(Arc::clone(route))),
    });
}

#[cfg(test)]
mod tests {
    use super::super::state::HttpMetrics;
    use super::*;

    #[test]
    fn a_route_is_heard_only_by_the_listen_it_spoke_in() {
        let metrics = HttpMetrics::default();
        let orders = metrics.route("/orders");
        // Nobody listens: nothing is kept for the next request.
        say(&orders);
        assert!(!listening());
        let ((), heard) = listen(|| {});
        assert!(heard.is_none());

        let ((), heard) = listen(|| {
            assert!(listening());
            say(&orders);
        });
        assert_eq!(
            heard.map(|r| r.route().to_owned()).as_deref(),
            Some("/orders")
        );
        assert!(!listening(), "listening ends with the call");
    }

    #[test]
    fn a_nested_listen_hears_its_own_route_and_the_outer_one_keeps_its_own() {
        let metrics = HttpMetrics::default();
        let (outer, inner) = (metrics.route("/outer"), metrics.route("/inner"));
        let (nested, heard) = listen(|| {
            say(&outer);
            let ((), nested) = listen(|| say(&inner));
            nested
        });
        assert_eq!(
            nested.map(|r| r.route().to_owned()).as_deref(),
            Some("/inner")
        );
        assert_eq!(
            heard.map(|r| r.route().to_owned()).as_deref(),
            Some("/outer")
        );
    }

    #[test]
    fn a_panic_while_listening_stops_the_listening() {
        let metrics = HttpMetrics::default();
        let orders = metrics.route("/orders");
        let caught = std::panic::catch_unwind(|| {
            listen(|| {
                say(&orders);
                panic!("in a handler");
            })
        });
        assert!(caught.is_err());
        assert!(!listening());
        let ((), heard) = listen(|| {});
        assert!(heard.is_none(), "the panicked request's route is gone");
    }
}
