//! Binding, serving and shutting down.

use std::future::Future;

use tokio::net::TcpListener;

use super::AppBuilder;
use super::error::{CommandError, LaunchError};
use super::launch::Launched;

impl AppBuilder {
    /// Loads the configuration, builds the app, serves it on
    /// `[server] host`/`port` until SIGINT or SIGTERM, then drains in-flight
    /// requests and first-time runs whose client hung up (within
    /// `[server] shutdown_grace_ms`) and returns.
    ///
    /// The program's arguments are read as
    /// [`run_command`](Self::run_command) reads them, so every app binary
    /// also understands `idempotency inspect|evict` and `openapi [FILE]`.
    ///
    /// A launch failure (bad configuration, a port in use) prints one line
    /// naming what to fix on standard error and exits the process with
    /// status 1; use [`try_run`](Self::try_run) or
    /// [`run_command`](Self::run_command) to handle it yourself.
    pub async fn run(self) {
        if let Err(error) = self.run_command(std::env::args().skip(1)).await {
            // Once, on standard error, where a failed start is looked for:
            // not again in the log, which may be the same terminal.
            crate::telemetry::flush_logs();
            eprintln!("autumn: {error}");
            std::process::exit(1);
        }
    }

    /// Runs the command line `args` (the program's arguments, without its
    /// name):
    ///
    /// - `idempotency inspect|evict ...` looks up or evicts one key in the
    ///   app's idempotency store and prints the outcome as one JSON line on
    ///   standard output;
    /// - `jobs dead [--limit N]`, `jobs retry ID` and `jobs discard ID` list
    ///   the dead jobs of the app database's queue (one JSON line each), run
    ///   one again, or delete it (with a database feature);
    /// - `openapi [FILE]` writes the app's OpenAPI document (see
    ///   [`openapi_document`](Self::openapi_document)) to `FILE`, or to
    ///   standard output, and serves nothing;
    /// - anything else serves, as [`try_run`](Self::try_run) does (so
    ///   arguments meant for the app itself are left to it).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), autumn_core::CommandError> {
    /// autumn_core::app()
    ///     .idempotent()
    ///     .run_command(["idempotency", "inspect", "order-1", "--path", "/orders"])
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`CommandError::Launch`] when the app cannot start, and
    /// [`CommandError::KeyAdmin`] when a key administration command cannot
    /// run.
    pub async fn run_command<I, S>(self, args: I) -> Result<(), CommandError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let args: Vec<String> = args.into_iter().map(Into::into).collect();
        match args.split_first() {
            Some((command, rest)) if command == crate::key_admin::COMMAND => {
                self.run_key_admin(rest).await
            }
            Some((command, rest)) if command == "openapi" => self.export_openapi(rest),
            #[cfg(feature = "database")]
            Some((command, rest)) if command == crate::jobs::admin::COMMAND => {
                self.run_jobs_admin(rest).await
            }
            #[cfg(feature = "database")]
            Some((command, rest)) if command == super::migrate::COMMAND => {
                self.run_db_command(rest).await
            }
            _ => Ok(self.try_run().await?),
        }
    }

    /// [`run`](Self::run), returning launch errors, without reading the
    /// program's arguments (see [`run_command`](Self::run_command) for the
    /// command line).
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or routes are invalid, a
    /// service the configuration names is unreachable, or the address cannot
    /// be bound.
    pub async fn try_run(self) -> Result<(), LaunchError> {
        let launched = self.launch()?;
        launched.startup.check().await?;
        launched.startup.warm().await;
        let server = &launched.config.server;
        let address = format!("{}:{}", server.host, server.port);
        let listener = listen(&address).await.map_err(|source| LaunchError::Bind {
            address: address.clone(),
            source,
        })?;
        serve_launched(launched, listener, shutdown_signal()).await
    }

    /// Builds the app and serves it on `listener` until `shutdown` completes,
    /// then drains as [`run`](Self::run) does. For embedding the server in a
    /// program that owns its listener and decides when to stop (tests bind
    /// port 0).
    ///
    /// ```no_run
    /// # use autumn_core::app;
    /// # async fn demo() -> Result<(), autumn_core::app::LaunchError> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # drop(stop);
    /// app()
    ///     .serve(listener, async move {
    ///         let _ = stopped.await;
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or routes are invalid or a
    /// service the configuration names is unreachable.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), LaunchError> {
        let launched = self.launch()?;
        launched.startup.check().await?;
        serve_launched(launched, listener, shutdown).await
    }
}

impl AppBuilder {
    /// `my-app idempotency inspect|evict ...`: the app's configuration and
    /// store, one key looked up or evicted, the outcome printed as JSON on
    /// standard output; no server.
    /// `openapi [FILE]`: the document to `FILE`, or to standard output.
    fn export_openapi(self, args: &[String]) -> Result<(), CommandError> {
        use std::io::Write as _;
        let file = match args {
            [] => None,
            [file] => Some(std::path::PathBuf::from(file)),
            _ => {
                return Err(CommandError::ExportUsage(format!(
                    "expected at most one argument, the file to write (none: standard output), got {}",
                    args.len()
                )));
            }
        };
        let document = self.openapi_document()?;
        match file {
            Some(path) => std::fs::write(&path, &document)
                .map_err(|source| CommandError::Export { path, source }),
            None => std::io::stdout()
                .write_all(&document)
                .map_err(|source| CommandError::Export {
                    path: "standard output".into(),
                    source,
                }),
        }
    }

    /// `jobs ...`: the dead jobs of the app database's queue.
    #[cfg(feature = "database")]
    async fn run_jobs_admin(mut self, args: &[String]) -> Result<(), CommandError> {
        let command = crate::jobs::admin::Command::parse(args).map_err(CommandError::Jobs)?;
        // This process answers and exits: it runs no job, or one it
        // claimed would wait out its lease.
        self.commit_hooks = self.commit_hooks.map(|hooks| hooks.paused(true));
        let launched = self.launch()?;
        let Some(pool) = launched.database.clone() else {
            return Err(CommandError::Jobs(
                "the queue lives in the app database: set database.url (AUTUMN_DATABASE__URL)"
                    .to_owned(),
            ));
        };
        launched.startup.check().await?;
        let lines = command.run(&pool).await.map_err(CommandError::Jobs)?;
        crate::telemetry::flush_logs();
        for line in lines {
            println!("{line}");
        }
        Ok(())
    }

    async fn run_key_admin(self, args: &[String]) -> Result<(), CommandError> {
        let command = crate::key_admin::Command::parse(args).map_err(CommandError::KeyAdmin)?;
        let launched = self.launch()?;
        let config = &launched.config;
        if !config
            .idempotency
            .admin
            .is_enabled(config.profile.is_production())
        {
            return Err(CommandError::KeyAdmin(format!(
                "key administration is off under profile `{}`; set idempotency.admin.enabled = true (AUTUMN_IDEMPOTENCY__ADMIN__ENABLED) to allow it",
                config.profile
            )));
        }
        if command.wants_body() && !config.idempotency.admin.allow_bodies {
            return Err(CommandError::KeyAdmin(
                "recorded bodies are not shown: they may hold personal data; set idempotency.admin.allow_bodies = true (AUTUMN_IDEMPOTENCY__ADMIN__ALLOW_BODIES) to allow --body".to_owned(),
            ));
        }
        let Some(store) = launched.idempotency_store.clone() else {
            return Err(CommandError::KeyAdmin(
                "the app has no idempotency store (idempotency.enabled = false)".to_owned(),
            ));
        };
        launched.startup.check().await?;
        let outcome = command.run(&*store).await.map_err(CommandError::KeyAdmin)?;
        // The log (on standard error) first, then the outcome alone on
        // standard output.
        crate::telemetry::flush_logs();
        println!("{outcome}");
        Ok(())
    }
}

/// Listens on `address` with a deep backlog (the kernel caps it at
/// `net.core.somaxconn`): under a flood of connections the server sheds
/// idle ones at its cap, and an ordinary client's connection must still
/// find room in the queue rather than have its SYN dropped and retried a
/// second later.
async fn listen(address: &str) -> std::io::Result<TcpListener> {
    const BACKLOG: u32 = 4096;
    let mut last = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the address resolves to nothing",
    );
    for resolved in tokio::net::lookup_host(address).await? {
        let socket = if resolved.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As std's and tokio's own bind do: a restarted server can listen
        // again while the old one's connections linger in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        match socket.bind(resolved).and_then(|()| socket.listen(BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// The one serving path of `try_run()` and `serve()`.
async fn serve_launched(
    launched: Launched,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LaunchError> {
    let bound = listener.local_addr().map_err(|source| LaunchError::Bind {
        address: "the listener given to serve()".to_owned(),
        source,
    })?;
    let tls = super::server::tls::ServerTls::load(&launched.config.server).map_err(|error| {
        LaunchError::ServerTlsFile {
            key: error.key,
            path: error.path,
            reason: error.reason,
        }
    })?;
    let redirect = bind_redirect(&launched).await?;
    let actuator = bind_actuator(&launched).await?;
    // Before the listening line, and after the last step that can fail (a
    // failure would leave the watch running): once the app says it
    // listens, a SIGHUP reloads its certificate rather than ending it.
    let reloading = tls.clone().map(super::server::tls::watch);
    // The app's line first: it is the one tools wait for to find the app.
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(profile = %launched.config.profile, "autumn listening on {scheme}://{bound}");
    // One shutdown for every listener: the app's signal stops them all.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let draining = launched.draining.clone();
    let delay = std::time::Duration::from_millis(launched.config.server.shutdown_delay_ms);
    let shutdown = async move {
        shutdown.await;
        // In order: readiness says 503 at once; the listeners keep serving
        // for the delay, while load balancers take the replica out; then
        // they stop accepting and drain.
        draining.store(true, std::sync::atomic::Ordering::Release);
        if !delay.is_zero() {
            tracing::info!(
                "stopping: readiness answers 503; still serving for server.shutdown_delay_ms ({}ms)",
                delay.as_millis()
            );
            tokio::time::sleep(delay).await;
        }
        let _ = stop.send(true);
    };
    let also_stop = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    if let Some(listener) = &redirect
        && let Ok(address) = listener.local_addr()
    {
        tracing::info!(
            "redirecting http://{address} to https on port {}",
            bound.port()
        );
    }
    if let Some((listener, _)) = &actuator
        && let Ok(address) = listener.local_addr()
    {
        tracing::info!("actuator served on http://{address}/actuator");
    }
    let server = &launched.config.server;
    let app = super::server::serve(
        listener,
        launched.service,
        server,
        tls,
        Some(launched.http_metrics),
        shutdown,
    );
    // The actuator's and the redirect's connections are not the app's.
    let actuator = async {
        if let Some((listener, router)) = actuator {
            let service = super::middleware::AppService::new(router);
            super::server::serve(listener, service, server, None, None, also_stop()).await;
        }
    };
    let redirect = async {
        if let Some(listener) = redirect {
            let router = super::server::redirect::router(bound.port());
            let service = super::middleware::AppService::new(router);
            super::server::serve(listener, service, server, None, None, also_stop()).await;
        }
    };
    tokio::join!(app, actuator, redirect);
    if let Some(reloading) = reloading {
        reloading.abort();
    }
    tracing::info!("autumn stopped");
    // The spans of the last requests and jobs, before the process ends.
    crate::telemetry::flush_traces().await;
    crate::telemetry::flush_logs();
    Ok(())
}

/// The plain-HTTP listener on `server.host:server.tls.redirect_port`, when
/// one redirects to HTTPS.
async fn bind_redirect(launched: &Launched) -> Result<Option<TcpListener>, LaunchError> {
    let server = &launched.config.server;
    let Some(port) = server.tls.redirect_port.filter(|_| server.tls.is_on()) else {
        return Ok(None);
    };
    let address = format!("{}:{port}", server.host);
    TcpListener::bind(&address)
        .await
        .map(Some)
        .map_err(|source| LaunchError::RedirectBind { address, source })
}

/// The actuator's own listener on `server.host:actuator.port`, when it
/// is served apart from the app.
async fn bind_actuator(
    launched: &Launched,
) -> Result<Option<(TcpListener, axum::Router)>, LaunchError> {
    let (Some(router), Some(port)) = (&launched.actuator, launched.config.actuator.port) else {
        return Ok(None);
    };
    let address = format!("{}:{port}", launched.config.actuator.host);
    let listener =
        TcpListener::bind(&address)
            .await
            .map_err(|source| LaunchError::ActuatorBind {
                address: address.clone(),
                source,
            })?;
    Ok(Some((listener, router.clone())))
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
}
