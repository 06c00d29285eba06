//! Runners carried out (`[roles.NAME]`; docs/ORCHESTRATOR.md, "Runners"):
//! an agent started for a role with work and no agent to take it, and
//! stopped (planned, no alert) once idle with nothing left.
//!
//! What to do is `core::runners::plan`, a pure function of the runners,
//! the queue, the agents and the time. The daemon asks it after each
//! dispatch run (a start's agent is idle at once, so the dispatch that
//! follows its spawn hands it the task) and on each daemon heartbeat,
//! which is also when idle agents are stopped and ended ones forgotten.

use std::time::Duration;

use crate::config::RoleRunner;
use crate::core::dispatch_replay::RunnersRecord;
use crate::core::runners::{
    is_runner_name, plan, runner_name, Ready, RoleAgent, Runner, RunnerStep,
};
use crate::core::spec::{StopCause, Wanted};
use crate::core::state::AgentState;
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::protocol::SpawnArgs;

/// How long a role whose runner failed to start an agent waits before the
/// next try: a bad argv must not spawn a failing pane on every dispatch.
const START_FAILED_HOLDOFF: Duration = Duration::from_secs(60);

/// Why a runner stops its agent, as its session log and `list` show it.
const IDLE_STOP_REASON: &str = "runner: idle with no work left for its role";

impl Daemon {
    /// Starts and stops the runners' agents as the plan says.
    pub(crate) fn run_runners(&mut self, t: Timestamp) {
        if self.settings.roles.is_empty()
            || !self.settings.orchestrator.dispatch
            || self.control.running_runners
            || self.is_stopping()
            || self.control.starting
            || self.control.journal_behind().is_some()
        {
            return;
        }
        self.control.running_runners = true;
        self.forget_stopped_runners(t);
        for step in self.runner_plan(t) {
            match step {
                RunnerStep::Start { role } => self.start_runner(&role, t),
                RunnerStep::Stop { pane } => self.stop_runner(&pane, t),
            }
        }
        self.control.running_runners = false;
    }

    fn runner_plan(&mut self, t: Timestamp) -> Vec<RunnerStep> {
        self.control.runner_holdoff.retain(|_, until| *until > t);
        let in_grace = self.control.in_grace(t).cloned();
        let held_off = &self.control.runner_holdoff;
        let runners: Vec<Runner<'_>> = self
            .settings
            .roles
            .iter()
            .filter(|(role, _)| !held_off.contains_key(*role))
            .map(|(role, r)| Runner {
                role,
                jail: r.jail.as_deref(),
                max: r.max,
                idle_stop: r.idle_stop,
            })
            .collect();
        let queue = &self.control.queue;
        let agents: Vec<RoleAgent<'_>> = self
            .panes
            .iter()
            .filter_map(|(_, s)| {
                let role = s.pane.role.as_deref()?;
                let runner = s
                    .pane
                    .name
                    .as_deref()
                    .is_some_and(|n| is_runner_name(role, n));
                // One it is stopping is down already: a SIGTERM it ignores
                // must not be sent again (and its kill put off) each run.
                let alive = s.agent.actual().is_alive() && s.agent.supervision.wanted.is_up();
                let takes = alive
                    && s.agent.running_pid().is_some()
                    && !s.pane.paused
                    && s.pane.state() == AgentState::Idle
                    && queue.held_by(&s.pane.id.0).is_none()
                    && !in_grace.as_ref().is_some_and(|g| g.contains(&s.pane.id.0));
                let ready = match (takes, alive) {
                    (true, _) => Ready::Idle {
                        since: s.pane.state_since(),
                    },
                    (false, true) => Ready::Busy,
                    (false, false) => Ready::Down,
                };
                Some(RoleAgent {
                    pane: &s.pane.id.0,
                    role,
                    runner,
                    alive,
                    ready,
                    jail: s.agent.jail.as_deref(),
                })
            })
            .collect();
        let steps = plan(&runners, queue, &agents, &self.control.dispatcher, t);
        if !steps.is_empty() {
            // Before the steps, as dispatch plans are: `colibri fold
            // tasks.jsonl` runs it again against the same queue.
            let record = RunnersRecord::new(t, &runners, &agents, &self.control.dispatcher, &steps);
            self.control.record_runners(record);
        }
        steps
    }

    /// Spawns the next agent for `role`, named `ROLE-runner-N` with the
    /// lowest `N` no pane holds.
    fn start_runner(&mut self, role: &str, t: Timestamp) {
        let Some(runner) = self.settings.roles.get(role) else {
            return;
        };
        let n = (1..)
            .find(|n| {
                let name = runner_name(role, *n);
                self.pane_named(&name).is_none()
            })
            .unwrap_or(1);
        let args = spawn_args(runner, role, n);
        let name = args.name.clone().unwrap_or_default();
        match self.cmd_spawn(args, t) {
            Ok(spawned) => log_info!(
                "runner: started {name} (pane {}) for role {role}",
                spawned.agent_id
            ),
            Err(e) => {
                log_warn!(
                    "runner: role {role}: cannot start an agent: {}; next try in {}",
                    e.message,
                    humantime::format_duration(START_FAILED_HOLDOFF)
                );
                self.control
                    .runner_holdoff
                    .insert(role.to_string(), t.plus(START_FAILED_HOLDOFF));
                // The failed pane keeps the error in its log; it need not
                // hold the name and a row of the table too.
                if let Some(key) = self.pane_named(&name) {
                    if !self.panes.agent(key).is_some_and(|a| a.actual().is_alive()) {
                        self.remove_pane(key, t);
                    }
                }
            }
        }
    }

    fn stop_runner(&mut self, pane: &str, t: Timestamp) {
        let Some(key) = self.panes.key(pane) else {
            return;
        };
        log_info!("runner: stopping pane {pane}: idle with no work left");
        let by = StopCause::Operator {
            who: "runner".to_string(),
        };
        self.stop_planned(key, by, Some(IDLE_STOP_REASON), t);
    }

    /// A runner's agent it stopped has ended: its pane leaves the table
    /// (its log stays), so the names and rows do not pile up. One that
    /// ended by itself leaves too, and if it ran less than
    /// [`START_FAILED_HOLDOFF`], its start counts as failed: the role waits
    /// before the next, so a recipe that exits at once cannot spawn a pane
    /// per dispatch.
    fn forget_stopped_runners(&mut self, t: Timestamp) {
        let mut done = Vec::new();
        let mut failed: Vec<String> = Vec::new();
        for (key, s) in self.panes.iter() {
            let Some(role) = s.pane.role.as_deref() else {
                continue;
            };
            let ours = s
                .pane
                .name
                .as_deref()
                .is_some_and(|n| is_runner_name(role, n))
                && self.settings.roles.contains_key(role);
            if !ours || s.agent.actual().is_alive() {
                continue;
            }
            let stopped_by_runner = matches!(
                &s.agent.supervision.wanted,
                Wanted::Down { reason: Some(r), .. } if r == IDLE_STOP_REASON
            );
            if !stopped_by_runner && t.since(s.pane.started_at) < START_FAILED_HOLDOFF {
                failed.push(role.to_string());
            }
            done.push(key);
        }
        for role in failed {
            log_warn!(
                "runner: role {role}: its agent ended soon after it started; next start in {}",
                humantime::format_duration(START_FAILED_HOLDOFF)
            );
            self.control
                .runner_holdoff
                .insert(role, t.plus(START_FAILED_HOLDOFF));
        }
        for key in done {
            self.remove_pane(key, t);
        }
    }
}

/// What `spawn-agent` is given for the `n`th agent of `role`'s runner.
fn spawn_args(runner: &RoleRunner, role: &str, n: usize) -> SpawnArgs {
    SpawnArgs {
        argv: runner.argv.clone(),
        provider: runner.provider.clone(),
        model: runner.model.clone(),
        runtime: runner.runtime,
        cwd: runner.cwd.clone(),
        env: Some(runner.env.clone()).filter(|e| !e.is_empty()),
        jail: runner.jail.clone(),
        system_prompt: runner.system_prompt.clone(),
        name: Some(runner_name(role, n)),
        role: Some(role.to_string()),
        ..SpawnArgs::default()
    }
}
