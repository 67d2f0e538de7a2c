//! The exact side of the vector search: the chunks' int8 vectors in rows, scanned in full.
//!
//! The query is quantized like the stored vectors and each score is an integer dot product
//! times the two scales. At the sizes a codebase gives (thousands to tens of thousands of
//! chunks) it is exact and takes about a millisecond. It knows nothing of the graph: the
//! graph reads it ([`Exact::score`], [`Exact::snapshot`]) and [`crate::vectors`] decides which
//! of the two answers.

use std::collections::HashMap;

use crate::store::Quantized;

/// The vectors in rows of `dims` values, with their ids and scales.
#[derive(Default)]
pub struct Exact {
    dims: usize,
    ids: Vec<u64>,
    scales: Vec<f32>,
    values: Vec<i8>,
    /// Row of each id.
    rows: HashMap<u64, usize>,
}

impl Exact {
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
        Ok(())
    }

    /// Removes chunk `id` (the last row moves into its place); false when it had no vector.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(row) = self.rows.remove(&id) else { return false };
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
        true
    }

    /// The `k` chunks most similar to `q` that `keep` accepts, best first, by a scan of all.
    pub fn search(&self, q: &Quantized, k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
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
    pub fn score(&self, q: &Quantized, id: u64) -> Option<f32> {
        let row = *self.rows.get(&id)?;
        let mut dot = [0i32];
        scan(&q.q, &self.values[row * self.dims..(row + 1) * self.dims], &mut dot);
        Some(dot[0] as f32 * q.scale * self.scales[row])
    }

    /// A copy of the vectors, for a graph to be built from: their length, ids and values.
    pub fn snapshot(&self) -> (usize, Vec<u64>, Vec<i8>) {
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
