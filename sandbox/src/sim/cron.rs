//! Standard 5-field cron schedules (`*/5 * * * *`, `0 3 * * MON-FRI`, `@daily`) as the CronJob
//! controller reads them (robfig/cron's standard parser): ranges, steps, lists, month and day
//! names, and the rule that day-of-month and day-of-week are OR-ed when both are restricted.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A parsed schedule: the allowed values of each field as bit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// Whether day-of-month or day-of-week was `*`/`?`: then both must match, else either.
    any_day_wildcard: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The bits of one field and whether it was a bare wildcard.
fn field(
    text: &str,
    min: u32,
    max: u32,
    names: &[&str],
    names_start: u32,
) -> Result<(u64, bool), String> {
    let value = |token: &str| -> Result<u32, String> {
        let upper = token.to_ascii_uppercase();
        if let Some(index) = names.iter().position(|n| *n == upper) {
            return Ok(names_start + u32::try_from(index).unwrap_or(0));
        }
        token
            .parse::<u32>()
            .map_err(|_| format!("invalid value {token:?}"))
    };
    let mut bits = 0u64;
    let mut wildcard = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| format!("invalid step {step:?}"))?;
                if step == 0 {
                    return Err(format!("step of range should be a positive number: {part}"));
                }
                (range, Some(step))
            }
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            wildcard = wildcard || step.is_none_or(|s| s == 1);
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let start = value(range)?;
            (start, if step.is_some() { max } else { start })
        };
        if start < min || end > max || start > end {
            return Err(format!("value out of range ({min}-{max}): {part}"));
        }
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, wildcard))
}

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields.as_slice() else {
            return Err(format!(
                "expected exactly 5 fields, found {}: {text:?}",
                fields.len()
            ));
        };
        let (minutes, _) = field(minute, 0, 59, &[], 0)?;
        let (hours, _) = field(hour, 0, 23, &[], 0)?;
        let (days_of_month, dom_wild) = field(dom, 1, 31, &[], 0)?;
        let (months, _) = field(month, 1, 12, &MONTHS, 1)?;
        let (days_of_week, dow_wild) = field(dow, 0, 6, &DAYS, 0)?;
        let narrow = |bits: u64| {
            bits.try_into()
                .map_err(|_| format!("invalid schedule {text:?}"))
        };
        Ok(Schedule {
            minutes,
            hours: narrow(hours)?,
            days_of_month: narrow(days_of_month)?,
            months: u16::try_from(months).map_err(|_| format!("invalid schedule {text:?}"))?,
            days_of_week: u8::try_from(days_of_week)
                .map_err(|_| format!("invalid schedule {text:?}"))?,
            any_day_wildcard: dom_wild || dow_wild,
        })
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.days_of_month & (1 << date.day()) != 0;
        let dow = self.days_of_week & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        if self.any_day_wildcard {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first scheduled moment strictly after `after`, in `zone`; `None` if there is none
    /// within five years (a schedule like `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let local = after.to_zoned(zone.clone()).datetime();
        let mut t = local
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let limit = local.checked_add(5.years()).ok()?;
        while t <= limit {
            if self.months & (1 << t.month()) == 0 {
                let first = t.date().first_of_month().checked_add(1.month()).ok()?;
                t = DateTime::from_parts(first, Time::midnight());
                continue;
            }
            if !self.day_matches(t.date()) {
                t = DateTime::from_parts(t.date().tomorrow().ok()?, Time::midnight());
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                t = t
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t = t.checked_add(1.minute()).ok()?;
                continue;
            }
            return zone.to_ambiguous_timestamp(t).compatible().ok();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("valid time")
    }

    #[test]
    fn next_runs() {
        let cases = [
            ("* * * * *", "2024-01-01T00:00:30Z", "2024-01-01T00:01:00Z"),
            (
                "*/5 * * * *",
                "2024-01-01T00:01:00Z",
                "2024-01-01T00:05:00Z",
            ),
            (
                "*/5 * * * *",
                "2024-01-01T00:05:00Z",
                "2024-01-01T00:10:00Z",
            ),
            ("0 3 * * *", "2024-01-01T04:00:00Z", "2024-01-02T03:00:00Z"),
            ("30 2 1 * *", "2024-01-15T00:00:00Z", "2024-02-01T02:30:00Z"),
            (
                "0 9 * * MON-FRI",
                "2024-01-06T10:00:00Z",
                "2024-01-08T09:00:00Z",
            ),
            ("0 0 13 * 5", "2024-01-01T00:00:00Z", "2024-01-05T00:00:00Z"),
            (
                "0 0 1 JAN *",
                "2024-06-01T00:00:00Z",
                "2025-01-01T00:00:00Z",
            ),
            (
                "15,45 */6 * * *",
                "2024-01-01T06:20:00Z",
                "2024-01-01T06:45:00Z",
            ),
            (
                "5/20 * * * *",
                "2024-01-01T00:26:00Z",
                "2024-01-01T00:45:00Z",
            ),
            ("@hourly", "2024-01-01T00:00:00Z", "2024-01-01T01:00:00Z"),
            ("@daily", "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"),
            ("0 0 29 2 *", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z"),
        ];
        for (schedule, after, expected) in cases {
            let parsed = Schedule::parse(schedule).unwrap_or_else(|e| panic!("{schedule}: {e}"));
            assert_eq!(
                parsed.next_after(at(after), &TimeZone::UTC),
                Some(at(expected)),
                "{schedule} after {after}"
            );
        }
        let never = Schedule::parse("0 0 30 2 *").expect("parses");
        assert_eq!(
            never.next_after(at("2024-01-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
    }

    #[test]
    fn invalid_schedules_are_refused() {
        for schedule in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "a * * * *",
            "5-1 * * * *",
        ] {
            assert!(Schedule::parse(schedule).is_err(), "{schedule:?}");
        }
    }

    #[test]
    fn time_zones_move_the_schedule() {
        let schedule = Schedule::parse("0 9 * * *").expect("parses");
        let zone = TimeZone::fixed(jiff::tz::offset(2));
        assert_eq!(
            schedule.next_after(at("2024-01-01T00:00:00Z"), &zone),
            Some(at("2024-01-01T07:00:00Z"))
        );
    }
}
