//! HTTPS for the plain-axum twins, on the connection stack Autumn's own
//! HTTPS uses: tokio-rustls with ring's provider (the one Autumn builds
//! with, from `autumn_base::tls`), TLS 1.3 and 1.2, ALPN offering `h2`
//! and `http/1.1`, then hyper's HTTP/2 or HTTP/1 server by what the client
//! chose. So the bench's HTTPS and HTTP/2 rows differ from their Autumn
//! twins in the framework only, not in the TLS or HTTP code.
//!
//! On when `TLS_CERT_FILE` and `TLS_KEY_FILE` name a PEM certificate chain
//! and its key (`cargo xtask bench` makes a self-signed pair per run).
//! hyper's builders keep their defaults, as `axum::serve` leaves them: this
//! is axum as an app would serve HTTPS itself, without Autumn's limits.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// The certificate chain and key to serve HTTPS with.
pub(crate) struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl TlsFiles {
    /// `TLS_CERT_FILE` and `TLS_KEY_FILE`; `None` when neither is set.
    pub(crate) fn from_env() -> io::Result<Option<Self>> {
        let var = |name| std::env::var_os(name).map(PathBuf::from);
        match (var("TLS_CERT_FILE"), var("TLS_KEY_FILE")) {
            (Some(cert), Some(key)) => Ok(Some(Self { cert, key })),
            (None, None) => Ok(None),
            _ => Err(io::Error::other(
                "set both TLS_CERT_FILE and TLS_KEY_FILE to serve HTTPS, or neither",
            )),
        }
    }

    /// The acceptor every connection's handshake goes through.
    pub(crate) fn acceptor(&self) -> io::Result<TlsAcceptor> {
        let unusable = |path: &PathBuf, why: String| {
            io::Error::other(format!("{} cannot be used: {why}", path.display()))
        };
        let chain = CertificateDer::pem_slice_iter(&std::fs::read(&self.cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| unusable(&self.cert, error.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(&std::fs::read(&self.key)?)
            .map_err(|error| unusable(&self.key, error.to_string()))?;
        let provider = Arc::new(autumn_web::base::tls::ring_provider());
        // The versions Autumn offers (rustls has nothing older than 1.2).
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|error| unusable(&self.key, error.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// Serves `app` over HTTPS on `listener` until `shutdown` completes: each
/// connection in a task of its own, its handshake there too (a slow client
/// holds up only itself).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    acceptor: TlsAcceptor,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A connection that failed before it was accepted (reset,
                // or out of descriptors): the next one may do.
                Err(_) => continue,
            },
            () = shutdown.as_mut() => return Ok(()),
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            // As `axum::serve` adapts the router: a clone per request.
            let service = TowerToHyperService::new(
                app.map_request(|request: Request<Incoming>| request.map(Body::new)),
            );
            let io = TokioIo::new(stream);
            // A connection's end, clean or not, is the client's business.
            let _ = if h2 {
                http2::Builder::new(TokioExecutor::new())
                    .serve_connection(io, service)
                    .await
            } else {
                http1::Builder::new()
                    .serve_connection(io, service)
                    .with_upgrades()
                    .await
            };
        });
    }
}
