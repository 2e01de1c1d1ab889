//! The HTTP/2 load generator: h2load (Debian's `nghttp2-client`), pinned
//! to its own core as wrk is, over TLS with `h2` the only protocol it
//! offers by ALPN (so a server that would not speak HTTP/2 fails the row
//! instead of being measured over HTTP/1.1), one stream at a time on each
//! connection, as each of wrk's connections carries one request at a time.
//!
//! h2load sends the same headers on every request, so it can carry a fixed
//! `Idempotency-Key` but not a new one per request.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::wrk::{Failures, Keys, Load, Outcome};

/// What one h2load run reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// The protocol ALPN chose (`Application protocol:`), if h2load said.
    pub(crate) protocol: Option<String>,
    pub(crate) per_second: f64,
    /// Requests answered in full with a 2xx or 3xx status.
    pub(crate) succeeded: u64,
    /// Requests that did not succeed, for whatever reason (h2load counts
    /// the errored, the timed-out and the 4xx and 5xx answers among them).
    pub(crate) failed: u64,
    /// Requests whose stream or connection broke.
    pub(crate) errored: u64,
    pub(crate) timeout: u64,
    /// Answers with a 4xx or 5xx status.
    pub(crate) refused: u64,
}

impl Report {
    /// The figures the report table reads.
    pub(crate) fn outcome(&self) -> Outcome {
        Outcome {
            requests: self.succeeded,
            per_second: self.per_second,
            failures: Failures::default(),
        }
    }

    /// Why the run of `what` is not a measurement, with the server's
    /// `trouble` (see `Server::trouble`): another protocol than h2, no
    /// request answered, or any request failed.
    pub(crate) fn refusal(&self, what: &str, trouble: impl FnOnce() -> String) -> Option<String> {
        let why = match self.protocol.as_deref() {
            Some("h2") => None,
            Some(other) => Some(format!("the server chose {other} by ALPN, not h2")),
            None => Some("no connection agreed on a protocol by ALPN, so none spoke h2".to_owned()),
        };
        let why = if let Some(why) = why {
            why
        } else if self.succeeded == 0 {
            "no request succeeded".to_owned()
        } else if self.failed + self.errored + self.timeout + self.refused > 0 {
            format!(
                "{} of {} requests failed ({} errored, {} timed out, {} answered 4xx/5xx)",
                self.failed,
                self.failed + self.succeeded,
                self.errored,
                self.timeout,
                self.refused
            )
        } else {
            return None;
        };
        Some(format!("{what}: {why}; not a measurement\n{}", trouble()))
    }
}

/// h2load's arguments for `load`, its body (if any) in `body_path`.
pub(crate) fn args(
    load: &Load<'_>,
    body_path: &Path,
    fixed_key: &str,
) -> Result<Vec<String>, String> {
    let mut args: Vec<String> = [
        "--npn-list=h2",
        "-t",
        &load.threads.to_string(),
        "-c",
        &load.connections.to_string(),
        "-m",
        "1",
        "-D",
        &load.seconds.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut header = |header: String| args.extend(["-H".to_owned(), header]);
    if load.post_json.is_some() {
        header("content-type: application/json".to_owned());
    }
    if let Some(cookie) = load.cookie {
        header(format!("cookie: {cookie}"));
    }
    match load.keys {
        Keys::None => {}
        Keys::Fixed => header(format!("idempotency-key: {fixed_key}")),
        Keys::Unique => {
            return Err(format!(
                "{}: h2load sends the same headers on every request, so it cannot send a new key each time",
                load.url
            ));
        }
    }
    if load.post_json.is_some() {
        args.push("-d".to_owned());
        args.push(body_path.display().to_string());
    }
    args.push(load.url.clone());
    Ok(args)
}

/// Runs h2load with `load` and reads its report.
pub(crate) fn run(load: &Load<'_>, body_path: &Path, fixed_key: &str) -> Result<Report, String> {
    let args = args(load, body_path, fixed_key)?;
    if let Some(body) = load.post_json {
        std::fs::write(body_path, body)
            .map_err(|e| format!("cannot write {}: {e}", body_path.display()))?;
    }
    let mut command = match load.core {
        Some(core) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &core.to_string(), "h2load"]);
            taskset
        }
        None => Command::new("h2load"),
    };
    let output = command
        .args(&args)
        .output()
        .map_err(|e| format!("cannot run h2load: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "h2load failed ({}): {}{}",
            output.status,
            text,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(&text).ok_or_else(|| format!("cannot read h2load's report:\n{text}"))
}

/// Reads h2load's text report: the rate from `finished in 5.00s, N req/s,
/// ...`, the counts from `requests: ...` and `status codes: ...`, the
/// protocol from `Application protocol: ...`. `None` when a figure the
/// bench checks is missing.
pub(crate) fn parse(report: &str) -> Option<Report> {
    let mut protocol = None;
    let mut per_second = None;
    let mut requests = None;
    let mut statuses = None;
    for line in report.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            // "5.00s, 54321.40 req/s, 5.12MB/s"
            per_second = rest
                .split(',')
                .find_map(|part| part.trim().strip_suffix(" req/s"))
                .and_then(|rate| rate.trim().parse::<f64>().ok());
        } else if let Some(rest) = line.strip_prefix("requests:") {
            requests = Some(counts(rest)?);
        } else if let Some(rest) = line.strip_prefix("status codes:") {
            statuses = Some(counts(rest)?);
        } else if let Some(rest) = line.strip_prefix("Application protocol:") {
            protocol = Some(rest.trim().to_owned());
        }
    }
    let (requests, statuses) = (requests?, statuses?);
    Some(Report {
        protocol,
        per_second: per_second?,
        succeeded: *requests.get("succeeded")?,
        failed: *requests.get("failed")?,
        errored: *requests.get("errored")?,
        timeout: *requests.get("timeout")?,
        refused: statuses.get("4xx")? + statuses.get("5xx")?,
    })
}

/// `271607 total, 0 failed, ...` as a map from each word to its count;
/// `None` if a part is not a count and a word.
fn counts(list: &str) -> Option<HashMap<&str, u64>> {
    list.split(',')
        .map(|part| {
            let mut words = part.split_whitespace();
            let count = words.next()?.parse().ok()?;
            Some((words.next()?, count))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of nghttp2 1.52's h2load as the bench starts it.
    const REPORT: &str = "starting benchmark...
spawning thread #0: 16 total client(s). Timing-based test with 0s of warm-up time and 5s of main duration for main thread.
spawning thread #1: 16 total client(s). Timing-based test with 0s of warm-up time and 5s of main duration for main thread.
Warm-up started for thread #0.
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Warm-up started for thread #1.
Warm-up phase is over for thread #1.
Main benchmark duration is started for thread #1.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_256_GCM_SHA384
Server Temp Key: X25519 253 bits
Application protocol: h2
Main benchmark duration is over for thread #0. Stopping all clients.
Main benchmark duration is over for thread #1. Stopping all clients.
Stopped all clients for thread #0
Stopped all clients for thread #1

finished in 5.00s, 41234.60 req/s, 3.11MB/s
requests: 206173 total, 206205 started, 206173 done, 206173 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 206173 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 15.55MB (16307402) total, 2.16MB (2268257) headers (space savings 92.16%), 12.19MB (12782726) data
                     min         max         mean         sd        +/- sd
time for request:      119us     10.96ms       759us       296us    79.37%
time for connect:     2.39ms      6.11ms      4.26ms      1.10ms    56.25%
time to 1st byte:     4.96ms      7.54ms      6.08ms       767us    62.50%
req/s           :    1264.53     1313.09     1288.59       12.43    65.63%
";

    #[test]
    fn reads_the_rate_the_counts_and_the_protocol() {
        let report = parse(REPORT).expect("a full report");
        assert!((report.per_second - 41_234.6).abs() < 1e-6);
        assert_eq!(report.succeeded, 206_173);
        assert_eq!(report.protocol.as_deref(), Some("h2"));
        assert_eq!(
            (
                report.failed,
                report.errored,
                report.timeout,
                report.refused
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(report.refusal("h2", || unreachable!("not asked")), None);
        assert_eq!(report.outcome().requests, 206_173);
    }

    #[test]
    fn failed_errored_and_refused_requests_fail_the_row() {
        let broken = REPORT
            .replace(
                "206173 succeeded, 0 failed, 0 errored, 0 timeout",
                "206160 succeeded, 13 failed, 3 errored, 1 timeout",
            )
            .replace("0 4xx, 0 5xx", "0 4xx, 9 5xx");
        let report = parse(&broken).expect("a full report");
        assert_eq!(
            report.refusal("Autumn, HTTP/2 (round 2)", || "it logged: 503".to_owned()),
            Some(
                "Autumn, HTTP/2 (round 2): 13 of 206173 requests failed (3 errored, 1 timed out, 9 answered 4xx/5xx); not a measurement\nit logged: 503"
                    .to_owned()
            )
        );
        let errored_only = REPORT.replace("0 errored", "2 errored");
        assert!(
            parse(&errored_only)
                .expect("a full report")
                .refusal("h2", String::new)
                .is_some()
        );
    }

    #[test]
    fn another_protocol_or_nothing_answered_fails_the_row() {
        let h1 = REPORT.replace("Application protocol: h2", "Application protocol: http/1.1");
        let refusal = parse(&h1).and_then(|r| r.refusal("h2", String::new));
        assert!(
            refusal.is_some_and(|r| r.contains("chose http/1.1 by ALPN, not h2")),
            "h1 refused"
        );
        // What h2load prints when no connection came up: no protocol line,
        // nothing succeeded.
        let nothing = "finished in 2.01ms, 0.00 req/s, 0B/s
requests: 32 total, 0 started, 0 done, 0 succeeded, 32 failed, 32 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx
";
        let refusal = parse(nothing).and_then(|r| r.refusal("h2", String::new));
        assert!(
            refusal.is_some_and(|r| r.contains("none spoke h2")),
            "nothing refused"
        );
    }

    #[test]
    fn a_report_without_its_counts_is_not_read() {
        let no_statuses: String = REPORT
            .lines()
            .filter(|line| !line.starts_with("status codes:"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(parse(&no_statuses), None);
        assert_eq!(parse("finished in 5.00s, 1.00 req/s, 0B/s\n"), None);
        assert_eq!(parse(&REPORT.replace("0 errored", "none errored")), None);
    }

    fn load(keys: Keys) -> Load<'static> {
        Load {
            url: "https://127.0.0.1:1/orders-off".into(),
            post_json: Some("{}"),
            keys,
            cookie: None,
            run_id: "r7".into(),
            threads: 2,
            connections: 32,
            seconds: 5,
            core: None,
        }
    }

    #[test]
    fn h2_only_one_stream_per_connection_and_the_fixed_key() {
        let fixed = args(&load(Keys::Fixed), Path::new("/tmp/o.json"), "k1").expect("a load");
        let joined = fixed.join(" ");
        assert!(
            joined.starts_with("--npn-list=h2 -t 2 -c 32 -m 1 -D 5 "),
            "{joined}"
        );
        assert!(joined.contains("-H idempotency-key: k1"), "{joined}");
        assert!(
            joined.ends_with("-d /tmp/o.json https://127.0.0.1:1/orders-off"),
            "{joined}"
        );
        assert!(args(&load(Keys::Unique), Path::new("/tmp/o.json"), "k1").is_err());
    }
}
