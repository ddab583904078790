//! The wall clock seam (ARCHITECTURE.md#test-layers): `expiresAt`, notification `ts`, audit timestamps,
//! `startedAt` and leaf validity read it, so tests can set the time. Timers use tokio time.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock: `expiresAt`, notification `ts`, audit timestamps, `startedAt`, leaf validity.
/// Timers use tokio time instead (paused in tests).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> u64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        // A clock before 1970 is a broken host; report the epoch rather than fail.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A settable clock for tests. Clones share one time, so a test keeps a clone and moves the
/// daemon's clock by setting its own.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(now_unix_ms: u64) -> Self {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(now_unix_ms)),
        }
    }

    pub fn set(&self, now_unix_ms: u64) {
        self.now_ms.store(now_unix_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_and_settable() {
        let clock = ManualClock::new(1_000);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        assert_eq!(shared.now_unix_ms(), 1_000);
        clock.advance(Duration::from_millis(250));
        assert_eq!(shared.now_unix_ms(), 1_250);
        clock.set(5);
        assert_eq!(shared.now_unix_ms(), 5);
    }

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now_unix_ms() > 1_704_067_200_000);
    }
}
