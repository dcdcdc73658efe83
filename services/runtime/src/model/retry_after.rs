//! `Retry-After` on a model endpoint's answer (RFC 9110 §10.2.3): a number of seconds or an
//! HTTP-date, read into how long the endpoint asks the caller to wait. What to do with it — wait,
//! or give up because the wait is too long — is the retry policy's (`runloop::retry`).

use std::time::{Duration, SystemTime};

/// How long `value` asks to wait from `now`; a date in the past is no wait, and a value that is
/// neither seconds nor an HTTP-date is ignored.
pub fn parse(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait a response's headers ask for, if any.
pub fn from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    parse(value, SystemTime::now())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seconds_and_http_dates_are_read_and_anything_else_ignored() {
        let now = httpdate::parse_http_date("Wed, 02 Dec 2026 11:00:00 GMT").unwrap();
        let cases = [
            ("3", Some(Duration::from_secs(3))),
            (" 0 ", Some(Duration::ZERO)),
            (
                "Wed, 02 Dec 2026 11:00:07 GMT",
                Some(Duration::from_secs(7)),
            ),
            // A date already past asks for no wait.
            ("Wed, 02 Dec 2026 10:59:00 GMT", Some(Duration::ZERO)),
            ("-1", None),
            ("1.5", None),
            ("soon", None),
            ("", None),
        ];
        for (value, want) in cases {
            assert_eq!(parse(value, now), want, "{value:?}");
        }
    }
}
