//! The fast path of [`Store::apply_batch`](super::Store::apply_batch), the
//! part both backends share: deciding whether a batch can be applied with
//! set-based statements (one statement per table for the whole batch,
//! no savepoint per unit), and laying out its rows, seqs and receipts.
//!
//! The fast path is only taken when every unit is bound to succeed, and its
//! outcome is then exactly what the per-unit path would produce: units in
//! [`apply_order`](super), ops in order, each unit reserving a contiguous
//! block of its thread's event seqs, message seqs and call ordinals. What the
//! planner cannot decide without the database (a thread of another owner, an
//! id already recorded, a call that is not running) the backend detects from
//! the statements' answers (returned owners, affected row counts); any
//! surprise rolls the fast attempt back and the batch goes the per-unit way,
//! which decides each unit's error as before.
//!
//! Ops taken: [`WriteOp::InsertToolCall`], [`WriteOp::FinishToolCall`],
//! [`WriteOp::InsertMessage`], [`WriteOp::AppendEvents`] and
//! [`WriteOp::AppendAudit`] (the hot path of every call). A batch with any
//! other op goes the per-unit way.

use std::collections::{HashMap, HashSet};

use super::{
    FinishedToolCall, JsonText, NewAuditEntry, NewEvent, NewMessage, NewToolCall, UnitReceipt,
    WriteOp, WriteUnit, checks,
};

/// The order in which a batch's units are applied: grouped by thread id
/// (stable, so one thread's units keep their order). Every writer locks
/// threads in the same order, which rules out lock-order deadlocks between
/// concurrent batches.
pub(crate) fn apply_order(units: &[WriteUnit]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| units[a].thread_id.cmp(&units[b].thread_id));
    order
}

/// One thread of the batch: what its units reserve together.
pub(crate) struct ThreadTotals<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    pub events: i64,
    pub messages: i64,
    pub calls: i64,
    /// The earliest message or call its units insert.
    pub created_at_ms: Option<i64>,
}

/// A batch the fast path may apply: its units in apply order and its
/// threads in that same (sorted) order.
pub(crate) struct Plan<'a> {
    units: &'a [WriteUnit],
    order: Vec<usize>,
    pub threads: Vec<ThreadTotals<'a>>,
}

/// A thread's counters after the batch's reservation (the new last values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    pub last_event_seq: i64,
    pub last_message_seq: i64,
    pub last_call_ordinal: i64,
}

/// Where a call's record goes in its thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    /// Its position among the thread's calls.
    pub ordinal: i64,
    /// The thread's last message seq when it commits (0 before the first):
    /// its announcement is logged after that message and before the next,
    /// and a snapshot shows the call where a live client put it.
    pub after_message_seq: i64,
}

pub(crate) struct CallRow<'a> {
    pub thread_id: &'a str,
    pub owner: &'a str,
    pub call: &'a NewToolCall,
    pub place: Place,
    /// The call's end, when the same batch finishes it: the row is then
    /// inserted finished rather than inserted and updated.
    pub finish: Option<&'a FinishedToolCall>,
}

impl CallRow<'_> {
    pub fn status(&self) -> &'static str {
        self.finish.map_or(self.call.status, |f| f.status).as_str()
    }

    pub fn undo(&self) -> Option<&JsonText> {
        self.finish.and_then(|f| f.undo.as_ref())
    }

    pub fn message_id(&self) -> Option<&str> {
        self.finish.map(|f| f.message_id.as_str())
    }

    pub fn finished_at_ms(&self) -> Option<i64> {
        self.finish.map(|f| f.finished_at_ms)
    }
}

pub(crate) struct FinishRow<'a> {
    pub thread_id: &'a str,
    pub finished: &'a FinishedToolCall,
}

pub(crate) struct MessageRow<'a> {
    pub thread_id: &'a str,
    pub seq: i64,
    pub message: &'a NewMessage,
}

pub(crate) struct EventRow<'a> {
    pub thread_id: &'a str,
    pub seq: i64,
    pub event: &'a NewEvent,
}

/// Every row the batch writes, per table, in apply order, and the receipts
/// (without audit ids until [`Rows::into_receipts`]).
pub(crate) struct Rows<'a> {
    pub calls: Vec<CallRow<'a>>,
    pub finishes: Vec<FinishRow<'a>>,
    pub messages: Vec<MessageRow<'a>>,
    pub events: Vec<EventRow<'a>>,
    pub audits: Vec<&'a NewAuditEntry>,
    /// The unit index of each entry of `audits`.
    audit_units: Vec<usize>,
    receipts: Vec<UnitReceipt>,
}

impl<'a> Plan<'a> {
    /// The plan of `units` applied in `order`, or `None` when the batch
    /// holds an op the fast path does not take or a unit that is bound to
    /// fail (then the per-unit path decides its error).
    pub fn new(units: &'a [WriteUnit], order: Vec<usize>) -> Option<Plan<'a>> {
        let mut threads: Vec<ThreadTotals<'a>> = Vec::new();
        // (thread, call id) inserted by an earlier op, or changed by one.
        let mut inserted_calls: HashSet<(&str, &str)> = HashSet::new();
        let mut changed_calls: HashSet<(&str, &str)> = HashSet::new();
        let mut messages: HashSet<(&str, &str)> = HashSet::new();
        for &index in &order {
            let unit = &units[index];
            let thread = unit.thread_id.as_str();
            // Units of one thread are adjacent in apply order.
            match threads.last_mut() {
                Some(last) if last.id == thread => {
                    if last.owner != unit.owner {
                        return None; // NotOwner for the later unit
                    }
                }
                _ => threads.push(ThreadTotals {
                    id: thread,
                    owner: &unit.owner,
                    events: 0,
                    messages: 0,
                    calls: 0,
                    created_at_ms: None,
                }),
            }
            let totals = threads.last_mut().expect("just pushed");
            if let Some(at) = checks::earliest_record(unit) {
                totals.created_at_ms = Some(totals.created_at_ms.map_or(at, |t| t.min(at)));
            }
            for op in &unit.ops {
                match op {
                    WriteOp::InsertToolCall(call) => {
                        checks::insertable_call_status(&call.id, call.status).ok()?;
                        let key = (thread, call.id.as_str());
                        if changed_calls.contains(&key) || !inserted_calls.insert(key) {
                            return None;
                        }
                        totals.calls += 1;
                    }
                    WriteOp::FinishToolCall(finished) => {
                        checks::finishable(unit, finished).ok()?;
                        // One change per call per batch: the batched update
                        // cannot order two changes of the same row.
                        if !changed_calls.insert((thread, finished.id.as_str())) {
                            return None;
                        }
                    }
                    WriteOp::InsertMessage(message) => {
                        // Declared calls are checked one by one (per unit).
                        if !message.declares.is_empty()
                            || !messages.insert((thread, message.id.as_str()))
                        {
                            return None;
                        }
                        totals.messages += 1;
                    }
                    WriteOp::AppendEvents(events) => {
                        checks::events_fit_unit(unit, events).ok()?;
                        totals.events += events.len() as i64;
                    }
                    WriteOp::AppendAudit(entry) => checks::audit_fits_unit(unit, entry).ok()?,
                    WriteOp::StartPendingCall { .. }
                    | WriteOp::MarkUndone { .. }
                    | WriteOp::MarkUndoneIfOpen { .. }
                    | WriteOp::InsertApproval(_)
                    | WriteOp::DecideApproval { .. }
                    | WriteOp::CloseRun { .. }
                    | WriteOp::CloseThread { .. }
                    | WriteOp::DeleteThread { .. } => return None,
                }
            }
        }
        Some(Plan {
            units,
            order,
            threads,
        })
    }

    /// The rows of the batch, given each thread's counters after the
    /// reservation (`reserved[i]` for `self.threads[i]`).
    pub fn rows(&self, reserved: &[Reserved]) -> Rows<'a> {
        assert_eq!(reserved.len(), self.threads.len());
        let mut next: HashMap<&str, (i64, i64, i64)> = self
            .threads
            .iter()
            .zip(reserved)
            .map(|(t, r)| {
                (
                    t.id,
                    (
                        r.last_event_seq - t.events + 1,
                        r.last_message_seq - t.messages + 1,
                        r.last_call_ordinal - t.calls + 1,
                    ),
                )
            })
            .collect();
        let mut rows = Rows {
            calls: Vec::new(),
            finishes: Vec::new(),
            messages: Vec::new(),
            events: Vec::new(),
            audits: Vec::new(),
            audit_units: Vec::new(),
            receipts: vec![UnitReceipt::default(); self.units.len()],
        };
        // Calls inserted by the batch: (thread, id) → index in rows.calls.
        let mut inserted: HashMap<(&str, &str), usize> = HashMap::new();
        for &index in &self.order {
            let unit = &self.units[index];
            let thread = unit.thread_id.as_str();
            let (event_seq, message_seq, ordinal) =
                next.get_mut(thread).expect("every thread is planned");
            let receipt = &mut rows.receipts[index];
            for op in &unit.ops {
                match op {
                    WriteOp::InsertToolCall(call) => {
                        inserted.insert((thread, call.id.as_str()), rows.calls.len());
                        rows.calls.push(CallRow {
                            thread_id: thread,
                            owner: &unit.owner,
                            call,
                            place: Place {
                                ordinal: *ordinal,
                                after_message_seq: *message_seq - 1,
                            },
                            finish: None,
                        });
                        *ordinal += 1;
                    }
                    // Plan::new admits one change per call, after its insert.
                    WriteOp::FinishToolCall(finished) => {
                        match inserted.get(&(thread, finished.id.as_str())) {
                            Some(&row) => rows.calls[row].finish = Some(finished),
                            None => rows.finishes.push(FinishRow {
                                thread_id: thread,
                                finished,
                            }),
                        }
                    }
                    WriteOp::InsertMessage(message) => {
                        rows.messages.push(MessageRow {
                            thread_id: thread,
                            seq: *message_seq,
                            message,
                        });
                        receipt.messages.push((message.id.clone(), *message_seq));
                        *message_seq += 1;
                    }
                    WriteOp::AppendEvents(events) => {
                        for event in events {
                            rows.events.push(EventRow {
                                thread_id: thread,
                                seq: *event_seq,
                                event,
                            });
                            receipt.events.push(event.stored(thread, *event_seq));
                            *event_seq += 1;
                        }
                    }
                    WriteOp::AppendAudit(entry) => {
                        rows.audits.push(entry);
                        rows.audit_units.push(index);
                    }
                    // Plan::new admits no other op.
                    _ => unreachable!("op not admitted to the fast path"),
                }
            }
        }
        rows
    }
}

impl Rows<'_> {
    /// The receipts, one per unit in the batch's order, given the ids the
    /// audit rows got in insertion order (`audit_ids[i]` for `audits[i]`).
    pub fn into_receipts(mut self, audit_ids: &[i64]) -> Vec<UnitReceipt> {
        assert_eq!(audit_ids.len(), self.audits.len());
        for (&index, &id) in self.audit_units.iter().zip(audit_ids) {
            self.receipts[index].audit_ids.push(id);
        }
        self.receipts
    }
}
