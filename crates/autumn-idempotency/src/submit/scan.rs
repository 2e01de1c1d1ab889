//! Finding the submit-token field in a form body without changing the body.

use http::StatusCode;

use crate::problem::Problem;

/// Why a form body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanError {
    TooLarge { limit: usize },
    Malformed(String),
    Repeated,
    BadToken,
}

impl ScanError {
    pub(crate) fn into_problem(self, field: &str) -> Problem {
        match self {
            Self::TooLarge { limit } => Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "form_too_large",
                format!(
                    "the form body is larger than {limit} bytes, the most scanned for a submit token; send less or raise security.submit_token.max_form_bytes"
                ),
            ),
            Self::Malformed(why) => Problem::new(
                StatusCode::BAD_REQUEST,
                "form_malformed",
                format!("the form body is malformed: {why}"),
            ),
            Self::Repeated => Problem::new(
                StatusCode::BAD_REQUEST,
                "submit_token_repeated",
                format!("the form carries the {field} field more than once; send it once"),
            ),
            Self::BadToken => Problem::new(
                StatusCode::BAD_REQUEST,
                "submit_token_malformed",
                format!(
                    "the {field} field must be a token of 1 to 255 visible ASCII characters, as rendered by the form"
                ),
            ),
        }
    }
}

/// The form kinds the layer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FormKind {
    UrlEncoded,
    Multipart { boundary: String },
}

/// The kind of form `content_type` announces, if it is one the layer reads.
pub(crate) fn form_kind(content_type: &str) -> Option<Result<FormKind, ScanError>> {
    let mut params = content_type.split(';');
    let essence = params.next()?.trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => Some(Ok(FormKind::UrlEncoded)),
        "multipart/form-data" => {
            let boundary = params.find_map(|param| {
                let (name, value) = param.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("boundary")
                    .then(|| value.trim().trim_matches('"').to_owned())
            });
            Some(match boundary {
                Some(boundary) if !boundary.is_empty() && boundary.len() <= 70 => {
                    Ok(FormKind::Multipart { boundary })
                }
                _ => Err(ScanError::Malformed(
                    "multipart/form-data needs a boundary parameter of 1 to 70 characters".into(),
                )),
            })
        }
        _ => None,
    }
}

fn token(value: Vec<u8>) -> Result<String, ScanError> {
    if value.is_empty() || value.len() > 255 || value.iter().any(|b| !(0x21..=0x7e).contains(b)) {
        return Err(ScanError::BadToken);
    }
    String::from_utf8(value).map_err(|_| ScanError::BadToken)
}

fn hex(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Decodes `application/x-www-form-urlencoded` text strictly: `+` is a
/// space, and every `%` must start two hex digits.
fn percent_decode(input: &[u8]) -> Result<Vec<u8>, ScanError> {
    let mut out = Vec::with_capacity(input.len());
    let mut bytes = input.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let high = bytes.next().copied().and_then(hex);
                let low = bytes.next().copied().and_then(hex);
                match (high, low) {
                    (Some(high), Some(low)) => out.push(high << 4 | low),
                    _ => {
                        return Err(ScanError::Malformed(
                            "a % is not followed by two hex digits".into(),
                        ));
                    }
                }
            }
            _ => out.push(b),
        }
    }
    Ok(out)
}

/// The token in an urlencoded body, if the field is there.
pub(crate) fn urlencoded(body: &[u8], field: &str) -> Result<Option<String>, ScanError> {
    let mut found = None;
    for pair in body.split(|&b| b == b'&').filter(|pair| !pair.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let name = percent_decode(name)?;
        let value = percent_decode(value)?;
        if name == field.as_bytes() {
            if found.is_some() {
                return Err(ScanError::Repeated);
            }
            found = Some(token(value)?);
        }
    }
    Ok(found)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The `name` and whether a `filename` is given, from a part's headers.
fn disposition(headers: &[u8]) -> Result<(Option<String>, bool), ScanError> {
    let headers = std::str::from_utf8(headers)
        .map_err(|_| ScanError::Malformed("a part's headers are not UTF-8".into()))?;
    for line in headers.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        let mut field = None;
        let mut file = false;
        for param in value.split(';').skip(1) {
            let Some((key, raw)) = param.split_once('=') else {
                continue;
            };
            let raw = raw.trim();
            let unquoted = raw
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .unwrap_or(raw);
            match key.trim().to_ascii_lowercase().as_str() {
                "name" => field = Some(unquoted.to_owned()),
                "filename" | "filename*" => file = true,
                _ => {}
            }
        }
        return Ok((field, file));
    }
    Err(ScanError::Malformed(
        "a part has no Content-Disposition header".into(),
    ))
}

/// What scanning a multipart prefix found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MultipartScan {
    /// The token, when the field was seen.
    pub(crate) token: Option<String>,
    /// Whether every part was seen (the whole body was in `body`).
    pub(crate) complete: bool,
}

/// Scans the parts of a multipart body in order. `whole` says whether
/// `body` is the whole body or only its first bytes: parts cut off by the
/// end of a prefix are left for the caller to watch.
pub(crate) fn multipart(
    body: &[u8],
    boundary: &str,
    field: &str,
    whole: bool,
) -> Result<MultipartScan, ScanError> {
    let delimiter = format!("--{boundary}");
    let next_part = format!("\r\n--{boundary}");
    let cut_off = |token| {
        Ok(MultipartScan {
            token,
            complete: false,
        })
    };
    let Some(start) = find(body, delimiter.as_bytes()) else {
        return if whole {
            Err(ScanError::Malformed(
                "the body does not contain its boundary".into(),
            ))
        } else {
            cut_off(None)
        };
    };
    let mut rest = &body[start + delimiter.len()..];
    let mut token = None;
    loop {
        if rest.starts_with(b"--") {
            return Ok(MultipartScan {
                token,
                complete: true,
            });
        }
        let Some(after_line) = rest.strip_prefix(b"\r\n") else {
            return if whole || rest.len() >= 2 {
                Err(ScanError::Malformed(
                    "a boundary is not followed by a line break".into(),
                ))
            } else {
                cut_off(token)
            };
        };
        let Some(headers_end) = find(after_line, b"\r\n\r\n") else {
            return if whole {
                Err(ScanError::Malformed("a part's headers do not end".into()))
            } else {
                cut_off(token)
            };
        };
        let (name, is_file) = disposition(&after_line[..headers_end])?;
        let content = &after_line[headers_end + 4..];
        let Some(content_end) = find(content, next_part.as_bytes()) else {
            return if whole {
                Err(ScanError::Malformed(
                    "the body does not end with its closing boundary".into(),
                ))
            } else {
                cut_off(token)
            };
        };
        if name.as_deref() == Some(field) {
            if token.is_some() {
                return Err(ScanError::Repeated);
            }
            if is_file {
                return Err(ScanError::BadToken);
            }
            token = Some(self::token(content[..content_end].to_vec())?);
        }
        rest = &content[content_end + next_part.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urlencoded_forms_are_read_strictly() {
        assert_eq!(
            urlencoded(b"title=Hi&_submit_token=abc", "_submit_token"),
            Ok(Some("abc".into()))
        );
        assert_eq!(urlencoded(b"title=Hi", "_submit_token"), Ok(None));
        assert_eq!(
            urlencoded(b"_submit%5Ftoken=a%62c", "_submit_token"),
            Ok(Some("abc".into()))
        );
        assert_eq!(
            urlencoded(b"_submit_token=a&_submit_token=b", "_submit_token"),
            Err(ScanError::Repeated)
        );
        assert!(matches!(
            urlencoded(b"title=%zz", "_submit_token"),
            Err(ScanError::Malformed(_))
        ));
        assert!(matches!(
            urlencoded(b"title=%4", "_submit_token"),
            Err(ScanError::Malformed(_))
        ));
        assert_eq!(
            urlencoded(b"_submit_token=", "_submit_token"),
            Err(ScanError::BadToken)
        );
        assert_eq!(
            urlencoded(b"_submit_token=a+b", "_submit_token"),
            Err(ScanError::BadToken)
        );
    }

    fn part(name: &str, extra: &str, value: &str) -> String {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n{value}\r\n"
        )
    }

    #[test]
    fn multipart_parts_are_read_in_order() {
        let body = format!(
            "{}{}--XyZ--\r\n",
            part("_submit_token", "", "tok"),
            part("f", "; filename=\"a.txt\"", "data")
        );
        let scan = multipart(body.as_bytes(), "XyZ", "_submit_token", true).expect("scan");
        assert_eq!(
            scan,
            MultipartScan {
                token: Some("tok".into()),
                complete: true
            }
        );

        let none = format!("{}--XyZ--\r\n", part("title", "", "x"));
        assert_eq!(
            multipart(none.as_bytes(), "XyZ", "_submit_token", true),
            Ok(MultipartScan {
                token: None,
                complete: true
            })
        );
        let twice = format!(
            "{}{}--XyZ--\r\n",
            part("_submit_token", "", "a"),
            part("_submit_token", "", "b")
        );
        assert_eq!(
            multipart(twice.as_bytes(), "XyZ", "_submit_token", true),
            Err(ScanError::Repeated)
        );
        for broken in [
            "no boundary here",
            "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated",
        ] {
            assert!(
                matches!(
                    multipart(broken.as_bytes(), "XyZ", "_submit_token", true),
                    Err(ScanError::Malformed(_))
                ),
                "{broken}"
            );
        }
        // A prefix cut mid-part is not an error: the rest is watched.
        let prefix = &body.as_bytes()[..body.len() / 2 + 20];
        assert!(
            !multipart(prefix, "XyZ", "_submit_token", false)
                .expect("scan")
                .complete
        );
    }

    #[test]
    fn content_types_name_their_form_kind() {
        assert_eq!(
            form_kind("application/x-www-form-urlencoded; charset=UTF-8"),
            Some(Ok(FormKind::UrlEncoded))
        );
        assert_eq!(
            form_kind("multipart/form-data; boundary=\"abc\""),
            Some(Ok(FormKind::Multipart {
                boundary: "abc".into()
            }))
        );
        assert!(matches!(form_kind("multipart/form-data"), Some(Err(_))));
        assert_eq!(form_kind("application/json"), None);
    }
}
