//! The saas example's tests in one binary: its HTTP tests, the crash test and
//! the browser tests. Shared fixtures are in `support`.

#[macro_use]
mod support;

mod browser;
mod error_pages;
mod forms;
mod invoice_crash;
mod invoices;
mod mail;
mod saas;
