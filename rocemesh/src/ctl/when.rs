//! Times as operators write them on the command line: `now`, a span ago (`1h`, `30m`,
//! `2d 4h`, via humantime), or an RFC 3339 timestamp (`2026-11-26T17:00:00Z`, an offset
//! like `+02:00`, or a space instead of the `T`).

use std::time::UNIX_EPOCH;

/// What a time option's help says it takes.
pub(super) const HELP: &str =
    "`now`, a span ago (`1h`, `30m`, `2d 4h`) or RFC 3339 (`2026-11-26T17:00:00Z`)";

/// `s` as ms since the Unix epoch, `now` being `now_ms`; a clear error otherwise.
pub(super) fn parse_at(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Ok(ago) = humantime::parse_duration(s) {
        let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
        return Ok(now_ms.saturating_sub(ago));
    }
    rfc3339_ms(s).ok_or_else(|| format!("{s:?} is not a time: give {HELP}"))
}

/// A clap value parser: [`parse_at`] against the current time.
pub(super) fn parse(s: &str) -> Result<i64, String> {
    parse_at(s, rocemesh_proto::now_unix_ms())
}

/// An RFC 3339 timestamp in ms since the Unix epoch (humantime reads UTC ones; a
/// numeric offset is applied here).
fn rfc3339_ms(s: &str) -> Option<i64> {
    let (utc, offset_s) = match s.len().checked_sub(6).map(|i| s.split_at(i)) {
        Some((head, off))
            if matches!(off.as_bytes(), [b'+' | b'-', h1, h2, b':', m1, m2]
                if [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())) =>
        {
            let n = |a: &str| a.parse::<i64>().ok();
            let secs = n(&off[1..3])? * 3600 + n(&off[4..6])? * 60;
            (
                format!("{head}Z"),
                if off.starts_with('-') { -secs } else { secs },
            )
        }
        _ => (s.to_string(), 0),
    };
    let at = humantime::parse_rfc3339_weak(utc.trim_end_matches(['Z', 'z'])).ok()?;
    let ms = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_millis()).ok()?,
    };
    Some(ms - offset_s * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_176_400_000; // 2025-11-26T17:00:00Z

    #[test]
    fn spans_are_ago_and_timestamps_absolute() {
        assert_eq!(parse_at("now", NOW), Ok(NOW));
        assert_eq!(parse_at("1h", NOW), Ok(NOW - 3_600_000));
        assert_eq!(parse_at("30m", NOW), Ok(NOW - 1_800_000));
        assert_eq!(parse_at("2d 4h", NOW), Ok(NOW - (2 * 24 + 4) * 3_600_000));
        assert_eq!(parse_at("2025-11-26T17:00:00Z", NOW), Ok(NOW));
        assert_eq!(parse_at("2025-11-26 17:00:00", NOW), Ok(NOW));
        assert_eq!(parse_at("2025-11-26T17:00:00.250Z", NOW), Ok(NOW + 250));
        assert_eq!(parse_at("2025-11-26T19:00:00+02:00", NOW), Ok(NOW));
        assert_eq!(parse_at("2025-11-26T12:30:00-04:30", NOW), Ok(NOW));
    }

    #[test]
    fn nonsense_is_refused_with_the_accepted_forms() {
        for bad in ["", "yesterday", "1 parsec", "2025-13-01T00:00:00Z", "17:00"] {
            let e = parse_at(bad, NOW).unwrap_err();
            assert!(e.contains("RFC 3339") && e.contains("1h"), "{bad}: {e}");
        }
    }
}
