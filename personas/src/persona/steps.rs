//! The plan's steps: one action of the registry each, and the answers they wait for.

use mindfleet_core::conversation::RecallQuery;
use mindfleet_core::event::{Event, SenderKind, new_event_id, text_mentions};
use mindfleet_core::knowledge::{IndexMsg, RagError, RagRequest, SearchRequest, Source};
use mindfleet_core::llm::{GenerateJob, Generation, LlmFailure, LlmMsg};
use mindfleet_core::model::{Action, DraftCheck, EntryKind, ErrorClass, MemoryKind, NO_EFFECT, OutboxEntry};
use mindfleet_core::sched::TaskId;
use mindfleet_core::time::now_us;
use ractor::call_t;

use crate::brain::{Brain, RespondContext, RulesBrain};
use crate::mind::REFERENCE_KIND;
use crate::references::{self as refs, RefMatch, Via};
use crate::reply;
use crate::study::{self};
use crate::working_memory::MemoryMsg;

use super::Own;
use super::phase::{Phase, Work};
use super::{
    CHILD_CALL_MS, CONVERSATION_RECALLED, ConversationArgs, KNOWLEDGE_CHUNKS, PersonaState, REFS_READ_PER_STEP,
    REFS_SELECTED_PER_STEP, ROOM_LINES, SEARCH_CALL_MS, StepRun,
};

impl PersonaState {
    /// One action of the registry on the work `f` (taken out of the phase while it runs);
    /// `rules_only`: without a model (the budget's hard limit).
    pub(super) async fn run_step(&mut self, f: &mut Work, rules_only: bool) -> Result<StepRun, (ErrorClass, String)> {
        let action = f.record.plan.steps[f.cursor].action;
        if let Some(delay) = self.args.faults.take_action_delay(action) {
            tokio::time::sleep(delay).await;
        }
        if let Some(class) = self.args.faults.take_action_failure(action) {
            return Err((class, format!("injected {} failure", class.as_str())));
        }
        match action {
            Action::RecallMemory => self.recall_memory(f).await,
            Action::SearchKnowledge => self.search_knowledge(f),
            Action::StudyTopic => {
                if self.args.index.is_none() {
                    return Err((ErrorClass::MissingResource, "studying needs the knowledge index".into()));
                }
                // Studied later, in idle time: the step only notes the topic.
                let topic = study::topic_of(&f.event().text);
                if !self.study.note(&topic, "a plan step asked to study it", now_us(), false) {
                    return Ok(StepRun::Done(None));
                }
                Ok(StepRun::Done(Some(format!("noted for study: {topic}"))))
            }
            Action::DraftReply => Ok(self.draft_reply(f, rules_only)),
            Action::AskClarifyingQuestion => {
                let hints = self.refs.hint(self.args.enricher.as_deref());
                let ctx = self.respond_context(f, &hints);
                let ask = reply::Ask::of(&ctx.event.text, &ctx.event.domain, ctx.persona);
                f.draft = Some(reply::clarify(&ctx.reply(), &ask));
                f.answer = None;
                Ok(StepRun::Done(None))
            }
            Action::NotePreoccupation => Ok(StepRun::Done(None)),
            Action::SelectReference => self.select_references(f).map(|text| StepRun::Done(Some(text))),
            Action::PostReply => {
                // The redundancy check (persona/turns.rs): a draft that repeats the thread is not posted.
                if self.withheld_as_redundant(f).await {
                    return Ok(StepRun::Done(None));
                }
                self.post_reply(f)
            }
        }
    }

    /// The `recall_memory` step: working memory's entries for the event, then (off the
    /// persona's loop, answered by `Own::Recalled`) what conversation memory recalls.
    async fn recall_memory(&mut self, f: &mut Work) -> Result<StepRun, (ErrorClass, String)> {
        let e = f.event().clone();
        let got = call_t!(
            self.memory.actor,
            |reply| MemoryMsg::Recall { domain: e.domain.clone(), query: e.text.clone(), limit: 3, reply },
            CHILD_CALL_MS
        )
        .map_err(|err| (ErrorClass::Timeout, format!("working memory did not answer: {err}")))?;
        let text = got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>().join("\n");
        f.recalled = got;
        let Some(ConversationArgs { index, config, .. }) = self.args.conversation.clone() else {
            return Ok(StepRun::Done(Some(text)));
        };
        // And what was said before, from conversation memory, off the persona's loop.
        let q = RecallQuery {
            persona: self.name.to_string(),
            query: e.text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" "),
            room: Some(e.room.clone()),
            since_us: None,
            limit: CONVERSATION_RECALLED,
        };
        if q.query.is_empty() {
            return Ok(StepRun::Done(Some(text)));
        }
        let (storage, weights, wait) = (self.args.storage.clone(), config.weights, config.recall_wait);
        let (me, task, name, room) = (self.myself.clone(), f.task, self.name.clone(), e.room.clone());
        tokio::spawn(async move {
            let recall = mindfleet_store::conversation::recall(&index, &storage, &q, &weights, Some(wait)).await;
            // And the room's latest messages: who said what, and when, read as it was said.
            let read = tokio::task::spawn_blocking(move || storage.conversation_in_room(&name, &room, ROOM_LINES));
            let room = match read.await {
                Ok(Ok(said)) => said,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the room's messages could not be read");
                    Vec::new()
                }
                Err(_) => Vec::new(),
            };
            let _ = me.cast(Own::Recalled { task, recall, room }.into());
        });
        Ok(StepRun::Waiting)
    }

    /// The `search_knowledge` step: the event's question to the index, off the persona's loop
    /// (answered by `Own::Searched`).
    fn search_knowledge(&mut self, f: &Work) -> Result<StepRun, (ErrorClass, String)> {
        let Some(index) = self.args.index.clone() else {
            return Err((ErrorClass::MissingResource, "no knowledge index in this fleet".into()));
        };
        // The question in words: mentions say who is asked, not what.
        let query: String =
            f.event().text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" ");
        if query.is_empty() {
            return Err((ErrorClass::MissingResource, "nothing to search for".into()));
        }
        let req = RagRequest::Search(SearchRequest::new(query, KNOWLEDGE_CHUNKS));
        let (me, task) = (self.myself.clone(), f.task);
        // Off the persona's loop: the index may be busy with a long indexing run.
        tokio::spawn(async move {
            let answer = match call_t!(index, IndexMsg::Request, SEARCH_CALL_MS, Box::new(req)) {
                Ok(Ok(v)) => Ok(Source::relevant_hits(&v)),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(RagError::Unavailable(format!("the index did not answer: {e}"))),
            };
            let _ = me.cast(Own::Searched { task, answer }.into());
        });
        Ok(StepRun::Waiting)
    }

    /// The `draft_reply` step: the brain drafts at once, or the model is asked off the loop
    /// (answered by `Own::Drafted`).
    fn draft_reply(&mut self, f: &mut Work, rules_only: bool) -> StepRun {
        let hints = self.refs.hint(self.args.enricher.as_deref());
        let ctx = self.respond_context(f, &hints);
        // What the runtime can answer exactly (who said what, a summary, where in the code) it
        // answers from what was found as it was said: no model call.
        let exact = reply::Ask::of(&ctx.event.text, &ctx.event.domain, ctx.persona).exact();
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
        let Some(llm) = self.args.llm.clone() else {
            self.draft_by_rules(f, "no LLM in this fleet".into());
            return StepRun::Done(f.draft.clone());
        };
        req.adapter = f.memory.adapter.as_ref().map(|a| a.choice.clone());
        let job = GenerateJob { req, purpose: "reply".into(), persona: Some(self.name.to_string()), stream: None };
        let drafted = |task, answer| Own::Drafted { task, answer };
        self.ask_llm(llm, f.task, |reply| LlmMsg::Generate { job, reply }, drafted);
        StepRun::Waiting
    }

    /// What the brain answers from: the event and what the steps gathered for it.
    pub(super) fn respond_context<'a>(&'a self, f: &'a Work, hints: &'a str) -> RespondContext<'a> {
        RespondContext {
            persona: &self.name,
            role: &self.args.config.role,
            event: f.event(),
            recalled: &f.recalled,
            conversation: &f.conversation,
            room: &f.room,
            personas: &self.args.personas,
            found: &f.found,
            hints,
            state: &f.gated.seen.state,
            memory: &f.memory,
        }
    }

    /// The `post_reply` step: the draft becomes the reply event, posted with the decision.
    fn post_reply(&self, f: &mut Work) -> Result<StepRun, (ErrorClass, String)> {
        let Some(text) = f.draft.clone() else {
            return Err((ErrorClass::Unknown, "nothing drafted to post".into()));
        };
        untold_knowledge(f, &text);
        let e = f.event();
        let now = now_us();
        let reply_event = Event {
            id: new_event_id(),
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
            event_id: reply_event.id.clone(),
            text,
            brain: f.drafted_by.into(),
            at_us: now,
        };
        f.reply = Some((entry, reply_event));
        Ok(StepRun::Done(None))
    }

    /// The `select_reference` step: selects the candidates the event's texts were offered (by
    /// tag or meaning, best first), then reads, from each selected reference the event called
    /// for, the passage that bears most on it (only where its selection authorises). Returns
    /// the passages.
    fn select_references(&mut self, f: &mut Work) -> Result<String, (ErrorClass, String)> {
        let e = &f.gated.seen.delivery.event;
        let Some(enricher) = self.args.enricher.clone() else {
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
            let hint = refs::hint_block(enricher.catalog(), &offered);
            tracing::info!(persona = %self.name, event = %e.id, %hint, "selecting references");
        }
        self.select_all(&enricher, &e.id, offered);
        let read = |id: &str| f.found.iter().any(|s| s.cite.starts_with(&format!("ref:{id}/")));
        let to_read: Vec<String> = self
            .refs
            .current
            .iter()
            .filter(|m| self.refs.selected.contains_key(&m.id) && !read(&m.id))
            .take(REFS_READ_PER_STEP)
            .map(|m| m.id.clone())
            .collect();
        let (mut found, mut refused) = (Vec::new(), Vec::new());
        for id in to_read {
            let Some(r) = enricher.catalog().get(&id) else { continue };
            let (passage, denied) = refs::excerpt(r, &e.text, &self.refs.authorised);
            refused.extend(denied.into_iter().map(|file| format!("@{id}/{file}")));
            if let Some(x) = passage {
                found.push(Source {
                    cite: format!("ref:{id}/{}:{}-{}", x.file, x.start_line, x.end_line),
                    kind: REFERENCE_KIND.into(),
                    symbol: Some(r.name.clone()),
                    text: x.text,
                    score: 1.0,
                });
            }
        }
        if found.is_empty() {
            return Err(if refused.is_empty() {
                (ErrorClass::MissingResource, "the references have no passage to read".into())
            } else {
                (ErrorClass::AccessDenied, format!("not authorised to read {}", refused.join(", ")))
            });
        }
        for s in &found {
            let first: String = s.text.lines().next().unwrap_or("").chars().take(160).collect();
            let name = s.symbol.as_deref().unwrap_or("");
            self.remember(e, EntryKind::Observation, format!("[{}] {name}: {}", s.cite, first.trim()), 0.6);
        }
        let text = found.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n");
        if !refused.is_empty() {
            f.notes.push(format!("select_reference: not authorised to read {}", refused.join(", ")));
        }
        f.found.extend(found);
        Ok(text)
    }

    /// Drafts the reply with the rules brain instead of the model, saying why in the decision.
    fn draft_by_rules(&self, f: &mut Work, why: String) {
        let hints = self.refs.hint(self.args.enricher.as_deref());
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
        let hints = self.refs.hint(self.args.enricher.as_deref());
        let ctx = self.respond_context(f, &hints);
        let input = ctx.reply();
        let (_, pieces) = reply::ground(&input);
        // A draft made with an adapter trained on the topic carries what the persona studied:
        // like a model that knows things, it may answer without material.
        let open = self.args.open_answers || f.memory.adapter.is_some();
        let finding = reply::check_draft(&input, &pieces, draft, open)?;
        Some((finding, RulesBrain.respond(&ctx)))
    }

    /// The model's draft for the step of `task` (or why there is none).
    pub(super) fn on_drafted(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        let Some(mut f) = self.phase.take_work(task) else {
            // The event is over (the persona restarted meanwhile): only the grant is left.
            self.args.scheduler.done(task);
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
            self.args.scheduler.done(task);
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
