//! Signals that tell the truth: on the same fleet, the health (`/ai/health`), availability
//! (`/ai/availability`, `/ai/select-for-task`), the activity map (`/ai/activity-map`) and the
//! dashboard's badges and fleet view (`/dashboard/events`) say the same of every persona.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen, PersonaStatus};
use mindfleet_core::record::Action;
use mindfleet_core::sched::{Class, Owner, Slot, Task};
use mindfleet_core::team::Condition;
use mindfleet_server::team::condition;
use serde_json::{Value, json};

use crate::util::*;

/// One persona for each condition: `worker` will work on an event, `idler` stays idle,
/// `sleeper` is dormant, `broken` will fail for good.
const FOUR: &str = r#"
[[persona]]
name = "worker"
role = "assistant"
rooms = ["dev"]

[[persona]]
name = "idler"
role = "assistant"
rooms = ["dev"]

[[persona]]
name = "sleeper"
role = "note taker"
rooms = ["dev"]
dormant = true

[[persona]]
name = "broken"
role = "assistant"
rooms = ["dev"]
"#;

async fn get(http: &reqwest::Client, base: &str, path: &str) -> Value {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

/// The first frame of the dashboard's stream: every card and the fleet view, as a page
/// opened now shows them.
async fn dashboard(http: &reqwest::Client, base: &str) -> Value {
    let mut stream = http.get(format!("{base}/dashboard/events")).send().await.unwrap();
    let mut buf = String::new();
    let read = async {
        loop {
            if let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                if let Some(data) = event.strip_prefix("event: cards\ndata: ") {
                    return serde_json::from_str::<Value>(data.trim_end()).unwrap();
                }
                continue;
            }
            let chunk = stream.chunk().await.unwrap().expect("the stream goes on");
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    };
    tokio::time::timeout(DEADLINE, read).await.expect("a frame within the deadline")
}

/// What each view says of each persona, and of the fleet.
struct Views {
    health: Value,
    availability: Value,
    activity: Value,
    select: Value,
    page: Value,
}

impl Views {
    /// Every view, asked at once.
    async fn take(http: &reqwest::Client, base: &str) -> Views {
        let (health, availability, activity, select, page) = tokio::join!(
            get(http, base, "/ai/health"),
            get(http, base, "/ai/availability"),
            get(http, base, "/ai/activity-map"),
            get(http, base, "/ai/select-for-task?domain=chat&priority=0.5"),
            dashboard(http, base),
        );
        Views { health, availability, activity, select, page }
    }

    /// Each persona's word in each view that names one: the badge, availability's condition,
    /// and the activity map's (in every room it is in).
    fn words(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut add = |name: &Value, word: &Value| {
            out.entry(name.as_str().unwrap().to_string()).or_default().push(word.as_str().unwrap().to_string());
        };
        for c in self.page["cards"].as_array().unwrap() {
            add(&c["name"], &c["status"]);
        }
        for a in self.availability["personas"].as_array().unwrap() {
            add(&a["persona"], &a["condition"]);
        }
        for r in self.activity["rooms"].as_array().unwrap() {
            for p in r["personas"].as_array().unwrap() {
                add(&p["persona"], &p["condition"]);
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_availability_the_activity_map_and_the_badges_agree_on_every_persona() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(FOUR));
    cfg.scheduler.cheap_slots = 1;
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();

    // An idle fleet asks for work: it does not read HEALTHY.
    poll("every persona's self-state", || async {
        dump(&fleet).await.personas.iter().all(|p| p.self_state.is_some()).then_some(())
    })
    .await;
    let v = Views::take(&http, &base).await;
    assert_eq!(v.health["recommendation"], "ASSIGN_WORK", "{}", v.health);
    assert_eq!(v.page["fleet_view"]["recommendation"], "assign_work", "{}", v.page["fleet_view"]);

    // broken fails for good: its inbox panics on every start.
    fleet.fault("broken", Fault { target: FaultTarget::Inbox, when: FaultWhen::OnStart(1000) }).await.unwrap();
    poll("broken failed", || async {
        (persona(&dump(&fleet).await, "broken").status == PersonaStatus::Failed).then_some(())
    })
    .await;
    // The test holds the scheduler's only cheap slot: worker takes the event up and starts its
    // plan, whose first step waits for the slot, so every view is read while it works (and
    // while it answers them: a step that blocked it would leave its dump unanswered).
    let (tx, granted) = crossbeam_channel::unbounded();
    let hold = Task::new("test".into(), Class::Urgent, 1.0, Slot::Cheap, "hold", Owner::Channel(tx));
    fleet.scheduler.submit(Task { id: u64::MAX, ..hold });
    granted.recv_timeout(DEADLINE).expect("the slot held");
    let mut e = chat("dev", "alice", "please review the retry logic in the client");
    e.persona = Some("worker".into());
    fleet.inject(e).await.unwrap();

    let want = BTreeMap::from([
        ("broken", Condition::Failed),
        ("idler", Condition::Idle),
        ("sleeper", Condition::Dormant),
        ("worker", Condition::Working),
    ]);
    let conditions = || async {
        let d = dump(&fleet).await;
        d.personas.iter().map(|p| (p.name.clone(), condition(p))).collect::<BTreeMap<_, _>>()
    };
    let is_wanted = |got: &BTreeMap<String, Condition>| want.iter().all(|(n, c)| got.get(*n) == Some(c));
    // Each view is read from a dump of its own, and the dashboard's frame may be a tick (1 s) old:
    // a snapshot counts once the fleet was in the wanted state before and after it and every view
    // says so. Past the deadline, the last one is checked as it is, and what disagrees is named.
    let agree = |v: &Views| {
        let words = v.words();
        want.iter().all(|(n, c)| words.get(*n).is_some_and(|w| w.iter().all(|w| w == c.as_str())))
    };
    let deadline = Instant::now() + DEADLINE;
    let v = loop {
        let before = conditions().await;
        let v = Views::take(&http, &base).await;
        let settled = is_wanted(&before) && is_wanted(&conditions().await);
        if (settled && agree(&v)) || Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Each persona reads the same word in every view, and the one it should.
    let words = v.words();
    for (name, c) in &want {
        let said = &words[*name];
        assert!(said.len() >= 3, "{name} in every view: {said:?}");
        assert!(said.iter().all(|w| w == c.as_str()), "{name} should read {} everywhere: {said:?}", c.as_str());
    }

    // Health and the dashboard's fleet view count the same conditions.
    let h = &v.health;
    assert_eq!(
        (&h["personas"], &h["awake"], &h["busy"], &h["idle"], &h["dormant"], &h["down"]),
        (&json!(4), &json!(2), &json!(1), &json!(1), &json!(1), &json!(1)),
        "{h}"
    );
    // One of two awake personas idle is not more than half.
    assert_eq!(h["recommendation"], "HEALTHY", "{h}");
    let f = &v.page["fleet_view"];
    for k in ["busy", "idle", "dormant", "down", "overloaded"] {
        assert_eq!(f[k], h[k], "the dashboard's {k} and /ai/health's: {f} {h}");
    }
    assert_eq!(f["recommendation"], "healthy");

    // Availability: only the idle persona takes new work; the others say why not.
    let a = &v.availability;
    assert_eq!(a["available"], json!(["idler"]), "{a}");
    let reasons = |name: &str| {
        a["personas"].as_array().unwrap().iter().find(|p| p["persona"] == name).unwrap()["reasons"].clone()
    };
    assert!(reasons("worker").as_array().unwrap().contains(&json!("busy")), "{a}");
    assert_eq!((reasons("sleeper"), reasons("broken")), (json!(["dormant"]), json!(["failed"])), "{a}");

    // select-for-task ranks the awake personas only, and lists the others with the same reasons.
    let ranked: Vec<&str> =
        v.select["ranking"].as_array().unwrap().iter().map(|r| r["persona"].as_str().unwrap()).collect();
    assert_eq!(ranked, ["idler", "worker"], "the idle one first: {}", v.select);
    assert_eq!(
        v.select["unavailable"],
        json!([{"persona": "broken", "reasons": ["failed"]}, {"persona": "sleeper", "reasons": ["dormant"]}])
    );

    // The activity map: worker focused on its event's domain, the others counted apart.
    let m = &v.activity;
    assert_eq!((&m["idle"], &m["dormant"], &m["down"]), (&json!(1), &json!(1), &json!(1)), "{m}");
    let focused: Vec<&str> = m["domains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["personas"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()))
        .collect();
    assert_eq!(focused, ["worker"], "{m}");

    // Its work done, worker is idle in every view, and the fleet asks for work again.
    fleet.scheduler.done(u64::MAX);
    assert!(fleet.wait_idle(DEADLINE).await);
    let v = poll("worker idle everywhere", || async {
        let v = Views::take(&http, &base).await;
        v.words()["worker"].iter().all(|w| w == "idle").then_some(v)
    })
    .await;
    assert_eq!((&v.health["idle"], &v.health["recommendation"]), (&json!(2), &json!("ASSIGN_WORK")), "{}", v.health);
    assert_eq!(v.page["fleet_view"]["recommendation"], "assign_work");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_too_busy_to_answer_reads_unresponsive_everywhere_not_restarting() {
    let dir = tempfile::tempdir().unwrap();
    let two = "[[persona]]\nname = \"slow\"\nrole = \"assistant\"\nrooms = [\"dev\"]\n\n[[persona]]\nname = \"idler\"\nrole = \"assistant\"\nrooms = [\"dev\"]\n";
    let fleet = start(dir.path(), &fleet_toml(two)).await;
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();
    // A step that blocks the persona longer than the admin waits for its dump (2 s): its
    // supervisor has it running, and the dump used to call it restarting.
    let slow = FaultWhen::SlowAction { action: Action::RecallMemory, ms: 12_000, times: 1 };
    fleet.fault("slow", Fault { target: FaultTarget::Persona, when: slow }).await.unwrap();
    let mut e = chat("dev", "alice", "please look into the flaky test");
    e.persona = Some("slow".into());
    fleet.inject(e).await.unwrap();
    poll("slow's dump unanswered", || async {
        (persona(&dump(&fleet).await, "slow").status == PersonaStatus::Unresponsive).then_some(())
    })
    .await;
    let deadline = Instant::now() + DEADLINE;
    let v = loop {
        let v = Views::take(&http, &base).await;
        if v.words()["slow"].iter().all(|w| w == "unresponsive") || Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let said = &v.words()["slow"];
    assert!(said.len() >= 3 && said.iter().all(|w| w == "unresponsive"), "{said:?}");
    assert_eq!((&v.health["down"], &v.health["idle"]), (&json!(1), &json!(1)), "{}", v.health);
    assert_eq!(v.select["unavailable"], json!([{"persona": "slow", "reasons": ["unresponsive"]}]), "{}", v.select);
    // Its step over, it answers again, and reads what it does.
    assert!(fleet.wait_idle(DEADLINE).await);
    poll("slow answering again", || async {
        (condition(persona(&dump(&fleet).await, "slow")) == Condition::Idle).then_some(())
    })
    .await;
    fleet.shutdown(DEADLINE).await;
}
