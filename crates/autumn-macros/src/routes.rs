//! `routes![a, b, auth::signup]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Path, Token};

use crate::exports::{ROUTE, ROUTE_OF};

/// Expands `routes![...]` into a `Vec<Route>` with one `route_of::<path>()`
/// call per listed handler, each spanned on its path.
pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let paths = Punctuated::<Path, Token![,]>::parse_terminated.parse2(input)?;
    let calls = paths.iter().map(|path| {
        let span = path.span();
        let route_of = ROUTE_OF.spanned(span);
        quote_spanned!(span=> #route_of::<#path>())
    });
    // The typed binding keeps `routes![]` (empty) inferable on its own.
    Ok(quote! {
        {
            let __autumn_routes: ::std::vec::Vec<#ROUTE> = ::std::vec![#(#calls),*];
            __autumn_routes
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: TokenStream) -> String {
        expand(input).expect("expansion should succeed").to_string()
    }

    #[test]
    fn one_call_per_path() {
        let out = ok(quote!(list_orders, place_order, auth::signup));
        let expected = quote!(::std::vec![
            ::autumn_web::__private::route_of::<list_orders>(),
            ::autumn_web::__private::route_of::<place_order>(),
            ::autumn_web::__private::route_of::<auth::signup>()
        ]);
        assert!(out.contains(&expected.to_string()), "{out}");
        assert!(
            out.contains(&quote!(::std::vec::Vec<::autumn_web::Route>).to_string()),
            "{out}"
        );
    }

    #[test]
    fn trailing_comma_and_empty() {
        let out = ok(quote!(a,));
        assert!(
            out.contains(
                &quote!(::std::vec![::autumn_web::__private::route_of::<a>()]).to_string()
            ),
            "{out}"
        );
        let out = ok(quote!());
        assert!(out.contains(&quote!(::std::vec![]).to_string()), "{out}");
    }

    #[test]
    fn rejects_non_paths() {
        let msg = expand(quote!("list_orders"))
            .expect_err("not a path")
            .to_string();
        assert!(msg.starts_with("expected"), "{msg}");
        let msg = expand(quote!(a b)).expect_err("missing comma").to_string();
        assert_eq!(msg, "expected `,`");
    }
}
