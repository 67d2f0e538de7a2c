//! The vector search: the exact scan, and the graph that takes over from it (driven through
//! [`Vectors`], as the index drives it).

use std::time::{Duration, Instant};

use hnsw_rs::prelude::Distance;

use super::*;
use crate::ann::Cosine;

#[test]
fn the_nearest_come_first_removed_ones_never_and_filters_apply() {
    let mut vs = Vectors::default();
    for (id, v) in [(1, [1.0, 0.0, 0.0]), (2, [0.9, 0.1, 0.0]), (3, [0.0, 1.0, 0.0]), (4, [0.7, 0.7, 0.0])] {
        vs.insert(id, &Quantized::new(&unit(v.to_vec()))).unwrap();
    }
    let q = unit(vec![1.0, 0.1, 0.0]);
    let ids = |hits: Vec<(u64, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    assert_eq!(ids(vs.search(&q, 3, |_| true)), [2, 1, 4]);
    let top = vs.search(&q, 1, |_| true)[0].1;
    assert!((top - 1.0).abs() < 0.01, "{top}");
    vs.remove(2);
    assert_eq!(ids(vs.search(&q, 3, |_| true)), [1, 4, 3]);
    assert_eq!(ids(vs.search(&q, 3, |id| id != 1)), [4, 3]);
    assert!(vs.insert(9, &Quantized::new(&[1.0, 0.0])).unwrap_err().contains("chunk 9"));
}

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
