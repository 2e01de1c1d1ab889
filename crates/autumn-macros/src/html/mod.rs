//! `html!`: maud's template syntax, expanding through `::autumn_web` so an
//! app that depends only on `autumn-web` can use it.
//!
//! maud's own macro expands to `extern crate maud;` and `maud::...` paths,
//! which only resolve when the app lists `maud` as a dependency of its own.
//! The parser and code generator here are maud_macros 0.27.0's (by Chris
//! Wong and contributors, MIT OR Apache-2.0), changed only to name
//! `::autumn_web::__private::maud` and to escape without `unsafe`; the
//! output is maud's `Markup`, so everything written for maud renders the
//! same. Keep this in step with the `maud` version the facade re-exports.

// Kept as maud wrote it, so an update stays a plain diff against upstream.
#![allow(
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rust_2018_idioms,
    missing_docs
)]

mod ast;
mod escape;
mod generate;

use ast::DiagnosticParse;
use proc_macro2::{Ident, Span, TokenStream};
use proc_macro2_diagnostics::Diagnostic;
use quote::quote;
use syn::parse::{ParseStream, Parser};

use crate::exports::{MAUD_PRE_ESCAPED, STRING};

/// Expands a template into an expression of type `maud::Markup`.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    // Heuristic: the size of the resulting markup tends to correlate with the
    // code size of the template itself
    let size_hint = input.to_string().len();

    let mut diagnostics = Vec::new();
    let markups = match Parser::parse2(
        |input: ParseStream| ast::Markups::diagnostic_parse(input, &mut diagnostics),
        input,
    ) {
        Ok(data) => data,
        Err(err) => {
            let err = err.to_compile_error();
            let diag_tokens = diagnostics.into_iter().map(Diagnostic::emit_as_expr_tokens);

            return quote! {{
                #err
                #(#diag_tokens)*
            }};
        }
    };

    let diag_tokens = diagnostics.into_iter().map(Diagnostic::emit_as_expr_tokens);

    let output_ident = Ident::new("__maud_output", Span::mixed_site());
    let stmts = generate::generate(markups, output_ident.clone());
    quote! {{
        let mut #output_ident = #STRING::with_capacity(#size_hint);
        #stmts
        #(#diag_tokens)*
        #MAUD_PRE_ESCAPED(#output_ident)
    }}
}
