//! Permission rules: may this call run (`allow`), wait for a human
//! (`ask`), or not run at all (`deny`)? Pure and synchronous — no I/O — so
//! the pipeline can ask it for every call (step 3 of the one pipeline).
//!
//! Two parties write rules: the deployment (operator configuration) and the
//! owner of the thread. [`decide`] reads them together: every deny rule
//! (deployment's first, then owner's), then every ask rule, then every
//! allow rule; the first that matches decides. When none does, the tool's
//! nature decides ([`Defaults`]). A built-in list of dangerous shell
//! commands is never allowed automatically, whatever the allow rules or
//! defaults say.
//!
//! A rule is `tool` or `tool(specifier)`; the tool's permission class says
//! how the specifier is read:
//!
//! | class | subject | specifier |
//! |---|---|---|
//! | `bash` | `arguments.command` | `git status`, `npm run test *`, `npm run test:*`, `*` |
//! | `file` | `arguments.path` | gitignore-style glob: `**/.env`, `secrets/**`, `src/*.rs` |
//! | `webfetch` | `arguments.url` | `domain:example.com`, `example.com`, `*.example.com` |
//! | `readonly`, `generic` | — | a bare tool name only (see below) |
//!
//! Choices worth knowing:
//! - Compound shell commands are split (`&&`, `||`, `;`, `|`, `&`, newlines,
//!   subshells, `$( … )`, backticks, `<( … )`, unquoted heredoc bodies,
//!   `bash -c`/`sh -c`/`su -c`/`eval`/`env -S`/`watch` payloads, `find
//!   -exec`) and wrappers peeled (`timeout`, `nice`, `nohup`, `time`,
//!   `stdbuf`, `ionice`, `env`, `setsid`, leading assignments, `command`,
//!   `builtin`, `exec`, `xargs`, `sudo`/`doas`/`pkexec`, and git's global
//!   options: `git -C . push` is `git push`). Deny and ask rules
//!   see every wrapper layer (so `bash(sudo *)` works, and `/bin/rm` is `rm`
//!   to them); allow rules see only the command that really runs, and must
//!   cover every piece. An allow rule that starts with a wrapper is a parse
//!   error, since it could never match.
//! - A word computed at run time (`$X`, `$(…)`, globs) can be anything: a
//!   deny rule treats it as possibly matching, an allow rule only vouches for
//!   it with a `*`. A command whose name is computed, or that cannot be read
//!   reliably, counts as dangerous. `xargs` commands get unknown trailing
//!   arguments: only a rule ending in `*` allows them.
//! - Redirections: an exact rule (`bash(make)`) allows only harmless ones
//!   (`2>&1`, `>/dev/null`) unless the rule spells them out; a rule ending in
//!   `*` also allows reading and writing plain workspace paths (`> out.txt`),
//!   not `>> ~/.bashrc` or `> /etc/x`.
//! - Some commands run code no rule names: `PATH=… git status`,
//!   `LD_PRELOAD=…`, `GIT_*=…`, `git -c core.pager=…`. No specific allow rule
//!   vouches for them, and an allow default becomes `ask`; only a bare
//!   `bash` (or `bash(*)`) allow covers them.
//! - File rules see where a path really leads through symbolic links
//!   inside the workspace ([`CallFacts::resolved_path`], found by the
//!   caller) as well as its name: a deny or ask on either wins, an allow
//!   must cover both. A walk over a directory (`glob`, `grep`) leaves out
//!   what the call's deny and ask path rules name ([`PathRules`]).
//! - File rules may use the groups `read` (read-only file tools) and `write`
//!   (file tools that write). A deny or ask path rule on `read`, or on a
//!   built-in read tool (`read_file`, `glob`, `grep`), also covers writes of
//!   the same path: what may not be read may not be overwritten either. (A
//!   bare `deny: grep` stays about grep.) `decide` knows no other tool names:
//!   a runtime read tool's deny rules cover writes only through `read`.
//! - `readonly` and `generic` tools have no subject. A bare rule applies to
//!   them; a deny or ask rule with a specifier applies to every call of the
//!   tool (it fails closed, and says so in the reason); an allow rule with a
//!   specifier never matches.
//! - `generic` tools fall to [`Defaults`] by their nature like every other
//!   class (`Defaults::other` for a tool neither read-only nor destructive);
//!   set `other` to `ask` for the seed's "rules, then ask" behaviour.

mod bash;
mod command;
mod dangerous;
mod embedded;
mod file;
mod git_reach;
mod known;
mod rules;
mod shell;
mod web;

pub(crate) use git_reach::Reach;
pub use git_reach::{MAX_NAMED_PATHS, NAMED_PATHS_UNCHECKED, NamedPath, bash_named_paths};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub use rules::{Rule, RuleError, RuleSet, RuleSetError, rule_errors};

use crate::tools::PermissionClass;
use command::{Analysis, Piece};
use file::PathSubject;
use rules::{Known, known};

/// What happens to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

/// What happens to a call no rule matches, by the tool's nature. A
/// destructive tool takes `destructive` even if it also claims to be
/// read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Defaults {
    pub destructive: Verdict,
    pub read_only: Verdict,
    pub other: Verdict,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            destructive: Verdict::Ask,
            read_only: Verdict::Allow,
            other: Verdict::Allow,
        }
    }
}

/// The outcome, with what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Decision {
    pub verdict: Verdict,
    /// The deciding rule as `list: rule` (`deny: bash(rm *)`); several,
    /// comma-separated, when the pieces of a compound command were allowed
    /// by different rules; `None` for defaults and the dangerous list.
    pub rule: Option<String>,
    /// `deployment`, `owner`, `default` or `dangerous`.
    pub source: String,
    /// One or two sentences a model (or a person approving) can act on.
    pub reason: String,
}

/// What `decide` needs to know about a call.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The canonical name (aliases resolved).
    pub tool_name: &'a str,
    /// The tool's other names: a rule naming one names the tool (`deny:
    /// sleep` covers `wait`, under whichever name it is called).
    pub aliases: &'a [String],
    pub class: PermissionClass,
    pub read_only: bool,
    pub destructive: bool,
    pub arguments: &'a Value,
    /// The absolute path of the call's workspace, as the file tools see
    /// it: an absolute `path` inside it is matched as the relative path it
    /// names, so `secret/**` covers `/…/workspace/secret/x` too.
    pub workspace: Option<&'a std::path::Path>,
    /// Where a file tool's `path` really leads inside the workspace
    /// through symbolic links (in any component), workspace-relative, when
    /// that is not the path as named: rules are matched against both. For
    /// a path that does not exist yet, its existing parent resolved and
    /// the rest as named. Found by the caller (`decide` does no I/O).
    pub resolved_path: Option<&'a str>,
    /// For a call in a sub-workspace: where that is in the owner's
    /// workspace, which the rules are relative to. `path` and
    /// `resolved_path` are relative to the sub-workspace.
    pub sub_workspace: Option<SubWorkspace<'a>>,
    /// For a `bash` call: the paths its line names ([`bash_named_paths`])
    /// that lead into git's configuration through symbolic links, found by
    /// the caller; a rule ending in `*` vouches for no write to them.
    /// [`NAMED_PATHS_UNCHECKED`] alone when the line named too many to
    /// look up. For a file tool that writes: its path, when it is in a
    /// repository's configuration that git finds by another name than
    /// `.git` (a `.git` file's `gitdir`, a bare repository), so writing it
    /// asks with no rule for it.
    pub git_links: &'a [String],
}

/// A sub-workspace as the rules see it: the directory it is in the
/// owner's workspace, by the name the call gave it and by where it really
/// is (a sub-workspace may be a link to another directory of the owner's).
/// A deny or ask rule judges a call in sub-workspace `work` on `src/x` as
/// `src/x` and as `work/src/x`.
#[derive(Debug, Clone, Copy)]
pub struct SubWorkspace<'a> {
    pub named: &'a str,
    /// Owner-workspace-relative; the same as `named` without a link.
    pub real: &'a str,
}

pub const SOURCE_DEPLOYMENT: &str = "deployment";
pub const SOURCE_OWNER: &str = "owner";
pub const SOURCE_DEFAULT: &str = "default";
pub const SOURCE_DANGEROUS: &str = "dangerous";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Allow,
    Ask,
    Deny,
}

impl List {
    fn name(self) -> &'static str {
        match self {
            List::Allow => "allow",
            List::Ask => "ask",
            List::Deny => "deny",
        }
    }
}

/// What the rules look at, read once per call.
enum Subject {
    /// `None`: no `command` string.
    Bash(Option<Analysis>),
    /// `None`: a `path` that is not a string. A missing path is the
    /// workspace itself (`glob`, `grep` default to it).
    File(Option<PathSubject>),
    /// The URL's host; `None` when missing or not readable unambiguously.
    Web(Option<String>),
    Plain,
}

impl Subject {
    fn of(call: &CallFacts) -> Subject {
        let arg = |key: &str| call.arguments.get(key);
        match call.class {
            PermissionClass::Bash => {
                Subject::Bash(arg("command").and_then(Value::as_str).map(command::analyse))
            }
            PermissionClass::File => Subject::File(match arg("path") {
                None | Some(Value::Null) => Some(judged_path(".", call.resolved_path, call)),
                Some(Value::String(path)) => Some(judged_path(
                    &within(path, call.workspace),
                    call.resolved_path,
                    call,
                )),
                Some(_) => None,
            }),
            PermissionClass::Webfetch => {
                Subject::Web(arg("url").and_then(Value::as_str).and_then(web::host_of))
            }
            PermissionClass::Readonly | PermissionClass::Generic => Subject::Plain,
        }
    }
}

/// A path relative to the call's workspace (leading to `resolved` there
/// through links, when given) as the rules judge it. In a sub-workspace,
/// deny and ask rules also see it as the path it is in the owner's
/// workspace, by the sub-workspace's name and by where it really is: a
/// sub-workspace cannot hide a path from a rule that names it. Allow rules
/// keep to the sub-workspace's own view.
fn judged_path(path: &str, resolved: Option<&str>, call: &CallFacts) -> file::PathSubject {
    let subject = file::subject(path).leading_to(resolved);
    match call.sub_workspace {
        Some(sub) if !path.starts_with('/') => {
            subject.also_within(sub.named, sub.real, resolved.unwrap_or(path))
        }
        _ => subject,
    }
}

/// An absolute `path` inside `workspace` as the relative path it names
/// (`.` for the workspace itself); any other path as written.
fn within<'p>(path: &'p str, workspace: Option<&std::path::Path>) -> std::borrow::Cow<'p, str> {
    let inside = workspace
        .and_then(|ws| std::path::Path::new(path).strip_prefix(ws).ok())
        .filter(|_| path.starts_with('/'));
    match inside.map(|rel| rel.to_str()) {
        Some(Some("")) => ".".into(),
        Some(Some(rel)) => rel.to_string().into(),
        _ => path.into(),
    }
}

/// Why a deny or ask rule matched, for the reason sentence.
struct Hit {
    /// The piece of a compound command the rule names.
    piece: Option<String>,
    note: Option<String>,
}

/// Decide one call. See the module documentation for the rule language.
pub fn decide(
    deployment: &RuleSet,
    owner: &RuleSet,
    defaults: &Defaults,
    call: &CallFacts,
) -> Decision {
    let subject = Subject::of(call);
    let parties = [(SOURCE_DEPLOYMENT, deployment), (SOURCE_OWNER, owner)];

    for (list, verdict) in [(List::Deny, Verdict::Deny), (List::Ask, Verdict::Ask)] {
        for (source, set) in parties {
            let rules = if list == List::Deny {
                &set.deny
            } else {
                &set.ask
            };
            for rule in rules {
                if let Some(hit) = may_match(rule, call, &subject, list) {
                    return Decision {
                        verdict,
                        rule: Some(format!("{}: {}", list.name(), rule.as_str())),
                        source: source.to_string(),
                        reason: rule_reason(list, source, rule, call, &hit),
                    };
                }
            }
        }
    }

    let allow: Vec<(&'static str, &Rule)> = parties
        .iter()
        .flat_map(|(source, set)| set.allow.iter().map(move |rule| (*source, rule)))
        .filter(|(_, rule)| names_call(rule, call, List::Allow).is_some())
        .collect();
    let allowed = match &subject {
        Subject::Bash(analysis) => bash_allow(&allow, analysis.as_ref(), call),
        _ => allow
            .iter()
            .find(|(_, rule)| surely_matches(rule, &subject))
            .map(|found| vec![*found])
            .ok_or_else(Uncovered::default),
    };

    let decision = match allowed {
        Ok(rules) => {
            let source = if rules.iter().any(|(s, _)| *s == SOURCE_OWNER) {
                SOURCE_OWNER
            } else {
                SOURCE_DEPLOYMENT
            };
            let names: Vec<String> = rules
                .iter()
                .map(|(_, r)| format!("allow: {}", r.as_str()))
                .collect();
            let party = if rules.iter().all(|(s, _)| *s == SOURCE_OWNER) {
                "the owner's"
            } else if rules.iter().all(|(s, _)| *s == SOURCE_DEPLOYMENT) {
                "the deployment's"
            } else {
                "the deployment's and the owner's"
            };
            let plural = if names.len() > 1 { "rules" } else { "rule" };
            let listed = names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" and ");
            Decision {
                verdict: Verdict::Allow,
                rule: Some(names.join(", ")),
                source: source.to_string(),
                reason: format!(
                    "{} is allowed by {party} {plural} {listed}.",
                    capitalise(&describe(call))
                ),
            }
        }
        Err(uncovered) => default_decision(defaults, call, &subject, uncovered),
    };
    if decision.verdict != Verdict::Allow {
        return decision;
    }
    safety_net(decision, call, &subject)
}

/// The deny and ask path rules a walk over a directory (`glob`, `grep`)
/// applies to the files and directories it meets: what one of them names
/// is left out. Made for one call: only rules that name the call's tool
/// (directly, by group, or as another reading tool's path rule) and that
/// did not match the call's own path count
/// (one that did has already denied the call, or a person approved it).
/// An `ask` counts like a deny: nobody approved reading that file.
#[derive(Debug, Clone, Default)]
pub struct PathRules {
    specs: Vec<file::FileSpec>,
    /// For a walk in a sub-workspace: its name and real location in the
    /// owner's workspace (see [`SubWorkspace`]).
    sub_workspace: Option<(String, String)>,
}

impl PathRules {
    pub fn new(deployment: &RuleSet, owner: &RuleSet, call: &CallFacts) -> PathRules {
        let mut specs = Vec::new();
        let sub_workspace = call
            .sub_workspace
            .map(|sub| (sub.named.to_string(), sub.real.to_string()));
        if call.class != PermissionClass::File {
            return PathRules {
                specs,
                sub_workspace,
            };
        }
        let subject = Subject::of(call);
        for (list, set) in [
            (List::Deny, deployment),
            (List::Deny, owner),
            (List::Ask, deployment),
            (List::Ask, owner),
        ] {
            let rules = if list == List::Deny {
                &set.deny
            } else {
                &set.ask
            };
            for rule in rules {
                let Some(Ok(spec)) = rule.spec().map(|s| s.file.as_ref()) else {
                    continue;
                };
                if names_call(rule, call, list).is_some()
                    && may_match(rule, call, &subject, list).is_none()
                {
                    specs.push(spec.clone());
                }
            }
        }
        PathRules {
            specs,
            sub_workspace,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Is the workspace-relative `path` (which the walk may also know as
    /// `resolved`, when it started below a link) named by one of the rules?
    /// In a sub-workspace, both are relative to it.
    pub fn leave_out(&self, path: &str, resolved: Option<&str>) -> bool {
        if self.specs.is_empty() {
            return false;
        }
        let mut subject = file::subject(path).leading_to(resolved);
        if let Some((named, real)) = &self.sub_workspace {
            subject = subject.also_within(named, real, resolved.unwrap_or(path));
        }
        self.specs.iter().any(|spec| spec.may_match(&subject))
    }
}

/// Does `rule` name this call's tool (directly, by group, as a read rule
/// that also covers writes, or as one reading tool's rule that covers the
/// others)?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Name,
    /// The rule names one of the tool's aliases.
    Alias,
    Group,
    ReadCoversWrite,
    /// A deny or ask path rule on one reading tool (`read_file(.env)`)
    /// covers every reading tool: else `grep` would print what
    /// `read_file` may not, and `glob` list it.
    ReadCoversRead,
}

fn names_call(rule: &Rule, call: &CallFacts, list: List) -> Option<Via> {
    if rule.tool() == call.tool_name {
        return Some(Via::Name);
    }
    if call.aliases.iter().any(|a| a == rule.tool()) {
        return Some(Via::Alias);
    }
    if call.class != PermissionClass::File {
        return None;
    }
    match rule.tool() {
        "read" if call.read_only => Some(Via::Group),
        "write" if !call.read_only => Some(Via::Group),
        // Only path rules: a bare `deny: grep` is about grep, not about
        // every path in the workspace.
        tool if list != List::Allow
            && !call.read_only
            && rule.specifier().is_some()
            && (tool == "read" || known(tool) == Some(Known::FileRead)) =>
        {
            Some(Via::ReadCoversWrite)
        }
        tool if list != List::Allow
            && call.read_only
            && rule.specifier().is_some()
            && known(tool) == Some(Known::FileRead) =>
        {
            Some(Via::ReadCoversRead)
        }
        _ => None,
    }
}

/// Deny and ask rules: could this call be one the rule names?
fn may_match(rule: &Rule, call: &CallFacts, subject: &Subject, list: List) -> Option<Hit> {
    let via = names_call(rule, call, list)?;
    let via_note = match via {
        Via::ReadCoversWrite => Some(format!(
            "a {} rule on reading `{}` also covers writing it",
            list.name(),
            rule.specifier().unwrap_or_default()
        )),
        Via::ReadCoversRead => Some(format!(
            "a {} rule on reading `{}` with {} covers every tool that reads files",
            list.name(),
            rule.specifier().unwrap_or_default(),
            rule.tool()
        )),
        Via::Alias => Some(format!(
            "`{}` is another name of `{}`",
            rule.tool(),
            call.tool_name
        )),
        Via::Name | Via::Group => None,
    };
    let hit = |piece: Option<String>| Hit {
        piece,
        note: via_note.clone(),
    };
    let Some(spec) = rule.spec() else {
        return Some(hit(None));
    };
    // A specifier that cannot be read for this class covers every call: a
    // deny rule must not silently match nothing.
    let unreadable = |message: &str| Hit {
        piece: None,
        note: Some(format!(
            "its specifier `{}` cannot be read for a {} tool ({message}), so it covers every call",
            spec.raw,
            class_name(call.class)
        )),
    };
    match subject {
        Subject::Bash(None) | Subject::File(None) => None,
        Subject::Bash(Some(analysis)) => match &spec.bash {
            Err(message) => Some(unreadable(message)),
            Ok(bash::BashSpec::All) => Some(hit(None)),
            Ok(pattern) => analysis
                .pieces
                .iter()
                .find(|piece| pattern.may_match(piece))
                .map(|piece| {
                    let mut found = hit(Some(piece.text.clone()));
                    if !pattern.names_as_written(piece) {
                        // `ls${IFS}-la` is no `rm`, but may become one.
                        let unknown = "part of it is only known when it runs, a word computed \
                                       then or arguments read from input, so it may be a \
                                       command this rule names: write every word out";
                        found.note = Some(match found.note {
                            Some(note) => format!("{note}; {unknown}"),
                            None => unknown.to_string(),
                        });
                    }
                    found
                }),
        },
        Subject::File(Some(path)) => match &spec.file {
            Err(message) => Some(unreadable(message)),
            Ok(pattern) => pattern.may_match(path).then(|| {
                let mut found = hit(None);
                if let Some(target) = path.resolved.as_deref().filter(|_| !pattern.names(path)) {
                    let link = format!(
                        "the path leads to `{}` through a symbolic link",
                        clip(target)
                    );
                    found.note = Some(match found.note {
                        Some(note) => format!("{note}; {link}"),
                        None => link,
                    });
                }
                found
            }),
        },
        Subject::Web(host) => match &spec.web {
            Err(message) => Some(unreadable(message)),
            Ok(domain) => host
                .as_deref()
                .filter(|h| domain.matches(h))
                .map(|_| hit(None)),
        },
        Subject::Plain => Some(unreadable("it has no argument rules can look at")),
    }
}

/// Allow rules outside bash: does the rule certainly cover this call?
fn surely_matches(rule: &Rule, subject: &Subject) -> bool {
    let Some(spec) = rule.spec() else {
        return true;
    };
    match subject {
        Subject::File(Some(path)) => spec.file.as_ref().is_ok_and(|p| p.surely_matches(path)),
        Subject::Web(Some(host)) => spec.web.as_ref().is_ok_and(|d| d.matches(host)),
        _ => false,
    }
}

/// A command line no allow rule covers in full: the pieces none covers,
/// in the command's order (none when the call has no pieces to name).
#[derive(Default)]
struct Uncovered {
    pieces: Vec<UncoveredPiece>,
}

struct UncoveredPiece {
    text: String,
    /// An allow rule that would cover it but for a write that may be git's
    /// configuration.
    but_for_git: Option<String>,
    /// An allow rule that would cover it but for the option through which
    /// it deletes files (the rule, the option).
    but_for_deletion: Option<(String, String)>,
    /// An allow rule that would cover it but for what makes it opaque
    /// (the rule, why no rule vouches for it).
    but_for_doubt: Option<(String, String)>,
}

/// At most this many uncovered pieces are quoted in a reason; the rest
/// are counted.
const UNCOVERED_QUOTED: usize = 4;

/// Allow rules for a command line: every piece that runs must be covered
/// (the first rule covering it counts). `Err` names every piece none
/// covers, so a person approving, or an owner writing the rules that
/// would let the command run, learns all of them at once.
fn bash_allow<'r>(
    allow: &[(&'static str, &'r Rule)],
    analysis: Option<&Analysis>,
    call: &CallFacts,
) -> Result<Vec<(&'static str, &'r Rule)>, Uncovered> {
    let covers_all = |rule: &Rule| {
        rule.spec()
            .is_none_or(|spec| matches!(spec.bash, Ok(bash::BashSpec::All)))
    };
    let mut needed: Vec<&Piece> = analysis
        .map(|a| {
            a.pieces
                .iter()
                .filter(|p| !p.transparent && !p.shadow)
                .collect()
        })
        .unwrap_or_default();
    // An inert builtin needs no rule beside other commands; a line of
    // them alone (`true`) is judged as they are.
    if needed.iter().any(|p| !p.inert) {
        needed.retain(|p| !p.inert);
    }
    let reach = Reach::of_line(analysis, call);
    if needed.is_empty() {
        return allow
            .iter()
            .find(|(_, rule)| covers_all(rule))
            .map(|found| vec![*found])
            .ok_or_else(Uncovered::default);
    }
    let covering = |reach: &Reach, piece: &Piece| {
        allow.iter().find(|(_, rule)| match rule.spec() {
            None => true,
            Some(spec) => spec
                .bash
                .as_ref()
                .is_ok_and(|pattern| pattern.surely_matches(piece, reach)),
        })
    };
    let mut used: Vec<(&'static str, &Rule)> = Vec::new();
    let mut uncovered = Uncovered::default();
    for piece in needed {
        let Some(found) = covering(&reach, piece) else {
            if !uncovered.pieces.iter().any(|p| p.text == piece.text) {
                uncovered.pieces.push(UncoveredPiece {
                    text: piece.text.clone(),
                    but_for_git: covering(&reach.blind(), piece)
                        .map(|(_, rule)| rule.as_str().to_string()),
                    but_for_deletion: allow.iter().find_map(|(_, rule)| {
                        let spec = rule.spec()?;
                        let option = spec.bash.as_ref().ok()?.deletes_unspelt(piece, &reach)?;
                        Some((rule.as_str().to_string(), option))
                    }),
                    but_for_doubt: allow.iter().find_map(|(_, rule)| {
                        let spec = rule.spec()?;
                        let why = spec.bash.as_ref().ok()?.doubted(piece, &reach)?;
                        Some((rule.as_str().to_string(), why))
                    }),
                });
            }
            continue;
        };
        if !used.iter().any(|(_, r)| std::ptr::eq(*r, found.1)) {
            used.push(*found);
        }
    }
    if uncovered.pieces.is_empty() {
        Ok(used)
    } else {
        Err(uncovered)
    }
}

fn default_decision(
    defaults: &Defaults,
    call: &CallFacts,
    subject: &Subject,
    uncovered: Uncovered,
) -> Decision {
    let (verdict, nature) = if call.destructive {
        (defaults.destructive, "destructive")
    } else if call.read_only || call.class == PermissionClass::Readonly {
        (defaults.read_only, "read-only")
    } else if call.class == PermissionClass::Generic {
        // A generic tool says nothing about what it touches: rules, then
        // ask (or the stricter `other` default, when that is deny).
        let verdict = if defaults.other == Verdict::Deny {
            Verdict::Deny
        } else {
            Verdict::Ask
        };
        (verdict, "a generic tool, neither read-only nor destructive")
    } else {
        (defaults.other, "neither read-only nor destructive")
    };
    let several = matches!(subject, Subject::Bash(Some(analysis)) if analysis.pieces.len() > 1);
    let git_note = |rule: &str, piece: &str| {
        format!(
            "`allow: {rule}` would cover `{}`, but a rule ending in `*` vouches for no write \
             that may reach git's configuration (a `.git` directory, `.gitconfig`, \
             `.config/git`, a running command's `HOME` in `.toolgate-tmp`, by name or through \
             a link: git runs what they say)",
            clip(piece)
        )
    };
    let deletion_note = |(rule, option): &(String, String), piece: &str| {
        format!(
            "`allow: {rule}` would cover `{}`, but a rule ending in `*` vouches for no \
             deletion it does not spell out (`{option}` deletes files, as `rm` does)",
            clip(piece)
        )
    };
    let doubt_note = |(rule, why): &(String, String), piece: &str| {
        format!("`allow: {rule}` would cover `{}`, but {why}", clip(piece))
    };
    let unmatched = match uncovered.pieces.as_slice() {
        [
            UncoveredPiece {
                text,
                but_for_git: Some(rule),
                ..
            },
        ] => git_note(rule, text),
        [
            UncoveredPiece {
                text,
                but_for_deletion: Some(found),
                ..
            },
        ] => deletion_note(found, text),
        [
            UncoveredPiece {
                text,
                but_for_doubt: Some(found),
                ..
            },
        ] => doubt_note(found, text),
        [] => format!("No rule matches {}", describe(call)),
        [_] if !several => format!("No rule matches {}", describe(call)),
        pieces => {
            let quoted: Vec<String> = pieces
                .iter()
                .take(UNCOVERED_QUOTED)
                .map(|p| format!("`{}`", clip(&p.text)))
                .collect();
            let more = pieces.len().saturating_sub(UNCOVERED_QUOTED);
            let listed = match (quoted.as_slice(), more) {
                ([one], 0) => format!("{one}, part of this command"),
                (_, 0) => format!(
                    "{} or {}, parts of this command",
                    quoted[..quoted.len() - 1].join(", "),
                    quoted[quoted.len() - 1]
                ),
                (_, more) => format!(
                    "{} or {more} more part{} of this command",
                    quoted.join(", "),
                    if more == 1 { "" } else { "s" }
                ),
            };
            let mut text = format!("No allow rule covers {listed}");
            for piece in pieces.iter().take(UNCOVERED_QUOTED) {
                if let Some(rule) = &piece.but_for_git {
                    text.push_str("; ");
                    text.push_str(&git_note(rule, &piece.text));
                } else if let Some(found) = &piece.but_for_deletion {
                    text.push_str("; ");
                    text.push_str(&deletion_note(found, &piece.text));
                } else if let Some(found) = &piece.but_for_doubt {
                    text.push_str("; ");
                    text.push_str(&doubt_note(found, &piece.text));
                }
            }
            text
        }
    };
    let outcome = match verdict {
        Verdict::Allow => "it is allowed",
        Verdict::Ask => "it needs approval",
        Verdict::Deny => "it is refused",
    };
    Decision {
        verdict,
        rule: None,
        source: SOURCE_DEFAULT.to_string(),
        reason: format!(
            "{unmatched}; `{}` is {nature}, so by default {outcome}.",
            call.tool_name
        ),
    }
}

/// The reading of `path` that is git's configuration or hooks: beneath a
/// `.git` directory, or a global configuration file (`.gitconfig`,
/// `.config/git/`: in a command's `HOME` they are git's own).
fn git_configuration(path: &file::PathSubject) -> Option<&str> {
    path.clean
        .iter()
        .chain(&path.readings)
        .chain(&path.resolved)
        .map(String::as_str)
        .find(|p| is_git_configuration(p))
}

/// Whether the workspace path `path`, which a `bash` line writes, may be
/// git's configuration or hooks, or be in a running command's private
/// `TMPDIR` and `HOME` (whose `.gitconfig`, `.lesskey` … that command's
/// programs read as their own).
pub fn is_guarded_write(path: &str) -> bool {
    is_git_configuration(path) || path.split('/').any(|p| p == crate::sandbox::TMP_DIR_NAME)
}

/// Whether the workspace path `path` is git's configuration or hooks.
pub fn is_git_configuration(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.iter().any(|p| git_reach::RUN_BY_GIT.contains(p))
        || parts.last() == Some(&".gitconfig")
        || parts.windows(2).any(|w| w == [".config", "git"])
}

/// An allowed call that is dangerous, or that no rule could really vouch
/// for, needs approval after all.
fn safety_net(decision: Decision, call: &CallFacts, subject: &Subject) -> Decision {
    let by = match &decision.rule {
        Some(rule) => format!("by `{rule}`"),
        None => "by default".to_string(),
    };
    if let Subject::Bash(Some(analysis)) = subject {
        let mut hazards = dangerous::hazards(analysis);
        if let Some(problem) = analysis.malformed.first() {
            hazards.insert(
                0,
                dangerous::Hazard {
                    piece: String::new(),
                    reason: format!("it cannot be read reliably ({problem})"),
                },
            );
        }
        if let Some(hazard) = hazards.first() {
            let what = if hazard.piece.is_empty() || hazard.piece == command_text(call) {
                "This command".to_string()
            } else {
                format!("`{}`", clip(&hazard.piece))
            };
            return Decision {
                verdict: Verdict::Ask,
                rule: None,
                source: SOURCE_DANGEROUS.to_string(),
                reason: format!(
                    "{what} is on the built-in list of dangerous commands: {}. It would be allowed {by}, but dangerous commands are never allowed automatically, so it needs approval.",
                    hazard.reason
                ),
            };
        }
    }
    if decision.source != SOURCE_DEFAULT {
        return decision;
    }
    let doubt = match subject {
        Subject::Bash(Some(analysis)) => analysis.pieces.iter().find_map(|p| p.opaque.clone()),
        Subject::File(Some(path)) if !call.read_only => git_configuration(path)
            .or(call.git_links.first().map(String::as_str))
            .map(|p| {
            format!(
                "it writes `{}`, which git reads (or gpg or ssh, run by git): hooks and settings there (core.fsmonitor, diff and filter drivers, gpg's and ssh's programs) make git commands run any program",
                clip(p)
            )
        }),
        Subject::Web(None) => {
            Some("its URL has no host that can be read unambiguously".to_string())
        }
        _ => None,
    };
    match doubt {
        Some(doubt) => Decision {
            verdict: Verdict::Ask,
            rule: None,
            source: SOURCE_DEFAULT.to_string(),
            reason: format!(
                "No rule matches {}; it would be allowed by default, but {doubt}, so it needs approval.",
                describe(call)
            ),
        },
        None => decision,
    }
}

fn rule_reason(list: List, source: &str, rule: &Rule, call: &CallFacts, hit: &Hit) -> String {
    let party = if source == SOURCE_OWNER {
        "The owner's"
    } else {
        "The deployment's"
    };
    let what = match &hit.piece {
        Some(piece) if piece != command_text(call).trim() => {
            format!("`{}` (part of this command)", clip(piece))
        }
        _ => describe(call),
    };
    let action = match list {
        List::Deny => "forbids",
        List::Ask => "requires approval for",
        List::Allow => "allows",
    };
    let note = hit
        .note
        .as_ref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let advice = match list {
        // What to do instead is the refusal's hint, said once.
        List::Deny => "",
        List::Ask => " It waits for a person to approve it.",
        List::Allow => "",
    };
    format!(
        "{party} rule `{}: {}` {action} {what}{note}.{advice}",
        list.name(),
        rule.as_str()
    )
}

fn command_text<'a>(call: &CallFacts<'a>) -> &'a str {
    call.arguments
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
}

/// The call in a few words: `git status`, `read_file on secrets/a`.
fn describe(call: &CallFacts) -> String {
    let arg = |key: &str| call.arguments.get(key).and_then(Value::as_str);
    match call.class {
        PermissionClass::Bash => match arg("command") {
            Some(command) => format!("`{}`", clip(command.trim())),
            None => format!("`{}` without a command", call.tool_name),
        },
        PermissionClass::File => format!(
            "`{}` on `{}`",
            call.tool_name,
            clip(arg("path").unwrap_or("."))
        ),
        PermissionClass::Webfetch => {
            format!(
                "`{}` of `{}`",
                call.tool_name,
                clip(arg("url").unwrap_or("(no url)"))
            )
        }
        PermissionClass::Readonly | PermissionClass::Generic => format!("`{}`", call.tool_name),
    }
}

fn class_name(class: PermissionClass) -> &'static str {
    match class {
        PermissionClass::Bash => "bash",
        PermissionClass::File => "file",
        PermissionClass::Webfetch => "webfetch",
        PermissionClass::Readonly => "readonly",
        PermissionClass::Generic => "generic",
    }
}

/// At most 160 characters of a command or path, on one line.
/// A call's text (a command, a path) as a reason quotes it between
/// backticks: on one line, at most 160 characters, and unable to end the
/// quote or to look like other text (the reason is shown to the person
/// deciding an approval): a backtick or backslash in it is escaped (`\``,
/// `\\`), and a control character, a line or paragraph separator, or one
/// that reorders or hides text (bidi controls, zero-width and other
/// invisible characters, tags) is written as its code (`\u{202e}`). A cut
/// never falls inside an escape.
fn clip(text: &str) -> String {
    let pieces: Vec<String> = text
        .chars()
        .map(|c| match c {
            '\n' => " ".to_string(),
            '`' => "\\`".to_string(),
            '\\' => "\\\\".to_string(),
            c if c.is_control() || hides_or_reorders(c) => format!("\\u{{{:x}}}", c as u32),
            c => c.to_string(),
        })
        .collect();
    let length = |piece: &String| piece.chars().count();
    if pieces.iter().map(length).sum::<usize>() <= 160 {
        return pieces.concat();
    }
    let mut shown = String::new();
    let mut count = 0;
    for piece in &pieces {
        if count + length(piece) > 157 {
            break;
        }
        count += length(piece);
        shown.push_str(piece);
    }
    shown.push('…');
    shown
}

/// A call's text quoted for a reason, between backticks ([`clip`]).
pub(crate) fn quote(text: &str) -> String {
    format!("`{}`", clip(text))
}

/// Characters that change how the text around them is shown, not what it
/// says: bidirectional controls, zero-width and other invisible
/// characters, line and paragraph separators, the soft hyphen, the
/// byte-order mark, and tags.
fn hides_or_reorders(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
