//! `#[get]`, `#[post]`, `#[put]`, `#[patch]` and `#[delete]`.
//!
//! The handler function is kept untouched and a braced, field-less struct of
//! the same name is added in the type namespace (Rocket's trick). The struct
//! implements `RouteDef`, which is what `routes![...]` looks up.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{ParseStream, Parser};
use syn::{FnArg, ItemFn, LitBool, LitStr, Token};

use crate::exports::{AXUM_ROUTING, HTTP_METHOD, MACRO_ROUTE, OPENAPI, ROUTE, ROUTE_DEF};
use crate::route_policy::{PolicyArgs, parse_policy_arg};

mod kw {
    syn::custom_keyword!(idempotent);
    syn::custom_keyword!(rate_limit);
}

/// The HTTP method a route attribute registers its handler for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    /// The attribute's name.
    fn attr_name(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Put => "put",
            Self::Patch => "patch",
            Self::Delete => "delete",
        }
    }

    /// The name of the `http::Method` and `axum::routing::MethodFilter`
    /// associated constants.
    fn constant(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }
}

/// The parsed `("/path", idempotent = bool, idempotency = "...", ...)` of a
/// route attribute.
struct RouteArgs {
    path: LitStr,
    idempotent: Option<LitBool>,
    /// `rate_limit = "login"`: the `[rate_limit.rules]` rule the route names.
    rate_limit: Option<LitStr>,
    policy: PolicyArgs,
}

fn parse_args(method: Method, input: ParseStream<'_>) -> syn::Result<RouteArgs> {
    let missing_path = || {
        format!(
            "expected a route path string literal, like #[{}(\"/orders\")]",
            method.attr_name()
        )
    };
    if input.is_empty() {
        // Attribute macros get no span for the attribute itself; the call
        // site is the attribute, which is exactly where this belongs.
        return Err(syn::Error::new(Span::call_site(), missing_path()));
    }
    if !input.peek(LitStr) {
        return Err(input.error(missing_path()));
    }
    let path: LitStr = input.parse()?;
    check_path(&path)?;

    let mut idempotent: Option<LitBool> = None;
    let mut rate_limit: Option<LitStr> = None;
    let mut policy = PolicyArgs::default();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::idempotent) {
            let keyword: kw::idempotent = input.parse()?;
            if idempotent.is_some() {
                return Err(syn::Error::new(keyword.span, "`idempotent` given twice"));
            }
            input.parse::<Token![=]>()?;
            if !input.peek(LitBool) {
                return Err(input.error("expected `true` or `false`"));
            }
            idempotent = Some(input.parse()?);
        } else if lookahead.peek(kw::rate_limit) {
            let keyword: kw::rate_limit = input.parse()?;
            if rate_limit.is_some() {
                return Err(syn::Error::new(keyword.span, "`rate_limit` given twice"));
            }
            input.parse::<Token![=]>()?;
            let name: LitStr = input.parse().map_err(|_| {
                input.error(
                    "expected the name of a [rate_limit.rules] rule, like rate_limit = \"login\"",
                )
            })?;
            let value = name.value();
            if value.is_empty()
                || value.len() > 64
                || !value
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
            {
                return Err(syn::Error::new(
                    name.span(),
                    "a rule's name is 1 to 64 letters, digits, `_` or `-`",
                ));
            }
            rate_limit = Some(name);
        } else if !parse_policy_arg(input, &mut policy)? {
            return Err(lookahead.error());
        }
    }
    if idempotent.is_some()
        && let Some(off) = policy.off_span()
    {
        return Err(syn::Error::new(
            off,
            "give `idempotent` or `idempotency = \"off\"`, not both",
        ));
    }
    Ok(RouteArgs {
        path,
        idempotent,
        rate_limit,
        policy,
    })
}

/// Rejects paths axum would panic on at startup, at compile time instead.
fn check_path(path: &LitStr) -> syn::Result<()> {
    let value = path.value();
    if !value.starts_with('/') {
        return Err(syn::Error::new(
            path.span(),
            "route path must start with `/`",
        ));
    }
    for segment in value.split('/') {
        if segment.starts_with(':') || segment.starts_with('*') {
            return Err(syn::Error::new(
                path.span(),
                format!(
                    "`{segment}`: path parameters use braces since axum 0.8, \
                     like `/orders/{{id}}` or `/files/{{*rest}}`"
                ),
            ));
        }
    }
    Ok(())
}

fn check_handler(func: &ItemFn) -> syn::Result<()> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "route handlers must be `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "route handlers cannot be generic",
        ));
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        return Err(syn::Error::new_spanned(
            where_clause,
            "route handlers cannot be generic",
        ));
    }
    if let Some(FnArg::Receiver(receiver)) = sig.inputs.first() {
        return Err(syn::Error::new_spanned(
            receiver,
            "route handlers must be free functions, not methods taking `self`",
        ));
    }
    Ok(())
}

/// Expands one route attribute on `item`.
pub(crate) fn expand(
    method: Method,
    attr: TokenStream,
    item: TokenStream,
) -> syn::Result<TokenStream> {
    let args = (|input: ParseStream<'_>| parse_args(method, input)).parse2(attr)?;
    let func: ItemFn = syn::parse2(item)?;
    check_handler(&func)?;

    let vis = &func.vis;
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let path = &args.path;
    let idempotent =
        args.idempotent.is_none_or(|lit| lit.value) && args.policy.off_span().is_none();
    let with_policy = args.policy.expand();
    let with_rate_limit = args
        .rate_limit
        .as_ref()
        .map(|name| quote!(.with_rate_limit(#name)));
    let constant = syn::Ident::new(method.constant(), Span::call_site());
    let describe = describe(&func, &path.value());

    Ok(quote! {
        #func

        #[allow(non_camel_case_types)]
        #[doc(hidden)]
        #vis struct #name {}

        impl #ROUTE_DEF for #name {
            fn route() -> #ROUTE {
                #MACRO_ROUTE(
                    #HTTP_METHOD::#constant,
                    #AXUM_ROUTING::MethodFilter::#constant,
                    #path,
                    #name_str,
                    #name,
                    #idempotent,
                )
                #with_policy
                #with_rate_limit
                #describe
            }
        }
    })
}

/// `.describe(..)`: the OpenAPI operation of the handler, from its types.
/// Each argument type, and the body type of its return type, is handed to a
/// probe that describes it when it can describe itself and adds nothing
/// otherwise (see `autumn_core::openapi::probe`). `impl Trait` types name
/// nothing and are left out.
fn describe(func: &ItemFn, path: &str) -> TokenStream {
    let names = path_names(path);
    let inputs = func.sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(typed) if !mentions_impl(&typed.ty) => {
            let ty = &typed.ty;
            // `Path<T>` over single values: aide names only a struct's
            // fields, so the values' own schemas are handed over by name.
            let values = path_value_type(ty).map(|value| {
                quote!((&#OPENAPI::Probe::<#value>::new()).describe_path_values(operation, &[#(#names),*]);)
            });
            Some(quote! {
                (&#OPENAPI::Probe::<#ty>::new()).describe_input(operation);
                #values
            })
        }
        _ => None,
    });
    let output = match &func.sig.output {
        syn::ReturnType::Type(_, ty) => {
            let (body, status) = response_body(ty);
            (!mentions_impl(body)).then(
                || quote!((&#OPENAPI::Probe::<#body>::new()).describe_output(operation, #status);),
            )
        }
        syn::ReturnType::Default => None,
    };
    quote! {
        .describe({
            #[allow(unused_imports)]
            use #OPENAPI::{
                DescribeInput as _, DescribeOutput as _, DescribePathValues as _, SkipInput as _,
                SkipOutput as _, SkipPathValues as _,
            };
            #[allow(clippy::needless_borrow)]
            fn describe(operation: &mut #OPENAPI::Operation) {
                #(#inputs)*
                #output
            }
            describe
        })
    }
}

/// The type a handler's response body has, and the status it is documented
/// under: the `T` of `Result<T, _>` or `AutumnResult<T>`, then the last
/// element of a tuple (`(StatusCode, Json<Order>)`); `"2XX"` when the
/// handler picks its status at run time (a tuple that starts with one),
/// `"200"` otherwise.
fn response_body(ty: &syn::Type) -> (&syn::Type, &'static str) {
    let mut ty = ty;
    if let syn::Type::Path(path) = ty
        && let Some(last) = path.path.segments.last()
        && (last.ident == "Result" || last.ident == "AutumnResult")
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(syn::GenericArgument::Type(ok)) = args.args.first()
    {
        ty = ok;
    }
    match ty {
        syn::Type::Tuple(tuple) => match tuple.elems.last() {
            Some(last) => (last, "2XX"),
            None => (ty, "200"),
        },
        syn::Type::Paren(inner) => response_body(&inner.elem),
        _ => (ty, "200"),
    }
}

/// Whether `ty` is or contains `impl Trait`, which no probe can name.
/// The names of `path`'s parameters, in order: `/a/{id}/{*rest}` has `id`
/// and `rest`.
fn path_names(path: &str) -> Vec<String> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_start_matches('*').to_owned())
        .collect()
}

/// The `T` of a `Path<T>` argument type (by its last segment's name, as
/// written in the handler).
fn path_value_type(ty: &syn::Type) -> Option<&syn::Type> {
    let syn::Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Path" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(value) if args.args.len() == 1 => Some(value),
        _ => None,
    }
}

fn mentions_impl(ty: &syn::Type) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    syn::visit::Visit::visit_type(&mut finder, ty);
    finder.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(method: Method, attr: TokenStream, item: TokenStream) -> String {
        expand(method, attr, item)
            .expect_err("expansion should fail")
            .to_string()
    }

    fn ok(method: Method, attr: TokenStream, item: TokenStream) -> String {
        expand(method, attr, item)
            .expect("expansion should succeed")
            .to_string()
    }

    #[test]
    fn path_parameters_are_named_in_order_and_path_types_found() {
        assert_eq!(path_names("/a/{id}/b/{*rest}"), ["id", "rest"]);
        assert!(path_names("/orders").is_empty());
        let ty: syn::Type = syn::parse_quote!(axum::extract::Path<(Uuid, u8)>);
        let value = path_value_type(&ty).expect("a Path");
        assert_eq!(quote!(#value).to_string(), quote!((Uuid, u8)).to_string());
        let ty: syn::Type = syn::parse_quote!(Json<Order>);
        assert!(path_value_type(&ty).is_none());
    }

    fn handler() -> TokenStream {
        quote!(
            async fn place_order() -> &'static str {
                "ok"
            }
        )
    }

    #[test]
    fn expands_post_with_defaults() {
        let out = ok(Method::Post, quote!("/orders"), handler());
        let expected = [
            quote!(
                async fn place_order() -> &'static str {
                    "ok"
                }
            ),
            quote!(
                #[allow(non_camel_case_types)]
                #[doc(hidden)]
                struct place_order {}
            ),
            quote!(impl ::autumn_web::__private::RouteDef for place_order),
            quote!(fn route() -> ::autumn_web::Route),
            quote!(::autumn_web::__private::http::Method::POST),
            quote!(::autumn_web::__private::axum::routing::MethodFilter::POST),
            quote!("/orders", "place_order", place_order, true,),
        ];
        for piece in expected {
            assert!(
                out.contains(&piece.to_string()),
                "missing `{piece}` in `{out}`"
            );
        }
    }

    #[test]
    fn each_method_maps_to_its_constant_and_method_filter() {
        for (method, constant, filter) in [
            (Method::Get, quote!(Method::GET), quote!(MethodFilter::GET)),
            (
                Method::Post,
                quote!(Method::POST),
                quote!(MethodFilter::POST),
            ),
            (Method::Put, quote!(Method::PUT), quote!(MethodFilter::PUT)),
            (
                Method::Patch,
                quote!(Method::PATCH),
                quote!(MethodFilter::PATCH),
            ),
            (
                Method::Delete,
                quote!(Method::DELETE),
                quote!(MethodFilter::DELETE),
            ),
        ] {
            let out = ok(method, quote!("/orders"), handler());
            assert!(out.contains(&constant.to_string()), "{out}");
            assert!(out.contains(&filter.to_string()), "{out}");
        }
    }

    #[test]
    fn idempotent_false_and_true() {
        let out = ok(
            Method::Post,
            quote!("/orders", idempotent = false),
            handler(),
        );
        assert!(
            out.contains(&quote!("place_order", place_order, false,).to_string()),
            "{out}"
        );
        let out = ok(
            Method::Post,
            quote!("/orders", idempotent = true,),
            handler(),
        );
        assert!(
            out.contains(&quote!("place_order", place_order, true,).to_string()),
            "{out}"
        );
    }

    #[test]
    fn policy_arguments_become_a_route_policy() {
        let out = ok(
            Method::Post,
            quote!(
                "/payments",
                idempotency = "required",
                idempotency_ttl = "48h"
            ),
            handler(),
        );
        assert!(
            out.contains(&quote!("place_order", place_order, true,).to_string()),
            "{out}"
        );
        assert!(out.contains(". with_policy"), "{out}");
        assert!(out.contains(". required ()"), "{out}");
        let out = ok(
            Method::Post,
            quote!("/hooks", idempotency = "off"),
            handler(),
        );
        assert!(
            out.contains(&quote!("place_order", place_order, false,).to_string()),
            "{out}"
        );
        let msg = err(
            Method::Post,
            quote!("/hooks", idempotent = true, idempotency = "off"),
            handler(),
        );
        assert_eq!(
            msg,
            "give `idempotent` or `idempotency = \"off\"`, not both"
        );
    }

    #[test]
    fn trailing_comma_after_path() {
        ok(Method::Get, quote!("/orders",), handler());
    }

    #[test]
    fn keeps_visibility_and_attributes() {
        let item = quote!(
            /// Lists orders.
            #[allow(clippy::unused_async)]
            pub(crate) async fn list(axum::Json(x): axum::Json<u8>) -> u8 {
                x
            }
        );
        let out = ok(Method::Get, quote!("/orders/{id}"), item);
        assert!(
            out.contains(&quote!(#[allow(clippy::unused_async)]).to_string()),
            "{out}"
        );
        assert!(
            out.contains(&quote!(pub(crate) async fn list).to_string()),
            "{out}"
        );
        assert!(
            out.contains(
                &quote!(
                    pub(crate) struct list {}
                )
                .to_string()
            ),
            "{out}"
        );
        assert!(
            !out.contains("mod "),
            "must emit only items usable in a fn body: {out}"
        );
    }

    #[test]
    fn unknown_argument() {
        let msg = err(Method::Post, quote!("/orders", retries = 3), handler());
        assert_eq!(msg, crate::route_policy::EXPECTED);
        let msg = err(Method::Post, quote!("/orders", 3), handler());
        assert_eq!(msg, "expected `idempotent` or `rate_limit`");
    }

    #[test]
    fn a_rate_limit_names_its_rule() {
        let out = ok(
            Method::Post,
            quote!("/login", rate_limit = "login"),
            handler(),
        );
        assert!(out.contains(". with_rate_limit (\"login\")"), "{out}");
        for (attr, says) in [
            (
                quote!("/login", rate_limit = 3),
                "expected the name of a [rate_limit.rules] rule",
            ),
            (quote!("/login", rate_limit = "log in"), "letters, digits"),
            (
                quote!("/login", rate_limit = "a", rate_limit = "b"),
                "`rate_limit` given twice",
            ),
        ] {
            let msg = err(Method::Post, attr, handler());
            assert!(msg.contains(says), "{msg}");
        }
    }

    #[test]
    fn idempotent_twice() {
        let msg = err(
            Method::Post,
            quote!("/orders", idempotent = false, idempotent = true),
            handler(),
        );
        assert_eq!(msg, "`idempotent` given twice");
    }

    #[test]
    fn idempotent_not_bool() {
        let msg = err(
            Method::Post,
            quote!("/orders", idempotent = "no"),
            handler(),
        );
        assert_eq!(msg, "expected `true` or `false`");
    }

    #[test]
    fn missing_path() {
        let msg = err(Method::Post, quote!(), handler());
        assert_eq!(
            msg,
            "expected a route path string literal, like #[post(\"/orders\")]"
        );
        let msg = err(Method::Get, quote!(idempotent = false), handler());
        assert_eq!(
            msg,
            "expected a route path string literal, like #[get(\"/orders\")]"
        );
    }

    #[test]
    fn path_without_leading_slash() {
        let msg = err(Method::Get, quote!("orders"), handler());
        assert_eq!(msg, "route path must start with `/`");
    }

    #[test]
    fn old_axum_path_syntax() {
        let msg = err(Method::Get, quote!("/orders/:id"), handler());
        assert!(msg.contains("`:id`: path parameters use braces"), "{msg}");
        let msg = err(Method::Get, quote!("/files/*rest"), handler());
        assert!(msg.contains("`*rest`"), "{msg}");
    }

    #[test]
    fn missing_comma() {
        let msg = err(Method::Get, quote!("/orders" idempotent = false), handler());
        assert_eq!(msg, "expected `,`");
    }

    #[test]
    fn non_async() {
        let msg = err(
            Method::Get,
            quote!("/orders"),
            quote!(
                fn list() {}
            ),
        );
        assert_eq!(msg, "route handlers must be `async fn`");
    }

    #[test]
    fn generic() {
        let msg = err(
            Method::Get,
            quote!("/o"),
            quote!(
                async fn list<T>() {}
            ),
        );
        assert_eq!(msg, "route handlers cannot be generic");
        let msg = err(
            Method::Get,
            quote!("/o"),
            quote!(
                async fn list()
                where
                    u8: Copy,
                {
                }
            ),
        );
        assert_eq!(msg, "route handlers cannot be generic");
    }

    #[test]
    fn method_receiver() {
        let msg = err(
            Method::Get,
            quote!("/o"),
            quote!(
                async fn list(&self) {}
            ),
        );
        assert!(msg.contains("not methods taking `self`"), "{msg}");
    }

    #[test]
    fn not_a_fn() {
        let msg = err(
            Method::Get,
            quote!("/o"),
            quote!(
                struct Orders;
            ),
        );
        assert_eq!(msg, "expected `fn`");
    }
}
