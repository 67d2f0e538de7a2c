//! A server that dies under a call, or cannot start.

use std::time::{Duration, Instant};

use crate::{Backoff, CallError, ConnectError, ErrorClass, ServerState, ToolClient, ToolServerSpec};
use serde_json::json;

use super::util::{EVERYTHING, HttpEverything, connect, in_secs, stdio, until};

#[tokio::test]
async fn a_server_killed_mid_call_ends_the_call_as_lost_and_reconnect_brings_it_back() {
    let client = connect(stdio("everything", EVERYTHING, &[])).await;
    let pid = client.pid().expect("a stdio child");

    let started = Instant::now();
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            let args = json!({ "duration": 60, "steps": 60 });
            client.call("trigger-long-running-operation", args, in_secs(60)).await
        }
    });
    until("the call is in flight", Duration::from_secs(10), || client.calls_in_flight() == 1).await;
    // SAFETY: kill(2) on the child this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);

    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, CallError::TransportLost { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Unknown);
    assert!(err.to_string().contains("transport lost: the server process "), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?} of its 60 s", started.elapsed());
    let state = client.state();
    assert!(matches!(&state, ServerState::Failed { reason } if reason.starts_with("transport lost")), "{state}");
    let refused = client.call("echo", json!({ "message": "anyone?" }), in_secs(10)).await.unwrap_err();
    assert!(matches!(refused, CallError::NotReady { .. }), "{refused}");

    client.reconnect().await.expect("reconnects");
    assert_eq!(client.state(), ServerState::Ready);
    assert_ne!(client.pid(), Some(pid));
    let echo = client.call("echo", json!({ "message": "back" }), in_secs(10)).await.unwrap();
    assert_eq!(echo.text, "Echo: back");
}

/// Over HTTP there is no process to see die: the call's response stream breaks, rmcp's worker
/// tries to resume it a few times, and then the call ends as lost and the server with it.
#[tokio::test]
async fn an_http_server_killed_mid_call_ends_the_call_as_lost_and_reconnect_brings_it_back() {
    let server = HttpEverything::start().await;
    let client = connect(ToolServerSpec::http("everything", &server.url)).await;

    let started = Instant::now();
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            let args = json!({ "duration": 60, "steps": 60 });
            client.call("trigger-long-running-operation", args, in_secs(60)).await
        }
    });
    until("the call is in flight", Duration::from_secs(10), || client.calls_in_flight() == 1).await;
    let port = server.port;
    drop(server);

    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, CallError::TransportLost { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Unknown);
    // Its response stream broke; or, when the server died before the request reached it, the
    // request went unanswered.
    let text = err.to_string();
    assert!(
        text.contains("transport lost: the call's response stream broke") || text.contains("cannot be reached"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?} of its 60 s", started.elapsed());
    let state = client.state();
    assert!(matches!(&state, ServerState::Failed { reason } if reason.starts_with("transport lost")), "{state}");

    // The old child is killed when dropped, not waited for: its port is free once it is gone
    // (else the new server cannot listen, and the old one answers the check below).
    until("the old server gone", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    })
    .await;
    let _server = HttpEverything::start_on(port).await;
    client.reconnect().await.expect("reconnects");
    let echo = client.call("echo", json!({ "message": "back" }), in_secs(10)).await.unwrap();
    assert_eq!(echo.text, "Echo: back");
}

#[tokio::test]
async fn an_http_server_gone_while_idle_is_noticed_by_the_next_call() {
    let server = HttpEverything::start().await;
    let client = connect(ToolServerSpec::http("everything", &server.url)).await;
    drop(server);
    let err = client.call("echo", json!({ "message": "anyone?" }), in_secs(10)).await.unwrap_err();
    assert!(matches!(err, CallError::TransportLost { .. } | CallError::NotReady { .. }), "{err}");
    let state = client.state();
    assert!(matches!(&state, ServerState::Failed { reason } if reason.starts_with("transport lost")), "{state}");
}

#[tokio::test]
async fn a_server_that_cannot_start_says_why_and_reconnects_back_off() {
    // A child that dies before the handshake, saying why on stderr as servers do.
    let spec = ToolServerSpec::stdio("broken", "/bin/sh", &["-c", "echo 'fatal: no repository at /srv/x' >&2; exit 3"]);
    let client = ToolClient::new(spec, Backoff::default()).unwrap();
    assert_eq!(client.state(), ServerState::Connecting);
    let err = client.connect().await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("tool server `broken`: handshake failed: "), "{text}");
    assert!(text.ends_with("(last on stderr: fatal: no repository at /srv/x)"), "{text}");
    assert!(matches!(client.state(), ServerState::Failed { reason } if reason == text));

    for attempt in 1..=2 {
        let started = Instant::now();
        let retry = tokio::spawn({
            let client = client.clone();
            async move { client.reconnect().await }
        });
        until("the attempt shows", Duration::from_secs(5), || client.state() == ServerState::Restarting { attempt })
            .await;
        assert!(retry.await.unwrap().is_err());
        let waited = Backoff::default().delay(attempt);
        assert!(started.elapsed() >= waited, "attempt {attempt} after {:?}, not {waited:?}", started.elapsed());
        assert!(matches!(client.state(), ServerState::Failed { .. }));
    }

    let missing = ToolServerSpec::stdio("nothing", "/nonexistent/mcp-server", &[]);
    let client = ToolClient::new(missing, Backoff::default()).unwrap();
    let err = client.connect().await.unwrap_err();
    assert!(matches!(err, ConnectError::Spawn { .. }), "{err}");
    assert!(err.to_string().starts_with("tool server `nothing`: cannot start `/nonexistent/mcp-server`"), "{err}");
}
