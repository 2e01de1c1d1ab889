//! The account page and its profile form: a display name and a picture,
//! posted as `multipart/form-data`.
//!
//! The submit token goes first in the form, before the file input, so the
//! layer finds it at the start of the body however large the upload. A
//! profile form sent twice (a double-click, a resend) stores the picture
//! once: the second post gets the first one's 303 replayed.

use autumn_web::forms::{FieldErrors, Flash, FlashMessage, FormPage};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use axum::Extension;
use axum::extract::Multipart;
use axum::extract::multipart::{Field, MultipartError};
use http::{HeaderValue, header};

use super::{error_summary, page};
use crate::Site;
use crate::signed_in::SignedIn;
use crate::users::{Avatar, User, Users};

/// The largest picture accepted, in bytes (1 MiB).
pub const MAX_AVATAR_BYTES: usize = 1024 * 1024;
/// The longest display name, in characters.
pub const MAX_NAME_CHARS: usize = 100;

/// The picture types accepted, with the bytes each file starts with: the
/// declared type must be one of these and the content must agree, so a
/// renamed text file is not served back as an image.
const IMAGE_TYPES: [(&str, &[u8]); 4] = [
    ("image/png", b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", b"\xff\xd8\xff"),
    ("image/gif", b"GIF8"),
    ("image/webp", b"RIFF"),
];

/// The account page: the one-time message, the profile and its form.
fn account_page(
    site: &Site,
    user: &User,
    has_avatar: bool,
    messages: &[FlashMessage],
    (token, field_name): (&SubmitToken, &SubmitFormField),
    name: &str,
    errors: &FieldErrors,
) -> Markup {
    page(
        site,
        Some(user),
        "Your account",
        html! {
            @for message in messages {
                p role="status" class={ "flash " (message.kind) } { (message.text) }
            }
            h1 { "Your account" }
            p { "Signed in as " strong #who { (user.name) } " (" (user.email) ")." }
            @if has_avatar {
                img #avatar src="/account/avatar" alt="Your picture" width="96" height="96";
            } @else {
                p #no-avatar { "No picture yet." }
            }
            h2 { "Profile" }
            (error_summary(errors.iter().map(|(_, message)| message)))
            form method="POST" action="/account/profile" enctype="multipart/form-data"
                novalidate data-autumn-once {
                // First, before the file: see the module docs.
                (submit_token_field(token, field_name))
                p {
                    label for="name" { "Display name" }
                    input #name type="text" name="name" required autocomplete="name"
                        value=(name) aria-invalid=[errors.get("name").map(|_| "true")];
                }
                p {
                    label for="avatar" { "Picture (PNG, JPEG, GIF or WebP, at most 1 MiB)" }
                    input #avatar-file type="file" name="avatar"
                        accept="image/png,image/jpeg,image/gif,image/webp"
                        aria-invalid=[errors.get("avatar").map(|_| "true")];
                }
                button type="submit" { "Save profile" }
            }
            p {
                a #change-password href="/account/password" { "Change password" }
                " · "
                a href="/logout" { "Log out" }
            }
        },
    )
}

/// `GET /account`: the signed-in user's page, with the message left by the
/// post that led here, shown once. Anyone else is sent to `/login`.
#[get("/account")]
pub(crate) async fn account(
    Extension(site): Extension<Site>,
    SignedIn { user }: SignedIn,
    flash: Flash,
    users: Users,
    token: SubmitToken,
    field: SubmitFormField,
) -> AutumnResult<Markup> {
    let messages = flash.take().await?;
    let has_avatar = users.avatar(user.id).await?.is_some();
    Ok(account_page(
        &site,
        &user,
        has_avatar,
        &messages,
        (&token, &field),
        &user.name,
        &FieldErrors::new(),
    ))
}

/// What the profile form posted.
struct Profile {
    name: String,
    /// `None` when no file was chosen.
    avatar: Option<Avatar>,
}

/// Why the posted form could not be read.
enum Unreadable {
    /// The picture is over [`MAX_AVATAR_BYTES`] (or the body over axum's
    /// limit): 413.
    TooLarge,
    /// Broken multipart: 400.
    Malformed(MultipartError),
}

impl From<MultipartError> for Unreadable {
    fn from(error: MultipartError) -> Self {
        if error.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::TooLarge
        } else {
            Self::Malformed(error)
        }
    }
}

/// Reads the form's fields; the token field was the layer's and is skipped.
async fn read_profile(mut multipart: Multipart) -> Result<Profile, Unreadable> {
    let mut name = String::new();
    let mut avatar = None;
    let mut declared = None;
    while let Some(field) = multipart.next_field().await? {
        match field.name() {
            Some("name") => name = field.text().await?,
            Some("avatar") => {
                declared = field.content_type().map(str::to_owned);
                let chosen = field.file_name().is_some_and(|file| !file.is_empty());
                let bytes = read_limited(field).await?;
                // A form sent without choosing a file has an empty part.
                if chosen || !bytes.is_empty() {
                    avatar = Some(bytes);
                }
            }
            _ => {}
        }
    }
    let avatar = avatar.map(|bytes| Avatar {
        content_type: declared.unwrap_or_default(),
        bytes,
    });
    Ok(Profile { name, avatar })
}

/// The field's bytes, refused once they pass [`MAX_AVATAR_BYTES`] (without
/// reading the rest of an oversized upload into memory).
async fn read_limited(mut field: Field<'_>) -> Result<Vec<u8>, Unreadable> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await? {
        if bytes.len() + chunk.len() > MAX_AVATAR_BYTES {
            return Err(Unreadable::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The picture's problem, if any: an empty file, or a type that is not one
/// of [`IMAGE_TYPES`] or that the content does not start like.
fn check_avatar(avatar: &Avatar) -> Option<&'static str> {
    if avatar.bytes.is_empty() {
        return Some("The picture file is empty.");
    }
    let declared = avatar.content_type.trim().to_ascii_lowercase();
    match IMAGE_TYPES.iter().find(|(kind, _)| *kind == declared) {
        None => Some("Choose a PNG, JPEG, GIF or WebP picture."),
        Some((_, magic)) if !avatar.bytes.starts_with(magic) => {
            Some("That file is not the kind of picture its name says.")
        }
        Some(_) => None,
    }
}

/// `POST /account/profile`: saves the display name and, when a file was
/// chosen, stores it as the user's picture (replacing the old one); answers
/// 303 to the account page with a message. A bad picture or an empty name
/// is answered 422, a picture over 1 MiB 413, each with the account page
/// and the form again.
#[post("/account/profile")]
pub(crate) async fn save_profile(
    Extension(site): Extension<Site>,
    SignedIn { user }: SignedIn,
    flash: Flash,
    users: Users,
    token: SubmitToken,
    field: SubmitFormField,
    multipart: Multipart,
) -> AutumnResult<FormPage> {
    let has_avatar = || async { users.avatar(user.id).await.map(|found| found.is_some()) };
    let rejected = |status: StatusCode, name: &str, errors: FieldErrors, has_avatar: bool| {
        let page = account_page(
            &site,
            &user,
            has_avatar,
            &[],
            (&token, &field),
            name,
            &errors,
        );
        Ok(FormPage::rejected(status, page))
    };
    let profile = match read_profile(multipart).await {
        Ok(profile) => profile,
        Err(Unreadable::TooLarge) => {
            let mut errors = FieldErrors::new();
            errors.add(
                "avatar",
                "The picture is larger than 1 MiB. Choose a smaller one.",
            );
            return rejected(
                StatusCode::PAYLOAD_TOO_LARGE,
                &user.name,
                errors,
                has_avatar().await?,
            );
        }
        Err(Unreadable::Malformed(error)) => {
            return Err(AutumnError::bad_request(format!(
                "the profile form could not be read: {error}"
            )));
        }
    };
    let name = profile.name.trim();
    let mut errors = FieldErrors::new();
    if name.is_empty() {
        errors.add("name", "Enter a display name.");
    } else if name.chars().count() > MAX_NAME_CHARS {
        errors.add("name", "Choose a display name of at most 100 characters.");
    }
    if let Some(problem) = profile.avatar.as_ref().and_then(check_avatar) {
        errors.add("avatar", problem);
    }
    if !errors.is_empty() {
        return rejected(
            StatusCode::UNPROCESSABLE_ENTITY,
            name,
            errors,
            has_avatar().await?,
        );
    }
    site.hold().await;
    if name != user.name {
        users.rename(user.id, name).await?;
    }
    if let Some(avatar) = &profile.avatar {
        users.store_avatar(user.id, avatar).await?;
    }
    flash.set("notice", "Your profile was saved.").await?;
    Ok(FormPage::redirect("/account"))
}

/// `GET /account/avatar`: the signed-in user's picture; 404 when they have
/// none.
#[get("/account/avatar")]
pub(crate) async fn avatar(SignedIn { user }: SignedIn, users: Users) -> AutumnResult<Response> {
    let avatar = users
        .avatar(user.id)
        .await?
        .ok_or_else(|| AutumnError::not_found("you have no picture yet"))?;
    let mut response = avatar.bytes.into_response();
    let headers = response.headers_mut();
    // The type was checked against the content when it was stored.
    let content_type = HeaderValue::try_from(avatar.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Private to the user, and replaced by the next upload.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    Ok(response)
}
