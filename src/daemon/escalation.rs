//! The stuck-loop escalation ladder (`core::escalation`) carried out, when
//! `[orchestrator] escalate = true` (docs/ORCHESTRATOR.md).
//!
//! An agent is caught stuck when the loop policy pauses it (each catch
//! after the first comes after a backoff), when it lets a claim lapse
//! (idle after the prompt that gave it a task), or when a permission
//! request its harness asked is escalated unanswered
//! (`approvals.escalate_after`). Each catch climbs one
//! rung: 0 interrupt the turn and give a different prompt, 1 compact its
//! context the harness's own way, 2 kill and respawn it (resumed in its
//! session where the harness can resume, as `restart-agent` does), 3 an
//! `escalate` verdict (an alert, the notify sinks). A task the looping
//! agent holds is released for another. Every rung is a `verdict` watch
//! event (policy `loop`, rule `escalation_<level>`); what was written to
//! the agent's input is logged as a `prompt` record (`by: "escalation"`).
//! Productive work (the agent acknowledging or finishing a task) brings
//! it back to the bottom.

use crate::core::approval::AgentRequest;
use crate::core::dispatch_replay::PlanLine;
use crate::core::escalation::{Rung, INTERRUPT_PROMPT};
use crate::core::policy::{Action, PolicyKind, Target, Verdict};
use crate::core::spec::StopCause;
use crate::core::tasks::TaskStatus;
use crate::core::taxonomy::input::{compact_input, input_message, interrupt_input};
use crate::core::time::Timestamp;
use crate::daemon::approvals::COLIBRI_QUESTION;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::PaneKey;
use crate::daemon::store::PromptRecord;
use crate::protocol::{WatchKind, WireVerdict};

/// Why an agent the operator decided to stop was stopped, as its session
/// log and `list` show it.
const DECIDED_STOP_REASON: &str = "stopped by the operator at the top of the escalation ladder";

/// Why an agent was caught stuck.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Stuck {
    /// The loop policy paused it.
    Looping,
    /// It let a claim lapse: idle after the prompt that gave it a task.
    Unacknowledged,
    /// A permission request its harness asked went unanswered for
    /// `approvals.escalate_after`.
    Unanswered,
}

impl Stuck {
    fn as_str(self) -> &'static str {
        match self {
            Stuck::Looping => "caught looping",
            Stuck::Unacknowledged => "did not acknowledge its task",
            Stuck::Unanswered => "waited on an unanswered permission request",
        }
    }
}

impl Daemon {
    /// `pane` was caught stuck: climb one rung and carry it out.
    pub(crate) fn caught_stuck(&mut self, pane: &str, why: Stuck, t: Timestamp) {
        if !self.settings.orchestrator.escalate
            || self.is_stopping()
            || self.control.in_grace(t).is_some_and(|g| g.contains(pane))
        {
            return;
        }
        let Some(key) = self.panes.key(pane) else {
            return;
        };
        if matches!(why, Stuck::Looping) {
            self.release_held_task(pane, t);
        }
        let rung = self
            .control
            .ladders
            .entry(pane.to_string())
            .or_default()
            .stuck(t);
        // The agent records keep each agent's rung across a restart; the
        // journal keeps the climb for `colibri fold tasks.jsonl`.
        self.mark_records_changed();
        self.control.record_ladder(PlanLine::Stuck {
            pane: pane.to_string(),
            at: t.as_millis(),
            cause: why.as_str().to_string(),
            rung,
        });
        log_info!(
            "escalation: pane {pane} {}: level {} ({})",
            why.as_str(),
            rung.level(),
            rung.as_str()
        );
        let reason = format!(
            "{}; escalation level {}: {}",
            why.as_str(),
            rung.level(),
            rung.as_str()
        );
        let verdict = |action| Verdict {
            pane: pane.to_string(),
            line: 0,
            at: t,
            policy: PolicyKind::Loop,
            rule: format!("escalation_{}", rung.level()),
            target: Target::Pane(pane.to_string()),
            action,
            reason: reason.clone(),
            path: None,
        };
        match rung {
            Rung::Interrupt => {
                self.publish_verdict(&verdict(Action::Message {
                    text: INTERRUPT_PROMPT.to_string(),
                }));
                let runtime = self.panes.pane(key).and_then(|p| p.runtime());
                let mut bytes = interrupt_input(runtime);
                bytes.extend(input_message(runtime, INTERRUPT_PROMPT));
                self.write_to_agent(key, &bytes, INTERRUPT_PROMPT, t);
            }
            Rung::Compact => {
                self.publish_verdict(&verdict(Action::Message {
                    text: "/compact".to_string(),
                }));
                let runtime = self.panes.pane(key).and_then(|p| p.runtime());
                self.write_to_agent(key, &compact_input(runtime), "/compact", t);
            }
            // An agent without a recipe (attached, not started by
            // colibrid) cannot be started again: a human decides.
            Rung::Respawn if self.panes.agent(key).is_some_and(|a| a.recipe.is_none()) => {
                self.carry_out(vec![verdict(Action::Escalate)], t);
                self.open_decide_item(key, pane, why, t);
            }
            Rung::Respawn => {
                self.publish_verdict(&verdict(Action::Kill));
                self.restart_agent(key, t);
            }
            Rung::Notify => {
                self.carry_out(vec![verdict(Action::Escalate)], t);
                self.open_decide_item(key, pane, why, t);
            }
        }
    }

    /// The top of the ladder asks a human: an approval-like item on the
    /// agent's pane, on the board, in `colibri approvals` and the notify
    /// sinks like any approval. The operator's approve lets the agent go
    /// on (resumed, back to level 0); deny stops it. One per agent at once.
    fn open_decide_item(&mut self, key: PaneKey, pane: &str, why: Stuck, t: Timestamp) {
        if self.control.decide_items.values().any(|p| p == pane) {
            return;
        }
        let req = AgentRequest {
            operation: format!(
                "{COLIBRI_QUESTION} {pane} {} and is at the top of the escalation ladder. \
                 Approve to let it go on (resumed, back to level 0); deny to stop it.",
                why.as_str()
            ),
            reasoning: None,
            task_id: self.control.queue.held_by(pane).map(|task| task.id),
            estimated_tokens: None,
        };
        match self.open_request(key, &req, None, true, t) {
            Ok(a) => {
                log_info!("escalation: pane {pane}: decide item {} opened", a.id);
                self.control.decide_items.insert(a.id, pane.to_string());
            }
            Err(e) => log_warn!("escalation: pane {pane}: no decide item: {}", e.message),
        }
    }

    /// `pane` works again, or the operator resumed it: its decide item,
    /// if open, no longer asks anything and closes as resolved (a later
    /// deny must not stop an agent that has recovered).
    pub(crate) fn resolve_decide_item(&mut self, pane: &str, t: Timestamp) {
        let Some(id) = self
            .control
            .decide_items
            .iter()
            .find(|(_, p)| p.as_str() == pane)
            .map(|(id, _)| id.clone())
        else {
            return;
        };
        let Some(key) = self.panes.key(pane) else {
            self.control.decide_items.remove(&id);
            return;
        };
        if let Some(p) = self.panes.pane_mut(key) {
            p.resolve_approval(&id, t);
        }
        self.after_approvals(key, t);
    }

    /// Carries out the operator's answers to decide items, once their
    /// approvals have closed.
    pub(crate) fn carry_out_decided(&mut self, t: Timestamp) {
        for (pane, go_on, by) in std::mem::take(&mut self.control.decided) {
            self.control.record_ladder(PlanLine::Decided {
                pane: pane.clone(),
                at: t.as_millis(),
                go_on,
            });
            let Some(key) = self.panes.key(&pane) else {
                continue;
            };
            if go_on {
                self.control.ladders.remove(&pane);
                self.mark_records_changed();
                match self.resume_agent(key, t) {
                    Ok(_) => log_info!("escalation: pane {pane}: the operator lets it go on"),
                    Err(e) => log_warn!("escalation: pane {pane}: not resumed: {}", e.message),
                }
            } else {
                log_info!("escalation: pane {pane}: the operator stops it");
                let by = StopCause::Operator { who: by };
                self.stop_planned(key, by, Some(DECIDED_STOP_REASON), t);
            }
        }
    }

    /// `pane` did productive work: back to the ladder's bottom.
    pub(crate) fn productive(&mut self, pane: &str, t: Timestamp) {
        self.resolve_decide_item(pane, t);
        if let Some(mut ladder) = self.control.ladders.remove(pane) {
            self.control.record_ladder(PlanLine::Productive {
                pane: pane.to_string(),
                at: t.as_millis(),
            });
            if ladder.productive() {
                log_info!("escalation: pane {pane} works again; back to level 0");
                self.mark_records_changed();
            }
        }
    }

    fn publish_verdict(&mut self, v: &Verdict) {
        self.publish(
            WatchKind::Verdict {
                pane: v.pane.clone(),
                verdict: WireVerdict::from(v),
            },
            v.at,
        );
    }

    /// The seed's "check relevance": a looping agent's task goes back to
    /// the queue for another, and it is held off that task for a while.
    fn release_held_task(&mut self, pane: &str, t: Timestamp) {
        let retry_after = self.settings.orchestrator.retry_after;
        self.release_task_held_by(pane, t, |d, id| {
            log_info!("escalation: task {id} released from looping pane {pane}");
            d.control.dispatcher.released(id, pane, t, retry_after);
        });
    }

    /// `pane`'s agent ended and will not run again: the task it held
    /// (claimed or working) is pending again, for another agent.
    pub(crate) fn release_task_of_ended(&mut self, pane: &str, t: Timestamp) {
        self.release_task_held_by(pane, t, |_, id| {
            log_info!("task {id} released: pane {pane} ended and will not run again");
        });
    }

    /// Releases the task `pane` holds (claimed or working), running `also`
    /// before the change is recorded (so a dispatch it starts sees it).
    fn release_task_held_by(
        &mut self,
        pane: &str,
        t: Timestamp,
        also: impl FnOnce(&mut Daemon, u64),
    ) {
        let Some(id) = self
            .control
            .queue
            .held_by(pane)
            .filter(|task| matches!(task.status, TaskStatus::Claimed | TaskStatus::Working))
            .map(|task| task.id)
        else {
            return;
        };
        let Ok(ev) = self.control.queue.release(id, t) else {
            return;
        };
        also(self, id);
        self.task_changed(ev, t);
    }

    /// Writes `bytes` to the agent's input and logs `text` as a `prompt`
    /// record by the escalation.
    fn write_to_agent(&mut self, key: PaneKey, bytes: &[u8], text: &str, t: Timestamp) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        let pane_id = slot.agent.pane_id.clone();
        let session = slot.agent.session.clone();
        let Some(proc_) = slot.agent.proc.as_mut().filter(|p| p.status.is_none()) else {
            return;
        };
        if let Err(e) = proc_.queue_input(bytes) {
            log_warn!("escalation: pane {pane_id}: {e}; not written");
            return;
        }
        self.write_input(key);
        self.store.prompt(
            &session,
            &PromptRecord {
                pane: &pane_id,
                by: "escalation",
                text,
            },
            t,
        );
    }
}
