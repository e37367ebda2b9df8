//! The HTTP layer: one module per resource, each exporting its routes.
//! Handlers are thin: they authenticate, parse, and hand over to the engine
//! or the store.

mod approval_stream;
mod approvals;
mod audit;
mod batches;
pub mod cors;
pub mod error;
mod events;
mod health;
pub mod openapi;
mod outbox;
mod resume;
mod run_fields;
mod runs;
mod snapshot;
mod threads;
mod tools;
mod workspace;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::{HeaderName, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{Keys, bearer_token};
use crate::config::Settings;
use crate::engine::Engine;
use crate::events::EventBus;
use crate::store::writer::Writer;
use crate::store::{DynStore, ThreadOwner};
use error::ApiError;

/// What every handler shares, behind one `Arc`: axum clones the state for
/// every request (and again per extractor and middleware), and one
/// reference count is cheaper to bump than one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct Shared {
    pub engine: Arc<Engine>,
    pub store: DynStore,
    pub writer: Writer,
    pub bus: Arc<EventBus>,
    pub keys: Arc<Keys>,
    pub settings: Arc<Settings>,
    pub metrics: PrometheusHandle,
    pub limits: Arc<crate::engine::limits::Limits>,
    /// Whole-thread reads running at once.
    pub thread_reads: Arc<crate::engine::limits::Reads>,
    /// Pages of history and of the event log being read at once.
    pub page_reads: Arc<crate::engine::limits::Reads>,
    /// Event streams open per owner.
    pub streams: Arc<crate::engine::limits::Streams>,
    pub workspaces: Arc<crate::workspace::Workspaces>,
    /// Threads whose owner is known (owners never change).
    pub thread_owners: Arc<KnownOwners>,
    pub sandbox: Arc<crate::sandbox::Sandbox>,
    /// Result events rebuilt for replays, kept for the next replay.
    pub replay_cache: Arc<crate::engine::ReplayCache>,
    /// Removes what long threads' deletions left, in the background.
    pub purger: crate::store::purge::Purger,
    /// Cancelled at shutdown: open SSE streams end with RUN_FINISHED.
    pub shutdown: CancellationToken,
    /// The tasks that run calls (and AG-UI runs) apart from their request,
    /// so that a client that leaves does not cut a call: shutdown gives
    /// them the grace too, not only open connections.
    pub calls: tokio_util::task::TaskTracker,
}

/// The authenticated caller. A handler that takes it cannot forget the check.
#[derive(Debug, Clone)]
pub struct AuthUser {
    pub owner: String,
    /// Scopes of the token (`scope` claim, space-separated).
    pub scopes: Vec<String>,
    /// When the token expires (`exp`, Unix seconds): an event stream it
    /// opened ends then.
    pub expires_at: u64,
}

impl AuthUser {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

impl FromRequestParts<AppState> for AuthUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        // Two credentials are none: which one a proxy in front would have
        // checked is not known.
        let mut all = parts.headers.get_all(header::AUTHORIZATION).iter();
        if all.next().is_some() && all.next().is_some() {
            return Err(ApiError::Unauthorized(
                "more than one Authorization header; send exactly one".into(),
            ));
        }
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| {
                v.to_str().map_err(|_| {
                    ApiError::Unauthorized("the Authorization header is not valid text".into())
                })
            })
            .transpose()?;
        let token = bearer_token(header).map_err(|e| ApiError::Unauthorized(e.to_string()))?;
        let claims = state
            .keys
            .verify(token)
            .map_err(|e| ApiError::Unauthorized(e.to_string()))?;
        Ok(AuthUser {
            expires_at: claims.exp,
            owner: claims.sub,
            scopes: claims
                .scope
                .as_deref()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        })
    }
}

impl AppState {
    /// Slots for `n` calls of `owner`, or a 429 that says which limit.
    pub fn acquire(
        &self,
        owner: &str,
        n: usize,
    ) -> Result<crate::engine::limits::Permit, ApiError> {
        self.limits
            .try_acquire(owner, n)
            .map_err(|e| ApiError::TooManyRequests {
                detail: e.to_string(),
                retry_after_secs: 1,
            })
    }

    /// One of `owner`'s event streams (`server.max_streams_per_owner`),
    /// held until dropped, or a 429.
    pub fn open_stream(
        &self,
        owner: &str,
    ) -> Result<crate::engine::limits::StreamPermit, ApiError> {
        self.streams
            .try_open(owner)
            .map_err(|e| ApiError::TooManyRequests {
                detail: e.to_string(),
                retry_after_secs: 1,
            })
    }

    /// A call slot of `owner`, waited for as long as it takes (a run whose
    /// own slot runs a call it approved), until toolgate shuts down.
    pub async fn wait_for_slot(
        &self,
        owner: &str,
    ) -> Result<crate::engine::limits::Permit, ApiError> {
        loop {
            match self.acquire(owner, 1) {
                Ok(permit) => return Ok(permit),
                Err(ApiError::TooManyRequests { .. }) => {}
                Err(other) => return Err(other),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = self.shutdown.cancelled() => {
                    return Err(ApiError::Unavailable("toolgate is shutting down".into()));
                }
            }
        }
    }

    /// Slots for one whole-thread read of `owner` (held until dropped), or
    /// a 429 once none has come free in the configured wait.
    pub async fn enter_thread_read(
        &self,
        owner: &str,
    ) -> Result<crate::engine::limits::Permit, ApiError> {
        enter_read(&self.thread_reads, owner).await
    }

    /// A page slot of `owner` (held until dropped), or a 429 once none has
    /// come free in the configured wait.
    pub async fn enter_page_read(
        &self,
        owner: &str,
    ) -> Result<crate::engine::limits::Permit, ApiError> {
        enter_read(&self.page_reads, owner).await
    }
}

async fn enter_read(
    reads: &crate::engine::limits::Reads,
    owner: &str,
) -> Result<crate::engine::limits::Permit, ApiError> {
    reads
        .enter(owner)
        .await
        .map_err(|e| ApiError::TooManyRequests {
            detail: e.to_string(),
            retry_after_secs: 1,
        })
}

/// A position as toolgate writes them (event ids, history cursors): ASCII
/// digits only, no sign or blanks, at most 18 after any leading zeros (the
/// published pattern `^0*[0-9]{1,18}$`; toolgate's positions stay far
/// below 10^18).
/// How long before the end of the shutdown grace a request still waiting
/// for its work is answered, so the answer reaches the client before its
/// connection is closed.
const SHUTDOWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Resolves [`SHUTDOWN_MARGIN`] before the shutdown grace runs out (never,
/// until a shutdown starts): a request still waiting then answers what it
/// can instead of having its connection cut.
pub async fn grace_running_out(state: &AppState) {
    let grace = std::time::Duration::from_secs(state.settings.server.shutdown_grace_secs)
        .saturating_sub(SHUTDOWN_MARGIN);
    state.shutdown.cancelled().await;
    tokio::time::sleep(grace).await;
}

pub fn parse_digits(raw: &str) -> Option<i64> {
    let significant = raw.trim_start_matches('0');
    Some(raw)
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        .filter(|_| significant.len() <= 18)
        .and_then(|r| r.parse().ok())
}

/// A `before` cursor that is a positive number (a message's or an audit
/// entry's position), or a `400` naming `before`.
pub fn positive_cursor(raw: Option<&str>) -> Result<Option<i64>, ApiError> {
    raw.map(|c| {
        parse_digits(c).filter(|n| *n >= 1).ok_or_else(|| {
            ApiError::invalid_param("before", "must be a cursor returned as next_cursor")
        })
    })
    .transpose()
}

/// A `before` cursor of the lists ordered by creation, newest first:
/// `<created_at_ms>:<id>` of the previous page's last item, or a `400`
/// naming `before`.
pub fn time_cursor(raw: Option<&str>) -> Result<Option<(i64, &str)>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    raw.split_once(':')
        .and_then(|(ms, id)| Some((parse_digits(ms)?, id)))
        .filter(|(_, id)| crate::protocol::calls::valid_id(id))
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid_param("before", "must be a cursor returned as next_cursor")
        })
}

/// Trims `found`, read with one item more than `limit`, to the page, and
/// gives the cursor of the next (older) page: `None` when there is none.
pub fn next_time_cursor<T>(
    found: &mut Vec<T>,
    limit: i64,
    key: impl Fn(&T) -> (i64, &str),
) -> Option<String> {
    let more = found.len() as i64 > limit;
    found.truncate(limit as usize);
    let (ms, id) = key(found.last().filter(|_| more)?);
    Some(format!("{ms}:{id}"))
}

/// A page size from the query: `default` when absent, else within
/// `1..=max` or a `400` naming `limit`.
pub fn page_limit(limit: Option<i64>, default: i64, max: i64) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid_param(
            "limit",
            format!("must be between 1 and {max}, got {limit}"),
        ))
    }
}

/// A thread id from the path ([`crate::protocol::calls::valid_id`]).
#[derive(Debug, Clone)]
pub struct ThreadId(pub String);

impl ThreadId {
    pub fn parse(raw: String) -> Result<ThreadId, ApiError> {
        check_path_id("thread_id", &raw)?;
        Ok(ThreadId(raw))
    }
}

/// A path parameter that holds an id (`thread_id`, `tool_call_id`,
/// `run_id`) must be one: an id no call could have is a `400` naming the
/// parameter, not a `404`.
pub fn check_path_id(parameter: &str, raw: &str) -> Result<(), ApiError> {
    if crate::protocol::calls::valid_id(raw) {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            detail: format!("{parameter} {}", crate::protocol::calls::INVALID_ID),
            errors: vec![serde_json::json!({"parameter": parameter, "message": "invalid syntax"})],
        })
    }
}

/// The threads' owners this process has read, and when: a thread's owner
/// never changes, and a deleted thread stays deleted, but a live one may
/// be deleted by another process, which tells of it (`NOTIFY`) unless
/// the notice is lost; so a live one is read again after [`Self::LIVE`].
#[derive(Default)]
pub struct KnownOwners(std::sync::Mutex<std::collections::HashMap<String, (ThreadOwner, Instant)>>);

impl KnownOwners {
    /// At most this many are kept; past it the list starts over.
    const MAX: usize = 100_000;

    /// How long a thread read live is taken as live.
    const LIVE: Duration = Duration::from_secs(10);

    fn get(&self, thread: &str) -> Option<ThreadOwner> {
        let known = self.0.lock().expect("owners lock");
        let (owner, read) = known.get(thread)?;
        (owner.deleted_at_ms.is_some() || read.elapsed() < Self::LIVE).then(|| owner.clone())
    }

    fn remember(&self, thread: &str, owner: ThreadOwner) {
        let mut known = self.0.lock().expect("owners lock");
        if known.len() >= Self::MAX {
            known.clear();
        }
        known.insert(thread.to_string(), (owner, Instant::now()));
    }

    /// The thread was deleted at `at_ms` (by this process or another).
    pub fn deleted(&self, thread: &str, at_ms: i64) {
        if let Some((known, _)) = self.0.lock().expect("owners lock").get_mut(thread) {
            known.deleted_at_ms.get_or_insert(at_ms);
        }
    }

    /// Notices of deletions may have been missed: every thread known live
    /// is read again.
    pub fn forget_live(&self) {
        self.0
            .lock()
            .expect("owners lock")
            .retain(|_, (owner, _)| owner.deleted_at_ms.is_some());
    }
}

/// The thread must not belong to someone else. Another owner's thread looks
/// exactly like a missing one; the caller's own deleted thread is a `410`.
pub async fn check_owner(
    state: &AppState,
    user: &AuthUser,
    thread: &ThreadId,
) -> Result<bool, ApiError> {
    let owner = match state.thread_owners.get(&thread.0) {
        Some(owner) => Some(owner),
        None => {
            let owner = state.store.thread_owner(&thread.0).await?;
            if let Some(o) = &owner {
                state.thread_owners.remember(&thread.0, o.clone());
            }
            owner
        }
    };
    match owner {
        Some(owner) if owner.owner != user.owner => Err(ApiError::thread_not_found()),
        Some(ThreadOwner {
            deleted_at_ms: Some(at_ms),
            ..
        }) => Err(ApiError::ThreadDeleted {
            thread: thread.0.clone(),
            at_ms,
        }),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

/// Like [`check_owner`], but the thread must exist.
pub async fn require_thread(
    state: &AppState,
    user: &AuthUser,
    thread: &ThreadId,
) -> Result<(), ApiError> {
    if check_owner(state, user, thread).await? {
        Ok(())
    } else {
        Err(ApiError::thread_not_found())
    }
}

/// The whole HTTP service: the routes inside the middleware every request
/// passes through.
///
/// The middleware wraps the router once, from outside, rather than through
/// `Router::layer`, which wraps every route in each layer and boxes it again:
/// a request then cloned its route's whole stack, box by box (an allocation
/// per layer), before it ran. From outside, a request clones the stack's
/// plain structs, and only the route's own endpoint inside.
pub fn service(
    state: AppState,
    cors: Option<cors::CorsLayer>,
) -> impl tower::Service<
    Request,
    Response = Response,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Clone
+ Send
+ 'static {
    let settings = state.settings.clone();
    let request_id = HeaderName::from_static("x-request-id");
    tower::ServiceBuilder::new()
        .map_response(|r: axum::http::Response<_>| r.map(axum::body::Body::new))
        .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION, header::COOKIE]))
        // A client's own request id is kept only when it is one: a value
        // with spaces or quotes would write fields of its own into every
        // text log line of the request, and one of any length would be
        // echoed and logged whole. Any other gets a new id.
        .map_request(|mut req: Request| {
            let mut ids = req.headers().get_all("x-request-id").iter();
            let usable = matches!(
                (ids.next(), ids.next()),
                (Some(id), None) if usable_request_id(id.as_bytes())
            );
            if !usable {
                req.headers_mut().remove("x-request-id");
            }
            req
        })
        .layer(SetRequestIdLayer::new(request_id.clone(), MakeRequestUuid))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            // The path only: no query string, no headers (tokens never reach a
            // log line); quoted and escaped, so that a `"` or `}` in it ends
            // no field of the line.
            tracing::info_span!("request", method = %req.method(), path = ?req.uri().path(), request_id = %id)
        })
        .on_response(AnswerLog {
            info: settings.server.access_log,
        })
        .on_failure(log_failure))
        .layer(PropagateRequestIdLayer::new(request_id))
        // Preflights are answered here, before any check that needs a token.
        .option_layer(cors)
        // Outside every refusal and the timeout, so each answer is counted.
        .layer(middleware::from_fn(record_metrics))
        // Outside the timeout, so a 408 gets a problem body too.
        .layer(middleware::from_fn(error::problem_fallback))
        .layer(middleware::from_fn(error::refuse_oversized_head))
        .layer(middleware::from_fn(error::refuse_nul_in_uri))
        .layer(middleware::from_fn(error::refuse_content_encoding))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(settings.server.request_timeout_secs),
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            answer_before_the_grace_ends,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(settings.server.body_limit_bytes))
        .service(router(state))
}

/// At shutdown a request may finish within the grace; one that would not
/// (a long tool call, a batch, a `?wait` for a decision) is answered `503`
/// just before the grace runs out, instead of having its connection cut.
/// Its work goes on until toolgate exits (calls run in tasks of their
/// own), and what it did not finish is finished as INTERRUPTED at the next
/// start. An event or run stream has answered long before (its body goes
/// on, and ends by its own rules).
async fn answer_before_the_grace_ends(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    use axum::response::IntoResponse as _;
    tokio::select! {
        response = next.run(req) => response,
        _ = grace_running_out(&state) => ApiError::Unavailable(
            "toolgate is shutting down and this request did not finish in time; post it again with the same ids once toolgate is back: what was recorded is answered from storage, and a call that was stopped is INTERRUPTED".into(),
        )
        .into_response(),
    }
}

/// The routes, each recording its metrics, with the state.
fn router(state: AppState) -> Router {
    let api = Router::new()
        .merge(threads::routes())
        .merge(events::routes())
        .merge(batches::routes())
        .merge(approvals::routes())
        .merge(audit::routes())
        .merge(workspace::routes())
        .merge(runs::routes(state.settings.server.run_body_limit_bytes))
        .merge(tools::routes());
    Router::new()
        .nest("/v1", api)
        .merge(health::routes())
        .merge(openapi::routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_unknown_query,
        ))
        .route_layer(middleware::from_fn(note_route))
        .with_state(state)
}

/// A `/v1` route refuses a query parameter its operation does not take
/// (as the OpenAPI document lists them), naming it and those it takes,
/// also where the handler reads no query at all: never ignored. A method
/// the document does not describe for the route (`HEAD`, or one the route
/// answers `405`) is left to the route. Every `/v1` route needs a token,
/// and a request without a good one hears that first (`401`), as it would
/// with a query the route takes: what the route takes is no secret (the
/// document is public), but the answer a caller must act on first is the
/// credential.
async fn refuse_unknown_query(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    use axum::response::IntoResponse as _;
    if let (Some(query), Some(path)) = (req.uri().query(), req.extensions().get::<MatchedPath>())
        && path.as_str().starts_with("/v1/")
    {
        let method = req.method().as_str().to_ascii_lowercase();
        if let Some(known) = openapi::query_parameters(&method, path.as_str())
            && let Err(refused) = error::check_params(query, known)
        {
            let (mut parts, _) = req.into_parts();
            return match AuthUser::from_request_parts(&mut parts, &state).await {
                Err(unauthorized) => unauthorized.into_response(),
                Ok(_) => refused.into_response(),
            };
        }
    }
    next.run(req).await
}

/// The method label and the request id of a request refused before it
/// was served (past `server.max_connections`), read from its raw head:
/// the client's own id when it sent one usable id, otherwise a new one.
pub fn refused_request(head: &[u8]) -> (&'static str, String) {
    let mut lines = head.split(|&b| b == b'\n');
    let method = lines
        .next()
        .and_then(|line| line.split(|&b| b == b' ').next())
        .and_then(|name| axum::http::Method::from_bytes(name).ok())
        .map_or("other", |method| method_label(&method));
    // The head's lines only: what follows its empty line is the body.
    let head_lines = lines.take_while(|line| !line.is_empty() && *line != b"\r");
    let mut ids = head_lines.filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.eq_ignore_ascii_case(b"x-request-id")
            .then(|| value[1..].trim_ascii())
    });
    let id = match (ids.next(), ids.next()) {
        (Some(id), None) if usable_request_id(id) => String::from_utf8_lossy(id).into_owned(),
        _ => uuid::Uuid::new_v4().to_string(),
    };
    (method, id)
}

/// A request id a client may give: 1-128 characters of `A-Z a-z 0-9` and
/// `. _ : / + = -` (UUIDs, ULIDs, trace ids, base64), so nothing that
/// could pass for another field in a log line.
fn usable_request_id(id: &[u8]) -> bool {
    (1..=128).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/+=-".contains(b))
}

/// Where the router writes the route pattern a request matched, for
/// [`record_metrics`], which runs outside the router (and outside the
/// timeout, which drops the route's future when it fires).
#[derive(Clone, Default)]
struct RouteSlot(Arc<OnceLock<String>>);

async fn note_route(req: Request, next: Next) -> Response {
    if let (Some(slot), Some(path)) = (
        req.extensions().get::<RouteSlot>(),
        req.extensions().get::<MatchedPath>(),
    ) {
        let _ = slot.0.set(path.as_str().to_string());
    }
    next.run(req).await
}

/// A request method as a metrics label: the methods HTTP defines by name,
/// and `other` for the rest. A method is any token a client sends, so
/// labelling each one would let anybody, without a token, add series to
/// `/metrics` without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Counts every answer the service gives: by the route pattern the request
/// matched, or `unmatched` (no route, or refused before routing: a NUL in
/// the path, an encoded body, an oversized head).
async fn record_metrics(mut req: Request, next: Next) -> Response {
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let method = method_label(req.method());
    let started = Instant::now();
    let resp = next.run(req).await;
    let route = slot.0.get().cloned().unwrap_or_else(|| "unmatched".into());
    let status = resp.status().as_u16().to_string();
    metrics::counter!("toolgate_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("toolgate_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// A server error answered, logged at ERROR, except `503`: an outage
/// answers many, and the store says so itself, a line every few seconds
/// (see `error.rs`), rather than one per request.
/// The line each answer writes: at `info` with `server.access_log` (an
/// access log), otherwise tower-http's own at `debug`. Either is written in
/// the request's span (its method, path and request id).
#[derive(Clone, Copy)]
struct AnswerLog {
    info: bool,
}

impl<B> tower_http::trace::OnResponse<B> for AnswerLog {
    fn on_response(
        self,
        response: &axum::http::Response<B>,
        latency: Duration,
        span: &tracing::Span,
    ) {
        if self.info {
            tracing::info!(
                status = response.status().as_u16(),
                latency_ms = latency.as_millis() as u64,
                "answered"
            );
        } else {
            tower_http::trace::DefaultOnResponse::default().on_response(response, latency, span);
        }
    }
}

fn log_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass;
    if let ServerErrorsFailureClass::StatusCode(axum::http::StatusCode::SERVICE_UNAVAILABLE) = class
    {
        return;
    }
    tracing::error!(
        classification = %class,
        latency_ms = latency.as_millis() as u64,
        "response failed"
    );
}
