//! Bounds on agents' `activity` posts: each becomes a watch event, kept in
//! the journal every watcher resumes from, so one agent posting without
//! pause would push everyone else's history out of it. A pane may post a
//! burst, then a steady rate; its texts are cut to a bounded length. All
//! panes together share a quarter of the journal's bytes, refilled over
//! [`SHARE_REFILL_MS`]: 40 panes each posting their burst of long texts
//! rolled the 8 MiB journal in 0.4 s, and a watcher that resumed found a
//! gap where the state changes had been.

use std::collections::HashMap;

use crate::core::time::Timestamp;

/// Posts a pane may make at once.
pub const ACTIVITY_BURST: u32 = 30;
/// Then one post every this many milliseconds (30 a minute).
pub const ACTIVITY_EVERY_MS: u64 = 2_000;
/// The longest `message` or `detail` kept, in bytes (cut at a character).
pub const ACTIVITY_TEXT_MAX: usize = 4096;

/// The part of the journal's bytes every pane's posts share.
pub const JOURNAL_SHARE_DIVISOR: u64 = 4;
/// The shared part refills over this long (10 minutes).
pub const SHARE_REFILL_MS: u64 = 600_000;
/// What a post costs the share besides its texts: the event's fields and
/// the journal line around them.
pub const POST_OVERHEAD: u64 = 256;

/// A token bucket per pane, and one of bytes all panes share.
#[derive(Debug, Default)]
pub struct ActivityLimiter {
    /// Tokens in thousandths, and when they were last counted.
    buckets: HashMap<String, (u64, Timestamp)>,
    /// The shared bytes left, and when they were last counted; `None`
    /// until the first post (full then).
    shared: Option<(u64, Timestamp)>,
}

impl ActivityLimiter {
    /// Takes one post of `bytes` for `pane` at `now`, from a journal of
    /// `journal_bytes`; `Err(ms)` says how long until it would be allowed.
    pub fn take(
        &mut self,
        pane: &str,
        bytes: u64,
        journal_bytes: u64,
        now: Timestamp,
    ) -> Result<(), u64> {
        const FULL: u64 = ACTIVITY_BURST as u64 * 1000;
        let (tokens, at) = self.buckets.entry(pane.to_string()).or_insert((FULL, now));
        let earned = now.as_millis().saturating_sub(at.as_millis()) * 1000 / ACTIVITY_EVERY_MS;
        *tokens = (*tokens + earned).min(FULL);
        *at = now;
        if *tokens < 1000 {
            return Err((1000 - *tokens) * ACTIVITY_EVERY_MS / 1000);
        }
        let share = (journal_bytes / JOURNAL_SHARE_DIVISOR).max(1);
        let cost = bytes.saturating_add(POST_OVERHEAD).min(share);
        let (left, counted) = self.shared.get_or_insert((share, now));
        let refilled =
            now.as_millis().saturating_sub(counted.as_millis()) * share / SHARE_REFILL_MS;
        *left = left.saturating_add(refilled).min(share);
        *counted = now;
        if *left < cost {
            return Err((cost - *left).saturating_mul(SHARE_REFILL_MS) / share);
        }
        *left -= cost;
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

    /// A journal whose share no test here reaches.
    const BIG: u64 = 1 << 40;

    #[test]
    fn all_panes_together_take_at_most_their_share_of_the_journal() {
        let journal = 8 << 20;
        let share = journal / JOURNAL_SHARE_DIVISOR;
        let post = 8 << 10;
        let mut l = ActivityLimiter::default();
        let mut taken = 0;
        'panes: for pane in 0..40 {
            for _ in 0..ACTIVITY_BURST {
                match l.take(&format!("p{pane}"), post, journal, at(0)) {
                    Ok(()) => taken += post + POST_OVERHEAD,
                    Err(wait) => {
                        assert!(wait > 0);
                        break 'panes;
                    }
                }
            }
        }
        assert!(taken <= share, "{taken} of a {share} share");
        assert!(taken > share - 2 * (post + POST_OVERHEAD), "{taken}");
        // It refills over ten minutes: half of it in five.
        let later = at(SHARE_REFILL_MS / 2);
        let refilled = (0..1000)
            .filter(|i| l.take(&format!("q{i}"), post, journal, later).is_ok())
            .count() as u64;
        let half = share / 2 / (post + POST_OVERHEAD);
        assert!(
            refilled.abs_diff(half) <= 1,
            "{refilled} posts, about {half} expected"
        );
    }

    #[test]
    fn a_pane_posts_a_burst_then_one_every_two_seconds() {
        let mut l = ActivityLimiter::default();
        for _ in 0..ACTIVITY_BURST {
            assert_eq!(l.take("p1", 0, BIG, at(0)), Ok(()));
        }
        assert_eq!(l.take("p1", 0, BIG, at(0)), Err(2_000));
        assert_eq!(l.take("p1", 0, BIG, at(1_500)), Err(500));
        assert_eq!(l.take("p1", 0, BIG, at(2_000)), Ok(()));
        assert!(l.take("p1", 0, BIG, at(2_000)).is_err());
        // Another pane has its own bucket; a forgotten one starts full.
        assert_eq!(l.take("p2", 0, BIG, at(2_000)), Ok(()));
        l.forget("p1");
        assert_eq!(l.take("p1", 0, BIG, at(2_000)), Ok(()));
        // A long quiet fills the bucket, no further.
        let mut l = ActivityLimiter::default();
        assert_eq!(l.take("p1", 0, BIG, at(0)), Ok(()));
        let posted = (0..100)
            .filter(|_| l.take("p1", 0, BIG, at(3_600_000)).is_ok())
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
