//! The writer's latency figures: a log histogram over every sample since start, and the last
//! samples for recent percentiles.

/// Every sample since start, in buckets 5% apart: percentiles within 5% in constant memory.
#[derive(Debug)]
pub(crate) struct LogHistogram {
    /// Bucket `i` holds values up to `MIN_MS * GROWTH^i` (the first also everything below).
    pub(crate) counts: Vec<u64>,
    pub(crate) total: u64,
    pub(crate) max: f64,
}

impl LogHistogram {
    const MIN_MS: f64 = 0.01;
    const GROWTH: f64 = 1.05;
    /// Up to 0.01 ms x 1.05^400, about 3,000 s; the last bucket also holds anything longer.
    const BUCKETS: usize = 401;

    pub(crate) fn push(&mut self, ms: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; Self::BUCKETS];
        }
        let i = if ms <= Self::MIN_MS { 0.0 } else { ((ms / Self::MIN_MS).ln() / Self::GROWTH.ln()).ceil() };
        self.counts[(i as usize).min(Self::BUCKETS - 1)] += 1;
        self.total += 1;
        self.max = self.max.max(ms);
    }

    /// The upper bound of the bucket holding the `p` quantile (never above the maximum seen).
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let rank = ((self.total as f64 * p).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (Self::MIN_MS * Self::GROWTH.powi(i as i32)).min(self.max);
            }
        }
        0.0
    }
}

/// A bounded window of recent samples for percentiles.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pub(crate) buf: Vec<f64>,
    pub(crate) next: usize,
}

impl Samples {
    const CAP: usize = 8192;

    pub(crate) fn push(&mut self, v: f64) {
        if self.buf.len() < Self::CAP {
            self.buf.push(v);
        } else {
            self.buf[self.next] = v;
        }
        self.next = (self.next + 1) % Self::CAP;
    }

    pub(crate) fn percentile(&self, p: f64) -> f64 {
        mindfleet_core::quantile::percentile(&mut self.buf.clone(), p)
    }
}
