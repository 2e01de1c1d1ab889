use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, COOKIE, HOST};
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use crate::cookies::CookieJar;
use crate::response::TestResponse;

/// The hyper client a [`TestClient`] of a running server sends through.
type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<Bytes>,
>;

/// The `Host` a request carries unless it sets one: the app is reached as
/// `http://localhost`, and a page of its own sends `Origin: http://localhost`.
pub const DEFAULT_HOST: &str = "localhost";

/// A client for an app built by [`TestApp`](crate::TestApp), or for a
/// server running on a socket ([`ServerProcess::client`](crate::ServerProcess::client)).
/// Clones share the app and the cookie jar, so concurrent requests can be
/// sent from tasks.
#[derive(Debug, Clone)]
pub struct TestClient {
    transport: Transport,
    cookies: Arc<Mutex<CookieJar>>,
}

/// Where requests go.
#[derive(Clone)]
enum Transport {
    /// Straight into the app's router, in the test process.
    InProcess(Router),
    /// Over a real connection to `base` (`http://host:port`).
    Http {
        base: String,
        client: Box<HttpClient>,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InProcess(router) => f.debug_tuple("InProcess").field(router).finish(),
            Self::Http { base, .. } => f.debug_struct("Http").field("base", base).finish(),
        }
    }
}

impl TestClient {
    pub(crate) fn new(router: Router) -> Self {
        Self::with_transport(Transport::InProcess(router))
    }

    /// A client of the server at `base` (`http://127.0.0.1:PORT`): each
    /// request goes over a real socket (HTTP/1.1, connections kept alive).
    pub(crate) fn over_http(base: &str) -> Self {
        Self::over_http_from(base, None)
    }

    /// A client of the server listening at `base`, connecting from `local`
    /// when given.
    fn over_http_from(base: &str, local: Option<std::net::IpAddr>) -> Self {
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_local_address(local);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Self::with_transport(Transport::Http {
            base: base.trim_end_matches('/').to_owned(),
            client: Box::new(client),
        })
    }

    /// A client of a server already listening at `base`
    /// (`http://127.0.0.1:3000`): one the test started with
    /// `AppBuilder::serve`, say. Cookies are kept as with any client.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let client = autumn_test::TestClient::for_server("http://127.0.0.1:3000");
    /// client.get("/").send().await.assert_ok();
    /// # }
    /// ```
    pub fn for_server(base: &str) -> Self {
        Self::over_http(base)
    }

    /// A new client of the same server that connects from `address`, as a
    /// client on another machine would: for what is counted per client
    /// address (rate limits, `max_connections_per_client`). On Linux every
    /// address of `127.0.0.0/8` is this machine, so `127.0.0.2` is a second
    /// client without any setup. It starts with no cookies.
    ///
    /// # Panics
    ///
    /// For a client of an in-process app, which has no sockets to bind.
    pub fn from_address(&self, address: std::net::IpAddr) -> Self {
        match &self.transport {
            Transport::Http { base, .. } => Self::over_http_from(base, Some(address)),
            Transport::InProcess(_) => panic!(
                "an in-process app has no client addresses: serve the app on a socket and use TestClient::for_server"
            ),
        }
    }

    fn with_transport(transport: Transport) -> Self {
        Self {
            transport,
            cookies: Arc::default(),
        }
    }

    /// A request with any method.
    pub fn request(&self, method: Method, path: &str) -> TestRequest {
        TestRequest {
            client: self.clone(),
            method,
            path: path.to_owned(),
            headers: Vec::new(),
            body: Bytes::new(),
            error: None,
        }
    }

    /// A `GET` request.
    pub fn get(&self, path: &str) -> TestRequest {
        self.request(Method::GET, path)
    }

    /// A `POST` request.
    pub fn post(&self, path: &str) -> TestRequest {
        self.request(Method::POST, path)
    }

    /// A `PUT` request.
    pub fn put(&self, path: &str) -> TestRequest {
        self.request(Method::PUT, path)
    }

    /// A `PATCH` request.
    pub fn patch(&self, path: &str) -> TestRequest {
        self.request(Method::PATCH, path)
    }

    /// A `DELETE` request.
    pub fn delete(&self, path: &str) -> TestRequest {
        self.request(Method::DELETE, path)
    }

    /// Another client of the same app with a cookie jar of its own: a second
    /// browser, with no session until the app gives it one.
    pub fn new_browser(&self) -> TestClient {
        Self::with_transport(self.transport.clone())
    }

    /// The value of a cookie the client holds.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.jar().get(name).map(str::to_owned)
    }

    /// The app's router, for sending hand-made requests.
    ///
    /// # Panics
    ///
    /// For a client of a server on a socket
    /// ([`ServerProcess::client`](crate::ServerProcess::client)), which has
    /// no router in the test process.
    pub fn router(&self) -> &Router {
        match &self.transport {
            Transport::InProcess(router) => router,
            Transport::Http { base, .. } => {
                panic!("the client of the server at {base} has no router in the test process")
            }
        }
    }

    fn jar(&self) -> std::sync::MutexGuard<'_, CookieJar> {
        self.cookies
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request being put together; [`send`](Self::send) it.
#[derive(Debug)]
#[must_use = "call .send().await to send the request"]
pub struct TestRequest {
    client: TestClient,
    method: Method,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    error: Option<String>,
}

impl TestRequest {
    /// Adds a header.
    ///
    /// An invalid name or value makes [`send`](Self::send) panic naming it.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            (Ok(name), Ok(value)) => self.headers.push((name, value)),
            _ => self.error = Some(format!("invalid header {name}: {value:?}")),
        }
        self
    }

    /// Sends `form` as `application/x-www-form-urlencoded`.
    pub fn form<T: serde::Serialize + ?Sized>(mut self, form: &T) -> Self {
        match serde_urlencoded::to_string(form) {
            Ok(body) => self.typed_body("application/x-www-form-urlencoded", body),
            Err(error) => {
                self.error = Some(format!("cannot encode form: {error}"));
                self
            }
        }
    }

    /// Sends `json` as `application/json`.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, json: &T) -> Self {
        match serde_json::to_vec(json) {
            Ok(body) => self.typed_body("application/json", body),
            Err(error) => {
                self.error = Some(format!("cannot encode JSON: {error}"));
                self
            }
        }
    }

    /// Sends these bytes as the body, with whatever `content-type` was set.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    fn typed_body(mut self, content_type: &'static str, body: impl Into<Bytes>) -> Self {
        self.headers
            .push((CONTENT_TYPE, HeaderValue::from_static(content_type)));
        self.body(body)
    }

    /// Sends the request through the app (or, for a client of a running
    /// server, over a socket to it) and reads the whole response.
    ///
    /// A request to an in-process app without a `Host` header gets
    /// `Host: localhost` ([`DEFAULT_HOST`]), like a request to `run()` on a
    /// socket has one; a request over a socket carries the server's address.
    ///
    /// # Panics
    ///
    /// When the request was built with an invalid header, path or body, or
    /// a server on a socket does not answer.
    pub async fn send(self) -> TestResponse {
        if let Some(error) = self.error {
            panic!("{error}");
        }
        let uri = match &self.client.transport {
            Transport::InProcess(_) => self.path.clone(),
            Transport::Http { base, .. } => format!("{base}{}", self.path),
        };
        let mut request = match Request::builder()
            .method(self.method)
            .uri(&uri)
            .body(self.body)
        {
            Ok(request) => request,
            Err(error) => panic!("invalid request to {}: {error}", self.path),
        };
        let headers = request.headers_mut();
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        if !headers.contains_key(COOKIE)
            && let Some(cookies) = self.client.jar().header()
            && let Ok(value) = HeaderValue::try_from(cookies)
        {
            headers.insert(COOKIE, value);
        }
        let (parts, body) = match &self.client.transport {
            Transport::InProcess(router) => {
                // What a client on a socket always sends, so that an `Origin`
                // of `http://localhost` is this app's own, as it is behind
                // `run()`.
                if !request.headers().contains_key(HOST) {
                    request
                        .headers_mut()
                        .insert(HOST, HeaderValue::from_static(DEFAULT_HOST));
                }
                let response = match router.clone().oneshot(request.map(Body::from)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                let (parts, body) = response.into_parts();
                let body = match body.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(error) => panic!("the response body failed: {error}"),
                };
                (parts, body)
            }
            Transport::Http { client, .. } => {
                let response = match client.request(request.map(http_body_util::Full::new)).await {
                    Ok(response) => response,
                    Err(error) => panic!("the server at {uri} did not answer: {error}"),
                };
                let (parts, body) = response.into_parts();
                let body = match body.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(error) => panic!("the response body from {uri} failed: {error}"),
                };
                (parts, body)
            }
        };
        self.client.jar().store(&parts.headers);
        TestResponse::new(parts.status, parts.headers, body)
    }
}
