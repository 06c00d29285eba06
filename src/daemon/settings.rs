//! The daemon's effective settings, taken from `config::Config`.
//!
//! The loop reads these fields directly; SIGHUP swaps in a new `Settings`
//! for the reloadable parts (see `Daemon::reload`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::DaemonSection;
use crate::daemon::alert::AlertConfig;
use crate::daemon::store::StoreConfig;

#[derive(Debug, Clone)]
pub struct Settings {
    /// The `[daemon]` section as resolved (flags, environment, file, defaults).
    pub daemon: DaemonSection,
    pub alert: AlertConfig,
    pub store: StoreConfig,
    pub restart_backoff: Vec<Duration>,
    pub max_restarts: u32,
    pub providers: BTreeMap<String, Vec<String>>,
    pub jail_sockets: Vec<(String, PathBuf)>,
}

/// How long an exited agent's PTY may stay open (a grandchild holding the
/// slave) before its tree is killed and the pane is finished anyway.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

impl Settings {
    /// Flattens a resolved configuration.
    pub fn from_config(cfg: &crate::config::Config) -> Settings {
        let d = &cfg.daemon;
        Settings {
            daemon: d.clone(),
            alert: cfg.alert_config(),
            store: StoreConfig {
                dir: d.state_dir.join("sessions"),
                flush_budget: cfg.sessions.flush_budget,
                buffer_limit: cfg.sessions.buffer_limit,
                rotate_bytes: cfg.sessions.rotate_bytes,
                rotate_turns: cfg.sessions.rotate_turns,
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
        }
    }
}
