//! seckill-service: the front line of a flash sale. Answers most buyers from an in-process
//! sold-out flag, gates the rest with one atomic Redis script, enqueues the accepted requests
//! with publisher confirms, and answers result polls from Redis.

pub mod broadcast;
pub mod configuration;
pub mod confirmations;
pub mod gate;
pub mod reconcile;
pub mod routes;
pub mod sales;
pub mod startup;
pub mod state;

pub use configuration::Settings;
