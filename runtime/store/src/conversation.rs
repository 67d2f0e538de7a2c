//! Conversation recall: a persona's nearest messages in the conversation index, read back from
//! storage and ranked (see [`mindfleet_core::conversation`] for the records and the ranking).

use std::time::Duration;

use ractor::{ActorRef, call_t};

use mindfleet_core::conversation::{Recall, RecallQuery, RecallWeights, Said, rank};
use mindfleet_core::knowledge::{IndexMsg, RagRequest, SearchMode, SearchRequest};

use crate::Storage;

/// Vector neighbours looked at per message asked for (filters and ranking choose among them).
const DEPTH_PER_ITEM: usize = 10;
/// Longest recall waits for the index.
const INDEX_CALL_MS: u64 = 20_000;

/// Recalls what `q.persona` took in about `q.query`: its namespace's nearest vectors, ranked
/// (see [`rank`]); without vectors (no model, or none had within `wait` for the query), the
/// keyword matches, reported as `degraded`. Marking the recalled messages is the caller's
/// ([`SaidMarks::recall`]).
pub async fn recall(
    index: &ActorRef<IndexMsg>,
    storage: &Storage,
    q: &RecallQuery,
    w: &RecallWeights,
    wait: Option<Duration>,
) -> Result<Recall, String> {
    // One search by meaning; the index answers it by words, saying why, when it cannot.
    let mut s = SearchRequest::new(q.query.clone(), (q.limit * DEPTH_PER_ITEM).clamp(10, 500));
    s.path_prefix = Some(format!("{}/", q.persona));
    s.mode = SearchMode::Vector;
    s.embed_wait_ms = wait.map(|w| w.as_millis() as u64);
    let v = call_t!(index, IndexMsg::Request, INDEX_CALL_MS, Box::new(RagRequest::Search(s)))
        .map_err(|e| format!("the conversation index did not answer: {e}"))?
        .map_err(|e| e.to_string())?;
    let by_meaning = v["mode"] == "vector";
    let degraded = (!by_meaning).then(|| v["note"].as_str().unwrap_or("no vectors: keyword search only").to_string());
    let hits = hits(&v["hits"], by_meaning);
    let seqs: Vec<u64> = hits.iter().map(|(seq, _)| *seq).collect();
    let (persona, reader) = (q.persona.clone(), storage.clone());
    let said = tokio::task::spawn_blocking(move || reader.conversation(&persona, &seqs))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let candidates: Vec<(Said, f32)> = hits
        .into_iter()
        .filter_map(|(seq, sim)| said.iter().find(|s| s.seq == seq).map(|s| (s.clone(), sim)))
        .collect();
    let items = rank(candidates, q, w, mindfleet_core::time::now_us());
    Ok(Recall { items, degraded })
}

/// `(seq, similarity)` of each hit under a persona's namespace. A keyword hit has no
/// similarity: its fused score (1 for the best) stands in.
fn hits(v: &serde_json::Value, vectors: bool) -> Vec<(u64, f32)> {
    let Some(list) = v.as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|h| {
            let seq = h["path"].as_str()?.rsplit('/').next()?.parse().ok()?;
            let sim = if vectors { h["similarity"].as_f64()? } else { h["score"].as_f64()? };
            Some((seq, sim as f32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_read_the_sequence_from_the_namespaced_path() {
        let v = serde_json::json!([
            { "path": "helper/42", "similarity": 0.5, "score": 1.0 },
            { "path": "helper/x", "similarity": 0.5, "score": 1.0 },
            { "path": "helper/7", "score": 0.3 },
        ]);
        assert_eq!(hits(&v, true), [(42, 0.5)]);
        assert_eq!(hits(&v, false), [(42, 1.0), (7, 0.3)]);
    }
}
