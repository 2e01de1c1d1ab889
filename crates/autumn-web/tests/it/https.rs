//! The server's own HTTPS and HTTP/2, over real sockets: certificates made
//! at run time by a CA of the test's own, curl (built with nghttp2) as an
//! outside client, and hyper's HTTP/2 client for many streams on one
//! connection.
//!
//! Covered: HTTP/1.1 and HTTP/2 by ALPN; a certificate renewed on disk
//! served without a restart, a half-written renewal not, and one picked up
//! at once on SIGHUP; TLS 1.2 accepted, 1.1 and 1.0 refused; one-line startup
//! errors naming the key; the redirect port; h2c refused with GOAWAY when
//! off and served when on; 100 duplicate keyed streams on one connection
//! run the handler once; an idle HTTP/2 connection is closed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use autumn_testkit::tls::TestCa;
use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[get("/hello")]
async fn hello() -> &'static str {
    "hello"
}

/// Counts its runs under the `run` header's name, slowly enough that
/// duplicates arrive while it runs.
#[post("/orders")]
async fn create(headers: HeaderMap) -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, Ordering::SeqCst);
    let tag = headers
        .get("x-test")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned();
    RUN_COUNTS.lock().expect("lock").push(tag);
    tokio::time::sleep(Duration::from_millis(100)).await;
    (StatusCode::CREATED, format!("order {run}"))
}

/// The `x-test` tag of every run, so parallel tests count only their own.
static RUN_COUNTS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn runs_tagged(tag: &str) -> usize {
    RUN_COUNTS
        .lock()
        .expect("lock")
        .iter()
        .filter(|seen| *seen == tag)
        .count()
}

/// A served app and the means to stop it.
struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), autumn_web::LaunchError>>,
}

impl Server {
    async fn start(toml: &str) -> Self {
        let config = AutumnConfig::from_toml_str(toml).expect("test configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(
            autumn_web::app()
                .routes(routes![hello, create])
                .idempotent()
                .with_config(config)
                .serve(listener, async move {
                    let _ = stopped.await;
                }),
        );
        Self {
            address,
            stop: Some(stop),
            served,
        }
    }

    fn https(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.address.port())
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
    }
}

/// `[server.tls]` for `cert`/`key`, with `extra` TOML after it.
pub(super) fn tls_toml(cert: &Path, key: &Path, extra: &str) -> String {
    format!(
        "[server.tls]\ncert_file = {:?}\nkey_file = {:?}\n{extra}",
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// curl with `args`: (exit success, stdout, stderr). Fails the test saying
/// how to install curl when it is missing.
fn curl(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run curl ({error}): install it (apt-get install curl), or run `cargo xtask services`")
        });
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs a blocking curl off the runtime's threads.
async fn curl_async(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args)
    })
    .await
    .expect("curl task")
}

pub(super) fn client_config(ca: &TestCa, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca.ca_file()).expect("CA file");
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let provider = Arc::new(autumn_web::base::tls::ring_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|proto| proto.to_vec()).collect();
    Arc::new(config)
}

use rustls::pki_types::pem::PemObject as _;

/// A TLS connection to the server as `localhost`.
async fn tls_connect(
    address: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(address).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// The leaf certificate the server presents now.
async fn served_certificate(address: SocketAddr, ca: &TestCa) -> Vec<u8> {
    let stream = tls_connect(address, client_config(ca, &[b"http/1.1"]))
        .await
        .expect("a TLS handshake");
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.as_ref().to_vec())
        .expect("a server certificate")
}

fn leaf_der(path: &Path) -> Vec<u8> {
    let pem = std::fs::read(path).expect("certificate file");
    rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .next()
        .expect("a certificate")
        .expect("PEM")
        .as_ref()
        .to_vec()
}

/// Puts `from`'s content at `to` as a renewal does: written aside, then
/// renamed over it.
fn replace(from: &Path, to: &Path) {
    let aside = to.with_extension("new");
    std::fs::copy(from, &aside).expect("copy");
    std::fs::rename(&aside, to).expect("rename");
}

/// A directory with the served certificate and key, copied from `ca`'s.
pub(super) fn served_files(ca: &TestCa) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let files = ca.server_cert(&["localhost"]);
    let cert = dir.path().join("fullchain.pem");
    let key = dir.path().join("privkey.pem");
    std::fs::copy(&files.cert, &cert).expect("copy cert");
    std::fs::copy(&files.key, &key).expect("copy key");
    (dir, cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_http1_and_http2_chosen_by_alpn() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&tls_toml(&cert, &key, "")).await;
    let ca_file = ca.ca_file().display().to_string();
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let (ok, out, err) = curl_async(vec![
            "--cacert".into(),
            ca_file.clone(),
            flag.into(),
            "--write-out".into(),
            " %{http_version} %{response_code}".into(),
            server.https("/hello"),
        ])
        .await;
        assert!(ok, "curl {flag}: {err}");
        assert_eq!(out, format!("hello {version} 200"), "curl {flag}");
    }
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let (ok, out, _) = curl_async(vec![format!(
        "http://localhost:{}/hello",
        server.address.port()
    )])
    .await;
    assert!(!ok && !out.contains("hello"), "{out}");
    // What it negotiates by default is TLS 1.3.
    let stream = tls_connect(server.address, client_config(&ca, &[b"h2"]))
        .await
        .expect("handshake");
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    drop(stream);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_renewed_on_disk_is_served_without_a_restart_and_a_broken_one_is_not() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&tls_toml(&cert, &key, "reload_interval_ms = 20\n")).await;
    let first = leaf_der(&cert);
    assert_eq!(served_certificate(server.address, &ca).await, first);

    // A renewal caught half-written: the certificate in use stays.
    std::fs::write(cert.with_extension("new"), "-----BEGIN CERT").expect("write");
    std::fs::rename(cert.with_extension("new"), &cert).expect("rename");
    for _ in 0..10 {
        // Each handshake spans checks of the files (every 20 ms).
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert_eq!(served_certificate(server.address, &ca).await, first);
    }

    // The whole renewal is picked up by a running server.
    let renewed = ca.server_cert(&["localhost"]);
    replace(&renewed.key, &key);
    replace(&renewed.cert, &cert);
    let second = leaf_der(&cert);
    assert_ne!(first, second);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let served = served_certificate(server.address, &ca).await;
        if served == second {
            break;
        }
        assert_eq!(served, first, "only the old or the new certificate");
        assert!(Instant::now() < deadline, "the renewal was never served");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (ok, out, err) = curl_async(vec![
        "--cacert".into(),
        ca.ca_file().display().to_string(),
        server.https("/hello"),
    ])
    .await;
    assert!(ok && out == "hello", "{out} {err}");
    server.stop().await;
}

/// Sends this process SIGHUP, as an operator does after renewing a
/// certificate. Every TLS server in the test binary gets it, and each
/// reloads its own files: nothing changes for one whose files did not.
#[cfg(unix)]
fn hang_up() {
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP)
        .expect("SIGHUP sent to this process");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_makes_the_next_handshake_present_the_renewed_certificate() {
    // A handler of the test's own, before any signal: were the server's
    // not in place yet, SIGHUP's default action would end the whole test
    // binary; with this one, such a server would only miss the signal, and
    // this test fail.
    let _guard = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .expect("listen for SIGHUP");
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    // Files never checked on a timer: only the signal can reload them.
    let server = Server::start(&tls_toml(&cert, &key, "reload_interval_ms = 0\n")).await;
    let first = leaf_der(&cert);
    // Served: the server's listener for SIGHUP is in place (it is before
    // the first accept).
    assert_eq!(served_certificate(server.address, &ca).await, first);

    let renewed = ca.server_cert(&["localhost"]);
    replace(&renewed.key, &key);
    replace(&renewed.cert, &cert);
    let second = leaf_der(&cert);
    assert_ne!(first, second);
    assert_eq!(
        served_certificate(server.address, &ca).await,
        first,
        "renewed files are not read without a signal when reload_interval_ms = 0"
    );

    hang_up();
    let address = server.address;
    autumn_testkit::eventually_async(
        "the certificate renewed on disk to be served after SIGHUP",
        Duration::from_secs(10),
        || {
            let (ca, first, second) = (&ca, &first, &second);
            async move {
                let served = served_certificate(address, ca).await;
                assert!(
                    served == *first || served == *second,
                    "only the old or the new certificate"
                );
                served == *second
            }
        },
    )
    .await;
    server.stop().await;
}

/// A TLS `ClientHello` record offering only `version` (no
/// `supported_versions` extension, as TLS 1.0 to 1.2 clients send it), with
/// an ECDHE-ECDSA suite of each era, for `localhost`.
fn client_hello(version: [u8; 2]) -> Vec<u8> {
    fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend_from_slice(&u16::try_from(data.len()).expect("short").to_be_bytes());
        out.extend_from_slice(data);
        out
    }
    fn with_len(len_bytes: usize, data: &[u8]) -> Vec<u8> {
        let len = u32::try_from(data.len()).expect("short").to_be_bytes();
        let mut out = len[4 - len_bytes..].to_vec();
        out.extend_from_slice(data);
        out
    }
    let name = b"localhost";
    let mut server_name = vec![0];
    server_name.extend(with_len(2, name));
    let mut extensions = Vec::new();
    extensions.extend(extension(0x0000, &with_len(2, &server_name)));
    // supported_groups: x25519, secp256r1.
    extensions.extend(extension(0x000a, &with_len(2, &[0x00, 0x1d, 0x00, 0x17])));
    // ec_point_formats: uncompressed.
    extensions.extend(extension(0x000b, &[1, 0]));
    // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256.
    extensions.extend(extension(0x000d, &with_len(2, &[0x04, 0x03, 0x08, 0x04])));
    let mut body = version.to_vec();
    body.extend_from_slice(&[7; 32]);
    // No session id.
    body.push(0);
    // TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (TLS 1.2) and
    // TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA (TLS 1.0 and 1.1).
    body.extend(with_len(2, &[0xc0, 0x2b, 0xc0, 0x09]));
    // Compression: none.
    body.extend_from_slice(&[1, 0]);
    body.extend(with_len(2, &extensions));
    let mut handshake = vec![0x01];
    handshake.extend(with_len(3, &body));
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(with_len(2, &handshake));
    record
}

/// What the server first answers `hello` with: (record type, first byte of
/// its content and the second: a handshake's type, an alert's level and
/// description).
async fn first_answer(address: SocketAddr, hello: &[u8]) -> (u8, u8, u8) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(hello).await.expect("send the ClientHello");
    let mut head = [0_u8; 7];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head))
        .await
        .expect("an answer within 5 s")
        .expect("a record");
    (head[0], head[5], head[6])
}

/// openssl's `s_client` at `version` (`-tls1_2`, `-tls1_1`, `-tls1`), with
/// every suite of that version allowed: whether the handshake succeeded,
/// and what it printed.
fn openssl_handshake(address: SocketAddr, version: &str) -> (bool, String) {
    let output = Command::new("openssl")
        .args(["s_client", "-connect", &address.to_string()])
        .args(["-servername", "localhost", version])
        // OpenSSL 3 refuses to offer TLS 1.0/1.1 itself below level 0:
        // the server must be what says no.
        .args(["-cipher", "DEFAULT@SECLEVEL=0"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_is_accepted_and_tls_1_1_and_1_0_are_refused() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&tls_toml(&cert, &key, "")).await;

    // A client that speaks TLS 1.2 only.
    let mut roots = rustls::RootCertStore::empty();
    for der in rustls::pki_types::CertificateDer::pem_file_iter(ca.ca_file()).expect("CA file") {
        roots.add(der.expect("CA PEM")).expect("CA certificate");
    }
    let tls12_only = rustls::ClientConfig::builder_with_provider(Arc::new(
        autumn_web::base::tls::ring_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .expect("TLS 1.2")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let stream = tls_connect(server.address, Arc::new(tls12_only))
        .await
        .expect("a TLS 1.2 handshake");
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    drop(stream);

    // The same hello at TLS 1.2 gets a ServerHello (handshake type 2): the
    // hellos below differ in their version only.
    let (record, kind, _) = first_answer(server.address, &client_hello([3, 3])).await;
    assert_eq!((record, kind), (0x16, 0x02), "a ServerHello to TLS 1.2");
    // TLS 1.1 and 1.0: a fatal (2) protocol_version (70) alert (21).
    for (name, version) in [("TLS 1.1", [3, 2]), ("TLS 1.0", [3, 1])] {
        assert_eq!(
            first_answer(server.address, &client_hello(version)).await,
            (0x15, 2, 70),
            "{name} is refused with protocol_version"
        );
    }

    // The same, seen by an outside client, where openssl is installed.
    if Command::new("openssl").arg("version").output().is_ok() {
        let address = server.address;
        let answers = tokio::task::spawn_blocking(move || {
            ["-tls1_2", "-tls1_1", "-tls1"].map(|version| openssl_handshake(address, version))
        })
        .await
        .expect("openssl task");
        let [(ok, out), refused @ ..] = answers;
        assert!(ok && out.contains("TLSv1.2"), "openssl -tls1_2: {out}");
        // Refused by the server's fatal alert: OpenSSL's TLS 1.0 and 1.1
        // hellos carry no signature_algorithms, which rustls answers with
        // handshake_failure (40) before it looks at the version; a hello
        // with them gets protocol_version (70), as above.
        for (ok, out) in refused {
            assert!(!ok, "{out}");
            assert!(
                out.contains("Cipher is (NONE)"),
                "nothing negotiated: {out}"
            );
            assert!(
                out.contains("SSL alert number 40") || out.contains("SSL alert number 70"),
                "{out}"
            );
        }
    }
    server.stop().await;
}

/// The launch error of serving `toml`, in one line.
async fn launch_error(toml: &str) -> String {
    let config = match AutumnConfig::from_toml_str(toml) {
        Ok(config) => config,
        Err(error) => return error.to_string(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let error = autumn_web::app()
        .routes(routes![hello])
        .with_config(config)
        .serve(listener, std::future::pending())
        .await
        .expect_err("the launch fails")
        .to_string();
    assert!(!error.contains('\n'), "one line: {error}");
    error
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_stop_startup_in_one_line_naming_the_key() {
    let ca = TestCa::new();
    let (dir, cert, key) = served_files(&ca);
    let missing = dir.path().join("missing.pem");
    let error = launch_error(&tls_toml(&missing, &key, "")).await;
    assert!(
        error.starts_with(&format!("server.tls.cert_file ({})", missing.display())),
        "{error}"
    );
    assert!(error.contains("cannot read it"), "{error}");

    // The key of another certificate.
    let other = ca.server_cert(&["localhost"]);
    let error = launch_error(&tls_toml(&cert, &other.key, "")).await;
    assert!(error.starts_with("server.tls.key_file ("), "{error}");
    assert!(
        error.contains("cannot be used with the certificate"),
        "{error}"
    );

    // A certificate file with no certificate in it.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "nothing here\n").expect("write");
    let error = launch_error(&tls_toml(&empty, &key, "")).await;
    assert!(error.contains("holds no PEM certificate"), "{error}");

    // Half a pair.
    let error = launch_error(&format!(
        "[server.tls]\ncert_file = {:?}\n",
        cert.display().to_string()
    ))
    .await;
    assert!(error.contains("server.tls.key_file"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redirect_port_sends_plain_http_clients_to_https_keeping_path_and_query() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let redirect_port = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port")
        .local_addr()
        .expect("address")
        .port();
    let server = Server::start(&tls_toml(
        &cert,
        &key,
        &format!("redirect_port = {redirect_port}\n"),
    ))
    .await;
    let plain = format!("http://localhost:{redirect_port}/hello?page=2");
    let mut answer = (false, String::new(), String::new());
    // The redirect listener is bound before the server serves; give the
    // spawned server a moment to get there.
    for _ in 0..100 {
        answer = curl_async(vec![
            "--write-out".into(),
            "%{response_code} %{redirect_url}".into(),
            "--output".into(),
            "/dev/null".into(),
            plain.clone(),
        ])
        .await;
        if answer.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answer.0, "{}", answer.2);
    assert_eq!(
        answer.1,
        format!("308 {}", server.https("/hello?page=2")),
        "{answer:?}"
    );
    // Followed, it arrives.
    let (ok, out, err) = curl_async(vec![
        "--location".into(),
        "--cacert".into(),
        ca.ca_file().display().to_string(),
        plain,
    ])
    .await;
    assert!(ok && out == "hello", "{out} {err}");
    server.stop().await;
}

/// The frames a server sends a client that only sent the HTTP/2 preface:
/// (type, error code of a GOAWAY) for each.
async fn frames_after_preface(address: SocketAddr) -> Vec<(u8, Option<u32>)> {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("write the preface");
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes the connection")
        .expect("read");
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 9 {
        let length = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let kind = rest[3];
        let payload = &rest[9..(9 + length).min(rest.len())];
        let code = (kind == 0x7 && payload.len() >= 8)
            .then(|| u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
        frames.push((kind, code));
        rest = &rest[(9 + length).min(rest.len())..];
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_is_refused_with_goaway_http_1_1_required_when_off_and_served_when_on() {
    let off = Server::start("").await;
    let frames = frames_after_preface(off.address).await;
    // SETTINGS, then GOAWAY with HTTP_1_1_REQUIRED (0xd): never silence.
    assert_eq!(frames, vec![(0x4, None), (0x7, Some(0xd))]);
    // HTTP/1.1 on the same port is untouched.
    let (ok, out, err) = curl_async(vec![format!("http://{}/hello", off.address)]).await;
    assert!(ok && out == "hello", "{out} {err}");
    off.stop().await;

    let on = Server::start("[server.http2]\nh2c = true\n").await;
    let (ok, out, err) = curl_async(vec![
        "--http2-prior-knowledge".into(),
        "--write-out".into(),
        " %{http_version}".into(),
        format!("http://{}/hello", on.address),
    ])
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "hello 2");
    on.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_duplicate_keyed_streams_on_one_http2_connection_run_the_handler_once() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&tls_toml(
        &cert,
        &key,
        "[server.http2]\nmax_concurrent_streams = 100\n",
    ))
    .await;
    let stream = tls_connect(server.address, client_config(&ca, &[b"h2"]))
        .await
        .expect("handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    let tag = format!("h2-{}", uuid::Uuid::new_v4().simple());
    let mut streams = Vec::new();
    for _ in 0..100 {
        let mut sender = sender.clone();
        let tag = tag.clone();
        let uri = server.https("/orders");
        streams.push(tokio::spawn(async move {
            let request = http::Request::post(uri)
                .header("idempotency-key", tag.as_str())
                .header("x-test", tag.as_str())
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(b"{\"sku\":\"a\"}")))
                .expect("a request");
            let response = sender.send_request(request).await.expect("a response");
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes();
            (status, body)
        }));
    }
    let mut answers = Vec::new();
    for stream in streams {
        answers.push(stream.await.expect("stream task"));
    }
    assert_eq!(runs_tagged(&tag), 1, "one run for 100 duplicate streams");
    let created: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .collect();
    // Every duplicate either got the first answer or was told to retry
    // (409 while the first ran): none ran again, none got another's body.
    assert!(!created.is_empty());
    assert!(created.iter().all(|(_, body)| body == &created[0].1));
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == StatusCode::CREATED || *status == StatusCode::CONFLICT),
        "{:?}",
        answers
            .iter()
            .map(|(status, _)| *status)
            .collect::<Vec<_>>()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_sent_goaway_after_the_keep_alive_timeout() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&format!(
        "[server.timeouts]\nheader_read_timeout_ms = 300\nkeep_alive_timeout_ms = 300\n{}",
        tls_toml(&cert, &key, "")
    ))
    .await;
    let stream = tls_connect(server.address, client_config(&ca, &[b"h2"]))
        .await
        .expect("handshake");
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 connection");
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(
            http::Request::get(server.https("/hello"))
                .body(Full::new(Bytes::new()))
                .expect("a request"),
        )
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("the server closes the idle connection")
        .expect("connection task")
        .expect("closed cleanly, by GOAWAY");
    assert!(started.elapsed() >= Duration::from_millis(250));
    server.stop().await;
}
