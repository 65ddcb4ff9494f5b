//! AG-UI 1.0 wire types: the events the gateway streams and the `RunAgentInput` it accepts.
//!
//! Conventions of the protocol that these types keep (see `docs/agui-1.0.md` §0): field
//! names are camelCase, optional fields are omitted when they have no value (never `null`),
//! timestamps are integer milliseconds, and unknown members of the input are ignored.

pub mod a2ui;
pub mod capabilities;
pub mod codes;
pub mod events;
pub mod input;
pub mod mcp_apps;
pub mod proto;
pub mod sse;

pub use codes::ErrorCode;
pub use events::{Event, Interrupt, RunOutcome, TokenUsage};
pub use input::{ContentPart, InputMessage, Modality, PartSource, ResumeEntry, RunAgentInput, UserContent};

/// The protocol version this gateway declares on `RUN_STARTED` (its own, never an echo).
pub const PROTOCOL_VERSION: &str = "1.0";

/// `ms` since the epoch as ISO 8601 UTC with milliseconds (`2026-11-30T02:43:51.123Z`).
pub fn iso8601(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let day_secs = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso8601_formats_known_instants() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(super::iso8601(1_796_006_631_123), "2026-11-30T02:43:51.123Z");
    }
}
