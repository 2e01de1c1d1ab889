//! For the logging tests: a writer that keeps what is written, and what a
//! subscriber writes to it.

use std::sync::{Arc, Mutex};

use crate::config::LogConfig;

/// Keeps every byte written to it; clones share the bytes.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// What has been written, as text.
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::ErrorKind::Other)?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `log` writes through the subscriber `config` describes, plain
/// text with no colours.
pub(crate) fn logged(config: &LogConfig, log: impl FnOnce()) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = super::subscriber(config, move || writer.clone(), false);
    tracing::subscriber::with_default(subscriber, log);
    captured.text()
}

/// `line` without the timestamp it starts with.
pub(crate) fn untimed(line: &str) -> &str {
    line.split_once("Z ").map_or(line, |(_, rest)| rest)
}
