//! Conversation memory: what personas are told, embedded in the background into their own
//! namespace of the conversation index and recalled by meaning, with the real MiniLM.

use mindfleet::Fleet;
use mindfleet::client::Client;
use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen};
use mindfleet_core::record::Action;
use mindfleet_core::sched::SchedulerMsg;
use serde_json::Value;

use crate::util::{chat, fleet_toml, persona, poll, pulled, reply_to, start};

const ON: &str = "\n[conversation]\nenabled = true\n";

const HELPER: &str = "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\", \"ops\"]\n\n[[persona]]\nname = \"scribe\"\nrole = \"note taker\"\nrooms = [\"general\"]\n";

/// Four messages on two subjects, then waits until `helper` has embedded them all.
async fn told(fleet: &Fleet) {
    for (room, from, text) in [
        ("ops", "alice", "the deploy to production failed: the canary ran out of memory"),
        ("general", "bob", "lunch is at noon on Friday, pizza again"),
        ("ops", "carol", "we moved the database migrations to run before each release"),
        ("general", "dave", "the new office plants arrived"),
    ] {
        fleet.inject(chat(room, from, text)).await.unwrap();
    }
    // (And the replies of the other persona in the rooms, taken in too.)
    poll("helper's conversation memory to hold the four messages", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "helper").conversation.clone().expect("conversation memory is on");
        (c.stored >= 4 && c.pending == 0).then_some(())
    })
    .await;
}

async fn recall(api: &Client, persona: &str, text: &str) -> Value {
    let params = [("persona", persona.to_string()), ("text", text.to_string()), ("room", "ops".to_string())];
    api.ai("recall", &params).await.unwrap()
}

fn texts(v: &Value) -> Vec<String> {
    v["recall"]["items"].as_array().unwrap().iter().map(|i| i["text"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_recalls_what_it_was_told_about_a_topic_and_only_that_and_uses_it_in_replies() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &format!("{}{ON}", fleet_toml(HELPER))).await;
    told(&fleet).await;
    let api = Client::new(&fleet.addr.to_string(), None);

    let v = recall(&api, "helper", "what went wrong with the release to production?").await;
    assert!(v["recall"].get("degraded").is_none(), "{v}");
    let got = texts(&v);
    // The answer first, or second to the other message that names releases (found by that
    // word, and said after it): ties of the fused ranks go to the newer.
    let canary = "the deploy to production failed: the canary ran out of memory";
    let answer = got.iter().position(|t| t == canary).unwrap_or(usize::MAX);
    assert!(answer < 2 && got[..2].iter().all(|t| t == canary || t.contains("release")), "{v}");
    assert!(got.iter().all(|t| !t.contains("lunch") && !t.contains("plants")), "nothing off-topic: {v}");
    let it = &v["recall"]["items"][answer];
    assert!(it["similarity"].as_f64().unwrap() > 0.25, "{v}");
    assert_eq!((it["room"].as_str(), it["from"].as_str()), (Some("ops"), Some("alice")));
    // Each persona has its own namespace: scribe heard only the general room (with the
    // replies posted there, which may quote other rooms).
    let v = recall(&api, "scribe", "what went wrong with the release to production?").await;
    let rooms: Vec<&str> =
        v["recall"]["items"].as_array().unwrap().iter().map(|i| i["room"].as_str().unwrap()).collect();
    assert!(rooms.iter().all(|r| *r == "general"), "{v}");
    let v = recall(&api, "scribe", "when is lunch?").await;
    assert_eq!(texts(&v)[0], "lunch is at noon on Friday, pizza again", "{v}");

    // Recalled messages are marked so (by this recall, and by scribe's own recall steps).
    let seq = v["recall"]["items"][0]["seq"].as_u64().unwrap();
    poll("the recall counted in storage", || async {
        let storage = fleet.storage.clone();
        let kept = tokio::task::spawn_blocking(move || storage.conversation("scribe", &[seq])).await.unwrap().unwrap();
        (kept[0].recalled >= 1 && kept[0].last_recalled_us > 0).then_some(())
    })
    .await;

    // The recall step brings what was said into the reply.
    let ack = fleet.inject(chat("ops", "erin", "@helper what happened with the production deploy?")).await.unwrap();
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.contains("\"the deploy to production failed"), "{}", reply.text);
    assert!(reply.text.contains("(alice, #ops, "), "quoted with who said it, where and when: {}", reply.text);
    // Unknown persona: named.
    let err = api.ai("recall", &[("persona", "nobody".into()), ("text", "x".into())]).await.unwrap_err();
    assert!(err.to_string().contains("unknown persona \"nobody\""), "{err}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

/// `text` said in `room` by `from`, `days` ago (its event's `ts`).
fn said_days_ago(room: &str, from: &str, text: &str, days: i64) -> (mindfleet_core::event::EventInput, String) {
    let at = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * days);
    let ts = jiff::Timestamp::from_second(at.as_second()).unwrap().to_string();
    (mindfleet_core::event::EventInput { ts: Some(ts.clone()), ..chat(room, from, text) }, ts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_keeps_the_time_it_was_said_and_since_reads_that_time() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &format!("{}{ON}", fleet_toml(HELPER))).await;
    // History replayed today: one said forty days ago, one two days ago.
    let (old, old_ts) = said_days_ago("ops", "alice", "the quarterly budget review moved to Tuesday", 40);
    let (new, new_ts) = said_days_ago("ops", "bob", "the budget spreadsheet is in the shared drive", 2);
    for e in [old, new] {
        fleet.inject(e).await.unwrap();
    }
    poll("helper's conversation memory to hold both", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "helper").conversation.clone().expect("conversation memory is on");
        (c.stored >= 2 && c.pending == 0).then_some(())
    })
    .await;
    let api = Client::new(&fleet.addr.to_string(), None);
    let budget = [("persona", "helper".to_string()), ("text", "where is the budget?".to_string())];
    let v = api.ai("recall", &budget).await.unwrap();
    let said: Vec<(&str, &str, &str)> = v["recall"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["from"].as_str().unwrap(), i["at"].as_str().unwrap(), i["text"].as_str().unwrap()))
        .collect();
    // Each recalled message says who said it and when: its event's time, not its arrival.
    assert!(said.contains(&("alice", old_ts.as_str(), "the quarterly budget review moved to Tuesday")), "{v}");
    assert!(said.contains(&("bob", new_ts.as_str(), "the budget spreadsheet is in the shared drive")), "{v}");
    // `since` reads the time it was said: a week back finds only bob's.
    let v = api.ai("recall", &[budget[0].clone(), budget[1].clone(), ("since", "7d".into())]).await.unwrap();
    assert_eq!(texts(&v), ["the budget spreadsheet is in the shared drive"], "{v}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_recalled_by_the_words_of_the_question_it_answers() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &format!("{}{ON}", fleet_toml(HELPER))).await;
    for (from, text) in [
        ("alice", "what did you look into over the weekend, mel?"),
        ("mel", "adoption agencies, mostly ones that help single parents"),
        ("alice", "nice! the weather was lovely too"),
    ] {
        fleet.inject(chat("ops", from, text)).await.unwrap();
    }
    poll("helper's conversation memory to hold all three", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "helper").conversation.clone().expect("conversation memory is on");
        (c.stored >= 3 && c.pending == 0).then_some(())
    })
    .await;
    let api = Client::new(&fleet.addr.to_string(), None);
    // The reply shares no word with the question: its keyword document holds the question.
    let v = recall(&api, "helper", "what did mel look into over the weekend?").await;
    let got = texts(&v);
    let answer = got.iter().position(|t| t.starts_with("adoption agencies")).unwrap_or(usize::MAX);
    assert!(answer < 2, "the answer among the first two: {v}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_conversation_is_consolidated_and_an_observation_recalls_its_source_message() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    // A dormant persona consolidates too; a conversation is quiet after half a second here.
    let toml = fleet_toml("[[persona]]\nname = \"diary\"\nrole = \"listener\"\nrooms = [\"talk\"]\ndormant = true\n");
    let fleet = start(dir.path(), &format!("{toml}{ON}observe_after_secs = 0.5\n")).await;
    // Said on 8 May 2023: "yesterday" is the 7th, which no message says.
    for (i, (from, text)) in [
        ("melanie", "Hey Caroline, how was your weekend?"),
        ("caroline", "I went to a pottery class yesterday, it was so much fun"),
        ("melanie", "Pottery sounds lovely, I painted a sunset with the kids"),
    ]
    .into_iter()
    .enumerate()
    {
        let ts = format!("2023-05-08T13:{}:00Z", 56 + i);
        fleet.inject(mindfleet_core::event::EventInput { ts: Some(ts), ..chat("talk", from, text) }).await.unwrap();
    }
    let c = poll("diary to consolidate the conversation", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "diary").conversation.clone().expect("conversation memory is on");
        (c.stored == 3 && c.observations_pending == 0 && c.observations > 0).then_some(c)
    })
    .await;
    // Two facts (the greeting only asks) and the session's summary; `stored` counts messages only.
    assert_eq!((c.stored, c.observations, c.observed_by.as_str()), (3, 3, "rules"), "{c:?}");
    let api = Client::new(&fleet.addr.to_string(), None);
    let params = [("persona", "diary".to_string()), ("text", "what did Caroline do on 7 May 2023?".to_string())];
    let v = api.ai("recall", &params).await.unwrap();
    let first = &v["recall"]["items"][0];
    // The observation is returned as the message it came from, marked with it.
    assert_eq!(first["text"], "I went to a pottery class yesterday, it was so much fun", "{v}");
    assert_eq!(first["from"], "caroline", "{v}");
    assert_eq!(first["at"], "2023-05-08T13:57:00Z", "{v}");
    assert_eq!(first["via"]["kind"], "fact", "{v}");
    let via = first["via"]["text"].as_str().unwrap();
    assert!(via.starts_with("Caroline went to a pottery class 7 May 2023"), "{v}");
    // Results are messages: no observation is an item of its own.
    let items = v["recall"]["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["event_id"].is_string() && i["seq"].is_u64()), "{v}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_embedding_model_recall_matches_words_and_says_it_is_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!("{}{ON}\n[models]\nembedding = \"no-model-here\"\npull = false\n", fleet_toml(HELPER));
    let fleet = start(dir.path(), &toml).await;
    told(&fleet).await;
    let api = Client::new(&fleet.addr.to_string(), None);
    let v = recall(&api, "helper", "canary memory").await;
    let degraded = v["recall"]["degraded"].as_str().expect("degraded is reported");
    assert!(degraded.contains("keyword search only"), "{v}");
    assert_eq!(texts(&v)[0], "the deploy to production failed: the canary ran out of memory", "{v}");
    let v = recall(&api, "helper", "what went wrong with the release?").await;
    assert!(texts(&v).iter().all(|t| !t.contains("lunch")), "{v}");

    // The persona's recall step reports it too.
    fleet.inject(chat("ops", "erin", "@helper any news on the canary?")).await.unwrap();
    poll("the dump to report degraded recall", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "helper").conversation.clone().unwrap();
        c.recall.starts_with("degraded: ").then_some(())
    })
    .await;
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_whose_query_is_not_embedded_within_its_wait_goes_on_by_words_and_says_so() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    // The worker gathers a query for half a second before running it: longer than a persona's
    // recall waits, not longer than a person's.
    let toml = format!("{}{ON}recall_wait_secs = 0.05\n\n[embedding]\nmax_wait_ms = 500\n", fleet_toml(HELPER));
    let fleet = start(dir.path(), &toml).await;
    told(&fleet).await;
    let ack = fleet.inject(chat("ops", "erin", "@helper any news on the canary?")).await.unwrap();
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.contains("the canary ran out of memory"), "found by its words: {}", reply.text);
    let d = fleet.dump(None).await.unwrap();
    let c = persona(&d, "helper").conversation.clone().unwrap();
    assert!(c.recall.contains("busy past the query's wait"), "{c:?}");
    assert!(c.recalls >= 1 && c.recalls_by_words >= 1, "{c:?}");
    // A person asking waits for the model.
    let api = Client::new(&fleet.addr.to_string(), None);
    let v = recall(&api, "helper", "what went wrong with the release to production?").await;
    assert!(v["recall"].get("degraded").is_none(), "{v}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_nothing_is_kept_and_recall_says_it_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &format!("{}\n[conversation]\nenabled = false\n", fleet_toml(HELPER))).await;
    fleet.inject(chat("ops", "alice", "the canary ran out of memory")).await.unwrap();
    poll("the message to be decided", || async { (fleet.storage.stats().await.unwrap().pending == 0).then_some(()) })
        .await;
    let d = fleet.dump(None).await.unwrap();
    assert!(persona(&d, "helper").conversation.is_none(), "no conversation memory in the dump");
    let api = Client::new(&fleet.addr.to_string(), None);
    let params = [("persona", "helper".to_string()), ("text", "canary".to_string())];
    match api.ai("recall", &params).await {
        Err(mindfleet::client::ClientError::Status { status: 503, message, .. }) => {
            assert!(message.contains("[conversation] enabled = false"), "{message}")
        }
        other => panic!("recall should answer 503: {other:?}"),
    }
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_kept_waiting_for_a_slot_is_promoted_to_work_and_catches_up() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let toml = format!("{}\n[scheduler]\ncheap_slots = 1\n{ON}max_lag_secs = 0.05\n", fleet_toml(HELPER));
    let fleet = start(dir.path(), &toml).await;
    // The helper's slow recall holds the fleet's one cheap slot for 4 s ...
    let slow = FaultWhen::SlowAction { action: Action::RecallMemory, ms: 4000, times: 1 };
    fleet.fault("helper", Fault { target: FaultTarget::Persona, when: slow }).await.unwrap();
    fleet.inject(chat("general", "alice", "@helper what changed in the release?")).await.unwrap();
    poll("the helper's slow step holding the slot", || async {
        let s = ractor::call_t!(fleet.scheduler.actor(), SchedulerMsg::Stats, 5000).unwrap();
        (s.urgent.running + s.interactive.running + s.work.running == 1).then_some(())
    })
    .await;
    // ... while the scribe takes in what is said: its `background` embedding waits past
    // `max_lag` and asks for a `work` slot too, which goes first once the slot is free.
    for i in 0..3 {
        fleet.inject(chat("general", "bob", &format!("note {i}: the release moved to Thursday"))).await.unwrap();
    }
    let c = poll("the scribe to embed the three notes", || async {
        let d = fleet.dump(None).await.unwrap();
        let c = persona(&d, "scribe").conversation.clone().unwrap();
        (c.stored >= 3 && c.pending == 0).then_some(c)
    })
    .await;
    assert!(c.promotions >= 1, "the wait was promoted: {c:?}");
    assert!(c.max_lag_ms >= 50, "and reported: {c:?}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}
