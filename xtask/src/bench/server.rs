//! One benchmark server as its own process, pinned to a core, stopped on
//! drop; its CPU time read from `/proc`.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server gets to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running server, killed on drop.
pub(crate) struct Server {
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    child: Child,
    /// Where its standard output (its log) goes, removed on drop.
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.log);
    }
}

impl Server {
    /// Starts `binary` with `env`, on `core` when given, listening on a free
    /// loopback port passed as `PORT` and `AUTUMN_SERVER__PORT`.
    pub(crate) fn start(
        name: &'static str,
        binary: &Path,
        env: &[(&str, String)],
        core: Option<usize>,
    ) -> Result<Self, String> {
        let port = crate::http::free_port()?;
        let log = std::env::temp_dir().join(format!("autumn-bench-{port}.log"));
        // Appended to, so that emptying it between rows (see `clear_log`)
        // does not leave the server writing at its old offset.
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|file| file.set_len(0).map(|()| file))
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut command = match core {
            Some(core) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &core.to_string()]).arg(binary);
                taskset
            }
            None => Command::new(binary),
        };
        command
            .env("PORT", port.to_string())
            .env("AUTUMN_SERVER__HOST", "127.0.0.1")
            .env("AUTUMN_SERVER__PORT", port.to_string())
            .stdin(Stdio::null())
            // The access log is written, as in production, to a file
            // nobody reads unless a run fails, emptied before each row (a
            // whole run would leave gigabytes): a pipe the bench drained
            // would cost the bench's core.
            .stdout(log_file)
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut server = Self {
            name,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            log,
        };
        server.wait_until_accepting()?;
        Ok(server)
    }

    fn wait_until_accepting(&mut self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut why = String::new();
                if let Some(mut stderr) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut why);
                }
                return Err(format!("{} exited ({status}) at start:\n{why}", self.name));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "{} did not accept connections on {} within {}s",
            self.name,
            self.addr,
            START_TIMEOUT.as_secs()
        ))
    }

    /// Empties the log, so that it holds the next row's lines only.
    pub(crate) fn clear_log(&self) -> Result<(), String> {
        fs::OpenOptions::new()
            .write(true)
            .open(&self.log)
            .and_then(|file| file.set_len(0))
            .map_err(|e| format!("cannot empty {}: {e}", self.log.display()))
    }

    /// What a failed run needs explained: the first few warnings, errors
    /// and access lines with a status of 400 or more in the server's log.
    pub(crate) fn trouble(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|line| troubling(line)).take(8).collect();
        if lines.is_empty() {
            format!("{} logged no warning, error or failed request", self.name)
        } else {
            format!("{} logged:\n  {}", self.name, lines.join("\n  "))
        }
    }

    /// CPU time the process has used so far (user + system).
    pub(crate) fn cpu(&self) -> Result<Duration, String> {
        cpu_of(self.child.id())
    }

    /// CPU time the process has used so far, in user space and in the
    /// kernel apart.
    pub(crate) fn cpu_split(&self) -> Result<CpuSplit, String> {
        cpu_split_of(self.child.id())
    }
}

/// A warning, an error, or an access line with a status of 400 or more.
fn troubling(line: &str) -> bool {
    line.contains(" WARN ")
        || line.contains(" ERROR ")
        || line
            .split_once(" status=")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|status| status.parse::<u16>().ok())
            .is_some_and(|status| status >= 400)
}

/// A process's CPU time in user space and in the kernel. Apart, because
/// a server on loopback spends more than half of each request in the
/// kernel's TCP code, which a framework barely changes: the user share is
/// what the framework decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuSplit {
    pub(crate) user: Duration,
    pub(crate) system: Duration,
}

impl CpuSplit {
    pub(crate) fn saturating_sub(self, earlier: Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// CPU time (user + system) of process `pid` and its threads, from
/// `/proc/PID/stat`, in clock ticks of 10 ms.
pub(crate) fn cpu_of(pid: u32) -> Result<Duration, String> {
    cpu_split_of(pid).map(|split| split.user + split.system)
}

/// [`cpu_of`], user and system apart.
pub(crate) fn cpu_split_of(pid: u32) -> Result<CpuSplit, String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    ticks_in(&stat)
        .map(|(user, system)| CpuSplit {
            user: Duration::from_millis(user * 10),
            system: Duration::from_millis(system * 10),
        })
        .ok_or_else(|| format!("cannot read the CPU times in /proc/{pid}/stat"))
}

/// utime and stime of a `/proc/PID/stat` line. The command name may hold
/// spaces and parentheses, so the fields are counted after its last `)`.
fn ticks_in(stat: &str) -> Option<(u64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // After the name: state (3), ... utime is field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trouble_is_a_warning_an_error_or_a_failed_request() {
        let access = |status: u16| {
            format!(
                "2026-12-01T00:00:00.000001Z  INFO autumn::access: POST /orders {status} 0.100ms method=POST path=/orders status={status} latency_ms=0.100 request_id=ab"
            )
        };
        assert!(!troubling(&access(201)));
        assert!(!troubling(&access(399)));
        assert!(troubling(&access(503)));
        assert!(troubling(
            "2026-12-01T00:00:00.000001Z  WARN autumn_idempotency: slow"
        ));
        assert!(troubling(
            "2026-12-01T00:00:00.000001Z ERROR autumn_core: broken"
        ));
        assert!(!troubling(
            "2026-12-01T00:00:00.000001Z  INFO autumn_core: status=fine"
        ));
    }

    #[test]
    fn cpu_ticks_are_utime_and_stime_even_with_odd_names() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 42 0 0 20 0 3 0 99 1 2";
        assert_eq!(ticks_in(stat), Some((731, 42)));
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(cpu_of(std::process::id()).is_ok());
    }
}
