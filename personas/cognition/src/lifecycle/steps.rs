//! The plan's steps: one action of the registry each, and the answers they wait for.

use std::sync::Arc;

use mindfleet_core::conversation::{Recall, RecallQuery, Said};
use mindfleet_core::event::{Event, SenderKind, text_mentions};
use mindfleet_core::knowledge::{RagError, Source};
use mindfleet_core::llm::{GenerateJob, Generation, LlmFailure};
use mindfleet_core::record::{Action, DraftCheck, EntryKind, ErrorClass, MemoryKind, NO_EFFECT, OutboxEntry, WmEntry};
use mindfleet_core::sched::TaskId;

use crate::brain::{Brain, RespondContext, RulesBrain};
use crate::gate::GateDecision;
use crate::mind::{REFERENCE_KIND, TOOL_FAILED_KIND, TOOL_KIND};
use crate::reply;
use crate::study;
use mindfleet_core::refs::{self, Excerpt, RefMatch, Via};

use super::phase::{Phase, Work};
use super::{Ask, CONVERSATION_RECALLED, Effect, Lifecycle, REFS_READ_PER_STEP, REFS_SELECTED_PER_STEP, Repeat};

/// The stage a draft withheld as redundant is journaled by (`redundancy/redundant`).
pub(super) const REDUNDANCY: &str = "redundancy";

/// How a step ended its run: done (with its result's text, which the enrichment pipeline reads
/// before the persona goes on), or waiting for an answer (an input to come).
pub(super) enum StepRun {
    Done(Option<String>),
    Waiting,
}

impl Lifecycle {
    /// One action of the registry on the work `f` (taken out of the phase while it runs);
    /// `rules_only`: without a model (the budget's hard limit).
    pub(super) fn run_step(&mut self, f: &mut Work, rules_only: bool) -> Result<StepRun, (ErrorClass, String)> {
        let action = f.record.plan.steps[f.cursor].action;
        match action {
            Action::RecallMemory => {
                // Working memory's entries first (`WorkingMemory`), then conversation memory's.
                let e = f.event();
                let (domain, query) = (e.domain.clone(), e.text.clone());
                self.emit(Effect::RecallWorkingMemory { task: f.task, domain, query });
                Ok(StepRun::Waiting)
            }
            Action::SearchKnowledge => self.search_knowledge(f),
            Action::StudyTopic => {
                if !self.setup.index {
                    return Err((ErrorClass::MissingResource, "studying needs the knowledge index".into()));
                }
                // Studied later, in idle time: the step only notes the topic (`StudyNoted`).
                let topic = study::topic_of(&f.event().text);
                let (why, event_id) = ("a plan step asked to study it".into(), f.event().id.clone());
                self.emit(Effect::NoteStudy { task: Some(f.task), topic, why, event_id });
                Ok(StepRun::Waiting)
            }
            Action::DraftReply => Ok(self.draft_reply(f, rules_only)),
            Action::AskClarifyingQuestion => {
                let hints = self.hints();
                let ctx = self.respond_context(f, &hints);
                f.draft = Some(reply::clarify(&ctx.reply(), ctx.ask()));
                f.answer = None;
                Ok(StepRun::Done(None))
            }
            Action::NotePreoccupation => Ok(StepRun::Done(None)),
            Action::SelectReference => self.select_references(f),
            Action::CallTool => self.call_tool(f, rules_only),
            Action::PostReply => {
                // The redundancy check first (`RedundancyChecked`): a draft that repeats the
                // thread is not posted.
                if self.checks_redundancy(f) {
                    return Ok(StepRun::Waiting);
                }
                self.post_reply(f)
            }
        }
    }

    /// Working memory's entries for the recall step of `task`; then (answered by `Recalled`)
    /// what conversation memory recalls.
    pub(super) fn on_working_memory(&mut self, task: TaskId, answer: Result<Vec<WmEntry>, String>) {
        let Some(f) = self.phase.work_mut(task) else {
            self.done_task(task);
            return;
        };
        let got = match answer {
            Ok(got) => got,
            Err(err) => {
                let e = (ErrorClass::Timeout, format!("working memory did not answer: {err}"));
                return self.step_result(task, Err(e));
            }
        };
        let text = got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>().join("\n");
        f.recalled = got;
        if !self.setup.conversation {
            return self.step_result(task, Ok(Some(text)));
        }
        // And what was said before, from conversation memory, off the persona's loop.
        let e = f.event();
        let query = RecallQuery {
            persona: self.name.to_string(),
            query: words_asked(&e.text),
            room: Some(e.room.clone()),
            since_us: None,
            limit: CONVERSATION_RECALLED,
        };
        if query.query.is_empty() {
            return self.step_result(task, Ok(Some(text)));
        }
        self.emit(Effect::RecallConversation { task, query });
    }

    /// What conversation memory recalled for the recall step: into the reply, and (when it
    /// could only match words) reported.
    pub(super) fn on_recalled(&mut self, task: TaskId, recall: Result<Recall, String>, room: Vec<Said>) {
        let Some(f) = self.phase.work_mut(task) else {
            self.done_task(task);
            return;
        };
        f.room = room;
        let seq = f.gated.seen.delivery.seq;
        let mut degraded = None;
        match recall {
            Ok(r) => {
                f.conversation = r.items.into_iter().filter(|i| i.said.seq != seq).collect();
                degraded = r.degraded;
            }
            Err(e) => f.notes.push(format!("conversation memory did not answer: {e}")),
        }
        if let Some(why) = &degraded {
            f.notes.push(format!("conversation recall degraded (words only): {why}"));
        }
        let text = f
            .recalled
            .iter()
            .map(|m| m.text.clone())
            .chain(f.conversation.iter().map(|r| r.said.content()))
            .collect::<Vec<_>>()
            .join("\n");
        let seqs = f.conversation.iter().map(|r| r.said.seq).collect();
        self.emit(Effect::ConversationRecalled { seqs, degraded });
        self.step_result(task, Ok(Some(text)));
    }

    /// The study step's topic was noted (or was already).
    pub(super) fn on_study_noted(&mut self, task: TaskId, topic: String, noted: bool) {
        if self.phase.work_mut(task).is_none() {
            self.done_task(task);
            return;
        }
        self.step_result(task, Ok(noted.then(|| format!("noted for study: {topic}"))));
    }

    /// The `search_knowledge` step: the event's question to the index, off the persona's loop
    /// (answered by `Searched`).
    fn search_knowledge(&mut self, f: &Work) -> Result<StepRun, (ErrorClass, String)> {
        if !self.setup.index {
            return Err((ErrorClass::MissingResource, "no knowledge index in this fleet".into()));
        }
        let query = words_asked(&f.event().text);
        if query.is_empty() {
            return Err((ErrorClass::MissingResource, "nothing to search for".into()));
        }
        self.emit(Effect::Search { task: f.task, query });
        Ok(StepRun::Waiting)
    }

    /// The `draft_reply` step: the brain drafts at once, or the model is asked off the loop
    /// (answered by `Drafted`).
    fn draft_reply(&mut self, f: &mut Work, rules_only: bool) -> StepRun {
        let hints = self.hints();
        let ctx = self.respond_context(f, &hints);
        // What the runtime can answer exactly (who said what, a summary, where in the code) it
        // answers from what was found as it was said: no model call.
        // And what a tool call returned is quoted as it came, not retold: a small model's retelling
        // drops what was asked (a commit's subject for its date), and a result is data to quote,
        // never a prompt to follow.
        let exact =
            ctx.ask().exact() || f.found.iter().any(|s| matches!(s.kind.as_str(), TOOL_KIND | TOOL_FAILED_KIND));
        let request = if rules_only || exact { None } else { self.brain.reply_request(&ctx) };
        let Some(mut req) = request else {
            let brain: &dyn Brain = if rules_only || exact { &RulesBrain } else { self.brain.as_ref() };
            let text = brain.respond(&ctx);
            if exact && !rules_only && self.brain.name() != RulesBrain.name() {
                f.notes.push("draft_reply answered exactly from what the steps found: no model call".into());
            }
            f.draft = Some(text.clone());
            f.answer = None;
            f.drafted_by = brain.name();
            return StepRun::Done(Some(text));
        };
        if !self.setup.llm {
            self.draft_by_rules(f, "no LLM in this fleet".into());
            return StepRun::Done(f.draft.clone());
        }
        req.adapter = f.memory.adapter.as_ref().map(|a| a.choice.clone());
        let job = GenerateJob::new(req, "reply", Some(self.name.to_string()));
        self.emit(Effect::Llm { task: f.task, ask: Ask::Draft(job) });
        StepRun::Waiting
    }

    /// The hint block of the references the event in hand called for.
    pub(super) fn hints(&self) -> String {
        self.refs.hint(self.setup.references.as_ref().map(|r| &*r.catalog))
    }

    /// What the brain answers from: the event and what the steps gathered for it.
    pub(super) fn respond_context<'a>(&'a self, f: &'a Work, hints: &'a str) -> RespondContext<'a> {
        RespondContext {
            persona: &self.name,
            role: &self.setup.config.role,
            event: f.event(),
            recalled: &f.recalled,
            conversation: &f.conversation,
            room: &f.room,
            personas: &self.setup.personas,
            found: &f.found,
            hints,
            state: &f.gated.seen.state,
            memory: &f.memory,
            ask: Default::default(),
        }
    }

    /// Whether the draft about to be posted goes to the redundancy check first (answered by
    /// `RedundancyChecked`): a person who named this persona (a mention, a directed message)
    /// gets its answer unchecked.
    fn checks_redundancy(&mut self, f: &Work) -> bool {
        let e = f.event();
        let named = e.mentions.iter().any(|m| **m == *self.name) || e.persona.as_deref() == Some(&*self.name);
        if e.sender_kind == SenderKind::Human && named {
            return false;
        }
        let Some(draft) = f.draft.clone().filter(|_| self.setup.redundancy) else { return false };
        self.emit(Effect::CheckRedundancy { task: f.task, event: f.gated.seen.delivery.event.clone(), draft });
        true
    }

    /// The redundancy check of the draft of `task`: a draft that repeats a reply already posted
    /// to its thread is withheld, and the decision says `ignore` by `redundancy/redundant` with
    /// the reply it repeats. A check that cannot run (no embedding model) lets the draft
    /// through, with a note saying why.
    pub(super) fn on_redundancy_checked(&mut self, task: TaskId, answer: Result<Option<Repeat>, String>) {
        let Some(mut f) = self.phase.take_work(task) else {
            self.done_task(task);
            return;
        };
        let run = match answer {
            Ok(Some(repeat)) => {
                tracing::info!(persona = %self.name, event = %f.event().id, reason = %repeat.reason, "draft withheld");
                f.gated.gate = GateDecision {
                    verdict: mindfleet_core::record::Verdict::Ignore,
                    stage: REDUNDANCY,
                    rule: "redundant",
                    threshold: repeat.threshold,
                    score: repeat.similarity,
                    note: repeat.reason,
                };
                Ok(StepRun::Done(None))
            }
            Ok(None) => self.post_reply(&mut f),
            Err(why) => {
                f.notes.push(format!("redundancy check skipped: {why}"));
                self.post_reply(&mut f)
            }
        };
        self.phase = Phase::Working(f);
        match run {
            Ok(StepRun::Done(text)) => self.step_result(task, Ok(text)),
            Ok(StepRun::Waiting) => {}
            Err(e) => self.step_result(task, Err(e)),
        }
    }

    /// The `post_reply` step: the draft becomes the reply event, posted with the decision (its
    /// id is given when it is committed).
    fn post_reply(&self, f: &mut Work) -> Result<StepRun, (ErrorClass, String)> {
        let Some(text) = f.draft.clone() else {
            return Err((ErrorClass::Unknown, "nothing drafted to post".into()));
        };
        untold_knowledge(f, &text);
        let e = f.event();
        let now = self.now;
        let reply_event = Event {
            id: String::new(),
            ts_us: now,
            accepted_us: now,
            domain: e.domain.clone(),
            room: e.room.clone(),
            from: self.name.to_string(),
            sender_kind: SenderKind::Persona,
            mentions: text_mentions(&text).map(str::to_string).collect(),
            text: text.clone(),
            persona: None,
            priority: None,
            urgent: false,
            in_reply_to: Some(e.id.clone()),
        };
        let entry = OutboxEntry {
            persona: self.name.to_string(),
            room: e.room.clone(),
            in_reply_to: e.id.clone(),
            event_id: String::new(),
            text,
            brain: f.drafted_by.into(),
            at_us: now,
        };
        f.reply = Some((entry, reply_event));
        Ok(StepRun::Done(None))
    }

    /// The `select_reference` step: selects the candidates the event's texts were offered (by
    /// tag or meaning, best first), then reads (answered by `ReferencesRead`), from each
    /// selected reference the event called for, the passage that bears most on it (only where
    /// its selection authorises).
    fn select_references(&mut self, f: &mut Work) -> Result<StepRun, (ErrorClass, String)> {
        let e = f.gated.seen.delivery.event.clone();
        let Some(references) = self.setup.references.clone() else {
            return Err((ErrorClass::MissingResource, "no reference catalog in this fleet".into()));
        };
        let offered: Vec<RefMatch> = self
            .refs
            .current
            .iter()
            .filter(|m| matches!(m.via, Via::Tag | Via::Semantic) && !self.refs.selected.contains_key(&m.id))
            .take(REFS_SELECTED_PER_STEP)
            .cloned()
            .collect();
        if !offered.is_empty() {
            let hint = refs::hint_block(&references.catalog, &offered);
            tracing::info!(persona = %self.name, event = %e.id, %hint, "selecting references");
        }
        self.select_all(&e.id, offered);
        let read = |id: &str| f.found.iter().any(|s| s.cite.starts_with(&format!("ref:{id}/")));
        let ids: Vec<String> = self
            .refs
            .current
            .iter()
            .filter(|m| self.refs.selected.contains_key(&m.id) && !read(&m.id))
            .take(REFS_READ_PER_STEP)
            .map(|m| m.id.clone())
            .collect();
        let authorised = self.refs.authorised.clone();
        self.emit(Effect::ReadReferences { task: f.task, ids, text: e.text.clone(), authorised });
        Ok(StepRun::Waiting)
    }

    /// The passages the `select_reference` step of `task` read: into working memory as
    /// observations, and into the reply; `read` holds, for each reference, its passage, the
    /// files it was refused and its id.
    pub(super) fn on_references_read(&mut self, task: TaskId, read: Vec<(Option<Excerpt>, Vec<String>, String)>) {
        let Some(f) = self.phase.work_mut(task) else {
            self.done_task(task);
            return;
        };
        let e: Arc<Event> = f.gated.seen.delivery.event.clone();
        let catalog = self.setup.references.as_ref().map(|r| r.catalog.clone());
        let (mut found, mut refused) = (Vec::new(), Vec::new());
        for (passage, denied, id) in read {
            refused.extend(denied.into_iter().map(|file| format!("@{id}/{file}")));
            let name = catalog.as_ref().and_then(|c| c.get(&id)).map(|r| r.name.clone());
            if let Some(x) = passage {
                found.push(Source {
                    cite: format!("ref:{id}/{}:{}-{}", x.file, x.start_line, x.end_line),
                    kind: REFERENCE_KIND.into(),
                    symbol: name,
                    text: x.text,
                    score: 1.0,
                });
            }
        }
        if found.is_empty() {
            let e = if refused.is_empty() {
                (ErrorClass::MissingResource, "the references have no passage to read".into())
            } else {
                (ErrorClass::AccessDenied, format!("not authorised to read {}", refused.join(", ")))
            };
            return self.step_result(task, Err(e));
        }
        if !refused.is_empty() {
            f.notes.push(format!("select_reference: not authorised to read {}", refused.join(", ")));
        }
        f.found.extend(found.iter().cloned());
        for s in &found {
            let first: String = s.text.lines().next().unwrap_or("").chars().take(160).collect();
            let name = s.symbol.as_deref().unwrap_or("");
            self.remember(&e, EntryKind::Observation, format!("[{}] {name}: {}", s.cite, first.trim()), 0.6);
        }
        let text = found.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n");
        self.step_result(task, Ok(Some(text)));
    }

    /// Drafts the reply with the rules brain instead of the model, saying why in the decision.
    fn draft_by_rules(&self, f: &mut Work, why: String) {
        let hints = self.hints();
        let text = RulesBrain.respond(&self.respond_context(f, &hints));
        tracing::info!(persona = %self.name, %why, "reply drafted by the rules brain");
        f.notes.push(format!("draft_reply fell back to the rules brain: {why}"));
        for u in f.record.memory_used.iter_mut().filter(|u| u.kind == MemoryKind::Adapter && u.had_effect()) {
            u.effect = format!("{NO_EFFECT}: the rules brain drafted the reply");
        }
        f.draft = Some(text);
        f.answer = None;
        f.drafted_by = RulesBrain.name();
    }

    /// The draft check of the model's `draft` for the work `f`: what is wrong with it and the
    /// grounded reply to post instead, or `None` when it may be posted as written.
    fn checked(&self, f: &Work, draft: &str) -> Option<(reply::Finding, String)> {
        let hints = self.hints();
        let ctx = self.respond_context(f, &hints);
        let input = ctx.reply();
        let pieces = reply::ground(&input);
        // A draft made with an adapter trained on the topic carries what the persona studied:
        // like a model that knows things, it may answer without material.
        let open = self.setup.open_answers || f.memory.adapter.is_some();
        let finding = reply::check_draft(&input, &pieces, draft, open)?;
        Some((finding, RulesBrain.respond(&ctx)))
    }

    /// The model's draft for the step of `task` (or why there is none).
    pub(super) fn on_drafted(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        let Some(mut f) = self.phase.take_work(task) else {
            // The event is over (the persona restarted meanwhile): only the grant is left.
            self.done_task(task);
            return;
        };
        match answer {
            Ok(g) if !g.text.trim().is_empty() => {
                let to = if f.event().sender_kind == SenderKind::Human {
                    format!("@{} ", f.event().from)
                } else {
                    String::new()
                };
                f.tokens = (g.tokens_in + g.tokens_out) as u32;
                let draft = format!("{to}{}", g.text.trim());
                match self.checked(&f, &draft) {
                    None => {
                        f.draft = Some(draft);
                        f.drafted_by = self.brain.name();
                        f.answer = Some(g.text);
                    }
                    Some((finding, grounded)) => {
                        tracing::info!(persona = %self.name, event = %f.event().id, flaw = finding.flaw.as_str(), "draft replaced by the grounded reply");
                        f.notes.push(finding.note());
                        *self.drafts_replaced.entry(finding.flaw.as_str()).or_default() += 1;
                        f.record.draft_check =
                            Some(DraftCheck { flaw: finding.flaw.as_str().into(), detail: finding.detail, draft });
                        f.draft = Some(grounded);
                        f.drafted_by = RulesBrain.name();
                        f.answer = None;
                    }
                }
            }
            Ok(g) => self.draft_by_rules(&mut f, format!("the model answered nothing ({:?})", g.stop)),
            Err(e) => self.draft_by_rules(&mut f, e.to_string()),
        }
        let draft = f.draft.clone();
        self.phase = Phase::Working(f);
        self.step_result(task, Ok(draft));
    }

    /// The knowledge search's results: into working memory as observations, and into the reply.
    pub(super) fn on_searched(&mut self, task: TaskId, answer: Result<Vec<Source>, RagError>) {
        let Some(f) = self.phase.work_mut(task) else {
            self.done_task(task);
            return;
        };
        let e = f.event().clone();
        let result = match answer {
            Ok(found) if !found.is_empty() => {
                f.found.extend(found.iter().cloned());
                for s in &found {
                    let what = s.symbol.as_deref().map_or_else(|| s.kind.clone(), |sym| format!("{} {sym}", s.kind));
                    let first: String =
                        s.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(160).collect();
                    self.remember(&e, EntryKind::Observation, format!("[{}] {what}: {}", s.cite, first.trim()), 0.6);
                }
                Ok(Some(found.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n")))
            }
            Ok(_) => Err((ErrorClass::MissingResource, "the index has nothing relevant".into())),
            Err(RagError::Unavailable(m)) if m.starts_with("the index did not answer") => Err((ErrorClass::Timeout, m)),
            Err(RagError::Unavailable(m)) => Err((ErrorClass::MissingResource, m)),
            Err(e) => Err((ErrorClass::Unknown, e.to_string())),
        };
        self.step_result(task, result);
    }
}

/// A grounded reply quotes only the material that bore most on the question: knowledge recalled
/// for the event but left out of it was not told, and the plan says so. (A model's draft is read
/// as told: the model had it in its prompt.)
pub(super) fn untold_knowledge(f: &mut Work, reply: &str) {
    if f.drafted_by != RulesBrain.name() {
        return;
    }
    let flat: String = reply.split_whitespace().collect::<Vec<_>>().join(" ");
    for u in f.record.memory_used.iter_mut().filter(|u| u.kind == MemoryKind::Knowledge && u.had_effect()) {
        let Some(k) = f.memory.knowledge.iter().find(|k| k.item.topic == u.id) else { continue };
        let words: Vec<&str> = k.item.summary.split_whitespace().take(6).collect();
        let start: String = words.join(" ").chars().filter(|c| *c != '@').collect();
        if !flat.contains(start.trim_end_matches(['.', ' '])) {
            u.effect = format!("{NO_EFFECT}: other material bore more on the question");
        }
    }
}

/// The question in words: mentions say who is asked, not what.
fn words_asked(text: &str) -> String {
    text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" ")
}
