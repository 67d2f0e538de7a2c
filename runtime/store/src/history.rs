//! Reading a data dir's recorded histories for `mindfleet replay`, without changing the data
//! dir: the database is opened read-only; one that needs what only a writer can do (the repair
//! after a `kill -9`, a migration from an older schema) is copied first and the copy is
//! repaired and migrated, in a temporary directory removed afterwards.

use std::path::{Path, PathBuf};

use redb::{Database, ReadOnlyDatabase, ReadableDatabase, ReadableTable};

use mindfleet_core::history::{Committed, RecordBatch};
use mindfleet_core::record::{Decision, OutboxEntry, PlanRecord};

use crate::schema::{DECISION_LOG, DECISIONS, HISTORY_SINCE, META, OUTBOX, PLANS, RECORDED, SCHEMA_VERSION};
use crate::{StorageError, dec, upgrade};

/// One row of a persona's history: a batch of its entries.
#[derive(Debug, Clone)]
pub struct Row {
    /// The number of its first entry (each persona's entries are numbered from 0; retention
    /// forgets the first).
    pub n: u64,
    /// The chain up to it: [`chain`] of the row before's chain and this row's stored batch.
    pub chain: u64,
    /// The batch as stored (`RecordBatch::stored`).
    pub stored: Vec<u8>,
}

impl Row {
    /// Whether it follows `before`, of `entries` entries (nothing missing, moved or edited
    /// between).
    pub fn follows(&self, before: &Row, entries: u64) -> bool {
        self.n == before.n + entries && self.chain == chain(before.chain, &self.stored)
    }

    /// Its entries, as stored (JSON or binary: see `RecordBatch`).
    pub fn entries(&self) -> Result<Vec<Vec<u8>>, String> {
        RecordBatch::unpack(&self.stored)
    }
}

/// xxh3 (64 bits) of `bytes` seeded with `prev`: the chain that makes a missing, moved or edited
/// row (or exported line) show.
pub fn chain(prev: u64, bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot_with_seed(prev, bytes)
}

/// A row of `recorded` as stored: its chain, its first entry's number, its persona, then its
/// batch (`RecordBatch::stored`, with its commit's note when it has one). In bytes: the chain
/// (8, little-endian), the number (8), the persona's length (2) and name, the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRow<'a> {
    pub persona: &'a str,
    pub n: u64,
    pub chain: u64,
    pub stored: &'a [u8],
}

impl<'a> RecordRow<'a> {
    /// The row `value` holds.
    pub fn parse(value: &'a [u8]) -> Result<RecordRow<'a>, String> {
        let cut = || format!("a record row of {} bytes is cut short", value.len());
        let (chain, rest) = value.split_first_chunk::<8>().ok_or_else(cut)?;
        let (n, rest) = rest.split_first_chunk::<8>().ok_or_else(cut)?;
        let (len, rest) = rest.split_first_chunk::<2>().ok_or_else(cut)?;
        let (persona, stored) = rest.split_at_checked(u16::from_le_bytes(*len).into()).ok_or_else(cut)?;
        let persona = std::str::from_utf8(persona).map_err(|e| format!("a record row's persona: {e}"))?;
        Ok(RecordRow { persona, n: u64::from_le_bytes(*n), chain: u64::from_le_bytes(*chain), stored })
    }

    /// Its stored bytes.
    pub fn value(&self) -> Vec<u8> {
        let mut v = head(self.chain, self.persona, self.n);
        v.extend_from_slice(self.stored);
        v
    }

    /// The value of the row of `persona` from entry `n` after a row of chain `prev`, whose batch
    /// `write` writes, and its chain.
    pub fn chained(prev: u64, persona: &str, n: u64, write: impl FnOnce(&mut Vec<u8>)) -> (u64, Vec<u8>) {
        let mut value = head(0, persona, n);
        let at = value.len();
        write(&mut value);
        let c = chain(prev, &value[at..]);
        value[..8].copy_from_slice(&c.to_le_bytes());
        (c, value)
    }

    /// Whether `value` is a row of `persona` (read without the rest of it).
    pub fn of(value: &[u8], persona: &str) -> bool {
        let name = persona.as_bytes();
        value.get(16..18).is_some_and(|len| usize::from(u16::from_le_bytes([len[0], len[1]])) == name.len())
            && value.get(18..18 + name.len()) == Some(name)
    }
}

/// A row's bytes before its batch.
fn head(chain: u64, persona: &str, n: u64) -> Vec<u8> {
    let name = &persona.as_bytes()[..persona.len().min(usize::from(u16::MAX))];
    let mut v = Vec::with_capacity(18 + name.len());
    v.extend_from_slice(&chain.to_le_bytes());
    v.extend_from_slice(&n.to_le_bytes());
    v.extend_from_slice(&(name.len() as u16).to_le_bytes());
    v.extend_from_slice(name);
    v
}

/// A data dir's database, open for reading its histories and the journal rows they name.
pub struct HistoryReader {
    db: Db,
    path: PathBuf,
    /// Why a copy is read, when one is.
    pub copied: Option<String>,
}

enum Db {
    ReadOnly(ReadOnlyDatabase),
    /// A repaired or migrated copy, in its temporary directory (removed when dropped).
    Copy(Database, #[allow(dead_code)] TempDir),
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl HistoryReader {
    /// Opens `data_dir/fleet.redb` for reading.
    pub fn open(data_dir: &Path) -> Result<HistoryReader, StorageError> {
        let path = data_dir.join("fleet.redb");
        let io = |source| StorageError::Io { path: path.clone(), source };
        if !path.is_file() {
            return Err(io(std::io::Error::new(std::io::ErrorKind::NotFound, "no fleet database in this data dir")));
        }
        let why = match ReadOnlyDatabase::open(&path) {
            Ok(db) => match schema_of(&db, &path)? {
                SCHEMA_VERSION => return Ok(HistoryReader { db: Db::ReadOnly(db), path, copied: None }),
                v if v > SCHEMA_VERSION => {
                    return Err(StorageError::NewerSchema { path, found: v, supported: SCHEMA_VERSION });
                }
                v if v < HISTORY_SINCE && has_history(&db, &path)? => {
                    return Err(StorageError::OlderHistory { path, found: v, since: HISTORY_SINCE });
                }
                v => format!("schema version {v} migrated to {SCHEMA_VERSION} in a copy"),
            },
            Err(e) => format!("read from a repaired copy ({e})"),
        };
        let dir = std::env::temp_dir().join(format!("mindfleet-replay-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).map_err(io)?;
        let dir = TempDir(dir);
        let copy = dir.0.join("fleet.redb");
        std::fs::copy(&path, &copy).map_err(io)?;
        let db = Database::create(&copy).map_err(|e| StorageError::Db { path: path.clone(), source: e.into() })?;
        upgrade(&db, &copy)?;
        Ok(HistoryReader { db: Db::Copy(db, dir), path, copied: Some(why) })
    }

    fn read<T>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<T, redb::Error>) -> Result<T, StorageError> {
        let txn = match &self.db {
            Db::ReadOnly(db) => db.begin_read(),
            Db::Copy(db, _) => db.begin_read(),
        };
        let txn = txn.map_err(|e| self.err(e))?;
        f(&txn).map_err(|e| self.err(e))
    }

    fn err(&self, e: impl Into<redb::Error>) -> StorageError {
        StorageError::Db { path: self.path.clone(), source: e.into() }
    }

    /// The histories (every persona's, or `persona`'s), each persona's rows in order, by name:
    /// one pass over the table, which holds every persona's rows in the order they were
    /// committed.
    pub fn histories(&self, persona: Option<&str>) -> Result<Vec<(String, Vec<Row>)>, StorageError> {
        let mut by_name = std::collections::BTreeMap::<String, Vec<Row>>::new();
        self.each_row(persona, |name, row| {
            match by_name.get_mut(name) {
                Some(rows) => rows.push(row),
                None => {
                    by_name.insert(name.to_string(), vec![row]);
                }
            }
            Ok(())
        })?;
        Ok(by_name.into_iter().collect())
    }

    /// The rows of the history of `persona`, in order.
    pub fn rows(&self, persona: &str) -> Result<Vec<Row>, StorageError> {
        Ok(self.histories(Some(persona))?.pop().map(|(_, rows)| rows).unwrap_or_default())
    }

    /// Calls `f` with each row (every persona's, or `persona`'s) and its persona, in the order
    /// the rows were committed.
    fn each_row(
        &self,
        persona: Option<&str>,
        mut f: impl FnMut(&str, Row) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let txn = match &self.db {
            Db::ReadOnly(db) => db.begin_read(),
            Db::Copy(db, _) => db.begin_read(),
        };
        let txn = txn.map_err(|e| self.err(e))?;
        let t = txn.open_table(RECORDED).map_err(|e| self.err(e))?;
        for r in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = r.map_err(|e| self.err(e))?;
            if persona.is_some_and(|p| !RecordRow::of(v.value(), p)) {
                continue;
            }
            let row = RecordRow::parse(v.value())
                .map_err(|e| self.err(redb::Error::Corrupted(format!("record row {}: {e}", k.value()))))?;
            f(row.persona, Row { n: row.n, chain: row.chain, stored: row.stored.to_vec() })?;
        }
        Ok(())
    }

    /// The decision the journal keeps under `key` for `persona` (none: forgotten since).
    pub fn decision(&self, persona: &str, key: u64) -> Result<Option<Decision>, StorageError> {
        self.read(|txn| {
            if let Some(v) = txn.open_table(DECISIONS)?.get((persona, key))? {
                return dec(v.value()).map(Some);
            }
            // Not copied into the persona's rows yet (the writer holds it back a moment).
            match txn.open_table(DECISION_LOG)?.get(key)? {
                Some(v) => dec::<(String, Decision)>(v.value()).map(|(_, d)| Some(d)),
                None => Ok(None),
            }
        })
    }

    /// The plan the journal keeps under `key` for `persona`.
    pub fn plan(&self, persona: &str, key: u64) -> Result<Option<PlanRecord>, StorageError> {
        self.read(|txn| txn.open_table(PLANS)?.get((persona, key))?.map(|v| dec(v.value())).transpose())
    }

    /// The reply the outbox keeps under `key`.
    pub fn reply(&self, key: u64) -> Result<Option<OutboxEntry>, StorageError> {
        self.read(|txn| txn.open_table(OUTBOX)?.get(key)?.map(|v| dec(v.value())).transpose())
    }
}

fn schema_of(db: &ReadOnlyDatabase, path: &Path) -> Result<u64, StorageError> {
    let err = |e: redb::Error| StorageError::Db { path: path.to_path_buf(), source: e };
    let txn = db.begin_read().map_err(|e| err(e.into()))?;
    let meta = txn.open_table(META).map_err(|e| err(e.into()))?;
    Ok(meta.get("schema_version").map_err(|e| err(e.into()))?.map_or(SCHEMA_VERSION, |g| g.value()))
}

/// Whether `db`, of a schema older than [`HISTORY_SINCE`], holds a recorded history (one older
/// than `record` holds none).
fn has_history(db: &ReadOnlyDatabase, path: &Path) -> Result<bool, StorageError> {
    let err = |e: redb::Error| StorageError::Db { path: path.to_path_buf(), source: e };
    let txn = db.begin_read().map_err(|e| err(e.into()))?;
    match txn.open_table(crate::schema::RECORD_V13) {
        Ok(t) => Ok(t.first().map_err(|e| err(e.into()))?.is_some()),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
        Err(e) => Err(err(e.into())),
    }
}

/// A number no other copy of this process uses.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The first line of an exported history.
const EXPORT_HEADER: &str = "mindfleet history";
/// The oldest schema whose exported histories this build imports: their lines have been the
/// same since (14 changed only how the rows are stored).
const EXPORTED_SINCE: u64 = 13;
/// `{"chain":"` + 16 hex digits + `",`: what precedes the part of a line its chain covers.
const CHAIN_PREFIX: usize = 28;

/// A history file that cannot be imported: its line (from 1) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: line {line}: {reason}")]
    Line { path: PathBuf, line: usize, reason: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// What an export or an import carried.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Carried {
    pub personas: u64,
    pub rows: u64,
    /// Journal rows carried with the commits that wrote them (decisions, plans, replies).
    pub journal_rows: u64,
}

/// The journal rows a commit wrote, as an exported line carries them.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct JournalRows {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<Decision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plan: Option<PlanRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply: Option<OutboxEntry>,
}

/// One exported line after its chain.
#[derive(serde::Deserialize)]
struct Line {
    persona: String,
    row: u64,
    entry: Box<serde_json::value::RawValue>,
    #[serde(default)]
    journal: Option<JournalRows>,
}

impl HistoryReader {
    /// Writes the histories (each persona's, or `persona`'s) as JSON lines, in the order they
    /// were committed (a line names its persona and its entry's number), each commit's note
    /// with the journal rows it wrote, each line chained to the one before; `json` gives an
    /// entry as JSON (`mindfleet_cognition::history::to_json`: binary entries are the
    /// lifecycle's types).
    pub fn export(
        &self,
        out: &mut impl std::io::Write,
        persona: Option<&str>,
        json: impl Fn(&[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String>,
    ) -> Result<Carried, StorageError> {
        let io = |source| StorageError::Io { path: self.path.clone(), source };
        let mut carried = Carried::default();
        let mut prev = 0u64;
        let header = format!("{{\"{EXPORT_HEADER}\":{SCHEMA_VERSION}}}");
        writeln!(out, "{header}").map_err(io)?;
        prev = chain(prev, header.as_bytes());
        let mut names = std::collections::BTreeSet::new();
        self.each_row(persona, |name, r| {
            if !names.contains(name) {
                names.insert(name.to_string());
            }
            let entries =
                r.entries().map_err(|e| self.err(redb::Error::Corrupted(format!("record row {name}/{}: {e}", r.n))))?;
            for (n, row) in (r.n..).zip(entries) {
                let corrupted = |e: String| self.err(redb::Error::Corrupted(format!("record entry {name}/{n}: {e}")));
                let text = json(&row).map_err(corrupted)?;
                let text = std::str::from_utf8(&text).map_err(|e| corrupted(e.to_string()))?;
                let mut rest =
                    format!("\"persona\":{},\"row\":{n},\"entry\":{text}", serde_json::Value::String(name.into()));
                if let Some(c) = Committed::of_entry(&row) {
                    let rows = JournalRows {
                        decision: c.decision.map(|k| self.decision(name, k)).transpose()?.flatten(),
                        plan: c.plan.map(|k| self.plan(name, k)).transpose()?.flatten(),
                        reply: c.outbox.map(|k| self.reply(k)).transpose()?.flatten(),
                    };
                    carried.journal_rows += u64::from(rows.decision.is_some())
                        + u64::from(rows.plan.is_some())
                        + u64::from(rows.reply.is_some());
                    rest += &format!(",\"journal\":{}", serde_json::to_string(&rows).unwrap_or_default());
                }
                rest.push('}');
                prev = chain(prev, rest.as_bytes());
                writeln!(out, "{{\"chain\":\"{prev:016x}\",{rest}").map_err(io)?;
                carried.rows += 1;
            }
            Ok(())
        })?;
        carried.personas = names.len() as u64;
        Ok(carried)
    }
}

/// Imports an exported history into `data_dir`, which must not hold a fleet database yet: its
/// rows, and the journal rows its commits wrote under the keys they had, so that it replays
/// there as where it was recorded. A line missing, moved, edited or cut is refused with its
/// number, and nothing is written.
pub fn import(file: &Path, data_dir: &Path) -> Result<Carried, ImportError> {
    use std::io::BufRead;
    let io = |path: &Path, source| StorageError::Io { path: path.to_path_buf(), source };
    let bad = |line: usize, reason: String| ImportError::Line { path: file.to_path_buf(), line, reason };
    let db_path = data_dir.join("fleet.redb");
    if db_path.exists() {
        return Err(StorageError::Io {
            path: db_path,
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a history is imported into an empty data dir",
            ),
        }
        .into());
    }
    let reader = std::io::BufReader::new(std::fs::File::open(file).map_err(|e| io(file, e))?);
    let mut lines = Vec::new();
    let mut prev = 0u64;
    for (i, text) in reader.lines().enumerate() {
        let number = i + 1;
        let text = text.map_err(|e| io(file, e))?;
        if i == 0 {
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| bad(1, format!("not a history file: {e}")))?;
            match v.get(EXPORT_HEADER).and_then(serde_json::Value::as_u64) {
                Some(EXPORTED_SINCE..=SCHEMA_VERSION) => {}
                Some(v) => {
                    return Err(bad(
                        1,
                        format!(
                            "exported at schema version {v}; this mindfleet reads {EXPORTED_SINCE} to {SCHEMA_VERSION}"
                        ),
                    ));
                }
                None => return Err(bad(1, format!("not a history file: no {EXPORT_HEADER:?} header"))),
            }
            prev = chain(prev, text.as_bytes());
            continue;
        }
        let (Some(head), Some(rest)) = (text.get(..CHAIN_PREFIX), text.get(CHAIN_PREFIX..)) else {
            return Err(bad(number, "cut short: not a whole line".into()));
        };
        let said = head
            .strip_prefix("{\"chain\":\"")
            .and_then(|h| h.strip_suffix("\","))
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        prev = chain(prev, rest.as_bytes());
        if said != Some(prev) {
            return Err(bad(
                number,
                "does not follow the line before it: a line is missing, moved or edited there".into(),
            ));
        }
        let line: Line =
            serde_json::from_str(&format!("{{{rest}")).map_err(|e| bad(number, format!("cannot be read: {e}")))?;
        lines.push(line);
    }
    std::fs::create_dir_all(data_dir).map_err(|e| io(data_dir, e))?;
    let db = Database::create(&db_path).map_err(|e| StorageError::Db { path: db_path.clone(), source: e.into() })?;
    upgrade(&db, &db_path)?;
    let written = write_imported(&db, &lines).map_err(|e| StorageError::Db { path: db_path.clone(), source: e });
    if let Err(e) = written {
        drop(db);
        let _ = std::fs::remove_file(&db_path);
        return Err(e.into());
    }
    Ok(written?)
}

fn write_imported(db: &Database, lines: &[Line]) -> Result<Carried, redb::Error> {
    use crate::enc;
    let mut carried = Carried::default();
    let txn = db.begin_write()?;
    {
        let mut recorded = txn.open_table(RECORDED)?;
        let mut decisions = txn.open_table(DECISIONS)?;
        let mut plans = txn.open_table(PLANS)?;
        let mut outbox = txn.open_table(OUTBOX)?;
        // Each persona's chain (an export of 13 lists a persona's lines after another's, a later
        // one in the order they were committed).
        let mut chains = std::collections::HashMap::<&str, u64>::new();
        for l in lines {
            let at = chains.entry(l.persona.as_str()).or_default();
            // A row of one entry each, chained again as the writer chains them (the file's chain
            // covered them).
            let batch = RecordBatch::pack(&[l.entry.get().as_bytes().to_vec()]);
            let value;
            (*at, value) = RecordRow::chained(*at, &l.persona, l.row, |v| v.extend_from_slice(&batch.stored));
            recorded.insert(carried.rows, value.as_slice())?;
            carried.rows += 1;
            let (Some(c), Some(rows)) = (Committed::of_entry(l.entry.get().as_bytes()), &l.journal) else {
                continue;
            };
            if let (Some(k), Some(d)) = (c.decision, &rows.decision) {
                decisions.insert((l.persona.as_str(), k), enc(d).as_slice())?;
                carried.journal_rows += 1;
            }
            if let (Some(k), Some(p)) = (c.plan, &rows.plan) {
                plans.insert((l.persona.as_str(), k), enc(p).as_slice())?;
                carried.journal_rows += 1;
            }
            if let (Some(k), Some(r)) = (c.outbox, &rows.reply) {
                outbox.insert(k, enc(r).as_slice())?;
                carried.journal_rows += 1;
            }
        }
        carried.personas = chains.len() as u64;
    }
    txn.commit()?;
    Ok(carried)
}
