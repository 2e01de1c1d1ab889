//! [`Changeset`]: what a form posted, checked field by field into
//! [`FieldErrors`].

use std::str::FromStr;

use super::FieldErrors;

/// Checks posted strings into typed values, recording a message per field
/// that fails. A changeset for one child of a nested form
/// ([`Changeset::nested`]) records its messages under the child's indexed
/// field names (`items[2][quantity]`), so one [`FieldErrors`] holds the
/// parent's and every child's.
///
/// ```
/// use autumn_web::forms::Changeset;
///
/// let mut item = Changeset::nested("items", 1);
/// let description = item.required("description", "  Paper ");
/// let quantity = item.parse::<u32>("quantity", "two", "Enter a whole number.");
/// assert_eq!(description.as_deref(), Some("Paper"));
/// assert_eq!(quantity, None);
/// let errors = item.finish(|| Some(())).unwrap_err();
/// assert_eq!(errors.get("items[1][quantity]"), Some("Enter a whole number."));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Changeset {
    prefix: Option<(String, usize)>,
    errors: FieldErrors,
}

impl Changeset {
    /// A changeset for a form's own fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// A changeset for child `index` of the has-many `collection`.
    pub fn nested(collection: impl Into<String>, index: usize) -> Self {
        Self {
            prefix: Some((collection.into(), index)),
            errors: FieldErrors::new(),
        }
    }

    /// The input name of `field` here: `field`, or `items[2][field]` for a
    /// child.
    pub fn field_name(&self, field: &str) -> String {
        match &self.prefix {
            Some((collection, index)) => nested_name(collection, *index, field),
            None => field.to_owned(),
        }
    }

    /// Records `message` against `field`.
    pub fn add_error(&mut self, field: &str, message: impl Into<String>) {
        let name = self.field_name(field);
        self.errors.add(name, message);
    }

    /// `value` trimmed, or `None` with "Can't be blank." when nothing is
    /// left.
    pub fn required(&mut self, field: &str, value: &str) -> Option<String> {
        let value = value.trim();
        if value.is_empty() {
            self.add_error(field, "Can't be blank.");
            None
        } else {
            Some(value.to_owned())
        }
    }

    /// `value` (trimmed) parsed as a `T`, or `None` with `message`.
    pub fn parse<T: FromStr>(&mut self, field: &str, value: &str, message: &str) -> Option<T> {
        match value.trim().parse() {
            Ok(parsed) => Some(parsed),
            Err(_) => {
                self.add_error(field, message);
                None
            }
        }
    }

    /// Records `message` against `field` unless `ok`.
    pub fn check(&mut self, field: &str, ok: bool, message: &str) {
        if !ok {
            self.add_error(field, message);
        }
    }

    /// Adds the messages of `other` (a child's changeset) to these.
    pub fn merge(&mut self, other: Changeset) {
        for (field, message) in &other.errors {
            self.errors.add(field, message);
        }
    }

    /// Whether no field failed so far.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    /// The messages so far.
    pub fn errors(&self) -> &FieldErrors {
        &self.errors
    }

    /// The value `build` makes from the checked fields when none failed.
    ///
    /// # Errors
    ///
    /// Every message, when a field failed (or `build` found a value
    /// missing that no check reported).
    pub fn finish<T>(self, build: impl FnOnce() -> Option<T>) -> Result<T, FieldErrors> {
        if !self.errors.is_empty() {
            return Err(self.errors);
        }
        match build() {
            Some(value) => Ok(value),
            None => {
                let mut errors = self.errors;
                errors.add("", "The form is incomplete.");
                Err(errors)
            }
        }
    }
}

/// `collection[index][field]`, the name a nested form gives a child's input.
pub(crate) fn nested_name(collection: &str, index: usize, field: &str) -> String {
    format!("{collection}[{index}][{field}]")
}
