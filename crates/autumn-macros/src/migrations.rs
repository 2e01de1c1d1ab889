//! `migrations!("migrations")`: the app's migration folders, read when the
//! app compiles, as an `AppMigrations` whose SQL is in the binary.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::LitStr;

use crate::exports::{APP_MIGRATION, APP_MIGRATIONS};

/// Expands `migrations!("DIR")`, `DIR` relative to the crate's manifest.
pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let dir: LitStr = syn::parse2(input)?;
    let error = |message: String| syn::Error::new(dir.span(), message);
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .map_err(|_| error("CARGO_MANIFEST_DIR is not set: build with cargo".to_owned()))?;
    let path = std::path::Path::new(&root).join(dir.value());
    let entries = std::fs::read_dir(&path)
        .map_err(|e| error(format!("cannot read {}: {e}", path.display())))?;
    let mut folders: Vec<std::path::PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    folders.sort();
    let mut migrations = Vec::new();
    let mut versions = std::collections::BTreeSet::new();
    for folder in &folders {
        let file_name = folder
            .file_name()
            .and_then(|name| name.to_str())
            .ok_or_else(|| error(format!("{} is not UTF-8", folder.display())))?;
        let (version, name) = file_name.split_once('_').ok_or_else(|| {
            error(format!(
                "migration folder `{file_name}` is not VERSION_NAME (as `2026-12-08-093000_create_products`)"
            ))
        })?;
        let allowed = |text: &str| {
            !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if !allowed(version) || !allowed(name) {
            return Err(error(format!(
                "migration folder `{file_name}`: use letters, digits, `-` and `_` only"
            )));
        }
        if !versions.insert(version.to_owned()) {
            return Err(error(format!(
                "two migration folders have version `{version}`"
            )));
        }
        let up = folder.join("up.sql");
        if !up.is_file() {
            return Err(error(format!("{} has no up.sql", folder.display())));
        }
        let up = up.display().to_string();
        let down_path = folder.join("down.sql");
        // `include_str!` of each file, so editing one rebuilds the app.
        let down = if down_path.is_file() {
            let down = down_path.display().to_string();
            quote!(include_str!(#down))
        } else {
            quote!("")
        };
        let version = LitStr::new(version, Span::call_site());
        let name = LitStr::new(name, Span::call_site());
        migrations.push(quote! {
            #APP_MIGRATION {
                version: #version,
                name: #name,
                up: include_str!(#up),
                down: #down,
            }
        });
    }
    Ok(quote! {
        #APP_MIGRATIONS::new(&[#(#migrations),*])
    })
}
