//! `#[repository]` on PostgreSQL (a schema per test) and SQLite (a file
//! per test): find, list with paging, create, update and delete; the
//! framework-scoped key in `MutationContext` under the idempotency layer;
//! `after_*_commit` hook rows written in the mutation's transaction, one
//! per (key, hook, record) however often a request runs, and run by the
//! worker the builder starts.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use autumn_testkit::on_databases;

use crate::support::database::{count, eventually};

use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::db::{DbConnection, DbPool};
use autumn_web::idempotency::IdempotencyTx;
use autumn_web::jobs::{CommitJob, JobError, MutationContext};
use autumn_web::prelude::*;
use autumn_web::reexports::diesel::{self, AsChangeset, Insertable, Queryable};
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use autumn_web::repository::Paging;
use autumn_web::test::TestApp;

/// The tables, as diesel sees them.
#[allow(missing_docs)]
mod schema {
    use autumn_web::reexports::diesel;

    diesel::table! {
        notes (id) {
            id -> BigInt,
            title -> Text,
            body -> Text,
        }
    }

    diesel::table! {
        sent (id) {
            id -> BigInt,
            note_id -> BigInt,
            attempt -> Integer,
        }
    }
}

use schema::{notes, sent};

#[derive(Debug, Clone, PartialEq, Eq, Queryable, serde::Serialize, serde::Deserialize)]
struct Note {
    id: i64,
    title: String,
    body: String,
}

#[derive(Insertable, serde::Deserialize)]
#[diesel(table_name = notes)]
struct NewNote {
    title: String,
    body: String,
}

#[derive(AsChangeset, serde::Deserialize)]
#[diesel(table_name = notes)]
struct NoteChanges {
    title: Option<String>,
    body: Option<String>,
}

#[derive(Debug, Queryable, serde::Serialize)]
struct Sent {
    id: i64,
    note_id: i64,
    attempt: i32,
}

#[derive(Insertable)]
#[diesel(table_name = sent)]
struct NewSent {
    note_id: i64,
    attempt: i32,
}

/// The hook: "sends" the note by writing a row of `sent`. Idempotent: the
/// row is unique per note, and a second run finds it there.
async fn send_note(job: CommitJob) -> Result<(), JobError> {
    let note: Note = job.record()?;
    let mut outbox = Outbox::from_pool(job.pool(), MutationContext::detached()).await?;
    let attempt = i32::try_from(job.attempt()).unwrap_or(i32::MAX);
    match outbox
        .create(&NewSent {
            note_id: note.id,
            attempt,
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(error)
            if error.to_string().contains("unique") || error.to_string().contains("UNIQUE") =>
        {
            Ok(())
        }
        Err(error) => Err(JobError::retry(error)),
    }
}

#[autumn_web::repository(
    model = Note,
    table = notes,
    insert = NewNote,
    update = NoteChanges,
    after_create_commit = send_note,
    after_update_commit = send_note,
)]
struct Notes;

#[autumn_web::repository(model = Sent, table = sent, insert = NewSent)]
struct Outbox;

#[post("/notes")]
async fn create_note(
    idem: IdempotencyTx,
    mut notes: Notes,
    Json(new): Json<NewNote>,
) -> AutumnResult<Response> {
    let key = notes.context().idempotency_key().map(str::to_owned);
    notes
        .tx(|tx| {
            async move {
                let note = Notes::create_in(tx, &new).await?;
                let answer = Json(serde_json::json!({ "note": note, "key": key }));
                idem.commit(tx, (StatusCode::CREATED, answer)).await
            }
            .scope_boxed()
        })
        .await
}

#[put("/notes/{id}")]
async fn update_note(
    mut notes: Notes,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Json(changes): Json<NoteChanges>,
) -> AutumnResult<Json<Note>> {
    let updated = notes.update(id, &changes).await?;
    // A header, not the body: the retry without it is the same request.
    if headers.contains_key("x-fail-after-commit") {
        // Committed, then failed: the 500 releases the key, so the retry
        // runs the handler again.
        return Err(AutumnError::internal("failed after the commit"));
    }
    updated
        .map(Json)
        .ok_or_else(|| AutumnError::not_found("no such note"))
}

fn ddl(url: &str) -> &'static str {
    if url.starts_with("sqlite") {
        "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, body TEXT NOT NULL); \
         CREATE TABLE sent (id INTEGER PRIMARY KEY AUTOINCREMENT, note_id BIGINT NOT NULL UNIQUE, attempt INTEGER NOT NULL);"
    } else {
        "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL); \
         CREATE TABLE sent (id BIGSERIAL PRIMARY KEY, note_id BIGINT NOT NULL UNIQUE, attempt INTEGER NOT NULL);"
    }
}

async fn setup(url: &str) -> DbPool {
    use autumn_web::reexports::diesel_async::SimpleAsyncConnection as _;
    let pool = DbPool::new(url, 4, Duration::from_secs(5)).expect("pool");
    match pool.get().await.expect("connection") {
        DbConnection::Postgres(mut conn) => conn.batch_execute(ddl(url)).await,
        DbConnection::Sqlite(mut conn) => conn.batch_execute(ddl(url)).await,
        _ => unreachable!("the tests build both backends"),
    }
    .expect("create the tables");
    pool
}

fn app(url: &str) -> autumn_web::test::TestClient {
    let config = AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\npool_size = 4\n"
    ))
    .expect("config");
    TestApp::from_builder(autumn_web::app().with_commit_hooks(Notes::commit_hooks()))
        .routes(routes![create_note, update_note])
        .idempotent()
        .with_config(config)
        .build()
}

async fn crud_and_paging(url: String) {
    let pool = setup(&url).await;
    let mut notes = Notes::from_pool(&pool, MutationContext::detached())
        .await
        .expect("repository");
    let mut ids = Vec::new();
    for n in 0..5 {
        let note = notes
            .create(&NewNote {
                title: format!("note {n}"),
                body: "text".to_owned(),
            })
            .await
            .expect("create");
        ids.push(note.id);
    }
    let page = notes.list(Paging::new(2, 2)).await.expect("list");
    assert_eq!(
        page.items.iter().map(|note| note.id).collect::<Vec<_>>(),
        ids[2..4].to_vec()
    );
    assert_eq!((page.page, page.per_page, page.total), (2, 2, 5));
    assert!(page.has_next());
    assert!(
        !notes
            .list(Paging::new(3, 2))
            .await
            .expect("list")
            .has_next()
    );

    let changed = notes
        .update(
            ids[0],
            &NoteChanges {
                title: Some("renamed".to_owned()),
                body: None,
            },
        )
        .await
        .expect("update")
        .expect("the note exists");
    assert_eq!(
        (changed.title.as_str(), changed.body.as_str()),
        ("renamed", "text")
    );
    assert_eq!(
        notes.find(ids[0]).await.expect("find"),
        Some(changed.clone())
    );
    assert_eq!(notes.delete(ids[0]).await.expect("delete"), Some(changed));
    assert_eq!(notes.find(ids[0]).await.expect("find"), None);
    assert_eq!(notes.delete(ids[0]).await.expect("delete"), None);
    assert_eq!(
        notes
            .update(
                ids[0],
                &NoteChanges {
                    title: None,
                    body: Some("x".into())
                }
            )
            .await
            .expect("update"),
        None
    );
    // Five creates and one update declared hooks; the delete declared none.
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM autumn_commit_jobs").await,
        6
    );
}

async fn an_idempotent_request_writes_one_hook_row_and_the_worker_runs_it_once(url: String) {
    let pool = setup(&url).await;
    let client = app(&url);
    let post = |auth: &'static str| {
        client
            .post("/notes")
            .header("idempotency-key", "note-1")
            .header("authorization", auth)
            .json(&serde_json::json!({ "title": "hello", "body": "world" }))
    };
    let first = post("Bearer alice").send().await;
    first.assert_status(201);
    let body: serde_json::Value = first.json();
    let key = body["key"].as_str().expect("the scoped key").to_owned();
    assert_ne!(
        key, "note-1",
        "the key is scoped, never the client's raw key"
    );
    // The retry is answered from the record: no second note, no second row.
    let retry = post("Bearer alice").send().await;
    retry.assert_status(201);
    assert_eq!(retry.json::<serde_json::Value>(), body);
    // Another caller's identical key is another request.
    let bob = post("Bearer bob").send().await;
    bob.assert_status(201);
    assert_ne!(
        bob.json::<serde_json::Value>()["key"].as_str(),
        Some(key.as_str())
    );

    assert_eq!(count(&pool, "SELECT COUNT(*) AS n FROM notes").await, 2);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM autumn_commit_jobs").await,
        2
    );
    eventually(&pool, "SELECT COUNT(*) AS n FROM sent", 2).await;
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        2,
    )
    .await;
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM sent WHERE attempt = 1").await,
        2
    );
}

async fn a_request_run_twice_with_one_key_writes_one_hook_row(url: String) {
    let pool = setup(&url).await;
    let client = app(&url);
    let created = client
        .post("/notes")
        .json(&serde_json::json!({ "title": "a", "body": "b" }))
        .send()
        .await;
    created.assert_status(201);
    let id = created.json::<serde_json::Value>()["note"]["id"]
        .as_i64()
        .expect("id");
    let put = || {
        client
            .put(&format!("/notes/{id}"))
            .header("idempotency-key", "edit-1")
            .json(&serde_json::json!({ "title": "edited" }))
    };
    put()
        .header("x-fail-after-commit", "1")
        .send()
        .await
        .assert_status(500);
    // The 500 released the key: the retry runs the handler again, and its
    // update commits again, but its hook row is the first attempt's.
    put().send().await.assert_status(200);
    let rows = format!(
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE hook = 'notes.after_update_commit' AND record_id = '{id}'"
    );
    assert_eq!(count(&pool, &rows).await, 1);
}

on_databases!(
    crud_and_paging,
    an_idempotent_request_writes_one_hook_row_and_the_worker_runs_it_once,
    a_request_run_twice_with_one_key_writes_one_hook_row,
);
