//! Exact replay of a fleet's recorded history (`mindfleet replay DATA_DIR`).
//!
//! Each persona's history (`mindfleet_cognition::history`) is fed, row by row, to a lifecycle
//! built as the recorded one was, with no model, tool, network or clock: the lifecycle is a state
//! machine of inputs and effects, and its inputs (model answers, tool results, grants, timers,
//! times) are all in the history. What it does is checked as it goes:
//!
//! - each commit it makes (decision, plan record, reply) against the journal rows the recorded
//!   commit wrote, which the history notes after the inputs that led to it;
//! - each self-state change it asks for against the one recorded;
//! - each answer in the history against what it asked: an answer to a task it never asked
//!   means it took another path than the recorded lifecycle.
//!
//! The first difference ends the replay with the event, the input and a field-by-field diff
//! ([`Divergence`]); a history that cannot be read as one (a row missing, edited or
//! undecodable, a time going backwards) is refused at its first row that does not fit
//! ([`Refusal`]). Nothing in the data dir is changed ([`HistoryReader`] reads it read-only, or a
//! copy).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashSet;
use serde::Serialize;

/// An entry of a history as JSON, as an export writes it (`HistoryReader::export`).
pub use mindfleet_cognition::history::to_json;
use mindfleet_cognition::history::{Entry, Reading};
use mindfleet_cognition::lifecycle::{Effect, Input, Lifecycle};
use mindfleet_cognition::mind::Update;
use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::history::Committed;
use mindfleet_core::messages::PersonaCommit;
use mindfleet_core::sched::TaskId;
use mindfleet_store::StorageError;
pub use mindfleet_store::history::HistoryReader;
use mindfleet_store::history::Row;

mod compare;
mod fit;

/// What to replay.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this persona's history.
    pub persona: Option<String>,
    /// Stop after this point.
    pub until: Option<Until>,
    /// Keep the commits replayed and the events the personas were handed ([`Report::kept`]).
    pub keep: bool,
}

/// Where a replay stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// After the entry of this number (each persona's entries are numbered from 0).
    Row(u64),
    /// After the last input taken at or before this time (microseconds since the epoch).
    Time(i64),
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub personas: Vec<PersonaReport>,
    /// Why a copy of the database was read (its repair after a crash, a migration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copied: Option<String>,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// What `Options::keep` asked for.
    #[serde(skip)]
    pub kept: Kept,
}

/// The commits a replay made, by persona, and the events people (not personas) sent that the
/// personas were handed, by sequence number: what `mindfleet replay --live` sends again and
/// compares.
#[derive(Debug, Clone, Default)]
pub struct Kept {
    pub commits: Vec<(String, PersonaCommit)>,
    pub events: BTreeMap<u64, Arc<Event>>,
}

/// Identical, or the first divergence, or the history refused.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Identical,
    Diverged(Box<Divergence>),
    Refused(Refusal),
}

/// One persona's replay.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PersonaReport {
    pub persona: String,
    /// Runs of its lifecycle (a start, and each restart).
    pub runs: u64,
    /// Entries read (inputs, self-state changes, commits' notes, beginnings).
    pub entries: u64,
    pub inputs: u64,
    /// Commits replayed, and of them those found the same as recorded (each is checked by the
    /// digest its commit noted; a difference is shown against the journal rows it wrote).
    pub commits: u64,
    pub commits_checked: u64,
    pub self_state_changes: u64,
    /// Entries before the first run's beginning (a run partly forgotten by retention), not fed.
    pub entries_skipped: u64,
    /// Time the recorded inputs spanned, run by run, and the time the replay took.
    pub recorded_ms: f64,
    pub replay_ms: f64,
}

/// Where the replay first did something other than what the history and the journal hold.
#[derive(Debug, Clone, Serialize)]
pub struct Divergence {
    pub persona: String,
    /// The row of the input that made the difference.
    pub row: u64,
    /// The event it was about, when one was in hand.
    pub event: Option<String>,
    pub input: String,
    /// What differs, in a sentence.
    pub what: String,
    /// `field: recorded X, replayed Y`, one line per field.
    pub diff: Vec<String>,
}

/// A history that does not read as one: where, and what is wrong.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub persona: String,
    pub row: u64,
    pub reason: String,
}

impl Report {
    pub fn identical(&self) -> bool {
        matches!(self.outcome, Outcome::Identical)
    }
}

/// Replays the histories of `reader`'s data dir (each persona's, or `opts.persona`'s).
pub fn replay(reader: &HistoryReader, opts: &Options) -> Result<Report, StorageError> {
    // Every history in one pass over the table (each persona's time to replay counts its share
    // of it, by the bytes of its rows).
    let started = Instant::now();
    let histories = reader.histories(opts.persona.as_deref())?;
    let read_ms = started.elapsed().as_secs_f64() * 1e3;
    let bytes = |rows: &[Row]| rows.iter().map(|r| r.stored.len()).sum::<usize>() as f64;
    let all = histories.iter().map(|(_, rows)| bytes(rows)).sum::<f64>().max(1.0);
    let mut report = Report {
        personas: Vec::new(),
        copied: reader.copied.clone(),
        outcome: Outcome::Identical,
        kept: Kept::default(),
    };
    for (name, rows) in histories {
        let mut one = Replay::new(reader, &name, opts.keep.then_some(&mut report.kept));
        let outcome = one.run(&rows, opts.until);
        one.report.replay_ms += read_ms * bytes(&rows) / all;
        report.personas.push(one.report);
        if !matches!(outcome, Outcome::Identical) {
            report.outcome = outcome;
            break;
        }
    }
    Ok(report)
}

/// One persona's replay under way.
struct Replay<'r> {
    reader: &'r HistoryReader,
    kept: Option<&'r mut Kept>,
    report: PersonaReport,
    life: Option<Lifecycle>,
    /// Commits and self-state changes made and not yet matched with the history's.
    commits: VecDeque<(u64, Box<PersonaCommit>)>,
    changes: VecDeque<(u64, Update)>,
    /// The tasks asked in this run (an answer to another does not fit).
    asked: FxHashSet<TaskId>,
    /// The last input's time in this run, and the run's first.
    last_at: Option<i64>,
    first_at: Option<i64>,
    /// The row being handled, and the row of the last input fed (shown, read again, when the
    /// replay stops: formatting every input in case it is that one cost more than feeding it).
    row: u64,
    input: Option<u64>,
    /// The history's entries read back.
    reading: Reading,
    /// Room for a self-state change's encoding, to check it against the history's.
    scratch: Vec<u8>,
}

/// A replay stops: a divergence or a refusal.
type Stop = Outcome;

impl<'r> Replay<'r> {
    fn new(reader: &'r HistoryReader, persona: &str, kept: Option<&'r mut Kept>) -> Self {
        Replay {
            reader,
            kept,
            report: PersonaReport { persona: persona.to_string(), ..Default::default() },
            life: None,
            commits: VecDeque::new(),
            changes: VecDeque::new(),
            asked: FxHashSet::default(),
            last_at: None,
            first_at: None,
            row: 0,
            input: None,
            reading: Reading::default(),
            scratch: Vec::new(),
        }
    }

    /// Replays `rows`, the persona's history.
    fn run(&mut self, rows: &[Row], until: Option<Until>) -> Outcome {
        let started = Instant::now();
        let mut outcome = Outcome::Identical;
        let mut before: Option<(&Row, u64)> = None;
        'rows: for row in rows {
            self.row = row.n;
            if let Some((b, entries)) = before
                && !row.follows(b, entries)
            {
                outcome = self.refuse(if row.n == b.n + entries {
                    format!("row {} does not follow row {}: one of them was edited, or rows were moved", row.n, b.n)
                } else {
                    format!(
                        "entries {} to {} are missing: the history jumps from row {} to row {}",
                        b.n + entries,
                        row.n.wrapping_sub(1),
                        b.n,
                        row.n
                    )
                });
                break;
            }
            let entries = match row.entries() {
                Ok(es) => es,
                Err(e) => {
                    outcome = self.refuse(format!("row {} cannot be read: {e}", row.n));
                    break;
                }
            };
            before = Some((row, entries.len() as u64));
            for (i, bytes) in entries.iter().enumerate() {
                let n = row.n + i as u64;
                self.row = n;
                if until.is_some_and(|u| matches!(u, Until::Row(r) if n > r)) {
                    break 'rows;
                }
                let entry = match self.reading.read(bytes) {
                    Ok(Some(e)) => e,
                    Ok(None) => {
                        self.report.entries += 1;
                        self.report.entries_skipped += 1;
                        continue;
                    }
                    Err(e) => {
                        outcome = self.unreadable(e);
                        break 'rows;
                    }
                };
                if let (Some(Until::Time(t)), Entry::Fed { at, .. }) = (until, &entry)
                    && *at > t
                {
                    break 'rows;
                }
                self.report.entries += 1;
                if let Err(stop) = self.take(entry) {
                    outcome = stop;
                    break 'rows;
                }
            }
        }
        if matches!(outcome, Outcome::Identical) && until.is_none() {
            outcome = self.end_run().err().unwrap_or(Outcome::Identical);
        }
        if let (Outcome::Diverged(d), Some(n)) = (&mut outcome, self.input) {
            d.input = input_at(rows, n);
        }
        self.close_span();
        self.report.replay_ms = started.elapsed().as_secs_f64() * 1e3;
        outcome
    }

    fn take(&mut self, entry: Entry) -> Result<(), Stop> {
        match entry {
            Entry::Begin(b) => {
                self.end_run()?;
                self.close_span();
                self.report.runs += 1;
                self.asked.clear();
                self.life = Some(Lifecycle::new(b.setup, b.learnings, b.refs, b.deferred));
                Ok(())
            }
            _ if self.life.is_none() => {
                // A run whose beginning retention forgot: nothing to feed it to.
                self.report.entries_skipped += 1;
                Ok(())
            }
            Entry::Fed { at, input } => self.feed(at, input),
            Entry::Changed(recorded) => {
                let Some((row, replayed)) = self.changes.pop_front() else {
                    let recorded = recorded.read().map_err(|e| self.unreadable(e))?;
                    return Err(self.diverge(
                        self.row,
                        None,
                        "the history records a self-state change the replay did not ask for".into(),
                        compare::diff(&recorded, &()),
                    ));
                };
                self.report.self_state_changes += 1;
                if recorded.is(&replayed, &mut self.scratch) {
                    return Ok(());
                }
                let recorded = recorded.read().map_err(|e| self.unreadable(e))?;
                let diff = compare::diff(&recorded, &replayed);
                if diff.is_empty() {
                    Ok(())
                } else {
                    Err(self.diverge(row, None, "a self-state change differs from the one recorded".into(), diff))
                }
            }
            Entry::Committed(noted) => self.check_commit(noted),
        }
    }

    fn feed(&mut self, at: i64, input: Input) -> Result<(), Stop> {
        if self.last_at.is_some_and(|last| at < last) {
            return Err(self.refuse(format!(
                "row {} was taken at {at}, before the row ahead of it ({}): the history is out of order",
                self.row,
                self.last_at.unwrap_or_default()
            )));
        }
        if let Some(task) = fit::answers(&input)
            && !self.asked.contains(&task)
        {
            // The recorded lifecycle asked for it: this one took another path before.
            self.input = Some(self.row);
            let what = format!("the recorded input answers task {task}, which the replay never asked for");
            return Err(self.diverge(self.row, None, what, Vec::new()));
        }
        self.first_at.get_or_insert(at);
        self.last_at = Some(at);
        self.report.inputs += 1;
        self.input = Some(self.row);
        if let (Some(kept), Input::Deliver(d) | Input::Next(d, _)) = (self.kept.as_deref_mut(), &input)
            && d.event.sender_kind != SenderKind::Persona
        {
            kept.events.entry(d.seq).or_insert_with(|| d.event.clone());
        }
        let life = self.life.as_mut().expect("fed only within a run");
        for effect in life.handle(input, at) {
            if let Some(task) = fit::asks(&effect) {
                self.asked.insert(task);
            }
            match effect {
                Effect::Commit { commit, .. } => {
                    if let Some(kept) = self.kept.as_deref_mut() {
                        kept.commits.push((self.report.persona.clone(), (*commit).clone()));
                    }
                    self.commits.push_back((self.row, commit))
                }
                Effect::SelfState(u) => self.changes.push_back((self.row, u)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The commit the history notes, against the next one the replay made.
    fn check_commit(&mut self, noted: Committed) -> Result<(), Stop> {
        let Some((row, replayed)) = self.commits.pop_front() else {
            return Err(self.diverge(
                self.row,
                None,
                format!("the journal holds a commit of delivery {} the replay did not make", noted.seq),
                Vec::new(),
            ));
        };
        self.report.commits += 1;
        let event = Some(replayed.decision.event_id.clone());
        match compare::commit(self.reader, &self.report.persona, &replayed, noted) {
            Ok(None) => {
                self.report.commits_checked += 1;
                Ok(())
            }
            Ok(Some((what, diff))) => Err(self.diverge(row, event, what, diff)),
            Err(e) => {
                Err(self.refuse(format!("the journal rows of the commit at row {} cannot be read: {e}", self.row)))
            }
        }
    }

    /// A run ends (another begins, or the history does): what the replay made beyond the
    /// history is a divergence.
    fn end_run(&mut self) -> Result<(), Stop> {
        if let Some((row, c)) = self.commits.pop_front() {
            let what = format!(
                "the replay commits {} on event {} and the journal holds no such commit",
                c.decision.verdict.as_str(),
                c.decision.event_id
            );
            return Err(self.diverge(row, Some(c.decision.event_id.clone()), what, Vec::new()));
        }
        self.changes.clear();
        Ok(())
    }

    fn close_span(&mut self) {
        if let (Some(first), Some(last)) = (self.first_at.take(), self.last_at.take()) {
            self.report.recorded_ms += (last - first) as f64 / 1e3;
        }
    }

    fn diverge(&self, row: u64, event: Option<String>, what: String, diff: Vec<String>) -> Outcome {
        let event = event.or_else(|| self.life.as_ref().and_then(|l| l.current_event()).map(|d| d.event.id.clone()));
        Outcome::Diverged(Box::new(Divergence {
            persona: self.report.persona.clone(),
            row,
            event,
            input: String::new(),
            what,
            diff,
        }))
    }

    /// The entry at the row in hand cannot be read.
    fn unreadable(&self, e: String) -> Outcome {
        self.refuse(format!("entry {} cannot be read as a history entry: {e}", self.row))
    }

    fn refuse(&self, reason: String) -> Outcome {
        Outcome::Refused(Refusal { persona: self.report.persona.clone(), row: self.row, reason })
    }
}

/// The input fed at row `n` of `rows`, in a line a person reads (the history read again from
/// its start: a reading of an entry depends on the entries before it).
fn input_at(rows: &[Row], n: u64) -> String {
    let mut reading = Reading::default();
    for row in rows.iter().take_while(|r| r.n <= n) {
        let Ok(entries) = row.entries() else { break };
        for (at, bytes) in (row.n..).zip(&entries) {
            match reading.read(bytes) {
                Ok(Some(Entry::Fed { input, .. })) if at == n => return compare::short(&input),
                Ok(_) if at < n => {}
                _ => return String::new(),
            }
        }
    }
    String::new()
}
