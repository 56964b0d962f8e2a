//! How fast one replica expires orders. Thirty minutes after a big sale every unpaid order
//! comes due at once; taken as fast as the database goes, the storm takes the cores the next
//! sale's clicks need and keeps the database busy with it. Paced at `order.expiries_per_sec`,
//! the units still come back within seconds (50,000 in about four at the default), and the
//! rest of the machine and the database keep their share.

use std::num::NonZeroU32;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// The pace is kept in steps of a tenth of a second: each step one statement.
const STEPS_PER_SEC: u32 = 10;

pub struct ExpiryPace {
    /// None: as fast as the database goes.
    limiter: Option<DefaultDirectRateLimiter>,
    /// Most orders expired together: one step's worth when paced.
    step: usize,
}

impl ExpiryPace {
    /// `per_sec` orders a second at most; 0: no limit, `max_step` orders a statement.
    pub fn new(per_sec: u32, max_step: usize) -> Self {
        let Some(rate) = NonZeroU32::new(per_sec) else {
            return Self { limiter: None, step: max_step };
        };
        let step =
            NonZeroU32::new(per_sec.div_ceil(STEPS_PER_SEC).min(max_step as u32)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(rate).allow_burst(step);
        Self { limiter: Some(RateLimiter::direct(quota)), step: step.get() as usize }
    }

    /// Most orders to expire in one statement.
    pub fn step(&self) -> usize {
        self.step
    }

    /// Waits until `n` (at most [`Self::step`]) more orders may expire.
    pub async fn wait(&self, n: usize) {
        let (Some(limiter), Some(n)) = (&self.limiter, NonZeroU32::new(n.min(self.step) as u32)) else {
            return;
        };
        // `n` is at most the burst, so the only error (more than it could ever allow) cannot occur.
        let _ = limiter.until_n_ready(n).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_step_is_a_tenth_of_a_second_of_the_rate_bounded_by_the_statement_size() {
        assert_eq!(ExpiryPace::new(12_000, 5_000).step(), 1_200);
        assert_eq!(ExpiryPace::new(100_000, 5_000).step(), 5_000);
        assert_eq!(ExpiryPace::new(5, 5_000).step(), 1);
        assert_eq!(ExpiryPace::new(0, 5_000).step(), 5_000, "no limit: the statement size");
    }

    #[tokio::test]
    async fn paced_it_takes_as_long_as_the_rate_says_and_unpaced_no_time() {
        // 1,000 a second, steps of 100: the first step at once, nine more a tenth apart.
        let pace = ExpiryPace::new(1_000, 5_000);
        let start = Instant::now();
        for _ in 0..10 {
            pace.wait(100).await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(850), "{took:?}");

        let unpaced = ExpiryPace::new(0, 5_000);
        let start = Instant::now();
        for _ in 0..10 {
            unpaced.wait(5_000).await;
        }
        assert!(start.elapsed() < Duration::from_millis(500), "never waits");
    }
}
