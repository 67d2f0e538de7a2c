//! Self-state as a coordination signal, in the words every crate uses: the thresholds of focus,
//! load and capacity, how suited a persona is for a task ([`suitability`]), and the shapes of
//! the admin's answers about the fleet (`health`, `availability`, `activity-map`) and of a
//! persona's [`Condition`].
//!
//! [`suitability`] is here, not beside the answers in `mindfleet-server`, because two crates
//! that know nothing of each other apply it: the persona to rank its claims and the admin to
//! answer `select-for-task`; they must agree. The answers are computed from a dump by
//! `mindfleet_server::team`.

use serde::{Deserialize, Serialize};

use crate::dump::PersonaStatus;
use crate::record::{Mood, SelfView};

/// Focus intensity above which a persona that is not idle is deeply focused.
pub const DEEP_FOCUS: f64 = 0.7;
/// Cognitive load above which a persona is overloaded.
pub const OVERLOAD: f64 = 0.8;
/// Available capacity below which a persona has little room for more work.
pub const LOW_CAPACITY: f64 = 0.3;

/// Busy with something (not idle) at an intensity above [`DEEP_FOCUS`].
pub fn deeply_focused(s: &SelfView) -> bool {
    s.focus.activity != "idle" && s.focus.intensity > DEEP_FOCUS
}

/// Cognitive load above [`OVERLOAD`].
pub fn overloaded(s: &SelfView) -> bool {
    s.cognitive_load > OVERLOAD
}

/// Available capacity below [`LOW_CAPACITY`].
pub fn low_capacity(s: &SelfView) -> bool {
    s.available_capacity < LOW_CAPACITY
}

/// How suited a persona is for a task in `domain` with `priority`:
/// ×0.2 when deeply focused (> 0.7) on something else, ×0.3 when loaded (> 0.8), ×0.4 when
/// its capacity is low (< 0.3), ×2 for its own domain, ×(1 + priority) when the task matches
/// one of its preoccupations.
pub fn suitability(s: &SelfView, domains: &[String], domain: &str, priority: f64, text: &str) -> f64 {
    let mut x = 1.0;
    if deeply_focused(s) {
        x *= 0.2;
    }
    if overloaded(s) {
        x *= 0.3;
    }
    if low_capacity(s) {
        x *= 0.4;
    }
    if domains.iter().any(|d| d == domain) {
        x *= 2.0;
    }
    let words: Vec<String> = crate::words::split(text).filter(|w| w.len() > 3).map(str::to_lowercase).collect();
    let matches = s.preoccupations.iter().any(|p| {
        p.domain == domain && {
            let concern = p.concern.to_lowercase();
            words.iter().any(|w| concern.contains(w.as_str()))
        }
    });
    if matches {
        x *= 1.0 + priority;
    }
    x
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Recommendation {
    /// Too many personas are overloaded: shed or defer work.
    ReduceLoad,
    /// Many personas are idle: there is room for more work.
    AssignWork,
    Healthy,
    /// Every persona is dormant or down: nobody can take work until one is woken or restarted.
    NobodyAwake,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Every persona of the fleet, down ones included.
    pub personas: usize,
    /// Running and not dormant: the personas the recommendation is about.
    pub awake: usize,
    /// By [`Condition`]: overloaded, idle, busy (working or thinking), dormant, down.
    pub overloaded: usize,
    pub idle: usize,
    pub busy: usize,
    pub deeply_focused: usize,
    pub dormant: usize,
    pub down: usize,
    /// Over the personas whose self-state is known.
    pub average_capacity: f64,
    pub recommendation: Recommendation,
}

/// Why a persona is not available for new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Unavailable {
    /// Its actor is not up yet.
    Starting,
    /// Its actor failed and is being restarted.
    Restarting,
    /// It failed more often than the restart policy allows.
    Failed,
    Stopped,
    /// On another node of the cluster whose link is down.
    Unreachable,
    /// Running, but it did not answer in time: what it is doing is not known.
    Unresponsive,
    /// Made dormant (fleet file or `ai state update --dormant`).
    Dormant,
    /// Not idle, and focused above [`DEEP_FOCUS`].
    DeeplyFocused,
    /// Cognitive load above [`OVERLOAD`].
    Overloaded,
    /// Available capacity below [`LOW_CAPACITY`].
    LowCapacity,
    /// An event is in flight, or its focus is still on the work it engaged with (it reads
    /// [`Condition::Working`]).
    Busy,
}

impl Unavailable {
    /// Whether it rules a persona out of new work altogether (it is down or asleep), rather
    /// than making it less suited (busy, focused, loaded).
    pub fn rules_out(self) -> bool {
        matches!(
            self,
            Unavailable::Starting
                | Unavailable::Restarting
                | Unavailable::Failed
                | Unavailable::Stopped
                | Unavailable::Unreachable
                | Unavailable::Unresponsive
                | Unavailable::Dormant
        )
    }
}

/// Whether one persona can take new work right now, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    pub persona: String,
    pub available: bool,
    /// What it is doing, as the badge and the activity map say (`mindfleet_server::team::condition`).
    pub condition: Condition,
    /// Empty when available; else in the order of the variants of [`Unavailable`].
    pub reasons: Vec<Unavailable>,
    pub status: PersonaStatus,
    /// The self-state's figures; `None` while the persona is down.
    pub capacity: Option<f64>,
    pub load: Option<f64>,
    pub mood: Option<Mood>,
    pub activity: Option<String>,
    pub objective: Option<String>,
    /// Events waiting in its inbox.
    pub inbox: usize,
    pub in_flight: Option<String>,
}

/// One persona in one room of the activity map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Presence {
    pub persona: String,
    pub status: PersonaStatus,
    /// What it is doing, as the badge says (`mindfleet_server::team::condition`).
    pub condition: Condition,
    /// The focus; `None` while the persona is down.
    pub activity: Option<String>,
    pub domain: Option<String>,
    pub objective: Option<String>,
    pub intensity: Option<f64>,
    pub dormant: bool,
    /// The event it is working on, if any.
    pub in_flight: Option<String>,
    /// When it last posted in this room, if it did.
    pub last_spoke_us: Option<i64>,
    pub last_spoke_secs_ago: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomActivity {
    pub room: String,
    /// By name.
    pub personas: Vec<Presence>,
}

/// How many personas are focused (not idle) on one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainActivity {
    pub domain: String,
    pub focused: usize,
    pub personas: Vec<String>,
}

/// Who is doing what where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityMap {
    pub at_us: i64,
    /// By room name.
    pub rooms: Vec<RoomActivity>,
    /// By domain name, the personas occupied ([`Condition::occupied`]: working, thinking,
    /// focused, overloaded); the others are counted in `idle`, `dormant` or `down` instead.
    pub domains: Vec<DomainActivity>,
    pub idle: usize,
    pub dormant: usize,
    pub down: usize,
}

/// What a persona is doing, in one word: the one rule behind the dashboard's badge, the
/// fleet's health, availability (`select-for-task`) and the activity map, so that they agree.
/// Serialized as the badge reads (`working`, `idle`, `dormant`, `failed`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Condition {
    /// Its actor is not up yet (or its self-state not read yet).
    Starting,
    /// Its actor failed and is being restarted.
    Restarting,
    /// It failed more often than the restart policy allows: down for good.
    Failed,
    Stopped,
    /// On another node of the cluster whose link is down.
    Unreachable,
    /// Running, but it did not answer the dump in time (busy in a long step, or stuck).
    Unresponsive,
    /// Asleep (fleet file or `ai state update --dormant`): takes no work, whatever else holds.
    Dormant,
    /// Cognitive load above [`OVERLOAD`], or overwhelmed.
    Overloaded,
    /// Nothing in hand, and a plan of it parked until a person approves or denies a call of
    /// it: free for other work.
    Waiting,
    /// At work on an event: its plan runs, or its focus is still on the work it engaged with
    /// (the focus reads `working`).
    Working,
    /// An event in hand, not engaged with (yet): the gate or the plan's choice is under way.
    Thinking,
    /// A focus set by a person, and nothing in hand.
    Focused,
    /// Nothing in hand and no focus: free for work.
    Idle,
}

impl Condition {
    /// The word the badge and the JSON answers use.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Starting => "starting",
            Condition::Restarting => "restarting",
            Condition::Failed => "failed",
            Condition::Stopped => "stopped",
            Condition::Unreachable => "unreachable",
            Condition::Unresponsive => "unresponsive",
            Condition::Dormant => "dormant",
            Condition::Overloaded => "overloaded",
            Condition::Waiting => "waiting",
            Condition::Working => "working",
            Condition::Thinking => "thinking",
            Condition::Focused => "focused",
            Condition::Idle => "idle",
        }
    }

    /// Not running, or not answering: neither idle nor busy, and never given work.
    pub fn down(self) -> bool {
        matches!(
            self,
            Condition::Starting
                | Condition::Restarting
                | Condition::Failed
                | Condition::Stopped
                | Condition::Unreachable
                | Condition::Unresponsive
        )
    }

    /// Running and awake, with something on its mind (an event, a focus, a backlog past
    /// its load).
    pub fn occupied(self) -> bool {
        matches!(
            self,
            Condition::Overloaded | Condition::Waiting | Condition::Working | Condition::Thinking | Condition::Focused
        )
    }

    /// Has an event in hand or its focus on one.
    pub fn busy(self) -> bool {
        matches!(self, Condition::Working | Condition::Thinking)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Focus, Preoccupation};

    #[test]
    fn suitability_follows_the_factors() {
        let domains = vec!["code".to_string()];
        let fresh = SelfView::default();
        assert_eq!(suitability(&fresh, &domains, "code", 0.5, "x"), 2.0);
        assert_eq!(suitability(&fresh, &domains, "chat", 0.5, "x"), 1.0);
        let busy = SelfView {
            focus: Focus { activity: "working".into(), intensity: 0.9, ..Focus::default() },
            cognitive_load: 0.9,
            available_capacity: 0.1,
            ..SelfView::default()
        };
        assert!((suitability(&busy, &domains, "chat", 0.5, "x") - 0.2 * 0.3 * 0.4).abs() < 1e-12);
        let preoccupied = SelfView {
            preoccupations: vec![Preoccupation {
                concern: "alice in #dev: the flaky deploy pipeline".into(),
                priority: 0.4,
                domain: "code".into(),
                event_id: "e".into(),
                created_us: 0,
            }],
            ..SelfView::default()
        };
        assert!((suitability(&preoccupied, &domains, "code", 0.5, "is the deploy fixed?") - 3.0).abs() < 1e-12);
    }
}
