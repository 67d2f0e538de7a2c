//! Conversation memory: what personas are told, embedded in the background into their own
//! namespace of the conversation index and recalled by meaning, with the real MiniLM.

use mindfleet::Fleet;
use mindfleet::client::Client;
use serde_json::Value;

use crate::util::{chat, fleet_toml, persona, poll, pulled, start};

const HELPER: &str = "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\", \"ops\"]\n\n[[persona]]\nname = \"scribe\"\nrole = \"note taker\"\nrooms = [\"general\"]\n";

const ON: &str = "\n[conversation]\nenabled = true\n";

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
    assert_eq!(got[0], "the deploy to production failed: the canary ran out of memory", "{v}");
    assert!(got.iter().all(|t| !t.contains("lunch") && !t.contains("plants")), "nothing off-topic: {v}");
    let first = &v["recall"]["items"][0];
    assert!(first["similarity"].as_f64().unwrap() > 0.25, "{v}");
    assert_eq!((first["room"].as_str(), first["from"].as_str()), (Some("ops"), Some("alice")));
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
    let reply = poll("helper's reply", || async {
        fleet.dump(None).await.unwrap().outbox.into_iter().find(|o| o.in_reply_to == ack.event_id)
    })
    .await;
    assert!(reply.text.contains("Earlier, alice said in #ops: \"the deploy to production failed"), "{}", reply.text);
    // Unknown persona: named.
    let err = api.ai("recall", &[("persona", "nobody".into()), ("text", "x".into())]).await.unwrap_err();
    assert!(err.to_string().contains("unknown persona \"nobody\""), "{err}");
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
