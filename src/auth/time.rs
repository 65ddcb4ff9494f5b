//! Times as the audit commands show and take them: UTC, RFC 3339, no time-zone database.

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// `2025-01-31T12:00:00.123Z` (the protocol's ISO 8601 form).
pub fn format_ms(ms: i64) -> String {
    crate::protocol::iso8601(ms)
}

/// Milliseconds since the epoch of `--since`: an age (`30m`, `12h`, `7d`, `90s`), a date
/// (`2025-01-31`, midnight UTC) or an RFC 3339 UTC time (`2025-01-31T12:00:00Z`).
pub fn parse_since(text: &str, now_ms: i64) -> Option<i64> {
    let text = text.trim();
    let unit_ms = match text.chars().last() {
        Some('s') => Some(1000),
        Some('m') => Some(60_000),
        Some('h') => Some(3_600_000),
        Some('d') => Some(86_400_000),
        _ => None,
    };
    if let Some(unit_ms) = unit_ms {
        let amount: i64 = text[..text.len() - 1].parse().ok()?;
        return Some(now_ms - amount.checked_mul(unit_ms)?);
    }
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, Some(time)),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (parts.next()??, parts.next()??, parts.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut ms = days_from_civil(year, month, day) * 86_400_000;
    if let Some(time) = time {
        let time = time.strip_suffix('Z').or_else(|| time.strip_suffix("+00:00"))?;
        let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
        let mut fields = clock.splitn(3, ':').map(|p| p.parse::<i64>().ok());
        let (hour, minute) = (fields.next()??, fields.next()??);
        let second = fields.next().flatten().unwrap_or(0);
        let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
        ms += ((hour * 60 + minute) * 60 + second) * 1000 + millis;
    }
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let ms = 1_738_324_800_123; // 2025-01-31T12:00:00.123Z
        assert_eq!(format_ms(ms), "2025-01-31T12:00:00.123Z");
        assert_eq!(parse_since("2025-01-31T12:00:00.123Z", 0), Some(ms));
        assert_eq!(parse_since("2025-01-31", 0), Some(1_738_281_600_000));
        assert_eq!(parse_since("2h", 10_000_000), Some(10_000_000 - 7_200_000));
        assert_eq!(parse_since("yesterday", 0), None);
        assert_eq!(parse_since("2025-13-01", 0), None);
    }
}
