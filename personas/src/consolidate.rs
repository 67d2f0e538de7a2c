//! Background consolidation: working memory into long-term memory, like an RTOS idle task.
//!
//! A pass takes the working-memory entries written since the last pass, clusters them by
//! shared words within each domain, and promotes what is worth keeping: reflections on plans
//! become experiences (the message the persona answered as their task, so that a plan recalls
//! them by meaning; trajectory, outcome, learnings), step sequences that keep
//! working become procedures (with their success rate and times used), clusters of related
//! observations become knowledge, and what users said becomes their profiles (topics, stated
//! preferences, technical level with a confidence). Limits are enforced by storage, and every
//! drop is written in the pass's report.

use std::collections::{BTreeMap, BTreeSet};

use mindfleet_core::record::{
    Action, Consolidation, ConsolidationReport, EntryKind, Experience, Knowledge, PlanRecord, Procedure, StepState,
    UserProfile, WmEntry,
};

use mindfleet_core::words::{is_stop_word, split};

/// Topics kept per user profile (the "user facts" limit).
pub const TOPICS_PER_USER: usize = 200;
/// Entries of one cluster share at least this share of their words (Jaccard).
const CLUSTER_OVERLAP: f64 = 0.3;

const TECHNICAL: &[&str] = &[
    "api",
    "async",
    "auth",
    "build",
    "cache",
    "cluster",
    "commit",
    "compile",
    "config",
    "database",
    "deploy",
    "docker",
    "endpoint",
    "function",
    "index",
    "kernel",
    "latency",
    "memory",
    "module",
    "mutex",
    "query",
    "refactor",
    "regression",
    "rust",
    "schema",
    "server",
    "thread",
    "token",
    "trait",
];

fn words(text: &str) -> BTreeSet<String> {
    split(text).filter(|w| w.len() >= 4).map(str::to_lowercase).filter(|w| !is_stop_word(w)).collect()
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 { 0.0 } else { inter as f64 / union as f64 }
}

/// Greedy clusters of entries (indices) by word overlap with each cluster's first entry,
/// within one domain.
pub fn clusters(entries: &[&WmEntry]) -> Vec<Vec<usize>> {
    let sets: Vec<BTreeSet<String>> = entries.iter().map(|e| words(&content(e))).collect();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for i in 0..entries.len() {
        let home = out.iter_mut().find(|c| {
            let seed = c[0];
            entries[seed].domain == entries[i].domain && jaccard(&sets[seed], &sets[i]) >= CLUSTER_OVERLAP
        });
        match home {
            Some(c) => c.push(i),
            None => out.push(vec![i]),
        }
    }
    out
}

/// What an entry says: an observation's message without who said it where, nor whom it
/// mentions (every message of one user in one room shares those words, and they tell nothing of
/// its topic).
fn content(e: &WmEntry) -> String {
    let text = observed(e).map_or(e.text.as_str(), |(_, t)| t);
    without_mentions(text)
}

fn without_mentions(text: &str) -> String {
    text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" ")
}

/// `user in #room: text` (the persona's observation format) split into user and text.
fn observed(e: &WmEntry) -> Option<(&str, &str)> {
    let (user, rest) = e.text.split_once(" in #")?;
    let (_, text) = rest.split_once(": ")?;
    (!user.is_empty() && !user.contains(' ')).then_some((user, text))
}

fn trajectory(p: &PlanRecord) -> Vec<String> {
    p.plan
        .steps
        .iter()
        .map(|s| match &s.state {
            StepState::Done => s.action.as_str().to_string(),
            StepState::Failed { class, .. } => format!("{} failed ({})", s.action.as_str(), class.as_str()),
            StepState::Skipped => format!("{} skipped", s.action.as_str()),
            _ => format!("{} not run", s.action.as_str()),
        })
        .collect()
}

/// One consolidation pass over `entries` (the whole working memory) and the persona's recent
/// finished `plans`, merging into its existing `profiles`.
pub fn consolidate(
    entries: &[WmEntry],
    plans: &[PlanRecord],
    profiles: &[UserProfile],
    watermark: u64,
    now_us: i64,
) -> Consolidation {
    let fresh: Vec<&WmEntry> = entries.iter().filter(|e| e.id > watermark).collect();
    let mut report = ConsolidationReport { at_us: now_us, entries: fresh.len(), ..Default::default() };
    let experiences = experiences(entries, &fresh, plans);
    let procedures = procedures(plans, now_us);
    let observations: Vec<&WmEntry> =
        fresh.iter().copied().filter(|e| matches!(e.kind, EntryKind::Observation | EntryKind::Question)).collect();
    let groups = clusters(&observations);
    report.clusters = groups.len();
    let knowledge = knowledge(&observations, &groups, now_us);
    let out_profiles = profiles_of(&observations, profiles, now_us, &mut report);

    report.experiences = experiences.len();
    report.procedures = procedures.len();
    report.knowledge = knowledge.len();
    report.profiles = out_profiles.len();
    Consolidation {
        experiences,
        procedures,
        knowledge,
        profiles: out_profiles,
        watermark: fresh.iter().map(|e| e.id).max().unwrap_or(watermark),
        report,
    }
}

/// Reflections on plans -> experiences. The task is the message the plan answered (the
/// observation of the same event, in all of working memory), else the plan's goal.
fn experiences(entries: &[WmEntry], fresh: &[&WmEntry], plans: &[PlanRecord]) -> Vec<Experience> {
    let by_event: BTreeMap<&str, &PlanRecord> = plans.iter().map(|p| (p.event_id.as_str(), p)).collect();
    let asked: BTreeMap<&str, &str> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::Observation)
        .filter_map(|e| Some((e.event_id.as_deref()?, observed(e)?.1)))
        .collect();
    fresh
        .iter()
        .filter(|e| e.kind == EntryKind::Reflection && e.importance >= 0.7)
        .map(|e| {
            let plan = e.event_id.as_deref().and_then(|id| by_event.get(id));
            // The rules' pattern, then the model's lesson when it wrote one.
            let text = e.text.trim_start_matches("reflection: ");
            let (pattern, lesson) = text.split_once("; lesson: ").map_or((text, None), |(p, l)| (p, Some(l)));
            Experience {
                domain: e.domain.clone(),
                task: match (e.event_id.as_deref().and_then(|id| asked.get(id)), plan) {
                    // Mentions say who was asked, not what.
                    (Some(text), _) => without_mentions(text),
                    (None, Some(p)) => p.plan.goal.clone(),
                    (None, None) => pattern.to_string(),
                },
                trajectory: plan.map(|p| trajectory(p)).unwrap_or_default(),
                success: plan.and_then(|p| p.evaluation.as_ref()).is_some_and(|v| v.success),
                learnings: std::iter::once(pattern).chain(lesson).map(str::to_string).collect(),
                event_id: e.event_id.clone(),
                at_us: e.created_us,
            }
        })
        .collect()
}

/// Step sequences that ran at least twice -> procedures with their record.
fn procedures(plans: &[PlanRecord], now_us: i64) -> Vec<Procedure> {
    let mut runs: BTreeMap<(String, Vec<Action>), (u32, u32)> = BTreeMap::new();
    for p in plans {
        let steps: Vec<Action> = p.plan.steps.iter().filter(|s| s.state == StepState::Done).map(|s| s.action).collect();
        if steps.is_empty() {
            continue;
        }
        let ok = p.evaluation.as_ref().is_some_and(|e| e.success);
        let r = runs.entry((p.domain.clone(), steps)).or_default();
        r.0 += u32::from(ok);
        r.1 += 1;
    }
    runs.into_iter()
        .filter(|(_, (_, used))| *used >= 2)
        .map(|((domain, steps), (ok, used))| Procedure {
            name: format!("{domain}: {}", steps.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(" -> ")),
            domain,
            steps,
            success_rate: ok as f64 / used as f64,
            times_used: used,
            updated_us: now_us,
        })
        .collect()
}

/// Clusters of related observations -> knowledge.
fn knowledge(observations: &[&WmEntry], groups: &[Vec<usize>], now_us: i64) -> Vec<Knowledge> {
    groups
        .iter()
        .filter(|c| c.len() >= 2)
        .map(|c| {
            let members: Vec<&WmEntry> = c.iter().map(|&i| observations[i]).collect();
            let mut shared = words(&content(members[0]));
            for m in &members[1..] {
                let w = words(&content(m));
                shared.retain(|x| w.contains(x));
            }
            let topic: Vec<String> = shared.into_iter().take(3).collect();
            let summary: Vec<String> = members.iter().take(2).map(|m| m.text.chars().take(120).collect()).collect();
            Knowledge {
                domain: members[0].domain.clone(),
                topic: if topic.is_empty() { "related observations".into() } else { topic.join(" ") },
                summary: summary.join(" | "),
                sources: members.iter().filter_map(|m| m.event_id.clone()).collect(),
                at_us: now_us,
            }
        })
        .collect()
}

/// What users said -> their profiles (merged into those kept); the topics dropped for the limit
/// go into the report.
fn profiles_of(
    observations: &[&WmEntry],
    profiles: &[UserProfile],
    now_us: i64,
    report: &mut ConsolidationReport,
) -> Vec<UserProfile> {
    let mut merged: BTreeMap<String, UserProfile> = profiles.iter().map(|p| (p.user.clone(), p.clone())).collect();
    let mut tech: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut touched: BTreeSet<String> = BTreeSet::new();
    for e in observations.iter().filter(|e| e.kind == EntryKind::Observation) {
        let Some((user, text)) = observed(e) else { continue };
        let p = merged.entry(user.to_string()).or_insert_with(|| UserProfile {
            user: user.to_string(),
            topics: Vec::new(),
            preferences: Vec::new(),
            technical_level: "beginner".into(),
            confidence: 0.0,
            messages: 0,
            updated_us: now_us,
        });
        p.messages += 1;
        p.updated_us = now_us;
        touched.insert(user.to_string());
        let ws = words(&without_mentions(text));
        let t = tech.entry(user.to_string()).or_default();
        t.0 += ws.iter().filter(|w| TECHNICAL.contains(&w.as_str())).count();
        t.1 += ws.len();
        for w in ws {
            match p.topics.iter_mut().find(|(x, _)| *x == w) {
                Some((_, n)) => *n += 1,
                None => p.topics.push((w, 1)),
            }
        }
        let lower = text.to_lowercase();
        if ["i prefer", "please always", "i like", "i'd rather", "i would rather"].iter().any(|k| lower.contains(k)) {
            let pref: String = text.chars().take(160).collect();
            if !p.preferences.contains(&pref) {
                p.preferences.push(pref);
            }
        }
    }
    let mut out_profiles = Vec::new();
    for user in touched {
        let mut p = merged.remove(&user).expect("touched users are in the map");
        p.topics.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if p.topics.len() > TOPICS_PER_USER {
            let gone = p.topics.len() - TOPICS_PER_USER;
            p.topics.truncate(TOPICS_PER_USER);
            report
                .dropped
                .push(format!("{gone} least frequent topics of {user}: limit {TOPICS_PER_USER} facts per user"));
        }
        let (t, n) = tech.get(&user).copied().unwrap_or_default();
        let share = if n == 0 { 0.0 } else { t as f64 / n as f64 };
        // Each pass's evidence counts once the user said enough.
        if n > 0 {
            p.technical_level = if share >= 0.15 {
                "expert"
            } else if share >= 0.05 {
                "intermediate"
            } else {
                "beginner"
            }
            .into();
        }
        p.confidence = p.messages as f64 / (p.messages as f64 + 5.0);
        out_profiles.push(p);
    }
    out_profiles
}

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::record::{Evaluation, Plan, Step};

    fn entry(id: u64, kind: EntryKind, text: &str) -> WmEntry {
        WmEntry {
            id,
            domain: "chat".into(),
            kind,
            text: text.into(),
            importance: 0.8,
            event_id: Some(format!("e{id}")),
            relevance: 0.0,
            created_us: 0,
            last_access_us: 0,
            access_count: 0,
            expires_us: i64::MAX,
        }
    }

    fn plan(event: &str, ok: bool) -> PlanRecord {
        let step = |a| Step { state: StepState::Done, ..Step::pending(a) };
        PlanRecord {
            event_id: event.into(),
            domain: "chat".into(),
            plan: Plan {
                goal: "answer alice".into(),
                steps: vec![step(Action::RecallMemory), step(Action::DraftReply), step(Action::PostReply)],
                contingencies: vec![],
                criteria: vec![],
                source: "template:chat".into(),
                attempt: 0,
            },
            replaced: vec![],
            adjustments: vec![],
            evaluation: Some(Evaluation {
                success: ok,
                criteria_met: vec![],
                criteria_missed: vec![],
                what_worked: vec![],
                mistakes: vec![],
                pattern: "chat: worked".into(),
            }),
            started_us: 0,
            finished_us: Some(1),
            memory_used: vec![],
            draft_check: None,
        }
    }

    #[test]
    fn a_pass_promotes_each_kind_and_moves_the_watermark() {
        let entries = vec![
            entry(1, EntryKind::Observation, "alice in #dev: the deploy pipeline latency regression again"),
            entry(2, EntryKind::Observation, "alice in #dev: deploy pipeline latency is worse today"),
            entry(3, EntryKind::Reflection, "reflection: chat: worked; lesson: ask for the logs first"),
            entry(4, EntryKind::Observation, "bob in #dev: I prefer short answers please"),
        ];
        let plans = vec![plan("e3", true), plan("e9", false)];
        let c = consolidate(&entries, &plans, &[], 0, 10);
        assert_eq!(c.watermark, 4);
        assert_eq!(c.experiences.len(), 1);
        assert!(c.experiences[0].success && c.experiences[0].trajectory.len() == 3);
        assert_eq!(c.experiences[0].learnings, ["chat: worked", "ask for the logs first"], "pattern, then lesson");
        assert_eq!(c.experiences[0].task, "answer alice", "no observation of e3: the plan's goal");
        assert_eq!(c.procedures.len(), 1);
        assert_eq!((c.procedures[0].times_used, c.procedures[0].success_rate), (2, 0.5));
        assert_eq!(c.knowledge.len(), 1, "{:?}", c.knowledge);
        assert!(c.knowledge[0].topic.contains("deploy"));
        let alice = c.profiles.iter().find(|p| p.user == "alice").unwrap();
        assert_eq!((alice.messages, alice.technical_level.as_str()), (2, "expert"));
        let bob = c.profiles.iter().find(|p| p.user == "bob").unwrap();
        assert_eq!(bob.preferences.len(), 1);
        // Nothing new after the watermark: nothing promoted again.
        let again = consolidate(&entries, &[], &c.profiles, c.watermark, 20);
        assert!(again.experiences.is_empty() && again.profiles.is_empty());
    }

    #[test]
    fn an_experience_s_task_is_the_message_the_plan_answered() {
        let mut reflection = entry(2, EntryKind::Reflection, "reflection: chat: worked");
        reflection.event_id = Some("e1".into());
        let entries =
            vec![entry(1, EntryKind::Observation, "alice in #dev: @solo how do I rotate the admin token?"), reflection];
        // The observation was consolidated by an earlier pass: it is still read for the task.
        let c = consolidate(&entries, &[plan("e1", true)], &[], 1, 10);
        assert_eq!(c.experiences.len(), 1);
        assert_eq!(c.experiences[0].task, "how do I rotate the admin token?");
    }

    #[test]
    fn who_said_it_where_and_whom_it_mentions_make_no_topic_and_no_cluster() {
        let entries = vec![
            entry(1, EntryKind::Observation, "alice in #desk: @solo lunch plans for friday"),
            entry(2, EntryKind::Observation, "alice in #desk: @solo the release checklist"),
            entry(3, EntryKind::Observation, "alice in #desk: @solo release checklist for friday"),
        ];
        let c = consolidate(&entries, &[], &[], 0, 0);
        assert_eq!(c.knowledge.len(), 1, "only the two about the checklist: {:?}", c.knowledge);
        assert_eq!(c.knowledge[0].topic, "checklist release");
        let topics: Vec<&str> = c.profiles[0].topics.iter().map(|(w, _)| w.as_str()).collect();
        assert!(!topics.contains(&"solo") && !topics.contains(&"desk"), "{topics:?}");
    }

    #[test]
    fn profile_topics_leave_out_words_that_say_nothing() {
        let text = "dana in #dev: a question across the rollout: could the migration please wait";
        let c = consolidate(&[entry(1, EntryKind::Observation, text)], &[], &[], 0, 0);
        let topics: Vec<&str> = c.profiles[0].topics.iter().map(|(w, _)| w.as_str()).collect();
        assert!(topics.contains(&"rollout") && topics.contains(&"migration"), "{topics:?}");
        for stop in ["question", "across", "could", "please"] {
            assert!(!topics.contains(&stop), "{stop} in {topics:?}");
        }
    }

    #[test]
    fn user_facts_are_capped_with_a_reason() {
        let many: String = (0..TOPICS_PER_USER + 10).map(|i| format!("topic{i:04} ")).collect();
        let entries = vec![entry(1, EntryKind::Observation, &format!("carol in #dev: {many}"))];
        let c = consolidate(&entries, &[], &[], 0, 0);
        assert_eq!(c.profiles[0].topics.len(), TOPICS_PER_USER);
        assert!(c.report.dropped[0].contains("limit 200 facts per user"), "{:?}", c.report.dropped);
    }
}
