//! Shared stores decide expiry by their own clock (Redis's `TIME`, the
//! database's time), never by a replica's. Two replicas share each store:
//! one on the system clock, one whose host clock runs ten minutes ahead
//! (an [`AheadClock`], not a manual one, so both leave time to the store).
//! The replica ahead must see the other's lock as live, never take it over
//! (the request would run twice at once), and replay the record once it is
//! there; the lock it takes itself must last its TTL by the store's clock,
//! not ten minutes more; on a database its sweep must leave live rows
//! alone, and what it writes in the app's transaction (a record, recovery
//! points) must expire by the database's time too.

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::clock::{Clock, SharedClock, SystemClock};
use autumn_idempotency::{Claim, IdempotencyRecord, IdempotencyStore};
use http::{HeaderValue, StatusCode};

use crate::support::clocks::AheadClock;

/// How far the second replica's host clock runs ahead.
const AHEAD: Duration = Duration::from_secs(600);
/// The lock's TTL: far shorter than [`AHEAD`], so a store that believed the
/// replica ahead would see the lock long expired.
const LOCK: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(3600);
/// What may pass between a store's reading of its clock and this host's
/// (the same machine, so the same clock): a slow test run, nothing more.
const SLACK: Duration = Duration::from_secs(10);

fn ahead() -> SharedClock {
    Arc::new(AheadClock::by(AHEAD))
}

fn record(body: &'static str) -> IdempotencyRecord {
    IdempotencyRecord::new(
        StatusCode::CREATED,
        [(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        )],
        body,
    )
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("millis fit")
}

/// `on_time` and `ahead` share one backend; `ahead`'s clock runs
/// [`AHEAD`] in front.
async fn a_replica_ahead_honours_live_locks(
    on_time: Arc<dyn IdempotencyStore>,
    ahead: Arc<dyn IdempotencyStore>,
) {
    assert_eq!(
        on_time.claim("k", "a", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    assert_eq!(
        ahead.claim("k", "b", LOCK).await.expect("claim"),
        Claim::InFlight,
        "the replica ahead took over a live lock: the request would run twice"
    );
    assert!(
        !ahead.try_lock("k", "b", LOCK).await.expect("lock"),
        "the replica ahead locked a live lock"
    );
    assert!(
        !ahead
            .set("k", "b", record("b"), vec![2; 32], TTL)
            .await
            .expect("set"),
        "the replica ahead wrote over a live lock"
    );
    let entry = ahead.get("k").await.expect("get").expect("a live entry");
    assert!(
        entry.is_locked(),
        "the replica ahead reads the lock as gone"
    );
    assert!(
        on_time.renew_lock("k", "a", LOCK).await.expect("renew"),
        "the heartbeat renews its own lock"
    );
    assert!(
        on_time
            .finish("k", "a", record("a"), vec![1; 32], TTL)
            .await
            .expect("finish")
    );
    assert_eq!(
        ahead.claim("k", "c", LOCK).await.expect("claim"),
        Claim::Completed {
            record: record("a"),
            fingerprint: vec![1; 32],
        },
        "the replica ahead replays the record"
    );

    // Taken by the replica ahead: its lock lasts the TTL on the store's
    // clock, not the TTL and ten minutes.
    assert_eq!(
        ahead.claim("late", "b", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    let before = SystemClock.now_millis();
    let state = on_time
        .inspect("late")
        .await
        .expect("inspect")
        .expect("a live lock");
    let expires = state.lock_expires_at.expect("a lock deadline");
    assert!(
        expires <= before + millis(LOCK + SLACK),
        "the lock the replica ahead took ends {} ms from now, not within its {} ms TTL",
        expires.saturating_sub(before),
        millis(LOCK)
    );
    assert!(expires + millis(SLACK) > before + millis(LOCK));
    let taken = state.lock_taken_at.expect("when the lock was taken");
    assert!(
        taken <= before + millis(SLACK),
        "taken at {taken}, now {before}"
    );
    let observed = state.observed_at.expect("the store says when it looked");
    assert!(observed.abs_diff(before) <= millis(SLACK));
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::support::redis::cluster::shared_cluster;
    use crate::support::redis::{ValkeyServer, require_redis, unique_prefix};
    use autumn_idempotency::RedisIdempotencyStore;

    /// A replica on the system clock and one ahead, on one prefix at `url`.
    fn replicas(url: &str) -> (Arc<dyn IdempotencyStore>, Arc<dyn IdempotencyStore>) {
        let prefix = unique_prefix();
        let store = |clock: SharedClock| -> Arc<dyn IdempotencyStore> {
            Arc::new(
                RedisIdempotencyStore::new(url, &prefix)
                    .expect("a valid Redis URL")
                    .with_clock(clock),
            )
        };
        (store(Arc::new(SystemClock)), store(ahead()))
    }

    #[tokio::test]
    async fn on_redis_a_replica_ahead_honours_live_locks() {
        let (on_time, ahead) = replicas(&require_redis());
        a_replica_ahead_honours_live_locks(on_time, ahead).await;
    }

    #[tokio::test]
    async fn on_a_redis_cluster_a_replica_ahead_honours_live_locks() {
        let (on_time, ahead) = replicas(&shared_cluster().url());
        a_replica_ahead_honours_live_locks(on_time, ahead).await;
    }

    #[tokio::test]
    async fn on_valkey_a_replica_ahead_honours_live_locks() {
        let server = ValkeyServer::new();
        let (on_time, ahead) = replicas(&server.url());
        a_replica_ahead_honours_live_locks(on_time, ahead).await;
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod database {
    use super::*;
    use crate::support::database;
    use autumn_base::database::{DbConnection, DbPool};
    use autumn_idempotency::clock::ManualClock;
    use autumn_idempotency::database::DbIdempotencyStore;
    use autumn_idempotency::{IdempotencyContext, IdempotencyLayer};
    use axum::Router;
    use axum::body::Body;
    use axum::response::{IntoResponse as _, Response};
    use axum::routing::post;
    use http::Request;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    fn store(url: &str, clock: SharedClock) -> DbIdempotencyStore {
        let pool = DbPool::new(url, 4, Duration::from_secs(5)).expect("pool");
        DbIdempotencyStore::new(pool).with_clock(clock)
    }

    async fn replicas_honour_live_locks(url: &str) {
        a_replica_ahead_honours_live_locks(
            Arc::new(store(url, Arc::new(SystemClock))),
            Arc::new(store(url, ahead())),
        )
        .await;
    }

    /// The replica ahead sweeps by the database's time: a live lock stays,
    /// a row dead by the database's time goes.
    async fn a_sweep_by_a_replica_ahead_keeps_live_rows(url: &str) {
        let on_time = store(url, Arc::new(SystemClock));
        let ahead = store(url, ahead());
        assert_eq!(
            on_time.claim("live", "a", LOCK).await.expect("claim"),
            Claim::Acquired
        );
        // Written an hour ago (a test clock's time decides for its own
        // store): dead by now on any clock.
        let hour_ago = ManualClock::starting_at(SystemClock.now_millis() - 3_600_000);
        let past = store(url, Arc::new(hour_ago));
        assert!(past.try_lock("dead", "o", LOCK).await.expect("lock"));

        assert_eq!(
            ahead.sweep_expired().await.expect("sweep"),
            1,
            "the sweep deleted a live lock, or missed a dead one"
        );
        assert_eq!(
            ahead.claim("live", "b", LOCK).await.expect("claim"),
            Claim::InFlight,
            "the live lock's row is gone"
        );
        assert!(on_time.get("dead").await.expect("get").is_none());
    }

    /// What the handler of [`a_record_written_in_the_apps_transaction`]
    /// does with the database, in the app's connection: every step that
    /// decides by time, each answered by the database's.
    async fn steps<C>(context: &IdempotencyContext, conn: &mut C) -> Result<Response, String>
    where
        C: autumn_idempotency::database::IdempotencyConnection + ?Sized,
    {
        let failed = |e: autumn_idempotency::database::TxError| e.to_string();
        if context
            .recovery_point_in(conn)
            .await
            .map_err(failed)?
            .is_some()
        {
            return Err("a recovery point before any was set".to_owned());
        }
        context
            .set_recovery_point_in(conn, "charged")
            .await
            .map_err(failed)?;
        let point = context.recovery_point_in(conn).await.map_err(failed)?;
        if point.as_deref() != Some("charged") {
            return Err(format!("the recovery point read back as {point:?}"));
        }
        if context
            .adopt_recovery_point("no-such-key")
            .await
            .map_err(failed)?
        {
            return Err("adopted a recovery point from nowhere".to_owned());
        }
        let response = (StatusCode::CREATED, "paid").into_response();
        let response = context.commit_in(conn, response).await.map_err(failed)?;
        // Before the layer rewrites it: the record as the transaction wrote it.
        let state = context
            .store()
            .inspect(context.storage_key())
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no record after the commit")?;
        let before = SystemClock.now_millis();
        let expires = state
            .record_expires_at
            .ok_or("a record without a deadline")?;
        if expires > before + millis(TTL + SLACK) {
            return Err(format!(
                "the committed record ends {} ms from now, past its {} ms TTL",
                expires - before,
                millis(TTL)
            ));
        }
        Ok(response)
    }

    /// A replica ahead writes a record and recovery points in the app's
    /// transaction: each decision and deadline is the database's time.
    async fn a_record_written_in_the_apps_transaction(url: &str) {
        let store: Arc<dyn IdempotencyStore> = Arc::new(store(url, ahead()));
        let pool = DbPool::new(url, 4, Duration::from_secs(5)).expect("pool");
        let app = Router::new()
            .route(
                "/pay",
                post(move |context: IdempotencyContext| {
                    let pool = pool.clone();
                    async move {
                        let outcome = match pool.get().await {
                            #[cfg(feature = "postgres")]
                            Ok(DbConnection::Postgres(mut conn)) => {
                                steps(&context, &mut *conn).await
                            }
                            #[cfg(feature = "sqlite")]
                            Ok(DbConnection::Sqlite(mut conn)) => steps(&context, &mut *conn).await,
                            Err(error) => Err(error.to_string()),
                            #[allow(unreachable_patterns)]
                            Ok(_) => Err("a backend this build lacks".to_owned()),
                        };
                        outcome.unwrap_or_else(|error| {
                            (StatusCode::INTERNAL_SERVER_ERROR, error).into_response()
                        })
                    }
                }),
            )
            .layer(
                IdempotencyLayer::new(store)
                    .with_ttl(TTL)
                    .with_in_flight_ttl(LOCK)
                    .with_clock(ahead()),
            );
        let request = || {
            Request::post("/pay")
                .header("idempotency-key", "pay-1")
                .body(Body::empty())
                .expect("a request")
        };
        let first = app.clone().oneshot(request()).await.expect("infallible");
        let status = first.status();
        let body = first.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(status, StatusCode::CREATED, "{body:?}");
        assert_eq!(&body[..], b"paid");
        let replay = app.oneshot(request()).await.expect("infallible");
        assert_eq!(replay.status(), StatusCode::CREATED);
        let body = replay.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"paid", "replayed");
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn on_postgres_a_record_written_in_the_apps_transaction_follows_its_time() {
        let schema = database::fresh_postgres_schema();
        a_record_written_in_the_apps_transaction(schema.url()).await;
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn on_sqlite_a_record_written_in_the_apps_transaction_follows_its_time() {
        a_record_written_in_the_apps_transaction(&database::fresh_sqlite_file()).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn on_postgres_a_replica_ahead_honours_live_locks() {
        let schema = database::fresh_postgres_schema();
        replicas_honour_live_locks(schema.url()).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn on_postgres_a_sweep_by_a_replica_ahead_keeps_live_rows() {
        let schema = database::fresh_postgres_schema();
        a_sweep_by_a_replica_ahead_keeps_live_rows(schema.url()).await;
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn on_sqlite_a_replica_ahead_honours_live_locks() {
        replicas_honour_live_locks(&database::fresh_sqlite_file()).await;
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn on_sqlite_a_sweep_by_a_replica_ahead_keeps_live_rows() {
        a_sweep_by_a_replica_ahead_keeps_live_rows(&database::fresh_sqlite_file()).await;
    }
}
