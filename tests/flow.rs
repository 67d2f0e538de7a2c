//! The path of an event: injection -> gate -> scheduler -> reply in the outbox and the room.

use mindfleet_core::event::SenderKind;
use mindfleet_core::record::Verdict;

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inject_leads_to_decision_and_outbox_reply() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let mut e = chat("general", "alice", "@reviewer can you review auth.rs?");
    e.id = Some("ev-review-1".into());
    let ack = fleet.inject(e).await.unwrap();
    assert_eq!(ack.event_id, "ev-review-1");
    assert!(ack.accepted && !ack.duplicate);
    assert_eq!(ack.personas, ["helper", "reviewer", "scribe"]);

    let d = decision(&fleet, "reviewer", "ev-review-1").await;
    assert_eq!(d.verdict, Verdict::Engage);
    assert!(d.reason.contains("mentioned"), "{}", d.reason);
    let out = poll("the reviewer's reply in the outbox", || async {
        dump(&fleet).await.outbox.into_iter().find(|o| o.persona == "reviewer" && o.in_reply_to == "ev-review-1")
    })
    .await;
    assert_eq!(out.room, "general");
    assert_eq!(out.brain, "rules");
    assert!(out.text.starts_with("@alice"), "{}", out.text);

    // The reply is delivered back into the room as a persona event the others decide on.
    let seen = decision(&fleet, "helper", &out.event_id).await;
    assert_ne!(seen.verdict, Verdict::Skipped);
    assert!(fleet.wait_idle(DEADLINE).await);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_always_engages_even_a_dormant_persona() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let ack = fleet.inject(chat("general", "alice", "@scribe please take notes")).await.unwrap();
    let d = decision(&fleet, "scribe", &ack.event_id).await;
    assert_eq!(d.verdict, Verdict::Engage);
    assert_eq!(d.by, "fast_path/mention");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_persona_ignores_undirected_chat_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let ack = fleet.inject(chat("general", "alice", "good morning everyone")).await.unwrap();
    let d = decision(&fleet, "scribe", &ack.event_id).await;
    assert_eq!(d.verdict, Verdict::Ignore);
    assert!(d.reason.contains("dormant"), "{}", d.reason);
    // The awake personas engage with the same message.
    assert_eq!(decision(&fleet, "helper", &ack.event_id).await.verdict, Verdict::Engage);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_messages_are_ignored_and_persona_chatter_dies_out() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let mut own = chat("general", "helper", "a note from helper to the room");
    own.sender_kind = SenderKind::Persona;
    let ack = fleet.inject(own).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!((d.verdict, d.by.as_str()), (Verdict::Ignore, "fast_path/own_message"));

    // Undirected human messages: the echo-storm guard stops the replies from feeding on
    // each other, so the fleet goes idle with a bounded outbox.
    for i in 0..5 {
        fleet.inject(chat("general", "alice", &format!("status update number {i}"))).await.unwrap();
    }
    assert!(fleet.wait_idle(DEADLINE).await, "persona chatter must die out");
    let d = dump(&fleet).await;
    assert!(d.outbox.len() <= 3 * 6, "{} replies to 6 messages", d.outbox.len());
    let guarded = d.personas.iter().flat_map(|p| &p.decisions).filter(|x| x.by == "fast_path/echo_storm").count();
    assert!(guarded > 0, "the echo-storm guard decided nothing");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resending_an_id_answers_duplicate_and_delivers_once() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let mut e = chat("general", "alice", "@helper once only");
    e.id = Some("same-id".into());
    let first = fleet.inject(e.clone()).await.unwrap();
    let second = fleet.inject(e).await.unwrap();
    assert!(!first.duplicate);
    assert!(second.accepted && second.duplicate);
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let engaged = verdicts(&d, "helper", Verdict::Engage).into_iter().filter(|id| id == "same-id").count();
    assert_eq!(engaged, 1);
    assert_eq!(d.admin.duplicates, 1);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directed_event_to_a_new_room_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let mut e = chat("war-room", "alice", "just for you");
    e.persona = Some("reviewer".into());
    let ack = fleet.inject(e).await.unwrap();
    assert_eq!(ack.personas, ["reviewer"]);
    assert_eq!(decision(&fleet, "reviewer", &ack.event_id).await.verdict, Verdict::Engage);
    let d = dump(&fleet).await;
    assert_eq!(d.admin.rooms["war-room"], ["reviewer"]);
    fleet.shutdown(DEADLINE).await;

    // The membership is stored: after a restart an undirected event reaches the room.
    let fleet = poll("the data dir free again", || async {
        mindfleet::Fleet::start(config(dir.path(), &fleet_toml(TRIO))).await.ok()
    })
    .await;
    let ack = fleet.inject(chat("war-room", "alice", "anyone here?")).await.unwrap();
    assert_eq!(ack.personas, ["reviewer"]);
    fleet.shutdown(DEADLINE).await;
}

/// Seven personas in one room, all awake and eager.
fn seven() -> String {
    let mut t = String::new();
    for name in ["ada", "bob", "cyd", "dee", "eve", "fay", "gus"] {
        t.push_str(&format!(
            "[[persona]]\nname = \"{name}\"\nrole = \"{name} the generalist\"\nrooms = [\"team\"]\n\n"
        ));
    }
    fleet_toml(&t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_personas_answer_each_human_message_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &seven()).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let ack = fleet
            .inject(chat("team", "alice", &format!("status question number {i}: how is the rollout going")))
            .await
            .unwrap();
        ids.push(ack.event_id);
    }
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let replies: usize = ids.iter().map(|id| d.outbox.iter().filter(|o| o.in_reply_to == *id).count()).sum();
    let per_message = replies as f64 / ids.len() as f64;
    // Why each message answered other than once was decided as it was, by every persona.
    let why = ids
        .iter()
        .filter(|id| d.outbox.iter().filter(|o| o.in_reply_to == **id).count() != 1)
        .map(|id| {
            let by: Vec<String> = d
                .personas
                .iter()
                .flat_map(|p| p.decisions.iter().filter(|x| x.event_id == *id).map(move |x| (p, x)))
                .map(|(p, x)| format!("{} {} by {}: {}", p.name, x.verdict.as_str(), x.by, x.reason))
                .collect();
            format!("{id}:\n  {}", by.join("\n  "))
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!((0.9..=1.2).contains(&per_message), "{replies} replies to {} messages\n{why}", ids.len());
    assert!(d.coordination.efficiency >= 0.9, "{:?}\n{why}", d.coordination);
    let redundant = d.personas.iter().flat_map(|p| &p.decisions).filter(|x| x.by == "coordinator/redundant").count();
    assert!(redundant > 0, "the others stayed silent as redundant");

    // A mention is always answered by the mentioned persona, and only by it.
    let ack = fleet.inject(chat("team", "alice", "@fay can you take this one")).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let who: Vec<&str> =
        d.outbox.iter().filter(|o| o.in_reply_to == ack.event_id).map(|o| o.persona.as_str()).collect();
    assert_eq!(who, ["fay"]);
    fleet.shutdown(DEADLINE).await;
}
