//! The sign-up form in a real browser (headless Chromium through
//! chromedriver): a rejected post is rendered again, 422, with the message
//! next to its field, the values entered and a new submit token; the
//! corrected post redirects to the account page, which shows the welcome
//! flash once.
//!
//! The app is the example's own, served in-process on a loopback port over
//! a SQLite file of the test's own. The chromedriver helpers are the minimum
//! copied from `error_pages.rs` (itself a copy from `browser.rs`: including
//! either would run its tests a second time in this binary).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use autumn_web::config::AutumnConfig;
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const INSTALL_HINT: &str = "install Debian's Chromium and ChromeDriver as root: \
     apt-get update && apt-get install -y chromium chromium-driver \
     (or run `cargo xtask ci`, which installs them)";
/// How long the browser gets to settle on a page.
const PAGE_WAIT: Duration = Duration::from_secs(10);

/// A chromedriver child process on a free loopback port, killed with the
/// browser it started when dropped.
struct Chromedriver {
    child: Child,
    url: String,
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Chromedriver {
    fn start() -> Self {
        for file in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(file).is_file(),
                "{file} is missing, so the browser test cannot run: {INSTALL_HINT}"
            );
        }
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free loopback port")
                .port();
            let mut child = Command::new(CHROMEDRIVER)
                .process_group(0)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{CHROMEDRIVER} does not start ({e}): {INSTALL_HINT}"));
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Self {
                        child,
                        url: format!("http://{addr}"),
                    };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("{CHROMEDRIVER} never listened on a loopback port");
    }
}

async fn browser(driver: &Chromedriver, profile: &Path) -> Client {
    let args = [
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--window-size=1024,768".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let mut capabilities = Capabilities::new();
    capabilities.insert("browserName".into(), json!("chrome"));
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": CHROMIUM, "args": args }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .unwrap_or_else(|e| panic!("chromedriver could not start Chromium ({e}); {INSTALL_HINT}"))
}

/// The status and the number of redirects of the page the browser shows,
/// from the Navigation Timing entry of its last navigation.
async fn navigation(client: &Client) -> (u64, u64) {
    let entry = client
        .execute(
            "const [nav] = performance.getEntriesByType('navigation'); \
             return [nav.responseStatus, nav.redirectCount];",
            vec![],
        )
        .await
        .expect("the navigation entry");
    let number = |index: usize| entry[index].as_u64().unwrap_or_else(|| panic!("{entry}"));
    (number(0), number(1))
}

async fn value_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .prop("value")
        .await
        .unwrap_or_else(|e| panic!("{css}'s value: {e}"))
        .unwrap_or_default()
}

async fn fill(client: &Client, css: &str, text: &str) {
    let input = client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    input.clear().await.expect("clear the input");
    input.send_keys(text).await.expect("type into the input");
}

/// The text of each element `css` matches, in document order.
async fn texts(client: &Client, css: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in client.find_all(Locator::Css(css)).await.expect(css) {
        texts.push(element.text().await.expect("element text"));
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_signup_is_rendered_again_and_the_accepted_one_greets_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("saas.db").display());
    let config =
        AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n")).expect("config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(
        saas::app_with_delay(false, Duration::ZERO)
            .with_config(saas::configure(config))
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );

    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("temp dir");
    let client = browser(&driver, profile.path()).await;
    client
        .goto(&format!("http://{address}/signup"))
        .await
        .expect("GET /signup");
    let token = "input[name=_submit_token]";
    let first_token = value_of(&client, token).await;
    assert_eq!(first_token.len(), 32, "a token: {first_token:?}");

    fill(&client, "#email", "rita.example.com").await;
    fill(&client, "#name", "Rita Forms").await;
    fill(&client, "#password", "a long enough password").await;
    client
        .find(Locator::Css("form button"))
        .await
        .expect("the form's button")
        .click()
        .await
        .expect("submit");

    // Rendered again: the message in the field's own paragraph, next to it.
    let message = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::XPath(
            "//input[@id='email']/following-sibling::span[@class='error']",
        ))
        .await
        .expect("the email's message next to the field")
        .text()
        .await
        .expect("message text");
    assert_eq!(message, "Enter an email address like name@example.com.");
    assert_eq!(navigation(&client).await, (422, 0), "422, not redirected");
    assert_eq!(
        texts(&client, "span.error").await,
        ["Enter an email address like name@example.com."],
        "only the email was wrong"
    );
    assert_eq!(
        client
            .find(Locator::Css("#email"))
            .await
            .expect("#email")
            .attr("aria-invalid")
            .await
            .expect("aria-invalid"),
        Some("true".to_owned())
    );
    assert_eq!(value_of(&client, "#email").await, "rita.example.com");
    assert_eq!(value_of(&client, "#name").await, "Rita Forms");
    assert_eq!(value_of(&client, "#password").await, "", "never shown back");
    let second_token = value_of(&client, token).await;
    assert_eq!(second_token.len(), 32, "a token: {second_token:?}");
    assert_ne!(second_token, first_token, "the re-render has a new token");

    fill(&client, "#email", "rita@example.com").await;
    fill(&client, "#password", "a long enough password").await;
    client
        .find(Locator::Css("form button"))
        .await
        .expect("the form's button")
        .click()
        .await
        .expect("submit");
    let flash = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("p.flash"))
        .await
        .expect("the welcome flash")
        .text()
        .await
        .expect("flash text");
    assert_eq!(flash, "Welcome, Rita Forms!");
    let current = client.current_url().await.expect("the URL");
    assert_eq!(current.path(), "/account");
    assert_eq!(navigation(&client).await, (200, 1), "a redirect, then 200");

    client.refresh().await.expect("reload /account");
    client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#who"))
        .await
        .expect("the account page again");
    assert_eq!(
        texts(&client, "p.flash").await,
        Vec::<String>::new(),
        "the flash is shown once"
    );

    let _ = client.close().await;
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the server stops")
        .expect("the server task does not panic")
        .expect("the server stops cleanly");
}
