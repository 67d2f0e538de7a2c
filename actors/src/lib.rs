//! Shared service actors: one of each per fleet, used by every persona.
//!
//! ```text
//! FleetSupervisor
//! ├── Scheduler          grants inference and cheap slots, highest class first
//! ├── Coordinator        turn-taking: who answers an undirected human message
//! └── (later) EmbeddingWorker, Index
//! ```

pub mod coordinator;
pub mod scheduler;
