//! The dead jobs on the actuator (`[jobs.admin] token`), through the app's
//! own router: refused without the token, listed without their payloads,
//! run again by the app's worker after a retry, and discarded; not served
//! at all without a token.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use autumn_core::config::AutumnConfig;
use autumn_core::jobs::{CommitHooks, CommitJob, Job, JobError, Jobs, MutationContext};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::ServiceExt as _;

use super::{pool, rows};

const TOKEN: &str = "0123456789abcdef-jobs";

/// The keys refused once already, and the keys sent.
static REFUSED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
static SENT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refused for good on its first run (the job is dead at once), sent on
/// any later one.
#[derive(Serialize, Deserialize)]
struct Flaky {
    key: String,
    email: String,
}

impl Job for Flaky {
    const NAME: &'static str = "mail.flaky";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        let first = REFUSED
            .lock()
            .expect("refused")
            .get_or_insert_with(HashSet::new)
            .insert(self.key.clone());
        if first {
            return Err(JobError::permanent("no such mailbox"));
        }
        SENT.lock().expect("sent").push(self.key);
        Ok(())
    }
}

fn sent(key: &str) -> bool {
    SENT.lock().expect("sent").iter().any(|sent| sent == key)
}

/// The app on `url` with `admin` as its `[jobs.admin]` table, and `hooks`.
fn launch(url: &str, admin: &str, hooks: Option<CommitHooks>) -> Router {
    let config = AutumnConfig::from_toml_str(&format!(
        "[database]\nurl = \"{url}\"\npool_size = 4\n[jobs.admin]\n{admin}\n"
    ))
    .expect("config");
    let app = autumn_core::app().with_config(config);
    match hooks {
        Some(hooks) => app.with_commit_hooks(hooks),
        None => app,
    }
    .into_router()
    .expect("the app launches")
}

/// `method path` with `token` as the bearer token: the status, headers and
/// the body as JSON (`null` when it is none).
async fn send(
    app: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("a request"))
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("a body").to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, json)
}

async fn dead_jobs(app: &Router) -> Vec<Value> {
    let (status, _, list) = send(app, "GET", "/actuator/jobs/dead", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list.as_array().cloned().expect("a list")
}

fn id_of(job: &Value) -> i64 {
    job["id"].as_i64().expect("an id")
}

async fn dead_jobs_are_listed_retried_and_discarded_with_the_token(url: String) {
    let pool = pool(&url);
    let hooks = CommitHooks::new()
        .job::<Flaky>()
        .poll_every(Duration::from_millis(20));
    let app = launch(&url, &format!("token = \"{TOKEN}\""), Some(hooks));
    let (retried_key, discarded_key) = (format!("{url}-retried"), format!("{url}-discarded"));
    for key in [&retried_key, &discarded_key] {
        Jobs::new(pool.clone(), MutationContext::detached())
            .enqueue(Flaky {
                key: key.clone(),
                email: "ada@example.com".to_owned(),
            })
            .await
            .expect("queued");
    }
    // The app's worker runs both, and both die.
    let dead =
        autumn_testkit::eventually_async("both jobs dead", Duration::from_secs(10), || async {
            let dead = dead_jobs(&app).await;
            if dead.len() == 2 {
                Ok(dead)
            } else {
                Err(format!("{dead:?}"))
            }
        })
        .await;

    // No token, or a wrong one: 401, and nothing is said of the jobs.
    for token in [None, Some("0123456789abcdef-wrong"), Some("")] {
        let (status, headers, problem) = send(&app, "GET", "/actuator/jobs/dead", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(
            headers.get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()),
            Some(&b"Bearer"[..])
        );
        assert_eq!(
            headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..])
        );
        assert_eq!(problem["code"], "jobs_admin_unauthorized", "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("jobs.admin.token")),
            "{problem}"
        );
        let path = format!("/actuator/jobs/dead/{}/retry", id_of(&dead[0]));
        assert_eq!(
            send(&app, "POST", &path, token).await.0,
            StatusCode::UNAUTHORIZED
        );
    }

    // Listed as the command lists them: never the payload.
    for job in &dead {
        assert_eq!(job["hook"], "mail.flaky", "{job}");
        assert_eq!(job["attempts"], 1, "{job}");
        assert_eq!(job["last_error"], "no such mailbox", "{job}");
        assert!(job["finished_at"].as_i64().is_some(), "{job}");
        assert!(job.get("payload").is_none(), "{job}");
        assert!(!job.to_string().contains("ada@example.com"), "{job}");
    }
    let (status, _, problem) = send(
        &app,
        "GET",
        "/actuator/jobs/dead?payloads=true",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(problem["code"], "jobs_admin_payloads_disabled");
    let (status, _, problem) = send(&app, "GET", "/actuator/jobs/dead?limit=0", Some(TOKEN)).await;
    assert_eq!(
        (status, &problem["code"]),
        (StatusCode::BAD_REQUEST, &Value::from("bad_query"))
    );
    let one = send(&app, "GET", "/actuator/jobs/dead?limit=1", Some(TOKEN))
        .await
        .2;
    assert_eq!(one.as_array().map(Vec::len), Some(1));

    // Shown only where the app allows it.
    let with_payloads = launch(
        &url,
        &format!("token = \"{TOKEN}\"\nallow_payloads = true"),
        None,
    );
    let (_, _, listed) = send(
        &with_payloads,
        "GET",
        "/actuator/jobs/dead?payloads=true",
        Some(TOKEN),
    )
    .await;
    assert_eq!(listed[0]["payload"]["email"], "ada@example.com", "{listed}");

    // Retried: pending again, and the app's worker runs it (this time it
    // is sent). Listed oldest first: the first is the one queued first.
    let (first, second) = (id_of(&dead[0]), id_of(&dead[1]));
    let (status, _, body) = send(
        &app,
        "POST",
        &format!("/actuator/jobs/dead/{first}/retry"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({"id": first, "retried": true}));
    autumn_testkit::eventually_async("the retried job sent", Duration::from_secs(10), || async {
        sent(&retried_key)
    })
    .await;
    assert!(!sent(&discarded_key), "the other job stays dead");
    let still_dead = dead_jobs(&app).await;
    assert_eq!(still_dead.iter().map(id_of).collect::<Vec<_>>(), [second]);
    // No longer dead: 404.
    let (status, _, problem) = send(
        &app,
        "POST",
        &format!("/actuator/jobs/dead/{first}/retry"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["code"], "dead_job_not_found");

    // Discarded: the row is gone; a second discard finds nothing.
    let discard = format!("/actuator/jobs/dead/{second}");
    let (status, _, body) = send(&app, "DELETE", &discard, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({"id": second, "discarded": true}));
    let states: Vec<String> = rows(&pool).await.into_iter().map(|row| row.state).collect();
    assert_eq!(states, ["done"]);
    assert_eq!(
        send(&app, "DELETE", &discard, Some(TOKEN)).await.0,
        StatusCode::NOT_FOUND
    );
    assert!(dead_jobs(&app).await.is_empty());

    // An id that is no number: 400.
    for path in ["/actuator/jobs/dead/x7/retry", "/actuator/jobs/dead/1.5"] {
        let method = if path.ends_with("retry") {
            "POST"
        } else {
            "DELETE"
        };
        let (status, _, problem) = send(&app, method, path, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(problem["code"], "job_id_invalid", "{path}");
    }
}

/// Without a token, or switched off, the endpoints are not there: 404,
/// the token sent or not.
async fn without_a_token_the_endpoints_are_not_served(url: String) {
    for admin in ["", &format!("token = \"{TOKEN}\"\nenabled = false")] {
        let app = launch(&url, admin, None);
        for (method, path) in [
            ("GET", "/actuator/jobs/dead"),
            ("POST", "/actuator/jobs/dead/1/retry"),
            ("DELETE", "/actuator/jobs/dead/1"),
        ] {
            for token in [None, Some(TOKEN)] {
                let (status, _, _) = send(&app, method, path, token).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{admin:?}: {method} {path}");
            }
        }
    }
}

autumn_testkit::on_databases!(
    dead_jobs_are_listed_retried_and_discarded_with_the_token,
    without_a_token_the_endpoints_are_not_served,
);
