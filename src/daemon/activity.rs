//! Bounds on agents' `activity` posts: each becomes a watch event, kept in
//! the journal every watcher resumes from, so one agent posting without
//! pause would push everyone else's history out of it. A pane may post a
//! burst, then a steady rate; its texts are cut to a bounded length.

use std::collections::HashMap;

use crate::core::time::Timestamp;

/// Posts a pane may make at once.
pub const ACTIVITY_BURST: u32 = 30;
/// Then one post every this many milliseconds (30 a minute).
pub const ACTIVITY_EVERY_MS: u64 = 2_000;
/// The longest `message` or `detail` kept, in bytes (cut at a character).
pub const ACTIVITY_TEXT_MAX: usize = 4096;

/// A token bucket per pane.
#[derive(Debug, Default)]
pub struct ActivityLimiter {
    /// Tokens in thousandths, and when they were last counted.
    buckets: HashMap<String, (u64, Timestamp)>,
}

impl ActivityLimiter {
    /// Takes one post for `pane` at `now`; `Err(ms)` says how long until
    /// the next one is allowed.
    pub fn take(&mut self, pane: &str, now: Timestamp) -> Result<(), u64> {
        const FULL: u64 = ACTIVITY_BURST as u64 * 1000;
        let (tokens, at) = self.buckets.entry(pane.to_string()).or_insert((FULL, now));
        let earned = now.as_millis().saturating_sub(at.as_millis()) * 1000 / ACTIVITY_EVERY_MS;
        *tokens = (*tokens + earned).min(FULL);
        *at = now;
        if *tokens < 1000 {
            return Err((1000 - *tokens) * ACTIVITY_EVERY_MS / 1000);
        }
        *tokens -= 1000;
        Ok(())
    }

    /// The pane left the table.
    pub fn forget(&mut self, pane: &str) {
        self.buckets.remove(pane);
    }
}

/// `text` cut to [`ACTIVITY_TEXT_MAX`] bytes at a character boundary,
/// with an ellipsis when cut.
pub fn bounded(text: Option<String>) -> Option<String> {
    let mut text = text?;
    if text.len() <= ACTIVITY_TEXT_MAX {
        return Some(text);
    }
    let mut end = ACTIVITY_TEXT_MAX - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_779_883_200_000 + ms)
    }

    #[test]
    fn a_pane_posts_a_burst_then_one_every_two_seconds() {
        let mut l = ActivityLimiter::default();
        for _ in 0..ACTIVITY_BURST {
            assert_eq!(l.take("p1", at(0)), Ok(()));
        }
        assert_eq!(l.take("p1", at(0)), Err(2_000));
        assert_eq!(l.take("p1", at(1_500)), Err(500));
        assert_eq!(l.take("p1", at(2_000)), Ok(()));
        assert!(l.take("p1", at(2_000)).is_err());
        // Another pane has its own bucket; a forgotten one starts full.
        assert_eq!(l.take("p2", at(2_000)), Ok(()));
        l.forget("p1");
        assert_eq!(l.take("p1", at(2_000)), Ok(()));
        // A long quiet fills the bucket, no further.
        let mut l = ActivityLimiter::default();
        assert_eq!(l.take("p1", at(0)), Ok(()));
        let posted = (0..100)
            .filter(|_| l.take("p1", at(3_600_000)).is_ok())
            .count();
        assert_eq!(posted, ACTIVITY_BURST as usize);
    }

    #[test]
    fn long_texts_are_cut_at_a_character() {
        assert_eq!(bounded(None), None);
        assert_eq!(bounded(Some("short".into())).as_deref(), Some("short"));
        let long = "é".repeat(ACTIVITY_TEXT_MAX);
        let cut = bounded(Some(long)).unwrap_or_default();
        assert!(cut.len() <= ACTIVITY_TEXT_MAX, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
