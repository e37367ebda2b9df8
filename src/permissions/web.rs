//! `webfetch(…)` specifiers: `domain:example.com` or `example.com` names that
//! host and its subdomains; `*.example.com` only the subdomains; an IP
//! address only itself. The host of a URL is read strictly: anything a
//! lenient URL parser might read differently (percent-escapes, non-ASCII,
//! shortened IPv4 forms) counts as unparsable, and an unparsable URL never
//! satisfies an allow rule.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::http::Uri;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DomainSpec {
    host: String,
    subdomains_only: bool,
    ip: bool,
}

pub(crate) fn parse(spec: &str) -> Result<DomainSpec, String> {
    let text = spec.strip_prefix("domain:").unwrap_or(spec).trim();
    if !text.is_ascii() {
        return Err("write an internationalised domain in its ASCII form (`xn--…`)".into());
    }
    if text.contains("://") || text.contains('/') || text.contains('@') || text.contains('?') {
        return Err("give a host such as `domain:example.com`, not a URL".into());
    }
    let lower = text.to_ascii_lowercase();
    let (subdomains_only, host) = match lower.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, lower.as_str()),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| format!("`{inner}` is not an IPv6 address"))?;
        return ip_spec(ip.to_string(), subdomains_only);
    }
    if host.contains(':') {
        return Err("ports are not supported; name the host only".into());
    }
    if host.is_empty() || host.split('.').any(|label| label.is_empty()) {
        return Err("a host name needs non-empty labels, e.g. `example.com`".into());
    }
    if let Some(bad) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.'))
    {
        return Err(format!("`{bad}` cannot appear in a host name"));
    }
    if looks_numeric(host) {
        let ip: Ipv4Addr = host
            .parse()
            .map_err(|_| format!("`{host}` is not a dotted IPv4 address"))?;
        return ip_spec(ip.to_string(), subdomains_only);
    }
    Ok(DomainSpec {
        host: host.to_string(),
        subdomains_only,
        ip: false,
    })
}

fn ip_spec(host: String, subdomains_only: bool) -> Result<DomainSpec, String> {
    if subdomains_only {
        return Err("an IP address has no subdomains".into());
    }
    Ok(DomainSpec {
        host,
        subdomains_only,
        ip: true,
    })
}

/// A host whose last label is a number is an IPv4 address to a URL parser.
fn looks_numeric(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or(host);
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x"))
}

/// The lower-case host of an absolute URL, or `None` when it cannot be
/// read unambiguously.
pub(crate) fn host_of(url: &str) -> Option<String> {
    let uri: Uri = url.trim().parse().ok()?;
    uri.scheme()?;
    let host = uri.host()?.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().ok().map(|ip| ip.to_string());
    }
    let valid = !host.is_empty()
        && host.split('.').all(|label| !label.is_empty())
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if !valid {
        return None;
    }
    if looks_numeric(host) {
        // Only the canonical dotted form: `127.1`, `0x7f.0.0.1` and
        // `2130706433` mean 127.0.0.1 to some parsers.
        let ip: Ipv4Addr = host.parse().ok()?;
        return (ip.to_string() == host).then(|| host.to_string());
    }
    Some(host.to_string())
}

impl DomainSpec {
    pub fn matches(&self, host: &str) -> bool {
        if self.ip {
            return host == self.host;
        }
        let subdomain = host.len() > self.host.len() + 1
            && host.ends_with(self.host.as_str())
            && host.as_bytes()[host.len() - self.host.len() - 1] == b'.';
        subdomain || (!self.subdomains_only && host == self.host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(spec: &str, url: &str) -> bool {
        let spec = parse(spec).unwrap();
        host_of(url).is_some_and(|h| spec.matches(&h))
    }

    #[test]
    fn hosts_and_subdomains() {
        for spec in [
            "domain:example.com",
            "example.com",
            "Example.COM",
            "domain:example.com.",
        ] {
            assert!(matches(spec, "https://example.com/x"), "{spec}");
            assert!(matches(spec, "http://docs.example.com"), "{spec}");
            assert!(
                matches(spec, "https://a.b.example.com:8443/p?q#f"),
                "{spec}"
            );
            assert!(matches(spec, "HTTPS://EXAMPLE.COM."), "{spec}");
            assert!(matches(spec, "https://user:pw@example.com/"), "{spec}");
        }
    }

    #[test]
    fn lookalikes_do_not_match() {
        for url in [
            "https://example.com.evil.io/",
            "https://evilexample.com/",
            "https://example.co/",
            "https://example.com@evil.io/",
            "https://evil.io/?u=https://example.com",
            "https://evil.io/example.com",
            "https://evil.io#example.com",
        ] {
            assert!(!matches("domain:example.com", url), "{url}");
        }
    }

    #[test]
    fn subdomains_only() {
        assert!(matches("*.example.com", "https://a.example.com"));
        assert!(!matches("*.example.com", "https://example.com"));
    }

    #[test]
    fn ip_addresses() {
        assert!(matches("127.0.0.1", "http://127.0.0.1:8080/"));
        assert!(parse("0.0.1").is_err());
        assert!(!matches("27.0.0.1", "http://127.0.0.1/"));
        assert!(matches("[::1]", "http://[::1]:80/"));
        assert_eq!(host_of("http://127.1/"), None);
        assert_eq!(host_of("http://0x7f.0.0.1/"), None);
        assert_eq!(host_of("http://2130706433/"), None);
    }

    #[test]
    fn unparsable_urls_have_no_host() {
        for url in [
            "",
            "not a url",
            "example.com/path",
            "/relative",
            "https://",
            "https://exa%6dple.com/",
            "https://ｅxample.com/",
            "https://example.com\\@evil.io/",
            "file:///etc/passwd",
            "https://a..b/",
        ] {
            assert_eq!(host_of(url), None, "{url}");
        }
    }

    #[test]
    fn bad_specifiers() {
        assert!(parse("https://example.com").is_err());
        assert!(parse("example.com/path").is_err());
        assert!(parse("example.com:443").is_err());
        assert!(parse("exämple.com").is_err());
        assert!(parse("a..b").is_err());
        assert!(parse("*.1.2.3.4").is_err());
        assert!(parse("300.1.1.1").is_err());
        assert!(parse("").is_err());
    }
}
