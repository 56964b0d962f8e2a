//! A click as the load makes it (path token, then order, retried as a client would) and the
//! connections' workers that make them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use tokio::sync::{Notify, mpsc};

use crate::api::SalePaths;
use crate::busy::{self, BusyRetry};
use crate::client::{Answer, Conn, Req, STATUS_ERROR, STATUS_TIMEOUT};
use crate::record::{Call, Clock, Event};

/// Hands out clicks: which user, and (open loop) when.
pub(super) struct ClickSource {
    pub(super) next: AtomicU64,
    pub(super) limit: Option<u64>,
    pub(super) deadline: Option<Instant>,
    pub(super) users: u64,
    pub(super) rate: Option<f64>,
    pub(super) t0: Instant,
}

impl ClickSource {
    pub(super) fn next(&self) -> Option<(usize, Option<Instant>)> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        if self.limit.is_some_and(|l| seq >= l) {
            return None;
        }
        let scheduled = self.rate.map(|r| self.t0 + Duration::from_secs_f64(seq as f64 / r));
        if let Some(deadline) = self.deadline
            && scheduled.unwrap_or_else(Instant::now) >= deadline
        {
            return None;
        }
        let user = (seq % self.users.max(1)) as usize;
        Some((user, scheduled))
    }
}

/// Where a click's path token comes from.
#[derive(Clone)]
pub(super) enum PathTokens {
    /// None is presented (`seckill.require_token = false`).
    Off,
    /// Asked for at the start of each click (`POST .../token`, then the order).
    PerClick,
    /// Each user's token, fetched before the clock, presented on every click.
    Fetched(Arc<Vec<HeaderValue>>),
}

/// One click's outcome.
#[derive(Debug, Clone, Copy)]
pub(super) struct Click {
    pub(super) user: usize,
    /// Which of the click gateways answered it (its last call).
    pub(super) gateway: usize,
    /// The status of the last call the click made (the path token's when it was refused).
    pub(super) last: Call,
    pub(super) status: u16,
    pub(super) answered_us: u32,
    /// `503 BUSY` answers the click got, the retried ones and the last.
    pub(super) busy_answers: u32,
    /// The click ended on a `503 BUSY`: still shed after all its retries.
    pub(super) ended_busy: bool,
}

/// A click not ended yet: the call it makes next, and its BUSY answers so far.
#[derive(Clone)]
pub(super) struct OpenClick {
    pub(super) user: usize,
    pub(super) next: Next,
    /// When its next call is due: the schedule (open loop) or the end of a `Retry-After`; the
    /// call's latency is counted from here. `None`: now (closed loop).
    pub(super) due: Option<Instant>,
    /// BUSY answers so far, each of them retried.
    pub(super) busy_answers: u32,
}

/// A click's next call.
#[derive(Clone)]
pub(super) enum Next {
    /// Ask for a path token, then order with it.
    PathToken,
    /// Order, presenting this path token if any.
    Order(Option<HeaderValue>),
}

impl OpenClick {
    pub(super) fn new(user: usize, due: Option<Instant>, path_tokens: &PathTokens) -> Self {
        let next = match path_tokens {
            PathTokens::Off => Next::Order(None),
            PathTokens::PerClick => Next::PathToken,
            PathTokens::Fetched(fetched) => Next::Order(Some(fetched[user].clone())),
        };
        Self { user, next, due, busy_answers: 0 }
    }
}

/// Where a click stands after [`Clicker::advance`].
pub(super) enum Stepped {
    Ended(Click),
    /// Answered BUSY: to be tried again once `due`.
    Retry(OpenClick),
}

/// Clicks waiting out a BUSY answer's `Retry-After`, shared by the load's connections. The
/// connection that got the BUSY goes on with the next click; a timer hands the click back when
/// its wait is over, and the first free connection sends the retry. So in open loop a retry
/// never holds up the schedule, and N connections stay N sockets.
#[derive(Default)]
pub(super) struct Retries {
    pub(super) ready: Mutex<VecDeque<OpenClick>>,
    /// Clicks taken from the source and not ended: being sent, waiting, or ready.
    pub(super) open: AtomicU64,
    /// A retry is ready, or the last open click ended.
    pub(super) wake: Notify,
}

impl Retries {
    pub(super) fn opened(&self) {
        self.open.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn closed(&self) {
        if self.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.wake.notify_waiters();
        }
    }

    /// No click is open: with the source dry, the load is over.
    pub(super) fn idle(&self) -> bool {
        self.open.load(Ordering::SeqCst) == 0
    }

    /// Hands `click` back once its wait is over.
    pub(super) fn wait_out(self: &Arc<Self>, click: OpenClick) {
        let retries = self.clone();
        tokio::spawn(async move {
            if let Some(due) = click.due {
                tokio::time::sleep_until(due.into()).await;
            }
            retries.ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(click);
            retries.wake.notify_one();
        });
    }

    /// A retry whose wait is over, oldest first.
    pub(super) fn take(&self) -> Option<OpenClick> {
        let mut ready = self.ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let click = ready.pop_front();
        if click.is_some() && !ready.is_empty() {
            // More are ready: pass the word on to another idle connection.
            self.wake.notify_one();
        }
        click
    }
}

impl Click {
    /// The order was accepted (202): the user is queued for a result.
    pub(super) fn accepted(&self) -> bool {
        self.last == Call::Order && self.status == 202
    }
}

#[derive(Default)]
pub(super) struct WorkerOut {
    pub(super) events: Vec<Event>,
    pub(super) clicks: Vec<Click>,
    pub(super) reconnects: u64,
}

/// A refusal that is not an answer about the sale: the click may be retried.
pub(super) fn is_undecided(status: u16) -> bool {
    matches!(status, STATUS_ERROR | STATUS_TIMEOUT | 429) || status >= 500
}

/// What every load connection clicks with.
#[derive(Clone)]
pub(super) struct Clicker {
    pub(super) source: Arc<ClickSource>,
    pub(super) tokens: Arc<Vec<HeaderValue>>,
    pub(super) paths: Arc<SalePaths>,
    /// Accepted users, with when, for the poller.
    pub(super) accepted: mpsc::UnboundedSender<(usize, u32)>,
    pub(super) clock: Clock,
    pub(super) path_tokens: PathTokens,
    pub(super) busy: BusyRetry,
    pub(super) retries: Arc<Retries>,
    /// Clicks ended, for the progress bar.
    pub(super) done: Arc<AtomicU64>,
}

/// One load connection: a retry whose wait is over first, else the source's next click (open
/// loop: at its time, unless a retry gets ready meanwhile), until the source is dry and no
/// click is left open.
pub(super) async fn buy_worker(mut conn: Conn, gateway: usize, clicker: Clicker) -> WorkerOut {
    let mut out = WorkerOut::default();
    let retries = clicker.retries.clone();
    let mut fresh: Option<OpenClick> = None;
    // Closed loop: the click this connection's buyer tries again after its Retry-After.
    let mut own_retry: Option<OpenClick> = None;
    let mut dry = false;
    loop {
        // Listening before looking: a retry made ready or the last click ended in between is
        // not missed.
        let wake = retries.wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let click = if let Some(retry) = own_retry.take() {
            if let Some(due) = retry.due {
                tokio::time::sleep_until(due.into()).await;
            }
            retry
        } else if let Some(retry) = retries.take() {
            retry
        } else {
            if fresh.is_none() && !dry {
                fresh = clicker.fresh();
                dry = fresh.is_none();
            }
            match fresh.take() {
                Some(click) => {
                    if let Some(at) = click.due.filter(|at| *at > Instant::now()) {
                        tokio::select! {
                            () = tokio::time::sleep_until(at.into()) => {}
                            () = &mut wake => {
                                fresh = Some(click);
                                continue;
                            }
                        }
                    }
                    click
                }
                None if retries.idle() => break,
                None => {
                    wake.await;
                    continue;
                }
            }
        };
        match clicker.advance(&mut conn, gateway, click, &mut out.events).await {
            Stepped::Ended(click) => {
                out.clicks.push(click);
                clicker.done.fetch_add(1, Ordering::Relaxed);
                retries.closed();
            }
            // In closed loop a connection is one buyer, who waits out the Retry-After before
            // clicking again (going on with another click at once would make every refusal
            // a new request at once: a storm no browser makes).
            Stepped::Retry(click) if clicker.source.rate.is_none() => own_retry = Some(click),
            Stepped::Retry(click) => retries.wait_out(click),
        }
    }
    out.reconnects = conn.reconnects;
    out
}

impl Clicker {
    /// The source's next click, counted open; `None` when the source is dry.
    pub(super) fn fresh(&self) -> Option<OpenClick> {
        // Opened before it is taken: no connection sees the source dry and nothing open while
        // another holds a click it has not counted yet.
        self.retries.opened();
        match self.source.next() {
            Some((user, scheduled)) => Some(OpenClick::new(user, scheduled, &self.path_tokens)),
            None => {
                self.retries.closed();
                None
            }
        }
    }

    /// A click's calls from the next one on: the path token when one is asked for per click,
    /// then the order; until the click ends or is answered BUSY with a retry left.
    pub(super) async fn advance(
        &self,
        conn: &mut Conn,
        gateway: usize,
        mut click: OpenClick,
        events: &mut Vec<Event>,
    ) -> Stepped {
        let bearer = &self.tokens[click.user];
        let mut start = click.due.unwrap_or_else(Instant::now);
        let presented = match click.next.clone() {
            Next::Order(presented) => presented,
            Next::PathToken => {
                let a = conn.send(Req::post(&self.paths.token).bearer(bearer)).await;
                let end = Instant::now();
                events.push(self.clock.event(Call::PathToken, a.status, start, end));
                if a.status != 200 {
                    return self.refused(click, gateway, Call::PathToken, &a, end);
                }
                start = end;
                a.path_token()
            }
        };
        let mut req = Req::post(&self.paths.orders).bearer(bearer);
        if let Some(t) = presented.clone() {
            req = req.path_token(t);
        }
        let a = conn.send(req).await;
        let end = Instant::now();
        events.push(self.clock.event(Call::Order, a.status, start, end));
        if a.status == 202 {
            let answered_us = self.clock.us(end);
            let _ = self.accepted.send((click.user, answered_us));
            return Stepped::Ended(Click {
                user: click.user,
                gateway,
                last: Call::Order,
                status: a.status,
                answered_us,
                busy_answers: click.busy_answers,
                ended_busy: false,
            });
        }
        // A BUSY order was shed before the path token was looked at: the retry presents it again.
        click.next = Next::Order(presented);
        self.refused(click, gateway, Call::Order, &a, end)
    }

    /// `call` was not what the click wanted: retried after the wait when it was BUSY and a
    /// retry is left, else the click's end.
    pub(super) fn refused(
        &self,
        mut click: OpenClick,
        gateway: usize,
        call: Call,
        a: &Answer,
        end: Instant,
    ) -> Stepped {
        if let Some(wait) = self.busy.decide(a, click.busy_answers) {
            click.busy_answers += 1;
            click.due = Some(end + wait);
            return Stepped::Retry(click);
        }
        let ended_busy = busy::is_busy(a);
        Stepped::Ended(Click {
            user: click.user,
            gateway,
            last: call,
            status: a.status,
            answered_us: self.clock.us(end),
            busy_answers: click.busy_answers + u32::from(ended_busy),
            ended_busy,
        })
    }
}
