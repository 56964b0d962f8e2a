//! order-service settings.

use std::time::Duration;

use seckill_common::config::{
    AmqpSettings, ConfigError, DatabaseSettings, HttpSettings, LogSettings, RedisSettings, ServiceSettings,
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
    /// Most messages handed to the handler at once (one ack), and most requests fulfilled
    /// together (one deduct call, one insert): a message may hold a batch of requests.
    pub batch_size: usize,
    /// Unacked messages the broker hands each consumer: the backpressure.
    pub prefetch: u16,
    /// Pause before messages that failed because a dependency is down go back to the queue.
    pub outage_pause_ms: u64,
    /// How often the sweeper looks for overdue unpaid orders and owed releases.
    pub sweep_interval_secs: u64,
    /// How late an expiry or a release must be before the sweeper does it itself.
    pub sweep_grace_secs: u64,
    /// Most orders this replica expires a second (0: no limit): an expiry storm yields the
    /// machine and the database to live traffic (see `pace`).
    pub expiries_per_sec: u32,
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
            expiries_per_sec: 12_000,
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

impl ServiceSettings for Settings {
    const SERVICE: &'static str = SERVICE;

    fn log(&self) -> &LogSettings {
        &self.log
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.http.validate()?;
        self.amqp.validate()?;
        self.redis.validate()?;
        self.database.validate()?;
        let order = &self.order;
        if order.batch_size == 0 || order.batch_size > 1_000 {
            return Err(ConfigError::at("order.batch_size", "must be 1 to 1000"));
        }
        if usize::from(order.prefetch) < order.batch_size {
            return Err(ConfigError::at("order.prefetch", "must be at least order.batch_size"));
        }
        ConfigError::check_positive("order.ttl_secs", order.ttl_secs)?;
        ConfigError::check_positive("order.consumers", order.consumers as u64)?;
        ConfigError::check_positive("order.sweep_interval_secs", order.sweep_interval_secs)
    }
}

impl Settings {
    pub fn database_url(&self) -> String {
        self.database.url_or(DATABASE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_instead_of_being_raised_to_one_is_refused_naming_the_key() {
        let mut s = Settings::default();
        s.validate().unwrap();
        s.order.consumers = 0;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__ORDER__CONSUMERS"));
        let mut s = Settings::default();
        s.order.sweep_interval_secs = 0;
        assert!(s.validate().unwrap_err().to_string().contains("order.sweep_interval_secs"));
        let mut s = Settings::default();
        s.order.prefetch = 10;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__ORDER__PREFETCH"));
        let mut s = Settings::default();
        s.amqp.publish_channels = 0;
        assert!(s.validate().unwrap_err().to_string().contains("amqp.publish_channels"));
    }
}
