//! Crashes with real processes: the example's binary, killed with SIGKILL
//! (what dropping a [`ServerProcess`] does) at chosen points, restarted,
//! and run as two replicas on one database, on SQLite and on PostgreSQL.
//!
//! Each test has its own database (a temporary SQLite file, or a fresh
//! PostgreSQL schema), so they run in parallel. The in-flight TTL is
//! [`IN_FLIGHT_SECS`]; waiting for a dead process's lock to lapse is done
//! by polling until the answer changes, within [`DEADLINE`].

use std::process::Command;
use std::time::{Duration, Instant};

use autumn_web::test::{ServerProcess, TestDatabase};
use payments::{Charge, PAUSE_AFTER_COMMIT_ENV, PAUSE_BEFORE_COMMIT_ENV, Payment};

/// The lock of a killed process lapses this long after its last renewal.
const IN_FLIGHT_SECS: u64 = 3;

/// The longest any wait here may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// How long a paused handler would wait: far longer than any test, so it
/// is always killed mid-pause.
const FOREVER_MS: &str = "600000";

const BODY: &str = r#"{"account": "acct-1", "amount": 1500}"#;

/// A database of the test's own, and where the processes run.
struct Database {
    url: String,
    dir: tempfile::TempDir,
    /// The PostgreSQL schema, dropped with this.
    _schema: Option<TestDatabase>,
}

impl Database {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("payments.db").display());
        Self {
            url,
            dir,
            _schema: None,
        }
    }

    fn postgres() -> Self {
        let schema = TestDatabase::postgres();
        Self {
            url: schema.url().to_owned(),
            dir: tempfile::tempdir().expect("temp dir"),
            _schema: Some(schema),
        }
    }

    /// The example's binary on this database, with `env` on top.
    fn start(&self, env: &[(&str, &str)]) -> ServerProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payments"));
        command
            .current_dir(self.dir.path())
            .env("AUTUMN_DATABASE__URL", &self.url)
            .env(
                "AUTUMN_IDEMPOTENCY__IN_FLIGHT_TTL_SECS",
                IN_FLIGHT_SECS.to_string(),
            )
            .env_remove(PAUSE_BEFORE_COMMIT_ENV)
            .env_remove(PAUSE_AFTER_COMMIT_ENV);
        for (name, value) in env {
            command.env(name, value);
        }
        ServerProcess::start(command)
    }
}

/// SIGKILL: `ServerProcess` kills its child with `Child::kill` when dropped.
fn kill_9(server: ServerProcess) {
    drop(server);
}

/// An answer: status, whether it was a replay, body.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    replayed: bool,
    body: String,
}

impl Answer {
    fn payment(&self) -> Payment {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not a payment ({e}): {}", self.body))
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

async fn send(
    client: &Client,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> Answer {
    use http_body_util::BodyExt as _;
    let response = client.request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("x-idempotent-replayed")
        .is_some_and(|value| value == "true");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        replayed,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `POST /payments` with `key` on `base`.
async fn pay(client: &Client, base: &str, key: &str) -> Answer {
    let request = http::Request::post(format!("{base}/payments"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            BODY.as_bytes(),
        )))
        .expect("request");
    send(client, request).await
}

async fn get<T: serde::de::DeserializeOwned>(client: &Client, url: String) -> T {
    let request = http::Request::get(url)
        .body(http_body_util::Full::default())
        .expect("request");
    let answer = send(client, request).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    serde_json::from_str(&answer.body).expect("json")
}

async fn payments(client: &Client, server: &ServerProcess) -> Vec<Payment> {
    get(client, server.url("/payments")).await
}

async fn charges(client: &Client, server: &ServerProcess) -> Vec<Charge> {
    get(client, server.url("/provider/charges")).await
}

/// Polls `check` until it holds, within [`DEADLINE`].
async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    autumn_testkit::eventually_async(what, DEADLINE, check).await;
}

/// Retries `key` on `base` while it gets 409, within [`DEADLINE`]; returns
/// the statuses seen before the last answer, and the last answer.
async fn retry_while_409(client: &Client, base: &str, key: &str) -> (Vec<u16>, Answer) {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let answer = pay(client, base, key).await;
        if answer.status != 409 {
            return (seen, answer);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "still 409 after {DEADLINE:?}: the dead process's lock never lapsed"
        );
        seen.push(answer.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Killed after its transaction committed: the retry gets 409 while the
/// dead process's lock lasts, then the committed response; the payment and
/// the charge exist once.
async fn kill_after_commit(db: Database) {
    let client = client();
    let other = db.start(&[]);
    let paused = db.start(&[(PAUSE_AFTER_COMMIT_ENV, FOREVER_MS)]);
    let first = tokio::spawn({
        let (client, base) = (client.clone(), paused.base_url().to_owned());
        async move { pay(&client, &base, "after-commit").await }
    });
    until("the payment committed", || async {
        payments(&client, &other).await.len() == 1
    })
    .await;
    kill_9(paused);
    assert!(
        first.await.is_err(),
        "the killed process answered the first attempt"
    );

    let retry = pay(&client, other.base_url(), "after-commit").await;
    assert_eq!(
        retry.status, 409,
        "the dead process still holds the key: {retry:?}"
    );

    let restarted = db.start(&[]);
    let (_, replay) = retry_while_409(&client, restarted.base_url(), "after-commit").await;
    assert_eq!(replay.status, 201, "{replay:?}");
    assert!(replay.replayed, "the handler ran again: {replay:?}");
    let stored = payments(&client, &restarted).await;
    assert_eq!(stored, vec![replay.payment()], "exactly one payment row");
    let charged = charges(&client, &restarted).await;
    assert_eq!(charged.len(), 1);
    assert_eq!(charged[0].calls, 1, "the provider was called once");
    assert_eq!(charged[0].id, stored[0].charge);
}

/// Killed inside its transaction, before the commit: nothing of the
/// payment is committed; the retry runs the handler once, and the provider
/// answers its repeated key with the first charge.
async fn kill_before_commit(db: Database) {
    let client = client();
    let other = db.start(&[]);
    let paused = db.start(&[(PAUSE_BEFORE_COMMIT_ENV, FOREVER_MS)]);
    let first = tokio::spawn({
        let (client, base) = (client.clone(), paused.base_url().to_owned());
        async move { pay(&client, &base, "before-commit").await }
    });
    until("the provider charged", || async {
        charges(&client, &other).await.len() == 1
    })
    .await;
    kill_9(paused);
    assert!(
        first.await.is_err(),
        "the killed process answered the first attempt"
    );
    assert_eq!(payments(&client, &other).await, [], "nothing committed");

    let (seen, ran) = retry_while_409(&client, other.base_url(), "before-commit").await;
    assert_eq!(
        seen.first(),
        Some(&409),
        "the first retry meets the dead process's lock"
    );
    assert_eq!(ran.status, 201, "{ran:?}");
    assert!(!ran.replayed, "nothing was recorded, so the handler runs");
    let again = pay(&client, other.base_url(), "before-commit").await;
    assert!(again.replayed, "the handler ran once: {again:?}");
    assert_eq!(again.body, ran.body);

    let stored = payments(&client, &other).await;
    assert_eq!(stored, vec![ran.payment()], "exactly one payment row");
    let charged = charges(&client, &other).await;
    assert_eq!(charged.len(), 1, "charged once");
    assert_eq!(
        charged[0].calls, 2,
        "the retry asked again, with the same key"
    );
    assert_eq!(charged[0].id, stored[0].charge);
}

const KEYS: usize = 4;
const REQUESTS: usize = 200;

/// 200 concurrent attempts at [`KEYS`] keys, spread over two replicas on
/// one database: per key one run, one payment row, one provider call; every
/// other attempt gets 409 or the replay.
async fn concurrent_retries_over_two_replicas(db: Database) {
    let client = client();
    // The pause keeps each winner's lock held while the others arrive.
    let replicas = [
        db.start(&[(PAUSE_AFTER_COMMIT_ENV, "300")]),
        db.start(&[(PAUSE_AFTER_COMMIT_ENV, "300")]),
    ];
    let attempts: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let key = format!("burst-{}", i % KEYS);
            let base = replicas[(i / KEYS) % 2].base_url().to_owned();
            let client = client.clone();
            tokio::spawn(async move { (key.clone(), pay(&client, &base, &key).await) })
        })
        .collect();
    let mut answers = Vec::new();
    for attempt in attempts {
        answers.push(attempt.await.expect("attempt"));
    }

    let stored = payments(&client, &replicas[0]).await;
    assert_eq!(stored.len(), KEYS, "one payment row per key: {stored:?}");
    let charged = charges(&client, &replicas[1]).await;
    assert_eq!(charged.len(), KEYS, "one charge per key");
    assert!(
        charged.iter().all(|charge| charge.calls == 1),
        "one provider call per key: {charged:?}"
    );
    for k in 0..KEYS {
        let key = format!("burst-{k}");
        let mine: Vec<&Answer> = answers
            .iter()
            .filter(|(of, _)| *of == key)
            .map(|(_, answer)| answer)
            .collect();
        assert!(
            mine.iter().all(|answer| matches!(answer.status, 201 | 409)),
            "only 201 or 409: {mine:?}"
        );
        let runs: Vec<&&Answer> = mine
            .iter()
            .filter(|answer| answer.status == 201 && !answer.replayed)
            .collect();
        assert_eq!(runs.len(), 1, "{key} ran once");
        let payment = runs[0].payment();
        assert!(stored.contains(&payment));
        assert!(
            mine.iter()
                .filter(|answer| answer.replayed)
                .all(|answer| answer.body == runs[0].body),
            "every replay is the first answer"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill_after_commit_then_409_then_the_replay() {
    kill_after_commit(Database::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_after_commit_then_409_then_the_replay() {
    kill_after_commit(Database::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill_before_commit_commits_nothing_and_the_retry_runs_once() {
    kill_before_commit(Database::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_before_commit_commits_nothing_and_the_retry_runs_once() {
    kill_before_commit(Database::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_200_concurrent_retries_over_two_replicas_pay_once_per_key() {
    concurrent_retries_over_two_replicas(Database::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_200_concurrent_retries_over_two_replicas_pay_once_per_key() {
    concurrent_retries_over_two_replicas(Database::postgres()).await;
}

/// The document of the running binary, held to by the OpenAPI validator
/// and Schemathesis: no server error, no undocumented status, no response
/// unlike the document, for valid and invalid payments alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_the_document_does_not_say() {
    use autumn_testkit::api_tools;
    let db = Database::sqlite();
    let server = db.start(&[]);
    let document = server.client().get("/openapi.json").send().await.text();
    api_tools::validate(document.as_bytes());
    assert!(
        document.contains("\"Idempotency-Key\""),
        "the guarded operation names its key: {document}"
    );
    let url = server.url("/openapi.json");
    let report = tokio::task::spawn_blocking(move || {
        api_tools::schemathesis(&url, &["--max-examples", "40"])
    })
    .await
    .expect("schemathesis ran");
    // Its stateful phase chained `POST /payments` to `GET /payments/{id}`.
    assert!(
        api_tools::stateful_links_covered(&report) >= 1,
        "the stateful phase followed no link:\n{report}"
    );
}
