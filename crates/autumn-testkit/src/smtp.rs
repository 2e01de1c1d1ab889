//! A real SMTP server for the mailer's tests: Python's `aiosmtpd`, from the
//! API tools' environment, run as a process of the test's own
//! (`smtp_sink.py`). It can require STARTTLS (with a certificate of a
//! [`TestCa`](crate::tls::TestCa)) and AUTH, and leave the first mail
//! unanswered, as a relay would while the sender dies mid-send.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How the server behaves.
#[derive(Debug, Clone, Default)]
pub struct SmtpOptions {
    /// Offer STARTTLS with this certificate and key, and refuse mail
    /// without it.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Require AUTH as this user and password (over TLS).
    pub auth: Option<(String, String)>,
    /// Never answer the first mail's DATA.
    pub stall_first: bool,
}

/// One mail the server accepted (answered 250).
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The envelope sender.
    pub mail_from: String,
    /// The envelope recipients.
    pub rcpt_tos: Vec<String>,
    /// The message as sent, headers and body.
    pub data: String,
    /// Whether the session had turned to TLS.
    pub tls: bool,
    /// Whom the session logged in as.
    pub login: Option<String>,
}

impl Accepted {
    /// The value of the header `name` (first occurrence, unfolded).
    pub fn header(&self, name: &str) -> Option<String> {
        let prefix = format!("{}:", name.to_ascii_lowercase());
        let mut lines = self.data.lines().take_while(|line| !line.is_empty());
        let mut value: Option<String> = None;
        for line in lines.by_ref() {
            match &mut value {
                Some(found) if line.starts_with([' ', '\t']) => found.push_str(line.trim_end()),
                Some(_) => break,
                None if line.to_ascii_lowercase().starts_with(&prefix) => {
                    value = Some(line[prefix.len()..].trim().to_owned());
                }
                None => {}
            }
        }
        value
    }
}

#[derive(Default)]
struct Seen {
    accepted: Vec<Accepted>,
    stalled: u32,
    ended: bool,
}

/// The running server; stopped on drop.
pub struct SmtpSink {
    child: Child,
    stdin: Option<ChildStdin>,
    port: u16,
    seen: Arc<(Mutex<Seen>, Condvar)>,
}

impl std::fmt::Debug for SmtpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSink")
            .field("port", &self.port)
            .finish()
    }
}

impl SmtpSink {
    /// A server on a free loopback port.
    ///
    /// # Panics
    ///
    /// When `aiosmtpd` is not installed (saying how to install it), or the
    /// server does not start within 30 s.
    #[track_caller]
    pub fn start(options: &SmtpOptions) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/smtp_sink.py");
        let mut command = crate::api_tools::command("python");
        command
            .arg("-u")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some((cert, key)) = &options.tls {
            command.arg("--tls").arg(cert).arg(key);
        }
        if let Some((user, password)) = &options.auth {
            command.arg("--auth").arg(user).arg(password);
        }
        if options.stall_first {
            command.arg("--stall-first");
        }
        let mut child = command.spawn().expect("start the SMTP server (aiosmtpd)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("the server's standard output");
        let seen: Arc<(Mutex<Seen>, Condvar)> = Arc::default();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let reader = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                let (lock, changed) = &*reader;
                let mut seen = lock.lock().unwrap_or_else(PoisonError::into_inner);
                match event["event"].as_str() {
                    Some("listening") => {
                        let _ = port_tx.send(event["port"].as_u64().unwrap_or_default());
                    }
                    Some("stalled") => seen.stalled += 1,
                    Some("accepted") => seen.accepted.push(Accepted {
                        mail_from: event["mail_from"].as_str().unwrap_or_default().to_owned(),
                        rcpt_tos: event["rcpt_tos"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|to| to.as_str().map(str::to_owned))
                            .collect(),
                        data: event["data"].as_str().unwrap_or_default().to_owned(),
                        tls: event["tls"].as_bool().unwrap_or_default(),
                        login: event["login"].as_str().map(str::to_owned),
                    }),
                    _ => {}
                }
                changed.notify_all();
            }
            let (lock, changed) = &*reader;
            lock.lock().unwrap_or_else(PoisonError::into_inner).ended = true;
            changed.notify_all();
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the SMTP server said which port it listens on within 30 s");
        Self {
            child,
            stdin,
            port: u16::try_from(port).expect("a port"),
            seen,
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The mails accepted so far.
    pub fn accepted(&self) -> Vec<Accepted> {
        self.lock().accepted.clone()
    }

    /// How many mails it left unanswered (`stall_first`).
    pub fn stalled(&self) -> u32 {
        self.lock().stalled
    }

    /// Waits up to `limit` until `done` holds of the accepted mails and
    /// the stall count; whether it did.
    pub fn wait_until(&self, limit: Duration, done: impl Fn(&[Accepted], u32) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let (lock, changed) = &*self.seen;
        let mut seen = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if done(&seen.accepted, seen.stalled) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || seen.ended {
                return false;
            }
            seen = changed
                .wait_timeout(seen, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        // Closing its standard input ends it; kill in case it hangs.
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
