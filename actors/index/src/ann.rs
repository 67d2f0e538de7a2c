//! Approximate nearest neighbours over the chunks' int8 vectors: an HNSW graph (hnsw_rs) that
//! answers the vector search once an index holds enough vectors for the exact scan to be the
//! slower of the two ([`EXACT_BELOW`]). It reads the vectors from [`Exact`] and is tested
//! through the module that chooses between the two (`vectors/tests.rs`).
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
//!   leaves the exact scan answering, says why in [`GraphStatus::error`], and no graph is built
//!   again until the index is opened again.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use hnsw_rs::prelude::{Distance, Hnsw};

use crate::exact::Exact;
use crate::store::Quantized;

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

/// Where the graph is, as [`Ann::status`] finds it.
pub struct GraphStatus {
    /// Below this many vectors no graph is built.
    pub exact_below: usize,
    /// The vectors in the graph, when there is one.
    pub graph: Option<usize>,
    /// Ids added, replaced or removed since the graph's snapshot.
    pub changed: usize,
    /// A build is under way.
    pub building: bool,
    /// Builds started since the graph side was made.
    pub builds: usize,
    /// How long the last build took, from its snapshot to its swap.
    pub last_build_s: Option<f64>,
    /// Why the graph was given up, when it was.
    pub error: Option<String>,
}

/// The graph side of the vector search: its graph, its build and the ids changed since.
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

    /// The `k` best that `keep` accepts, as [`Exact::search`] gives them, when the graph can
    /// answer; `None` when the exact scan should.
    pub fn search(
        &self,
        vectors: &Exact,
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
    pub fn status(&self, vectors: &Exact) -> GraphStatus {
        let state = self.refresh(vectors);
        GraphStatus {
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
    fn refresh(&self, vectors: &Exact) -> MutexGuard<'_, State> {
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
