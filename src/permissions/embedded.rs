//! Options and program texts through which a command runs another
//! program: `tar --to-command='…'`, `git ls-remote --upload-pack='…'`,
//! `rsync -e '…'`, `ssh -o ProxyCommand='…'`, `sed '1e …'`, `awk
//! 'BEGIN{system("…")}'`. A command doing so is never vouched for by a
//! specific allow rule (`bash(tar *)` names tar, not what tar is told to
//! run), and a command string handed to a shell this way is checked as a
//! command of its own, like `find -exec`'s, so deny rules still see it.

use super::command::command_name;
use super::known::Known;
use super::shell::Word;

/// What one command is told to run besides itself.
pub(crate) struct Embedded {
    /// Why no specific allow rule vouches for the command.
    pub why: String,
    /// Command strings it hands to a shell (or runs as a command line).
    pub commands: Vec<Word>,
}

/// The programs `words` (one command, wrappers peeled or not) run through
/// their options or program text.
pub(crate) fn runs_programs(words: &[Word], known: &Known) -> Option<Embedded> {
    let name = words.first().and_then(command_name)?;
    let found = told_to_run(name, words);
    match (found, option_from_expansion(name, words, known)) {
        (Some(found), _) => Some(found),
        (None, Some(why)) => Some(Embedded {
            why,
            commands: Vec::new(),
        }),
        (None, None) => None,
    }
}

/// Where a program file the command line supplies comes from, in words.
fn fed_from(path: &str) -> &'static str {
    if path.starts_with("<(") {
        "a process substitution"
    } else if path == "-" || super::dangerous::is_stdin_path(path) {
        "standard input"
    } else {
        "a file descriptor the command line feeds"
    }
}

/// Commands some of whose options run another program, write where git
/// looks, or delete (`find -delete`): an argument that only takes its
/// text when the command runs may become one of them.
const OPTIONS_RUN_PROGRAMS: &[&str] = &[
    "tar",
    "gtar",
    "sort",
    "split",
    "zip",
    "rsync",
    "ssh",
    "scp",
    "sftp",
    "git",
    "strace",
    "parallel",
    "sed",
    "gsed",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "original-awk",
    "make",
    "gmake",
    "compgen",
    "complete",
    "npx",
    "npm",
    "find",
    "sqlite3",
];

/// Whether an argument of `name` that takes its text only when it runs
/// may become one of its options that run a program.
pub(crate) fn options_may_run(name: &str) -> bool {
    OPTIONS_RUN_PROGRAMS.contains(&name) || option_runner(name).is_some()
}

/// `find` primaries whose value is the next word (a pattern, a name, a
/// number): a computed value there is no primary.
const FIND_VALUED: &[&str] = &[
    "-fprint",
    "-fprint0",
    "-fprintf",
    "-fls",
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-lname",
    "-ilname",
    "-type",
    "-xtype",
    "-newer",
    "-anewer",
    "-cnewer",
    "-samefile",
    "-perm",
    "-user",
    "-group",
    "-uid",
    "-gid",
    "-size",
    "-links",
    "-inum",
    "-atime",
    "-ctime",
    "-mtime",
    "-amin",
    "-cmin",
    "-mmin",
    "-used",
    "-maxdepth",
    "-mindepth",
    "-fstype",
    "-context",
    "-regextype",
    "-printf",
];

/// Whether `words[i]`, a `--`, ends the options. It may instead be the
/// value of the option before it (`gcc -o -- -wrapper …`, `git fetch -o
/// -- --upload-pack=…`: getopt and git hand the next word to an option
/// that takes one, whatever it is), so only a `--` after the command's
/// name, an operand, an option given its value (`--x=y`) or a numeric
/// flag (`-1`) is read as the end of the options.
pub(super) fn ends_options(words: &[Word], i: usize) -> bool {
    // tar's first word may be a cluster of its old-style options, whose
    // values follow it (`tar tf -- …`: `--` is the archive): no `--`
    // of tar's is trusted.
    let tar = words
        .first()
        .and_then(super::command::command_name)
        .is_some_and(|n| n == "tar" || n == "gtar");
    !tar && words.get(i).is_some_and(|w| w.text == "--") && no_value_wanted(words, i)
}

/// Whether `words[i]` comes where no option waits for its value: after the
/// command's name, an operand, an option given its value (`--x=y`) or a
/// numeric flag (`-1`). (Where an option that may take a value comes
/// before it, it may be that value.)
fn no_value_wanted(words: &[Word], i: usize) -> bool {
    let Some(before) = i.checked_sub(1).and_then(|b| words.get(b)) else {
        return true;
    };
    let t = before.text.as_str();
    i == 1
        || !t.starts_with('-')
        || t == "-"
        || t.contains('=')
        || t[1..].chars().all(|c| c.is_ascii_digit())
}

/// An argument of a command in [`OPTIONS_RUN_PROGRAMS`] that may expand
/// into an option when it runs: one starting with an expansion (`"$x"`,
/// `$(…)`) or a glob or brace (`?e1e*` matches a file named `-e1e…`, and
/// GNU tools take options after operands). The reason, when there is one.
fn option_from_expansion(name: &str, words: &[Word], known: &Known) -> Option<String> {
    if !options_may_run(name) {
        return None;
    }
    // The value of an option that takes the next word (`git commit -m
    // "$msg"`, `tar -f "$out"`, `find -name "$x"`; find's `-fprintf` two)
    // is no option, and a value that looks like an option takes none.
    let valued = value_options(name, words);
    // Where git's subcommand is, read once for the whole line.
    let git_subcommand = (name == "git").then(|| git_subcommand_at(words));
    let mut values_left = 0;
    for (i, word) in words.iter().enumerate().skip(1) {
        if values_left > 0 {
            values_left -= 1;
            continue;
        }
        // `find` takes no `--` before its expression.
        if word.literal
            && name != "find"
            && (ends_options(words, i)
                || (name == "git" && word.text == "--end-of-options" && no_value_wanted(words, i)))
        {
            return None;
        }
        // git's global options come before its subcommand, and its
        // subcommand's after.
        let valued = if git_subcommand.is_some_and(|at| i < at) {
            GIT_GLOBAL_VALUED
        } else {
            valued
        };
        if word.literal && valued.contains(&word.text.as_str()) {
            values_left = if name == "find" && word.text == "-fprintf" {
                2
            } else {
                1
            };
            continue;
        }
        // A word of variables the line sets to known texts, none of which
        // starts with `-`, is no option (`f=src/a.rs; sed -n 1p "$f"`).
        let known_operand = known
            .readings(word)
            .is_some_and(|texts| texts.iter().all(|t| !t.starts_with('-')));
        if !known_operand && (may_become_option(word) || option_named_when_run(name, word)) {
            let fix = if name == "git" {
                format!(
                    "put it after `--end-of-options` (a revision) or `--` (a path: `./{}` too)",
                    word.text
                )
            } else {
                format!(
                    "put it after `--`, or spell it so that it cannot start with `-` (a relative path as `./{}`)",
                    word.text
                )
            };
            return Some(format!(
                "`{}` only takes its text when `{name}` runs (an expansion or a glob) and may become one of its options, some of which run another program; {fix}",
                word.text
            ));
        }
    }
    None
}

/// Options of `name` that take the next word as their value, where a
/// computed value is common (a message, an output file, a directory).
fn value_options(name: &str, words: &[Word]) -> &'static [&'static str] {
    match name {
        "git" => git_value_options(words),
        "find" => FIND_VALUED,
        "tar" | "gtar" => &["-f", "--file", "-C", "--directory"],
        "sort" => &["-o", "--output", "-k", "--key", "-t", "--field-separator"],
        "zip" => &["-x", "-i"],
        _ if option_runner(name).is_some_and(|o| o == CC) => {
            &["-o", "-I", "-L", "-l", "-D", "-x", "-MF"]
        }
        _ => &[],
    }
}

/// git's global options that take the next word as their value.
pub(super) const GIT_GLOBAL_VALUED: &[&str] = &[
    "-C",
    "-c",
    "--config-env",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--attr-source",
];

/// Where git's subcommand is among `words`, past its global options.
pub(super) fn git_subcommand_at(words: &[Word]) -> usize {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        if !word.text.starts_with('-') {
            break;
        }
        i += if GIT_GLOBAL_VALUED.contains(&word.text.as_str()) {
            2
        } else {
            1
        };
    }
    i
}

/// git's options that take the next word as their value after its
/// subcommand (`-m` is a message to `commit` and a flag to `log`).
fn git_value_options(words: &[Word]) -> &'static [&'static str] {
    match words.get(git_subcommand_at(words)).map(|w| w.text.as_str()) {
        Some("commit") => &[
            "-m",
            "--message",
            "-F",
            "--file",
            "--author",
            "--date",
            "-C",
            "-c",
            "--reuse-message",
            "--reedit-message",
            "--fixup",
            "--squash",
            "-t",
            "--template",
            "--trailer",
        ],
        Some("tag" | "notes" | "merge") => &["-m", "--message", "-F", "--file"],
        Some("stash") => {
            // `stash list` takes log's options, `stash show` diff's; the
            // rest (`push`, the default, and `store`) a message.
            let sub = git_subcommand_at(words);
            match words.get(sub + 1).map(|w| w.text.as_str()) {
                Some("list") => LOG_VALUED,
                Some("show") => DIFF_VALUED,
                _ => &["-m", "--message"],
            }
        }
        Some("checkout" | "switch") => &["-b", "-B", "--orphan"],
        Some("log" | "show" | "whatchanged" | "rev-list") => LOG_VALUED,
        // `-n` is shortlog's `--numbered`, a flag.
        Some("shortlog") => &LOG_VALUED[2..],
        Some("diff") => DIFF_VALUED,
        _ => &[],
    }
}

/// The options of git's log family that take the next word as their
/// value (the first two, `-n` and `--max-count`, not shortlog's).
const LOG_VALUED: &[&str] = &[
    "-n",
    "--max-count",
    "--since",
    "--until",
    "--after",
    "--before",
    "--grep",
    "--author",
    "--committer",
    "-S",
    "-G",
];

/// The options of `git diff` that take the next word as their value.
const DIFF_VALUED: &[&str] = &["-S", "-G"];

/// A word that starts as an option but whose option only takes its name
/// when the command runs: `find`'s `-exe[c]` or `-$x`, a long option
/// `--$x`, a lone `-$x`, or any with an unquoted expansion, which may
/// split into more words (`-I$x` with `x='a -wrapper …'`).
fn option_named_when_run(name: &str, word: &Word) -> bool {
    if word.literal || !word.text.starts_with('-') {
        return false;
    }
    if name == "find" || (word.computed && !word.quoted) {
        return true;
    }
    let fixed = word
        .text
        .split(['$', '`', '*', '?', '[', '{'])
        .next()
        .unwrap_or_default();
    fixed == "-" || (fixed.starts_with("--") && !fixed.contains('='))
}

/// A word that may expand to text starting with `-`: it starts with an
/// expansion, an unquoted glob or a brace. `$PWD` and `$HOME` are
/// absolute paths.
fn may_become_option(word: &Word) -> bool {
    if word.literal || word.text.starts_with("<(") || word.text.starts_with(">(") {
        return false;
    }
    let absolute = super::known::ABSOLUTE.iter().any(|v| {
        word.text
            .strip_prefix(v)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    });
    // A brace expands only with a `,` or a `..` in it (`{}` is find's).
    let brace = word.text.starts_with('{') && (word.text.contains(',') || word.text.contains(".."));
    !absolute && (brace || word.text.starts_with(['$', '`', '*', '?', '[']))
}

/// Compilers and other tools with options that run or load a program of
/// their caller's choosing, by option (a prefix: `-fplugin` covers
/// `-fplugin=x.so`): `gcc -wrapper 'sh,-c,cmd'`, `rustc -C linker=cmd`,
/// `rg --pre cmd`, `fd -x cmd`, `pandoc --filter cmd`, `man -P cmd`.
/// The C and C++ compilers' options of [`option_runner`].
const CC: &[&str] = &[
    "-wrapper",
    "-fplugin",
    "-fpass-plugin",
    "-B",
    "-specs",
    "--specs",
    "--ld-path",
    "-fuse-ld=/",
    "-fuse-ld=.",
    "-Xclang",
    "-Xlinker",
    "-Wl,",
    "@",
    "-print-prog-name",
];

fn option_runner(name: &str) -> Option<&'static [&'static str]> {
    let cc = matches!(
        name,
        "cc" | "c++" | "cpp" | "gcc" | "g++" | "clang" | "clang++" | "tcc"
    ) || ["gcc-", "g++-", "clang-", "clang++-", "cpp-"]
        .iter()
        .any(|p| name.starts_with(p))
        || ["-gcc", "-g++", "-clang", "-cc", "-c++"]
            .iter()
            .any(|s| name.ends_with(s));
    if cc {
        return Some(CC);
    }
    Some(match name {
        // `-C linker=cmd` as one word or two.
        "rustc" => &[
            "-Clinker",
            "linker=",
            "-Clink-arg",
            "link-arg",
            "-Zcodegen-backend",
            "codegen-backend",
            "@",
        ],
        "sdiff" | "diff3" => &["--diff-program"],
        "wget" => &["--use-askpass"],
        "go" => &["-toolexec", "--toolexec", "-exec", "--exec"],
        "rg" => &["--pre", "--hostname-bin"],
        "fd" | "fdfind" => &["-x", "--exec", "-X", "--exec-batch"],
        "pandoc" => &["--filter", "-F", "--lua-filter", "-L"],
        "man" => &[
            "-P",
            "--pager",
            "-H",
            "--html",
            "--preprocessor",
            "-p",
            // A man-db configuration's `DEFINE` names programs it runs.
            "-C",
            "--config-file",
        ],
        // binutils load a plugin library, and read options from a file
        // named after `@` (`nm @opts`, `--plugin` in it).
        "nm" | "ar" | "ranlib" | "objdump" | "objcopy" | "strip" | "readelf" | "size"
        | "strings" | "addr2line" | "elfedit" | "c++filt" => &["--plugin", "@"],
        // A key file's `#env` section sets `LESSOPEN`.
        "less" => &["--lesskey", "-k"],
        // `-s keys`: a file of typed keys (`:!cmd`).
        _ if VIMS.contains(&name) => &["-c", "--cmd", "+", "-S", "-u", "-U", "-s"],
        _ => return None,
    })
}

/// vim under its names.
pub(crate) const VIMS: &[&str] = &["vim", "vi", "nvim", "view", "ex", "vimdiff", "gvim", "rvim"];

/// Whether less's cluster of flags `flags` (`Sk`, `x4k`) holds the flag
/// `letter`: a flag whose value is text takes the rest of the word
/// (`-pkey` is a pattern, not `-k`), one whose value is a number takes
/// the digits after it and less reads on (`-x4k` is `-x4 -k`).
fn less_cluster_has(flags: &str, letter: &str) -> bool {
    let mut chars = flags.chars().peekable();
    while let Some(c) = chars.next() {
        if letter.starts_with(c) {
            return true;
        }
        if "pPtToO".contains(c) {
            return false;
        }
        if "bhjxyz#".contains(c) {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || matches!(d, '.' | ',' | '-'))
            {
                chars.next();
            }
        }
    }
    false
}

/// The first option of [`option_runner`]'s list that `words` use (before
/// `--`), attached to its value or not.
fn runner_options(name: &str, words: &[Word]) -> Option<Embedded> {
    let options = option_runner(name)?;
    let end = (1..words.len())
        .find(|&i| ends_options(words, i))
        .unwrap_or(words.len());
    // less reads its long options' names in any case (`--LESSKEY-SRC`).
    let less = name == "less";
    let used = words[1..end].iter().find_map(|w| {
        let lowered;
        let t = if less && w.text.starts_with("--") {
            lowered = w.text.to_ascii_lowercase();
            lowered.as_str()
        } else {
            w.text.as_str()
        };
        options.iter().find(|o| {
            if let Some(full) = o.strip_prefix("--") {
                // getopt takes a long option shortened (`--diff-prog=`).
                let given = t
                    .strip_prefix("--")
                    .map(|rest| rest.split('=').next().unwrap_or(rest))
                    .unwrap_or_default();
                // getopt_long takes any prefix no other option shares
                // (`--co=` for `--config-file`), down to one letter.
                t.starts_with(**o) || (!given.is_empty() && full.starts_with(given))
            } else if o.len() > 2 || **o == "@" || **o == "+" {
                t.starts_with(**o)
            } else {
                // A short option, alone or with its value attached;
                // fd's may end a cluster of flags (`-Hx cmd`).
                let letter = &o[1..];
                let cluster = t.starts_with('-') && !t.starts_with("--");
                let flags = t.get(1..).unwrap_or_default();
                t.starts_with(**o)
                    || (matches!(name, "fd" | "fdfind") && cluster && t.ends_with(letter))
                    // less's flags cluster, and the one with a value may
                    // come anywhere in it (`-Sk keys`, `-Skkeys`), up to
                    // a flag whose value the rest is (`-pkey`).
                    || (less && cluster && less_cluster_has(flags, letter))
                    // vim reads its flags one letter at a time (`-Nu
                    // file`, `-Xc cmd`).
                    || (VIMS.contains(&name) && cluster && flags.contains(letter))
            }
        })
    })?;
    Some(Embedded {
        why: format!("its option `{used}` makes `{name}` run or load another program"),
        commands: Vec::new(),
    })
}

/// What [`runs_programs`] finds through the command's own options and
/// program texts.
fn told_to_run(name: &str, words: &[Word]) -> Option<Embedded> {
    match name {
        "tar" | "gtar" => tar(words),
        "sort" => commands_in(
            name,
            // `-y` takes the next word only when it is digits (it is
            // obsolete): a flag here.
            option_values(words, "STko", &["compress-program"], &[], true),
            &["--compress-program"],
        ),
        "split" => commands_in(
            name,
            option_values(words, "abClnt", &["filter"], &[], true),
            &["--filter"],
        ),
        "zip" => zip(words),
        "rsync" => commands_in(
            name,
            option_values(words, "eBfMT@", &["rsh", "rsync-path"], &[], true),
            &["-e", "--rsh", "--rsync-path"],
        ),
        "ssh" | "scp" | "sftp" => ssh(name, words),
        "git" => git(words),
        "strace" => strace(words),
        "parallel" => parallel(words),
        "sed" | "gsed" => sed(words),
        "awk" | "gawk" | "mawk" | "nawk" | "original-awk" => awk(name, words),
        "make" | "gmake" => make(name, words),
        "compgen" | "complete" => word_list(name, words),
        // `npx -c 'cmd'`, `npm exec --call='cmd'`: a command string.
        "npx" => commands_in(
            name,
            option_values(words, "cp", &["call", "package"], &[], true),
            &["-c", "--call"],
        ),
        "npm"
            if words
                .iter()
                .skip(1)
                .find(|w| !w.text.starts_with('-'))
                .is_some_and(|w| matches!(w.text.as_str(), "exec" | "x" | "exe")) =>
        {
            commands_in(
                name,
                option_values(words, "cpw", &["call", "package", "workspace"], &[], true),
                &["-c", "--call"],
            )
        }
        // `source /dev/fd/3 3<<<'…'`: a program the line supplies.
        "source" | "." => words[1..]
            .iter()
            .find(|w| w.text != "--")
            .filter(|w| super::dangerous::is_fed_program(&w.text))
            .map(|w| Embedded {
                why: format!(
                    "`{name}` runs a program read from {}, which no rule has seen",
                    fed_from(&w.text)
                ),
                commands: Vec::new(),
            }),
        "sqlite3" => sqlite3(words),
        _ if option_runner(name).is_some() => runner_options(name, words),
        _ => None,
    }
}

/// sqlite3's options whose value is the next word.
const SQLITE3_VALUED: &[&str] = &[
    "-cmd",
    "-init",
    "-separator",
    "-nullvalue",
    "-newline",
    "-vfs",
    "-maxsize",
    "-mmap",
    "-heap",
    "-lookaside",
    "-pagecache",
    "-escape",
];

/// sqlite3's dot-commands that only show or set how things are shown:
/// named whole (an abbreviation may stand for another command).
const SQLITE3_PLAIN_DOTS: &[&str] = &[
    "tables",
    "schema",
    "fullschema",
    "indexes",
    "indices",
    "databases",
    "dbinfo",
    "dump",
    "headers",
    "header",
    "mode",
    "width",
    "show",
    "help",
    "timer",
    "stats",
    "changes",
    "nullvalue",
    "separator",
    "print",
    "echo",
    "bail",
    "eqp",
    "explain",
    "quit",
    "exit",
];

/// The sqlite3 shell's program text: its SQL and dot-command arguments
/// (after the database), and `-cmd`/`-init`. No rule ending in `*`
/// vouches for a dot-command that runs or reads more than it shows
/// (`.shell` and `.system` in any abbreviation, `.load`, `.read`, a `|`
/// pipe target of `.once`, `.output`, `.import`), nor for SQL that runs a
/// program or loads a library (`edit()`, `load_extension()`), writes a
/// file (`writefile()`, whose path SQL may compute), or names git's
/// configuration (`VACUUM INTO '.git/…'`). Its SQL otherwise is a program
/// text the rule covers, as a rule for `python3 *` covers Python.
fn sqlite3(words: &[Word]) -> Option<Embedded> {
    let ask = |why: String| {
        Some(Embedded {
            why,
            commands: Vec::new(),
        })
    };
    let (options, operands) = sqlite3_arguments(&words[1..]);
    if let Some(option) = options
        .iter()
        .find(|o| matches!(o.1.as_str(), "-cmd" | "-init"))
    {
        return ask(format!(
            "its option `{}` gives sqlite3 commands to run, which may run programs",
            option.0
        ));
    }
    // The first operand is the database; the rest are its commands.
    for word in operands.iter().skip(1) {
        if !word.literal {
            return ask(
                "a sqlite3 command computed when the line runs may be one that runs a program"
                    .into(),
            );
        }
        if let Some(why) = sqlite3_text(&word.text) {
            return ask(why);
        }
    }
    None
}

/// sqlite3's arguments `args` as it reads them, options anywhere: its
/// options (as written, and by name: `--cmd=x` is `-cmd`), and its
/// operands (the database, then SQL and dot-commands). An option's value
/// (`-separator ,`) is neither.
pub(crate) fn sqlite3_arguments(args: &[Word]) -> (Vec<(&str, String)>, Vec<&Word>) {
    let mut options = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let t = word.text.as_str();
        if t.starts_with('-') && t != "-" {
            let name = format!("-{}", t.trim_start_matches('-'));
            let name = name.split('=').next().unwrap_or_default().to_string();
            if SQLITE3_VALUED.contains(&name.as_str()) && !t.contains('=') {
                i += 1;
            }
            options.push((t, name));
        } else {
            operands.push(word);
        }
        i += 1;
    }
    (options, operands)
}

/// Why the sqlite3 command text `text` (one argument) is vouched for by
/// no rule ending in `*`, if it is not.
fn sqlite3_text(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if let Some(dot) = trimmed.strip_prefix('.') {
        let mut args = dot.split_whitespace();
        let name = args.next().unwrap_or_default();
        // Where output goes, or what a table is filled from: a file named
        // as written (`-x`/`-e` open another program; `|cmd` runs one).
        let to_a_file = matches!(name, "output" | "once" | "import")
            && !args.any(|a| a.starts_with('-'))
            && !super::git_reach::mentions_git_configuration(dot);
        if (!SQLITE3_PLAIN_DOTS.contains(&name) && !to_a_file) || dot.contains('|') {
            return Some(format!(
                "its dot-command `.{name}` may run a program, read commands or write a file"
            ));
        }
        return None;
    }
    let sql = sql_code(text);
    for call in ["edit", "load_extension", "writefile"] {
        let mut rest = sql.as_str();
        while let Some(at) = rest.find(call) {
            let after = rest[at + call.len()..].trim_start();
            let starts_word = at == 0
                || !rest[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
            if starts_word && after.starts_with('(') {
                return Some(format!(
                    "its SQL calls `{call}()`, which runs a program, loads a library or writes a file"
                ));
            }
            rest = &rest[at + call.len()..];
        }
    }
    super::git_reach::mentions_git_configuration(text).then(|| {
        "its SQL names git's configuration (a `.git` directory, `.gitconfig`), where it may write"
            .to_string()
    })
}

/// SQL text as the names in it call: lowercased, its string literals
/// (`'…'`) and comments (`-- …`, `/* … */`) taken out, and the quotes of
/// quoted names (`"edit"`, `[edit]`, `` `edit` ``) dropped, so that
/// `edit/**/(` and `"edit"(` read as the call they are.
fn sql_code(text: &str) -> String {
    let chars: Vec<char> = text.to_ascii_lowercase().chars().collect();
    let mut code = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\'' => {
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\'' {
                        if chars.get(i + 1) == Some(&'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                code.push(' ');
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                code.push(' ');
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 1;
                code.push(' ');
            }
            '"' | '[' | ']' | '`' => {}
            c => code.push(c),
        }
        i += 1;
    }
    code
}

/// `compgen -W 'words'` (and `complete -W`) expands its word list when it
/// runs, substitutions and all: `compgen -W '$(rm x)'` runs `rm x`. Such
/// a list is vouched for by no allow rule, and the commands of its
/// substitutions meet the deny rules as commands of their own.
fn word_list(name: &str, words: &[Word]) -> Option<Embedded> {
    let lists = option_values(words, "WAaCFGoPSX", &[], &[], true);
    let mut commands = Vec::new();
    let mut expands = false;
    for (_, list) in lists.iter().filter(|(o, _)| o == "-W") {
        let text = &list.text;
        if !list.literal || text.contains('$') || text.contains('`') {
            expands = true;
        }
        commands.extend(substitutions(text).into_iter().map(|command| Word {
            text: command,
            ..list.clone()
        }));
    }
    expands.then(|| Embedded {
        why: format!(
            "its word list (`-W`) is expanded when `{name}` runs, and a substitution there runs a command"
        ),
        commands,
    })
}

/// The commands of the `$( … )` and backtick substitutions in `text`, as
/// bash would expand it (nested ones inside their outer command).
fn substitutions(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '$' if chars.get(i + 1) == Some(&'(') => {
                let start = i + 2;
                let mut depth = 1usize;
                let mut j = start;
                while j < chars.len() && depth > 0 {
                    match chars[j] {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                let end = if depth == 0 { j - 1 } else { j };
                found.push(chars[start..end].iter().collect());
                i = j;
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|&c| c == '`')
                    .map_or(chars.len(), |n| start + n);
                found.push(chars[start..end].iter().collect());
                i = end + 1;
            }
            _ => i += 1,
        }
    }
    found
}

/// Every option that takes a value, with its value, as getopt reads a
/// command line: `-x v`, `-xv`, `-abx v` (flags, then one option taking a
/// value), `--name=v`, `--name v` (for the `long` names, also
/// abbreviated: `--to-com=…`). `short`: the letters that take a value.
/// Options are returned as `-x` or `--full-name`; other long options are
/// skipped (with their `=value`), and so are those in `exact` (options of
/// the program whose whole name is also the start of one in `long`, such
/// as tar's `--checkpoint`). Stops at `--`; operands are skipped, and with
/// `permute` unset, the first one ends the options.
fn option_values(
    words: &[Word],
    short: &str,
    long: &[&str],
    exact: &[&str],
    permute: bool,
) -> Vec<(String, Word)> {
    let mut found = Vec::new();
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        i += 1;
        if ends_options(words, i - 1) {
            break;
        }
        if let Some(name) = t.strip_prefix("--") {
            let (name, value) = match name.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (name, None),
            };
            let Some(full) = long
                .iter()
                .find(|full| !name.is_empty() && full.starts_with(name))
                .filter(|full| **full == name || !exact.contains(&name))
            else {
                continue;
            };
            let value = match value {
                Some(value) => Some(Word {
                    text: value.to_string(),
                    ..word.clone()
                }),
                None => {
                    i += 1;
                    words.get(i - 1).cloned()
                }
            };
            if let Some(value) = value {
                found.push((format!("--{full}"), value));
            }
            continue;
        }
        let Some(flags) = t.strip_prefix('-').filter(|f| !f.is_empty()) else {
            if permute {
                continue;
            }
            break;
        };
        for (at, c) in flags.char_indices() {
            if !short.contains(c) {
                continue;
            }
            let rest = &flags[at + c.len_utf8()..];
            let value = if rest.is_empty() {
                i += 1;
                words.get(i - 1).cloned()
            } else {
                Some(Word {
                    text: rest.to_string(),
                    ..word.clone()
                })
            };
            if let Some(value) = value {
                found.push((format!("-{c}"), value));
            }
            break;
        }
    }
    found
}

/// The values of `options` among `values` are command strings.
fn commands_in(name: &str, values: Vec<(String, Word)>, options: &[&str]) -> Option<Embedded> {
    let mut named = Vec::new();
    let mut commands = Vec::new();
    for (option, value) in values {
        if options.contains(&option.as_str()) {
            if !named.contains(&option) {
                named.push(option);
            }
            commands.push(value);
        }
    }
    if commands.is_empty() {
        return None;
    }
    Some(Embedded {
        why: format!(
            "its option {} makes `{name}` run another program",
            quoted_list(&named)
        ),
        commands,
    })
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|o| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// GNU tar: `--to-command`, `--checkpoint-action=exec=…`, `-I` /
/// `--use-compress-program`, `-F` / `--info-script` /
/// `--new-volume-script`, `--rsh-command`, `--rmt-command`; also in the
/// old style, where the first word bundles the letters and their values
/// follow in order (`tar cIf 'cmd' a.tar f`).
fn tar(words: &[Word]) -> Option<Embedded> {
    const VALUED: &str = "bCfFgHIKLNTVX";
    let mut values = option_values(
        words,
        VALUED,
        &[
            "to-command",
            "checkpoint-action",
            "use-compress-program",
            "info-script",
            "new-volume-script",
            "rsh-command",
            "rmt-command",
        ],
        &["checkpoint"],
        true,
    );
    if let Some(first) = words.get(1).filter(|w| {
        !w.text.starts_with('-')
            && !w.text.is_empty()
            && w.text.chars().all(|c| c.is_ascii_alphabetic())
    }) {
        let valued = first.text.chars().filter(|c| VALUED.contains(*c));
        for (next, c) in (2..).zip(valued) {
            if let Some(value) = words.get(next) {
                values.push((format!("-{c}"), value.clone()));
            }
        }
    }
    let values = values
        .into_iter()
        .filter_map(|(option, value)| {
            if option == "--checkpoint-action" {
                let command = value.text.strip_prefix("exec=")?.to_string();
                Some((
                    option,
                    Word {
                        text: command,
                        ..value
                    },
                ))
            } else {
                Some((option, value))
            }
        })
        .collect();
    commands_in(
        "tar",
        values,
        &[
            "--to-command",
            "--checkpoint-action",
            "-I",
            "--use-compress-program",
            "-F",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
        ],
    )
}

/// zip `-TT cmd` / `--unzip-command cmd` (the command that tests the
/// archive, run by a shell).
fn zip(words: &[Word]) -> Option<Embedded> {
    let mut commands = Vec::new();
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        i += 1;
        if ends_options(words, i - 1) {
            break;
        }
        let attached = if let Some(long) = t.strip_prefix("--") {
            let (name, value) = long.split_once('=').unwrap_or((long, ""));
            if name.len() < 2 || !"unzip-command".starts_with(name) {
                continue;
            }
            value
        } else if let Some(at) = t.strip_prefix('-').and_then(|f| f.find("TT")) {
            let rest = &t[1 + at + 2..];
            rest.strip_prefix('=').unwrap_or(rest)
        } else {
            continue;
        };
        if attached.is_empty() {
            commands.extend(words.get(i).cloned());
            i += 1;
        } else {
            commands.push(Word {
                text: attached.to_string(),
                ..word.clone()
            });
        }
    }
    (!commands.is_empty()).then(|| Embedded {
        why: "its option `-TT` (`--unzip-command`) makes `zip` run another program".into(),
        commands,
    })
}

/// ssh, scp, sftp: `-o ProxyCommand=…` (or `LocalCommand`,
/// `KnownHostsCommand`, `RemoteCommand`, `ProxyJump`; keys are
/// case-insensitive, `=` or a space before the value), scp's and sftp's
/// `-S program`, sftp's `-D server`.
fn ssh(name: &str, words: &[Word]) -> Option<Embedded> {
    const RUNS: [&str; 5] = [
        "proxycommand",
        "localcommand",
        "knownhostscommand",
        "remotecommand",
        "proxyjump",
    ];
    let valued = if name == "ssh" {
        "BbcDEeFIiJLlmOopQRSWw"
    } else {
        "cDFiJlloPSX"
    };
    let mut commands = Vec::new();
    let mut why = None;
    for (option, value) in option_values(words, valued, &[], &[], true) {
        match option.as_str() {
            "-o" => {
                let text = value.text.trim_start();
                let split = text
                    .find(|c: char| c == '=' || c.is_whitespace())
                    .unwrap_or(text.len());
                let key = text[..split].to_ascii_lowercase();
                if RUNS.contains(&key.as_str()) {
                    let rest = text[split..].trim_start();
                    let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
                    if matches!(
                        key.as_str(),
                        "proxycommand" | "localcommand" | "knownhostscommand"
                    ) {
                        commands.push(Word {
                            text: rest.to_string(),
                            ..value.clone()
                        });
                    }
                    why = Some(format!(
                        "its option `-o {}` makes `{name}` run another program",
                        &text[..split]
                    ));
                }
            }
            "-S" | "-D" if name == "sftp" || (name == "scp" && option == "-S") => {
                commands.push(value);
                why = Some(format!(
                    "its option `{option}` makes `{name}` run another program"
                ));
            }
            // A configuration file of the caller's choosing may say
            // `ProxyCommand`.
            "-F" => {
                why = Some(format!(
                    "its option `-F` gives `{name}` a configuration file, which may make it run \
                     another program (`ProxyCommand`)"
                ));
            }
            _ => {}
        }
    }
    why.map(|why| Embedded { why, commands })
}

/// git options whose value is a program: `--upload-pack`, `--receive-pack`,
/// `--exec` (fetch, pull, push, ls-remote, archive, clone …), clone's
/// `-u`, rebase's and difftool's `-x` (`--exec`, `--extcmd`), grep's `-O`
/// (`--open-files-in-pager`), filter-branch's filters, `bisect run` and
/// `submodule foreach`; and clone's `-c`/`--config`, or `git config`,
/// setting a key that runs a program (or one computed at run time).
fn git(words: &[Word]) -> Option<Embedded> {
    let mut commands = Vec::new();
    let mut named: Vec<String> = Vec::new();
    // An alias whose value starts with `!` is a command string for the
    // shell (`git -c alias.x='!rm y' x`).
    let alias_command = |value: &Word, commands: &mut Vec<Word>| {
        let (key, command) = value.text.split_once('=')?;
        let command = command.strip_prefix('!')?;
        key.to_ascii_lowercase().starts_with("alias.").then(|| {
            commands.push(Word {
                text: command.to_string(),
                ..value.clone()
            })
        })
    };
    // The subcommand, after git's global options.
    let mut i = 1;
    while let Some(word) = words.get(i) {
        match word.text.as_str() {
            "-c" => {
                if let Some(value) = words.get(i + 1) {
                    alias_command(value, &mut commands);
                }
                i += 2
            }
            t if GIT_GLOBAL_VALUED.contains(&t) => i += 2,
            t if t.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let sub = match words.get(i)?.text.as_str() {
        // Its other name.
        "init-db" => "init",
        sub => sub,
    };
    let args = &words[i..];
    let joined = |from: usize| {
        let rest = &args[from.min(args.len())..];
        (!rest.is_empty()).then(|| join_words(rest))
    };
    match sub {
        // Writing a key that runs a program is the lasting form of `-c`
        // (`git config alias.st '!sh x'`, then `git st`).
        "config" => {
            let mut rest = args[1..].iter();
            while let Some(word) = rest.next() {
                let t = word.text.as_str();
                let option = t.split('=').next().unwrap_or(t);
                match t {
                    "-f" | "--file" | "--blob" | "--type" | "--default" | "--comment"
                    | "--value" => {
                        rest.next();
                    }
                    // Options known to change no key's name; any other (a
                    // `--rename-section`, an abbreviation git would expand)
                    // is not read further.
                    _ if t.starts_with('-') => {
                        const KNOWN: [&str; 27] = [
                            "--local",
                            "--global",
                            "--system",
                            "--worktree",
                            "--file",
                            "-f",
                            "--blob",
                            "--type",
                            "--default",
                            "--comment",
                            "--value",
                            "--get",
                            "--get-all",
                            "--get-regexp",
                            "--list",
                            "-l",
                            "--unset",
                            "--unset-all",
                            "--add",
                            "--replace-all",
                            "--bool",
                            "--int",
                            "--path",
                            "--null",
                            "-z",
                            "--name-only",
                            "--show-origin",
                        ];
                        if !KNOWN.contains(&option) && option != "--show-scope" {
                            named.push(format!("config {option}"));
                            break;
                        }
                    }
                    "set" | "get" | "unset" | "list" | "get-regexp" => {}
                    "edit" | "rename-section" | "remove-section" => {
                        named.push(format!("config {t}"));
                        break;
                    }
                    // The key (what follows is its value).
                    _ => {
                        let key = t.to_ascii_lowercase();
                        if !word.literal || super::command::git_key_runs_program(&key) {
                            named.push(format!("config {t}"));
                        }
                        if key.starts_with("alias.")
                            && let Some(value) = rest.next()
                            && let Some(command) = value.text.strip_prefix('!')
                        {
                            commands.push(Word {
                                text: command.to_string(),
                                ..value.clone()
                            });
                        }
                        break;
                    }
                }
            }
        }
        // Subcommands that run a program their arguments or options name:
        // `remote-ext`'s command, `merge-index`'s program, `instaweb
        // --httpd`, `daemon --access-hook`, a credential helper's.
        "remote-ext" | "merge-index" | "instaweb" | "daemon" | "web--browse" | "http-backend"
        | "credential" | "hook" | "for-each-repo" | "shell" => named.push(sub.to_string()),
        "bisect" if args.get(1).is_some_and(|w| w.text == "run") => {
            named.push("bisect run".into());
            commands.extend(joined(2));
        }
        "submodule" => {
            if let Some(at) = args.iter().position(|w| w.text == "foreach") {
                let from = at
                    + 1
                    + args[at + 1..]
                        .iter()
                        .take_while(|w| w.text.starts_with('-'))
                        .count();
                named.push("submodule foreach".into());
                commands.extend(joined(from));
            }
        }
        _ => {}
    }
    let short = match sub {
        "clone" => "ubocj",
        // Those of their own that take a value; `difftool`'s `-C`, `-s`
        // and `-X` are diff flags, `cherry-pick`'s and `revert`'s `-s` is
        // `--signoff`.
        "rebase" => "xsXC",
        "difftool" => "xt",
        "merge" | "pull" => "smX",
        "cherry-pick" | "revert" => "mX",
        "mergetool" => "t",
        "grep" => "efABCm",
        _ => "",
    };
    // A bare repository made where hooks may already wait: git runs them
    // when something is pushed there.
    if sub == "init" && args[1..].iter().any(|w| w.text == "--bare") {
        named.push("init --bare".into());
    }
    let mut long = vec!["upload-pack", "receive-pack", "exec"];
    match sub {
        "difftool" => long.extend(["extcmd", "tool"]),
        "mergetool" => long.push("tool"),
        "grep" => long.push("open-files-in-pager"),
        "send-email" => long.extend([
            "to-cmd",
            "cc-cmd",
            "header-cmd",
            "sendmail-cmd",
            "smtp-server",
        ]),
        "clone" => long.extend(["config", "template", "separate-git-dir"]),
        "init" => long.extend(["template", "separate-git-dir"]),
        "merge" | "rebase" | "cherry-pick" | "revert" | "pull" => long.push("strategy"),
        "filter-branch" => long.extend([
            "setup",
            "env-filter",
            "tree-filter",
            "index-filter",
            "parent-filter",
            "msg-filter",
            "commit-filter",
            "tag-name-filter",
        ]),
        _ => {}
    }
    let mut sub_words = vec![words[0].clone()];
    sub_words.extend(args[1..].iter().cloned());
    // grep's `-O` takes its value attached only (`-Oless`), or none.
    if sub == "grep" {
        let end = (1..args.len())
            .find(|&i| ends_options(args, i))
            .unwrap_or(args.len());
        for w in &args[1..end] {
            let t = w.text.as_str();
            // The long option abbreviated too (`--open=less`).
            let abbreviated = t.strip_prefix("--").and_then(|rest| {
                let (given, value) = rest.split_at(rest.find('=').unwrap_or(rest.len()));
                (given.len() >= 2 && "open-files-in-pager".starts_with(given)).then_some(value)
            });
            let pager = abbreviated.or_else(|| {
                t.strip_prefix('-')
                    .filter(|f| !f.starts_with('-'))
                    .and_then(|f| f.find('O').map(|at| &f[at + 1..]))
            });
            if let Some(pager) = pager {
                named.push("-O".into());
                let pager = pager.strip_prefix('=').unwrap_or(pager);
                if !pager.is_empty() {
                    commands.push(Word {
                        text: pager.to_string(),
                        ..w.clone()
                    });
                }
            }
        }
    }
    // `git-mergetool` takes `--tool…=` with any ending for `--tool=`.
    if matches!(sub, "difftool" | "mergetool")
        && args[1..].iter().any(|w| {
            w.text.split_once('=').is_some_and(|(o, v)| {
                o.starts_with("--tool") && o != "--tool-help" && (!w.literal || v.contains('/'))
            })
        })
    {
        named.push("--tool".into());
    }
    // Options of their own that abbreviate longer ones: `--to` is not
    // `--to-cmd`.
    let exact: &[&str] = match sub {
        "send-email" => &["to", "cc"],
        _ => &[],
    };
    for (option, value) in option_values(&sub_words, short, &long, exact, true) {
        let command = match (sub, option.as_str()) {
            (_, "--upload-pack" | "--receive-pack" | "--exec") => true,
            ("clone", "-u") | ("rebase" | "difftool", "-x") => true,
            ("difftool", "--extcmd") => true,
            ("send-email", "--to-cmd" | "--cc-cmd" | "--header-cmd" | "--sendmail-cmd") => true,
            // A path there is a program to send with.
            ("send-email", "--smtp-server") => {
                named.push(option.clone());
                false
            }
            ("filter-branch", o) if o.ends_with("-filter") || o == "--setup" => true,
            // A strategy or a tool named by a path (`-s /../x.sh` runs
            // `git-merge-/../x.sh`; a tool's file is sourced from its
            // directory), or computed.
            ("merge" | "rebase" | "cherry-pick" | "revert" | "pull", "-s" | "--strategy")
            | ("difftool" | "mergetool", "-t" | "--tool")
                if !value.literal || value.text.contains('/') =>
            {
                named.push(option.clone());
                false
            }
            ("clone", "-c" | "--config") => {
                let key = value.text.split('=').next().unwrap_or_default();
                if super::command::git_key_runs_program(&key.to_ascii_lowercase()) {
                    named.push(format!("{option} {key}"));
                }
                false
            }
            ("clone" | "init", "--template" | "--separate-git-dir") => {
                named.push(option.clone());
                false
            }
            _ => false,
        };
        if command {
            named.push(option);
            commands.push(value);
        }
    }
    if named.is_empty() && !commands.is_empty() {
        named.push("-c alias.…=!…".into());
    }
    if named.is_empty() {
        return None;
    }
    named.dedup();
    Some(Embedded {
        why: format!(
            "{} makes `git {sub}` run another program",
            quoted_list(&named)
        ),
        commands,
    })
}

/// `strace -o '|command'` (or `!command`) pipes its trace to a command.
fn strace(words: &[Word]) -> Option<Embedded> {
    let commands: Vec<Word> = option_values(words, "abeIoOpPsSuUXE", &["output"], &[], false)
        .into_iter()
        .filter(|(option, _)| option == "-o" || option == "--output")
        .filter_map(|(_, value)| {
            let command = value.text.strip_prefix(['|', '!'])?.to_string();
            Some(Word {
                text: command,
                ..value
            })
        })
        .collect();
    (!commands.is_empty()).then(|| Embedded {
        why: "`strace -o '|…'` pipes its output to another program".into(),
        commands,
    })
}

/// GNU parallel joins its command words and runs them through a shell,
/// once per input. It has too many options to tell its command from their
/// values, so every run of words before `:::` that could be the command
/// is checked as one (up to [`MAX_PARALLEL_STARTS`] of them; past that,
/// none); with no command, the inputs themselves are run.
fn parallel(words: &[Word]) -> Option<Embedded> {
    let why = "GNU parallel runs its arguments as commands through a shell, and its options cannot be told from them with confidence";
    let separator = |w: &Word| matches!(w.text.as_str(), ":::" | "::::" | ":::+" | "::::+");
    let end = words.iter().position(separator).unwrap_or(words.len());
    let starts: Vec<usize> = (1..end)
        .filter(|&k| !words[k].text.starts_with('-'))
        .collect();
    // Each start is one more command read in full: past a few, the line
    // is not read for them (it asks all the same).
    if starts.len() > MAX_PARALLEL_STARTS {
        return Some(Embedded {
            why: format!(
                "{why}, and it has more than {MAX_PARALLEL_STARTS} words where its command may start"
            ),
            commands: Vec::new(),
        });
    }
    let mut commands: Vec<Word> = starts
        .into_iter()
        .map(|k| join_words(&words[k..end]))
        .collect();
    if commands.is_empty() {
        commands = words[end.min(words.len())..]
            .iter()
            .filter(|w| !separator(w))
            .cloned()
            .collect();
    }
    Some(Embedded {
        why: why.into(),
        commands,
    })
}

/// The most words of a `parallel` line where its command may start that
/// are each read as one.
const MAX_PARALLEL_STARTS: usize = 32;

/// sed scripts with the `e` command or the `s///e` flag run commands.
/// A script from a file is the file's business (as a Makefile is make's),
/// unless the file is standard input; `--sandbox` turns `e` off.
fn sed(words: &[Word]) -> Option<Embedded> {
    let args = &words[1..];
    if args.iter().any(|w| w.text == "--sandbox") {
        return None;
    }
    let values = option_values(words, SED_VALUES.0, SED_VALUES.1, &[], true);
    let mut scripts: Vec<&Word> = Vec::new();
    let mut given = false;
    for (option, value) in &values {
        match option.as_str() {
            "-e" | "--expression" => {
                given = true;
                scripts.push(value);
            }
            "-f" | "--file" => {
                given = true;
                if super::dangerous::is_fed_program(&value.text) {
                    return Some(Embedded {
                        why: format!(
                            "`sed` reads its script from {}, which no rule has seen",
                            fed_from(&value.text)
                        ),
                        commands: Vec::new(),
                    });
                }
            }
            _ => {}
        }
    }
    if !given {
        // The first operand.
        let mut i = 0;
        while let Some(word) = args.get(i) {
            let t = word.text.as_str();
            if t == "--" {
                scripts.extend(args.get(i + 1));
                break;
            }
            if t.starts_with('-') && t.len() > 1 {
                // `-l N` (`--line N`, `-nl N`) takes the next word.
                i += if option_takes_next(t, SED_VALUES.0, SED_VALUES.1) {
                    2
                } else {
                    1
                };
                continue;
            }
            scripts.push(word);
            break;
        }
    }
    scripts.iter().find_map(|script| {
        let runs = !script.literal || sed_script_runs_commands(&script.text);
        runs.then(|| Embedded {
            why: if script.literal {
                "its sed script runs commands (the `e` command or the `s///e` flag)".into()
            } else {
                "its sed script is only known when it runs (and could run commands)".into()
            },
            commands: Vec::new(),
        })
    })
}

/// Does a sed script use `e` (run a command) or `s///e`? A script this
/// reader cannot follow counts as running commands.
pub(crate) fn sed_script_runs_commands(script: &str) -> bool {
    let s: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_blank = |i: &mut usize| {
        while *i < s.len() && (s[*i].is_whitespace() || s[*i] == ';') {
            *i += 1;
        }
    };
    // Up to (past) an unescaped `delim`; false when it is missing.
    let delimited = |i: &mut usize, delim: char| {
        while *i < s.len() {
            if s[*i] == '\\' {
                *i += 2;
                continue;
            }
            if s[*i] == delim {
                *i += 1;
                return true;
            }
            *i += 1;
        }
        false
    };
    // A regular expression up to (past) its unescaped `delim`. GNU sed
    // reads a bracket expression whole (`s/[/]/x/`: the `/` inside is
    // the expression's), so this does too; one that holds the delimiter
    // or a backslash, or does not end, is read some other way by some
    // sed: false, as for a missing delimiter (the script is not vouched
    // for).
    let regex_delimited = |i: &mut usize, delim: char| {
        while *i < s.len() {
            match s[*i] {
                '\\' => *i += 2,
                c if c == delim => {
                    *i += 1;
                    return true;
                }
                '[' => {
                    *i += 1;
                    if s.get(*i) == Some(&'^') {
                        *i += 1;
                    }
                    if s.get(*i) == Some(&']') {
                        *i += 1;
                    }
                    loop {
                        match s.get(*i) {
                            None => return false,
                            Some(&c) if c == delim || c == '\\' => return false,
                            Some(']') => {
                                *i += 1;
                                break;
                            }
                            // `[:alpha:]`, `[=a=]`, `[.a.]`: to their own end.
                            Some('[') if matches!(s.get(*i + 1), Some(':' | '=' | '.')) => {
                                let kind = s[*i + 1];
                                *i += 2;
                                loop {
                                    match s.get(*i) {
                                        None => return false,
                                        Some(&c) if c == delim || c == '\\' => return false,
                                        Some(&c) if c == kind && s.get(*i + 1) == Some(&']') => {
                                            *i += 2;
                                            break;
                                        }
                                        Some(_) => *i += 1,
                                    }
                                }
                            }
                            Some(_) => *i += 1,
                        }
                    }
                }
                _ => *i += 1,
            }
        }
        false
    };
    let to_line_end = |i: &mut usize| {
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
    };
    loop {
        skip_blank(&mut i);
        if i >= s.len() {
            return false;
        }
        // Addresses: `12`, `$`, `/re/I`, `\%re%`, `first~step`, `addr,+N`.
        for _ in 0..2 {
            match s.get(i) {
                Some(c) if c.is_ascii_digit() => {
                    while i < s.len() && (s[i].is_ascii_digit() || s[i] == '~') {
                        i += 1;
                    }
                }
                Some('$') => i += 1,
                Some('/') => {
                    i += 1;
                    if !regex_delimited(&mut i, '/') {
                        return true;
                    }
                    while i < s.len() && matches!(s[i], 'I' | 'M') {
                        i += 1;
                    }
                }
                Some('\\') => {
                    let Some(&delim) = s.get(i + 1) else {
                        return true;
                    };
                    i += 2;
                    if !regex_delimited(&mut i, delim) {
                        return true;
                    }
                    while i < s.len() && matches!(s[i], 'I' | 'M') {
                        i += 1;
                    }
                }
                _ => {}
            }
            while i < s.len() && s[i] == ' ' {
                i += 1;
            }
            if s.get(i) == Some(&',') {
                i += 1;
                while i < s.len() && s[i] == ' ' {
                    i += 1;
                }
                if matches!(s.get(i), Some('+' | '~')) {
                    i += 1;
                }
                continue;
            }
            break;
        }
        while i < s.len() && (s[i] == '!' || s[i] == ' ') {
            i += 1;
        }
        let Some(&command) = s.get(i) else {
            return true;
        };
        i += 1;
        match command {
            'e' => return true,
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'q' | 'Q' | 'l' | 'L' => {
                while i < s.len() && (s[i].is_ascii_digit() || s[i] == ' ') {
                    i += 1;
                }
            }
            // Text, a file name or a comment: to the end of the line.
            // The text goes on over a line ended by an odd run of
            // backslashes (`\\` is one backslash of text, and ends it).
            'a' | 'i' | 'c' => loop {
                let start = i;
                to_line_end(&mut i);
                let backslashes = s[start..i].iter().rev().take_while(|&&c| c == '\\').count();
                if backslashes % 2 == 1 && i < s.len() {
                    i += 1;
                    continue;
                }
                break;
            },
            '#' | 'r' | 'R' | 'w' | 'W' => to_line_end(&mut i),
            // A label, or `v`'s version: one word (GNU sed 4.9 ends it at
            // a blank too, and reads what follows as the next command).
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < s.len() && matches!(s[i], ' ' | '\t') {
                    i += 1;
                }
                while i < s.len() && !s[i].is_whitespace() && s[i] != ';' && s[i] != '}' {
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&delim) = s.get(i) else {
                    return true;
                };
                if delim == '\n' || delim == '\\' {
                    return true;
                }
                i += 1;
                let pattern = if command == 's' {
                    regex_delimited(&mut i, delim)
                } else {
                    delimited(&mut i, delim)
                };
                if !pattern || !delimited(&mut i, delim) {
                    return true;
                }
                if command == 's' {
                    // Flags, up to the end of the command.
                    while i < s.len() && !matches!(s[i], ';' | '\n' | '}') {
                        match s[i] {
                            'e' => return true,
                            'w' => {
                                to_line_end(&mut i);
                                break;
                            }
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t' => {}
                            c if c.is_ascii_digit() => {}
                            _ => return true,
                        }
                        i += 1;
                    }
                }
            }
            _ => return true,
        }
    }
}

/// awk programs that call `system(…)`, pipe to or from a command (`print |
/// "cmd"`, `"cmd" | getline`, `|&`), or call a function by name (`@f(…)`,
/// which can be `system`). A program from a file is the file's business,
/// unless it is standard input; `--sandbox` (`-S`) turns all of it off,
/// and loading an extension (`-l`, `@load`) counts too.
fn awk(name: &str, words: &[Word]) -> Option<Embedded> {
    let runs = |why: &str| {
        Some(Embedded {
            why: format!("its {name} program {why}"),
            commands: Vec::new(),
        })
    };
    let args = &words[1..];
    if args
        .iter()
        .take_while(|w| w.text != "--")
        .any(|w| w.text == "--sandbox" || w.text == "-S")
    {
        return None;
    }
    let values = option_values(words, AWK_VALUES.0, AWK_VALUES.1, &[], false);
    let mut given = false;
    for (option, value) in &values {
        match option.as_str() {
            "-e" | "--source" => {
                given = true;
                if !value.literal {
                    return runs("is only known when it runs (and could run commands)");
                }
                if awk_program_runs_commands(&value.text) {
                    return runs("runs commands (`system()` or a pipe)");
                }
            }
            "-f" | "--file" | "-E" | "--exec" | "-i" | "--include" => {
                given = true;
                if super::dangerous::is_fed_program(&value.text) {
                    return runs(&format!(
                        "is read from {}, which no rule has seen",
                        fed_from(&value.text)
                    ));
                }
            }
            "-l" | "--load" => return runs("loads an extension library (`-l`)"),
            // gawk and mawk take long options as `-W name[=value]`
            // (abbreviated too: `-Wso=…`, `-W e /dev/stdin`): only those
            // known to load and run nothing are read past.
            "-W" => {
                let name = value.text.split('=').next().unwrap_or_default();
                if !AWK_HARMLESS_W.contains(&name) {
                    return runs(&format!(
                        "takes `-W {name}`, which may name a program or a file to run, or load a library"
                    ));
                }
            }
            _ => {}
        }
    }
    if given {
        return None;
    }
    // The first operand that is not an option or an option's value.
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        // `-F x`, `-v a=b`, `-W opt` take the next word unless attached,
        // and so do long options, abbreviated too (`--field x`, `--as a=b`).
        i += if option_takes_next(t, AWK_VALUES.0, AWK_VALUES.1) {
            2
        } else {
            1
        };
    }
    let program = words.get(i)?;
    if !program.literal {
        return runs("is only known when it runs (and could run commands)");
    }
    if awk_program_runs_commands(&program.text) {
        return runs("runs commands (`system()` or a pipe)");
    }
    None
}

/// sed's options that take a value: the letters, and the long names.
const SED_VALUES: (&str, &[&str]) = ("efl", &["expression", "file", "line-length"]);

/// awk's options that take a value: the letters, and gawk's long names.
const AWK_VALUES: (&str, &[&str]) = (
    "fvFeEilW",
    &[
        "file",
        "source",
        "exec",
        "include",
        "load",
        "assign",
        "field-separator",
    ],
);

/// Whether option word `t` takes the next word as its value: a cluster of
/// `short` letters ending in one that takes a value (`-nl` then `5`), or
/// a long option without `=` that is, or abbreviates (as `getopt_long`
/// takes it), one of `long`.
fn option_takes_next(t: &str, short: &str, long: &[&str]) -> bool {
    if let Some(name) = t.strip_prefix("--") {
        return !name.is_empty() && !name.contains('=') && long.iter().any(|f| f.starts_with(name));
    }
    let flags = t.strip_prefix('-').unwrap_or_default();
    flags
        .char_indices()
        .find(|(_, c)| short.contains(*c))
        .is_some_and(|(at, c)| at + c.len_utf8() == flags.len())
}

/// `-W` options (gawk's and mawk's long options) that read, load and run
/// nothing besides the program: the others are judged like `--source`,
/// `--file`, `--exec`, `--include`, `--load` or `--profile`.
const AWK_HARMLESS_W: &[&str] = &[
    "version",
    "help",
    "usage",
    "copyright",
    "posix",
    "traditional",
    "compat",
    "lint",
    "re-interval",
    "characters-as-bytes",
    "non-decimal-data",
    "use-lc-numeric",
    "optimize",
    "no-optimize",
    "sandbox",
    "interactive",
    "posix_space",
];

/// `system(`, a `|` that is no `||` in a program that prints or reads
/// lines (`print | cmd`, `cmd | getline`), `|&`, `@name(` or `@load`.
/// Strings and regular expressions are not told apart from code: a `|`
/// inside them counts too when the program prints.
pub(crate) fn awk_program_runs_commands(program: &str) -> bool {
    // Blanks go, and so do backslashes before them: awk continues a line
    // ended by one (`system\⏎("id")`).
    let chars: Vec<char> = program.chars().collect();
    let compact: String = chars
        .iter()
        .enumerate()
        .filter(|&(at, c)| {
            !(c.is_whitespace()
                || *c == '\\' && chars.get(at + 1).is_some_and(|n| n.is_whitespace()))
        })
        .map(|(_, c)| *c)
        .collect();
    if compact.contains("system(") || compact.contains("|&") || compact.contains("@load") {
        return true;
    }
    // `@include "/dev/stdin"`: a program read from standard input, which
    // no rule has seen (a file in the workspace is its own business).
    let includes_stdin = compact.match_indices("@include\"").any(|(at, found)| {
        let path = &compact[at + found.len()..];
        let path = path.split('"').next().unwrap_or_default();
        super::dangerous::is_fed_program(path)
    });
    if includes_stdin {
        return true;
    }
    let chars: Vec<char> = compact.chars().collect();
    let indirect_call = chars.windows(2).enumerate().any(|(at, w)| {
        w[0] == '@' && (w[1].is_ascii_alphabetic() || w[1] == '_') && {
            let name_end = chars[at + 1..]
                .iter()
                .position(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
                .map(|n| at + 1 + n);
            name_end.is_some_and(|end| chars[end] == '(')
        }
    });
    if indirect_call {
        return true;
    }
    let lone_pipe = chars.iter().enumerate().any(|(at, &c)| {
        c == '|' && chars.get(at + 1) != Some(&'|') && (at == 0 || chars[at - 1] != '|')
    });
    lone_pipe && (program.contains("print") || program.contains("getline"))
}

/// make runs what its makefiles say: a makefile in the workspace is its
/// business, as `package.json` is npm's. Makefile text on the command line
/// (`--eval`, `-E`), a makefile read from standard input, and variables
/// set on the command line (`make CC='…'` replaces what recipes run) are
/// not vouched for by a specific allow rule.
fn make(name: &str, words: &[Word]) -> Option<Embedded> {
    let why = |what: &str| {
        Some(Embedded {
            why: format!("{what}, which can make `{name}` run any command"),
            commands: Vec::new(),
        })
    };
    let values = option_values(
        words,
        "CEfIoW",
        &[
            "eval",
            "file",
            "makefile",
            "directory",
            "include-dir",
            "old-file",
            "assume-old",
            "what-if",
            "new-file",
            "assume-new",
        ],
        &[],
        true,
    );
    for (option, value) in &values {
        match option.as_str() {
            "-E" | "--eval" => return why("it gives makefile text on the command line (`--eval`)"),
            "-f" | "--file" | "--makefile" if super::dangerous::is_fed_program(&value.text) => {
                return why("it reads a makefile from standard input");
            }
            _ => {}
        }
    }
    // Words that are options' values are no assignments: as many of each
    // text as the options took (`-o CC=x CC=x` sets CC once).
    let mut value_texts: Vec<&str> = values.iter().map(|(_, v)| v.text.as_str()).collect();
    let assignment = words[1..].iter().find(|w| {
        if w.text.starts_with('-') {
            return false;
        }
        if let Some(at) = value_texts.iter().position(|v| *v == w.text) {
            value_texts.swap_remove(at);
            return false;
        }
        w.text
            .split_once('=')
            .is_some_and(|(n, _)| !n.is_empty() && !n.contains('/'))
    });
    if let Some(assignment) = assignment {
        let variable = assignment.text.split('=').next().unwrap_or_default();
        let variable = variable.trim_end_matches([':', '+', '?', '!']);
        return why(&format!(
            "it sets the make variable `{variable}` on the command line"
        ));
    }
    None
}

/// Words run as one command line: their texts joined by spaces, literal
/// only if every word is, computed if any is.
fn join_words(part: &[Word]) -> Word {
    Word {
        text: part
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        literal: part.iter().all(|w| w.literal),
        computed: part.iter().any(|w| w.computed),
        ..Word::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sed_scripts_that_run_commands() {
        for script in [
            "1e touch x",
            "e",
            "s/a/b/e",
            "s|a|b|ge",
            "s/a/b/;e id",
            "/x/,/y/{e id\n}",
            "$!e id",
            "1~2e id",
            "0,/x/e id",
            "s/a/b/x",
            "s/a",
            "\\%x%e id",
            "k",
        ] {
            assert!(sed_script_runs_commands(script), "{script}");
        }
        for script in [
            "1,5p",
            "s/a/b/g",
            "s/e/f/2p",
            "s/x/y/w e",
            "/^#/d;/^$/d",
            "$!N;s/\\n/ /;P;D",
            "y/abc/xyz/",
            "1i header; e id",
            "a\\\ntext e\\\nmore",
            ":a;N;$!ba;s/\\n/ /g",
            "/s/!d",
            "# e id\np",
            "",
        ] {
            assert!(!sed_script_runs_commands(script), "{script}");
        }
    }

    #[test]
    fn awk_programs_that_run_commands() {
        for program in [
            "BEGIN{system(\"id\")}",
            "{ system ( $0 ) }",
            "{print | \"sh\"}",
            "BEGIN{\"id\" | getline}",
            "BEGIN{print \"id\" |& \"sh\"}",
            "BEGIN{f=\"system\"; @f(\"id\")}",
            "@load \"filefuncs\"",
            "BEGIN{system\\\n(\"id\")}",
            "BEGIN{system \\\n (\"id\")}",
            "BEGIN{f=\"system\"; @f\\\n(\"id\")}",
            "@include \"/dev/stdin\"",
            "@include \"/dev/fd/0\"",
        ] {
            assert!(awk_program_runs_commands(program), "{program}");
        }
        for program in [
            "{print $1}",
            "/a|b/",
            "$1 || $2 {n++} END{print n}",
            "{print > \"out.txt\"}",
            "{getline line < \"f\"; print line}",
        ] {
            assert!(!awk_program_runs_commands(program), "{program}");
        }
    }
}
