//! `#[autumn_web::debug_handler]`: one precise compiler error per mistake in
//! a handler's signature, in place of "the trait `Handler<_, _>` is not
//! implemented".
//!
//! axum's own `#[debug_handler]` names `::axum`, which an app that depends
//! on `autumn_web` alone does not have; this one names only the facade. It
//! adds functions that exist only to be type-checked: each argument must be
//! an extractor (the last may take the body), the future must be `Send`,
//! the output a response. The handler itself is left as it was.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, Type};

use crate::exports::{AXUM_FROM_REQUEST, AXUM_FROM_REQUEST_PARTS, AXUM_INTO_RESPONSE};

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "#[autumn_web::debug_handler] takes no arguments",
        ));
    }
    let function: ItemFn = syn::parse2(item)?;
    if function.sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            function.sig.fn_token,
            "handlers must be `async fn`",
        ));
    }
    if !function.sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &function.sig.generics,
            "#[autumn_web::debug_handler] cannot check a generic handler",
        ));
    }
    let name = &function.sig.ident;
    let mut checks = TokenStream::new();
    let count = function.sig.inputs.len();
    for (index, input) in function.sig.inputs.iter().enumerate() {
        let ty = match input {
            FnArg::Typed(typed) => &typed.ty,
            FnArg::Receiver(receiver) => {
                return Err(syn::Error::new_spanned(
                    receiver,
                    "a handler takes no `self`; write it as a free function",
                ));
            }
        };
        checks.extend(argument_check(name, index, index + 1 == count, ty));
    }
    checks.extend(future_check(&function));
    if let ReturnType::Type(_, ty) = &function.sig.output {
        // `impl IntoResponse` cannot be named outside the function, and
        // is a response by its own bound.
        if !matches!(**ty, Type::ImplTrait(_)) {
            let check = format_ident!("__autumn_check_{}_response", name);
            let into_response = AXUM_INTO_RESPONSE.spanned(ty.span());
            checks.extend(quote_spanned! {ty.span()=>
                #[allow(warnings, clippy::all)]
                fn #check() where #ty: #into_response {}
            });
        }
    }
    Ok(quote! {
        #function
        #checks
    })
}

/// Every argument but the last must come from the request head; the last
/// may also read the body.
fn argument_check(name: &syn::Ident, index: usize, last: bool, ty: &Type) -> TokenStream {
    let check = format_ident!("__autumn_check_{}_argument_{}", name, index);
    let span = ty.span();
    if last {
        let from_request = AXUM_FROM_REQUEST.spanned(span);
        quote_spanned! {span=>
            #[allow(warnings, clippy::all)]
            fn #check() {
                fn extractor<T: #from_request<(), M> + Send, M>() {}
                extractor::<#ty, _>();
            }
        }
    } else {
        let from_request_parts = AXUM_FROM_REQUEST_PARTS.spanned(span);
        quote_spanned! {span=>
            #[allow(warnings, clippy::all)]
            fn #check() where #ty: #from_request_parts<()> + Send {}
        }
    }
}

/// The handler's future must be `Send`: the server runs it on any thread.
fn future_check(function: &ItemFn) -> TokenStream {
    let name = &function.sig.ident;
    let check = format_ident!("__autumn_check_{}_future", name);
    let span = function.sig.ident.span();
    let arguments = function
        .sig
        .inputs
        .iter()
        .map(|_| quote_spanned! {span=> ::core::panic!() });
    quote_spanned! {span=>
        #[allow(warnings, clippy::all)]
        fn #check() {
            fn send<T: ::core::marker::Send>(_: T) {}
            send(#name(#(#arguments),*));
        }
    }
}
