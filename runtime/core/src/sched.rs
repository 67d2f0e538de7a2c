//! The scheduler's interface: submit, grant, done.
//!
//! Personas submit tasks through a [`SchedulerHandle`]: the task goes into a lock-free
//! queue of its class and at most one `Wake` message is in the scheduler's mailbox at a
//! time, so a flood of submissions never queues in front of anything in the mailbox.
//! The scheduler actor (crate `mindfleet-actors`, whose module doc states the policy)
//! alone drains the queues, orders the tasks and sends `PersonaMsg::Granted` to the owner.
//!
//! What the owner does with a [`Grant`] depends on its [`Outcome`]:
//!
//! - `Run`: run the task as submitted, then call [`SchedulerHandle::done`] (or
//!   [`SchedulerHandle::done_with_tokens`] with the model tokens it used, which refunds the
//!   rest of its reservation).
//! - `RulesOnly(reason)`: the budget has no room for a model call; run the step with the
//!   rules brain (the grant holds a cheap slot), then call `done`.
//! - `Skipped(reason)`: do not run it and do not call `done`: no slot is held.
//!
//! `done` goes through a lock-free queue too, behind the same coalesced `Wake`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use ractor::{ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

use crate::config::PersonaConfig;
use crate::messages::PersonaMsg;

/// The scheduler's clock, for `Task::submitted` and deadlines.
///
/// It reads tokio's clock, which is `Instant::now()` except in tests that pause time: there
/// the scheduler's timers, its waits and the tasks' timestamps all follow the paused clock.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Priority classes, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Urgent = 0,
    Interactive = 1,
    Work = 2,
    Background = 3,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Urgent, Class::Interactive, Class::Work, Class::Background];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Urgent => "urgent",
            Class::Interactive => "interactive",
            Class::Work => "work",
            Class::Background => "background",
        }
    }

    /// The class a waiting task is promoted into: one up, never into `Urgent`.
    pub fn promoted(self) -> Class {
        match self {
            Class::Urgent => Class::Urgent,
            Class::Interactive | Class::Work => Class::Interactive,
            Class::Background => Class::Work,
        }
    }
}

/// Which pool of concurrency a task draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    /// Model inference: the scarce resource.
    Inference,
    /// Everything cheap (rules, memory, storage requests).
    Cheap,
}

pub type TaskId = u64;

/// Who is told when a task is granted.
#[derive(Debug, Clone)]
pub enum Owner {
    Persona(ActorRef<PersonaMsg>),
    /// A plain channel (benchmarks, tests of the scheduler itself).
    Channel(crossbeam_channel::Sender<Grant>),
}

impl Owner {
    /// Delivers the grant; false when the owner is gone.
    pub fn grant(&self, grant: Grant) -> bool {
        match self {
            Owner::Persona(a) => a.cast(PersonaMsg::Granted(grant)).is_ok(),
            Owner::Channel(tx) => tx.send(grant).is_ok(),
        }
    }

    /// Asks for the slot of `task` back; false when the owner cannot be asked (or is gone).
    pub fn preempt(&self, task: TaskId) -> bool {
        match self {
            Owner::Persona(a) => a.cast(PersonaMsg::Preempt(task)).is_ok(),
            Owner::Channel(_) => false,
        }
    }
}

/// A unit of cognitive work waiting for a grant.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: TaskId,
    pub persona: Arc<str>,
    pub class: Class,
    /// 0..=1 within the class.
    pub priority: f64,
    pub slot: Slot,
    /// What it is, for stats and traces (`gate`, `respond`, ...).
    pub label: &'static str,
    pub owner: Owner,
    /// When it was submitted, on the scheduler's clock ([`now`]); aging and promotion count from it.
    pub submitted: Instant,
    /// Latest time the task is still useful to start; granting it later is a counted miss.
    pub deadline: Option<Instant>,
    /// Model tokens the task may use, reserved against the budgets until `done` (0: no model).
    /// Only tasks with `max_tokens > 0` count against the budgets: one inference each.
    pub max_tokens: u32,
    /// Subject to its persona's cadence: it starts a new piece of self-paced work (a `Work`
    /// plan, a `Background` pass). Never applies to `Urgent` tasks.
    pub paced: bool,
    /// The room the work is for, for cost accounting.
    pub room: Option<Arc<str>>,
    /// A `Background` task whose slot the owner gives back when asked (`PersonaMsg::Preempt`)
    /// because higher-class work waits for it.
    pub preemptible: bool,
}

impl Task {
    /// A task with no deadline and no model call.
    pub fn new(persona: Arc<str>, class: Class, priority: f64, slot: Slot, label: &'static str, owner: Owner) -> Task {
        Task {
            id: SchedulerHandle::next_id(),
            persona,
            class,
            priority,
            slot,
            label,
            owner,
            submitted: now(),
            deadline: None,
            max_tokens: 0,
            paced: false,
            room: None,
            preemptible: false,
        }
    }

    /// The same task, its slot given back when higher-class work waits for one.
    pub fn preemptible(mut self) -> Task {
        self.preemptible = true;
        self
    }

    /// The same task, paced by its persona's cadence.
    pub fn paced(mut self) -> Task {
        self.paced = true;
        self
    }

    /// The same task, accounted to `room`.
    pub fn in_room(mut self, room: &str) -> Task {
        self.room = Some(Arc::from(room));
        self
    }

    /// The same task with a deadline `within` after its submission.
    pub fn within(mut self, within: Duration) -> Task {
        self.deadline = Some(self.submitted + within);
        self
    }

    /// The same task as a model call of at most `max_tokens` tokens (counted against the budgets).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Task {
        self.max_tokens = max_tokens;
        self
    }
}

/// Why a task was not run as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Above the soft limit of the token budget and priority <= 0.8.
    SoftTokenBudget,
    /// Above the soft limit of the call budget and priority <= 0.6.
    SoftCallBudget,
    /// The hard limit would be crossed.
    HardBudget,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::SoftTokenBudget => "soft_token_budget",
            SkipReason::SoftCallBudget => "soft_call_budget",
            SkipReason::HardBudget => "hard_budget",
        }
    }
}

/// What the owner may do with a granted task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Run it as submitted; call `done` after.
    Run,
    /// Run it without a model (the `rules` brain); call `done` after.
    RulesOnly(SkipReason),
    /// Do not run it; no slot is held, so no `done`.
    Skipped(SkipReason),
}

impl Outcome {
    /// Whether the grant holds a slot, so the owner must call `done` when the step is over.
    pub fn holds_slot(self) -> bool {
        !matches!(self, Outcome::Skipped(_))
    }
}

/// The scheduler's answer to one task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    pub task: TaskId,
    /// The slot held: the one submitted for, except that `RulesOnly` holds a cheap slot
    /// (`Skipped` holds none and names the one submitted for).
    pub slot: Slot,
    /// The class the task was submitted in (it may have been promoted while it waited).
    pub class: Class,
    /// Time the task waited, microseconds.
    pub waited_us: u64,
    pub outcome: Outcome,
    /// Granted after its deadline.
    pub deadline_missed: bool,
    /// Share (0..=1) of the persona's tightest model budget (its own or the fleet's, calls or
    /// tokens) left over the last hour, as of this grant. Personas slow their cadence on it.
    pub budget_left: f64,
}

/// A persona's model budget over any sliding hour (from its `PersonaConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonaBudget {
    pub inferences_per_hour: u64,
    pub tokens_per_hour: u64,
}

impl From<&PersonaConfig> for PersonaBudget {
    fn from(p: &PersonaConfig) -> Self {
        PersonaBudget { inferences_per_hour: p.inferences_per_hour, tokens_per_hour: p.tokens_per_hour }
    }
}

/// Messages of the scheduler actor.
#[derive(Debug, RactorMessage)]
pub enum SchedulerMsg {
    /// New submissions or `done`s are in the queues (coalesced: at most one in flight).
    Wake,
    /// A granted task finished; its slot is free and the tokens it did not use are refunded.
    /// ([`SchedulerHandle::done`] sends it through the `done` queue instead; both are handled.)
    Done {
        task: TaskId,
        tokens_used: u32,
    },
    /// How often a persona's non-urgent work may be granted (its cadence, from mood and budget).
    /// `Duration::ZERO` removes the limit.
    Cadence {
        persona: Arc<str>,
        interval: std::time::Duration,
    },
    /// Free every slot and drop every queued task of a persona (it restarted or stopped).
    Release(Arc<str>),
    Stats(RpcReplyPort<SchedulerStats>),
    /// Sets (or with `None` removes) a persona's budget; without one only the fleet's applies.
    Budget {
        persona: Arc<str>,
        budget: Option<PersonaBudget>,
    },
    /// Model use over the last `since` (at most an hour, the budget window); with `buckets`
    /// above 0 (at most [`MAX_COST_BUCKETS`]), each persona's tokens over time too.
    Cost {
        since: Duration,
        buckets: u32,
        reply: RpcReplyPort<CostReport>,
    },
    /// Internal: the scheduler's own timer (a cadence or a promotion is due at this instant).
    Tick(Instant),
}

/// The shared half of the scheduler: one queue per class, the finished tasks and the
/// wake-up flag.
#[derive(Debug)]
pub struct SubmitQueues {
    pub queues: [SegQueue<Task>; 4],
    /// `(task, tokens_used)` of finished tasks.
    pub done: SegQueue<(TaskId, u32)>,
    pub wake_pending: AtomicBool,
}

impl SubmitQueues {
    /// Sends a `Wake` unless one is already pending.
    fn wake(&self, actor: &ActorRef<SchedulerMsg>) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            let _ = actor.cast(SchedulerMsg::Wake);
        }
    }
}

/// What a persona holds to submit work.
#[derive(Debug, Clone)]
pub struct SchedulerHandle {
    shared: Arc<SubmitQueues>,
    actor: ActorRef<SchedulerMsg>,
}

impl SchedulerHandle {
    pub fn new(shared: Arc<SubmitQueues>, actor: ActorRef<SchedulerMsg>) -> Self {
        SchedulerHandle { shared, actor }
    }

    pub fn queues() -> Arc<SubmitQueues> {
        Arc::new(SubmitQueues {
            queues: Default::default(),
            done: SegQueue::new(),
            wake_pending: AtomicBool::new(false),
        })
    }

    /// Queues a task; at most one wake-up message is ever pending.
    pub fn submit(&self, task: Task) {
        self.shared.queues[task.class as usize].push(task);
        self.shared.wake(&self.actor);
    }

    /// The task is over; it used no model tokens.
    pub fn done(&self, task: TaskId) {
        self.done_with_tokens(task, 0);
    }

    /// The task is over and used `tokens_used` model tokens; the rest of its reservation is
    /// refunded. Only for `Run` and `RulesOnly` grants (a skipped task holds nothing).
    pub fn done_with_tokens(&self, task: TaskId, tokens_used: u32) {
        self.shared.done.push((task, tokens_used));
        self.shared.wake(&self.actor);
    }

    /// From now on the persona's non-urgent tasks are granted at most once per `interval`
    /// (`Duration::ZERO`: no limit).
    pub fn set_cadence(&self, persona: Arc<str>, interval: std::time::Duration) {
        let _ = self.actor.cast(SchedulerMsg::Cadence { persona, interval });
    }

    /// Sets or removes a persona's budget.
    pub fn set_budget(&self, persona: Arc<str>, budget: Option<PersonaBudget>) {
        let _ = self.actor.cast(SchedulerMsg::Budget { persona, budget });
    }

    pub fn release(&self, persona: Arc<str>) {
        let _ = self.actor.cast(SchedulerMsg::Release(persona));
    }

    pub fn actor(&self) -> &ActorRef<SchedulerMsg> {
        &self.actor
    }

    /// A process-unique task id.
    pub fn next_id() -> TaskId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
}

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
    /// By the task's label (`gate`, `draft_reply`, `evaluate`, ...).
    pub by_purpose: Vec<CostRow>,
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
        let (mut personas, mut rooms, mut purposes) = (Vec::new(), Vec::new(), Vec::new());
        for p in parts {
            m.since_secs = m.since_secs.max(p.since_secs);
            m.inferences += p.inferences;
            m.tokens += p.tokens;
            m.tokens_reserved += p.tokens_reserved;
            personas.extend(p.by_persona);
            rooms.extend(p.by_room);
            purposes.extend(p.by_purpose);
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
        }
        m.by_persona = rows(personas.into_iter());
        m.by_room = rows(rooms.into_iter());
        m.by_purpose = rows(purposes.into_iter());
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
