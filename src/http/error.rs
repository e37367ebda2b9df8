//! Request-level errors as RFC 9457 `application/problem+json`. Tool-level
//! failures are not here: they are data in a `ToolAgentOutput`.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::protocol::json::ReadError;
use crate::protocol::pointer_token;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// The `code` of a `409` problem: what kind of conflict, for a program to
/// act on without reading `detail`.
pub mod conflicts {
    /// The request contradicts what is recorded (any other conflict).
    pub const CONFLICT: &str = "CONFLICT";
    /// A call id taken by another call (another tool, other arguments, …):
    /// never post it again as it is; a new call needs a new id.
    pub const CALL_CONFLICT: &str = "CALL_CONFLICT";
    /// A call posted under another message than the one declaring it.
    pub const OTHER_PARENT: &str = "OTHER_PARENT";
    /// A call posted under a run that was rolled back.
    pub const RUN_CLOSED: &str = "RUN_CLOSED";
    /// A batch's call held behind an earlier one waiting for approval
    /// (`errors[0].tool_call_id` names it): post it again once that one is
    /// decided.
    pub const WAITS_FOR_APPROVAL: &str = "WAITS_FOR_APPROVAL";
    /// The call is running in another process, or its result waits for the
    /// database: post it again later for its outcome.
    pub const IN_PROGRESS: &str = "IN_PROGRESS";
    /// A message id taken by another message.
    pub const MESSAGE_CONFLICT: &str = "MESSAGE_CONFLICT";
    /// The approval was decided otherwise already, or expired.
    pub const ALREADY_DECIDED: &str = "ALREADY_DECIDED";
    pub const APPROVAL_EXPIRED: &str = "APPROVAL_EXPIRED";
    /// The call was undone already, by other means than an undo of its own.
    pub const ALREADY_UNDONE: &str = "ALREADY_UNDONE";
    /// The run was rolled back already (its report is in the audit log).
    pub const ALREADY_ROLLED_BACK: &str = "ALREADY_ROLLED_BACK";
    /// The call finished before a cancel reached it: its result stands.
    pub const ALREADY_FINISHED: &str = "ALREADY_FINISHED";
    /// Another cancellation (a cancel, its time limit, a shutdown) is
    /// stopping the call: its result follows.
    pub const BEING_CANCELLED: &str = "BEING_CANCELLED";
    /// The call runs in another process: cancel it through that one.
    pub const RUNS_ELSEWHERE: &str = "RUNS_ELSEWHERE";
    /// A thread with calls still running or waiting for approval (listed
    /// in `errors`) cannot be deleted yet.
    pub const THREAD_BUSY: &str = "THREAD_BUSY";
    /// A thread being deleted (`DELETE …?cancel=true`) takes no new calls
    /// or messages.
    pub const THREAD_CLOSING: &str = "THREAD_CLOSING";
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{detail}")]
    BadRequest { detail: String, errors: Vec<Value> },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    NotFound(String),
    /// Known to the caller, but not the caller's to do.
    #[error("{0}")]
    Forbidden(String),
    /// A conflict with what is recorded (`code` [`conflicts::CONFLICT`]).
    #[error("{0}")]
    Conflict(String),
    /// A conflict a program can tell apart by its `code` (see
    /// [`conflicts`]); `errors`, when any, name the field or call at issue.
    #[error("{detail}")]
    ConflictAt {
        code: &'static str,
        detail: String,
        errors: Vec<Value>,
    },
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body did not arrive in time.
    #[error("{0}")]
    BodyTimeout(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    UriTooLong(String),
    #[error("{0}")]
    HeadersTooLarge(String),
    /// Understood but refused; `extra` carries problem extension members.
    #[error("{detail}")]
    Unprocessable {
        title: String,
        detail: String,
        extra: Map<String, Value>,
    },
    #[error("{detail}")]
    TooManyRequests {
        detail: String,
        retry_after_secs: u64,
    },
    #[error("{0}")]
    Unavailable(String),
    /// The thread was deleted at `at_ms` (`code` [`THREAD_DELETED`]).
    #[error("{}", thread_deleted_detail(thread, *at_ms))]
    ThreadDeleted { thread: String, at_ms: i64 },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The `code` of a deleted thread's `410` answers and of the `RUN_ERROR`
/// its streams end with.
pub const THREAD_DELETED: &str = "THREAD_DELETED";

/// What a deleted thread's `410` and its streams' `RUN_ERROR` say.
pub fn thread_deleted_detail(thread: &str, at_ms: i64) -> String {
    format!(
        "thread {thread:?} was deleted at {}: its messages, events and calls are gone, and its \
         id is not used again (start a new thread under another id)",
        crate::engine::rfc3339_millis(at_ms)
    )
}

impl ApiError {
    pub fn bad_request(detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            detail: detail.into(),
            errors: vec![],
        }
    }

    pub fn invalid_param(name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::BadRequest {
            detail: format!("query parameter `{name}` {message}"),
            errors: vec![json!({"parameter": name, "message": message})],
        }
    }

    /// 422 for a well-formed body whose content is refused at `pointer`.
    pub fn invalid_body(pointer: String, message: String) -> Self {
        let mut extra = Map::new();
        extra.insert(
            "errors".into(),
            json!([{"pointer": pointer, "message": message}]),
        );
        ApiError::Unprocessable {
            title: "Invalid request body".into(),
            detail: if pointer.is_empty() {
                message
            } else {
                format!("{pointer}: {message}")
            },
            extra,
        }
    }

    /// 409: the body conflicts with what the thread holds, at `pointer`.
    pub fn conflict_at(pointer: String, detail: String) -> Self {
        Self::conflict_coded_at(conflicts::CONFLICT, pointer, detail)
    }

    /// [`ApiError::conflict_at`] with a `code` of [`conflicts`].
    pub fn conflict_coded_at(code: &'static str, pointer: String, detail: String) -> Self {
        ApiError::ConflictAt {
            code,
            errors: vec![json!({"pointer": pointer, "message": detail})],
            detail,
        }
    }

    /// 409 with a `code` of [`conflicts`] and nothing to point at.
    pub fn conflict(code: &'static str, detail: String) -> Self {
        ApiError::ConflictAt {
            code,
            detail,
            errors: vec![],
        }
    }

    /// 422 titled `title` for a body refused at `pointer`: `detail` says
    /// why, and `errors` names the place.
    pub fn unprocessable_at(title: &str, pointer: String, detail: String) -> Self {
        let mut extra = Map::new();
        extra.insert(
            "errors".into(),
            json!([{"pointer": pointer, "message": detail}]),
        );
        ApiError::Unprocessable {
            title: title.into(),
            detail,
            extra,
        }
    }

    /// 409: call `id` is recorded in the thread as another call; `field`
    /// (`name`, `arguments`, `workspace` or `dry_run`) says what differs.
    pub fn call_conflict(id: &str, field: &str) -> Self {
        Self::conflict_with(id, field, "recorded")
    }

    /// A call that differs from the declaration of its id by an assistant
    /// message of the thread, in `field` (`name` or `arguments`).
    pub fn declared_conflict(id: &str, field: &str) -> Self {
        Self::conflict_with(id, field, "declared")
    }

    fn conflict_with(id: &str, field: &str, given: &str) -> Self {
        let what = match field {
            "name" => "another tool",
            "arguments" => "other arguments",
            "workspace" => "another sub-workspace",
            _ => "another dry_run",
        };
        ApiError::ConflictAt {
            code: conflicts::CALL_CONFLICT,
            detail: format!(
                "tool call {id:?} is already {given} in this thread with {what}; use a new id for a new call"
            ),
            errors: vec![json!({
                "field": field,
                "message": format!("differs from the call {given} under this id ({what})"),
            })],
        }
    }

    /// A call posted under a run that was rolled back.
    pub fn run_closed(run_id: &str) -> Self {
        ApiError::ConflictAt {
            code: conflicts::RUN_CLOSED,
            detail: format!(
                "run {run_id:?} of this thread was rolled back and takes no more calls; \
                 post the call under another run_id, or without one"
            ),
            errors: vec![json!({
                "field": "run_id",
                "message": "names a run that was rolled back",
            })],
        }
    }

    pub fn thread_not_found() -> Self {
        ApiError::NotFound("thread not found".into())
    }

    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::BadRequest { .. } => {
                (StatusCode::BAD_REQUEST, "bad-request", "Bad request".into())
            }
            ApiError::Unauthorized(_) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized".into(),
            ),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found".into()),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden".into()),
            ApiError::Conflict(_) | ApiError::ConflictAt { .. } => {
                (StatusCode::CONFLICT, "conflict", "Conflict".into())
            }
            ApiError::PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large".into(),
            ),
            ApiError::BodyTimeout(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "Request timeout".into(),
            ),
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type".into(),
            ),
            ApiError::UriTooLong(_) => (
                StatusCode::URI_TOO_LONG,
                "uri-too-long",
                "URI too long".into(),
            ),
            ApiError::HeadersTooLarge(_) => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request-header-fields-too-large",
                "Request header fields too large".into(),
            ),
            ApiError::Unprocessable { title, .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "unprocessable",
                title.clone(),
            ),
            ApiError::TooManyRequests { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-requests",
                "Too many requests".into(),
            ),
            ApiError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable".into(),
            ),
            ApiError::ThreadDeleted { .. } => (StatusCode::GONE, "gone", "Gone".into()),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error".into(),
            ),
        }
    }
}

/// A problem document body.
pub fn problem_body(
    status: StatusCode,
    slug: &str,
    title: &str,
    detail: &str,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("type".into(), json!(format!("urn:toolgate:problem:{slug}")));
    body.insert("title".into(), json!(title));
    body.insert("status".into(), json!(status.as_u16()));
    body.insert(
        "detail".into(),
        json!(crate::protocol::clip(detail, MAX_DETAIL_CHARS)),
    );
    body
}

/// The longest `detail` a problem carries: details quote what was sent
/// (an unknown value, a name), and a 100 KB value must not come back in
/// full.
const MAX_DETAIL_CHARS: usize = 2000;

pub fn problem_response(status: StatusCode, body: Map<String, Value>) -> Response {
    let mut resp = (status, Value::Object(body).to_string()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    resp
}

impl ApiError {
    /// The status and problem document this error answers with.
    pub fn to_problem(&self) -> (StatusCode, Map<String, Value>) {
        let (status, slug, title) = self.parts();
        let detail = match self {
            // Internal details are logged, never echoed to the client.
            ApiError::Internal(e) => {
                tracing::error!(error = ?e, "internal error");
                "an internal error occurred; it has been logged".to_string()
            }
            other => other.to_string(),
        };
        let mut body = problem_body(status, slug, &title, &detail);
        match self {
            ApiError::Conflict(_) => {
                body.insert("code".into(), json!(conflicts::CONFLICT));
            }
            ApiError::ConflictAt { code, .. } => {
                body.insert("code".into(), json!(code));
            }
            ApiError::ThreadDeleted { at_ms, .. } => {
                body.insert("code".into(), json!(THREAD_DELETED));
                body.insert(
                    "deleted_at".into(),
                    json!(crate::engine::rfc3339_millis(*at_ms)),
                );
            }
            _ => {}
        }
        match self {
            ApiError::BadRequest { errors, .. } | ApiError::ConflictAt { errors, .. }
                if !errors.is_empty() =>
            {
                body.insert("errors".into(), Value::Array(errors.clone()));
            }
            ApiError::Unprocessable { extra, .. } => body.extend(extra.clone()),
            _ => {}
        }
        (status, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.to_problem();
        let detail = body["detail"].as_str().unwrap_or_default().to_string();
        let mut resp = problem_response(status, body);
        if let ApiError::TooManyRequests {
            retry_after_secs, ..
        } = &self
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        // RFC 9110 §10.2.3: when to try again. An outage's end is unknown;
        // a second is what a refused connection says too.
        if let ApiError::Unavailable(_) = &self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750 §3.1: a request that sent no token gets no error code.
            let challenge = if detail == crate::auth::AuthError::Missing.to_string() {
                "Bearer realm=\"toolgate\"".to_string()
            } else {
                format!(
                    "Bearer realm=\"toolgate\", error=\"invalid_token\", error_description=\"{}\"",
                    detail.replace('"', "'")
                )
            };
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
        }
        resp
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match e {
            StoreError::NotOwner => ApiError::thread_not_found(),
            StoreError::Conflict(what) => ApiError::Conflict(what),
            StoreError::Redeclared(what) => ApiError::conflict(conflicts::CALL_CONFLICT, what),
            StoreError::CallConflict { id, field } => ApiError::call_conflict(&id, field),
            StoreError::RunClosed { run_id } => ApiError::run_closed(&run_id),
            StoreError::Refused { field, detail } => ApiError::ConflictAt {
                code: conflicts::CONFLICT,
                errors: vec![json!({"field": field, "message": detail})],
                detail,
            },
            StoreError::ThreadDeleted { thread, at_ms } => {
                ApiError::ThreadDeleted { thread, at_ms }
            }
            StoreError::ThreadClosing { thread, since_ms } => ApiError::ConflictAt {
                code: conflicts::THREAD_CLOSING,
                detail: format!(
                    "thread {thread:?} is being deleted (closed at {}): it takes no new calls \
                     or messages",
                    crate::engine::rfc3339_millis(since_ms)
                ),
                errors: Vec::new(),
            },
            StoreError::ThreadBusy { calls } => ApiError::ConflictAt {
                code: conflicts::THREAD_BUSY,
                detail: format!(
                    "the thread has {}{} call{} still running or waiting for a person's approval \
                     (listed in errors{}): cancel them or decide their approvals, then delete it again",
                    if calls.len() >= 100 { "at least " } else { "" },
                    calls.len(),
                    if calls.len() == 1 { "" } else { "s" },
                    if calls.len() >= 100 {
                        ", the first 100"
                    } else {
                        ""
                    },
                ),
                errors: calls
                    .into_iter()
                    .map(|(id, status)| json!({"tool_call_id": id, "status": status.as_str()}))
                    .collect(),
            },
            StoreError::NotFound(what) => ApiError::NotFound(what),
            e if e.is_unavailable() || matches!(e, StoreError::WriterClosed) => {
                // The database's own words stay in the log (the request's
                // span names it), a line every few seconds during an outage.
                static THROTTLE: crate::telemetry::Throttle =
                    crate::telemetry::Throttle::new(std::time::Duration::from_secs(5));
                if let Some(held) = THROTTLE.allow() {
                    tracing::warn!(error = %e, answered_503_since_last_line = held, "the database is unavailable");
                }
                ApiError::Unavailable("the database is unavailable; retry later".into())
            }
            // Nothing of the request was stored; its data, not the service,
            // is at fault. The database's own words stay in the log.
            e if e.is_refused_data() => {
                tracing::warn!(error = %e, "the database refused a request's data");
                ApiError::Unprocessable {
                    title: "Refused by the database".into(),
                    detail: "the database refused to store this request's data (a constraint, \
                             a trigger or a value out of range); nothing was stored"
                        .into(),
                    extra: Map::new(),
                }
            }
            other => ApiError::Internal(other.into()),
        }
    }
}

/// `Json<T>` whose rejections are problems that name the offending field.
pub struct ApiJson<T>(pub T);

/// What a body that is no JSON is told: the parser's words, and for an
/// escape of half a UTF-16 surrogate pair (`"\ud800"`), which the parser
/// reports as an escape cut short, what is really wrong.
fn malformed(e: &serde_json::Error) -> String {
    let said = e.to_string();
    if said.contains("surrogate") || said.starts_with("unexpected end of hex escape") {
        format!(
            "malformed JSON: {said}; a \\uD800–\\uDFFF escape must be one half of a \
             surrogate pair followed by the other (\\ud83d\\ude00), since JSON text is Unicode"
        )
    } else {
        format!("malformed JSON: {said}")
    }
}

/// A JSON body's `Content-Type`: exactly one, `application/json` or a
/// `+json` type, in UTF-8 (the only encoding JSON has, RFC 8259) when a
/// `charset` is given at all. Anything else is a `415`: a body in another
/// encoding would otherwise be read as UTF-8 and fail as malformed, and
/// two types leave which one was meant to a guess.
fn json_media_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let mut given = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (given.next(), given.next()) else {
        return Err(ApiError::UnsupportedMediaType(
            "send the body as JSON with one `Content-Type: application/json` header".into(),
        ));
    };
    let mut parts = value.to_str().unwrap_or_default().split(';');
    let mime = parts.next().unwrap_or_default().trim();
    // Media types are case-insensitive (RFC 6838), suffix too.
    let is_json = mime.eq_ignore_ascii_case("application/json")
        || mime
            .len()
            .checked_sub(5)
            .and_then(|at| mime.get(at..))
            .is_some_and(|suffix| suffix.eq_ignore_ascii_case("+json"));
    if !is_json {
        return Err(ApiError::UnsupportedMediaType(
            "send the body as JSON with `Content-Type: application/json`".into(),
        ));
    }
    for parameter in parts {
        let Some((name, charset)) = parameter.split_once('=') else {
            continue;
        };
        let charset = charset.trim().trim_matches('"');
        if name.trim().eq_ignore_ascii_case("charset")
            && !charset.eq_ignore_ascii_case("utf-8")
            && !charset.eq_ignore_ascii_case("utf8")
        {
            return Err(ApiError::UnsupportedMediaType(format!(
                "JSON bodies are read as UTF-8, not charset={charset}: send the body in UTF-8"
            )));
        }
    }
    Ok(())
}

impl<T> FromRequest<super::AppState> for ApiJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &super::AppState) -> Result<Self, Self::Rejection> {
        json_media_type(req.headers())?;
        let bytes = read_body(req, state).await?;
        // Two steps, so that syntax (400) and shape (422) errors are told
        // apart and a shape error names the field's path.
        let too_deep = |pointer: String| {
            ApiError::invalid_body(
                pointer,
                format!(
                    "arrays and objects nest more than {} levels deep here",
                    crate::protocol::calls::MAX_DEPTH
                ),
            )
        };
        let value = crate::protocol::json::from_slice(&bytes).map_err(|e| match e {
            ReadError::Syntax(e) if e.to_string().starts_with("recursion limit exceeded") => {
                too_deep(String::new())
            }
            ReadError::Syntax(e) => ApiError::bad_request(malformed(&e)),
            ReadError::RepeatedKey { pointer, key } => {
                ApiError::invalid_body(pointer, crate::protocol::json::repeated_key_message(&key))
            }
        })?;
        // What toolgate stores nests a body's values a few levels deeper,
        // and must read back. Nesting past the limit takes more than twice
        // as many bytes (each level opens and closes), so a short body is
        // not walked.
        if bytes.len() > 2 * crate::protocol::calls::MAX_DEPTH
            && let Some(pointer) = crate::protocol::calls::too_deep(&value)
        {
            return Err(too_deep(pointer));
        }
        // U+0000 cannot be stored (Postgres text and jsonb refuse it), and
        // no model or frontend needs it: refused wherever it is, so both
        // backends answer alike. Only a body that spells `\u0000` can hold
        // one (JSON forbids a raw NUL in strings).
        if bytes.windows(6).any(|w| w == b"\\u0000")
            && let Some(pointer) = crate::protocol::json::nul_pointer(&value)
        {
            return Err(ApiError::invalid_body(
                pointer,
                crate::protocol::json::NUL_MESSAGE.to_string(),
            ));
        }
        // Every body toolgate takes is an object; serde would also read a
        // struct from an array of its fields.
        if !value.is_object() {
            return Err(ApiError::invalid_body(
                String::new(),
                format!(
                    "the body must be a JSON object, got {}",
                    crate::protocol::calls::kind(&value)
                ),
            ));
        }
        shape(value).map(ApiJson)
    }
}

/// A request body, read and checked as JSON, as `T`: a `422` naming the
/// offending field when it does not have `T`'s shape.
pub fn shape<'de, T, D>(value: D) -> Result<T, ApiError>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de, Error = serde_json::Error>,
{
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let mut pointer = json_pointer(e.path());
        // A missing field is pointed at by its own path (`/decision`), not
        // the object that lacks it.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            pointer.push('/');
            pointer.push_str(&pointer_token(field));
        }
        ApiError::invalid_body(pointer, message)
    })
}

/// The longest request target (path and query) toolgate reads: ids,
/// names, cursors and filters are all far shorter.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// The most a request's header fields may take in all (each counted as
/// `name: value` and its line end), a bearer token many times over.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A request whose target or header fields are larger than toolgate reads
/// gets a `414` or `431` problem naming the limit (and, for headers, the
/// largest field by name, never its value), before routing or the token
/// check. hyper answers larger ones still (a target over 64 KiB, a head
/// over its ~400 KiB buffer) itself, with the bare status.
pub async fn refuse_oversized_head(req: Request, next: axum::middleware::Next) -> Response {
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if target > MAX_TARGET_BYTES {
        return ApiError::UriTooLong(format!(
            "the request target (path and query) is {target} bytes; toolgate reads at most {MAX_TARGET_BYTES}"
        ))
        .into_response();
    }
    let field =
        |(name, value): (&header::HeaderName, &HeaderValue)| name.as_str().len() + value.len() + 4;
    let total: usize = req.headers().iter().map(field).sum();
    if total > MAX_HEADER_BYTES {
        let largest = req
            .headers()
            .iter()
            .max_by_key(|&h| field(h))
            .map(|(name, value)| (name.as_str().to_owned(), field((name, value))))
            .unwrap_or_default();
        return ApiError::HeadersTooLarge(format!(
            "the request's header fields take {total} bytes; toolgate reads at most {MAX_HEADER_BYTES} (the largest is `{}`, {} bytes)",
            largest.0, largest.1
        ))
        .into_response();
    }
    next.run(req).await
}

/// Requests whose path or query spells `%00` are refused before routing:
/// U+0000 cannot be stored or looked up (Postgres refuses it in text).
pub async fn refuse_nul_in_uri(req: Request, next: axum::middleware::Next) -> Response {
    let spelled = req.uri().path_and_query().is_some_and(|pq| {
        pq.as_str()
            .as_bytes()
            .windows(3)
            .any(|w| w.eq_ignore_ascii_case(b"%00"))
    });
    if spelled {
        return ApiError::BadRequest {
            detail:
                "the path or query holds %00 (U+0000, NUL), which no id, name or filter can contain"
                    .into(),
            errors: vec![],
        }
        .into_response();
    }
    next.run(req).await
}

/// A body sent with a content coding (`gzip`, `br`, …) is refused with a
/// `415` naming it: toolgate reads bodies as sent, and decoding one as JSON
/// would fail with a misleading "malformed JSON" (or, for a coding that
/// happens to leave JSON intact, succeed by accident). RFC 9110 §15.5.16.
pub async fn refuse_content_encoding(req: Request, next: axum::middleware::Next) -> Response {
    use axum::body::HttpBody as _;
    // Without a body there is nothing to decode.
    if req.body().size_hint().exact() == Some(0) {
        return next.run(req).await;
    }
    let coding = req
        .headers()
        .get_all(axum::http::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .map(str::to_string);
    if let Some(coding) = coding {
        return ApiError::UnsupportedMediaType(format!(
            "Content-Encoding {coding:?} is not supported: send the body uncompressed"
        ))
        .into_response();
    }
    next.run(req).await
}

/// A deserializer's path as an RFC 6901 JSON pointer (`/tool_calls/0/id`).
fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } => Some(pointer_token(key)),
            Segment::Enum { variant } => Some(variant.clone()),
            Segment::Unknown => None,
        })
        .map(|token| format!("/{token}"))
        .collect()
}

/// `Query<T>` whose rejections are problems naming the parameter.
pub struct ApiQuery<T>(pub T);

/// A route's own body limit, where it is not `server.body_limit_bytes`
/// (with an [`axum::extract::DefaultBodyLimit`] of the same size): the
/// bytes, and the setting that gives them.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub bytes: usize,
    pub setting: &'static str,
}

/// The request's body, read within the server's limits: a body declared
/// larger than the route's limit (`server.body_limit_bytes`, or the
/// route's [`BodyLimit`]) is refused before it is read, and one that takes
/// longer than `server.header_read_timeout_secs` to arrive (trickled in a
/// byte at a time, holding its connection) is a `408`.
/// The most of a refused body read (and dropped) before the answer.
const DRAIN_AT_MOST: u64 = 1024 * 1024;

/// Read and drop `req`'s body, at most [`DRAIN_AT_MOST`] bytes and for at
/// most a second.
async fn drain(req: Request) {
    use futures::StreamExt as _;
    let mut body = req.into_body().into_data_stream();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let mut read = 0u64;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len() as u64;
            if read > DRAIN_AT_MOST {
                break;
            }
        }
    })
    .await;
}

async fn read_body(req: Request, state: &super::AppState) -> Result<axum::body::Bytes, ApiError> {
    let server = &state.settings.server;
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .copied()
        .unwrap_or(BodyLimit {
            bytes: server.body_limit_bytes,
            setting: "server.body_limit_bytes",
        });
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared.filter(|n| *n > limit.bytes as u64) {
        // Read what is on its way, up to a point, before answering: a
        // socket closed with unread data in it is reset, and the reset
        // can reach the client before the answer does.
        if declared <= DRAIN_AT_MOST {
            drain(req).await;
        }
        return Err(ApiError::PayloadTooLarge(format!(
            "the request body is declared as {declared} bytes (Content-Length); toolgate reads \
             at most {} ({})",
            limit.bytes, limit.setting
        )));
    }
    let within = std::time::Duration::from_secs(server.header_read_timeout_secs.max(1));
    match tokio::time::timeout(within, axum::body::Bytes::from_request(req, state)).await {
        Err(_) => Err(ApiError::BodyTimeout(format!(
            "the request body did not arrive within {} s (server.header_read_timeout_secs)",
            within.as_secs()
        ))),
        Ok(Err(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Err(ApiError::PayloadTooLarge(format!(
                "the request body exceeds the configured limit, {} bytes ({})",
                limit.bytes, limit.setting
            )))
        }
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "could not read the body: {}",
            e.body_text()
        ))),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// The input of a `POST` route that takes none (cancel, undo, rollback):
/// no query parameters, and no body but an empty one or `{}`. Anything
/// else is refused naming it, never ignored: a client sending `{"force":
/// true}` to an undo must not think it forced anything.
pub struct NoInput;

impl FromRequest<super::AppState> for NoInput {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &super::AppState) -> Result<Self, Self::Rejection> {
        check_params(req.uri().query().unwrap_or_default(), &[])?;
        NoBody::from_request(req, state).await?;
        Ok(NoInput)
    }
}

/// The body of a route that takes query parameters ([`ApiQuery`]) but no
/// body: none but an empty one or `{}`, as [`NoInput`].
pub struct NoBody;

impl FromRequest<super::AppState> for NoBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &super::AppState) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        if bytes.trim_ascii().is_empty() {
            return Ok(NoBody);
        }
        match crate::protocol::json::from_slice(&bytes) {
            Ok(Value::Object(fields)) => match fields.keys().next() {
                None => Ok(NoBody),
                Some(field) => Err(ApiError::invalid_body(
                    format!("/{}", pointer_token(field)),
                    "is not a field: this route takes no body".into(),
                )),
            },
            Ok(_) => Err(ApiError::invalid_body(
                String::new(),
                "this route takes no body (at most an empty object)".into(),
            )),
            Err(e) => Err(ApiError::bad_request(format!(
                "malformed JSON: {e}; this route takes no body"
            ))),
        }
    }
}

/// Each parameter of `query` is one of `known`, and given once (for one
/// given twice, which value counts would be a guess).
pub(super) fn check_params(query: &str, known: &[String]) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        if !known.iter().any(|k| *k == name) {
            let takes = if known.is_empty() {
                "this route takes no query parameters".to_string()
            } else {
                format!("this route takes {}", known.join(", "))
            };
            return Err(ApiError::invalid_param(
                &name,
                format!("is not a parameter of this route; {takes}"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ApiError::invalid_param(
                &name,
                "is given more than once; give it once",
            ));
        }
    }
    Ok(())
}

/// The query parameters `T` takes, as its OpenAPI description names them;
/// built once per type (a description is a tree of schemas, too much to
/// build for every request).
fn query_names<T: utoipa::IntoParams + 'static>() -> std::sync::Arc<[String]> {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<TypeId, Arc<[String]>>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    names
        .entry(TypeId::of::<T>())
        .or_insert_with(|| {
            T::into_params(|| Some(utoipa::openapi::path::ParameterIn::Query))
                .into_iter()
                .map(|p| p.name)
                .collect()
        })
        .clone()
}

/// What the standard library says of a text that is no unsigned number.
const INTEGER_ERRORS: [&str; 3] = [
    "invalid digit found in string",
    "number too large to fit in target type",
    "cannot parse integer from empty string",
];

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + utoipa::IntoParams + 'static,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        // What axum's Query does, with the failing parameter kept: the
        // answer names it in `errors[].parameter`, as for range errors.
        let query = parts.uri.query().unwrap_or_default();
        // A parameter the route does not take (a misspelt `format`) would
        // otherwise be ignored, and the answer be another than asked for.
        if !query.is_empty() {
            check_params(query, &query_names::<T>())?;
        }
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(ApiQuery)
            .map_err(|e| {
                let parameter = e.path().to_string();
                let message = e.inner().to_string();
                if parameter.is_empty() || parameter == "." {
                    return ApiError::bad_request(format!("invalid query string: {message}"));
                }
                // An unsigned number's parse error names no value: say
                // what was given and what is wanted (`wait=-1`).
                let given = form_urlencoded::parse(query.as_bytes())
                    .find(|(name, _)| *name == parameter)
                    .map(|(_, value)| value.into_owned());
                match given {
                    Some(given) if INTEGER_ERRORS.iter().any(|m| message.contains(m)) => {
                        ApiError::invalid_param(
                            &parameter,
                            format!("must be a whole number, got {given:?}"),
                        )
                    }
                    _ => ApiError::invalid_param(&parameter, format!("is invalid: {message}")),
                }
            })
    }
}

/// Error responses produced below the handlers (unknown route, wrong method,
/// timeout, body limit) get a problem body too.
pub async fn problem_fallback(req: Request, next: axum::middleware::Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_problem = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if status.is_client_error() || status.is_server_error() {
        if is_problem {
            return resp;
        }
        let (slug, detail) = match status {
            StatusCode::NOT_FOUND => ("not-found", "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => (
                "method-not-allowed",
                "this route does not accept that method",
            ),
            StatusCode::REQUEST_TIMEOUT => (
                "timeout",
                "the request took longer than server.request_timeout_secs; a tool call it \
                 posted goes on and is recorded: post it again with the same id (its stored \
                 outcome is answered, or waited for) or GET \
                 /v1/threads/{thread_id}/tool-calls/{tool_call_id}",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => (
                "payload-too-large",
                "the request body exceeds server.body_limit_bytes",
            ),
            // What is rejected before a handler reads the request: a path
            // segment that does not percent-decode to UTF-8, typically.
            StatusCode::BAD_REQUEST => (
                "bad-request",
                "the request could not be read (a path segment that is not valid percent-encoded UTF-8?)",
            ),
            _ => ("error", "the request failed"),
        };
        // Sentence case, like the handlers' titles ("Not found").
        let reason = status.canonical_reason().unwrap_or("Error");
        let title = reason[..1].to_string() + &reason[1..].to_lowercase();
        let mut out = problem_response(status, problem_body(status, slug, &title, detail));
        for (name, value) in resp.headers() {
            if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
                out.headers_mut().insert(name.clone(), value.clone());
            }
        }
        return out;
    }
    resp
}
