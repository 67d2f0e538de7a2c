//! Supervision: restarts with state restored from storage, escalation, dead letters.

use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen, PersonaStatus};
use mindfleet_core::record::Verdict;

use crate::util::*;

async fn warm_up(fleet: &mindfleet::Fleet) {
    for i in 0..3 {
        let ack = fleet.inject(chat("general", "alice", &format!("@helper remember item {i}"))).await.unwrap();
        decision(fleet, "helper", &ack.event_id).await;
    }
    assert!(fleet.wait_idle(DEADLINE).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_panics_is_restarted_with_its_state_intact() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    warm_up(&fleet).await;
    let before = dump(&fleet).await;
    let b = persona(&before, "helper");
    assert!(b.working_memory.len >= 3);
    for (target, label) in [
        (FaultTarget::WorkingMemory, "working_memory"),
        (FaultTarget::SelfState, "self_state"),
        (FaultTarget::Inbox, "inbox"),
    ] {
        fleet.fault("helper", Fault { target, when: FaultWhen::Now }).await.unwrap();
        let after = poll(&format!("{label} restarted"), || async {
            let d = dump(&fleet).await;
            let p = persona(&d, "helper");
            let c = match target {
                FaultTarget::WorkingMemory => &p.actors.working_memory,
                FaultTarget::SelfState => &p.actors.self_state,
                _ => &p.actors.inbox,
            };
            (c.restarts == 1 && c.status == "running").then(|| d.clone())
        })
        .await;
        let a = persona(&after, "helper");
        assert_eq!(a.working_memory.recent, b.working_memory.recent, "working memory after {label} restart");
        assert_eq!(a.self_state, b.self_state, "self-state after {label} restart");
        assert!(a.actors.inbox.last_error.is_some() || target != FaultTarget::Inbox);
    }
    // Still working after three restarts.
    let ack = fleet.inject(chat("general", "alice", "@helper still there?")).await.unwrap();
    assert_eq!(decision(&fleet, "helper", &ack.event_id).await.verdict, Verdict::Engage);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_storm_escalates_and_the_fleet_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    // The inbox panics now and on every start: 3 restarts within 5 s, then the persona
    // fails; the persona's own restarts fail in turn, so it is stopped for good.
    fleet.fault("reviewer", Fault { target: FaultTarget::Inbox, when: FaultWhen::OnStart(1000) }).await.unwrap();
    let d = poll("reviewer failed", || async {
        let d = dump(&fleet).await;
        (persona(&d, "reviewer").status == PersonaStatus::Failed).then_some(d)
    })
    .await;
    let r = persona(&d, "reviewer");
    assert_eq!(r.actors.persona.status, "failed");
    assert!(r.actors.persona.restarts >= 3, "{:?}", r.actors.persona);
    assert!(r.actors.persona.last_error.as_deref().unwrap_or("").contains("injected fault"), "{:?}", r.actors.persona);
    for other in ["helper", "scribe"] {
        assert_eq!(persona(&d, other).status, PersonaStatus::Running);
    }
    let ack = fleet.inject(chat("general", "alice", "@helper are you fine?")).await.unwrap();
    assert_eq!(decision(&fleet, "helper", &ack.event_id).await.verdict, Verdict::Engage);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_keeps_crashing_its_persona_goes_to_the_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    fleet
        .fault("helper", Fault { target: FaultTarget::Persona, when: FaultWhen::OnText("poison".into()) })
        .await
        .unwrap();
    // Addressed to the helper alone: no other persona quotes the poison in a reply.
    let mut e = chat("general", "alice", "poison pill");
    e.persona = Some("helper".into());
    e.id = Some("poison-1".into());
    fleet.inject(e).await.unwrap();
    let d = decision(&fleet, "helper", "poison-1").await;
    assert_eq!(d.verdict, Verdict::DeadLetter);
    assert!(d.reason.contains("3 times"), "{}", d.reason);
    let dump = dump(&fleet).await;
    assert_eq!(dump.dead_letters.len(), 1);
    assert_eq!(dump.dead_letters[0].event_id, "poison-1");
    // The persona is back and handles the next event.
    let ack = fleet.inject(chat("general", "alice", "@helper something harmless")).await.unwrap();
    assert_eq!(decision(&fleet, "helper", &ack.event_id).await.verdict, Verdict::Engage);
    assert!(fleet.wait_idle(DEADLINE).await);
    fleet.shutdown(DEADLINE).await;
}
