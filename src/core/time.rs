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

    pub fn to_system(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// RFC 3339 in UTC with exactly three fractional digits, e.g.
    /// `2026-05-27T12:00:00.123Z`, as `clawdie.glasspane.snapshot.v1` requires.
    pub fn to_rfc3339(self) -> String {
        // humantime cannot print past year 9999 (and `to_string` would
        // panic on its error): a far-future time from a config value or a
        // hand-edited index prints as the last representable instant.
        let t = Timestamp(self.0.min(Self::MAX_RFC3339.0));
        humantime::format_rfc3339_millis(t.to_system()).to_string()
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

    #[test]
    fn since_saturates() {
        let a = Timestamp::from_millis(10);
        let b = Timestamp::from_millis(25);
        assert_eq!(b.since(a), Duration::from_millis(15));
        assert_eq!(a.since(b), Duration::ZERO);
    }
}
