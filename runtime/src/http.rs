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
//! | `POST /rag/{command}` | the codebase index ([`crate::knowledge`]): `index`, `search`, `query`, `open`, `fetch`, `close`, `create`, `ask`, each with the JSON body of its request |
//! | `POST /v1/chat/completions`, `GET /v1/models` | the fleet's LLM as an OpenAI-compatible API ([`crate::openai`]) |
//!
//! Every route answers 403 to a foreign `Host` (on a loopback address) or `Origin`, and 401
//! without the bearer token when one is configured (`/health`, the login and the page's style
//! and script excepted); the
//! dashboard's cookie counts as the token, and `/` without either answers the login form.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ractor::{ActorRef, call_t};
use serde::Deserialize;
use serde_json::json;

use crate::ai::{AiQuery, parse_window, window_start};
use crate::dashboard;
use crate::embedding::LongText;
use crate::event::EventInput;
use crate::knowledge::{IndexMsg, RagError, RagRequest};
use crate::llm::LlmMsg;
use crate::messages::{AdminMsg, DumpDepth, Fault, InjectError, StateChange};
use crate::model::Verdict;
use crate::openai;
use crate::sched::MAX_COST_BUCKETS;
use crate::time::now_us;

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
    pub storage: crate::storage::Health,
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
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
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

/// The query a path and its parameters ask, or what is missing.
fn ai_query(what: &str, p: AiParams) -> Result<AiQuery, String> {
    let need = |v: Option<String>, name: &str| v.ok_or_else(|| format!("`{what}` needs the `{name}` parameter"));
    let limit = p.limit.unwrap_or(20).clamp(1, 1000);
    let window = p.since.as_deref().map(parse_window).transpose().map_err(|e| e.to_string())?;
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
                    return Err(format!("`buckets` must be within 1..={MAX_COST_BUCKETS}, not {b}"));
                }
                b => b.unwrap_or(0),
            },
        },
        "recall" => AiQuery::Recall(crate::conversation::RecallQuery {
            persona: need(p.persona, "persona")?,
            query: need(p.text, "text")?,
            room: p.room,
            since_us,
            limit: p.limit.unwrap_or(10).clamp(1, 100),
        }),
        "select-for-task" => {
            let priority = p.priority.unwrap_or(0.5);
            if !priority.is_finite() || !(0.0..=1.0).contains(&priority) {
                return Err(format!("`priority` = {priority} is not a number in 0..=1"));
            }
            AiQuery::SelectForTask { domain: need(p.domain, "domain")?, priority, text: p.text.unwrap_or_default() }
        }
        other => return Err(format!("unknown query {other:?}")),
    })
}

async fn get_ai(State(st): State<HttpState>, Path(what): Path<String>, Query(p): Query<AiParams>) -> Response {
    ai(&st, &what, p).await
}

async fn get_ai_state(State(st): State<HttpState>, Query(p): Query<AiParams>) -> Response {
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
                None,
            );
        }
    };
    let q = match ai_query(what, p) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e, None),
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
    Path(command): Path<String>,
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

/// Serves the API until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

fn host_is_loopback(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.starts_with("127.")
}

/// DNS-rebinding and cross-site guard, then the bearer token.
async fn guard(State(st): State<HttpState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if st.local.ip().is_loopback() {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !host_is_loopback(host) {
            return error(StatusCode::FORBIDDEN, format!("Host {host:?} is not this loopback admin API"), None);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok()) {
        let ok = origin.strip_prefix("http://").is_some_and(|rest| {
            if st.local.ip().is_loopback() {
                host_is_loopback(rest)
            } else {
                rest == headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("-")
            }
        });
        if !ok {
            return error(StatusCode::FORBIDDEN, format!("Origin {origin:?} may not drive this admin API"), None);
        }
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

/// Compares in constant time in the token's length.
fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
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
async fn post_login(State(st): State<HttpState>, axum::Form(login): axum::Form<Login>) -> Response {
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
    let bytes = to_bytes(body, st.max_body).await.map_err(|_| too_big())?;
    String::from_utf8(bytes.to_vec()).map_err(|_| error(StatusCode::BAD_REQUEST, "body is not UTF-8", None))
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

async fn get_dump(State(st): State<HttpState>, Query(q): Query<DumpQuery>) -> Response {
    dump(&st, q.persona).await
}

async fn get_persona(State(st): State<HttpState>, Path(name): Path<String>) -> Response {
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

async fn get_panel(State(st): State<HttpState>, Path(name): Path<String>) -> Response {
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
    direction: crate::cursor::Direction,
}

async fn get_panel_list(
    State(st): State<HttpState>,
    Path((name, list)): Path<(String, String)>,
    Query(q): Query<ListParams>,
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

async fn get_asset(Path(asset): Path<String>) -> Response {
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
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "localhost:7878", "127.0.0.1:7878", "[::1]:7878", "127.0.0.2"] {
            assert!(host_is_loopback(h), "{h}");
        }
        for h in ["evil.example:7878", "localhost.evil.example", "10.0.0.1:7878", ""] {
            assert!(!host_is_loopback(h), "{h}");
        }
    }

    #[test]
    fn bearer_must_match_exactly() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(bearer_matches(&h, "s3cret"));
        assert!(!bearer_matches(&h, "s3cre"));
        assert!(!bearer_matches(&HeaderMap::new(), "s3cret"));
    }
}
