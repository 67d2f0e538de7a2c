//! `mindfleet refs match TEXT`: the reference catalog's matching on one text, so people can
//! check what their catalog offers and why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use mindfleet_core::config::FleetConfig;
use mindfleet_core::embedding::dot;
use mindfleet_core::refs::{self, Catalog, Via};
use mindfleet_models::embed::Embedder;
use mindfleet_models::fetch;
use mindfleet_personas::references::Discover;
use serde_json::{Value, json};

use super::{Json, fail};

#[derive(clap::Subcommand)]
pub enum RefsCmd {
    /// Every reference a text calls for: named (`@id`), by tag, by meaning, and what those
    /// link to; best first, each with why.
    Match {
        text: String,
        /// Fleet file (default: config/fleet.toml when present, else the embedded default).
        #[arg(long)]
        fleet: Option<PathBuf>,
        /// Least similarity of a semantic match (default: `[references] semantic_threshold`).
        #[arg(long)]
        threshold: Option<f32>,
        #[command(flatten)]
        out: Json,
    },
}

pub fn run(cmd: RefsCmd) -> ExitCode {
    match execute(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, format!("{e:#}")),
    }
}

fn execute(cmd: RefsCmd) -> anyhow::Result<()> {
    let RefsCmd::Match { text, fleet, threshold, out: Json { json } } = cmd;
    let config = mindfleet::fleet_config(fleet.as_deref())?;
    let r = &config.references;
    let out = matches(&r.catalog, &text, threshold.unwrap_or(r.semantic_threshold), r.discovery_depth, &config);
    if json {
        println!("{out}");
        return Ok(());
    }
    if let Some(why) = out["semantic_off"].as_str() {
        eprintln!("mindfleet: semantic matching is off: {why}");
    }
    match out["hint"].as_str() {
        Some(h) if !h.is_empty() => println!("{h}"),
        _ => println!("no reference matches"),
    }
    Ok(())
}

/// `{"matches": [{"id", "via", "matched", "score"}], "semantic": "on" | "off", "semantic_off",
/// "threshold", "similarity": {id: cosine} (every reference's, to tune the threshold), "hint"}`.
fn matches(catalog: &Catalog, text: &str, threshold: f32, depth: usize, config: &FleetConfig) -> Value {
    let (sims, off) = match similarities(catalog, text, config) {
        Ok(sims) => (sims, None),
        Err(why) => (BTreeMap::new(), Some(why)),
    };
    let similarity = off.is_none().then_some(&sims);
    let mut found = refs::candidates(catalog, text, similarity, threshold, &BTreeSet::new());
    let selected: Vec<String> = found.iter().filter(|m| m.via != Via::Semantic).map(|m| m.id.clone()).collect();
    found = refs::merge([found, catalog.discover(&selected, depth)]);
    json!({
        "matches": found,
        "semantic": if off.is_some() { "off" } else { "on" },
        "semantic_off": off,
        "threshold": threshold,
        "similarity": sims,
        "hint": refs::hint_block(catalog, &found),
    })
}

/// Each reference's cosine similarity to `text`, with the embedding model of the fleet file
/// (not pulled here: without it, matching goes on without meaning and says so).
fn similarities(catalog: &Catalog, text: &str, config: &FleetConfig) -> Result<BTreeMap<String, f32>, String> {
    if catalog.refs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let dir = config.models.embedding.clone().unwrap_or_else(|| config.models.dir.join(fetch::MINILM.name));
    let model = Embedder::load(&dir).map_err(|e| e.to_string())?;
    let texts: Vec<String> =
        std::iter::once(text.to_string()).chain(catalog.refs.iter().map(|r| r.semantic_text())).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let v = model.embed(&refs).map_err(|e| e.to_string())?;
    Ok(catalog.refs.iter().zip(&v[1..]).map(|(r, e)| (r.id.clone(), dot(&v[0].vector, &e.vector))).collect())
}
