//! Who is signed in, kept in the server-side session: the user's id under
//! [`USER_ID`], and a one-time message for the next page under [`FLASH`].

use autumn_web::AutumnError;
use autumn_web::session::Session;
use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Redirect, Response};
use http::request::Parts;
use uuid::Uuid;

use crate::users::{User, Users};

/// The session key holding the signed-in user's id.
pub(crate) const USER_ID: &str = "user_id";
/// The session key holding the message the next page shows once.
pub(crate) const FLASH: &str = "flash";

/// Signs `user` in: a new session id first, so that an id the browser had
/// before (possibly planted by someone else) is not the signed-in one.
pub(crate) async fn sign_in(session: &Session, user: Uuid) -> Result<(), AutumnError> {
    session.cycle_id().await?;
    session.insert(USER_ID, user).await?;
    Ok(())
}

/// Leaves `message` for the next page to show once.
pub(crate) async fn flash(session: &Session, message: String) -> Result<(), AutumnError> {
    session.insert(FLASH, message).await?;
    Ok(())
}

/// The message left for this page, taken out of the session so that it is
/// shown once.
pub(crate) async fn take_flash(session: &Session) -> Result<Option<String>, AutumnError> {
    Ok(session.remove(FLASH).await?)
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
    pub(crate) session: Session,
}

impl<S: Send + Sync> FromRequestParts<S> for Viewer {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let session = session(parts)?;
        let Some(id) = session.get::<Uuid>(USER_ID).await? else {
            return Ok(Self {
                user: None,
                session,
            });
        };
        let users = Users::from_request_parts(parts, state).await?;
        // An id whose account is gone signs nobody in.
        let user = users.find(id).await?;
        Ok(Self { user, session })
    }
}

/// The signed-in user: an extractor for pages only they may see. Anyone
/// else is sent to the login form (303).
#[derive(Debug, Clone)]
pub(crate) struct SignedIn {
    pub(crate) user: User,
    pub(crate) session: Session,
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
            Some(user) => Ok(Self {
                user,
                session: viewer.session,
            }),
            None => Err(NotSignedIn::Anonymous),
        }
    }
}
