//! seckill-service settings.

use std::time::Duration;

use seckill_common::amqp::MAX_BATCH_REQUESTS;
use seckill_common::config::{
    AmqpSettings, ConfigError, HttpSettings, LogSettings, RedisSettings, ServiceSettings, UpstreamSettings,
};
use seckill_common::room::RoomSettings;
use seckill_common::trust::TrustSettings;
use seckill_web::shed::{Limits, SettingKeys};
use serde::Deserialize;

pub const SERVICE: &str = "seckill-service";
pub const STANDARD_PORT: u16 = 8081;

/// The longest batch window accepted: past it the wait would show in every buyer's answer.
pub const MAX_BATCH_WINDOW_MS: u64 = 50;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub http: HttpSettings,
    pub log: LogSettings,
    pub redis: RedisSettings,
    pub amqp: AmqpSettings,
    pub upstreams: UpstreamSettings,
    pub seckill: SeckillSettings,
    /// The keys of this service's links (see `seckill_common::trust`).
    pub trust: TrustSettings,
    /// The waiting rooms' key.
    pub room: RoomSettings,
}

/// `seckill.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeckillSettings {
    /// Ask buyers for a path token first (the "hidden seckill address").
    pub require_token: bool,
    pub token_ttl_secs: u64,
    /// How long the in-process sold-out flag answers alone before Redis is asked again, so a
    /// unit given back is sold again even without a broadcast.
    pub sold_out_recheck_ms: u64,
    /// How often the reconciler looks for reservations without a confirmed message (and for
    /// recoveries that may end).
    pub reconcile_interval_secs: u64,
    /// How old such a reservation must be before its message is published again; above the
    /// confirm timeout, so a publish still waiting for its confirm is left to finish.
    pub reconcile_after_secs: u64,
    /// How often the open sales are audited (Redis against the authorities), for the metrics.
    pub audit_interval_secs: u64,
    /// How long after its end the reconciler still looks after a sale (reservations whose
    /// message was never confirmed, transfers left half done), and after anything last
    /// touched an ended one (a request, a restock of units from an order that expired or was
    /// cancelled after the end, an operator's audit). Past it an ended sale costs nothing at
    /// rest. Above `reconcile_after_secs`, so a reservation made in the sale's last second is
    /// still published again if its confirm was lost.
    pub ended_grace_secs: u64,
    /// A rebuild's pause between counting the requests waiting in the broker and reading the
    /// authorities: longer than an order consumer's batch, so that what the consumers held
    /// unacknowledged at the count has been claimed (and so counted) by then.
    pub rebuild_settle_ms: u64,
    /// Requests this replica works on at once on the routes that reach Redis (path token,
    /// order, result; a reservation counts until its confirm) are bounded; past the bound a
    /// request is answered 503 `BUSY` with `Retry-After` at once, before touching anything.
    /// The bound follows their latency (`seckill_web::shed`): this is its ceiling, and where
    /// it starts.
    pub max_in_flight: usize,
    /// The bound's floor; equal to `max_in_flight`, the bound is fixed.
    pub min_in_flight: usize,
    /// The mean latency of those requests the bound aims at, in milliseconds.
    pub latency_target_ms: u64,
    /// How long an accepted request waits for others to share its broker message, in
    /// milliseconds (0: only those already waiting join it). Every buyer's 202 waits this
    /// much longer at most; the broker's work per request falls with the batch's size.
    pub batch_window_ms: u64,
    /// Most accepted requests in one message (1 to `MAX_BATCH_REQUESTS`; 1 publishes each
    /// request in the single form, as before batching).
    pub batch_max_requests: usize,
}

impl Default for SeckillSettings {
    fn default() -> Self {
        Self {
            require_token: true,
            token_ttl_secs: 60,
            sold_out_recheck_ms: 1_000,
            reconcile_interval_secs: 5,
            reconcile_after_secs: 30,
            audit_interval_secs: 60,
            ended_grace_secs: 300,
            rebuild_settle_ms: 2_000,
            max_in_flight: 1_024,
            min_in_flight: 256,
            latency_target_ms: 100,
            batch_window_ms: 1,
            batch_max_requests: 50,
        }
    }
}

impl SeckillSettings {
    pub const IN_FLIGHT_KEYS: SettingKeys = SettingKeys {
        min: "seckill.min_in_flight",
        max: "seckill.max_in_flight",
        latency_target: "seckill.latency_target_ms",
    };

    pub fn limits(&self) -> Result<Limits, ConfigError> {
        Limits::from_settings(
            &Self::IN_FLIGHT_KEYS,
            self.min_in_flight,
            self.max_in_flight,
            self.latency_target_ms,
        )
    }

    pub fn sold_out_recheck(&self) -> Duration {
        Duration::from_millis(self.sold_out_recheck_ms)
    }

    pub fn rebuild_settle(&self) -> Duration {
        Duration::from_millis(self.rebuild_settle_ms)
    }

    pub fn batch_window(&self) -> Duration {
        Duration::from_millis(self.batch_window_ms)
    }

    pub fn ended_grace(&self) -> Duration {
        Duration::from_secs(self.ended_grace_secs)
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
        let seckill = &self.seckill;
        ConfigError::check_positive("seckill.token_ttl_secs", seckill.token_ttl_secs)?;
        ConfigError::check_positive("seckill.reconcile_interval_secs", seckill.reconcile_interval_secs)?;
        ConfigError::check_positive("seckill.audit_interval_secs", seckill.audit_interval_secs)?;
        seckill.limits()?;
        if !(1..=MAX_BATCH_REQUESTS).contains(&seckill.batch_max_requests) {
            return Err(ConfigError::at(
                "seckill.batch_max_requests",
                format!("must be 1 to {MAX_BATCH_REQUESTS} (the most one message may carry)"),
            ));
        }
        if seckill.batch_window_ms > MAX_BATCH_WINDOW_MS {
            return Err(ConfigError::at(
                "seckill.batch_window_ms",
                format!("must be at most {MAX_BATCH_WINDOW_MS}: every buyer's answer waits it"),
            ));
        }
        if seckill.reconcile_after_secs.saturating_mul(1000) <= self.amqp.confirm_timeout_ms {
            return Err(ConfigError::at(
                "seckill.reconcile_after_secs",
                "must exceed amqp.confirm_timeout_ms, or the reconciler could publish again a request still awaiting its confirm",
            ));
        }
        if seckill.ended_grace_secs <= seckill.reconcile_after_secs {
            return Err(ConfigError::at(
                "seckill.ended_grace_secs",
                "must exceed seckill.reconcile_after_secs, or a reservation made as a sale ends could be left unpublished",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_a_zero_interval_names_the_key() {
        Settings::default().validate().unwrap();
        let mut s = Settings::default();
        s.seckill.reconcile_interval_secs = 0;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__SECKILL__RECONCILE_INTERVAL_SECS"));
        let mut s = Settings::default();
        s.seckill.audit_interval_secs = 0;
        assert!(s.validate().unwrap_err().to_string().contains("seckill.audit_interval_secs"));
        let mut s = Settings::default();
        s.seckill.reconcile_after_secs = 5;
        assert!(s.validate().unwrap_err().to_string().contains("seckill.reconcile_after_secs"));
        let mut s = Settings::default();
        s.seckill.max_in_flight = 0;
        assert!(s.validate().unwrap_err().to_string().contains("seckill.max_in_flight"));
        s.seckill.max_in_flight = 8;
        assert!(
            s.validate().unwrap_err().to_string().contains("seckill.min_in_flight"),
            "a floor over the ceiling"
        );
        for bad in [0, MAX_BATCH_REQUESTS + 1] {
            let mut s = Settings::default();
            s.seckill.batch_max_requests = bad;
            assert!(s.validate().unwrap_err().to_string().contains("seckill.batch_max_requests"));
        }
        let mut s = Settings::default();
        s.seckill.ended_grace_secs = s.seckill.reconcile_after_secs;
        assert!(s.validate().unwrap_err().to_string().contains("seckill.ended_grace_secs"));
        let mut s = Settings::default();
        s.seckill.batch_window_ms = MAX_BATCH_WINDOW_MS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("seckill.batch_window_ms"));
    }
}
