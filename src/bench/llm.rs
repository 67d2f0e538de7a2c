//! `mindfleet bench llm`: SmolLM2-135M-Instruct on candle (the file the fleet runs: the Q8_0
//! rewrite of the packaged Q4_1) against llama.cpp (`llama-cpp-python`, `scripts/bench_llm_peer.py`)
//! on the same file, the same prompt tokens and the same number of generated tokens, in one run;
//! and what single forward passes of ours cost (`pass_ms`, see [`passes`]).

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use mindfleet_models::llama::batch::{BatchConfig, Engine, STEP_TOKENS, Work};
use mindfleet_models::llama::{ChatMessage, GenerateRequest, Llm, LlmConfig};
use serde_json::{Value, json};

use super::{median, round};

const PEER_SCRIPT: &str = include_str!("../../scripts/bench_llm_peer.py");
/// Rounds of the comparison (see [`llm`]).
const RUNS: usize = 5;
const MAX_TOKENS: usize = 128;

fn request() -> GenerateRequest {
    let messages = vec![
        ChatMessage::system("You are a patient storyteller who writes long, vivid stories."),
        ChatMessage::user(
            "Write a long story about a lighthouse keeper who records the weather, the ships that pass and the \
             birds that rest on the gallery rail, and who one winter night sees a light out at sea where no \
             ship should be. Describe the tower, the storm, the sea and what he finds when the morning comes.",
        ),
    ];
    GenerateRequest::new(messages, MAX_TOKENS)
}

fn peer(python: &str, model: &Path, threads: usize, prompt: &[u32], gen_tokens: usize) -> Result<Value, String> {
    let input =
        json!({ "model": model, "threads": threads, "prompt_ids": prompt, "gen_tokens": gen_tokens, "runs": 1 });
    super::run_peer(python, PEER_SCRIPT, &input, "llama-cpp-python")
}

/// The figures of one generation, as the peer reports them.
fn figures(prompt_tok_s: f64, gen_tok_s: f64, ttft_ms: f64) -> [(&'static str, f64); 3] {
    [("prompt_tok_s", prompt_tok_s), ("gen_tok_s", gen_tok_s), ("ttft_ms", ttft_ms)]
}

/// Our model and, with `peer_python`, llama.cpp take turns for [`RUNS`] rounds, so both meet the
/// same state of a shared machine: each figure is the median over rounds, and each ratio the
/// median of the rounds' ratios. llama.cpp runs `peer_model`, else the same file as ours.
pub fn llm(model: &Path, peer_python: Option<&str>, peer_model: Option<&Path>) -> anyhow::Result<Value> {
    let peer_model = peer_model.unwrap_or(model);
    anyhow::ensure!(peer_model.is_file(), "--peer-model {}: no such file", peer_model.display());
    let t = Instant::now();
    let llm = Llm::load_with(model, LlmConfig::default())?;
    let load_s = t.elapsed().as_secs_f64();
    let threads = llm.threads();
    let req = request();
    let prompt = llm.prompt(&req.messages, req.max_tokens)?.ids;
    let (mut ours, mut theirs, mut peer_error, mut tokens_out) = (vec![], vec![], None, 0);
    // One untimed run first, as the peer does.
    llm.generate(&req, |_| ControlFlow::Continue(()))?;
    for _ in 0..RUNS {
        let g = llm.generate(&req, |_| ControlFlow::Continue(()))?;
        anyhow::ensure!(g.tokens_in == prompt.len(), "prompt of {} tokens, expected {}", g.tokens_in, prompt.len());
        tokens_out = g.tokens_out;
        ours.push(figures(g.tokens_in as f64 / (g.prompt_ms / 1e3), g.tokens_out as f64 / (g.gen_ms / 1e3), g.ttft_ms));
        if let Some(python) = peer_python.filter(|_| peer_error.is_none()) {
            match peer(python, peer_model, threads, &prompt, tokens_out) {
                Ok(p) => theirs.push(p),
                Err(e) => peer_error = Some(e),
            }
        }
    }
    let median_of = |rounds: &[[(&str, f64); 3]], i: usize| median(rounds.iter().map(|r| r[i].1).collect());
    let info = mindfleet_models::llama::inspect(model)?;
    let mut out = json!({
        "bench": "llm",
        "model": model.file_name().map(|n| n.to_string_lossy().into_owned()),
        "file_type": info.file_type,
        "kernel": Llm::kernel(),
        "runs_on": llm.path(),
        "threads": threads,
        "rounds": RUNS,
        "load_s": round(load_s, 3),
        "prompt_tokens": prompt.len(),
        "gen_tokens": tokens_out,
        "rss_mb": round(super::rss_kib() as f64 / 1024.0, 1),
    });
    for (i, (key, _)) in ours[0].iter().enumerate() {
        out[*key] = round(median_of(&ours, i), 1).into();
    }
    // The batch's passes: a path that takes one request at a time has none to time.
    out["pass_ms"] = if llm.batches() { passes(&llm)? } else { Value::Null };
    drop(llm);
    if let Some(e) = peer_error {
        out["peer_error"] = e.into();
    } else if let Some(python) = peer_python {
        let peer_rounds: Vec<[(&str, f64); 3]> = theirs
            .iter()
            .map(|p| {
                figures(
                    p["prompt_tok_s"].as_f64().unwrap_or(f64::NAN),
                    p["gen_tok_s"].as_f64().unwrap_or(f64::NAN),
                    p["ttft_ms"].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect();
        let mut peer_out = json!({
            "llama_cpp": theirs[0]["llama_cpp"],
            "model": peer_model.file_name().map(|n| n.to_string_lossy().into_owned()),
            "load_s": round(median(theirs.iter().filter_map(|p| p["load_s"].as_f64()).collect()), 3),
            "prompt_tokens": prompt.len(),
            "gen_tokens": tokens_out,
        });
        for (i, (key, _)) in ours[0].iter().enumerate() {
            peer_out[*key] = round(median_of(&peer_rounds, i), 1).into();
            // Speeds: above 1 we are faster. Times to first token: above 1 ours comes sooner.
            let ratios =
                ours.iter().zip(&peer_rounds).map(|(o, p)| if i == 2 { p[i].1 / o[i].1 } else { o[i].1 / p[i].1 });
            let name = if i == 2 { "ratio_ttft".to_string() } else { format!("ratio_{key}") };
            out[name] = round(median(ratios.collect()), 2).into();
        }
        out["peer"] = peer_out;
        match over_http(python, peer_model, threads, &req) {
            Ok(v) => {
                if let (Some(http), Some(direct)) = (v["gen_tok_s"].as_f64(), out["peer"]["gen_tok_s"].as_f64()) {
                    out["ratio_openai_gen_vs_direct"] = round(http / direct, 2).into();
                }
                out["openai"] = v;
            }
            Err(e) => out["openai_error"] = e.to_string().into(),
        }
    }
    Ok(out)
}

/// Timed passes of [`passes`]: the best of this many.
const PASS_RUNS: usize = 5;

/// A request whose prompt is a few hundred tokens (as a reply's in `bench cognition`), with
/// `tail` added to its question, and whose answer is long.
fn long_request(tail: &str, max_tokens: usize) -> GenerateRequest {
    let mut req = request();
    let story = req.messages[1].content.clone();
    req.messages[0].content = format!("{}\nWhat you know:\n- {story}\n- {story}", req.messages[0].content);
    req.messages[1].content.push_str(tail);
    req.max_tokens = max_tokens;
    req
}

/// One engine pass, timed; it must finish nobody (`active` still in the batch after it).
fn timed_step(engine: &mut Engine<'_, usize>, active: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    let done = engine.step();
    let s = t.elapsed().as_secs_f64();
    anyhow::ensure!(done.is_empty() && engine.stats().active == active, "a request ended during the timed passes");
    Ok(s)
}

/// What single forward passes cost, each the best of [`PASS_RUNS`]: `rows_K`, a pass that
/// generates the next token of `K` requests at once (each with its own cache of the
/// `context_tokens` of its prompt: a batched generation step), and `prompt_piece`, a pass that
/// reads the new tokens of a prompt whose beginning was kept (`prompt_piece_tokens` of them).
/// One row alone is about the reading of the weights; what more rows add is their own
/// products and keys and values.
fn passes(llm: &Llm) -> anyhow::Result<Value> {
    let refused = |e: Box<(usize, _)>| anyhow::anyhow!("a timed request was refused: {:?}", e.1);
    let req = long_request("", MAX_TOKENS);
    let mut out = json!({ "context_tokens": llm.prompt(&req.messages, req.max_tokens)?.ids.len() });
    for k in [1, 4, 8, 12] {
        // Every prompt read in the first pass.
        let config = BatchConfig { max_batch: k, kv_bytes: usize::MAX, prefix_reuse: false, step_tokens: usize::MAX };
        let mut engine = llm.engine::<usize>(config);
        for i in 0..k {
            let work = Work::Generate(long_request("", MAX_TOKENS));
            engine.admit(engine.prepare(work, i, Box::new(|_| ControlFlow::Continue(()))).map_err(refused)?);
        }
        // The first pass reads the prompts; each after it generates a token of every request.
        engine.step();
        let best = (0..PASS_RUNS).map(|_| timed_step(&mut engine, k)).collect::<anyhow::Result<Vec<_>>>()?;
        out[format!("rows_{k}")] = round(best.into_iter().fold(f64::MAX, f64::min) * 1e3, 2).into();
    }
    let config = BatchConfig { max_batch: 1, kv_bytes: usize::MAX, prefix_reuse: true, step_tokens: STEP_TOKENS };
    let mut engine = llm.engine::<usize>(config);
    // A request of two tokens whose question ends with `tail`: its first pass timed, and the
    // prompt tokens it read new.
    let mut run = |tail: &str| -> anyhow::Result<(f64, u64)> {
        let work = Work::Generate(long_request(tail, 2));
        let before = engine.stats();
        engine.admit(engine.prepare(work, 0, Box::new(|_| ControlFlow::Continue(()))).map_err(refused)?);
        let after = engine.stats();
        let new = (after.prompt_tokens - before.prompt_tokens) - (after.reused_tokens - before.reused_tokens);
        let s = timed_step(&mut engine, 1)?;
        while !engine.is_empty() {
            engine.step();
        }
        Ok((s, new))
    };
    // Kept: the prompt the timed ones begin with.
    run("")?;
    let mut best = (f64::MAX, 0);
    for i in 0..PASS_RUNS {
        let (s, new) = run(&format!(" Number {i}: begin with the weather, then the ships, then the birds."))?;
        best = if s < best.0 { (s, new) } else { best };
    }
    out["prompt_piece"] = round(best.0 * 1e3, 2).into();
    out["prompt_piece_tokens"] = best.1.into();
    Ok(out)
}

/// The `openai` backend against llama.cpp's own OpenAI-compatible server (`llama_cpp.server`)
/// on the same file and threads: generation speed and time to first token as the backend
/// accounts them, over loopback HTTP.
fn over_http(python: &str, model: &Path, threads: usize, req: &GenerateRequest) -> anyhow::Result<Value> {
    use mindfleet_actors::llm_worker::openai::{OpenAi, OpenAiConfig};

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = std::process::Command::new(python)
        .args(["-m", "llama_cpp.server", "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--n_ctx", "2048", "--n_threads", &threads.to_string(), "--n_threads_batch", &threads.to_string()])
        .arg("--model")
        .arg(model)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let result = (|| {
        let url = format!("http://127.0.0.1:{port}/v1");
        let deadline = Instant::now() + std::time::Duration::from_secs(120);
        while reqwest::blocking::get(format!("{url}/models")).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "llama_cpp.server did not answer on {url} within 120 s");
            if let Some(status) = server.try_wait()? {
                anyhow::bail!("llama_cpp.server exited ({status}): is llama-cpp-python[server] installed?");
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let client = OpenAi::new(OpenAiConfig {
            url,
            model: "smollm2".into(),
            api_key: None,
            timeout: std::time::Duration::from_secs(300),
        })?;
        let (mut gen_tok_s, mut ttft_ms, mut tokens_out) = (vec![], vec![], 0);
        for run in 0..RUNS {
            // A different first line each run: the server reuses the cache of a repeated
            // prompt, which would hide the prompt's reading from the time to first token.
            let mut req = req.clone();
            req.messages[0].content = format!("Run {run}. {}", req.messages[0].content);
            let g = client.generate(&req, &mut |_| ControlFlow::Continue(()))?;
            gen_tok_s.push(g.tokens_out as f64 / (g.gen_ms / 1e3));
            ttft_ms.push(g.ttft_ms);
            tokens_out = g.tokens_out;
        }
        Ok(json!({
            "server": "llama_cpp.server",
            "gen_tokens": tokens_out,
            "gen_tok_s": round(median(gen_tok_s), 1),
            "ttft_ms": round(median(ttft_ms), 1),
        }))
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// Coverage (share of cases the model decides) and agreement (share of those it gets right)
/// of the gate's reading of `margins` with `bias` and `clear`.
fn gate_figures(margins: &[(f32, bool)], bias: f32, clear: f32) -> (f64, f64) {
    let decided: Vec<bool> = margins
        .iter()
        .filter(|(m, _)| (m - bias).abs() > clear)
        .map(|(m, engage)| (*m - bias > 0.0) == *engage)
        .collect();
    let coverage = decided.len() as f64 / margins.len() as f64;
    let agreement =
        if decided.is_empty() { 0.0 } else { decided.iter().filter(|ok| **ok).count() as f64 / decided.len() as f64 };
    (coverage, agreement)
}

/// `mindfleet bench gate-model`: the gate's model question on the labelled cases of
/// `GATE_CASES`: the label margins, the calibration that decides the most cases (at least four)
/// with at least 90% agreement, and what the calibration in the code gives.
pub fn gate_model(model: &Path) -> anyhow::Result<Value> {
    use mindfleet_personas::brain::{
        GATE_CALIBRATION, GATE_CASES, GATE_LABELS, GateCalibration, gate_margin, gate_question,
    };
    let llm = Llm::load_with(model, LlmConfig::default())?;
    let raw = GateCalibration { bias: 0.0, clear: 0.0 };
    let t = Instant::now();
    let margins: Vec<(f32, bool)> = GATE_CASES
        .iter()
        .map(|(text, engage)| {
            let c = llm.classify(&gate_question("helper", "assistant", text), &GATE_LABELS)?;
            Ok((gate_margin(&c.scores, raw).expect("both labels scored"), *engage))
        })
        .collect::<anyhow::Result<_>>()?;
    let per_case_ms = t.elapsed().as_secs_f64() * 1e3 / GATE_CASES.len() as f64;
    let mean = |engage: bool| {
        let m: Vec<f32> = margins.iter().filter(|c| c.1 == engage).map(|c| c.0).collect();
        m.iter().sum::<f32>() as f64 / m.len().max(1) as f64
    };
    // Every bias between two observed margins, every clear band in steps of 0.25.
    let mut best = (0.0, 0.0, 0.0f32, 0.0f32);
    let mut sorted: Vec<f32> = margins.iter().map(|c| c.0).collect();
    sorted.sort_by(f32::total_cmp);
    for w in sorted.windows(2) {
        let bias = (w[0] + w[1]) / 2.0;
        for k in 0..=16 {
            let clear = k as f32 * 0.25;
            let (coverage, agreement) = gate_figures(&margins, bias, clear);
            // At least four cases decided: fewer is noise, not a calibration.
            if agreement >= 0.9 && coverage * margins.len() as f64 >= 4.0 && coverage > best.0 {
                best = (coverage, agreement, bias, clear);
            }
        }
    }
    let (coverage, agreement) = gate_figures(&margins, GATE_CALIBRATION.bias, GATE_CALIBRATION.clear);
    let plans = plan_choice(&llm)?;
    Ok(json!({
        "plan": plans,
        "bench": "gate-model",
        "cases": GATE_CASES.len(),
        "per_case_ms": round(per_case_ms, 1),
        "margin_mean_engage": round(mean(true), 3),
        "margin_mean_ignore": round(mean(false), 3),
        "margins": margins.iter().map(|(m, e)| json!([round(*m as f64, 3), e])).collect::<Vec<_>>(),
        "best_bias": round(best.2 as f64, 3),
        "best_clear": best.3,
        "best_coverage": round(best.0, 3),
        "best_agreement": round(best.1, 3),
        "calibration_bias": GATE_CALIBRATION.bias,
        "calibration_clear": GATE_CALIBRATION.clear,
        "coverage": round(coverage, 3),
        "agreement": round(agreement, 3),
    }))
}

/// The plan choice on the labelled cases of `PLAN_CASES`, as the local brain makes it (the
/// question in each order of `PlanChoice::orders`): how often the model's first answer is the
/// first option listed and the plan that fits, and the share of cases the model decides (its pick
/// the same in every order, beyond `PLAN_CLEAR`) with its agreement on them.
fn plan_choice(llm: &Llm) -> anyhow::Result<Value> {
    use mindfleet_core::event::EventInput;
    use mindfleet_personas::brain::{Brain, LocalBrain, PLAN_CASES, PLAN_CLEAR, PlanContext, PlanKind};

    let (mut first_listed, mut right, mut decided, mut agreed) = (0, 0, 0, 0);
    let mut asked = 0;
    for (domain, text, want) in PLAN_CASES {
        let event = EventInput {
            domain: domain.to_string(),
            room: "general".into(),
            from: "alice".into(),
            text: text.to_string(),
            ..Default::default()
        }
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ctx = PlanContext {
            persona: "helper",
            role: "assistant",
            event: &event,
            avoid: &[],
            learnings: &[],
            attempt: 0,
            references: false,
            memory: &mindfleet_personas::brain::NOTHING_RECALLED,
            procedures: &[],
        };
        let choice = LocalBrain.plan_request(&ctx).expect("the local brain asks");
        let mut answers = Vec::new();
        for (k, (_, job)) in choice.orders.iter().enumerate() {
            let labels: Vec<&str> = job.labels.iter().map(String::as_str).collect();
            let scores = llm.classify(&job.messages, &labels)?.scores;
            let at = labels.iter().position(|l| *l == scores[0].label).expect("a label");
            asked += 1;
            first_listed += usize::from(at == 0);
            right += usize::from(PlanKind::of(&choice.listed(k)[at]) == *want);
            answers.push(scores);
        }
        let (plan, note) = choice.choose(&answers);
        if note.starts_with("plan chosen by the model") {
            decided += 1;
            agreed += usize::from(PlanKind::of(&plan) == *want);
        }
    }
    let n = PLAN_CASES.len() as f64;
    Ok(json!({
        "cases": PLAN_CASES.len(),
        "questions": asked,
        "first_listed_share": round(first_listed as f64 / asked as f64, 3),
        "right_share": round(right as f64 / asked as f64, 3),
        "clear": PLAN_CLEAR,
        "coverage": round(decided as f64 / n, 3),
        "agreement": (decided > 0).then(|| round(agreed as f64 / decided as f64, 3)),
    }))
}
