//! The interface of the shared `Index` actor (crate `mindfleet-actors`, `index`): the codebase
//! knowledge of a fleet. Its requests are the `rag` commands, the same whether they come from
//! the in-process CLI, the admin API (`POST /rag/{command}`) or a persona's plan step, and it
//! keeps the open cursors of the fleet: over search results, and over any other list a caller
//! hands it (a persona's thoughts).
//!
//! Answers are JSON: the shapes of `mindfleet rag ... --json`.

#[cfg(feature = "actors")]
use ractor::RpcReplyPort;
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

use crate::cursor::Direction;

/// How a search ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    #[default]
    Hybrid,
    Keyword,
    Vector,
}

fn ten() -> usize {
    10
}

fn four() -> usize {
    4
}

fn answer_tokens() -> usize {
    160
}

fn yes() -> bool {
    true
}

/// `rag search`, and the search of `rag open` (whose `limit` is then the page size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub query: String,
    #[serde(default = "ten")]
    pub limit: usize,
    /// Only chunks of this language.
    #[serde(default)]
    pub lang: Option<String>,
    /// Only chunks whose path (relative to its root) starts with this.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Only results scoring at least this (0..=1).
    #[serde(default)]
    pub threshold: Option<f32>,
    #[serde(default)]
    pub mode: SearchMode,
    /// Longest the query may wait for the embedding model, in ms: past it the search goes on
    /// with words only and says so in its `note`. None: as long as the model takes.
    #[serde(default)]
    pub embed_wait_ms: Option<u64>,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>, limit: usize) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            limit,
            lang: None,
            path_prefix: None,
            threshold: None,
            mode: SearchMode::Hybrid,
            embed_wait_ms: None,
        }
    }
}

/// `rag ask`: the chunks `limit` best results give, and the LLM's answer from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    pub question: String,
    #[serde(default = "four")]
    pub limit: usize,
    #[serde(default = "answer_tokens")]
    pub max_tokens: usize,
    #[serde(default)]
    pub lang: Option<String>,
    #[serde(default)]
    pub path_prefix: Option<String>,
    #[serde(default)]
    pub mode: SearchMode,
}

/// What a path of `rag index` must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    File,
    Dir,
}

/// `rag index`, `rag index-file`, `rag index-dir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexRequest {
    /// Files and directories. Relative paths are taken from the index actor's working
    /// directory: the CLI sends absolute ones.
    pub paths: Vec<String>,
    /// Only these languages (`rust`, `typescript`, ...); all when absent.
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// Into subdirectories (else a directory's own files only).
    #[serde(default = "yes")]
    pub recursive: bool,
    /// Refuse a path that is not of this kind (`rag index-file`, `rag index-dir`).
    #[serde(default)]
    pub expect: Option<PathKind>,
}

/// `rag create`: one entry under a path of the caller's choosing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    pub file_path: String,
    pub content: String,
    /// Its vector (default: the model embeds the content).
    #[serde(default)]
    pub embedding: Option<Vec<f32>>,
}

/// `rag create` for many entries at once, in one transaction (`POST /rag/create-many`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateManyRequest {
    pub entries: Vec<CreateRequest>,
}

/// `rag fetch`: a page of an open handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchRequest {
    pub handle: String,
    #[serde(default)]
    pub direction: Direction,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `rag close`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseRequest {
    pub handle: String,
}

/// A request of the `rag` commands.
#[derive(Debug, Clone, PartialEq)]
pub enum RagRequest {
    Index(IndexRequest),
    Search(SearchRequest),
    /// The entries nearest a query by their vectors alone, with their similarities.
    Query(SearchRequest),
    Open(SearchRequest),
    Fetch(FetchRequest),
    Close(CloseRequest),
    Create(CreateRequest),
    CreateMany(CreateManyRequest),
    Ask(AskRequest),
}

impl RagRequest {
    /// The request named by `command` (the path of `POST /rag/{command}`), from its JSON body.
    pub fn parse(command: &str, body: &str) -> Result<RagRequest, RagError> {
        // The field a bad value was read for is named (a number out of range says only where).
        fn de<T: serde::de::DeserializeOwned>(command: &str, body: &str) -> Result<T, RagError> {
            let mut d = serde_json::Deserializer::from_str(body);
            let read = serde_path_to_error::deserialize(&mut d).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                match path.as_str() {
                    "." | "" => RagError::Invalid(format!("{command}: {inner}")),
                    _ => RagError::Invalid(format!("{command}: `{path}`: {inner}")),
                }
            })?;
            d.end().map_err(|e| RagError::Invalid(format!("{command}: {e}")))?;
            Ok(read)
        }
        let req = match command {
            "index" => RagRequest::Index(de(command, body)?),
            "search" => RagRequest::Search(de(command, body)?),
            "query" => RagRequest::Query(de(command, body)?),
            "open" => RagRequest::Open(de(command, body)?),
            "fetch" => RagRequest::Fetch(de(command, body)?),
            "close" => RagRequest::Close(de(command, body)?),
            "create" => RagRequest::Create(de(command, body)?),
            "create-many" => RagRequest::CreateMany(de(command, body)?),
            "ask" => RagRequest::Ask(de(command, body)?),
            other => {
                return Err(RagError::NotFound(format!(
                    "unknown rag command {other:?} (known: index, search, query, open, fetch, close, create, create-many, ask)"
                )));
            }
        };
        req.check(command)?;
        Ok(req)
    }

    /// What serde cannot refuse: a number too large for an `f32` reads as infinity.
    fn check(&self, command: &str) -> Result<(), RagError> {
        let bad = |field: &str, why: String| Err(RagError::Invalid(format!("{command}: `{field}` {why}")));
        let embedding_ok = |c: &CreateRequest| c.embedding.as_ref().is_none_or(|v| v.iter().all(|x| x.is_finite()));
        match self {
            RagRequest::Search(r) | RagRequest::Query(r) | RagRequest::Open(r) => match r.threshold {
                Some(t) if !(0.0..=1.0).contains(&t) => bad("threshold", format!("= {t} is not a number in 0..=1")),
                _ => Ok(()),
            },
            RagRequest::Create(c) if !embedding_ok(c) => {
                bad("embedding", "has a number too large for 32 bits".to_string())
            }
            RagRequest::CreateMany(m) => match m.entries.iter().position(|c| !embedding_ok(c)) {
                Some(i) => bad(&format!("entries[{i}].embedding"), "has a number too large for 32 bits".to_string()),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// The command's name and its JSON body, as [`RagRequest::parse`] reads them.
    pub fn to_body(&self) -> (&'static str, serde_json::Value) {
        use serde_json::to_value;
        let (name, body) = match self {
            RagRequest::Index(r) => ("index", to_value(r)),
            RagRequest::Search(r) => ("search", to_value(r)),
            RagRequest::Query(r) => ("query", to_value(r)),
            RagRequest::Open(r) => ("open", to_value(r)),
            RagRequest::Fetch(r) => ("fetch", to_value(r)),
            RagRequest::Close(r) => ("close", to_value(r)),
            RagRequest::Create(r) => ("create", to_value(r)),
            RagRequest::CreateMany(r) => ("create-many", to_value(r)),
            RagRequest::Ask(r) => ("ask", to_value(r)),
        };
        (name, body.unwrap_or_default())
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RagError {
    /// The request is malformed or out of range (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// A path outside the allowed roots (HTTP 403).
    #[error("{0}")]
    Forbidden(String),
    /// An unknown, expired or closed handle; an unknown command (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// The index or a model it needs is not there (HTTP 503).
    #[error("{0}")]
    Unavailable(String),
    /// Reading, storing or embedding failed (HTTP 500).
    #[error("{0}")]
    Failed(String),
}

#[cfg(feature = "actors")]
pub type RagReply = RpcReplyPort<Result<serde_json::Value, RagError>>;

#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum IndexMsg {
    Request(Box<RagRequest>, RagReply),
    /// Opens a cursor over a list the caller took (a persona's thoughts): `{"handle", ...page}`.
    OpenList {
        items: Vec<serde_json::Value>,
        page_size: usize,
        reply: RagReply,
    },
    Stats(RpcReplyPort<IndexStats>),
}

/// The index's figures (in `mindfleet dump` under `index`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IndexStats {
    /// `opening`, `ready`, or `failed` (see `error`).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub files: u64,
    pub chunks: u64,
    pub texts: u64,
    /// What opening repaired (a keyword index rebuilt from redb).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<String>,
    pub requests: u64,
    pub failures: u64,
    /// Requests queued for or running on the index thread.
    pub in_flight: u64,
    pub open_cursors: usize,
    /// `create-many` requests stored in one commit with others that queued beside them.
    #[serde(default)]
    pub grouped_writes: u64,
    /// The node whose index this is, when it is another node's (`[cluster] index`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Below this cosine similarity a chunk found only by its vector is not taken as relevant
/// (all-MiniLM-L6-v2 gives unrelated texts about 0 to 0.2).
pub const RELEVANT_SIMILARITY: f32 = 0.3;

/// Whether a search result is worth reading: a vector match of [`RELEVANT_SIMILARITY`] or
/// more, or a keyword match when the search had no vectors.
pub fn is_relevant(similarity: Option<f32>, keyword_rank: Option<usize>) -> bool {
    match similarity {
        Some(s) => s >= RELEVANT_SIMILARITY,
        None => keyword_rank.is_some(),
    }
}

/// A chunk a persona found, with the citation it is known by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `path:start-end`.
    pub cite: String,
    pub kind: String,
    pub symbol: Option<String>,
    pub text: String,
    pub score: f32,
}

impl Source {
    /// The relevant results of a `search` answer (`{"hits": [...]}`), in rank order.
    pub fn relevant_hits(answer: &serde_json::Value) -> Vec<Source> {
        #[derive(Deserialize)]
        struct Hit {
            path: String,
            start_line: usize,
            end_line: usize,
            kind: String,
            symbol: Option<String>,
            score: f32,
            keyword_rank: Option<usize>,
            similarity: Option<f32>,
            text: String,
        }
        let hits: Vec<Hit> = serde_json::from_value(answer["hits"].clone()).unwrap_or_default();
        hits.into_iter()
            .filter(|h| is_relevant(h.similarity, h.keyword_rank))
            .map(|h| Source {
                cite: format!("{}:{}-{}", h.path, h.start_line, h.end_line),
                kind: h.kind,
                symbol: h.symbol,
                text: h.text,
                score: h.score,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const COMMANDS: &[&str] =
        &["index", "search", "query", "open", "fetch", "close", "create", "create-many", "ask", "nope", ""];

    /// The keys the requests take, so that generated bodies reach past the unknown-field check.
    const KEYS: &[&str] = &[
        "query",
        "limit",
        "lang",
        "path_prefix",
        "threshold",
        "mode",
        "embed_wait_ms",
        "question",
        "max_tokens",
        "paths",
        "types",
        "recursive",
        "expect",
        "file_path",
        "content",
        "embedding",
        "entries",
        "handle",
        "direction",
        "offset",
    ];

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(0)),
            Just(json!(-1)),
            Just(json!(i64::MIN)),
            Just(json!(u64::MAX)),
            Just(json!(1e39)),
            Just(json!(-1e39)),
            Just(json!(f64::MAX)),
            Just(json!(f64::MIN_POSITIVE)),
            Just(json!(-0.0)),
            Just(json!(0.5)),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            number(),
            any::<String>().prop_map(Value::from),
            proptest::sample::select(&["hybrid", "vector", "forward", "backward", "file", "dir", "rust"][..])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }

    /// A clear error, or a request that reads back the same from its own body.
    fn check(command: &str, body: &str) {
        match RagRequest::parse(command, body) {
            Ok(req) => {
                let (name, value) = req.to_body();
                assert_eq!(name, command);
                let again = RagRequest::parse(name, &value.to_string());
                assert_eq!(again.as_ref(), Ok(&req), "{command} {body}");
            }
            Err(e) => {
                let m = e.to_string();
                assert!(!m.is_empty() && !m.ends_with('.'), "{m}");
                assert!(matches!(e, RagError::Invalid(_) | RagError::NotFound(_)), "{e:?}");
            }
        }
    }

    #[test]
    fn a_threshold_too_large_for_32_bits_is_refused_not_read_as_infinity() {
        let e = RagRequest::parse("search", r#"{"query": "x", "threshold": 1e39}"#).unwrap_err();
        assert!(e.to_string().contains("threshold"), "{e}");
        let e = RagRequest::parse("create", r#"{"file_path": "a", "content": "b", "embedding": [0.5, 1e39]}"#);
        assert!(e.unwrap_err().to_string().contains("embedding"));
        let ok = RagRequest::parse("open", r#"{"query": "x", "threshold": 0.25, "limit": 3}"#).unwrap();
        assert!(matches!(ok, RagRequest::Open(SearchRequest { limit: 3, .. })));
    }

    #[test]
    fn cursor_requests_read_their_fields() {
        let f = RagRequest::parse("fetch", r#"{"handle": "h1", "direction": "backward", "offset": 5}"#).unwrap();
        let RagRequest::Fetch(f) = f else { panic!("{f:?}") };
        assert_eq!((f.handle.as_str(), f.direction, f.offset, f.limit), ("h1", Direction::Backward, Some(5), None));
        for bad in
            [r#"{"handle": 1}"#, r#"{"handle": "h", "offset": -1}"#, r#"{"handle": "h", "direction": "up"}"#, "[]"]
        {
            assert!(matches!(RagRequest::parse("fetch", bad), Err(RagError::Invalid(_))), "{bad}");
        }
        assert!(matches!(RagRequest::parse("close", r#"{"handle": "h", "x": 1}"#), Err(RagError::Invalid(_))));
    }

    proptest! {
        #[test]
        fn any_body_gives_a_request_or_a_clear_error(
            command in proptest::sample::select(COMMANDS),
            body in any::<String>(),
        ) {
            check(command, &body);
        }

        #[test]
        fn any_json_value_gives_a_request_or_a_clear_error(
            command in proptest::sample::select(COMMANDS),
            body in json_value(),
        ) {
            check(command, &body.to_string());
        }

        #[test]
        fn cursor_requests_with_edge_values_give_a_request_or_a_clear_error(
            command in proptest::sample::select(&["open", "fetch", "close"][..]),
            query in any::<String>(),
            handle in prop_oneof![any::<String>().prop_map(Value::from), number(), Just(Value::Null)],
            offset in number(),
            limit in number(),
            direction in json_value(),
        ) {
            let body = match command {
                "open" => json!({"query": query, "limit": limit, "threshold": offset}),
                "fetch" => json!({"handle": handle, "offset": offset, "limit": limit, "direction": direction}),
                _ => json!({"handle": handle}),
            };
            check(command, &body.to_string());
        }
    }
}
