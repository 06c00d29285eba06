//! The supervisor: declared agents (`[agents.NAME]`), started at start-up
//! and reconciled on SIGHUP (`core::reconcile`), planned stops that raise
//! no alert, and the agent records that bring agents back, resumed in their
//! own harness session, after colibrid restarts (`core::spec`).
//!
//! Each pane carries a [`Supervision`]: its recipe (when it has one that can
//! be persisted), where it came from, whether it should run (s6's
//! `wantedup`) and whether its restarts gave up. What it actually does is
//! derived ([`Supervision::actual`]) from the pane's process and life, so
//! the two can never disagree.
//!
//! The records live in `<state_dir>/agents.jsonl`, one line per agent,
//! replaced by write, fsync and rename on a thread of their own
//! ([`RecordsWriter`]), so a frozen filesystem never stops the loop. The
//! file is small (one line per declared or named agent) and written only
//! when an agent's lifecycle changes, not per line of output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod records;

use crate::core::escalation::Ladder;
use crate::core::lifecycle::{Life, LifeEvent};
use crate::core::pane::{Pane, PaneId};
use crate::core::reconcile::{self, AgentChange, Occasion, Origin, TableEntry};
use crate::core::spec::{
    check_agent_name, default_resume_template, known_runtime, Actual, AgentRecord, AgentSpec,
    RestartPolicy, StopCause, Wanted,
};
use crate::core::state::AgentState;
use crate::core::time::Timestamp;
use crate::daemon::agent::{Agent, Recipe, RestartState};
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::PaneKey;
use crate::daemon::store::ExitRecord;
use crate::daemon::timers::Deadline;
use crate::platform;
use crate::protocol::WatchKind;
use records::{cause_name, encode_records};
pub use records::{read_records, write_records};

/// The records file under the state dir.
pub const RECORDS_FILE: &str = "agents.jsonl";
/// The longest the records wait for the frames of a wakeup to leave.
pub const RECORDS_DEFER: Duration = Duration::from_millis(50);

fn recipe_of(spec: &AgentSpec, argv: Vec<String>) -> Recipe {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // As `spawn-agent` gives it (a spawned agent's recipe has it already).
    if let Some(prompt) = &spec.system_prompt {
        if !spec.env.contains_key(SYSTEM_PROMPT_ENV) {
            env.push((SYSTEM_PROMPT_ENV.to_owned(), prompt.clone()));
        }
    }
    Recipe {
        argv,
        env,
        cwd: spec.cwd.clone(),
        jail: spec.jail.clone(),
        user: spec.user.clone(),
        cols: 160,
        rows: 50,
        runtime: spec.runtime,
        system_prompt: spec.system_prompt.clone(),
        scope: spec.scope.clone(),
    }
}

/// The environment variable an agent finds its system prompt in, whether
/// or not its harness took it on its command line.
pub const SYSTEM_PROMPT_ENV: &str = "COLIBRI_SYSTEM_PROMPT";

fn program_name(argv: &[String]) -> String {
    let first = argv.first().map(String::as_str).unwrap_or("agent");
    Path::new(first)
        .file_name()
        .map_or_else(|| first.to_string(), |f| f.to_string_lossy().into_owned())
}

impl Daemon {
    fn records_path(&self) -> PathBuf {
        self.settings.daemon.state_dir.join(RECORDS_FILE)
    }

    /// The pane a name belongs to.
    pub(crate) fn pane_named(&self, name: &str) -> Option<PaneKey> {
        self.panes
            .iter()
            .find(|(_, s)| s.pane.name.as_deref() == Some(name))
            .map(|(k, _)| k)
    }

    /// At start-up, after recovery: declared agents start (resumed where a
    /// record has their harness session), and spawned agents whose policy
    /// wants them come back in their own pane.
    pub(crate) fn supervise_at_start(&mut self, t: Timestamp) {
        // Nothing is handed out while they come up; then the seed's grace.
        self.control.starting = true;
        self.supervise_at_start_inner(t);
        let started: std::collections::HashSet<String> = self
            .panes
            .iter()
            .filter(|(_, s)| s.agent.running_pid().is_some())
            .map(|(_, s)| s.pane.id.0.clone())
            .collect();
        let until = t.plus(self.settings.orchestrator.grace);
        self.control.start_grace(until, started);
    }

    fn supervise_at_start_inner(&mut self, t: Timestamp) {
        let records = read_records(&self.records_path());
        let declared: Vec<AgentSpec> = self.settings.agents.values().cloned().collect();
        // Every recovered pane is named by its record; none is running.
        let table: Vec<TableEntry> = records
            .iter()
            .map(|(is_declared, r)| TableEntry {
                name: r.spec.name.clone(),
                fingerprint: r.spec.fingerprint(),
                origin: if *is_declared {
                    Origin::Declared
                } else {
                    Origin::Spawned
                },
                wanted: r.wanted.at_next_start(),
                actual: Actual::Exited,
            })
            .collect();
        for change in reconcile::plan(&declared, &table, Occasion::Start) {
            let record = records
                .iter()
                .find(|(_, r)| r.spec.name == change.name())
                .map(|(_, r)| r);
            match change {
                AgentChange::Start(spec) => {
                    // Resumed only when the recipe it ran is the one declared.
                    let argv = match record {
                        Some(r) if r.spec.fingerprint().launch == spec.fingerprint().launch => {
                            r.start_argv()
                        }
                        _ => spec.argv.clone(),
                    };
                    let pane_id = record.and_then(|r| r.pane_id.clone());
                    self.launch_declared(spec, pane_id, argv, t);
                }
                AgentChange::Declare(spec) => {
                    let pane_id = record.and_then(|r| r.pane_id.clone());
                    self.declare_down(spec, pane_id, t);
                }
                AgentChange::Clash { name } => {
                    log_warn!("declared agent {name}: the name is taken by a spawned pane");
                }
                AgentChange::Stop { name } => self.forget_declared(&name),
                AgentChange::Restart(_) | AgentChange::Update(_) => {}
            }
        }
        // Each agent stays where it was on the escalation ladder. The
        // journal marks the start first: a replay then forgets the ladders
        // this run does not bring back, as colibrid did.
        self.control
            .record_ladder(crate::core::dispatch_replay::PlanLine::Started { at: t.as_millis() });
        for (_, record) in &records {
            if let (Some(pane), 1..) = (&record.pane_id, record.escalation) {
                let ladder = Ladder::resumed(record.escalation, t);
                self.control.ladders.insert(pane.clone(), ladder);
                self.control
                    .record_ladder(crate::core::dispatch_replay::PlanLine::LadderResumed {
                        pane: pane.clone(),
                        at: t.as_millis(),
                        next: record.escalation,
                    });
            }
        }
        for (is_declared, record) in &records {
            if *is_declared || !record.comes_back_at_start() {
                continue;
            }
            let argv = record.start_argv();
            self.launch(
                record.spec.clone(),
                Origin::Spawned,
                record.pane_id.clone(),
                argv,
                t,
            );
        }
        self.mark_records_changed();
    }

    /// SIGHUP: what `supervisorctl update` does, for the new declarations.
    pub(crate) fn reconcile_declared(
        &mut self,
        declared: BTreeMap<String, AgentSpec>,
        t: Timestamp,
    ) {
        self.settings.agents = declared;
        let specs: Vec<AgentSpec> = self.settings.agents.values().cloned().collect();
        let table: Vec<TableEntry> = self
            .panes
            .iter()
            .filter_map(|(_, s)| {
                let sup = &s.agent.supervision;
                let name = s.pane.name.clone()?;
                let fingerprint = match &sup.spec {
                    Some(spec) => spec.fingerprint(),
                    None => AgentSpec::new(name.clone(), vec![]).fingerprint(),
                };
                Some(TableEntry {
                    name,
                    fingerprint,
                    origin: sup.origin,
                    wanted: sup.wanted.clone(),
                    actual: s.agent.actual(),
                })
            })
            .collect();
        for change in reconcile::plan(&specs, &table, Occasion::Reload) {
            log_info!("reload: {change}");
            match change {
                AgentChange::Start(spec) => {
                    let argv = spec.argv.clone();
                    self.launch_declared(spec, None, argv, t);
                }
                AgentChange::Declare(spec) => self.declare_down(spec, None, t),
                AgentChange::Stop { name } => {
                    if let Some(key) = self.pane_named(&name) {
                        self.stop_planned(key, StopCause::Removed, Some("no longer declared"), t);
                    }
                }
                AgentChange::Restart(spec) => {
                    if let Some(key) = self.pane_named(&spec.name) {
                        self.take_spec(key, spec, t);
                        self.restart_agent(key, t);
                    }
                }
                AgentChange::Update(spec) => {
                    if let Some(key) = self.pane_named(&spec.name) {
                        self.take_spec(key, spec, t);
                    }
                }
                AgentChange::Clash { name } => {
                    log_warn!("declared agent {name}: the name is taken by a spawned pane");
                }
            }
        }
        self.mark_records_changed();
    }

    /// A declared agent's pane: the one that had its name (its history
    /// stays), else the one its record names, else a new one.
    fn launch_declared(
        &mut self,
        spec: AgentSpec,
        pane_id: Option<String>,
        argv: Vec<String>,
        t: Timestamp,
    ) {
        let pane_id = self
            .pane_named(&spec.name)
            .and_then(|k| self.panes.pane(k).map(|p| p.id.0.clone()))
            .or(pane_id);
        self.launch(spec, Origin::Declared, pane_id, argv, t);
    }

    fn declare_down(&mut self, spec: AgentSpec, pane_id: Option<String>, t: Timestamp) {
        let pane_id = self
            .pane_named(&spec.name)
            .and_then(|k| self.panes.pane(k).map(|p| p.id.0.clone()))
            .or(pane_id);
        let key = self.pane_for(&spec, pane_id, t);
        self.take_spec(key, spec, t);
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.supervision.origin = Origin::Declared;
            agent.supervision.wanted = Wanted::Down {
                by: StopCause::NoAutostart,
                reason: None,
            };
        }
    }

    /// A record of a declared agent no longer declared: its pane (if
    /// recovered) stays as history, wanted down.
    fn forget_declared(&mut self, name: &str) {
        if let Some(agent) = self.pane_named(name).and_then(|k| self.panes.agent_mut(k)) {
            agent.supervision.origin = Origin::Declared;
            agent.supervision.wanted = Wanted::Down {
                by: StopCause::Removed,
                reason: None,
            };
        }
    }

    /// The pane `pane_id` names if it exists (recovered or still here),
    /// else a new pane for `spec`.
    fn pane_for(&mut self, spec: &AgentSpec, pane_id: Option<String>, t: Timestamp) -> PaneKey {
        if let Some(key) = pane_id.as_deref().and_then(|id| self.panes.key(id)) {
            if let Some(pane) = self.panes.pane_mut(key) {
                pane.name = Some(spec.name.clone());
                pane.stall_after = spec.stall_after;
            }
            return key;
        }
        let id = pane_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let session = uuid::Uuid::new_v4().to_string();
        let mut pane = Pane::new(
            PaneId(id.clone()),
            program_name(&spec.argv),
            spec.runtime,
            self.settings.daemon.max_line,
            t,
        );
        pane.name = Some(spec.name.clone());
        pane.stall_after = spec.stall_after;
        let cwd = spec.cwd.clone().or_else(|| std::env::current_dir().ok());
        pane.set_cwd(cwd.map(|c| c.display().to_string()));
        let agent = Agent::new(
            id,
            session.clone(),
            spec.jail.clone(),
            None,
            RestartState {
                policy: RestartPolicy::Never,
                max: 0,
                attempts: 0,
            },
        );
        let key = self.panes.insert(pane, agent);
        let cwd_s = spec.cwd.as_ref().map(|c| c.display().to_string());
        self.store.ensure_session(
            &session,
            spec.runtime.map(|r| r.as_str()),
            cwd_s.as_deref(),
            t,
        );
        key
    }

    /// Makes `spec` the pane's recipe, restart rule, role and heartbeat
    /// (the process, if any, is not touched).
    fn take_spec(&mut self, key: PaneKey, spec: AgentSpec, t: Timestamp) {
        let max_default = self.settings.max_restarts;
        if let Some(pane) = self.panes.pane_mut(key) {
            pane.role = spec.role.clone();
        }
        self.configure_heartbeat(key, spec.heartbeat, spec.heartbeat_prompt.as_deref(), t);
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        agent.restart.policy = spec.restart;
        agent.restart.max = spec.max_restarts.unwrap_or(max_default);
        let argv = spec.argv.clone();
        agent.recipe = Some(recipe_of(&spec, argv));
        agent.supervision.spec = Some(Box::new(spec));
    }

    /// Starts `spec` with `argv` (its own, or a resume) in its pane.
    fn launch(
        &mut self,
        spec: AgentSpec,
        origin: Origin,
        pane_id: Option<String>,
        argv: Vec<String>,
        t: Timestamp,
    ) {
        let key = self.pane_for(&spec, pane_id, t);
        let name = spec.name.clone();
        self.take_spec(key, spec.clone(), t);
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.recipe = Some(recipe_of(&spec, argv.clone()));
            agent.supervision.origin = origin;
        }
        log_info!("starting agent {name}: {}", argv.join(" "));
        let fresh = self
            .panes
            .agent(key)
            .is_some_and(|a| a.generation == 0 && a.life == Life::Idle);
        if fresh {
            self.first_start(key, t);
        } else {
            self.start_now(key, t);
        }
    }

    /// A pane's first process in this daemon: `attached`, as for
    /// `spawn-agent`. The pane may be one recovered from the logs, which
    /// still shows how its last run ended: it starts afresh, as a restart
    /// does, so the running agent is not shown with the old run's exit and
    /// error.
    fn first_start(&mut self, key: PaneKey, t: Timestamp) {
        let Some(recipe) = self.panes.agent(key).and_then(|a| a.recipe.clone()) else {
            return;
        };
        self.panes
            .reattach(key, recipe.runtime, self.settings.daemon.max_line, t);
        // A pane recovered from its log counts its runtime as told, but
        // this run's `attached` names only the recipe's: one detected from
        // the output is told anew (`index_runtime`).
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.runtime_indexed = false;
        }
        self.log_attach(key, &recipe, t);
        match self.start_process(key, &recipe, t) {
            Ok(pid) => {
                self.life_event(key, LifeEvent::Spawned, t);
                if let Some(pane) = self.panes.pane(key) {
                    let event = WatchKind::Attached {
                        pane: pane.id.0.clone(),
                        agent: pane.agent.clone(),
                        name: pane.name.clone(),
                        pid: Some(pid),
                        runtime: pane.runtime(),
                    };
                    self.publish(event, t);
                }
                self.join_budget_pauses(key, t);
            }
            Err(why) => {
                log_warn!("starting {}: {why}", recipe.argv.join(" "));
                let reason = format!("start failed: {why}");
                if let Some(pane) = self.panes.pane_mut(key) {
                    pane.fail(reason.clone(), t, &mut self.transitions);
                }
                // Its `attached` is logged already: without the end, the
                // next colibrid would take the run for one it lost, and
                // announce and alert it as lost (`recover`).
                if let Some(agent) = self.panes.agent(key) {
                    self.store.exit(
                        &agent.session,
                        &ExitRecord {
                            pane: &agent.pane_id,
                            state: "error",
                            code: None,
                            signal: None,
                            reason: Some(&reason),
                            planned: false,
                        },
                        t,
                    );
                }
                self.after_ingest(key, t);
                let restart = self.restart_plan(key, AgentState::Error, Duration::ZERO, t);
                self.life_event(key, LifeEvent::SpawnFailed { restart }, t);
            }
        }
        self.mark_records_changed();
    }

    /// Starts the pane's recipe now, wanted up, restart count reset.
    pub(crate) fn start_now(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        agent.supervision.wanted = Wanted::Up;
        agent.supervision.given_up = false;
        agent.supervision.restart_after_stop = false;
        agent.stopped_by = None;
        agent.restart.attempts = 0;
        if matches!(agent.life, Life::Backoff { .. }) {
            self.life_event(key, LifeEvent::Stop, t);
        }
        self.restart_now(key, t);
        self.mark_records_changed();
    }

    /// Stops the pane's agent on purpose: no alert, no restart until it is
    /// started again (or, for some causes, colibrid starts again).
    pub(crate) fn stop_planned(
        &mut self,
        key: PaneKey,
        by: StopCause,
        reason: Option<&str>,
        t: Timestamp,
    ) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let why = reason.map_or_else(|| cause_name(&by).into_owned(), str::to_string);
        agent.stopped_by = Some(format!("stopped: {why}"));
        agent.supervision.wanted = Wanted::Down {
            by,
            reason: reason.map(str::to_string),
        };
        agent.supervision.restart_after_stop = false;
        self.end_process(key, t);
        self.mark_records_changed();
    }

    /// `restart-agent`, or a reload that changed the launch: stop the
    /// process; it starts again when it has ended.
    pub(crate) fn restart_agent(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        if agent.running_pid().is_none() && agent.proc.is_none() {
            self.start_now(key, t);
            return;
        }
        agent.stopped_by = Some("restarted".into());
        agent.supervision.restart_after_stop = true;
        self.end_process(key, t);
    }

    /// SIGTERM to the agent's tree (a pending restart is cancelled).
    fn end_process(&mut self, key: PaneKey, t: Timestamp) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        if matches!(slot.agent.life, Life::Backoff { .. }) {
            self.life_event(key, LifeEvent::Stop, t);
            return;
        }
        let Some(pid) = slot.agent.running_pid() else {
            return;
        };
        if slot.pane.paused {
            let _ = platform::signal_tree(pid, libc::SIGCONT);
        }
        if let Err(e) = platform::signal_tree(pid, libc::SIGTERM) {
            log_warn!("stopping pid {pid}: {e}");
        }
        let grace = self.settings.daemon.shutdown_grace;
        self.set_deadline(key, Deadline::StopGrace, t.plus(grace), t);
    }

    /// A planned stop's grace is over and the agent still runs: SIGKILL
    /// to its tree, as the shutdown does.
    pub(crate) fn stop_grace_over(&mut self, key: PaneKey) {
        let Some(pid) = self.panes.agent(key).and_then(|a| a.running_pid()) else {
            return;
        };
        log_warn!("pid {pid} outlived its stop grace: SIGKILL");
        let _ = platform::signal_tree(pid, libc::SIGKILL);
    }

    /// Called once a pane's process has ended and its restart was decided:
    /// a restart that waited for the stop happens now.
    pub(crate) fn after_end(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent(key) else {
            return;
        };
        let restart = agent.supervision.restart_after_stop;
        let gone = !agent.actual().is_alive();
        let pane = agent.pane_id.clone();
        if restart && !self.is_stopping() {
            self.start_now(key, t);
            return;
        }
        self.mark_records_changed();
        // A task held by an agent that will not run again would stay
        // claimed or working for ever: it goes back to the queue. One that
        // restarts (or comes back after colibrid's own stop) keeps it.
        if gone && !self.is_stopping() {
            self.release_task_of_ended(&pane, t);
        }
    }

    /// Restarts exhausted: the pane is given up.
    pub(crate) fn mark_given_up(&mut self, key: PaneKey) {
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.supervision.given_up = true;
        }
        self.mark_records_changed();
    }

    /// The orderly shutdown: every agent still wanted up is stopped by it,
    /// which is a planned stop; it comes back at the next start.
    pub(crate) fn stop_all_planned(&mut self) {
        for key in self.panes.keys() {
            if let Some(agent) = self.panes.agent_mut(key) {
                if agent.supervision.wanted.is_up() {
                    agent.supervision.wanted = Wanted::Down {
                        by: StopCause::Shutdown,
                        reason: None,
                    };
                }
                agent.supervision.restart_after_stop = false;
            }
        }
        self.mark_records_changed();
    }

    /// Persists the records again when a pane's harness reported a new
    /// session id (the one a resume needs).
    pub(crate) fn note_harness_session(&mut self, key: PaneKey) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        if slot.agent.supervision.spec.is_none() {
            return;
        }
        let session = slot.pane.session_id();
        if session.is_none() || session == slot.agent.supervision.persisted_session.as_deref() {
            return;
        }
        self.mark_records_changed();
    }

    /// A pane spawned by hand with a name becomes supervised: its recipe is
    /// persisted, so it comes back when colibrid restarts if its policy
    /// wants it. Unnamed panes have no identity to come back under.
    pub(crate) fn adopt_spawned(
        &mut self,
        key: PaneKey,
        name: Option<&str>,
        max_restarts: Option<u32>,
    ) {
        let Some(name) = name.filter(|n| check_agent_name(n).is_ok()) else {
            return;
        };
        let role = self.panes.pane(key).and_then(|p| p.role.clone());
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(recipe) = agent.recipe.as_ref() else {
            return;
        };
        let mut spec = AgentSpec::new(name, recipe.argv.clone());
        spec.runtime = recipe.runtime;
        spec.cwd = recipe.cwd.clone();
        spec.env = recipe.env.iter().cloned().collect();
        spec.user = recipe.user.clone();
        spec.jail = recipe.jail.clone();
        spec.scope = recipe.scope.clone();
        spec.restart = agent.restart.policy;
        spec.max_restarts = max_restarts;
        spec.resume = known_runtime(&spec)
            .and_then(default_resume_template)
            .map(|t| t.iter().map(|s| s.to_string()).collect());
        spec.system_prompt = recipe.system_prompt.clone();
        if let Some(hb) = &agent.heartbeat {
            spec.heartbeat = Some(hb.schedule.period());
            spec.heartbeat_prompt =
                Some(hb.prompt.clone()).filter(|p| p != crate::core::heartbeat::DEFAULT_PROMPT);
        }
        spec.role = role;
        agent.supervision.spec = Some(Box::new(spec));
        agent.supervision.origin = Origin::Spawned;
        self.mark_records_changed();
    }

    /// Marks the agent records as changed: they are written once at the
    /// end of the wakeup (`write_records`, after the frames), however many
    /// agents changed meanwhile. Writing them on every change made each
    /// spawn and exit cost time in proportion to the number of agents
    /// (10,000 records encoded per spawn), so spawning N agents cost N².
    pub(crate) fn mark_records_changed(&mut self) {
        self.wake.records_dirty = true;
    }

    /// At the end of a wakeup: [`Daemon::write_records`], unless frames
    /// still wait for the log and journal writers to confirm. Then the
    /// records' thread (a write and an fsync) would compete with those
    /// writers for the CPU and delay the frames (an exit notice waited
    /// about 0.15 ms for it on a 2-core host), so the records wait for the
    /// wakeup that the writers' confirmation brings, at most
    /// [`RECORDS_DEFER`].
    pub(crate) fn write_records_after_frames(&mut self, writers_behind: bool, t: Timestamp) {
        if !self.wake.records_dirty {
            return;
        }
        if writers_behind {
            let due = *self.wake.records_due.get_or_insert(t.plus(RECORDS_DEFER));
            if t < due {
                return;
            }
        }
        self.write_records();
    }

    /// Writes every pane's record (those with a recipe) if any changed
    /// since the last write. A spawned pane that ended by itself (its
    /// policy did not restart it) is not recorded: it is not to come back.
    pub(crate) fn write_records(&mut self) {
        self.wake.records_due = None;
        if !std::mem::take(&mut self.wake.records_dirty) {
            return;
        }
        let mut lines = Vec::new();
        for key in self.panes.keys() {
            // Read, and borrowed to change only when the session moved: a
            // mutable borrow drops the pane's kept snapshot text.
            let Some(slot) = self.panes.get(key) else {
                continue;
            };
            let actual = slot.agent.actual();
            let sup = &slot.agent.supervision;
            let Some(spec) = sup.spec.as_deref().cloned() else {
                continue;
            };
            if sup.origin == Origin::Spawned && matches!(actual, Actual::Exited | Actual::GivenUp) {
                continue;
            }
            let harness_session = slot
                .pane
                .session_id()
                .map(str::to_string)
                .or_else(|| sup.persisted_session.clone());
            let moved = harness_session != sup.persisted_session;
            lines.push((
                sup.origin == Origin::Declared,
                AgentRecord {
                    spec,
                    wanted: sup.wanted.clone(),
                    pane_id: Some(slot.pane.id.0.clone()),
                    harness_session: harness_session.clone(),
                    escalation: self
                        .control
                        .ladders
                        .get(&slot.pane.id.0)
                        .map_or(0, Ladder::next_level),
                },
            ));
            if moved {
                if let Some(agent) = self.panes.agent_mut(key) {
                    agent.supervision.persisted_session = harness_session;
                }
            }
        }
        let path = self.records_path();
        match encode_records(&lines) {
            Ok(bytes) => self.records.send(path, bytes),
            Err(e) => log_warn!("encoding the agent records: {e}"),
        }
    }

    /// Retention: finished panes whose state is older than
    /// `retain_finished` leave the table (their logs stay). Declared agents
    /// stay: their name is their identity.
    pub(crate) fn retire_finished(&mut self, t: Timestamp) {
        let keep = self.settings.daemon.retain_finished;
        if keep.is_zero() {
            return;
        }
        let old: Vec<PaneKey> = self
            .panes
            .iter()
            .filter(|(_, s)| {
                let sup = &s.agent.supervision;
                sup.origin != Origin::Declared
                    && !s.agent.actual().is_alive()
                    && t.since(s.pane.state_since()) >= keep
            })
            .map(|(k, _)| k)
            .collect();
        if old.is_empty() {
            return;
        }
        // As remove-agent: once the panes are gone nothing could name what
        // their agents left running. One scan for all of them.
        let ids: Vec<String> = old
            .iter()
            .filter_map(|&k| self.panes.pane(k).map(|p| p.id.0.clone()))
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let left = self.signal_leftovers(&ids, libc::SIGKILL);
        if left > 0 {
            log_info!(
                "retiring {} pane(s): killed {left} process(es) their agents left running",
                ids.len()
            );
        }
        for key in old {
            self.remove_pane(key, t);
        }
    }

    /// `remove-agent`: forgets a finished pane; its logs stay.
    pub(crate) fn remove_pane(&mut self, key: PaneKey, t: Timestamp) {
        if let Some(mut slot) = self.panes.remove(key) {
            let govern = slot.agent.timers.due(Deadline::Govern);
            slot.agent.timers.release(&mut self.timerq, key);
            // The timed resume it held may be other panes' (a shared
            // budget): another pane holds it now.
            let holder = self
                .panes
                .iter()
                .next()
                .map(|(k, s)| (k, s.agent.timers.due(Deadline::Govern)));
            if let (Some(at), Some((other, own))) = (govern, holder) {
                let at = own.map_or(at, |own| own.min(at));
                self.set_deadline(other, Deadline::Govern, at, t);
            }
            let pane = slot.pane.id.0.clone();
            self.store.removed(&slot.agent.session, &pane, t);
            // What was kept by pane id goes with it: a daemon that runs
            // agents for months would otherwise keep a bucket and a ledger
            // for every pane it ever had.
            self.alerter.forget_pane(&pane);
            self.governor.forget(&pane);
            self.activity.forget(&pane);
            self.control.ladders.remove(&pane);
            log_info!("pane {pane} removed");
            self.publish(WatchKind::Removed { pane }, t);
        }
        self.mark_records_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_write_and_a_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(RECORDS_FILE);
        let record = AgentRecord {
            spec: AgentSpec::new("fixer", vec!["pi".into()]),
            wanted: Wanted::Down {
                by: StopCause::Shutdown,
                reason: None,
            },
            pane_id: Some("p1".into()),
            harness_session: Some("s-1".into()),
            escalation: 1,
        };
        write_records(&path, &[(true, record.clone())]).expect("write");
        let back = read_records(&path);
        assert_eq!(back, vec![(true, record)]);
        assert!(!path.with_extension("jsonl.new").exists());
    }

    #[test]
    fn a_missing_file_is_no_records_and_a_bad_line_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(RECORDS_FILE);
        assert!(read_records(&path).is_empty());
        std::fs::write(&path, "not json\n").expect("write");
        assert!(read_records(&path).is_empty());
    }
}
