//! Durations in config files.
//!
//! Every duration setting is written as a human string (`"30s"`, `"7d"`, `"250us"`, read by
//! `humantime`) under a key without a unit suffix. The code computes in integers of one unit,
//! so each field keeps that unit in its Rust name and reads the string through one of the
//! `with` modules here: [`millis`], [`micros`], [`nanos`] or [`secs`]. A string that is not a
//! whole number of the field's unit is refused rather than rounded.
//!
//! The old integer keys (`period_ms = 20000`) are refused by the config loaders with the key
//! and value that replace them: [`replacement_of_unit_key`].

use serde::Deserializer;
use serde::de::Error;
use std::time::Duration;

/// Reads a human duration into an integer count of `unit` (`unit_name` for messages).
fn deserialize_in<'de, D, T>(d: D, unit: Duration, unit_name: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u128>,
{
    let value: Duration = humantime_serde::deserialize(d)?;
    let (n, unit) = (value.as_nanos(), unit.as_nanos());
    if n % unit != 0 {
        return Err(D::Error::custom(format!(
            "{} is not a whole number of {unit_name}",
            humantime::format_duration(value)
        )));
    }
    T::try_from(n / unit).map_err(|_| {
        D::Error::custom(format!(
            "{} is too long for this setting",
            humantime::format_duration(value)
        ))
    })
}

macro_rules! unit_module {
    ($name:ident, $unit:expr, $unit_name:literal) => {
        #[doc = concat!("`#[serde(with = ...)]` for an integer field in ", $unit_name, " read from a human duration string.")]
        pub mod $name {
            /// Reads the string; see the module doc of [`crate::duration`].
            pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
            where
                D: serde::Deserializer<'de>,
                T: TryFrom<u128>,
            {
                super::deserialize_in(d, $unit, $unit_name)
            }
        }
    };
}

unit_module!(secs, std::time::Duration::from_secs(1), "seconds");
unit_module!(millis, std::time::Duration::from_millis(1), "milliseconds");
unit_module!(micros, std::time::Duration::from_micros(1), "microseconds");
unit_module!(nanos, std::time::Duration::from_nanos(1), "nanoseconds");

/// Builds a duration from a count of one unit.
type FromCount = fn(u64) -> Duration;

/// The unit suffixes of the old integer keys and the unit of each.
const UNIT_SUFFIXES: [(&str, FromCount); 5] = [
    ("_ms", Duration::from_millis),
    ("_secs", Duration::from_secs),
    ("_s", Duration::from_secs),
    ("_us", Duration::from_micros),
    ("_ns", Duration::from_nanos),
];

/// For a config key in the old integer form (`period_ms`, `probe_key_rotate_s`, ...): the
/// key that replaced it and, given the old integer value, that value as a duration string.
/// `None` for any other key.
pub fn replacement_of_unit_key(key: &str, value: Option<u64>) -> Option<(String, Option<String>)> {
    UNIT_SUFFIXES.iter().find_map(|(suffix, unit)| {
        let base = key.strip_suffix(suffix).filter(|b| !b.is_empty())?;
        let human = value.map(|v| humantime::format_duration(unit(v)).to_string());
        Some((base.to_string(), human))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Sample {
        #[serde(with = "millis")]
        ms: u64,
        #[serde(with = "nanos")]
        ns: u64,
        #[serde(with = "secs")]
        s: u32,
        #[serde(with = "millis")]
        signed_ms: i64,
    }

    fn parse(ms: &str, ns: &str, s: &str) -> Result<Sample, String> {
        serde_json::from_str::<Sample>(&format!(
            r#"{{"ms": "{ms}", "ns": "{ns}", "s": "{s}", "signed_ms": "{ms}"}}"#
        ))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn human_strings_land_in_the_field_unit() {
        let v = parse("1m 30s", "250us", "7d").unwrap();
        assert_eq!(v.ms, 90_000);
        assert_eq!(v.signed_ms, 90_000);
        assert_eq!(v.ns, 250_000);
        assert_eq!(v.s, 7 * 86_400);
        assert_eq!(parse("20ms", "1ns", "1h").unwrap().ms, 20);
    }

    #[test]
    fn bad_or_lossy_durations_are_refused() {
        let e = parse("1500us", "1ns", "1s").unwrap_err();
        assert!(e.contains("not a whole number of milliseconds"), "{e}");
        let e = parse("1s", "1ns", "1500ms").unwrap_err();
        assert!(e.contains("not a whole number of seconds"), "{e}");
        // An integer (the old form) is not a duration string.
        assert!(
            serde_json::from_str::<Sample>(
                r#"{"ms": 20, "ns": "1ns", "s": "1s", "signed_ms": "1s"}"#
            )
            .is_err()
        );
        assert!(parse("twenty", "1ns", "1s").is_err());
        // 2^32 s does not fit a u32 of seconds.
        let e = parse("1s", "1ns", "4294967296s").unwrap_err();
        assert!(e.contains("too long"), "{e}");
    }

    #[test]
    fn old_keys_name_their_replacement() {
        assert_eq!(
            replacement_of_unit_key("period_ms", Some(20_000)),
            Some(("period".into(), Some("20s".into())))
        );
        assert_eq!(
            replacement_of_unit_key("probe_key_rotate_s", Some(86_400)),
            Some(("probe_key_rotate".into(), Some("1day".into())))
        );
        assert_eq!(
            replacement_of_unit_key("min_rise_us", None),
            Some(("min_rise".into(), None))
        );
        assert_eq!(replacement_of_unit_key("tormesh_pps", Some(1)), None);
        assert_eq!(replacement_of_unit_key("_ms", Some(1)), None);
    }
}
