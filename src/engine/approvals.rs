//! The human checkpoint (step 6): a call that needs approval is recorded as
//! `pending_approval` with an approval record, announced with a `CUSTOM
//! tool_call.approval_required` event (with its dry-run preview when the
//! tool has one), and waits. Approval resumes it at step 8; denial or expiry
//! finish it as a failure. Everything is in the database, so pending
//! approvals survive a restart.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::{
    CallRequest, Engine, Executed, Permission, Rejection, WriteAhead, audit, new_event, observe,
    postprocess,
};
use crate::protocol::agui::{Event, EventBody};
use crate::protocol::calls::{CallShape, IncomingCall};
use crate::protocol::now_ms;
use crate::protocol::tool_output::{ToolError, codes};
use crate::store::{ApprovalRecord, ApprovalStatus, CallStatus, StoreError, WriteOp, WriteUnit};
use crate::tools::registry::RegisteredTool;
use crate::tools::{ProgressSink, ToolContext};

#[derive(Debug, Clone)]
pub struct ApprovalSettings {
    /// Whether anyone may approve (the owner, or a token with the approver
    /// scope). When false, every call that needs approval is denied: never
    /// a silent allow.
    pub enabled: bool,
    /// How long an approval stays open before it expires.
    pub ttl: Duration,
    /// Whether a call's owner may approve it; otherwise only an approver
    /// (the owner may still deny).
    pub owners_approve: bool,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("no such approval")]
    NotFound,
    #[error("the approval is already {0}")]
    AlreadyDecided(&'static str),
    #[error("the approval expired before it was decided")]
    Expired,
    #[error(
        "only an approver (a token with the approver scope) may approve calls here \
         (approvals.owners_approve is off); the call's owner may deny it"
    )]
    ApproverOnly,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long a dry-run preview for an approval may take.
const PREVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// An approval's status as a word for messages (`approved`).
pub fn status_word(s: ApprovalStatus) -> &'static str {
    match s {
        ApprovalStatus::Pending => "pending",
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Denied => "denied",
        ApprovalStatus::Expired => "expired",
    }
}

/// What a model is told about a call that needs an approval no one can give.
const NO_APPROVER_HINT: &str = "do not retry; tell the user this action needs an approver";

/// The `CUSTOM tool_call.approval_required` event announcing an open
/// approval: logged when it is asked for, and sent again after a stream's
/// `MESSAGES_SNAPSHOT` while it is still open.
pub fn approval_required(approval: &ApprovalRecord) -> Event {
    let mut value = json!({
        "approvalId": approval.id,
        "toolCallId": approval.tool_call_id,
        "toolName": approval.tool_name,
        "arguments": approval.arguments,
        "reason": approval.reason,
        "expiresAt": rfc3339_millis(approval.expires_at_ms),
        "expiresAtMs": approval.expires_at_ms,
    });
    if let Some(p) = &approval.preview {
        value["preview"] = p.clone();
    }
    // The sub-workspace it would run in (absent: the owner's main one).
    if let Some(workspace) = approval.request.get("workspace").filter(|w| w.is_string()) {
        value["workspace"] = workspace.clone();
    }
    let mut event = Event::new(EventBody::Custom {
        name: "tool_call.approval_required".into(),
        value,
    });
    event.timestamp = approval.created_at_ms;
    event
}

/// The `CUSTOM tool_call.approval_decided` event: the approval was
/// approved, denied or expired, so a screen showing it can stop offering a
/// decision; the call's result follows as its TOOL_CALL_RESULT.
fn approval_decided(
    approval: &ApprovalRecord,
    decision: &str,
    by: Option<&str>,
    reason: Option<&str>,
) -> WriteOp {
    WriteOp::AppendEvents(vec![super::new_event(&decided_event(
        approval, decision, by, reason,
    ))])
}

/// The `tool_call.approval_decided` event of `approval` as it was decided
/// (for an AG-UI run's own stream, which a resume entry decided it in).
pub fn approval_decided_event(approval: &ApprovalRecord) -> Event {
    decided_event(
        approval,
        status_word(approval.status),
        approval.decided_by.as_deref(),
        approval.decision_reason.as_deref(),
    )
}

fn decided_event(
    approval: &ApprovalRecord,
    decision: &str,
    by: Option<&str>,
    reason: Option<&str>,
) -> Event {
    let mut value = json!({
        "approvalId": approval.id,
        "toolCallId": approval.tool_call_id,
        "toolName": approval.tool_name,
        "decision": decision,
    });
    if let Some(by) = by {
        value["decidedBy"] = json!(by);
    }
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        value["reason"] = json!(reason);
    }
    Event::new(EventBody::Custom {
        name: "tool_call.approval_decided".into(),
        value,
    })
}

/// An instant in ms since the epoch as RFC 3339 (UTC, milliseconds), as
/// approvals' `expiresAt` is given on the wire.
pub fn rfc3339_millis(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or_default());
    humantime::format_rfc3339_millis(at).to_string()
}

/// How many due approvals the sweeper reads and expires at once.
pub const EXPIRY_BATCH: i64 = 100;

impl Engine {
    /// Record the call as waiting for approval. `Ok(None)` when the call id
    /// was recorded meanwhile (the caller looks again).
    pub(super) async fn request_approval(
        &self,
        req: CallRequest,
        tool: &Arc<RegisteredTool>,
        arguments: Value,
        permission: &Permission,
        with_preview: bool,
    ) -> Result<Option<Executed>, Rejection> {
        if !self.config.approvals.enabled {
            let error = ToolError::new(
                codes::APPROVAL_DENIED,
                format!(
                    "{} needs a human approval and no approver is configured, so it is denied",
                    tool.definition.name
                ),
                false,
            )
            .with_hint(NO_APPROVER_HINT);
            return self.refuse(req, tool, error, permission).await.map(Some);
        }
        let reason = if tool.definition.metadata.requires_checkpoint {
            "requires_checkpoint".to_string()
        } else {
            permission
                .rule
                .clone()
                .unwrap_or_else(|| format!("ask: {}", permission.reason))
        };
        let preview = if tool.definition.capability.dry_run && with_preview {
            self.preview(&req, tool, &arguments, permission).await
        } else {
            None
        };
        // One moment, after the preview: the approval's, its audit entry's
        // and the call's record and announcement.
        let now = now_ms();
        let approval = ApprovalRecord {
            id: format!("apr_{}", uuid::Uuid::now_v7().simple()),
            thread_id: req.thread_id.clone(),
            owner: req.owner.clone(),
            tool_call_id: req.call.id.clone(),
            tool_name: tool.definition.name.clone(),
            arguments: arguments.clone(),
            reason: reason.clone(),
            preview: preview.clone(),
            request: json!({
                "arguments": arguments,
                "call_arguments": req.call.arguments,
                "run_id": req.call.run_id,
                "parent_message_id": req.call.parent_message_id,
                "workspace": req.call.workspace,
                "dry_run": req.call.dry_run,
                "undo_of": req.undo_of,
                "verdict": permission.verdict.as_str(),
                "rule": permission.rule,
                // Where a file tool's path led through links when the call
                // was asked about: it must lead there still when it runs.
                "resolved_path": permission.resolved_path,
                // Where the sub-workspace really was: the call must run
                // there, not wherever a link swapped meanwhile leads.
                "sub_workspace_at": permission.sub_workspace_at,
            }),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_reason: None,
            created_at_ms: now,
            expires_at_ms: now + self.config.approvals.ttl.as_millis() as i64,
            decided_at_ms: None,
        };
        let event = approval_required(&approval);
        let extra = vec![
            WriteOp::InsertApproval(approval.clone()),
            WriteOp::AppendAudit(audit::approval_requested(
                &approval,
                &tool.definition.metadata.audit_operation,
                permission,
            )),
            WriteOp::AppendEvents(vec![new_event(&event)]),
        ];
        match self
            .write_ahead(
                &req,
                &tool.definition.name,
                CallStatus::PendingApproval,
                extra,
                now,
            )
            .await
        {
            Ok(()) => {
                observe(req.observer.as_ref(), vec![event]);
                Ok(Some(Executed::AwaitingApproval(approval)))
            }
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The dry-run preview shown with an approval request; best effort.
    async fn preview(
        &self,
        req: &CallRequest,
        tool: &RegisteredTool,
        arguments: &Value,
        permission: &Permission,
    ) -> Option<Value> {
        let ctx = ToolContext {
            owner: req.owner.clone(),
            thread_id: req.thread_id.clone(),
            call_id: req.call.id.clone(),
            workspace: req.call.workspace.clone(),
            cancel: Default::default(),
            progress: ProgressSink::default(),
            // A preview reads the file as the call would: not one the
            // path rules cannot tell (hard links).
            path_rules: permission.path_rules.clone(),
            judged_path: permission.judged_path.clone(),
            shown: None,
        };
        match tokio::time::timeout(PREVIEW_TIMEOUT, tool.tool.dry_run(arguments.clone(), ctx)).await
        {
            Ok(Ok(p)) => serde_json::to_value(p).ok(),
            _ => None,
        }
    }

    /// The open approval of a call recorded `pending_approval`, or `None`
    /// when it was decided since `record` was read: the decision and the
    /// call's move out of `pending_approval` commit together, but two reads
    /// can fall on either side of them.
    /// `record` as it stands once an approval past its deadline is settled:
    /// a call waiting for one is read after its expiry is recorded (its
    /// `APPROVAL_EXPIRED` result), as the sweeper would record it moments
    /// later, so a view of the call never says it waits for a decision its
    /// approval says nobody can make.
    pub async fn settled(
        &self,
        record: crate::store::ToolCallRecord,
    ) -> Result<crate::store::ToolCallRecord, StoreError> {
        if record.status != CallStatus::PendingApproval {
            return Ok(record);
        }
        match self.pending_approval_of(&record).await? {
            Some(approval) if approval.expires_at_ms <= now_ms() => {
                self.expire(&approval).await?;
            }
            Some(_) => return Ok(record),
            None => {} // decided since
        }
        self.store
            .tool_call(&record.thread_id, &record.id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("tool call {:?}", record.id)))
    }

    pub(super) async fn pending_approval_of(
        &self,
        record: &crate::store::ToolCallRecord,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let approval = self
            .store
            .approval_of_call(&record.thread_id, &record.id)
            .await?;
        if let Some(approval) = approval.filter(|a| a.status == ApprovalStatus::Pending) {
            return Ok(Some(approval));
        }
        let now = self.store.tool_call(&record.thread_id, &record.id).await?;
        if now.is_some_and(|r| r.status == CallStatus::PendingApproval) {
            return Err(StoreError::Corrupt(format!(
                "pending call {} has no open approval",
                record.id
            )));
        }
        Ok(None)
    }

    /// An approval visible to `by`: its owner, or anyone with the approver
    /// scope. Anyone else is told it does not exist.
    pub async fn approval_for(
        &self,
        id: &str,
        by: &str,
        approver: bool,
    ) -> Result<ApprovalRecord, ApprovalError> {
        match self.store.approval(id).await? {
            Some(a) if a.owner == by || approver => Ok(a),
            Some(_) => Err(ApprovalError::NotFound),
            // Gone with its thread: told so, as the thread's routes tell
            // it, to whoever could see it.
            None => match self.store.deleted_approval(id).await? {
                Some(gone) if gone.owner == by || approver => Err(StoreError::ThreadDeleted {
                    thread: gone.thread_id,
                    at_ms: gone.deleted_at_ms,
                }
                .into()),
                _ => Err(ApprovalError::NotFound),
            },
        }
    }

    /// Withdraw call `call_id` of `thread_id` while it waits for a
    /// decision: its approval is denied on its owner's behalf, `reason`
    /// saying why, so the call finishes `APPROVAL_DENIED` ("withdrawn")
    /// and runs nothing. `None` when the call does not wait for one.
    pub async fn withdraw(
        self: &Arc<Self>,
        owner: &str,
        thread_id: &str,
        call_id: &str,
        reason: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalError> {
        let Some(record) = self.store.tool_call(thread_id, call_id).await? else {
            return Ok(None);
        };
        if record.status != CallStatus::PendingApproval || record.owner != owner {
            return Ok(None);
        }
        let Some(approval) = self.pending_approval_of(&record).await? else {
            return Ok(None);
        };
        self.decide(
            &approval.id,
            owner,
            false,
            Decision::Deny,
            Some(reason.into()),
        )
        .await
        .map(Some)
    }

    /// Decide an open approval. Approving resumes the call (it runs in the
    /// background and streams its result as usual); denying finishes it
    /// with `APPROVAL_DENIED`.
    pub async fn decide(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        approver: bool,
        decision: Decision,
        reason: Option<String>,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.decide_holding(id, by, approver, decision, reason, None)
            .await
    }

    /// [`Engine::decide`], an approved call holding `slot` (one of its
    /// owner's call slots) until it has finished.
    pub async fn decide_holding(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        approver: bool,
        decision: Decision,
        reason: Option<String>,
        slot: Option<super::limits::Permit>,
    ) -> Result<ApprovalRecord, ApprovalError> {
        // A blank reason is none (the model is not told "denied: ").
        let reason = reason.filter(|r| !r.trim().is_empty());
        let approval = self.approval_for(id, by, approver).await?;
        if decision == Decision::Approve && !approver && !self.config.approvals.owners_approve {
            return Err(ApprovalError::ApproverOnly);
        }
        match approval.status {
            ApprovalStatus::Pending => {}
            // Said the same whether the sweeper has recorded it yet or not.
            ApprovalStatus::Expired => return Err(ApprovalError::Expired),
            decided => return Err(ApprovalError::AlreadyDecided(status_word(decided))),
        }
        if now_ms() >= approval.expires_at_ms {
            self.expire(&approval).await?;
            return Err(ApprovalError::Expired);
        }
        let now = now_ms();
        let decide_op = |status| WriteOp::DecideApproval {
            id: approval.id.clone(),
            status,
            decided_by: Some(by.to_string()),
            reason: reason.clone(),
            decided_at_ms: now,
        };
        match decision {
            Decision::Deny => {
                let mut message = format!("a human denied {}", approval.tool_name);
                if let Some(r) = &reason {
                    message.push_str(&format!(": {r}"));
                }
                let error = ToolError::new(codes::APPROVAL_DENIED, message, false)
                    .with_hint("do not retry the same call; ask the user how to proceed");
                let output = postprocess::failure_output(
                    &approval.tool_name,
                    &approval.tool_call_id,
                    &approval.arguments,
                    error,
                );
                let extra = vec![
                    decide_op(ApprovalStatus::Denied),
                    WriteOp::AppendAudit(audit::approval_decided(
                        &approval,
                        "denied",
                        Some(by),
                        reason.as_deref(),
                    )),
                    approval_decided(&approval, "denied", Some(by), reason.as_deref()),
                ];
                let denied = self
                    .finish(
                        &approval.owner,
                        &approval.thread_id,
                        output,
                        None,
                        None,
                        extra,
                    )
                    .await;
                if let Err(e) = denied {
                    return Err(self.lost_decision(id, e).await);
                }
            }
            Decision::Approve => {
                let (started_tx, started_rx) = oneshot::channel();
                let engine = self.clone();
                let approval_for_task = approval.clone();
                let extra = vec![
                    decide_op(ApprovalStatus::Approved),
                    WriteOp::StartPendingCall {
                        id: approval.tool_call_id.clone(),
                        instance: Some(self.config.instance.clone()),
                    },
                    WriteOp::AppendAudit(audit::approval_decided(
                        &approval,
                        "approved",
                        Some(by),
                        reason.as_deref(),
                    )),
                    approval_decided(&approval, "approved", Some(by), reason.as_deref()),
                ];
                // The call runs in its own task: the decision's HTTP request
                // returns once the call has started.
                tokio::spawn(
                    async move {
                        engine.resume(approval_for_task, extra, started_tx).await;
                        drop(slot);
                    }
                    .in_current_span(),
                );
                let started = started_rx
                    .await
                    .map_err(|_| ApprovalError::Store(StoreError::WriterClosed))?;
                if let Err(e) = started {
                    return Err(self.lost_decision(id, e).await);
                }
            }
        }
        Ok(self.store.approval(id).await?.unwrap_or(approval))
    }

    /// Why a decision on approval `id` did not commit: `e`, or, when the
    /// approval was settled meanwhile (decided elsewhere, or expired at its
    /// deadline), what it is now.
    async fn lost_decision(&self, id: &str, e: StoreError) -> ApprovalError {
        if !matches!(e, StoreError::Conflict(_)) {
            return ApprovalError::Store(e);
        }
        match self.store.approval(id).await {
            Ok(Some(now)) if now.status == ApprovalStatus::Expired => ApprovalError::Expired,
            Ok(Some(now)) if now.status != ApprovalStatus::Pending => {
                ApprovalError::AlreadyDecided(status_word(now.status))
            }
            _ => ApprovalError::AlreadyDecided("decided"),
        }
    }

    /// Approved: mark it running (with the decision, atomically) and run
    /// steps 8–11.
    async fn resume(
        self: Arc<Self>,
        approval: ApprovalRecord,
        decision_ops: Vec<WriteOp>,
        started: oneshot::Sender<Result<(), StoreError>>,
    ) {
        let Some(guard) = self.claim_in_flight(&approval.thread_id, &approval.tool_call_id) else {
            let _ = started.send(Err(StoreError::Conflict(
                "the call is already running".into(),
            )));
            return;
        };
        let r = &approval.request;
        let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
        let req = CallRequest {
            owner: approval.owner.clone(),
            thread_id: approval.thread_id.clone(),
            call: IncomingCall {
                id: approval.tool_call_id.clone(),
                name: approval.tool_name.clone(),
                arguments: r
                    .get("call_arguments")
                    .cloned()
                    .unwrap_or_else(|| approval.arguments.clone()),
                shape: CallShape::Native,
                run_id: text("run_id"),
                parent_message_id: text("parent_message_id"),
                workspace: text("workspace"),
                // A dry run held for what its preview shows stays a dry run.
                dry_run: r.get("dry_run") == Some(&Value::Bool(true)),
            },
            observer: None,
            undo_of: text("undo_of"),
            // Recorded already: the decision runs it under its record.
            declared: super::Declared::Unknown,
            declared_name: None,
            slot: super::limits::SharedSlot::default(),
        };
        let mut permission = Permission {
            verdict: match r.get("verdict").and_then(Value::as_str) {
                Some("ask") => super::Verdict::Ask,
                _ => super::Verdict::Allow,
            },
            rule: text("rule"),
            reason: approval.reason.clone(),
            resolved_path: None,
            path_rules: None,
            judged_path: None,
            sub_workspace_at: None,
            reading: None,
            // The approved call changes its file only if it is still as
            // the preview showed it (a dry run previews it as it is then).
            shown: approval
                .preview
                .as_ref()
                .filter(|_| r.get("dry_run") != Some(&Value::Bool(true)))
                .and_then(crate::tools::Shown::of_preview),
        };
        let written = self
            .writer
            .write(WriteUnit {
                thread_id: approval.thread_id.clone(),
                owner: approval.owner.clone(),
                ops: decision_ops,
            })
            .await;
        let failed = written.is_err();
        let _ = started.send(written.map(|_| ()));
        if failed {
            return;
        }
        let arguments = r
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| approval.arguments.clone());
        // The tool as registered now, unless it may not run after all.
        let runnable = match self.registry.resolve(&approval.tool_name) {
            // The rules changed while it waited: the approval does not
            // override what the deployment or the owner forbids now.
            // The walk's path rules are those in force now, too.
            Some(tool) => match self.refusal_now(&req, &tool, r).await {
                Err(error) => Err(error),
                Ok(now) => {
                    permission.path_rules = now.path_rules;
                    permission.judged_path = now.judged_path;
                    Ok(tool)
                }
            },
            // Unregistered while it waited: finish it, don't leave it open.
            None => Err(ToolError::new(
                codes::TOOL_NOT_FOUND,
                format!("{} is no longer registered", approval.tool_name),
                false,
            )),
        };
        let result = match runnable {
            Ok(tool) => self
                .run_and_finish(
                    &req,
                    &tool,
                    arguments,
                    &guard,
                    &permission,
                    Some(&approval.id),
                    WriteAhead::Written,
                )
                .await
                .map(|_| ()),
            Err(error) => {
                let output = postprocess::failure_output(
                    &approval.tool_name,
                    &approval.tool_call_id,
                    &arguments,
                    error,
                );
                self.finish(&req.owner, &req.thread_id, output, None, None, vec![])
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::error!(error = %e, approval_id = %approval.id, "approved call could not be finished");
        }
        drop(guard);
    }

    /// Why an approved call may not run after all: the permission rules in
    /// force now deny it, approvals have been turned off since it asked (a
    /// call that needs one is then denied, never silently allowed), or its
    /// file path leads somewhere else now than when it was asked about (a
    /// link changed while it waited: the person approved the other place).
    /// The same for the call's sub-workspace, when it is a link. `request`
    /// is what the approval recorded (where the path and the sub-workspace
    /// led; absent in approvals made before they were recorded: not
    /// compared). Otherwise the verdict reached now, whose walk rules the
    /// call runs with.
    async fn refusal_now(
        &self,
        req: &CallRequest,
        tool: &Arc<RegisteredTool>,
        request: &Value,
    ) -> Result<Permission, ToolError> {
        let resolved_then = request.get("resolved_path");
        if !self.config.approvals.enabled {
            return Err(ToolError::new(
                codes::APPROVAL_DENIED,
                format!(
                    "{} was approved, but approvals are turned off now, so calls that need one are denied",
                    tool.definition.name
                ),
                false,
            )
            .with_hint(NO_APPROVER_HINT));
        }
        let now = self
            .permission(req, tool)
            .await
            .map_err(|e| super::rules_unreadable(&e))?;
        if let Some(then) = resolved_then
            && then.as_str() != now.resolved_path.as_deref()
        {
            // No resolved path: the path as named, with no link on it.
            let shown = |p: Option<&str>| {
                p.map_or("itself (no link on it)".to_string(), |p| format!("{p:?}"))
            };
            return Err(ToolError::new(
                codes::PERMISSION_DENIED,
                format!(
                    "{} was approved while its path led to {}, but it leads to {} now (a link changed); it did not run",
                    tool.definition.name,
                    shown(then.as_str()),
                    shown(now.resolved_path.as_deref()),
                ),
                false,
            )
            .with_hint("call it again with a new tool call id, so it is judged where the path leads now"));
        }
        if let (Some(sub), Some(then)) = (&req.call.workspace, request.get("sub_workspace_at")) {
            // A sub-workspace not made yet when asked about may have been
            // made since, as itself: not as a link to somewhere else.
            let then = then.as_str().unwrap_or(sub);
            let now_at = now.sub_workspace_at.as_deref().unwrap_or(sub);
            if then != now_at {
                return Err(ToolError::new(
                    codes::PERMISSION_DENIED,
                    format!(
                        "{} was approved while the sub-workspace {sub:?} was {then:?}, but it is {now_at:?} now (a link changed); it did not run",
                        tool.definition.name,
                    ),
                    false,
                )
                .with_hint("call it again with a new tool call id, so it is judged where the sub-workspace leads now"));
            }
        }
        if now.verdict == super::Verdict::Deny {
            return Err(ToolError::new(
                codes::PERMISSION_DENIED,
                format!(
                    "{} was approved, but the permission rules now deny it: {}",
                    tool.definition.name, now.reason
                ),
                false,
            )
            .with_hint(super::DENIED_HINT));
        }
        Ok(now)
    }

    /// Finish an open approval as expired (`APPROVAL_EXPIRED`). Losing a race
    /// with a decision is fine: whoever committed first wins.
    /// Record `approval`'s expiry and its call's `APPROVAL_EXPIRED` result;
    /// `false` when it was decided first (here or by another process).
    pub(super) async fn expire(&self, approval: &ApprovalRecord) -> Result<bool, StoreError> {
        let error = ToolError::new(
            codes::APPROVAL_EXPIRED,
            format!(
                "nobody decided on {} before the approval expired",
                approval.tool_name
            ),
            true,
        )
        .with_hint("ask the user to be ready to approve, then call again with a new tool call id");
        let output = postprocess::failure_output(
            &approval.tool_name,
            &approval.tool_call_id,
            &approval.arguments,
            error,
        );
        let extra = vec![
            WriteOp::DecideApproval {
                id: approval.id.clone(),
                status: ApprovalStatus::Expired,
                decided_by: None,
                reason: None,
                decided_at_ms: now_ms(),
            },
            WriteOp::AppendAudit(audit::approval_decided(approval, "expired", None, None)),
            approval_decided(approval, "expired", None, None),
        ];
        match self
            .finish(
                &approval.owner,
                &approval.thread_id,
                output,
                None,
                None,
                extra,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Expire every approval past its deadline, [`EXPIRY_BATCH`] at a time
    /// until none is left; returns how many this call expired.
    ///
    /// A batch's expiries are handed to the writer together, which commits
    /// them in a few transactions rather than one each: a backlog (many
    /// calls asked at once, or a process that was down when they expired)
    /// is cleared in one sweep, not a batch per tick.
    pub async fn expire_due(&self) -> Result<usize, StoreError> {
        let mut expired = 0;
        loop {
            let due = self.store.expired_approvals(now_ms(), EXPIRY_BATCH).await?;
            let mut this_batch = 0;
            for done in futures::future::join_all(due.iter().map(|a| self.expire(a))).await {
                this_batch += usize::from(done?);
            }
            expired += this_batch;
            // A short batch was the last; a batch in which every approval
            // was decided elsewhere would come back the same, so it ends
            // the sweep too (the next tick reads afresh).
            if (due.len() as i64) < EXPIRY_BATCH || this_batch == 0 {
                return Ok(expired);
            }
        }
    }
}
