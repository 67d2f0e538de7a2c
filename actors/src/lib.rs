//! Shared service actors: one of each per fleet, used by every persona.
//!
//! ```text
//! FleetSupervisor
//! ├── Scheduler          grants inference and cheap slots, highest class first
//! ├── Coordinator        turn-taking: who answers an undirected human message
//! ├── EmbeddingWorker    all-MiniLM-L6-v2 (`embed`), batching every caller's texts
//! ├── [LlmWorker]        SmolLM2 or an OpenAI-compatible endpoint (`llm_worker`)
//! └── Index              the codebase knowledge (`index`): rag commands and cursors
//!       └── index thread       owns the `mindfleet_index::Index`; embeds through the worker
//! ```
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
pub mod trainer;
pub mod training_run;
