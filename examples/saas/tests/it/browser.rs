//! The account forms in a real browser: headless Chromium, driven through
//! chromedriver over WebDriver, against the built `saas` binary.
//!
//! Every way a browser sends the same form twice is tried on a fresh server
//! (its own SQLite file, each form post slowed down to 400 ms so that the
//! duplicate really overlaps the first post). Each test checks three things:
//!
//! 1. exactly one user was created (`GET /users.json`);
//! 2. the browser ends on the account page, signed in, as after a single
//!    submit;
//! 3. the duplicate really reached the server with the same token:
//!    `GET /actuator/metrics` counts one first use of a token
//!    (`submit_token.misses == 1`) and at least one replay or conflict
//!    (`hits + conflicts >= 1`). Without this, a browser that quietly
//!    dropped the second click would pass 1 and 2 and prove nothing. It is
//!    not hypothetical: with the guard skipped for the signup path
//!    (`AUTUMN_SECURITY__SUBMIT_TOKEN__EXEMPT_PATHS='["/signup"]' cargo
//!    test -p saas --test browser`, the server inherits the variable), the
//!    double-click still ends with one user on the account page, because
//!    Chromium abandons the first post when the second click starts a new
//!    navigation, and the abandoned request is dropped with its connection
//!    before it creates anything; only check 3 fails. Every test here fails
//!    that way, which is the point.
//!
//! The sign-up cases: a double-click on Submit; Enter in a field, then a
//! click; Back to the form and Submit again (with and without the
//! back/forward cache); Reload of the page after the post, then the same
//! post sent again from a copy of the form; the double-click with
//! JavaScript turned off.
//!
//! The account cases count what their handler did instead of users
//! (`GET /stats.json`): a double-click on "Log in" (one login, the browser
//! signed in); a login whose answer a proxy loses, then the same form
//! submitted again (one login, signed in by the replayed `Set-Cookie`); a
//! double-click on the profile form with a picture (one picture stored);
//! a used login token copied into a second browser (refused, 409 page, that
//! browser not signed in).
//!
//! The pages are served without the optional browser-side guard script
//! (`SAAS_DOUBLE_SUBMIT_GUARD` unset), so the server's one-time submit token
//! is the only thing standing between a double-click and a second account.
//!
//! Chromium and chromedriver are Debian's (`/usr/bin/chromium`,
//! `/usr/bin/chromedriver`); when they are missing every test fails with the
//! command that installs them. `cargo xtask ci` installs them itself.
//!
//! The tests take a lock so that only one browser runs at a time: on a
//! two-core machine, parallel browsers make the 50 ms and 400 ms timings
//! meaningless.

use crate::support::chromium;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use autumn_web::test::ServerProcess;
use chromium::{Chromedriver, browser_with};
use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// How long `POST /signup` takes: long enough that a second click 50 ms
/// after the first lands while the first post is still running.
const POST_DELAY_MS: &str = "400";
/// The gap between the two clicks of a double-click.
const DOUBLE_CLICK_GAP: Duration = Duration::from_millis(50);
/// How long the browser gets to settle on a page.
const PAGE_WAIT: Duration = Duration::from_secs(10);

/// One browser at a time (see the module docs).
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The built `saas` binary on a free port with its own SQLite file, killed
/// when dropped.
struct Server {
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Self {
        Self::launch(false)
    }

    /// The same, with the browser-side double-submit guard on the form.
    fn start_guarded() -> Self {
        Self::launch(true)
    }

    fn launch(guard: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let database = format!("sqlite://{}", dir.path().join("saas.db").display());
        let mut command = Command::new(env!("CARGO_BIN_EXE_saas"));
        command
            .current_dir(dir.path())
            .env("AUTUMN_DATABASE__URL", &database)
            // The tests read the counters on the app's one port.
            .env("AUTUMN_ACTUATOR__METRICS_ON_APP_PORT", "true")
            .env(saas::POST_DELAY_VAR, POST_DELAY_MS)
            .env("SAAS_DOUBLE_SUBMIT_GUARD", if guard { "1" } else { "0" });
        Self {
            process: ServerProcess::start(command),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    /// `GET path` as JSON, outside the browser.
    async fn json(&self, path: &str) -> Value {
        use http_body_util::BodyExt as _;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let uri = self.url(path).parse().expect("a URI");
        let response = client.get(uri).await.expect("the server answers");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert!(status.is_success(), "GET {path}: {status}");
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "GET {path} is not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        })
    }

    /// The users the server lists.
    async fn users(&self) -> Vec<Value> {
        match self.json("/users.json").await {
            Value::Array(users) => users,
            other => panic!("GET /users.json is not a list: {other}"),
        }
    }

    /// `(hits, misses, conflicts)` of the submit-token guard.
    async fn submit_token_counts(&self) -> (u64, u64, u64) {
        let metrics = self.json("/actuator/metrics").await;
        let counts = &metrics["submit_token"];
        let count = |name: &str| {
            counts[name]
                .as_u64()
                .unwrap_or_else(|| panic!("no submit_token.{name} in {metrics}"))
        };
        (count("hits"), count("misses"), count("conflicts"))
    }

    /// `count` from `GET /stats.json`: `users`, `logins`,
    /// `avatar_uploads`, `avatars`.
    async fn stat(&self, count: &str) -> u64 {
        let stats = self.json("/stats.json").await;
        stats[count]
            .as_u64()
            .unwrap_or_else(|| panic!("no {count} in {stats}"))
    }

    /// The server's address, for a proxy in front of it.
    fn addr(&self) -> SocketAddr {
        self.process
            .base_url()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the server listens on an IP address")
    }

    /// Signs `who` up outside the browser, as another client would: the
    /// form page, then its post.
    async fn create_user(&self, who: &Signup) {
        use http_body_util::BodyExt as _;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let page = client
            .get(self.url("/signup").parse().expect("a URI"))
            .await
            .expect("GET /signup");
        let page = page.into_body().collect().await.expect("body").to_bytes();
        let page = String::from_utf8_lossy(&page);
        let token = page
            .split(r#"name="_submit_token" value=""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the form has a token");
        let form = format!(
            "_submit_token={token}&email={}&name={}&password={}",
            who.email.replace('@', "%40"),
            who.name.replace(' ', "+"),
            PASSWORD.replace(' ', "+"),
        );
        let request = http::Request::post(self.url("/signup"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(http_body_util::Full::new(bytes::Bytes::from(form)))
            .expect("request");
        let response = client.request(request).await.expect("POST /signup");
        assert_eq!(response.status(), 303, "the sign-up went through");
    }
}

/// A TCP proxy between the browser and the server that loses the answers
/// to `POST /login` until told to stop: the request reaches the server,
/// which handles it, and the proxy closes the browser's connection when the
/// answer comes back instead of passing it on, as a network that fails at
/// the wrong moment would. Everything else passes through untouched.
struct LosingProxy {
    addr: SocketAddr,
    /// How many answers were lost.
    lost: Arc<AtomicUsize>,
    /// Whether login answers are still lost.
    losing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LosingProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let lost = Arc::new(AtomicUsize::new(0));
        let losing = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn({
            let (lost, losing) = (lost.clone(), losing.clone());
            async move {
                while let Ok((browser, _)) = listener.accept().await {
                    tokio::spawn(Self::relay(browser, upstream, losing.clone(), lost.clone()));
                }
            }
        });
        Self {
            addr,
            lost,
            losing,
            task,
        }
    }

    /// From now on, login answers reach the browser.
    fn stop_losing(&self) {
        self.losing.store(false, Ordering::SeqCst);
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }

    /// One browser connection. Chromium sends one request at a time on a
    /// connection, so once the login post went up, the next bytes down are
    /// its answer.
    async fn relay(
        browser: tokio::net::TcpStream,
        upstream: SocketAddr,
        losing: Arc<AtomicBool>,
        lost: Arc<AtomicUsize>,
    ) {
        let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
            return;
        };
        let (from_browser, to_browser) = browser.into_split();
        let (from_server, to_server) = server.into_split();
        let lose_next_answer = Arc::new(AtomicBool::new(false));
        let up = tokio::spawn({
            let lose_next_answer = lose_next_answer.clone();
            async move {
                let mut buffer = vec![0; 64 * 1024];
                loop {
                    let n = match read_some(&from_browser, &mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let chunk = &buffer[..n];
                    // Marked before it is passed on, so before any answer.
                    if chunk.starts_with(b"POST /login ") && losing.load(Ordering::SeqCst) {
                        lose_next_answer.store(true, Ordering::SeqCst);
                    }
                    if write_all(&to_server, chunk).await.is_err() {
                        break;
                    }
                }
                // Dropping the write half passes the browser's close on.
                drop(to_server);
            }
        });
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let n = match read_some(&from_server, &mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if lose_next_answer.load(Ordering::SeqCst) {
                // The server answered; the browser never hears it.
                lost.fetch_add(1, Ordering::SeqCst);
                break;
            }
            if write_all(&to_browser, &buffer[..n]).await.is_err() {
                break;
            }
        }
        // Dropping both halves closes the browser's connection.
        up.abort();
        drop(to_browser);
    }
}

/// Reads what is there (0 at the end of the stream). Readiness and
/// `try_read` rather than `AsyncReadExt`, which needs a tokio feature the
/// workspace does not build.
async fn read_some(
    half: &tokio::net::tcp::OwnedReadHalf,
    buffer: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        half.readable().await?;
        match half.try_read(buffer) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

/// Writes all of `data`.
async fn write_all(half: &tokio::net::tcp::OwnedWriteHalf, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        half.writable().await?;
        match half.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// How the browser is started.
#[derive(Clone, Copy, Default)]
struct Options {
    /// Page JavaScript off, as in a browser whose user turned it off.
    scripts_off: bool,
    /// No back/forward cache: Back loads the previous page again (from the
    /// HTTP cache or the server) instead of restoring the very document.
    no_back_forward_cache: bool,
}

/// A headless Chromium session, with the chromedriver that runs it and its
/// own empty profile.
struct Browser {
    client: Client,
    _driver: Chromedriver,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(options: Options) -> Self {
        let driver = Chromedriver::start();
        let profile = tempfile::tempdir().expect("temp dir");
        let mut flags = Vec::new();
        if options.scripts_off {
            flags.push("--blink-settings=scriptEnabled=false");
        }
        if options.no_back_forward_cache {
            flags.push("--disable-features=BackForwardCache");
        }
        let client = browser_with(&driver, profile.path(), &flags).await;
        Self {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PAGE_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` on the page ({e})"))
    }

    /// The path of the page the browser shows.
    async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("current URL")
            .path()
            .to_owned()
    }

    /// The visible text of the page.
    async fn text(&self) -> String {
        // A navigation can replace the page between finding its body and
        // reading it (a stale element): read the new one.
        let mut tries = 0;
        loop {
            match self.find("body").await.text().await {
                Ok(text) => return text,
                Err(error) if tries >= 20 => panic!("page text: {error}"),
                Err(_) => tries += 1,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens the signup form and fills it in; returns the token it was
    /// rendered with.
    async fn open_signup(&self, server: &Server, who: &Signup) -> String {
        self.client
            .goto(&server.url("/signup"))
            .await
            .expect("GET /signup");
        let token = self.token().await;
        self.fill(who).await;
        token
    }

    /// The hidden submit token of the form on the page: the field's `value`
    /// property, which is what the form sends.
    async fn token(&self) -> String {
        let token = self
            .find("form input[name=_submit_token]")
            .await
            .prop("value")
            .await
            .expect("token value")
            .expect("the form carries a submit token");
        assert!(!token.is_empty(), "an empty submit token");
        token
    }

    async fn fill(&self, who: &Signup) {
        for (name, value) in [
            ("email", who.email),
            ("name", who.name),
            ("password", PASSWORD),
        ] {
            let field = self.find(&format!("form input[name={name}]")).await;
            field.clear().await.expect("clear field");
            field.send_keys(value).await.expect("type into field");
        }
    }

    async fn submit_button(&self) -> Element {
        self.find("form[action='/signup'] button, form[action='/signup'] [type=submit]")
            .await
    }

    /// Opens the login form at `url` and fills it in with `who`'s email and
    /// the password; returns the token it was rendered with.
    async fn open_login(&self, url: &str, who: &Signup) -> String {
        self.client.goto(url).await.expect("GET /login");
        let token = self.token().await;
        self.fill_login(who).await;
        token
    }

    async fn fill_login(&self, who: &Signup) {
        for (name, value) in [("email", who.email), ("password", PASSWORD)] {
            let field = self
                .find(&format!("form[action='/login'] input[name={name}]"))
                .await;
            field.clear().await.expect("clear field");
            field.send_keys(value).await.expect("type into field");
        }
    }

    async fn login_button(&self) -> Element {
        self.find("form[action='/login'] button").await
    }

    /// Puts `token` into the form's hidden field, as a page that was copied
    /// or restored would carry it.
    async fn set_token(&self, token: &str) {
        self.client
            .execute(
                "document.querySelector('form input[name=_submit_token]').value = arguments[0];",
                vec![json!(token)],
            )
            .await
            .expect("write the token");
        assert_eq!(self.token().await, token);
    }

    /// Waits until the page's text contains `text`; returns it.
    async fn wait_for_text(&self, text: &str) -> String {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let shown = self.text().await;
            if shown.contains(text) {
                return shown;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never showed {text:?}: {} shows {shown}",
                self.path().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the browser is signed in: it opens `account_url` and stays
    /// there (a visitor without a session is sent to `/login`).
    async fn assert_signed_in(&self, account_url: &str, who: &Signup) {
        self.client.goto(account_url).await.expect("GET /account");
        let path = self.path().await;
        let text = self.text().await;
        assert!(
            path == "/account" && text.contains("Signed in as") && text.contains(who.name),
            "the browser is not signed in as {}: {path} shows {text}",
            who.name
        );
    }

    /// Two left clicks on `button`, `gap` apart (see
    /// [`chromium::double_click`]).
    async fn double_click(&self, button: &Element, gap: Duration) {
        chromium::double_click(&self.client, button, gap).await;
    }

    /// Enter in the focused field, then, `gap` later, a click on `button`:
    /// one action sequence with a keyboard and a mouse, tick by tick. The
    /// mouse is on the button before Enter is pressed, so the click does not
    /// depend on finding the button again while the first post is under way.
    async fn enter_then_click(&self, button: &Element, gap: Duration) {
        let enter: char = Key::Enter.into();
        let keys = KeyActions::new("keyboard".into())
            .pause(Duration::ZERO)
            .then(KeyAction::Down { value: enter })
            .then(KeyAction::Up { value: enter })
            .pause(gap)
            .pause(Duration::ZERO)
            .pause(Duration::ZERO);
        let mouse = chromium::then_click(
            chromium::mouse_on(button)
                .pause(Duration::ZERO)
                .pause(Duration::ZERO)
                .pause(Duration::ZERO),
        );
        self.client
            .perform_actions(fantoccini::actions::Actions::from(keys).and(mouse))
            .await
            .expect("Enter, then click");
        let _ = self.client.release_actions().await;
    }

    /// One plain click on `button`.
    async fn click(&self, button: &Element) {
        let mouse = chromium::then_click(chromium::mouse_on(button));
        self.client.perform_actions(mouse).await.expect("click");
        let _ = self.client.release_actions().await;
    }

    /// Waits until the browser shows a loaded page under `prefix`; returns
    /// its path.
    async fn wait_for_path(&self, prefix: &str) -> String {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let path = self.path().await;
            if path.starts_with(prefix) {
                // The body is there once the page is parsed.
                let _ = self.find("body").await;
                return path;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never reached {prefix}: it shows {path}: {}",
                self.text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// What a test signs up with (and [`PASSWORD`]).
struct Signup {
    email: &'static str,
    name: &'static str,
}

/// The password every test user has.
const PASSWORD: &str = "correct horse battery";

/// Waits (on the server's counters, not the clock) until a duplicate post
/// has been answered, replayed or refused as in flight; returns the
/// counters, `(hits, misses, conflicts)`. The callers' assertions say what
/// went wrong if it never is.
async fn duplicate_answered(server: &Server) -> (u64, u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counts = server.submit_token_counts().await;
        if counts.0 + counts.2 >= 1 || Instant::now() >= deadline {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The checks every test ends with (see the module docs).
async fn assert_created_once(server: &Server, browser: &Browser, who: &Signup) {
    let path = browser.wait_for_path("/account").await;
    // Wait (on the server's counters, not the clock) until the duplicate
    // post has been answered, so that what the browser shows and what the
    // server counted are final. The assertion below says what went wrong if
    // it never is.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (hits, _, conflicts) = server.submit_token_counts().await;
        if hits + conflicts >= 1 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let path_after = browser.path().await;
    assert!(
        path_after.starts_with("/account"),
        "the browser left the account page ({path}) for {path_after}: {}",
        browser.text().await
    );
    let text = browser.text().await;
    assert!(
        text.contains("Signed in as") && text.contains(who.name),
        "the account page is {}'s, signed in; it says: {text}",
        who.name
    );

    let users = server.users().await;
    assert_eq!(users.len(), 1, "exactly one user: {users:?}");
    assert_eq!(users[0]["email"], who.email, "{users:?}");
    assert_eq!(users[0]["name"], who.name, "{users:?}");

    let (hits, misses, conflicts) = server.submit_token_counts().await;
    eprintln!("submit_token: hits {hits}, misses {misses}, conflicts {conflicts}");
    assert_eq!(
        misses, 1,
        "one token was used for the first time (hits {hits}, conflicts {conflicts})"
    );
    assert!(
        hits + conflicts >= 1,
        "the duplicate post never reached the server with the same token \
         (hits {hits}, misses {misses}, conflicts {conflicts}): the test did not test anything"
    );
}

/// Double-click on Submit: a real mouse at the button's coordinates, down
/// and up twice, 50 ms apart. Chromium fires two submits; the second starts
/// a new navigation (cancelling the first in the browser, not on the
/// server), so two POSTs with the same token arrive. The second waits for
/// the first and gets its 303 replayed, and the browser lands on the account
/// page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_click_on_submit_creates_one_user() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(Options::default()).await;
    let who = Signup {
        email: "double@example.com",
        name: "Double Click",
    };
    browser.open_signup(&server, &who).await;
    let button = browser.submit_button().await;
    browser.double_click(&button, DOUBLE_CLICK_GAP).await;
    assert_created_once(&server, &browser, &who).await;
    browser.close().await;
}

/// Enter in a field (implicit submission), then a click on Submit 50 ms
/// later: two submits by two different means, the same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_then_click_creates_one_user() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(Options::default()).await;
    let who = Signup {
        email: "enter@example.com",
        name: "Enter Then Click",
    };
    browser.open_signup(&server, &who).await;
    // `fill` typed the name last, so the name field has the focus.
    let button = browser.submit_button().await;
    browser.enter_then_click(&button, DOUBLE_CLICK_GAP).await;
    assert_created_once(&server, &browser, &who).await;
    browser.close().await;
}

/// Submit, land on the account page, press Back, submit again.
///
/// The case the guard exists for is Back showing the *first* rendering of
/// the form again, with the token that was already used, as a browser does
/// when it restores the page from its back/forward cache or (for a history
/// navigation, even under `Cache-Control: no-cache`) from its HTTP cache.
/// Whether headless Chromium under WebDriver does that is not ours to
/// decide: it may instead fetch `/signup` again, which mints a fresh token,
/// and a fresh token is by design a new submission (it would then fail on
/// the taken email, which proves nothing about tokens). So the test keeps
/// the token the form was first rendered with and, when the page after Back
/// carries a different one, writes the first one back into the hidden field
/// (a DOM write through WebDriver: the state a restored page has) before
/// clicking Submit again. It prints which of the two happened. The second
/// submit creates nothing: it is replayed to the session the sign-up
/// rotated to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_then_submit_again_creates_one_user() {
    back_then_submit_again(Options::default(), "back@example.com").await;
}

/// The same with Chromium's back/forward cache turned off, so that Back
/// loads `/signup` again instead of restoring the same document: this one
/// shows the test's own restoring of the first token (when the page came
/// back with a fresh one) is what gets tested, not a lucky cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_without_back_forward_cache_then_submit_again_creates_one_user() {
    let restored = back_then_submit_again(
        Options {
            no_back_forward_cache: true,
            ..Options::default()
        },
        "back-reloaded@example.com",
    )
    .await;
    assert!(
        !restored.same_document,
        "the back/forward cache was off, yet Back restored the same document"
    );
}

/// What Back brought back.
struct AfterBack {
    /// The very document the form was first shown in (back/forward cache).
    same_document: bool,
}

async fn back_then_submit_again(options: Options, email: &'static str) -> AfterBack {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(options).await;
    let who = Signup {
        email,
        name: "Back Again",
    };
    let first_token = browser.open_signup(&server, &who).await;
    // A mark on this document: still there after Back only when Chromium
    // restored the very same document from its back/forward cache.
    browser
        .client
        .execute("window.autumnFirstDocument = true;", vec![])
        .await
        .expect("mark the document");
    browser.click(&browser.submit_button().await).await;
    browser.wait_for_path("/account").await;
    assert_eq!(
        server.users().await.len(),
        1,
        "the first submit created the user"
    );

    browser.client.back().await.expect("Back");
    browser.wait_for_path("/signup").await;
    let same_document = browser
        .client
        .execute("return window.autumnFirstDocument === true;", vec![])
        .await
        .expect("read the mark")
        == json!(true);
    let token_after_back = browser.token().await;
    eprintln!(
        "after Back: {} document, {} token",
        if same_document {
            "the back/forward cache's"
        } else {
            "a newly loaded"
        },
        if token_after_back == first_token {
            "the first"
        } else {
            "a fresh"
        }
    );
    if token_after_back != first_token {
        // Fetched again rather than restored: put the first rendering's
        // token back (see the test's docs).
        browser
            .client
            .execute(
                "document.querySelector('form input[name=_submit_token]').value = arguments[0];",
                vec![json!(first_token)],
            )
            .await
            .expect("restore the first token");
        assert_eq!(browser.token().await, first_token);
    }
    // The same values as the first time, whatever Back restored.
    browser.fill(&who).await;
    browser.click(&browser.submit_button().await).await;
    assert_created_once(&server, &browser, &who).await;
    browser.close().await;
    AfterBack { same_document }
}

/// Re-sending the post that was already answered.
///
/// Reload first: the answer to the POST was a 303, so the page the browser
/// shows is the `GET /account` it was sent to, and Reload repeats that
/// GET, not the POST; the test checks it creates nothing and sends no form.
///
/// A browser that resends a POST (Reload on a page a POST answered directly,
/// "Confirm Form Resubmission", a retry of a post whose answer was lost)
/// sends the same body again after the first was answered. WebDriver cannot
/// answer Chromium's resubmission prompt, so the test sends that body the way
/// a page would: before submitting it keeps a copy of the rendered form
/// (its HTML, with the token and the typed values), and once on the account
/// page it puts the copy into the page and calls `form.submit()` on it. The
/// server sees the same token a second time, after the first post finished,
/// from the session the sign-up rotated to, and replays its 303.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_and_resent_post_create_one_user() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(Options::default()).await;
    let who = Signup {
        email: "resend@example.com",
        name: "Resent Post",
    };
    browser.open_signup(&server, &who).await;
    // The form as the browser would send it: HTML with the typed values
    // written into the `value` attributes.
    let copy = browser
        .client
        .execute(
            "const form = document.querySelector(\"form[action='/signup']\");
             for (const input of form.querySelectorAll('input')) {
                 input.setAttribute('value', input.value);
             }
             return form.outerHTML;",
            vec![],
        )
        .await
        .expect("copy the form");
    browser.click(&browser.submit_button().await).await;
    let account = browser.wait_for_path("/account").await;

    browser.client.refresh().await.expect("Reload");
    assert_eq!(browser.wait_for_path("/account").await, account);
    assert_eq!(server.users().await.len(), 1, "Reload created nothing");
    assert_eq!(
        server.submit_token_counts().await,
        (0, 1, 0),
        "Reload of the page after a 303 is a GET: no form was sent again"
    );

    browser
        .client
        .execute(
            "const holder = document.createElement('div');
             holder.innerHTML = arguments[0];
             document.body.appendChild(holder);
             holder.querySelector('form').submit();",
            vec![copy],
        )
        .await
        .expect("re-send the copied form");
    assert_created_once(&server, &browser, &who).await;
    browser.close().await;
}

/// The double-click again, in a browser with JavaScript turned off: no page
/// script can block anything, and the submit token still does. The test
/// first shows that page scripts really do not run in that browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_click_without_javascript_creates_one_user() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(Options {
        scripts_off: true,
        ..Options::default()
    })
    .await;

    browser
        .client
        .goto(
            "data:text/html,<p id=probe>scripts off</p>\
             <script>document.getElementById('probe').textContent='scripts on'</script>",
        )
        .await
        .expect("open the probe page");
    assert_eq!(
        browser.find("#probe").await.text().await.expect("probe"),
        "scripts off",
        "page JavaScript still runs in this browser"
    );

    let who = Signup {
        email: "nojs@example.com",
        name: "No Script",
    };
    browser.open_signup(&server, &who).await;
    let button = browser.submit_button().await;
    browser.double_click(&button, DOUBLE_CLICK_GAP).await;
    assert_created_once(&server, &browser, &who).await;
    browser.close().await;
}

/// With the opt-in guard script on the page, the second click of a
/// double-click never leaves the browser: the server sees one POST, and the
/// person still lands on the account page. (The token would have caught the
/// duplicate anyway; the script saves the request.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_script_keeps_a_double_click_to_one_post() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start_guarded();
    let browser = Browser::start(Options::default()).await;
    let who = Signup {
        email: "guarded@example.com",
        name: "Guarded Click",
    };
    browser.open_signup(&server, &who).await;
    let button = browser.submit_button().await;
    browser.double_click(&button, DOUBLE_CLICK_GAP).await;
    browser.wait_for_path("/account").await;
    let users = server.users().await;
    assert_eq!(users.len(), 1, "exactly one user: {users:?}");
    let (hits, misses, conflicts) = server.submit_token_counts().await;
    assert_eq!(
        (hits, misses, conflicts),
        (0, 1, 0),
        "the script let only the first submit through"
    );
    browser.close().await;
}

/// A double-click on "Log in": two posts of the login form, 50 ms apart,
/// while the first is still being handled. The second waits and gets the
/// first one's 303 replayed with the session cookie it set: the browser
/// ends on the account page, signed in, and the login handler ran once
/// (one login counted, so one session made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_click_on_log_in_makes_one_session_and_ends_signed_in() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let who = Signup {
        email: "login@example.com",
        name: "Double Login",
    };
    server.create_user(&who).await;
    let browser = Browser::start(Options::default()).await;
    browser.open_login(&server.url("/login"), &who).await;
    let button = browser.login_button().await;
    browser.double_click(&button, DOUBLE_CLICK_GAP).await;
    browser.wait_for_path("/account").await;

    let (hits, misses, conflicts) = duplicate_answered(&server).await;
    assert_eq!(misses, 2, "the sign-up and one login ran");
    assert!(
        hits + conflicts >= 1,
        "the second click's post never reached the server (hits {hits}, conflicts {conflicts})"
    );
    assert_eq!(server.stat("logins").await, 1, "one login, one session");
    browser
        .assert_signed_in(&server.url("/account"), &who)
        .await;
    browser.close().await;
}

/// The answer to "Log in" is lost on the way back (the proxy closes the
/// connection once the server has answered), so the browser never got the
/// cookie of the session the login made. Chromium may send the post again
/// by itself (it retries a request whose reused connection closed before
/// any answer); the proxy loses those answers too, until the browser shows
/// its error page. Then the network is back and the person submits the
/// same form again. The post reaches the server with the same token, is
/// answered with the first answer, `Set-Cookie` included, and the browser
/// ends signed in with the login handler run once.
///
/// Back does not bring the form back here: the form posts to its own URL,
/// and Chromium puts the error page in place of the form's history entry.
/// So the person opens the login page again, and the test gives it the
/// token the lost post carried (the state of a form restored from history,
/// as in `back_then_submit_again_creates_one_user`) before submitting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_login_answer_ends_signed_in() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let who = Signup {
        email: "lost@example.com",
        name: "Lost Answer",
    };
    server.create_user(&who).await;
    let proxy = LosingProxy::start(server.addr()).await;
    let browser = Browser::start(Options::default()).await;
    let token = browser.open_login(&proxy.url("/login"), &who).await;
    browser.click(&browser.login_button().await).await;

    // Chromium's error page: the post's URL, no answer.
    let deadline = Instant::now() + PAGE_WAIT;
    loop {
        let text = browser.text().await;
        if proxy.lost() >= 1 && (text.contains("ERR_") || text.contains("This page isn")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the lost answer the browser shows {}: {text}",
            browser.path().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{} login answers lost before Chromium gave up",
        proxy.lost()
    );
    assert_eq!(server.stat("logins").await, 1, "the first post was handled");
    proxy.stop_losing();

    browser.open_login(&proxy.url("/login"), &who).await;
    browser.set_token(&token).await;
    browser.click(&browser.login_button().await).await;
    browser.wait_for_path("/account").await;

    let (hits, misses, conflicts) = server.submit_token_counts().await;
    assert_eq!(
        (misses, conflicts),
        (2, 0),
        "the sign-up and one login ran; nothing was refused"
    );
    assert!(hits >= 1, "the retry was answered from the record");
    assert_eq!(server.stat("logins").await, 1, "the login handler ran once");
    browser.assert_signed_in(&proxy.url("/account"), &who).await;
    browser.close().await;
}

/// A double-click on "Save profile" with a picture chosen: two multipart
/// posts of the same form. The picture is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_click_on_the_profile_form_stores_one_avatar() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let browser = Browser::start(Options::default()).await;
    let who = Signup {
        email: "avatar@example.com",
        name: "Avatar Owner",
    };
    browser.open_signup(&server, &who).await;
    browser.click(&browser.submit_button().await).await;
    browser.wait_for_path("/account").await;

    let dir = tempfile::tempdir().expect("temp dir");
    let picture = dir.path().join("me.png");
    std::fs::write(&picture, PNG).expect("write the picture");
    let name = browser
        .find("form[action='/account/profile'] input[name=name]")
        .await;
    name.clear().await.expect("clear the name");
    name.send_keys("Avatar Owner").await.expect("type the name");
    browser
        .find("form[action='/account/profile'] input[type=file]")
        .await
        .send_keys(&picture.display().to_string())
        .await
        .expect("choose the picture");
    let button = browser.find("form[action='/account/profile'] button").await;
    browser.double_click(&button, DOUBLE_CLICK_GAP).await;
    browser.wait_for_text("Your profile was saved.").await;
    assert_eq!(browser.path().await, "/account");

    let (hits, misses, conflicts) = duplicate_answered(&server).await;
    assert_eq!(misses, 2, "the sign-up and one profile post ran");
    assert!(
        hits + conflicts >= 1,
        "the second click's post never reached the server (hits {hits}, conflicts {conflicts})"
    );
    assert_eq!(server.stat("avatar_uploads").await, 1, "one picture stored");
    assert_eq!(server.stat("avatars").await, 1);
    // The page shows it, decoded from what /account/avatar served.
    let width = browser
        .client
        .execute(
            "const img = document.querySelector('img#avatar');
             return img && img.complete ? img.naturalWidth : -1;",
            vec![],
        )
        .await
        .expect("read the picture");
    assert_eq!(width, json!(1), "the 1x1 picture is shown");
    browser.close().await;
}

/// A login form's token copied into another browser (its own profile, so
/// its own cookies) after it was used: the replay would carry the first
/// browser's new session cookie, so it is refused (409, shown as a page)
/// and the other browser is not signed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_copied_into_another_browser_is_refused() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let who = Signup {
        email: "copied@example.com",
        name: "Copied Token",
    };
    server.create_user(&who).await;
    let first = Browser::start(Options::default()).await;
    let token = first.open_login(&server.url("/login"), &who).await;
    first.click(&first.login_button().await).await;
    first.wait_for_path("/account").await;
    assert_eq!(server.stat("logins").await, 1);

    let other = Browser::start(Options::default()).await;
    other.open_login(&server.url("/login"), &who).await;
    other.set_token(&token).await;
    other.click(&other.login_button().await).await;
    let text = other
        .wait_for_text("already submitted from another session")
        .await;
    assert!(text.contains("Conflict"), "a 409 page: {text}");
    assert_eq!(other.path().await, "/login", "the post's own URL");

    assert_eq!(server.stat("logins").await, 1, "nothing ran");
    let (_, misses, _) = server.submit_token_counts().await;
    assert_eq!(misses, 2, "the sign-up and the first login");
    other
        .client
        .goto(&server.url("/account"))
        .await
        .expect("GET /account");
    assert_eq!(
        other.path().await,
        "/login",
        "the other browser is not signed in"
    );
    first.assert_signed_in(&server.url("/account"), &who).await;
    other.close().await;
    first.close().await;
}

/// A 1x1 PNG (the same as in `tests/saas.rs`).
const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0d\x49\x44\x41\x54\x78\xda\x63\x64\x60\xf8\x5f\x0f\x00\x02\x87\x01\x80\xeb\x47\xba\x92\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// A password change signs the user's other browsers out: two browsers
/// signed in as the same user; the first changes the password; the
/// second's next page load is sent to the login form, while the first stays
/// signed in (under a new session id) and the new password works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_signs_the_other_browsers_out() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start();
    let who = Signup {
        email: "two-browsers@example.com",
        name: "Two Browsers",
    };
    server.create_user(&who).await;
    let account = server.url("/account");
    let first = Browser::start(Options::default()).await;
    let second = Browser::start(Options::default()).await;
    for browser in [&first, &second] {
        browser.open_login(&server.url("/login"), &who).await;
        browser.click(&browser.login_button().await).await;
        browser.wait_for_path("/account").await;
        browser.assert_signed_in(&account, &who).await;
    }

    first
        .find("#change-password")
        .await
        .click()
        .await
        .expect("follow the link");
    first.wait_for_path("/account/password").await;
    for (name, value) in [
        ("current_password", PASSWORD),
        ("new_password", "a brand new passphrase"),
    ] {
        first
            .find(&format!(
                "form[action='/account/password'] input[name={name}]"
            ))
            .await
            .send_keys(value)
            .await
            .expect("type into field");
    }
    first
        .click(&first.find("form[action='/account/password'] button").await)
        .await;
    let text = first.wait_for_text("Your password was changed").await;
    // The second browser's, and the one the sign-up made outside them.
    assert!(text.contains("2 other sessions were signed out"), "{text}");
    assert_eq!(first.path().await, "/account");

    second.client.goto(&account).await.expect("GET /account");
    assert_eq!(
        second.wait_for_path("/login").await,
        "/login",
        "the other browser is signed out"
    );
    first.assert_signed_in(&account, &who).await;

    // The old password no longer signs anyone in; the new one does.
    second.open_login(&server.url("/login"), &who).await;
    second.click(&second.login_button().await).await;
    second.wait_for_text("do not match an account").await;
    first.close().await;
    second.close().await;
}
