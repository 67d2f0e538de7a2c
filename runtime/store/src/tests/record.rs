//! Each persona's recorded history as the writer keeps it: numbered on across restarts, chained
//! row to row, its oldest runs forgotten whole past `record_rows`.

use mindfleet_core::history::RecordBatch;

use super::*;
use crate::history::HistoryReader;

/// A batch of `n` entries, the first beginning a run when `begins`.
fn batch(begins: bool, n: usize) -> RecordBatch {
    let entries: Vec<Vec<u8>> =
        (0..n)
            .map(|i| {
                if begins && i == 0 {
                    br#"{"Begin":{}}"#.to_vec()
                } else {
                    format!(r#"{{"Changed":{i}}}"#).into_bytes()
                }
            })
            .collect();
    RecordBatch::pack(&entries)
}

/// Each row of `persona`'s: its first entry's number and whether it begins a run, after
/// checking the chain.
fn rows_of(dir: &Path, persona: &str) -> Vec<(u64, bool)> {
    let reader = HistoryReader::open(dir).unwrap();
    let rows = reader.rows(persona).unwrap();
    for w in rows.windows(2) {
        let entries = w[0].entries().unwrap().len() as u64;
        assert!(w[1].follows(&w[0], entries), "row {} does not follow row {}", w[1].n, w[0].n);
    }
    rows.iter().map(|r| (r.n, RecordBatch::begins(&r.stored))).collect()
}

fn rows(dir: &Path) -> Vec<(u64, bool)> {
    rows_of(dir, "p")
}

#[tokio::test]
async fn a_history_is_numbered_on_across_restarts_and_forgets_its_oldest_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let c = StorageConfig { record_rows: 10, ..cfg(dir.path()) };
    let s = Storage::open(&c).unwrap();
    s.record("p".into(), batch(true, 4));
    s.record("p".into(), batch(false, 3));
    s.close().await.unwrap();
    assert_eq!(rows(dir.path()), [(0, true), (4, false)]);

    // Restarted: the writer counts the history from its rows and goes on from entry 7, chained.
    let s = Storage::open(&c).unwrap();
    s.record("p".into(), batch(true, 2));
    s.close().await.unwrap();
    assert_eq!(rows(dir.path()), [(0, true), (4, false), (7, true)]);

    // Past 10 entries, the oldest runs go, whole: what is kept begins a run.
    let s = Storage::open(&c).unwrap();
    for _ in 0..3 {
        s.record("p".into(), batch(true, 4));
    }
    s.close().await.unwrap();
    let kept = rows(dir.path());
    assert_eq!(kept, [(13, true), (17, true)], "{kept:?}");
}

#[tokio::test]
async fn histories_interleaved_on_disk_trim_one_persona_and_leave_the_other_whole() {
    let dir = tempfile::tempdir().unwrap();
    let c = StorageConfig { record_rows: 10, ..cfg(dir.path()) };
    let s = Storage::open(&c).unwrap();
    // Each run of `p` is 4 entries; `q` has one run, running, which is never trimmed.
    s.record("q".into(), batch(true, 3));
    for _ in 0..5 {
        s.record("p".into(), batch(true, 4));
        s.record("q".into(), batch(false, 2));
    }
    s.close().await.unwrap();
    assert_eq!(rows_of(dir.path(), "p"), [(12, true), (16, true)]);
    let q = rows_of(dir.path(), "q");
    assert_eq!(q.len(), 6);
    assert_eq!(q[5], (11, false));
    let reader = HistoryReader::open(dir.path()).unwrap();
    let names: Vec<String> = reader.histories(None).unwrap().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["p", "q"]);
}

#[tokio::test]
async fn a_version_13_history_is_moved_into_one_sequence_and_goes_on_from_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    // What version 13 wrote: rows under (persona, first entry), each its chain then its batch.
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 13).unwrap();
        let mut t = txn.open_table(RECORD_V13).unwrap();
        for persona in ["p", "q"] {
            let mut chain = 0;
            for (n, b) in [(0, batch(true, 4)), (4, batch(false, 3))] {
                chain = crate::history::chain(chain, &b.stored);
                t.insert((persona, n), [&chain.to_le_bytes()[..], &b.stored].concat().as_slice()).unwrap();
            }
        }
        drop(t);
        txn.commit().unwrap();
    }
    // A replay reads it migrated, in a copy.
    let reader = HistoryReader::open(dir.path()).unwrap();
    assert!(reader.copied.as_deref().unwrap().contains("schema version 13 migrated"), "{:?}", reader.copied);
    drop(reader);
    assert_eq!(rows_of(dir.path(), "q"), [(0, true), (4, false)]);

    let s = Storage::open(&cfg(dir.path())).unwrap();
    s.record("p".into(), batch(false, 2));
    s.close().await.unwrap();
    assert_eq!(rows(dir.path()), [(0, true), (4, false), (7, false)]);
    assert_eq!(rows_of(dir.path(), "q"), [(0, true), (4, false)]);
}
