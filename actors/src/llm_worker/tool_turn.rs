//! A turn of native tool calling ([`LlmMsg::ToolTurn`]) answered by a local model, which has no
//! tool calling of its own: it chooses a tool (or none) by label choice over the tools offered,
//! then fills the chosen tool's arguments decoded to its input schema, so every call it asks for
//! validates; choosing none, it answers in text. The rounds so far (the calls asked and what
//! they returned) are told to it as lines of the conversation, the results as quoted data.
//!
//! Each part is a request of the worker's own ([`LlmMsg::Classify`], [`LlmMsg::Fill`],
//! [`LlmMsg::Generate`]), batched with the others and counted under the turn's purpose.

use std::time::Instant;

use mindfleet_core::llm::{
    ChatMessage, ClassifyJob, FillJob, GenerateJob, GenerateRequest, LlmFailure, LlmMsg, ToolCallAsked, ToolDef,
    ToolTurn, ToolTurnJob, rounds_as_text,
};
use ractor::ActorRef;

/// The label of the answer "no tool".
pub const NO_TOOL: &str = "none";

/// The model's turn for `job`, asked of `worker` (a local model's).
pub async fn local(worker: ActorRef<LlmMsg>, job: ToolTurnJob) -> Result<ToolTurn, LlmFailure> {
    let start = Instant::now();
    let conversation = rounds_as_text(&job.messages, &job.rounds);
    let mut turn = ToolTurn::default();
    let (purpose, persona) = (job.purpose.clone(), job.persona.clone());
    let tool: Option<&ToolDef> = match job.choice.as_str() {
        "none" => None,
        named if job.tools.iter().any(|t| t.name == named) => job.tools.iter().find(|t| t.name == named),
        choice => {
            let may_decline = choice != "required";
            let mut labels: Vec<String> = job.tools.iter().map(|t| t.name.clone()).collect();
            if may_decline {
                labels.push(NO_TOOL.into());
            }
            let mut messages = conversation.clone();
            messages.push(ChatMessage::user(choose_question(&job.tools, may_decline)));
            let classify = ClassifyJob { messages, labels, purpose: purpose.clone(), persona: persona.clone() };
            let c = ask(&worker, |reply| LlmMsg::Classify { job: classify, reply }).await?;
            turn.tokens_in += c.tokens_in;
            let best = c.scores.first().map_or(NO_TOOL, |s| s.label.as_str());
            job.tools.iter().find(|t| t.name == best)
        }
    };
    match tool {
        Some(tool) => {
            let mut messages = conversation;
            messages.push(ChatMessage::user(format!(
                "Write the arguments of the tool {} ({}) for this request.",
                tool.name,
                first_line(&tool.description)
            )));
            let fill = FillJob { messages, schema: tool.parameters.clone(), purpose, persona, max_tokens: 256 };
            let filled = ask(&worker, |reply| LlmMsg::Fill { job: fill, reply }).await?;
            turn.tokens_in += filled.tokens_in;
            turn.tokens_out += filled.tokens_out;
            let id = format!("call_{}_{}", job.rounds.len() + 1, tool.name.replace('.', "_"));
            turn.calls.push(ToolCallAsked { id, name: tool.name.clone(), arguments: filled.value.to_string() });
        }
        None => {
            let req = GenerateRequest::new(conversation, job.max_tokens.max(1));
            let job = GenerateJob::new(req, purpose, persona);
            let g = ask(&worker, |reply| LlmMsg::Generate { job, reply }).await?;
            turn.tokens_in += g.tokens_in;
            turn.tokens_out += g.tokens_out;
            turn.text = g.text;
        }
    }
    turn.ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(turn)
}

/// The question that chooses: the tools listed with the first line of their description,
/// answered with a tool's name (or `none`).
fn choose_question(tools: &[ToolDef], may_decline: bool) -> String {
    let listed: Vec<String> = tools.iter().map(|t| format!("- {}: {}", t.name, first_line(&t.description))).collect();
    let or_none = if may_decline {
        format!(", or {NO_TOOL} if what the tools returned above answers it or no tool helps")
    } else {
        String::new()
    };
    format!(
        "You can use these tools:\n{}\nWhich tool should be called next for this request? Answer with its name{or_none}.",
        listed.join("\n")
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

/// Asks the worker one of its own requests; a worker gone is [`LlmFailure::Stopped`].
async fn ask<T, F>(worker: &ActorRef<LlmMsg>, msg: F) -> Result<T, LlmFailure>
where
    T: Send + 'static,
    F: FnOnce(ractor::RpcReplyPort<Result<T, LlmFailure>>) -> LlmMsg,
{
    ractor::call!(worker, msg).map_err(|_| LlmFailure::Stopped)?
}
