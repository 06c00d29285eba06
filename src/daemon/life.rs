//! An agent's life and deadlines: feeds `core::lifecycle` its events and
//! applies the effects it returns; keeps each pane's named deadlines
//! (`timers`) and the stall check.

use std::time::Duration;

use crate::core::lifecycle::{self, Effect as LifeEffect, LifeEvent, RestartPlan};
use crate::core::state::AgentState;
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::{Daemon, RunState};
use crate::daemon::panes::{PaneKey, Slot};
use crate::daemon::settings::DRAIN_GRACE;
use crate::daemon::timers::Deadline;
use crate::platform;
use crate::protocol::WatchKind;

impl Daemon {
    /// Sets the pane's stall deadline unless one is set, and ends a
    /// reported stall once the pane is heard from again. Events never move
    /// a set stall deadline: it is re-checked when it comes due.
    pub(crate) fn refresh_stall(&mut self, key: PaneKey, t: Timestamp) {
        let default = self.settings.daemon.stall_after;
        let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
            return;
        };
        let deadline = pane.stall_deadline(default);
        let quiet = pane.quiet_since();
        if let Some(at) = agent.stalled_at_quiet {
            if quiet != at || deadline.is_none() {
                agent.stalled_at_quiet = None;
                let pane_id = agent.pane_id.clone();
                self.publish(WatchKind::Unstalled { pane: pane_id }, t);
            } else {
                return;
            }
        }
        let Some(deadline) = deadline else { return };
        let Some(agent) = self.panes.agent(key) else {
            return;
        };
        if agent.timers.due(Deadline::Stall).is_none() {
            self.set_deadline(key, Deadline::Stall, deadline, t);
        }
    }

    pub(crate) fn set_deadline(&mut self, key: PaneKey, d: Deadline, at: Timestamp, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        if let Err(e) = agent.timers.set(d, at, t, &mut self.timerq, key) {
            log_warn!("cannot arm a timer for pane {}: {e}", agent.pane_id);
        }
    }

    pub(crate) fn clear_deadline(&mut self, key: PaneKey, d: Deadline, t: Timestamp) {
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.timers.clear(d, t, &mut self.timerq, key);
        }
    }

    /// The deadline timer fired: each pane now due, in deadline order.
    pub(crate) fn timers_fired(&mut self, t: Timestamp) {
        for key in self.timerq.fired(t) {
            self.pane_timer(key, t);
        }
    }

    fn pane_timer(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        for d in agent.timers.fired(t, &mut self.timerq, key) {
            match d {
                Deadline::Stall => self.stall_check(key, t),
                Deadline::Drain => self.life_event(key, LifeEvent::DrainTimeout, t),
                Deadline::Backoff => self.life_event(key, LifeEvent::BackoffDue, t),
                Deadline::StopGrace => self.stop_grace_over(key),
                Deadline::ApprovalExpiry | Deadline::ApprovalEscalation => {
                    self.approval_deadline(key, t)
                }
                Deadline::Govern => self.govern_tick(key, t),
                Deadline::HeldRead => self.held_read_check(key, t),
                Deadline::Heartbeat => self.heartbeat_check(key, t),
            }
        }
    }

    pub(crate) fn stall_check(&mut self, key: PaneKey, t: Timestamp) {
        // What the agent wrote while colibrid itself was not running (stopped,
        // or starved of CPU) waits in its PTY: read it before calling the
        // agent quiet, whatever order this wakeup's events came in.
        if let Some(p) = self.panes.agent_mut(key).and_then(|a| a.proc.as_mut()) {
            p.read_pending = true;
        }
        // One quantum is enough: any output read makes the agent not quiet,
        // and the rest waits its turn in the round robin.
        self.read_pty(key, crate::daemon::sched::PTY_QUANTUM, t);
        let Some(pane) = self.panes.pane(key) else {
            return;
        };
        let Some(deadline) = pane.stall_deadline(self.settings.daemon.stall_after) else {
            return;
        };
        if t < deadline {
            self.set_deadline(key, Deadline::Stall, deadline, t);
            return;
        }
        let quiet = pane.quiet_since();
        let silent_ms = t.since(quiet).as_millis() as u64;
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        if agent.stalled_at_quiet.is_some() {
            return;
        }
        agent.stalled_at_quiet = Some(quiet);
        let pane_id = agent.pane_id.clone();
        self.publish(
            WatchKind::Stalled {
                pane: pane_id,
                silent_ms,
            },
            t,
        );
    }

    pub(crate) fn life_event(&mut self, key: PaneKey, ev: LifeEvent, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let (life, effects) = lifecycle::step(agent.life, ev);
        agent.life = life;
        for fx in effects {
            self.apply_life(key, fx, t);
        }
    }

    pub(crate) fn apply_life(&mut self, key: PaneKey, fx: LifeEffect, t: Timestamp) {
        match fx {
            LifeEffect::ArmDrain => self.set_deadline(key, Deadline::Drain, t.plus(DRAIN_GRACE), t),
            LifeEffect::KillGroup => {
                // A grandchild still holds the PTY: end its group. The agent
                // is reaped, so only its group id is still safe.
                if let Some(p) = self.panes.agent(key).and_then(|a| a.proc.as_ref()) {
                    let _ = platform::signal_group(p.pid, libc::SIGKILL);
                }
            }
            LifeEffect::Finish => self.finish(key, t),
            LifeEffect::ScheduleRestart { attempt, at } => {
                let Some(agent) = self.panes.agent_mut(key) else {
                    return;
                };
                agent.restart.attempts = attempt;
                let pane = agent.pane_id.clone();
                log_info!(
                    "pane {pane} restarts in {} (attempt {attempt})",
                    humantime::format_duration(at.since(t))
                );
                self.set_deadline(key, Deadline::Backoff, at, t);
                self.publish(
                    WatchKind::RestartScheduled {
                        pane,
                        attempt,
                        next_at: at.to_rfc3339(),
                    },
                    t,
                );
            }
            LifeEffect::Start => self.restart_now(key, t),
            LifeEffect::CancelRestart => self.clear_deadline(key, Deadline::Backoff, t),
            LifeEffect::RestartsExhausted { attempts } => {
                let Some(agent) = self.panes.agent(key) else {
                    return;
                };
                let pane = agent.pane_id.clone();
                log_info!("pane {pane} will not be restarted: {attempts} restarts used");
                self.mark_given_up(key);
                self.publish(WatchKind::RestartsExhausted { pane, attempts }, t);
            }
            LifeEffect::Release => {
                if let Some(agent) = self.panes.agent_mut(key) {
                    // A timed resume armed here may be other panes' (a
                    // budget shared by name, runtime or all): it stays.
                    let govern = agent.timers.due(Deadline::Govern);
                    agent.timers.release(&mut self.timerq, key);
                    if let Some(at) = govern {
                        self.set_deadline(key, Deadline::Govern, at, t);
                    }
                }
            }
        }
    }

    /// Whether the run that ended in `state` after `ran_for` restarts.
    pub(crate) fn restart_plan(
        &self,
        key: PaneKey,
        state: AgentState,
        ran_for: Duration,
        t: Timestamp,
    ) -> RestartPlan {
        let Some(agent) = self.panes.agent(key) else {
            return RestartPlan::No;
        };
        if !matches!(self.run_state, RunState::Running)
            || agent.stopped_by.is_some()
            || agent.recipe.is_none()
        {
            return RestartPlan::No;
        }
        // A declared agent's own backoff steps, else the daemon's.
        let backoff = agent
            .supervision
            .spec
            .as_ref()
            .and_then(|s| s.backoff.as_deref())
            .unwrap_or(&self.settings.restart_backoff);
        lifecycle::plan_restart(
            agent.rule(),
            agent.restart.attempts,
            state,
            ran_for,
            backoff,
            t,
        )
    }
}
