//! The reference catalog as a persona reads it: the catalog's vocabulary and matching
//! ([`mindfleet_core::refs`], re-exported here, so that a persona reads references through one
//! module), what a persona keeps of them without reading a file
//! ([`mindfleet_cognition::references`], re-exported too), and what reads the references' files:
//! the links among them ([`library`], [`Discover`]), whether a path may be read ([`Allows`]) and
//! the passage a text calls for ([`excerpt`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use mindfleet_cognition::references::{Authorised, Library, RefBook, walk};
pub use mindfleet_core::refs::*;

/// Discovery: what selected references name in their files.
pub trait Discover {
    /// References that `selected` name, and those that they name, to `depth` links away,
    /// breadth first; each found once (a cycle ends where it closes).
    fn discover(&self, selected: &[String], depth: usize) -> Vec<RefMatch>;
}

impl Discover for Catalog {
    fn discover(&self, selected: &[String], depth: usize) -> Vec<RefMatch> {
        walk(selected, depth, |id| self.get(id).map(|r| named_by(self, r)).unwrap_or_default())
    }
}

/// What each reference of `catalog` names in its files, by id: the links discovery follows.
pub fn links(catalog: &Catalog) -> BTreeMap<String, Vec<String>> {
    catalog.refs.iter().map(|r| (r.id.clone(), named_by(catalog, r))).collect()
}

/// `catalog` and the links its references' files make, read now: discovery then walks them
/// without reading a file.
pub fn library(catalog: Catalog, depth: usize) -> Library {
    let links = links(&catalog);
    Library { catalog: Arc::new(catalog), links: Arc::new(links), depth }
}

/// The other references `r`'s text files name: by `@id`, or by a relative markdown link
/// to a path inside another reference's path.
fn named_by(catalog: &Catalog, r: &Reference) -> Vec<String> {
    let mut out = Vec::new();
    for file in text_files(&r.path) {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for other in named(catalog, &text) {
            if other.id != r.id && !out.contains(&other.id) {
                out.push(other.id.clone());
            }
        }
        let dir = file.parent().unwrap_or(Path::new("."));
        for target in markdown_links(&text) {
            let Ok(abs) = dir.join(target).canonicalize() else { continue };
            for other in &catalog.refs {
                let root = other.path.canonicalize().unwrap_or_else(|_| other.path.clone());
                if other.id != r.id && abs.starts_with(&root) && !out.contains(&other.id) {
                    out.push(other.id.clone());
                }
            }
        }
    }
    out
}

/// Files of a reference that links are read from: the file itself, or the Markdown and text
/// files of a directory (not hidden, 4 levels deep at most, 256 KiB each at most).
fn text_files(path: &Path) -> Vec<PathBuf> {
    const MAX_BYTES: u64 = 256 * 1024;
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let hidden = p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            if p.is_dir() && depth > 0 {
                walk(&p, depth - 1, out);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("md" | "markdown" | "txt"))
                && p.metadata().is_ok_and(|m| m.len() <= MAX_BYTES)
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    if path.is_file() {
        out.push(path.to_path_buf());
    } else {
        walk(path, 4, &mut out);
    }
    out
}

/// Whether a path may be read under the paths a persona was allowed.
pub trait Allows {
    /// Whether `path`, resolved, is one of the allowed paths or inside one (each resolved too,
    /// so neither `..` nor a link leads out of them).
    fn allows(&self, path: &Path) -> bool;
}

impl Allows for Authorised {
    fn allows(&self, path: &Path) -> bool {
        let Ok(p) = path.canonicalize() else { return false };
        self.roots().iter().any(|r| p.starts_with(r.canonicalize().as_deref().unwrap_or(r)))
    }
}

/// Longest passage an excerpt keeps, in characters.
const EXCERPT_CHARS: usize = 700;

/// The passage (a paragraph: lines between blank lines) of `r`'s text files that shares the
/// most words of four letters or more with `text`, the first one when none shares any. Only
/// files `auth` allows are read; the others are returned, by name, as refused.
pub fn excerpt(r: &Reference, text: &str, auth: &Authorised) -> (Option<Excerpt>, Vec<String>) {
    let words = |t: &str| -> BTreeSet<String> {
        mindfleet_core::words::split(t).filter(|w| w.chars().count() >= 4).map(str::to_lowercase).collect()
    };
    let wanted = words(text);
    let mut refused = Vec::new();
    let mut best: Option<(usize, Excerpt)> = None;
    for file in text_files(&r.path) {
        let name = file.strip_prefix(&r.path).ok().filter(|p| !p.as_os_str().is_empty()).unwrap_or(&file);
        let name = if r.path.is_file() {
            file.file_name().map_or_else(|| name.display().to_string(), |n| n.to_string_lossy().into_owned())
        } else {
            name.display().to_string()
        };
        if !auth.allows(&file) {
            refused.push(name);
            continue;
        }
        let Ok(content) = std::fs::read_to_string(&file) else { continue };
        let lines: Vec<&str> = content.lines().collect();
        let mut start = 0;
        while start < lines.len() {
            if lines[start].trim().is_empty() {
                start += 1;
                continue;
            }
            let end = (start..lines.len()).find(|&i| lines[i].trim().is_empty()).unwrap_or(lines.len());
            let para = lines[start..end].join("\n");
            let shared = words(&para).intersection(&wanted).count();
            if best.as_ref().is_none_or(|(s, _)| shared > *s) {
                let text: String = para.chars().take(EXCERPT_CHARS).collect();
                best = Some((shared, Excerpt { file: name.clone(), start_line: start + 1, end_line: end, text }));
            }
            start = end;
        }
    }
    (best.map(|(_, e)| e), refused)
}

#[cfg(test)]
mod tests;
