//! `GET /v1/approvals/events`: the approvals a caller may decide, as they
//! open and as they are decided, for an approval screen. An approver (who
//! cannot open the owners' thread streams) learns of every owner's; anyone
//! else of their own.
//!
//! The stream looks at the approvals in the database (their ids and
//! moments only): at once when this process asks or decides one (its
//! event bus says so), and every `approvals.stream_look_secs` (a second)
//! besides, so approvals asked and decided in another toolgate process on
//! the same database show too.
//! It has no resume point: a client that reconnects is told every open
//! approval again, then `approvals.synced` naming them.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use serde::Deserialize;
use utoipa::IntoParams;

use super::approvals::{ApprovalView, is_approver};
use super::error::{ApiError, ApiQuery};
use super::outbox::{Outbox, Outgoing};
use super::{AppState, AuthUser, ThreadId};
use crate::protocol::agui::{Event, EventBody};
use crate::protocol::now_ms;
use crate::store::{ApprovalStatus, StoreError};

/// The least time between two looks woken by this process's approvals
/// (a burst of them is one look).
const LEAST_GAP: Duration = Duration::from_millis(50);

/// Approvals listed per look, at most (their ids and moments only).
const MOST_OPEN: i64 = 10_000;

/// How far back a look finds approvals asked and decided since the look
/// before (with room for a commit that took a while, and for the clock of
/// another process).
const RECENT_MS: i64 = 10_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalEventsQuery {
    /// Only the approvals of this thread (of the caller's, or for an
    /// approver of any owner's).
    #[param(value_type = Option<crate::protocol::calls::Id>)]
    pub thread_id: Option<String>,
}

/// Stream the approvals the caller may decide.
///
/// Server-sent events, each an AG-UI `CUSTOM` event: first
/// `approval.pending` for every approval open now (oldest first), then
/// `approval.pending` for each one asked later and `approval.decided` once
/// one is approved, denied or expired, also one asked and decided between
/// two looks (`value`: the approval as `GET /v1/approvals/{id}` shows it).
/// After the approvals open when it connects, `approvals.synced` (`value`:
/// `{"open": [ids]}`) names them all: a screen drops any other it holds.
/// An approver's stream has every owner's approvals, anyone else's their
/// own. Approvals are looked at in the database at once when this process
/// asks or decides one, and every `approvals.stream_look_secs` (a second)
/// besides, so those of other toolgate processes on it show too. There is no resume point:
/// reconnected, a client is told every open approval again. At the
/// token's `exp` (plus `auth.leeway_secs`) the stream ends with `RUN_ERROR`
/// `TOKEN_EXPIRED`; at
/// shutdown with `RUN_ERROR` `SHUTTING_DOWN`; when the database cannot be
/// read with `RUN_ERROR` `STORE_UNAVAILABLE`; a client that reads nothing
/// for a minute is dropped. An open approval that went with its thread
/// (deleted) before it was told decided is told `approval.removed`
/// (`value`: `{"id", "reason"}`). Counts against `server.max_streams_per_owner`.
#[utoipa::path(get, path = "/v1/approvals/events", tag = "approvals",
    params(ApprovalEventsQuery),
    responses(
        (status = 200, description = "The approvals stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad thread_id", content_type = "application/problem+json"),
        (status = 429, description = "This owner holds server.max_streams_per_owner streams already (see Retry-After)", content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn approval_events(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(q): ApiQuery<ApprovalEventsQuery>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let thread = q.thread_id.map(ThreadId::parse).transpose()?;
    let owner = (!is_approver(&state, &user)).then(|| user.owner.clone());
    let slot = state.open_stream(&user.owner)?;
    let (tx, events) = Outbox::new();
    let watch = Watch {
        state: state.clone(),
        owner,
        caller: user.owner,
        thread: thread.map(|t| t.0),
        expires: super::events::expiry(user.expires_at, state.settings.auth.leeway_secs),
        tx,
        _slot: slot,
    };
    tokio::spawn(tracing::Instrument::in_current_span(watch.run()));
    Ok(Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(
                state.settings.server.sse_heartbeat_secs.max(1),
            ))
            .text("heartbeat"),
    ))
}

/// What a stream has told so far.
#[derive(Default)]
struct Seen {
    /// When it first looked: approvals asked since are its news.
    opened_at: Option<i64>,
    /// Approvals open at the last look (id, when asked).
    open: HashMap<String, i64>,
    /// Approvals asked since it opened that it has told decided.
    told: std::collections::HashSet<String>,
}

struct Watch {
    state: AppState,
    /// Whose approvals: `None` for an approver (every owner's).
    owner: Option<String>,
    /// Who opened the stream.
    caller: String,
    thread: Option<String>,
    expires: tokio::time::Instant,
    tx: Outbox,
    _slot: crate::engine::limits::StreamPermit,
}

/// Why a stream ended.
enum End {
    Gone,
    Expired,
    Shutdown,
    Unavailable,
}

impl Watch {
    async fn run(self) {
        let end = self.watch().await;
        let (message, code) = match end {
            End::Gone => return,
            End::Expired => (
                "the token that opened this stream has expired; reconnect with a fresh one",
                "TOKEN_EXPIRED",
            ),
            End::Shutdown => (
                "toolgate is shutting down; reconnect once it is back",
                "SHUTTING_DOWN",
            ),
            End::Unavailable => (
                "the database cannot be read now; reconnect once it is back",
                "STORE_UNAVAILABLE",
            ),
        };
        let event = Event::new(EventBody::RunError {
            message: message.into(),
            code: Some(code.into()),
        });
        // The end waits a moment for the client, not longer.
        let _ = tokio::time::timeout(
            super::events::FAREWELL,
            self.tx.send(Outgoing::new(None, &event.to_json())),
        )
        .await;
    }

    /// The approvals open at each look, against those of the look before.
    async fn watch(&self) -> End {
        let mut seen = Seen::default();
        let every = Duration::from_secs(self.state.settings.approvals.stream_look_secs.max(1));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = self.state.bus.approval_changes();
        let mut looked = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                // This process's approvals: at once, a burst as one look.
                Ok(()) = changes.changed() => {
                    tokio::time::sleep_until(looked + LEAST_GAP).await;
                    changes.mark_unchanged();
                }
                _ = self.tx.closed() => return End::Gone,
                _ = self.state.shutdown.cancelled() => return End::Shutdown,
                _ = tokio::time::sleep_until(self.expires) => return End::Expired,
            }
            looked = tokio::time::Instant::now();
            match self.look(&mut seen).await {
                Ok(None) => {}
                Ok(Some(end)) => return end,
                Err(e) => {
                    tracing::warn!(error = %e, caller = %self.caller, "an approvals stream cannot read the approvals");
                    return End::Unavailable;
                }
            }
        }
    }

    /// The caller's approvals asked at `since` or later (only the open
    /// ones at `open_at`, when given), oldest first, by id and moment.
    async fn outlines(
        &self,
        open_at: Option<i64>,
        since: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.state
            .store
            .approval_outlines(
                self.owner.as_deref(),
                self.thread.as_deref(),
                open_at,
                since,
                MOST_OPEN,
            )
            .await
    }

    /// One look: `approval.pending` for each approval open now that was
    /// not before, `approval.decided` for each open before that is not
    /// now, and for each asked since the stream opened and decided before
    /// a look found it open (within a second). Only the ids and moments
    /// of the approvals are read at each look; an approval is read whole
    /// when it is told, and one decided by then is not told open. After
    /// the first look, `approvals.synced` names every approval open then.
    /// `Some` once the stream ends.
    async fn look(&self, seen: &mut Seen) -> Result<Option<End>, StoreError> {
        let now = now_ms();
        let first = seen.opened_at.is_none();
        let opened_at = *seen.opened_at.get_or_insert(now);
        let open_now = self.outlines(Some(now), i64::MIN).await?;
        for (id, _) in &open_now {
            if seen.open.contains_key(id) {
                continue;
            }
            let Some(approval) = self.state.store.approval(id).await? else {
                continue;
            };
            // Decided since it was listed: told decided at the next look.
            if approval.status_at(now_ms()) != ApprovalStatus::Pending {
                continue;
            }
            let view = super::approvals::with_call(&self.state, approval, now).await?;
            if let Some(end) = self.send("approval.pending", json(view)).await {
                return Ok(Some(end));
            }
        }
        let still_open: HashMap<String, i64> = open_now.into_iter().collect();
        let mut settled: Vec<(String, i64)> = seen
            .open
            .iter()
            .filter(|(id, _)| !still_open.contains_key(*id))
            .map(|(id, at)| (id.clone(), *at))
            .collect();
        settled.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        seen.open = still_open;
        for (id, _) in settled {
            if let Some(end) = self.tell_decided(seen, &id, now).await? {
                return Ok(Some(end));
            }
            // Gone with its thread, deleted: the screen drops it.
            if !seen.told.contains(&id)
                && self.state.store.approval(&id).await?.is_none()
                && let Some(end) = self
                    .send(
                        "approval.removed",
                        serde_json::json!({"id": id, "reason": "its thread was deleted"}),
                    )
                    .await
            {
                return Ok(Some(end));
            }
        }
        if first {
            let mut open: Vec<(&String, &i64)> = seen.open.iter().collect();
            open.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
            let ids: Vec<&String> = open.into_iter().map(|(id, _)| id).collect();
            return Ok(self
                .send("approvals.synced", serde_json::json!({ "open": ids }))
                .await);
        }
        // Asked and decided between two looks: never seen open, told as
        // decided all the same. Those asked before the stream opened and
        // decided are no news; one asked more than a while before this
        // look was open at a look since, or is told already.
        let since = opened_at.max(now - RECENT_MS);
        let recent = self.outlines(None, since).await?;
        for (id, _) in &recent {
            if seen.open.contains_key(id) || seen.told.contains(id) {
                continue;
            }
            if let Some(end) = self.tell_decided(seen, id, now).await? {
                return Ok(Some(end));
            }
        }
        // Those too old to be listed again need no remembering.
        let listed: std::collections::HashSet<&String> = recent.iter().map(|(id, _)| id).collect();
        seen.told.retain(|id| listed.contains(id));
        Ok(None)
    }

    /// `approval.decided` for approval `id`, once it is decided (or past
    /// its deadline; whether the sweeper has recorded that yet or not).
    /// One still open is left for a later look. `Some` once the stream
    /// ends.
    async fn tell_decided(
        &self,
        seen: &mut Seen,
        id: &str,
        now: i64,
    ) -> Result<Option<End>, StoreError> {
        let Some(approval) = self.state.store.approval(id).await? else {
            return Ok(None);
        };
        if approval.status_at(now) == ApprovalStatus::Pending {
            return Ok(None);
        }
        seen.told.insert(id.to_string());
        let view = super::approvals::with_call(&self.state, approval, now).await?;
        Ok(self.send("approval.decided", json(view)).await)
    }

    /// Hands one event to the response; `Some` once the client has gone,
    /// has read nothing for a minute (a stream that cannot deliver must
    /// not hold its events), its token expires, or toolgate shuts down.
    async fn send(&self, name: &str, value: serde_json::Value) -> Option<End> {
        let event = Event::new(EventBody::Custom {
            name: name.into(),
            value,
        });
        tokio::select! {
            sent = tokio::time::timeout(
                super::events::SEND_STALL,
                self.tx.send(Outgoing::new(None, &event.to_json())),
            ) => (!matches!(sent, Ok(Ok(())))).then_some(End::Gone),
            _ = self.state.shutdown.cancelled() => Some(End::Shutdown),
            _ = tokio::time::sleep_until(self.expires) => Some(End::Expired),
        }
    }
}

fn json(view: ApprovalView) -> serde_json::Value {
    serde_json::to_value(view).expect("an approval serializes")
}
