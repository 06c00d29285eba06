//! How agents' output flows to the session logs, seen from the loop:
//! handing the buffered records to the writers (`flush_logs`, and at once
//! for an agent's end, `kick_writers`), retrying the PTY reads that log
//! backpressure held (`retry_store_blocked`), and the work put off until
//! the frames have left (`DeferredCloses`, `send_alerts_after_frames`).
//! The store decides what holds a read (`SessionStore::holds_reads`); this
//! module only acts on it.

pub(crate) mod closes;

use crate::core::time::Timestamp;
use crate::daemon::alert::HOLD_FOR;
use crate::daemon::bus;
use crate::daemon::conn::Marks;
use crate::daemon::diag::{log_debug, log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::sched::Pending;
use crate::daemon::source::PaneKey;
use crate::daemon::timers::Deadline;
use crate::platform;

/// How often a pane whose reads the logs hold is asked whether its agent is
/// exiting (`Daemon::held_read_check`): well inside the second FreeBSD's
/// last close of a terminal waits for its output to be read.
pub const HELD_READ_CHECK: std::time::Duration = std::time::Duration::from_millis(300);

impl Daemon {
    /// Sends the alerts raised so far once no frame waits for the writers
    /// (the frames they concern have left), or once the oldest has waited
    /// [`HOLD_FOR`]: a datagram wakes syslogd, which
    /// would otherwise take a CPU from the writers confirming the frames.
    pub(crate) fn send_alerts_after_frames(&mut self, writers_behind: bool, t: Timestamp) {
        // A wall clock stepped back counts as due: the bound must hold.
        let due = self
            .alerter
            .held_due()
            .is_some_and(|due| t >= due || t.plus(HOLD_FOR) < due);
        if !writers_behind || due {
            self.alerter.send_held(t);
        }
    }

    /// Hands the buffered records to the log writer (at most one batch is
    /// out) and takes in what the last batch did.
    pub(crate) fn flush_logs(&mut self, t: Timestamp) {
        let report = self.store.flush(self.settings.store.flush_budget);
        if report.replaced_logs > 0 {
            log_warn!(
                "{} session log(s) were deleted or replaced under colibrid; started anew",
                report.replaced_logs
            );
            bus::log_write_alert(&mut self.alerter, &self.store.health(), t);
        }
        // A failing disk is retried at the next wakeup or heartbeat, not in
        // a tight loop; a log waiting for its retry is not pending, so the
        // other sessions' frames still wait for their own records.
        self.wake.store_pending = report.pending && !report.release_frames;
        // A finished batch lets agents held by the read-ahead go on while
        // the next one is written.
        self.retry_store_blocked();
        match (report.failed, self.wake.store_failing) {
            (Some(kind), false) => {
                // Said once per episode; status shows the running counts.
                log_warn!("session log writes fail ({kind:?}); data stays buffered and is retried");
                bus::log_write_alert(&mut self.alerter, &self.store.health(), t);
                self.wake.store_failing = true;
            }
            (None, true) if report.written > 0 => {
                log_info!("session log writes succeed again");
                self.wake.store_failing = false;
            }
            _ => {}
        }
    }

    /// An agent ended: its exit record and `exited` event go to the log
    /// and journal writers now, while the loop finishes the wakeup (alerts,
    /// records, other events), and the frames queued so far get the marks
    /// that cover them. Later frames of the wakeup get later marks.
    pub(crate) fn kick_writers(&mut self, t: Timestamp) {
        self.flush_logs(t);
        self.bus.sync_journal();
        let mark = Marks {
            log: self.store.log_mark(),
            journal: self.bus.seq(),
        };
        for &id in &self.dirty_conns {
            if let Some(c) = self.conns.get_mut(id) {
                c.stamp(mark);
            }
        }
    }

    /// A pane whose reads the logs hold (`read_pty`) is asked at
    /// [`HELD_READ_CHECK`] intervals whether its agent has begun to exit.
    /// On FreeBSD an exiting process's last close of its terminal waits
    /// only about a second for the master to read what is left, then
    /// discards it (`tty_drain` in `sys/kern/tty.c`), and the exit itself
    /// is reported only after that close: an agent held by a slow disk
    /// would lose its last lines. An exiting agent writes nothing more of
    /// its own, so reading it on is bounded.
    pub(crate) fn held_read_check(&mut self, key: PaneKey, t: Timestamp) {
        if !self.wake.store_blocked.contains(&key) {
            return;
        }
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(pid) = agent.running_pid() else {
            return;
        };
        let exiting = match platform::process_info(pid) {
            Ok(info) => info.is_none_or(|p| p.exiting),
            Err(e) => {
                log_warn!("cannot ask the kernel about pid {pid}: {e}");
                false
            }
        };
        if !exiting {
            self.set_deadline(key, Deadline::HeldRead, t.plus(HELD_READ_CHECK), t);
            return;
        }
        if let Some(p) = agent.proc.as_mut() {
            p.exiting = true;
            p.read_pending = true;
        }
        log_debug!(
            "pane {}: its agent is exiting; reading its PTY past the held logs",
            agent.pane_id
        );
        self.wake.store_blocked.remove(&key);
        self.push_pending(Pending::Pty(key));
    }

    /// Queues the reads of panes whose session log has caught up, starting
    /// with the first pane held since the last time: the read-ahead lets a
    /// few quanta through per batch, and always starting from the lowest
    /// key would leave the same panes out every time.
    pub(crate) fn retry_store_blocked(&mut self) {
        // A full read-ahead holds every running agent until the batch is
        // done: no walk of the held panes for it (an exited one among them
        // waits for that batch too).
        if self.wake.store_blocked.is_empty() || self.store.read_ahead_full() {
            return;
        }
        let first = self.wake.store_blocked_first.take();
        let blocked: Vec<PaneKey> = match first {
            Some(f) => self
                .wake
                .store_blocked
                .range(f..)
                .chain(self.wake.store_blocked.range(..f))
                .copied()
                .collect(),
            None => self.wake.store_blocked.iter().copied().collect(),
        };
        for key in blocked {
            let Some(agent) = self.panes.agent(key) else {
                self.wake.store_blocked.remove(&key);
                continue;
            };
            if !self.store.holds_reads(&agent.session, agent.is_ending()) {
                self.wake.store_blocked.remove(&key);
                self.push_pending(Pending::Pty(key));
            }
        }
    }
}
