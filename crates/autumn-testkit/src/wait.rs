//! Bounded waits: poll a condition until it holds, and fail the test, saying
//! what never happened, when it does not within the limit. A wait for
//! another task or process to get somewhere, never a sleep standing in for
//! a clock (tests that need time to pass move a `ManualClock`).

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The first pause between two checks; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(2);

/// The longest pause between two checks.
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

/// What a check answers: done (with a value) or not yet.
///
/// - `bool`: `true` is done;
/// - `Option<T>`: `Some(value)` is done, and the wait returns `value`;
/// - `Result<T, E>`: `Ok(value)` is done; the last `Err` says what was seen
///   instead, and the panic message shows it.
pub trait Outcome {
    /// What the wait returns once the check is done.
    type Value;

    /// `Ok` when done; otherwise what was seen instead, if the check says.
    fn settle(self) -> Result<Self::Value, Option<String>>;
}

impl Outcome for bool {
    type Value = ();

    fn settle(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;

    fn settle(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;

    fn settle(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// Calls `check` until it is done and returns its value; pauses between
/// calls (a few milliseconds, growing to 50).
///
/// # Panics
///
/// When `check` is still not done after `within`: "timed out after
/// {within} waiting for {what}", with the last thing `check` saw when it
/// answers a `Result`.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let flag = Arc::new(AtomicBool::new(false));
/// let setter = flag.clone();
/// std::thread::spawn(move || setter.store(true, Ordering::SeqCst));
/// autumn_testkit::eventually("the flag", Duration::from_secs(5), || {
///     flag.load(Ordering::SeqCst)
/// });
/// ```
#[track_caller]
pub fn eventually<O: Outcome>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> O,
) -> O::Value {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check().settle() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if start.elapsed() >= within {
            timed_out(what, within, seen);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// [`eventually`] for an async check, pausing with `tokio::time::sleep`.
///
/// # Panics
///
/// As [`eventually`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let (send, mut receive) = tokio::sync::mpsc::unbounded_channel();
/// tokio::spawn(async move { send.send(42) });
/// let answer = autumn_testkit::eventually_async("the answer", Duration::from_secs(5), || {
///     let got = receive.try_recv();
///     async move { got.map_err(|error| error.to_string()) }
/// })
/// .await;
/// assert_eq!(answer, 42);
/// # }
/// ```
pub async fn eventually_async<O, F, Fut>(what: &str, within: Duration, mut check: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check().await.settle() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if start.elapsed() >= within {
            timed_out(what, within, seen);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

#[track_caller]
fn timed_out(what: &str, within: Duration, seen: Option<String>) -> ! {
    match seen {
        Some(seen) => panic!("timed out after {within:?} waiting for {what}; last seen: {seen}"),
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value_once_done() {
        let mut calls = 0;
        let value = eventually("the third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(value, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing; last seen: still 0")]
    fn names_what_never_happened() {
        eventually("nothing", Duration::from_millis(20), || {
            Err::<(), _>("still 0")
        });
    }
}
