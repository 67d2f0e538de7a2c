//! What every crate of the fleet speaks: the fleet configuration, events, the records personas
//! keep, the messages that cross crates, the shape of a dump, and the interfaces of the shared
//! actors (scheduler, embedding worker, LLM worker, index) that other crates program against.
//!
//! Invariant: no I/O and no server, database or model library here (no axum, redb, candle,
//! tantivy, reqwest); a persona's messages are defined in a crate that builds in seconds.

pub mod adapter;
pub mod ai;
#[cfg(feature = "actors")]
pub mod cluster;
pub mod config;
pub mod conversation;
pub mod cursor;
pub mod dump;
pub mod embedding;
pub mod event;
#[cfg(feature = "actors")]
pub mod fleet;
pub mod history;
pub mod knowledge;
pub mod llm;
pub mod messages;
pub mod private;
pub mod quantile;
pub mod record;
pub mod refs;
#[cfg(feature = "actors")]
pub mod restart;
pub mod sched;
pub mod stored;
pub mod task;
pub mod team;
pub mod time;
pub mod tools;
pub mod webhook;
pub mod words;
