//! Wall-clock helpers: epoch milliseconds and the two date formats Lambda events use.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2019-11-24T23:08:25.651Z` (destination records).
pub fn rfc3339_ms(ms: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms / 1000);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
        ms % 1000
    )
}

/// `12/Mar/2020:19:03:58 +0000` (`requestContext.time` of function URL events).
pub fn clf(ms: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = civil(ms / 1000);
    let month = MONTHS[(mo as usize).saturating_sub(1) % 12];
    format!("{d:02}/{month}/{y:04}:{h:02}:{mi:02}:{s:02} +0000")
}

/// `2024/05/01` (log stream names).
pub fn ymd_slashes(ms: u64) -> String {
    let (y, mo, d, ..) = civil(ms / 1000);
    format!("{y:04}/{mo:02}/{d:02}")
}

/// Splits epoch seconds into (year, month, day, hour, minute, second), UTC.
fn civil(secs: u64) -> (i64, u32, u32, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        // 2020-03-12T19:03:58.123Z
        let ms = 1_584_039_838_123;
        assert_eq!(rfc3339_ms(ms), "2020-03-12T19:03:58.123Z");
        assert_eq!(clf(ms), "12/Mar/2020:19:03:58 +0000");
        assert_eq!(ymd_slashes(ms), "2020/03/12");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
