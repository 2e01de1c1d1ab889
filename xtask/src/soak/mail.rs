//! The soak's mail: saas sends each new account a confirmation, through
//! SMTP to a real server of the soak's own (`aiosmtpd`, the test tools'),
//! which reports every mail it accepts. After the load, once saas has no
//! mail left to send, every account must have got exactly one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::http::Connection;

/// How long the queue may take to drain after the load.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// The SMTP server, stopped on drop.
pub(super) struct Sink {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(super) port: u16,
    /// Accepted mails per recipient.
    accepted: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Sink {
    /// Starts `smtp_sink.py` with the API tools' Python.
    pub(super) fn start(root: &Path) -> Result<Self, String> {
        let tools = std::env::var_os("AUTUMN_API_TOOLS").map_or_else(
            || PathBuf::from("/usr/local/lib/autumn-api-tools"),
            PathBuf::from,
        );
        let python = tools.join("bin/python");
        let script = root.join("crates/autumn-testkit/src/smtp_sink.py");
        let mut child = Command::new(&python)
            .arg("-u")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start the SMTP server ({} {}): {e}; run `cargo xtask services`",
                    python.display(),
                    script.display()
                )
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("the SMTP server has no output")?;
        let accepted: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let counts = Arc::clone(&accepted);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = field(&line, "\"port\": ") {
                    let _ = port_tx.send(port.parse::<u16>().unwrap_or_default());
                } else if line.contains("\"event\": \"accepted\"") {
                    let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
                    for to in recipients(&line) {
                        *counts.entry(to).or_default() += 1;
                    }
                }
            }
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the SMTP server did not say its port within 30 s".to_owned())?;
        Ok(Self {
            child,
            stdin,
            port,
            accepted,
        })
    }

    /// Accepted mails per recipient, so far.
    pub(super) fn accepted(&self) -> BTreeMap<String, u32> {
        self.accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text after `key` up to the next `,` or `}`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(key)? + key.len()..];
    Some(rest[..rest.find([',', '}']).unwrap_or(rest.len())].trim())
}

/// The envelope recipients of an `accepted` line.
fn recipients(line: &str) -> Vec<String> {
    let Some(start) = line.find("\"rcpt_tos\": [") else {
        return Vec::new();
    };
    let rest = &line[start + "\"rcpt_tos\": [".len()..];
    rest[..rest.find(']').unwrap_or(0)]
        .split(',')
        .map(|to| to.trim().trim_matches('"').to_lowercase())
        .filter(|to| !to.is_empty())
        .collect()
}

/// Waits until saas at `addr` has no mail left to send.
pub(super) fn wait_for_drain(addr: SocketAddr) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let stats = Connection::new(addr)
            .send("GET /invoices/stats.json HTTP/1.1", b"")
            .map_err(|e| format!("saas: GET /invoices/stats.json: {e}"))?;
        if field(&stats.body, "\"mails_pending\":").is_some_and(|pending| pending == "0") {
            return Ok(started.elapsed());
        }
        if started.elapsed() > DRAIN_TIMEOUT {
            return Err(format!(
                "saas still had mail to send after {}s: {}",
                DRAIN_TIMEOUT.as_secs(),
                stats.body
            ));
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Every account (`accounts`: rows per email) got exactly one
/// confirmation, and no mail went to anyone else.
pub(super) fn check(
    accounts: &BTreeMap<String, u32>,
    delivered: &BTreeMap<String, u32>,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let mut wrong = Vec::new();
    for email in accounts.keys() {
        let got = delivered.get(&email.to_lowercase()).copied().unwrap_or(0);
        if got != 1 {
            wrong.push(format!("{email}: {got} confirmations"));
        }
    }
    for (to, got) in delivered {
        if !accounts.keys().any(|email| email.eq_ignore_ascii_case(to)) {
            wrong.push(format!("{to}: {got} mails, and no account"));
        }
    }
    let sent: u32 = delivered.values().sum();
    let duplicates: u32 = delivered.values().map(|n| n.saturating_sub(1)).sum();
    let _ = writeln!(
        table,
        "  mail: {sent} confirmations accepted by the SMTP server for {} accounts, {duplicates} duplicate sends",
        accounts.len()
    );
    if !wrong.is_empty() {
        for line in wrong.iter().take(10) {
            let _ = writeln!(table, "    {line}");
        }
        failures.push(format!(
            "saas: {} accounts without exactly one confirmation, or mail to no account",
            wrong.len()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    }

    #[test]
    fn an_accepted_line_names_its_recipients() {
        let line = r#"{"event": "accepted", "mail_from": "a@x", "rcpt_tos": ["Ann@Example.com", "b@x"], "data": "..."}"#;
        assert_eq!(recipients(line), ["ann@example.com", "b@x"]);
        assert_eq!(
            field(r#"{"event": "listening", "port": 2525}"#, "\"port\": "),
            Some("2525")
        );
    }

    #[test]
    fn one_confirmation_each_passes_and_a_duplicate_or_a_missing_one_fails() {
        let accounts = map(&[("a@x", 1), ("b@x", 1)]);
        let mut table = String::new();
        let mut failures = Vec::new();
        check(
            &accounts,
            &map(&[("a@x", 1), ("b@x", 1)]),
            &mut table,
            &mut failures,
        );
        assert!(failures.is_empty(), "{failures:?}");
        assert!(table.contains("0 duplicate sends"), "{table}");

        check(&accounts, &map(&[("a@x", 2)]), &mut table, &mut failures);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(table.contains("a@x: 2 confirmations"), "{table}");
        assert!(table.contains("b@x: 0 confirmations"), "{table}");
    }
}
