//! The benches' async HTTP client: hyper's pooled HTTP/1 client with a per-request
//! timeout, answering status, ETag, body and the request's wall time.

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, ETAG, HeaderValue, IF_NONE_MATCH};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as Pooled;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::{Duration, Instant};

/// No request of a bench may take longer (a slower answer counts as an error).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// A pooled client for one server; cheap to clone.
#[derive(Clone)]
pub(crate) struct Client {
    base: String,
    pooled: Pooled<HttpConnector, Full<Bytes>>,
}

/// An answer with the time it took from sending to the last body byte.
#[derive(Debug)]
pub(crate) struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// The `ETag` header, if any.
    pub etag: Option<String>,
    /// The whole body.
    pub body: Bytes,
    /// Send to last body byte.
    pub elapsed: Duration,
}

impl Answer {
    /// The body as JSON of a 2xx answer; an error naming status and body otherwise.
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T> {
        anyhow::ensure!(
            self.status.is_success(),
            "HTTP {}: {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        serde_json::from_slice(&self.body).context("decoding JSON answer")
    }
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`).
    pub(crate) fn new(base: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let pooled = Pooled::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self {
            base: base.trim_end_matches('/').to_string(),
            pooled,
        }
    }

    /// Sends one request to `path` (under the base URL) and reads the whole answer.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        if_none_match: Option<&str>,
        body: Bytes,
    ) -> Result<Answer> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        if let Some(tag) = if_none_match {
            req = req.header(IF_NONE_MATCH, tag);
        }
        let req = req.body(Full::new(body)).context("building request")?;
        let start = Instant::now();
        let exchange = async {
            let resp = self
                .pooled
                .request(req)
                .await
                .with_context(|| format!("{path}: sending"))?;
            let status = resp.status();
            let etag = resp
                .headers()
                .get(ETAG)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_string);
            let body = resp
                .into_body()
                .collect()
                .await
                .with_context(|| format!("{path}: reading body"))?
                .to_bytes();
            anyhow::Ok((status, etag, body))
        };
        let (status, etag, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .with_context(|| format!("{path}: no answer in {TIMEOUT:?}"))??;
        Ok(Answer {
            status,
            etag,
            body,
            elapsed: start.elapsed(),
        })
    }

    /// `GET path`, optionally conditional on an ETag.
    pub(crate) async fn get(&self, path: &str, if_none_match: Option<&str>) -> Result<Answer> {
        self.send(Method::GET, path, None, if_none_match, Bytes::new())
            .await
    }

    /// `POST path` with a JSON body.
    pub(crate) async fn post_json(&self, path: &str, body: &impl Serialize) -> Result<Answer> {
        let body = Bytes::from(serde_json::to_vec(body)?);
        self.send(Method::POST, path, Some("application/json"), None, body)
            .await
    }
}
