//! `#[repository(...)]`: find, list, create, update and delete on a diesel
//! table, extractable in a handler, with durable `after_*_commit` hooks.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Ident, ItemStruct, Path, Token, Type};

use crate::exports::{
    AUTUMN_ERROR, AXUM_FROM_REQUEST_PARTS, COMMIT_HOOKS, DB_POOL, DIESEL, DIESEL_ASYNC,
    DIESEL_ERROR, ENQUEUE_HOOK, HTTP_PARTS, MUTATION_CONTEXT, ON_TX, PAGE, PAGING, REPO_DB,
    REPO_TX, REPOSITORY_PARTS, SCOPED_FUTURE_EXT,
};

mod kw {
    syn::custom_keyword!(model);
    syn::custom_keyword!(table);
    syn::custom_keyword!(insert);
    syn::custom_keyword!(update);
    syn::custom_keyword!(id);
    syn::custom_keyword!(primary_key);
    syn::custom_keyword!(after_create_commit);
    syn::custom_keyword!(after_update_commit);
    syn::custom_keyword!(after_destroy_commit);
}

/// The attribute's arguments.
#[derive(Default)]
struct Args {
    model: Option<Path>,
    table: Option<Path>,
    insert: Option<Path>,
    update: Option<Path>,
    id: Option<Type>,
    primary_key: Option<Ident>,
    after_create: Option<Path>,
    after_update: Option<Path>,
    after_destroy: Option<Path>,
}

/// Sets `slot` once; a repeated argument points at its second keyword.
fn once<T>(slot: &mut Option<T>, value: T, span: Span, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(span, format!("`{name}` is given twice")));
    }
    *slot = Some(value);
    Ok(())
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            let span = input.span();
            macro_rules! arg {
                ($kw:ident, $field:ident, $ty:ty) => {{
                    input.parse::<kw::$kw>()?;
                    input.parse::<Token![=]>()?;
                    let value: $ty = input.parse()?;
                    once(&mut args.$field, value, span, stringify!($kw))?;
                }};
            }
            if lookahead.peek(kw::model) {
                arg!(model, model, Path);
            } else if lookahead.peek(kw::table) {
                arg!(table, table, Path);
            } else if lookahead.peek(kw::insert) {
                arg!(insert, insert, Path);
            } else if lookahead.peek(kw::update) {
                arg!(update, update, Path);
            } else if lookahead.peek(kw::id) {
                arg!(id, id, Type);
            } else if lookahead.peek(kw::primary_key) {
                arg!(primary_key, primary_key, Ident);
            } else if lookahead.peek(kw::after_create_commit) {
                arg!(after_create_commit, after_create, Path);
            } else if lookahead.peek(kw::after_update_commit) {
                arg!(after_update_commit, after_update, Path);
            } else if lookahead.peek(kw::after_destroy_commit) {
                arg!(after_destroy_commit, after_destroy, Path);
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(attr)?;
    let item: ItemStruct = syn::parse2(item)?;
    if !matches!(item.fields, syn::Fields::Unit) || !item.generics.params.is_empty() {
        return Err(syn::Error::new(
            item.span(),
            "#[repository] goes on a unit struct without generics: `pub struct Invoices;`",
        ));
    }
    let required = |value: Option<Path>, name: &str| {
        value.ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                format!("#[repository] needs `{name} = ...`"),
            )
        })
    };
    let model = required(args.model, "model")?;
    let table = required(args.table, "table")?;
    let id_ty = args.id.unwrap_or_else(|| syn::parse_quote!(i64));
    let pk = args
        .primary_key
        .unwrap_or_else(|| Ident::new("id", Span::call_site()));
    let table_name = table
        .segments
        .last()
        .map(|segment| segment.ident.to_string())
        .unwrap_or_default();

    let ItemStruct {
        attrs, vis, ident, ..
    } = &item;

    let hooks = [
        ("after_create_commit", &args.after_create),
        ("after_update_commit", &args.after_update),
        ("after_destroy_commit", &args.after_destroy),
    ];
    let mut consts = TokenStream::new();
    let mut registrations = TokenStream::new();
    let mut enqueue = Vec::new();
    for (event, hook) in hooks {
        let constant = format_ident!("{}", event.to_uppercase());
        match hook {
            Some(function) => {
                let name = format!("{table_name}.{event}");
                let doc = format!("The queue name of this repository's `{event}` hook.");
                consts.extend(quote! {
                    #[doc = #doc]
                    pub const #constant: &'static str = #name;
                });
                registrations.extend(quote_spanned! {function.span()=>
                    let hooks = hooks.hook(#name, #function);
                });
                enqueue.push(quote! {
                    #ENQUEUE_HOOK(tx, Self::#constant, &record.#pk, &record).await?;
                });
            }
            None => enqueue.push(TokenStream::new()),
        }
    }
    let (on_create, on_update, on_destroy) = (&enqueue[0], &enqueue[1], &enqueue[2]);

    let imports = quote! {
        #[allow(unused_imports)]
        use #DIESEL::{ExpressionMethods as _, OptionalExtension as _, QueryDsl as _};
        #[allow(unused_imports)]
        use #DIESEL_ASYNC::RunQueryDsl as _;
        #[allow(unused_imports)]
        use #SCOPED_FUTURE_EXT as _;
    };

    let create = args.insert.map(|insert| {
        quote! {
            /// Inserts `new` and returns the row, in a transaction of its
            /// own with the `after_create_commit` hook's row, if any.
            ///
            /// # Errors
            ///
            /// The database's error (a constraint: 500; no connection: 503).
            pub async fn create(&mut self, new: &#insert) -> ::core::result::Result<#model, #AUTUMN_ERROR> {
                #imports
                self.db
                    .tx(&self.context, |tx| async move { Ok(Self::create_in(tx, new).await?) }.scope_boxed())
                    .await
            }

            /// Inserts `new` in the caller's transaction `tx`, with the
            /// `after_create_commit` hook's row, if any.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn create_in(tx: &mut #REPO_TX<'_>, new: &#insert) -> ::core::result::Result<#model, #DIESEL_ERROR> {
                #imports
                let record: #model = #ON_TX!(tx.connection(), conn => {
                    #DIESEL::insert_into(#table::table).values(new).get_result::<#model>(conn).await
                })?;
                #on_create
                Ok(record)
            }
        }
    });

    let update = args.update.map(|changes| {
        quote! {
            /// Applies `changes` to the row `id` and returns it (`None` when
            /// there is none), in a transaction of its own with the
            /// `after_update_commit` hook's row, if any.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn update(&mut self, id: #id_ty, changes: &#changes) -> ::core::result::Result<::core::option::Option<#model>, #AUTUMN_ERROR> {
                #imports
                self.db
                    .tx(&self.context, |tx| async move { Ok(Self::update_in(tx, id, changes).await?) }.scope_boxed())
                    .await
            }

            /// Applies `changes` to the row `id` in the caller's transaction.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn update_in(tx: &mut #REPO_TX<'_>, id: #id_ty, changes: &#changes) -> ::core::result::Result<::core::option::Option<#model>, #DIESEL_ERROR> {
                #imports
                let updated: ::core::option::Option<#model> = #ON_TX!(tx.connection(), conn => {
                    #DIESEL::update(#table::table.find(id)).set(changes).get_result::<#model>(conn).await.optional()
                })?;
                if let ::core::option::Option::Some(record) = &updated {
                    #on_update
                }
                Ok(updated)
            }
        }
    });

    let expanded = quote! {
        #(#attrs)*
        #vis struct #ident {
            db: #REPO_DB,
            context: #MUTATION_CONTEXT,
        }

        impl ::core::fmt::Debug for #ident {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#ident))
                    .field("context", &self.context)
                    .finish_non_exhaustive()
            }
        }

        impl #ident {
            #consts

            /// The repository on a connection from `pool`, its mutations
            /// carrying `context`.
            ///
            /// # Errors
            ///
            /// 503 when no connection can be had.
            pub async fn from_pool(pool: &#DB_POOL, context: #MUTATION_CONTEXT) -> ::core::result::Result<Self, #AUTUMN_ERROR> {
                Ok(Self { db: #REPO_DB::from_pool(pool).await?, context })
            }

            /// The context its mutations carry: the request's scoped
            /// idempotency key, when it had one.
            pub fn context(&self) -> &#MUTATION_CONTEXT {
                &self.context
            }

            /// The hooks this repository declares, for
            /// `AppBuilder::with_commit_hooks`.
            pub fn commit_hooks() -> #COMMIT_HOOKS {
                let hooks = #COMMIT_HOOKS::new();
                #registrations
                hooks
            }

            /// Runs `f` in one transaction with this repository's context:
            /// call several `*_in` functions (of any repository) and
            /// `IdempotencyTx::commit` on the `RepoTx` it is given.
            ///
            /// # Errors
            ///
            /// What `f` returns, or the database's error.
            pub async fn tx<'a, R, F>(&'a mut self, f: F) -> ::core::result::Result<R, #AUTUMN_ERROR>
            where
                F: for<'r> ::core::ops::FnOnce(&'r mut #REPO_TX<'r>) -> ::autumn_web::__private::ScopedBoxFuture<'a, 'r, ::core::result::Result<R, #AUTUMN_ERROR>> + ::core::marker::Send + 'a,
                R: ::core::marker::Send + 'a,
            {
                self.db.tx(&self.context, f).await
            }

            /// The row `id`, if there is one.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn find(&mut self, id: #id_ty) -> ::core::result::Result<::core::option::Option<#model>, #AUTUMN_ERROR> {
                #imports
                let found = #ON_TX!(::core::option::Option::Some(self.db.connection()), conn => {
                    #table::table.find(id).first::<#model>(conn).await.optional()
                })?;
                Ok(found)
            }

            /// One page of rows, in primary-key order, and the row count.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn list(&mut self, paging: #PAGING) -> ::core::result::Result<#PAGE<#model>, #AUTUMN_ERROR> {
                #imports
                let (items, total) = #ON_TX!(::core::option::Option::Some(self.db.connection()), conn => {
                    async {
                        let items = #table::table
                            .order(#table::#pk.asc())
                            .limit(paging.limit())
                            .offset(paging.offset())
                            .load::<#model>(&mut *conn)
                            .await?;
                        let total: i64 = #table::table.count().get_result(&mut *conn).await?;
                        ::core::result::Result::<_, #DIESEL_ERROR>::Ok((items, total))
                    }.await
                })?;
                Ok(#PAGE::new(items, paging, total))
            }

            #create

            #update

            /// Deletes the row `id` and returns it as it was (`None` when
            /// there was none), in a transaction of its own with the
            /// `after_destroy_commit` hook's row, if any.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn delete(&mut self, id: #id_ty) -> ::core::result::Result<::core::option::Option<#model>, #AUTUMN_ERROR> {
                #imports
                self.db
                    .tx(&self.context, |tx| async move { Ok(Self::delete_in(tx, id).await?) }.scope_boxed())
                    .await
            }

            /// Deletes the row `id` in the caller's transaction.
            ///
            /// # Errors
            ///
            /// The database's error.
            pub async fn delete_in(tx: &mut #REPO_TX<'_>, id: #id_ty) -> ::core::result::Result<::core::option::Option<#model>, #DIESEL_ERROR> {
                #imports
                let deleted: ::core::option::Option<#model> = #ON_TX!(tx.connection(), conn => {
                    #DIESEL::delete(#table::table.find(id)).get_result::<#model>(conn).await.optional()
                })?;
                if let ::core::option::Option::Some(record) = &deleted {
                    #on_destroy
                }
                Ok(deleted)
            }
        }

        impl<S: ::core::marker::Send + ::core::marker::Sync> #AXUM_FROM_REQUEST_PARTS<S> for #ident {
            type Rejection = #AUTUMN_ERROR;

            async fn from_request_parts(parts: &mut #HTTP_PARTS, _state: &S) -> ::core::result::Result<Self, Self::Rejection> {
                let (db, context) = #REPOSITORY_PARTS(parts).await?;
                Ok(Self { db, context })
            }
        }
    };
    Ok(expanded)
}
