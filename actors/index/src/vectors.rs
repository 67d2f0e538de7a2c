//! Nearest-neighbour search over the chunks' int8 vectors, in memory: the module that decides
//! which side answers.
//!
//! The exact answer is a scan of every vector ([`crate::exact`]). From [`EXACT_BELOW`]
//! vectors on, an HNSW graph built in the background answers instead once it is ready
//! ([`crate::ann`]); its results are scored the same way. Both read the one copy of the
//! vectors that [`crate::exact::Exact`] holds; neither knows of this module.

use serde::Serialize;

use crate::ann::{Ann, EXACT_BELOW};
use crate::exact::Exact;
use crate::store::Quantized;

pub struct Vectors {
    exact: Exact,
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
        Vectors { exact: Exact::default(), ann: Ann::new(exact_below) }
    }

    /// The length of the vectors held, when there are any.
    pub fn dims(&self) -> Option<usize> {
        self.exact.dims()
    }

    /// Adds or replaces the vector of chunk `id`; a vector of another length than those
    /// already held is refused.
    pub fn insert(&mut self, id: u64, v: &Quantized) -> Result<(), String> {
        self.exact.insert(id, v)?;
        self.ann.changed(id);
        Ok(())
    }

    /// Removes chunk `id`.
    pub fn remove(&mut self, id: u64) {
        if self.exact.remove(id) {
            self.ann.changed(id);
        }
    }

    /// The `k` chunks most similar to `query` (a unit vector) that `keep` accepts, best first,
    /// with their cosine similarity: by the graph when there is one, else by the exact scan.
    pub fn search(&self, query: &[f32], k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        if self.dims() != Some(query.len()) || k == 0 {
            return Vec::new();
        }
        let q = Quantized::new(query);
        match self.ann.search(&self.exact, &q, k, &keep) {
            Some(found) => found,
            None => self.exact.search(&q, k, keep),
        }
    }

    /// [`Vectors::search`] by the exact scan, graph or not.
    pub fn search_exact(&self, query: &[f32], k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        if self.dims() != Some(query.len()) || k == 0 {
            return Vec::new();
        }
        self.exact.search(&Quantized::new(query), k, keep)
    }

    /// Where the graph is; a finished build swaps in, and a build that is due starts.
    pub fn status(&self) -> VectorStatus {
        let graph = self.ann.status(&self.exact);
        VectorStatus {
            vectors: self.exact.len(),
            exact_below: graph.exact_below,
            graph: graph.graph,
            changed: graph.changed,
            building: graph.building,
            builds: graph.builds,
            last_build_s: graph.last_build_s,
            error: graph.error,
        }
    }
}

#[cfg(test)]
mod tests;
