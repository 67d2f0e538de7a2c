//! `rag ask`: the LLM answers a question from the chunks a search found, and every claim of its
//! answer is tied to the chunk it comes from (`path:start-end`).

use mindfleet_core::knowledge::is_relevant;
use mindfleet_core::llm::{ChatMessage, GenerateRequest, Generation};
use mindfleet_index::Hit;
use serde_json::json;

/// The hits worth giving the model ([`is_relevant`]).
pub fn relevant(hits: &[Hit]) -> Vec<&Hit> {
    hits.iter().filter(|h| is_relevant(h.similarity, h.keyword_rank)).collect()
}

pub fn cite(h: &Hit) -> String {
    format!("{}:{}-{}", h.path, h.start_line, h.end_line)
}

/// The model's request: the numbered sources, then the question.
pub fn request(question: &str, sources: &[&Hit], max_tokens: usize) -> GenerateRequest {
    let mut text = String::new();
    for (n, h) in sources.iter().enumerate() {
        text.push_str(&format!("[{}] {}\n```\n{}\n```\n\n", n + 1, cite(h), h.text.trim_end()));
    }
    let messages = vec![
        ChatMessage::system(
            "You answer questions about a codebase in at most three sentences of plain prose, using only the \
             numbered sources given. After each claim, cite the source it comes from as [1], [2], ... If the \
             sources do not answer the question, say so.",
        ),
        ChatMessage::user(format!("Sources:\n\n{text}Question: {question}")),
    ];
    // Prose only: a small model that starts quoting code tends to repeat itself.
    GenerateRequest { stop: vec!["```".into(), "\n\n\n".into()], ..GenerateRequest::new(messages, max_tokens) }
}

/// The answer when nothing relevant was found.
pub fn nothing(question: &str, note: Option<&str>) -> serde_json::Value {
    json!({
        "answer": format!("The index has nothing relevant to this question: {question}"),
        "relevant": false,
        "sources": [],
        "citations": [],
        "note": note,
    })
}

/// `{"answer", "relevant", "sources", "citations", "tokens_in", "tokens_out", "note"}`: the
/// model's `[n]` marks rewritten as `[path:start-end]`, each source `{"n", "cite", "chunk_id",
/// "score"}`.
pub fn answer(g: &Generation, sources: &[&Hit], note: Option<&str>) -> serde_json::Value {
    let mut text = g.text.trim().to_string();
    for (n, h) in sources.iter().enumerate() {
        text = text.replace(&format!("[{}]", n + 1), &format!("[{}]", cite(h)));
    }
    let (text, citations) = attribute(&text, sources);
    let listed: Vec<serde_json::Value> = sources
        .iter()
        .enumerate()
        .map(|(n, h)| json!({ "n": n + 1, "cite": cite(h), "chunk_id": h.chunk_id, "score": h.score }))
        .collect();
    json!({
        "answer": text,
        "relevant": true,
        "sources": listed,
        "citations": citations,
        "tokens_in": g.tokens_in,
        "tokens_out": g.tokens_out,
        "note": note,
    })
}

/// Every sentence of `answer` with its citation: the model's own (`[path:start-end]`), else
/// the source that shares the most words with it (small models rarely cite), else none. The
/// answer with the added citations, and one `{"sentence", "cite", "by"}` per citation.
fn attribute(answer: &str, sources: &[&Hit]) -> (String, Vec<serde_json::Value>) {
    fn words(text: &str) -> std::collections::HashSet<String> {
        mindfleet_core::words::split(text)
            .filter(|w| w.len() >= 4)
            .map(str::to_lowercase)
            .filter(|w| {
                !["that", "this", "with", "from", "when", "then", "which", "code", "function"].contains(&w.as_str())
            })
            .collect()
    }
    let source_words: Vec<_> =
        sources.iter().map(|h| words(&format!("{} {}", h.symbol.as_deref().unwrap_or(""), h.text))).collect();
    let mut out = String::new();
    let mut citations = Vec::new();
    let mut rest = answer;
    let mut index = 0;
    while !rest.is_empty() {
        // A sentence ends at `.`, `!` or `?` followed by a space or the end, or at a line break.
        let end = rest
            .char_indices()
            .find(|(i, c)| *c == '\n' || (matches!(c, '.' | '!' | '?') && rest[i + 1..].starts_with([' ', '\n'])))
            .map_or(rest.len(), |(i, c)| i + c.len_utf8());
        let sentence = &rest[..end];
        rest = &rest[end..];
        out.push_str(sentence);
        if sentence.trim().len() < 3 {
            continue;
        }
        index += 1;
        let own: Vec<String> =
            sources.iter().map(|h| cite(h)).filter(|c| sentence.contains(&format!("[{c}]"))).collect();
        if !own.is_empty() {
            citations.extend(own.into_iter().map(|c| json!({ "sentence": index, "cite": c, "by": "model" })));
            continue;
        }
        let mine = words(sentence);
        let best = source_words
            .iter()
            .enumerate()
            .map(|(k, w)| (k, mine.intersection(w).count()))
            .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)));
        if let Some((k, n)) = best.filter(|(_, n)| *n > 0) {
            let c = cite(sources[k]);
            // Before the sentence's closing punctuation.
            let body = out.trim_end().trim_end_matches(['.', '!', '?']).len();
            let tail = out[body..].to_string();
            out.truncate(body);
            out.push_str(&format!(" [{c}]{tail}"));
            citations.push(json!({ "sentence": index, "cite": c, "by": "overlap", "shared_words": n }));
        }
    }
    (out, citations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, text: &str) -> Hit {
        Hit {
            chunk_id: 0,
            path: path.into(),
            root: String::new(),
            lang: "rust".into(),
            kind: "function".into(),
            symbol: None,
            start_line: 1,
            end_line: 3,
            score: 1.0,
            keyword_rank: None,
            vector_rank: None,
            similarity: None,
            text: text.into(),
        }
    }

    #[test]
    fn each_sentence_keeps_its_own_citation_or_gets_the_source_it_shares_most_words_with() {
        let (a, b) = (
            hit("cache.rs", "fn invalidate cache entry when written"),
            hit("deploy.rs", "fn switch traffic to green servers"),
        );
        let answer = "Traffic moves to the green servers. The cache entry is dropped [cache.rs:1-3]! Nothing else.";
        let (out, citations) = attribute(answer, &[&a, &b]);
        assert_eq!(
            out,
            "Traffic moves to the green servers [deploy.rs:1-3]. The cache entry is dropped [cache.rs:1-3]! Nothing else."
        );
        let by: Vec<(u64, &str, &str)> = citations
            .iter()
            .map(|c| (c["sentence"].as_u64().unwrap(), c["cite"].as_str().unwrap(), c["by"].as_str().unwrap()))
            .collect();
        assert_eq!(by, [(1, "deploy.rs:1-3", "overlap"), (2, "cache.rs:1-3", "model")]);
    }
}
