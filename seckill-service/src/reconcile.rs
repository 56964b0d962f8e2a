//! Gives back reservations whose message the broker never confirmed: the process died between
//! the reserve script and the confirm, or the undo after a failed publish could not reach
//! Redis. The user then sees `failed` and the unit is sold again. A reservation whose message
//! did reach the broker is claimed by the order consumer first, and the undo leaves it alone.

use std::time::Duration;

use actix_web::web;
use seckill_common::scripts::StoredResult;
use tokio_util::sync::CancellationToken;

use crate::sales::now_ms;
use crate::state::AppState;

pub async fn run(state: web::Data<AppState>, cancel: CancellationToken) {
    let every = Duration::from_secs(state.settings.reconcile_interval_secs.max(1));
    let after_ms =
        i64::try_from(state.settings.reconcile_after_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let before = now_ms().saturating_sub(after_ms);
        for sale in state.sales.all() {
            let stale = match state.gate.unconfirmed(sale.id(), before).await {
                Ok(stale) => stale,
                Err(e) => {
                    tracing::warn!(error = %e, goods_id = %sale.id(), "reconciler cannot read redis");
                    continue;
                }
            };
            for (user, request_id) in stale {
                match state.gate.undo(sale.id(), user, request_id, Some(StoredResult::Failed)).await {
                    Ok(true) => {
                        metrics::counter!("seckill_reservations_reconciled_total").increment(1);
                        sale.clear_sold_out();
                        tracing::warn!(
                            goods_id = %sale.id(), user_id = %user, %request_id,
                            "reservation without a confirmed message given back"
                        );
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "reconciler undo failed; will retry"),
                }
            }
        }
    }
}
