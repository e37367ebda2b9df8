//! What both backends check the same way: op arguments that need no
//! database, the counters a unit reserves, and the error a conditional
//! update that touched no row stands for.

use super::{
    ApprovalRecord, ApprovalStatus, CallStatus, DeletedContent, FinishedToolCall, JsonText,
    NewAuditEntry, NewEvent, NewMessage, StoreError, StoreResult, WriteOp, WriteUnit,
};

/// The calls of thread `$1` that stop [`WriteOp::DeleteThread`]: running
/// or waiting for an approval (at most 100 named).
pub(crate) const BUSY_CALLS: &str = "SELECT id, status FROM tool_calls \
     WHERE thread_id = $1 AND status IN ('running', 'pending_approval') \
     ORDER BY ordinal LIMIT 100";

/// The tables [`WriteOp::DeleteThread`] empties of the thread's rows
/// besides those it counts (messages, events, calls, approvals).
pub(crate) const OTHER_THREAD_TABLES: [&str; 2] = ["declared_calls", "closed_runs"];

/// The tables that grow with a thread's length, each with the column that,
/// with `thread_id`, keys its rows: [`WriteOp::DeleteThread`] empties them
/// in its own transaction only while they hold at most [`DELETE_AT_ONCE`]
/// rows of the thread together, and leaves more to
/// [`super::Store::purge_deleted`], a chunk at a time, so that one long
/// thread's deletion does not hold every other write back.
pub(crate) const PURGED_TABLES: [(&str, &str); 3] =
    [("events", "seq"), ("messages", "seq"), ("tool_calls", "id")];

/// The most rows of [`PURGED_TABLES`] a deletion removes in its own
/// transaction (a thread of some 280 tool calls).
pub const DELETE_AT_ONCE: i64 = 2_000;

/// Delete at most `$2` rows of thread `$1` from `table`, keyed by `key`.
pub(crate) fn purge_rows(table: &str, key: &str) -> String {
    format!(
        "DELETE FROM {table} WHERE thread_id = $1 AND {key} IN \
         (SELECT {key} FROM {table} WHERE thread_id = $1 LIMIT $2)"
    )
}

/// The deleted threads whose rows a deletion left to be purged.
pub(crate) const UNPURGED_THREADS: &str = "SELECT t.id FROM threads AS t \
     WHERE t.deleted_at_ms IS NOT NULL AND (\
         EXISTS (SELECT 1 FROM events AS e WHERE e.thread_id = t.id) \
         OR EXISTS (SELECT 1 FROM messages AS m WHERE m.thread_id = t.id) \
         OR EXISTS (SELECT 1 FROM tool_calls AS c WHERE c.thread_id = t.id)) \
     ORDER BY t.deleted_at_ms";

/// [`WriteOp::DeleteThread`] meeting `calls` (id, status), as read by
/// [`BUSY_CALLS`]: fails with [`StoreError::ThreadBusy`] when there are any.
pub(crate) fn not_busy(calls: Vec<(String, String)>) -> StoreResult<()> {
    if calls.is_empty() {
        return Ok(());
    }
    let calls = calls
        .into_iter()
        .map(|(id, status)| {
            let status = CallStatus::parse(&status).ok_or_else(|| {
                StoreError::Corrupt(format!("call {id:?} has an unknown status {status:?}"))
            })?;
            Ok((id, status))
        })
        .collect::<StoreResult<_>>()?;
    Err(StoreError::ThreadBusy { calls })
}

/// `op`, applied, in a thread closed for its deletion since `closing`
/// ([`WriteOp::CloseThread`]): a new call, a call approved to start, or a
/// new user, assistant or system message, fails the unit with
/// [`StoreError::ThreadClosing`].
/// Checked once the op went in, so that an id already taken is answered
/// as such (a call posted again gets its recorded outcome).
pub(crate) fn open_for(unit: &WriteUnit, op: &WriteOp, closing: Option<i64>) -> StoreResult<()> {
    let Some(since_ms) = closing else {
        return Ok(());
    };
    let new_turn = match op {
        WriteOp::InsertToolCall(_) | WriteOp::StartPendingCall { .. } => true,
        WriteOp::InsertMessage(message) => message.role != super::Role::Tool,
        _ => false,
    };
    if new_turn {
        return Err(StoreError::ThreadClosing {
            thread: unit.thread_id.clone(),
            since_ms,
        });
    }
    Ok(())
}

/// A unit holding [`WriteOp::DeleteThread`] holds nothing else.
pub(crate) fn deletion_fits_unit(unit: &WriteUnit) -> StoreResult<()> {
    if unit.ops.len() == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "a deletion of thread {:?} must be its unit's only op",
            unit.thread_id
        )))
    }
}

/// The audit action of a thread's deletion.
pub const THREAD_DELETED: &str = "thread.deleted";

/// The audit entry [`WriteOp::DeleteThread`] appends: who deleted the
/// thread, when, and how much it held.
pub(crate) fn deletion_audit(
    unit: &WriteUnit,
    at_ms: i64,
    content: &DeletedContent,
) -> NewAuditEntry {
    NewAuditEntry {
        at_ms,
        owner: unit.owner.clone(),
        thread_id: Some(unit.thread_id.clone()),
        tool_call_id: None,
        tool_name: None,
        action: THREAD_DELETED.into(),
        operation: Some("delete".into()),
        verdict: None,
        rule: None,
        approval_id: None,
        outcome: Some("success".into()),
        duration_ms: None,
        detail: JsonText::of(&serde_json::json!({
            "messages": content.messages,
            "events": content.events,
            "tool_calls": content.tool_calls,
            "approvals": content.approvals,
        })),
    }
}

/// How many event seqs, message seqs and call ordinals a unit reserves.
pub(crate) struct Reservation {
    pub events: i64,
    pub messages: i64,
    pub calls: i64,
    /// When a thread the unit creates was created: its first message or
    /// call, or now.
    pub created_at_ms: i64,
}

impl Reservation {
    pub fn of(unit: &WriteUnit) -> Reservation {
        let mut r = Reservation {
            events: 0,
            messages: 0,
            calls: 0,
            created_at_ms: earliest_record(unit).unwrap_or_else(crate::protocol::now_ms),
        };
        for op in &unit.ops {
            match op {
                WriteOp::AppendEvents(events) => r.events += events.len() as i64,
                WriteOp::InsertMessage(_) => r.messages += 1,
                WriteOp::InsertToolCall(_) => r.calls += 1,
                _ => {}
            }
        }
        r
    }
}

/// The earliest `created_at_ms` of the messages and calls `unit` inserts: a
/// thread the unit creates is not younger than what it holds.
pub(crate) fn earliest_record(unit: &WriteUnit) -> Option<i64> {
    unit.ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::InsertMessage(m) => Some(m.created_at_ms),
            WriteOp::InsertToolCall(c) => Some(c.created_at_ms),
            _ => None,
        })
        .min()
}

pub(crate) fn insertable_call_status(id: &str, status: CallStatus) -> StoreResult<()> {
    match status {
        CallStatus::Running | CallStatus::PendingApproval => Ok(()),
        other => Err(StoreError::Conflict(format!(
            "tool call {id:?} cannot be recorded with status {}",
            other.as_str()
        ))),
    }
}

/// Every event stored as a reference to a tool message
/// ([`NewEvent::announces`]) comes with that message in the same unit.
pub(crate) fn events_fit_unit(unit: &WriteUnit, events: &[NewEvent]) -> StoreResult<()> {
    for message_id in events.iter().filter_map(|e| e.announces.as_deref()) {
        if !inserts_message(unit, message_id, |_| true) {
            return Err(StoreError::Conflict(format!(
                "an event announcing message {message_id:?} needs that message inserted in the \
                 same unit"
            )));
        }
    }
    Ok(())
}

/// Whether `unit` inserts message `id`, and that message passes `fits`.
fn inserts_message(unit: &WriteUnit, id: &str, fits: impl Fn(&NewMessage) -> bool) -> bool {
    unit.ops
        .iter()
        .any(|op| matches!(op, WriteOp::InsertMessage(m) if m.id == id && fits(m)))
}

/// A call can be finished with a terminal status, by a unit that also
/// inserts its tool message (which holds the call's output).
pub(crate) fn finishable(unit: &WriteUnit, finished: &FinishedToolCall) -> StoreResult<()> {
    let id = &finished.id;
    if !finished.status.is_finished() {
        return Err(StoreError::Conflict(format!(
            "tool call {id:?} cannot be finished with status {}",
            finished.status.as_str()
        )));
    }
    if inserts_message(unit, &finished.message_id, |m| {
        m.tool_call_id.as_deref() == Some(id.as_str())
    }) {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "tool call {id:?} cannot be finished without inserting its tool message {:?} \
             in the same unit",
            finished.message_id
        )))
    }
}

/// The error for a call-changing op that matched no row: `NotFound` when the
/// call is not recorded in the thread, otherwise `Conflict` naming the state
/// (`current` is its status, `wanted` what the op needed).
pub(crate) fn call_not_changed(
    unit: &WriteUnit,
    id: &str,
    current: Option<String>,
    wanted: &str,
) -> StoreError {
    match current {
        None => StoreError::NotFound(format!("tool call {id:?} in thread {:?}", unit.thread_id)),
        Some(status) => StoreError::Conflict(format!(
            "tool call {id:?} is not {wanted} (status {status})"
        )),
    }
}

pub(crate) fn approval_fits_unit(unit: &WriteUnit, approval: &ApprovalRecord) -> StoreResult<()> {
    if approval.thread_id != unit.thread_id || approval.owner != unit.owner {
        return Err(StoreError::Conflict(format!(
            "approval {:?} names thread {:?} of {:?}, but its unit writes thread {:?} of {:?}",
            approval.id, approval.thread_id, approval.owner, unit.thread_id, unit.owner
        )));
    }
    Ok(())
}

pub(crate) fn decision_status(id: &str, status: ApprovalStatus) -> StoreResult<()> {
    if status == ApprovalStatus::Pending {
        return Err(StoreError::Conflict(format!(
            "approval {id:?} cannot be decided as pending"
        )));
    }
    Ok(())
}

/// The error for a decision that matched no pending approval; `current` is
/// the approval's (status, expires_at_ms) if it is in the unit's thread.
pub(crate) fn approval_not_decided(
    unit: &WriteUnit,
    id: &str,
    current: Option<(String, i64)>,
) -> StoreError {
    match current {
        None => StoreError::NotFound(format!("approval {id:?} in thread {:?}", unit.thread_id)),
        Some((status, _)) if status != ApprovalStatus::Pending.as_str() => StoreError::Conflict(
            format!("approval {id:?} is no longer pending (status {status})"),
        ),
        Some((_, expires_at_ms)) => StoreError::Conflict(format!(
            "approval {id:?} expired at {expires_at_ms} ms and can no longer be decided"
        )),
    }
}

pub(crate) fn audit_fits_unit(unit: &WriteUnit, entry: &NewAuditEntry) -> StoreResult<()> {
    let thread_ok = entry
        .thread_id
        .as_ref()
        .is_none_or(|thread| *thread == unit.thread_id);
    if entry.owner != unit.owner || !thread_ok {
        return Err(StoreError::Conflict(format!(
            "audit entry {:?} names thread {:?} of {:?}, but its unit writes thread {:?} of {:?}",
            entry.action, entry.thread_id, entry.owner, unit.thread_id, unit.owner
        )));
    }
    Ok(())
}

/// The fields of a [`WriteOp::DecideApproval`].
pub(crate) struct Decision<'a> {
    pub id: &'a str,
    pub status: ApprovalStatus,
    pub decided_by: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub decided_at_ms: i64,
}

impl<'a> Decision<'a> {
    /// The decision `op` records, if it is a [`WriteOp::DecideApproval`].
    pub fn of(op: &'a WriteOp) -> Option<Decision<'a>> {
        match op {
            WriteOp::DecideApproval {
                id,
                status,
                decided_by,
                reason,
                decided_at_ms,
            } => Some(Decision {
                id,
                status: *status,
                decided_by: decided_by.as_deref(),
                reason: reason.as_deref(),
                decided_at_ms: *decided_at_ms,
            }),
            _ => None,
        }
    }
}

/// The error for an approval id that is already taken.
pub(crate) fn approval_exists(id: &str) -> StoreError {
    StoreError::Conflict(format!("approval {id:?} already exists"))
}

/// Where a call id's first tool and arguments were given: a call recorded
/// under it, or an assistant message declaring it.
#[derive(Clone, Copy)]
pub(crate) enum GivenIn {
    Record,
    Declaration,
}

/// Whether a call id given `(tool, args)` before and now `(tool_name,
/// args)` again means the same call. Arguments are JSON texts: equal
/// texts, or texts of equal values (key order aside).
pub(crate) fn same_declared_call(before: (&str, &str), now: (&str, &str)) -> bool {
    before.0 == now.0
        && (before.1 == now.1
            || matches!(
                (
                    serde_json::from_str::<serde_json::Value>(before.1),
                    serde_json::from_str::<serde_json::Value>(now.1),
                ),
                (Ok(a), Ok(b)) if crate::protocol::json::same_json(&a, &b)
            ))
}

/// The error for call id `id` given another tool or other arguments than
/// it was given before, where `before` says.
pub(crate) fn redeclared(id: &str, before: GivenIn) -> StoreError {
    let given = match before {
        GivenIn::Record => "recorded",
        GivenIn::Declaration => "declared",
    };
    StoreError::Redeclared(format!(
        "tool call {id:?} is already {given} in this thread with another tool or arguments; a new call needs an id of its own"
    ))
}

/// `Conflict` unless the thread's declaration of call `id`, `found` (the
/// declaring message, if any), is the one the caller expected.
pub(crate) fn declared_as_expected(
    id: &str,
    found: Option<&str>,
    expected: Option<&str>,
) -> StoreResult<()> {
    let what = match (found, expected) {
        (found, expected) if found == expected => return Ok(()),
        (Some(message), _) => format!(
            "tool call {id:?} is declared by message {message:?}, recorded after the call was looked up"
        ),
        (None, Some(message)) => format!("tool call {id:?} is not declared by message {message:?}"),
        (None, None) => return Ok(()),
    };
    Err(StoreError::Conflict(what))
}

/// `Conflict` for message `message` (not an assistant's) when call `call`
/// of the thread was posted with its id as `parent_message_id`: only the
/// assistant message that made a call may take that id (an AG-UI client
/// would show the message's text as the assistant's).
pub(crate) fn parent_id_taken(message: &NewMessage, call: &str) -> StoreError {
    StoreError::Conflict(parent_id_taken_text(
        &message.id,
        message.role.as_str(),
        call,
    ))
}

/// Why a `role` message may not take id `message`: call `call` names it as
/// its parent.
pub(crate) fn parent_id_taken_text(message: &str, role: &str, call: &str) -> String {
    format!(
        "message id {message:?} is the parent_message_id of tool call {call:?} in this thread: \
         only the assistant message that made the call can take it, not a {role} message; give \
         this message an id of its own"
    )
}

/// `Refused` for call `id` posted with `parent` as its parent when the
/// thread recorded `parent` as a `role` message meanwhile.
pub(crate) fn parent_not_assistant(id: &str, parent: &str, role: &str) -> StoreError {
    StoreError::Refused {
        field: "parent_message_id",
        detail: format!(
            "tool call {id:?} names {parent:?} as its parent_message_id, which this thread \
             recorded as a {role} message: a call's parent is the assistant message that made it"
        ),
    }
}

/// Why assistant message `message` may not declare call `id`, which
/// message `by` declares: a call belongs to the one assistant message that
/// made it (a second declaration left the thread's record, its snapshot and
/// the runs that read it disagreeing about whose call it is).
pub(crate) fn declared_by_other(message: &str, id: &str, by: &str) -> String {
    format!(
        "tool call {id:?} is already declared by message {by:?}: a call belongs to the one \
         assistant message that made it, not {message:?}; a new call needs an id of its own"
    )
}

/// Why assistant message `message` may not declare call `id`, which was
/// posted with `parent` as its parent: the call is that message's.
pub(crate) fn posted_under_other_parent(message: &str, id: &str, parent: &str) -> String {
    format!(
        "tool call {id:?} was posted with parent_message_id {parent:?}: only message {parent:?} \
         can declare it, not {message:?}"
    )
}
