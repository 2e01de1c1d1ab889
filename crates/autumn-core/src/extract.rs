//! One macro for the extractors that hand a handler a value a layer put in
//! the request's extensions ([`Session`](crate::session::Session),
//! [`Tenant`](crate::tenancy::Tenant)).
//!
//! Each such extractor is the same two impls: the value cloned out of the
//! extensions or, when the layer did not run, the type's rejection; and
//! for `Option<T>`, `None` instead of the rejection. Written once here, they
//! cannot drift apart (one cloning, another taking; one rejecting, another
//! answering `None`).

/// Implements `FromRequestParts` and `OptionalFromRequestParts` for a value
/// that a layer inserts into the request's extensions.
///
/// `T` is cloned out of the extensions; when it is not there (its layer is
/// not installed, or did not run for this path), `T` is rejected with the
/// given unit variant of its rejection enum, and `Option<T>` is `None`.
///
/// ```text
/// extension_extractor!(Tenant, TenantRejection::NotResolved);
/// ```
macro_rules! extension_extractor {
    ($type:ty, $rejection:ident :: $variant:ident) => {
        impl<S: Send + Sync> ::axum::extract::FromRequestParts<S> for $type {
            type Rejection = $rejection;

            async fn from_request_parts(
                parts: &mut ::axum::http::request::Parts,
                _state: &S,
            ) -> ::core::result::Result<Self, Self::Rejection> {
                parts
                    .extensions
                    .get::<Self>()
                    .cloned()
                    .ok_or($rejection::$variant)
            }
        }

        impl<S: Send + Sync> ::axum::extract::OptionalFromRequestParts<S> for $type {
            type Rejection = ::core::convert::Infallible;

            async fn from_request_parts(
                parts: &mut ::axum::http::request::Parts,
                _state: &S,
            ) -> ::core::result::Result<Option<Self>, Self::Rejection> {
                Ok(parts.extensions.get::<Self>().cloned())
            }
        }
    };
}

pub(crate) use extension_extractor;
