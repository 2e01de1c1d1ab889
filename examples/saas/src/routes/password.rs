//! Changing the password: a page of its own with its one-time token (a
//! request mints one token, and the account page's is its profile form's).
//!
//! A changed password signs the user's other browsers out: whoever learnt
//! the old password, or holds a cookie from a shared computer, is out the
//! moment the owner changes it. This browser stays signed in, under a new
//! session id.

use autumn_web::forms::{FieldErrors, Flash, FormPage};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use axum::Extension;
use serde::Deserialize;

use super::auth::{MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
use super::{error_summary, page};
use crate::signed_in::{SignedIn, sign_in};
use crate::users::{User, Users};
use crate::{Site, password};

/// What the password form posts; both in clear, never shown again.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct PasswordForm {
    current_password: String,
    new_password: String,
}

/// The password page, with `errors` when a post was rejected.
fn password_page(
    site: &Site,
    user: &User,
    (token, field_name): (&SubmitToken, &SubmitFormField),
    errors: &FieldErrors,
) -> Markup {
    let input = |name: &str, label: &str, autocomplete: &str| {
        html! {
            p {
                label for=(name) { (label) }
                input #(name) type="password" name=(name) required autocomplete=(autocomplete)
                    aria-invalid=[errors.get(name).map(|_| "true")];
            }
        }
    };
    page(
        site,
        Some(user),
        "Change password",
        html! {
            h1 { "Change password" }
            p { "Your other browsers and devices will be signed out." }
            (error_summary(errors.iter().map(|(_, message)| message)))
            form method="POST" action="/account/password" novalidate data-autumn-once {
                (submit_token_field(token, field_name))
                (input("current_password", "Current password", "current-password"))
                (input("new_password", "New password", "new-password"))
                button type="submit" { "Change password" }
            }
            p { a href="/account" { "Back to your account" } }
        },
    )
}

/// `GET /account/password`: the form, with a fresh one-time token. Anyone
/// not signed in is sent to `/login`.
#[get("/account/password")]
pub(crate) async fn password_form(
    Extension(site): Extension<Site>,
    SignedIn { user }: SignedIn,
    token: SubmitToken,
    field: SubmitFormField,
) -> Markup {
    password_page(&site, &user, (&token, &field), &FieldErrors::new())
}

/// `POST /account/password`: checks the current password, stores the new
/// one, signs every other session of the user out, gives this one a new
/// id, and answers 303 to the account page with a message; or 422 with the
/// form again.
#[post("/account/password")]
#[expect(
    clippy::too_many_arguments,
    reason = "a handler takes one extractor per thing it needs"
)]
pub(crate) async fn change_password(
    Extension(site): Extension<Site>,
    SignedIn { user }: SignedIn,
    users: Users,
    session: Session,
    flash: Flash,
    token: SubmitToken,
    field: SubmitFormField,
    Form(form): Form<PasswordForm>,
) -> AutumnResult<FormPage> {
    let rejected = |errors: FieldErrors| {
        let page = password_page(&site, &user, (&token, &field), &errors);
        Ok(FormPage::invalid(page))
    };
    let chars = form.new_password.chars().count();
    let mut errors = FieldErrors::new();
    if chars < MIN_PASSWORD_CHARS {
        errors.add(
            "new_password",
            "Choose a password of at least 8 characters.",
        );
    } else if chars > MAX_PASSWORD_CHARS {
        errors.add(
            "new_password",
            "Choose a password of at most 1024 characters.",
        );
    }
    if form.current_password.chars().count() > MAX_PASSWORD_CHARS {
        errors.add("current_password", "That is not your current password.");
    }
    if !errors.is_empty() {
        return rejected(errors);
    }
    let stored = users
        .find_with_password(&user.email)
        .await?
        .map(|(_, stored)| stored);
    if !password::verify(form.current_password.clone(), stored).await? {
        let mut errors = FieldErrors::new();
        errors.add("current_password", "That is not your current password.");
        return rejected(errors);
    }
    site.hold().await;
    let hash = password::hash(form.new_password.clone()).await?;
    users.set_password(user.id, &hash).await?;
    let ended = session.end_other_sessions().await?;
    // A new id for this browser too, as after a sign-in.
    sign_in(&session, user.id).await?;
    let notice = match ended {
        0 => "Your password was changed.".to_owned(),
        1 => "Your password was changed; 1 other session was signed out.".to_owned(),
        n => format!("Your password was changed; {n} other sessions were signed out."),
    };
    flash.set("notice", notice).await?;
    Ok(FormPage::redirect("/account"))
}
