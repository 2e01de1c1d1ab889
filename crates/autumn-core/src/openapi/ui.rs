//! The interactive page at `[openapi] ui_path`: Swagger UI, its script and
//! stylesheet shipped inside the crate (`assets/swagger-ui`), so the page
//! works offline and under the app's own `Content-Security-Policy`: no
//! CDN, no inline script (the page's one line of setup is a script file of
//! its own).

use std::io::Read as _;
use std::sync::OnceLock;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};

/// The Swagger UI release bundled, for the record in the page's source.
pub(crate) const SWAGGER_UI_VERSION: &str = "5.36.0";

/// One bundled file, stored gzip-compressed.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    gzip: &'static [u8],
    /// The file decompressed, on first use by a client that does not take
    /// gzip (every browser does; `curl` without `--compressed` does not).
    plain: &'static OnceLock<Bytes>,
}

static BUNDLE_PLAIN: OnceLock<Bytes> = OnceLock::new();
static CSS_PLAIN: OnceLock<Bytes> = OnceLock::new();

const BUNDLE: Asset = Asset {
    name: "swagger-ui-bundle.js",
    content_type: "text/javascript; charset=utf-8",
    gzip: include_bytes!("../../assets/swagger-ui/swagger-ui-bundle.js.gz"),
    plain: &BUNDLE_PLAIN,
};

const CSS: Asset = Asset {
    name: "swagger-ui.css",
    content_type: "text/css; charset=utf-8",
    gzip: include_bytes!("../../assets/swagger-ui/swagger-ui.css.gz"),
    plain: &CSS_PLAIN,
};

/// The setup script's file name, beside the bundled assets.
const INIT: &str = "init.js";

/// The paths the page and its files are served at, for the launch's check
/// that none is one of the app's own routes.
pub(crate) fn paths(ui_path: &str) -> [String; 4] {
    [
        ui_path.to_owned(),
        format!("{ui_path}/{}", BUNDLE.name),
        format!("{ui_path}/{}", CSS.name),
        format!("{ui_path}/{INIT}"),
    ]
}

/// `GET ui_path` (the page) and its three files; the page shows the
/// document at `document_path`.
pub(crate) fn routes(ui_path: &str, document_path: &str, title: &str) -> Router {
    let page = Bytes::from(page(ui_path, title));
    let init = Bytes::from(init_script(document_path));
    let [page_path, bundle_path, css_path, init_path] = paths(ui_path);
    Router::new()
        .route(
            &page_path,
            get(move || {
                let page = page.clone();
                async move { fresh("text/html; charset=utf-8", page) }
            }),
        )
        .route(
            &init_path,
            get(move || {
                let init = init.clone();
                async move { fresh("text/javascript; charset=utf-8", init) }
            }),
        )
        .route(
            &bundle_path,
            get(|headers: HeaderMap| async move { bundled(&BUNDLE, &headers) }),
        )
        .route(
            &css_path,
            get(|headers: HeaderMap| async move { bundled(&CSS, &headers) }),
        )
}

/// The page: Swagger UI's stylesheet and script, then the setup script.
fn page(ui_path: &str, title: &str) -> String {
    let title = crate::error_pages::escape_html(title);
    let ui_path = crate::error_pages::escape_html(ui_path);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n\
         <link rel=\"stylesheet\" href=\"{ui_path}/{css}\">\n</head>\n<body>\n\
         <!-- Swagger UI {SWAGGER_UI_VERSION}, bundled with Autumn -->\n\
         <div id=\"swagger-ui\"></div>\n\
         <script src=\"{ui_path}/{bundle}\"></script>\n\
         <script src=\"{ui_path}/{INIT}\"></script>\n</body>\n</html>\n",
        css = CSS.name,
        bundle = BUNDLE.name,
    )
}

/// The setup, a file of its own so the app's policy need not allow inline
/// scripts. The document's path is written as a JSON string, which is a
/// JavaScript string whatever it holds.
fn init_script(document_path: &str) -> String {
    let url = serde_json::Value::from(document_path).to_string();
    format!(
        "window.ui = SwaggerUIBundle({{\n  url: {url},\n  dom_id: \"#swagger-ui\",\n  \
         deepLinking: true,\n  tryItOutEnabled: false\n}});\n"
    )
}

/// A small response that may change with the configuration: revalidated
/// on every use.
fn fresh(content_type: &'static str, body: Bytes) -> impl axum::response::IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
}

/// A bundled file: compressed as stored when the client takes gzip, else
/// decompressed. It changes only with Autumn, so browsers keep it a day.
fn bundled(asset: &'static Asset, headers: &HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let mut response = if accepts_gzip(headers) {
        let mut response = Bytes::from_static(asset.gzip).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        response
    } else {
        asset
            .plain
            .get_or_init(|| decompress(asset))
            .clone()
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// The stored file decompressed. It was compressed when Autumn was built
/// and is checked by the tests, so it cannot be corrupt at run time; were
/// it, the client would get what decompressed, never a panic.
fn decompress(asset: &Asset) -> Bytes {
    let mut plain = Vec::with_capacity(asset.gzip.len() * 4);
    if let Err(error) = flate2::read::GzDecoder::new(asset.gzip).read_to_end(&mut plain) {
        tracing::error!(asset = asset.name, %error, "a bundled Swagger UI file did not decompress");
    }
    Bytes::from(plain)
}

/// Whether `Accept-Encoding` takes gzip: `gzip` or `*` listed without
/// `q=0`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let refused = parts.any(|parameter| {
                let parameter = parameter.trim().to_ascii_lowercase();
                parameter
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).expect("a header value"),
        );
        headers
    }

    #[test]
    fn gzip_is_taken_unless_refused() {
        assert!(accepts_gzip(&with("gzip, deflate, br")));
        assert!(accepts_gzip(&with("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&with("*")));
        assert!(!accepts_gzip(&with("gzip;q=0")));
        assert!(!accepts_gzip(&with("br, deflate")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_bundled_files_decompress_to_what_the_readme_records() {
        use sha2::Digest as _;
        for (asset, digest) in [
            (
                &BUNDLE,
                "b164c5a22535e40dae08c00271674a67e437ec195098c55fcedf8ffac7ac3c88",
            ),
            (
                &CSS,
                "7eb9f5a125e4bc9b3f0b71869b66d1a3d7c501f972f53d44ef91c2ae6c5bda5e",
            ),
        ] {
            let plain = decompress(asset);
            assert_eq!(
                hex::encode(sha2::Sha256::digest(&plain)),
                digest,
                "{}",
                asset.name
            );
        }
    }

    #[test]
    fn the_setup_script_quotes_the_document_path() {
        let script = init_script("/api/\"x\".json");
        assert!(script.contains(r#"url: "/api/\"x\".json""#), "{script}");
    }

    #[test]
    fn the_page_escapes_the_title() {
        let page = page("/openapi", "<Orders & co>");
        assert!(
            page.contains("<title>&lt;Orders &amp; co&gt;</title>"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "no inline script: {page}");
    }
}
