//! What the framework's own tables (sessions, API tokens) share: one
//! statement run on whichever database the pool is, in a transaction of
//! its own when the pool keeps no prepared statements.

/// Runs `$body` for `$store`'s `$operation` on one of its pool's
/// connections, with `$conn` bound to the backend's connection and `$sql`
/// the statement in the backend's dialect (`$1` placeholders, rewritten for
/// SQLite). On a PostgreSQL pool without a statement cache it runs in a
/// transaction of its own (see `autumn_base::database::begin_uncached`),
/// whose failure to begin or commit is `query_failed($operation)`'s. A
/// backend autumn-idempotency was built with but this crate was not returns
/// the caller's `unsupported_backend()` error.
macro_rules! on_backend {
    ($store:expr, $operation:expr, $statement:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $store.conn($operation).await? {
            #[cfg(feature = "postgres")]
            autumn_base::database::DbConnection::Postgres(mut object) => {
                let uncached = !$store.pool.statement_cache();
                autumn_base::database::begin_uncached(&mut object, uncached)
                    .await
                    .map_err(query_failed($operation))?;
                let value = {
                    let $conn = &mut *object;
                    let $sql = $statement;
                    $body
                };
                autumn_base::database::end_uncached(&mut object, uncached)
                    .await
                    .map_err(query_failed($operation))?;
                value
            }
            #[cfg(feature = "sqlite")]
            autumn_base::database::DbConnection::Sqlite(mut object) => {
                let $conn = &mut *object;
                let $sql = autumn_base::database::sqlite_params($statement);
                $body
            }
            #[allow(unreachable_patterns)]
            _ => return Err(unsupported_backend()),
        }
    };
}

pub(crate) use on_backend;
