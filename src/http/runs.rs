//! `POST /v1/threads/{thread_id}/runs`: an AG-UI agent endpoint. It takes a
//! `RunAgentInput`, executes the pending tool calls of the last assistant
//! message, and streams the run from RUN_STARTED to exactly one RUN_FINISHED
//! or RUN_ERROR. The stock `@ag-ui/client` `HttpAgent` talks to it unmodified.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use tracing::Instrument as _;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::error::{ApiError, ApiJson};
use super::resume::{self, FrontendResult, Resume};
use super::{AppState, AuthUser, ThreadId, check_owner};
use crate::engine::{CallRequest, Executed, Rejection};
use crate::protocol::agui::{
    Event, EventBody, Interrupt, Message, RunAgentInput, RunOutcome, ToolCall,
};
use crate::protocol::calls::{self, CallShape, IncomingCall};
use crate::protocol::context;
use crate::protocol::now_ms;
use crate::protocol::parts;
use crate::protocol::tool_output::{ToolError, codes};
use crate::store::{CallStatus, NewMessage, Role, StoredMessage, WriteOp, WriteUnit};

/// The run route, with its own body limit (`server.run_body_limit_bytes`).
pub fn routes(run_body_limit_bytes: usize) -> Router<AppState> {
    let limit = super::error::BodyLimit {
        bytes: run_body_limit_bytes,
        setting: "server.run_body_limit_bytes",
    };
    Router::new().route(
        "/threads/{thread_id}/runs",
        post(post_run).layer((
            axum::extract::DefaultBodyLimit::max(run_body_limit_bytes),
            axum::Extension(limit),
        )),
    )
}

/// Run the pending tool calls of a `RunAgentInput` (AG-UI agent endpoint).
///
/// New messages of the input are recorded in the thread. The calls of the
/// last assistant message that have no tool message yet are executed in
/// order; calls to tools listed in `RunAgentInput.tools` belong to the
/// frontend and are reported in `outcome.pendingToolCallIds` instead (in a
/// run paused for an approval, as interrupts whose `reason` is
/// `frontend_tool_call`, beside the approvals' `approval_required`).
///
/// `resume` answers the interrupts of the thread's previous run before its
/// calls run: an `approval_required` interrupt is decided (`resolved` with
/// `{"decision": "approve" | "deny", "reason"?}`, the interrupt's
/// `responseSchema`; `cancelled` denies it), a `frontend_tool_call`
/// interrupt gets its result (`resolved`: the payload, unless a tool
/// message of the input answers it; `cancelled`: a result saying the
/// application abandoned the call). An entry for an interrupt toolgate did
/// not raise in the thread, or one already settled, is left out with a
/// `CUSTOM` event `run.resume_ignored`. A field of the input that neither
/// AG-UI nor toolgate defines is taken and named in a `CUSTOM` event
/// `run.fields_ignored` right after `RUN_STARTED`.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/runs", tag = "ag-ui",
    params(("thread_id" = String, Path,)),
    request_body = RunAgentInput,
    responses(
        (status = 200, description = "AG-UI event stream of the run. Its events carry no id: each is also in the thread's log, which GET /v1/threads/{thread_id}/events?after=N resumes. A run on a thread being deleted ends with `RUN_ERROR` `THREAD_CLOSING` (its new messages and calls refused), or `THREAD_DELETED`", content_type = "text/event-stream", body = super::events::AgUiSseEvent),
        (status = 400, description = "Malformed input", content_type = "application/problem+json"),
        (status = 404, description = "Thread belongs to another owner", content_type = "application/problem+json"),
        (status = 409, description = "A call of the run reuses an id the thread recorded for another call; a new assistant message declares a call id the thread has with another tool or arguments; a recorded assistant message comes back with other tool calls; a new tool message answers a call that already has a result or that toolgate runs itself; or a resume entry gives a result for a call toolgate runs itself; or the run (its `runId`) was rolled back and the input holds a new message", content_type = "application/problem+json"),
        (status = 422, description = "threadId does not match the path, wrong field types, an invalid or repeated message or tool call id, two tool messages answering one call, or a resume entry that cannot be an answer (a payload outside the interrupt's responseSchema, an interrupt answered twice, more entries than a run has interrupts, an application's call resolved without its result or abandoned though a tool message answers it)", content_type = "application/problem+json"),
        (status = 429, description = "Too many concurrent calls (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn post_run(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiJson(raw): ApiJson<Value>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    let input: RunAgentInput = super::error::shape(&raw)?;
    let ignored = super::run_fields::ignored(&raw);
    drop(raw);
    if input.thread_id != thread.0 {
        return Err(ApiError::unprocessable_at(
            "Thread mismatch",
            "/threadId".into(),
            format!(
                "threadId {:?} does not match the path's thread {:?}",
                input.thread_id, thread.0
            ),
        ));
    }
    if !calls::valid_id(&input.run_id) {
        return Err(ApiError::unprocessable_at(
            "Invalid runId",
            "/runId".into(),
            format!("runId {}", calls::INVALID_ID),
        ));
    }
    let mut message_ids = HashSet::with_capacity(input.messages.len());
    let mut results_for = HashSet::new();
    for (i, m) in input.messages.iter().enumerate() {
        let problem = if !calls::valid_id(m.id()) {
            calls::INVALID_ID
        } else if !message_ids.insert(m.id()) {
            "is the id of an earlier message of the input; each message needs its own"
        } else {
            continue;
        };
        return Err(ApiError::unprocessable_at(
            "Invalid message id",
            format!("/messages/{i}/id"),
            format!("message id {:?} {problem}", m.id()),
        ));
    }
    // Text, or AG-UI content parts: anything else is no message content.
    for (i, m) in input.messages.iter().enumerate() {
        let (Message::User { content, .. } | Message::Tool { content, .. }) = m else {
            continue;
        };
        let at = format!("/messages/{i}/content");
        match content {
            Value::String(_) => {}
            Value::Array(content_parts) => parts::check(content_parts)
                .map_err(|(pointer, message)| ApiError::invalid_body(at + &pointer, message))?,
            _ => {
                return Err(ApiError::invalid_body(
                    at,
                    "must be a string or an array of content parts".into(),
                ));
            }
        }
    }
    // A tool message answers one call, named by an id like any call's.
    for (i, m) in input.messages.iter().enumerate() {
        let Message::Tool { tool_call_id, .. } = m else {
            continue;
        };
        let problem = if !calls::valid_id(tool_call_id) {
            calls::INVALID_ID
        } else if !results_for.insert(tool_call_id.as_str()) {
            "is answered by an earlier tool message of the input; a call has one result"
        } else {
            continue;
        };
        return Err(ApiError::unprocessable_at(
            "Invalid tool call id",
            format!("/messages/{i}/toolCallId"),
            format!(
                "toolCallId {tool_call_id:?} of message {:?} {problem}",
                m.id()
            ),
        ));
    }
    for (i, m) in input.messages.iter().enumerate() {
        let Message::Assistant {
            tool_calls: Some(calls_of_turn),
            ..
        } = m
        else {
            continue;
        };
        // Every turn's calls are recorded and rebuilt into each context:
        // as many at most as a run executes.
        let max = state.settings.tools.max_batch_calls;
        if calls_of_turn.len() > max {
            return Err(ApiError::unprocessable_at(
                "Too many tool calls",
                format!("/messages/{i}/toolCalls"),
                format!(
                    "message {:?} carries {} tool calls; a message carries at most {max} (tools.max_batch_calls)",
                    m.id(),
                    calls_of_turn.len()
                ),
            ));
        }
        let mut ids = HashSet::with_capacity(calls_of_turn.len());
        for (j, tc) in calls_of_turn.iter().enumerate() {
            let problem = if !calls::valid_id(&tc.id) {
                calls::INVALID_ID
            } else if !ids.insert(tc.id.as_str()) {
                "is the id of another call of the same message"
            } else {
                continue;
            };
            return Err(ApiError::unprocessable_at(
                "Invalid tool call id",
                format!("/messages/{i}/toolCalls/{j}/id"),
                format!("tool call id {:?} of message {:?} {problem}", tc.id, m.id()),
            ));
        }
    }
    // The model's reasoning and the frontend's activity views are no part
    // of the conversation toolgate records or hands to a model (their ids
    // were checked with the rest).
    let mut input = input;
    // Where each message kept was in the input, for the pointers of the
    // refusals below.
    let at: Vec<usize> = (0..input.messages.len())
        .filter(|&i| input.messages[i].is_recorded())
        .collect();
    input.messages.retain(Message::is_recorded);
    let claimed = check_owner(&state, &user, &thread).await?;
    // A run executes its calls one at a time: one slot, held to the end.
    let permit = state.acquire(&user.owner, 1)?;
    let stored = state.store.message_outlines(&thread.0).await?;
    let known = recorded_ids(&stored);
    // A new message of another role than an assistant's cannot take an id
    // a call of the thread names as its parent (it would show as the
    // assistant's).
    let new_others: Vec<(usize, &Message)> = input
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !known.contains(m.id()) && !matches!(m, Message::Assistant { .. }))
        .collect();
    let parents = match new_others.is_empty() {
        true => Vec::new(),
        false => state.store.call_parents(&thread.0).await?,
    };
    for (k, m) in new_others {
        if let Some((call, _)) = parents.iter().find(|(_, parent)| parent == m.id()) {
            let role = serde_json::to_value(m)
                .ok()
                .and_then(|v| v["role"].as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(ApiError::conflict_at(
                format!("/messages/{}/id", at[k]),
                crate::store::checks::parent_id_taken_text(m.id(), &role, call),
            ));
        }
    }
    // A run rolled back takes nothing new: its messages would be recorded
    // and its calls refused. (Sent again as it was, it replays.)
    if input.messages.iter().any(|m| !known.contains(m.id()))
        && state.store.run_closed(&thread.0, &input.run_id).await?
    {
        return Err(ApiError::conflict_coded_at(
            crate::http::error::conflicts::RUN_CLOSED,
            "/runId".into(),
            format!(
                "run {:?} of this thread was rolled back and takes no more messages or calls; \
                 start a new run (another runId)",
                input.run_id
            ),
        ));
    }
    let frontend = frontend_tools(&input);
    let declared: Vec<(String, Value, &str)> = input
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !known.contains(m.id()))
        .filter_map(|(i, m)| match m {
            Message::Assistant { tool_calls, .. } => {
                tool_calls.as_ref().map(|calls| (at[i], m.id(), calls))
            }
            _ => None,
        })
        .flat_map(|(i, message, calls_of_turn)| {
            let pointers = (0..).map(move |j| format!("/messages/{i}/toolCalls/{j}/id"));
            pointers
                .zip(declarations(calls_of_turn, &frontend))
                .map(move |(pointer, call)| (pointer, call, message))
        })
        .collect();
    let declared = declared
        .iter()
        .map(|(pointer, call, message)| (pointer.clone(), call, *message));
    super::threads::refuse_redeclared_calls(&state, &thread.0, declared).await?;
    refuse_rewritten_turns(&state, &thread.0, &stored, &input, &frontend, &at).await?;
    refuse_second_results(&state, &thread.0, &stored, &input, &known, &at).await?;
    // A run on a new thread id claims it, even one that records nothing.
    if !claimed {
        state.store.claim_thread(&thread.0, &user.owner).await?;
    }
    // The calls the thread has a result for: a run neither reports the
    // application's own among them as pending nor takes another result.
    let answered_in_thread: HashSet<String> = answered_calls(&stored)
        .into_iter()
        .map(str::to_string)
        .collect();
    drop(stored);
    let resume = {
        let answered_in_input = answered_ids(&input);
        let (frontend, held_back) = if input.resume.is_empty() {
            Default::default()
        } else {
            open_frontend_calls(&state, &input, &frontend, &answered_in_input).await?
        };
        let calls = resume::Calls {
            frontend,
            held_back,
            answered_in_input,
            answered_in_thread: &answered_in_thread,
        };
        resume::plan(&state, &user.owner, &input, &calls).await?
    };
    refuse_reused_call_ids(&state, &thread.0, &input, &known, &at).await?;
    // Heartbeats as on `/events`, so a proxy tuned to one keeps both.
    let heartbeat = std::time::Duration::from_secs(state.settings.server.sse_heartbeat_secs.max(1));
    let (tx, rx) = mpsc::channel(64);
    // The run continues even if the client goes away: every call it starts
    // is finished and stored.
    let calls = state.calls.clone();
    // The run's slot, held until it ends (unless it lends it to a call its
    // resume approves): its calls run one at a time.
    let mut resume = resume;
    resume.own_slot = Some(permit);
    calls.spawn(
        async move {
            run(
                state.clone(),
                user.owner,
                input,
                RunContext {
                    known,
                    answered_in_thread,
                    ignored,
                },
                resume,
                tx,
            )
            .await;
        }
        .in_current_span(),
    );
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")))
}

/// The calls a run executes: those of the input's last assistant message
/// that has any, with that message's id.
fn calls_to_run(input: &RunAgentInput) -> Option<(&str, &[ToolCall])> {
    input.messages.iter().rev().find_map(|m| match m {
        Message::Assistant {
            id,
            tool_calls: Some(calls),
            ..
        } if !calls.is_empty() => Some((id.as_str(), calls.as_slice())),
        _ => None,
    })
}

/// The application's calls of the turn a run continues: those the previous
/// run asked for (no earlier call of the turn waits for approval), and,
/// by id, those it held back with the call they wait behind.
async fn open_frontend_calls<'a>(
    state: &AppState,
    input: &'a RunAgentInput,
    frontend: &HashSet<&str>,
    answered: &HashSet<&str>,
) -> Result<(HashSet<&'a str>, HashMap<&'a str, &'a str>), ApiError> {
    let mut open = HashSet::new();
    let mut held_back = HashMap::new();
    let mut waiting: Option<&str> = None;
    let Some((_, calls_of_turn)) = calls_to_run(input) else {
        return Ok((open, held_back));
    };
    for tc in calls_of_turn {
        let id = tc.id.as_str();
        if frontend.contains(tc.function.name.as_str()) {
            match waiting {
                Some(blocker) => {
                    held_back.insert(id, blocker);
                }
                None => {
                    open.insert(id);
                }
            }
        } else if waiting.is_none()
            && !answered.contains(id)
            && state
                .store
                .tool_call(&input.thread_id, id)
                .await?
                .is_some_and(|r| r.status == CallStatus::PendingApproval)
        {
            waiting = Some(id);
        }
    }
    Ok((open, held_back))
}

/// The call ids the input already answers (its tool messages): a run
/// leaves those alone.
fn answered_ids(input: &RunAgentInput) -> HashSet<&str> {
    input
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect()
}

/// The calls a run would execute must not reuse an id the thread recorded
/// for another call: refused before the stream starts and before anything
/// of the run is stored (in the stream it could only end the run with
/// `RUN_ERROR`, every retry alike). An id recorded for the same call is
/// fine: its stored outcome answers it. The calls of a message new to the
/// thread (`known` holds the recorded ids) were checked as declarations
/// ([`super::threads::refuse_redeclared_calls`]); this checks those of a
/// recorded one, which may have been posted since.
async fn refuse_reused_call_ids(
    state: &AppState,
    thread_id: &str,
    input: &RunAgentInput,
    known: &HashSet<String>,
    at: &[usize],
) -> Result<(), ApiError> {
    let Some((message_id, tool_calls)) = calls_to_run(input) else {
        return Ok(());
    };
    if !known.contains(message_id) {
        return Ok(());
    }
    let i = input
        .messages
        .iter()
        .rposition(|m| m.id() == message_id)
        .map(|i| at[i])
        .expect("the message the calls came from");
    let answered = answered_ids(input);
    for (j, tc) in tool_calls
        .iter()
        .enumerate()
        .filter(|(_, tc)| !answered.contains(tc.id.as_str()))
    {
        let Some(record) = state.store.tool_call(thread_id, &tc.id).await? else {
            continue;
        };
        let name = state.engine.registry().canonical_name(&tc.function.name);
        let parsed = calls::parse_argument_text(&tc.function.arguments, "/function/arguments");
        if record.tool_name != name
            || !crate::protocol::json::same_json(&run_arguments(tc, &parsed), &record.args)
        {
            return Err(ApiError::conflict_at(
                format!("/messages/{i}/toolCalls/{j}/id"),
                format!(
                    "tool call {:?} is already recorded in this thread with a different tool or arguments; the run's calls need ids of their own",
                    tc.id
                ),
            ));
        }
    }
    Ok(())
}

type Tx = mpsc::Sender<Result<SseEvent, Infallible>>;

async fn emit(tx: &Tx, event: &Event) {
    // A closed stream only means the client left; the run goes on.
    let _ = tx.send(Ok(SseEvent::default().data(event.to_json()))).await;
}

/// An assistant message the thread has recorded must come back with the
/// calls it was recorded with: the run executes the calls of the input,
/// and the thread's record of the turn would no longer say what ran. In
/// any order, and with the calls toolgate itself placed in the message
/// (posted with it as their `parent_message_id`): a client that built its
/// messages from the thread's stream or snapshot sends them back so.
async fn refuse_rewritten_turns(
    state: &AppState,
    thread_id: &str,
    stored: &[StoredMessage],
    input: &RunAgentInput,
    frontend: &HashSet<&str>,
    at: &[usize],
) -> Result<(), ApiError> {
    let by_id: HashMap<&str, &StoredMessage> = stored.iter().map(|m| (m.id.as_str(), m)).collect();
    for (i, m) in input.messages.iter().enumerate() {
        let Message::Assistant { id, tool_calls, .. } = m else {
            continue;
        };
        let Some(recorded) = by_id.get(id.as_str()) else {
            continue;
        };
        let sent = tool_calls
            .as_deref()
            .map(|calls_of_turn| declarations(calls_of_turn, frontend))
            .unwrap_or_default();
        let had = recorded
            .metadata
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let same_call = |a: &Value, b: &Value| {
            a.get("name") == b.get("name")
                && crate::protocol::json::same_json_at(a.get("arguments"), b.get("arguments"))
        };
        let sent_ids: HashSet<&str> = sent.iter().filter_map(|c| c["id"].as_str()).collect();
        let mut same = recorded.role == Role::Assistant
            && sent_ids.len() == sent.len()
            && had.iter().all(|b| {
                sent.iter()
                    .find(|a| a.get("id") == b.get("id"))
                    .is_some_and(|a| same_call(a, b))
            });
        for extra in sent
            .iter()
            .filter(|a| !had.iter().any(|b| a.get("id") == b.get("id")))
        {
            if !same {
                break;
            }
            let call_id = extra["id"].as_str().unwrap_or_default();
            same = match state.store.tool_call(thread_id, call_id).await? {
                Some(placed) => {
                    let name = extra["name"].as_str().unwrap_or_default();
                    placed.parent_message_id.as_deref() == Some(id.as_str())
                        && placed.tool_name == state.engine.registry().canonical_name(name)
                        && crate::protocol::json::same_json_at(
                            extra.get("arguments"),
                            Some(&placed.args),
                        )
                }
                None => false,
            };
        }
        if !same {
            return Err(ApiError::conflict_at(
                format!("/messages/{}/id", at[i]),
                format!(
                    "message {id:?} is already recorded in this thread with other tool calls (or another role); a new turn needs an id of its own"
                ),
            ));
        }
    }
    Ok(())
}

/// A tool message new to the thread answers a call that has no result yet
/// and that toolgate does not run itself: a second result for a call would
/// leave the context two answers to one question, and a result sent for a
/// call toolgate records (one waiting for approval, say) would stand in for
/// the result toolgate stores.
async fn refuse_second_results(
    state: &AppState,
    thread_id: &str,
    stored: &[StoredMessage],
    input: &RunAgentInput,
    known: &HashSet<String>,
    at: &[usize],
) -> Result<(), ApiError> {
    let answered = answered_calls(stored);
    for (i, m) in input.messages.iter().enumerate() {
        let Message::Tool {
            id, tool_call_id, ..
        } = m
        else {
            continue;
        };
        if known.contains(id) {
            continue;
        }
        let problem = if answered.contains(tool_call_id.as_str()) {
            "already has a result in this thread"
        } else if state
            .store
            .tool_call(thread_id, tool_call_id)
            .await?
            .is_some()
        {
            "is toolgate's own: toolgate records its result"
        } else {
            continue;
        };
        return Err(ApiError::conflict_at(
            format!("/messages/{}/toolCallId", at[i]),
            format!(
                "tool message {id:?} answers call {tool_call_id:?}, which {problem}; only a frontend tool's call without a result is answered in messages"
            ),
        ));
    }
    Ok(())
}

/// The ids of the thread's messages.
fn recorded_ids(stored: &[StoredMessage]) -> HashSet<String> {
    stored.iter().map(|m| m.id.clone()).collect()
}

/// The calls the thread has a result (a tool message) for.
fn answered_calls(stored: &[StoredMessage]) -> HashSet<&str> {
    stored
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect()
}

/// The names of the frontend's own tools (`RunAgentInput.tools`).
fn frontend_tools(input: &RunAgentInput) -> HashSet<&str> {
    input.tools.iter().map(|t| t.name.as_str()).collect()
}

/// An assistant message's calls as the thread records them: `{"id",
/// "name", "arguments"}`, and `"frontend": true` for the application's own
/// (so `/context` can say why such a call has no result yet).
fn declarations(tool_calls: &[ToolCall], frontend: &HashSet<&str>) -> Vec<Value> {
    tool_calls
        .iter()
        .map(|tc| {
            let parsed = calls::parse_argument_text(&tc.function.arguments, "");
            let mut call = json!({"id": tc.id, "name": tc.function.name, "arguments": run_arguments(tc, &parsed)});
            if frontend.contains(tc.function.name.as_str()) {
                call[context::FRONTEND] = json!(true);
            }
            call
        })
        .collect()
}

/// What a run knows of its input and thread before its stream starts.
struct RunContext {
    /// The ids of the messages the thread has recorded.
    known: HashSet<String>,
    /// The calls the thread has a result for.
    answered_in_thread: HashSet<String>,
    /// Pointers to the input's fields toolgate does not know.
    ignored: Vec<String>,
}

async fn run(
    state: AppState,
    owner: String,
    input: RunAgentInput,
    context: RunContext,
    mut resume: Resume,
    tx: Tx,
) {
    let RunContext {
        known,
        answered_in_thread,
        ignored,
    } = context;
    let thread_id = input.thread_id.clone();
    let run_id = input.run_id.clone();
    emit(
        &tx,
        &Event::new(EventBody::RunStarted {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
        }),
    )
    .await;
    if let Some(warning) = super::run_fields::event(&ignored) {
        tracing::info!(
            thread_id = %thread_id,
            run_id = %run_id,
            count = ignored.len(),
            first = ?&ignored[..ignored.len().min(8)],
            "a run's input has fields toolgate does not know"
        );
        emit(&tx, &warning).await;
    }
    let finished = async {
        let mut finished = execute_run(
            &state,
            &owner,
            &input,
            &known,
            &answered_in_thread,
            &mut resume,
            &tx,
        )
        .await?;
        // Every approval of the thread still open is what the run waits
        // for, also one an earlier run (or `/tool-calls`) asked for.
        for approval in resume::open_approvals(&state, &thread_id).await? {
            if !finished.interrupts.iter().any(|i| i.id == approval.id) {
                finished
                    .interrupts
                    .push(resume::approval_interrupt(&approval));
            }
        }
        Ok::<_, ApiError>(finished)
    };
    // At shutdown a run may still finish within the grace in-flight
    // requests get; one that would not ends with RUN_ERROR just before its
    // connection is closed (its calls are finished as INTERRUPTED at the
    // next start if they do not end either), never without a terminal
    // event.
    let finished = tokio::select! {
        finished = finished => finished,
        _ = super::grace_running_out(&state) => {
            emit(
                &tx,
                &Event::new(EventBody::RunError {
                    message: "toolgate is shutting down and this run did not finish in time; run it again with the same messages once toolgate is back: calls that finished are answered from storage, the others were stopped (INTERRUPTED)".into(),
                    code: Some("SHUTTING_DOWN".into()),
                }),
            )
            .await;
            return;
        }
    };
    match finished {
        Ok(finished) => {
            // Calls waiting for approval pause the run (AG-UI interrupt);
            // the next run answers them once decided.
            let outcome = if finished.interrupts.is_empty() {
                let pending: Vec<String> =
                    finished.frontend.into_iter().map(|(id, _)| id).collect();
                RunOutcome::Success {
                    pending_tool_call_ids: (!pending.is_empty()).then_some(pending),
                }
            } else {
                // The frontend's own calls of the turn are as much what the
                // run waits for as the approvals: each is an interrupt too.
                let mut interrupts: Vec<Interrupt> = finished
                    .frontend
                    .into_iter()
                    .map(|(id, name)| resume::frontend_interrupt(id, &name))
                    .collect();
                interrupts.extend(finished.interrupts);
                RunOutcome::Interrupt { interrupts }
            };
            emit(
                &tx,
                &Event::new(EventBody::RunFinished {
                    thread_id,
                    run_id,
                    result: None,
                    outcome: Some(outcome),
                }),
            )
            .await;
        }
        Err(e) => {
            let message = match &e {
                ApiError::Internal(_) => {
                    "an internal error occurred; it has been logged".to_string()
                }
                other => other.to_string(),
            };
            if let ApiError::Internal(err) = &e {
                tracing::error!(error = ?err, "run failed");
            }
            // The code an event stream ends with for the same cause: a
            // client retries an outage, not a failure.
            let code = match &e {
                ApiError::Unavailable(_) => "STORE_UNAVAILABLE",
                ApiError::ThreadDeleted { .. } => super::error::THREAD_DELETED,
                ApiError::ConflictAt {
                    code: super::error::conflicts::THREAD_CLOSING,
                    ..
                } => super::error::conflicts::THREAD_CLOSING,
                _ => "RUN_FAILED",
            };
            emit(
                &tx,
                &Event::new(EventBody::RunError {
                    message,
                    code: Some(code.into()),
                }),
            )
            .await;
        }
    }
}

async fn execute_run(
    state: &AppState,
    owner: &str,
    input: &RunAgentInput,
    known: &HashSet<String>,
    answered_in_thread: &HashSet<String>,
    resume: &mut Resume,
    tx: &Tx,
) -> Result<Finished, ApiError> {
    if let Err(e) = record_new_messages(state, owner, input, known, &resume.results).await {
        // Another run of the same input (a retry sent twice, say) recorded
        // a message first. Read the thread again and go on as a retry
        // would: the messages it has now are known, and a resume entry's
        // result for a call answered meanwhile is not recorded twice.
        let ApiError::Conflict(_) = e else {
            return Err(e);
        };
        let stored = state.store.message_outlines(&input.thread_id).await?;
        let known = recorded_ids(&stored);
        let answered = answered_calls(&stored);
        resume
            .results
            .retain(|r| !answered.contains(r.tool_call_id.as_str()));
        record_new_messages(state, owner, input, &known, &resume.results).await?;
    }
    // The decisions the entries carry, before the calls they let run.
    let decided = resume.decide(state, owner).await?;
    for warning in resume.warnings() {
        emit(tx, &warning).await;
    }
    // What the thread's stream says of each decision, the run's says too
    // (a stock AG-UI client reads only the run's).
    for approval in &decided {
        emit(tx, &crate::engine::approval_decided_event(approval)).await;
    }
    let finished = execute_turn(state, owner, input, answered_in_thread, resume, tx).await?;
    // A decided call the turn does not hold (one posted to `/tool-calls`,
    // or of an earlier turn) ran, or failed with its denial, outside the
    // turn's loop: its result is the run's too.
    let turn: HashSet<&str> = calls_to_run(input)
        .map(|(_, calls)| calls.iter().map(|c| c.id.as_str()).collect())
        .unwrap_or_default();
    let wait =
        std::time::Duration::from_secs(state.settings.tools.timeout_secs) + OUTSIDE_RESULT_GRACE;
    for approval in decided
        .iter()
        .filter(|a| !turn.contains(a.tool_call_id.as_str()))
    {
        let outcome = state
            .engine
            .wait_finished(&input.thread_id, &approval.tool_call_id, wait)
            .await?;
        if let Some(outcome) = outcome {
            emit(tx, &crate::engine::recorded_result_event(&outcome)).await;
        }
    }
    Ok(finished)
}

/// How much longer than `tools.timeout_secs` a run waits for the result of
/// a call it approved outside its turn; a result later than that reaches
/// the thread's event stream only.
const OUTSIDE_RESULT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The calls of the run's turn: run, waited for, or left to the
/// application.
async fn execute_turn(
    state: &AppState,
    owner: &str,
    input: &RunAgentInput,
    answered_in_thread: &HashSet<String>,
    resume: &mut Resume,
    tx: &Tx,
) -> Result<Finished, ApiError> {
    let Some((parent_id, tool_calls)) = calls_to_run(input) else {
        return Ok(Finished {
            frontend: vec![],
            interrupts: vec![],
        });
    };
    let mut answered = answered_ids(input);
    answered.extend(resume.results.iter().map(|r| r.tool_call_id.as_str()));
    let frontend = frontend_tools(input);
    let mut pending_frontend = Vec::new();
    let mut interrupts = Vec::new();
    // Until its turn comes, a call of the run may be cancelled: it is then
    // recorded CANCELLED instead of run.
    let _queued = state.engine.queue(
        &input.thread_id,
        tool_calls
            .iter()
            .filter(|tc| {
                !answered.contains(tc.id.as_str()) && !frontend.contains(tc.function.name.as_str())
            })
            .map(|tc| tc.id.clone()),
    );

    // A call waits for approval: the calls after it wait for the run that
    // resumes after the decision.
    let mut held = false;
    for tc in tool_calls {
        if answered.contains(tc.id.as_str()) {
            continue;
        }
        // (One cancelled while it waited, or recorded so by a run before
        // this one, a retry's, is answered now: it never runs.)
        if held
            && !state.engine.cancelled_in_queue(&input.thread_id, &tc.id)
            && !state
                .store
                .tool_call(&input.thread_id, &tc.id)
                .await?
                .is_some_and(|record| record.status.is_finished())
        {
            continue;
        }
        if frontend.contains(tc.function.name.as_str()) {
            // A result the thread has (a resume entry's, say) answers it.
            if !answered_in_thread.contains(&tc.id) {
                pending_frontend.push((tc.id.clone(), tc.function.name.clone()));
            }
            continue;
        }
        let (observer, mut observed) = mpsc::unbounded_channel();
        let parsed_args = calls::parse_argument_text(&tc.function.arguments, "/function/arguments");
        let call = IncomingCall {
            id: tc.id.clone(),
            name: tc.function.name.clone(),
            arguments: run_arguments(tc, &parsed_args),
            shape: CallShape::Openai,
            run_id: Some(input.run_id.clone()),
            parent_message_id: Some(parent_id.to_string()),
            workspace: None,
            dry_run: false,
        };
        let mut request = CallRequest::new(owner, &input.thread_id, call);
        request.observer = Some(observer);
        let engine = state.engine.clone();
        // Refused as /messages and /tool-calls refuse it: the place in the
        // text, and a hint to send one JSON object.
        let refused = parsed_args.err().map(|e| {
            super::threads::arguments_error(&e)
                .unwrap_or_else(|| ToolError::new(codes::INVALID_ARGUMENTS, e.to_string(), false))
        });
        // A run that lent its slot to a call its resume approved takes one
        // for each call of its own, waiting for it.
        let slot = if resume.lent {
            Some(state.wait_for_slot(owner).await?)
        } else {
            None
        };
        // Otherwise the call runs in the run's own slot, which it lets go
        // if it finds itself running already (a retried run only waits
        // for it): the calls after it then take slots of their own.
        let run_slot =
            (!resume.lent).then(|| crate::engine::limits::SharedSlot::new(resume.own_slot.take()));
        if let Some(run_slot) = &run_slot {
            request.slot = run_slot.clone();
        }
        // Boxed, as in `threads::with_slot`: tokio copies an inline future whole.
        let task = state.calls.spawn(Box::pin(
            async move {
                let _slot = slot;
                if let Some(error) = refused {
                    return engine
                        .record_rejected_call(request, error)
                        .await
                        .map(Executed::Finished)
                        .map_err(Rejection::from);
                }
                let mut retry =
                    CallRequest::new(&request.owner, &request.thread_id, request.call.clone());
                retry.observer = request.observer.clone();
                // In a stream every call gets an answer: refusals are recorded.
                let refusal = match engine.execute(request).await {
                    Err(rejection) => match rejection.tool_error() {
                        Some(error) => error,
                        None => return Err(rejection),
                    },
                    other => return other,
                };
                engine
                    .record_rejected_call(retry, refusal)
                    .await
                    .map(Executed::Finished)
                    .map_err(Rejection::from)
            }
            .in_current_span(),
        ));
        // Forward the call's events as they commit, until the call is done.
        while let Some(event) = observed.recv().await {
            // The client sent this call itself: re-sending its arguments
            // makes an AG-UI client append them to the copy it holds. The
            // thread's event log keeps the full START/ARGS/END/RESULT.
            if matches!(event.body, EventBody::ToolCallArgs { .. }) {
                continue;
            }
            emit(tx, &event).await;
        }
        let executed = task
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("call task failed: {e}")))?;
        if let Some(run_slot) = run_slot {
            match run_slot.take() {
                Some(permit) => resume.own_slot = Some(permit),
                None => resume.lent = true,
            }
        }
        let executed = executed.map_err(super::threads::rejection_to_api)?;
        if let Executed::AwaitingApproval(approval) = executed {
            interrupts.push(resume::approval_interrupt(&approval));
            // The calls after it may depend on it: they run in the run that
            // resumes after the decision (answered calls are skipped there),
            // but for those cancelled while they waited their turn, which
            // are recorded CANCELLED now.
            held = true;
        }
    }
    Ok(Finished {
        frontend: pending_frontend,
        interrupts,
    })
}

/// How a run ended: frontend calls left for the application (id, tool
/// name), and calls waiting for a human decision.
struct Finished {
    frontend: Vec<(String, String)>,
    interrupts: Vec<Interrupt>,
}

/// A run's call arguments as toolgate records and runs them: the object
/// its JSON text encodes (`parsed`), or, when the text is not a JSON
/// object, the text itself under `_raw` (the call then fails with
/// INVALID_ARGUMENTS, and the conversation, its events and its context show
/// the same arguments).
fn run_arguments<E>(tc: &ToolCall, parsed: &Result<Value, E>) -> Value {
    match parsed {
        Ok(arguments) => arguments.clone(),
        Err(_) => json!({"_raw": tc.function.arguments}),
    }
}

/// Messages of the input the thread has not recorded yet (by id), and the
/// results of the application's calls that resume entries give.
async fn record_new_messages(
    state: &AppState,
    owner: &str,
    input: &RunAgentInput,
    known: &HashSet<String>,
    resumed: &[FrontendResult],
) -> Result<(), ApiError> {
    let frontend = frontend_tools(input);
    let mut ops = Vec::new();
    let mut events = Vec::new();
    let mut declares_calls = false;
    // Calls of earlier turns that can never run (the run runs only its
    // last assistant message's): their refusals are recorded with them.
    let running = calls_to_run(input).map(|(id, _)| id);
    let mut refused = Vec::new();
    for m in &input.messages {
        if known.contains(m.id()) {
            continue;
        }
        let mut declares = Vec::new();
        let (role, content, metadata, tool_call_id) = match m {
            Message::User { content, .. } => (
                Role::User,
                text_of(content),
                with_parts(json!({}), content),
                None,
            ),
            Message::System { content, .. } => (Role::System, content.clone(), json!({}), None),
            Message::Developer { content, .. } => {
                (Role::Developer, content.clone(), json!({}), None)
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let calls = tool_calls
                    .as_deref()
                    .map(|calls_of_turn| declarations(calls_of_turn, &frontend))
                    .unwrap_or_default();
                if running != Some(m.id()) {
                    refused.extend(tool_calls.iter().flatten().filter_map(|tc| {
                        never_runs(state, tc, frontend.contains(tc.function.name.as_str()))
                    }));
                }
                declares = super::threads::declared(state, &calls);
                declares_calls |= !declares.is_empty();
                let metadata = if calls.is_empty() {
                    json!({})
                } else {
                    json!({ "tool_calls": calls })
                };
                (
                    Role::Assistant,
                    content.clone().unwrap_or_default(),
                    metadata,
                    None,
                )
            }
            // A frontend tool's result, answered by the application.
            Message::Tool {
                content,
                tool_call_id,
                error,
                ..
            } => (
                Role::Tool,
                text_of(content),
                with_parts(frontend_result_metadata(error.as_deref()), content),
                Some(tool_call_id.clone()),
            ),
            // Left out before (`Message::is_recorded`).
            Message::Reasoning { .. } | Message::Activity { .. } => continue,
        };
        // Frontends watching the thread see the run's text messages as they
        // see those posted to /messages (the run's own stream does not
        // repeat what its client sent). A frontend tool's result is not
        // streamed: toolgate never streamed its call, and a result event
        // would answer a call the stream never started.
        if tool_call_id.is_none() {
            events.extend(Event::text_message(m.id(), role.as_str(), &content));
        }
        ops.push(WriteOp::InsertMessage(NewMessage {
            id: m.id().to_string(),
            role,
            content,
            metadata: metadata.into(),
            tool_call_id,
            created_at_ms: now_ms(),
            declares,
        }));
    }
    // Nor does a result's id take one a call names as its parent.
    let parents: HashSet<String> = if resumed.is_empty() {
        HashSet::new()
    } else {
        let parents = state.store.call_parents(&input.thread_id).await?;
        parents.into_iter().map(|(_, parent)| parent).collect()
    };
    let taken = |id: &str| {
        known.contains(id) || parents.contains(id) || input.messages.iter().any(|m| m.id() == id)
    };
    for result in resumed {
        ops.push(WriteOp::InsertMessage(NewMessage {
            id: resumed_id(&result.tool_call_id, taken),
            role: Role::Tool,
            content: result.content.clone(),
            metadata: frontend_result_metadata(result.error.as_deref()).into(),
            tool_call_id: Some(result.tool_call_id.clone()),
            created_at_ms: now_ms(),
            declares: Vec::new(),
        }));
    }
    if !events.is_empty() {
        ops.push(WriteOp::AppendEvents(
            events.iter().map(crate::engine::new_event).collect(),
        ));
    }
    if !ops.is_empty() {
        state
            .writer
            .write(WriteUnit {
                thread_id: input.thread_id.clone(),
                owner: owner.to_string(),
                ops,
            })
            .await?;
        if declares_calls {
            state.engine.declarations_recorded(&input.thread_id);
        }
        super::threads::refuse_declared(state, owner, &input.thread_id, refused).await;
    }
    Ok(())
}

/// A run's declared call that can never run, with its refusal (as
/// `/messages` records it): a tool toolgate lacks, arguments that do not
/// match its schema, or arguments text no JSON object's. `None` for the
/// application's own calls and for any that can run.
fn never_runs(
    state: &AppState,
    tc: &ToolCall,
    frontend: bool,
) -> Option<(IncomingCall, crate::protocol::tool_output::ToolError)> {
    if frontend {
        return None;
    }
    let parsed = calls::parse_argument_text(&tc.function.arguments, "/function/arguments");
    let call = IncomingCall {
        id: tc.id.clone(),
        name: tc.function.name.clone(),
        arguments: run_arguments(tc, &parsed),
        shape: CallShape::Openai,
        run_id: None,
        parent_message_id: None,
        workspace: None,
        dry_run: false,
    };
    let error = super::threads::declared_refusal(state, &call, parsed.as_ref().err())?;
    Some((call, error))
}

/// The id of the tool message holding the result a resume entry gives
/// call `call_id`: `{call_id}.resumed`, or, when the thread or the run's
/// input already has a message by that id, the first of
/// `{call_id}.resumed.2`, `.3`, … that none has. The thread gives every
/// run the same id, so a run and its retry at once cannot both record a
/// result for the call: the second write conflicts. A call id too long to
/// take the suffix within an id's 128 characters is cut, with a hash of
/// the whole id after it (`{cut}-{hash}.resumed`), so the message's id is
/// one a client can send back.
fn resumed_id(call_id: &str, taken: impl Fn(&str) -> bool) -> String {
    // `.resumed` and a counter of up to ten digits.
    const ROOM: usize = 128 - ".resumed".len() - 11;
    let stem = if call_id.len() <= ROOM {
        call_id.to_string()
    } else {
        // FNV-1a: the same on every process and release.
        let hash = call_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{}-{hash:016x}", &call_id[..ROOM - 17])
    };
    let first = format!("{stem}.resumed");
    if !taken(&first) {
        return first;
    }
    (2u32..)
        .map(|n| format!("{first}.{n}"))
        .find(|id| !taken(id))
        .expect("a thread holds finitely many messages")
}

/// The metadata of an application's tool result: why the tool failed,
/// when it did.
fn frontend_result_metadata(error: Option<&str>) -> Value {
    match error.filter(|e| !e.trim().is_empty()) {
        Some(error) => json!({ context::ERROR: error }),
        None => json!({}),
    }
}

/// A message's metadata with its content parts as sent, when they hold
/// media (images, audio, video, documents): its text alone would lose them.
fn with_parts(mut metadata: Value, content: &Value) -> Value {
    if let Value::Array(content_parts) = content
        && parts::has_media(content_parts)
    {
        metadata[parts::KEY] = content.clone();
    }
    metadata
}

/// A user or tool message's text: the string itself, or its text parts
/// joined by line breaks, empty ones left out (its media parts are kept
/// beside it: [`with_parts`]).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str().filter(|t| !t.is_empty()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_messages_text_parts_are_joined_without_the_empty_ones() {
        let parts = json!([
            {"type": "text", "text": "look"},
            {"type": "text", "text": ""},
            {"type": "image", "source": {"type": "url", "value": "https://e.test/a.png"}},
            {"type": "text", "text": "here"},
        ]);
        assert_eq!(super::text_of(&parts), "look\nhere");
        assert_eq!(super::text_of(&json!([{"type": "text", "text": ""}])), "");
        assert_eq!(super::text_of(&json!("as sent ")), "as sent ");
    }

    #[test]
    fn a_resumed_result_takes_the_first_id_no_message_has() {
        let taken = ["f1.resumed", "f1.resumed.2", "f1.resumed.4"];
        let is_taken = |id: &str| taken.contains(&id);
        assert_eq!(super::resumed_id("f1", is_taken), "f1.resumed.3");
        assert_eq!(super::resumed_id("f2", is_taken), "f2.resumed");
        // A call id as long as ids go: cut, hashed, still an id.
        let long = "c".repeat(128);
        let id = super::resumed_id(&long, |_| false);
        assert!(crate::protocol::calls::valid_id(&id), "{id}");
        assert!(id.ends_with(".resumed"), "{id}");
        let other = super::resumed_id(&format!("{}d", "c".repeat(127)), |_| false);
        assert_ne!(id, other, "two long ids keep apart");
        let taken = |candidate: &str| candidate == id;
        assert!(crate::protocol::calls::valid_id(&super::resumed_id(
            &long, taken
        )));
    }
}
