//! Durations as people write them in the config and on the command line: `500ms`, `60s`, `5m`,
//! `1h`, or a sum such as `1m30s`.
//!
//! Written here rather than read by kube's `kube::core::Duration` (which `comb sandbox`'s
//! `--pod-ready-delay` uses): that one reads Go's syntax, so it takes an empty text for zero
//! and accepts signs, fractions and bare `0`, which the configuration refuses with a message
//! saying which part is wrong; and it multiplies in floating point, which panics on a number
//! too large for a duration (`99999999999999999999s`), where a configuration file must get an
//! error. Guarding it against all that took as many lines as this parser.

use std::time::Duration;

use crate::error::Error;

/// Parses `text` as a sum of `<digits><unit>` parts, unit one of `ms`, `s`, `m`, `h`.
/// The error says what is wrong, for the caller to prefix with the key.
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    let trimmed = text.trim();
    let problem = |why: &str| {
        Error::Value(format!(
            "'{text}' is not a duration ({why}); write e.g. 500ms, 60s, 5m, 1h or 1m30s"
        ))
    };
    if trimmed.is_empty() {
        return Err(problem("it is empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(problem("a number must come before each unit"));
        }
        let (number, after) = rest.split_at(digits);
        let number: u64 = number
            .parse()
            .map_err(|_| problem("the number is too large"))?;
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(unit_len);
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "" => return Err(problem("a unit is missing")),
            other => return Err(problem(&format!("unknown unit '{other}'"))),
        };
        total = total
            .checked_add(part)
            .ok_or_else(|| problem("it is too long"))?;
        rest = after;
    }
    Ok(total)
}

/// Parses a duration that must be longer than zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, Error> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        Err(Error::Value(format!(
            "'{text}' is zero; it must be longer than that"
        )))
    } else {
        Ok(duration)
    }
}

/// A clap value parser for positive durations (`--settle 10s`).
pub fn duration_arg(text: &str) -> Result<Duration, Error> {
    parse_positive_duration(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("60s", Duration::from_secs(60)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("1m30s", Duration::from_secs(90)),
            ("1s500ms", Duration::from_millis(1500)),
            (" 10s ", Duration::from_secs(10)),
            ("0s", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text).ok(), Some(expected), "{text}");
        }
    }

    #[test]
    fn refuses() {
        let hint = "write e.g. 500ms, 60s, 5m, 1h or 1m30s";
        let cases = [
            ("", "'' is not a duration (it is empty)"),
            ("60", "'60' is not a duration (a unit is missing)"),
            (
                "s",
                "'s' is not a duration (a number must come before each unit)",
            ),
            ("10x", "'10x' is not a duration (unknown unit 'x')"),
            ("1.5s", "'1.5s' is not a duration (a unit is missing)"),
            (
                "-1s",
                "'-1s' is not a duration (a number must come before each unit)",
            ),
            (
                "99999999999999999999s",
                "'99999999999999999999s' is not a duration (the number is too large)",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(
                parse_duration(text).map_err(|error| error.to_string()),
                Err(format!("{expected}; {hint}")),
                "{text}"
            );
        }
        assert_eq!(
            parse_positive_duration("0ms").map_err(|error| error.to_string()),
            Err("'0ms' is zero; it must be longer than that".to_string())
        );
    }
}
