//! A part of a service that becomes ready in the background: the database created and
//! migrated, the publisher's connection, the scripts loaded into Redis. A service starts and
//! serves `/healthz` while a server it needs is away; each such part keeps trying with
//! back-off ([`keep_trying`]) and says in its [`Readiness`] what it still waits for, which
//! `/readyz` shows. Only a setting that is wrong stops the start (checked before any of this).

use std::fmt::Display;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::watch;

/// The first pause after a failed try: short, so a server back within a second is used at once.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries (jittered below it): a server back is used within a few
/// seconds, and a hundred replicas waiting for it do not hammer it.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// The pauses between tries: [`RETRY_FIRST`] doubling to [`RETRY_MAX`], jittered, for ever.
pub fn backoff() -> impl Iterator<Item = Duration> + Send {
    ExponentialBuilder::default()
        .with_min_delay(RETRY_FIRST)
        .with_max_delay(RETRY_MAX)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Whether one part is ready, and if not, why: set by the task that makes it ready, read by
/// `/readyz` and by whoever waits for the start to finish (tests).
#[derive(Debug)]
pub struct Readiness {
    /// The part, for logs: `database`, `broker`, `redis scripts`.
    what: &'static str,
    /// None when ready, else what it waits for.
    waiting: Mutex<Option<String>>,
    ready: watch::Sender<bool>,
}

impl Readiness {
    /// Not ready yet, waiting for `why` (said until the first try answers otherwise).
    pub fn new(what: &'static str, why: impl Into<String>) -> Self {
        Self { what, waiting: Mutex::new(Some(why.into())), ready: watch::Sender::new(false) }
    }

    pub fn what(&self) -> &'static str {
        self.what
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// `/readyz`'s line: `Err("waiting: <why>")` until ready.
    pub fn check(&self) -> Result<(), String> {
        match &*self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            None => Ok(()),
            Some(why) => Err(format!("waiting: {why}")),
        }
    }

    pub fn set_ready(&self) {
        *self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.ready.send_replace(true);
    }

    /// Not ready (again), waiting for `why`.
    pub fn set_waiting(&self, why: impl Into<String>) {
        *self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.into());
        self.ready.send_replace(false);
    }

    /// Resolves once ready (at once if it is).
    pub async fn wait(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives in `self`, borrowed for the whole wait: `wait_for` cannot fail.
        let _ = ready.wait_for(|r| *r).await;
    }
}

/// Runs `attempt` until it succeeds, pausing by [`backoff`] between tries, and keeps
/// `readiness` saying why it is not ready yet (`describe` turns a failure into that line,
/// e.g. `migrations not applied yet (connection refused)`). Each failure is logged at WARN
/// (one line every few seconds at most, once the pauses are long), the success at INFO. Never
/// gives up: the caller drops the future when the service stops.
pub async fn keep_trying<T, E, F, Fut>(
    readiness: &Readiness,
    describe: impl Fn(&E) -> String,
    mut attempt: F,
) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut pauses = backoff();
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt().await {
            Ok(value) => {
                readiness.set_ready();
                if tries > 1 {
                    tracing::info!(part = readiness.what, tries, "ready after waiting for a server");
                }
                return value;
            }
            Err(e) => {
                let why = describe(&e);
                let pause = pauses.next().unwrap_or(RETRY_MAX);
                tracing::warn!(part = readiness.what, waiting = %why, error = %e, tries, ?pause,
                    "not ready yet: trying again in the background");
                readiness.set_waiting(why);
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn keeps_trying_saying_why_until_the_part_is_ready() {
        let readiness = Arc::new(Readiness::new("database", "not tried yet"));
        assert_eq!(readiness.check(), Err("waiting: not tried yet".to_owned()));
        let tries = Arc::new(AtomicU32::new(0));
        let (r, t) = (readiness.clone(), tries.clone());
        let task = tokio::spawn(async move {
            keep_trying(
                &r,
                |e: &String| format!("migrations not applied yet ({e})"),
                || {
                    let n = t.fetch_add(1, Ordering::SeqCst);
                    async move { if n < 3 { Err("connection refused".to_owned()) } else { Ok(n) } }
                },
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            readiness.check(),
            Err("waiting: migrations not applied yet (connection refused)".to_owned())
        );
        assert!(!readiness.is_ready());
        readiness.wait().await;
        assert_eq!(task.await.unwrap(), 3);
        assert_eq!(readiness.check(), Ok(()));
        assert_eq!(tries.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn the_pauses_double_up_to_a_few_seconds() {
        let pauses: Vec<Duration> = backoff().take(12).collect();
        assert!(pauses[0] >= RETRY_FIRST && pauses[0] < RETRY_FIRST * 3, "{pauses:?}");
        assert!(pauses.iter().all(|p| *p <= RETRY_MAX * 2), "{pauses:?}");
        assert!(pauses[11] >= RETRY_MAX, "{pauses:?}");
    }
}
