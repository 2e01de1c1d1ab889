//! What a route macro calls to describe its handler from the handler's own
//! types: each argument type that can describe itself as an input (aide's
//! `OperationInput`: `Json<T>`, `Form<T>`, `Query<T>`, `Path<T>` over a
//! `T: JsonSchema`) adds its parameters or request body, and the response
//! body type its response. A type that cannot (an `AutumnResult`'s error,
//! a body type without `JsonSchema`) adds nothing, so every existing
//! handler still compiles.
//!
//! The choice is made at compile time by autoref specialisation: the macro
//! calls `(&Probe::<T>::new()).describe_input(op)`, which finds the method
//! of [`DescribeInput`] (implemented for `Probe<T>` where `T` describes
//! itself) before the one of [`SkipInput`] (for `&Probe<T>`, every `T`).
//! It works because the macro names concrete types.

use std::marker::PhantomData;

use aide::openapi::Operation;
use aide::{OperationInput, OperationOutput};

/// A type, carried to the method that describes it.
pub struct Probe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> Probe<T> {
    /// The probe of `T`.
    #[must_use]
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T: ?Sized> Default for Probe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// An argument type that describes itself.
pub trait DescribeInput {
    /// Adds what the type reads to `operation`.
    fn describe_input(&self, operation: &mut Operation);
}

impl<T: OperationInput> DescribeInput for Probe<T> {
    fn describe_input(&self, operation: &mut Operation) {
        aide::generate::in_context(|ctx| T::operation_input(ctx, operation));
    }
}

/// Any other argument type: nothing to add.
pub trait SkipInput {
    /// Adds nothing.
    fn describe_input(&self, operation: &mut Operation) {
        let _ = operation;
    }
}

impl<T: ?Sized> SkipInput for &Probe<T> {}

/// The operation extension a `Path<T>` over single values leaves for the
/// document: each path parameter's name and its value's schema. The
/// document moves them to the parameters and drops the extension.
pub(crate) const PATH_VALUES: &str = "x-autumn-path-values";

/// The `T` of a `Path<T>`, when it describes itself: a single value
/// (`Path<Uuid>`, `Path<u64>`) or a tuple of them (`Path<(u64, String)>`),
/// whose schemas go to the path's parameters by position. A struct is left
/// to aide, which names its fields.
pub trait DescribePathValues {
    /// Hands the values' schemas to the document, by the path's parameter
    /// `names`.
    fn describe_path_values(&self, operation: &mut Operation, names: &[&str]);
}

impl<T: schemars::JsonSchema> DescribePathValues for Probe<T> {
    fn describe_path_values(&self, operation: &mut Operation, names: &[&str]) {
        let own = T::json_schema(&mut schemars::SchemaGenerator::default());
        let own = own.as_value();
        if own.get("type").and_then(serde_json::Value::as_str) == Some("object")
            || own.get("properties").is_some()
        {
            return;
        }
        let schema = aide::generate::in_context(|ctx| ctx.schema.subschema_for::<T>());
        let schema = schema.as_value();
        let values: Vec<serde_json::Value> = match schema.get("prefixItems") {
            Some(serde_json::Value::Array(items)) => items.clone(),
            _ if names.len() == 1 => vec![schema.clone()],
            _ => return,
        };
        let by_name: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .map(|name| (*name).to_owned())
            .zip(values)
            .collect();
        operation
            .extensions
            .insert(PATH_VALUES.to_owned(), serde_json::Value::Object(by_name));
    }
}

/// Any other `T`: nothing to add.
pub trait SkipPathValues {
    /// Adds nothing.
    fn describe_path_values(&self, operation: &mut Operation, names: &[&str]) {
        let _ = (operation, names);
    }
}

impl<T: ?Sized> SkipPathValues for &Probe<T> {}

/// A response body type that describes itself.
pub trait DescribeOutput {
    /// Adds the type's response to `operation` under `status` (`"200"`, or
    /// `"2XX"` when the handler chooses its status at run time).
    fn describe_output(&self, operation: &mut Operation, status: &str);
}

impl<T: OperationOutput> DescribeOutput for Probe<T> {
    fn describe_output(&self, operation: &mut Operation, status: &str) {
        let response = aide::generate::in_context(|ctx| T::operation_response(ctx, operation));
        if let Some(response) = response {
            let responses = operation.responses.get_or_insert_with(Default::default);
            let status = match status.parse::<u16>() {
                Ok(code) => aide::openapi::StatusCode::Code(code),
                Err(_) => aide::openapi::StatusCode::Range(2),
            };
            responses
                .responses
                .insert(status, aide::openapi::ReferenceOr::Item(response));
        }
    }
}

/// Any other response body type: nothing to add.
pub trait SkipOutput {
    /// Adds nothing.
    fn describe_output(&self, operation: &mut Operation, status: &str) {
        let _ = (operation, status);
    }
}

impl<T: ?Sized> SkipOutput for &Probe<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(schemars::JsonSchema, serde::Deserialize, serde::Serialize)]
    struct NewOrder {
        #[allow(dead_code)]
        item: String,
    }

    struct NotDescribed;

    #[test]
    #[expect(
        clippy::needless_borrow,
        reason = "the borrow is what picks the fallback when no impl applies"
    )]
    fn a_type_that_describes_itself_is_described_and_any_other_adds_nothing() {
        let mut operation = Operation::default();
        (&Probe::<axum::Json<NewOrder>>::new()).describe_input(&mut operation);
        (&Probe::<NotDescribed>::new()).describe_input(&mut operation);
        assert!(operation.request_body.is_some());
        (&Probe::<axum::Json<NewOrder>>::new()).describe_output(&mut operation, "2XX");
        (&Probe::<NotDescribed>::new()).describe_output(&mut operation, "200");
        let responses = operation.responses.expect("a response");
        assert_eq!(responses.responses.len(), 1);
    }
}
