//! Removing what a bench run made under its scratch names ([`Backends::prefix`]), at its
//! start (what an interrupted run left) and at its end: the databases, the Redis keys, and
//! every queue and exchange the services declare under the prefix. AMQP cannot list queues,
//! so their names are computed the way the services compute them ([`AmqpNames`]); the order
//! delay queue's name carries the order TTL and the retry queues' names the retry delay, so
//! those are inputs.

use anyhow::{Context, bail};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use lapin::{Channel, Connection, ConnectionProperties};
use seckill_common::amqp::AmqpNames;

use crate::baseline::redact;
use crate::fleet::Backends;

/// The order TTL the services run with unless told otherwise (`order.ttl_secs`' default).
pub const ORDER_TTL_SECS: u64 = 1_800;
/// The retry delays a fleet's services may run with: the default, and the fault suite's.
const RETRY_DELAYS_MS: [u64; 2] = [1_000, 500];

/// Drops the fleet's databases (`stock`, `order`, and the baselines' `scratch`), deletes its
/// Redis keys, and its queues for each order TTL given (the default's too) with `extra`
/// queues; fails, after trying everything, if anything was not removed.
pub async fn remove(backends: &Backends, order_ttls: &[u64], extra: &[String]) -> anyhow::Result<()> {
    let prefix =
        backends.prefix.as_deref().context("no scratch prefix: the real system's names; refusing")?;
    let mut failed = Vec::new();
    match AsyncPgConnection::establish(&format!("{}/postgres", backends.pg_url)).await {
        Ok(mut conn) => {
            for kind in ["stock", "order", "scratch"] {
                let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", backends.database(kind));
                if let Err(e) = conn.batch_execute(&sql).await {
                    failed.push(format!("{sql}: {e}"));
                }
            }
        }
        Err(e) => failed.push(format!("the databases were not dropped: {e}")),
    }
    if let Err(e) = seckill_infra::redis::delete_matching(&backends.redis_url, &format!("{prefix}:*")).await {
        failed.push(format!("the Redis keys {prefix}:* were not deleted: {e}"));
    }
    let ttls: Vec<u64> = std::iter::once(ORDER_TTL_SECS).chain(order_ttls.iter().copied()).collect();
    let names = ScratchNames::new(&format!("{prefix}."), &ttls, &RETRY_DELAYS_MS, extra)?;
    match delete(&backends.amqp_url, &names).await {
        Ok(done) => failed.extend(done.failed),
        Err(e) => failed.push(format!("the queues {prefix}.* were not deleted: {e:#}")),
    }
    if failed.is_empty() { Ok(()) } else { bail!("clean-up: {}", failed.join("; ")) }
}

/// [`remove`], its failure printed (at the end of a run, nothing is left to stop).
pub async fn remove_quietly(backends: &Backends, order_ttls: &[u64]) {
    if let Err(e) = remove(backends, order_ttls, &[]).await {
        eprintln!("{e:#}");
    }
}

/// The queues and exchanges to delete under one prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScratchNames {
    pub queues: Vec<String>,
    pub exchanges: Vec<String>,
}

impl ScratchNames {
    /// Every queue the services declare under `prefix` for each order TTL and retry delay
    /// given (work queues with their dead-letter and retry queues, the order delay queue), the
    /// broadcast exchange, and `extra` queues (which must carry the prefix too). An empty
    /// prefix is refused: those would be the real system's names.
    pub fn new(
        prefix: &str,
        order_ttls_secs: &[u64],
        retry_delays_ms: &[u64],
        extra: &[String],
    ) -> anyhow::Result<Self> {
        if prefix.is_empty() {
            bail!("an empty prefix would name the real system's queues; refusing");
        }
        if let Some(q) = extra.iter().find(|q| !q.starts_with(prefix)) {
            bail!("queue {q} does not start with the prefix {prefix}; refusing");
        }
        let names = AmqpNames::new(prefix);
        let mut queues = Vec::new();
        for &ttl in order_ttls_secs {
            for &delay in retry_delays_ms {
                queues.extend(names.all_queues(ttl, delay));
            }
        }
        queues.extend(extra.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        queues.retain(|q| seen.insert(q.clone()));
        Ok(Self { queues, exchanges: vec![names.broadcast_exchange()] })
    }
}

/// What [`delete`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Queue deletions the broker answered with OK (RabbitMQ answers OK for a queue that does
    /// not exist, too).
    pub queues: usize,
    /// Messages that were in the deleted queues.
    pub messages: u64,
    pub exchanges: usize,
    /// Names the broker refused to delete, with its answer.
    pub failed: Vec<String>,
}

/// Deletes `names` on the broker at `url`, whatever their content. A refusal closes the
/// channel; a new one is opened and the rest go on.
pub async fn delete(url: &str, names: &ScratchNames) -> anyhow::Result<Deleted> {
    let conn = Connection::connect(
        url,
        ConnectionProperties::default().with_connection_name("seckill-bench clean-up".into()),
    )
    .await
    .with_context(|| format!("connecting to RabbitMQ at {}", redact(url)))?;
    let mut out = Deleted::default();
    let mut channel = conn.create_channel().await?;
    for q in &names.queues {
        match channel.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await {
            Ok(messages) => {
                out.queues += 1;
                out.messages += u64::from(messages);
            }
            Err(e) => {
                out.failed.push(format!("queue {q}: {e}"));
                channel = reopen(&conn, channel).await?;
            }
        }
    }
    for x in &names.exchanges {
        match channel.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default()).await {
            Ok(()) => out.exchanges += 1,
            Err(e) => {
                out.failed.push(format!("exchange {x}: {e}"));
                channel = reopen(&conn, channel).await?;
            }
        }
    }
    let _ = conn.close(200, "cleanup done".into()).await;
    Ok(out)
}

async fn reopen(conn: &Connection, old: Channel) -> anyhow::Result<Channel> {
    if old.status().connected() {
        return Ok(old);
    }
    conn.create_channel().await.context("opening a new channel after a refusal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_are_those_the_services_declare_under_the_prefix() {
        let n = ScratchNames::new("seckill-bench.", &[1_800], &[1_000], &["seckill-bench.scratch.x".into()])
            .unwrap();
        for q in [
            "seckill-bench.seckill.orders",
            "seckill-bench.seckill.orders.dead",
            "seckill-bench.seckill.orders.retry.1000ms",
            "seckill-bench.seckill.order.delay.1800s",
            "seckill-bench.seckill.order.expire",
            "seckill-bench.seckill.stock.release.retry.1000ms",
            "seckill-bench.seckill.restock.dead",
            "seckill-bench.scratch.x",
        ] {
            assert!(n.queues.iter().any(|x| x == q), "{q} missing from {:?}", n.queues);
        }
        assert_eq!(n.queues.len(), 14);
        assert!(n.queues.iter().all(|q| q.starts_with("seckill-bench.")));
        assert_eq!(n.exchanges, ["seckill-bench.seckill.broadcast"]);

        // Several TTLs: one delay queue each, the rest not repeated.
        let two = ScratchNames::new("p.", &[1_800, 604_800], &[1_000], &[]).unwrap();
        assert_eq!(two.queues.len(), 14);
        assert!(two.queues.contains(&"p.seckill.order.delay.604800s".to_owned()));
    }

    #[test]
    fn the_real_systems_names_are_refused() {
        assert!(ScratchNames::new("", &[1_800], &[1_000], &[]).is_err());
        assert!(ScratchNames::new("seckill-bench.", &[1_800], &[1_000], &["seckill.orders".into()]).is_err());
    }
}
