//! `mindfleet check FLEET`: validates a fleet file without starting it.

use std::path::PathBuf;
use std::process::ExitCode;

use mindfleet_core::config::FleetConfig;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    fleet: PathBuf,
}

pub fn run(Args { fleet }: Args) -> ExitCode {
    match FleetConfig::load(&fleet) {
        Ok(cfg) => {
            println!("{}: ok: fleet {:?} with {} personas", fleet.display(), cfg.name, cfg.personas.len());
            ExitCode::SUCCESS
        }
        Err(e) => fail(2, e),
    }
}
