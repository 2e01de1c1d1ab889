//! What the browser tests share: headless Chromium (autumn_testkit's) and
//! an app served in-process on a free port for it to open. A test file says
//! `mod support;` and `use support::chromium;`.
#![allow(dead_code, unreachable_pub, unused_imports)]

/// Chromium through chromedriver, and [`Served`](chromium::Served).
pub mod chromium {
    use std::net::SocketAddr;
    use std::time::Duration;

    pub use autumn_testkit::chromium::*;

    /// An app served in-process on a free loopback port until [`stop`](Self::stop).
    pub struct Served {
        pub address: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        served: tokio::task::JoinHandle<Result<(), autumn_web::LaunchError>>,
    }

    impl Served {
        /// Serves `app` on a free loopback port.
        pub async fn start(app: autumn_web::AppBuilder) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind port 0");
            let address = listener.local_addr().expect("bound address");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let served = tokio::spawn(app.serve(listener, async move {
                let _ = stopped.await;
            }));
            Self {
                address,
                stop,
                served,
            }
        }

        /// Stops the server and waits (at most 10 s) until it has.
        pub async fn stop(self) {
            let _ = self.stop.send(());
            tokio::time::timeout(Duration::from_secs(10), self.served)
                .await
                .expect("the server stops")
                .expect("the server task does not panic")
                .expect("the server stops cleanly");
        }
    }
}
