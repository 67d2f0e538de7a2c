//! The dashboard: the page the admin server renders at `/`, its assets, and the live cards it
//! streams, over real HTTP on loopback.

use std::time::Duration;

use mindfleet_core::event::EventInput;
use serde_json::{Value, json};

use crate::util::{DEADLINE, TRIO, fleet_toml, poll, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_holds_a_card_per_persona_before_any_script_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let http = reqwest::Client::new();
    let r = http.get(format!("http://{}/", fleet.addr)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = r.text().await.unwrap();
    for (name, role, status) in
        [("helper", "assistant", "idle"), ("reviewer", "code reviewer", "idle"), ("scribe", "note taker", "dormant")]
    {
        let card =
            &html[html.find(&format!(r#"id="card-{name}""#)).unwrap_or_else(|| panic!("{name}'s card: {html}"))..];
        let card = &card[..card.find("</article>").unwrap()];
        assert!(card.contains(&format!(r#"data-status="{status}""#)) && card.contains(role), "{card}");
        assert!(card.contains("inbox</dt><dd class=\"inbox\">0 / "), "{card}");
    }
    assert!(html.contains("<title>test: mindfleet</title>"), "{html}");
    // The fleet: its health, the scheduler's classes, the supervision tree.
    let fleet_view = &html[html.find(r#"<section id="fleet""#).expect("the fleet view")..];
    let fleet_view = &fleet_view[..fleet_view.find("</section>").unwrap()];
    assert!(fleet_view.contains(r#"data-recommendation=""#) && fleet_view.contains("1 dormant"), "{fleet_view}");
    for class in ["urgent", "interactive", "work", "background"] {
        assert!(fleet_view.contains(&format!(r#"<th scope="row">{class}</th>"#)), "{fleet_view}");
    }
    assert!(
        fleet_view.contains(r#"<li data-persona="scribe">scribe <small>running, restarts 0</small><ul><li data-actor="inbox">inbox <small>running, restarts 0</small></li>"#),
        "{fleet_view}"
    );
    assert!(fleet_view.contains("shared: admin <small>running</small>, scheduler"), "{fleet_view}");
    // The room with its members, and the forms that drive the fleet.
    assert!(html.contains(r#"<article class="room" id="room-general"><h3>#general</h3><p class="members">helper, reviewer, scribe</p>"#), "{html}");
    assert!(
        html.contains(r#"<form id="inject">"#) && html.contains(r#"<option value="general">general</option>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<form id="state">"#) && html.contains(r#"<option value="scribe">scribe</option>"#),
        "{html}"
    );

    // A persona that crashed, and another whose working memory did: the tree counts both.
    use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen};
    fleet.fault("helper", Fault { target: FaultTarget::Persona, when: FaultWhen::Now }).await.unwrap();
    fleet.fault("reviewer", Fault { target: FaultTarget::WorkingMemory, when: FaultWhen::Now }).await.unwrap();
    let tree = poll("helper running again", || async {
        let html = http.get(format!("http://{}/", fleet.addr)).send().await.unwrap().text().await.unwrap();
        html.contains("helper <small>running, restarts 1").then_some(html)
    })
    .await;
    assert!(tree.contains("supervision tree <small>(2 restarts)</small>"), "{tree}");
    assert!(tree.contains(r#"helper <small>running, restarts 1, last: injected fault"#), "{tree}");
    let reviewer = &tree[tree.find(r#"<li data-persona="reviewer">"#).unwrap()..];
    assert!(
        reviewer.contains(r#"<li data-actor="working_memory">working_memory <small>running, restarts 1</small>"#),
        "{reviewer}"
    );

    let js = http.get(format!("http://{}/dashboard/dashboard.js", fleet.addr)).send().await.unwrap();
    assert_eq!(
        (js.status().as_u16(), js.headers()["content-type"].to_str().unwrap()),
        (200, "text/javascript; charset=utf-8")
    );
    assert!(js.text().await.unwrap().contains("new EventSource(\"/dashboard/events\")"));
    let missing = http.get(format!("http://{}/dashboard/nope.js", fleet.addr)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    // The guard covers the page like the API: a foreign Host is refused.
    let foreign = http.get(format!("http://{}/", fleet.addr)).header("host", "evil.example").send().await.unwrap();
    assert_eq!(foreign.status(), 403);
    fleet.shutdown(Duration::from_secs(5)).await;
}

/// An open page's stream, and what the page shows: its updates applied in order.
struct Page {
    stream: reqwest::Response,
    buf: String,
    shows: Value,
}

impl Page {
    async fn open(http: &reqwest::Client, url: &str) -> Page {
        let stream = http.get(url).send().await.unwrap();
        assert_eq!(stream.headers()["content-type"], "text/event-stream");
        Page { stream, buf: String::new(), shows: json!({"cards": []}) }
    }

    /// Applies updates until what the page shows satisfies `want`, within [`DEADLINE`]; that,
    /// and the update that made it so.
    async fn until(&mut self, want: impl Fn(&Value) -> bool) -> (Value, Value) {
        let read = async {
            loop {
                while let Some(end) = self.buf.find("\n\n") {
                    let event: String = self.buf.drain(..end + 2).collect();
                    if let Some(data) = event.strip_prefix("event: cards\ndata: ") {
                        let update: Value = serde_json::from_str(data.trim_end()).unwrap();
                        apply(&mut self.shows, &update);
                        if want(&self.shows) {
                            return (self.shows.clone(), update);
                        }
                    }
                }
                let chunk = self.stream.chunk().await.unwrap().expect("the stream goes on");
                self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        };
        tokio::time::timeout(DEADLINE, read).await.expect("the wanted cards within the deadline")
    }
}

/// What the page's script does with an update.
fn apply(shows: &mut Value, update: &Value) {
    let mut cards: Vec<Value> = shows["cards"].as_array().unwrap().clone();
    for c in update["cards"].as_array().unwrap() {
        match cards.iter_mut().find(|x| x["name"] == c["name"]) {
            Some(x) => *x = c.clone(),
            None => cards.push(c.clone()),
        }
    }
    if let Some(order) = update["order"].as_array() {
        cards = order
            .iter()
            .map(|n| cards.iter().find(|c| &c["name"] == n).expect("a card for each name").clone())
            .collect();
    }
    shows["cards"] = Value::Array(cards);
    for k in ["fleet", "generated_at", "rooms", "rooms_html", "fleet_view", "fleet_html"] {
        if let Some(v) = update.get(k) {
            shows[k] = v.clone();
        }
    }
}

fn status<'a>(frame: &'a Value, name: &str) -> &'a str {
    frame["cards"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["status"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_cards_follow_a_change_of_state_on_every_open_page() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/dashboard/events", fleet.addr);
    let (mut one, mut two) = (Page::open(&http, &url).await, Page::open(&http, &url).await);
    let (first, update) = one.until(|_| true).await;
    assert_eq!((first["fleet"].as_str(), status(&first, "helper")), (Some("test"), "idle"), "{first}");
    assert_eq!(update["order"], json!(["helper", "reviewer", "scribe"]), "the first update holds every card");
    two.until(|_| true).await;

    // Made dormant through the API: both pages see it, without reloading.
    let r = http
        .post(format!("http://{}/ai/state", fleet.addr))
        .json(&serde_json::json!({"persona": "helper", "change": "dormant"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let dormant = |f: &Value| status(f, "helper") == "dormant";
    let (seen, update) = one.until(dormant).await;
    assert_eq!(status(&seen, "reviewer"), "idle", "{seen}");
    let sent: Vec<&str> = update["cards"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(sent.contains(&"helper") && !sent.contains(&"scribe"), "only the cards that changed: {update}");
    assert!(update.get("order").is_none(), "{update}");
    let card = seen["cards"].as_array().unwrap().iter().find(|c| c["name"] == "helper").unwrap();
    assert!(
        card["html"].as_str().unwrap().contains(r#"data-status="dormant""#),
        "the card as the page shows it: {card}"
    );
    two.until(dormant).await;

    // A reply in the room reaches the pages with who wrote it and what it answers.
    let ack = fleet.inject(crate::util::chat("general", "alice", "@reviewer please look at the parser")).await.unwrap();
    let reply_of = |f: &Value| {
        let messages = f["rooms"][0]["messages"].as_array().unwrap().clone();
        messages.into_iter().find(|m| m["in_reply_to"] == ack.event_id.as_str())
    };
    let (seen, _) = one.until(|f| reply_of(f).is_some()).await;
    let room = &seen["rooms"][0];
    assert_eq!(room["name"], "general");
    let asked = room["messages"].as_array().unwrap().iter().find(|m| m["event_id"] == ack.event_id.as_str());
    let asked = asked.expect("the person's message is in the room too");
    assert_eq!(
        (&asked["from"], &asked["persona"], &asked["answered_by"]),
        (&json!("alice"), &json!(false), &json!(["reviewer"]))
    );
    let reply = reply_of(&seen).unwrap();
    assert_eq!((&reply["from"], &reply["persona"]), (&json!("reviewer"), &json!(true)), "{reply}");
    let html = seen["rooms_html"].as_str().unwrap();
    assert!(
        html.contains(r#"data-from="alice" data-kind="person""#) && html.contains("answered by reviewer"),
        "{html}"
    );

    // The reviewer's panel: why it engaged, and the plan that answered, step by step.
    let why = crate::util::decision(&fleet, "reviewer", &ack.event_id).await;
    let html = poll("the decision in the reviewer's panel", || async {
        let panel = http.get(format!("http://{}/dashboard/persona/reviewer", fleet.addr)).send().await.unwrap();
        assert_eq!(panel.status(), 200);
        let html = panel.text().await.unwrap();
        html.contains(&format!("<b>engage</b> {}: ", ack.event_id)).then_some(html)
    })
    .await;
    let journal = &html[html.find("<h3>Decisions <small>1–").expect("the journal")..];
    assert!(journal.contains(&mindfleet_server::dashboard::escape(&why.reason)), "{journal}");
    assert!(html.contains(r#"<li data-state="done">"#) && html.contains("<h3>Working memory"), "{html}");
    let unknown = http.get(format!("http://{}/dashboard/persona/nobody", fleet.addr)).send().await.unwrap();
    assert_eq!(unknown.status(), 404);

    // Model calls (as a model brain makes them) draw the cost chart: tokens per persona.
    crate::util::model_calls(&fleet, &[("helper", 250), ("scribe", 40)]);
    let (charted, _) = one.until(|f| f["fleet_view"]["cost"].as_array().unwrap().len() == 2).await;
    let cost = &charted["fleet_view"]["cost"];
    assert_eq!(
        (&cost[0][0], &cost[0][1], &cost[1][0], &cost[1][1]),
        (&json!("helper"), &json!(250), &json!("scribe"), &json!(40))
    );
    assert_eq!(cost[0][2].as_array().unwrap().last(), Some(&json!(250)), "the newest bucket: {cost}");
    let html = charted["fleet_html"].as_str().unwrap();
    assert!(
        html.contains(r#"<tr data-persona="helper"><th scope="row">helper</th><td>250</td>"#)
            && html.contains("<polyline"),
        "{html}"
    );

    // The fleet stops: the streams end (the page then reconnects), they do not hang.
    fleet.shutdown(Duration::from_secs(5)).await;
    let ended = tokio::time::timeout(DEADLINE, async { while let Ok(Some(_)) = one.stream.chunk().await {} }).await;
    assert!(ended.is_ok(), "the stream ended with the fleet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_pages_its_long_lists_through_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", fleet.addr);
    let mut ids = Vec::new();
    // Addressed to helper in a room of its own: its journal holds these twelve and nothing
    // else (in `general`, the others' replies would come to it too).
    for i in 0..12 {
        let event = EventInput {
            persona: Some("helper".into()),
            ..crate::util::chat("notes", "alice", &format!("note {i} on the docs"))
        };
        ids.push(fleet.inject(event).await.unwrap().event_id);
    }
    // The panel opens on the newest ten decisions, no cursor yet.
    let html = poll("twelve decisions in the panel", || async {
        let html = http.get(format!("{base}/dashboard/persona/helper")).send().await.unwrap().text().await.unwrap();
        html.contains("<h3>Decisions <small>1–10 of 12</small></h3>").then_some(html)
    })
    .await;
    let journal = &html[html.find(r#"data-list="decisions""#).unwrap()..];
    let journal = &journal[..journal.find("</section>").unwrap()];
    assert!(journal.contains(r#"data-handle="" data-offset="0""#), "{journal}");
    assert!(
        journal.contains(r#"<button type="button" data-page="backward" disabled>newer</button> <button type="button" data-page="forward">older</button>"#),
        "{journal}"
    );
    assert!(journal.contains(&format!("{}: ", ids[11])) && !journal.contains(&format!("{}: ", ids[0])), "{journal}");

    // Older: a cursor is opened over the journal, and its second page comes back.
    let list = |q: &str| http.get(format!("{base}/dashboard/persona/helper/decisions?{q}")).send();
    let older = list("direction=forward").await.unwrap();
    assert_eq!(older.status(), 200);
    let older = older.text().await.unwrap();
    assert!(
        older.contains("<h3>Decisions <small>11–12 of 12</small></h3>") && older.contains(r#"<ol start="11">"#),
        "{older}"
    );
    assert!(older.contains(&format!("{}: ", ids[0])), "the oldest: {older}");
    let handle = older.split(r#"data-handle=""#).nth(1).unwrap().split('"').next().unwrap().to_string();
    assert!(!handle.is_empty(), "{older}");
    // The same cursor as the CLI's: it pages back, and `rag fetch` reads it too.
    let newer = list(&format!("handle={handle}&direction=backward")).await.unwrap().text().await.unwrap();
    assert!(newer.contains("1–10 of 12") && newer.contains(&format!("{}: ", ids[11])), "{newer}");
    let r = http.post(format!("{base}/rag/fetch")).json(&json!({"handle": handle, "offset": 10})).send().await.unwrap();
    let page: Value = r.json().await.unwrap();
    assert_eq!(
        (page["total_count"].as_u64(), page["entries"][1]["event_id"].as_str()),
        (Some(12), Some(ids[0].as_str())),
        "{page}"
    );

    // Closed (as the page does when the panel closes), the cursor is gone: a clear 404.
    let r = http.post(format!("{base}/rag/close")).json(&json!({"handle": handle})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let gone = list(&format!("handle={handle}&direction=forward")).await.unwrap();
    assert_eq!(gone.status(), 404);
    assert!(gone.text().await.unwrap().contains("cursor expired or was closed: reopen the panel"));
    // Working memory pages the same way; an unknown list or persona is a 404.
    let memory = http.get(format!("{base}/dashboard/persona/helper/memory")).send().await.unwrap();
    assert_eq!(memory.status(), 200);
    assert!(memory.text().await.unwrap().contains(r#"data-list="memory""#));
    for path in ["helper/plans", "nobody/decisions"] {
        let r = http.get(format!("{base}/dashboard/persona/{path}")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_token_the_page_asks_for_it_and_its_cookie_opens_the_page_and_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::util::config(dir.path(), &fleet_toml(TRIO));
    cfg.admin.token = Some("s3cret".into());
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    let r = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let html = r.text().await.unwrap();
    assert!(
        html.contains(r#"<form method="post" action="/dashboard/login">"#) && !html.contains("card-helper"),
        "{html}"
    );
    // The login page's style is served without the token; nothing else is.
    assert_eq!(http.get(format!("{base}/dashboard/dashboard.css")).send().await.unwrap().status(), 200);
    assert_eq!(http.get(format!("{base}/dashboard/events")).send().await.unwrap().status(), 401);

    let login = |token: &str| {
        let form =
            http.post(format!("{base}/dashboard/login")).header("content-type", "application/x-www-form-urlencoded");
        form.body(format!("token={token}")).send()
    };
    let wrong = login("guess").await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().await.unwrap().contains("That is not the token."));
    let right = login("s3cret").await.unwrap();
    assert_eq!((right.status().as_u16(), right.headers()["location"].to_str().unwrap()), (303, "/"));
    let cookie = right.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_string();

    let page = http.get(format!("{base}/")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(r#"id="card-helper""#));
    let stream = http.get(format!("{base}/dashboard/events")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    drop(stream);
    let forged = http.get(format!("{base}/")).header("cookie", "mindfleet_token=s3cres").send().await.unwrap();
    assert_eq!(forged.status(), 401);
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}
