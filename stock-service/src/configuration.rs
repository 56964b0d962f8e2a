//! stock-service settings: `http`, `log`, `database`, `amqp`, `stock`, `trust`.

use std::time::Duration;

use seckill_common::config::{
    AmqpSettings, ConfigError, DatabaseSettings, HttpSettings, LogSettings, ServiceSettings,
};
use seckill_common::trust::TrustSettings;
use serde::Deserialize;

pub const SERVICE: &str = "stock-service";
pub const STANDARD_PORT: u16 = 8083;
pub const DATABASE: &str = "seckill_stock";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub http: HttpSettings,
    pub log: LogSettings,
    pub database: DatabaseSettings,
    pub amqp: AmqpSettings,
    pub stock: StockSettings,
    /// The keys of this service's links (see `seckill_common::trust`).
    pub trust: TrustSettings,
}

/// `stock.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StockSettings {
    /// Pause before releases that failed because the database or the broker is down go back
    /// to the queue.
    pub outage_pause_ms: u64,
}

impl Default for StockSettings {
    fn default() -> Self {
        Self { outage_pause_ms: 1_000 }
    }
}

impl StockSettings {
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
        self.database.validate()
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
    fn defaults_are_valid_and_a_zero_pool_names_the_key() {
        Settings::default().validate().unwrap();
        let mut s = Settings::default();
        s.database.pool_size = 0;
        let message = s.validate().unwrap_err().to_string();
        assert!(message.contains("SECKILL__DATABASE__POOL_SIZE"), "{message}");
        let s: Settings = serde_json::from_str(r#"{"stock": {"outage_pause_ms": 250}}"#).unwrap();
        assert_eq!(s.stock.outage_pause(), Duration::from_millis(250));
    }
}
