//! Master-detail forms: a parent with has-many children, posted as indexed
//! field names (`items[0][description]`), rendered by
//! [`NestedChangesetForm`] and read back by [`NestedFormData`].

use std::collections::BTreeMap;

use maud::{Markup, html};

use super::FieldErrors;
use super::changeset::nested_name;
use crate::security::{SubmitFormField, SubmitToken, submit_token_field};

/// The name of the button that adds a blank child row.
pub const ADD_ROW: &str = "_add_row";
/// The name of the buttons that remove a child row (the value is its index).
pub const REMOVE_ROW: &str = "_remove_row";

/// One child's posted fields.
pub type ChildFields = BTreeMap<String, String>;

/// What a nested form sent: the parent's fields, and the children's in
/// order (renumbered from 0, whatever indexes the page used).
///
/// Read it from the post (`Form<Vec<(String, String)>>`), or from the
/// query of the add/remove-row buttons, which re-render the form without
/// posting it (so they spend no submit token).
///
/// ```
/// use autumn_web::forms::NestedFormData;
///
/// let posted = vec![
///     ("customer".to_owned(), "ACME".to_owned()),
///     ("items[3][description]".to_owned(), "Paper".to_owned()),
///     ("items[0][description]".to_owned(), "Ink".to_owned()),
///     ("_add_row".to_owned(), "".to_owned()),
/// ];
/// let data = NestedFormData::from_pairs(posted, "items");
/// assert_eq!(data.field("customer"), "ACME");
/// let descriptions: Vec<&str> = data.children().iter().map(|c| c["description"].as_str()).collect();
/// assert_eq!(descriptions, ["Ink", "Paper", ""]); // the added blank row last
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NestedFormData {
    fields: BTreeMap<String, String>,
    children: Vec<ChildFields>,
}

impl NestedFormData {
    /// Groups `pairs` into the parent's fields and the children of
    /// `collection`, then applies an add-row or remove-row button if one was
    /// pressed.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>, collection: &str) -> Self {
        let mut fields = BTreeMap::new();
        let mut children: BTreeMap<usize, ChildFields> = BTreeMap::new();
        let (mut add, mut remove) = (false, None);
        let prefix = format!("{collection}[");
        for (name, value) in pairs {
            if name == ADD_ROW {
                add = true;
            } else if name == REMOVE_ROW {
                remove = value.parse::<usize>().ok();
            } else if let Some((index, field)) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split_once("]["))
                .and_then(|(index, field)| {
                    Some((index.parse::<usize>().ok()?, field.strip_suffix(']')?))
                })
            {
                children
                    .entry(index)
                    .or_default()
                    .insert(field.to_owned(), value);
            } else {
                fields.insert(name, value);
            }
        }
        if let Some(index) = remove {
            children.remove(&index);
        }
        let mut children: Vec<ChildFields> = children.into_values().collect();
        if add {
            let blank = children
                .first()
                .map(|first| first.keys().map(|k| (k.clone(), String::new())).collect())
                .unwrap_or_default();
            children.push(blank);
        }
        Self { fields, children }
    }

    /// A parent field's value; empty when it was not sent.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    /// The children, in order.
    pub fn children(&self) -> &[ChildFields] {
        &self.children
    }

    /// Whether every child's fields are all blank (a form sent before any
    /// row was filled in).
    pub fn children_blank(&self) -> bool {
        self.children
            .iter()
            .all(|child| child.values().all(|value| value.trim().is_empty()))
    }

    /// Keeps at least `rows` children, adding blank ones: a new form's rows.
    #[must_use]
    pub fn with_min_rows(mut self, rows: usize) -> Self {
        while self.children.len() < rows {
            self.children.push(ChildFields::new());
        }
        self
    }
}

/// One child row as [`NestedChangesetForm`] renders it: the input names,
/// values and messages of child `index`.
#[derive(Debug, Clone, Copy)]
pub struct NestedRow<'a> {
    collection: &'a str,
    index: usize,
    values: &'a ChildFields,
    errors: &'a FieldErrors,
}

impl NestedRow<'_> {
    /// The row's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The input name of `field` in this row: `items[2][field]`.
    pub fn name(&self, field: &str) -> String {
        nested_name(self.collection, self.index, field)
    }

    /// The value posted for `field` in this row; empty for a new row.
    pub fn value(&self, field: &str) -> &str {
        self.values.get(field).map_or("", String::as_str)
    }

    /// The message recorded for `field` in this row, if any.
    pub fn error(&self, field: &str) -> Option<&str> {
        self.errors.get(&self.name(field))
    }
}

/// A master-detail form: the parent's fields, one row per child with a
/// remove button, an add-row button, and one submit token for the whole
/// submission, so the post is guarded like any form: a double-click
/// creates the parent and its children once.
///
/// The add and remove buttons need no JavaScript: they send the form's
/// fields with `GET` to `edit_path`, whose handler re-renders the form from
/// [`NestedFormData::from_pairs`] with a row more or less. Only the submit
/// button posts, spending the token.
///
/// ```
/// use autumn_web::forms::{FieldErrors, NestedChangesetForm, NestedFormData};
/// use autumn_web::prelude::*;
///
/// let data = NestedFormData::default().with_min_rows(2);
/// let errors = FieldErrors::new();
/// let form = NestedChangesetForm::new("/invoices", "/invoices/new", "items", &data, &errors)
///     .parent(html! { input name="customer" value=(data.field("customer")); })
///     .submit_label("Save invoice")
///     .render(|row| html! {
///         input name=(row.name("description")) value=(row.value("description"));
///     });
/// let page = form.into_string();
/// assert!(page.contains(r#"name="items[1][description]""#));
/// ```
pub struct NestedChangesetForm<'a> {
    action: &'a str,
    edit_path: &'a str,
    collection: &'a str,
    data: &'a NestedFormData,
    errors: &'a FieldErrors,
    token: Option<Markup>,
    parent: Option<Markup>,
    add_label: &'a str,
    remove_label: &'a str,
    submit_label: &'a str,
}

impl std::fmt::Debug for NestedChangesetForm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestedChangesetForm")
            .field("action", &self.action)
            .field("collection", &self.collection)
            .finish_non_exhaustive()
    }
}

impl<'a> NestedChangesetForm<'a> {
    /// A form posting to `action`, its rows re-rendered by `edit_path` (a
    /// `GET` route), the children under `collection`, filled with `data`
    /// and `errors`.
    pub fn new(
        action: &'a str,
        edit_path: &'a str,
        collection: &'a str,
        data: &'a NestedFormData,
        errors: &'a FieldErrors,
    ) -> Self {
        Self {
            action,
            edit_path,
            collection,
            data,
            errors,
            token: None,
            parent: None,
            add_label: "Add a row",
            remove_label: "Remove",
            submit_label: "Save",
        }
    }

    /// Puts `token` in the form: one token for the parent and every child,
    /// spent by the one post that saves them all.
    #[must_use]
    pub fn with_submit_token(mut self, token: &SubmitToken, field: &SubmitFormField) -> Self {
        self.token = Some(submit_token_field(token, field));
        self
    }

    /// The parent's fields, rendered above the rows.
    #[must_use]
    pub fn parent(mut self, fields: Markup) -> Self {
        self.parent = Some(fields);
        self
    }

    /// The add-row button's label.
    #[must_use]
    pub fn add_label(mut self, label: &'a str) -> Self {
        self.add_label = label;
        self
    }

    /// The remove buttons' label.
    #[must_use]
    pub fn remove_label(mut self, label: &'a str) -> Self {
        self.remove_label = label;
        self
    }

    /// The submit button's label.
    #[must_use]
    pub fn submit_label(mut self, label: &'a str) -> Self {
        self.submit_label = label;
        self
    }

    /// The form, each child row's inputs made by `row`.
    pub fn render(self, row: impl Fn(&NestedRow<'_>) -> Markup) -> Markup {
        html! {
            form method="POST" action=(self.action) data-autumn-once data-nested=(self.collection) {
                @if let Some(token) = &self.token { (token) }
                @if let Some(parent) = &self.parent { (parent) }
                fieldset data-nested-rows {
                    @for (index, values) in self.data.children().iter().enumerate() {
                        @let nested = NestedRow { collection: self.collection, index, values, errors: self.errors };
                        div data-nested-row=(index) {
                            (row(&nested))
                            button type="submit" formmethod="GET" formaction=(self.edit_path)
                                name=(REMOVE_ROW) value=(index) { (self.remove_label) }
                        }
                    }
                }
                button type="submit" formmethod="GET" formaction=(self.edit_path)
                    name=(ADD_ROW) value="1" { (self.add_label) }
                button type="submit" name="_save" value="1" { (self.submit_label) }
            }
        }
    }
}
