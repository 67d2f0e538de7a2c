//! Text generation as the fleet serves it: the [`worker`] actor that owns a backend and runs
//! its requests on slot threads of its own, the local model
//! ([`mindfleet_models::llm::Llm`]) or an OpenAI-compatible endpoint ([`openai`]).

pub mod openai;
pub mod worker;
