//! The walker on a vocabulary of a few tokens and logits made by hand: what each value's mask
//! lets through, when a value ends, and, on random logits, that every value validates against
//! its schema (checked by the schema's own `Shape::check`); then fills on the real model.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::{Action, Grid, MAX_STRING_TOKENS, Vocab, Walker};
use crate::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
use crate::llama::batch::{BatchConfig, Engine, Outcome, Work};
use crate::llama::schema::{Bound, Shape};
use crate::llama::{ChatMessage, GenerateRequest, Llm, LlmError, runnable};

/// The tokens, by id; `<eot>` ends the turn and prints nothing.
const TOKENS: &[&str] = &[
    "<eot>", "\"", "\",", "\"}", "/repo", "/src", " ", "a\"b", "\\", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "-", ".", ",", "}", "]", ", ", "\n", "ab", "é", "\u{1}", "main", "x", " \"", " \"/repo",
];

fn id(token: &str) -> usize {
    TOKENS.iter().position(|t| *t == token).unwrap_or_else(|| panic!("no token {token:?}"))
}

fn vocab() -> Vocab {
    let mut tokens: Vec<(Vec<u8>, bool)> = TOKENS
        .iter()
        .map(|t| if *t == "<eot>" { (Vec::new(), true) } else { (t.as_bytes().to_vec(), false) })
        .collect();
    // Half of `é`: not whole characters, never written.
    tokens.push((vec![0xC3], false));
    Vocab::new(tokens.iter().map(|(b, e)| (b.as_slice(), *e)))
}

/// Logits with `favoured` tokens at their values and every other at -10.
fn logits(favoured: &[(&str, f32)]) -> Vec<f32> {
    let mut l = vec![-10.0; TOKENS.len() + 1];
    for (t, v) in favoured {
        l[id(t)] = *v;
    }
    l
}

/// Runs the walker, each step's logits from `model` given the text so far; a choice takes the
/// label `choose` names. The value, the text, and each token the model was let pick.
fn run(
    shape: Shape,
    mut model: impl FnMut(&str) -> Vec<f32>,
    mut choose: impl FnMut(&[String]) -> usize,
) -> (Value, String, Vec<String>) {
    let v = vocab();
    let (mut w, _) = Walker::new(shape);
    let mut picked = Vec::new();
    for _ in 0..1000 {
        let l = model(w.text());
        let mut action = w.next(&v, &l, usize::MAX);
        if let Action::Score(labels) = &action {
            action = w.chose(choose(labels));
        }
        match action {
            Action::Read { token, .. } => picked.extend(token.map(|t| TOKENS[t as usize].to_string())),
            Action::Done(value) => return (value, w.text().to_string(), picked),
            Action::Fail(e) => panic!("{e}"),
            Action::Score(_) => unreachable!("a choice is answered"),
        }
    }
    panic!("no end: {}", w.text())
}

fn shape(schema: Value) -> Shape {
    Shape::compile(&schema).unwrap()
}

fn string() -> Shape {
    Shape::String { min: 0, max: None, format: None }
}

/// `model`, after a quote opens the string (at the top, where nothing else is written first).
fn opened(model: impl Fn(&str) -> Vec<f32>) -> impl Fn(&str) -> Vec<f32> {
    move |t: &str| if t.is_empty() { logits(&[("\"", 5.0)]) } else { model(t) }
}

#[test]
fn the_text_around_the_values_is_written_and_the_model_fills_the_values() {
    let git_log = shape(json!({
        "type": "object",
        "properties": { "repo_path": { "type": "string" }, "max_count": { "type": "integer", "default": 10 } },
        "required": ["repo_path"]
    }));
    let (w, opening) = Walker::new(git_log.clone());
    assert_eq!((opening.as_str(), w.text()), ("{\"repo_path\":", "{\"repo_path\":"));
    let model = |text: &str| match text {
        // The string opens with its quote and its first text, as the tokenizer writes them.
        t if t.ends_with("\":") => logits(&[(" \"/repo", 2.0), ("/repo", 3.0), (" \"", 1.0)]),
        t if t.ends_with("/repo") => logits(&[("/src", 2.0), ("\",", 1.0)]),
        t if t.ends_with("/src") => logits(&[("\",", 2.0), ("/src", 1.0)]),
        t if t.ends_with(": ") => logits(&[("1", 3.0), ("0", 1.0)]),
        _ => logits(&[("}", 3.0), ("0", 1.0)]),
    };
    let (value, text, picked) = run(git_log, model, |_| 0);
    assert_eq!(value, json!({ "repo_path": "/repo/src", "max_count": 1 }));
    assert_eq!(text, r#"{"repo_path": "/repo/src", "max_count": 1}"#);
    assert_eq!(picked, [" \"/repo", "/src", "1"], "the closing quote and the comma are written, not picked");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
}

#[test]
fn a_string_never_takes_a_quote_backslash_control_or_half_character_token() {
    let model = |text: &str| match text.len() {
        1 => logits(&[("a\"b", 9.0), ("\\", 8.0), ("\u{1}", 7.0), ("\n", 6.0), ("ab", 1.0)]),
        _ => logits(&[("\"", 1.0)]),
    };
    let mut l = model("\"");
    l[TOKENS.len()] = 10.0; // the half character
    let (value, _, picked) = run(string(), opened(|t| if t.len() == 1 { l.clone() } else { model(t) }), |_| 0);
    assert_eq!((value, picked), (json!("ab"), vec!["\"".to_string(), "ab".to_string()]));
}

#[test]
fn the_closing_tokens_together_end_a_string_each_alone_would_not() {
    // `"` and `",` at 0 each are 2 against 1.65 for `ab` at 0.5.
    let model = |_: &str| logits(&[("\"", 0.0), ("\",", 0.0), ("ab", 0.5)]);
    assert_eq!(run(string(), opened(model), |_| 0).0, json!(""));
    let model = |t: &str| if t.len() < 3 { logits(&[("\"", 0.0), ("ab", 0.8)]) } else { logits(&[("\"", 1.0)]) };
    assert_eq!(run(string(), opened(model), |_| 0).0, json!("ab"), "`ab` alone beats `\"` alone");
}

#[test]
fn a_string_keeps_within_its_lengths_and_its_token_cap() {
    // maxLength 6: `/repo` fits once, then only `ab`-sized tokens, then it must close.
    let bounded = Shape::String { min: 0, max: Some(6), format: None };
    let (value, _, _) = run(bounded, opened(|_| logits(&[("/repo", 3.0), ("é", 2.0), ("ab", 1.0)])), |_| 0);
    assert_eq!(value, json!("/repoé"));
    // minLength 3: the quote waits.
    let at_least = Shape::String { min: 3, max: None, format: None };
    assert_eq!(run(at_least, opened(|_| logits(&[("\"", 5.0), ("ab", 1.0)])), |_| 0).0, json!("abab"));
    // A model that never closes is closed at the cap.
    let (value, _, picked) = run(string(), opened(|_| logits(&[("x", 5.0)])), |_| 0);
    assert_eq!((value.as_str().unwrap().len(), picked.len()), (MAX_STRING_TOKENS, MAX_STRING_TOKENS + 1));
    // A format's string takes no whitespace.
    let uri = Shape::String { min: 0, max: None, format: Some(crate::llama::schema::Format::Uri) };
    let model = |t: &str| match t {
        "\"" => logits(&[("x", 1.0)]),
        "\"x" => logits(&[(" ", 5.0), (".", 1.0)]),
        _ => logits(&[("\"", 1.0)]),
    };
    let v = vocab();
    let (mut w, _) = Walker::new(uri);
    for want in ["\"", "x", "."] {
        let read = w.next(&v, &model(w.text()), usize::MAX);
        assert!(matches!(read, Action::Read { token: Some(t), .. } if TOKENS[t as usize] == want), "{read:?}");
    }
    let end = w.next(&v, &model(w.text()), usize::MAX);
    assert!(matches!(&end, Action::Fail(e) if e.contains("not a uri")), "{end:?}");
}

#[test]
fn digits_are_taken_only_while_a_value_within_the_bounds_can_follow() {
    let two_digits = Shape::Integer { min: 10, max: 99 };
    // `0` first is never a number from 10 to 99; after `5` it is, and the end must wait for it.
    let model = |_: &str| logits(&[("0", 5.0), ("5", 4.0), (",", 9.0), ("7", 1.0)]);
    assert_eq!(run(two_digits, model, |_| 0).0, json!(50));
    let negative = Shape::Integer { min: -5, max: 5 };
    let model = |t: &str| {
        if t.is_empty() { logits(&[("-", 5.0), ("9", 4.0)]) } else { logits(&[("9", 5.0), ("3", 4.0), ("}", 1.0)]) }
    };
    assert_eq!(run(negative, model, |_| 0).0, json!(-3));
    let natural = Shape::Integer { min: 0, max: 1000 };
    let model = |_: &str| logits(&[("-", 9.0), ("0", 5.0), ("1", 4.0), (",", 3.0)]);
    assert_eq!(run(natural, model, |_| 0).0, json!(0), "no sign, no leading zero");
    let number =
        Shape::Number { min: Bound { value: 0.0, exclusive: true }, max: Bound { value: 2.0, exclusive: false } };
    let model = |t: &str| match t {
        "" => logits(&[("0", 5.0), ("1", 1.0)]),
        "0" => logits(&[(",", 5.0), (".", 4.0)]),
        "0." => logits(&[("}", 5.0), ("0", 3.0), ("5", 2.0)]),
        "0.0" => logits(&[("}", 5.0), ("5", 2.0)]),
        _ => logits(&[("}", 5.0)]),
    };
    assert_eq!(run(number, model, |_| 0).0, json!(0.05), "0 is excluded; `0.` and `0.0` are not numbers yet");
}

#[test]
fn the_grid_knows_which_beginnings_can_still_meet_the_bounds() {
    let int = |min: i64, max: i64| {
        Grid::new(true, Bound { value: min as f64, exclusive: false }, Bound { value: max as f64, exclusive: false })
    };
    let g = int(10, 99);
    assert!(g.feasible("") && g.feasible("9") && g.feasible("99") && !g.feasible("0") && !g.feasible("-"));
    assert!(!g.feasible("100") && !g.feasible("1.") && !g.complete("9") && g.complete("10"));
    let g = int(-20, -10);
    assert!(g.feasible("-") && g.feasible("-1") && g.feasible("-2") && !g.feasible("-3") && !g.feasible("1"));
    assert!(!g.complete("-") && g.complete("-15") && !g.complete("-9"));
    let wide = int(-999_999_999_999_999, 999_999_999_999_999);
    assert!(wide.feasible("999999999999999") && !wide.feasible("9999999999999999") && !wide.feasible("01"));
    assert!(!wide.complete("-0") && wide.complete("0"));
    let g = Grid::new(false, Bound { value: 0.5, exclusive: false }, Bound { value: 0.75, exclusive: true });
    assert!(g.feasible("0.") && g.feasible("0.7") && !g.feasible("0.8") && !g.feasible("1") && !g.feasible("0.4"));
    assert!(g.complete("0.5") && g.complete("0.749999") && !g.complete("0.75") && !g.complete("0.5."));
}

#[test]
fn an_array_goes_on_while_a_comma_is_likelier_than_its_end() {
    let names = shape(json!({ "type": "array", "items": { "type": "string" }, "maxItems": 3 }));
    let model = |t: &str| match (t, t.matches('"').count() % 2 == 1) {
        ("[", _) => logits(&[("\"", 3.0), ("]", 1.0)]),
        (t, _) if t.ends_with(',') => logits(&[(" \"", 3.0)]),
        (t, true) if t.ends_with("ab") => logits(&[("\"", 3.0)]),
        (_, true) => logits(&[("ab", 3.0), ("\",", 2.0)]),
        (t, false) => logits(&[(if t.matches("ab").count() < 2 { "," } else { "]" }, 3.0)]),
    };
    let (value, text, _) = run(names, model, |_| 0);
    assert_eq!((value, text.as_str()), (json!(["ab", "ab"]), r#"["ab", "ab"]"#));
    let empty = shape(json!({ "type": "array", "items": { "type": "integer" } }));
    assert_eq!(run(empty, |_| logits(&[("]", 3.0), ("1", 1.0)]), |_| 0).0, json!([]));
    let full = shape(json!({ "type": "array", "items": { "type": "integer" }, "minItems": 2, "maxItems": 2 }));
    assert_eq!(run(full, |_| logits(&[("]", 3.0), ("1", 1.0)]), |_| 0).0, json!([1, 1]), "within its counts");
}

#[test]
fn enums_and_booleans_are_chosen_as_labels_and_constants_written() {
    let schema = shape(json!({
        "type": "object",
        "properties": {
            "branch": { "enum": ["main", "dev"] },
            "force": { "type": "boolean" },
            "mode": { "const": "fast" }
        },
        "required": ["branch", "force", "mode"]
    }));
    let v = vocab();
    let (mut w, opening) = Walker::new(schema);
    assert_eq!(opening, r#"{"branch":"#);
    // Each label with the space before it, as the tokenizer writes a value after `:`.
    assert_eq!(w.next(&v, &logits(&[]), usize::MAX), Action::Score(vec![r#" "main""#.into(), r#" "dev""#.into()]));
    assert_eq!(w.chose(1), Action::Read { token: None, text: r#" "dev", "force":"#.into() });
    assert_eq!(w.next(&v, &logits(&[]), usize::MAX), Action::Score(vec![" true".into(), " false".into()]));
    assert_eq!(w.chose(0), Action::Done(json!({ "branch": "dev", "force": true, "mode": "fast" })));
    assert_eq!(w.text(), r#"{"branch": "dev", "force": true, "mode": "fast"}"#);
}

/// xorshift64*: the same logits every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn logits(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() % 1000) as f32 / 100.0).collect()
    }
}

#[test]
fn on_random_logits_every_value_validates_against_its_schema() {
    let schemas = [
        json!({
            "type": "object",
            "properties": {
                "repo_path": { "type": "string", "minLength": 1, "maxLength": 40 },
                "max_count": { "type": "integer", "default": 10, "minimum": 1, "maximum": 500 },
                "ratio": { "type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25 },
                "tags": { "type": "array", "items": { "enum": ["a", "b", 3] }, "maxItems": 4 },
                "nested": {
                    "type": "object",
                    "properties": { "on": { "type": "boolean" }, "n": { "type": ["integer", "null"], "maximum": -7 } },
                    "required": ["on", "n"]
                },
                "skipped": { "type": "string", "pattern": "^x" }
            },
            "required": ["repo_path", "ratio", "tags", "nested"]
        }),
        json!({ "type": "array", "items": { "type": "array", "items": { "type": "number" }, "minItems": 1 }, "maxItems": 3 }),
        json!({ "type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000 }),
        json!({ "type": "string" }),
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for schema in schemas {
        let shape = Shape::compile(&schema).unwrap();
        for _ in 0..50 {
            let (mut tokens, mut choices) = (Rng(rng.next() | 1), Rng(rng.next() | 1));
            let (value, text, _) = run(
                shape.clone(),
                |_| tokens.logits(TOKENS.len() + 1),
                |labels| (choices.next() % labels.len() as u64) as usize,
            );
            assert_eq!(shape.check(&value), Ok(()), "{schema}: {value}");
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value, "{text}");
        }
    }
}

// The real model.

fn llm() -> &'static Llm {
    static LLM: OnceLock<Llm> = OnceLock::new();
    LLM.get_or_init(|| {
        let dir = default_dir();
        pull(&dir, &PACKAGES, |_| {}).expect("models pull");
        Llm::load(&runnable(&dir.join(SMOLLM2.name).join(SMOLLM2.files[0].name)).unwrap()).unwrap()
    })
}

/// mcp-server-git's `git_log`.
fn git_log_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "repo_path": { "type": "string", "title": "Repo Path" },
            "max_count": { "type": "integer", "default": 10, "title": "Max Count" }
        },
        "required": ["repo_path"],
        "title": "GitLog"
    })
}

fn tool_call(tool: &str, ask: &str) -> Vec<ChatMessage> {
    vec![ChatMessage::system(format!("You call the tool {tool}. Write its arguments as JSON.")), ChatMessage::user(ask)]
}

fn valid(schema: &Value, value: &Value) {
    assert_eq!(Shape::compile(schema).unwrap().check(value), Ok(()), "{schema}: {value}");
}

#[test]
fn the_git_log_arguments_validate_and_the_path_is_the_one_in_the_prompt() {
    let schema = git_log_schema();
    // The argument named beside its value, as a persona's request gives it: the model copies
    // it. (Asked "of the git repository at /srv/git/payments-api.", it writes a GitHub URL.)
    for path in ["/home/ada/src/mindfleet", "/srv/git/payments-api", "/tmp/repo"] {
        let ask = format!("Show me the last commit of the git repository.\nrepo_path: \"{path}\"");
        let f = llm().fill(&tool_call("git_log", &ask), &schema, 64).unwrap();
        valid(&schema, &f.value);
        assert_eq!(f.value["repo_path"], path, "{}", f.text);
        assert_eq!(serde_json::from_str::<Value>(&f.text).unwrap(), f.value);
        assert!(f.tokens_in > 0 && f.tokens_out > 0 && f.tokens_out <= 64, "{f:?}");
    }
}

#[test]
fn a_string_ends_while_the_tokens_left_still_hold_the_text_after_it() {
    let v = vocab();
    let (mut w, opening) = Walker::new(shape(git_log_schema()));
    // About a token for three bytes of text written, one for each picked.
    let mut left: usize = 40 - opening.len() / 3;
    let model = |t: &str| {
        if t.ends_with(": ") { logits(&[("1", 1.0)]) } else { logits(&[(" \"", 1.0), ("x", 5.0), ("}", 0.1)]) }
    };
    let value = loop {
        match w.next(&v, &model(w.text()), left) {
            Action::Read { token, text } => left -= token.is_some() as usize + text.len().div_ceil(3),
            Action::Done(value) => break value,
            other => panic!("{other:?}"),
        }
    };
    let written = value["repo_path"].as_str().unwrap().len();
    assert!(written > 20 && left > 0, "{value} with {left} left");
}

#[test]
fn a_top_level_enum_or_boolean_is_the_label_classify_scores_best() {
    let question = tool_call("answer", "Which city is the capital of France?");
    let f = llm().fill(&question, &json!({ "enum": ["London", "Paris", "Rome"] }), 8).unwrap();
    let scores = llm().classify(&question, &["\"London\"", "\"Paris\"", "\"Rome\""]).unwrap();
    assert_eq!(f.value.to_string(), scores.scores[0].label, "{scores:?}");
    let question = tool_call("answer", "Is water wet? Answer true or false.");
    let f = llm().fill(&question, &json!({ "type": "boolean" }), 4).unwrap();
    let scores = llm().classify(&question, &["true", "false"]).unwrap();
    assert_eq!(f.value.to_string(), scores.scores[0].label, "{scores:?}");
}

#[test]
fn enums_booleans_numbers_and_arrays_inside_an_object_validate() {
    let schema = json!({
        "type": "object",
        "properties": {
            "branch": { "type": "string", "enum": ["main", "develop"] },
            "force": { "type": "boolean" },
            "retries": { "type": "integer", "minimum": 0, "maximum": 5 },
            "labels": { "type": "array", "items": { "type": "string", "maxLength": 12 }, "maxItems": 3 },
            "ratio": { "type": "number", "minimum": 0, "maximum": 1 },
            "url": { "type": "string", "format": "uri" }
        },
        "required": ["branch", "force", "retries", "labels", "ratio", "url"]
    });
    let ask = "Push the develop branch of https://example.com/repo.git with force, retry 3 times, \
               label it urgent and backend, at a ratio of 0.5.";
    let f = llm().fill(&tool_call("git_push", ask), &schema, 96).unwrap();
    valid(&schema, &f.value);
    assert_eq!(f.value["url"], "https://example.com/repo.git", "{}", f.text);
}

#[test]
fn a_schema_with_an_unsupported_construct_is_refused_naming_the_field() {
    let mut schema = git_log_schema();
    schema["properties"]["repo_path"]["pattern"] = json!("^/");
    let e = llm().fill(&tool_call("git_log", "The last commit of /r."), &schema, 64).unwrap_err();
    assert!(matches!(&e, LlmError::Schema(s) if s.field == "repo_path"), "{e}");
    assert_eq!(e.to_string(), "schema: field `repo_path`: `pattern` is not supported");
}

#[test]
fn arguments_longer_than_max_tokens_fail_naming_the_field() {
    let e = llm().fill(&tool_call("git_log", "The last commit of /home/ada/src/mindfleet."), &git_log_schema(), 8);
    let e = e.unwrap_err().to_string();
    // The path is closed early to leave room for `max_count`, which then has none.
    assert_eq!(e, "request: field `max_count`: the arguments need more than max_tokens 8 (13 so far)");
}

#[test]
fn a_fill_batched_with_a_generation_gives_the_value_it_gives_alone() {
    let messages = tool_call("git_log", "Show me the last commit of the git repository at /srv/git/payments-api.");
    let alone = llm().fill(&messages, &git_log_schema(), 64).unwrap();
    let mut engine: Engine<'_, u8> = llm().engine(BatchConfig { max_batch: 2, ..BatchConfig::single() });
    let story = GenerateRequest::new(vec![ChatMessage::user("Tell me a story about a lighthouse.")], 40);
    let fill = Work::Fill { messages, schema: git_log_schema(), max_tokens: 64 };
    for (tag, work) in [(0, Work::Generate(story)), (1, fill)] {
        let ready = engine.prepare(work, tag, Box::new(|_| std::ops::ControlFlow::Continue(()))).ok().unwrap();
        engine.admit(ready);
    }
    let mut batched = None;
    while !engine.is_empty() {
        for (tag, outcome) in engine.step() {
            if let (1, Outcome::Filled(f)) = (tag, outcome) {
                batched = Some(f.unwrap());
            }
        }
    }
    let batched = batched.unwrap();
    assert_eq!((batched.value, batched.text), (alone.value, alone.text));
}
