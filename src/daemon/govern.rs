//! Carries out the policy engine's verdicts (`core::policy`).
//!
//! After each batch of lines a pane took in, its [`LineFacts`] go through
//! the daemon's one [`Governor`]; every verdict is published on the watch
//! stream (and alerted when it warns, stops or asks for an operator), then
//! done: a pause stops the target's process trees (SIGSTOP, as
//! `pause-agent` does), a message is queued on the agent's input (wrapped
//! as the harness's prompt message where it reads JSON), a resume
//! continues them, a kill ends them. Timed resumes (a loop's backoff, a
//! budget window) are the governor's deadline, armed as the `Govern`
//! deadline of the pane whose line caused the pause.
//!

use crate::core::policy::{Action, LineFacts, PaneInfo, PolicyKind, Target, Verdict};
use crate::core::time::Timestamp;
use crate::daemon::agent::{Hold, PAUSE_BROKEN_QUIET, PAUSE_GRACE};
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::panes::{PaneKey, Slot};
use crate::daemon::timers::Deadline;
use crate::platform::{self, ProcessState};
use crate::protocol::{CommandError, ErrorCode, WatchKind, WireVerdict};

/// The largest facts buffer kept between reads, in facts (of about 200
/// bytes): a pass of 32 KiB of 42-byte lines makes some 780.
const FACTS_SPARE_MAX: usize = 2048;

impl Daemon {
    /// A pane that just started joins the pauses of the shared budgets
    /// covering it (a name's, a runtime's, everyone's).
    pub(crate) fn join_budget_pauses(&mut self, key: PaneKey, t: Timestamp) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        let info = pane_info(slot);
        let verdicts = self.governor.budgets().paused_for(&info, t);
        if !verdicts.is_empty() {
            self.carry_out(verdicts, t);
        }
    }

    /// Runs the policies over the lines `key` took in since the last call.
    pub(crate) fn govern(&mut self, key: PaneKey, t: Timestamp) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let facts = slot.pane.take_facts();
        if facts.is_empty() {
            self.keep_facts_buffer(facts);
            return;
        }
        let info = pane_info(slot);
        let verdicts = self.governor.observe_lines(&info, &facts, t);
        self.keep_facts_buffer(facts);
        self.carry_out(verdicts, t);
    }

    /// Keeps a taken facts buffer for the next read (`Pane::record_facts_in`),
    /// unless it grew past [`FACTS_SPARE_MAX`] (a read of many tiny lines).
    fn keep_facts_buffer(&mut self, facts: Vec<LineFacts>) {
        keep_spare(&mut self.facts_spare, facts);
    }

    /// `key`'s `Govern` deadline fired: resumes what the governor
    /// releases, and arms the next timed resume on `key`. Each pause arms
    /// the earliest resume of all, so the deadline that fired may have
    /// been set for another pane's: without the re-arm, a pane whose own
    /// resume was later stayed paused for good.
    pub(crate) fn govern_tick(&mut self, key: PaneKey, t: Timestamp) {
        let verdicts = self.governor.tick(t);
        self.carry_out(verdicts, t);
        // Never at or before now: a resume the tick did not release
        // would fire again at once, for ever.
        if let Some(at) = self.governor.next_deadline().filter(|&at| at > t) {
            self.set_deadline(key, Deadline::Govern, at, t);
        }
    }

    pub(crate) fn carry_out(&mut self, verdicts: Vec<Verdict>, t: Timestamp) {
        let mut timed = None;
        let mut looping: Vec<String> = Vec::new();
        for v in verdicts {
            if v.policy == PolicyKind::Loop
                && matches!(v.action, Action::Pause { .. })
                && !looping.contains(&v.pane)
            {
                looping.push(v.pane.clone());
            }
            // The decision first, then its effects (paused, resumed, …).
            let pane = v.pane.clone();
            self.publish(
                WatchKind::Verdict {
                    pane,
                    verdict: WireVerdict::from(&v),
                },
                t,
            );
            let keys = self.targets(&v.target);
            match &v.action {
                Action::Pause { until } => {
                    let hold = Hold {
                        key: hold_of(&v),
                        rule: Some(v.rule.clone()),
                        reason: Some(v.reason.clone()),
                        since: t,
                        until: *until,
                    };
                    self.policy_pause(&keys, Some(&hold), &hold.key, t);
                    if until.is_some() {
                        timed = self.panes.key(&v.pane).or(keys.first().copied());
                    }
                }
                Action::Resume => self.policy_pause(&keys, None, &hold_of(&v), t),
                Action::Message { text } => {
                    for &k in &keys {
                        self.policy_message(k, text);
                    }
                }
                Action::Kill => {
                    for &k in &keys {
                        self.policy_kill(k, &v.reason);
                    }
                }
                Action::Warn | Action::Escalate | Action::Deny => {}
            }
        }
        if let (Some(key), Some(at)) = (timed, self.governor.next_deadline()) {
            self.set_deadline(key, Deadline::Govern, at, t);
        }
        for pane in looping {
            self.caught_stuck(&pane, crate::daemon::escalation::Stuck::Looping, t);
        }
    }

    /// The running panes a verdict acts on.
    fn targets(&self, target: &Target) -> Vec<PaneKey> {
        self.panes
            .iter()
            .filter(|(_, slot)| match target {
                Target::Pane(id) => &slot.agent.pane_id == id,
                // `name:` budgets count a name's panes and a role's.
                Target::Name(n) => {
                    slot.pane.name.as_deref() == Some(n.as_str())
                        || slot.pane.role.as_deref() == Some(n.as_str())
                }
                Target::Role(r) => slot.pane.role.as_deref() == Some(r.as_str()),
                Target::Runtime(r) => slot.pane.runtime().is_some_and(|rt| rt.as_str() == r),
                Target::All => true,
            })
            .filter(|(_, slot)| slot.agent.running_pid().is_some())
            .map(|(k, _)| k)
            .collect()
    }

    /// Stops the panes `keys` for `hold` (`Some`), or lifts the hold
    /// `key` and continues those no other hold keeps stopped: each tree,
    /// then what their agents left running, found in one scan for all of
    /// them (a scan per pane made a global budget's pause of N panes cost
    /// N scans).
    fn policy_pause(
        &mut self,
        keys: &[PaneKey],
        hold: Option<&Hold>,
        hold_key: &str,
        t: Timestamp,
    ) {
        let pause = hold.is_some();
        let sig = if pause { libc::SIGSTOP } else { libc::SIGCONT };
        let mut signalled = Vec::new();
        for &key in keys {
            let Some(slot) = self.panes.get_mut(key) else {
                continue;
            };
            let Some(pid) = slot.agent.running_pid() else {
                continue;
            };
            let holds = &mut slot.agent.holds;
            if let Some(hold) = hold {
                holds.add(hold.clone());
            } else if holds.lift(hold_key) {
                let left: Vec<&str> = holds.iter().map(|h| h.key.as_str()).collect();
                log_info!(
                    "policy: pane {} stays paused for {}",
                    slot.agent.pane_id,
                    left.join(", ")
                );
                continue;
            }
            if slot.pane.paused == pause {
                continue;
            }
            if let Err(e) = platform::signal_tree(pid, sig) {
                log_warn!("policy: cannot signal pane {}: {e}", slot.agent.pane_id);
                continue;
            }
            signalled.push((key, slot.agent.pane_id.clone()));
        }
        if signalled.is_empty() {
            return;
        }
        let ids: Vec<&str> = signalled.iter().map(|(_, id)| id.as_str()).collect();
        self.signal_leftovers(&ids, sig);
        for (key, _) in signalled {
            self.mark_paused(key, pause, t);
        }
    }

    /// Lifts every hold on `key` and continues its agent if it is
    /// stopped: the operator's resume (`resume-agent`, a "go on" answer to
    /// the ladder's decide item). Returns the pane id.
    pub(crate) fn resume_agent(
        &mut self,
        key: PaneKey,
        t: Timestamp,
    ) -> Result<String, CommandError> {
        let Some(slot) = self.panes.get_mut(key) else {
            return Err(CommandError::new(ErrorCode::NotFound, "no such pane"));
        };
        let pane_id = slot.agent.pane_id.clone();
        let Some(pid) = slot.agent.running_pid() else {
            return Err(CommandError::not_running(&pane_id));
        };
        slot.agent.holds.lift_all();
        if !slot.pane.paused {
            return Ok(pane_id);
        }
        self.signal_pane(pid, &pane_id, libc::SIGCONT)
            .map_err(|e| CommandError::os(format!("signal: {e}")))?;
        self.mark_paused(key, false, t);
        Ok(pane_id)
    }

    /// Records that the pane's trees were stopped (or continued): its
    /// flag, its silence clock, the `paused`/`resumed` event, its stall.
    pub(crate) fn mark_paused(&mut self, key: PaneKey, pause: bool, t: Timestamp) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        slot.pane.paused = pause;
        if !pause {
            // Time spent stopped is not silence.
            slot.pane.rebase_quiet(t);
        }
        let pane = slot.agent.pane_id.clone();
        let event = if pause {
            WatchKind::Paused { pane }
        } else {
            WatchKind::Resumed { pane }
        };
        self.publish(event, t);
        self.refresh_stall(key, t);
        if !pause {
            self.heartbeat_if_owed(key, t);
            // An idle agent resumed can take a task now, not at the next
            // heartbeat.
            self.dispatch_if_idle(key, t);
        }
    }

    /// A paused pane must stay stopped: its agent's process found running,
    /// or output read from it well after the pause, means something
    /// continued it (a helper it started, in a session of its own, sending
    /// SIGCONT to its group). Its tree and what carries its identity are
    /// stopped again, and the operator is told (`pause_broken`, alerted).
    /// Checked on every read of a paused pane and at every heartbeat.
    pub(crate) fn hold_pause(&mut self, key: PaneKey, output: bool, t: Timestamp) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        let a = &slot.agent;
        let Some(pid) = a.running_pid() else {
            return;
        };
        // Being ended on purpose (stop, restart, kill, shutdown): it was
        // continued to receive its SIGTERM, which is no broken pause.
        let ending = self.is_stopping()
            || a.stopped_by.is_some()
            || a.timers.due(Deadline::StopGrace).is_some();
        if !slot.pane.paused || ending {
            return;
        }
        // A pause takes a moment to land (a policy's pause comes from the
        // line just read): nothing counts before the grace.
        if a.paused_since().is_some_and(|at| t.since(at) < PAUSE_GRACE) {
            return;
        }
        // Running on a CPU, or asleep in `S` (waiting, not stopped); a
        // process in uninterruptible I/O (`D`, slow NFS) is not evidence.
        let leader_runs = platform::process_info(pid)
            .ok()
            .flatten()
            .is_some_and(|p| matches!(p.state, ProcessState::Running | ProcessState::Sleeping));
        let reason = match (leader_runs, output) {
            (true, _) => "its process was running",
            (false, true) => "it wrote output",
            (false, false) => return,
        };
        let pane_id = a.pane_id.clone();
        let tell = a
            .pause_broken_told
            .is_none_or(|at| t.since(at) >= PAUSE_BROKEN_QUIET);
        if let Err(e) = self.signal_pane(pid, &pane_id, libc::SIGSTOP) {
            log_warn!("pane {pane_id}: cannot stop it again: {e}");
        }
        log_warn!("pane {pane_id} ran while paused ({reason}); stopped again");
        if !tell {
            return;
        }
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.pause_broken_told = Some(t);
        }
        self.publish(
            WatchKind::PauseBroken {
                pane: pane_id,
                reason: reason.to_string(),
            },
            t,
        );
    }

    /// Queues `text` on the agent's input; a stopped agent reads it when it
    /// is continued.
    fn policy_message(&mut self, key: PaneKey, text: &str) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let bytes = crate::core::taxonomy::input::input_message(slot.pane.runtime(), text);
        let pane_id = slot.agent.pane_id.clone();
        let Some(proc_) = slot.agent.proc.as_mut().filter(|p| p.status.is_none()) else {
            return;
        };
        if let Err(e) = proc_.queue_input(&bytes) {
            log_warn!("policy: pane {pane_id}: {e}; message dropped");
            return;
        }
        self.write_input(key);
    }

    fn policy_kill(&mut self, key: PaneKey, reason: &str) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(pid) = agent.running_pid() else {
            return;
        };
        agent.stopped_by = Some(format!("killed by policy: {reason}"));
        if let Err(e) = platform::signal_tree(pid, libc::SIGKILL) {
            log_warn!("policy: cannot kill pane {}: {e}", agent.pane_id);
        }
    }
}

/// `facts`, emptied, becomes the spare if it holds more than the spare
/// and no more than [`FACTS_SPARE_MAX`]; otherwise it is dropped.
fn keep_spare(spare: &mut Vec<LineFacts>, mut facts: Vec<LineFacts>) {
    facts.clear();
    if facts.capacity() <= FACTS_SPARE_MAX && facts.capacity() > spare.capacity() {
        *spare = facts;
    }
}

/// What the policies know of a pane.
pub(crate) fn pane_info(slot: &Slot) -> PaneInfo {
    PaneInfo {
        id: slot.agent.pane_id.clone(),
        name: slot.pane.name.clone(),
        role: slot.pane.role.clone(),
        runtime: slot.pane.runtime().map(|r| r.as_str().to_string()),
        model: slot.pane.model().map(str::to_string),
        cwd: slot.pane.cwd().map(str::to_string),
        scope: slot.agent.scope().to_vec(),
    }
}

/// The hold a pause or resume verdict puts or lifts: one per policy, and
/// one per budget (a budget's resume lifts its own pause, not another's).
fn hold_of(v: &Verdict) -> String {
    match v.policy {
        PolicyKind::Budget => format!("budget:{}", v.rule),
        PolicyKind::Loop => "loop".to_string(),
        PolicyKind::Guard => "guard".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_facts_spare_is_the_larger_buffer_emptied_up_to_its_cap() {
        let mut spare = Vec::new();
        let mut facts = Vec::with_capacity(100);
        facts.push(LineFacts::default());
        keep_spare(&mut spare, facts);
        assert!(
            spare.is_empty() && spare.capacity() >= 100,
            "emptied and kept"
        );
        keep_spare(&mut spare, Vec::with_capacity(10));
        assert!(
            spare.capacity() >= 100,
            "a smaller one does not displace it"
        );
        keep_spare(&mut spare, Vec::with_capacity(FACTS_SPARE_MAX + 1));
        assert!(
            spare.capacity() <= FACTS_SPARE_MAX,
            "one past the cap is dropped"
        );
    }
}
