//! stock-service settings: `http`, `log`, `database`, `amqp`.

use seckill_common::config::{self, AmqpSettings, ConfigError, DatabaseSettings, HttpSettings, LogSettings};
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
    /// The keys of this service's links (see `seckill_common::trust`).
    pub trust: TrustSettings,
}

impl Settings {
    pub fn load() -> Result<Self, ConfigError> {
        config::load(SERVICE)
    }

    pub fn database_url(&self) -> String {
        self.database.url_or(DATABASE)
    }
}
