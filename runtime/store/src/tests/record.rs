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

/// Each row's first entry's number and whether it begins a run, after checking the chain.
fn rows(dir: &Path) -> Vec<(u64, bool)> {
    let reader = HistoryReader::open(dir).unwrap();
    let rows = reader.rows("p").unwrap();
    for w in rows.windows(2) {
        let entries = w[0].entries().unwrap().len() as u64;
        assert!(w[1].follows(&w[0], entries), "row {} does not follow row {}", w[1].n, w[0].n);
    }
    rows.iter().map(|r| (r.n, RecordBatch::begins(&r.stored))).collect()
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
