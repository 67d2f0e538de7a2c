//! Who may drive the API: the `Host`/`Origin` guard (against DNS rebinding and cross-site
//! pages), then the bearer token, or the dashboard's cookie that `POST /dashboard/login` sets.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::extract::rejection::FormRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::HttpState;
use super::extract::{ApiError, error};
use crate::dashboard;

/// The host of an authority (`host[:port]`), lowercase, if it is well-formed: a bracketed IPv6
/// address or a name of letters, digits, `-`, `_` and `.`, then an optional port of digits.
pub(super) fn authority_host(authority: &str) -> Option<String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, _) = rest.split_once(']')?;
            inside.parse::<Ipv6Addr>().ok()?;
            authority.split_at(inside.len() + 2)
        }
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|d| d.len() <= 5 && d.bytes().all(|b| b.is_ascii_digit()));
    let name_ok =
        host.starts_with('[') || host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    (!host.is_empty() && name_ok && port_ok).then(|| host.to_ascii_lowercase())
}

/// Whether `host` (lowercase, from [`authority_host`]) is a loopback literal: `localhost`, an
/// IPv4 address in 127.0.0.0/8 or `[::1]`. A name that only starts like one is not.
pub(super) fn is_loopback_literal(host: &str) -> bool {
    host == "localhost"
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .and_then(|h| h.parse::<Ipv6Addr>().ok())
            .is_some_and(|ip| ip.is_loopback())
}

/// Whether an authority names this loopback API: a loopback literal or a configured name.
pub(super) fn host_allowed(authority: &str, allowed: &[String]) -> bool {
    authority_host(authority).is_some_and(|h| is_loopback_literal(&h) || allowed.contains(&h))
}

/// The authority of an `Origin` (`scheme://host[:port]`, http or https). An origin sent with
/// a path is judged by its authority alone; `null` and other schemes have none.
pub(super) fn origin_authority(origin: &str) -> Option<&str> {
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"))?;
    rest.split(['/', '?', '#']).next().filter(|a| !a.is_empty())
}

/// Whether the `Host` and `Origin` headers may drive this API; the refusal otherwise. On
/// loopback `Host` must name it (a DNS-rebinding page's requests carry its own name); `Origin`,
/// when present, must name it too (on loopback) or be the `Host` (off loopback, where the token
/// guards the API). A header that is not ASCII is refused, never skipped.
pub(super) fn check_host_and_origin(headers: &HeaderMap, loopback: bool, allowed: &[String]) -> Result<(), ApiError> {
    let refuse = |message: String, field: &str| ApiError {
        status: StatusCode::FORBIDDEN,
        message,
        field: Some(field.to_string()),
    };
    let host = match headers.get(header::HOST).map(|h| h.to_str()) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(_)) => return Err(refuse("the Host header is not ASCII".into(), "Host")),
    };
    if let Some(h) = host
        && !loopback
        && authority_host(h).is_none()
    {
        return Err(refuse(format!("Host {h:?} is not host[:port]"), "Host"));
    }
    if loopback && !host.is_some_and(|h| host_allowed(h, allowed)) {
        return Err(refuse(format!("Host {:?} is not a name of this loopback admin API", host.unwrap_or("")), "Host"));
    }
    let origin = match headers.get(header::ORIGIN).map(|h| h.to_str()) {
        None => return Ok(()),
        Some(Ok(o)) => o,
        Some(Err(_)) => return Err(refuse("the Origin header is not ASCII".into(), "Origin")),
    };
    let ok = origin_authority(origin).is_some_and(|a| {
        if loopback { host_allowed(a, allowed) } else { host.is_some_and(|h| a.eq_ignore_ascii_case(h)) }
    });
    if ok { Ok(()) } else { Err(refuse(format!("Origin {origin:?} may not drive this admin API"), "Origin")) }
}

/// DNS-rebinding and cross-site guard, then the bearer token.
pub(super) async fn guard(State(st): State<HttpState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if let Err(e) = check_host_and_origin(headers, st.local.ip().is_loopback(), &st.edges.allowed_hosts) {
        return e.into_response();
    }
    let path = req.uri().path();
    // Open without the token: health, the dashboard's login and its (static) style and script.
    let open = matches!(path, "/health" | "/dashboard/login" | "/dashboard/dashboard.css" | "/dashboard/dashboard.js");
    if let Some(token) = &st.token
        && !open
        && !bearer_matches(headers, token)
        && !cookie_matches(headers, token)
    {
        if path == "/" {
            // A person at the dashboard: the form that sets the cookie.
            return (StatusCode::UNAUTHORIZED, axum::response::Html(dashboard::render_login(false))).into_response();
        }
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer ...)", None);
    }
    next.run(req).await
}

/// Compares in constant time: the SHA-256 digests of both, folded byte by byte, so neither
/// the first difference nor the token's length shows in the time taken.
pub(super) fn same_token(given: &str, token: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (Sha256::digest(given.as_bytes()), Sha256::digest(token.as_bytes()));
    std::hint::black_box(a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

pub(super) fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("");
    same_token(given, token)
}

/// The dashboard's cookie, set by `POST /dashboard/login`: a browser cannot send the bearer
/// header from a page or an `EventSource`.
pub(super) const TOKEN_COOKIE: &str = "mindfleet_token";

pub(super) fn cookie_matches(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(header::COOKIE).iter().filter_map(|h| h.to_str().ok()).flat_map(|h| h.split(';')).any(|c| {
        c.trim().strip_prefix(TOKEN_COOKIE).and_then(|v| v.strip_prefix('=')).is_some_and(|v| same_token(v, token))
    })
}

#[derive(Deserialize)]
pub(super) struct Login {
    token: String,
}

/// The dashboard's login: the right token sets the cookie (HttpOnly, SameSite=Strict, so no
/// other site's page sends it) and goes to the page; a wrong one gets the form again.
pub(super) async fn post_login(
    State(st): State<HttpState>,
    form: Result<axum::Form<Login>, FormRejection>,
) -> Response {
    let login = match form {
        Ok(axum::Form(l)) => l,
        Err(e) => return error(e.status(), e.body_text(), Some("token")),
    };
    let to_page = [(header::LOCATION, "/".to_string())];
    match &st.token {
        None => (StatusCode::SEE_OTHER, to_page).into_response(),
        Some(token) if !same_token(&login.token, token) => {
            (StatusCode::UNAUTHORIZED, axum::response::Html(dashboard::render_login(true))).into_response()
        }
        Some(token) => {
            let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie)], to_page).into_response()
        }
    }
}
