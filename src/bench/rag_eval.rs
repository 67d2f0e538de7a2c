//! `mindfleet bench rag-eval`: how well the codebase index finds the right file, on a public
//! codebase it was not written with, against a naive baseline built in the same run.
//!
//! The codebase is Werkzeug 3.0.6, its wheel fetched from the Python package index and checked
//! against its pinned sha256 ([`WERKZEUG`]). The questions (`bench/rag-eval/*.jsonl`, built into
//! the binary) are natural-language ones with the files that answer them, written by reading the
//! code; each says whether it uses identifiers of its answers, and that flag is checked here
//! against the answers' own names ([`identifiers`]).
//!
//! Two indexes of the tree are built with the real MiniLM model:
//! - ours: code-aware chunks, small neighbours merged ([`mindfleet_index::chunk::Chunker`]);
//! - the baseline: fixed windows of 40 lines, not cut to the model's window
//!   ([`UpdateOptions::windows`]), with the same BM25, the same model and the same fusion.
//!
//! Every question is asked of each in the three modes (keyword, vector, hybrid) and scored by
//! FILE: the hits' paths in rank order, each file once at its best rank. Recall@5 is the share
//! of a question's answer files among the first 5 files, MRR@10 the reciprocal rank of the first
//! answer file among the first 10 (0 when none is there); both are averaged over the questions,
//! all of them and the two subsets (with and without identifiers).

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use mindfleet_actors::embed::IndexModel;
use mindfleet_index::chunk::{Chunker, Lang, line_windows};
use mindfleet_index::{Embed, Hit, Index, Mode, SearchOptions, UpdateOptions};
use serde::Deserialize;
use serde_json::{Value, json};

use super::round;

/// The codebase the questions are about.
pub use mindfleet_models::fetch::WERKZEUG;

/// The questions about [`WERKZEUG`], one JSON object a line.
pub const QUESTIONS: &str = include_str!("../../bench/rag-eval/werkzeug-3.0.6.jsonl");

/// Files counted by Recall@k and by MRR@k.
pub const RECALL_AT: usize = 5;
pub const MRR_AT: usize = 10;
/// Lines of the baseline's windows.
pub const BASELINE_LINES: usize = 40;
/// Chunks asked for per question, for the ranking of files: enough to give 10 distinct files.
const CHUNKS: usize = 50;

/// One question, as the JSONL file has it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub id: String,
    pub query: String,
    /// Paths relative to the indexed tree.
    pub answers: Vec<String>,
    /// Whether the query has a name its answers define (or a part of their paths).
    pub uses_identifiers: bool,
}

/// Reads a question file: one object a line, blank lines skipped; ids unique, answers given.
pub fn parse_questions(text: &str) -> anyhow::Result<Vec<Question>> {
    let mut out: Vec<Question> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let q: Question = serde_json::from_str(line).with_context(|| format!("questions: line {}", i + 1))?;
        anyhow::ensure!(!q.answers.is_empty(), "questions: {}: no answers", q.id);
        anyhow::ensure!(out.iter().all(|o| o.id != q.id), "questions: {}: id given twice", q.id);
        out.push(q);
    }
    anyhow::ensure!(!out.is_empty(), "questions: none");
    Ok(out)
}

/// The files of `hits` in rank order, each once (at its first place).
pub fn ranked_files(hits: &[Hit]) -> Vec<&str> {
    let mut seen = HashSet::new();
    hits.iter().map(|h| h.path.as_str()).filter(|p| seen.insert(*p)).collect()
}

/// The share of `answers` among the first `k` of `files`.
pub fn recall_at(files: &[&str], answers: &[String], k: usize) -> f64 {
    let top = &files[..files.len().min(k)];
    answers.iter().filter(|a| top.contains(&a.as_str())).count() as f64 / answers.len() as f64
}

/// 1 / the rank of the first answer among the first `k` of `files`; 0 when none is there.
pub fn reciprocal_rank_at(files: &[&str], answers: &[String], k: usize) -> f64 {
    files.iter().take(k).position(|f| answers.iter().any(|a| a == f)).map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// The names a question must not use to count as one without identifiers: the components of
/// each answer's path (the file's without its extension; with and without leading
/// underscores), and in its text the names of definitions (`def`, `class`, `function`, ...) and
/// of assignments at the start of a line. Lower-cased.
pub fn identifiers(path: &str, text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let part = if i + 1 == parts.len() { part.rsplit_once('.').map_or(*part, |(stem, _)| stem) } else { part };
        out.insert(part.to_lowercase());
        out.insert(part.trim_start_matches('_').to_lowercase());
    }
    let name = |s: &str| -> Option<String> {
        let n: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        n.starts_with(|c: char| c.is_alphabetic() || c == '_').then(|| n.to_lowercase())
    };
    let defining: &[&str] = match path.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "py" | "pyi" => &["def ", "async def ", "class "],
        "js" | "mjs" | "cjs" | "jsx" | "ts" | "tsx" => {
            &["function ", "async function ", "function* ", "class ", "const ", "let ", "var "]
        }
        _ => &[],
    };
    for line in text.lines() {
        let trimmed = line.trim_start();
        let trimmed = trimmed.strip_prefix("export ").unwrap_or(trimmed);
        if let Some(n) = defining.iter().find_map(|d| trimmed.strip_prefix(d)).and_then(name) {
            out.insert(n);
        }
        // `NAME = ...` or `NAME: type = ...` at the start of a line (not `==`).
        if let Some(n) = name(line) {
            let rest = line[n.len()..].trim_start();
            let rest = match rest.strip_prefix(':') {
                Some(typed) => typed.find('=').map_or("", |i| &typed[i..]),
                None => rest,
            };
            if rest.starts_with('=') && !rest.starts_with("==") {
                out.insert(n);
            }
        }
    }
    out.remove("");
    out
}

/// The words of `query` that are names of its answers (see [`identifiers`]).
fn identifiers_used(query: &str, names: &HashSet<String>) -> Vec<String> {
    let mut used: Vec<String> = query
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map(str::to_lowercase)
        .filter(|w| names.contains(w))
        .collect();
    used.sort();
    used.dedup();
    used
}

/// Checks each question's answers exist under `tree` and its `uses_identifiers` flag.
fn check_questions(tree: &Path, questions: &[Question]) -> anyhow::Result<()> {
    for q in questions {
        let mut names = HashSet::new();
        for a in &q.answers {
            let text = std::fs::read_to_string(tree.join(a))
                .with_context(|| format!("question {}: answer {a} under {}", q.id, tree.display()))?;
            names.extend(identifiers(a, &text));
        }
        let used = identifiers_used(&q.query, &names);
        anyhow::ensure!(
            q.uses_identifiers != used.is_empty(),
            "question {}: marked uses_identifiers={} but {}",
            q.id,
            q.uses_identifiers,
            if used.is_empty() { "it has none of its answers' names".to_string() } else { format!("it has {used:?}") }
        );
    }
    Ok(())
}

/// Sums of one mode's scores over a subset of the questions.
#[derive(Default, Clone, Copy)]
struct Sums {
    n: usize,
    recall: f64,
    rr: f64,
}

impl Sums {
    fn add(&mut self, recall: f64, rr: f64) {
        self.n += 1;
        self.recall += recall;
        self.rr += rr;
    }

    fn json(&self) -> Value {
        let mean = |x: f64| if self.n == 0 { Value::Null } else { round(x / self.n as f64, 3).into() };
        json!({ "questions": self.n, "recall_at_5": mean(self.recall), "mrr_at_10": mean(self.rr) })
    }
}

/// The text files under `dir` (hidden ones, binary ones and ones not UTF-8 left out, as the
/// index leaves them out), with their paths relative to `root`.
fn text_files(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| dir.display().to_string())?
        .collect::<Result<_, _>>()
        .with_context(|| dir.display().to_string())?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            text_files(root, &path, out)?;
            continue;
        }
        let bytes = std::fs::read(&path).with_context(|| path.display().to_string())?;
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue;
        }
        if let Ok(text) = String::from_utf8(bytes) {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            out.push((rel, text));
        }
    }
    Ok(())
}

/// Sizes of the chunks the index makes of `tree` (cut again here, as the index cuts them): their
/// tokens as the model counts them and their lines, and the share of them longer than the
/// model's window (whose ends the model does not see).
fn chunk_sizes(tree: &Path, model: &IndexModel, windows: Option<usize>) -> anyhow::Result<Value> {
    let mut files = Vec::new();
    text_files(tree, tree, &mut files)?;
    let count = |t: &str| model.count_tokens(t);
    let chunker = Chunker::new(model.window(), &count);
    let (mut tokens, mut lines) = (Vec::new(), Vec::new());
    for (rel, text) in &files {
        let chunks = match windows {
            Some(n) => line_windows(text, n),
            None => chunker.chunk(Lang::of(Path::new(rel)), text),
        };
        for c in chunks {
            tokens.push(model.count_tokens(&c.text));
            lines.push(c.end_line + 1 - c.start_line);
        }
    }
    anyhow::ensure!(!tokens.is_empty(), "{}: no chunks", tree.display());
    let over = tokens.iter().filter(|t| **t > model.window()).count();
    let mean = |xs: &[usize]| round(xs.iter().sum::<usize>() as f64 / xs.len() as f64, 1);
    let median = |xs: &mut Vec<usize>| {
        xs.sort_unstable();
        xs[xs.len() / 2]
    };
    Ok(json!({
        "tokens_mean": mean(&tokens),
        "lines_mean": mean(&lines),
        "tokens_p50": median(&mut tokens),
        "lines_p50": median(&mut lines),
        "over_window_share": round(over as f64 / tokens.len() as f64, 3),
    }))
}

/// One index of the tree, built and asked every question in every mode.
fn evaluate(
    tree: &Path,
    model: &IndexModel,
    questions: &[Question],
    windows: Option<usize>,
    details: &mut Vec<Value>,
) -> anyhow::Result<Value> {
    let label = windows.map_or_else(|| "ours".to_string(), |n| format!("baseline ({n}-line windows)"));
    let data = tempfile::tempdir().context("a temporary directory for the index")?;
    let mut index = Index::open(data.path())?;
    let opts = UpdateOptions { windows, ..UpdateOptions::default() };
    let mut last = Instant::now();
    let report = index.update_with(tree, model, &opts, &mut |done, total| {
        if last.elapsed().as_secs() >= 15 || done == total {
            eprintln!("mindfleet: {label}: indexed {done} of {total} files");
            last = Instant::now();
        }
    })?;
    anyhow::ensure!(report.errors.is_empty(), "{label}: indexing: {}", report.errors.join("; "));
    let (files, chunks, _) = index.counts()?;
    let mut out = json!({
        "chunking": windows.map_or_else(|| "code, neighbours merged".to_string(), |n| format!("windows of {n} lines")),
        "files": files,
        "chunks": chunks,
        "index_s": round(report.seconds, 1),
        "chunks_per_s": round(chunks as f64 / report.seconds, 1),
        "chunk_sizes": chunk_sizes(tree, model, windows)?,
    });
    for mode in [Mode::Keyword, Mode::Vector, Mode::Hybrid] {
        let (mut all, mut with, mut without) = (Sums::default(), Sums::default(), Sums::default());
        let search = SearchOptions { limit: CHUNKS, mode, ..SearchOptions::default() };
        for q in questions {
            let found = index.search(&q.query, Some(model as &dyn Embed), &search)?;
            anyhow::ensure!(found.note.is_none(), "{label}: {}: {:?}", q.id, found.note);
            let files = ranked_files(&found.hits);
            let (recall, rr) =
                (recall_at(&files, &q.answers, RECALL_AT), reciprocal_rank_at(&files, &q.answers, MRR_AT));
            all.add(recall, rr);
            if q.uses_identifiers {
                with.add(recall, rr)
            } else {
                without.add(recall, rr)
            }
            details.push(json!({
                "index": if windows.is_some() { "baseline" } else { "ours" },
                "mode": mode,
                "id": q.id,
                "rank": files.iter().take(MRR_AT).position(|f| q.answers.iter().any(|a| a == f)).map(|i| i + 1),
                "top": files.iter().take(RECALL_AT).collect::<Vec<_>>(),
            }));
        }
        out[serde_json::to_value(mode)?.as_str().unwrap_or("mode")] = json!({
            "all": all.json(),
            "identifiers": with.json(),
            "no_identifiers": without.json(),
        });
    }
    Ok(out)
}

/// The evaluation: `questions` (JSONL) about `tree`, ours and the baseline, with the MiniLM model
/// in `model_dir`. With `details`, each question's rank of its first answer and first files too.
pub fn rag_eval(tree: &Path, source: &str, model_dir: &Path, questions: &str, details: bool) -> anyhow::Result<Value> {
    let start = Instant::now();
    let questions = parse_questions(questions)?;
    check_questions(tree, &questions)?;
    let model = IndexModel::load(model_dir)?;
    let mut per_question = Vec::new();
    let ours = evaluate(tree, &model, &questions, None, &mut per_question)?;
    let baseline = evaluate(tree, &model, &questions, Some(BASELINE_LINES), &mut per_question)?;
    let with = questions.iter().filter(|q| q.uses_identifiers).count();
    let mrr = |v: &Value| v["hybrid"]["all"]["mrr_at_10"].as_f64().unwrap_or(0.0);
    let mut out = json!({
        "bench": "rag-eval",
        "codebase": source,
        "questions": questions.len(),
        "with_identifiers": with,
        "without_identifiers": questions.len() - with,
        "scoring": format!(
            "by file: the first {CHUNKS} chunks' paths in rank order, each once; recall_at_5 = share of a question's \
             answer files among the first {RECALL_AT} files, mrr_at_10 = 1/rank of the first answer file among the \
             first {MRR_AT} (0 if none), both averaged over questions"
        ),
        "ours": ours,
        "baseline": baseline,
        "hybrid_mrr_at_10_minus_baseline": round(mrr(&ours) - mrr(&baseline), 3),
        "seconds": round(start.elapsed().as_secs_f64(), 1),
    });
    if details {
        out["details"] = per_question.into();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str) -> Hit {
        Hit {
            chunk_id: 0,
            path: path.into(),
            root: String::new(),
            lang: "python".into(),
            kind: "function".into(),
            symbol: None,
            start_line: 1,
            end_line: 1,
            score: 1.0,
            keyword_rank: None,
            vector_rank: None,
            similarity: None,
            text: String::new(),
        }
    }

    #[test]
    fn files_are_ranked_once_at_their_first_place_and_scored_by_file() {
        let hits: Vec<Hit> = ["a.py", "a.py", "b.py", "a.py", "c.py", "d.py", "e.py", "f.py"].map(hit).into();
        let files = ranked_files(&hits);
        assert_eq!(files, ["a.py", "b.py", "c.py", "d.py", "e.py", "f.py"]);
        let answers = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The repeated a.py does not push c.py down: it is third, not fifth.
        assert_eq!(reciprocal_rank_at(&files, &answers(&["c.py"]), 10), 1.0 / 3.0);
        assert_eq!(reciprocal_rank_at(&files, &answers(&["z.py", "b.py", "a.py"]), 10), 1.0);
        assert_eq!(reciprocal_rank_at(&files, &answers(&["f.py"]), 5), 0.0);
        assert_eq!(reciprocal_rank_at(&files, &answers(&["f.py"]), 10), 1.0 / 6.0);
        assert_eq!(recall_at(&files, &answers(&["e.py"]), 5), 1.0);
        assert_eq!(recall_at(&files, &answers(&["f.py"]), 5), 0.0);
        assert_eq!(recall_at(&files, &answers(&["b.py", "f.py"]), 5), 0.5);
        assert_eq!(recall_at(&[], &answers(&["b.py"]), 5), 0.0);
    }

    #[test]
    fn identifiers_are_the_answers_names_and_path_not_other_words() {
        let text = "import os\nMAX_AGE: int = 3\nx == 1\nclass Cookie:\n    async def load_it(self):\n        local = 1\n\
                    \"\"\"let the caller decide\"\"\"\n";
        let names = identifiers("werkzeug/debug/_tbtools.py", text);
        for n in ["werkzeug", "debug", "_tbtools", "tbtools", "max_age", "cookie", "load_it"] {
            assert!(names.contains(n), "{n} missing from {names:?}");
        }
        for n in ["import", "os", "x", "local", "py", "the"] {
            assert!(!names.contains(n), "{n} in {names:?}");
        }
        let js = identifiers("shared/debugger.js", "function openConsole() {}\n  export const makeURL = () => 1;\n");
        assert_eq!(js, ["shared", "debugger", "openconsole", "makeurl"].map(String::from).into());
        assert_eq!(identifiers_used("Where is a Cookie loaded? (load_it, not load)", &names), ["cookie", "load_it"]);
        assert!(identifiers_used("where are cookies read", &names).is_empty());
    }

    #[test]
    fn the_shipped_questions_parse_and_most_use_no_identifiers() {
        let qs = parse_questions(QUESTIONS).unwrap();
        let without = qs.iter().filter(|q| !q.uses_identifiers).count();
        assert!(qs.len() >= 50 && without * 10 >= qs.len() * 7, "{without} of {}", qs.len());
        assert!(parse_questions("{\"id\":\"a\",\"query\":\"q\",\"answers\":[],\"uses_identifiers\":false}").is_err());
    }
}
