//! The idempotency policy arguments of a route attribute:
//!
//! ```text
//! #[post("/payments",
//!     idempotency = "required",            // or "optional", "off"
//!     idempotency_ttl = "48h",             // ms, s, m, h, d
//!     idempotency_in_flight_ttl = "30s",
//!     in_flight_wait_ms = 2000,
//!     idempotency_fingerprint = "json",    // or "bytes"
//!     idempotency_ignore = ["/client_ts"], // or idempotency_only = [...]
//!     record_errors = "server",            // or "none"
//!     anonymous_keys = "refuse",           // or "allow"
//! )]
//! ```
//!
//! Everything is checked here, so a typo is a compile error on the
//! attribute rather than a startup failure.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::ParseStream;
use syn::{Ident, LitInt, LitStr, Token};

use crate::exports::{
    ANONYMOUS_KEYS, DURATION, FINGERPRINT_POLICY, IDEMPOTENCY_POLICY, KEY_REQUIREMENT,
    RECORD_ERRORS,
};

/// The accepted argument names, for the error on an unknown one.
pub(crate) const EXPECTED: &str = "expected one of `idempotent`, `rate_limit`, `idempotency`, `idempotency_ttl`, `idempotency_in_flight_ttl`, `in_flight_wait_ms`, `idempotency_fingerprint`, `idempotency_ignore`, `idempotency_only`, `record_errors`, `anonymous_keys`";

/// Whether the route needs a key, as `idempotency = "..."` says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyArg {
    Required,
    Optional,
    Off,
}

/// What the policy arguments of one attribute said.
#[derive(Default)]
pub(crate) struct PolicyArgs {
    key: Option<(KeyArg, Span)>,
    ttl_ms: Option<u64>,
    in_flight_ttl_ms: Option<u64>,
    in_flight_wait_ms: Option<u64>,
    json: Option<bool>,
    ignore: Option<Vec<String>>,
    only: Option<Vec<String>>,
    /// `record_errors`: whether a 5xx is recorded (`"server"`) or not
    /// (`"none"`).
    record_server_errors: Option<bool>,
    /// `anonymous_keys`: whether a keyed request with no caller identity is
    /// refused (`"refuse"`) or served (`"allow"`).
    refuse_anonymous_keys: Option<bool>,
}

impl PolicyArgs {
    /// Where `idempotency = "off"` was given, if it was.
    pub(crate) fn off_span(&self) -> Option<Span> {
        self.key
            .filter(|(key, _)| *key == KeyArg::Off)
            .map(|(_, span)| span)
    }

    /// `.with_policy(...)` when any argument was given, else nothing (so a
    /// route without them expands as before).
    pub(crate) fn expand(&self) -> TokenStream {
        let mut calls = Vec::new();
        match self.key {
            Some((KeyArg::Required, _)) => calls.push(quote!(.required())),
            Some((KeyArg::Optional, _)) => {
                calls.push(quote!(.with_key(#KEY_REQUIREMENT::Optional)));
            }
            Some((KeyArg::Off, _)) | None => {}
        }
        if let Some(ms) = self.ttl_ms {
            calls.push(quote!(.with_ttl(#DURATION::from_millis(#ms))));
        }
        if let Some(ms) = self.in_flight_ttl_ms {
            calls.push(quote!(.with_in_flight_ttl(#DURATION::from_millis(#ms))));
        }
        if let Some(ms) = self.in_flight_wait_ms {
            calls.push(quote!(.with_in_flight_wait(#DURATION::from_millis(#ms))));
        }
        let json = self.json.unwrap_or(false) || self.ignore.is_some() || self.only.is_some();
        if self.json == Some(false) && !json {
            calls.push(quote!(.with_fingerprint(#FINGERPRINT_POLICY::Bytes)));
        } else if json {
            let ignore = self.ignore.clone().unwrap_or_default();
            let only = self.only.clone().unwrap_or_default();
            calls.push(quote!(.with_fingerprint(#FINGERPRINT_POLICY::Json {
                ignore: ::std::vec![#(::std::string::String::from(#ignore)),*],
                only: ::std::vec![#(::std::string::String::from(#only)),*],
            })));
        }
        match self.record_server_errors {
            Some(true) => calls.push(quote!(.with_record_errors(#RECORD_ERRORS::Server))),
            Some(false) => calls.push(quote!(.with_record_errors(#RECORD_ERRORS::None))),
            None => {}
        }
        match self.refuse_anonymous_keys {
            Some(true) => calls.push(quote!(.with_anonymous_keys(#ANONYMOUS_KEYS::Refuse))),
            Some(false) => calls.push(quote!(.with_anonymous_keys(#ANONYMOUS_KEYS::Allow))),
            None => {}
        }
        if calls.is_empty() {
            return TokenStream::new();
        }
        quote!(.with_policy(#IDEMPOTENCY_POLICY::new() #(#calls)*))
    }
}

/// Parses one policy argument into `args`; `Ok(false)` when the next
/// argument is not one of them.
pub(crate) fn parse_policy_arg(input: ParseStream<'_>, args: &mut PolicyArgs) -> syn::Result<bool> {
    if !input.peek(Ident) {
        return Ok(false);
    }
    let fork = input.fork();
    let name: Ident = fork.parse()?;
    let known = [
        "idempotency",
        "idempotency_ttl",
        "idempotency_in_flight_ttl",
        "in_flight_wait_ms",
        "idempotency_fingerprint",
        "idempotency_ignore",
        "idempotency_only",
        "record_errors",
        "anonymous_keys",
    ];
    let text = name.to_string();
    if !known.contains(&text.as_str()) {
        return Err(syn::Error::new(name.span(), EXPECTED));
    }
    let name: Ident = input.parse()?;
    input.parse::<Token![=]>()?;
    let twice = || syn::Error::new(name.span(), format!("`{text}` given twice"));
    match text.as_str() {
        "idempotency" => {
            let lit: LitStr = input.parse()?;
            let key = match lit.value().as_str() {
                "required" => KeyArg::Required,
                "optional" => KeyArg::Optional,
                "off" => KeyArg::Off,
                _ => {
                    return Err(syn::Error::new(
                        lit.span(),
                        "expected \"required\", \"optional\" or \"off\"",
                    ));
                }
            };
            if args.key.replace((key, lit.span())).is_some() {
                return Err(twice());
            }
        }
        "idempotency_ttl" | "idempotency_in_flight_ttl" => {
            let lit: LitStr = input.parse()?;
            let ms = parse_duration_ms(&lit)?;
            if ms < 1000 {
                return Err(syn::Error::new(
                    lit.span(),
                    "must be at least 1s: a shorter TTL turns off the at-most-once guarantee",
                ));
            }
            let slot = if text == "idempotency_ttl" {
                &mut args.ttl_ms
            } else {
                &mut args.in_flight_ttl_ms
            };
            if slot.replace(ms).is_some() {
                return Err(twice());
            }
        }
        "in_flight_wait_ms" => {
            let lit: LitInt = input.parse()?;
            let ms = lit.base10_parse::<u64>()?;
            if args.in_flight_wait_ms.replace(ms).is_some() {
                return Err(twice());
            }
        }
        "idempotency_fingerprint" => {
            let lit: LitStr = input.parse()?;
            let json = match lit.value().as_str() {
                "json" => true,
                "bytes" => false,
                _ => {
                    return Err(syn::Error::new(
                        lit.span(),
                        "expected \"json\" or \"bytes\"",
                    ));
                }
            };
            if args.json.replace(json).is_some() {
                return Err(twice());
            }
        }
        "record_errors" => {
            let lit: LitStr = input.parse()?;
            let server = match lit.value().as_str() {
                "server" => true,
                "none" => false,
                _ => {
                    return Err(syn::Error::new(
                        lit.span(),
                        "expected \"server\" (record and replay a 5xx) or \"none\"; a 4xx is never recorded",
                    ));
                }
            };
            if args.record_server_errors.replace(server).is_some() {
                return Err(twice());
            }
        }
        "anonymous_keys" => {
            let lit: LitStr = input.parse()?;
            let refuse = match lit.value().as_str() {
                "refuse" => true,
                "allow" => false,
                _ => {
                    return Err(syn::Error::new(
                        lit.span(),
                        "expected \"refuse\" (a key from a caller with no identity gets 403) or \"allow\"",
                    ));
                }
            };
            if args.refuse_anonymous_keys.replace(refuse).is_some() {
                return Err(twice());
            }
        }
        _ => {
            let pointers = parse_pointers(input)?;
            let slot = if text == "idempotency_ignore" {
                &mut args.ignore
            } else {
                &mut args.only
            };
            if slot.replace(pointers).is_some() {
                return Err(twice());
            }
            if args.ignore.is_some() && args.only.is_some() {
                return Err(syn::Error::new(
                    name.span(),
                    "give `idempotency_ignore` or `idempotency_only`, not both",
                ));
            }
            if args.json == Some(false) {
                return Err(syn::Error::new(
                    name.span(),
                    "fingerprint fields need idempotency_fingerprint = \"json\"",
                ));
            }
        }
    }
    if args.json == Some(false) && (args.ignore.is_some() || args.only.is_some()) {
        return Err(syn::Error::new(
            name.span(),
            "fingerprint fields need idempotency_fingerprint = \"json\"",
        ));
    }
    Ok(true)
}

/// `["/a", "/b"]`: JSON Pointers, each checked.
fn parse_pointers(input: ParseStream<'_>) -> syn::Result<Vec<String>> {
    let content;
    syn::bracketed!(content in input);
    let lits = content.parse_terminated(|p| p.parse::<LitStr>(), Token![,])?;
    lits.iter()
        .map(|lit| {
            let value = lit.value();
            check_pointer(&value).map_err(|reason| syn::Error::new(lit.span(), reason))?;
            Ok(value)
        })
        .collect()
}

/// RFC 6901: empty, or `/` then tokens where `~` is `~0` or `~1`.
fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!(
            "the JSON Pointer {pointer:?} must start with `/`, like \"/client_ts\""
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "the JSON Pointer {pointer:?} has a `~` not followed by 0 or 1; write `~0` for `~` and `~1` for `/`"
            ));
        }
    }
    Ok(())
}

/// `"48h"`, `"30s"`, `"500ms"`, `"2d"`, `"15m"`: one whole number and a unit.
fn parse_duration_ms(lit: &LitStr) -> syn::Result<u64> {
    let value = lit.value();
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = value.split_at(digits);
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    number
        .parse::<u64>()
        .ok()
        .filter(|_| factor > 0)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| {
            syn::Error::new(
                lit.span(),
                "expected a duration like \"48h\", \"30m\", \"90s\" or \"1500ms\" (units: ms, s, m, h, d)",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse::Parser;

    fn parse(tokens: TokenStream) -> syn::Result<PolicyArgs> {
        (|input: ParseStream<'_>| {
            let mut args = PolicyArgs::default();
            while !input.is_empty() {
                if !parse_policy_arg(input, &mut args)? {
                    return Err(input.error("not a policy argument"));
                }
                if !input.is_empty() {
                    input.parse::<Token![,]>()?;
                }
            }
            Ok(args)
        })
        .parse2(tokens)
    }

    fn error(tokens: TokenStream) -> String {
        match parse(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn every_argument_expands_into_one_policy() {
        let args = parse(quote!(
            idempotency = "required",
            idempotency_ttl = "48h",
            idempotency_in_flight_ttl = "30s",
            in_flight_wait_ms = 2000,
            idempotency_ignore = ["/client_ts", "/meta/trace~1id"],
            record_errors = "server",
            anonymous_keys = "refuse",
        ))
        .expect("valid");
        let out = args.expand().to_string();
        for piece in [
            quote!(.with_policy(::autumn_web::__private::IdempotencyPolicy::new())),
            quote!(.required()),
            quote!(.with_ttl(::std::time::Duration::from_millis(172800000u64))),
            quote!(.with_in_flight_ttl(::std::time::Duration::from_millis(30000u64))),
            quote!(.with_in_flight_wait(::std::time::Duration::from_millis(2000u64))),
            quote!(::autumn_web::__private::FingerprintPolicy::Json),
            quote!(::std::string::String::from("/client_ts")),
            quote!(.with_record_errors(::autumn_web::__private::RecordErrors::Server)),
            quote!(.with_anonymous_keys(::autumn_web::__private::AnonymousKeys::Refuse)),
        ] {
            let piece = piece.to_string();
            let piece = piece.trim_end_matches(" ()").trim_end_matches(')');
            assert!(out.contains(piece), "missing `{piece}` in `{out}`");
        }
        assert!(parse(quote!()).expect("empty").expand().is_empty());
        let none = parse(quote!(record_errors = "none")).expect("valid");
        let none = none.expand().to_string();
        let piece =
            quote!(.with_record_errors(::autumn_web::__private::RecordErrors::None)).to_string();
        assert!(none.contains(&piece), "missing `{piece}` in `{none}`");
        let allow = parse(quote!(anonymous_keys = "allow")).expect("valid");
        let allow = allow.expand().to_string();
        let piece =
            quote!(.with_anonymous_keys(::autumn_web::__private::AnonymousKeys::Allow)).to_string();
        assert!(allow.contains(&piece), "missing `{piece}` in `{allow}`");
    }

    #[test]
    fn bad_arguments_are_compile_errors_that_say_why() {
        assert_eq!(
            error(quote!(idempotency = "always")),
            "expected \"required\", \"optional\" or \"off\""
        );
        assert_eq!(
            error(quote!(idempotency_ttl = "0s")),
            "must be at least 1s: a shorter TTL turns off the at-most-once guarantee"
        );
        assert!(error(quote!(idempotency_ttl = "2 days")).starts_with("expected a duration"));
        assert!(error(quote!(idempotency_ignore = ["client_ts"])).contains("must start with `/`"));
        assert!(error(quote!(idempotency_only = ["/a~2"])).contains("`~0` for `~`"));
        assert_eq!(
            error(quote!(
                idempotency_ignore = ["/a"],
                idempotency_only = ["/b"]
            )),
            "give `idempotency_ignore` or `idempotency_only`, not both"
        );
        assert_eq!(
            error(quote!(
                idempotency_fingerprint = "bytes",
                idempotency_ignore = ["/a"]
            )),
            "fingerprint fields need idempotency_fingerprint = \"json\""
        );
        assert_eq!(
            error(quote!(in_flight_wait_ms = 1, in_flight_wait_ms = 2)),
            "`in_flight_wait_ms` given twice"
        );
        assert_eq!(error(quote!(idempotency_retries = 3)), EXPECTED);
        assert_eq!(
            error(quote!(record_errors = "client")),
            "expected \"server\" (record and replay a 5xx) or \"none\"; a 4xx is never recorded"
        );
        assert_eq!(
            error(quote!(record_errors = "server", record_errors = "none")),
            "`record_errors` given twice"
        );
        assert_eq!(
            error(quote!(anonymous_keys = "deny")),
            "expected \"refuse\" (a key from a caller with no identity gets 403) or \"allow\""
        );
        assert_eq!(
            error(quote!(anonymous_keys = "refuse", anonymous_keys = "allow")),
            "`anonymous_keys` given twice"
        );
    }

    #[test]
    fn durations_take_one_unit() {
        let ms = |text: &str| parse_duration_ms(&LitStr::new(text, Span::call_site())).ok();
        assert_eq!(ms("1500ms"), Some(1500));
        assert_eq!(ms("90s"), Some(90_000));
        assert_eq!(ms("15m"), Some(900_000));
        assert_eq!(ms("2d"), Some(172_800_000));
        assert_eq!(ms("h"), None);
        assert_eq!(ms("1h30m"), None);
    }
}
