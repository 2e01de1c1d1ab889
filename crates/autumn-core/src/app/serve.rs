//! Binding, serving and shutting down.

use tokio::net::TcpListener;

use super::AppBuilder;
use super::launch::LaunchError;

impl AppBuilder {
    /// Loads the configuration, builds the app, serves it on
    /// `[server] host`/`port` until SIGINT or SIGTERM, then drains in-flight
    /// requests and returns.
    ///
    /// A launch failure (bad configuration, a port in use) logs one line
    /// naming what to fix and exits the process with status 1; use
    /// [`try_run`](Self::try_run) to handle it yourself.
    pub async fn run(self) {
        if let Err(error) = self.try_run().await {
            tracing::error!("{error}");
            eprintln!("autumn: {error}");
            std::process::exit(1);
        }
    }

    /// [`run`](Self::run), returning launch and server errors.
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or routes are invalid, the
    /// address cannot be bound, or the server fails.
    pub async fn try_run(self) -> Result<(), LaunchError> {
        let launched = self.launch()?;
        launched.startup.check().await?;
        launched.startup.warm().await;
        let server = &launched.config.server;
        let address = format!("{}:{}", server.host, server.port);
        let listener = TcpListener::bind(&address)
            .await
            .map_err(|source| LaunchError::Bind {
                address: address.clone(),
                source,
            })?;
        let bound = listener.local_addr().map_err(LaunchError::Serve)?;
        tracing::info!(profile = %launched.config.profile, "autumn listening on http://{bound}");
        axum::serve(listener, launched.router)
            .with_graceful_shutdown(shutdown_signal())
            .await
            .map_err(LaunchError::Serve)?;
        tracing::info!("autumn stopped");
        Ok(())
    }
}

async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
