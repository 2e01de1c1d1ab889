//! Request security: cross-origin protection, and one-time submit tokens
//! for HTML forms.
//!
//! A mutating request that a browser sends on behalf of another site is
//! refused with 403 `cross_origin_request_refused` by [`CrossOriginLayer`]
//! (installed by the app builder while `[security.cross_origin] enabled =
//! true`, the default), before any of the app's code runs. Requests from
//! clients that are not browsers pass. The rules, and how to trust another
//! origin of yours, are in the [security guide](crate::docs::security).
//!
//! A form that carries a fresh [`SubmitToken`] in a hidden field is posted
//! at most once: the submit-token layer (installed by the app builder while
//! `[security.submit_token] enabled = true`, the default) runs the handler
//! for the first post of a token and answers every later post of the same
//! token with that first response, marked with the
//! [`SUBMIT_TOKEN_REPLAYED`] header. A post that arrives while the first one
//! is still running gets 409, or, with `in_flight_wait_ms` set, waits for the
//! first one and gets its response.
//!
//! Two helpers render the pieces of a guarded form:
//!
//! - [`submit_token_field`], the hidden input: the part that matters;
//! - [`double_submit_guard`], an optional script that stops most duplicate
//!   posts in the browser before they are sent. It saves requests; it
//!   guarantees nothing.
//!
//! ```
//! use autumn_web::prelude::*;
//! use autumn_web::security::{SubmitFormField, SubmitToken, double_submit_guard, submit_token_field};
//!
//! #[get("/invite")]
//! async fn invite_form(token: SubmitToken, field: SubmitFormField) -> Markup {
//!     html! {
//!         form method="POST" action="/invite" data-autumn-once {
//!             (submit_token_field(&token, &field))
//!             input type="email" name="email";
//!             button type="submit" { "Send the invitation" }
//!         }
//!         (double_submit_guard())
//!     }
//! }
//! # fn main() {}
//! ```

use maud::{Markup, PreEscaped, html};

pub use autumn_core::cross_origin::{
    self, CrossOrigin, CrossOriginLayer, CrossOriginRejection, InvalidOrigin, TrustedOrigin,
};
pub use autumn_idempotency::submit::{
    SUBMIT_TOKEN_REPLAYED, SubmitFormField, SubmitToken, SubmitTokenLayer,
};

/// The hidden input that carries a form's one-time submit token:
/// `<input type="hidden" name="_submit_token" value="...">`, named by the
/// configured `[security.submit_token] field_name`.
///
/// Put it **first** in the form, before any other field and above all before
/// a file input. A browser sends the fields in document order, so the token
/// then opens the body and the layer finds it without reading through the
/// rest of the form, however large the upload behind it.
///
/// Render it with the [`SubmitToken`] and [`SubmitFormField`] of the request
/// that renders the form, including the re-render after a rejected post, so
/// that each rendering gets a token of its own.
///
/// ```
/// use autumn_web::prelude::*;
/// use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
///
/// #[get("/comments/new")]
/// async fn new_comment(token: SubmitToken, field: SubmitFormField) -> Markup {
///     html! {
///         form method="POST" action="/comments" {
///             (submit_token_field(&token, &field))
///             textarea name="body" {}
///             button type="submit" { "Post" }
///         }
///     }
/// }
/// # fn main() {}
/// ```
pub fn submit_token_field(token: &SubmitToken, field: &SubmitFormField) -> Markup {
    // A token is 32 lowercase hex digits, which need no escaping; the
    // escaper goes character by character and cost more than the rest.
    // Each form gets a token of its own: a page with a row of delete
    // buttons has one per row, and posting one never answers for another.
    let value = token.mint();
    let value = value.as_str();
    debug_assert!(value.bytes().all(|b| b.is_ascii_hexdigit()));
    // The field name is configured, so it may need escaping; the usual
    // one (`_submit_token`) does not, and telling so is cheaper than
    // running it through the escaper on every page.
    let name = field.name();
    if escapes_as_itself(name) {
        html! {
            input type="hidden" name=(PreEscaped(name)) value=(PreEscaped(value));
        }
    } else {
        html! {
            input type="hidden" name=(name) value=(PreEscaped(value));
        }
    }
}

/// Whether maud's escaper would leave `text` as it is: it rewrites `&`,
/// `<`, `>` and `"`, nothing else. About 100 instructions for the default
/// name, where the escaper took 220.
fn escapes_as_itself(text: &str) -> bool {
    !text.bytes().fold(false, |found, byte| {
        found | matches!(byte, b'&' | b'<' | b'>' | b'"')
    })
}

/// The script behind [`double_submit_guard`]. Plain ES5, no dependencies.
///
/// One listener on `document` serves every guarded form on the page, however
/// and whenever it was added. It runs after the form's own submit listeners
/// (bubbling), so a submit that the page's own code cancelled does not mark
/// the form. Only the buttons it marked are restored on `pageshow`.
const GUARD_SCRIPT: &str = r#"(function () {
  if (window.autumnDoubleSubmitGuard) { return; }
  window.autumnDoubleSubmitGuard = true;
  var SUBMITTING = "data-autumn-submitting";
  var MARKED = "data-autumn-once-disabled";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form || !form.matches || !form.matches("form[data-autumn-once]")) { return; }
    if (form.hasAttribute(SUBMITTING)) {
      event.preventDefault();
      return;
    }
    if (event.defaultPrevented) { return; }
    form.setAttribute(SUBMITTING, "");
    for (var i = 0; i < form.elements.length; i++) {
      var control = form.elements[i];
      if (control.type === "submit" && !control.hasAttribute("aria-disabled")) {
        control.setAttribute("aria-disabled", "true");
        control.setAttribute(MARKED, "");
      }
    }
  });
  window.addEventListener("pageshow", function () {
    var forms = document.querySelectorAll("form[" + SUBMITTING + "]");
    for (var i = 0; i < forms.length; i++) { forms[i].removeAttribute(SUBMITTING); }
    var buttons = document.querySelectorAll("[" + MARKED + "]");
    for (var j = 0; j < buttons.length; j++) {
      buttons[j].removeAttribute("aria-disabled");
      buttons[j].removeAttribute(MARKED);
    }
  });
})();"#;

/// An opt-in `<script>` that stops a double-click from sending a form twice.
///
/// Mark a form with the `data-autumn-once` attribute and include this once
/// per page (anywhere: it listens on the document). On the first `submit` of
/// a marked form the script marks the form as submitting and sets
/// `aria-disabled="true"` on its submit buttons; every later `submit` of
/// that form is cancelled with `preventDefault()`. On `pageshow`, which also
/// fires when the browser restores the page from its back/forward cache with
/// the script's state intact, the marks are cleared so the form works again.
///
/// The buttons get `aria-disabled`, not `disabled`, on purpose: a disabled
/// control is left out of the form data, the clicked button included, so
/// disabling it while the submit is under way would drop its `name=value`
/// (`action=save` versus `action=send`) from the post. `aria-disabled` only
/// tells assistive technology; the form mark does the blocking.
///
/// **This is a convenience, not the guarantee.** Without JavaScript, on a
/// reload that resends the post, on Back and submit again, on a browser's or
/// proxy's retry, or from another tab, the browser sends the duplicate
/// anyway. The one-time submit token in the form ([`submit_token_field`]) is
/// what makes the server run the mutation once; the script only spares it
/// most of the duplicates.
///
/// Two more things to know:
///
/// - the form stays marked until the next `pageshow`, so leave the attribute
///   off forms whose answer does not replace the page (a download, a
///   `target="_blank"` form);
/// - the script is inline: the default `Content-Security-Policy`
///   ([`DEFAULT_CONTENT_SECURITY_POLICY`](crate::config::DEFAULT_CONTENT_SECURITY_POLICY))
///   allows it by its hash; a policy of your own must keep that
///   `'sha256-…'` source in `script-src`.
///
/// ```
/// use autumn_web::prelude::*;
/// use autumn_web::security::double_submit_guard;
///
/// let page = html! {
///     form method="POST" action="/pay" data-autumn-once {
///         button type="submit" name="action" value="pay" { "Pay" }
///     }
///     (double_submit_guard())
/// };
/// assert!(page.into_string().contains("data-autumn-once"));
/// ```
pub fn double_submit_guard() -> Markup {
    html! {
        script { (PreEscaped(GUARD_SCRIPT)) }
    }
}
