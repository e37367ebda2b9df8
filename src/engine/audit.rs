//! Audit entries for every decision and execution. They commit in the same
//! transaction as what they record, and they never carry arguments or
//! results: who, which tool, what was decided and how it ended.

use std::time::Duration;

use serde_json::json;

use super::{CallRequest, Permission};
use crate::protocol::now_ms;
use crate::protocol::tool_output::{ToolAgentOutput, ToolError};
use crate::store::{ApprovalRecord, NewAuditEntry, ToolCallRecord};
use crate::tools::registry::RegisteredTool;

/// Every action an entry can record; `GET /v1/audit?action=` takes these.
pub const CALL_EXECUTED: &str = "call.executed";
pub const CALL_DRY_RUN: &str = "call.dry_run";
pub const CALL_UNDO: &str = "call.undo";
pub const CALL_REFUSED: &str = "call.refused";
pub const CALL_INTERRUPTED: &str = "call.interrupted";
pub const APPROVAL_REQUESTED: &str = "approval.requested";
pub const APPROVAL_DECIDED: &str = "approval.decided";
pub const RUN_ROLLED_BACK: &str = "run.rolled_back";
pub const PERMISSIONS_UPDATED: &str = "permissions.updated";
pub const ACTIONS: [&str; 9] = [
    CALL_EXECUTED,
    CALL_DRY_RUN,
    CALL_UNDO,
    CALL_REFUSED,
    CALL_INTERRUPTED,
    APPROVAL_REQUESTED,
    APPROVAL_DECIDED,
    RUN_ROLLED_BACK,
    PERMISSIONS_UPDATED,
];

fn entry(owner: &str, thread_id: &str, call_id: &str, tool: &str, action: &str) -> NewAuditEntry {
    NewAuditEntry {
        at_ms: now_ms(),
        owner: owner.to_string(),
        thread_id: Some(thread_id.to_string()),
        tool_call_id: Some(call_id.to_string()),
        tool_name: Some(tool.to_string()),
        action: action.to_string(),
        operation: None,
        verdict: None,
        rule: None,
        approval_id: None,
        outcome: None,
        duration_ms: None,
        detail: json!({}).into(),
    }
}

fn with_permission(mut e: NewAuditEntry, permission: Option<&Permission>) -> NewAuditEntry {
    if let Some(p) = permission {
        e.verdict = Some(p.verdict.as_str().to_string());
        e.rule = p.rule.clone();
    }
    e
}

pub fn executed(
    req: &CallRequest,
    tool: &RegisteredTool,
    output: &ToolAgentOutput,
    permission: &Permission,
    approval_id: Option<&str>,
    took: Duration,
) -> NewAuditEntry {
    let action = match (&req.undo_of, req.call.dry_run) {
        (_, true) => CALL_DRY_RUN,
        (Some(_), _) => CALL_UNDO,
        _ => CALL_EXECUTED,
    };
    let mut e = with_permission(
        entry(
            &req.owner,
            &req.thread_id,
            &req.call.id,
            &tool.definition.name,
            action,
        ),
        Some(permission),
    );
    e.operation = Some(tool.definition.metadata.audit_operation.clone());
    e.approval_id = approval_id.map(str::to_string);
    e.outcome = Some(output.status.as_str().to_string());
    e.duration_ms = Some(took.as_millis() as i64);
    let mut detail = json!({"run_id": run_of(req)});
    if let Some(err) = &output.error {
        detail["error_code"] = json!(err.code);
    }
    if let Some(original) = &req.undo_of {
        detail["undo_of"] = json!(original);
    }
    e.detail = detail.into();
    e
}

pub fn refused(
    req: &CallRequest,
    tool_name: &str,
    operation: Option<&str>,
    error: &ToolError,
    permission: Option<&Permission>,
) -> NewAuditEntry {
    let mut e = with_permission(
        entry(
            &req.owner,
            &req.thread_id,
            &req.call.id,
            tool_name,
            CALL_REFUSED,
        ),
        permission,
    );
    e.operation = operation.map(str::to_string);
    e.outcome = Some("failure".into());
    e.detail = json!({"error_code": error.code, "run_id": run_of(req)}).into();
    e
}

/// The run a call belongs to, as its record says: the `run_id` it was
/// posted with, or else its own id (a call without one is its own run).
fn run_of(req: &CallRequest) -> &str {
    req.call.run_id.as_deref().unwrap_or(&req.call.id)
}

pub fn interrupted(record: &ToolCallRecord, approval_id: Option<String>) -> NewAuditEntry {
    let mut e = entry(
        &record.owner,
        &record.thread_id,
        &record.id,
        &record.tool_name,
        CALL_INTERRUPTED,
    );
    e.outcome = Some("failure".into());
    e.approval_id = approval_id;
    e.detail = json!({"error_code": "INTERRUPTED"}).into();
    e
}

pub fn approval_requested(
    approval: &ApprovalRecord,
    operation: &str,
    permission: &Permission,
) -> NewAuditEntry {
    let mut e = with_permission(
        entry(
            &approval.owner,
            &approval.thread_id,
            &approval.tool_call_id,
            &approval.tool_name,
            APPROVAL_REQUESTED,
        ),
        Some(permission),
    );
    e.operation = Some(operation.to_string());
    e.approval_id = Some(approval.id.clone());
    e.at_ms = approval.created_at_ms;
    // Not the approval's reason: it quotes the command or path it asks
    // about, and the log holds no arguments. The verdict and rule say why.
    e.detail = json!({
        "requires_checkpoint": approval.reason == "requires_checkpoint",
        "expires_at_ms": approval.expires_at_ms,
    })
    .into();
    e
}

pub fn approval_decided(
    approval: &ApprovalRecord,
    decision: &str,
    by: Option<&str>,
    reason: Option<&str>,
) -> NewAuditEntry {
    let mut e = entry(
        &approval.owner,
        &approval.thread_id,
        &approval.tool_call_id,
        &approval.tool_name,
        APPROVAL_DECIDED,
    );
    e.approval_id = Some(approval.id.clone());
    e.outcome = Some(decision.to_string());
    e.detail = json!({"decided_by": by, "reason": reason}).into();
    e
}

pub fn rolled_back(
    owner: &str,
    thread_id: &str,
    run_id: &str,
    steps: &serde_json::Value,
) -> NewAuditEntry {
    NewAuditEntry {
        at_ms: now_ms(),
        owner: owner.to_string(),
        thread_id: Some(thread_id.to_string()),
        tool_call_id: None,
        tool_name: None,
        action: RUN_ROLLED_BACK.into(),
        operation: None,
        verdict: None,
        rule: None,
        approval_id: None,
        outcome: None,
        duration_ms: None,
        detail: json!({"run_id": run_id, "steps": steps}).into(),
    }
}
