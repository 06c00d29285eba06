//! The control plane's wire types: `state`, `tasks`, `task-*`, `approvals`
//! and `activity` (after the control-plane seed's HTTP API, over the
//! socket). An agent names itself with `pane` (its `COLIBRI_PANE_ID`); the
//! daemon then shows it only its own budget, tasks and approvals.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::state::AgentState;
use crate::core::tasks::{Priority, Task, TaskStatus};

/// `state`, `tasks`, `approvals`: who asks. Without `pane` (operator
/// socket only) the reply covers every pane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallerArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TasksArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
    /// One task by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    /// Only tasks in this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// Tasks after this id (the `next` of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// At most this many (and at most [`super::PAGE_ITEMS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskAddArgs {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Only the agents of this jail may claim it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskClaimArgs {
    /// The claiming agent's pane id (or name).
    pub pane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `task-ack`, `task-done`, `task-fail`, `task-cancel`. `pane` is the
/// acting agent; without it (operator socket only) the operator acts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskActArgs {
    pub task_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
    /// `task-done`: the result; `task-fail`: the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `task-move`: the task goes to the top or the bottom of the queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskMoveArgs {
    pub task_id: u64,
    pub to: crate::core::tasks::Place,
}

/// The seed's three activity posts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityType {
    TaskCompleted,
    ApprovalRequest,
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivityArgs {
    pub pane: String,
    pub event_type: ActivityType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    /// What was done, the operation to approve, or the error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `approval_request`: why; `error`: the action taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// A budget as the policy engine reports it; `configured: false` (and no
/// figures) while no budget applies to the pane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireBudget {
    pub configured: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_today: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    pub hard_limit_exceeded: bool,
}

/// What a pane has spent since it was created (all its runs), whether or
/// not a budget counts it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PaneSpend {
    /// Input, output and cache-write tokens (what a token budget counts).
    pub tokens: u64,
    /// The harness's own cost figures, else its tokens priced by
    /// `[prices]` (0 when neither is known).
    pub usd: f64,
    /// Bytes the agent wrote on its terminal.
    pub output_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentControlState {
    /// The seed's agent id: the agent's name, else its pane id.
    #[serde(default)]
    pub id: String,
    pub pane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The control plane's role, when it has one (`null` otherwise).
    #[serde(default)]
    pub role: Option<String>,
    /// Given the heartbeat prompt on a schedule (`heartbeat`).
    #[serde(default)]
    pub heartbeat_enabled: bool,
    pub state: AgentState,
    /// Running, not paused, not exited.
    pub active: bool,
    pub paused: bool,
    pub budget: WireBudget,
    #[serde(default)]
    pub spend: PaneSpend,
    /// The task the agent holds (claimed or working).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u64>,
    /// The seed's health word while it runs (`core::health`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::core::health::Health>,
}

/// The fleet's token budget (the seed's `budget`): the global token
/// budget's figures once one is configured (`configured: false` and no
/// figures otherwise), and each role's allotment by its `role:ROLE` token
/// budget (empty without one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireFleetBudget {
    /// The global token budget's figures, at the top level as the seed
    /// has them.
    #[serde(flatten)]
    pub figures: WireBudget,
    /// Tokens per role.
    #[serde(default)]
    pub allocation: std::collections::BTreeMap<String, u64>,
    /// The allotments together (above `daily_tokens`: the roles may spend
    /// more between them than the fleet may).
    #[serde(default)]
    pub allocated: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateReply {
    pub agents: Vec<AgentControlState>,
    #[serde(default)]
    pub budget: WireFleetBudget,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireTask {
    pub task_id: u64,
    pub title: String,
    pub description: String,
    pub priority: Priority,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    pub status: TaskStatus,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_due: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    pub releases: u32,
    /// Where `task-move` put it: below 0 first, above 0 last; absent (0)
    /// for a task never moved.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rank: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl From<&Task> for WireTask {
    fn from(t: &Task) -> Self {
        WireTask {
            task_id: t.id,
            title: t.spec.title.clone(),
            description: t.spec.description.clone(),
            priority: t.spec.priority,
            role: t.spec.role.clone(),
            context: t.spec.context.clone(),
            jail: t.spec.jail.clone(),
            status: t.status,
            created_at: t.created_at.to_rfc3339(),
            assigned_to: t.claimed_by.clone(),
            claimed_at: t.claimed_at.map(|x| x.to_rfc3339()),
            ack_due: t.ack_due.map(|x| x.to_rfc3339()),
            finished_at: t.finished_at.map(|x| x.to_rfc3339()),
            outcome: t.outcome.clone(),
            releases: t.releases,
            rank: t.rank,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TasksReply {
    pub tasks: Vec<WireTask>,
    /// Tasks waiting for a claim (all of them, whoever asks).
    pub pending: usize,
    /// More match: ask again with `after` set to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// `task-claim`: the task claimed, or `null` when none fits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskReply {
    pub task: Option<WireTask>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivityReply {
    pub seq: u64,
    /// `approval_request`: the approval it opened, answered like a
    /// harness's (`approvals` shows it pending, then in its history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
}
