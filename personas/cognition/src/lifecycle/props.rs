//! Property tests of the lifecycle alone: random interleavings of deliveries (and their
//! duplicates), grants (run, on the rules brain, skipped for budget, and again), answers (and failures),
//! timers, turns, self-states and restarts, with no actor, runtime or clock: a model of the
//! world answers the effects as the persona's actor and the actors around it would. Each
//! invariant is checked on 1,000 cases.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use mindfleet_core::llm::{Classification, Generation, LabelScore, LlmFailure, Stop};
use mindfleet_core::messages::Turn;
use mindfleet_core::record::{Action, Focus, StepState, Verdict};
use mindfleet_core::sched::{ID_BLOCK, Outcome, SkipReason};
use proptest::prelude::*;

use super::*;
use mindfleet_core::llm::{FillJob, Filled, ToolCallAsked, ToolTurn};
use mindfleet_core::tools::{NOT_NEEDED, ToolCall, ToolFailure, ToolResult};

/// One thing that happens to the persona.
#[derive(Debug, Clone)]
enum Step {
    /// A message for it: from a human or a persona, to it alone or to a shared room, naming it
    /// or not, one of a few texts.
    Deliver {
        human: bool,
        shared: bool,
        mention: bool,
        text: u8,
    },
    /// A delivery again (a redelivery after a restart, a duplicate).
    Redeliver(u8),
    /// The inbox hands over its next event, when asked for one.
    Next,
    /// The scheduler grants a task (with an injected failure of its step when `fail`).
    Grant {
        pick: u8,
        fail: bool,
    },
    /// A grant of a task granted before comes again (a duplicate).
    Regrant(u8),
    /// An answer to what it asked off its loop comes (a failure when not `ok`).
    Answer {
        pick: u8,
        ok: bool,
    },
    Timer(u8),
    /// The room's coordinator answers a claim (it assigns only a turn it grants).
    Turn {
        pick: u8,
        granted: bool,
        assigned: bool,
    },
    /// The coordinator is gone: a claim could not be sent.
    CoordinatorGone(u8),
    /// A new self-state: asleep or awake, focused or free.
    SelfState {
        dormant: bool,
        focused: bool,
    },
    /// Time passes, in seconds.
    Wait(u8),
    /// The persona fails and is started again (its inbox, timers and answers in flight lost).
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<bool>(), any::<bool>(), any::<bool>(), 0..TEXTS.len() as u8)
            .prop_map(|(human, shared, mention, text)| Step::Deliver { human, shared, mention, text }),
        1 => any::<u8>().prop_map(Step::Redeliver),
        4 => Just(Step::Next),
        6 => (any::<u8>(), prop::bool::weighted(0.15)).prop_map(|(pick, fail)| Step::Grant { pick, fail }),
        1 => any::<u8>().prop_map(Step::Regrant),
        5 => (any::<u8>(), prop::bool::weighted(0.8)).prop_map(|(pick, ok)| Step::Answer { pick, ok }),
        1 => any::<u8>().prop_map(Step::Timer),
        2 => (any::<u8>(), any::<bool>(), any::<bool>())
            .prop_map(|(pick, granted, assigned)| Step::Turn { pick, granted, assigned: granted && assigned }),
        1 => any::<u8>().prop_map(Step::CoordinatorGone),
        1 => (prop::bool::weighted(0.2), any::<bool>()).prop_map(|(dormant, focused)| Step::SelfState { dormant, focused }),
        1 => (1..120u8).prop_map(Step::Wait),
        1 => Just(Step::Restart),
    ]
}

/// A run: the persona's brain, whether the budget is spent, whether anything fails, and what
/// happens.
#[derive(Debug, Clone)]
struct Run {
    local: bool,
    budget_spent: bool,
    failures: bool,
    steps: Vec<Step>,
}

fn run() -> impl Strategy<Value = Run> {
    (any::<bool>(), prop::bool::weighted(0.3), any::<bool>(), prop::collection::vec(step(), 1..80))
        .prop_map(|(local, budget_spent, failures, steps)| Run { local, budget_spent, failures, steps })
}

const TEXTS: [&str; 5] = [
    "how do we deploy the service to staging?",
    "thanks, that worked",
    "what did ada say about the cache?",
    "the build is red again",
    "ok",
];
const ME: &str = "helper";

/// The world around one persona's lifecycle, as the lifecycle's effects make it.
struct World {
    life: Lifecycle,
    local: bool,
    budget_spent: bool,
    failures: bool,
    now: i64,
    restarts: u64,
    next_seq: u64,
    /// Every delivery made, by seq.
    deliveries: BTreeMap<u64, Delivery>,
    /// Those with a final decision committed.
    finished: BTreeSet<u64>,
    /// Those kept aside as deferrals (in storage).
    deferred: BTreeMap<u64, Deferral>,
    inbox: VecDeque<Delivery>,
    /// The inbox was asked for its next event.
    asked: bool,
    queued: Vec<TaskSpec>,
    /// Every task submitted, by id.
    specs: BTreeMap<TaskId, TaskSpec>,
    submitted: BTreeSet<TaskId>,
    granted: BTreeSet<TaskId>,
    /// Granted tasks that hold a slot until their `Done`.
    held: BTreeSet<TaskId>,
    answers: Vec<Input>,
    timers: Vec<Timer>,
    claims: Vec<String>,
    commits: Vec<PersonaCommit>,
    /// Every effect, in order.
    log: Vec<String>,
    broken: Vec<String>,
    /// The model's turns of native tool calling, in order (each the calls it asks for: tool and
    /// arguments); none left, it asks for none. And the turns asked.
    turns: VecDeque<Vec<(&'static str, &'static str)>>,
    asked_turns: Vec<ToolTurnJob>,
    /// What a tool call returns; the calls made.
    results: fn(&ToolCall) -> Result<ToolResult, ToolFailure>,
    made: Vec<ToolCall>,
    /// The local model's fills of a tool's arguments, in order (none left: it fails), and the
    /// fills asked.
    fills: VecDeque<&'static str>,
    asked_fills: Vec<FillJob>,
}

/// What every tool call returns unless a test says otherwise.
fn ok_result(_: &ToolCall) -> Result<ToolResult, ToolFailure> {
    Ok(result("ok"))
}

fn result(text: &str) -> ToolResult {
    ToolResult { text: text.into(), structured: None, cut: false, bytes: text.len(), took_ms: 1 }
}

fn setup(local: bool, first_task: TaskId) -> Setup {
    let brain = if local { "local" } else { "rules" };
    let toml = format!("[[persona]]\nname = \"{ME}\"\nrole = \"generalist assistant\"\nbrain = \"{brain}\"\n");
    let fleet = FleetConfig::from_toml(std::path::Path::new("fleet.toml"), &toml).expect("a valid fleet");
    Setup {
        config: Arc::new(fleet.personas[0].clone()),
        llm: local,
        index: false,
        conversation: false,
        references: None,
        redundancy: false,
        open_answers: false,
        personas: Arc::from(vec![ME.to_string(), "other".to_string()]),
        turn_timeout: std::time::Duration::from_secs(5),
        first_task,
        tools: false,
        native_tools: false,
    }
}

impl World {
    fn new(run: &Run) -> Self {
        let mut w = World {
            life: Lifecycle::new(setup(run.local, 1), Vec::new(), RefBook::default(), Vec::new()),
            local: run.local,
            budget_spent: run.budget_spent,
            failures: run.failures,
            now: 1_000_000_000_000,
            restarts: 0,
            next_seq: 1,
            deliveries: BTreeMap::new(),
            finished: BTreeSet::new(),
            deferred: BTreeMap::new(),
            inbox: VecDeque::new(),
            asked: false,
            queued: Vec::new(),
            specs: BTreeMap::new(),
            submitted: BTreeSet::new(),
            granted: BTreeSet::new(),
            held: BTreeSet::new(),
            answers: Vec::new(),
            timers: Vec::new(),
            claims: Vec::new(),
            commits: Vec::new(),
            log: Vec::new(),
            broken: Vec::new(),
            turns: VecDeque::new(),
            asked_turns: Vec::new(),
            results: ok_result,
            made: Vec::new(),
            fills: VecDeque::new(),
            asked_fills: Vec::new(),
        };
        w.feed(Input::Start);
        w
    }

    fn feed(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            for effect in self.life.handle(input, self.now) {
                self.log.push(format!("{effect:?}"));
                inputs.extend(self.answer(effect));
            }
        }
    }

    /// What the world does with an effect; the input it answers with at once, if any.
    fn answer(&mut self, effect: Effect) -> Option<Input> {
        match effect {
            Effect::Push(d, _) | Effect::Return(d) => self.inbox.push_back(d),
            Effect::Pull => self.asked = true,
            Effect::Submit(spec) => {
                if !self.submitted.insert(spec.id) {
                    self.broken.push(format!("task id {} given twice", spec.id));
                }
                self.specs.insert(spec.id, spec.clone());
                self.queued.push(spec);
            }
            Effect::Done { task, .. } => {
                if !self.granted.contains(&task) {
                    self.broken.push(format!("done of task {task}, never granted"));
                }
                self.held.remove(&task);
            }
            Effect::Claim(c) => self.claims.push(c.event_id),
            Effect::After { timer, .. } => self.timers.push(timer),
            Effect::Llm { task, ask } => {
                let input = match ask {
                    Ask::Judge(job) => Input::Judged { task, answer: Ok(classified(&job.labels)) },
                    Ask::ChoosePlan(choice) => {
                        let answers = choice.orders.iter().map(|(_, job)| classified(&job.labels)).collect();
                        Input::Planned { task, answer: Ok(answers) }
                    }
                    Ask::Draft(_) => {
                        Input::Drafted { task, answer: Ok(generated("We deploy with the staging script.")) }
                    }
                    Ask::Lesson(_) => Input::Evaluated { task, answer: Ok(generated("Check the script first.")) },
                    Ask::ChooseTool(job) => Input::ToolChosen { task, answer: Ok(classified(&job.labels)) },
                    Ask::Fill(job) => {
                        self.asked_fills.push(job);
                        let answer = match self.fills.pop_front() {
                            Some(text) => Ok(Filled {
                                value: serde_json::from_str(text).expect("a JSON fill"),
                                text: text.into(),
                                tokens_in: 30,
                                tokens_out: 8,
                                prompt_ms: 1.0,
                                gen_ms: 1.0,
                                trimmed: None,
                            }),
                            None => Err(LlmFailure::Failed("no model here".into())),
                        };
                        Input::Filled { task, answer }
                    }
                    Ask::ToolTurn(job) => {
                        self.asked_turns.push(job);
                        let calls = self.turns.pop_front().unwrap_or_default();
                        let calls = calls
                            .into_iter()
                            .enumerate()
                            .map(|(i, (name, arguments))| ToolCallAsked {
                                id: format!("call_{}_{i}", self.asked_turns.len()),
                                name: name.into(),
                                arguments: arguments.into(),
                            })
                            .collect();
                        Input::ToolTurned { task, answer: Ok(ToolTurn { calls, ..Default::default() }) }
                    }
                };
                self.answers.push(input);
            }
            Effect::RecallWorkingMemory { task, .. } => {
                return Some(Input::WorkingMemory { task, answer: Ok(Vec::new()) });
            }
            Effect::RecallConversation { task, .. } => {
                let recall = Ok(Recall { items: Vec::new(), degraded: None });
                self.answers.push(Input::Recalled { task, recall, room: Vec::new() });
            }
            Effect::Search { task, .. } => self.answers.push(Input::Searched { task, answer: Ok(Vec::new()) }),
            Effect::CallTool { task, call } => {
                let result = (self.results)(&call);
                self.made.push(*call);
                let answer = ToolAnswer::Ran { result, approval: NOT_NEEDED.into(), replayed: false };
                self.answers.push(Input::ToolAnswered { task, answer });
            }
            Effect::RecallLongTerm(e) => {
                let memory = Box::default();
                self.answers.push(Input::LongTermRecalled { event_id: e.id.clone(), memory, note: None });
            }
            Effect::ReadReferences { task, .. } => return Some(Input::ReferencesRead { task, read: Vec::new() }),
            Effect::CheckRedundancy { task, .. } => return Some(Input::RedundancyChecked { task, answer: Ok(None) }),
            Effect::NoteStudy { task, topic, .. } => {
                return task.map(|task| Input::StudyNoted { task, topic, noted: true });
            }
            Effect::Commit { commit, .. } => self.committed(*commit),
            Effect::Reopen { .. } => self.broken.push("a turn passed that no run passes".into()),
            Effect::Mark(_)
            | Effect::Taken(_)
            | Effect::Enrich { .. }
            | Effect::KeepReference(_)
            | Effect::Report(_)
            | Effect::SelfState(_)
            | Effect::Remember(_)
            | Effect::ConversationRecalled { .. }
            | Effect::TakeIn { .. }
            | Effect::Idle => {}
        }
        None
    }

    /// A commit, as storage takes it: a deferral kept aside, or the delivery's final decision.
    fn committed(&mut self, c: PersonaCommit) {
        let seq = c.seq;
        if !self.deliveries.contains_key(&seq) {
            self.broken.push(format!("a decision on seq {seq}, never delivered"));
        }
        if self.finished.contains(&seq) {
            self.broken.push(format!("a second final decision on seq {seq}: {:?}", c.decision.reason));
        }
        if let Some((reply, _)) = &c.reply {
            let engaged = c.decision.verdict == Verdict::Engage;
            let posted = c.plan.as_ref().is_some_and(|p| {
                p.plan.steps.iter().any(|s| s.action == Action::PostReply && s.state == StepState::Done)
            });
            if !engaged || !posted {
                self.broken.push(format!("a reply ({:?}) without an engaged plan that posted it", reply.text));
            }
        }
        match &c.defer {
            Some(d) => {
                self.deferred.insert(seq, d.clone());
            }
            None => {
                self.finished.insert(seq);
                self.deferred.remove(&seq);
            }
        }
        self.commits.push(c);
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Deliver { human, shared, mention, text } => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let d = delivery(seq, human, shared, mention, TEXTS[text as usize], self.now);
                self.deliveries.insert(seq, d.clone());
                self.feed(Input::Deliver(d));
            }
            Step::Redeliver(pick) => {
                let open: Vec<&Delivery> =
                    self.deliveries.values().filter(|d| !self.finished.contains(&d.seq)).collect();
                if let Some(d) = pick_of(&open, pick).cloned() {
                    self.feed(Input::Deliver(d.clone()));
                }
            }
            Step::Next => {
                if self.asked
                    && let Some(d) = self.inbox.pop_front()
                {
                    self.asked = false;
                    let backlog = self.inbox.len();
                    self.feed(Input::Next(d, backlog));
                }
            }
            Step::Grant { pick, fail } => {
                if self.queued.is_empty() {
                    return;
                }
                let spec = self.queued.remove(pick as usize % self.queued.len());
                self.grant(spec, fail && self.failures);
            }
            Step::Regrant(pick) => {
                let granted: Vec<TaskId> = self.granted.iter().copied().collect();
                if let Some(task) = pick_of(&granted, pick) {
                    let spec = self.specs[task].clone();
                    self.grant(spec, false);
                }
            }
            Step::Answer { pick, ok } => {
                if self.answers.is_empty() {
                    return;
                }
                let answer = self.answers.remove(pick as usize % self.answers.len());
                let answer = if ok || !self.failures { answer } else { failed(answer) };
                self.feed(answer);
            }
            Step::Timer(pick) => {
                if self.timers.is_empty() {
                    return;
                }
                let timer = self.timers.remove(pick as usize % self.timers.len());
                self.feed(match timer {
                    Timer::TurnOverdue(id) => Input::TurnOverdue(id),
                    Timer::DeferralsDue => Input::DeferralsDue,
                });
            }
            Step::Turn { pick, granted, assigned } => {
                if self.claims.is_empty() {
                    return;
                }
                let event_id = self.claims.remove(pick as usize % self.claims.len());
                let reason = "the coordinator's answer".into();
                self.feed(Input::Turn(Turn { event_id, granted, assigned, reason, retake: None }));
            }
            Step::CoordinatorGone(pick) => {
                if self.claims.is_empty() {
                    return;
                }
                let event_id = self.claims.remove(pick as usize % self.claims.len());
                self.feed(Input::CoordinatorGone(event_id));
            }
            Step::SelfState { dormant, focused } => self.feed(Input::SelfState(Box::new(state(dormant, focused)))),
            Step::Wait(secs) => self.now += i64::from(secs) * 1_000_000,
            Step::Restart => self.restart(),
        }
    }

    /// The scheduler's grant of `spec`: run, or (the budget spent) on the rules brain or
    /// skipped, as the task asks.
    fn grant(&mut self, spec: TaskSpec, fail: bool) {
        let outcome = match (self.budget_spent, spec.over_budget) {
            (false, _) => Outcome::Run,
            (true, _) if spec.class == Class::Urgent => Outcome::RulesOnly(SkipReason::HardBudget),
            (true, OverBudget::Skip) => Outcome::Skipped(SkipReason::HardBudget),
            (true, OverBudget::Rules | OverBudget::Queue) => Outcome::RulesOnly(SkipReason::HardBudget),
        };
        let grant = Grant {
            task: spec.id,
            slot: spec.slot,
            class: spec.class,
            waited_us: 0,
            outcome,
            deadline_missed: false,
            budget_left: if self.budget_spent { 0.0 } else { 1.0 },
        };
        self.granted.insert(spec.id);
        if outcome.holds_slot() {
            self.held.insert(spec.id);
        }
        // A fault injected on the step the grant runs, as the actor looks it up.
        let failure = self.life.step_run_by(&grant).filter(|_| fail).map(|_| ErrorClass::Timeout);
        self.feed(Input::Granted { grant, failure });
    }

    /// The persona fails and its supervisor starts it again: what storage kept (deferrals, the
    /// deliveries not finished) is all that is left; the scheduler frees its slots.
    fn restart(&mut self) {
        self.restarts += 1;
        let deferred: Vec<(Delivery, Deferral)> =
            self.deferred.iter().map(|(seq, k)| (self.deliveries[seq].clone(), k.clone())).collect();
        let first_task = (self.restarts + 1) * ID_BLOCK;
        self.life = Lifecycle::new(setup(self.local, first_task), Vec::new(), RefBook::default(), deferred);
        self.held.clear();
        self.answers.clear();
        self.timers.clear();
        self.claims.clear();
        self.asked = false;
        self.inbox = self
            .deliveries
            .values()
            .filter(|d| !self.finished.contains(&d.seq) && !self.deferred.contains_key(&d.seq))
            .cloned()
            .collect();
        self.feed(Input::Start);
    }

    /// Everything answered, granted, handed over and due, the persona free and awake, until
    /// nothing is left to do; `false` if it never settles.
    fn settle(&mut self) -> bool {
        self.feed(Input::SelfState(Box::new(state(false, false))));
        for _ in 0..10_000 {
            if !self.answers.is_empty() {
                let answer = self.answers.remove(0);
                self.feed(answer);
            } else if !self.claims.is_empty() {
                self.apply(&Step::Turn { pick: 0, granted: true, assigned: false });
            } else if !self.queued.is_empty() {
                let spec = self.queued.remove(0);
                self.grant(spec, false);
            } else if self.asked && !self.inbox.is_empty() {
                self.apply(&Step::Next);
            } else if !self.timers.is_empty() {
                self.apply(&Step::Timer(0));
            } else if !self.deferred.is_empty() {
                // Deferrals wait for time: past their time to live, they are dropped.
                self.now += 3_600_000_000;
                self.feed(Input::DeferralsDue);
            } else {
                return true;
            }
        }
        false
    }
}

fn pick_of<T>(v: &[T], pick: u8) -> Option<&T> {
    (!v.is_empty()).then(|| &v[pick as usize % v.len()])
}

fn delivery(seq: u64, human: bool, shared: bool, mention: bool, text: &str, now: i64) -> Delivery {
    let text = if mention { format!("@{ME} {text}") } else { text.to_string() };
    let mut e = EventInput {
        id: Some(format!("e{seq}")),
        domain: "chat".into(),
        room: "general".into(),
        from: if human { "ada".into() } else { "other".into() },
        text,
        ..Default::default()
    }
    .validate()
    .expect("a valid event");
    e.sender_kind = if human { SenderKind::Human } else { SenderKind::Persona };
    e.ts_us = now;
    e.accepted_us = now;
    Delivery { seq, event: Arc::new(e), crashes: 0, audience: if shared { 3 } else { 1 } }
}

fn state(dormant: bool, focused: bool) -> SelfView {
    let activity = if focused { "responding" } else { "idle" };
    let focus = Focus { activity: activity.into(), intensity: if focused { 0.8 } else { 0.0 }, ..Focus::default() };
    SelfView { dormant, focus, available_capacity: 1.0, ..SelfView::default() }
}

/// The model's label scores: the first label clearly ahead.
fn classified(labels: &[String]) -> Classification {
    let scores = labels
        .iter()
        .enumerate()
        .map(|(i, l)| LabelScore { label: l.clone(), logprob: -0.05 - 3.0 * i as f32, tokens: 1 })
        .collect();
    Classification { scores, tokens_in: 40 }
}

fn generated(text: &str) -> Generation {
    Generation {
        text: text.into(),
        tokens_in: 60,
        tokens_out: 8,
        prompt_ms: 1.0,
        gen_ms: 1.0,
        ttft_ms: 1.0,
        stop: Stop::Eos,
        trimmed: None,
        logprobs: Vec::new(),
    }
}

/// The same answer, failed.
fn failed(answer: Input) -> Input {
    let down = || LlmFailure::Failed("the model failed".into());
    match answer {
        Input::Judged { task, .. } => Input::Judged { task, answer: Err(down()) },
        Input::Planned { task, .. } => Input::Planned { task, answer: Err(down()) },
        Input::Drafted { task, .. } => Input::Drafted { task, answer: Err(down()) },
        Input::Evaluated { task, .. } => Input::Evaluated { task, answer: Err(down()) },
        Input::Searched { task, .. } => Input::Searched { task, answer: Err(RagError::Unavailable("down".into())) },
        Input::Recalled { task, room, .. } => Input::Recalled { task, recall: Err("down".into()), room },
        Input::LongTermRecalled { event_id, memory, .. } => {
            Input::LongTermRecalled { event_id, memory, note: Some("long-term memory unreadable".into()) }
        }
        other => other,
    }
}

/// The world after `run`, settled.
fn lived(run: &Run) -> (World, bool) {
    let mut w = World::new(run);
    for s in &run.steps {
        w.apply(s);
    }
    let settled = w.settle();
    (w, settled)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_accepted_event_ends_in_exactly_one_final_decision(run in run()) {
        let (w, settled) = lived(&run);
        prop_assert!(settled, "the lifecycle never settles");
        prop_assert!(w.broken.is_empty(), "{:?}", w.broken);
        let open: Vec<u64> = w.deliveries.keys().filter(|s| !w.finished.contains(s)).copied().collect();
        prop_assert!(open.is_empty(), "no final decision for seqs {open:?}");
    }

    #[test]
    fn no_slot_is_held_after_its_task_ends(run in run()) {
        let (w, settled) = lived(&run);
        prop_assert!(settled);
        prop_assert!(w.held.is_empty(), "slots held at rest by tasks {:?}", w.held);
        prop_assert!(!w.broken.iter().any(|b| b.starts_with("done of task")), "{:?}", w.broken);
    }

    #[test]
    fn a_deferral_is_taken_up_or_dropped_with_a_decision(run in run()) {
        let (w, settled) = lived(&run);
        prop_assert!(settled);
        prop_assert!(w.deferred.is_empty(), "deferrals left: {:?}", w.deferred.keys().collect::<Vec<_>>());
        for c in w.commits.iter().filter(|c| c.defer.is_some()) {
            let later = w.commits.iter().filter(|l| l.seq == c.seq && l.defer.is_none()).count();
            prop_assert_eq!(later, 1, "deferral of seq {} ends in one decision", c.seq);
        }
    }

    #[test]
    fn no_reply_without_an_engaged_plan(run in run()) {
        let (w, _) = lived(&run);
        prop_assert!(!w.broken.iter().any(|b| b.starts_with("a reply")), "{:?}", w.broken);
    }

    #[test]
    fn a_spent_budget_never_leaves_a_human_unanswered(run in run()) {
        let run = Run { budget_spent: true, failures: false, ..run };
        let (w, settled) = lived(&run);
        prop_assert!(settled);
        for c in &w.commits {
            let e = &w.deliveries[&c.seq].event;
            if e.sender_kind == SenderKind::Human && c.decision.verdict == Verdict::Engage {
                prop_assert!(c.reply.is_some(), "{} engaged and unanswered: {}", e.id, c.decision.reason);
            }
        }
    }

    #[test]
    fn the_same_inputs_in_the_same_order_give_the_same_effects(run in run()) {
        let (first, _) = lived(&run);
        let (again, _) = lived(&run);
        prop_assert_eq!(first.log, again.log);
    }
}

mod tools;
