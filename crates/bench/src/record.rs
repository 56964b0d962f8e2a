//! What a run records: one compact event per request (when it ended, how long it took, which
//! call, which outcome), kept by each worker in its own vector and merged at the end, so the
//! workers share nothing while the clock runs. Statistics are computed from the events after.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::client::{STATUS_ERROR, STATUS_TIMEOUT};

/// The calls the tool makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Call {
    /// `POST /api/seckill/{id}/token`
    PathToken,
    /// `POST /api/seckill/{id}/orders`
    Order,
    /// `GET /api/seckill/{id}/result`
    Result,
    /// A plain GET (the `http` baseline).
    Get,
    /// A persistent AMQP publish, until its confirm (the `amqp-publish` baseline).
    Publish,
    /// `POST /buy/{user}`: one transaction per buy (the `sync` scenario).
    Buy,
    /// `POST /api/seckill/{id}/queue`: joining a waiting room (the `room` scenario).
    Join,
    /// `GET /api/seckill/{id}/queue`: where one stands, asked as fast as answered...
    Queue,
    /// ...and as a page asks, with back-off.
    QueueWait,
    /// `GET /api/seckill/{id}/events`: a stream opened, until its first event (the `push` scenario).
    Events,
}

impl Call {
    pub const ALL: [Call; 10] = [
        Call::PathToken,
        Call::Order,
        Call::Result,
        Call::Get,
        Call::Publish,
        Call::Buy,
        Call::Join,
        Call::Queue,
        Call::QueueWait,
        Call::Events,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::PathToken => "path-token",
            Self::Order => "order",
            Self::Result => "result",
            Self::Get => "get",
            Self::Publish => "publish",
            Self::Buy => "buy",
            Self::Join => "join",
            Self::Queue => "queue",
            Self::QueueWait => "queue-wait",
            Self::Events => "events",
        }
    }
}

/// Publish outcomes, in the status field of a [`Call::Publish`] event.
pub const PUBLISH_ACK: u16 = 200;
pub const PUBLISH_NACK: u16 = 2;

/// How an outcome is shown: the HTTP status, or `err`, `timeout`, `ack`, `nack`.
pub fn outcome_label(call: Call, status: u16) -> String {
    match (call, status) {
        (_, STATUS_ERROR) => "err".into(),
        (_, STATUS_TIMEOUT) => "timeout".into(),
        (Call::Publish, PUBLISH_ACK) => "ack".into(),
        (Call::Publish, PUBLISH_NACK) => "nack".into(),
        (_, s) => s.to_string(),
    }
}

/// One finished request. Times are microseconds since the run's first request (u32: 71 min).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub end_us: u32,
    pub latency_us: u32,
    pub call: Call,
    pub status: u16,
}

impl Event {
    pub fn start_us(&self) -> u32 {
        self.end_us.saturating_sub(self.latency_us)
    }
}

/// The run's time origin: the instant of its first timed request.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    t0: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Self { t0: Instant::now() }
    }

    pub fn t0(&self) -> Instant {
        self.t0
    }

    /// Microseconds from the origin to `at` (0 before it, saturating after 71 minutes).
    pub fn us(&self, at: Instant) -> u32 {
        u32::try_from(at.saturating_duration_since(self.t0).as_micros()).unwrap_or(u32::MAX)
    }

    pub fn now_us(&self) -> u32 {
        self.us(Instant::now())
    }

    pub fn event(&self, call: Call, status: u16, started: Instant, ended: Instant) -> Event {
        let latency = ended.saturating_duration_since(started).as_micros();
        Event { end_us: self.us(ended), latency_us: u32::try_from(latency).unwrap_or(u32::MAX), call, status }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_labelled() {
        assert_eq!(outcome_label(Call::Order, 202), "202");
        assert_eq!(outcome_label(Call::Order, STATUS_ERROR), "err");
        assert_eq!(outcome_label(Call::Get, STATUS_TIMEOUT), "timeout");
        assert_eq!(outcome_label(Call::Publish, PUBLISH_ACK), "ack");
        assert_eq!(outcome_label(Call::Publish, PUBLISH_NACK), "nack");
    }

    #[test]
    fn events_measure_from_the_origin() {
        let clock = Clock::start();
        let start = clock.t0() + std::time::Duration::from_millis(10);
        let end = start + std::time::Duration::from_millis(5);
        let e = clock.event(Call::Order, 202, start, end);
        assert_eq!(e.latency_us, 5_000);
        assert_eq!(e.end_us, 15_000);
        assert_eq!(e.start_us(), 10_000);
    }
}
