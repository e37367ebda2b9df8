//! `POST /v1/threads/{thread_id}/batches`: several calls in one request.
//! Consecutive concurrency-safe calls run in parallel, the others one at a
//! time in order; results come back in request order.

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument as _;
use utoipa::ToSchema;

use super::error::{ApiError, ApiJson};
use super::threads::{
    PendingApprovalResponse, ToolCallResponse, parse_error_to_api, rejection_to_api,
};
use super::{AppState, AuthUser, ThreadId, check_owner};
use crate::engine::{CallRequest, Executed, Rejection};
use crate::protocol::calls::{self, IncomingCall};

pub fn routes() -> Router<AppState> {
    Router::new().route("/threads/{thread_id}/batches", post(post_batch))
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"calls": [
    {"id": "c1", "name": "echo", "arguments": {"text": "a"}},
    {"id": "c2", "type": "tool_use", "name": "echo", "input": {"text": "b"}}]}))]
pub struct BatchRequest {
    /// Tool calls in any accepted shape, executed as one run: at least one,
    /// at most `tools.max_batch_calls` (64 by default). Each is checked on
    /// its own: one that is not a valid call gets its own 422 in `results`,
    /// and the others still run.
    #[schema(value_type = Vec<BatchCall>, min_items = 1)]
    pub calls: Vec<Value>,
    /// The run the calls belong to (for rollback); generated when absent.
    /// A batch posted again answers with the run its calls were recorded
    /// under by the first post: give your own to have one id throughout.
    #[schema(value_type = Option<crate::protocol::calls::Id>)]
    pub run_id: Option<String>,
}

/// A batch item in the OpenAPI document: a tool call in any accepted shape
/// ([`crate::protocol::calls::ToolCallRequest`]), though any JSON value is
/// taken, and one that is not a valid call is answered with its own 422 in
/// `results`.
pub struct BatchCall;

impl utoipa::PartialSchema for BatchCall {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::AnyOfBuilder::new()
            .item(utoipa::openapi::RefOr::Ref(
                utoipa::openapi::Ref::from_schema_name("ToolCallRequest"),
            ))
            .item(crate::protocol::agui::AnyJson::schema())
            .description(Some(
                "A tool call in any accepted shape (ToolCallRequest); any other value is answered with its own 422 in `results`",
            ))
            .into()
    }
}

impl ToSchema for BatchCall {}

/// One call's answer: its result, or the problem that refused it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchItem {
    pub index: usize,
    pub tool_call_id: Option<String>,
    /// HTTP status this call would have had on its own.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ToolCallResponse>,
    /// Set (status 202) when the call waits for a human decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingApprovalResponse>,
    /// A problem document, when the call was refused before running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub problem: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchResponse {
    pub run_id: String,
    /// In request order.
    pub results: Vec<BatchItem>,
}

/// A batch item as parsed: the call, or its refusal with the call's id
/// when it has one.
type Parsed = Result<IncomingCall, (Option<String>, ApiError)>;

/// Execute several calls as one run.
///
/// Consecutive concurrency-safe calls (per the tool's metadata) run in
/// parallel; any other call runs alone, after the ones before it. One
/// refused call does not stop the others.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/batches", tag = "tool calls",
    params(("thread_id" = String, Path,)),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every call answered, in request order (a call refused carries its problem: `THREAD_CLOSING` for each call of a thread being deleted)", body = BatchResponse),
        (status = 404, description = "Thread belongs to another owner", content_type = "application/problem+json"),
        (status = 422, description = "Malformed batch (not a list, too many calls, bad run_id)", content_type = "application/problem+json"),
        (status = 429, description = "Too many concurrent calls (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn post_batch(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    ApiJson(body): ApiJson<BatchRequest>,
) -> Result<axum::Json<BatchResponse>, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    let max = state.settings.tools.max_batch_calls;
    if body.calls.is_empty() || body.calls.len() > max {
        return Err(ApiError::unprocessable_at(
            "Invalid batch",
            "/calls".into(),
            format!("a batch carries 1 to {max} calls, got {}", body.calls.len()),
        ));
    }
    let given_run = body.run_id.is_some();
    let run_id = match body.run_id.clone() {
        Some(r) if calls::valid_id(&r) => r,
        Some(_) => {
            return Err(ApiError::unprocessable_at(
                "Invalid batch",
                "/run_id".into(),
                format!("run_id {}", calls::INVALID_ID),
            ));
        }
        None => format!("batch_{}", uuid::Uuid::now_v7().simple()),
    };
    check_owner(&state, &user, &thread).await?;

    // Parse every call first; a malformed one is answered, not executed.
    // An id twice in one batch is answered at its second place: which of
    // two different calls ran would otherwise be down to timing.
    let mut first_at = std::collections::HashMap::new();
    let parsed: Vec<Parsed> = body
        .calls
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            // A pointer names the place in the request body, this item's
            // place included.
            let call = calls::parse(raw).map_err(|mut e| {
                e.pointer = format!("/calls/{index}{}", e.pointer);
                // The item's id, when it has a usable one.
                let id = raw
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| calls::valid_id(id))
                    .map(str::to_string);
                (id, parse_error_to_api(e))
            })?;
            if let Some(first) = first_at.get(&call.id) {
                return Err((
                    Some(call.id.clone()),
                    ApiError::unprocessable_at(
                        "Invalid batch",
                        format!("/calls/{index}/id"),
                        format!(
                            "tool call id {:?} is already the id of call {first} of this batch",
                            call.id
                        ),
                    ),
                ));
            }
            first_at.insert(call.id.clone(), index);
            // A batch is one run: an item filed under another would be
            // left out of the batch's rollback without a word.
            if let Some(own) = call.run_id.as_ref().filter(|own| **own != run_id) {
                return Err((
                    Some(call.id.clone()),
                    ApiError::invalid_body(
                        format!("/calls/{index}/run_id"),
                        format!(
                            "{own:?} is not the batch's run {run_id:?}: a batch's calls are one \
                             run; leave run_id out of its calls, or give it as the batch's"
                        ),
                    ),
                ));
            }
            Ok(call)
        })
        .collect();
    // A declared call whose arguments text was cut short answers as
    // recorded, as it does posted alone.
    let mut parsed = parsed;
    for (index, item) in parsed.iter_mut().enumerate() {
        if item.is_err()
            && let Some(call) =
                super::threads::recorded_as_raw(&state, &user, &thread, &body.calls[index]).await
        {
            *item = Ok(call);
        }
    }
    // A batch posted again without a run of its own (its answer lost, or
    // after a call waiting for approval was decided) goes on in the run
    // its first post was given: its calls recorded already are there, and
    // its new ones join them, so one rollback reaches them all.
    let run_id = match given_run {
        true => run_id,
        false => first_recorded_run(&state, &thread.0, &parsed)
            .await?
            .unwrap_or(run_id),
    };
    for call in parsed.iter_mut().flatten() {
        call.run_id = Some(run_id.clone());
    }
    let safe: Vec<bool> = parsed
        .iter()
        .map(|c| {
            c.as_ref()
                .ok()
                .and_then(|c| state.engine.registry().resolve(&c.name))
                .is_some_and(|t| t.definition.metadata.concurrency_safe)
        })
        .collect();
    // A group of concurrency-safe calls runs at most as many at once as
    // the limits let one request take (the rest of it after them), so a
    // batch is never refused for being wider than the limits.
    let mut groups = within(group_consecutive_safe(&safe), state.limits.widest());
    let widest = groups.iter().map(Vec::len).max().unwrap_or(1);
    // As many slots as its widest group, or as many as are free (one at
    // least): with fewer, its safe calls run fewer at a time. A batch all
    // of whose calls are recorded runs nothing (each is answered from
    // storage, or waited for): it needs no slot, so a retry after a lost
    // answer is not refused while the owner's calls run.
    let mut taken = None;
    let mut refusal = None;
    for slots in (1..=widest).rev() {
        match state.acquire(&user.owner, slots) {
            Ok(permit) => {
                if slots < widest {
                    groups = within(group_consecutive_safe(&safe), slots);
                }
                taken = Some(permit);
                break;
            }
            Err(limit) => refusal = Some(limit),
        }
    }
    let permit = match (taken, refusal) {
        (Some(permit), _) => Some(permit),
        (None, Some(limit)) => {
            if all_recorded(&state, &thread.0, &parsed).await? {
                None
            } else {
                return Err(limit);
            }
        }
        (None, None) => None,
    };

    // The batch goes on in a task of its own: a client that leaves (or a
    // request timeout) does not cut it between calls, as it does not cut
    // a call half-way. Its queued calls still run, each is stored and
    // streamed, and the batch posted again is answered from storage.
    let batch = Batch {
        state: state.clone(),
        owner: user.owner.clone(),
        thread_id: thread.0.clone(),
    };
    let results = state
        .calls
        .spawn(Box::pin(
            async move { batch.run(parsed, groups, permit).await }.in_current_span(),
        ))
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("batch task failed: {e}")))??;
    // A run named by the post may not be the one its calls recorded from
    // an earlier post are in (a run found above is).
    let run_id = match given_run {
        true => recorded_run(&state, &thread.0, &results)
            .await?
            .unwrap_or(run_id),
        false => run_id,
    };
    Ok(axum::Json(BatchResponse { run_id, results }))
}

/// What a batch's task needs to run its calls.
struct Batch {
    state: AppState,
    owner: String,
    thread_id: String,
}

impl Batch {
    /// Run `parsed` group by group, in `groups`' order, holding `permit`
    /// throughout; every item is answered, in request order.
    async fn run(
        self,
        parsed: Vec<Parsed>,
        groups: Vec<Vec<usize>>,
        permit: Option<crate::engine::limits::Permit>,
    ) -> Result<Vec<BatchItem>, ApiError> {
        // Until its turn comes, a call of the batch may be cancelled: it is
        // then recorded CANCELLED instead of run.
        let _queued = self.state.engine.queue(
            &self.thread_id,
            parsed.iter().flatten().map(|call| call.id.clone()),
        );
        let mut results: Vec<Option<BatchItem>> = (0..parsed.len()).map(|_| None).collect();
        let mut parsed: Vec<Option<Parsed>> = parsed.into_iter().map(Some).collect();
        // The first call found waiting for a human decision: the calls after
        // it may depend on it, so they do not run before it (nothing of them
        // is recorded; posted again once it is decided, they run then).
        let mut waiting_for: Option<(usize, String)> = None;
        for group in groups {
            let mut tasks = Vec::with_capacity(group.len());
            for index in group {
                match parsed[index].take().expect("each call is taken once") {
                    Err((id, problem)) => results[index] = Some(refused(index, id, problem)),
                    // A call cancelled while it waited its turn is recorded
                    // CANCELLED below, not left for later.
                    Ok(call)
                        if waiting_for.is_some()
                            && !self
                                .state
                                .engine
                                .cancelled_in_queue(&self.thread_id, &call.id) =>
                    {
                        let (at, before) = waiting_for.as_ref().expect("checked");
                        let id = call.id.clone();
                        results[index] = Some(refused(
                            index,
                            Some(id),
                            ApiError::ConflictAt {
                                code: crate::http::error::conflicts::WAITS_FOR_APPROVAL,
                                detail: format!(
                                    "not run: call {before:?} (index {at}) waits for approval, and the calls after it do not run before it; post this call again once it is decided"
                                ),
                                errors: vec![serde_json::json!({
                                    "tool_call_id": before,
                                    "message": "waits for approval",
                                })],
                            },
                        ));
                    }
                    Ok(call) => {
                        let at = format!("/calls/{index}");
                        if let Err(problem) =
                            super::threads::check_parent(&self.state, &self.thread_id, &call, &at)
                                .await
                        {
                            results[index] = Some(refused(index, Some(call.id), problem));
                            continue;
                        }
                        let engine = self.state.engine.clone();
                        let request = CallRequest::new(&self.owner, &self.thread_id, call);
                        let id = request.call.id.clone();
                        // Each call in its own task: a client that leaves does not
                        // cut a call half-way. Boxed, as in `with_slot`.
                        tasks.push((
                            index,
                            id,
                            self.state.calls.spawn(Box::pin(
                                async move { engine.execute(request).await }.in_current_span(),
                            )),
                        ));
                    }
                }
            }
            for (index, id, task) in tasks {
                let item = match task.await {
                    Ok(Ok(Executed::Finished(outcome))) => BatchItem {
                        index,
                        tool_call_id: Some(id),
                        status: 200,
                        result: Some(ToolCallResponse::from(outcome)),
                        pending: None,
                        problem: None,
                    },
                    Ok(Ok(Executed::AwaitingApproval(approval))) => {
                        waiting_for.get_or_insert((index, id.clone()));
                        BatchItem {
                            index,
                            tool_call_id: Some(id),
                            status: 202,
                            result: None,
                            pending: Some(PendingApprovalResponse {
                                status: "pending_approval".into(),
                                tool_call_id: approval.tool_call_id.clone(),
                                approval: super::approvals::ApprovalView::at(
                                    approval,
                                    crate::protocol::now_ms(),
                                ),
                            }),
                            problem: None,
                        }
                    }
                    // Another owner wrote to the thread first, between the
                    // check above and this call: nothing of this batch is
                    // stored (a stored call would have made the thread ours),
                    // so the answer is the 404 the check would have given.
                    Ok(Err(Rejection::NotOwner)) => return Err(ApiError::thread_not_found()),
                    Ok(Err(rejection)) => refused(index, Some(id), rejection_to_api(rejection)),
                    Err(e) => refused(
                        index,
                        Some(id),
                        ApiError::Internal(anyhow::anyhow!("call task failed: {e}")),
                    ),
                };
                results[index] = Some(item);
            }
        }
        drop(permit);
        Ok(results
            .into_iter()
            .map(|r| r.expect("every call answered"))
            .collect())
    }
}

/// Whether the thread has recorded every call of `parsed` it could run
/// (an item refused as it was parsed runs nothing either).
async fn all_recorded(
    state: &AppState,
    thread_id: &str,
    parsed: &[Parsed],
) -> Result<bool, ApiError> {
    for call in parsed.iter().flatten() {
        if state.store.tool_call(thread_id, &call.id).await?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `groups` with none longer than `most` (a longer one cut in order).
fn within(groups: Vec<Vec<usize>>, most: usize) -> Vec<Vec<usize>> {
    groups
        .into_iter()
        .flat_map(|group| {
            group
                .chunks(most.max(1))
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The run of the first of `parsed` that the thread has recorded, if any.
async fn first_recorded_run(
    state: &AppState,
    thread_id: &str,
    parsed: &[Parsed],
) -> Result<Option<String>, ApiError> {
    for call in parsed.iter().flatten() {
        if let Some(record) = state.store.tool_call(thread_id, &call.id).await? {
            return Ok(Some(record.run_id));
        }
    }
    Ok(None)
}

/// The run the batch's answered calls are recorded under, when it is one
/// for all: a batch posted again (after a lost answer, say) answers from
/// storage, and its calls stay in the run of its first post, whatever
/// run this post named or was given, so that run is the one to roll back.
/// `None` when no call was answered from storage, or they are in several.
async fn recorded_run(
    state: &AppState,
    thread_id: &str,
    results: &[BatchItem],
) -> Result<Option<String>, ApiError> {
    let replayed = |item: &BatchItem| item.result.as_ref().is_some_and(|r| r.replayed);
    if !results.iter().any(replayed) {
        return Ok(None);
    }
    let mut runs = std::collections::HashSet::new();
    for item in results
        .iter()
        .filter(|i| i.status == 200 || i.status == 202)
    {
        let Some(id) = &item.tool_call_id else {
            continue;
        };
        match state.store.tool_call(thread_id, id).await? {
            Some(record) => {
                runs.insert(record.run_id);
            }
            None => return Ok(None),
        }
    }
    Ok(match runs.into_iter().collect::<Vec<_>>().as_slice() {
        [run] => Some(run.clone()),
        _ => None,
    })
}

/// The problem document the call would have got on its own.
fn refused(index: usize, tool_call_id: Option<String>, problem: ApiError) -> BatchItem {
    let (status, body) = problem.to_problem();
    BatchItem {
        index,
        tool_call_id,
        status: status.as_u16(),
        result: None,
        pending: None,
        problem: Some(Value::Object(body)),
    }
}

/// Indices grouped so that a run of consecutive concurrency-safe calls is
/// one group and every other call is a group of its own.
fn group_consecutive_safe(safe: &[bool]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, &is_safe) in safe.iter().enumerate() {
        match groups.last_mut() {
            Some(last) if is_safe && safe[last[0]] => last.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::{group_consecutive_safe, within};

    #[test]
    fn a_group_wider_than_the_limits_is_cut_in_order() {
        assert_eq!(
            within(vec![vec![0, 1, 2, 3, 4], vec![5], vec![6, 7]], 2),
            vec![vec![0, 1], vec![2, 3], vec![4], vec![5], vec![6, 7]]
        );
        assert_eq!(within(vec![vec![0, 1]], 0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn consecutive_safe_calls_share_a_group() {
        assert_eq!(
            group_consecutive_safe(&[true, true, false, true, false, false, true, true, true]),
            vec![
                vec![0, 1],
                vec![2],
                vec![3],
                vec![4],
                vec![5],
                vec![6, 7, 8]
            ]
        );
        assert!(group_consecutive_safe(&[]).is_empty());
    }
}
