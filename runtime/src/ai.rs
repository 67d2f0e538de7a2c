//! Introspection queries (`mindfleet ai ...`, `GET /ai/...`): answered by the admin from a
//! fleet dump and the journals in storage. Every answer is JSON; the CLI can also print it
//! as a table.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::dump::FleetDump;
use crate::model::{PlanRecord, Verdict};
use crate::storage::{Storage, StorageError};
use crate::team::{activity_map, availability, health, suitability};
use crate::time::now_us;

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

fn plans_of(storage: &Storage, names: &[String], limit: usize) -> Result<Vec<(String, PlanRecord)>, StorageError> {
    let mut out = Vec::new();
    for n in names {
        out.extend(storage.recent_plans(n, limit)?.into_iter().map(|p| (n.clone(), p)));
    }
    Ok(out)
}

/// Answers `q` from `dump` (of the personas the query needs) and storage (blocking reads).
pub fn answer(q: &AiQuery, dump: &FleetDump, storage: &Storage) -> Result<Value, StorageError> {
    let names: Vec<String> = dump.personas.iter().map(|p| p.name.clone()).collect();
    Ok(match q {
        AiQuery::State { .. } => json!({
            "personas": dump.personas.iter().map(|p| json!({
                "name": p.name,
                "status": p.status,
                "self_state": p.self_state,
                "inbox": p.inbox.len,
                "in_flight": p.in_flight,
            })).collect::<Vec<_>>()
        }),
        AiQuery::Thoughts { domain, since_us, .. } => {
            let p = &dump.personas[0];
            let recent = |at_us: i64| since_us.is_none_or(|t| at_us >= t);
            let entries: Vec<_> = p
                .working_memory
                .recent
                .iter()
                .filter(|e| domain.as_ref().is_none_or(|d| *d == e.domain) && recent(e.created_us))
                .collect();
            let thoughts =
                p.self_state.as_ref().map(|s| s.recent_thoughts.iter().filter(|t| recent(t.at_us)).collect::<Vec<_>>());
            json!({ "persona": p.name, "since_us": since_us, "thoughts": entries, "recent_thoughts": thoughts })
        }
        AiQuery::Decisions { verdict, since_us, .. } => {
            let p = &dump.personas[0];
            let d: Vec<_> = p
                .decisions
                .iter()
                .filter(|d| verdict.is_none_or(|v| v == d.verdict) && since_us.is_none_or(|t| d.at_us >= t))
                .collect();
            json!({ "persona": p.name, "since_us": since_us, "decisions": d })
        }
        AiQuery::Plan { .. } => {
            let p = &dump.personas[0];
            json!({ "persona": p.name, "running": p.in_flight.is_some() && p.plan.as_ref().is_some_and(|x| x.finished_us.is_none()), "plan": p.plan })
        }
        AiQuery::PlanHistory { persona, limit } => {
            json!({ "persona": persona, "plans": storage.recent_plans(persona, *limit)? })
        }
        AiQuery::Learnings { .. } => {
            let mut all = Vec::new();
            for n in &names {
                for l in storage.learnings(n)? {
                    all.push(json!({ "persona": n, "pattern": l.pattern, "domain": l.domain, "successes": l.successes, "failures": l.failures }));
                }
            }
            json!({ "learnings": all })
        }
        AiQuery::Recoveries { limit, .. } => {
            let r: Vec<_> = plans_of(storage, &names, *limit)?
                .into_iter()
                .filter(|(_, p)| !p.adjustments.is_empty())
                .map(|(n, p)| {
                    json!({
                        "persona": n,
                        "event_id": p.event_id,
                        "adjustments": p.adjustments,
                        "recovered": p.evaluation.as_ref().is_some_and(|e| e.success),
                        "pattern": p.evaluation.as_ref().map(|e| e.pattern.clone()),
                    })
                })
                .collect();
            json!({ "recoveries": r })
        }
        AiQuery::Memory { persona } => serde_json::to_value(storage.long_term(persona, 20)?).unwrap_or(Value::Null),
        AiQuery::Health => serde_json::to_value(health(dump.personas.iter().filter_map(|p| p.self_state.as_ref())))
            .unwrap_or(Value::Null),
        AiQuery::Availability { .. } => {
            let all: Vec<_> = dump.personas.iter().map(availability).collect();
            let free: Vec<&str> = all.iter().filter(|a| a.available).map(|a| a.persona.as_str()).collect();
            json!({ "available": free, "personas": all })
        }
        AiQuery::ActivityMap => {
            serde_json::to_value(activity_map(&dump.personas, &dump.admin.rooms, now_us())).unwrap_or(Value::Null)
        }
        AiQuery::SelectForTask { domain, priority, text } => {
            let mut ranked: Vec<(f64, &str)> = dump
                .personas
                .iter()
                .filter_map(|p| {
                    Some((suitability(p.self_state.as_ref()?, &p.domains, domain, *priority, text), p.name.as_str()))
                })
                .collect();
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
            json!({
                "domain": domain,
                "priority": priority,
                "ranking": ranked.iter().map(|(s, n)| json!({"persona": n, "suitability": s})).collect::<Vec<_>>(),
                "best": ranked.first().map(|(_, n)| *n),
            })
        }
        // The admin asks the scheduler for it (`SchedulerMsg::Cost`): nothing to read here.
        AiQuery::Cost { .. } | AiQuery::Recall(_) => Value::Null,
    })
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
