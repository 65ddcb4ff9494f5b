//! `RunAgentInput` and the AG-UI message roles, as clients send them.
//!
//! Unknown members are ignored (serde's default), as the protocol asks: a newer client's extra
//! fields never fail a request. Malformed known fields fail parsing, and the HTTP layer names the
//! field in its 400.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The body of `POST /v1/agui/agents/{agent}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    #[schema(pattern = r"^[A-Za-z0-9._:@-]{1,200}$")]
    pub thread_id: String,
    #[schema(pattern = r"^[A-Za-z0-9._:@-]{1,200}$")]
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Any JSON; absent or null means `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    pub messages: Vec<InputMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Vec<Context>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Vec<ResumeEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
}

impl RunAgentInput {
    pub fn tools(&self) -> &[Tool] {
        self.tools.as_deref().unwrap_or(&[])
    }

    pub fn resume(&self) -> &[ResumeEntry] {
        self.resume.as_deref().unwrap_or(&[])
    }

    /// A pre-1.0 client answers an `on_interrupt` the LangGraph way (CopilotKit's
    /// `useInterrupt`): `forwardedProps.command = {resume: <payload>, interruptEvent: {id, …}}`.
    /// Without a `resume` field, that answer is read as one (§5.4).
    pub fn with_command_resume(mut self) -> RunAgentInput {
        if self.resume.as_ref().is_some_and(|r| !r.is_empty()) || !self.is_pre_1_0_client() {
            return self;
        }
        let command = self.forwarded_props.as_ref().and_then(|p| p.get("command"));
        let id = command.and_then(|c| c["interruptEvent"]["id"].as_str());
        if let (Some(command), Some(id)) = (command, id) {
            let payload = command.get("resume").filter(|p| !p.is_null()).cloned();
            self.resume = Some(vec![ResumeEntry {
                interrupt_id: id.to_string(),
                status: ResumeStatus::Resolved,
                payload,
                metadata: None,
            }]);
        }
        self
    }

    /// A client whose `protocolVersion` is absent or of major 0 speaks pre-1.0 AG-UI (§5.4).
    /// An unparseable version is treated as newer, as the protocol asks.
    pub fn is_pre_1_0_client(&self) -> bool {
        match &self.protocol_version {
            None => true,
            Some(version) => {
                let major = version.split('.').next().unwrap_or("");
                matches!(major.parse::<u64>(), Ok(0))
            }
        }
    }
}

/// A client-declared (frontend) tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Context {
    pub description: String,
    pub value: String,
}

/// An answer to an interrupt (§5.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// A message of the conversation, by role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum InputMessage {
    Developer(PlainMessage),
    System(PlainMessage),
    User(UserMessage),
    Assistant(AssistantMessage),
    Tool(ToolMessage),
    Activity(ActivityMessage),
    Reasoning(ReasoningMessage),
}

impl InputMessage {
    pub fn id(&self) -> &str {
        match self {
            InputMessage::Developer(m) | InputMessage::System(m) => &m.id,
            InputMessage::User(m) => &m.id,
            InputMessage::Assistant(m) => &m.id,
            InputMessage::Tool(m) => &m.id,
            InputMessage::Activity(m) => &m.id,
            InputMessage::Reasoning(m) => &m.id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlainMessage {
    pub id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub id: String,
    pub content: UserContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A user message's content: a string, or content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl UserContent {
    /// The message's words: the string, or its text parts joined (other parts hold no words).
    pub fn text(&self) -> String {
        match self {
            UserContent::Text(text) => text.clone(),
            UserContent::Parts(parts) => {
                parts.iter().filter(|p| p.kind == "text").filter_map(|p| p.text.as_deref()).collect()
            }
        }
    }

    /// The parts besides text (images, audio, …), in order; none for string content.
    pub fn media(&self) -> Vec<&ContentPart> {
        match self {
            UserContent::Text(_) => Vec::new(),
            UserContent::Parts(parts) => parts.iter().filter(|p| p.kind != "text").collect(),
        }
    }
}

/// What a content part carries, as an agent's settings name it (`input_modalities`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    Text,
    Image,
    Audio,
    Video,
    Document,
}

impl Modality {
    pub fn as_str(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Image => "image",
            Modality::Audio => "audio",
            Modality::Video => "video",
            Modality::Document => "document",
        }
    }
}

/// A content part (AG-UI 1.0 `InputContent`): `text`; `image`/`audio`/`video`/`document` with a
/// `source` (`{type: "data", value, mimeType}`, `{type: "url", value, mimeType?}` or `{type:
/// "file", value, …}`); or the older `binary` part with `mimeType` and `data`, `url` or `id`.
/// Every member a part may have is kept, so an upstream gets the part as the client sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `binary` parts: the media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// `binary` parts: base64 data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// `binary` parts: where the content is (never fetched by the gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// Where a media part's content is, read off its `source` (or a `binary` part's members).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartSource<'a> {
    /// Base64 data, with its media type.
    Data {
        value: &'a str,
        mime_type: &'a str,
    },
    Url {
        value: &'a str,
        mime_type: Option<&'a str>,
    },
    /// An opaque handle of the client's storage provider.
    File {
        value: &'a str,
    },
}

impl ContentPart {
    /// What the part carries; `None` for a type AG-UI 1.0 does not define. A `binary` part is
    /// classed by its media type (anything but image, audio or video is a document).
    pub fn modality(&self) -> Option<Modality> {
        match self.kind.as_str() {
            "text" => Some(Modality::Text),
            "image" => Some(Modality::Image),
            "audio" => Some(Modality::Audio),
            "video" => Some(Modality::Video),
            "document" => Some(Modality::Document),
            "binary" => {
                let mime = self.mime_type.as_deref().unwrap_or("");
                Some(match mime.split('/').next().unwrap_or("") {
                    "image" => Modality::Image,
                    "audio" => Modality::Audio,
                    "video" => Modality::Video,
                    _ => Modality::Document,
                })
            }
            _ => None,
        }
    }

    /// The part in its AG-UI 1.0 form: a `binary` part (which 1.0's schema no longer admits)
    /// becomes the image/audio/video/document part of its media type with a `source`, its
    /// `filename` kept in `metadata`; every other part is itself. What a turn records, shows
    /// and sends upstream, so a 1.0 upstream accepts it and the history check compares like
    /// with like.
    pub fn normalized(&self) -> ContentPart {
        if self.kind != "binary" {
            return self.clone();
        }
        let (Some(modality), Ok(source)) = (self.modality(), self.content_source()) else { return self.clone() };
        let source = match source {
            PartSource::Data { value, mime_type } => json!({"type": "data", "value": value, "mimeType": mime_type}),
            PartSource::Url { value, mime_type } => json!({"type": "url", "value": value, "mimeType": mime_type}),
            PartSource::File { value } => json!({"type": "file", "value": value, "mimeType": self.mime_type}),
        };
        let mut metadata = self.metadata.clone();
        if let Some(filename) = &self.filename {
            if let Value::Object(members) = metadata.get_or_insert_with(|| json!({})) {
                members.entry("filename").or_insert_with(|| json!(filename));
            }
        }
        ContentPart {
            kind: modality.as_str().to_string(),
            text: None,
            source: Some(source),
            id: None,
            mime_type: None,
            data: None,
            url: None,
            filename: None,
            metadata,
        }
    }

    /// The part's file name: its own (`binary`) or its metadata's.
    pub fn filename(&self) -> Option<&str> {
        self.filename.as_deref().or_else(|| self.metadata.as_ref()?.get("filename")?.as_str())
    }

    /// The part's content, or why it has none a receiver could read (a missing or mistyped
    /// member, named).
    pub fn content_source(&self) -> Result<PartSource<'_>, String> {
        if self.kind == "binary" {
            let mime_type = self.mime_type.as_deref().ok_or("a binary part needs a mimeType")?;
            return match (self.data.as_deref(), self.url.as_deref(), self.id.as_deref()) {
                (Some(value), _, _) => Ok(PartSource::Data { value, mime_type }),
                (None, Some(value), _) => Ok(PartSource::Url { value, mime_type: Some(mime_type) }),
                (None, None, Some(value)) => Ok(PartSource::File { value }),
                _ => Err("a binary part needs data, url or id".into()),
            };
        }
        let source = self.source.as_ref().and_then(Value::as_object).ok_or("the part needs a source object")?;
        let value = source.get("value").and_then(Value::as_str).ok_or("source.value must be a string")?;
        let mime_type = match source.get("mimeType") {
            None | Some(Value::Null) => None,
            Some(Value::String(mime)) => Some(mime.as_str()),
            Some(_) => return Err("source.mimeType must be a string".into()),
        };
        match source.get("type").and_then(Value::as_str) {
            Some("data") => {
                Ok(PartSource::Data { value, mime_type: mime_type.ok_or("a data source needs a mimeType")? })
            }
            Some("url") => Ok(PartSource::Url { value, mime_type }),
            Some("file") => Ok(PartSource::File { value }),
            _ => Err("source.type must be \"data\", \"url\" or \"file\"".into()),
        }
    }
}

impl ContentPart {
    /// The media type the part declares (`mimeType` of a `binary` part or of its `source`),
    /// when it declares one as text.
    fn declared_media_type(&self) -> Option<&str> {
        if self.kind == "binary" {
            return self.mime_type.as_deref();
        }
        self.source.as_ref()?.get("mimeType")?.as_str()
    }

    /// The part's content, checked as its receiver will read it: its media type well formed
    /// (`type/subtype`, no parameters) and of the part's modality (an image part is `image/*`),
    /// base64 data that decodes, and a `data:` URL that is `data:<type/subtype>;base64,<data>`
    /// with the same checks. What is sent on is then exactly what was checked: a media type
    /// cannot carry text into a `data:` URL built from it. The URL's scheme is the caller's
    /// to judge (its allowed list is configuration).
    pub fn checked_source(&self) -> Result<PartSource<'_>, String> {
        let modality = self.modality().ok_or_else(|| format!("a '{}' part is no AG-UI 1.0 content part", self.kind))?;
        let source = self.content_source()?;
        let field = if self.kind == "binary" { "mimeType" } else { "source.mimeType" };
        if let Some(mime_type) = self.declared_media_type() {
            media_type_of(modality, mime_type).map_err(|why| format!("{field}: {why}"))?;
        }
        match source {
            PartSource::Data { value, .. } => {
                let field = if self.kind == "binary" { "data" } else { "source.value" };
                check_base64(value).map_err(|why| format!("{field}: {why}"))?;
            }
            PartSource::Url { value, .. } => {
                let field = if self.kind == "binary" { "url" } else { "source.value" };
                if let Some(rest) = strip_prefix_ignoring_case(value, "data:") {
                    let (mime_type, data) = rest
                        .split_once(";base64,")
                        .ok_or_else(|| format!("{field}: a data: URL must read data:<type>/<subtype>;base64,<data>"))?;
                    media_type_of(modality, mime_type).map_err(|why| format!("{field}: {why}"))?;
                    check_base64(data).map_err(|why| format!("{field}: {why}"))?;
                }
            }
            PartSource::File { .. } => {}
        }
        Ok(source)
    }
}

/// The scheme of an absolute URL, lower-cased (`https`, `data`), or `None` when `url` does not
/// begin with one (RFC 3986 §3.1: a letter, then letters, digits, `+`, `-` or `.`, then `:`).
pub fn url_scheme(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then(|| scheme.to_ascii_lowercase())
}

fn strip_prefix_ignoring_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

/// `mime_type` as a part of `modality` may carry it: `type/subtype`, each an RFC 6838 §4.2
/// restricted name, nothing else (no parameters, no spaces), its type the modality's
/// (`image`, `audio`, `video`; a document is of any other type).
pub fn media_type_of(modality: Modality, mime_type: &str) -> Result<(), String> {
    let shown: String = mime_type.chars().take(64).collect();
    let (kind, _) = mime_type
        .split_once('/')
        .filter(|(kind, subtype)| restricted_name(kind) && restricted_name(subtype))
        .ok_or_else(|| {
            format!("'{shown}' is no media type: write type/subtype (e.g. image/png), with no parameters")
        })?;
    let kind = kind.to_ascii_lowercase();
    let fits = match modality {
        Modality::Image | Modality::Audio | Modality::Video => kind == modality.as_str(),
        Modality::Document => !matches!(kind.as_str(), "image" | "audio" | "video"),
        Modality::Text => false,
    };
    if fits {
        Ok(())
    } else {
        let wanted = match modality {
            Modality::Document => "a type other than image, audio or video".to_string(),
            other => format!("{}/*", other.as_str()),
        };
        Err(format!("'{shown}' does not fit the part's kind, {} ({wanted})", modality.as_str()))
    }
}

/// An RFC 6838 §4.2 restricted name: 1 to 127 characters, a letter or digit first, then
/// letters, digits and `!#$&-^_.+`.
fn restricted_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 127
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
}

/// Base64 as a `data:` URL and every model API read it: the standard alphabet (letters,
/// digits, `+` and `/`), padded or not, nothing else (no spaces or line breaks), of a length
/// some bytes encode to. Checked by reading the text, without decoding a copy of it.
fn check_base64(data: &str) -> Result<(), String> {
    if data.is_empty() {
        return Err("the data is empty".into());
    }
    let unpadded = data.strip_suffix("==").or_else(|| data.strip_suffix('=')).unwrap_or(data);
    let padded = unpadded.len() != data.len();
    let alphabet = unpadded.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if !alphabet || unpadded.len() % 4 == 1 || (padded && !data.len().is_multiple_of(4)) {
        return Err("the data is not base64 (the standard alphabet A-Z a-z 0-9 + /, padded with = or not)".into());
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolMessage {
    pub id: String,
    pub content: Value,
    pub tool_call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActivityMessage {
    pub id: String,
    pub activity_type: String,
    pub content: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningMessage {
    pub id: String,
    pub content: String,
}

#[cfg(test)]
mod tests;
