//! Approvals in the daemon: the pane's pending requests made visible,
//! answered, escalated, and waited for.
//!
//! The pure core decides what an approval is and which bytes answer it
//! (`core::approval`, `Pane::answered`); this module owns what needs the
//! loop: publishing the pane's approval events on the bus, writing an
//! answer to the agent's input (or to the `colibri hook` waiting for it),
//! logging every answer as a `colibri` record, the requests that stay open
//! until their approval is decided (`hook`, `approval-request`), the
//! history of ended approvals, and escalation deadlines.
//!
//! An agent's own request (`approval-request`, `activity`
//! `approval_request`; `AnswerChannel::Reply`) is the same kind of entry
//! as a harness's: listed, answered, escalated and notified alike. Its
//! answer goes to the agent's waiting request and the history only; its
//! opening and its expiry are logged as `colibri` records, since no agent
//! line shows them, so `fold` and recovery replay it.
//!
//! [`guard_decision`] is the command guard before a tool runs: an approval it
//! decides is answered at once, by `policy`, before the operator sees it.
//! `Daemon::guard_pre_tool_use` is the same guard on a Claude Code
//! `PreToolUse`, which opens no approval: its deny goes straight back to
//! the hook.

use std::rc::Rc;

use serde_json::Value;

use crate::core::approval::{
    check_reply, encode_answer, guard_pre_tool_use, AgentRequest, AnswerChannel, Approval,
    ApprovalEvent, ApprovalOutcome, Decision, ExpiryReason,
};
use crate::core::pane::MAX_AGENT_APPROVALS;
use crate::core::policy::GuardSettings;
use crate::core::time::Timestamp;
pub(crate) mod desk;

use crate::daemon::conn::Scope;
use crate::daemon::diag::log_warn;
use crate::daemon::escalation::Stuck;
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::source::PaneKey;
use crate::daemon::store::{AnswerRecord, RequestRecord};
use crate::daemon::timers::Deadline;
use crate::protocol::{
    self, CommandError, DecideReply, ErrorCode, HookReply, Reply, WatchKind, WireApproval,
    WireApprovalStatus,
};
use desk::{Answerer, Ended, Waiter};

/// The command guard before a tool runs: a tool call the guard flags
/// (`core::policy::guard::check` on the tool's input, in the agent's `cwd`
/// and `scope`) is denied at once, with the rule and the command as its
/// message, and logged as answered `by: policy`. `None` leaves the
/// operator to decide.
pub fn guard_decision(
    guard: &GuardSettings,
    approval: &Approval,
    cwd: Option<&str>,
    scope: &[String],
) -> Option<Decision> {
    let tool = approval.tool.as_deref()?;
    let args = approval.input_json().or(approval.summary.as_deref())?;
    let roots = guard.roots(cwd, scope);
    let dirs = crate::core::policy::guard::Dirs {
        root: cwd,
        here: cwd,
        scope: roots.others(),
    };
    let hit = guard.check_in(tool, args, dirs)?;
    Some(Decision::Deny {
        message: Some(hit.refusal()),
    })
}

/// Whether a caller in `scope` may see an ended approval: the rule of
/// `views::pane_visible`, read from the entry since its pane may be gone.
pub fn ended_visible(e: &Ended, scope: &Scope) -> bool {
    match scope {
        Scope::Operator => true,
        Scope::Jail(j) => e.jail.as_deref() == Some(j.as_str()),
        Scope::Agent { pane, .. } => e.status.pane == *pane,
    }
}

/// How colibrid's own questions in an agent's name begin (the ladder's
/// decide item); an agent's `approval-request` may not.
pub(crate) const COLIBRI_QUESTION: &str = "colibri:";

impl Daemon {
    /// Publishes the approval events a pane recorded, answers waiting hooks
    /// whose approval ended, and keeps the pane's approval deadlines.
    pub(crate) fn after_approvals(&mut self, key: PaneKey, t: Timestamp) {
        let Some(pane) = self.panes.pane_mut(key) else {
            return;
        };
        let events = pane.take_approval_events();
        if events.is_empty() {
            return;
        }
        let pane_id = pane.id.0.clone();
        let name = pane.name.clone();
        let mut guarded = Vec::new();
        for ev in events {
            match ev {
                ApprovalEvent::Opened(a) => {
                    let cwd = self.panes.pane(key).and_then(|p| p.cwd());
                    let scope = self.panes.agent(key).map_or(&[][..], |a| a.scope());
                    if a.channel == AnswerChannel::AgentInput {
                        let guard = &self.settings.governance.guard;
                        if let Some(d) = guard_decision(guard, &a, cwd, scope) {
                            guarded.push((a.id.clone(), d));
                        }
                    }
                    let wire = WireApproval::new(&a, &pane_id, name.as_deref(), false);
                    self.publish(
                        WatchKind::ApprovalOpened {
                            pane: pane_id.clone(),
                            approval: Box::new(wire),
                        },
                        t,
                    );
                }
                ApprovalEvent::Closed {
                    approval, outcome, ..
                } => {
                    self.log_unanswered(key, &approval, &outcome, t);
                    self.approval_closed(&pane_id, &approval, &outcome, t);
                }
            }
        }
        for (id, decision) in guarded {
            if let Err(e) = self.decide(key, &id, decision, Answerer::policy(), t) {
                log_warn!("the guard's decision on approval {id}: {}", e.message);
            }
        }
        self.refresh_approval_deadlines(key, t);
        self.carry_out_decided(t);
    }

    pub(crate) fn approval_closed(
        &mut self,
        pane_id: &str,
        a: &Approval,
        outcome: &ApprovalOutcome,
        t: Timestamp,
    ) {
        self.approvals.escalated.remove(&a.id);
        self.approvals.defaulted.remove(&a.id);
        let decide_item = self.control.decide_items.remove(&a.id);
        let waiter = self.approvals.waiters.remove(&a.id);
        let who = match outcome {
            ApprovalOutcome::Answered { .. } => Some(
                self.approvals
                    .answering
                    .take()
                    .unwrap_or_else(Answerer::policy),
            ),
            ApprovalOutcome::Expired { .. } => None,
        };
        let (name, jail) = match self.panes.key(pane_id) {
            Some(k) => (
                self.panes.pane(k).and_then(|p| p.name.clone()),
                self.panes.agent(k).and_then(|ag| ag.jail.clone()),
            ),
            None => (None, None),
        };
        // A decide item acts on the operator's answer only: a default
        // denial (`deny_after`) or an expiry closes it, and that is all.
        if let (Some(pane), ApprovalOutcome::Answered { decision }, Some(w)) =
            (decide_item, outcome, &who)
        {
            if w.by != Answerer::policy().by {
                let go_on = matches!(decision, Decision::Approve);
                self.control.decided.push((pane, go_on, w.by.clone()));
            }
        }
        let by = who.as_ref().map(|w| w.by.as_str());
        let status = WireApprovalStatus::ended(a, pane_id, name.as_deref(), outcome, by, t);
        match (&waiter, a.channel, outcome) {
            // The agent's own request: it hears how it ended, whatever ended it.
            (Some(w), AnswerChannel::Reply, _) => {
                let reply = Reply::ApprovalRequest(Box::new(status.clone()));
                self.reply_later(w, &reply, t);
            }
            // A hook's answer went with the decision (`decide`).
            (Some(w), _, ApprovalOutcome::Expired { reason }) => {
                let reply = HookReply {
                    approval: Some(a.id.clone()),
                    decision: None,
                    output: None,
                    reason: Some(reason.as_str().into()),
                };
                self.reply_later(w, &Reply::Hook(reply), t);
            }
            _ => {}
        }
        self.approvals.remember(Ended { status, jail });
        let kind = match outcome {
            ApprovalOutcome::Answered { decision } => {
                let (message, text) = match decision {
                    Decision::Approve => (None, None),
                    Decision::Deny { message } => (message.clone(), None),
                    Decision::Answer { text } => (None, Some(text.clone())),
                };
                WatchKind::ApprovalAnswered {
                    pane: pane_id.to_string(),
                    approval: a.id.clone(),
                    decision: decision.as_str().into(),
                    message,
                    text,
                    by: who.map_or_else(|| "policy".to_string(), |w| w.by),
                }
            }
            ApprovalOutcome::Expired { reason } => WatchKind::ApprovalExpired {
                pane: pane_id.to_string(),
                approval: a.id.clone(),
                reason: reason.as_str().into(),
            },
        };
        self.publish(kind, t);
    }

    /// Opens an agent's own request on pane `key` (its wait, if any, ends
    /// at `until`), logs it for `fold` and recovery, and announces it.
    pub(crate) fn open_agent_approval(
        &mut self,
        key: PaneKey,
        req: &AgentRequest,
        until: Option<Timestamp>,
        t: Timestamp,
    ) -> Result<Approval, CommandError> {
        self.open_request(key, req, until, false, t)
    }

    /// As [`Daemon::open_agent_approval`], for colibrid's own question in
    /// the agent's name (`reserved`: past the agent's cap).
    pub(crate) fn open_request(
        &mut self,
        key: PaneKey,
        req: &AgentRequest,
        until: Option<Timestamp>,
        reserved: bool,
        t: Timestamp,
    ) -> Result<Approval, CommandError> {
        let Some(slot) = self.panes.get_mut(key) else {
            return Err(CommandError::new(ErrorCode::NotFound, "no such pane"));
        };
        let opened = if reserved {
            Ok(slot.pane.request_reserved_approval(req, t))
        } else {
            slot.pane.request_approval(req, t)
        };
        let mut a = opened.map_err(|_| {
            CommandError::new(
                ErrorCode::Busy,
                format!(
                    "{} has {MAX_AGENT_APPROVALS} requests pending already; wait for an answer",
                    slot.pane.id.as_str()
                ),
            )
        })?;
        if let Some(until) = until {
            slot.pane.set_approval_expiry(&a.id, until);
            a.expires_at = Some(until);
        }
        let rec = RequestRecord {
            pane: &slot.agent.pane_id,
            approval: &a.id,
            operation: a.title.as_deref().unwrap_or(""),
            reasoning: a.message.as_deref(),
            task_id: a.task_id,
            estimated_tokens: a.estimated_tokens,
        };
        self.store.approval_request(&slot.agent.session, &rec, t);
        self.after_approvals(key, t);
        Ok(a)
    }

    /// Logs an agent's own request that ended unanswered while its agent
    /// ran on (its wait ran out): no line of the agent's shows it, and
    /// `fold`, which has no clock, could not tell. Every other end shows
    /// in the log already (an answer record, the agent's exit).
    fn log_unanswered(
        &mut self,
        key: PaneKey,
        a: &Approval,
        outcome: &ApprovalOutcome,
        t: Timestamp,
    ) {
        let reason = match outcome {
            ApprovalOutcome::Expired {
                reason: r @ (ExpiryReason::TimedOut | ExpiryReason::Resolved),
            } if a.channel == AnswerChannel::Reply => r.as_str(),
            _ => return,
        };
        let Some(agent) = self.panes.agent(key) else {
            return;
        };
        self.store
            .approval_expired(&agent.session, &agent.pane_id, &a.id, reason, t);
    }

    fn reply_later(&mut self, w: &Waiter, reply: &Reply, t: Timestamp) {
        let line = protocol::ok_line(w.rid.as_ref(), reply);
        self.send(w.conn, Rc::from(line), t);
    }

    /// Every pending approval visible in `scope`, oldest pane first.
    pub(crate) fn pending_approvals(
        &self,
        scope: &Scope,
        only: Option<PaneKey>,
    ) -> Vec<WireApproval> {
        let mut out = Vec::new();
        for (k, s) in self.panes.iter() {
            if !self.visible(scope, k) || only.is_some_and(|o| o != k) {
                continue;
            }
            for a in s.pane.pending_approvals() {
                let escalated = self.approvals.escalated(&a.id);
                out.push(WireApproval::new(
                    a,
                    s.pane.id.as_str(),
                    s.pane.name.as_deref(),
                    escalated,
                ));
            }
        }
        out
    }

    /// The approval `target` names: an approval id, or a pane with exactly
    /// one pending approval.
    pub(crate) fn find_approval(
        &self,
        scope: &Scope,
        target: &str,
    ) -> Result<(PaneKey, String), CommandError> {
        for (k, s) in self.panes.iter() {
            if s.pane.approval(target).is_some() && self.visible(scope, k) {
                return Ok((k, target.to_string()));
            }
        }
        let visible = self
            .panes
            .iter()
            .filter(|(k, _)| self.visible(scope, *k))
            .map(|(k, s)| (s.pane.name.as_deref(), s.pane.id.as_str(), k));
        let key = crate::core::resolve::resolve(target, visible).map_err(|e| {
            CommandError::new(
                ErrorCode::NotFound,
                format!("no pending approval {target:?}: {e}"),
            )
        })?;
        let pending = self
            .panes
            .pane(key)
            .map(|p| p.pending_approvals())
            .unwrap_or_default();
        match pending {
            [one] => Ok((key, one.id.clone())),
            [] => Err(CommandError::new(
                ErrorCode::NotFound,
                format!("agent {target:?} has no pending approval"),
            )),
            many => Err(CommandError::invalid(format!(
                "agent {target:?} has {} pending approvals; name one: {}",
                many.len(),
                many.iter()
                    .map(|a| a.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Answers approval `id` of pane `key`: writes the harness's reply to
    /// the agent's input (or hands it to the waiting hook), logs it, and
    /// closes the approval.
    pub(crate) fn decide(
        &mut self,
        key: PaneKey,
        id: &str,
        decision: Decision,
        who: Answerer,
        t: Timestamp,
    ) -> Result<DecideReply, CommandError> {
        let Some(slot) = self.panes.get_mut(key) else {
            return Err(CommandError::not_found(id));
        };
        let pane_id = slot.pane.id.0.clone();
        let approval = slot.pane.approval(id).cloned().ok_or_else(|| {
            CommandError::new(ErrorCode::NotFound, format!("no pending approval {id:?}"))
        })?;
        // An agent's own request needs no harness: nothing is written.
        let bytes = match (approval.channel, slot.pane.runtime()) {
            (AnswerChannel::Reply, _) => check_reply(&approval, &decision).map(|()| Vec::new()),
            (_, Some(runtime)) => encode_answer(runtime, &approval, &decision),
            (_, None) => {
                return Err(CommandError::new(
                    ErrorCode::Unanswerable,
                    format!("the runtime of {pane_id} is not known yet"),
                ))
            }
        }
        .map_err(|e| CommandError::new(ErrorCode::Unanswerable, e.to_string()))?;
        match approval.channel {
            AnswerChannel::AgentInput => {
                let proc_ = slot
                    .agent
                    .proc
                    .as_mut()
                    .filter(|p| p.status.is_none())
                    .ok_or_else(|| CommandError::not_running(&pane_id))?;
                proc_.queue_input(&bytes).map_err(|e| e.refusal(&pane_id))?;
                self.write_input(key);
            }
            AnswerChannel::HookOutput => {
                let Some(w) = self.approvals.waiters.remove(id) else {
                    return Err(CommandError::new(
                        ErrorCode::Unanswerable,
                        format!("no colibri hook is waiting for {id}"),
                    ));
                };
                let output = String::from_utf8_lossy(&bytes).trim_end().to_string();
                let reply = HookReply {
                    approval: Some(id.to_string()),
                    decision: Some(decision.as_str().into()),
                    output: Some(output),
                    reason: None,
                };
                self.reply_later(&w, &Reply::Hook(reply), t);
            }
            // The waiting request hears it as the approval closes.
            AnswerChannel::Reply => {}
        }
        self.log_answer(key, id, None, &decision, &who, t);
        self.approvals.answering = Some(who);
        if let Some(p) = self.panes.pane_mut(key) {
            p.answered(id, &decision, t);
        }
        self.after_approvals(key, t);
        self.approvals.answering = None;
        Ok(DecideReply {
            approval: id.to_string(),
            pane: pane_id,
            decision: decision.as_str().into(),
            channel: approval.channel.as_str().into(),
            bytes: bytes.len(),
        })
    }

    /// Logs an answer to approval `id`, or, with `hook`, the daemon's own
    /// answer to that hook call (`id` is then the tool call's).
    fn log_answer(
        &mut self,
        key: PaneKey,
        id: &str,
        hook: Option<&str>,
        decision: &Decision,
        who: &Answerer,
        t: Timestamp,
    ) {
        let Some(agent) = self.panes.agent(key) else {
            return;
        };
        let (message, text) = match decision {
            Decision::Approve => (None, None),
            Decision::Deny { message } => (message.as_deref(), None),
            Decision::Answer { text } => (None, Some(text.as_str())),
        };
        let rec = AnswerRecord {
            pane: &agent.pane_id,
            approval: id,
            decision: decision.as_str(),
            message,
            text,
            by: &who.by,
            uid: who.uid,
            hook,
        };
        self.store.answer(&agent.session, &rec, t);
    }

    /// The command guard on a Claude Code `PreToolUse` that `colibri hook`
    /// forwarded (already ingested): on a hit, the deny is logged as an
    /// answer `by: policy` (named by the call's `tool_use_id`, as no
    /// approval opens) and returned for the hook to print at once. `None`:
    /// the call goes on, and nobody is asked.
    pub(crate) fn guard_pre_tool_use(
        &mut self,
        key: PaneKey,
        event: &Value,
        t: Timestamp,
    ) -> Option<HookReply> {
        let cwd = self.panes.pane(key).and_then(|p| p.cwd());
        let scope = self.panes.agent(key).map_or(&[][..], |a| a.scope());
        let denial = guard_pre_tool_use(&self.settings.governance.guard, event, cwd, scope)?;
        let decision = Decision::Deny {
            message: Some(denial.message),
        };
        self.log_answer(
            key,
            &denial.tool_use_id,
            Some("PreToolUse"),
            &decision,
            &Answerer::policy(),
            t,
        );
        Some(HookReply {
            approval: None,
            decision: Some(decision.as_str().into()),
            output: Some(denial.output),
            reason: None,
        })
    }

    /// Registers the request `rid` on `conn` (`hook`, `approval-request`)
    /// as waiting for approval `id` until `until`; the guard may decide it
    /// at once.
    pub(crate) fn wait_for_decision(
        &mut self,
        key: PaneKey,
        id: &str,
        conn: ConnId,
        rid: Option<Value>,
        until: Timestamp,
        t: Timestamp,
    ) {
        let Some(slot) = self.panes.get_mut(key) else {
            return;
        };
        slot.pane.set_approval_expiry(id, until);
        let guarded = slot.pane.approval(id).and_then(|a| {
            let guard = &self.settings.governance.guard;
            guard_decision(guard, a, slot.pane.cwd(), slot.agent.scope())
        });
        self.approvals
            .waiters
            .insert(id.to_string(), Waiter { conn, rid });
        if let Some(d) = guarded {
            if let Err(e) = self.decide(key, id, d, Answerer::policy(), t) {
                log_warn!("the guard's decision on approval {id}: {}", e.message);
            }
        }
        self.refresh_approval_deadlines(key, t);
    }

    /// A pane's approval deadline fired: approvals whose own timeout passed
    /// expire, due ones escalate, and the default policy answers.
    pub(crate) fn approval_deadline(&mut self, key: PaneKey, t: Timestamp) {
        if let Some(p) = self.panes.pane_mut(key) {
            p.expire_approvals(t);
        }
        self.after_approvals(key, t);
        let policy = self.settings.approvals.clone();
        let Some(escalate_after) = policy.escalate_after else {
            self.refresh_approval_deadlines(key, t);
            return;
        };
        let Some(pane) = self.panes.pane(key) else {
            return;
        };
        let pane_id = pane.id.0.clone();
        let mut escalate = Vec::new();
        let mut deny = Vec::new();
        // A harness's permission request left unanswered is a stuck
        // agent too (the ladder); an agent's own request is its question
        // to a human, not a sign it is stuck.
        let mut harness_waits = false;
        for a in pane.pending_approvals() {
            let at = a.asked_at.plus(escalate_after);
            if at <= t && !self.approvals.escalated.contains(&a.id) {
                escalate.push((a.id.clone(), t.since(a.asked_at)));
                harness_waits |= a.channel != AnswerChannel::Reply;
            }
            if let Some(after) = policy.deny_after {
                if at.plus(after) <= t && !self.approvals.defaulted.contains(&a.id) {
                    deny.push(a.id.clone());
                }
            }
        }
        for (id, pending) in escalate {
            self.approvals.escalated.insert(id.clone());
            self.publish(
                WatchKind::ApprovalEscalated {
                    pane: pane_id.clone(),
                    approval: id,
                    pending_ms: u64::try_from(pending.as_millis()).unwrap_or(u64::MAX),
                },
                t,
            );
        }
        // One catch per wait: a harness that asks several permissions at
        // once (parallel tool calls) must not run the whole ladder in a
        // burst. The pane has waited since its state last changed.
        let waiting_since = self.panes.pane(key).map(|p| p.state_since());
        let climbed_since = self
            .control
            .ladders
            .get(&pane_id)
            .and_then(|l| l.last_climb())
            .zip(waiting_since)
            .is_some_and(|(climbed, since)| climbed >= since);
        if harness_waits && !climbed_since {
            self.caught_stuck(&pane_id, Stuck::Unanswered, t);
        }
        for id in deny {
            self.approvals.defaulted.insert(id.clone());
            let message = Some(format!(
                "Denied by colibri: no answer within {}.",
                humantime::format_duration(escalate_after + policy.deny_after.unwrap_or_default())
            ));
            if let Err(e) = self.decide(key, &id, Decision::Deny { message }, Answerer::policy(), t)
            {
                log_warn!("the default answer to approval {id}: {}", e.message);
            }
        }
        self.refresh_approval_deadlines(key, t);
    }

    /// Arms the pane's approval deadlines for what is pending now.
    pub(crate) fn refresh_approval_deadlines(&mut self, key: PaneKey, t: Timestamp) {
        let Some(pane) = self.panes.pane(key) else {
            return;
        };
        let expiry = pane.next_approval_expiry();
        let policy = &self.settings.approvals;
        let next_escalation = policy.escalate_after.and_then(|after| {
            pane.pending_approvals()
                .iter()
                .filter_map(|a| {
                    let at = a.asked_at.plus(after);
                    if !self.approvals.escalated.contains(&a.id) {
                        return Some(at);
                    }
                    let deny = policy.deny_after?;
                    (!self.approvals.defaulted.contains(&a.id)).then(|| at.plus(deny))
                })
                .min()
        });
        for (d, at) in [
            (Deadline::ApprovalExpiry, expiry),
            (Deadline::ApprovalEscalation, next_escalation),
        ] {
            let due = self.panes.agent(key).and_then(|a| a.timers.due(d));
            match at {
                Some(at) if due != Some(at) => self.set_deadline(key, d, at, t),
                None if due.is_some() => self.clear_deadline(key, d, t),
                _ => {}
            }
        }
    }
}
