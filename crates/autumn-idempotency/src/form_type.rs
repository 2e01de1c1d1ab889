//! The form content types the submit-token layer reads, named once: the
//! scanner parses them, and `key::may_be_guarded` spots them without a
//! parse.

pub(crate) const URLENCODED: &str = "application/x-www-form-urlencoded";
pub(crate) const MULTIPART: &str = "multipart/";

/// Whether `content_type` may announce a form the submit-token layer reads
/// (`submit::scan::form_kind`): every
/// type it reads, and more (any multipart type), without a parse.
/// Bytes, not text: a type that is not UTF-8 is no form the layer reads,
/// and none that this would miss.
pub(crate) fn may_be_form(content_type: &[u8]) -> bool {
    let start = content_type
        .iter()
        .position(|byte| !byte.is_ascii_whitespace())
        .unwrap_or(content_type.len());
    let trimmed = &content_type[start..];
    let starts_with = |prefix: &str| {
        trimmed
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
    };
    starts_with(URLENCODED) || starts_with(MULTIPART)
}
