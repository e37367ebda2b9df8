//! The shapes a tool call arrives in (native, OpenAI, Anthropic), parsed into
//! one [`IncomingCall`]. Parsing names the offending field with a JSON Pointer
//! so a caller can fix the request.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// Which vendor shape the call came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallShape {
    Native,
    Openai,
    Anthropic,
}

/// A tool call after parsing, whatever shape it arrived in.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    pub shape: CallShape,
    /// Groups calls into a run; without one the call is its own run.
    pub run_id: Option<String>,
    /// The assistant message that issued the call, when known.
    pub parent_message_id: Option<String>,
    /// The sub-workspace the call works in; `None` is the owner's main one.
    pub workspace: Option<String>,
    /// Preview the effects instead of causing them (tools with dry-run).
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{pointer}: {message}")]
pub struct CallParseError {
    /// JSON Pointer of the offending field in the request body.
    pub pointer: String,
    pub message: String,
    /// When the problem is the arguments' content (a model error the model
    /// can fix) rather than the envelope: where in the arguments, as a JSON
    /// pointer into them (`""` is the arguments themselves).
    pub arguments_path: Option<String>,
}

/// [`valid_id`] as a JSON Schema `pattern`.
pub const ID_PATTERN: &str = r"^(?!\.{1,2}$)[A-Za-z0-9_.:-]{1,128}$";

/// [`valid_id`] in words, for the errors that refuse an id.
pub const INVALID_ID: &str =
    "must be 1-128 characters from A-Z a-z 0-9 _ - . :, and not . or .. (which a URL cannot hold)";

/// [`valid_workspace_name`] as a JSON Schema `pattern` (with `maxLength`
/// 64): one of A-Z a-z 0-9 _ - first, or dots followed by one.
pub const WORKSPACE_PATTERN: &str =
    r"^(?:[A-Za-z0-9_-]|\.[A-Za-z0-9_-]|\.\.[A-Za-z0-9_.-])[A-Za-z0-9_.-]*$";

/// An id in the OpenAPI document (the `Id` schema): what [`valid_id`]
/// accepts. Never built; fields declare it with `value_type`.
pub struct Id;

impl utoipa::PartialSchema for Id {
    fn schema() -> RefOr<Schema> {
        text_schema(
            Some(128),
            Some(ID_PATTERN),
            "1-128 characters from A-Z a-z 0-9 _ - . : (what OpenAI, Anthropic and UUIDs produce), other than `.` and `..`",
        )
    }
}

impl ToSchema for Id {}

/// [`crate::tools::registry::valid_tool_name`] as a JSON Schema `pattern`.
pub const TOOL_NAME_PATTERN: &str = "^[A-Za-z0-9_.-]{1,64}$";

/// A call an assistant message declares, in the OpenAPI document: a
/// [`ToolCallRequest`] whose tool name is one a tool can have (a message
/// recording any other would give a context no model API accepts).
pub struct DeclaredToolCall;

impl utoipa::PartialSchema for DeclaredToolCall {
    fn schema() -> RefOr<Schema> {
        let name = || {
            text_schema(
                Some(64),
                Some(TOOL_NAME_PATTERN),
                "A tool's name: 1-64 characters from A-Z a-z 0-9 _ - .",
            )
        };
        utoipa::openapi::schema::AllOfBuilder::new()
            .item(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                "ToolCallRequest",
            )))
            .item(
                ObjectBuilder::new()
                    .property("name", name())
                    .property("function", ObjectBuilder::new().property("name", name())),
            )
            .description(Some(
                "A tool call in any accepted shape whose tool name matches [A-Za-z0-9_.-]{1,64}. Arguments sent as text that is not the JSON text of an object are recorded as {\"_raw\": \"<the text>\"}. A call that can never run as declared (an unknown tool, arguments that do not match its input schema) has its refusal recorded as its failed result when the message is. run_id, parent_message_id, workspace and dry_run are refused here: they are given when the call is posted",
            ))
            .into()
    }
}

impl ToSchema for DeclaredToolCall {}

/// A sub-workspace name in the OpenAPI document: what
/// [`valid_workspace_name`] accepts.
pub struct WorkspaceName;

impl utoipa::PartialSchema for WorkspaceName {
    fn schema() -> RefOr<Schema> {
        text_schema(
            Some(64),
            Some(WORKSPACE_PATTERN),
            "A sub-workspace of the owner's: 1-64 characters from A-Z a-z 0-9 _ - . and not `.` or `..`",
        )
    }
}

impl ToSchema for WorkspaceName {}

/// A non-empty string schema for the OpenAPI document's hand-written
/// components.
pub fn text_schema(
    max_length: Option<usize>,
    pattern: Option<&str>,
    description: &str,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(max_length)
        .pattern(pattern)
        .description(Some(description))
        .into()
}

fn err(pointer: &str, message: impl Into<String>) -> CallParseError {
    CallParseError {
        pointer: pointer.to_string(),
        message: message.into(),
        arguments_path: None,
    }
}

/// A problem with the arguments' content at `path` (a JSON pointer into
/// them), which the body holds at `pointer`.
fn arguments_err(
    pointer: &str,
    path: impl Into<String>,
    message: impl Into<String>,
) -> CallParseError {
    CallParseError {
        arguments_path: Some(path.into()),
        ..err(pointer, message)
    }
}

/// Identifier syntax shared by thread ids, tool call ids, run ids and
/// message ids: what OpenAI (`call_…`), Anthropic (`toolu_…`) and UUIDs
/// produce. [`ID_PATTERN`] says the same for the OpenAPI document. `.`
/// and `..` are left out: ids are path segments, and a URL client turns
/// those into a step up (`/v1/threads/../history` is `/v1/history`).
pub fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

fn id_field(obj: &Map<String, Value>, key: &str, pointer: &str) -> Result<String, CallParseError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(err(pointer, "is required")),
        Some(Value::String(s)) if valid_id(s) => Ok(s.clone()),
        Some(Value::String(_)) => Err(err(pointer, INVALID_ID)),
        Some(other) => Err(err(
            pointer,
            format!("must be a string, got {}", kind(other)),
        )),
    }
}

fn optional_id(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, CallParseError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => id_field(obj, key, &format!("/{key}")).map(Some),
    }
}

fn string_field(
    obj: &Map<String, Value>,
    key: &str,
    pointer: &str,
) -> Result<String, CallParseError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(err(pointer, "is required")),
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(err(pointer, "must not be empty")),
        Some(other) => Err(err(
            pointer,
            format!("must be a string, got {}", kind(other)),
        )),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object_arguments(v: Option<&Value>, pointer: &str) -> Result<Value, CallParseError> {
    match v {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(Value::Object(o)) => Ok(Value::Object(o.clone())),
        Some(other) => Err(arguments_err(
            pointer,
            "",
            format!("must be a JSON object, got {}", kind(other)),
        )),
    }
}

/// How deeply a request body (and arguments sent as JSON text) may nest
/// arrays and objects. What toolgate stores wraps a call's arguments a few
/// levels deeper (its output, its message's metadata), and what it stores
/// must always read back (serde_json stops at 128 levels): well below that.
pub const MAX_DEPTH: usize = 64;

/// The JSON pointer of the first array or object nested deeper than
/// [`MAX_DEPTH`] in `value`, if any.
pub fn too_deep(value: &Value) -> Option<String> {
    fn walk(value: &Value, depth: usize) -> Option<String> {
        match value {
            Value::Array(_) | Value::Object(_) if depth > MAX_DEPTH => Some(String::new()),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| walk(item, depth + 1).map(|rest| format!("/{i}{rest}"))),
            Value::Object(map) => map.iter().find_map(|(key, item)| {
                walk(item, depth + 1).map(|rest| format!("/{}{rest}", super::pointer_token(key)))
            }),
            _ => None,
        }
    }
    walk(value, 1)
}

/// Arguments that arrive as JSON text (OpenAI's `function.arguments`).
pub fn parse_argument_text(text: &str, pointer: &str) -> Result<Value, CallParseError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match super::json::from_str(text) {
        Ok(v @ Value::Object(_)) => {
            if let Some(at) = too_deep(&v) {
                return Err(arguments_err(
                    pointer,
                    at.clone(),
                    format!("nests arrays and objects more than {MAX_DEPTH} levels deep (at {at})"),
                ));
            }
            // The text spells it `\u0000` (JSON text holds no raw NUL);
            // refused as in a request body, so what runs is what is stored.
            if text.contains("\\u0000")
                && let Some(at) = super::json::nul_pointer(&v)
            {
                return Err(arguments_err(
                    pointer,
                    at.clone(),
                    format!("{} (at {at})", super::json::NUL_MESSAGE),
                ));
            }
            Ok(v)
        }
        Ok(other) => Err(arguments_err(
            pointer,
            "",
            format!("must encode a JSON object, got {}", kind(&other)),
        )),
        Err(
            ref e @ super::json::ReadError::RepeatedKey {
                pointer: ref at, ..
            },
        ) => Err(arguments_err(pointer, at.clone(), e.to_string())),
        Err(e) => Err(arguments_err(
            pointer,
            "",
            format!("is not valid JSON: {e}"),
        )),
    }
}

/// The fields every call shape takes besides its own.
pub const COMMON_FIELDS: [&str; 4] = ["run_id", "parent_message_id", "workspace", "dry_run"];
const NATIVE_FIELDS: [&str; 3] = ["id", "name", "arguments"];
/// `index`: as a streamed OpenAI response numbers its calls.
const OPENAI_FIELDS: [&str; 4] = ["id", "type", "function", "index"];
const OPENAI_FUNCTION_FIELDS: [&str; 2] = ["name", "arguments"];
/// `cache_control` and `caller`: as Anthropic's messages may carry them.
const ANTHROPIC_FIELDS: [&str; 6] = ["type", "id", "name", "input", "cache_control", "caller"];

/// A field no call shape has is refused, not ignored: a misspelt
/// `dry_run` (`dryRun`) or `workspace` must not run the call for real, or
/// somewhere else. Names that differ from a known one only in case, `_` or
/// `-` are pointed at it.
fn refuse_unknown_fields(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    what: &str,
    known: &[&[&str]],
) -> Result<(), CallParseError> {
    // Every call passes through here: nothing is allocated unless a field
    // is refused.
    let fields = || known.iter().flat_map(|k| k.iter().copied());
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    for key in obj.keys() {
        if fields().any(|k| k == key) {
            continue;
        }
        let like = fields()
            .find(|k| squash(k) == squash(key))
            .map(|k| format!("; did you mean {k:?}?"))
            .unwrap_or_default();
        return Err(err(
            &format!("{at}/{}", super::pointer_token(key)),
            format!(
                "is not a field of {what}, which takes {}{like}",
                fields().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(())
}

/// Parse a request body in any of the three accepted shapes.
pub fn parse(body: &Value) -> Result<IncomingCall, CallParseError> {
    let obj = body
        .as_object()
        .ok_or_else(|| err("", format!("must be a JSON object, got {}", kind(body))))?;
    let run_id = optional_id(obj, "run_id")?;
    let parent_message_id = optional_id(obj, "parent_message_id")?;
    let dry_run = match obj.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(err(
                "/dry_run",
                format!("must be a boolean, got {}", kind(other)),
            ));
        }
    };
    let workspace = match obj.get("workspace") {
        None | Some(Value::Null) => None,
        Some(Value::String(w)) if valid_workspace_name(w) => Some(w.clone()),
        Some(_) => {
            return Err(err(
                "/workspace",
                "must be 1-64 characters from A-Z a-z 0-9 _ - . and not `.` or `..`",
            ));
        }
    };

    if let Some(function) = obj.get("function") {
        // OpenAI: {"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}
        if let Some(t) = obj.get("type")
            && t != "function"
        {
            return Err(err(
                "/type",
                "must be \"function\" when `function` is present",
            ));
        }
        let f = function.as_object().ok_or_else(|| {
            err(
                "/function",
                format!("must be an object, got {}", kind(function)),
            )
        })?;
        refuse_unknown_fields(obj, "", "an OpenAI call", &[&OPENAI_FIELDS, &COMMON_FIELDS])?;
        // Ignored, but only in the form its schema documents.
        match obj.get("index") {
            None | Some(Value::Null) => {}
            // `1.0` is an integer to JSON Schema, so to this check too.
            Some(Value::Number(n))
                if n.as_f64().is_some_and(|i| {
                    i.fract() == 0.0 && (0.0..=f64::from(i32::MAX)).contains(&i)
                }) => {}
            Some(other) => {
                return Err(err(
                    "/index",
                    format!(
                        "must be a whole number from 0 to {}, got {}",
                        i32::MAX,
                        match other {
                            Value::Number(n) => n.to_string(),
                            _ => kind(other).to_string(),
                        }
                    ),
                ));
            }
        }
        refuse_unknown_fields(
            f,
            "/function",
            "an OpenAI call's function",
            &[&OPENAI_FUNCTION_FIELDS],
        )?;
        let arguments = match f.get("arguments") {
            Some(Value::String(s)) => parse_argument_text(s, "/function/arguments")?,
            other => object_arguments(other, "/function/arguments")?,
        };
        return Ok(IncomingCall {
            id: id_field(obj, "id", "/id")?,
            name: string_field(f, "name", "/function/name")?,
            arguments,
            shape: CallShape::Openai,
            run_id,
            parent_message_id,
            workspace,
            dry_run,
        });
    }

    if obj.get("type").and_then(Value::as_str) == Some("tool_use") {
        // Anthropic: {"type": "tool_use", "id", "name", "input": {...}}
        refuse_unknown_fields(
            obj,
            "",
            "an Anthropic call",
            &[&ANTHROPIC_FIELDS, &COMMON_FIELDS],
        )?;
        // Ignored, but only in the form their schema documents.
        for field in ["cache_control", "caller"] {
            match obj.get(field) {
                None | Some(Value::Null | Value::Object(_)) => {}
                Some(other) => {
                    return Err(err(
                        &format!("/{field}"),
                        format!("must be an object, got {}", kind(other)),
                    ));
                }
            }
        }
        return Ok(IncomingCall {
            id: id_field(obj, "id", "/id")?,
            name: string_field(obj, "name", "/name")?,
            arguments: object_arguments(obj.get("input"), "/input")?,
            shape: CallShape::Anthropic,
            run_id,
            parent_message_id,
            workspace,
            dry_run,
        });
    }
    if obj.get("type").and_then(Value::as_str) == Some("function") {
        return Err(err(
            "/function",
            "is missing: an OpenAI call (`type: \"function\"`) names its tool and arguments in `function: {\"name\", \"arguments\"}`; a native call has no `type`",
        ));
    }
    if let Some(t) = obj.get("type") {
        return Err(err(
            "/type",
            format!(
                "unknown call type {t}; expected \"function\" (OpenAI) or \"tool_use\" (Anthropic), or no type (native)"
            ),
        ));
    }

    // Native: {"id", "name", "arguments": {...}}
    refuse_unknown_fields(obj, "", "a call", &[&NATIVE_FIELDS, &COMMON_FIELDS])?;
    let arguments = match obj.get("arguments") {
        Some(Value::String(s)) => parse_argument_text(s, "/arguments")?,
        other => object_arguments(other, "/arguments")?,
    };
    Ok(IncomingCall {
        id: id_field(obj, "id", "/id")?,
        name: string_field(obj, "name", "/name")?,
        arguments,
        shape: CallShape::Native,
        run_id,
        parent_message_id,
        workspace,
        dry_run,
    })
}

/// A call an assistant message declares, as the model made it: arguments
/// sent as text that is not the JSON text of an object (a model's output
/// cut short, say) are kept as `{"_raw": "<the text>"}`, as an AG-UI run
/// records them, with the error they get, so the conversation holds the
/// call and the model can read what was wrong with it. Any other problem
/// is the envelope's, and an error.
pub fn parse_declared(
    body: &Value,
) -> Result<(IncomingCall, Option<CallParseError>), CallParseError> {
    let refused = match parse(body) {
        Ok(call) => return Ok((call, None)),
        Err(e) if e.arguments_path.is_some() => e,
        Err(e) => return Err(e),
    };
    let text_at = if body.get("function").is_some() {
        "/function/arguments"
    } else {
        "/arguments"
    };
    let Some(text) = body.pointer(text_at).and_then(Value::as_str) else {
        return Err(refused);
    };
    let mut bare = body.clone();
    if let Some(arguments) = bare.pointer_mut(text_at) {
        *arguments = Value::String("{}".into());
    }
    let mut call = parse(&bare)?;
    call.arguments = serde_json::json!({ "_raw": text });
    Ok((call, Some(refused)))
}

/// A sub-workspace name: one plain path component.
pub fn valid_workspace_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Native shape (documentation of the request body).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "call_1", "name": "echo", "arguments": {"text": "hi"}}))]
pub struct NativeCall {
    #[schema(value_type = Id)]
    pub id: String,
    #[schema(min_length = 1)]
    pub name: String,
    /// Absent or `null`: `{}`.
    #[schema(value_type = Option<Object>)]
    pub arguments: Value,
    #[schema(value_type = Option<Id>)]
    pub run_id: Option<String>,
    /// The assistant message that made the call: a message of another
    /// role in the thread is refused; one not recorded yet is taken.
    #[schema(value_type = Option<Id>)]
    pub parent_message_id: Option<String>,
    /// Sub-workspace of the owner to work in.
    #[schema(value_type = Option<WorkspaceName>)]
    pub workspace: Option<String>,
    /// Preview instead of executing: `{would_affect, preview, estimated_impact}`.
    pub dry_run: Option<bool>,
}

/// OpenAI shape, as the model produced it (`arguments` is JSON text).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}))]
pub struct OpenAiCall {
    #[schema(value_type = Id)]
    pub id: String,
    /// `function`; may be left out.
    #[serde(rename = "type")]
    #[schema(value_type = Option<String>, pattern = "^function$", nullable = false)]
    pub kind: Option<String>,
    pub function: super::agui::FunctionCall,
    /// The call's place in a streamed response; accepted and ignored.
    #[schema(minimum = 0, maximum = 2147483647)]
    pub index: Option<i32>,
    #[schema(value_type = Option<Id>)]
    pub run_id: Option<String>,
    /// The assistant message that made the call: a message of another
    /// role in the thread is refused; one not recorded yet is taken.
    #[schema(value_type = Option<Id>)]
    pub parent_message_id: Option<String>,
    /// Sub-workspace of the owner to work in.
    #[schema(value_type = Option<WorkspaceName>)]
    pub workspace: Option<String>,
    /// Preview instead of executing: `{would_affect, preview, estimated_impact}`.
    pub dry_run: Option<bool>,
}

/// Anthropic shape, as the model produced it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}}))]
pub struct AnthropicCall {
    #[serde(rename = "type")]
    #[schema(pattern = "^tool_use$")]
    pub kind: String,
    #[schema(value_type = Id)]
    pub id: String,
    #[schema(min_length = 1)]
    pub name: String,
    /// Absent or `null`: `{}`.
    #[schema(value_type = Option<Object>)]
    pub input: Value,
    /// As Anthropic's messages may carry it; accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
    /// As Anthropic's messages may carry it; accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub caller: Option<Value>,
    #[schema(value_type = Option<Id>)]
    pub run_id: Option<String>,
    /// The assistant message that made the call: a message of another
    /// role in the thread is refused; one not recorded yet is taken.
    #[schema(value_type = Option<Id>)]
    pub parent_message_id: Option<String>,
    /// Sub-workspace of the owner to work in.
    #[schema(value_type = Option<WorkspaceName>)]
    pub workspace: Option<String>,
    /// Preview instead of executing: `{would_affect, preview, estimated_impact}`.
    pub dry_run: Option<bool>,
}

/// A tool call in any accepted shape.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolCallRequest {
    Native(NativeCall),
    Openai(OpenAiCall),
    Anthropic(AnthropicCall),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_shapes_parse_to_the_same_call() {
        let native =
            parse(&json!({"id": "call_1", "name": "echo", "arguments": {"text": "hi"}})).unwrap();
        let openai = parse(&json!({"id": "call_1", "type": "function",
            "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}))
        .unwrap();
        let anthropic = parse(
            &json!({"type": "tool_use", "id": "call_1", "name": "echo", "input": {"text": "hi"}}),
        )
        .unwrap();
        for c in [&native, &openai, &anthropic] {
            assert_eq!((c.id.as_str(), c.name.as_str()), ("call_1", "echo"));
            assert_eq!(c.arguments, json!({"text": "hi"}));
        }
        assert_eq!(openai.shape, CallShape::Openai);
        assert_eq!(anthropic.shape, CallShape::Anthropic);
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let refused = |body: Value| parse(&body).unwrap_err();
        let e = refused(json!({"id": "c", "name": "write_file", "arguments": {}, "dryRun": true}));
        assert_eq!(e.pointer, "/dryRun");
        assert!(
            e.message.contains("did you mean \"dry_run\"?"),
            "{}",
            e.message
        );
        let e = refused(json!({"id": "c", "name": "echo", "workspce": "x"}));
        assert_eq!(e.pointer, "/workspce");
        assert!(
            e.message
                .starts_with("is not a field of a call, which takes id, name, arguments, run_id"),
            "{}",
            e.message
        );
        let e = refused(json!({"id": "c", "function": {"name": "echo", "a/b": 1}}));
        assert_eq!(e.pointer, "/function/a~1b");
        let e = refused(json!({"type": "tool_use", "id": "c", "name": "echo", "Input": {}}));
        assert_eq!(e.pointer, "/Input");
        assert!(
            e.message.contains("did you mean \"input\"?"),
            "{}",
            e.message
        );
        // A native call marked as OpenAI's is told what OpenAI's looks like.
        let e = refused(json!({"id": "c", "type": "function", "name": "echo", "arguments": {}}));
        assert_eq!(e.pointer, "/function");
        assert!(
            e.message.contains("function: {\"name\", \"arguments\"}"),
            "{}",
            e.message
        );
        // What the vendors send besides the call is accepted.
        for body in [
            json!({"index": 0, "id": "c", "type": "function", "function": {"name": "echo", "arguments": "{}"}}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "input": {}, "cache_control": {"type": "ephemeral"}}),
        ] {
            assert!(parse(&body).is_ok(), "{body}");
        }
    }

    /// The spec documents `arguments` / `input` as optional: absent or
    /// `null` is an empty object, in every shape.
    #[test]
    fn absent_or_null_arguments_are_an_empty_object() {
        for call in [
            json!({"id": "c", "name": "echo"}),
            json!({"id": "c", "name": "echo", "arguments": null}),
            json!({"type": "tool_use", "id": "c", "name": "echo"}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "input": null}),
        ] {
            assert_eq!(parse(&call).unwrap().arguments, json!({}), "{call}");
        }
    }

    #[test]
    fn invalid_argument_text_names_the_field() {
        let e = parse(&json!({"id": "c", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":"}})).unwrap_err();
        assert_eq!(e.pointer, "/function/arguments");
        assert_eq!(e.arguments_path.as_deref(), Some(""));
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }

    #[test]
    fn envelope_errors_name_the_field() {
        assert_eq!(parse(&json!({"name": "echo"})).unwrap_err().pointer, "/id");
        assert_eq!(
            parse(&json!({"id": "c", "name": 3})).unwrap_err().pointer,
            "/name"
        );
        assert_eq!(
            parse(&json!({"id": "a b", "name": "x"}))
                .unwrap_err()
                .pointer,
            "/id"
        );
        assert_eq!(
            parse(&json!({"id": "c", "name": "x", "arguments": [1]}))
                .unwrap_err()
                .pointer,
            "/arguments"
        );
        assert_eq!(parse(&json!([1])).unwrap_err().pointer, "");
        assert_eq!(
            parse(&json!({"id": "c", "type": "bogus", "name": "x"}))
                .unwrap_err()
                .pointer,
            "/type"
        );
    }
}
