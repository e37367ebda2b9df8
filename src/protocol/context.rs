//! Stored conversation → a vendor's model-context shape.

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

/// OpenAI Chat Completions messages.
pub fn openai(messages: &[StoredMessage]) -> Value {
    let out: Vec<Value> = messages
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
    for m in messages {
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
