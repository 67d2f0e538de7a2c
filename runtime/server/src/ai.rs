//! Introspection answers (`mindfleet ai ...`, `GET /ai/...`): what the admin answers to an
//! [`AiQuery`] from a fleet dump and the journals in storage.

use serde_json::{Value, json};

use mindfleet_core::adapter::Verdict;
use mindfleet_core::ai::AiQuery;
use mindfleet_core::dump::FleetDump;
use mindfleet_core::record::PlanRecord;
use mindfleet_core::team::{Condition, Unavailable, suitability};
use mindfleet_core::time::{now_us, rfc3339};
use mindfleet_store::adapters::AdapterDir;
use mindfleet_store::{Storage, StorageError};

use crate::team::{activity_map, availability, condition, health};

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
                "condition": condition(p),
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
        AiQuery::Decisions { persona, verdict, since_us, room } => {
            // The whole journal (`[storage] decisions_per_persona`), not the dump's last ones.
            let d: Vec<_> = storage
                .recent_decisions(persona, usize::MAX)?
                .into_iter()
                .filter(|d| {
                    verdict.is_none_or(|v| v == d.verdict)
                        && since_us.is_none_or(|t| d.at_us >= t)
                        && room.as_ref().is_none_or(|r| *r == d.room)
                })
                .collect();
            json!({ "persona": persona, "since_us": since_us, "room": room, "decisions": d })
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
        AiQuery::Adapters { persona } => adapters(storage, persona),
        AiQuery::Health => serde_json::to_value(health(&dump.personas)).unwrap_or(Value::Null),
        AiQuery::Availability { .. } => {
            let all: Vec<_> = dump.personas.iter().map(availability).collect();
            let free: Vec<&str> = all.iter().filter(|a| a.available).map(|a| a.persona.as_str()).collect();
            json!({ "available": free, "personas": all })
        }
        AiQuery::ActivityMap => {
            serde_json::to_value(activity_map(&dump.personas, &dump.admin.rooms, now_us())).unwrap_or(Value::Null)
        }
        AiQuery::SelectForTask { domain, priority, text } => select_for_task(dump, domain, *priority, text),
        AiQuery::Why { event_id } => why(storage, event_id)?,
        AiQuery::History { room, since_us } => history(storage, room, *since_us)?,
        // The admin asks the scheduler for it (`SchedulerMsg::Cost`): nothing to read here.
        AiQuery::Cost { .. } | AiQuery::Recall(_) => Value::Null,
    })
}

/// `ai adapters`: the persona's training runs, oldest first, each a line of what matters (the
/// verdict and its reason, the held-out scores before and after) and its whole record; a
/// record that cannot be read is named in `error`.
pub fn adapters(storage: &Storage, persona: &str) -> Value {
    match AdapterDir::new(storage.data_dir()).list(persona) {
        Err(e) => json!({ "persona": persona, "adapters": [], "error": e }),
        Ok(records) => {
            let rows: Vec<Value> = records
                .iter()
                .map(|r| {
                    let reason = match &r.verdict {
                        Verdict::Kept => None,
                        Verdict::Discarded(why) => Some(why.clone()),
                    };
                    json!({
                        "id": r.id,
                        "topic": r.topic,
                        "kept": r.kept(),
                        "reason": reason,
                        "train": r.train_examples,
                        "held_out": r.held_out,
                        "steps": r.steps,
                        "ppl_before": r.before.perplexity,
                        "ppl_after": r.after.perplexity,
                        "grade_before": r.before.grade,
                        "grade_after": r.after.grade,
                        "trained": rfc3339(r.finished_us),
                        "record": r,
                    })
                })
                .collect();
            json!({ "persona": persona, "adapters": rows })
        }
    }
}

/// `ai history`: the room's messages (what its personas took in, and the replies they posted,
/// each once), oldest first by when they were said.
pub fn history(storage: &Storage, room: &str, since_us: Option<i64>) -> Result<Value, StorageError> {
    let mindfleet_store::RoomHistory { said, replies } = storage.room_history(room)?;
    let mut messages: Vec<(i64, Value)> = said
        .iter()
        .map(|s| (s.at_us, json!({ "event_id": s.event_id, "from": s.from, "text": s.text, "at": rfc3339(s.at_us) })))
        .collect();
    let heard: std::collections::HashSet<&str> = said.iter().map(|s| s.event_id.as_str()).collect();
    for o in &replies {
        if !heard.contains(o.event_id.as_str()) {
            let m = json!({ "event_id": o.event_id, "from": o.persona, "text": o.text, "at": rfc3339(o.at_us), "in_reply_to": o.in_reply_to });
            messages.push((o.at_us, m));
        }
    }
    messages.retain(|(at, _)| since_us.is_none_or(|t| *at >= t));
    messages.sort_by_key(|(at, _)| *at);
    let messages: Vec<Value> = messages.into_iter().map(|(_, m)| m).collect();
    Ok(json!({ "room": room, "messages": messages }))
}

/// `ai why`: every persona's decision on `event_id` that the journal keeps (oldest first: who
/// decided what, why, by which rule, on which numbers, when), the replies posted to it, and the
/// tool calls its plans made (tool, arguments, approval, error class, duration, bytes) or wait
/// to make.
pub fn why(storage: &Storage, event_id: &str) -> Result<Value, StorageError> {
    let mindfleet_store::Why { decisions, replies, calls } = storage.why(event_id)?;
    let decisions: Vec<Value> = decisions
        .into_iter()
        .map(|(persona, d)| {
            let numbers: serde_json::Map<String, Value> = d.numbers.into_iter().map(|(k, v)| (k, json!(v))).collect();
            json!({
                "persona": persona,
                "verdict": d.verdict,
                "reason": d.reason,
                "by": d.by,
                "priority": d.priority,
                "numbers": numbers,
                "at": rfc3339(d.at_us),
            })
        })
        .collect();
    let replies: Vec<Value> = replies
        .into_iter()
        .map(|o| {
            json!({
                "persona": o.persona,
                "room": o.room,
                "event_id": o.event_id,
                "text": o.text,
                "brain": o.brain,
                "at": rfc3339(o.at_us),
            })
        })
        .collect();
    let calls: Vec<Value> = calls
        .into_iter()
        .filter_map(|(persona, c)| {
            let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments.clone()));
            let o = c.outcome?;
            Some(json!({
                "persona": persona,
                "tool": c.tool,
                "arguments": arguments,
                "why": c.why,
                "id": o.id,
                "approval": o.approval,
                "error": o.error,
                "took_ms": o.took_ms,
                "bytes": o.bytes,
                "cut": o.cut,
                "replayed": o.replayed,
                "summary": o.summary,
            }))
        })
        .collect();
    Ok(json!({ "event_id": event_id, "decisions": decisions, "replies": replies, "tool_calls": calls }))
}

/// The personas that can take a task, most suited first; a persona that is down or dormant is
/// never ranked, only listed with why (the same [`condition`] the badge and health read).
fn select_for_task(dump: &FleetDump, domain: &str, priority: f64, text: &str) -> Value {
    let mut ranked: Vec<(f64, &str)> = Vec::new();
    let mut unavailable = Vec::new();
    for p in &dump.personas {
        let a = availability(p);
        match &p.self_state {
            Some(s) if !a.condition.down() && a.condition != Condition::Dormant => {
                ranked.push((suitability(&s.view(), &p.domains, domain, priority, text), p.name.as_str()));
            }
            _ => {
                let out: Vec<Unavailable> = a.reasons.into_iter().filter(|r| r.rules_out()).collect();
                unavailable.push(json!({"persona": p.name, "reasons": out}));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    json!({
        "domain": domain,
        "priority": priority,
        "ranking": ranked.iter().map(|(s, n)| json!({"persona": n, "suitability": s})).collect::<Vec<_>>(),
        "best": ranked.first().map(|(_, n)| *n),
        "unavailable": unavailable,
    })
}
