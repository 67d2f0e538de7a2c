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

use mindfleet_core::messages::{Deferral, Delivery, PersonaCommit};
use mindfleet_core::record::{Committed, Focus, Learning, Mood, OutboxEntry, Preoccupation, RecordBatch, SelfView};

use crate::lifecycle::{Input, Setup};
use crate::mind::Update;
use crate::references::RefBook;

/// One entry of a persona's recorded history, as a [`Reading`] gives it back.
#[derive(Debug)]
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

/// An entry as stored (JSON).
#[derive(Deserialize)]
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

/// A self-state view as what changed since the one before it (a field left out is as it was).
#[derive(Debug, Default, Serialize, Deserialize)]
struct ViewChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    focus: Option<Focus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preoccupations: Option<Vec<Preoccupied>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    load: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capacity: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mood: Option<Mood>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dormant: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spoke_in: Option<BTreeMap<String, i64>>,
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

    /// `before` changed by it.
    fn apply(self, before: &SelfView) -> Result<SelfView, String> {
        let preoccupations = match self.preoccupations {
            None => before.preoccupations.clone(),
            Some(parts) => unstretch(&before.preoccupations, parts)?,
        };
        Ok(SelfView {
            focus: self.focus.unwrap_or_else(|| before.focus.clone()),
            preoccupations,
            cognitive_load: self.load.unwrap_or(before.cognitive_load),
            available_capacity: self.capacity.unwrap_or(before.available_capacity),
            mood: self.mood.unwrap_or(before.mood),
            dormant: self.dormant.unwrap_or(before.dormant),
            spoke_in: self.spoke_in.unwrap_or_else(|| before.spoke_in.clone()),
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
    /// The entries held, as lines.
    lines: Vec<u8>,
    held: u64,
    /// The last self-state view fed in the run (the default before the first).
    view: SelfView,
    /// Deliveries fed in the run and not handed over yet, by seq.
    delivered: BTreeMap<u64, Delivery>,
    /// The preoccupations of the run's last change of them.
    preoccupations: Vec<Preoccupation>,
}

impl Recorder {
    /// A run of the lifecycle built from `begin`.
    pub fn begin(begin: &Begin) -> Recorder {
        let mut r = Recorder {
            lines: Vec::new(),
            held: 0,
            view: SelfView::default(),
            delivered: BTreeMap::new(),
            preoccupations: Vec::new(),
        };
        r.write(&StoredRef::Begin(begin));
        r
    }

    /// `input`, fed at `at`.
    pub fn fed(&mut self, at: i64, input: &Input) {
        match input {
            Input::SelfState(view) => {
                let change = ViewChange::between(&self.view, view);
                self.view = (**view).clone();
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
        let batch = RecordBatch::from_lines(&self.lines, self.held);
        self.lines.clear();
        self.held = 0;
        batch
    }

    fn write(&mut self, e: &StoredRef<'_>) {
        if self.held > 0 {
            self.lines.push(b'\n');
        }
        serde_json::to_writer(&mut self.lines, e).expect("a recorded entry is plain data");
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
    pub fn read(&mut self, bytes: &[u8]) -> Result<Option<Entry>, String> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
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
                self.view = view.apply(&self.view).map_err(|e| format!("a self-state view: {e}"))?;
                Entry::Fed { at, input: Input::SelfState(Box::new(self.view.clone())) }
            }
            Stored::Handed { at, seq, left } => {
                let d = self.delivered.remove(&seq).ok_or_else(|| {
                    format!("it hands over delivery {seq}, which was not delivered earlier in its run")
                })?;
                Entry::Fed { at, input: Input::Next(d, left) }
            }
            Stored::Changed(u) => Entry::Changed(u),
            Stored::Kept(parts) => {
                let now =
                    unstretch(&self.preoccupations, parts).map_err(|e| format!("a change of preoccupations: {e}"))?;
                self.preoccupations.clone_from(&now);
                Entry::Changed(Update::Preoccupations(now))
            }
            Stored::Committed(c) => Entry::Committed(c),
        }))
    }
}

/// A hasher that JSON is written into, so that a digest needs no buffer.
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

/// The digest of what commit `c` says (its delivery, decision, plan, reply and deferral; the
/// reply's id is given after, outside the lifecycle): what a replay checks each commit by, its
/// journal rows or not.
pub fn digest(c: &PersonaCommit) -> u64 {
    let reply = c.reply.as_ref().map(|(entry, _)| OutboxEntry { event_id: String::new(), ..entry.clone() });
    let mut h = HashWriter(twox_hash::XxHash3_64::with_seed(0));
    serde_json::to_writer(&mut h, &(c.seq, &c.decision, &c.plan, &reply, &c.defer)).expect("plain data");
    h.0.finish()
}

#[cfg(test)]
mod tests {
    use mindfleet_core::event::EventInput;
    use proptest::prelude::*;

    use super::*;

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
        for (i, input) in inputs.iter().enumerate() {
            r.fed(i as i64, input);
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
            Input::SelfState(Box::new(view(&[1, 2, 3], 0.5, Some("r")))),
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
                serde_json::from_slice::<serde_json::Value>(e)
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
        let second = String::from_utf8_lossy(&entries[4]);
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
        assert!(String::from_utf8_lossy(&entries[3]).starts_with(r#"{"Kept":[{"Kept":[1,2]},{"New""#));
        let mut reading = Reading::default();
        let read: Vec<_> = entries
            .iter()
            .filter_map(|e| match reading.read(e).expect("reads").expect("its run begun") {
                Entry::Changed(u) => Some(serde_json::to_value(&u).expect("json")),
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
            let back = serde_json::from_slice::<ViewChange>(&json).expect("reads").apply(&before).expect("applies");
            prop_assert_eq!(back.preoccupations, now.preoccupations);
            prop_assert_eq!(back.cognitive_load.to_bits(), now.cognitive_load.to_bits());
            prop_assert_eq!(back.spoke_in, now.spoke_in);
        }
    }
}
