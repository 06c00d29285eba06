//! The daemon's effective settings, taken from `config::Config`, and what
//! SIGHUP reloads did to them.
//!
//! The loop reads these fields directly; SIGHUP swaps in a new `Settings`
//! for the reloadable parts (see `Daemon::reload` and
//! `config::RELOADABLE_KEYS`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{Config, DaemonSection, ReloadPlan};
use crate::daemon::alert::AlertConfig;
use crate::daemon::conn::Scope;
use crate::daemon::diag::{log_error, log_info, log_warn};
use crate::daemon::store::StoreConfig;

#[derive(Debug, Clone)]
pub struct Settings {
    /// The `[daemon]` section as resolved (flags, environment, file, defaults).
    pub daemon: DaemonSection,
    /// The `[syslog]` section as resolved.
    pub alert: AlertConfig,
    pub store: StoreConfig,
    pub restart_backoff: Vec<Duration>,
    pub max_restarts: u32,
    pub providers: BTreeMap<String, Vec<String>>,
    pub jail_sockets: Vec<(String, PathBuf)>,
    /// The file with `[[notify]]` sinks, if it has any: colibrid then
    /// supervises `colibri notify` (see `daemon/notify.rs`).
    pub notify_config: Option<PathBuf>,
    /// `[fleet]`: colibrid then supervises the bridge (`daemon/fleet.rs`).
    pub fleet: Option<crate::config::fleet::FleetConfig>,
    /// `[agents.NAME]`, resolved (`daemon::supervise` reconciles them).
    pub agents: BTreeMap<String, crate::core::spec::AgentSpec>,
    /// The `[approvals]` section.
    pub approvals: crate::daemon::approvals::desk::ApprovalPolicy,
    /// The `[orchestrator]` section (`daemon::dispatch`).
    pub orchestrator: crate::config::OrchestratorSection,
    /// Every SIGHUP's outcome so far, for `status`.
    pub reload: ReloadStatus,
    /// Budgets, loop detection, the guard and prices.
    pub governance: crate::core::policy::Policies,
    /// `[hostops.NAME]`: what `hostop` may run.
    pub hostops: BTreeMap<String, crate::config::HostOp>,
    /// `[roles.NAME]`: the orchestrator's runners.
    pub roles: BTreeMap<String, crate::config::RoleRunner>,
}

/// How long an exited agent's PTY may stay open (a grandchild holding the
/// slave) before its tree is killed and the pane is finished anyway.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

impl Settings {
    /// Flattens a resolved configuration.
    pub fn from_config(cfg: &Config) -> Settings {
        let d = &cfg.daemon;
        Settings {
            daemon: d.clone(),
            alert: cfg.syslog.clone(),
            store: StoreConfig {
                dir: d.state_dir.join("sessions"),
                flush_budget: cfg.sessions.flush_budget,
                buffer_limit: cfg.sessions.buffer_limit,
                rotate_bytes: cfg.sessions.rotate_bytes,
                rotate_turns: cfg.sessions.rotate_turns,
                retain: cfg.sessions.retain,
            },
            restart_backoff: cfg.restart.backoff.clone(),
            max_restarts: cfg.restart.max_restarts,
            providers: cfg
                .providers
                .iter()
                .map(|(k, p)| (k.clone(), p.argv.clone()))
                .collect(),
            jail_sockets: cfg
                .jails
                .iter()
                .map(|(k, j)| (k.clone(), j.socket.clone()))
                .collect(),
            notify_config: cfg
                .source
                .clone()
                .filter(|p| crate::config::notify::load_sinks(p).is_ok_and(|s| !s.is_empty())),
            fleet: cfg.fleet.clone(),
            agents: cfg.agents.clone(),
            approvals: crate::daemon::approvals::desk::ApprovalPolicy::from_section(&cfg.approvals),
            orchestrator: cfg.orchestrator.clone(),
            reload: ReloadStatus::default(),
            governance: cfg.governance.clone(),
            hostops: cfg.hostops.clone(),
            roles: cfg.roles.clone(),
        }
    }
}

/// A configuration read again on SIGHUP: the new settings, and which of
/// their changes the running daemon takes over.
#[derive(Debug, Clone)]
pub struct Reload {
    pub settings: Settings,
    pub plan: ReloadPlan,
}

/// The SIGHUP history `status` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Reloads that read a valid configuration.
    pub reloads: u64,
    /// Reloads refused because the configuration was invalid or unreadable.
    pub reload_errors: u64,
    /// Changed keys the last good reload could not apply: they take effect
    /// at the next restart.
    pub restart_needed: Vec<String>,
}

impl ReloadStatus {
    /// What `status` shows on a socket: the daemon's configuration is the
    /// operator's business, so a jail socket sees zeros.
    pub fn shown_to(&self, scope: &Scope) -> ReloadStatus {
        match scope {
            Scope::Operator => self.clone(),
            Scope::Jail(_) | Scope::Agent { .. } => ReloadStatus::default(),
        }
    }

    /// Counts one reload and says on stderr what it did, key by key.
    pub fn record(&mut self, outcome: &Result<Reload, String>) {
        match outcome {
            Ok(reload) => {
                self.reloads += 1;
                let plan = &reload.plan;
                match plan.applied.as_slice() {
                    [] => log_info!("reloaded configuration: nothing to apply"),
                    keys => log_info!("reloaded configuration: applied {}", keys.join(", ")),
                }
                if !plan.restart_needed.is_empty() {
                    log_warn!(
                        "changed but not applied until colibrid restarts: {}",
                        plan.restart_needed.join(", ")
                    );
                }
                self.restart_needed = plan.restart_needed.clone();
            }
            Err(e) => {
                self.reload_errors += 1;
                log_error!("reload failed, keeping the running configuration: {e}");
            }
        }
    }
}
