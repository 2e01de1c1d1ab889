//! What a test logged: a subscriber for the test's thread that writes into a
//! buffer the test reads.
//!
//! ```
//! let (_guard, logs) = autumn_testkit::logs::capture();
//! tracing::info!(answer = 42, "computed");
//! assert_eq!(logs.lines_with("computed").len(), 1);
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// The lines logged since [`capture`] on this thread.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Everything logged so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The logged lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures every event logged on this thread (a current-thread runtime's
/// tasks included) until the guard is dropped.
pub fn capture() -> (DefaultGuard, Logs) {
    keep_interest_shared();
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (tracing::subscriber::set_default(subscriber), logs)
}

/// Keeps a second dispatcher registered for the rest of the process. With
/// only one registered (the capturing test's), tracing asks just the
/// current thread's subscriber whether a callsite is wanted, so whichever
/// thread meets a callsite first decides for all: a test thread that logs
/// nowhere would switch off a line another test is capturing. With two, it
/// asks every live subscriber.
fn keep_interest_shared() {
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}
