//! The orchestrator's dispatch carried out (`[orchestrator] dispatch =
//! true`; docs/ORCHESTRATOR.md): a pending task is claimed on an idle
//! agent's behalf and written to its input in its own protocol.
//!
//! Which task goes where is `core::dispatch::Dispatcher::plan`, a pure
//! function of the queue, the idle agents and the time. The daemon asks it
//! when something could change the answer: a task added, released or
//! finished, an agent turning idle (`after_ingest`) or starting, and on
//! the daemon's heartbeat (a hold-off that has passed). Each hand-over is
//! journalled as a `dispatched` task event, logged in the agent's session
//! log as a `prompt` record (`by: "dispatch"`, which `colibri fold` and
//! `get-session` show), and published as the task's `claimed` watch
//! event. Each plan that gives anything is journalled first, with the
//! inputs the queue does not hold (`core::dispatch_replay`), so `colibri
//! fold tasks.jsonl` runs it again. The seed's handshake follows: without a `task-ack` within
//! `ack_timeout` the claim lapses (`task_ack_due`), the task is pending
//! again, and that agent is held off it for `retry_after`.

use std::collections::HashSet;

use crate::core::dispatch::{render, Assignment, IdleAgent};
use crate::core::dispatch_replay::PlanRecord;
use crate::core::state::AgentState;
use crate::core::tasks::TaskStatus;
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::PaneKey;
use crate::daemon::store::PromptRecord;

impl Daemon {
    /// Hands each pending task the plan gives to its idle agent.
    pub(crate) fn dispatch_pending(&mut self, t: Timestamp) {
        if !self.settings.orchestrator.dispatch
            || self.is_stopping()
            || self.control.starting
            || self.control.journal_behind().is_some()
        {
            return;
        }
        if !self
            .control
            .queue
            .iter()
            .any(|task| task.status == TaskStatus::Pending)
        {
            return;
        }
        // The seed's grace: agents that came up with colibrid may be busy
        // with work of their own.
        let empty = HashSet::new();
        let in_grace = self.control.in_grace(t).cloned();
        let in_grace = in_grace.as_ref().unwrap_or(&empty);
        let queue = &self.control.queue;
        let holders: HashSet<&str> = queue
            .iter()
            .filter(|task| matches!(task.status, TaskStatus::Claimed | TaskStatus::Working))
            .filter_map(|task| task.claimed_by.as_deref())
            .collect();
        let idle: Vec<IdleAgent<'_>> = self
            .panes
            .iter()
            .map(|(_, s)| s)
            .filter(|s| {
                s.agent.running_pid().is_some()
                    && s.agent.supervision.wanted.is_up()
                    && !s.pane.paused
                    && s.pane.state() == AgentState::Idle
                    && !holders.contains(s.pane.id.0.as_str())
                    && !in_grace.contains(&s.pane.id.0)
            })
            .map(|s| IdleAgent {
                pane: &s.pane.id.0,
                role: s.pane.role.as_deref(),
                jail: s.agent.jail.as_deref(),
                since: s.pane.state_since(),
            })
            .collect();
        let plan = self.control.dispatcher.plan(queue, &idle, t);
        if !plan.is_empty() {
            // Before the hand-overs, so a replay sees the queue the plan saw.
            let record = PlanRecord::new(t, &idle, &self.control.dispatcher, &plan);
            self.control.record_plan(record);
        }
        for a in plan {
            self.hand_over(a, t);
        }
        // What no idle agent could take may want an agent started.
        self.run_runners(t);
    }

    /// `key` may have turned idle: dispatch if it could take a task.
    pub(crate) fn dispatch_if_idle(&mut self, key: PaneKey, t: Timestamp) {
        if !self.settings.orchestrator.dispatch {
            return;
        }
        let ready = self.panes.get_mut(key).is_some_and(|s| {
            s.agent.running_pid().is_some() && !s.pane.paused && s.pane.state() == AgentState::Idle
        });
        let free = ready
            && self
                .panes
                .pane(key)
                .is_some_and(|p| self.control.queue.held_by(&p.id.0).is_none());
        if free {
            self.dispatch_pending(t);
        }
    }

    /// Writes the task to the agent's input, then claims it on the agent's
    /// behalf. Nothing is claimed when the input cannot take it.
    fn hand_over(&mut self, a: Assignment, t: Timestamp) {
        let Some(key) = self.panes.key(&a.pane) else {
            return;
        };
        let Some(task) = self.control.queue.get(a.task) else {
            return;
        };
        let text = render(&self.settings.orchestrator.prompt, task);
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let bytes = crate::core::taxonomy::input::input_message(slot.pane.runtime(), &text);
        let session = slot.agent.session.clone();
        let Some(proc_) = slot.agent.proc.as_mut().filter(|p| p.status.is_none()) else {
            return;
        };
        if let Err(e) = proc_.queue_input(&bytes) {
            log_warn!(
                "dispatch: pane {}: {e}; task {} not handed over",
                a.pane,
                a.task
            );
            return;
        }
        self.write_input(key);
        let timeout = self.control.ack_timeout;
        let ev = match self.control.queue.dispatch(a.task, &a.pane, t, timeout) {
            Ok(ev) => ev,
            Err(e) => {
                log_warn!("dispatch: task {} to pane {}: {e}", a.task, a.pane);
                return;
            }
        };
        log_info!("dispatch: task {} to pane {}", a.task, a.pane);
        self.store.prompt(
            &session,
            &PromptRecord {
                pane: &a.pane,
                by: "dispatch",
                text: &text,
            },
            t,
        );
        self.task_changed(ev, t);
    }
}
