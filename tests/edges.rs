//! The admin API's edges over real sockets on loopback: the `Host`/`Origin` guard, slow and
//! idle clients, the connection cap, malformed bodies, JSON errors everywhere, and what an
//! admin API off loopback requires and tells.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::util::*;

/// Status and JSON body of one response read from `s` (`Content-Length` framed), if one came.
async fn read_response(s: &mut TcpStream) -> Option<(u16, Value)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let body = serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap_or(Value::Null);
                return Some((status, body));
            }
        }
        assert!(Instant::now() < deadline, "no response within the deadline");
        match tokio::time::timeout(DEADLINE, s.read(&mut chunk)).await.expect("read within the deadline") {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Sends `request` as is on a new connection and reads the response.
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    read_response(&mut s).await.expect("a response")
}

/// Waits until the server closes `s` (EOF or reset), failing after [`DEADLINE`]; how long it took.
async fn closed_after(s: &mut TcpStream, since: Instant) -> Duration {
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(DEADLINE, s.read(&mut chunk)).await.expect("closed within the deadline") {
            Ok(0) | Err(_) => return since.elapsed(),
            Ok(_) => {}
        }
    }
}

fn health_request(host: &str) -> Vec<u8> {
    format!("GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

async fn fleet_with(dir: &std::path::Path, admin: &str) -> mindfleet::Fleet {
    let toml = fleet_toml(TRIO).replace("faults = true\n", &format!("faults = true\n{admin}\n"));
    start(dir, &toml).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_only_starts_with_127_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_with(dir.path(), "allowed_hosts = [\"fleet.internal\"]").await;
    let (addr, port) = (fleet.addr, fleet.addr.port());
    let event = r#"{"domain":"chat","room":"general","from":"a","text":"x"}"#;
    let post = |host: String, origin: String, kind: &str| {
        format!(
            "POST /events HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nContent-Type: {kind}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{event}",
            event.len()
        )
        .into_bytes()
    };
    for (host, origin) in [
        (format!("127.attacker.example:{port}"), format!("http://127.attacker.example:{port}")),
        (format!("127.0.0.1:{port}"), "http://127.0.0.1.attacker.example".to_string()),
        (format!("127.0.0.1:{port}"), format!("https://127.0.0.1.attacker.example:{port}/x")),
    ] {
        for kind in ["application/json", "text/plain"] {
            let (status, body) = raw(addr, &post(host.clone(), origin.clone(), kind)).await;
            assert_eq!(status, 403, "{host} {origin} {kind}: {body}");
            assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
        }
    }
    // A non-ASCII Origin is refused, not skipped.
    let mut req =
        format!("GET /dump HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nOrigin: http://").into_bytes();
    req.extend_from_slice("évil.example\r\n\r\n".as_bytes());
    let (status, body) = raw(addr, &req).await;
    assert_eq!((status, body["field"].as_str()), (403, Some("Origin")), "{body}");
    // The loopback literals in any case, and the configured name, are this API.
    for host in [format!("LOCALHOST:{port}"), format!("127.0.0.2:{port}"), "Fleet.Internal".to_string()] {
        let (status, body) = raw(addr, &post(host.clone(), format!("http://{host}"), "application/json")).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_is_closed_after_the_header_timeout_and_an_idle_one_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_with(dir.path(), "header_timeout_secs = 0.3\nidle_timeout_secs = 1.5").await;
    let host = fleet.addr.to_string();

    // Half a head: closed at the header timeout.
    let mut half = TcpStream::connect(fleet.addr).await.unwrap();
    let sent = Instant::now();
    half.write_all(format!("GET /health HTTP/1.1\r\nHost: {host}\r\nX-Slow: ").as_bytes()).await.unwrap();
    let took = closed_after(&mut half, sent).await;
    assert!(took >= Duration::from_millis(250), "closed after {took:?}, before the header timeout");

    // A kept-alive connection: answered, then closed at the idle timeout, not the (shorter)
    // header timeout.
    let mut idle = TcpStream::connect(fleet.addr).await.unwrap();
    idle.write_all(&health_request(&host)).await.unwrap();
    assert_eq!(read_response(&mut idle).await.map(|r| r.0), Some(200));
    let answered = Instant::now();
    // A second request on it within the idle timeout is served.
    idle.write_all(&health_request(&host)).await.unwrap();
    assert_eq!(read_response(&mut idle).await.map(|r| r.0), Some(200));
    let took = closed_after(&mut idle, answered).await;
    assert!(took >= Duration::from_millis(1400), "idle connection closed after {took:?}");

    // A connection that never sends a byte is a head that never comes.
    let mut silent = TcpStream::connect(fleet.addr).await.unwrap();
    let took = closed_after(&mut silent, Instant::now()).await;
    assert!(took < Duration::from_millis(1400), "silent connection closed after {took:?}, not at the header timeout");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_connection_cap_a_connection_is_closed_and_health_answers_once_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_with(dir.path(), "max_connections = 3\nheader_timeout_secs = 60\nidle_timeout_secs = 60").await;
    let host = fleet.addr.to_string();
    // Three kept-alive connections, each answered once (so each holds its slot).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(fleet.addr).await.unwrap();
        s.write_all(&health_request(&host)).await.unwrap();
        assert_eq!(read_response(&mut s).await.map(|r| r.0), Some(200));
        held.push(s);
    }
    // The fourth is closed without an answer.
    let mut over = TcpStream::connect(fleet.addr).await.unwrap();
    let _ = over.write_all(&health_request(&host)).await;
    assert_eq!(read_response(&mut over).await, None);
    // Once one ends, /health answers again.
    drop(held.pop());
    poll("/health once a slot is free", || async {
        let mut s = TcpStream::connect(fleet.addr).await.ok()?;
        s.write_all(&health_request(&host)).await.ok()?;
        read_response(&mut s).await.filter(|r| r.0 == 200)
    })
    .await;
    drop(held);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_get_400_naming_the_fault_and_only_a_body_over_the_limit_413() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_with(dir.path(), "max_body_bytes = 1024").await;
    let host = fleet.addr.to_string();
    let head = |framing: &str| {
        format!("POST /events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n")
    };
    // Sent, then the client's side shut: the server sees the body end early.
    let cut_short = |request: String| async move {
        let mut s = TcpStream::connect(fleet.addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
        read_response(&mut s).await.expect("a response")
    };
    let (status, body) = cut_short(head("Content-Length: 100") + r#"{"domain":"#).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("ended before its declared length"), "{body}");

    let (status, body) = cut_short(head("Transfer-Encoding: chunked") + "20\r\n{\"domain\":").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("ended before"), "{body}");

    let (status, body) =
        raw(fleet.addr, (head("Transfer-Encoding: chunked") + "zz\r\n{}\r\n0\r\n\r\n").as_bytes()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("malformed body"), "{body}");

    // Over the limit, declared or chunked: 413.
    let big = "x".repeat(2000);
    let (status, _) = raw(fleet.addr, (head("Content-Length: 2000") + &big).as_bytes()).await;
    assert_eq!(status, 413);
    let chunked = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let (status, body) = raw(fleet.addr, (head("Transfer-Encoding: chunked") + &chunked).as_bytes()).await;
    assert_eq!(status, 413, "{body}");
    // A body refused unread ends its connection, and the answer says so: a client that kept the
    // connection for its next request would send it after an unread body, into a socket being
    // closed.
    let r = reqwest::Client::new()
        .post(format!("http://{host}/events"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(r.headers().get("connection").and_then(|v| v.to_str().ok()), Some("close"), "{:?}", r.headers());
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_json_and_names_the_bad_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();
    let json_error = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let kind = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(kind.as_deref(), Some("application/json"), "{status} {body}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty() && !e.ends_with('.')), "{body}");
        (status, body["field"].as_str().map(str::to_string))
    };
    for (path, status, field) in [
        ("/ai/decisions?persona=x&limit=abc", 400, Some("limit")),
        ("/ai/select-for-task?domain=%00", 400, Some("domain")),
        ("/ai/select-for-task?domain=chat&priority=high", 400, Some("priority")),
        ("/ai/recall?persona=helper&text=x&room=a%2Fb", 400, Some("room")),
        ("/ai/thoughts", 400, Some("persona")),
        ("/dump?persona=Not%20a%20name", 400, Some("persona")),
        ("/dashboard/persona/helper/decisions?direction=sideways", 400, Some("direction")),
        ("/personas/%FF", 400, None),
        ("/no/such/route", 404, None),
        ("/ai/no-such-query", 404, None),
    ] {
        let got = json_error(http.get(format!("{base}{path}")).send().await.unwrap()).await;
        assert_eq!(got, (status, field.map(str::to_string)), "{path}");
    }
    let got = json_error(http.delete(format!("{base}/events")).send().await.unwrap()).await;
    assert_eq!(got.0, 405);
    let login = http.post(format!("{base}/dashboard/login")).json(&serde_json::json!({"token": "x"}));
    let got = json_error(login.send().await.unwrap()).await;
    assert_eq!(got.0, 415);
    fleet.shutdown(DEADLINE).await;
}

/// A loopback-free fleet under `token`, reached through loopback; or why it did not start.
async fn off_loopback(dir: &std::path::Path, token: &str) -> Result<mindfleet::Fleet, String> {
    let mut cfg = config(dir, &fleet_toml(TRIO));
    cfg.admin.addr = "0.0.0.0:0".parse().unwrap();
    cfg.admin.token = Some(token.into());
    mindfleet::Fleet::start(cfg).await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_or_short_token_is_refused_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let err = off_loopback(dir.path(), " ").await.err().expect("a blank token is refused");
    assert!(err.contains("is 0 characters") && err.contains("at least 16"), "{err}");
    let err = off_loopback(dir.path(), "  short-token  ").await.err().expect("a short token is refused");
    assert!(err.contains("`[admin] token` / MINDFLEET_ADMIN_TOKEN is 11 characters"), "{err}");
    let fleet = off_loopback(dir.path(), "sixteen-chars-ok").await.expect("16 characters will do");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_rag_index_answers_alike_for_missing_and_existing_paths_outside_the_roots() {
    let dir = tempfile::tempdir().unwrap();
    let token = "a-token-of-twenty-chars";
    let fleet = off_loopback(dir.path(), token).await.unwrap();
    let url = format!("http://127.0.0.1:{}/rag/index", fleet.addr.port());
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for path in ["/etc", "/no/such/path/here"] {
        let r = http.post(&url).bearer_auth(token).json(&serde_json::json!({ "paths": [path] })).send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        answers.push((status, body["error"].as_str().unwrap().replacen(path, "PATH", 1)));
    }
    assert_eq!(answers[0].0, 403, "{answers:?}");
    assert_eq!(answers[0], answers[1]);
    fleet.shutdown(DEADLINE).await;
}

/// Regression: 512 open `/outbox/stream` connections, the whole `max_connections`, made `/health`
/// and every other request fail until they closed. Streams now have slots of their own
/// (`max_streams`, fewer than the connections): one past them is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_max_streams_are_refused_at_once_while_health_and_events_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let toml = fleet_toml(TRIO).replace("name = \"test\"\n", "name = \"test\"\nbrain = \"rules\"\n").replace(
        "faults = true\n",
        "faults = true\nmax_connections = 8\nmax_streams = 3\nheader_timeout_secs = 60\nidle_timeout_secs = 60\n",
    );
    let fleet = start(dir.path(), &toml).await;
    let host = fleet.addr.to_string();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    let open = |request: Vec<u8>| async move {
        let mut s = TcpStream::connect(fleet.addr).await.unwrap();
        s.write_all(&request).await.unwrap();
        let answer = read_response(&mut s).await.expect("an answer");
        (s, answer)
    };
    // Every slot taken: two outbox streams and the dashboard's live feed, held open.
    let mut held = Vec::new();
    for path in ["/outbox/stream", "/dashboard/events", "/outbox/stream?room=general"] {
        let (s, (status, _)) = open(get(path)).await;
        assert_eq!(status, 200, "{path}");
        held.push(s);
    }
    // More streams than the slots, and than the connections: each refused at once, and its
    // connection closed, `/mcp` as the others.
    let mcp = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    for i in 0..12 {
        let request = match i % 3 {
            0 => get("/outbox/stream"),
            1 => get("/dashboard/events"),
            _ => mcp.clone().into_bytes(),
        };
        let asked = Instant::now();
        let (mut s, (status, body)) = open(request).await;
        assert_eq!(status, 503, "{body}");
        assert!(body["error"].as_str().unwrap().contains("all 3 of `[admin] max_streams` are taken"), "{body}");
        let took = closed_after(&mut s, asked).await;
        assert!(took < Duration::from_secs(5), "refused and closed after {took:?}");
    }
    // Ordinary requests are served all along.
    assert_eq!(raw(fleet.addr, &health_request(&host)).await.0, 200);
    let event = r#"{"domain":"chat","room":"general","from":"alice","text":"@helper are you there?"}"#;
    let post = format!(
        "POST /events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{event}",
        event.len()
    );
    // A stream that ends gives its slot back (once the fleet writes to it: the reply to this).
    drop(held.pop());
    let (status, ack) = raw(fleet.addr, post.as_bytes()).await;
    assert_eq!((status, ack["accepted"].as_bool()), (200, Some(true)), "{ack}");
    let freed = Instant::now();
    let again = poll("a stream slot given back", || async {
        let (s, (status, _)) = open(get("/outbox/stream")).await;
        (status == 200).then_some(s)
    })
    .await;
    eprintln!("a closed stream's slot was given back after {:?}", freed.elapsed());
    drop((again, held));
    fleet.shutdown(DEADLINE).await;
}
