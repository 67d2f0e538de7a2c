//! The embedding model as the fleet serves it: the [`worker`] actor that batches every caller's
//! texts onto the model ([`mindfleet_models::embed::Embedder`]) on a thread of its own, its
//! [`cache`], and [`IndexModel`], the model as the codebase index sees it.

pub mod cache;
pub mod worker;

use std::path::Path;

use mindfleet_models::embed::{EmbedError, Embedder};

/// The embedding model as the codebase index uses it (`mindfleet_index::Embed`), named by
/// its directory and the fingerprint of its files, so vectors of another model are never
/// compared with its queries.
pub struct IndexModel {
    embedder: Embedder,
    name: String,
}

impl IndexModel {
    pub fn load(dir: &Path) -> Result<IndexModel, EmbedError> {
        Ok(IndexModel { embedder: Embedder::load(dir)?, name: model_name(dir) })
    }
}

/// The model of a directory as the index names it: `<directory name>@<fingerprint>`.
pub fn model_name(dir: &Path) -> String {
    let key = worker::fingerprint(dir);
    let hex: String = key[..8].iter().map(|b| format!("{b:02x}")).collect();
    let base = dir.file_name().map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    format!("{base}@{hex}")
}

impl mindfleet_index::Embed for IndexModel {
    fn model(&self) -> String {
        self.name.clone()
    }

    fn window(&self) -> usize {
        self.embedder.window()
    }

    fn count_tokens(&self, text: &str) -> usize {
        // A text the tokenizer cannot read counts as too long, so it is cut.
        self.embedder.count_tokens(text).unwrap_or(usize::MAX)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let out = self.embedder.embed(texts).map_err(|e| e.to_string())?;
        Ok(out.into_iter().map(|e| e.vector).collect())
    }
}
