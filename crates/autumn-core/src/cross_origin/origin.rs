//! [`TrustedOrigin`]: an origin allowed to send mutating requests from
//! another site, checked when it is configured rather than when a request
//! fails to match it.

use std::fmt;
use std::str::FromStr;

/// An origin, `scheme://host[:port]`, written exactly as a browser sends it
/// in the `Origin` header, so that an exact comparison is the right one.
///
/// Parsing refuses what a browser would never send, instead of letting it
/// silently never match: a path (even a trailing `/`), a query, a user
/// name, capital letters, or the scheme's default port (`:443` on `https`,
/// `:80` on `http`). The error names the spelling to use when there is one.
///
/// ```
/// use autumn_core::cross_origin::TrustedOrigin;
///
/// let origin: TrustedOrigin = "https://admin.example.com".parse().unwrap();
/// assert_eq!(origin.as_str(), "https://admin.example.com");
/// assert!("http://localhost:8080".parse::<TrustedOrigin>().is_ok());
/// assert!("http://[::1]:8080".parse::<TrustedOrigin>().is_ok());
///
/// let error = "https://admin.example.com/".parse::<TrustedOrigin>().unwrap_err();
/// assert_eq!(error.suggestion(), Some("https://admin.example.com"));
/// assert!("admin.example.com".parse::<TrustedOrigin>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TrustedOrigin(String);

impl TrustedOrigin {
    /// The origin, as the `Origin` header carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TrustedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TrustedOrigin {
    type Err = InvalidOrigin;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let normalized = normalize(input).map_err(|reason| InvalidOrigin {
            origin: input.to_owned(),
            reason,
            suggestion: None,
        })?;
        if normalized == input {
            Ok(Self(normalized))
        } else {
            Err(InvalidOrigin {
                origin: input.to_owned(),
                reason: "a browser never sends it written this way",
                suggestion: Some(normalized),
            })
        }
    }
}

/// Why a string is not a [`TrustedOrigin`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct InvalidOrigin {
    origin: String,
    reason: &'static str,
    suggestion: Option<String>,
}

impl InvalidOrigin {
    /// The string that was refused.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How a browser would write the same origin, when it is one written
    /// differently (a trailing `/`, capitals, a default port).
    pub fn suggestion(&self) -> Option<&str> {
        self.suggestion.as_deref()
    }

    fn message(&self) -> String {
        match &self.suggestion {
            Some(suggestion) => format!(
                "`{}` is not an origin as a browser sends it in the Origin header ({}); write `{suggestion}`",
                self.origin, self.reason
            ),
            None => format!(
                "`{}` is not an origin ({}); write scheme://host[:port], like `https://app.example.com`",
                self.origin, self.reason
            ),
        }
    }
}

/// `input` as a browser serializes the origin (lower case, no default port,
/// no trailing `/`), or why it is no origin at all.
fn normalize(input: &str) -> Result<String, &'static str> {
    let (scheme, rest) = input
        .split_once("://")
        .ok_or("it has no scheme such as `https://`")?;
    let mut letters = scheme.chars();
    if !letters.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !letters.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return Err("its scheme is not valid");
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if !tail.is_empty() && tail != "/" {
        return Err("an origin has no path, query or fragment");
    }
    if authority.contains('@') {
        return Err("an origin has no user name or password");
    }
    let (host, port) = split_port(authority)?;
    let valid_host = if let Some(inner) = host.strip_prefix('[') {
        inner.strip_suffix(']').is_some_and(|ip| {
            !ip.is_empty()
                && ip
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
        })
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    };
    if !valid_host {
        return Err("its host is missing or not valid");
    }
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let mut origin = format!("{scheme}://{}", host.to_ascii_lowercase());
    if let Some(port) = port.filter(|port| Some(*port) != default_port) {
        origin.push_str(&format!(":{port}"));
    }
    Ok(origin)
}

/// `host[:port]` split, the port checked.
fn split_port(authority: &str) -> Result<(&str, Option<u16>), &'static str> {
    // An IPv6 host is bracketed and full of colons; the port follows `]`.
    let colon = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].find(':').map(|at| bracket + at),
        None => authority.rfind(':'),
    };
    let Some(colon) = colon else {
        return Ok((authority, None));
    };
    let port = &authority[colon + 1..];
    match port.parse::<u16>() {
        Ok(number) if number > 0 && port.chars().all(|c| c.is_ascii_digit()) => {
            Ok((&authority[..colon], Some(number)))
        }
        _ => Err("its port is not a number from 1 to 65535"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &str) -> Result<String, InvalidOrigin> {
        input.parse::<TrustedOrigin>().map(|o| o.0)
    }

    #[test]
    fn origins_as_browsers_send_them_parse() {
        for origin in [
            "https://example.com",
            "http://localhost:3000",
            "https://app.example.com:8443",
            "http://127.0.0.1:8080",
            "http://[::1]:8080",
            "https://[2001:db8::1]",
            "chrome-extension://abcdef",
        ] {
            assert_eq!(parse(origin).as_deref(), Ok(origin));
        }
    }

    #[test]
    fn other_spellings_of_an_origin_name_the_browsers_spelling() {
        for (input, spelling) in [
            ("https://example.com/", "https://example.com"),
            ("https://Example.COM", "https://example.com"),
            ("HTTPS://example.com", "https://example.com"),
            ("https://example.com:443", "https://example.com"),
            ("http://example.com:80", "http://example.com"),
            ("http://[::1]:80/", "http://[::1]"),
        ] {
            let error = parse(input).expect_err(input);
            assert_eq!(error.suggestion(), Some(spelling), "{input}");
            assert!(error.to_string().contains(spelling), "{error}");
        }
    }

    #[test]
    fn what_is_no_origin_is_refused() {
        for input in [
            "",
            "null",
            "example.com",
            "://example.com",
            "1http://example.com",
            "https://",
            "https://example.com/app",
            "https://example.com?x=1",
            "https://example.com#top",
            "https://user:pw@example.com",
            "https://example.com:0",
            "https://example.com:65536",
            "https://example.com:+80",
            "https://example.com:",
            "https://exa mple.com",
            "https://[::1",
            "https://[]",
        ] {
            let error = parse(input).expect_err(input);
            assert_eq!(error.suggestion(), None, "{input}");
            assert_eq!(error.origin(), input);
        }
    }
}
