//! The orderly shutdown: TERM to every agent, KILL after the grace period,
//! the last records and logs written, and the exit. Signals that start it
//! are read in `signals.rs`; reload and the heartbeat are in `reload.rs`.

use std::time::{Duration, Instant};

use crate::core::lifecycle::LifeEvent;
use crate::core::time::Timestamp;
use crate::daemon::bus;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::{now, Daemon, DaemonError, RunState};
use crate::daemon::panes::Slot;
use crate::daemon::settings::DRAIN_GRACE;
use crate::daemon::source::{ConnId, Source};
use crate::daemon::store::ShutdownOutcome;
use crate::platform::{self, KernelTimer};

impl Daemon {
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
        self.kill_hostops();
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

    pub(crate) fn running_pids(&self) -> Vec<platform::Pid> {
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
