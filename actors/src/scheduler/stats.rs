//! The scheduler's figures: the stats snapshot, the budget's use and the cost report, and the
//! throughput over the last minute.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::sched::{BudgetStats, Class, CostReport, SchedulerStats};

use super::SchedulerState;
use super::ready::POOLS;

/// The window of `throughput_1m_per_s`, seconds.
pub(super) const RATE_WINDOW_SECS: u64 = 60;

/// Tasks finished per whole second, over the last minute.
#[derive(Debug)]
pub(super) struct DoneRate {
    /// `(second, count)` by `second % RATE_WINDOW_SECS`.
    buckets: [(u64, u64); RATE_WINDOW_SECS as usize],
}

impl Default for DoneRate {
    fn default() -> Self {
        DoneRate { buckets: [(0, 0); RATE_WINDOW_SECS as usize] }
    }
}

impl DoneRate {
    pub(super) fn add(&mut self, second: u64) {
        let b = &mut self.buckets[(second % RATE_WINDOW_SECS) as usize];
        if b.0 != second {
            *b = (second, 0);
        }
        b.1 += 1;
    }

    fn per_s(&self, elapsed: Duration) -> f64 {
        let now = elapsed.as_secs();
        let n: u64 = self.buckets.iter().filter(|(s, _)| now - (*s).min(now) < RATE_WINDOW_SECS).map(|b| b.1).sum();
        let span = elapsed.as_secs_f64().min(RATE_WINDOW_SECS as f64);
        if span > 0.0 { n as f64 / span } else { 0.0 }
    }
}

impl SchedulerState {
    pub(super) fn snapshot(&mut self, now: Instant) -> SchedulerStats {
        let mut s = self.stats.clone();
        let now_ns = self.ns(now);
        for c in Class::ALL {
            // Calls queued for budget wait too (counted as not granted yet, like those aside).
            let for_budget = self.budget_queue.iter().filter(|(_, w)| w.class == c).count();
            let mut queued = self.deferred[c as usize] + self.queues.queues[c as usize].len() + for_budget;
            let mut oldest = 0;
            for pool in 0..POOLS {
                queued += self.ready.len(pool, c);
                for origin in Class::ALL.into_iter().filter(|&o| o >= c) {
                    if let Some((_, at)) = self.ready.oldest(pool, c, origin) {
                        oldest = oldest.max(now_ns - at);
                    }
                }
            }
            let cs = s.class_mut(c);
            cs.queued = queued;
            cs.deferred = self.deferred[c as usize];
            cs.running = self.running_by_class[c as usize];
            cs.oldest_wait_ms = oldest as f64 / 1e6;
        }
        s.running_inference = self.config.inference_slots - self.free[0];
        s.running_cheap = self.config.cheap_slots - self.free[1];
        s.inference_slots = self.config.inference_slots;
        s.cheap_slots = self.config.cheap_slots;
        s.aging_per_30s = self.config.aging_per_30s;
        s.promote_after_secs = self.config.promote_after.as_secs_f64();
        s.background_period_secs = self.config.background_period.as_secs_f64();
        let elapsed = now.saturating_duration_since(self.epoch);
        let secs = elapsed.as_secs_f64();
        s.throughput_per_s = if secs > 0.0 { s.done as f64 / secs } else { 0.0 };
        s.throughput_1m_per_s = self.done_rate.per_s(elapsed);
        s.budget = self.budget_stats(now);
        s
    }

    pub(super) fn budget_stats(&mut self, now: Instant) -> BudgetStats {
        self.window.expire(now);
        let used = self.window.fleet();
        BudgetStats {
            inferences_last_hour: used.inferences,
            tokens_last_hour: used.tokens,
            tokens_reserved: self.window.reserved(),
            inferences_per_hour: self.config.fleet_inferences_per_hour,
            tokens_per_hour: self.config.fleet_tokens_per_hour,
            soft_limit: self.config.budget_soft_limit,
        }
    }

    pub(super) fn cost(&mut self, since: Duration, buckets: u32, now: Instant) -> CostReport {
        let budget = self.budget_stats(now);
        let names: Vec<Arc<str>> = self.personas.iter().map(|p| p.name.clone()).collect();
        CostReport { budget, ..self.window.cost(now, since, buckets, &names) }
    }
}
