//! The statements on `autumn_commit_jobs`: writing a row in the mutation's
//! transaction, and the worker's claim, lease renewal, finish, retry,
//! dead-letter and retention sweep.

// Statement caching is a PostgreSQL setting.
#[cfg(feature = "postgres")]
use autumn_base::database::CachedExt as _;
use autumn_base::database::ExpiringTable;
#[cfg(feature = "sqlite")]
use autumn_base::database::sqlite_params;
use autumn_base::database::{DbConnection, DbError, DbPool};
use autumn_idempotency::database::{IdempotencyConnection, TxConnection};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel_async::RunQueryDsl as _;

use super::context::MutationContext;

/// Runs `$body` on a connection of `$pool`: `$conn` the connection, and
/// `$sql` a function giving a statement in its dialect (PostgreSQL's `$N`
/// as written, SQLite's `?N`). The one place for the match on the backend
/// that every statement below needs.
macro_rules! on_pool {
    ($pool:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $pool.get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut conn) => {
                let $conn = &mut *conn;
                let $sql = |statement: &str| statement.to_owned();
                $body
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut conn) => {
                let $conn = &mut *conn;
                let $sql = |statement: &str| sqlite_params(statement);
                $body
            }
            #[allow(unreachable_patterns)]
            _ => return Err(no_driver()),
        }
    };
}

/// $1 hook, $2 record id, $3 key, $4 payload, $5 now, $6 when it is due, $7
/// priority, $8 the queuing request's id, $9 the queuing span's
/// `traceparent`. A
/// duplicate attempt of the same request finds its row and writes none.
const ENQUEUE: &str = "INSERT INTO autumn_commit_jobs \
       (hook, record_id, idempotency_key, payload, state, attempts, run_at, created_at, priority, request_id, trace_context) \
     VALUES ($1, $2, $3, $4, 'pending', 0, $6, $5, $7, $8, $9) \
     ON CONFLICT (idempotency_key, hook, record_id) DO NOTHING";

/// A queue row to write.
pub(crate) struct NewRow<'a> {
    pub(crate) hook: &'a str,
    pub(crate) record_id: String,
    /// What the row is unique by beside its hook and record: a request's
    /// storage key, or none (every row its own).
    pub(crate) idempotency_key: Option<String>,
    pub(crate) payload: String,
    /// When it is due: 0 is at once, whatever the clock of the worker that
    /// reads it.
    pub(crate) run_at: u64,
    pub(crate) now: u64,
    /// Among one queue's due jobs, the higher runs first.
    pub(crate) priority: i32,
    /// The id of the request that queued it.
    pub(crate) request_id: Option<String>,
    /// The W3C `traceparent` of the span that queued it, while traces are
    /// exported: the job's span links to it.
    pub(crate) trace_context: Option<String>,
}

/// $1 the hooks (an array), $2 now, $3 lease end, $4 batch, $5 max
/// attempts. The highest priority first, then the longest due. Moves
/// `run_at` to the end of the lease, so a worker that dies mid-run leaves
/// the job due again once the lease is over.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const CLAIM: &str = "UPDATE autumn_commit_jobs SET attempts = attempts + 1, run_at = $3 \
     WHERE id IN (SELECT id FROM autumn_commit_jobs \
       WHERE hook = ANY($1) AND state = 'pending' AND run_at <= $2 AND attempts < $5 \
       ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) \
     RETURNING id, hook, record_id, idempotency_key, payload, attempts, request_id, trace_context";

/// SQLite runs one writer at a time: nothing to skip. ?1 the hooks as a
/// JSON array.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
const CLAIM_SQLITE: &str = "UPDATE autumn_commit_jobs SET attempts = attempts + 1, run_at = ?3 \
     WHERE id IN (SELECT id FROM autumn_commit_jobs \
       WHERE hook IN (SELECT value FROM json_each(?1)) AND state = 'pending' \
         AND run_at <= ?2 AND attempts < ?5 \
       ORDER BY priority DESC, run_at, id LIMIT ?4) \
     RETURNING id, hook, record_id, idempotency_key, payload, attempts, request_id, trace_context";

/// When a finished row may go, given `$E` (now plus the state's retention)
/// and `$K` (how long a keyed row must outlive its creation): a row written
/// under an idempotency key is kept while a retry of that request could
/// still run the handler again, since the row is what stops a second job.
macro_rules! expiry {
    ($e:literal, $k:literal) => {
        concat!(
            "CASE WHEN idempotency_key IS NOT NULL AND created_at + ",
            $k,
            " > ",
            $e,
            " THEN created_at + ",
            $k,
            " ELSE ",
            $e,
            " END"
        )
    };
}

/// $1 hook, $2 now, $3 max attempts, $4 now plus the dead retention, $5 the
/// keyed hold: jobs whose last attempt never finished (the worker died in
/// it, and its lease is over).
const EXHAUSTED: &str = concat!(
    "UPDATE autumn_commit_jobs SET state = 'dead', finished_at = $2, \
       last_error = 'the last attempt did not finish within its lease', expires_at = ",
    expiry!("$4", "$5"),
    " WHERE hook = $1 AND state = 'pending' AND run_at <= $2 AND attempts >= $3"
);

/// $1 id, $2 attempt, $3 now, $4 now plus the done retention, $5 the keyed
/// hold. Fenced on the attempt: a worker whose lease lapsed and whose job
/// another worker took over changes nothing.
const DONE: &str = concat!(
    "UPDATE autumn_commit_jobs SET state = 'done', finished_at = $3, last_error = NULL, expires_at = ",
    expiry!("$4", "$5"),
    " WHERE id = $1 AND attempts = $2 AND state = 'pending'"
);

/// $1 id, $2 attempt, $3 when to run again, $4 error.
const RETRY: &str = "UPDATE autumn_commit_jobs SET run_at = $3, last_error = $4 \
     WHERE id = $1 AND attempts = $2 AND state = 'pending'";

/// $1 id, $2 attempt, $3 now, $4 error, $5 now plus the dead retention, $6
/// the keyed hold.
const DEAD: &str = concat!(
    "UPDATE autumn_commit_jobs SET state = 'dead', finished_at = $3, last_error = $4, expires_at = ",
    expiry!("$5", "$6"),
    " WHERE id = $1 AND attempts = $2 AND state = 'pending'"
);

/// $1 id, $2 attempt, $3 the lease's new end: a running job's heartbeat,
/// fenced on the attempt like a finish.
const RENEW: &str = "UPDATE autumn_commit_jobs SET run_at = $3 \
     WHERE id = $1 AND attempts = $2 AND state = 'pending'";

/// Finished rows past their `expires_at`, deleted in batches, one replica
/// at a time (see [`ExpiringTable::sweep`]).
pub(crate) const FINISHED: ExpiringTable = ExpiringTable {
    table: "autumn_commit_jobs",
    delete_batch: "DELETE FROM autumn_commit_jobs WHERE id IN ( \
        SELECT id FROM autumn_commit_jobs WHERE expires_at <= $1 \
        ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    delete_batch_sqlite: Some(
        "DELETE FROM autumn_commit_jobs WHERE id IN ( \
        SELECT id FROM autumn_commit_jobs WHERE expires_at <= ?1 \
        ORDER BY expires_at LIMIT ?2)",
    ),
};

/// When finished rows may be deleted (see [`expiry!`]), as the statements
/// take it: milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expiry {
    /// Now plus the retention of the state the row ends in.
    pub(crate) at: u64,
    /// How long a keyed row outlives its creation at least.
    pub(crate) keyed_hold: u64,
}

/// Writes the queue row of `hook` for `record_id` on `conn`, in the caller's
/// transaction, so it commits with the mutation or not at all. Returns
/// whether a row was written: `false` when a duplicate attempt of the same
/// idempotent request already wrote it.
///
/// Generated repositories call it; call it yourself for a mutation written
/// by hand, then [`MutationContext::committed`] after the commit.
///
/// # Errors
///
/// The database's error; `QueryBuilderError` on a connection that cannot
/// hold the queue (a [`ShardedDb`](crate::db::ShardedDb)).
pub async fn enqueue<C>(
    conn: &mut C,
    context: &MutationContext,
    hook: &str,
    record_id: &str,
    payload: &str,
) -> Result<bool, diesel::result::Error>
where
    C: IdempotencyConnection + ?Sized,
{
    let row = NewRow {
        hook,
        record_id: record_id.to_owned(),
        idempotency_key: context.idempotency_key().map(str::to_owned),
        payload: payload.to_owned(),
        run_at: 0,
        now: context.clock().now_millis(),
        priority: 0,
        request_id: context.request_id().map(str::to_owned),
        trace_context: crate::telemetry::trace::current_traceparent(),
    };
    insert(conn, &row).await
}

/// Writes `row` on `conn` (in the caller's transaction, if any); `false`
/// when a row unique by the same key, hook and record exists.
pub(crate) async fn insert<C>(conn: &mut C, row: &NewRow<'_>) -> Result<bool, diesel::result::Error>
where
    C: IdempotencyConnection + ?Sized,
{
    let (now, run_at) = (as_i64(row.now), as_i64(row.run_at));
    macro_rules! run {
        ($conn:expr, $sql:expr) => {
            diesel::sql_query($sql)
                .bind::<Text, _>(row.hook)
                .bind::<Text, _>(&row.record_id)
                .bind::<Nullable<Text>, _>(row.idempotency_key.as_deref())
                .bind::<Text, _>(&row.payload)
                .bind::<BigInt, _>(now)
                .bind::<BigInt, _>(run_at)
                .bind::<Integer, _>(row.priority)
                .bind::<Nullable<Text>, _>(row.request_id.as_deref())
                .bind::<Nullable<Text>, _>(row.trace_context.as_deref())
        };
    }
    let written = match conn.idempotency_connection() {
        #[cfg(feature = "postgres")]
        Some(TxConnection::Postgres(conn)) => run!(conn, ENQUEUE).cached().execute(conn).await?,
        #[cfg(feature = "sqlite")]
        Some(TxConnection::Sqlite(conn)) => {
            run!(conn, sqlite_params(ENQUEUE)).execute(conn).await?
        }
        #[allow(unreachable_patterns)]
        _ => {
            return Err(diesel::result::Error::QueryBuilderError(
                "job rows live on the primary database; write them on a Db connection, not a ShardedDb".into(),
            ));
        }
    };
    Ok(written == 1)
}

/// Writes `row` on a connection of its own from `pool`, committed at once.
pub(crate) async fn insert_on(pool: &DbPool, row: &NewRow<'_>) -> Result<bool, DbError> {
    Ok(on_pool!(pool, |conn, _dialect| insert(conn, row).await?))
}

/// A claimed row.
#[derive(QueryableByName)]
pub(crate) struct Claimed {
    #[diesel(sql_type = BigInt)]
    pub(crate) id: i64,
    #[diesel(sql_type = Text)]
    pub(crate) hook: String,
    #[diesel(sql_type = Text)]
    pub(crate) record_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) idempotency_key: Option<String>,
    #[diesel(sql_type = Text)]
    pub(crate) payload: String,
    #[diesel(sql_type = Integer)]
    pub(crate) attempts: i32,
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) request_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) trace_context: Option<String>,
}

/// Claims up to `batch` due jobs of `hooks` (one queue's), the highest
/// priority first.
pub(crate) async fn claim(
    pool: &DbPool,
    hooks: &[String],
    now: u64,
    lease_end: u64,
    batch: u32,
    max_attempts: u32,
) -> Result<Vec<Claimed>, DbError> {
    let (now, lease_end) = (as_i64(now), as_i64(lease_end));
    let max = i32::try_from(max_attempts).unwrap_or(i32::MAX);
    let batch = i64::from(batch);
    macro_rules! run {
        ($conn:expr, $claim:expr, $hooks:ty, $hooks_value:expr) => {
            diesel::sql_query($claim)
                .bind::<$hooks, _>($hooks_value)
                .bind::<BigInt, _>(now)
                .bind::<BigInt, _>(lease_end)
                .bind::<BigInt, _>(batch)
                .bind::<Integer, _>(max)
                .load::<Claimed>($conn)
                .await?
        };
    }
    Ok(match pool.get().await? {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(mut conn) => {
            run!(&mut *conn, CLAIM, diesel::sql_types::Array<Text>, hooks)
        }
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(mut conn) => {
            let hooks_json = serde_json::Value::from(hooks.to_vec()).to_string();
            run!(&mut *conn, CLAIM_SQLITE, Text, &hooks_json)
        }
        #[allow(unreachable_patterns)]
        _ => return Err(no_driver()),
    })
}

/// Marks dead (to expire at `dead`) the jobs of `hook` whose last attempt
/// never finished: the worker died in it, and its lease is over. They are
/// never claimed again (out of attempts); this writes down why. Returns how
/// many.
pub(crate) async fn bury_exhausted(
    pool: &DbPool,
    hook: &str,
    now: u64,
    max_attempts: u32,
    dead: Expiry,
) -> Result<usize, DbError> {
    let max = i32::try_from(max_attempts).unwrap_or(i32::MAX);
    Ok(on_pool!(pool, |conn, sql| {
        diesel::sql_query(sql(EXHAUSTED))
            .bind::<Text, _>(hook)
            .bind::<BigInt, _>(as_i64(now))
            .bind::<Integer, _>(max)
            .bind::<BigInt, _>(as_i64(dead.at))
            .bind::<BigInt, _>(as_i64(dead.keyed_hold))
            .execute(conn)
            .await?
    }))
}

/// How a run ended, as written to its row.
pub(crate) enum Outcome<'a> {
    Done { expiry: Expiry },
    Retry { at: u64, error: &'a str },
    Dead { error: &'a str, expiry: Expiry },
}

/// Writes how run `attempt` of job `id` ended; `false` when the row was no
/// longer this run's (its lease lapsed and another worker took it over).
pub(crate) async fn finish(
    pool: &DbPool,
    id: i64,
    attempt: i32,
    now: u64,
    outcome: Outcome<'_>,
) -> Result<bool, DbError> {
    let now = as_i64(now);
    let updated = on_pool!(pool, |conn, sql| {
        let statement = |text: &str| {
            diesel::sql_query(sql(text))
                .bind::<BigInt, _>(id)
                .bind::<Integer, _>(attempt)
        };
        match outcome {
            Outcome::Done { expiry } => {
                statement(DONE)
                    .bind::<BigInt, _>(now)
                    .bind::<BigInt, _>(as_i64(expiry.at))
                    .bind::<BigInt, _>(as_i64(expiry.keyed_hold))
                    .execute(conn)
                    .await?
            }
            Outcome::Retry { at, error } => {
                statement(RETRY)
                    .bind::<BigInt, _>(as_i64(at))
                    .bind::<Text, _>(error)
                    .execute(conn)
                    .await?
            }
            Outcome::Dead { error, expiry } => {
                statement(DEAD)
                    .bind::<BigInt, _>(now)
                    .bind::<Text, _>(error)
                    .bind::<BigInt, _>(as_i64(expiry.at))
                    .bind::<BigInt, _>(as_i64(expiry.keyed_hold))
                    .execute(conn)
                    .await?
            }
        }
    });
    Ok(updated == 1)
}

/// Moves the end of run `attempt`'s lease on job `id` to `lease_end`;
/// `false` when the row is no longer this run's.
pub(crate) async fn renew(
    pool: &DbPool,
    id: i64,
    attempt: i32,
    lease_end: u64,
) -> Result<bool, DbError> {
    let updated = on_pool!(pool, |conn, sql| {
        diesel::sql_query(sql(RENEW))
            .bind::<BigInt, _>(id)
            .bind::<Integer, _>(attempt)
            .bind::<BigInt, _>(as_i64(lease_end))
            .execute(conn)
            .await?
    });
    Ok(updated == 1)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The pending jobs (due or not) of `hooks`.
pub(crate) async fn pending(pool: &DbPool, hooks: &[String]) -> Result<u64, DbError> {
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    const POSTGRES: &str =
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'pending' AND hook = ANY($1)";
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    const SQLITE: &str = "SELECT COUNT(*) AS n FROM autumn_commit_jobs \
         WHERE state = 'pending' AND hook IN (SELECT value FROM json_each(?1))";
    let counted: Count = match pool.get().await? {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(mut conn) => {
            diesel::sql_query(POSTGRES)
                .bind::<diesel::sql_types::Array<Text>, _>(hooks)
                .get_result(&mut *conn)
                .await?
        }
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(mut conn) => {
            diesel::sql_query(SQLITE)
                .bind::<Text, _>(serde_json::Value::from(hooks.to_vec()).to_string())
                .get_result(&mut *conn)
                .await?
        }
        #[allow(unreachable_patterns)]
        _ => return Err(no_driver()),
    };
    Ok(u64::try_from(counted.n).unwrap_or(0))
}

/// A dead job, as the `jobs dead` command and `GET /actuator/jobs/dead`
/// list it: never its payload unless asked for (it may hold personal data).
#[derive(QueryableByName, serde::Serialize)]
pub(crate) struct DeadJob {
    #[diesel(sql_type = BigInt)]
    pub(crate) id: i64,
    #[diesel(sql_type = Text)]
    pub(crate) hook: String,
    #[diesel(sql_type = Text)]
    pub(crate) record_id: String,
    #[diesel(sql_type = Integer)]
    pub(crate) attempts: i32,
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) last_error: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) finished_at: Option<i64>,
    /// The payload, when asked for: shown as the JSON it is.
    #[diesel(sql_type = Nullable<Text>)]
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_json")]
    pub(crate) payload: Option<String>,
}

/// A payload as the JSON value it holds (as text, should it not parse).
fn as_json<S: serde::Serializer>(
    payload: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize as _;
    match payload
        .as_deref()
        .map(serde_json::from_str::<serde_json::Value>)
    {
        Some(Ok(value)) => value.serialize(serializer),
        _ => payload.serialize(serializer),
    }
}

/// $1 the most rows. The payload column is read only by
/// [`LIST_DEAD_WITH_PAYLOADS`].
const LIST_DEAD: &str = "SELECT id, hook, record_id, attempts, last_error, finished_at, \
       CAST(NULL AS TEXT) AS payload \
     FROM autumn_commit_jobs WHERE state = 'dead' ORDER BY id LIMIT $1";

/// $1 the most rows.
const LIST_DEAD_WITH_PAYLOADS: &str = "SELECT id, hook, record_id, attempts, last_error, \
       finished_at, payload \
     FROM autumn_commit_jobs WHERE state = 'dead' ORDER BY id LIMIT $1";

/// $1 id: a dead job due again at once, with all its attempts.
const REVIVE: &str = "UPDATE autumn_commit_jobs SET state = 'pending', attempts = 0, run_at = 0, \
       finished_at = NULL, expires_at = NULL, last_error = NULL \
     WHERE id = $1 AND state = 'dead'";

/// $1 id.
const DISCARD: &str = "DELETE FROM autumn_commit_jobs WHERE id = $1 AND state = 'dead'";

/// Up to `limit` dead jobs, oldest first, with their payloads when
/// `with_payloads`.
pub(crate) async fn dead(
    pool: &DbPool,
    limit: i64,
    with_payloads: bool,
) -> Result<Vec<DeadJob>, DbError> {
    let statement = if with_payloads {
        LIST_DEAD_WITH_PAYLOADS
    } else {
        LIST_DEAD
    };
    Ok(on_pool!(pool, |conn, sql| {
        diesel::sql_query(sql(statement))
            .bind::<BigInt, _>(limit)
            .load::<DeadJob>(conn)
            .await?
    }))
}

/// Runs the dead job `id` again (`revive`) or deletes it; `false` when no
/// dead job has that id.
pub(crate) async fn settle_dead(pool: &DbPool, id: i64, revive: bool) -> Result<bool, DbError> {
    let statement = if revive { REVIVE } else { DISCARD };
    let changed = on_pool!(pool, |conn, sql| {
        diesel::sql_query(sql(statement))
            .bind::<BigInt, _>(id)
            .execute(conn)
            .await?
    });
    Ok(changed == 1)
}

fn no_driver() -> DbError {
    DbError::Connect("this build has no driver for the app database".to_owned())
}

fn as_i64(millis: u64) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}
