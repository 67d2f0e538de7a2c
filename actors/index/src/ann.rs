//! Approximate nearest neighbours over the chunks' int8 vectors: an HNSW graph (hnsw_rs) that
//! answers [`Vectors::search`] once an index holds enough vectors for the exact scan to be the
//! slower of the two ([`EXACT_BELOW`]).
//!
//! - **Built off the caller's thread**: from a snapshot of the vectors, on a thread of its own
//!   that inserts in parallel on a rayon pool of its own (the global pool, which the embedding
//!   model uses, is not held up). Until the graph is ready the exact scan answers; it swaps in
//!   at the next search. Dropping the index cancels a build between two batches of inserts.
//! - **Changes after the snapshot**: hnsw_rs has no delete, so the ids added, replaced or
//!   removed since the graph's snapshot are its *changed* ids. The graph's answers among them
//!   are dropped (tombstones: a removed chunk disappears from results at once) and those still
//!   held are scored exactly beside the graph (the fresh list). When they pass [`REBUILD_AT`] of
//!   the graph a new one is built in the background; past [`EXACT_ABOVE`] the exact scan answers
//!   until it is ready.
//! - **Scores**: what the graph finds is rescored from the int8 vectors, so a chunk scores the
//!   same whichever side found it. The graph is asked for twice as many as wanted; when filters
//!   and tombstones leave fewer than wanted, the exact scan answers (filtered searches are then
//!   exact), as it does searches for more than [`GRAPH_UP_TO`]. hnsw_rs's own filtered search
//!   (`search_filter`) was measured slower: it gives up its early stop, so at 100k even a filter
//!   that keeps everything took 0.85 ms at the median where the same search without one took
//!   0.35 (with 10% of the ids filtered out: 0.94 ms).
//! - **Distance**: one minus the cosine of the two int8 vectors, clamped at 0. hnsw_rs asserts
//!   that distances are not negative, and `1 - dot` of near-duplicates rounds below 0 (its
//!   `DistDot` panics on them). The cosine of int8 vectors needs no scale (it cancels), so the
//!   graph holds the 384-byte vectors, not 1.5 KB of f32 each; it was also the faster of the
//!   two to build and search.
//! - **Not persisted**: the graph is built again after each open, in the background, from the
//!   vectors redb holds (hnsw_rs's loader panics on files that do not match and prints to
//!   standard output). A build or a graph search that fails (a panic in hnsw_rs is caught)
//!   leaves the exact scan answering, says why in [`VectorStatus::error`], and no graph is built
//!   again until the index is opened again.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use hnsw_rs::prelude::{Distance, Hnsw};

use crate::store::Quantized;
use crate::vectors::{VectorStatus, Vectors};

/// Below this many vectors the exact scan answers and no graph is built. Measured on the 2-core
/// reference machine (AVX-512), 384-d clustered vectors, median of one vector search (50 asked,
/// as a search of 10 asks each ranking), graph vs exact scan: 5k 0.16 vs 0.11 ms, 10k 0.26 vs
/// 0.23 ms, 20k 0.32 vs 0.41 ms, 50k 0.45 vs 1.03 ms, 100k 0.56 vs 2.12 ms. They cross near
/// 10k; from 20k the graph is ahead, and its build (3 s on both cores at 20k) soon repays.
pub const EXACT_BELOW: usize = 20_000;
/// A rebuild starts when the changed ids pass this fraction of the graph.
pub const REBUILD_AT: f32 = 0.1;
/// Past this fraction of changed ids the exact scan answers (scoring the fresh list beside
/// the graph would cost about as much).
pub const EXACT_ABOVE: f32 = 0.25;
/// hnsw_rs's `max_nb_connection`: links per point and layer (twice as many in the lowest).
const LINKS: usize = 16;
/// Candidates considered per insert.
const EF_CONSTRUCTION: usize = 64;
/// The least breadth of a search (the graph is asked for twice the results wanted, and for
/// at least this many candidates).
const EF_SEARCH: usize = 100;
/// The most results a vector search may want and be answered by the graph (a search of 20
/// wants 100 of each ranking); larger ones go to the exact scan. At 100k vectors, median: 100
/// wanted, 0.85 ms by the graph and 2.46 ms by the scan; 250 wanted, 2.9 and 2.7 ms.
const GRAPH_UP_TO: usize = 100;
/// hnsw_rs's most layers.
const LAYERS: usize = 16;
/// Inserts between two checks for a cancelled build.
const BATCH: usize = 2048;

/// The graph's distance: 1 − the cosine of two int8 vectors, never below 0, never NaN.
#[derive(Clone, Copy)]
pub struct Cosine {
    sums: fn(&[i8], &[i8]) -> [i32; 3],
}

impl Cosine {
    pub fn new() -> Cosine {
        Cosine { sums: sums_kernel() }
    }
}

impl Distance<i8> for Cosine {
    fn eval(&self, a: &[i8], b: &[i8]) -> f32 {
        let [dot, aa, bb] = (self.sums)(a, b);
        if aa == 0 || bb == 0 {
            return 1.0;
        }
        (1.0 - dot as f32 / (aa as f32 * bb as f32).sqrt()).max(0.0)
    }
}

/// The dot product of `a` and `b` and the squared norm of each, in one pass: the best kernel
/// the CPU has (AVX-512, AVX2 or portable), chosen once.
fn sums_kernel() -> fn(&[i8], &[i8]) -> [i32; 3] {
    #[inline(always)]
    fn body(a: &[i8], b: &[i8]) -> [i32; 3] {
        let (mut dot, mut aa, mut bb) = (0i32, 0i32, 0i32);
        for (x, y) in a.iter().zip(b) {
            let (x, y) = (*x as i16 as i32, *y as i16 as i32);
            dot += x * y;
            aa += x * x;
            bb += y * y;
        }
        [dot, aa, bb]
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw")]
        fn v4(a: &[i8], b: &[i8]) -> [i32; 3] {
            body(a, b)
        }
        #[target_feature(enable = "avx2")]
        fn v3(a: &[i8], b: &[i8]) -> [i32; 3] {
            body(a, b)
        }
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has the features `v4` is compiled for (checked above).
            return |a, b| unsafe { v4(a, b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above, for `v3`.
            return |a, b| unsafe { v3(a, b) };
        }
    }
    body
}

/// A built graph: point `i` of `hnsw` is chunk `ids[i]`.
struct Graph {
    hnsw: Hnsw<'static, i8, Cosine>,
    ids: Vec<u64>,
    dims: usize,
}

/// The vectors a graph is built from.
struct Snapshot {
    dims: usize,
    ids: Vec<u64>,
    values: Vec<i8>,
}

/// A build under way.
struct Build {
    done: Receiver<Result<Graph, String>>,
    /// Ids added, replaced or removed since its snapshot.
    changed: HashSet<u64>,
    cancel: Arc<AtomicBool>,
    started: Instant,
}

#[derive(Default)]
struct State {
    graph: Option<Graph>,
    /// Ids added, replaced or removed since the graph's snapshot.
    changed: HashSet<u64>,
    build: Option<Build>,
    /// Builds started.
    builds: usize,
    last_build_s: Option<f64>,
    error: Option<String>,
}

/// The graph side of [`Vectors`]: its graph, its build and the ids changed since.
pub struct Ann {
    exact_below: usize,
    state: Mutex<State>,
}

impl Ann {
    /// No graph below `exact_below` vectors.
    pub fn new(exact_below: usize) -> Ann {
        Ann { exact_below: exact_below.max(1), state: Mutex::new(State::default()) }
    }

    /// Chunk `id`'s vector was added, replaced or removed.
    pub fn changed(&mut self, id: u64) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if state.graph.is_some() {
            state.changed.insert(id);
        }
        if let Some(build) = &mut state.build {
            build.changed.insert(id);
        }
    }

    /// The `k` best that `keep` accepts, as [`Vectors::search`] gives them, when the graph can
    /// answer; `None` when the exact scan should.
    pub fn search(
        &self,
        vectors: &Vectors,
        q: &Quantized,
        k: usize,
        keep: &dyn Fn(u64) -> bool,
    ) -> Option<Vec<(u64, f32)>> {
        let mut state = self.refresh(vectors);
        let graph = state.graph.as_ref()?;
        if k > GRAPH_UP_TO
            || graph.dims != q.q.len()
            || state.changed.len() as f32 > graph.ids.len() as f32 * EXACT_ABOVE
        {
            return None;
        }
        let want = (2 * k).min(graph.ids.len());
        let near = match catch_unwind(AssertUnwindSafe(|| graph.hnsw.search(&q.q, want, want.max(EF_SEARCH)))) {
            Ok(near) => near,
            Err(panic) => {
                // Not expected (the distance is never NaN nor negative), but then the scan answers.
                state.error = Some(format!("searching the vector graph panicked: {}", panic_message(&*panic)));
                if let Some(old) = state.graph.take() {
                    discard(old);
                }
                return None;
            }
        };
        let mut found = Vec::with_capacity(want + state.changed.len());
        for n in near {
            let Some(&id) = graph.ids.get(n.d_id) else { continue };
            if state.changed.contains(&id) || !keep(id) {
                continue;
            }
            if let Some(score) = vectors.score(q, id) {
                found.push((id, score));
            }
        }
        if found.len() < k {
            return None;
        }
        for &id in &state.changed {
            if let Some(score) = vectors.score(q, id)
                && keep(id)
            {
                found.push((id, score));
            }
        }
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        found.truncate(k);
        Some(found)
    }

    /// Where the graph is (after [`Ann::refresh`]).
    pub fn status(&self, vectors: &Vectors) -> VectorStatus {
        let state = self.refresh(vectors);
        VectorStatus {
            vectors: vectors.len(),
            exact_below: self.exact_below,
            graph: state.graph.as_ref().map(|g| g.ids.len()),
            changed: state.changed.len(),
            building: state.build.is_some(),
            builds: state.builds,
            last_build_s: state.last_build_s,
            error: state.error.clone(),
        }
    }

    /// Swaps in a finished build, drops a graph the index has become too small for, and starts
    /// a build when one is due.
    fn refresh(&self, vectors: &Vectors) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state_ref = &mut *state;
        let finished = match state_ref.build.as_ref().map(|b| b.done.try_recv()) {
            Some(Ok(built)) => Some(built),
            Some(Err(TryRecvError::Disconnected)) => Some(Err("the graph's build thread ended without a graph".into())),
            Some(Err(TryRecvError::Empty)) | None => None,
        };
        if let Some(built) = finished
            && let Some(build) = state_ref.build.take()
        {
            match built {
                Ok(graph) => {
                    state_ref.last_build_s = Some(build.started.elapsed().as_secs_f64());
                    state_ref.changed = build.changed;
                    if let Some(old) = state_ref.graph.replace(graph) {
                        discard(old);
                    }
                }
                Err(e) => state_ref.error = Some(e),
            }
        }
        let n = vectors.len();
        if n < self.exact_below / 2 {
            // Hysteresis: a graph built at the threshold is not dropped and built again as the
            // count goes back and forth across it.
            if let Some(old) = state_ref.graph.take() {
                discard(old);
                state_ref.changed.clear();
            }
            if let Some(build) = state_ref.build.take() {
                build.cancel.store(true, Ordering::Relaxed);
            }
        }
        let due = match &state_ref.graph {
            None => n >= self.exact_below,
            Some(g) => state_ref.changed.len() as f32 > g.ids.len() as f32 * REBUILD_AT,
        };
        if due && state_ref.build.is_none() && state_ref.error.is_none() {
            let (dims, ids, values) = vectors.snapshot();
            match start(Snapshot { dims, ids, values }) {
                Ok(build) => {
                    state_ref.build = Some(build);
                    state_ref.builds += 1;
                }
                Err(e) => state_ref.error = Some(e),
            }
        }
        state
    }
}

impl Drop for Ann {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(build) = &state.build {
            build.cancel.store(true, Ordering::Relaxed);
        }
        if let Some(graph) = state.graph.take() {
            discard(graph);
        }
    }
}

/// Starts building a graph of `snapshot` on a thread of its own.
fn start(snapshot: Snapshot) -> Result<Build, String> {
    let (tx, done) = mpsc::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let stop = cancel.clone();
    std::thread::Builder::new()
        .name("index-graph".into())
        .spawn(move || {
            let built = catch_unwind(AssertUnwindSafe(|| build(snapshot, &stop)))
                .unwrap_or_else(|panic| Err(format!("building the vector graph panicked: {}", panic_message(&*panic))));
            // The receiver is gone when the index was dropped: the graph goes with this thread.
            let _ = tx.send(built);
        })
        .map_err(|e| format!("starting the vector graph's build thread: {e}"))?;
    Ok(Build { done, changed: HashSet::new(), cancel, started: Instant::now() })
}

/// Builds the graph of `snapshot`, on as many threads as the machine has; `Err` when `cancel`
/// is set before it is done.
fn build(snapshot: Snapshot, cancel: &AtomicBool) -> Result<Graph, String> {
    let Snapshot { dims, ids, values } = snapshot;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("index-graph-{i}"))
        .build()
        .map_err(|e| format!("starting the vector graph's build threads: {e}"))?;
    let hnsw = Hnsw::new(LINKS, ids.len(), LAYERS, EF_CONSTRUCTION, Cosine::new());
    let rows: Vec<(&[i8], usize)> = values.chunks_exact(dims.max(1)).zip(0..).collect();
    for batch in rows.chunks(BATCH) {
        if cancel.load(Ordering::Relaxed) {
            return Err("the vector graph's build was cancelled".into());
        }
        let batch = batch.to_vec();
        pool.install(|| hnsw.parallel_insert_slice(&batch));
    }
    drop(rows);
    Ok(Graph { hnsw, ids, dims })
}

/// What a caught panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "no message".into(),
    }
}

/// Drops `graph` on a thread of its own: hnsw_rs frees a graph's links on a rayon pool, which
/// takes a while for a large one.
fn discard(graph: Graph) {
    let _ =
        std::thread::Builder::new().name("index-graph-drop".into()).spawn(
            move || match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                Ok(pool) => pool.install(move || drop(graph)),
                Err(_) => drop(graph),
            },
        );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A deterministic stream of numbers.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn unit(&mut self, dims: usize) -> Vec<f32> {
            unit((0..dims).map(|_| (self.next() % 20_001) as f32 / 10_000.0 - 1.0).collect())
        }
    }

    fn unit(v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    const DIMS: usize = 64;

    /// Points around `centres` random centres, as embeddings of related texts are.
    struct Clusters {
        rng: Rng,
        centres: Vec<Vec<f32>>,
    }

    impl Clusters {
        fn new(centres: usize) -> Clusters {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            let centres = (0..centres).map(|_| rng.unit(DIMS)).collect();
            Clusters { rng, centres }
        }

        fn point(&mut self) -> Vec<f32> {
            let c = (self.rng.next() % self.centres.len() as u64) as usize;
            let noise = self.rng.unit(DIMS);
            unit(self.centres[c].iter().zip(noise).map(|(c, e)| c + 0.8 * e).collect())
        }
    }

    /// `n` clustered vectors under ids 0..n, searched by a graph from 1000 on.
    fn filled(n: usize, clusters: &mut Clusters) -> Vectors {
        let mut vs = Vectors::with_threshold(1000);
        for id in 0..n as u64 {
            vs.insert(id, &Quantized::new(&clusters.point())).unwrap();
        }
        vs
    }

    /// Polls `vs` until `done` holds of its status, or fails after a minute.
    fn wait(vs: &Vectors, what: &str, done: impl Fn(&VectorStatus) -> bool) -> VectorStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = vs.status();
            assert!(status.error.is_none(), "{status:?}");
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: still {status:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|h| h.0).collect()
    }

    #[test]
    fn the_graph_finds_what_the_exact_scan_finds_with_the_same_scores() {
        let mut clusters = Clusters::new(40);
        let vs = filled(5000, &mut clusters);
        assert_eq!(vs.status().graph, None, "the exact scan answers until the graph is built");
        let status = wait(&vs, "the first graph", |s| s.graph.is_some());
        assert_eq!((status.graph, status.changed, status.exact_below, status.builds), (Some(5000), 0, 1000, 1));
        let (mut found, mut wanted) = (0, 0);
        for _ in 0..100 {
            let q = clusters.point();
            let approx = vs.search(&q, 10, |_| true);
            let exact = vs.search_exact(&q, 10, |_| true);
            assert_eq!(approx.len(), 10);
            for (id, score) in &approx {
                let (_, want) = vs.search_exact(&q, 5000, |i| i == *id)[0];
                assert_eq!(*score, want, "chunk {id} is rescored as the scan scores it");
            }
            found += exact.iter().filter(|e| approx.iter().any(|a| a.0 == e.0)).count();
            wanted += exact.len();
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    #[test]
    fn removed_chunks_disappear_at_once_added_ones_appear_and_filters_apply() {
        let mut clusters = Clusters::new(40);
        let mut vs = filled(4000, &mut clusters);
        wait(&vs, "the first graph", |s| s.graph.is_some());
        let q = clusters.point();
        let before = vs.search(&q, 10, |_| true);
        for id in ids(&before[..5]) {
            vs.remove(id);
        }
        // A new chunk equal to the query, and one of the graph's replaced by it too.
        vs.insert(9000, &Quantized::new(&q)).unwrap();
        vs.insert(before[5].0, &Quantized::new(&q)).unwrap();
        let after = vs.search(&q, 10, |_| true);
        assert_eq!(vs.status().graph, Some(4000), "the graph still answers");
        assert!(after.iter().all(|(id, _)| !ids(&before[..5]).contains(id)), "{after:?}");
        let mut top = ids(&after[..2]);
        top.sort();
        assert_eq!(top, [before[5].0, 9000]);
        assert!(after[0].1 > 0.99, "{after:?}");
        assert_eq!(after.iter().filter(|(id, _)| *id == before[5].0).count(), 1, "{after:?}");
        // Filters: a few left to the graph's answers, or none, and the scan takes over.
        for keep in [|id: u64| id.is_multiple_of(2), |id: u64| id.is_multiple_of(97)] {
            let hits = vs.search(&q, 10, keep);
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().all(|(id, _)| keep(*id)), "{hits:?}");
        }
        assert!(vs.search(&q, 10, |id| id == 9000).iter().map(|h| h.0).eq([9000]));
    }

    #[test]
    fn the_index_can_still_move_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<crate::Index>();
    }

    #[test]
    fn near_duplicate_vectors_do_not_panic() {
        let d = Cosine::new();
        let a = Quantized::new(&unit(vec![0.3; DIMS])).q;
        assert_eq!(d.eval(&a, &a), 0.0);
        assert_eq!(d.eval(&a, &[0; DIMS]), 1.0);
        let mut rng = Rng(7);
        let base = rng.unit(DIMS);
        let mut vs = Vectors::with_threshold(1000);
        for id in 0..3000u64 {
            // Copies of one vector, each nudged in one value or not at all: all normalised.
            let mut v = base.clone();
            v[(id % DIMS as u64) as usize] += (id % 3) as f32 * 1e-3;
            vs.insert(id, &Quantized::new(&unit(v))).unwrap();
        }
        wait(&vs, "a graph of near-duplicates", |s| s.graph.is_some());
        let hits = vs.search(&base, 10, |_| true);
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| h.1 > 0.99), "{hits:?}");
    }

    #[test]
    fn a_rebuild_starts_when_changes_pile_up_and_swaps_in() {
        let mut clusters = Clusters::new(40);
        let mut vs = filled(3000, &mut clusters);
        wait(&vs, "the first graph", |s| s.graph.is_some());
        // Over a tenth of the graph removed, and a few added.
        for id in 0..400 {
            vs.remove(id);
        }
        for id in 5000..5050 {
            vs.insert(id, &Quantized::new(&clusters.point())).unwrap();
        }
        let q = clusters.point();
        let status = vs.status();
        assert!(status.building && status.graph == Some(3000) && status.changed == 450, "{status:?}");
        let hits = vs.search(&q, 10, |_| true);
        assert!(hits.iter().all(|(id, _)| *id >= 400), "{hits:?}");
        let status = wait(&vs, "the rebuilt graph", |s| s.graph == Some(2650));
        assert_eq!((status.changed, status.building, status.builds), (0, false, 2));
        let hits = vs.search(&q, 10, |_| true);
        assert!(hits.iter().all(|(id, _)| *id >= 400), "{hits:?}");
        let exact = vs.search_exact(&q, 10, |_| true);
        assert!(exact.iter().filter(|e| hits.contains(e)).count() >= 8, "{hits:?}\n{exact:?}");
        // Back under half the threshold, the graph goes and the scan answers.
        for id in 400..3000 {
            vs.remove(id);
        }
        let status = vs.status();
        assert_eq!((status.vectors, status.graph, status.building), (50, None, false));
        assert_eq!(vs.search(&q, 3, |_| true), vs.search_exact(&q, 3, |_| true));
    }
}
