//! The agent heartbeat (`core::heartbeat`) carried out: an agent given a
//! period gets its heartbeat prompt, in its own input protocol (Pi's RPC
//! `prompt`, a Claude `stream-json` user message, else a line:
//! `core::taxonomy::input`), while it is running, idle and not paused, at
//! most once a period.
//!
//! The schedule is the pane's `Heartbeat` deadline, on the one kernel
//! timer every deadline shares (`timers.rs`); a prompt that came due while
//! the agent worked is owed and goes when the agent next turns idle or is
//! resumed (`after_ingest`, `mark_paused`), so nothing polls. Each prompt
//! sent is logged as a `prompt` record (`by: "heartbeat"`): the session
//! log, `get-session` and `colibri fold` show it.

use std::time::Duration;

use crate::core::heartbeat::{Beat, Heartbeat, DEFAULT_PROMPT};
use crate::core::state::AgentState;
use crate::core::time::Timestamp;
use crate::daemon::agent::AgentHeartbeat;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::PaneKey;
use crate::daemon::store::PromptRecord;
use crate::daemon::timers::Deadline;

impl Daemon {
    /// Gives `key` a heartbeat of `period` (or takes it away): a new one
    /// counts from now, a changed one keeps its last prompt.
    pub(crate) fn configure_heartbeat(
        &mut self,
        key: PaneKey,
        period: Option<Duration>,
        prompt: Option<&str>,
        t: Timestamp,
    ) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let prompt = prompt.unwrap_or(DEFAULT_PROMPT).to_string();
        match (period, agent.heartbeat.as_mut()) {
            (None, _) => {
                agent.heartbeat = None;
                self.clear_deadline(key, Deadline::Heartbeat, t);
                return;
            }
            (Some(p), Some(hb)) => {
                if hb.schedule.period() == p && hb.prompt == prompt {
                    return;
                }
                hb.schedule.set_period(p);
                hb.prompt = prompt;
            }
            (Some(p), None) => {
                agent.heartbeat = Some(AgentHeartbeat {
                    schedule: Heartbeat::new(p, t),
                    prompt,
                });
            }
        }
        self.heartbeat_check(key, t);
    }

    /// Its process started: the first prompt is due a period from now.
    pub(crate) fn heartbeat_started(&mut self, key: PaneKey, t: Timestamp) {
        let Some(hb) = self.panes.agent_mut(key).and_then(|a| a.heartbeat.as_mut()) else {
            return;
        };
        hb.schedule = Heartbeat::new(hb.schedule.period(), t);
        let due = hb.schedule.due();
        self.set_deadline(key, Deadline::Heartbeat, due, t);
    }

    /// The pane may have become ready (idle, or resumed): a prompt it owes
    /// goes now.
    pub(crate) fn heartbeat_if_owed(&mut self, key: PaneKey, t: Timestamp) {
        let owed = self
            .panes
            .agent(key)
            .and_then(|a| a.heartbeat.as_ref())
            .is_some_and(|hb| hb.schedule.owed());
        if owed {
            self.heartbeat_check(key, t);
        }
    }

    /// The `Heartbeat` deadline fired, or the schedule changed: sends the
    /// prompt if it is due and the pane can take it, and arms the next.
    pub(crate) fn heartbeat_check(&mut self, key: PaneKey, t: Timestamp) {
        let stopping = self.is_stopping();
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let ready = !stopping
            && slot.agent.running_pid().is_some()
            && !slot.pane.paused
            && slot.pane.state() == AgentState::Idle;
        let Some(hb) = slot.agent.heartbeat.as_mut() else {
            return;
        };
        match hb.schedule.poll(t, ready) {
            Beat::At(at) => self.set_deadline(key, Deadline::Heartbeat, at, t),
            Beat::Owed => self.clear_deadline(key, Deadline::Heartbeat, t),
            Beat::Send => {
                let due = hb.schedule.due();
                let prompt = hb.prompt.clone();
                self.send_heartbeat(key, &prompt, t);
                self.set_deadline(key, Deadline::Heartbeat, due, t);
            }
        }
    }

    /// Writes the prompt to the agent's input and logs it.
    fn send_heartbeat(&mut self, key: PaneKey, prompt: &str, t: Timestamp) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let bytes = crate::core::taxonomy::input::input_message(slot.pane.runtime(), prompt);
        let pane_id = slot.agent.pane_id.clone();
        let session = slot.agent.session.clone();
        let Some(proc_) = slot.agent.proc.as_mut().filter(|p| p.status.is_none()) else {
            return;
        };
        if let Err(e) = proc_.queue_input(&bytes) {
            log_warn!("heartbeat: pane {pane_id}: {e}; prompt dropped");
            return;
        }
        self.write_input(key);
        log_info!("heartbeat: prompted pane {pane_id}");
        self.store.prompt(
            &session,
            &PromptRecord {
                pane: &pane_id,
                by: "heartbeat",
                text: prompt,
            },
            t,
        );
    }
}
