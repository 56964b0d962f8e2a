//! The rooms' upkeep, every [`TICK`] on every replica: each reads its rooms' state from
//! Redis into memory (what the status route answers from), and the one replica that leads a
//! room draws it at the opening and moves its admissions on.

use std::time::Duration;

use actix_web::web;
use seckill_common::GoodsId;
use seckill_common::room::{CameUp, MAX_RATE, RoomRate};
use tokio_util::sync::CancellationToken;

use super::RoomView;
use crate::sales::{Sale, now_ms};
use crate::state::AppState;

/// How often every replica reads its rooms: the most a status answer lags behind.
pub const TICK: Duration = Duration::from_millis(100);

/// A leader's lease: another replica takes over this long after a leader dies.
const LEAD_MS: u64 = 1_000;

/// How far ahead admissions are leased at stock-service: after a loss of Redis the room goes
/// on from the lease's end, no sooner than the lease said (at most this much of the rate
/// is admitted at once, never more than the rate allows over time).
const LEASE_MS: i64 = 1_000;

/// The `auto` rate's start, and how it moves each second: down by a third when admitted
/// buyers were refused `BUSY`, up by a quarter when not (while places wait).
const AUTO_START: f64 = 50.0;
const AUTO_DOWN: f64 = 2.0 / 3.0;
const AUTO_UP: f64 = 1.25;

pub async fn run(state: web::Data<AppState>, cancel: CancellationToken) {
    let mut leading = Leading::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        for sale in state.sales.watched(state.settings.ended_grace()) {
            let Some(view) = state.rooms.view(&sale.goods) else { continue };
            let result = upkeep(&state, &sale, &view, &mut leading).await;
            leading.report(sale.id(), result);
        }
        for view in state.rooms.all() {
            if state.sales.cached(view.goods).is_none() {
                state.rooms.forget(view.goods);
                leading.auto.remove(&view.goods);
                leading.failing.remove(&view.goods);
            }
        }
    }
}

/// What the upkeep keeps between ticks: the `auto` rates of the rooms this replica leads, and
/// the rooms whose upkeep is failing.
#[derive(Default)]
struct Leading {
    auto: std::collections::HashMap<GoodsId, AutoRate>,
    failing: std::collections::HashSet<GoodsId>,
}

impl Leading {
    /// One warning when a room's upkeep starts failing (ten ticks a second would flood the
    /// log), one line when it works again.
    fn report(&mut self, g: GoodsId, result: anyhow::Result<()>) {
        match result {
            Ok(()) => {
                if self.failing.remove(&g) {
                    tracing::info!(goods_id = %g, "waiting room upkeep works again");
                }
            }
            Err(e) if self.failing.insert(g) => {
                tracing::warn!(goods_id = %g, error = %e, "waiting room upkeep failed; tried again every tick");
            }
            Err(e) => tracing::debug!(goods_id = %g, error = %e, "waiting room upkeep still failing"),
        }
    }
}

async fn upkeep(state: &AppState, sale: &Sale, view: &RoomView, leading: &mut Leading) -> anyhow::Result<()> {
    let now = now_ms();
    if now < view.opens_ms - 1_000 {
        return Ok(());
    }
    let store = &state.rooms.store;
    if now >= sale.goods.start_at.timestamp_millis()
        && store.lead(view.goods, &state.rooms.replica, LEAD_MS).await?
    {
        lead(state, sale, view, leading, now).await?;
    }
    refresh(state, sale, view, now).await
}

/// Reads the room's state from Redis into this replica's memory (loading the room from its
/// marks if Redis has lost it). The first time, also the marks Redis kept.
pub async fn refresh(state: &AppState, sale: &Sale, view: &RoomView, now: i64) -> anyhow::Result<()> {
    let store = &state.rooms.store;
    let g = view.goods;
    let observed = match store.observe(g).await? {
        Some(o) => o,
        None => {
            store.load(&sale.goods, now).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            store
                .observe(g)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the room is not in Redis after loading it"))?
        }
    };
    // After the load: the marks it put back are among those Redis keeps.
    if !view.known() {
        view.remember(store.marks(g).await?);
    }
    let sold_out = sold_out(state, sale, now).await;
    view.observed(&observed, sold_out, now);
    let refused = view.take_busy();
    if refused > 0 {
        store.count_busy(g, refused).await?;
    }
    metrics::gauge!("seckill_room_waiting", "goods_id" => g.to_string()).set(view.waiting() as f64);
    metrics::gauge!("seckill_room_admitted", "goods_id" => g.to_string()).set(view.admitted() as f64);
    metrics::gauge!("seckill_room_rate", "goods_id" => g.to_string()).set(view.rate());
    Ok(())
}

/// The leader's part: the draw once the sale opens, then the admissions at the rate, leased
/// ahead at stock-service.
async fn lead(
    state: &AppState,
    sale: &Sale,
    view: &RoomView,
    leading: &mut Leading,
    now: i64,
) -> anyhow::Result<()> {
    let store = &state.rooms.store;
    let g = view.goods;
    let rate = rate(view, leading, now);
    let advanced = match store.advance(g, now, rate, keep(view)).await? {
        Some(a) => a,
        None => {
            store.draw(&sale.goods, now).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            return Ok(());
        }
    };
    if let Some(auto) = leading.auto.get_mut(&g) {
        auto.refused(advanced.busy);
    }
    // Leased half a lease ahead: the cap is never what stops the rate.
    let ahead = (rate * LEASE_MS as f64 / 1000.0).ceil() as u64;
    if advanced.admitted + ahead / 2 >= advanced.cap {
        let came_up = CameUp { at_ms: now, admitted: advanced.admitted };
        store
            .lease_admissions(g, advanced.admitted + ahead.max(1), now + LEASE_MS, came_up)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// The room's rate now: the configured one, or the `auto` one.
fn rate(view: &RoomView, leading: &mut Leading, now: i64) -> f64 {
    match view.room.rate {
        RoomRate::PerSec(n) => f64::from(n),
        RoomRate::Auto(_) => leading
            .auto
            .entry(view.goods)
            .or_insert_with(|| {
                AutoRate::new(Some(view.rate()).filter(|r| *r > 0.0).unwrap_or(AUTO_START), now)
            })
            .at(now, view.waiting() > 0),
    }
}

/// The `auto` rate of a room this replica leads: it moves once a second, down by a third when
/// admitted buyers were refused `BUSY` in that second (the buy path takes fewer than the room
/// lets in), else up by a quarter while places wait. A new leader goes on from the rate the
/// room last ran at.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AutoRate {
    rate: f64,
    moved_ms: i64,
    refused: u64,
}

impl AutoRate {
    fn new(rate: f64, now: i64) -> Self {
        Self { rate, moved_ms: now, refused: 0 }
    }

    fn refused(&mut self, n: u64) {
        self.refused += n;
    }

    fn at(&mut self, now: i64, waiting: bool) -> f64 {
        if now - self.moved_ms >= 1_000 {
            self.moved_ms = now;
            if self.refused > 0 {
                self.rate = (self.rate * AUTO_DOWN).max(1.0);
            } else if waiting {
                self.rate = (self.rate * AUTO_UP).min(f64::from(MAX_RATE));
            }
            self.refused = 0;
        }
        self.rate
    }
}

/// Marks Redis keeps: one a tick at most, for an admission's life and a little more.
fn keep(view: &RoomView) -> u64 {
    let per_sec = 1_000 / TICK.as_millis() as u64;
    (u64::from(view.room.admission_secs) + 10) * per_sec
}

/// Whether the sale has nothing left: its flag, or (the flag down) every bucket empty in Redis.
async fn sold_out(state: &AppState, sale: &Sale, now: i64) -> bool {
    if sale.flagged_sold_out(now) {
        return true;
    }
    if now < sale.goods.start_at.timestamp_millis() {
        return false;
    }
    let stocks = state.gate.stocks(&sale.buckets()).await;
    stocks.is_ok_and(|s| s.iter().all(|units| *units == Some(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_auto_rate_climbs_while_places_wait_and_backs_off_on_refusals_once_a_second() {
        let mut auto = AutoRate::new(100.0, 0);
        // Within the second nothing moves, whatever happens.
        auto.refused(3);
        assert_eq!(auto.at(500, true), 100.0);
        // A second on: the refusals of that second bring it down a third, once.
        assert_eq!(auto.at(1_000, true), 100.0 * AUTO_DOWN);
        assert_eq!(auto.at(1_100, true), 100.0 * AUTO_DOWN);
        // No refusal and places waiting: up a quarter a second.
        assert_eq!(auto.at(2_000, true), 100.0 * AUTO_DOWN * AUTO_UP);
        // Nobody waiting: it holds.
        assert_eq!(auto.at(3_000, false), 100.0 * AUTO_DOWN * AUTO_UP);
        // Bounded both ways.
        let mut low = AutoRate::new(1.0, 0);
        low.refused(1);
        assert_eq!(low.at(1_000, true), 1.0);
        let mut high = AutoRate::new(f64::from(MAX_RATE), 0);
        assert_eq!(high.at(1_000, true), f64::from(MAX_RATE));
    }
}
