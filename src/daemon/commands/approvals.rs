//! `approvals`, `approve`, `deny`, `answer`, `hook` (a Claude Code hook
//! input that may wait for the operator's decision, or, for a
//! `PreToolUse`, gets the command guard's verdict at once), and
//! `approval-request` (an agent asking the operator itself, which may wait
//! for the decision the same way).

use crate::protocol::{ApprovalRequestArgs, ApprovalsArgs, HookArgs};
use std::os::fd::AsFd;
use std::time::Duration;

use crate::core::approval::{AgentRequest, AnswerChannel, Decision};
use crate::daemon::activity::bounded;
use crate::daemon::approvals::desk::Answerer;
use crate::daemon::approvals::{ended_visible, COLIBRI_QUESTION};
use crate::daemon::conn::Scope;
use crate::daemon::event_loop::Daemon;
use crate::platform;
use crate::protocol::{
    ApprovalsReply, CommandError, DecideArgs, ErrorCode, HookReply, Reply, WireApproval,
    WireApprovalStatus,
};

use super::control_plane::{posting_agent, take_post};
use super::Call;

/// The longest a request (`hook`, `approval-request`) may wait for a
/// decision.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

pub(super) fn list(d: &mut Daemon, call: &Call, a: ApprovalsArgs) -> Result<Reply, CommandError> {
    let only = match &a.agent_id {
        Some(q) => Some(d.resolve(&call.scope, q)?),
        None => None,
    };
    // Oldest first, by when each was asked, then by id: a stable order a
    // page's `next` ("ASKED_MS/ID") resumes after, whatever was answered
    // in between.
    let mut all: Vec<(String, WireApproval)> = d
        .pending_approvals(&call.scope, only)
        .into_iter()
        .map(|a| (page_key(&a), a))
        .collect();
    all.sort_by(|x, y| x.0.cmp(&y.0));
    if let Some(after) = &a.after {
        all.retain(|(key, _)| key > after);
    }
    let (page, more) = crate::protocol::page(all, a.limit, |(_, a)| {
        serde_json::to_vec(a).map_or(0, |t| t.len())
    });
    let next = more
        .then(|| page.last().map(|(key, _)| key.clone()))
        .flatten();
    // The history comes once, with the first page.
    let approved = match &a.after {
        Some(_) => Vec::new(),
        None => {
            let only = only.and_then(|k| d.panes.pane(k)).map(|p| p.id.0.clone());
            d.approvals.history(|e| {
                ended_visible(e, &call.scope) && only.as_ref().is_none_or(|p| e.status.pane == *p)
            })
        }
    };
    Ok(Reply::Approvals(ApprovalsReply {
        approvals: page.into_iter().map(|(_, a)| a).collect(),
        next,
        approved,
    }))
}

/// `approval-request`: the agent (`pane`, or the connection's own) asks the
/// operator to approve an operation. Opened like a harness's approval
/// (listed, answered, escalated, notified); with `wait_ms` the reply waits
/// for the decision, else it comes at once with the approval pending.
pub(super) fn request(
    d: &mut Daemon,
    call: &Call,
    a: ApprovalRequestArgs,
) -> Result<Reply, CommandError> {
    let (key, pane) = posting_agent(d, call, a.pane.as_deref())?;
    if a.operation.trim().is_empty() {
        return Err(CommandError::invalid("approval-request needs an operation"));
    }
    // The prefix of colibrid's own questions (the ladder's decide item):
    // an agent's request must not pass for one.
    if a.operation.trim_start().starts_with(COLIBRI_QUESTION) {
        return Err(CommandError::invalid(format!(
            "an operation may not start with {COLIBRI_QUESTION:?}: colibrid's own questions do"
        )));
    }
    let req = AgentRequest {
        operation: bounded(Some(a.operation)).unwrap_or_default(),
        reasoning: bounded(a.reasoning),
        task_id: a.task_id,
        estimated_tokens: a.estimated_tokens,
    };
    let bytes = (req.operation.len() + req.reasoning.as_ref().map_or(0, String::len)) as u64;
    take_post(d, &pane, bytes, call)?;
    let until = a
        .wait_ms
        .map(Duration::from_millis)
        .filter(|w| !w.is_zero())
        .map(|w| call.t.plus(w.min(MAX_WAIT)));
    let approval = d.open_agent_approval(key, &req, until, call.t)?;
    let name = d.panes.pane(key).and_then(|p| p.name.clone());
    let pending = d.panes.pane(key).and_then(|p| p.approval(&approval.id));
    match (until, pending) {
        (Some(until), Some(_)) => {
            d.wait_for_decision(
                key,
                &approval.id,
                call.conn,
                call.rid.clone(),
                until,
                call.t,
            );
            Ok(Reply::Deferred)
        }
        (_, Some(_)) => Ok(Reply::ApprovalRequest(Box::new(
            WireApprovalStatus::pending(&approval, &pane, name.as_deref()),
        ))),
        // Decided as it opened (by a policy): how it ended.
        (_, None) => {
            let ended = d
                .approvals
                .history(|e| e.status.approval_id == approval.id)
                .pop()
                .unwrap_or_else(|| WireApprovalStatus::pending(&approval, &pane, name.as_deref()));
            Ok(Reply::ApprovalRequest(Box::new(ended)))
        }
    }
}

/// An approval's place in the `approvals` order: its asking time in
/// milliseconds, zero-padded so text order is time order, and its id.
fn page_key(a: &WireApproval) -> String {
    let asked = humantime::parse_rfc3339(&a.asked_at)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis());
    format!("{asked:016}/{}", a.id)
}

pub(super) fn approve(d: &mut Daemon, call: &Call, a: DecideArgs) -> Result<Reply, CommandError> {
    decide(d, call, &a, Decision::Approve)
}

pub(super) fn deny(d: &mut Daemon, call: &Call, a: DecideArgs) -> Result<Reply, CommandError> {
    let message = a.message.clone().filter(|m| !m.trim().is_empty());
    decide(d, call, &a, Decision::Deny { message })
}

pub(super) fn answer(d: &mut Daemon, call: &Call, a: DecideArgs) -> Result<Reply, CommandError> {
    let Some(text) = a.text.clone() else {
        return Err(CommandError::invalid("answer needs text"));
    };
    decide(d, call, &a, Decision::Answer { text })
}

/// The longest `via` an answer's record keeps.
const MAX_VIA: usize = 64;

fn decide(
    d: &mut Daemon,
    call: &Call,
    a: &DecideArgs,
    decision: Decision,
) -> Result<Reply, CommandError> {
    let (key, id) = d.find_approval(&call.scope, &a.approval)?;
    // The ladder's top asks a human, not the agent (nor its jail-mates).
    if d.control.decide_items.contains_key(&id) && !matches!(call.scope, Scope::Operator) {
        return Err(CommandError::new(
            ErrorCode::Forbidden,
            format!("{id} asks the operator to decide on a stuck agent"),
        ));
    }
    let uid = d
        .conns
        .get(call.conn.0)
        .and_then(|c| platform::peer_cred(c.stream.as_fd()).ok())
        .map(|cred| cred.uid);
    let by = match a.via.as_deref() {
        None => call.scope.name(),
        Some(via) if via.chars().count() <= MAX_VIA && !via.chars().any(char::is_control) => {
            format!("{} via {via}", call.scope.name())
        }
        Some(_) => {
            return Err(CommandError::invalid(format!(
                "via must be at most {MAX_VIA} characters, none a control character"
            )))
        }
    };
    let who = Answerer { by, uid };
    d.decide(key, &id, decision, who, call.t).map(Reply::Decide)
}

pub(super) fn hook(d: &mut Daemon, call: &Call, a: HookArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&call.scope, &a.agent_id)?;
    if !a.event.is_object() {
        return Err(CommandError::invalid("event must be a JSON object"));
    }
    let line = serde_json::to_vec(&a.event)
        .map_err(|e| CommandError::new(ErrorCode::Internal, e.to_string()))?;
    let before: Vec<String> = pending_hook_ids(d, key);
    d.ingest_external(key, &line, call.t);
    // A `PreToolUse` waits for nobody: the guard's deny, if any, at once.
    if let Some(reply) = d.guard_pre_tool_use(key, &a.event, call.t) {
        return Ok(Reply::Hook(reply));
    }
    let opened = pending_hook_ids(d, key)
        .into_iter()
        .rev()
        .find(|id| !before.contains(id));
    let wait = a
        .wait_ms
        .map(Duration::from_millis)
        .filter(|w| !w.is_zero())
        .map(|w| w.min(MAX_WAIT));
    match (opened, wait) {
        (Some(id), Some(wait)) => {
            let until = call.t.plus(wait);
            d.wait_for_decision(key, &id, call.conn, call.rid.clone(), until, call.t);
            Ok(Reply::Deferred)
        }
        (opened, _) => Ok(Reply::Hook(HookReply {
            approval: opened,
            decision: None,
            output: None,
            reason: None,
        })),
    }
}

fn pending_hook_ids(d: &Daemon, key: crate::daemon::panes::PaneKey) -> Vec<String> {
    d.panes
        .pane(key)
        .map(|p| {
            p.pending_approvals()
                .iter()
                .filter(|a| a.channel == AnswerChannel::HookOutput)
                .map(|a| a.id.clone())
                .collect()
        })
        .unwrap_or_default()
}
