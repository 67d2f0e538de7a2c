use std::time::Duration;

use mindfleet_core::messages::PersonaMsg;
use mindfleet_core::sched::{OverBudget, Owner, SkipReason, Slot};
use ractor::call_t;
use tokio::sync::mpsc;

use super::*;

fn config(cheap: usize) -> SchedulerConfig {
    SchedulerConfig { inference_slots: 1, cheap_slots: cheap, aging_per_30s: 0.5, ..SchedulerConfig::default() }
}

fn task(id: TaskId, class: Class, priority: f64, age: Duration, tx: &crossbeam_channel::Sender<Grant>) -> Task {
    Task {
        id,
        persona: Arc::from("p"),
        class,
        priority,
        slot: Slot::Cheap,
        label: "test",
        owner: Owner::Channel(tx.clone()),
        submitted: Instant::now() - age,
        deadline: None,
        max_tokens: 0,
        paced: false,
        room: None,
        preemptible: false,
        over_budget: OverBudget::Skip,
        tool: None,
    }
}

fn recv(rx: &crossbeam_channel::Receiver<Grant>) -> TaskId {
    rx.recv_timeout(Duration::from_secs(5)).expect("a grant within 5 s").task
}

/// Submits `tasks` while the only slot is held by task 0, then frees it and records
/// the order in which the rest are granted.
async fn grant_order_with(
    config: SchedulerConfig,
    tasks: Vec<(Class, f64, Duration)>,
) -> (Vec<TaskId>, SchedulerStats) {
    let h = spawn(config, None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    h.submit(task(0, Class::Work, 0.5, Duration::ZERO, &tx));
    assert_eq!(recv(&rx), 0);
    let n = tasks.len();
    for (i, (c, p, age)) in tasks.into_iter().enumerate() {
        h.submit(task(i as u64 + 1, c, p, age, &tx));
    }
    let mut order = Vec::new();
    let mut last = 0;
    for _ in 0..n {
        h.done(last);
        last = recv(&rx);
        order.push(last);
    }
    let stats = call_t!(h.actor(), SchedulerMsg::Stats, 5000).unwrap();
    h.actor().stop(None);
    (order, stats)
}

async fn grant_order(tasks: Vec<(Class, f64, Duration)>) -> Vec<TaskId> {
    grant_order_with(config(1), tasks).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_go_strictly_first_then_priority() {
    let order = grant_order(vec![
        (Class::Background, 1.0, Duration::ZERO),
        (Class::Work, 0.2, Duration::ZERO),
        (Class::Urgent, 0.1, Duration::ZERO),
        (Class::Work, 0.9, Duration::ZERO),
        (Class::Interactive, 0.5, Duration::ZERO),
    ])
    .await;
    assert_eq!(order, [3, 5, 4, 2, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_age_past_newer_higher_ones() {
    // 0.3 waiting 50 s ages to 1.13 and beats a fresh 0.9; a fresh 0.2 stays last.
    let order = grant_order(vec![
        (Class::Work, 0.9, Duration::ZERO),
        (Class::Work, 0.3, Duration::from_secs(50)),
        (Class::Work, 0.2, Duration::ZERO),
    ])
    .await;
    assert_eq!(order, [2, 1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_waited_past_the_bound_moves_up_a_class_but_never_into_urgent() {
    // No aging: only promotion moves a task past another.
    let cfg = SchedulerConfig { aging_per_30s: 0.0, ..config(1) };
    let (order, stats) = grant_order_with(
        cfg,
        vec![
            (Class::Background, 0.1, Duration::from_secs(61)),   // 1: -> work
            (Class::Background, 1.0, Duration::ZERO),            // 2: stays background
            (Class::Work, 0.2, Duration::from_secs(61)),         // 3: -> interactive
            (Class::Interactive, 0.3, Duration::ZERO),           // 4
            (Class::Interactive, 0.9, Duration::from_secs(500)), // 5: stays interactive
            (Class::Urgent, 0.0, Duration::ZERO),                // 6
            (Class::Background, 0.05, Duration::from_secs(121)), // 7: -> work -> interactive
            (Class::Work, 0.8, Duration::from_secs(50)),         // 8: not yet
        ],
    )
    .await;
    assert_eq!(order, [6, 5, 4, 3, 7, 8, 1, 2]);
    assert_eq!(stats.promotions, 4);
    assert_eq!((stats.background.promoted, stats.work.promoted, stats.interactive.promoted), (2, 2, 0));
    // Grants are counted by the class of submission.
    assert_eq!(stats.background.granted, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_low_tasks_never_starves_a_high_one_and_still_finishes() {
    let h = spawn(config(4), None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    for i in 0..10_000 {
        h.submit(task(i, Class::Background, 0.5, Duration::ZERO, &tx));
    }
    h.submit(task(99_999, Class::Urgent, 0.5, Duration::ZERO, &tx));
    // At most the four slots granted before the urgent task arrived run ahead of it.
    let mut before = 0;
    loop {
        let id = recv(&rx);
        if id == 99_999 {
            break;
        }
        before += 1;
        h.done(id);
    }
    assert!(before <= 4 + 4, "{before} background tasks ran before the urgent one");
    h.done(99_999);
    let mut finished = before + 1;
    while finished < 10_001 {
        h.done(recv(&rx));
        finished += 1;
    }
    let stats = call_t!(h.actor(), SchedulerMsg::Stats, 5000).unwrap();
    assert_eq!(stats.queued(), 0);
    assert_eq!(stats.granted, 10_001);
    assert_eq!(stats.done, 10_001);
    assert_eq!(stats.running_cheap, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_frees_the_slots_of_a_gone_persona() {
    let h = spawn(config(1), None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    h.submit(task(1, Class::Work, 0.5, Duration::ZERO, &tx));
    assert_eq!(recv(&rx), 1);
    h.submit(task(2, Class::Work, 0.5, Duration::ZERO, &tx));
    let mut other = task(3, Class::Work, 0.4, Duration::ZERO, &tx);
    other.persona = Arc::from("q");
    h.submit(other);
    // "p" is gone: its running task 1 and queued task 2 are dropped, so "q" runs.
    h.release(Arc::from("p"));
    assert_eq!(recv(&rx), 3);
}

/// Stands in for a persona: forwards what `pick` keeps of its messages to a tokio channel, so
/// tests on a paused clock can await them.
struct Probe<T>(std::marker::PhantomData<T>);

type Pick<T> = fn(PersonaMsg) -> Option<T>;

impl<T: Send + Sync + 'static> Actor for Probe<T> {
    type Msg = PersonaMsg;
    type State = (Pick<T>, mpsc::UnboundedSender<T>);
    type Arguments = (Pick<T>, mpsc::UnboundedSender<T>);

    async fn pre_start(
        &self,
        _myself: ActorRef<PersonaMsg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<PersonaMsg>,
        msg: PersonaMsg,
        (pick, tx): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(seen) = pick(msg) {
            let _ = tx.send(seen);
        }
        Ok(())
    }
}

/// A probe's channel and the actor feeding it.
async fn probe<T: Send + Sync + 'static>(pick: Pick<T>) -> (ActorRef<PersonaMsg>, mpsc::UnboundedReceiver<T>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Probe(std::marker::PhantomData), (pick, tx)).await.unwrap();
    (actor, rx)
}

/// A scheduler and a probe owning every task submitted through it.
struct Rig {
    h: SchedulerHandle,
    probe: ActorRef<PersonaMsg>,
    rx: mpsc::UnboundedReceiver<Option<Grant>>,
    start: Instant,
}

impl Rig {
    async fn new(config: SchedulerConfig) -> Rig {
        Rig::with_budgets(config, HashMap::new()).await
    }

    async fn with_budgets(config: SchedulerConfig, budgets: HashMap<Arc<str>, PersonaBudget>) -> Rig {
        let h = spawn_with_budgets(config, budgets, None).await.unwrap();
        // Its grants, and `None` for a `Resync` (see [`Rig::quiet`]).
        let (probe, rx) = probe(|m| match m {
            PersonaMsg::Granted(g) => Some(Some(g)),
            PersonaMsg::Resync => Some(None),
            _ => None,
        })
        .await;
        Rig { h, probe, rx, start: sched::now() }
    }

    fn task(&self, persona: &str, class: Class, priority: f64, slot: Slot) -> Task {
        Task::new(persona.into(), class, priority, slot, "test", Owner::Persona(self.probe.clone())).paced()
    }

    fn submit(&self, t: Task) -> TaskId {
        let id = t.id;
        self.h.submit(t);
        id
    }

    /// A model call of `persona` asking for `tokens` on the inference slot.
    fn call(&self, persona: &str, class: Class, priority: f64, tokens: u32) -> TaskId {
        self.submit(self.task(persona, class, priority, Slot::Inference).with_max_tokens(tokens))
    }

    /// The next grant; on the paused clock, time runs on to the scheduler's next timer.
    async fn grant(&mut self) -> Grant {
        let next = tokio::time::timeout(Duration::from_secs(600), self.rx.recv());
        next.await.expect("a grant within 600 s").expect("the probe runs").expect("a grant, not a marker")
    }

    /// The outcome of the next grant, which must be `id`'s.
    async fn outcome_of(&mut self, id: TaskId) -> Outcome {
        let g = self.grant().await;
        assert_eq!(g.task, id);
        g.outcome
    }

    /// Every grant sent before now (see [`Rig::quiet`] for the marker).
    async fn granted_so_far(&mut self) -> Vec<Grant> {
        self.stats().await;
        self.probe.cast(PersonaMsg::Resync).unwrap();
        let mut got = Vec::new();
        while let Some(g) = self.rx.recv().await.expect("the probe runs") {
            got.push(g);
        }
        got
    }

    /// Asserts that nothing was granted: everything the scheduler sent before answering
    /// `Stats` reaches the probe before the marker sent after it.
    async fn quiet(&mut self) {
        self.stats().await;
        self.probe.cast(PersonaMsg::Resync).unwrap();
        assert_eq!(self.rx.recv().await.expect("the probe runs"), None, "nothing granted");
    }

    async fn stats(&self) -> SchedulerStats {
        call_t!(self.h.actor(), SchedulerMsg::Stats, 5000).unwrap()
    }

    /// Time since the rig started, on the scheduler's clock.
    fn elapsed(&self) -> Duration {
        sched::now() - self.start
    }

    fn stop(self) {
        self.h.actor().stop(None);
        self.probe.stop(None);
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_task_is_promoted_while_every_slot_is_busy() {
    let mut rig = Rig::new(config(1)).await;
    let holder = rig.submit(rig.task("p", Class::Urgent, 0.5, Slot::Cheap));
    assert_eq!(rig.grant().await.task, holder);
    rig.submit(rig.task("p", Class::Background, 0.5, Slot::Cheap));
    tokio::time::sleep(Duration::from_secs(61)).await;
    let s = rig.stats().await;
    assert_eq!((s.background.queued, s.work.queued, s.promotions), (0, 1, 1));
    assert!((61_000.0..61_001.0).contains(&s.work.oldest_wait_ms), "{}", s.work.oldest_wait_ms);
    assert_eq!(s.promote_after_secs, 60.0);
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn background_runs_when_nothing_higher_waits_or_once_per_period_after_waiting_it() {
    let cfg = SchedulerConfig {
        aging_per_30s: 0.0,
        background_period: Duration::from_secs(10),
        promote_after: Duration::from_secs(3600),
        ..config(1)
    };
    let mut rig = Rig::new(cfg).await;
    let holder = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    assert_eq!(rig.grant().await.task, holder);
    let b1 = rig.submit(rig.task("p", Class::Background, 0.9, Slot::Cheap));
    let b2 = rig.submit(rig.task("p", Class::Background, 0.9, Slot::Cheap));
    let w: Vec<TaskId> = (0..4).map(|_| rig.submit(rig.task("p", Class::Work, 0.1, Slot::Cheap))).collect();
    let next = async |rig: &mut Rig, last: TaskId| {
        rig.h.done(last);
        rig.grant().await.task
    };
    // Fresh background work waits behind waiting work.
    assert_eq!(next(&mut rig, holder).await, w[0]);
    assert_eq!(next(&mut rig, w[0]).await, w[1]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Having waited its period, the oldest background task takes one turn ahead of work...
    assert_eq!(next(&mut rig, w[1]).await, b1);
    // ...and the next one waits for another period or for the work to run out.
    assert_eq!(next(&mut rig, b1).await, w[2]);
    assert_eq!(next(&mut rig, w[2]).await, w[3]);
    assert_eq!(next(&mut rig, w[3]).await, b2);
    let s = rig.stats().await;
    assert_eq!((s.background_turns, s.background.granted, s.queued()), (1, 2, 0));
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn a_grant_after_the_deadline_is_flagged_and_counted() {
    let mut rig = Rig::new(config(1)).await;
    let holder = rig.submit(rig.task("p", Class::Urgent, 0.5, Slot::Cheap));
    assert_eq!(rig.grant().await.task, holder);
    let late = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap).within(Duration::from_secs(5)));
    let timely = rig.submit(rig.task("p", Class::Interactive, 0.5, Slot::Cheap).within(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_secs(10)).await;
    rig.h.done(holder);
    let g = rig.grant().await;
    assert_eq!((g.task, g.deadline_missed, g.waited_us), (timely, false, 10_000_000));
    rig.h.done(timely);
    let g = rig.grant().await;
    assert_eq!((g.task, g.deadline_missed, g.outcome), (late, true, Outcome::Run));
    let s = rig.stats().await;
    assert_eq!((s.deadline_misses, s.work.deadline_misses, s.interactive.deadline_misses), (1, 1, 0));
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn cadence_delays_a_personas_next_task_but_not_urgent_ones_or_other_personas() {
    let mut rig = Rig::new(config(8)).await;
    rig.h.set_cadence("p".into(), Duration::from_secs(10));
    // The first grant is never delayed.
    let a = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (a, Duration::ZERO));
    let b = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    let u = rig.submit(rig.task("p", Class::Urgent, 0.1, Slot::Cheap));
    let q = rig.submit(rig.task("q", Class::Work, 0.1, Slot::Cheap));
    // A task that continues work already started is not paced.
    let i = rig.submit(Task { paced: false, ..rig.task("p", Class::Interactive, 0.1, Slot::Cheap) });
    assert_eq!((rig.grant().await.task, rig.elapsed()), (u, Duration::ZERO));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (i, Duration::ZERO));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (q, Duration::ZERO));
    rig.quiet().await;
    let s = rig.stats().await;
    assert_eq!((s.work.deferred, s.work.queued), (1, 1));
    // `b` waits aside until a timer says "p" is due, 10 s after its last non-urgent grant.
    let g = rig.grant().await;
    assert_eq!((g.task, rig.elapsed(), g.waited_us), (b, Duration::from_secs(10), 10_000_000));
    // The best task aside goes first: `d` was submitted after `c` with a higher class.
    let c = rig.submit(rig.task("p", Class::Work, 0.9, Slot::Cheap));
    let d = rig.submit(rig.task("p", Class::Interactive, 0.1, Slot::Cheap));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (d, Duration::from_secs(20)));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (c, Duration::from_secs(30)));
    assert_eq!(rig.stats().await.queued(), 0);
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn a_changed_cadence_retimes_the_next_grant_and_zero_lifts_it() {
    let mut rig = Rig::new(config(8)).await;
    rig.h.set_cadence("p".into(), Duration::from_secs(60));
    let a = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    assert_eq!(rig.grant().await.task, a);
    let b = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    let c = rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    rig.quiet().await;
    // Calmer mood, shorter interval: counted from the last grant, at 0 s.
    rig.h.set_cadence("p".into(), Duration::from_secs(5));
    assert_eq!((rig.grant().await.task, rig.elapsed()), (b, Duration::from_secs(5)));
    rig.quiet().await;
    rig.h.set_cadence("p".into(), Duration::ZERO);
    assert_eq!((rig.grant().await.task, rig.elapsed()), (c, Duration::from_secs(5)));
    rig.stop();
}

fn budget(inferences_per_hour: u64, tokens_per_hour: u64) -> PersonaBudget {
    PersonaBudget { inferences_per_hour, tokens_per_hour }
}

#[tokio::test(start_paused = true)]
async fn the_hard_budget_is_never_crossed_reservations_are_refunded_at_done() {
    let cfg = SchedulerConfig { inference_slots: 8, ..config(8) };
    let mut rig = Rig::with_budgets(cfg, HashMap::from([(Arc::from("p"), budget(100, 1000))])).await;
    let expect = async |rig: &mut Rig, id: TaskId, outcome: Outcome, tokens_last_hour: u64| {
        let g = rig.grant().await;
        assert_eq!((g.task, g.outcome), (id, outcome));
        let s = rig.stats().await;
        assert_eq!(s.budget.tokens_last_hour, tokens_last_hour);
        g
    };
    let t1 = rig.call("p", Class::Interactive, 0.9, 400);
    expect(&mut rig, t1, Outcome::Run, 400).await;
    let t2 = rig.call("p", Class::Interactive, 0.9, 400);
    expect(&mut rig, t2, Outcome::Run, 800).await;
    // 800 reserved + 400 would cross 1000: skipped, and it holds no slot.
    let t3 = rig.call("p", Class::Interactive, 0.9, 400);
    expect(&mut rig, t3, Outcome::Skipped(SkipReason::HardBudget), 800).await;
    assert_eq!(rig.stats().await.running_inference, 2);
    // `t1` used 100 of its 400: the rest is refunded.
    rig.h.done_with_tokens(t1, 100);
    let t4 = rig.call("p", Class::Interactive, 0.9, 400);
    expect(&mut rig, t4, Outcome::Run, 900).await;
    let t5 = rig.call("p", Class::Interactive, 0.9, 101);
    expect(&mut rig, t5, Outcome::Skipped(SkipReason::HardBudget), 900).await;
    let t6 = rig.call("p", Class::Interactive, 0.9, 100);
    expect(&mut rig, t6, Outcome::Run, 1000).await;
    let s = rig.stats().await;
    assert_eq!((s.budget.tokens_reserved, s.budget.inferences_last_hour, s.skipped.hard_budget), (900, 4, 2));
    // Another persona is bound by the fleet's budget only.
    let other = rig.call("q", Class::Work, 0.5, 5000);
    expect(&mut rig, other, Outcome::Run, 6000).await;
    // An hour after the grants the window has room again.
    rig.h.done_with_tokens(t2, 400);
    rig.h.done_with_tokens(t4, 400);
    rig.h.done_with_tokens(t6, 100);
    tokio::time::sleep(budget::WINDOW).await;
    let t7 = rig.call("p", Class::Interactive, 0.9, 400);
    expect(&mut rig, t7, Outcome::Run, 400).await;
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn above_the_soft_limit_only_high_priority_calls_run() {
    let cfg = SchedulerConfig { inference_slots: 32, ..config(8) };
    let mut rig = Rig::new(cfg).await;
    rig.h.set_budget("tok".into(), Some(budget(100, 1000)));
    rig.h.set_budget("call".into(), Some(budget(10, 1_000_000)));
    let outcome = async |rig: &mut Rig, persona: &str, class: Class, priority: f64, tokens: u32| {
        let id = rig.call(persona, class, priority, tokens);
        let g = rig.grant().await;
        assert_eq!(g.task, id);
        g.outcome
    };
    let soft_tokens = Outcome::Skipped(SkipReason::SoftTokenBudget);
    let soft_calls = Outcome::Skipped(SkipReason::SoftCallBudget);
    // Tokens: 790 of 1000 used; 0.8 is the soft share.
    assert_eq!(outcome(&mut rig, "tok", Class::Work, 1.0, 790).await, Outcome::Run);
    assert_eq!(outcome(&mut rig, "tok", Class::Work, 0.8, 20).await, soft_tokens);
    assert_eq!(outcome(&mut rig, "tok", Class::Work, 0.85, 20).await, Outcome::Run);
    assert_eq!(outcome(&mut rig, "tok", Class::Urgent, 0.1, 20).await, Outcome::Run, "urgent: hard limit only");
    // Calls: 8 of 10 is the soft share.
    for _ in 0..8 {
        assert_eq!(outcome(&mut rig, "call", Class::Work, 0.9, 1).await, Outcome::Run);
    }
    assert_eq!(outcome(&mut rig, "call", Class::Work, 0.6, 1).await, soft_calls);
    assert_eq!(outcome(&mut rig, "call", Class::Work, 0.61, 1).await, Outcome::Run);
    assert_eq!(outcome(&mut rig, "call", Class::Work, 0.9, 1).await, Outcome::Run);
    assert_eq!(outcome(&mut rig, "call", Class::Work, 1.0, 1).await, Outcome::Skipped(SkipReason::HardBudget));
    let s = rig.stats().await;
    assert_eq!(
        s.skipped,
        mindfleet_core::sched::SkipCounts { soft_token_budget: 1, soft_call_budget: 1, hard_budget: 1 }
    );
    assert_eq!((s.running_inference, s.budget.inferences_last_hour), (13, 13));
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn an_urgent_call_over_the_hard_budget_runs_rules_only_on_a_cheap_slot() {
    let cfg = SchedulerConfig { inference_slots: 1, fleet_tokens_per_hour: 1000, ..config(1) };
    let mut rig = Rig::new(cfg).await;
    let t1 = rig.call("p", Class::Work, 0.9, 1000);
    assert_eq!(rig.grant().await.outcome, Outcome::Run);
    let rules = Outcome::RulesOnly(SkipReason::HardBudget);
    // The inference slot is busy; an urgent call over the budget takes the free cheap slot.
    let u1 = rig.call("p", Class::Urgent, 0.5, 10);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (u1, rules, Slot::Cheap));
    // A refused non-urgent call is answered at once, without a slot.
    let u2 = rig.call("p", Class::Urgent, 0.5, 10);
    let w = rig.call("p", Class::Work, 0.9, 10);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (w, Outcome::Skipped(SkipReason::HardBudget), Slot::Inference));
    // The next urgent call waits for the cheap slot, not for the model's.
    rig.quiet().await;
    rig.h.done(u1);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (u2, rules, Slot::Cheap));
    // `t1` used 400 of its 1000: room again for a model call.
    rig.h.done_with_tokens(t1, 400);
    let w2 = rig.call("p", Class::Work, 0.9, 10);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (w2, Outcome::Run, Slot::Inference));
    let s = rig.stats().await;
    assert_eq!((s.rules_only.hard_budget, s.skipped.hard_budget), (2, 1));
    assert_eq!((s.running_cheap, s.running_inference, s.budget.tokens_last_hour), (1, 1, 410));
    rig.h.done(u2);
    let s = rig.stats().await;
    assert_eq!((s.running_cheap, s.done, s.granted), (0, 3, 4));
    rig.stop();
}

/// A model call of `persona` that `waits` says who waits on (see [`OverBudget`]).
fn waited(rig: &Rig, persona: &str, class: Class, priority: f64, tokens: u32, waits: OverBudget) -> TaskId {
    rig.submit(rig.task(persona, class, priority, Slot::Inference).with_max_tokens(tokens).over_budget(waits))
}

#[tokio::test(start_paused = true)]
async fn a_call_a_human_waits_on_is_never_skipped_for_budget() {
    let cfg = SchedulerConfig { inference_slots: 16, fleet_tokens_per_hour: 1000, ..config(4) };
    let mut rig = Rig::with_budgets(cfg, HashMap::from([(Arc::from("calls"), budget(10, 1_000_000))])).await;
    let t1 = rig.call("p", Class::Work, 0.9, 1000);
    assert_eq!(rig.grant().await.outcome, Outcome::Run);
    let hard = SkipReason::HardBudget;
    // Nobody waits: skipped, as before.
    let id = waited(&rig, "p", Class::Interactive, 0.9, 10, OverBudget::Skip);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome), (id, Outcome::Skipped(hard)));
    // A human waits on the work: the rules brain, on a cheap slot, at once.
    let id = waited(&rig, "p", Class::Interactive, 0.9, 10, OverBudget::Rules);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (id, Outcome::RulesOnly(hard), Slot::Cheap));
    // A reply at priority 0.6 or below does not wait for budget either.
    let id = waited(&rig, "p", Class::Interactive, 0.6, 10, OverBudget::Queue);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (id, Outcome::RulesOnly(hard), Slot::Cheap));
    // Above the soft limit of a call budget too: the rules brain, with the soft reason.
    rig.h.done_with_tokens(t1, 0);
    for _ in 0..8 {
        waited(&rig, "calls", Class::Work, 0.9, 1, OverBudget::Rules);
        assert_eq!(rig.grant().await.outcome, Outcome::Run);
    }
    let id = waited(&rig, "calls", Class::Work, 0.5, 1, OverBudget::Rules);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome), (id, Outcome::RulesOnly(SkipReason::SoftCallBudget)));
    let s = rig.stats().await;
    assert_eq!((s.skipped.hard_budget, s.rules_only.hard_budget, s.rules_only.soft_call_budget), (1, 2, 1));
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn a_queued_reply_runs_on_the_model_once_a_refund_makes_room() {
    let cfg = SchedulerConfig { inference_slots: 2, fleet_tokens_per_hour: 1000, ..config(2) };
    let mut rig = Rig::new(cfg).await;
    let t1 = rig.call("p", Class::Work, 0.9, 1000);
    assert_eq!(rig.grant().await.outcome, Outcome::Run);
    let reply = waited(&rig, "p", Class::Interactive, 0.7, 100, OverBudget::Queue);
    rig.quiet().await;
    let s = rig.stats().await;
    assert!(!s.foreground_idle() && s.interactive.queued == 1, "a queued reply is work not granted yet");
    // `t1` used 300 of its 1000: the queued reply has its room, and runs as submitted.
    rig.h.done_with_tokens(t1, 300);
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (reply, Outcome::Run, Slot::Inference));
    assert_eq!(rig.stats().await.budget.tokens_last_hour, 400);
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn a_reply_queued_past_its_deadline_runs_on_the_rules_brain() {
    let cfg = SchedulerConfig {
        inference_slots: 2,
        fleet_inferences_per_hour: 1,
        queue_deadline: Duration::from_secs(30),
        ..config(2)
    };
    let mut rig = Rig::new(cfg).await;
    assert_eq!(rig.outcome_of(rig.call("p", Class::Work, 0.9, 10)).await, Outcome::Run);
    let reply = waited(&rig, "p", Class::Interactive, 0.7, 10, OverBudget::Queue);
    rig.quiet().await;
    let asked = rig.elapsed();
    // Nothing makes room: at the deadline, on the scheduler's own timer, the rules brain.
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome, g.slot), (reply, Outcome::RulesOnly(SkipReason::HardBudget), Slot::Cheap));
    let waited_for = rig.elapsed() - asked;
    assert!(waited_for >= Duration::from_secs(30) && waited_for < Duration::from_secs(31), "{waited_for:?}");
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn a_queued_reply_runs_on_the_model_when_the_oldest_call_leaves_the_hour() {
    let cfg = SchedulerConfig {
        inference_slots: 2,
        fleet_inferences_per_hour: 1,
        queue_deadline: Duration::from_secs(3600),
        ..config(2)
    };
    let mut rig = Rig::new(cfg).await;
    let t1 = rig.call("p", Class::Work, 0.9, 10);
    assert_eq!(rig.grant().await.outcome, Outcome::Run);
    rig.h.done_with_tokens(t1, 10);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let reply = waited(&rig, "p", Class::Interactive, 0.9, 10, OverBudget::Queue);
    rig.quiet().await;
    // Still queued 48 minutes on; the grant comes on the scheduler's own timer.
    tokio::time::sleep(Duration::from_secs(2900)).await;
    rig.quiet().await;
    let g = rig.grant().await;
    assert_eq!((g.task, g.outcome), (reply, Outcome::Run));
    let at = rig.elapsed();
    assert!(at >= budget::WINDOW && at < budget::WINDOW + Duration::from_secs(1), "granted at {at:?}");
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn under_random_calls_a_call_a_human_waits_on_is_never_skipped_and_every_call_is_answered_once() {
    // A small budget, few slots, and calls of every kind at random (a fixed seed, so a failure
    // replays): what nobody waits on may be skipped, nothing else ever is, and each call is
    // answered exactly once, the queued ones by their deadline at the latest.
    let cfg = SchedulerConfig {
        inference_slots: 2,
        fleet_inferences_per_hour: 6,
        queue_deadline: Duration::from_secs(30),
        ..config(3)
    };
    let mut rig = Rig::with_budgets(cfg, HashMap::from([(Arc::from("a"), budget(3, 1_000_000))])).await;
    let mut seed: u64 = 0x5eed_2026;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut asked: HashMap<TaskId, OverBudget> = HashMap::new();
    let mut running: Vec<TaskId> = Vec::new();
    let mut answered: HashMap<TaskId, Outcome> = HashMap::new();
    for _ in 0..60 {
        let waits = [OverBudget::Skip, OverBudget::Rules, OverBudget::Queue][next(3) as usize];
        let class = [Class::Urgent, Class::Interactive, Class::Work][next(3) as usize];
        let persona = ["a", "b"][next(2) as usize];
        let priority = next(10) as f64 / 10.0 + 0.05;
        asked.insert(waited(&rig, persona, class, priority, 10, waits), waits);
        // Finish some running calls, and let time pass now and then.
        for g in rig.granted_so_far().await {
            assert!(answered.insert(g.task, g.outcome).is_none(), "{} answered twice", g.task);
            if g.outcome.holds_slot() {
                running.push(g.task);
            }
        }
        if !running.is_empty() && next(2) == 0 {
            let t = running.swap_remove(next(running.len() as u64) as usize);
            rig.h.done_with_tokens(t, 10);
        }
        if next(8) == 0 {
            tokio::time::sleep(Duration::from_secs(next(40))).await;
        }
    }
    // Everything left finishes; the queued calls come by their deadline.
    while answered.len() < asked.len() {
        for t in running.drain(..) {
            rig.h.done_with_tokens(t, 10);
        }
        let g = rig.grant().await;
        assert!(answered.insert(g.task, g.outcome).is_none(), "{} answered twice", g.task);
        if g.outcome.holds_slot() {
            running.push(g.task);
        }
    }
    for (t, outcome) in &answered {
        if asked[t] != OverBudget::Skip {
            assert!(!matches!(outcome, Outcome::Skipped(_)), "task {t} ({:?}) skipped", asked[t]);
        }
    }
    let s = rig.stats().await;
    assert!(s.skipped.hard_budget + s.skipped.soft_call_budget > 0, "the budget ran out: {s:?}");
    assert!(s.rules_only.hard_budget + s.rules_only.soft_call_budget > 0, "{s:?}");
    assert!(s.done > 6, "calls finished along the way: {s:?}");
    assert!(s.budget.inferences_last_hour <= 6, "the fleet's budget holds: {s:?}");
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn release_drops_a_personas_replies_queued_for_budget() {
    let cfg = SchedulerConfig { fleet_inferences_per_hour: 1, ..config(2) };
    let mut rig = Rig::new(cfg).await;
    assert_eq!(rig.outcome_of(rig.call("p", Class::Work, 0.9, 10)).await, Outcome::Run);
    waited(&rig, "p", Class::Interactive, 0.9, 10, OverBudget::Queue);
    rig.quiet().await;
    rig.h.release("p".into());
    assert_eq!(rig.stats().await.released, 2, "the running call and the queued reply");
    // Its deadline passes with nothing left to answer.
    tokio::time::sleep(Duration::from_secs(60)).await;
    rig.quiet().await;
    rig.stop();
}

#[tokio::test(start_paused = true)]
async fn release_drops_tasks_aside_and_keeps_the_charge_of_running_calls() {
    let mut rig = Rig::new(config(8)).await;
    rig.h.set_cadence("p".into(), Duration::from_secs(60));
    let a = rig.call("p", Class::Work, 0.9, 300);
    assert_eq!(rig.grant().await.task, a);
    rig.submit(rig.task("p", Class::Work, 0.5, Slot::Cheap));
    rig.quiet().await;
    rig.h.release("p".into());
    let s = rig.stats().await;
    assert_eq!((s.queued(), s.running_inference, s.released, s.budget.tokens_last_hour), (0, 0, 2, 300));
    rig.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_work_takes_the_slot_of_a_preemptible_background_task_once_it_is_given_back() {
    let h = spawn(config(1), None).await.unwrap();
    // A persona that studies: its grants as `Ok(task)`, the scheduler asking for a slot back
    // as `Err(task)`.
    let (owner, mut rx) = probe(|m| match m {
        PersonaMsg::Granted(g) => Some(Ok(g.task)),
        PersonaMsg::Preempt(t) => Some(Err(t)),
        _ => None,
    })
    .await;
    let next = async |rx: &mut mpsc::UnboundedReceiver<Result<TaskId, TaskId>>| {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("an answer within 5 s").unwrap()
    };
    let background = |preemptible: bool| {
        let t =
            Task::new("study".into(), Class::Background, 0.2, Slot::Inference, "study", Owner::Persona(owner.clone()));
        if preemptible { t.preemptible() } else { t }
    };
    // A background task that cannot be asked keeps its slot until it is done.
    let plain = background(false);
    let plain_id = plain.id;
    h.submit(plain);
    assert_eq!(next(&mut rx).await, Ok(plain_id));
    let (ctx, crx) = crossbeam_channel::unbounded();
    let mut first = task(SchedulerHandle::next_id(), Class::Interactive, 0.9, Duration::ZERO, &ctx);
    first.slot = Slot::Inference;
    let first_id = first.id;
    h.submit(first);
    let stats = call_t!(h.actor(), SchedulerMsg::Stats, 5000).unwrap();
    assert_eq!(stats.preempted, 0);
    h.done(plain_id);
    assert_eq!(recv(&crx), first_id);
    h.done(first_id);

    // A preemptible one is asked for it back as soon as interactive work waits, once.
    let study = background(true);
    let study_id = study.id;
    h.submit(study);
    assert_eq!(next(&mut rx).await, Ok(study_id));
    let mut reply = task(SchedulerHandle::next_id(), Class::Interactive, 0.9, Duration::ZERO, &ctx);
    reply.slot = Slot::Inference;
    let reply_id = reply.id;
    h.submit(reply);
    assert_eq!(next(&mut rx).await, Err(study_id));
    assert!(crx.try_recv().is_err(), "the slot is still held");
    h.done(study_id);
    assert_eq!(recv(&crx), reply_id);
    let stats = call_t!(h.actor(), SchedulerMsg::Stats, 5000).unwrap();
    assert_eq!(stats.preempted, 1);
    h.actor().stop(None);
    owner.stop(None);
}
