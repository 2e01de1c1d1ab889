//! Every API-token store against the same checks: memory, PostgreSQL (a
//! schema per test) and SQLite (a file per test), on the real databases.
//! Time is a `ManualClock`: nothing sleeps for a token to expire.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use crate::support::database;
use crate::support::database::FreshDatabase as _;

use std::sync::Arc;
use std::time::Duration;

use autumn_core::api_token::{
    ApiTokenRecord, ApiTokenRejection, ApiTokenStore, ApiTokenStoreError, ApiTokens,
    DbApiTokenStore, LAST_USED_EVERY, MemoryApiTokenStore,
};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbConnection, DbPool};
use diesel::sql_types::{Binary, Text};

/// A store under test, its clock, and its table when it has one.
struct Subject {
    tokens: ApiTokens,
    clock: Arc<ManualClock>,
    table: Option<DbPool>,
}

#[derive(diesel::QueryableByName)]
struct StoredRow {
    #[diesel(sql_type = Text)]
    prefix: String,
    #[diesel(sql_type = Binary)]
    token_hash: Vec<u8>,
    #[diesel(sql_type = Text)]
    everything: String,
}

impl Subject {
    fn over(store: Arc<dyn ApiTokenStore>, table: Option<DbPool>) -> Self {
        let clock = Arc::new(ManualClock::starting_at(1_700_000_000_000));
        Self {
            tokens: ApiTokens::new(store).with_clock(clock.clone()),
            clock,
            table,
        }
    }

    /// Every row of `autumn_api_tokens`, each with all its text columns
    /// joined (to look for the token in them).
    async fn rows(&self) -> Option<Vec<StoredRow>> {
        use diesel_async::RunQueryDsl as _;
        let pool = self.table.as_ref()?;
        let sql = "SELECT prefix, token_hash, \
            prefix || ' ' || principal || ' ' || name AS everything FROM autumn_api_tokens";
        let rows = match pool.get().await.expect("a connection") {
            DbConnection::Postgres(mut conn) => diesel::sql_query(sql).load(&mut *conn).await,
            DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).load(&mut *conn).await,
            _ => unreachable!("the tests build both backends"),
        };
        Some(rows.expect("read the tokens table"))
    }

    fn store(&self) -> &Arc<dyn ApiTokenStore> {
        self.tokens.store()
    }
}

fn memory() -> Subject {
    Subject::over(Arc::new(MemoryApiTokenStore::new()), None)
}

fn table(url: &str) -> Subject {
    let pool = DbPool::new(url, 4, Duration::from_secs(5)).expect("pool");
    Subject::over(Arc::new(DbApiTokenStore::new(pool.clone())), Some(pool))
}

fn postgres() -> Subject {
    // The store outlives this function: the schema stays, for a later run
    // to drop.
    table(&database::fresh_postgres_schema().keep())
}

/// The table through a real PgBouncer in transaction pooling mode, with
/// the statement cache off, as `[database] statement_cache = false` sets up.
fn postgres_via_pgbouncer() -> Subject {
    static BOUNCER: std::sync::OnceLock<database::PgBouncer> = std::sync::OnceLock::new();
    let url = BOUNCER
        .get_or_init(database::PgBouncer::start)
        .fresh_database();
    let pool = DbPool::with_statement_cache(&url, 4, Duration::from_secs(5), false).expect("pool");
    Subject::over(Arc::new(DbApiTokenStore::new(pool.clone())), Some(pool))
}

fn sqlite() -> Subject {
    table(&database::fresh_sqlite_file())
}

async fn create_shows_the_token_once_and_only_its_hash_is_stored(subject: Subject) {
    let created = subject
        .tokens
        .create("agent-7", "nightly sync", None)
        .await
        .expect("create");
    let token = created.token().to_owned();
    let secret = token.rsplit('_').next().expect("a secret part").to_owned();
    assert!(token.starts_with(&format!("atk_{}_", created.id())));
    assert!(secret.len() >= 40, "at least 160 secret bits: {secret}");
    assert!(!format!("{created:?}").contains(&secret), "Debug hides it");

    let kept = subject
        .store()
        .find(created.id())
        .await
        .expect("find")
        .expect("kept");
    assert_eq!(&kept, created.record());
    assert_eq!(kept.token_hash.len(), 32, "a SHA-256 hash");
    assert!(!contains(&kept.token_hash, secret.as_bytes()));
    assert!(!format!("{kept:?}").contains(&secret));
    // The store can only ever answer with the record, never the token: the
    // text is shown by `create` alone.
    assert_eq!(
        (kept.principal.as_str(), kept.name.as_str()),
        ("agent-7", "nightly sync")
    );

    if let Some(rows) = subject.rows().await {
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(row.prefix, created.id());
        assert_eq!(row.token_hash, kept.token_hash);
        assert!(!row.everything.contains(&secret), "{}", row.everything);
        assert!(!contains(&row.token_hash, secret.as_bytes()));
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

async fn lookup_is_by_prefix_and_a_wrong_secret_under_a_known_prefix_is_refused(subject: Subject) {
    let a = subject.tokens.create("a", "one", None).await.expect("a");
    let b = subject.tokens.create("b", "two", None).await.expect("b");
    assert_eq!(
        subject
            .tokens
            .authenticate(a.token())
            .await
            .expect("a")
            .id(),
        "a"
    );
    let principal = subject.tokens.authenticate(b.token()).await.expect("b");
    assert_eq!(
        (principal.id(), principal.token_name(), principal.token_id()),
        ("b", "two", b.id())
    );

    // a's prefix with b's secret: found by prefix, refused by the hash.
    let b_secret = b.token().rsplit('_').next().expect("secret");
    let spliced = format!("atk_{}_{b_secret}", a.id());
    for bad in [spliced.as_str(), "atk_0000000000000000_00", "Bearer x", ""] {
        assert_eq!(
            subject.tokens.authenticate(bad).await,
            Err(ApiTokenRejection::Invalid),
            "{bad}"
        );
    }
    let unknown = format!("atk_{}_{b_secret}", "f".repeat(16));
    assert_eq!(
        subject.tokens.authenticate(&unknown).await,
        Err(ApiTokenRejection::Invalid)
    );

    let duplicate = subject.store().insert(a.record()).await;
    assert_eq!(
        duplicate,
        Err(ApiTokenStoreError::Duplicate(a.id().to_owned()))
    );
    let listed: Vec<String> = subject
        .tokens
        .list("b")
        .await
        .expect("list")
        .into_iter()
        .map(|record: ApiTokenRecord| record.prefix)
        .collect();
    assert_eq!(listed, vec![b.id().to_owned()]);
}

async fn a_revoked_token_stops_working_at_once(subject: Subject) {
    let created = subject
        .tokens
        .create("agent", "ci", None)
        .await
        .expect("create");
    subject
        .tokens
        .authenticate(created.token())
        .await
        .expect("works");
    subject.clock.advance(Duration::from_millis(5));
    assert!(subject.tokens.revoke(created.id()).await.expect("revoke"));
    assert_eq!(
        subject.tokens.authenticate(created.token()).await,
        Err(ApiTokenRejection::Invalid)
    );
    assert!(!subject.tokens.revoke(created.id()).await.expect("again"));
    assert!(
        !subject
            .tokens
            .revoke("0000000000000000")
            .await
            .expect("none")
    );
    let kept = subject.store().find(created.id()).await.expect("find");
    assert_eq!(
        kept.and_then(|record| record.revoked_at_millis),
        Some(created.record().created_at_millis + 5)
    );
}

async fn a_token_expires_by_the_clock(subject: Subject) {
    let created = subject
        .tokens
        .create("agent", "short", Some(Duration::from_secs(60)))
        .await
        .expect("create");
    subject.clock.advance(Duration::from_millis(59_999));
    subject
        .tokens
        .authenticate(created.token())
        .await
        .expect("still valid");
    subject.clock.advance(Duration::from_millis(1));
    assert_eq!(
        subject.tokens.authenticate(created.token()).await,
        Err(ApiTokenRejection::Invalid)
    );
    let forever = subject
        .tokens
        .create("agent", "long", None)
        .await
        .expect("create");
    subject
        .clock
        .advance(Duration::from_secs(10 * 365 * 86_400));
    subject
        .tokens
        .authenticate(forever.token())
        .await
        .expect("no expiry");
}

async fn last_used_at_is_written_at_most_once_a_minute(subject: Subject) {
    let created = subject
        .tokens
        .create("agent", "ci", None)
        .await
        .expect("create");
    let last_used = || async {
        subject
            .store()
            .find(created.id())
            .await
            .expect("find")
            .expect("kept")
            .last_used_at_millis
    };
    assert_eq!(last_used().await, None);
    let start = created.record().created_at_millis;

    subject
        .tokens
        .authenticate(created.token())
        .await
        .expect("use");
    assert_eq!(last_used().await, Some(start));
    subject
        .clock
        .advance(LAST_USED_EVERY - Duration::from_millis(1));
    subject
        .tokens
        .authenticate(created.token())
        .await
        .expect("use");
    assert_eq!(last_used().await, Some(start), "not on every request");
    subject.clock.advance(Duration::from_millis(1));
    subject
        .tokens
        .authenticate(created.token())
        .await
        .expect("use");
    let minute = start + 60_000;
    assert_eq!(last_used().await, Some(minute), "once the minute is up");

    // Two replicas that both saw it stale write once between them.
    let now = minute + 60_000;
    let stale_before = now - 60_000;
    assert!(
        subject
            .store()
            .touch(created.id(), now, stale_before)
            .await
            .expect("touch")
    );
    assert!(
        !subject
            .store()
            .touch(created.id(), now, stale_before)
            .await
            .expect("touch")
    );
}

/// Runs each listed case as a test on every store.
macro_rules! on_every_store {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::memory()).await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::postgres()).await;
            })*
        }
        mod postgres_via_pgbouncer {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::postgres_via_pgbouncer()).await;
            })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::sqlite()).await;
            })*
        }
    };
}

on_every_store!(
    create_shows_the_token_once_and_only_its_hash_is_stored,
    lookup_is_by_prefix_and_a_wrong_secret_under_a_known_prefix_is_refused,
    a_revoked_token_stops_working_at_once,
    a_token_expires_by_the_clock,
    last_used_at_is_written_at_most_once_a_minute,
);
