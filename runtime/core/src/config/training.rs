//! `[training]`: how the trainer trains a persona's adapters (see `mindfleet_core::adapter`).

use super::ConfigError;
use super::raw::RawTraining;
use super::validate::Ctx;

/// The projections an adapter can change, by their names in `targets`.
pub const TARGETS: [&str; 7] = ["q", "k", "v", "o", "gate", "up", "down"];

/// `[training]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Names of [`TARGETS`], each once.
    pub targets: Vec<String>,
    pub learning_rate: f64,
    /// Passes over the chats trained on.
    pub epochs: usize,
    /// Chats per optimizer step.
    pub batch: usize,
    /// New study chats of a persona since its last run that start a run by themselves; 0: runs
    /// start only by hand (`mindfleet ai train`).
    pub new_chats: usize,
}

impl Default for TrainingConfig {
    /// Rank 8 on every projection (about 2.4 M values for SmolLM2-135M), alpha 16, learning rate
    /// 1e-3, two epochs of 8 chats a step; a run by itself after 64 new chats.
    fn default() -> TrainingConfig {
        TrainingConfig {
            rank: 8,
            alpha: 16.0,
            targets: TARGETS.iter().map(|t| t.to_string()).collect(),
            learning_rate: 1e-3,
            epochs: 2,
            batch: 8,
            new_chats: 64,
        }
    }
}

impl Ctx<'_> {
    pub(super) fn training(&self, t: RawTraining) -> Result<TrainingConfig, ConfigError> {
        let d = TrainingConfig::default();
        let targets = match &t.targets {
            None => d.targets,
            Some(list) => {
                let mut out: Vec<String> = Vec::new();
                for name in list.get_ref() {
                    if !TARGETS.contains(&name.get_ref().as_str()) {
                        let why =
                            format!("`targets`: {:?} is not a projection ({})", name.get_ref(), TARGETS.join(", "));
                        return Err(self.err_at(name.span(), why));
                    }
                    if out.contains(name.get_ref()) {
                        return Err(self.err_at(name.span(), format!("`targets`: {:?} given twice", name.get_ref())));
                    }
                    out.push(name.get_ref().clone());
                }
                if out.is_empty() {
                    return Err(self.err_at(list.span(), "`targets` is empty: name at least one projection"));
                }
                out
            }
        };
        Ok(TrainingConfig {
            rank: self.int(&t.rank, "rank", 1..=64, d.rank as i64)? as usize,
            alpha: self.float(&t.alpha, "alpha", 0.001..=1024.0, d.alpha)?,
            targets,
            learning_rate: self.float(&t.learning_rate, "learning_rate", 1e-7..=1.0, d.learning_rate)?,
            epochs: self.int(&t.epochs, "epochs", 1..=100, d.epochs as i64)? as usize,
            batch: self.int(&t.batch, "batch", 1..=64, d.batch as i64)? as usize,
            new_chats: self.int(&t.new_chats, "new_chats", 0..=1_000_000, d.new_chats as i64)? as usize,
        })
    }
}
