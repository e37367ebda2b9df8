//! Per-file edit history: what a file held before each write, edit or
//! applied diff, so `undo_edit` can put it back.
//!
//! It lives in `Workspaces::history(owner, sub)`, outside every workspace
//! (nothing run inside a workspace can forge it) and on disk (it survives
//! restarts). One directory per file, named from the file's normalised
//! workspace path; one entry file per change, numbered, newest last, at
//! most [`HISTORY_CAP`] kept. An entry is a JSON header line followed by the
//! previous bytes; entries are written to a temporary name and renamed, so a
//! crash never leaves half an entry under a real name.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use base64::Engine as _;
use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};

use super::confine::WorkspacePath;

/// Entries kept per file; older ones are dropped.
pub const HISTORY_CAP: usize = 20;

/// The mark, in a file's entries, that some were dropped as too old (not
/// a number, so never taken for an entry).
const DROPPED: &str = "dropped";

/// What an entry records besides the previous bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub v: u8,
    /// The file's workspace path, base64url of its bytes (verifies hashed keys).
    pub path_b64: String,
    /// The tool whose change this entry undoes.
    pub tool: String,
    /// Whether the file existed before the change (else undo removes it).
    pub existed: bool,
    /// Unix mode of the previous file, restored with its content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Directories the change created (shallowest first); undo removes them
    /// again when they are empty.
    #[serde(default)]
    pub created_dirs: Vec<String>,
    /// Length and FNV-1a hash of the content the change left, so undo can
    /// tell whether something changed the file since.
    pub after_len: u64,
    pub after_hash: String,
    pub at_ms: u64,
    /// The call that made the change (thread, call id), so the call that
    /// takes it back can mark that call undone. Absent in entries written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<(String, String)>,
}

impl Header {
    pub fn new(path: &WorkspacePath, tool: &str, existed: bool, after: &[u8]) -> Header {
        Header {
            v: 1,
            path_b64: b64(path_bytes(path)),
            tool: tool.to_string(),
            existed,
            mode: None,
            created_dirs: vec![],
            after_len: after.len() as u64,
            after_hash: content_hash(after),
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            call: None,
        }
    }

    /// Whether `current` (None: the file is absent) is what the change left.
    pub fn left(&self, current: Option<&[u8]>) -> bool {
        current
            .is_some_and(|c| c.len() as u64 == self.after_len && content_hash(c) == self.after_hash)
    }
}

pub struct Entry {
    pub seq: u64,
    pub header: Header,
    /// The previous content; empty when the file did not exist.
    pub before: Vec<u8>,
}

/// The history of one workspace.
pub struct EditHistory {
    dir: Dir,
}

fn path_bytes(path: &WorkspacePath) -> &[u8] {
    path.rel().as_os_str().as_bytes()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// FNV-1a, 64 bits: a change detector, not a defence against forgery (the
/// history sits outside the workspace, where no command can write).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub fn content_hash(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64(bytes))
}

/// The directory name for a file's entries: base64url of the path, or, for
/// paths too long for one file name, a hash plus the length (entries carry
/// the full path, checked on read).
fn key(path: &WorkspacePath) -> PathBuf {
    let bytes = path_bytes(path);
    let encoded = b64(bytes);
    if encoded.len() <= 200 {
        PathBuf::from(format!("p_{encoded}"))
    } else {
        PathBuf::from(format!("h_{:016x}_{}", fnv1a64(bytes), bytes.len()))
    }
}

/// The number of a new entry: above the newest kept, and never one an
/// entry had before. A call's undo record names its entry by number, so a
/// number used again (after `undo_edit` removed the newest entry) would
/// make that record undo another call's change. The clock in microseconds
/// keeps numbers growing across removals, restarts and emptied histories.
fn next_seq(newest: Option<u64>) -> u64 {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    newest.map_or(1, |n| n + 1).max(now_us)
}

impl EditHistory {
    pub fn new(dir: Dir) -> EditHistory {
        EditHistory { dir }
    }

    fn seqs(&self, path: &WorkspacePath) -> io::Result<Vec<u64>> {
        let entries = match self.dir.read_dir(key(path)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut seqs: Vec<u64> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .collect();
        seqs.sort_unstable();
        Ok(seqs)
    }

    /// Record the state before a change; returns the entry's number.
    pub fn push(&self, path: &WorkspacePath, header: &Header, before: &[u8]) -> io::Result<u64> {
        let key = key(path);
        self.dir.create_dir_all(&key)?;
        let seqs = self.seqs(path)?;
        let seq = next_seq(seqs.last().copied());
        let tmp = key.join(format!(".tmp-{:016x}", rand::random::<u64>()));
        let mut file = self
            .dir
            .open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
        let mut line = serde_json::to_vec(header).map_err(io::Error::other)?;
        line.push(b'\n');
        let written = file
            .write_all(&line)
            .and_then(|()| file.write_all(before))
            .and_then(|()| file.sync_data());
        drop(file);
        if let Err(e) = written.and_then(|()| {
            self.dir
                .rename(&tmp, &self.dir, key.join(format!("{seq:012}")))
        }) {
            let _ = self.dir.remove_file(&tmp);
            return Err(e);
        }
        let excess = (seqs.len() + 1).saturating_sub(HISTORY_CAP);
        if excess > 0 {
            // So that an undo finding nothing left can say why.
            let _ = self.dir.write(key.join(DROPPED), b"");
        }
        for old in seqs.iter().take(excess) {
            let _ = self.dir.remove_file(key.join(format!("{old:012}")));
        }
        Ok(seq)
    }

    /// Whether entries of the file were dropped as too old (past
    /// [`HISTORY_CAP`]).
    pub fn dropped_any(&self, path: &WorkspacePath) -> bool {
        self.dir.exists(key(path).join(DROPPED))
    }

    /// The newest entry of a file, if any.
    pub fn latest(&self, path: &WorkspacePath) -> io::Result<Option<Entry>> {
        let Some(&seq) = self.seqs(path)?.last() else {
            return Ok(None);
        };
        self.read(path, seq).map(Some)
    }

    pub fn contains(&self, path: &WorkspacePath, seq: u64) -> io::Result<bool> {
        Ok(self.seqs(path)?.contains(&seq))
    }

    pub fn count(&self, path: &WorkspacePath) -> io::Result<usize> {
        Ok(self.seqs(path)?.len())
    }

    fn read(&self, path: &WorkspacePath, seq: u64) -> io::Result<Entry> {
        let mut file = self.dir.open(key(path).join(format!("{seq:012}")))?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        let split = raw.iter().position(|b| *b == b'\n').ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "history entry has no header")
        })?;
        let header: Header = serde_json::from_slice(&raw[..split])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if header.path_b64 != b64(path_bytes(path)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "history entry belongs to another path",
            ));
        }
        Ok(Entry {
            seq,
            header,
            before: raw[split + 1..].to_vec(),
        })
    }

    /// Remove entry `seq`, which was undone, and remember that it was: a
    /// later look for it can tell "undone already" from "dropped as too
    /// old" ([`was_undone`](Self::was_undone)). The newest
    /// [`HISTORY_CAP`] such marks are kept.
    pub fn undone(&self, path: &WorkspacePath, seq: u64) -> io::Result<()> {
        let key = key(path);
        self.dir.create_dir_all(&key)?;
        self.dir
            .open_with(
                key.join(format!("{seq:012}.undone")),
                OpenOptions::new().write(true).create(true),
            )
            .map(drop)?;
        let mut marks: Vec<u64> = self
            .dir
            .read_dir(&key)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".undone"))
                    .and_then(|n| n.parse().ok())
            })
            .collect();
        marks.sort_unstable();
        for old in marks.iter().take(marks.len().saturating_sub(HISTORY_CAP)) {
            let _ = self.dir.remove_file(key.join(format!("{old:012}.undone")));
        }
        self.dir.remove_file(key.join(format!("{seq:012}")))
    }

    /// Whether entry `seq` was undone ([`undone`](Self::undone)), as far
    /// as the marks kept tell.
    pub fn was_undone(&self, path: &WorkspacePath, seq: u64) -> bool {
        self.dir
            .symlink_metadata(key(path).join(format!("{seq:012}.undone")))
            .is_ok()
    }

    pub fn remove(&self, path: &WorkspacePath, seq: u64) -> io::Result<()> {
        let key = key(path);
        self.dir.remove_file(key.join(format!("{seq:012}")))?;
        // An emptied file directory goes too; failure means it is not empty.
        let _ = self.dir.remove_dir(&key);
        Ok(())
    }
}

static LOCKS: LazyLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = LazyLock::new(Default::default);

/// Run `f` holding this process's lock for one file (`key` names workspace
/// and file), so two changes to a file never interleave their read, history
/// record and write.
pub fn with_file_lock<T>(key: &str, f: impl FnOnce() -> T) -> T {
    let lock = {
        let mut table = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
        table.entry(key.to_string()).or_default().clone()
    };
    let result = {
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        f()
    };
    let mut table = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    // Only the table and this call hold it: nobody waits, drop the entry.
    if Arc::strong_count(&lock) == 2 {
        table.remove(key);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> (tempfile::TempDir, EditHistory) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        (tmp, EditHistory::new(dir))
    }

    fn path(p: &str) -> WorkspacePath {
        WorkspacePath::parse(p, std::path::Path::new("/nowhere")).unwrap()
    }

    #[test]
    fn entries_stack_and_are_capped() {
        let (_tmp, history) = history();
        let p = path("a/b.txt");
        for i in 0..(HISTORY_CAP + 5) {
            let before = format!("v{i}");
            let header = Header::new(&p, "write_file", true, b"x");
            history.push(&p, &header, before.as_bytes()).unwrap();
        }
        assert_eq!(history.count(&p).unwrap(), HISTORY_CAP);
        assert!(history.dropped_any(&p), "the dropping is marked");
        assert!(!history.dropped_any(&path("other")));
        let latest = history.latest(&p).unwrap().unwrap();
        assert_eq!(latest.before, format!("v{}", HISTORY_CAP + 4).as_bytes());
        history.remove(&p, latest.seq).unwrap();
        let next = history.latest(&p).unwrap().unwrap();
        assert_eq!(next.before, format!("v{}", HISTORY_CAP + 3).as_bytes());
        assert!(history.latest(&path("other")).unwrap().is_none());
    }

    /// An entry removed by an undo leaves its number unused: the next
    /// change gets another, so the undo record that named the removed
    /// entry cannot reach the new one; also once the history emptied.
    #[test]
    fn entry_numbers_are_never_used_twice() {
        let (_tmp, history) = history();
        let p = path("n.txt");
        let header = Header::new(&p, "edit_file", true, b"x");
        let first = history.push(&p, &header, b"base").unwrap();
        let second = history.push(&p, &header, b"edit-1").unwrap();
        assert!(second > first);
        history.remove(&p, second).unwrap();
        let third = history.push(&p, &header, b"edit-2").unwrap();
        assert!(third > second, "{third} after {second}");
        assert!(!history.contains(&p, second).unwrap());
        history.remove(&p, third).unwrap();
        history.remove(&p, first).unwrap();
        let fourth = history.push(&p, &header, b"again").unwrap();
        assert!(fourth > third, "an emptied history starts above: {fourth}");
    }

    #[test]
    fn long_paths_get_hashed_keys_and_keep_their_path() {
        let (_tmp, history) = history();
        let long = format!("{}/f.txt", "d".repeat(200));
        let p = path(&long);
        let header = Header::new(&p, "write_file", false, b"new\n");
        history.push(&p, &header, b"").unwrap();
        let entry = history.latest(&p).unwrap().unwrap();
        assert!(!entry.header.existed);
        assert!(entry.header.left(Some(b"new\n")));
        assert!(!entry.header.left(Some(b"other\n")));
        assert!(!entry.header.left(None));
    }

    #[test]
    fn the_lock_table_empties_itself() {
        with_file_lock("lock-test-k", || with_file_lock("lock-test-k2", || ()));
        let table = LOCKS.lock().unwrap();
        assert!(!table.contains_key("lock-test-k") && !table.contains_key("lock-test-k2"));
    }
}
