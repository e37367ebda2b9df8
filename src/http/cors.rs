//! Cross-origin access for browser frontends (`server.cors_origins`).
//!
//! Off by default: with no origin listed, no response carries CORS headers
//! and a browser page on another origin cannot read any answer (same-origin
//! pages and non-browser clients are unaffected). Listed origins may call
//! every route with a bearer token: preflights are answered before
//! authentication, and the answers a page needs to read (`x-request-id`,
//! `WWW-Authenticate` on a `401`, `Retry-After` on a `429`) are exposed.
//! Credentials travel in the `Authorization` header, never in cookies, so
//! allowing an origin (or `*`) grants it nothing without a token.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The layer for `origins` (each `scheme://host[:port]`, or `*` alone for
/// any origin); `None` when the list is empty. An origin that is not one
/// is an error naming it.
pub fn layer(origins: &[String]) -> anyhow::Result<Option<CorsLayer>> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        anyhow::ensure!(
            origins.len() == 1,
            "server.cors_origins: `*` allows every origin and cannot be listed with others"
        );
        AllowOrigin::any()
    } else {
        let mut values = Vec::with_capacity(origins.len());
        for origin in origins {
            values.push(origin_value(origin)?);
        }
        AllowOrigin::list(values)
    };
    let request_id = HeaderName::from_static("x-request-id");
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PUT])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
                request_id.clone(),
            ])
            .expose_headers([request_id, header::WWW_AUTHENTICATE, header::RETRY_AFTER])
            .max_age(PREFLIGHT_MAX_AGE),
    ))
}

/// `origin` as browsers send it in `Origin`: `http://` or `https://`, a
/// host, an optional port, nothing after.
fn origin_value(origin: &str) -> anyhow::Result<HeaderValue> {
    let invalid = || {
        anyhow::anyhow!(
            "server.cors_origins: {origin:?} is not an origin (scheme://host[:port], \
             e.g. https://app.example.com, with no path or trailing slash), nor `*`"
        )
    };
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or_else(invalid)?;
    let well_formed = !authority.is_empty()
        && authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !well_formed {
        return Err(invalid());
    }
    HeaderValue::from_str(origin).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_and_an_empty_list_turns_cors_off() {
        assert!(layer(&[]).unwrap().is_none());
        for good in [
            "https://app.example.com",
            "http://localhost:5173",
            "http://127.0.0.1:3000",
            "http://[::1]:8080",
        ] {
            assert!(layer(&[good.to_string()]).unwrap().is_some(), "{good}");
        }
        assert!(layer(&["*".to_string()]).unwrap().is_some());
        for bad in [
            "app.example.com",
            "https://",
            "https://app.example.com/",
            "https://app.example.com/path",
            "ftp://app.example.com",
            "https://app.example.com?x",
            "https://user@app.example.com",
            "https://app example.com",
        ] {
            let err = layer(&[bad.to_string()]).unwrap_err().to_string();
            assert!(err.contains("is not an origin"), "{bad}: {err}");
        }
        let err = layer(&["*".into(), "https://a.example".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be listed with others"), "{err}");
    }
}
