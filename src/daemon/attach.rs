//! Attach: a pane's raw terminal, shared with clients.
//!
//! Each pane keeps a bounded ring of the last bytes its PTY produced, fed
//! right after the read and before framing, so an attacher first sees what
//! the screen was showing. Attached connections get every later chunk as
//! an `AttachFrame` line. One attacher at a time owns the input (and the
//! window size); the others read only. Like a watcher, an attacher that
//! does not read is dropped with a last line once its queue passes
//! [`ATTACH_QUEUE_LIMIT`]: the agent never waits for it.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::AsFd;
use std::rc::Rc;

use crate::core::time::Timestamp;
use crate::daemon::event_loop::Daemon;
use crate::daemon::panes::PaneKey;
use crate::daemon::source::ConnId;
use crate::platform;
use crate::protocol::attach::AttachFrame;

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

    fn remove(&mut self, id: ConnId) -> Option<PaneKey> {
        self.by_conn.remove(&id.0)
    }
}

impl Daemon {
    /// Records `read_buf[..n]` in the pane's ring and sends it to its
    /// attachers; called right after the PTY read, before framing.
    pub(crate) fn attach_output(&mut self, key: PaneKey, n: usize, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let chunk = &self.read_buf[..n];
        agent.attach.record(chunk);
        if agent.attach.clients.is_empty() {
            return;
        }
        let line_mode = agent.line_mode();
        let frame: Rc<[u8]> = Rc::from(AttachFrame::output(chunk, line_mode).line());
        self.attach_send(key, &frame, t);
    }

    /// The agent's process ended: tell the attachers (they stay attached).
    pub(crate) fn attach_exited(
        &mut self,
        key: PaneKey,
        code: Option<i32>,
        signal: Option<i32>,
        t: Timestamp,
    ) {
        let has_clients = self
            .panes
            .agent(key)
            .is_some_and(|a| !a.attach.clients.is_empty());
        if has_clients {
            let frame: Rc<[u8]> = Rc::from(AttachFrame::Exited { code, signal }.line());
            self.attach_send(key, &frame, t);
        }
    }

    fn attach_send(&mut self, key: PaneKey, frame: &Rc<[u8]>, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let mut dropped = Vec::new();
        for &id in &agent.attach.clients {
            let Some(conn) = self.conns.get_mut(id.0) else {
                dropped.push(id);
                continue;
            };
            if conn.closing {
                continue;
            }
            if conn.queued_bytes() + frame.len() > ATTACH_QUEUE_LIMIT {
                let last = AttachFrame::Detached {
                    reason: format!(
                        "fell more than {ATTACH_QUEUE_LIMIT} bytes behind; dropped (attach again)"
                    ),
                };
                conn.drop_backlog_and_close(Rc::from(last.line()), t);
                dropped.push(id);
            } else {
                conn.enqueue(frame.clone());
            }
            self.dirty_conns.insert(id.0);
        }
        for id in dropped {
            agent.attach.detach(id);
            self.attached.remove(id);
        }
    }

    /// A connection closed (or was dropped): it no longer follows a pane
    /// and gives up the input.
    pub(crate) fn detach_conn(&mut self, id: ConnId) {
        let Some(key) = self.attached.remove(id) else {
            return;
        };
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.attach.detach(id);
        }
    }

    /// Passes a window size to the pane's PTY (the kernel signals the
    /// agent's foreground group with SIGWINCH).
    pub(crate) fn attach_window(
        &mut self,
        key: PaneKey,
        cols: u16,
        rows: u16,
    ) -> std::io::Result<()> {
        let Some(proc_) = self.panes.agent(key).and_then(|a| a.proc.as_ref()) else {
            return Ok(());
        };
        platform::set_window_size(proc_.master.as_fd(), cols, rows)
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
