//! The signup form, guarded by a one-time submit token.
//!
//! `GET /signup` takes the request's [`SubmitToken`] and puts it first in
//! the form. The submit-token layer consumes it when the form is posted, so
//! `POST /signup` itself is a plain create action: it runs at most once per
//! rendered form, and a double-click, a resent post or a browser retry gets
//! its first answer (the 303 to the welcome page) replayed instead of
//! creating the account again.
//!
//! A rejected post answers 422 with the form rendered again, with the
//! errors, the values entered and a fresh token, since that rendering is a
//! new form.

use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use axum::Extension;
use serde::{Deserialize, Serialize};

use super::page;
use crate::Site;
use crate::users::Users;

/// What the signup form posts. The token field is the layer's business and
/// not part of it: serde ignores the unknown `_submit_token`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignupForm {
    /// The address to sign up with.
    pub email: String,
    /// The display name.
    pub name: String,
}

/// What is wrong with a posted form, by field.
#[derive(Debug, Default)]
struct Errors {
    email: Option<&'static str>,
    name: Option<&'static str>,
}

/// A valid signup: the email trimmed and lowercased, the name trimmed.
struct Signup {
    email: String,
    name: String,
}

impl SignupForm {
    fn validate(&self) -> Result<Signup, Errors> {
        let email = self.email.trim().to_lowercase();
        let name = self.name.trim();
        let errors = Errors {
            email: if email.is_empty() {
                Some("Enter your email address.")
            } else if !looks_like_email(&email) {
                Some("Enter an email address like name@example.com.")
            } else {
                None
            },
            name: name.is_empty().then_some("Enter your name."),
        };
        if errors.email.is_some() || errors.name.is_some() {
            return Err(errors);
        }
        Ok(Signup {
            email,
            name: name.to_owned(),
        })
    }
}

/// One `@` with something before it, and a dot inside the part after it.
fn looks_like_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.contains(char::is_whitespace)
}

/// The signup page: the form (token first), with `errors` and the values
/// entered when a post was rejected.
fn signup_page(
    site: &Site,
    token: &SubmitToken,
    field: &SubmitFormField,
    form: &SignupForm,
    errors: &Errors,
) -> Markup {
    page(
        site,
        "Sign up",
        html! {
            h1 { "Create your account" }
            @if errors.email.is_some() || errors.name.is_some() {
                div role="alert" class="errors" {
                    p { "Please correct the following:" }
                    ul {
                        @for message in errors.email.iter().chain(errors.name.iter()) {
                            li { (message) }
                        }
                    }
                }
            }
            // `novalidate`: the server's checks are the ones that count, so
            // the browser does not pre-empt them with its own messages.
            form method="POST" action="/signup" novalidate data-autumn-once {
                (submit_token_field(token, field))
                p {
                    label for="email" { "Email" }
                    input #email type="email" name="email" required autocomplete="email"
                        value=(form.email.trim())
                        aria-invalid=[errors.email.map(|_| "true")];
                    @if let Some(message) = errors.email {
                        span .error { " " (message) }
                    }
                }
                p {
                    label for="name" { "Name" }
                    input #name type="text" name="name" required autocomplete="name"
                        value=(form.name.trim())
                        aria-invalid=[errors.name.map(|_| "true")];
                    @if let Some(message) = errors.name {
                        span .error { " " (message) }
                    }
                }
                button type="submit" { "Sign up" }
            }
        },
    )
}

/// `GET /signup`: the form, with a fresh one-time token.
#[get("/signup")]
pub(crate) async fn signup_form(
    Extension(site): Extension<Site>,
    token: SubmitToken,
    field: SubmitFormField,
) -> Markup {
    signup_page(
        &site,
        &token,
        &field,
        &SignupForm::default(),
        &Errors::default(),
    )
}

/// `POST /signup`: creates the user and answers 303 to the welcome page, or
/// 422 with the form again.
///
/// It takes a [`SubmitToken`] only to render that form again: the token the
/// form posted was checked and consumed by the layer before this runs, and
/// the one extracted here is the fresh one minted for this request.
#[post("/signup")]
pub(crate) async fn signup(
    Extension(site): Extension<Site>,
    users: Users,
    token: SubmitToken,
    field: SubmitFormField,
    Form(form): Form<SignupForm>,
) -> AutumnResult<Response> {
    let rejected = |errors: Errors| {
        let page = signup_page(&site, &token, &field, &form, &errors);
        Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
    };
    let signup = match form.validate() {
        Ok(signup) => signup,
        Err(errors) => return rejected(errors),
    };
    if !site.signup_delay.is_zero() {
        // SAAS_SIGNUP_DELAY_MS: long enough for a double-click to send a
        // second post while this one still runs.
        tokio::time::sleep(site.signup_delay).await;
    }
    if let Some(gate) = &site.gate {
        gate.pass().await;
    }
    match users.create(&signup.email, &signup.name).await? {
        Some(user) => Ok(Redirect::to(&format!("/welcome?user={}", user.id)).into_response()),
        None => rejected(Errors {
            email: Some("This email address is already registered."),
            ..Errors::default()
        }),
    }
}
