//! Replies kept by request, so a request sent again (its reply lost on
//! the way back, the requester retrying) is answered with the first
//! reply instead of running twice: an approve, a kill or a restart must
//! happen once.
//!
//! Only requests that change something and carry an `id` are kept, for
//! [`KEEP_FOR`], the last [`KEEP`] of them; a request is the same when its
//! whole body is (same id, same command, same arguments).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use colibri::protocol::Command;

/// How many replies are kept.
pub const KEEP: usize = 1000;
/// How long a reply answers a repeated request: retries come within
/// seconds; an id reused later is a new request.
pub const KEEP_FOR: Duration = Duration::from_secs(120);
/// Replies longer than this are not kept (a mutation's reply is short).
const MAX_REPLY: usize = 64 << 10;

#[derive(Default)]
pub struct Replies {
    order: VecDeque<(u64, Instant)>,
    by_request: HashMap<u64, Vec<u8>>,
}

/// Whether a command changes the host (and must not run twice).
pub fn changes_something(c: &Command) -> bool {
    matches!(
        c,
        Command::Approve(_)
            | Command::Deny(_)
            | Command::Answer(_)
            | Command::PauseAgent(_)
            | Command::ResumeAgent(_)
            | Command::StartAgent(_)
            | Command::StopAgent(_)
            | Command::RestartAgent(_)
            | Command::KillAgent(_)
    )
}

/// The key of a request body.
pub fn key(body: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

impl Replies {
    fn expire(&mut self, now: Instant) {
        while let Some(&(k, at)) = self.order.front() {
            if now.duration_since(at) < KEEP_FOR && self.order.len() <= KEEP {
                break;
            }
            self.order.pop_front();
            self.by_request.remove(&k);
        }
    }

    /// The reply kept for `key`, if any.
    pub fn get(&mut self, key: u64, now: Instant) -> Option<Vec<u8>> {
        self.expire(now);
        self.by_request.get(&key).cloned()
    }

    pub fn keep(&mut self, key: u64, reply: &[u8], now: Instant) {
        if reply.len() > MAX_REPLY || self.by_request.contains_key(&key) {
            return;
        }
        self.by_request.insert(key, reply.to_vec());
        self.order.push_back((key, now));
        self.expire(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_answers_the_same_request_for_a_while_and_at_most_keep_of_them() {
        let mut r = Replies::default();
        let t = Instant::now();
        let k = key(br#"{"cmd":"kill-agent","agent_id":"a","id":"k1"}"#);
        assert_eq!(r.get(k, t), None);
        r.keep(k, b"first", t);
        r.keep(k, b"second", t);
        assert_eq!(
            r.get(k, t + Duration::from_secs(5)),
            Some(b"first".to_vec())
        );
        assert_ne!(k, key(br#"{"cmd":"kill-agent","agent_id":"b","id":"k1"}"#));
        assert_eq!(r.get(k, t + KEEP_FOR), None);
        for n in 0..(KEEP as u64 + 10) {
            r.keep(n, b"x", t);
        }
        assert_eq!(r.order.len(), KEEP);
        assert_eq!(r.get(0, t), None);
        assert_eq!(r.get(KEEP as u64 + 9, t), Some(b"x".to_vec()));
        r.keep(99, &vec![0; MAX_REPLY + 1], t);
        assert_ne!(r.get(99, t), Some(vec![0; MAX_REPLY + 1]));
    }
}
