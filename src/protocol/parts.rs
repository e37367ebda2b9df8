//! AG-UI content parts of a message a run records: `text`, and the media
//! parts `image`, `audio`, `video` and `document`, each with a `source`
//! that is inline data (`data`, base64 with its `mimeType`), a URL (`url`),
//! or a handle a provider issued (`file`).
//!
//! A message sent with media keeps its parts as they came, in its metadata
//! under [`KEY`], beside its text (the text parts joined) in `content`. The
//! snapshot and `/history` give the parts back; `/context` passes each part
//! on in the vendor's own shape where the vendor has one, and otherwise as
//! a short note saying what was attached, so the model knows.

use serde_json::{Value, json};

/// The metadata key that holds a message's content parts as sent.
pub const KEY: &str = "content_parts";

/// The part types AG-UI defines besides `text`.
pub(crate) const MEDIA: [&str; 4] = ["image", "audio", "video", "document"];

/// The image types both vendors take.
const WEB_IMAGES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Base64 as browsers and SDKs write it: standard alphabet, padding
/// optional, no line breaks.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A media type without its parameters (`audio/ogg; codecs=opus` →
/// `audio/ogg`).
fn essence(mime: &str) -> &str {
    mime.split(';').next().unwrap_or_default().trim()
}

/// Whether `mime` is a media type (`type/subtype`, parameters allowed)
/// that a part of `kind` can be: an image part an `image/…`, and so on;
/// a document any type.
fn mime_fits(kind: &str, mime: &str) -> bool {
    let Some((top, sub)) = essence(mime).split_once('/') else {
        return false;
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    token(top)
        && token(sub)
        && match kind {
            "image" | "audio" | "video" => top.eq_ignore_ascii_case(kind),
            _ => true,
        }
}

/// Check content parts against AG-UI's shapes: `Err((pointer, message))`,
/// the pointer relative to the content.
pub fn check(parts: &[Value]) -> Result<(), (String, String)> {
    for (j, part) in parts.iter().enumerate() {
        let at = |rest: &str| format!("/{j}{rest}");
        let Some(kind) = part.get("type").and_then(Value::as_str) else {
            return Err((at(""), "must be an object with a string \"type\"".into()));
        };
        // What AG-UI's schemas hold of every part.
        if part.get("id").is_some_and(|id| !id.is_string()) {
            return Err((at("/id"), "must be a string".into()));
        }
        if part.get("metadata").is_some_and(Value::is_null) {
            return Err((at("/metadata"), "must not be null (leave it out)".into()));
        }
        if kind == "text" {
            if !part.get("text").is_some_and(Value::is_string) {
                return Err((at("/text"), "a text part's text must be a string".into()));
            }
            continue;
        }
        if !MEDIA.contains(&kind) {
            return Err((
                at("/type"),
                format!(
                    "{kind:?} is not a content part type; one of \"text\", \"image\", \"audio\", \"video\", \"document\""
                ),
            ));
        }
        let Some(source) = part.get("source").filter(|s| s.is_object()) else {
            return Err((
                at("/source"),
                format!("an {kind} part needs a source object (data, url or file)"),
            ));
        };
        let source_type = source.get("type").and_then(Value::as_str);
        if !matches!(source_type, Some("data" | "url" | "file")) {
            return Err((
                at("/source/type"),
                "must be \"data\", \"url\" or \"file\"".into(),
            ));
        }
        if !source.get("value").is_some_and(Value::is_string) {
            return Err((at("/source/value"), "must be a string".into()));
        }
        match source.get("mimeType") {
            None if source_type == Some("data") => {
                return Err((
                    at("/source/mimeType"),
                    "inline data needs its mimeType".into(),
                ));
            }
            Some(mime) if !mime.is_string() => {
                return Err((at("/source/mimeType"), "must be a string".into()));
            }
            Some(Value::String(mime)) if !mime_fits(kind, mime) => {
                let what = match kind {
                    "document" => "a media type (type/subtype)".to_string(),
                    _ => format!("a media type of an {kind} part ({kind}/…)"),
                };
                return Err((at("/source/mimeType"), format!("{mime:?} is not {what}")));
            }
            _ => {}
        }
        if source_type == Some("data") {
            let value = source["value"].as_str().unwrap_or_default();
            if value.is_empty() || base64::Engine::decode(&BASE64, value).is_err() {
                return Err((
                    at("/source/value"),
                    "inline data must be base64 (standard alphabet, no line breaks)".into(),
                ));
            }
        }
        if source.get("provider").is_some_and(|p| !p.is_string()) {
            return Err((at("/source/provider"), "must be a string".into()));
        }
    }
    Ok(())
}

/// Whether the parts hold anything but text.
pub fn has_media(parts: &[Value]) -> bool {
    parts.iter().any(|p| p["type"] != "text")
}

/// The parts a stored message was sent with, when it had media.
pub fn stored(metadata: &Value) -> Option<&Vec<Value>> {
    metadata.get(KEY)?.as_array()
}

/// A media part, read.
struct Media<'a> {
    kind: &'a str,
    /// `data`, `url` or `file`.
    source: &'a str,
    value: &'a str,
    mime: Option<&'a str>,
    /// For a `file` source, who issued the handle.
    provider: Option<&'a str>,
    filename: Option<&'a str>,
}

fn media(part: &Value) -> Option<Media<'_>> {
    let source = part.get("source")?;
    Some(Media {
        kind: part["type"].as_str()?,
        source: source["type"].as_str()?,
        value: source["value"].as_str()?,
        mime: source["mimeType"].as_str(),
        provider: source["provider"].as_str(),
        filename: part["metadata"]["filename"].as_str(),
    })
}

impl Media<'_> {
    /// An image type both vendors take, or an image whose type is not
    /// given (a URL: the vendor looks).
    fn web_image(&self) -> bool {
        self.mime.is_none_or(|mime| {
            WEB_IMAGES
                .iter()
                .any(|t| t.eq_ignore_ascii_case(essence(mime)))
        })
    }

    /// A PDF: said so, or, with no type given, a URL ending in `.pdf` or
    /// a provider's file handle.
    fn pdf(&self) -> bool {
        match self.mime {
            Some(mime) => essence(mime).eq_ignore_ascii_case("application/pdf"),
            None => match self.source {
                "url" => {
                    let path = self.value.split(['?', '#']).next().unwrap_or_default();
                    path.to_ascii_lowercase().ends_with(".pdf")
                }
                source => source == "file",
            },
        }
    }

    /// The part's media type as the vendors take it: its essence, in lower
    /// case (`IMAGE/PNG; x=y` is `image/png`). They match it exactly.
    fn media_type(&self) -> Option<String> {
        self.mime.map(|mime| essence(mime).to_ascii_lowercase())
    }

    fn data_url(&self) -> String {
        format!(
            "data:{};base64,{}",
            self.media_type()
                .as_deref()
                .unwrap_or("application/octet-stream"),
            self.value
        )
    }

    /// Whether the part is a file handle `provider` issued.
    fn issued_by(&self, provider: &str) -> bool {
        self.source == "file"
            && self
                .provider
                .is_some_and(|p| p.eq_ignore_ascii_case(provider))
    }

    /// What the model reads for a part its vendor's shape cannot carry.
    fn note(&self) -> String {
        let what = match self.mime {
            Some(mime) => format!("{} ({mime})", self.kind),
            None => self.kind.to_string(),
        };
        let name = self.filename.map(|f| format!(" {f:?}")).unwrap_or_default();
        let place = match self.source {
            "url" => format!(" at {}", self.value),
            "file" => format!(" in file {}", self.value),
            _ => String::new(),
        };
        format!("[attached {what}{name}{place}, which this context format cannot pass on]")
    }
}

/// A message's parts as OpenAI Chat Completions user content: text, JPEG,
/// PNG, GIF and WebP images (`image_url`, inline data as a data URL), WAV
/// and MP3 audio (`input_audio`), PDFs as inline data or an OpenAI file id
/// (`file`); other parts as notes.
pub fn openai_user(parts: &[Value]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|part| {
            if part["type"] == "text" {
                return Some(json!({"type": "text", "text": part["text"]}));
            }
            let m = media(part)?;
            let audio_format = match m.media_type().as_deref() {
                Some("audio/wav" | "audio/x-wav" | "audio/wave") => Some("wav"),
                Some("audio/mpeg" | "audio/mp3") => Some("mp3"),
                _ => None,
            };
            Some(match (m.kind, m.source) {
                ("image", "url") if m.web_image() => {
                    json!({"type": "image_url", "image_url": {"url": m.value}})
                }
                ("image", "data") if m.web_image() => {
                    json!({"type": "image_url", "image_url": {"url": m.data_url()}})
                }
                ("audio", "data") if audio_format.is_some() => {
                    json!({"type": "input_audio", "input_audio": {"data": m.value, "format": audio_format}})
                }
                ("document", "data") if m.pdf() => json!({"type": "file", "file": {
                    "file_data": m.data_url(),
                    "filename": m.filename.unwrap_or("document"),
                }}),
                ("document", "file") if m.issued_by("openai") => {
                    json!({"type": "file", "file": {"file_id": m.value}})
                }
                _ => json!({"type": "text", "text": m.note()}),
            })
        })
        .collect()
}

/// A message's parts as Anthropic content blocks: text (empty text left
/// out: the API refuses it), JPEG, PNG, GIF and WebP images and PDF
/// documents from inline data, a URL or an Anthropic file id; other parts
/// as notes.
pub fn anthropic_blocks(parts: &[Value]) -> Vec<Value> {
    anthropic_blocks_of(parts, true)
}

/// A tool result's parts as the content of an Anthropic `tool_result`:
/// text and images as [`anthropic_blocks`] gives them, documents and
/// other parts as notes (a `tool_result` is held to text and images here).
pub fn anthropic_result_blocks(parts: &[Value]) -> Vec<Value> {
    anthropic_blocks_of(parts, false)
}

fn anthropic_blocks_of(parts: &[Value], documents: bool) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|part| {
            if part["type"] == "text" {
                let text = part["text"].as_str()?;
                return (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}));
            }
            let m = media(part)?;
            let source = match m.source {
                "url" => Some(json!({"type": "url", "url": m.value})),
                "data" => m
                    .media_type()
                    .map(|mime| json!({"type": "base64", "media_type": mime, "data": m.value})),
                _ if m.issued_by("anthropic") => Some(json!({"type": "file", "file_id": m.value})),
                _ => None,
            };
            Some(match (m.kind, source) {
                ("image", Some(source)) if m.web_image() => {
                    json!({"type": "image", "source": source})
                }
                ("document", Some(source)) if documents && m.pdf() => {
                    json!({"type": "document", "source": source})
                }
                _ => json!({"type": "text", "text": m.note()}),
            })
        })
        .collect()
}

/// The notes for a message's media parts, for a place that holds only text
/// (an OpenAI tool message's content).
pub fn notes(parts: &[Value]) -> Vec<String> {
    parts.iter().filter_map(media).map(|m| m.note()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Value> {
        vec![
            json!({"type": "text", "text": "what is this?"}),
            json!({"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}),
            json!({"type": "image", "source": {"type": "data", "value": "iVBORw0=", "mimeType": "image/png"}}),
            json!({"type": "audio", "source": {"type": "data", "value": "UklGRg==", "mimeType": "audio/wav"}}),
            json!({"type": "document", "source": {"type": "data", "value": "JVBERi0=", "mimeType": "application/pdf"},
                   "metadata": {"filename": "r.pdf"}}),
            json!({"type": "video", "source": {"type": "url", "value": "https://example.com/v.mp4", "mimeType": "video/mp4"}}),
            json!({"type": "document", "source": {"type": "file", "value": "file-1", "provider": "anthropic"}}),
        ]
    }

    #[test]
    fn parts_are_checked_where_they_break() {
        assert_eq!(check(&sample()), Ok(()));
        let refused =
            |part: Value| check(&[json!({"type": "text", "text": "ok"}), part]).unwrap_err();
        assert_eq!(refused(json!({"kind": "text"})).0, "/1");
        assert_eq!(refused(json!({"type": "text", "text": 3})).0, "/1/text");
        let (at, why) = refused(json!({"type": "binary", "mimeType": "image/png"}));
        assert_eq!(at, "/1/type");
        assert!(why.contains("\"binary\""), "{why}");
        assert_eq!(refused(json!({"type": "image"})).0, "/1/source");
        assert_eq!(
            refused(json!({"type": "image", "source": {"type": "ftp", "value": "x"}})).0,
            "/1/source/type"
        );
        assert_eq!(
            refused(json!({"type": "image", "source": {"type": "url"}})).0,
            "/1/source/value"
        );
        assert_eq!(
            refused(json!({"type": "image", "source": {"type": "data", "value": "AA=="}})).0,
            "/1/source/mimeType"
        );
        assert_eq!(
            refused(
                json!({"type": "audio", "source": {"type": "url", "value": "u", "mimeType": 1}})
            )
            .0,
            "/1/source/mimeType"
        );
        assert_eq!(
            refused(
                json!({"type": "image", "source": {"type": "file", "value": "f", "provider": 7}})
            )
            .0,
            "/1/source/provider"
        );
        assert_eq!(
            refused(json!({"type": "text", "text": "t", "id": 1})).0,
            "/1/id"
        );
        assert_eq!(
            refused(json!({"type": "text", "text": "t", "metadata": null})).0,
            "/1/metadata"
        );
        // Inline data is base64; a type is a media type of the part's kind.
        for value in ["not base64 !!", "", "QUJD\nREVG"] {
            let (at, why) = refused(
                json!({"type": "image", "source": {"type": "data", "value": value, "mimeType": "image/png"}}),
            );
            assert_eq!(at, "/1/source/value", "{value:?}");
            assert!(why.contains("base64"), "{why}");
        }
        assert_eq!(
            check(&[
                json!({"type": "image", "source": {"type": "data", "value": "iVBORw", "mimeType": "image/png"}})
            ]),
            Ok(()),
            "padding may be left out"
        );
        for (kind, mime) in [
            ("image", "text/html"),
            ("audio", "image/png"),
            ("document", "pdf"),
            ("image", "image/"),
        ] {
            let (at, why) = refused(
                json!({"type": kind, "source": {"type": "url", "value": "u", "mimeType": mime}}),
            );
            assert_eq!(at, "/1/source/mimeType", "{kind} {mime}");
            assert!(why.contains(&format!("{mime:?} is not")), "{why}");
        }
        assert_eq!(
            check(&[
                json!({"type": "audio", "source": {"type": "url", "value": "u", "mimeType": "audio/ogg; codecs=opus"}})
            ]),
            Ok(())
        );
    }

    #[test]
    fn parts_a_vendor_refuses_become_notes() {
        let parts = [
            json!({"type": "image", "source": {"type": "data", "value": "Qk0=", "mimeType": "image/bmp"}}),
            json!({"type": "image", "source": {"type": "url", "value": "https://e.com/i.tiff", "mimeType": "image/tiff"}}),
            json!({"type": "document", "source": {"type": "url", "value": "https://e.com/r.docx"}}),
            json!({"type": "document", "source": {"type": "data", "value": "UEs=", "mimeType": "application/zip"}}),
        ];
        for (vendor, rendered) in [
            ("openai", openai_user(&parts)),
            ("anthropic", anthropic_blocks(&parts)),
        ] {
            assert_eq!(rendered.len(), 4, "{vendor}");
            for block in &rendered {
                assert_eq!(block["type"], "text", "{vendor}: {block}");
                assert!(
                    block["text"].as_str().unwrap().starts_with("[attached "),
                    "{vendor}: {block}"
                );
            }
        }
        // A URL document with no type is a PDF when its path says so.
        let pdf = json!({"type": "document", "source": {"type": "url", "value": "https://e.com/R.PDF?x=1"}});
        assert_eq!(anthropic_blocks(&[pdf])[0]["type"], "document");
    }

    #[test]
    fn openai_gets_images_audio_and_documents_and_notes_for_the_rest() {
        let content = openai_user(&sample());
        assert_eq!(content[0], json!({"type": "text", "text": "what is this?"}));
        assert_eq!(
            content[1],
            json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})
        );
        assert_eq!(
            content[2]["image_url"]["url"],
            "data:image/png;base64,iVBORw0="
        );
        assert_eq!(
            content[3],
            json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}})
        );
        assert_eq!(
            content[4],
            json!({"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "r.pdf"}})
        );
        let video = content[5]["text"].as_str().unwrap();
        assert!(
            video.contains("video (video/mp4) at https://example.com/v.mp4"),
            "{video}"
        );
        // Another provider's file handle means nothing to OpenAI.
        assert!(
            content[6]["text"]
                .as_str()
                .unwrap()
                .contains("in file file-1")
        );
        assert_eq!(content.len(), 7);
    }

    /// A media type is matched whatever its case and parameters, and
    /// handed on as the bare lower-case type the vendors match exactly.
    #[test]
    fn media_types_are_handed_on_as_the_vendors_spell_them() {
        let data = |kind: &str, mime: &str| json!({"type": kind, "source": {"type": "data", "value": "AAAA", "mimeType": mime}});
        let parts = [
            data("image", "IMAGE/PNG"),
            data("image", "image/webp "),
            data("document", "Application/PDF; x=y"),
            data("audio", "audio/MPEG"),
        ];
        let blocks = anthropic_blocks(&parts);
        let types: Vec<&Value> = blocks[..3]
            .iter()
            .map(|b| &b["source"]["media_type"])
            .collect();
        assert_eq!(
            types,
            [
                &json!("image/png"),
                &json!("image/webp"),
                &json!("application/pdf")
            ]
        );
        let content = openai_user(&parts);
        assert_eq!(content[0]["image_url"]["url"], "data:image/png;base64,AAAA");
        assert_eq!(
            content[1]["image_url"]["url"],
            "data:image/webp;base64,AAAA"
        );
        assert_eq!(
            content[2]["file"]["file_data"],
            "data:application/pdf;base64,AAAA"
        );
        assert_eq!(content[3]["input_audio"]["format"], "mp3");
        // In a tool result too.
        let result = anthropic_result_blocks(&[data("image", "image/png; charset=binary")]);
        assert_eq!(result[0]["source"]["media_type"], "image/png");
    }

    #[test]
    fn anthropic_gets_images_and_pdfs_and_notes_for_the_rest() {
        let blocks = anthropic_blocks(&sample());
        assert_eq!(blocks[0], json!({"type": "text", "text": "what is this?"}));
        assert_eq!(
            blocks[1],
            json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}})
        );
        assert_eq!(
            blocks[2],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0="}})
        );
        assert!(
            blocks[3]["text"]
                .as_str()
                .unwrap()
                .contains("audio (audio/wav)")
        );
        assert_eq!(
            blocks[4],
            json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}})
        );
        assert!(
            blocks[5]["text"]
                .as_str()
                .unwrap()
                .starts_with("[attached video")
        );
        assert_eq!(
            blocks[6],
            json!({"type": "document", "source": {"type": "file", "file_id": "file-1"}})
        );
        // Empty text is left out; a part with media only still gives a block.
        let only_image = anthropic_blocks(&[
            json!({"type": "text", "text": "  "}),
            json!({"type": "image", "source": {"type": "url", "value": "u"}}),
        ]);
        assert_eq!(only_image.len(), 1);
        assert_eq!(notes(&sample()).len(), 6);
    }

    /// A tool result takes the same text and images; its documents become
    /// notes.
    #[test]
    fn an_anthropic_tool_result_gets_images_and_notes_for_documents() {
        let blocks = anthropic_result_blocks(&sample());
        let all = anthropic_blocks(&sample());
        assert_eq!(blocks.len(), all.len());
        for i in [0, 1, 2, 3, 5] {
            assert_eq!(blocks[i], all[i], "part {i}");
        }
        for i in [4, 6] {
            let note = blocks[i]["text"].as_str().unwrap();
            assert!(note.starts_with("[attached document"), "{note}");
        }
    }
}
