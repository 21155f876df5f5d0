//! UTC calendar form of Unix-millisecond timestamps, for the places that show or send
//! times as text (alert payloads, `rocemesh ctl` tables) without a date-time crate.

/// `ms` since the epoch as RFC 3339 UTC with milliseconds, e.g. `2024-05-01T12:00:00.250Z`
/// (proleptic Gregorian civil date from the day count, H. Hinnant's `civil_from_days`).
pub fn rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339_ms;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @951782400` = 2000-02-29 00:00:00 (a leap day of a century year).
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        // `date -u -d @1714564805` = 2024-05-01 12:00:05.
        assert_eq!(rfc3339_ms(1_714_564_805_250), "2024-05-01T12:00:05.250Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        // `date -u -d @1700000000` = 2023-11-14 22:13:20.
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
