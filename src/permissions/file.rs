//! Path specifiers of file tools: gitignore-style globs relative to the
//! workspace. A pattern without a `/` matches at any depth (`.env` is
//! `**/.env`); one with a `/` is anchored at the workspace root (`src/*.rs`,
//! `/build`); a trailing `/` names a directory; and, as in gitignore, a
//! pattern that matches a directory covers everything under it. `*` stays
//! within one path component, `**` crosses them.
//!
//! Paths that try to leave the workspace (`..`, absolute) are the
//! sandbox's to refuse: here they must simply never satisfy an allow rule,
//! while deny rules still get to see them.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

#[derive(Debug, Clone)]
pub(crate) struct FileSpec {
    set: GlobSet,
}

pub(crate) fn parse(spec: &str) -> Result<FileSpec, String> {
    if spec.starts_with('!') {
        return Err("`!` negation is not supported; deny or allow the paths themselves".into());
    }
    let anchored = spec.starts_with('/');
    let parts: Vec<&str> = spec
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err("`..` leaves the workspace; patterns are relative to the workspace".into());
    }
    let body = parts.join("/");
    let base = if body.is_empty() {
        if !anchored {
            return Err("the pattern names no path".into());
        }
        // `/`: the workspace itself, so everything in it.
        "**".to_string()
    } else if anchored || parts.len() > 1 {
        body
    } else {
        format!("**/{body}")
    };
    // The path itself, or anything under it. A directory pattern (`dir/`)
    // names the directory too: we cannot tell a file from a directory here,
    // and the difference never widens what a deny rule covers.
    let patterns = [format!("{base}/**"), base];
    let mut set = GlobSetBuilder::new();
    for pattern in &patterns {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("{}", e.kind()))?;
        set.add(glob);
    }
    let set = set.build().map_err(|e| format!("{}", e.kind()))?;
    Ok(FileSpec { set })
}

/// The `path` argument of a file tool, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathSubject {
    /// Relative, without `..`: the only form an allow rule may vouch for.
    /// `.` is the workspace itself.
    pub clean: Option<String>,
    /// Every reading a deny rule should consider (the path as written
    /// without its leading `/`, and with `..` resolved lexically).
    pub readings: Vec<String>,
    /// Where the path really leads inside the workspace through symbolic
    /// links, when that is not the path as named (relative, normalised;
    /// found by the caller, which can look at the file system). A deny or
    /// ask rule on it counts; an allow rule must cover it too.
    pub resolved: Option<String>,
}

pub(crate) fn subject(path: &str) -> PathSubject {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let escapes = absolute || parts.contains(&"..");
    let join = |parts: &[&str]| {
        if parts.is_empty() {
            ".".to_string()
        } else {
            parts.join("/")
        }
    };
    let written = join(&parts);
    let mut resolved: Vec<&str> = Vec::new();
    for part in &parts {
        if *part == ".." {
            resolved.pop();
        } else {
            resolved.push(part);
        }
    }
    let resolved = join(&resolved);
    let mut readings = vec![written.clone()];
    if resolved != written {
        readings.push(resolved);
    }
    PathSubject {
        clean: (!escapes).then_some(written),
        readings,
        resolved: None,
    }
}

impl PathSubject {
    /// The same path, known to lead to `resolved` (workspace-relative)
    /// through links.
    pub fn leading_to(mut self, resolved: Option<&str>) -> PathSubject {
        self.resolved = resolved
            .map(|r| subject(r).readings.swap_remove(0))
            .filter(|r| !self.readings.contains(r));
        self
    }

    /// The same path in a sub-workspace, which is `named` (really `real`)
    /// in the owner's workspace, and where the path leads in it
    /// (`leads_to`, relative to the sub-workspace): deny and ask rules
    /// also see it as a path of the owner's workspace, by both names.
    pub fn also_within(mut self, named: &str, real: &str, leads_to: &str) -> PathSubject {
        let in_owner = subject(&format!("{named}/{}", self.readings[0]))
            .readings
            .into_iter()
            .chain(
                subject(&format!("{real}/{leads_to}"))
                    .readings
                    .into_iter()
                    .take(1),
            );
        for reading in in_owner {
            if !self.readings.contains(&reading) {
                self.readings.push(reading);
            }
        }
        self
    }
}

impl FileSpec {
    /// Allow rules: the path is inside the workspace and matches, and so
    /// does where it leads.
    pub fn surely_matches(&self, path: &PathSubject) -> bool {
        path.clean.as_deref().is_some_and(|p| self.set.is_match(p))
            && path
                .resolved
                .as_deref()
                .is_none_or(|r| self.set.is_match(r))
    }

    /// Deny and ask rules: some reading of the path, or where it leads,
    /// matches.
    pub fn may_match(&self, path: &PathSubject) -> bool {
        self.names(path)
            || path
                .resolved
                .as_deref()
                .is_some_and(|r| self.set.is_match(r))
    }

    /// Some reading of the path as named matches (not counting where it
    /// leads).
    pub fn names(&self, path: &PathSubject) -> bool {
        path.readings.iter().any(|p| self.set.is_match(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(pattern: &str, path: &str) -> bool {
        parse(pattern).unwrap().surely_matches(&subject(path))
    }

    fn denies(pattern: &str, path: &str) -> bool {
        parse(pattern).unwrap().may_match(&subject(path))
    }

    #[test]
    fn patterns_without_a_slash_match_at_any_depth() {
        for path in [".env", "a/.env", "a/b/.env", "./a/b/.env", "a//b/.env"] {
            assert!(allows("**/.env", path), "{path}");
            assert!(allows(".env", path), "{path}");
        }
        for path in ["x.env", "a/x.env", ".env.example", "a/.envrc"] {
            assert!(!allows("**/.env", path), "{path}");
            assert!(!allows(".env", path), "{path}");
        }
        assert!(allows("*.pem", "keys/deep/server.pem"));
    }

    #[test]
    fn patterns_with_a_slash_are_anchored() {
        assert!(allows("src/*.rs", "src/main.rs"));
        assert!(!allows("src/*.rs", "src/a/main.rs"));
        assert!(!allows("src/*.rs", "lib/src/main.rs"));
        assert!(allows("src/**/*.rs", "src/a/b/main.rs"));
        assert!(allows("/build", "build/out.o"));
        assert!(!allows("/build", "x/build/out.o"));
        assert!(allows("./src/*.rs", "src/main.rs"));
    }

    #[test]
    fn directories_cover_their_contents() {
        assert!(allows("secrets/**", "secrets/a/key.pem"));
        assert!(allows("secrets", "secrets/a/key.pem"));
        assert!(allows("secrets", "x/secrets/key.pem"));
        assert!(allows("secrets/", "secrets/key.pem"));
        assert!(allows("secrets/", "secrets"));
        assert!(!allows("secrets/**", "secretsx/key.pem"));
        assert!(allows("/", "anything/at/all"));
    }

    #[test]
    fn escaping_paths_never_satisfy_allow_rules() {
        for path in [
            "../x.rs",
            "src/../../x.rs",
            "/etc/passwd",
            "/abs/src/main.rs",
        ] {
            assert!(!allows("**", path), "{path}");
            assert!(!allows("**/*.rs", path), "{path}");
        }
        // …but deny rules still see them.
        assert!(denies("**/.env", "../other/.env"));
        assert!(denies("**/.env", "/home/u/project/.env"));
        assert!(denies("secrets/**", "src/../secrets/key"));
        assert!(denies("secrets/**", "./x/../secrets/key"));
    }

    #[test]
    fn where_a_link_leads_counts_for_deny_and_allow_rules() {
        let link = |named: &str, resolved: &str| subject(named).leading_to(Some(resolved));
        let env = parse(".env").unwrap();
        assert!(env.may_match(&link("link_env", ".env")));
        assert!(env.may_match(&link("a/link", "b/.env")));
        assert!(!env.names(&link("link_env", ".env")));
        assert!(
            parse("secrets/**")
                .unwrap()
                .may_match(&link("docs/k", "secrets/k"))
        );
        assert!(!env.may_match(&link("link", "notes.txt")));
        // An allow rule must cover both the name and the target.
        let docs = parse("docs/**").unwrap();
        assert!(!docs.surely_matches(&link("docs/x", "config/prod.yml")));
        assert!(docs.surely_matches(&link("docs/x", "docs/y")));
        // Leading to itself adds nothing.
        assert_eq!(link("a/b", "./a//b").resolved, None);
    }

    #[test]
    fn odd_paths_do_not_crash() {
        for path in [
            "",
            ".",
            "/",
            "//",
            "..",
            "a/\u{0}/b",
            "\\\\server\\share",
            "[",
            "**",
        ] {
            let s = subject(path);
            let spec = parse("**").unwrap();
            let _ = spec.may_match(&s);
            let _ = spec.surely_matches(&s);
        }
    }

    #[test]
    fn bad_patterns() {
        assert!(parse("src/[").unwrap_err().contains("unclosed"));
        assert!(parse("../x").is_err());
        assert!(parse("!x").is_err());
        assert!(parse("./").is_err());
        assert!(parse("{a,b").is_err());
    }
}
