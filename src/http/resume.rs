//! AG-UI interrupts and `resume`: what a paused run asks for, and the
//! answers the run that continues it carries (AG-UI 1.0, "Interrupts and
//! Resume").
//!
//! A run raises two kinds of interrupt. `approval_required` (id: the
//! approval's id) stands for a call waiting for a person's decision; a
//! resume entry decides it as `POST /v1/approvals/{id}/decision` would, on
//! the run owner's behalf: `resolved` with `{"decision": "approve" |
//! "deny", "reason"?}`, `cancelled` denies it. `frontend_tool_call` (id:
//! the call's id) stands for a call of the application's own tool; a
//! `resolved` entry's payload is its result (unless a tool message of the
//! input answers it), and `cancelled` records that the application
//! abandoned it. An entry for an interrupt toolgate did not raise in the
//! thread, or for one already settled, is left out with a warning; an
//! entry that cannot be an answer (a bad decision, a call answered twice)
//! refuses the run before its stream starts.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::AppState;
use super::approvals::{MAX_REASON_CHARS, reason_fits};
use super::error::ApiError;
use crate::engine::{ApprovalError, Decision};
use crate::protocol::agui::{Event, EventBody, Interrupt, ResumeStatus, RunAgentInput};
use crate::store::{ApprovalRecord, ApprovalStatus};

/// The `reason` of an interrupt for a call waiting for a person's decision.
pub const APPROVAL_REQUIRED: &str = "approval_required";

/// The `reason` of an interrupt that stands for a frontend tool's call of
/// a run paused for an approval.
pub const FRONTEND_TOOL_CALL: &str = "frontend_tool_call";

/// The name of the `CUSTOM` event warning that a resume entry was left out.
pub const RESUME_IGNORED: &str = "run.resume_ignored";

/// The answer an approval interrupt expects, as its `responseSchema`.
fn approval_response_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "decision": {"enum": ["approve", "deny"]},
            "reason": {"type": "string", "maxLength": MAX_REASON_CHARS},
        },
        "required": ["decision"],
        "additionalProperties": false,
    })
}

/// The interrupt of a call waiting for `approval`.
pub fn approval_interrupt(approval: &ApprovalRecord) -> Interrupt {
    let mut metadata = Map::new();
    metadata.insert("approvalId".into(), json!(approval.id));
    metadata.insert("expiresAtMs".into(), json!(approval.expires_at_ms));
    Interrupt {
        id: approval.id.clone(),
        reason: APPROVAL_REQUIRED.into(),
        message: Some(format!(
            "{} needs a human approval: {}",
            approval.tool_name, approval.reason
        )),
        tool_call_id: Some(approval.tool_call_id.clone()),
        response_schema: Some(approval_response_schema()),
        expires_at: Some(crate::engine::rfc3339_millis(approval.expires_at_ms)),
        metadata: Some(metadata),
    }
}

/// The interrupt standing for call `id` of the application's tool `name`.
pub fn frontend_interrupt(id: String, name: &str) -> Interrupt {
    Interrupt {
        reason: FRONTEND_TOOL_CALL.into(),
        message: Some(format!(
            "{name} is the application's own tool: toolgate does not run it; send its result in the next run's messages, or as the payload of a resume entry"
        )),
        tool_call_id: Some(id.clone()),
        id,
        response_schema: None,
        expires_at: None,
        metadata: None,
    }
}

/// A result of the application's own tool that a resume entry gives.
pub struct FrontendResult {
    pub tool_call_id: String,
    pub content: String,
    /// Why it has no result: the interrupt was abandoned.
    pub error: Option<String>,
}

/// What a run's resume entries ask of it, settled before its stream.
#[derive(Default)]
pub struct Resume {
    /// Approvals to decide before the run's calls run.
    pub decisions: Vec<(String, Decision, Option<String>)>,
    /// Results of the application's calls to record with the run's messages.
    pub results: Vec<FrontendResult>,
    /// Entries the run goes on without: interrupt id, and why.
    pub ignored: Vec<(String, String)>,
    /// The run's own call slot, lent to the first call it approves that
    /// finds none other free (under a limit of one, the only one); the
    /// run's own calls then wait for a slot each ([`Resume::lent`]).
    pub own_slot: Option<crate::engine::limits::Permit>,
    /// Whether the run's slot was lent.
    pub lent: bool,
}

impl Resume {
    /// Decide the approvals the entries answer, and return those decided.
    /// An approval settled meanwhile (by a person, or by its expiry) keeps
    /// its outcome, and the entry joins `ignored`.
    pub async fn decide(
        &mut self,
        state: &AppState,
        owner: &str,
    ) -> Result<Vec<ApprovalRecord>, ApiError> {
        let mut decided = Vec::new();
        for (id, decision, reason) in std::mem::take(&mut self.decisions) {
            // An approved call runs in one of the owner's call slots, as
            // one approved through /v1/approvals: with none free it stays
            // pending, and the entry is ignored.
            let slot = match decision {
                Decision::Deny => None,
                Decision::Approve => match state.acquire(owner, 1) {
                    Ok(slot) => Some(slot),
                    Err(ApiError::TooManyRequests { .. }) if self.own_slot.is_some() => {
                        self.lent = true;
                        self.own_slot.take()
                    }
                    Err(ApiError::TooManyRequests { detail, .. }) => {
                        self.ignored.push((
                            id,
                            format!(
                                "{detail}: the approval stays pending; resume again once one \
                                 has ended"
                            ),
                        ));
                        continue;
                    }
                    Err(other) => return Err(other),
                },
            };
            match state
                .engine
                .decide_holding(&id, owner, false, decision, reason, slot)
                .await
            {
                Ok(approval) => decided.push(approval),
                Err(ApprovalError::Store(e)) => return Err(e.into()),
                Err(other) => self
                    .ignored
                    .push((id, format!("{other}; its outcome stands"))),
            }
        }
        Ok(decided)
    }

    /// The `CUSTOM` events warning of the entries left out.
    pub fn warnings(&self) -> impl Iterator<Item = Event> + '_ {
        self.ignored.iter().map(|(id, why)| {
            Event::new(EventBody::Custom {
                name: RESUME_IGNORED.into(),
                value: json!({"interruptId": id, "reason": why}),
            })
        })
    }
}

/// The approvals of the run's thread still waiting for a decision: a run
/// on the thread does not end as a success while one is open. The caller
/// has checked that the thread is the owner's, and every approval of a
/// thread is its owner's. One past its expiry waits only for the sweeper
/// to say so, and is not open.
pub async fn open_approvals(
    state: &AppState,
    thread_id: &str,
) -> Result<Vec<ApprovalRecord>, ApiError> {
    let now = crate::protocol::now_ms();
    Ok(state.store.open_approvals_of_thread(thread_id, now).await?)
}

/// What the thread and the input say of the run's calls.
pub struct Calls<'a> {
    /// The application's calls of the turn the run continues that the run
    /// before it asked for.
    pub frontend: HashSet<&'a str>,
    /// The application's calls of that turn it held back, each with the
    /// call waiting for approval they come after.
    pub held_back: HashMap<&'a str, &'a str>,
    /// Calls a tool message of the input answers.
    pub answered_in_input: HashSet<&'a str>,
    /// Calls a tool message of the thread answers.
    pub answered_in_thread: &'a HashSet<String>,
}

/// Read the input's resume entries: `422` for an entry that cannot be an
/// answer, before anything of the run is stored.
pub async fn plan(
    state: &AppState,
    owner: &str,
    input: &RunAgentInput,
    calls: &Calls<'_>,
) -> Result<Resume, ApiError> {
    // A paused run waits on one approval and on the application's calls
    // of its turn, at most `tools.max_batch_calls` of them.
    let max = state.settings.tools.max_batch_calls + 1;
    if input.resume.len() > max {
        return Err(ApiError::invalid_body(
            "/resume".into(),
            format!(
                "holds {} entries; a run answers at most {max} interrupts (tools.max_batch_calls + 1)",
                input.resume.len()
            ),
        ));
    }
    let mut plan = Resume::default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, entry) in input.resume.iter().enumerate() {
        let at = format!("/resume/{i}");
        let id = entry.interrupt_id.as_str();
        if let Some(first) = seen.insert(id, i) {
            return Err(ApiError::invalid_body(
                format!("{at}/interruptId"),
                format!(
                    "{id:?} is answered by resume entry {first} already; an interrupt has one answer"
                ),
            ));
        }
        if let Some(blocker) = calls.held_back.get(id) {
            plan.ignored.push((
                id.to_string(),
                format!("the call was not asked for yet: it comes after call {blocker:?}, which waits for a person's approval; answer it once a run reports it"),
            ));
            continue;
        }
        if calls.frontend.contains(id) {
            // A result given here must not stand in for one toolgate
            // records (as for a tool message of the input).
            if !calls.answered_in_thread.contains(id)
                && state.store.tool_call(&input.thread_id, id).await?.is_some()
            {
                return Err(ApiError::conflict_at(
                    format!("{at}/interruptId"),
                    format!(
                        "resume entry {i} answers call {id:?}, which is toolgate's own: toolgate records its result"
                    ),
                ));
            }
            frontend_answer(&mut plan, entry, &at, calls)?;
            continue;
        }
        let approval = match state.store.approval(id).await? {
            Some(a) if a.owner == owner && a.thread_id == input.thread_id => a,
            _ => {
                plan.ignored.push((
                    id.to_string(),
                    "no open interrupt has this id: toolgate raised none with it in this thread, or it stands for a call of a turn this run does not continue".into(),
                ));
                continue;
            }
        };
        if approval.status != ApprovalStatus::Pending {
            plan.ignored.push((
                id.to_string(),
                format!(
                    "the approval is already {}; its outcome stands",
                    super::approvals::status_name(approval.status)
                ),
            ));
            continue;
        }
        let (decision, reason) = match entry.status {
            ResumeStatus::Resolved => approval_answer(entry.payload.as_ref(), &at)?,
            ResumeStatus::Cancelled => (
                Decision::Deny,
                Some("abandoned: the run's client cancelled the interrupt".into()),
            ),
        };
        plan.decisions.push((approval.id, decision, reason));
    }
    Ok(plan)
}

/// An entry for a call of the application's own tool.
fn frontend_answer(
    plan: &mut Resume,
    entry: &crate::protocol::agui::ResumeEntry,
    at: &str,
    calls: &Calls<'_>,
) -> Result<(), ApiError> {
    let id = entry.interrupt_id.as_str();
    if calls.answered_in_thread.contains(id) {
        plan.ignored.push((
            id.to_string(),
            "the call already has a result in this thread".into(),
        ));
        return Ok(());
    }
    let in_input = calls.answered_in_input.contains(id);
    match (entry.status, &entry.payload) {
        // The tool message is the result.
        (ResumeStatus::Resolved, None) if in_input => {}
        (ResumeStatus::Resolved, Some(_)) if in_input => plan.ignored.push((
            id.to_string(),
            "a tool message of the input answers the call: its content is the result, not this payload".into(),
        )),
        (ResumeStatus::Resolved, Some(payload)) => plan.results.push(FrontendResult {
            tool_call_id: id.to_string(),
            content: match payload {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
            error: None,
        }),
        (ResumeStatus::Resolved, None) => {
            return Err(ApiError::invalid_body(
                format!("{at}/payload"),
                format!(
                    "call {id:?} is the application's own: resolving it needs its result, as the payload or as a tool message of the input"
                ),
            ));
        }
        (ResumeStatus::Cancelled, _) if in_input => {
            return Err(ApiError::invalid_body(
                format!("{at}/status"),
                format!(
                    "call {id:?} is answered by a tool message of the input; an answered call cannot be abandoned"
                ),
            ));
        }
        (ResumeStatus::Cancelled, _) => plan.results.push(FrontendResult {
            tool_call_id: id.to_string(),
            content: String::new(),
            error: Some("the application abandoned this call: its interrupt was cancelled".into()),
        }),
    }
    Ok(())
}

/// A `resolved` entry's payload for an approval: the decision and its
/// reason.
fn approval_answer(
    payload: Option<&Value>,
    at: &str,
) -> Result<(Decision, Option<String>), ApiError> {
    let invalid = |pointer: &str, message: &str| {
        Err(ApiError::invalid_body(
            format!("{at}/payload{pointer}"),
            message.to_string(),
        ))
    };
    let Some(Value::Object(answer)) = payload else {
        return invalid(
            "",
            "must be an object {\"decision\": \"approve\" | \"deny\", \"reason\"?: text} (the interrupt's responseSchema)",
        );
    };
    if let Some(other) = answer
        .keys()
        .find(|k| !matches!(k.as_str(), "decision" | "reason"))
    {
        return invalid(
            &format!("/{}", crate::protocol::pointer_token(other)),
            "is not a field of a decision; it has decision and reason",
        );
    }
    let decision = match answer.get("decision").and_then(Value::as_str) {
        Some("approve") => Decision::Approve,
        Some("deny") => Decision::Deny,
        _ => return invalid("/decision", "must be \"approve\" or \"deny\""),
    };
    let reason = match answer.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) if reason_fits(r) => Some(r.clone()),
        Some(Value::String(_)) => {
            return invalid(
                "/reason",
                &format!("must be at most {MAX_REASON_CHARS} characters"),
            );
        }
        Some(_) => return invalid("/reason", "must be text"),
    };
    Ok((decision, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_answer_is_a_decision_and_a_reason() {
        let ok = approval_answer(
            Some(&json!({"decision": "deny", "reason": "no"})),
            "/resume/0",
        );
        assert!(matches!(ok, Ok((Decision::Deny, Some(r))) if r == "no"));
        let ok = approval_answer(Some(&json!({"decision": "approve"})), "/resume/0");
        assert!(matches!(ok, Ok((Decision::Approve, None))));
        let pointer = |payload: Option<Value>| match approval_answer(payload.as_ref(), "/resume/2")
        {
            Err(ApiError::Unprocessable { extra, .. }) => {
                extra["errors"][0]["pointer"].as_str().unwrap().to_string()
            }
            other => panic!("refused: {:?}", other.map(|_| ())),
        };
        assert_eq!(pointer(None), "/resume/2/payload");
        assert_eq!(pointer(Some(json!(true))), "/resume/2/payload");
        assert_eq!(
            pointer(Some(json!({"decision": "maybe"}))),
            "/resume/2/payload/decision"
        );
        assert_eq!(
            pointer(Some(json!({"decision": "approve", "a/b": 1}))),
            "/resume/2/payload/a~1b"
        );
        assert_eq!(
            pointer(Some(
                json!({"decision": "deny", "reason": "x".repeat(2001)})
            )),
            "/resume/2/payload/reason"
        );
    }

    #[test]
    fn an_approval_interrupt_says_when_it_expires_and_what_it_expects() {
        assert_eq!(crate::engine::rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            crate::engine::rfc3339_millis(1_764_151_200_123),
            "2025-11-26T10:00:00.123Z"
        );
        let schema = approval_response_schema();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&json!({"decision": "approve"})));
        assert!(!validator.is_valid(&json!({"decision": "later"})));
        assert!(!validator.is_valid(&json!({"reason": "no decision"})));
    }
}
