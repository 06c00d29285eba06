//! Supervising `colibri notify`: when colibri.toml has `[[notify]]` sinks,
//! colibrid runs it as a satellite pane named `colibri-notify`, with the
//! `always` restart policy and no restart limit, so it comes back after any
//! failure like any supervised agent (and shows in snapshots and `status`).
//! It is a client of the operator socket like any other: every network
//! request happens in it, none in this loop. Its cursor lives in the state
//! dir (`notify.cursor`).

use std::path::{Path, PathBuf};

use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::protocol::SpawnArgs;

pub use crate::config::notify::NOTIFY_PANE;

/// `colibri` next to this colibrid, else the one on PATH.
fn colibri_exe() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("colibri")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("colibri"))
}

/// The spawn request for the satellite, reading sinks from `config`.
pub fn satellite_spawn(config: &Path, state_dir: &Path, socket: &Path) -> SpawnArgs {
    let argv = vec![
        colibri_exe().to_string_lossy().into_owned(),
        "notify".to_string(),
        "--config".to_string(),
        config.to_string_lossy().into_owned(),
        "--cursor".to_string(),
        state_dir
            .join("notify.cursor")
            .to_string_lossy()
            .into_owned(),
    ];
    let mut env = std::collections::BTreeMap::new();
    env.insert(
        "COLIBRI_SOCKET".to_string(),
        socket.to_string_lossy().into_owned(),
    );
    SpawnArgs {
        argv: Some(argv),
        name: Some(NOTIFY_PANE.to_string()),
        env: Some(env),
        restart: Some("always".to_string()),
        max_restarts: Some(u32::MAX),
        cwd: Some(state_dir.to_string_lossy().into_owned()),
        ..SpawnArgs::default()
    }
}

impl Daemon {
    /// Starts `colibri notify` if the configuration has sinks.
    pub(crate) fn start_notify_satellite(&mut self, t: Timestamp) {
        let Some(config) = self.settings.notify_config.clone() else {
            return;
        };
        let a = satellite_spawn(
            &config,
            &self.settings.daemon.state_dir,
            &self.settings.daemon.socket,
        );
        self.spawn_satellite("colibri notify", a, t);
    }

    /// Starts one of colibrid's own satellites (`colibri notify`, the
    /// fleet bridge): a pane whose tree speaks as the operator.
    pub(crate) fn spawn_satellite(&mut self, what: &str, a: SpawnArgs, t: Timestamp) {
        match self.cmd_spawn(a, t) {
            Ok(s) => {
                log_info!("{what} runs as pane {}", s.agent_id);
                if let Some(agent) = self
                    .panes
                    .key(&s.agent_id)
                    .and_then(|k| self.panes.agent_mut(k))
                {
                    agent.satellite = true;
                }
            }
            Err(e) => log_warn!("cannot start {what}: {}", e.message),
        }
    }
}
