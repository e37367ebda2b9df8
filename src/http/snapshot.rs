//! A thread's messages as a `MESSAGES_SNAPSHOT` gives them: arranged as a
//! stock AG-UI client arranges them from the live stream, so a frontend
//! shows the same after a reload as it did before.
//!
//! The client's rules, which the snapshot follows:
//! - a text message (`TEXT_MESSAGE_START`) is added at the end, unless a
//!   message with its id is already there: its text then joins that one;
//! - a call (`TOOL_CALL_START`) already held by a message is left there;
//!   otherwise it goes into the assistant message its `parentMessageId`
//!   names, or, with no parent, into a new assistant message named by the
//!   call's id; a parent that is not there yet becomes a new assistant
//!   message with the parent's id (the message posted later under that id
//!   joins it); a parent that is not an assistant message, a new one named
//!   by the call;
//! - a result (`TOOL_CALL_RESULT`) goes right after the assistant message
//!   that holds its call and the results already after it, or at the end
//!   if no message holds it.
//!
//! The stored thread says where each call was announced (the message it
//! came after, and the parent it named: [`CallPlacement`]), so the
//! snapshot replays those rules in the stream's order, for calls finished
//! or not (a call without a result is one still running or waiting for a
//! person). What it shows beyond what a client built live: an assistant
//! message lists every call it declares, also those nobody has posted yet
//! (the stream that opens with the snapshot leaves out their announcements
//! when they come, which would repeat their arguments), a run's frontend
//! calls with the results its input gave them, and a message's media
//! parts. What it leaves out: a
//! call whose id is a message's (the client would show two messages with
//! one id), and an unfinished call recorded before toolgate kept where
//! calls were announced; the stream announces such a running call again
//! after the snapshot.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::protocol::agui::{FunctionCall, Message, ToolCall};
use crate::store::{CallPlacement, JsonText, Role, StoredMessage, ToolCallRecord};

/// The thread's messages for a MESSAGES_SNAPSHOT; `placements` are where
/// its calls were announced, in the order they were, and `unfinished` its
/// calls with no result yet.
pub fn snapshot_messages(
    messages: Vec<StoredMessage>,
    placements: &[CallPlacement],
    unfinished: &[ToolCallRecord],
) -> Vec<Message> {
    let placed: HashMap<&str, &CallPlacement> =
        placements.iter().map(|p| (p.id.as_str(), p)).collect();
    // Each recorded call as its announcement named it: from its result,
    // or from its record while it has none.
    let ran: HashMap<String, ToolCall> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| {
            let id = m.tool_call_id.as_deref()?;
            let output = super::threads::stored_output(m)?;
            let arguments = output.tool_call_args.to_string();
            Some((id.to_owned(), tool_call(id, output.tool_name, arguments)))
        })
        .chain(unfinished.iter().map(|r| {
            let arguments = JsonText::of(&r.args).as_str().to_owned();
            (
                r.id.clone(),
                tool_call(&r.id, r.tool_name.clone(), arguments),
            )
        }))
        .collect();
    // The calls announced after each message (0: before the first), in
    // the order they were recorded.
    let mut announced_after: BTreeMap<i64, Vec<&CallPlacement>> = BTreeMap::new();
    for p in placements {
        if let Some(seq) = p.after_message_seq {
            announced_after.entry(seq).or_default().push(p);
        }
    }
    let mut built = Built {
        // Calls are recorded, and announced, in the order of `placements`.
        rank: placements
            .iter()
            .enumerate()
            .map(|(rank, p)| (p.id.clone(), rank))
            .collect(),
        ..Built::default()
    };
    let announce = |built: &mut Built, calls: Vec<&CallPlacement>| {
        for p in calls {
            if let Some(call) = ran.get(&p.id) {
                built.announce(call.clone(), p.parent_message_id.as_deref());
            }
        }
    };
    announce(&mut built, announced_after.remove(&0).unwrap_or_default());
    for m in messages {
        let seq = m.seq;
        // A call recorded before toolgate kept where it was announced: just
        // before its result.
        if m.role == Role::Tool
            && let Some(id) = m.tool_call_id.as_deref()
            && placed.get(id).is_none_or(|p| p.after_message_seq.is_none())
            && let Some(call) = ran.get(id)
        {
            let parent = placed.get(id).and_then(|p| p.parent_message_id.as_deref());
            built.announce(call.clone(), parent);
        }
        built.add(m);
        announce(&mut built, announced_after.remove(&seq).unwrap_or_default());
    }
    // Announced after a message the snapshot does not hold: at the end.
    for calls in announced_after.into_values() {
        announce(&mut built, calls);
    }
    built.into_messages()
}

/// The calls the snapshot's messages hold.
pub fn held_calls(messages: &[Message]) -> HashSet<&str> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant {
                tool_calls: Some(calls),
                ..
            } => Some(calls.iter().map(|c| c.id.as_str())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The message list as a client builds it: each message with the results
/// that follow it.
#[derive(Default)]
struct Built {
    groups: Vec<Group>,
    /// What each message id names (the first message with that id).
    by_id: HashMap<String, Named>,
    /// The group of the assistant message holding each call.
    holder: HashMap<String, usize>,
    /// The order calls were announced in.
    rank: HashMap<String, usize>,
}

struct Group {
    /// `None` only for results that came before any other message.
    head: Option<Message>,
    /// The results right after it.
    results: Vec<Message>,
}

#[derive(Clone, Copy)]
enum Named {
    /// The head of a group.
    Head(usize),
    /// A result.
    Result,
}

impl Built {
    fn push(&mut self, head: Message) -> usize {
        let index = self.groups.len();
        self.by_id
            .entry(head.id().to_owned())
            .or_insert(Named::Head(index));
        self.groups.push(Group {
            head: Some(head),
            results: Vec::new(),
        });
        index
    }

    /// A stored message, in the order the stream announced it.
    fn add(&mut self, m: StoredMessage) {
        if m.role == Role::Tool {
            let holder = m
                .tool_call_id
                .as_deref()
                .and_then(|id| self.holder.get(id).copied());
            self.by_id.entry(m.id.clone()).or_insert(Named::Result);
            let message = agui_message(m);
            match holder.or_else(|| self.groups.len().checked_sub(1)) {
                Some(group) => self.groups[group].results.push(message),
                None => self.groups.push(Group {
                    head: None,
                    results: vec![message],
                }),
            }
            return;
        }
        let calls = if m.role == Role::Assistant {
            declared(&m)
        } else {
            Vec::new()
        };
        let group = match self.by_id.get(&m.id) {
            // A message an earlier call named as its parent: its text joins
            // the message the client made then.
            Some(&Named::Head(group)) => {
                if let Some(Message::Assistant { content, .. }) = &mut self.groups[group].head
                    && !m.content.is_empty()
                {
                    content.get_or_insert_with(String::new).push_str(&m.content);
                }
                group
            }
            _ => {
                let mut message = agui_message(m);
                // Listed as `hold` admits them.
                if let Message::Assistant { tool_calls, .. } = &mut message {
                    *tool_calls = None;
                }
                self.push(message)
            }
        };
        self.hold(group, calls);
    }

    /// The calls an assistant message declares go into it, but for those a
    /// message already holds (recorded before it was).
    fn hold(&mut self, group: usize, calls: Vec<ToolCall>) {
        for call in calls {
            if self.holder.contains_key(&call.id) {
                continue;
            }
            self.holder.insert(call.id.clone(), group);
            if let Some(Message::Assistant { tool_calls, .. }) = &mut self.groups[group].head {
                tool_calls.get_or_insert_with(Vec::new).push(call);
            }
        }
    }

    /// A call's TOOL_CALL_START, under `parent` if it named one.
    fn announce(&mut self, call: ToolCall, parent: Option<&str>) {
        if self.holder.contains_key(&call.id) {
            return;
        }
        let named = parent.map(|p| (p, self.by_id.get(p).copied()));
        let into = match named {
            Some((_, Some(Named::Head(group))))
                if matches!(self.groups[group].head, Some(Message::Assistant { .. })) =>
            {
                group
            }
            Some((parent, None)) => self.push(holder(parent)),
            // No parent, or one that is not an assistant message: a message
            // named by the call, unless a message has that id already (the
            // client would show two messages with one id; the call is left
            // out, and its result comes at the end).
            _ if self.by_id.contains_key(&call.id) => return,
            _ => self.push(holder(&call.id)),
        };
        self.hold(into, vec![call]);
    }

    fn into_messages(self) -> Vec<Message> {
        let rank = self.rank;
        self.groups
            .into_iter()
            .flat_map(|mut g| {
                // A message's calls in the order they were announced (the
                // client adds each as it comes), then those nobody has
                // posted, as the message declares them.
                if let Some(Message::Assistant {
                    tool_calls: Some(calls),
                    ..
                }) = &mut g.head
                {
                    calls.sort_by_key(|c| rank.get(&c.id).copied().unwrap_or(usize::MAX));
                }
                g.head.into_iter().chain(g.results)
            })
            .collect()
    }
}

/// The assistant message a client makes for a call whose message it does
/// not have.
fn holder(id: &str) -> Message {
    Message::Assistant {
        id: id.to_owned(),
        content: None,
        tool_calls: None,
        name: None,
    }
}

fn tool_call(id: &str, name: String, arguments: String) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        kind: "function".into(),
        function: FunctionCall { name, arguments },
    }
}

/// The calls an assistant message declares, in its order.
fn declared(m: &StoredMessage) -> Vec<ToolCall> {
    m.metadata
        .get("tool_calls")
        .and_then(|v| v.as_array())
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let name = c["name"].as_str().unwrap_or_default().to_string();
                    tool_call(
                        c["id"].as_str().unwrap_or_default(),
                        name,
                        c["arguments"].to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A stored message in AG-UI's message shape.
pub fn agui_message(m: StoredMessage) -> Message {
    // A message sent with media parts is given back with them, as sent.
    let content_of = |m: &StoredMessage| match crate::protocol::parts::stored(&m.metadata) {
        Some(content_parts) => serde_json::Value::Array(content_parts.clone()),
        None => serde_json::Value::String(m.content.clone()),
    };
    match m.role {
        Role::User => Message::User {
            content: content_of(&m),
            id: m.id,
            name: None,
        },
        Role::System => Message::System {
            id: m.id,
            content: m.content,
            name: None,
        },
        Role::Developer => Message::Developer {
            id: m.id,
            content: m.content,
            name: None,
        },
        Role::Assistant => {
            let calls = declared(&m);
            // Its text even when empty, as a client builds it from the
            // message's TEXT_MESSAGE_START and END.
            Message::Assistant {
                id: m.id,
                content: Some(m.content),
                tool_calls: (!calls.is_empty()).then_some(calls),
                name: None,
            }
        }
        Role::Tool => {
            let output = super::threads::stored_output(&m);
            // As the live TOOL_CALL_RESULT carries it.
            let metadata = output
                .as_ref()
                .map(|o| crate::engine::result_metadata(o, crate::engine::compile_ui(o)))
                .unwrap_or_default();
            Message::Tool {
                // A frontend's result carries the error its client sent; a
                // result of toolgate's has none, as a client builds it live
                // from TOOL_CALL_RESULT (its error is in the content and
                // the ui_schema).
                error: crate::protocol::context::frontend_error(&m).map(str::to_string),
                content: content_of(&m),
                id: m.id,
                tool_call_id: m.tool_call_id.unwrap_or_default(),
                metadata: (!metadata.is_empty()).then_some(metadata),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn message(
        seq: i64,
        id: &str,
        role: Role,
        metadata: Value,
        call: Option<&str>,
    ) -> StoredMessage {
        StoredMessage {
            thread_id: "t".into(),
            seq,
            id: id.into(),
            role,
            content: id.into(),
            metadata,
            tool_call_id: call.map(str::to_owned),
            created_at_ms: 0,
        }
    }

    fn user(seq: i64, id: &str) -> StoredMessage {
        message(seq, id, Role::User, json!({}), None)
    }

    fn result(seq: i64, call: &str) -> StoredMessage {
        let output = json!({"tool_name": "echo", "tool_call_id": call,
            "tool_call_args": {"text": call}, "status": "success", "result": {"text": call},
            "error": null});
        message(
            seq,
            &format!("r-{call}"),
            Role::Tool,
            json!({"tool_agent_output": output}),
            Some(call),
        )
    }

    fn placed(id: &str, parent: Option<&str>, after: Option<i64>) -> CallPlacement {
        CallPlacement {
            id: id.into(),
            parent_message_id: parent.map(str::to_owned),
            after_message_seq: after,
        }
    }

    /// `role:id[calls]`, a result as `tool:call`.
    fn outline(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m {
                Message::Tool { tool_call_id, .. } => format!("tool:{tool_call_id}"),
                Message::Assistant { id, tool_calls, .. } => {
                    let calls: Vec<&str> =
                        tool_calls.iter().flatten().map(|c| c.id.as_str()).collect();
                    format!("assistant:{id}{calls:?}")
                }
                other => format!("other:{}", other.id()),
            })
            .collect()
    }

    #[test]
    fn a_call_without_a_position_comes_just_before_its_result() {
        // Recorded before positions were kept: announced right before its
        // result, under the parent it named.
        let messages = vec![user(1, "u1"), user(2, "u2"), result(3, "c1")];
        let built = snapshot_messages(messages, &[placed("c1", None, None)], &[]);
        assert_eq!(
            outline(&built),
            ["other:u1", "other:u2", "assistant:c1[\"c1\"]", "tool:c1"]
        );
        // The same call with its position: where it was announced.
        let messages = vec![user(1, "u1"), user(2, "u2"), result(3, "c1")];
        let built = snapshot_messages(messages, &[placed("c1", None, Some(1))], &[]);
        assert_eq!(
            outline(&built),
            ["other:u1", "assistant:c1[\"c1\"]", "tool:c1", "other:u2"]
        );
    }

    #[test]
    fn a_parent_that_is_not_an_assistant_message_gives_the_call_its_own() {
        // Named a user message, then a result: as the client falls back,
        // a message named by the call.
        let messages = vec![user(1, "u1"), result(2, "c1"), result(3, "c2")];
        let built = snapshot_messages(
            messages,
            &[
                placed("c1", Some("u1"), Some(1)),
                placed("c2", Some("r-c1"), Some(2)),
            ],
            &[],
        );
        assert_eq!(
            outline(&built),
            [
                "other:u1",
                "assistant:c1[\"c1\"]",
                "tool:c1",
                "assistant:c2[\"c2\"]",
                "tool:c2"
            ]
        );
    }

    #[test]
    fn a_call_named_like_a_message_is_left_out_and_its_result_comes_at_the_end() {
        // A message named by the call would be a second message with the
        // same id: the call is not shown, its result follows the last
        // message as the client puts a result whose call it does not hold.
        let messages = vec![user(1, "c1"), user(2, "u2"), result(3, "c1")];
        let built = snapshot_messages(messages, &[placed("c1", None, Some(1))], &[]);
        assert_eq!(outline(&built), ["other:c1", "other:u2", "tool:c1"]);
    }

    #[test]
    fn results_before_any_message_and_results_of_calls_not_recorded_stay_in_order() {
        // A frontend's result (no stored output, no record) of a call no
        // message holds: where it came.
        let frontend = message(1, "f1", Role::Tool, json!({}), Some("ext"));
        let messages = vec![frontend, user(2, "u2"), result(3, "c1")];
        let built = snapshot_messages(messages, &[], &[]);
        assert_eq!(
            outline(&built),
            ["tool:ext", "other:u2", "assistant:c1[\"c1\"]", "tool:c1"]
        );
    }
}
