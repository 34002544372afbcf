//! The front's HTTP/1 client to moto_server: forwards a request with its method, path,
//! query, headers and body as they came (bodies stream both ways), minus the hop-by-hop
//! headers a proxy must not pass on (RFC 9110 §7.6.1).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

use crate::Error;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1); the
/// transfer coding is redone by each side.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops the hop-by-hop headers (and those a `Connection` header names).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    for name in named {
        headers.remove(name);
    }
}

/// A client for one upstream (`http://host:port`).
#[derive(Debug, Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Body>,
    scheme_authority: String,
}

impl Upstream {
    /// A client for `url` (`http://host:port`, validated by the config).
    pub fn new(url: &str) -> Result<Upstream, Error> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("front upstream {url:?} is not a URL: {e}"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| format!("front upstream {url:?} has no host:port"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        // moto_server (werkzeug) closes every connection after one response: a pooled
        // connection would only be a stale one.
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Ok(Upstream {
            client,
            scheme_authority: format!("http://{authority}"),
        })
    }

    /// Sends `method path_and_query` with `headers` (hop-by-hop ones removed) and `body`.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response<Incoming>, Error> {
        let uri: Uri = format!("{}{path_and_query}", self.scheme_authority)
            .parse()
            .map_err(|e| format!("cannot forward {path_and_query:?}: {e}"))?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .map_err(|e| format!("cannot build the upstream request: {e}"))?;
        let mut headers = headers.clone();
        strip_hop_by_hop(&mut headers);
        *request.headers_mut() = headers;
        self.client
            .request(request)
            .await
            .map_err(|e| format!("moto_server at {}: {e}", self.scheme_authority).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("connection", "close, x-private".parse().unwrap());
        h.insert("x-private", "1".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("content-length", "5".parse().unwrap());
        h.insert("authorization", "AWS4-HMAC-SHA256 ...".parse().unwrap());
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "content-length"]);
    }
}
