//! Shared service actors, one of each per fleet, used by every persona: the `Scheduler`, the
//! `Coordinator`, the `EmbeddingWorker`, the `LlmWorker`, the `Index` (the codebase's, and a
//! second one of conversation memory) and the `Trainer`. Where they sit in the fleet's one
//! supervision tree: docs/ARCHITECTURE.md, "Supervision tree".
//!
//! The workers own threads that run the models of `mindfleet-models` (forward passes, kernels,
//! fetcher); what runs there knows no actor, and what they send back is private to the worker
//! (`EmbedMsg::Own`, `LlmMsg::Own`).

pub mod coordinator;
pub mod embed;
pub mod index;
pub mod llm_worker;
pub mod scheduler;
#[cfg(test)]
mod testing;
pub mod tools;
pub mod trainer;
pub mod training_run;
