//! The interrupt vocabulary (SPEC §5): what a waiting turn waits for, who may decide it, and
//! the response schemas. Everything that renders, records or decides an interrupt speaks it;
//! the all-or-nothing check of a resume is the request room's (`request/resume.rs`).
//!
//! The waiting event in the log carries everything rendering needs ([`Waiting`]), so a stream
//! on any instance shows each caller exactly the interrupts that caller may decide.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::caller::Caller;
use crate::protocol::Interrupt;
use crate::store::InterruptRow;

/// Who a stream is rendered for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Viewer {
    /// The person, or `None` for a tenant API key.
    pub person: Option<String>,
    pub roles: Vec<String>,
    /// A client whose `protocolVersion` is absent or 0.x gets the §5.4 shape.
    pub pre_1_0: bool,
    /// What of the board it may see (§7).
    pub clearance: crate::engine::board::Clearance,
}

impl Viewer {
    /// The viewer `caller` is: its person (none for an API key), roles and board clearance.
    /// `pre_1_0` is the client's protocol, which only a stream's rendering reads (§5.4); a view
    /// that renders no interrupt (an inbox, a list of what a caller decides) passes `false`.
    pub fn of(caller: &Caller, pre_1_0: bool) -> Viewer {
        Viewer {
            person: caller.person_id().map(str::to_string),
            roles: caller.roles().to_vec(),
            pre_1_0,
            clearance: crate::engine::board::Clearance::of(caller),
        }
    }
}

/// Who may decide: persons by id and holders of roles. Both empty: the person who started the
/// turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deciders {
    #[serde(default)]
    pub persons: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
}

impl Deciders {
    /// From config entries: `role:<name>` or a person id.
    pub fn from_config(entries: &[String]) -> Deciders {
        let mut deciders = Deciders::default();
        for entry in entries {
            match entry.strip_prefix("role:") {
                Some(role) => deciders.roles.push(role.to_string()),
                None => deciders.persons.push(entry.clone()),
            }
        }
        deciders
    }
}

/// One interrupt as the waiting event records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub interrupt: Interrupt,
    pub deciders: Deciders,
    pub four_eyes: bool,
    pub started_by: String,
    pub turn: String,
}

/// Whether `person` (with `roles`) may decide an interrupt (§5.1 policy, four eyes included).
pub fn may_decide(person: &str, roles: &[String], deciders: &Deciders, four_eyes: bool, started_by: &str) -> bool {
    if four_eyes && person == started_by {
        return false;
    }
    if deciders.persons.is_empty() && deciders.roles.is_empty() {
        return person == started_by;
    }
    deciders.persons.iter().any(|p| p == person) || deciders.roles.iter().any(|r| roles.contains(r))
}

/// Who decides, in words (`gateway/deciders`).
pub fn describe_deciders(deciders: &Deciders, four_eyes: bool) -> String {
    let mut parts = Vec::new();
    if deciders.persons.is_empty() && deciders.roles.is_empty() {
        parts.push("the person who started the turn".to_string());
    }
    if !deciders.persons.is_empty() {
        parts.push(deciders.persons.join(", "));
    }
    if !deciders.roles.is_empty() {
        parts.push(format!("anyone with the role {}", deciders.roles.join(" or ")));
    }
    let mut words = parts.join(", or ");
    if four_eyes {
        words.push_str(" (not the person who started the turn)");
    }
    words
}

impl Waiting {
    pub fn may_be_decided_by(&self, viewer: &Viewer) -> bool {
        match &viewer.person {
            Some(person) => may_decide(person, &viewer.roles, &self.deciders, self.four_eyes, &self.started_by),
            None => false,
        }
    }

    /// An entry of `gateway/waiting-for-others` and `gateway.waiting`.
    /// The interrupt as a caller sees it: its arguments (`gateway/details`) only with the
    /// content permission (§5.1); without it, that a call waits and who decides, nothing more.
    /// With a console configured, `gateway/console` links to where people decide.
    pub fn shown(&self, content: bool, console: Option<&str>) -> Interrupt {
        let mut interrupt = self.interrupt.clone();
        let metadata = interrupt.metadata.get_or_insert_with(serde_json::Map::new);
        if !content {
            metadata.remove("gateway/details");
        }
        if let Some(url) = console {
            metadata.insert("gateway/console".into(), console_link(url, &self.interrupt.id));
        }
        interrupt
    }

    /// What a caller who does not decide sees of it (a `gateway/waiting` entry).
    pub fn for_others(&self, console: Option<&str>) -> Value {
        let mut entry = json!({
            "turn": self.turn,
            "interruptId": self.interrupt.id,
            "what": self.interrupt.message.clone().unwrap_or_else(|| self.interrupt.reason.clone()),
            "deciders": describe_deciders(&self.deciders, self.four_eyes),
        });
        if let Some(url) = console {
            entry["gateway/console"] = console_link(url, &self.interrupt.id);
        }
        entry
    }
}

/// `gateway/console` (§5.1): where the people who decide can do so — the interrupt's own item
/// there: the console's address with `#/interrupts/<id>` (an address that names a fragment of
/// its own is linked as it is).
pub fn console_link(url: &str, interrupt_id: &str) -> Value {
    let url = match url.contains('#') {
        true => url.to_string(),
        false => format!("{url}#/interrupts/{interrupt_id}"),
    };
    json!({ "label": "Decide in the console", "url": url })
}

/// The response schema of a tool approval (§5.1).
pub fn tool_call_schema(allow_edit: bool, confirm: Option<&str>) -> Value {
    let mut properties = json!({ "approved": { "type": "boolean" }, "comment": { "type": "string" } });
    let mut required = vec!["approved"];
    if allow_edit {
        properties["editedArgs"] = json!({ "type": "object" });
    }
    if let Some(value) = confirm {
        properties["confirm"] = json!({ "const": value });
        required.push("confirm");
    }
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

/// The response schema of a confirmation (an escalation, §5.1): `{"approved", "comment"?}`,
/// a tool approval's without edits.
pub fn confirmation_schema() -> Value {
    tool_call_schema(false, None)
}

/// The response schema of a question: free text, or one of its choices.
pub fn question_schema(choices: &[String]) -> Value {
    let answer =
        if choices.is_empty() { json!({ "type": "string" }) } else { json!({ "type": "string", "enum": choices }) };
    json!({ "type": "object", "properties": { "answer": answer }, "required": ["answer"], "additionalProperties": false })
}

/// The waiting view of a stored interrupt.
pub fn waiting_of(row: &InterruptRow) -> Option<Waiting> {
    Some(Waiting {
        interrupt: serde_json::from_str(&row.shown).ok()?,
        deciders: serde_json::from_str(&row.deciders).ok()?,
        four_eyes: row.four_eyes,
        started_by: row.started_by.clone(),
        turn: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deciders_follow_persons_roles_and_four_eyes() {
        let anyone_admin = Deciders { persons: vec![], roles: vec!["admin".into()] };
        assert!(may_decide("bob", &["admin".into()], &anyone_admin, false, "alice"));
        assert!(!may_decide("bob", &[], &anyone_admin, false, "alice"));
        assert!(!may_decide("alice", &["admin".into()], &anyone_admin, true, "alice"), "four eyes");
        assert!(may_decide("alice", &[], &Deciders::default(), false, "alice"), "the starter by default");
        assert!(!may_decide("bob", &[], &Deciders::default(), false, "alice"));
    }
}
