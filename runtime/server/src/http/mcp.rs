//! `/mcp`: the fleet's MCP tools ([`crate::mcp`]) over streamable HTTP, served by rmcp beside
//! the other routes. The tools reach the fleet in process ([`Local`]) through the same calls
//! and checks as the routes they stand for (`POST /events`, `GET /ai/why`, `GET /ai/recall`,
//! `POST /rag/search`, `GET /outbox/stream`).
//!
//! The API's guard runs first (`Host`/`Origin`, then the token), so rmcp's own `Host` check is
//! off; every request to `/mcp` holds a stream slot while its response is open (`streams`). A
//! client of the 2026-07-28 revision is served statelessly; an older one gets a session
//! (`Mcp-Session-Id`), kept in memory, that ends with the fleet.

use std::sync::Arc;

use futures::StreamExt;
use ractor::call_t;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;

use mindfleet_core::event::EventInput;
use mindfleet_core::knowledge::{IndexMsg, RagRequest};
use mindfleet_core::messages::AdminMsg;
use mindfleet_core::webhook::reply_json;

use super::extract::{ApiError, answer, parse_query};
use super::{ADMIN_CALL_MS, AiParams, HttpState, INDEX_CALL_MS, outbox};
use crate::mcp::{Fleet, FleetTools, Refusal, Replies};

/// The `/mcp` service: one [`FleetTools`] per session or stateless request, over `st`.
pub(super) fn service(st: HttpState) -> StreamableHttpService<FleetTools<Local>, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        // `guard` checked `Host` and `Origin` already, against `[admin] allowed_hosts`.
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(st.max_body);
    let local = Local(st);
    StreamableHttpService::new(
        move || Ok(FleetTools::new(local.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The fleet in this process, as the admin API's handlers reach it.
#[derive(Clone)]
pub struct Local(HttpState);

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal::Refused { status: e.status.as_u16(), message: e.message, field: e.field }
    }
}

impl Fleet for Local {
    async fn inject(&self, event: EventInput) -> Result<Value, Refusal> {
        let event = event.validate().map_err(|e| Refusal::bad(Some(e.field), e.to_string()))?;
        let ack = answer("admin", call_t!(self.0.admin, AdminMsg::Inject, ADMIN_CALL_MS, Box::new(event)))?;
        Ok(serde_json::to_value(ack).unwrap_or_default())
    }

    async fn ai(&self, query: &'static str, params: Vec<(&'static str, String)>) -> Result<Value, Refusal> {
        // As the route reads its query string, so the same parameters are refused the same way.
        let qs = serde_urlencoded::to_string(&params).map_err(|e| Refusal::bad(None, e.to_string()))?;
        let p: AiParams = parse_query(&qs)?;
        Ok(super::ai(&self.0, query, p).await?.0)
    }

    async fn rag(&self, command: &'static str, body: Value) -> Result<Value, Refusal> {
        let req = RagRequest::parse(command, &body.to_string()).map_err(ApiError::from)?;
        Ok(answer("index", call_t!(self.0.index, IndexMsg::Request, INDEX_CALL_MS, Box::new(req)))?)
    }

    async fn replies(&self, room: String) -> Result<Replies, Refusal> {
        let after = outbox::last(&self.0).await?;
        Ok(outbox::follow(self.0.clone(), outbox::Page::room(room), after).map(|(seq, o)| reply_json(seq, &o)).boxed())
    }
}
