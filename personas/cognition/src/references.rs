//! What a persona knows of its references, without reading a file: the ones it selected and
//! why ([`RefBook`]), the paths that lets it read ([`Authorised`], resolved where the files are
//! read), and the links discovery follows ([`Library`], read once for the fleet by
//! `mindfleet_personas::references`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mindfleet_core::dump::ReferencesDump;
use mindfleet_core::refs::{self, Catalog, Enrichment, RefMatch, Via};

/// The reference catalog and the links its references' files make, read once for the fleet:
/// discovery walks them without reading a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Library {
    pub catalog: Arc<Catalog>,
    /// What each reference's files name, by id, in the order discovery meets them.
    pub links: Arc<BTreeMap<String, Vec<String>>>,
    /// How many links away discovery goes.
    pub depth: usize,
}

impl Library {
    /// The references `selected` lead to, to `depth` links away, breadth first, each once (a
    /// cycle ends where it closes), and not already in `known`.
    pub fn discover(&self, selected: &[String], known: &BTreeSet<String>) -> Vec<RefMatch> {
        let mut found = walk(selected, self.depth, |id| self.links.get(id).cloned().unwrap_or_default());
        found.retain(|m| !known.contains(&m.id));
        found
    }
}

/// The references `selected` lead to through `links` (what a reference names), to `depth` links
/// away, breadth first; each found once (a cycle ends where it closes).
pub fn walk(selected: &[String], depth: usize, links: impl Fn(&str) -> Vec<String>) -> Vec<RefMatch> {
    let mut seen: BTreeSet<String> = selected.iter().cloned().collect();
    let mut queue: VecDeque<(String, usize)> = selected.iter().map(|s| (s.clone(), 0)).collect();
    let mut out = Vec::new();
    while let Some((id, d)) = queue.pop_front() {
        if d == depth {
            continue;
        }
        for next in links(&id) {
            if seen.insert(next.clone()) {
                out.push(RefMatch {
                    id: next.clone(),
                    via: Via::Linked,
                    matched: vec![id.clone()],
                    score: (d + 1) as f32,
                });
                queue.push_back((next, d + 1));
            }
        }
    }
    out
}

/// The paths a persona may read: those of the references it selected (each a file or a
/// directory). They are kept as the catalog names them and resolved where a file is read
/// (`mindfleet_personas::references::Allows`), so neither `..` nor a link leads out of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Authorised {
    roots: Vec<PathBuf>,
}

impl Authorised {
    pub fn allow(&mut self, path: &Path) {
        if !self.roots.iter().any(|r| r == path) {
            self.roots.push(path.to_path_buf());
        }
    }

    /// The allowed paths, as given.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }
}

/// One persona's references: what it selected and why, the paths that lets it read, and the
/// matches of the event it is on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RefBook {
    pub selected: BTreeMap<String, RefMatch>,
    pub authorised: Authorised,
    /// Why semantic matching is off, as of the last enrichment.
    pub semantic_off: Option<String>,
    /// Matches made so far.
    pub matches: u64,
    /// The matches of the event being handled and of its steps' results, each reference once.
    pub current: Vec<RefMatch>,
    /// The last event that called for any, and its matches.
    pub last: Option<(String, Vec<RefMatch>)>,
}

impl RefBook {
    /// The hint block of the event in hand: what its texts called for and why (the references
    /// every persona has are left out); empty when nothing was called for or there is no
    /// catalog.
    pub fn hint(&self, catalog: Option<&Catalog>) -> String {
        let Some(catalog) = catalog else { return String::new() };
        let called: Vec<RefMatch> = self.current.iter().filter(|m| m.via != Via::Auto).cloned().collect();
        refs::hint_block(catalog, &called)
    }

    /// Selects `m`'s reference and authorises its path; `false` when it was selected already.
    pub fn select(&mut self, catalog: &Catalog, m: RefMatch) -> bool {
        let Some(r) = catalog.get(&m.id) else { return false };
        if self.selected.contains_key(&m.id) {
            return false;
        }
        self.authorised.allow(&r.path);
        self.selected.insert(m.id.clone(), m);
        true
    }

    /// Adds to the current event's matches those of `e` it did not have; returns them.
    pub fn note(&mut self, e: Enrichment) -> Vec<RefMatch> {
        self.semantic_off = e.semantic_off;
        let fresh: Vec<RefMatch> =
            e.matches.into_iter().filter(|m| !self.current.iter().any(|c| c.id == m.id)).collect();
        self.matches += fresh.len() as u64;
        self.current.extend(fresh.iter().cloned());
        fresh
    }

    /// The current event's matches, for its decision; kept as the last ones when there are any.
    pub fn finish(&mut self, event_id: &str) -> Vec<RefMatch> {
        let current = std::mem::take(&mut self.current);
        if !current.is_empty() {
            self.last = Some((event_id.to_string(), current.clone()));
        }
        current
    }

    pub fn dump(&self) -> ReferencesDump {
        ReferencesDump {
            selected: self.selected.values().cloned().collect(),
            semantic: self.semantic_off.as_ref().map_or_else(|| "on".to_string(), |why| format!("off: {why}")),
            matches: self.matches,
            last_event: self.last.as_ref().map(|(id, _)| id.clone()),
            last: self.last.as_ref().map(|(_, m)| m.clone()).unwrap_or_default(),
        }
    }
}
