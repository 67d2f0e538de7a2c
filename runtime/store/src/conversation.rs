//! Conversation recall: a persona's messages that the conversation index finds by words and by
//! meaning, read back from storage and ranked (see [`mindfleet_core::conversation`] for the
//! records and the ranking).

use std::time::Duration;

use ractor::{ActorRef, call_t};

use mindfleet_core::conversation::{
    Found, Observation, ObservationKind, Recall, RecallQuery, RecallWeights, Said, Via, rank,
};
use mindfleet_core::knowledge::{IndexMsg, RagRequest, SearchMode, SearchRequest};

use crate::{Storage, StorageError};

/// Candidates looked at per message asked for (filters and ranking choose among them).
const DEPTH_PER_ITEM: usize = 10;
/// Longest recall waits for the index.
const INDEX_CALL_MS: u64 = 20_000;

/// Recalls what `q.persona` took in about `q.query`: its namespace's keyword and vector
/// matches, fused by the conversation index, ranked (see [`rank`]); without vectors (no model,
/// or none had within `wait` for the query), the keyword matches alone, reported as
/// `degraded`. Marking the recalled messages is the caller's
/// ([`mindfleet_core::conversation::SaidMarks::recall`]).
pub async fn recall(
    index: &ActorRef<IndexMsg>,
    storage: &Storage,
    q: &RecallQuery,
    w: &RecallWeights,
    wait: Option<Duration>,
) -> Result<Recall, String> {
    // One search by words and meaning; the index answers it by words alone, saying why, when it
    // cannot use the vectors.
    let mut s = SearchRequest::new(q.query.clone(), (q.limit * DEPTH_PER_ITEM).clamp(10, 500));
    s.path_prefix = Some(format!("{}/", q.persona));
    s.mode = SearchMode::Hybrid;
    s.embed_wait_ms = wait.map(|w| w.as_millis() as u64);
    let v = call_t!(index, IndexMsg::Request, INDEX_CALL_MS, Box::new(RagRequest::Search(s)))
        .map_err(|e| format!("the conversation index did not answer: {e}"))?
        .map_err(|e| e.to_string())?;
    let degraded =
        (v["mode"] == "keyword").then(|| v["note"].as_str().unwrap_or("no vectors: keyword search only").to_string());
    let hits = hits(&v["hits"]);
    let (persona, reader) = (q.persona.clone(), storage.clone());
    let candidates = tokio::task::spawn_blocking(move || found(&reader, &persona, hits))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let items = rank(candidates, q, w, mindfleet_core::time::now_us());
    Ok(Recall { items, degraded })
}

/// What a hit of the conversation index is: a message, or an observation made of messages.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Entry {
    Said(u64),
    Observation(u64),
}

/// The messages the hits found (best first), each with its [`Found`]: a message found itself
/// keeps its fusion's figures; a fact adds its relevance to each of its source messages, and a
/// session's summary to those of its messages found otherwise (it says which session is about
/// the query, not which of its messages), each marked with the first observation that brought
/// it. Messages and observations no longer kept are left out.
fn found(storage: &Storage, persona: &str, hits: Vec<(Entry, Found)>) -> Result<Vec<(Said, Found)>, StorageError> {
    let ids: Vec<u64> =
        hits.iter().filter_map(|(e, _)| if let Entry::Observation(id) = e { Some(*id) } else { None }).collect();
    let observations = storage.observations(persona, &ids)?;
    let mut by_seq: Vec<(u64, Found)> = Vec::new();
    for (entry, f) in &hits {
        if let Entry::Said(seq) = entry {
            add(&mut by_seq, *seq, f, None, false);
        }
    }
    for kind in [ObservationKind::Fact, ObservationKind::Summary] {
        for (entry, f) in &hits {
            let Entry::Observation(id) = entry else { continue };
            let Some(o) = observations.iter().find(|o| o.id == *id && o.kind == kind) else { continue };
            // An unrelated vector neighbour brings nothing; an observation's own similarity is
            // not its messages'.
            if !f.related() {
                continue;
            }
            let f = Found { similarity: None, ..f.clone() };
            for seq in &o.sources {
                add(&mut by_seq, *seq, &f, Some(o), kind == ObservationKind::Summary);
            }
        }
    }
    let seqs: Vec<u64> = by_seq.iter().map(|(seq, _)| *seq).collect();
    let said = storage.conversation(persona, &seqs)?;
    Ok(by_seq
        .into_iter()
        .filter_map(|(seq, found)| said.iter().find(|s| s.seq == seq).map(|s| (s.clone(), found)))
        .collect())
}

/// Adds what `f` says of message `seq` (brought by `via`, when an observation did) to what
/// `by_seq` has of it; `only_found`: only to a message it has already.
fn add(by_seq: &mut Vec<(u64, Found)>, seq: u64, f: &Found, via: Option<&Observation>, only_found: bool) {
    match by_seq.iter_mut().find(|(s, _)| *s == seq) {
        Some((_, mine)) => {
            mine.relevance += f.relevance;
            mine.by_words |= f.by_words;
            if mine.via.is_none() {
                mine.via = via.map(via_of);
            }
        }
        None if !only_found => by_seq.push((seq, Found { via: via.map(via_of), ..f.clone() })),
        None => {}
    }
}

fn via_of(o: &Observation) -> Via {
    Via { observation: o.id, kind: o.kind, text: o.text.clone() }
}

/// Each hit under a persona's namespace, and what the index says of it: its fused score (1 for
/// the best possible), its similarity when the vectors found it, and whether its words matched.
fn hits(v: &serde_json::Value) -> Vec<(Entry, Found)> {
    let Some(list) = v.as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|h| {
            let path = h["path"].as_str()?;
            let entry = match Said::seq_of(path) {
                Some(seq) => Entry::Said(seq),
                None => Entry::Observation(Observation::id_of_path(path)?),
            };
            let found = Found {
                relevance: h["score"].as_f64()? as f32,
                similarity: h["similarity"].as_f64().map(|s| s as f32),
                by_words: h["keyword_rank"].is_u64(),
                via: None,
            };
            Some((entry, found))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_read_the_sequence_from_the_namespaced_path() {
        let v = serde_json::json!([
            { "path": "helper/42", "similarity": 0.5, "score": 1.0, "keyword_rank": 1, "vector_rank": 1 },
            { "path": "helper/x", "similarity": 0.5, "score": 1.0 },
            { "path": "helper/7", "score": 0.25, "keyword_rank": 2 },
            { "path": "helper/9", "similarity": 0.75, "score": 0.5, "vector_rank": 2 },
            { "path": "helper/o15", "score": 0.5, "keyword_rank": 3 },
        ]);
        let f = |relevance, similarity, by_words| Found { relevance, similarity, by_words, via: None };
        assert_eq!(
            hits(&v),
            [
                (Entry::Said(42), f(1.0, Some(0.5), true)),
                (Entry::Said(7), f(0.25, None, true)),
                (Entry::Said(9), f(0.5, Some(0.75), false)),
                (Entry::Observation(15), f(0.5, None, true)),
            ]
        );
    }
}
