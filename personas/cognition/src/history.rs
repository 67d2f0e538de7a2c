//! A persona's recorded history: everything its lifecycle took in, in the order it took it, so
//! that the same lifecycle fed the same entries again makes the same decisions
//! (`mindfleet replay`). The lifecycle reads no clock, channel or random source, so its inputs
//! and their times are all it depends on; what it asks the world for (a model's answer, a tool's
//! result, a grant, a timer) comes back as an input and is recorded as one.
//!
//! Entries are JSON (`[storage] record`, table `record`, packed a batch to a row): readable in
//! an exported history, and an older entry still reads when a type gains a field with a
//! default. Floats round-trip exactly.
//!
//! ```text
//! Begin        the lifecycle was built (a start or a restart): what it was given
//! Fed          an input, at its time
//! Changed      a self-state change it asked for (the journal keeps only the last snapshot)
//! Committed    written by storage with a commit: the journal rows it made
//! ```

use serde::{Deserialize, Serialize};

use mindfleet_core::messages::{Deferral, Delivery, PersonaCommit};
use mindfleet_core::record::{Committed, Learning, OutboxEntry, fnv1a};

use crate::lifecycle::{Input, Setup};
use crate::mind::Update;
use crate::references::RefBook;

/// One entry of a persona's recorded history.
#[derive(Debug, Serialize, Deserialize)]
pub enum Entry {
    Begin(Box<Begin>),
    Fed { at: i64, input: Input },
    Changed(Update),
    Committed(Committed),
}

/// What a lifecycle is built from ([`crate::lifecycle::Lifecycle::new`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Begin {
    pub setup: Setup,
    pub learnings: Vec<Learning>,
    pub refs: RefBook,
    pub deferred: Vec<(Delivery, Deferral)>,
}

/// [`Entry`] by reference, to record what the lifecycle is about to take without a copy: it
/// writes the same JSON.
#[derive(Serialize)]
enum EntryRef<'a> {
    Begin(&'a Begin),
    Fed { at: i64, input: &'a Input },
    Changed(&'a Update),
}

/// The entry of the lifecycle built from `begin`.
pub fn begin_entry(begin: &Begin) -> Vec<u8> {
    entry(&EntryRef::Begin(begin))
}

/// The entry of `input`, taken at `at`.
pub fn fed_entry(at: i64, input: &Input) -> Vec<u8> {
    entry(&EntryRef::Fed { at, input })
}

/// The entry of the self-state change `u`.
pub fn changed_entry(u: &Update) -> Vec<u8> {
    entry(&EntryRef::Changed(u))
}

fn entry(e: &EntryRef<'_>) -> Vec<u8> {
    serde_json::to_vec(e).expect("a recorded entry is plain data")
}

/// The digest of what commit `c` says (its delivery, decision, plan, reply and deferral; the
/// reply's id is given after, outside the lifecycle): what a replay checks each commit by, its
/// journal rows or not.
pub fn digest(c: &PersonaCommit) -> u64 {
    let reply = c.reply.as_ref().map(|(entry, _)| OutboxEntry { event_id: String::new(), ..entry.clone() });
    let said = serde_json::to_vec(&(c.seq, &c.decision, &c.plan, &reply, &c.defer)).expect("plain data");
    fnv1a(0, &said)
}

impl Entry {
    /// Reads an entry.
    pub fn read(entry: &[u8]) -> Result<Entry, serde_json::Error> {
        serde_json::from_slice(entry)
    }

    /// What kind of entry it is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::Begin(_) => "begin",
            Entry::Fed { .. } => "input",
            Entry::Changed(_) => "self-state change",
            Entry::Committed(_) => "commit",
        }
    }
}
