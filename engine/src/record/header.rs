//! The trace's header line: the format version first, then where, when and how the
//! recording was made.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::format::trace::TRACE_VERSION;
use crate::record::config::RecordConfig;
use crate::record::line::KeySource;

#[derive(serde::Serialize)]
struct Header<'a> {
    hairline_trace: u64,
    source: &'static str,
    created: String,
    recorder: String,
    upstream: &'a str,
    sampling: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    labels: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    normalize_ids: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a str>,
}

/// The trace's first line; the format version comes first so a reader sees it at once.
pub(super) fn header_line(config: &RecordConfig) -> String {
    let header = Header {
        hairline_trace: TRACE_VERSION,
        source: "record",
        created: iso8601_utc(SystemTime::now()),
        recorder: format!("hairline-engine {}", env!("CARGO_PKG_VERSION")),
        upstream: &config.upstream_url,
        sampling: config.spec.describe(),
        seed: config.seed,
        labels: &config.labels,
        normalize_ids: config.normalize_ids,
        key: match &config.key {
            KeySource::Header(h) => Some(json!({ "header": h })),
            KeySource::Cookie(c) => Some(json!({ "cookie": c })),
            KeySource::None => None,
        },
        service: config.service.as_deref(),
    };
    let mut line = serde_json::to_string(&header).unwrap_or_default();
    line.push('\n');
    line
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a time (UTC), from the day count since 1970 by the proleptic
/// Gregorian calendar's 400-year cycle.
fn iso8601_utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Shift the epoch to 0000-03-01 so that leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_iso8601_utc() {
        let at = |s: u64| iso8601_utc(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
