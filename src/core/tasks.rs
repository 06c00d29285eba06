//! The control plane's task queue: a pure state machine.
//!
//! Operators add tasks; an agent claims one, acknowledges it within the
//! acknowledgement window (Coleo's three-minute handshake) and completes or
//! fails it. A claim left unacknowledged past its deadline is released, so a
//! crashed or confused agent never sits on work.
//!
//! Every change is a [`TaskEvent`], and [`TaskQueue::apply`] is the one
//! place an event changes the queue: the daemon appends each event to its
//! journal and replays the journal at start through the same `apply`, so a
//! restarted daemon holds the queue it had. Time is an argument, never read.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::time::Timestamp;

/// Coleo's handshake: a claim must be acknowledged within three minutes.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Medium,
    High,
    Urgent,
}

impl Priority {
    pub fn parse(s: &str) -> Option<Priority> {
        match s {
            "low" => Some(Priority::Low),
            "medium" => Some(Priority::Medium),
            "high" => Some(Priority::High),
            "urgent" => Some(Priority::Urgent),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }
}

/// Where a task is in its life. `Claimed` is Coleo's `task_assigned`
/// (awaiting the acknowledgement), `Working` its `working`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Pending,
    Claimed,
    Working,
    Done,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Working => "working",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// What an operator gives when adding a task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NewTask {
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub priority: Priority,
    /// Only agents claiming for this role (or for no role) get it.
    #[serde(default)]
    pub role: Option<String>,
    /// Free-form JSON the agent reads (the seed's `context`).
    #[serde(default)]
    pub context: Option<Value>,
    /// Only the agents of this jail get it; a task without one is anyone's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub id: u64,
    pub spec: NewTask,
    pub status: TaskStatus,
    pub created_at: Timestamp,
    /// The pane that holds the claim (kept after it finished, for audit).
    pub claimed_by: Option<String>,
    pub claimed_at: Option<Timestamp>,
    /// When an unacknowledged claim is released.
    pub ack_due: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// The agent's result (done) or reason (failed).
    pub outcome: Option<String>,
    /// Claims released for want of an acknowledgement.
    pub releases: u32,
    /// Where an operator moved it (`task-move`): below zero before every
    /// task not moved, above zero after them; 0 for a task never moved.
    pub rank: i64,
}

/// Where `task-move` puts a task in the queue's order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    Top,
    Bottom,
}

impl Task {
    /// The order in which pending tasks are taken, smallest first: where an
    /// operator moved it, then the most urgent, then the oldest. Claims
    /// (`TaskQueue::claim`) and the orchestrator's dispatch both use it.
    pub fn queue_order(&self) -> (i64, std::cmp::Reverse<Priority>, u64) {
        (self.rank, std::cmp::Reverse(self.spec.priority), self.id)
    }

    /// Whether an agent in `jail` (`None`: on the host) may take it: a
    /// task for a jail is its agents' alone, one for none is anyone's.
    pub fn open_to(&self, jail: Option<&str>) -> bool {
        self.spec.jail.is_none() || self.spec.jail.as_deref() == jail
    }
}

/// One change to the queue; the journal's line. Times are milliseconds
/// since the epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum TaskEvent {
    Added {
        id: u64,
        at: u64,
        task: NewTask,
    },
    Claimed {
        id: u64,
        at: u64,
        by: String,
        ack_due: u64,
    },
    /// The orchestrator claimed it on `by`'s behalf and wrote it to the
    /// agent's input (`core::dispatch`): a claim, marked as the daemon's.
    Dispatched {
        id: u64,
        at: u64,
        by: String,
        ack_due: u64,
    },
    Acked {
        id: u64,
        at: u64,
    },
    Done {
        id: u64,
        at: u64,
        result: Option<String>,
    },
    Failed {
        id: u64,
        at: u64,
        reason: Option<String>,
    },
    Cancelled {
        id: u64,
        at: u64,
    },
    Released {
        id: u64,
        at: u64,
    },
    /// An operator moved it to the top or the bottom of the queue: its
    /// new rank ([`Task::rank`]).
    Moved {
        id: u64,
        at: u64,
        rank: i64,
    },
}

impl TaskEvent {
    pub fn id(&self) -> u64 {
        match self {
            TaskEvent::Added { id, .. }
            | TaskEvent::Claimed { id, .. }
            | TaskEvent::Dispatched { id, .. }
            | TaskEvent::Acked { id, .. }
            | TaskEvent::Done { id, .. }
            | TaskEvent::Failed { id, .. }
            | TaskEvent::Cancelled { id, .. }
            | TaskEvent::Released { id, .. }
            | TaskEvent::Moved { id, .. } => *id,
        }
    }
}

/// Who asks for a change: an agent (its pane id) or the operator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Actor<'a> {
    Operator,
    Agent(&'a str),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("no task {0}")]
    NotFound(u64),
    #[error("task {id} is claimed by another agent")]
    NotYours { id: u64 },
    #[error("only the operator may {0} a task")]
    OperatorOnly(&'static str),
    #[error("task {id} is {status}, not {wanted}")]
    WrongStatus {
        id: u64,
        status: &'static str,
        wanted: &'static str,
    },
    #[error("agent {0} already holds task {1}")]
    AlreadyHolding(String, u64),
    #[error("a task needs a title")]
    NoTitle,
    #[error("the task's context nests {0} levels deep; at most {MAX_CONTEXT_DEPTH} are taken")]
    ContextTooDeep(usize),
    #[error("the task's context is {0} bytes as JSON; at most {MAX_CONTEXT_BYTES} are taken")]
    ContextTooLarge(usize),
    #[error("the task's {field} is {bytes} bytes; at most {max} are taken")]
    TooLong {
        field: &'static str,
        bytes: usize,
        max: usize,
    },
}

/// The longest task title taken: it is a line in tables and alerts.
pub const MAX_TITLE_BYTES: usize = 1 << 10;
/// The longest description, result or failure reason taken: every `tasks`
/// reply carries them, and agents write them.
pub const MAX_TEXT_BYTES: usize = 64 << 10;

fn fits(field: &'static str, text: &str, max: usize) -> Result<(), TaskError> {
    if text.len() > max {
        return Err(TaskError::TooLong {
            field,
            bytes: text.len(),
            max,
        });
    }
    Ok(())
}

/// The deepest task context taken: every reply that carries a task (a
/// `tasks` list wraps it five levels deep) must parse in a standard client
/// (serde_json stops at 128 levels; a context of 125 made a claimed task
/// that colibri's own client could not read).
pub const MAX_CONTEXT_DEPTH: usize = 32;
/// The largest task context taken, as JSON text.
pub const MAX_CONTEXT_BYTES: usize = 64 << 10;

/// How deep `v` nests (a scalar is 0). `v` came from a parser with a
/// recursion limit, so this recursion is bounded too.
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[derive(Clone, Debug, Default)]
pub struct TaskQueue {
    tasks: BTreeMap<u64, Task>,
    next_id: u64,
}

fn ms(t: Timestamp) -> u64 {
    t.as_millis()
}

impl TaskQueue {
    pub fn new() -> TaskQueue {
        TaskQueue {
            tasks: BTreeMap::new(),
            next_id: 1,
        }
    }

    pub fn get(&self, id: u64) -> Option<&Task> {
        self.tasks.get(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// The task an agent holds (claimed or working), if any.
    pub fn held_by(&self, pane: &str) -> Option<&Task> {
        self.tasks.values().find(|t| {
            matches!(t.status, TaskStatus::Claimed | TaskStatus::Working)
                && t.claimed_by.as_deref() == Some(pane)
        })
    }

    /// The earliest acknowledgement deadline, for the daemon's timer.
    pub fn next_ack_due(&self) -> Option<Timestamp> {
        self.tasks
            .values()
            .filter(|t| t.status == TaskStatus::Claimed)
            .filter_map(|t| t.ack_due)
            .min()
    }

    /// The one place an event changes the queue (live and on replay).
    /// Events that do not fit (a journal edited by hand) are ignored.
    pub fn apply(&mut self, ev: &TaskEvent) {
        if let TaskEvent::Added { id, at, task } = ev {
            self.next_id = self.next_id.max(id + 1);
            self.tasks.insert(
                *id,
                Task {
                    id: *id,
                    spec: task.clone(),
                    status: TaskStatus::Pending,
                    created_at: Timestamp::from_millis(*at),
                    claimed_by: None,
                    claimed_at: None,
                    ack_due: None,
                    finished_at: None,
                    outcome: None,
                    releases: 0,
                    rank: 0,
                },
            );
            return;
        }
        let Some(t) = self.tasks.get_mut(&ev.id()) else {
            return;
        };
        match ev {
            TaskEvent::Added { .. } => {}
            TaskEvent::Claimed {
                at, by, ack_due, ..
            }
            | TaskEvent::Dispatched {
                at, by, ack_due, ..
            } => {
                t.status = TaskStatus::Claimed;
                t.claimed_by = Some(by.clone());
                t.claimed_at = Some(Timestamp::from_millis(*at));
                t.ack_due = Some(Timestamp::from_millis(*ack_due));
            }
            TaskEvent::Acked { .. } => {
                t.status = TaskStatus::Working;
                t.ack_due = None;
            }
            TaskEvent::Done { at, result, .. } => {
                t.status = TaskStatus::Done;
                t.ack_due = None;
                t.finished_at = Some(Timestamp::from_millis(*at));
                t.outcome = result.clone();
            }
            TaskEvent::Failed { at, reason, .. } => {
                t.status = TaskStatus::Failed;
                t.ack_due = None;
                t.finished_at = Some(Timestamp::from_millis(*at));
                t.outcome = reason.clone();
            }
            TaskEvent::Cancelled { at, .. } => {
                t.status = TaskStatus::Cancelled;
                t.ack_due = None;
                t.finished_at = Some(Timestamp::from_millis(*at));
            }
            TaskEvent::Released { .. } => {
                t.status = TaskStatus::Pending;
                t.claimed_by = None;
                t.claimed_at = None;
                t.ack_due = None;
                t.releases += 1;
            }
            TaskEvent::Moved { rank, .. } => t.rank = *rank,
        }
    }

    /// Forgets the finished tasks (done, failed, cancelled) but the `keep`
    /// that finished last, and never the newest task, whose id numbers the
    /// next (a queue that ran for months kept every task it ever had).
    /// Returns how many it forgot.
    pub fn forget_finished(&mut self, keep: usize) -> usize {
        let newest = self.tasks.keys().next_back().copied();
        let mut finished: Vec<(Timestamp, u64)> = self
            .tasks
            .values()
            .filter(|t| t.status.is_final() && Some(t.id) != newest)
            .map(|t| (t.finished_at.unwrap_or(t.created_at), t.id))
            .collect();
        if finished.len() <= keep {
            return 0;
        }
        finished.sort_unstable();
        let drop = finished.len() - keep;
        for (_, id) in &finished[..drop] {
            self.tasks.remove(id);
        }
        drop
    }

    /// Finished tasks held (see [`TaskQueue::forget_finished`]).
    pub fn finished_count(&self) -> usize {
        self.tasks.values().filter(|t| t.status.is_final()).count()
    }

    /// Events that rebuild the queue as it is, task by task: what a
    /// compacted journal holds.
    pub fn events(&self) -> Vec<TaskEvent> {
        let mut out = Vec::new();
        for t in self.tasks.values() {
            out.push(TaskEvent::Added {
                id: t.id,
                at: ms(t.created_at),
                task: t.spec.clone(),
            });
            if t.rank != 0 {
                out.push(TaskEvent::Moved {
                    id: t.id,
                    at: ms(t.created_at),
                    rank: t.rank,
                });
            }
            let at = ms(t.claimed_at.unwrap_or(t.created_at));
            for _ in 0..t.releases {
                out.push(TaskEvent::Released { id: t.id, at });
            }
            if let (Some(by), Some(claimed)) = (&t.claimed_by, t.claimed_at) {
                out.push(TaskEvent::Claimed {
                    id: t.id,
                    at: ms(claimed),
                    by: by.clone(),
                    ack_due: ms(t.ack_due.unwrap_or(claimed)),
                });
                // Only a working task is known to have been acknowledged:
                // a finished one may have finished straight from its claim,
                // and the journal is the audit trail.
                if t.status == TaskStatus::Working {
                    out.push(TaskEvent::Acked {
                        id: t.id,
                        at: ms(claimed),
                    });
                }
            }
            let finished = ms(t.finished_at.unwrap_or(t.created_at));
            match t.status {
                TaskStatus::Done => out.push(TaskEvent::Done {
                    id: t.id,
                    at: finished,
                    result: t.outcome.clone(),
                }),
                TaskStatus::Failed => out.push(TaskEvent::Failed {
                    id: t.id,
                    at: finished,
                    reason: t.outcome.clone(),
                }),
                TaskStatus::Cancelled => out.push(TaskEvent::Cancelled {
                    id: t.id,
                    at: finished,
                }),
                TaskStatus::Pending | TaskStatus::Claimed | TaskStatus::Working => {}
            }
        }
        out
    }

    fn commit(&mut self, ev: TaskEvent) -> TaskEvent {
        self.apply(&ev);
        ev
    }

    pub fn add(&mut self, task: NewTask, now: Timestamp) -> Result<TaskEvent, TaskError> {
        if task.title.trim().is_empty() {
            return Err(TaskError::NoTitle);
        }
        fits("title", &task.title, MAX_TITLE_BYTES)?;
        fits("description", &task.description, MAX_TEXT_BYTES)?;
        for (field, text) in [("role", &task.role), ("jail", &task.jail)] {
            fits(field, text.as_deref().unwrap_or_default(), MAX_TITLE_BYTES)?;
        }
        if let Some(context) = &task.context {
            let depth = json_depth(context);
            if depth > MAX_CONTEXT_DEPTH {
                return Err(TaskError::ContextTooDeep(depth));
            }
            let bytes = serde_json::to_string(context).map_or(usize::MAX, |t| t.len());
            if bytes > MAX_CONTEXT_BYTES {
                return Err(TaskError::ContextTooLarge(bytes));
            }
        }
        let id = self.next_id.max(1);
        Ok(self.commit(TaskEvent::Added {
            id,
            at: ms(now),
            task,
        }))
    }

    /// Claims the most urgent pending task (oldest first among equals) for
    /// `pane`, restricted to `role` (tasks for that role or for none) when
    /// given, and to the tasks its jail may take ([`Task::open_to`]).
    /// `None` when nothing fits. One task per agent at a time.
    pub fn claim(
        &mut self,
        pane: &str,
        role: Option<&str>,
        jail: Option<&str>,
        now: Timestamp,
        ack_timeout: Duration,
    ) -> Result<Option<TaskEvent>, TaskError> {
        if let Some(held) = self.held_by(pane) {
            return Err(TaskError::AlreadyHolding(pane.to_string(), held.id));
        }
        let fits = |t: &&Task| {
            t.status == TaskStatus::Pending
                && t.open_to(jail)
                && match (role, t.spec.role.as_deref()) {
                    (Some(want), Some(has)) => want == has,
                    _ => true,
                }
        };
        let Some(id) = self
            .tasks
            .values()
            .filter(fits)
            .min_by_key(|t| t.queue_order())
            .map(|t| t.id)
        else {
            return Ok(None);
        };
        Ok(Some(self.commit(TaskEvent::Claimed {
            id,
            at: ms(now),
            by: pane.to_string(),
            ack_due: ms(now.plus(ack_timeout)),
        })))
    }

    /// Claims pending task `id` on `pane`'s behalf (the orchestrator's
    /// choice, `core::dispatch::plan`): the same claim and deadline as
    /// [`TaskQueue::claim`], journalled as [`TaskEvent::Dispatched`].
    pub fn dispatch(
        &mut self,
        id: u64,
        pane: &str,
        now: Timestamp,
        ack_timeout: Duration,
    ) -> Result<TaskEvent, TaskError> {
        if let Some(held) = self.held_by(pane) {
            return Err(TaskError::AlreadyHolding(pane.to_string(), held.id));
        }
        let t = self.tasks.get(&id).ok_or(TaskError::NotFound(id))?;
        if t.status != TaskStatus::Pending {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "pending",
            });
        }
        Ok(self.commit(TaskEvent::Dispatched {
            id,
            at: ms(now),
            by: pane.to_string(),
            ack_due: ms(now.plus(ack_timeout)),
        }))
    }

    fn owned(&self, id: u64, actor: Actor<'_>) -> Result<&Task, TaskError> {
        let t = self.tasks.get(&id).ok_or(TaskError::NotFound(id))?;
        match actor {
            Actor::Operator => Ok(t),
            Actor::Agent(pane) if t.claimed_by.as_deref() == Some(pane) => Ok(t),
            // No agent holds it (pending, or released): not another's.
            Actor::Agent(_) if t.claimed_by.is_none() => Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "claimed by this agent",
            }),
            Actor::Agent(_) => Err(TaskError::NotYours { id }),
        }
    }

    pub fn ack(
        &mut self,
        id: u64,
        actor: Actor<'_>,
        now: Timestamp,
    ) -> Result<TaskEvent, TaskError> {
        let t = self.owned(id, actor)?;
        if t.status != TaskStatus::Claimed {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "claimed",
            });
        }
        Ok(self.commit(TaskEvent::Acked { id, at: ms(now) }))
    }

    /// Completes (`ok`) or fails a task the actor holds. A claimed task
    /// may finish without an acknowledgement: finishing acknowledges.
    pub fn finish(
        &mut self,
        id: u64,
        actor: Actor<'_>,
        ok: bool,
        note: Option<String>,
        now: Timestamp,
    ) -> Result<TaskEvent, TaskError> {
        fits(
            if ok { "result" } else { "reason" },
            note.as_deref().unwrap_or_default(),
            MAX_TEXT_BYTES,
        )?;
        let t = self.owned(id, actor)?;
        if !matches!(t.status, TaskStatus::Claimed | TaskStatus::Working) {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "claimed or working",
            });
        }
        let at = ms(now);
        Ok(self.commit(if ok {
            TaskEvent::Done {
                id,
                at,
                result: note,
            }
        } else {
            TaskEvent::Failed {
                id,
                at,
                reason: note,
            }
        }))
    }

    pub fn cancel(&mut self, id: u64, now: Timestamp) -> Result<TaskEvent, TaskError> {
        let t = self.tasks.get(&id).ok_or(TaskError::NotFound(id))?;
        if t.status.is_final() {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "open",
            });
        }
        Ok(self.commit(TaskEvent::Cancelled { id, at: ms(now) }))
    }

    /// Moves open task `id` to the top or the bottom of the queue's order
    /// ([`Task::queue_order`]): before (or after) every other open task,
    /// urgent ones included, and every task added later.
    pub fn move_to(&mut self, id: u64, to: Place, now: Timestamp) -> Result<TaskEvent, TaskError> {
        let t = self.tasks.get(&id).ok_or(TaskError::NotFound(id))?;
        if t.status.is_final() {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "open",
            });
        }
        let others = self
            .tasks
            .values()
            .filter(|o| o.id != id && !o.status.is_final())
            .map(|o| o.rank);
        let rank = match to {
            Place::Top => others.min().unwrap_or(0).min(0).saturating_sub(1),
            Place::Bottom => others.max().unwrap_or(0).max(0).saturating_add(1),
        };
        Ok(self.commit(TaskEvent::Moved {
            id,
            at: ms(now),
            rank,
        }))
    }

    /// Releases the task an agent holds (claimed or working) for another:
    /// the orchestrator's answer to a looping agent (the seed's "check
    /// relevance, reassign").
    pub fn release(&mut self, id: u64, now: Timestamp) -> Result<TaskEvent, TaskError> {
        let t = self.tasks.get(&id).ok_or(TaskError::NotFound(id))?;
        if !matches!(t.status, TaskStatus::Claimed | TaskStatus::Working) {
            return Err(TaskError::WrongStatus {
                id,
                status: t.status.as_str(),
                wanted: "claimed or working",
            });
        }
        Ok(self.commit(TaskEvent::Released { id, at: ms(now) }))
    }

    /// The claims whose acknowledgement is overdue at `now`.
    pub fn overdue(&self, now: Timestamp) -> Vec<u64> {
        self.tasks
            .values()
            .filter(|t| t.status == TaskStatus::Claimed && t.ack_due.is_some_and(|d| d <= now))
            .map(|t| t.id)
            .collect()
    }

    /// Releases every claim whose acknowledgement is overdue at `now`
    /// (the daemon releases them one at a time: `Daemon::task_ack_due`).
    #[cfg(test)]
    pub fn expire(&mut self, now: Timestamp) -> Vec<TaskEvent> {
        self.overdue(now)
            .into_iter()
            .map(|id| self.commit(TaskEvent::Released { id, at: ms(now) }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context a standard client could not read back is refused at
    /// intake, with the reason, and nothing is queued.
    #[test]
    fn texts_past_their_caps_are_refused_at_intake_and_at_the_finish() {
        let mut q = TaskQueue::default();
        let at = Timestamp::from_millis(1);
        let task = |title: String, description: String| NewTask {
            title,
            description,
            priority: Priority::Medium,
            role: None,
            context: None,
            jail: None,
        };
        let long_title = "t".repeat(MAX_TITLE_BYTES + 1);
        assert!(matches!(
            q.add(task(long_title, String::new()), at),
            Err(TaskError::TooLong { field: "title", .. })
        ));
        let long_text = "d".repeat(MAX_TEXT_BYTES + 1);
        assert!(matches!(
            q.add(task("t".into(), long_text.clone()), at),
            Err(TaskError::TooLong {
                field: "description",
                ..
            })
        ));
        assert!(q.tasks.is_empty(), "nothing queued");
        let fits = "d".repeat(MAX_TEXT_BYTES);
        assert!(q.add(task("t".into(), fits), at).is_ok());
        assert!(matches!(
            q.finish(1, Actor::Operator, true, Some(long_text), at),
            Err(TaskError::TooLong {
                field: "result",
                ..
            })
        ));
    }

    #[test]
    fn a_context_too_deep_or_too_large_is_refused_at_intake() {
        let mut q = TaskQueue::default();
        let nested = |n: usize| {
            let text = format!("{}1{}", "[".repeat(n), "]".repeat(n));
            serde_json::from_str::<serde_json::Value>(&text).ok()
        };
        let task = |context| NewTask {
            title: "t".into(),
            description: String::new(),
            priority: Priority::Medium,
            role: None,
            context,
            jail: None,
        };
        let at = Timestamp::from_millis(1);
        assert!(q.add(task(nested(MAX_CONTEXT_DEPTH)), at).is_ok());
        assert!(matches!(
            q.add(task(nested(MAX_CONTEXT_DEPTH + 1)), at),
            Err(TaskError::ContextTooDeep(33))
        ));
        let big = serde_json::Value::String("x".repeat(MAX_CONTEXT_BYTES));
        assert!(matches!(
            q.add(task(Some(big)), at),
            Err(TaskError::ContextTooLarge(_))
        ));
        assert_eq!(q.iter().count(), 1, "only the first was queued");
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    fn task(title: &str, priority: Priority, role: Option<&str>) -> NewTask {
        NewTask {
            title: title.into(),
            priority,
            role: role.map(str::to_string),
            ..NewTask::default()
        }
    }

    /// A queue of every kind of history: pending, released and claimed
    /// again, claimed, working, done, failed, cancelled.
    fn busy_queue() -> TaskQueue {
        let mut q = TaskQueue::new();
        for n in 0..8 {
            q.add(task(&format!("t{n}"), Priority::Medium, None), at(n))
                .unwrap();
        }
        q.claim("a", None, None, at(10), ACK_TIMEOUT).unwrap();
        q.expire(at(10 + 181));
        q.claim("a", None, None, at(200), ACK_TIMEOUT).unwrap();
        q.ack(1, Actor::Agent("a"), at(201)).unwrap();
        q.finish(1, Actor::Agent("a"), true, Some("ok".into()), at(202))
            .unwrap();
        q.claim("b", None, None, at(203), ACK_TIMEOUT).unwrap();
        q.finish(2, Actor::Agent("b"), false, Some("no".into()), at(204))
            .unwrap();
        q.cancel(3, at(205)).unwrap();
        q.claim("c", None, None, at(206), ACK_TIMEOUT).unwrap();
        q.ack(4, Actor::Agent("c"), at(207)).unwrap();
        q.claim("d", None, None, at(208), ACK_TIMEOUT).unwrap();
        q
    }

    /// The events of a queue rebuild it exactly: a compacted journal.
    #[test]
    fn a_queues_events_rebuild_it() {
        let q = busy_queue();
        let mut again = TaskQueue::new();
        for ev in q.events() {
            again.apply(&ev);
        }
        let a: Vec<&Task> = q.iter().collect();
        let b: Vec<&Task> = again.iter().collect();
        assert_eq!(a, b);
        assert_eq!(again.get(1).map(|t| t.releases), Some(1));
        assert_eq!(again.next_id, q.next_id);
        // Task 2 failed straight from its claim: no acknowledgement is
        // made up for it; task 4, working, was acknowledged.
        let acked: Vec<u64> = q
            .events()
            .iter()
            .filter(|e| matches!(e, TaskEvent::Acked { .. }))
            .map(TaskEvent::id)
            .collect();
        assert_eq!(acked, [4]);
    }

    /// Finished tasks beyond the last `keep` are forgotten, oldest finish
    /// first; open ones and the newest (it numbers the next) never.
    #[test]
    fn only_the_last_finished_tasks_are_kept() {
        let mut q = busy_queue();
        q.cancel(8, at(300)).unwrap();
        assert_eq!(q.finished_count(), 4);
        assert_eq!(
            q.forget_finished(1),
            2,
            "1 and 2 go; 3 stays, 8 is the newest"
        );
        let ids: Vec<u64> = q.iter().map(|t| t.id).collect();
        assert_eq!(ids, [3, 4, 5, 6, 7, 8]);
        assert_eq!(q.forget_finished(10), 0);
        let ev = q.add(task("next", Priority::Low, None), at(301)).unwrap();
        assert_eq!(ev.id(), 9, "ids go on after the forgotten");
    }

    /// A task for a jail goes to that jail's agents alone; one for none
    /// to anyone; a host agent takes no jail's task.
    #[test]
    fn a_task_for_a_jail_is_claimed_only_by_that_jails_agents() {
        let mut q = TaskQueue::new();
        let for_db = NewTask {
            jail: Some("db".into()),
            ..task("db work", Priority::Urgent, None)
        };
        q.add(for_db, at(0)).unwrap();
        q.add(task("anyone's", Priority::Low, None), at(1)).unwrap();
        let web = q
            .claim("w1", None, Some("web"), at(2), ACK_TIMEOUT)
            .unwrap();
        assert_eq!(web.map(|e| e.id()), Some(2), "not the db jail's task");
        let host = q.claim("h1", None, None, at(2), ACK_TIMEOUT).unwrap();
        assert_eq!(host, None, "a host agent takes no jail's task");
        let db = q.claim("d1", None, Some("db"), at(2), ACK_TIMEOUT).unwrap();
        assert_eq!(db.map(|e| e.id()), Some(1));
    }

    #[test]
    fn claims_the_most_urgent_then_oldest_task_for_the_role() {
        let mut q = TaskQueue::new();
        q.add(task("a", Priority::Low, None), at(0)).unwrap();
        q.add(task("b", Priority::High, Some("db")), at(1)).unwrap();
        q.add(task("c", Priority::High, None), at(2)).unwrap();
        q.add(task("d", Priority::Urgent, Some("git")), at(3))
            .unwrap();
        let ev = q.claim("p1", Some("db"), None, at(4), ACK_TIMEOUT).unwrap();
        assert_eq!(ev.map(|e| e.id()), Some(2));
        let ev = q.claim("p2", None, None, at(4), ACK_TIMEOUT).unwrap();
        assert_eq!(ev.map(|e| e.id()), Some(4));
        assert_eq!(
            q.claim("p1", None, None, at(5), ACK_TIMEOUT),
            Err(TaskError::AlreadyHolding("p1".into(), 2))
        );
    }

    #[test]
    fn an_unacknowledged_claim_is_released_at_its_deadline_and_not_before() {
        let mut q = TaskQueue::new();
        q.add(task("a", Priority::Medium, None), at(0)).unwrap();
        q.claim("p1", None, None, at(10), ACK_TIMEOUT).unwrap();
        assert_eq!(q.next_ack_due(), Some(at(190)));
        assert!(q.expire(at(189)).is_empty());
        let released = q.expire(at(190));
        assert_eq!(released.len(), 1);
        let t = q.get(1).unwrap();
        assert_eq!(
            (t.status, t.releases, t.claimed_by.as_deref()),
            (TaskStatus::Pending, 1, None)
        );
        assert_eq!(q.next_ack_due(), None);
    }

    #[test]
    fn a_held_task_is_released_for_another_and_a_pending_one_is_not() {
        let mut q = TaskQueue::new();
        q.add(task("a", Priority::Medium, None), at(0)).unwrap();
        assert!(q.release(1, at(1)).is_err(), "pending: nobody holds it");
        q.claim("p1", None, None, at(1), ACK_TIMEOUT).unwrap();
        q.ack(1, Actor::Agent("p1"), at(2)).unwrap();
        q.release(1, at(3)).unwrap();
        let t = q.get(1).unwrap();
        assert_eq!((t.status, t.releases), (TaskStatus::Pending, 1));
        assert_eq!(q.held_by("p1"), None);
    }

    #[test]
    fn an_acknowledged_claim_is_never_released() {
        let mut q = TaskQueue::new();
        q.add(task("a", Priority::Medium, None), at(0)).unwrap();
        q.claim("p1", None, None, at(0), ACK_TIMEOUT).unwrap();
        q.ack(1, Actor::Agent("p1"), at(60)).unwrap();
        assert!(q.expire(at(10_000)).is_empty());
        assert_eq!(q.get(1).unwrap().status, TaskStatus::Working);
    }

    #[test]
    fn only_the_claimer_or_the_operator_moves_a_task() {
        let mut q = TaskQueue::new();
        q.add(task("a", Priority::Medium, None), at(0)).unwrap();
        // Nobody holds it yet: the refusal says so, not "another agent".
        assert_eq!(
            q.finish(1, Actor::Agent("p2"), true, None, at(0)),
            Err(TaskError::WrongStatus {
                id: 1,
                status: "pending",
                wanted: "claimed by this agent"
            })
        );
        q.claim("p1", None, None, at(0), ACK_TIMEOUT).unwrap();
        assert_eq!(
            q.ack(1, Actor::Agent("p2"), at(1)),
            Err(TaskError::NotYours { id: 1 })
        );
        assert_eq!(
            q.finish(1, Actor::Agent("p2"), true, None, at(1)),
            Err(TaskError::NotYours { id: 1 })
        );
        q.finish(1, Actor::Agent("p1"), true, Some("ok".into()), at(2))
            .unwrap();
        assert!(matches!(
            q.finish(1, Actor::Operator, false, None, at(3)),
            Err(TaskError::WrongStatus { .. })
        ));
        assert!(q.cancel(1, at(4)).is_err());
    }

    #[test]
    fn replaying_the_events_rebuilds_the_queue() {
        let mut q = TaskQueue::new();
        let mut journal = Vec::new();
        journal.push(q.add(task("a", Priority::Medium, None), at(0)).unwrap());
        journal.push(q.add(task("b", Priority::High, Some("x")), at(1)).unwrap());
        journal.extend(q.claim("p1", None, None, at(2), ACK_TIMEOUT).unwrap());
        journal.push(q.ack(2, Actor::Agent("p1"), at(3)).unwrap());
        journal.push(q.cancel(1, at(4)).unwrap());
        let lines: Vec<String> = journal
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        let mut replayed = TaskQueue::new();
        for l in &lines {
            replayed.apply(&serde_json::from_str(l).unwrap());
        }
        let a: Vec<&Task> = q.iter().collect();
        let b: Vec<&Task> = replayed.iter().collect();
        assert_eq!(a, b);
        let ev = replayed.add(task("c", Priority::Low, None), at(5)).unwrap();
        assert_eq!(ev.id(), 3);
    }

    #[test]
    fn a_task_moved_to_the_top_or_bottom_is_taken_first_or_last_and_replays() {
        let mut q = TaskQueue::new();
        let urgent = q
            .add(task("urgent", Priority::Urgent, None), at(0))
            .map(|e| e.id());
        let low = q
            .add(task("low", Priority::Low, None), at(0))
            .map(|e| e.id());
        let mid = q
            .add(task("mid", Priority::Medium, None), at(0))
            .map(|e| e.id());
        let (Ok(urgent), Ok(low), Ok(mid)) = (urgent, low, mid) else {
            panic!("added");
        };
        let mut events = q.events();
        events.extend(q.move_to(low, Place::Top, at(1)));
        events.extend(q.move_to(urgent, Place::Bottom, at(1)));
        // A task added later comes after the top, before the bottom.
        events.extend(q.add(task("later", Priority::Medium, None), at(2)));
        let order = |q: &TaskQueue| {
            let mut open: Vec<&Task> = q.iter().collect();
            open.sort_by_key(|t| t.queue_order());
            open.iter()
                .map(|t| t.spec.title.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&q), ["low", "mid", "later", "urgent"]);
        let claimed = q.claim("w1", None, None, at(3), ACK_TIMEOUT);
        assert_eq!(claimed.ok().flatten().map(|e| e.id()), Some(low));
        // Top again goes above the earlier top; a finished task stays put.
        assert!(q.move_to(mid, Place::Top, at(4)).is_ok());
        assert!(q.get(mid).is_some_and(|t| t.rank < -1));
        assert!(q.cancel(urgent, at(5)).is_ok());
        assert!(q.move_to(urgent, Place::Top, at(6)).is_err());
        // The journal (live events or a compacted one) rebuilds the order.
        let mut live = TaskQueue::new();
        for ev in events {
            live.apply(&ev);
        }
        assert_eq!(order(&live), ["low", "mid", "later", "urgent"]);
        let mut compacted = TaskQueue::new();
        for ev in q.events() {
            compacted.apply(&ev);
        }
        assert_eq!(order(&compacted), order(&q));
    }
}
