//! Wall-clock instants as plain values.
//!
//! The core never reads a clock; callers pass a [`Timestamp`]. It is a count
//! of milliseconds since the Unix epoch because that is the resolution the
//! snapshot contract prints (RFC 3339 with milliseconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Converts a `SystemTime`; instants before the epoch clamp to it.
    pub fn from_system(t: SystemTime) -> Self {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis().min(u64::MAX as u128) as u64)
            .unwrap_or(0);
        Timestamp(ms)
    }

    /// RFC 3339 in UTC with exactly three fractional digits, e.g.
    /// `2026-05-27T12:00:00.123Z`, as `clawdie.glasspane.snapshot.v1` requires.
    pub fn to_rfc3339(self) -> String {
        self.rfc3339().as_str().to_string()
    }

    /// The text of [`Timestamp::to_rfc3339`] without allocating: snapshots
    /// print three per pane, and at 10,000 panes formatting them through
    /// `String`s was a tenth of a snapshot's cost.
    ///
    /// RFC 3339 cannot spell a year past 9999: a far-future time from a
    /// config value or a hand-edited index prints as the last instant it can.
    pub fn rfc3339(self) -> Rfc3339 {
        let ms = self.0.min(Self::MAX_RFC3339.0);
        let secs = ms / 1000;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let in_day = secs % 86_400;
        let mut text = *b"0000-00-00T00:00:00.000Z";
        put_digits(&mut text[0..4], year);
        put_digits(&mut text[5..7], month);
        put_digits(&mut text[8..10], day);
        put_digits(&mut text[11..13], in_day / 3600);
        put_digits(&mut text[14..16], in_day / 60 % 60);
        put_digits(&mut text[17..19], in_day % 60);
        put_digits(&mut text[20..23], ms % 1000);
        Rfc3339(text)
    }

    /// 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can spell.
    pub const MAX_RFC3339: Timestamp = Timestamp(253_402_300_799_999);

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_millis().min(u64::MAX as u128) as u64),
        )
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, made by [`Timestamp::rfc3339`].
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Rfc3339([u8; 24]);

impl Rfc3339 {
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever written.
        std::str::from_utf8(&self.0).unwrap_or("1970-01-01T00:00:00.000Z")
    }

    pub fn as_bytes(self) -> [u8; 24] {
        self.0
    }
}

impl std::fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since
/// 1970-01-01, by Howard Hinnant's `civil_from_days`: eras of 400 years
/// (146,097 days) counted from 0000-03-01, so that the leap day ends a year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
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
    (year, month, day)
}

/// Writes `n` as decimal digits filling `out`, zero-padded on the left.
fn put_digits(out: &mut [u8], mut n: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_has_millis_and_z() {
        assert_eq!(
            Timestamp::from_millis(0).to_rfc3339(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_millis(1_779_883_200_123).to_rfc3339(),
            "2026-05-27T12:00:00.123Z"
        );
    }

    #[test]
    fn far_future_clamps_instead_of_panicking() {
        assert_eq!(
            Timestamp::from_millis(u64::MAX).to_rfc3339(),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            Timestamp::from_millis(400_000_000_000_000).to_rfc3339(),
            "9999-12-31T23:59:59.999Z"
        );
    }

    /// humantime's formatter is the reference the fast one replaced.
    fn by_humantime(ms: u64) -> String {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    }

    #[test]
    fn rfc3339_matches_humantime_on_every_leap_edge_and_a_sweep() {
        let mut instants = vec![0, 999, 1000, 86_399_999, 86_400_000];
        // Both sides of every 28 Feb to 1 Mar and 31 Dec to 1 Jan from 1970
        // to 9999 (century years included: 2000 is a leap year, 2100 not).
        for year in 1970..=9999u64 {
            for (month, day) in [(2, 28), (2, 29), (3, 1), (12, 31)] {
                if let Ok(t) = humantime::parse_rfc3339(&format!(
                    "{year:04}-{month:02}-{day:02}T23:59:59.999Z"
                )) {
                    let ms = Timestamp::from_system(t).as_millis();
                    instants.extend([ms, ms + 1]);
                }
            }
        }
        // A sweep with a step prime to every unit (ms, s, min, h, day).
        instants.extend((0..200_000u64).map(|i| i * 1_267_650_600_227));
        for ms in instants {
            let ms = ms.min(Timestamp::MAX_RFC3339.as_millis());
            assert_eq!(Timestamp(ms).rfc3339().as_str(), by_humantime(ms), "{ms}");
        }
    }

    proptest::proptest! {
        #[test]
        fn rfc3339_matches_humantime(ms in 0..=Timestamp::MAX_RFC3339.as_millis()) {
            proptest::prop_assert_eq!(Timestamp(ms).to_rfc3339(), by_humantime(ms));
        }
    }

    #[test]
    fn since_saturates() {
        let a = Timestamp::from_millis(10);
        let b = Timestamp::from_millis(25);
        assert_eq!(b.since(a), Duration::from_millis(15));
        assert_eq!(a.since(b), Duration::ZERO);
    }
}
