//! A persona's recorded history: everything its lifecycle took in, in the order it took it, so
//! that the same lifecycle fed the same entries again makes the same decisions
//! (`mindfleet replay`). The lifecycle reads no clock, channel or random source, so its inputs
//! and their times are all it depends on; what it asks the world for (a model's answer, a tool's
//! result, a grant, a timer) comes back as an input and is recorded as one.
//!
//! Entries are stored (`[storage] record`, table `recorded`, packed a batch to a row) in binary
//! when they come often and their types are stored that way already (deliveries, grants,
//! working memory, self-state changes; `RecordBatch::BINARY`, bincode as the journal's rows),
//! the others as JSON (model answers, tool results, what a run begins with: their types are
//! not all bincode's). An exported history is all JSON ([`to_json`]): readable, and an older
//! entry still reads when a type gains a field with a default. Floats round-trip exactly in
//! both.
//!
//! ```text
//! Begin        the lifecycle was built (a start or a restart): what it was given
//! Fed          an input, at its time
//! Viewed       a self-state snapshot fed, as what changed since the one before in the run
//! Handed       the inbox handed over an event delivered earlier in the run: its seq alone
//! Changed      a self-state change it asked for (the journal keeps only the last snapshot)
//! Kept         a change of its preoccupations, as stretches of the run's last such change
//! Committed    written by storage with a commit: the journal rows it made
//! ```
//!
//! `Viewed`, `Handed` and `Kept` are how a [`Recorder`] writes what comes most often and
//! repeats most of what the run already recorded; a [`Reading`] gives them back as the
//! inputs they were (`Fed`), so they depend on the entries before them in their run, which
//! retention keeps (it forgets whole runs).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use mindfleet_core::history::{Committed, RecordBatch};
use mindfleet_core::messages::{Deferral, Delivery, PersonaCommit};
use mindfleet_core::record::{Focus, Learning, Mood, OutboxEntry, Preoccupation, SelfView};

use crate::lifecycle::{Input, Setup};
use crate::mind::Update;
use crate::references::RefBook;

/// One entry of a persona's recorded history, as a [`Reading`] gives it back.
#[derive(Debug)]
pub enum Entry<'a> {
    Begin(Box<Begin>),
    Fed { at: i64, input: Input },
    Changed(Change<'a>),
    Committed(Committed),
}

/// A self-state change as a history holds it.
#[derive(Debug)]
pub enum Change<'a> {
    /// As stored in binary: checked against a change by its encoding, read only to show how it
    /// differs (a replay checks every change the lifecycle asks for, and most are the same).
    Stored(&'a [u8]),
    Read(Update),
}

/// How a binary `Changed` entry begins: its tag, then the variant's index in [`Stored`]
/// (bincode writes an index under 251 as one byte).
const CHANGED: [u8; 2] = [RecordBatch::BINARY, 4];

impl Change<'_> {
    /// Whether `u` is this change, bit for bit (`scratch`: room for `u`'s encoding).
    pub fn is(&self, u: &Update, scratch: &mut Vec<u8>) -> bool {
        scratch.clear();
        match self {
            Change::Stored(bytes) => {
                scratch.push(RecordBatch::BINARY);
                mindfleet_core::stored::encode_to(&StoredRef::Changed(u), scratch);
                scratch == bytes
            }
            Change::Read(recorded) => {
                mindfleet_core::stored::encode_to(recorded, scratch);
                let at = scratch.len();
                mindfleet_core::stored::encode_to(u, scratch);
                scratch[..at] == scratch[at..]
            }
        }
    }

    /// The change.
    pub fn read(self) -> Result<Update, String> {
        match self {
            Change::Stored(bytes) => match Stored::of(bytes)? {
                Stored::Changed(u) => Ok(u),
                _ => Err("not a self-state change".into()),
            },
            Change::Read(u) => Ok(u),
        }
    }
}

/// What a lifecycle is built from ([`crate::lifecycle::Lifecycle::new`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Begin {
    pub setup: Setup,
    pub learnings: Vec<Learning>,
    pub refs: RefBook,
    pub deferred: Vec<(Delivery, Deferral)>,
}

/// An entry as stored. Binary entries are this enum's bincode, so [`StoredRef`] lists the same
/// variants in the same order.
#[derive(Serialize, Deserialize)]
enum Stored {
    Begin(Box<Begin>),
    Fed { at: i64, input: Input },
    Viewed { at: i64, view: ViewChange },
    Handed { at: i64, seq: u64, left: usize },
    Changed(Update),
    Kept(Vec<Preoccupied>),
    Committed(Committed),
}

/// [`Stored`] by reference, to record what the lifecycle is about to take without a copy.
#[derive(Serialize)]
enum StoredRef<'a> {
    Begin(&'a Begin),
    Fed { at: i64, input: &'a Input },
    Viewed { at: i64, view: &'a ViewChange },
    Handed { at: i64, seq: u64, left: usize },
    Changed(&'a Update),
    Kept(&'a [Preoccupied]),
}

impl StoredRef<'_> {
    /// Whether it is stored in binary: it comes often, and its types are bincode's (checked
    /// by a round trip of each in the tests).
    fn binary(&self) -> bool {
        match self {
            StoredRef::Begin(_) => false,
            StoredRef::Fed { input, .. } => matches!(
                input,
                Input::Start
                    | Input::Deliver(_)
                    | Input::Next(..)
                    | Input::Enriched { .. }
                    | Input::StepEnriched { .. }
                    | Input::Granted { .. }
                    | Input::WorkingMemory { .. }
                    | Input::LongTermRecalled { .. }
                    | Input::RedundancyChecked { .. }
                    | Input::StudyNoted { .. }
                    | Input::ApprovalAnswered(_)
                    | Input::TurnOverdue(_)
                    | Input::CoordinatorGone(_)
                    | Input::DeferralsDue
                    | Input::InboxRestarted
            ),
            StoredRef::Viewed { .. } | StoredRef::Handed { .. } | StoredRef::Changed(_) | StoredRef::Kept(_) => true,
        }
    }
}

impl Stored {
    /// The entry `bytes` hold: binary (by its tag) or JSON.
    fn of(bytes: &[u8]) -> Result<Stored, String> {
        match bytes.split_first() {
            Some((&RecordBatch::BINARY, fields)) => mindfleet_core::stored::decode(fields).map_err(|e| e.to_string()),
            Some((&RecordBatch::COMMITTED, fields)) => {
                mindfleet_core::stored::decode(fields).map(Stored::Committed).map_err(|e| e.to_string())
            }
            _ => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        }
    }
}

/// A self-state view as what changed since the one before it (a field left out, or `None`, is
/// as it was).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ViewChange {
    focus: Option<Focus>,
    preoccupations: Option<Vec<Preoccupied>>,
    load: Option<f64>,
    capacity: Option<f64>,
    mood: Option<Mood>,
    dormant: Option<bool>,
    spoke_in: Option<BTreeMap<String, i64>>,
}

/// JSON leaves out what did not change; binary, not self-describing, writes every field.
impl Serialize for ViewChange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        fn field<S: SerializeStruct, T: Serialize>(
            st: &mut S,
            all: bool,
            name: &'static str,
            v: &Option<T>,
        ) -> Result<(), S::Error> {
            if all || v.is_some() { st.serialize_field(name, v) } else { st.skip_field(name) }
        }
        let all = !s.is_human_readable();
        let mut st = s.serialize_struct("ViewChange", 7)?;
        field(&mut st, all, "focus", &self.focus)?;
        field(&mut st, all, "preoccupations", &self.preoccupations)?;
        field(&mut st, all, "load", &self.load)?;
        field(&mut st, all, "capacity", &self.capacity)?;
        field(&mut st, all, "mood", &self.mood)?;
        field(&mut st, all, "dormant", &self.dormant)?;
        field(&mut st, all, "spoke_in", &self.spoke_in)?;
        st.end()
    }
}

/// A stretch of a new preoccupation list: the one before's from `.0`, `.1` long, or a new one.
#[derive(Debug, Serialize, Deserialize)]
enum Preoccupied {
    Kept(usize, usize),
    New(Preoccupation),
}

impl ViewChange {
    /// What changed from `before` to `now`.
    fn between(before: &SelfView, now: &SelfView) -> ViewChange {
        fn changed<T: PartialEq + Clone>(a: &T, b: &T) -> Option<T> {
            (a != b).then(|| b.clone())
        }
        // Bit for bit: a float that prints the same but is not is still a change.
        let float = |a: f64, b: f64| (a.to_bits() != b.to_bits()).then_some(b);
        ViewChange {
            focus: changed(&before.focus, &now.focus),
            preoccupations: (before.preoccupations != now.preoccupations)
                .then(|| stretches(&before.preoccupations, &now.preoccupations)),
            load: float(before.cognitive_load, now.cognitive_load),
            capacity: float(before.available_capacity, now.available_capacity),
            mood: changed(&before.mood, &now.mood),
            dormant: changed(&before.dormant, &now.dormant),
            spoke_in: changed(&before.spoke_in, &now.spoke_in),
        }
    }

    /// `before` changed by it (what did not change is moved over, not copied).
    fn apply(self, before: SelfView) -> Result<SelfView, String> {
        let preoccupations = match self.preoccupations {
            None => before.preoccupations,
            Some(parts) => unstretch(&before.preoccupations, parts)?,
        };
        Ok(SelfView {
            focus: self.focus.unwrap_or(before.focus),
            preoccupations,
            cognitive_load: self.load.unwrap_or(before.cognitive_load),
            available_capacity: self.capacity.unwrap_or(before.available_capacity),
            mood: self.mood.unwrap_or(before.mood),
            dormant: self.dormant.unwrap_or(before.dormant),
            spoke_in: self.spoke_in.unwrap_or(before.spoke_in),
        })
    }
}

/// `now` as stretches of `before` and new preoccupations.
fn stretches(before: &[Preoccupation], now: &[Preoccupation]) -> Vec<Preoccupied> {
    let mut parts: Vec<Preoccupied> = Vec::new();
    for p in now {
        if let Some(Preoccupied::Kept(from, n)) = parts.last_mut()
            && before.get(*from + *n) == Some(p)
        {
            *n += 1;
        } else if let Some(at) = before.iter().position(|b| b == p) {
            parts.push(Preoccupied::Kept(at, 1));
        } else {
            parts.push(Preoccupied::New(p.clone()));
        }
    }
    parts
}

/// The list `parts` makes of `before` ([`stretches`]).
fn unstretch(before: &[Preoccupation], parts: Vec<Preoccupied>) -> Result<Vec<Preoccupation>, String> {
    let mut list = Vec::new();
    for part in parts {
        match part {
            Preoccupied::Kept(from, n) => {
                let to = from.saturating_add(n);
                list.extend_from_slice(
                    before
                        .get(from..to)
                        .ok_or_else(|| format!("it keeps preoccupations {from}..{to} of a list of {}", before.len()))?,
                )
            }
            Preoccupied::New(p) => list.push(p),
        }
    }
    Ok(list)
}

/// The same delivery: what a `Handed` entry may stand for.
fn same(a: &Delivery, b: &Delivery) -> bool {
    a.seq == b.seq
        && a.crashes == b.crashes
        && a.audience == b.audience
        && (Arc::ptr_eq(&a.event, &b.event) || a.event == b.event)
}

/// Deliveries a recorder remembers to write their hand-over by seq; past it, the oldest are
/// forgotten (their hand-over is written whole).
const DELIVERED_KEPT: usize = 1024;

/// Writes a run of a lifecycle as history entries.
pub struct Recorder {
    /// The entries held, framed (`RecordBatch::frame`).
    frames: Vec<u8>,
    held: u64,
    /// Whether the run was fed a self-state view yet: its first is written against the
    /// default view, every later one against the lifecycle's (the view fed before it).
    viewed: bool,
    /// Deliveries fed in the run and not handed over yet, by seq.
    delivered: BTreeMap<u64, Delivery>,
    /// The preoccupations of the run's last change of them.
    preoccupations: Vec<Preoccupation>,
}

impl Recorder {
    /// A run of the lifecycle built from `begin`.
    pub fn begin(begin: &Begin) -> Recorder {
        let mut r = Recorder {
            frames: Vec::new(),
            held: 0,
            viewed: false,
            delivered: BTreeMap::new(),
            preoccupations: Vec::new(),
        };
        r.write(&StoredRef::Begin(begin));
        r
    }

    /// `input`, fed at `at` to a lifecycle whose view of its self-state is `before`
    /// ([`Lifecycle::snapshot`](crate::lifecycle::Lifecycle::snapshot), before it takes `input`).
    pub fn fed(&mut self, at: i64, input: &Input, before: &SelfView) {
        match input {
            Input::SelfState(view) => {
                let change = if std::mem::replace(&mut self.viewed, true) {
                    ViewChange::between(before, view)
                } else {
                    ViewChange::between(&SelfView::default(), view)
                };
                self.write(&StoredRef::Viewed { at, view: &change });
            }
            Input::Next(d, left) if self.delivered.remove(&d.seq).is_some_and(|was| same(&was, d)) => {
                self.write(&StoredRef::Handed { at, seq: d.seq, left: *left });
            }
            _ => {
                if let Input::Deliver(d) = input {
                    self.delivered.insert(d.seq, d.clone());
                    if self.delivered.len() > DELIVERED_KEPT {
                        self.delivered.pop_first();
                    }
                }
                self.write(&StoredRef::Fed { at, input });
            }
        }
    }

    /// The self-state change `u`, asked for.
    pub fn changed(&mut self, u: &Update) {
        if let Update::Preoccupations(now) = u {
            let parts = stretches(&self.preoccupations, now);
            self.preoccupations.clone_from(now);
            self.write(&StoredRef::Kept(&parts));
        } else {
            self.write(&StoredRef::Changed(u));
        }
    }

    /// How many entries it holds.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The entries it holds, packed and handed over (its run goes on).
    pub fn take(&mut self) -> RecordBatch {
        let batch = RecordBatch::from_frames(&self.frames, self.held);
        self.frames.clear();
        self.held = 0;
        batch
    }

    fn write(&mut self, e: &StoredRef<'_>) {
        RecordBatch::frame(&mut self.frames, |f| {
            if e.binary() {
                f.push(RecordBatch::BINARY);
                mindfleet_core::stored::encode_to(e, f);
            } else {
                serde_json::to_writer(f, e).expect("a recorded entry is plain data");
            }
        });
        self.held += 1;
    }
}

/// Reads a history's entries back, in order: what a `Viewed` or `Handed` entry stands for
/// depends on the entries before it in its run.
#[derive(Default)]
pub struct Reading {
    /// A run's beginning was read.
    begun: bool,
    view: SelfView,
    delivered: HashMap<u64, Delivery>,
    preoccupations: Vec<Preoccupation>,
}

impl Reading {
    /// The next entry, from its bytes; `None` for an entry that stands for what its run recorded
    /// before and whose run's beginning was not read (retention forgot it).
    pub fn read<'a>(&mut self, bytes: &'a [u8]) -> Result<Option<Entry<'a>>, String> {
        if bytes.starts_with(&CHANGED) {
            return Ok(Some(Entry::Changed(Change::Stored(bytes))));
        }
        let stored = Stored::of(bytes)?;
        if !self.begun && matches!(stored, Stored::Viewed { .. } | Stored::Handed { .. } | Stored::Kept(_)) {
            return Ok(None);
        }
        Ok(Some(match stored {
            Stored::Begin(b) => {
                *self = Reading { begun: true, ..Reading::default() };
                Entry::Begin(b)
            }
            Stored::Fed { at, input } => {
                // As the recorder keeps them: a delivery until it is handed over.
                match &input {
                    Input::Deliver(d) => {
                        self.delivered.insert(d.seq, d.clone());
                    }
                    Input::Next(d, _) => {
                        self.delivered.remove(&d.seq);
                    }
                    _ => {}
                }
                Entry::Fed { at, input }
            }
            Stored::Viewed { at, view } => {
                self.view =
                    view.apply(std::mem::take(&mut self.view)).map_err(|e| format!("a self-state view: {e}"))?;
                Entry::Fed { at, input: Input::SelfState(Box::new(self.view.clone())) }
            }
            Stored::Handed { at, seq, left } => {
                let d = self.delivered.remove(&seq).ok_or_else(|| {
                    format!("it hands over delivery {seq}, which was not delivered earlier in its run")
                })?;
                Entry::Fed { at, input: Input::Next(d, left) }
            }
            Stored::Changed(u) => Entry::Changed(Change::Read(u)),
            Stored::Kept(parts) => {
                let now =
                    unstretch(&self.preoccupations, parts).map_err(|e| format!("a change of preoccupations: {e}"))?;
                self.preoccupations.clone_from(&now);
                Entry::Changed(Change::Read(Update::Preoccupations(now)))
            }
            Stored::Committed(c) => Entry::Committed(c),
        }))
    }
}

/// A hasher that an encoding is written into, so that a digest needs no buffer.
struct HashWriter(twox_hash::XxHash3_64);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The digest of what commit `c` says (its delivery, decision, plan, reply and deferral, as
/// the journal stores them; the reply's id is given after, outside the lifecycle): what a
/// replay checks each commit by, its journal rows or not.
pub fn digest(c: &PersonaCommit) -> u64 {
    let reply = c.reply.as_ref().map(|(entry, _)| OutboxEntry { event_id: String::new(), ..entry.clone() });
    let mut h = HashWriter(twox_hash::XxHash3_64::with_seed(0));
    mindfleet_core::stored::encode_to(&(c.seq, &c.decision, &c.plan, &reply, &c.defer), &mut h);
    h.0.finish()
}

/// An entry as stored, as JSON (as an exported history holds it).
pub fn to_json(entry: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    match entry.first() {
        Some(&b'{') => Ok(entry.into()),
        _ => Ok(serde_json::to_vec(&Stored::of(entry)?).map_err(|e| e.to_string())?.into()),
    }
}

#[cfg(test)]
mod tests {
    use mindfleet_core::event::EventInput;
    use proptest::prelude::*;

    use super::*;
    use crate::mind::Activity;

    fn preoccupation(i: u8) -> Preoccupation {
        Preoccupation {
            concern: format!("concern {i}"),
            priority: f64::from(i) / 10.0,
            domain: "chat".into(),
            event_id: format!("e{i}"),
            created_us: i64::from(i),
        }
    }

    fn view(list: &[u8], load: f64, room: Option<&str>) -> SelfView {
        SelfView {
            preoccupations: list.iter().map(|i| preoccupation(*i)).collect(),
            cognitive_load: load,
            spoke_in: room.map(|r| BTreeMap::from([(r.to_string(), 7)])).unwrap_or_default(),
            ..SelfView::default()
        }
    }

    fn delivery(seq: u64, text: &str) -> Delivery {
        let e = EventInput {
            domain: "chat".into(),
            room: "r".into(),
            from: "a".into(),
            text: text.into(),
            ..Default::default()
        };
        Delivery { seq, event: Arc::new(e.validate().expect("valid")), crashes: 0, audience: 1 }
    }

    fn begin() -> Begin {
        let toml = "[[persona]]\nname = \"p\"\nrole = \"r\"\n";
        let fleet =
            mindfleet_core::config::FleetConfig::from_toml(std::path::Path::new("f.toml"), toml).expect("fleet");
        Begin {
            setup: Setup {
                config: Arc::new(fleet.personas[0].clone()),
                llm: false,
                index: false,
                conversation: false,
                references: None,
                redundancy: false,
                open_answers: false,
                personas: Arc::from(vec!["p".to_string()]),
                turn_timeout: std::time::Duration::from_secs(5),
                first_task: 1,
                tools: false,
                native_tools: false,
            },
            learnings: Vec::new(),
            refs: RefBook::default(),
            deferred: Vec::new(),
        }
    }

    /// What `inputs` read back as, recorded by a recorder, and the recorded entries.
    fn round_trip(inputs: &[Input]) -> (Vec<serde_json::Value>, Vec<Vec<u8>>) {
        let mut r = Recorder::begin(&begin());
        // What a lifecycle's view is before each input: the last one fed, and before the
        // first the config's dormancy (which the first view is not written against).
        let mut before = SelfView { dormant: true, ..SelfView::default() };
        for (i, input) in inputs.iter().enumerate() {
            r.fed(i as i64, input, &before);
            if let Input::SelfState(view) = input {
                before = (**view).clone();
            }
        }
        let entries = RecordBatch::unpack(&r.take().stored).expect("unpacks");
        let mut reading = Reading::default();
        let read = entries
            .iter()
            .filter_map(|e| match reading.read(e).expect("reads").expect("its run begun") {
                Entry::Fed { input, .. } => Some(serde_json::to_value(&input).expect("json")),
                _ => None,
            })
            .collect();
        (read, entries)
    }

    #[test]
    fn a_recorded_run_reads_back_as_the_inputs_fed() {
        let (d1, d2) = (delivery(1, "one"), delivery(2, "two"));
        let inputs = vec![
            Input::Deliver(d1.clone()),
            Input::SelfState(Box::new(SelfView { dormant: true, ..view(&[1, 2, 3], 0.5, Some("r")) })),
            Input::Next(d1.clone(), 0),
            Input::SelfState(Box::new(view(&[2, 4, 3], 0.5, Some("r")))),
            // Handed over again, or never delivered in the run, or changed since: whole.
            Input::Next(d1.clone(), 0),
            Input::Next(d2.clone(), 3),
            Input::Deliver(d2.clone()),
            Input::Next(Delivery { crashes: 1, ..d2.clone() }, 0),
            Input::SelfState(Box::new(view(&[], 0.25, None))),
        ];
        let (read, entries) = round_trip(&inputs);
        let fed: Vec<_> = inputs.iter().map(|i| serde_json::to_value(i).expect("json")).collect();
        assert_eq!(read, fed);
        let kinds: Vec<String> = entries[1..]
            .iter()
            .map(|e| {
                serde_json::from_slice::<serde_json::Value>(&to_json(e).expect("transcodes"))
                    .expect("json")
                    .as_object()
                    .expect("an object")
                    .keys()
                    .next()
                    .cloned()
                    .expect("a kind")
            })
            .collect();
        assert_eq!(kinds, ["Fed", "Viewed", "Handed", "Viewed", "Fed", "Fed", "Fed", "Fed", "Viewed"]);
        // A view keeps what the one before had by position.
        let second = String::from_utf8_lossy(&to_json(&entries[4]).expect("transcodes")).into_owned();
        assert!(second.contains(r#"{"Kept":[1,1]}"#) && second.contains(r#"{"Kept":[2,1]}"#), "{second}");
        assert!(!second.contains("load"), "{second}");
    }

    #[test]
    fn a_change_of_preoccupations_reads_back_whole() {
        let lists = [vec![1, 2, 3], vec![2, 3, 4], vec![], vec![5, 5, 1]];
        let mut r = Recorder::begin(&begin());
        let mut changes = Vec::new();
        for list in &lists {
            changes.push(Update::Preoccupations(list.iter().map(|i| preoccupation(*i)).collect()));
            changes.push(Update::SetDormant(false));
        }
        for u in &changes {
            r.changed(u);
        }
        let entries = RecordBatch::unpack(&r.take().stored).expect("unpacks");
        let third = to_json(&entries[3]).expect("transcodes");
        assert!(String::from_utf8_lossy(&third).starts_with(r#"{"Kept":[{"Kept":[1,2]},{"New""#));
        let mut reading = Reading::default();
        let read: Vec<_> = entries
            .iter()
            .filter_map(|e| match reading.read(e).expect("reads").expect("its run begun") {
                Entry::Changed(u) => Some(serde_json::to_value(u.read().expect("a change")).expect("json")),
                _ => None,
            })
            .collect();
        let wanted: Vec<_> = changes.iter().map(|u| serde_json::to_value(u).expect("json")).collect();
        assert_eq!(read, wanted);
    }

    #[test]
    fn an_entry_that_stands_for_what_its_run_did_not_record_is_an_error() {
        let mut reading = Reading::default();
        let handed = br#"{"Handed":{"at":1,"seq":9,"left":0}}"#;
        // Its run's beginning not read (retention forgot it): left unread.
        assert!(reading.read(handed).expect("reads").is_none());
        let mut r = Recorder::begin(&begin());
        let begun = RecordBatch::unpack(&r.take().stored).expect("unpacks");
        reading.read(&begun[0]).expect("a beginning");
        let e = reading.read(handed).expect_err("nothing delivered");
        assert!(e.contains("delivery 9"), "{e}");
        let e = reading
            .read(br#"{"Viewed":{"at":1,"view":{"preoccupations":[{"Kept":[0,2]}]}}}"#)
            .expect_err("an empty list");
        assert!(e.contains("preoccupations 0..2 of a list of 0"), "{e}");
    }

    /// Each input stored in binary reads back as it was fed, its optional parts there or not,
    /// and exports as the JSON it would have been stored as.
    #[test]
    fn binary_entries_read_back_and_export_as_json() {
        let wm = r#"{"id":3,"domain":"chat","kind":"observation","text":"t","importance":0.5,"event_id":null,
            "relevance":0.25,"created_us":1,"last_access_us":2,"access_count":3,"expires_us":4}"#;
        let memory = r#"{"experiences":[{"item":{"domain":"chat","task":"t","trajectory":["a"],"success":true,
            "learnings":[],"event_id":null,"at_us":5},"score":0.5}],"procedures":[{"name":"n","domain":"chat",
            "steps":["recall_memory"],"success_rate":0.75,"times_used":2,"updated_us":6}],"profile":{"user":"u",
            "topics":[["x",1]],"preferences":[],"technical_level":"expert","confidence":0.5,"messages":1,
            "updated_us":7},"knowledge":[],"by_words":"no vectors","adapter":null}"#;
        let enrichment = r#"{"matches":[{"id":"r","via":"tag","matched":["x"],"score":1.0}],"semantic_off":null}"#;
        let grant = r#"{"task":4,"slot":"cheap","class":"urgent","waited_us":7,"outcome":"Run",
            "deadline_missed":false,"budget_left":0.1}"#;
        let inputs = [
            r#""Start""#.to_string(),
            format!(r#"{{"Enriched":{{"seq":1,"enrichment":{enrichment}}}}}"#),
            r#"{"StepEnriched":{"task":2,"enrichment":{"matches":[],"semantic_off":"off"}}}"#.into(),
            format!(r#"{{"Granted":{{"grant":{grant},"failure":null}}}}"#),
            format!(r#"{{"Granted":{{"grant":{grant},"failure":"timeout"}}}}"#),
            format!(r#"{{"WorkingMemory":{{"task":5,"answer":{{"Ok":[{wm}]}}}}}}"#),
            r#"{"WorkingMemory":{"task":5,"answer":{"Err":"gone"}}}"#.into(),
            format!(r#"{{"LongTermRecalled":{{"event_id":"e","memory":{memory},"note":"n"}}}}"#),
            r#"{"RedundancyChecked":{"task":7,"answer":{"Ok":{"similarity":0.9,"threshold":0.8,"reason":"r"}}}}"#
                .into(),
            r#"{"RedundancyChecked":{"task":7,"answer":{"Ok":null}}}"#.into(),
            r#"{"StudyNoted":{"task":8,"topic":"t","noted":true}}"#.into(),
            r#"{"ApprovalAnswered":"a1"}"#.into(),
            r#"{"TurnOverdue":"e1"}"#.into(),
            r#"{"CoordinatorGone":"e2"}"#.into(),
            r#""DeferralsDue""#.into(),
            r#""InboxRestarted""#.into(),
        ];
        let mut inputs: Vec<Input> = inputs.iter().map(|j| serde_json::from_str(j).expect(j)).collect();
        inputs.push(Input::Deliver(delivery(9, "nine")));
        inputs.push(Input::Next(delivery(10, "ten"), 2));
        let (read, entries) = round_trip(&inputs);
        let fed: Vec<_> = inputs.iter().map(|i| serde_json::to_value(i).expect("json")).collect();
        assert_eq!(read, fed);
        for (e, input) in entries[1..].iter().zip(&fed) {
            assert_eq!(e[0], RecordBatch::BINARY, "{input}");
            let json: serde_json::Value = serde_json::from_slice(&to_json(e).expect("transcodes")).expect("json");
            assert_eq!(json["Fed"]["input"], *input);
        }
        // Self-state changes too, and a commit's note as storage writes it.
        let activity = Activity { engaged: Some(("chat".into(), "o".into(), 0.5)), ..Activity::default() };
        let changes = [
            Update::Focus(Box::new(activity.clone())),
            Update::Activity(Box::new(Activity { thought: Some("t".into()), ..activity })),
            Update::SetFocus { objective: "o".into(), intensity: 0.25 },
            Update::ClearFocus("c".into()),
            Update::Tick,
        ];
        let mut r = Recorder::begin(&begin());
        for u in &changes {
            r.changed(u);
        }
        let mut entries = RecordBatch::unpack(&r.take().stored).expect("unpacks");
        let note = Committed { seq: 1, decision: Some(2), plan: None, outbox: Some(3), digest: 4 };
        entries.push(note.entry());
        let mut reading = Reading::default();
        let read: Vec<_> = entries.iter().filter_map(|e| reading.read(e).expect("reads")).collect();
        // Each is checked as itself, by its encoding, without reading it, and not as another
        // (the next one, or one a bit of a float away).
        let mut scratch = Vec::new();
        let other = Update::SetFocus { objective: "o".into(), intensity: f64::from_bits(0.25f64.to_bits() + 1) };
        let read = &read[1..=changes.len()]; // after the run's beginning, before the note
        for (i, e) in read.iter().enumerate() {
            let Entry::Changed(c) = e else { panic!("a change: {e:?}") };
            assert!(matches!(c, Change::Stored(_)), "{c:?}");
            assert!(c.is(&changes[i], &mut scratch));
            assert!(!c.is(&changes[(i + 1) % changes.len()], &mut scratch));
            assert!(!c.is(&other, &mut scratch));
        }
        let read: Vec<_> = entries
            .iter()
            .filter_map(|e| match Reading::default().read(e).expect("reads") {
                Some(Entry::Changed(u)) => Some(serde_json::to_value(u.read().expect("a change")).expect("json")),
                _ => None,
            })
            .collect();
        let wanted: Vec<_> = changes.iter().map(|u| serde_json::to_value(u).expect("json")).collect();
        assert_eq!(read, wanted);
        assert!(matches!(reading.read(&note.entry()), Ok(Some(Entry::Committed(c))) if c == note));
        assert_eq!(Committed::of_entry(&to_json(&note.entry()).expect("transcodes")), Some(note));
    }

    proptest! {
        #[test]
        fn a_view_change_gives_back_the_view(
            a in proptest::collection::vec(0u8..12, 0..10),
            b in proptest::collection::vec(0u8..12, 0..10),
            load in prop_oneof![Just(0.5), Just(-0.0), Just(0.0), 0.0f64..1.0],
        ) {
            let (before, now) = (view(&a, 0.0, None), view(&b, load, Some("x")));
            let change = ViewChange::between(&before, &now);
            let json = serde_json::to_vec(&change).expect("json");
            let binary = mindfleet_core::stored::encode(&change);
            for back in [
                serde_json::from_slice::<ViewChange>(&json).expect("reads"),
                mindfleet_core::stored::decode::<ViewChange>(&binary).expect("reads"),
            ] {
                let back = back.apply(before.clone()).expect("applies");
                prop_assert_eq!(&back.preoccupations, &now.preoccupations);
                prop_assert_eq!(back.cognitive_load.to_bits(), now.cognitive_load.to_bits());
                prop_assert_eq!(&back.spoke_in, &now.spoke_in);
            }
        }
    }
}
