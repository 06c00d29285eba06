//! The signals colibrid handles (SIGTERM, SIGINT, SIGHUP, SIGCHLD) and
//! what SIGCHLD asks for: reaping children and the sweep for orphans a
//! subreaper inherits. Kept apart from `shutdown.rs`, which only one of
//! these signals starts.

use crate::core::time::Timestamp;
use crate::daemon::diag::{log_debug, log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::platform::{self, DaemonSignal};

/// The least time between two sweeps for orphans (`waitpid(-1)`).
pub(crate) const ORPHAN_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Daemon {
    pub(crate) fn on_signals(&mut self, t: Timestamp) {
        let mut sigs = Vec::new();
        self.signals.drain(&mut sigs);
        for s in sigs {
            if !matches!(s, DaemonSignal::Child(_)) {
                *self.signals_received.entry(s.name()).or_default() += 1;
            }
            match s {
                DaemonSignal::Terminate | DaemonSignal::Interrupt | DaemonSignal::Quit => {
                    self.begin_shutdown(t)
                }
                DaemonSignal::Hangup => self.reload(),
                DaemonSignal::Child(pid) => self.on_child_signal(pid, t),
                DaemonSignal::User1 => self.log_summary(),
                DaemonSignal::User2 | DaemonSignal::Ignored(_) => {
                    log_info!("received SIG{}: ignored", s.name());
                }
            }
        }
    }

    /// SIGCHLD. The child the system names (Linux says which) is reaped at
    /// once, so an agent's exit is reported without delay (often its pidfd
    /// or process event came first and it is reaped already). Everything
    /// else is left to a sweep (`reap_children`) at the start of a wakeup's
    /// flush, at most every `ORPHAN_SWEEP_EVERY`: `waitpid(-1)` makes the kernel look
    /// at every child, milliseconds with 10,000 agents, and SIGCHLD is not
    /// queued, so an orphan killed with its agent (SIGHUP as the terminal
    /// closes) may arrive merged into the agent's signal.
    fn on_child_signal(&mut self, pid: Option<platform::Pid>, t: Timestamp) {
        // A last sweep "after" now means the wall clock stepped back: it
        // does not count (zombies would wait for the clock to catch up).
        let due = self
            .wake
            .last_orphan_sweep
            .filter(|at| *at <= t)
            .map_or(t, |at| at.plus(ORPHAN_SWEEP_EVERY))
            .max(t);
        self.wake.orphan_sweep_at = Some(self.wake.orphan_sweep_at.map_or(due, |d| d.min(due)));
        let Some(pid) = pid.filter(|p| *p > 0) else {
            return;
        };
        match platform::reap(pid) {
            // ECHILD: reaped already, by its own exit event.
            Ok(Some(platform::ExitStatus::Unknown)) => {}
            Ok(Some(status)) => match self.panes.by_pid(pid) {
                Some(key) => self.process_exited(key, status, t),
                None if self.hostop_reaped(pid, status, t) => {}
                None => log_debug!("reaped orphan pid {pid}: {status:?}"),
            },
            // Still running (it stopped or continued).
            Ok(None) => {}
            Err(e) => log_warn!("reaping pid {pid}: {e}"),
        }
    }

    /// The sweep SIGCHLD asked for, once it is due (see `on_child_signal`).
    pub(crate) fn sweep_orphans_if_due(&mut self, t: Timestamp) {
        if self.wake.orphan_sweep_at.is_some_and(|due| due <= t) {
            self.wake.orphan_sweep_at = None;
            self.wake.last_orphan_sweep = Some(t);
            self.reap_children(t);
        }
    }

    /// A subreaper inherits orphans; reap everything, routing agents'
    /// statuses to their panes and host operations' to their runs (their
    /// exit watch may still fire: ignored).
    pub(crate) fn reap_children(&mut self, t: Timestamp) {
        while let Some((pid, status)) = platform::reap_any() {
            let key = self.panes.by_pid(pid);
            match key {
                Some(key) => self.process_exited(key, status, t),
                None if self.hostop_reaped(pid, status, t) => {}
                None => {
                    log_debug!("reaped orphan pid {pid}: {status:?}");
                }
            }
        }
    }

    /// SIGUSR1: one line on the daemon's log saying what it supervises.
    fn log_summary(&self) {
        let running = self.running_pids().len();
        let health = self.store.health();
        log_info!(
            "SIGUSR1: {} pane(s), {running} running, {} connection(s), {} watcher(s), \
             {} byte(s) waiting for the session logs, {} failed write(s)",
            self.panes.len(),
            self.conns.len(),
            self.bus.watchers(),
            health.pending_bytes,
            health.failed_writes
        );
    }
}
