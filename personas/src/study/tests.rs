use super::*;

fn passage(cite: &str, text: &str) -> Source {
    Source { cite: cite.into(), kind: "text".into(), symbol: None, text: text.into(), score: 0.7 }
}

#[test]
fn the_topic_is_the_content_words_of_the_question() {
    assert_eq!(topic_of("@ada how does the circuit breaker handle retries?"), "circuit breaker handle retries");
    assert_eq!(topic_of("what is it?"), "");
    assert_eq!(topic_of("Retries, retries and RETRIES"), "retries");
}

#[test]
fn a_reply_that_does_not_know_is_a_gap() {
    assert!(says_unsure("Honestly, I don’t know how that works."));
    assert!(says_unsure("I'm not sure; ask the reviewer."));
    assert!(!says_unsure("The breaker opens after five failures."));
}

#[test]
fn the_question_is_the_first_line_that_asks_something() {
    assert_eq!(
        parse_question("1. Question: How many failures open the breaker?\nmore").as_deref(),
        Some("How many failures open the breaker?")
    );
    assert_eq!(parse_question("The breaker opens."), None);
    assert_eq!(parse_question("Why?"), None, "a question needs words to be about something");
}

#[test]
fn an_answer_is_graded_by_finding_its_source_and_what_the_source_supports() {
    let source =
        passage("docs/breaker.md:1-4", "The breaker opens after five consecutive failures and closes after a probe.");
    let cited = vec!["docs/breaker.md:2-6".to_string()];
    let good = grade("It opens after five consecutive failures.", &source, &cited);
    assert!((good - 1.0).abs() < 1e-9, "{good}");
    let unsupported = grade("It uses exponential backoff with jitter.", &source, &cited);
    assert!((0.5..0.7).contains(&unsupported), "{unsupported}");
    let elsewhere = grade("It opens after five consecutive failures.", &source, &["src/lib.rs:1-4".to_string()]);
    assert!((elsewhere - 0.5).abs() < 1e-9, "{elsewhere}");
    assert_eq!(grade("", &source, &[]), 0.0);
}

#[test]
fn a_gap_is_noted_once_and_a_studied_topic_waits_unless_asked() {
    let mut b = StudyBook::default();
    assert!(b.note("retries", "knowledge search found nothing relevant", 0, false));
    assert!(b.note("retries", "said it does not know", 1, false));
    assert_eq!(b.gaps.len(), 1);
    assert_eq!(b.gaps[0].mentions, 2);
    assert!(!b.note("", "nothing", 2, false));
    let run = b.start(3).unwrap();
    assert_eq!(run.session.topic, "retries");
    assert!(b.start(4).is_some(), "the running session stays");
    let s = b.finish(5).unwrap();
    assert_eq!((s.started_us, s.finished_us), (3, 5));
    assert!(!b.note("retries", "again", 6, false), "studied lately");
    assert!(b.note("retries", "asked by the admin", 7, true), "a person can still ask");
    assert!(b.note("backoff", "asked by the admin", 8, true));
    assert_eq!(b.gaps[0].topic, "backoff", "asked first goes first");
}

#[test]
fn a_session_asks_and_answers_each_passage_then_ends_with_its_score() {
    let gap = StudyGap { topic: "breaker".into(), why: "test".into(), noted_us: 0, mentions: 1 };
    let mut run = Run::new(&gap, 10);
    let passages = vec![passage("a.md:1-2", "one"), passage("b.md:1-2", "two")];
    assert!(!run.apply(StudyStep::Found(Ok(passages))));
    for i in 0..2 {
        assert_eq!(run.stage, Stage::Ask(i));
        assert!(!run.apply(StudyStep::Asked { question: format!("q{i}?"), tokens: 5 }));
        assert_eq!(run.stage, Stage::Answer(i));
        let answer = StudyAnswer {
            question: format!("q{i}?"),
            answer: "a".into(),
            source: "a.md:1-2".into(),
            cited: vec![],
            grade: if i == 0 { 1.0 } else { 0.5 },
            by: "model".into(),
        };
        let over = run.apply(StudyStep::Answered { answer, tokens: 7 });
        assert_eq!(over, i == 1);
    }
    assert_eq!(run.session.outcome, "studied");
    assert_eq!(run.session.tokens, 24);
    assert!((run.session.score - 0.75).abs() < 1e-9);

    let mut empty = Run::new(&gap, 10);
    assert!(empty.apply(StudyStep::Found(Ok(vec![]))));
    assert_eq!(empty.session.outcome, "nothing in the index about it");
}

#[test]
fn a_training_record_is_a_chat_with_its_sources() {
    let a = StudyAnswer {
        question: "How many failures open the breaker?".into(),
        answer: "Five.".into(),
        source: "docs/breaker.md:1-4".into(),
        cited: vec!["docs/breaker.md:1-4".into()],
        grade: 1.0,
        by: "model".into(),
    };
    let s = StudySession {
        topic: "breaker".into(),
        why: "test".into(),
        started_us: 1,
        finished_us: 2,
        answers: vec![a.clone()],
        score: 1.0,
        outcome: "studied".into(),
        tokens: 0,
    };
    let line = serde_json::to_string(&training_record("ada", "reviewer", &s, &a)).unwrap();
    assert!(!line.contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let roles: Vec<&str> = v["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant"]);
    assert!(v["messages"][2]["content"].as_str().unwrap().ends_with("(sources: docs/breaker.md:1-4)"));
    assert_eq!(v["metadata"]["source"], "docs/breaker.md:1-4");
    let k = knowledge_of(&s).unwrap();
    assert_eq!((k.topic.as_str(), k.sources.as_slice()), ("breaker", &["docs/breaker.md:1-4".to_string()][..]));
}
