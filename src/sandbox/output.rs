//! Capped capture of one output stream: the first half of the cap and the
//! last half are kept, whatever the command prints in between is counted
//! and dropped. Memory stays bounded by the cap however much is printed.
//!
//! The text is kept as a terminal would show it: a carriage return that
//! does not end a line (`\r\n` does, and is kept) moves back to the start
//! of the line, and what follows writes over it. A progress bar redrawn a
//! thousand times leaves its last state, not a thousand copies.

use std::collections::VecDeque;

/// Text of one stream, decoded lossily (invalid UTF-8 becomes U+FFFD,
/// sequences split across reads are joined first).
#[derive(Debug)]
pub(crate) struct CappedText {
    head_cap: usize,
    tail_cap: usize,
    head: String,
    head_chars: usize,
    tail: VecDeque<char>,
    /// The last character dropped before the tail: a `'\n'` means the tail
    /// starts a line.
    before_tail: Option<char>,
    total_chars: usize,
    /// The start of a UTF-8 sequence cut by the end of the last read.
    pending: Vec<u8>,
    scratch: Vec<u8>,
    /// The line being printed: held until its line feed (or until it is
    /// [`LINE_HOLD`] characters long), since a carriage return may still
    /// write over it.
    line: Vec<char>,
    /// Where in `line` the next character goes.
    cursor: usize,
    /// A carriage return was the last character read: a line feed next
    /// makes it a `\r\n` line end, anything else a return to the line's
    /// start.
    carriage_return: bool,
}

impl CappedText {
    /// Keeps at most `cap` characters: `cap / 2` from the start, the rest
    /// from the end.
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        CappedText {
            head_cap,
            tail_cap: cap - head_cap,
            head: String::new(),
            head_chars: 0,
            tail: VecDeque::new(),
            before_tail: None,
            total_chars: 0,
            pending: Vec::new(),
            scratch: Vec::new(),
            line: Vec::new(),
            cursor: 0,
            carriage_return: false,
        }
    }

    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        if self.pending.is_empty() {
            self.decode(bytes);
        } else {
            let mut joined = std::mem::take(&mut self.scratch);
            joined.clear();
            joined.append(&mut self.pending);
            joined.extend_from_slice(bytes);
            self.decode(&joined);
            self.scratch = joined;
        }
    }

    /// The stream ended: a dangling partial sequence is invalid, and the
    /// last line (without its line feed) is kept as it stands; a carriage
    /// return that ended the stream moved only the cursor.
    pub(crate) fn finish(&mut self) {
        if !self.pending.is_empty() {
            self.pending.clear();
            self.print(REPLACEMENT);
        }
        self.carriage_return = false;
        self.end_line("");
    }

    fn decode(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.print(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let last = chunks.peek().is_none();
            let incomplete =
                matches!(std::str::from_utf8(invalid), Err(e) if e.error_len().is_none());
            if last && incomplete {
                self.pending.extend_from_slice(invalid);
            } else {
                self.print(REPLACEMENT);
            }
        }
    }

    /// Decoded text as a terminal takes it: whole lines that no carriage
    /// return touches go straight to the capture, the line still being
    /// printed is held in `line`.
    fn print(&mut self, text: &str) {
        let mut rest = text;
        while !rest.is_empty() {
            if std::mem::take(&mut self.carriage_return) {
                if let Some(after) = rest.strip_prefix('\n') {
                    self.end_line("\r\n");
                    rest = after;
                    continue;
                }
                self.cursor = 0;
            }
            let plain_end = rest.find('\r').unwrap_or(rest.len());
            let plain = &rest[..plain_end];
            match (plain.find('\n'), plain.rfind('\n')) {
                (Some(first), Some(last)) => {
                    self.write_over(&plain[..first]);
                    self.end_line("\n");
                    self.push_str(&plain[first + 1..=last]);
                    self.write_over(&plain[last + 1..]);
                }
                _ => self.write_over(plain),
            }
            if plain_end < rest.len() {
                self.carriage_return = true;
                rest = &rest[plain_end + 1..];
            } else {
                rest = "";
            }
        }
    }

    /// Characters of the current line (no line break in `text`), each
    /// written at the cursor: over what is there, or added at the end.
    fn write_over(&mut self, text: &str) {
        for c in text.chars() {
            match self.line.get_mut(self.cursor) {
                Some(slot) => *slot = c,
                None => self.line.push(c),
            }
            self.cursor += 1;
            if self.line.len() >= LINE_HOLD {
                // A line this long is not a progress bar: what it holds
                // is kept, and only what comes after can be written over.
                self.end_line("");
            }
        }
    }

    /// The current line, then `end`, go to the capture.
    fn end_line(&mut self, end: &str) {
        if !self.line.is_empty() {
            let line: String = self.line.drain(..).collect();
            self.push_str(&line);
        }
        self.cursor = 0;
        self.push_str(end);
    }

    fn push_str(&mut self, s: &str) {
        let mut rest = s;
        while self.head_chars < self.head_cap {
            let mut chars = rest.chars();
            match chars.next() {
                Some(c) => {
                    self.head.push(c);
                    self.head_chars += 1;
                    self.total_chars += 1;
                    rest = chars.as_str();
                }
                None => return,
            }
        }
        if rest.len() <= self.tail_cap {
            // Few enough bytes, so few enough characters: one by one.
            for c in rest.chars() {
                self.push_tail(c);
            }
            return;
        }
        // A large chunk: only its last `tail_cap` characters can survive,
        // the rest is counted without being copied.
        let count = rest.chars().count();
        self.total_chars += count;
        if count >= self.tail_cap {
            let start = match self.tail_cap {
                0 => rest.len(),
                n => rest.char_indices().rev().nth(n - 1).map_or(0, |(i, _)| i),
            };
            if let Some(c) = rest[..start]
                .chars()
                .next_back()
                .or(self.tail.back().copied())
            {
                self.before_tail = Some(c);
            }
            self.tail.clear();
            self.tail.extend(rest[start..].chars());
        } else {
            let overflow = (self.tail.len() + count).saturating_sub(self.tail_cap);
            if let Some(c) = self.tail.drain(..overflow).next_back() {
                self.before_tail = Some(c);
            }
            self.tail.extend(rest.chars());
        }
    }

    fn push_tail(&mut self, c: char) {
        self.total_chars += 1;
        if self.tail_cap == 0 {
            self.before_tail = Some(c);
            return;
        }
        if self.tail.len() == self.tail_cap {
            self.before_tail = self.tail.pop_front();
        }
        self.tail.push_back(c);
    }

    /// Characters received, kept or not.
    pub(crate) fn total_chars(&self) -> usize {
        self.total_chars
    }

    pub(crate) fn omitted_chars(&self) -> usize {
        self.total_chars - self.head_chars - self.tail.len()
    }

    /// Head, a marker naming what was dropped, tail. Where something was
    /// dropped, the head and the tail are cut back to whole lines (a partial
    /// line reads as a value the command never printed), and the marker is
    /// a line of its own; unless that would drop more than [`LINE_SLACK`]
    /// characters of one line: a long line stays cut where the cap fell,
    /// and the marker stands inside it, with no line break the command did
    /// not print.
    pub(crate) fn render(&self) -> String {
        let omitted = self.omitted_chars();
        let mut out = String::with_capacity(self.head.len() + self.tail.len() + 64);
        if omitted == 0 {
            out.push_str(&self.head);
            out.extend(self.tail.iter());
            return out;
        }
        let tail: String = self.tail.iter().collect();
        let head = match self.head.rfind('\n') {
            Some(end) if self.head[end + 1..].chars().count() <= LINE_SLACK => &self.head[..=end],
            _ => self.head.as_str(),
        };
        let (kept_tail, starts_line) = match tail.find('\n') {
            _ if self.before_tail == Some('\n') => (tail.as_str(), true),
            Some(start) if tail[..start].chars().count() < LINE_SLACK => (&tail[start + 1..], true),
            _ => (tail.as_str(), false),
        };
        let cut = self.head[head.len()..].chars().count()
            + tail[..tail.len() - kept_tail.len()].chars().count();
        out.push_str(head);
        out.push_str(&omitted_text(omitted + cut));
        if starts_line || kept_tail.is_empty() {
            out.push('\n');
        }
        out.push_str(kept_tail);
        out
    }
}

/// Most characters of a partial line [`CappedText::render`] drops to keep
/// whole lines.
const LINE_SLACK: usize = 2000;

/// Most characters of one line held back for a carriage return to write
/// over.
const LINE_HOLD: usize = 4096;

/// What stands for bytes that are not UTF-8.
const REPLACEMENT: &str = "\u{FFFD}";

/// What stands for dropped output: a line of its own for whole lines,
/// inside a long line for part of it.
fn omitted_text(omitted: usize) -> String {
    format!("… [{omitted} characters omitted] …")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn omission_marker(omitted: usize) -> String {
        format!("{}\n", omitted_text(omitted))
    }

    fn capture(cap: usize, parts: &[&[u8]]) -> CappedText {
        let mut t = CappedText::new(cap);
        for p in parts {
            t.push_bytes(p);
        }
        t.finish();
        t
    }

    #[test]
    fn short_output_is_kept_whole() {
        let t = capture(100, &[b"hello ", b"world\n"]);
        assert_eq!(t.render(), "hello world\n");
        assert_eq!(t.omitted_chars(), 0);
        assert_eq!(t.total_chars(), 12);
    }

    #[test]
    fn long_output_keeps_head_and_tail_around_a_marker() {
        let data: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let t = capture(10, &[data.as_bytes()]);
        assert_eq!(t.omitted_chars(), 990);
        assert_eq!(
            t.render(),
            format!("{}{}{}", &data[..5], omitted_text(990), &data[995..])
        );
    }

    /// A long line cut where the cap fell keeps the marker inside it; the
    /// whole lines after it start on a line of their own.
    #[test]
    fn a_long_line_cut_gets_no_line_break_it_did_not_have() {
        let data = format!("{}\nend\n", "a".repeat(10_000));
        let text = capture(100, &[data.as_bytes()]).render();
        assert_eq!(
            text,
            format!("{}{}\nend\n", "a".repeat(50), omitted_text(9_951)),
        );
        let data = format!("start\n{}", "b".repeat(10_000));
        let text = capture(100, &[data.as_bytes()]).render();
        assert_eq!(
            text,
            format!("start\n{}{}", omitted_text(9_950), "b".repeat(50)),
        );
    }

    /// A tail that starts right after a line break is a whole line: kept.
    #[test]
    fn a_tail_starting_a_line_is_kept_whole() {
        let data = "abcd\n".repeat(100);
        for parts in [vec![data.as_bytes()], data.as_bytes().chunks(3).collect()] {
            let text = capture(10, &parts).render();
            assert_eq!(text, format!("abcd\n{}abcd\n", omission_marker(490)));
        }
    }

    /// A partial line at either end of what is dropped is dropped with it:
    /// `seq` cut inside `3222` must not show `32`.
    #[test]
    fn dropped_output_takes_the_partial_lines_around_it() {
        let data: String = (1..=2000).map(|i| format!("{i}\n")).collect();
        let t = capture(40, &[data.as_bytes()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        let marker = lines.iter().position(|l| l.starts_with('…')).unwrap();
        let numbers = |ls: &[&str]| -> Vec<u32> { ls.iter().map(|l| l.parse().unwrap()).collect() };
        let head = numbers(&lines[..marker]);
        let tail = numbers(&lines[marker + 1..]);
        assert_eq!(head, (1..=head.len() as u32).collect::<Vec<_>>(), "{text}");
        assert_eq!(*tail.last().unwrap(), 2000, "{text}");
        assert_eq!(
            tail,
            (2001 - tail.len() as u32..=2000).collect::<Vec<_>>(),
            "{text}"
        );
        // What the marker counts and what is shown add up to the output.
        let shown: usize = lines
            .iter()
            .filter(|l| !l.starts_with('…'))
            .map(|l| l.len() + 1)
            .sum();
        let said: usize = lines[marker]
            .trim_start_matches("… [")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(shown + said, data.len(), "{text}");
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let t = capture(6, &[b"abcdef"]);
        assert_eq!(t.render(), "abcdef");
        assert_eq!(t.omitted_chars(), 0);
    }

    #[test]
    fn caps_count_characters_not_bytes() {
        let t = capture(4, &["ééééé".as_bytes()]);
        assert_eq!(t.render(), format!("éé{}éé", omitted_text(1)));
    }

    #[test]
    fn sequences_split_across_reads_are_joined() {
        let bytes = "→x".as_bytes();
        let t = capture(100, &[&bytes[..1], &bytes[1..2], &bytes[2..]]);
        assert_eq!(t.render(), "→x");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let t = capture(100, &[b"a\xffb", b"\xe2\x82"]);
        assert_eq!(t.render(), "a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn large_and_small_chunks_give_the_same_text() {
        let data: String = (0..5000).map(|i| ['a', 'é', '→', 'z'][i % 4]).collect();
        let whole = capture(101, &[data.as_bytes()]);
        let pieces: Vec<&[u8]> = data.as_bytes().chunks(7).collect();
        let small = capture(101, &pieces);
        let mixed = capture(101, &[&data.as_bytes()[..4000], &data.as_bytes()[4000..]]);
        assert_eq!(whole.render(), small.render());
        assert_eq!(whole.render(), mixed.render());
        assert_eq!(whole.total_chars(), 5000);
        assert_eq!(small.total_chars(), 5000);
        let expected_tail: String = data.chars().skip(5000 - 51).collect();
        assert!(whole.render().ends_with(&expected_tail));
    }

    /// A progress bar redrawn with carriage returns leaves its last
    /// state; `\r\n` line ends stay as they are; a shorter redraw leaves
    /// the end of the longer line under it, as on a terminal.
    #[test]
    fn carriage_returns_write_over_the_line_as_a_terminal_shows_it() {
        let bar: String = (0..=100).map(|p| format!("\r{p:3}%")).collect();
        let data = format!("start\n{bar}\ndone\r\nnext\r\n");
        for parts in [
            vec![data.as_bytes()],
            data.as_bytes().chunks(1).collect(),
            data.as_bytes().chunks(5).collect(),
        ] {
            let t = capture(1000, &parts);
            assert_eq!(t.render(), "start\n100%\ndone\r\nnext\r\n");
            assert_eq!(t.total_chars(), t.render().chars().count());
        }
        assert_eq!(capture(100, &[b"abcdef\rxy"]).render(), "xycdef");
        // One that ends the stream moved only the cursor.
        assert_eq!(capture(100, &[b"50%\r", b"99%\r"]).render(), "99%");
        assert_eq!(capture(100, &[b"a\r\r\nb"]).render(), "a\r\nb");
    }

    /// The progress bar's thousand redraws do not use up the cap: the
    /// lines around it are all kept.
    #[test]
    fn redraws_do_not_count_against_the_cap() {
        let bar: String = (0..10_000).map(|i| format!("\r{i:5} of 10000")).collect();
        let data = format!("before\n{bar}\nafter\n");
        let t = capture(100, &[data.as_bytes()]);
        assert_eq!(t.omitted_chars(), 0);
        assert_eq!(t.render(), "before\n 9999 of 10000\nafter\n");
    }

    /// A line longer than what is held back is kept as printed: a carriage
    /// return after it writes over only what follows.
    #[test]
    fn a_line_longer_than_the_hold_is_kept() {
        let long = "x".repeat(LINE_HOLD);
        let data = format!("{long}tail\rT");
        let text = capture(LINE_HOLD * 4, &[data.as_bytes()]).render();
        assert_eq!(text, format!("{long}Tail"));
    }

    #[test]
    fn a_zero_cap_keeps_only_the_marker() {
        let t = capture(0, &[b"abc"]);
        assert_eq!(t.render(), omission_marker(3));
    }
}
