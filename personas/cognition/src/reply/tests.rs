use mindfleet_core::conversation::{Recalled, Said};
use mindfleet_core::event::{Event, EventInput, SenderKind, text_mentions};
use mindfleet_core::knowledge::Source;
use mindfleet_core::record::{EntryKind, WmEntry};

use super::*;

fn ev(domain: &str, from: &str, text: &str) -> Event {
    EventInput {
        domain: domain.into(),
        room: "general".into(),
        from: from.into(),
        text: text.into(),
        ..Default::default()
    }
    .validate()
    .unwrap()
}

/// A message said in #general by `from`, `min` minutes after 28 Nov 2026 14:00 UTC.
fn said(seq: u64, from: &str, min: i64, text: &str) -> Said {
    Said {
        seq,
        event_id: format!("ev-{seq}"),
        room: "general".into(),
        from: from.into(),
        text: text.into(),
        at_us: 1_795_874_400_000_000 + min * 60_000_000,
        ..Default::default()
    }
}

/// The room of a staging deploy that failed, and the lines around it.
fn room() -> Vec<Said> {
    vec![
        said(1, "alice", 0, "The deploy to staging failed with a timeout on the database migration"),
        said(2, "bob", 1, "The migration locks the orders table; I will add a statement_timeout of 30s to the runner"),
        said(3, "carol", 2, "lunch at noon anyone?"),
        said(4, "dave", 3, "I moved the release notes to the wiki"),
        said(5, "carol", 4, "the staging deploy is green again after bob's fix"),
    ]
}

fn ctx<'a>(e: &'a Event, room: &'a [Said], found: &'a [Source], recalled: &'a [WmEntry]) -> Input<'a> {
    Input {
        persona: "helper",
        event: e,
        recalled,
        conversation: &[],
        room,
        personas: &[],
        found,
        knowledge: Vec::new(),
        ask: std::borrow::Cow::Owned(Ask::of(&e.text, &e.domain, "helper")),
    }
}

fn reply_to(e: &Event, room: &[Said], found: &[Source]) -> String {
    let c = ctx(e, room, found, &[]);
    let pieces = ground(&c);
    grounded(&c, &c.ask, &pieces)
}

#[test]
fn what_one_person_said_is_answered_with_their_line_not_the_latest() {
    let e = ev("chat", "dave", "@helper what did bob say about the migration?");
    assert_eq!(Ask::of(&e.text, "chat", "helper"), Ask::SaidBy { who: "bob".into(), topic: vec!["migration".into()] });
    let r = reply_to(&e, &room(), &[]);
    assert_eq!(
        r,
        "@dave bob said about migration: \"The migration locks the orders table; I will add a statement_timeout of 30s \
         to the runner\" (bob, #general, 28 Nov 14:01)"
    );
    assert!(!r.contains("is green"), "the latest line is not bob's: {r}");
}

#[test]
fn a_summary_quotes_the_lines_on_its_topic_with_authors_and_times_in_order() {
    let e = ev("chat", "dave", "@helper please summarize what we discussed about the staging deploy");
    let r = reply_to(&e, &room(), &[]);
    let lines: Vec<&str> = r.lines().collect();
    assert!(lines[0].starts_with("@dave 2 messages on staging deploy in #general"), "{r}");
    assert!(lines[1].starts_with("- alice, #general, 28 Nov 14:00: \"The deploy to staging failed"), "{r}");
    assert!(
        lines.iter().any(|l| l.starts_with("- carol, #general, 28 Nov 14:04: \"the staging deploy is green")),
        "{r}"
    );
    assert!(!r.contains("lunch") && !r.contains("release notes"), "only what bears on the deploy: {r}");
}

#[test]
fn the_persona_own_notes_never_reach_a_reply() {
    let e = ev("chat", "erin", "@helper did the deploy go out at noon?");
    let note = |kind, text: &str| WmEntry {
        id: 1,
        domain: "chat".into(),
        kind,
        text: text.into(),
        importance: 0.9,
        event_id: None,
        relevance: 1.0,
        created_us: 0,
        last_access_us: 0,
        access_count: 0,
        expires_us: i64::MAX,
    };
    let recalled = [
        note(EntryKind::Reflection, "reflection: chat: recall_memory -> draft_reply -> post_reply worked, deploy"),
        note(EntryKind::Decision, "decision: engage on the deploy"),
        note(EntryKind::Observation, "frank in #ops: the deploy of 2.3 went out at noon"),
    ];
    let c = ctx(&e, &[], &[], &recalled);
    let pieces = ground(&c);
    let r = grounded(&c, &c.ask, &pieces);
    assert!(r.contains("the deploy of 2.3 went out at noon"), "{r}");
    assert!(!r.contains("reflection") && !r.contains("recall_memory") && !r.contains("decision:"), "{r}");
}

#[test]
fn a_code_question_cites_the_lines_that_hold_its_terms() {
    let e = ev("code", "bob", "@reviewer where is the retry backoff computed?");
    let found = [Source {
        cite: "src/net/retry.rs:10-14".into(),
        kind: "function".into(),
        symbol: Some("next_delay".into()),
        text: "pub fn next_delay(attempt: u32) -> Duration {\n    // exponential backoff, capped\n    let base = 100;\n    \
               let backoff = base << attempt.min(6);\n    Duration::from_millis(backoff)\n"
            .into(),
        score: 0.9,
    }];
    let r = reply_to(&e, &[], &found);
    assert!(
        r.starts_with("@bob on retry backoff computed, from the code: [src/net/retry.rs:10-14] (next_delay)"),
        "{r}"
    );
    // Line 11 and 13 hold "backoff"; the chunk starts at line 10.
    assert!(r.contains("line 11: `// exponential backoff, capped`") && r.contains("line 13: `let backoff"), "{r}");
}

#[test]
fn with_nothing_found_the_persona_says_what_it_would_need() {
    let e = ev("chat", "alice", "What is a circuit breaker in distributed systems?");
    let r = reply_to(&e, &room(), &[]);
    assert_eq!(
        r,
        "@alice I have nothing on circuit breaker distributed systems in what was said here or in what I can search. \
         Could you point me to a doc, a file or the person who knows?"
    );
}

#[test]
fn replies_mention_only_the_human_they_answer() {
    let e = ev("chat", "alice", "@helper what did bob say about @ops and the migration?");
    let r = reply_to(&e, &room(), &[]);
    assert_eq!(text_mentions(&r).collect::<Vec<_>>(), ["alice"], "{r}");
    let from_persona = Event { sender_kind: SenderKind::Persona, from: "ops".into(), ..e };
    let r = reply_to(&from_persona, &room(), &[]);
    assert_eq!(text_mentions(&r).count(), 0, "{r}");
    assert!(r.starts_with("ops: "), "{r}");
}

#[test]
fn recalled_lines_count_once_and_questions_and_quotes_are_not_answers() {
    let e = ev("chat", "dave", "@helper what was the timeout on the migration?");
    let mut lines = room();
    lines.push(said(6, "erin", 5, "what was the timeout on the migration again?"));
    // A persona's reply quoting bob: the original is quoted instead.
    lines.push(said(
        7,
        "ops",
        6,
        "bob said: \"The migration locks the orders table; I will add a statement_timeout of 30s to the runner\"",
    ));
    let recalled = [Recalled {
        said: lines[1].clone(),
        at: String::new(),
        relevance: 1.0,
        similarity: Some(0.8),
        via: None,
        score: 1.0,
    }];
    let c = Input { conversation: &recalled, ..ctx(&e, &lines, &[], &[]) };
    let pieces = ground(&c);
    let said: Vec<u64> =
        pieces.iter().filter_map(|p| if let Piece::Said(s) = p { Some(s.seq) } else { None }).collect();
    // Bob's line has the timeout (`statement_timeout`) and was recalled by its meaning too.
    assert_eq!(said[0], 2, "{pieces:?}");
    assert!(said.contains(&1) && !said.contains(&6) && !said.contains(&7), "{said:?}");
    assert_eq!(said.iter().filter(|s| **s == 2).count(), 1);
}

#[test]
fn the_check_finds_echoes_loops_empty_and_ungrounded_drafts() {
    let q = "The deploy to staging failed with a timeout on the database migration. Any idea what to check first?";
    let names = ["alice", "ops"];
    let material = ["bob The migration locks the orders table; add a statement_timeout of 30s".to_string()];
    let flaw = |draft: &str, material: &[String]| check(draft, q, material, &names, false).map(|f| f.flaw);
    assert_eq!(flaw(&format!("@alice {q}"), &material), Some(Flaw::Echo));
    let short = "what is the capital of France?";
    let restated = check("@alice The capital of France is Paris.", short, &[], &names, true);
    assert_eq!(restated, None, "a short answer restates the question");
    assert_eq!(flaw("@alice bob: @reviewer can you look", &[]), Some(Flaw::Ungrounded));
    assert_eq!(
        flaw("@alice I'm glad to hear you're on the team. I'm glad to hear you're on the team.", &material),
        Some(Flaw::Loop)
    );
    assert_eq!(flaw("@alice", &material), Some(Flaw::Empty));
    assert_eq!(flaw("@alice yes, staging.", &material), Some(Flaw::Empty));
    assert_eq!(
        flaw("@alice Electrical circuits regulate breakers and fuses in computers.", &material),
        Some(Flaw::Ungrounded)
    );
    assert_eq!(
        flaw("@alice The orders table lock: bob adds a statement_timeout of 30s.", &material),
        None,
        "a draft that carries the material passes"
    );
    assert_eq!(
        flaw(
            "@alice The orders table is fine, reboot kubernetes nodes, rotate certificates and restart postgres.",
            &material
        ),
        Some(Flaw::Unsupported)
    );
    // A number the material does not hold is made up.
    let review = ["dave The design review for the search service is on Monday at 10:00 in room Orion".to_string()];
    let asked = "when is the design review for the search service?";
    let invented = check("@dana The design review is on Monday at 10:32 in room Orion.", asked, &review, &names, false);
    assert_eq!(
        invented.map(|f| (f.flaw, f.detail)),
        Some((Flaw::Unsupported, "numbers not in what was found: 10:32".into()))
    );
    assert_eq!(check("@dana Monday at 10:00 in room Orion.", asked, &review, &names, false), None);
    // Words of its own beside the material's, more than one for two: it says something else.
    let apology = "@dana Dave, I'm sorry for any confusion. The design review for search services has been available on Monday at 10:00 in room Orion.";
    assert_eq!(check(apology, asked, &review, &names, false).map(|f| f.flaw), Some(Flaw::Unsupported));
    // Without material only a model trusted to know things may answer.
    assert_eq!(check("@alice Check the lock on the orders table first.", q, &[], &names, true), None);
    let note = check(&format!("@alice {q}"), q, &material, &names, false).unwrap().note();
    assert!(note.starts_with("draft repeated the message (") && note.ends_with("): grounded reply"), "{note}");
}

#[test]
fn a_tool_that_answered_is_quoted_and_its_failed_calls_are_left_to_the_journal() {
    let e = ev("chat", "alice", "@reviewer what is the last commit?");
    let source = |kind: &str, cite: &str, text: &str| Source {
        cite: cite.into(),
        kind: kind.into(),
        symbol: None,
        text: text.into(),
        score: 1.0,
    };
    let log = source(crate::mind::TOOL_KIND, "tool:git.git_log", "Message: Cap the retry backoff");
    let failed =
        source(crate::mind::TOOL_FAILED_KIND, "tool:git.git_log", "path outside the repository (access_denied)");
    let r = reply_to(&e, &[], &[log.clone(), failed.clone()]);
    assert!(r.contains("I called git.git_log, which returned: \"Message: Cap the retry backoff\""), "{r}");
    assert!(!r.contains("could not use"), "{r}");
    // Failing alone, the failure is said.
    let r = reply_to(&e, &[], &[failed]);
    assert!(r.contains("I could not use git.git_log: \"path outside the repository (access_denied)\""), "{r}");
}
