//! Socket commands: one handler per `cmd`, each returning its reply line.
//!
//! The scope check comes first: a connection on a jail's socket may only
//! use agent commands (`whoami`, the snapshots, `watch`, `emit`) and only
//! on its own jail's panes. Everything else here is operator scope.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::{json, Value};

use crate::core::pane::{ExitStatus, LineKind, PaneId};
use crate::core::supervisor::PaneKey;
use crate::core::taxonomy::{self, Runtime};
use crate::core::time::Timestamp;
use crate::daemon::agent::{
    Agent, Recipe, RestartPolicy, RestartState, TimerMode, INPUT_QUEUE_LIMIT,
};
use crate::daemon::conn::{Scope, WatchFilter};
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::store::{ExitRecord, LineClass, Recovery, SessionStore};
use crate::platform;
use crate::protocol::{
    self, AgentArgs, Command, EmitArgs, InputArgs, LogHealth, PaneV1, PaneV2, Request,
    SessionSummary, SignalArgs, SnapshotV1, SnapshotV2, SpawnArgs, SpawnData, StatusData,
    WatchKind, WireExit, WireRestart, SNAPSHOT_V1, SNAPSHOT_V2,
};

type Reply = Result<Value, String>;

/// Commands a jailed agent may use on its jail's socket.
fn agent_command(c: &Command) -> bool {
    matches!(
        c,
        Command::Whoami
            | Command::GlasspaneSnapshot
            | Command::Snapshot(_)
            | Command::Watch(_)
            | Command::Emit(_)
            | Command::Status
    )
}

impl Daemon {
    pub(crate) fn handle(&mut self, id: ConnId, req: Request, t: Timestamp) -> Option<Vec<u8>> {
        let scope = self.conns.get(id.0).map(|c| c.scope.clone())?;
        let rid = req.id.clone();
        if let Scope::Jail(j) = &scope {
            if !agent_command(&req.command) {
                let msg = format!(
                    "{} is not permitted on the agent socket of jail {j}",
                    req.command.name()
                );
                return Some(protocol::err_line(rid.as_ref(), &msg));
            }
        }
        let id_ref = rid.as_ref();
        // Large typed replies (snapshots, status, sessions) are serialised
        // straight into the reply line, never through a `Value` tree.
        let line = |r: Reply| match r {
            Ok(data) => protocol::ok_line(id_ref, &data),
            Err(e) => protocol::err_line(id_ref, &e),
        };
        let out = match req.command {
            Command::Status => protocol::ok_line(id_ref, &self.status_data(&scope, t)),
            Command::GlasspaneSnapshot => protocol::ok_line(id_ref, &self.snapshot_v1(&scope, t)),
            Command::Snapshot(a) => match a.schema.as_deref() {
                None | Some("v1") | Some(SNAPSHOT_V1) => {
                    protocol::ok_line(id_ref, &self.snapshot_v1(&scope, t))
                }
                Some("v2") | Some(SNAPSHOT_V2) => {
                    protocol::ok_line(id_ref, &self.snapshot_v2(&scope, t))
                }
                Some(other) => {
                    protocol::err_line(id_ref, &format!("unknown schema {other:?} (v1 or v2)"))
                }
            },
            Command::ListSessions => protocol::ok_line(id_ref, &self.sessions()),
            Command::SpawnAgent(a) => line(self.cmd_spawn(*a, t)),
            Command::KillAgent(a) => line(self.cmd_kill(&a, t)),
            Command::GetSession(a) => {
                line(self.store.dump(&a.session_id).map_err(|e| e.to_string()))
            }
            Command::CompactSession(a) => line(self.cmd_compact(&a.session_id)),
            Command::Watch(a) => line(self.cmd_watch(id, &scope, a.panes)),
            Command::PauseAgent(a) => line(self.cmd_pause(&a, true, t)),
            Command::ResumeAgent(a) => line(self.cmd_pause(&a, false, t)),
            Command::SignalAgent(a) => line(self.cmd_signal(&a)),
            Command::SendInput(a) => line(self.cmd_send(&a)),
            Command::Emit(a) => line(self.cmd_emit(&scope, &a, t)),
            Command::Whoami => line(Ok(self.whoami(id, &scope))),
            Command::Hint(a) => line(self.cmd_hint(&a.kind, t)),
        };
        Some(out)
    }

    /// A pane by id or by name, visible in `scope`.
    fn resolve(&self, scope: &Scope, agent_id: &str) -> Result<PaneKey, String> {
        let key = self.sup.key(agent_id).or_else(|| {
            self.sup
                .iter()
                .find(|(_, p)| p.name.as_deref() == Some(agent_id))
                .map(|(k, _)| k)
        });
        let Some(key) = key else {
            return Err(format!("no agent {agent_id:?}"));
        };
        if let Scope::Jail(j) = scope {
            if self
                .agents
                .get(key.0 as usize)
                .and_then(|a| a.jail.as_deref())
                != Some(j.as_str())
            {
                return Err(format!("no agent {agent_id:?}"));
            }
        }
        Ok(key)
    }

    fn visible(&self, scope: &Scope, key: PaneKey) -> bool {
        match scope {
            Scope::Operator => true,
            Scope::Jail(j) => {
                self.agents
                    .get(key.0 as usize)
                    .and_then(|a| a.jail.as_deref())
                    == Some(j.as_str())
            }
        }
    }

    pub(crate) fn snapshot_v1(&self, scope: &Scope, t: Timestamp) -> SnapshotV1 {
        let stall = self.settings.daemon.stall_after;
        SnapshotV1 {
            schema: SNAPSHOT_V1.to_string(),
            host: self.settings.daemon.host.clone(),
            observed_at: t.to_rfc3339(),
            panes: self
                .sup
                .iter()
                .filter(|(k, _)| self.visible(scope, *k))
                .map(|(_, p)| PaneV1::from_pane(p, t, stall))
                .collect(),
        }
    }

    pub(crate) fn snapshot_v2(&self, scope: &Scope, t: Timestamp) -> SnapshotV2 {
        let stall = self.settings.daemon.stall_after;
        let panes = self
            .sup
            .iter()
            .filter(|(k, _)| self.visible(scope, *k))
            .map(|(k, p)| {
                let mut v = PaneV2::from_pane(p, t, stall);
                if let Some(a) = self.agents.get(k.0 as usize) {
                    v.daemon_session = Some(a.session.clone());
                    v.jail = a.jail.clone();
                    v.pid = a.running_pid();
                    v.generation = a.generation;
                    if a.restart.policy != RestartPolicy::Never {
                        v.restart = Some(WireRestart {
                            policy: a.restart.policy.as_str().to_string(),
                            attempts: a.restart.attempts,
                            next_at: a.restart.next_at.map(|n| n.to_rfc3339()),
                        });
                    }
                }
                v
            })
            .collect();
        SnapshotV2 {
            schema: SNAPSHOT_V2.to_string(),
            host: self.settings.daemon.host.clone(),
            observed_at: t.to_rfc3339(),
            panes,
        }
    }

    fn status_data(&self, scope: &Scope, t: Timestamp) -> StatusData {
        let mut states: BTreeMap<String, usize> = BTreeMap::new();
        let mut stalled = 0;
        let mut agents = 0;
        for (k, p) in self.sup.iter().filter(|(k, _)| self.visible(scope, *k)) {
            agents += 1;
            *states.entry(p.state().as_str().to_string()).or_default() += 1;
            if p.is_stalled(t, self.settings.daemon.stall_after) {
                stalled += 1;
            }
            let _ = k;
        }
        StatusData {
            host: self.settings.daemon.host.clone(),
            os: self.os.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            started_at: self.started_at.to_rfc3339(),
            agents,
            running: self
                .agents
                .iter()
                .enumerate()
                .filter(|(i, a)| {
                    a.running_pid().is_some() && self.visible(scope, PaneKey(*i as u32))
                })
                .count(),
            // Daemon-wide counts are the operator's business only.
            sessions: match scope {
                Scope::Operator => self.store.list().len(),
                Scope::Jail(_) => {
                    let mut own: Vec<&str> = self
                        .agents
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| self.visible(scope, PaneKey(*i as u32)))
                        .map(|(_, a)| a.session.as_str())
                        .collect();
                    own.sort_unstable();
                    own.dedup();
                    own.len()
                }
            },
            connections: if *scope == Scope::Operator {
                self.conns.len()
            } else {
                0
            },
            watchers: if *scope == Scope::Operator {
                self.watchers.len()
            } else {
                0
            },
            states,
            stalled,
            stall_after_ms: self.settings.daemon.stall_after.as_millis() as u64,
            scope: scope.name(),
            logs: {
                let h = self.store.health();
                LogHealth {
                    pending_bytes: h.pending_bytes as u64,
                    failed_writes: h.failed_writes,
                    lost_bytes: h.lost_bytes,
                    last_error: h.last_error,
                }
            },
            signals: match scope {
                Scope::Operator => self
                    .signals_received
                    .iter()
                    .map(|(name, n)| (name.to_string(), *n))
                    .collect(),
                Scope::Jail(_) => BTreeMap::new(),
            },
            alerts_unreachable: match scope {
                Scope::Operator => self.alerter.unreachable().map(str::to_owned),
                Scope::Jail(_) => None,
            },
        }
    }

    fn sessions(&self) -> Vec<SessionSummary> {
        self.store
            .list()
            .into_iter()
            .map(|m| SessionSummary {
                id: m.id.clone(),
                turn_count: m.turn_count,
                bytes: m.bytes,
                panes: m.panes.clone(),
                runtime: m.runtime.as_deref().and_then(Runtime::parse),
                cwd: m.cwd.clone(),
                created_at: m.created_at.to_rfc3339(),
                state: m
                    .final_state
                    .as_deref()
                    .and_then(crate::core::state::AgentState::parse),
                exit: if m.exit_code.is_some() || m.exit_signal.is_some() {
                    Some(WireExit {
                        code: m.exit_code,
                        signal: m.exit_signal,
                    })
                } else {
                    None
                },
            })
            .collect()
    }

    // -----------------------------------------------------------------------
    // spawn

    fn spawn_argv(&self, a: &SpawnArgs) -> Result<Vec<String>, String> {
        if let Some(argv) = &a.argv {
            if argv.is_empty() || argv[0].is_empty() {
                return Err("argv must name a program".into());
            }
            return Ok(argv.clone());
        }
        let Some(provider) = a.provider.as_deref() else {
            return Err("spawn-agent needs \"argv\", or \"provider\" and \"model\"".into());
        };
        let model = a.model.as_deref();
        if provider == "local" {
            // The contract: for provider "local", model is the executable.
            let Some(exe) = model.filter(|m| !m.is_empty()) else {
                return Err("provider \"local\" needs \"model\": the executable to run".into());
            };
            return Ok(vec![exe.to_string()]);
        }
        let Some(template) = self.settings.providers.get(provider) else {
            return Err(format!(
                "unknown provider {provider:?}: configure [providers.{provider}] argv = [...]"
            ));
        };
        let values = [
            ("{provider}", Some(provider)),
            ("{model}", model),
            ("{session_id}", a.session_id.as_deref()),
            ("{system_prompt}", a.system_prompt.as_deref()),
        ];
        let mut argv = Vec::with_capacity(template.len());
        'tokens: for tok in template {
            let mut s = tok.clone();
            for (ph, v) in values {
                if s.contains(ph) {
                    match v {
                        Some(v) => s = s.replace(ph, v),
                        // A placeholder without a value drops its argument
                        // and the flag before it (`--model {model}`).
                        None => {
                            if argv.last().is_some_and(|p: &String| p.starts_with('-')) {
                                argv.pop();
                            }
                            continue 'tokens;
                        }
                    }
                }
            }
            argv.push(s);
        }
        if argv.is_empty() {
            return Err(format!("provider {provider:?} has an empty argv"));
        }
        Ok(argv)
    }

    fn cmd_spawn(&mut self, a: SpawnArgs, t: Timestamp) -> Reply {
        if self.is_stopping() {
            return Err("colibrid is stopping".into());
        }
        let argv = self.spawn_argv(&a)?;
        let session = match &a.session_id {
            Some(s) if !SessionStore::valid_session_id(s) => {
                return Err(format!(
                    "bad session_id {s:?}: use letters, digits, '.', '_' or '-' (at most 128)"
                ))
            }
            Some(s) => s.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        if let Some(n) = &a.name {
            if n.is_empty()
                || self
                    .sup
                    .iter()
                    .any(|(_, p)| p.name.as_deref() == Some(n.as_str()))
            {
                return Err(format!("name {n:?} is empty or already used"));
            }
        }
        let policy = match a.restart.as_deref() {
            None => RestartPolicy::Never,
            Some(s) => RestartPolicy::parse(s)
                .ok_or_else(|| format!("bad restart policy {s:?} (never, on-failure, always)"))?,
        };
        if a.jail.is_some() && !platform::JAILS_SUPPORTED {
            return Err(format!(
                "jails are FreeBSD-only; this colibrid runs on {}",
                std::env::consts::OS
            ));
        }
        let cwd = a.cwd.as_ref().map(PathBuf::from);
        if let (Some(c), None) = (&cwd, &a.jail) {
            if !c.is_dir() {
                return Err(format!("cwd {} is not a directory", c.display()));
            }
        }
        let mut env: Vec<(String, String)> =
            a.env.clone().unwrap_or_default().into_iter().collect();
        if let Some(sp) = &a.system_prompt {
            env.push(("COLIBRI_SYSTEM_PROMPT".into(), sp.clone()));
        }
        let recipe = Recipe {
            argv,
            env,
            cwd: cwd.clone(),
            jail: a.jail.clone(),
            user: a.user.clone(),
            cols: a.cols.unwrap_or(160).max(1),
            rows: a.rows.unwrap_or(50).max(1),
            runtime: a.runtime,
        };
        let key = PaneKey(self.sup.len() as u32);
        let pane_id = uuid::Uuid::new_v4().to_string();
        let agent_name = Path::new(&recipe.argv[0]).file_name().map_or_else(
            || recipe.argv[0].clone(),
            |f| f.to_string_lossy().into_owned(),
        );
        // The pane and its agent record exist before the process so the
        // tokens the process registers already name them.
        let k2 = self
            .sup
            .attach_pane_at(PaneId(pane_id.clone()), &agent_name, recipe.runtime, t);
        debug_assert_eq!(k2, key);
        if let Some(p) = self.sup.get_mut(key) {
            p.name = a.name.clone();
            p.stall_after = a.stall_after.map(|d| d.0);
            let shown_cwd = cwd.clone().or_else(|| std::env::current_dir().ok());
            p.set_cwd(shown_cwd.map(|c| c.display().to_string()));
        }
        let restart = RestartState {
            policy,
            max: a.max_restarts.unwrap_or(self.settings.max_restarts),
            attempts: 0,
            next_at: None,
        };
        self.agents.push(Agent::new(
            pane_id.clone(),
            session.clone(),
            a.jail.clone(),
            Some(recipe.clone()),
            restart,
        ));
        let cwd_s = cwd.as_ref().map(|c| c.display().to_string());
        self.store.ensure_session(
            &session,
            recipe.runtime.map(|r| r.as_str()),
            cwd_s.as_deref(),
            t,
        );
        self.log_attach(key, &recipe, t);
        let name = a.name.clone();
        match self.start_process(key, &recipe, t) {
            Ok(pid) => {
                self.publish(
                    WatchKind::Attached {
                        pane: pane_id.clone(),
                        agent: agent_name,
                        name,
                        pid: Some(pid),
                    },
                    t,
                );
                Ok(to_value(SpawnData {
                    agent_id: pane_id,
                    status: "running".into(),
                    session_id: session,
                    pid,
                }))
            }
            Err(why) => {
                let reason = format!("spawn failed: {why}");
                if let Some(p) = self.sup.get_mut(key) {
                    p.fail(reason.clone(), t, &mut self.transitions);
                }
                self.store.exit(
                    &session,
                    &ExitRecord {
                        pane: &pane_id,
                        state: "error",
                        code: None,
                        signal: None,
                        reason: Some(&reason),
                    },
                    t,
                );
                self.after_ingest(key, t);
                Err(reason)
            }
        }
    }

    // -----------------------------------------------------------------------
    // process control

    fn cmd_kill(&mut self, a: &AgentArgs, t: Timestamp) -> Reply {
        let key = self.resolve(&Scope::Operator, &a.agent_id)?;
        let agent = &mut self.agents[key.0 as usize];
        let pane_id = agent.pane_id.clone();
        if agent.timer_mode == TimerMode::Restart {
            agent.restart.next_at = None;
            agent.stopped_by = Some("killed by operator".into());
            self.disarm_pane_timer(key);
            return Ok(json!({"agent_id": pane_id, "status": "stopped"}));
        }
        let Some(pid) = agent.running_pid() else {
            return Err(format!("agent {pane_id} is not running"));
        };
        agent.stopped_by = Some("killed by operator".into());
        platform::signal_tree(pid, libc::SIGKILL).map_err(|e| format!("kill: {e}"))?;
        // Descendants whose parent exited before the kill now hang off the
        // daemon; their environment still names the pane.
        let agents: Vec<platform::Pid> =
            self.agents.iter().filter_map(|a| a.running_pid()).collect();
        platform::signal_orphans_with_env(&agents, "COLIBRI_PANE_ID", &pane_id, libc::SIGKILL);
        // The contract: a forced kill is folded as an error at once.
        if let Some(p) = self.sup.get_mut(key) {
            p.fail("killed by operator".into(), t, &mut self.transitions);
        }
        self.after_ingest(key, t);
        Ok(json!({"agent_id": pane_id, "status": "killed"}))
    }

    fn cmd_pause(&mut self, a: &AgentArgs, pause: bool, t: Timestamp) -> Reply {
        let key = self.resolve(&Scope::Operator, &a.agent_id)?;
        let agent = &mut self.agents[key.0 as usize];
        let pane_id = agent.pane_id.clone();
        let Some(pid) = agent.running_pid() else {
            return Err(format!("agent {pane_id} is not running"));
        };
        if agent.paused == pause {
            return Ok(json!({"agent_id": pane_id, "paused": pause}));
        }
        let sig = if pause { libc::SIGSTOP } else { libc::SIGCONT };
        platform::signal_tree(pid, sig).map_err(|e| format!("signal: {e}"))?;
        agent.paused = pause;
        if let Some(p) = self.sup.get_mut(key) {
            p.paused = pause;
            if !pause {
                // Time spent stopped is not silence.
                p.rebase_quiet(t);
            }
        }
        if pause {
            self.publish(
                WatchKind::Paused {
                    pane: pane_id.clone(),
                },
                t,
            );
        } else {
            self.publish(
                WatchKind::Resumed {
                    pane: pane_id.clone(),
                },
                t,
            );
        }
        self.refresh_stall(key, t);
        Ok(json!({"agent_id": pane_id, "paused": pause}))
    }

    fn cmd_signal(&mut self, a: &SignalArgs) -> Reply {
        let key = self.resolve(&Scope::Operator, &a.agent_id)?;
        let sig = parse_signal(&a.signal)?;
        let agent = &self.agents[key.0 as usize];
        let Some(pid) = agent.running_pid() else {
            return Err(format!("agent {} is not running", agent.pane_id));
        };
        platform::signal_tree(pid, sig).map_err(|e| format!("signal: {e}"))?;
        Ok(json!({"agent_id": agent.pane_id, "signal": sig}))
    }

    fn cmd_send(&mut self, a: &InputArgs) -> Reply {
        let key = self.resolve(&Scope::Operator, &a.agent_id)?;
        let agent = &mut self.agents[key.0 as usize];
        let pane_id = agent.pane_id.clone();
        let Some(proc_) = agent.proc.as_mut().filter(|p| p.status.is_none()) else {
            return Err(format!("agent {pane_id} is not running"));
        };
        let newline = a.newline.unwrap_or(true);
        let n = a.text.len() + usize::from(newline);
        if proc_.input.len() + n > INPUT_QUEUE_LIMIT {
            return Err(format!("input queue of {pane_id} is full ({INPUT_QUEUE_LIMIT} bytes); the agent is not reading"));
        }
        proc_.input.extend(a.text.as_bytes());
        if newline {
            proc_.input.push_back(b'\n');
        }
        self.write_input(key);
        Ok(json!({"agent_id": pane_id, "queued": n}))
    }

    fn cmd_emit(&mut self, scope: &Scope, a: &EmitArgs, t: Timestamp) -> Reply {
        let key = self.resolve(scope, &a.agent_id)?;
        if !a.event.is_object() {
            return Err("event must be a JSON object".into());
        }
        let line = serde_json::to_vec(&a.event).map_err(|e| e.to_string())?;
        let kind = self.ingest_external(key, &line, t);
        let state = self
            .sup
            .get(key)
            .map(|p| p.state().as_str())
            .unwrap_or("idle");
        Ok(json!({"accepted": kind == LineKind::Event, "state": state}))
    }

    fn cmd_watch(&mut self, id: ConnId, scope: &Scope, panes: Option<Vec<String>>) -> Reply {
        let panes = match panes {
            None => None,
            Some(list) => {
                let mut ids = Vec::with_capacity(list.len());
                for p in &list {
                    let key = self.resolve(scope, p)?;
                    ids.push(self.agents[key.0 as usize].pane_id.clone());
                }
                Some(ids)
            }
        };
        let Some(conn) = self.conns.get_mut(id.0) else {
            return Err("connection closed".into());
        };
        conn.watch = Some(WatchFilter { panes });
        if !self.watchers.contains(&id) {
            self.watchers.push(id);
        }
        Ok(json!({"watching": true, "seq": self.seq}))
    }

    fn cmd_compact(&mut self, session: &str) -> Reply {
        let r = self
            .store
            .compact(session, &classify_line)
            .map_err(|e| e.to_string())?;
        Ok(
            json!({"before_bytes": r.before_bytes, "after_bytes": r.after_bytes, "dropped_lines": r.dropped_lines}),
        )
    }

    fn whoami(&self, id: ConnId, scope: &Scope) -> Value {
        let peer = self
            .conns
            .get(id.0)
            .and_then(|c| platform::peer_cred(std::os::fd::AsFd::as_fd(&c.stream)).ok());
        let panes: Vec<String> = self
            .sup
            .iter()
            .filter(|(k, _)| self.visible(scope, *k))
            .map(|(_, p)| p.id.0.clone())
            .collect();
        json!({
            "scope": scope.name(),
            "jail": match scope { Scope::Jail(j) => Some(j.clone()), Scope::Operator => None },
            "peer_pid": peer.as_ref().and_then(|p| p.pid),
            "peer_uid": peer.as_ref().map(|p| p.uid),
            "panes": panes,
        })
    }

    fn cmd_hint(&mut self, kind: &str, t: Timestamp) -> Reply {
        if kind != "resume" {
            return Err(format!("unknown hint {kind:?} (resume)"));
        }
        // The host slept: silence during the sleep is not the agents' fault.
        let keys: Vec<PaneKey> = self.sup.iter().map(|(k, _)| k).collect();
        for &k in &keys {
            if let Some(p) = self.sup.get_mut(k) {
                p.rebase_quiet(t);
            }
            if self
                .agents
                .get(k.0 as usize)
                .is_some_and(|a| a.timer_mode == TimerMode::Stall)
            {
                self.disarm_pane_timer(k);
            }
            self.refresh_stall(k, t);
        }
        Ok(json!({"rebased": keys.len()}))
    }

    // -----------------------------------------------------------------------
    // recovery

    /// Rebuilds panes from the logs a previous daemon left. Agents that were
    /// running died with it (their PTY closed): they are failed with a reason.
    pub(crate) fn recover(&mut self, rec: Recovery, t: Timestamp) {
        let mut out = Vec::new();
        let n = rec.panes.len();
        for rp in rec.panes {
            let runtime = rp.runtime.as_deref().and_then(Runtime::parse);
            let key = self.sup.attach_pane_at(
                PaneId(rp.pane.clone()),
                &rp.agent,
                runtime,
                rp.attached_at,
            );
            if (key.0 as usize) < self.agents.len() {
                let _ = self.sup.reattach(key, runtime, rp.attached_at);
                let a = &mut self.agents[key.0 as usize];
                a.generation = rp.generation;
                a.session = rp.session.clone();
            } else {
                let mut agent = Agent::new(
                    rp.pane.clone(),
                    rp.session.clone(),
                    rp.jail.clone(),
                    None,
                    RestartState {
                        policy: RestartPolicy::Never,
                        max: 0,
                        attempts: 0,
                        next_at: None,
                    },
                );
                agent.generation = rp.generation;
                agent.runtime_indexed = true;
                self.agents.push(agent);
            }
            let Some(pane) = self.sup.get_mut(key) else {
                continue;
            };
            pane.name = rp.name.clone();
            pane.set_cwd(rp.cwd.clone());
            for (ts, line) in &rp.events {
                let _ = pane.ingest_line(line, *ts, &mut out);
            }
            match rp.exit {
                Some((_, code, signal)) => {
                    let status = match (code, signal) {
                        (Some(c), _) => ExitStatus::Code(c),
                        (None, Some(s)) => ExitStatus::Signal(s),
                        (None, None) => ExitStatus::Unknown,
                    };
                    pane.exited(
                        status,
                        rp.attached_at
                            .max(pane.last_event_at().unwrap_or(rp.attached_at)),
                        &mut out,
                    );
                }
                None => {
                    let reason =
                        "colibrid stopped while this agent ran; the agent was lost".to_string();
                    pane.fail(reason.clone(), t, &mut out);
                    self.store.exit(
                        &rp.session,
                        &ExitRecord {
                            pane: &rp.pane,
                            state: "error",
                            code: None,
                            signal: None,
                            reason: Some(&reason),
                        },
                        t,
                    );
                }
            }
            out.clear();
        }
        if n > 0 {
            crate::daemon::diag::log_info!("recovered {n} pane(s) from the session logs");
        }
    }
}

/// What log compaction may drop, by the session's runtime (Pi's taxonomy
/// when unknown): streaming deltas, but never turn boundaries.
pub(crate) fn classify_line(runtime: Option<&str>, line: &[u8]) -> LineClass {
    let rt = runtime.and_then(Runtime::parse).unwrap_or(Runtime::Pi);
    if taxonomy::is_turn_boundary(rt, line) {
        LineClass::Boundary
    } else if taxonomy::is_stream_delta(rt, line) {
        LineClass::Delta
    } else {
        LineClass::Keep
    }
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `TERM`, `SIGTERM` or `15`.
fn parse_signal(v: &Value) -> Result<i32, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| nix::sys::signal::Signal::try_from(*n).is_ok())
            .ok_or_else(|| format!("bad signal number {n}")),
        Value::String(s) => {
            let up = s.to_ascii_uppercase();
            let name = if up.starts_with("SIG") {
                up
            } else {
                format!("SIG{up}")
            };
            nix::sys::signal::Signal::from_str(&name)
                .map(|s| s as i32)
                .map_err(|_| format!("unknown signal {s:?}"))
        }
        _ => Err("signal must be a name or a number".into()),
    }
}
