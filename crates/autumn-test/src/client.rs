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

/// The `Host` a request carries unless it sets one: the app is reached as
/// `http://localhost`, and a page of its own sends `Origin: http://localhost`.
pub const DEFAULT_HOST: &str = "localhost";

/// A client for an app built by [`TestApp`](crate::TestApp). Clones share the
/// app and the cookie jar, so concurrent requests can be sent from tasks.
#[derive(Debug, Clone)]
pub struct TestClient {
    router: Router,
    cookies: Arc<Mutex<CookieJar>>,
}

impl TestClient {
    pub(crate) fn new(router: Router) -> Self {
        Self {
            router,
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
        Self::new(self.router.clone())
    }

    /// The value of a cookie the client holds.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.jar().get(name).map(str::to_owned)
    }

    /// The app's router, for sending hand-made requests.
    pub fn router(&self) -> &Router {
        &self.router
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

    /// Sends the request through the app and reads the whole response.
    ///
    /// A request without a `Host` header gets `Host: localhost`
    /// ([`DEFAULT_HOST`]), like a request to `run()` on a socket has one.
    ///
    /// # Panics
    ///
    /// When the request was built with an invalid header, path or body.
    pub async fn send(self) -> TestResponse {
        if let Some(error) = self.error {
            panic!("{error}");
        }
        let mut request = match Request::builder()
            .method(self.method)
            .uri(&self.path)
            .body(Body::from(self.body))
        {
            Ok(request) => request,
            Err(error) => panic!("invalid request to {}: {error}", self.path),
        };
        let headers = request.headers_mut();
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        // What a client on a socket always sends, so that an `Origin` of
        // `http://localhost` is this app's own, as it is behind `run()`.
        if !headers.contains_key(HOST) {
            headers.insert(HOST, HeaderValue::from_static(DEFAULT_HOST));
        }
        if !headers.contains_key(COOKIE)
            && let Some(cookies) = self.client.jar().header()
            && let Ok(value) = HeaderValue::try_from(cookies)
        {
            headers.insert(COOKIE, value);
        }
        let response = match self.client.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        self.client.jar().store(&parts.headers);
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => panic!("the response body failed: {error}"),
        };
        TestResponse::new(parts.status, parts.headers, body)
    }
}
