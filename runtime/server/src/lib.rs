//! The fleet's doors: the `Admin` actor (routing, injection, dumps), the HTTP API over it, the
//! dashboard, the OpenAI-compatible API over the LLM worker, introspection answers, and the node
//! agent other nodes talk to. Where they sit in the fleet's one supervision tree:
//! docs/ARCHITECTURE.md, "Supervision tree".
//!
//! Invariant: only this crate knows HTTP or HTML.

pub mod admin;
pub mod ai;
pub mod dashboard;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod node;
pub mod openai;
pub mod team;
pub mod webhook;
