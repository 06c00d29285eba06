//! The control plane's commands: `state`, `tasks`, `task-add`,
//! `task-claim`, `task-ack`, `task-done`, `task-fail`, `task-cancel`,
//! `activity` (`approvals` and `approval-request` are `approvals.rs`'s,
//! with the harnesses' approvals).
//!
//! Scope: an agent names itself with `pane`; it then sees only its own
//! budget, the tasks it claimed and its own approvals, and may move only
//! the tasks it holds. On a jail's socket `pane` is required and must be
//! one of that jail's panes (the `visible` check); on the operator socket
//! a request without `pane` acts as the operator and sees everything.

use super::Call;
use crate::core::approval::AgentRequest;
use crate::core::policy::PaneInfo;
use crate::core::policy::Unit;
use crate::core::tasks::{Actor, NewTask, Task, TaskError, TaskStatus, MAX_CONTEXT_BYTES};
use crate::core::time::Timestamp;
use crate::daemon::activity::{bounded, ACTIVITY_BURST};
use crate::daemon::conn::Scope;
use crate::daemon::control_plane::{wire_budget, BudgetView};
use crate::daemon::event_loop::Daemon;
use crate::daemon::govern::pane_info;
use crate::daemon::panes::Slot;
use crate::daemon::source::PaneKey;
use crate::protocol::control_plane::{
    ActivityType, AgentControlState, PaneSpend, WireFleetBudget, WireTask,
};
use crate::protocol::{
    ActivityArgs, CallerArgs, TaskActArgs, TaskAddArgs, TaskClaimArgs, TaskMoveArgs, TasksArgs,
};
use crate::protocol::{
    ActivityReply, CommandError, ErrorCode, Reply, StateReply, TaskReply, TasksReply, WatchKind,
};

/// The caller's pane id, `None` for the operator. A jail socket must name
/// a pane of its jail.
pub(super) fn caller(
    d: &Daemon,
    call: &Call,
    pane: Option<&str>,
) -> Result<Option<String>, CommandError> {
    match (pane, &call.scope) {
        (_, Scope::Agent { pane: me, .. }) if me.is_empty() => Err(CommandError::new(
            ErrorCode::Forbidden,
            "this connection comes from a process colibrid took in from an agent's tree, which names no pane",
        )),
        (Some(p), scope @ Scope::Agent { pane: me, .. }) => match d.resolve(scope, p) {
            Ok(key) => Ok(d.panes.pane(key).map(|x| x.id.0.clone())),
            Err(_) => Err(CommandError::new(
                ErrorCode::Forbidden,
                format!("this connection is agent {me}; it cannot act as {p}"),
            )),
        },
        (None, Scope::Agent { pane: me, .. }) => Ok(Some(me.clone())),
        (Some(p), scope) => {
            let key = d.resolve(scope, p)?;
            Ok(d.panes.pane(key).map(|x| x.id.0.clone()))
        }
        (None, Scope::Operator) => Ok(None),
        (None, Scope::Jail(j)) => Err(CommandError::new(
            ErrorCode::Invalid,
            format!("on the agent socket of jail {j}, name your pane (\"pane\": $COLIBRI_PANE_ID)"),
        )),
    }
}

/// The jail pane `id` runs in (`None`: on the host).
fn pane_jail(d: &Daemon, id: &str) -> Option<String> {
    let key = d.resolve(&Scope::Operator, id).ok()?;
    d.panes.agent(key).and_then(|a| a.jail.clone())
}

fn task_error(e: TaskError) -> CommandError {
    let code = match e {
        TaskError::NotFound(_) => ErrorCode::NotFound,
        TaskError::NotYours { .. } | TaskError::OperatorOnly(_) => ErrorCode::Forbidden,
        TaskError::WrongStatus { .. }
        | TaskError::AlreadyHolding(..)
        | TaskError::NoTitle
        | TaskError::ContextTooDeep(_)
        | TaskError::ContextTooLarge(_)
        | TaskError::TooLong { .. } => ErrorCode::Invalid,
    };
    CommandError::new(code, e.to_string())
}

pub(super) fn state(d: &mut Daemon, call: &Call, args: CallerArgs) -> Result<Reply, CommandError> {
    let me = caller(d, call, args.pane.as_deref())?;
    let agents = d
        .panes
        .iter()
        .filter(|(k, s)| {
            d.visible(&call.scope, *k) && me.as_ref().is_none_or(|m| *m == s.pane.id.0)
        })
        .map(|(_, s)| agent_state(d, s, call.t))
        .collect();
    let budget = fleet_budget(d, call.t);
    Ok(Reply::State(StateReply { agents, budget }))
}

/// One agent as `state` shows it: the seed's `id`, `role` and
/// `heartbeat_enabled`, its state, the budget that holds it, its spend.
fn agent_state(d: &Daemon, s: &Slot, t: Timestamp) -> AgentControlState {
    let info = pane_info(s);
    let id = s.pane.id.0.clone();
    let running = s.agent.proc.is_some();
    AgentControlState {
        id: s.pane.name.clone().unwrap_or_else(|| id.clone()),
        name: s.pane.name.clone(),
        role: s.pane.role.clone(),
        heartbeat_enabled: s.agent.heartbeat.is_some(),
        state: s.pane.state(),
        active: running && !s.pane.paused,
        paused: s.pane.paused,
        budget: wire_budget(governed_budget(d, &info, t)),
        spend: pane_spend(d, s, &info),
        task_id: d.control.queue.held_by(&id).map(|t| t.id),
        health: crate::core::health::health(crate::core::health::HealthFacts {
            running,
            spoke: s.pane.last_event_at().is_some(),
            state: s.pane.state(),
            stalled: s.pane.is_stalled(t, d.settings.daemon.stall_after),
            looping: s.agent.holds.iter().any(|h| h.key == "loop")
                || d.control.ladders.contains_key(&id),
        }),
        pane: id,
    }
}

/// What the pane has spent in all its runs, priced as its budgets price
/// it.
fn pane_spend(d: &Daemon, s: &Slot, info: &PaneInfo) -> PaneSpend {
    let mut usage = s.agent.usage_earlier;
    usage.add(s.pane.usage());
    let tokens = usage
        .input_tokens
        .saturating_add(usage.output_tokens)
        .saturating_add(usage.cache_write_tokens);
    PaneSpend {
        tokens,
        usd: d.governor.usage_cost(info, &usage),
        output_bytes: s
            .agent
            .bytes_earlier
            .saturating_add(s.pane.counters().bytes),
    }
}

/// The tightest token budget of the policy engine that counts this pane's
/// spend (its own ledger, its name's, its role's, its runtime's or the
/// global one), once it has counted any: cap, spent and what is left, in
/// tokens (the contract's `daily_tokens`; a budget of dollars or bytes is
/// not one).
fn governed_budget(d: &Daemon, pane: &PaneInfo, now: Timestamp) -> Option<BudgetView> {
    let keys = [
        Some(pane.id.as_str()),
        pane.name.as_deref(),
        pane.role.as_deref(),
        pane.runtime.as_deref(),
    ];
    d.governor
        .budgets()
        .usage(now)
        .into_iter()
        .filter(|u| u.unit == Unit::Tokens)
        .filter(|u| u.key.is_empty() || keys.contains(&Some(u.key.as_str())))
        .map(|u| BudgetView::of(u.cap, u.spent, u.paused))
        .min_by_key(|b| b.remaining)
}

/// The seed's fleet budget: the global token budget and each role's
/// allotment.
fn fleet_budget(d: &Daemon, now: Timestamp) -> WireFleetBudget {
    let fleet = d.governor.budgets().fleet(now);
    let whole = |v: f64| v.max(0.0) as u64;
    let allocation = fleet
        .allocation
        .iter()
        .map(|(role, cap)| (role.clone(), whole(*cap)))
        .collect();
    WireFleetBudget {
        figures: wire_budget(
            fleet
                .global
                .as_ref()
                .map(|g| BudgetView::of(g.cap, g.spent, g.paused)),
        ),
        allocation,
        allocated: whole(fleet.allocated()),
    }
}

pub(super) fn tasks(d: &mut Daemon, call: &Call, args: TasksArgs) -> Result<Reply, CommandError> {
    let me = caller(d, call, args.pane.as_deref())?;
    let queue = &d.control.queue;
    let matching: Vec<&Task> = queue
        .iter()
        .filter(|t| me.is_none() || t.claimed_by == me)
        .filter(|t| args.task_id.is_none_or(|id| id == t.id))
        .filter(|t| args.status.is_none_or(|s| s == t.status))
        .filter(|t| args.after.is_none_or(|after| t.id > after))
        .collect();
    // Weighed without encoding: what an agent made large is text.
    let (page, more) = crate::protocol::page(matching, args.limit, |t| {
        512 + t.spec.title.len()
            + t.spec.description.len()
            + t.outcome.as_ref().map_or(0, String::len)
            + t.spec.context.as_ref().map_or(0, |_| MAX_CONTEXT_BYTES)
    });
    let next = more.then(|| page.last().map(|t| t.id)).flatten();
    let tasks: Vec<WireTask> = page.into_iter().map(WireTask::from).collect();
    if let (Some(id), true) = (args.task_id, tasks.is_empty()) {
        return Err(CommandError::new(
            ErrorCode::NotFound,
            format!("no task {id}"),
        ));
    }
    // An agent counts what it could claim; the operator, everything.
    let jail = me.as_deref().and_then(|m| pane_jail(d, m));
    let pending = queue
        .iter()
        .filter(|t| t.status == TaskStatus::Pending && (me.is_none() || t.open_to(jail.as_deref())))
        .count();
    Ok(Reply::Tasks(TasksReply {
        tasks,
        pending,
        next,
    }))
}

/// Refuses a change to the task queue while its journal is far behind (a
/// slow or failing disk): taken, it could not be kept.
fn journal_ready(d: &Daemon) -> Result<(), CommandError> {
    match d.control.journal_behind() {
        None => Ok(()),
        Some(bytes) => Err(CommandError::new(
            ErrorCode::Busy,
            format!(
                "the task journal is behind ({} MiB not yet on disk); try again later",
                bytes >> 20
            ),
        )),
    }
}

pub(super) fn add(d: &mut Daemon, call: &Call, args: TaskAddArgs) -> Result<Reply, CommandError> {
    journal_ready(d)?;
    if let Some(j) = &args.jail {
        if !d.settings.jail_sockets.iter().any(|(name, _)| name == j) {
            return Err(CommandError::invalid(format!(
                "no jail {j:?} has an agent socket here ([jails.{j}] in colibri.toml)"
            )));
        }
    }
    let new = NewTask {
        title: args.title,
        description: args.description.unwrap_or_default(),
        priority: args.priority.unwrap_or_default(),
        role: args.role,
        context: args.context,
        jail: args.jail,
    };
    let ev = d.control.queue.add(new, call.t).map_err(task_error)?;
    let id = ev.id();
    d.task_changed(ev, call.t);
    Ok(task_reply(d, id))
}

fn task_reply(d: &Daemon, id: u64) -> Reply {
    Reply::Task(TaskReply {
        task: d.control.queue.get(id).map(WireTask::from),
    })
}

pub(super) fn claim(
    d: &mut Daemon,
    call: &Call,
    args: TaskClaimArgs,
) -> Result<Reply, CommandError> {
    journal_ready(d)?;
    let Some(me) = caller(d, call, Some(&args.pane))? else {
        return Err(CommandError::not_found(&args.pane));
    };
    let timeout = d.control.ack_timeout;
    let jail = pane_jail(d, &me);
    let ev = d
        .control
        .queue
        .claim(&me, args.role.as_deref(), jail.as_deref(), call.t, timeout)
        .map_err(task_error)?;
    let Some(ev) = ev else {
        return Ok(Reply::Task(TaskReply { task: None }));
    };
    let id = ev.id();
    d.task_changed(ev, call.t);
    Ok(task_reply(d, id))
}

/// What `act` does to a task.
#[derive(Clone, Copy)]
pub(super) enum TaskVerb {
    Ack,
    Done,
    Fail,
    Cancel,
}

/// `task-ack`, `task-done`, `task-fail`, `task-cancel`.
pub(super) fn act(
    d: &mut Daemon,
    call: &Call,
    args: TaskActArgs,
    verb: TaskVerb,
) -> Result<Reply, CommandError> {
    journal_ready(d)?;
    let me = caller(d, call, args.pane.as_deref())?;
    let actor = me.as_deref().map_or(Actor::Operator, Actor::Agent);
    let q = &mut d.control.queue;
    let ev = match verb {
        TaskVerb::Ack => q.ack(args.task_id, actor, call.t),
        TaskVerb::Done => q.finish(args.task_id, actor, true, args.note, call.t),
        TaskVerb::Fail => q.finish(args.task_id, actor, false, args.note, call.t),
        TaskVerb::Cancel if me.is_some() => Err(TaskError::OperatorOnly("cancel")),
        TaskVerb::Cancel => q.cancel(args.task_id, call.t),
    }
    .map_err(task_error)?;
    d.task_changed(ev, call.t);
    // The seed's productive actions: acknowledging, completing.
    if let (Some(pane), TaskVerb::Ack | TaskVerb::Done | TaskVerb::Fail) = (&me, verb) {
        d.productive(pane, call.t);
    }
    Ok(task_reply(d, args.task_id))
}

/// `task-move`: the operator puts a task at the top or the bottom of the
/// queue's order.
pub(super) fn task_move(
    d: &mut Daemon,
    call: &Call,
    args: TaskMoveArgs,
) -> Result<Reply, CommandError> {
    journal_ready(d)?;
    if caller(d, call, None)?.is_some() {
        return Err(task_error(TaskError::OperatorOnly("move")));
    }
    let ev = d
        .control
        .queue
        .move_to(args.task_id, args.to, call.t)
        .map_err(task_error)?;
    d.task_changed(ev, call.t);
    Ok(task_reply(d, args.task_id))
}

/// `task-remove`: the seed's remove-from-plan. The task's line leaves the
/// plan file it came from, and the task, if open, is cancelled.
pub(super) fn task_remove(
    d: &mut Daemon,
    call: &Call,
    args: TaskActArgs,
) -> Result<Reply, CommandError> {
    journal_ready(d)?;
    if caller(d, call, args.pane.as_deref())?.is_some() {
        return Err(task_error(TaskError::OperatorOnly("remove")));
    }
    let id = args.task_id;
    let status = d
        .control
        .queue
        .get(id)
        .map(|t| t.status)
        .ok_or_else(|| task_error(TaskError::NotFound(id)))?;
    let Some(path) = d.plan_source_of(id) else {
        return Err(CommandError::invalid(format!(
            "task {id} came from no plan file colibrid reads (orchestrator.plan_file, orchestrator.project); cancel it instead"
        )));
    };
    d.unplan(id, &path).map_err(|e| {
        CommandError::new(
            ErrorCode::Os,
            format!("task {id}: its line was not removed: {e}"),
        )
    })?;
    if !status.is_final() {
        let ev = d.control.queue.cancel(id, call.t).map_err(task_error)?;
        d.task_changed(ev, call.t);
    }
    Ok(task_reply(d, id))
}

/// The running agent a post comes from: `pane` as [`caller`] reads it
/// (`None`: the connection's own agent), which must have a process.
/// Posting as each ended pane of a jail would multiply the per-pane limit.
pub(super) fn posting_agent(
    d: &Daemon,
    call: &Call,
    pane: Option<&str>,
) -> Result<(PaneKey, String), CommandError> {
    let Some(pane) = caller(d, call, pane)? else {
        return Err(CommandError::invalid(
            "name the agent that asks (\"pane\"): the operator has no pane",
        ));
    };
    match d.panes.key(&pane) {
        Some(key)
            if d.panes
                .agent(key)
                .is_some_and(|a| a.running_pid().is_some()) =>
        {
            Ok((key, pane))
        }
        _ => Err(CommandError::not_running(&pane)),
    }
}

/// Takes one post of `bytes` from `pane` from the activity limiter
/// (`daemon::activity`), or says how long to wait.
pub(super) fn take_post(
    d: &mut Daemon,
    pane: &str,
    bytes: u64,
    call: &Call,
) -> Result<(), CommandError> {
    let journal_bytes = d.bus.journal().max_bytes();
    d.activity
        .take(pane, bytes, journal_bytes, call.t)
        .map_err(|wait_ms| {
            CommandError::new(
                ErrorCode::Busy,
                format!(
                    "activity: more than {ACTIVITY_BURST} posts at once or 30 a minute from this pane, or all agents' posts past their share of the watch journal; try again in {:.1} s",
                    wait_ms as f64 / 1000.0
                ),
            )
        })
}

pub(super) fn activity(
    d: &mut Daemon,
    call: &Call,
    a: ActivityArgs,
) -> Result<Reply, CommandError> {
    let (key, pane) = posting_agent(d, call, Some(&a.pane))?;
    let mut a = a;
    a.message = bounded(a.message.take());
    a.detail = bounded(a.detail.take());
    let bytes = [&a.message, &a.detail]
        .iter()
        .map(|t| t.as_ref().map_or(0, String::len) as u64)
        .sum();
    take_post(d, &pane, bytes, call)?;
    // An agent asking for approval opens one, answered like a harness's.
    let approval = match a.event_type {
        ActivityType::ApprovalRequest => {
            let req = AgentRequest {
                operation: a
                    .message
                    .clone()
                    .unwrap_or_else(|| "approval_request".to_string()),
                reasoning: a.detail.clone(),
                task_id: a.task_id,
                estimated_tokens: a.tokens,
            };
            Some(d.open_agent_approval(key, &req, None, call.t)?.id)
        }
        _ => None,
    };
    let kind = match a.event_type {
        ActivityType::TaskCompleted => WatchKind::TaskCompleted {
            pane: pane.clone(),
            task_id: a.task_id,
            message: a.message.clone(),
            tokens: a.tokens,
        },
        ActivityType::ApprovalRequest => WatchKind::ApprovalRequest {
            pane: pane.clone(),
            task_id: a.task_id,
            message: a.message.clone(),
            detail: a.detail.clone(),
            tokens: a.tokens,
        },
        ActivityType::Error => WatchKind::AgentError {
            pane: pane.clone(),
            task_id: a.task_id,
            message: a.message.clone(),
            detail: a.detail.clone(),
            tokens: a.tokens,
        },
    };
    crate::daemon::diag::log_info!(
        "activity from {pane}: {:?} task={:?} {}",
        a.event_type,
        a.task_id,
        crate::terminal_text::escape_controls(a.message.as_deref().unwrap_or(""))
    );
    d.publish(kind, call.t);
    Ok(Reply::Activity(ActivityReply {
        seq: d.bus.seq(),
        approval,
    }))
}

impl Daemon {
    /// Records a change the queue already made: the journal, the watch
    /// stream, and the acknowledgement timer.
    pub(crate) fn task_changed(
        &mut self,
        ev: crate::core::tasks::TaskEvent,
        t: crate::core::time::Timestamp,
    ) {
        use crate::core::tasks::TaskEvent;
        self.control.record(&ev);
        if let Some(kind) = crate::daemon::control_plane::status_event(&ev, &self.control.queue) {
            self.publish(kind, t);
        }
        self.rearm_task_timer(t);
        let queue = &mut self.control.queue;
        if queue.finished_count() > 2 * crate::daemon::control_plane::FINISHED_TASKS_KEPT {
            queue.forget_finished(crate::daemon::control_plane::FINISHED_TASKS_KEPT);
        }
        if let TaskEvent::Done { id, .. } = ev {
            self.tick_plan(id);
        }
        // A task to give, or an agent free of one: the orchestrator may act.
        match ev {
            TaskEvent::Added { .. }
            | TaskEvent::Released { .. }
            | TaskEvent::Done { .. }
            | TaskEvent::Failed { .. }
            | TaskEvent::Cancelled { .. } => self.dispatch_pending(t),
            TaskEvent::Claimed { .. }
            | TaskEvent::Dispatched { .. }
            | TaskEvent::Acked { .. }
            | TaskEvent::Moved { .. } => {}
        }
    }

    pub(crate) fn rearm_task_timer(&mut self, t: crate::core::time::Timestamp) {
        let tokens = &mut self.tokens;
        self.control.rearm(t, self.poll.registry(), || {
            tokens.insert(crate::daemon::source::Source::TaskAck)
        });
    }

    /// The acknowledgement timer fired: release every overdue claim.
    pub(crate) fn task_ack_due(&mut self, t: crate::core::time::Timestamp) {
        self.control.ack_timer_fired();
        let holders: Vec<(u64, String)> = self
            .control
            .queue
            .iter()
            .filter(|task| task.status == TaskStatus::Claimed)
            .filter_map(|task| Some((task.id, task.claimed_by.clone()?)))
            .collect();
        let retry_after = self.settings.orchestrator.retry_after;
        // One at a time, each journalled before the next changes the
        // queue: a dispatch run between them must see the queue its
        // journal replays to (`colibri fold tasks.jsonl`).
        for id in self.control.queue.overdue(t) {
            let Ok(ev) = self.control.queue.release(id, t) else {
                continue;
            };
            let holder = holders
                .iter()
                .find(|(held, _)| *held == id)
                .map(|(_, pane)| pane.clone());
            if let Some(pane) = &holder {
                self.control
                    .dispatcher
                    .released(ev.id(), pane, t, retry_after);
            }
            crate::daemon::diag::log_info!(
                "task {} released: its claim was not acknowledged",
                ev.id()
            );
            self.task_changed(ev, t);
            if let Some(pane) = holder {
                self.caught_stuck(&pane, crate::daemon::escalation::Stuck::Unacknowledged, t);
            }
        }
        self.rearm_task_timer(t);
    }
}
