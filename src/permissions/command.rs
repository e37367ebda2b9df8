//! From lexed pieces to the commands that actually run: keywords and
//! leading assignments dropped, wrappers (`timeout`, `nice`, `env`, `sudo`,
//! `xargs` …) and git's global options (`git -C dir push` is `git push`)
//! peeled off layer by layer, and command strings handed to
//! another shell (`bash -c`, `eval`, `env -S`, `su -c`, `find -exec`) split
//! into pieces of their own.

use super::shell::{self, MAX_DEPTH, RawPiece, Redirect, Word};

/// How many wrappers (`timeout`, `nice` …) one command may wear before it
/// is declared unreadable; each layer copies the words.
const MAX_LAYERS: usize = 16;

/// One view of a piece: the full command, or what is left after a wrapper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layer {
    pub words: Vec<Word>,
    /// More arguments arrive at run time (after `xargs`).
    pub open_ended: bool,
}

/// One command the shell would run, with every wrapper layer kept: deny
/// rules may name any layer (`sudo …`, `timeout …`), allow rules only the
/// innermost, which is what really runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub text: String,
    /// Outermost first. Empty for a piece that is only redirections or
    /// assignments.
    pub layers: Vec<Layer>,
    pub redirects: Vec<Redirect>,
    /// Hands its command string to another shell, which was split into
    /// pieces of its own: those need allowing, this one does not.
    pub transparent: bool,
    /// Found by reading arithmetic as commands (see `RawPiece::shadow`).
    pub shadow: bool,
    /// Hands a command string computed at run time to another shell.
    pub computed_payload: bool,
    pub pipeline: usize,
    pub stage: usize,
    /// Why no specific allow rule can vouch for this piece (it changes
    /// which code runs, e.g. `PATH=… git status`).
    pub opaque: Option<String>,
}

impl Piece {
    /// The words of the command that really runs.
    pub fn command(&self) -> &[Word] {
        self.layers
            .last()
            .map(|l| l.words.as_slice())
            .unwrap_or_default()
    }

    /// The base name of the command that really runs, when it is literal.
    pub fn command_name(&self) -> Option<&str> {
        self.command().first().and_then(command_name)
    }
}

/// The base name of a literal command word (`/usr/bin/env` → `env`).
pub(crate) fn command_name(word: &Word) -> Option<&str> {
    word.literal
        .then(|| word.text.rsplit('/').next().unwrap_or(&word.text))
        .filter(|name| !name.is_empty())
}

/// Everything known about one command line.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub pieces: Vec<Piece>,
    /// Why the command could not be read reliably.
    pub malformed: Vec<String>,
    /// Texts (the whole line or a payload) that define a fork bomb.
    pub fork_bombs: Vec<String>,
    /// Somewhere a `|` feeds one command's output to another's input.
    pub pipes: bool,
}

pub(crate) fn analyse(command: &str) -> Analysis {
    let mut analysis = Analysis::default();
    let mut next_pipeline = 0;
    expand(command, 0, false, &mut analysis, &mut next_pipeline);
    analysis
}

fn expand(src: &str, depth: usize, shadow: bool, an: &mut Analysis, next_pipeline: &mut usize) {
    if depth > MAX_DEPTH {
        an.malformed
            .push("commands are nested too deeply to be checked".into());
        return;
    }
    if super::dangerous::is_fork_bomb(src) {
        an.fork_bombs.push(src.trim().to_string());
    }
    let lexed = shell::lex(src, next_pipeline, depth);
    if !shadow {
        an.malformed.extend(lexed.errors);
        an.pipes |= lexed.pipes;
    }
    for mut raw in lexed.pieces {
        raw.shadow |= shadow;
        normalise(raw, depth, an, next_pipeline);
    }
}

/// Why a piece that makes bash evaluate a variable's value is not vouched
/// for by an allow rule.
const EVALUATES: &str = "it makes bash evaluate a variable's value as an expression (arithmetic, an array subscript, `${!…}` or `${…@P}`), which can run any command";

/// Builtins that evaluate the values of the variables they name: `let`
/// and `declare -i` (arithmetic), `[[ … -eq … ]]` (its operands are
/// expressions), and those that take a variable name with an indexed
/// array's subscript (`read 'a[$x]'`, `printf -v`, `unset`, `test -v` …).
fn evaluates_names(words: &[Word]) -> bool {
    let Some(name) = words.first().and_then(command_name) else {
        return false;
    };
    let args = &words[1..];
    let arithmetic_operand = |w: &Word| !w.literal || !w.text.bytes().all(|b| b.is_ascii_digit());
    match name {
        "let" => args.iter().any(arithmetic_operand),
        "declare" | "typeset" | "local"
            if args
                .iter()
                .any(|w| w.text.starts_with(['-', '+']) && w.text.contains('i')) =>
        {
            true
        }
        "[[" => args.windows(3).any(|w| {
            matches!(
                w[1].text.as_str(),
                "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge"
            ) && (arithmetic_operand(&w[0]) || arithmetic_operand(&w[2]))
        }),
        "declare" | "typeset" | "local" | "export" | "readonly" | "unset" | "read" | "printf"
        | "mapfile" | "readarray" | "test" | "[" | "wait" => args.iter().any(|w| {
            let text = w.text.split_once('=').map_or(w.text.as_str(), |(n, _)| n);
            text.split_once('[').is_some_and(|(name, subscript)| {
                shell::is_name(name)
                    && subscript.ends_with(']')
                    && subscript[..subscript.len() - 1]
                        .chars()
                        .any(|c| c == '$' || c == '`' || c == '_' || c.is_ascii_alphabetic())
            })
        }),
        _ => false,
    }
}

/// What a wrapper leaves to run.
enum Step {
    /// The command continues at this word index.
    Inner { skip: usize, open_ended: bool },
    /// A command string for another shell.
    Payload(Word),
    /// The same command without these words (git's global options: `git
    /// -C dir push` runs `git push`).
    Drop(std::ops::Range<usize>),
    /// Not a wrapper (or a wrapper used without a command).
    Stop,
}

fn normalise(raw: RawPiece, depth: usize, an: &mut Analysis, next_pipeline: &mut usize) {
    let RawPiece {
        mut words,
        redirects,
        text,
        pipeline,
        stage,
        shadow,
    } = raw;
    // Before keywords and assignments go: `x='a[$(cmd)]'; echo $((x))`
    // runs `cmd`, whatever the command around the expansion is.
    let mut opaque = words
        .iter()
        .chain(redirects.iter().map(|r| &r.target))
        .any(shell::evaluates_code)
        .then(|| EVALUATES.to_string());
    strip_keywords(&mut words);

    let mut layers = Vec::new();
    let mut open_ended = false;
    let mut payload = None;
    loop {
        let assignments = words.iter().take_while(|w| w.assignment).count();
        for word in &words[..assignments] {
            if let Some(name) = word.assigned_name().filter(|n| is_sensitive_variable(n)) {
                opaque = Some(format!(
                    "it sets {name}, which changes what the command runs"
                ));
            }
        }
        words.drain(..assignments);
        if words.is_empty() {
            break;
        }
        if layers.len() == MAX_LAYERS {
            an.malformed.push(format!(
                "more than {MAX_LAYERS} wrappers around one command"
            ));
            break;
        }
        layers.push(Layer {
            words: words.clone(),
            open_ended,
        });
        match step(&words, &mut opaque) {
            Step::Inner {
                skip,
                open_ended: open,
            } if skip < words.len() => {
                words.drain(..skip);
                open_ended |= open;
            }
            Step::Payload(word) => {
                payload = Some(word);
                break;
            }
            Step::Drop(range) if range.end < words.len() => {
                words.drain(range);
            }
            Step::Inner { .. } | Step::Drop(_) | Step::Stop => break,
        }
    }
    if let Some(name) = layers
        .last()
        .and_then(|l| l.words.first())
        .and_then(command_name)
    {
        if matches!(
            name,
            "export" | "declare" | "typeset" | "local" | "readonly"
        ) {
            let command = &layers[layers.len() - 1].words;
            if let Some(name) = command[1..]
                .iter()
                .filter_map(|w| text_assignment(&w.text))
                .find(|n| is_sensitive_variable(n))
            {
                opaque = Some(format!(
                    "it sets {name}, which changes what later commands run"
                ));
            }
        }
    }
    if opaque.is_none()
        && let Some(layer) = layers.last()
        && evaluates_names(&layer.words)
    {
        opaque = Some(EVALUATES.to_string());
    }
    // Before its global options are dropped: `git -c core.pager=… log`.
    for layer in &layers {
        if layer.words.first().and_then(command_name) == Some("git") {
            if let Some(why) = git_runs_program(&layer.words) {
                opaque = Some(why);
                break;
            }
        }
    }
    if layers.is_empty() && opaque.is_none() && !redirects.iter().any(Redirect::writes) {
        // Plain assignments, a lone keyword, or a loop's `done < input`:
        // nothing runs and nothing is written.
        return;
    }

    let mut transparent = false;
    let mut computed_payload = false;
    if let Some(payload) = &payload {
        if payload.literal {
            transparent = true;
        } else {
            computed_payload = true;
        }
    }
    let exec_commands = layers
        .last()
        .map(|l| find_exec_commands(&l.words))
        .unwrap_or_default();
    an.pieces.push(Piece {
        text,
        layers,
        redirects,
        transparent,
        shadow,
        computed_payload,
        pipeline,
        stage,
        opaque,
    });
    if let Some(payload) = payload.filter(|p| p.literal) {
        expand(&payload.text, depth + 1, shadow, an, next_pipeline);
    }
    for words in exec_commands {
        if depth >= MAX_DEPTH {
            an.malformed
                .push("commands are nested too deeply to be checked".into());
            break;
        }
        let text = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let pipeline = *next_pipeline;
        *next_pipeline += 1;
        let raw = RawPiece {
            words,
            redirects: Vec::new(),
            text,
            pipeline,
            stage: 0,
            shadow,
        };
        normalise(raw, depth + 1, an, next_pipeline);
    }
}

/// The wrapper or assignment that `words` start with and that would be
/// peeled before allow rules look at the command.
pub(crate) fn peeled_prefix(words: &[Word]) -> Option<String> {
    let first = words.first()?;
    if first.assignment {
        return Some(first.text.clone());
    }
    match step(words, &mut None) {
        Step::Inner { skip, .. } if skip < words.len() => Some(first.text.clone()),
        Step::Payload(_) => Some(first.text.clone()),
        Step::Drop(range) if range.end < words.len() => Some(
            words[range]
                .iter()
                .map(|w| w.text.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Step::Inner { .. } | Step::Drop(_) | Step::Stop => None,
    }
}

/// Drop reserved words that lead a command (`if`, `then`, `!`, `{` …) and
/// whole headers (`for x in …`, `case … in`) whose substitutions were
/// already split out.
fn strip_keywords(words: &mut Vec<Word>) {
    const LEADING: [&str; 14] = [
        "!", "{", "}", "if", "then", "elif", "else", "do", "while", "until", "fi", "done", "esac",
        "coproc",
    ];
    loop {
        let Some(first) = words.first() else { return };
        if LEADING.iter().any(|k| first.is_keyword(k)) {
            words.remove(0);
        } else if first.is_keyword("function") {
            let n = words.len().min(2);
            words.drain(..n);
        } else if ["for", "select", "case"]
            .iter()
            .any(|k| first.is_keyword(k))
        {
            words.clear();
        } else {
            return;
        }
    }
}

/// `NAME` of a `NAME=value` text (as `env` and `export` read it).
fn text_assignment(text: &str) -> Option<&str> {
    let (name, _) = text.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    let mut chars = name.chars();
    let valid = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    valid.then_some(name)
}

/// Variables that change which code a command runs (its program, its
/// libraries, its helpers), so `NAME=… git status` is not `git status`.
fn is_sensitive_variable(name: &str) -> bool {
    const EXACT: [&str; 34] = [
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "CDPATH",
        "PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "RUSTC_WRAPPER",
        "RUSTC",
        "CC",
        "SHELL",
    ];
    const PREFIXES: [&str; 6] = [
        "LD_",
        "DYLD_",
        "GIT_",
        "BASH_FUNC_",
        "CARGO_",
        "NPM_CONFIG_",
    ];
    let upper = name.to_ascii_uppercase();
    EXACT.contains(&name) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Skip the options of a wrapper. `None`: an option it does not know (then
/// the wrapper would refuse to run, or we cannot tell where its command
/// starts, so it is not peeled).
fn skip_options(
    words: &[Word],
    mut i: usize,
    with_arg: &[&str],
    no_arg: &[&str],
    optional_attached: &[&str],
) -> Option<usize> {
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        if t == "--" {
            return Some(i + 1);
        }
        if !t.starts_with('-') || t == "-" {
            return Some(i);
        }
        if no_arg.contains(&t) {
            i += 1;
        } else if with_arg.contains(&t) {
            i += 2;
        } else if let Some((key, _)) = t.split_once('=').filter(|_| t.starts_with("--")) {
            if with_arg.contains(&key) || no_arg.contains(&key) || optional_attached.contains(&key)
            {
                i += 1;
            } else {
                return None;
            }
        } else if t.starts_with("--") {
            if optional_attached.contains(&t) {
                i += 1;
            } else {
                return None;
            }
        } else {
            // `-n5`, `-i{}` (value attached), `-i` (optional value absent),
            // or a cluster of flags such as `-rt`.
            let attached = t.len() > 2
                && t.is_char_boundary(2)
                && (with_arg.contains(&&t[..2]) || optional_attached.contains(&&t[..2]));
            let cluster = t[1..]
                .chars()
                .all(|c| no_arg.iter().any(|f| f.len() == 2 && f.ends_with(c)));
            if !(attached || cluster || optional_attached.contains(&t)) {
                return None;
            }
            i += 1;
        }
    }
    Some(i)
}

fn inner(skip: Option<usize>) -> Step {
    match skip {
        Some(skip) => Step::Inner {
            skip,
            open_ended: false,
        },
        None => Step::Stop,
    }
}

fn step(words: &[Word], opaque: &mut Option<String>) -> Step {
    let Some(name) = words.first().and_then(command_name) else {
        return Step::Stop;
    };
    match name {
        "env" => env(words, opaque),
        "timeout" => match skip_options(
            words,
            1,
            &["-s", "--signal", "-k", "--kill-after"],
            &["--preserve-status", "--foreground", "-v", "--verbose"],
            &[],
        ) {
            // Then the duration.
            Some(i) if i < words.len() => Step::Inner {
                skip: i + 1,
                open_ended: false,
            },
            _ => Step::Stop,
        },
        "nice" => {
            let legacy = words.get(1).is_some_and(|w| {
                let t = w.text.trim_start_matches('-').trim_start_matches('+');
                w.text.starts_with('-') && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
            });
            if legacy {
                inner(skip_options(words, 2, &["-n", "--adjustment"], &[], &[]))
            } else {
                inner(skip_options(words, 1, &["-n", "--adjustment"], &[], &[]))
            }
        }
        "nohup" => inner(skip_options(words, 1, &[], &[], &[])),
        "time" => inner(skip_options(
            words,
            1,
            &["-f", "--format", "-o", "--output"],
            &[
                "-p",
                "--portability",
                "-v",
                "--verbose",
                "-q",
                "--quiet",
                "-a",
                "--append",
            ],
            &[],
        )),
        "stdbuf" => inner(skip_options(
            words,
            1,
            &["-i", "-o", "-e", "--input", "--output", "--error"],
            &[],
            &[],
        )),
        "ionice" => {
            if words[1..]
                .iter()
                .take_while(|w| w.text.starts_with('-'))
                .any(|w| {
                    matches!(
                        w.text.as_str(),
                        "-p" | "-P" | "-u" | "--pid" | "--pgid" | "--uid"
                    )
                })
            {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &["-c", "--class", "-n", "--classdata"],
                &["-t", "--ignore"],
                &[],
            ))
        }
        "command" => {
            if words[1..]
                .iter()
                .take_while(|w| w.text.starts_with('-'))
                .any(|w| w.text.contains('v') || w.text.contains('V'))
            {
                return Step::Stop; // `command -v x` looks x up, runs nothing
            }
            inner(skip_options(words, 1, &[], &["-p"], &[]))
        }
        "exec" => inner(skip_options(words, 1, &["-a"], &["-c", "-l"], &[])),
        "xargs" => match skip_options(
            words,
            1,
            &[
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-E",
                "-I",
                "-L",
                "-n",
                "--max-args",
                "-P",
                "--max-procs",
                "-s",
                "--max-chars",
                "--process-slot-var",
            ],
            &[
                "-0",
                "--null",
                "-r",
                "--no-run-if-empty",
                "-t",
                "--verbose",
                "-p",
                "--interactive",
                "-x",
                "--exit",
                "-o",
                "--open-tty",
            ],
            &["-e", "-i", "-l", "--eof", "--replace", "--max-lines"],
        ) {
            Some(skip) => Step::Inner {
                skip,
                open_ended: true,
            },
            None => Step::Stop,
        },
        "sudo" => {
            if words[1..]
                .iter()
                .take_while(|w| w.text.starts_with('-'))
                .any(|w| {
                    matches!(
                        w.text.as_str(),
                        "-e" | "--edit"
                            | "-l"
                            | "--list"
                            | "-v"
                            | "--validate"
                            | "-K"
                            | "--remove-timestamp"
                            | "-V"
                            | "--version"
                    )
                })
            {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &[
                    "-u",
                    "--user",
                    "-g",
                    "--group",
                    "-p",
                    "--prompt",
                    "-C",
                    "--close-from",
                    "-r",
                    "--role",
                    "-t",
                    "--type",
                    "-U",
                    "--other-user",
                    "-D",
                    "--chdir",
                    "-R",
                    "--chroot",
                    "-T",
                    "--command-timeout",
                    "-h",
                    "--host",
                ],
                &[
                    "-A",
                    "--askpass",
                    "-b",
                    "--background",
                    "-E",
                    "--preserve-env",
                    "-H",
                    "--set-home",
                    "-n",
                    "--non-interactive",
                    "-P",
                    "--preserve-groups",
                    "-S",
                    "--stdin",
                    "-k",
                    "--reset-timestamp",
                    "-B",
                    "--bell",
                    "-N",
                    "--no-update",
                    "-i",
                    "--login",
                    "-s",
                    "--shell",
                ],
                &[],
            ))
        }
        "doas" => inner(skip_options(
            words,
            1,
            &["-u", "-C"],
            &["-n", "-s", "-L"],
            &[],
        )),
        "pkexec" => inner(skip_options(
            words,
            1,
            &["--user"],
            &["--disable-internal-agent", "--keep-cwd"],
            &[],
        )),
        "builtin" => inner(Some(1)),
        "setsid" => inner(skip_options(
            words,
            1,
            &[],
            &["-c", "--ctty", "-f", "--fork", "-w", "--wait"],
            &[],
        )),
        // `watch` hands its arguments, joined, to `sh -c`.
        "watch" => match skip_options(
            words,
            1,
            &["-n", "--interval", "-q", "--equexit"],
            &[
                "-b",
                "--beep",
                "-c",
                "--color",
                "-C",
                "--no-color",
                "-e",
                "--errexit",
                "-g",
                "--chgexit",
                "-p",
                "--precise",
                "-r",
                "--no-rerun",
                "-t",
                "--no-title",
                "-w",
                "--no-wrap",
                "-x",
                "--exec",
            ],
            &["-d", "--differences"],
        ) {
            Some(i) if i < words.len() => joined_payload(&words[i..]),
            _ => Step::Stop,
        },
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "fish" => {
            shell_payload(words)
        }
        "su" => su_payload(words),
        "git" => git_global_options(words),
        "eval" if words.len() > 1 => joined_payload(&words[1..]),
        // `trap 'cmd' SIGNAL…` runs `cmd` on the signal (or at EXIT).
        "trap" => trap_payload(words),
        // `mapfile -C cmd`, `compgen -C cmd`, `complete -C cmd`.
        "mapfile" | "readarray" | "compgen" | "complete" => option_payload(words, 'C'),
        _ => Step::Stop,
    }
}

/// `trap [--] action signal…`: the action is a command string. With one
/// argument, or `-` or an empty action, nothing is set to run.
fn trap_payload(words: &[Word]) -> Step {
    let from = match words.get(1) {
        Some(w) if w.is_keyword("--") => 2,
        Some(w) if w.literal && w.text.starts_with('-') => return Step::Stop,
        _ => 1,
    };
    match words.get(from..) {
        Some([action, _, ..])
            if !(action.literal && (action.text.is_empty() || action.text == "-")) =>
        {
            Step::Payload(action.clone())
        }
        _ => Step::Stop,
    }
}

/// A builtin whose option `-<letter>` takes a command string (`mapfile
/// -C cmd`), given apart or attached (`-Ccmd`, `-tC cmd`). Other options'
/// values are not told apart from options: any word up to `--` that reads
/// as one with the letter counts.
fn option_payload(words: &[Word], letter: char) -> Step {
    for (i, word) in words.iter().enumerate().skip(1) {
        if word.is_keyword("--") {
            return Step::Stop;
        }
        if !word.text.starts_with('-') || word.text.starts_with("--") {
            continue;
        }
        if let Some(at) = word.text[1..].find(letter) {
            let attached = &word.text[at + 2..];
            if !attached.is_empty() {
                return Step::Payload(Word {
                    text: attached.to_string(),
                    ..word.clone()
                });
            }
            return match words.get(i + 1) {
                Some(payload) => Step::Payload(payload.clone()),
                None => Step::Stop,
            };
        }
    }
    Step::Stop
}

/// Words a wrapper joins with spaces and hands to a shell (`eval`, `watch`).
fn joined_payload(args: &[Word]) -> Step {
    Step::Payload(Word {
        text: args
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        literal: args.iter().all(|w| w.literal),
        computed: args.iter().any(|w| w.computed),
        ..Word::default()
    })
}

/// `git [global options] subcommand …`: the global options (`-C dir`,
/// `-c key=value`, `--git-dir=…`, `--no-pager` …) are dropped, so rules on
/// `git push` see `git -C . push` as `git push`. An option git does not
/// know as global (or one that makes it print and exit, `--version`)
/// stops it: then the command is read as written.
fn git_global_options(words: &[Word]) -> Step {
    const VALUED: [&str; 8] = [
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--attr-source",
    ];
    const FLAGS: [&str; 13] = [
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-lazy-fetch",
        "--no-advice",
    ];
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        if VALUED.contains(&t) {
            i += 2;
        } else if FLAGS.contains(&t)
            || t.split_once('=').is_some_and(|(key, _)| {
                (VALUED.contains(&key) && key.starts_with("--")) || key == "--exec-path"
            })
        {
            i += 1;
        } else if t.starts_with('-') {
            return Step::Stop;
        } else {
            break;
        }
    }
    if i == 1 {
        return Step::Stop;
    }
    Step::Drop(1..i)
}

/// `git -c core.pager=… log` runs a program no rule on `git log` names.
fn git_runs_program(words: &[Word]) -> Option<String> {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        let key = match t {
            "-c" | "--config-env" => {
                i += 1;
                words.get(i).map(|w| w.text.as_str())
            }
            _ if t.starts_with("--config-env=") => t.strip_prefix("--config-env="),
            _ if t.starts_with("--exec-path=") => {
                return Some("it points git at other programs (`--exec-path`)".into());
            }
            "-C" | "--git-dir" | "--work-tree" | "--namespace" => {
                i += 2;
                continue;
            }
            _ if t.starts_with('-') => None,
            _ => break,
        };
        let key = key.map(|k| k.split('=').next().unwrap_or(k).to_ascii_lowercase());
        if let Some(key) = key.filter(|k| git_key_runs_program(k)) {
            return Some(format!(
                "it sets the git option `{key}`, which runs a program"
            ));
        }
        i += 1;
    }
    None
}

fn git_key_runs_program(key: &str) -> bool {
    const EXACT: [&str; 13] = [
        "core.pager",
        "core.editor",
        "core.sshcommand",
        "core.fsmonitor",
        "core.hookspath",
        "core.askpass",
        "core.gitproxy",
        "sequence.editor",
        "diff.external",
        "credential.helper",
        "include.path",
        "protocol.allow",
        "uploadpack.packobjectshook",
    ];
    const PREFIXES: [&str; 4] = ["alias.", "pager.", "includeif.", "protocol."];
    const SUFFIXES: [&str; 9] = [
        ".textconv",
        ".command",
        ".driver",
        ".clean",
        ".smudge",
        ".process",
        ".program",
        ".helper",
        ".cmd",
    ];
    EXACT.contains(&key)
        || PREFIXES.iter().any(|p| key.starts_with(p))
        || SUFFIXES.iter().any(|s| key.ends_with(s))
}

/// `env [-i] [-u NAME] [-C DIR] [NAME=value…] [-S 'command'] command…`
fn env(words: &[Word], opaque: &mut Option<String>) -> Step {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        match t {
            "--" => {
                i += 1;
                break;
            }
            "-i" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" | "-" => i += 1,
            "-u" | "--unset" | "-C" | "--chdir" => i += 2,
            "-S" | "--split-string" => {
                return match words.get(i + 1) {
                    Some(payload) => Step::Payload(payload.clone()),
                    None => Step::Stop,
                };
            }
            _ if t.starts_with("--split-string=") || (t.starts_with("-S") && t.len() > 2) => {
                let text = t
                    .strip_prefix("--split-string=")
                    .or_else(|| t.strip_prefix("-S"))
                    .unwrap_or_default();
                return Step::Payload(Word {
                    text: text.to_string(),
                    ..word.clone()
                });
            }
            _ if t.starts_with("--unset=")
                || t.starts_with("--chdir=")
                || ((t.starts_with("-u") || t.starts_with("-C")) && t.len() > 2) =>
            {
                i += 1
            }
            _ if t.starts_with('-') => return Step::Stop,
            _ => break,
        }
    }
    // Then NAME=value pairs (quoted or not: env reads the text).
    while let Some(name) = words.get(i).and_then(|w| text_assignment(&w.text)) {
        if is_sensitive_variable(name) {
            *opaque = Some(format!(
                "it sets {name}, which changes what the command runs"
            ));
        }
        i += 1;
    }
    Step::Inner {
        skip: i,
        open_ended: false,
    }
}

/// `bash [options] -c 'command' [name [args…]]`: the first operand after
/// the options is the command string when `-c` is among them.
fn shell_payload(words: &[Word]) -> Step {
    let mut i = 1;
    let mut has_c = false;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            i += if matches!(long, "rcfile" | "init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
            let flags = &t[1..];
            has_c |= flags.contains('c');
            i += 1;
            if flags.contains('o') || flags.contains('O') {
                i += 1;
            }
            continue;
        }
        break;
    }
    match words.get(i) {
        Some(payload) if has_c => Step::Payload(payload.clone()),
        _ => Step::Stop,
    }
}

/// `su [options] [user] -c 'command'`
fn su_payload(words: &[Word]) -> Step {
    for (i, word) in words.iter().enumerate().skip(1) {
        let t = word.text.as_str();
        if t == "-c" || t == "--command" {
            return words
                .get(i + 1)
                .map_or(Step::Stop, |w| Step::Payload(w.clone()));
        }
        if let Some(text) = t
            .strip_prefix("--command=")
            .or_else(|| t.strip_prefix("-c").filter(|rest| !rest.is_empty()))
        {
            return Step::Payload(Word {
                text: text.to_string(),
                ..word.clone()
            });
        }
    }
    Step::Stop
}

/// The commands `find` runs through `-exec`, `-execdir`, `-ok`, `-okdir`.
fn find_exec_commands(words: &[Word]) -> Vec<Vec<Word>> {
    if words.first().and_then(command_name) != Some("find") {
        return Vec::new();
    }
    let mut commands = Vec::new();
    let mut i = 1;
    while i < words.len() {
        if matches!(
            words[i].text.as_str(),
            "-exec" | "-execdir" | "-ok" | "-okdir"
        ) {
            let start = i + 1;
            let mut end = start;
            while end < words.len() && !matches!(words[end].text.as_str(), ";" | "+") {
                end += 1;
            }
            if end > start {
                commands.push(words[start..end].to_vec());
            }
            i = end;
        }
        i += 1;
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The innermost command of each piece that needs allowing.
    fn commands(src: &str) -> Vec<String> {
        let an = analyse(src);
        assert!(an.malformed.is_empty(), "{src}: {:?}", an.malformed);
        an.pieces
            .iter()
            .filter(|p| !p.transparent && !p.shadow)
            .map(|p| {
                p.command()
                    .iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    fn layers(src: &str) -> Vec<String> {
        let an = analyse(src);
        an.pieces[0]
            .layers
            .iter()
            .map(|l| {
                l.words
                    .iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn wrappers_are_peeled() {
        assert_eq!(commands("timeout 5 rm -rf /"), ["rm -rf /"]);
        assert_eq!(commands("timeout -s KILL --kill-after=2 5s make"), ["make"]);
        assert_eq!(
            commands("FOO=1 nice -n 5 npm run test x"),
            ["npm run test x"]
        );
        assert_eq!(commands("nice -10 make"), ["make"]);
        assert_eq!(commands("nohup make &"), ["make"]);
        assert_eq!(commands("time -p make"), ["make"]);
        assert_eq!(commands("stdbuf -oL -e0 make"), ["make"]);
        assert_eq!(commands("ionice -c3 -n 7 make"), ["make"]);
        assert_eq!(commands("env -i -u HOME A=1 B=2 make"), ["make"]);
        assert_eq!(commands("/usr/bin/env make"), ["make"]);
        assert_eq!(commands("command -p make"), ["make"]);
        assert_eq!(commands("exec -a name make"), ["make"]);
        assert_eq!(commands("sudo -u root -E make"), ["make"]);
        assert_eq!(commands("timeout 5 nice nohup env X=1 make"), ["make"]);
        // Not wrappers when nothing follows, or when they only look up.
        assert_eq!(commands("env"), ["env"]);
        assert_eq!(commands("command -v git"), ["command -v git"]);
        assert_eq!(commands("time"), ["time"]);
        // An option the wrapper does not know: not peeled.
        assert_eq!(
            commands("timeout --bogus 5 make"),
            ["timeout --bogus 5 make"]
        );
    }

    #[test]
    fn every_layer_is_kept() {
        assert_eq!(
            layers("sudo timeout 5 rm x"),
            ["sudo timeout 5 rm x", "timeout 5 rm x", "rm x"]
        );
    }

    #[test]
    fn xargs_is_open_ended() {
        let an = analyse("ls | xargs -n1 -I{} rm -f");
        let rm = &an.pieces[1];
        assert_eq!(rm.command_name(), Some("rm"));
        assert!(rm.layers.last().unwrap().open_ended);
        assert!(!rm.layers[0].open_ended);
    }

    #[test]
    fn payloads_are_split() {
        assert_eq!(commands("bash -c 'rm -rf /'"), ["rm -rf /"]);
        assert_eq!(commands("sh -ec \"ls && rm -rf /\""), ["ls", "rm -rf /"]);
        assert_eq!(commands("bash -o pipefail -c 'a | b' name arg"), ["a", "b"]);
        assert_eq!(commands("eval 'rm -rf /'"), ["rm -rf /"]);
        assert_eq!(commands("eval rm -rf /"), ["rm -rf /"]);
        assert_eq!(commands("env -S 'rm -rf /'"), ["rm -rf /"]);
        assert_eq!(commands("su root -c 'rm -rf /'"), ["rm -rf /"]);
        assert_eq!(
            commands("sudo bash -c \"bash -c 'rm -rf /'\""),
            ["rm -rf /"]
        );
        assert_eq!(
            commands("find . -name x -exec rm -rf {} \\; -print"),
            ["find . -name x -exec rm -rf {} ; -print", "rm -rf {}"]
        );
        // A script file or stdin: the shell itself is the command.
        assert_eq!(commands("bash script.sh"), ["bash script.sh"]);
        // A computed payload cannot be split.
        let an = analyse("bash -c \"$CMD\"");
        assert!(an.pieces[0].computed_payload && !an.pieces[0].transparent);
    }

    #[test]
    fn keywords_and_headers() {
        assert_eq!(commands("if true; then rm -rf /; fi"), ["true", "rm -rf /"]);
        assert_eq!(commands("for f in $(ls); do rm $f; done"), ["ls", "rm $f"]);
        assert_eq!(
            commands("while read l; do echo $l; done < x"),
            ["read l", "echo $l"]
        );
        assert_eq!(commands("! grep x y"), ["grep x y"]);
        assert_eq!(commands("{ ls; }"), ["ls"]);
        assert_eq!(commands("function f { rm x; }"), ["rm x"]);
    }

    #[test]
    fn assignments() {
        assert_eq!(commands("X=1; Y=$(id) ls"), ["id", "ls"]);
        let an = analyse("PATH=/tmp/evil git status");
        assert!(an.pieces[0].opaque.is_some());
        let an = analyse("LD_PRELOAD=x.so ls");
        assert!(an.pieces[0].opaque.is_some());
        let an = analyse("export PATH=.:$PATH; git status");
        assert!(an.pieces[0].opaque.is_some() && an.pieces[1].opaque.is_none());
        let an = analyse("env GIT_SSH_COMMAND=x git fetch");
        assert!(an.pieces[0].opaque.is_some());
        // A sensitive assignment on its own still needs a decision.
        let an = analyse("PATH=/tmp");
        assert_eq!(an.pieces.len(), 1);
        assert!(an.pieces[0].layers.is_empty());
    }

    #[test]
    fn more_wrappers_and_keywords() {
        assert_eq!(commands("builtin echo hi"), ["echo hi"]);
        assert_eq!(commands("setsid -f make"), ["make"]);
        assert_eq!(commands("watch -n 5 'ls && rm x'"), ["ls", "rm x"]);
        assert_eq!(commands("watch -d ls -la"), ["ls -la"]);
        assert_eq!(commands("coproc rm x"), ["rm x"]);
    }

    #[test]
    fn git_options_that_run_programs() {
        for src in [
            "git -c core.pager='rm -rf /' log",
            "git -c alias.x='!sh' x",
            "git -c diff.foo.textconv=evil diff",
            "git -C repo -c core.sshCommand=evil fetch",
            "git --config-env=core.editor=ED commit",
            "git --exec-path=/tmp status",
        ] {
            assert!(analyse(src).pieces[0].opaque.is_some(), "{src}");
        }
        for src in ["git -c user.name=x commit", "git -C repo log", "git log -c"] {
            assert!(analyse(src).pieces[0].opaque.is_none(), "{src}");
        }
    }

    #[test]
    fn git_global_options_are_dropped() {
        for (src, inner) in [
            ("git -C . push origin main", "git push origin main"),
            ("git -c x=y push", "git push"),
            ("git --no-pager push", "git push"),
            ("git -P log -1", "git log -1"),
            ("git --git-dir=.git --work-tree=. push", "git push"),
            ("git --git-dir .git --namespace ns push", "git push"),
            (
                "git -C repo -c user.name=x --bare --literal-pathspecs commit -m x",
                "git commit -m x",
            ),
            ("timeout 5 git -C . push", "git push"),
            ("/usr/bin/git -C . status", "/usr/bin/git status"),
        ] {
            assert_eq!(commands(src), [inner], "{src}");
        }
        // Nothing to drop, nothing after them, or an option git would
        // refuse (or answer without running a subcommand).
        for src in [
            "git push",
            "git -C .",
            "git --version",
            "git --bogus push",
            "git",
        ] {
            assert_eq!(commands(src), [src], "{src}");
        }
        assert_eq!(layers("git -C . push"), ["git -C . push", "git push"]);
        // The options that run a program are still seen.
        let an = analyse("git -c core.pager=evil -C . log");
        assert_eq!(an.pieces[0].command_name(), Some("git"));
        assert!(an.pieces[0].opaque.is_some());
        assert!(
            analyse("git --exec-path=/tmp push").pieces[0]
                .opaque
                .is_some()
        );
    }

    #[test]
    fn redirect_only_pieces_are_kept() {
        let an = analyse("> /dev/sda");
        assert_eq!(an.pieces.len(), 1);
        assert!(an.pieces[0].layers.is_empty());
    }
}
