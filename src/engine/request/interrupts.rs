//! Interrupts (SPEC §5): what a waiting turn waits for, who may decide it, how a run that
//! reaches a waiting turn ends for each caller, and the all-or-nothing checks of a resume.
//!
//! The waiting event in the log carries everything rendering needs ([`Waiting`]), so a stream
//! on any instance shows each caller exactly the interrupts that caller may decide.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::engine::ErrorCode;

use crate::protocol::input::{ResumeEntry, ResumeStatus};
use crate::protocol::Interrupt;
use crate::store::{InterruptRow, InterruptStatus};

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

/// Why a resume was refused: a `RUN_ERROR` code and a message naming the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRefusal {
    pub code: ErrorCode,
    pub message: String,
}

fn refusal(code: ErrorCode, message: String) -> ResumeRefusal {
    ResumeRefusal { code, message }
}

/// The key of a stored decision listing the keys the gateway added to the person's payload
/// (`approved`, read from the interrupt's reason when the payload did not say).
pub const INFERRED: &str = "gateway/inferred";

/// The key of a stored decision holding the person's payload when it is not a JSON object (a
/// plain string such as CrewAI's `"approved"`): the decision stays an object the gateway reads,
/// and an upstream gets the payload back exactly as it was sent.
pub const AS_GIVEN: &str = "gateway/payload";

/// What one resume entry will do once every entry passed.
#[derive(Debug, Clone)]
pub enum EntryPlan {
    Decide { interrupt_id: String, decision: Value, approved: bool },
    AlreadyDecided { interrupt_id: String, decided_seq: Option<i64> },
}

/// Checks every entry of a resume before any is decided (§5.3): an interrupt named by two
/// entries (`invalid_resume`: which answer would count is anyone's guess), unknown or not of
/// this turn (`invalid_resume`), changed (`interrupt_changed`), expired (`interrupt_expired`), not the
/// caller's to decide (`not_a_decider`), a payload its schema rejects (`invalid_resume`), and
/// every open interrupt the caller may decide answered (`interrupts_open`).
pub fn check_resume(
    entries: &[ResumeEntry],
    interrupts: &[InterruptRow],
    person: &str,
    roles: &[String],
    now_ms: i64,
    require_all: bool,
) -> Result<Vec<EntryPlan>, ResumeRefusal> {
    let mut plans = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let name = format!("resume[{index}] ({})", entry.interrupt_id);
        if let Some(first) = entries[..index].iter().position(|e| e.interrupt_id == entry.interrupt_id) {
            return Err(refusal(
                ErrorCode::InvalidResume,
                format!(
                    "{name}: interrupt {} is answered twice (resume[{first}] too): answer each once",
                    entry.interrupt_id
                ),
            ));
        }
        let Some(row) = interrupts.iter().find(|i| i.id == entry.interrupt_id) else {
            return Err(refusal(ErrorCode::InvalidResume, format!("{name}: no such interrupt on this thread's turn")));
        };
        let shown: Interrupt = serde_json::from_str(&row.shown)
            .map_err(|_| refusal(ErrorCode::InvalidResume, format!("{name}: the interrupt's record is unreadable")))?;
        // Who decides is the gateway's own record: unreadable, nobody decides (never "anyone").
        let deciders: Deciders = serde_json::from_str(&row.deciders)
            .map_err(|_| refusal(ErrorCode::InvalidResume, format!("{name}: the interrupt's record is unreadable")))?;
        match row.status {
            InterruptStatus::Superseded => {
                return Err(refusal(
                    ErrorCode::InterruptChanged,
                    format!("{name}: the call changed since it was shown"),
                ))
            }
            InterruptStatus::Expired => {
                return Err(refusal(ErrorCode::InterruptExpired, format!("{name}: expired, and was denied")))
            }
            InterruptStatus::Withdrawn => {
                return Err(refusal(ErrorCode::InvalidResume, format!("{name}: withdrawn, its turn was cancelled")))
            }
            InterruptStatus::Decided => {
                plans.push(EntryPlan::AlreadyDecided { interrupt_id: row.id.clone(), decided_seq: row.decided_seq });
                continue;
            }
            InterruptStatus::Open => {}
        }
        if row.expires_at_ms <= now_ms {
            return Err(refusal(ErrorCode::InterruptExpired, format!("{name}: expired")));
        }
        if !may_decide(person, roles, &deciders, row.four_eyes, &row.started_by) {
            return Err(refusal(
                ErrorCode::NotADecider,
                format!("{name}: decided by {}", describe_deciders(&deciders, row.four_eyes)),
            ));
        }
        let (decision, approved) = match entry.status {
            ResumeStatus::Cancelled => (json!({ "approved": false, "cancelled": true }), false),
            ResumeStatus::Resolved => {
                let payload = entry.payload.clone().unwrap_or(Value::Null);
                if let Some(schema) = &shown.response_schema {
                    validate(schema, &payload)
                        .map_err(|why| refusal(ErrorCode::InvalidResume, format!("{name}: {why}")))?;
                }
                let said = payload.get("approved").and_then(Value::as_bool);
                let approved = said.unwrap_or(shown.reason == "input_required");
                let mut decision = match payload {
                    // A key of the gateway's own is never taken from the person's words.
                    Value::Object(mut map) => {
                        map.remove(AS_GIVEN);
                        map
                    }
                    Value::Null => Map::new(),
                    other => Map::from_iter([(AS_GIVEN.to_string(), other)]),
                };
                // The decision says which of its words are the gateway's, so what goes on (an
                // upstream's `resume`) can carry the person's own: never a key they sent in.
                decision.remove(INFERRED);
                decision.insert("approved".into(), Value::Bool(approved));
                if said.is_none() {
                    decision.insert(INFERRED.into(), json!(["approved"]));
                }
                (Value::Object(decision), approved)
            }
        };
        plans.push(EntryPlan::Decide { interrupt_id: row.id.clone(), decision, approved });
    }
    if require_all {
        for row in interrupts.iter().filter(|i| i.status == InterruptStatus::Open) {
            let Ok(deciders) = serde_json::from_str::<Deciders>(&row.deciders) else {
                return Err(refusal(ErrorCode::InvalidResume, format!("interrupt {}'s record is unreadable", row.id)));
            };
            let mine = may_decide(person, roles, &deciders, row.four_eyes, &row.started_by);
            if mine && !entries.iter().any(|e| e.interrupt_id == row.id) {
                return Err(refusal(
                    ErrorCode::InterruptsOpen,
                    format!("interrupt {} is open and yours to decide: answer every open interrupt at once", row.id),
                ));
            }
        }
    }
    Ok(plans)
}

/// Validates a payload with the interrupt's JSON Schema.
fn validate(schema: &Value, payload: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| format!("the interrupt's schema is invalid: {e}"))?;
    let errors: Vec<String> =
        validator.iter_errors(payload).map(|e| format!("{} at '{}'", e, e.instance_path())).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("the payload does not match the response schema: {}", errors.join("; ")))
    }
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

    #[test]
    fn an_interrupt_answered_twice_is_refused_naming_it() {
        let row = InterruptRow {
            id: "int_1".into(),
            thread: 1,
            turn: 1,
            shown: json!({"id": "int_1", "reason": "tool_call"}).to_string(),
            deciders: "{}".into(),
            four_eyes: false,
            started_by: "alice".into(),
            expires_at_ms: i64::MAX,
            status: InterruptStatus::Open,
            decision: None,
            decided_by: None,
            decided_seq: None,
            created_at_ms: 0,
            policy_digest: String::new(),
        };
        let entry = |status| ResumeEntry {
            interrupt_id: "int_1".into(),
            status,
            payload: Some(json!({"approved": true})),
            metadata: None,
        };
        for pair in [
            [entry(ResumeStatus::Resolved), entry(ResumeStatus::Cancelled)],
            [entry(ResumeStatus::Resolved), entry(ResumeStatus::Resolved)],
        ] {
            let refused = check_resume(&pair, std::slice::from_ref(&row), "alice", &[], 0, true).expect_err("refused");
            assert_eq!(refused.code, ErrorCode::InvalidResume);
            assert!(refused.message.contains("int_1") && refused.message.contains("twice"), "{}", refused.message);
        }
        assert!(check_resume(&[entry(ResumeStatus::Resolved)], &[row], "alice", &[], 0, true).is_ok());
    }

    #[test]
    fn payloads_are_checked_against_the_schema() {
        let schema = tool_call_schema(false, Some("DELETE"));
        assert!(validate(&schema, &json!({"approved": true, "confirm": "DELETE"})).is_ok());
        assert!(validate(&schema, &json!({"approved": true})).is_err());
        assert!(validate(&schema, &json!({"approved": "yes", "confirm": "DELETE"})).is_err());
        assert!(validate(&schema, &json!({"approved": true, "confirm": "DELETE", "editedArgs": {}})).is_err());
        let question = question_schema(&["red".into(), "blue".into()]);
        assert!(validate(&question, &json!({"answer": "red"})).is_ok());
        assert!(validate(&question, &json!({"answer": "green"})).is_err());
    }
}
