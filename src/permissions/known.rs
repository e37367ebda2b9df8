//! Variables whose every value a command line spells out: `f=src/a.rs;
//! sed -n 1p "$f"`, `for f in a b; do tee -a "$f"; done`. A word made of
//! such variables (and literal text) stands for a few known texts, which
//! are judged as written words are, rather than as text only known when
//! the command runs.
//!
//! The line is read, not run, so a variable is known only where nothing
//! else could set it:
//! - every place it is set is an assignment word before a command's name
//!   (`f=x cmd`, `f=x`) or a `for NAME in …` list, with a literal value
//!   free of blanks, globs and braces (so splitting and globbing leave it
//!   whole);
//! - its name appears nowhere else in the line but as `$NAME` or
//!   `${NAME}` (not in `read NAME`, `printf -v NAME`, `${NAME:=…}`,
//!   `((NAME++))`, `declare NAME`, `export NAME`, a quoted string …);
//! - its name holds a lower-case letter (bash's own variables and the
//!   environment's are upper-case);
//! - and it may also be unset where it is read (a loop or a function may
//!   read it before it is set): the empty text is always among its values.

use std::collections::HashMap;

use super::shell::{self, Word};

/// Variables that hold an absolute path the line cannot change without
/// asking (a line setting `PWD` or `HOME` asks): the call's directory and
/// the command's home, an empty directory of its own inside the workspace.
pub(crate) const ABSOLUTE: [&str; 4] = ["$PWD", "${PWD}", "$HOME", "${HOME}"];

/// At most this many texts stand for one word.
const MAX_READINGS: usize = 64;

#[derive(Debug, Default, Clone)]
pub(crate) struct Known(HashMap<String, Vec<String>>);

impl Known {
    /// What `command`, lexed as `lexed`, spells out.
    pub fn of_lexed(command: &str, lexed: &shell::Lexed) -> Known {
        if !lexed.errors.is_empty() {
            return Known::default();
        }
        // Each name's values, and how many places set it.
        let mut values: HashMap<String, (Vec<String>, usize)> = HashMap::new();
        let mut unknown: Vec<String> = Vec::new();
        for piece in &lexed.pieces {
            let words = &piece.words;
            if words.first().is_some_and(|w| w.is_keyword("for"))
                && let Some(name) = words.get(1).filter(|w| w.literal && !w.quoted)
            {
                let listed = words.get(2).is_some_and(|w| w.is_keyword("in"));
                let items = words.get(3..).unwrap_or_default();
                let entry = values.entry(name.text.clone()).or_default();
                entry.1 += 1;
                match listed && items.iter().all(|w| plain_value(w, &w.text)) {
                    true => entry.0.extend(items.iter().map(|w| w.text.clone())),
                    false => unknown.push(name.text.clone()),
                }
                continue;
            }
            for word in words.iter().take_while(|w| w.assignment) {
                let Some(name) = word.assigned_name() else {
                    continue;
                };
                let entry = values.entry(name.to_string()).or_default();
                entry.1 += 1;
                let value = word.text.split_once('=').map(|(_, v)| v);
                match value {
                    Some(value)
                        if word.assigned_subscript().is_none()
                            && !word.text.contains("+=")
                            && plain_value(word, value) =>
                    {
                        entry.0.push(value.to_string())
                    }
                    _ => unknown.push(name.to_string()),
                }
            }
        }
        // The line as bash reads names in it: quotes, backslashes and line
        // joins taken out (`printf -v fo''o`, `fo\⏎o` name `foo`); and
        // every word as the lexer read it (`$'\x66oo'` is `foo`).
        let joined = command.replace("\\\n", "").replace(['\'', '"', '\\'], "");
        let words: Vec<&str> = lexed
            .pieces
            .iter()
            .flat_map(|p| {
                p.words
                    .iter()
                    .chain(p.redirects.iter().map(|r| &r.target))
                    .map(|w| w.text.as_str())
            })
            .collect();
        let mut known = HashMap::new();
        for (name, (mut texts, sets)) in values {
            if unknown.contains(&name)
                || !name.chars().any(|c| c.is_ascii_lowercase())
                || !shell::is_name(&name)
                || other_mentions(command, &name) != sets
                || other_mentions(&joined, &name) != sets
                || words
                    .iter()
                    .map(|w| other_mentions(w, &name))
                    .sum::<usize>()
                    != sets
            {
                continue;
            }
            texts.push(String::new());
            texts.sort();
            texts.dedup();
            known.insert(name, texts);
        }
        Known(known)
    }

    /// The texts `word` stands for, when it is made of literal text and
    /// known variables (`$f`, `${f}`) alone; `None` otherwise, or when an
    /// unquoted word may vanish (an empty value) or stand for too many.
    pub fn readings(&self, word: &Word) -> Option<Vec<String>> {
        if !word.computed || self.0.is_empty() {
            return None;
        }
        let mut readings = vec![String::new()];
        let mut rest = word.text.as_str();
        // Text that brace expansion, globbing or a tilde may change: the
        // words it stands for are not these texts.
        let expands = |literal: &str| literal.contains(['{', '}', '*', '?', '[', ']', '~']);
        while let Some(at) = rest.find(['$', '`']) {
            let literal = &rest[..at];
            if expands(literal) {
                return None;
            }
            rest = &rest[at..];
            let (name, after) = reference(rest)?;
            let texts = self.0.get(name)?;
            let mut next = Vec::with_capacity(readings.len() * texts.len());
            for reading in &readings {
                for text in texts {
                    next.push(format!("{reading}{literal}{text}"));
                }
            }
            if next.len() > MAX_READINGS {
                return None;
            }
            readings = next;
            rest = after;
        }
        if expands(rest) {
            return None;
        }
        for reading in &mut readings {
            reading.push_str(rest);
        }
        if !word.quoted && readings.iter().any(String::is_empty) {
            return None;
        }
        Some(readings)
    }
}

/// `$NAME` or `${NAME}` at the start of `text`: the name and what follows.
fn reference(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix('$')?;
    if let Some(braced) = inner.strip_prefix('{') {
        let close = braced.find('}')?;
        let name = &braced[..close];
        return shell::is_name(name).then(|| (name, &braced[close + 1..]));
    }
    let end = inner
        .find(|c: char| c != '_' && !c.is_ascii_alphanumeric())
        .unwrap_or(inner.len());
    let name = &inner[..end];
    shell::is_name(name).then(|| (name, &inner[end..]))
}

/// A value that splitting and globbing leave as it is.
fn plain_value(word: &Word, value: &str) -> bool {
    word.literal
        && !value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '*' | '?' | '[' | '{' | '}' | '$' | '`'))
}

/// How many times `name` appears in `command` as a word of its own other
/// than where it is read (`$name`, `${name}`): the places that set it,
/// when it is known.
fn other_mentions(command: &str, name: &str) -> usize {
    let is_name_char = |c: char| c == '_' || c.is_ascii_alphanumeric();
    let mut count = 0;
    let mut from = 0;
    while let Some(found) = command[from..].find(name) {
        let at = from + found;
        let end = at + name.len();
        from = end;
        let before = command[..at].chars().next_back();
        let after = command[end..].chars().next();
        if after.is_some_and(is_name_char) {
            continue;
        }
        // Glued to an option (`printf -vNAME`, `read -aNAME`), it is set
        // there; inside another word, it is another name.
        let token_start = command[..at]
            .rfind(|c: char| c.is_whitespace() || ";&|()<>\"'".contains(c))
            .map_or(0, |i| i + 1);
        let in_option = command[token_start..at].starts_with(['-', '+']);
        if before.is_some_and(is_name_char) && !in_option {
            continue;
        }
        let read = before == Some('$') || (command[..at].ends_with("${") && after == Some('}'));
        if !read {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings(line: &str, word: &str) -> Option<Vec<String>> {
        let known = Known::of_lexed(line, &shell::lex(line, &mut 0, 0));
        let lexed = shell::lex(word, &mut 0, 0);
        known.readings(&lexed.pieces[0].words[0])
    }

    #[test]
    fn literal_assignments_and_for_lists_are_known() {
        assert_eq!(
            readings("f=src/a.rs; sed -n 1p \"$f\"", "\"$f\""),
            Some(vec!["".into(), "src/a.rs".into()])
        );
        assert_eq!(
            readings("for f in a b; do tee -a \"$f\"; done", "\"${f}.txt\""),
            Some(vec![".txt".into(), "a.txt".into(), "b.txt".into()])
        );
        assert_eq!(
            readings("x=.gi; tee \"${x}t/config\"", "\"${x}t/config\""),
            Some(vec!["t/config".into(), ".git/config".into()])
        );
    }

    #[test]
    fn anything_else_that_may_set_it_leaves_it_unknown() {
        for line in [
            "f=a; read f; echo \"$f\"",
            "f=a; printf -v f x; echo \"$f\"",
            "f=a; echo \"${f:=x}\"",
            "f=a; f+=b; echo \"$f\"",
            "f=$(pwd); echo \"$f\"",
            "f=*.rs; echo \"$f\"",
            "f='a b'; echo \"$f\"",
            "for f in *.rs; do echo \"$f\"; done",
            "for f; do echo \"$f\"; done",
            "F=a; echo \"$F\"",
            "f=a; declare f=b; echo \"$f\"",
            "f=a; export f; echo \"$f\"",
            "f=a; ((f++)); echo \"$f\"",
            "f=a; echo 'f'; echo \"$f\"",
            "f=a; printf -vf x; echo \"$f\"",
            "f=a; read -raf; echo \"$f\"",
            "foo=a; printf -v fo''o x; echo \"$foo\"",
            "foo=a; printf -v fo\\o x; echo \"$foo\"",
            "foo=a; printf -v $'\\x66oo' x; echo \"$foo\"",
            "echo \"${fo\\\no:=-x}\"; foo=a; echo \"$foo\"",
        ] {
            assert_eq!(
                readings(line, "\"$f\"").filter(|r| r.len() > 1),
                None,
                "{line}"
            );
        }
        // Set inside a substitution (another shell's), it is not known.
        assert_eq!(readings("f=a; echo $(f=b; echo) \"$f\"", "\"$f\""), None);
        assert_eq!(
            readings("f=a; echo \"${f}\" $(cat <<E\n$(f=b)\nE\n)", "\"$f\""),
            None
        );
        // Unset, an unquoted word vanishes: not known.
        assert_eq!(readings("f=a; echo $f", "$f"), None);
        // Nor braces, globs and tildes around them.
        for word in ["$f{-x,}", "$f[-]x", "\"$f\"*", "~$f"] {
            assert_eq!(readings("f=a; echo $f", word), None, "{word}");
        }
        // Other expansions are not read.
        assert_eq!(readings("f=a; echo \"$f$(pwd)\"", "\"$f$(pwd)\""), None);
    }
}
