//! `#[autumn_web::main]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Block, ItemFn, Signature, Visibility};

use crate::exports::{ALLOCATOR, RUN_MAIN};

/// Turns `async fn main() -> R { body }` into
/// `fn main() -> R { run_main(async move { body }) }`, beside the app's
/// global allocator.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "`#[autumn_web::main]` takes no arguments",
        ));
    }
    let func: ItemFn = syn::parse2(item)?;
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;

    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "`#[autumn_web::main]` must be used on an `async fn`, like `async fn main()`",
        ));
    }
    if !sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.inputs,
            "`#[autumn_web::main]` function cannot take arguments",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        let generics = &sig.generics;
        let where_clause = &generics.where_clause;
        return Err(syn::Error::new_spanned(
            quote!(#generics #where_clause),
            "`#[autumn_web::main]` function cannot be generic",
        ));
    }
    Ok(wrap(attrs, vis, sig, &block))
}

fn wrap(attrs: Vec<Attribute>, vis: Visibility, mut sig: Signature, block: &Block) -> TokenStream {
    sig.asyncness = None;
    quote! {
        #ALLOCATOR! {}

        #(#attrs)*
        #vis #sig {
            #RUN_MAIN(async move #block)
        }
    }
}

/// What to emit next to `error` so that rustc does not pile on with
/// "`main` function not found": a non-async fn is kept as written, an async
/// one is wrapped as if the attribute had been accepted.
pub(crate) fn recover(error: &syn::Error, item: TokenStream) -> TokenStream {
    let mut tokens = error.to_compile_error();
    match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) if func.sig.asyncness.is_some() => {
            tokens.extend(wrap(func.attrs, func.vis, func.sig, &func.block));
        }
        _ => tokens.extend(item),
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Token spacing (`> >` vs `>>`) depends on how tokens were built.
    fn squash(tokens: impl ToString) -> String {
        tokens.to_string().split_whitespace().collect()
    }

    fn err(attr: TokenStream, item: TokenStream) -> String {
        expand(attr, item)
            .expect_err("expansion should fail")
            .to_string()
    }

    #[test]
    fn wraps_body_without_return_type() {
        let out = expand(
            quote!(),
            quote!(
                async fn main() {
                    run().await;
                }
            ),
        )
        .expect("expands")
        .to_string();
        let expected = quote!(
            ::autumn_web::__private::allocator! {}

            fn main() {
                ::autumn_web::__private::run_main(async move {
                    run().await;
                })
            }
        );
        assert_eq!(squash(out), squash(expected));
    }

    #[test]
    fn keeps_return_type_and_attributes() {
        let item = quote!(
            #[allow(unused)]
            async fn main() -> Result<(), Box<dyn std::error::Error>> {
                Ok(())
            }
        );
        let out = expand(quote!(), item).expect("expands").to_string();
        let expected = quote!(
            ::autumn_web::__private::allocator! {}

            #[allow(unused)]
            fn main() -> Result<(), Box<dyn std::error::Error>> {
                ::autumn_web::__private::run_main(async move { Ok(()) })
            }
        );
        assert_eq!(squash(out), squash(expected));
    }

    #[test]
    fn rejects_non_async() {
        let msg = err(
            quote!(),
            quote!(
                fn main() {}
            ),
        );
        assert!(msg.contains("must be used on an `async fn`"), "{msg}");
    }

    #[test]
    fn rejects_arguments() {
        let msg = err(
            quote!(),
            quote!(
                async fn main(port: u16) {}
            ),
        );
        assert_eq!(msg, "`#[autumn_web::main]` function cannot take arguments");
    }

    #[test]
    fn rejects_attribute_arguments() {
        let msg = err(
            quote!(flavor = "current_thread"),
            quote!(
                async fn main() {}
            ),
        );
        assert!(
            msg.starts_with("`#[autumn_web::main]` takes no arguments"),
            "{msg}"
        );
    }

    #[test]
    fn recovery_keeps_a_main_function() {
        let error = syn::Error::new(proc_macro2::Span::call_site(), "boom");
        let out = recover(
            &error,
            quote!(
                fn main() {
                    work();
                }
            ),
        )
        .to_string();
        assert!(out.contains("compile_error"), "{out}");
        assert!(
            out.contains(
                &quote!(
                    fn main() {
                        work();
                    }
                )
                .to_string()
            ),
            "{out}"
        );

        let out = recover(
            &error,
            quote!(
                async fn main() {
                    work().await;
                }
            ),
        )
        .to_string();
        assert!(out.contains("compile_error"), "{out}");
        assert!(
            out.contains(
                &quote!(run_main(async move {
                    work().await;
                }))
                .to_string()
            ),
            "{out}"
        );
        assert!(!out.contains("async fn"), "{out}");
    }

    #[test]
    fn rejects_generics() {
        let msg = err(
            quote!(),
            quote!(
                async fn main<T>() {}
            ),
        );
        assert_eq!(msg, "`#[autumn_web::main]` function cannot be generic");
    }
}
