//! The all-or-nothing check of a resume (SPEC §5.3): every entry is checked against the turn's
//! interrupts before any is decided, so a resume either decides all it names or nothing.

use serde_json::Value;

use crate::engine::interrupts::{describe_deciders, may_decide, Deciders};
use crate::engine::meaning::{Asked, Meaning};
use crate::protocol::input::{ResumeEntry, ResumeStatus};
use crate::protocol::{ErrorCode, Interrupt};
use crate::store::{InterruptRow, InterruptStatus};

/// Why a resume was refused: a `RUN_ERROR` code and a message naming the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRefusal {
    pub code: ErrorCode,
    pub message: String,
}

fn refusal(code: ErrorCode, message: String) -> ResumeRefusal {
    ResumeRefusal { code, message }
}

/// What one resume entry will do once every entry passed.
#[derive(Debug, Clone)]
pub enum EntryPlan {
    /// Decide it: `decision` is what is stored, `meaning` what it means.
    Decide {
        interrupt_id: String,
        decision: Value,
        meaning: Meaning,
    },
    AlreadyDecided {
        interrupt_id: String,
        decided_seq: Option<i64>,
    },
}

/// Checks every entry of a resume before any is decided (§5.3): an interrupt named by two
/// entries (`invalid_resume`: which answer would count is anyone's guess), unknown or not of
/// this turn (`invalid_resume`), changed (`interrupt_changed`), expired (`interrupt_expired`), not the
/// caller's to decide (`not_a_decider`), a payload its schema rejects or whose meaning is not
/// certain (`invalid_resume`, [`Asked::read`]), and every open interrupt the caller may decide
/// answered (`interrupts_open`).
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
        if entry.status == ResumeStatus::Resolved {
            if let Some(schema) = &shown.response_schema {
                let payload = entry.payload.clone().unwrap_or(Value::Null);
                validate(schema, &payload)
                    .map_err(|why| refusal(ErrorCode::InvalidResume, format!("{name}: {why}")))?;
            }
        }
        // The one reading of what the person meant (§5.3): everything after reads it.
        let meaning = Asked::of_interrupt(&shown)
            .read(entry.status, entry.payload.as_ref())
            .map_err(|why| refusal(ErrorCode::InvalidResume, format!("{name}: {why}")))?;
        let payload = match entry.status {
            ResumeStatus::Resolved => entry.payload.as_ref(),
            ResumeStatus::Cancelled => None,
        };
        let decision = meaning.stored(payload);
        plans.push(EntryPlan::Decide { interrupt_id: row.id.clone(), decision, meaning });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::interrupts::{question_schema, tool_call_schema};
    use serde_json::json;

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
