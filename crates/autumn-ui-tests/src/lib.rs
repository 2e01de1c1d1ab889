//! Nothing to link: this crate holds the compile-time tests of Autumn's
//! macros (`tests/macros_ui.rs`), kept apart from autumn-web so that they
//! build against autumn-web with its default features only.
