use super::*;
use mindfleet_core::messages::{PersonaMsg, TurnReport};
use ractor::call_t;
use tokio::sync::mpsc;

/// Stands in for a persona: passes on every turn it is given.
struct Listener;

impl Actor for Listener {
    type Msg = PersonaMsg;
    type State = mpsc::UnboundedSender<Turn>;
    type Arguments = mpsc::UnboundedSender<Turn>;

    async fn pre_start(
        &self,
        _: ActorRef<PersonaMsg>,
        tx: mpsc::UnboundedSender<Turn>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _: ActorRef<PersonaMsg>,
        msg: PersonaMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let PersonaMsg::Turn(t) = msg {
            let _ = tx.send(t);
        }
        Ok(())
    }
}

async fn persona() -> (ActorRef<PersonaMsg>, mpsc::UnboundedReceiver<Turn>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Listener, tx).await.unwrap();
    (actor, rx)
}

fn claim(name: &str, actor: &ActorRef<PersonaMsg>, wants: bool, confidence: f64) -> Box<Claim> {
    Box::new(Claim {
        event_id: "e1".into(),
        room: "team".into(),
        persona: name.into(),
        actor: Some(actor.clone()),
        node: None,
        wants,
        mentioned: false,
        named: false,
        confidence,
        suitability: 0.5,
        audience: 2,
        from_human: true,
        retry: 0,
        seq: 7,
    })
}

const ARGS: CoordinatorArgs =
    CoordinatorArgs { responders: 1, window: Duration::from_millis(100), hold: Duration::from_secs(60), rooms: None };

#[tokio::test]
async fn a_claim_sent_again_gets_the_same_answer_and_counts_once() {
    let coordinator = spawn(ARGS, None).await.unwrap();
    let (ada, mut ada_turns) = persona().await;
    let (bob, mut bob_turns) = persona().await;
    coordinator.cast(CoordinatorMsg::Claim(claim("ada", &ada, true, 0.9))).unwrap();
    coordinator.cast(CoordinatorMsg::Claim(claim("bob", &bob, true, 0.4))).unwrap();
    assert!(ada_turns.recv().await.unwrap().granted);
    assert!(!bob_turns.recv().await.unwrap().granted);
    // Both send their claims again, as if the answers were overdue.
    for (name, actor) in [("ada", &ada), ("bob", &bob)] {
        let mut again = claim(name, actor, true, 0.5);
        again.retry = 1;
        coordinator.cast(CoordinatorMsg::Claim(again)).unwrap();
    }
    let holder = ada_turns.recv().await.unwrap();
    assert!(holder.granted && !holder.assigned, "{holder:?}");
    let other = bob_turns.recv().await.unwrap();
    assert!(!other.granted, "{other:?}");
    assert_eq!(other.reason, "redundant: ada has the turn");
    let report =
        TurnReport { event_id: "e1".into(), persona: "ada".into(), posted: true, why: String::new(), redundant: false };
    coordinator.cast(CoordinatorMsg::Report(report)).unwrap();
    let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
    assert_eq!((stats.messages, stats.answered_by_one, stats.redundant), (1, 1, 1), "{stats:?}");
}

#[tokio::test]
async fn a_claim_a_new_coordinator_never_saw_is_decided_after_its_window() {
    // A coordinator restarted after the first claim: the retry alone is decided by the
    // window, since the other receiver's claim went to the one before.
    let coordinator = spawn(ARGS, None).await.unwrap();
    let (ada, mut ada_turns) = persona().await;
    let mut again = claim("ada", &ada, true, 0.9);
    again.retry = 1;
    coordinator.cast(CoordinatorMsg::Claim(again)).unwrap();
    let t = tokio::time::timeout(Duration::from_secs(10), ada_turns.recv()).await.unwrap().unwrap();
    assert!(t.granted, "{t:?}");
    let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
    assert_eq!(stats.by_window, 1, "{stats:?}");
}

#[tokio::test]
async fn a_holder_whose_actor_stops_loses_the_turn_to_the_next_claimant() {
    let coordinator = spawn(ARGS, None).await.unwrap();
    let (ada, mut ada_turns) = persona().await;
    let (bob, mut bob_turns) = persona().await;
    coordinator.cast(CoordinatorMsg::Claim(claim("ada", &ada, true, 0.9))).unwrap();
    coordinator.cast(CoordinatorMsg::Claim(claim("bob", &bob, true, 0.4))).unwrap();
    assert!(ada_turns.recv().await.unwrap().granted);
    assert!(!bob_turns.recv().await.unwrap().granted);
    // The holder crashes before it reports: the coordinator sees its actor stopped.
    ada.stop(None);
    let passed = tokio::time::timeout(Duration::from_secs(10), bob_turns.recv()).await.unwrap().unwrap();
    assert!(passed.granted && passed.assigned, "{passed:?}");
    assert_eq!(passed.reason, "ada could not answer: its actor stopped; the turn passed to bob");
    assert_eq!(passed.retake, Some(mindfleet_core::messages::Retake { seq: 7, audience: 2 }));
    let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
    assert_eq!((stats.messages, stats.answered_by_one, stats.passed), (1, 0, 1), "{stats:?}");
    let report =
        TurnReport { event_id: "e1".into(), persona: "bob".into(), posted: true, why: String::new(), redundant: false };
    coordinator.cast(CoordinatorMsg::Report(report)).unwrap();
    let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
    assert_eq!((stats.answered_by_one, stats.efficiency), (1, 1.0), "{stats:?}");
}

/// The turn-taking state machine alone, for the rules one by one.
mod rules {
    use std::time::{Duration, Instant};

    use mindfleet_core::messages::{Claim, Retake, Turn, TurnReport};

    use crate::coordinator::turns::{Timer, Turns};

    fn claim(name: &str, wants: bool, confidence: f64, suitability: f64, audience: u32, human: bool) -> Claim {
        Claim {
            event_id: "e1".into(),
            room: "team".into(),
            persona: name.into(),
            actor: None,
            node: None,
            wants,
            mentioned: false,
            named: false,
            confidence,
            suitability,
            audience,
            from_human: human,
            retry: 0,
            seq: 3,
        }
    }

    fn turns() -> Turns {
        Turns::new(1, Duration::from_millis(100), Duration::from_secs(30))
    }

    /// The answers sent since the last call, as (persona, turn).
    fn answers(t: &mut Turns) -> Vec<(String, Turn)> {
        t.answers.drain(..).map(|(c, turn)| (c.persona.to_string(), turn)).collect()
    }

    fn report(name: &str, posted: bool) -> TurnReport {
        TurnReport { event_id: "e1".into(), persona: name.into(), posted, why: "plan failed".into(), redundant: false }
    }

    #[test]
    fn a_message_is_counted_as_answered_only_once_its_reply_is_posted() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("ada", true, 0.9, 0.5, 2, true), now);
        t.claim(claim("bob", true, 0.4, 0.5, 2, true), now);
        let s = &t.stats;
        assert_eq!((s.messages, s.answered_by_one, s.answered_by_none, s.efficiency), (1, 0, 0, 0.0), "{s:?}");
        t.report(report("ada", true), now);
        let s = &t.stats;
        assert_eq!((s.answered_by_one, s.answered_by_none, s.efficiency), (1, 0, 1.0), "{s:?}");
    }

    #[test]
    fn a_holder_that_posts_nothing_passes_the_turn_to_the_next_wanting_claimant() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("cyd", false, 0.2, 0.9, 3, true), now);
        t.claim(claim("ada", true, 0.9, 0.5, 3, true), now);
        t.claim(claim("bob", true, 0.4, 0.1, 3, true), now);
        answers(&mut t);
        t.report(report("ada", false), now);
        // bob wanted it: it goes before cyd, more suitable but passing.
        let passed = answers(&mut t);
        assert_eq!(passed.len(), 1, "{passed:?}");
        let (who, turn) = &passed[0];
        assert_eq!(who, "bob");
        assert!(turn.granted && turn.assigned, "passed on: given by the coordinator {turn:?}");
        assert_eq!(turn.reason, "ada could not answer: plan failed; the turn passed to bob");
        assert_eq!(turn.retake, Some(Retake { seq: 3, audience: 3 }));
        assert_eq!((t.stats.passed, t.stats.answered_by_none), (1, 0), "bob's turn is out: not counted yet");
        // bob cannot either: the most suitable awake one is assigned.
        t.report(report("bob", false), now);
        let passed = answers(&mut t);
        assert_eq!(passed[0].0, "cyd");
        assert!(passed[0].1.granted && passed[0].1.assigned, "{passed:?}");
        assert!(
            passed[0].1.reason.starts_with("ada could not answer: plan failed; bob could not answer"),
            "{passed:?}"
        );
        t.report(report("cyd", true), now);
        assert_eq!((t.stats.answered_by_one, t.stats.passed, t.stats.assigned), (1, 2, 1), "{:?}", t.stats);
    }

    #[test]
    fn a_holder_that_does_not_report_within_the_hold_deadline_loses_the_turn() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("ada", true, 0.9, 0.5, 2, true), now);
        t.claim(claim("bob", true, 0.4, 0.5, 2, true), now);
        answers(&mut t);
        assert!(t.timers.iter().any(|(_, timer)| *timer == Timer::Check("e1".into())), "{:?}", t.timers);
        t.check("e1", now + Duration::from_secs(29), |_| true);
        assert!(answers(&mut t).is_empty(), "still within the deadline");
        t.check("e1", now + Duration::from_secs(30), |_| true);
        let passed = answers(&mut t);
        assert_eq!(passed[0].0, "bob");
        assert_eq!(
            passed[0].1.reason,
            "ada could not answer: no reply within the hold deadline; the turn passed to bob"
        );
        // ada posts after all: both replies count, and the message moves to answered by many.
        t.report(report("bob", true), now);
        t.report(report("ada", true), now);
        assert_eq!((t.stats.answered_by_one, t.stats.answered_by_many), (0, 1), "{:?}", t.stats);
    }

    #[test]
    fn a_mentioned_claim_is_decided_at_once_and_later_claims_change_nothing_but_another_mention() {
        let mentioned = |name: &str| Claim { mentioned: true, named: true, ..claim(name, true, 0.9, 0.5, 4, true) };
        let (mut t, now) = (turns(), Instant::now());
        // "@ada @dee ...", to a room of four: ada claims first, while bob, cyd and dee are busy.
        t.claim(mentioned("ada"), now);
        let first = answers(&mut t);
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(
            (first[0].0.as_str(), first[0].1.granted, first[0].1.reason.as_str()),
            ("ada", true, "mentioned (0.90)")
        );
        // The others come later: one who wants it is redundant, the other mentioned one answers too.
        t.claim(Claim { named: true, ..claim("bob", true, 0.95, 0.9, 4, true) }, now);
        t.claim(Claim { named: true, ..claim("cyd", false, 0.1, 0.5, 4, true) }, now);
        t.claim(mentioned("dee"), now);
        let later: Vec<(String, bool)> = answers(&mut t).into_iter().map(|(p, turn)| (p, turn.granted)).collect();
        let expected = [("bob", false), ("cyd", false), ("dee", true)].map(|(p, g)| (p.to_string(), g));
        assert_eq!(later, expected);
        assert_eq!((t.stats.redundant, t.stats.by_window), (1, 0), "{:?}", t.stats);
        // The window's timer, when it comes, finds nothing left to decide.
        t.window_over("e1", now + Duration::from_secs(1));
        assert!(answers(&mut t).is_empty());
        assert_eq!(t.stats.by_window, 0);
    }

    #[test]
    fn a_message_naming_a_persona_still_busy_waits_for_its_claim_and_nobody_else_answers_it() {
        let named = |name: &str, wants: bool, confidence: f64| Claim {
            named: true,
            ..claim(name, wants, confidence, 0.5, 3, true)
        };
        let (mut t, now) = (turns(), Instant::now());
        // "@ada ...": bob and cyd pass or want it; ada is busy, so the window decides.
        t.claim(named("bob", true, 0.6), now);
        t.claim(named("cyd", false, 0.2), now);
        t.window_over("e1", now);
        let first = answers(&mut t);
        assert!(first.iter().all(|(_, turn)| !turn.granted), "nobody takes ada's message: {first:?}");
        assert_eq!(first[0].1.reason, "it names somebody else, who has not claimed it yet");
        assert!(
            t.timers
                .iter()
                .any(|(after, timer)| *after == Duration::from_secs(30) && *timer == Timer::Check("e1".into()))
        );
        // A claim by nobody named meanwhile does not take it either.
        t.claim(named("dee", true, 0.9), now);
        assert!(!answers(&mut t)[0].1.granted);
        // ada is done with its work and claims: the turn is its.
        t.claim(Claim { mentioned: true, ..named("ada", true, 0.9) }, now + Duration::from_secs(3));
        let late = answers(&mut t);
        assert_eq!((late[0].0.as_str(), late[0].1.granted), ("ada", true), "{late:?}");
        t.report(report("ada", true), now + Duration::from_secs(4));
        t.check("e1", now + Duration::from_secs(30), |_| true);
        assert!(answers(&mut t).is_empty(), "answered by the one named: nothing passes on");
        assert_eq!((t.stats.answered_by_one, t.stats.answered_by_many), (1, 0), "{:?}", t.stats);

        // One named who never claims (gone for good): after the hold deadline the turn passes
        // to the best claimant, so the human is answered all the same.
        let (mut t, now) = (turns(), Instant::now());
        t.claim(named("bob", true, 0.6), now);
        t.window_over("e1", now);
        answers(&mut t);
        t.check("e1", now + Duration::from_secs(29), |_| true);
        assert!(answers(&mut t).is_empty(), "still waiting for the one named");
        t.check("e1", now + Duration::from_secs(30), |_| true);
        let passed = answers(&mut t);
        assert_eq!((passed[0].0.as_str(), passed[0].1.granted), ("bob", true), "{passed:?}");
        assert_eq!(passed[0].1.reason, "nobody it names claimed it within the hold deadline; the turn passed to bob");
    }

    #[test]
    fn a_late_claim_waits_as_a_candidate_and_never_makes_a_second_holder() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("bob", true, 0.4, 0.5, 3, true), now);
        t.window_over("e1", now);
        assert!(answers(&mut t)[0].1.granted);
        // ada claims after the decision, more confident: the turn is bob's.
        t.claim(claim("ada", true, 0.9, 0.5, 3, true), now);
        let late = answers(&mut t);
        assert!(!late[0].1.granted, "{late:?}");
        assert_eq!(late[0].1.reason, "redundant: bob has the turn");
        t.report(report("bob", false), now);
        let passed = answers(&mut t);
        assert_eq!((passed[0].0.as_str(), passed[0].1.granted), ("ada", true), "{passed:?}");
        t.report(report("ada", true), now);
        // Claims after the reply is posted (one sent again, one new) are redundant.
        let mut again = claim("ada", true, 0.9, 0.5, 3, true);
        again.retry = 1;
        t.claim(again, now);
        t.claim(claim("cyd", true, 0.9, 0.5, 3, true), now);
        let after = answers(&mut t);
        assert_eq!(after.iter().filter(|(_, turn)| turn.granted).count(), 0, "{after:?}");
        assert_eq!(after[1].1.reason, "redundant: ada answered it");
        assert_eq!((t.stats.answered_by_one, t.stats.answered_by_many), (1, 0), "{:?}", t.stats);
    }

    #[test]
    fn a_message_two_personas_wanted_is_not_decided_for_nobody_when_their_claims_come_after_the_window() {
        // Reproduces "decided already: nobody answers it": the window decided on the dormant
        // persona's pass alone, and the two wanting claims came after it.
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("scribe", false, 0.1, 0.0, 3, true), now);
        t.window_over("e1", now);
        let first = answers(&mut t);
        assert_eq!(first[0].1.reason, "nobody claimed it and nobody can take it");
        assert_eq!(t.stats.answered_by_none, 1);
        t.claim(claim("ada", true, 0.9, 0.5, 3, true), now);
        t.claim(claim("bob", true, 0.8, 0.5, 3, true), now);
        let late = answers(&mut t);
        assert!(late[0].1.granted, "{late:?}");
        assert_eq!(late[0].1.reason, "the turn was open: claim after the decision (0.90)");
        assert_eq!((late[1].1.granted, late[1].1.reason.as_str()), (false, "redundant: ada has the turn"));
        t.report(report("ada", true), now);
        assert_eq!((t.stats.answered_by_none, t.stats.answered_by_one), (0, 1), "{:?}", t.stats);
    }

    #[test]
    fn a_persona_message_is_never_assigned_even_when_its_holder_fails() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("ada", true, 0.9, 0.5, 3, false), now);
        t.claim(claim("bob", false, 0.2, 0.9, 3, false), now);
        t.claim(claim("cyd", false, 0.2, 0.9, 3, false), now);
        answers(&mut t);
        t.report(report("ada", false), now);
        assert!(answers(&mut t).is_empty(), "a passing persona is not assigned a persona message");
        assert_eq!(t.stats.messages, 0, "persona messages are not counted");
    }

    #[test]
    fn a_holder_that_claims_again_after_a_restart_keeps_the_turn() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("ada", true, 0.9, 0.5, 2, true), now);
        t.claim(claim("bob", true, 0.4, 0.5, 2, true), now);
        answers(&mut t);
        // Restarted, it handles the event again and its gate passes this time.
        t.claim(claim("ada", false, 0.1, 0.5, 2, true), now);
        let again = answers(&mut t);
        assert!(again[0].1.granted && again[0].1.assigned, "{again:?}");
        assert_eq!(again[0].1.reason, "it holds the turn: most confident claim (0.90)");
        t.check("e1", now, |_| true);
        assert!(answers(&mut t).is_empty());
    }

    #[test]
    fn a_holder_whose_draft_repeats_the_thread_does_not_pass_the_turn_on() {
        let (mut t, now) = (turns(), Instant::now());
        t.claim(claim("ada", true, 0.9, 0.5, 2, false), now);
        t.claim(claim("bob", true, 0.4, 0.5, 2, false), now);
        answers(&mut t);
        let mut r = report("ada", false);
        r.redundant = true;
        t.report(r, now);
        t.check("e1", now + Duration::from_secs(60), |_| true);
        t.claim(claim("cyd", true, 0.9, 0.5, 2, false), now);
        let after = answers(&mut t);
        assert!(after.iter().all(|(_, turn)| !turn.granted), "the next one would repeat it too: {after:?}");
    }
}
