//! Keeping web pages out. A browser on the operator's machine can reach a tool server on
//! loopback; with `toolserver.insecure_no_auth` it would need no token to post into Discord,
//! mint a token or reload the config. Every request, on every route, with or without a token,
//! passes these checks before it is routed:
//!
//! * **`Host`** must name this server: the bind address, a loopback name (`localhost`,
//!   `127.0.0.1`, `[::1]`), an IP literal when the bind is a wildcard, or a name in
//!   `toolserver.allowed_hosts` — with any port. A page that rebinds its own DNS name to
//!   127.0.0.1 sends its own name, and is refused (`host_not_allowed`, 403).
//! * **`Origin`**, when present, must be this server's own (`http://` or `https://` and the
//!   request's `Host`); `Sec-Fetch-Site: cross-site` or `same-site` is refused too, except for
//!   a plain navigation (a link to the console's page), which can change nothing
//!   (`cross_origin`, 403).
//! * **`Content-Type`**: every method but GET, HEAD and OPTIONS must declare
//!   `application/json` — a body or none — which a cross-site form or a "simple" `fetch` cannot
//!   send without a CORS preflight, and the server answers no preflight
//!   (`unsupported_media_type`, 415).
//!
//! Programs (the `tools` CLI, MCP clients, curl) send a loopback `Host`, no `Origin` and JSON,
//! and pass. The console keeps its own CSRF token and same-origin check on top.

use axum::http::{header, HeaderMap, Method, StatusCode};
use protocol::ErrorCode;
use std::net::{IpAddr, SocketAddr};

use crate::error::ToolError;
use crate::server::Core;

/// The checks for a server listening on `bind`; extra host names come from the settings in
/// force (`toolserver.allowed_hosts`, reloadable).
pub(crate) struct Guard {
    bind: SocketAddr,
    core: std::sync::Arc<Core>,
}

impl Guard {
    pub(crate) fn new(bind: SocketAddr, core: std::sync::Arc<Core>) -> Guard {
        Guard { bind, core }
    }

    /// `Ok` when the request may be routed; else the typed refusal to answer.
    pub(crate) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ToolError> {
        let host = self.host(headers)?;
        cross_site(method, headers, host)?;
        json_body(method, headers)
    }

    /// The request's `Host`, when it names this server.
    fn host<'h>(&self, headers: &'h HeaderMap) -> Result<&'h str, ToolError> {
        let Some(value) = headers.get(header::HOST) else {
            return Err(self.refused_host("(none)"));
        };
        let text = value.to_str().unwrap_or_default().trim();
        match split_host(text) {
            Some(name) if self.names_this_server(&name) => Ok(text),
            _ => Err(self.refused_host(text)),
        }
    }

    fn names_this_server(&self, name: &str) -> bool {
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return ip.is_loopback() || ip == self.bind.ip() || self.bind.ip().is_unspecified();
        }
        self.core
            .settings()
            .config()
            .toolserver
            .allowed_hosts
            .iter()
            .any(|allowed| allowed == name)
    }

    fn refused_host(&self, host: &str) -> ToolError {
        let port = self.bind.port();
        ToolError::denied(
            ErrorCode::HostNotAllowed,
            format!(
                "Host {host} is not this server: send Host: 127.0.0.1:{port}, localhost:{port} or [::1]:{port} (or {}). Requests naming another host are refused so that no web page can reach this server through DNS rebinding; to serve under another name, add it to toolserver.allowed_hosts",
                self.bind
            ),
        )
        .with_details(serde_json::json!({ "host": host, "bind": self.bind.to_string() }))
    }
}

/// The host name of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercased and
/// without a trailing dot; `None` when it is not one.
fn split_host(text: &str) -> Option<String> {
    let name = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        inside
    } else {
        match text.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return None,
            None => text,
        }
    };
    // An IPv6 literal is only ever written in brackets.
    if name.contains(':') && !text.starts_with('[') {
        return None;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a request a web page of another origin sent.
fn cross_site(method: &Method, headers: &HeaderMap, host: &str) -> Result<(), ToolError> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("(not text)").trim();
        let ours = ["http://", "https://"].iter().any(|scheme| {
            origin
                .get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
                && origin[scheme.len()..].eq_ignore_ascii_case(host)
        });
        if !ours {
            return Err(refused_origin(format!("Origin {origin}")));
        }
    }
    let fetch = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .unwrap_or_default()
    };
    let site = fetch("sec-fetch-site");
    let other_site =
        site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site");
    let navigation = matches!(*method, Method::GET | Method::HEAD)
        && fetch("sec-fetch-mode").eq_ignore_ascii_case("navigate");
    if other_site && !navigation {
        return Err(refused_origin(format!("Sec-Fetch-Site: {site}")));
    }
    Ok(())
}

fn refused_origin(what: String) -> ToolError {
    ToolError::denied(
        ErrorCode::CrossOrigin,
        format!("Refused a request from a web page of another origin ({what}): this API answers programs and its own console only. Call it from a program (which sends no Origin), or use the console this server serves at /"),
    )
}

/// Requires `Content-Type: application/json` of every method that may change something.
fn json_body(method: &Method, headers: &HeaderMap) -> Result<(), ToolError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let media = declared.split(';').next().unwrap_or_default().trim();
    if media.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    let got = if declared.trim().is_empty() {
        "no Content-Type".to_owned()
    } else {
        format!("Content-Type: {}", declared.trim())
    };
    Err(ToolError::usage(
        ErrorCode::UnsupportedMediaType,
        format!("{method} takes JSON, but the request has {got}: send Content-Type: application/json (with a body of {{}} when there is nothing to say)"),
    )
    .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values_split_into_their_name() {
        assert_eq!(split_host("127.0.0.1:7311").as_deref(), Some("127.0.0.1"));
        assert_eq!(split_host("LocalHost").as_deref(), Some("localhost"));
        assert_eq!(split_host("localhost.:80").as_deref(), Some("localhost"));
        assert_eq!(split_host("[::1]:7311").as_deref(), Some("::1"));
        assert_eq!(split_host("[::1]").as_deref(), Some("::1"));
        assert_eq!(
            split_host("evil.example:7311").as_deref(),
            Some("evil.example")
        );
        for bad in ["", ":80", "[::1", "[::1]x", "a:b", "a:123456", "::1"] {
            assert_eq!(split_host(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_host_header_splits_or_is_refused_without_panicking(text in ".{0,80}") {
            if let Some(name) = split_host(&text) {
                proptest::prop_assert!(!name.is_empty());
                proptest::prop_assert!(!name.contains(':') || text.starts_with('['));
            }
        }
    }

    #[test]
    fn only_json_may_change_anything() {
        let mut headers = HeaderMap::new();
        assert!(json_body(&Method::GET, &headers).is_ok());
        let refused = json_body(&Method::POST, &headers).unwrap_err();
        assert_eq!(refused.code, "unsupported_media_type");
        assert_eq!(refused.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        for (value, ok) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
            ("application/jsonx", false),
        ] {
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(json_body(&Method::POST, &headers).is_ok(), ok, "{value}");
            assert_eq!(json_body(&Method::DELETE, &headers).is_ok(), ok, "{value}");
        }
    }

    #[test]
    fn a_foreign_origin_or_fetch_site_is_refused_but_a_navigation_is_not() {
        let host = "127.0.0.1:7311";
        let with = |pairs: &[(&'static str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            headers
        };
        let post = Method::POST;
        assert!(cross_site(&post, &with(&[]), host).is_ok());
        assert!(cross_site(&post, &with(&[("origin", "http://127.0.0.1:7311")]), host).is_ok());
        assert!(cross_site(&post, &with(&[("origin", "HTTPS://127.0.0.1:7311")]), host).is_ok());
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:7312",
            "http://127.0.0.1:7311.evil",
        ] {
            let refused = cross_site(&post, &with(&[("origin", origin)]), host).unwrap_err();
            assert_eq!(refused.code, "cross_origin", "{origin}");
        }
        let cross = [("sec-fetch-site", "cross-site")];
        assert!(cross_site(&post, &with(&cross), host).is_err());
        assert!(cross_site(&Method::GET, &with(&cross), host).is_err());
        let navigation = [
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ];
        assert!(cross_site(&Method::GET, &with(&navigation), host).is_ok());
        assert!(cross_site(&post, &with(&navigation), host).is_err());
        assert!(cross_site(&post, &with(&[("sec-fetch-site", "same-origin")]), host).is_ok());
        assert!(cross_site(&post, &with(&[("sec-fetch-site", "none")]), host).is_ok());
    }
}
