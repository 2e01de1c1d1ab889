//! What generated repositories (`#[autumn_web::repository]`) stand on: the
//! connection they hold ([`RepoDb`]), the transaction their mutations run
//! in ([`RepoTx`]), paging ([`Paging`], [`Page`]), and writing an
//! `after_*_commit` hook's row in that transaction.
//!
//! The guide is `docs/repositories.md` (`autumn_web::docs::repositories`).

mod page;
mod tx;

pub use page::{Page, Paging};
pub use tx::{RepoDb, RepoTx};

use serde::Serialize;

use crate::jobs::enqueue;

/// Writes the row of `hook` for `record` (its id `id`) in `tx`: what a
/// generated repository does after each mutation that declared a hook.
///
/// # Errors
///
/// The database's error, or a `SerializationError` when `record` cannot be
/// turned into JSON.
pub async fn enqueue_hook<R: Serialize + Sync>(
    tx: &mut RepoTx<'_>,
    hook: &str,
    id: &(dyn std::fmt::Display + Sync),
    record: &R,
) -> Result<bool, diesel::result::Error> {
    let payload = serde_json::to_string(record)
        .map_err(|error| diesel::result::Error::SerializationError(Box::new(error)))?;
    let context = tx.context().clone();
    enqueue(tx, &context, hook, &id.to_string(), &payload).await
}
