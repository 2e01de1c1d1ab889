//! The pages: the shared layout, the home page and the user lists. Signing
//! up, in and out is in [`auth`], the account page and its profile form in
//! [`account`], changing the password in [`password`].

pub(crate) mod account;
pub(crate) mod auth;
pub(crate) mod invoices;
pub(crate) mod password;

use autumn_web::Route;
use autumn_web::prelude::*;
use autumn_web::security::double_submit_guard;
use axum::Extension;
use maud::DOCTYPE;

use crate::Site;
use crate::signed_in::Viewer;
use crate::users::{Stats, User, Users};

/// Every route of the app.
pub(crate) fn all() -> Vec<Route> {
    routes![
        home,
        auth::signup_form,
        auth::signup,
        auth::login_form,
        auth::login,
        auth::logout_form,
        auth::logout,
        account::account,
        account::save_profile,
        account::avatar,
        password::password_form,
        password::change_password,
        users_page,
        users_json,
        stats_json,
        invoices::new_invoice,
        invoices::create_invoice,
        invoices::api_create_invoice,
        invoices::show_invoice,
        invoices::invoice_stats
    ]
}

/// The list of what to correct, above a rejected form.
pub(crate) fn error_summary<'a>(messages: impl Iterator<Item = &'a str>) -> Markup {
    let messages: Vec<&str> = messages.collect();
    html! {
        @if !messages.is_empty() {
            div role="alert" class="errors" {
                p { "Please correct the following:" }
                ul {
                    @for message in &messages {
                        li { (message) }
                    }
                }
            }
        }
    }
}

/// The page around `content`, with a menu for `viewer` (signed in or not)
/// and the guard script when the app opted in.
pub(crate) fn page(site: &Site, viewer: Option<&User>, title: &str, content: Markup) -> Markup {
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
                    @if let Some(user) = viewer {
                        a href="/account" { (user.name) }
                        " · "
                        a href="/users" { "Users" }
                        " · "
                        a href="/logout" { "Log out" }
                    } @else {
                        a href="/signup" { "Sign up" }
                        " · "
                        a href="/login" { "Log in" }
                        " · "
                        a href="/users" { "Users" }
                    }
                }
                main { (content) }
                @if site.with_guard {
                    (double_submit_guard())
                }
            }
        }
    }
}

/// `GET /`: the account page for someone signed in, else a welcome.
#[get("/")]
pub(crate) async fn home(Extension(site): Extension<Site>, viewer: Viewer) -> Response {
    if viewer.user.is_some() {
        return Redirect::to("/account").into_response();
    }
    page(
        &site,
        None,
        "Welcome",
        html! {
            h1 { "Autumn SaaS" }
            p { "Every form here runs once, however often the browser sends it." }
            p { a href="/signup" { "Create an account" } " or " a href="/login" { "log in" } "." }
        },
    )
    .into_response()
}

/// `GET /users`: every user, as an HTML table.
#[get("/users")]
pub(crate) async fn users_page(
    Extension(site): Extension<Site>,
    viewer: Viewer,
    users: Users,
) -> AutumnResult<Markup> {
    let users = users.list().await?;
    Ok(page(
        &site,
        viewer.user.as_ref(),
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

/// `GET /stats.json`: how many users, logins and avatar uploads there have
/// been: what a double-click must not double.
#[get("/stats.json")]
pub(crate) async fn stats_json(users: Users) -> AutumnResult<Json<Stats>> {
    Ok(Json(users.stats().await?))
}
