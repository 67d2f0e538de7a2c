//! One primary reply per undirected human message on a real fleet (rules brain): the holder
//! of a room's turn that cannot answer passes it on.

use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen};
use mindfleet_core::record::{Action, Verdict};

use crate::util::*;

/// Three awake personas in `team`; `ada` knows rollouts, so it is the most confident claimant
/// on a rollout question. The claim window is the coordinator's safety net when a claim is slow
/// (it decides as soon as all three are in): long enough that a loaded machine cannot make ada's
/// claim late, as 3 x 300 ms once did.
const TEAM: &str = r#"
[coordination]
window_ms = 2000

[[persona]]
name = "ada"
role = "release engineer"
rooms = ["team"]
expertise = ["rollout", "deploy"]

[[persona]]
name = "bob"
role = "generalist"
rooms = ["team"]

[[persona]]
name = "cyd"
role = "generalist"
rooms = ["team"]
"#;

fn fault(when: FaultWhen) -> Fault {
    Fault { target: FaultTarget::Persona, when }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_of_a_turn_killed_before_it_posts_passes_it_on_and_the_message_is_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TEAM)).await;
    // ada drafts slowly, so it can be killed while it holds the turn.
    let slow = FaultWhen::SlowAction { action: Action::DraftReply, ms: 1500, times: 1 };
    fleet.fault("ada", fault(slow)).await.unwrap();
    // The marker is past what a reply quotes of the message (80 characters) and what a recalled
    // memory of it shows (120), so only the message itself crashes ada again.
    let text = format!(
        "how is the rollout and deploy going today, can anyone give the team a status? {} zq-kill-marker",
        "please ".repeat(20)
    );
    let mut e = chat("team", "alice", &text);
    e.id = Some("rollout-1".into());
    let ack = fleet.inject(e).await.unwrap();
    assert_eq!(ack.personas.len(), 3);
    // The coordinator decided when the others stay silent: ada holds the turn.
    for other in ["bob", "cyd"] {
        let d = decision(&fleet, other, "rollout-1").await;
        assert!(d.reason.contains("ada has the turn"), "{other}: {}", d.reason);
    }
    // Killed before it posts; its event crashes it again when it comes back, so it never
    // claims again.
    fleet.fault("ada", fault(FaultWhen::OnText("zq-kill-marker".into()))).await.unwrap();
    fleet.fault("ada", fault(FaultWhen::Now)).await.unwrap();

    let reply = reply_to(&fleet, "rollout-1").await;
    assert_ne!(reply.persona, "ada", "{reply:?}");
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let replies: Vec<&str> =
        d.outbox.iter().filter(|o| o.in_reply_to == "rollout-1").map(|o| o.persona.as_str()).collect();
    assert_eq!(replies, [reply.persona.as_str()], "exactly one reply");
    let c = &d.coordination;
    // (A persona's reply may pass its turn too: the figure counts every message.)
    assert_eq!((c.messages, c.answered_by_one, c.answered_by_many), (1, 1, 0), "{c:?}");
    assert!(c.passed >= 1, "{c:?}");
    // The persona the turn passed to says why it answered after all.
    let taken = persona(&d, &reply.persona)
        .decisions
        .iter()
        .find(|x| x.event_id == "rollout-1" && x.verdict == Verdict::Engage)
        .unwrap_or_else(|| panic!("{}'s engaged decision", reply.persona));
    assert!(taken.reason.contains("ada could not answer: its actor stopped"), "{}", taken.reason);
    assert_eq!(decision(&fleet, "ada", "rollout-1").await.verdict, Verdict::DeadLetter);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_post_its_reply_passes_the_turn_on() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TEAM)).await;
    // Every attempt of ada's to post fails: its plan ends without a reply.
    let fail = FaultWhen::FailAction {
        action: Action::PostReply,
        class: mindfleet_core::record::ErrorClass::AccessDenied,
        times: 10,
    };
    fleet.fault("ada", fault(fail)).await.unwrap();
    let mut e = chat("team", "alice", "how is the rollout and deploy going today?");
    e.id = Some("rollout-2".into());
    fleet.inject(e).await.unwrap();
    let reply = reply_to(&fleet, "rollout-2").await;
    assert_ne!(reply.persona, "ada", "{reply:?}");
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    assert_eq!(d.outbox.iter().filter(|o| o.in_reply_to == "rollout-2").count(), 1);
    let c = &d.coordination;
    assert_eq!((c.messages, c.answered_by_one, c.answered_by_many), (1, 1, 0), "{c:?}");
    let taken = persona(&d, &reply.persona)
        .decisions
        .iter()
        .find(|x| x.event_id == "rollout-2" && x.verdict == Verdict::Engage)
        .unwrap_or_else(|| panic!("{}'s engaged decision", reply.persona));
    assert!(taken.reason.contains("ada could not answer: no reply posted"), "{}", taken.reason);
    assert_eq!(taken.by, "coordinator/assigned");
    fleet.shutdown(DEADLINE).await;
}

/// Three personas that all know rollouts: a persona's reply on one draws a reply from another.
const KEEN: &str = r#"
[[persona]]
name = "ada"
role = "release engineer"
rooms = ["team"]
expertise = ["rollout", "deploy", "status"]

[[persona]]
name = "bob"
role = "release engineer"
rooms = ["team"]
expertise = ["rollout", "deploy", "status"]

[[persona]]
name = "cyd"
role = "release engineer"
rooms = ["team"]
expertise = ["rollout", "deploy", "status"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_reply_that_repeats_the_reply_it_answers_is_withheld_and_journaled_as_redundant() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(KEEN)).await;
    let mut e = chat("team", "alice", "what is the status of the rollout and the deploy?");
    e.id = Some("status-1".into());
    fleet.inject(e).await.unwrap();
    let first = reply_to(&fleet, "status-1").await;
    // The first reply goes to the two others; the one that takes it up drafts "I'll take it from
    // here" on it, which says again what the first said: withheld.
    let withheld = poll("a draft on the first reply withheld as redundant", || async {
        let storage = fleet.storage.clone();
        let all = tokio::task::spawn_blocking(move || storage.all_decisions()).await.unwrap().unwrap();
        all.into_iter().find(|(_, d)| d.event_id == first.event_id && d.by == "redundancy/redundant")
    })
    .await;
    let (who, d) = withheld;
    assert_ne!(who, first.persona);
    assert_eq!(d.verdict, Verdict::Ignore);
    let repeats = format!("redundant: the draft repeats {}'s reply {}", first.persona, first.event_id);
    assert!(d.reason.contains(&repeats), "{}", d.reason);
    assert!(fleet.wait_idle(DEADLINE).await);
    let dump = dump(&fleet).await;
    let answers: Vec<&str> =
        dump.outbox.iter().filter(|o| o.in_reply_to == first.event_id).map(|o| o.text.as_str()).collect();
    assert!(answers.is_empty(), "nothing posted on the first reply: {answers:?}");
    assert_eq!(dump.outbox.iter().filter(|o| o.in_reply_to == "status-1").count(), 1);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_personas_a_person_names_both_answer_though_their_replies_are_alike() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(KEEN)).await;
    // bob drafts after ada posted: its draft is checked against ada's reply (and not withheld).
    let slow = FaultWhen::SlowAction { action: Action::DraftReply, ms: 1000, times: 1 };
    fleet.fault("bob", fault(slow)).await.unwrap();
    let mut e = chat("team", "alice", "@ada @bob what is the status of the rollout?");
    e.id = Some("both-1".into());
    fleet.inject(e).await.unwrap();
    let both = poll("both named personas' replies", || async {
        let d = dump(&fleet).await;
        let mut who: Vec<String> =
            d.outbox.iter().filter(|o| o.in_reply_to == "both-1").map(|o| o.persona.clone()).collect();
        who.sort();
        (who.len() == 2).then_some(who)
    })
    .await;
    assert_eq!(both, ["ada", "bob"]);
    fleet.shutdown(DEADLINE).await;
}
