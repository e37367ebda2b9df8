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
//!
//! Only what a browser sends as a preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered as one; any other `OPTIONS`
//! request reaches the routes and gets the answer it gets with CORS off (a
//! `405` or `404` problem), not an empty `200`.

use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, Request, Response, header};
use futures::future::Either;
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, Cors};

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// CORS for the listed origins, answering preflights only (see the module).
#[derive(Clone, Debug)]
pub struct CorsLayer(tower_http::cors::CorsLayer);

impl<S: Clone> Layer<S> for CorsLayer {
    type Service = CorsService<S>;

    fn layer(&self, inner: S) -> CorsService<S> {
        CorsService {
            cors: self.0.layer(inner.clone()),
            plain: inner,
        }
    }
}

/// The service of [`CorsLayer`]: the inner service with CORS, and without
/// it for an `OPTIONS` request that is not a preflight.
#[derive(Clone, Debug)]
pub struct CorsService<S> {
    cors: Cors<S>,
    plain: S,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for CorsService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Either<<Cors<S> as Service<Request<ReqBody>>>::Future, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Two clones of the same stack (the router inside timeouts and
        // error mapping), always ready: neither holds a reservation.
        std::task::ready!(self.cors.poll_ready(cx))?;
        self.plain.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let not_a_preflight = request.method() == Method::OPTIONS
            && !request
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if not_a_preflight {
            Either::Right(self.plain.call(request))
        } else {
            Either::Left(self.cors.call(request))
        }
    }
}

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
    Ok(Some(CorsLayer(
        tower_http::cors::CorsLayer::new()
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
    )))
}

/// `origin` exactly as browsers send it in `Origin` (they compare byte for
/// byte): a lower-case scheme (`https`, `http`, or an app's own such as
/// `tauri` or `capacitor`), a lower-case host (a name, an IPv4 address or a
/// bracketed IPv6 one), and a port only when it is not the scheme's
/// default; nothing after. `file` pages send `null`, which is refused: any
/// sandboxed frame sends it too.
fn origin_value(origin: &str) -> anyhow::Result<HeaderValue> {
    let invalid = |why: &str| {
        anyhow::anyhow!(
            "server.cors_origins: {origin:?} is not an origin as browsers send it ({why}; \
             scheme://host[:port], e.g. https://app.example.com), nor `*`"
        )
    };
    let (scheme, authority) = origin
        .split_once("://")
        .ok_or_else(|| invalid("no scheme"))?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
        && scheme.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.')
        });
    if !scheme_ok {
        return Err(invalid(
            "the scheme must be lower-case letters, digits, `+`, `-` and `.`",
        ));
    }
    if scheme == "file" {
        return Err(invalid("browsers send `null` for pages from files"));
    }
    let default_port = match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    };
    let bracketed = authority.starts_with('[');
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (address, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("an unclosed IPv6 bracket"))?;
        if address.is_empty() || !address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return Err(invalid("not an IPv6 address"));
        }
        if address.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(invalid("browsers send the address in lower case"));
        }
        match after {
            "" => (v6, None),
            _ => (
                v6,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| invalid("text after the host"))?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok = !host.is_empty()
        && (bracketed
            || host.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
            }));
    if !host_ok {
        return Err(invalid(
            "the host must be lower-case letters, digits, `.`, `-` and `_`, with no path",
        ));
    }
    if let Some(port) = port {
        let number: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0 && port.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| invalid("the port must be a number from 1 to 65535"))?;
        if Some(number) == default_port {
            return Err(invalid("browsers leave the scheme's default port out"));
        }
    }
    HeaderValue::from_str(origin).map_err(|_| invalid("not a header value"))
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
            "http://[::1]",
            "http://front_end:3000",
            "https://app.example.com:8443",
            "tauri://localhost",
            "capacitor://localhost",
            "chrome-extension://abcdefghijklmnop",
            "app+web.x-1://host:1234",
        ] {
            assert!(layer(&[good.to_string()]).unwrap().is_some(), "{good}");
        }
        assert!(layer(&["*".to_string()]).unwrap().is_some());
        for bad in [
            "app.example.com",
            "https://",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://app.example.com?x",
            "https://user@app.example.com",
            "https://app example.com",
            "https://App.Example.com",
            "https://app.example.com:443",
            "http://app.example.com:80",
            "https://app.example.com:",
            "https://app.example.com:b",
            "https://app.example.com:1:2",
            "https://app.example.com:0",
            "https://app.example.com:70000",
            "https://:8080",
            "https://a[b]",
            "http://[::1",
            "http://[::1]x",
            "http://[::G]",
            "file://",
            "file://host",
            "null",
            "Tauri://localhost",
            "1app://localhost",
            "+app://localhost",
            "://localhost",
            "tauri://",
            "tauri://Localhost",
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
