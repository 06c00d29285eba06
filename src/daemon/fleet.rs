//! Supervising the fleet bridge: when colibri.toml has `[fleet]`, colibrid
//! runs `colibri-bridge run` as the satellite pane `colibri-bridge`, like
//! `colibri notify`: restart policy `always` with no limit (delays from
//! `[restart]`), stopped with the daemon, its tree speaking as the
//! operator (it relays `colibri.cmd.<host>` to the operator socket). NATS
//! and tokio live in that process only (docs/FLEET.md).

use std::path::{Path, PathBuf};

use crate::config::fleet::{FleetConfig, BRIDGE_PANE};
use crate::core::time::Timestamp;
use crate::daemon::event_loop::Daemon;
use crate::protocol::SpawnArgs;

/// `colibri-bridge` next to this colibrid, else the one on PATH.
fn bridge_exe() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("colibri-bridge")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("colibri-bridge"))
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The spawn request for the bridge of `fleet`.
pub fn bridge_spawn(fleet: &FleetConfig, state_dir: &Path, socket: &Path) -> SpawnArgs {
    let mut argv = vec![
        text(&bridge_exe()),
        "run".to_string(),
        "--host".to_string(),
        fleet.host_id.clone(),
        "--nats".to_string(),
        fleet.url.clone(),
        "--socket".to_string(),
        text(socket),
        "--heartbeat".to_string(),
        format!("{}ms", fleet.heartbeat.as_millis()),
    ];
    if let Some(creds) = &fleet.creds {
        argv.extend(["--creds".to_string(), text(creds)]);
    }
    if let Some(ca) = &fleet.tls_ca {
        argv.extend(["--tls-ca".to_string(), text(ca)]);
    }
    SpawnArgs {
        argv: Some(argv),
        name: Some(BRIDGE_PANE.to_string()),
        restart: Some("always".to_string()),
        max_restarts: Some(u32::MAX),
        cwd: Some(text(state_dir)),
        ..SpawnArgs::default()
    }
}

impl Daemon {
    /// Starts the bridge if the configuration has `[fleet]`.
    pub(crate) fn start_fleet_bridge(&mut self, t: Timestamp) {
        let Some(fleet) = self.settings.fleet.clone() else {
            return;
        };
        let a = bridge_spawn(
            &fleet,
            &self.settings.daemon.state_dir,
            &self.settings.daemon.socket,
        );
        self.spawn_satellite("the fleet bridge", a, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bridge_is_told_everything_fleet_says() {
        let fleet = FleetConfig {
            url: "tls://hub:4222".into(),
            host_id: "db1".into(),
            creds: Some("/etc/db1.creds".into()),
            tls_ca: None,
            heartbeat: Duration::from_secs(10),
        };
        let a = bridge_spawn(&fleet, Path::new("/var/db/colibri"), Path::new("/s"));
        let argv = a.argv.expect("argv");
        assert!(argv[0].ends_with("colibri-bridge"), "{argv:?}");
        assert_eq!(
            argv[1..],
            [
                "run",
                "--host",
                "db1",
                "--nats",
                "tls://hub:4222",
                "--socket",
                "/s",
                "--heartbeat",
                "10000ms",
                "--creds",
                "/etc/db1.creds"
            ]
        );
        assert_eq!(a.name.as_deref(), Some(BRIDGE_PANE));
        assert_eq!(a.restart.as_deref(), Some("always"));
    }
}
