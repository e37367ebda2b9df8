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
    /// A shell builtin that runs nothing and writes no file (`read`,
    /// `break`, `true` …, see [`INERT_BUILTINS`]), unwrapped, with
    /// nothing doubtful about it: no allow rule needs to name it. Deny
    /// and ask rules still see it.
    pub inert: bool,
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
    /// Variables the line makes arrays (`a=(…)`, `declare -a a`, `read -a
    /// a`, `mapfile a`), wherever it does.
    arrays: std::collections::HashSet<String>,
    /// Pieces (by index) whose `declare`, `typeset` or `local` gives a
    /// variable a value bash reads again as an array's elements if the
    /// variable is an array, with the variable's name.
    redeclared: Vec<(usize, String)>,
    /// The variables whose every value the line spells out.
    pub known: super::known::Known,
    /// Somewhere the line exports variables to the commands it runs
    /// (`export`, `declare -x`, `set -a`): make takes each as a make
    /// variable.
    exports: bool,
    /// How many commands run through others were read ([`Analysis::nest`]).
    nested: usize,
}

/// The most commands a line may run through others (a shell's payload,
/// a command an option or program text runs, a guessed command, a `find
/// -exec`'s) that are read: each is read in full, and may hold more, so
/// without a bound a few hundred bytes of `parallel parallel … w` were
/// read billions of times. A line past it is not checked further.
const MAX_NESTED_COMMANDS: usize = 2_048;

impl Analysis {
    /// Whether one more command run through another may be read; past
    /// [`MAX_NESTED_COMMANDS`] the line is malformed (said once).
    fn nest(&mut self) -> bool {
        self.nested += 1;
        if self.nested > MAX_NESTED_COMMANDS {
            if self.nested == MAX_NESTED_COMMANDS + 1 {
                self.malformed.push(
                    "the command runs more commands through others than can be checked".into(),
                );
            }
            return false;
        }
        true
    }
}

pub(crate) fn analyse(command: &str) -> Analysis {
    let first = analyse_exporting(command, false);
    // An export inside a shell's command string (`bash -c 'export X=…;
    // make test'`) or a shell's own `-a` is only seen once the line is
    // split: then the line is read again knowing it exports.
    let layers = || first.pieces.iter().flat_map(|p| &p.layers);
    let mut analysis = if !first.exports && layers().any(|l| exports_variables(&l.words)) {
        analyse_exporting(command, true)
    } else {
        first
    };
    if let Some(why) = analysis
        .pieces
        .iter()
        .flat_map(|p| &p.layers)
        .find_map(|l| keyword_mode(&l.words))
    {
        analysis.malformed.push(why);
    }
    analysis
}

/// `set -k` (`-o keyword`), or a shell started with it: every `NAME=value`
/// word of a later command, wherever it stands, is an assignment to that
/// command's environment (`less f LESSOPEN='|cmd'`), not the argument
/// the line seems to give.
fn keyword_mode(words: &[Word]) -> Option<String> {
    let name = words.first().and_then(command_name)?;
    if name != "set" && !super::dangerous::SHELLS.contains(&name) {
        return None;
    }
    shell_option_set(&words[1..], name == "set", 'k', "keyword").then(|| {
            format!(
                "`{name}` with `-k` makes every NAME=value word of a later command an assignment to its environment"
            )
        })
}

/// Whether a shell's (or, `all`, `set`'s) options `args` set the one
/// spelled `-FLAG` (alone or in a cluster) or `-o LONG`.
fn shell_option_set<'w>(
    args: impl IntoIterator<Item = &'w Word>,
    all: bool,
    flag: char,
    long: &str,
) -> bool {
    let args: Vec<&str> = args.into_iter().map(|w| w.text.as_str()).collect();
    shell_options(&args, all)
        .into_iter()
        .any(|(flags, name)| flags.contains(flag) || name == Some(long))
}

/// The options of a shell or of `set` in `args`, until the first operand
/// (`set` reads them all): each as its flag letters (`-ac` → `ac`) or,
/// for `-o NAME`, the name.
fn shell_options<'w>(args: &[&'w str], all: bool) -> Vec<(&'w str, Option<&'w str>)> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(&t) = args.get(i) {
        i += 1;
        if t == "-o" || t == "+o" {
            if t == "-o" {
                found.push(("", args.get(i).copied()));
            }
            i += 1;
            continue;
        }
        // bash's `-O shopt_option` takes a name too.
        if t == "-O" || t == "+O" {
            i += 1;
            continue;
        }
        if t == "--" || t == "-" {
            break;
        }
        match t.strip_prefix('-') {
            Some(flags) if !flags.starts_with('-') => found.push((flags, None)),
            Some(_) => {}
            None if t.starts_with('+') || all => {}
            None => break,
        }
    }
    found
}

fn analyse_exporting(command: &str, exports: bool) -> Analysis {
    let mut next_pipeline = 0;
    let lexed = shell::lex(command, &mut next_pipeline, 0);
    let mut analysis = Analysis {
        known: super::known::Known::of_lexed(command, &lexed),
        exports: exports || lexed.pieces.iter().any(|p| exports_variables(&p.words)),
        ..Analysis::default()
    };
    expand_lexed(command, lexed, 0, false, &mut analysis, &mut next_pipeline);
    // Told only once the whole line is read: a function may assign to an
    // array the line makes later. Any name the line writes with a
    // subscript may be an array (`a[0]=1`, `printf -v 'b[0]'`, `read
    // 'c[1]'`), and so may a named coprocess's.
    analysis.arrays.extend(subscripted_names(command));
    for (index, name) in std::mem::take(&mut analysis.redeclared) {
        if (analysis.arrays.contains(&name) || BASH_ARRAYS.contains(&name.as_str()))
            && let Some(piece) = analysis.pieces.get_mut(index)
            && piece.opaque.is_none()
        {
            piece.opaque = Some(REPARSES.to_string());
        }
    }
    analysis
}

/// Every name in `text` followed by `[`, and every word after `coproc`:
/// names the line may make arrays (more than it does, which only makes
/// a declaration of them ask).
fn subscripted_names(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let is_name_char = |c: char| c == '_' || c.is_ascii_alphanumeric();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_name_char(chars[i]) || (i > 0 && is_name_char(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        if chars.get(i) == Some(&'[') && shell::is_name(&name) {
            names.push(name);
        } else if name == "coproc" {
            // The next word, read no further than its end.
            let from = (i..chars.len())
                .find(|&j| !chars[j].is_whitespace())
                .unwrap_or(chars.len());
            let to = (from..chars.len())
                .find(|&j| chars[j].is_whitespace())
                .unwrap_or(chars.len());
            let next: String = chars[from..to].iter().collect();
            if shell::is_name(&next) {
                names.push(next);
            }
        }
    }
    names
}

/// Why a declaration whose value bash reads again as an array's elements
/// is not vouched for by an allow rule.
const REPARSES: &str = "it gives an array's elements to `declare` (or `typeset`, `local`, `export -a`, `readonly -a`) as one word computed or quoted, which bash reads again as `( … )`, running the substitutions in it and evaluating its subscripts; write the elements unquoted (`a=(…)`)";

/// bash's own arrays: a value given to one of them by `declare` is read
/// as its elements.
const BASH_ARRAYS: [&str; 13] = [
    "BASH_ARGC",
    "BASH_ARGV",
    "BASH_LINENO",
    "BASH_SOURCE",
    "BASH_VERSINFO",
    "BASH_REMATCH",
    "DIRSTACK",
    "FUNCNAME",
    "GROUPS",
    "PIPESTATUS",
    "COMP_WORDS",
    "COPROC",
    "MAPFILE",
];

/// What a declaration builtin (`declare`, `typeset`, `local`, `export`,
/// `readonly`) does with array values: the variables it makes arrays,
/// and whether it runs code through them. bash reads a value given as one
/// word (quoted or computed: `declare -a 'a=($(cmd))'`, `declare -a
/// a=$x`) again as `( … )` when the option `-a` or `-A` is given, or, for
/// `declare`, `typeset` and `local`, when the variable is an array
/// already; and it evaluates an indexed array's subscripts (`a=([x]=1)`
/// with `x='a[$(cmd)]'` runs cmd). Returns (arrays made, why it runs
/// code, names whose value is read again if they are arrays).
fn declared_arrays(words: &[Word]) -> (Vec<String>, Option<String>, Vec<String>) {
    let mut arrays = Vec::new();
    let mut why = None;
    let mut if_array = Vec::new();
    let Some(name) = words.first().and_then(command_name) else {
        return (arrays, why, if_array);
    };
    let family = matches!(
        name,
        "declare" | "typeset" | "local" | "export" | "readonly"
    );
    if !family {
        if matches!(name, "read" | "mapfile" | "readarray") {
            // Every name it is given may be its array (`read -ra a`).
            arrays.extend(
                words[1..]
                    .iter()
                    .filter(|w| !w.text.starts_with('-') && shell::is_name(&w.text))
                    .map(|w| w.text.clone()),
            );
        }
        return (arrays, why, if_array);
    }
    let mut options_end = words.len();
    let mut array_option = false;
    let mut associative = false;
    for (i, word) in words.iter().enumerate().skip(1) {
        if word.text == "--" {
            options_end = i;
            break;
        }
        if word.text.starts_with('-') && !word.text.contains('=') {
            array_option |= word.text.contains(['a', 'A']);
            associative |= word.text.contains('A');
        }
    }
    let rereads = array_option || matches!(name, "declare" | "typeset" | "local");
    for (i, word) in words.iter().enumerate().skip(1) {
        if i < options_end && word.text.starts_with(['-', '+']) && !word.text.contains('=') {
            continue;
        }
        if i == options_end {
            continue;
        }
        let (left, value) = match word.text.split_once('=') {
            Some((left, value)) => (left, Some(value)),
            None => (word.text.as_str(), None),
        };
        let variable = left.strip_suffix('+').unwrap_or(left);
        let variable = variable.split_once('[').map_or(variable, |(n, _)| n);
        if !shell::is_name(variable) {
            continue;
        }
        if array_option {
            arrays.push(variable.to_string());
        }
        let Some(value) = value else { continue };
        let compound = value.starts_with('(');
        if compound {
            arrays.push(variable.to_string());
        }
        if compound && !word.quoted {
            // `a=( … )` read by the shell: its substitutions are pieces of
            // their own; an indexed array's subscripts are evaluated (an
            // associative array's keys are strings).
            if !associative && subscripts_evaluate(value) {
                why = Some(EVALUATES.to_string());
            }
            continue;
        }
        let code = !word.literal || value.contains(['$', '`', '[']);
        if !(rereads && code) {
            continue;
        }
        if array_option || compound && !matches!(name, "export" | "readonly") {
            why = Some(REPARSES.to_string());
        } else if !matches!(name, "export" | "readonly") {
            if_array.push(variable.to_string());
        }
    }
    (arrays, why, if_array)
}

/// Whether a compound value `( … )` has a subscript that reads a variable
/// (`[x]=1`, `[$i+1]=1`).
fn subscripts_evaluate(value: &str) -> bool {
    let chars: Vec<char> = value.chars().collect();
    if shell::nests_too_deeply(&chars) {
        return true;
    }
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '[' {
            let inside = shell::enclosed(&chars[i..], '[', ']');
            let after = i + inside.len() + 2;
            if chars.get(after) == Some(&'=') && shell::names_a_variable(inside) {
                return true;
            }
            i = after.max(i + 1);
            continue;
        }
        i += 1;
    }
    false
}

fn expand(src: &str, depth: usize, shadow: bool, an: &mut Analysis, next_pipeline: &mut usize) {
    if depth > MAX_DEPTH {
        an.malformed
            .push("commands are nested too deeply to be checked".into());
        return;
    }
    let lexed = shell::lex(src, next_pipeline, depth);
    expand_lexed(src, lexed, depth, shadow, an, next_pipeline);
}

/// [`expand`], `src` lexed already.
fn expand_lexed(
    src: &str,
    lexed: shell::Lexed,
    depth: usize,
    shadow: bool,
    an: &mut Analysis,
    next_pipeline: &mut usize,
) {
    if super::dangerous::is_fork_bomb(src) {
        an.fork_bombs.push(src.trim().to_string());
    }
    if !shadow {
        an.malformed.extend(lexed.errors);
        an.pipes |= lexed.pipes;
    }
    for mut raw in lexed.pieces {
        raw.shadow |= shadow;
        normalise(raw, depth, an, next_pipeline, None);
    }
}

/// Whether `words` export variables to the commands run after them:
/// `export`, `declare`/`typeset`/`local` with `-x` (or an option computed
/// when it runs), `set -a` / `set -o allexport`.
fn exports_variables(words: &[Word]) -> bool {
    let words: Vec<&Word> = words
        .iter()
        .skip_while(|w| w.assignment)
        .filter(|w| !(w.is_keyword("do") || w.is_keyword("then") || w.is_keyword("{")))
        .collect();
    let Some(name) = words.first().map(|w| w.text.as_str()) else {
        return false;
    };
    let options = || {
        words[1..]
            .iter()
            .filter(|w| w.text.starts_with(['-', '+']) || !w.literal)
    };
    match name {
        "export" => true,
        "declare" | "typeset" | "local" => {
            options().any(|w| !w.literal || (w.text.starts_with('-') && w.text.contains('x')))
        }
        // A shell started with `-a` (`-o allexport`) exports every
        // variable its command string sets.
        _ if super::dangerous::SHELLS.contains(&name) => {
            shell_option_set(words[1..].iter().copied(), false, 'a', "allexport")
        }
        "set" => words[1..].iter().any(|w| {
            !w.literal
                || w.text == "allexport"
                || (w.text.starts_with('-') && !w.text.starts_with("--") && w.text.contains('a'))
        }),
        _ => false,
    }
}

/// Shell builtins that run nothing and write no file: a line's `while
/// read -r f`, `break`, `true` or a condition (`[ -f x ] &&`, `if test
/// -d src`, `[[ -n $x ]]`) needs no allow rule of its own. (`read` of a
/// variable that changes what runs makes its piece doubtful, as does an
/// expansion that evaluates or assigns one, `test -v 'a[$(…)]'` or `[[ $x
/// -eq 1 ]]`; substitutions in their words are pieces of their own.)
const INERT_BUILTINS: &[&str] = &[
    "read", "break", "continue", "true", "false", ":", "shift", "return", "exit", "test", "[", "[[",
];

/// `export NAME=value …` with no option and every word as written: it
/// sets what `NAME=value cmd` would, which a rule for `cmd` vouches for
/// already (a variable that changes what runs makes the piece doubtful
/// either way), so it needs no allow rule of its own beside other
/// commands.
fn plain_export(words: &[Word]) -> bool {
    words
        .first()
        .is_some_and(|w| w.literal && w.text == "export")
        && words.len() > 1
        && words[1..].iter().all(|w| {
            w.literal
                && !w.text.starts_with(['-', '+'])
                && shell::is_name(w.text.split('=').next().unwrap_or_default())
        })
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
    // An operand that reads a variable (or is computed): `3 > 2` reads none.
    let arithmetic_operand =
        |w: &Word| !w.literal || shell::names_a_variable(&w.text.chars().collect::<Vec<_>>());
    match name {
        "let" => args.iter().any(arithmetic_operand),
        "declare" | "typeset" | "local"
            if args.iter().any(|w| {
                (w.text.starts_with(['-', '+']) && w.text.contains('i')) || may_be_option(w)
            }) =>
        {
            true
        }
        "[[" => {
            args.windows(3).any(|w| {
                matches!(
                    w[1].text.as_str(),
                    "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge"
                ) && (arithmetic_operand(&w[0]) || arithmetic_operand(&w[2]))
            })
                // `[[ -v a[x] ]]`: the subscript is evaluated; a name
                // computed at run time may be such an element.
                || args.windows(2).any(|w| {
                    w[0].text == "-v" && (reads_subscript(&w[1].text) || w[1].computed)
                })
        }
        "test" | "[" | "printf" | "wait"
            if args.windows(2).any(|w| {
                let names = if name == "wait" { "-p" } else { "-v" };
                w[0].text == names && w[1].computed
            }) =>
        {
            true
        }
        // A variable's name computed at run time may be an array element
        // whose subscript bash evaluates (`x='a[$(…)]'; unset "$x"`).
        "declare" | "typeset" | "local" | "export" | "readonly" | "unset" | "read" | "mapfile"
        | "readarray"
            if args.iter().any(|w| {
                !w.text.starts_with(['-', '+'])
                    && w.text
                        .split('=')
                        .next()
                        .is_some_and(|name| name.contains(['$', '`']))
            }) =>
        {
            true
        }
        "declare" | "typeset" | "local" | "export" | "readonly" | "unset" | "read" | "printf"
        | "mapfile" | "readarray" | "test" | "[" | "wait" => args.iter().any(|w| {
            // A name may also come attached to its option: `printf
            // -v'a[$x]'`, `read -ua[$x]`.
            let attached = w
                .text
                .strip_prefix('-')
                .and_then(|o| o.get(o.chars().next()?.len_utf8()..));
            [Some(w.text.as_str()), attached]
                .into_iter()
                .flatten()
                .any(|text| reads_subscript(text.split_once('=').map_or(text, |(n, _)| n)))
        }),
        _ => false,
    }
}

/// `name[subscript]` whose subscript reads a variable or expands
/// something (`a[x]`, `a[$i]`), which bash evaluates.
fn reads_subscript(text: &str) -> bool {
    text.split_once('[').is_some_and(|(name, subscript)| {
        shell::is_name(name)
            && subscript.ends_with(']')
            && subscript[..subscript.len() - 1]
                .chars()
                .any(|c| c == '$' || c == '`' || c == '_' || c.is_ascii_alphabetic())
    })
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
    /// A wrapper whose options cannot be read with confidence (one it does
    /// not know, perhaps an abbreviation, or a tool with too many to list):
    /// the command it runs starts somewhere at or after word `from`.
    Unreadable { from: usize, open_ended: bool },
    /// Not a wrapper (or a wrapper used without a command).
    Stop,
}

/// How many guesses at where an unreadable wrapper's command starts are
/// checked before the command is declared unreadable.
const MAX_GUESSES: usize = 32;

/// `guess`: `Some(open_ended)` when the piece is one guess at where an
/// unreadable wrapper's command starts (see [`Step::Unreadable`]); a
/// guess makes no guesses of its own, since its own later words are
/// guesses already.
fn normalise(
    raw: RawPiece,
    depth: usize,
    an: &mut Analysis,
    next_pipeline: &mut usize,
    guess: Option<bool>,
) {
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
    let mut opaque = (words
        .iter()
        .chain(redirects.iter().map(|r| &r.target))
        .any(shell::evaluates_code)
        || redirects.iter().any(Redirect::body_evaluates_code))
    .then(|| EVALUATES.to_string());
    // `${NAME:=value}` assigns NAME where the word expands.
    if let Some(why) = words
        .iter()
        .chain(redirects.iter().map(|r| &r.target))
        .flat_map(shell::assigned_by_expansion)
        .find_map(|name| changes_variable("sets", &name, true))
    {
        opaque = Some(why);
    }
    if redirects.iter().any(Redirect::body_assigns) {
        opaque = Some(
            "a heredoc's body sets a variable as it expands (`${NAME:=value}`), which may \
             change what the line runs"
                .into(),
        );
    }
    if let Some(reason) = strip_keywords(&mut words) {
        opaque = Some(reason);
    }

    let mut layers = Vec::new();
    let mut open_ended = guess.unwrap_or(false);
    let mut payload = None;
    let mut guesses: Vec<Vec<Word>> = Vec::new();
    // Whether the command runs with a variable of the line's setting:
    // `make` takes every one as a make variable (`RM=… make clean`).
    let mut sets_variables = false;
    loop {
        let assignments = words.iter().take_while(|w| w.assignment).count();
        sets_variables |= assignments > 0;
        for word in &words[..assignments] {
            if let Some(name) = word.assigned_name()
                && word
                    .text
                    .split_once('=')
                    .is_some_and(|(_, v)| v.starts_with('('))
            {
                an.arrays.insert(name.to_string());
            }
            // `a[x]=1`: an indexed array's subscript is evaluated.
            if opaque.is_none()
                && word
                    .assigned_subscript()
                    .is_some_and(|s| shell::names_a_variable(&s.chars().collect::<Vec<_>>()))
            {
                opaque = Some(EVALUATES.to_string());
            }
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
                // `time { rm x; }`, `time ! rm x`: after `time` (a
                // keyword), the rest may start with keywords too. (After
                // another wrapper they would be a program's name, which
                // does not exist: reading on is the stricter reading.)
                if let Some(reason) = strip_keywords(&mut words) {
                    opaque = Some(reason);
                }
            }
            Step::Payload(word) => {
                payload = Some(word);
                break;
            }
            Step::Drop(range) if range.end < words.len() => {
                words.drain(range);
            }
            Step::Unreadable {
                from,
                open_ended: open,
            } => {
                open_ended |= open;
                let name = words.first().and_then(command_name).unwrap_or_default();
                if opaque.is_none() {
                    opaque = Some(format!(
                        "the options of `{name}` cannot be read with confidence, so which command it runs is not known"
                    ));
                }
                if guess.is_none() {
                    // Deny and ask rules see every place the command may
                    // start at: each later word that is no option.
                    let starts: Vec<usize> = (from..words.len())
                        .filter(|&k| !words[k].text.starts_with('-'))
                        .collect();
                    if starts.len() > MAX_GUESSES {
                        an.malformed.push(format!(
                            "too many words after `{name}` to tell which command it runs"
                        ));
                    }
                    guesses = starts
                        .into_iter()
                        .take(MAX_GUESSES)
                        .map(|k| words[k..].to_vec())
                        .collect();
                }
                break;
            }
            Step::Inner { .. } | Step::Drop(_) | Step::Stop => break,
        }
    }
    if let Some(name) = layers
        .last()
        .and_then(|l| l.words.first())
        .and_then(command_name)
    {
        let command = &layers[layers.len() - 1].words;
        if let Some(reason) = writes_variable(name, command) {
            opaque = Some(reason);
        }
        if matches!(
            name,
            "unset" | "export" | "declare" | "typeset" | "local" | "readonly"
        ) {
            // `unset NAME`, `export -n NAME`, `declare +x NAME`: a variable
            // taken out of the environment of later commands.
            let flags = |w: &Word, sign: char, flag: char| {
                w.text.starts_with(sign) && !w.text.starts_with("--") && w.text.contains(flag)
            };
            let removes = name == "unset"
                || command[1..]
                    .iter()
                    .any(|w| flags(w, '+', 'x') || (name == "export" && flags(w, '-', 'n')));
            if removes {
                for word in command[1..]
                    .iter()
                    .filter(|w| !w.text.starts_with(['-', '+']))
                {
                    let name = word
                        .text
                        .split_once('=')
                        .map_or(word.text.as_str(), |(n, _)| n);
                    if let Some(why) = changes_variable("removes", name, word.literal) {
                        opaque = Some(why);
                    }
                }
            }
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
    let mut redeclared = Vec::new();
    if let Some(layer) = layers.last() {
        let (arrays, why, if_array) = declared_arrays(&layer.words);
        an.arrays.extend(arrays);
        if opaque.is_none() {
            opaque = why;
        }
        redeclared = if_array;
    }
    if opaque.is_none()
        && let Some(layer) = layers.last()
        && matches!(
            layer.words.first().and_then(command_name),
            Some("make" | "gmake")
        )
    {
        let by_env = layers[..layers.len() - 1].iter().any(|l| {
            l.words.first().and_then(command_name) == Some("env")
                && l.words[1..]
                    .iter()
                    .any(|w| text_assignment(&w.text).is_some())
        });
        if sets_variables || by_env || an.exports {
            opaque = Some(
                "make takes every variable of its environment as a make variable, which \
                 changes what its recipes run (`RM=… make clean`)"
                    .into(),
            );
        }
    }
    // Before its global options are dropped: `git -c core.pager=… log`.
    for layer in &layers {
        if layer.words.first().and_then(command_name) == Some("git")
            && let Some(why) = git_runs_program(&layer.words)
        {
            opaque = Some(why);
            break;
        }
    }
    // Options and program texts that make the command run another program
    // (`tar --to-command=…`, `sed '1e …'`, `strace -o '|…'`).
    let mut embedded: Vec<Word> = Vec::new();
    for (at, layer) in layers.iter().enumerate() {
        // `… | xargs sed -n p f`: what xargs appends may be options, and
        // so may what it puts in place of `-I`'s string at a word's start.
        let handed = |name: &str| {
            let replace = at
                .checked_sub(1)
                .and_then(|before| xargs_replace(&layers[before].words));
            super::embedded::options_may_run(name)
                && replace.is_none_or(|r| layer.words[1..].iter().any(|w| w.text.starts_with(&r)))
        };
        if layer.open_ended
            && opaque.is_none()
            && let Some(name) = layer.words.first().and_then(command_name)
            && handed(name)
        {
            opaque = Some(format!(
                "the arguments appended to `{name}` are read from input when it runs and may become its options, some of which run another program"
            ));
        }
        if let Some(found) = super::embedded::runs_programs(&layer.words, &an.known) {
            if opaque.is_none() {
                opaque = Some(found.why);
            }
            for command in found.commands {
                if !embedded.contains(&command) {
                    embedded.push(command);
                }
            }
        }
    }
    if layers.is_empty() && opaque.is_none() && !redirects.iter().any(Redirect::writes) {
        // Plain assignments, a lone keyword, or a loop's `done < input`:
        // nothing runs and nothing is written.
        return;
    }

    let mut transparent = false;
    let mut computed_payload = embedded.iter().any(|w| !w.literal);
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
    let guess_redirects = if guesses.is_empty() {
        Vec::new()
    } else {
        redirects.clone()
    };
    for name in redeclared {
        an.redeclared.push((an.pieces.len(), name));
    }
    // Named as the builtin, not by a path (`./true` is a program).
    let inert = opaque.is_none()
        && layers.len() == 1
        && (layers[0]
            .words
            .first()
            .is_some_and(|w| w.literal && INERT_BUILTINS.contains(&w.text.as_str()))
            || plain_export(&layers[0].words))
        && !redirects.iter().any(Redirect::writes);
    an.pieces.push(Piece {
        text,
        layers,
        redirects,
        transparent,
        shadow,
        inert,
        computed_payload,
        pipeline,
        stage,
        opaque,
    });
    if let Some(payload) = payload.filter(|p| p.literal)
        && an.nest()
    {
        expand(&payload.text, depth + 1, shadow, an, next_pipeline);
    }
    for command in embedded.iter().filter(|w| w.literal) {
        if !an.nest() {
            break;
        }
        expand(&command.text, depth + 1, shadow, an, next_pipeline);
    }
    for words in guesses {
        if !an.nest() {
            break;
        }
        if depth >= MAX_DEPTH {
            an.malformed
                .push("commands are nested too deeply to be checked".into());
            break;
        }
        let raw = RawPiece {
            text: join(&words),
            words,
            redirects: guess_redirects.clone(),
            pipeline,
            stage,
            shadow,
        };
        normalise(raw, depth + 1, an, next_pipeline, Some(open_ended));
    }
    for words in exec_commands {
        if !an.nest() {
            break;
        }
        if depth >= MAX_DEPTH {
            an.malformed
                .push("commands are nested too deeply to be checked".into());
            break;
        }
        let text = join(&words);
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
        normalise(raw, depth + 1, an, next_pipeline, None);
    }
}

/// The words' texts joined by spaces.
fn join(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
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
        Step::Inner { .. } | Step::Drop(_) | Step::Unreadable { .. } | Step::Stop => None,
    }
}

/// Drop reserved words that lead a command (`if`, `then`, `!`, `{` …) and
/// whole headers (`for x in …`, `case … in`) whose substitutions were
/// already split out.
///
/// Returns why the command is opaque when a `for` or `select` loop's
/// variable is a sensitive one (`for GIT_DIR in …` sets it for the loop's
/// commands) or not a plain name.
fn strip_keywords(words: &mut Vec<Word>) -> Option<String> {
    const LEADING: [&str; 13] = [
        "!", "{", "}", "if", "then", "elif", "else", "do", "while", "until", "fi", "done", "esac",
    ];
    // What starts a compound command: after `coproc NAME`, the name is the
    // coprocess's, not a command.
    const COMPOUND: [&str; 9] = ["{", "(", "((", "[[", "if", "while", "until", "for", "case"];
    // Where the command starts; what leads it is dropped at once at the end
    // (one word at a time would cost a line of thousands of them its
    // length times their number).
    let mut at = 0;
    loop {
        let Some(first) = words.get(at) else {
            words.clear();
            return None;
        };
        if first.is_keyword("coproc") {
            let named = words.len() > at + 2
                && shell::is_name(&words[at + 1].text)
                && words[at + 1].literal
                && COMPOUND
                    .iter()
                    .chain(&["select"])
                    .any(|k| words[at + 2].is_keyword(k));
            at += if named { 2 } else { 1 };
        } else if LEADING.iter().any(|k| first.is_keyword(k)) {
            at += 1;
        } else if first.is_keyword("function") {
            at = (at + 2).min(words.len());
        } else if ["for", "select", "case"]
            .iter()
            .any(|k| first.is_keyword(k))
        {
            // `for NAME in …` (not `for (( … ))`): the loop sets NAME.
            let reason = words
                .get(at + 1)
                .filter(|v| !first.is_keyword("case") && !v.text.starts_with("(("))
                .and_then(|v| {
                    let literal = v.literal && shell::is_name(&v.text);
                    changes_variable("sets", &v.text, literal)
                });
            words.clear();
            return reason;
        } else {
            words.drain(..at);
            return None;
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
/// libraries, its helpers), so `NAME=… git status` is not `git status`:
/// those named here, and any whose name says it points at code, a
/// configuration or options (`…PATH`, `…FLAGS`, `…OPTS`, `…CONF`, `…HOME`
/// …): `GCONV_PATH=. git log` loads a library from the workspace, and
/// `CFLAGS=-fplugin=…` one into the compiler. `RUST_LOG`, `NODE_ENV`, `CI`
/// and the like stay plain.
fn is_sensitive_variable(name: &str) -> bool {
    const EXACT: [&str; 84] = [
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "PS4",
        "PS0",
        // `"$PWD/x"` is taken for an absolute path.
        "PWD",
        "PROMPT_COMMAND",
        "EXECIGNORE",
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
        "TAR_OPTIONS",
        "RSYNC_RSH",
        "RSYNC_CONNECT_PROG",
        "ZIPOPT",
        "MAKEFLAGS",
        "MAKEFILES",
        "MFLAGS",
        "GNUMAKEFLAGS",
        // Where git and `cd` look: a configuration or directory of the
        // line's choosing (`HOME=.git; tee ~/config`, `OLDPWD=.git; cd -`).
        "HOME",
        "OLDPWD",
        // glibc and OpenSSL load modules and engines from where these say.
        "GCONV_PATH",
        "LOCPATH",
        "NLSPATH",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        // Programs and hooks of build tools and interpreters.
        "CXX",
        "CPP",
        "LD",
        "PERL5DB",
        "PYTHONBREAKPOINT",
        // Where git's merge and diff tools are sourced from; less's key
        // files (`#env` sets LESSOPEN); Python's user site (its `.pth`
        // files run); cargo's rustdoc and rustfmt.
        "MERGE_TOOLS_DIR",
        // less's options, read before its arguments (`LESS=-kkeys`).
        "LESS",
        "LESSKEY",
        "LESSKEYIN",
        "LESSKEY_SYSTEM",
        "LESSKEYIN_SYSTEM",
        "PYTHONUSERBASE",
        "RUSTDOC",
        "RUSTFMT",
        // Start-up files and option variables of programs that run others
        // (`WGETRC`'s `use_askpass`, `ZIP='-TT cmd'`, vim's `VIMINIT`).
        "WGETRC",
        "SYSTEM_WGETRC",
        "ZIP",
        "UNZIP",
        "UNZIPOPT",
        "VIMINIT",
        "GVIMINIT",
        "EXINIT",
        "MYVIMRC",
        // Where vim finds `defaults.vim` and its runtime files, and the
        // prefix of the programs groff (`man`) runs.
        "VIM",
        "VIMRUNTIME",
        "GROFF_COMMAND_PREFIX",
        "GZIP",
        "BZIP2",
        "XZ_OPT",
    ];
    const PREFIXES: [&str; 10] = [
        "LD_",
        "DYLD_",
        "GIT_",
        "XDG_",
        // bash's own: its command hash and alias tables (`BASH_CMDS=([ls]=
        // /usr/bin/touch)` makes `ls` run touch), exported functions, the
        // file of `set -x`'s trace, its compatibility level.
        "BASH_",
        "CARGO_",
        "NPM_CONFIG_",
        "RUSTUP_",
        "PIP_",
        "GEM_",
    ];
    const SUFFIXES: [&str; 10] = [
        "PATH", "FLAGS", "OPTS", "OPT", "OPTIONS", "CONF", "CONFIG", "HOME", "WRAPPER", "LIB",
    ];
    // cargo's own settings that only say how it shows or where it puts
    // what it builds (the rest may name programs: `CARGO_BUILD_RUSTC`,
    // `CARGO_TARGET_<triple>_LINKER`).
    const PLAIN: [&str; 9] = [
        "CARGO_TERM_COLOR",
        "CARGO_TERM_VERBOSE",
        "CARGO_TERM_QUIET",
        "CARGO_TERM_PROGRESS_WHEN",
        "CARGO_INCREMENTAL",
        "CARGO_BUILD_JOBS",
        "CARGO_TARGET_DIR",
        "CARGO_NET_OFFLINE",
        "CARGO_NET_RETRY",
    ];
    if PLAIN.contains(&name) {
        return false;
    }
    let upper = name.to_ascii_uppercase();
    EXACT.contains(&name)
        || PREFIXES.iter().any(|p| upper.starts_with(p))
        || SUFFIXES.iter().any(|s| upper.ends_with(s))
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
            // A cluster (`-rt`), perhaps ending in an option taking a value:
            // the rest of the word (`-n5`, `-i{}`, `-fn5`), or, for a
            // required value, the next word when nothing is attached.
            let short = |list: &[&str], c: char| {
                list.iter()
                    .any(|f| f.len() == 2 && f.starts_with('-') && f.ends_with(c))
            };
            let mut next = i + 1;
            for (at, c) in t[1..].char_indices() {
                let rest = &t[1 + at + c.len_utf8()..];
                if short(with_arg, c) {
                    if rest.is_empty() {
                        next += 1;
                    }
                    break;
                }
                if short(optional_attached, c) {
                    break;
                }
                if !short(no_arg, c) {
                    return None;
                }
            }
            i = next;
        }
    }
    Some(i)
}

/// The command after a wrapper's options, or an unreadable wrapper when
/// `skip_options` met an option it does not know.
fn inner(skip: Option<usize>) -> Step {
    match skip {
        Some(skip) => Step::Inner {
            skip,
            open_ended: false,
        },
        None => UNREADABLE,
    }
}

/// `setarch` or one of its per-architecture names.
pub(crate) fn is_setarch(name: &str) -> bool {
    matches!(
        name,
        "setarch" | "linux32" | "linux64" | "i386" | "i686" | "x86_64" | "uname26"
    )
}

/// Where the program a `setarch` runs starts: `Some(None)` when none is
/// given (it starts a shell), `None` when an option is not one it has.
pub(crate) fn setarch_program(words: &[Word]) -> Option<Option<usize>> {
    let arch = words.first().and_then(command_name) == Some("setarch")
        && words.get(1).is_some_and(|w| !w.text.starts_with('-'));
    let from = if arch { 2 } else { 1 };
    skip_options(words, from.min(words.len()), &[], &SETARCH_FLAGS, &[])
        .map(|i| (i < words.len()).then_some(i))
}

/// `setarch`'s options, none of which takes a value.
const SETARCH_FLAGS: [&str; 25] = [
    "-v",
    "--verbose",
    "-3",
    "--3gb",
    "--4gb",
    "--uname-2.6",
    "-B",
    "--32bit",
    "-F",
    "--fdpic-funcptrs",
    "-I",
    "--short-inode",
    "-L",
    "--addr-compat-layout",
    "-R",
    "--addr-no-randomize",
    "-S",
    "--whole-seconds",
    "-T",
    "--sticky-timeouts",
    "-X",
    "--read-implies-exec",
    "-Z",
    "--mmap-page-zero",
    "--list",
];

/// A wrapper whose command could start anywhere after its name.
const UNREADABLE: Step = Step::Unreadable {
    from: 1,
    open_ended: false,
};

/// `skip_options`' result, then `operands` words of the wrapper's own (a
/// CPU mask, a lock file), then the command.
fn after_operands(words: &[Word], skip: Option<usize>, operands: usize) -> Step {
    match skip {
        Some(i) if i + operands < words.len() => Step::Inner {
            skip: i + operands,
            open_ended: false,
        },
        Some(_) => Step::Stop,
        None => UNREADABLE,
    }
}

/// Does one of the options before a wrapper's operands (up to `--` or the
/// first word that is no option) ask for one of the `short` letters (alone
/// or in a cluster) or one of the `long` options (`--pid`, `--pid=1`)?
fn asks_for(words: &[Word], short: &str, long: &[&str]) -> bool {
    words[1..]
        .iter()
        .map(|w| w.text.as_str())
        .take_while(|t| t.starts_with('-') && *t != "--" && *t != "-")
        .any(|t| match t.strip_prefix("--") {
            Some(name) => long.contains(&&t[..2 + name.find('=').unwrap_or(name.len())]),
            None => t[1..].chars().any(|c| short.contains(c)),
        })
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
            Some(_) => Step::Stop,
            None => UNREADABLE,
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
        // `setarch [arch] [options] [program …]` and its per-architecture
        // names (`linux64 [options] [program …]`). Without a program it
        // starts a shell (see `dangerous::piped_into_interpreter`).
        name if is_setarch(name) => match setarch_program(words) {
            Some(Some(i)) => Step::Inner {
                skip: i,
                open_ended: false,
            },
            Some(None) => Step::Stop,
            None => UNREADABLE,
        },
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
            &XARGS_VALUE_OPTIONS,
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
            None => Step::Unreadable {
                from: 1,
                open_ended: true,
            },
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
        "sh" | "bash" | "rbash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh"
        | "fish" | "csh" | "tcsh" => shell_payload(words),
        "su" => su_payload(words),
        // `runuser -u user [--] command`, or like `su`: `runuser user -c …`.
        "runuser" => {
            let with_user = words[1..]
                .iter()
                .take_while(|w| w.text != "--")
                .any(|w| w.text == "-u" || w.text.starts_with("--user"));
            if with_user {
                inner(skip_options(
                    words,
                    1,
                    &[
                        "-u",
                        "--user",
                        "-g",
                        "--group",
                        "-G",
                        "--supp-group",
                        "-s",
                        "--shell",
                        "-w",
                        "--whitelist-environment",
                    ],
                    &[
                        "-l",
                        "--login",
                        "-m",
                        "-p",
                        "--preserve-environment",
                        "-P",
                        "--pty",
                        "-f",
                        "--fast",
                    ],
                    &[],
                ))
            } else {
                su_payload(words)
            }
        }
        // `sg [-] group [-c] 'command'`: the command goes to `/bin/sh -c`.
        "sg" => {
            let group = if words.get(1).is_some_and(|w| w.text == "-") {
                2
            } else {
                1
            };
            let at = match words.get(group + 1) {
                Some(w) if w.text == "-c" => group + 2,
                _ => group + 1,
            };
            words
                .get(at)
                .map_or(Step::Stop, |w| Step::Payload(w.clone()))
        }
        // `taskset [-a] [-c] mask command`; `-p` changes a running process.
        "taskset" => {
            if asks_for(words, "phV", &["--pid", "--help", "--version"]) {
                return Step::Stop;
            }
            let skip = skip_options(
                words,
                1,
                &[],
                &["-a", "--all-tasks", "-c", "--cpu-list"],
                &[],
            );
            after_operands(words, skip, 1)
        }
        // `chrt [policy options] [priority] command`.
        "chrt" => {
            if asks_for(words, "pmhV", &["--pid", "--max", "--help", "--version"]) {
                return Step::Stop;
            }
            let skip = skip_options(
                words,
                1,
                &[
                    "-T",
                    "--sched-runtime",
                    "-P",
                    "--sched-period",
                    "-D",
                    "--sched-deadline",
                ],
                &[
                    "-a",
                    "--all-tasks",
                    "-b",
                    "--batch",
                    "-d",
                    "--deadline",
                    "-e",
                    "--ext",
                    "-f",
                    "--fifo",
                    "-i",
                    "--idle",
                    "-o",
                    "--other",
                    "-r",
                    "--rr",
                    "-R",
                    "--reset-on-fork",
                    "-v",
                    "--verbose",
                ],
                &[],
            );
            match skip.and_then(|i| words.get(i).map(|w| (i, w))) {
                Some((i, w)) if w.literal && w.text.bytes().all(|b| b.is_ascii_digit()) => {
                    after_operands(words, Some(i), 1)
                }
                Some((_, w)) if !w.literal => UNREADABLE,
                _ => after_operands(words, skip, 0),
            }
        }
        "setpriv" => {
            if asks_for(
                words,
                "dhV",
                &["--dump", "--list-caps", "--help", "--version"],
            ) {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &[
                    "--reuid",
                    "--regid",
                    "--ruid",
                    "--euid",
                    "--rgid",
                    "--egid",
                    "--groups",
                    "--inh-caps",
                    "--ambient-caps",
                    "--bounding-set",
                    "--securebits",
                    "--pdeathsig",
                    "--selinux-label",
                    "--apparmor-profile",
                    "--landlock-access",
                    "--landlock-rule",
                    "--seccomp-filter",
                ],
                &[
                    "--clear-groups",
                    "--keep-groups",
                    "--init-groups",
                    "--nnp",
                    "--no-new-privs",
                    "--reset-env",
                ],
                &[],
            ))
        }
        // `flock [options] file command…` or `flock [options] file -c 'command'`.
        "flock" => {
            let skip = skip_options(
                words,
                1,
                &["-w", "--timeout", "--wait", "-E", "--conflict-exit-code"],
                &[
                    "-s",
                    "--shared",
                    "-x",
                    "-e",
                    "--exclusive",
                    "-u",
                    "--unlock",
                    "-n",
                    "--nb",
                    "--nonblock",
                    "-o",
                    "--close",
                    "-F",
                    "--no-fork",
                    "--verbose",
                ],
                &[],
            );
            match skip.map(|i| (i, words.get(i + 1))) {
                Some((i, Some(w))) if w.text == "-c" || w.text == "--command" => words
                    .get(i + 2)
                    .map_or(Step::Stop, |p| Step::Payload(p.clone())),
                _ => after_operands(words, skip, 1),
            }
        }
        // `prlimit [--resource[=limits]…] command`; `--pid` changes a
        // running process.
        "prlimit" => {
            if asks_for(words, "phV", &["--pid", "--help", "--version"]) {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &["-o", "--output"],
                &["--noheadings", "--raw", "--verbose"],
                &[
                    "-c",
                    "--core",
                    "-d",
                    "--data",
                    "-e",
                    "--nice",
                    "-f",
                    "--fsize",
                    "-i",
                    "--sigpending",
                    "-l",
                    "--memlock",
                    "-m",
                    "--rss",
                    "-n",
                    "--nofile",
                    "-q",
                    "--msgqueue",
                    "-r",
                    "--rtprio",
                    "-s",
                    "--stack",
                    "-t",
                    "--cpu",
                    "-u",
                    "--nproc",
                    "-v",
                    "--as",
                    "-x",
                    "--locks",
                    "-y",
                    "--rttime",
                ],
            ))
        }
        "strace" => {
            if asks_for(words, "hV", &["--help", "--version"]) {
                return Step::Stop;
            }
            sensitive_env_option(words, &["-E", "--env"], opaque);
            inner(skip_options(
                words,
                1,
                &[
                    "-a",
                    "-b",
                    "-e",
                    "-I",
                    "-o",
                    "-O",
                    "-p",
                    "-P",
                    "-s",
                    "-S",
                    "-u",
                    "-U",
                    "-X",
                    "-E",
                    "--output",
                    "--attach",
                    "--user",
                    "--env",
                    "--trace",
                    "--trace-path",
                    "--signal",
                    "--status",
                    "--string-limit",
                    "--summary-sort-by",
                    "--columns",
                    "--detach-on",
                    "--const-print-style",
                    "--abbrev",
                    "--verbose",
                    "--raw",
                    "--read",
                    "--write",
                    "--fault",
                    "--inject",
                    "--kvm",
                ],
                &[
                    "-c",
                    "-C",
                    "-d",
                    "-D",
                    "-f",
                    "-F",
                    "-i",
                    "-k",
                    "-n",
                    "-q",
                    "-r",
                    "-t",
                    "-T",
                    "-v",
                    "-w",
                    "-x",
                    "-y",
                    "-z",
                    "-Z",
                    "-A",
                    "--summary-only",
                    "--summary",
                    "--summary-wall-clock",
                    "--follow-forks",
                    "--output-separately",
                    "--daemonize",
                    "--seccomp-bpf",
                    "--successful-only",
                    "--failed-only",
                    "--no-abbrev",
                    "--relative-timestamps",
                    "--syscall-times",
                    "--timestamps",
                    "--decode-fds",
                    "--decode-pids",
                    "--quiet",
                    "--silent",
                    "--stack-trace",
                    "--debug",
                    "--output-append-mode",
                    "--instruction-pointer",
                    "--syscall-number",
                    "--always-show-pid",
                    "--tips",
                ],
                &[],
            ))
        }
        "ltrace" => {
            if asks_for(words, "hV", &["--help", "--version"]) {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &[
                    "-a",
                    "-A",
                    "-D",
                    "-e",
                    "-F",
                    "-l",
                    "-n",
                    "-o",
                    "-p",
                    "-s",
                    "-u",
                    "-w",
                    "-x",
                    "--align",
                    "--debug",
                    "--config",
                    "--library",
                    "--indent",
                    "--output",
                    "--where",
                ],
                &[
                    "-b",
                    "-c",
                    "-C",
                    "-f",
                    "-i",
                    "-L",
                    "-r",
                    "-S",
                    "-t",
                    "-T",
                    "--no-signals",
                    "--demangle",
                ],
                &[],
            ))
        }
        // Its options are all one word (`--tool=memcheck`).
        "valgrind" => {
            if asks_for(words, "hV", &["--help", "--help-debug", "--version"]) {
                return Step::Stop;
            }
            let i = 1 + words[1..]
                .iter()
                .take_while(|w| w.text.starts_with('-'))
                .count();
            after_operands(words, Some(i), 0)
        }
        // `gdb … --args program args…`. gdb itself runs the commands it is
        // given (`-ex`, command files, its standard input), which can run
        // any program, so no specific allow rule vouches for it.
        "gdb" => {
            *opaque = Some(
                "gdb runs the commands it is given (`-ex`, a command file, its standard input), which can run any program".into(),
            );
            match words
                .iter()
                .position(|w| w.text == "--args" || w.text == "-args")
            {
                Some(at) => after_operands(words, Some(at + 1), 0),
                None => Step::Stop,
            }
        }
        // `perf stat|record|trace … command`: too many options (and
        // abbreviations) to find the command with confidence.
        "perf" => match words.get(1).map(|w| w.text.as_str()) {
            Some(
                "stat" | "record" | "trace" | "ftrace" | "mem" | "c2c" | "sched" | "lock" | "kmem"
                | "kvm" | "timechart" | "kwork" | "script",
            ) => Step::Unreadable {
                from: 2,
                open_ended: false,
            },
            _ => Step::Stop,
        },
        "numactl" => {
            if asks_for(words, "sH", &["--show", "--hardware"]) {
                return Step::Stop;
            }
            inner(skip_options(
                words,
                1,
                &[
                    "-i",
                    "--interleave",
                    "-p",
                    "--preferred",
                    "-m",
                    "--membind",
                    "-N",
                    "--cpunodebind",
                    "-C",
                    "--physcpubind",
                    "-P",
                    "--preferred-many",
                    "-w",
                    "--weighted-interleave",
                ],
                &["-l", "--localalloc", "-a", "--all", "-b", "--balancing"],
                &[],
            ))
        }
        "cgexec" => inner(skip_options(words, 1, &["-g"], &["--sticky"], &[])),
        // `chroot [options] newroot [command…]`; alone, it starts a shell.
        "chroot" => after_operands(
            words,
            skip_options(
                words,
                1,
                &["--userspec", "--groups"],
                &["--skip-chdir"],
                &[],
            ),
            1,
        ),
        "unbuffer" => inner(skip_options(words, 1, &[], &["-p"], &[])),
        // `busybox applet args…`
        "busybox" => match words.get(1) {
            Some(w) if !w.text.starts_with('-') => inner(Some(1)),
            _ => Step::Stop,
        },
        "catchsegv" => inner(Some(1)),
        "fakeroot" => {
            if asks_for(words, "l", &["--lib", "--faked"]) {
                *opaque = Some(
                    "it makes fakeroot load another library or daemon (`-l`, `--faked`)".into(),
                );
            }
            inner(skip_options(
                words,
                1,
                &["-l", "--lib", "--faked", "-i", "-s", "-b"],
                &["-u", "--unknown-is-real"],
                &[],
            ))
        }
        // Its options are all one word (`--net=none`).
        "firejail" => {
            let i = 1 + words[1..]
                .iter()
                .take_while(|w| w.text.starts_with('-') && w.text != "--")
                .count();
            if words[1..i].iter().any(|w| {
                w.text.starts_with("--env=")
                    && text_assignment(&w.text["--env=".len()..]).is_some_and(is_sensitive_variable)
            }) {
                *opaque = Some("it sets a variable that changes what the command runs".into());
            }
            let i = if words.get(i).is_some_and(|w| w.text == "--") {
                i + 1
            } else {
                i
            };
            after_operands(words, Some(i), 0)
        }
        "nsenter" | "unshare" => inner(skip_options(
            words,
            1,
            &[
                "-t",
                "--target",
                "-G",
                "--setgid",
                "-S",
                "--setuid",
                "-R",
                "--root",
                "-W",
                "--wdns",
                "--setgroups",
                "--propagation",
                "--map-user",
                "--map-group",
                "--map-users",
                "--map-groups",
                "--monotonic",
                "--boottime",
            ],
            &[
                "-a",
                "--all",
                "--preserve-credentials",
                "-e",
                "--env",
                "-F",
                "--no-fork",
                "-Z",
                "--follow-context",
                "-c",
                "--join-cgroup",
                "--keep-caps",
                "-f",
                "--fork",
                "-r",
                "--map-root-user",
                "--map-current-user",
                "--map-auto",
            ],
            &[
                "-m",
                "--mount",
                "-u",
                "--uts",
                "-i",
                "--ipc",
                "-n",
                "--net",
                "-p",
                "--pid",
                "-U",
                "--user",
                "-C",
                "--cgroup",
                "-T",
                "--time",
                "-w",
                "--wd",
                "--kill-child",
                "--mount-proc",
                "--mount-binfmt",
            ],
        )),
        "run0" => {
            sensitive_env_option(words, &["--setenv"], opaque);
            inner(skip_options(
                words,
                1,
                &[
                    "-u",
                    "--user",
                    "-g",
                    "--group",
                    "-D",
                    "--chdir",
                    "--setenv",
                    "--unit",
                    "--property",
                    "--description",
                    "--slice",
                    "--nice",
                    "--machine",
                    "--background",
                    "--shell-prompt-prefix",
                ],
                &["--no-ask-password", "--slice-inherit", "--pty", "--pipe"],
                &[],
            ))
        }
        "systemd-run" => {
            sensitive_env_option(words, &["-E", "--setenv"], opaque);
            if asks_for(words, "p", &["--property"]) {
                *opaque = Some(
                    "its unit properties (`-p`) can make it run other programs (`ExecStartPre=`)"
                        .into(),
                );
            }
            inner(skip_options(
                words,
                1,
                &[
                    "-u",
                    "--unit",
                    "-p",
                    "--property",
                    "-E",
                    "--setenv",
                    "--description",
                    "--slice",
                    "--uid",
                    "--gid",
                    "--nice",
                    "-D",
                    "--chdir",
                    "--working-directory",
                    "-M",
                    "--machine",
                    "-H",
                    "--host",
                    "--service-type",
                    "--background",
                    "--on-active",
                    "--on-boot",
                    "--on-startup",
                    "--on-unit-active",
                    "--on-unit-inactive",
                    "--on-calendar",
                    "--timer-property",
                    "--path-property",
                    "--socket-property",
                ],
                &[
                    "--user",
                    "--system",
                    "--scope",
                    "-r",
                    "--remain-after-exit",
                    "--send-sighup",
                    "-t",
                    "--pty",
                    "-P",
                    "--pipe",
                    "-q",
                    "--quiet",
                    "-G",
                    "--collect",
                    "--wait",
                    "-S",
                    "--shell",
                    "--no-block",
                    "--no-ask-password",
                    "-d",
                    "--same-dir",
                    "--slice-inherit",
                ],
                &[],
            ))
        }
        // `script [options] [file]` runs `-c`'s command string (alone, it
        // starts an interactive shell).
        "script" => match option_value(words, 'c', "command", "EIOBTmo", &[]) {
            Some(payload) => Step::Payload(payload),
            None => Step::Stop,
        },

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
        let setting = match t {
            "-c" | "--config-env" => {
                i += 1;
                words.get(i)
            }
            _ if t.starts_with("--config-env=") => Some(word),
            _ => None,
        };
        // Which option it sets is only known when it runs.
        if setting.is_some_and(|w| !w.literal) {
            return Some(
                "it sets a git option (`-c`, `--config-env`) whose name or value is computed \
                 when the command runs"
                    .into(),
            );
        }
        let key = match t {
            "-c" | "--config-env" => setting.map(|w| w.text.as_str()),
            _ if t.starts_with("--config-env=") => t.strip_prefix("--config-env="),
            _ if t.starts_with("--exec-path=") => {
                return Some("it points git at other programs (`--exec-path`)".into());
            }
            _ if super::embedded::GIT_GLOBAL_VALUED.contains(&t) => {
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

pub(crate) fn git_key_runs_program(key: &str) -> bool {
    const EXACT: [&str; 23] = [
        // Where checkout writes: `hooks`, relative to `.git`, makes a
        // checked-out file a hook.
        "core.worktree",
        "core.attributesfile",
        "web.browser",
        "instaweb.httpd",
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
        // Tools sourced by name from git's mergetools (a path of the
        // caller's choosing runs), and pull's strategies.
        "diff.tool",
        "diff.guitool",
        "merge.tool",
        "merge.guitool",
        "pull.twohead",
        "pull.octopus",
    ];
    const PREFIXES: [&str; 4] = ["alias.", "pager.", "includeif.", "protocol."];
    // Whole-word endings, so `core.alternateRefsCommand`,
    // `gpg.ssh.defaultKeyCommand` and `sendemail.sendmailCmd` count too.
    const SUFFIXES: [&str; 19] = [
        // `remote.<name>.vcs` names the helper program git runs.
        ".vcs",
        ".textconv",
        "command",
        ".driver",
        ".clean",
        ".smudge",
        ".process",
        "program",
        ".helper",
        "cmd",
        ".uploadpack",
        ".receivepack",
        ".path",
        ".update",
        ".tunnel",
        "filter",
        "templatedir",
        ".viewer",
        // An absolute path there is a program send-email runs
        // (`sendemail.smtpServer`, per identity too).
        ".smtpserver",
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
            "-i" | "--ignore-environment" | "-" => {
                *opaque = Some(
                    "it clears the environment, which holds the sandbox's settings (git's among them)"
                        .into(),
                );
                i += 1
            }
            "-0" | "--null" | "-v" | "--debug" => i += 1,
            "-u" | "--unset" => {
                if let Some(w) = words.get(i + 1)
                    && let Some(why) = changes_variable("removes", &w.text, w.literal)
                {
                    *opaque = Some(why);
                }
                i += 2
            }
            "-C" | "--chdir" => i += 2,
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
            _ if t.starts_with("--unset=") || (t.starts_with("-u") && t.len() > 2) => {
                let name = t.strip_prefix("--unset=").unwrap_or(&t[2..]);
                if let Some(why) = changes_variable("removes", name, word.literal) {
                    *opaque = Some(why);
                }
                i += 1
            }
            _ if t.starts_with("--chdir=") || (t.starts_with("-C") && t.len() > 2) => i += 1,
            // An abbreviated `--split-string`: `--spl='cmd'`.
            _ if t.starts_with("--") && {
                let name = t[2..].split('=').next().unwrap_or_default();
                name.len() >= 2 && "split-string".starts_with(name)
            } =>
            {
                return match t.split_once('=') {
                    Some((_, text)) => Step::Payload(Word {
                        text: text.to_string(),
                        ..word.clone()
                    }),
                    None => match words.get(i + 1) {
                        Some(payload) => Step::Payload(payload.clone()),
                        None => Step::Stop,
                    },
                };
            }
            // A cluster of short options: flags, then perhaps one taking a
            // value (`-vS'cmd'`, `-iC dir`, `-0u NAME`).
            _ if t.starts_with('-') && !t.starts_with("--") => {
                let cluster = &t[1..];
                let mut next = i + 1;
                for (at, c) in cluster.char_indices() {
                    let rest = &cluster[at + c.len_utf8()..];
                    match c {
                        'i' => {
                            *opaque = Some(
                                "it clears the environment, which holds the sandbox's settings (git's among them)"
                                    .into(),
                            );
                        }
                        '0' | 'v' => {}
                        'S' => {
                            return match rest {
                                "" => match words.get(i + 1) {
                                    Some(payload) => Step::Payload(payload.clone()),
                                    None => Step::Stop,
                                },
                                text => Step::Payload(Word {
                                    text: text.to_string(),
                                    ..word.clone()
                                }),
                            };
                        }
                        'u' | 'C' => {
                            let value = match rest {
                                "" => {
                                    next = i + 2;
                                    words.get(i + 1).map(|w| (w.text.as_str(), w.literal))
                                }
                                text => Some((text, word.literal)),
                            };
                            if c == 'u'
                                && let Some((name, literal)) = value
                                && let Some(why) = changes_variable("removes", name, literal)
                            {
                                *opaque = Some(why);
                            }
                            break;
                        }
                        _ => return UNREADABLE,
                    }
                }
                i = next;
            }
            _ if t.starts_with('-') => return UNREADABLE,
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

/// A word of `declare`'s (`local`'s, `typeset`'s) that may turn out an
/// option when it runs (`-$x`, `$x`): computed, and no assignment.
fn may_be_option(w: &Word) -> bool {
    !w.literal && !w.assignment
}

/// Why a builtin that writes the variables its arguments name makes the
/// command opaque: it names a sensitive one (`read GIT_DIR`, `printf -v
/// PATH …`, `mapfile`, `getopts`), or one whose name is computed; or it
/// makes a name reference (`declare -n r=GIT_DIR; r=…` writes GIT_DIR
/// under another name).
fn writes_variable(name: &str, command: &[Word]) -> Option<String> {
    let args = command.get(1..).unwrap_or_default();
    let named: Vec<&Word> = match name {
        "read" => {
            // `-a NAME` or `-aNAME` (in a cluster too: `-raNAME`) names
            // an array; bash looks up its first element as the variable.
            let mut named = Vec::new();
            let mut glued = Vec::new();
            let mut i = 0;
            while let Some(w) = args.get(i) {
                i += 1;
                let Some(cluster) = w.text.strip_prefix('-').filter(|c| !c.is_empty()) else {
                    named.push(w);
                    continue;
                };
                // Options that take a value: `-a`, `-d`, `-i`, `-n`, `-N`,
                // `-p`, `-t`, `-u`.
                if let Some(at) = cluster.find(['a', 'd', 'i', 'n', 'N', 'p', 't', 'u']) {
                    let letter = &cluster[at..at + 1];
                    let rest = &cluster[at + 1..];
                    if letter == "a" {
                        if rest.is_empty() {
                            named.extend(args.get(i));
                        } else {
                            glued.push((rest.to_string(), w.literal));
                        }
                    }
                    if rest.is_empty() {
                        i += 1;
                    }
                }
            }
            if let Some(why) = glued
                .iter()
                .find_map(|(text, literal)| changes_variable("sets", text, *literal))
            {
                return Some(why);
            }
            named
        }
        "mapfile" | "readarray" => args.iter().collect(),
        "getopts" => args.get(1).into_iter().collect(),
        "printf" => {
            // `-v NAME` or `-vNAME`.
            let i = args.iter().position(|w| w.text.starts_with("-v"))?;
            let (text, literal) = match &args[i].text[2..] {
                "" => args.get(i + 1).map(|w| (w.text.as_str(), w.literal))?,
                attached => (attached, args[i].literal),
            };
            return changes_variable("sets", text, literal);
        }
        "declare" | "typeset" | "local" => {
            let nameref = args
                .iter()
                .take_while(|w| w.text.starts_with(['-', '+']) || may_be_option(w))
                .any(|w| (w.text.starts_with('-') && w.text.contains('n')) || may_be_option(w));
            return nameref.then(|| {
                "it makes a name reference, through which any variable may be set (`-n`, or \
                 an option computed when it runs)"
                    .to_string()
            });
        }
        _ => return None,
    };
    named
        .into_iter()
        .filter(|w| !w.text.starts_with('-'))
        .find_map(|w| changes_variable("sets", &w.text, w.literal))
}

/// Why a command that `verb`s (sets, removes) variable `name` (`literal`:
/// as written, not computed) is opaque, if it is: a sensitive variable,
/// or one whose name is computed, changes what the command runs. The
/// sandbox's settings live in such variables (git's `core.fsmonitor` and
/// `safe.bareRepository`, its pager and editor): without them, a command
/// an allow rule names may run a program.
fn changes_variable(verb: &str, name: &str, literal: bool) -> Option<String> {
    if !literal {
        Some(format!(
            "it {verb} a variable whose name is computed, which may change what the command runs"
        ))
    } else if is_sensitive_variable(name) {
        Some(format!(
            "it {verb} {name}, which changes what the command runs"
        ))
    } else {
        None
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

/// `su [options] [user] -c 'command'` (or `--command`, `--session-command`,
/// abbreviated or not, or `-lc 'command'` in a cluster).
/// After `--`, the words past the user are the shell's own arguments
/// (`su -- root -c 'command'`).
fn su_payload(words: &[Word]) -> Step {
    if let Some(payload) = option_value(words, 'c', "command", "gGsw", &["session-command"]) {
        return Step::Payload(payload);
    }
    let Some(end) = words.iter().position(|w| w.text == "--") else {
        return Step::Stop;
    };
    for from in [end, end + 1] {
        if let Some(rest) = words.get(from..)
            && let payload @ Step::Payload(_) = shell_payload(rest)
        {
            return payload;
        }
    }
    Step::Stop
}

/// The value of a getopt-style option that takes a command string: `-c
/// cmd`, `-ccmd`, `-lc cmd` (a cluster of flags ending in it),
/// `--command=cmd`, `--command cmd`, or any abbreviation of the long name
/// (or of one of `also`). `valued`: the other short options taking a
/// value (in a cluster, the rest of the word is their value). Options may
/// follow operands (GNU getopt permutes them), up to `--`.
fn option_value(
    words: &[Word],
    letter: char,
    long: &str,
    valued: &str,
    also: &[&str],
) -> Option<Word> {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        i += 1;
        if t == "--" {
            return None;
        }
        if let Some(name) = t.strip_prefix("--") {
            let (name, value) = match name.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (name, None),
            };
            let names_it = !name.is_empty()
                && std::iter::once(long)
                    .chain(also.iter().copied())
                    .any(|full| full.starts_with(name));
            if names_it {
                return match value {
                    Some(value) => Some(Word {
                        text: value.to_string(),
                        ..word.clone()
                    }),
                    None => words.get(i).cloned(),
                };
            }
            continue;
        }
        let Some(flags) = t.strip_prefix('-') else {
            continue;
        };
        for (at, c) in flags.char_indices() {
            let rest = &flags[at + c.len_utf8()..];
            if c == letter {
                return if rest.is_empty() {
                    words.get(i).cloned()
                } else {
                    Some(Word {
                        text: rest.to_string(),
                        ..word.clone()
                    })
                };
            }
            if valued.contains(c) {
                if rest.is_empty() {
                    i += 1;
                }
                break;
            }
        }
    }
    None
}

/// An option that sets a variable for the command (`strace -E NAME=v`,
/// `systemd-run --setenv=NAME=v`) naming one that changes what it runs.
fn sensitive_env_option(words: &[Word], options: &[&str], opaque: &mut Option<String>) {
    let mut values = words.iter().enumerate().skip(1).filter_map(|(i, w)| {
        let t = w.text.as_str();
        if options.contains(&t) {
            return words.get(i + 1).map(|v| v.text.as_str());
        }
        options.iter().find_map(|o| {
            t.strip_prefix(o)
                .and_then(|rest| rest.strip_prefix('=').or((o.len() == 2).then_some(rest)))
                .filter(|rest| !rest.is_empty())
        })
    });
    if let Some(name) = values.find_map(|v| text_assignment(v).filter(|n| is_sensitive_variable(n)))
    {
        *opaque = Some(format!(
            "it sets {name}, which changes what the command runs"
        ));
    }
}

/// The string `xargs` replaces with what it reads (`-I R`, `-IR`, `-i`,
/// `-iR`, `--replace[=R]`), when `words` are an xargs command given one:
/// then it appends nothing.
fn xargs_replace(words: &[Word]) -> Option<String> {
    if words.first().and_then(command_name) != Some("xargs") {
        return None;
    }
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let t = word.text.as_str();
        if !t.starts_with('-') || t == "--" {
            return None;
        }
        if t == "-I" {
            return words.get(i + 1).map(|w| w.text.clone());
        }
        if let Some(r) = t
            .strip_prefix("-I")
            .or_else(|| t.strip_prefix("--replace="))
        {
            return Some(r.to_string());
        }
        if t == "-i" || t == "--replace" {
            return Some("{}".to_string());
        }
        if let Some(r) = t.strip_prefix("-i") {
            return Some(r.to_string());
        }
        let valued = XARGS_VALUE_OPTIONS.contains(&t);
        i += if valued { 2 } else { 1 };
    }
    None
}

/// `xargs` options whose value is the next word (or glued to them).
pub(crate) const XARGS_VALUE_OPTIONS: [&str; 14] = [
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
];

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
        // An option the wrapper does not know (perhaps an abbreviation):
        // the wrapper is kept, no allow rule vouches for it, and every
        // place its command may start at is a piece of its own.
        assert_eq!(
            commands("timeout --bogus 5 make"),
            ["timeout --bogus 5 make", "5 make", "make"]
        );
        let an = analyse("timeout --bogus 5 make");
        assert!(an.pieces[0].opaque.is_some());
    }

    #[test]
    fn more_wrappers_are_peeled() {
        for (src, inner) in [
            ("taskset 1 touch x", "touch x"),
            ("taskset -c 0-3 touch x", "touch x"),
            ("taskset -ac 0 touch x", "touch x"),
            ("chrt -i 0 touch x", "touch x"),
            ("chrt --rr 5 touch x", "touch x"),
            ("chrt -o touch x", "touch x"),
            ("setpriv -- touch x", "touch x"),
            ("setpriv --nnp --reuid 1000 touch x", "touch x"),
            ("setpriv --reuid=1000 --clear-groups touch x", "touch x"),
            ("flock f touch x", "touch x"),
            ("flock -n -w 5 f touch x", "touch x"),
            ("prlimit touch x", "touch x"),
            ("prlimit --nofile=1024 -c0 touch x", "touch x"),
            ("strace -o /dev/null touch x", "touch x"),
            ("strace -f -e trace=open -s 80 touch x", "touch x"),
            ("ltrace -o out touch x", "touch x"),
            ("valgrind touch x", "touch x"),
            ("valgrind --tool=memcheck -q touch x", "touch x"),
            ("gdb -batch -ex run --args touch x", "touch x"),
            ("numactl -N 0 --localalloc touch x", "touch x"),
            ("cgexec -g cpu:grp touch x", "touch x"),
            ("chroot / touch x", "touch x"),
            ("chroot --userspec=1:1 / touch x", "touch x"),
            ("runuser -u nobody -- touch x", "touch x"),
            ("unbuffer -p touch x", "touch x"),
            ("busybox touch x", "touch x"),
            ("catchsegv touch x", "touch x"),
            ("fakeroot -- touch x", "touch x"),
            ("firejail --noprofile --net=none touch x", "touch x"),
            ("nsenter -t 1 -m touch x", "touch x"),
            ("unshare -r -n touch x", "touch x"),
            ("unshare --mount-proc -fp touch x", "touch x"),
            ("systemd-run --user --scope touch x", "touch x"),
            ("run0 touch x", "touch x"),
            ("taskset 1 nice -n 5 setpriv -- touch x", "touch x"),
        ] {
            assert_eq!(
                commands(src).last().map(String::as_str),
                Some(inner),
                "{src}"
            );
        }
        // Command strings for a shell.
        for (src, inner) in [
            ("flock f -c 'touch x'", "touch x"),
            ("sg staff 'touch x'", "touch x"),
            ("sg - staff -c 'touch x'", "touch x"),
            ("su -lc 'touch x'", "touch x"),
            ("su --comm='touch x'", "touch x"),
            ("su root -- -c 'touch x'", "touch x"),
            ("runuser root -c 'touch x'", "touch x"),
            ("script -qc 'touch x' /dev/null", "touch x"),
            ("script --command 'touch x'", "touch x"),
        ] {
            assert_eq!(commands(src), [inner], "{src}");
        }
        // Used to change a running process, or with nothing to run.
        for src in [
            "taskset -p 1 123",
            "chrt -p 5 123",
            "prlimit --pid 1",
            "chroot /",
        ] {
            assert_eq!(commands(src), [src], "{src}");
        }
    }

    #[test]
    fn unreadable_wrappers_are_opaque_and_guessed() {
        for src in [
            "perf stat touch x",
            "perf record -g touch x",
            "setpriv --reu=1 touch x",
            "env --ign touch x",
            "strace --bogus touch x",
        ] {
            let an = analyse(src);
            assert!(an.pieces[0].opaque.is_some(), "{src}");
            assert!(
                an.pieces.iter().any(|p| p.command_name() == Some("touch")),
                "{src}: {:?}",
                commands(src)
            );
        }
        // Guesses do not multiply.
        let an = analyse("perf stat perf stat perf stat touch x");
        assert!(an.pieces.len() <= 8, "{}", an.pieces.len());
        let long = format!("perf stat {}", "a ".repeat(40));
        assert!(!analyse(&long).malformed.is_empty());
        // Wrappers that set a variable changing what runs.
        assert!(
            analyse("strace -E LD_PRELOAD=x.so ls").pieces[0]
                .opaque
                .is_some()
        );
        assert!(analyse("gdb --args ls").pieces[0].opaque.is_some());
        assert!(analyse("strace -o out ls").pieces[0].opaque.is_none());
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
