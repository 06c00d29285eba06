//! Signals (SIGTERM, SIGINT, SIGHUP, SIGCHLD), the heartbeat, reload and
//! the orderly shutdown: TERM to every agent, KILL after the grace period.

use std::time::{Duration, Instant};

use crate::core::lifecycle::LifeEvent;
use crate::core::time::Timestamp;
use crate::daemon::bus;
use crate::daemon::diag::{log_debug, log_info, log_warn};
use crate::daemon::event_loop::{now, Daemon, DaemonError, RunState, LINGER};
use crate::daemon::panes::Slot;
use crate::daemon::settings::DRAIN_GRACE;
use crate::daemon::source::{ConnId, Source};
use crate::daemon::store::ShutdownOutcome;
use crate::platform::{self, DaemonSignal, KernelTimer};
use crate::protocol::WatchKind;

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
    /// statuses to their panes (their exit watch may still fire: ignored).
    pub(crate) fn reap_children(&mut self, t: Timestamp) {
        while let Some((pid, status)) = platform::reap_any() {
            let key = self.panes.by_pid(pid);
            match key {
                Some(key) => self.process_exited(key, status, t),
                None => {
                    log_debug!("reaped orphan pid {pid}: {status:?}");
                }
            }
        }
    }

    pub(crate) fn reload(&mut self) {
        let outcome = (self.reloader)();
        self.settings.reload.record(&outcome);
        let Ok(crate::daemon::Reload { settings: new, .. }) = outcome else {
            return;
        };
        self.alerter.reconfigure(new.alert.clone());
        if new.daemon.heartbeat != self.settings.daemon.heartbeat {
            let _ = self
                .heartbeat
                .arm_periodic(self.poll.registry(), new.daemon.heartbeat);
        }
        self.settings.daemon.stall_after = new.daemon.stall_after;
        self.settings.daemon.heartbeat = new.daemon.heartbeat;
        self.settings.daemon.shutdown_grace = new.daemon.shutdown_grace;
        self.settings.daemon.retain_finished = new.daemon.retain_finished;
        self.settings.restart_backoff = new.restart_backoff;
        self.settings.max_restarts = new.max_restarts;
        self.settings.providers = new.providers;
        self.settings.alert = new.alert;
        let t = super::now();
        self.reconcile_declared(new.agents, t);
        let resumed = self.governor.reconfigure(new.governance.clone(), t);
        self.settings.governance = new.governance;
        self.carry_out(resumed, t);
    }

    pub(crate) fn on_heartbeat(&mut self, t: Timestamp) {
        self.retire_finished(t);
        let paused: Vec<_> = self
            .panes
            .iter()
            .filter(|(_, s)| s.pane.paused && s.agent.running_pid().is_some())
            .map(|(k, s)| (k, s.agent.pane_id.clone()))
            .collect();
        for (key, _) in &paused {
            self.hold_pause(*key, false, t);
        }
        // What their agents left running (a quiet helper) is stopped again,
        // in one scan for all of them.
        if !paused.is_empty() && !self.is_stopping() {
            let ids: Vec<&str> = paused.iter().map(|(_, id)| id.as_str()).collect();
            self.signal_leftovers(&ids, libc::SIGSTOP);
        }
        let n = self.panes.len();
        self.publish(WatchKind::Heartbeat { panes: n }, t);
        if let Some(session) = self.store.heartbeat(t) {
            log_info!("rotating session {session}");
        }
        // Close lingering connections whose peer never read their last line.
        let lingering: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closing_since.is_some_and(|s| t.since(s) >= LINGER))
            .map(|(i, _)| i)
            .collect();
        for id in lingering {
            self.close_conn(ConnId(id));
        }
        self.close_idle_conns(t);
    }

    pub(crate) fn begin_shutdown(&mut self, t: Timestamp) {
        if matches!(self.run_state, RunState::Stopping { .. }) {
            return;
        }
        log_info!("stopping: no new connections, TERM to every agent");
        self.run_state = RunState::Stopping {
            killed: false,
            hard_deadline: None,
        };
        for l in &mut self.listeners {
            if let Some(mut socket) = l.socket.take() {
                let _ = self.poll.registry().deregister(&mut socket);
            }
        }
        self.stop_all_planned();
        // Orphans first: once the agents die, their own descendants become
        // orphans too and would get the signal twice.
        self.signal_orphans(libc::SIGTERM);
        let mut running = Vec::new();
        for key in self.panes.keys() {
            let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
                continue;
            };
            agent
                .stopped_by
                .get_or_insert_with(|| "daemon shutdown".to_string());
            if let Some(pid) = agent.running_pid() {
                if pane.paused {
                    let _ = platform::signal_tree(pid, libc::SIGCONT);
                }
                running.push(pid);
            }
        }
        let _ = platform::signal_trees(&running, libc::SIGTERM);
        for key in self.panes.keys() {
            self.life_event(key, LifeEvent::Stop, t);
        }
        let token = self.tokens.insert(Source::Shutdown);
        match KernelTimer::new(self.poll.registry(), token) {
            Ok(mut timer) => {
                let grace = self
                    .settings
                    .daemon
                    .shutdown_grace
                    .max(Duration::from_millis(1));
                let _ = timer.arm_oneshot(self.poll.registry(), grace);
                self.shutdown_timer = Some((timer, token, Instant::now() + grace));
            }
            Err(e) => {
                log_warn!("no shutdown timer ({e}); killing agents now");
                self.kill_all();
                self.run_state = RunState::Stopping {
                    killed: true,
                    hard_deadline: Some(t.plus(DRAIN_GRACE)),
                };
            }
        }
    }

    fn running_pids(&self) -> Vec<platform::Pid> {
        self.panes
            .agents()
            .filter_map(|a| a.running_pid())
            .collect()
    }

    /// Descendants re-parented to the daemon after their own parent exited
    /// belong to no agent any more; at shutdown they get the agents' signal.
    fn signal_orphans(&self, sig: i32) {
        let hit = platform::signal_orphans(&self.running_pids(), sig);
        if hit > 0 {
            log_info!("signalled {hit} orphaned descendant(s) of finished agents");
        }
    }

    pub(crate) fn kill_all(&mut self) {
        self.signal_orphans(libc::SIGKILL);
        let _ = platform::signal_trees(&self.running_pids(), libc::SIGKILL);
        for a in self.panes.agents() {
            // Reaped: its pid may be reused; its group id may not.
            if let Some(p) = a.proc.as_ref().filter(|p| p.status.is_some()) {
                let _ = platform::signal_group(p.pid, libc::SIGKILL);
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

    pub(crate) fn shutdown_timer_fired(&mut self, t: Timestamp) {
        let Some((timer, _, due)) = self.shutdown_timer.as_mut() else {
            return;
        };
        if timer.acknowledge() == 0 {
            return;
        }
        // A stale event whose token was reused for this timer (a kevent left
        // behind by a removed pane) reads as "fired" on FreeBSD, where
        // acknowledge cannot see the expiration count: it must not cut the
        // grace period short. Not due yet: re-arm for the time left.
        let left = due.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            let _ = timer.arm_oneshot(self.poll.registry(), left);
            return;
        }
        match self.run_state {
            RunState::Stopping { killed: false, .. } => {
                let left = self.panes.agents().filter(|a| a.proc.is_some()).count();
                log_warn!("grace period over: KILL to {left} agent(s)");
                self.kill_all();
                if let Some((timer, _, due)) = self.shutdown_timer.as_mut() {
                    let _ = timer.arm_oneshot(self.poll.registry(), DRAIN_GRACE);
                    *due = Instant::now() + DRAIN_GRACE;
                }
                self.run_state = RunState::Stopping {
                    killed: true,
                    hard_deadline: Some(t.plus(DRAIN_GRACE)),
                };
            }
            RunState::Stopping { killed: true, .. } => {
                self.run_state = RunState::Stopping {
                    killed: true,
                    hard_deadline: Some(t),
                };
            }
            RunState::Running => {}
        }
    }

    pub(crate) fn ready_to_exit(&self, t: Timestamp) -> bool {
        let RunState::Stopping { hard_deadline, .. } = self.run_state else {
            return false;
        };
        let all_done = self.panes.agents().all(|a| a.proc.is_none());
        all_done || hard_deadline.is_some_and(|d| t >= d)
    }

    pub(crate) fn finish_shutdown(&mut self) -> Result<(), DaemonError> {
        // Never exit 0 having lost acknowledged records (see RELIABILITY.md).
        let outcome = self.store.shutdown_flush(now());
        self.write_records();
        self.records.close();
        if !outcome.data_safe() {
            bus::log_write_alert(&mut self.alerter, &self.store.health(), now());
        }
        let ids: Vec<usize> = self.conns.iter().map(|(i, _)| i).collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(id) {
                let _ = c.flush();
            }
            self.close_conn(ConnId(id));
        }
        for l in &self.listeners {
            if let Err(e) = std::fs::remove_file(&l.path) {
                log_warn!("removing {}: {e}", l.path.display());
            }
        }
        log_info!("stopped");
        match outcome {
            ShutdownOutcome::Clean => Ok(()),
            ShutdownOutcome::IndexNotWritten { .. } => {
                log_warn!("{outcome}");
                Ok(())
            }
            _ => Err(DaemonError::Store(outcome.to_string())),
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        matches!(self.run_state, RunState::Stopping { .. })
    }
}
