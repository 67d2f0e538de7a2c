//! What the backend sends an endpoint for a request's repetition settings and stop strings, and
//! what it makes of the streamed answer, against a loopback server that records the request and
//! streams a canned answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::ops::ControlFlow;
use std::time::Duration;

use serde_json::{Value, json};

use super::{MAX_SENT_STOPS, OpenAi, OpenAiConfig, wire_name};
use mindfleet_core::llm::{ToolCallAsked, ToolDef, ToolRound, ToolTurnJob};
use mindfleet_models::llama::{ChatMessage, GenerateRequest, Generation, Repetition, Stop};

/// Answers one chat request with `pieces` streamed as server-sent events; the request's body.
fn serve_once(pieces: &'static [&'static str]) -> (String, std::thread::JoinHandle<Value>) {
    serve(Answer::Streamed(pieces))
}

enum Answer {
    Streamed(&'static [&'static str]),
    /// A whole answer whose message is this content.
    Whole(String),
    /// A whole answer with this message.
    Message(Value),
}

fn serve(answer: Answer) -> (String, std::thread::JoinHandle<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body_read = vec![0; length];
        reader.read_exact(&mut body_read).unwrap();
        let mut out = stream;
        let pieces = match answer {
            Answer::Streamed(pieces) => pieces,
            Answer::Whole(_) | Answer::Message(_) => {
                let message = match answer {
                    Answer::Whole(content) => json!({ "content": content }),
                    Answer::Message(m) => m,
                    Answer::Streamed(_) => unreachable!(),
                };
                let usage = json!({ "prompt_tokens": 30, "completion_tokens": 12 });
                let body = json!({ "choices": [{ "message": message }], "usage": usage }).to_string();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = out.write_all((head + &body).as_bytes());
                return serde_json::from_slice(&body_read).unwrap();
            }
        };
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n");
        for piece in pieces {
            let chunk = json!({ "choices": [{ "delta": { "content": piece }, "finish_reason": null }] });
            // The client may have closed the connection: the rest is not read.
            let _ = out.write_all(format!("data: {chunk}\n\n").as_bytes());
        }
        let end = json!({ "choices": [{ "delta": {}, "finish_reason": "stop" }] });
        let _ = out.write_all(format!("data: {end}\n\ndata: [DONE]\n\n").as_bytes());
        serde_json::from_slice(&body_read).unwrap()
    });
    (url, server)
}

fn client(url: String) -> OpenAi {
    OpenAi::new(OpenAiConfig { url, model: "m".into(), api_key: None, timeout: Duration::from_secs(10) }).unwrap()
}

fn ask(url: String, req: &GenerateRequest) -> (Generation, String) {
    let config = OpenAiConfig { url, model: "m".into(), api_key: None, timeout: Duration::from_secs(10) };
    let mut streamed = String::new();
    let g = OpenAi::new(config)
        .unwrap()
        .generate(req, &mut |piece| {
            streamed.push_str(piece);
            ControlFlow::Continue(())
        })
        .unwrap();
    (g, streamed)
}

fn request() -> GenerateRequest {
    GenerateRequest::new(vec![ChatMessage::user("Does it work?")], 32)
}

#[test]
fn the_penalty_is_sent_both_ways_and_a_repeated_sentence_ends_the_answer_before_it() {
    let (url, server) = serve_once(&["It works", ". It is", " fine.", " It", " works", ". More", "."]);
    let repetition = Repetition { penalty: 1.5, no_repeat_ngram: 3, no_copy_ngram: 5, stop_repeated_sentence: true };
    let (g, streamed) = ask(url, &GenerateRequest { repetition, ..request() });
    let body = server.join().unwrap();
    assert_eq!((body["repeat_penalty"].as_f64(), body["frequency_penalty"].as_f64()), (Some(1.5), Some(0.5)));
    assert_eq!((g.text.as_str(), g.stop), ("It works. It is fine.", Stop::Repetition));
    assert_eq!(streamed, g.text, "nothing of the repeated sentence is streamed");
}

#[test]
fn without_repetition_settings_nothing_is_sent_for_them_and_the_text_is_the_server_s() {
    let (url, server) = serve_once(&["It works", ". It works", "."]);
    let (g, streamed) = ask(url, &request());
    let body = server.join().unwrap();
    assert!(body.get("repeat_penalty").is_none() && body.get("frequency_penalty").is_none(), "{body}");
    assert_eq!((g.text.as_str(), g.stop, streamed.as_str()), ("It works. It works.", Stop::Eos, "It works. It works."));
    // A penalty of 3 is more than OpenAI's frequency penalty takes.
    let (url, server) = serve_once(&["Yes."]);
    ask(url, &GenerateRequest { repetition: Repetition { penalty: 3.0, ..Repetition::default() }, ..request() });
    let body = server.join().unwrap();
    assert_eq!((body["repeat_penalty"].as_f64(), body["frequency_penalty"].as_f64()), (Some(3.0), Some(2.0)));
}

#[test]
fn four_stop_strings_are_sent_and_the_others_are_looked_for_in_the_text() {
    let (url, server) = serve_once(&["one ", "two E", "ND three"]);
    let stop: Vec<String> = ["a1", "b2", "c3", "d4", "END"].map(String::from).to_vec();
    let (g, streamed) = ask(url, &GenerateRequest { stop: stop.clone(), ..request() });
    let body = server.join().unwrap();
    assert_eq!(body["stop"], json!(stop[..MAX_SENT_STOPS]));
    assert_eq!((g.text.as_str(), g.stop, streamed.as_str()), ("one two ", Stop::StopString, "one two "));
}

fn git_log() -> Value {
    json!({
        "type": "object",
        "properties": { "repo_path": { "type": "string" }, "max_count": { "type": "integer", "default": 10 } },
        "required": ["repo_path"]
    })
}

#[test]
fn a_fill_asks_for_the_schema_s_shape_as_strict_structured_output_and_checks_the_answer() {
    let (url, server) = serve(Answer::Whole(r#"{"repo_path": "/srv/git/api", "max_count": 1}"#.into()));
    let messages = [ChatMessage::user("The last commit of /srv/git/api.")];
    let f = client(url).fill(&messages, &git_log(), 64).unwrap();
    let body = server.join().unwrap();
    assert_eq!(f.value, json!({ "repo_path": "/srv/git/api", "max_count": 1 }));
    assert_eq!((f.tokens_in, f.tokens_out), (30, 12), "from the server's usage");
    let format = &body["response_format"];
    assert_eq!((format["type"].as_str(), format["json_schema"]["strict"].as_bool()), (Some("json_schema"), Some(true)));
    // Every property filled is required and no other allowed, as strict mode wants.
    let schema = &format["json_schema"]["schema"];
    assert_eq!(
        (&schema["required"], &schema["additionalProperties"]),
        (&json!(["repo_path", "max_count"]), &json!(false))
    );
    assert_eq!((body["max_tokens"].as_u64(), body["temperature"].as_f64()), (Some(64), Some(0.0)));
}

#[test]
fn an_answer_off_the_schema_fails_naming_the_field_and_an_unsupported_schema_is_not_sent() {
    let (url, server) = serve(Answer::Whole(r#"{"repo_path": 7, "max_count": 1}"#.into()));
    let e = client(url).fill(&[ChatMessage::user("Log?")], &git_log(), 64).unwrap_err().to_string();
    server.join().unwrap();
    assert!(e.ends_with("the answer does not fit the schema: field `repo_path`: 7 is not a string"), "{e}");
    let mut schema = git_log();
    schema["properties"]["repo_path"]["pattern"] = json!("^/");
    // No server: the schema is refused before any request.
    let e = client("http://127.0.0.1:9/v1".into()).fill(&[ChatMessage::user("Log?")], &schema, 64).unwrap_err();
    assert!(matches!(&e, mindfleet_models::llama::LlmError::Schema(s) if s.field == "repo_path"), "{e}");
}

#[test]
fn a_tool_turn_offers_the_tools_under_names_the_api_takes_and_sends_each_round_as_calls_and_results() {
    let answer = json!({ "role": "assistant", "content": null, "tool_calls": [
        { "id": "call_9", "type": "function",
          "function": { "name": "fs__read_text_file", "arguments": "{\"path\":\"plan.md\"}" } }
    ] });
    let (url, server) = serve(Answer::Message(answer));
    let read = ToolDef { name: "fs.read_text_file".into(), description: "Read a file".into(), parameters: git_log() };
    let first =
        ToolCallAsked { id: "call_1".into(), name: read.name.clone(), arguments: r#"{"path":"notes.md"}"#.into() };
    let job = ToolTurnJob {
        messages: vec![ChatMessage::user("Read the file notes.md names.")],
        rounds: vec![ToolRound { calls: vec![first], results: vec!["see plan.md".into()] }],
        tools: vec![read],
        choice: "auto".into(),
        max_tokens: 64,
        purpose: "plan".into(),
        persona: None,
    };
    let turn = client(url).tool_turn(&job).unwrap();
    let body = server.join().unwrap();
    assert_eq!(body["tools"][0]["function"]["name"], "fs__read_text_file");
    assert_eq!(body["tool_choice"], "auto");
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "the question, the model's calls, one result: {body}");
    assert_eq!(m[1]["tool_calls"][0]["function"]["name"], "fs__read_text_file");
    assert_eq!((m[2]["role"].as_str(), m[2]["tool_call_id"].as_str()), (Some("tool"), Some("call_1")));
    assert_eq!(m[2]["content"], "see plan.md");
    // The call comes back under the fleet's name.
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(
        (turn.calls[0].name.as_str(), turn.calls[0].arguments.as_str()),
        ("fs.read_text_file", r#"{"path":"plan.md"}"#)
    );
    assert_eq!((turn.calls[0].id.as_str(), turn.tokens_in), ("call_9", 30));
    assert_eq!(wire_name("a b.c/d"), "a_b__c_d");
}
