//! Validated identifiers: a client-named thread or run id, a tenant's name, and the gateway's
//! own turn ids and event ids. An unchecked string never reaches the engine.

use std::fmt;

/// Letters, digits and `._:@-`, 1–200 characters (§2).
fn is_client_id(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 200
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

/// Names of agents and tenants in config: letters, digits, `_` and `-`, 1–64 characters.
pub fn is_valid_name(value: &str) -> bool {
    !value.is_empty() && value.len() <= 64 && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

macro_rules! client_id {
    ($name:ident, $what:literal) => {
        #[doc = concat!("A ", $what, " as the client names it, validated.")]
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            pub fn parse(value: &str) -> Result<Self, String> {
                if is_client_id(value) {
                    Ok($name(value.to_string()))
                } else {
                    Err(format!("{} must be 1-200 letters, digits or ._:@- characters", $what))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

client_id!(ThreadId, "threadId");
client_id!(RunId, "runId");

/// A tenant's name, validated as config validates it ([`is_valid_name`]): never empty, so a
/// turn cannot run, or charge its tokens, under no tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(value: &str) -> Result<TenantId, String> {
        if is_valid_name(value) {
            Ok(TenantId(value.to_string()))
        } else {
            Err("a tenant must be 1-64 letters, digits, _ or - characters".to_string())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A new turn's public id: `t` and 24 hex digits of randomness, so it names nothing guessable.
pub fn new_turn_id() -> String {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    format!("t{}", &uuid[..24])
}

/// The id of a user message that started a turn, as the gateway names it.
pub fn user_message_id(turn: &str) -> String {
    format!("{turn}:in")
}

/// The turn a gateway-named message id belongs to (`<turn>:…`).
pub fn turn_of_message_id(message_id: &str) -> Option<&str> {
    message_id.split_once(':').map(|(turn, _)| turn).filter(|t| t.starts_with('t'))
}

/// The SSE `id:` of an event: the turn's public id and the event's position in its log.
/// Opaque to clients; increasing within a run's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId {
    pub turn: String,
    pub seq: i64,
    /// 0 for a whole logged event. When one logged event renders as several SSE events (a
    /// resume's `RUN_STARTED`, snapshot and `gateway.resume`s; a pre-1.0 interrupt ending),
    /// every one but the last is named `<turn>.<seq>.<part>` — the first `part` of them were
    /// sent — so a reconnect after any of them continues exactly after it.
    pub part: u32,
}

impl EventId {
    pub fn parse(value: &str) -> Option<EventId> {
        let mut pieces = value.trim().split('.');
        let turn = pieces.next()?;
        let seq: i64 = pieces.next()?.parse().ok()?;
        let part: u32 = match pieces.next() {
            Some(part) => part.parse().ok().filter(|p| *p >= 1)?,
            None => 0,
        };
        let well_formed = turn.len() == 25 && turn.starts_with('t') && turn[1..].bytes().all(|b| b.is_ascii_hexdigit());
        (well_formed && seq >= 1 && pieces.next().is_none()).then(|| EventId { turn: turn.to_string(), seq, part })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.part {
            0 => write!(f, "{}.{}", self.turn, self.seq),
            part => write!(f, "{}.{}.{}", self.turn, self.seq, part),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_follow_the_documented_charset() {
        assert!(ThreadId::parse("thread-1._:@x").is_ok());
        assert!(ThreadId::parse("").is_err());
        assert!(ThreadId::parse("has space").is_err());
        assert!(ThreadId::parse("sl/ash").is_err());
        assert!(RunId::parse(&"r".repeat(200)).is_ok());
        assert!(RunId::parse(&"r".repeat(201)).is_err());
    }

    #[test]
    fn a_tenant_is_never_empty_and_named_as_config_names_it() {
        assert_eq!(TenantId::parse("acme-2_b").map(|t| t.to_string()), Ok("acme-2_b".to_string()));
        for bad in ["", "has space", "a.b", &"t".repeat(65)] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn event_ids_round_trip_and_reject_garbage() {
        let id = EventId { turn: new_turn_id(), seq: 42, part: 0 };
        assert_eq!(EventId::parse(&id.to_string()), Some(id.clone()));
        let part = EventId { part: 2, ..id };
        assert_eq!(EventId::parse(&part.to_string()), Some(part));
        for bad in [
            "",
            "42",
            "t123.5",
            "x0123456789abcdef01234567.1",
            "t0123456789abcdef01234567.0",
            "t0123456789abcdef01234567.-3",
            "t0123456789abcdef01234567.3.0",
            "t0123456789abcdef01234567.3.1.1",
        ] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn message_ids_name_their_turn() {
        let turn = new_turn_id();
        assert_eq!(turn_of_message_id(&user_message_id(&turn)), Some(turn.as_str()));
        assert_eq!(turn_of_message_id("client-message"), None);
    }
}
