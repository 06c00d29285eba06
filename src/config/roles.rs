//! `[roles.NAME]`: how the orchestrator starts an agent for a role that has
//! work and no agent to take it (`core::runners`; docs/ORCHESTRATOR.md,
//! "Runners").
//!
//! ```toml
//! [roles.builder]
//! argv = ["pi", "--mode", "rpc"]   # or provider = "claude", model = "…"
//! runtime = "pi"
//! cwd = "/srv/project"
//! max = 2              # runner-started agents alive at once
//! idle_stop = "5m"     # stopped when idle this long with no work left
//! ```
//!
//! A runner's agent is spawned as `spawn-agent` would spawn it, with the
//! role and the name `ROLE-runner-N`, so everything a spawned agent has
//! (its own input protocol, the system prompt placed the harness's way,
//! budgets scoped by role) a runner's agent has too.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::agents::{absolute_dir, parse_runtime, Launch};
use super::file::Validator;
use super::{check_jail_name, parse_positive_duration, Provider};
use crate::core::runners::MAX_RUNNER_AGENTS;
use crate::core::spec::{check_agent_name, check_role, check_system_prompt};
use crate::core::taxonomy::Runtime;

/// How long a runner's agent sits idle, with no work left for its role,
/// before it is stopped, unless its table says otherwise.
pub const DEFAULT_IDLE_STOP: Duration = Duration::from_secs(300);

/// One role's runner, checked. Serialized as the table is written, for
/// `--check-config`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RoleRunner {
    /// The agent's command, or `provider` (and `model`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    pub max: usize,
    #[serde(serialize_with = "super::render::duration")]
    pub idle_stop: Duration,
}

// The file as serde sees it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawRole {
    argv: Option<Spanned<Vec<String>>>,
    provider: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    runtime: Option<Spanned<String>>,
    cwd: Option<Spanned<String>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    jail: Option<Spanned<String>>,
    system_prompt: Option<Spanned<String>>,
    max: Option<Spanned<u64>>,
    idle_stop: Option<Spanned<String>>,
}

impl Validator<'_> {
    /// Every `[roles.NAME]`; a role with any bad value is left out (and the
    /// load fails).
    pub(super) fn roles(
        &mut self,
        raw: BTreeMap<String, Spanned<RawRole>>,
        providers: &BTreeMap<String, Provider>,
    ) -> BTreeMap<String, RoleRunner> {
        let mut roles = BTreeMap::new();
        for (name, table) in raw {
            let span = table.span();
            let key = format!("roles.{name}");
            // Its agents' names must pass as agent names too, even at a
            // large N, or none would be recorded.
            let named = check_role(&name).and_then(|()| {
                check_agent_name(&crate::core::runners::runner_name(&name, 99_999))
                    .map_err(|e| format!("its agents' names ({name}-runner-N): {e}"))
            });
            if let Err(msg) = named {
                self.invalid(span, &key, msg);
                continue;
            }
            let errors_before = self.error_count();
            let runner = self.role(&key, span, table.into_inner(), providers);
            if let (Some(runner), true) = (runner, self.error_count() == errors_before) {
                roles.insert(name, runner);
            }
        }
        roles
    }

    fn role(
        &mut self,
        key: &str,
        span: std::ops::Range<usize>,
        raw: RawRole,
        providers: &BTreeMap<String, Provider>,
    ) -> Option<RoleRunner> {
        let launch = self.launch(key, span, raw.argv, raw.provider, raw.model, providers);
        let mut runner = RoleRunner::default();
        match launch? {
            Launch::Argv(argv) => runner.argv = Some(argv),
            Launch::Provider { provider, model } => {
                runner.provider = Some(provider);
                runner.model = model;
            }
        }
        runner.runtime = self.opt(raw.runtime, &format!("{key}.runtime"), parse_runtime);
        runner.cwd = self.opt(raw.cwd, &format!("{key}.cwd"), absolute_dir);
        runner.env = self
            .opt(raw.env, &format!("{key}.env"), super::agents::check_env)
            .unwrap_or_default();
        runner.jail = self.opt(raw.jail, &format!("{key}.jail"), |v| {
            check_jail_name(&v).map(|()| v)
        });
        runner.system_prompt = self.opt(raw.system_prompt, &format!("{key}.system_prompt"), |v| {
            check_system_prompt(&v).map(|()| v)
        });
        runner.max = self
            .opt(raw.max, &format!("{key}.max"), |v| {
                usize::try_from(v)
                    .ok()
                    .filter(|v| (1..=MAX_RUNNER_AGENTS).contains(v))
                    .ok_or_else(|| format!("{v} is out of range (1..={MAX_RUNNER_AGENTS})"))
            })
            .unwrap_or(1);
        runner.idle_stop = self
            .opt(raw.idle_stop, &format!("{key}.idle_stop"), |v| {
                parse_positive_duration(&v)
            })
            .unwrap_or(DEFAULT_IDLE_STOP);
        Some(runner)
    }
}
