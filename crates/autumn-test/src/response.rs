use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// A whole response, read. Its assertions point at the test line that
/// failed, and show the body.
#[derive(Debug, Clone)]
pub struct TestResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl TestResponse {
    pub(crate) fn new(status: StatusCode, headers: HeaderMap, body: Bytes) -> Self {
        Self {
            status,
            headers,
            body,
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The first value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// All headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body as bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    ///
    /// # Panics
    ///
    /// When the body is not JSON of type `T`, showing the body.
    #[track_caller]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        match serde_json::from_slice(&self.body) {
            Ok(value) => value,
            Err(error) => panic!(
                "response body is not the expected JSON ({error}): {}",
                self.text()
            ),
        }
    }

    /// Asserts the status is `200 OK`.
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        self.assert_status(StatusCode::OK)
    }

    /// Asserts the status is `status`.
    #[track_caller]
    pub fn assert_status(&self, status: impl TryInto<StatusCode>) -> &Self {
        let Ok(expected) = status.try_into() else {
            panic!("assert_status was given an invalid status code");
        };
        assert!(
            self.status == expected,
            "expected status {expected}, got {}; body: {}",
            self.status,
            self.text()
        );
        self
    }

    /// Asserts header `name` is `value`.
    #[track_caller]
    pub fn assert_header(&self, name: &str, value: &str) -> &Self {
        assert_eq!(
            self.header(name),
            Some(value),
            "header {name}; status {}, body: {}",
            self.status,
            self.text()
        );
        self
    }
}
