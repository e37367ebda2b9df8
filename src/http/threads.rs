//! `/v1/threads/{thread_id}/…`: tool calls, messages, history and context.

use std::collections::HashMap;
use std::time::Duration;
use tracing::Instrument as _;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiJson, ApiQuery, NoBody, NoInput, conflicts};
use super::{AppState, AuthUser, ThreadId, check_owner, require_thread};
use crate::engine::limits::SharedSlot;
use crate::engine::{CallOutcome, CallRequest, Cancelled, Executed, Rejection, UndoError};
use crate::protocol::agui::Event;
use crate::protocol::calls::{self, CallParseError, ToolCallRequest};
use crate::protocol::context;
use crate::protocol::json::same_json_at;
use crate::protocol::now_ms;
use crate::protocol::tool_output::{PublicOutput, ToolError, ToolResponse, codes};
use crate::store::{CallStatus, DeclaredCall, NewMessage, Role, StoredMessage, WriteOp, WriteUnit};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/threads/{thread_id}/tool-calls", post(post_tool_call))
        .route(
            "/threads/{thread_id}/tool-calls/{tool_call_id}",
            get(get_tool_call),
        )
        .route(
            "/threads/{thread_id}/tool-calls/{tool_call_id}/cancel",
            post(cancel_tool_call),
        )
        .route(
            "/threads/{thread_id}/tool-calls/{tool_call_id}/undo",
            post(undo_tool_call),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/rollback",
            post(rollback_run),
        )
        .route("/threads/{thread_id}/messages", post(post_message))
        .route("/threads", get(list_threads))
        .route("/threads/{thread_id}", delete(delete_thread))
        .route("/threads/{thread_id}/history", get(get_history))
        .route("/threads/{thread_id}/context", get(get_context))
}

/// What a chat backend gets back for a tool call.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallResponse {
    /// The ToolAgentOutput (without the internal ui_hints).
    #[schema(value_type = crate::protocol::tool_output::ToolAgentOutput)]
    pub tool_agent_output: PublicOutput,
    /// Put `content` into the model's context as the tool result.
    pub tool_response: ToolResponse,
    /// The compiled UI (ui_schema v1), when the result has a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = ui_schema_ref)]
    pub ui_schema: Option<Value>,
    /// The tool message that stores the result.
    pub message_id: String,
    /// True when this call id was recorded before and nothing ran now.
    pub replayed: bool,
}

impl From<CallOutcome> for ToolCallResponse {
    fn from(o: CallOutcome) -> Self {
        ToolCallResponse {
            tool_agent_output: PublicOutput(o.output),
            tool_response: ToolResponse {
                content: o.tool_response,
            },
            ui_schema: o.ui_schema,
            message_id: o.message_id,
            replayed: o.replayed,
        }
    }
}

/// `UiSchema`: the ui_schema v1 JSON Schema published in the document.
fn ui_schema_ref() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::Ref::from_schema_name("UiSchema").into()
}

/// A pre-execution refusal: a problem document that also carries the
/// structured tool error and the text to hand back to the model, so a chat
/// backend can let the model correct itself.
fn refusal(title: &str, error: ToolError, mut extra: Map<String, Value>) -> ApiError {
    let content = json!({"status": "failure", "error": error}).to_string();
    extra.insert("code".into(), json!(error.code));
    extra.insert("tool_error".into(), json!(error));
    extra.insert("tool_response".into(), json!({ "content": content }));
    ApiError::Unprocessable {
        title: title.into(),
        detail: error.message.clone(),
        extra,
    }
}

pub fn rejection_to_api(r: Rejection) -> ApiError {
    match r {
        Rejection::ToolNotFound { ref available, .. } => {
            let mut extra = Map::new();
            extra.insert("available_tools".into(), json!(available));
            let error = r.tool_error().expect("an unknown tool's error");
            refusal("Unknown tool", error, extra)
        }
        Rejection::InvalidArguments { error, .. } => {
            let mut extra = Map::new();
            extra.insert("errors".into(), json!(error.errors));
            extra.insert("input_schema".into(), json!(error.input_schema));
            refusal("Invalid arguments", *error, extra)
        }
        Rejection::IdConflict { id, field } => ApiError::call_conflict(&id, field),
        Rejection::DeclaredConflict { id, field } => ApiError::declared_conflict(&id, field),
        Rejection::InProgressElsewhere { id } => ApiError::conflict(
            conflicts::IN_PROGRESS,
            format!(
                "tool call {id:?} is still running in another toolgate process, or its result is waiting for the database to answer again; post it again later to get its result"
            ),
        ),
        Rejection::OtherParent { .. } => ApiError::conflict_coded_at(
            conflicts::OTHER_PARENT,
            "/parent_message_id".into(),
            r.to_string(),
        ),
        Rejection::NotOwner => ApiError::thread_not_found(),
        Rejection::Store(e) => e.into(),
    }
}

/// The tool-level error of a call's arguments that are not what a call
/// takes (JSON text that is not an object's, too deep a nesting): the model
/// made it and can correct it. `None` for a problem of the call's envelope.
pub fn arguments_error(e: &CallParseError) -> Option<ToolError> {
    let path = e.arguments_path.clone()?;
    let mut error = ToolError::new(
        codes::INVALID_ARGUMENTS,
        format!("{}: {}", e.pointer, e.message),
        false,
    )
    .with_hint(if path.is_empty() {
        "send the arguments as one JSON object"
    } else {
        "correct the arguments at `path` and call again"
    });
    error.errors = Some(vec![crate::protocol::tool_output::FieldError {
        path,
        message: e.message.clone(),
    }]);
    Some(error)
}

/// The refusal a declared call gets wherever it is posted: that of its
/// arguments text (`text_error`, when it is no JSON object's), or of the
/// pipeline's first steps (an unknown tool, arguments that do not match).
/// `None` for a call that can run.
pub(super) fn declared_refusal(
    state: &AppState,
    call: &crate::protocol::calls::IncomingCall,
    text_error: Option<&CallParseError>,
) -> Option<ToolError> {
    match text_error {
        Some(e) => arguments_error(e),
        None => state.engine.refusal_of(call),
    }
}

pub fn parse_error_to_api(e: CallParseError) -> ApiError {
    if let Some(error) = arguments_error(&e) {
        // As for a schema failure: `errors` names the place in the
        // arguments, as `tool_error.errors` does.
        let mut extra = Map::new();
        extra.insert("errors".into(), json!(error.errors));
        refusal("Invalid arguments", error, extra)
    } else {
        let mut extra = Map::new();
        extra.insert(
            "errors".into(),
            json!([{"pointer": e.pointer, "message": e.message}]),
        );
        ApiError::Unprocessable {
            title: "Invalid tool call".into(),
            detail: format!(
                "{} {}",
                if e.pointer.is_empty() {
                    "the body"
                } else {
                    &e.pointer
                },
                e.message
            ),
            extra,
        }
    }
}

/// Execute a model's tool call.
///
/// Accepts the native shape, OpenAI's (`function.arguments` as JSON text) and
/// Anthropic's (`tool_use`). The response is sent only after the result is
/// durable. Re-posting a recorded id returns the stored outcome and runs
/// nothing; the same id with other arguments is a 409.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/tool-calls", tag = "tool calls",
    params(("thread_id" = String, Path, description = "Thread id, [A-Za-z0-9_.:-]{1,128}, not . or .."), WaitQuery),
    request_body = ToolCallRequest,
    responses(
        (status = 200, description = "The call ran (or was recorded before); result stored and streamed", body = ToolCallResponse),
        (status = 202, description = "The call waits for a human decision (see /v1/approvals)", body = PendingApprovalResponse),
        (status = 400, description = "Malformed JSON", content_type = "application/problem+json"),
        (status = 404, description = "Thread belongs to another owner", content_type = "application/problem+json"),
        (status = 409, description = "Nothing runs. `code` `CALL_CONFLICT`: the call id is recorded in the thread with another tool, arguments, sub-workspace or dry_run, or declared by an assistant message with another tool or arguments (`errors[0].field` says what differs); `OTHER_PARENT`: declared by another message than its `parent_message_id`; `RUN_CLOSED`: a new call under a `run_id` that was rolled back; `IN_PROGRESS`: running in another process, or its result waits for the database (post it again later); `THREAD_CLOSING`: the thread is being deleted (a read-only tool may have run first; nothing is stored)", content_type = "application/problem+json"),
        (status = 413, description = "Body too large", content_type = "application/problem+json"),
        (status = 429, description = "Too many concurrent calls (see Retry-After)", content_type = "application/problem+json"),
        (status = 422, description = "Invalid call envelope (errors name the JSON pointer), unknown tool or invalid arguments (these carry `tool_error` and `tool_response`)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn post_tool_call(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiQuery(q): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    let wait = q.wait()?;
    let call = match calls::parse(&body) {
        Ok(call) => call,
        Err(e) => recorded_as_raw(&state, &user, &thread, &body)
            .await
            .ok_or_else(|| parse_error_to_api(e))?,
    };
    check_owner(&state, &user, &thread).await?;
    check_parent(&state, &thread.0, &call, "").await?;
    // A call recorded already runs nothing when posted again (its outcome
    // is answered, or waited for): it needs no slot, so a retry after a
    // lost answer is not refused while the owner's other calls run.
    let permit = match state.acquire(&user.owner, 1) {
        Ok(permit) => Some(permit),
        Err(limit) => match state.store.tool_call(&thread.0, &call.id).await? {
            Some(_) => None,
            None => return Err(limit),
        },
    };
    let mut request = CallRequest::new(&user.owner, &thread.0, call);
    // Held by the task, and let go by the pipeline once the call turns out
    // to be one already running, whose outcome it only waits for.
    request.slot = SharedSlot::new(permit);
    let slot = request.slot.clone();
    let engine = state.engine.clone();
    let outcome = spawned(&state, None, async move {
        let outcome = engine.execute(request).await;
        slot.release();
        outcome
    })
    .await?
    .map_err(rejection_to_api)?;
    executed_response(&state, &thread.0, outcome, wait).await
}

/// A call whose arguments text is no JSON object's, as an assistant message
/// declared it and the thread recorded it (`{"_raw": "<the text>"}`, its
/// refusal recorded with the message): posted again, it answers as
/// recorded, as any declared call refused before it runs. `None` for any
/// other (its `422` stands, storing nothing).
pub(super) async fn recorded_as_raw(
    state: &AppState,
    user: &AuthUser,
    thread: &ThreadId,
    body: &Value,
) -> Option<crate::protocol::calls::IncomingCall> {
    let (call, Some(_)) = calls::parse_declared(body).ok()? else {
        return None;
    };
    check_owner(state, user, thread).await.ok()?;
    let record = state.store.tool_call(&thread.0, &call.id).await.ok()??;
    crate::protocol::json::same_json(&record.args, &call.arguments).then_some(call)
}

/// A call's `parent_message_id` names the assistant message that made it;
/// naming a message of another role is refused (`at`: the call's place in
/// the request body), since a stock AG-UI client would warn and show the
/// call in a message of its own. A parent no message has yet is taken: a
/// chat backend may record the assistant message after its calls.
pub async fn check_parent(
    state: &AppState,
    thread_id: &str,
    call: &calls::IncomingCall,
    at: &str,
) -> Result<(), ApiError> {
    let Some(parent) = call.parent_message_id.as_deref() else {
        return Ok(());
    };
    match state.store.message(thread_id, parent).await? {
        Some(m) if m.role != Role::Assistant => Err(ApiError::invalid_body(
            format!("{at}/parent_message_id"),
            format!(
                "{parent:?} is a {} message of this thread: a call's parent is the assistant \
                 message that made it; give that message's id, or leave parent_message_id out",
                m.role.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

/// Run engine work in its own task, holding one of the owner's call slots
/// until it ends: a client that disconnects does not cut a call half-way,
/// and its result is still stored and streamed.
///
/// Not an `async fn`: the task is spawned before the first `.await`, so the
/// handler's future holds a join handle, not the (several KiB) pipeline
/// future, and axum and hyper move a small future around. The task's future
/// is boxed for the same reason: tokio keeps a task's future inline in the
/// task and copies it whole as it spawns it and as the task finishes and
/// hands over its output; boxed, those copies are a pointer's.
fn with_slot<T, F>(
    state: &AppState,
    user: &AuthUser,
    work: F,
) -> impl std::future::Future<Output = Result<T, ApiError>> + use<T, F>
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    let task = state
        .acquire(&user.owner, 1)
        .map(|permit| spawned(state, Some(permit), work));
    async move { task?.await }
}

/// [`with_slot`] with the slot taken already (or none needed).
fn spawned<T, F>(
    state: &AppState,
    permit: Option<crate::engine::limits::Permit>,
    work: F,
) -> impl std::future::Future<Output = Result<T, ApiError>> + use<T, F>
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    let task = state.calls.spawn(Box::pin(
        async move {
            let result = work.await;
            drop(permit);
            result
        }
        .in_current_span(),
    ));
    async move {
        task.await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("pipeline task failed: {e}")))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Seconds (0–300) to wait for a call that needs approval to be decided
    /// and finished before answering 202.
    #[param(maximum = 300)]
    pub wait: Option<u64>,
}

impl WaitQuery {
    fn wait(&self) -> Result<std::time::Duration, ApiError> {
        match self.wait {
            None => Ok(std::time::Duration::ZERO),
            Some(s) if s <= 300 => Ok(std::time::Duration::from_secs(s)),
            Some(s) => Err(ApiError::invalid_param(
                "wait",
                format!("must be between 0 and 300 seconds, got {s}"),
            )),
        }
    }
}

/// A call waiting for a human decision.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PendingApprovalResponse {
    /// Always `pending_approval`.
    pub status: String,
    pub tool_call_id: String,
    pub approval: super::approvals::ApprovalView,
}

/// 200 with the outcome, or 202 while the call waits for approval (after
/// waiting up to `wait` for the decision and the result).
pub async fn executed_response(
    state: &AppState,
    thread_id: &str,
    executed: Executed,
    wait: std::time::Duration,
) -> Result<Response, ApiError> {
    match executed {
        Executed::Finished(outcome) => {
            Ok((StatusCode::OK, axum::Json(ToolCallResponse::from(outcome))).into_response())
        }
        Executed::AwaitingApproval(approval) => {
            if !wait.is_zero()
                && let Some(mut outcome) = state
                    .engine
                    .wait_finished(thread_id, &approval.tool_call_id, wait)
                    .await?
            {
                // The call ran while this request waited for its decision:
                // read back from the store, but not a replay.
                outcome.replayed = false;
                return Ok(
                    (StatusCode::OK, axum::Json(ToolCallResponse::from(outcome))).into_response(),
                );
            }
            let current = state
                .store
                .approval(&approval.id)
                .await?
                .unwrap_or(approval);
            let body = PendingApprovalResponse {
                status: "pending_approval".into(),
                tool_call_id: current.tool_call_id.clone(),
                approval: super::approvals::ApprovalView::at(current, crate::protocol::now_ms()),
            };
            Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
    System,
    /// OpenAI's and AG-UI's `developer`: kept as such, given to an
    /// Anthropic context as system text.
    Developer,
}

/// A conversation message to record.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "msg_a1", "role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "call_1", "name": "echo", "arguments": {"text": "hi"}}]}))]
pub struct NewMessageRequest {
    /// The message's id in the thread: send your own, so that a message
    /// posted again (a retry after a lost answer) is recognised and
    /// answered `200` with `replayed: true` instead of stored twice.
    /// Generated when absent.
    #[schema(value_type = Option<calls::Id>)]
    pub id: Option<String>,
    pub role: MessageRole,
    /// Absent or `null`: empty (OpenAI sends `null` beside `tool_calls`).
    #[serde(default)]
    pub content: Option<String>,
    /// Assistant only: the calls the model made, in any accepted shape.
    #[schema(value_type = Option<Vec<calls::DeclaredToolCall>>)]
    pub tool_calls: Option<Vec<Value>>,
    /// Assistant only: Anthropic extended-thinking blocks of the turn, as
    /// the model returned them (signatures included). Kept with the
    /// message, and given back first in the turn's content by
    /// `/context?format=anthropic`, which the API requires of the turn a
    /// tool loop continues from; the OpenAI format leaves them out.
    pub thinking: Option<Vec<ThinkingBlock>>,
}

/// An Anthropic extended-thinking block of an assistant turn.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ThinkingBlock {
    /// The model's thinking, and the signature the API checks when the
    /// block is sent back.
    Thinking {
        thinking: String,
        #[schema(min_length = 1)]
        signature: String,
    },
    /// Thinking the API gave encrypted.
    RedactedThinking {
        #[schema(min_length = 1)]
        data: String,
    },
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageCreated {
    pub id: String,
    pub seq: i64,
    /// True when this id was recorded before with the same message: a
    /// repeated post answers `200` with the stored position and records
    /// nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// Record a user, assistant, system or developer message.
///
/// Streams TEXT_MESSAGE_START / TEXT_MESSAGE_CONTENT / TEXT_MESSAGE_END to
/// the thread's subscribers. Assistant messages may carry the model's
/// `tool_calls` so `/context` can rebuild the conversation.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/messages", tag = "messages",
    params(("thread_id" = String, Path,)),
    request_body = NewMessageRequest,
    responses(
        (status = 201, description = "Recorded", body = MessageCreated),
        (status = 200, description = "The same message was recorded under this id before: nothing new is recorded", body = MessageCreated),
        (status = 400, description = "Malformed request", content_type = "application/problem+json"),
        (status = 404, description = "Thread belongs to another owner", content_type = "application/problem+json"),
        (status = 409, description = "Message id already recorded with another role, content, tool_calls or thinking, or a call id of tool_calls already declared or recorded in the thread with another tool or arguments; `THREAD_CLOSING`: the thread is being deleted", content_type = "application/problem+json"),
        (status = 422, description = "Wrong field types, an invalid id, tool_calls or thinking on a message that is not the assistant's, more tool_calls than tools.max_batch_calls, or a call's tool name outside [A-Za-z0-9_.-]{1,64} (errors name the JSON pointer)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn post_message(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiJson(body): ApiJson<NewMessageRequest>,
) -> Result<Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    // Only a caller's own id can be posted twice (a generated one is new).
    let chosen_id = body.id.is_some();
    let id = match body.id {
        Some(id) if calls::valid_id(&id) => id,
        Some(_) => {
            return Err(ApiError::invalid_body(
                "/id".into(),
                calls::INVALID_ID.into(),
            ));
        }
        None => format!("msg_{}", uuid::Uuid::now_v7().simple()),
    };
    let mut metadata = Map::new();
    // Declared calls that can never run as declared, with their refusal.
    let mut refused = Vec::new();
    if let Some(tool_calls) = &body.tool_calls {
        if body.role != MessageRole::Assistant {
            return Err(ApiError::invalid_body(
                "/tool_calls".into(),
                "only assistant messages carry tool_calls".into(),
            ));
        }
        // As many as one batch or run executes: each declared call is
        // rebuilt into every model context of the thread.
        let max = state.settings.tools.max_batch_calls;
        if tool_calls.len() > max {
            return Err(ApiError::unprocessable_at(
                "Too many tool calls",
                "/tool_calls".into(),
                format!(
                    "the message declares {} tool calls; a message declares at most {max} (tools.max_batch_calls)",
                    tool_calls.len()
                ),
            ));
        }
        let mut parsed = Vec::with_capacity(tool_calls.len());
        let mut ids = std::collections::HashSet::with_capacity(tool_calls.len());
        for (i, raw) in tool_calls.iter().enumerate() {
            let (call, text_error) = calls::parse_declared(raw).map_err(|e| {
                ApiError::invalid_body(format!("/tool_calls/{i}{}", e.pointer), e.message)
            })?;
            // A declaration records what the model asked for; how a call is
            // run is said when it is posted. Were these kept silently, a
            // call declared as a dry run could be posted and run for real.
            if let Some(field) = calls::COMMON_FIELDS
                .iter()
                .find(|f| raw.as_object().is_some_and(|o| o.contains_key(**f)))
            {
                return Err(ApiError::invalid_body(
                    format!("/tool_calls/{i}/{field}"),
                    format!(
                        "a declared call does not take {field}: give it when the call is \
                         posted to /tool-calls"
                    ),
                ));
            }
            // A name no tool can have (nor a vendor's function) would make
            // the thread's context one no model API accepts.
            if !crate::tools::registry::valid_tool_name(&call.name) {
                let at = match call.shape {
                    calls::CallShape::Openai => "function/name",
                    _ => "name",
                };
                return Err(ApiError::invalid_body(
                    format!("/tool_calls/{i}/{at}"),
                    format!(
                        "{:?} is not a tool name: it must match [A-Za-z0-9_.-]{{1,64}}",
                        call.name
                    ),
                ));
            }
            // Each result answers one call by its id: both vendors refuse
            // a turn that declares an id twice.
            if !ids.insert(call.id.clone()) {
                return Err(ApiError::invalid_body(
                    format!("/tool_calls/{i}/id"),
                    format!(
                        "{:?} is already the id of another call of this message",
                        call.id
                    ),
                ));
            }
            parsed.push(json!({"id": call.id, "name": call.name, "arguments": call.arguments}));
            // The refusal it gets wherever it is posted, recorded once the
            // message is (see `refuse_declared`).
            if let Some(error) = declared_refusal(&state, &call, text_error.as_ref()) {
                refused.push((call, error));
            }
        }
        metadata.insert("tool_calls".into(), Value::Array(parsed));
    }
    if let Some(thinking) = &body.thinking {
        if body.role != MessageRole::Assistant {
            return Err(ApiError::invalid_body(
                "/thinking".into(),
                "only assistant messages carry thinking blocks".into(),
            ));
        }
        // A block the API could not have returned is refused when sent
        // back: refused here, where the backend can tell which.
        for (i, block) in thinking.iter().enumerate() {
            let (field, value) = match block {
                ThinkingBlock::Thinking { signature, .. } => ("signature", signature),
                ThinkingBlock::RedactedThinking { data } => ("data", data),
            };
            if value.is_empty() {
                return Err(ApiError::invalid_body(
                    format!("/thinking/{i}/{field}"),
                    format!("is empty: give the block's {field} as the API returned it"),
                ));
            }
        }
        if !thinking.is_empty() {
            metadata.insert("thinking".into(), json!(thinking));
        }
    }
    check_owner(&state, &user, &thread).await?;
    if let Some(Value::Array(declared)) = metadata.get("tool_calls") {
        let declared = declared
            .iter()
            .enumerate()
            .map(|(j, call)| (format!("/tool_calls/{j}/id"), call, id.as_str()));
        refuse_redeclared_calls(&state, &thread.0, declared).await?;
    }
    let content = body.content.unwrap_or_default();
    let role = match body.role {
        MessageRole::User => Role::User,
        MessageRole::Assistant => Role::Assistant,
        MessageRole::System => Role::System,
        MessageRole::Developer => Role::Developer,
    };
    // One moment for the message and its events, as every view shows it.
    let created_at_ms = now_ms();
    let mut events = Event::text_message(&id, role.as_str(), &content);
    for event in &mut events {
        event.timestamp = created_at_ms;
    }
    let declares = match metadata.get("tool_calls") {
        Some(Value::Array(calls)) => declared(&state, calls),
        _ => Vec::new(),
    };
    let declares_calls = !declares.is_empty();
    let metadata = Value::Object(metadata);
    // What a repeated post must match to be the same message.
    let posted = chosen_id.then(|| (content.clone(), metadata.clone()));
    let unit = WriteUnit {
        thread_id: thread.0.clone(),
        owner: user.owner.clone(),
        ops: vec![
            WriteOp::InsertMessage(NewMessage {
                id: id.clone(),
                role,
                content,
                metadata: metadata.into(),
                tool_call_id: None,
                created_at_ms,
                declares,
            }),
            WriteOp::AppendEvents(events.iter().map(crate::engine::new_event).collect()),
        ],
    };
    let receipt = match state.writer.write(unit).await {
        Ok(receipt) => {
            if declares_calls {
                state.engine.declarations_recorded(&thread.0);
            }
            receipt
        }
        Err(crate::store::StoreError::Conflict(what)) => {
            // The same message posted again (a retry after a timeout, say)
            // answers as the first post did, and records nothing more.
            let stored = state.store.message(&thread.0, &id).await?;
            return match (stored, posted) {
                // Not the id: what the store refused (a call's parent, say).
                (None, _) => Err(ApiError::conflict_coded_at(
                    conflicts::MESSAGE_CONFLICT,
                    "/id".into(),
                    what,
                )),
                (Some(m), Some((content, metadata)))
                    if m.role == role
                        && m.content == content
                        && crate::protocol::json::same_json(&m.metadata, &metadata) =>
                {
                    // Those a first post could not record (an outage), now.
                    refuse_declared(&state, &user.owner, &thread.0, refused).await;
                    let body = MessageCreated {
                        id,
                        seq: m.seq,
                        replayed: true,
                    };
                    Ok((StatusCode::OK, axum::Json(body)).into_response())
                }
                _ => Err(ApiError::conflict_coded_at(
                    conflicts::MESSAGE_CONFLICT,
                    "/id".into(),
                    format!(
                        "message {id:?} is already recorded in this thread with another role, content, tool_calls or thinking; use a new id for a new message"
                    ),
                )),
            };
        }
        Err(other) => return Err(other.into()),
    };
    refuse_declared(&state, &user.owner, &thread.0, refused).await;
    let seq = receipt.messages.first().map(|m| m.1).unwrap_or_default();
    let body = MessageCreated {
        id,
        seq,
        replayed: false,
    };
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// Record the refusal of each declared call that can never run as declared
/// (a tool the registry lacks, arguments that do not match its schema or
/// are no JSON object's text) as the call's failed result, as posting it
/// would: the model reads what was wrong in its context whichever came
/// first, the message or the call (which, posted before the message
/// declared it, was answered 422 and left nothing). A call recorded
/// meanwhile keeps its record. Done after the message is stored: one that
/// fails here (an outage) is recorded when the call is posted, or when the
/// message is posted again.
pub(super) async fn refuse_declared(
    state: &AppState,
    owner: &str,
    thread_id: &str,
    refused: Vec<(crate::protocol::calls::IncomingCall, ToolError)>,
) {
    for (call, error) in refused {
        let id = call.id.clone();
        let req = CallRequest::new(owner, thread_id, call);
        if let Err(e) = state.engine.record_rejected_call(req, error).await {
            tracing::debug!(tool_call_id = %id, error = %e, "a declared call's refusal was not recorded");
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Page size, 1–200 (default 50). A page ends early once its messages
    /// hold 4 MiB of stored text (at least one message): page on while
    /// `next_cursor` comes.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// Cursor from the previous page's `next_cursor`: returns older messages.
    #[param(pattern = "^0*[1-9][0-9]{0,17}$")]
    pub before: Option<String>,
}

/// A message as history replays it. Tool messages carry the compiled
/// `ui_schema`, identical to the one the live stream carried.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryMessage {
    pub id: String,
    pub seq: i64,
    /// `user`, `assistant`, `system`, `developer` or `tool`.
    #[schema(pattern = "^(user|assistant|system|developer|tool)$")]
    pub role: String,
    pub content: String,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Value>,
    /// A result of the application's own tool (sent to an AG-UI run):
    /// why the tool failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A message an AG-UI run recorded with media (images, audio, video,
    /// documents): its content parts as sent. `content` holds its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub content_parts: Option<Value>,
    /// An assistant message's extended-thinking blocks, as posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<ThinkingBlock>>)]
    pub thinking: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A tool message's ToolAgentOutput (without the internal ui_hints).
    #[schema(value_type = Option<crate::protocol::tool_output::ToolAgentOutput>)]
    pub tool_agent_output: Option<PublicOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = ui_schema_ref)]
    pub ui_schema: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryPage {
    /// Oldest first within the page.
    pub messages: Vec<HistoryMessage>,
    /// Pass as `before` to get the next page back (older messages); absent on the last page (the oldest messages of the thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The stored ToolAgentOutput of a tool message, if it has one.
pub fn stored_output(m: &StoredMessage) -> Option<crate::protocol::tool_output::ToolAgentOutput> {
    crate::protocol::tool_output::ToolAgentOutput::deserialize(m.metadata.get("tool_agent_output")?)
        .ok()
}

pub fn history_message(m: StoredMessage) -> HistoryMessage {
    let output = stored_output(&m);
    HistoryMessage {
        ui_schema: output.as_ref().and_then(crate::engine::compile_ui),
        tool_agent_output: output.map(PublicOutput),
        tool_calls: m.metadata.get("tool_calls").cloned(),
        error: context::frontend_error(&m).map(str::to_string),
        content_parts: m.metadata.get(crate::protocol::parts::KEY).cloned(),
        thinking: m.metadata.get("thinking").cloned(),
        id: m.id,
        seq: m.seq,
        role: m.role.as_str().into(),
        content: m.content,
        created_at_ms: m.created_at_ms,
        tool_call_id: m.tool_call_id,
    }
}

/// Page through a thread's messages, newest page first.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/history", tag = "history",
    params(("thread_id" = String, Path,), HistoryQuery),
    responses(
        (status = 200, body = HistoryPage),
        (status = 400, description = "Bad limit or cursor", content_type = "application/problem+json"),
        (status = 404, description = "No such thread for this owner", content_type = "application/problem+json"),
        (status = 429, description = "This owner is reading server.max_page_reads_per_owner pages already and none came free within server.page_read_wait_secs (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_history(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    let limit = super::page_limit(q.limit, 50, 200)?;
    let before = super::positive_cursor(q.before.as_deref())?;
    require_thread(&state, &user, &thread).await?;
    // Held until the page is serialized into the response.
    let _page = state.enter_page_read(&user.owner).await?;
    let messages = state
        .store
        .messages_before(&thread.0, before, limit)
        .await?;
    let next_cursor = messages
        .first()
        .filter(|m| m.seq > 1)
        .map(|m| m.seq.to_string());
    Ok(axum::Json(HistoryPage {
        messages: messages.into_iter().map(history_message).collect(),
        next_cursor,
    })
    .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ThreadsQuery {
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// Cursor from the previous page's `next_cursor`: returns older threads.
    #[param(pattern = r"^0*[0-9]{1,18}:(?!\.{1,2}$)[A-Za-z0-9_.:-]{1,128}$")]
    pub before: Option<String>,
}

/// One of the caller's threads.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ThreadSummary {
    #[schema(value_type = calls::Id)]
    pub id: String,
    /// When the thread was created (its first write or subscription), ms
    /// since the Unix epoch.
    pub created_at_ms: i64,
    /// How many messages the thread holds (`/history` pages through them).
    pub messages: i64,
    /// The id of the thread's last event (0 before the first):
    /// `GET /events?after=` this value streams only what comes next.
    pub last_event_id: i64,
    /// When the last message was stored; absent while there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_at_ms: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ThreadsPage {
    /// Newest first (by creation).
    pub threads: Vec<ThreadSummary>,
    /// Pass as `before` to get the next (older) page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List the caller's threads.
///
/// Every thread the token's owner has created (by a first tool call,
/// message, run or subscription), newest first, a page at a time: its
/// id, when it was created, how many messages it holds, its last event id
/// (to resume its stream) and when its last message was stored. Other
/// owners' threads are never listed.
#[utoipa::path(get, path = "/v1/threads", tag = "history",
    params(ThreadsQuery),
    responses(
        (status = 200, body = ThreadsPage),
        (status = 400, description = "Bad limit or cursor", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list_threads(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(q): ApiQuery<ThreadsQuery>,
) -> Result<axum::Json<ThreadsPage>, ApiError> {
    let limit = super::page_limit(q.limit, 50, 200)?;
    let before = super::time_cursor(q.before.as_deref())?;
    // One more than the page: whether an older page exists.
    let mut found = state
        .store
        .threads_of(&user.owner, before, limit + 1)
        .await?;
    let next_cursor = super::next_time_cursor(&mut found, limit, |t| (t.created_at_ms, &t.id));
    Ok(axum::Json(ThreadsPage {
        threads: found
            .into_iter()
            .map(|t| ThreadSummary {
                id: t.id,
                created_at_ms: t.created_at_ms,
                messages: t.messages,
                last_event_id: t.last_event_seq,
                last_message_at_ms: t.last_message_at_ms,
            })
            .collect(),
        next_cursor,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// `true`: close the thread to new calls and messages, cancel its
    /// running calls and withdraw those waiting for approval, then delete
    /// it. Default `false`: a busy thread is left as it is (`409`).
    pub cancel: Option<bool>,
    /// With `cancel=true`: seconds (0–60, default 10) to wait for calls
    /// running in another toolgate process to finish before answering
    /// `409` `THREAD_BUSY`. This process's calls are stopped and waited
    /// for (up to 5 s) whatever it is.
    #[param(maximum = 60)]
    pub wait: Option<u64>,
}

impl DeleteQuery {
    /// How long a cancelling deletion waits for the calls to stop; `None`
    /// when it does not cancel.
    fn cancel_within(&self) -> Result<Option<Duration>, ApiError> {
        let wait = match self.wait {
            None => DELETE_WAIT,
            Some(s) if s <= 60 => Duration::from_secs(s),
            Some(s) => {
                return Err(ApiError::invalid_param(
                    "wait",
                    format!("must be between 0 and 60 seconds, got {s}"),
                ));
            }
        };
        match self.cancel {
            Some(true) => Ok(Some(wait)),
            _ if self.wait.is_some() => Err(ApiError::invalid_param(
                "wait",
                "only with cancel=true: a deletion without it does not wait".to_string(),
            )),
            _ => Ok(None),
        }
    }
}

/// How long `DELETE …?cancel=true` waits for the calls to stop by default.
const DELETE_WAIT: Duration = Duration::from_secs(10);

/// The reason of an approval withdrawn by its thread's deletion.
const WITHDRAWN_BY_DELETION: &str = "withdrawn: its owner deleted the thread";

/// Delete a thread.
///
/// Removes everything the thread holds: its messages, events, tool calls
/// (their records and results) and approvals, in one
/// transaction, and answers `204` once that has committed. Its live
/// streams end with `RUN_ERROR` (`code` `THREAD_DELETED`). The thread's
/// id stays its owner's and is never used again: every later request on
/// it answers `410` (`code` `THREAD_DELETED`), so a call posted again
/// under it (a retry of an old one) is refused rather than run a second
/// time. Deleting it again answers `204` too. The audit log keeps its
/// entries (they hold no arguments, outputs or messages) and gains one,
/// `thread.deleted`, counting what went. Files the thread's calls wrote
/// stay in the owner's workspace, and so do the earlier contents
/// `undo_edit` keeps for them.
///
/// A thread with calls still running or waiting for a person's approval
/// is not deleted: `409` (`code` `THREAD_BUSY`) lists them in `errors`;
/// cancel them or decide their approvals, then delete it again. With
/// `cancel=true` the deletion does that itself: it first closes the
/// thread, which from then on takes no new call or message (`409`
/// `THREAD_CLOSING`), so a stream of new calls cannot keep it alive; then
/// it cancels the calls running in this process and withdraws those
/// waiting for approval (denied, reason "withdrawn: its owner deleted the
/// thread"), and deletes the thread once none is left. A closed thread
/// starts no approved call either: an approval given after the close
/// answers `409` `THREAD_CLOSING`. A call running in another toolgate
/// process is waited for. Still busy after `wait` seconds, it answers
/// `409` `THREAD_BUSY`; the thread stays closed, and a DELETE again
/// finishes the deletion.
#[utoipa::path(delete, path = "/v1/threads/{thread_id}", tag = "history",
    params(("thread_id" = String, Path,), DeleteQuery),
    responses(
        (status = 204, description = "Deleted (now, or before)"),
        (status = 400, description = "`wait` out of range, or given without `cancel=true`", content_type = "application/problem+json"),
        (status = 404, description = "No such thread for this owner", content_type = "application/problem+json"),
        (status = 409, description = "Calls still running or waiting for approval (`THREAD_BUSY`, listed in `errors`); with `cancel=true`, still so after `wait` seconds (the thread stays closed to new calls)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn delete_thread(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
    _: NoBody,
) -> Result<StatusCode, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    let cancel_within = q.cancel_within()?;
    match require_thread(&state, &user, &thread).await {
        Err(ApiError::ThreadDeleted { .. }) => return Ok(StatusCode::NO_CONTENT),
        checked => checked?,
    }
    let deleted = match cancel_within {
        None => delete_now(&state, &user.owner, &thread.0).await,
        Some(within) => delete_cancelling(&state, &user.owner, &thread.0, within).await,
    };
    let at_ms = match deleted {
        Ok(at_ms) => at_ms,
        // Deleted by another request meanwhile.
        Err(crate::store::StoreError::ThreadDeleted { at_ms, .. }) => at_ms,
        Err(e) => {
            let mut e = ApiError::from(e);
            if let (
                Some(within),
                ApiError::ConflictAt {
                    code: conflicts::THREAD_BUSY,
                    detail,
                    ..
                },
            ) = (cancel_within, &mut e)
            {
                *detail = format!(
                    "the thread still has calls running or waiting for approval after {} s \
                     (listed in errors): those running in this process were cancelled and \
                     those waiting withdrawn, and a call running in another toolgate process \
                     finishes there. The thread stays closed to new calls and messages; a \
                     DELETE again finishes its deletion",
                    within.as_secs(),
                );
            }
            return Err(e);
        }
    };
    state.thread_owners.deleted(&thread.0, at_ms);
    state.bus.deleted(&thread.0, at_ms);
    state.replay_cache.forget(&thread.0);
    // A long thread's rows are removed after it is gone.
    state.purger.purge(&thread.0);
    tracing::info!(thread = %thread.0, owner = %user.owner, "thread deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Delete the thread if nothing in it is running or waiting; when it was
/// deleted.
async fn delete_now(
    state: &AppState,
    owner: &str,
    thread_id: &str,
) -> Result<i64, crate::store::StoreError> {
    let at_ms = now_ms();
    let unit = WriteUnit {
        thread_id: thread_id.to_string(),
        owner: owner.to_string(),
        ops: vec![WriteOp::DeleteThread {
            deleted_at_ms: at_ms,
        }],
    };
    state.writer.write(unit).await.map(|_| at_ms)
}

/// Close the thread, stop what runs or waits in it, and delete it; when it
/// was deleted. Calls of another process are waited for at most `within`;
/// this process's are stopped and waited for whatever `within` is (up to
/// [`STOPPING_HERE`]).
async fn delete_cancelling(
    state: &AppState,
    owner: &str,
    thread_id: &str,
    within: Duration,
) -> Result<i64, crate::store::StoreError> {
    use crate::store::StoreError;
    let started = tokio::time::Instant::now();
    let mut deadline = started + within;
    let close = WriteUnit {
        thread_id: thread_id.to_string(),
        owner: owner.to_string(),
        ops: vec![WriteOp::CloseThread {
            closing_at_ms: now_ms(),
        }],
    };
    state.writer.write(close).await?;
    let mut stopped_once = false;
    loop {
        let calls = match delete_now(state, owner, thread_id).await {
            Err(StoreError::ThreadBusy { calls }) => calls,
            deleted => return deleted,
        };
        if stopped_once && tokio::time::Instant::now() >= deadline {
            return Err(StoreError::ThreadBusy { calls });
        }
        stopped_once = true;
        if stop_calls(state, owner, thread_id, &calls).await {
            deadline = deadline.max(started + STOPPING_HERE);
        }
        // What runs elsewhere (another process, a result on its way to the
        // database) is given a moment before the next look.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        tokio::time::sleep(left.min(Duration::from_millis(50))).await;
    }
}

/// How long a cancelling deletion waits at most for the calls it stops in
/// this process to finish (a tool gets two seconds to stop on its own
/// before it is aborted), whatever its `wait`.
const STOPPING_HERE: Duration = Duration::from_secs(5);

/// Cancel the running `calls` of this process and withdraw those waiting
/// for approval; whether any of them was this process's to stop.
async fn stop_calls(
    state: &AppState,
    owner: &str,
    thread_id: &str,
    calls: &[(String, CallStatus)],
) -> bool {
    let stops = calls.iter().map(|(id, status)| async move {
        let here = match status {
            CallStatus::PendingApproval => state
                .engine
                .withdraw(owner, thread_id, id, WITHDRAWN_BY_DELETION)
                .await
                .map(|withdrawn| withdrawn.is_some())
                .map_err(|e| e.to_string()),
            _ => state
                .engine
                .cancel(thread_id, id, CANCEL_ANSWER_WAIT)
                .await
                .map(|cancelled| cancelled.is_some())
                .map_err(|e| e.to_string()),
        };
        here.unwrap_or_else(|error| {
            tracing::debug!(call = %id, %error, "a call of a thread being deleted was not stopped");
            false
        })
    });
    futures::future::join_all(stops)
        .await
        .into_iter()
        .any(|here| here)
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContextFormat {
    Openai,
    Anthropic,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ContextQuery {
    /// `openai` (default) or `anthropic`.
    #[param(inline)]
    pub format: Option<ContextFormat>,
}

/// Rebuild the model context in a vendor's message shape.
///
/// OpenAI: `{"messages": [...]}` with `tool_calls` and `role: tool`
/// messages. Anthropic: `{"system": "...", "messages": [...]}` with
/// `tool_use` / `tool_result` blocks and same-role turns merged. Every
/// assistant turn that calls tools is followed at once by one result per
/// call: a result recorded elsewhere in the thread is moved there, and a
/// call with no result yet (waiting for approval, still running, never
/// posted) gets a stand-in result `{"status": "no_result", "message": …}`
/// saying so. Results of calls that no assistant message of the thread
/// declares (posted straight to `/tool-calls`) get an assistant turn asking
/// for them, rebuilt from their outputs, so every result follows a turn
/// that asked for it.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/context", tag = "history",
    params(("thread_id" = String, Path,), ContextQuery),
    responses(
        (status = 200, description = "The conversation in the vendor's shape", body = Object),
        (status = 400, description = "Unknown format", content_type = "application/problem+json"),
        (status = 404, description = "No such thread for this owner", content_type = "application/problem+json"),
        (status = 429, description = "Too many contexts and snapshots being read at once (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_context(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiQuery(q): ApiQuery<ContextQuery>,
) -> Result<axum::response::Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    require_thread(&state, &user, &thread).await?;
    // Held until the answer is serialized: the thread is in memory till then.
    let _read = state.enter_thread_read(&user.owner).await?;
    let mut messages = state.store.conversation(&thread.0).await?;
    // The records of the declared calls without a result. A call whose
    // approval passed its deadline gets its APPROVAL_EXPIRED result now, as
    // the sweeper would moments later, and the context holds that result
    // (read again) rather than a wait for a decision nobody can make.
    let mut records = HashMap::new();
    let mut settled = false;
    for declared in context::unanswered_calls(&messages) {
        if let Some(record) = state.store.tool_call(&thread.0, declared.id).await? {
            let record = state.engine.settled(record).await?;
            settled |= record.status.is_finished();
            records.insert(declared.id.to_string(), record);
        }
    }
    if settled {
        messages = state.store.conversation(&thread.0).await?;
    }
    // What each declared call without a result is waiting for.
    let mut unanswered = context::Unanswered::new();
    // Per declaring message, its first call that waits for approval: the
    // calls after it were held back (they may depend on it).
    let mut waiting: HashMap<&str, &str> = HashMap::new();
    for declared in context::unanswered_calls(&messages) {
        let record = match records.remove(declared.id) {
            Some(record) => Some(record),
            None => state.store.tool_call(&thread.0, declared.id).await?,
        };
        let why = match record {
            Some(record) => match record.status {
                CallStatus::PendingApproval => {
                    waiting.entry(&declared.message.id).or_insert(declared.id);
                    "this call is waiting for a person's approval; its result is not available yet".into()
                }
                CallStatus::Running => {
                    "this call is still running; its result is not available yet".into()
                }
                // Finished, but its message is not in the thread (a call
                // finished by another process whose message is still being
                // written): nothing to show yet either.
                _ => "this call's result is not recorded in the conversation yet".into(),
            },
            // Held back first: a run leaves every call after the one
            // that waits, the application's own too, to the next run.
            None => match waiting.get(declared.message.id.as_str()) {
                Some(first) => format!(
                    "this call has not run: it comes after call {first:?}, which is waiting for a person's approval, and may depend on it"
                ),
                None if declared.call.get(context::FRONTEND) == Some(&Value::Bool(true)) => {
                    "this call is the application's own tool, which toolgate does not run; its result has not been sent yet".into()
                }
                None => context::NO_RESULT.into(),
            },
        };
        unanswered.insert(declared.id.to_string(), why);
    }
    // Calls posted under an assistant message that does not declare them
    // sit in its turn, as the snapshot shows them.
    let parents = state.store.call_parents(&thread.0).await?;
    context::adopt_parented_calls(&mut messages, &parents);
    context::keep_called_names(&mut messages, |name| canonical_name(&state, name));
    let context = match q.format.unwrap_or(ContextFormat::Openai) {
        ContextFormat::Openai => context::openai(&messages, &unanswered),
        ContextFormat::Anthropic => context::anthropic(&messages, &unanswered),
    };
    drop(messages);
    Ok(axum::response::IntoResponse::into_response(axum::Json(
        context,
    )))
}

/// The tool's own name for `name`: a tool named by an alias is the same
/// tool. A name no tool has stays as it is.
fn canonical_name(state: &AppState, name: &str) -> String {
    state.engine.registry().canonical_name(name)
}

/// What the store keeps of declarations (`{"id", "name", "arguments"}`):
/// the writer checks them again in the transaction that records them, so
/// two requests at once cannot both declare one id differently. Once they
/// are recorded, the engine is told ([`crate::engine::Engine::declarations_recorded`]).
pub(super) fn declared(state: &AppState, declarations: &[Value]) -> Vec<DeclaredCall> {
    declarations
        .iter()
        .filter_map(|call| {
            Some(DeclaredCall {
                id: call["id"].as_str()?.to_string(),
                tool_name: canonical_name(state, call["name"].as_str()?),
                args: call.get("arguments").unwrap_or(&Value::Null).into(),
            })
        })
        .collect()
}

/// New declarations (`{"id", "name", "arguments"}`, in order, each with
/// the pointer to its id in the request body) must not
/// give a call id another tool or other arguments than the thread already
/// has for it: in an assistant message of the thread (its first
/// declaration, looked up by id: the thread is not read whole, so a long
/// conversation's next turn costs what its first did), an earlier one of
/// `declared`, or the call recorded under that id (each read once per
/// id). Each result answers one call, so the context would pair it with a
/// call it does not answer. `409`, before anything is recorded.
pub(super) async fn refuse_redeclared_calls<'a>(
    state: &AppState,
    thread_id: &str,
    declared: impl Iterator<Item = (String, &'a Value, &'a str)>,
) -> Result<(), ApiError> {
    let canonical = |call: &Value| canonical_name(state, call["name"].as_str().unwrap_or_default());
    // Each id's first declaration (its tool's own name, its arguments),
    // and the message that made it: the thread's, looked up once per id,
    // or one of `declared`.
    let mut known: HashMap<&str, Option<(String, Value, String)>> = HashMap::new();
    // Each id's recorded call is read once, also for an id declared before
    // (the call may have been posted since).
    let mut looked_up = std::collections::HashSet::new();
    for (pointer, call, message) in declared {
        let Some(id) = call["id"].as_str() else {
            continue;
        };
        if !known.contains_key(id) {
            let by = state.store.call_declaration(thread_id, id).await?.by;
            known.insert(id, by.map(|d| (d.tool_name, d.args, d.message_id)));
        }
        // Whether this is the id's first declaration in the thread.
        let first_declaration = known.get(id).is_some_and(Option::is_none);
        match known.get(id).and_then(Option::as_ref) {
            Some((tool, args, _))
                if *tool != canonical(call) || !same_json_at(Some(args), call.get("arguments")) =>
            {
                return Err(ApiError::conflict_coded_at(
                    conflicts::CALL_CONFLICT,
                    pointer,
                    format!(
                        "tool call {id:?} is already declared in this thread with another tool or arguments; a new call needs an id of its own"
                    ),
                ));
            }
            Some((_, _, by)) if by != message => {
                return Err(ApiError::conflict_coded_at(
                    conflicts::OTHER_PARENT,
                    pointer,
                    crate::store::checks::declared_by_other(message, id, by),
                ));
            }
            Some(_) => {}
            None => {
                known.insert(
                    id,
                    Some((
                        canonical(call),
                        call.get("arguments").cloned().unwrap_or(Value::Null),
                        message.to_string(),
                    )),
                );
            }
        }
        if !looked_up.insert(id) {
            continue;
        }
        let Some(record) = state.store.tool_call(thread_id, id).await? else {
            continue;
        };
        if record.tool_name != canonical(call)
            || !same_json_at(call.get("arguments"), Some(&record.args))
        {
            return Err(ApiError::conflict_coded_at(
                conflicts::CALL_CONFLICT,
                pointer,
                format!(
                    "tool call {id:?} is already recorded in this thread with another tool or arguments; a new call needs an id of its own"
                ),
            ));
        }
        // A call posted under a parent is that message's: no other message
        // can declare it first (a later declaration only repeats it).
        if let Some(parent) = record.parent_message_id.as_deref()
            && first_declaration
            && parent != message
        {
            return Err(ApiError::conflict_coded_at(
                conflicts::OTHER_PARENT,
                pointer,
                crate::store::checks::posted_under_other_parent(message, id, parent),
            ));
        }
    }
    Ok(())
}

/// A recorded tool call: where it stands and, once finished, its outcome.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallView {
    #[schema(value_type = calls::Id)]
    pub id: String,
    pub tool_name: String,
    /// `pending_approval`, `running`, `success`, `failure` or `partial`.
    pub status: String,
    /// The run it belongs to (its own id when it was posted without one).
    pub run_id: String,
    /// The arguments it was called with.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The sub-workspace it works in; absent: the owner's main one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<calls::WorkspaceName>)]
    pub workspace: Option<String>,
    /// Whether it is a dry run; absent for calls recorded before this was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// The approval it waits for (status `pending_approval`), or waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The call it undoes, when it is an undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_of: Option<String>,
    /// The call that undid it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone_by: Option<String>,
    /// The message its `TOOL_CALL_START` named as its parent: the assistant
    /// message that declares it, or the `parent_message_id` it was posted
    /// with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_message_id: Option<String>,
    /// Once finished, what `POST …/undo` would do now: `available`,
    /// `undone`, `irreversible` (only by hand) or `none` (nothing to undo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<String>,
    /// Once finished: the outcome, as the call's own request answered it
    /// (`replayed` is true: nothing ran for this read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ToolCallResponse>,
}

/// One tool call of the thread.
///
/// Where a recorded call stands (waiting for approval, running, finished)
/// and, once finished, its outcome: the same `tool_agent_output`,
/// `tool_response` and `ui_schema` its own request answered with. Reading
/// it runs nothing, and needs neither the call's arguments nor its shape:
/// a chat backend whose request timed out can look the call up by id.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/tool-calls/{tool_call_id}", tag = "tool calls",
    params(("thread_id" = String, Path,), ("tool_call_id" = String, Path,)),
    responses(
        (status = 200, body = ToolCallView),
        (status = 404, description = "No such call in this thread, or the thread is not the caller's", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_tool_call(
    State(state): State<AppState>,
    user: AuthUser,
    Path((thread_id, tool_call_id)): Path<(String, String)>,
) -> Result<axum::Json<ToolCallView>, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    super::check_path_id("tool_call_id", &tool_call_id)?;
    require_thread(&state, &user, &thread).await?;
    let record = state
        .store
        .tool_call(&thread.0, &tool_call_id)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!("no tool call {tool_call_id:?} in this thread"))
        })?;
    // Past its approval's deadline, it is shown expired, as the approval is.
    let record = state.engine.settled(record).await?;
    let approval_id = state
        .store
        .approval_of_call(&thread.0, &tool_call_id)
        .await?
        .map(|a| a.id);
    let outcome = match record.status.is_finished() {
        true => Some(crate::engine::outcome_from_record(&record)?.into()),
        false => None,
    };
    let undo = state.engine.undo_state(&record).await?;
    Ok(axum::Json(ToolCallView {
        undo: undo.map(str::to_string),
        status: record.status.as_str().to_string(),
        id: record.id,
        tool_name: record.tool_name,
        run_id: record.run_id,
        arguments: record.args,
        workspace: record.workspace,
        dry_run: record.dry_run,
        created_at_ms: record.created_at_ms,
        finished_at_ms: record.finished_at_ms,
        approval_id,
        undo_of: record.undo_of,
        undone_by: record.undone_by,
        parent_message_id: record.parent_message_id,
        outcome,
    }))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CancelAccepted {
    pub tool_call_id: String,
    /// Always true: the call was running and has stopped with `CANCELLED`
    /// (or, after 3 s, is still stopping), or it waited for approval and
    /// was withdrawn.
    pub cancelling: bool,
    /// Where the call stands: `cancelled` (it has stopped, its result
    /// `CANCELLED` is stored), `stopping` (still stopping after 3 s; its
    /// result follows), `withdrawn` (it waited for approval: it ended
    /// `APPROVAL_DENIED`, having run nothing), or `not_started` (a call of
    /// a batch or run waiting its turn: it will be recorded `CANCELLED`
    /// without running).
    pub outcome: CancelOutcome,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    Cancelled,
    Stopping,
    Withdrawn,
    NotStarted,
}

/// Cancel a running call, or withdraw one waiting for approval.
///
/// The tool is told to stop (bash: its process group is killed); the call
/// ends with `CANCELLED` and its result is stored and streamed as usual.
/// The answer comes once it has stopped (at most 3 s): a tool that finished
/// its work before the cancellation reached it keeps its result, and the
/// answer is then a `409` naming its status. A call cancelled already (a
/// cancel posted again) is answered `202` as the first time. A
/// call waiting for approval is withdrawn: its approval is denied on its
/// owner's behalf and the call ends with `APPROVAL_DENIED`, having run
/// nothing. A call of a batch or an AG-UI run that has not started yet is
/// recorded `CANCELLED` when its turn comes, and does not run.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/tool-calls/{tool_call_id}/cancel", tag = "tool calls",
    params(("thread_id" = String, Path,), ("tool_call_id" = String, Path,)),
    responses(
        (status = 202, description = "The call is being cancelled, was withdrawn from its approval, or (a call of a batch or run waiting its turn) will not run", body = CancelAccepted),
        (status = 404, description = "No such call in this thread", content_type = "application/problem+json"),
        (status = 409, description = "The call finished first (`code` `ALREADY_FINISHED`: its result stands), another cancellation is stopping it (`BEING_CANCELLED`), it runs in another process (`RUNS_ELSEWHERE`), or, waiting for approval, it was approved (or denied) first (`ALREADY_DECIDED`: an approved call runs; cancel it again to stop it); a call cancelled already is answered 202 again", content_type = "application/problem+json"),
        (status = 422, description = "A body with fields: the route takes none (at most `{}`)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn cancel_tool_call(
    State(state): State<AppState>,
    user: AuthUser,
    Path((thread_id, tool_call_id)): Path<(String, String)>,
    _: NoInput,
) -> Result<Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    super::check_path_id("tool_call_id", &tool_call_id)?;
    require_thread(&state, &user, &thread).await?;
    if let Some(response) = cancel_running(&state, &thread.0, &tool_call_id).await? {
        return Ok(response);
    }
    // A call waiting for approval is withdrawn: its approval is denied.
    let withdrawn = state
        .engine
        .withdraw(&user.owner, &thread.0, &tool_call_id, WITHDRAWN)
        .await
        .map_err(super::approvals::approval_error)?;
    if withdrawn.is_some() {
        return Ok(cancel_accepted(&tool_call_id, CancelOutcome::Withdrawn));
    }
    // Approved meanwhile: it runs here now.
    if let Some(response) = cancel_running(&state, &thread.0, &tool_call_id).await? {
        return Ok(response);
    }
    match state.store.tool_call(&thread.0, &tool_call_id).await? {
        None => Err(ApiError::NotFound(format!(
            "no tool call {tool_call_id:?} in this thread"
        ))),
        Some(record) => {
            let code = record
                .output
                .as_ref()
                .and_then(|output| output["error"]["code"].as_str());
            // Cancelled already, or withdrawn from its approval by a cancel
            // (a cancel posted again after its answer was lost, say): what
            // was asked for holds, answered as it was.
            let withdrawn = code == Some(codes::APPROVAL_DENIED)
                && state
                    .store
                    .approval_of_call(&thread.0, &tool_call_id)
                    .await?
                    .and_then(|a| a.decision_reason)
                    .is_some_and(|reason| reason == WITHDRAWN);
            if withdrawn {
                return Ok(cancel_accepted(&tool_call_id, CancelOutcome::Withdrawn));
            }
            if code == Some(codes::CANCELLED) {
                return Ok(cancel_accepted(&tool_call_id, CancelOutcome::Cancelled));
            }
            // Finished here, its result waiting on disk for the database.
            if record.status == CallStatus::Running
                && state.engine.result_kept(&thread.0, &tool_call_id)
            {
                return Err(ApiError::conflict(
                    conflicts::ALREADY_FINISHED,
                    format!(
                        "tool call {tool_call_id:?} finished; its result is kept until the \
                         database takes it, and stands"
                    ),
                ));
            }
            Err(match code {
                None if record.status == CallStatus::Running => ApiError::conflict(
                    conflicts::RUNS_ELSEWHERE,
                    format!(
                        "tool call {tool_call_id:?} runs in another toolgate process; cancel it through the process that runs it"
                    ),
                ),
                _ => ApiError::conflict(
                    conflicts::ALREADY_FINISHED,
                    format!(
                        "tool call {tool_call_id:?} is not running here (status {}); its result stands",
                        record.status.as_str()
                    ),
                ),
            })
        }
    }
}

/// The reason of an approval withdrawn by a cancel.
const WITHDRAWN: &str = "withdrawn: its owner cancelled the call before it was decided";

/// How long a cancel waits for the call to stop before answering: a tool
/// gets two seconds to stop on its own before it is aborted.
const CANCEL_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// Cancel a call running in this process; `None` if none is. `202` once it
/// finished `CANCELLED` (or is still stopping after [`CANCEL_ANSWER_WAIT`]);
/// `409` when it finished first: its result stands.
async fn cancel_running(
    state: &AppState,
    thread_id: &str,
    call_id: &str,
) -> Result<Option<Response>, ApiError> {
    let cancelled = state
        .engine
        .cancel(thread_id, call_id, CANCEL_ANSWER_WAIT)
        .await?;
    Ok(cancelled.map(|cancelled| match cancelled {
        Cancelled::Stopped => cancel_accepted(call_id, CancelOutcome::Cancelled),
        Cancelled::Stopping => cancel_accepted(call_id, CancelOutcome::Stopping),
        Cancelled::BeforeStart => cancel_accepted(call_id, CancelOutcome::NotStarted),
        Cancelled::Already => ApiError::conflict(
            conflicts::BEING_CANCELLED,
            format!(
                "tool call {call_id:?} is being cancelled already (by another cancel, its time \
                 limit or a shutdown); its result follows"
            ),
        )
        .into_response(),
        Cancelled::FinishedFirst(status) => ApiError::conflict(
            conflicts::ALREADY_FINISHED,
            format!(
                "tool call {call_id:?} finished (status {}) before the cancellation reached it; \
                 its result stands",
                status.as_str()
            ),
        )
        .into_response(),
    }))
}

/// A cancel's `202`.
fn cancel_accepted(call_id: &str, outcome: CancelOutcome) -> Response {
    let body = CancelAccepted {
        tool_call_id: call_id.to_string(),
        cancelling: true,
        outcome,
    };
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}

/// The `code` of an undo's `422`: nothing recorded to undo (the call
/// failed, is not reversible, or changed nothing), or an undo only a person
/// can do (`manual_guide` says how).
const UNDO_NOT_UNDOABLE: &str = "NOT_UNDOABLE";
const UNDO_IRREVERSIBLE: &str = "IRREVERSIBLE";

fn undo_error(e: UndoError) -> ApiError {
    match e {
        UndoError::NotFound(_) | UndoError::RunNotFound(_) => ApiError::NotFound(e.to_string()),
        UndoError::AlreadyUndone { .. } => {
            ApiError::conflict(conflicts::ALREADY_UNDONE, e.to_string())
        }
        UndoError::AlreadyRolledBack(_) => {
            ApiError::conflict(conflicts::ALREADY_ROLLED_BACK, e.to_string())
        }
        UndoError::NotUndoable { .. } => {
            let mut extra = Map::new();
            extra.insert("code".into(), json!(UNDO_NOT_UNDOABLE));
            ApiError::Unprocessable {
                title: "Not undoable".into(),
                detail: e.to_string(),
                extra,
            }
        }
        UndoError::Irreversible { ref guide, .. } => {
            let mut extra = Map::new();
            extra.insert("code".into(), json!(UNDO_IRREVERSIBLE));
            extra.insert("manual_guide".into(), json!(guide));
            ApiError::Unprocessable {
                title: "Irreversible".into(),
                detail: e.to_string(),
                extra,
            }
        }
        UndoError::Rejected(r) => rejection_to_api(r),
        UndoError::Store(s) => s.into(),
    }
}

/// Undo a call.
///
/// Runs the call's recorded undo as a new call `undo_<id>`, linked to it,
/// through the same pipeline and gates, and streams it. A call undone
/// already by an undo of its own (this route's, or a rollback's) is not
/// undone twice: asked again, the answer is that undo's outcome, with
/// `replayed: true`. One undone otherwise (the `undo_edit` tool) is a 409.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/tool-calls/{tool_call_id}/undo", tag = "tool calls",
    params(("thread_id" = String, Path,), ("tool_call_id" = String, Path,)),
    responses(
        (status = 200, description = "The undo ran; its outcome (or, the call undone already by an undo of its own, that undo's outcome with `replayed: true`)", body = ToolCallResponse),
        (status = 202, description = "The undo waits for approval", body = PendingApprovalResponse),
        (status = 404, description = "No such call", content_type = "application/problem+json"),
        (status = 409, description = "Undone already by other means (the `undo_edit` tool); the detail names the call that did; `THREAD_CLOSING`: the thread is being deleted", content_type = "application/problem+json"),
        (status = 422, description = "Not undoable (`code` `NOT_UNDOABLE`: failed, not reversible, changed nothing) or irreversible (`code` `IRREVERSIBLE`, with `manual_guide`); or a body with fields: the route takes none (at most `{}`; to undo past later changes to a file, call the `undo_edit` tool with `force: true`)", content_type = "application/problem+json"),
        (status = 429, description = "Too many concurrent calls (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn undo_tool_call(
    State(state): State<AppState>,
    user: AuthUser,
    Path((thread_id, tool_call_id)): Path<(String, String)>,
    _: NoInput,
) -> Result<Response, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    super::check_path_id("tool_call_id", &tool_call_id)?;
    require_thread(&state, &user, &thread).await?;
    let engine = state.engine.clone();
    let (owner, thread_id) = (user.owner.clone(), thread.0.clone());
    let executed = with_slot(&state, &user, async move {
        engine.undo(&owner, &thread_id, &tool_call_id).await
    })
    .await?
    .map_err(undo_error)?;
    executed_response(&state, &thread.0, executed, std::time::Duration::ZERO).await
}

/// Roll back a run.
///
/// Undoes every reversible call of the run in reverse order; irreversible
/// calls are reported with their manual guide. The report is recorded in
/// the audit log. From the rollback on, the run takes no more calls: a new
/// call posted under its `run_id` is refused with `409`. Asked again when
/// nothing is left to undo (a retry after a lost answer), it answers the
/// last rollback's report with `replayed: true`; a run with calls whose
/// undo failed is tried again.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/runs/{run_id}/rollback", tag = "tool calls",
    params(("thread_id" = String, Path,), ("run_id" = String, Path,)),
    responses(
        (status = 200, description = "Each call's step (or, rolled back already with nothing left to undo, the last rollback's report with `replayed: true`)", body = crate::engine::RollbackReport),
        (status = 404, description = "No tool call of this run in this thread (a run that called no tool has nothing to roll back)", content_type = "application/problem+json"),
        (status = 409, description = "`ALREADY_ROLLED_BACK`: every reversible call of the run was undone one by one, and it was never rolled back as a run", content_type = "application/problem+json"),
        (status = 422, description = "A body with fields: the route takes none (at most `{}`)", content_type = "application/problem+json"),
        (status = 429, description = "Too many concurrent calls (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn rollback_run(
    State(state): State<AppState>,
    user: AuthUser,
    Path((thread_id, run_id)): Path<(String, String)>,
    _: NoInput,
) -> Result<axum::Json<crate::engine::RollbackReport>, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    super::check_path_id("run_id", &run_id)?;
    require_thread(&state, &user, &thread).await?;
    let engine = state.engine.clone();
    let (owner, thread_id) = (user.owner.clone(), thread.0.clone());
    let report = with_slot(&state, &user, async move {
        engine.rollback(&owner, &thread_id, &run_id).await
    })
    .await?
    .map_err(undo_error)?;
    Ok(axum::Json(report))
}
