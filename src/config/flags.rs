//! colibrid's command line and environment, as one [`Layer`].

use std::path::PathBuf;
use std::time::Duration;

use super::{
    check_agent_path, check_jail_name, parse_duration, parse_mode, parse_positive_duration,
    parse_stall_after, positive_usize, DaemonLayer, JailListener, Layer, LogLevel, SyslogLayer,
};
use crate::syslog::{parse_facility, unknown_facility, Facility, Severity};

/// colibrid's command line. Flags with an `env` read that variable when the
/// flag is absent; everything else left out comes from the file or defaults.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(
    name = "colibrid",
    version,
    about = "Supervise AI coding agents on raw PTYs from one event loop."
)]
pub struct DaemonArgs {
    /// TOML config file [default: /usr/local/etc/colibri.toml if it exists].
    #[arg(long, env = "COLIBRI_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Operator socket [default: /var/run/colibri/colibri.sock].
    #[arg(long, env = "COLIBRI_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Mode of the operator socket, octal [default: 0660].
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode)]
    pub socket_mode: Option<u32>,
    /// Group owner of the operator socket.
    #[arg(long, value_name = "NAME")]
    pub socket_group: Option<String>,
    /// Durable sessions and index [default: /var/db/colibri].
    #[arg(long, env = "COLIBRI_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Host name shown in snapshots [default: the system host name].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Quiet time after which a working pane is stalled [default: 10m].
    #[arg(long, value_name = "DUR", value_parser = parse_stall_after)]
    pub stall_after: Option<Duration>,
    /// Heartbeat period [default: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration)]
    pub heartbeat: Option<Duration>,
    /// Wait between TERM and KILL at shutdown [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// Agent JSONL line cap in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES", value_parser = parse_positive_usize)]
    pub max_line: Option<usize>,
    /// Socket request line cap in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES", value_parser = parse_positive_usize)]
    pub max_request: Option<usize>,
    /// Most simultaneous connections on each socket [default: 256].
    #[arg(long, value_name = "N", value_parser = parse_positive_usize)]
    pub max_connections: Option<usize>,
    /// Most connections of one peer (uid; on FreeBSD uid and jail) on one
    /// socket [default: 32].
    #[arg(long, value_name = "N", value_parser = parse_positive_usize)]
    pub max_connections_per_peer: Option<usize>,
    /// Close a connection with no complete request (nor a reply or event it
    /// reads) for this long [default: 2m].
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration)]
    pub idle_timeout: Option<Duration>,
    /// Daemon diagnostics on stderr: error, warn, info or debug [default: info].
    #[arg(long, env = "COLIBRI_LOG", value_name = "LEVEL", value_parser = parse_log_level)]
    pub log_level: Option<LogLevel>,
    /// PATH given to agents whose request sets none
    /// [default: /sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin].
    #[arg(long, env = "COLIBRI_AGENT_PATH", value_name = "DIRS", value_parser = check_agent_path)]
    pub agent_path: Option<String>,
    /// Send alerts to this datagram socket instead of the system log.
    #[arg(long, value_name = "PATH")]
    pub syslog_socket: Option<PathBuf>,
    /// Syslog facility: daemon, user, local0..local7 [default: daemon].
    #[arg(long, value_name = "NAME", value_parser = parse_facility_arg)]
    pub syslog_facility: Option<Facility>,
    /// Least severe syslog level sent [default: info].
    #[arg(long, value_name = "LEVEL", value_parser = parse_severity)]
    pub alert_level: Option<Severity>,
    /// Disable syslog alerts.
    #[arg(long)]
    pub no_syslog: bool,
    /// Extra agent-scoped listener for jail NAME (repeatable).
    #[arg(long, value_name = "NAME=PATH", value_parser = parse_jail_socket)]
    pub jail_socket: Vec<JailSocketArg>,
    /// Validate the config and flags, print the effective config; exit 0,
    /// or 2 after printing every error found.
    #[arg(long)]
    pub check_config: bool,
}

/// One `--jail-socket NAME=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailSocketArg {
    pub jail: String,
    pub socket: PathBuf,
}

impl DaemonArgs {
    /// The flags and environment as a layer over the file.
    pub fn layer(&self) -> Layer {
        Layer {
            daemon: DaemonLayer {
                socket: self.socket.clone(),
                socket_mode: self.socket_mode,
                socket_group: self.socket_group.clone().map(Some),
                state_dir: self.state_dir.clone(),
                host: self.host.clone(),
                stall_after: self.stall_after,
                heartbeat: self.heartbeat,
                shutdown_grace: self.shutdown_grace,
                retain_finished: None,
                max_line: self.max_line,
                max_request: self.max_request,
                max_connections: self.max_connections,
                max_connections_per_peer: self.max_connections_per_peer,
                idle_timeout: self.idle_timeout,
                log_level: self.log_level,
                agent_path: self.agent_path.clone(),
            },
            syslog: SyslogLayer {
                enabled: self.no_syslog.then_some(false),
                socket: self.syslog_socket.clone().map(Some),
                facility: self.syslog_facility,
                min_level: self.alert_level,
                ..SyslogLayer::default()
            },
            providers: Default::default(),
            jails: self
                .jail_socket
                .iter()
                .map(|arg| {
                    let listener = JailListener {
                        socket: arg.socket.clone(),
                    };
                    (arg.jail.clone(), listener)
                })
                .collect(),
            ..Layer::default()
        }
    }
}

fn parse_positive_usize(text: &str) -> Result<usize, String> {
    let value: u64 = text
        .parse()
        .map_err(|e| format!("invalid number {text:?}: {e}"))?;
    positive_usize(value)
}

fn parse_log_level(text: &str) -> Result<LogLevel, String> {
    text.parse()
}

fn parse_facility_arg(text: &str) -> Result<Facility, String> {
    parse_facility(text).ok_or_else(|| unknown_facility(text))
}

fn parse_severity(text: &str) -> Result<Severity, String> {
    text.parse::<Severity>().map_err(|e| e.to_string())
}

fn parse_jail_socket(text: &str) -> Result<JailSocketArg, String> {
    let (jail, socket) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, got {text:?}"))?;
    check_jail_name(jail)?;
    if socket.is_empty() {
        return Err(format!("expected NAME=PATH, got {text:?}"));
    }
    Ok(JailSocketArg {
        jail: jail.to_owned(),
        socket: PathBuf::from(socket),
    })
}
