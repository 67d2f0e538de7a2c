use axum::body::{Body, Bytes, to_bytes};
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use std::net::Ipv4Addr;

use super::extract::*;
use super::guard::*;
use super::*;
use proptest::prelude::*;

fn headers(pairs: &[(header::HeaderName, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(k.clone(), HeaderValue::from_bytes(v).unwrap());
    }
    h
}

fn refused_field(h: &HeaderMap, loopback: bool) -> Option<String> {
    check_host_and_origin(h, loopback, &["fleet.internal".to_string()]).err().map(|e| {
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        e.field.unwrap()
    })
}

#[test]
fn loopback_literals_and_configured_names_are_hosts_of_a_loopback_api() {
    let allowed = ["fleet.internal".to_string()];
    for h in [
        "localhost",
        "localhost:7878",
        "LOCALHOST",
        "LocalHost:7878",
        "127.0.0.1:7878",
        "127.0.0.2",
        "127.255.255.254:1",
        "[::1]:7878",
        "[::1]",
        "[0:0:0:0:0:0:0:1]:80",
        "fleet.internal:7878",
        "FLEET.internal",
    ] {
        assert!(host_allowed(h, &allowed), "{h}");
    }
}

#[test]
fn a_host_that_only_starts_with_127_is_refused() {
    for h in [
        "127.attacker.example:7878",
        "127.attacker.example",
        "127.0.0.1.attacker.example",
        "127.0.0.1.attacker.example:7878",
        "127.1",
        "127.0.0.256",
        "localhost.attacker.example",
        "evil.example:7878",
        "10.0.0.1:7878",
        "[::2]:7878",
        "[::1",
        "::1",
        "localhost:78x",
        "localhost:7878:1",
        "user@localhost",
        "local host",
        "localhost\t",
        "",
    ] {
        assert!(!host_allowed(h, &[]), "{h}");
    }
}

#[test]
fn an_origin_that_only_starts_with_a_loopback_address_is_refused() {
    let bad = |origin: &[u8]| headers(&[(header::HOST, b"127.0.0.1:7878"), (header::ORIGIN, origin)]);
    for o in [
        &b"http://127.0.0.1.attacker.example"[..],
        b"http://127.0.0.1.attacker.example:7878",
        b"http://127.attacker.example:7878",
        b"http://localhost@attacker.example",
        b"null",
        b"ftp://127.0.0.1",
        b"http://",
        b"http:///127.0.0.1",
    ] {
        assert_eq!(refused_field(&bad(o), true).as_deref(), Some("Origin"), "{}", String::from_utf8_lossy(o));
    }
    let host = |h: &[u8]| headers(&[(header::HOST, h)]);
    assert_eq!(refused_field(&host(b"127.attacker.example:7878"), true).as_deref(), Some("Host"));
    assert_eq!(refused_field(&HeaderMap::new(), true).as_deref(), Some("Host"));
}

#[test]
fn a_non_ascii_origin_or_host_is_refused_not_skipped() {
    let h = headers(&[(header::HOST, b"127.0.0.1:7878"), (header::ORIGIN, b"http://\xc3\xa9vil.example")]);
    assert_eq!(refused_field(&h, true).as_deref(), Some("Origin"));
    assert_eq!(refused_field(&h, false).as_deref(), Some("Origin"));
    let h = headers(&[(header::HOST, b"\xc3\xa9vil.example")]);
    assert_eq!(refused_field(&h, true).as_deref(), Some("Host"));
    assert_eq!(refused_field(&h, false).as_deref(), Some("Host"));
    // Off loopback too, a Host that is not host[:port] is refused.
    for bad in [&b"a b"[..], b"10.1.2.3:port", b"[::1"] {
        let h = headers(&[(header::HOST, bad)]);
        assert_eq!(refused_field(&h, false).as_deref(), Some("Host"), "{}", String::from_utf8_lossy(bad));
    }
    assert_eq!(refused_field(&headers(&[(header::HOST, b"fleet.example.org:7878")]), false), None);
}

#[test]
fn https_origins_and_origins_with_a_path_are_judged_by_their_authority() {
    let ok = |origin: &[u8], loopback: bool| {
        let h = headers(&[(header::HOST, b"10.1.2.3:7878"), (header::ORIGIN, origin)]);
        let h = if loopback { headers(&[(header::HOST, b"localhost:7878"), (header::ORIGIN, origin)]) } else { h };
        refused_field(&h, loopback).is_none()
    };
    assert!(ok(b"https://localhost:7878", true));
    assert!(ok(b"http://127.0.0.1:7878/dashboard?x#y", true));
    assert!(ok(b"https://fleet.internal", true));
    assert!(!ok(b"https://127.0.0.1.attacker.example/127.0.0.1", true));
    // Off loopback, the origin must be the Host it was sent to.
    assert!(ok(b"http://10.1.2.3:7878", false));
    assert!(ok(b"https://10.1.2.3:7878/", false));
    assert!(!ok(b"http://10.1.2.3:7879", false));
    assert!(!ok(b"http://localhost:7878", false));
}

#[test]
fn bearer_must_match_exactly() {
    let mut h = HeaderMap::new();
    h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
    assert!(bearer_matches(&h, "s3cret"));
    assert!(!bearer_matches(&h, "s3cre"));
    assert!(!bearer_matches(&h, "s3cret!"));
    assert!(!bearer_matches(&HeaderMap::new(), "s3cret"));
}

#[test]
fn tokens_of_other_lengths_are_compared_over_their_digests() {
    // Equal digests only for equal tokens; a prefix or an extension is another token.
    assert!(same_token("a-long-enough-token", "a-long-enough-token"));
    for given in ["", "a", "a-long-enough-toke", "a-long-enough-token-", "A-long-enough-token"] {
        assert!(!same_token(given, "a-long-enough-token"), "{given}");
    }
}

#[test]
fn a_bad_query_parameter_is_named_in_a_json_error() {
    let e = parse_query::<AiParams>("persona=x&limit=abc").err().unwrap();
    assert_eq!((e.status, e.field.as_deref()), (StatusCode::BAD_REQUEST, Some("limit")), "{e:?}");
    assert!(e.message.contains("limit"), "{e:?}");
    let e = parse_query::<AiParams>("verdict=maybe").err().unwrap();
    assert_eq!(e.field.as_deref(), Some("verdict"), "{e:?}");
    let e = parse_query::<AiParams>("priority=high").err().unwrap();
    assert_eq!(e.field.as_deref(), Some("priority"), "{e:?}");
    let p = parse_query::<AiParams>("persona=ada&limit=5&since=1h&unknown=1").unwrap();
    assert_eq!((p.persona.as_deref(), p.limit, p.since.as_deref()), (Some("ada"), Some(5), Some("1h")));
}

#[test]
fn a_domain_that_is_not_a_name_is_refused_by_select_for_task() {
    for q in ["domain=%00", "domain=chat%00", "domain=nope", "domain="] {
        let e = ai_query("select-for-task", parse_query(q).unwrap()).err().unwrap();
        assert_eq!(e.field.as_deref(), Some("domain"), "{q}: {e:?}");
    }
    assert!(ai_query("select-for-task", parse_query("domain=chat").unwrap()).is_ok());
    for (q, field) in [("persona=A", "persona"), ("persona=a%0Ab", "persona"), ("room=a/b", "room")] {
        let e = ai_query("recall", parse_query(&format!("{q}&text=x")).unwrap()).err().unwrap();
        assert_eq!(e.field.as_deref(), Some(field), "{q}: {e:?}");
    }
    let e = ai_query("thoughts", AiParams::default()).err().unwrap();
    assert_eq!(e.field.as_deref(), Some("persona"), "{e:?}");
}

#[tokio::test]
async fn a_body_cut_short_is_told_from_one_over_the_limit() {
    let e = to_bytes(Body::from("x".repeat(100)), 10).await.unwrap_err();
    assert_eq!(body_error(&e), BodyError::TooLarge);
    let cut = futures::stream::iter([
        Ok::<_, std::io::Error>(Bytes::from_static(b"{\"a\"")),
        Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "incomplete body")),
    ]);
    let e = to_bytes(Body::from_stream(cut), 1000).await.unwrap_err();
    match body_error(&e) {
        BodyError::Malformed(m) => assert!(m.contains("ended before its declared length"), "{m}"),
        other => panic!("{other:?}"),
    }
    let bad = futures::stream::iter([Err::<Bytes, _>(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "Invalid chunk size line: Invalid Size",
    ))]);
    let e = to_bytes(Body::from_stream(bad), 1000).await.unwrap_err();
    match body_error(&e) {
        BodyError::Malformed(m) => assert!(m.contains("Invalid chunk size"), "{m}"),
        other => panic!("{other:?}"),
    }
}

const QUERIES: &[&str] = &[
    "state",
    "thoughts",
    "decisions",
    "plan",
    "plan-history",
    "learnings",
    "recoveries",
    "memory",
    "adapters",
    "health",
    "availability",
    "activity-map",
    "cost",
    "recall",
    "select-for-task",
    "why",
    "history",
    "nope",
];
const KEYS: &[&str] =
    &["persona", "domain", "verdict", "priority", "text", "room", "limit", "since", "page_size", "buckets", "event"];

/// Values as clients send them: edge numbers, names, and anything at all.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("-0".to_string()),
        Just("1e309".to_string()),
        Just(u64::MAX.to_string()),
        Just(format!("{}0", u128::MAX)),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("chat".to_string()),
        Just("engage".to_string()),
        Just("18446744073709551615d".to_string()),
        "[a-z0-9_-]{1,70}",
        "[0-9]{1,25}[smhd]?",
        any::<String>(),
    ]
}

/// `ai_query` on what a query string parsed into: a valid query or a clear error.
fn check_query(what: &str, query: &str) {
    let Ok(p) = parse_query::<AiParams>(query) else { return };
    let (persona, domain, room) = (p.persona.clone(), p.domain.clone(), p.room.clone());
    match ai_query(what, p) {
        Ok(q) => {
            assert!(persona.as_deref().is_none_or(valid_name), "{query}");
            assert!(room.as_deref().is_none_or(valid_name), "{query}");
            assert!(domain.as_deref().is_none_or(|d| DOMAINS.contains(&d)), "{query}");
            match q {
                AiQuery::SelectForTask { priority, .. } => assert!((0.0..=1.0).contains(&priority)),
                AiQuery::Cost { buckets, .. } => assert!(buckets <= MAX_COST_BUCKETS),
                AiQuery::PlanHistory { limit, .. } | AiQuery::Recoveries { limit, .. } => {
                    assert!((1..=1000).contains(&limit))
                }
                AiQuery::Why { event_id } => {
                    assert!((1..=128).contains(&event_id.len()) && !event_id.contains(char::is_control), "{query}")
                }
                _ => {}
            }
        }
        Err(e) => {
            assert!(!e.message.is_empty() && !e.message.ends_with('.'), "{e:?}");
            if let Some(f) = &e.field {
                assert!(KEYS.contains(&f.as_str()), "{e:?}");
            }
        }
    }
}

proptest! {
    #[test]
    fn ai_parameters_give_a_query_or_a_clear_error(
        what in proptest::sample::select(QUERIES),
        pairs in proptest::collection::vec((proptest::sample::select(KEYS), value()), 0..6),
    ) {
        let query: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        check_query(what, &query);
    }

    #[test]
    fn any_query_string_parses_or_is_refused_with_a_clear_error(
        what in proptest::sample::select(QUERIES),
        query in any::<String>(),
    ) {
        check_query(what, &query);
        if let Err(e) = parse_query::<AiParams>(&query) {
            prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn any_authority_is_allowed_only_as_a_loopback_literal(host in any::<String>()) {
        if host_allowed(&host, &[]) {
            let h = authority_host(&host).unwrap();
            prop_assert!(h == "localhost" || h.parse::<Ipv4Addr>().is_ok() || h.starts_with('['), "{}", host);
        }
    }
}
