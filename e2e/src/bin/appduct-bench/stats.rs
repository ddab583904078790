//! Latency samples of one workload: percentiles and throughput.

use std::time::Duration;

/// Every round trip of one workload and the wall time it took.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Sorted ascending (see [`Sample::new`]).
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Sample {
    pub fn new(mut latencies: Vec<Duration>, wall: Duration) -> Self {
        latencies.sort_unstable();
        Self { latencies, wall }
    }

    /// Merges the samples of concurrent workers that ran over the same `wall` time.
    pub fn merge(parts: Vec<Sample>, wall: Duration) -> Self {
        let latencies = parts.into_iter().flat_map(|s| s.latencies).collect();
        Self::new(latencies, wall)
    }

    pub fn count(&self) -> usize {
        self.latencies.len()
    }

    /// The `q` quantile (nearest rank), zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// Completed round trips per second of wall time.
    pub fn rate(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.latencies.len() as f64 / secs
        } else {
            0.0
        }
    }
}

/// Microseconds, for tables.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank_and_rate_counts_per_second() {
        let lat: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let s = Sample::new(lat, Duration::from_millis(50));
        assert_eq!(s.p50(), Duration::from_micros(50));
        assert_eq!(s.p99(), Duration::from_micros(99));
        assert_eq!(s.quantile(1.0), Duration::from_micros(100));
        assert!((s.rate() - 2000.0).abs() < 1e-6);
        let empty = Sample::default();
        assert_eq!(empty.p99(), Duration::ZERO);
        assert_eq!(empty.rate(), 0.0);
    }
}
