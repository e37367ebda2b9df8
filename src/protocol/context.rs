//! Stored conversation → a vendor's model-context shape.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::{Value, json};

use crate::store::{Role, StoredMessage};

fn stored_calls(m: &StoredMessage) -> Vec<&Value> {
    m.metadata
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn is_failure(m: &StoredMessage) -> bool {
    m.metadata
        .pointer("/tool_agent_output/status")
        .and_then(Value::as_str)
        == Some("failure")
}

/// The thread's messages with an assistant turn put before each run of tool
/// results whose calls no assistant message in the thread declares: calls a
/// chat backend posted without recording the model's message that made them
/// (or that an AG-UI client never sent). Both vendors refuse a tool result
/// that no earlier assistant turn asked for; the turn is rebuilt from what
/// each result's output records (`tool_name`, `tool_call_args`).
fn with_declared_calls(messages: &[StoredMessage]) -> Vec<Cow<'_, StoredMessage>> {
    let declared: HashSet<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(stored_calls)
        .filter_map(|c| c["id"].as_str())
        .collect();
    let undeclared = |m: &StoredMessage| {
        m.role == Role::Tool
            && m.tool_call_id
                .as_deref()
                .is_some_and(|id| !declared.contains(id))
    };
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let run = messages[i..].iter().take_while(|m| undeclared(m)).count();
        if run == 0 {
            out.push(Cow::Borrowed(&messages[i]));
            i += 1;
            continue;
        }
        let results = &messages[i..i + run];
        let calls: Vec<Value> = results
            .iter()
            .map(|m| {
                let output = m.metadata.get("tool_agent_output");
                let field = |name: &str| output.and_then(|o| o.get(name)).cloned();
                json!({
                    "id": m.tool_call_id,
                    "name": field("tool_name").unwrap_or(Value::Null),
                    "arguments": field("tool_call_args").unwrap_or_else(|| json!({})),
                })
            })
            .collect();
        let first = &results[0];
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
        out.extend(results.iter().map(Cow::Borrowed));
        i += run;
    }
    out
}

/// OpenAI Chat Completions messages.
pub fn openai(messages: &[StoredMessage]) -> Value {
    let out: Vec<Value> = with_declared_calls(messages)
        .iter()
        .map(|m| match m.role {
            Role::Assistant => {
                let calls: Vec<Value> = stored_calls(m)
                    .into_iter()
                    .map(|c| {
                        json!({"id": c["id"], "type": "function",
                               "function": {"name": c["name"], "arguments": c["arguments"].to_string()}})
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
            Role::Tool => json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}),
            role => json!({"role": role.as_str(), "content": m.content}),
        })
        .collect();
    json!({ "messages": out })
}

/// Anthropic Messages API: system text apart, content blocks, tool results
/// as `user` turns, consecutive same-role turns merged (the API requires
/// alternation).
pub fn anthropic(messages: &[StoredMessage]) -> Value {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let messages = with_declared_calls(messages);
    for m in messages.iter() {
        let (role, blocks): (&'static str, Vec<Value>) = match m.role {
            Role::System => {
                system.push(&m.content);
                continue;
            }
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in stored_calls(m) {
                    blocks.push(json!({"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}));
                }
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": m.tool_call_id,
                            "content": m.content, "is_error": is_failure(m)})],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
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

        let v = openai(&thread);
        let m = v["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
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

        let v = anthropic(&thread);
        let m = v["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
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

    #[test]
    fn openai_shape() {
        let v = openai(&conversation());
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
        let v = anthropic(&conversation());
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
}
