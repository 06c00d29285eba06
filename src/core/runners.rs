//! Runners: the orchestrator starts an agent for a role that has work and
//! no agent to take it, and stops it once it has sat idle with nothing
//! left for its role (`[roles.NAME]`; docs/ORCHESTRATOR.md).
//!
//! [`plan`] is a pure function of the runners, the queue, the agents and
//! the time, so a run is decided the same way whatever the daemon is
//! doing. The daemon (`daemon::runners`) carries the steps out: a start is
//! a spawn named [`runner_name`] with the role, which dispatch then hands
//! the task to like any idle agent; a stop is a planned stop (no alert).
//!
//! The rules, per role with a runner:
//! - its **demand** is the pending tasks of that role open to the runner's
//!   jail (`Task::open_to`); a task without a role is not a reason to start
//!   anything;
//! - its **supply** is the agents of that role, runner-started or not, that
//!   could take a task now: running, not paused, idle, holding none;
//! - it starts `demand - supply` agents, but never more runner-started
//!   agents alive at once than `max`;
//! - a runner-started agent that is idle, holds nothing, and has been so
//!   for `idle_stop` is stopped when its role has no demand left.

use std::time::Duration;

use crate::core::dispatch::Dispatcher;
use crate::core::tasks::{Task, TaskQueue, TaskStatus};
use crate::core::time::Timestamp;

/// The most agents one runner may keep alive at once.
pub const MAX_RUNNER_AGENTS: usize = 64;

/// One role's runner, as the plan needs to see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runner<'a> {
    pub role: &'a str,
    /// `None`: its agents run on the host.
    pub jail: Option<&'a str>,
    pub max: usize,
    pub idle_stop: Duration,
}

/// What an agent of a role is doing, for the plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Running, not paused, idle and holding no task since `since`.
    Idle { since: Timestamp },
    /// Running, but working, paused, blocked or holding a task.
    Busy,
    /// Not running: stopping, ended, or waiting to restart.
    Down,
}

/// One agent with a role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleAgent<'a> {
    pub pane: &'a str,
    pub role: &'a str,
    /// Started by the role's runner (and so stopped by it).
    pub runner: bool,
    /// Its process is alive or coming back (counts against `max`).
    pub alive: bool,
    pub ready: Ready,
    /// `None`: on the host.
    pub jail: Option<&'a str>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerStep {
    /// Start one more agent for `role`.
    Start { role: String },
    /// Stop the runner-started agent of pane `pane`: idle, nothing left.
    Stop { pane: String },
}

/// The name a runner gives the `n`th agent it starts for `role`.
pub fn runner_name(role: &str, n: usize) -> String {
    format!("{role}-runner-{n}")
}

/// Whether `name` is one a runner of `role` gives (`ROLE-runner-N`).
pub fn is_runner_name(role: &str, name: &str) -> bool {
    name.strip_prefix(role)
        .and_then(|rest| rest.strip_prefix("-runner-"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The steps to take at `now`.
pub fn plan(
    runners: &[Runner<'_>],
    queue: &TaskQueue,
    agents: &[RoleAgent<'_>],
    dispatcher: &Dispatcher,
    now: Timestamp,
) -> Vec<RunnerStep> {
    let mut steps = Vec::new();
    for runner in runners {
        let pending: Vec<&Task> = queue
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .filter(|t| t.spec.role.as_deref() == Some(runner.role))
            .filter(|t| t.open_to(runner.jail))
            .collect();
        let demand = pending.len();
        let of_role = || agents.iter().filter(|a| a.role == runner.role);
        // An idle agent is supply only if dispatch could give it one of
        // these tasks: one held off them, or of another jail, is not.
        let supply = of_role()
            .filter(|a| matches!(a.ready, Ready::Idle { .. }))
            .filter(|a| {
                pending
                    .iter()
                    .any(|t| t.open_to(a.jail) && !dispatcher.held_off(t.id, a.pane, now))
            })
            .count();
        let alive = of_role().filter(|a| a.runner && a.alive).count();
        let room = runner.max.min(MAX_RUNNER_AGENTS).saturating_sub(alive);
        let starts = demand.saturating_sub(supply).min(room);
        steps.extend((0..starts).map(|_| RunnerStep::Start {
            role: runner.role.to_string(),
        }));
        if demand > 0 {
            continue;
        }
        let idle_long = of_role().filter(|a| {
            a.runner
                && matches!(a.ready, Ready::Idle { since } if now.since(since) >= runner.idle_stop)
        });
        steps.extend(idle_long.map(|a| RunnerStep::Stop {
            pane: a.pane.to_string(),
        }));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tasks::NewTask;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    fn queue(roles: &[Option<&str>]) -> TaskQueue {
        let mut q = TaskQueue::new();
        for (i, role) in roles.iter().enumerate() {
            let task = NewTask {
                title: format!("t{i}"),
                role: role.map(str::to_string),
                ..NewTask::default()
            };
            assert!(q.add(task, at(0)).is_ok());
        }
        q
    }

    fn runner(role: &str, max: usize) -> Runner<'_> {
        Runner {
            role,
            jail: None,
            max,
            idle_stop: Duration::from_secs(60),
        }
    }

    fn agent<'a>(pane: &'a str, role: &'a str, runner: bool, ready: Ready) -> RoleAgent<'a> {
        RoleAgent {
            pane,
            role,
            runner,
            alive: ready != Ready::Down,
            ready,
            jail: None,
        }
    }

    fn starts(steps: &[RunnerStep], role: &str) -> usize {
        steps
            .iter()
            .filter(|s| matches!(s, RunnerStep::Start { role: r } if r == role))
            .count()
    }

    #[test]
    fn work_with_no_agent_starts_agents_up_to_the_cap() {
        let q = queue(&[
            Some("build"),
            Some("build"),
            Some("build"),
            Some("review"),
            None,
        ]);
        let steps = plan(
            &[runner("build", 2), runner("review", 3)],
            &q,
            &[],
            &Dispatcher::default(),
            at(1),
        );
        assert_eq!(starts(&steps, "build"), 2, "capped at max");
        assert_eq!(starts(&steps, "review"), 1, "one task, one agent");
        assert_eq!(steps.len(), 3, "a task without a role starts nothing");
    }

    #[test]
    fn idle_agents_of_the_role_are_supply_and_live_runners_count_against_the_cap() {
        let q = queue(&[Some("build"), Some("build"), Some("build")]);
        let idle = Ready::Idle { since: at(0) };
        // A declared builder, idle: it takes one task; a runner-started
        // one busy: it takes none but fills one place of two.
        let agents = [
            agent("p1", "build", false, idle),
            agent("p2", "build", true, Ready::Busy),
        ];
        let steps = plan(
            &[runner("build", 2)],
            &q,
            &agents,
            &Dispatcher::default(),
            at(1),
        );
        assert_eq!(starts(&steps, "build"), 1);
        // An ended runner agent leaves its place.
        let agents = [
            agent("p1", "build", false, idle),
            agent("p2", "build", true, Ready::Down),
        ];
        let steps = plan(
            &[runner("build", 2)],
            &q,
            &agents,
            &Dispatcher::default(),
            at(1),
        );
        assert_eq!(starts(&steps, "build"), 2);
    }

    #[test]
    fn a_jail_runner_starts_only_for_tasks_open_to_its_jail() {
        let mut q = TaskQueue::new();
        for jail in [Some("j1"), Some("j2"), None] {
            let task = NewTask {
                title: format!("{jail:?}"),
                role: Some("build".into()),
                jail: jail.map(str::to_string),
                ..NewTask::default()
            };
            assert!(q.add(task, at(0)).is_ok());
        }
        let mut r = runner("build", 10);
        r.jail = Some("j1");
        assert_eq!(
            starts(&plan(&[r], &q, &[], &Dispatcher::default(), at(1)), "build"),
            2
        );
    }

    #[test]
    fn a_runner_agent_idle_past_its_time_with_no_work_left_is_stopped() {
        let idle = Ready::Idle { since: at(0) };
        let agents = [
            agent("own", "build", true, idle),
            agent("declared", "build", false, idle),
            agent("busy", "build", true, Ready::Busy),
        ];
        let empty = TaskQueue::new();
        // Not yet: 59 s idle of 60.
        assert!(plan(
            &[runner("build", 3)],
            &empty,
            &agents,
            &Dispatcher::default(),
            at(59)
        )
        .is_empty());
        let steps = plan(
            &[runner("build", 3)],
            &empty,
            &agents,
            &Dispatcher::default(),
            at(60),
        );
        assert_eq!(
            steps,
            [RunnerStep::Stop { pane: "own".into() }],
            "only the idle runner-started one"
        );
        // Work left for the role keeps it, even when it cannot take it.
        let q = queue(&[Some("build")]);
        let steps = plan(
            &[runner("build", 3)],
            &q,
            &agents,
            &Dispatcher::default(),
            at(600),
        );
        assert!(steps.iter().all(|s| matches!(s, RunnerStep::Start { .. })));
    }

    #[test]
    fn runner_names_are_recognised_by_their_role_alone() {
        assert!(is_runner_name("build", &runner_name("build", 3)));
        assert!(!is_runner_name("build", "build-runner-"));
        assert!(!is_runner_name("build", "build-runner-1x"));
        assert!(!is_runner_name("bui", "build-runner-1"));
        assert!(!is_runner_name("build", "review-runner-1"));
    }

    #[test]
    fn an_idle_agent_held_off_the_roles_only_task_is_no_supply() {
        let q = queue(&[Some("build")]);
        let idle = Ready::Idle { since: at(0) };
        let agents = [agent("a", "build", true, idle)];
        let mut d = Dispatcher::default();
        assert!(plan(&[runner("build", 2)], &q, &agents, &d, at(1)).is_empty());
        let id = q.iter().next().map(|t| t.id).unwrap_or(0);
        d.released(id, "a", at(1), Duration::from_secs(600));
        let steps = plan(&[runner("build", 2)], &q, &agents, &d, at(2));
        assert_eq!(starts(&steps, "build"), 1, "another agent is started");
    }
}
