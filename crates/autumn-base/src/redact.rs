//! Keeping secrets out of logs and error messages.

/// Replaces the passwords of any URLs in `text` with `***`: the password in the user info
/// (`redis://user:secret@host/0` becomes `redis://user:***@host/0`) and the values of
/// password-like query parameters (`?password=secret` becomes `?password=***`).
///
/// ```
/// use autumn_base::redact_passwords;
///
/// assert_eq!(
///     redact_passwords("cannot reach redis://app:s3cret@cache:6379/0"),
///     "cannot reach redis://app:***@cache:6379/0"
/// );
/// ```
pub fn redact_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // A URL runs to the next whitespace or quote (it may be quoted inside a message).
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        redact_url(url, &mut out);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Redacts `url`, the part of a URL after `scheme://`, into `out`.
fn redact_url(url: &str, out: &mut String) {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => {
                out.push_str(user);
                out.push_str(":***@");
                out.push_str(host);
            }
            _ => out.push_str(authority),
        },
        None => out.push_str(authority),
    }

    let (path, fragment) = match path.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (path, None),
    };
    match path.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            for (i, param) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match param.split_once('=') {
                    Some((name, value)) if is_secret(name) && !value.is_empty() => {
                        out.push_str(name);
                        out.push_str("=***");
                    }
                    _ => out.push_str(param),
                }
            }
        }
        None => out.push_str(path),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
}

fn is_secret(name: &str) -> bool {
    const SECRETS: &[&str] = &[
        "password",
        "passwd",
        "pass",
        "pwd",
        "sslpassword",
        "secret",
        "token",
    ];
    SECRETS
        .iter()
        .any(|secret| name.eq_ignore_ascii_case(secret))
}
