//! Nearest-neighbour search over the chunks' int8 vectors, in memory.
//!
//! The exact answer is a scan of every vector: the query is quantized like the stored vectors
//! and each score is an integer dot product times the two scales. At the sizes a codebase
//! gives (thousands to tens of thousands of chunks) it is exact and takes about a millisecond.
//! From [`crate::ann::EXACT_BELOW`] vectors on, an HNSW graph built in the background answers
//! instead once it is ready ([`crate::ann`]); its results are scored the same way.

use std::collections::HashMap;

use serde::Serialize;

use crate::ann::{Ann, EXACT_BELOW};
use crate::store::Quantized;

pub struct Vectors {
    dims: usize,
    ids: Vec<u64>,
    scales: Vec<f32>,
    values: Vec<i8>,
    /// Row of each id.
    rows: HashMap<u64, usize>,
    ann: Ann,
}

/// Where the vector side of an index is: how many vectors, and whether a graph answers.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VectorStatus {
    pub vectors: usize,
    /// Below this many vectors the exact scan answers and no graph is built.
    pub exact_below: usize,
    /// The vectors in the graph, when there is one (it answers unless too much has changed
    /// since it was built).
    pub graph: Option<usize>,
    /// Vectors added, replaced or removed since the graph's snapshot: filtered out of its
    /// answers and scored exactly beside it.
    pub changed: usize,
    /// A graph is being built in the background.
    pub building: bool,
    /// Graph builds started since the index was opened.
    pub builds: usize,
    /// How long the last graph took to build: from its snapshot to its swap, at the first
    /// search or status after it was done.
    pub last_build_s: Option<f64>,
    /// Why the graph was given up, when it was (a build or a search failed): the exact scan
    /// answers.
    pub error: Option<String>,
}

impl Default for Vectors {
    fn default() -> Vectors {
        Vectors::with_threshold(EXACT_BELOW)
    }
}

impl Vectors {
    /// Vectors searched by exact scan below `exact_below` of them, by a graph from there on.
    pub fn with_threshold(exact_below: usize) -> Vectors {
        Vectors {
            dims: 0,
            ids: Vec::new(),
            scales: Vec::new(),
            values: Vec::new(),
            rows: HashMap::new(),
            ann: Ann::new(exact_below),
        }
    }

    /// How many vectors are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The length of the vectors held, when there are any.
    pub fn dims(&self) -> Option<usize> {
        (!self.ids.is_empty()).then_some(self.dims)
    }

    /// Adds or replaces the vector of chunk `id`; a vector of another length than those
    /// already held is refused.
    pub fn insert(&mut self, id: u64, v: &Quantized) -> Result<(), String> {
        if self.ids.is_empty() {
            self.dims = v.q.len();
        }
        if v.q.len() != self.dims {
            return Err(format!("chunk {id}: a vector of {} values among vectors of {}", v.q.len(), self.dims));
        }
        match self.rows.get(&id) {
            Some(&row) => {
                self.values[row * self.dims..(row + 1) * self.dims].copy_from_slice(&v.q);
                self.scales[row] = v.scale;
            }
            None => {
                self.rows.insert(id, self.ids.len());
                self.ids.push(id);
                self.scales.push(v.scale);
                self.values.extend_from_slice(&v.q);
            }
        }
        self.ann.changed(id);
        Ok(())
    }

    /// Removes chunk `id` (the last row moves into its place).
    pub fn remove(&mut self, id: u64) {
        let Some(row) = self.rows.remove(&id) else { return };
        let last = self.ids.len() - 1;
        if row != last {
            let moved = self.ids[last];
            self.ids[row] = moved;
            self.scales[row] = self.scales[last];
            let (head, tail) = self.values.split_at_mut(last * self.dims);
            head[row * self.dims..(row + 1) * self.dims].copy_from_slice(&tail[..self.dims]);
            self.rows.insert(moved, row);
        }
        self.ids.pop();
        self.scales.pop();
        self.values.truncate(last * self.dims);
        self.ann.changed(id);
    }

    /// The `k` chunks most similar to `query` (a unit vector) that `keep` accepts, best first,
    /// with their cosine similarity: by the graph when there is one, else by the exact scan.
    pub fn search(&self, query: &[f32], k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        if self.ids.is_empty() || query.len() != self.dims || k == 0 {
            return Vec::new();
        }
        let q = Quantized::new(query);
        match self.ann.search(self, &q, k, &keep) {
            Some(found) => found,
            None => self.scan_search(&q, k, keep),
        }
    }

    /// [`Vectors::search`] by the exact scan, graph or not.
    pub fn search_exact(&self, query: &[f32], k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        if self.ids.is_empty() || query.len() != self.dims || k == 0 {
            return Vec::new();
        }
        self.scan_search(&Quantized::new(query), k, keep)
    }

    /// Where the graph is; a finished build swaps in, and a build that is due starts.
    pub fn status(&self) -> VectorStatus {
        self.ann.status(self)
    }

    fn scan_search(&self, q: &Quantized, k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let mut dots = vec![0i32; self.ids.len()];
        scan(&q.q, &self.values, &mut dots);
        let mut best: Vec<(u64, f32)> = Vec::with_capacity(k + 1);
        let mut floor = f32::NEG_INFINITY;
        for ((id, scale), dot) in self.ids.iter().zip(&self.scales).zip(&dots) {
            let score = *dot as f32 * q.scale * scale;
            if score <= floor || !keep(*id) {
                continue;
            }
            let at = best.partition_point(|(_, s)| *s >= score);
            best.insert(at, (*id, score));
            if best.len() > k {
                best.pop();
                floor = best[k - 1].1;
            }
        }
        best
    }

    /// Chunk `id`'s similarity to `q` as the scan scores it, when it has a vector here.
    pub(crate) fn score(&self, q: &Quantized, id: u64) -> Option<f32> {
        let row = *self.rows.get(&id)?;
        let mut dot = [0i32];
        scan(&q.q, &self.values[row * self.dims..(row + 1) * self.dims], &mut dot);
        Some(dot[0] as f32 * q.scale * self.scales[row])
    }

    /// A copy of the vectors, for a graph to be built from: their length, ids and values.
    pub(crate) fn snapshot(&self) -> (usize, Vec<u64>, Vec<i8>) {
        (self.dims, self.ids.clone(), self.values.clone())
    }
}

/// `dots[row]` = the dot product of `q` with each row of `values` (rows of `q.len()`). The
/// loop is compiled for AVX-512 and for AVX2 too, and the best the CPU has runs: the compiler
/// vectorises it with 16-bit multiplies summed into 32 bits.
fn scan(q: &[i8], values: &[i8], dots: &mut [i32]) {
    #[inline(always)]
    fn body(q: &[i8], values: &[i8], dots: &mut [i32]) {
        for (row, d) in values.chunks_exact(q.len()).zip(dots) {
            *d = row.iter().zip(q).map(|(x, y)| *x as i16 as i32 * *y as i16 as i32).sum();
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw")]
        fn v4(q: &[i8], values: &[i8], dots: &mut [i32]) {
            body(q, values, dots)
        }
        #[target_feature(enable = "avx2")]
        fn v3(q: &[i8], values: &[i8], dots: &mut [i32]) {
            body(q, values, dots)
        }
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has the features `v4` is compiled for (checked above).
            return unsafe { v4(q, values, dots) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above, for `v3`.
            return unsafe { v3(q, values, dots) };
        }
    }
    body(q, values, dots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn the_nearest_come_first_removed_ones_never_and_filters_apply() {
        let mut vs = Vectors::default();
        for (id, v) in [(1, [1.0, 0.0, 0.0]), (2, [0.9, 0.1, 0.0]), (3, [0.0, 1.0, 0.0]), (4, [0.7, 0.7, 0.0])] {
            vs.insert(id, &Quantized::new(&unit(&v))).unwrap();
        }
        let q = unit(&[1.0, 0.1, 0.0]);
        let ids = |hits: Vec<(u64, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(vs.search(&q, 3, |_| true)), [2, 1, 4]);
        let top = vs.search(&q, 1, |_| true)[0].1;
        assert!((top - 1.0).abs() < 0.01, "{top}");
        vs.remove(2);
        assert_eq!(ids(vs.search(&q, 3, |_| true)), [1, 4, 3]);
        assert_eq!(ids(vs.search(&q, 3, |id| id != 1)), [4, 3]);
        assert!(vs.insert(9, &Quantized::new(&[1.0, 0.0])).unwrap_err().contains("chunk 9"));
    }
}
