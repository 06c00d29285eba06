//! Attach's state: each pane's ring of recent raw output, its attached
//! connections and the input owner, and which pane each attached
//! connection follows.
//!
//! An owner below the daemon's verbs (`attach.rs` feeds the ring and sends
//! the frames): the pane table holds a [`PaneAttach`] per agent, so this
//! must not reach back to the loop.

use std::collections::{BTreeMap, VecDeque};

use crate::daemon::source::ConnId;
use crate::daemon::source::PaneKey;

/// Recent output kept per pane for a new attacher: a few screens of a
/// terminal. Small because every pane keeps one (10,000 panes: 160 MiB at
/// most), and it only grows as far as the pane has written.
pub const RING_BYTES: usize = 16 * 1024;
/// Unsent bytes after which an attacher has fallen behind and is dropped.
pub const ATTACH_QUEUE_LIMIT: usize = 1 << 20;

/// A pane's attach state: its ring, its attachers, the input owner.
#[derive(Debug, Default)]
pub struct PaneAttach {
    ring: VecDeque<u8>,
    pub clients: Vec<ConnId>,
    pub owner: Option<ConnId>,
}

impl PaneAttach {
    /// Keeps the last [`RING_BYTES`] of the stream.
    pub fn record(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(RING_BYTES)..];
        let over = (self.ring.len() + chunk.len()).saturating_sub(RING_BYTES);
        self.ring.drain(..over);
        self.ring.extend(chunk);
    }

    pub fn recent(&self) -> Vec<u8> {
        self.ring.iter().copied().collect()
    }

    pub fn detach(&mut self, id: ConnId) {
        self.clients.retain(|c| *c != id);
        if self.owner == Some(id) {
            self.owner = None;
        }
    }
}

/// Which pane each attached connection follows (to detach it on close).
#[derive(Debug, Default)]
pub struct Attached {
    by_conn: BTreeMap<usize, PaneKey>,
}

impl Attached {
    pub fn pane_of(&self, id: ConnId) -> Option<PaneKey> {
        self.by_conn.get(&id.0).copied()
    }

    pub fn insert(&mut self, id: ConnId, key: PaneKey) {
        self.by_conn.insert(id.0, key);
    }

    pub(crate) fn remove(&mut self, id: ConnId) -> Option<PaneKey> {
        self.by_conn.remove(&id.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_bytes() {
        let mut a = PaneAttach::default();
        a.record(b"hello ");
        a.record(b"world");
        assert_eq!(a.recent(), b"hello world");
        let big = vec![b'x'; RING_BYTES + 10];
        a.record(&big);
        assert_eq!(a.recent().len(), RING_BYTES);
        a.record(b"tail");
        let recent = a.recent();
        assert_eq!(recent.len(), RING_BYTES);
        assert!(recent.ends_with(b"xtail"));
    }

    #[test]
    fn detaching_the_owner_frees_the_input() {
        let mut a = PaneAttach {
            clients: vec![ConnId(1), ConnId(2)],
            owner: Some(ConnId(1)),
            ..Default::default()
        };
        a.detach(ConnId(2));
        assert_eq!(a.owner, Some(ConnId(1)));
        a.detach(ConnId(1));
        assert_eq!(a.owner, None);
        assert!(a.clients.is_empty());
    }
}
