//! The wire form of approvals (see `core::approval` for what they are).
//!
//! Kinds, channels, decisions and reasons are printed as the snake-case
//! names their `as_str` gives.

use serde::{Deserialize, Serialize};

use crate::core::approval::{
    bounded, AnswerChannel, Approval, ApprovalEvent, ApprovalOutcome, Decision,
};
use crate::core::time::Timestamp;

/// How an approval ended: `{"event":"answered","decision":"deny",
/// "message":…}` or `{"event":"expired","reason":"cancelled"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireOutcome {
    /// `answered` or `expired`.
    pub event: String,
    /// `approve`, `deny` or `answer` (answered only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// A deny's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An answer's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `cancelled`, `resolved`, `timed_out`, `exited` or `overflow`
    /// (expired only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&ApprovalOutcome> for WireOutcome {
    fn from(o: &ApprovalOutcome) -> Self {
        let mut w = WireOutcome {
            event: String::new(),
            decision: None,
            message: None,
            text: None,
            reason: None,
        };
        match o {
            ApprovalOutcome::Answered { decision } => {
                w.event = "answered".into();
                w.decision = Some(decision.as_str().into());
                match decision {
                    Decision::Approve => {}
                    Decision::Deny { message } => w.message = message.clone(),
                    Decision::Answer { text } => w.text = Some(text.clone()),
                }
            }
            ApprovalOutcome::Expired { reason } => {
                w.event = "expired".into();
                w.reason = Some(reason.as_str().into());
            }
        }
        w
    }
}

/// An approval as `colibri fold --json` reports it: where it was asked,
/// and how it ended (no `outcome`: still pending at the end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoldApproval {
    pub id: String,
    /// `tool_permission`, `confirm`, `select` or `input`.
    pub kind: String,
    /// `hook_output` when the reply goes to a waiting hook rather than the
    /// agent's input; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The line that asked.
    pub line: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<WireOutcome>,
    /// The line that closed it (0: the exit, an answer, a timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_line: Option<u64>,
}

impl From<&Approval> for FoldApproval {
    fn from(a: &Approval) -> Self {
        FoldApproval {
            id: a.id.clone(),
            kind: a.kind.as_str().into(),
            channel: match a.channel {
                AnswerChannel::AgentInput => None,
                other => Some(other.as_str().into()),
            },
            request_id: a.request_id.clone(),
            tool: a.tool.clone(),
            summary: a.summary.clone(),
            title: a.title.clone(),
            message: a.message.clone(),
            options: a.options.clone(),
            line: a.line,
            outcome: None,
            closed_line: None,
        }
    }
}

/// Folds a pane's approval events into one entry per approval, in the
/// order they were asked.
pub fn fold_approvals(events: &[ApprovalEvent]) -> Vec<FoldApproval> {
    let mut out: Vec<FoldApproval> = Vec::new();
    for e in events {
        match e {
            ApprovalEvent::Opened(a) => out.push(FoldApproval::from(a)),
            ApprovalEvent::Closed {
                approval,
                outcome,
                line,
                ..
            } => {
                let idx = match out.iter().rposition(|f| f.id == approval.id) {
                    Some(i) => i,
                    // Its opening was dropped before it was drained.
                    None => {
                        out.push(FoldApproval::from(approval));
                        out.len() - 1
                    }
                };
                out[idx].outcome = Some(WireOutcome::from(outcome));
                out[idx].closed_line = Some(*line);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The daemon's commands and events

/// A pending approval as `approvals`, snapshot v2 and the `approval_opened`
/// event show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireApproval {
    pub id: String,
    pub pane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `tool_permission`, `confirm`, `select` or `input`.
    pub kind: String,
    /// `agent_input` or `hook_output`.
    pub channel: String,
    /// One line saying what is asked.
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    pub asked_at: String,
    /// When the harness (or the waiting hook) gives up on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Pending longer than `[approvals] escalate_after`.
    #[serde(default)]
    pub escalated: bool,
    /// An agent's own request (`channel: reply`): the task it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    /// An agent's own request: what it expects the operation to cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens: Option<u64>,
}

impl WireApproval {
    pub fn new(a: &Approval, pane: &str, name: Option<&str>, escalated: bool) -> WireApproval {
        WireApproval {
            id: a.id.clone(),
            pane: pane.to_string(),
            name: name.map(str::to_string),
            kind: a.kind.as_str().into(),
            channel: a.channel.as_str().into(),
            question: a.question(),
            tool: a.tool.clone(),
            summary: a.summary.clone(),
            title: a.title.clone(),
            message: a.message.clone(),
            options: a.options.clone(),
            asked_at: a.asked_at.to_rfc3339(),
            expires_at: a.expires_at.map(|t| t.to_rfc3339()),
            escalated,
            task_id: a.task_id,
            estimated_tokens: a.estimated_tokens,
        }
    }
}

/// `approvals`: optionally one pane's only, a page at a time (oldest
/// first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsArgs {
    /// A pane (name, id or id prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The `next` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many (and at most [`super::PAGE_ITEMS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsReply {
    pub approvals: Vec<WireApproval>,
    /// More wait: ask again with `after` set to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The control plane's history (the seed's `approved`): the latest
    /// approvals that ended, answered or not, oldest first, the caller's
    /// own only; on the first page (no `after`) only.
    #[serde(default)]
    pub approved: Vec<WireApprovalStatus>,
}

/// An approval as an agent follows it: pending, or how it ended. The reply
/// to `approval-request` and the items of `approvals`' `approved` history
/// (the control-plane seed's fields: `approval_id`, `operation`,
/// `operator_approved`, `approved_at`, with colibri's beside them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireApprovalStatus {
    pub approval_id: String,
    pub pane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What was asked: an agent's operation, or a harness's question in
    /// one line.
    pub operation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens: Option<u64>,
    /// `agent_input`, `hook_output` or `reply` (an agent's own request).
    pub channel: String,
    /// `pending`, `approved`, `denied`, `answered` or `expired`.
    pub status: String,
    /// The operator (or the policy) let it go on: approved, or answered.
    pub operator_approved: bool,
    /// A deny's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An answer's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Why it expired: `timed_out`, `exited`, `stopped`, `resolved`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered: `operator`, `operator via board`, `policy`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub asked_at: String,
    /// When it ended (decided or expired); absent while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<String>,
}

impl WireApprovalStatus {
    /// `a`, still pending.
    pub fn pending(a: &Approval, pane: &str, name: Option<&str>) -> WireApprovalStatus {
        WireApprovalStatus {
            approval_id: a.id.clone(),
            pane: pane.to_string(),
            name: name.map(str::to_string),
            // An agent's operation whole (as bounded as it was kept), a
            // harness's question in one line.
            operation: match (a.channel, &a.title) {
                (AnswerChannel::Reply, Some(op)) => op.clone(),
                _ => a.question(),
            },
            task_id: a.task_id,
            estimated_tokens: a.estimated_tokens,
            channel: a.channel.as_str().into(),
            status: "pending".into(),
            operator_approved: false,
            message: None,
            text: None,
            reason: None,
            by: None,
            asked_at: a.asked_at.to_rfc3339(),
            approved_at: None,
        }
    }

    /// `a`, ended with `outcome` at `at` (answered by `by`). The operator's
    /// texts are kept as bounded as the agent's.
    pub fn ended(
        a: &Approval,
        pane: &str,
        name: Option<&str>,
        outcome: &ApprovalOutcome,
        by: Option<&str>,
        at: Timestamp,
    ) -> WireApprovalStatus {
        let mut w = WireApprovalStatus::pending(a, pane, name);
        w.approved_at = Some(at.to_rfc3339());
        match outcome {
            ApprovalOutcome::Answered { decision } => {
                w.by = by.map(str::to_string);
                w.operator_approved = !matches!(decision, Decision::Deny { .. });
                w.status = match decision {
                    Decision::Approve => "approved",
                    Decision::Deny { .. } => "denied",
                    Decision::Answer { .. } => "answered",
                }
                .into();
                match decision {
                    Decision::Approve => {}
                    Decision::Deny { message } => w.message = message.as_deref().map(bounded),
                    Decision::Answer { text } => w.text = Some(bounded(text)),
                }
            }
            ApprovalOutcome::Expired { reason } => {
                w.status = "expired".into();
                w.reason = Some(reason.as_str().into());
            }
        }
        w
    }
}

/// `approval-request`: an agent asks the operator to approve an operation
/// (the control-plane seed's approval request).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequestArgs {
    /// The asking agent's pane; an agent's own connection may leave it
    /// out (the kernel says who it is), and one it names must be its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
    /// What the agent wants to do.
    pub operation: String,
    /// Why.
    #[serde(default, alias = "detail", skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens: Option<u64>,
    /// Milliseconds to wait for the decision, the reply held until then (at
    /// most a day); 0 or absent: reply at once with the approval pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `approve`, `deny` and `answer`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecideArgs {
    /// An approval id, or a pane (name, id or id prefix) that has exactly
    /// one pending approval.
    pub approval: String,
    /// `deny`: the reason given to the agent (Claude shows it to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `answer`: free text, or a select's option (its text or 1-based number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// How the operator answered, for the record (`board`, `phone action`):
    /// the answer's `by` reads `operator via phone action`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecideReply {
    pub approval: String,
    pub pane: String,
    /// `approve`, `deny` or `answer`.
    pub decision: String,
    /// `agent_input` (the reply was queued on the agent's input) or
    /// `hook_output` (handed to the waiting `colibri hook`).
    pub channel: String,
    /// Bytes written.
    pub bytes: usize,
}

/// `hook`: a Claude Code hook input, and how long its sender waits for the
/// operator when it asks for a permission.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookArgs {
    pub agent_id: String,
    pub event: serde_json::Value,
    /// Milliseconds to wait for a decision; 0 or absent: do not wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// The reply to `hook`, sent when the approval it opened is decided, or at
/// once when there is nothing to wait for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookReply {
    /// The approval the hook input opened, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// `approve` or `deny`; absent when nobody decided (timed out, or the
    /// permission was settled otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// The exact line the hook prints for Claude Code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Why no decision came: `timed_out`, `resolved`, `exited`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
