//! Procedural macros for [Autumn](https://docs.rs/autumn-web).
//!
//! Do not depend on this crate directly: use the re-exports in
//! `autumn_web::prelude` (`get`, `post`, `put`, `patch`, `delete`, `routes`)
//! and `#[autumn_web::main]`. The generated code refers to
//! `::autumn_web::__private`, so it only compiles with `autumn_web` as a
//! dependency.
//!
//! The example below is not compiled here because this crate cannot run doctests
//! against its own macros; they are compiled and tested in the `autumn-ui-tests`
//! crate's `tests/ui` suite.
//!
//! ```text
//! use autumn_web::prelude::*;
//!
//! #[get("/orders")]
//! async fn list_orders() -> Json<Vec<Order>> {
//!     Json(Vec::new())
//! }
//!
//! #[post("/orders", idempotent = false)]
//! async fn place_order(Json(order): Json<NewOrder>) -> impl IntoResponse {
//!     // ...
//! }
//!
//! #[autumn_web::main]
//! async fn main() {
//!     autumn_web::app()
//!         .routes(routes![list_orders, place_order])
//!         .run()
//!         .await;
//! }
//! ```

mod debug_handler;
mod exports;
mod html;
mod main_fn;
mod migrations;
mod repository;
mod route;
mod route_policy;
mod routes;
mod test_fn;

use proc_macro::TokenStream;
use route::Method;

/// Registers an `async fn` as the handler for `GET <path>`.
///
/// `#[get("/orders")]`, optionally `#[get("/orders", idempotent = false)]`.
/// The function is kept as written; a hidden marker type of the same name
/// is added so the handler can be listed in `routes![...]`.
#[proc_macro_attribute]
pub fn get(attr: TokenStream, item: TokenStream) -> TokenStream {
    route::expand(Method::Get, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Registers an `async fn` as the handler for `POST <path>`.
///
/// `#[post("/orders")]`, optionally `#[post("/orders", idempotent = false)]`
/// to opt the route out of at-most-once handling, or the route's own
/// idempotency policy: `idempotency = "required" | "optional" | "off"`,
/// `idempotency_ttl = "48h"`, `idempotency_in_flight_ttl = "30s"`,
/// `in_flight_wait_ms = 2000`, `idempotency_fingerprint = "json" | "bytes"`,
/// `idempotency_ignore = ["/client_ts"]` or `idempotency_only = ["/amount"]`
/// (the idempotency guide's "Per-route policy" explains each; `put`, `patch`
/// and `delete` take the same).
#[proc_macro_attribute]
pub fn post(attr: TokenStream, item: TokenStream) -> TokenStream {
    route::expand(Method::Post, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Registers an `async fn` as the handler for `PUT <path>`.
///
/// `#[put("/orders/{id}")]`, optionally with `idempotent = false`.
#[proc_macro_attribute]
pub fn put(attr: TokenStream, item: TokenStream) -> TokenStream {
    route::expand(Method::Put, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Registers an `async fn` as the handler for `PATCH <path>`.
///
/// `#[patch("/orders/{id}")]`, optionally with `idempotent = false`.
#[proc_macro_attribute]
pub fn patch(attr: TokenStream, item: TokenStream) -> TokenStream {
    route::expand(Method::Patch, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Registers an `async fn` as the handler for `DELETE <path>`.
///
/// `#[delete("/orders/{id}")]`, optionally with `idempotent = false`.
#[proc_macro_attribute]
pub fn delete(attr: TokenStream, item: TokenStream) -> TokenStream {
    route::expand(Method::Delete, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Checks a handler's signature piece by piece, for a compiler error that
/// names the argument or the output that is wrong.
///
/// When a handler does not compile as a route ("the trait `Handler<_, _>`
/// is not implemented"), put this under its route attribute: each argument
/// must be an extractor (only the last may read the body), the future must
/// be `Send`, and the output a response. The handler is left as it is; the
/// checks cost nothing at run time. (Compiled in the `autumn-ui-tests`
/// crate and in the README, like the examples above.)
///
/// ```text
/// use autumn_web::prelude::*;
///
/// #[post("/orders")]
/// #[autumn_web::debug_handler]
/// async fn create(Json(order): Json<serde_json::Value>) -> Json<serde_json::Value> {
///     Json(order)
/// }
/// ```
#[proc_macro_attribute]
pub fn debug_handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    debug_handler::expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Collects route handlers into a `Vec<autumn_web::Route>`.
///
/// Takes a comma-separated list of paths to functions annotated with a
/// route attribute: `routes![list_orders, place_order, auth::signup]`.
/// A trailing comma and an empty list are accepted.
#[proc_macro]
pub fn routes(input: TokenStream) -> TokenStream {
    routes::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Runs an `async fn main()` on Autumn's runtime.
///
/// The function may return `()` or any type, such as
/// `Result<(), Box<dyn std::error::Error>>`; it takes no arguments and the
/// attribute takes none either.
#[proc_macro_attribute]
pub fn main(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    main_fn::expand(attr.into(), item.clone())
        .unwrap_or_else(|error| main_fn::recover(&error, item))
        .into()
}

/// Writes HTML with maud's template syntax, returning a `Markup` (a
/// response on its own, or part of a bigger template).
///
/// It is maud's `html!` expanding through `autumn_web`, so an app needs no
/// `maud` dependency of its own. The syntax is maud's:
/// <https://maud.lambda.xyz/>.
///
/// ```text
/// let name = "<b>Ada</b>";
/// let page = html! { h1 { "Hello, " (name) } };
/// assert_eq!(page.into_string(), "<h1>Hello, &lt;b&gt;Ada&lt;/b&gt;</h1>");
/// ```
#[proc_macro]
pub fn html(input: TokenStream) -> TokenStream {
    html::expand(input.into()).into()
}

/// Runs an `async fn` test on a fresh tokio runtime, like `#[tokio::test]`,
/// so an app's tests need no `tokio` dependency of their own.
///
/// The function takes no arguments and may return `()` or a `Result`;
/// the attribute takes no arguments either. The runtime is current-thread
/// with time and I/O enabled.
///
/// ```text
/// #[autumn_web::test]
/// async fn home_page_answers() {
///     let app = TestApp::from_builder(autumn_web::app().routes(routes![home]));
///     app.get("/").send().await.assert_ok();
/// }
/// ```
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    test_fn::expand(attr.into(), item.clone())
        .unwrap_or_else(|error| {
            let mut tokens = error.to_compile_error();
            tokens.extend(item);
            tokens
        })
        .into()
}

/// Generates a repository over a diesel table: `find`, `list` (paging),
/// `create`, `update` and `delete` on the app database, extractable in a
/// handler, with durable `after_create_commit`, `after_update_commit` and
/// `after_destroy_commit` hooks written in the mutation's transaction.
///
/// `#[repository(model = Invoice, table = invoices, insert = NewInvoice,
/// update = InvoiceChanges, after_create_commit = send_invoice)]` on
/// `pub struct Invoices;`. `id = i64` and `primary_key = id` are the
/// defaults. The guide is `autumn_web::docs::repositories`.
#[proc_macro_attribute]
pub fn repository(attr: TokenStream, item: TokenStream) -> TokenStream {
    repository::expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The app's own migrations, read from `DIR` (relative to the crate's
/// `Cargo.toml`) when the app compiles: one folder `VERSION_NAME` per
/// migration, with an `up.sql` and a `down.sql`, as `diesel migration
/// generate` writes them. Give them to `AppBuilder::migrations`; the guide
/// is `autumn_web::docs::repositories`.
///
/// A new folder is seen at the next build of the crate: `cargo` rebuilds it
/// when a file it includes changes, and a `build.rs` with
/// `println!("cargo:rerun-if-changed=migrations")` makes it notice new ones.
#[proc_macro]
pub fn migrations(input: TokenStream) -> TokenStream {
    migrations::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
