//! order-service settings.

use std::time::Duration;

use seckill_common::config::{
    self, AmqpSettings, ConfigError, DatabaseSettings, HttpSettings, LogSettings, RedisSettings,
    UpstreamSettings,
};
use seckill_common::trust::TrustSettings;
use serde::Deserialize;

pub const SERVICE: &str = "order-service";
pub const STANDARD_PORT: u16 = 8082;
pub const DATABASE: &str = "seckill_order";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub http: HttpSettings,
    pub log: LogSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub amqp: AmqpSettings,
    pub upstreams: UpstreamSettings,
    pub order: OrderSettings,
    /// The keys of this service's links (see `seckill_common::trust`).
    pub trust: TrustSettings,
}

/// `order.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrderSettings {
    /// How long an order may stay unpaid.
    pub ttl_secs: u64,
    /// Consumers (each its own channel) working in parallel.
    pub consumers: usize,
    /// Most messages handled as one batch: one deduct call, one insert, one ack.
    pub batch_size: usize,
    /// Unacked messages the broker hands each consumer: the backpressure.
    pub prefetch: u16,
    /// Pause before messages that failed because a dependency is down go back to the queue.
    pub outage_pause_ms: u64,
    /// How often the sweeper looks for overdue unpaid orders and owed releases.
    pub sweep_interval_secs: u64,
    /// How late an expiry or a release must be before the sweeper does it itself.
    pub sweep_grace_secs: u64,
}

impl Default for OrderSettings {
    fn default() -> Self {
        Self {
            ttl_secs: 1_800,
            consumers: 2,
            batch_size: 200,
            prefetch: 400,
            outage_pause_ms: 1_000,
            sweep_interval_secs: 10,
            sweep_grace_secs: 30,
        }
    }
}

impl OrderSettings {
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    pub fn outage_pause(&self) -> Duration {
        Duration::from_millis(self.outage_pause_ms)
    }
}

impl Settings {
    pub fn load() -> Result<Self, ConfigError> {
        let settings: Self = config::load(SERVICE)?;
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.order.batch_size == 0 || self.order.batch_size > 1_000 {
            return Err(ConfigError::invalid(
                "order.batch_size",
                "SECKILL__ORDER__BATCH_SIZE",
                "must be 1 to 1000",
            ));
        }
        if usize::from(self.order.prefetch) < self.order.batch_size {
            return Err(ConfigError::invalid(
                "order.prefetch",
                "SECKILL__ORDER__PREFETCH",
                "must be at least order.batch_size",
            ));
        }
        if self.order.ttl_secs == 0 {
            return Err(ConfigError::invalid(
                "order.ttl_secs",
                "SECKILL__ORDER__TTL_SECS",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    pub fn database_url(&self) -> String {
        self.database.url_or(DATABASE)
    }
}
