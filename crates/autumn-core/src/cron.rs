//! [`Cron`]: a five-field cron expression (minute, hour, day of month,
//! month, day of week), read in UTC, and the ticks it names.

use std::fmt;

/// A cron expression: `minute hour day-of-month month day-of-week`, each a
/// `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a list of
/// those (`1,15,30-35`); days of the week 0-7 (0 and 7 are Sunday) or
/// `sun`-`sat`, months 1-12 or `jan`-`dec`. `@hourly`, `@daily`
/// (`@midnight`), `@weekly`, `@monthly` and `@yearly` (`@annually`) stand
/// for their usual expressions. Times are UTC.
///
/// As in Vixie cron, when both the day of the month and the day of the
/// week are restricted, a day matching either is a day of the schedule.
///
/// ```
/// use autumn_core::jobs::Cron;
///
/// let nightly: Cron = "30 3 * * *".parse().unwrap();
/// // 2026-12-07 12:00 UTC -> 2026-12-08 03:30 UTC.
/// assert_eq!(nightly.next_after(1_796_644_800_000), Some(1_796_700_600_000));
/// assert!("61 * * * *".parse::<Cron>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// The day of the month and of the week are both restricted: either
    /// matches.
    either_day: bool,
}

/// Why a cron expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression {expression:?}: {reason}")]
#[non_exhaustive]
pub struct CronError {
    /// The expression as given.
    pub expression: String,
    /// What is wrong with it.
    pub reason: String,
}

const MINUTE: u64 = 60_000;
const DAY: u64 = 24 * 60 * MINUTE;

impl std::str::FromStr for Cron {
    type Err = CronError;

    fn from_str(text: &str) -> Result<Self, CronError> {
        let refuse = |reason: String| CronError {
            expression: text.to_owned(),
            reason,
        };
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(refuse(format!(
                "{} fields; a cron expression has five: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        };
        let minutes = field(minute, 0, 59, &[]).map_err(|e| refuse(format!("minute: {e}")))?;
        let hours = field(hour, 0, 23, &[]).map_err(|e| refuse(format!("hour: {e}")))?;
        let days = field(day, 1, 31, &[]).map_err(|e| refuse(format!("day of month: {e}")))?;
        let months = field(month, 1, 12, &MONTHS).map_err(|e| refuse(format!("month: {e}")))?;
        let mut weekdays =
            field(weekday, 0, 7, &WEEKDAYS).map_err(|e| refuse(format!("day of week: {e}")))?;
        // 7 is Sunday too.
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1;
        }
        Ok(Self {
            text: text.trim().to_owned(),
            minutes,
            hours: u32::try_from(hours).unwrap_or(u32::MAX),
            days: u32::try_from(days).unwrap_or(u32::MAX),
            months: u16::try_from(months).unwrap_or(u16::MAX),
            weekdays: u8::try_from(weekdays & 0x7f).unwrap_or(u8::MAX),
            either_day: !day.starts_with('*') && !weekday.starts_with('*'),
        })
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field as a bit set of the values it allows (`names` are the values
/// from `min` on, spelled).
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let value = |part: &str| -> Result<u32, String> {
        if let Some(index) = names
            .iter()
            .position(|name| part.eq_ignore_ascii_case(name))
        {
            return Ok(min + u32::try_from(index).unwrap_or(0));
        }
        let number: u32 = part
            .parse()
            .map_err(|_| format!("{part:?} is not a number"))?;
        if number < min || number > max {
            return Err(format!("{number} is outside {min}-{max}"));
        }
        Ok(number)
    };
    let mut set = 0_u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("step {step:?} is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".to_owned());
                }
                (range, step)
            }
            None => (item, 1),
        };
        let (from, to) = match range {
            "*" => (min, max),
            _ => match range.split_once('-') {
                Some((from, to)) => (value(from)?, value(to)?),
                // `5/15` is 5, 20, 35, 50: from 5 to the end.
                None if step > 1 => (value(range)?, max),
                None => {
                    let single = value(range)?;
                    (single, single)
                }
            },
        };
        if from > to {
            return Err(format!("the range {from}-{to} runs backwards"));
        }
        let mut at = from;
        while at <= to {
            set |= 1 << at;
            at += step;
        }
    }
    Ok(set)
}

impl Cron {
    /// The first tick strictly after `millis` (milliseconds since the Unix
    /// epoch), within about four years; `None` for an expression that
    /// names no real day (`0 0 31 2 *`).
    pub fn next_after(&self, millis: u64) -> Option<u64> {
        let mut at = (millis / MINUTE + 1) * MINUTE;
        let limit = millis.saturating_add(4 * 366 * DAY);
        while at <= limit {
            if !self.day_matches(at) {
                at = (at / DAY + 1) * DAY;
                continue;
            }
            if self.time_matches(at) {
                return Some(at);
            }
            at += MINUTE;
        }
        None
    }

    /// The last tick at or before `millis`, no earlier than `since`.
    pub fn latest_at_or_before(&self, millis: u64, since: u64) -> Option<u64> {
        let mut at = millis / MINUTE * MINUTE;
        while at >= since {
            if !self.day_matches(at) {
                // The last minute of the day before.
                let day_start = at / DAY * DAY;
                if day_start < MINUTE {
                    return None;
                }
                at = day_start - MINUTE;
                continue;
            }
            if self.time_matches(at) {
                return Some(at);
            }
            at = at.checked_sub(MINUTE)?;
        }
        None
    }

    fn time_matches(&self, at: u64) -> bool {
        let minute = (at / MINUTE) % 60;
        let hour = (at / (60 * MINUTE)) % 24;
        self.minutes & (1 << minute) != 0 && self.hours & (1 << hour) != 0
    }

    fn day_matches(&self, at: u64) -> bool {
        let days = at / DAY;
        let (_, month, day) = civil(days);
        if self.months & (1 << month) == 0 {
            return false;
        }
        // 1970-01-01 was a Thursday (4).
        let weekday = (days + 4) % 7;
        let by_date = self.days & (1 << day) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        if self.either_day {
            by_date || by_weekday
        } else {
            by_date && by_weekday
        }
    }
}

/// The (year, month 1-12, day 1-31) of `days` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cron").field(&self.text).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of a UTC date and time.
    fn at(year: u64, month: u64, day: u64, hour: u64, minute: u64) -> u64 {
        // Days from civil (the inverse of `civil`).
        let (y, m) = if month <= 2 {
            (year - 1, month + 9)
        } else {
            (year, month - 3)
        };
        let era = y / 400;
        let yoe = y - era * 400;
        let doy = (153 * m + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * DAY + hour * 60 * MINUTE + minute * MINUTE
    }

    fn cron(text: &str) -> Cron {
        text.parse().expect("a valid expression")
    }

    #[test]
    fn dates_round_trip() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(at(2024, 2, 29, 0, 0) / DAY), (2024, 2, 29));
        assert_eq!(civil(at(2026, 12, 31, 0, 0) / DAY), (2026, 12, 31));
    }

    #[test]
    fn the_next_tick() {
        let now = at(2026, 12, 7, 12, 0);
        assert_eq!(
            cron("30 3 * * *").next_after(now),
            Some(at(2026, 12, 8, 3, 30))
        );
        assert_eq!(
            cron("*/15 * * * *").next_after(now),
            Some(at(2026, 12, 7, 12, 15))
        );
        assert_eq!(
            cron("@hourly").next_after(now),
            Some(at(2026, 12, 7, 13, 0))
        );
        // 2026-12-07 is a Monday: the next Friday is the 11th.
        assert_eq!(
            cron("0 9 * * fri").next_after(now),
            Some(at(2026, 12, 11, 9, 0))
        );
        assert_eq!(
            cron("0 0 1 jan *").next_after(now),
            Some(at(2027, 1, 1, 0, 0))
        );
        assert_eq!(
            cron("0 0 29 2 *").next_after(now),
            Some(at(2028, 2, 29, 0, 0))
        );
        assert_eq!(cron("0 0 31 2 *").next_after(now), None);
        // Sunday as 7.
        assert_eq!(
            cron("0 0 * * 7").next_after(now),
            Some(at(2026, 12, 13, 0, 0))
        );
    }

    #[test]
    fn a_restricted_day_of_month_and_of_week_match_either() {
        // The 15th, or any Monday: from Tuesday the 8th, the 14th (Monday)
        // comes first.
        let now = at(2026, 12, 8, 0, 0);
        assert_eq!(
            cron("0 0 15 * mon").next_after(now),
            Some(at(2026, 12, 14, 0, 0))
        );
        // With the day of the week a `*`, only the 15th.
        assert_eq!(
            cron("0 0 15 * *").next_after(now),
            Some(at(2026, 12, 15, 0, 0))
        );
    }

    #[test]
    fn the_latest_tick() {
        let now = at(2026, 12, 7, 12, 10);
        let nightly = cron("30 3 * * *");
        assert_eq!(
            nightly.latest_at_or_before(now, 0),
            Some(at(2026, 12, 7, 3, 30))
        );
        assert_eq!(
            nightly.latest_at_or_before(at(2026, 12, 7, 3, 30), 0),
            Some(at(2026, 12, 7, 3, 30)),
            "at the tick itself"
        );
        assert_eq!(
            nightly.latest_at_or_before(now, at(2026, 12, 7, 4, 0)),
            None,
            "none since"
        );
        assert_eq!(
            cron("0 0 1 * *").latest_at_or_before(now, 0),
            Some(at(2026, 12, 1, 0, 0))
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (text, says) in [
            ("* * * *", "4 fields"),
            ("60 * * * *", "minute: 60 is outside 0-59"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day of month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day of week"),
            ("*/0 * * * *", "a step of 0"),
            ("5-1 * * * *", "backwards"),
            ("x * * * *", "is not a number"),
        ] {
            let error = text.parse::<Cron>().expect_err(text).to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
