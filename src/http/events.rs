//! `GET /v1/threads/{thread_id}/events`: the thread as one long AG-UI run
//! over SSE. Live events come from the bus; resuming (`Last-Event-ID` or
//! `?after=`) and lagging subscribers read the durable event log, so a
//! client never misses an event.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::routing::get;
use serde::Deserialize;
use tokio::sync::broadcast;
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiQuery};
use super::outbox::{Outbox, Outgoing};
use super::{AppState, AuthUser, ThreadId, check_owner};
use crate::events::{Live, Subscription};
use crate::protocol::agui::{Event, EventBody, RunOutcome};
use crate::store::{PAGE_BYTES, StoredEvent, ThreadSnapshot};

pub fn routes() -> Router<AppState> {
    // HEAD would open (and claim) the thread's stream like GET; it is not
    // offered.
    let no_head = || async {
        (
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            [(axum::http::header::ALLOW, "GET")],
        )
    };
    Router::new().route("/threads/{thread_id}/events", get(get_events).head(no_head))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this event id (same as the `Last-Event-ID` header, which wins).
    #[param(pattern = "^0*[0-9]{1,18}$")]
    pub after: Option<String>,
    /// Start with a MESSAGES_SNAPSHOT of the thread, followed (without
    /// ids) by the unfinished calls it does not show and the approvals
    /// still open, then only new events.
    pub snapshot: Option<bool>,
}

const PAGE: i64 = 64;

/// How long one event may wait for a subscriber that reads nothing before
/// its stream is closed (it resumes from the log with `Last-Event-ID`).
pub(super) const SEND_STALL: Duration = Duration::from_secs(60);

/// How long a stream's last event (its end, at shutdown or on an error) may
/// wait for the client.
pub(super) const FAREWELL: Duration = Duration::from_secs(2);

/// One Server-Sent Event of an AG-UI stream, as OpenAPI 3.1 reads a
/// `text/event-stream` schema: one event (its `id:` and `data:` fields),
/// not the whole stream. Heartbeats are SSE comments, not events.
#[derive(ToSchema)]
#[allow(
    dead_code,
    reason = "describes the stream in the OpenAPI document; never built"
)]
pub struct AgUiSseEvent {
    /// The event's position in the thread's event log, for `Last-Event-ID`
    /// and `?after=`. Events that are not in the log (RUN_STARTED,
    /// MESSAGES_SNAPSHOT and RUN_FINISHED of a stream) have none.
    #[schema(pattern = "^[0-9]+$", nullable = false)]
    pub id: Option<String>,
    /// One AG-UI event as JSON: `type` (RUN_STARTED, TEXT_MESSAGE_*,
    /// TOOL_CALL_START/ARGS/END/RESULT, MESSAGES_SNAPSHOT, RUN_FINISHED,
    /// RUN_ERROR, …), camelCase fields, integer ms `timestamp`, toolgate's
    /// additions under `metadata` (TOOL_CALL_RESULT: `metadata.ui_schema`).
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

fn parse_position(raw: &str, source: &str) -> Result<i64, ApiError> {
    super::parse_digits(raw).ok_or_else(|| ApiError::BadRequest {
        detail: format!("{source} must be a non-negative event id, got {raw:?}"),
        errors: vec![serde_json::json!({"parameter": source, "message": "not an event id"})],
    })
}

/// Subscribe to a thread's AG-UI events (SSE).
///
/// Opens with RUN_STARTED, then (with `snapshot=true`) MESSAGES_SNAPSHOT,
/// then every logged event after the resume point, then live events. Each
/// logged event carries its `id:`; heartbeats are SSE comments. Opening a
/// stream on a new thread id claims the thread for the caller. The stream
/// does not end: the explorer's Execute waits for an end that never comes,
/// so watch it with `curl -N` or an `EventSource` instead.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/events", tag = "events",
    params(("thread_id" = String, Path,), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = "^0*[0-9]{1,18}$", description = "Resume after this event id")),
    responses(
        (status = 200, description = "AG-UI event stream", content_type = "text/event-stream", body = AgUiSseEvent),
        (status = 400, description = "Resume point not a number or in the future", content_type = "application/problem+json"),
        (status = 404, description = "Thread belongs to another owner", content_type = "application/problem+json"),
        (status = 429, description = "Too many snapshots and contexts being read at once, or this owner holds server.max_streams_per_owner streams open already (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_events(
    State(state): State<AppState>,
    user: AuthUser,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let thread = ThreadId::parse(thread_id)?;
    // Two resume points cannot both be followed (a repeated query
    // parameter is refused alike).
    if headers.get_all("last-event-id").iter().count() > 1 {
        return Err(ApiError::BadRequest {
            detail: "Last-Event-ID is given more than once: send one resume point".into(),
            errors: vec![
                serde_json::json!({"parameter": "Last-Event-ID", "message": "given more than once"}),
            ],
        });
    }
    let header = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str().map_err(|_| ApiError::BadRequest {
                detail: "Last-Event-ID must be a non-negative event id, got bytes that are not \
                         visible ASCII"
                    .into(),
                errors: vec![
                    serde_json::json!({"parameter": "Last-Event-ID", "message": "not an event id"}),
                ],
            })
        })
        .transpose()?;
    let after = match (header, q.after.as_deref()) {
        (Some(h), _) => Some((parse_position(h, "Last-Event-ID")?, "Last-Event-ID")),
        (None, Some(a)) => Some((parse_position(a, "after")?, "after")),
        (None, None) => None,
    };
    let in_future = |after: i64, parameter: &str, last: i64| ApiError::BadRequest {
        detail: format!(
            "{parameter}: event id {after} is in the future: the thread's last event is {last}"
        ),
        errors: vec![serde_json::json!({"parameter": parameter, "message": "in the future"})],
    };
    // A resume point past the start of a thread that does not exist yet is
    // refused before the thread is claimed: a refused request leaves nothing.
    if let Some((after, parameter)) = after
        && after > 0
        && !check_owner(&state, &user, &thread).await?
    {
        return Err(in_future(after, parameter, 0));
    }
    let stream_slot = state.open_stream(&user.owner)?;
    state.store.claim_thread(&thread.0, &user.owner).await?;
    // Subscribe before reading the log, so nothing falls between the two.
    let live = state.bus.subscribe(&thread.0);
    // A snapshot and the event it ends at are read as of one moment: a
    // result committed meanwhile is in the snapshot or streamed, never both.
    let (snapshot, last) = if q.snapshot.unwrap_or(false) {
        // Held until the snapshot is handed to the response.
        let read = state.enter_thread_read(&user.owner).await?;
        // The unfinished calls and open approvals are read as of the same
        // moment: each was announced before the snapshot's last event, and
        // its result (or decision) comes after it.
        let snapshot = state
            .store
            .snapshot(&thread.0, crate::protocol::now_ms())
            .await?;
        let last = snapshot.last_event_seq;
        (Some((snapshot, read)), last)
    } else {
        (None, state.store.last_event_seq(&thread.0).await?)
    };
    if let Some((after, parameter)) = after
        && after > last
    {
        return Err(in_future(after, parameter, last));
    }
    // A snapshot stands for the whole past, so the stream goes on after it
    // even when a resume point was sent too (a browser's EventSource adds
    // Last-Event-ID to a `?snapshot=true` URL when it reconnects): replaying
    // events the snapshot already holds would repeat its messages. Without a
    // snapshot the stream starts after the resume point, or at the
    // beginning of the log.
    let start = match (&snapshot, after) {
        (Some(_), _) => last,
        (None, Some((after, _))) => after,
        (None, None) => 0,
    };
    let (tx, events) = Outbox::new();
    let stream = Stream {
        state: state.clone(),
        thread_id: thread.0,
        owner: user.owner,
        expires: expiry(user.expires_at, state.settings.auth.leeway_secs),
        tx,
        _slot: stream_slot,
    };
    tokio::spawn(tracing::Instrument::in_current_span(stream_thread(
        stream, start, snapshot, live,
    )));
    Ok(Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(
                state.settings.server.sse_heartbeat_secs.max(1),
            ))
            .text("heartbeat"),
    ))
}

/// One open event stream: its thread, whose it is, where its events go,
/// and the owner's stream slot it holds until it ends.
struct Stream {
    state: AppState,
    thread_id: String,
    owner: String,
    /// When the token that opened it expires: the stream ends then, with
    /// RUN_ERROR `TOKEN_EXPIRED` (a client reconnects with a fresh token
    /// and `Last-Event-ID`).
    expires: tokio::time::Instant,
    tx: Outbox,
    _slot: crate::engine::limits::StreamPermit,
}

/// The moment a token expiring at `exp` (Unix seconds) is refused, with
/// the `leeway` every request is allowed, on the runtime's clock; a
/// century away at most. A stream lasts as long as its token would be
/// taken: one opened within the leeway does not end at once (to be
/// opened again, and again, by an `EventSource`).
pub(super) fn expiry(exp: u64, leeway: u64) -> tokio::time::Instant {
    let exp = exp.saturating_add(leeway);
    let now = tokio::time::Instant::now();
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let left = Duration::from_secs(exp.saturating_sub(unix_now).min(100 * 365 * 86_400));
    now + left
}

impl Stream {
    /// A page slot of the stream's owner for the query of one page of its
    /// replay. It waits as long as it takes (the replay goes on once the
    /// owner's other reads are done), unless the client leaves or toolgate
    /// shuts down.
    async fn page_slot(&self) -> Result<crate::engine::limits::Permit, End> {
        tokio::select! {
            permit = self.state.page_reads.wait_for(&self.owner) => Ok(permit),
            _ = self.tx.closed() => Err(End::Gone),
            _ = self.state.shutdown.cancelled() => Err(End::Shutdown),
            _ = tokio::time::sleep_until(self.expires) => Err(End::Expired),
        }
    }

    /// Hands one event to the response. It fails when the stream is over:
    /// the client has gone or has read nothing for [`SEND_STALL`] (a stream
    /// that cannot deliver must not hold its thread's events), or toolgate
    /// is shutting down (the event stays unsent; the client resumes from
    /// the last id it has).
    async fn deliver(&self, event: Outgoing) -> Result<(), End> {
        if self.state.shutdown.is_cancelled() {
            return Err(End::Shutdown);
        }
        if tokio::time::Instant::now() >= self.expires {
            return Err(End::Expired);
        }
        tokio::select! {
            sent = tokio::time::timeout(SEND_STALL, self.tx.send(event)) => match sent {
                Ok(Ok(())) => Ok(()),
                _ => Err(End::Gone),
            },
            _ = self.state.shutdown.cancelled() => Err(End::Shutdown),
            _ = tokio::time::sleep_until(self.expires) => Err(End::Expired),
        }
    }
}

/// A stream's MESSAGES_SNAPSHOT: the thread as of one moment, and the
/// whole-thread read slot it holds until it is handed to the response.
type Snapshot = (ThreadSnapshot, crate::engine::limits::Permit);

fn untracked(event: &Event) -> Outgoing {
    Outgoing::new(None, &event.to_json())
}

/// A logged event as streamed, with its seq as the SSE id; a result event
/// read back as a reference to its message is rebuilt first.
fn logged(state: &AppState, event: &StoredEvent) -> Result<Outgoing, crate::store::StoreError> {
    let data = state.replay_cache.event_data(event)?;
    Ok(Outgoing::new(Some(event.seq.to_string()), &data))
}

struct SubscriberGauge;

impl SubscriberGauge {
    fn new() -> Self {
        metrics::gauge!("toolgate_sse_subscribers").increment(1.0);
        SubscriberGauge
    }
}

impl Drop for SubscriberGauge {
    fn drop(&mut self) {
        metrics::gauge!("toolgate_sse_subscribers").decrement(1.0);
    }
}

/// The START…END groups (a tool call's announcement, a text message) a
/// stream is inside: their START delivered, their END not yet. AG-UI
/// clients check that events come inside their group and that a run ends
/// with none open, so a stream that starts inside a group (a resume point
/// between its START and END) opens it again first, and one that ends at
/// shutdown closes the groups it is inside.
#[derive(Default)]
struct Open {
    /// The id of each open group and its START event as logged, oldest
    /// first.
    groups: Vec<(Group, Arc<str>)>,
}

#[derive(PartialEq)]
enum Group {
    ToolCall(String),
    Text(String),
}

impl Open {
    /// Notes a logged event the stream carries.
    fn track(&mut self, event: &StoredEvent) {
        let group = |key: &str| -> Option<String> {
            let data: serde_json::Value = serde_json::from_str(&event.data).ok()?;
            data.get(key)?.as_str().map(str::to_string)
        };
        match event.event_type.as_str() {
            "TOOL_CALL_START" => {
                if let Some(id) = group("toolCallId") {
                    self.groups.push((Group::ToolCall(id), event.data.clone()));
                }
            }
            "TEXT_MESSAGE_START" => {
                if let Some(id) = group("messageId") {
                    self.groups.push((Group::Text(id), event.data.clone()));
                }
            }
            "TOOL_CALL_END" => {
                if let Some(ended) = group("toolCallId").map(Group::ToolCall) {
                    self.groups.retain(|(g, _)| *g != ended);
                }
            }
            "TEXT_MESSAGE_END" => {
                if let Some(ended) = group("messageId").map(Group::Text) {
                    self.groups.retain(|(g, _)| *g != ended);
                }
            }
            _ => {}
        }
    }

    /// The groups open just after event `at` of the thread: a group's
    /// events are committed together, one after another (START, its
    /// content, END), so its START is among the few events just before.
    async fn at(stream: &Stream, at: i64) -> Result<Open, End> {
        const WINDOW: i64 = 16;
        let mut open = Open::default();
        if at <= 0 {
            return Ok(open);
        }
        let mut from = (at - WINDOW).max(0);
        // A window of large events comes in more than one page.
        while from < at {
            let _slot = stream.page_slot().await?;
            let window = stream
                .state
                .store
                .events_after(&stream.thread_id, from, at - from)
                .await
                .map_err(End::Failed)?;
            let Some(last) = window.last().map(|e| e.seq) else {
                break;
            };
            for event in window.iter().filter(|e| e.seq <= at) {
                open.track(event);
            }
            from = last;
        }
        Ok(open)
    }

    /// The STARTs of the open groups, as logged but without their ids (the
    /// client's resume point stays where it is).
    fn reopening(&self) -> Vec<Outgoing> {
        self.groups
            .iter()
            .map(|(_, start)| Outgoing::new(None, start))
            .collect()
    }

    /// ENDs for the open groups, newest first.
    fn closing(&self) -> Vec<Event> {
        self.groups
            .iter()
            .rev()
            .map(|(group, _)| {
                Event::new(match group {
                    Group::ToolCall(id) => EventBody::ToolCallEnd {
                        tool_call_id: id.clone(),
                    },
                    Group::Text(id) => EventBody::TextMessageEnd {
                        message_id: id.clone(),
                    },
                })
            })
            .collect()
    }
}

/// Why a stream stopped following its thread.
enum End {
    /// The client has gone, or read nothing for [`SEND_STALL`]: nobody to
    /// say goodbye to.
    Gone,
    /// toolgate is shutting down: the stream ends with RUN_FINISHED.
    Shutdown,
    /// The token that opened the stream expired: it ends with RUN_ERROR.
    Expired,
    /// The event log could not be read: the stream ends with RUN_ERROR.
    Failed(crate::store::StoreError),
    /// The thread was deleted (at this time): the stream ends with
    /// RUN_ERROR.
    Deleted(i64),
}

async fn stream_thread(stream: Stream, start: i64, snapshot: Option<Snapshot>, live: Subscription) {
    let _gauge = SubscriberGauge::new();
    let run_id = format!("sub_{}", uuid::Uuid::now_v7().simple());
    let tx = &stream.tx;
    let started = Event::new(EventBody::RunStarted {
        thread_id: stream.thread_id.clone(),
        run_id: run_id.clone(),
    });
    // The first event of a new channel never waits.
    if tx.send(untracked(&started)).await.is_err() {
        return;
    }
    let mut open = Open::default();
    let end = follow(&stream, start, snapshot, live, &mut open).await;
    // At shutdown the last events wait briefly: a client that reads nothing
    // keeps no shutdown waiting. An expired token's stream waits as long
    // as any event may: a client still reading, however slowly, gets them.
    let farewell = match end {
        End::Expired => SEND_STALL,
        _ => FAREWELL,
    };
    if matches!(end, End::Shutdown | End::Expired) {
        // A run ends with no group open: close the ones the stream is
        // inside (a resumed stream opens them again).
        for end in open.closing() {
            let sent = tokio::time::timeout(farewell, tx.send(untracked(&end))).await;
            if !matches!(sent, Ok(Ok(()))) {
                return;
            }
        }
    }
    let ev = match end {
        End::Gone => return,
        End::Expired => Event::new(EventBody::RunError {
            message: "the bearer token that opened this stream has expired; reconnect with a \
                      valid token and Last-Event-ID to resume"
                .into(),
            code: Some("TOKEN_EXPIRED".into()),
        }),
        End::Shutdown => Event::new(EventBody::RunFinished {
            thread_id: stream.thread_id.clone(),
            run_id,
            result: None,
            outcome: Some(RunOutcome::Success {
                pending_tool_call_ids: None,
            }),
        }),
        End::Deleted(at_ms) => Event::new(EventBody::RunError {
            message: super::error::thread_deleted_detail(&stream.thread_id, at_ms),
            code: Some(super::error::THREAD_DELETED.into()),
        }),
        End::Failed(e) => {
            tracing::error!(error = %e, "event stream failed");
            Event::new(EventBody::RunError {
                message: "the event log could not be read; reconnect with Last-Event-ID to resume"
                    .into(),
                code: Some("STORE_UNAVAILABLE".into()),
            })
        }
    };
    let _ = tokio::time::timeout(farewell, tx.send(untracked(&ev))).await;
}

/// The stream after its RUN_STARTED: the snapshot, the log from `start`,
/// then live events, until it ends.
async fn follow(
    stream: &Stream,
    start: i64,
    snapshot: Option<Snapshot>,
    mut live: Subscription,
    open: &mut Open,
) -> End {
    let state = &stream.state;
    let mut listed = Listed::default();
    if let Some((
        ThreadSnapshot {
            messages,
            unfinished,
            open_approvals,
            placements,
            ..
        },
        read,
    )) = snapshot
    {
        let messages = super::snapshot::snapshot_messages(messages, &placements, &unfinished);
        let held = super::snapshot::held_calls(&messages);
        let recorded: std::collections::HashSet<&str> =
            placements.iter().map(|p| p.id.as_str()).collect();
        listed = Listed(
            held.iter()
                .filter(|id| !recorded.contains(*id))
                .map(|id| id.to_string())
                .collect(),
        );
        // Calls not finished that the snapshot leaves out: one whose id is
        // a message's, or recorded before calls kept where they were
        // announced.
        let unshown: Vec<Event> = unfinished
            .iter()
            .filter(|call| !held.contains(call.id.as_str()))
            .flat_map(crate::engine::announcement_of)
            .collect();
        let ev = Event::new(EventBody::MessagesSnapshot { messages });
        let sse = untracked(&ev);
        drop(ev);
        let delivered = stream.deliver(sse).await;
        drop(read);
        if let Err(end) = delivered {
            return end;
        }
        // Such a call (running, or waiting for a person) is announced
        // again, as when it started, so its result (streamed when it
        // comes) answers a call the frontend knows. The snapshot shows the
        // others: announcing those again would give the stock client
        // their arguments twice.
        for ev in &unshown {
            if let Err(end) = stream.deliver(untracked(ev)).await {
                return end;
            }
        }
        // The snapshot holds messages; a call still waiting for a person
        // is announced again, as when it was asked for, so a frontend
        // that (re)opens with a snapshot can show it. One asked for after
        // the snapshot's moment comes from the log instead, once.
        for approval in &open_approvals {
            let ev = crate::engine::approval_required(approval);
            if let Err(end) = stream.deliver(untracked(&ev)).await {
                return end;
            }
        }
    }
    let mut last = start;
    // A resume point inside a group: open it again first.
    if start > 0 {
        *open = match Open::at(stream, start).await {
            Ok(open) => open,
            Err(end) => return end,
        };
        for start in open.reopening() {
            if let Err(end) = stream.deliver(start).await {
                return end;
            }
        }
    }
    if let Err(end) = catch_up(stream, &mut last, open, &listed).await {
        return end;
    }
    // Every heartbeat the log is read after the last event sent: an event
    // that committed with no word on the bus (a commit whose answer the
    // connection lost, another process writing to the same database) is
    // sent then. Reading an empty page costs one indexed query.
    let every = Duration::from_secs(state.settings.server.sse_heartbeat_secs.max(1));
    let mut check = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let received = tokio::select! {
            _ = state.shutdown.cancelled() => return End::Shutdown,
            _ = stream.tx.closed() => return End::Gone,
            _ = tokio::time::sleep_until(stream.expires) => return End::Expired,
            _ = check.tick() => {
                match catch_up(stream, &mut last, open, &listed).await {
                    // The database did not answer: the next look tries again.
                    Err(End::Failed(e)) => {
                        tracing::debug!(error = %e, "an event stream's look at the log failed");
                    }
                    Err(end) => return end,
                    Ok(()) => {}
                }
                // Deleted by a process whose notice did not arrive.
                if let Ok(Some(crate::store::ThreadOwner {
                    deleted_at_ms: Some(at_ms),
                    ..
                })) = state.store.thread_owner(&stream.thread_id).await
                {
                    return End::Deleted(at_ms);
                }
                continue;
            }
            received = live.recv() => received,
        };
        let result = match received {
            Ok(Live::Deleted(at_ms)) => Err(End::Deleted(at_ms)),
            Ok(live) if live.seq() <= last => Ok(()),
            Ok(Live::Event(ev)) if ev.seq == last + 1 && listed.announces(&ev) => {
                last = ev.seq;
                Ok(())
            }
            Ok(Live::Event(ev)) if ev.seq == last + 1 => match logged(state, &ev) {
                Ok(sse) => {
                    last = ev.seq;
                    let delivered = stream.deliver(sse).await;
                    if delivered.is_ok() {
                        open.track(&ev);
                    }
                    delivered
                }
                Err(e) => Err(End::Failed(e)),
            },
            // A large event (carried as its position), a gap (events
            // committed in another order) or a lag: the log has everything.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                catch_up(stream, &mut last, open, &listed).await
            }
            Err(broadcast::error::RecvError::Closed) => Err(End::Gone),
        };
        if let Err(end) = result {
            return end;
        }
    }
}

/// Calls a snapshot listed before anyone posted them (an assistant message
/// declares them): the client holds each with its arguments, so their
/// announcements are not sent on the stream the snapshot opened, where
/// TOOL_CALL_ARGS would give the stock client the arguments twice. Their
/// results are sent.
#[derive(Default)]
struct Listed(std::collections::HashSet<String>);

impl Listed {
    /// Whether `ev` is the announcement of a listed call.
    fn announces(&self, ev: &StoredEvent) -> bool {
        !self.0.is_empty()
            && matches!(
                ev.event_type.as_str(),
                "TOOL_CALL_START" | "TOOL_CALL_ARGS" | "TOOL_CALL_END"
            )
            && serde_json::from_str::<serde_json::Value>(&ev.data)
                .ok()
                .and_then(|v| Some(self.0.contains(v.get("toolCallId")?.as_str()?)))
                .unwrap_or(false)
    }
}

async fn catch_up(
    stream: &Stream,
    last: &mut i64,
    open: &mut Open,
    listed: &Listed,
) -> Result<(), End> {
    let state = &stream.state;
    // Events asked for per page: as many as fitted the last page cut by
    // its size, and one more, so a log of large events is not read many
    // times over (Postgres sends every row a query names, also those past
    // the page's bytes); back up to `PAGE` as they get smaller.
    let mut limit = PAGE;
    loop {
        // The slot is the query's: a client that reads slowly holds its
        // page, never a slot the owner's other reads wait for.
        let page = {
            let _slot = stream.page_slot().await?;
            state
                .store
                .events_after(&stream.thread_id, *last, limit)
                .await
                .map_err(End::Failed)?
        };
        // A short page is the end of the log, unless its size ended it.
        let by_size = page.iter().map(StoredEvent::page_bytes).sum::<usize>() >= PAGE_BYTES;
        let full = page.len() as i64 == limit || by_size;
        limit = match by_size {
            true => (page.len() as i64 + 1).min(PAGE),
            false => (limit * 2).min(PAGE),
        };
        for ev in page {
            if listed.announces(&ev) {
                *last = ev.seq;
                continue;
            }
            let sse = logged(state, &ev).map_err(End::Failed)?;
            *last = ev.seq;
            stream.deliver(sse).await?;
            open.track(&ev);
        }
        if !full {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(seq: i64, event: EventBody) -> StoredEvent {
        let event = Event::new(event);
        StoredEvent {
            thread_id: "t".into(),
            seq,
            event_type: event.body.type_name().into(),
            data: event.to_json().into(),
            created_at_ms: 0,
            from_message: None,
        }
    }

    #[test]
    fn open_groups_are_followed_reopened_and_closed() {
        let start = logged(
            1,
            EventBody::ToolCallStart {
                tool_call_id: "c1".into(),
                tool_call_name: "echo".into(),
                parent_message_id: None,
            },
        );
        let mut open = Open::default();
        for event in [
            start.clone(),
            logged(
                2,
                EventBody::ToolCallArgs {
                    tool_call_id: "c1".into(),
                    delta: "{}".into(),
                },
            ),
            logged(
                3,
                EventBody::TextMessageStart {
                    message_id: "m1".into(),
                    role: "user".into(),
                },
            ),
        ] {
            open.track(&event);
        }
        assert_eq!(open.reopening().len(), 2);
        let closing: Vec<String> = open.closing().iter().map(Event::to_json).collect();
        assert_eq!(closing.len(), 2);
        assert!(closing[0].contains(r#""type":"TEXT_MESSAGE_END","messageId":"m1""#));
        assert!(closing[1].contains(r#""type":"TOOL_CALL_END","toolCallId":"c1""#));
        open.track(&logged(
            4,
            EventBody::TextMessageEnd {
                message_id: "m1".into(),
            },
        ));
        open.track(&logged(
            5,
            EventBody::ToolCallEnd {
                tool_call_id: "c1".into(),
            },
        ));
        assert!(open.groups.is_empty());
        assert!(open.closing().is_empty());
    }
}
