//! The wire form of approvals (see `core::approval` for what they are).
//!
//! Kinds, channels, decisions and reasons are printed as the snake-case
//! names their `as_str` gives.

use serde::{Deserialize, Serialize};

use crate::core::approval::{AnswerChannel, Approval, ApprovalEvent, ApprovalOutcome, Decision};

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
