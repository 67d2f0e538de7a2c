//! What a persona's messages carry of the scheduler: priority classes, slots and grants. The
//! scheduler's interface is [`crate::sched`].

use serde::{Deserialize, Serialize};

/// The scheduler's clock, for `Task::submitted` and deadlines.
///
/// It reads tokio's clock, which is `Instant::now()` except in tests that pause time: there
/// the scheduler's timers, its waits and the tasks' timestamps all follow the paused clock.
#[cfg(feature = "actors")]
pub fn now() -> std::time::Instant {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
