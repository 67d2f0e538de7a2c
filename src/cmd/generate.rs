//! `mindfleet generate PROMPT`: an answer of the local LLM (SmolLM2-135M-Instruct unless
//! `--model`), or of an OpenAI-compatible endpoint (`--openai`), streamed to standard output.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mindfleet_models::llama::{ChatMessage, GenerateRequest, Sampling};

use super::{Json, fail};

#[derive(clap::Args)]
pub struct Args {
    prompt: String,
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// A system message (default: the model's own).
    #[arg(long)]
    system: Option<String>,
    /// Sample with this temperature and top-p instead of greedily.
    #[arg(long)]
    temperature: Option<f64>,
    #[arg(long, default_value_t = 0.9)]
    top_p: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A GGUF file (default: the pulled model, as Q8_0).
    #[arg(long, conflicts_with = "openai")]
    model: Option<PathBuf>,
    /// Ask an OpenAI-compatible endpoint instead (its base, `http://host:port/v1`), as the
    /// `openai` backend does.
    #[arg(long, requires = "openai_model")]
    openai: Option<String>,
    /// The model name sent to `--openai`.
    #[arg(long)]
    openai_model: Option<String>,
    /// An environment variable holding the endpoint's bearer key.
    #[arg(long, requires = "openai")]
    api_key_env: Option<String>,
    #[command(flatten)]
    out: Json,
}

pub async fn run(a: Args) -> ExitCode {
    let Args {
        prompt,
        max_tokens,
        system,
        temperature,
        top_p,
        seed,
        model,
        openai,
        openai_model,
        api_key_env,
        out: Json { json },
    } = a;
    let sampling = match temperature {
        Some(temperature) => Sampling::TopP { temperature, top_p, seed },
        None => Sampling::Greedy,
    };
    let mut messages: Vec<ChatMessage> = system.into_iter().map(ChatMessage::system).collect();
    messages.push(ChatMessage::user(prompt));
    let req = GenerateRequest { sampling, ..GenerateRequest::new(messages, max_tokens) };
    let backend = match openai {
        None => Backend::Local(model),
        Some(url) => {
            let api_key = match api_key_env.map(|v| std::env::var(&v).map_err(|_| v)).transpose() {
                Ok(k) => k,
                Err(var) => return fail(2, format!("--api-key-env: the variable {var} is not set")),
            };
            Backend::OpenAi(mindfleet_actors::llm_worker::openai::OpenAiConfig {
                url,
                model: openai_model.unwrap_or_default(),
                api_key,
                timeout: Duration::from_secs(300),
            })
        }
    };
    generate(backend, req, json).await
}

/// Where `mindfleet generate` asks: a GGUF file (default: the pulled model) or an endpoint.
enum Backend {
    Local(Option<PathBuf>),
    OpenAi(mindfleet_actors::llm_worker::openai::OpenAiConfig),
}

/// `mindfleet generate`: the answer through an LLM worker of one slot, streamed to stdout (or
/// printed as JSON at the end).
async fn generate(backend: Backend, req: GenerateRequest, json: bool) -> ExitCode {
    use mindfleet_actors::llm_worker::{BackendArgs, LlmArgs, spawn};
    use mindfleet_core::llm::{GenerateJob, LlmMsg};

    let args = match backend {
        Backend::OpenAi(config) => LlmArgs { backend: BackendArgs::OpenAi(config), slots: 1 },
        Backend::Local(model) => match tokio::task::spawn_blocking(move || mindfleet::llm_file(model)).await {
            Ok(Ok(p)) => LlmArgs::local(p, 1),
            Ok(Err(e)) => return fail(1, e),
            Err(e) => return fail(1, e),
        },
    };
    let worker = match spawn(args, None).await {
        Ok(w) => w,
        Err(e) => return fail(1, e),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        while let Some(piece) = rx.recv().await {
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
    });
    let job = GenerateJob { req, purpose: "generate".into(), persona: None, stream: (!json).then_some(tx) };
    let answer = ractor::call!(worker, |reply| LlmMsg::Generate { job, reply });
    let _ = printer.await;
    let stats = ractor::call!(worker, LlmMsg::Stats);
    worker.stop(None);
    let (g, stats) = match (answer, stats) {
        (Ok(Ok(g)), Ok(s)) => (g, s),
        (Ok(Err(e)), _) => return fail(1, e),
        (Err(e), _) | (_, Err(e)) => return fail(1, e),
    };
    let rate = |tokens: usize, ms: f64| if ms > 0.0 { tokens as f64 / (ms / 1e3) } else { 0.0 };
    let gen_tok_s = rate(g.tokens_out, g.gen_ms);
    if json {
        let mut v = serde_json::to_value(&g).unwrap_or_default();
        v["tokens"] = g.tokens_out.into();
        v["gen_tok_s"] = gen_tok_s.into();
        v["prompt_tok_s"] = rate(g.tokens_in, g.prompt_ms).into();
        v["model"] = stats.model.model.into();
        v["threads"] = stats.model.threads.into();
        println!("{v}");
    } else {
        println!();
        eprintln!(
            "mindfleet: {} tokens in, {} out ({:?}), {gen_tok_s:.1} tok/s, first token after {:.0} ms",
            g.tokens_in, g.tokens_out, g.stop, g.ttft_ms
        );
    }
    ExitCode::SUCCESS
}
