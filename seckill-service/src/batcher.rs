//! Accepted buy requests go to the broker in batches: one persistent, confirmed message for all
//! the requests this replica accepted within `seckill.batch_window_ms` (or as soon as
//! `seckill.batch_max_requests` wait). The broker's cost is per message, so a batch of twenty
//! costs it about what one request did.
//!
//! The promise to each buyer is unchanged: 202 only after the broker confirmed the message
//! that holds their request. When the confirm fails or does not come, every reservation of the
//! batch is given back, except those the order consumer already claimed (the broker did store
//! the message after all): those buyers are answered 202. All of this happens in the batch's
//! own task, so a buyer who hangs up mid-wait changes nothing.
//!
//! A request still gathering when the process dies was never answered 202; its reservation
//! waits in the pending set, and the reconciler publishes it again (see `reconcile`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lapin::BasicProperties;
use seckill_common::amqp::{OrderRequest, order_body};
use seckill_common::trust::Peer;
use seckill_infra::amqp::Publisher;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::confirmations::Confirmations;
use crate::gate::Gate;

/// What became of an accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Its message is confirmed (or the consumer already has the request): answer 202.
    Accepted,
    /// Its message may not have reached the broker and the reservation was given back (or is
    /// left to the reconciler): answer 503 `BUSY`.
    Refused,
}

/// How requests are gathered.
#[derive(Debug, Clone, Copy)]
pub struct BatchSettings {
    /// How long the first request of a batch waits for others (zero: only those already
    /// waiting join it).
    pub window: Duration,
    /// Most requests in one message.
    pub max_requests: usize,
    /// Most requests waiting to be gathered (the replica's bound on requests in flight).
    pub capacity: usize,
}

struct Waiting {
    request: OrderRequest,
    answer: oneshot::Sender<Enqueued>,
}

/// The handlers' side: hands a request over and waits for its batch's outcome.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Waiting>,
    sink: Arc<Sink>,
}

/// Where batches go, and what is done after.
struct Sink {
    publisher: Arc<Publisher>,
    gate: Arc<Gate>,
    confirmations: Confirmations,
    queue: String,
}

impl Batcher {
    /// The handle, and the task that gathers and publishes (spawn it; it ends on `cancel`
    /// after publishing what it holds and waiting for the confirms in flight).
    pub fn start(
        publisher: Arc<Publisher>,
        gate: Arc<Gate>,
        confirmations: Confirmations,
        queue: String,
        settings: BatchSettings,
        cancel: CancellationToken,
    ) -> (Self, impl Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(settings.capacity.max(1));
        let sink = Arc::new(Sink { publisher, gate, confirmations, queue });
        (Self { tx, sink: sink.clone() }, gather(rx, sink, settings, cancel))
    }

    /// Publishes `request` with the next batch and returns once its fate is known.
    pub async fn enqueue(&self, request: OrderRequest) -> Enqueued {
        let (answer, outcome) = oneshot::channel();
        if self.tx.send(Waiting { request, answer }).await.is_err() {
            // Shutting down: nothing will publish it.
            return self.sink.give_back(request, "the service is stopping").await;
        }
        // A dropped sender means the batch's task died mid-way: its reservation is pending,
        // so the reconciler publishes it again; the buyer is not told 202 meanwhile.
        outcome.await.unwrap_or(Enqueued::Refused)
    }
}

async fn gather(
    mut rx: mpsc::Receiver<Waiting>,
    sink: Arc<Sink>,
    settings: BatchSettings,
    cancel: CancellationToken,
) {
    let max = settings.max_requests.max(1);
    let publishing = TaskTracker::new();
    loop {
        let mut batch = Vec::with_capacity(max);
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, max) => n,
            () = cancel.cancelled() => {
                rx.close();
                rx.recv_many(&mut batch, max).await
            }
        };
        if received == 0 {
            break;
        }
        let deadline = tokio::time::Instant::now() + settings.window;
        while batch.len() < max && !cancel.is_cancelled() {
            let room = max - batch.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let sink = sink.clone();
        publishing.spawn(async move { sink.publish(batch).await });
    }
    publishing.close();
    publishing.wait().await;
}

impl Sink {
    async fn publish(&self, batch: Vec<Waiting>) {
        let requests: Vec<OrderRequest> = batch.iter().map(|w| w.request).collect();
        let published = match order_message(&requests) {
            Ok((body, properties)) => self
                .publisher
                .publish(Peer::Order, &self.queue, &body, properties)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("cannot encode the batch: {e}")),
        };
        metrics::counter!("seckill_order_messages_total").increment(1);
        match published {
            Ok(()) => {
                for w in batch {
                    let r = w.request;
                    self.confirmations.push(r.sale_bucket(), r.user_id, r.request_id);
                    // The buyer may have hung up: their request stands all the same.
                    let _ = w.answer.send(Enqueued::Accepted);
                }
            }
            Err(why) => {
                metrics::counter!("seckill_enqueue_failures_total").increment(requests.len() as u64);
                let why = why.as_str();
                join_all(batch.into_iter().map(|w| async move {
                    let outcome = self.give_back(w.request, why).await;
                    let _ = w.answer.send(outcome);
                }))
                .await;
            }
        }
    }

    /// The request's message may not be in the broker: its reservation is given back, unless
    /// the order consumer claimed it already (then the broker has it, and it stands).
    async fn give_back(&self, r: OrderRequest, why: &str) -> Enqueued {
        match self.gate.undo(r.sale_bucket(), r.user_id, r.request_id, None).await {
            Ok(true) => {
                tracing::error!(error = why, request_id = %r.request_id, "enqueue failed: reservation given back");
                Enqueued::Refused
            }
            Ok(false) => {
                tracing::warn!(error = why, request_id = %r.request_id, "confirm missing but the consumer has the request");
                Enqueued::Accepted
            }
            Err(undo_error) => {
                tracing::error!(error = why, undo_error = %undo_error, request_id = %r.request_id,
                    "enqueue failed and the undo too: the reconciler will publish the request again");
                Enqueued::Refused
            }
        }
    }
}

/// The body and properties of a message holding `requests`: JSON, the single form for one
/// request (its id as the AMQP message id), the batch form for more.
pub fn order_message(requests: &[OrderRequest]) -> serde_json::Result<(Vec<u8>, BasicProperties)> {
    let body = order_body(requests)?;
    let mut properties = BasicProperties::default().with_content_type("application/json".into());
    if let [one] = requests {
        properties = properties.with_message_id(one.request_id.to_string().into());
    }
    Ok((body, properties))
}
