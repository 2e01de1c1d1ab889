//! Removing expired sessions from stores that do not expire them by
//! themselves.

use std::sync::Arc;
use std::time::Duration;

use autumn_base::clock::SharedClock;

use super::store::SessionStore;

/// The most sessions one sweep removes; the next sweep takes the rest.
const BATCH: u64 = 1_000;

/// Removes expired sessions from `store` every `every`, in bounded batches,
/// until the runtime shuts down. A failed sweep is logged and tried again at
/// the next tick.
pub fn spawn_sweeper(
    store: Arc<dyn SessionStore>,
    clock: SharedClock,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            sweep(store.as_ref(), clock.now_millis()).await;
        }
    })
}

/// One sweep: batches until a batch comes back short.
pub(crate) async fn sweep(store: &dyn SessionStore, now_millis: u64) -> u64 {
    let mut removed = 0;
    loop {
        match store.delete_expired(now_millis, BATCH).await {
            Ok(count) => {
                removed += count;
                if count < BATCH {
                    return removed;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "could not remove expired sessions; trying again later");
                return removed;
            }
        }
    }
}
