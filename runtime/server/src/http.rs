//! The admin API over HTTP/JSON. Handlers authenticate, check `Host`/`Origin`, size-check
//! and parse; everything else is the [`Admin`](crate::admin::Admin) actor's.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the dashboard ([`crate::dashboard`]): one card per persona, rendered on the server |
//! | `GET /dashboard/events` | the dashboard's live cards as Server-Sent Events: a `cards` event with the latest at once, then one whenever a card changes (checked each second) |
//! | `GET /dashboard/dashboard.js`, `GET /dashboard/dashboard.css` | the page's script and style, embedded in the binary |
//! | `GET /dashboard/persona/{name}` | a persona's introspection panel, an HTML fragment (404: no such persona) |
//! | `GET /dashboard/persona/{name}/{list}[?handle=H&direction=forward]` | another page of the panel's `decisions` or `memory`: without a handle a cursor is opened over the list (its second page comes back), with one the cursor is fetched; 404 once it expired |
//! | `POST /dashboard/login` | a form's `token=...`: the right one sets the dashboard's cookie and redirects to `/` |
//! | `POST /events` | `{"event_id", "accepted": true}` after the fsync; 400 / 404 / 413 / 429 / 500 / 503 / 507 (the data dir's disk is full) with `{"error", "field"?}` |
//! | `GET /dump[?persona=P]` | the fleet dump |
//! | `GET /personas/{name}` | one persona's dump |
//! | `GET /outbox?after=SEQ&limit=N[&room=R][&persona=P]` | the replies after `SEQ`, oldest first: `{"entries", "next"}` (`limit` at most 1,000) |
//! | `GET /outbox/stream` | the replies as Server-Sent Events (`event: reply`, `id:` its seq), resumed after `Last-Event-ID` |
//! | `POST /mcp`, `GET /mcp`, `DELETE /mcp` | the fleet as an MCP server over streamable HTTP ([`crate::mcp`]: `inject`, `ask`, `why`, `recall`, `rag_search`) |
//! | `GET /metrics` | the fleet's figures in the Prometheus text format ([`crate::metrics`]) |
//! | `POST /webhooks/retry[?webhook=NAME]` | queues this node's webhook dead letters (of one webhook, or all) again: `{"retried": N}`; 404 for a webhook the fleet does not have |
//! | `GET /health` | 200 once stored state is restored and events are accepted, else 503 with the reason (restoring, or the storage writer cannot write: a full disk) |
//! | `POST /faults` | inject a fault (only with `[admin] faults = true`) |
//! | `POST /cluster/move`, `POST /cluster/drain` | a fleet across nodes: move `{"persona", "to"?}` (or every persona of this node, `{"to"?}`) with its state to another node; `{"moved": [...]}` once stored there |
//! | `GET /ai/{query}` | introspection: `state`, `thoughts`, `decisions`, `plan`, `plan-history`, `learnings`, `recoveries`, `memory`, `health`, `availability`, `activity-map`, `select-for-task`, `recall` (parameters: `persona`, `domain`, `verdict`, `priority`, `text`, `room`, `limit`, `since` = `90s` \| `15m` \| `1h` \| `2d`) |
//! | `GET /ai/approvals` | the tool calls that wait for a person's approval, oldest first: `{"approvals": [{"id", "persona", "tool", "arguments", "why", "event_id", "room", "requested_us", "deadline_us", "state"}]}` |
//! | `POST /ai/approvals/{id}` | `{"decision": "approve" \| "deny", "reason"?, "by"?}`: answers it (404 unknown, 409 answered already); its plan goes on |
//! | `POST /ai/study` | `{"persona", "topic"?}`: the persona studies the topic (else the knowledge gap it noted first) in idle time; answers `{"persona", "topic", "queued": true}` |
//! | `POST /ai/train` | `{"persona", "topic"?}`: an adapter trains on the persona's study chats (about the topic, else all) in the model's idle time; answers `{"persona", "topic", "run", "queued": true}` |
//! | `POST /ai/state` | `{"persona", "change": "dormant" \| "wake" \| {"focus": {"objective", "intensity"}} \| "clear_focus"}` |
//! | `GET /ai/thoughts?page_size=N`, `GET /ai/decisions?page_size=N` | the list under a cursor: `{"handle", "offset", "entries", "total_count", "has_more", "has_previous"}`, paged with `POST /rag/fetch` |
//! | `POST /rag/{command}` | the codebase index ([`mindfleet_core::knowledge`]): `index`, `search`, `query`, `open`, `fetch`, `close`, `create`, `ask`, each with the JSON body of its request |
//! | `POST /v1/chat/completions`, `GET /v1/models` | the fleet's LLM as an OpenAI-compatible API ([`crate::openai`]) |
//!
//! Every route answers 403 to a `Host` (on a loopback address) or `Origin` that is not a
//! loopback literal or an `[admin] allowed_hosts` name, and 401 without the bearer token when one
//! is configured (`/health`, the login and the page's style and script excepted); the
//! dashboard's cookie counts as the token, and `/` without either answers the login form. Every
//! other error is JSON `{"error", "field"?}`, unknown routes, wrong methods and bad parameters
//! among them. [`serve`] bounds connections: how many, how long a head may take, how long a
//! kept-alive connection may idle. The long-lived streams (`/outbox/stream`, `/dashboard/events`,
//! `/mcp`) share `[admin] max_streams` slots, fewer than the connections: one more is refused
//! with 503 at once, and the other routes are still served.
//!
//! The guard (`Host`/`Origin`, then the token) is in `guard`; what a handler takes (query
//! parameters, path segments, the size-checked body) and its error, `ApiError`, are in `extract`;
//! the connections are in `conn`, the stream slots in `streams`, `/mcp` in `mcp`. A handler here
//! is its route's parameters, one call, its answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::{any_service, get, post};
use ractor::{ActorRef, call_t};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::dashboard;
use crate::openai;
use mindfleet_core::ai::{AiQuery, parse_window, window_start};
use mindfleet_core::config::{AdminConfig, DOMAINS, valid_name};
use mindfleet_core::dump::{FleetDump, PersonaDump};
use mindfleet_core::embedding::LongText;
use mindfleet_core::event::{Event, EventInput};
use mindfleet_core::knowledge::{IndexMsg, RagRequest};
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::messages::{AdminMsg, DumpDepth, Fault, InjectAck, StateChange};
use mindfleet_core::record::Verdict;
use mindfleet_core::sched::MAX_COST_BUCKETS;
use mindfleet_core::time::now_us;

mod conn;
mod extract;
mod guard;
mod mcp;
mod outbox;
mod streams;
mod tools;
pub use conn::serve;
use extract::{ApiError, FromBody, JsonBody, Params, Segments, Text, answer, json_body};
use guard::{guard, post_login};
use streams::{Streams, hold_stream};

/// The shortest token an admin API off loopback takes (without surrounding blanks).
pub const MIN_TOKEN_CHARS: usize = 16;

/// How long a handler waits for the admin actor.
const ADMIN_CALL_MS: u64 = 10_000;
/// How long a handler waits for the index: indexing a large tree takes minutes.
const INDEX_CALL_MS: u64 = 3_600_000;

#[derive(Clone)]
pub struct HttpState {
    pub admin: ActorRef<AdminMsg>,
    pub token: Option<Arc<str>>,
    pub max_body: usize,
    /// Set once stored state is restored and events are accepted.
    pub ready: Arc<AtomicBool>,
    /// The bound address (for the `Host`/`Origin` check).
    pub local: SocketAddr,
    /// The fleet's LLM worker, when it runs one (served under `/v1`).
    pub llm: Option<ActorRef<LlmMsg>>,
    /// The fleet's codebase index (served under `/rag`), which also keeps its cursors.
    pub index: ActorRef<IndexMsg>,
    /// What the dashboard's open pages are streamed.
    pub feed: dashboard::Feed,
    /// Whether the storage writer can write (a full disk makes `/health` answer 503).
    pub storage: mindfleet_store::Health,
    /// Storage itself, read by the outbox's feed.
    pub store: mindfleet_store::Storage,
    /// Events refused at `POST /events` (any answer but 200), for `/metrics`.
    pub refused: Arc<std::sync::atomic::AtomicU64>,
    /// The names `Host` and `Origin` may carry, the timeouts and the connection cap.
    pub edges: Edges,
    /// The names of the fleet's `[[webhook]]`s.
    pub webhooks: Arc<[String]>,
    /// The tool host, when the fleet declares tool servers (served under `/tools`).
    pub tools: Option<ActorRef<mindfleet_core::tools::ToolsMsg>>,
}

/// What connections and the `Host`/`Origin` guard are held to (`[admin]`).
#[derive(Clone, Debug)]
pub struct Edges {
    /// Names besides the loopback literals, lowercase.
    pub allowed_hosts: Arc<[String]>,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Long-lived streams at once (`[admin] max_streams`), fewer than `max_connections`.
    pub max_streams: usize,
}

impl From<&AdminConfig> for Edges {
    fn from(a: &AdminConfig) -> Edges {
        Edges {
            allowed_hosts: a.allowed_hosts.clone().into(),
            header_timeout: a.header_timeout,
            idle_timeout: a.idle_timeout,
            max_connections: a.max_connections,
            max_streams: a.max_streams,
        }
    }
}
/// Builds the router for a bound address.
pub fn router(state: HttpState) -> Router {
    let streams = Streams::new(state.edges.max_streams);
    let stream = || middleware::from_fn_with_state(streams.clone(), hold_stream);
    Router::new()
        .route("/", get(get_page))
        .route("/dashboard/events", get(get_dashboard_events).layer(stream()))
        .route("/dashboard/{asset}", get(get_asset))
        .route("/dashboard/persona/{name}", get(get_panel))
        .route("/dashboard/persona/{name}/{list}", get(get_panel_list))
        .route("/dashboard/login", post(post_login))
        .route("/events", post(post_event).layer(middleware::from_fn_with_state(state.clone(), count_refused)))
        .route("/dump", get(get_dump))
        .route("/outbox", get(outbox::get_outbox))
        .route("/outbox/stream", get(outbox::get_outbox_stream).layer(stream()))
        .route("/mcp", any_service(mcp::service(state.clone())).layer(stream()))
        .route("/metrics", get(get_metrics))
        .route("/webhooks/retry", post(post_webhooks_retry))
        .route("/personas/{name}", get(get_persona))
        .route("/health", get(health))
        .route("/tools", get(tools::get_tools))
        .route("/tools/approve", post(tools::post_approve))
        .route("/faults", post(post_fault))
        .route("/cluster/move", post(post_move))
        .route("/cluster/drain", post(post_drain))
        .route("/ai/state", get(get_ai_state).post(post_state))
        .route("/ai/embedding/generate", post(post_embedding))
        .route("/ai/study", post(post_study))
        .route("/ai/train", post(post_train))
        .route("/ai/approvals", get(tools::get_approvals))
        .route("/ai/approvals/{id}", post(tools::post_approval))
        .route("/ai/{query}", get(get_ai))
        .route("/rag/{command}", post(post_rag))
        .route("/v1/chat/completions", post(post_chat))
        .route("/v1/models", get(get_models))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {:?}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::with_status(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not a method of {:?}", uri.path()))
}

#[derive(Deserialize, Default)]
struct AiParams {
    persona: Option<String>,
    domain: Option<String>,
    verdict: Option<Verdict>,
    priority: Option<f64>,
    text: Option<String>,
    room: Option<String>,
    limit: Option<usize>,
    /// A window back from now: `90s`, `15m`, `1h`, `2d`.
    since: Option<String>,
    /// Page the list through a cursor, this many entries at a time (`thoughts`, `decisions`).
    page_size: Option<usize>,
    /// `cost`: also each persona's tokens over this many equal slices of the window.
    buckets: Option<u32>,
    /// `why`: the event's id.
    event: Option<String>,
}

/// Checks the parameters that name a persona, a room or a domain.
fn check_names(p: &AiParams) -> Result<(), ApiError> {
    for (field, name) in [("persona", &p.persona), ("room", &p.room)] {
        if let Some(n) = name
            && !valid_name(n)
        {
            return Err(ApiError::new(
                format!("`{field}` = {n:?} is not a {field} name (1-64 characters of a-z, 0-9, '-' or '_')"),
                Some(field),
            ));
        }
    }
    if let Some(d) = &p.domain
        && !DOMAINS.contains(&d.as_str())
    {
        return Err(ApiError::new(
            format!("`domain` = {d:?} is not a domain (known: {})", DOMAINS.join(", ")),
            Some("domain"),
        ));
    }
    Ok(())
}

/// The query a path and its parameters ask, or what is missing or wrong.
fn ai_query(what: &str, p: AiParams) -> Result<AiQuery, ApiError> {
    check_names(&p)?;
    let need = |v: Option<String>, name: &str| {
        v.ok_or_else(|| ApiError::new(format!("`{what}` needs the `{name}` parameter"), Some(name)))
    };
    let limit = p.limit.unwrap_or(20).clamp(1, 1000);
    let window =
        p.since.as_deref().map(parse_window).transpose().map_err(|e| ApiError::new(e.to_string(), Some("since")))?;
    let since_us = window.map(|w| window_start(w, now_us()));
    Ok(match what {
        "state" => AiQuery::State { persona: p.persona },
        "thoughts" => AiQuery::Thoughts { persona: need(p.persona, "persona")?, domain: p.domain, since_us },
        "decisions" => {
            AiQuery::Decisions { persona: need(p.persona, "persona")?, verdict: p.verdict, since_us, room: p.room }
        }
        "plan" => AiQuery::Plan { persona: need(p.persona, "persona")? },
        "plan-history" => AiQuery::PlanHistory { persona: need(p.persona, "persona")?, limit },
        "learnings" => AiQuery::Learnings { persona: p.persona },
        "recoveries" => AiQuery::Recoveries { persona: p.persona, limit },
        "memory" => AiQuery::Memory { persona: need(p.persona, "persona")? },
        "adapters" => AiQuery::Adapters { persona: need(p.persona, "persona")? },
        "health" => AiQuery::Health,
        "availability" => AiQuery::Availability { persona: p.persona },
        "activity-map" => AiQuery::ActivityMap,
        "history" => AiQuery::History { room: need(p.room, "room")?, since_us },
        "why" => {
            let id = need(p.event, "event")?;
            if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) {
                return Err(ApiError::new(
                    format!("`event` = {id:?} is not an event id (1-128 bytes of printable characters)"),
                    Some("event"),
                ));
            }
            AiQuery::Why { event_id: id }
        }
        "cost" => AiQuery::Cost {
            since_secs: window.unwrap_or(Duration::from_secs(3600)).as_secs(),
            buckets: match p.buckets {
                Some(b) if !(1..=MAX_COST_BUCKETS).contains(&b) => {
                    return Err(ApiError::new(
                        format!("`buckets` must be within 1..={MAX_COST_BUCKETS}, not {b}"),
                        Some("buckets"),
                    ));
                }
                b => b.unwrap_or(0),
            },
        },
        "recall" => AiQuery::Recall(mindfleet_core::conversation::RecallQuery {
            persona: need(p.persona, "persona")?,
            query: need(p.text, "text")?,
            room: p.room,
            since_us,
            limit: p.limit.unwrap_or(10).clamp(1, 100),
        }),
        "select-for-task" => {
            let priority = p.priority.unwrap_or(0.5);
            if !priority.is_finite() || !(0.0..=1.0).contains(&priority) {
                return Err(ApiError::new(
                    format!("`priority` = {priority} is not a number in 0..=1"),
                    Some("priority"),
                ));
            }
            AiQuery::SelectForTask { domain: need(p.domain, "domain")?, priority, text: p.text.unwrap_or_default() }
        }
        other => {
            return Err(ApiError::not_found(format!("unknown query {other:?}")));
        }
    })
}

/// What a handler answers: JSON (200), or the API's error.
type Answer<T = Value> = Result<Json<T>, ApiError>;

async fn get_ai(State(st): State<HttpState>, Segments(what): Segments<String>, Params(p): Params<AiParams>) -> Answer {
    ai(&st, &what, p).await
}

async fn get_ai_state(State(st): State<HttpState>, Params(p): Params<AiParams>) -> Answer {
    ai(&st, "state", p).await
}

async fn ai(st: &HttpState, what: &str, p: AiParams) -> Answer {
    let page_size = p.page_size;
    // The list a cursor pages through.
    let list = match (what, page_size) {
        (_, None) => None,
        ("thoughts", Some(_)) => Some("thoughts"),
        ("decisions", Some(_)) => Some("decisions"),
        ("history", Some(_)) => Some("messages"),
        ("plan-history", Some(_)) => Some("plans"),
        (other, Some(_)) => {
            return Err(ApiError::new(
                format!("`page_size` is for thoughts, decisions, history and plan-history, not {other:?}"),
                Some("page_size"),
            ));
        }
    };
    let q = ai_query(what, p)?;
    let mut v = answer("admin", call_t!(st.admin, AdminMsg::Ai, ADMIN_CALL_MS, q))?;
    let (Some(list), Some(page_size)) = (list, page_size) else { return Ok(Json(v)) };
    let items = match v.get_mut(list).map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    let open = call_t!(st.index, |reply| IndexMsg::OpenList { items, page_size, reply }, ADMIN_CALL_MS);
    let mut page = answer("index", open)?;
    for key in ["persona", "room"] {
        if let Some(x) = v.get_mut(key).map(Value::take) {
            page[key] = x;
        }
    }
    Ok(Json(page))
}

async fn post_rag(State(st): State<HttpState>, Segments(command): Segments<String>, Text(text): Text) -> Answer {
    let req = RagRequest::parse(&command, &text)?;
    answer("index", call_t!(st.index, IndexMsg::Request, INDEX_CALL_MS, Box::new(req))).map(Json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateBody {
    persona: String,
    change: StateChange,
}

impl FromBody for StateBody {
    fn from_body(text: &str) -> Result<StateBody, ApiError> {
        let body: StateBody = json_body(text, "invalid state change")?;
        if let StateChange::Focus { intensity, .. } = &body.change
            && (!intensity.is_finite() || !(0.0..=1.0).contains(intensity))
        {
            return Err(ApiError::new(format!("`intensity` = {intensity} is not in 0..=1"), Some("intensity")));
        }
        Ok(body)
    }
}

async fn post_state(State(st): State<HttpState>, JsonBody(b): JsonBody<StateBody>) -> Answer {
    let StateBody { persona, change } = b;
    answer("admin", call_t!(st.admin, |reply| AdminMsg::SetState { persona, change, reply }, ADMIN_CALL_MS))?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyBody {
    persona: String,
    #[serde(default)]
    topic: Option<String>,
}

impl FromBody for StudyBody {
    fn from_body(text: &str) -> Result<StudyBody, ApiError> {
        json_body(text, "invalid study request")
    }
}

async fn post_study(State(st): State<HttpState>, JsonBody(b): JsonBody<StudyBody>) -> Answer {
    let StudyBody { persona, topic } = b;
    let asked = persona.clone();
    let topic = answer("admin", call_t!(st.admin, |reply| AdminMsg::Study { persona, topic, reply }, ADMIN_CALL_MS))?;
    Ok(Json(json!({"persona": asked, "topic": topic, "queued": true})))
}

async fn post_train(State(st): State<HttpState>, JsonBody(b): JsonBody<StudyBody>) -> Answer {
    let StudyBody { persona, topic } = b;
    let (asked, about) = (persona.clone(), topic.clone());
    let run = answer("admin", call_t!(st.admin, |reply| AdminMsg::Train { persona, topic, reply }, ADMIN_CALL_MS))?;
    Ok(Json(json!({"persona": asked, "topic": about, "run": run, "queued": true})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    persona: String,
    #[serde(default)]
    to: Option<String>,
}

impl FromBody for MoveBody {
    fn from_body(text: &str) -> Result<MoveBody, ApiError> {
        json_body(text, "invalid move request")
    }
}

/// How long a move or a drain may take: each persona stops, then its rows reach its new node.
const MOVE_CALL_MS: u64 = 120_000;

/// Moves a persona of this node, with its state, to another node (`to`, else the least loaded).
async fn post_move(State(st): State<HttpState>, JsonBody(b): JsonBody<MoveBody>) -> Answer {
    let MoveBody { persona, to } = b;
    let done = answer("admin", call_t!(st.admin, |reply| AdminMsg::Move { persona, to, reply }, MOVE_CALL_MS))?;
    Ok(Json(json!({ "moved": [done] })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    #[serde(default)]
    to: Option<String>,
}

impl FromBody for DrainBody {
    /// An empty body drains to the least loaded nodes.
    fn from_body(text: &str) -> Result<DrainBody, ApiError> {
        match text.trim() {
            "" => Ok(DrainBody::default()),
            t => json_body(t, "invalid drain request"),
        }
    }
}

/// Moves every persona of this node to the others, one after the other.
async fn post_drain(State(st): State<HttpState>, JsonBody(DrainBody { to }): JsonBody<DrainBody>) -> Answer {
    let moved = answer("admin", call_t!(st.admin, |reply| AdminMsg::Drain { to, reply }, MOVE_CALL_MS * 10))?;
    Ok(Json(json!({ "moved": moved })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedBody {
    text: String,
    #[serde(default)]
    long: LongText,
}

impl FromBody for EmbedBody {
    fn from_body(text: &str) -> Result<EmbedBody, ApiError> {
        json_body(text, "invalid embedding request")
    }
}

async fn post_embedding(State(st): State<HttpState>, JsonBody(b): JsonBody<EmbedBody>) -> Answer {
    let EmbedBody { text, long } = b;
    answer("admin", call_t!(st.admin, |reply| AdminMsg::Embed { text, long, reply }, ADMIN_CALL_MS)).map(Json)
}

async fn post_chat(State(st): State<HttpState>, Text(text): Text) -> Response {
    openai::chat_completions(st.llm.clone(), &text).await
}

async fn get_models(State(st): State<HttpState>) -> Response {
    openai::models(st.llm.clone()).await
}

impl FromBody for Event {
    fn from_body(text: &str) -> Result<Event, ApiError> {
        let input = EventInput::from_json(text).map_err(|e| ApiError::new(format!("invalid event JSON: {e}"), None))?;
        input.validate().map_err(|e| ApiError::new(e.to_string(), Some(e.field)))
    }
}

async fn post_event(State(st): State<HttpState>, JsonBody(event): JsonBody<Event>) -> Answer<InjectAck> {
    answer("admin", call_t!(st.admin, AdminMsg::Inject, ADMIN_CALL_MS, Box::new(event))).map(Json)
}

#[derive(Deserialize)]
struct DumpQuery {
    persona: Option<String>,
}

async fn dump(st: &HttpState, persona: Option<String>) -> Result<FleetDump, ApiError> {
    answer("admin", call_t!(st.admin, |reply| AdminMsg::Dump { persona, depth: DumpDepth::Full, reply }, ADMIN_CALL_MS))
}

async fn get_dump(State(st): State<HttpState>, Params(q): Params<DumpQuery>) -> Answer<FleetDump> {
    if let Some(p) = &q.persona
        && !valid_name(p)
    {
        return Err(ApiError::new(format!("`persona` = {p:?} is not a persona name"), Some("persona")));
    }
    dump(&st, q.persona).await.map(Json)
}

/// Counts the events `POST /events` refuses (bad input, a full queue, a full disk, ...).
async fn count_refused(State(st): State<HttpState>, req: axum::extract::Request, next: middleware::Next) -> Response {
    let r = next.run(req).await;
    if !r.status().is_success() {
        st.refused.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// The fleet's figures for Prometheus (OpenMetrics text), from a dump taken now.
async fn get_metrics(
    State(st): State<HttpState>,
) -> Result<([(header::HeaderName, &'static str); 1], String), ApiError> {
    let d = dump(&st, None).await?;
    let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, kind)], crate::metrics::exposition(&d, st.refused.load(Ordering::Relaxed))))
}

#[derive(Deserialize)]
struct RetryParams {
    webhook: Option<String>,
}

async fn post_webhooks_retry(State(st): State<HttpState>, Params(p): Params<RetryParams>) -> Answer<Value> {
    if let Some(w) = &p.webhook
        && !st.webhooks.contains(w)
    {
        return Err(ApiError::not_found(format!("no webhook {w:?} (the fleet's: {})", st.webhooks.join(", "))));
    }
    let n = st.store.hook_retry(p.webhook.clone()).await.map_err(|e| ApiError::unavailable(e.to_string()))?;
    Ok(Json(json!({ "retried": n, "webhook": p.webhook })))
}

async fn get_persona(State(st): State<HttpState>, Segments(name): Segments<String>) -> Answer<PersonaDump> {
    let mut d = dump(&st, Some(name)).await?;
    if d.personas.is_empty() {
        return Err(ApiError::not_found("no such persona"));
    }
    Ok(Json(d.personas.remove(0)))
}

async fn get_page(State(st): State<HttpState>) -> Result<Html<String>, ApiError> {
    dashboard::page(&st.admin).await.map(Html).map_err(ApiError::unavailable)
}

async fn get_panel(State(st): State<HttpState>, Segments(name): Segments<String>) -> Result<Html<String>, ApiError> {
    let html = dashboard::panel(&st.admin, name.clone()).await.map_err(ApiError::unavailable)?;
    html.map(Html).ok_or_else(|| ApiError::not_found(format!("no persona {name:?}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    handle: Option<String>,
    #[serde(default)]
    direction: mindfleet_core::cursor::Direction,
}

async fn get_panel_list(
    State(st): State<HttpState>,
    Segments((name, list)): Segments<(String, String)>,
    Params(q): Params<ListParams>,
) -> Result<Html<String>, ApiError> {
    let Some(which) = dashboard::List::parse(&list) else {
        return Err(ApiError::not_found(format!("no panel list {list:?} (known: decisions, memory)")));
    };
    let html = dashboard::list_page(&st.admin, &st.index, name.clone(), which, q.handle, q.direction)
        .await
        .map_err(ApiError::unavailable)?;
    html.map(Html).ok_or_else(|| {
        ApiError::not_found(format!(
            "no persona {name:?}, or its {list} cursor expired or was closed: reopen the panel"
        ))
    })
}

async fn get_dashboard_events(State(st): State<HttpState>) -> Result<impl IntoResponse, ApiError> {
    if !st.ready.load(Ordering::Acquire) {
        return Err(ApiError::unavailable("restoring stored state"));
    }
    Ok(dashboard::events(st.feed.subscribe(&st.admin, st.ready.clone())))
}

async fn get_asset(Segments(asset): Segments<String>) -> Result<impl IntoResponse, ApiError> {
    let (body, kind) = match asset.as_str() {
        "dashboard.js" => (dashboard::SCRIPT, "text/javascript; charset=utf-8"),
        "dashboard.css" => (dashboard::STYLE, "text/css; charset=utf-8"),
        _ => return Err(ApiError::not_found(format!("no dashboard asset {asset:?}"))),
    };
    Ok(([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body))
}

async fn health(State(st): State<HttpState>) -> Answer {
    if let Some(f) = st.storage.failure() {
        return Err(ApiError::unavailable(f.reason));
    }
    if !st.ready.load(Ordering::Acquire) {
        return Err(ApiError::unavailable("restoring stored state"));
    }
    Ok(Json(json!({"status": "ok"})))
}

#[derive(Deserialize)]
struct FaultBody {
    persona: String,
    #[serde(flatten)]
    fault: Fault,
}

impl FromBody for FaultBody {
    fn from_body(text: &str) -> Result<FaultBody, ApiError> {
        json_body(text, "invalid fault JSON")
    }
}

async fn post_fault(State(st): State<HttpState>, JsonBody(b): JsonBody<FaultBody>) -> Answer {
    let FaultBody { persona, fault } = b;
    answer("admin", call_t!(st.admin, |reply| AdminMsg::Fault { persona, fault, reply }, ADMIN_CALL_MS))?;
    Ok(Json(json!({"ok": true})))
}

#[cfg(test)]
mod tests;
