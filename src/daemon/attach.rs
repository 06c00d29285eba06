//! Attach: a pane's raw terminal, shared with clients.
//!
//! Each pane keeps a bounded ring of the last bytes its PTY produced, fed
//! right after the read and before framing, so an attacher first sees what
//! the screen was showing. Attached connections get every later chunk as
//! an `AttachFrame` line. One attacher at a time owns the input (and the
//! window size); the others read only. Like a watcher, an attacher that
//! does not read is dropped with a last line once its queue passes
//! [`ATTACH_QUEUE_LIMIT`]: the agent never waits for it.

use std::os::fd::AsFd;
use std::rc::Rc;

use crate::core::time::Timestamp;
pub mod ring;

use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::source::PaneKey;
use crate::platform;
use crate::protocol::attach::AttachFrame;
use ring::ATTACH_QUEUE_LIMIT;

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
