//! What the framework's own tables (sessions, API tokens) share: one
//! statement run on whichever database the pool is.

/// Runs `$body` with `$conn` bound to the backend's connection and `$sql`
/// the statement in the backend's dialect (`$1` placeholders, rewritten for
/// SQLite). A backend autumn-idempotency was built with but this crate was
/// not returns the caller's `unsupported_backend()` error.
macro_rules! on_backend {
    ($connection:expr, $statement:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $connection {
            #[cfg(feature = "postgres")]
            autumn_idempotency::database::DbConnection::Postgres(mut object) => {
                let $conn = &mut *object;
                let $sql = $statement;
                $body
            }
            #[cfg(feature = "sqlite")]
            autumn_idempotency::database::DbConnection::Sqlite(mut object) => {
                let $conn = &mut *object;
                let $sql = autumn_idempotency::database::sqlite_params($statement);
                $body
            }
            #[allow(unreachable_patterns)]
            _ => return Err(unsupported_backend()),
        }
    };
}

pub(crate) use on_backend;
