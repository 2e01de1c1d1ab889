//! `/dev/mail`: the mails the file transport wrote, as pages, under the
//! `dev` profile only (they are other people's mail in any other).

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, StatusCode, header};
use maud::{DOCTYPE, Markup, html};

use super::OutgoingMail;
use super::file;

/// Where the pages are served.
pub(crate) const PATH: &str = "/dev/mail";

/// The pages, reading `dir`.
pub(crate) fn routes(dir: PathBuf) -> Router {
    Router::new()
        .route(PATH, get(index))
        .route(&format!("{PATH}/{{id}}"), get(show))
        .route(&format!("{PATH}/{{id}}/html"), get(html_part))
        .with_state(Arc::new(dir))
}

async fn index(State(dir): State<Arc<PathBuf>>) -> Markup {
    let mails = tokio::task::spawn_blocking(move || file::list(&dir))
        .await
        .unwrap_or_default();
    page(
        "Mail sent",
        html! {
            h1 { "Mail sent (" (mails.len()) ")" }
            @if mails.is_empty() {
                p { "No mail yet. Mail the app queues appears here once its job ran." }
            } @else {
                table {
                    thead { tr { th { "Subject" } th { "To" } th { "Kind" } th { "Queued" } } }
                    tbody {
                        @for mail in &mails {
                            tr {
                                td { a href={ (PATH) "/" (file::stem(mail)) } { (mail.subject()) } }
                                td { (mail.to().join(", ")) }
                                td { code { (mail.name()) } }
                                td { (queued(mail)) }
                            }
                        }
                    }
                }
            }
        },
    )
}

async fn show(State(dir): State<Arc<PathBuf>>, Path(id): Path<String>) -> Response {
    let Some(mail) = read(dir, id.clone()).await else {
        return not_found();
    };
    page(
        mail.subject(),
        html! {
            p { a href=(PATH) { "All mail" } }
            h1 { (mail.subject()) }
            dl {
                dt { "From" } dd { (mail.from()) }
                dt { "To" } dd { (mail.to().join(", ")) }
                @if !mail.cc().is_empty() { dt { "Cc" } dd { (mail.cc().join(", ")) } }
                dt { "Message-ID" } dd { code { (mail.message_id()) } }
                dt { "Kind" } dd { code { (mail.name()) } }
                dt { "Queued" } dd { (queued(&mail)) }
                dt { "Files" } dd { code { (id) ".eml" } ", " code { (id) ".json" } }
            }
            @if mail.html().is_some() {
                h2 { "HTML part" }
                p { a href={ (PATH) "/" (id) "/html" } { "Open the HTML part" } }
            }
            @if let Some(text) = mail.text() {
                h2 { "Text part" }
                pre { (text) }
            }
        },
    )
    .into_response()
}

/// The HTML part as its own page, sandboxed: no script of the mail runs,
/// and it reaches nothing of the app's origin.
async fn html_part(State(dir): State<Arc<PathBuf>>, Path(id): Path<String>) -> Response {
    let Some(html) = read(dir, id).await.and_then(|mail| mail.html) else {
        return not_found();
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "sandbox; default-src 'none'; img-src * data:; style-src 'unsafe-inline'",
                ),
            ),
        ],
        html,
    )
        .into_response()
}

async fn read(dir: Arc<PathBuf>, id: String) -> Option<OutgoingMail> {
    tokio::task::spawn_blocking(move || file::find(&dir, &id))
        .await
        .ok()
        .flatten()
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        page(
            "No such mail",
            html! {
                h1 { "No such mail" }
                p { a href=(PATH) { "All mail" } }
            },
        ),
    )
        .into_response()
}

fn queued(mail: &OutgoingMail) -> String {
    httpdate::fmt_http_date(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(mail.queued_at()),
    )
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · mail preview" }
            }
            body { (body) }
        }
    }
}
