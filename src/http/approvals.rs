//! `/v1/approvals` (the human checkpoint) and `/v1/permissions` (an owner's
//! own rules).

use axum::Router;
use axum::extract::{Path, State};
use axum::response::IntoResponse as _;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiJson, ApiQuery};
use super::{AppState, AuthUser};
use crate::engine::{ApprovalError, Decision};
use crate::protocol::now_ms;
use crate::store::{ApprovalRecord, ApprovalStatus, NewAuditEntry};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/approvals", get(list_approvals))
        .route(
            "/approvals/events",
            // HEAD would open a stream (and take a slot) as GET does.
            get(super::approval_stream::approval_events).head(|| async {
                (
                    axum::http::StatusCode::METHOD_NOT_ALLOWED,
                    [(axum::http::header::ALLOW, "GET")],
                )
            }),
        )
        .route("/approvals/{approval_id}", get(get_approval))
        .route("/approvals/{approval_id}/decision", post(decide))
        .route("/permissions", get(get_permissions).put(put_permissions))
}

/// An approval as its owner and approvers see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalView {
    pub id: String,
    pub owner: String,
    pub thread_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    /// What would run.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The sub-workspace it would run in; absent: the owner's main one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::protocol::calls::WorkspaceName>)]
    pub workspace: Option<String>,
    /// Where that sub-workspace is in the owner's workspace, when it is a
    /// link to another directory (the call runs there, or not at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_leads_to: Option<String>,
    /// Why it needs approval, for the person deciding: a sentence naming
    /// the rule that matched, or saying that none did and the tool's own
    /// default asks (the audit log's `rule` field has the rule alone).
    pub reason: String,
    /// The tool's dry-run preview, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub preview: Option<Value>,
    /// `pending`, `approved`, `denied` or `expired`. A pending approval is
    /// `expired` from `expires_at_ms` on: it can no longer be decided, even
    /// before the expiry sweeper records its call's result.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at_ms: Option<i64>,
    /// True when this decision was made before, by the same caller with
    /// the same reason (a decision posted again after its answer was
    /// lost): nothing was decided now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// `GET /v1/approvals/{id}` only: where its call stands now, so an
    /// approver (who cannot read the owner's thread) learns what became of
    /// it: `pending_approval`, `running`, `success`, `failure` or
    /// `partial`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_status: Option<String>,
    /// With a failed call: its error's code (`APPROVAL_DENIED`,
    /// `PERMISSION_DENIED`, `APPROVAL_STALE`, the tool's own, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_error_code: Option<String>,
}

pub(super) fn status_name(s: ApprovalStatus) -> &'static str {
    match s {
        ApprovalStatus::Pending => "pending",
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Denied => "denied",
        ApprovalStatus::Expired => "expired",
    }
}

impl ApprovalView {
    /// `a` as it stands at `now`: a pending approval past its deadline
    /// shows as expired ([`ApprovalRecord::status_at`]).
    pub fn at(a: ApprovalRecord, now: i64) -> Self {
        ApprovalView {
            status: status_name(a.status_at(now)).into(),
            id: a.id,
            owner: a.owner,
            thread_id: a.thread_id,
            tool_call_id: a.tool_call_id,
            tool_name: a.tool_name,
            workspace: a.request["workspace"].as_str().map(str::to_string),
            workspace_leads_to: a.request["sub_workspace_at"]
                .as_str()
                .filter(|at| Some(*at) != a.request["workspace"].as_str())
                .map(str::to_string),
            arguments: a.arguments,
            reason: a.reason,
            preview: a.preview,
            decided_by: a.decided_by,
            decision_reason: a.decision_reason,
            created_at_ms: a.created_at_ms,
            expires_at_ms: a.expires_at_ms,
            decided_at_ms: a.decided_at_ms,
            replayed: false,
            call_status: None,
            call_error_code: None,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending`, `approved`, `denied` or `expired` (a pending approval is
    /// expired from its deadline on); all when absent.
    #[param(pattern = "^(pending|approved|denied|expired)$")]
    pub status: Option<String>,
    /// 1–200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// Cursor from the previous page's `next_cursor`: returns older approvals.
    #[param(pattern = r"^0*[0-9]{1,18}:(?!\.{1,2}$)[A-Za-z0-9_.:-]{1,128}$")]
    pub before: Option<String>,
    /// Only the approvals of this thread (of the caller's, or for an
    /// approver of any owner's).
    #[param(value_type = Option<crate::protocol::calls::Id>)]
    pub thread_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalList {
    /// Newest first.
    pub approvals: Vec<ApprovalView>,
    /// Pass as `before` to get the next (older) page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

pub(super) fn is_approver(state: &AppState, user: &AuthUser) -> bool {
    user.has_scope(&state.settings.approvals.approver_scope)
}

/// The caller's approvals; for a token with the approver scope, every
/// owner's (each names its `owner`).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalsQuery),
    responses((status = 200, body = ApprovalList),
        (status = 400, description = "Bad status, limit or cursor", content_type = "application/problem+json"),
        (status = 429, description = "This owner is reading server.max_page_reads_per_owner pages already and none came free within server.page_read_wait_secs (see Retry-After)", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn list_approvals(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(q): ApiQuery<ApprovalsQuery>,
) -> Result<axum::response::Response, ApiError> {
    let status = match q.status.as_deref() {
        None => None,
        Some("pending") => Some(ApprovalStatus::Pending),
        Some("approved") => Some(ApprovalStatus::Approved),
        Some("denied") => Some(ApprovalStatus::Denied),
        Some("expired") => Some(ApprovalStatus::Expired),
        Some(other) => {
            return Err(ApiError::invalid_param(
                "status",
                format!("must be pending, approved, denied or expired, got {other:?}"),
            ));
        }
    };
    let limit = super::page_limit(q.limit, 50, 200)?;
    let before = super::time_cursor(q.before.as_deref())?;
    let thread = q.thread_id.map(super::ThreadId::parse).transpose()?;
    // An approver may see and decide every owner's approvals, so it lists
    // them all; anyone else lists their own. One more than the page: whether
    // an older page exists.
    let mut owner = (!is_approver(&state, &user)).then_some(user.owner.as_str());
    // One thread's: the thread's owner is checked here, and the page read
    // by the thread alone (its index; an owner's approvals may be many).
    if let Some(thread) = &thread
        && let Some(own) = owner.take()
        && state
            .store
            .thread_owner(&thread.0)
            .await?
            .is_none_or(|o| o.owner != own)
    {
        return Ok(axum::Json(ApprovalList {
            approvals: Vec::new(),
            next_cursor: None,
        })
        .into_response());
    }
    // Held until the page is serialized into the response.
    let _page = state.enter_page_read(&user.owner).await?;
    let now = now_ms();
    let mut approvals = state
        .store
        .approvals(
            owner,
            thread.as_ref().map(|t| t.0.as_str()),
            status,
            now,
            before,
            limit + 1,
        )
        .await?;
    // A page its size ended (approvals carry their calls' arguments) has a
    // next page whatever its length.
    let next_cursor = if approvals.len() as i64 <= limit
        && approvals
            .iter()
            .map(ApprovalRecord::page_bytes)
            .sum::<usize>()
            >= crate::store::PAGE_BYTES
    {
        approvals
            .last()
            .map(|a| format!("{}:{}", a.created_at_ms, a.id))
    } else {
        super::next_time_cursor(&mut approvals, limit, |a| (a.created_at_ms, &a.id))
    };
    Ok(axum::Json(ApprovalList {
        approvals: approvals
            .into_iter()
            .map(|a| ApprovalView::at(a, now))
            .collect(),
        next_cursor,
    })
    .into_response())
}

pub(super) fn approval_error(e: ApprovalError) -> ApiError {
    match e {
        ApprovalError::NotFound => ApiError::NotFound("approval not found".into()),
        ApprovalError::AlreadyDecided(_) => ApiError::conflict(
            crate::http::error::conflicts::ALREADY_DECIDED,
            e.to_string(),
        ),
        ApprovalError::Expired => ApiError::conflict(
            crate::http::error::conflicts::APPROVAL_EXPIRED,
            e.to_string(),
        ),
        ApprovalError::ApproverOnly => ApiError::Forbidden(e.to_string()),
        ApprovalError::Store(s) => s.into(),
    }
}

/// One approval (its owner, or a token with the approver scope).
#[utoipa::path(get, path = "/v1/approvals/{approval_id}", tag = "approvals",
    params(("approval_id" = String, Path,)),
    responses((status = 200, body = ApprovalView),
        (status = 404, description = "No such approval for this caller", content_type = "application/problem+json"),
        (status = 410, description = "`THREAD_DELETED`: the approval went with its thread, deleted at `deleted_at`", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get_approval(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<String>,
) -> Result<axum::Json<ApprovalView>, ApiError> {
    let approval = state
        .engine
        .approval_for(&id, &user.owner, is_approver(&state, &user))
        .await
        .map_err(approval_error)?;
    Ok(axum::Json(with_call(&state, approval, now_ms()).await?))
}

/// `approval` as it stands at `now`, with where its call stands.
pub(super) async fn with_call(
    state: &AppState,
    approval: ApprovalRecord,
    now: i64,
) -> Result<ApprovalView, crate::store::StoreError> {
    let call = state
        .store
        .tool_call(&approval.thread_id, &approval.tool_call_id)
        .await?;
    let mut view = ApprovalView::at(approval, now);
    if let Some(call) = call {
        view.call_status = Some(call.status.as_str().to_string());
        view.call_error_code = call
            .output
            .as_ref()
            .and_then(|o| o["error"]["code"].as_str())
            .map(str::to_string);
    }
    Ok(view)
}

/// The longest reason a decision keeps (the decision route and an AG-UI
/// resume entry alike).
pub(super) const MAX_REASON_CHARS: usize = 2000;

/// A decision's reason as given: an empty one is none.
fn given(reason: &Option<String>) -> Option<&str> {
    reason.as_deref().filter(|r| !r.is_empty())
}

/// Whether `reason` is short enough to keep with a decision.
pub(super) fn reason_fits(reason: &str) -> bool {
    reason.chars().count() <= MAX_REASON_CHARS
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    pub decision: Decision,
    /// Shown to the model with a denial, and kept in the audit log; at most
    /// 2000 characters.
    #[schema(max_length = 2000)]
    pub reason: Option<String>,
}

/// Approve or deny a waiting call.
///
/// Approve: the call runs now and its result streams as usual. Deny: it
/// ends with `APPROVAL_DENIED`. Only the owner, or a token with the approver
/// scope, decides; a decided or expired approval cannot be decided again.
#[utoipa::path(post, path = "/v1/approvals/{approval_id}/decision", tag = "approvals",
    params(("approval_id" = String, Path,)),
    request_body = DecisionRequest,
    responses((status = 200, description = "The decided approval", body = ApprovalView),
        (status = 403, description = "An approval by the call's owner where `approvals.owners_approve` is off: only a token with the approver scope approves (the owner may deny)", content_type = "application/problem+json"),
        (status = 404, description = "No such approval for this caller", content_type = "application/problem+json"),
        (status = 410, description = "`THREAD_DELETED`: the approval went with its thread, deleted at `deleted_at`", content_type = "application/problem+json"),
        (status = 409, description = "Already decided otherwise (another decision, reason or caller), or expired; the same decision posted again by its caller answers 200 with `replayed: true`; `THREAD_CLOSING`: an approval of a call whose thread is being deleted (it will be withdrawn)", content_type = "application/problem+json"),
        (status = 422, description = "Bad decision", content_type = "application/problem+json"),
        (status = 429, description = "An approval while the call's owner runs its maximum of concurrent calls (an approved call takes one of its slots): nothing is decided; decide again after Retry-After", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn decide(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecisionRequest>,
) -> Result<axum::Json<ApprovalView>, ApiError> {
    if body.reason.as_ref().is_some_and(|r| !reason_fits(r)) {
        return Err(ApiError::unprocessable_at(
            "Invalid decision",
            "/reason".into(),
            format!("reason must be at most {MAX_REASON_CHARS} characters"),
        ));
    }
    let approver = is_approver(&state, &user);
    // An approved call runs like any other, in one of its owner's call
    // slots: with none free, the decision is not taken (the approval stays
    // pending) and the answer says to decide again shortly.
    let slot = match (body.decision, state.engine.approval_for(&id, &user.owner, approver).await) {
        (Decision::Approve, Ok(approval)) if approval.status == ApprovalStatus::Pending => {
            Some(state.acquire(&approval.owner, 1).map_err(|e| match e {
                ApiError::TooManyRequests {
                    detail,
                    retry_after_secs,
                } => ApiError::TooManyRequests {
                    detail: format!(
                        "{detail} (the call's owner); the approval stays pending: decide again shortly"
                    ),
                    retry_after_secs,
                },
                other => other,
            })?)
        }
        _ => None,
    };
    let decided = state
        .engine
        .decide_holding(
            &id,
            &user.owner,
            approver,
            body.decision,
            body.reason.clone(),
            slot,
        )
        .await;
    match decided {
        Ok(approval) => Ok(axum::Json(ApprovalView::at(approval, now_ms()))),
        // The same decision by the same caller, posted again (its answer
        // lost): answered as it was, deciding nothing. Another decision,
        // or another's, is the 409.
        Err(ApprovalError::AlreadyDecided(_)) => {
            let approval = state
                .engine
                .approval_for(&id, &user.owner, approver)
                .await
                .map_err(approval_error)?;
            let same = matches!(
                (body.decision, approval.status),
                (Decision::Approve, ApprovalStatus::Approved)
                    | (Decision::Deny, ApprovalStatus::Denied)
            ) && approval.decided_by.as_deref() == Some(user.owner.as_str())
                && given(&approval.decision_reason) == given(&body.reason);
            if !same {
                // Say what differs, so the caller knows whether its own
                // decision stands.
                let status = crate::engine::status_word(approval.status);
                let by = approval.decided_by.as_deref().unwrap_or("someone");
                let was = match given(&approval.decision_reason) {
                    Some(reason) => format!("{status} by {by}, with the reason {reason:?}"),
                    None => format!("{status} by {by}, with no reason"),
                };
                let same_decision = matches!(
                    (body.decision, approval.status),
                    (Decision::Approve, ApprovalStatus::Approved)
                        | (Decision::Deny, ApprovalStatus::Denied)
                );
                let differs = if !same_decision {
                    "another decision"
                } else if approval.decided_by.as_deref() != Some(user.owner.as_str()) {
                    "the same decision, taken by another caller"
                } else {
                    "the same decision with another reason: post the reason it was taken with to have its answer again"
                };
                return Err(ApiError::conflict(
                    crate::http::error::conflicts::ALREADY_DECIDED,
                    format!("the approval is already {was}; this is {differs}"),
                ));
            }
            let mut view = ApprovalView::at(approval, now_ms());
            view.replayed = true;
            Ok(axum::Json(view))
        }
        Err(e) => Err(approval_error(e)),
    }
}

#[derive(Debug, Deserialize, Serialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"allow": ["bash(git status)", "bash(npm run test *)"], "ask": [], "deny": ["write_file(**/.env)"]}))]
pub struct RuleLists {
    #[serde(default)]
    #[schema(value_type = Vec<Rule>)]
    pub allow: Vec<String>,
    #[serde(default)]
    #[schema(value_type = Vec<Rule>)]
    pub ask: Vec<String>,
    #[serde(default)]
    #[schema(value_type = Vec<Rule>)]
    pub deny: Vec<String>,
}

/// A permission rule in the OpenAPI document. Never built; `RuleLists`
/// declares its items with it.
pub struct Rule;

impl utoipa::PartialSchema for Rule {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::protocol::calls::text_schema(
            None,
            None,
            "`Tool` or `Tool(specifier)`, e.g. `bash(git status)`, `bash(npm run test *)`, `write_file(**/.env)` (docs/safety.md)",
        )
    }
}

impl ToSchema for Rule {}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PermissionsView {
    /// The deployment's rules: evaluated before the owner's of the same kind.
    pub deployment: RuleLists,
    /// The caller's own rules.
    pub owner: RuleLists,
    /// Verdicts when nothing matches: by the tool's nature.
    #[schema(value_type = Object)]
    pub defaults: Value,
    /// Rules that name no tool registered now (nor an alias, nor the file
    /// tools' `read` and `write`): a misspelt name matches nothing, and a
    /// rule for a tool registered later waits for it. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A note for each rule of `lists` (at `/{party}/{list}/{index}`) naming
/// no tool the registry knows.
fn unknown_tools(state: &AppState, party: &str, lists: &RuleLists, notes: &mut Vec<String>) {
    let registry = state.engine.registry();
    for (list, rules) in [
        ("allow", &lists.allow),
        ("ask", &lists.ask),
        ("deny", &lists.deny),
    ] {
        for (index, text) in rules.iter().enumerate() {
            let Ok(rule) = crate::permissions::Rule::parse(text) else {
                continue;
            };
            let tool = rule.tool();
            if matches!(tool, "read" | "write") || registry.resolve(tool).is_some() {
                continue;
            }
            notes.push(format!(
                "{party}.{list}[{index}] `{text}` names no tool registered now (`{tool}`; tool \
                 names are exact and case-sensitive): it matches nothing until such a tool is \
                 registered"
            ));
        }
    }
}

fn stored_lists(v: Option<Value>) -> RuleLists {
    v.and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

async fn view(state: &AppState, owner: &str) -> Result<PermissionsView, ApiError> {
    let p = &state.settings.permissions;
    let deployment = RuleLists {
        allow: p.allow.clone(),
        ask: p.ask.clone(),
        deny: p.deny.clone(),
    };
    let owner = stored_lists(state.store.owner_rules(owner).await?);
    let mut notes = Vec::new();
    unknown_tools(state, "deployment", &deployment, &mut notes);
    unknown_tools(state, "owner", &owner, &mut notes);
    Ok(PermissionsView {
        deployment,
        owner,
        defaults: json!(p.defaults),
        notes,
    })
}

/// The rules that apply to the caller.
#[utoipa::path(get, path = "/v1/permissions", tag = "permissions",
    responses((status = 200, body = PermissionsView),
        (status = 400, description = "The path or query holds %00", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get_permissions(
    State(state): State<AppState>,
    user: AuthUser,
) -> Result<axum::Json<PermissionsView>, ApiError> {
    Ok(axum::Json(view(&state, &user.owner).await?))
}

/// The most rules an owner keeps (allow, ask and deny together): every
/// call of theirs is checked against them all.
pub const MAX_OWNER_RULES: usize = 500;
/// The longest rule an owner may set, in characters.
pub const MAX_RULE_CHARS: usize = 1000;

/// `422` "Invalid rule", its `errors` naming where (`/deny/2`) and why.
fn invalid_rules(pointer: String, message: String, detail: String) -> ApiError {
    invalid_rule_list(vec![(pointer, message)], detail)
}

/// `422` "Invalid rule" with an entry of `errors` for each (pointer,
/// message).
fn invalid_rule_list(errors: Vec<(String, String)>, detail: String) -> ApiError {
    let mut extra = Map::new();
    let errors: Vec<Value> = errors
        .into_iter()
        .map(|(pointer, message)| json!({"pointer": pointer, "message": message}))
        .collect();
    extra.insert("errors".into(), Value::Array(errors));
    ApiError::Unprocessable {
        title: "Invalid rule".into(),
        detail,
        extra,
    }
}

/// `422` naming the first rule past [`MAX_RULE_CHARS`], or the lists when
/// they hold more than [`MAX_OWNER_RULES`].
fn rules_fit(lists: &RuleLists) -> Result<(), ApiError> {
    let named = [
        ("allow", &lists.allow),
        ("ask", &lists.ask),
        ("deny", &lists.deny),
    ];
    let count: usize = named.iter().map(|(_, rules)| rules.len()).sum();
    if count > MAX_OWNER_RULES {
        let message = format!(
            "an owner keeps at most {MAX_OWNER_RULES} rules (allow, ask and deny together), got {count}"
        );
        return Err(invalid_rules(String::new(), message.clone(), message));
    }
    for (list, rules) in named {
        for (index, rule) in rules.iter().enumerate() {
            let chars = rule.chars().count();
            if chars > MAX_RULE_CHARS {
                let message = format!("a rule is at most {MAX_RULE_CHARS} characters, got {chars}");
                return Err(invalid_rules(
                    format!("/{list}/{index}"),
                    message.clone(),
                    format!("{list}[{index}]: {message}"),
                ));
            }
        }
    }
    Ok(())
}

/// Replace the caller's own rules.
///
/// Rules are `tool` or `tool(specifier)`; evaluated deny → ask → allow,
/// the deployment's before the owner's, first match wins. Rules that do
/// not parse are refused, each with its list and index in `errors`; rules
/// naming no tool registered now are kept, and listed in `notes`.
#[utoipa::path(put, path = "/v1/permissions", tag = "permissions",
    request_body = RuleLists,
    responses((status = 200, body = PermissionsView),
        (status = 422, description = "A rule does not parse, is longer than 1000 characters, or the lists hold more than 500 rules", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn put_permissions(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(body): ApiJson<RuleLists>,
) -> Result<axum::Json<PermissionsView>, ApiError> {
    let value = json!(body);
    rules_fit(&body)?;
    let errors = crate::permissions::rule_errors(&body.allow, &body.ask, &body.deny);
    if let Some(first) = errors.first() {
        let detail = match errors.len() {
            1 => first.to_string(),
            n => format!("{first} (and {} more, each in `errors`)", n - 1),
        };
        return Err(invalid_rule_list(
            errors
                .iter()
                .map(|e| (format!("/{}/{}", e.list, e.index), e.error.to_string()))
                .collect(),
            detail,
        ));
    }
    let now = now_ms();
    state
        .store
        .put_owner_rules(&user.owner, &value, now)
        .await?;
    state.engine.forget_owner_rules(&user.owner);
    state
        .store
        .append_audit(&NewAuditEntry {
            at_ms: now,
            owner: user.owner.clone(),
            thread_id: None,
            tool_call_id: None,
            tool_name: None,
            action: crate::engine::audit::PERMISSIONS_UPDATED.into(),
            operation: None,
            verdict: None,
            rule: None,
            approval_id: None,
            outcome: None,
            duration_ms: None,
            detail: json!({"rules": value}).into(),
        })
        .await?;
    Ok(axum::Json(view(&state, &user.owner).await?))
}
