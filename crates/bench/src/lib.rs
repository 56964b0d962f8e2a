//! seckill-bench: the load tool of the seckill system.
//!
//! It drives a running system through the gateway like real buyers (named scenarios: `seed`,
//! `spike`, `sold-out`, `hot-user`, `drain`; `storm`, every unpaid order of a sale expiring at
//! once while a spike runs; `room`, a sale behind a waiting room; `push`, buyers' event
//! streams: memory per stream, commit to event, requests per buyer), checks the sale's
//! invariants from outside, and measures this machine's limits in the same run (`http`, `upstream`, `amqp-publish`), so
//! `suite` runs them all, as scripts/bench.sh does, and publishes the figures as ratios to
//! the baselines (docs/BENCHMARKS.md); `sync` measures the synchronous design (one transaction per buy) on the
//! same PostgreSQL, for comparison. The fault suite is crates/faults; what the two share (the
//! client, the fleet of binaries, the invariants) is crates/harness. The library API is what the
//! binary uses and what the smoke test drives: [`scenario::run`] with a
//! [`scenario::ScenarioConfig`] returns a [`report::Report`]. Each run's configuration is its
//! subcommand's options (a clap `Args` struct, every default in its `#[arg]`; what the
//! scenarios differ in, in [`scenario::Scenario::defaults`]); a caller builds one with
//! [`cli::parse_options`] or [`scenario::ScenarioConfig::new`].

pub use seckill_harness::{api, client, fleet, invariants, signal};

pub mod baseline;
pub mod busy;
pub mod chart;
pub mod cleanup;
pub mod cli;
pub mod gate_load;
pub mod idle;
pub mod machine;
pub mod markdown;
pub mod memory;
pub mod progress;
pub mod push;
pub mod record;
pub mod report;
pub mod room;
pub mod scaling;
pub mod scenario;
pub mod stats;
pub mod storm;
pub mod suite;
pub mod sync;
