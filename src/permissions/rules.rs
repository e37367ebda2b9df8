//! Rules as written (`bash(git status)`, `read(secrets/**)`, `webfetch`)
//! and rule sets (`{"allow": […], "ask": […], "deny": […]}`), parsed once:
//! a rule that cannot mean what its author meant is an error naming the
//! list, the index and the problem, never a rule that silently matches
//! nothing.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{bash, file, web};

/// One rule: `tool` (every call of the tool) or `tool(specifier)`.
#[derive(Debug, Clone)]
pub struct Rule {
    raw: String,
    tool: String,
    specifier: Option<Specifier>,
}

/// A specifier read every way a tool class could read it; the call's class
/// picks one at decision time. A reading that failed keeps its message.
#[derive(Debug, Clone)]
pub(crate) struct Specifier {
    pub raw: String,
    pub bash: Result<bash::BashSpec, String>,
    pub file: Result<file::FileSpec, String>,
    pub web: Result<web::DomainSpec, String>,
}

/// What is wrong with one rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("the rule is empty")]
    Empty,
    #[error("`{0}` is not a tool name (1–64 of A–Z a–z 0–9 _ . -)")]
    BadToolName(String),
    #[error("tool names are case-sensitive: write `{suggestion}`, not `{given}`")]
    WrongCase { given: String, suggestion: String },
    #[error("unbalanced parentheses: {0}")]
    UnbalancedParentheses(&'static str),
    #[error("text after the closing `)`: `{0}`")]
    TrailingText(String),
    #[error("empty specifier: write `{0}` for every call, or a pattern between the parentheses")]
    EmptySpecifier(String),
    #[error("bad command pattern `{pattern}`: {message}")]
    BadCommand { pattern: String, message: String },
    #[error("bad glob `{pattern}`: {message}")]
    BadGlob { pattern: String, message: String },
    #[error("bad domain `{pattern}`: {message}")]
    BadDomain { pattern: String, message: String },
    #[error(
        "allow rules see a command after `{wrapper}` is removed, so this rule can never match; name the command itself"
    )]
    AllowsWrapper { wrapper: String },
    #[error(
        "`{keyword}` is a shell keyword: compound commands are split and each command in them \
         is checked on its own, so this rule could never match; name the commands inside \
         (`bash(read *)`, `bash(echo *)`)"
    )]
    Keyword { keyword: String },
}

/// A rule that failed to parse, and where it sits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{list}[{index}] `{rule}`: {error}")]
pub struct RuleSetError {
    /// `allow`, `ask` or `deny`.
    pub list: &'static str,
    pub index: usize,
    pub rule: String,
    pub error: RuleError,
}

/// What a rule's tool name is known to be, so its specifier can be checked
/// when it is parsed. Other names (runtime tools) are checked at decision
/// time, by the class of the tool they meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    Bash,
    /// A built-in read-only file tool.
    FileRead,
    /// A built-in file tool that writes.
    FileWrite,
    /// The groups `read` and `write`.
    FileGroup,
    Web,
}

pub(crate) fn known(tool: &str) -> Option<Known> {
    match tool {
        "bash" => Some(Known::Bash),
        "read_file" | "glob" | "grep" => Some(Known::FileRead),
        "write_file" | "edit_file" | "apply_diff" | "undo_edit" => Some(Known::FileWrite),
        "read" | "write" => Some(Known::FileGroup),
        "webfetch" | "web_fetch" => Some(Known::Web),
        _ => None,
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Parentheses outside quotes balance (quotes matter for bash patterns
/// such as `echo ")"`).
fn check_balance(spec: &str) -> Result<(), RuleError> {
    let mut depth = 0usize;
    let mut quote = None;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                chars.next();
            }
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '(') => depth += 1,
            (None, ')') => {
                depth = depth
                    .checked_sub(1)
                    .ok_or(RuleError::UnbalancedParentheses(
                        "a `)` in the specifier closes nothing",
                    ))?;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(RuleError::UnbalancedParentheses(
            "a `(` in the specifier is never closed",
        ));
    }
    Ok(())
}

impl Rule {
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let raw = text.trim();
        if raw.is_empty() {
            return Err(RuleError::Empty);
        }
        let (tool, specifier) = match raw.find('(') {
            None if raw.contains(')') => {
                return Err(RuleError::UnbalancedParentheses("a `)` without a `(`"));
            }
            None => (raw, None),
            Some(open) => {
                let close = raw
                    .rfind(')')
                    .filter(|close| *close > open)
                    .ok_or(RuleError::UnbalancedParentheses("the `(` is never closed"))?;
                if close + 1 != raw.len() {
                    return Err(RuleError::TrailingText(raw[close + 1..].to_string()));
                }
                (raw[..open].trim_end(), Some(&raw[open + 1..close]))
            }
        };
        if !valid_tool_name(tool) {
            return Err(RuleError::BadToolName(tool.to_string()));
        }
        let lower = tool.to_ascii_lowercase();
        if known(tool).is_none() && known(&lower).is_some() {
            return Err(RuleError::WrongCase {
                given: tool.to_string(),
                suggestion: lower,
            });
        }
        let specifier = match specifier {
            None => None,
            Some(spec) => {
                check_balance(spec)?;
                let spec = spec.trim();
                if spec.is_empty() {
                    return Err(RuleError::EmptySpecifier(tool.to_string()));
                }
                Some(Specifier::read(tool, spec)?)
            }
        };
        Ok(Rule {
            raw: raw.to_string(),
            tool: tool.to_string(),
            specifier,
        })
    }

    /// The rule as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The tool name or group the rule names.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The text between the parentheses, if any.
    pub fn specifier(&self) -> Option<&str> {
        self.specifier.as_ref().map(|s| s.raw.as_str())
    }

    pub(crate) fn spec(&self) -> Option<&Specifier> {
        self.specifier.as_ref()
    }

    /// An allow rule that starts with a wrapper or an assignment could
    /// never match (allow rules see the command without them).
    fn check_allow(&self) -> Result<(), RuleError> {
        let Some(Specifier { bash: Ok(spec), .. }) = &self.specifier else {
            return Ok(());
        };
        if known(&self.tool) != Some(Known::Bash) {
            return Ok(());
        }
        match spec.leading_wrapper() {
            Some(wrapper) => Err(RuleError::AllowsWrapper { wrapper }),
            None => Ok(()),
        }
    }
}

impl Specifier {
    fn read(tool: &str, spec: &str) -> Result<Specifier, RuleError> {
        let specifier = Specifier {
            raw: spec.to_string(),
            bash: bash::parse(spec),
            file: file::parse(spec),
            web: web::parse(spec),
        };
        let pattern = || spec.to_string();
        match known(tool) {
            Some(Known::Bash) => {
                if let Err(message) = &specifier.bash {
                    return Err(RuleError::BadCommand {
                        pattern: pattern(),
                        message: message.clone(),
                    });
                }
            }
            Some(Known::FileRead | Known::FileWrite | Known::FileGroup) => {
                if let Err(message) = &specifier.file {
                    return Err(RuleError::BadGlob {
                        pattern: pattern(),
                        message: message.clone(),
                    });
                }
            }
            Some(Known::Web) => {
                if let Err(message) = &specifier.web {
                    return Err(RuleError::BadDomain {
                        pattern: pattern(),
                        message: message.clone(),
                    });
                }
            }
            None => {}
        }
        Ok(specifier)
    }
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Rule {}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::parse(s)
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Rule::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The three lists of one party (the deployment, or an owner).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuleSet {
    pub allow: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub deny: Vec<Rule>,
}

/// Rule `text`, at `index` of list `name` (an allow rule is checked for
/// what an allow rule may not be).
fn parse_in(name: &'static str, index: usize, text: &str) -> Result<Rule, RuleSetError> {
    Rule::parse(text)
        .and_then(|rule| {
            if name == "allow" {
                rule.check_allow()?;
            }
            Ok(rule)
        })
        .map_err(|error| RuleSetError {
            list: name,
            index,
            rule: text.to_string(),
            error,
        })
}

/// Every rule of the lists that does not parse, in order (allow, ask,
/// deny): an owner fixes them all at once.
pub fn rule_errors<S: AsRef<str>>(allow: &[S], ask: &[S], deny: &[S]) -> Vec<RuleSetError> {
    [("allow", allow), ("ask", ask), ("deny", deny)]
        .into_iter()
        .flat_map(|(name, texts)| {
            texts.iter().enumerate().filter_map(move |(index, text)| {
                let text = text.as_ref();
                let error = match parse_in(name, index, text) {
                    Err(e) => return Some(e),
                    Ok(_) => keyword_rule(text)?,
                };
                Some(RuleSetError {
                    list: name,
                    index,
                    rule: text.to_string(),
                    error,
                })
            })
        })
        .collect()
}

/// A `bash` rule that starts with a shell keyword (`bash(for *)`): no
/// piece of a line starts with one, so it could never match, and a deny
/// rule so written would deny nothing. Refused where rules are set (the
/// API, the configuration), not where rules set before are read again.
fn keyword_rule(text: &str) -> Option<RuleError> {
    const KEYWORDS: [&str; 17] = [
        "for", "while", "until", "if", "then", "else", "elif", "fi", "do", "done", "case", "esac",
        "select", "function", "{", "}", "!",
    ];
    let body = text.trim().strip_prefix("bash(")?.strip_suffix(')')?;
    let first = body.split_whitespace().next()?;
    KEYWORDS.contains(&first).then(|| RuleError::Keyword {
        keyword: first.to_string(),
    })
}

impl RuleSet {
    /// Parse three lists of rule texts; the first bad rule is the error.
    pub fn from_lists<S: AsRef<str>>(
        allow: &[S],
        ask: &[S],
        deny: &[S],
    ) -> Result<RuleSet, RuleSetError> {
        fn list<S: AsRef<str>>(name: &'static str, texts: &[S]) -> Result<Vec<Rule>, RuleSetError> {
            texts
                .iter()
                .enumerate()
                .map(|(index, text)| parse_in(name, index, text.as_ref()))
                .collect()
        }
        Ok(RuleSet {
            allow: list("allow", allow)?,
            ask: list("ask", ask)?,
            deny: list("deny", deny)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty()
    }
}

impl<'de> Deserialize<'de> for RuleSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(default, deny_unknown_fields)]
        #[derive(Default)]
        struct Lists {
            allow: Vec<String>,
            ask: Vec<String>,
            deny: Vec<String>,
        }
        let lists = Lists::deserialize(deserializer)?;
        RuleSet::from_lists(&lists.allow, &lists.ask, &lists.deny).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(text: &str) -> RuleError {
        Rule::parse(text).expect_err(text)
    }

    #[test]
    fn parses_tools_and_specifiers() {
        let rule = Rule::parse("  bash(git status *)  ").unwrap();
        assert_eq!(
            (rule.as_str(), rule.tool(), rule.specifier()),
            ("bash(git status *)", "bash", Some("git status *"))
        );
        let rule = Rule::parse("webfetch").unwrap();
        assert_eq!((rule.tool(), rule.specifier()), ("webfetch", None));
        assert_eq!(Rule::parse("bash( ls )").unwrap().specifier(), Some("ls"));
        assert_eq!(
            Rule::parse("bash(echo \")\")").unwrap().specifier(),
            Some("echo \")\"")
        );
        assert!(Rule::parse("bash(echo $(date) *)").is_err());
        assert!(Rule::parse("project_cli(calendar.read)").is_ok());
        assert!(Rule::parse("mcp.server-tool_1").is_ok());
        assert_eq!(
            "read(**/.env)".parse::<Rule>().unwrap().to_string(),
            "read(**/.env)"
        );
    }

    #[test]
    fn precise_errors() {
        assert_eq!(error(""), RuleError::Empty);
        assert_eq!(error("   "), RuleError::Empty);
        assert_eq!(
            error("bash(ls"),
            RuleError::UnbalancedParentheses("the `(` is never closed")
        );
        assert_eq!(
            error("bash)"),
            RuleError::UnbalancedParentheses("a `)` without a `(`")
        );
        assert_eq!(
            error("bash(ls))"),
            RuleError::UnbalancedParentheses("a `)` in the specifier closes nothing")
        );
        assert_eq!(
            error("bash((ls)"),
            RuleError::UnbalancedParentheses("a `(` in the specifier is never closed")
        );
        assert_eq!(error("bash(ls) x"), RuleError::TrailingText(" x".into()));
        assert_eq!(error("bash()"), RuleError::EmptySpecifier("bash".into()));
        assert_eq!(error("bash(  )"), RuleError::EmptySpecifier("bash".into()));
        assert_eq!(error("(ls)"), RuleError::BadToolName("".into()));
        assert_eq!(error("my tool"), RuleError::BadToolName("my tool".into()));
        assert_eq!(
            error(&"x".repeat(65)),
            RuleError::BadToolName("x".repeat(65))
        );
        assert_eq!(
            error("Bash(ls)"),
            RuleError::WrongCase {
                given: "Bash".into(),
                suggestion: "bash".into()
            }
        );
        assert!(
            matches!(error("read_file(src/[)"), RuleError::BadGlob { pattern, message } if pattern == "src/[" && message.contains("unclosed"))
        );
        assert!(matches!(error("read(../x)"), RuleError::BadGlob { .. }));
        assert!(matches!(
            error("webfetch(https://example.com/x)"),
            RuleError::BadDomain { .. }
        ));
        assert!(matches!(
            error("bash(ls && rm x)"),
            RuleError::BadCommand { .. }
        ));
        assert!(matches!(
            error("bash(echo 'x)"),
            RuleError::BadCommand { .. }
        ));
        // Unknown tools: the specifier is checked against the tool's class
        // when a call meets it.
        assert!(Rule::parse("my_tool(src/[)").is_ok());
    }

    #[test]
    fn rule_sets_from_json() {
        let set: RuleSet = serde_json::from_value(json!({
            "allow": ["bash(git status)", "read"],
            "deny": ["bash(rm *)"]
        }))
        .unwrap();
        assert_eq!(set.allow.len(), 2);
        assert!(set.ask.is_empty());
        assert_eq!(
            serde_json::to_value(&set).unwrap(),
            json!({"allow": ["bash(git status)", "read"], "ask": [], "deny": ["bash(rm *)"]})
        );
        let empty: RuleSet = serde_json::from_value(json!({})).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn rule_set_errors_name_list_index_and_problem() {
        let err = serde_json::from_value::<RuleSet>(
            json!({"allow": ["bash"], "deny": ["bash(ls)", "bash(rm"]}),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "deny[1] `bash(rm`: unbalanced parentheses: the `(` is never closed"
        );
        let err = RuleSet::from_lists(&["read_file(a/[b)"], &[], &[]).unwrap_err();
        assert_eq!((err.list, err.index), ("allow", 0));
        let err = RuleSet::from_lists(&["read", ""], &[], &[]).unwrap_err();
        assert_eq!(
            (err.list, err.index, err.error),
            ("allow", 1, RuleError::Empty)
        );
        assert!(serde_json::from_value::<RuleSet>(json!({"alow": []})).is_err());
        assert!(serde_json::from_value::<RuleSet>(json!({"allow": [3]})).is_err());
    }

    #[test]
    fn allow_rules_naming_a_wrapper_are_refused() {
        let err = RuleSet::from_lists(&["bash(timeout 5 make)"], &[], &[]).unwrap_err();
        assert_eq!(
            err.error,
            RuleError::AllowsWrapper {
                wrapper: "timeout".into()
            }
        );
        let err = RuleSet::from_lists(&["bash(sudo *)"], &[], &[]).unwrap_err();
        assert_eq!(
            err.error,
            RuleError::AllowsWrapper {
                wrapper: "sudo".into()
            }
        );
        // Deny and ask rules may name a wrapper: they see every layer.
        assert!(RuleSet::from_lists(&[], &["bash(sudo *)"], &["bash(timeout *)"]).is_ok());
    }

    #[test]
    fn rules_starting_with_a_keyword_are_refused_when_set() {
        for rule in [
            "bash(for *)",
            "bash(while *)",
            "bash(if *)",
            "bash({ *)",
            "bash(! *)",
        ] {
            let errors = rule_errors(&[], &[], &[rule]);
            assert!(
                matches!(
                    &errors[..],
                    [RuleSetError {
                        list: "deny",
                        error: RuleError::Keyword { .. },
                        ..
                    }]
                ),
                "{rule}: {errors:?}"
            );
            // Set before, they are still read.
            assert!(RuleSet::from_lists(&[rule], &[], &[]).is_ok(), "{rule}");
        }
        assert!(rule_errors(&["bash(echo for *)", "bash([[ *)"], &[], &[]).is_empty());
    }
}
