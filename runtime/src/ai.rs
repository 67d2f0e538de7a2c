//! Introspection queries (`mindfleet ai ...`, `GET /ai/...`): answered by the admin from a
//! fleet dump and the journals in storage. Every answer is JSON; the CLI can also print it
//! as a table.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::dump::FleetDump;
use crate::model::{PlanRecord, Verdict};
use crate::storage::{Storage, StorageError};
use crate::team::{health, suitability};

/// One introspection question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum AiQuery {
    /// Self-states (all personas, or one).
    State {
        persona: Option<String>,
    },
    /// Working-memory entries of a persona, newest first.
    Thoughts {
        persona: String,
        domain: Option<String>,
    },
    /// The decision journal of a persona, newest first, with the reasons.
    Decisions {
        persona: String,
        verdict: Option<Verdict>,
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
    /// Personas ranked by suitability for a task.
    SelectForTask {
        domain: String,
        priority: f64,
        text: String,
    },
}

impl AiQuery {
    /// The one persona the query needs a dump of (`None`: all).
    pub fn persona(&self) -> Option<&str> {
        match self {
            AiQuery::State { persona } | AiQuery::Learnings { persona } | AiQuery::Recoveries { persona, .. } => {
                persona.as_deref()
            }
            AiQuery::Thoughts { persona, .. }
            | AiQuery::Decisions { persona, .. }
            | AiQuery::Plan { persona }
            | AiQuery::PlanHistory { persona, .. }
            | AiQuery::Memory { persona } => Some(persona),
            AiQuery::Health | AiQuery::SelectForTask { .. } => None,
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
        AiQuery::Thoughts { domain, .. } => {
            let p = &dump.personas[0];
            let entries: Vec<_> =
                p.working_memory.recent.iter().filter(|e| domain.as_ref().is_none_or(|d| *d == e.domain)).collect();
            json!({ "persona": p.name, "thoughts": entries, "recent_thoughts": p.self_state.as_ref().map(|s| &s.recent_thoughts) })
        }
        AiQuery::Decisions { verdict, .. } => {
            let p = &dump.personas[0];
            let d: Vec<_> = p.decisions.iter().filter(|d| verdict.is_none_or(|v| v == d.verdict)).collect();
            json!({ "persona": p.name, "decisions": d })
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
    })
}
