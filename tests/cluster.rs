//! A fleet across nodes: real `mindfleet run --node` processes linked by ractor_cluster on
//! loopback, driven through their admin APIs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::{Value, json};

use crate::util::*;

const COOKIE: &str = "MINDFLEET_TEST_COOKIE";

/// Two pinned personas, one on each node, two placed by load, all in `general`.
const FLEET: &str = r#"
[cluster]
nodes = ["a", "b"]

[conversation]
enabled = false

[[persona]]
name = "alice"
role = "assistant"
rooms = ["general"]
node = "a"

[[persona]]
name = "bob"
role = "code reviewer"
rooms = ["general"]
expertise = ["review"]
node = "b"

[[persona]]
name = "carol"
role = "note taker"
rooms = ["general"]

[[persona]]
name = "dave"
role = "tester"
rooms = ["general"]
"#;

/// A free loopback port (for a node server's `--cluster-listen`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `mindfleet run --node` process.
struct Node {
    child: Child,
    admin: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts node `name` of the fleet in `dir` (its data in `dir/<name>`), with `cookie`.
fn start(dir: &Path, name: &str, cookie: &str, args: &[&str]) -> Result<Node, (Option<i32>, String)> {
    let (child, admin) = spawn_run(
        Command::new(env!("CARGO_BIN_EXE_mindfleet"))
            .arg("run")
            .arg(dir.join("fleet.toml"))
            .arg("--data")
            .arg(dir.join(name))
            .args(["--node", name, "--cookie-env", COOKIE])
            .args(args)
            .env(COOKIE, cookie),
    )?;
    Ok(Node { child, admin })
}

/// Starts node `name` listening on a free loopback port (on another if that one was taken in the
/// meantime, by a connection of another test); with the address it listens on.
fn start_listening(dir: &Path, name: &str, cookie: &str, args: &[&str]) -> (Node, String) {
    for _ in 0..5 {
        let listen = format!("127.0.0.1:{}", free_port());
        let all: Vec<&str> = ["--cluster-listen", listen.as_str()].into_iter().chain(args.iter().copied()).collect();
        match start(dir, name, cookie, &all) {
            Ok(node) => return (node, listen),
            Err((_, log)) if log.contains("Address already in use") => continue,
            Err((code, log)) => panic!("node {name} exited ({code:?}):\n{log}"),
        }
    }
    panic!("node {name}: the port was taken five times");
}

/// Starts node `name` again on the address it listened on (`args` name it), trying again while a
/// connection of another test holds that port, for up to 20 s.
fn restart(dir: &Path, name: &str, cookie: &str, args: &[&str]) -> Node {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match start(dir, name, cookie, args) {
            Ok(node) => return node,
            Err((_, log)) if log.contains("Address already in use") && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err((code, log)) => panic!("node {name} exited ({code:?}) on its restart:\n{log}"),
        }
    }
}

fn fleet_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fleet.toml"), fleet_toml(FLEET)).unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

async fn get_dump(http: &reqwest::Client, admin: &str) -> Option<Value> {
    http.get(format!("http://{admin}/dump")).send().await.ok()?.json().await.ok()
}

/// The dump of `admin` once `ok` holds for it.
async fn dump_until(http: &reqwest::Client, admin: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    poll(what, || async {
        let d = get_dump(http, admin).await?;
        ok(&d).then_some(d)
    })
    .await
}

fn node_status<'a>(d: &'a Value, node: &str) -> &'a str {
    d["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == node))
        .and_then(|n| n["status"].as_str())
        .unwrap_or("")
}

fn persona_of<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["personas"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name} in {d}"))
}

fn decided(d: &Value, persona: &str, event: &str) -> bool {
    persona_of(d, persona)["decisions"].as_array().is_some_and(|ds| ds.iter().any(|x| x["event_id"] == event))
}

/// Whether `persona`'s working memory holds something of `event`.
fn remembers(d: &Value, persona: &str, event: &str) -> bool {
    let recent = &persona_of(d, persona)["working_memory"]["recent"];
    recent.as_array().is_some_and(|r| r.iter().any(|e| e["event_id"] == event))
}

async fn inject(http: &reqwest::Client, admin: &str, body: Value) -> (u16, Value) {
    let r = http.post(format!("http://{admin}/events")).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_place_route_and_dump_the_whole_cluster_and_refuse_while_one_is_down() {
    let (_tmp, dir) = fleet_dir();
    let (mut a, listen) = start_listening(&dir, "a", "s3cret", &[]);
    let mut b = start(&dir, "b", "s3cret", &["--cluster-join", &listen]).expect("node b joins");
    let http = reqwest::Client::new();

    // Placement: pins first, then the least loaded node (ties to the node listed first).
    let d = dump_until(&http, &a.admin, "node b up in a's dump", |d| node_status(d, "b") == "up").await;
    let placed: Vec<(String, String)> = d["personas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().into(), p["node"].as_str().unwrap_or("?").into()))
        .collect();
    let want = [("alice", "a"), ("bob", "b"), ("carol", "a"), ("dave", "b")];
    assert_eq!(placed, want.map(|(p, n)| (p.to_string(), n.to_string())), "{d}");
    assert_eq!(node_status(&d, "a"), "self");
    assert!(persona_of(&d, "bob")["self_state"].is_object(), "b's persona dumped live through a: {d}");

    // An event for a persona of b, injected at a: stored on b, decided there, seen from a.
    let (status, ack) =
        inject(&http, &a.admin, json!({"id": "x1", "domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "please review auth.rs"}))
            .await;
    assert_eq!((status, &ack["personas"]), (200, &json!(["bob"])), "{ack}");
    dump_until(&http, &a.admin, "bob's decision on x1, seen from a", |d| decided(d, "bob", "x1")).await;
    let on_b = get_dump(&http, &b.admin).await.unwrap();
    assert!(decided(&on_b, "bob", "x1"), "decided on b: {on_b}");

    // A room event at b reaches every member on both nodes.
    let (status, ack) = inject(
        &http,
        &b.admin,
        json!({"id": "x2", "domain": "chat", "room": "general", "from": "erin", "text": "standup in 5"}),
    )
    .await;
    assert_eq!((status, &ack["personas"]), (200, &json!(["alice", "bob", "carol", "dave"])), "{ack}");
    dump_until(&http, &b.admin, "every persona's decision on x2", |d| {
        ["alice", "bob", "carol", "dave"].iter().all(|p| decided(d, p, "x2"))
    })
    .await;

    // b is killed: a sees the link drop, refuses events for b's personas naming b, and keeps
    // serving its own.
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let d =
        dump_until(&http, &a.admin, "node b unreachable in a's dump", |d| node_status(d, "b") == "unreachable").await;
    assert_eq!(persona_of(&d, "bob")["status"], "unreachable", "{d}");
    let (status, err) =
        inject(&http, &a.admin, json!({"id": "x3", "domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "still there?"}))
            .await;
    assert_eq!(status, 503, "{err}");
    assert!(err.to_string().contains("node \\\"b\\\" is unreachable"), "{err}");
    let (status, _) = inject(
        &http,
        &a.admin,
        json!({"id": "x4", "domain": "chat", "room": "general", "from": "erin", "persona": "alice", "text": "hello"}),
    )
    .await;
    assert_eq!(status, 200, "a's own personas are served");
    // alice answers in `general`, where bob and dave are: a keeps their copy of her reply until
    // b is back, across a crash of a too.
    let d = dump_until(&http, &a.admin, "alice's reply to x4", |d| reply_to_event(d, "x4").is_some()).await;
    let reply = reply_to_event(&d, "x4").unwrap();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let a = restart(&dir, "a", "s3cret", &["--cluster-listen", &listen]);

    // b comes back with its own redb state: its earlier decisions are there, events flow again.
    let b = start(&dir, "b", "s3cret", &["--cluster-join", &listen]).expect("node b rejoins");
    dump_until(&http, &a.admin, "node b up again", |d| node_status(d, "b") == "up").await;
    let (status, ack) =
        inject(&http, &a.admin, json!({"id": "x3", "domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "still there?"}))
            .await;
    assert_eq!(status, 200, "{ack}");
    let d = dump_until(&http, &a.admin, "bob's decision on x3", |d| decided(d, "bob", "x3")).await;
    assert!(decided(&d, "bob", "x1"), "bob's decisions from before the kill are kept: {d}");
    dump_until(&http, &a.admin, "alice's reply, kept while b was down, reached bob and dave", |d| {
        decided(d, "bob", &reply) && decided(d, "dave", &reply)
    })
    .await;
    drop(b);
}

/// The id of the reply to `event` in the dump's outbox.
fn reply_to_event(d: &Value, event: &str) -> Option<String> {
    let o = d["outbox"].as_array()?.iter().find(|o| o["in_reply_to"] == event)?;
    o["event_id"].as_str().map(String::from)
}

/// The fleet on three nodes a, b and c, b and c joined through a, with the address each listens
/// on (to start one again).
struct Three {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    listen: [String; 3],
    a: Node,
    b: Node,
    c: Node,
}

fn three_nodes() -> Three {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FLEET.replace(r#"nodes = ["a", "b"]"#, r#"nodes = ["a", "b", "c"]"#);
    std::fs::write(tmp.path().join("fleet.toml"), fleet_toml(&fleet)).unwrap();
    let dir = tmp.path().to_path_buf();
    let (a, la) = start_listening(&dir, "a", "k", &[]);
    let (b, lb) = start_listening(&dir, "b", "k", &["--cluster-join", &la]);
    let (c, lc) = start_listening(&dir, "c", "k", &["--cluster-join", &la]);
    Three { _tmp: tmp, dir, listen: [la, lb, lc], a, b, c }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_node_links_to_every_node_and_any_node_routes_and_answers_for_all() {
    let Three { _tmp, a, b, c, .. } = three_nodes();
    let http = reqwest::Client::new();
    // c joined through a only: it links to b too (transitive links).
    let d = dump_until(&http, &c.admin, "c linked to a and b", |d| {
        node_status(d, "a") == "up" && node_status(d, "b") == "up"
    })
    .await;
    // alice a, bob b (pinned), carol to c, dave to a (ties to the node listed first).
    for (p, n) in [("alice", "a"), ("bob", "b"), ("carol", "c"), ("dave", "a")] {
        assert_eq!(persona_of(&d, p)["node"], n, "{d}");
    }
    // From c, an event for a persona of b; from a, for the persona of c.
    let (status, _) = inject(
        &http,
        &c.admin,
        json!({"id": "y1", "domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "ping"}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = inject(
        &http,
        &a.admin,
        json!({"id": "y2", "domain": "chat", "room": "general", "from": "erin", "persona": "carol", "text": "ping"}),
    )
    .await;
    assert_eq!(status, 200);
    dump_until(&http, &a.admin, "both decisions, seen from a", |d| {
        decided(d, "bob", "y1") && decided(d, "carol", "y2")
    })
    .await;

    // bob, addressed in a room he was not configured in, joins it on every node: the room's
    // next event reaches him wherever it is injected.
    let (status, _) = inject(
        &http,
        &c.admin,
        json!({"id": "y3", "domain": "chat", "room": "side", "from": "erin", "persona": "bob", "text": "a word?"}),
    )
    .await;
    assert_eq!(status, 200);
    let side = json!({"id": "y4", "domain": "chat", "room": "side", "from": "erin", "text": "anyone here?"});
    let ack = poll("a knows bob is in side", || {
        let (http, side) = (http.clone(), side.clone());
        let admin = a.admin.clone();
        async move {
            let (status, ack) = inject(&http, &admin, side).await;
            (status == 200).then_some(ack)
        }
    })
    .await;
    assert_eq!(ack["personas"], json!(["bob"]), "{ack}");

    // Introspection from any node: a persona of another node answers as on its own node, and
    // questions about every persona cover every node.
    let get = |admin: &str, path: &str| {
        let url = format!("http://{admin}{path}");
        let http = http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, v) = get(&c.admin, "/ai/decisions?persona=bob").await;
    assert_eq!(status, 200, "{v}");
    assert!(v["decisions"].as_array().unwrap().iter().any(|d| d["event_id"] == "y1"), "{v}");
    let (status, v) = get(&a.admin, "/ai/state").await;
    assert_eq!(status, 200, "{v}");
    let names: Vec<&str> = v["personas"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob", "carol", "dave"], "{v}");
    let (status, v) = get(&a.admin, "/ai/learnings").await;
    assert_eq!(status, 200, "{v}");
    let learned: Vec<&str> =
        v["learnings"].as_array().unwrap().iter().map(|l| l["persona"].as_str().unwrap()).collect();
    assert!(learned.contains(&"bob") && learned.contains(&"carol"), "learnings kept on b and c, asked at a: {v}");
    assert_eq!(get(&a.admin, "/ai/plan?persona=nobody").await.0, 404);
    // Model costs are kept by each node's scheduler, under its own budget: the cluster's report
    // counts the three.
    let (status, v) = get(&a.admin, "/ai/cost").await;
    assert_eq!(status, 200, "{v}");
    let one = get_dump(&http, &a.admin).await.unwrap()["scheduler"]["budget"]["inferences_per_hour"].as_u64().unwrap();
    assert_eq!(v["budget"]["inferences_per_hour"].as_u64(), Some(3 * one), "{v}");
    let focus = json!({"persona": "carol", "change": {"focus": {"objective": "release notes", "intensity": 0.7}}});
    let r = http.post(format!("http://{}/ai/state", b.admin)).json(&focus).send().await.unwrap();
    assert_eq!(r.status(), 200, "a state change for c's persona, made at b");
    dump_until(&http, &c.admin, "carol's new focus", |d| {
        persona_of(d, "carol")["self_state"]["focus"]["objective"] == "release notes"
    })
    .await;

    // The command line, as a person uses it: inject at any node, dump the cluster from any node.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let inject =
        ["inject", "--admin", &a.admin, "--persona", "carol", "--room", "general", "--from", "erin", "--text", "hi"];
    let (code, out, err) = cli(&inject);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, tree, err) = cli(&["dump", "--admin", &c.admin, "--format", "tree"]);
    assert_eq!(code, Some(0), "{err}");
    for line in
        ["Node(c) [self]  1 personas, linked to a, b", "Node(b) [up]  1 personas", "Persona(bob) [running, on b]"]
    {
        assert!(tree.contains(line), "{line:?} in\n{tree}");
    }
}

#[test]
fn a_wrong_cookie_is_refused_and_the_joining_node_exits_with_the_reason() {
    let (_tmp, dir) = fleet_dir();
    let (_a, listen) = start_listening(&dir, "a", "right", &[]);
    let Err((code, log)) = start(&dir, "b", "wrong", &["--cluster-join", &listen]) else {
        panic!("b joined with the wrong cookie");
    };
    assert_eq!(code, Some(3), "{log}");
    assert!(log.contains("the cluster refused this node") && log.contains("cookie"), "{log}");
}

#[test]
fn a_node_without_a_cookie_does_not_start() {
    let (_tmp, dir) = fleet_dir();
    let Err((code, log)) = start(&dir, "a", "", &["--cluster-listen", "0.0.0.0:0"]) else {
        panic!("a node listening on every address started without a cookie");
    };
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains(&format!("set {COOKIE}")) && log.contains("0.0.0.0:0"), "{log}");
    // A join to an address where nothing listens: exit 3, naming it.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let Err((code, log)) = start(&dir, "b", "k", &["--cluster-join", &nowhere]) else { panic!("b joined nothing") };
    assert_eq!(code, Some(3), "{log}");
    assert!(log.contains(&format!("cannot join the cluster: nothing answers at {nowhere}")), "{log}");
    // A node that is not one of the fleet's nodes is refused too, naming them.
    let Err((code, log)) = start(&dir, "z", "k", &[]) else { panic!("node z started") };
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("--node \"z\" is not one of the fleet's nodes") && log.contains("a, b"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_coordinator_per_room_gives_one_answer_across_two_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = String::from("[cluster]\nnodes = [\"a\", \"b\"]\n[conversation]\nenabled = false\n");
    for i in 0..7 {
        fleet.push_str(&format!(
            "[[persona]]\nname = \"p{i}\"\nrole = \"engineer\"\nrooms = [\"team\"]\nexpertise = [\"deploy\"]\n"
        ));
    }
    std::fs::write(dir.path().join("fleet.toml"), fleet_toml(&fleet)).unwrap();
    let dir = dir.path();
    let (a, listen) = start_listening(dir, "a", "k", &[]);
    let b = start(dir, "b", "k", &["--cluster-join", &listen]).expect("b");
    let http = reqwest::Client::new();
    let d = dump_until(&http, &a.admin, "b up", |d| node_status(d, "b") == "up").await;
    let on_b = d["personas"].as_array().unwrap().iter().filter(|p| p["node"] == "b").count();
    assert_eq!(on_b, 3, "seven personas split 4 / 3: {d}");
    dump_until(&http, &b.admin, "a up, seen from b", |d| node_status(d, "a") == "up").await;

    let ids: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        // Injected at either node: the room's one coordinator decides every time.
        let admin = if i % 2 == 0 { &a.admin } else { &b.admin };
        let text = format!("the deploy {i} failed, who can look?");
        let (status, ack) =
            inject(&http, admin, json!({"id": id, "domain": "chat", "room": "team", "from": "erin", "text": text}))
                .await;
        assert_eq!((status, ack["personas"].as_array().map(Vec::len)), (200, Some(7)), "{ack}");
    }
    let d = dump_until(&http, &a.admin, "every persona's decision on every message", |d| {
        (0..7).all(|p| ids.iter().all(|id| decided(d, &format!("p{p}"), id)))
    })
    .await;
    for id in &ids {
        let answers: Vec<&Value> = d["outbox"].as_array().unwrap().iter().filter(|o| o["in_reply_to"] == *id).collect();
        assert_eq!(answers.len(), 1, "one answer to {id} across both nodes: {answers:?}");
    }
    // The cluster's turn-taking figures count each message once, on the node that decided it.
    assert_eq!(
        (d["coordination"]["messages"].as_u64(), d["coordination"]["answered_by_one"].as_u64()),
        (Some(5), Some(5))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_answering_is_unreachable_until_it_answers_again() {
    let (_tmp, dir) = fleet_dir();
    let (a, listen) = start_listening(&dir, "a", "k", &[]);
    let b = start(&dir, "b", "k", &["--cluster-join", &listen]).expect("b");
    let http = reqwest::Client::new();
    dump_until(&http, &a.admin, "b up", |d| node_status(d, "b") == "up").await;
    // Stopped, b keeps its socket open: only the liveness check can tell.
    let signal =
        |s: &str| assert!(Command::new("kill").args([s, &b.child.id().to_string()]).status().unwrap().success());
    signal("-STOP");
    let d = dump_until(&http, &a.admin, "b unreachable while stopped", |d| node_status(d, "b") == "unreachable").await;
    let b_node = d["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "b").unwrap();
    assert_eq!(b_node["error"], "no answer to the liveness check", "{d}");
    // What a scraper of a sees of the link.
    let metrics = http.get(format!("http://{}/metrics", a.admin)).send().await.unwrap().text().await.unwrap();
    for line in ["mindfleet_cluster_node_up{node=\"b\"} 0", "mindfleet_cluster_node_up{node=\"a\"} 1"] {
        assert!(metrics.lines().any(|l| l.starts_with(line)), "{line} in {metrics}");
    }
    let (status, err) = inject(
        &http,
        &a.admin,
        json!({"domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "hi"}),
    )
    .await;
    assert_eq!(status, 503, "{err}");
    signal("-CONT");
    dump_until(&http, &a.admin, "b up again once it answers", |d| node_status(d, "b") == "up").await;
    let (status, ack) = inject(
        &http,
        &a.admin,
        json!({"domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "hi"}),
    )
    .await;
    assert_eq!(status, 200, "{ack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_hands_personas_over_with_their_state_and_placement_is_recomputed_on_rejoin() {
    let Three { _tmp, dir, listen: [la, lb, _], a, b, c } = three_nodes();
    let http = reqwest::Client::new();
    dump_until(&http, &a.admin, "a linked to b and c", |d| node_status(d, "b") == "up" && node_status(d, "c") == "up")
        .await;

    // a runs alice and dave: each decides an event, and remembers it.
    for (id, p) in [("z1", "alice"), ("z2", "dave")] {
        let body = json!({"id": id, "domain": "chat", "room": "general", "from": "erin", "persona": p, "text": "hi"});
        assert_eq!(inject(&http, &b.admin, body).await.0, 200);
    }
    dump_until(&http, &a.admin, "alice and dave decided", |d| {
        decided(d, "alice", "z1") && decided(d, "dave", "z2") && remembers(d, "alice", "z1")
    })
    .await;

    // Drained through the command line: each persona to the least loaded node that is up.
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(["drain", "--admin", &a.admin]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let moved: Vec<(&str, &str)> = report["moved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["persona"].as_str().unwrap(), m["node"].as_str().unwrap()))
        .collect();
    assert_eq!(moved, [("alice", "b"), ("dave", "c")], "{report}");

    // Every node sees the new placement; the personas run there with what they had.
    for admin in [&a.admin, &b.admin, &c.admin] {
        let d = dump_until(&http, admin, "alice on b and dave on c, running", |d| {
            persona_of(d, "alice")["node"] == "b"
                && persona_of(d, "dave")["node"] == "c"
                && persona_of(d, "alice")["status"] == "running"
                && persona_of(d, "dave")["status"] == "running"
        })
        .await;
        assert!(decided(&d, "alice", "z1") && decided(&d, "dave", "z2"), "decisions came along: {d}");
        assert!(remembers(&d, "alice", "z1") && remembers(&d, "dave", "z2"), "working memory came along: {d}");
        let thoughts = persona_of(&d, "alice")["self_state"]["recent_thoughts"].to_string();
        assert!(thoughts.contains("erin asked in #general: hi"), "self-state came along: {d}");
        let on_a = d["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "a").unwrap();
        assert_eq!(on_a["personas"], 0, "{d}");
    }
    let r = http.post(format!("http://{}/cluster/move", a.admin)).json(&json!({"persona": "alice"})).send().await;
    let r = r.unwrap();
    assert_eq!(r.status(), 400, "a move is asked of the persona's own node");

    // Events reach them at their new nodes, from the node they left and from the others.
    for (id, p, at) in [("z3", "alice", &a.admin), ("z4", "dave", &b.admin), ("z5", "alice", &c.admin)] {
        let body = json!({"id": id, "domain": "chat", "room": "general", "from": "erin", "persona": p, "text": "hey"});
        let (status, ack) = inject(&http, at, body).await;
        assert_eq!(status, 200, "{id}: {ack}");
    }
    dump_until(&http, &c.admin, "the events after the move decided", |d| {
        decided(d, "alice", "z3") && decided(d, "dave", "z4") && decided(d, "alice", "z5")
    })
    .await;

    // Both restart: the placement they kept is where they start from, and it is recomputed as
    // the nodes link again. alice, pinned to a, goes back there with all she had; c, two
    // personas ahead of a when it sees a link (a empty, or holding alice already), gives it
    // one or none: either way no node has two more than another.
    drop(a);
    drop(b);
    let a = restart(&dir, "a", "k", &["--cluster-listen", &la]);
    let _b = restart(&dir, "b", "k", &["--cluster-listen", &lb, "--cluster-join", &la]);
    let d = dump_until(&http, &a.admin, "alice back on a, the nodes balanced, all running", |d| {
        let counts: Vec<u64> = d["nodes"].as_array().unwrap().iter().map(|n| n["personas"].as_u64().unwrap()).collect();
        let (least, most) = (counts.iter().min().copied(), counts.iter().max().copied());
        persona_of(d, "alice")["node"] == "a"
            && least.zip(most).is_some_and(|(l, m)| l >= 1 && m <= 2)
            && d["personas"].as_array().unwrap().iter().all(|p| p["status"] == "running")
    })
    .await;
    assert!(decided(&d, "alice", "z3") && decided(&d, "alice", "z5") && remembers(&d, "alice", "z1"), "{d}");
    assert_eq!(persona_of(&d, "bob")["node"], "b", "pinned personas stay: {d}");
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_designated_node_embeds_and_indexes_for_every_node_and_each_text_once() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = FLEET.replace(r#"nodes = ["a", "b"]"#, "nodes = [\"a\", \"b\"]\nembedding = \"a\"\nindex = \"a\"");
    std::fs::write(dir.path().join("fleet.toml"), fleet_toml(&fleet)).unwrap();
    let dir = dir.path();
    let (a, listen) = start_listening(dir, "a", "k", &[]);
    let b = start(dir, "b", "k", &["--cluster-join", &listen]).expect("b");
    let http = reqwest::Client::new();
    dump_until(&http, &b.admin, "a up in b's dump", |d| node_status(d, "a") == "up").await;

    // The same text, asked at b and then at a: embedded once, by a's worker.
    let embed = |admin: &str| {
        let (http, url) = (http.clone(), format!("http://{admin}/ai/embedding/generate"));
        async move {
            let r = http.post(url).json(&json!({"text": "the release build is green"})).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let at_b = embed(&b.admin).await;
    assert_eq!(at_b["dimensions"], 384, "{at_b}");
    let before = get_dump(&http, &a.admin).await.unwrap()["embedding"].clone();
    let at_a = embed(&a.admin).await;
    assert_eq!(at_a["embedding"], at_b["embedding"]);
    let after = get_dump(&http, &a.admin).await.unwrap()["embedding"].clone();
    let hits = |s: &Value| s["cache_hits"].as_u64().unwrap();
    assert_eq!(hits(&after), hits(&before) + 1, "the second ask was answered from a's cache: {after}");

    // b runs no model of its own: its dump shows a's worker, and b keeps no embedding cache.
    let on_b = get_dump(&http, &b.admin).await.unwrap()["embedding"].clone();
    assert_eq!(on_b["node"], "a", "{on_b}");
    assert_eq!(on_b["model"], after["model"]);
    assert!(!dir.join("b").join("embeddings.redb").exists());
    assert!(dir.join("a").join("embeddings.redb").exists());

    // One codebase index for the cluster: an entry written at b is found at a.
    let rag = |admin: &str, command: &str, body: Value| {
        let (http, url) = (http.clone(), format!("http://{admin}/rag/{command}"));
        async move {
            let r = http.post(&url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200, "{url}");
            r.json::<Value>().await.unwrap()
        }
    };
    let note =
        json!({"file_path": "notes/deploy.md", "content": "Deploy by switching traffic from blue to green servers."});
    assert_eq!(rag(&b.admin, "create", note).await["indexed"], true);
    let q =
        rag(&a.admin, "query", json!({"query": "moving production traffic between server pools", "limit": 1})).await;
    assert_eq!(q["entries"][0]["path"], "notes/deploy.md", "{q}");
    let on_b = get_dump(&http, &b.admin).await.unwrap()["index"].clone();
    assert_eq!((&on_b["node"], &on_b["chunks"]), (&json!("a"), &json!(1)), "{on_b}");
    assert!(!dir.join("b").join("index").exists(), "b keeps no index of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_by_a_signal_hands_its_personas_over_and_gets_them_back_when_it_rejoins() {
    let (_tmp, dir) = fleet_dir();
    let (a, listen) = start_listening(&dir, "a", "k", &[]);
    let mut b = start(&dir, "b", "k", &["--cluster-join", &listen]).expect("b");
    let http = reqwest::Client::new();
    dump_until(&http, &a.admin, "b up", |d| node_status(d, "b") == "up").await;
    for (id, p) in [("s1", "bob"), ("s2", "dave")] {
        let body = json!({"id": id, "domain": "chat", "room": "general", "from": "erin", "persona": p, "text": "hi"});
        assert_eq!(inject(&http, &a.admin, body).await.0, 200);
    }
    dump_until(&http, &a.admin, "bob and dave decided on b", |d| decided(d, "bob", "s1") && decided(d, "dave", "s2"))
        .await;

    // SIGTERM: b hands bob and dave to a, with what they had, then exits 0.
    assert!(Command::new("kill").args(["-TERM", &b.child.id().to_string()]).status().unwrap().success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let code = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s.code();
        }
        assert!(std::time::Instant::now() < deadline, "b did not exit within 60 s of SIGTERM");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(code, Some(0));
    let d = dump_until(&http, &a.admin, "bob and dave running on a", |d| {
        ["bob", "dave"].iter().all(|p| persona_of(d, p)["node"] == "a" && persona_of(d, p)["status"] == "running")
    })
    .await;
    assert!(decided(&d, "bob", "s1") && decided(&d, "dave", "s2"), "{d}");
    let body = json!({"id": "s3", "domain": "chat", "room": "general", "from": "erin", "persona": "bob", "text": "still with us?"});
    assert_eq!(inject(&http, &a.admin, body).await.0, 200, "bob is served while b is gone");

    // b is back: bob, pinned to b, returns with his journal, and a gives b one of its unpinned
    // personas, so each node runs two again.
    let b = start(&dir, "b", "k", &["--cluster-join", &listen]).expect("b restarts");
    let d = dump_until(&http, &b.admin, "bob back on b, two personas a node, all running", |d| {
        let counts: Vec<u64> = d["nodes"].as_array().unwrap().iter().map(|n| n["personas"].as_u64().unwrap()).collect();
        persona_of(d, "bob")["node"] == "b"
            && counts == [2, 2]
            && d["personas"].as_array().unwrap().iter().all(|p| p["status"] == "running")
    })
    .await;
    assert!(decided(&d, "bob", "s1") && decided(&d, "bob", "s3"), "{d}");
    drop(b);
    drop(a);
}
