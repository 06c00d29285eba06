//! SIGHUP's reload (the reloadable settings, the declared agents, the
//! policies) and the heartbeat's periodic work (retiring finished panes,
//! held pauses, lingering and idle connections): the two jobs that revisit
//! the whole daemon on a clock or an operator's word.

use crate::core::time::Timestamp;
use crate::daemon::diag::log_info;
use crate::daemon::event_loop::{Daemon, LINGER};
use crate::daemon::source::ConnId;
use crate::protocol::WatchKind;

impl Daemon {
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
        self.control.set_ack_timeout(new.orchestrator.ack_timeout);
        self.settings.orchestrator = new.orchestrator;
        self.settings.providers = new.providers;
        self.settings.alert = new.alert;
        // A running op keeps the recipe it started with.
        self.settings.hostops = new.hostops;
        // A runner's agents keep the recipe they were started with.
        self.settings.roles = new.roles;
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
        self.import_plan(t);
        // A hold-off that has passed, or a change nothing else announced.
        self.dispatch_pending(t);
        // Idle runners' agents are stopped here, and ended ones forgotten,
        // whether or not anything is pending.
        self.run_runners(t);
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
}
