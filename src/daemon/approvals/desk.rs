//! The approval state the daemon keeps beyond the panes: the `[approvals]`
//! policy, who is answering, the requests held open for a decision (`hook`,
//! `approval-request`), which approvals were escalated or answered by
//! default, and the history of the latest that ended.
//!
//! An owner below the daemon's verbs: it knows connections only by id, so
//! `settings`, the views and streamed replies can read it without the loop
//! (`approvals.rs` holds the verbs that act on it).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde_json::Value;

use crate::daemon::source::ConnId;
use crate::protocol::WireApprovalStatus;

/// The ended approvals `approvals` reports (its `approved` history): the
/// latest, every pane's together. Memory only, so since colibrid started.
pub const HISTORY_KEPT: usize = 200;

/// What the `[approvals]` section asks of approvals nobody answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Raise an escalation (alert and watch event) after this long.
    pub escalate_after: Option<Duration>,
    /// Deny by default this long after the escalation (`default_answer =
    /// "deny"`); `None`: never answer by default.
    pub deny_after: Option<Duration>,
}

impl ApprovalPolicy {
    pub fn from_section(s: &crate::config::ApprovalsSection) -> ApprovalPolicy {
        let escalate_after = (!s.escalate_after.is_zero()).then_some(s.escalate_after);
        let deny_after =
            (escalate_after.is_some() && s.default_answer == "deny").then_some(s.default_after);
        ApprovalPolicy {
            escalate_after,
            deny_after,
        }
    }
}

/// Who answered: `operator`, `jail:NAME` or `policy`, and the peer's uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answerer {
    pub by: String,
    pub uid: Option<u32>,
}

impl Answerer {
    pub fn policy() -> Answerer {
        Answerer {
            by: "policy".into(),
            uid: None,
        }
    }
}

/// A request (`hook`, `approval-request`) waiting for its approval's
/// decision.
#[derive(Clone, Debug)]
pub(crate) struct Waiter {
    pub(crate) conn: ConnId,
    pub(crate) rid: Option<Value>,
}

/// An ended approval, and whose it was (for who may see it).
#[derive(Clone, Debug)]
pub struct Ended {
    pub status: WireApprovalStatus,
    /// The jail its pane ran in, if any.
    pub jail: Option<String>,
}

/// The daemon's approval state beyond what the panes hold.
#[derive(Debug, Default)]
pub struct ApprovalDesk {
    pub(crate) waiters: BTreeMap<String, Waiter>,
    pub(crate) escalated: BTreeSet<String>,
    pub(crate) defaulted: BTreeSet<String>,
    /// Who is answering the approval being closed now; taken by its event.
    pub(crate) answering: Option<Answerer>,
    /// The latest ended approvals, oldest first, at most [`HISTORY_KEPT`].
    history: VecDeque<Ended>,
}

impl ApprovalDesk {
    pub fn escalated(&self, id: &str) -> bool {
        self.escalated.contains(id)
    }

    /// Says who answers the approval closed next (its event names them).
    pub fn answered_by(&mut self, who: Answerer) {
        self.answering = Some(who);
    }

    /// The connections a `hook` request holds open for an answer: they wait
    /// on us, not we on them, so they are never idle.
    /// Whether `conn` waits for an approval's decision.
    pub fn is_waiting(&self, conn: ConnId) -> bool {
        self.waiters.values().any(|w| w.conn == conn)
    }

    /// A closed connection waits for nothing: its slot may be reused.
    pub fn forget_conn(&mut self, conn: ConnId) {
        self.waiters.retain(|_, w| w.conn != conn);
    }

    /// Keeps an ended approval in the history, dropping the oldest past
    /// [`HISTORY_KEPT`].
    pub fn remember(&mut self, ended: Ended) {
        if self.history.len() >= HISTORY_KEPT {
            self.history.pop_front();
        }
        self.history.push_back(ended);
    }

    /// The history entries `keep` selects, oldest first.
    pub fn history(&self, keep: impl Fn(&Ended) -> bool) -> Vec<WireApprovalStatus> {
        self.history
            .iter()
            .filter(|e| keep(e))
            .map(|e| e.status.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApprovalsSection;

    fn section(escalate: u64, answer: &str, after: u64) -> ApprovalsSection {
        ApprovalsSection {
            escalate_after: Duration::from_secs(escalate),
            default_answer: answer.into(),
            default_after: Duration::from_secs(after),
        }
    }

    fn ended(n: usize, pane: &str, jail: Option<&str>) -> Ended {
        use crate::core::approval::{AgentRequest, Approval, ApprovalOutcome, Decision};
        use crate::core::time::Timestamp;
        let req = AgentRequest {
            operation: format!("op {n}"),
            reasoning: None,
            task_id: None,
            estimated_tokens: None,
        };
        let at = Timestamp::from_millis(1_779_883_200_000);
        let a = Approval::from_agent(format!("{pane}-{n}"), &req, at, 0);
        let outcome = ApprovalOutcome::Answered {
            decision: Decision::Approve,
        };
        Ended {
            status: WireApprovalStatus::ended(&a, pane, None, &outcome, Some("operator"), at),
            jail: jail.map(str::to_string),
        }
    }

    #[test]
    fn the_history_keeps_the_latest() {
        let mut desk = ApprovalDesk::default();
        for n in 0..HISTORY_KEPT + 5 {
            let (pane, jail) = if n % 2 == 0 {
                ("p1", None)
            } else {
                ("p2", Some("j1"))
            };
            desk.remember(ended(n, pane, jail));
        }
        let all = desk.history(|_| true);
        assert_eq!(all.len(), HISTORY_KEPT);
        assert_eq!(all[0].approval_id, "p2-5", "the oldest five dropped");
        assert_eq!(all[0].status, "approved");
        assert!(all[0].operator_approved);
        let jailed = desk.history(|e| e.jail.as_deref() == Some("j1"));
        assert_eq!(jailed.len(), HISTORY_KEPT / 2);
        assert!(jailed.iter().all(|e| e.pane == "p2"));
    }

    #[test]
    fn the_policy_denies_by_default_only_after_an_escalation() {
        let p = ApprovalPolicy::from_section(&section(60, "deny", 30));
        assert_eq!(p.escalate_after, Some(Duration::from_secs(60)));
        assert_eq!(p.deny_after, Some(Duration::from_secs(30)));
        // No escalation: nothing is answered by default either.
        let p = ApprovalPolicy::from_section(&section(0, "deny", 30));
        assert_eq!(p, ApprovalPolicy::default());
        let p = ApprovalPolicy::from_section(&section(60, "none", 30));
        assert_eq!(p.deny_after, None);
    }
}
