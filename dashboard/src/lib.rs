//! The operator's web dashboard, served by the server at `/`.
//!
//! Plain HTML, CSS and vanilla JavaScript modules, embedded in the binary at
//! build time (no CDN, no JS build step): the page reads the public REST API
//! from the browser (`/api/v1/topology`, `/rnics`, `/sla/latest`, `/sla`,
//! `/problems`, `/paths`) and draws the ToR×ToR heatmap, the RNIC status grid,
//! the problem list and a per-ToR-pair drill-down. Each panel degrades on its
//! own when its endpoint fails; with bearer-token auth on, the page asks for a
//! token and keeps it in the browser's localStorage.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!("../assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// The page served at `/`.
const INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");

/// Everything served under `/assets/`.
const ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("format.js", JS),
    asset!("tasks.js", JS),
    asset!("heatmap.js", JS),
    asset!("rnics.js", JS),
    asset!("problems.js", JS),
    asset!("drilldown.js", JS),
    asset!("sla.js", JS),
];

/// Only our own files: no inline script, no third-party origin.
const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                   base-uri 'none'; frame-ancestors 'none'";

fn serve(a: &Asset) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            ),
            // Small files: revalidate so an upgraded server is picked up at once.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
        ],
        a.body,
    )
        .into_response()
}

async fn index() -> Response {
    serve(&INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => serve(a),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The dashboard's routes: `/` (the page) and `/assets/{name}` (its CSS and JS
/// modules). Stateless; merge it into the server's router. Both routes are
/// meant to stay open under API auth: the page asks for a token itself.
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves the router on an ephemeral port; returns the base URL.
    fn serve_router() -> String {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            rt.block_on(async { axum::serve(listener, router()).await })
                .unwrap()
        });
        format!("http://{addr}")
    }

    fn fetch(url: &str) -> (u16, String, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent.get(url).call().unwrap();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (
            resp.status().as_u16(),
            ct,
            resp.body_mut().read_to_string().unwrap(),
        )
    }

    /// Quoted `./name.js` / `/assets/name` references in a text.
    fn references(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for prefix in ["'./", "\"./", "'/assets/", "\"/assets/"] {
            for (i, _) in text.match_indices(prefix) {
                let rest = &text[i + prefix.len()..];
                let end = rest.find(['\'', '"']).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
            }
        }
        out
    }

    #[test]
    fn page_and_every_asset_it_references_are_served() {
        let base = serve_router();
        let (status, ct, page) = fetch(&format!("{base}/"));
        assert_eq!(status, 200);
        assert!(ct.starts_with("text/html"), "{ct}");
        let mut wanted = references(&page);
        assert!(wanted.contains(&"app.js".to_string()), "{wanted:?}");
        assert!(wanted.contains(&"style.css".to_string()), "{wanted:?}");
        let mut seen = Vec::new();
        // Follow module imports transitively: a missing module breaks the whole page.
        while let Some(name) = wanted.pop() {
            if seen.contains(&name) {
                continue;
            }
            let (status, ct, body) = fetch(&format!("{base}/assets/{name}"));
            assert_eq!(status, 200, "{name} is referenced but not served");
            let expected = if name.ends_with(".js") {
                "text/javascript"
            } else {
                "text/css"
            };
            assert!(ct.starts_with(expected), "{name}: {ct}");
            wanted.extend(references(&body));
            seen.push(name);
        }
        assert_eq!(
            seen.len(),
            ASSETS.len(),
            "every embedded asset is used: {seen:?}"
        );
    }

    #[test]
    fn unknown_assets_are_not_found() {
        let base = serve_router();
        for path in ["/assets/nope.js", "/assets/..%2FCargo.toml", "/assets/"] {
            let (status, _, _) = fetch(&format!("{base}{path}"));
            assert_eq!(status, 404, "{path}");
        }
    }
}
