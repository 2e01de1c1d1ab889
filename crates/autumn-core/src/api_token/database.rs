//! [`DbApiTokenStore`]: API tokens in the app database's `autumn_api_tokens`
//! table, on PostgreSQL or SQLite.

use autumn_base::database::{CachedExt as _, DbConnection, DbError, DbPool};
use diesel::QueryableByName;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Binary, Nullable, Text};
use diesel_async::RunQueryDsl as _;

use crate::sql::on_backend;

use super::store::{ApiTokenFuture, ApiTokenRecord, ApiTokenStore, ApiTokenStoreError};

/// $1..$8: the columns in this order.
const INSERT: &str = "INSERT INTO autumn_api_tokens \
     (prefix, token_hash, principal, name, created_at, expires_at, last_used_at, revoked_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// $1 prefix.
const FIND: &str = "SELECT prefix, token_hash, principal, name, created_at, expires_at, \
     last_used_at, revoked_at FROM autumn_api_tokens WHERE prefix = $1";

/// $1 principal.
const LIST: &str = "SELECT prefix, token_hash, principal, name, created_at, expires_at, \
     last_used_at, revoked_at FROM autumn_api_tokens WHERE principal = $1 \
     ORDER BY created_at, prefix";

/// $1 prefix, $2 now.
const REVOKE: &str =
    "UPDATE autumn_api_tokens SET revoked_at = $2 WHERE prefix = $1 AND revoked_at IS NULL";

/// $1 prefix, $2 now, $3 stale before: the condition makes replicas that
/// see the same token used in the same minute write once between them.
const TOUCH: &str = "UPDATE autumn_api_tokens SET last_used_at = $2 \
     WHERE prefix = $1 AND (last_used_at IS NULL OR last_used_at <= $3)";

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    prefix: String,
    #[diesel(sql_type = Binary)]
    token_hash: Vec<u8>,
    #[diesel(sql_type = Text)]
    principal: String,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    expires_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_used_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    revoked_at: Option<i64>,
}

impl From<Row> for ApiTokenRecord {
    fn from(row: Row) -> Self {
        let millis = |value: i64| u64::try_from(value).unwrap_or(0);
        Self {
            prefix: row.prefix,
            token_hash: row.token_hash,
            principal: row.principal,
            name: row.name,
            created_at_millis: millis(row.created_at),
            expires_at_millis: row.expires_at.map(millis),
            last_used_at_millis: row.last_used_at.map(millis),
            revoked_at_millis: row.revoked_at.map(millis),
        }
    }
}

/// API tokens in the app database (`[database] url`), shared by every
/// replica on that database.
///
/// Each token is one row of `autumn_api_tokens`, keyed by its public prefix
/// and holding the token's SHA-256 hash, never the token. The table comes
/// from the framework migrations
/// ([`FRAMEWORK_MIGRATIONS`](autumn_base::database::FRAMEWORK_MIGRATIONS)),
/// which launch runs. Every operation is one statement, prepared once per
/// connection.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use autumn_core::api_token::{ApiTokens, DbApiTokenStore};
/// use autumn_base::database::DbPool;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = DbPool::new("postgres://postgres@127.0.0.1/app", 8, Duration::from_secs(5))?;
/// autumn_base::database::FRAMEWORK_MIGRATIONS.run(&pool).await?;
/// let tokens = ApiTokens::new(Arc::new(DbApiTokenStore::new(pool)));
/// let created = tokens.create("agent-7", "nightly sync", None).await?;
/// println!("{}", created.token());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DbApiTokenStore {
    pool: DbPool,
}

impl DbApiTokenStore {
    /// A store on `pool`. Run the framework migrations first (launch does).
    #[must_use]
    pub fn new(pool: DbPool) -> Self {
        Self { pool }
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    async fn conn(&self, operation: &str) -> Result<DbConnection, ApiTokenStoreError> {
        self.pool
            .get()
            .await
            .map_err(|error| failed(operation, &error))
    }
}

/// A database failure during `operation`; passwords in the message masked.
fn failed(operation: &str, error: &DbError) -> ApiTokenStoreError {
    ApiTokenStoreError::Backend(autumn_base::redact_passwords(&format!(
        "the database failed to {operation} an API token: {error}"
    )))
}

fn unsupported_backend() -> ApiTokenStoreError {
    ApiTokenStoreError::Backend(
        "the database pool's backend is not enabled for API tokens (enable autumn-core's `postgres` or `sqlite` feature)".into(),
    )
}

fn query_failed(operation: &str) -> impl Fn(DieselError) -> ApiTokenStoreError + '_ {
    move |error| failed(operation, &DbError::from(error))
}

fn as_i64(millis: u64) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}

impl ApiTokenStore for DbApiTokenStore {
    fn insert<'a>(&'a self, record: &'a ApiTokenRecord) -> ApiTokenFuture<'a, ()> {
        Box::pin(async move {
            let inserted = on_backend!(self, "insert", INSERT, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(&record.prefix)
                    .bind::<Binary, _>(&record.token_hash)
                    .bind::<Text, _>(&record.principal)
                    .bind::<Text, _>(&record.name)
                    .bind::<BigInt, _>(as_i64(record.created_at_millis))
                    .bind::<Nullable<BigInt>, _>(record.expires_at_millis.map(as_i64))
                    .bind::<Nullable<BigInt>, _>(record.last_used_at_millis.map(as_i64))
                    .bind::<Nullable<BigInt>, _>(record.revoked_at_millis.map(as_i64))
                    .cached()
                    .execute(conn)
                    .await
            });
            match inserted {
                Ok(_) => Ok(()),
                Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                    Err(ApiTokenStoreError::Duplicate(record.prefix.clone()))
                }
                Err(error) => Err(query_failed("insert")(error)),
            }
        })
    }

    fn find<'a>(&'a self, prefix: &'a str) -> ApiTokenFuture<'a, Option<ApiTokenRecord>> {
        Box::pin(async move {
            let rows: Vec<Row> = on_backend!(self, "find", FIND, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(prefix)
                    .cached()
                    .load(conn)
                    .await
                    .map_err(query_failed("find"))?
            });
            Ok(rows.into_iter().next().map(ApiTokenRecord::from))
        })
    }

    fn revoke<'a>(&'a self, prefix: &'a str, now_millis: u64) -> ApiTokenFuture<'a, bool> {
        Box::pin(async move {
            let changed = on_backend!(self, "revoke", REVOKE, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(prefix)
                    .bind::<BigInt, _>(as_i64(now_millis))
                    .cached()
                    .execute(conn)
                    .await
                    .map_err(query_failed("revoke"))?
            });
            Ok(changed > 0)
        })
    }

    fn touch<'a>(
        &'a self,
        prefix: &'a str,
        now_millis: u64,
        stale_before_millis: u64,
    ) -> ApiTokenFuture<'a, bool> {
        Box::pin(async move {
            let changed = on_backend!(self, "touch", TOUCH, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(prefix)
                    .bind::<BigInt, _>(as_i64(now_millis))
                    .bind::<BigInt, _>(as_i64(stale_before_millis))
                    .cached()
                    .execute(conn)
                    .await
                    .map_err(query_failed("touch"))?
            });
            Ok(changed > 0)
        })
    }

    fn list<'a>(&'a self, principal: &'a str) -> ApiTokenFuture<'a, Vec<ApiTokenRecord>> {
        Box::pin(async move {
            let rows: Vec<Row> = on_backend!(self, "list", LIST, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(principal)
                    .cached()
                    .load(conn)
                    .await
                    .map_err(query_failed("list"))?
            });
            Ok(rows.into_iter().map(ApiTokenRecord::from).collect())
        })
    }
}
