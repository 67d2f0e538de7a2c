//! `mindfleet embed TEXT`: a text's embedding by the local model (all-MiniLM-L6-v2 unless
//! `--model`), or by the embedding worker of a running fleet (`--admin`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use mindfleet_actors::embed::worker::{EmbedArgs, spawn};
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
use mindfleet_models::fetch;

use super::{Json, MaybeRemote, fail};

#[derive(clap::Args)]
#[command(mut_arg("admin", |a| a.help("Ask the embedding worker of the fleet running at this admin address instead")))]
pub struct Args {
    /// The text (`-`: read standard input).
    text: String,
    /// A text longer than the model's window: cut it and say so, or embed every piece.
    #[arg(long, value_enum, default_value = "truncate")]
    long: Long,
    /// A HuggingFace-layout BERT directory (default: the pulled model).
    #[arg(long, conflicts_with = "admin")]
    model: Option<PathBuf>,
    #[command(flatten)]
    remote: MaybeRemote,
    #[command(flatten)]
    out: Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Long {
    Truncate,
    Split,
}

/// `mindfleet embed`: one text through an embedding worker, in this process or (`--admin`) in
/// the running fleet.
pub async fn run(a: Args) -> ExitCode {
    let Args { text, long, model, remote, out: Json { json } } = a;
    let remote = remote.client();
    let text = if text == "-" {
        let mut buf = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf) {
            return fail(2, format!("standard input: {e}"));
        }
        buf
    } else {
        text
    };
    let long = match long {
        Long::Truncate => LongText::Truncate,
        Long::Split => LongText::Split,
    };
    let out = if let Some(client) = remote {
        match client.embed(&serde_json::json!({ "text": text, "long": long })).await {
            Ok(v) => v,
            Err(e) => return fail(e.exit_code() as u8, e),
        }
    } else {
        let model_dir = match model {
            Some(dir) => dir,
            None => match fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("mindfleet: {l}")) {
                Ok(dir) => dir,
                Err(e) => return fail(1, e),
            },
        };
        let args = EmbedArgs { model_dir, cache: None, max_batch: 32, max_wait: Duration::ZERO };
        let worker = match spawn(args, None).await {
            Ok(w) => w,
            Err(e) => return fail(1, e),
        };
        let answer =
            ractor::call!(worker, |reply| EmbedMsg::Embed { texts: vec![text], long, urgency: Urgency::Normal, reply });
        let stats = ractor::call!(worker, EmbedMsg::Stats);
        worker.stop(None);
        match (answer, stats) {
            (Ok(Ok(mut e)), Ok(s)) => e.remove(0).to_json(&s.model.model),
            (Ok(Err(e)), _) => return fail(1, e),
            (Err(e), _) | (_, Err(e)) => return fail(1, e),
        }
    };
    if json {
        println!("{out}");
    } else {
        let head: Vec<String> = out["embedding"]
            .as_array()
            .into_iter()
            .flatten()
            .take(6)
            .map(|x| format!("{:.4}", x.as_f64().unwrap_or(0.0)))
            .collect();
        println!(
            "{} dimensions, {} tokens, model {}",
            out["dimensions"],
            out["tokens"],
            out["model"].as_str().unwrap_or("")
        );
        if let Some(n) = out["truncated_from"].as_u64() {
            println!("cut to the model's window from {n} tokens");
        }
        if let Some(p) = out["pieces"].as_array() {
            println!("{} pieces (--json prints every vector)", p.len());
        }
        println!("[{}, ...]", head.join(", "));
    }
    ExitCode::SUCCESS
}
