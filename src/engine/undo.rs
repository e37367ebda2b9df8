//! Undo and rollback (seed 000 `Reversible`, saga style). A reversible tool
//! leaves an `UndoInfo` with its call; undoing runs that undo as a new call,
//! linked to the original, through the same pipeline and gates. Rolling a
//! run back undoes its reversible calls in reverse order and reports the
//! irreversible ones with their manual guide.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::{
    CallRequest, Cancelled, Engine, Executed, Rejection, SHARED_WAIT_POLL, STOP_GRACE, audit,
};
use crate::protocol::calls::{CallShape, IncomingCall};
use crate::protocol::now_ms;
use crate::protocol::tool_output::UndoInfo;
use crate::store::{CallStatus, StoreError, ToolCallRecord, WriteOp, WriteUnit};

#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("no tool call {0:?} in this thread")]
    NotFound(String),
    #[error("tool call {id:?} cannot be undone: {why}")]
    NotUndoable { id: String, why: String },
    #[error("tool call {id:?} is irreversible; to revert it by hand: {guide}")]
    Irreversible { id: String, guide: String },
    #[error("tool call {id:?} was already undone by {by:?}")]
    AlreadyUndone { id: String, by: String },
    #[error("run {0:?} has no tool calls in this thread")]
    RunNotFound(String),
    #[error(
        "run {0:?} has nothing left to undo: its calls were undone one by one, and it was never \
         rolled back as a run"
    )]
    AlreadyRolledBack(String),
    #[error(transparent)]
    Rejected(Rejection),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What rolling back did with one call of the run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RollbackStep {
    pub tool_call_id: String,
    pub tool_name: String,
    /// `undone`, `undo_failed`, `irreversible`, `already_undone`,
    /// `awaiting_approval` (the undo waits for one), `withdrawn` (the call
    /// itself waited for approval: it is denied, and never runs),
    /// `cancelled` (it was running: stopped before it finished, it left
    /// nothing to undo), `still_running` (it ran on past the longest its
    /// tool may take), or `skipped` (nothing to undo).
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manual_guide: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RollbackReport {
    pub run_id: String,
    /// In the order they were undone: the run's calls, newest first.
    pub steps: Vec<RollbackStep>,
    /// True when the run had been rolled back already with nothing left to
    /// undo: this is the last rollback's recorded report, and nothing ran
    /// now.
    pub replayed: bool,
}

/// What became of a call of a run being rolled back ([`Engine::settle`]).
enum Settled {
    Finished(Box<ToolCallRecord>),
    /// It was running here and was stopped, leaving nothing to undo.
    Cancelled,
    /// It runs on, past the longest its tool may take.
    StillRunning,
}

/// How many times undoing one call may be tried after failed attempts.
const UNDO_ATTEMPTS: u32 = 20;

/// The id of attempt `attempt` (from 1) to undo `id`: `undo_<id>`, then
/// `undo2_<id>`, `undo3_<id>`, … Stable, so a repeated undo request finds
/// the same call instead of running the undo twice.
fn undo_call_id(id: &str, attempt: u32) -> String {
    let prefix = if attempt <= 1 {
        "undo_".to_string()
    } else {
        format!("undo{attempt}_")
    };
    let keep = 128 - prefix.len();
    let cut: String = id.chars().take(keep).collect();
    format!("{prefix}{cut}")
}

/// What undoing `record` takes. `changes_outright`: its tool (as
/// registered now) changes things and cannot take them back (not
/// read-only, not reversible: `bash`), so a success of it that left no
/// undo record is irreversible, with a guide, rather than "nothing to undo".
fn undo_info(record: &ToolCallRecord, changes_outright: bool) -> Result<UndoInfo, UndoError> {
    let id = record.id.clone();
    if changes_outright && let Some(code) = stopped_midway(record) {
        return Err(UndoError::Irreversible {
            id,
            guide: stopped_guide(&record.tool_name, code),
        });
    }
    if !matches!(record.status, CallStatus::Success | CallStatus::Partial) {
        return Err(UndoError::NotUndoable {
            id,
            why: format!("it did not succeed (status {})", record.status.as_str()),
        });
    }
    if let Some(by) = &record.undone_by {
        return Err(UndoError::AlreadyUndone { id, by: by.clone() });
    }
    let Some(undo) = &record.undo else {
        if changes_outright {
            return Err(UndoError::Irreversible {
                id,
                guide: format!(
                    "{} is not reversible: toolgate cannot take back what it did. Look at its \
                     result (what it ran and printed) and revert its effects by hand or with new \
                     tool calls.",
                    record.tool_name
                ),
            });
        }
        return Err(UndoError::NotUndoable {
            id,
            why: format!(
                "{} left nothing to undo (it is not reversible, or changed nothing)",
                record.tool_name
            ),
        });
    };
    let info: UndoInfo =
        serde_json::from_value(undo.clone()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    if info.irreversible {
        return Err(UndoError::Irreversible {
            id,
            guide: info
                .manual_guide
                .clone()
                .unwrap_or_else(|| "no guide was given".into()),
        });
    }
    Ok(info)
}

/// Whether an undo attempt ended finding the change undone already (the
/// edit history marks it so).
fn nothing_left(executed: &Result<Executed, Rejection>) -> bool {
    matches!(executed, Ok(Executed::Finished(outcome))
        if outcome.output.error.as_ref().is_some_and(|e| e.code == crate::tools::builtin::codes::ALREADY_UNDONE))
}

/// The error code of a call that ran and was stopped before it finished
/// (cancelled, timed out, or cut by a restart): what it did until then
/// stays.
fn stopped_midway(record: &ToolCallRecord) -> Option<&'static str> {
    use crate::protocol::tool_output::codes;
    if record.status != CallStatus::Failure {
        return None;
    }
    let code = record
        .output
        .as_ref()
        .and_then(|output| output.pointer("/error/code"))
        .and_then(serde_json::Value::as_str)?;
    [codes::CANCELLED, codes::TIMEOUT, codes::INTERRUPTED]
        .into_iter()
        .find(|c| *c == code)
}

/// What to do about a call of `tool`, which changes things outright, that
/// was stopped before it finished (`code`).
fn stopped_guide(tool: &str, code: &str) -> String {
    format!(
        "{tool} was stopped before it finished ({code}); what it did until then stays, and \
         toolgate cannot take it back. Look at what it ran, check what it changed, and revert \
         that by hand or with new tool calls."
    )
}

impl Engine {
    /// What undoing a finished call would do now: `available`, `undone`,
    /// `irreversible` (only by hand), or `none` (nothing to undo, or its
    /// last allowed attempt failed); `None` for a call that has not
    /// finished.
    pub async fn undo_state(
        &self,
        record: &ToolCallRecord,
    ) -> Result<Option<&'static str>, StoreError> {
        if !record.status.is_finished() {
            return Ok(None);
        }
        Ok(Some(
            match undo_info(record, self.changes_outright(&record.tool_name)) {
                // Unless its last attempt failed: then it cannot be tried
                // again (a `422`), as if there were nothing to undo.
                Ok(_) => {
                    let last = undo_call_id(&record.id, UNDO_ATTEMPTS);
                    match self.store.tool_call(&record.thread_id, &last).await? {
                        Some(r)
                            if r.status == CallStatus::Failure
                                && r.undo_of.as_deref() == Some(record.id.as_str()) =>
                        {
                            "none"
                        }
                        _ => "available",
                    }
                }
                Err(UndoError::AlreadyUndone { .. }) => "undone",
                Err(UndoError::Irreversible { .. }) => "irreversible",
                Err(_) => "none",
            },
        ))
    }

    /// Whether `tool` (as registered now) changes things it cannot take
    /// back: neither read-only nor reversible.
    fn changes_outright(&self, tool: &str) -> bool {
        self.registry.resolve(tool).is_some_and(|t| {
            !t.definition.metadata.read_only && !t.definition.capability.reversible
        })
    }

    /// Undo one call: its undo runs as a new call `undo_<id>` through the
    /// whole pipeline. Undoing twice is refused.
    pub async fn undo(
        &self,
        owner: &str,
        thread_id: &str,
        id: &str,
    ) -> Result<Executed, UndoError> {
        let record = self
            .store
            .tool_call(thread_id, id)
            .await?
            .ok_or_else(|| UndoError::NotFound(id.to_string()))?;
        // Undone by an undo of its own (this route's, or a rollback's):
        // asked again (its answer lost, say), the answer is that undo's
        // outcome, as a call posted again is answered from storage.
        if let Some(by) = &record.undone_by
            && let Some(undo) = self.store.tool_call(thread_id, by).await?
            && undo.undo_of.as_deref() == Some(id)
            && matches!(undo.status, CallStatus::Success | CallStatus::Partial)
        {
            return Ok(Executed::Finished(super::outcome_from_record(&undo)?));
        }
        let info = undo_info(&record, self.changes_outright(&record.tool_name))?;
        self.run_undo(owner, thread_id, id, info, record.workspace.clone())
            .await
            .1
    }

    /// The id undoing `id` runs under now, trying attempts from `from`:
    /// the last attempt's, unless that attempt failed (refused, denied at
    /// its approval, a conflict: nothing was undone), in which case a new
    /// one, so a call whose undo failed can still be undone. A pending,
    /// running or finished attempt is found again instead of undoing
    /// twice. An id some other call holds (a call posted as `undo_<id>`,
    /// or the undo of another call whose id starts alike, cut to 128
    /// characters) is passed over: it is not this call's undo. Also
    /// returned: the attempt's number, and whether no call holds its id yet.
    async fn undo_attempt_id(
        &self,
        thread_id: &str,
        id: &str,
        from: u32,
    ) -> Result<(u32, String, bool), UndoError> {
        for attempt in from..=UNDO_ATTEMPTS {
            let call_id = undo_call_id(id, attempt);
            match self.store.tool_call(thread_id, &call_id).await? {
                Some(r) if matches!(r.status, CallStatus::Failure) => continue,
                Some(r) if r.undo_of.as_deref() != Some(id) => continue,
                found => return Ok((attempt, call_id, found.is_none())),
            }
        }
        Err(UndoError::NotUndoable {
            id: id.to_string(),
            why: format!("undoing it failed {UNDO_ATTEMPTS} times"),
        })
    }

    /// Run the undo of call `id` as a new call; returns its id (when one
    /// was chosen) with the outcome.
    /// The undo runs in the call's own sub-workspace (`workspace`: `None`
    /// for the owner's main one, and for calls recorded before the
    /// sub-workspace was).
    async fn run_undo(
        &self,
        owner: &str,
        thread_id: &str,
        id: &str,
        info: UndoInfo,
        workspace: Option<String>,
    ) -> (Option<String>, Result<Executed, UndoError>) {
        let mut from = 1;
        loop {
            let (attempt, call_id, fresh) = match self.undo_attempt_id(thread_id, id, from).await {
                Ok(chosen) => chosen,
                Err(e) => return (None, Err(e)),
            };
            let call = IncomingCall {
                id: call_id.clone(),
                name: info.tool_name.clone(),
                arguments: info.input.clone(),
                shape: CallShape::Native,
                run_id: None,
                parent_message_id: None,
                workspace: workspace.clone(),
                dry_run: false,
            };
            let mut req = CallRequest::new(owner, thread_id, call);
            req.undo_of = Some(id.to_string());
            let executed = self.execute(req).await;
            if nothing_left(&executed) {
                // Undone by an earlier attempt a restart cut short, or
                // else by other means (the `undo_edit` tool): this attempt
                // found it so. Either way the call is marked undone, so its
                // lookup says so and no rollback tries again.
                let by = match self.undone_before(owner, thread_id, id, attempt).await {
                    Ok(Some(by)) => by,
                    Ok(None) => match self.mark_undone(owner, thread_id, id, &call_id).await {
                        Ok(()) => call_id.clone(),
                        Err(e) => return (Some(call_id), Err(e)),
                    },
                    Err(e) => return (Some(call_id), Err(e)),
                };
                let id = id.to_string();
                return (Some(call_id), Err(UndoError::AlreadyUndone { id, by }));
            }
            match executed {
                // An assistant message declares the fresh id for a call
                // of its own: the next attempt's id. (An attempt found
                // again is this call's undo, and never run twice.)
                Err(
                    Rejection::IdConflict { .. }
                    | Rejection::DeclaredConflict { .. }
                    | Rejection::Store(StoreError::Redeclared(_)),
                ) if fresh && attempt < UNDO_ATTEMPTS => {
                    from = attempt + 1;
                }
                executed => return (Some(call_id), executed.map_err(UndoError::Rejected)),
            }
        }
    }

    /// An earlier attempt at undoing `id` (before `attempt`) cut by a
    /// restart (`INTERRUPTED`) while the undo it ran had taken effect: the
    /// edit history marks the change undone (`ALREADY_UNDONE`), as the
    /// attempt after it found. The call is marked undone by that attempt,
    /// so no rollback tries again and its lookup says `undone`.
    async fn undone_before(
        &self,
        owner: &str,
        thread_id: &str,
        id: &str,
        attempt: u32,
    ) -> Result<Option<String>, UndoError> {
        for earlier in 1..attempt {
            let call_id = undo_call_id(id, earlier);
            let Some(record) = self.store.tool_call(thread_id, &call_id).await? else {
                continue;
            };
            if record.undo_of.as_deref() != Some(id)
                || stopped_midway(&record) != Some(crate::protocol::tool_output::codes::INTERRUPTED)
            {
                continue;
            }
            self.mark_undone(owner, thread_id, id, &call_id).await?;
            return Ok(Some(call_id));
        }
        Ok(None)
    }

    /// Record call `id` as undone by call `by`.
    async fn mark_undone(
        &self,
        owner: &str,
        thread_id: &str,
        id: &str,
        by: &str,
    ) -> Result<(), UndoError> {
        self.writer
            .write(WriteUnit {
                thread_id: thread_id.to_string(),
                owner: owner.to_string(),
                ops: vec![WriteOp::MarkUndone {
                    id: id.to_string(),
                    undone_by: by.to_string(),
                }],
            })
            .await?;
        Ok(())
    }

    /// `record` once it no longer waits or runs: a call running in this
    /// process is cancelled, one running elsewhere waited for (as long as
    /// its tool may run), and one whose approval was decided a moment ago
    /// read again.
    async fn settle(&self, thread_id: &str, record: &ToolCallRecord) -> Result<Settled, UndoError> {
        let mut record = record.clone();
        let mut cancelled = false;
        // Pending (decided meanwhile) → running → finished: three looks.
        for _ in 0..3 {
            match record.status {
                status if status.is_finished() => break,
                CallStatus::Running => {
                    let here = self.cancel(thread_id, &record.id, STOP_GRACE).await?;
                    cancelled |= matches!(
                        here,
                        Some(Cancelled::Stopped | Cancelled::Stopping | Cancelled::Already)
                    );
                    if !matches!(here, Some(Cancelled::Stopped | Cancelled::FinishedFirst(_))) {
                        let limit = self
                            .registry
                            .resolve(&record.tool_name)
                            .map_or(self.config.tool_timeout, |tool| self.time_limit(&tool));
                        self.wait_finished(
                            thread_id,
                            &record.id,
                            limit + STOP_GRACE + SHARED_WAIT_POLL,
                        )
                        .await?;
                    }
                }
                // Its decision and its move out of `pending_approval` commit
                // together: read again, it runs or has ended.
                _ => {}
            }
            match self.store.tool_call(thread_id, &record.id).await? {
                Some(again) => record = again,
                None => {
                    return Err(
                        StoreError::Corrupt(format!("call {:?} vanished", record.id)).into(),
                    );
                }
            }
        }
        Ok(match record.status {
            CallStatus::Failure
                if cancelled
                    && record.undo.is_none()
                    && stopped_midway(&record)
                        == Some(crate::protocol::tool_output::codes::CANCELLED) =>
            {
                Settled::Cancelled
            }
            status if status.is_finished() => Settled::Finished(Box::new(record)),
            _ => Settled::StillRunning,
        })
    }

    /// Undo every reversible call of a run, newest first. The report is
    /// itself recorded in the audit log.
    pub async fn rollback(
        self: &Arc<Self>,
        owner: &str,
        thread_id: &str,
        run_id: &str,
    ) -> Result<RollbackReport, UndoError> {
        // One rollback of a run at a time here: a retry waits for the
        // first, then finds its report.
        let key = (thread_id.to_string(), run_id.to_string());
        let lock = self
            .rollbacks
            .lock()
            .expect("rollbacks lock")
            .entry(key.clone())
            .or_default()
            .clone();
        let result = {
            let _held = lock.lock().await;
            self.rollback_now(owner, thread_id, run_id).await
        };
        let mut rollbacks = self.rollbacks.lock().expect("rollbacks lock");
        // The map's and this one: nobody else waits.
        if Arc::strong_count(&lock) == 2 {
            rollbacks.remove(&key);
        }
        result
    }

    async fn rollback_now(
        self: &Arc<Self>,
        owner: &str,
        thread_id: &str,
        run_id: &str,
    ) -> Result<RollbackReport, UndoError> {
        let calls = self.store.run_calls(thread_id, run_id).await?;
        if calls.is_empty() {
            return Err(UndoError::RunNotFound(run_id.to_string()));
        }
        // Undo calls are not part of the run they undo.
        let originals: Vec<&ToolCallRecord> =
            calls.iter().filter(|c| c.undo_of.is_none()).collect();
        let reversible_left = originals
            .iter()
            .filter(|c| {
                c.undo.is_some()
                    && c.undone_by.is_none()
                    && matches!(c.status, CallStatus::Success | CallStatus::Partial)
            })
            .count();
        let undone_before = originals.iter().filter(|c| c.undone_by.is_some()).count();
        // A call waiting for approval or still running is the rollback's to
        // withdraw or stop: the run is not done with.
        let settled = originals.iter().all(|c| c.status.is_finished());
        if reversible_left == 0
            && settled
            && (undone_before > 0 || self.store.run_closed(thread_id, run_id).await?)
        {
            // Asked again (a retry after a lost answer): the last report,
            // with what was undone since (by `undo_edit`, or an approved
            // undo) said as it is now.
            return match self.recorded_rollback(owner, thread_id, run_id).await? {
                Some(mut report) => {
                    for step in &mut report.steps {
                        let now = originals.iter().find(|c| c.id == step.tool_call_id);
                        if let Some(by) = now.and_then(|c| c.undone_by.as_deref())
                            && step.action != "undone"
                            && step.action != "already_undone"
                        {
                            step.action = "already_undone".into();
                            step.detail = Some(format!("{by} undid it after the rollback"));
                            step.undo_call_id = Some(by.to_string());
                        }
                    }
                    Ok(report)
                }
                None => Err(UndoError::AlreadyRolledBack(run_id.to_string())),
            };
        }
        // The run is closed before its calls are read again: a call posted
        // to it from now on is refused where its record would commit, and
        // one that committed before is among those read.
        self.writer
            .write(WriteUnit {
                thread_id: thread_id.to_string(),
                owner: owner.to_string(),
                ops: vec![WriteOp::CloseRun {
                    run_id: run_id.to_string(),
                    closed_at_ms: now_ms(),
                }],
            })
            .await?;
        let calls = self.store.run_calls(thread_id, run_id).await?;
        let originals: Vec<&ToolCallRecord> =
            calls.iter().filter(|c| c.undo_of.is_none()).collect();
        let mut steps = Vec::new();
        for record in originals.into_iter().rev() {
            let mut step = RollbackStep {
                tool_call_id: record.id.clone(),
                tool_name: record.tool_name.clone(),
                action: String::new(),
                undo_call_id: None,
                manual_guide: None,
                detail: None,
            };
            // A call still waiting for approval would run after the run
            // was rolled back, were it approved: it is withdrawn.
            if record.status == CallStatus::PendingApproval {
                let reason = format!("withdrawn: its run {run_id:?} was rolled back");
                match self.withdraw(owner, thread_id, &record.id, &reason).await {
                    Ok(Some(approval)) => {
                        step.action = "withdrawn".into();
                        step.detail = Some(format!("approval {} denied", approval.id));
                        steps.push(step);
                        continue;
                    }
                    Err(super::approvals::ApprovalError::Store(e)) => return Err(e.into()),
                    // Decided or expired meanwhile: settled below, as a
                    // call that runs (or ran) is.
                    Ok(None) | Err(_) => {}
                }
            }
            // A call still running (approved, or started, while the rollback
            // looked) is stopped and waited for, so that what it did is
            // undone rather than left behind.
            let settled = match self.settle(thread_id, record).await? {
                Settled::Finished(record) => record,
                // A tool that changes things outright (bash) may have
                // changed some before it stopped.
                Settled::Cancelled if self.changes_outright(&record.tool_name) => {
                    step.action = "irreversible".into();
                    step.detail = Some(
                        "it was running when its run was rolled back, and was stopped before it \
                         finished"
                            .into(),
                    );
                    step.manual_guide = Some(stopped_guide(
                        &record.tool_name,
                        crate::protocol::tool_output::codes::CANCELLED,
                    ));
                    steps.push(step);
                    continue;
                }
                Settled::Cancelled => {
                    step.action = "cancelled".into();
                    step.detail = Some(
                        "it was running when its run was rolled back: it was stopped before it \
                         finished and left nothing to undo"
                            .into(),
                    );
                    steps.push(step);
                    continue;
                }
                Settled::StillRunning => {
                    step.action = "still_running".into();
                    step.detail = Some(
                        "it was still running when the rollback stopped waiting for it; undo it \
                         once it has finished"
                            .into(),
                    );
                    steps.push(step);
                    continue;
                }
            };
            let record = &*settled;
            match undo_info(record, self.changes_outright(&record.tool_name)) {
                Err(UndoError::Irreversible { guide, .. }) => {
                    step.action = "irreversible".into();
                    step.manual_guide = Some(guide);
                }
                Err(UndoError::AlreadyUndone { by, .. }) => {
                    step.action = "already_undone".into();
                    step.undo_call_id = Some(by);
                }
                Err(e @ UndoError::NotUndoable { .. }) => {
                    step.action = "skipped".into();
                    step.detail = Some(e.to_string());
                }
                Err(e) => return Err(e),
                Ok(info) => {
                    let (call_id, executed) = self
                        .run_undo(owner, thread_id, &record.id, info, record.workspace.clone())
                        .await;
                    step.undo_call_id = call_id;
                    match executed {
                        Ok(Executed::Finished(outcome)) if outcome.output.error.is_none() => {
                            step.action = "undone".into()
                        }
                        Ok(Executed::Finished(outcome)) => {
                            step.action = "undo_failed".into();
                            step.detail = outcome
                                .output
                                .error
                                .map(|e| format!("{}: {}", e.code, e.message));
                        }
                        Ok(Executed::AwaitingApproval(a)) => {
                            step.action = "awaiting_approval".into();
                            step.detail = Some(format!("approval {}", a.id));
                        }
                        // An earlier attempt, cut by a restart, had undone
                        // it, or something else had (`undo_edit`): this
                        // one found it undone already.
                        Err(UndoError::AlreadyUndone { by, .. }) => {
                            step.action = "already_undone".into();
                            step.detail = Some(if step.undo_call_id.as_deref() == Some(&by) {
                                format!(
                                    "{by} found the change undone already (by the undo_edit \
                                     tool, or outside toolgate's undo)"
                                )
                            } else {
                                format!(
                                    "{by} undid it before a restart cut it short; {} found it \
                                     undone already",
                                    step.undo_call_id.as_deref().unwrap_or("the next attempt")
                                )
                            });
                            step.undo_call_id = Some(by);
                        }
                        Err(e) => {
                            step.action = "undo_failed".into();
                            step.detail = Some(e.to_string());
                        }
                    }
                }
            }
            steps.push(step);
        }
        let report = RollbackReport {
            run_id: run_id.to_string(),
            steps,
            replayed: false,
        };
        self.writer
            .write(WriteUnit {
                thread_id: thread_id.to_string(),
                owner: owner.to_string(),
                ops: vec![WriteOp::AppendAudit(audit::rolled_back(
                    owner,
                    thread_id,
                    run_id,
                    &json!(report.steps),
                ))],
            })
            .await?;
        Ok(report)
    }

    /// The report of the run's last rollback, from the audit log (newest
    /// first), marked replayed; `None` when the run was never rolled back
    /// (its calls were undone one by one).
    async fn recorded_rollback(
        &self,
        owner: &str,
        thread_id: &str,
        run_id: &str,
    ) -> Result<Option<RollbackReport>, UndoError> {
        let mut filter = crate::store::AuditFilter {
            owner: owner.to_string(),
            thread_id: Some(thread_id.to_string()),
            action: Some(audit::RUN_ROLLED_BACK.to_string()),
            limit: 100,
            ..Default::default()
        };
        loop {
            let page = self.store.audit(&filter).await?;
            for entry in &page {
                if entry.detail["run_id"] != run_id {
                    continue;
                }
                let steps = serde_json::from_value(entry.detail["steps"].clone())
                    .map_err(|e| StoreError::Corrupt(format!("rollback report: {e}")))?;
                return Ok(Some(RollbackReport {
                    run_id: run_id.to_string(),
                    steps,
                    replayed: true,
                }));
            }
            match page.last() {
                Some(last) if page.len() as i64 == filter.limit => filter.before_id = Some(last.id),
                _ => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::undo_call_id;

    #[test]
    fn undo_ids_are_stable_and_bounded() {
        assert_eq!(undo_call_id("call_1", 1), "undo_call_1");
        assert_eq!(undo_call_id("call_1", 2), "undo2_call_1");
        assert_eq!(undo_call_id("call_1", 20), "undo20_call_1");
        for attempt in [1, 2, 20] {
            assert_eq!(undo_call_id(&"x".repeat(128), attempt).len(), 128);
        }
    }
}
