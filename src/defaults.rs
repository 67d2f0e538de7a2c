//! The fleet used when `mindfleet run` is given no file and `config/fleet.toml` is absent:
//! that file, built into the binary. And the generated fleets benchmarks run.

use std::path::{Path, PathBuf};

use mindfleet_core::config::{BrainKind, FleetConfig, PersonaConfig};

/// `config/fleet.toml` as it was when the binary was built.
pub const DEFAULT_FLEET: &str = include_str!("../config/fleet.toml");

/// The built-in default fleet.
pub fn default_fleet() -> FleetConfig {
    FleetConfig::from_toml(Path::new("<embedded>/config/fleet.toml"), DEFAULT_FLEET)
        .expect("the embedded default fleet is valid (tested)")
}

/// A fleet of `n` generated personas (benchmarks and tests), eight rooms shared round-robin,
/// every one on the rules brain, conversation memory off: the runtime's own figures (a
/// benchmark of conversation memory turns it on).
pub fn synthetic_fleet(n: usize, data_dir: PathBuf) -> FleetConfig {
    let mut cfg = default_fleet();
    cfg.name = format!("synthetic-{n}");
    cfg.conversation.enabled = false;
    cfg.storage.data_dir = data_dir;
    cfg.admin.addr = "127.0.0.1:0".parse().expect("literal address");
    let template = cfg.personas[0].clone();
    cfg.personas = (0..n)
        .map(|i| PersonaConfig {
            name: format!("p{i}"),
            rooms: vec![format!("room{}", i % 8)],
            dormant: false,
            // The runtime's figures, not the model's.
            brain: BrainKind::Rules,
            ..template.clone()
        })
        .collect();
    cfg
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn embedded_default_is_valid_and_has_four_distinct_personas() {
        let cfg = default_fleet();
        assert!(cfg.personas.len() >= 4);
        let roles: BTreeSet<_> = cfg.personas.iter().map(|p| p.role.clone()).collect();
        assert_eq!(roles.len(), cfg.personas.len());
    }
}
