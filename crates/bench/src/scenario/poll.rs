//! The poller: each accepted user's result asked until it is final, oldest first.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hyper::header::HeaderValue;
use seckill_common::api::{SeckillResult, SeckillStatus};
use tokio::sync::mpsc;

use crate::client::{Answer, Conn, Req};
use crate::invariants::FinalState;
use crate::record::{Call, Clock, Event};

/// A user's result as last seen by the poller.
#[derive(Debug, Clone, Copy)]
pub(super) struct Final {
    pub(super) state: FinalState,
    pub(super) order_id: Option<i64>,
    pub(super) at_us: Option<u32>,
}

pub(super) struct PollSetup {
    pub(super) conns: Vec<Conn>,
    pub(super) tokens: Arc<Vec<HeaderValue>>,
    pub(super) path: String,
    pub(super) clock: Clock,
    pub(super) interval: Duration,
    pub(super) final_timeout: Duration,
    pub(super) finals_seen: Arc<AtomicU64>,
    /// Only collect arrivals until the load ends, then poll.
    pub(super) defer: bool,
}

#[derive(Default)]
pub(super) struct PollOut {
    pub(super) events: Vec<Event>,
    pub(super) finals: HashMap<usize, Final>,
}

pub(super) struct Pending {
    pub(super) user: usize,
    pub(super) next: Instant,
}

/// Polls accepted users' results until each is final, oldest first. Results become final in
/// about the order the requests were accepted (one queue), so each round polls only a window
/// of the oldest pending users, each no more often than `interval` (also under the gateway's per-user
/// rate limit); the window doubles while most of it turns out final and halves when little
/// does, so the polls follow the consumer without flooding the system they share the cores with.
pub(super) async fn poll_results(mut s: PollSetup, mut rx: mpsc::UnboundedReceiver<(usize, u32)>) -> PollOut {
    let mut out = PollOut::default();
    let mut pending: Vec<Pending> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut give_up: Option<Instant> = None;
    let c = s.conns.len().max(1);
    let mut window = c * 4;
    let mut arrive = |pending: &mut Vec<Pending>, user: usize| {
        if seen.insert(user) {
            pending.push(Pending { user, next: Instant::now() + s.interval });
        }
    };
    loop {
        loop {
            match rx.try_recv() {
                Ok((user, _)) => arrive(&mut pending, user),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                    break;
                }
            }
        }
        if (pending.is_empty() || s.defer) && give_up.is_none() {
            match rx.recv().await {
                Some((user, _)) => arrive(&mut pending, user),
                None => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                }
            }
            continue;
        }
        if pending.is_empty() {
            if give_up.is_some() {
                break;
            }
            match rx.recv().await {
                Some((user, _)) => arrive(&mut pending, user),
                None => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                }
            }
            continue;
        }
        let now = Instant::now();
        if give_up.is_some_and(|t| now >= t) {
            break;
        }
        // Only the oldest `window` pending users: beyond them, results are very likely still
        // queued, and polling them would only take CPU from the consumer.
        let head = &pending[..window.min(pending.len())];
        let batch: Vec<usize> =
            head.iter().enumerate().filter(|(_, p)| p.next <= now).map(|(i, _)| i).collect();
        if batch.is_empty() {
            let wake = head.iter().map(|p| p.next).min().unwrap_or(now + s.interval);
            let wake = give_up.map_or(wake, |g| wake.min(g));
            if give_up.is_none() {
                tokio::select! {
                    () = tokio::time::sleep_until(wake.into()) => {}
                    m = rx.recv() => match m {
                        Some((user, _)) => arrive(&mut pending, user),
                        None => { give_up.get_or_insert_with(|| Instant::now() + s.final_timeout); }
                    }
                }
            } else {
                tokio::time::sleep_until(wake.into()).await;
            }
            continue;
        }
        let users: Vec<usize> = batch.iter().map(|&i| pending[i].user).collect();
        let (tokens, path) = (&s.tokens, s.path.as_str());
        let answers = join_all(s.conns.iter_mut().enumerate().map(|(k, conn)| {
            let mine: Vec<usize> = users.iter().skip(k).step_by(c).copied().collect();
            async move {
                let mut got = Vec::with_capacity(mine.len());
                for user in mine {
                    let start = Instant::now();
                    let a = conn.send(Req::get(path).bearer(&tokens[user])).await;
                    got.push((user, a, start, Instant::now()));
                }
                got
            }
        }))
        .await;
        let mut done: HashSet<usize> = HashSet::new();
        for (user, a, start, end) in answers.into_iter().flatten() {
            out.events.push(s.clock.event(Call::Result, a.status, start, end));
            if let Some((state, order_id)) = final_state(&a) {
                out.finals.insert(user, Final { state, order_id, at_us: Some(s.clock.us(end)) });
                done.insert(user);
            }
        }
        s.finals_seen.fetch_add(done.len() as u64, Ordering::Relaxed);
        let next = Instant::now() + s.interval;
        for &i in &batch {
            pending[i].next = next;
        }
        pending.retain(|p| !done.contains(&p.user));
        let polled = batch.len();
        if done.len() * 2 >= polled {
            window = (window * 2).min(1 << 16);
        } else if done.len() * 5 < polled {
            window = (window / 2).max(c);
        }
    }
    for p in pending {
        out.finals.insert(p.user, Final { state: FinalState::Queued, order_id: None, at_us: None });
    }
    out
}

/// A result answer's final state and order; `None` while queued (or when the poll failed).
pub(super) fn final_state(a: &Answer) -> Option<(FinalState, Option<i64>)> {
    let r = a.json::<SeckillResult>()?;
    (r.status != SeckillStatus::Queued).then(|| (r.status.into(), r.order_id.map(|o| o.get())))
}
