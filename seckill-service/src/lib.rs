//! seckill-service: the front line of a flash sale. Answers most buyers from an in-process
//! sold-out flag, gates the rest with one atomic Redis script, enqueues the accepted requests
//! with publisher confirms, answers result polls from Redis (or, when Redis lost them, from the
//! order authority), and rebuilds a sale's Redis data from the authorities after a loss.

pub mod audit;
pub mod batcher;
pub mod broadcast;
pub mod buckets;
pub mod configuration;
pub mod confirmations;
pub mod gate;
pub mod rebuild;
pub mod reconcile;
pub mod repair;
pub mod room;
pub mod routes;
pub mod sales;
pub mod snapshot;
pub mod startup;
pub mod state;

pub use configuration::Settings;
