//! Stored conversation → a vendor's model-context shape.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::parts;
use crate::store::{Role, StoredMessage};

fn stored_calls(m: &StoredMessage) -> Vec<&Value> {
    m.metadata
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The name assistant message `m` calls its call `id` by, as it was
/// recorded (an alias stays an alias).
pub fn declared_name<'m>(m: &'m StoredMessage, id: &str) -> Option<&'m str> {
    stored_calls(m)
        .into_iter()
        .find(|call| call["id"].as_str() == Some(id))
        .and_then(|call| call["name"].as_str())
}

/// The metadata key of a tool message holding why the application's own
/// tool failed (AG-UI `ToolMessage.error`).
pub const ERROR: &str = "error";

/// Why an application's tool failed, when its result says so.
pub fn frontend_error(m: &StoredMessage) -> Option<&str> {
    m.metadata
        .get(ERROR)
        .and_then(Value::as_str)
        .filter(|e| !e.trim().is_empty())
}

fn is_failure(m: &StoredMessage) -> bool {
    frontend_error(m).is_some()
        || m.metadata
            .pointer("/tool_agent_output/status")
            .and_then(Value::as_str)
            == Some("failure")
}

/// A result's text as the model reads it: the stored content, a note for
/// each media part the application's result came with, and after them the
/// error of an application's tool that failed (OpenAI has no error flag on
/// a tool message, and the content may be a partial result).
fn result_text(m: &StoredMessage) -> Cow<'_, str> {
    let notes = parts::stored(&m.metadata)
        .map(|content_parts| parts::notes(content_parts))
        .unwrap_or_default();
    let error = frontend_error(m);
    if notes.is_empty() && error.is_none() {
        return Cow::Borrowed(&m.content);
    }
    let mut pieces: Vec<String> = Vec::new();
    if !m.content.trim().is_empty() {
        pieces.push(m.content.clone());
    }
    pieces.extend(notes);
    if let Some(error) = error {
        pieces.push(format!("Error: {error}"));
    }
    Cow::Owned(pieces.join("\n\n"))
}

/// A result as an Anthropic `tool_result`'s content: its text, or, for an
/// application's result sent with media, its parts as blocks (images as
/// images, other media as notes) followed by its error.
fn anthropic_result(m: &StoredMessage) -> Value {
    let Some(content_parts) = parts::stored(&m.metadata) else {
        return json!(result_text(m));
    };
    let mut blocks = parts::anthropic_result_blocks(content_parts);
    if let Some(error) = frontend_error(m) {
        blocks.push(json!({"type": "text", "text": format!("Error: {error}")}));
    }
    Value::Array(blocks)
}

/// What a declared call without a recorded result is told, by call id (the
/// HTTP layer knows whether it waits for approval or still runs); a call
/// missing here gets [`NO_RESULT`].
pub type Unanswered = HashMap<String, String>;

/// The text of a declared call that has no result and no entry in
/// [`Unanswered`]: toolgate holds no record of it.
/// The tool name of a rebuilt call whose result records none (a frontend
/// tool's result sent to a run without the assistant message that called
/// it): both vendors refuse a call without a name.
pub const UNRECORDED_TOOL: &str = "unrecorded_tool";

pub const NO_RESULT: &str = "toolgate has no result for this call and has not run it: it was not posted to toolgate, or it waits behind an earlier call of its turn";

/// The key that marks a declared call as the application's own (a tool the
/// AG-UI run's input listed in `tools`): toolgate does not run it.
pub const FRONTEND: &str = "frontend";

/// A call an assistant message of the thread declares.
pub struct Declared<'a> {
    pub id: &'a str,
    /// The assistant message declaring it.
    pub message: &'a StoredMessage,
    /// `{"id", "name", "arguments"}`, and `"frontend": true` for the
    /// application's own calls.
    pub call: &'a Value,
}

/// Every call the thread's assistant messages declare, in order (an id
/// declared twice, twice).
pub fn declared_calls(messages: &[StoredMessage]) -> impl Iterator<Item = Declared<'_>> {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| {
            stored_calls(m).into_iter().filter_map(move |call| {
                Some(Declared {
                    id: call["id"].as_str()?,
                    message: m,
                    call,
                })
            })
        })
}

/// Calls no assistant message declares, posted under an assistant
/// message of the thread (`parents`: call id → `parent_message_id`), as
/// that message's: each is added to its `tool_calls` as its result
/// records it was run, so the context holds the call in the turn its
/// record names, as a snapshot does, with its result right after that
/// turn. A parent no message has, or one of another role, leaves the call
/// as it was (an assistant turn rebuilt for it).
pub fn adopt_parented_calls(messages: &mut [StoredMessage], parents: &[(String, String)]) {
    if parents.is_empty() {
        return;
    }
    let declared: HashSet<String> = declared_calls(messages).map(|d| d.id.to_string()).collect();
    let results: HashMap<&str, &StoredMessage> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| Some((m.tool_call_id.as_deref()?, m)))
        .collect();
    let assistants: HashMap<&str, usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, m)| (m.id.as_str(), i))
        .collect();
    let mut adopted: Vec<(usize, Value)> = Vec::new();
    for (call, parent) in parents {
        let (Some(&at), Some(result)) =
            (assistants.get(parent.as_str()), results.get(call.as_str()))
        else {
            continue;
        };
        if declared.contains(call) {
            continue;
        }
        let Some(output) = result.metadata.get("tool_agent_output") else {
            continue;
        };
        let field = |name: &str| output.get(name).cloned();
        adopted.push((
            at,
            json!({
                "id": call,
                "name": field("tool_name").unwrap_or_else(|| json!(UNRECORDED_TOOL)),
                "arguments": field("tool_call_args").unwrap_or_else(|| json!({})),
            }),
        ));
    }
    for (at, call) in adopted {
        let metadata = &mut messages[at].metadata;
        if !metadata.is_object() {
            *metadata = json!({});
        }
        match metadata.get_mut("tool_calls") {
            Some(Value::Array(calls)) => calls.push(call),
            _ => metadata["tool_calls"] = json!([call]),
        }
    }
}

/// Results of calls declared under an alias of the tool that ran them
/// (`canonical`: a name's tool's own name) name the call as it was
/// declared, so the context shows the call as the model made it (as the
/// assistant message in the history has it), rather than renamed to the
/// tool's own name. (The stream announces a call by the name it was
/// posted under, which a backend may have changed.)
pub fn keep_called_names(messages: &mut [StoredMessage], canonical: impl Fn(&str) -> String) {
    let aliased: HashMap<String, (String, String)> = declared_calls(messages)
        .filter_map(|d| {
            let called = d.call["name"].as_str()?;
            let own = canonical(called);
            (own != called).then(|| (d.id.to_string(), (called.to_string(), own)))
        })
        .collect();
    if aliased.is_empty() {
        return;
    }
    for m in messages.iter_mut().filter(|m| m.role == Role::Tool) {
        let Some((called, own)) = m.tool_call_id.as_deref().and_then(|id| aliased.get(id)) else {
            continue;
        };
        if let Some(name) = m.metadata.pointer_mut("/tool_agent_output/tool_name")
            && name.as_str() == Some(own.as_str())
        {
            *name = json!(called);
        }
    }
}

/// The calls that assistant messages of the thread declare and no tool
/// message answers, each at its first declaration, in the order they were
/// declared.
pub fn unanswered_calls(messages: &[StoredMessage]) -> Vec<Declared<'_>> {
    let answered: HashSet<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let mut seen = HashSet::new();
    declared_calls(messages)
        .filter(|d| !answered.contains(d.id) && seen.insert(d.id))
        .collect()
}

/// A declared call as its result records it was run: a chat backend may
/// have posted the call with other arguments (or under an alias) than the
/// assistant message it recorded declares, and the model must see the call
/// its result answers. A result that records neither (a frontend tool's)
/// leaves the declaration as it is.
fn as_run<'a>(declared: &'a Value, result: &StoredMessage) -> Cow<'a, Value> {
    let output = result.metadata.get("tool_agent_output");
    let field = |name: &str| output.and_then(|o| o.get(name));
    let (Some(name), Some(arguments)) = (field("tool_name"), field("tool_call_args")) else {
        return Cow::Borrowed(declared);
    };
    if declared.get("name") == Some(name)
        && super::json::same_json_at(declared.get("arguments"), Some(arguments))
    {
        return Cow::Borrowed(declared);
    }
    let mut call = declared.clone();
    call["name"] = name.clone();
    call["arguments"] = arguments.clone();
    Cow::Owned(call)
}

/// A result standing in for a call that has none, saying why.
fn stand_in(after: &StoredMessage, id: &str, why: &str) -> StoredMessage {
    StoredMessage {
        thread_id: after.thread_id.clone(),
        seq: after.seq,
        id: format!("{}.{id}.no_result", after.id),
        role: Role::Tool,
        content: json!({"status": "no_result", "message": why}).to_string(),
        metadata: json!({}),
        tool_call_id: Some(id.to_string()),
        created_at_ms: after.created_at_ms,
    }
}

/// The thread's messages arranged the way both vendors require: every
/// assistant turn that calls tools is followed at once by one result per
/// call, and every result follows a turn that asked for it.
///
/// - A declared call's result is moved right after the first assistant
///   message declaring it (a chat backend may have recorded that message
///   after posting the call, or a user message may have come in between);
///   a call declared again later is left out of the later message. The
///   call shows as its result records it was run ([`as_run`]).
/// - A declared call with no result (waiting for approval, still running,
///   never posted) gets a stand-in result saying so (`unanswered`).
/// - A run of results whose calls no assistant message declares (posted
///   straight to `/tool-calls`, or sent by an AG-UI client without the
///   assistant message) gets an assistant turn rebuilt from what each
///   result's output records (`tool_name`, `tool_call_args`).
fn arranged<'a>(
    messages: &'a [StoredMessage],
    unanswered: &Unanswered,
) -> Vec<Cow<'a, StoredMessage>> {
    let mut results: HashMap<&str, &StoredMessage> = HashMap::new();
    // toolgate's own result of a call wins over one the application sent
    // for it (a call it also answered, then posted to toolgate).
    let own = |m: &StoredMessage| m.metadata.get("tool_agent_output").is_some();
    for m in messages.iter().filter(|m| m.role == Role::Tool) {
        if let Some(id) = m.tool_call_id.as_deref() {
            let kept = results.entry(id).or_insert(m);
            if !own(kept) && own(m) {
                *kept = m;
            }
        }
    }
    let declared: HashSet<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(stored_calls)
        .filter_map(|c| c["id"].as_str())
        .collect();
    // For a result: whether an assistant message declares its call.
    let declared_result = |m: &StoredMessage| {
        (m.role == Role::Tool)
            .then_some(m.tool_call_id.as_deref())
            .flatten()
            .map(|id| declared.contains(id))
    };
    let placed_elsewhere = |m: &StoredMessage| declared_result(m) == Some(true);
    let undeclared = |m: &StoredMessage| declared_result(m) == Some(false);
    let mut emitted: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if placed_elsewhere(m) {
            i += 1;
            continue;
        }
        if m.role == Role::Assistant {
            let calls = stored_calls(m);
            let fresh: Vec<&Value> = calls
                .iter()
                .copied()
                .filter(|c| c["id"].as_str().is_none_or(|id| !emitted.contains(id)))
                .collect();
            let shown: Vec<Cow<Value>> = fresh
                .iter()
                .map(|c| match c["id"].as_str().and_then(|id| results.get(id)) {
                    Some(result) => as_run(c, result),
                    None => Cow::Borrowed(*c),
                })
                .collect();
            let unchanged =
                shown.len() == calls.len() && shown.iter().all(|c| matches!(c, Cow::Borrowed(_)));
            if unchanged {
                out.push(Cow::Borrowed(m));
            } else {
                let mut kept = m.clone();
                kept.metadata["tool_calls"] = json!(shown);
                out.push(Cow::Owned(kept));
            }
            for id in fresh.iter().filter_map(|c| c["id"].as_str()) {
                emitted.insert(id);
                match results.get(id) {
                    Some(result) => out.push(Cow::Borrowed(*result)),
                    None => {
                        let why = unanswered.get(id).map_or(NO_RESULT, String::as_str);
                        out.push(Cow::Owned(stand_in(m, id, why)));
                    }
                }
            }
            i += 1;
            continue;
        }
        let run = messages[i..].iter().take_while(|m| undeclared(m)).count();
        if run == 0 {
            out.push(Cow::Borrowed(m));
            i += 1;
            continue;
        }
        // A call has one result: a second one for an id (a thread written
        // before toolgate refused those) is left out, as both vendors
        // refuse an id declared twice.
        let results: Vec<&StoredMessage> = messages[i..i + run]
            .iter()
            .filter(|m| {
                m.tool_call_id
                    .as_deref()
                    .is_some_and(|id| emitted.insert(id))
            })
            .collect();
        i += run;
        let Some(first) = results.first().copied() else {
            continue;
        };
        let calls: Vec<Value> = results
            .iter()
            .map(|m| {
                let output = m.metadata.get("tool_agent_output");
                let field = |name: &str| output.and_then(|o| o.get(name)).cloned();
                json!({
                    "id": m.tool_call_id,
                    // A frontend's result sent without the turn that
                    // asked for it records no tool name.
                    "name": field("tool_name").unwrap_or_else(|| json!(UNRECORDED_TOOL)),
                    "arguments": field("tool_call_args").unwrap_or_else(|| json!({})),
                })
            })
            .collect();
        out.push(Cow::Owned(StoredMessage {
            thread_id: first.thread_id.clone(),
            seq: first.seq,
            id: format!("{}.calls", first.id),
            role: Role::Assistant,
            content: String::new(),
            metadata: json!({ "tool_calls": calls }),
            tool_call_id: None,
            created_at_ms: first.created_at_ms,
        }));
        out.extend(results.into_iter().map(Cow::Borrowed));
    }
    out
}

/// OpenAI Chat Completions messages, call ids as the API accepts them
/// ([`wire_ids`]).
pub fn openai(messages: &[StoredMessage], unanswered: &Unanswered) -> Value {
    let messages = arranged(messages, unanswered);
    let renamed = wire_ids(&messages, openai_id_ok, OPENAI_ID_STEM);
    let wire_id = |id: Option<&str>| -> Value {
        id.map(|id| json!(renamed.get(id).map_or(id, String::as_str)))
            .unwrap_or(Value::Null)
    };
    let out: Vec<Value> = messages
        .iter()
        .map(|m| match m.role {
            Role::Assistant => {
                let calls: Vec<Value> = stored_calls(m)
                    .into_iter()
                    .map(|c| {
                        json!({"id": wire_id(c["id"].as_str()), "type": "function",
                               "function": {"name": wire_name(&c["name"]), "arguments": c["arguments"].to_string()}})
                    })
                    .collect();
                let mut v = json!({"role": "assistant", "content": m.content});
                if !calls.is_empty() {
                    v["tool_calls"] = Value::Array(calls);
                    if m.content.is_empty() {
                        v["content"] = Value::Null;
                    }
                }
                v
            }
            Role::Tool => {
                json!({"role": "tool", "tool_call_id": wire_id(m.tool_call_id.as_deref()), "content": result_text(m)})
            }
            Role::User => match parts::stored(&m.metadata) {
                Some(content_parts) => {
                    json!({"role": "user", "content": parts::openai_user(content_parts)})
                }
                None => json!({"role": "user", "content": m.content}),
            },
            role => json!({"role": role.as_str(), "content": m.content}),
        })
        .collect();
    json!({ "messages": out })
}

/// A call's tool name as a vendor's API takes it: both take
/// `[A-Za-z0-9_-]{1,64}` and refuse the whole conversation for one other
/// name. A run records the name its client sent, whatever it is, and a
/// model may call a name no tool has (OpenAI's `multi_tool_use.parallel`):
/// either fails with `TOOL_NOT_FOUND`, which the model reads and corrects.
/// In a context such a name gets `_` for each other character (`.`
/// included, which toolgate admits in a tool's name but neither vendor
/// does) and is cut to 64 characters (`unnamed_tool` when empty).
fn wire_name(name: &Value) -> Value {
    let name = name.as_str().unwrap_or_default();
    let taken = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    if !name.is_empty() && name.len() <= 64 && name.chars().all(taken) {
        return json!(name);
    }
    let sanitized: String = name
        .chars()
        .take(64)
        .map(|c| if taken(c) { c } else { '_' })
        .collect();
    json!(if sanitized.is_empty() {
        "unnamed_tool"
    } else {
        sanitized.as_str()
    })
}

/// The user turn an Anthropic context opens with when the thread's first
/// turn is the assistant's.
pub const OPENING_TURN: &str = "(start of the conversation)";

/// Whether Anthropic accepts `id` as a `tool_use` id (`^[a-zA-Z0-9_-]+$`).
fn anthropic_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// Whether OpenAI accepts `id` as a tool call id: at most 40 characters
/// (toolgate admits 128, and an undo's id is the call's with `undo_`
/// before it).
fn openai_id_ok(id: &str) -> bool {
    id.len() <= 40
}

/// How much of a call id an OpenAI wire id keeps: with `_` and 8 hex
/// digits after it, 40 characters.
const OPENAI_ID_STEM: usize = 31;

/// The wire id of a call id the vendor does not take as it is: at most
/// `stem` characters of it, each outside `A-Z a-z 0-9 _ -` as `_`, then
/// `_` and 8 hex digits of a hash of the id (and of `salt`, counted up
/// should the result be taken). It depends on the id alone, not on where
/// in the thread the call is.
fn hashed_id(id: &str, salt: u32, stem: usize) -> String {
    // FNV-1a, 64 bits, folded to 32: stable across builds and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain(salt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let stem: String = id
        .chars()
        .take(stem)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{stem}_{:08x}", (hash ^ (hash >> 32)) as u32)
}

/// The call ids of `messages` that a vendor cannot take as they are
/// (`accepts`), each with the id it gets instead ([`hashed_id`]); its
/// result names the same id. A call's wire id depends on its id alone, so
/// it keeps it as the thread grows, unless a call of the thread already
/// has that id on the wire (only an id written to look like a wire id
/// can), in which case the later call in the thread's order gets another.
fn wire_ids(
    messages: &[Cow<'_, StoredMessage>],
    accepts: fn(&str) -> bool,
    stem: usize,
) -> HashMap<String, String> {
    // Wire id → the call id it stands for.
    let mut taken: HashMap<String, &str> = HashMap::new();
    let mut renamed = HashMap::new();
    for m in messages {
        let ids: Vec<&str> = match m.role {
            Role::Assistant => stored_calls(m)
                .into_iter()
                .filter_map(|c| c["id"].as_str())
                .collect(),
            Role::Tool => m.tool_call_id.as_deref().into_iter().collect(),
            _ => continue,
        };
        for id in ids {
            if renamed.contains_key(id) || taken.get(id) == Some(&id) {
                continue;
            }
            let mut salt = 0;
            let mut wire = if accepts(id) {
                id.to_string()
            } else {
                hashed_id(id, salt, stem)
            };
            while taken.contains_key(&wire) {
                salt += 1;
                wire = hashed_id(id, salt, stem);
            }
            taken.insert(wire.clone(), id);
            if wire != id {
                renamed.insert(id.to_string(), wire);
            }
        }
    }
    renamed
}

/// An extended-thinking block (`thinking` or `redacted_thinking`).
fn is_thinking(block: &Value) -> bool {
    matches!(
        block["type"].as_str(),
        Some("thinking" | "redacted_thinking")
    )
}

/// Anthropic Messages API: system text apart, content blocks, tool results
/// as `user` turns, consecutive same-role turns merged (the API requires
/// alternation), call ids as the API accepts them ([`wire_ids`]).
pub fn anthropic(messages: &[StoredMessage], unanswered: &Unanswered) -> Value {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let messages = arranged(messages, unanswered);
    let renamed = wire_ids(&messages, anthropic_id_ok, usize::MAX);
    let wire_id = |id: Option<&str>| -> Value {
        id.map(|id| json!(renamed.get(id).map_or(id, String::as_str)))
            .unwrap_or(Value::Null)
    };
    for m in messages.iter() {
        let (role, mut blocks): (&'static str, Vec<Value>) = match m.role {
            // A blank one adds nothing to the system text.
            Role::System | Role::Developer => {
                if !m.content.trim().is_empty() {
                    system.push(&m.content);
                }
                continue;
            }
            // The API refuses a text block without a non-whitespace
            // character: such a message adds nothing to the turn.
            Role::User => match parts::stored(&m.metadata) {
                Some(content_parts) => ("user", parts::anthropic_blocks(content_parts)),
                None if m.content.trim().is_empty() => continue,
                None => ("user", vec![json!({"type": "text", "text": m.content})]),
            },
            Role::Assistant => {
                // Thinking first, as the API returned the turn.
                let mut blocks: Vec<Value> = match m.metadata.get("thinking") {
                    Some(Value::Array(thinking)) => thinking.clone(),
                    _ => Vec::new(),
                };
                if !m.content.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in stored_calls(m) {
                    // Anthropic's `input` is an object; arguments recorded
                    // as anything else travel under `_raw`, as a run records
                    // arguments that are not a JSON object.
                    let input = match &c["arguments"] {
                        object @ Value::Object(_) => object.clone(),
                        other => json!({"_raw": other}),
                    };
                    blocks.push(json!({"type": "tool_use", "id": wire_id(c["id"].as_str()), "name": wire_name(&c["name"]), "input": input}));
                }
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": wire_id(m.tool_call_id.as_deref()),
                            "content": anthropic_result(m), "is_error": is_failure(m)}),
                ],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => {
                // A turn merged from several messages opens with all of
                // their thinking.
                let at = existing.iter().take_while(|b| is_thinking(b)).count();
                let thinking = blocks.iter().take_while(|b| is_thinking(b)).count();
                let rest = blocks.split_off(thinking);
                existing.splice(at..at, blocks);
                existing.extend(rest);
            }
            _ => turns.push((role, blocks)),
        }
    }
    // Bedrock (and the API before late 2024) refuses a first turn that is
    // not the user's: a thread whose calls came before any user message
    // opens with a short user turn saying so.
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(
            0,
            ("user", vec![json!({"type": "text", "text": OPENING_TURN})]),
        );
    }
    // The API refuses a last assistant turn whose text ends in whitespace
    // (it would continue it as a prefill).
    if let Some(("assistant", blocks)) = turns.last_mut()
        && let Some(text) = blocks
            .last_mut()
            .filter(|b| b["type"] == "text")
            .and_then(|b| b.get_mut("text"))
        && let Some(trimmed) = text.as_str().map(str::trim_end)
    {
        *text = json!(trimmed);
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut v = json!({ "messages": messages });
    if !system.is_empty() {
        v["system"] = json!(system.join("\n\n"));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The roles of a vendor context's messages, in order.
    fn roles_of(messages: &[Value]) -> Vec<&str> {
        messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect()
    }

    fn msg(
        seq: i64,
        role: Role,
        content: &str,
        metadata: Value,
        tool_call_id: Option<&str>,
    ) -> StoredMessage {
        StoredMessage {
            thread_id: "t".into(),
            seq,
            id: format!("m{seq}"),
            role,
            content: content.into(),
            metadata,
            tool_call_id: tool_call_id.map(Into::into),
            created_at_ms: 0,
        }
    }

    fn conversation() -> Vec<StoredMessage> {
        vec![
            msg(1, Role::System, "be brief", json!({}), None),
            msg(2, Role::User, "echo hi", json!({}), None),
            msg(
                3,
                Role::Assistant,
                "",
                json!({"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}),
                None,
            ),
            msg(
                4,
                Role::Tool,
                "{\"text\":\"hi\"}",
                json!({"tool_agent_output": {"status": "success"}}),
                Some("c1"),
            ),
            msg(5, Role::User, "thanks", json!({}), None),
        ]
    }

    /// A tool message as the engine stores it: its output names the call.
    fn result(seq: i64, call: &str, text: &str) -> StoredMessage {
        msg(
            seq,
            Role::Tool,
            &format!("{{\"text\":\"{text}\"}}"),
            json!({"tool_agent_output": {"status": "success", "tool_name": "echo",
                                         "tool_call_id": call, "tool_call_args": {"text": text}}}),
            Some(call),
        )
    }

    /// Thinking opens the assistant turn it belongs to, also when that turn
    /// is merged from two messages.
    #[test]
    fn thinking_opens_its_turn() {
        let think =
            |n: u8| json!({"type": "thinking", "thinking": format!("t{n}"), "signature": "s"});
        let thread = vec![
            msg(1, Role::User, "go", json!({}), None),
            msg(
                2,
                Role::Assistant,
                "first",
                json!({"thinking": [think(1)]}),
                None,
            ),
            msg(
                3,
                Role::Assistant,
                "second",
                json!({"thinking": [think(2)], "tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}]}),
                None,
            ),
            result(4, "c1", "x"),
        ];
        let v = anthropic(&thread, &Unanswered::new());
        let kinds: Vec<String> = v["messages"][1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                format!(
                    "{}{}",
                    b["type"].as_str().unwrap(),
                    b["thinking"].as_str().or(b["text"].as_str()).unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "thinkingt1",
                "thinkingt2",
                "textfirst",
                "textsecond",
                "tool_use"
            ],
            "{v}"
        );
        let v = openai(&thread, &Unanswered::new());
        assert!(!v.to_string().contains("thinking"), "{v}");
    }

    #[test]
    fn results_no_assistant_turn_asked_for_get_one() {
        // Two calls posted straight to /tool-calls, then a declared one.
        let mut thread = vec![
            msg(1, Role::User, "echo a and b", json!({}), None),
            result(2, "ca", "a"),
            result(3, "cb", "b"),
        ];
        thread.extend(conversation().into_iter().skip(2).map(|mut m| {
            m.seq += 10;
            m
        }));

        let v = openai(&thread, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        let roles = roles_of(m);
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "tool",
                "assistant",
                "tool",
                "user"
            ],
            "{v}"
        );
        assert_eq!(
            m[1],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "ca", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"a\"}"}},
                {"id": "cb", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"b\"}"}}]})
        );
        // The declared call is left as it was: one assistant turn for it.
        assert_eq!(m[4]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[4]["tool_calls"].as_array().unwrap().len(), 1);

        let v = anthropic(&thread, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        let roles = roles_of(m);
        assert_eq!(
            roles,
            ["user", "assistant", "user", "assistant", "user"],
            "{v}"
        );
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(m[1]["content"][1]["id"], "cb");
        assert_eq!(m[1]["content"][1]["input"], json!({"text": "b"}));
        assert_eq!(m[2]["content"][0]["tool_use_id"], "ca");
        assert_eq!(m[2]["content"][1]["tool_use_id"], "cb");
    }

    fn assistant(seq: i64, calls: &[&str]) -> StoredMessage {
        let calls: Vec<Value> = calls
            .iter()
            .map(|id| json!({"id": id, "name": "echo", "arguments": {"text": id}}))
            .collect();
        msg(
            seq,
            Role::Assistant,
            "",
            json!({ "tool_calls": calls }),
            None,
        )
    }

    #[test]
    fn every_declared_call_is_answered_right_after_its_turn() {
        // c1 answered before its turn was recorded, c2 after a user message,
        // c3 waiting for approval, c4 never posted; c1 declared again later.
        let thread = vec![
            msg(1, Role::User, "go", json!({}), None),
            result(2, "c1", "c1"),
            assistant(3, &["c1", "c2", "c3", "c4"]),
            msg(4, Role::User, "meanwhile", json!({}), None),
            result(5, "c2", "c2"),
            assistant(6, &["c1", "c5"]),
            result(7, "c5", "c5"),
        ];
        let ids: Vec<&str> = unanswered_calls(&thread).iter().map(|d| d.id).collect();
        assert_eq!(ids, ["c3", "c4"]);
        let unanswered = Unanswered::from([("c3".to_string(), "awaiting approval".to_string())]);

        let v = openai(&thread, &unanswered);
        let m = v["messages"].as_array().unwrap();
        let shape: Vec<(&str, &str)> = m
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap(),
                    m["tool_call_id"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("user", ""),
                ("assistant", ""),
                ("tool", "c1"),
                ("tool", "c2"),
                ("tool", "c3"),
                ("tool", "c4"),
                ("user", ""),
                ("assistant", ""),
                ("tool", "c5"),
            ],
            "{v}"
        );
        let stand_in = |i: usize| -> Value {
            serde_json::from_str(m[i]["content"].as_str().unwrap()).unwrap()
        };
        assert_eq!(
            stand_in(4),
            json!({"status": "no_result", "message": "awaiting approval"})
        );
        assert_eq!(stand_in(5)["message"], NO_RESULT);
        // c1 is answered once, after the turn that first asked for it.
        let later: Vec<&str> = m[7]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(later, ["c5"]);

        let v = anthropic(&thread, &unanswered);
        let m = v["messages"].as_array().unwrap();
        let roles = roles_of(m);
        assert_eq!(
            roles,
            ["user", "assistant", "user", "assistant", "user"],
            "{v}"
        );
        let answers: Vec<&str> = m[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["tool_use_id"].as_str().unwrap_or("text"))
            .collect();
        assert_eq!(answers, ["c1", "c2", "c3", "c4", "text"]);
        assert_eq!(m[3]["content"].as_array().unwrap().len(), 1);
        assert_eq!(m[4]["content"][0]["tool_use_id"], "c5");
    }

    #[test]
    fn a_call_gets_one_result_in_the_context() {
        let thread = vec![
            msg(1, Role::User, "go", json!({}), None),
            result(2, "x1", "one"),
            result(3, "x1", "two"),
        ];
        let v = openai(&thread, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        assert_eq!(roles_of(m), ["user", "assistant", "tool"], "{v}");
        assert_eq!(m[1]["tool_calls"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(m[2]["content"], r#"{"text":"one"}"#, "{v}");
    }

    #[test]
    fn a_call_shows_as_it_was_run() {
        // The assistant message declares c1 with "a"; the call posted and
        // run under that id had "b": the model sees the call "b" answers.
        let mut declared = assistant(2, &["c1", "c2"]);
        declared.metadata["tool_calls"][0]["arguments"] = json!({"text": "a"});
        let thread = vec![
            msg(1, Role::User, "go", json!({}), None),
            declared,
            result(3, "c1", "b"),
            result(4, "c2", "c2"),
        ];
        let v = openai(&thread, &Unanswered::new());
        let calls = &v["messages"][1]["tool_calls"];
        assert_eq!(calls[0]["function"]["arguments"], r#"{"text":"b"}"#, "{v}");
        assert_eq!(calls[1]["function"]["arguments"], r#"{"text":"c2"}"#, "{v}");
        let v = anthropic(&thread, &Unanswered::new());
        assert_eq!(
            v["messages"][1]["content"][0]["input"],
            json!({"text": "b"}),
            "{v}"
        );
        // Declared under an alias ("say", of echo): shown as declared, where
        // the tool's name is said to be that alias's; another tool's result
        // still renames it.
        let mut aliased = thread.clone();
        aliased[1].metadata["tool_calls"][1]["name"] = json!("say");
        let canonical = |name: &str| match name {
            "say" => "echo".to_string(),
            other => other.to_string(),
        };
        let names = |thread: &[StoredMessage]| {
            let v = openai(thread, &Unanswered::new());
            let calls = v["messages"][1]["tool_calls"].as_array().unwrap().clone();
            let names: Vec<Value> = calls
                .iter()
                .map(|c| c["function"]["name"].clone())
                .collect();
            names
        };
        assert_eq!(names(&aliased), [json!("echo"), json!("echo")]);
        let mut kept = aliased.clone();
        keep_called_names(&mut kept, canonical);
        assert_eq!(names(&kept), [json!("echo"), json!("say")]);
        let mut other = aliased.clone();
        other[3].metadata["tool_agent_output"]["tool_name"] = json!("wait");
        keep_called_names(&mut other, canonical);
        assert_eq!(names(&other), [json!("echo"), json!("wait")]);
        // A frontend tool's result records no call: the declaration stays.
        let mut frontend = thread.clone();
        frontend[2].metadata = json!({});
        let v = openai(&frontend, &Unanswered::new());
        assert_eq!(
            v["messages"][1]["tool_calls"][0]["function"]["arguments"], r#"{"text":"a"}"#,
            "{v}"
        );
    }

    #[test]
    fn openai_shape() {
        let v = openai(&conversation(), &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"text\":\"hi\"}"
        );
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "{\"text\":\"hi\"}"})
        );
    }

    #[test]
    fn anthropic_shape_merges_tool_results_with_following_user_text() {
        let v = anthropic(&conversation(), &Unanswered::new());
        assert_eq!(v["system"], "be brief");
        let m = v["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3, "{v}");
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(m[1]["content"][0]["input"], json!({"text": "hi"}));
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][0]["is_error"], false);
        assert_eq!(m[2]["content"][1]["text"], "thanks");
    }

    /// A thread whose first turn is the assistant's (calls posted before
    /// any user message) opens with a user turn: Bedrock refuses anything
    /// else. One that starts with the user's is left as it is.
    #[test]
    fn an_anthropic_context_opens_with_a_user_turn() {
        let calls_first = vec![
            msg(1, Role::System, "be brief", json!({}), None),
            msg(
                2,
                Role::Assistant,
                "",
                json!({"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}),
                None,
            ),
        ];
        let v = anthropic(&calls_first, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        assert_eq!(roles_of(m)[..2], ["user", "assistant"], "{v}");
        assert_eq!(m[0]["content"][0]["text"], OPENING_TURN);
        let v = anthropic(&conversation(), &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        assert_ne!(m[0]["content"][0]["text"], OPENING_TURN, "{v}");
    }

    /// Anthropic refuses empty text blocks: an empty message (user or
    /// assistant without calls) leaves no block, and no turn of its own.
    #[test]
    fn empty_messages_leave_no_empty_text_block() {
        let mut messages = conversation();
        let next = messages.len() as i64 + 1;
        messages.push(msg(next, Role::User, "", json!({}), None));
        messages.push(msg(next + 1, Role::Assistant, " \n", json!({}), None));
        messages.push(msg(next + 2, Role::User, "\t ", json!({}), None));
        messages.push(msg(next + 3, Role::User, "again", json!({}), None));
        let v = anthropic(&messages, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        // The API refuses a text block of whitespace alone.
        for block in m.iter().flat_map(|t| t["content"].as_array().unwrap()) {
            let text = block["text"].as_str();
            assert!(!text.is_some_and(|t| t.trim().is_empty()), "{v}");
        }
        assert_eq!(
            m.last().unwrap()["content"].as_array().unwrap().len(),
            3,
            "{v}"
        );
        // A blank system message adds nothing to the system text, and a
        // last assistant turn does not end in whitespace.
        let next = messages.len() as i64 + 1;
        messages.push(msg(next, Role::System, "", json!({}), None));
        messages.push(msg(next + 1, Role::Developer, "  ", json!({}), None));
        messages.push(msg(
            next + 2,
            Role::Assistant,
            "answer  \n",
            json!({}),
            None,
        ));
        let v = anthropic(&messages, &Unanswered::new());
        assert_eq!(v["system"], "be brief", "{v}");
        let last = v["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            last,
            json!({"role": "assistant", "content": [{"type": "text", "text": "answer"}]})
        );
    }

    /// Anthropic refuses `.` and `:` in a `tool_use` id: such an id is
    /// given one it accepts, the same in the call and its result, that
    /// depends on the id alone and is not one another call of the thread has.
    #[test]
    fn anthropic_gets_call_ids_it_accepts() {
        let messages = vec![
            msg(1, Role::User, "go", json!({}), None),
            assistant(2, &["a.b", "a_b", "x:1"]),
            result(3, "a.b", "a.b"),
            result(4, "a_b", "a_b"),
            result(5, "x:1", "x:1"),
        ];
        let v = anthropic(&messages, &Unanswered::new());
        let m = v["messages"].as_array().unwrap();
        let uses: Vec<&str> = m[1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        let (ab, x1) = (
            hashed_id("a.b", 0, usize::MAX),
            hashed_id("x:1", 0, usize::MAX),
        );
        assert!(ab.starts_with("a_b_") && ab.len() == 12, "{ab}");
        assert_eq!(uses, [ab.as_str(), "a_b", x1.as_str()], "{v}");
        let answered: Vec<&str> = m[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["tool_use_id"].as_str().unwrap())
            .collect();
        assert_eq!(answered, uses, "{v}");
        assert!(uses.iter().all(|id| anthropic_id_ok(id)));
        // The same ids in a thread where the calls come in another order:
        // a call's wire id does not depend on the calls before it.
        let reordered = vec![
            msg(1, Role::User, "go", json!({}), None),
            assistant(2, &["x:1", "a.b"]),
            result(3, "x:1", "x:1"),
            result(4, "a.b", "a.b"),
        ];
        let r = anthropic(&reordered, &Unanswered::new());
        assert_eq!(r["messages"][1]["content"][0]["id"], x1.as_str(), "{r}");
        assert_eq!(r["messages"][1]["content"][1]["id"], ab.as_str(), "{r}");
        // A later call whose own id is one an earlier call has on the wire
        // gets another; the id a model saw does not change.
        let mut grown = messages.clone();
        grown.push(assistant(6, &[&x1]));
        grown.push(result(7, &x1, "x1"));
        let g = anthropic(&grown, &Unanswered::new());
        assert_eq!(g["messages"][1], v["messages"][1], "{g}");
        let again = g["messages"][3]["content"][0]["id"].as_str().unwrap();
        assert_eq!(again, hashed_id(&x1, 1, usize::MAX), "{g}");
        assert_eq!(g["messages"][4]["content"][0]["tool_use_id"], again, "{g}");
        // OpenAI takes `.` and `:`: unchanged there.
        let o = openai(&messages, &Unanswered::new());
        assert_eq!(o["messages"][1]["tool_calls"][0]["id"], "a.b", "{o}");
        assert_eq!(o["messages"][2]["tool_call_id"], "a.b", "{o}");
    }

    /// A name a run recorded as its client sent it, or one with `.` (a
    /// name a model made up, or a dotted tool's), is given in a form the
    /// vendors take.
    #[test]
    fn a_tool_name_a_vendor_does_not_take_is_given_as_vendors_take_it() {
        let call = |id: &str, name: &str| json!({"id": id, "name": name, "arguments": {}});
        let messages = vec![
            msg(1, Role::User, "go", json!({}), None),
            msg(
                2,
                Role::Assistant,
                "",
                json!({"tool_calls": [call("a", "bad name!"), call("b", ""), call("c", "ui.pick"),
                                      call("d", &"é".repeat(70)),
                                      call("e", "multi_tool_use.parallel"), call("f", "ok-name_2")]}),
                None,
            ),
        ];
        let o = openai(&messages, &Unanswered::new());
        let names: Vec<&Value> = o["messages"][1]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["function"]["name"])
            .collect();
        let long = "_".repeat(64);
        assert_eq!(
            names,
            [
                &json!("bad_name_"),
                &json!("unnamed_tool"),
                &json!("ui_pick"),
                &json!(long),
                &json!("multi_tool_use_parallel"),
                &json!("ok-name_2")
            ]
        );
        let a = anthropic(&messages, &Unanswered::new());
        assert_eq!(a["messages"][1]["content"][0]["name"], "bad_name_", "{a}");
        assert_eq!(a["messages"][1]["content"][2]["name"], "ui_pick", "{a}");
    }

    /// OpenAI refuses a tool call id over 40 characters: such an id (an
    /// undo's `undo_` and a UUID is 41) is given one of 40, the same in the
    /// call and its result; shorter ones are left as they are.
    #[test]
    fn openai_gets_call_ids_it_accepts() {
        let long = "undo_3f2b8c1e-5d4a-4e2b-9a7c-1b2c3d4e5f61";
        let forty = &long[1..];
        let messages = vec![
            msg(1, Role::User, "go", json!({}), None),
            assistant(2, &[long, forty]),
            result(3, long, "a"),
            result(4, forty, "b"),
        ];
        let o = openai(&messages, &Unanswered::new());
        let wire = o["messages"][1]["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(wire.len(), 40, "{o}");
        assert!(
            wire.starts_with("undo_3f2b8c1e-5d4a-4e2b-9a7c-1b_"),
            "{wire}"
        );
        assert_eq!(o["messages"][2]["tool_call_id"], wire, "{o}");
        assert_eq!(o["messages"][1]["tool_calls"][1]["id"], forty, "{o}");
        assert_eq!(o["messages"][3]["tool_call_id"], forty, "{o}");
        // Anthropic has no such limit.
        let a = anthropic(&messages, &Unanswered::new());
        assert_eq!(a["messages"][1]["content"][0]["id"], long, "{a}");
    }

    /// An application's tool that failed (AG-UI `error`): both vendors see
    /// the error after what it returned, and Anthropic flags the result.
    #[test]
    fn a_failed_frontend_result_shows_its_error() {
        let messages = vec![
            msg(1, Role::User, "go", json!({}), None),
            msg(
                2,
                Role::Assistant,
                "",
                json!({"tool_calls": [
                    {"id": "f1", "name": "confirm", "arguments": {}, "frontend": true},
                    {"id": "f2", "name": "confirm", "arguments": {}, "frontend": true}]}),
                None,
            ),
            msg(
                3,
                Role::Tool,
                "half done",
                json!({"error": "disk full"}),
                Some("f1"),
            ),
            msg(4, Role::Tool, "", json!({"error": "no answer"}), Some("f2")),
        ];
        let o = openai(&messages, &Unanswered::new());
        assert_eq!(
            o["messages"][2]["content"], "half done\n\nError: disk full",
            "{o}"
        );
        assert_eq!(o["messages"][3]["content"], "Error: no answer", "{o}");
        let a = anthropic(&messages, &Unanswered::new());
        let results = a["messages"][2]["content"].as_array().unwrap();
        assert_eq!(results[0]["is_error"], true, "{a}");
        assert_eq!(results[1]["content"], "Error: no answer", "{a}");
        // A result without an error is not flagged.
        let v = anthropic(&conversation(), &Unanswered::new());
        assert_eq!(v["messages"][2]["content"][0]["is_error"], false, "{v}");
    }
}
