//! The pages: the shared layout, the welcome page and the user lists. The
//! signup form is in [`auth`].

pub(crate) mod auth;

use autumn_web::Route;
use autumn_web::prelude::*;
use autumn_web::security::double_submit_guard;
use axum::Extension;
use maud::DOCTYPE;
use serde::Deserialize;
use uuid::Uuid;

use crate::Site;
use crate::users::{User, Users};

/// Every route of the app.
pub(crate) fn all() -> Vec<Route> {
    routes![
        home,
        auth::signup_form,
        auth::signup,
        welcome,
        users_page,
        users_json
    ]
}

/// The page around `content`, with the guard script when the app opted in.
pub(crate) fn page(site: &Site, title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Autumn SaaS" }
            }
            body {
                nav {
                    a href="/signup" { "Sign up" }
                    " · "
                    a href="/users" { "Users" }
                }
                main { (content) }
                @if site.with_guard {
                    (double_submit_guard())
                }
            }
        }
    }
}

/// `GET /`: to the signup form.
#[get("/")]
pub(crate) async fn home() -> Redirect {
    Redirect::to("/signup")
}

/// The query of `GET /welcome`.
#[derive(Debug, Deserialize)]
pub(crate) struct WelcomeQuery {
    user: Option<Uuid>,
}

/// `GET /welcome?user=<id>`: where a successful signup lands.
#[get("/welcome")]
pub(crate) async fn welcome(
    Extension(site): Extension<Site>,
    users: Users,
    Query(query): Query<WelcomeQuery>,
) -> AutumnResult<Markup> {
    let user = match query.user {
        Some(id) => Some(
            users
                .find(id)
                .await?
                .ok_or_else(|| AutumnError::not_found("no such user"))?,
        ),
        None => None,
    };
    Ok(page(
        &site,
        "Welcome",
        html! {
            @if let Some(user) = &user {
                h1 { "Welcome, " (user.name) "!" }
                p { "Your account " strong { (user.email) } " is ready." }
            } @else {
                h1 { "Welcome!" }
            }
            p { a href="/users" { "See everyone who signed up" } }
        },
    ))
}

/// `GET /users`: every user, as an HTML table.
#[get("/users")]
pub(crate) async fn users_page(
    Extension(site): Extension<Site>,
    users: Users,
) -> AutumnResult<Markup> {
    let users = users.list().await?;
    Ok(page(
        &site,
        "Users",
        html! {
            h1 { "Users" }
            @if users.is_empty() {
                p { "Nobody yet. " a href="/signup" { "Be the first." } }
            } @else {
                table {
                    thead { tr { th { "Name" } th { "Email" } } }
                    tbody {
                        @for user in &users {
                            tr { td { (user.name) } td { (user.email) } }
                        }
                    }
                }
            }
        },
    ))
}

/// `GET /users.json`: every user, oldest first.
#[get("/users.json")]
pub(crate) async fn users_json(users: Users) -> AutumnResult<Json<Vec<User>>> {
    Ok(Json(users.list().await?))
}
