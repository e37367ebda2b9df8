//! Results kept on disk while the database cannot take them.
//!
//! When a tool has run and its result unit cannot be committed because the
//! database is unreachable, the engine writes the unit here before it
//! answers `503`, writes it again to the database in the background, and
//! deletes the file once the unit commits (or is refused for good). At
//! start-up, before calls left `running` are finished as `INTERRUPTED`,
//! every unit still here is written first: a result that was waiting out an
//! outage survives a restart of toolgate too.
//!
//! One JSON file per unit, named by a time-ordered id so start-up writes them
//! in the order they were kept. A file is written under a temporary name,
//! synced, renamed into place, and the directory synced: a crash leaves
//! either the whole file or none (a stray temporary file is ignored, and
//! removed at the next start-up).

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::store::{StoreError, WriteOp, WriteUnit};

const SUFFIX: &str = ".json";
const TEMPORARY: &str = ".tmp";

#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// The spool in `dir`, created if missing. Opened once, at start-up:
    /// temporary files left by a crash while keeping are removed (their
    /// callers were never told the result was kept).
    pub fn open(dir: &Path) -> io::Result<Spool> {
        fs::create_dir_all(dir)?;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.to_str().is_some_and(|p| p.ends_with(TEMPORARY)) {
                fs::remove_file(&path)?;
            }
        }
        Ok(Spool {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write `unit` durably; returns the file to [`forget`](Self::forget)
    /// once the unit is committed.
    pub fn keep(&self, unit: &WriteUnit) -> io::Result<PathBuf> {
        let name = format!("result-{}", uuid::Uuid::now_v7().simple());
        let temporary = self.dir.join(format!("{name}{TEMPORARY}"));
        let path = self.dir.join(format!("{name}{SUFFIX}"));
        let text = serde_json::to_vec(unit).map_err(io::Error::other)?;
        // Results are as private as the database: readable by toolgate only.
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let write = || -> io::Result<()> {
            let mut file = options.open(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            fs::rename(&temporary, &path)
        };
        // A file cut short (a full disk) is not left behind.
        write().inspect_err(|_| {
            let _ = fs::remove_file(&temporary);
        })?;
        fs::File::open(&self.dir)?.sync_all()?;
        Ok(path)
    }

    /// Delete a kept unit's file; a file already gone is fine.
    /// Move a kept result whose call was finished otherwise meanwhile into
    /// `set-aside/` beside it: no longer written, but not lost (an operator
    /// can read what the call really did).
    pub fn set_aside(path: &Path) {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return;
        };
        let aside = dir.join("set-aside");
        if let Err(e) = fs::create_dir_all(&aside).and_then(|()| fs::rename(path, aside.join(name)))
        {
            tracing::error!(path = %path.display(), error = %e, "could not set a kept result aside");
        }
    }

    pub fn forget(path: &Path) {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!(
                path = %path.display(),
                error = %e,
                "could not delete a kept result that is stored; start-up will find it committed"
            ),
        }
    }

    /// The units still kept, oldest first. A file that does not read as a
    /// unit is renamed to `*.unreadable` and logged, not lost.
    pub fn pending(&self) -> io::Result<Vec<(PathBuf, WriteUnit)>> {
        let mut paths: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.to_str().is_some_and(|p| p.ends_with(SUFFIX)))
            .collect();
        paths.sort();
        let mut units = Vec::with_capacity(paths.len());
        for path in paths {
            let read = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()));
            match read {
                Ok(unit) => units.push((path, unit)),
                Err(error) => {
                    let aside = path.with_extension("unreadable");
                    tracing::error!(
                        path = %path.display(),
                        error,
                        "a kept result does not read; set aside as {}",
                        aside.display()
                    );
                    fs::rename(&path, &aside)?;
                }
            }
        }
        Ok(units)
    }

    /// (thread id, call id) of every call whose result is still kept.
    pub fn pending_calls(&self) -> io::Result<HashSet<(String, String)>> {
        Ok(self
            .pending()?
            .iter()
            .filter_map(|(_, unit)| {
                finished_call(unit).map(|call| (unit.thread_id.clone(), call.to_string()))
            })
            .collect())
    }
}

/// Whether a result unit is worth keeping on disk: only when its call is
/// already recorded (`running`), so that losing the unit would leave the
/// call to be finished as `INTERRUPTED`. A unit that records its call too
/// (a read-only call whose write-ahead was deferred, a refused call) leaves
/// no trace if it is lost, and its call had no effect: its caller, told to
/// retry, runs it again.
pub fn worth_keeping(unit: &WriteUnit) -> bool {
    !unit
        .ops
        .iter()
        .any(|op| matches!(op, WriteOp::InsertToolCall(_)))
}

/// The spool's directory could not be read: start-up stops rather than
/// finish calls whose results may be kept there.
pub fn unreadable(error: io::Error) -> StoreError {
    StoreError::Corrupt(format!("kept results unreadable: {error}"))
}

/// The call a result unit finishes.
pub fn finished_call(unit: &WriteUnit) -> Option<&str> {
    unit.ops.iter().find_map(|op| match op {
        WriteOp::FinishToolCall(finished) => Some(finished.id.as_str()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        CallStatus, FinishedToolCall, JsonText, NewEvent, NewMessage, NewToolCall, Role,
    };

    fn unit(call: &str) -> WriteUnit {
        WriteUnit {
            thread_id: "t".into(),
            owner: "alice".into(),
            ops: vec![
                WriteOp::FinishToolCall(FinishedToolCall {
                    id: call.into(),
                    status: CallStatus::Success,
                    undo: None,
                    message_id: "m".into(),
                    finished_at_ms: 7,
                }),
                WriteOp::InsertMessage(NewMessage {
                    id: "m".into(),
                    role: Role::Tool,
                    content: "hi".into(),
                    metadata: JsonText::of(&serde_json::json!({
                        "tool_agent_output": {"text": "hi", "n": 1.5}
                    })),
                    tool_call_id: Some(call.into()),
                    created_at_ms: 7,
                    declares: Vec::new(),
                }),
                WriteOp::AppendEvents(vec![NewEvent {
                    event_type: "TOOL_CALL_RESULT".into(),
                    data: "{\"type\":\"TOOL_CALL_RESULT\"}".into(),
                    created_at_ms: 7,
                    announces: Some("m".into()),
                }]),
            ],
        }
    }

    #[test]
    fn kept_units_read_back_in_order_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("kept")).unwrap();
        let first = spool.keep(&unit("a")).unwrap();
        spool.keep(&unit("b")).unwrap();
        // A stray temporary file (a crash while keeping) is not a unit.
        fs::write(spool.dir().join("result-x.tmp"), b"{").unwrap();
        let pending = spool.pending().unwrap();
        assert_eq!(
            pending.iter().map(|(_, u)| u.clone()).collect::<Vec<_>>(),
            [unit("a"), unit("b")]
        );
        assert_eq!(
            spool.pending_calls().unwrap(),
            HashSet::from([("t".into(), "a".into()), ("t".into(), "b".into())])
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&first).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        Spool::forget(&first);
        Spool::forget(&first);
        assert_eq!(spool.pending().unwrap().len(), 1);
        // Opened again (a restart): the stray temporary file is gone, the
        // kept unit is not.
        let spool = Spool::open(spool.dir()).unwrap();
        assert!(!spool.dir().join("result-x.tmp").exists());
        assert_eq!(spool.pending().unwrap().len(), 1);
    }

    #[test]
    fn only_results_of_recorded_calls_are_worth_keeping() {
        let result = unit("a");
        assert!(worth_keeping(&result));
        let mut with_record = unit("a");
        with_record.ops.insert(
            0,
            WriteOp::InsertToolCall(NewToolCall {
                id: "a".into(),
                run_id: "a".into(),
                tool_name: "echo".into(),
                args: JsonText::of(&serde_json::json!({"text": "hi"})),
                status: CallStatus::Running,
                undo_of: None,
                workspace: None,
                dry_run: false,
                created_at_ms: 7,
                instance: None,
                declared_by: None,
                parent_message_id: None,
            }),
        );
        assert!(!worth_keeping(&with_record));
    }

    #[test]
    fn an_unreadable_file_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        fs::write(dir.path().join("result-0.json"), b"{\"thread_id\":").unwrap();
        assert!(spool.pending().unwrap().is_empty());
        assert!(dir.path().join("result-0.unreadable").exists());
        assert!(!dir.path().join("result-0.json").exists());
    }
}
