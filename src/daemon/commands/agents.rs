//! `spawn-agent`: resolve the command line, create the pane, start it.

use std::path::{Path, PathBuf};

use crate::core::heartbeat::{check_period, check_prompt as check_heartbeat_prompt};
use crate::core::lifecycle::{LifeEvent, RestartPlan};
use crate::core::pane::{Pane, PaneId};
use crate::core::spec::{
    add_system_prompt, check_role, check_system_prompt, expand_template,
    template_places_system_prompt, SYSTEM_PROMPT_PLACEHOLDER,
};
use crate::core::time::Timestamp;
use crate::daemon::agent::{Agent, Recipe, RestartPolicy, RestartState};
use crate::daemon::diag::log_info;
use crate::daemon::event_loop::Daemon;
use crate::daemon::store::{ExitRecord, SessionStore};
use crate::daemon::supervise::SYSTEM_PROMPT_ENV;
use crate::platform;
use crate::protocol::{CommandError, ErrorCode, Reply, SpawnArgs, SpawnData, WatchKind};

use super::Call;

pub(super) fn spawn(d: &mut Daemon, call: &Call, a: Box<SpawnArgs>) -> Result<Reply, CommandError> {
    d.cmd_spawn(*a, call.t).map(Reply::Spawn)
}

/// The longest name `spawn-agent` takes (a declared agent's is shorter:
/// `core::spec::MAX_NAME_LEN`).
const MAX_SPAWN_NAME_CHARS: usize = 256;

/// `spawn-agent`'s `scope`: paths the guard compares as text, so a `~` or
/// a variable (which nothing expands) is refused, as in colibri.toml.
fn check_scope(scope: &[String]) -> Result<(), CommandError> {
    if scope.len() > crate::core::spec::MAX_SCOPE_PATHS {
        return Err(CommandError::invalid(format!(
            "scope lists {} paths; at most {}",
            scope.len(),
            crate::core::spec::MAX_SCOPE_PATHS
        )));
    }
    for p in scope {
        crate::core::spec::check_scope_path(p).map_err(CommandError::invalid)?;
    }
    Ok(())
}
impl Daemon {
    /// The argv `a` asks for, with its system prompt placed: by the
    /// provider template's `{system_prompt}`, else appended the way the
    /// harness takes one (`core::spec::add_system_prompt`).
    fn spawn_argv(&self, a: &SpawnArgs) -> Result<Vec<String>, CommandError> {
        let (mut argv, placed) = self.launch_argv(a)?;
        if let (Some(prompt), false) = (a.system_prompt.as_deref(), placed) {
            if !add_system_prompt(&mut argv, a.runtime, prompt) {
                log_info!(
                    "spawn-agent: {} takes no system prompt on its command line; \
                     it is in COLIBRI_SYSTEM_PROMPT only",
                    argv[0]
                );
            }
        }
        Ok(argv)
    }

    /// The argv before the system prompt, and whether its provider
    /// template placed the prompt itself.
    fn launch_argv(&self, a: &SpawnArgs) -> Result<(Vec<String>, bool), CommandError> {
        if let Some(argv) = &a.argv {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(CommandError::invalid("argv must name a program"));
            }
            return Ok((argv.clone(), false));
        }
        let Some(provider) = a.provider.as_deref() else {
            return Err(CommandError::invalid(
                "spawn-agent needs \"argv\", or \"provider\" and \"model\"",
            ));
        };
        let model = a.model.as_deref();
        if provider == "local" {
            // The contract: for provider "local", model is the executable.
            let Some(exe) = model.filter(|m| !m.is_empty()) else {
                return Err(CommandError::invalid(
                    "provider \"local\" needs \"model\": the executable to run",
                ));
            };
            return Ok((vec![exe.to_string()], false));
        }
        let Some(template) = self.settings.providers.get(provider) else {
            return Err(CommandError::invalid(format!(
                "unknown provider {provider:?}: configure [providers.{provider}] argv = [...]"
            )));
        };
        let values = [
            ("{provider}", Some(provider)),
            ("{model}", model),
            ("{session_id}", a.session_id.as_deref()),
            (SYSTEM_PROMPT_PLACEHOLDER, a.system_prompt.as_deref()),
        ];
        let argv = expand_template(template, &values);
        if argv.is_empty() {
            return Err(CommandError::invalid(format!(
                "provider {provider:?} has an empty argv"
            )));
        }
        Ok((argv, template_places_system_prompt(template)))
    }

    /// `role`, `heartbeat`, `heartbeat_prompt` and `system_prompt` of a
    /// spawn, checked as a declaration's are.
    fn check_spawn_extras(a: &SpawnArgs) -> Result<(), CommandError> {
        if let Some(role) = &a.role {
            check_role(role).map_err(|e| CommandError::invalid(format!("role: {e}")))?;
        }
        if let Some(period) = a.heartbeat {
            check_period(period.0)
                .and_then(|()| crate::config::check_duration(period.0).map(drop))
                .map_err(|e| CommandError::invalid(format!("heartbeat: {e}")))?;
        }
        if let Some(prompt) = &a.heartbeat_prompt {
            check_heartbeat_prompt(prompt)
                .map_err(|e| CommandError::invalid(format!("heartbeat_prompt: {e}")))?;
        }
        if let Some(prompt) = &a.system_prompt {
            check_system_prompt(prompt).map_err(CommandError::invalid)?;
        }
        Ok(())
    }

    pub(crate) fn cmd_spawn(
        &mut self,
        a: SpawnArgs,
        t: Timestamp,
    ) -> Result<SpawnData, CommandError> {
        if self.is_stopping() {
            return Err(CommandError::new(
                ErrorCode::Stopping,
                "colibrid is stopping",
            ));
        }
        Self::check_spawn_extras(&a)?;
        let argv = self.spawn_argv(&a)?;
        if let Some(stall) = a.stall_after {
            crate::config::check_stall_after(stall.0)
                .map_err(|e| CommandError::invalid(format!("stall_after: {e}")))?;
        }
        let session = match &a.session_id {
            Some(s) if !SessionStore::valid_session_id(s) => {
                return Err(CommandError::invalid(format!(
                    "bad session_id {s:?}: use letters, digits, '.', '_' or '-' (at most 128)"
                )))
            }
            Some(s) => s.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        if let Some(n) = &a.name {
            if n.is_empty() {
                return Err(CommandError::invalid("name is empty"));
            }
            // A name ends up in terminals, syslog lines and HTTP headers
            // (notify's ntfy title): a control character breaks them all.
            if n.chars().any(char::is_control) || n.chars().count() > MAX_SPAWN_NAME_CHARS {
                return Err(CommandError::invalid(format!(
                    "name {n:?} has a control character or is longer than {MAX_SPAWN_NAME_CHARS} characters"
                )));
            }
            let holder = self
                .panes
                .iter()
                .find(|(_, s)| s.pane.name.as_deref() == Some(n.as_str()));
            if let Some((_, s)) = holder {
                // An ended pane keeps its name until it is removed: say so,
                // or the name looks taken by nothing the operator can see.
                let id = s.pane.id.0.get(..8).unwrap_or(&s.pane.id.0);
                let why = if s.agent.running_pid().is_some() {
                    format!("name {n:?} is already used by running pane {id}")
                } else {
                    let actual = s.agent.actual().as_str();
                    format!(
                        "name {n:?} is still held by pane {id}, which is not running ({actual}); \
                         `colibri remove {n}` frees the name"
                    )
                };
                return Err(CommandError::invalid(why));
            }
            if let Some(why) = self.name_passes_for_an_id(n) {
                return Err(CommandError::invalid(format!("name {n:?} {why}")));
            }
        }
        let policy = match a.restart.as_deref() {
            None => RestartPolicy::Never,
            Some(s) => RestartPolicy::parse(s).ok_or_else(|| {
                CommandError::invalid(format!(
                    "bad restart policy {s:?} (never, on-failure, always)"
                ))
            })?,
        };
        if a.jail.is_some() && !platform::JAILS_SUPPORTED {
            return Err(CommandError::invalid(format!(
                "jails are FreeBSD-only; this colibrid runs on {}",
                std::env::consts::OS
            )));
        }
        let cwd = a.cwd.as_ref().map(PathBuf::from);
        if let (Some(c), None) = (&cwd, &a.jail) {
            if !c.is_dir() {
                return Err(CommandError::invalid(format!(
                    "cwd {} is not a directory",
                    c.display()
                )));
            }
        }
        let scope = a.scope.clone().unwrap_or_default();
        check_scope(&scope)?;
        let mut env: Vec<(String, String)> =
            a.env.clone().unwrap_or_default().into_iter().collect();
        if let Some(sp) = &a.system_prompt {
            env.push((SYSTEM_PROMPT_ENV.into(), sp.clone()));
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
            system_prompt: a.system_prompt.clone(),
            scope,
        };
        let pane_id = uuid::Uuid::new_v4().to_string();
        let agent_name = Path::new(&recipe.argv[0]).file_name().map_or_else(
            || recipe.argv[0].clone(),
            |f| f.to_string_lossy().into_owned(),
        );
        // The pane and its agent record exist before the process so the
        // tokens the process registers already name them.
        let mut pane = Pane::new(
            PaneId(pane_id.clone()),
            agent_name.clone(),
            recipe.runtime,
            self.settings.daemon.max_line,
            t,
        );
        pane.name = a.name.clone();
        pane.role = a.role.clone();
        pane.stall_after = a.stall_after.map(|d| d.0);
        let shown_cwd = cwd.clone().or_else(|| std::env::current_dir().ok());
        pane.set_cwd(shown_cwd.map(|c| c.display().to_string()));
        let restart = RestartState {
            policy,
            max: a.max_restarts.unwrap_or(self.settings.max_restarts),
            attempts: 0,
        };
        let agent = Agent::new(
            pane_id.clone(),
            session.clone(),
            a.jail.clone(),
            Some(recipe.clone()),
            restart,
        );
        let key = self.panes.insert(pane, agent);
        let heartbeat = a.heartbeat.map(|d| d.0);
        self.configure_heartbeat(key, heartbeat, a.heartbeat_prompt.as_deref(), t);
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
                self.life_event(key, LifeEvent::Spawned, t);
                self.adopt_spawned(key, a.name.as_deref(), a.max_restarts);
                self.publish(
                    WatchKind::Attached {
                        pane: pane_id.clone(),
                        agent: agent_name,
                        name,
                        pid: Some(pid),
                        runtime: recipe.runtime,
                    },
                    t,
                );
                self.join_budget_pauses(key, t);
                Ok(SpawnData {
                    agent_id: pane_id,
                    status: "running".into(),
                    session_id: session,
                    pid,
                })
            }
            Err(why) => {
                let reason = format!("spawn failed: {why}");
                if let Some(p) = self.panes.pane_mut(key) {
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
                        planned: false,
                    },
                    t,
                );
                self.after_ingest(key, t);
                // A first spawn that fails is the operator's to retry.
                let restart = RestartPlan::No;
                self.life_event(key, LifeEvent::SpawnFailed { restart }, t);
                Err(CommandError::os(reason))
            }
        }
    }

    /// A name is looked up after ids, and people type the short ids the CLI
    /// shows: a name that is (the shown prefix of) another pane's id, or
    /// that has an id's shape, would make `send NAME` reach the wrong pane.
    fn name_passes_for_an_id(&self, name: &str) -> Option<&'static str> {
        if uuid::Uuid::parse_str(name).is_ok() {
            return Some("has the shape of a pane id");
        }
        let taken = self.panes.iter().any(|(_, s)| {
            let id = s.agent.pane_id.to_string();
            id == name || (name.len() >= SHORT_ID_LEN && id.starts_with(name))
        });
        taken.then_some("is (a prefix of) another pane's id")
    }
}

/// How many leading characters of a pane id the CLI shows.
const SHORT_ID_LEN: usize = 8;
