//! The OpenAPI document (also checked in at `openapi/openapi.json`) and the
//! offline Swagger UI at `/docs`.

use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

use serde_json::{Value, json};

use super::AppState;
use super::error::PROBLEM_JSON;

#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate", description = "Tool execution for agent backends: gated, stored, streamed as AG-UI events. No string in a request may contain U+0000 (NUL), which Postgres cannot store: a body holding one is refused with a 422 whose `errors` name its JSON pointer, a path or query with `%00` with a 400."),
    paths(
        super::threads::post_tool_call,
        super::threads::get_tool_call,
        super::threads::cancel_tool_call,
        super::threads::undo_tool_call,
        super::threads::rollback_run,
        super::approvals::list_approvals,
        super::approval_stream::approval_events,
        super::approvals::get_approval,
        super::approvals::decide,
        super::approvals::get_permissions,
        super::approvals::put_permissions,
        super::audit::get_audit,
        super::workspace::get_workspace,
        super::batches::post_batch,
        super::threads::post_message,
        super::threads::list_threads,
        super::threads::delete_thread,
        super::threads::get_history,
        super::threads::get_context,
        super::events::get_events,
        super::runs::post_run,
        super::tools::list_tools,
        super::tools::get_tool,
        super::tools::system_prompt,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics_text,
    ),
    components(schemas(
        crate::protocol::tool_output::ToolAgentOutput,
        crate::protocol::tool_output::ToolError,
        crate::protocol::tool_output::UndoInfo,
        crate::tools::ToolDefinition,
        crate::protocol::calls::Id,
        crate::protocol::calls::WorkspaceName,
    )),
    modifiers(&Security),
    tags(
        (name = "tool calls", description = "Execute model tool calls"),
        (name = "messages", description = "Record the rest of the conversation"),
        (name = "history", description = "Replay and rebuild context"),
        (name = "events", description = "AG-UI event stream (SSE)"),
        (name = "ag-ui", description = "AG-UI agent endpoint"),
        (name = "tools", description = "The tool registry"),
        (name = "approvals", description = "Human checkpoint: calls waiting for a decision"),
        (name = "permissions", description = "Permission rules"),
        (name = "audit", description = "Append-only audit log"),
        (name = "workspace", description = "The caller's workspace and its confinement"),
        (name = "operations", description = "Health, readiness, metrics"),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The document as served and as checked in, with the ui_schema v1 JSON
/// Schema published as the `UiSchema` component (OpenAPI 3.1 schemas are
/// JSON Schema, so it goes in unchanged).
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes");
    let mut ui = crate::protocol::ui_schema::json_schema().clone();
    if let Some(obj) = ui.as_object_mut() {
        // `$schema`/`$id` belong to a standalone document, not a component.
        obj.remove("$schema");
        obj.remove("$id");
    }
    doc["components"]["schemas"]["UiSchema"] = ui;
    doc["components"]["schemas"]["Problem"] = problem_schema();
    constrain_ids(&mut doc);
    separate_call_shapes(&mut doc);
    assistant_fields_for_assistants_only(&mut doc);
    declared_calls_take_no_posting_fields(&mut doc);
    add_examples(&mut doc);
    add_common_problems(&mut doc);
    doc
}

/// `post_message` refuses `tool_calls` and `thinking` (other than `null`)
/// on a message whose role is not `assistant`; say so in the schema.
fn assistant_fields_for_assistants_only(doc: &mut Value) {
    let message = &mut doc["components"]["schemas"]["NewMessageRequest"];
    message["if"] = json!({"properties": {"role": {"const": "assistant"}}});
    message["else"] = json!({"properties": {
        "tool_calls": {"type": "null"},
        "thinking": {"type": "null"},
    }});
    // A block with a field it does not have is refused, as is a message.
    for block in doc["components"]["schemas"]["ThinkingBlock"]["oneOf"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        block["additionalProperties"] = json!(false);
    }
}

/// A declared call says what the model asked for; how it runs is given
/// when it is posted: `post_message` refuses these fields on it.
fn declared_calls_take_no_posting_fields(doc: &mut Value) {
    let refused: Vec<Value> = crate::protocol::calls::COMMON_FIELDS
        .iter()
        .map(|field| json!({"required": [field]}))
        .collect();
    doc["components"]["schemas"]["DeclaredToolCall"]["not"] = json!({"anyOf": refused});
}

/// Examples the explorer offers to pick from: each call shape a tool call
/// may come in, and an AG-UI run (its `threadId` is the path's: run it on
/// thread `thread_1`).
fn add_examples(doc: &mut Value) {
    fn json_body<'a>(doc: &'a mut Value, path: &str) -> &'a mut Value {
        &mut doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    }
    // Every thread operation opens on one thread, the run's example's.
    if let Some(paths) = doc["paths"].as_object_mut() {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in operation.values_mut() {
                let params = op.get_mut("parameters").and_then(Value::as_array_mut);
                for param in params.into_iter().flatten() {
                    if param["name"] == "thread_id" && param["in"] == "path" {
                        param["example"] = json!("thread_1");
                    }
                }
            }
        }
    }
    json_body(doc, "/v1/threads/{thread_id}/tool-calls")["examples"] = json!({
        "native": {"summary": "Native", "value":
            {"id": "call_1", "name": "echo", "arguments": {"text": "hi"}}},
        "openai": {"summary": "OpenAI (arguments as JSON text)", "value":
            {"id": "call_2", "type": "function",
             "function": {"name": "echo", "arguments": "{\"text\": \"hi\"}"}}},
        "anthropic": {"summary": "Anthropic", "value":
            {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}}},
    });
    json_body(doc, "/v1/threads/{thread_id}/runs")["example"] = json!({
        "threadId": "thread_1", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "msg_ru1", "role": "user", "content": "Say hi."},
            {"id": "msg_ra1", "role": "assistant", "toolCalls": [
                {"id": "call_r1", "type": "function",
                 "function": {"name": "echo", "arguments": "{\"text\": \"hi\"}"}}]}
        ]
    });
}

/// Make the three call shapes exclusive, as the server tells them apart: a
/// body with `function` is OpenAI's, one with `type: "tool_use"` (and no
/// `function`) Anthropic's, and a native call has neither key (any other
/// `type` is refused). Without this a native call would also match the
/// Anthropic shape, whose `input` is optional too.
///
/// The arguments are described as the parser takes them too: OpenAI's
/// `function.arguments` and a native `arguments` may each be an object or
/// its JSON text, and absent or `null` is `{}`. (`FunctionCall`, the AG-UI
/// message's form, keeps its JSON text.)
fn separate_call_shapes(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    let arguments = json!({
        "description": "An object, or its JSON text; absent or `null`: `{}`.",
        "type": ["object", "string", "null"],
    });
    schemas["NativeCall"]["properties"]["arguments"] = arguments.clone();
    schemas["OpenAiCall"]["properties"]["function"] = json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "arguments": arguments,
        },
    });
    schemas["NativeCall"]["not"] = json!({"anyOf": [
        {"required": ["type"]},
        {"required": ["function"]},
    ]});
    schemas["AnthropicCall"]["not"] = json!({"required": ["function"]});
    // A field no shape has is refused (a misspelt `dry_run` must not run
    // the call for real).
    for shape in ["NativeCall", "OpenAiCall", "AnthropicCall"] {
        schemas[shape]["additionalProperties"] = json!(false);
    }
    schemas["OpenAiCall"]["properties"]["function"]["additionalProperties"] = json!(false);
}

/// Path parameters that are toolgate ids, checked by `valid_id`.
const ID_PARAMETERS: [&str; 3] = ["thread_id", "run_id", "tool_call_id"];

/// Give every id path parameter the syntax the server checks.
fn constrain_ids(doc: &mut Value) {
    for operation in operations(doc) {
        let Some(parameters) = operation
            .get_mut("parameters")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for parameter in parameters {
            let is_id = parameter["in"] == "path"
                && ID_PARAMETERS.contains(&parameter["name"].as_str().unwrap_or_default());
            if is_id {
                parameter["schema"] = json!({"$ref": "#/components/schemas/Id"});
            }
        }
    }
}

/// The answers every `/v1` operation can give whatever its handler says:
/// the token check (401), the database being unavailable (503), malformed
/// parameters (400), and for a JSON body a malformed (400), oversized
/// (413), mistyped (415) or ill-shaped (422) one; and every operation,
/// `/v1` or not, an oversized target (414) or header fields (431), or no
/// answer in time (408). Every problem answer gets the `Problem` schema.
fn add_common_problems(doc: &mut Value) {
    let problem = |description: &str| {
        json!({
            "description": description,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        })
    };
    let paths = doc["paths"]
        .as_object_mut()
        .expect("the document has paths");
    for (path, item) in paths.iter_mut() {
        let v1 = path.starts_with("/v1/");
        for (method, operation) in item.as_object_mut().into_iter().flat_map(|i| i.iter_mut()) {
            let reads_body = method != "get" && method != "head";
            let has_body = operation.get("requestBody").is_some();
            let has_parameters = operation
                .get("parameters")
                .and_then(Value::as_array)
                .is_some_and(|p| !p.is_empty());
            let responses = operation["responses"]
                .as_object_mut()
                .expect("an operation has responses");
            let mut common = vec![
                (
                    "414",
                    problem(&format!(
                        "Request target (path and query) longer than {} bytes",
                        super::error::MAX_TARGET_BYTES
                    )),
                ),
                (
                    "431",
                    problem(&format!(
                        "Request header fields larger than {} bytes in all",
                        super::error::MAX_HEADER_BYTES
                    )),
                ),
                (
                    "408",
                    problem(
                        "No answer within `server.request_timeout_secs` (a tool call goes on and is recorded: post it again with the same id for its outcome)",
                    ),
                ),
            ];
            if v1 {
                let mut unauthorized = problem(
                    "Missing, malformed, expired or forged bearer token, or one for another audience",
                );
                unauthorized["headers"] = json!({"WWW-Authenticate": {
                    "description": "`Bearer realm=\"toolgate\", error=\"invalid_token\", error_description=\"…\"`; `Bearer realm=\"toolgate\"` alone when no token was sent (RFC 6750)",
                    "schema": {"type": "string"},
                }});
                common.push(("401", unauthorized));
                common.push((
                    "503",
                    problem("The database is unavailable; retry (a call posted again with the same id runs at most once)"),
                ));
            }
            if v1 && path.contains("{thread_id}") && method != "delete" {
                common.push((
                    "410",
                    problem("The thread was deleted (`code` `THREAD_DELETED`, `deleted_at` when); its id is not used again"),
                ));
            }
            if v1 && (has_parameters || has_body) {
                common.push((
                    "400",
                    problem("Malformed path or query parameter, or a body that is not JSON (`errors` names the parameter or the JSON pointer)"),
                ));
            }
            if has_body {
                let limit = match path.ends_with("/runs") {
                    // An AG-UI client sends the whole conversation each run.
                    true => "server.run_body_limit_bytes",
                    false => "server.body_limit_bytes",
                };
                common.push(("413", problem(&format!("Body larger than `{limit}`"))));
                common.push((
                    "415",
                    problem("Body not sent with `Content-Type: application/json`, or sent with a `Content-Encoding`"),
                ));
                common.push((
                    "422",
                    problem("JSON of the wrong shape (`errors` names the JSON pointer)"),
                ));
            } else {
                // Every request's encoding is checked before routing, also
                // where the route takes no body; a `POST` that takes none
                // reads one to refuse it (a `GET` leaves it unread).
                if reads_body {
                    common.push((
                        "413",
                        problem(
                            "A body larger than `server.body_limit_bytes` (this route takes none)",
                        ),
                    ));
                }
                common.push((
                    "415",
                    problem("A body sent with a `Content-Encoding` (this route takes none)"),
                ));
            }
            for (status, response) in common {
                responses.entry(status).or_insert(response);
            }
            // A busy or unavailable answer says when to try again.
            for status in ["429", "503"] {
                if let Some(response) = responses.get_mut(status) {
                    response["headers"]["Retry-After"] = json!({
                        "description": "Seconds to wait before trying again",
                        "schema": {"type": "integer", "minimum": 0},
                    });
                }
            }
            for response in responses.values_mut() {
                if let Some(media) =
                    response.pointer_mut(&format!("/content/{}", PROBLEM_JSON.replace('/', "~1")))
                    && media.get("schema").is_none()
                {
                    media["schema"] = json!({"$ref": "#/components/schemas/Problem"});
                }
            }
        }
    }
}

/// Every operation object of the document.
fn operations(doc: &mut Value) -> impl Iterator<Item = &mut Value> {
    doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
}

/// RFC 9457 problem details as toolgate writes them.
fn problem_schema() -> Value {
    json!({
        "type": "object",
        "description": "RFC 9457 problem details (`application/problem+json`). Some problems add members: a refused tool call carries `tool_error` and `tool_response`, a 429 comes with `Retry-After`.",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "description": "`urn:toolgate:problem:<kind>`, e.g. `urn:toolgate:problem:unprocessable`"},
            "title": {"type": "string"},
            "status": {"type": "integer", "description": "The HTTP status code"},
            "detail": {"type": "string", "description": "What was wrong, precisely enough to fix the request"},
            "code": {
                "type": "string",
                "description": "What kind of problem, for a program to act on: on every `409`, one of `CONFLICT`, `CALL_CONFLICT` (the call id is another call's: never post it again as it is), `MESSAGE_CONFLICT`, `OTHER_PARENT`, `RUN_CLOSED`, `WAITS_FOR_APPROVAL` (a batch's call held behind the call `errors[0].tool_call_id` names: post it again once that one is decided), `IN_PROGRESS` (post it again later), `ALREADY_DECIDED`, `APPROVAL_EXPIRED`, `ALREADY_UNDONE`, `ALREADY_ROLLED_BACK`, `ALREADY_FINISHED`, `BEING_CANCELLED`, `RUNS_ELSEWHERE`, `THREAD_BUSY` (a thread with calls still running or waiting for approval, listed in `errors`, is not deleted), `THREAD_CLOSING` (a thread being deleted takes no new calls or messages); on a `410`, `THREAD_DELETED`; on a refused tool call's `422`, its tool error's code (`TOOL_NOT_FOUND`, `INVALID_ARGUMENTS`); on an undo's `422`, `NOT_UNDOABLE` or `IRREVERSIBLE`"
            },
            "deleted_at": {"type": "string", "format": "date-time", "description": "On a `410` `THREAD_DELETED`: when the thread was deleted"},
            "errors": {
                "type": "array",
                "description": "One entry per offending place and its `message`: `pointer` (a JSON pointer into the body), `parameter` (a path or query parameter or the `Last-Event-ID` header), or, for a tool call's `INVALID_ARGUMENTS`, `path` (a JSON pointer into the call's arguments, whatever the call's shape: OpenAI's arguments are a JSON string inside the body), or `field`",
                "items": {
                    "type": "object",
                    "required": ["message"],
                    "properties": {
                        "pointer": {"type": "string"},
                        "parameter": {"type": "string"},
                        "path": {"type": "string"},
                        "field": {"type": "string", "description": "For a `409` on a call id recorded as another call: what differs (`name`, `arguments`, `workspace` or `dry_run`); `run_id` for a call posted to a run that was rolled back; `parent_message_id` for a call whose parent the thread recorded as another role's message while the call was being posted (found before, the same is a `422` with `pointer` `/parent_message_id`)"},
                        "tool_call_id": {"type": "string", "description": "For a `409` `WAITS_FOR_APPROVAL`: the call it waits behind; for a `409` `THREAD_BUSY`: a call still running or waiting for approval"},
                        "status": {"type": "string", "description": "For a `409` `THREAD_BUSY`: the call's status (`running` or `pending_approval`)"},
                        "message": {"type": "string"},
                    },
                },
            },
        },
    })
}

/// The query parameters the document lists for operation `method` (lower
/// case) on route `path` (its pattern); `None` for an operation it does
/// not describe.
pub fn query_parameters(method: &str, path: &str) -> Option<&'static [String]> {
    use std::collections::HashMap;
    static KNOWN: std::sync::OnceLock<HashMap<(String, String), Vec<String>>> =
        std::sync::OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        let doc = document();
        let mut known = HashMap::new();
        for (path, operations) in doc["paths"].as_object().into_iter().flatten() {
            for (method, operation) in operations.as_object().into_iter().flatten() {
                let names = operation["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect();
                known.insert((method.clone(), path.clone()), names);
            }
        }
        known
    });
    known
        .get(&(method.to_string(), path.to_string()))
        .map(Vec::as_slice)
}

pub fn document_json() -> String {
    serde_json::to_string_pretty(&document()).expect("the OpenAPI document serializes") + "\n"
}

pub fn routes() -> Router<AppState> {
    // Swagger UI's default sends the document's address to swagger.io's
    // online validator from any host but localhost: the explorer stays
    // offline.
    let config = utoipa_swagger_ui::Config::default().validator_url("none");
    Router::new().merge(
        SwaggerUi::new("/docs")
            .external_url_unchecked("/openapi.json", document())
            .config(config),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::calls::{valid_id, valid_workspace_name};

    fn component(doc: &Value, name: &str) -> jsonschema::Validator {
        jsonschema::draft202012::new(&doc["components"]["schemas"][name])
            .unwrap_or_else(|e| panic!("{name} compiles: {e}"))
    }

    #[test]
    fn ids_and_workspace_names_are_described_as_the_server_checks_them() {
        let doc = document();
        let id = component(&doc, "Id");
        let workspace = component(&doc, "WorkspaceName");
        let long = "a".repeat(128);
        let too_long = "a".repeat(129);
        let samples = [
            "",
            ".",
            "..",
            "...",
            ".a",
            "..a",
            "a.",
            "a..b",
            "-",
            "_x",
            "call_1",
            "toolu_01A",
            "a:b",
            "a b",
            "a/b",
            "ü",
            "a\n",
            "0",
            &long,
            &too_long,
        ];
        for s in samples {
            let v = json!(s);
            assert_eq!(id.is_valid(&v), valid_id(s), "Id and valid_id on {s:?}");
            assert_eq!(
                workspace.is_valid(&v),
                valid_workspace_name(s),
                "WorkspaceName and valid_workspace_name on {s:?}"
            );
        }
    }

    #[test]
    fn every_v1_operation_documents_the_answers_every_handler_can_give() {
        let doc = document();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let responses = &op["responses"];
                for (status, response) in responses.as_object().unwrap() {
                    if let Some(media) = response["content"].get(PROBLEM_JSON) {
                        assert_eq!(
                            media["schema"]["$ref"], "#/components/schemas/Problem",
                            "{method} {path} {status}"
                        );
                    }
                }
                for status in ["408", "414", "415", "431"] {
                    assert!(responses.get(status).is_some(), "{method} {path}: {status}");
                }
                for status in ["429", "503"] {
                    if let Some(response) = responses.get(status) {
                        assert!(
                            response["headers"].get("Retry-After").is_some(),
                            "{method} {path}: {status} with Retry-After"
                        );
                    }
                }
                // A body is read, and so may be too large, except by a GET.
                assert_eq!(
                    responses.get("413").is_some(),
                    method != "get",
                    "{method} {path}: 413"
                );
                if !path.starts_with("/v1/") {
                    continue;
                }
                checked += 1;
                assert!(
                    responses["401"]["headers"]
                        .get("WWW-Authenticate")
                        .is_some(),
                    "{method} {path}: 401 with its challenge"
                );
                if op.get("requestBody").is_some() {
                    for status in ["400", "413", "415", "422"] {
                        assert!(responses.get(status).is_some(), "{method} {path}: {status}");
                    }
                }
                for p in op["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "path" && ID_PARAMETERS.contains(&p["name"].as_str().unwrap()) {
                        assert_eq!(p["schema"]["$ref"], "#/components/schemas/Id");
                    }
                }
            }
        }
        assert!(checked > 15, "only {checked} /v1 operations");
        for path in [
            "/v1/threads/{thread_id}/events",
            "/v1/threads/{thread_id}/runs",
        ] {
            let ok = doc["paths"][path]
                .as_object()
                .unwrap()
                .values()
                .next()
                .unwrap()["responses"]["200"]["content"]["text/event-stream"]["schema"]
                .clone();
            assert_eq!(ok["$ref"], "#/components/schemas/AgUiSseEvent", "{path}");
        }
        let event = &doc["components"]["schemas"]["AgUiSseEvent"];
        assert_eq!(event["properties"]["data"]["type"], "string");
        assert_eq!(event["required"], json!(["data"]));
    }

    /// A validator for the named component, with the document as its root
    /// so its `$ref`s resolve.
    fn component_in_document(doc: &Value, name: &str) -> jsonschema::Validator {
        let mut root = doc.clone();
        root["$ref"] = json!(format!("#/components/schemas/{name}"));
        jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("{name} compiles: {e}"))
    }

    /// A content part's type is one the server takes, in the document too.
    #[test]
    fn content_part_types_are_those_the_server_takes() {
        let doc = document();
        let content = component_in_document(&doc, "MessageContent");
        for kind in ["text", "image", "audio", "video", "document"] {
            assert!(content.is_valid(&json!([{"type": kind}])), "{kind}");
            let part = json!({"type": kind, "text": "x",
                              "source": {"type": "url", "value": "https://x.test/a"}});
            let checked = crate::protocol::parts::check(std::slice::from_ref(&part));
            assert!(checked.is_ok(), "{kind}: {checked:?}");
        }
        assert!(!content.is_valid(&json!([{"type": "thoughts"}])));
        assert!(crate::protocol::parts::check(&[json!({"type": "thoughts"})]).is_err());
    }

    /// A tool call's answer, as the server writes it (a success, a failure),
    /// is one its documented schema accepts, the output's fields included.
    #[test]
    fn a_tool_call_answer_matches_its_schema() {
        let doc = document();
        let schema = component_in_document(&doc, "ToolCallResponse");
        let output = |status: &str, result: Value, error: Value| {
            let mut output = json!({"tool_name": "echo", "tool_call_id": "c1",
                "tool_call_args": {"text": "hi"}, "status": status, "result": result});
            if !error.is_null() {
                output["error"] = error;
            }
            json!({"tool_agent_output": output, "tool_response": {"content": "{}"},
                   "message_id": "m1", "replayed": false})
        };
        for answer in [
            output("success", json!({"text": "hi"}), Value::Null),
            output(
                "failure",
                Value::Null,
                json!({"code": "INVALID_ARGUMENTS", "message": "/text: missing", "retryable": false,
                       "hint": "add it", "errors": [{"path": "/text", "message": "missing"}]}),
            ),
        ] {
            let parsed: crate::http::threads::ToolCallResponse =
                serde_json::from_value(answer).unwrap();
            let written = serde_json::to_value(&parsed).unwrap();
            let errors: Vec<String> = schema
                .iter_errors(&written)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{errors:?}: {written}");
        }
        // The output is described, not any object.
        let wrong = output("finished", json!(1), Value::Null);
        let parsed = json!({"tool_agent_output": wrong["tool_agent_output"], "tool_response": {"content": ""}, "message_id": "m", "replayed": false});
        assert!(!schema.is_valid(&parsed));
    }

    /// The spec's three call shapes accept what the server's parser accepts,
    /// and a call it accepts has exactly one shape.
    #[test]
    fn the_call_shapes_are_described_as_the_server_tells_them_apart() {
        let doc = document();
        let any = component_in_document(&doc, "ToolCallRequest");
        let shapes = ["NativeCall", "OpenAiCall", "AnthropicCall"]
            .map(|name| (name, component_in_document(&doc, name)));
        let samples = [
            json!({"id": "c", "name": "echo", "arguments": {"text": "hi"}}),
            json!({"id": "c", "name": "echo"}),
            json!({"id": "c", "name": "echo", "arguments": null, "run_id": "r"}),
            json!({"id": "c", "type": "function", "function": {"name": "echo", "arguments": "{}"}}),
            json!({"id": "c", "function": {"name": "echo", "arguments": "{}"}}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "input": {"text": "hi"}}),
            json!({"type": "tool_use", "id": "c", "name": "echo"}),
            json!({"id": "c", "function": {"name": "echo"}}),
            json!({"id": "c", "function": {"name": "echo", "arguments": {"text": "hi"}}}),
            json!({"id": "c", "name": "echo", "arguments": "{\"text\": \"hi\"}"}),
            // Refused by the server, so by the spec too.
            json!({"id": "c", "function": {"name": "", "arguments": "{}"}}),
            json!({"id": "c", "function": {"name": "echo", "arguments": 5}}),
            json!({"id": "c", "name": "echo", "arguments": 5}),
            json!({"id": "c", "name": "echo", "type": null}),
            json!({"id": "c", "name": "echo", "function": null}),
            json!({"id": "c", "name": "echo", "type": "bogus"}),
            json!({"id": "c", "name": "echo", "type": "function"}),
            json!({"type": "tool_use", "id": "c", "name": "echo",
                "function": {"name": "echo", "arguments": "{}"}}),
            json!({"id": "c", "type": "tool_use", "function": {"name": "echo", "arguments": "{}"}}),
            json!({"name": "echo", "arguments": {}}),
            json!({"type": "tool_use", "id": "c", "input": {}}),
            json!({"id": "c", "name": "echo", "arguments": [1]}),
            // Every shape takes the common fields; none takes an unknown one.
            json!({"id": "c", "name": "echo", "dry_run": true, "workspace": "w"}),
            json!({"id": "c", "name": "echo", "dryRun": true}),
            json!({"id": "c", "index": 0, "function": {"name": "echo"}, "dry_run": true,
                "workspace": "w", "parent_message_id": "m"}),
            json!({"id": "c", "function": {"name": "echo", "strict": true}}),
            json!({"id": "c", "function": {"name": "echo"}, "workspce": "w"}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "dry_run": true,
                "cache_control": {"type": "ephemeral"}, "caller": {"type": "direct"}}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "extra": 1}),
            // Fields taken and ignored are checked as documented.
            json!({"id": "c", "index": null, "function": {"name": "echo"}}),
            json!({"id": "c", "index": 2147483647, "function": {"name": "echo"}}),
            json!({"id": "c", "index": 2147483648u64, "function": {"name": "echo"}}),
            json!({"id": "c", "index": -1, "function": {"name": "echo"}}),
            json!({"id": "c", "index": 1.5, "function": {"name": "echo"}}),
            json!({"id": "c", "index": "0", "function": {"name": "echo"}}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "cache_control": null}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "cache_control": "ephemeral"}),
            json!({"type": "tool_use", "id": "c", "name": "echo", "caller": ["direct"]}),
        ];
        // `1.0` is an integer to JSON Schema 2020-12 and to the server;
        // this validator takes it for `integer` but not for
        // `["integer", "null"]`, so it is checked apart.
        assert!(
            crate::protocol::calls::parse(
                &json!({"id": "c", "index": 1.0, "function": {"name": "echo"}})
            )
            .is_ok()
        );
        for body in samples {
            let parsed = crate::protocol::calls::parse(&body);
            assert_eq!(any.is_valid(&body), parsed.is_ok(), "{body}: {parsed:?}");
            if parsed.is_ok() {
                let matching: Vec<&str> = shapes
                    .iter()
                    .filter(|(_, v)| v.is_valid(&body))
                    .map(|(name, _)| *name)
                    .collect();
                assert_eq!(matching.len(), 1, "{body} matches {matching:?}");
            }
        }
    }

    /// What the server takes and refuses in a message's calls, a run's
    /// input and a batch, the document says too: a message's calls name a
    /// tool a tool can have; a run's ids are ids and the fields it ignores
    /// take any JSON; a batch takes any item (answering a bad one in its
    /// results).
    #[test]
    fn messages_runs_and_batches_are_described_as_the_server_takes_them() {
        let doc = document();
        let message = component_in_document(&doc, "NewMessageRequest");
        let with = |call: Value| json!({"role": "assistant", "tool_calls": [call]});
        for (call, valid) in [
            (json!({"id": "c", "name": "ui.pick"}), true),
            (json!({"id": "c", "name": "my tool"}), false),
            (
                json!({"id": "c", "type": "tool_use", "name": "my tool"}),
                false,
            ),
            (
                json!({"id": "c", "function": {"name": "ui-pick", "arguments": "{}"}}),
                true,
            ),
            (
                json!({"id": "c", "function": {"name": "my tool", "arguments": "{}"}}),
                false,
            ),
            (json!({"id": "c", "name": &"n".repeat(65)}), false),
        ] {
            assert_eq!(message.is_valid(&with(call.clone())), valid, "{call}");
        }
        let run = component_in_document(&doc, "RunAgentInput");
        let input = |extra: Value| {
            let mut v = json!({"threadId": "t", "runId": "r", "messages": [
                {"id": "u1", "role": "user", "content": "hi"}]});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        for (extra, valid) in [
            (
                json!({"state": "AAA", "forwardedProps": [1], "context": [1, null],
                    "tools": [{"name": "fe", "parameters": "AAA"}]}),
                true,
            ),
            (
                json!({"resume": [{"interruptId": "i", "status": "resolved", "payload": "text"}]}),
                true,
            ),
            (
                json!({"resume": [{"interruptId": "i", "status": "resolved", "payload": null}]}),
                true,
            ),
            (
                json!({"resume": [{"interruptId": "i", "status": "resolved"}]}),
                true,
            ),
            (
                json!({"messages": [{"id": "u 1", "role": "user", "content": "hi"}]}),
                false,
            ),
            (
                json!({"messages": [{"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c 1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]}]}),
                false,
            ),
            (
                json!({"messages": [{"id": "t1", "role": "tool", "toolCallId": "c 1", "content": "x"}]}),
                false,
            ),
        ] {
            assert_eq!(run.is_valid(&input(extra.clone())), valid, "{extra}");
        }
        let batch = component_in_document(&doc, "BatchRequest");
        assert!(batch.is_valid(&json!({"calls": [{"id": "c1", "type": "tool_use"}, "echo", 5]})));
        assert!(!batch.is_valid(&json!({"calls": []})));
    }

    /// Only an assistant message may carry `tool_calls`, in the document as
    /// in `post_message`.
    #[test]
    fn only_assistant_messages_are_described_with_tool_calls() {
        let doc = document();
        let message = component_in_document(&doc, "NewMessageRequest");
        let call = json!({"id": "c", "name": "echo", "arguments": {}});
        let roles = [
            ("assistant", true),
            ("user", false),
            ("system", false),
            ("developer", false),
        ];
        for (role, allowed) in roles {
            let with_calls = json!({"role": role, "content": "x", "tool_calls": [call]});
            assert_eq!(message.is_valid(&with_calls), allowed, "{with_calls}");
            let empty_list = json!({"role": role, "content": "x", "tool_calls": []});
            assert_eq!(message.is_valid(&empty_list), allowed, "{empty_list}");
            for without in [
                json!({"role": role, "content": "x"}),
                json!({"role": role, "content": "x", "tool_calls": null}),
            ] {
                assert!(message.is_valid(&without), "{without}");
            }
        }
    }
}
