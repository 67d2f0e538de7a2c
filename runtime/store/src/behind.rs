//! Write-behind: the self-state, working-memory and decision writes the writer holds back per
//! group of personas for `write_behind`, so each row is written once however often it changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::record::{Decision, Eviction, SelfStateData, WmEntry};

/// The writes of one group of personas that the writer holds back (`write_behind`): however
/// often a persona's state or memory changes, or it decides, in that time, each of its rows is
/// written once. Loads and readers read through them, so they see every write sent before them.
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) states: HashMap<Arc<str>, Box<SelfStateData>>,
    /// `None` deletes the row.
    pub(crate) memory: BTreeMap<(Arc<str>, u64), Option<Box<WmEntry>>>,
    pub(crate) evictions: Vec<(Arc<str>, Eviction)>,
    /// Decisions in `decision_log` not yet copied into `decisions`, in number order.
    pub(crate) decisions: Vec<(Arc<str>, u64, Decision)>,
}

impl Held {
    pub(crate) fn len(&self) -> usize {
        self.states.len() + self.memory.len() + self.evictions.len() + self.decisions.len()
    }

    pub(crate) fn memory_of(&self, persona: &Arc<str>) -> impl Iterator<Item = (&u64, &Option<Box<WmEntry>>)> {
        self.memory.range((persona.clone(), 0)..=(persona.clone(), u64::MAX)).map(|((_, id), e)| (id, e))
    }
}

/// A persona's held state, memory and evictions that a hand-off took out of [`Behind`] to write
/// in its transaction: put back if that transaction fails, so the hand-off tried again writes
/// them (its held decisions come back from `decision_log`, which a failed transaction leaves as
/// it was).
pub(crate) struct Unheld {
    pub(crate) persona: Arc<str>,
    pub(crate) state: Option<Box<SelfStateData>>,
    pub(crate) memory: Vec<(u64, Option<Box<WmEntry>>)>,
    pub(crate) evictions: Vec<Eviction>,
}

/// The held writes in groups of personas (by a hash of the name). Each `write_behind / GROUPS`
/// the next group is committed, so each persona's rows are written about once per
/// `write_behind`, and that work is spread over the interval instead of stalling one commit.
pub(crate) struct Behind {
    pub(crate) groups: Vec<Held>,
    /// The group committed next, and when (`None` while nothing is held).
    pub(crate) next: usize,
    pub(crate) next_at: Option<Instant>,
}

impl Behind {
    pub(crate) const GROUPS: usize = 64;
    /// Most writes held before all are committed regardless of their age.
    const MAX: usize = 100_000;

    pub(crate) fn new() -> Behind {
        Behind { groups: (0..Self::GROUPS).map(|_| Held::default()).collect(), next: 0, next_at: None }
    }

    pub(crate) fn group(persona: &str) -> usize {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(persona, &mut h);
        std::hash::Hasher::finish(&h) as usize % Self::GROUPS
    }

    /// The held writes of `persona`, to add to (starting the clock if nothing was held).
    pub(crate) fn of(&mut self, persona: &str, write_behind: Duration) -> &mut Held {
        if self.next_at.is_none() {
            self.next_at = Some(Instant::now() + write_behind / Self::GROUPS as u32);
        }
        &mut self.groups[Self::group(persona)]
    }

    pub(crate) fn get(&self, persona: &str) -> &Held {
        &self.groups[Self::group(persona)]
    }

    pub(crate) fn len(&self) -> usize {
        self.groups.iter().map(Held::len).sum()
    }

    /// How long until the next group is due; `None` when nothing is held.
    pub(crate) fn due_in(&self) -> Option<Duration> {
        self.next_at.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// The groups to write in this batch: all of them, the next one when it is due, or none.
    pub(crate) fn to_write(&self, all: bool) -> Vec<usize> {
        if all || self.len() >= Self::MAX {
            (0..Self::GROUPS).filter(|g| self.groups[*g].len() > 0).collect()
        } else if self.due_in().is_some_and(|d| d.is_zero()) {
            vec![self.next]
        } else {
            Vec::new()
        }
    }

    /// After a commit that wrote `groups` (in the order `to_write` gave them).
    pub(crate) fn written(&mut self, groups: &[usize], write_behind: Duration) {
        for g in groups {
            self.groups[*g] = Held::default();
        }
        if groups.len() == 1 {
            self.next = (self.next + 1) % Self::GROUPS;
        }
        self.next_at = (self.len() > 0).then(|| Instant::now() + write_behind / Self::GROUPS as u32);
    }

    /// Takes the held state, memory and evictions of `persona` out (see [`Unheld`]).
    pub(crate) fn take_of(&mut self, persona: &Arc<str>) -> Unheld {
        let held = &mut self.groups[Self::group(persona)];
        let ids: Vec<u64> = held.memory_of(persona).map(|(id, _)| *id).collect();
        let memory =
            ids.into_iter().filter_map(|id| held.memory.remove(&(persona.clone(), id)).map(|e| (id, e))).collect();
        let (evictions, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut held.evictions).into_iter().partition(|(p, _)| p == persona);
        held.evictions = others;
        Unheld {
            persona: persona.clone(),
            state: held.states.remove(persona),
            memory,
            evictions: evictions.into_iter().map(|(_, e)| e).collect(),
        }
    }

    /// Puts back what [`Behind::take_of`] took, under any write of the persona held since.
    pub(crate) fn put_back(&mut self, u: Unheld, write_behind: Duration) {
        let held = self.of(&u.persona, write_behind);
        if let Some(state) = u.state {
            held.states.entry(u.persona.clone()).or_insert(state);
        }
        for (id, e) in u.memory {
            held.memory.entry((u.persona.clone(), id)).or_insert(e);
        }
        // Before the evictions held since: they came later.
        let since = std::mem::take(&mut held.evictions);
        held.evictions = u.evictions.into_iter().map(|e| (u.persona.clone(), e)).chain(since).collect();
    }

    /// Puts the decisions of `decision_log` (oldest first) back in their groups.
    pub(crate) fn set_decisions(&mut self, logged: Vec<(Arc<str>, u64, Decision)>, write_behind: Duration) {
        for g in &mut self.groups {
            g.decisions.clear();
        }
        for (p, key, d) in logged {
            self.of(&p.clone(), write_behind).decisions.push((p, key, d));
        }
    }
}
