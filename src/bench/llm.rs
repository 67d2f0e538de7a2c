//! `mindfleet bench llm`: SmolLM2-135M-Instruct on candle (the file the fleet runs: the Q8_0
//! rewrite of the packaged Q4_1) against llama.cpp (`llama-cpp-python`, `scripts/bench_llm_peer.py`)
//! on the same file, the same prompt tokens and the same number of generated tokens, in one run.

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use mindfleet_actors::llm::{ChatMessage, GenerateRequest, Llm, LlmConfig};
use serde_json::{Value, json};

use super::round;

const PEER_SCRIPT: &str = include_str!("../../scripts/bench_llm_peer.py");
const RUNS: usize = 3;
const MAX_TOKENS: usize = 128;

fn request() -> GenerateRequest {
    let messages = vec![
        ChatMessage::system("You are a patient storyteller who writes long, vivid stories."),
        ChatMessage::user(
            "Write a long story about a lighthouse keeper who records the weather, the ships that pass and the \
             birds that rest on the gallery rail, and who one winter night sees a light out at sea where no \
             ship should be. Describe the tower, the storm, the sea and what he finds when the morning comes.",
        ),
    ];
    GenerateRequest::new(messages, MAX_TOKENS)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn peer(python: &str, model: &Path, threads: usize, prompt: &[u32], gen_tokens: usize) -> Result<Value, String> {
    let input =
        json!({ "model": model, "threads": threads, "prompt_ids": prompt, "gen_tokens": gen_tokens, "runs": RUNS });
    super::run_peer(python, PEER_SCRIPT, &input, "llama-cpp-python")
}

pub fn llm(model: &Path, peer_python: Option<&str>) -> anyhow::Result<Value> {
    let t = Instant::now();
    let llm = Llm::load_with(model, LlmConfig::default())?;
    let load_s = t.elapsed().as_secs_f64();
    let req = request();
    let prompt = llm.prompt(&req.messages, req.max_tokens)?.ids;
    let (mut prompt_tok_s, mut gen_tok_s, mut ttft_ms, mut tokens_out) = (vec![], vec![], vec![], 0);
    for _ in 0..RUNS {
        let g = llm.generate(&req, |_| ControlFlow::Continue(()))?;
        anyhow::ensure!(g.tokens_in == prompt.len(), "prompt of {} tokens, expected {}", g.tokens_in, prompt.len());
        prompt_tok_s.push(g.tokens_in as f64 / (g.prompt_ms / 1e3));
        gen_tok_s.push(g.tokens_out as f64 / (g.gen_ms / 1e3));
        ttft_ms.push(g.ttft_ms);
        tokens_out = g.tokens_out;
    }
    let info = mindfleet_actors::llm::inspect(model)?;
    let mut out = json!({
        "bench": "llm",
        "model": model.file_name().map(|n| n.to_string_lossy().into_owned()),
        "file_type": info.file_type,
        "threads": llm.threads(),
        "load_s": round(load_s, 3),
        "prompt_tokens": prompt.len(),
        "gen_tokens": tokens_out,
        "prompt_tok_s": round(median(prompt_tok_s), 1),
        "gen_tok_s": round(median(gen_tok_s), 1),
        "ttft_ms": round(median(ttft_ms), 1),
        "rss_mb": round(super::rss_kib() as f64 / 1024.0, 1),
    });
    let threads = llm.threads();
    drop(llm);
    if let Some(python) = peer_python {
        match peer(python, model, threads, &prompt, tokens_out) {
            Ok(p) => {
                for key in ["prompt_tok_s", "gen_tok_s"] {
                    if let (Some(ours), Some(theirs)) = (out[key].as_f64(), p[key].as_f64()) {
                        out[format!("ratio_{key}")] = round(ours / theirs, 2).into();
                    }
                }
                if let (Some(ours), Some(theirs)) = (out["ttft_ms"].as_f64(), p["ttft_ms"].as_f64()) {
                    // Above 1: our first token comes sooner.
                    out["ratio_ttft"] = round(theirs / ours, 2).into();
                }
                out["peer"] = p;
            }
            Err(e) => out["peer_error"] = e.into(),
        }
    }
    Ok(out)
}
