//! One meaning per decision (SPEC §5.3): what a person's answer to an interrupt means — approve
//! (with edited arguments where allowed), deny (with its comment), or answer (a value, one of a
//! question's choices) — read once, from the payload against what the interrupt asked, and
//! stored in that form. Everything after reads the stored [`Meaning`]: the agent or upstream,
//! the stream's `gateway.resume`, the decision route's answer, the audit trail, the console.
//! A payload whose meaning is not certain (a non-boolean `approved`, an empty object, a comment
//! alone) is refused here, saying what to send, and decides nothing.
//!
//! What an interrupt asks ([`Asked`]) is read from its `responseSchema`: a yes or no (a boolean
//! `approved`, `confirmed` or `accepted`), one of a list of options (a string `enum`), a value of
//! the schema's own shape, or nothing said (no schema, as Google ADK's confirmations): then the
//! payload must say yes or no itself.

use serde_json::{json, Map, Value};

use crate::protocol::input::ResumeStatus;
use crate::protocol::Interrupt;

/// The keys a yes or no is given under, in the order the gateway prefers them.
pub const DECISION_KEYS: [&str; 3] = ["approved", "confirmed", "accepted"];

/// The interrupt metadata key naming the option of a list that counts as a "no" (an `agui`
/// agent's `deny_option`): a deny, a cancel or an expiry is sent as it.
pub const REFUSAL: &str = "gateway/refusal";

/// The stored decision's key holding the meaning's word (`approve`, `deny`, `answer`).
const MEANING: &str = "gateway/meaning";

/// The stored decision's key holding the person's payload exactly as they sent it.
const PAYLOAD: &str = "gateway/payload";

/// What one decision means.
#[derive(Debug, Clone, PartialEq)]
pub enum Meaning {
    /// Yes: the call runs, with `edited_args` in place of its arguments where given.
    Approve { comment: Option<String>, edited_args: Option<Value> },
    /// No: the call does not run, the question is declined.
    Deny { comment: Option<String>, why: Denial },
    /// An answer to a question: `value`, and the option it is where the question had options.
    Answer { value: Value, choice: Option<String> },
}

/// How a "no" came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The person said no (`approved: false`, or the refusal option).
    Said,
    /// `status: "cancelled"`, a deny without a payload (the command line), the console's deny.
    Cancelled,
    /// Nobody decided in time.
    Expired,
    /// The call changed since it was shown; it is asked again (§5.3's recheck).
    Superseded,
}

impl Meaning {
    /// Whether it is a yes for the turn: an approval or an answer.
    pub fn approved(&self) -> bool {
        !matches!(self, Meaning::Deny { .. })
    }

    /// Its word, as every party is told it.
    pub fn word(&self) -> &'static str {
        match self {
            Meaning::Approve { .. } => "approve",
            Meaning::Deny { .. } => "deny",
            Meaning::Answer { .. } => "answer",
        }
    }

    /// The outcome of deciding `interrupt_id` this way (`outcome`: `decided`, `expired`), as the
    /// stream's `gateway.resume`, the decision route and the audit trail say it: `approved`,
    /// the `decision` word, and the option an answer picked.
    pub fn outcome(&self, interrupt_id: &str, outcome: &str) -> Value {
        let mut said = json!({
            "interruptId": interrupt_id,
            "outcome": outcome,
            "approved": self.approved(),
            "decision": self.word(),
        });
        if let Meaning::Answer { choice: Some(choice), .. } = self {
            said["choice"] = json!(choice);
        }
        said
    }

    /// The stored decision: the meaning's own keys (`approved`, `comment`, `editedArgs`,
    /// `answer`, and `cancelled` / `expired` / `superseded` for a "no" nobody said), which the
    /// agents read, and the person's `payload` as they sent it, which an upstream is given.
    pub fn stored(&self, payload: Option<&Value>) -> Value {
        let mut stored = Map::new();
        stored.insert("approved".into(), Value::Bool(self.approved()));
        stored.insert(MEANING.into(), json!(self.word()));
        match self {
            Meaning::Approve { comment, edited_args } => {
                if let Some(comment) = comment {
                    stored.insert("comment".into(), json!(comment));
                }
                if let Some(edited) = edited_args {
                    stored.insert("editedArgs".into(), edited.clone());
                }
            }
            Meaning::Deny { comment, why } => {
                if let Some(comment) = comment {
                    stored.insert("comment".into(), json!(comment));
                }
                let flag = match why {
                    Denial::Said => None,
                    Denial::Cancelled => Some("cancelled"),
                    Denial::Expired => Some("expired"),
                    Denial::Superseded => Some("superseded"),
                };
                if let Some(flag) = flag {
                    stored.insert(flag.into(), Value::Bool(true));
                }
            }
            Meaning::Answer { value, choice } => {
                stored.insert("answer".into(), value.clone());
                if let Some(choice) = choice {
                    stored.insert("choice".into(), json!(choice));
                }
            }
        }
        if let Some(payload) = payload {
            stored.insert(PAYLOAD.into(), payload.clone());
        }
        Value::Object(stored)
    }

    /// The meaning of a stored decision. A decision stored before meanings were (no
    /// `gateway/meaning`) is read by its flags: a "no" nobody said, else its `approved`, else an
    /// answer.
    pub fn of_stored(stored: &Value) -> Meaning {
        let flag = |key: &str| stored.get(key).and_then(Value::as_bool).unwrap_or(false);
        let comment = stored.get("comment").and_then(Value::as_str).map(str::to_string);
        let denial = if flag("superseded") {
            Some(Denial::Superseded)
        } else if flag("expired") {
            Some(Denial::Expired)
        } else if flag("cancelled") {
            Some(Denial::Cancelled)
        } else {
            None
        };
        if let Some(why) = denial {
            return Meaning::Deny { comment, why };
        }
        let word = stored.get(MEANING).and_then(Value::as_str);
        let approved = stored.get("approved").and_then(Value::as_bool);
        // The earlier form said no `approved` for an answer, or an inferred `true` beside it.
        let answered = match word {
            Some(word) => word == "answer",
            None => approved.is_none() || (approved == Some(true) && stored.get("answer").is_some()),
        };
        if answered {
            return Meaning::Answer {
                value: stored.get("answer").cloned().unwrap_or(Value::Null),
                choice: stored.get("choice").and_then(Value::as_str).map(str::to_string),
            };
        }
        match word.map_or(approved == Some(false), |word| word == "deny") {
            true => Meaning::Deny { comment, why: Denial::Said },
            false => Meaning::Approve { comment, edited_args: stored.get("editedArgs").cloned() },
        }
    }

    /// The person's payload of a stored decision, exactly as they sent it; `None` when nobody
    /// sent one (a cancel, an expiry). A decision stored before meanings were keeps it as its
    /// own keys, less those the gateway added.
    pub fn payload_of_stored(stored: &Value) -> Option<Value> {
        let map = stored.as_object()?;
        if map.contains_key(MEANING) {
            return map.get(PAYLOAD).cloned();
        }
        // The earlier form: the payload's keys, `approved` added where it did not say (listed
        // under `gateway/inferred`), a non-object payload under `gateway/payload`.
        if let Some(given) = map.get(PAYLOAD) {
            return Some(given.clone());
        }
        if ["cancelled", "expired", "superseded"].iter().any(|k| map.get(*k) == Some(&Value::Bool(true))) {
            return None;
        }
        let mut sent = map.clone();
        let added = sent.remove("gateway/inferred");
        for key in added.as_ref().and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            sent.remove(key);
        }
        Some(Value::Object(sent))
    }
}

/// What an interrupt asks for, read from its `responseSchema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A yes or no, under these boolean keys (of [`DECISION_KEYS`]), the preferred first.
    YesNo { keys: Vec<String> },
    /// One of `options`: the payload itself (`key` none, CrewAI's outcomes) or its `key`
    /// (`answer`, the gateway's questions). `refusal` is the option that counts as a no.
    Choice { options: Vec<String>, key: Option<String>, refusal: Option<String> },
    /// A value of the schema's own shape: the payload's `key` (`answer`), or the payload.
    Value { key: Option<String> },
    /// Nothing: no schema, or an empty one (Google ADK's confirmations).
    Unstated,
}

impl Asked {
    /// What `schema` asks; `refusal` names the option of a list that counts as a no.
    pub fn of(schema: Option<&Value>, refusal: Option<&str>) -> Asked {
        let Some(schema) = schema.filter(|s| s.as_object().is_some_and(|m| !m.is_empty())) else {
            return Asked::Unstated;
        };
        let options_of = |schema: &Value| -> Option<Vec<String>> {
            let options = schema.get("enum")?.as_array()?;
            options.iter().map(|o| o.as_str().map(str::to_string)).collect()
        };
        let with_refusal = |options: &[String]| refusal.filter(|r| options.iter().any(|o| o == r)).map(str::to_string);
        if let Some(options) = options_of(schema) {
            let refusal = with_refusal(&options);
            return Asked::Choice { options, key: None, refusal };
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let keys: Vec<String> = DECISION_KEYS
            .iter()
            .filter(|key| properties.and_then(|p| p.get(**key)).is_some_and(|p| p["type"] == "boolean"))
            .map(|key| key.to_string())
            .collect();
        if !keys.is_empty() {
            return Asked::YesNo { keys };
        }
        match properties.and_then(|p| p.get("answer")) {
            Some(answer) => match options_of(answer) {
                Some(options) => {
                    let refusal = with_refusal(&options);
                    Asked::Choice { options, key: Some("answer".into()), refusal }
                }
                None => Asked::Value { key: Some("answer".into()) },
            },
            None => Asked::Value { key: None },
        }
    }

    /// What a shown interrupt asks: its schema, and the refusal its metadata names.
    pub fn of_interrupt(interrupt: &Interrupt) -> Asked {
        let refusal = interrupt.metadata.as_ref().and_then(|m| m.get(REFUSAL)).and_then(Value::as_str);
        Asked::of(interrupt.response_schema.as_ref(), refusal)
    }

    /// The meaning of an answer `status` with `payload` (already valid for the schema): refused
    /// with what to send when it is not certain.
    pub fn read(&self, status: ResumeStatus, payload: Option<&Value>) -> Result<Meaning, String> {
        if status == ResumeStatus::Cancelled {
            return Ok(Meaning::Deny { comment: None, why: Denial::Cancelled });
        }
        let payload = payload.unwrap_or(&Value::Null);
        let said = yes_or_no(payload)?;
        match self {
            Asked::YesNo { keys } => said.ok_or_else(|| {
                format!("the payload does not say yes or no: send {}: true or false", keys.join(" or "))
            }),
            Asked::Choice { options, key, refusal } => {
                let picked = match key {
                    Some(key) => payload.get(key.as_str()),
                    None => Some(payload),
                };
                let Some(choice) = picked.and_then(Value::as_str).filter(|c| options.iter().any(|o| o == c)) else {
                    return Err(format!("the payload picks none of the options: send one of {}", options.join(", ")));
                };
                if refusal.as_deref() == Some(choice) {
                    return Ok(Meaning::Deny { comment: None, why: Denial::Said });
                }
                let value = json!(choice);
                Ok(Meaning::Answer { value, choice: Some(choice.to_string()) })
            }
            Asked::Value { key: Some(key) } => match said {
                Some(meaning) => Ok(meaning),
                None => match payload.get(key.as_str()).filter(|v| !v.is_null()) {
                    Some(value) => Ok(Meaning::Answer { value: value.clone(), choice: None }),
                    None => Err(format!("the payload gives no {key}: send {{\"{key}\": …}}")),
                },
            },
            Asked::Value { key: None } => match said {
                Some(meaning) => Ok(meaning),
                None if says_nothing(payload) => {
                    Err("the payload says nothing the interrupt asked for: send what its responseSchema asks".into())
                }
                None => Ok(Meaning::Answer { value: payload.clone(), choice: None }),
            },
            Asked::Unstated => match said {
                Some(meaning) => Ok(meaning),
                None => match payload.get("answer").filter(|v| !v.is_null()) {
                    Some(_) => Ok(Meaning::Answer { value: payload.clone(), choice: None }),
                    None => Err("the interrupt gives no responseSchema, so the payload must say yes or no: send \
                                 approved: true or false (or an answer)"
                        .into()),
                },
            },
        }
    }
}

/// The yes or no a payload says under [`DECISION_KEYS`]: `None` when it names none; refused
/// when one is not a boolean, or two disagree.
fn yes_or_no(payload: &Value) -> Result<Option<Meaning>, String> {
    let Some(map) = payload.as_object() else { return Ok(None) };
    let mut said: Option<bool> = None;
    for key in DECISION_KEYS {
        let Some(value) = map.get(key) else { continue };
        let Some(yes) = value.as_bool() else {
            return Err(format!("{key} is {value}, not a boolean: send {key}: true or false"));
        };
        if said.is_some_and(|earlier| earlier != yes) {
            return Err(format!("the payload says both yes and no ({key} disagrees): send one of them"));
        }
        said = Some(yes);
    }
    let comment = map.get("comment").and_then(Value::as_str).map(str::to_string);
    Ok(said.map(|yes| match yes {
        true => Meaning::Approve { comment, edited_args: map.get("editedArgs").filter(|e| e.is_object()).cloned() },
        false => Meaning::Deny { comment, why: Denial::Said },
    }))
}

/// A payload that says nothing: none, an empty object, a comment alone.
fn says_nothing(payload: &Value) -> bool {
    match payload {
        Value::Null => true,
        Value::Object(map) => map.keys().all(|key| key == "comment"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::interrupts::{question_schema, tool_call_schema};

    fn read(asked: &Asked, payload: Value) -> Result<Meaning, String> {
        asked.read(ResumeStatus::Resolved, Some(&payload))
    }

    #[test]
    fn a_yes_or_no_is_read_from_its_boolean_key_only() {
        let asked = Asked::of(Some(&tool_call_schema(true, None)), None);
        assert_eq!(asked, Asked::YesNo { keys: vec!["approved".into()] });
        assert_eq!(
            read(&asked, json!({"approved": true, "editedArgs": {"to": "x"}})),
            Ok(Meaning::Approve { comment: None, edited_args: Some(json!({"to": "x"})) })
        );
        assert_eq!(
            read(&asked, json!({"approved": false, "comment": "no"})),
            Ok(Meaning::Deny { comment: Some("no".into()), why: Denial::Said })
        );
        assert!(read(&asked, json!({"comment": "no"})).is_err(), "a comment alone");
    }

    #[test]
    fn an_unstated_interrupt_needs_a_boolean_yes_or_no() {
        let asked = Asked::of(Some(&json!({})), None);
        assert_eq!(asked, Asked::Unstated);
        for unclear in [json!({"approved": "no"}), json!({"comment": "please do not"}), json!({}), json!(null)] {
            let refused = read(&asked, unclear.clone()).expect_err("unclear");
            assert!(refused.contains("approved: true or false"), "{unclear}: {refused}");
        }
        assert!(matches!(read(&asked, json!({"approved": false})), Ok(Meaning::Deny { .. })));
        assert!(matches!(read(&asked, json!({"confirmed": true})), Ok(Meaning::Approve { .. })));
        assert!(read(&asked, json!({"approved": true, "confirmed": false})).is_err(), "yes and no at once");
    }

    #[test]
    fn an_alias_of_the_schema_reads_alike() {
        // Microsoft Agent Framework's schema lists `approved` and its alias `accepted`.
        let schema = json!({"type": "object", "properties": {
            "approved": {"type": "boolean"}, "accepted": {"type": "boolean"}}});
        let asked = Asked::of(Some(&schema), None);
        assert!(matches!(read(&asked, json!({"accepted": true})), Ok(Meaning::Approve { .. })));
        assert!(matches!(read(&asked, json!({"accepted": false})), Ok(Meaning::Deny { .. })));
    }

    #[test]
    fn an_option_is_an_answer_unless_it_is_the_refusal() {
        let schema = json!({"type": "string", "enum": ["approved", "rejected"]});
        let asked = Asked::of(Some(&schema), Some("rejected"));
        assert_eq!(
            read(&asked, json!("approved")),
            Ok(Meaning::Answer { value: json!("approved"), choice: Some("approved".into()) })
        );
        assert!(read(&asked, json!("approved")).expect("answer").approved(), "an approval is no denial");
        assert_eq!(read(&asked, json!("rejected")), Ok(Meaning::Deny { comment: None, why: Denial::Said }));
        let without = Asked::of(Some(&schema), Some("not an option"));
        assert!(matches!(without, Asked::Choice { refusal: None, .. }));
    }

    #[test]
    fn a_question_is_answered() {
        let asked = Asked::of(Some(&question_schema(&["red".into(), "blue".into()])), None);
        let answer = read(&asked, json!({"answer": "red"})).expect("answered");
        assert_eq!(answer, Meaning::Answer { value: json!("red"), choice: Some("red".into()) });
        let free = Asked::of(Some(&question_schema(&[])), None);
        assert_eq!(read(&free, json!({"answer": "x"})), Ok(Meaning::Answer { value: json!("x"), choice: None }));
        assert!(matches!(free.read(ResumeStatus::Cancelled, None), Ok(Meaning::Deny { why: Denial::Cancelled, .. })));
    }

    #[test]
    fn an_outcome_says_the_meaning() {
        let picked = Meaning::Answer { value: json!("red"), choice: Some("red".into()) };
        assert_eq!(
            picked.outcome("int_1", "decided"),
            json!({"interruptId": "int_1", "outcome": "decided", "approved": true, "decision": "answer", "choice": "red"})
        );
        let expired = Meaning::Deny { comment: None, why: Denial::Expired };
        assert_eq!(
            expired.outcome("int_1", "expired"),
            json!({"interruptId": "int_1", "outcome": "expired", "approved": false, "decision": "deny"})
        );
    }

    #[test]
    fn a_stored_meaning_reads_back_the_same() {
        let meanings = [
            Meaning::Approve { comment: Some("ok".into()), edited_args: Some(json!({"a": 1})) },
            Meaning::Deny { comment: None, why: Denial::Said },
            Meaning::Deny { comment: None, why: Denial::Expired },
            Meaning::Deny { comment: None, why: Denial::Cancelled },
            Meaning::Answer { value: json!("red"), choice: Some("red".into()) },
            Meaning::Answer { value: json!({"x": 1}), choice: None },
        ];
        for meaning in meanings {
            let payload = json!({"sent": true});
            let stored = meaning.stored(Some(&payload));
            assert_eq!(Meaning::of_stored(&stored), meaning, "{stored}");
            assert_eq!(Meaning::payload_of_stored(&stored), Some(payload));
        }
        // The earlier form: the payload's keys, an inferred `approved` left out of what was sent.
        let earlier = json!({"approved": true, "answer": "x", "gateway/inferred": ["approved"]});
        assert_eq!(Meaning::of_stored(&earlier), Meaning::Answer { value: json!("x"), choice: None });
        assert!(matches!(Meaning::of_stored(&json!({"approved": false})), Meaning::Deny { why: Denial::Said, .. }));
        assert!(matches!(Meaning::of_stored(&json!({"approved": true})), Meaning::Approve { .. }));
        assert_eq!(Meaning::payload_of_stored(&earlier), Some(json!({"answer": "x"})));
        assert_eq!(Meaning::payload_of_stored(&json!({"approved": false, "expired": true})), None);
    }
}
