//! Calls to another service's HTTP API: its replicas taken in turn, idempotent calls retried
//! with exponential backoff on connect errors, timeouts and 5xx answers. The typed clients
//! (`stock_client`, `order_client`) are built on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::Method;
use seckill_common::ErrorBody;
use seckill_common::config::{CLIENT_POOL_IDLE, UpstreamSettings, split_urls};
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, Trust};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No replica answered, or each answered 5xx, within the retries.
    #[error("{0}")]
    Unavailable(String),
    /// The service answered a 4xx: the request was refused on its merits.
    #[error("refused ({status}): {} {}", body.code, body.message)]
    Refused { status: u16, body: ErrorBody },
    #[error("answered something unreadable: {0}")]
    Protocol(String),
}

impl UpstreamError {
    fn retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// A 404 answer.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Refused { status: 404, .. })
    }
}

pub struct Upstream {
    /// For messages: `stock-service`, `order-service`.
    service: &'static str,
    /// Signs each call with the key of the link to `to`.
    trust: Arc<Trust>,
    to: Peer,
    http: reqwest::Client,
    replicas: Vec<String>,
    next: AtomicUsize,
    backoff: ExponentialBuilder,
}

impl Upstream {
    /// `urls` is a URL or a comma-separated list of replicas; `key` names its setting.
    pub fn new(
        service: &'static str,
        trust: Arc<Trust>,
        to: Peer,
        urls: &str,
        key: &str,
        settings: &UpstreamSettings,
    ) -> anyhow::Result<Self> {
        let replicas = split_urls(urls);
        anyhow::ensure!(!replicas.is_empty(), "{key} names no URL");
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .timeout(Duration::from_millis(settings.timeout_ms))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
            // Dropped before the callee closes it (see `CLIENT_POOL_IDLE`).
            .pool_idle_timeout(CLIENT_POOL_IDLE)
            .build()?;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(5)
            .with_jitter();
        Ok(Self { service, trust, to, http, replicas, next: AtomicUsize::new(0), backoff })
    }

    fn base(&self) -> &str {
        &self.replicas[self.next.fetch_add(1, Ordering::Relaxed) % self.replicas.len()]
    }

    /// One attempt: send, then read a 2xx body as `T`, a 4xx as a refusal, a 5xx as unavailable.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        extra: &[(&'static str, String)],
    ) -> Result<T, UpstreamError> {
        // Signed per attempt: a retry after a backoff gets a fresh expiry.
        let facts = RequestFacts {
            method: method.as_str(),
            path: path.split_once('?').map_or(path, |(p, _)| p),
            request_id: "",
        };
        let credential = self.trust.sign_request(self.to, &facts, None);
        let mut req =
            self.http.request(method, format!("{}{path}", self.base())).header(AUTH_HEADER, credential);
        if let Some(body) = body {
            req = req.json(body);
        }
        for (name, value) in extra {
            req = req.header(*name, value);
        }
        let service = self.service;
        let res = req
            .send()
            .await
            .map_err(|e| UpstreamError::Unavailable(format!("{service} unavailable: {e}")))?;
        let status = res.status();
        if status.is_success() {
            return res.json().await.map_err(|e| UpstreamError::Protocol(e.to_string()));
        }
        if status.is_server_error() {
            return Err(UpstreamError::Unavailable(format!("{service} answered {status}")));
        }
        let body = res
            .json::<ErrorBody>()
            .await
            .unwrap_or_else(|_| ErrorBody { code: "UNKNOWN".into(), message: format!("answered {status}") });
        Err(UpstreamError::Refused { status: status.as_u16(), body })
    }

    /// An idempotent call, retried on unavailability.
    pub async fn retried<B: Serialize + Sync, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, UpstreamError> {
        (|| self.call::<B, T>(method.clone(), path, body, &[]))
            .retry(self.backoff)
            .when(UpstreamError::retryable)
            .notify(|e, after| tracing::warn!(error = %e, ?after, path, "call failed, retrying"))
            .await
    }
}
