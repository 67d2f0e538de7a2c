//! The fleet as an MCP server: the tools a coding agent or a desktop client calls to work with a
//! persona fleet, over the Model Context Protocol (the official SDK, `rmcp`).
//!
//! | tool | what it does | read-only |
//! |---|---|---|
//! | `inject` | one event into the fleet, as `POST /events` takes it | no |
//! | `ask` | injects an event addressed to a persona, then waits for its reply to it | no |
//! | `why` | every persona's decision on an event, and the replies to it (`ai why`) | yes |
//! | `recall` | what a persona was told about a topic (`ai recall`) | yes |
//! | `rag_search` | the codebase index's search (`rag search`) | yes |
//!
//! One implementation, [`FleetTools`], serves both doors: `/mcp` on the admin API (streamable
//! HTTP, [`crate::http`]) reaches the fleet in process, and `mindfleet mcp` (stdio) reaches a
//! running fleet through its admin API over HTTP. What differs is only the [`Fleet`] they are
//! given. Each tool's arguments are checked against its schema here ([`tools`]); what the fleet
//! refuses (an unknown persona, a bad event field, an index that is not there) comes back as a
//! result with `isError` that names it, never as a protocol error.

use std::future::Future;

use futures::stream::BoxStream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use mindfleet_core::event::EventInput;

mod ask;
mod tools;
mod words;

pub use tools::tools;

/// What a fleet refused, or why it could not be asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The admin API's answer: its status, its message, and the field it names, if any.
    #[error("{message}")]
    Refused { status: u16, message: String, field: Option<String> },
    /// The fleet could not be reached or did not answer.
    #[error("{0}")]
    Unreachable(String),
}

impl Refusal {
    /// A bad argument (400) naming `field`.
    pub fn bad(field: Option<&str>, message: impl Into<String>) -> Refusal {
        Refusal::Refused { status: 400, message: message.into(), field: field.map(str::to_string) }
    }
}

/// The replies the fleet's personas post, from when it was opened on, as `GET /outbox/stream`
/// gives them (`{"seq", "persona", "room", "in_reply_to", "text", ...}`).
pub type Replies = BoxStream<'static, Value>;

/// What the tools need of a fleet: its admin API's answers, in process or over HTTP.
pub trait Fleet: Clone + Send + Sync + 'static {
    /// `POST /events`: the acknowledgement (`{"event_id", "accepted", "duplicate"?, "personas"}`).
    fn inject(&self, event: EventInput) -> impl Future<Output = Result<Value, Refusal>> + Send;

    /// `GET /ai/{query}` with its query parameters.
    fn ai(
        &self,
        query: &'static str,
        params: Vec<(&'static str, String)>,
    ) -> impl Future<Output = Result<Value, Refusal>> + Send;

    /// `POST /rag/{command}` with its JSON body.
    fn rag(&self, command: &'static str, body: Value) -> impl Future<Output = Result<Value, Refusal>> + Send;

    /// The replies posted to `room` from now on (`GET /outbox/stream?room=...`).
    fn replies(&self, room: String) -> impl Future<Output = Result<Replies, Refusal>> + Send;
}

/// The fleet's MCP server: the tools over `fleet`, for any transport rmcp serves.
#[derive(Clone)]
pub struct FleetTools<F> {
    fleet: F,
}

impl<F: Fleet> FleetTools<F> {
    pub fn new(fleet: F) -> FleetTools<F> {
        FleetTools { fleet }
    }

    /// Runs tool `name` on `args`: its result, or an error result naming what was wrong. `None`
    /// for a tool there is not.
    pub async fn call(&self, name: &str, args: Value) -> Option<CallToolResult> {
        let done = match name {
            "inject" => self.inject(args).await,
            "ask" => self.ask(args).await,
            "why" => self.why(args).await,
            "recall" => self.recall(args).await,
            "rag_search" => self.rag_search(args).await,
            _ => return None,
        };
        Some(match done {
            Ok(Done { text, value }) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(value);
                r
            }
            Err(e) => failed(name, e),
        })
    }

    async fn inject(&self, args: Value) -> Result<Done, Refusal> {
        let input = tools::event(args)?;
        let ack = self.fleet.inject(input).await?;
        let id = ack["event_id"].as_str().unwrap_or_default();
        let text = if ack["duplicate"] == true {
            format!("event {id} was accepted before: it is not delivered again (`why` tells what became of it)")
        } else {
            let to = words::names(&ack["personas"]);
            format!("accepted event {id}, delivered to {to}; `why` with its id tells what they decided")
        };
        Ok(Done { text, value: ack })
    }

    async fn why(&self, args: Value) -> Result<Done, Refusal> {
        let tools::Why { event } = tools::args(args)?;
        let v = self.fleet.ai("why", vec![("event", event)]).await?;
        Ok(Done { text: words::why(&v), value: v })
    }

    async fn recall(&self, args: Value) -> Result<Done, Refusal> {
        let tools::Recall { persona, query, room, since, limit } = tools::args::<tools::Recall>(args)?.checked()?;
        let mut params = vec![("persona", persona), ("text", query), ("limit", limit.to_string())];
        params.extend(room.map(|r| ("room", r)));
        params.extend(since.map(|s| ("since", s)));
        let v = self.fleet.ai("recall", params).await?;
        Ok(Done { text: words::recall(&v), value: v })
    }

    async fn rag_search(&self, args: Value) -> Result<Done, Refusal> {
        let body = tools::search(args)?;
        let v = self.fleet.rag("search", body).await?;
        Ok(Done { text: words::hits(&v), value: v })
    }
}

/// A tool's answer: text for people and models, and the same as structured content.
struct Done {
    text: String,
    value: Value,
}

/// The error result of `tool`: what was wrong, with the field it names (`structuredContent`
/// `{"error", "field"?, "status"?}`).
fn failed(tool: &str, e: Refusal) -> CallToolResult {
    let (mut value, text) = match &e {
        Refusal::Refused { status, message, field: Some(field) } => (
            json!({ "error": message, "field": field, "status": status }),
            format!("{tool}: field `{field}`: {}", message.trim_start_matches(&format!("field `{field}`: "))),
        ),
        Refusal::Refused { status, message, field: None } => {
            (json!({ "error": message, "status": status }), format!("{tool}: {message}"))
        }
        Refusal::Unreachable(message) => (json!({ "error": message }), format!("{tool}: {message}")),
    };
    value["tool"] = json!(tool);
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(value);
    r
}

/// What the fleet tells a client about itself at the handshake.
const INSTRUCTIONS: &str = "A fleet of AI personas. `inject` posts an event (a message in a room) \
for them to decide on; `ask` posts one to a persona and waits for its reply; `why` explains what \
each persona decided about an event and why; `recall` searches what a persona was told; \
`rag_search` searches the codebase index the fleet keeps.";

impl<F: Fleet> ServerHandler for FleetTools<F> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mindfleet", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        match self.call(&request.name, args).await {
            Some(r) => Ok(r.into()),
            None => Err(ErrorData::invalid_params(
                format!("no tool {:?} (the fleet's: inject, ask, why, recall, rag_search)", request.name),
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests;
