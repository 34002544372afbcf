//! Who may talk to a `lambdafusion serve`: with a token, whoever presents it (and a peer
//! guessing it gets 429 after a few misses); without one, only this machine by its
//! loopback names — a web page cannot reach the server through a name of its own
//! (DNS rebinding) or from another origin. On AWS the API sits behind IAM or JWT auth
//! instead, and none of this applies.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::Router;

use super::{console, ApiError};

/// The shortest bearer token `serve` accepts.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Wrong tokens one peer may send within [`GUESS_WINDOW`] before it gets 429.
const MAX_GUESSES: u32 = 10;
/// How long wrong guesses are remembered (and a peer past them is refused).
const GUESS_WINDOW: Duration = Duration::from_secs(60);

/// Refuses a token shorter than [`MIN_TOKEN_CHARS`] (a guessable one).
pub fn check_token_strength(token: &str) -> Result<(), String> {
    let chars = token.chars().count();
    if chars < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token has {chars} characters; use at least {MIN_TOKEN_CHARS} (for example \
             `openssl rand -hex 16`)"
        ));
    }
    Ok(())
}

/// Wrong guesses per peer address, within the window.
#[derive(Default)]
struct Guesses(Mutex<HashMap<Option<IpAddr>, (Instant, u32)>>);

impl Guesses {
    /// Whether `peer` may still guess; `Some(retry after)` when it may not.
    fn blocked(&self, peer: Option<IpAddr>) -> Option<Duration> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (since, misses) = map.get(&peer)?;
        let left = GUESS_WINDOW.checked_sub(since.elapsed())?;
        (*misses >= MAX_GUESSES).then_some(left)
    }

    fn missed(&self, peer: Option<IpAddr>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (since, _)| since.elapsed() < GUESS_WINDOW);
        let entry = map.entry(peer).or_insert((Instant::now(), 0));
        entry.1 += 1;
    }
}

/// The peer of a request, when the server recorded it
/// (`into_make_service_with_connect_info`).
fn peer(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Guards `router` with a bearer token: every request but the console's page and
/// assets without `Authorization: Bearer <token>` is answered 401 (the comparison takes
/// the same time whatever the guess); a peer that sent [`MAX_GUESSES`] wrong tokens
/// within a minute is answered 429 until the minute is over.
pub fn with_bearer_token(router: Router, token: String) -> Router {
    let expected = Arc::new(token.into_bytes());
    let guesses = Arc::new(Guesses::default());
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let (expected, guesses) = (expected.clone(), guesses.clone());
            async move {
                // The console's page and assets hold no data (a browser must load them to
                // ask for the token); everything they call carries it.
                if request.method() == axum::http::Method::GET
                    && console::PATHS.contains(&request.uri().path())
                {
                    return next.run(request).await;
                }
                let peer = peer(&request);
                if let Some(after) = guesses.blocked(peer) {
                    let mut response = ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!(
                            "too many wrong bearer tokens from this address ({MAX_GUESSES} in a \
                         minute); try again in {} s",
                            after.as_secs().max(1)
                        ),
                    )
                    .into_response();
                    if let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string()) {
                        response.headers_mut().insert(header::RETRY_AFTER, v);
                    }
                    return response;
                }
                if bearer_token_is(request.headers(), &expected) {
                    return next.run(request).await;
                }
                guesses.missed(peer);
                let mut response = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong bearer token (send Authorization: Bearer <token>, the \
                 token `lambdafusion serve` was started with)",
                )
                .into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
        },
    ))
}

/// Whether `headers` carry `Authorization: Bearer <expected>` (compared in constant
/// time).
pub fn bearer_token_is(headers: &HeaderMap, expected: &[u8]) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .as_bytes();
    tokens_match(given, expected)
}

/// Constant-time token comparison (only the length can be learnt from timing).
fn tokens_match(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == expected.len() && bool::from(given.ct_eq(expected))
}

/// Guards a tokenless `router` listening on loopback port `port`: a request must name
/// the server by a loopback name (`Host: 127.0.0.1:<port>`, `localhost:<port>`,
/// `[::1]:<port>`), and a browser request must come from a page of the same server
/// (`Origin` one of those, `Sec-Fetch-Site` not `cross-site`). Anything else is 403:
/// a page on another site that resolves its own name to 127.0.0.1 (DNS rebinding) or
/// posts across origins cannot use the server.
pub fn loopback_only(router: Router, port: u16) -> Router {
    let names: Arc<Vec<String>> = Arc::new(
        ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{port}"))
            .collect(),
    );
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let names = names.clone();
            async move {
                match loopback_refusal(request.headers(), &names) {
                    Some(message) => ApiError::new(StatusCode::FORBIDDEN, message).into_response(),
                    None => next.run(request).await,
                }
            }
        },
    ))
}

/// Why a request to a tokenless loopback server is refused, if it is.
fn loopback_refusal(headers: &HeaderMap, names: &[String]) -> Option<String> {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("(not text)").to_ascii_lowercase())
    };
    match text(header::HOST) {
        Some(host) if names.contains(&host) => {}
        Some(host) => {
            return Some(format!(
                "this server answers only to its loopback address ({}), not to Host: {host}; \
                 to serve other names, start it with a token",
                names.join(", ")
            ))
        }
        None => return Some("a request must name this server in a Host header".into()),
    }
    if let Some(origin) = text(header::ORIGIN) {
        let same = names
            .iter()
            .any(|n| origin == format!("http://{n}") || origin == format!("https://{n}"));
        if !same {
            return Some(format!(
                "a page from {origin} may not call this server; open the console at \
                 http://{} instead",
                names[0]
            ));
        }
    }
    if text(header::HeaderName::from_static("sec-fetch-site")).as_deref() == Some("cross-site") {
        return Some("a page from another site may not call this server".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_tokenless_server_answers_its_loopback_names_and_pages_only() {
        let names: Vec<String> = ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for ok in [
            vec![("host", "127.0.0.1:8080")],
            vec![("host", "LOCALHOST:8080")],
            vec![("host", "[::1]:8080")],
            vec![
                ("host", "localhost:8080"),
                ("origin", "http://localhost:8080"),
            ],
            vec![
                ("host", "127.0.0.1:8080"),
                ("sec-fetch-site", "same-origin"),
            ],
        ] {
            assert_eq!(loopback_refusal(&headers(&ok), &names), None, "{ok:?}");
        }
        for refused in [
            vec![],
            vec![("host", "attacker.example")],
            vec![("host", "attacker.example:8080")],
            vec![("host", "127.0.0.1:9999")],
            vec![("host", "127.0.0.1.nip.io:8080")],
            vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "http://attacker.example"),
            ],
            vec![("host", "127.0.0.1:8080"), ("origin", "null")],
            vec![("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")],
        ] {
            assert!(
                loopback_refusal(&headers(&refused), &names).is_some(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn short_tokens_are_refused() {
        assert!(check_token_strength("t0ken").is_err());
        assert!(check_token_strength("0123456789abcdef").is_ok());
    }

    #[test]
    fn a_peer_is_blocked_after_its_guesses() {
        let g = Guesses::default();
        let (a, b) = (
            Some("10.0.0.1".parse().unwrap()),
            Some("10.0.0.2".parse().unwrap()),
        );
        for _ in 0..MAX_GUESSES {
            assert!(g.blocked(a).is_none());
            g.missed(a);
        }
        assert!(g.blocked(a).is_some());
        assert!(
            g.blocked(b).is_none(),
            "another peer guesses on its own count"
        );
    }
}
