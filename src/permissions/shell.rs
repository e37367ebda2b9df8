//! A conservative lexer for the part of bash syntax that matters to
//! permission rules: where one command ends and the next begins, what each
//! word is after quote removal, and which words the shell would still expand
//! at run time.
//!
//! It is not a shell. Where it cannot follow the syntax (an unterminated
//! quote, a stray `)`), it records an error and carries on, so the caller can
//! refuse to vouch for the command instead of guessing. Everything that runs
//! a command of its own (`$( … )`, backticks, `<( … )`, unquoted heredoc
//! bodies, arithmetic that might be a subshell) becomes a piece of its own.

/// How deep substitutions, backticks and `bash -c` payloads may nest before
/// the command is declared unreadable.
pub(crate) const MAX_DEPTH: usize = 24;

/// One shell word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Word {
    /// Quotes and escapes removed; expansions kept verbatim (`$HOME`,
    /// `$(date)`), so rules written the same way compare equal.
    pub text: String,
    /// The shell passes `text` through unchanged: no parameter, command or
    /// arithmetic expansion, no glob, tilde or brace expansion.
    pub literal: bool,
    /// Contains a parameter, command or arithmetic substitution: its value
    /// is computed when the command runs.
    pub computed: bool,
    /// Some part of it was quoted or escaped (so `"if"` is no keyword).
    pub quoted: bool,
    /// Char indices in `text` of unquoted `*` (rule patterns use them).
    pub stars: Vec<usize>,
    /// `NAME=value` with an unquoted `NAME=`: an assignment when it leads a
    /// command.
    pub assignment: bool,
}

impl Word {
    /// An unquoted, literal word equal to `keyword` (`if`, `{`, `!` …).
    pub fn is_keyword(&self, keyword: &str) -> bool {
        self.literal && !self.quoted && self.text == keyword
    }

    /// The variable name of an assignment word (`a` of `a[i]=v`).
    pub fn assigned_name(&self) -> Option<&str> {
        let (name, _) = self.assigned()?;
        Some(subscripted(name).map_or(name, |(name, _)| name))
    }

    /// The subscript of an array element's assignment (`i` of `a[i]=v`).
    pub fn assigned_subscript(&self) -> Option<&str> {
        let (name, _) = self.assigned()?;
        subscripted(name).map(|(_, subscript)| subscript)
    }

    /// What an assignment word assigns to (`a[i]`, `+` dropped) and its
    /// value. A subscript may hold `=` itself (`a[x==1]=v`).
    fn assigned(&self) -> Option<(&str, &str)> {
        if !self.assignment {
            return None;
        }
        let end = match self.text.find('[') {
            Some(open)
                if self.text[..open]
                    .chars()
                    .all(|c| c == '_' || c.is_ascii_alphanumeric()) =>
            {
                open + self.text[open..].find("]").map_or(0, |close| close + 1)
            }
            _ => 0,
        };
        let at = end + self.text[end..].find('=')?;
        let name = &self.text[..at];
        Some((name.strip_suffix('+').unwrap_or(name), &self.text[at + 1..]))
    }
}

/// `name[subscript]` split in two, when the text is one.
fn subscripted(text: &str) -> Option<(&str, &str)> {
    let (name, rest) = text.split_once('[')?;
    Some((name, rest.strip_suffix(']')?))
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A redirection: `2>>`, `&>`, `<<`, `>&` … and its target word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    pub op: String,
    pub target: Word,
    /// A heredoc's: set when its body, read after the line ends, expands
    /// substitutions or parameters (`<<EOF` around `$(curl …)`). Shared
    /// with the lexer's list of heredocs waiting for their bodies.
    heredoc_computed: Option<BodyFlag>,
    /// A heredoc's: set when its body, unquoted, makes bash evaluate a
    /// variable's value as an expression (`$((x))`, `${a[x]}`, `${x@P}`
    /// in the body), as [`evaluates_code`] tells of a word.
    heredoc_evaluates: Option<BodyFlag>,
    /// A heredoc's: set when its body, unquoted, assigns a variable as it
    /// expands (`${NAME:=value}`).
    heredoc_assigns: Option<BodyFlag>,
}

/// Whether a heredoc's body expands something: known once the line ends,
/// after its redirect was recorded, so the lexer keeps a second handle.
/// Compared by value.
#[derive(Debug, Clone, Default)]
struct BodyFlag(Arc<AtomicBool>);

impl BodyFlag {
    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, value: bool) {
        self.0.store(value, Ordering::Relaxed)
    }
}

/// What a heredoc's body does, told once it is read.
#[derive(Debug, Clone, Default)]
struct Body {
    computed: BodyFlag,
    evaluates: BodyFlag,
    assigns: BodyFlag,
}

impl PartialEq for BodyFlag {
    fn eq(&self, other: &BodyFlag) -> bool {
        self.get() == other.get()
    }
}

impl Eq for BodyFlag {}

impl Redirect {
    /// An unquoted heredoc whose body evaluates a variable's value as an
    /// expression (see [`Redirect::heredoc_evaluates`]).
    pub fn body_evaluates_code(&self) -> bool {
        self.heredoc_evaluates.as_ref().is_some_and(|e| e.get())
    }

    /// An unquoted heredoc whose body assigns a variable as it expands
    /// (`${NAME:=value}`): the variable is set in the shell that reads
    /// the body when the command is a builtin.
    pub fn body_assigns(&self) -> bool {
        self.heredoc_assigns.as_ref().is_some_and(|a| a.get())
    }

    /// Feeds the command's stdin text computed when it runs: a here-string
    /// (`<<< "$(curl …)"`) or an unquoted heredoc whose body expands
    /// something.
    pub fn feeds_computed_text(&self) -> bool {
        (self.normalised_op() == "<<<" && self.target.computed)
            // `< <(…)`: what a process substitution prints.
            || (self.normalised_op() == "<" && self.target.text.starts_with("<("))
            || self.heredoc_computed.as_ref().is_some_and(|c| c.get())
    }

    /// Feeds the command's standard input from the line: a file, a
    /// heredoc or a here-string (`< f`, `<<EOF`, `<<< text`).
    pub fn feeds_stdin(&self) -> bool {
        matches!(self.normalised_op(), "<" | "<<" | "<<-" | "<<<")
    }

    /// Writes somewhere (as opposed to reading or duplicating a descriptor).
    pub fn writes(&self) -> bool {
        let op = self.op.trim_start_matches(|c: char| c.is_ascii_digit());
        matches!(op, ">" | ">>" | ">|" | "&>" | "&>>" | "<>")
            || (op == ">&" && !is_fd(&self.target))
    }

    /// Cannot change anything a rule cares about: discarding output, or
    /// duplicating one descriptor onto another (`2>&1`).
    pub fn harmless(&self) -> bool {
        let op = self.op.trim_start_matches(|c: char| c.is_ascii_digit());
        self.target.literal
            && (self.target.text == "/dev/null" || (op.ends_with('&') && is_fd(&self.target)))
    }

    /// The operator without a default descriptor (`1>` is `>`, `0<` is `<`).
    pub fn normalised_op(&self) -> &str {
        if let Some(rest) = self.op.strip_prefix('1')
            && rest.starts_with('>')
        {
            return rest;
        }
        if let Some(rest) = self.op.strip_prefix('0')
            && rest.starts_with('<')
        {
            return rest;
        }
        &self.op
    }
}

fn is_fd(word: &Word) -> bool {
    word.literal
        && (word.text == "-"
            || (!word.text.is_empty() && word.text.bytes().all(|b| b.is_ascii_digit())))
}

/// One simple command as the lexer saw it: words, redirections, and where
/// it stands in its pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawPiece {
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    /// The source text of the piece, trimmed.
    pub text: String,
    /// Pieces joined by `|` share a pipeline id; `stage` is the position.
    pub pipeline: usize,
    pub stage: usize,
    /// Found only by reading `$(( … ))` as if it were a subshell: checked
    /// against deny rules and the dangerous list, never needs an allow rule.
    pub shadow: bool,
}

/// The pieces of a command line, in the order the lexer finished them
/// (substitutions before the command that contains them).
#[derive(Debug, Default)]
pub(crate) struct Lexed {
    pub pieces: Vec<RawPiece>,
    pub errors: Vec<String>,
    /// A `|` or `|&` joins two commands somewhere (a subshell or group
    /// after it leaves no piece of its own at the later stage).
    pub pipes: bool,
}

/// Split `src` into pieces. `next_pipeline` numbers pipelines across several
/// calls (payloads of `bash -c` are lexed separately); `depth` counts how
/// deeply this text is nested already.
pub(crate) fn lex(src: &str, next_pipeline: &mut usize, depth: usize) -> Lexed {
    let mut lexer = Lexer {
        src: src.chars().collect(),
        pos: 0,
        depth,
        shadow: false,
        next_pipeline: *next_pipeline,
        out: Lexed::default(),
        assigning: false,
        heredocs: Vec::new(),
        heredoc_body: false,
    };
    lexer.list(None);
    *next_pipeline = lexer.next_pipeline;
    lexer.out
}

struct Lexer {
    src: Vec<char>,
    pos: usize,
    depth: usize,
    /// Pieces found here are shadows (see [`RawPiece::shadow`]).
    shadow: bool,
    next_pipeline: usize,
    out: Lexed,
    /// The word being read stands where an assignment may (before the
    /// command's name), so `a[…]=` is read whole.
    assigning: bool,
    /// Heredocs opened on the current line: (delimiter, strip tabs, quoted,
    /// the redirect's flags for what its body does).
    heredocs: Vec<(String, bool, bool, Body)>,
    /// The text is an unquoted heredoc's body: read as in double quotes,
    /// but `\"` is no escape there, in backticks either.
    heredoc_body: bool,
}

/// A piece being built.
struct Builder {
    words: Vec<Word>,
    redirects: Vec<Redirect>,
    start: Option<usize>,
    end: usize,
    pipeline: usize,
    stage: usize,
}

#[derive(Default)]
struct WordBuilder {
    word: Word,
    /// Some quoting seen before the first `=` (so no assignment).
    quoted_before_eq: bool,
    brace: bool,
    /// An unquoted `[` was seen (a later `]` makes a glob).
    bracket: bool,
}

impl WordBuilder {
    fn new() -> Self {
        WordBuilder {
            word: Word {
                literal: true,
                ..Word::default()
            },
            ..WordBuilder::default()
        }
    }

    fn push(&mut self, c: char) {
        self.word.text.push(c);
    }

    fn push_quoted(&mut self, c: char) {
        self.word.quoted = true;
        if !self.word.text.contains('=') {
            self.quoted_before_eq = true;
        }
        self.word.text.push(c);
    }

    fn push_computed(&mut self, raw: &str) {
        self.word.literal = false;
        self.word.computed = true;
        if !self.word.text.contains('=') {
            self.quoted_before_eq = true;
        }
        self.word.text.push_str(raw);
    }

    fn finish(mut self) -> Word {
        if self.brace && self.word.text != "{" && self.word.text != "}" {
            self.word.literal = false;
        }
        self.word
    }
}

/// Nothing but reserved words so far (`if`, `while`, `!` …): a `(` here
/// opens a subshell, or `((` arithmetic, as at a command's start.
fn at_command_start(b: &Builder) -> bool {
    b.redirects.is_empty() && opening_only(&b.words)
}

/// Words that are all reserved words a command may follow (`function
/// NAME` among them: a function's body is a compound command, `case` too).
fn opening_only(words: &[Word]) -> bool {
    const OPENING: [&str; 11] = [
        "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "coproc",
    ];
    let mut named = false;
    words.iter().all(|w| {
        if std::mem::take(&mut named) {
            return true; // the name after `function`
        }
        named = w.is_keyword("function");
        named || OPENING.iter().any(|k| w.is_keyword(k))
    })
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Ends an unquoted word.
fn is_meta(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'
    )
}

/// Whether expanding `word` makes bash evaluate a variable's value as an
/// expression, where an array subscript runs command substitutions: so a
/// variable holding `a[$(cmd)]` runs `cmd`. That happens in arithmetic
/// naming a variable (`$((x))`, `$[x]`, `$(( $x ))`), in an indexed
/// array's subscript or a substring's offset (`${a[x]}`, `${s:x}`), and in
/// indirect and prompt expansion (`${!x}`, `${x@P}`).
pub(crate) fn evaluates_code(word: &Word) -> bool {
    word.computed && text_evaluates_code(&word.text)
}

/// How deep brackets (`(`, `[`, `{`, of any kind, quoted or not) may nest
/// in a text that the checks below scan expansion by expansion. Each scan
/// reads what one expansion encloses, so a text nesting thousands deep
/// would cost its length times its depth; the lexer refuses expansions
/// nesting deeper than [`MAX_DEPTH`] anyway, so a line this deep is
/// malformed, and the checks answer for it without reading it.
const MAX_SCANNED_NESTING: usize = 4 * MAX_DEPTH;

/// Whether brackets nest deeper than [`MAX_SCANNED_NESTING`] in `chars`.
pub(crate) fn nests_too_deeply(chars: &[char]) -> bool {
    let mut depth = 0usize;
    for &c in chars {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_SCANNED_NESTING {
                    return true;
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// [`evaluates_code`] on a word's text, expansions kept verbatim.
fn text_evaluates_code(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    if nests_too_deeply(&chars) {
        return true;
    }
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' {
            i += 1;
            continue;
        }
        let rest = &chars[i + 1..];
        let evaluates = match rest {
            ['(', '(', ..] => names_a_variable(enclosed(&rest[1..], '(', ')')),
            ['[', ..] => names_a_variable(enclosed(rest, '[', ']')),
            ['{', ..] => parameter_evaluates(enclosed(rest, '{', '}')),
            _ => false,
        };
        if evaluates {
            return true;
        }
        i += 1;
    }
    false
}

/// The variables a word's expansions assign: `NAME` of each
/// `${NAME:=word}` or `${NAME=word}` (which set NAME when it is unset, or
/// empty).
pub(crate) fn assigned_by_expansion(word: &Word) -> Vec<String> {
    if !word.computed {
        return Vec::new();
    }
    assigned_in_text(&word.text.chars().collect::<Vec<_>>())
}

/// [`assigned_by_expansion`] of a text as bash expands it (none read in a
/// text that [`nests_too_deeply`], which the lexer has refused).
fn assigned_in_text(chars: &[char]) -> Vec<String> {
    let mut names = Vec::new();
    if nests_too_deeply(chars) {
        return names;
    }
    for (i, pair) in chars.windows(2).enumerate() {
        if pair != ['$', '{'] {
            continue;
        }
        let inside = enclosed(&chars[i + 1..], '{', '}');
        let end = inside
            .iter()
            .position(|&c| !(c == '_' || c.is_ascii_alphanumeric()))
            .unwrap_or(inside.len());
        // An array element's (`${NAME[0]:=…}`) sets the variable too.
        let after = match &inside[end..] {
            ['[', ..] => {
                let subscript = enclosed(&inside[end..], '[', ']');
                &inside[(end + subscript.len() + 2).min(inside.len())..]
            }
            rest => rest,
        };
        if matches!(after, ['=', ..] | [':', '=', ..]) {
            names.push(inside[..end].iter().collect());
        }
    }
    names
}

/// What `open` (at `chars[0]`) encloses up to its matching `close` (or the
/// end of the text).
pub(crate) fn enclosed(chars: &[char], open: char, close: char) -> &[char] {
    let mut depth = 0usize;
    for (i, &c) in chars.iter().enumerate() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return &chars[1..i];
            }
        }
    }
    &chars[1.min(chars.len())..]
}

/// An arithmetic expression that reads a variable: a name (not a digit of
/// a number such as `0x1f` or `16#ff`), or any expansion.
pub(crate) fn names_a_variable(expression: &[char]) -> bool {
    expression.iter().enumerate().any(|(i, &c)| {
        let starts_name = (c == '_' || c.is_ascii_alphabetic())
            && (i == 0 || {
                let before = expression[i - 1];
                !(before.is_ascii_alphanumeric() || before == '_' || before == '#')
            });
        starts_name || c == '$' || c == '`'
    })
}

/// The inside of `${…}`: indirect (`!`), prompt expansion (`@P`), or a
/// subscript or substring offset that reads a variable.
fn parameter_evaluates(inside: &[char]) -> bool {
    if inside.first() == Some(&'!') {
        return true;
    }
    if inside.windows(2).any(|w| w == ['@', 'P']) {
        return true;
    }
    // `${#name[…]}`: the length of what follows, whose subscript is
    // evaluated the same way.
    let inside = match inside {
        ['#', rest @ ..] if !rest.is_empty() => rest,
        _ => inside,
    };
    // A special parameter (`${@:x}`, `${*:x:1}`) has a one-character name.
    let name_end = match inside.first() {
        Some('@' | '*' | '#' | '?' | '-' | '$') => 1,
        _ => inside
            .iter()
            .position(|&c| !(c == '_' || c.is_ascii_alphanumeric()))
            .unwrap_or(inside.len()),
    };
    let mut rest = &inside[name_end..];
    if rest.first() == Some(&'[') {
        let subscript = enclosed(rest, '[', ']');
        if subscript != ['@'] && subscript != ['*'] && names_a_variable(subscript) {
            return true;
        }
        rest = &rest[(subscript.len() + 2).min(rest.len())..];
    }
    // `${s:offset:length}` (not `${s:-word}` and its kin).
    match rest {
        [':', next, ..] if !matches!(next, '-' | '=' | '?' | '+') => names_a_variable(&rest[1..]),
        _ => false,
    }
}

pub(crate) fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

impl Lexer {
    /// The character at `pos`, after the line joins there: bash removes
    /// each backslash-newline before it reads a token (outside single
    /// quotes, `$'…'`, comments and quoted heredoc bodies, which read
    /// [`Lexer::peek_raw`]), so `$\⏎(…)` is a substitution and `&\⏎&`
    /// an `&&`. The pair is taken out of the text, so what is sliced from
    /// it later (an expansion kept verbatim) reads as bash reads it. At
    /// `pos` is never a backslash escaped by the one before it: the
    /// lexer reads an escaped character with `peek_raw`.
    fn peek(&mut self) -> Option<char> {
        self.join_at(self.pos);
        self.src.get(self.pos).copied()
    }

    /// [`Lexer::peek`] `n` characters on, joining lines on the way but for
    /// the character after an escaping backslash (`\\⏎` is a backslash,
    /// escaped, and a newline).
    fn peek_at(&mut self, n: usize) -> Option<char> {
        let mut at = self.pos;
        self.join_at(at);
        let mut escaped = false;
        for _ in 0..n {
            let escaping = !escaped && self.src.get(at) == Some(&'\\');
            at += 1;
            if !escaping {
                self.join_at(at);
            }
            escaped = escaping;
        }
        self.src.get(at).copied()
    }

    /// The character at `pos` as written: in single quotes, `$'…'`,
    /// comments and heredoc bodies, and right after an escaping backslash.
    fn peek_raw(&self) -> Option<char> {
        self.src.get(self.pos).copied()
    }

    /// Take the backslash-newline pairs starting at `at` out of the text.
    fn join_at(&mut self, at: usize) {
        while self.src.get(at) == Some(&'\\') && self.src.get(at + 1) == Some(&'\n') {
            self.src.drain(at..at + 2);
        }
    }

    fn slice(&self, from: usize, to: usize) -> String {
        let to = to.min(self.src.len());
        self.src[from.min(to)..to].iter().collect()
    }

    fn error(&mut self, message: impl Into<String>) {
        self.out.errors.push(message.into());
    }

    fn new_builder(&mut self) -> Builder {
        let pipeline = self.next_pipeline;
        self.next_pipeline += 1;
        Builder {
            words: Vec::new(),
            redirects: Vec::new(),
            start: None,
            end: 0,
            pipeline,
            stage: 0,
        }
    }

    fn finish(&mut self, b: &mut Builder) {
        if b.words.is_empty() && b.redirects.is_empty() {
            return;
        }
        let start = b.start.unwrap_or(b.end);
        let text = self.slice(start, b.end).trim().to_string();
        self.out.pieces.push(RawPiece {
            words: std::mem::take(&mut b.words),
            redirects: std::mem::take(&mut b.redirects),
            text,
            pipeline: b.pipeline,
            stage: b.stage,
            shadow: self.shadow,
        });
        b.start = None;
    }

    /// The text nests deeper than [`MAX_DEPTH`]: it cannot be checked, and
    /// the rest of it is not read (each level it is in ends there), so
    /// that a line nesting thousands deep costs no more than one nesting
    /// [`MAX_DEPTH`] deep.
    fn too_deep(&mut self) {
        self.error("the command nests substitutions too deeply to be checked");
        self.pos = self.src.len();
    }

    /// Run `f` one level deeper, unless that is too deep.
    fn nested(&mut self, f: impl FnOnce(&mut Lexer)) -> bool {
        if self.depth >= MAX_DEPTH {
            self.too_deep();
            return false;
        }
        self.depth += 1;
        f(self);
        self.depth -= 1;
        true
    }

    /// The command list of a `$( … )`, `<( … )` or `>( … )`, up to its
    /// `)`. bash parses it as a program of its own: a heredoc opened before
    /// it on the line takes its body from the lines after the whole line,
    /// not from the lines inside it (which are commands), so the heredocs
    /// waiting outside are set aside meanwhile. A heredoc opened inside and
    /// left without a body there (`$(cat <<E)`) takes its body at once from
    /// the physical lines after the one the `)` is on: bash reads it as the
    /// substitution closes, before the rest of the line (which may go on
    /// over later lines: a quote, a line join) and before the heredocs
    /// opened outside (`cat <<A $(cat <<B) <<C` reads B, then A, then C).
    /// Those lines are taken out of the text here as bash takes them out
    /// of its input.
    fn substitution(&mut self) {
        let outside = std::mem::take(&mut self.heredocs);
        self.nested(|l| l.list(Some(')')));
        if !self.heredocs.is_empty() {
            let after = self.src[self.pos.min(self.src.len())..]
                .iter()
                .position(|&c| c == '\n')
                .map(|at| self.pos + at + 1);
            let resume = self.pos;
            self.pos = after.unwrap_or(self.src.len());
            let bodies = self.pos;
            self.read_heredocs();
            let end = self.pos;
            self.src.drain(bodies..end);
            self.pos = resume;
        }
        self.heredocs = outside;
    }

    /// Lex a separate text (backtick content, a heredoc body) with the same
    /// pipeline numbering, one level deeper. `quoted_body`: the text is the
    /// inside of double quotes (only substitutions matter). Returns whether
    /// the text expands anything when it runs (always, for a list of
    /// commands, and when it nests too deeply to tell).
    fn sub_lex(&mut self, text: &str, quoted_body: bool, shadow: bool) -> bool {
        self.sub_lex_as(text, quoted_body, shadow, false)
    }

    /// [`sub_lex`](Self::sub_lex), `heredoc_body` telling an unquoted
    /// heredoc's body.
    fn sub_lex_as(
        &mut self,
        text: &str,
        quoted_body: bool,
        shadow: bool,
        heredoc_body: bool,
    ) -> bool {
        if self.depth >= MAX_DEPTH {
            self.too_deep();
            return true;
        }
        let mut sub = Lexer {
            src: text.chars().collect(),
            pos: 0,
            depth: self.depth + 1,
            shadow: self.shadow || shadow,
            next_pipeline: self.next_pipeline,
            out: Lexed::default(),
            assigning: false,
            heredocs: Vec::new(),
            heredoc_body,
        };
        let computed = if quoted_body {
            let mut scratch = WordBuilder::new();
            sub.double_quoted(&mut scratch, None);
            scratch.finish().computed
        } else {
            sub.list(None);
            true
        };
        self.next_pipeline = sub.next_pipeline;
        self.out.pieces.extend(sub.out.pieces);
        // Reading arithmetic as commands is a guess: its failures say
        // nothing about the command itself.
        if !sub.shadow {
            self.out.errors.extend(sub.out.errors);
        }
        computed
    }

    /// Move to the end of the physical line, up to (not past) its newline,
    /// joining nothing: the rest of a comment (a backslash at its end
    /// continues no line), a line of a heredoc's body.
    fn skip_to_line_end(&mut self) {
        while !matches!(self.peek_raw(), None | Some('\n')) {
            self.pos += 1;
        }
    }

    /// Skip blanks and line continuations.
    /// Past blanks and newlines; at each newline the heredocs opened
    /// before it take their bodies.
    fn skip_blank_lines(&mut self) {
        loop {
            match self.peek() {
                Some(c) if is_blank(c) => self.pos += 1,
                Some('\n') => {
                    self.pos += 1;
                    self.read_heredocs();
                }
                _ => return,
            }
        }
    }

    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(c) if is_blank(c) => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                _ => return,
            }
        }
    }

    /// A command list, up to `closer` (`)` for subshells and `$( … )`) or
    /// the end of the text.
    fn list(&mut self, closer: Option<char>) {
        let mut b = self.new_builder();
        // `case` statements open in this list: their patterns (`x)`, `(a
        // | b)`) are words, not commands or subshells.
        let mut cases = 0usize;
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                if closer.is_some() {
                    self.error("a `(` or `$(` is never closed");
                }
                if cases > 0 {
                    self.error("a `case` is never closed by `esac`");
                }
                self.finish(&mut b);
                return;
            };
            if Some(c) == closer {
                if cases > 0 {
                    self.error("a `case` is never closed by `esac`");
                }
                self.pos += 1;
                self.finish(&mut b);
                return;
            }
            let at = self.pos;
            match c {
                '\n' => {
                    self.pos += 1;
                    self.finish(&mut b);
                    self.read_heredocs();
                    b = self.new_builder();
                }
                ';' => {
                    self.pos += 1;
                    let mut ends_clause = false;
                    if matches!(self.peek(), Some(';') | Some('&')) {
                        ends_clause = true;
                        self.pos += 1;
                        if self.peek() == Some('&') {
                            self.pos += 1;
                        }
                    }
                    self.finish(&mut b);
                    b = self.new_builder();
                    // `;;`, `;&`, `;;&` end a case clause: patterns follow.
                    if ends_clause && cases > 0 && self.case_patterns() {
                        cases -= 1;
                    }
                }
                '&' if self.peek_at(1) == Some('>') => self.redirect(&mut b, String::new()),
                '&' => {
                    self.pos += if self.peek_at(1) == Some('&') { 2 } else { 1 };
                    self.finish(&mut b);
                    b = self.new_builder();
                }
                '|' => {
                    self.pos += 1;
                    if self.peek() == Some('|') {
                        self.pos += 1;
                        self.finish(&mut b);
                        b = self.new_builder();
                    } else {
                        if self.peek() == Some('&') {
                            self.pos += 1;
                        }
                        self.out.pipes = true;
                        let (pipeline, stage) = (b.pipeline, b.stage);
                        self.finish(&mut b);
                        b = Builder {
                            words: Vec::new(),
                            redirects: Vec::new(),
                            start: None,
                            end: self.pos,
                            pipeline,
                            stage: stage + 1,
                        };
                    }
                }
                '(' if self.peek_at(1) == Some('(')
                    && b.redirects.is_empty()
                    && (opening_only(&b.words)
                        || b.words.split_last().is_some_and(|(last, before)| {
                            last.is_keyword("for") && opening_only(before)
                        })) =>
                {
                    // `(( … ))` (and `for (( …; …; … ))`): arithmetic, read
                    // as `$(( … ))` is (its `<<` is a shift, not a heredoc
                    // taking the lines after it), substitutions inside it
                    // running.
                    self.pos += 2;
                    let content_start = self.pos;
                    self.arithmetic(false);
                    // It evaluates and assigns as `let` does (`(( PATH = 0
                    // ))`, `(( x ))` with `x='a[$(cmd)]'`), and is judged
                    // as `let` with its expression, shown as written.
                    let end = self.pos.saturating_sub(2).max(content_start);
                    let content = self.slice(content_start, end);
                    let first = self.out.pieces.len();
                    self.sub_lex(
                        &format!("let '{}'", content.replace('\'', "'\\''")),
                        false,
                        false,
                    );
                    let written = format!("(({content}))");
                    if let Some(piece) = self.out.pieces[first..]
                        .iter_mut()
                        .rev()
                        .find(|p| !p.shadow && p.words.first().is_some_and(|w| w.text == "let"))
                    {
                        piece.text = written;
                    }
                    b = self.new_builder();
                }
                '(' if at_command_start(&b) => {
                    // A subshell.
                    self.pos += 1;
                    self.nested(|l| l.list(Some(')')));
                    b = self.new_builder();
                }
                '(' if b
                    .words
                    .last()
                    .is_some_and(|w| w.assignment && w.text.ends_with('=')) =>
                {
                    // An array assignment: `a=( … )`.
                    self.pos += 1;
                    loop {
                        // bash reads the bodies of the heredocs opened
                        // before at the first newline.
                        self.skip_blank_lines();
                        match self.peek() {
                            None => {
                                self.error("an array `(` is never closed");
                                break;
                            }
                            Some(')') => {
                                self.pos += 1;
                                break;
                            }
                            Some(c) if is_meta(c) && !matches!(c, '<' | '>') => self.pos += 1,
                            // A comment, to the end of its line.
                            Some('#') => {
                                self.skip_to_line_end();
                            }
                            Some(_) => {
                                let before = self.pos;
                                self.word();
                                if self.pos == before {
                                    self.pos += 1;
                                }
                            }
                        }
                    }
                    let raw = self.slice(at, self.pos);
                    if let Some(last) = b.words.last_mut() {
                        last.text.push_str(&raw);
                        last.literal = false;
                        last.computed = true;
                    }
                    b.end = self.pos;
                }
                '(' => {
                    // `name()` starts a function definition: the name is no
                    // command. Anything else here is a syntax error.
                    self.pos += 1;
                    self.skip_blanks();
                    if self.peek() == Some(')') {
                        self.pos += 1;
                        b.words.clear();
                        b.start = None;
                    } else {
                        self.error("unexpected `(` inside a command");
                        self.finish(&mut b);
                        b = self.new_builder();
                    }
                }
                ')' => {
                    self.pos += 1;
                    self.error("a `)` closes nothing");
                    self.finish(&mut b);
                    b = self.new_builder();
                }
                // A comment: a backslash at its end continues no line.
                '#' => {
                    self.skip_to_line_end();
                }
                '<' | '>' if self.peek_at(1) != Some('(') => self.redirect(&mut b, String::new()),
                _ => {
                    // `a[…]=v` is read whole only where an assignment may
                    // stand: before the command's name.
                    let outer = std::mem::replace(
                        &mut self.assigning,
                        b.words.iter().all(|w| w.assignment),
                    );
                    let word = self.word();
                    self.assigning = outer;
                    let fd_prefix = !word.quoted
                        && word.literal
                        && !word.text.is_empty()
                        && word.text.bytes().all(|c| c.is_ascii_digit())
                        && matches!(self.peek(), Some('<') | Some('>'))
                        && self.peek_at(1) != Some('(');
                    // `esac` where a command would start ends a case.
                    if cases > 0
                        && b.words.is_empty()
                        && b.redirects.is_empty()
                        && word.is_keyword("esac")
                    {
                        cases -= 1;
                        continue;
                    }
                    // `{NAME}>f` opens a descriptor into variable NAME,
                    // which may be any (`{PATH}`), or an array element
                    // whose subscript bash evaluates (`{a[x]}`).
                    let names_descriptor = !word.quoted
                        && word.text.len() > 2
                        && word.text.starts_with('{')
                        && word.text.ends_with('}')
                        && matches!(self.peek(), Some('<') | Some('>'))
                        && self.peek_at(1) != Some('(');
                    if names_descriptor {
                        self.error(format!(
                            "`{}` before a redirection assigns a variable the number of the descriptor it opens: not read with confidence",
                            word.text
                        ));
                    }
                    b.start.get_or_insert(at);
                    if fd_prefix || names_descriptor {
                        self.redirect(&mut b, word.text);
                    } else {
                        b.words.push(word);
                        b.end = self.pos;
                    }
                    // `case WORD in`: the patterns follow.
                    let n = b.words.len();
                    // A keyword only where a command starts: after a
                    // redirection, `case` is a command's name.
                    if n >= 3
                        && b.redirects.is_empty()
                        && b.words[n - 3].is_keyword("case")
                        && b.words[n - 1].is_keyword("in")
                        && opening_only(&b.words[..n - 3])
                    {
                        self.finish(&mut b);
                        b = self.new_builder();
                        if !self.case_patterns() {
                            cases += 1;
                        }
                    }
                }
            }
        }
    }

    /// A case clause's patterns, up to their `)` (`x)`, `(a | b)`, `*)`),
    /// read as words (their substitutions run), or the `esac` that ends
    /// the case instead: returns whether it was `esac`.
    fn case_patterns(&mut self) -> bool {
        loop {
            // A line ends: the heredocs opened on it take their bodies
            // from the lines after it, before any pattern.
            self.skip_blank_lines();
            if self.peek() == Some('#') {
                self.skip_to_line_end();
                continue;
            }
            break;
        }
        // Read through line joins, as bash reads it (`es\⏎ac`).
        let esac = self.peek() == Some('e')
            && self.peek_at(1) == Some('s')
            && self.peek_at(2) == Some('a')
            && self.peek_at(3) == Some('c')
            && self.peek_at(4).is_none_or(is_meta);
        if esac {
            self.pos += 4;
            return true;
        }
        if self.peek() == Some('(') {
            self.pos += 1;
        }
        loop {
            self.skip_blanks();
            match self.peek() {
                None | Some('\n') => {
                    self.error("a case pattern is never closed by `)`");
                    return false;
                }
                Some(')') => {
                    self.pos += 1;
                    return false;
                }
                Some('|') => self.pos += 1,
                // A comment: the pattern is not closed on its line.
                Some('#') => {
                    self.skip_to_line_end();
                }
                Some(_) => {
                    let before = self.pos;
                    let pattern = self.word();
                    if self.pos == before {
                        self.error("a case pattern holds what is no word");
                        self.pos += 1;
                    }
                    // A pattern is expanded as a word is: one that makes
                    // bash evaluate a variable's value runs what it says.
                    if evaluates_code(&pattern) {
                        self.error(format!(
                            "the case pattern `{}` makes bash evaluate a variable's value as an expression, which can run any command",
                            pattern.text
                        ));
                    }
                }
            }
        }
    }

    /// A redirection operator at `pos` (after an optional descriptor
    /// number), then its target word.
    fn redirect(&mut self, b: &mut Builder, mut op: String) {
        b.start.get_or_insert(self.pos - op.chars().count());
        let c = self.peek().unwrap_or('>');
        self.pos += 1;
        op.push(c);
        match c {
            '&' => {
                // `&>` or `&>>`
                self.pos += 1;
                op.push('>');
                if self.peek() == Some('>') {
                    self.pos += 1;
                    op.push('>');
                }
            }
            '>' => {
                if let Some(n @ ('>' | '|' | '&')) = self.peek() {
                    self.pos += 1;
                    op.push(n);
                }
            }
            _ => match self.peek() {
                Some('<') => {
                    self.pos += 1;
                    op.push('<');
                    if let Some(n @ ('<' | '-')) = self.peek() {
                        self.pos += 1;
                        op.push(n);
                    }
                }
                Some(n @ ('&' | '>')) => {
                    self.pos += 1;
                    op.push(n);
                }
                _ => {}
            },
        }
        self.skip_blanks();
        let target = match self.peek() {
            Some(c) if !is_meta(c) || (matches!(c, '<' | '>') && self.peek_at(1) == Some('(')) => {
                self.word()
            }
            _ => {
                self.error(format!("the redirection `{op}` has no target"));
                Word::default()
            }
        };
        let mut heredoc_computed = None;
        let mut heredoc_evaluates = None;
        let mut heredoc_assigns = None;
        // `<<<` is a here-string: its word is all of it.
        if (op.ends_with("<<") && !op.ends_with("<<<")) || op.ends_with("<<-") {
            if !target.literal {
                self.error(format!(
                    "the heredoc delimiter `{}` cannot be read with confidence",
                    target.text
                ));
            }
            let delimiter = target.text.clone();
            let flags = Body::default();
            heredoc_computed = Some(flags.computed.clone());
            heredoc_evaluates = Some(flags.evaluates.clone());
            heredoc_assigns = Some(flags.assigns.clone());
            self.heredocs
                .push((delimiter, op.ends_with('-'), target.quoted, flags));
        }
        b.redirects.push(Redirect {
            op,
            target,
            heredoc_computed,
            heredoc_evaluates,
            heredoc_assigns,
        });
        b.end = self.pos;
    }

    /// After a newline: consume the bodies of the heredocs opened on the
    /// line just ended. An unquoted body expands `$( … )` and backticks,
    /// and bash joins its lines continued by a backslash before it looks
    /// for the delimiter: `EO\⏎F` ends `<<EOF`, and what follows it is
    /// commands.
    fn read_heredocs(&mut self) {
        for (delimiter, strip_tabs, quoted, body_flags) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            let mut closed = false;
            while self.pos < self.src.len() {
                let mut line = String::new();
                loop {
                    let start = self.pos;
                    self.skip_to_line_end();
                    line.push_str(&self.slice(start, self.pos));
                    let newline = self.peek_raw() == Some('\n');
                    if newline {
                        self.pos += 1;
                    }
                    // An odd run of backslashes ends in one that escapes
                    // the newline (`\\` is a backslash, escaped).
                    let backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
                    if quoted || !newline || backslashes % 2 == 0 {
                        break;
                    }
                    line.pop();
                }
                let compared = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if compared == delimiter {
                    closed = true;
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            // bash takes the rest as the body too (and warns); but what
            // was read as a heredoc and never closed may be no heredoc at
            // all, with commands after it: the line is not read with
            // confidence.
            if !closed {
                self.error(format!(
                    "a heredoc is never closed by its delimiter `{delimiter}`"
                ));
            }
            if !quoted {
                body_flags
                    .computed
                    .set(self.sub_lex_as(&body, true, false, true));
                body_flags.evaluates.set(text_evaluates_code(&body));
                body_flags
                    .assigns
                    .set(!assigned_in_text(&body.chars().collect::<Vec<_>>()).is_empty());
            }
        }
    }

    /// One word, starting at `pos` (which is no metacharacter, except the
    /// `<(` / `>(` of a process substitution).
    fn word(&mut self) -> Word {
        let mut w = WordBuilder::new();
        while let Some(c) = self.peek() {
            match c {
                // Inside a word too: `--file=<(…)` is `--file=/dev/fd/63`.
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    let from = self.pos;
                    self.pos += 2;
                    self.substitution();
                    let raw = self.slice(from, self.pos);
                    w.push_computed(&raw);
                }
                c if is_meta(c) => break,
                '\\' => {
                    self.pos += 1;
                    match self.peek_raw() {
                        Some('\n') => self.pos += 1,
                        Some(e) => {
                            w.push_quoted(e);
                            self.pos += 1;
                        }
                        None => w.push('\\'),
                    }
                }
                '\'' => {
                    self.pos += 1;
                    w.word.quoted = true;
                    w.quoted_before_eq |= !w.word.text.contains('=');
                    loop {
                        match self.peek_raw() {
                            None => {
                                self.error("a single quote is never closed");
                                break;
                            }
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some(q) => {
                                w.push_quoted(q);
                                self.pos += 1;
                            }
                        }
                    }
                }
                '"' => {
                    self.pos += 1;
                    w.word.quoted = true;
                    w.quoted_before_eq |= !w.word.text.contains('=');
                    self.double_quoted(&mut w, Some('"'));
                }
                '$' => self.dollar(&mut w, false),
                '`' => self.backtick(&mut w, false),
                '*' | '?' => {
                    if c == '*' {
                        let index = w.word.text.chars().count();
                        w.word.stars.push(index);
                    }
                    w.word.literal = false;
                    w.push(c);
                    self.pos += 1;
                }
                // An array element's assignment, `a[1<<2]=3`: bash reads
                // its subscript (arithmetic) whole, metacharacters and
                // all; `<<` there is a shift, not a heredoc.
                '[' if self.assigning
                    && !w.word.quoted
                    && is_name(&w.word.text)
                    && self.subscript_assigns() =>
                {
                    w.push(c);
                    self.pos += 1;
                    let mut depth = 0usize;
                    while let Some(inner) = self.peek() {
                        match inner {
                            ']' if depth == 0 => break,
                            '[' => depth += 1,
                            ']' => depth -= 1,
                            _ => {}
                        }
                        match inner {
                            // Quotes are honoured, and what they hold is
                            // expanded as the subscript is.
                            '\'' | '"' => self.quoted_in_expression(&mut w),
                            '$' => self.dollar(&mut w, false),
                            '`' => self.backtick(&mut w, false),
                            '\\' => {
                                self.pos += 1;
                                if let Some(e) = self.peek_raw() {
                                    w.push_quoted(e);
                                    self.pos += 1;
                                }
                            }
                            _ => {
                                w.push(inner);
                                self.pos += 1;
                            }
                        }
                    }
                    w.word.literal = false;
                }
                // A bracket expression only when closed (`[[`, `]]` and a
                // lone `[` are plain words).
                '[' => {
                    w.bracket = true;
                    w.push(c);
                    self.pos += 1;
                }
                ']' => {
                    if w.bracket {
                        w.word.literal = false;
                    }
                    w.push(c);
                    self.pos += 1;
                }
                '~' if w.word.text.is_empty()
                    || (w.word.assignment && w.word.text.ends_with('=')) =>
                {
                    w.word.literal = false;
                    w.push(c);
                    self.pos += 1;
                }
                '{' | '}' => {
                    w.brace = true;
                    w.push(c);
                    self.pos += 1;
                }
                '=' => {
                    if !w.word.assignment && !w.quoted_before_eq && !w.word.text.contains('=') {
                        let name = w.word.text.strip_suffix('+').unwrap_or(&w.word.text);
                        // An array element's, `a[i]=v`, is one too.
                        let name = subscripted(name).map_or(name, |(name, _)| name);
                        w.word.assignment = is_name(name);
                    }
                    w.push(c);
                    self.pos += 1;
                }
                _ => {
                    w.push(c);
                    self.pos += 1;
                }
            }
        }
        w.finish()
    }

    /// At a `[` after a name: whether a `]` closing it on this line is
    /// followed by `=` or `+=` (an array element's assignment).
    fn subscript_assigns(&self) -> bool {
        let mut depth = 0usize;
        let mut at = self.pos + 1;
        while let Some(&c) = self.src.get(at) {
            match c {
                '\n' => return false,
                '\\' => at += 1,
                // Quotes, and substitutions, hide a `]`.
                '\'' | '"' => {
                    at += 1;
                    while let Some(&q) = self.src.get(at) {
                        if q == c {
                            break;
                        }
                        if q == '\\' && c == '"' {
                            at += 1;
                        }
                        at += 1;
                    }
                }
                '(' => {
                    let mut parens = 1usize;
                    while parens > 0 {
                        at += 1;
                        match self.src.get(at) {
                            None => return false,
                            Some('(') => parens += 1,
                            Some(')') => parens -= 1,
                            Some(_) => {}
                        }
                    }
                }
                '[' => depth += 1,
                ']' if depth == 0 => {
                    let next = self.src.get(at + 1).copied();
                    let after = self.src.get(at + 2).copied();
                    return next == Some('=') || (next == Some('+') && after == Some('='));
                }
                ']' => depth -= 1,
                _ => {}
            }
            at += 1;
        }
        false
    }

    /// The inside of double quotes, up to `terminator` (None: the end of the
    /// text, for heredoc bodies).
    fn double_quoted(&mut self, w: &mut WordBuilder, terminator: Option<char>) {
        loop {
            let Some(c) = self.peek() else {
                if terminator.is_some() {
                    self.error("a double quote is never closed");
                }
                return;
            };
            if Some(c) == terminator {
                self.pos += 1;
                return;
            }
            match c {
                '\\' => match self.peek_at(1) {
                    Some('\n') => self.pos += 2,
                    Some(e @ ('$' | '`' | '"' | '\\')) => {
                        w.push_quoted(e);
                        self.pos += 2;
                    }
                    _ => {
                        w.push_quoted('\\');
                        self.pos += 1;
                    }
                },
                '$' => self.dollar(w, true),
                '`' => self.backtick(w, true),
                _ => {
                    w.push_quoted(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `$` and what follows it.
    fn dollar(&mut self, w: &mut WordBuilder, in_double_quotes: bool) {
        let from = self.pos;
        self.pos += 1;
        match self.peek() {
            Some('\'') if !in_double_quotes => {
                self.pos += 1;
                self.ansi_c(w);
            }
            Some('"') if !in_double_quotes => {
                self.pos += 1;
                w.word.quoted = true;
                self.double_quoted(w, Some('"'));
            }
            Some('(') if self.peek_at(1) == Some('(') => {
                self.pos += 2;
                self.nested(|l| l.arithmetic(in_double_quotes));
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            Some('(') => {
                self.pos += 1;
                self.substitution();
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            // `$[…]`: bash's old arithmetic expansion.
            Some('[') => {
                self.pos += 1;
                self.nested(|l| l.old_arithmetic(in_double_quotes));
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            Some('{') => {
                self.pos += 1;
                self.nested(|l| l.parameter_expansion(in_double_quotes));
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                while matches!(self.peek(), Some(c) if c == '_' || c.is_ascii_alphanumeric()) {
                    self.pos += 1;
                }
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
                self.pos += 1;
                let raw = self.slice(from, self.pos);
                w.push_computed(&raw);
            }
            _ => {
                if in_double_quotes {
                    w.push_quoted('$');
                } else {
                    w.push('$');
                }
            }
        }
    }

    /// `$'…'`: decode the escapes bash decodes; anything unusual makes the
    /// word non-literal rather than guessed.
    fn ansi_c(&mut self, w: &mut WordBuilder) {
        w.word.quoted = true;
        // After a NUL bash keeps nothing more of the quote: `$'ab\0cd'ef`
        // is `abef`.
        let mut cut = false;
        loop {
            match self.peek_raw() {
                None => {
                    self.error("a `$'` quote is never closed");
                    return;
                }
                Some('\'') => {
                    self.pos += 1;
                    return;
                }
                Some('\\') => {
                    self.pos += 1;
                    let Some(e) = self.peek_raw() else { continue };
                    self.pos += 1;
                    let decoded = match e {
                        'n' => Some('\n'),
                        't' => Some('\t'),
                        'r' => Some('\r'),
                        'a' => Some('\u{7}'),
                        'b' => Some('\u{8}'),
                        'e' | 'E' => Some('\u{1b}'),
                        'f' => Some('\u{c}'),
                        'v' => Some('\u{b}'),
                        '\\' | '\'' | '"' | '?' => Some(e),
                        'x' | 'u' | 'U' => {
                            let most = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex = self.digits(String::new(), 16, most);
                            if hex.is_empty() {
                                None
                            } else {
                                u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)
                            }
                        }
                        'c' => match self.peek_raw() {
                            Some(x) if x.is_ascii() && x != '\'' => {
                                self.pos += 1;
                                char::from_u32(u32::from(x.to_ascii_uppercase()) & 0x1f)
                            }
                            _ => None,
                        },
                        '0'..='7' => {
                            let oct = self.digits(String::from(e), 8, 3);
                            u32::from_str_radix(&oct, 8).ok().and_then(char::from_u32)
                        }
                        _ => None,
                    };
                    match decoded {
                        _ if cut => {}
                        Some('\0') => cut = true,
                        Some(d) => w.push_quoted(d),
                        None => {
                            w.word.literal = false;
                            w.push_quoted('\\');
                            w.push_quoted(e);
                        }
                    }
                }
                Some(c) => {
                    if !cut {
                        w.push_quoted(c);
                    }
                    self.pos += 1;
                }
            }
        }
    }

    /// `text` and the digits of `radix` after it, `most` in all.
    fn digits(&mut self, mut text: String, radix: u32, most: usize) -> String {
        while text.len() < most && matches!(self.peek_raw(), Some(h) if h.is_digit(radix)) {
            text.push(self.peek_raw().unwrap_or('0'));
            self.pos += 1;
        }
        text
    }

    /// A quoted part of an arithmetic expression (`$(( "…" ))`, `$[ '…' ]`):
    /// bash honours the quotes when it looks for the end, but expands
    /// what is inside either as in double quotes, so substitutions run
    /// inside single quotes too.
    fn quoted_in_expression(&mut self, scratch: &mut WordBuilder) {
        let quote = self.peek_raw().unwrap_or('"');
        self.pos += 1;
        if quote == '"' {
            self.double_quoted(scratch, Some('"'));
            return;
        }
        loop {
            match self.peek_raw() {
                None => {
                    self.error("a single quote is never closed");
                    return;
                }
                Some('\'') => {
                    self.pos += 1;
                    return;
                }
                Some('$') => self.dollar(scratch, true),
                Some('`') => self.backtick(scratch, true),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// After `$((`: up to the matching `))`, quotes honoured. Substitutions
    /// inside run. Closed by a single `)`, it is no arithmetic: bash reads
    /// `$((…) …)` as `$( (…) …)`, so the content is also read as
    /// commands, as shadows (the line is not read with confidence).
    fn arithmetic(&mut self, in_double_quotes: bool) {
        let content_start = self.pos;
        let mut depth = 0usize;
        let mut scratch = WordBuilder::new();
        let mut arithmetic = false;
        loop {
            match self.peek() {
                None => {
                    self.error("a `$((` is never closed");
                    break;
                }
                Some('(') => {
                    depth += 1;
                    self.pos += 1;
                }
                Some(')') if depth == 0 => {
                    if self.peek_at(1) == Some(')') {
                        self.pos += 2;
                        arithmetic = true;
                    } else {
                        self.error("a `$((` is closed by a single `)`");
                        self.pos += 1;
                    }
                    break;
                }
                Some(')') => {
                    depth -= 1;
                    self.pos += 1;
                }
                Some(_) => self.expression_step(&mut scratch, in_double_quotes),
            }
        }
        if !arithmetic && !self.shadow {
            let end = self.pos.saturating_sub(2).max(content_start);
            let content = self.slice(content_start, end);
            self.sub_lex(&format!("({content})"), false, true);
        }
    }

    /// One step through an arithmetic expression, at anything but its
    /// brackets: a quoted span, an expansion or an escape as bash reads it,
    /// or one character.
    fn expression_step(&mut self, scratch: &mut WordBuilder, in_double_quotes: bool) {
        match self.peek() {
            Some('\'' | '"') => self.quoted_in_expression(scratch),
            Some('$') => self.dollar(scratch, true),
            Some('`') => self.backtick(scratch, in_double_quotes),
            Some('\\') => self.pos += 2,
            _ => self.pos += 1,
        }
    }

    /// After `$[`, bash's old arithmetic expansion: up to the matching
    /// `]`, lexing what runs inside.
    fn old_arithmetic(&mut self, in_double_quotes: bool) {
        let mut depth = 1usize;
        let mut scratch = WordBuilder::new();
        while depth > 0 {
            match self.peek() {
                None => {
                    self.error("a `$[` is never closed");
                    break;
                }
                Some('[') => {
                    depth += 1;
                    self.pos += 1;
                }
                Some(']') => {
                    depth -= 1;
                    self.pos += 1;
                }
                Some(_) => self.expression_step(&mut scratch, in_double_quotes),
            }
        }
    }

    /// After `${`: up to the matching `}`, lexing what runs inside. In
    /// double quotes (`"${x:-'$(cmd)'}"`) a single quote is a character,
    /// and what it seems to enclose still runs.
    fn parameter_expansion(&mut self, in_double_quotes: bool) {
        let mut scratch = WordBuilder::new();
        loop {
            match self.peek() {
                None => {
                    self.error("a `${` is never closed");
                    return;
                }
                Some('}') => {
                    self.pos += 1;
                    return;
                }
                Some('\\') => self.pos += 2,
                Some('\'') if !in_double_quotes => {
                    self.pos += 1;
                    while !matches!(self.peek_raw(), None | Some('\'')) {
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                // In double quotes bash's parser skips a single-quoted span
                // (a `}` or `$(cat <<E)` in it ends nothing, opens nothing),
                // but the expansion takes the quotes as characters and runs
                // the substitutions between them: they are read as a text
                // of their own, heredocs and all.
                Some('\'') => {
                    self.pos += 1;
                    let start = self.pos;
                    while !matches!(self.peek_raw(), None | Some('\'')) {
                        self.pos += 1;
                    }
                    let span = self.slice(start, self.pos);
                    self.pos += 1;
                    self.sub_lex(&span, true, false);
                }
                Some('"') => {
                    self.pos += 1;
                    self.double_quoted(&mut scratch, Some('"'));
                }
                Some('$') => self.dollar(&mut scratch, true),
                Some('`') => self.backtick(&mut scratch, in_double_quotes),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// A backtick substitution: its content (with `\``, `\\`, `\$`
    /// unescaped, and `\"` too in double quotes) is lexed as commands of
    /// its own.
    fn backtick(&mut self, w: &mut WordBuilder, in_double_quotes: bool) {
        let from = self.pos;
        self.pos += 1;
        let mut content = String::new();
        loop {
            match self.peek() {
                None => {
                    self.error("a backtick is never closed");
                    break;
                }
                Some('`') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => {
                    match self.peek_at(1) {
                        Some(e @ ('`' | '\\' | '$')) => content.push(e),
                        Some('"') if in_double_quotes && !self.heredoc_body => content.push('"'),
                        Some(e) => {
                            content.push('\\');
                            content.push(e);
                        }
                        None => content.push('\\'),
                    }
                    self.pos += 2;
                }
                Some(c) => {
                    content.push(c);
                    self.pos += 1;
                }
            }
        }
        self.sub_lex(&content, false, false);
        let raw = self.slice(from, self.pos.min(self.src.len()));
        w.push_computed(&raw);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(src: &str) -> Vec<String> {
        let mut n = 0;
        let lexed = lex(src, &mut n, 0);
        assert!(lexed.errors.is_empty(), "{src}: {:?}", lexed.errors);
        lexed
            .pieces
            .iter()
            .filter(|p| !p.shadow)
            .map(|p| {
                p.words
                    .iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    fn errors(src: &str) -> Vec<String> {
        let mut n = 0;
        lex(src, &mut n, 0).errors
    }

    #[test]
    fn operators_split_commands() {
        assert_eq!(pieces("git status && rm -rf /"), ["git status", "rm -rf /"]);
        assert_eq!(
            pieces("a || b; c & d | e |& f"),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(pieces("a\nb\n\nc"), ["a", "b", "c"]);
        assert_eq!(pieces("a&&b;c"), ["a", "b", "c"]);
    }

    #[test]
    fn quoted_operators_do_not_split() {
        assert_eq!(pieces(r#"echo "a && b; c | d""#), ["echo a && b; c | d"]);
        assert_eq!(pieces("echo 'x; rm -rf /'"), ["echo x; rm -rf /"]);
        assert_eq!(pieces(r"echo a\;b \&\& c"), ["echo a;b && c"]);
    }

    #[test]
    fn substitutions_become_pieces() {
        assert_eq!(pieces("echo $(rm -rf /)"), ["rm -rf /", "echo $(rm -rf /)"]);
        assert_eq!(pieces("echo `rm -rf /`"), ["rm -rf /", "echo `rm -rf /`"]);
        assert_eq!(
            pieces(r#"echo "$(id) and `whoami`""#),
            ["id", "whoami", "echo $(id) and `whoami`"]
        );
        assert_eq!(
            pieces("diff <(ls a) >(cat)"),
            ["ls a", "cat", "diff <(ls a) >(cat)"]
        );
        assert_eq!(pieces("echo ${X:-$(id)}"), ["id", "echo ${X:-$(id)}"]);
        assert_eq!(
            pieces("echo $(echo $(id))"),
            ["id", "echo $(id)", "echo $(echo $(id))"]
        );
        // Single quotes keep everything literal.
        assert_eq!(pieces("echo '$(id)'"), ["echo $(id)"]);
    }

    #[test]
    fn subshells_and_groups() {
        assert_eq!(pieces("(cd x && rm -rf y)"), ["cd x", "rm -rf y"]);
        assert_eq!(pieces("f() { rm -rf /; }; f"), ["{ rm -rf /", "}", "f"]);
    }

    #[test]
    fn words_after_quote_removal() {
        let mut n = 0;
        let lexed = lex(
            r#""r"m -rf '/' $'\x72m' $HOME *.txt ~ a{b,c} FOO=1 "X"=1"#,
            &mut n,
            0,
        );
        let words = &lexed.pieces[0].words;
        let texts: Vec<_> = words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "rm", "-rf", "/", "rm", "$HOME", "*.txt", "~", "a{b,c}", "FOO=1", "X=1"
            ]
        );
        let literal: Vec<_> = words.iter().map(|w| w.literal).collect();
        assert_eq!(
            literal,
            [
                true, true, true, true, false, false, false, false, true, true
            ]
        );
        assert!(words[4].computed && !words[5].computed);
        assert!(words[8].assignment && !words[9].assignment);
        assert_eq!(words[5].stars, [0]);
    }

    #[test]
    fn brackets_are_globs_only_when_closed() {
        let mut n = 0;
        let lexed = lex("[[ -f x ]] && [ -d y ] && ls a[12] '[x]'", &mut n, 0);
        let literal: Vec<Vec<bool>> = lexed
            .pieces
            .iter()
            .map(|p| p.words.iter().map(|w| w.literal).collect())
            .collect();
        assert_eq!(
            literal,
            [vec![true; 4], vec![true; 4], vec![true, false, true]]
        );
    }

    #[test]
    fn redirections_are_not_words() {
        let mut n = 0;
        let lexed = lex("make 2>&1 >out.txt <in &>/dev/null >> log", &mut n, 0);
        let p = &lexed.pieces[0];
        assert_eq!(p.words.len(), 1);
        let ops: Vec<_> = p
            .redirects
            .iter()
            .map(|r| (r.op.as_str(), r.target.text.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("2>&", "1"),
                (">", "out.txt"),
                ("<", "in"),
                ("&>", "/dev/null"),
                (">>", "log")
            ]
        );
        assert!(
            p.redirects[0].harmless() && !p.redirects[1].harmless() && p.redirects[3].harmless()
        );
        // A redirection before the command does not hide the command.
        let lexed = lex(">out rm -rf /", &mut n, 0);
        assert_eq!(lexed.pieces[0].words[0].text, "rm");
    }

    /// `<<<` is a here-string, and `<<` in arithmetic or an array
    /// element's subscript a shift: none takes the lines after it.
    #[test]
    fn here_strings_and_shifts_take_no_lines() {
        assert_eq!(pieces("cat <<<x\nrm victim"), ["cat", "rm victim"]);
        assert_eq!(
            pieces("echo x<<<y\nrm victim\ny"),
            ["echo x", "rm victim", "y"]
        );
        assert_eq!(pieces("0<<<y\nrm victim"), ["", "rm victim"]);
        assert_eq!(pieces("((1<<2))\n\nrm victim"), ["let 1<<2", "rm victim"]);
        assert_eq!(pieces("((x=1<<2)); rm victim"), ["let x=1<<2", "rm victim"]);
        assert_eq!(pieces("a[1<<2]=3\nrm victim"), ["a[1<<2]=3", "rm victim"]);
        assert_eq!(
            pieces("a[1<<2]+=3 ls\nrm victim"),
            ["a[1<<2]+=3 ls", "rm victim"]
        );
        assert_eq!(pieces("(( $(id) + 1 ))"), ["id", "let  $(id) + 1 "]);
        // A heredoc never closed is not read with confidence.
        assert!(!errors("cat <<EOF\nbody").is_empty());
        assert!(errors("cat <<EOF\nbody\nEOF").is_empty());
    }

    /// bash joins an unquoted heredoc's continued lines before comparing
    /// them with the delimiter; a quoted one's lines are taken as they
    /// are.
    #[test]
    fn a_heredoc_delimiter_continued_over_lines_ends_it() {
        assert_eq!(
            pieces("cat <<EOF\nfoo\nEO\\\nF\nrm victim\nEOF"),
            ["cat", "rm victim", "EOF"]
        );
        assert_eq!(pieces("cat <<EOF\nfoo\nEOF\\\n\nid"), ["cat", "id"]);
        assert_eq!(
            pieces("cat <<-EOF\n\tfoo\n\tEO\\\nF\nid\nEOF"),
            ["cat", "id", "EOF"]
        );
        // Joined first, tabs stripped after: `\tEO` + `\tF` is no delimiter.
        assert_eq!(
            pieces("cat <<-EOF\n\tEO\\\n\tF\nid\nEOF\nls"),
            ["cat", "ls"]
        );
        // An escaped backslash does not continue the line.
        assert_eq!(pieces("cat <<EOF\nfoo\\\\\nEOF\nid"), ["cat", "id"]);
        assert_eq!(
            pieces("cat <<EOF\nfoo\\\\\\\nEOF\nid\nEOF\nls"),
            ["cat", "ls"]
        );
        // Quoted: no joining.
        assert_eq!(pieces("cat <<'EOF'\nEO\\\nF\nid\nEOF\nls"), ["cat", "ls"]);
        assert_eq!(pieces("cat <<E\\OF\nEO\\\nF\nid\nEOF\nls"), ["cat", "ls"]);
        // A continued line inside the body expands as one.
        assert_eq!(pieces("cat <<EOF\n$(i\\\nd)\nEOF"), ["cat", "id"]);
    }

    #[test]
    fn heredocs() {
        assert_eq!(
            pieces("cat <<'EOF'\nrm -rf /\n$(id)\nEOF\nls"),
            ["cat", "ls"]
        );
        assert_eq!(
            pieces("cat <<EOF\nhello $(id)\nEOF\nls"),
            ["cat", "id", "ls"]
        );
        assert_eq!(pieces("cat <<-EOF\n\tx\n\tEOF\nls"), ["cat", "ls"]);
        // bash reads a `$( … )` as a program of its own: the body of a
        // heredoc opened before it comes after the whole line, and the
        // lines inside are commands.
        assert_eq!(
            pieces("echo <<'EOF' $(\ntouch x; id\nEOF\n)\nbody\nEOF\nls"),
            ["touch x", "id", "EOF", "echo $(\ntouch x; id\nEOF\n)", "ls"]
        );
        // A subshell is read in line: the body comes at its first newline.
        assert_eq!(pieces("cat <<EOF; (\nrm x\nEOF\nls)"), ["cat", "ls"]);
    }

    #[test]
    fn pipelines_are_numbered() {
        let mut n = 0;
        let lexed = lex("curl x | tee a | sh; ls", &mut n, 0);
        let stages: Vec<_> = lexed.pieces.iter().map(|p| (p.pipeline, p.stage)).collect();
        assert_eq!(stages[0..3], [(0, 0), (0, 1), (0, 2)]);
        assert_ne!(stages[3].0, 0);
    }

    #[test]
    fn arithmetic_closed_by_one_paren_is_read_as_commands() {
        // `$((rm -rf / ) )` is `$( (rm -rf /) )` to bash.
        let mut n = 0;
        let lexed = lex("echo $((rm -rf / ) )", &mut n, 0);
        assert!(
            lexed
                .pieces
                .iter()
                .any(|p| p.shadow && p.words[0].text == "rm")
        );
        assert!(!lexed.errors.is_empty());
        // Closed by `))`, it is arithmetic: only its substitutions run.
        assert_eq!(pieces("echo $((1 + $(id)))"), ["id", "echo $((1 + $(id)))"]);
        assert_eq!(pieces("echo $((rm -rf / ))"), ["echo $((rm -rf / ))"]);
        assert_eq!(pieces("echo $((2*3))"), ["echo $((2*3))"]);
        // Quotes are honoured in finding the end, and what they hold is
        // expanded (single quotes too).
        let lexed = lex("echo $((: \"))\"; touch p ) )", &mut n, 0);
        assert!(!lexed.errors.is_empty());
        assert!(
            lexed
                .pieces
                .iter()
                .any(|p| p.shadow && p.words[0].text == "touch")
        );
        assert_eq!(
            pieces("echo $(( '$(id)' + 1 ))"),
            ["id", "echo $(( '$(id)' + 1 ))"]
        );
        assert_eq!(
            pieces("echo $[ \"]\" $(id) ]"),
            ["id", "echo $[ \"]\" $(id) ]"]
        );
    }

    #[test]
    fn comments() {
        assert_eq!(pieces("ls # && rm -rf /\npwd"), ["ls", "pwd"]);
        assert_eq!(pieces("echo a#b"), ["echo a#b"]);
    }

    #[test]
    fn malformed_input_is_reported_not_guessed() {
        assert!(!errors("echo 'unterminated").is_empty());
        assert!(!errors("echo \"unterminated").is_empty());
        assert!(!errors("echo $(ls").is_empty());
        assert!(!errors("echo `ls").is_empty());
        assert!(!errors("ls )").is_empty());
        assert!(!errors("ls >").is_empty());
        let deep = "$(".repeat(100) + &")".repeat(100);
        assert!(!errors(&deep).is_empty());
        // Nothing here panics or loops.
        for src in [
            "\\", "$", "${", "$((", "'", "\"", "`", "<(", "((", "&>", "2>&", "a=(", "$'\\x", "}",
        ] {
            let mut n = 0;
            let _ = lex(src, &mut n, 0);
        }
    }
}
