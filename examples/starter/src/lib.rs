//! The app: a page, a form that posts once, and a JSON API.
//!
//! `main` runs [`app`], and the tests in `tests/` build the same app with
//! `TestApp::from_builder`, which is why it lives in a library.

use std::sync::{Arc, Mutex, PoisonError};

use autumn_web::AppBuilder;
use autumn_web::openapi::JsonSchema;
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use serde::{Deserialize, Serialize};

/// The notes taken so far, in memory. Swap it for a database table (see
/// the `postgres` and `sqlite` features) when they must outlive the process.
#[derive(Clone, Default)]
pub struct Notes(Arc<Mutex<Vec<Note>>>);

impl Notes {
    /// Every note, oldest first.
    pub fn all(&self) -> Vec<Note> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn add(&self, text: String) -> Note {
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let note = Note {
            id: notes.len() + 1,
            text,
        };
        notes.push(note.clone());
        note
    }
}

/// One note. `JsonSchema` describes it in the app's OpenAPI document
/// (`/openapi.json`, shown at `/openapi` in development).
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct Note {
    /// Its number, from 1.
    pub id: usize,
    /// What was written.
    pub text: String,
}

/// The body of a new note, from the form or as JSON.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct NewNote {
    text: String,
}

impl NewNote {
    fn checked(self) -> AutumnResult<String> {
        let text = self.text.trim();
        if text.is_empty() {
            return Err(AutumnError::unprocessable("the note is empty"));
        }
        Ok(text.to_owned())
    }
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    }
}

/// The home page: the notes, and a link to the form.
#[get("/")]
async fn index(State(notes): State<Notes>) -> Markup {
    page(
        "Notes",
        html! {
            ul {
                @for note in notes.all() {
                    li { (note.text) }
                }
            }
            a href="/notes/new" { "Write a note" }
        },
    )
}

/// The form. Its submit token makes a double-click, a reload or Back and
/// submit again post the note once.
#[get("/notes/new")]
async fn new_note(token: SubmitToken, field: SubmitFormField) -> Markup {
    page(
        "New note",
        html! {
            form method="POST" action="/notes" {
                // First, before every other field.
                (submit_token_field(&token, &field))
                textarea name="text" {}
                button type="submit" { "Save" }
            }
        },
    )
}

/// Takes the form. It runs once per rendered form; a repeat gets this
/// same redirect back.
#[post("/notes")]
async fn create_note(
    State(notes): State<Notes>,
    Form(new): Form<NewNote>,
) -> AutumnResult<Redirect> {
    notes.add(new.checked()?);
    Ok(Redirect::to("/"))
}

/// Every note as JSON.
#[get("/api/notes")]
async fn list_notes(State(notes): State<Notes>) -> Json<Vec<Note>> {
    Json(notes.all())
}

/// Adds a note from JSON. A client that retries with the same
/// `Idempotency-Key` gets the first answer back instead of a second note.
#[post("/api/notes")]
async fn add_note(
    State(notes): State<Notes>,
    Json(new): Json<NewNote>,
) -> AutumnResult<(StatusCode, Json<Note>)> {
    let note = notes.add(new.checked()?);
    Ok((StatusCode::CREATED, Json(note)))
}

/// The whole app, as `main` runs it and the tests build it.
pub fn app() -> AppBuilder {
    app_with(Notes::default())
}

/// The app keeping its notes in `notes`, so a test can look at them.
pub fn app_with(notes: Notes) -> AppBuilder {
    autumn_web::app()
        .routes(routes![index, new_note, create_note, list_notes, add_note])
        .with_state(notes)
        .idempotent()
}
