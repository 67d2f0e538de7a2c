//! What a persona recalls of its long-term memory before it plans, and what each piece of it
//! changed once the plan is chosen (the plan's `memory_used`).
//!
//! The recall is bounded: the newest [`RECALL_READ`] experiences and knowledge entries are
//! read, and of them the [`EXPERIENCES_RECALLED`] experiences and [`KNOWLEDGE_RECALLED`]
//! knowledge entries nearest the event in meaning (cosine of their embeddings, else shared
//! words when the embedding worker cannot answer); the procedures of the event's domain that
//! succeed at least [`PROCEDURE_MIN_SUCCESS`] of the time; and the sender's profile.
//!
//! How the brains use it: a procedure's steps order the plan; what failed in a similar task
//! that failed is left out of the plan (or, for a step every answer needs, checked by a recall
//! first); the profile's level and preferences shape the reply, and the knowledge is told in
//! it. [`memory_used`] says, for each piece recalled, what it changed, or "no effect" and why.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use mindfleet_core::adapter::AdapterRecord;
use mindfleet_core::embedding::dot;
use mindfleet_core::event::Event;
use mindfleet_core::llm::AdapterChoice;
use mindfleet_core::record::{
    Action, Experience, Knowledge, MemoryKind, MemoryUse, NO_EFFECT, Plan, Procedure, StepState, UserProfile,
};

use super::{PlanContext, RulesBrain};
use mindfleet_core::words::{is_stop_word, split};

/// Newest experiences and knowledge entries read for one recall.
pub const RECALL_READ: usize = 20;
/// Most experiences of similar tasks a plan recalls.
pub const EXPERIENCES_RECALLED: usize = 3;
/// Most knowledge entries a plan recalls.
pub const KNOWLEDGE_RECALLED: usize = 2;
/// Least success rate of a procedure a plan follows.
pub const PROCEDURE_MIN_SUCCESS: f64 = 0.7;
/// Least cosine of the embeddings of the event and of an experience's task (or a knowledge
/// entry) for it to count as similar. MiniLM puts paraphrases above 0.6 and unrelated chat
/// below 0.3.
pub const SIMILAR_MEANING: f32 = 0.5;
/// Least share of shared words (Jaccard) when similarity is by words.
pub const SIMILAR_WORDS: f32 = 0.25;

/// A recalled item and how near the event it is (cosine, or Jaccard by words).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Similar<T> {
    pub item: T,
    pub score: f32,
}

/// What a persona recalled of its long-term memory for one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recollection {
    /// Experiences of similar tasks, most similar first (failures included).
    pub experiences: Vec<Similar<Experience>>,
    /// Procedures of the event's domain with a success rate of at least
    /// [`PROCEDURE_MIN_SUCCESS`], best first.
    pub procedures: Vec<Procedure>,
    /// The sender's profile.
    pub profile: Option<UserProfile>,
    /// Knowledge entries near the event, nearest first.
    pub knowledge: Vec<Similar<Knowledge>>,
    /// Why similarity was by shared words and not by meaning, when it was.
    pub by_words: Option<String>,
    /// The adapter trained on the persona's study chats that fits the event
    /// (`AdapterDir::choose`): the reply is drafted with it.
    pub adapter: Option<RecalledAdapter>,
}

/// An adapter recall chose: what the model is asked with, and what it was trained on and how
/// it was judged, for `memory_used`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecalledAdapter {
    pub choice: AdapterChoice,
    pub topic: Option<String>,
    /// Held-out perplexity of the reference answers without it and with it.
    pub perplexity: (f64, f64),
}

impl RecalledAdapter {
    pub fn new(record: &AdapterRecord, weights: std::path::PathBuf) -> RecalledAdapter {
        RecalledAdapter {
            choice: AdapterChoice { id: record.id.clone(), path: weights, alpha: record.alpha },
            topic: record.topic.clone(),
            perplexity: (record.before.perplexity, record.after.perplexity),
        }
    }
}

/// Nothing recalled: what plans with no long-term memory (a replan's context, a benchmark) use.
pub static NOTHING_RECALLED: Recollection = Recollection {
    experiences: Vec::new(),
    procedures: Vec::new(),
    profile: None,
    knowledge: Vec::new(),
    by_words: None,
    adapter: None,
};

/// What an event asks, as recall compares it: its text without mentions.
pub fn query_of(event: &Event) -> String {
    event.text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" ")
}

/// The text of a knowledge entry as recall compares it.
fn knowledge_text(k: &Knowledge) -> String {
    format!("{}: {}", k.topic, k.summary)
}

/// The texts to embed for a recall: the query, then each experience's task, then each
/// knowledge entry.
pub fn texts(query: &str, experiences: &[Experience], knowledge: &[Knowledge]) -> Vec<String> {
    std::iter::once(query.to_string())
        .chain(experiences.iter().map(|e| e.task.clone()))
        .chain(knowledge.iter().map(knowledge_text))
        .collect()
}

fn words(text: &str) -> BTreeSet<String> {
    split(text).filter(|w| w.len() >= 3).map(str::to_lowercase).filter(|w| !is_stop_word(w)).collect()
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f32 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 { 0.0 } else { inter as f32 / union as f32 }
}

/// The `limit` most similar of `items` at `least` or more, most similar first.
fn nearest<T>(items: Vec<T>, scores: Vec<f32>, least: f32, limit: usize) -> Vec<Similar<T>> {
    let mut v: Vec<Similar<T>> = items
        .into_iter()
        .zip(scores)
        .filter(|(_, s)| *s >= least)
        .map(|(item, score)| Similar { item, score })
        .collect();
    v.sort_by(|a, b| b.score.total_cmp(&a.score));
    v.truncate(limit);
    v
}

/// Long-term memory read for one recall (the newest experiences and knowledge, every
/// procedure and profile).
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub experiences: Vec<Experience>,
    pub knowledge: Vec<Knowledge>,
    pub procedures: Vec<Procedure>,
    pub profiles: Vec<UserProfile>,
}

impl Read {
    /// Nothing to compare by meaning: no experience and no knowledge.
    pub fn nothing_to_compare(&self) -> bool {
        self.experiences.is_empty() && self.knowledge.is_empty()
    }
}

/// What `event` recalls of `read`, with the unit vectors of [`texts`] (in that order), or by
/// shared words with why not by meaning.
pub fn recollect(event: &Event, read: Read, vectors: Result<Vec<Vec<f32>>, String>) -> Recollection {
    let Read { experiences, knowledge, mut procedures, profiles } = read;
    let query = query_of(event);
    let (ne, nk) = (experiences.len(), knowledge.len());
    let (exp_scores, know_scores, least, by_words) = match vectors {
        Ok(v) if v.len() == 1 + ne + nk => {
            let q = &v[0];
            let s: Vec<f32> = v[1..].iter().map(|x| dot(q, x)).collect();
            (s[..ne].to_vec(), s[ne..].to_vec(), SIMILAR_MEANING, None)
        }
        other => {
            let why = match other {
                Ok(v) => format!("{} vectors for {} texts", v.len(), 1 + ne + nk),
                Err(e) => e,
            };
            let q = words(&query);
            let e = experiences.iter().map(|x| jaccard(&q, &words(&x.task))).collect();
            let k = knowledge.iter().map(|x| jaccard(&q, &words(&knowledge_text(x)))).collect();
            (e, k, SIMILAR_WORDS, Some(why))
        }
    };
    procedures.retain(|p| p.domain == event.domain && p.success_rate >= PROCEDURE_MIN_SUCCESS && !p.steps.is_empty());
    procedures.sort_by(|a, b| {
        b.success_rate.total_cmp(&a.success_rate).then(b.times_used.cmp(&a.times_used)).then(a.name.cmp(&b.name))
    });
    Recollection {
        experiences: nearest(experiences, exp_scores, least, EXPERIENCES_RECALLED),
        procedures,
        profile: profiles.into_iter().find(|p| p.user == event.from),
        knowledge: nearest(knowledge, know_scores, least, KNOWLEDGE_RECALLED),
        by_words,
        adapter: None,
    }
}

impl Recollection {
    pub fn is_empty(&self) -> bool {
        self.experiences.is_empty()
            && self.procedures.is_empty()
            && self.profile.is_none()
            && self.knowledge.is_empty()
            && self.adapter.is_none()
    }

    /// The best procedure whose steps fit a plan of `template`'s kind: it ends by posting, and
    /// it asks back exactly when the template does.
    pub fn procedure_for(&self, template: &[Action]) -> Option<&Procedure> {
        let asks = template.contains(&Action::AskClarifyingQuestion);
        self.procedures.iter().find(|p| {
            p.steps.last() == Some(&Action::PostReply) && p.steps.contains(&Action::AskClarifyingQuestion) == asks
        })
    }

    /// The steps that failed in the similar tasks that failed: the action, how it failed, and
    /// the experience.
    pub fn failed_steps(&self) -> Vec<(Action, String, &Experience)> {
        self.experiences.iter().filter(|s| !s.item.success).flat_map(|s| failed_in(&s.item)).collect()
    }
}

/// The steps that failed in `e`'s trajectory (`search_knowledge failed (timeout)`).
fn failed_in(e: &Experience) -> Vec<(Action, String, &Experience)> {
    e.trajectory
        .iter()
        .filter_map(|t| {
            let (name, class) = t.split_once(" failed (")?;
            let action = Action::ALL.into_iter().find(|a| a.as_str() == name)?;
            Some((action, class.trim_end_matches(')').to_string(), e))
        })
        .collect()
}

/// A procedure's steps once each, in order (a retried step ran twice).
pub fn steps_of(p: &Procedure) -> Vec<Action> {
    let mut out = Vec::new();
    for a in &p.steps {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

/// An action a plan that answers can do without.
pub fn optional(a: Action) -> bool {
    !matches!(a, Action::DraftReply | Action::PostReply | Action::AskClarifyingQuestion)
}

/// A task as an effect quotes it.
fn quoted(task: &str) -> String {
    let t: String = task.chars().take(60).collect();
    if task.chars().count() > 60 { format!("'{t}…'") } else { format!("'{t}'") }
}

fn level_of(p: &UserProfile) -> String {
    let article = if p.technical_level.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {}", p.technical_level)
}

/// What each piece of `ctx.memory` changed in `plan` (the plan chosen for `ctx`, by the rules
/// or the model): a procedure when the plan took its order, an experience against the plan the
/// rules brain makes from the rest of what was recalled. Effects on
/// the reply are what the plan's draft is to do; the persona says "no effect" for them when no
/// reply was drafted after all.
pub fn memory_used(ctx: &PlanContext, plan: &Plan) -> Vec<MemoryUse> {
    let m = ctx.memory;
    let mut out = Vec::new();
    if m.is_empty() {
        return out;
    }
    let actions: Vec<Action> = plan.steps.iter().map(|s| s.action).collect();
    // What the experiences changed is told against the plan made with the rest of memory.
    let rest = Recollection { experiences: Vec::new(), ..m.clone() };
    let without = RulesBrain::plan_of(&PlanContext { memory: &rest, ..*ctx });
    let baseline: Vec<Action> = without.steps.iter().map(|s| s.action).collect();
    let drafts = actions.contains(&Action::DraftReply);
    let by_model = plan.source.starts_with("model:");

    let template = RulesBrain::template(&ctx.event.domain, ctx.event).0;
    let procedure = m.procedure_for(&template).or(m.procedures.first());
    if let Some(p) = procedure {
        let effect = if plan.source.contains("+procedure") {
            format!(
                "ordered the steps as procedure '{}' (success {:.2}, used {} times)",
                p.name, p.success_rate, p.times_used
            )
        } else if m.procedure_for(&template).is_none() {
            format!("{NO_EFFECT}: its steps do not fit this event (success {:.2})", p.success_rate)
        } else if by_model {
            format!("{NO_EFFECT}: the model chose another plan (success {:.2})", p.success_rate)
        } else {
            // The rules plan takes a fitting procedure's steps whenever they differ from the
            // template's.
            format!("{NO_EFFECT}: the template takes its steps already (success {:.2})", p.success_rate)
        };
        out.push(MemoryUse { kind: MemoryKind::Procedure, id: p.name.clone(), effect });
    }

    for s in &m.experiences {
        let e = &s.item;
        let task = quoted(&e.task);
        let effect = if e.success {
            format!("{NO_EFFECT}: a similar task went well ({task}, similarity {:.2})", s.score)
        } else {
            let failed = failed_in(e);
            let avoided = failed.iter().find(|(a, _, _)| optional(*a) && !actions.contains(a) && baseline.contains(a));
            let checked = failed.iter().find(|(a, _, _)| {
                !optional(*a)
                    && actions.contains(&Action::RecallMemory)
                    && !baseline.contains(&Action::RecallMemory)
                    && actions.contains(a)
            });
            match (avoided, checked, failed.first()) {
                (Some((a, class, _)), _, _) => format!("avoided {}: it failed ({class}) for {task}", a.as_str()),
                (None, Some((a, class, _)), _) => {
                    format!("added recall_memory as a check before {}: it failed ({class}) for {task}", a.as_str())
                }
                (None, None, Some((a, class, _))) => format!(
                    "{NO_EFFECT}: failed: {} failed ({class}) for {task}, and this plan {}",
                    a.as_str(),
                    if actions.contains(a) { "needs it" } else { "does not take it anyway" }
                ),
                (None, None, None) => format!("{NO_EFFECT}: failed: {task} failed with no step to blame"),
            }
        };
        let id = e.event_id.clone().unwrap_or_else(|| format!("at:{}", e.at_us));
        out.push(MemoryUse { kind: MemoryKind::Experience, id, effect });
    }

    if let Some(p) = &m.profile {
        let effect = if drafts {
            let mut e = format!("reply for {} user (confidence {:.2})", level_of(p), p.confidence);
            if let Some(pref) = p.preferences.first() {
                e.push_str(&format!(", who said: \"{pref}\""));
            }
            e
        } else {
            format!("{NO_EFFECT}: the plan drafts no reply")
        };
        out.push(MemoryUse { kind: MemoryKind::UserProfile, id: p.user.clone(), effect });
    }

    for s in &m.knowledge {
        let effect = if drafts {
            format!("told in the reply (similarity {:.2})", s.score)
        } else {
            format!("{NO_EFFECT}: the plan drafts no reply")
        };
        out.push(MemoryUse { kind: MemoryKind::Knowledge, id: s.item.topic.clone(), effect });
    }

    if let Some(a) = &m.adapter {
        let effect = if drafts {
            format!(
                "the reply is drafted with it (trained on {}; held-out perplexity {:.3} without it, {:.3} with it)",
                a.topic.as_deref().map_or("all the study chats".to_string(), |t| format!("'{t}'")),
                a.perplexity.0,
                a.perplexity.1
            )
        } else {
            format!("{NO_EFFECT}: the plan drafts no reply")
        };
        out.push(MemoryUse { kind: MemoryKind::Adapter, id: a.choice.id.clone(), effect });
    }
    out
}

/// The effects on the reply of a plan whose draft never ran: nothing.
pub fn no_reply_drafted(plan: &Plan, used: &mut [MemoryUse]) {
    let drafted = plan.steps.iter().any(|s| s.action == Action::DraftReply && s.state == StepState::Done);
    if drafted {
        return;
    }
    for u in used
        .iter_mut()
        .filter(|u| matches!(u.kind, MemoryKind::UserProfile | MemoryKind::Knowledge | MemoryKind::Adapter))
    {
        if u.had_effect() {
            u.effect = format!("{NO_EFFECT}: no reply was drafted");
        }
    }
}

/// How the reply is said to `p`'s level, in the rules brain's words.
pub fn level_phrase(p: &UserProfile) -> &'static str {
    match p.technical_level.as_str() {
        "expert" => "In brief, as you know this area well.",
        "intermediate" => "In practical terms, with the details where they matter.",
        _ => "Step by step, since this may be new to you: ask me about any term I used.",
    }
}

/// How the local brain's prompt asks for `p`'s level.
fn level_request(p: &UserProfile) -> &'static str {
    match p.technical_level.as_str() {
        "expert" => "be brief and technical, skip the basics",
        "intermediate" => "be practical, explain only what is not obvious",
        _ => "use simple words and explain every technical term",
    }
}

/// The rules brain's additions to a reply: the user's level and preference (the knowledge
/// recalled is the reply's material). Empty without a profile.
pub fn rules_additions(m: &Recollection) -> String {
    let mut out = String::new();
    if let Some(p) = &m.profile {
        out.push(' ');
        out.push_str(level_phrase(p));
        if let Some(pref) = p.preferences.first() {
            let pref: String = pref.chars().filter(|c| *c != '@').collect();
            out.push_str(&format!(" As you asked: \"{pref}\"."));
        }
    }
    out
}

/// The local brain's lines about the user and what it knows, for the reply's system prompt.
pub fn prompt_lines(m: &Recollection) -> String {
    let mut out = String::new();
    if let Some(p) = &m.profile {
        out.push_str(&format!("\nAbout {}: {} user", p.user, p.technical_level));
        let topics: Vec<&str> = p.topics.iter().take(5).map(|(t, _)| t.as_str()).collect();
        if !topics.is_empty() {
            out.push_str(&format!(" who talks about {}", topics.join(", ")));
        }
        out.push_str(&format!("; {}.", level_request(p)));
        for pref in p.preferences.iter().take(2) {
            out.push_str(&format!(" They said: \"{pref}\"."));
        }
    }
    if !m.knowledge.is_empty() {
        out.push_str("\nWhat you know:");
        for s in &m.knowledge {
            out.push_str(&format!("\n- {}: {}", s.item.topic, s.item.summary));
        }
    }
    out
}
