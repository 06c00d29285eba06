//! The approval state the daemon keeps beyond the panes: the `[approvals]`
//! policy, who is answering, the `hook` requests held open for a decision,
//! and which approvals were escalated or answered by default.
//!
//! An owner below the daemon's verbs: it knows connections only by id, so
//! `settings`, the views and streamed replies can read it without the loop
//! (`approvals.rs` holds the verbs that act on it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use crate::daemon::source::ConnId;

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

/// A `hook` request waiting for its approval's decision.
#[derive(Clone, Debug)]
pub(crate) struct Waiter {
    pub(crate) conn: ConnId,
    pub(crate) rid: Option<Value>,
}

/// The daemon's approval state beyond what the panes hold.
#[derive(Debug, Default)]
pub struct ApprovalDesk {
    pub(crate) waiters: BTreeMap<String, Waiter>,
    pub(crate) escalated: BTreeSet<String>,
    pub(crate) defaulted: BTreeSet<String>,
    /// Who is answering the approval being closed now; taken by its event.
    pub(crate) answering: Option<Answerer>,
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
