//! Introspection queries (`mindfleet ai ...`, `GET /ai/...`): answered by the admin from a
//! fleet dump and the journals in storage. Every answer is JSON; the CLI can also print it
//! as a table.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dump::{PersonaDump, PersonaStatus};
use crate::model::{Mood, Verdict};
use crate::team;

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
    /// Cognitive load above [`team::OVERLOAD`], or overwhelmed.
    Overloaded,
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
        matches!(self, Condition::Overloaded | Condition::Working | Condition::Thinking | Condition::Focused)
    }

    /// Has an event in hand or its focus on one.
    pub fn busy(self) -> bool {
        matches!(self, Condition::Working | Condition::Thinking)
    }
}

/// The condition of `p`, first match wins: its supervisor's word when it is not running
/// (starting while its self-state is not read yet); dormant; overloaded; working (a plan
/// running, or the focus reading `working`); thinking (an event in flight, no plan running);
/// focused (a focus other than `idle`, nothing in flight); idle.
pub fn condition(p: &PersonaDump) -> Condition {
    match p.status {
        PersonaStatus::Running => {}
        PersonaStatus::Starting => return Condition::Starting,
        PersonaStatus::Restarting => return Condition::Restarting,
        PersonaStatus::Failed => return Condition::Failed,
        PersonaStatus::Stopped => return Condition::Stopped,
        PersonaStatus::Unreachable => return Condition::Unreachable,
        PersonaStatus::Unresponsive => return Condition::Unresponsive,
    }
    let Some(s) = &p.self_state else { return Condition::Starting };
    let plan_running = p.in_flight.is_some() && p.plan.as_ref().is_some_and(|r| r.finished_us.is_none());
    if s.dormant {
        Condition::Dormant
    } else if team::overloaded(s) || s.mood == Mood::Overwhelmed {
        Condition::Overloaded
    } else if plan_running || s.focus.activity == "working" {
        Condition::Working
    } else if p.in_flight.is_some() {
        Condition::Thinking
    } else if s.focus.activity != "idle" {
        Condition::Focused
    } else {
        Condition::Idle
    }
}

/// A `since` window that is not a number followed by a unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("since: {value:?}: expected a number followed by s, m, h or d")]
#[non_exhaustive]
pub struct BadWindow {
    pub value: String,
}

/// Parses a time window: a whole number followed by `s`, `m`, `h` or `d` (`90s`, `15m`, `1h`,
/// `2d`).
pub fn parse_window(text: &str) -> Result<Duration, BadWindow> {
    let bad = || BadWindow { value: text.to_string() };
    let split = text.len().checked_sub(1).filter(|&i| text.is_char_boundary(i)).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let unit_secs: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    n.checked_mul(unit_secs).map(Duration::from_secs).ok_or_else(bad)
}

/// The start of a window that ends at `now_us`.
pub fn window_start(window: Duration, now_us: i64) -> i64 {
    now_us.saturating_sub(i64::try_from(window.as_micros()).unwrap_or(i64::MAX))
}

/// One introspection question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum AiQuery {
    /// Self-states (all personas, or one).
    State {
        persona: Option<String>,
    },
    /// Working-memory entries of a persona, newest first, and its recent thoughts.
    Thoughts {
        persona: String,
        domain: Option<String>,
        /// Only what was created at or after this time (µs since the epoch).
        since_us: Option<i64>,
    },
    /// The decision journal of a persona, newest first, with the reasons.
    Decisions {
        persona: String,
        verdict: Option<Verdict>,
        /// Only decisions made at or after this time (µs since the epoch).
        since_us: Option<i64>,
    },
    /// The plan being run, else the last one.
    Plan {
        persona: String,
    },
    /// Finished plans, newest first.
    PlanHistory {
        persona: String,
        limit: usize,
    },
    /// Learnings with their counts (all personas, or one).
    Learnings {
        persona: Option<String>,
    },
    /// Plans that needed adjustments, with how they recovered (or not).
    Recoveries {
        persona: Option<String>,
        limit: usize,
    },
    /// Long-term memory: experiences, procedures, knowledge, user profiles.
    Memory {
        persona: String,
    },
    Health,
    /// Whether each persona (all, or one) can take new work now, and why not.
    Availability {
        persona: Option<String>,
    },
    /// Who is doing what where: personas by room with their focus, and focus by domain.
    ActivityMap,
    /// Personas ranked by suitability for a task.
    SelectForTask {
        domain: String,
        priority: f64,
        text: String,
    },
    /// What a persona was told about a topic: its conversation memory, recalled by meaning.
    /// Answered by the conversation index.
    Recall(crate::conversation::RecallQuery),
    /// Model calls and tokens over the last `since_secs` (at most the budget's hour), by
    /// persona, room and purpose, with latency percentiles, and with `buckets` > 0 each
    /// persona's tokens over time. Answered by the scheduler.
    Cost {
        since_secs: u64,
        #[serde(default)]
        buckets: u32,
    },
}

impl AiQuery {
    /// The one persona the query needs a dump of (`None`: all).
    pub fn persona(&self) -> Option<&str> {
        match self {
            AiQuery::State { persona }
            | AiQuery::Learnings { persona }
            | AiQuery::Recoveries { persona, .. }
            | AiQuery::Availability { persona } => persona.as_deref(),
            AiQuery::Thoughts { persona, .. }
            | AiQuery::Decisions { persona, .. }
            | AiQuery::Plan { persona }
            | AiQuery::PlanHistory { persona, .. }
            | AiQuery::Memory { persona } => Some(persona),
            AiQuery::Recall(q) => Some(&q.persona),
            AiQuery::Health | AiQuery::ActivityMap | AiQuery::SelectForTask { .. } | AiQuery::Cost { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Focus, SelfStateData};

    fn running(s: SelfStateData) -> PersonaDump {
        PersonaDump { self_state: Some(s), ..PersonaDump::placeholder("ada", PersonaStatus::Running, 0, None) }
    }

    fn focus(activity: &str) -> SelfStateData {
        SelfStateData { focus: Focus { activity: activity.into(), ..Focus::default() }, ..SelfStateData::default() }
    }

    #[test]
    fn a_persona_whose_focus_reads_working_is_never_idle() {
        // Its event handled, the next one still in its inbox: nothing in flight, the focus on
        // the work. The badge read `idle` beside a focus that read `working`.
        assert_eq!(condition(&running(focus("working"))), Condition::Working);
        let mut p = running(focus("idle"));
        p.in_flight = Some("e1".into());
        assert_eq!(condition(&p), Condition::Thinking, "an event in hand, no plan yet");
        assert_eq!(condition(&running(focus("focused"))), Condition::Focused);
        assert_eq!(condition(&running(focus("idle"))), Condition::Idle);
    }

    #[test]
    fn down_and_dormant_come_before_what_the_self_state_says() {
        let mut p = running(SelfStateData { dormant: true, cognitive_load: 0.95, ..focus("working") });
        p.in_flight = Some("e1".into());
        assert_eq!(condition(&p), Condition::Dormant);
        p.status = PersonaStatus::Failed;
        assert_eq!(condition(&p), Condition::Failed);
        assert!(Condition::Failed.down() && !Condition::Dormant.down());
        let up = PersonaDump::placeholder("ada", PersonaStatus::Running, 0, None);
        assert_eq!(condition(&up), Condition::Starting, "its self-state not read yet");
        for c in [Condition::Working, Condition::Idle, Condition::Unreachable] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }

    #[test]
    fn windows_are_a_number_and_a_unit() {
        assert_eq!(parse_window("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_window("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_window("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_window("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_window("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_bad_window_is_named_in_the_error() {
        for bad in ["1x", "", "h", "1", "-1h", "+1h", "1.5h", " 1h", "1H", "1hh", "é", "99999999999999999999d"] {
            let e = parse_window(bad).unwrap_err();
            assert_eq!(e.to_string(), format!("since: {bad:?}: expected a number followed by s, m, h or d"));
        }
    }

    #[test]
    fn a_window_starts_before_now_and_saturates() {
        assert_eq!(window_start(Duration::from_secs(2), 5_000_000), 3_000_000);
        assert_eq!(window_start(Duration::from_secs(u64::MAX), 5), 5 - i64::MAX);
    }
}
