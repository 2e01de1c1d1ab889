//! HTML forms: per-field validation errors, the 422 re-render of a rejected
//! form, and flash messages that survive a redirect.
//!
//! A form handler validates what was posted into [`FieldErrors`]. When there
//! are any, it answers [`FormPage::invalid`]: the form rendered again with
//! the messages and the values entered, status 422. Otherwise it does its
//! work, leaves a message with [`Flash`] and answers
//! [`FormPage::redirect`] (303), and the page it redirects to shows the
//! message once.
//!
//! ```
//! use autumn_web::forms::{FieldErrors, Flash, FormPage};
//! use autumn_web::prelude::*;
//! use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
//!
//! #[derive(Default, serde::Deserialize)]
//! struct Invite {
//!     email: String,
//! }
//!
//! impl Invite {
//!     fn validate(&self) -> Result<(), FieldErrors> {
//!         let mut errors = FieldErrors::new();
//!         if !self.email.contains('@') {
//!             errors.add("email", "Enter an email address like name@example.com.");
//!         }
//!         errors.into_result(())
//!     }
//! }
//!
//! fn render(form: &Invite, errors: &FieldErrors, token: &SubmitToken, field: &SubmitFormField) -> Markup {
//!     html! {
//!         form method="POST" action="/invites" {
//!             (submit_token_field(token, field))
//!             input type="email" name="email" value=(form.email);
//!             @if let Some(message) = errors.get("email") {
//!                 span .error { (message) }
//!             }
//!             button type="submit" { "Invite" }
//!         }
//!     }
//! }
//!
//! #[get("/invites/new")]
//! async fn new_invite(token: SubmitToken, field: SubmitFormField) -> Markup {
//!     render(&Invite::default(), &FieldErrors::new(), &token, &field)
//! }
//!
//! #[post("/invites")]
//! async fn create_invite(
//!     token: SubmitToken,
//!     field: SubmitFormField,
//!     flash: Flash,
//!     Form(form): Form<Invite>,
//! ) -> AutumnResult<FormPage> {
//!     if let Err(errors) = form.validate() {
//!         return Ok(FormPage::invalid(render(&form, &errors, &token, &field)));
//!     }
//!     // ... send the invitation: this runs once per rendered form ...
//!     flash.set("notice", format!("Invited {}.", form.email)).await?;
//!     Ok(FormPage::redirect("/invites"))
//! }
//!
//! #[get("/invites")]
//! async fn invites(flash: Flash) -> AutumnResult<Markup> {
//!     let messages = flash.take().await?;
//!     Ok(html! {
//!         @for message in &messages {
//!             p class=(message.kind) role="status" { (message.text) }
//!         }
//!     })
//! }
//! # let _ = routes![new_invite, create_invite, invites];
//! ```
//!
//! **The re-render takes the request's
//! [`SubmitToken`](crate::security::SubmitToken).** The token the rejected
//! form posted was claimed by the submit-token layer before the handler ran,
//! and released again because the answer was a 4xx; the `SubmitToken` the
//! handler extracts is a fresh one, minted for this request. The
//! re-rendered page is a new form, so it carries that fresh token, and its
//! next post is guarded like the first.
//!
//! The [forms guide](crate::docs::forms) has the whole story.

mod changeset;
mod nested;

pub use changeset::Changeset;
pub use nested::{
    ADD_ROW, ChildFields, NestedChangesetForm, NestedFormData, NestedRow, REMOVE_ROW,
};

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Redirect, Response};
use http::StatusCode;
use http::request::Parts;
use maud::Markup;
use serde::{Deserialize, Serialize};

use crate::session::{Session, SessionError, SessionRejection};

/// What is wrong with a posted form, field by field, in the order found.
///
/// A field may have several messages; [`get`](Self::get) answers the first,
/// which is the one a form usually shows next to the field.
///
/// ```
/// use autumn_web::forms::FieldErrors;
///
/// let mut errors = FieldErrors::new();
/// assert!(errors.is_empty());
/// errors.add("email", "Enter your email address.");
/// errors.add("password", "Choose a password of at least 8 characters.");
/// assert_eq!(errors.get("email"), Some("Enter your email address."));
/// assert_eq!(errors.get("name"), None);
/// let fields: Vec<&str> = errors.iter().map(|(field, _)| field).collect();
/// assert_eq!(fields, ["email", "password"]);
/// assert!(errors.into_result(()).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    errors: Vec<(String, String)>,
}

impl FieldErrors {
    /// No errors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `message` against `field` (the input's `name`).
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push((field.into(), message.into()));
    }

    /// Whether nothing was recorded: the form is valid.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// How many messages were recorded.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The first message recorded against `field`, if any.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, message)| message.as_str())
    }

    /// Whether `field` has a message.
    pub fn contains(&self, field: &str) -> bool {
        self.get(field).is_some()
    }

    /// Every `(field, message)`, in the order they were added: the summary
    /// above a rejected form.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.errors
            .iter()
            .map(|(field, message)| (field.as_str(), message.as_str()))
    }

    /// `Ok(valid)` when nothing was recorded, else `Err(self)`: the end of a
    /// `validate` method.
    ///
    /// # Errors
    ///
    /// `self`, when it holds any message.
    pub fn into_result<T>(self, valid: T) -> Result<T, Self> {
        if self.is_empty() {
            Ok(valid)
        } else {
            Err(self)
        }
    }
}

impl<'a> IntoIterator for &'a FieldErrors {
    type Item = (&'a str, &'a str);
    type IntoIter = Box<dyn Iterator<Item = (&'a str, &'a str)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<F: Into<String>, M: Into<String>> FromIterator<(F, M)> for FieldErrors {
    fn from_iter<I: IntoIterator<Item = (F, M)>>(iter: I) -> Self {
        let mut errors = Self::new();
        for (field, message) in iter {
            errors.add(field, message);
        }
        errors
    }
}

/// The answer to a form post: the form again with its errors (422), or a
/// redirect (303) once it was accepted.
///
/// Return it from a form handler (as `AutumnResult<FormPage>`): both
/// outcomes have one type, so the handler needs no `into_response()`.
///
/// ```
/// use autumn_web::forms::FormPage;
/// use autumn_web::prelude::*;
///
/// let rejected = FormPage::invalid(html! { form { "..." } }).into_response();
/// assert_eq!(rejected.status(), StatusCode::UNPROCESSABLE_ENTITY);
/// let too_large = FormPage::rejected(StatusCode::PAYLOAD_TOO_LARGE, html! { "..." });
/// assert_eq!(too_large.into_response().status(), StatusCode::PAYLOAD_TOO_LARGE);
/// let accepted = FormPage::redirect("/done").into_response();
/// assert_eq!(accepted.status(), StatusCode::SEE_OTHER);
/// ```
#[derive(Debug)]
#[must_use = "return the FormPage from the handler"]
pub struct FormPage {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Rejected(StatusCode, Markup),
    Redirect(String),
}

impl FormPage {
    /// The rejected form rendered again, answered 422 Unprocessable Content
    /// as HTML.
    ///
    /// Render it with the request's [`SubmitToken`](crate::security::SubmitToken),
    /// which is fresh: the 4xx leaves the posted token unrecorded, and the
    /// page is a new form that needs a token of its own.
    pub fn invalid(page: Markup) -> Self {
        Self::rejected(StatusCode::UNPROCESSABLE_ENTITY, page)
    }

    /// The rejected form rendered again with another status: 413 for an
    /// upload that is too large, say. Like [`invalid`](Self::invalid), it
    /// needs the request's fresh token. Use a 4xx: the submit-token layer
    /// records a 2xx or 3xx as the form's final answer, which a rejection is
    /// not.
    pub fn rejected(status: StatusCode, page: Markup) -> Self {
        Self {
            kind: Kind::Rejected(status, page),
        }
    }

    /// 303 See Other to `location`: the browser follows with a GET, so a
    /// reload of the page it lands on does not post the form again.
    pub fn redirect(location: impl Into<String>) -> Self {
        Self {
            kind: Kind::Redirect(location.into()),
        }
    }
}

impl IntoResponse for FormPage {
    fn into_response(self) -> Response {
        match self.kind {
            Kind::Rejected(status, page) => (status, page).into_response(),
            Kind::Redirect(location) => Redirect::to(&location).into_response(),
        }
    }
}

/// The session key under which [`Flash`] keeps the messages waiting for the
/// next page: a list of [`FlashMessage`] as JSON.
pub const FLASH_SESSION_KEY: &str = "_flash";

/// One flash message: a kind the page styles it by (`"notice"`, `"error"`,
/// whatever the app uses) and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlashMessage {
    /// What sort of message it is, for the page to choose how to show it.
    pub kind: String,
    /// The message itself.
    pub text: String,
}

/// Messages for the next page a visitor sees, kept in their
/// [`Session`] under [`FLASH_SESSION_KEY`]: an extractor.
///
/// [`set`](Self::set) leaves a message after a form post; the page the post
/// redirects to calls [`take`](Self::take), which answers the messages and
/// removes them, so they are shown once. Because the session is saved
/// before the submit-token or idempotency guard records the response, a
/// replay of the post carries the session that holds the message.
///
/// ```
/// use autumn_web::forms::Flash;
/// use autumn_web::prelude::*;
///
/// #[post("/settings")]
/// async fn save_settings(flash: Flash) -> AutumnResult<Redirect> {
///     flash.set("notice", "Your settings were saved.").await?;
///     Ok(Redirect::to("/settings"))
/// }
///
/// #[get("/settings")]
/// async fn settings(flash: Flash) -> AutumnResult<Markup> {
///     let messages = flash.take().await?;
///     Ok(html! { @for message in &messages { p role="status" { (message.text) } } })
/// }
/// # let _ = routes![save_settings, settings];
/// ```
///
/// Without the session layer (`[session] enabled = false`) the extractor
/// answers 500 `session_layer_missing`, like [`Session`] does.
#[derive(Debug, Clone)]
pub struct Flash {
    session: Session,
}

impl Flash {
    /// The flash of `session`, for code that already holds the session.
    pub fn new(session: Session) -> Self {
        Self { session }
    }

    /// Leaves `text` for the next page, after any message already waiting:
    /// several calls leave several messages, taken in order.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the session could not be read, or the waiting
    /// messages are not flash messages.
    pub async fn set(
        &self,
        kind: impl Into<String>,
        text: impl Into<String>,
    ) -> Result<(), SessionError> {
        let mut messages: Vec<FlashMessage> = self
            .session
            .get(FLASH_SESSION_KEY)
            .await?
            .unwrap_or_default();
        messages.push(FlashMessage {
            kind: kind.into(),
            text: text.into(),
        });
        self.session.insert(FLASH_SESSION_KEY, messages).await
    }

    /// The messages left for this page, removed from the session so that
    /// they are shown once; empty when there are none.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the session could not be read.
    pub async fn take(&self) -> Result<Vec<FlashMessage>, SessionError> {
        Ok(self
            .session
            .remove(FLASH_SESSION_KEY)
            .await?
            .unwrap_or_default())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Flash {
    type Rejection = SessionRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let session = <Session as FromRequestParts<S>>::from_request_parts(parts, state).await?;
        Ok(Self::new(session))
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Flash {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Session>().cloned().map(Self::new))
    }
}
