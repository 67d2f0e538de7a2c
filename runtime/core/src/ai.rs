//! Introspection queries (`mindfleet ai ...`, `GET /ai/...`): answered by the admin from a
//! fleet dump and the journals in storage. Every answer is JSON; the CLI can also print it
//! as a table.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::Verdict;

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
        /// Only decisions on events of this room.
        room: Option<String>,
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
    /// The LoRA adapters a persona trained from its study data: provenance, held-out scores,
    /// kept or discarded and why. Answered from the data dir.
    Adapters {
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
    /// What was said in a room, human and persona messages, oldest first by when they were
    /// said: what its personas took in and posted. Answered from storage, by every node.
    History {
        room: String,
        /// Only what was said at or after this time (µs since the epoch).
        since_us: Option<i64>,
    },
    /// Why an event was decided as it was: every persona's decision on it the journal keeps,
    /// with its reason, and the replies posted to it. Answered from storage, by every node.
    Why {
        event_id: String,
    },
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
            | AiQuery::Memory { persona }
            | AiQuery::Adapters { persona } => Some(persona),
            AiQuery::Recall(q) => Some(&q.persona),
            AiQuery::Health
            | AiQuery::ActivityMap
            | AiQuery::SelectForTask { .. }
            | AiQuery::Cost { .. }
            | AiQuery::Why { .. }
            | AiQuery::History { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
