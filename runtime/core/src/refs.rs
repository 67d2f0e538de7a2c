//! The reference catalog (`[[reference]]` in the fleet file) and the matching that finds the
//! references a text calls for.
//!
//! A text is matched in three ways, most certain first:
//! 1. `@id` anywhere names a reference outright.
//! 2. Tags: each tag of a selectable reference is a case-insensitive phrase whose words may be
//!    joined by hyphens, spaces or underscores, found only as a whole term: not inside a dotted
//!    name (`java.util.List`), a path (`/usr/lib/java/`) or a longer identifier.
//! 3. Semantic: the text's embedding against each reference's description and tags, above a
//!    threshold (the caller embeds; [`semantic`] ranks).
//!
//! [`merge`] keeps one match per reference, explicit before tag before semantic. What reads
//! the references' files (discovery of what selected references name, by `@id` or by a
//! relative markdown link into another reference's path; the passage a text calls for; the
//! paths a persona may read) is the personas' (`mindfleet_personas::references`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Whether a reference is offered by matching or only taken when named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RefMode {
    /// Selected for every persona from the start.
    Auto,
    /// Offered as a candidate when a text matches it; the persona selects it.
    #[default]
    Selectable,
}

/// One source of reference knowledge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    /// A file or directory (absolute: relative paths are resolved against the fleet file's
    /// directory when the catalog is read).
    pub path: PathBuf,
    /// What its files are for: `templates`, `validation`, `policies`, `scripts` (each a list
    /// of paths within it).
    pub contents: BTreeMap<String, Vec<String>>,
    pub mode: RefMode,
}

impl Reference {
    /// What its semantic match is computed on.
    pub fn semantic_text(&self) -> String {
        format!("{}: {} ({})", self.name, self.description, self.tags.join(", "))
    }
}

/// How a reference was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Named as `@id`.
    Id,
    Tag,
    Semantic,
    /// Named by a selected reference (`@id` or a relative markdown link in its files).
    Linked,
    /// Selected for every persona from the start (`mode = "auto"`).
    Auto,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Id => "id",
            Via::Tag => "tag",
            Via::Semantic => "semantic",
            Via::Linked => "linked",
            Via::Auto => "auto",
        }
    }
}

/// A reference a text calls for, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefMatch {
    pub id: String,
    pub via: Via,
    /// The `@id`, the tags found, or the reference that linked it.
    pub matched: Vec<String>,
    /// 1 for a named reference, the number of tags found for tags, the cosine similarity for
    /// semantic matches, the depth for linked ones.
    pub score: f32,
}

/// What the enrichment pipeline found in one text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Enrichment {
    /// Best first: named, tags, semantic.
    pub matches: Vec<RefMatch>,
    /// Why semantic matching did not run on it, when it did not.
    pub semantic_off: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub refs: Vec<Reference>,
}

/// Characters that make a match part of something longer on either side.
fn joins_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Whether `tag` occurs in `text` as a whole term (see the module doc).
pub fn tag_matches(tag: &str, text: &str) -> bool {
    let words: Vec<String> = tag.split(['-', '_', ' ']).filter(|w| !w.is_empty()).map(|w| w.to_lowercase()).collect();
    if words.is_empty() {
        return false;
    }
    let lower = text.to_lowercase();
    let first = &words[0];
    let mut from = 0;
    while let Some(found) = lower[from..].find(first.as_str()) {
        let start = from + found;
        from = start + first.len();
        if let Some(end) = match_rest(&lower, from, &words[1..])
            && whole_term(&lower, start, end)
        {
            return true;
        }
    }
    false
}

/// Where the words after the first end, each after one separator (`-`, `_` or a space).
fn match_rest(text: &str, mut at: usize, words: &[String]) -> Option<usize> {
    for w in words {
        let sep = text[at..].chars().next()?;
        if !matches!(sep, '-' | '_' | ' ') {
            return None;
        }
        at += 1;
        if !text[at..].starts_with(w.as_str()) {
            return None;
        }
        at += w.len();
    }
    Some(at)
}

/// Whether `text[start..end]` stands alone: no word character, dot or slash joined before it,
/// and none after it (a dot after it only when a word follows, as in `java.util`).
fn whole_term(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    if before.is_some_and(|c| joins_word(c) || c == '.' || c == '/' || c == '\\') {
        return false;
    }
    let mut after = text[end..].chars();
    match after.next() {
        None => true,
        Some(c) if joins_word(c) || c == '/' || c == '\\' => false,
        Some('.') => !after.next().is_some_and(char::is_alphanumeric),
        Some(_) => true,
    }
}

/// The `@id`s of `text` that name a reference of `catalog`, in order, once each.
pub fn named<'a>(catalog: &'a Catalog, text: &str) -> Vec<&'a Reference> {
    let mut out: Vec<&Reference> = Vec::new();
    for (i, _) in text.match_indices('@') {
        let rest = &text[i + 1..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).unwrap_or(rest.len());
        let id = rest[..end].to_ascii_lowercase();
        if let Some(r) = catalog.get(&id)
            && !out.iter().any(|o| o.id == r.id)
        {
            out.push(r);
        }
    }
    out
}

impl Catalog {
    pub fn get(&self, id: &str) -> Option<&Reference> {
        self.refs.iter().find(|r| r.id == id)
    }

    /// References named as `@id` in `text`.
    pub fn explicit(&self, text: &str) -> Vec<RefMatch> {
        named(self, text)
            .into_iter()
            .map(|r| RefMatch { id: r.id.clone(), via: Via::Id, matched: vec![format!("@{}", r.id)], score: 1.0 })
            .collect()
    }

    /// Selectable references not in `skip` with a tag in `text`, most tags first.
    pub fn by_tags(&self, text: &str, skip: &BTreeSet<String>) -> Vec<RefMatch> {
        let mut out: Vec<RefMatch> = self
            .refs
            .iter()
            .filter(|r| r.mode == RefMode::Selectable && !skip.contains(&r.id))
            .filter_map(|r| {
                let matched: Vec<String> = r.tags.iter().filter(|t| tag_matches(t, text)).cloned().collect();
                (!matched.is_empty()).then(|| RefMatch {
                    id: r.id.clone(),
                    via: Via::Tag,
                    score: matched.len() as f32,
                    matched,
                })
            })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
        out
    }
}

/// A passage of a reference's files (`mindfleet_personas::references::excerpt`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Excerpt {
    /// The file, relative to the reference's path (its name when the reference is a file).
    pub file: String,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
}

/// Relative targets of `[text](target)` links (no scheme, not absolute, anchors cut).
pub fn markdown_links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or("").trim();
            (!target.is_empty()
                && !target.contains("://")
                && !target.starts_with('/')
                && !target.starts_with("mailto:"))
            .then_some(target)
        })
        .collect()
}

/// Semantic candidates: references (not in `skip`, selectable) whose similarity to the text is
/// at least `threshold`, best first. `similarity` holds each reference's, by id.
pub fn semantic(
    catalog: &Catalog,
    similarity: &BTreeMap<String, f32>,
    threshold: f32,
    skip: &BTreeSet<String>,
) -> Vec<RefMatch> {
    let mut out: Vec<RefMatch> = catalog
        .refs
        .iter()
        .filter(|r| r.mode == RefMode::Selectable && !skip.contains(&r.id))
        .filter_map(|r| {
            let s = *similarity.get(&r.id)?;
            (s >= threshold).then(|| RefMatch { id: r.id.clone(), via: Via::Semantic, matched: Vec::new(), score: s })
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    out
}

/// What `text` calls for, before discovery: the references it names, then those whose tags it
/// has, then (with each reference's `similarity` to it, when semantic matching is on) those
/// at least `threshold` alike; one match each, in that order. References in `skip` are not
/// offered by tag or meaning (an `@id` names them all the same).
pub fn candidates(
    catalog: &Catalog,
    text: &str,
    similarity: Option<&BTreeMap<String, f32>>,
    threshold: f32,
    skip: &BTreeSet<String>,
) -> Vec<RefMatch> {
    let named = catalog.explicit(text);
    let mut skip = skip.clone();
    skip.extend(named.iter().map(|m| m.id.clone()));
    let tags = catalog.by_tags(text, &skip);
    skip.extend(tags.iter().map(|m| m.id.clone()));
    let meaning = similarity.map(|s| semantic(catalog, s, threshold, &skip)).unwrap_or_default();
    merge([named, tags, meaning])
}

/// One match per reference, in order of certainty: named, then tags, then semantic, then
/// linked; within each, as given.
pub fn merge(groups: impl IntoIterator<Item = Vec<RefMatch>>) -> Vec<RefMatch> {
    let mut all: Vec<RefMatch> = groups.into_iter().flatten().collect();
    // Stable: the given order stays within each way of matching.
    all.sort_by_key(|m| m.via);
    let mut out: Vec<RefMatch> = Vec::new();
    for m in all {
        if !out.iter().any(|o| o.id == m.id) {
            out.push(m);
        }
    }
    out
}

/// The hint a persona reads: each candidate with why it matched.
pub fn hint_block(catalog: &Catalog, matches: &[RefMatch]) -> String {
    if matches.is_empty() {
        return String::new();
    }
    let mut out = String::from("References that may help:");
    for m in matches {
        let name = catalog.get(&m.id).map_or("", |r| r.name.as_str());
        let why = match m.via {
            Via::Id => format!("named: {}", m.matched.join(", ")),
            Via::Tag => format!("matched: {}", m.matched.join(", ")),
            Via::Semantic => format!("semantic: {:.2}", m.score),
            Via::Linked => format!("linked from: {}", m.matched.join(", ")),
            Via::Auto => "selected for every persona".to_string(),
        };
        out.push_str(&format!("\n- {} ({name}): {why}", m.id));
    }
    out
}

#[cfg(test)]
mod tests;
