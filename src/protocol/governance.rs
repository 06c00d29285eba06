//! Governance on the wire: policy verdicts as `colibri fold` prints them
//! and as the `verdict` watch event carries them.

use serde::{Deserialize, Serialize};

use crate::core::policy::{Action, PolicyKind, Target, Verdict};

/// One policy verdict. `line` is the pane's non-blank line that caused it
/// (in `colibri fold`, the line of the input file); 0 for a timed resume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireVerdict {
    pub line: u64,
    pub policy: PolicyKind,
    /// The budget's name, the loop type (`action_repeat`, `error_loop`,
    /// `token_burn`, `thrashing`, `backoff`) or the guard rule.
    pub rule: String,
    /// `warn`, `pause`, `message`, `resume`, `kill`, `deny` or `escalate`.
    pub action: String,
    /// Whom it acts on: `pane`, `name:N`, `runtime:R` or `all`.
    pub target: String,
    /// A pause's timed resume (RFC 3339); absent: until an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The text a `message` verdict writes to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub reason: String,
    /// The file a `write_outside_scope` verdict is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl From<&Verdict> for WireVerdict {
    fn from(v: &Verdict) -> Self {
        let (until, text) = match &v.action {
            Action::Pause { until } => (until.map(|t| t.to_rfc3339()), None),
            Action::Message { text } => (None, Some(text.clone())),
            _ => (None, None),
        };
        WireVerdict {
            line: v.line,
            policy: v.policy,
            rule: v.rule.clone(),
            action: v.action.as_str().to_string(),
            target: match &v.target {
                Target::Pane(_) => "pane".to_string(),
                Target::Name(n) => format!("name:{n}"),
                Target::Role(r) => format!("role:{r}"),
                Target::Runtime(r) => format!("runtime:{r}"),
                Target::All => "all".to_string(),
            },
            until,
            text,
            reason: v.reason.clone(),
            path: v.path.clone(),
        }
    }
}

impl WireVerdict {
    pub fn policy_name(&self) -> &'static str {
        match self.policy {
            PolicyKind::Budget => "budget",
            PolicyKind::Loop => "loop",
            PolicyKind::Guard => "guard",
        }
    }
}

/// Why a pane is paused: one hold, as a v2 snapshot lists it. A pane's
/// process continues once no hold is left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireHold {
    /// `operator`, `guard`, `loop` or `budget`.
    pub by: String,
    /// The guard rule, the loop type or the budget's name; absent for
    /// the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The verdict's reason (what the agent did), or who paused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the hold began (RFC 3339).
    pub since: String,
    /// A timed resume (RFC 3339); absent: until an operator resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// `budget`: show every budget ledger, or act on one budget first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetArgs {
    /// `show` (the default), `raise` (set the cap to `cap`) or `resume`
    /// (let the budget's paused agents spend on until its period rolls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The budget's name (`[budgets.NAME]`); needed by `raise` and `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<f64>,
}

/// One budget ledger's standing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireBudget {
    pub budget: String,
    /// What the budget counts: `tokens`, `usd` or `bytes` (of output).
    #[serde(default)]
    pub unit: String,
    /// The scope key: the pane id, the name, the runtime, or empty for a
    /// global budget.
    pub key: String,
    pub spent: f64,
    pub cap: f64,
    pub paused: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetReply {
    pub budgets: Vec<WireBudget>,
    /// Ledgers this request resumed (their agents continue).
    pub resumed: usize,
}
