//! Who is signed in: the session's principal ([`Session::sign_in`]), the
//! user's id. (One-time messages for the next page are the framework's
//! [`Flash`](autumn_web::forms::Flash), in the same session.)

use autumn_web::AutumnError;
use autumn_web::session::Session;
use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Redirect, Response};
use http::request::Parts;
use uuid::Uuid;

use crate::users::{User, Users};

/// Signs `user` in: the session gets a new id (an id the browser had
/// before, possibly planted by someone else, is not the signed-in one) and
/// joins the user's sessions, which a password change ends.
pub(crate) async fn sign_in(session: &Session, user: Uuid) -> Result<(), AutumnError> {
    session.sign_in(user.to_string()).await?;
    Ok(())
}

fn session(parts: &Parts) -> Result<Session, AutumnError> {
    parts.extensions.get::<Session>().cloned().ok_or_else(|| {
        AutumnError::internal("the saas app needs sessions; set session.enabled = true")
    })
}

/// The signed-in user, if any: an extractor for pages that look different
/// for them (the menu) but are open to everyone.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) user: Option<User>,
}

impl<S: Send + Sync> FromRequestParts<S> for Viewer {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let session = session(parts)?;
        // A principal that is not a user id is nobody this app signed in.
        let Some(id) = session
            .principal()
            .await?
            .and_then(|principal| Uuid::parse_str(&principal).ok())
        else {
            return Ok(Self { user: None });
        };
        let users = Users::from_request_parts(parts, state).await?;
        // An id whose account is gone signs nobody in.
        let user = users.find(id).await?;
        Ok(Self { user })
    }
}

/// The signed-in user: an extractor for pages only they may see. Anyone
/// else is sent to the login form (303).
#[derive(Debug, Clone)]
pub(crate) struct SignedIn {
    pub(crate) user: User,
}

/// Why [`SignedIn`] did not extract: nobody is signed in (303 to the login
/// form), or the session or database failed.
#[derive(Debug)]
pub(crate) enum NotSignedIn {
    Anonymous,
    Failed(AutumnError),
}

impl IntoResponse for NotSignedIn {
    fn into_response(self) -> Response {
        match self {
            Self::Anonymous => Redirect::to("/login").into_response(),
            Self::Failed(error) => error.into_response(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SignedIn {
    type Rejection = NotSignedIn;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let viewer = Viewer::from_request_parts(parts, state)
            .await
            .map_err(NotSignedIn::Failed)?;
        match viewer.user {
            Some(user) => Ok(Self { user }),
            None => Err(NotSignedIn::Anonymous),
        }
    }
}
