//! `mindfleet bench embed`: embeddings per second of all-MiniLM-L6-v2 on candle for batches of
//! 1, 8 and 32, on short sentences and on 20-line windows of Rust source; the shared worker
//! under 100 concurrent callers; and, in the same run on the same inputs, two peers, both run by
//! `scripts/bench_embed_peer.py`: sentence-transformers on PyTorch CPU (`ratio_*`), and ONNX
//! Runtime on the same BERT exported to ONNX, run the way fastembed runs it (`ratio_ort_*`),
//! each reported as ratios of ours over theirs (ours and ONNX Runtime's taken in three turns,
//! each ratio the median of the turns'). Each figure is also given in FLOP/s of the
//! products (`gflops_*`, from each text's tokens, [`BertConfig::flops`]) and as a share of the
//! machine's peak f32 rate measured in the same run on as many threads (`share_of_peak_*`,
//! [`super::peak`]). With the peers, how far ours are from sentence-transformers' (f32 all
//! through) on the first 32 short texts and 8 code windows, each embedded alone:
//! `{short,code}_max_abs_diff_to_torch` and `{short,code}_min_cosine_to_torch`.
//!
//! [`BertConfig::flops`]: mindfleet_models::embed::bert::BertConfig::flops
//! `--sentences FILE` (one sentence a line) and `--code FILE` (one JSON string a code window a
//! line) replace the built-in texts, so every engine of a comparison can embed the same ones.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_actors::embed::worker::{EmbedArgs, spawn};
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
use mindfleet_models::embed::Embedder;
use serde_json::{Value, json};

use super::{median, round};

const BATCHES: [usize; 3] = [1, 8, 32];
/// Texts per figure; batch 1 runs the first `SHORT_N_BATCH1` only.
const SHORT_N: usize = 256;
const CODE_N: usize = 128;
const SHORT_N_BATCH1: usize = 128;
/// Concurrent callers of the worker, and requests each makes, one text at a time.
const CALLERS: usize = 100;
const REQUESTS_PER_CALLER: usize = 8;
/// Turns of ours and ONNX Runtime's figures when a peer runs.
const PEER_TURNS: usize = 3;

const PEER_SCRIPT: &str = include_str!("../../scripts/bench_embed_peer.py");

/// Rust source the code windows are cut from (the project's own, so every machine has it).
const SOURCES: [&str; 4] = [
    include_str!("../../runtime/store/src/lib.rs"),
    include_str!("../../actors/src/scheduler.rs"),
    include_str!("../../personas/cognition/src/lifecycle/plan.rs"),
    include_str!("../../runtime/core/src/config.rs"),
];

fn short_texts() -> Vec<String> {
    let who = ["The reviewer", "A persona", "The scheduler", "Our team", "The index", "Someone"];
    let what = ["rebuilt the cache", "answered the question", "flagged a slow query", "merged the patch"];
    let when = ["this morning.", "after the release.", "during the incident review.", "before lunch on Friday."];
    (0..SHORT_N).map(|i| format!("{} {} {} (note {i})", who[i % 6], what[(i / 6) % 4], when[(i / 24) % 4])).collect()
}

fn code_windows() -> Vec<String> {
    SOURCES
        .iter()
        .flat_map(|src| {
            let lines: Vec<&str> = src.lines().collect();
            lines.chunks(20).map(|c| c.join("\n")).collect::<Vec<_>>()
        })
        .filter(|w| w.trim().len() > 200)
        .take(CODE_N)
        .collect()
}

/// Our embeddings per second for every figure (`batch1`, `code_batch1`, ...).
fn figures(model: &Embedder, short: &[String], code: &[String]) -> anyhow::Result<HashMap<String, f64>> {
    let mut out = HashMap::new();
    for b in BATCHES {
        out.insert(format!("batch{b}"), per_s(model, sentences(short, b), b)?);
        out.insert(format!("code_batch{b}"), per_s(model, code, b)?);
    }
    Ok(out)
}

/// The sentences a figure of batch `b` embeds: batch 1 the first `SHORT_N_BATCH1` only.
fn sentences(short: &[String], b: usize) -> &[String] {
    if b == 1 { &short[..SHORT_N_BATCH1.min(short.len())] } else { short }
}

/// The largest difference of any value between our embeddings of `texts`, each embedded alone,
/// and `reference` (one vector for each of the first texts), and the least cosine of a pair.
fn agreement(model: &Embedder, texts: &[String], reference: &Value) -> anyhow::Result<(f64, f64)> {
    let (mut diff, mut least) = (0.0f64, 1.0f64);
    for (text, want) in texts.iter().zip(reference.as_array().into_iter().flatten()) {
        let want: Vec<f32> = serde_json::from_value(want.clone())?;
        let got = &model.embed(&[text.as_str()])?[0].vector;
        anyhow::ensure!(got.len() == want.len(), "{} values against the reference's {}", got.len(), want.len());
        diff = got.iter().zip(&want).fold(diff, |d, (a, b)| d.max(f64::from((a - b).abs())));
        least = least.min(mindfleet_core::embedding::cosine(got, &want));
    }
    Ok((diff, least))
}

/// Embeddings per second over `texts` in calls of `batch`.
pub(crate) fn per_s(model: &Embedder, texts: &[String], batch: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    for chunk in texts.chunks(batch) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        std::hint::black_box(model.embed(&refs)?);
    }
    Ok(texts.len() as f64 / t.elapsed().as_secs_f64())
}

pub(super) fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .map_or(0.0, |kib: f64| kib / 1024.0)
}

/// Runs the peers on the same inputs; their figures (ONNX Runtime's under `ort_` keys, or
/// `ort_error`), or why they could not run.
/// With `only_ort`, ONNX Runtime's figures alone (a later turn).
fn peer(
    python: &str,
    model_dir: &Path,
    window: usize,
    short: &[String],
    code: &[String],
    only_ort: bool,
) -> Result<Value, String> {
    let input = json!({
        "model_dir": model_dir, "threads": 2, "window": window, "batches": BATCHES,
        "short": short, "code": code, "short_n_batch1": SHORT_N_BATCH1, "only_ort": only_ort,
    });
    super::run_peer(python, PEER_SCRIPT, &input, "sentence-transformers and onnxruntime")
}

/// The texts to embed: the built-in ones, or those of the files given.
pub fn inputs(sentences: Option<&Path>, code: Option<&Path>) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let read = |path: &Path| std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
    let short = match sentences {
        None => short_texts(),
        Some(path) => read(path)?.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect(),
    };
    let windows = match code {
        None => code_windows(),
        Some(path) => read(path)?
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str::<String>(l)
                    .map_err(|e| anyhow::anyhow!("{}:{}: not a JSON string ({e})", path.display(), i + 1))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    for (texts, what) in [(&short, sentences), (&windows, code)] {
        if texts.is_empty() {
            let file = what.map_or("the built-in texts".to_string(), |p| p.display().to_string());
            anyhow::bail!("{file}: no texts to embed");
        }
    }
    Ok((short, windows))
}

pub async fn embed(
    model_dir: &Path,
    peer_python: Option<&str>,
    short: Vec<String>,
    code: Vec<String>,
) -> anyhow::Result<Value> {
    let t = Instant::now();
    let model = Embedder::load(model_dir)?;
    let load_s = t.elapsed().as_secs_f64();
    let count = |texts: &[String]| -> anyhow::Result<f64> {
        let total: usize = texts.iter().map(|t| model.count_tokens(t)).sum::<Result<_, _>>()?;
        Ok(round(total as f64 / texts.len() as f64, 1))
    };
    let mut out = json!({
        "bench": "embed",
        "model": model_dir.file_name().map(|n| n.to_string_lossy().into_owned()),
        "threads": mindfleet_models::embed::threads(),
        "short_tokens_mean": count(&short)?,
        "code_tokens_mean": count(&code)?,
        "code_windows": code.len(),
        "load_s": round(load_s, 3),
    });
    // What the products of a text cost, on average over the texts of each figure.
    let flops = |texts: &[String]| -> anyhow::Result<f64> {
        let mut total = 0.0;
        for t in texts {
            total += model.config().flops(model.count_tokens(t)?.min(model.window()));
        }
        Ok(total / texts.len() as f64)
    };
    let peak = super::peak::f32_peak(mindfleet_models::embed::threads());
    if let Some((peak, isa)) = peak {
        out["peak_gflops"] = round(peak / 1e9, 1).into();
        out["peak_measured_with"] = isa.into();
    }
    // Warmed up as the peers are (buffers sized, the pool's threads started).
    model.embed(&["warm up"; 8])?;
    // Our figures and ONNX Runtime's are taken in turns, so each ratio is of two runs close in
    // time (this machine's speed moves within a run); with a peer, `PEER_TURNS` turns.
    let window = model.window();
    let mut ours = vec![figures(&model, &short, &code)?];
    let mut theirs = Vec::new();
    if let Some(python) = peer_python {
        for r in 0..PEER_TURNS {
            if r > 0 {
                ours.push(figures(&model, &short, &code)?);
            }
            match peer(python, model_dir, window, &short, &code, r > 0) {
                // Without ONNX Runtime (the first turn says why), a later turn has nothing to run.
                Ok(p) if p.get("ort_error").is_some() => {
                    theirs.push(p);
                    break;
                }
                Ok(p) => theirs.push(p),
                Err(e) => {
                    out["peer_error"] = e.into();
                    break;
                }
            }
        }
    }
    // How far ours are from sentence-transformers' (f32 all through), one text at a time.
    if let Some(reference) = theirs.first_mut().and_then(|p| p.as_object_mut()?.remove("reference")) {
        for (kind, texts) in [("short", &short), ("code", &code)] {
            let (diff, cosine) = agreement(&model, texts, &reference[kind])?;
            out[format!("{kind}_max_abs_diff_to_torch")] = diff.into();
            out[format!("{kind}_min_cosine_to_torch")] = cosine.into();
        }
    }
    let mut costs = HashMap::new();
    let mut best: f64 = 0.0;
    for b in BATCHES {
        for (kind, cost) in [("", flops(sentences(&short, b))?), ("code_", flops(&code)?)] {
            let key = format!("{kind}batch{b}");
            let per_s = median(ours.iter().map(|f| f[&key]).collect());
            if kind.is_empty() {
                best = best.max(per_s);
            }
            out[format!("per_s_{key}")] = round(per_s, 1).into();
            out[format!("gflops_{key}")] = round(per_s * cost / 1e9, 1).into();
            if let Some((peak, _)) = peak {
                out[format!("share_of_peak_{key}")] = round(per_s * cost / peak, 3).into();
            }
            costs.insert(key, cost);
        }
    }
    drop(model);

    // The shared worker, 100 callers sending one short text at a time.
    let worker = spawn(
        EmbedArgs {
            model_dir: model_dir.to_path_buf(),
            cache: None,
            max_batch: 32,
            max_wait: Duration::from_millis(2),
        },
        None,
    )
    .await?;
    ractor::call!(worker, |reply| EmbedMsg::Embed {
        texts: vec!["warm up".into()],
        long: LongText::Truncate,
        urgency: Urgency::Normal,
        reply
    })?
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let t = Instant::now();
    let callers = (0..CALLERS).map(|c| {
        let worker = worker.clone();
        let texts: Vec<String> =
            (0..REQUESTS_PER_CALLER).map(|r| short[(c * REQUESTS_PER_CALLER + r) % short.len()].clone()).collect();
        tokio::spawn(async move {
            for text in texts {
                ractor::call!(worker, |reply| EmbedMsg::Embed {
                    texts: vec![text],
                    long: LongText::Truncate,
                    urgency: Urgency::Normal,
                    reply
                })?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            anyhow::Ok(())
        })
    });
    for r in futures::future::join_all(callers).await {
        r??;
    }
    let load_per_s = (CALLERS * REQUESTS_PER_CALLER) as f64 / t.elapsed().as_secs_f64();
    let stats = ractor::call!(worker, EmbedMsg::Stats)?;
    worker.stop_and_wait(None, None).await?;
    out["callers"] = CALLERS.into();
    out["per_s_100_callers"] = round(load_per_s, 1).into();
    out["callers_vs_best_batch"] = round(load_per_s / best, 3).into();
    out["callers_mean_batch"] = round(stats.mean_batch, 1).into();
    out["callers_p50_ms"] = round(stats.p50_ms, 1).into();
    out["callers_p99_ms"] = round(stats.p99_ms, 1).into();
    out["rss_peak_mb"] = round(peak_rss_mb(), 1).into();

    if let Some(first) = theirs.first() {
        for b in BATCHES {
            for kind in ["", "code_"] {
                let key = format!("{kind}batch{b}");
                if let (Some(ours), Some(torch)) = (ours[0].get(&key), first[format!("per_s_{key}")].as_f64()) {
                    out[format!("ratio_{key}")] = round(ours / torch, 2).into();
                }
                // ONNX Runtime's figure in each turn, each turn's ratio, and their medians.
                let (turn_ours, ort): (Vec<f64>, Vec<f64>) = ours
                    .iter()
                    .zip(&theirs)
                    .filter_map(|(o, p)| Some((o[&key], p[format!("ort_per_s_{key}")].as_f64()?)))
                    .unzip();
                if ort.is_empty() {
                    continue;
                }
                let ratios: Vec<f64> = turn_ours.iter().zip(&ort).map(|(o, t)| o / t).collect();
                out[format!("ratio_ort_{key}_turns")] = ratios.iter().map(|r| round(*r, 2)).collect::<Vec<_>>().into();
                out[format!("ratio_ort_{key}")] = round(median(ratios), 2).into();
                let ort = median(ort);
                out[format!("ort_per_s_{key}")] = round(ort, 1).into();
                if let Some((peak, _)) = peak {
                    out[format!("ort_share_of_peak_{key}")] = round(ort * costs[&key] / peak, 3).into();
                }
            }
        }
        out["peer"] = first.clone();
        out["peer_turns"] = theirs.len().into();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_come_from_the_files_given_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (sentences, code) = (dir.path().join("s.txt"), dir.path().join("c.jsonl"));
        std::fs::write(&sentences, "one sentence\n\nanother one\n").unwrap();
        std::fs::write(&code, "\"fn a() {}\\n\"\n\"let b = 1;\"\n").unwrap();
        let (s, c) = inputs(Some(&sentences), Some(&code)).unwrap();
        assert_eq!(
            (s, c),
            (
                vec!["one sentence".to_string(), "another one".into()],
                vec!["fn a() {}\n".to_string(), "let b = 1;".into()]
            )
        );
        std::fs::write(&code, "\"fn a() {}\"\nfn b() {}\n").unwrap();
        let e = inputs(None, Some(&code)).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}:2: not a JSON string", code.display())), "{e}");
        std::fs::write(&sentences, "\n").unwrap();
        let e = inputs(Some(&sentences), None).unwrap_err().to_string();
        assert!(e.ends_with("s.txt: no texts to embed"), "{e}");
        let (s, c) = inputs(None, None).unwrap();
        assert_eq!((s.len(), c.len()), (SHORT_N, code_windows().len()));
    }
}
