//! What the load tool (crates/bench) and the fault suite (crates/faults) share: an HTTP/1
//! client of the gateway that times nothing itself ([`client`]), the calls every run starts with
//! ([`api`]), the four service binaries started, stopped, killed and paused on ports of the
//! run's own ([`fleet`], with [`signal`]), private Redis nodes ([`redis_server`]), and the
//! sale's invariants checked from outside ([`invariants`]).

pub mod api;
pub mod client;
pub mod fleet;
pub mod invariants;
pub mod markdown;
pub mod redis_server;
pub mod signal;

/// A whole number with thousands separators (`12,345`).
pub fn n0(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}
