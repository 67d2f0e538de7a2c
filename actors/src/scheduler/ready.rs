//! The tasks waiting for a slot, indexed two ways without scans.
//!
//! Each waiting task lives in one cell of a slab. Per slot pool and class there is a
//! max-heap by aged priority (what is granted next), and per pool, class and *origin*
//! class (the class it was submitted in) a min-heap by submission time (who waited
//! longest: promotion, the background period, the oldest wait in the stats). Grouping the
//! time heaps by origin keeps each one's promotion deadline a fixed offset from its key.
//!
//! Heap entries point at a cell and carry the cell's generation: taking a task out of the
//! slab bumps the generation, which turns every entry still pointing at it stale. Stale
//! entries are dropped when they reach the top, and a heap with more stale entries than
//! live ones (plus slack) is compacted, so memory stays proportional to the waiting tasks
//! and every operation is amortized O(log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use mindfleet_core::sched::{Class, SkipReason, Slot, Task};

/// Slot pools: inference, cheap.
pub(super) const POOLS: usize = 2;
pub(super) const INFERENCE: usize = 0;
pub(super) const CHEAP: usize = 1;
const CLASSES: usize = Class::ALL.len();
/// Stale entries a heap may hold beyond its live ones before it is compacted.
const STALE_SLACK: usize = 64;

pub(super) fn pool_of(slot: Slot) -> usize {
    match slot {
        Slot::Inference => INFERENCE,
        Slot::Cheap => CHEAP,
    }
}

pub(super) fn slot_of(pool: usize) -> Slot {
    if pool == INFERENCE { Slot::Inference } else { Slot::Cheap }
}

/// A task waiting for a slot (or, aside, for its persona's cadence).
#[derive(Debug)]
pub(super) struct Waiting {
    pub task: Task,
    /// Its class now: the submitted one or higher after promotions.
    pub class: Class,
    /// The pool it waits for: its slot's, or cheap once it is to run rules only.
    pub pool: usize,
    /// `priority - aging rate * submitted`: the heap order, exact under linear aging.
    pub key: f64,
    /// Submission time, nanoseconds from the scheduler's epoch (negative: before it).
    pub at: i64,
    /// Order of arrival: breaks ties of `key`, earlier first.
    pub seq: u64,
    /// Set when the budget allows it to run without a model only.
    pub rules_only: Option<SkipReason>,
}

impl Waiting {
    /// Promotions so far: how far above its origin it is.
    pub fn promotions(&self) -> usize {
        self.task.class as usize - self.class as usize
    }
}

#[derive(Debug)]
struct PrioEntry {
    key: f64,
    seq: u64,
    idx: u32,
    generation: u32,
}

impl PartialEq for PrioEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for PrioEntry {}
impl PartialOrd for PrioEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for PrioEntry {
    /// Highest key first; among equal keys the earlier arrival.
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.total_cmp(&other.key).then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Debug, PartialEq, Eq)]
struct TimeEntry {
    at: i64,
    seq: u64,
    idx: u32,
    generation: u32,
}

impl PartialOrd for TimeEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimeEntry {
    /// Earliest submission first (a max-heap of the reverse order).
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at).then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Default)]
struct Cell {
    generation: u32,
    task: Option<Waiting>,
}

type ByClass<T> = [T; CLASSES];

#[derive(Debug, Default)]
pub(super) struct Ready {
    cells: Vec<Cell>,
    free_cells: Vec<u32>,
    /// `[pool][class]`.
    prio: [ByClass<BinaryHeap<PrioEntry>>; POOLS],
    /// `[pool][class][origin]`; only `origin >= class` is used.
    time: [ByClass<ByClass<BinaryHeap<TimeEntry>>>; POOLS],
    live: [ByClass<usize>; POOLS],
    live_by_origin: [ByClass<ByClass<usize>>; POOLS],
}

/// Drops stale entries from the top of a heap; `valid` tells a live entry.
fn clean_top<E: Ord>(heap: &mut BinaryHeap<E>, valid: impl Fn(&E) -> bool) -> Option<&E> {
    while heap.peek().is_some_and(|e| !valid(e)) {
        heap.pop();
    }
    heap.peek()
}

impl Ready {
    /// Tasks waiting in `pool` and `class`.
    pub fn len(&self, pool: usize, class: Class) -> usize {
        self.live[pool][class as usize]
    }

    pub fn push(&mut self, w: Waiting) {
        let idx = match self.free_cells.pop() {
            Some(i) => i,
            None => {
                self.cells.push(Cell::default());
                (self.cells.len() - 1) as u32
            }
        };
        let cell = &mut self.cells[idx as usize];
        let generation = cell.generation;
        let (p, c, o) = (w.pool, w.class as usize, w.task.class as usize);
        self.prio[p][c].push(PrioEntry { key: w.key, seq: w.seq, idx, generation });
        self.time[p][c][o].push(TimeEntry { at: w.at, seq: w.seq, idx, generation });
        self.live[p][c] += 1;
        self.live_by_origin[p][c][o] += 1;
        cell.task = Some(w);
    }

    /// The cell of the best task waiting in `pool` and `class`.
    pub fn best(&mut self, pool: usize, class: Class) -> Option<u32> {
        let cells = &self.cells;
        clean_top(&mut self.prio[pool][class as usize], |e| cells[e.idx as usize].generation == e.generation)
            .map(|e| e.idx)
    }

    /// The cell and submission time of the task that waited longest in `pool` and `class`
    /// among those submitted in `origin`.
    pub fn oldest(&mut self, pool: usize, class: Class, origin: Class) -> Option<(u32, i64)> {
        let cells = &self.cells;
        clean_top(&mut self.time[pool][class as usize][origin as usize], |e| {
            cells[e.idx as usize].generation == e.generation
        })
        .map(|e| (e.idx, e.at))
    }

    #[cfg(test)]
    pub fn get(&self, idx: u32) -> &Waiting {
        self.cells[idx as usize].task.as_ref().expect("a live cell")
    }

    /// Takes a task out; its heap entries turn stale.
    pub fn take(&mut self, idx: u32) -> Waiting {
        let cell = &mut self.cells[idx as usize];
        let w = cell.task.take().expect("a live cell");
        cell.generation = cell.generation.wrapping_add(1);
        self.free_cells.push(idx);
        let (p, c, o) = (w.pool, w.class as usize, w.task.class as usize);
        self.live[p][c] -= 1;
        self.live_by_origin[p][c][o] -= 1;
        let cells = &self.cells;
        let valid = |idx: u32, generation: u32| cells[idx as usize].generation == generation;
        let heap = &mut self.prio[p][c];
        if heap.len() > 2 * self.live[p][c] + STALE_SLACK {
            heap.retain(|e| valid(e.idx, e.generation));
        }
        let heap = &mut self.time[p][c][o];
        if heap.len() > 2 * self.live_by_origin[p][c][o] + STALE_SLACK {
            heap.retain(|e| valid(e.idx, e.generation));
        }
        w
    }

    /// Takes out every task `drop` selects (O(n): for `Release`, not for dispatch).
    pub fn take_where(&mut self, mut drop: impl FnMut(&Waiting) -> bool) -> Vec<Waiting> {
        let selected: Vec<u32> = (0..self.cells.len() as u32)
            .filter(|&i| self.cells[i as usize].task.as_ref().is_some_and(&mut drop))
            .collect();
        selected.into_iter().map(|i| self.take(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::sched::Owner;

    fn waiting(seq: u64, class: Class, key: f64, at: i64) -> Waiting {
        let (tx, _) = crossbeam_channel::unbounded();
        let task = Task::new("p".into(), class, key, Slot::Cheap, "t", Owner::Channel(tx));
        Waiting { task, class, pool: CHEAP, key, at, seq, rules_only: None }
    }

    #[test]
    fn best_and_oldest_skip_taken_tasks() {
        let mut r = Ready::default();
        r.push(waiting(1, Class::Work, 0.5, 30));
        r.push(waiting(2, Class::Work, 0.9, 20));
        r.push(waiting(3, Class::Work, 0.1, 10));
        let best = r.best(CHEAP, Class::Work).unwrap();
        assert_eq!(r.get(best).seq, 2);
        let (oldest, at) = r.oldest(CHEAP, Class::Work, Class::Work).unwrap();
        assert_eq!((r.get(oldest).seq, at), (3, 10));
        r.take(oldest);
        r.take(best);
        let best = r.best(CHEAP, Class::Work).unwrap();
        assert_eq!(r.get(best).seq, 1);
        assert_eq!(r.oldest(CHEAP, Class::Work, Class::Work).unwrap().1, 30);
        assert_eq!(r.len(CHEAP, Class::Work), 1);
    }

    #[test]
    fn stale_entries_are_compacted() {
        let mut r = Ready::default();
        // One task stays while many pass through: its heaps must not keep their ghosts.
        r.push(waiting(0, Class::Background, 0.0, 0));
        for i in 1..10_000 {
            r.push(waiting(i, Class::Background, 1.0, i as i64));
            let best = r.best(CHEAP, Class::Background).unwrap();
            r.take(best);
        }
        assert_eq!(r.len(CHEAP, Class::Background), 1);
        let bg = Class::Background as usize;
        assert!(r.prio[CHEAP][bg].len() <= 2 + STALE_SLACK);
        assert!(r.time[CHEAP][bg][bg].len() <= 2 + STALE_SLACK);
        assert_eq!(r.cells.len(), 2);
    }
}
