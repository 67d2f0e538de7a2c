//! The scheduler's figures: per class, skips, budgets, and the cost report of `mindfleet ai
//! cost`. Dump data: nothing here knows the scheduler's messages.

use serde::{Deserialize, Serialize};

use crate::task::{Class, SkipReason};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClassStats {
    /// Tasks of this class not granted yet: waiting for a slot, set aside by their persona's
    /// cadence (`deferred`), or submitted and not yet seen by the scheduler. A promoted task
    /// counts in the class it was promoted into.
    pub queued: usize,
    /// Of `queued`, the tasks waiting for their persona's cadence.
    pub deferred: usize,
    /// Granted and not done yet, by the class of submission.
    pub running: usize,
    /// Grants that hold a slot (`Run`, `RulesOnly`), by the class of submission.
    pub granted: u64,
    /// Longest current wait, since submission, of a task waiting for a slot in this class,
    /// milliseconds.
    pub oldest_wait_ms: f64,
    /// Answers given after the task's deadline, by the class of submission.
    pub deadline_misses: u64,
    /// Tasks promoted out of this class into the next higher one.
    pub promoted: u64,
}

/// Counts by [`SkipReason`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SkipCounts {
    pub soft_token_budget: u64,
    pub soft_call_budget: u64,
    pub hard_budget: u64,
}

impl SkipCounts {
    pub fn add(&mut self, reason: SkipReason) {
        match reason {
            SkipReason::SoftTokenBudget => self.soft_token_budget += 1,
            SkipReason::SoftCallBudget => self.soft_call_budget += 1,
            SkipReason::HardBudget => self.hard_budget += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.soft_token_budget + self.soft_call_budget + self.hard_budget
    }
}

/// Model use of the whole fleet over the last hour, against its budget.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BudgetStats {
    /// Inferences granted in the last hour (running ones included).
    pub inferences_last_hour: u64,
    /// Tokens used in the last hour, with the full reservation of the running tasks.
    pub tokens_last_hour: u64,
    /// Of `tokens_last_hour`, what running tasks hold reserved.
    pub tokens_reserved: u64,
    pub inferences_per_hour: u64,
    pub tokens_per_hour: u64,
    /// Share of a budget above which low-priority model calls are skipped.
    pub soft_limit: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SchedulerStats {
    pub urgent: ClassStats,
    pub interactive: ClassStats,
    pub work: ClassStats,
    pub background: ClassStats,
    pub running_inference: usize,
    pub running_cheap: usize,
    pub inference_slots: usize,
    pub cheap_slots: usize,
    /// Grants that hold a slot (`Run`, `RulesOnly`).
    pub granted: u64,
    pub done: u64,
    /// Grants whose owner was gone, and tasks dropped by `Release`.
    pub released: u64,
    /// Tasks finished per second since start.
    pub throughput_per_s: f64,
    /// Tasks finished per second over the last minute.
    pub throughput_1m_per_s: f64,
    pub aging_per_30s: f64,
    /// Answers given after the task's deadline (all classes).
    pub deadline_misses: u64,
    /// Promotions of waiting tasks into a higher class.
    pub promotions: u64,
    /// Background tasks granted ahead of waiting higher-class tasks because they waited
    /// their period.
    pub background_turns: u64,
    /// Preemptible background tasks asked for their slot back by waiting higher-class work.
    pub preempted: u64,
    /// `Skipped` answers by reason.
    pub skipped: SkipCounts,
    /// `RulesOnly` answers by reason.
    pub rules_only: SkipCounts,
    pub budget: BudgetStats,
    pub promote_after_secs: f64,
    pub background_period_secs: f64,
}

impl SchedulerStats {
    pub fn class(&self, c: Class) -> &ClassStats {
        match c {
            Class::Urgent => &self.urgent,
            Class::Interactive => &self.interactive,
            Class::Work => &self.work,
            Class::Background => &self.background,
        }
    }

    pub fn class_mut(&mut self, c: Class) -> &mut ClassStats {
        match c {
            Class::Urgent => &mut self.urgent,
            Class::Interactive => &mut self.interactive,
            Class::Work => &mut self.work,
            Class::Background => &mut self.background,
        }
    }

    pub fn queued(&self) -> usize {
        self.urgent.queued + self.interactive.queued + self.work.queued + self.background.queued
    }

    /// No task of a class above `Background` is queued or running.
    pub fn foreground_idle(&self) -> bool {
        [&self.urgent, &self.interactive, &self.work].iter().all(|c| c.queued == 0 && c.running == 0)
    }
}

/// Model calls and tokens of one persona, room or purpose.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CostRow {
    pub key: String,
    pub inferences: u64,
    pub tokens: u64,
}

/// Model use over a recent window, from the scheduler's budget ledger (kept in memory for one
/// hour: a restart starts it empty).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CostReport {
    pub since_secs: f64,
    /// Model calls granted in the window (running ones included).
    pub inferences: u64,
    /// Tokens used, with the full reservation of running calls.
    pub tokens: u64,
    /// Of `tokens`, what running calls hold reserved.
    pub tokens_reserved: u64,
    /// Most first.
    pub by_persona: Vec<CostRow>,
    /// By the room the work was for (`-` when none).
    pub by_room: Vec<CostRow>,
    /// By the task's label (`gate`, `draft_reply`, `evaluate`, `call_tool`, ...).
    pub by_purpose: Vec<CostRow>,
    /// The tool calls among them, by tool (`server.tool`; no tokens).
    #[serde(default)]
    pub by_tool: Vec<CostRow>,
    /// Grant to `done` of the finished calls, milliseconds.
    pub latency_p50_ms: f64,
    pub latency_p95_ms: f64,
    pub latency_p99_ms: f64,
    pub budget: BudgetStats,
    /// Width of the timeline's buckets (0: no timeline was asked for).
    #[serde(skip_serializing_if = "is_zero")]
    pub bucket_secs: f64,
    /// Each persona's tokens per bucket, oldest first, the window's last bucket ending now;
    /// in the order of `by_persona`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<CostSeries>,
    /// Who consolidates conversations into observations (`[conversation] observations`):
    /// `rules` cost no model call; `model` calls show under the purpose `observe`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub observations: String,
}

impl CostReport {
    /// The reports of the nodes of a cluster (each of its own personas, with its own scheduler
    /// and budget) as one: counts, rows and budgets summed, each persona's timeline kept, and
    /// the latency percentiles of the slowest node (percentiles of parts cannot be merged).
    pub fn merge(parts: Vec<CostReport>) -> CostReport {
        fn rows(all: impl Iterator<Item = CostRow>) -> Vec<CostRow> {
            let mut by_key: Vec<CostRow> = Vec::new();
            for r in all {
                match by_key.iter_mut().find(|x| x.key == r.key) {
                    Some(x) => {
                        x.inferences += r.inferences;
                        x.tokens += r.tokens;
                    }
                    None => by_key.push(r),
                }
            }
            by_key.sort_by(|a, b| b.tokens.cmp(&a.tokens).then_with(|| a.key.cmp(&b.key)));
            by_key
        }
        let mut m = CostReport::default();
        let (mut personas, mut rooms, mut purposes, mut tools) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for p in parts {
            m.since_secs = m.since_secs.max(p.since_secs);
            m.inferences += p.inferences;
            m.tokens += p.tokens;
            m.tokens_reserved += p.tokens_reserved;
            personas.extend(p.by_persona);
            rooms.extend(p.by_room);
            purposes.extend(p.by_purpose);
            tools.extend(p.by_tool);
            m.latency_p50_ms = m.latency_p50_ms.max(p.latency_p50_ms);
            m.latency_p95_ms = m.latency_p95_ms.max(p.latency_p95_ms);
            m.latency_p99_ms = m.latency_p99_ms.max(p.latency_p99_ms);
            let b = &mut m.budget;
            b.inferences_last_hour += p.budget.inferences_last_hour;
            b.tokens_last_hour += p.budget.tokens_last_hour;
            b.tokens_reserved += p.budget.tokens_reserved;
            b.inferences_per_hour += p.budget.inferences_per_hour;
            b.tokens_per_hour += p.budget.tokens_per_hour;
            b.soft_limit = p.budget.soft_limit;
            m.bucket_secs = m.bucket_secs.max(p.bucket_secs);
            m.timeline.extend(p.timeline);
            if m.observations.is_empty() {
                m.observations = p.observations;
            }
        }
        m.by_persona = rows(personas.into_iter());
        m.by_room = rows(rooms.into_iter());
        m.by_purpose = rows(purposes.into_iter());
        m.by_tool = rows(tools.into_iter());
        // In the order of `by_persona`, as on one node.
        let order = |k: &str| m.by_persona.iter().position(|r| r.key == k).unwrap_or(usize::MAX);
        let mut timeline = std::mem::take(&mut m.timeline);
        timeline.sort_by_key(|s| order(&s.key));
        m.timeline = timeline;
        m
    }
}

/// Most buckets a cost timeline has.
pub const MAX_COST_BUCKETS: u32 = 120;

/// One persona's tokens over time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CostSeries {
    pub key: String,
    pub tokens: Vec<u64>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, inferences: u64, tokens: u64) -> CostRow {
        CostRow { key: key.into(), inferences, tokens }
    }

    #[test]
    fn the_costs_of_two_nodes_add_up_as_one_report() {
        let a = CostReport {
            since_secs: 900.0,
            inferences: 3,
            tokens: 300,
            by_persona: vec![row("alice", 3, 300)],
            by_room: vec![row("general", 2, 200), row("-", 1, 100)],
            by_purpose: vec![row("draft_reply", 3, 300)],
            latency_p50_ms: 40.0,
            latency_p99_ms: 90.0,
            budget: BudgetStats { inferences_per_hour: 1000, soft_limit: 0.8, ..Default::default() },
            bucket_secs: 30.0,
            timeline: vec![CostSeries { key: "alice".into(), tokens: vec![100, 200] }],
            ..Default::default()
        };
        let b = CostReport {
            since_secs: 900.0,
            inferences: 5,
            tokens: 700,
            by_persona: vec![row("bob", 5, 700)],
            by_room: vec![row("general", 5, 700)],
            by_purpose: vec![row("draft_reply", 4, 600), row("gate", 1, 100)],
            latency_p50_ms: 30.0,
            latency_p99_ms: 120.0,
            budget: BudgetStats { inferences_per_hour: 1000, soft_limit: 0.8, ..Default::default() },
            bucket_secs: 30.0,
            timeline: vec![CostSeries { key: "bob".into(), tokens: vec![300, 400] }],
            ..Default::default()
        };
        let m = CostReport::merge(vec![a, b]);
        assert_eq!((m.inferences, m.tokens), (8, 1000));
        assert_eq!(m.by_persona, [row("bob", 5, 700), row("alice", 3, 300)], "most first");
        assert_eq!(m.by_room, [row("general", 7, 900), row("-", 1, 100)]);
        assert_eq!(m.by_purpose, [row("draft_reply", 7, 900), row("gate", 1, 100)]);
        assert_eq!((m.latency_p50_ms, m.latency_p99_ms), (40.0, 120.0), "the slowest node's");
        assert_eq!((m.budget.inferences_per_hour, m.budget.soft_limit), (2000, 0.8));
        let keys: Vec<&str> = m.timeline.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["bob", "alice"], "in the order of by_persona");
        assert_eq!(m.bucket_secs, 30.0);
    }
}
