//! Intake and gate: an event from the inbox through the enrichment pipeline and the gate
//! chain, turn-taking in shared rooms, and the decision journaled at the end.

use std::collections::BTreeSet;

use mindfleet_core::config::BrainKind;
use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::llm::{Classification, LlmFailure};
use mindfleet_core::messages::{Claim, Delivery, PersonaCommit, Turn};
use mindfleet_core::record::{Decision, EntryKind, Preoccupation, Verdict};
use mindfleet_core::refs::{Enrichment, RefMatch, Via};
use mindfleet_core::sched::TaskId;
use mindfleet_core::team::suitability;

use crate::gate::{
    ECHO_WINDOW_US, GateDecision, GateState, PriorityInput, SPOKE_WINDOW_US, explain, fast_path, keyword_hits,
    named_elsewhere, priority, score, thermal,
};
use crate::mind::{Activity, Update};

use super::phase::{Gated, Phase, PlanEnd, Seen, TaskFor};
use super::{DONE_KEPT, Effect, Enrich, GATE_TOKENS_RESERVED, Lifecycle, TURN_RETRIES, Timer};

impl Lifecycle {
    pub(super) fn spoke_recently(&self, room: &str, now: i64) -> bool {
        self.snapshot.spoke_in.get(room).is_some_and(|t| now - t < SPOKE_WINDOW_US)
    }

    pub(super) fn gate_state(&mut self, event: &Event, now: i64) -> GateState {
        let room = event.room.as_str();
        let seen = self.persona_msgs.get_mut(room).map_or(0, |q| {
            while q.front().is_some_and(|t| now - t > ECHO_WINDOW_US) {
                q.pop_front();
            }
            q.len()
        });
        let own = self.snapshot.spoke_in.get(room).is_some_and(|t| now - t <= ECHO_WINDOW_US);
        let s = &self.snapshot;
        GateState {
            mood: s.mood,
            dormant: s.dormant,
            load: s.cognitive_load,
            capacity: s.available_capacity,
            focus_intensity: if s.focus.activity == "idle" { 0.0 } else { s.focus.intensity },
            same_domain: s.focus.domain == event.domain,
            recent_persona_msgs: seen + usize::from(own),
            keyword_hits: keyword_hits(&event.text, &self.setup.config.expertise),
        }
    }

    pub(super) fn on_deliver(&mut self, d: Delivery) {
        if self.is_done(d.seq) {
            return;
        }
        let now = self.now;
        if d.event.sender_kind == SenderKind::Persona && d.event.from != *self.name {
            let q = self.persona_msgs.entry(d.event.room.clone()).or_default();
            q.push_back(d.event.ts_us.min(now));
            if q.len() > 64 {
                q.pop_front();
            }
        }
        let spoke = self.spoke_recently(&d.event.room, now);
        self.emit(Effect::Push(d, spoke));
    }

    pub(super) fn on_next(&mut self, d: Delivery, backlog: usize) {
        if self.is_done(d.seq) {
            if !self.busy() {
                self.emit(Effect::Pull);
            }
            return;
        }
        if self.busy() {
            // A hand-over from an inbox that restarted meanwhile: back in the queue it goes.
            self.emit(Effect::Return(d));
            return;
        }
        self.emit(Effect::Mark(d.seq));
        self.emit(Effect::Taken(d.event.clone()));
        if self.setup.references.is_some() {
            // The pipeline first: what the event calls for is known before the gate.
            let (seq, text) = (d.seq, d.event.text.clone());
            self.phase = Phase::Enriching { delivery: d, backlog };
            self.emit(Effect::Enrich { of: Enrich::Event(seq), text });
            return;
        }
        self.gate(d, backlog);
    }

    /// What the event of delivery `seq` calls for: references it names are selected at once;
    /// then the gate.
    pub(super) fn on_enriched(&mut self, seq: u64, enrichment: Enrichment) {
        let Some((d, backlog)) = self.phase.take_enriched(seq) else { return };
        self.take_matches(&d.event.id, "event", enrichment);
        self.gate(d, backlog);
    }

    /// Records what a text of the current event called for (logging each match), and selects
    /// the references it names, with those they lead to; returns the new matches.
    pub(super) fn take_matches(&mut self, event_id: &str, stage: &str, enrichment: Enrichment) -> Vec<RefMatch> {
        if self.setup.references.is_none() {
            return Vec::new();
        }
        if let Some(why) = &enrichment.semantic_off
            && self.refs.semantic_off.as_ref() != Some(why)
        {
            tracing::warn!(persona = %self.name, %why, "semantic reference matching is off: tags and @id only");
        }
        let fresh = self.refs.note(enrichment);
        self.log_matches(event_id, stage, &fresh);
        let named: Vec<RefMatch> = fresh.iter().filter(|m| m.via == Via::Id).cloned().collect();
        self.select_all(event_id, named);
        fresh
    }

    /// Selects each of `chosen` (authorising its path, keeping the choice in storage) and then
    /// what the newly selected ones lead to, breadth first.
    pub(super) fn select_all(&mut self, event_id: &str, chosen: Vec<RefMatch>) {
        let Some(refs) = self.setup.references.clone() else { return };
        let mut new_ids = Vec::new();
        for m in chosen {
            if self.refs.select(&refs.catalog, m.clone()) {
                self.emit(Effect::KeepReference(m.clone()));
                new_ids.push(m.id);
            }
        }
        if new_ids.is_empty() {
            return;
        }
        let known: BTreeSet<String> =
            self.refs.selected.keys().chain(self.refs.current.iter().map(|m| &m.id)).cloned().collect();
        let linked = refs.discover(&new_ids, &known);
        self.log_matches(event_id, "linked", &linked);
        self.refs.matches += linked.len() as u64;
        self.refs.current.extend(linked.iter().cloned());
        for m in linked {
            if self.refs.select(&refs.catalog, m.clone()) {
                self.emit(Effect::KeepReference(m));
            }
        }
    }

    pub(super) fn log_matches(&self, event_id: &str, stage: &str, matches: &[RefMatch]) {
        for m in matches {
            tracing::info!(
                persona = %self.name, event = event_id, stage, reference = %m.id, via = m.via.as_str(),
                score = m.score, matched = ?m.matched, "reference matched"
            );
        }
    }

    /// The gate chain on an event: the fast path and the thermal stage inline, else the
    /// brain's judgement as a task.
    pub(super) fn gate(&mut self, d: Delivery, backlog: usize) {
        let now = self.now;
        let p = priority(&PriorityInput {
            event: &d.event,
            persona: &self.name,
            expertise: &self.setup.config.expertise,
            now_us: now,
            spoke_recently: self.spoke_recently(&d.event.room, now),
        });
        self.emit(Effect::TakeIn { delivery: d.clone(), importance: p });
        let state = self.gate_state(&d.event, now);
        let decided = fast_path(&d.event, &self.name, p, &state).or_else(|| thermal(p, &state));
        let seen = Seen { delivery: d, backlog, priority: p, state };
        // A message that names somebody else is not put to the model: its turn goes to whom it
        // names, and the scorer decides as it does when the model is unsure.
        let decided = decided.or_else(|| {
            (self.setup.config.brain == BrainKind::Local && named_elsewhere(&seen.delivery.event, &self.name)).then(
                || GateDecision {
                    note: "names someone else: judged by rules, no model question".into(),
                    ..score(p, &seen.state)
                },
            )
        });
        match decided {
            Some(gate) => self.decided(seen.decided(gate)),
            None => {
                let e = seen.delivery.event.clone();
                let mut t = self.task_for(&e, self.class_of(&e), p, "gate");
                if self.setup.config.brain == BrainKind::Local {
                    // The model judges: an inference slot, reserving what the question takes.
                    t = t.inference(GATE_TOKENS_RESERVED);
                }
                self.phase = Phase::Judging { seen, task: t.id };
                self.submit(t, TaskFor::Event);
            }
        }
    }

    /// The gate chain decided: take part in turn-taking, engage, or finish.
    pub(super) fn decided(&mut self, mut gated: Gated) {
        if self.deferrals.taking(gated.seen.delivery.seq).is_some() {
            Self::decide_taken_up(&gated.seen.delivery, &mut gated.gate);
        }
        let d = &gated.seen.delivery;
        // An undirected message that several personas got: the room's coordinator decides
        // who answers (every receiver claims or passes, so it knows when all have spoken).
        if d.audience > 1 && d.event.persona.is_none() {
            let claim = self.claim(&gated);
            // (A claim the coordinator cannot be sent comes back as `CoordinatorGone`.)
            self.emit(Effect::Claim(Box::new(claim.clone())));
            // A pass on a persona message is final: nobody is assigned one that nobody claims,
            // so there is no turn to wait for (waiting would hold up this persona's next events,
            // and, through their claims, other personas' turns).
            if !claim.wants && !claim.mentioned && !claim.from_human {
                self.finish(gated, None);
                return;
            }
            let id = d.event.id.clone();
            self.phase = Phase::Waiting { gated, claim: Box::new(claim) };
            let after = self.setup.turn_timeout;
            self.emit(Effect::After { after, timer: Timer::TurnOverdue(id) });
            return;
        }
        if gated.wants() {
            self.engage(gated);
        } else {
            self.finish(gated, None);
        }
    }

    /// The claim on a gated event for the room's coordinator: whether the persona wants the
    /// turn, and how sure and suited it is.
    fn claim(&self, gated: &Gated) -> Claim {
        let (d, gate, p) = (&gated.seen.delivery, &gated.gate, gated.seen.priority);
        let e = &d.event;
        let c = &self.setup.config;
        Claim {
            event_id: e.id.clone(),
            room: e.room.clone(),
            persona: self.name.clone(),
            // The actor's ref goes in when the claim is sent.
            actor: None,
            node: None,
            wants: gated.wants(),
            mentioned: gate.rule == "mention",
            named: !e.mentions.is_empty() || e.persona.is_some(),
            confidence: if gate.stage == "model" { gate.score } else { p },
            // Dormant: never assigned a message nobody claimed.
            suitability: if self.snapshot.dormant {
                0.0
            } else {
                suitability(&self.snapshot, &c.domains, &e.domain, p, &e.text)
            },
            // A deferral taken up claims late, alone: the others answered long ago.
            audience: if self.deferrals.taking(d.seq).is_some() { 1 } else { d.audience },
            from_human: e.sender_kind == SenderKind::Human,
            retry: 0,
            seq: d.seq,
        }
    }

    /// The coordinator has not answered the claim on `event_id` in time. While it runs, the
    /// claim goes again (a restarted coordinator forgot it; a busy one answers it once): a
    /// persona that went ahead on its own would answer a message somebody else holds. Only
    /// a coordinator that stays gone leaves the persona to its own verdict.
    pub(super) fn on_turn_overdue(&mut self, event_id: String) {
        let Some((_, claim)) = self.phase.waiting_mut(&event_id) else { return };
        claim.retry += 1;
        tracing::warn!(persona = %self.name, event = %event_id, retry = claim.retry, "the coordinator has not answered the claim: sent again");
        if claim.retry <= TURN_RETRIES {
            // (A claim the coordinator cannot be sent comes back as `CoordinatorGone`.)
            let claim = Box::new(claim.clone());
            self.emit(Effect::Claim(claim));
            let after = self.setup.turn_timeout;
            self.emit(Effect::After { after, timer: Timer::TurnOverdue(event_id) });
        } else {
            self.go_on_alone(&event_id);
        }
    }

    /// No coordinator answers: the persona follows its own gate.
    pub(super) fn go_on_alone(&mut self, event_id: &str) {
        let Some((gated, _)) = self.phase.waiting_mut(event_id) else { return };
        let granted = gated.wants();
        let reason = "no coordinator answered: the persona's own verdict".into();
        self.on_turn(Turn { event_id: event_id.to_string(), granted, assigned: false, reason, retake: None });
    }

    /// The coordinator's answer: go ahead, stay silent, or take a message nobody claimed.
    pub(super) fn on_turn(&mut self, t: Turn) {
        let Some(gated) = self.phase.take_waiting(&t.event_id) else { return self.on_passed_turn(t) };
        match gated.turn(&t) {
            (gated, true) => self.engage(gated),
            (gated, false) => self.finish(gated, None),
        }
    }

    /// The model's label scores for the engagement question of `task`.
    pub(super) fn on_judged(&mut self, task: TaskId, answer: Result<Classification, LlmFailure>) {
        let Some(seen) = self.phase.take_judged(task) else {
            self.done_task(task);
            return;
        };
        let gate = match answer {
            Ok(c) => {
                let tokens: usize = c.tokens_in + c.scores.iter().map(|s| s.tokens).sum::<usize>();
                self.done_with_tokens(task, tokens as u32);
                self.brain.judge_answer(&c.scores, seen.priority, &seen.state)
            }
            Err(e) => {
                self.done_task(task);
                GateDecision {
                    note: format!("model failed ({e}): judged by rules"),
                    ..score(seen.priority, &seen.state)
                }
            }
        };
        self.decided(seen.decided(gate));
    }

    /// Journals the decision (with the reply and plan) through the admin, updates self-state
    /// and memory, and asks for the next event.
    pub(super) fn finish(&mut self, gated: Gated, plan: Option<PlanEnd>) {
        let mut decision = self.decision(&gated, plan.as_ref());
        self.report_turn(&gated, plan.as_ref(), &decision.reason);
        let Gated { seen: Seen { delivery: d, backlog, priority: p, .. }, gate } = gated;
        let e = &d.event;
        let failed = plan.as_ref().is_some_and(|end| end.failed);
        let (record, reply) = match plan {
            Some(end) => (Some(end.record), end.reply),
            None => (None, None),
        };
        let mut activity = Activity {
            event_id: e.id.clone(),
            verdict: gate.verdict.as_str().into(),
            reason: decision.reason.clone(),
            backlog,
            failed,
            ..Default::default()
        };
        let summary: String = e.text.chars().take(160).collect();
        // Taken up (decided again): no longer deferred.
        self.taken_up(d.seq);
        let mut defer = None;
        match gate.verdict {
            Verdict::Engage => {
                activity.completed = true;
                activity.thought = Some(format!("{} asked in #{}: {summary}", e.from, e.room));
                activity.spoke_in = reply.as_ref().map(|(o, _)| o.room.clone());
                self.remember(e, EntryKind::Observation, format!("{} in #{}: {summary}", e.from, e.room), p);
            }
            Verdict::Defer => {
                let concern = Preoccupation {
                    concern: format!("{} in #{}: {summary}", e.from, e.room),
                    priority: p,
                    domain: e.domain.clone(),
                    event_id: e.id.clone(),
                    created_us: self.now,
                };
                defer = self.keep_deferred(&d, concern, &mut decision.reason);
                if defer.is_none() {
                    // No room left: let go now, and journaled so.
                    decision.verdict = Verdict::Ignore;
                }
                self.remember(
                    e,
                    EntryKind::Question,
                    format!("deferred: {} in #{}: {summary}", e.from, e.room),
                    p * 0.8,
                );
            }
            _ => {}
        }
        self.emit(Effect::SelfState(Update::Activity(Box::new(activity))));
        let commit = Box::new(PersonaCommit {
            persona: self.name.clone(),
            seq: d.seq,
            accepted_us: e.accepted_us,
            decision,
            reply,
            plan: record,
            // Conversation memory's message of the event goes in when it is committed.
            said: None,
            defer,
            recorded: None,
        });
        self.emit(Effect::Commit { commit, said: true });
        self.done.push_back(d.seq);
        if self.done.len() > DONE_KEPT {
            self.done.pop_front();
        }
        self.emit(Effect::Mark(0));
        // A parked plan whose approval was decided goes on before the next event.
        if self.resume_ready() {
            return;
        }
        self.emit(Effect::Pull);
        self.emit(Effect::Idle);
        self.tend_deferred();
    }

    /// The decision as journaled: the gate's verdict, the reason (with how the plan went), and
    /// the numbers it was decided on.
    fn decision(&mut self, gated: &Gated, plan: Option<&PlanEnd>) -> Decision {
        let (e, gate, state, p) = (&gated.seen.delivery.event, &gated.gate, &gated.seen.state, gated.seen.priority);
        let mut reason = explain(gate, p, state);
        if let Some(t) = self.deferrals.taking(gated.seen.delivery.seq) {
            let waited = (self.now - t.since_us).max(0) as f64 / 1e6;
            reason = format!("taking up deferred (deferred {waited:.0} s ago): {reason}");
        }
        if let Some(end) = plan
            && let Some(ev) = &end.record.evaluation
        {
            let outcome = if ev.success { "succeeded" } else { "failed" };
            reason = format!("{reason}; plan {outcome} after {} adjustments", end.record.adjustments.len());
            for n in &end.notes {
                reason = format!("{reason}; {n}");
            }
        }
        Decision {
            event_id: e.id.clone(),
            verdict: gate.verdict,
            reason,
            by: gate.by(),
            priority: p,
            numbers: vec![
                ("priority".into(), p),
                ("threshold".into(), gate.threshold),
                ("score".into(), gate.score),
                ("load".into(), state.load),
                ("capacity".into(), state.capacity),
                ("focus_intensity".into(), state.focus_intensity),
                ("recent_persona_msgs".into(), state.recent_persona_msgs as f64),
            ],
            at_us: self.now,
            references: self.refs.finish(&e.id),
            room: e.room.clone(),
        }
    }
}
