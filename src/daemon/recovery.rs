//! Recovery: rebuilds the pane table from the session logs a previous
//! daemon left (`store::Recovery`).

use std::collections::{HashMap, HashSet};

use crate::core::approval::{
    Approval, ApprovalEvent, ApprovalOutcome, ExpiryReason, LoggedApproval,
};
use crate::core::pane::{ExitStatus, Pane, PaneId, Transition};
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::agent::{Agent, RestartPolicy, RestartState};
use crate::daemon::approvals::desk::Answerer;
use crate::daemon::diag::log_warn;
use crate::daemon::event_loop::Daemon;
use crate::daemon::store::{ExitRecord, RecoveredPane, Recovery};
use crate::protocol::WatchKind;

impl Daemon {
    /// Rebuilds panes from the logs a previous daemon left. Agents that were
    /// running died with it (their PTY closed): they are failed with a reason.
    pub(crate) fn recover(&mut self, rec: Recovery, t: Timestamp) {
        let mut out = Vec::new();
        let n = rec.panes.len();
        let mut unmatched = 0;
        // What the watchers last heard is waiting; whatever of it recovery
        // finds ended is announced as ended below, and the rest expired.
        let open = self.bus.journal().open_approvals();
        // A pane id in two logs (a declared agent started again in a new
        // session): approval ids restart with each run, so only the latest
        // run's may be the ones the journal shows open.
        let mut latest: HashMap<String, Timestamp> = HashMap::new();
        for rp in &rec.panes {
            let at = latest.entry(rp.pane.clone()).or_insert(rp.attached_at);
            *at = (*at).max(rp.attached_at);
        }
        let mut unannounced = Vec::new();
        let mut lost = Vec::new();
        for rp in rec.panes {
            // Removed on purpose: it stays removed, and its name is free.
            if rp.removed {
                continue;
            }
            let runtime = rp.runtime.as_deref().and_then(Runtime::parse);
            let max_line = self.settings.daemon.max_line;
            let key = match self.panes.key(&rp.pane) {
                Some(key) => {
                    self.panes.reattach(key, runtime, max_line, rp.attached_at);
                    if let Some(a) = self.panes.agent_mut(key) {
                        a.generation = rp.generation;
                        a.session = rp.session.clone();
                    }
                    key
                }
                None => {
                    let mut agent = Agent::new(
                        rp.pane.clone(),
                        rp.session.clone(),
                        rp.jail.clone(),
                        None,
                        RestartState {
                            policy: RestartPolicy::Never,
                            max: 0,
                            attempts: 0,
                        },
                    );
                    agent.generation = rp.generation;
                    agent.runtime_indexed = true;
                    let mut pane = Pane::new(
                        PaneId(rp.pane.clone()),
                        rp.agent.clone(),
                        runtime,
                        max_line,
                        rp.attached_at,
                    );
                    pane.role = rp.role.clone();
                    self.panes.insert(pane, agent)
                }
            };
            let Some(pane) = self.panes.pane_mut(key) else {
                continue;
            };
            pane.name = rp.name.clone();
            pane.set_cwd(rp.cwd.clone());
            let mut answerers = HashMap::new();
            unmatched += replay(pane, &rp, &mut out, &mut answerers);
            match rp.exit {
                Some((state, code, signal)) => {
                    let status = match (code, signal) {
                        (Some(c), _) => ExitStatus::Code(c),
                        (None, Some(s)) => ExitStatus::Signal(s),
                        (None, None) => ExitStatus::Unknown,
                    };
                    let at = rp
                        .attached_at
                        .max(pane.last_event_at().unwrap_or(rp.attached_at));
                    // A planned stop, folded as the daemon folded it (a
                    // log from before the record said so: `done` beside
                    // an exit that is no success).
                    if rp.planned_exit || (state == "done" && !status.success()) {
                        pane.stopped(status, at, &mut out);
                    } else {
                        pane.exited(status, at, &mut out);
                    }
                }
                None => {
                    let reason =
                        "colibrid stopped while this agent ran; the agent was lost".to_string();
                    let before = out.len();
                    pane.fail(reason.clone(), t, &mut out);
                    // The daemon that lost it never said so: announced
                    // (and alerted) below, once, as the exit record
                    // written here ends it for the next recovery.
                    lost.extend(out[before..].iter().map(|tr| WatchKind::State {
                        pane: rp.pane.clone(),
                        from: tr.from,
                        to: tr.to,
                        reason: Some(reason.clone()),
                    }));
                    self.store.exit(
                        &rp.session,
                        &ExitRecord {
                            pane: &rp.pane,
                            state: "error",
                            code: None,
                            signal: None,
                            reason: Some(&reason),
                            planned: false,
                        },
                        t,
                    );
                }
            }
            // The daemon that lived these approvals published them (the
            // journal holds them), and recovery publishes nothing of them
            // but the ends its watchers never heard; left here, the pane's
            // next line would announce each approval as opened once more.
            if latest.get(&rp.pane) == Some(&rp.attached_at) {
                unannounced.extend(ended_unheard(pane, &open, &mut answerers));
            } else {
                drop(pane.take_approval_events());
            }
            out.clear();
        }
        // The daemon that opened these died before it could say they
        // ended (a crash, even between writing the session log and the
        // journal): said once, now. After an orderly stop it said so
        // itself, and the journal shows them closed.
        let mut heard = HashSet::new();
        for (pane_id, approval, outcome, by) in unannounced {
            let key = (pane_id, approval.id.clone());
            if heard.contains(&key) {
                continue;
            }
            if let Some(by) = by {
                self.approvals.answered_by(by);
            }
            self.approval_closed(&key.0, &approval, &outcome, t);
            heard.insert(key);
        }
        self.expire_unfound(open, &heard, t);
        for event in lost {
            self.publish(event, t);
        }
        if n > 0 {
            crate::daemon::diag::log_info!("recovered {n} pane(s) from the session logs");
        }
        if unmatched > 0 {
            log_warn!(
                "recovery: {unmatched} logged answer(s) named no approval pending at their place in the log; skipped"
            );
        }
    }

    /// Ends, as expired with their agent, the approvals the journal shows
    /// waiting that recovery found in no pane (its log deleted, or the
    /// events that opened them beyond the recovery cap) and that no pane
    /// holds pending: no agent is left to take an answer, and its
    /// watchers would wait for one forever.
    fn expire_unfound(
        &mut self,
        open: HashSet<(String, String)>,
        heard: &HashSet<(String, String)>,
        t: Timestamp,
    ) {
        let mut unfound: Vec<(String, String)> = open
            .into_iter()
            .filter(|k| !heard.contains(k) && !self.pending_in(&k.0, &k.1))
            .collect();
        unfound.sort();
        for (pane, approval) in unfound {
            let kind = WatchKind::ApprovalExpired {
                pane,
                approval,
                reason: ExpiryReason::Exited.as_str().into(),
            };
            self.publish(kind, t);
        }
    }

    fn pending_in(&self, pane_id: &str, approval: &str) -> bool {
        self.panes
            .iter()
            .any(|(_, s)| s.pane.id.as_str() == pane_id && s.pane.approval(approval).is_some())
    }
}

/// An approval's end to announce: pane id, approval, outcome, and who
/// answered it, when the log says.
type Unheard = (String, Approval, ApprovalOutcome, Option<Answerer>);

/// The approvals the refold and the pane's end closed (a logged answer,
/// the agent's exit, its loss) that the journal still shows waiting.
fn ended_unheard(
    pane: &mut Pane,
    open: &HashSet<(String, String)>,
    answerers: &mut HashMap<String, Answerer>,
) -> Vec<Unheard> {
    let pane_id = pane.id.0.clone();
    pane.take_approval_events()
        .into_iter()
        .filter_map(|e| match e {
            ApprovalEvent::Closed {
                approval, outcome, ..
            } if open.contains(&(pane_id.clone(), approval.id.clone())) => {
                let by = answerers.remove(&approval.id);
                Some((pane_id.clone(), approval, outcome, by))
            }
            _ => None,
        })
        .collect()
}

/// Refolds a recovered pane's events with the approval records its log
/// kept, each replayed where it was written (`Pane::replay`, as `colibri
/// fold` does), so an approval answered before the restart is closed as
/// answered, not pending, and an agent's own request is opened where it was
/// asked. Nothing is written to any agent. Returns how many answers
/// matched no pending approval (not counted when the cap dropped some of
/// the pane's events: their approvals are not there).
fn replay(
    pane: &mut Pane,
    rp: &RecoveredPane,
    out: &mut Vec<Transition>,
    answerers: &mut HashMap<String, Answerer>,
) -> usize {
    let mut records = rp.approval_records.iter().peekable();
    let mut unmatched = 0;
    let mut records_due = |pane: &mut Pane, before: usize| {
        while let Some(r) = records.next_if(|r| r.after_events <= before) {
            let acted = pane.replay(&r.record, r.ts);
            match (&r.record, acted) {
                (LoggedApproval::Answered(answer), Some(closed)) => {
                    if let Some(by) = &answer.by {
                        let who = Answerer {
                            by: by.clone(),
                            uid: answer.uid,
                        };
                        answerers.insert(closed.id, who);
                    }
                }
                (LoggedApproval::Answered(_), None) => unmatched += 1,
                // A request refused, or an expiry the refold already made
                // (a line after the wait ran out expires it too).
                _ => {}
            }
        }
    };
    for (i, (ts, line)) in rp.events.iter().enumerate() {
        records_due(pane, i);
        let _ = pane.ingest_line(line, *ts, out);
    }
    records_due(pane, usize::MAX);
    if rp.events_truncated {
        0
    } else {
        unmatched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::approval::{ApprovalEvent, ApprovalOutcome, Decision, LoggedAnswer};
    use crate::daemon::store::RecoveredApproval;

    const ASK_Q1: &[u8] =
        br#"{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Go?"}"#;

    fn answer(after_events: usize, approval: &str, decision: Decision) -> RecoveredApproval {
        RecoveredApproval {
            after_events,
            ts: Timestamp::from_millis(after_events as u64 * 10 + 5),
            record: LoggedApproval::Answered(LoggedAnswer {
                approval: approval.into(),
                decision,
                by: Some("operator".into()),
                uid: None,
            }),
        }
    }

    fn recovered(events: &[&[u8]], approval_records: Vec<RecoveredApproval>) -> RecoveredPane {
        RecoveredPane {
            session: "s".into(),
            pane: "3f2a9c1d-0000".into(),
            agent: "pi".into(),
            runtime: Some("pi".into()),
            name: None,
            cwd: None,
            generation: 0,
            jail: None,
            role: None,
            attached_at: Timestamp::from_millis(0),
            exit: None,
            events: events
                .iter()
                .enumerate()
                .map(|(i, e)| (Timestamp::from_millis(i as u64 * 10), e.to_vec()))
                .collect(),
            events_truncated: false,
            approval_records,
            removed: false,
            planned_exit: false,
        }
    }

    fn pane_of(rp: &RecoveredPane) -> Pane {
        Pane::new(
            PaneId(rp.pane.clone()),
            "pi".into(),
            Some(Runtime::Pi),
            1 << 20,
            rp.attached_at,
        )
    }

    fn outcomes(pane: &mut Pane) -> Vec<(String, Option<ApprovalOutcome>)> {
        pane.take_approval_events()
            .into_iter()
            .map(|e| match e {
                ApprovalEvent::Opened(a) => (a.id, None),
                ApprovalEvent::Closed {
                    approval, outcome, ..
                } => (approval.id, Some(outcome)),
            })
            .collect()
    }

    #[test]
    fn answers_close_their_approvals_where_they_were_given_and_strays_are_counted() {
        // Asked, answered, asked again with the same harness id: live, the
        // second ask is a new approval because the first was answered.
        let rp = recovered(
            &[ASK_Q1, ASK_Q1],
            vec![
                answer(0, "3f2a9c1d-2", Decision::Approve),
                answer(1, "3f2a9c1d-1", Decision::Deny { message: None }),
                answer(2, "3f2a9c1d-9", Decision::Approve),
            ],
        );
        let mut pane = pane_of(&rp);
        let mut out = Vec::new();
        // The first names an approval not asked yet at its place, the last
        // one never asked: both skipped, counted.
        assert_eq!(replay(&mut pane, &rp, &mut out, &mut HashMap::new()), 2);
        let denied = ApprovalOutcome::Answered {
            decision: Decision::Deny { message: None },
        };
        assert_eq!(
            outcomes(&mut pane),
            vec![
                ("3f2a9c1d-1".to_string(), None),
                ("3f2a9c1d-1".to_string(), Some(denied)),
                ("3f2a9c1d-2".to_string(), None),
            ]
        );
        let pending: Vec<&str> = pane
            .pending_approvals()
            .iter()
            .map(|a| a.id.as_str())
            .collect();
        assert_eq!(pending, ["3f2a9c1d-2"]);
    }

    #[test]
    fn strays_are_not_counted_when_the_cap_dropped_events() {
        let mut rp = recovered(&[], vec![answer(0, "3f2a9c1d-1", Decision::Approve)]);
        rp.events_truncated = true;
        let mut pane = pane_of(&rp);
        assert_eq!(
            replay(&mut pane, &rp, &mut Vec::new(), &mut HashMap::new()),
            0
        );
    }
}
