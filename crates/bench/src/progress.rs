//! A progress bar on long runs (indicatif, on stderr, only when stderr is a terminal). Workers
//! bump a shared atomic counter; a ticker copies it to the bar five times a second, so the
//! hot loop never touches the bar.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    pub counter: Arc<AtomicU64>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// A bar of `len` steps (`None`: a spinner with a count), shown only if `enabled` and
    /// stderr is a terminal.
    pub fn new(enabled: bool, len: Option<u64>, what: &str) -> Self {
        let counter = Arc::new(AtomicU64::new(0));
        if !enabled || !std::io::stderr().is_terminal() {
            return Self { bar: None, counter, ticker: None };
        }
        let bar = match len {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} {per_sec:>12} eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg:>16} {spinner} {pos} {per_sec:>12} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_message(what.to_owned());
        let (b, c) = (bar.clone(), counter.clone());
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                b.set_position(c.load(Ordering::Relaxed));
            }
        });
        Self { bar: Some(bar), counter, ticker: Some(ticker) }
    }

    pub fn inc(&self, n: u64) {
        self.counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn finish(mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        if let Some(bar) = self.bar.take() {
            bar.set_position(self.counter.load(Ordering::Relaxed));
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
