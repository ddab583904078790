//! Time and jitter sources, injectable for tests.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock the client reads, in unix milliseconds. Timers are computed from it, and it
/// stamps `event.ts` and the claim expiry check.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// Unix time sampled once, advanced by tokio's monotonic clock: it never jumps with wall-clock
/// changes, and it follows tokio's paused time in tests (`tokio::time::pause`/`advance`).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_unix_ms: u64,
    base: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl TokioClock {
    pub fn new() -> Self {
        let base_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::starting_at(base_unix_ms)
    }

    /// A clock that reads `unix_ms` now (tests pin the start of a scenario).
    pub fn starting_at(unix_ms: u64) -> Self {
        Self {
            base_unix_ms: unix_ms,
            base: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_unix_ms.saturating_add(elapsed)
    }
}

/// A uniform value in [0, 1) for backoff jitter, from the std library's randomly keyed hasher
/// (jitter needs spread, not cryptographic strength).
pub fn default_random() -> impl FnMut() -> f64 + Send + 'static {
    let keys = RandomState::new();
    let mut counter: u64 = 0;
    move || {
        counter = counter.wrapping_add(1);
        let mut h = keys.build_hasher();
        h.write_u64(counter);
        // 53 random bits make an exact double in [0, 1).
        (h.finish() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_random_stays_in_the_unit_interval_and_varies() {
        let mut r = default_random();
        let values: Vec<f64> = (0..1000).map(|_| r()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        assert!(values.iter().any(|v| *v < 0.5) && values.iter().any(|v| *v >= 0.5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_paused_time() {
        let clock = TokioClock::starting_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(std::time::Duration::from_millis(250)).await;
        assert_eq!(clock.now_ms(), 1_250);
    }
}
