//! Signing up, logging in and logging out: three forms, each guarded by a
//! one-time submit token.
//!
//! The page that renders a form takes the request's [`SubmitToken`] and puts
//! it first in the form. The submit-token layer consumes it when the form is
//! posted, so the POST handlers themselves are plain actions: each runs at
//! most once per rendered form, and a double-click, a resent post or a
//! browser retry gets its first answer replayed, the session cookie that
//! answer set included. That is what makes a double-clicked "Log in" end
//! with one session, signed in.
//!
//! A rejected post answers 422 ([`FormPage::invalid`]) with the form
//! rendered again, with the [`FieldErrors`], the values entered (never the
//! password) and a fresh token, since that rendering is a new form.

use autumn_web::forms::{FieldErrors, Flash, FormPage};
use autumn_web::mail::Mailer;
use autumn_web::prelude::*;
use autumn_web::rate_limit::RateLimits;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use axum::Extension;
use serde::{Deserialize, Serialize};

use super::{error_summary, page};
use crate::signed_in::{Viewer, sign_in};
use crate::users::Users;
use crate::{LOGIN_ACCOUNT_RULE, Site, password};

/// The fewest characters a password may have.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// The most: hashing cost grows with the length, so it is bounded.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// What the signup form posts. The token field is the layer's business and
/// not part of it: serde ignores the unknown `_submit_token`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignupForm {
    /// The address to sign up with.
    pub email: String,
    /// The display name.
    pub name: String,
    /// The password, in clear: hashed before it is stored, never shown.
    pub password: String,
}

impl std::fmt::Debug for SignupForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignupForm")
            .field("email", &self.email)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What the login form posts.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoginForm {
    /// The address the account was made with, in any case.
    pub email: String,
    /// The password, in clear.
    pub password: String,
}

impl std::fmt::Debug for LoginForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginForm")
            .field("email", &self.email)
            .finish_non_exhaustive()
    }
}

/// A valid signup: the email trimmed and lowercased, the name trimmed.
struct Signup {
    email: String,
    name: String,
}

impl SignupForm {
    fn validate(&self) -> Result<Signup, FieldErrors> {
        let email = self.email.trim().to_lowercase();
        let name = self.name.trim();
        let chars = self.password.chars().count();
        let mut errors = FieldErrors::new();
        if email.is_empty() {
            errors.add("email", "Enter your email address.");
        } else if !looks_like_email(&email) {
            errors.add("email", "Enter an email address like name@example.com.");
        }
        if name.is_empty() {
            errors.add("name", "Enter your name.");
        }
        if chars < MIN_PASSWORD_CHARS {
            errors.add("password", "Choose a password of at least 8 characters.");
        } else if chars > MAX_PASSWORD_CHARS {
            errors.add("password", "Choose a password of at most 1024 characters.");
        }
        errors.into_result(Signup {
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

/// A labelled input, marked invalid with its message when there is one.
fn field(
    name: &str,
    label: &str,
    kind: &str,
    autocomplete: &str,
    value: &str,
    error: Option<&str>,
) -> Markup {
    html! {
        p {
            label for=(name) { (label) }
            input #(name) type=(kind) name=(name) required autocomplete=(autocomplete)
                value=(value)
                aria-invalid=[error.map(|_| "true")];
            @if let Some(message) = error {
                span .error { " " (message) }
            }
        }
    }
}

/// The signup page: the form (token first), with `errors` and the values
/// entered when a post was rejected.
fn signup_page(
    site: &Site,
    token: &SubmitToken,
    field_name: &SubmitFormField,
    form: &SignupForm,
    errors: &FieldErrors,
) -> Markup {
    page(
        site,
        None,
        "Sign up",
        html! {
            h1 { "Create your account" }
            (error_summary(errors.iter().map(|(_, message)| message)))
            // `novalidate`: the server's checks are the ones that count, so
            // the browser does not pre-empt them with its own messages.
            form method="POST" action="/signup" novalidate data-autumn-once {
                (submit_token_field(token, field_name))
                (field("email", "Email", "email", "email", form.email.trim(), errors.get("email")))
                (field("name", "Name", "text", "name", form.name.trim(), errors.get("name")))
                (field("password", "Password", "password", "new-password", "", errors.get("password")))
                button type="submit" { "Sign up" }
            }
            p { "Have an account? " a href="/login" { "Log in" } "." }
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
        &FieldErrors::new(),
    )
}

/// `POST /signup`: creates the user, signs them in (a new session id) with
/// a welcome message (a flash) for the account page, and answers 303 to it;
/// or 422 with the form again.
///
/// It takes a [`SubmitToken`] only to render that form again: the token the
/// form posted was checked by the layer before this runs (and is released
/// again by the 422), and the one extracted here is the fresh one minted for
/// this request.
#[post("/signup", rate_limit = "signup")]
#[expect(
    clippy::too_many_arguments,
    reason = "a handler takes one extractor per thing it needs"
)]
pub(crate) async fn signup(
    Extension(site): Extension<Site>,
    users: Users,
    mailer: Mailer,
    session: Session,
    flash: Flash,
    token: SubmitToken,
    field: SubmitFormField,
    Form(form): Form<SignupForm>,
) -> AutumnResult<FormPage> {
    let rejected = |errors: FieldErrors| {
        let page = signup_page(&site, &token, &field, &form, &errors);
        Ok(FormPage::invalid(page))
    };
    let signup = match form.validate() {
        Ok(signup) => signup,
        Err(errors) => return rejected(errors),
    };
    site.hold().await;
    if let Some(gate) = &site.gate {
        gate.pass().await;
    }
    let hash = password::hash(form.password.clone()).await?;
    let created = users
        .create(&signup.email, &signup.name, &hash, &mailer)
        .await?;
    // The confirmation committed with the account: sent now.
    mailer.committed();
    let Some(user) = created else {
        let mut errors = FieldErrors::new();
        errors.add("email", "This email address is already registered.");
        return rejected(errors);
    };
    sign_in(&session, user.id).await?;
    flash
        .set("notice", format!("Welcome, {}!", user.name))
        .await?;
    Ok(FormPage::redirect("/account"))
}

/// The login page, with `error` and the email entered when a post was
/// rejected.
fn login_page(
    site: &Site,
    token: &SubmitToken,
    field_name: &SubmitFormField,
    email: &str,
    error: Option<&'static str>,
) -> Markup {
    page(
        site,
        None,
        "Log in",
        html! {
            h1 { "Log in" }
            (error_summary(error.into_iter()))
            form method="POST" action="/login" novalidate data-autumn-once {
                (submit_token_field(token, field_name))
                (field("email", "Email", "email", "email", email.trim(), None))
                (field("password", "Password", "password", "current-password", "", None))
                button type="submit" { "Log in" }
            }
            p { "New here? " a href="/signup" { "Create an account" } "." }
        },
    )
}

/// `GET /login`: the login form, with a fresh one-time token.
#[get("/login")]
pub(crate) async fn login_form(
    Extension(site): Extension<Site>,
    token: SubmitToken,
    field: SubmitFormField,
) -> Markup {
    login_page(&site, &token, &field, "", None)
}

/// `POST /login`: checks the password, counts the login, signs the user in
/// (a new session id) and answers 303 to the account page; or 422 with the
/// form again.
///
/// Guessing is slowed twice over: the rule `login` counts attempts per
/// address before anything runs, and `login_account` counts them per email
/// address, so one account cannot be guessed at from many addresses either
/// (429 with `Retry-After` past either).
#[post("/login", rate_limit = "login")]
pub(crate) async fn login(
    Extension(site): Extension<Site>,
    users: Users,
    session: Session,
    limits: RateLimits,
    token: SubmitToken,
    field: SubmitFormField,
    Form(form): Form<LoginForm>,
) -> AutumnResult<FormPage> {
    let email = form.email.trim().to_lowercase();
    let rejected = |error: &'static str| {
        let page = login_page(&site, &token, &field, &form.email, Some(error));
        Ok(FormPage::invalid(page))
    };
    if email.is_empty() || form.password.is_empty() {
        return rejected("Enter your email address and your password.");
    }
    if form.password.chars().count() > MAX_PASSWORD_CHARS {
        return rejected("That email address and password do not match an account.");
    }
    // Before the password is checked: the check is the work guessing costs.
    limits.check(LOGIN_ACCOUNT_RULE, &email).await?;
    let found = users.find_with_password(&email).await?;
    let (user, stored) = match found {
        Some((user, stored)) => (Some(user), Some(stored)),
        None => (None, None),
    };
    // The same work, and the same answer, whether or not the email exists.
    let matches = password::verify(form.password.clone(), stored).await?;
    let Some(user) = user.filter(|_| matches) else {
        return rejected("That email address and password do not match an account.");
    };
    site.hold().await;
    users.record_login(user.id).await?;
    sign_in(&session, user.id).await?;
    Ok(FormPage::redirect("/account"))
}

/// `GET /logout`: a button that logs out (a form, so that logging out is a
/// POST a link or an image on another page cannot trigger).
///
/// It is a page of its own because a request mints one submit token, and
/// the account page's token is its profile form's.
#[get("/logout")]
pub(crate) async fn logout_form(
    Extension(site): Extension<Site>,
    viewer: Viewer,
    token: SubmitToken,
    field: SubmitFormField,
) -> Response {
    let Some(user) = viewer.user else {
        return Redirect::to("/").into_response();
    };
    page(
        &site,
        Some(&user),
        "Log out",
        html! {
            h1 { "Log out" }
            p { "Signed in as " strong { (user.email) } "." }
            form method="POST" action="/logout" data-autumn-once {
                (submit_token_field(&token, &field))
                button type="submit" { "Log out" }
            }
        },
    )
    .into_response()
}

/// `POST /logout`: signs out (the session's values are dropped, its id is
/// retired and the cookie removed) and answers 303 to the home page.
#[post("/logout")]
pub(crate) async fn logout(session: Session) -> AutumnResult<Redirect> {
    session.sign_out().await?;
    Ok(Redirect::to("/"))
}
