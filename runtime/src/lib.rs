//! The mindfleet runtime: what every other crate builds on.
//!
//! Messages that cross crates, the fleet configuration, events, the durable store and
//! its writer thread, the scheduler's submit / grant / done interface, and the `Admin`
//! actor with its HTTP API. The fleet's supervision tree:
//!
//! ```text
//! FleetSupervisor                      (crate `mindfleet`)
//! ├── Admin                            (this crate: routing, injection, dumps)
//! │     └── HTTP API (axum)            handlers call the Admin (`/v1`: the LlmWorker)
//! │           └── [dashboard feed]     one dump a second while a page listens (`dashboard`)
//! ├── Scheduler                        (crate `mindfleet-actors`; interface in `sched`)
//! ├── EmbeddingWorker                  (crate `mindfleet-actors`; interface in `embedding`)
//! ├── [LlmWorker]                      (crate `mindfleet-actors`; interface in `llm`)
//! ├── Index                            (crate `mindfleet-actors`; interface in `knowledge`)
//! └── Persona(name) x N                (crate `mindfleet-personas`)
//!     ├── Inbox
//!     ├── SelfState
//!     └── WorkingMemory
//!
//! storage-writer thread                (this crate: group commit into redb)
//! ```

pub mod admin;
pub mod ai;
pub mod cluster;
pub mod config;
pub mod conversation;
pub mod cursor;
pub mod dashboard;
pub mod dump;
pub mod embedding;
pub mod event;
pub mod http;
pub mod knowledge;
pub mod llm;
pub mod messages;
pub mod model;
pub mod openai;
pub mod private;
pub mod refs;
pub mod restart;
pub mod sched;
pub mod storage;
pub mod team;
pub mod time;
