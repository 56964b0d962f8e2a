//! The typed client of stock-service's API, used by seckill-service (goods, sale creation) and
//! order-service (goods, deduct, release). Replicas are taken in turn; idempotent calls are
//! retried with exponential backoff on connect errors, timeouts and 5xx answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::{Method, StatusCode};
use seckill_common::api::{
    DeductBatchRequest, DeductBatchResponse, DeductItemResult, DeductRequest, Goods, NewGoods,
    ReleaseRequest, ReleaseResponse,
};
use seckill_common::config::{UpstreamSettings, split_urls};
use seckill_common::{ErrorBody, GoodsId, headers};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum StockError {
    /// No replica answered, or each answered 5xx, within the retries.
    #[error("stock-service unavailable: {0}")]
    Unavailable(String),
    /// stock-service answered a 4xx: the request was refused on its merits.
    #[error("stock-service refused ({status}): {} {}", body.code, body.message)]
    Refused { status: u16, body: ErrorBody },
    #[error("stock-service answered something unreadable: {0}")]
    Protocol(String),
}

impl StockError {
    fn retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

pub struct StockClient {
    http: reqwest::Client,
    replicas: Vec<String>,
    next: AtomicUsize,
    backoff: ExponentialBuilder,
}

impl StockClient {
    pub fn new(settings: &UpstreamSettings) -> anyhow::Result<Self> {
        let replicas = split_urls(&settings.stock);
        anyhow::ensure!(!replicas.is_empty(), "upstreams.stock (SECKILL__UPSTREAMS__STOCK) names no URL");
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .timeout(Duration::from_millis(settings.timeout_ms))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
            .build()?;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(5)
            .with_jitter();
        Ok(Self { http, replicas, next: AtomicUsize::new(0), backoff })
    }

    fn base(&self) -> &str {
        &self.replicas[self.next.fetch_add(1, Ordering::Relaxed) % self.replicas.len()]
    }

    /// One attempt: send, then read a 2xx body as `T`, a 4xx as a refusal, a 5xx as unavailable.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        extra: &[(&'static str, String)],
    ) -> Result<T, StockError> {
        let mut req = self.http.request(method, format!("{}{path}", self.base()));
        if let Some(body) = body {
            req = req.json(body);
        }
        for (name, value) in extra {
            req = req.header(*name, value);
        }
        let res = req.send().await.map_err(|e| StockError::Unavailable(e.to_string()))?;
        let status = res.status();
        if status.is_success() {
            return res.json().await.map_err(|e| StockError::Protocol(e.to_string()));
        }
        if status.is_server_error() {
            return Err(StockError::Unavailable(format!("answered {status}")));
        }
        let body = res
            .json::<ErrorBody>()
            .await
            .unwrap_or_else(|_| ErrorBody { code: "UNKNOWN".into(), message: format!("answered {status}") });
        Err(StockError::Refused { status: status.as_u16(), body })
    }

    /// An idempotent call, retried on unavailability.
    async fn retried<B: Serialize + Sync, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, StockError> {
        (|| self.call::<B, T>(method.clone(), path, body, &[]))
            .retry(self.backoff)
            .when(StockError::retryable)
            .notify(
                |e, after| tracing::warn!(error = %e, ?after, path, "stock-service call failed, retrying"),
            )
            .await
    }

    /// The goods, or None if stock-service knows no such id.
    pub async fn goods(&self, id: GoodsId) -> Result<Option<Goods>, StockError> {
        match self.retried::<(), Goods>(Method::GET, &format!("/api/goods/{id}"), None).await {
            Ok(g) => Ok(Some(g)),
            Err(StockError::Refused { status, .. }) if status == StatusCode::NOT_FOUND.as_u16() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn list_goods(&self) -> Result<Vec<Goods>, StockError> {
        self.retried::<(), _>(Method::GET, "/api/goods", None).await
    }

    /// Creates a sale on behalf of an admin (stock-service checks the role again). Not
    /// idempotent, so not retried: a failure is reported to the admin, who may try again.
    pub async fn create_goods(&self, new: &NewGoods, user_id: &str, role: &str) -> Result<Goods, StockError> {
        let extra = [(headers::USER_ID, user_id.to_owned()), (headers::USER_ROLE, role.to_owned())];
        self.call(Method::POST, "/api/admin/goods", Some(new), &extra).await
    }

    /// Deducts many keys in one call; idempotent on each key, so retried.
    pub async fn deduct_batch(&self, items: Vec<DeductRequest>) -> Result<Vec<DeductItemResult>, StockError> {
        let body = DeductBatchRequest { items };
        let res: DeductBatchResponse =
            self.retried(Method::POST, "/internal/stock/deduct-batch", Some(&body)).await?;
        Ok(res.results)
    }

    /// Gives a key's stock back; idempotent, so retried. True if this call released it.
    pub async fn release(&self, order_key: uuid::Uuid) -> Result<bool, StockError> {
        let res: ReleaseResponse = self
            .retried(Method::POST, "/internal/stock/release", Some(&ReleaseRequest { order_key }))
            .await?;
        Ok(res.released)
    }
}
