//! [`Served`]: an app served on a free loopback port for tests that need a
//! real socket, until [`stop`](Served::stop).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A served app and the means to stop it.
pub struct Served {
    /// Where it listens (on 127.0.0.1).
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), autumn_web::LaunchError>>,
}

impl Served {
    /// Serves `app` with `AppBuilder::serve` on a free port of 127.0.0.1.
    pub async fn start(app: autumn_web::AppBuilder) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(app.serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            address,
            stop: Some(stop),
            served,
        }
    }

    /// `http://` and the address, for `TestClient::for_server`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops the server and waits (10 s at most) until it has, cleanly.
    pub async fn stop(mut self) {
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
