//! The lifecycle's effects carried out: the one place where what the lifecycle decided meets
//! the actors, storage and timers. An effect with an answer the persona has at once (a claim
//! that could not be sent, working memory's entries, the redundancy check) gives its input
//! back, handled before the next message; one asked off the loop casts its input back.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mindfleet_cognition::history;
use mindfleet_core::event::new_event_id;
use mindfleet_core::knowledge::{IndexMsg, RagError, RagRequest, SearchRequest, Source};
use mindfleet_core::llm::{Classification, LlmFailure, LlmMsg};
use mindfleet_core::messages::{AdminMsg, CoordinatorMsg, PersonaCommit, Recorded, Retake};
use mindfleet_core::record::ErrorClass;
use mindfleet_core::sched::{Task, TaskId};
use mindfleet_core::time::now_us;
use mindfleet_core::tools::{NOT_NEEDED, ToolAnswer, ToolCall, ToolFailure, ToolsMsg};
use mindfleet_store::Reopened;
use ractor::{ActorRef, RpcReplyPort, call_t};

use super::lifecycle::{Ask, Effect, Enrich, Input, Repeat, TaskSpec};
use super::{
    CHILD_CALL_MS, ConversationArgs, KNOWLEDGE_CHUNKS, Own, PersonaState, ROOM_LINES, SEARCH_CALL_MS,
    TOOL_ANSWER_SLACK_MS,
};
use crate::inbox::InboxMsg;
use crate::references;
use crate::self_state::SelfStateMsg;
use crate::working_memory::MemoryMsg;

/// How often a passed turn asks storage again for a delivery whose finish is not committed yet.
const REOPEN_TRIES: u32 = 20;
/// How long it waits between two tries.
const REOPEN_WAIT: Duration = Duration::from_millis(100);
/// Entries of recorded history held before they go to storage without a commit to carry them.
const RECORDED_HELD: u64 = 256;

impl PersonaState {
    /// Hands `input` to the lifecycle and carries its effects out, in order; the inputs they
    /// give back are handled in turn.
    pub(super) async fn feed(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let now = now_us();
            if let Some(r) = &mut self.recorded {
                r.fed(now, &input, self.life.snapshot());
            }
            for effect in self.life.handle(input, now) {
                inputs.extend(self.carry_out(effect).await);
            }
        }
        if self.recorded.as_ref().is_some_and(|r| r.held() >= RECORDED_HELD) {
            self.send_recorded();
        }
    }

    /// Sends the entries of recorded history held to storage, packed in one row, after the
    /// commits sent before (both go through the admin, in order).
    pub(super) fn send_recorded(&mut self) {
        if let Some(r) = self.recorded.as_mut().filter(|r| r.held() > 0) {
            let batch = r.take();
            let _ = self.args.admin.cast(AdminMsg::Record(self.name.clone(), batch));
        }
    }

    async fn carry_out(&mut self, effect: Effect) -> Option<Input> {
        match effect {
            Effect::Push(d, spoke) => drop(self.inbox.actor.cast(InboxMsg::Push(d, spoke))),
            Effect::Return(d) => drop(self.inbox.actor.cast(InboxMsg::Return(d))),
            Effect::Pull => self.pull(),
            Effect::Mark(seq) => self.args.marker.store(seq, Ordering::SeqCst),
            Effect::Taken(e) => {
                if self.args.faults.text_triggers(&e.text) {
                    panic!("injected fault: persona {} panics on event {}", self.name, e.id);
                }
            }
            Effect::Enrich { of, text } => {
                let enricher = self.args.enricher.clone()?;
                let me = self.myself.clone();
                tokio::spawn(async move {
                    let enrichment = enricher.enrich(&text).await;
                    let input = match of {
                        Enrich::Event(seq) => Input::Enriched { seq, enrichment },
                        Enrich::Step(task) => Input::StepEnriched { task, enrichment },
                    };
                    let _ = me.cast(Own::Life(input).into());
                });
            }
            Effect::KeepReference(m) => self.args.storage.select_reference(self.name.clone(), m),
            Effect::Submit(spec) => self.args.scheduler.submit(self.task(spec)),
            Effect::Done { task, tokens: None } => self.args.scheduler.done(task),
            Effect::Done { task, tokens: Some(tokens) } => self.args.scheduler.done_with_tokens(task, tokens),
            Effect::Claim(mut claim) => {
                claim.actor = Some(self.myself.clone());
                let event_id = claim.event_id.clone();
                if self.args.coordinator.cast(CoordinatorMsg::Claim(claim)).is_err() {
                    return Some(Input::CoordinatorGone(event_id));
                }
            }
            Effect::Report(report) => drop(self.args.coordinator.cast(CoordinatorMsg::Report(report))),
            Effect::After { after, timer } => {
                self.myself.send_after(after, move || Own::timer(timer).into());
            }
            Effect::SelfState(u) => {
                if let Some(r) = &mut self.recorded {
                    r.changed(&u);
                }
                drop(self.self_state.actor.cast(SelfStateMsg::Apply(u)))
            }
            Effect::Remember(draft) => drop(self.memory.actor.cast(MemoryMsg::Store(draft))),
            Effect::Llm { task, ask } => self.ask_llm(task, ask),
            Effect::RecallWorkingMemory { task, domain, query } => {
                let got = call_t!(
                    self.memory.actor,
                    |reply| MemoryMsg::Recall { domain, query, limit: 3, reply },
                    CHILD_CALL_MS
                );
                return Some(Input::WorkingMemory { task, answer: got.map_err(|e| e.to_string()) });
            }
            Effect::RecallConversation { task, query } => self.recall_conversation(task, query),
            Effect::ConversationRecalled { seqs, degraded } => self.on_conversation_recalled(seqs, degraded),
            Effect::Search { task, query } => self.search(task, query),
            Effect::CallTool { task, call } => return self.call_tool(task, *call),
            Effect::RecallLongTerm(event) => self.recall_long_term(event),
            Effect::ReadReferences { task, ids, text, authorised } => {
                let enricher = self.args.enricher.clone()?;
                let read = ids
                    .into_iter()
                    .filter_map(|id| {
                        let r = enricher.catalog().get(&id)?;
                        let (passage, denied) = references::excerpt(r, &text, &authorised);
                        Some((passage, denied, id))
                    })
                    .collect();
                return Some(Input::ReferencesRead { task, read });
            }
            Effect::CheckRedundancy { task, event, draft } => {
                let r = self.args.redundancy.clone()?;
                let answer = crate::redundancy::check(&r, &self.args.storage, &event, &draft).await.map(|repeat| {
                    repeat.map(|repeat| Repeat {
                        similarity: repeat.similarity,
                        threshold: r.threshold,
                        reason: repeat.reason(r.threshold),
                    })
                });
                return Some(Input::RedundancyChecked { task, answer });
            }
            Effect::NoteStudy { task, topic, why, event_id } => {
                let noted = self.study.note(&topic, &why, now_us(), false);
                if noted && task.is_none() {
                    tracing::info!(persona = %self.name, %topic, why, event = %event_id, "knowledge gap noted for study");
                }
                return task.map(|task| Input::StudyNoted { task, topic, noted });
            }
            Effect::TakeIn { delivery, importance } => self.take_in(&delivery, importance, now_us()),
            Effect::Commit { commit, said } => self.commit(commit, said),
            Effect::Reopen { event_id, retake } => self.reopen(event_id, retake),
            Effect::Idle => self.study_next(),
        }
        None
    }

    /// The scheduler task of `spec`, owned by this persona.
    fn task(&self, spec: TaskSpec) -> Task {
        let mut t = self.own_task(spec.class, spec.priority, spec.label).with_id(spec.id);
        t.slot = spec.slot;
        t.max_tokens = spec.max_tokens;
        t.paced = spec.paced;
        t.over_budget = spec.over_budget;
        t.tool = spec.tool;
        if let Some(room) = &spec.room {
            t = t.in_room(room);
        }
        t
    }

    /// Commits a decision: its reply gets its event's id, and (`said`) the event finished the
    /// message conversation memory took in of it.
    fn commit(&mut self, mut commit: Box<PersonaCommit>, said: bool) {
        // The history up to it rides in it, with the digest a replay checks it by.
        commit.recorded = self.recorded.as_mut().map(|r| Recorded { digest: history::digest(&commit), rows: r.take() });
        if let Some((entry, event)) = commit.reply.as_mut() {
            let id = new_event_id();
            entry.event_id = id.clone();
            event.id = id;
        }
        if said {
            commit.said = self.taking_in.take().filter(|s| s.seq == commit.seq).map(|mut s| {
                // Embedded already when it is no longer waiting.
                s.embedded = self.convo.as_ref().is_some_and(|c| !c.waiting(s.seq));
                s
            });
        }
        let _ = self.args.admin.cast(AdminMsg::Commit(commit));
    }

    /// Asks the LLM for the lifecycle's `task` from a task of its own, and casts its answer
    /// back, so the persona handles other messages meanwhile.
    fn ask_llm(&self, task: TaskId, ask: Ask) {
        let Some(llm) = self.args.llm.clone() else { return };
        let me = self.myself.clone();
        match ask {
            Ask::Judge(job) => self.answer(
                llm,
                me,
                |reply| LlmMsg::Classify { job, reply },
                move |answer| Input::Judged { task, answer },
            ),
            Ask::Draft(job) => self.answer(
                llm,
                me,
                |reply| LlmMsg::Generate { job, reply },
                move |answer| Input::Drafted { task, answer },
            ),
            Ask::Lesson(job) => self.answer(
                llm,
                me,
                |reply| LlmMsg::Generate { job, reply },
                move |answer| Input::Evaluated { task, answer },
            ),
            Ask::ChooseTool(job) => self.answer(
                llm,
                me,
                |reply| LlmMsg::Classify { job, reply },
                move |answer| Input::ToolChosen { task, answer },
            ),
            Ask::Fill(job) => {
                self.answer(llm, me, |reply| LlmMsg::Fill { job, reply }, move |answer| Input::Filled { task, answer })
            }
            Ask::ToolTurn(job) => self.answer(
                llm,
                me,
                |reply| LlmMsg::ToolTurn { job, reply },
                move |answer| Input::ToolTurned { task, answer },
            ),
            Ask::ChoosePlan(choice) => {
                tokio::spawn(async move {
                    let mut answers: Vec<Classification> = Vec::new();
                    let mut scores = Vec::new();
                    // In turn, not together: an order is asked only when its answer could change
                    // the plan (a small model's pick of the first listed, the rules plan, settles
                    // it).
                    for (_, job) in &choice.orders {
                        let job = job.clone();
                        let answer = ractor::call!(llm, |reply| LlmMsg::Classify { job, reply })
                            .unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
                        match answer {
                            Ok(c) => {
                                scores.push(c.scores.clone());
                                answers.push(c);
                            }
                            Err(e) => return me.cast(Own::Life(Input::Planned { task, answer: Err(e) }).into()),
                        }
                        if choice.settled(&scores) {
                            break;
                        }
                    }
                    me.cast(Own::Life(Input::Planned { task, answer: Ok(answers) }).into())
                });
            }
        }
    }

    /// Sends the LLM `request` from a task of its own and casts its answer back as `answered`.
    fn answer<T: Send + 'static>(
        &self,
        llm: ActorRef<LlmMsg>,
        me: ActorRef<mindfleet_core::messages::PersonaMsg>,
        request: impl FnOnce(RpcReplyPort<Result<T, LlmFailure>>) -> LlmMsg + Send + 'static,
        answered: impl FnOnce(Result<T, LlmFailure>) -> Input + Send + 'static,
    ) {
        tokio::spawn(async move {
            let answer = ractor::call!(llm, request).unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
            let _ = me.cast(Own::Life(answered(answer)).into());
        });
    }

    /// What conversation memory recalls for the recall step of `task`, and the room's latest
    /// messages, off the persona's loop.
    fn recall_conversation(&self, task: TaskId, q: mindfleet_core::conversation::RecallQuery) {
        let Some(ConversationArgs { index, config, .. }) = self.args.conversation.clone() else { return };
        let (storage, weights, wait) = (self.args.storage.clone(), config.weights, config.recall_wait);
        let (me, name) = (self.myself.clone(), self.name.clone());
        let room = q.room.clone().unwrap_or_default();
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
            let _ = me.cast(Own::Life(Input::Recalled { task, recall, room }).into());
        });
    }

    /// The knowledge search of the step of `task`, off the persona's loop (the index may be
    /// busy with a long indexing run).
    fn search(&self, task: TaskId, query: String) {
        let Some(index) = self.args.index.clone() else { return };
        let req = RagRequest::Search(SearchRequest::new(query, KNOWLEDGE_CHUNKS));
        let me = self.myself.clone();
        tokio::spawn(async move {
            let answer = match call_t!(index, IndexMsg::Request, SEARCH_CALL_MS, Box::new(req)) {
                Ok(Ok(v)) => Ok(Source::relevant_hits(&v)),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(RagError::Unavailable(format!("the index did not answer: {e}"))),
            };
            let _ = me.cast(Own::Life(Input::Searched { task, answer }).into());
        });
    }

    /// A tool call, off the loop (answered by `ToolAnswered`). A call parked for approval is
    /// followed until its approval is decided (`ApprovalAnswered`): the plan then asks again.
    fn call_tool(&self, task: TaskId, call: ToolCall) -> Option<Input> {
        let Some(tools) = self.args.tools.clone() else {
            let failure = ToolFailure {
                class: ErrorClass::MissingResource,
                message: "no tool servers in this fleet".into(),
                for_model: None,
                took_ms: 0,
            };
            let answer = ToolAnswer::Ran { result: Err(failure), approval: NOT_NEEDED.into(), replayed: false };
            return Some(Input::ToolAnswered { task, answer });
        };
        let me = self.myself.clone();
        let wait = call.timeout_ms + TOOL_ANSWER_SLACK_MS;
        tokio::spawn(async move {
            let (tool, id) = (call.tool.clone(), call.id.clone());
            let answer = match call_t!(tools, ToolsMsg::Call, wait, Box::new(call)) {
                Ok(a) => a,
                Err(e) => {
                    let failure = ToolFailure {
                        class: ErrorClass::Timeout,
                        message: format!("{tool}: the tool host did not answer: {e}"),
                        for_model: None,
                        took_ms: wait,
                    };
                    ToolAnswer::Ran { result: Err(failure), approval: NOT_NEEDED.into(), replayed: false }
                }
            };
            let parked = matches!(answer, ToolAnswer::Parked(_));
            let _ = me.cast(Own::Life(Input::ToolAnswered { task, answer }).into());
            if parked {
                // Whatever the answer (or a tool host gone meanwhile), the plan asks again and
                // hears where the approval stands.
                let _ = ractor::call!(tools, ToolsMsg::Await, id.clone());
                let _ = me.cast(Own::Life(Input::ApprovalAnswered(id)).into());
            }
        });
        None
    }

    /// A turn passed to this persona after it finished the event: storage makes the delivery
    /// pending again and the inbox queues it.
    fn reopen(&self, event_id: String, retake: Retake) {
        let (storage, inbox, name) = (self.args.storage.clone(), self.inbox.actor.clone(), self.name.clone());
        tokio::spawn(async move {
            for _ in 0..REOPEN_TRIES {
                match storage.reopen(name.clone(), retake.seq).await {
                    Ok(Reopened::Delivery(mut d)) => {
                        d.audience = retake.audience.max(2);
                        let _ = inbox.cast(InboxMsg::Return(d));
                        return;
                    }
                    // Its own finish of the event is still on its way to storage.
                    Ok(Reopened::StillPending) => tokio::time::sleep(REOPEN_WAIT).await,
                    Ok(Reopened::Gone) => break,
                    Err(e) => {
                        tracing::warn!(persona = %name, event = %event_id, error = %e, "a passed turn could not be taken up");
                        return;
                    }
                }
            }
            tracing::warn!(persona = %name, event = %event_id, "a passed turn could not be taken up: the delivery is not finished or gone");
        });
    }
}
