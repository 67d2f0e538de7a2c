//! Wall-clock helpers. Stored times are microseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// RFC 3339 text of a microsecond timestamp, for dumps.
pub fn rfc3339(us: i64) -> String {
    jiff::Timestamp::from_microsecond(us).map_or_else(|_| us.to_string(), |t| t.to_string())
}
