//! `bash(…)` specifiers: `git status` (exactly this command), `npm run
//! test *` or `npm run test:*` (this prefix, then anything), `*` (every
//! command). They match word by word, so `git status *` never matches `git
//! statusx`; a `*` inside a word (`*.log`) matches within that word only,
//! except at the very end of the pattern: `git push*` is `git push…` and
//! any words after it (`git push origin main`, `git pushx`), as in Claude
//! Code.
//!
//! Two questions are asked of a pattern. Deny and ask rules ask "could this
//! command be one the rule names?" ([`BashSpec::may_match`]): every wrapper
//! layer counts, and a word computed at run time could be anything. Allow
//! rules ask "is it certainly one the rule names?" ([`BashSpec::surely_matches`]):
//! only the innermost command counts, and only a `*` vouches for a computed
//! word.

use super::Reach;
use super::command::{self, Piece};
use super::shell::{self, Redirect, Word};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BashSpec {
    /// `*` or `:*`: every command.
    All,
    Pattern(BashPattern),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BashPattern {
    words: Vec<PatternWord>,
    redirects: Vec<Redirect>,
    /// The words as lexed (to tell whether the pattern starts with a
    /// wrapper).
    lexed: Vec<Word>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternWord {
    /// A lone unquoted `*`: any number of words, none included.
    Star,
    /// A word; unquoted `*` inside it match any characters.
    Text { text: String, stars: Vec<usize> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Surely,
    Maybe,
}

pub(crate) fn parse(spec: &str) -> Result<BashSpec, String> {
    let (body, prefix) = match spec.strip_suffix(":*") {
        Some(body) => (body, true),
        None => (spec, false),
    };
    if body.trim().is_empty() {
        return if prefix {
            Ok(BashSpec::All)
        } else {
            Err("it is empty".into())
        };
    }
    let lexed = shell::lex(body, &mut 0, 0);
    if let Some(error) = lexed.errors.first() {
        return Err(format!("it cannot be read as a command: {error}"));
    }
    let mut pieces = lexed.pieces.into_iter().filter(|p| !p.shadow);
    let (Some(piece), None) = (pieces.next(), pieces.next()) else {
        return Err("it holds several commands (`&&`, `;`, `|`, `$( … )` …); a rule names one command, and compound commands are checked piece by piece".into());
    };
    if piece.words.is_empty() {
        return Err("it has redirections but no command".into());
    }
    let mut words: Vec<PatternWord> = piece
        .words
        .iter()
        .map(|w| {
            if w.text == "*" && w.stars == [0] {
                PatternWord::Star
            } else {
                PatternWord::Text {
                    text: w.text.clone(),
                    stars: w.stars.clone(),
                }
            }
        })
        .collect();
    // A `*` that ends the pattern (`git push*`) also covers the words after
    // it, as in Claude Code: `ls*` is `lsof` and `ls -la`.
    let open_end = matches!(
        words.last(),
        Some(PatternWord::Text { text, stars })
            if text.chars().count().checked_sub(1).is_some_and(|end| stars.last() == Some(&end))
    );
    if prefix || open_end {
        words.push(PatternWord::Star);
    }
    if piece.redirects.is_empty() && words.iter().all(|w| *w == PatternWord::Star) {
        return Ok(BashSpec::All);
    }
    Ok(BashSpec::Pattern(BashPattern {
        words,
        redirects: piece.redirects,
        lexed: piece.words,
    }))
}

impl BashSpec {
    /// Deny and ask rules: could `piece`, at any wrapper layer, be a
    /// command this pattern names?
    pub fn may_match(&self, piece: &Piece) -> bool {
        self.names_layer(piece, Mode::Maybe)
    }

    /// Whether `piece`, as written, is a command this pattern names (not
    /// only perhaps, through a word computed when it runs or arguments
    /// `xargs` reads): a deny rule's reason says which.
    pub fn names_as_written(&self, piece: &Piece) -> bool {
        self.names_layer(piece, Mode::Surely)
    }

    fn names_layer(&self, piece: &Piece, mode: Mode) -> bool {
        let BashSpec::Pattern(pattern) = self else {
            return true;
        };
        piece.layers.iter().any(|layer| {
            if pattern.matches(&layer.words, layer.open_ended, mode) {
                return true;
            }
            // `/bin/rm` is `rm` to a deny rule (never to an allow rule:
            // `./git` may be anything).
            match layer.words.first().and_then(command::command_name) {
                Some(name) if name != layer.words[0].text && pattern.names_bare_command() => {
                    let mut words = layer.words.clone();
                    words[0].text = name.to_string();
                    pattern.matches(&words, layer.open_ended, mode)
                }
                _ => false,
            }
        })
    }

    /// Allow rules: is the command `piece` really runs certainly one this
    /// pattern names? `reach`: where the line's writes may land (a rule
    /// ending in `*` vouches for none that may be git's configuration).
    pub fn surely_matches(&self, piece: &Piece, reach: &Reach) -> bool {
        let BashSpec::Pattern(pattern) = self else {
            return true;
        };
        let Some(layer) = piece.layers.last() else {
            return false;
        };
        piece.opaque.is_none()
            && pattern.matches(&layer.words, layer.open_ended, Mode::Surely)
            && pattern.covers_redirects(&piece.redirects, reach)
            && pattern.covers_git_configuration_words(piece, reach)
            && pattern.covers_deletions(piece)
    }

    /// The option through which `piece` deletes files that this rule
    /// would vouch for but for it: a rule ending in `*` vouches for no
    /// `find -delete`, `tar --remove-files` or `rsync --delete` it does
    /// not spell out (`bash(find *)` names a search, not removal).
    pub fn deletes_unspelt(&self, piece: &Piece, reach: &Reach) -> Option<String> {
        let BashSpec::Pattern(pattern) = self else {
            return None;
        };
        let layer = piece.layers.last()?;
        let option = deletion_option(&layer.words)?;
        let but_for = piece.opaque.is_none()
            && pattern.matches(&layer.words, layer.open_ended, Mode::Surely)
            && pattern.covers_redirects(&piece.redirects, reach)
            && pattern.covers_git_configuration_words(piece, reach)
            && !pattern.covers_deletions(piece);
        but_for.then(|| option.to_string())
    }

    /// Why this rule does not vouch for `piece` when only that stops it:
    /// the piece is opaque (it changes what runs, or its options cannot be
    /// read with confidence) and the rule matches it otherwise.
    pub fn doubted(&self, piece: &Piece, reach: &Reach) -> Option<String> {
        let BashSpec::Pattern(pattern) = self else {
            return None;
        };
        let why = piece.opaque.as_ref()?;
        let layer = piece.layers.last()?;
        let but_for = pattern.matches(&layer.words, layer.open_ended, Mode::Surely)
            && pattern.covers_redirects(&piece.redirects, reach)
            && pattern.covers_git_configuration_words(piece, reach)
            && pattern.covers_deletions(piece);
        but_for.then(|| why.clone())
    }

    /// The wrapper or assignment a pattern starts with, which commands lose
    /// before allow rules see them (so an allow rule starting with one can
    /// never match).
    pub fn leading_wrapper(&self) -> Option<String> {
        let BashSpec::Pattern(pattern) = self else {
            return None;
        };
        command::peeled_prefix(&pattern.lexed)
    }
}

impl BashPattern {
    fn names_bare_command(&self) -> bool {
        matches!(self.words.first(), Some(PatternWord::Text { text, .. }) if !text.contains('/'))
    }

    /// A redirection that could change something must be written in the
    /// rule, unless the rule ends in `*` and the redirection reads, or
    /// writes a plain path inside the workspace (`> out.txt`, not
    /// `>> ~/.bashrc` or `> /etc/x`) that is not git's configuration
    /// (`>> .git/config` asks, as `write_file` does: git would run what it
    /// says at commands an owner may well allow, `git status`).
    fn covers_redirects(&self, redirects: &[Redirect], reach: &Reach) -> bool {
        let open = self.words.last() == Some(&PatternWord::Star);
        redirects.iter().filter(|r| !r.harmless()).all(|r| {
            let written = r.target.literal
                && self.redirects.iter().any(|p| {
                    p.normalised_op() == r.normalised_op() && p.target.text == r.target.text
                });
            let plain = || {
                stays_inside(&r.target) && !reach.target_may_be_git_configuration(&r.target.text)
            };
            written || (open && (!r.writes() || plain()))
        })
    }

    /// A `*` vouches for no argument that names git's configuration
    /// (`tee -a .git/config`, `cp x .gitconfig`, `sed -i … config` run in
    /// `.git`; see [`Reach::arguments_may_name_git_configuration`]): git
    /// would run what such a file says at commands an owner may well
    /// allow. The rule may still spell the word out (`bash(tee -a
    /// .git/config)`).
    fn covers_git_configuration_words(&self, piece: &Piece, reach: &Reach) -> bool {
        if !self.words.contains(&PatternWord::Star) {
            return true;
        }
        let spelt = |word: &Word| {
            self.words.iter().any(
                |p| matches!(p, PatternWord::Text { text, stars } if stars.is_empty() && *text == word.text),
            )
        };
        !reach.arguments_may_name_git_configuration(piece, spelt)
    }

    /// Whether the rule spells out the option through which the command
    /// deletes files, if it has one (a rule with no `*` spells out all).
    fn covers_deletions(&self, piece: &Piece) -> bool {
        let Some(option) = piece.layers.last().and_then(|l| deletion_option(&l.words)) else {
            return true;
        };
        !self.words.contains(&PatternWord::Star)
            || self.words.iter().any(
                |p| matches!(p, PatternWord::Text { text, stars } if stars.is_empty() && text == option),
            )
    }

    /// Word-sequence matching. `open_ended`: unknown words follow (xargs).
    fn matches(&self, words: &[Word], open_ended: bool, mode: Mode) -> bool {
        let pattern = &self.words;
        let (m, n) = (pattern.len(), words.len());
        let all_stars = |from: usize| pattern[from..].iter().all(|p| *p == PatternWord::Star);
        // fits[i][j]: pattern[i..] matches words[j..] (then the unknown
        // tail, if open-ended).
        let mut fits = vec![vec![false; n + 1]; m + 1];
        for (i, row) in fits.iter_mut().enumerate() {
            row[n] = match (open_ended, mode) {
                (false, _) => all_stars(i),
                // Some tail could complete any pattern.
                (true, Mode::Maybe) => true,
                // Every tail must fit: only a `*` absorbs it.
                (true, Mode::Surely) => i < m && all_stars(i),
            };
        }
        for j in (0..n).rev() {
            for i in (0..m).rev() {
                let word = &words[j];
                fits[i][j] = match &pattern[i] {
                    PatternWord::Star => fits[i + 1][j] || fits[i][j + 1],
                    PatternWord::Text { text, stars } => {
                        if word.literal {
                            glob_word(text, stars, &word.text) && fits[i + 1][j + 1]
                        } else if mode == Mode::Surely {
                            // Only the very same text vouches for a computed word.
                            word.text == *text && fits[i + 1][j + 1]
                        } else {
                            // A computed word may expand to any words, or none.
                            (i..=m).any(|k| fits[k][j + 1])
                        }
                    }
                };
            }
        }
        fits[0][0]
    }
}

/// A literal relative path without `..`.
fn stays_inside(target: &Word) -> bool {
    let text = target.text.as_str();
    target.literal
        && !text.is_empty()
        && !text.starts_with('/')
        && !text.starts_with('~')
        && !text.split('/').any(|c| c == "..")
}

/// `text` with `*` at the char indices `stars` against `candidate`.
fn glob_word(text: &str, stars: &[usize], candidate: &str) -> bool {
    if stars.is_empty() {
        return text == candidate;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut segments = Vec::new();
    let mut start = 0;
    for &star in stars {
        segments.push(chars[start..star].iter().collect::<String>());
        start = star + 1;
    }
    segments.push(chars[start..].iter().collect::<String>());
    let (first, rest) = segments.split_first().expect("at least two segments");
    let (last, middle) = rest.split_last().expect("at least two segments");
    let Some(mut remaining) = candidate.strip_prefix(first.as_str()) else {
        return false;
    };
    for segment in middle {
        match remaining.find(segment.as_str()) {
            Some(at) => remaining = &remaining[at + segment.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last.as_str())
}

/// The option through which a command deletes files besides what it is
/// named for: `find -delete`, `tar --remove-files`, `--recursive-unlink`
/// or `--unlink-first` (or an abbreviation, or `-U`), `rsync --delete…`,
/// `--remove-source-files` or `--remove-sent-files`, and `git clean`.
fn deletion_option(words: &[Word]) -> Option<&str> {
    let name = words.first().and_then(command::command_name)?;
    let deletes: fn(&str) -> bool = match name {
        "find" => |t| t == "-delete",
        "tar" | "gtar" => |t| {
            let cluster = |t: &str| t.chars().all(|c| c.is_ascii_alphabetic()) && t.contains('U');
            (t.len() >= 5 && "--remove-files".starts_with(t))
                || (t.len() >= 5 && "--recursive-unlink".starts_with(t))
                || (t.len() >= 4 && "--unlink-first".starts_with(t))
                || t.strip_prefix('-')
                    .is_some_and(|rest| !rest.starts_with('-') && cluster(rest))
        },
        "rsync" => |t| {
            let option = t.split_once('=').map_or(t, |(o, _)| o);
            option.starts_with("--del") || (option.len() >= 8 && option.starts_with("--remove"))
        },
        // `git clean` removes untracked files.
        "git" => |t| t == "clean",
        _ => return None,
    };
    let args = &words[1..];
    // tar's old-style first word: `tar xUf a.tar`.
    if matches!(name, "tar" | "gtar")
        && let Some(first) = args.first().filter(|w| !w.text.starts_with('-'))
        && first.text.len() <= 12
        && first.text.chars().all(|c| c.is_ascii_alphabetic())
        && first.text.contains('U')
    {
        return Some(first.text.as_str());
    }
    args.iter()
        .take_while(|w| w.text != "--" || name == "find")
        .map(|w| w.text.as_str())
        .find(|t| deletes(t))
}

#[cfg(test)]
mod tests {
    use super::super::command::analyse;
    use super::*;

    fn spec(s: &str) -> BashSpec {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// Allowed when every piece that needs allowing is surely matched.
    fn allows(rule: &str, command: &str) -> bool {
        let spec = spec(rule);
        analyse(command)
            .pieces
            .iter()
            .filter(|p| !p.transparent && !p.shadow)
            .all(|p| spec.surely_matches(p, &Reach::root()))
    }

    /// The last piece only (the one after a pipe).
    fn allows_last(rule: &str, command: &str) -> bool {
        let analysis = analyse(command);
        spec(rule).surely_matches(analysis.pieces.last().unwrap(), &Reach::root())
    }

    fn denies(rule: &str, command: &str) -> bool {
        let spec = spec(rule);
        analyse(command).pieces.iter().any(|p| spec.may_match(p))
    }

    #[test]
    fn exact_commands() {
        assert!(allows("git status", "git status"));
        assert!(allows("git status", "  git   status "));
        assert!(allows("git status", "git 'status'"));
        assert!(!allows("git status", "git status -s"));
        assert!(!allows("git status", "git statusx"));
        assert!(!allows("git status", "git"));
    }

    #[test]
    fn prefixes_on_word_boundaries() {
        for rule in ["npm run test *", "npm run test:*"] {
            assert!(allows(rule, "npm run test"), "{rule}");
            assert!(allows(rule, "npm run test -- --watch"), "{rule}");
            assert!(!allows(rule, "npm run testx"), "{rule}");
            assert!(!allows(rule, "npm run tes"), "{rule}");
        }
        assert!(allows("git status *", "git status --short"));
        assert!(!allows("git status *", "git statusx"));
        assert!(allows("git * main", "git push origin main"));
        assert!(!allows("git * main", "git push origin main2"));
    }

    #[test]
    fn a_star_ending_the_pattern_covers_the_words_after_it() {
        for command in [
            "git push",
            "git push origin main",
            "git pushx",
            "git push --tags x",
        ] {
            assert!(allows("git push*", command), "{command}");
            assert!(denies("git push*", command), "{command}");
        }
        assert!(!denies("git push*", "git pull origin"));
        assert!(!denies("git push*", "git"));
        assert!(allows("ls*", "lsof -i"));
        assert!(allows("ls*", "ls -la"));
        // Inside the last word, not at its end: that word only.
        assert!(!allows("cat *.md", "cat README.md x"));
        assert!(!allows("echo '*'", "echo '*' x"));
        assert!(allows("echo ''", "echo ''"));
    }

    #[test]
    fn globs_inside_words() {
        assert!(allows("cat *.md", "cat README.md"));
        assert!(!allows("cat *.md", "cat README.md.sh"));
        assert!(allows("git checkout feature/*", "git checkout feature/x"));
        assert!(allows("echo '*'", "echo '*'"));
        assert!(!allows("echo '*'", "echo hello"));
        assert!(glob_word("a*b*c", &[1, 3], "aXbYc"));
        assert!(!glob_word("a*a", &[1], "a"));
    }

    #[test]
    fn everything() {
        assert_eq!(spec("*"), BashSpec::All);
        assert_eq!(spec(":*"), BashSpec::All);
        assert!(allows("*", "anything at all | even this"));
    }

    #[test]
    fn computed_words_need_a_star_to_be_allowed() {
        assert!(allows("echo *", "echo $HOME"));
        assert!(!allows("echo hi", "echo $X"));
        assert!(!allows("cat *.txt", "cat $FILE"));
        assert!(allows("cat *.txt", "cat *.txt"));
        assert!(!allows("ls *", "$CMD x"));
    }

    #[test]
    fn computed_words_may_be_denied() {
        assert!(denies("rm -rf /", "rm -rf $TARGET"));
        assert!(denies("git push *", "git $SUB origin"));
        assert!(denies("rm *", "$(echo rm) x"));
        assert!(!denies("rm *", "echo $X"));
    }

    #[test]
    fn wrappers_count_for_deny_not_for_allow() {
        assert!(denies("rm *", "timeout 5 rm x"));
        assert!(denies("sudo *", "sudo ls"));
        assert!(denies("timeout *", "timeout 5 ls"));
        assert!(allows("ls", "timeout 5 ls"));
        assert!(!allows("timeout *", "timeout 5 rm -rf x"));
        assert_eq!(
            spec("timeout 5 make").leading_wrapper().as_deref(),
            Some("timeout")
        );
        assert_eq!(
            spec("FOO=1 make").leading_wrapper().as_deref(),
            Some("FOO=1")
        );
        assert_eq!(spec("make *").leading_wrapper(), None);
        assert_eq!(spec("env").leading_wrapper(), None);
    }

    /// `git -C . push` is `git push` to every rule: git's global options
    /// are dropped like a wrapper.
    #[test]
    fn git_global_options_do_not_hide_the_subcommand() {
        for command in [
            "git -C . push origin main",
            "git -c x=y push",
            "git --no-pager push",
            "git -P push --tags",
            "git --git-dir=.git --work-tree=. push",
            "git --namespace=n --bare --no-replace-objects --literal-pathspecs push",
            "timeout 5 git -C sub push",
        ] {
            for rule in ["git push*", "git push *", "git push:*"] {
                assert!(denies(rule, command), "{rule} / {command}");
                assert!(allows(rule, command), "{rule} / {command}");
            }
            assert!(!denies("git status*", command), "{command}");
        }
        // A program-running option is still no allow rule's to vouch for.
        assert!(denies("git push*", "git -c core.sshCommand=evil push"));
        assert!(!allows("git push*", "git -c core.sshCommand=evil push"));
        // A rule may still name the options themselves.
        assert!(denies("git -C * push*", "git -C repo push"));
        assert_eq!(
            spec("git -C repo log").leading_wrapper().as_deref(),
            Some("-C repo")
        );
        assert_eq!(spec("git log *").leading_wrapper(), None);
    }

    #[test]
    fn paths_to_a_command() {
        assert!(denies("rm *", "/bin/rm x"));
        assert!(!allows("git status", "/tmp/git status"));
        assert!(!allows("git status", "./git status"));
    }

    #[test]
    fn open_ended_xargs() {
        assert!(allows_last("rm *", "ls | xargs rm"));
        assert!(allows_last("rm -f *", "ls | xargs rm -f"));
        assert!(!allows_last("rm -f", "ls | xargs rm -f"));
        assert!(!allows_last("rm", "ls | xargs rm"));
        assert!(denies("rm -rf /", "echo / | xargs rm -rf"));
        assert!(!denies("rm -rf /", "echo / | xargs rm -f"));
    }

    #[test]
    fn redirections() {
        assert!(allows("make", "make 2>&1"));
        assert!(allows("make", "make > /dev/null 2>&1"));
        assert!(!allows("echo hi", "echo hi > ~/.bashrc"));
        assert!(allows("echo hi > out.txt", "echo hi >out.txt"));
        assert!(allows("echo *", "echo hi > out.txt"));
        assert!(allows("git diff *", "git diff > patches/a.patch 2>&1"));
        assert!(allows("wc *", "wc -l < /etc/passwd"));
        assert!(!allows("echo *", "echo hi >> ~/.bashrc"));
        assert!(!allows("echo *", "echo hi > /etc/hosts"));
        assert!(!allows("echo *", "echo hi > ../x"));
        assert!(!allows("echo *", "echo hi > $OUT"));
        assert!(allows("echo * > /tmp/x", "echo hi > /tmp/x"));
        assert!(!allows("python3", "python3 <<EOF\nimport os\nEOF"));
        assert!(denies("rm -rf /", ">x rm -rf /"));
    }

    #[test]
    fn a_star_vouches_for_no_argument_naming_gits_configuration() {
        for (rule, command) in [
            ("tee *", "tee -a .git/config"),
            ("cp *", "cp hook .git/hooks/pre-commit"),
            ("cp *", "cp x ~/.gitconfig"),
            ("cp *", "cp x \"$HOME/.gitconfig\""),
            ("sed *", "sed -i s/a/b/ repo/.git/config"),
            ("dd *", "dd if=x of=.git/config"),
            ("install *", "install --target-directory=.git/hooks x"),
            ("sort *", "sort -o.git/config x"),
            ("ln *", "ln -s .git g"),
            ("mkdir *", "mkdir -p .config/git"),
            ("rsync *", "rsync -a hooks/ .git/hooks/"),
            ("tar *", "tar --exclude=.git -xf a.tar -C .git"),
            // Brace expansion and globs.
            ("tee *", "tee -a {.git,x}/config"),
            ("tee *", "tee -a x{/.g{i,o}t,}/config"),
            ("tee *", "tee .g*/config"),
            ("tee *", "tee .gi?/hooks/pre-commit"),
            ("tee *", "tee .[g]it/config"),
            ("cp *", "cp x .config/gi[t]/config"),
            ("cp *", "cp x */config"),
            ("cp *", "cp x {a..z}/config"),
        ] {
            assert!(!allows(rule, command), "{rule} covered {command}");
        }
        // The rule spells the word out; commands that only read; names
        // that merely start with `.git`.
        for (rule, command) in [
            ("tee -a .git/config", "tee -a .git/config"),
            (
                "cp * .git/hooks/pre-commit",
                "cp hook .git/hooks/pre-commit",
            ),
            ("grep *", "grep -r x --exclude-dir=.git ."),
            ("ls *", "ls -la .git"),
            ("cat *", "cat .git/HEAD"),
            (
                "git *",
                "git add .gitignore .github/workflows/ci.yml .gitattributes",
            ),
            ("cp *", "cp a.txt b.txt"),
            ("tar *", "tar --exclude=.git --exclude .git -cf a.tar ."),
            ("cp *", "cp {a,b}.txt *.md out/"),
            ("tee *", "tee '.g*/config'"),
            (
                "find *",
                "find . -path ./.git -prune -o -name '*.rs' -print",
            ),
            ("tee", "tee"),
        ] {
            assert!(allows(rule, command), "{rule} did not cover {command}");
        }
    }

    #[test]
    fn sensitive_assignments_defeat_specific_rules() {
        assert!(!allows("git status", "PATH=/tmp/evil git status"));
        assert!(!allows("git status", "GIT_EXTERNAL_DIFF=x git status"));
        assert!(allows("git status", "LANG=C git status"));
        assert!(allows("*", "PATH=/tmp/evil git status"));
    }

    #[test]
    fn bad_specifiers() {
        assert!(parse("git status && rm x").is_err());
        assert!(parse("echo $(date)").is_err());
        assert!(parse("echo 'open").is_err());
        assert!(parse("> out").is_err());
        assert!(parse("").is_err());
    }
}
