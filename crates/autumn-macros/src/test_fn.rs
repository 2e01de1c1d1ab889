//! `#[autumn_web::test]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use crate::exports::TEST_RUNTIME;

/// Turns `async fn name() -> R { body }` into a `#[test] fn name() -> R`
/// that runs the body on a fresh current-thread runtime, as
/// `#[tokio::test]` would, without the app depending on tokio itself.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "`#[autumn_web::test]` takes no arguments",
        ));
    }
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = syn::parse2(item)?;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "`#[autumn_web::test]` must be used on an `async fn`",
        ));
    }
    if !sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.inputs,
            "`#[autumn_web::test]` function cannot take arguments",
        ));
    }
    sig.asyncness = None;
    Ok(quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis #sig {
            #TEST_RUNTIME().block_on(async move #block)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn squash(tokens: impl ToString) -> String {
        tokens.to_string().split_whitespace().collect()
    }

    #[test]
    fn wraps_the_body_in_a_test_on_the_runtime() {
        let out = expand(
            quote!(),
            quote!(
                async fn works() -> Result<(), String> {
                    run().await
                }
            ),
        )
        .expect("expands");
        let expected = quote!(
            #[::core::prelude::v1::test]
            fn works() -> Result<(), String> {
                ::autumn_web::__private::test_runtime().block_on(async move { run().await })
            }
        );
        assert_eq!(squash(out), squash(expected));
    }

    #[test]
    fn rejects_what_a_test_cannot_be() {
        let error = |attr, item| expand(attr, item).expect_err("refused").to_string();
        assert!(
            error(
                quote!(),
                quote!(
                    fn sync() {}
                )
            )
            .contains("`async fn`")
        );
        assert!(
            error(
                quote!(),
                quote!(
                    async fn f(x: u8) {}
                )
            )
            .contains("arguments")
        );
        assert!(
            error(
                quote!(flavor = "x"),
                quote!(
                    async fn f() {}
                )
            )
            .contains("no arguments")
        );
    }
}
