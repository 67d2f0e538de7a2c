//! Model calls a persona makes off its loop (study, consolidation).

use mindfleet_core::llm::{GenerateJob, GenerateRequest, LlmFailure, LlmMsg};
use ractor::ActorRef;

/// The model's answer to `req` and the tokens it read and wrote. Streamed, so that dropping
/// this future (the work stopped) stops the generation too.
pub async fn generate(
    llm: &ActorRef<LlmMsg>,
    persona: &str,
    purpose: &str,
    req: GenerateRequest,
) -> Result<(String, u32), LlmFailure> {
    let (tx, _pieces) = tokio::sync::mpsc::unbounded_channel();
    let job = GenerateJob { req, purpose: purpose.into(), persona: Some(persona.to_string()), stream: Some(tx) };
    let g = ractor::call!(llm, |reply| LlmMsg::Generate { job, reply })
        .unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())))?;
    Ok((g.text, (g.tokens_in + g.tokens_out) as u32))
}
