//! Wire and storage contracts shared by every layer: the tool output, the
//! AG-UI events, the incoming call shapes and the ui_schema codec. Everything
//! else imports its protocol types from here.

pub mod agui;
pub mod calls;
pub mod context;
pub mod json;
pub mod parts;
pub mod tool_output;
pub mod ui_schema;

/// An object key as one JSON pointer token (RFC 6901: `~` and `/` escaped).
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Milliseconds since the Unix epoch: the AG-UI `timestamp` unit.
/// At most `max` characters of `text`, an ellipsis marking a cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
