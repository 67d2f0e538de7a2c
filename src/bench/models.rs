//! `mindfleet bench models`: each local model available (SmolLM2-135M-Instruct and Gemma 3
//! 270M, pulled by the project's own pull) on the fleet's own tasks, one after the other: the
//! gate's agreement with its labelled cases and the plan choice's (as `bench gate-model`), what
//! the local brain posts (`bench replies`: echo and loop rates, answers carrying their facts,
//! reply time), and prompt and generated tokens per second (`bench llm`, without a peer).

use std::path::Path;

use mindfleet_models::fetch::{self, ModelPackage};
use serde_json::{Value, json};

/// What of the replies bench is run and shown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replies {
    /// Not run.
    None,
    /// Its figures.
    Figures,
    /// Its figures and every question with the local brain's reply.
    Details,
}

/// The models measured, in the order they are run.
pub const MODELS: [&ModelPackage; 2] = [&fetch::SMOLLM2, &fetch::GEMMA3_270M];

/// Every model of [`MODELS`] (those named in `only`, when any) on the tasks, `tree` (Werkzeug,
/// described by `source`) being the code the replies' code questions are about; models pulled
/// into `dir` first.
pub async fn models(tree: &Path, source: &str, dir: &Path, only: &[String], replies: Replies) -> anyhow::Result<Value> {
    if let Some(unknown) = only.iter().find(|n| !MODELS.iter().any(|p| p.name == n.as_str())) {
        let known: Vec<&str> = MODELS.iter().map(|p| p.name).collect();
        anyhow::bail!("--model {unknown}: not one of {}", known.join(", "));
    }
    let mut out = Vec::new();
    for p in MODELS.into_iter().filter(|p| only.is_empty() || only.iter().any(|n| n == p.name)) {
        let file = mindfleet::llm_file(Some(p.name.into())).map_err(anyhow::Error::msg)?;
        eprintln!("mindfleet: bench models: {} ({})", p.name, file.display());
        let at = file.clone();
        let gate = tokio::task::spawn_blocking(move || super::llm::gate_model(&at)).await??;
        let at = file.clone();
        let speed = tokio::task::spawn_blocking(move || super::llm::llm(&at, None, None)).await??;
        let (local, texts) = match replies {
            Replies::None => (Value::Null, Value::Null),
            _ => {
                let details = replies == Replies::Details;
                let mut r = super::replies::replies(tree, source, dir, Some(&file), details).await?;
                let texts = match r["replies"].take() {
                    Value::Array(all) => all.into_iter().filter(|x| x["brain"] == "local").collect(),
                    _ => Value::Null,
                };
                (r["by_brain"]["local"].take(), texts)
            }
        };
        let mut figures = json!({
            "model": p.name,
            "file": file.file_name().map(|n| n.to_string_lossy().into_owned()),
            "runs_on": speed["runs_on"],
            "gate": {
                "cases": gate["cases"],
                "coverage": gate["coverage"],
                "agreement": gate["agreement"],
                "best_coverage": gate["best_coverage"],
                "best_agreement": gate["best_agreement"],
                "per_case_ms": gate["per_case_ms"],
            },
            "plan": gate["plan"],
            "replies": local,
            "prompt_tok_s": speed["prompt_tok_s"],
            "gen_tok_s": speed["gen_tok_s"],
            "ttft_ms": speed["ttft_ms"],
            "load_s": speed["load_s"],
            "rss_mb": speed["rss_mb"],
        });
        if replies == Replies::Details {
            figures["reply_texts"] = texts;
        }
        out.push(figures);
    }
    Ok(json!({ "bench": "models", "source": source, "models": out }))
}
