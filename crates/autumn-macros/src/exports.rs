//! Every path the generated code names, defined once.
//!
//! Generated code must only reach into `::autumn_web::Route` and
//! `::autumn_web::__private::...`, so the facade stays free to reorganise
//! everything else. Keeping the paths here (Rocket's `exports.rs` habit)
//! means a rename in the facade is a one-line change in this crate.

use proc_macro2::{Ident, Punct, Spacing, Span, TokenStream};
use quote::{ToTokens, TokenStreamExt};

/// An absolute path (`::a::b::c`) into the `autumn_web` facade.
#[derive(Clone, Copy)]
pub(crate) struct ExportPath(&'static [&'static str]);

impl ExportPath {
    /// The path with every token carrying `span`, so errors about it point
    /// at user code instead of at the macro invocation.
    pub(crate) fn spanned(self, span: Span) -> TokenStream {
        let mut tokens = TokenStream::new();
        for segment in self.0 {
            let mut colon = Punct::new(':', Spacing::Joint);
            colon.set_span(span);
            tokens.append(colon);
            let mut colon = Punct::new(':', Spacing::Alone);
            colon.set_span(span);
            tokens.append(colon);
            tokens.append(Ident::new(segment, span));
        }
        tokens
    }
}

impl ToTokens for ExportPath {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.extend(self.spanned(Span::call_site()));
    }
}

/// `::autumn_web::Route`, what `routes![]` collects.
pub(crate) const ROUTE: ExportPath = ExportPath(&["autumn_web", "Route"]);

/// `::autumn_web::__private::RouteDef`, implemented by each handler's marker struct.
pub(crate) const ROUTE_DEF: ExportPath = ExportPath(&["autumn_web", "__private", "RouteDef"]);

/// `::autumn_web::__private::macro_route`, builds a `Route` from a handler.
pub(crate) const MACRO_ROUTE: ExportPath = ExportPath(&["autumn_web", "__private", "macro_route"]);

/// `::autumn_web::__private::openapi`: the probes a route describes its
/// handler's types with, and the `Operation` they write.
pub(crate) const OPENAPI: ExportPath = ExportPath(&["autumn_web", "__private", "openapi"]);

/// `::autumn_web::__private::route_of`, turns a marker type into a `Route`.
pub(crate) const ROUTE_OF: ExportPath = ExportPath(&["autumn_web", "__private", "route_of"]);

/// `::autumn_web::__private::run_main`, drives `#[autumn_web::main]`'s body.
/// `::autumn_web::__private::allocator`, the macro declaring the app's
/// global allocator (nothing without the `mimalloc` feature).
pub(crate) const ALLOCATOR: ExportPath = ExportPath(&["autumn_web", "__private", "allocator"]);
pub(crate) const RUN_MAIN: ExportPath = ExportPath(&["autumn_web", "__private", "run_main"]);

/// `::autumn_web::__private::http::Method`.
pub(crate) const HTTP_METHOD: ExportPath =
    ExportPath(&["autumn_web", "__private", "http", "Method"]);

/// `::autumn_web::__private::axum::routing`, home of `get`, `post`, ...
pub(crate) const AXUM_ROUTING: ExportPath =
    ExportPath(&["autumn_web", "__private", "axum", "routing"]);

/// `::autumn_web::__private::test_runtime`, drives `#[autumn_web::test]`'s body.
pub(crate) const TEST_RUNTIME: ExportPath =
    ExportPath(&["autumn_web", "__private", "test_runtime"]);

/// `::autumn_web::__private::maud::PreEscaped`, what `html!` returns.
pub(crate) const MAUD_PRE_ESCAPED: ExportPath =
    ExportPath(&["autumn_web", "__private", "maud", "PreEscaped"]);

/// `::autumn_web::__private::IdempotencyPolicy`, a route attribute's policy.
pub(crate) const IDEMPOTENCY_POLICY: ExportPath =
    ExportPath(&["autumn_web", "__private", "IdempotencyPolicy"]);

/// `::autumn_web::__private::FingerprintPolicy`.
pub(crate) const FINGERPRINT_POLICY: ExportPath =
    ExportPath(&["autumn_web", "__private", "FingerprintPolicy"]);

/// `::autumn_web::__private::KeyRequirement`.
pub(crate) const KEY_REQUIREMENT: ExportPath =
    ExportPath(&["autumn_web", "__private", "KeyRequirement"]);

/// `::autumn_web::__private::RecordErrors`, a route's `record_errors`.
pub(crate) const RECORD_ERRORS: ExportPath =
    ExportPath(&["autumn_web", "__private", "RecordErrors"]);

/// `::autumn_web::__private::AnonymousKeys`, a route's `anonymous_keys`.
pub(crate) const ANONYMOUS_KEYS: ExportPath =
    ExportPath(&["autumn_web", "__private", "AnonymousKeys"]);

/// `::std::time::Duration`, for a route attribute's TTLs.
pub(crate) const DURATION: ExportPath = ExportPath(&["std", "time", "Duration"]);

/// `::std::string::String`, the buffer `html!` writes into.
pub(crate) const STRING: ExportPath = ExportPath(&["std", "string", "String"]);

/// `#[repository]`'s paths: the repository support in
/// `::autumn_web::__private`, and diesel through the facade.
pub(crate) const AUTUMN_ERROR: ExportPath = ExportPath(&["autumn_web", "__private", "AutumnError"]);
pub(crate) const AXUM_FROM_REQUEST_PARTS: ExportPath = ExportPath(&[
    "autumn_web",
    "__private",
    "axum",
    "extract",
    "FromRequestParts",
]);
/// `::autumn_web::__private::axum::extract::FromRequest`, for
/// `#[debug_handler]`'s check of a handler's last argument.
pub(crate) const AXUM_FROM_REQUEST: ExportPath =
    ExportPath(&["autumn_web", "__private", "axum", "extract", "FromRequest"]);
/// `::autumn_web::__private::axum::response::IntoResponse`.
pub(crate) const AXUM_INTO_RESPONSE: ExportPath = ExportPath(&[
    "autumn_web",
    "__private",
    "axum",
    "response",
    "IntoResponse",
]);
pub(crate) const HTTP_PARTS: ExportPath =
    ExportPath(&["autumn_web", "__private", "http", "request", "Parts"]);
pub(crate) const COMMIT_HOOKS: ExportPath = ExportPath(&["autumn_web", "__private", "CommitHooks"]);
pub(crate) const DB_POOL: ExportPath = ExportPath(&["autumn_web", "__private", "DbPool"]);
pub(crate) const DIESEL: ExportPath = ExportPath(&["autumn_web", "__private", "diesel"]);
pub(crate) const DIESEL_ASYNC: ExportPath =
    ExportPath(&["autumn_web", "__private", "diesel_async"]);
pub(crate) const DIESEL_ERROR: ExportPath =
    ExportPath(&["autumn_web", "__private", "diesel", "result", "Error"]);
pub(crate) const ENQUEUE_HOOK: ExportPath =
    ExportPath(&["autumn_web", "__private", "enqueue_hook"]);
pub(crate) const MUTATION_CONTEXT: ExportPath =
    ExportPath(&["autumn_web", "__private", "MutationContext"]);
pub(crate) const ON_TX: ExportPath = ExportPath(&["autumn_web", "__private", "on_tx"]);
pub(crate) const PAGE: ExportPath = ExportPath(&["autumn_web", "__private", "Page"]);
pub(crate) const PAGING: ExportPath = ExportPath(&["autumn_web", "__private", "Paging"]);
pub(crate) const REPO_DB: ExportPath = ExportPath(&["autumn_web", "__private", "RepoDb"]);
pub(crate) const REPO_TX: ExportPath = ExportPath(&["autumn_web", "__private", "RepoTx"]);
pub(crate) const REPOSITORY_PARTS: ExportPath =
    ExportPath(&["autumn_web", "__private", "repository_parts"]);
pub(crate) const SCOPED_FUTURE_EXT: ExportPath =
    ExportPath(&["autumn_web", "__private", "ScopedFutureExt"]);

/// `::autumn_web::__private::AppMigrations`, what `migrations!` makes.
pub(crate) const APP_MIGRATIONS: ExportPath =
    ExportPath(&["autumn_web", "__private", "AppMigrations"]);

/// `::autumn_web::__private::Migration`, one folder of it.
pub(crate) const APP_MIGRATION: ExportPath = ExportPath(&["autumn_web", "__private", "Migration"]);

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn paths_render_as_absolute_paths() {
        assert_eq!(
            quote!(#ROUTE_OF).to_string(),
            quote!(::autumn_web::__private::route_of).to_string()
        );
        assert_eq!(
            quote!(#HTTP_METHOD).to_string(),
            quote!(::autumn_web::__private::http::Method).to_string()
        );
        assert_eq!(
            quote!(#ROUTE).to_string(),
            quote!(::autumn_web::Route).to_string()
        );
    }
}
