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
//! | `GET /health` | 200 once stored state is restored and events are accepted, else 503 with the reason (restoring, or the storage writer cannot write: a full disk) |
//! | `POST /faults` | inject a fault (only with `[admin] faults = true`) |
//! | `POST /cluster/move`, `POST /cluster/drain` | a fleet across nodes: move `{"persona", "to"?}` (or every persona of this node, `{"to"?}`) with its state to another node; `{"moved": [...]}` once stored there |
//! | `GET /ai/{query}` | introspection: `state`, `thoughts`, `decisions`, `plan`, `plan-history`, `learnings`, `recoveries`, `memory`, `health`, `availability`, `activity-map`, `select-for-task`, `recall` (parameters: `persona`, `domain`, `verdict`, `priority`, `text`, `room`, `limit`, `since` = `90s` \| `15m` \| `1h` \| `2d`) |
//! | `POST /ai/study` | `{"persona", "topic"?}`: the persona studies the topic (else the knowledge gap it noted first) in idle time; answers `{"persona", "topic", "queued": true}` |
//! | `POST /ai/state` | `{"persona", "change": "dormant" \| "wake" \| {"focus": {"objective", "intensity"}}}` |
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
//! kept-alive connection may idle.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ractor::{ActorRef, call_t};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::dashboard;
use crate::openai;
use mindfleet_core::ai::{AiQuery, parse_window, window_start};
use mindfleet_core::config::{AdminConfig, DOMAINS, valid_name};
use mindfleet_core::embedding::LongText;
use mindfleet_core::event::EventInput;
use mindfleet_core::knowledge::{IndexMsg, RagError, RagRequest};
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::messages::{AdminMsg, DumpDepth, Fault, InjectError, StateChange};
use mindfleet_core::model::Verdict;
use mindfleet_core::sched::MAX_COST_BUCKETS;
use mindfleet_core::time::now_us;

mod conn;
pub use conn::serve;

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
    /// The names `Host` and `Origin` may carry, the timeouts and the connection cap.
    pub edges: Edges,
}

/// What connections and the `Host`/`Origin` guard are held to (`[admin]`).
#[derive(Clone, Debug)]
pub struct Edges {
    /// Names besides the loopback literals, lowercase.
    pub allowed_hosts: Arc<[String]>,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl From<&AdminConfig> for Edges {
    fn from(a: &AdminConfig) -> Edges {
        Edges {
            allowed_hosts: a.allowed_hosts.clone().into(),
            header_timeout: a.header_timeout,
            idle_timeout: a.idle_timeout,
            max_connections: a.max_connections,
        }
    }
}

fn error(status: StatusCode, message: impl Into<String>, field: Option<&str>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = json!(f);
    }
    (status, axum::Json(body)).into_response()
}

fn inject_error(e: InjectError) -> Response {
    let status = match &e {
        InjectError::Invalid(_) => StatusCode::BAD_REQUEST,
        InjectError::NotFound(_) => StatusCode::NOT_FOUND,
        InjectError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
        InjectError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        InjectError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
        InjectError::ShuttingDown | InjectError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string(), None)
}

/// Builds the router for a bound address.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/", get(get_page))
        .route("/dashboard/events", get(get_dashboard_events))
        .route("/dashboard/{asset}", get(get_asset))
        .route("/dashboard/persona/{name}", get(get_panel))
        .route("/dashboard/persona/{name}/{list}", get(get_panel_list))
        .route("/dashboard/login", post(post_login))
        .route("/events", post(post_event))
        .route("/dump", get(get_dump))
        .route("/personas/{name}", get(get_persona))
        .route("/health", get(health))
        .route("/faults", post(post_fault))
        .route("/cluster/move", post(post_move))
        .route("/cluster/drain", post(post_drain))
        .route("/ai/state", get(get_ai_state).post(post_state))
        .route("/ai/embedding/generate", post(post_embedding))
        .route("/ai/study", post(post_study))
        .route("/ai/{query}", get(get_ai))
        .route("/rag/{command}", post(post_rag))
        .route("/v1/chat/completions", post(post_chat))
        .route("/v1/models", get(get_models))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no route {:?}", uri.path()), None)
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not a method of {:?}", uri.path()), None)
}

/// A request the API cannot take: 400 (unless said otherwise) with the JSON every error has,
/// naming the query parameter, path segment or body field where one is known.
#[derive(Debug, Clone, PartialEq)]
struct BadRequest {
    status: StatusCode,
    message: String,
    field: Option<String>,
}

impl BadRequest {
    fn new(message: impl Into<String>, field: Option<&str>) -> BadRequest {
        BadRequest { status: StatusCode::BAD_REQUEST, message: message.into(), field: field.map(str::to_string) }
    }
}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        error(self.status, self.message, self.field.as_deref())
    }
}

/// The query string as `T`, or the parameter that is wrong and why.
fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, BadRequest> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        match field.as_str() {
            "" | "." => BadRequest::new(format!("query string: {}", e.inner()), None),
            f => BadRequest::new(format!("query parameter `{f}`: {}", e.inner()), Some(f)),
        }
    })
}

/// Query parameters, refused with a JSON error that names the one that is wrong (axum's
/// `Query` answers plain text).
struct Params<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = BadRequest;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, BadRequest> {
        parse_query(parts.uri.query().unwrap_or("")).map(Params)
    }
}

/// Path segments, refused with a JSON error (axum's `Path` answers plain text).
struct Segments<T>(T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Segments<T> {
    type Rejection = BadRequest;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, BadRequest> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Segments(v)),
            Err(e) => Err(BadRequest { status: e.status(), message: e.body_text(), field: None }),
        }
    }
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
}

/// Checks the parameters that name a persona, a room or a domain.
fn check_names(p: &AiParams) -> Result<(), BadRequest> {
    for (field, name) in [("persona", &p.persona), ("room", &p.room)] {
        if let Some(n) = name
            && !valid_name(n)
        {
            return Err(BadRequest::new(
                format!("`{field}` = {n:?} is not a {field} name (1-64 characters of a-z, 0-9, '-' or '_')"),
                Some(field),
            ));
        }
    }
    if let Some(d) = &p.domain
        && !DOMAINS.contains(&d.as_str())
    {
        return Err(BadRequest::new(
            format!("`domain` = {d:?} is not a domain (known: {})", DOMAINS.join(", ")),
            Some("domain"),
        ));
    }
    Ok(())
}

/// The query a path and its parameters ask, or what is missing or wrong.
fn ai_query(what: &str, p: AiParams) -> Result<AiQuery, BadRequest> {
    check_names(&p)?;
    let need = |v: Option<String>, name: &str| {
        v.ok_or_else(|| BadRequest::new(format!("`{what}` needs the `{name}` parameter"), Some(name)))
    };
    let limit = p.limit.unwrap_or(20).clamp(1, 1000);
    let window =
        p.since.as_deref().map(parse_window).transpose().map_err(|e| BadRequest::new(e.to_string(), Some("since")))?;
    let since_us = window.map(|w| window_start(w, now_us()));
    Ok(match what {
        "state" => AiQuery::State { persona: p.persona },
        "thoughts" => AiQuery::Thoughts { persona: need(p.persona, "persona")?, domain: p.domain, since_us },
        "decisions" => AiQuery::Decisions { persona: need(p.persona, "persona")?, verdict: p.verdict, since_us },
        "plan" => AiQuery::Plan { persona: need(p.persona, "persona")? },
        "plan-history" => AiQuery::PlanHistory { persona: need(p.persona, "persona")?, limit },
        "learnings" => AiQuery::Learnings { persona: p.persona },
        "recoveries" => AiQuery::Recoveries { persona: p.persona, limit },
        "memory" => AiQuery::Memory { persona: need(p.persona, "persona")? },
        "health" => AiQuery::Health,
        "availability" => AiQuery::Availability { persona: p.persona },
        "activity-map" => AiQuery::ActivityMap,
        "cost" => AiQuery::Cost {
            since_secs: window.unwrap_or(Duration::from_secs(3600)).as_secs(),
            buckets: match p.buckets {
                Some(b) if !(1..=MAX_COST_BUCKETS).contains(&b) => {
                    return Err(BadRequest::new(
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
                return Err(BadRequest::new(
                    format!("`priority` = {priority} is not a number in 0..=1"),
                    Some("priority"),
                ));
            }
            AiQuery::SelectForTask { domain: need(p.domain, "domain")?, priority, text: p.text.unwrap_or_default() }
        }
        other => {
            return Err(BadRequest {
                status: StatusCode::NOT_FOUND,
                message: format!("unknown query {other:?}"),
                field: None,
            });
        }
    })
}

async fn get_ai(
    State(st): State<HttpState>,
    Segments(what): Segments<String>,
    Params(p): Params<AiParams>,
) -> Response {
    ai(&st, &what, p).await
}

async fn get_ai_state(State(st): State<HttpState>, Params(p): Params<AiParams>) -> Response {
    ai(&st, "state", p).await
}

async fn ai(st: &HttpState, what: &str, p: AiParams) -> Response {
    let page_size = p.page_size;
    // The list a cursor pages through.
    let list = match (what, page_size) {
        (_, None) => None,
        ("thoughts", Some(_)) => Some("thoughts"),
        ("decisions", Some(_)) => Some("decisions"),
        (other, Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`page_size` is for thoughts and decisions, not {other:?}"),
                Some("page_size"),
            );
        }
    };
    let q = match ai_query(what, p) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let mut v = match call_t!(st.admin, AdminMsg::Ai, ADMIN_CALL_MS, q) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return inject_error(e),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    };
    let (Some(list), Some(page_size)) = (list, page_size) else {
        return (StatusCode::OK, axum::Json(v)).into_response();
    };
    let items = match v.get_mut(list).map(serde_json::Value::take) {
        Some(serde_json::Value::Array(items)) => items,
        _ => Vec::new(),
    };
    match call_t!(st.index, |reply| IndexMsg::OpenList { items, page_size, reply }, ADMIN_CALL_MS) {
        Ok(Ok(mut page)) => {
            page["persona"] = v["persona"].take();
            (StatusCode::OK, axum::Json(page)).into_response()
        }
        Ok(Err(e)) => rag_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("index unavailable: {e}"), None),
    }
}

fn rag_error(e: RagError) -> Response {
    let status = match &e {
        RagError::Invalid(_) => StatusCode::BAD_REQUEST,
        RagError::Forbidden(_) => StatusCode::FORBIDDEN,
        RagError::NotFound(_) => StatusCode::NOT_FOUND,
        RagError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string(), None)
}

async fn post_rag(
    State(st): State<HttpState>,
    Segments(command): Segments<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req = match RagRequest::parse(&command, &text) {
        Ok(r) => r,
        Err(e) => return rag_error(e),
    };
    match call_t!(st.index, IndexMsg::Request, INDEX_CALL_MS, Box::new(req)) {
        Ok(Ok(v)) => (StatusCode::OK, axum::Json(v)).into_response(),
        Ok(Err(e)) => rag_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("index unavailable: {e}"), None),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateBody {
    persona: String,
    change: StateChange,
}

async fn post_state(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let StateBody { persona, change } = match serde_json::from_str(&text) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid state change: {e}"), None),
    };
    if let StateChange::Focus { intensity, .. } = &change
        && (!intensity.is_finite() || !(0.0..=1.0).contains(intensity))
    {
        return error(StatusCode::BAD_REQUEST, format!("`intensity` = {intensity} is not in 0..=1"), Some("intensity"));
    }
    match call_t!(st.admin, |reply| AdminMsg::SetState { persona, change, reply }, ADMIN_CALL_MS) {
        Ok(Ok(())) => (StatusCode::OK, axum::Json(json!({"ok": true}))).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyBody {
    persona: String,
    #[serde(default)]
    topic: Option<String>,
}

async fn post_study(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let StudyBody { persona, topic } = match serde_json::from_str(&text) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid study request: {e}"), None),
    };
    let asked = persona.clone();
    match call_t!(st.admin, |reply| AdminMsg::Study { persona, topic, reply }, ADMIN_CALL_MS) {
        Ok(Ok(topic)) => {
            (StatusCode::OK, axum::Json(json!({"persona": asked, "topic": topic, "queued": true}))).into_response()
        }
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    persona: String,
    #[serde(default)]
    to: Option<String>,
}

/// How long a move or a drain may take: each persona stops, then its rows reach its new node.
const MOVE_CALL_MS: u64 = 120_000;

/// Moves a persona of this node, with its state, to another node (`to`, else the least loaded).
async fn post_move(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let MoveBody { persona, to } = match serde_json::from_str(&text) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid move request: {e}"), None),
    };
    match call_t!(st.admin, |reply| AdminMsg::Move { persona, to, reply }, MOVE_CALL_MS) {
        Ok(Ok(done)) => (StatusCode::OK, axum::Json(json!({ "moved": [done] }))).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    #[serde(default)]
    to: Option<String>,
}

/// Moves every persona of this node to the others, one after the other.
async fn post_drain(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let DrainBody { to } = match text.trim() {
        "" => DrainBody::default(),
        t => match serde_json::from_str(t) {
            Ok(b) => b,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid drain request: {e}"), None),
        },
    };
    match call_t!(st.admin, |reply| AdminMsg::Drain { to, reply }, MOVE_CALL_MS * 10) {
        Ok(Ok(moved)) => (StatusCode::OK, axum::Json(json!({ "moved": moved }))).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedBody {
    text: String,
    #[serde(default)]
    long: LongText,
}

async fn post_embedding(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let EmbedBody { text, long } = match serde_json::from_str(&text) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid embedding request: {e}"), None),
    };
    match call_t!(st.admin, |reply| AdminMsg::Embed { text, long, reply }, ADMIN_CALL_MS) {
        Ok(Ok(v)) => (StatusCode::OK, axum::Json(v)).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

async fn post_chat(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    match read_body(&st, &headers, body).await {
        Ok(text) => openai::chat_completions(st.llm.clone(), &text).await,
        Err(r) => r,
    }
}

async fn get_models(State(st): State<HttpState>) -> Response {
    openai::models(st.llm.clone()).await
}

/// The host of an authority (`host[:port]`), lowercase, if it is well-formed: a bracketed IPv6
/// address or a name of letters, digits, `-`, `_` and `.`, then an optional port of digits.
fn authority_host(authority: &str) -> Option<String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, _) = rest.split_once(']')?;
            inside.parse::<Ipv6Addr>().ok()?;
            authority.split_at(inside.len() + 2)
        }
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|d| d.len() <= 5 && d.bytes().all(|b| b.is_ascii_digit()));
    let name_ok =
        host.starts_with('[') || host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    (!host.is_empty() && name_ok && port_ok).then(|| host.to_ascii_lowercase())
}

/// Whether `host` (lowercase, from [`authority_host`]) is a loopback literal: `localhost`, an
/// IPv4 address in 127.0.0.0/8 or `[::1]`. A name that only starts like one is not.
fn is_loopback_literal(host: &str) -> bool {
    host == "localhost"
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .and_then(|h| h.parse::<Ipv6Addr>().ok())
            .is_some_and(|ip| ip.is_loopback())
}

/// Whether an authority names this loopback API: a loopback literal or a configured name.
fn host_allowed(authority: &str, allowed: &[String]) -> bool {
    authority_host(authority).is_some_and(|h| is_loopback_literal(&h) || allowed.contains(&h))
}

/// The authority of an `Origin` (`scheme://host[:port]`, http or https). An origin sent with
/// a path is judged by its authority alone; `null` and other schemes have none.
fn origin_authority(origin: &str) -> Option<&str> {
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"))?;
    rest.split(['/', '?', '#']).next().filter(|a| !a.is_empty())
}

/// Whether the `Host` and `Origin` headers may drive this API; the refusal otherwise. On
/// loopback `Host` must name it (a DNS-rebinding page's requests carry its own name); `Origin`,
/// when present, must name it too (on loopback) or be the `Host` (off loopback, where the token
/// guards the API). A header that is not ASCII is refused, never skipped.
fn check_host_and_origin(headers: &HeaderMap, loopback: bool, allowed: &[String]) -> Result<(), BadRequest> {
    let refuse = |message: String, field: &str| BadRequest {
        status: StatusCode::FORBIDDEN,
        message,
        field: Some(field.to_string()),
    };
    let host = match headers.get(header::HOST).map(|h| h.to_str()) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(_)) => return Err(refuse("the Host header is not ASCII".into(), "Host")),
    };
    if let Some(h) = host
        && !loopback
        && authority_host(h).is_none()
    {
        return Err(refuse(format!("Host {h:?} is not host[:port]"), "Host"));
    }
    if loopback && !host.is_some_and(|h| host_allowed(h, allowed)) {
        return Err(refuse(format!("Host {:?} is not a name of this loopback admin API", host.unwrap_or("")), "Host"));
    }
    let origin = match headers.get(header::ORIGIN).map(|h| h.to_str()) {
        None => return Ok(()),
        Some(Ok(o)) => o,
        Some(Err(_)) => return Err(refuse("the Origin header is not ASCII".into(), "Origin")),
    };
    let ok = origin_authority(origin).is_some_and(|a| {
        if loopback { host_allowed(a, allowed) } else { host.is_some_and(|h| a.eq_ignore_ascii_case(h)) }
    });
    if ok { Ok(()) } else { Err(refuse(format!("Origin {origin:?} may not drive this admin API"), "Origin")) }
}

/// DNS-rebinding and cross-site guard, then the bearer token.
async fn guard(State(st): State<HttpState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if let Err(e) = check_host_and_origin(headers, st.local.ip().is_loopback(), &st.edges.allowed_hosts) {
        return e.into_response();
    }
    let path = req.uri().path();
    // Open without the token: health, the dashboard's login and its (static) style and script.
    let open = matches!(path, "/health" | "/dashboard/login" | "/dashboard/dashboard.css" | "/dashboard/dashboard.js");
    if let Some(token) = &st.token
        && !open
        && !bearer_matches(headers, token)
        && !cookie_matches(headers, token)
    {
        if path == "/" {
            // A person at the dashboard: the form that sets the cookie.
            return (StatusCode::UNAUTHORIZED, axum::response::Html(dashboard::render_login(false))).into_response();
        }
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer ...)", None);
    }
    next.run(req).await
}

/// Compares in constant time: the SHA-256 digests of both, folded byte by byte, so neither
/// the first difference nor the token's length shows in the time taken.
fn same_token(given: &str, token: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (Sha256::digest(given.as_bytes()), Sha256::digest(token.as_bytes()));
    std::hint::black_box(a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("");
    same_token(given, token)
}

/// The dashboard's cookie, set by `POST /dashboard/login`: a browser cannot send the bearer
/// header from a page or an `EventSource`.
const TOKEN_COOKIE: &str = "mindfleet_token";

fn cookie_matches(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(header::COOKIE).iter().filter_map(|h| h.to_str().ok()).flat_map(|h| h.split(';')).any(|c| {
        c.trim().strip_prefix(TOKEN_COOKIE).and_then(|v| v.strip_prefix('=')).is_some_and(|v| same_token(v, token))
    })
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

/// The dashboard's login: the right token sets the cookie (HttpOnly, SameSite=Strict, so no
/// other site's page sends it) and goes to the page; a wrong one gets the form again.
async fn post_login(State(st): State<HttpState>, form: Result<axum::Form<Login>, FormRejection>) -> Response {
    let login = match form {
        Ok(axum::Form(l)) => l,
        Err(e) => return error(e.status(), e.body_text(), Some("token")),
    };
    let to_page = [(header::LOCATION, "/".to_string())];
    match &st.token {
        None => (StatusCode::SEE_OTHER, to_page).into_response(),
        Some(token) if !same_token(&login.token, token) => {
            (StatusCode::UNAUTHORIZED, axum::response::Html(dashboard::render_login(true))).into_response()
        }
        Some(token) => {
            let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie)], to_page).into_response()
        }
    }
}

async fn read_body(st: &HttpState, headers: &HeaderMap, body: Body) -> Result<String, Response> {
    let too_big = || {
        error(StatusCode::PAYLOAD_TOO_LARGE, format!("body is larger than the limit of {} bytes", st.max_body), None)
    };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > st.max_body) {
        return Err(too_big());
    }
    let bytes = match to_bytes(body, st.max_body).await {
        Ok(b) => b,
        Err(e) => {
            return Err(match body_error(&e) {
                BodyError::TooLarge => too_big(),
                BodyError::Malformed(why) => error(StatusCode::BAD_REQUEST, why, None),
            });
        }
    };
    String::from_utf8(bytes.to_vec()).map_err(|_| error(StatusCode::BAD_REQUEST, "body is not UTF-8", None))
}

/// Why a body could not be read.
#[derive(Debug, PartialEq)]
enum BodyError {
    /// Over the limit (413).
    TooLarge,
    /// Cut short or badly framed (400), and how.
    Malformed(String),
}

/// Tells a body over the limit (`LengthLimitError`, somewhere in the chain) from one cut short
/// (before its `Content-Length` or inside a chunk) or badly framed (a chunk size that is not hex).
fn body_error(e: &(dyn std::error::Error + 'static)) -> BodyError {
    let mut cause = Some(e);
    let mut io_kind = None;
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return BodyError::TooLarge;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind = Some((io.kind(), io.to_string()));
        }
        cause = c.source();
    }
    BodyError::Malformed(match io_kind {
        Some((std::io::ErrorKind::UnexpectedEof, _)) => {
            "body ended before its declared length (Content-Length or chunk size)".to_string()
        }
        Some((_, why)) => format!("malformed body: {why}"),
        None => format!("cannot read the body: {e}"),
    })
}

async fn post_event(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let input = match EventInput::from_json(&text) {
        Ok(i) => i,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid event JSON: {e}"), None),
    };
    let event = match input.validate() {
        Ok(e) => e,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string(), Some(e.field)),
    };
    match call_t!(st.admin, AdminMsg::Inject, ADMIN_CALL_MS, Box::new(event)) {
        Ok(Ok(ack)) => (StatusCode::OK, axum::Json(ack)).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[derive(Deserialize)]
struct DumpQuery {
    persona: Option<String>,
}

async fn dump(st: &HttpState, persona: Option<String>) -> Response {
    match call_t!(st.admin, |reply| AdminMsg::Dump { persona, depth: DumpDepth::Full, reply }, ADMIN_CALL_MS) {
        Ok(Ok(d)) => (StatusCode::OK, axum::Json(d)).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

async fn get_dump(State(st): State<HttpState>, Params(q): Params<DumpQuery>) -> Response {
    if let Some(p) = &q.persona
        && !valid_name(p)
    {
        return error(StatusCode::BAD_REQUEST, format!("`persona` = {p:?} is not a persona name"), Some("persona"));
    }
    dump(&st, q.persona).await
}

async fn get_persona(State(st): State<HttpState>, Segments(name): Segments<String>) -> Response {
    match call_t!(
        st.admin,
        |reply| AdminMsg::Dump { persona: Some(name), depth: DumpDepth::Full, reply },
        ADMIN_CALL_MS
    ) {
        Ok(Ok(mut d)) if !d.personas.is_empty() => (StatusCode::OK, axum::Json(d.personas.remove(0))).into_response(),
        Ok(Ok(_)) => error(StatusCode::NOT_FOUND, "no such persona", None),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

async fn get_page(State(st): State<HttpState>) -> Response {
    match dashboard::page(&st.admin).await {
        Ok(html) => axum::response::Html(html).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e, None),
    }
}

async fn get_panel(State(st): State<HttpState>, Segments(name): Segments<String>) -> Response {
    match dashboard::panel(&st.admin, name.clone()).await {
        Ok(Some(html)) => axum::response::Html(html).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no persona {name:?}"), None),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e, None),
    }
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
) -> Response {
    let Some(which) = dashboard::List::parse(&list) else {
        return error(StatusCode::NOT_FOUND, format!("no panel list {list:?} (known: decisions, memory)"), None);
    };
    match dashboard::list_page(&st.admin, &st.index, name.clone(), which, q.handle, q.direction).await {
        Ok(Some(html)) => axum::response::Html(html).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("no persona {name:?}, or its {list} cursor expired or was closed: reopen the panel"),
            None,
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e, None),
    }
}

async fn get_dashboard_events(State(st): State<HttpState>) -> Response {
    if !st.ready.load(Ordering::Acquire) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "restoring stored state", None);
    }
    dashboard::events(st.feed.subscribe(&st.admin, st.ready.clone())).into_response()
}

async fn get_asset(Segments(asset): Segments<String>) -> Response {
    let (body, kind) = match asset.as_str() {
        "dashboard.js" => (dashboard::SCRIPT, "text/javascript; charset=utf-8"),
        "dashboard.css" => (dashboard::STYLE, "text/css; charset=utf-8"),
        _ => return error(StatusCode::NOT_FOUND, format!("no dashboard asset {asset:?}"), None),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn health(State(st): State<HttpState>) -> Response {
    if let Some(f) = st.storage.failure() {
        return error(StatusCode::SERVICE_UNAVAILABLE, f.reason, None);
    }
    if st.ready.load(Ordering::Acquire) {
        (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "restoring stored state", None)
    }
}

#[derive(Deserialize)]
struct FaultBody {
    persona: String,
    #[serde(flatten)]
    fault: Fault,
}

async fn post_fault(State(st): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let text = match read_body(&st, &headers, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let FaultBody { persona, fault } = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid fault JSON: {e}"), None),
    };
    match call_t!(st.admin, |reply| AdminMsg::Fault { persona, fault, reply }, ADMIN_CALL_MS) {
        Ok(Ok(())) => (StatusCode::OK, axum::Json(json!({"ok": true}))).into_response(),
        Ok(Err(e)) => inject_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("admin unavailable: {e}"), None),
    }
}

#[cfg(test)]
mod tests;
