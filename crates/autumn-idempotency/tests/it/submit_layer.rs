//! The submit-token layer on a raw router: what it asks of the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::counting::CountingStore;
use crate::support::faulty::{Faults, FaultyStore};
use autumn_idempotency::submit::{SubmitToken, SubmitTokenLayer};
use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use tower::ServiceExt as _;

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn minting_costs_no_store_call_and_a_submission_costs_two() {
    let store = Arc::new(CountingStore::memory());
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() })
                .post(|| async { "created" }),
        )
        .layer(SubmitTokenLayer::new(store.clone()));

    let mut tokens = Vec::new();
    for _ in 0..3 {
        let (status, token) = send(
            &app,
            Request::get("/form").body(Body::empty()).expect("request"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        tokens.push(token);
    }
    let unguarded = Request::post("/form")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("title=no+token"))
        .expect("request");
    send(&app, unguarded).await;
    assert_eq!(
        store.calls(),
        0,
        "minting and unguarded posts touch no store"
    );

    let guarded = || {
        Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("_submit_token={}", tokens[0])))
            .expect("request")
    };
    assert_eq!(
        send(&app, guarded()).await,
        (StatusCode::OK, "created".to_owned())
    );
    assert_eq!(store.calls(), 2, "claim + finish");
    send(&app, guarded()).await;
    assert_eq!(store.calls(), 3, "a replay is one claim");
}

/// A router whose `POST /form` counts its runs, behind the layer.
fn counting_app(layer: SubmitTokenLayer) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() }).post(
                move |body: axum::body::Bytes| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        format!("received {} bytes", body.len())
                    }
                },
            ),
        )
        .layer(layer);
    (app, runs)
}

fn memory() -> Arc<MemoryIdempotencyStore> {
    Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)))
}

async fn new_token(app: &Router) -> String {
    let (status, token) = send(
        app,
        Request::get("/form").body(Body::empty()).expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    token
}

/// Every content type axum's `Form` takes as urlencoded is scanned: the same
/// token twice runs a `Form` handler once, whatever the spelling.
#[tokio::test]
async fn every_urlencoded_spelling_the_form_extractor_takes_is_guarded() {
    use std::collections::HashMap;

    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() }).post(
                move |axum::Form(form): axum::Form<HashMap<String, String>>| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        form.get("title").cloned().unwrap_or_default()
                    }
                },
            ),
        )
        .layer(SubmitTokenLayer::new(memory()));
    for content_type in [
        "application/x-www-form-urlencoded",
        "application/x-www-form-urlencoded; charset=UTF-8",
        "application/x-www-form-urlencoded;charset=utf-8",
        "application/x-www-form-urlencoded ; charset=utf-8",
        "application/x-www-form-urlencoded charset=utf-8",
        "application/x-www-form-urlencoded,text/plain",
    ] {
        let token = new_token(&app).await;
        let before = runs.load(Ordering::SeqCst);
        for _ in 0..2 {
            let post = Request::post("/form")
                .header("content-type", content_type)
                .body(Body::from(format!("title=Hi&_submit_token={token}")))
                .expect("request");
            assert_eq!(
                send(&app, post).await,
                (StatusCode::OK, "Hi".to_owned()),
                "{content_type}"
            );
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            before + 1,
            "{content_type}: the same token ran the handler twice"
        );
    }
}

fn multipart_body(boundary: &str, token: &str, file: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\n{token}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"a.bin\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// Every boundary spelling axum's `Multipart` reads is scanned with the
/// boundary it reads; one it cannot read gets a clear 400.
#[tokio::test]
async fn every_multipart_spelling_is_guarded_with_its_boundary() {
    let (app, runs) = counting_app(SubmitTokenLayer::new(memory()));
    for (content_type, boundary) in [
        ("multipart/form-data; boundary=XyZ", "XyZ"),
        ("multipart/form-data;boundary=\"XyZ\"", "XyZ"),
        ("Multipart/Form-Data; charset=utf-8; BOUNDARY=XyZ", "XyZ"),
        ("multipart/form-data; boundary=\"a;b c\"", "a;b c"),
    ] {
        let token = new_token(&app).await;
        let before = runs.load(Ordering::SeqCst);
        for _ in 0..2 {
            let post = Request::post("/form")
                .header("content-type", content_type)
                .body(Body::from(multipart_body(boundary, &token, b"data")))
                .expect("request");
            assert_eq!(send(&app, post).await.0, StatusCode::OK, "{content_type}");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            before + 1,
            "{content_type}: the same token ran the handler twice"
        );
    }
    // A type the extractor cannot read, on a body naming the field.
    let unreadable = Request::post("/form")
        .header("content-type", "multipart/form-data; boundary=\"XyZ")
        .body(Body::from(multipart_body("XyZ", "tok", b"data")))
        .expect("request");
    let (status, body) = send(&app, unreadable).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("form_malformed"), "{body}");
}

/// `exempt_paths` match whole segments.
#[tokio::test]
async fn exempt_paths_cover_whole_segments_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let handler = move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            "done"
        }
    };
    let app = Router::new()
        .route("/api", axum::routing::post(handler.clone()))
        .route("/api/x", axum::routing::post(handler.clone()))
        .route("/apiary", axum::routing::post(handler))
        .layer(SubmitTokenLayer::new(memory()).with_exempt_paths(vec!["/api".into()]));
    for (path, expected_runs) in [("/api", 2), ("/api/x", 2), ("/apiary", 1)] {
        let before = runs.load(Ordering::SeqCst);
        for _ in 0..2 {
            let post = Request::post(path)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(format!(
                    "_submit_token=same-token-for{}",
                    path.replace('/', "-")
                )))
                .expect("request");
            assert_eq!(send(&app, post).await.0, StatusCode::OK, "{path}");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst) - before,
            expected_runs,
            "{path}"
        );
    }
}

/// A multipart body streamed in chunks, the way a large upload arrives.
fn streamed(body: Vec<u8>, chunk: usize) -> Body {
    let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = body
        .chunks(chunk)
        .map(|c| Ok(axum::body::Bytes::copy_from_slice(c)))
        .collect();
    Body::from_stream(futures_util::stream::iter(chunks))
}

/// An upload larger than the scan limit whose file holds the field's name
/// (and a whole part header naming it) goes through: it is content.
#[tokio::test]
async fn a_file_that_contains_the_field_name_is_uploaded() {
    let (app, runs) = counting_app(SubmitTokenLayer::new(memory()).with_max_form_bytes(1024));
    let mut file = vec![b'x'; 4096];
    file.extend_from_slice(
        b"\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\nsneaky\r\n",
    );
    file.extend_from_slice(&[b'y'; 4096]);
    // No token field: the file comes first and the rest is watched.
    let mut body =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"a.bin\"\r\n\r\n"
            .to_vec();
    body.extend_from_slice(&file);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let length = body.len();
    let post = Request::post("/form")
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(streamed(body, 700))
        .expect("request");
    assert_eq!(
        send(&app, post).await,
        (StatusCode::OK, format!("received {length} bytes"))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A part naming the field after the scanned prefix fails the body; one
/// cut off by the scan limit is refused before the handler runs.
#[tokio::test]
async fn a_field_after_the_scanned_prefix_never_reaches_the_handler() {
    let (app, runs) = counting_app(SubmitTokenLayer::new(memory()).with_max_form_bytes(1024));
    let late = |padding: usize| {
        let mut body =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"a.bin\"\r\n\r\n"
                .to_vec();
        body.extend_from_slice(&vec![b'x'; padding]);
        body.extend_from_slice(
            b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\ntok-late\r\n--XyZ--\r\n",
        );
        body
    };
    // Well after the prefix: the handler's body read fails.
    let post = Request::post("/form")
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(streamed(late(4096), 500))
        .expect("request");
    let (status, _) = send(&app, post).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the body never reached the handler"
    );
    // The field's value straddles the end of the prefix (1025 bytes, read
    // a byte at a time): it starts at byte 1020.
    let head = late(0).len() - "tok-late\r\n--XyZ--\r\n".len();
    let straddling = late(1020 - head);
    assert_eq!(&straddling[1020..1028], b"tok-late");
    let post = Request::post("/form")
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(streamed(straddling, 1))
        .expect("request");
    let (status, body) = send(&app, post).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("submit_token_late"), "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// An urlencoded `POST /echo` that answers the bytes it received, behind
/// `layer`, and the same route without it.
fn echo_apps(layer: SubmitTokenLayer) -> (Router, Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let route = |runs: Arc<AtomicUsize>| {
        Router::new().route(
            "/echo",
            axum::routing::post(move |body: axum::body::Bytes| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    body
                }
            }),
        )
    };
    (
        route(runs.clone()).layer(layer),
        route(Arc::new(AtomicUsize::new(0))),
        runs,
    )
}

fn urlencoded(body: Body) -> Request<Body> {
    Request::post("/echo")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .expect("request")
}

/// A form without the token field reaches the route exactly as it would
/// without the layer: past the scan limit, with bad `%` escapes, streamed
/// in any pieces. The store is never asked.
#[tokio::test]
async fn a_form_without_the_field_passes_unchanged() {
    let store = Arc::new(CountingStore::memory());
    let (guarded, bare, runs) =
        echo_apps(SubmitTokenLayer::new(store.clone()).with_max_form_bytes(1024));
    let mut large = b"title=".to_vec();
    large.extend_from_slice(&[b'x'; 5000]);
    large.extend_from_slice(b"&note=100%&name=%zz+%4&_submit_tokens=not-the-field");
    let bodies: Vec<Vec<u8>> = vec![
        b"title=%zz&note=%".to_vec(),
        b"name=_submit_token&_submit_token%zz=x".to_vec(),
        large.clone(),
    ];
    for body in bodies {
        for chunk in [1, 333, 100_000] {
            let through = send(&guarded, urlencoded(streamed(body.clone(), chunk))).await;
            let without = send(&bare, urlencoded(streamed(body.clone(), chunk))).await;
            assert_eq!(through, without, "chunk {chunk}");
            assert_eq!(through.0, StatusCode::OK);
            assert_eq!(through.1.as_bytes(), &body[..]);
        }
    }
    // One that fails to arrive: the same bytes, then the same failure.
    let through = send(&guarded, urlencoded(failing(b"title=%zz".to_vec(), 4))).await;
    let without = send(&bare, urlencoded(failing(b"title=%zz".to_vec(), 4))).await;
    assert_eq!(through, without);
    assert_eq!(runs.load(Ordering::SeqCst), 9);
    assert_eq!(store.calls(), 0, "no token, no store call");
}

/// A form that carries the field is still checked: strictly within the
/// scan limit, refused past it, and a field that first appears after the
/// scanned prefix fails the body before the handler can read it.
#[tokio::test]
async fn a_form_with_the_field_is_still_checked() {
    let (guarded, _, runs) = echo_apps(SubmitTokenLayer::new(memory()).with_max_form_bytes(1024));
    let (status, body) = send(
        &guarded,
        urlencoded(Body::from("_submit_token=tok-1&title=%zz")),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("form_malformed"), "{body}");

    let mut early = b"_submit_token=tok-2&title=".to_vec();
    early.extend_from_slice(&[b'x'; 5000]);
    let (status, body) = send(&guarded, urlencoded(streamed(early, 500))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body.contains("form_too_large"), "{body}");

    for name in ["_submit_token", "_submit%5Ftoken"] {
        // Late, or cut by the end of the prefix; read in any pieces.
        for padding in [5000, 1024 - "title=".len() - 3] {
            let mut late = b"title=".to_vec();
            late.extend_from_slice(&vec![b'x'; padding]);
            late.extend_from_slice(format!("&{name}=tok-late&more=1").as_bytes());
            for chunk in [1, 700] {
                let (status, body) =
                    send(&guarded, urlencoded(streamed(late.clone(), chunk))).await;
                // Seen whole in the prefix (which ends at a chunk's end):
                // 413; seen after it: the body fails under the handler.
                let expected = if padding + 30 < 1024 || chunk == 1 || padding > 2000 {
                    (StatusCode::BAD_REQUEST, "field must come within the first")
                } else {
                    (StatusCode::PAYLOAD_TOO_LARGE, "form_too_large")
                };
                assert_eq!(status, expected.0, "{name} {padding} {chunk}: {body}");
                assert!(body.contains(expected.1), "{body}");
            }
        }
        // The last name of the body, without a value.
        let mut last = b"title=".to_vec();
        last.extend_from_slice(&[b'x'; 3000]);
        last.extend_from_slice(format!("&{name}").as_bytes());
        let (status, _) = send(&guarded, urlencoded(streamed(last, 256))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name} last");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no unguarded token ran");
}

/// `POST /echo` answering the bytes it received and `POST /upload`
/// reading the body with axum's `Multipart` (its refusal, if any, is the
/// answer), behind `layer`, and the same routes without it; and how many
/// times the handlers ran, behind the layer and without it.
fn multipart_apps(layer: SubmitTokenLayer) -> (Router, Router, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let routes = |runs: Arc<AtomicUsize>| {
        let echo_runs = runs.clone();
        Router::new()
            .route(
                "/echo",
                axum::routing::post(move |body: axum::body::Bytes| {
                    let runs = echo_runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        body
                    }
                }),
            )
            .route(
                "/upload",
                axum::routing::post(move |mut form: axum::extract::Multipart| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let mut seen = String::new();
                        loop {
                            match form.next_field().await {
                                Ok(Some(field)) => {
                                    let name = field.name().unwrap_or("?").to_owned();
                                    match field.bytes().await {
                                        Ok(bytes) => seen += &format!("{name}={};", bytes.len()),
                                        Err(error) => return Err(error.into_response()),
                                    }
                                }
                                Ok(None) => return Ok(seen),
                                Err(error) => return Err(error.into_response()),
                            }
                        }
                    }
                }),
            )
    };
    let bare_runs = Arc::new(AtomicUsize::new(0));
    (
        routes(runs.clone()).layer(layer),
        routes(bare_runs.clone()),
        runs,
        bare_runs,
    )
}

use axum::response::IntoResponse as _;

fn multipart_post(path: &str, content_type: &str, body: Body) -> Request<Body> {
    Request::post(path)
        .header("content-type", content_type)
        .body(body)
        .expect("request")
}

/// A body that sends `bytes` in `chunk`-byte pieces, then fails, as one
/// whose client went away mid-upload.
fn failing(bytes: Vec<u8>, chunk: usize) -> Body {
    let mut pieces: Vec<Result<axum::body::Bytes, std::io::Error>> = bytes
        .chunks(chunk)
        .map(|c| Ok(axum::body::Bytes::copy_from_slice(c)))
        .collect();
    pieces.push(Err(std::io::Error::other("client went away")));
    Body::from_stream(futures_util::stream::iter(pieces))
}

const PART: &str = "--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nHello\r\n";

/// Multipart bodies that carry no token field reach the route exactly as
/// they would without the layer, however broken their framing: no boundary
/// parameter, one the layer used to refuse, a boundary not followed by a
/// line break, a part without `Content-Disposition` or with endless
/// headers, a body cut short or failing to arrive, within the scan limit or
/// past it. The route's own parser refuses them, or not, as it would alone;
/// the store is never asked.
#[tokio::test]
async fn a_malformed_multipart_body_without_the_field_passes_unchanged() {
    let store = Arc::new(CountingStore::memory());
    let (guarded, bare, runs, bare_runs) =
        multipart_apps(SubmitTokenLayer::new(store.clone()).with_max_form_bytes(1024));
    let long = "b".repeat(100);
    let mut large_broken = PART.as_bytes().to_vec();
    large_broken.extend_from_slice(b"--XyZjunk\r\n");
    large_broken.extend_from_slice(&[b'x'; 4000]);
    let mut broken_tail =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\n".to_vec();
    broken_tail.extend_from_slice(&[b'x'; 3000]);
    broken_tail.extend_from_slice(b"\r\n--XyZ\r\nNo-Disposition: here\r\n\r\nv\r\n--XyZ--\r\n");
    let cases: Vec<(&str, String, Vec<u8>)> = vec![
        ("no boundary parameter", "multipart/form-data".into(), format!("{PART}--XyZ--\r\n").into_bytes()),
        ("unparseable type", "multipart/form-data; boundary=\"XyZ".into(), format!("{PART}--XyZ--\r\n").into_bytes()),
        ("a 100-character boundary", format!("multipart/form-data; boundary={long}"),
            format!("--{long}\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nHi\r\n--{long}--\r\n").into_bytes()),
        ("no boundary in the body", "multipart/form-data; boundary=XyZ".into(), b"just text".to_vec()),
        ("junk after a boundary", "multipart/form-data; boundary=XyZ".into(), format!("{PART}--XyZjunk\r\n--XyZ--\r\n").into_bytes()),
        ("no closing boundary", "multipart/form-data; boundary=XyZ".into(), PART.as_bytes().to_vec()),
        ("cut in a part's headers", "multipart/form-data; boundary=XyZ".into(), format!("{PART}--XyZ\r\nContent-Disp").into_bytes()),
        ("no Content-Disposition", "multipart/form-data; boundary=XyZ".into(), format!("{PART}--XyZ\r\nX-A: b\r\n\r\nv\r\n--XyZ--\r\n").into_bytes()),
        ("endless part headers", "multipart/form-data; boundary=XyZ".into(),
            format!("--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: {}\r\n\r\nv\r\n--XyZ--\r\n", "p".repeat(9000)).into_bytes()),
        ("broken in a large prefix", "multipart/form-data; boundary=XyZ".into(), large_broken),
        ("broken after the prefix", "multipart/form-data; boundary=XyZ".into(), broken_tail),
    ];
    for (case, content_type, body) in &cases {
        for path in ["/echo", "/upload"] {
            for chunk in [1, 300, 100_000] {
                let through = send(
                    &guarded,
                    multipart_post(path, content_type, streamed(body.clone(), chunk)),
                )
                .await;
                let without = send(
                    &bare,
                    multipart_post(path, content_type, streamed(body.clone(), chunk)),
                )
                .await;
                assert_eq!(through, without, "{case}, {path}, chunk {chunk}");
                if path == "/echo" {
                    assert_eq!(through.0, StatusCode::OK, "{case}");
                    assert_eq!(through.1.as_bytes(), &body[..], "{case}: byte for byte");
                }
            }
        }
        // Failing to arrive: the route sees the same bytes, then the same
        // failure.
        let through = send(
            &guarded,
            multipart_post("/echo", content_type, failing(body.clone(), 200)),
        )
        .await;
        let without = send(
            &bare,
            multipart_post("/echo", content_type, failing(body.clone(), 200)),
        )
        .await;
        assert_eq!(through, without, "{case}, failing");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            bare_runs.load(Ordering::SeqCst),
            "{case}: the handlers ran as often as without the layer"
        );
    }
    assert!(runs.load(Ordering::SeqCst) > 50);
    assert_eq!(store.calls(), 0, "no token, no store call");
}

/// A multipart body that names the token field is still refused when its
/// framing is broken, wherever the break is: a token is never taken from a
/// body read in part, and never skipped.
#[tokio::test]
async fn a_malformed_multipart_body_with_the_field_is_refused() {
    let (guarded, _, runs, _) =
        multipart_apps(SubmitTokenLayer::new(memory()).with_max_form_bytes(1024));
    let token_part =
        "--XyZ\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\ntok-1\r\n";
    let mut large = format!("{PART}--XyZjunk\r\n").into_bytes();
    large.extend_from_slice(&[b'x'; 3000]);
    large.extend_from_slice(token_part.as_bytes());
    let mut late =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\n".to_vec();
    late.extend_from_slice(&[b'x'; 3000]);
    late.extend_from_slice(b"\r\n--XyZjunk\r\n");
    late.extend_from_slice(token_part.as_bytes());
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "no boundary parameter",
            "multipart/form-data",
            format!("{token_part}--XyZ--\r\n").into_bytes(),
        ),
        (
            "unparseable type",
            "multipart/form-data; boundary=\"XyZ",
            format!("{token_part}--XyZ--\r\n").into_bytes(),
        ),
        (
            "no closing boundary",
            "multipart/form-data; boundary=XyZ",
            token_part.as_bytes().to_vec(),
        ),
        (
            "junk after the field",
            "multipart/form-data; boundary=XyZ",
            format!("{token_part}--XyZjunk\r\n--XyZ--\r\n").into_bytes(),
        ),
        (
            "junk before the field",
            "multipart/form-data; boundary=XyZ",
            format!("{PART}--XyZjunk\r\n{token_part}--XyZ--\r\n").into_bytes(),
        ),
        (
            "no Content-Disposition before it",
            "multipart/form-data; boundary=XyZ",
            format!("--XyZ\r\nX-A: b\r\n\r\nv\r\n{token_part}--XyZ--\r\n").into_bytes(),
        ),
        (
            "broken before it, past the prefix",
            "multipart/form-data; boundary=XyZ",
            large,
        ),
        (
            "broken after the prefix, then the field",
            "multipart/form-data; boundary=XyZ",
            late,
        ),
    ];
    for (case, content_type, body) in &cases {
        // Broken past the scan limit, the field is found while the body
        // streams to the handler: its read fails (the route's extractor
        // says with what status), and the token is never read.
        let past_prefix = case.contains("past the prefix") || case.contains("after the prefix");
        for path in ["/echo", "/upload"] {
            for chunk in [1, 300, 100_000] {
                let before = runs.load(Ordering::SeqCst);
                let (status, answer) = send(
                    &guarded,
                    multipart_post(path, content_type, streamed(body.clone(), chunk)),
                )
                .await;
                let context = format!("{case}, {path}, chunk {chunk}: {answer}");
                if past_prefix && path == "/upload" {
                    assert!(
                        status.is_client_error() || status.is_server_error(),
                        "{context}"
                    );
                    assert!(!answer.contains("_submit_token="), "{context}");
                } else {
                    assert_eq!(status, StatusCode::BAD_REQUEST, "{context}");
                    assert_eq!(runs.load(Ordering::SeqCst), before, "ran: {context}");
                }
            }
        }
    }
    // A body that fails after naming the field.
    let (status, answer) = send(
        &guarded,
        multipart_post(
            "/echo",
            "multipart/form-data; boundary=XyZ",
            failing(token_part.as_bytes().to_vec(), 7),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer.contains("form_malformed"), "{answer}");
}

/// Counts the warnings logged while it is the default subscriber.
struct Warnings(Arc<AtomicUsize>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A page carrying a token is never left cacheable by a shared cache, even
/// when its handler says so; the override is logged once, not per request.
/// (The only test in this binary whose pages ask for a shared cache: the
/// warning is once per process.)
#[tokio::test]
async fn a_page_with_a_token_is_kept_out_of_shared_caches() {
    use http::header::CACHE_CONTROL;

    let warnings = Arc::new(AtomicUsize::new(0));
    let _default = tracing::subscriber::set_default(Warnings(warnings.clone()));
    let page = |cache_control: &'static str, with_token: bool| {
        get(move |token: SubmitToken| async move {
            let body = if with_token {
                token.token().to_owned()
            } else {
                String::new()
            };
            ([(CACHE_CONTROL, cache_control)], body)
        })
    };
    let app = Router::new()
        .route("/public", page("public, max-age=600", true))
        .route("/max-age", page("max-age=600", true))
        .route("/private", page("private, max-age=60", true))
        .route("/no-store", page("no-store", true))
        .route("/no-token", page("public, max-age=600", false))
        .route(
            "/plain",
            get(|token: SubmitToken| async move { token.token().to_owned() }),
        )
        .layer(SubmitTokenLayer::new(memory()));
    let cache_control = |path: &'static str| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(Request::get(path).body(Body::empty()).expect("request"))
                .await
                .expect("infallible");
            response
                .headers()
                .get(CACHE_CONTROL)
                .map(|v| v.to_str().expect("ascii").to_owned())
        }
    };
    for (path, expected) in [
        ("/public", "private, no-cache"),
        ("/public", "private, no-cache"),
        ("/max-age", "private, no-cache"),
        ("/private", "private, max-age=60"),
        ("/no-store", "no-store"),
        ("/no-token", "public, max-age=600"),
        ("/plain", "private, no-cache"),
    ] {
        assert_eq!(
            cache_control(path).await.as_deref(),
            Some(expected),
            "{path}"
        );
    }
    assert_eq!(
        warnings.load(Ordering::SeqCst),
        1,
        "one warning, not one per request"
    );
}

/// A form app over `store` whose POST counts its runs and answers `size`
/// bytes.
fn form_app(
    store: Arc<dyn IdempotencyStore>,
    size: usize,
    configure: impl FnOnce(SubmitTokenLayer) -> SubmitTokenLayer,
) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() }).post(
                move || async move {
                    let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    format!("{run}{}", ".".repeat(size))
                },
            ),
        )
        .layer(configure(SubmitTokenLayer::new(store)));
    (app, runs)
}

async fn mint(app: &Router) -> String {
    send(
        app,
        Request::get("/form").body(Body::empty()).expect("request"),
    )
    .await
    .1
}

fn post(token: &str) -> Request<Body> {
    Request::post("/form")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("_submit_token={token}")))
        .expect("request")
}

#[tokio::test]
async fn a_response_over_the_record_limit_is_sent_whole_and_never_runs_twice() {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    let metrics = Arc::new(autumn_idempotency::IdempotencyMetrics::new());
    let (app, runs) = form_app(store, 100, |layer| {
        layer
            .with_max_record_bytes(50)
            .with_metrics(metrics.clone())
    });
    let token = mint(&app).await;
    let (status, body) = send(&app, post(&token)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, format!("1{}", ".".repeat(100)), "every byte is sent");
    // Not recorded, but the handler ran: the resubmission is refused.
    let (status, again) = send(&app, post(&token)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let problem: serde_json::Value = serde_json::from_str(&again).expect("a problem document");
    assert_eq!(problem["code"], "submit_token_response_not_recorded");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let snapshot = metrics.snapshot();
    assert_eq!(snapshot.unrecorded_too_large, 1);
    assert_eq!(snapshot.conflicts, 1);
    assert_eq!(snapshot.hits, 0);
}

/// A memory store whose operations fail when its `Faults` say so.
fn faulty_memory() -> (Arc<FaultyStore>, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let store = Arc::new(FaultyStore {
        inner: Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600))),
        faults: faults.clone(),
        on_lock: Box::new(|| {}),
        renew_gate: None,
    });
    (store, faults)
}

#[tokio::test]
async fn a_claim_that_locks_then_fails_leaves_the_token_free() {
    let (store, faults) = faulty_memory();
    let (app, runs) = form_app(store, 0, |layer| layer);
    let token = mint(&app).await;
    // The store took the lock but its reply was lost.
    faults.lock_then_fail.store(true, Ordering::SeqCst);
    let (status, _) = send(&app, post(&token)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    faults.lock_then_fail.store(false, Ordering::SeqCst);
    // Without the release, the token would stay locked for its 24 h TTL.
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let answer = send(&app, post(&token)).await;
            if answer.0 != StatusCode::CONFLICT {
                break answer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the failed claim was released: the post ran");
    assert_eq!(answer, (StatusCode::OK, "1".to_owned()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
#[tokio::test]
async fn a_full_memory_store_answers_503_with_retry_after() {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)).with_max_entries(1));
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() })
                .post(|| async { "created" }),
        )
        .layer(SubmitTokenLayer::new(store));
    let mint = || async {
        send(
            &app,
            Request::get("/form").body(Body::empty()).expect("request"),
        )
        .await
        .1
    };
    let submit = |token: String| {
        Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("_submit_token={token}")))
            .expect("request")
    };
    let (first, second) = (mint().await, mint().await);
    assert_eq!(
        send(&app, submit(first.clone())).await,
        (StatusCode::OK, "created".to_owned())
    );

    let response = app
        .clone()
        .oneshot(submit(second))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(
        response.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/problem+json"[..])
    );
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
    assert_eq!(problem["code"], "submit_token_store_full");
    // The consumed token still replays from the full store.
    assert_eq!(
        send(&app, submit(first)).await,
        (StatusCode::OK, "created".to_owned())
    );
}

#[tokio::test]
#[should_panic(expected = "polled after completion")]
async fn a_guarded_response_future_polled_after_completion_panics() {
    use tower::{Layer as _, Service as _};
    let router = Router::new().route("/form", axum::routing::post(|| async { "posted" }));
    let mut service = SubmitTokenLayer::new(memory()).layer(router);
    let request = Request::post("/form")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("_submit_token=tok-polled-twice"))
        .expect("request");
    let service = service.ready().await.expect("ready");
    let mut future = std::pin::pin!(service.call(request));
    let first = std::future::poll_fn(|cx| future.as_mut().poll(cx)).await;
    assert!(first.is_ok());
    let _ = std::future::poll_fn(|cx| future.as_mut().poll(cx)).await;
}

/// A duplicate waits for the first submission on the layer's clock: moving a
/// manual clock past the wait ends it with 409, however long the wait is.
#[tokio::test]
async fn a_waiting_duplicate_gives_up_on_the_layers_clock() {
    use autumn_idempotency::clock::ManualClock;
    let clock = Arc::new(ManualClock::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());
    let (on_start, on_finish) = (started.clone(), finish.clone());
    let app = Router::new()
        .route(
            "/form",
            axum::routing::post(move || {
                let (on_start, on_finish) = (on_start.clone(), on_finish.clone());
                async move {
                    on_start.notify_one();
                    on_finish.notified().await;
                    "done"
                }
            }),
        )
        .layer(
            SubmitTokenLayer::new(memory())
                .with_in_flight_wait(Duration::from_secs(3600))
                .with_clock(clock.clone()),
        );
    let form = || {
        Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from("_submit_token=tok-waiting"))
            .expect("request")
    };
    let first = tokio::spawn(app.clone().oneshot(form()));
    started.notified().await;
    let duplicate = tokio::spawn({
        let app = app.clone();
        async move { send(&app, form()).await }
    });
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !duplicate.is_finished() {
            clock.advance(Duration::from_secs(3601));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        duplicate.await.expect("duplicate")
    })
    .await
    .expect("the wait ended when the clock moved");
    assert_eq!(waited.0, StatusCode::CONFLICT);
    assert!(waited.1.contains("submit_token_in_flight"), "{}", waited.1);
    finish.notify_one();
    let first = first.await.expect("first").expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_store_that_cannot_be_asked_answers_503_with_retry_after_and_runs_nothing() {
    let (store, faults) = faulty_memory();
    let (app, runs) = form_app(store, 0, |layer| layer);
    let token = mint(&app).await;
    faults.get.store(true, Ordering::SeqCst);
    let response = app.clone().oneshot(post(&token)).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Like the idempotency layer's 503: the client may try again shortly.
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
    assert_eq!(problem["code"], "submit_token_store_unavailable");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler did not run");
    // Once the store answers again, the same token is processed once.
    faults.get.store(false, Ordering::SeqCst);
    assert_eq!(
        send(&app, post(&token)).await,
        (StatusCode::OK, "1".to_owned())
    );
}
