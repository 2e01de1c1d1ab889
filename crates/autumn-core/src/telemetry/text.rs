//! The plain-text log line for a writer that is not a terminal (a file, a
//! pipe, a container's log): the same layout as `tracing-subscriber`'s
//! default format without colours,
//!
//! ```text
//! 2026-12-01T16:40:51.123456Z  INFO request{request_id=3f28…}: autumn::access: POST /orders 201 0.412ms method=POST …
//! ```
//!
//! written straight into the line: no styling wrappers around every name
//! and `=`, and the date and time formatted once a second. The access log
//! writes one of these per request, so its cost is the framework's cost.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::RequestId;

/// Formats events (and, as [`FormatFields`], span fields) as plain text.
///
/// Made by [`formatted`](super::formatted) with the subscriber's writer, it
/// also lets the framework write its own lines to that writer without a
/// `tracing` event (see [`Direct`]).
#[derive(Clone, Default)]
pub(crate) struct PlainText {
    direct: Option<Direct>,
}

impl PlainText {
    /// The format, with `direct` for the framework's own lines.
    pub(crate) fn with_direct(direct: Direct) -> Self {
        Self {
            direct: Some(direct),
        }
    }

    /// Where the framework may write its own lines, when the current
    /// subscriber is Autumn's plain-text one: the same writer, the same
    /// layout, with no event dispatched, no span kept in the registry and
    /// no field visited.
    pub(crate) fn current_direct() -> Option<Direct> {
        tracing::dispatcher::get_default(|dispatch| {
            dispatch
                .downcast_ref::<Self>()
                .and_then(|plain| plain.direct.clone())
        })
    }
}

/// Writes a whole line to the writer of Autumn's plain-text subscriber.
#[derive(Clone)]
pub(crate) struct Direct(Arc<WriteLine>);

type WriteLine = dyn Fn(&[u8]) + Send + Sync;

impl Direct {
    pub(crate) fn new(write: impl Fn(&[u8]) + Send + Sync + 'static) -> Self {
        Self(Arc::new(write))
    }

    /// Writes the line an `INFO` event of `target` would give, its fields
    /// (already written as [`Fields`] would write them) put in by `fields`,
    /// outside any span.
    pub(crate) fn info(&self, target: &str, fields: impl FnOnce(&mut String)) {
        thread_local! {
            static LINE: RefCell<String> = const { RefCell::new(String::new()) };
        }
        LINE.with(|line| {
            let Ok(mut line) = line.try_borrow_mut() else {
                return;
            };
            line.clear();
            if write_timestamp(&mut *line, SystemTime::now()).is_err() {
                return;
            }
            line.push_str(level_label(Level::INFO));
            line.push_str(target);
            line.push_str(": ");
            fields(&mut line);
            line.push('\n');
            (self.0)(line.as_bytes());
        });
    }
}

/// The level as a line shows it, padded to one width between spaces.
fn level_label(level: Level) -> &'static str {
    match level {
        Level::TRACE => " TRACE ",
        Level::DEBUG => " DEBUG ",
        Level::INFO => "  INFO ",
        Level::WARN => "  WARN ",
        Level::ERROR => " ERROR ",
    }
}

thread_local! {
    /// The request being polled on this thread, when its scope is kept
    /// here rather than in a `tracing` span (see [`RequestScope`]).
    static REQUEST: RefCell<Option<RequestId>> = const { RefCell::new(None) };
}

/// A request's `request{request_id=...}` scope for Autumn's plain-text
/// subscriber: the request id is put where [`PlainText`] finds it while the
/// request is polled, and every line logged meanwhile is written as if
/// inside a `request` span. A span would cost a registry entry, a formatted
/// field and an enter and exit per poll.
pub(crate) struct RequestScope {
    /// The scope entered over, until it is restored.
    previous: Option<Option<RequestId>>,
}

impl RequestScope {
    /// `id`'s scope, until [`leave`](Self::leave) (or a drop while
    /// unwinding) restores the one before.
    pub(crate) fn enter(id: RequestId) -> Self {
        Self {
            previous: Some(swap(Some(id))),
        }
    }

    /// Leaves the scope, giving back the id it was entered with.
    pub(crate) fn leave(mut self) -> Option<RequestId> {
        swap(self.previous.take().flatten())
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            swap(previous);
        }
    }
}

/// Puts `id` in [`REQUEST`], returning what was there. Never panics: a
/// thread tearing down its locals (or a line being formatted, which no
/// request polls into) leaves it as it is.
fn swap(id: Option<RequestId>) -> Option<RequestId> {
    REQUEST
        .try_with(|current| {
            current
                .try_borrow_mut()
                .map(|mut current| std::mem::replace(&mut *current, id))
                .ok()
                .flatten()
        })
        .ok()
        .flatten()
}

impl<S, N> FormatEvent<S, N> for PlainText
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write_timestamp(&mut writer, SystemTime::now())?;
        let metadata = event.metadata();
        writer.write_str(level_label(*metadata.level()))?;
        let mut any = REQUEST.with(|current| match current.try_borrow().as_deref() {
            Ok(Some(id)) => write!(writer, "request{{request_id={id}}}:").map(|()| true),
            _ => Ok(false),
        })?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
                any = true;
            }
        }
        if any {
            writer.write_char(' ')?;
        }
        writer.write_str(metadata.target())?;
        writer.write_str(": ")?;
        self.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

impl<'writer> FormatFields<'writer> for PlainText {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Fields {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes `message` first as it is (control characters escaped), then each
/// other field as ` name=value` (`Debug`), as the default format does.
struct Fields<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    fn separate(&mut self) -> fmt::Result {
        if std::mem::take(&mut self.first) {
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    fn field(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        self.result = self.separate().and_then(|()| {
            if name == "message" {
                write!(Escaping(&mut self.writer), "{value}")
            } else {
                let name = name.strip_prefix("r#").unwrap_or(name);
                self.writer.write_str(name)?;
                self.writer.write_char('=')?;
                self.writer.write_fmt(value)
            }
        });
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.field(field, format_args!("{value}"));
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, format_args!("{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, format_args!("{value:?}"));
    }
}

/// Passes text through, escaping the control characters a terminal would
/// act on (so a logged message cannot rewrite the screen it is read on).
pub(crate) struct Escaping<'a, W>(pub(crate) &'a mut W);

impl<W: fmt::Write> fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let risky = |c: char| {
            matches!(
                c,
                '\x07' | '\x08' | '\x0c' | '\x1b' | '\x7f' | '\u{80}'..='\u{9f}'
            )
        };
        // A byte scan: every risky character is one of these bytes or
        // starts with 0xC2 (U+0080 to U+009F), and most text has none.
        if !text
            .bytes()
            .any(|b| matches!(b, 0x07 | 0x08 | 0x0c | 0x1b | 0x7f | 0xc2))
        {
            return self.0.write_str(text);
        }
        for c in text.chars() {
            match c {
                '\u{80}'..='\u{9f}' => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
                c if risky(c) => write!(self.0, "\\x{:02x}", u32::from(c))?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// `2026-12-01T16:40:51.123456Z`: the date and time to the second are made
/// once a second per thread; the microseconds every time.
fn write_timestamp(writer: &mut impl fmt::Write, now: SystemTime) -> fmt::Result {
    thread_local! {
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != seconds {
            second.1.clear();
            date_time(&mut second.1, seconds)?;
            second.0 = seconds;
        }
        writer.write_str(&second.1)
    })?;
    writer.write_str(micros(since.subsec_micros()).as_str())
}

/// `.123456Z` for `micros` below a million, written without `fmt`, whose
/// padding machinery cost more than the rest of the timestamp.
fn micros(micros: u32) -> Micros {
    let mut text = *b".000000Z";
    let mut rest = micros % 1_000_000;
    for digit in text[1..7].iter_mut().rev() {
        // `rest % 10` is below 10, so the digit is ASCII.
        *digit = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
    }
    Micros(text)
}

/// The text [`micros`] makes.
struct Micros([u8; 8]);

impl Micros {
    fn as_str(&self) -> &str {
        // Digits, a dot and a `Z`: always ASCII.
        std::str::from_utf8(&self.0).unwrap_or(".000000Z")
    }
}

/// `YYYY-MM-DDTHH:MM:SS` of `seconds` since the Unix epoch, in UTC.
fn date_time(out: &mut String, seconds: u64) -> fmt::Result {
    let days = seconds / 86_400;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Year, month and day of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::super::captured::{Captured, untimed};
    use std::time::Duration;

    use super::*;

    fn current() -> Option<String> {
        REQUEST.with(|current| current.borrow().as_ref().map(ToString::to_string))
    }

    #[test]
    fn a_request_scope_restores_the_one_it_entered_over() {
        let id = |text: &'static str| {
            RequestId::from_header(&http::HeaderValue::from_static(text)).expect("a valid id")
        };
        assert_eq!(current(), None);
        let outer = RequestScope::enter(id("outer"));
        let inner = RequestScope::enter(id("inner"));
        assert_eq!(current().as_deref(), Some("inner"));
        assert_eq!(
            inner.leave().map(|id| id.to_string()).as_deref(),
            Some("inner")
        );
        assert_eq!(current().as_deref(), Some("outer"));
        // Dropped without leaving (a panic unwinding through the poll).
        drop(RequestScope::enter(id("unwound")));
        assert_eq!(current().as_deref(), Some("outer"));
        assert_eq!(
            outer.leave().map(|id| id.to_string()).as_deref(),
            Some("outer")
        );
        assert_eq!(current(), None);
    }

    #[test]
    fn microseconds_are_six_digits_padded_with_zeros() {
        assert_eq!(micros(0).as_str(), ".000000Z");
        assert_eq!(micros(7).as_str(), ".000007Z");
        assert_eq!(micros(123_456).as_str(), ".123456Z");
        assert_eq!(micros(999_999).as_str(), ".999999Z");
        for n in [1, 10, 4_020, 50_000, 654_321] {
            assert_eq!(micros(n).as_str(), format!(".{n:06}Z"));
        }
    }

    #[test]
    fn dates_match_the_calendar() {
        for (seconds, expected) in [
            (0, "1970-01-01T00:00:00"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_709_251_199, "2024-02-29T23:59:59"),
            (1_798_761_600, "2027-01-01T00:00:00"),
            (4_102_444_800, "2100-01-01T00:00:00"),
        ] {
            let mut out = String::new();
            date_time(&mut out, seconds).expect("formatted");
            assert_eq!(out, expected, "{seconds}");
        }
    }

    #[test]
    fn timestamps_carry_microseconds_and_follow_the_clock() {
        let at = |micros: u64| UNIX_EPOCH + Duration::from_micros(micros);
        let mut out = String::new();
        write_timestamp(&mut out, at(1_798_761_599_000_042)).expect("formatted");
        out.push(' ');
        // The next second: the cached part is made again.
        write_timestamp(&mut out, at(1_798_761_600_500_000)).expect("formatted");
        assert_eq!(
            out,
            "2026-12-31T23:59:59.000042Z 2027-01-01T00:00:00.500000Z"
        );
    }

    /// What `emit` logs through the default format (no colours) and
    /// through [`PlainText`], each without its timestamp.
    fn both(emit: impl Fn()) -> (String, String) {
        let lines = |captured: &Captured| {
            captured
                .text()
                .lines()
                .map(untimed)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let default = Captured::default();
        let writer = default.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, &emit);
        let plain = Captured::default();
        let writer = plain.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .event_format(PlainText::default())
            .fmt_fields(PlainText::default())
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, &emit);
        (lines(&default), lines(&plain))
    }

    #[test]
    fn lines_read_as_the_default_format_does() {
        let (default, plain) = both(|| {
            let span = tracing::info_span!("request", request_id = %"abc123");
            let _entered = span.enter();
            let inner = tracing::debug_span!("inner", n = 3_u64, label = "x y");
            let _inner = inner.enter();
            tracing::info!(
                target: "autumn::access",
                method = %"POST",
                status = 201_u16,
                latency_ms = %"0.125",
                r#type = "json",
                ok = true,
                "POST /orders {} {}ms",
                201,
                "0.125"
            );
            drop(_inner);
            tracing::warn!(missing = ?Some(-4_i64), "a \"quoted\" message");
            tracing::error!("no fields at all");
        });
        assert_eq!(plain, default);
        assert!(
            plain.contains(
                "INFO request{request_id=abc123}:inner{n=3 label=\"x y\"}: autumn::access: POST /orders 201 0.125ms method=POST status=201 latency_ms=0.125 type=\"json\" ok=true"
            ),
            "{plain}"
        );
    }

    #[test]
    fn a_message_cannot_carry_terminal_control_characters() {
        let (default, plain) = both(|| tracing::info!("before\x1b[2Jafter\u{9b}"));
        assert!(plain.contains("before\\x1b[2Jafter\\u{9b}"), "{plain}");
        assert_eq!(plain, default);
        // Other text, U+00A1 among it (also led by 0xC2), passes as it is.
        let (default, plain) = both(|| tracing::info!("café ¡hola! naïve"));
        assert!(plain.ends_with("café ¡hola! naïve"), "{plain}");
        assert_eq!(plain, default);
    }
}
