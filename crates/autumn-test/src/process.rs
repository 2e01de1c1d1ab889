//! The app's own built binary, serving on a free port, for tests that need a
//! real socket (a browser, a second process, the startup path).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use crate::client::TestClient;

/// How many of the last standard-error lines a failed start reports.
const STDERR_KEPT: usize = 50;

/// A running server process, killed when dropped.
///
/// ```no_run
/// use std::process::Command;
/// use autumn_test::ServerProcess;
///
/// // In an integration test of package `orders`:
/// // let server = ServerProcess::start(Command::new(env!("CARGO_BIN_EXE_orders")));
/// let server = ServerProcess::start(Command::new("target/debug/orders"));
/// let orders = server.url("/orders");
/// # let _ = orders;
/// ```
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    base: String,
}

impl ServerProcess {
    /// Starts `command` on a free loopback port (`AUTUMN_SERVER__PORT=0`),
    /// waits for the `listening on http://...` line it logs, and keeps
    /// draining its log so it never blocks on a full pipe. The command's
    /// other settings (environment, working directory) are kept.
    ///
    /// # Panics
    ///
    /// When the process cannot start or exits before logging its address.
    #[track_caller]
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .env("AUTUMN_SERVER__PORT", "0")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
        // Startup failures are one line on standard error: kept, so a
        // failed start says why.
        // Only the last lines, so a long-running server's errors cannot
        // grow without bound.
        let stderr = child.stderr.take().map(|stderr| {
            std::thread::spawn(move || {
                let mut last = std::collections::VecDeque::new();
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if last.len() == STDERR_KEPT {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
                Vec::from(last)
            })
        });
        let Some(stdout) = child.stdout.take() else {
            panic!("no log from {command:?}");
        };
        let mut lines = BufReader::new(stdout).lines();
        let mut logged = Vec::new();
        let base = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                let status = child.wait().map(|status| status.to_string());
                let errors = stderr
                    .and_then(|reader| reader.join().ok())
                    .unwrap_or_default();
                panic!(
                    "{command:?} exited ({status:?}) before logging its address; its log:\n{}\n{}",
                    logged.join("\n"),
                    errors.join("\n")
                );
            };
            if let Some(at) = line.find("listening on http://") {
                let url = &line[at + "listening on ".len()..];
                let end = url
                    .find(|c: char| c.is_whitespace() || c.is_control())
                    .unwrap_or(url.len());
                break url[..end].trim_end_matches('/').to_owned();
            }
            logged.push(line);
        };
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, base }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A client that sends its requests to this server over a real socket,
    /// with the same API as [`TestApp`](crate::TestApp)'s: paths are
    /// relative to the server, cookies the server sets are kept and sent
    /// back, [`new_browser`](TestClient::new_browser) starts an empty
    /// cookie jar. Requests need a tokio runtime (an async test).
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use autumn_test::ServerProcess;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // In an integration test of package `orders`:
    /// // let server = ServerProcess::start(Command::new(env!("CARGO_BIN_EXE_orders")));
    /// let server = ServerProcess::start(Command::new("target/debug/orders"));
    /// let client = server.client();
    /// let created = client
    ///     .post("/orders")
    ///     .header("idempotency-key", "k1")
    ///     .json(&serde_json::json!({"item": "widget", "qty": 2}))
    ///     .send()
    ///     .await;
    /// created.assert_status(201);
    /// # }
    /// ```
    pub fn client(&self) -> TestClient {
        TestClient::over_http(&self.base)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
