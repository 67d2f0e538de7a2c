//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`, installed by `scripts/install-browser.sh`), through a few
//! calls of the W3C protocol over the HTTP client the tests already use.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::util::{TRIO, fleet_toml, poll, start};

/// Where the screenshots of the run are left, for people to look at.
fn artefact(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/e2e").join(name)
}

fn tool(env: &str, default: &str) -> String {
    let path = std::env::var(env).unwrap_or_else(|_| default.to_string());
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: run scripts/install-browser.sh (or set {env} to the binary)"
    );
    path
}

/// A chromedriver of its own, on a free port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(tool("MINDFLEET_CHROMEDRIVER", "/usr/bin/chromedriver"))
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let d = Driver { child, url: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    poll("chromedriver to be ready", || async {
        let v: Value = http.get(format!("{}/status", d.url)).send().await.ok()?.json().await.ok()?;
        (v["value"]["ready"] == true).then_some(())
    })
    .await;
    d
}

/// One browser session.
struct Session {
    http: reqwest::Client,
    base: String,
}

impl Session {
    async fn new(driver: &Driver, profile: &std::path::Path) -> Session {
        let http = reqwest::Client::new();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,800",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": tool("MINDFLEET_CHROMIUM", "/usr/bin/chromium"),
            "args": args,
        }}}});
        let v: Value =
            http.post(format!("{}/session", driver.url)).json(&caps).send().await.unwrap().json().await.unwrap();
        let id = v["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {v}"));
        Session { base: format!("{}/session/{id}", driver.url), http }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let v: Value =
            self.http.post(format!("{}{path}", self.base)).json(&body).send().await.unwrap().json().await.unwrap();
        assert!(v["value"].get("error").is_none(), "{path}: {v}");
        v["value"].clone()
    }

    async fn get(&self, path: &str) -> Value {
        let v: Value = self.http.get(format!("{}{path}", self.base)).send().await.unwrap().json().await.unwrap();
        v["value"].clone()
    }

    /// Runs `script` in the page and gives back what it returns.
    async fn eval(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []})).await
    }

    /// Leaves a screenshot of the page in `target/e2e/NAME`.
    async fn screenshot(&self, name: &str) {
        let png = self.get("/screenshot").await;
        let png = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::create_dir_all(artefact(name).parent().unwrap()).unwrap();
        std::fs::write(artefact(name), png).unwrap();
        eprintln!("screenshot: {}", artefact(name).display());
    }

    async fn end(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}

// Long on purpose: one browser session walks the page as a person does, each step starting from
// the state the one before left (split into tests, each would start a browser and a fleet again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_cards_go_live_follow_the_fleet_take_the_keyboard_and_the_form_reaches_a_persona() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let driver = driver().await;
    let browser = Session::new(&driver, &dir.path().join("profile")).await;
    browser.post("/url", json!({"url": format!("http://{}/", fleet.addr)})).await;

    // Rendered by the server, then live once the script's stream is open.
    let status = |name: &str| format!("return document.getElementById('card-{name}').dataset.status");
    assert_eq!(browser.eval(&status("scribe")).await, "dormant");
    poll("the page to go live", || async {
        (browser.eval("return document.getElementById('live').dataset.state").await == "live").then_some(())
    })
    .await;

    // A change through the API reaches the open page without a reload.
    let api = reqwest::Client::new();
    let wake = json!({"persona": "scribe", "change": "wake"});
    let r = api.post(format!("http://{}/ai/state", fleet.addr)).json(&wake).send().await.unwrap();
    assert_eq!(r.status(), 200);
    poll("scribe's card to wake", || async { (browser.eval(&status("scribe")).await == "idle").then_some(()) }).await;
    assert_eq!(browser.eval("return performance.getEntriesByType('navigation').length").await, 1, "no reload");

    // The cards take the keyboard focus in order, and a focused card shows what hovering does.
    let tab = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
        {"type": "keyDown", "value": "\u{E004}"}, {"type": "keyUp", "value": "\u{E004}"}]}]});
    browser.post("/actions", tab).await;
    let focused = browser.eval("return document.activeElement.dataset.persona").await;
    assert_eq!(focused, "helper", "the first card");
    let title = browser.eval("return document.activeElement.title").await;
    assert!(title.as_str().unwrap().starts_with("objective: "), "{title}");

    // Through the page's form: a mention in the room; the reply appears there, answering the
    // event the form reports it sent, and the mentioned persona's card shows its decision.
    let fill = r#"const f = document.getElementById('inject').elements;
        f.text.value = 'could you check the release notes?'; f.mentions.value = '@helper';
        document.querySelector('#inject button').click();"#;
    browser.eval(fill).await;
    let sent = poll("the form to report the event sent", || async {
        let out = browser.eval("return document.querySelector('#inject output').value").await;
        out.as_str().filter(|o| o.starts_with("sent ")).map(str::to_string)
    })
    .await;
    let event_id = sent.split_whitespace().nth(1).unwrap().to_string();
    assert!(sent.ends_with("to helper, reviewer, scribe"), "{sent}");
    let reply = format!(
        "return [...document.querySelectorAll('#room-general li')].filter(li => li.dataset.replyTo === '{event_id}').map(li => li.dataset.from)"
    );
    let repliers = poll("the reply in the room", || async {
        let v = browser.eval(&reply).await;
        (!v.as_array().unwrap().is_empty()).then_some(v)
    })
    .await;
    assert_eq!(repliers, json!(["helper"]), "the mentioned persona answers");
    let decision = browser.eval("return document.querySelector('#card-helper .decision').textContent").await;
    assert!(!decision.as_str().unwrap().is_empty(), "{decision}");

    // Model calls (as a model brain makes them) draw the cost chart.
    crate::util::model_calls(&fleet, &[("helper", 300), ("reviewer", 120)]);
    poll("the cost chart", || async {
        let rows =
            browser.eval("return [...document.querySelectorAll('#cost tr[data-persona] polyline')].length").await;
        (rows == 2).then_some(())
    })
    .await;

    browser.screenshot("dashboard.png").await;

    // Enter on the focused card opens its panel, with the reason of its decision.
    assert_eq!(browser.eval("return document.activeElement.dataset.persona").await, "helper");
    let enter = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
        {"type": "keyDown", "value": "\u{E007}"}, {"type": "keyUp", "value": "\u{E007}"}]}]});
    browser.post("/actions", enter).await;
    let why = crate::util::decision(&fleet, "helper", &event_id).await.reason;
    poll("the decision's reason in the panel", || async {
        let text = browser
            .eval(
                "return document.getElementById('panel').open ? document.getElementById('panel-body').textContent : ''",
            )
            .await;
        text.as_str().unwrap().contains(&why).then_some(())
    })
    .await;

    browser.screenshot("panel.png").await;

    // More decisions than a page: the open panel follows them, and its journal's next page
    // comes through a cursor. The focus stays on the button, and closing the panel closes the
    // cursor.
    let mut last = String::new();
    for i in 0..11 {
        last = fleet
            .inject(crate::util::chat("general", "alice", &format!("note {i} on the docs")))
            .await
            .unwrap()
            .event_id;
    }
    crate::util::decision(&fleet, "helper", &last).await;

    let journal = "document.querySelector('#panel-body section[data-list=\"decisions\"]')";
    let older = format!("{journal}.querySelector('button[data-page=\"forward\"]')");
    poll("a second page of decisions", || async {
        (browser.eval(&format!("const b = {older}; return !!b && !b.disabled")).await == true).then_some(())
    })
    .await;
    browser.eval(&format!("{older}.click()")).await;
    let handle = poll("the journal's second page", || async {
        let v = browser
            .eval(&format!("const j = {journal}; return [j.querySelector('h3').textContent, j.dataset.handle]"))
            .await;
        v[0].as_str().unwrap().starts_with("Decisions 11–").then(|| v[1].as_str().unwrap().to_string())
    })
    .await;
    assert!(!handle.is_empty());
    assert_eq!(browser.eval("return document.activeElement.dataset.page").await, "backward", "the only enabled button");
    let escape = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
        {"type": "keyDown", "value": "\u{E00C}"}, {"type": "keyUp", "value": "\u{E00C}"}]}]});
    browser.post("/actions", escape).await;
    poll("the panel's cursor to close", || async {
        let r =
            api.post(format!("http://{}/rag/fetch", fleet.addr)).json(&json!({"handle": handle})).send().await.unwrap();
        (r.status() == 404).then_some(())
    })
    .await;
    assert_eq!(browser.eval("return document.activeElement.dataset.persona").await, "helper", "the focus goes back");

    browser.end().await;
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_tool_call_waiting_for_approval_is_approved_with_its_button() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let fleet = start(&dir.path().join("data"), &crate::tools::acting::fs_fleet(&root)).await;
    let driver = driver().await;
    let browser = Session::new(&driver, &dir.path().join("profile")).await;
    browser.post("/url", json!({"url": format!("http://{}/", fleet.addr)})).await;
    poll("the page to go live", || async {
        (browser.eval("return document.getElementById('live').dataset.state").await == "live").then_some(())
    })
    .await;

    let ask =
        fleet.inject(crate::util::chat("general", "alice", "@scribe write down \"from the page\"")).await.unwrap();
    // The call waiting shows up on the open page, with what it would do and why.
    let item = "document.querySelector('#approvals li')";
    let shown = poll("the approval on the page", || async {
        let text = browser.eval(&format!("return {item} ? {item}.textContent : null")).await;
        text.as_str().map(str::to_string)
    })
    .await;
    assert!(shown.contains("scribe wants to call fs.write_file") && shown.contains("from the page"), "{shown}");
    browser.screenshot("approval.png").await;
    browser.eval(&format!("{item}.querySelector('button[data-approve]').click()")).await;
    let reply = crate::util::reply_to(&fleet, &ask.event_id).await;
    assert!(reply.text.contains("I called fs.write_file"), "{}", reply.text);
    assert_eq!(std::fs::read_to_string(root.join("notes.md")).unwrap(), "from the page");
    // Answered, it leaves the page without a reload.
    poll("the approval gone from the page", || async {
        browser.eval("return document.getElementById('approvals') === null").await.as_bool()?.then_some(())
    })
    .await;
    assert_eq!(browser.eval("return performance.getEntriesByType('navigation').length").await, 1, "no reload");
    browser.end().await;
    fleet.shutdown(Duration::from_secs(5)).await;
}
