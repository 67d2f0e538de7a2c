//! The fleet's LLM as an OpenAI-compatible API, and the `openai` backend that uses such an API:
//! both over real HTTP on loopback, against the real model.

use std::time::Duration;

use mindfleet_actors::llm_worker::openai::OpenAiConfig;
use mindfleet_actors::llm_worker::{BackendArgs, LlmArgs, spawn};
use mindfleet_core::llm::{ClassifyJob, GenerateJob, LlmFailure, LlmMsg};
use mindfleet_models::llama::ChatMessage;
use ractor::call;
use serde_json::{Value, json};

use super::{capital_of_france, generate, llm, local_config};
use crate::util::{config, dump, fleet_toml};

async fn serving_fleet(dir: &std::path::Path) -> mindfleet::Fleet {
    mindfleet::Fleet::start(local_config(dir)).await.unwrap()
}

fn backend(fleet: &mindfleet::Fleet) -> LlmArgs {
    let config = OpenAiConfig {
        url: format!("http://{}/v1", fleet.addr),
        model: "smollm2".into(),
        api_key: None,
        timeout: Duration::from_secs(120),
    };
    LlmArgs { backend: BackendArgs::OpenAi(config), slots: 1 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_serves_its_llm_as_an_openai_chat_api_streamed_or_not() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = serving_fleet(tmp.path()).await;
    let url = format!("http://{}/v1/chat/completions", fleet.addr);
    let http = reqwest::Client::new();
    let req = capital_of_france(12);
    let local = generate(&req);
    let body = json!({ "messages": req.messages, "max_tokens": 12, "logprobs": true, "top_logprobs": 3 });

    let v: Value = http.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], local.text.as_str(), "greedy, as in process: {v}");
    assert_eq!(v["usage"]["prompt_tokens"], local.tokens_in as u64);
    assert_eq!(v["usage"]["completion_tokens"], local.tokens_out as u64);
    let tokens = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(tokens.len(), local.tokens_out, "{v}");
    // Greedy: each token is the most likely at its place.
    assert!(
        tokens
            .iter()
            .all(|t| t["top_logprobs"].as_array().unwrap().len() == 3 && t["top_logprobs"][0]["token"] == t["token"]),
        "{v}"
    );

    let mut stream = body.clone();
    stream["stream"] = json!(true);
    stream["stream_options"] = json!({ "include_usage": true });
    let r = http.post(&url).json(&stream).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let joined: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(joined, local.text);
    let finish = v["choices"][0]["finish_reason"].clone();
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == finish), "{finish}: {text}");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], local.tokens_out as u64, "{text}");

    // A bad request names what is wrong, in OpenAI's error shape.
    let r = http.post(&url).json(&json!({ "messages": req.messages, "top_logprobs": 3 })).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("`top_logprobs` needs `logprobs`"), "{e}");

    let models: Value =
        http.get(format!("http://{}/v1/models", fleet.addr)).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q8_0.gguf", "{models}");
    let api = &dump(&fleet).await.llm.by_purpose["api"];
    assert_eq!((api.calls, api.tokens_out), (2, 2 * local.tokens_out as u64), "{api:?}");
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_s_api_answers_tools_with_calls_that_fit_their_schema_and_json_schema_with_a_value_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = serving_fleet(tmp.path()).await;
    let url = format!("http://{}/v1/chat/completions", fleet.addr);
    let http = reqwest::Client::new();
    let post = |body: Value| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let r = http.post(&url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let weather = json!({ "type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city now",
        "parameters": { "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] } } });
    let question = json!({ "role": "user", "content": "What is the weather in Paris now?" });

    // A tool required: a call of it, its arguments of its schema.
    let (status, v) = post(json!({ "messages": [question], "tools": [weather], "tool_choice": "required" })).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!((&call["type"], &call["function"]["name"]), (&json!("function"), &json!("get_weather")), "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");

    // Its result in the conversation, the model's turn again: calls or text, either well formed.
    let id = call["id"].clone();
    let messages =
        json!([question, choice["message"], { "role": "tool", "tool_call_id": id, "content": "Sunny, 21 C" }]);
    let (status, v) = post(json!({ "messages": messages, "tools": [weather] })).await;
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert!(message["content"].is_string() || message["tool_calls"][0]["function"]["name"] == "get_weather", "{v}");
    // `tool_choice: none`: a text answer.
    let (_, v) =
        post(json!({ "messages": messages, "tools": [weather], "tool_choice": "none", "max_tokens": 8 })).await;
    assert!(
        v["choices"][0]["message"]["content"].is_string() && v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );

    // Structured output: a value of the schema.
    let format = json!({ "type": "json_schema", "json_schema": { "name": "city", "schema": {
        "type": "object", "properties": { "city": { "type": "string" }, "sunny": { "type": "boolean" } },
        "required": ["city", "sunny"] } } });
    let (status, v) = post(json!({ "messages": [question], "response_format": format })).await;
    assert_eq!(status, 200, "{v}");
    let value: Value = serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(value["city"].is_string() && value["sunny"].is_boolean(), "{value}");

    // What is wrong with a request is named.
    let stray = json!([question, { "role": "tool", "tool_call_id": "x", "content": "?" }]);
    for (body, says) in [
        (json!({ "messages": stray, "tools": [weather] }), "`messages[1]`: a tool message answering no call"),
        (
            json!({ "messages": [question], "tools": [weather], "tool_choice": { "type": "function", "function": { "name": "nope" } } }),
            "names \"nope\"",
        ),
        (json!({ "messages": [question], "tools": [weather], "stream": true }), "`stream` is not served with `tools`"),
        (json!({ "messages": [question], "response_format": { "type": "json_object" } }), "only text and json_schema"),
    ] {
        let (status, e) = post(body).await;
        assert_eq!(status, 400, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(says), "{says}: {e}");
    }
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_backend_answers_and_classifies_like_the_model_behind_it_and_counts_the_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = serving_fleet(tmp.path()).await;
    let w = spawn(backend(&fleet), None).await.unwrap();

    let req = capital_of_france(12);
    let local = generate(&req);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let job = GenerateJob { req: req.clone(), purpose: "reply".into(), persona: None, stream: Some(tx) };
    let g = call!(w, |reply| LlmMsg::Generate { job, reply }).unwrap().unwrap();
    let mut streamed = String::new();
    while let Some(piece) = rx.recv().await {
        streamed.push_str(&piece);
    }
    assert_eq!((g.text.as_str(), streamed.as_str()), (local.text.as_str(), local.text.as_str()));
    assert_eq!((g.tokens_in, g.tokens_out), (local.tokens_in, local.tokens_out), "from the server's usage");
    assert!(g.ttft_ms > 0.0, "{g:?}");

    let messages = vec![ChatMessage::user("Which city is the capital of France?")];
    let labels = ["Paris", "London"];
    let want = llm().classify(&messages, &labels).unwrap();
    let job =
        ClassifyJob { messages, labels: labels.map(String::from).to_vec(), purpose: "gate".into(), persona: None };
    let c = call!(w, |reply| LlmMsg::Classify { job, reply }).unwrap().unwrap();
    assert_eq!(c.scores[0].label, want.scores[0].label, "{c:?} / {want:?}");
    // Single-token labels: the same log-probabilities, to float rounding.
    assert!((c.scores[0].logprob - want.scores[0].logprob).abs() < 1e-3, "{c:?} / {want:?}");
    assert_eq!(c.tokens_in, want.tokens_in);

    let s = call!(w, LlmMsg::Stats).unwrap();
    assert_eq!((s.status.as_str(), s.model.model.as_str()), ("ready", "smollm2"));
    assert_eq!(s.model.path, format!("http://{}/v1", fleet.addr));
    assert_eq!((s.requests, s.failures, s.tokens_out), (2, 0, local.tokens_out as u64 + 2), "{s:?}");
    assert_eq!(s.by_purpose["reply"].tokens_in, local.tokens_in as u64);
    w.stop_and_wait(None, None).await.unwrap();
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generate_command_can_ask_an_openai_endpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = serving_fleet(tmp.path()).await;
    let url = format!("http://{}/v1", fleet.addr);
    let local = generate(&capital_of_france(12));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
            .args(["generate", "--json", "--max-tokens", "12", "--system", "Answer in one short sentence."])
            .args(["--openai", &url, "--openai-model", "smollm2", "What is the capital of France?"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["text"], local.text.as_str(), "{v}");
    assert_eq!((v["tokens"].as_u64(), v["model"].as_str()), (Some(local.tokens_out as u64), Some("smollm2")));
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_refuses_is_a_failed_request_naming_the_url() {
    // A fleet whose personas all use rules runs no LLM: its /v1 says so with 503.
    let tmp = tempfile::tempdir().unwrap();
    let fleet = mindfleet::Fleet::start(config(tmp.path(), &fleet_toml(crate::util::TRIO))).await.unwrap();
    let w = spawn(backend(&fleet), None).await.unwrap();
    let job = GenerateJob { req: capital_of_france(4), purpose: "reply".into(), persona: None, stream: None };
    let e = call!(w, |reply| LlmMsg::Generate { job, reply }).unwrap().unwrap_err();
    let LlmFailure::Failed(message) = &e else { panic!("{e:?}") };
    assert!(message.contains(&fleet.addr.to_string()) && message.contains("503") && message.contains("no LLM"), "{e}");
    assert_eq!(call!(w, LlmMsg::Stats).unwrap().failures, 1);
    w.stop_and_wait(None, None).await.unwrap();
    fleet.shutdown(Duration::from_secs(5)).await;
}

/// A dormant persona's conversation, said on 8 May 2023, and the consolidation of it, polled
/// until nothing waits: the dump's conversation of `diary`.
async fn consolidated(fleet: &mindfleet::Fleet) -> mindfleet_core::dump::ConversationDump {
    for (i, (from, text)) in [
        ("melanie", "Hey Caroline, how was your weekend?"),
        ("caroline", "I went to a pottery class yesterday with my sister, it was so much fun"),
        ("melanie", "Pottery sounds lovely, I painted a sunset with the kids at the lake"),
    ]
    .into_iter()
    .enumerate()
    {
        let ts = format!("2023-05-08T13:{}:00Z", 56 + i);
        let e = mindfleet_core::event::EventInput { ts: Some(ts), ..crate::util::chat("talk", from, text) };
        fleet.inject(e).await.unwrap();
    }
    // A model call or several on the way: more time than a wait on the fleet alone.
    crate::util::poll_within("diary to consolidate the conversation", 3 * crate::util::DEADLINE, || async {
        let d = dump(fleet).await;
        let c = crate::util::persona(&d, "diary").conversation.clone().expect("conversation memory is on");
        (c.stored == 3 && c.observations_pending == 0 && c.observations > 0).then_some(c)
    })
    .await
}

/// A fleet whose conversations the model consolidates, its LLM behind `[llm]` (more TOML).
fn observing_fleet(dir: &std::path::Path, llm: &str) -> mindfleet_core::config::FleetConfig {
    let persona = "[[persona]]\nname = \"diary\"\nrole = \"listener\"\nrooms = [\"talk\"]\ndormant = true\n";
    let toml =
        format!("{}\n[conversation]\nobservations = \"model\"\nobserve_after_secs = 0.5\n{llm}", fleet_toml(persona));
    let mut cfg = config(dir, &toml);
    cfg.models.dir = crate::util::pulled();
    cfg
}

fn observe_cost(cost: &Value) -> Option<&Value> {
    cost["by_purpose"].as_array().unwrap().iter().find(|r| r["key"] == "observe")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_consolidated_by_a_model_behind_an_openai_endpoint_and_ai_cost_shows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serving_fleet(&tmp.path().join("server")).await;
    let llm = format!("[llm]\nbackend = \"openai\"\nurl = \"http://{}/v1\"\nmodel = \"smollm2\"\n", server.addr);
    let fleet = mindfleet::Fleet::start(observing_fleet(&tmp.path().join("fleet"), &llm)).await.unwrap();

    let c = consolidated(&fleet).await;
    assert_eq!(c.observed_by, "rules+model", "{c:?}");
    let api = mindfleet::client::Client::new(&fleet.addr.to_string(), None);
    let cost = api.ai("cost", &[]).await.unwrap();
    assert_eq!(cost["observations"], "model", "the choice: {cost}");
    // One session, one piece: one model call, its tokens counted under its purpose.
    let row = observe_cost(&cost).unwrap_or_else(|| panic!("no `observe` row: {cost}"));
    assert_eq!(row["inferences"], 1, "{cost}");
    assert!(row["tokens"].as_u64().unwrap() > 100, "its prompt and answer: {cost}");
    // The endpoint did the work: the server's model took the call.
    let served = dump(&server).await.llm;
    assert!(served.requests >= 1, "{served:?}");

    // What the model added does not take the rules' place: the fact still brings its message.
    let params = [("persona", "diary".to_string()), ("text", "what did Caroline do on 7 May 2023?".to_string())];
    let v = api.ai("recall", &params).await.unwrap();
    let first = &v["recall"]["items"][0];
    assert_eq!(first["from"], "caroline", "{v}");
    assert_eq!(first["via"]["kind"], "fact", "{v}");
    assert!(first["via"]["text"].as_str().unwrap().starts_with("Caroline went to a pottery class 7 May 2023"), "{v}");
    fleet.shutdown(Duration::from_secs(5)).await;
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_budget_left_the_rules_consolidate_alone_and_no_model_call_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet =
        mindfleet::Fleet::start(observing_fleet(tmp.path(), "[scheduler]\nfleet_tokens_per_hour = 0\n")).await.unwrap();
    let c = consolidated(&fleet).await;
    // Two facts and the session's summary, as the rules make them.
    assert_eq!(c.observations, 3, "{c:?}");
    let cost = mindfleet::client::Client::new(&fleet.addr.to_string(), None).ai("cost", &[]).await.unwrap();
    assert_eq!((cost["observations"].as_str(), cost["inferences"].as_u64()), (Some("model"), Some(0)), "{cost}");
    assert!(observe_cost(&cost).is_none(), "{cost}");
    fleet.shutdown(Duration::from_secs(5)).await;
}

/// The draft check reads every model's drafts: a persona whose model is behind an endpoint (here
/// a fleet serving SmolLM2-135M, which answers as asked) has a draft that repeats the message
/// replaced by the grounded reply, and the decision says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_from_an_endpoint_that_repeats_the_message_is_not_posted() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serving_fleet(&tmp.path().join("server")).await;
    let persona = "[[persona]]\nname = \"helper\"\nrole = \"generalist assistant\"\nrooms = [\"general\"]\n\
                   brain = \"local\"\ndormant = true\n";
    let llm = format!("[llm]\nbackend = \"openai\"\nurl = \"http://{}/v1\"\nmodel = \"smollm2\"\n", server.addr);
    let fleet = mindfleet::Fleet::start(config(&tmp.path().join("fleet"), &format!("{}{llm}", fleet_toml(persona))))
        .await
        .unwrap();
    let asked =
        "@helper The deploy to staging failed with a timeout on the database migration. Any idea what to check first?";
    let ack = fleet.inject(crate::util::chat("general", "ivan", asked)).await.unwrap();
    let reply = crate::util::reply_to(&fleet, &ack.event_id).await;
    let reason = crate::util::decision(&fleet, "helper", &ack.event_id).await.reason;
    assert!(reason.contains("draft repeated the message (") && reason.contains("): grounded reply"), "{reason}");
    assert!(!reply.text.contains("failed with a timeout on the database migration"), "{reply:?}");
    assert!(dump(&server).await.llm.requests >= 1, "the endpoint drafted it");
    fleet.shutdown(Duration::from_secs(5)).await;
    server.shutdown(Duration::from_secs(5)).await;
}
