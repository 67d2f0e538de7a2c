//! Personas: the persona actor, its three children, and the cognition they run.
//!
//! ```text
//! Persona(name)                  gate inline; work after the gate goes to the Scheduler
//! ├── Inbox                      bounded priority queue, restored from storage
//! ├── SelfState                  focus, load, capacity, mood, energy; pushes snapshots up
//! └── WorkingMemory              thoughts per domain, retention-score eviction
//! ```
//!
//! The decision logic is plain data and functions in `mindfleet-cognition` ([`gate`], [`brain`],
//! [`memory`], [`mind`], [`reply`], and the lifecycle of an event the persona's actor drives),
//! re-exported here, so it is tested and benchmarked without actors; the actors own state and
//! persist it.

pub mod consolidate;
pub mod conversation;
pub mod enrich;
pub mod faults;
pub mod inbox;
mod llm;
pub mod observe;
pub mod persona;
pub mod redundancy;
pub mod references;
pub mod self_state;
pub mod study;
pub mod working_memory;

pub use mindfleet_cognition::{brain, gate, memory, mind, reply};

pub use faults::FaultBook;
pub use persona::{ConversationArgs, Persona, PersonaArgs};
