//! Shared service actors: one of each per fleet, used by every persona.
//!
//! ```text
//! FleetSupervisor
//! ├── Scheduler          grants inference and cheap slots, highest class first
//! ├── Coordinator        turn-taking: who answers an undirected human message
//! └── (later) EmbeddingWorker, Index
//! ```
//!
//! `embed` is the embedding model the EmbeddingWorker will serve (all-MiniLM-L6-v2 on candle).

pub mod coordinator;
pub mod embed;
pub mod llm;
pub mod scheduler;
