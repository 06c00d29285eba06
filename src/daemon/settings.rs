//! The daemon's effective settings, flattened from `config::Config`.
//!
//! The loop reads these fields directly; SIGHUP swaps in a new `Settings`
//! for the reloadable parts (see `Daemon::reload`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::daemon::alert::AlertConfig;
use crate::daemon::store::StoreConfig;

#[derive(Debug, Clone)]
pub struct Settings {
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub socket_group: Option<String>,
    pub state_dir: PathBuf,
    pub host: String,
    pub stall_after: Duration,
    pub heartbeat: Duration,
    pub shutdown_grace: Duration,
    pub max_line: usize,
    pub max_request: usize,
    pub max_connections: usize,
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
            socket: d.socket.clone(),
            socket_mode: d.socket_mode,
            socket_group: d.socket_group.clone(),
            state_dir: d.state_dir.clone(),
            host: d.host.clone(),
            stall_after: d.stall_after,
            heartbeat: d.heartbeat,
            shutdown_grace: d.shutdown_grace,
            max_line: d.max_line,
            max_request: d.max_request,
            max_connections: d.max_connections,
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
