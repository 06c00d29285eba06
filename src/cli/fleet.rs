//! `--fleet` on `top`, `web` and `notify`: the view runs against
//! `colibri-bridge gateway`, started as a child on a private socket, so
//! it shows every host while this binary links no NATS (docs/FLEET.md,
//! "The fleet views").

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::CliError;

/// How long the gateway has to load the fleet and listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The running gateway: killed, and its directory removed, when dropped.
pub struct Gateway {
    child: Child,
    /// The gateway ends when this closes: with this process, however it
    /// ends (a SIGKILL runs no `Drop`).
    _lifeline: Option<ChildStdin>,
    dir: PathBuf,
    pub socket: PathBuf,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `colibri-bridge` next to this colibri, else the one on PATH (as
/// colibrid finds it for `[fleet]`).
fn bridge_exe() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("colibri-bridge")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("colibri-bridge"))
}

/// The gateway's arguments after `--listen SOCKET`: the NATS options of
/// `[fleet]` in `config`, `COLIBRI_NATS_URL` over its `url`.
fn nats_args(config: &Path) -> Result<Vec<String>, CliError> {
    let layer = match crate::config::load_file(config) {
        Ok(l) => l.fleet,
        // No file: the environment alone may name the server.
        Err(crate::config::ConfigError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            None
        }
        Err(e) => return Err(CliError::Runtime(e.to_string())),
    };
    let layer = layer.unwrap_or_default();
    let url = std::env::var("COLIBRI_NATS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .or(layer.url)
        .ok_or_else(|| {
            CliError::Runtime(format!(
                "--fleet needs the NATS server: [fleet] url in {}, or COLIBRI_NATS_URL",
                config.display()
            ))
        })?;
    let mut args = vec!["--nats".to_string(), url];
    if let Some(creds) = layer.creds {
        args.extend(["--creds".to_string(), creds.display().to_string()]);
    }
    if let Some(ca) = layer.tls_ca {
        args.extend(["--tls-ca".to_string(), ca.display().to_string()]);
    }
    if let Some(beat) = layer.heartbeat {
        args.extend(["--heartbeat".to_string(), format!("{}ms", beat.as_millis())]);
    }
    Ok(args)
}

/// A directory only this user can enter, for the gateway's socket.
fn private_dir() -> Result<PathBuf, CliError> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir =
        std::env::temp_dir().join(format!("colibri-fleet-{}-{nanos:08x}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| CliError::io(format!("cannot create {}", dir.display()), e))?;
    Ok(dir)
}

/// Where the gateway's messages go: this process's stderr, or for a
/// full-screen view, which they would garble, a file in its directory
/// (shown if it fails to start).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Messages {
    Stderr,
    File,
}

/// Starts the gateway and waits until its socket answers.
pub fn start(config: &Path, messages: Messages) -> Result<Gateway, CliError> {
    let args = nats_args(config)?;
    let dir = private_dir()?;
    let socket = dir.join("fleet.sock");
    let log = dir.join("gateway.log");
    let stderr = match messages {
        Messages::Stderr => Stdio::inherit(),
        Messages::File => match std::fs::File::create(&log) {
            Ok(f) => Stdio::from(f),
            Err(_) => Stdio::null(),
        },
    };
    let exe = bridge_exe();
    let spawned = Command::new(&exe)
        .arg("gateway")
        .arg("--until-stdin-closes")
        .arg("--listen")
        .arg(&socket)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(CliError::io(
                format!(
                    "cannot start {} (install colibri-bridge beside colibri)",
                    exe.display()
                ),
                e,
            ));
        }
    };
    let lifeline = child.stdin.take();
    let mut g = Gateway {
        child,
        _lifeline: lifeline,
        dir,
        socket,
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if std::os::unix::net::UnixStream::connect(&g.socket).is_ok() {
            return Ok(g);
        }
        if let Ok(Some(status)) = g.child.try_wait() {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(CliError::Runtime(format!(
                "colibri-bridge gateway exited ({status}) before serving the fleet{}{}",
                if said.is_empty() { "" } else { ": " },
                said.trim_end().replace('\n', "; ")
            )));
        }
        if Instant::now() >= deadline {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(CliError::Runtime(format!(
                "colibri-bridge gateway did not listen within {START_TIMEOUT:?}{}{}",
                if said.is_empty() { "" } else { ": " },
                said.trim_end().replace('\n', "; ")
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_options_come_from_the_fleet_table() {
        let dir = std::env::temp_dir().join(format!("colibri-fleet-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("colibri.toml");
        std::fs::write(
            &file,
            "[fleet]\nurl = \"nats://hub:4222\"\ncreds = \"/etc/c.creds\"\nheartbeat = \"2s\"\n",
        )
        .expect("write");
        let args = nats_args(&file).expect("args");
        let _ = std::fs::remove_dir_all(&dir);
        if std::env::var_os("COLIBRI_NATS_URL").is_none() {
            assert_eq!(&args[..2], ["--nats", "nats://hub:4222"]);
        }
        assert!(args.windows(2).any(|w| w == ["--creds", "/etc/c.creds"]));
        assert!(args.windows(2).any(|w| w == ["--heartbeat", "2000ms"]));
    }
}
