//! Shared service actors: one of each per fleet, used by every persona.
//!
//! ```text
//! FleetSupervisor
//! ├── Scheduler          grants inference and cheap slots, highest class first
//! └── (later) EmbeddingWorker, Index
//! ```

pub mod scheduler;
