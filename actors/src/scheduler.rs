//! The `Scheduler` actor: grants slots to submitted tasks, highest class first.
//!
//! Tasks arrive through the lock-free queues of [`SchedulerHandle::submit`]; a single
//! coalesced `Wake` tells this actor to drain them. Within a class the task with the
//! highest *aged* priority goes first: priority + `aging_per_30s` per 30 s waited. Aging is
//! linear and the same for every task of a class, so the order of two waiting tasks never
//! changes while they wait and a heap keyed by `priority - rate * submitted_at` is exact.
//! Each slot pool (inference, cheap) has its own heaps, so a task waiting for the scarce
//! inference slot never blocks cheap work.
//!
//! Messages: [`SchedulerMsg`]: `Wake`, `Done(task)`, `Release(persona)`, `Stats`.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mindfleet_runtime::config::SchedulerConfig;
use mindfleet_runtime::sched::{
    Class, Grant, Outcome, SchedulerHandle, SchedulerMsg, SchedulerStats, Slot, SubmitQueues, Task, TaskId,
};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

pub struct Scheduler;

pub struct SchedulerArgs {
    pub queues: Arc<SubmitQueues>,
    pub config: SchedulerConfig,
}

struct Queued {
    key: f64,
    order: u64,
    task: Task,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Highest key first; among equal keys the earlier submission.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.key.total_cmp(&other.key).then_with(|| other.order.cmp(&self.order))
    }
}

struct Running {
    persona: Arc<str>,
    slot: Slot,
}

pub struct SchedulerState {
    queues: Arc<SubmitQueues>,
    config: SchedulerConfig,
    epoch: Instant,
    /// Aging rate in priority per second.
    rate: f64,
    /// `[class][slot]`: slot 0 inference, 1 cheap.
    heaps: [[BinaryHeap<Queued>; 2]; 4],
    running: HashMap<TaskId, Running>,
    free: [usize; 2],
    order: u64,
    stats: SchedulerStats,
}

fn slot_index(s: Slot) -> usize {
    match s {
        Slot::Inference => 0,
        Slot::Cheap => 1,
    }
}

impl SchedulerState {
    fn enqueue(&mut self, task: Task) {
        let at = match task.submitted.checked_duration_since(self.epoch) {
            Some(d) => d.as_secs_f64(),
            None => -self.epoch.duration_since(task.submitted).as_secs_f64(),
        };
        let key = task.priority - self.rate * at;
        self.order += 1;
        let (c, s) = (task.class as usize, slot_index(task.slot));
        self.heaps[c][s].push(Queued { key, order: self.order, task });
    }

    fn drain_submissions(&mut self) {
        self.queues.wake_pending.store(false, Ordering::Release);
        for c in Class::ALL {
            while let Some(t) = self.queues.queues[c as usize].pop() {
                self.enqueue(t);
            }
        }
    }

    /// Grants free slots to the best waiting tasks, strictly by class.
    fn dispatch(&mut self) {
        for s in 0..2 {
            for c in 0..4 {
                while self.free[s] > 0 {
                    let Some(q) = self.heaps[c][s].pop() else { break };
                    let t = q.task;
                    let waited = t.submitted.elapsed();
                    let grant = Grant {
                        task: t.id,
                        slot: t.slot,
                        class: t.class,
                        waited_us: waited.as_micros() as u64,
                        outcome: Outcome::Run,
                        deadline_missed: t.deadline.is_some_and(|d| Instant::now() > d),
                    };
                    self.stats.granted += 1;
                    self.stats.class_mut(t.class).granted += 1;
                    if t.owner.grant(grant) {
                        self.free[s] -= 1;
                        self.running.insert(t.id, Running { persona: t.persona, slot: t.slot });
                    } else {
                        self.stats.released += 1;
                    }
                }
            }
        }
    }

    fn finish(&mut self, id: TaskId) {
        if let Some(r) = self.running.remove(&id) {
            self.free[slot_index(r.slot)] += 1;
            self.stats.done += 1;
        }
    }

    fn release(&mut self, persona: &str) {
        let ids: Vec<TaskId> = self.running.iter().filter(|(_, r)| &*r.persona == persona).map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(r) = self.running.remove(&id) {
                self.free[slot_index(r.slot)] += 1;
                self.stats.released += 1;
            }
        }
        for class in &mut self.heaps {
            for heap in class {
                let before = heap.len();
                heap.retain(|q| &*q.task.persona != persona);
                self.stats.released += (before - heap.len()) as u64;
            }
        }
    }

    fn snapshot(&self) -> SchedulerStats {
        let mut s = self.stats.clone();
        let now = Instant::now();
        for c in Class::ALL {
            let cs = s.class_mut(c);
            cs.queued = self.heaps[c as usize].iter().map(BinaryHeap::len).sum::<usize>()
                + self.queues.queues[c as usize].len();
            cs.oldest_wait_ms = self.heaps[c as usize]
                .iter()
                .flat_map(|h| h.iter())
                .map(|q| now.saturating_duration_since(q.task.submitted).as_secs_f64() * 1e3)
                .fold(0.0, f64::max);
        }
        s.running_inference = self.config.inference_slots - self.free[0];
        s.running_cheap = self.config.cheap_slots - self.free[1];
        s.inference_slots = self.config.inference_slots;
        s.cheap_slots = self.config.cheap_slots;
        s.aging_per_30s = self.config.aging_per_30s;
        let secs = self.epoch.elapsed().as_secs_f64();
        s.throughput_per_s = if secs > 0.0 { s.done as f64 / secs } else { 0.0 };
        s
    }
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        Ok(SchedulerState {
            queues: args.queues,
            config: args.config,
            epoch: Instant::now(),
            rate: args.config.aging_per_30s / 30.0,
            heaps: Default::default(),
            running: HashMap::new(),
            free: [args.config.inference_slots, args.config.cheap_slots],
            order: 0,
            stats: SchedulerStats::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        msg: SchedulerMsg,
        st: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SchedulerMsg::Wake => st.drain_submissions(),
            SchedulerMsg::Done { task, .. } => st.finish(task),
            SchedulerMsg::Cadence { .. } => {}
            SchedulerMsg::Release(persona) => st.release(&persona),
            SchedulerMsg::Stats(reply) => {
                let _ = reply.send(st.snapshot());
                return Ok(());
            }
        }
        st.dispatch();
        Ok(())
    }
}

/// Spawns the scheduler under `supervisor` and returns the handle personas submit through.
pub async fn spawn(config: SchedulerConfig, supervisor: Option<ActorCell>) -> Result<SchedulerHandle, SpawnErr> {
    let queues = SchedulerHandle::queues();
    let args = SchedulerArgs { queues: queues.clone(), config };
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, Scheduler, args, s).await?,
        None => Actor::spawn(None, Scheduler, args).await?,
    };
    Ok(SchedulerHandle::new(queues, actor))
}

#[cfg(test)]
mod tests;
