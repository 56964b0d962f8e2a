//! Clearing the pending entries of confirmed requests, off the request path. Each accepted buy
//! only hands its entry to this queue; a background task clears them in Redis in pipelines of
//! many, so the hot path makes one Redis call (the reserve script) instead of two.
//!
//! An entry not cleared in time is harmless: the order consumer's claim clears it too, and the
//! reconciler only gives back reservations that no consumer has claimed and that are older than
//! `seckill.reconcile_after_secs`.

use std::sync::Arc;
use std::time::Duration;

use seckill_common::UserId;
use seckill_common::keys::SaleBucket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::gate::Gate;

type Confirmed = (SaleBucket, UserId, Uuid);

/// Most entries cleared in one pipeline.
const BATCH: usize = 1_000;
/// Entries waiting at most: far more than a second's worth of accepted buys.
const CAPACITY: usize = 100_000;

#[derive(Clone)]
pub struct Confirmations {
    tx: mpsc::Sender<Confirmed>,
}

impl Confirmations {
    /// The handle for the handlers, and the task that clears (spawn it; it ends on `cancel`
    /// after clearing what it holds).
    pub fn start(gate: Arc<Gate>, cancel: CancellationToken) -> (Self, impl Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        (Self { tx }, run(rx, gate, cancel))
    }

    /// Never waits: with the queue full the entry is left to the consumer's claim.
    pub fn push(&self, at: SaleBucket, u: UserId, request_id: Uuid) {
        if self.tx.try_send((at, u, request_id)).is_err() {
            metrics::counter!("seckill_confirmations_dropped_total").increment(1);
        }
    }
}

async fn run(mut rx: mpsc::Receiver<Confirmed>, gate: Arc<Gate>, cancel: CancellationToken) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => n,
            () = cancel.cancelled() => {
                rx.close();
                rx.recv_many(&mut batch, CAPACITY).await
            }
        };
        if received == 0 {
            return;
        }
        if let Err(e) = gate.confirmed(&batch).await {
            // Left to the consumers' claims; nothing is lost.
            tracing::warn!(error = %e, entries = batch.len(), "pending entries not cleared");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        batch.clear();
    }
}
