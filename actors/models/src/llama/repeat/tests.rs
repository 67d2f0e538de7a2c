//! The penalty, the n-gram bans and the sentence judge on hand-made tokens and text, then the
//! real model's replies with and without them.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::OnceLock;

use mindfleet_core::config::Decoding;

use super::*;
use crate::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
use crate::llama::batch::{BatchConfig, Outcome, STEP_TOKENS, Work};
use crate::llama::{ChatMessage, GenerateRequest, Generation, Llm, Stop, runnable};

#[test]
fn the_penalty_divides_positive_logits_multiplies_negative_ones_and_counts_each_token_once() {
    let mut logits = [2.0, -1.0, 3.0, 0.0, 5.0];
    let seen: BTreeSet<u32> = [0, 1, 3].into_iter().collect();
    penalize(&mut logits, &seen, 2.0);
    assert_eq!(logits, [1.0, -2.0, 3.0, 0.0, 5.0]);
    // A token outside the vocabulary is no logit to change.
    penalize(&mut logits, &[99].into_iter().collect(), 2.0);
    assert_eq!(logits, [1.0, -2.0, 3.0, 0.0, 5.0]);
}

#[test]
fn a_token_that_would_repeat_an_n_gram_of_the_answer_is_banned() {
    let mut out = Vec::new();
    // "a b c a b": a third `c` after `a b` would repeat the trigram `a b c`.
    repeating(&[1, 2, 3, 1, 2], 3, &mut out);
    assert_eq!(out, [3]);
    // Every token that followed `b` before, for bigrams.
    out.clear();
    repeating(&[2, 5, 2, 6, 2], 2, &mut out);
    assert_eq!(out, [5, 6]);
    // Too short to hold a whole n-gram, or off.
    out.clear();
    repeating(&[1, 2], 3, &mut out);
    repeating(&[1, 2, 1, 2], 0, &mut out);
    assert!(out.is_empty());
    // One-grams: every token written.
    repeating(&[4, 7], 1, &mut out);
    assert_eq!(out, [4, 7]);
}

#[test]
fn a_token_that_would_copy_n_tokens_of_the_question_is_banned() {
    let question = [10, 11, 12, 13, 14, 11, 12, 15];
    let mut out = Vec::new();
    // The answer ends `11 12`: `13` and `15` follow `11 12` in the question.
    copying(&[1, 11, 12], &question, 3, &mut out);
    assert_eq!(out, [13, 15]);
    out.clear();
    copying(&[1, 12], &question, 3, &mut out);
    assert!(out.is_empty(), "`x 12` is in no trigram of the question");
    // The first token of an answer can copy no n-gram longer than one.
    copying(&[], &question, 2, &mut out);
    copying(&[11, 12], &question, 0, &mut out);
    assert!(out.is_empty());
    copying(&[], &[7, 8], 1, &mut out);
    assert_eq!(out, [7, 8]);
}

#[test]
fn the_guard_penalizes_the_question_and_the_answer_and_bans_repeats_and_copies() {
    let settings = Repetition { penalty: 2.0, no_repeat_ngram: 2, no_copy_ngram: 2, stop_repeated_sentence: false };
    let mut guard = Guard::new(settings, vec![1, 2]);
    let mut logits = vec![4.0; 6];
    guard.apply(&mut logits, &[]);
    assert_eq!(logits, [4.0, 2.0, 2.0, 4.0, 4.0, 4.0], "the question's tokens, penalised");
    // `3` again: `4` would repeat the bigram `3 4`; the tokens written are penalised too.
    let mut logits = vec![4.0; 6];
    guard.apply(&mut logits, &[3, 4, 3]);
    assert_eq!(logits, [4.0, 2.0, 2.0, 2.0, f32::NEG_INFINITY, 4.0]);
    // `1` written: `2` would copy the question's `1 2`.
    let mut logits = vec![4.0; 6];
    guard.apply(&mut logits, &[3, 4, 3, 1]);
    assert_eq!(logits, [4.0, 2.0, f32::NEG_INFINITY, 2.0, 2.0, 4.0]);
    // Off, the logits are what the model gave.
    let mut off = Guard::new(Repetition::default(), vec![1, 2]);
    let mut logits = vec![4.0, -1.0, 3.0];
    off.apply(&mut logits, &[0, 1, 0, 1]);
    assert_eq!(logits, [4.0, -1.0, 3.0]);
}

#[test]
fn sentences_compare_lower_cased_without_punctuation_or_extra_whitespace() {
    assert_eq!(normalize("  I'm glad to hear   you're\ton the TEAM! "), "i m glad to hear you re on the team");
    assert_eq!(normalize("..."), "");
    assert_eq!(normalize("Ça va, Öl?"), "ça va öl");
}

/// The pieces given out for each piece pushed, and the end's.
fn judge(pieces: &[&str], cut_short: bool) -> (Vec<String>, Judged) {
    let mut s = Sentences::default();
    let mut out = Vec::new();
    for p in pieces {
        let j = s.push(p);
        out.push(j.text);
        if j.repeated {
            return (out, Judged { text: String::new(), repeated: true });
        }
    }
    (out, s.finish("", cut_short))
}

#[test]
fn a_sentence_is_given_out_once_it_ends_and_the_rest_at_the_end() {
    let (out, end) = judge(&["Hello", " there.", " How", " are you", "?", " Fine"], false);
    assert_eq!(out, ["", "", "Hello there.", "", "", " How are you?"]);
    assert_eq!(end, Judged { text: " Fine".into(), repeated: false });
}

#[test]
fn a_repeated_sentence_ends_the_text_before_it_and_is_never_given_out() {
    let (out, end) = judge(&["I'm glad.", " You are", " welcome.", " I'm", " GLAD!", " More"], false);
    assert_eq!(out.concat(), "I'm glad. You are welcome.");
    assert!(end.repeated);
    // A newline ends a sentence as well.
    let (out, end) = judge(&["It works\n", "- yes\n", "It  works.\n"], false);
    assert_eq!(out.concat(), "It works\n- yes");
    assert!(end.repeated);
}

#[test]
fn a_full_stop_within_a_number_or_before_more_marks_is_not_an_end() {
    let (out, end) = judge(&["It takes 3", ".5 s", "...", " Then more"], false);
    assert_eq!(out, ["", "", "", "It takes 3.5 s..."]);
    assert_eq!(end, Judged { text: " Then more".into(), repeated: false });
}

#[test]
fn sentences_without_a_letter_never_count_as_repeats() {
    let (out, end) = judge(&["1. Check.\n", "2. Log.\n", "1. Retry.\n", "...\n", "..."], false);
    assert_eq!(out.concat(), "1. Check.\n2. Log.\n1. Retry.\n...");
    assert_eq!(end, Judged { text: "\n...".into(), repeated: false });
}

#[test]
fn the_last_sentence_is_judged_at_the_end_and_a_cut_one_that_begins_a_said_one_goes_too() {
    // Ended by the model, the same words again.
    let (out, end) = judge(&["It is a breaker.", " It is a breaker"], false);
    assert_eq!((out.concat(), end.repeated), ("It is a breaker.".into(), true));
    // Cut at the most tokens, the beginning of a sentence said before.
    let (_, end) = judge(&["It is a breaker.", " It is a"], true);
    assert!(end.repeated);
    // Not cut short, a shorter sentence is its own; nor is a word's beginning one.
    assert_eq!(judge(&["It is a breaker.", " It is"], false).1, Judged { text: " It is".into(), repeated: false });
    assert!(!judge(&["It is a breaker.", " It is a bre"], true).1.repeated);
}

#[test]
fn the_last_piece_is_judged_with_the_held_text() {
    let mut s = Sentences::default();
    assert_eq!(s.push("Go on").text, "");
    assert_eq!(s.finish(". Go on. Stop", false), Judged { text: "Go on.".into(), repeated: true });
    let mut s = Sentences::default();
    s.push("One.");
    assert_eq!(s.finish(" Two.\n", false), Judged { text: "One. Two.\n".into(), repeated: false });
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

/// The system prompt of a persona's reply, without what it recalled.
const HELPER: &str = "You are helper, the team's generalist assistant, in a group chat.\n\
                      Answer the last message in one or two short sentences.";

/// The question of the issue, which this model file, greedy, answers without a loop.
const CIRCUIT_BREAKER: &str = "alice: What is a circuit breaker in distributed systems?";

/// A question SmolLM2-135M, greedy, answers with its first sentence, then one sentence four
/// times.
const FLAKY: &str = "ivan: The tests in tests/flow.rs are flaky on CI. What should I look at?";

fn reply(question: &str, repetition: Repetition) -> GenerateRequest {
    let messages = vec![ChatMessage::system(HELPER), ChatMessage::user(question)];
    GenerateRequest { repetition, ..GenerateRequest::new(messages, 64) }
}

fn generate(req: &GenerateRequest) -> Generation {
    llm().generate(req, |_| ControlFlow::Continue(())).unwrap()
}

/// A sentence of `text` that is there twice, as a reader sees it (split at every `.`, `!`, `?`
/// and newline, compared normalised).
fn said_twice(text: &str) -> Option<String> {
    let sentences: Vec<String> =
        text.split(['.', '!', '?', '\n']).map(normalize).filter(|s| s.chars().any(char::is_alphabetic)).collect();
    sentences.iter().enumerate().find(|(i, s)| sentences[..*i].contains(s)).map(|(_, s)| s.clone())
}

/// `n` consecutive words of `question` that `text` has, compared normalised.
fn copied(text: &str, question: &str, n: usize) -> Option<String> {
    let words = |t: &str| normalize(t).split(' ').map(str::to_string).collect::<Vec<_>>();
    let (answer, asked) = (words(text), words(question));
    answer.windows(n).find(|w| asked.windows(n).any(|a| a == *w)).map(|w| w.join(" "))
}

#[test]
fn a_reply_that_loops_and_echoes_unguarded_repeats_no_sentence_and_copies_no_five_words_guarded() {
    // The test can fail: unguarded, the answer does both.
    let loose = generate(&reply(FLAKY, Repetition::default()));
    assert!(said_twice(&loose.text).is_some(), "{loose:?}");
    assert!(copied(&loose.text, FLAKY, 5).is_some(), "{loose:?}");
    for question in [FLAKY, CIRCUIT_BREAKER] {
        let guarded = generate(&reply(question, Decoding::DEFAULT_REPETITION));
        assert_eq!(said_twice(&guarded.text), None, "{guarded:?}");
        assert_eq!(copied(&guarded.text, question, 5), None, "{guarded:?}");
        assert!(guarded.text.split_whitespace().count() >= 5, "an answer, not a word: {guarded:?}");
    }
}

#[test]
fn a_repeated_sentence_ends_the_answer_before_it_and_none_of_it_is_streamed() {
    let loose = generate(&reply(FLAKY, Repetition::default()));
    let only_sentences = Repetition { stop_repeated_sentence: true, ..Repetition::default() };
    let mut streamed = String::new();
    let cut = llm()
        .generate(&reply(FLAKY, only_sentences), |piece| {
            streamed.push_str(piece);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(cut.stop, Stop::Repetition, "{cut:?}");
    assert_eq!(streamed, cut.text);
    // The same tokens up to the repeat: the unguarded answer's beginning, each sentence once.
    assert!(loose.text.starts_with(&cut.text) && loose.text.len() > cut.text.len(), "{loose:?}\n{cut:?}");
    assert_eq!(said_twice(&cut.text), None, "{cut:?}");
    assert_eq!(cut.text, cut.text.trim_end(), "no whitespace left before the cut sentence");
}

#[test]
fn guarded_answers_are_the_same_batched_or_alone() {
    let questions = [
        FLAKY,
        CIRCUIT_BREAKER,
        "dave: @helper please summarize what we discussed about the staging deploy",
        "erin: The deploy to staging failed with a timeout on the database migration. Any idea what to check first?",
        "frank: What does a mutex protect?",
        "grace: Can you explain what a KV cache is?",
    ];
    let reqs: Vec<GenerateRequest> = questions.iter().map(|q| reply(q, Decoding::DEFAULT_REPETITION)).collect();
    let config =
        BatchConfig { max_batch: reqs.len(), kv_bytes: 256 << 20, prefix_reuse: true, step_tokens: STEP_TOKENS };
    let mut engine = llm().engine::<usize>(config);
    for (i, req) in reqs.iter().enumerate() {
        let Ok(ready) = engine.prepare(Work::Generate(req.clone()), i, Box::new(|_| ControlFlow::Continue(()))) else {
            panic!("request {i} is refused")
        };
        engine.admit(ready);
    }
    let mut together: Vec<Option<Generation>> = vec![None; reqs.len()];
    while !engine.is_empty() {
        for (i, outcome) in engine.step() {
            let Outcome::Generated(Ok(g)) = outcome else { panic!("{outcome:?}") };
            together[i] = Some(g);
        }
    }
    assert!(engine.stats().batched > engine.stats().passes, "decoded together: {:?}", engine.stats());
    for (req, got) in reqs.iter().zip(together) {
        let (got, alone) = (got.expect("answered"), generate(req));
        assert_eq!((&got.text, got.tokens_out, got.stop), (&alone.text, alone.tokens_out, alone.stop));
    }
}
