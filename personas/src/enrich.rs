//! The enrichment pipeline: what every text flowing to a persona (the event it receives, the
//! result of each step) calls for from the fleet's reference catalog.
//!
//! One [`Enricher`] serves the fleet. Named references and tags are matched on the spot; for
//! semantic matching the text is embedded by the fleet's embedding worker and compared with
//! the catalog's embeddings, made once (at the first text, which the fleet sends at start) and
//! kept; the worker's cache, keyed by content hash, spares the model the catalog's unchanged
//! texts on the next start. Without the model, matching goes on by names and tags, and every
//! enrichment says why semantic matching is off.

use std::collections::{BTreeMap, BTreeSet};

use mindfleet_core::config::ReferencesConfig;
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency, dot};
use mindfleet_core::refs::{self, Catalog, Enrichment};
use ractor::{ActorRef, call_t};
use tokio::sync::OnceCell;

use crate::references::{self, Library};

/// Longest an enrichment waits for the embedding worker (batching, or loading the model at the
/// first text).
const EMBED_CALL_MS: u64 = 30_000;

pub struct Enricher {
    /// The catalog and the links of its references, read once for the fleet.
    library: Library,
    threshold: f32,
    embedding: Option<ActorRef<EmbedMsg>>,
    /// Each reference's embedding (of [`refs::Reference::semantic_text`]), in catalog order.
    vectors: OnceCell<Vec<Vec<f32>>>,
}

impl Enricher {
    /// The fleet's pipeline, or `None` when its catalog is empty (nothing to match).
    pub fn new(config: &ReferencesConfig, embedding: Option<ActorRef<EmbedMsg>>) -> Option<Enricher> {
        (!config.catalog.refs.is_empty()).then(|| Enricher {
            library: references::library(config.catalog.clone(), config.discovery_depth),
            threshold: config.semantic_threshold,
            embedding,
            vectors: OnceCell::new(),
        })
    }

    pub fn catalog(&self) -> &Catalog {
        &self.library.catalog
    }

    /// The catalog and its links, as every persona of the fleet shares them.
    pub fn library(&self) -> Library {
        self.library.clone()
    }

    /// Embeds the catalog, once; `Err`: why semantic matching is off (tried again at the next
    /// text, so a worker that recovers turns it on).
    pub async fn warm(&self) -> Result<(), String> {
        self.catalog_vectors().await.map(drop)
    }

    async fn catalog_vectors(&self) -> Result<&Vec<Vec<f32>>, String> {
        self.vectors
            .get_or_try_init(|| async {
                let texts = self.catalog().refs.iter().map(|r| r.semantic_text()).collect();
                self.embed(texts).await
            })
            .await
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, String> {
        let Some(worker) = &self.embedding else { return Err("no embedding worker".into()) };
        let answer = call_t!(
            worker,
            |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency: Urgency::Normal, reply },
            EMBED_CALL_MS
        )
        .map_err(|e| format!("the embedding worker did not answer: {e}"))?;
        let embedded = answer.map_err(|e| e.to_string())?;
        Ok(embedded.into_iter().map(|e| e.vector().to_vec()).collect())
    }

    /// The references `text` calls for, best first.
    pub async fn enrich(&self, text: &str) -> Enrichment {
        let (similarity, semantic_off) = match self.similarities(text).await {
            Ok(s) => (Some(s), None),
            Err(why) => (None, Some(why)),
        };
        let matches = refs::candidates(self.catalog(), text, similarity.as_ref(), self.threshold, &BTreeSet::new());
        Enrichment { matches, semantic_off }
    }

    async fn similarities(&self, text: &str) -> Result<BTreeMap<String, f32>, String> {
        if text.trim().is_empty() {
            return Ok(BTreeMap::new());
        }
        let catalog = self.catalog_vectors().await?;
        let query = self.embed(vec![text.to_string()]).await?.pop().ok_or("the worker answered no vector")?;
        Ok(self.catalog().refs.iter().zip(catalog).map(|(r, v)| (r.id.clone(), dot(&query, v))).collect())
    }
}
