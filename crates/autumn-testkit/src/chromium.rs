//! Headless Chromium through chromedriver (feature `chromium`): one
//! chromedriver per test on a free loopback port, killed with its browser
//! when dropped. The browser is Debian's `/usr/bin/chromium`, driven by
//! `/usr/bin/chromedriver`; a test that finds them missing fails saying how
//! to install them.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource as _, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::elements::Element;
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// The browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Its WebDriver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How to get both.
pub const INSTALL_HINT: &str = "install Debian's Chromium and ChromeDriver as root: \
     apt-get update && apt-get install -y chromium chromium-driver \
     (or run `cargo xtask ci`, which installs them)";

/// A chromedriver child process on a free loopback port, killed with the
/// browser it started when dropped.
pub struct Chromedriver {
    child: Child,
    url: String,
}

impl std::fmt::Debug for Chromedriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chromedriver")
            .field("url", &self.url)
            .finish()
    }
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
    /// Starts chromedriver on a free loopback port and waits until it
    /// listens (at most 10 s a try, five tries on fresh ports).
    ///
    /// # Panics
    ///
    /// When Chromium or chromedriver is missing, or chromedriver never
    /// listens.
    pub fn start() -> Self {
        for file in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(file).is_file(),
                "{file} is missing, so the browser test cannot run: {INSTALL_HINT}"
            );
        }
        for _ in 0..5 {
            let port = crate::free_port();
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

/// A headless Chromium session through `driver`, with its profile in
/// `profile`.
pub async fn browser(driver: &Chromedriver, profile: &Path) -> Client {
    browser_with(driver, profile, &[]).await
}

/// [`browser`] with Chromium flags of the test's own added (scripts off,
/// no back/forward cache, ...).
pub async fn browser_with(driver: &Chromedriver, profile: &Path, extra: &[&str]) -> Client {
    let mut args = vec![
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--window-size=1024,768".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|flag| (*flag).to_owned()));
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

/// A mouse that moves to the centre of `element`.
pub fn mouse_on(element: &Element) -> MouseActions {
    MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element: element.clone(),
        duration: None,
        x: 0.0,
        y: 0.0,
    })
}

/// One left click, down and up, after what `mouse` does already.
pub fn then_click(mouse: MouseActions) -> MouseActions {
    mouse
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        })
}

/// Two left clicks on `button`, `gap` apart, sent as one WebDriver action
/// sequence so that nothing (such as chromedriver waiting for the first
/// click's navigation) comes between them.
pub async fn double_click(client: &Client, button: &Element, gap: Duration) {
    let mouse = then_click(then_click(mouse_on(button)).pause(gap));
    client.perform_actions(mouse).await.expect("double-click");
    let _ = client.release_actions().await;
}
