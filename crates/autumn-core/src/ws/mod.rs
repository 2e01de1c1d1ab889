//! WebSockets that count as connections and close cleanly when the server
//! stops.
//!
//! [`WebSocketUpgrade`] is axum's extractor with two differences that
//! matter in production:
//!
//! - the socket keeps its connection's slot: it counts toward
//!   `server.max_connections`, the open-connections metric and the drain
//!   at shutdown until it closes (axum's alone lets go of them once the
//!   handshake is done);
//! - when the server stops, [`WebSocket::recv`] and [`WebSocket::send`] send
//!   the client a close frame (1001, going away) and end, so a client
//!   learns it should reconnect elsewhere instead of seeing the TCP
//!   connection cut.
//!
//! ```
//! use autumn_core::ws::{Message, WebSocket, WebSocketUpgrade};
//! use axum::response::Response;
//!
//! /// Echoes every text message back.
//! async fn echo(upgrade: WebSocketUpgrade) -> Response {
//!     upgrade.on_upgrade(|mut socket: WebSocket| async move {
//!         while let Some(Ok(message)) = socket.recv().await {
//!             if let Message::Text(text) = message {
//!                 if socket.send(Message::Text(text)).await.is_err() {
//!                     break;
//!                 }
//!             }
//!         }
//!     })
//! }
//! # let _ = axum::Router::<()>::new().route("/echo", axum::routing::get(echo));
//! ```

use std::future::Future;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::extract::ws;
use axum::response::Response;
use http::request::Parts;
use tokio::sync::watch;

use crate::app::server::context::{self, ConnectionContext};

pub use axum::extract::ws::rejection::WebSocketUpgradeRejection;
pub use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};

/// The close code sent to every open WebSocket when the server stops.
pub const GOING_AWAY: u16 = 1001;

/// Extractor for a WebSocket handshake; see the [module docs](self).
///
/// A request that is not a WebSocket handshake is refused with axum's
/// [`WebSocketUpgradeRejection`] (400, 405 or 426, with a problem
/// document).
pub struct WebSocketUpgrade {
    inner: ws::WebSocketUpgrade,
    connection: Option<Arc<ConnectionContext>>,
}

impl<S: Send + Sync> FromRequestParts<S> for WebSocketUpgrade {
    type Rejection = WebSocketUpgradeRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let inner = ws::WebSocketUpgrade::from_request_parts(parts, state).await?;
        Ok(Self {
            inner,
            connection: context::current(),
        })
    }
}

impl WebSocketUpgrade {
    /// The largest message accepted from the client, in bytes (axum's
    /// default: 64 MiB).
    #[must_use]
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.inner = self.inner.max_message_size(bytes);
        self
    }

    /// The subprotocols this endpoint speaks; the first the client also
    /// asks for is chosen.
    #[must_use]
    pub fn protocols<I>(mut self, protocols: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<std::borrow::Cow<'static, str>>,
    {
        self.inner = self.inner.protocols(protocols);
        self
    }

    /// Answers the handshake (101) and runs `callback` with the socket on a
    /// task of its own, holding the connection's slot until it returns.
    pub fn on_upgrade<F, Fut>(self, callback: F) -> Response
    where
        F: FnOnce(WebSocket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let connection = self.connection;
        self.inner.on_upgrade(move |socket| async move {
            let stopping = connection.as_ref().map(|connection| connection.stopped());
            callback(WebSocket {
                inner: socket,
                stopping,
                closed: false,
            })
            .await;
            // The slot is given back only now.
            drop(connection);
        })
    }
}

/// An open WebSocket; see the [module docs](self).
pub struct WebSocket {
    inner: ws::WebSocket,
    stopping: Option<watch::Receiver<bool>>,
    closed: bool,
}

impl WebSocket {
    /// The next message from the client; `None` once the socket is closed,
    /// by the client or because the server stops (the client is then sent
    /// a close frame, code 1001).
    pub async fn recv(&mut self) -> Option<Result<Message, axum::Error>> {
        if self.closed {
            return None;
        }
        tokio::select! {
            message = self.inner.recv() => message,
            () = context::until_stopped(self.stopping.clone()) => {
                self.going_away().await;
                None
            }
        }
    }

    /// Sends `message`. Once the server stops, sends the close frame
    /// instead and answers an error.
    ///
    /// # Errors
    ///
    /// The socket is closed, or the server stops.
    pub async fn send(&mut self, message: Message) -> Result<(), axum::Error> {
        if self
            .stopping
            .as_ref()
            .is_some_and(|stopping| *stopping.borrow())
        {
            self.going_away().await;
        }
        if self.closed {
            return Err(axum::Error::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the WebSocket is closed: the server is stopping",
            )));
        }
        self.inner.send(message).await
    }

    /// The subprotocol chosen in the handshake, if any.
    pub fn protocol(&self) -> Option<&http::HeaderValue> {
        self.inner.protocol()
    }

    async fn going_away(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let frame = CloseFrame {
            code: GOING_AWAY,
            reason: Utf8Bytes::from_static("the server is stopping"),
        };
        // The client may be gone already: nothing more to do then.
        let _ = self.inner.send(Message::Close(Some(frame))).await;
    }
}
