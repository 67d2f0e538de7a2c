//! The fleet's doors: the `Admin` actor (routing, injection, dumps), the HTTP API over it, the
//! dashboard, the OpenAI-compatible API over the LLM worker, introspection answers, and the node
//! agent other nodes talk to. The fleet's supervision tree:
//!
//! ```text
//! FleetSupervisor                      (crate `mindfleet`)
//! ├── Admin                            (this crate: routing, injection, dumps)
//! │     └── HTTP API (axum)            handlers call the Admin (`/v1`: the LlmWorker)
//! │           └── [dashboard feed]     one dump a second while a page listens (`dashboard`)
//! ├── [NodeAgent]                      (this crate, `node`: what other nodes talk to)
//! ├── Scheduler                        (crate `mindfleet-actors`; interface in `mindfleet_core::sched`)
//! ├── EmbeddingWorker                  (crate `mindfleet-actors`; interface in `mindfleet_core::embedding`)
//! ├── [LlmWorker]                      (crate `mindfleet-actors`; interface in `mindfleet_core::llm`)
//! ├── Index                            (crate `mindfleet-actors`; interface in `mindfleet_core::knowledge`)
//! └── Persona(name) x N                (crate `mindfleet-personas`)
//!     ├── Inbox
//!     ├── SelfState
//!     └── WorkingMemory
//!
//! storage-writer thread                (crate `mindfleet-store`: group commit into redb)
//! ```
//!
//! Invariant: only this crate knows HTTP or HTML.

pub mod admin;
pub mod ai;
pub mod dashboard;
pub mod http;
pub mod metrics;
pub mod node;
pub mod openai;
pub mod team;
pub mod webhook;
