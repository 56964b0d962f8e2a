//! Load shedding: a bound on the requests a replica works on at once. Past it, a request is
//! answered 503 `BUSY` with `Retry-After` at once, before it touches anything: under overload
//! a buyer learns in microseconds that they should come back, instead of queueing for seconds
//! behind work the replica cannot finish sooner, and nothing already accepted is put at risk.

use std::sync::Arc;
use std::time::Duration;

use seckill_common::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ApiError;

/// What a shed request is told to wait before trying again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// At most `bound` requests in flight; cloned handles share the bound.
#[derive(Clone)]
pub struct InFlight {
    slots: Arc<Semaphore>,
    bound: usize,
    /// The counter of shed requests (`<name>{route}`).
    metric: &'static str,
}

/// A request's slot, given back when dropped (the handler returned or was cancelled).
#[must_use = "the slot is held only while this lives"]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl InFlight {
    pub fn new(bound: usize, metric: &'static str) -> Self {
        Self { slots: Arc::new(Semaphore::new(bound)), bound, metric }
    }

    /// A slot for one request of `route`, or 503 `BUSY` when all are taken. Never waits.
    pub fn enter(&self, route: &'static str) -> Result<Slot, ApiError> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Ok(Slot { _permit: permit }),
            Err(_) => Err(self.busy(route)),
        }
    }

    /// 503 `BUSY` when every slot is taken right now, without taking one: the first thing a
    /// route checks, so a shed request costs no token check and no rate-limit call. The slot
    /// itself is taken later with [`InFlight::enter`], which can still refuse.
    pub fn refuse_if_full(&self, route: &'static str) -> Result<(), ApiError> {
        if self.slots.available_permits() == 0 {
            return Err(self.busy(route));
        }
        Ok(())
    }

    /// Requests in flight right now.
    pub fn current(&self) -> usize {
        self.bound - self.slots.available_permits()
    }

    fn busy(&self, route: &'static str) -> ApiError {
        metrics::counter!(self.metric, "route" => route).increment(1);
        ApiError::new(ErrorCode::Busy, "too many requests in progress here, try again shortly")
            .with_retry_after(RETRY_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_a_request_is_busy_at_once_and_a_slot_comes_back_when_dropped() {
        let bound = InFlight::new(2, "test_shed_total");
        let a = bound.enter("r").unwrap();
        let _b = bound.enter("r").unwrap();
        assert_eq!(bound.current(), 2);
        let err = bound.enter("r").err().unwrap();
        assert_eq!(err.code, ErrorCode::Busy);
        assert_eq!(err.retry_after_secs, Some(1));
        assert_eq!(bound.refuse_if_full("r").unwrap_err().code, ErrorCode::Busy);
        drop(a);
        assert_eq!(bound.current(), 1);
        bound.refuse_if_full("r").unwrap();
        let _c = bound.enter("r").unwrap();
    }
}
