//! The outside load generator: wrk, pinned to its own core, with a Lua
//! script that sets the body and, per request, the `Idempotency-Key`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// Which `Idempotency-Key` each request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// None (a GET).
    None,
    /// The same key on every request: after the first, each one is a replay.
    Fixed,
    /// A new key on every request: each one is a first run.
    Unique,
}

/// One load: what to send and how hard.
#[derive(Debug, Clone)]
pub(crate) struct Load<'a> {
    pub(crate) url: String,
    pub(crate) post_json: Option<&'a str>,
    pub(crate) keys: Keys,
    /// A `Cookie` header every request carries: a returning visitor.
    pub(crate) cookie: Option<&'a str>,
    /// Makes unique keys unique across runs and servers.
    pub(crate) run_id: String,
    pub(crate) threads: u32,
    pub(crate) connections: u32,
    pub(crate) seconds: u32,
    pub(crate) core: Option<usize>,
}

/// What one wrk run reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) requests: u64,
    pub(crate) per_second: f64,
    /// Responses outside 2xx/3xx, and connect/read/write/timeout errors:
    /// a run with any is not a measurement.
    pub(crate) failures: Failures,
}

/// What failed in a run, by kind, as wrk counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Failures {
    pub(crate) connect: u64,
    pub(crate) read: u64,
    pub(crate) write: u64,
    /// No response within wrk's 2 s.
    pub(crate) timeout: u64,
    /// Answered outside 2xx/3xx.
    pub(crate) status: u64,
}

impl Failures {
    pub(crate) fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.status
    }
}

impl Outcome {
    /// Why the run of `what` is not a measurement, with the server's
    /// `trouble` (see `Server::trouble`), when any request failed.
    pub(crate) fn refusal(&self, what: &str, trouble: impl FnOnce() -> String) -> Option<String> {
        (self.failures.total() > 0).then(|| {
            format!(
                "{what}: {} of {} requests failed ({}); not a measurement\n{}",
                self.failures.total(),
                self.requests,
                self.failures,
                trouble()
            )
        })
    }
}

impl std::fmt::Display for Failures {
    /// `read 2, timeout 1, not 2xx/3xx 7`: the kinds that occurred.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds = [
            ("connect", self.connect),
            ("read", self.read),
            ("write", self.write),
            ("timeout", self.timeout),
            ("not 2xx/3xx", self.status),
        ];
        let mut first = true;
        for (kind, count) in kinds.into_iter().filter(|(_, count)| *count > 0) {
            write!(f, "{}{kind} {count}", if first { "" } else { ", " })?;
            first = false;
        }
        Ok(())
    }
}

/// The Lua script for `load`.
pub(crate) fn script(load: &Load<'_>, fixed_key: &str) -> String {
    let mut lua = String::new();
    match load.post_json {
        Some(body) => {
            let _ = writeln!(lua, "wrk.method = \"POST\"");
            let _ = writeln!(lua, "wrk.body = [[{body}]]");
            let _ = writeln!(lua, "wrk.headers[\"Content-Type\"] = \"application/json\"");
        }
        None => {
            let _ = writeln!(lua, "wrk.method = \"GET\"");
        }
    }
    if let Some(cookie) = load.cookie {
        let _ = writeln!(lua, "wrk.headers[\"Cookie\"] = \"{cookie}\"");
    }
    match load.keys {
        Keys::None => {}
        Keys::Fixed => {
            let _ = writeln!(lua, "wrk.headers[\"Idempotency-Key\"] = \"{fixed_key}\"");
        }
        Keys::Unique => {
            // One Lua state per wrk thread: `setup` numbers them, so no two
            // threads make the same key.
            lua.push_str(&format!(
                r#"local thread_count = 0
function setup(thread)
  thread_count = thread_count + 1
  thread:set("tid", thread_count)
end
local counter = 0
function request()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = "{run}-" .. tid .. "-" .. counter
  return wrk.format()
end
"#,
                run = load.run_id
            ));
        }
    }
    lua
}

/// Runs wrk with `load` and reads its report.
pub(crate) fn run(load: &Load<'_>, script_path: &Path, fixed_key: &str) -> Result<Outcome, String> {
    std::fs::write(script_path, script(load, fixed_key))
        .map_err(|e| format!("cannot write {}: {e}", script_path.display()))?;
    let mut command = match load.core {
        Some(core) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &core.to_string(), "wrk"]);
            taskset
        }
        None => Command::new("wrk"),
    };
    command.args([
        "-t",
        &load.threads.to_string(),
        "-c",
        &load.connections.to_string(),
        "-d",
        &format!("{}s", load.seconds),
        "-s",
    ]);
    command.arg(script_path).arg(&load.url);
    let output = command
        .output()
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk failed ({}): {}{}",
            output.status,
            text,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(&text).ok_or_else(|| format!("cannot read wrk's report:\n{text}"))
}

/// Reads wrk's text report.
pub(crate) fn parse(report: &str) -> Option<Outcome> {
    let mut requests = None;
    let mut per_second = None;
    let mut failures = Failures::default();
    for line in report.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            per_second = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            failures.status = rest.trim().parse::<u64>().ok()?;
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for part in rest.split(',') {
                let mut words = part.split_whitespace();
                let (kind, count) = (words.next()?, words.next()?.parse::<u64>().ok()?);
                match kind {
                    "connect" => failures.connect = count,
                    "read" => failures.read = count,
                    "write" => failures.write = count,
                    _ => failures.timeout += count,
                }
            }
        } else if line.contains(" requests in ") {
            requests = line.split_whitespace().next()?.parse().ok();
        }
    }
    Some(Outcome {
        requests: requests?,
        per_second: per_second?,
        failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 10s test @ http://127.0.0.1:40000/orders
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   250.00us  100.00us   5.00ms   90.00%
    Req/Sec    60.00k     2.00k   70.00k    80.00%
  1200345 requests in 10.00s, 300.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec: 120034.50
Transfer/sec:     30.00MB
";

    #[test]
    fn reads_throughput_count_and_every_kind_of_failure() {
        let outcome = parse(REPORT).expect("a full report");
        assert_eq!(outcome.requests, 1_200_345);
        assert!((outcome.per_second - 120_034.5).abs() < 1e-6);
        assert_eq!(outcome.failures.total(), 10);
        assert_eq!(
            outcome.failures.to_string(),
            "read 2, timeout 1, not 2xx/3xx 7"
        );
    }

    #[test]
    fn a_run_with_failures_is_refused_with_their_kinds_and_the_servers_log() {
        let outcome = parse(REPORT).expect("a full report");
        let refusal = outcome
            .refusal("replay (round 5)", || "it logged: 409".to_owned())
            .expect("refused");
        assert_eq!(
            refusal,
            "replay (round 5): 10 of 1200345 requests failed (read 2, timeout 1, not 2xx/3xx 7); not a measurement\nit logged: 409"
        );
        let clean = Outcome {
            failures: Failures::default(),
            ..outcome
        };
        assert_eq!(clean.refusal("replay", || unreachable!("not asked")), None);
    }

    #[test]
    fn a_clean_report_has_no_failures() {
        let clean: String = REPORT
            .lines()
            .filter(|l| !l.contains("errors") && !l.contains("Non-2xx"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(parse(&clean).map(|o| o.failures.total()), Some(0));
    }

    #[test]
    fn a_report_without_throughput_is_refused() {
        assert_eq!(parse("  2 threads and 32 connections\n"), None);
    }

    #[test]
    fn unique_keys_differ_per_thread_and_run() {
        let load = Load {
            url: "http://127.0.0.1:1/orders".into(),
            post_json: Some("{}"),
            keys: Keys::Unique,
            cookie: None,
            run_id: "r7".into(),
            threads: 2,
            connections: 2,
            seconds: 1,
            core: None,
        };
        let lua = script(&load, "unused");
        assert!(!lua.contains("Cookie"), "{lua}");
        let returning = Load {
            cookie: Some("__Host-autumn_session=abc"),
            ..load.clone()
        };
        assert!(
            script(&returning, "unused")
                .contains("wrk.headers[\"Cookie\"] = \"__Host-autumn_session=abc\""),
            "a returning visitor sends its cookie"
        );
        assert!(lua.contains("\"r7-\" .. tid .. \"-\" .. counter"), "{lua}");
        assert!(lua.contains("thread:set(\"tid\""), "{lua}");
    }
}
