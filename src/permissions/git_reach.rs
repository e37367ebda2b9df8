//! Whether a command line may write git's configuration: a `.git`
//! directory (its `config`, hooks …), `.gitconfig` or `.config/git/`
//! (git's global configuration in a command's `HOME`; judged by name
//! wherever they are written), and what the gpg and ssh git runs
//! read (`.gnupg`, `.ssh`). git runs what those files say at
//! commands an owner may well allow (`git status`), so an allow rule
//! ending in `*` vouches for no write that may land there (docs/safety.md,
//! "git's configuration asks").
//!
//! The line is read, not run, so every judgement here leans towards "may":
//! - the directories the line may be in are taken all at once, in any
//!   order (a loop may run a write after a `cd` written after it): the
//!   call's `cwd`, its sub-workspace, and every directory a `cd`, `pushd`,
//!   `env -C` or git's `-C` names (64 at most); a write may reach git's
//!   configuration when the components of any of them and of the path
//!   written, together, name it;
//! - an unquoted word stands for every brace expansion of it and every name
//!   of git's configuration a glob in it may match;
//! - a word computed at run time may be anything in a line that mentions
//!   git's configuration anywhere;
//! - paths under `/proc`, and descriptors' paths in such a line, may be
//!   anything;
//! - links, hard links, `.git` files and copied trees on disk are looked
//!   up by the caller ([`bash_named_paths`]).

use std::path::Path;

use serde_json::Value;

use super::CallFacts;
use super::command::{self, Analysis, Piece};
use super::shell::Word;

/// Commands that write no file their arguments name (output goes to
/// redirections, which are judged on their own), so an argument naming
/// git's configuration is only read, or removed, which adds no program:
/// `grep -r x --exclude-dir=.git`, `ls .git`, `rm -f .git/index.lock`.
/// Not `sort` (`-o`), `tree` (`-o`), `find` (`-fprint`), `file` (`-C`),
/// nor `git` itself.
/// `cd`, `pushd` and `popd` write nothing: where they lead is a place of
/// the line ([`line_places`]), against which its writes are judged.
const READERS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ls",
    "wc",
    "du",
    "stat",
    "diff",
    "cmp",
    "jq",
    "echo",
    "printf",
    "realpath",
    "readlink",
    "basename",
    "dirname",
    "rm",
    "rmdir",
    "unlink",
    "cd",
    "pushd",
    "popd",
    "test",
    "[",
    "[[",
    "true",
    "false",
    ":",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "unset",
    "read",
    "mapfile",
    "readarray",
    "shift",
    "return",
    "exit",
    "wait",
    "sleep",
    "pwd",
    "let",
];

/// Whether `word`, the `i`th of git's `words`, may name a place git
/// writes: a global option's value (`-C`, `--work-tree`, `--git-dir`:
/// where every path of the command lands) or the subcommand itself; any
/// argument of a subcommand not known to take only revisions, pathspecs,
/// messages and names of its own (`bundle create FILE`, `worktree add
/// PATH`, `merge-file FILE`, `mailinfo MSG PATCH`, `config --file F` …);
/// and the value of `-o` or of an option naming a file or directory to
/// write (`--output…`, abbreviated too: `--out=…`; `--prefix`,
/// `--template`, `--separate-git-dir`, `--export-marks`), glued or the
/// next word.
fn git_writes_to(words: &[Word], i: usize, word: &Word) -> bool {
    /// Subcommands that write no file of the work tree and whose
    /// arguments are revisions, pathspecs (which never reach into `.git`),
    /// messages, and branch or tag names: a computed one writes nowhere of
    /// its own choosing, but through the options below. (`checkout`,
    /// `restore`, `reset`, `stash`, `merge` … write the files their
    /// pathspecs name, `.gitconfig` too where the repository tracks one.)
    const NAMES_NO_PLACE: &[&str] = &[
        "log",
        "show",
        "diff",
        "status",
        "add",
        "rm",
        "commit",
        "branch",
        "tag",
        "blame",
        "annotate",
        "grep",
        "shortlog",
        "rev-parse",
        "rev-list",
        "ls-files",
        "ls-tree",
        "cat-file",
        "describe",
        "merge-base",
        "reflog",
        "show-ref",
        "for-each-ref",
        "name-rev",
        "whatchanged",
        "difftool",
        "range-diff",
        "cherry",
        "diff-tree",
        "diff-files",
        "diff-index",
        "show-branch",
        "check-ignore",
        "check-attr",
        "clean",
    ];
    const WRITE_OPTIONS: &[&str] = &[
        "--repo",
        "--prefix",
        "--template",
        "--separate-git-dir",
        "--export-marks",
        "--import-marks",
        "--work-tree",
        "--git-dir",
    ];
    let sub = super::embedded::git_subcommand_at(words);
    let subcommand = words.get(sub).map(|w| w.text.as_str());
    if i <= sub {
        return true;
    }
    // `push`, `fetch` and `pull` name a repository first (a path, whose
    // hooks a push runs), then refspecs: a computed word matters until a
    // literal one has named the repository.
    if let Some("push" | "fetch" | "pull") = subcommand {
        // Flags of theirs that take no value: the word after one is an
        // operand. After any other option, it may be the option's value
        // (`--recurse-submodules no`).
        const FLAGS: &[&str] = &[
            "-u",
            "--set-upstream",
            "-f",
            "--force",
            "-n",
            "--dry-run",
            "-v",
            "--verbose",
            "-q",
            "--quiet",
            "--tags",
            "--all",
            "-p",
            "--prune",
            "--no-verify",
            "--follow-tags",
            "--atomic",
            "--rebase",
            "--no-rebase",
            "--ff-only",
        ];
        let named = (sub + 1..i).any(|j| {
            let w = &words[j];
            let before = &words[j - 1];
            w.literal
                && !w.text.starts_with('-')
                && (j == sub + 1
                    || !before.text.starts_with('-')
                    || before.text.contains('=')
                    || FLAGS.contains(&before.text.as_str()))
        });
        if !named {
            return true;
        }
    } else if subcommand.is_none_or(|s| !NAMES_NO_PLACE.contains(&s)) {
        return true;
    }
    let writes = |option: &str| {
        option == "-o"
            || WRITE_OPTIONS.contains(&option)
            || option.strip_prefix("--").is_some_and(|name| {
                !name.is_empty() && ("output".starts_with(name) || name.starts_with("output"))
            })
    };
    let glued = match word.text.split_once('=') {
        Some((option, _)) => writes(option),
        None => word.text.starts_with("-o") && !word.text.starts_with("--"),
    };
    glued || (i > 0 && words[i - 1].literal && writes(&words[i - 1].text))
}

/// A word whose only expansion is a leading `$PWD` or `$HOME` (the
/// call's directory and the command's home, absolute paths; a line
/// setting either asks): the rest, as a path from the line's places (the
/// home's names judged as the workspace root's, which leans to "may").
fn anchored(word: &Word) -> Option<&str> {
    super::known::ABSOLUTE.iter().find_map(|v| {
        let rest = word.text.strip_prefix(v)?;
        let rest = if rest.is_empty() {
            "."
        } else {
            rest.strip_prefix('/')?
        };
        (!rest.contains(['$', '`'])).then_some(rest)
    })
}

/// Wrappers that write no file their arguments name: a reader they run
/// stays a reader (`timeout 5 cat .git/config`). Not `strace -o`,
/// `valgrind --log-file`, `script`, `time -o`.
const QUIET_WRAPPERS: &[&str] = &[
    "timeout", "nice", "ionice", "env", "stdbuf", "setsid", "taskset", "chrt", "nohup", "xargs",
    "command", "builtin", "exec", "sudo", "doas",
];

/// Commands that write no directory's contents anywhere else: what a
/// directory they name holds does not count ([`NamedPath::contents`]).
/// git's arguments are pathspecs and revisions.
const CONTENTS_STAY: &[&str] = &[
    "rm", "rmdir", "mkdir", "touch", "chmod", "chown", "chgrp", "truncate", "git",
];

/// Options whose value is a pattern of names to leave out or match, per
/// command: `find . -path ./.git -prune`, `tar --exclude=.git`.
const PATTERN_OPTIONS: &[(&str, &[&str])] = &[
    (
        "find",
        &["-path", "-ipath", "-name", "-iname", "-wholename"],
    ),
    ("tar", &["--exclude"]),
    ("rsync", &["--exclude"]),
];

/// Directories whose files git, or a program git runs, reads as
/// configuration that may name a program to run: a repository's `.git`,
/// and in `HOME` gpg's (`git log --show-signature`) and
/// ssh's (`git fetch` over ssh: `ProxyCommand`).
pub(crate) const RUN_BY_GIT: [&str; 3] = [".git", ".gnupg", ".ssh"];

/// The names git's configuration is reached by, for the components a
/// glob may stand for: also the running commands' private directories
/// ([`crate::sandbox::TMP_DIR_NAME`]), where each one's `HOME` holds the
/// `.gitconfig` git reads for it.
const GIT_NAMES: [&str; 7] = [
    ".git",
    ".gitconfig",
    ".config",
    "git",
    ".gnupg",
    ".ssh",
    crate::sandbox::TMP_DIR_NAME,
];

/// Where a command line's writes may land, for the allow rules that vouch
/// for them.
#[derive(Clone)]
pub(crate) struct Reach<'a> {
    /// The directories the line may be in, relative to the call's
    /// workspace ([`line_places`]); `None` when one is computed at run
    /// time.
    places: Option<Vec<String>>,
    /// [`CallFacts::git_links`].
    links: &'a [String],
    /// The call's workspace on disk: an absolute path inside it is judged
    /// as the relative path it names.
    workspace: Option<&'a Path>,
    /// What the components of every place say, and of where the call's
    /// sub-workspace is in the owner's workspace (by name and really).
    place_names: Names,
    /// The line mentions git's configuration somewhere.
    mentions_git: bool,
    /// Judge as if nothing could be git's configuration (to tell a rule
    /// that covers a command but for that).
    blind: bool,
    /// The variables whose every value the line spells out.
    known: super::known::Known,
    /// The line names `SIMPLE_BACKUP_SUFFIX` (the suffix of the backups
    /// `cp -b` and its kin make).
    sets_backup_suffix: bool,
}

impl<'a> Reach<'a> {
    pub fn of_line(analysis: Option<&Analysis>, call: &CallFacts<'a>) -> Reach<'a> {
        let cwd = call_cwd(call.arguments, call.workspace);
        let places = analysis.and_then(|a| line_places(a, &cwd, call.workspace));
        let within: Vec<String> = call
            .sub_workspace
            .map(|sub| vec![sub.named.to_string(), sub.real.to_string()])
            .unwrap_or_default();
        let place_names = Names::default().with(
            places
                .iter()
                .flatten()
                .chain(&within)
                .flat_map(|p| p.split('/')),
        );
        Reach {
            places,
            place_names,
            links: call.git_links,
            workspace: call.workspace,
            mentions_git: call
                .arguments
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(mentions_git_configuration),
            blind: false,
            known: analysis.map(|a| a.known.clone()).unwrap_or_default(),
            sets_backup_suffix: call
                .arguments
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(|line| line.contains("SIMPLE_BACKUP_SUFFIX")),
        }
    }

    /// The same line judged as if nothing could be git's configuration.
    pub fn blind(&self) -> Reach<'a> {
        Reach {
            blind: true,
            ..self.clone()
        }
    }

    /// A line in the workspace's root, naming no link (for tests).
    #[cfg(test)]
    pub fn root() -> Reach<'static> {
        Reach {
            places: Some(vec![".".to_string()]),
            links: &[],
            workspace: None,
            place_names: Names::default(),
            mentions_git: false,
            blind: false,
            known: Default::default(),
            sets_backup_suffix: false,
        }
    }

    /// Whether a redirection to the literal, relative `target` could write
    /// git's configuration: by its name from any place of the line, through
    /// a link, or from a place computed at run time.
    pub fn target_may_be_git_configuration(&self, target: &str) -> bool {
        if self.blind {
            return false;
        }
        match &self.places {
            Some(places) => self.may_reach(places, target),
            None => true,
        }
    }

    /// Whether the arguments of `piece` (every layer's: a wrapper's own
    /// options count, `env -C .git`, `strace -o .git/config`) may name git's
    /// configuration, words `spelt` out by the rule aside. A command that
    /// writes no file its arguments name, run by wrappers that write none
    /// either, may name it freely. An argument is taken as a path from
    /// every place of the line (any argument may, when a place is computed
    /// at run time), with the values of options (`--output=…`, `of=…`, `-ft.git`)
    /// and the words of a script (`sed 'w .git/config'`) read as paths too.
    pub fn arguments_may_name_git_configuration(
        &self,
        piece: &Piece,
        spelt: impl Fn(&Word) -> bool,
    ) -> bool {
        if self.blind {
            return false;
        }
        if only_reads(piece) {
            return false;
        }
        let Some(outer) = piece.layers.first() else {
            return false;
        };
        let inner = piece.layers.last().unwrap_or(outer);
        if inner.open_ended && self.mentions_git {
            return true;
        }
        let commands: Vec<&str> = piece
            .layers
            .iter()
            .filter_map(|l| l.words.first().map(|w| w.text.as_str()))
            .collect();
        let sed = matches!(piece.command_name(), Some("sed" | "gsed"));
        let awk = matches!(
            piece.command_name(),
            Some("awk" | "gawk" | "mawk" | "nawk" | "original-awk")
        );
        let patterns = piece
            .command_name()
            .and_then(|name| PATTERN_OPTIONS.iter().find(|(n, _)| *n == name))
            .map(|(_, options)| *options)
            .unwrap_or_default();
        let is_pattern = |previous: &str, word: &str| {
            patterns.contains(&previous)
                || word
                    .split_once('=')
                    .is_some_and(|(name, _)| patterns.contains(&name))
        };
        // git's own `--git-dir` and `--work-tree` name the repository it
        // works on, not a file it writes; its `-C` is a place of the line.
        let repository = git_global_options(piece)
            .map(|range| {
                let offset = outer.words.len() - piece.layers[piece.layers.len() - 2].words.len();
                (range.start + offset)..(range.end + offset)
            })
            .unwrap_or_default();
        // A `--git-dir` other than a `.git` directory is a repository of
        // the line's choosing, whose configuration git runs.
        let chosen_repository =
            outer.words[repository.clone()]
                .iter()
                .enumerate()
                .any(|(i, word)| {
                    let value = match word.text.strip_prefix("--git-dir") {
                        Some("") => outer.words.get(repository.start + i + 1),
                        Some(glued) if glued.starts_with('=') => {
                            return !names_git_directory(&glued[1..]);
                        }
                        _ => return false,
                    };
                    value.is_none_or(|v| !v.literal || !names_git_directory(&v.text))
                });
        if chosen_repository {
            return true;
        }
        // What `find -exec` runs is a piece of its own, judged as such.
        let run_by_find = find_commands(outer);
        let suffixes = backup_suffixes(piece, self.sets_backup_suffix);
        let replaced = xargs_replace_strings(piece);
        let inner_start = outer.words.len() - inner.words.len();
        // git's `--work-tree` is where checkout, restore and reset write:
        // `--work-tree=.git/hooks` makes a checked-out file a hook.
        let work_tree = |i: usize, word: &Word| {
            word.text.starts_with("--work-tree=")
                || (i > 0 && outer.words[i - 1].text == "--work-tree")
        };
        outer.words.iter().enumerate().any(|(i, word)| {
            if run_by_find.contains(&i)
                || commands.contains(&word.text.as_str())
                || (i > 0 && is_pattern(&outer.words[i - 1].text, &word.text))
                || (repository.contains(&i) && !work_tree(i, word))
                || spelt(word)
            {
                return false;
            }
            // Taken from a directory computed at run time, any word may.
            let Some(places) = self.places.as_deref() else {
                return true;
            };
            // `{}`: the paths `find -exec` hands over, which may be any
            // beneath, `.git/config` too; and a word built on one
            // (`{}/pre-commit` once `{}` is `.git/hooks`), or on the
            // string `xargs -I` replaces with what it reads.
            if word.text.contains("{}")
                || (i >= inner_start && replaced.iter().any(|r| word.text.contains(r.as_str())))
            {
                return true;
            }
            // Computed: the texts it stands for when the line spells out
            // its variables' values, or else anything (`x=.gi; tee -a
            // "${x}t/config"`, `sed -i … "$(echo .gi)t/config"`, `sort
            // --o="$f"`: where a program may write is too varied to list).
            // git's arguments are revisions, pathspecs and messages, but
            // for the files its `--output` and `-o` name.
            let matters = word.computed
                && !word.text.starts_with("<(")
                && !word.text.starts_with(">(")
                && (self.mentions_git
                    || piece.command_name() != Some("git")
                    || (i >= inner_start
                        && git_writes_to(&outer.words[inner_start..], i - inner_start, word)));
            if matters {
                if let Some(rest) = anchored(word) {
                    return argument_paths(rest).any(|path| self.may_reach(places, path));
                }
                return match self.known.readings(word) {
                    Some(texts) => texts
                        .iter()
                        .any(|text| argument_paths(text).any(|path| self.may_reach(places, path))),
                    None => true,
                };
            }
            // A URL names no file here.
            if word.literal && word.text.contains("://") {
                return false;
            }
            let Some(readings) = word_readings(word) else {
                return true;
            };
            let Some(suffixes) = &suffixes else {
                return true;
            };
            readings.iter().any(|reading| {
                if suffixes.iter().any(|suffix| {
                    argument_paths(reading)
                        .any(|path| self.may_reach(places, &format!("{path}{suffix}")))
                }) {
                    return true;
                }
                let awk_writes = awk.then(|| awk_written_files(reading));
                if awk_writes.as_ref().is_some_and(|w| w.computed) {
                    return true;
                }
                let script = sed
                    .then(|| sed_written_files(reading))
                    .into_iter()
                    .flatten();
                let strings = awk_writes
                    .iter()
                    .flat_map(|w| w.strings.iter().map(String::as_str));
                argument_paths(reading)
                    .chain(script)
                    .chain(strings)
                    .any(|path| self.may_reach(places, path))
            })
        })
    }

    fn may_reach(&self, places: &[String], path: &str) -> bool {
        if self.through_descriptors(path) {
            return true;
        }
        let path = relative(path, self.workspace);
        self.place_names.with(path.split('/')).named() || self.leads_in(places, &path)
    }

    /// A path under `/proc` may be any file, the workspace's too
    /// (`/proc/self/cwd/…`, `/proc/self/fd/3`); `/dev/fd/N` and
    /// `/dev/stdout` reopen a descriptor the line may have opened on
    /// git's configuration with a read redirection (`tee /dev/fd/3 3<
    /// .git/config`), so in a line that mentions it or a link to it.
    fn through_descriptors(&self, path: &str) -> bool {
        path.starts_with("/proc/")
            || ((path.starts_with("/dev/fd/") || path.starts_with("/dev/std"))
                && (self.mentions_git || !self.links.is_empty()))
    }

    fn leads_in(&self, places: &[String], path: &str) -> bool {
        if self.links.iter().any(|l| l == NAMED_PATHS_UNCHECKED) {
            return true;
        }
        !self.links.is_empty()
            && places
                .iter()
                .any(|place| joined(place, path).is_some_and(|named| self.links.contains(&named)))
    }
}

/// Whether `piece` runs a command that writes no file its arguments name,
/// under wrappers that write none either.
fn only_reads(piece: &Piece) -> bool {
    let wrappers = &piece.layers[..piece.layers.len().saturating_sub(1)];
    piece.command_name().is_some_and(|n| READERS.contains(&n))
        && wrappers.iter().all(|l| {
            l.words
                .first()
                .and_then(command::command_name)
                .is_some_and(|n| QUIET_WRAPPERS.contains(&n))
        })
}

/// The strings the `xargs` layers of `piece` replace with what they read
/// (`-I R`, `-IR`, `-i`, `-iR`, `--replace`, `--replace=R`; `{}` by
/// default): a word of the command holding one is a path read at run time.
fn xargs_replace_strings(piece: &Piece) -> Vec<String> {
    let mut replaced = Vec::new();
    for layer in &piece.layers[..piece.layers.len().saturating_sub(1)] {
        let words = &layer.words;
        if words.first().and_then(command::command_name) != Some("xargs") {
            continue;
        }
        let mut i = 1;
        while let Some(word) = words.get(i) {
            let text = word.text.as_str();
            if text == "--" || !text.starts_with('-') {
                break;
            }
            if text == "-I" {
                replaced.extend(words.get(i + 1).map(|w| w.text.clone()));
                i += 1;
            } else if command::XARGS_VALUE_OPTIONS.contains(&text) {
                i += 1;
            } else if let Some(value) = text.strip_prefix("-I") {
                replaced.push(value.to_string());
            } else if text == "-i" || text == "--replace" {
                replaced.push("{}".to_string());
            } else if let Some(value) = text
                .strip_prefix("--replace=")
                .or_else(|| text.strip_prefix("-i"))
            {
                replaced.push(value.to_string());
            }
            i += 1;
        }
    }
    replaced.retain(|r| !r.is_empty());
    replaced
}

/// The indices of the words of a `find` command (`layer`) that make up
/// the commands its `-exec`, `-execdir`, `-ok` and `-okdir` run, up to
/// their `;` or `+`.
fn find_commands(layer: &command::Layer) -> Vec<usize> {
    let words = &layer.words;
    if words.first().and_then(command::command_name) != Some("find") {
        return Vec::new();
    }
    let mut inside = false;
    let mut indices = Vec::new();
    for (i, word) in words.iter().enumerate() {
        match word.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" if !inside => inside = true,
            ";" | "+" if inside => inside = false,
            _ if inside => indices.push(i),
            _ => {}
        }
    }
    indices
}

/// Whether `path` is a directory named `.git`.
fn names_git_directory(path: &str) -> bool {
    path.trim_end_matches('/').rsplit('/').next() == Some(".git")
}

/// The indices, in the layer of a `git` command that still holds them,
/// of git's global options (`git -C dir --git-dir=x push`: `-C dir
/// --git-dir=x`), which the analysis peels off before the subcommand.
fn git_global_options(piece: &Piece) -> Option<std::ops::Range<usize>> {
    let [.., with, inner] = &piece.layers[..] else {
        return None;
    };
    let is_git =
        |layer: &command::Layer| layer.words.first().and_then(command::command_name) == Some("git");
    (is_git(with) && is_git(inner))
        .then(|| 1..(with.words.len() + 1).saturating_sub(inner.words.len()))
}

/// The call's `cwd` relative to its workspace (`.` for its root).
fn call_cwd(arguments: &Value, workspace: Option<&Path>) -> String {
    let cwd = arguments.get("cwd").and_then(Value::as_str).unwrap_or(".");
    relative(cwd, workspace)
}

/// A path as the workspace-relative one it names, when it does: an
/// absolute path inside `workspace`, or one from `HOME` (`~/x`: a
/// command's `HOME` is an empty directory of its own inside the
/// workspace, whose names are judged as the root's: `~/.gitconfig` is
/// git's global configuration whichever it is); any other as written.
fn relative(path: &str, workspace: Option<&Path>) -> String {
    let path = super::within(path, workspace);
    path.strip_prefix("~/")
        .or((path == "~").then_some("."))
        .unwrap_or(&path)
        .to_string()
}

/// The most directories a line's writes are judged from; a line that may
/// be in more is judged as one whose directory is computed at run time.
const MAX_PLACES: usize = 64;

/// The directories a command line may be in, relative to the workspace,
/// in any order: `cwd` and every directory a `cd` or `pushd` names or an
/// `env -C` / `env --chdir` starts a command in (`..`, `~` and absolute
/// paths included: their components count like any other; an unquoted
/// glob or brace stands for its readings, see [`word_readings`]). A bare
/// `cd`, `cd -` and `popd` go back to one of these. `None` when a
/// directory is computed at run time (`cd "$D"`).
fn line_places(analysis: &Analysis, cwd: &str, workspace: Option<&Path>) -> Option<Vec<String>> {
    let mut places = vec![cwd.to_string()];
    let add = |word: &Word, places: &mut Vec<String>| -> Option<()> {
        if word.computed {
            return None;
        }
        for reading in word_readings(word)? {
            // A descriptor's directory may be any (`cd /dev/fd/3`).
            if reading.starts_with("/proc/") || reading.starts_with("/dev/fd") {
                return None;
            }
            let place = relative(&reading, workspace);
            if !places.contains(&place) {
                // More than the line can be judged against in time.
                if places.len() == MAX_PLACES {
                    return None;
                }
                places.push(place);
            }
        }
        Some(())
    };
    for piece in &analysis.pieces {
        if let Some(range) = git_global_options(piece) {
            let with = &piece.layers[piece.layers.len() - 2].words[range];
            let mut options = with.iter();
            while let Some(option) = options.next() {
                if option.text == "-C" {
                    add(options.next()?, &mut places)?;
                }
            }
        }
        for layer in &piece.layers {
            let words = &layer.words;
            match words.first().and_then(command::command_name) {
                // Runs a command in the directory of each file it finds.
                Some("find")
                    if words
                        .iter()
                        .any(|w| matches!(w.text.as_str(), "-execdir" | "-okdir")) =>
                {
                    return None;
                }
                Some("cd" | "pushd") => {
                    for word in words[1..].iter().filter(|w| w.text != "-") {
                        add(word, &mut places)?;
                    }
                }
                Some("env") => {
                    let mut rest = words[1..].iter();
                    while let Some(word) = rest.next() {
                        let text = word.text.as_str();
                        if text == "-C" || text == "--chdir" {
                            add(rest.next()?, &mut places)?;
                        } else if let Some(dir) = text
                            .strip_prefix("--chdir=")
                            .or_else(|| text.strip_prefix("-C"))
                            .filter(|d| !d.is_empty())
                        {
                            let dir = Word {
                                text: dir.to_string(),
                                ..word.clone()
                            };
                            add(&dir, &mut places)?;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Some(places)
}

/// Whether path components, in any order, name git's configuration.
fn names_git_configuration<'p>(parts: impl IntoIterator<Item = &'p str>) -> bool {
    Names::default().with(parts).named()
}

/// What path components seen so far say of git's configuration (see
/// [`names_git_configuration`]): kept for a line's places, so that each
/// path is judged by its own components only.
#[derive(Debug, Clone, Copy, Default)]
struct Names {
    hit: bool,
    config: bool,
    git: bool,
}

impl Names {
    fn with<'p>(mut self, parts: impl IntoIterator<Item = &'p str>) -> Names {
        for part in parts {
            match part {
                ".gitconfig" | crate::sandbox::TMP_DIR_NAME => self.hit = true,
                _ if RUN_BY_GIT.contains(&part) => self.hit = true,
                ".config" => self.config = true,
                "git" => self.git = true,
                _ => {}
            }
            if self.named() {
                break;
            }
        }
        self
    }

    fn named(self) -> bool {
        self.hit || (self.config && self.git)
    }
}

/// Whether a command line mentions git's configuration anywhere, in any
/// word, assignment or loop list (the line as text, cut at every character
/// a path does not hold): then no word computed at run time is vouched for
/// (`for f in .git/config; do tee -a "$f"; done`).
pub(crate) fn mentions_git_configuration(line: &str) -> bool {
    names_git_configuration(
        line.split(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '~'))),
    )
}

/// What a shell word may become before it reaches the command: brace
/// expansion (`{.git,x}/config`) and globs (`.g*`, `.gi?`, `.[g]it`),
/// when unquoted. A glob component stands for itself and every name of
/// git's configuration it matches (as extra components: the readings are
/// judged by their components in any order). `None` when there would be
/// too many readings to judge.
fn word_readings(word: &Word) -> Option<Vec<String>> {
    if word.literal {
        return Some(vec![word.text.clone()]);
    }
    let mut readings = brace_expansions(&word.text)?;
    for reading in &mut readings {
        let globbed: Vec<String> = reading
            .split('/')
            .map(|component| {
                if !component.contains(['*', '?', '[']) {
                    return component.to_string();
                }
                // A class such as `[[:alpha:]]` the matcher does not read
                // may match anything.
                let matcher = globset::Glob::new(component)
                    .ok()
                    .filter(|_| !component.contains("[:"))
                    .map(|g| g.compile_matcher());
                let names = GIT_NAMES
                    .into_iter()
                    .filter(|name| matcher.as_ref().is_none_or(|m| m.is_match(name)));
                std::iter::once(component)
                    .chain(names)
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        *reading = globbed.join("/");
    }
    Some(readings)
}

/// The most readings brace expansion may give one word before it is
/// judged as one that may be anything.
const MAX_BRACE_READINGS: usize = 64;

/// Unquoted brace expansion of `text` (`a{b,c}d` → `abd`, `acd`), nested
/// braces included; `None` for a sequence (`{a..z}`) or more than
/// [`MAX_BRACE_READINGS`] readings.
fn brace_expansions(text: &str) -> Option<Vec<String>> {
    let mut done = Vec::new();
    let mut todo = vec![text.to_string()];
    while let Some(word) = todo.pop() {
        match first_brace_group(&word) {
            BraceGroup::None => done.push(word),
            BraceGroup::Sequence => return None,
            BraceGroup::Alternatives(open, close, commas) => {
                let mut start = open + 1;
                for end in commas.into_iter().chain([close]) {
                    todo.push(format!(
                        "{}{}{}",
                        &word[..open],
                        &word[start..end],
                        &word[close + 1..]
                    ));
                    start = end + 1;
                }
            }
        }
        if done.len() + todo.len() > MAX_BRACE_READINGS {
            return None;
        }
    }
    Some(done)
}

enum BraceGroup {
    None,
    /// `{a..b}`: a sequence, whose members are not spelt out.
    Sequence,
    /// Byte offsets of `{`, `}` and the commas between them at that depth.
    Alternatives(usize, usize, Vec<usize>),
}

/// The first `{…}` of `text` that brace expansion expands.
fn first_brace_group(text: &str) -> BraceGroup {
    for (open, _) in text.match_indices('{') {
        let mut depth = 0;
        let mut commas = Vec::new();
        for (at, c) in text[open..].char_indices() {
            let at = open + at;
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        if !commas.is_empty() {
                            return BraceGroup::Alternatives(open, at, commas);
                        }
                        if text[open..at].contains("..") {
                            return BraceGroup::Sequence;
                        }
                        break;
                    }
                }
                ',' if depth == 1 => commas.push(at),
                _ => {}
            }
        }
    }
    BraceGroup::None
}

/// The readings of a command's argument as paths: the word cut at `=`,
/// blanks, `;`, `:` and `,` (option values, a script's words: `of=x`,
/// `sed 'w x'`), and each short-option cluster read from every letter on
/// (`-ft.git` may be `-f -t .git`).
fn argument_paths(word: &str) -> impl Iterator<Item = &str> {
    word.split(['=', ' ', '\t', '\n', ';', ':', ','])
        .flat_map(|part| {
            let cluster = part
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-') && !rest.is_empty());
            let suffixes = cluster
                .map(|rest| {
                    rest.char_indices()
                        .map(|(at, _)| &rest[at..])
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            std::iter::once(part).chain(suffixes)
        })
}

/// What may follow a `w` or `W` in a sed script: the file it writes,
/// also with no blank between (`w.git/config`, `s/a/b/w.git/config`).
fn sed_written_files(script: &str) -> impl Iterator<Item = &str> {
    script
        .match_indices(['w', 'W'])
        .map(move |(at, _)| script[at + 1..].trim_start())
}

/// The suffixes of the backups `piece` makes of the files it writes: a
/// backup of `.gitconf` with the suffix `ig` is `.gitconfig` (`cp -b -S
/// ig`, `sed -iig`). `None` when one is not known: computed, with
/// `SIMPLE_BACKUP_SUFFIX` in the line, or a sed template holding `*`
/// (which sed replaces with the file's name: `-i'.gi*/config'` backs `t`
/// up as `.git/config`) or `/`.
fn backup_suffixes(piece: &Piece, line_sets_suffix: bool) -> Option<Vec<String>> {
    let words = piece.command();
    let name = piece.command_name().unwrap_or_default();
    let mut suffixes = Vec::new();
    let plain = |suffix: &str, word: &Word| {
        (word.literal && !suffix.contains(['*', '/'])).then(|| suffix.to_string())
    };
    match name {
        "cp" | "mv" | "ln" | "install" => {
            let backs_up = words.iter().any(|w| {
                w.text.starts_with("--b")
                    || w.text.starts_with("--su")
                    || (w.text.starts_with('-')
                        && !w.text.starts_with("--")
                        && w.text.contains(['b', 'S']))
            });
            if !backs_up {
                return Some(suffixes);
            }
            if line_sets_suffix {
                return None;
            }
            suffixes.push("~".into());
            let named_unseen = unseen_backups(words, |w| {
                w.text.starts_with("--r")
                    || w.text.starts_with("--a")
                    || (w.text.starts_with('-')
                        && !w.text.starts_with("--")
                        && w.text.contains(['r', 'R', 'a']))
            });
            for (i, w) in words.iter().enumerate() {
                let value = if let Some(v) = w.text.strip_prefix("--suffix=") {
                    Some((v.to_string(), w))
                } else if w.text == "--suffix" || w.text == "-S" {
                    words.get(i + 1).map(|n| (n.text.clone(), n))
                } else if let Some(v) = w.text.strip_prefix("-S").filter(|v| !v.is_empty()) {
                    Some((v.to_string(), w))
                } else {
                    w.text
                        .strip_prefix('-')
                        .filter(|c| !c.starts_with('-'))
                        .and_then(|c| c.split_once('S'))
                        .and_then(|(_, v)| match v {
                            "" => words.get(i + 1).map(|n| (n.text.clone(), n)),
                            v => Some((v.to_string(), w)),
                        })
                };
                if let Some((suffix, word)) = value {
                    suffixes.push(plain(&suffix, word)?);
                }
            }
            // A suffix of the caller's choosing on files the line does
            // not name one by one.
            if named_unseen && suffixes.len() > 1 {
                return None;
            }
        }
        "sed" | "gsed" => {
            for w in words {
                let suffix = if let Some(long) = w.text.strip_prefix("--") {
                    long.split_once('=')
                        .filter(|(name, _)| "in-place".starts_with(name))
                        .map(|(_, suffix)| suffix)
                } else {
                    w.text.strip_prefix('-').and_then(|cluster| {
                        let at = cluster.find('i')?;
                        cluster[..at]
                            .chars()
                            .all(|c| matches!(c, 'n' | 's' | 'E' | 'r' | 'u' | 'z' | 'b'))
                            .then(|| &cluster[at + 1..])
                    })
                };
                if let Some(suffix) = suffix.filter(|s| !s.is_empty()) {
                    suffixes.push(plain(suffix, w)?);
                }
            }
            if !suffixes.is_empty() && unseen_backups(words, |_| false) {
                return None;
            }
        }
        // Backups named by a suffix, a prefix or a directory of the
        // caller's choosing (`rsync --suffix`, `patch -z`/`-B`/`-Y`):
        // not read, so not vouched for.
        "rsync" | "patch" => {
            let chosen = words.iter().skip(1).any(|w| {
                let t = w.text.as_str();
                let long = |option: &str| {
                    t.strip_prefix("--")
                        .map(|rest| rest.split('=').next().unwrap_or(rest))
                        .is_some_and(|given| !given.is_empty() && option.starts_with(given))
                };
                if name == "rsync" {
                    long("suffix") || long("backup-dir")
                } else {
                    long("suffix")
                        || long("prefix")
                        || long("basename-prefix")
                        || (t.starts_with('-')
                            && !t.starts_with("--")
                            && t.contains(['z', 'B', 'Y']))
                }
            });
            if chosen {
                return None;
            }
        }
        _ => {}
    }
    Some(suffixes)
}

/// Whether a backing-up command may back up files its line does not name
/// one by one: an argument (not an option) that is not literal (a glob,
/// an expansion), or an option `recursive` says copies a tree.
fn unseen_backups(words: &[Word], recursive: impl Fn(&Word) -> bool) -> bool {
    words
        .iter()
        .skip(1)
        .any(|w| recursive(w) || (!w.literal && !w.text.starts_with('-')))
}

/// What an awk program may write: every string it holds (a name it
/// prints to may be set in a variable first: `f=".git/config"; print >
/// f`), and whether a `print`/`printf` redirects to anything but one
/// string as written (`print > ".gi" "t/config"`, `print > $1`): a name
/// computed when it runs. A program that cannot be read with confidence
/// (a string or regular expression left open) counts as computing one.
struct AwkWrites {
    strings: Vec<String>,
    computed: bool,
}

/// An awk program's pieces, as far as [`awk_written_files`] needs them.
#[derive(Debug, PartialEq)]
enum AwkToken {
    Str(String),
    Word(String),
    /// A regular expression, a number, or any other operand.
    Operand,
    Punct(char),
    /// A statement's end: `;`, a newline, `}`.
    End,
}

fn awk_tokens(program: &str) -> Option<Vec<AwkToken>> {
    let chars: Vec<char> = program.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    // Whether a `/` here divides (after an operand) or opens a regular
    // expression.
    let after_operand = |tokens: &[AwkToken]| {
        matches!(
            tokens.last(),
            Some(
                AwkToken::Str(_)
                    | AwkToken::Word(_)
                    | AwkToken::Operand
                    | AwkToken::Punct(')' | ']' | '$')
            )
        )
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i)? {
                        '"' => break,
                        '\\' => {
                            text.push(*chars.get(i + 1)?);
                            i += 2;
                        }
                        &other => {
                            text.push(other);
                            i += 1;
                        }
                    }
                }
                tokens.push(AwkToken::Str(text));
                i += 1;
            }
            '/' if !after_operand(&tokens) => {
                i += 1;
                let mut bracket = false;
                loop {
                    match chars.get(i)? {
                        '\\' => i += 2,
                        '[' => {
                            bracket = true;
                            i += 1;
                        }
                        ']' => {
                            bracket = false;
                            i += 1;
                        }
                        '/' if !bracket => break,
                        '\n' => return None,
                        _ => i += 1,
                    }
                }
                tokens.push(AwkToken::Operand);
                i += 1;
            }
            ';' | '\n' | '}' | '{' => {
                tokens.push(AwkToken::End);
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    i += 1;
                }
                tokens.push(AwkToken::Word(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit() || c == '.' => {
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
                {
                    i += 1;
                }
                tokens.push(AwkToken::Operand);
            }
            c if c.is_whitespace() => i += 1,
            c => {
                tokens.push(AwkToken::Punct(c));
                i += 1;
            }
        }
    }
    Some(tokens)
}

fn awk_written_files(program: &str) -> AwkWrites {
    let Some(tokens) = awk_tokens(program) else {
        return AwkWrites {
            strings: Vec::new(),
            computed: true,
        };
    };
    let strings = tokens
        .iter()
        .filter_map(|t| match t {
            AwkToken::Str(text) => Some(text.clone()),
            _ => None,
        })
        .collect();
    let mut computed = false;
    let mut i = 0;
    while i < tokens.len() {
        let printing = matches!(&tokens[i], AwkToken::Word(w) if w == "print" || w == "printf");
        i += 1;
        if !printing {
            continue;
        }
        // The statement, up to its end at the outer level: a `>` there
        // redirects (inside parentheses it compares).
        let mut depth = 0usize;
        while i < tokens.len() {
            match &tokens[i] {
                AwkToken::Punct('(' | '[') => depth += 1,
                AwkToken::Punct(')' | ']') => depth = depth.saturating_sub(1),
                AwkToken::End | AwkToken::Punct('|') if depth == 0 => break,
                AwkToken::Punct('>') if depth == 0 => {
                    let mut target = i + 1;
                    if tokens.get(target) == Some(&AwkToken::Punct('>')) {
                        target += 1;
                    }
                    let one_string = matches!(tokens.get(target), Some(AwkToken::Str(_)))
                        && matches!(tokens.get(target + 1), None | Some(AwkToken::End));
                    if !one_string {
                        computed = true;
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    AwkWrites { strings, computed }
}

/// `path` from the workspace directory `place`, as [`bash_named_paths`]
/// names it and the caller looks it up: joined, `.` and empty components
/// dropped (`..` kept: the caller resolves it on disk); `None` for an
/// absolute path or the workspace itself.
fn joined(place: &str, path: &str) -> Option<String> {
    if path.starts_with('/') || place.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = place
        .split('/')
        .chain(path.split('/'))
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The most paths [`bash_named_paths`] returns: each is looked up on disk
/// before a `bash` call is judged.
pub const MAX_NAMED_PATHS: usize = 256;

/// The most components a named path may have to be looked up; a line
/// naming a deeper one is judged as naming too many.
const MAX_NAMED_DEPTH: usize = 256;

/// The longest path the kernel resolves (Linux's `PATH_MAX`).
const PATH_MAX: usize = 4096;

/// What [`CallFacts::git_links`] holds when a line names more paths than
/// could be looked up: as if every one led into git's configuration.
pub const NAMED_PATHS_UNCHECKED: &str = "\0unchecked";

/// A workspace path a `bash` call's line names ([`bash_named_paths`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    /// Relative to the call's workspace, joined to a place of the line.
    pub path: String,
    /// A command that may write names it as an argument: what a directory
    /// there holds may be copied, moved or extracted somewhere (`cp -r
    /// stage/. .` with a `stage/.git`), so its contents count too.
    pub contents: bool,
}

/// The workspace paths a `bash` call's command line names, from each
/// directory the line may be in: its redirections' targets and its
/// commands' arguments (values of options included, brace expansions
/// spelt out), relative to the call's workspace (`workspace`, its absolute
/// path, makes absolute paths inside it relative). The caller looks each
/// up on disk and reports, as [`CallFacts::git_links`], those that lead
/// into git's configuration through a symbolic or hard link, or (when
/// their contents count) directories that hold some. `None` when there
/// are more than [`MAX_NAMED_PATHS`], or one deeper than
/// [`MAX_NAMED_DEPTH`]; paths longer than the kernel resolves are left
/// out.
pub fn bash_named_paths(arguments: &Value, workspace: Option<&Path>) -> Option<Vec<NamedPath>> {
    let Some(command) = arguments.get("command").and_then(Value::as_str) else {
        return Some(Vec::new());
    };
    let cwd = call_cwd(arguments, workspace);
    let analysis = command::analyse(command);
    let places = line_places(&analysis, &cwd, workspace).unwrap_or_else(|| vec![cwd.clone()]);
    let mut named: Vec<NamedPath> = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for piece in &analysis.pieces {
        let writes = !only_reads(piece)
            && !piece
                .command_name()
                .is_some_and(|n| CONTENTS_STAY.contains(&n));
        let mut paths: Vec<(String, bool)> = piece
            .redirects
            .iter()
            .map(|r| (r.target.text.clone(), false))
            .collect();
        for word in piece
            .layers
            .first()
            .map(|l| &l.words[..])
            .unwrap_or_default()
        {
            let readings = if word.literal {
                vec![word.text.clone()]
            } else {
                brace_expansions(&word.text).unwrap_or_default()
            };
            for reading in &readings {
                paths.extend(argument_paths(reading).map(|p| (p.to_string(), writes)));
            }
        }
        for (path, contents) in paths {
            let path = relative(&path, workspace);
            // The place itself: looked up as the other paths from it are.
            if path.split('/').all(|c| c.is_empty() || c == ".") {
                continue;
            }
            for place in &places {
                let Some(path) = joined(place, &path) else {
                    continue;
                };
                // Longer than the kernel opens: no file is written there.
                if path.len() > PATH_MAX {
                    continue;
                }
                if let Some(&at) = seen.get(&path) {
                    named[at].contents |= contents;
                } else if named.len() == MAX_NAMED_PATHS
                    || path.matches('/').count() >= MAX_NAMED_DEPTH
                {
                    return None;
                } else {
                    seen.insert(path.clone(), named.len());
                    named.push(NamedPath { path, contents });
                }
            }
        }
    }
    Some(named)
}
