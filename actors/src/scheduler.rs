//! The `Scheduler` actor: an RTOS-style scheduler of the fleet's cognitive work.
//!
//! Tasks arrive through the lock-free queues of [`SchedulerHandle::submit`] and finish
//! through its `done` queue; a single coalesced `Wake` tells this actor to drain both.
//! Only this actor decides: it orders the waiting tasks, grants slots and answers each
//! task exactly once with a [`Grant`] whose [`Outcome`] is `Run`, `RulesOnly` or `Skipped`.
//!
//! Messages ([`SchedulerMsg`]): `Wake`, `Done`, `Cadence`, `Budget`, `Release`, `Stats`,
//! and `Tick` from its own timer.
//!
//! # Policy
//!
//! **Slots.** Two pools bound the concurrency: inference slots (model calls) and cheap
//! slots (everything else). A `Run` or `RulesOnly` grant holds one slot until `done`; the
//! pools are scheduled independently, so work waiting for the scarce inference slot never
//! blocks cheap work.
//!
//! **Classes.** `Urgent`, `Interactive`, `Work`, `Background`, highest first: a free slot
//! goes to the best waiting task of the highest class waiting for that pool, and a waiting
//! `Urgent` task always goes first. Within a class the highest *aged* priority goes first:
//! priority + `aging_per_30s` per 30 s waited. Aging is linear and the same for every task,
//! so the order of two waiting tasks never changes while they wait and a heap keyed by
//! `priority - rate * submitted` is exact; equal keys go in arrival order.
//!
//! **Promotion.** A task that waited `promote_after` in its class moves up one class, and
//! again after another `promote_after`, up to `Interactive`: nothing is promoted into
//! `Urgent`. Promotion is checked before every dispatch (an O(1) test against the earliest
//! promotion due) and by a timer at most 100 ms after it is due, which keeps the stats
//! current while nothing else happens. A promoted task keeps its aged priority.
//!
//! **Background.** Like an RTOS idle hook, a background task runs when no task of a higher
//! class waits for its pool. So that a busy fleet cannot starve it, a background task that
//! has waited `background_period` runs ahead of waiting `Interactive` and `Work` tasks
//! (never ahead of `Urgent`), at most one per pool per `background_period`: the oldest one.
//! Every `promote_after` it also moves up a class like any task.
//!
//! **Deadlines.** A deadline does not change the order (this is fixed-priority scheduling,
//! not earliest-deadline-first). An answer given after the task's deadline says
//! `deadline_missed: true` and is counted, in total and by class of submission.
//!
//! **Cadence.** `Cadence { persona, interval }` rate-limits the persona's *paced* grants
//! (`Task::paced`: the start of a new piece of self-paced work) to one per `interval`, counted
//! from its last paced grant. A task that is not due yet waits aside (not in the class queues)
//! and a timer wakes the scheduler when its persona is due; the persona's best task aside (by
//! class, then aged priority) then goes back to the queues, where it competes as usual.
//! Unpaced and `Urgent` tasks ignore cadence and do not count as the persona's turn; a
//! persona without a cadence is not limited; the first grant after a
//! persona's first cadence is never delayed; a changed cadence re-times the next grant from
//! the last one; `Duration::ZERO` removes the limit. A skipped task does not use the turn.
//!
//! **Budgets.** Tasks with `max_tokens > 0` are model calls. Each is one inference and
//! reserves `max_tokens` tokens at grant; `done_with_tokens` settles the reservation to the
//! tokens used (a task that reports more than it reserved is charged what it reports). Use
//! is counted over a sliding hour against the fleet's budget (`fleet_inferences_per_hour`,
//! `fleet_tokens_per_hour`) and, when one is registered (`SchedulerArgs::budgets` or
//! `Budget`), the persona's. At grant time, with this call's reservation included:
//!
//! - if a hard limit would be crossed, the call is refused (`HardBudget`);
//! - else, for non-urgent tasks, above `budget_soft_limit` of a token budget only a priority
//!   above 0.8 runs (else refused, `SoftTokenBudget`), and above it of a call budget only a
//!   priority above 0.6 runs (else refused, `SoftCallBudget`). `Urgent` calls only answer to
//!   the hard limit: the soft margin is kept for them.
//!
//! A refused call becomes what its `Task::over_budget` says of who waits on it (`refused.rs`):
//! an `Urgent` one, or one a human waits on, gets `RulesOnly(reason)`: it runs without a model,
//! on a cheap slot, and no reservation is made; a reply a human waits on (`Queue`) with priority
//! above 0.6 first waits for budget, up to `queue_deadline` after its submission, and is granted
//! as usual if the budget makes room meanwhile (a call leaves the hour, a reservation is
//! refunded), else `RulesOnly` at the deadline; a call nobody waits on (`Skip`) gets
//! `Skipped(reason)`.
//!
//! The priority judged is the submitted one, not the aged one. A call is judged when it is
//! taken in, so a refused call is answered at once without waiting for a slot (and an
//! `Urgent` one waits for a cheap slot, not the model's), and judged again when it is
//! granted, against the use of that moment; only then is its reservation made. A skipped
//! task holds no slot: its owner must not call `done`. A persona that is released keeps the
//! charge of its running calls.
//!
//! # Invariants
//!
//! - Every submitted task is answered at most once, and exactly once unless its persona is
//!   released first; only `Run` and `RulesOnly` answers hold a slot.
//! - After every message, a pool with a free slot has no task waiting for it (tasks aside
//!   for their cadence, and calls queued for budget, are not waiting).
//! - A model call a human waits on is never `Skipped`.
//! - Grants never take the budget's use (reservations included) over a hard limit.
//! - Dispatch is amortized O(log n) per task: heaps with lazy deletion and compaction, no
//!   scans. Only `Release` (rare: a persona stopped) walks the waiting and running tasks.
//!
//! Grants, skips, cadence deferrals and promotions are `tracing` events at debug level
//! (trace for deferrals), with the task's persona, class, label and wait.

mod budget;
mod cadence;
mod ready;
mod refused;
mod stats;

pub mod bench;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mindfleet_core::config::{PersonaConfig, SchedulerConfig};
use mindfleet_core::sched::{
    self, Class, Grant, Outcome, Owner, PersonaBudget, SchedulerHandle, SchedulerMsg, SchedulerStats, SkipReason,
    SubmitQueues, Task, TaskId,
};
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, MessagingErr, SpawnErr};

use budget::{Limits, Verdict, Window};
use cadence::Aside;
pub(crate) use mindfleet_core::quantile::nearest_rank;
use ready::{CHEAP, POOLS, Ready, Waiting, pool_of, slot_of};
use refused::Refused;
use stats::DoneRate;

/// How late the promotion timer may fire: promotions due within it are handled together.
const PROMOTION_SLACK: Duration = Duration::from_millis(100);

pub struct Scheduler;

/// What the scheduler keeps about a persona that has a cadence, a budget or model calls.
#[derive(Debug)]
struct Persona {
    name: Arc<str>,
    /// Zero: no limit.
    cadence: Duration,
    /// Last non-urgent grant while the persona had a cadence.
    last_grant: Option<Instant>,
    aside: BinaryHeap<Aside>,
    /// The instant this persona is queued at in `SchedulerState::due`, if any.
    due_queued: Option<Instant>,
    budget: Option<PersonaBudget>,
}

#[derive(Debug)]
struct Running {
    persona: Arc<str>,
    class: Class,
    pool: usize,
    /// Budget entry and tokens reserved.
    reservation: Option<(u64, u64)>,
    /// Who to ask for the slot back, for a preemptible task not asked yet.
    preempt: Option<Owner>,
}

/// Task ids are sequential: a multiplicative hash spreads them at a fraction of SipHash's cost.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The task of an armed `send_after`.
type Timer = JoinHandle<Result<(), MessagingErr<SchedulerMsg>>>;

pub struct SchedulerState {
    myself: ActorRef<SchedulerMsg>,
    queues: Arc<SubmitQueues>,
    config: SchedulerConfig,
    epoch: Instant,
    /// Aging rate in priority per second.
    rate: f64,
    promote_ns: i64,
    ready: Ready,
    running: HashMap<TaskId, Running, BuildHasherDefault<IdHasher>>,
    free: [usize; POOLS],
    seq: u64,
    personas: Vec<Persona>,
    by_name: HashMap<Arc<str>, u32>,
    /// Personas with a cadence: when zero, dispatch does no persona lookups for cadence.
    with_cadence: usize,
    /// When personas with tasks aside are due (lazy: checked against `Persona::due_queued`).
    due: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Tasks aside by class.
    deferred: [usize; 4],
    /// Granted and not done, by class of submission.
    running_by_class: [usize; 4],
    window: Window,
    /// Model calls a human waits on, waiting for budget (see `refused`), with why they were refused.
    budget_queue: Vec<(SkipReason, Waiting)>,
    /// Earliest promotion due, ns from `epoch` (may be early, never late; `i64::MAX`: none).
    next_promotion: i64,
    /// Last background turn ahead of higher classes, by pool.
    background_turn: [Option<Instant>; POOLS],
    timer: Option<(Instant, Timer)>,
    done_rate: DoneRate,
    stats: SchedulerStats,
}

pub struct SchedulerArgs {
    pub queues: Arc<SubmitQueues>,
    pub config: SchedulerConfig,
    /// Per-persona budgets known at start; `SchedulerMsg::Budget` sets more later.
    pub budgets: HashMap<Arc<str>, PersonaBudget>,
}

impl SchedulerState {
    fn new(myself: ActorRef<SchedulerMsg>, args: SchedulerArgs) -> Self {
        let config = args.config;
        let mut st = SchedulerState {
            myself,
            queues: args.queues,
            config,
            epoch: sched::now(),
            rate: config.aging_per_30s / 30.0,
            promote_ns: i64::try_from(config.promote_after.as_nanos()).unwrap_or(i64::MAX).max(1),
            ready: Ready::default(),
            running: HashMap::default(),
            free: [config.inference_slots, config.cheap_slots],
            seq: 0,
            personas: Vec::new(),
            by_name: HashMap::new(),
            with_cadence: 0,
            due: BinaryHeap::new(),
            deferred: [0; 4],
            running_by_class: [0; 4],
            window: Window::default(),
            budget_queue: Vec::new(),
            next_promotion: i64::MAX,
            background_turn: [None; POOLS],
            timer: None,
            done_rate: DoneRate::default(),
            stats: SchedulerStats::default(),
        };
        for (persona, budget) in args.budgets {
            st.set_budget(persona, Some(budget));
        }
        st
    }

    /// Nanoseconds from the epoch (negative before it).
    fn ns(&self, t: Instant) -> i64 {
        match t.checked_duration_since(self.epoch) {
            Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            None => -i64::try_from(self.epoch.duration_since(t).as_nanos()).unwrap_or(i64::MAX),
        }
    }

    fn instant(&self, ns: i64) -> Instant {
        if ns >= 0 {
            self.epoch + Duration::from_nanos(ns as u64)
        } else {
            self.epoch.checked_sub(Duration::from_nanos(ns.unsigned_abs())).unwrap_or(self.epoch)
        }
    }

    fn persona_index(&mut self, name: &Arc<str>) -> u32 {
        if let Some(&p) = self.by_name.get(name) {
            return p;
        }
        let p = self.personas.len() as u32;
        self.personas.push(Persona {
            name: name.clone(),
            cadence: Duration::ZERO,
            last_grant: None,
            aside: BinaryHeap::new(),
            due_queued: None,
            budget: None,
        });
        self.by_name.insert(name.clone(), p);
        p
    }

    /// Takes in everything the handles queued: finished tasks first, then new ones.
    fn drain(&mut self, now: Instant) {
        // Acquire pairs with the submitters' swap: everything they pushed is visible below.
        self.queues.wake_pending.swap(false, Ordering::AcqRel);
        while let Some((task, tokens_used)) = self.queues.done.pop() {
            self.finish(task, tokens_used, now);
        }
        for c in Class::ALL {
            while let Some(t) = self.queues.queues[c as usize].pop() {
                self.admit(t, now);
            }
        }
    }

    fn admit(&mut self, task: Task, now: Instant) {
        let at = self.ns(task.submitted);
        self.seq += 1;
        let mut w = Waiting {
            class: task.class,
            pool: pool_of(task.slot),
            key: task.priority - self.rate * (at as f64 / 1e9),
            at,
            seq: self.seq,
            rules_only: None,
            task,
        };
        if w.task.max_tokens > 0 {
            // A call the budget refuses now is answered now, not when a slot frees.
            let p = self.persona_index(&w.task.persona);
            match self.judge(&w, p, now) {
                Verdict::Run => {}
                Verdict::Skip(reason) => match self.refused(&w, now) {
                    Refused::Skip => {
                        let pool = w.pool;
                        self.answer(w, pool, Outcome::Skipped(reason), None, Some(p), now);
                        return;
                    }
                    Refused::Queue => return self.queue_for_budget(w, reason),
                    Refused::Rules => {
                        w.rules_only = Some(reason);
                        w.pool = CHEAP;
                    }
                },
                Verdict::RulesOnly(reason) => {
                    w.rules_only = Some(reason);
                    w.pool = CHEAP;
                }
            }
        }
        if w.task.paced
            && w.task.class != Class::Urgent
            && self.with_cadence > 0
            && let Some(&p) = self.by_name.get(&w.task.persona)
            && self.personas[p as usize].next_due().is_some_and(|d| d > now)
        {
            self.set_aside(p, w);
            return;
        }
        self.enqueue(w);
    }

    /// Puts a task in the class queues of its pool.
    fn enqueue(&mut self, w: Waiting) {
        if w.class != Class::Urgent && w.class != Class::Interactive {
            let due = w.at.saturating_add(self.promote_ns.saturating_mul(w.promotions() as i64 + 1));
            self.next_promotion = self.next_promotion.min(due);
        }
        self.ready.push(w);
    }

    /// Moves every task that waited `promote_after` in its class up one class.
    fn promote_due(&mut self, now: Instant) {
        let now_ns = self.ns(now);
        if now_ns < self.next_promotion {
            return;
        }
        let mut next = i64::MAX;
        for pool in 0..POOLS {
            // Background first, so a task due for two promotions gets both.
            for class in [Class::Background, Class::Work] {
                for origin in Class::ALL.into_iter().filter(|&o| o >= class) {
                    let wait = self.promote_ns.saturating_mul(origin as i64 - class as i64 + 1);
                    while let Some((idx, at)) = self.ready.oldest(pool, class, origin) {
                        let due = at.saturating_add(wait);
                        if due > now_ns {
                            next = next.min(due);
                            break;
                        }
                        let mut w = self.ready.take(idx);
                        w.class = class.promoted();
                        self.stats.promotions += 1;
                        self.stats.class_mut(class).promoted += 1;
                        tracing::debug!(
                            task = w.task.id,
                            persona = &*w.task.persona,
                            from = class.as_str(),
                            to = w.class.as_str(),
                            waited_ms = (now_ns - at) / 1_000_000,
                            label = w.task.label,
                            "promoted"
                        );
                        self.enqueue(w);
                    }
                }
            }
        }
        self.next_promotion = next;
    }

    /// Grants free slots until every pool is full or has nothing waiting.
    fn dispatch(&mut self, now: Instant) {
        for pool in 0..POOLS {
            while self.free[pool] > 0 {
                let Some(idx) = self.pick(pool, now) else { break };
                let w = self.ready.take(idx);
                self.offer(w, now);
            }
            if self.free[pool] == 0 {
                self.preempt_for(pool);
            }
        }
    }

    /// Higher-class work waits for a slot of `pool` that none is free of: the owners of as
    /// many preemptible background tasks holding one are asked for it back (once each; the
    /// slot frees when the owner calls `done`).
    fn preempt_for(&mut self, pool: usize) {
        let mut waiting: usize =
            [Class::Urgent, Class::Interactive, Class::Work].into_iter().map(|c| self.ready.len(pool, c)).sum();
        if waiting == 0 {
            return;
        }
        for (id, r) in self.running.iter_mut() {
            if waiting == 0 {
                break;
            }
            if r.pool == pool
                && let Some(owner) = r.preempt.take()
                && owner.preempt(*id)
            {
                waiting -= 1;
                self.stats.preempted += 1;
            }
        }
    }

    /// The next task for a free slot of `pool`.
    fn pick(&mut self, pool: usize, now: Instant) -> Option<u32> {
        if let Some(i) = self.ready.best(pool, Class::Urgent) {
            return Some(i);
        }
        if let Some(i) = self.background_turn(pool, now) {
            return Some(i);
        }
        [Class::Interactive, Class::Work, Class::Background].into_iter().find_map(|c| self.ready.best(pool, c))
    }

    /// The oldest background task, if it waited its period behind higher-class work and the
    /// pool's last such turn is a period ago.
    fn background_turn(&mut self, pool: usize, now: Instant) -> Option<u32> {
        if self.ready.len(pool, Class::Interactive) + self.ready.len(pool, Class::Work) == 0 {
            return None;
        }
        let period = self.config.background_period;
        if self.background_turn[pool].is_some_and(|t| now < t + period) {
            return None;
        }
        let (idx, at) = self.ready.oldest(pool, Class::Background, Class::Background)?;
        if now < self.instant(at) + period {
            return None;
        }
        self.background_turn[pool] = Some(now);
        self.stats.background_turns += 1;
        Some(idx)
    }

    /// Applies cadence and budget to a task taken for a free slot of its pool, then answers it.
    fn offer(&mut self, mut w: Waiting, now: Instant) {
        let paced = w.task.paced && w.task.class != Class::Urgent;
        let mut persona = None;
        if paced && self.with_cadence > 0 {
            persona = self.by_name.get(&w.task.persona).copied();
            if let Some(p) = persona
                && self.personas[p as usize].next_due().is_some_and(|d| d > now)
            {
                self.set_aside(p, w);
                return;
            }
        }
        let mut pool = w.pool;
        let mut reservation = None;
        let outcome = if let Some(reason) = w.rules_only {
            Outcome::RulesOnly(reason)
        } else if w.task.max_tokens > 0 {
            let p = persona.unwrap_or_else(|| self.persona_index(&w.task.persona));
            persona = Some(p);
            match self.judge(&w, p, now) {
                Verdict::Run => {
                    let tokens = u64::from(w.task.max_tokens);
                    let (room, tool) = (w.task.room.clone(), w.task.tool.clone());
                    let seq = self.window.reserve(now, p, tokens, w.task.label, room, tool);
                    reservation = Some((seq, tokens));
                    Outcome::Run
                }
                Verdict::Skip(reason) if self.refused(&w, now) == Refused::Skip => Outcome::Skipped(reason),
                Verdict::Skip(reason) if self.refused(&w, now) == Refused::Queue => {
                    return self.queue_for_budget(w, reason);
                }
                Verdict::Skip(reason) | Verdict::RulesOnly(reason) => {
                    if pool != CHEAP && self.free[CHEAP] == 0 {
                        // No cheap slot now: it waits for one, to run without a model.
                        w.rules_only = Some(reason);
                        w.pool = CHEAP;
                        self.enqueue(w);
                        return;
                    }
                    pool = CHEAP;
                    Outcome::RulesOnly(reason)
                }
            }
        } else {
            Outcome::Run
        };
        self.answer(w, pool, outcome, reservation, persona, now);
    }

    /// The budgets persona `p` is judged against.
    fn limits(&self, p: Option<u32>) -> Limits {
        Limits {
            fleet: PersonaBudget {
                inferences_per_hour: self.config.fleet_inferences_per_hour,
                tokens_per_hour: self.config.fleet_tokens_per_hour,
            },
            persona: p.and_then(|p| self.personas[p as usize].budget),
            soft: self.config.budget_soft_limit,
        }
    }

    /// What the budgets allow for a model call of persona `p` now.
    fn judge(&mut self, w: &Waiting, p: u32, now: Instant) -> Verdict {
        self.window.expire(now);
        let limits = self.limits(Some(p));
        let urgent = w.task.class == Class::Urgent;
        self.window.judge(p, u64::from(w.task.max_tokens), w.task.priority, urgent, &limits)
    }

    /// Share of the persona's tightest budget left (1 while nothing was used: no lookup).
    fn budget_left(&self, persona: Option<u32>, name: &str) -> f64 {
        if self.window.fleet().inferences == 0 {
            return 1.0;
        }
        let p = persona.or_else(|| self.by_name.get(name).copied());
        self.window.share_left(p.unwrap_or(u32::MAX), &self.limits(p))
    }

    /// Sends the grant and books the slot, the reservation and the persona's turn.
    fn answer(
        &mut self,
        w: Waiting,
        pool: usize,
        outcome: Outcome,
        reservation: Option<(u64, u64)>,
        persona: Option<u32>,
        now: Instant,
    ) {
        let t = w.task;
        let waited_us = now.saturating_duration_since(t.submitted).as_micros() as u64;
        let deadline_missed = t.deadline.is_some_and(|d| now > d);
        if deadline_missed {
            self.stats.deadline_misses += 1;
            self.stats.class_mut(t.class).deadline_misses += 1;
        }
        match outcome {
            Outcome::Run => {}
            Outcome::RulesOnly(r) => self.stats.rules_only.add(r),
            Outcome::Skipped(r) => self.stats.skipped.add(r),
        }
        tracing::debug!(
            task = t.id,
            persona = &*t.persona,
            class = t.class.as_str(),
            granted_in = w.class.as_str(),
            slot = ?slot_of(pool),
            label = t.label,
            waited_us,
            outcome = ?outcome,
            deadline_missed,
            "grant"
        );
        let budget_left = self.budget_left(persona, &t.persona);
        let grant =
            Grant { task: t.id, slot: slot_of(pool), class: t.class, waited_us, outcome, deadline_missed, budget_left };
        if !t.owner.grant(grant) {
            self.stats.released += 1;
            if let Some((seq, _)) = reservation {
                self.window.settle(seq, None, now);
            }
            return;
        }
        if !outcome.holds_slot() {
            // A skip does not use the persona's turn: its next task aside may go now.
            if let Some(p) = persona {
                self.release_aside(p, now);
            }
            return;
        }
        self.stats.granted += 1;
        self.stats.class_mut(t.class).granted += 1;
        self.free[pool] -= 1;
        self.running_by_class[t.class as usize] += 1;
        if t.paced
            && t.class != Class::Urgent
            && let Some(p) = persona
            && !self.personas[p as usize].cadence.is_zero()
        {
            self.personas[p as usize].last_grant = Some(now);
            self.schedule_due(p);
        }
        let preempt = (t.preemptible && t.class == Class::Background).then_some(t.owner);
        self.running.insert(t.id, Running { persona: t.persona, class: t.class, pool, reservation, preempt });
    }

    fn finish(&mut self, task: TaskId, tokens_used: u32, now: Instant) {
        let Some(r) = self.running.remove(&task) else { return };
        self.free[r.pool] += 1;
        self.running_by_class[r.class as usize] -= 1;
        self.stats.done += 1;
        self.done_rate.add(now.saturating_duration_since(self.epoch).as_secs());
        if let Some((seq, _)) = r.reservation {
            self.window.settle(seq, Some(u64::from(tokens_used)), now);
        }
    }

    fn set_budget(&mut self, persona: Arc<str>, budget: Option<PersonaBudget>) {
        let p = self.persona_index(&persona);
        self.personas[p as usize].budget = budget;
    }

    /// Frees the slots of a persona's running tasks (their model use stays charged) and drops
    /// its waiting ones.
    fn release(&mut self, persona: &str, now: Instant) {
        let ids: Vec<TaskId> = self.running.iter().filter(|(_, r)| &*r.persona == persona).map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(r) = self.running.remove(&id) {
                self.free[r.pool] += 1;
                self.running_by_class[r.class as usize] -= 1;
                self.stats.released += 1;
                if let Some((seq, tokens)) = r.reservation {
                    self.window.settle(seq, Some(tokens), now);
                }
            }
        }
        let dropped = self.ready.take_where(|w| &*w.task.persona == persona);
        self.stats.released += (dropped.len() + self.release_queued(persona)) as u64;
        if let Some(&p) = self.by_name.get(persona) {
            let ps = &mut self.personas[p as usize];
            for Aside(w) in std::mem::take(&mut ps.aside) {
                self.deferred[w.class as usize] -= 1;
                self.stats.released += 1;
            }
        }
    }

    /// What every message ends with: cadences, promotions and queued model calls that came
    /// due, grants, timer.
    fn step(&mut self, now: Instant) {
        self.release_due(now);
        self.release_budget_queue(now);
        self.promote_due(now);
        self.dispatch(now);
        self.arm_timer(now);
    }

    /// Keeps one timer armed for the earliest cadence, promotion or queued model call due.
    fn arm_timer(&mut self, now: Instant) {
        let cadence = self.due.peek().map(|r| r.0.0);
        let promotion = (self.next_promotion != i64::MAX).then(|| self.instant(self.next_promotion) + PROMOTION_SLACK);
        let queued = self.budget_queue_due();
        let Some(at) = [cadence, promotion, queued].into_iter().flatten().min() else { return };
        // What is due now was handled by this step; never spin on a timer in the past.
        if at <= now || self.timer.as_ref().is_some_and(|(armed, _)| *armed <= at) {
            return;
        }
        if let Some((_, old)) = self.timer.take() {
            old.abort();
        }
        let handle = self.myself.send_after(at.saturating_duration_since(now), move || SchedulerMsg::Tick(at));
        self.timer = Some((at, handle));
    }
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        Ok(SchedulerState::new(myself, args))
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        st: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some((_, timer)) = st.timer.take() {
            timer.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        msg: SchedulerMsg,
        st: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        let now = sched::now();
        match msg {
            SchedulerMsg::Wake => st.drain(now),
            SchedulerMsg::Done { task, tokens_used } => st.finish(task, tokens_used, now),
            SchedulerMsg::Cadence { persona, interval } => st.set_cadence(persona, interval, now),
            SchedulerMsg::Budget { persona, budget } => st.set_budget(persona, budget),
            SchedulerMsg::Release(persona) => st.release(&persona, now),
            SchedulerMsg::Cost { since, buckets, reply } => {
                let _ = reply.send(st.cost(since, buckets, now));
                return Ok(());
            }
            SchedulerMsg::Tick(at) => {
                if st.timer.as_ref().is_some_and(|(armed, _)| *armed == at) {
                    st.timer = None;
                }
            }
            SchedulerMsg::Stats(reply) => {
                st.step(now);
                let _ = reply.send(st.snapshot(now));
                return Ok(());
            }
        }
        st.step(now);
        Ok(())
    }
}

/// The budgets of configured personas, for [`spawn_with_budgets`].
pub fn budgets(personas: &[PersonaConfig]) -> HashMap<Arc<str>, PersonaBudget> {
    personas.iter().map(|p| (Arc::from(p.name.as_str()), PersonaBudget::from(p))).collect()
}

/// Spawns the scheduler under `supervisor` and returns the handle personas submit through.
/// Only the fleet's budget applies until personas' budgets are set (`set_budget`).
pub async fn spawn(config: SchedulerConfig, supervisor: Option<ActorCell>) -> Result<SchedulerHandle, SpawnErr> {
    spawn_with_budgets(config, HashMap::new(), supervisor).await
}

/// [`spawn`] with the personas' budgets known from the start (see [`budgets`]).
pub async fn spawn_with_budgets(
    config: SchedulerConfig,
    budgets: HashMap<Arc<str>, PersonaBudget>,
    supervisor: Option<ActorCell>,
) -> Result<SchedulerHandle, SpawnErr> {
    let queues = SchedulerHandle::queues();
    let args = SchedulerArgs { queues: queues.clone(), config, budgets };
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, Scheduler, args, s).await?,
        None => Actor::spawn(None, Scheduler, args).await?,
    };
    Ok(SchedulerHandle::new(queues, actor))
}

#[cfg(test)]
mod tests;
