//! colibrid's configuration: flags, environment, the TOML file and defaults.
//!
//! Precedence is flag > environment > file > default. clap merges the first
//! two into [`DaemonArgs`]; [`load_file`] reads and validates the file into a
//! [`FileConfig`] whose every value is optional; [`resolve`] lays the three
//! over the defaults of SPEC.md and returns a [`Config`] with nothing left
//! optional that has a default. [`load`] does all of it for colibrid, at start
//! and again on SIGHUP.
//!
//! Every file error names the file, the line and the dotted key
//! (`/usr/local/etc/colibri.toml:7: daemon.stall_after: invalid duration
//! "10x": ...`): unknown keys are rejected (`deny_unknown_fields`) so a typo
//! cannot silently fall back to a default, syntax and type errors are placed
//! from the parser's byte span, and values checked here (durations, modes,
//! facilities, levels) carry their span through `toml::Spanned`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::daemon::alert::{facility_name, parse_facility, AlertConfig, Facility, Severity};

/// The config file read when neither `--config` nor `COLIBRI_CONFIG` is set,
/// if it exists.
pub const DEFAULT_CONFIG_PATH: &str = "/usr/local/etc/colibri.toml";
pub const DEFAULT_SOCKET: &str = "/var/run/colibri/colibri.sock";
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
pub const DEFAULT_STATE_DIR: &str = "/var/db/colibri";
/// Per-jail listeners live here unless `[jails.NAME] socket` says otherwise.
pub const DEFAULT_JAILS_DIR: &str = "/var/run/colibri/jails";
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX_LINE: usize = 1_048_576;
pub const DEFAULT_MAX_REQUEST: usize = 1_048_576;
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
pub const DEFAULT_LOG_LEVEL: LogLevel = LogLevel::Info;
pub const DEFAULT_SYSLOG_FACILITY: Facility = Facility::LOG_DAEMON;
pub const DEFAULT_ALERT_LEVEL: Severity = Severity::Info;
pub const DEFAULT_RATE_BURST: u32 = 5;
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_ROTATE_BYTES: u64 = 67_108_864;
pub const DEFAULT_ROTATE_TURNS: u64 = 500;
pub const DEFAULT_FLUSH_BUDGET: usize = 4_194_304;
pub const DEFAULT_BUFFER_LIMIT: usize = 8_388_608;
pub const DEFAULT_RESTART_BACKOFF: [Duration; 5] = [
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
];
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Providers known without a config file; `[providers.*]` entries override.
pub const DEFAULT_PROVIDER_NAMES: [&str; 3] = ["deepseek", "openrouter", "anthropic"];

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
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode_arg)]
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
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration_arg)]
    pub stall_after: Option<Duration>,
    /// Heartbeat period [default: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration_arg)]
    pub heartbeat: Option<Duration>,
    /// Wait between TERM and KILL at shutdown [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub shutdown_grace: Option<Duration>,
    /// Agent JSONL line cap in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES", value_parser = parse_positive_usize_arg)]
    pub max_line: Option<usize>,
    /// Socket request line cap in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES", value_parser = parse_positive_usize_arg)]
    pub max_request: Option<usize>,
    /// Most simultaneous socket connections [default: 256].
    #[arg(long, value_name = "N", value_parser = parse_positive_usize_arg)]
    pub max_connections: Option<usize>,
    /// Daemon diagnostics on stderr: error, warn, info or debug [default: info].
    #[arg(long, env = "COLIBRI_LOG", value_name = "LEVEL", value_parser = parse_log_level_arg)]
    pub log_level: Option<LogLevel>,
    /// Send alerts to this datagram socket instead of the system log.
    #[arg(long, value_name = "PATH")]
    pub syslog_socket: Option<PathBuf>,
    /// Syslog facility: daemon, user, local0..local7 [default: daemon].
    #[arg(long, value_name = "NAME", value_parser = parse_facility_arg)]
    pub syslog_facility: Option<Facility>,
    /// Least severe syslog level sent [default: info].
    #[arg(long, value_name = "LEVEL", value_parser = parse_severity_arg)]
    pub alert_level: Option<Severity>,
    /// Disable syslog alerts.
    #[arg(long)]
    pub no_syslog: bool,
    /// Extra agent-scoped listener for jail NAME (repeatable).
    #[arg(long, value_name = "NAME=PATH", value_parser = parse_jail_socket_arg)]
    pub jail_socket: Vec<JailSocketArg>,
    /// Validate the config and flags, print the effective config, exit 0 or 1.
    #[arg(long)]
    pub check_config: bool,
}

/// One `--jail-socket NAME=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailSocketArg {
    pub jail: String,
    pub socket: PathBuf,
}

/// Verbosity of the daemon's own diagnostics on stderr.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<LogLevel, String> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Ok(LogLevel::Error),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "info" => Ok(LogLevel::Info),
            "debug" => Ok(LogLevel::Debug),
            _ => Err(format!(
                "invalid log level {s:?} (expected error, warn, info or debug)"
            )),
        }
    }
}

/// The effective configuration: every default resolved.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file that was read, if any (SIGHUP reads it again).
    pub source: Option<PathBuf>,
    pub daemon: DaemonSection,
    pub syslog: SyslogSection,
    pub sessions: SessionsSection,
    pub restart: RestartSection,
    pub providers: BTreeMap<String, Provider>,
    pub jails: BTreeMap<String, JailListener>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSection {
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
    pub log_level: LogLevel,
}

#[derive(Debug, Clone)]
pub struct SyslogSection {
    pub enabled: bool,
    /// `None` means the system log socket.
    pub socket: Option<PathBuf>,
    pub facility: Facility,
    /// The least severe level sent.
    pub level: Severity,
    pub rate_burst: u32,
    pub rate_window: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionsSection {
    pub rotate_bytes: u64,
    pub rotate_turns: u64,
    pub flush_budget: usize,
    pub buffer_limit: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartSection {
    pub backoff: Vec<Duration>,
    pub max_restarts: u32,
}

/// How to start an agent for `spawn-agent {"provider": NAME}`; `{model}` in
/// an argument is replaced by the requested model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provider {
    pub argv: Vec<String>,
}

/// An agent-scoped listener for one jail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JailListener {
    pub socket: PathBuf,
}

/// The config file's values, validated; `None` means "not in the file".
#[derive(Debug, Clone, Default)]
pub struct FileConfig {
    pub daemon: FileDaemon,
    pub syslog: FileSyslog,
    pub sessions: FileSessions,
    pub restart: FileRestart,
    pub providers: BTreeMap<String, Provider>,
    pub jails: BTreeMap<String, JailListener>,
}

#[derive(Debug, Clone, Default)]
pub struct FileDaemon {
    pub socket: Option<PathBuf>,
    pub socket_mode: Option<u32>,
    pub socket_group: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub host: Option<String>,
    pub stall_after: Option<Duration>,
    pub heartbeat: Option<Duration>,
    pub shutdown_grace: Option<Duration>,
    pub max_line: Option<usize>,
    pub max_request: Option<usize>,
    pub max_connections: Option<usize>,
    pub log_level: Option<LogLevel>,
}

#[derive(Debug, Clone, Default)]
pub struct FileSyslog {
    pub enabled: Option<bool>,
    pub socket: Option<PathBuf>,
    pub facility: Option<Facility>,
    pub level: Option<Severity>,
    pub rate_burst: Option<u32>,
    pub rate_window: Option<Duration>,
}

#[derive(Debug, Clone, Default)]
pub struct FileSessions {
    pub rotate_bytes: Option<u64>,
    pub rotate_turns: Option<u64>,
    pub flush_budget: Option<usize>,
    pub buffer_limit: Option<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct FileRestart {
    pub backoff: Option<Vec<Duration>>,
    pub max_restarts: Option<u32>,
}

/// Why the configuration could not be loaded. Display is one line that
/// starts with `file:line:` whenever a file is involved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}:{line}:{column}: {}{msg}", path.display(), key_prefix(key.as_deref()))]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        key: Option<String>,
        msg: String,
    },
    #[error("{}{key}: {msg}", location(path.as_deref(), *line))]
    Invalid {
        path: Option<PathBuf>,
        line: Option<usize>,
        key: String,
        msg: String,
    },
}

fn key_prefix(key: Option<&str>) -> String {
    key.map(|key| format!("{key}: ")).unwrap_or_default()
}

fn location(path: Option<&Path>, line: Option<usize>) -> String {
    match (path, line) {
        (Some(path), Some(line)) => format!("{}:{line}: ", path.display()),
        (Some(path), None) => format!("{}: ", path.display()),
        (None, _) => String::new(),
    }
}

/// The file `load` reads: `--config`/`COLIBRI_CONFIG`, else the default path
/// if it exists, else none.
pub fn config_path(args: &DaemonArgs) -> Option<PathBuf> {
    if let Some(path) = &args.config {
        return Some(path.clone());
    }
    let default = Path::new(DEFAULT_CONFIG_PATH);
    default.exists().then(|| default.to_path_buf())
}

/// Loads the effective configuration: flag > env (clap merges those) > file
/// > default.
pub fn load(args: &DaemonArgs) -> Result<Config, ConfigError> {
    match config_path(args) {
        Some(path) => {
            let file = load_file(&path)?;
            resolve(args, Some((&path, &file)))
        }
        None => resolve(args, None),
    }
}

/// Reads and validates one config file.
pub fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_file(path, &text)
}

/// Parses config text; `path` only labels errors.
pub fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|span| span.start).unwrap_or(0);
        let (line, column) = line_column(text, offset);
        ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            key: e.span().and_then(|span| key_at(text, span.start)),
            msg: e.message().trim().to_owned(),
        }
    })?;
    Validator { path, text }.file(raw)
}

/// Lays flags and env (`args`) and the file over the defaults.
pub fn resolve(
    args: &DaemonArgs,
    file: Option<(&Path, &FileConfig)>,
) -> Result<Config, ConfigError> {
    let empty = FileConfig::default();
    let (source, f) = match file {
        Some((path, file)) => (Some(path.to_path_buf()), file),
        None => (None, &empty),
    };

    let daemon = DaemonSection {
        socket: pick(&args.socket, &f.daemon.socket, || {
            PathBuf::from(DEFAULT_SOCKET)
        }),
        socket_mode: pick(&args.socket_mode, &f.daemon.socket_mode, || {
            DEFAULT_SOCKET_MODE
        }),
        socket_group: args
            .socket_group
            .clone()
            .or_else(|| f.daemon.socket_group.clone()),
        state_dir: pick(&args.state_dir, &f.daemon.state_dir, || {
            PathBuf::from(DEFAULT_STATE_DIR)
        }),
        host: pick(&args.host, &f.daemon.host, system_hostname),
        stall_after: pick(&args.stall_after, &f.daemon.stall_after, || {
            DEFAULT_STALL_AFTER
        }),
        heartbeat: pick(&args.heartbeat, &f.daemon.heartbeat, || DEFAULT_HEARTBEAT),
        shutdown_grace: pick(&args.shutdown_grace, &f.daemon.shutdown_grace, || {
            DEFAULT_SHUTDOWN_GRACE
        }),
        max_line: pick(&args.max_line, &f.daemon.max_line, || DEFAULT_MAX_LINE),
        max_request: pick(&args.max_request, &f.daemon.max_request, || {
            DEFAULT_MAX_REQUEST
        }),
        max_connections: pick(&args.max_connections, &f.daemon.max_connections, || {
            DEFAULT_MAX_CONNECTIONS
        }),
        log_level: pick(&args.log_level, &f.daemon.log_level, || DEFAULT_LOG_LEVEL),
    };

    let syslog = SyslogSection {
        enabled: !args.no_syslog && f.syslog.enabled.unwrap_or(true),
        socket: args
            .syslog_socket
            .clone()
            .or_else(|| f.syslog.socket.clone()),
        facility: pick(&args.syslog_facility, &f.syslog.facility, || {
            DEFAULT_SYSLOG_FACILITY
        }),
        level: pick(&args.alert_level, &f.syslog.level, || DEFAULT_ALERT_LEVEL),
        rate_burst: f.syslog.rate_burst.unwrap_or(DEFAULT_RATE_BURST),
        rate_window: f.syslog.rate_window.unwrap_or(DEFAULT_RATE_WINDOW),
    };

    let sessions = SessionsSection {
        rotate_bytes: f.sessions.rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
        rotate_turns: f.sessions.rotate_turns.unwrap_or(DEFAULT_ROTATE_TURNS),
        flush_budget: f.sessions.flush_budget.unwrap_or(DEFAULT_FLUSH_BUDGET),
        buffer_limit: f.sessions.buffer_limit.unwrap_or(DEFAULT_BUFFER_LIMIT),
    };

    let restart = RestartSection {
        backoff: f
            .restart
            .backoff
            .clone()
            .unwrap_or_else(|| DEFAULT_RESTART_BACKOFF.to_vec()),
        max_restarts: f.restart.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
    };

    let mut providers = default_providers();
    providers.extend(f.providers.clone());

    let mut jails = f.jails.clone();
    for arg in &args.jail_socket {
        jails.insert(
            arg.jail.clone(),
            JailListener {
                socket: arg.socket.clone(),
            },
        );
    }
    check_listeners(&daemon.socket, &jails, source.as_deref())?;

    Ok(Config {
        source,
        daemon,
        syslog,
        sessions,
        restart,
        providers,
        jails,
    })
}

/// The flag or env value, else the file's, else the default.
fn pick<T: Clone>(flag: &Option<T>, file: &Option<T>, default: impl FnOnce() -> T) -> T {
    flag.clone()
        .or_else(|| file.clone())
        .unwrap_or_else(default)
}

/// Two listeners on one path would make the second bind fail or, worse,
/// hand a jail the operator socket.
fn check_listeners(
    operator: &Path,
    jails: &BTreeMap<String, JailListener>,
    source: Option<&Path>,
) -> Result<(), ConfigError> {
    let mut seen: BTreeMap<&Path, &str> = BTreeMap::new();
    for (name, listener) in jails {
        let clash = if listener.socket == operator {
            Some("the operator socket".to_owned())
        } else {
            seen.get(listener.socket.as_path())
                .map(|other| format!("the socket of jail {other:?}"))
        };
        if let Some(clash) = clash {
            return Err(ConfigError::Invalid {
                path: source.map(Path::to_path_buf),
                line: None,
                key: format!("jails.{name}.socket"),
                msg: format!("{} is also {clash}", listener.socket.display()),
            });
        }
        seen.insert(&listener.socket, name);
    }
    Ok(())
}

/// The built-in providers: Pi in RPC mode for each known model provider.
pub fn default_providers() -> BTreeMap<String, Provider> {
    DEFAULT_PROVIDER_NAMES
        .iter()
        .map(|name| {
            let argv = [
                "pi",
                "--mode",
                "rpc",
                "--provider",
                name,
                "--model",
                "{model}",
            ];
            (
                (*name).to_owned(),
                Provider {
                    argv: argv.iter().map(|s| (*s).to_owned()).collect(),
                },
            )
        })
        .collect()
}

/// The default listener path for a jail (nullfs-mounted into it at
/// `/var/colibri`).
pub fn default_jail_socket(jail: &str) -> PathBuf {
    Path::new(DEFAULT_JAILS_DIR).join(jail).join("colibri.sock")
}

impl Config {
    /// The alert settings for [`crate::daemon::alert::Alerter`].
    pub fn alert_config(&self) -> AlertConfig {
        AlertConfig {
            enabled: self.syslog.enabled,
            socket: self.syslog.socket.clone(),
            facility: self.syslog.facility,
            min_level: self.syslog.level,
            rate_burst: self.syslog.rate_burst,
            rate_window: self.syslog.rate_window,
        }
    }
}

/// The effective configuration as TOML (for `colibrid --check-config`). The
/// output is itself a valid config file that loads back to the same values.
pub fn render_effective(config: &Config) -> String {
    let rendered = Rendered {
        daemon: RenderedDaemon {
            socket: path_text(&config.daemon.socket),
            socket_mode: format!("{:04o}", config.daemon.socket_mode),
            socket_group: config.daemon.socket_group.clone(),
            state_dir: path_text(&config.daemon.state_dir),
            host: config.daemon.host.clone(),
            stall_after: duration_text(config.daemon.stall_after),
            heartbeat: duration_text(config.daemon.heartbeat),
            shutdown_grace: duration_text(config.daemon.shutdown_grace),
            max_line: config.daemon.max_line,
            max_request: config.daemon.max_request,
            max_connections: config.daemon.max_connections,
            log_level: config.daemon.log_level.name(),
        },
        syslog: RenderedSyslog {
            enabled: config.syslog.enabled,
            socket: config.syslog.socket.as_deref().map(path_text),
            facility: facility_name(config.syslog.facility),
            level: config.syslog.level.name(),
            rate_burst: config.syslog.rate_burst,
            rate_window: duration_text(config.syslog.rate_window),
        },
        sessions: &config.sessions,
        restart: RenderedRestart {
            backoff: config
                .restart
                .backoff
                .iter()
                .map(|d| duration_text(*d))
                .collect(),
            max_restarts: config.restart.max_restarts,
        },
        providers: &config.providers,
        jails: config
            .jails
            .iter()
            .map(|(name, listener)| (name.as_str(), path_text(&listener.socket)))
            .map(|(name, socket)| (name, RenderedJail { socket }))
            .collect(),
    };
    let mut out = String::new();
    let source = config
        .source
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "none".to_owned());
    let _ = writeln!(out, "# colibrid effective configuration (file: {source})");
    match toml::to_string(&rendered) {
        Ok(text) => out.push_str(&text),
        Err(e) => {
            let _ = writeln!(out, "# cannot render the configuration: {e}");
        }
    }
    out
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn duration_text(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[derive(Serialize)]
struct Rendered<'a> {
    daemon: RenderedDaemon,
    syslog: RenderedSyslog,
    sessions: &'a SessionsSection,
    restart: RenderedRestart,
    providers: &'a BTreeMap<String, Provider>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    jails: BTreeMap<&'a str, RenderedJail>,
}

#[derive(Serialize)]
struct RenderedDaemon {
    socket: String,
    socket_mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    socket_group: Option<String>,
    state_dir: String,
    host: String,
    stall_after: String,
    heartbeat: String,
    shutdown_grace: String,
    max_line: usize,
    max_request: usize,
    max_connections: usize,
    log_level: &'static str,
}

#[derive(Serialize)]
struct RenderedSyslog {
    enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<String>,
    facility: &'static str,
    level: &'static str,
    rate_burst: u32,
    rate_window: String,
}

#[derive(Serialize)]
struct RenderedRestart {
    backoff: Vec<String>,
    max_restarts: u32,
}

#[derive(Serialize)]
struct RenderedJail {
    socket: String,
}

// The file as serde sees it. Values checked beyond their TOML type are
// `Spanned` so an error can name their line.

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawFile {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    syslog: RawSyslog,
    #[serde(default)]
    sessions: RawSessions,
    #[serde(default)]
    restart: RawRestart,
    #[serde(default)]
    providers: BTreeMap<String, Spanned<RawProvider>>,
    #[serde(default)]
    jails: BTreeMap<String, Spanned<RawJail>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawDaemon {
    socket: Option<Spanned<String>>,
    socket_mode: Option<Spanned<RawMode>>,
    socket_group: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    stall_after: Option<Spanned<String>>,
    heartbeat: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
    max_line: Option<Spanned<u64>>,
    max_request: Option<Spanned<u64>>,
    max_connections: Option<Spanned<u64>>,
    log_level: Option<Spanned<String>>,
}

/// `socket_mode = "0660"` or the TOML octal integer `socket_mode = 0o660`.
/// Deserialized by hand: an untagged enum's error would name this type.
enum RawMode {
    Text(String),
    Number(i64),
}

impl<'de> Deserialize<'de> for RawMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ModeVisitor;

        impl serde::de::Visitor<'_> for ModeVisitor {
            type Value = RawMode;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an octal mode such as \"0660\" or 0o660")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawMode, E> {
                Ok(RawMode::Text(v.to_owned()))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawMode, E> {
                Ok(RawMode::Number(v))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawMode, E> {
                Ok(RawMode::Number(i64::try_from(v).unwrap_or(i64::MAX)))
            }
        }

        deserializer.deserialize_any(ModeVisitor)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawSyslog {
    enabled: Option<bool>,
    socket: Option<Spanned<String>>,
    facility: Option<Spanned<String>>,
    level: Option<Spanned<String>>,
    rate_burst: Option<Spanned<u64>>,
    rate_window: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawSessions {
    rotate_bytes: Option<u64>,
    rotate_turns: Option<u64>,
    flush_budget: Option<Spanned<u64>>,
    buffer_limit: Option<Spanned<u64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawRestart {
    backoff: Option<Vec<Spanned<String>>>,
    max_restarts: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawProvider {
    argv: Spanned<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawJail {
    socket: Option<Spanned<String>>,
}

/// Checks the values serde cannot, and names file, line and key on failure.
struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Validator<'_> {
    fn file(&self, raw: RawFile) -> Result<FileConfig, ConfigError> {
        let d = raw.daemon;
        let daemon = FileDaemon {
            socket: self.opt(d.socket, "daemon.socket", |v| self.path_value(v))?,
            socket_mode: match d.socket_mode {
                None => None,
                Some(v) => {
                    // A bare `socket_mode = 660` is decimal 660 to TOML: a
                    // silent wrong mode. Integers must be written in octal.
                    let written = self.text.get(v.span()).unwrap_or("").trim().to_string();
                    Some(self.one(v, "daemon.socket_mode", |v| {
                        match v {
                            RawMode::Text(text) => parse_mode(&text),
                            RawMode::Number(_) if !written.starts_with("0o") => Err(format!(
                                "invalid mode {written}: write it in octal, as \"0660\" or 0o660"
                            )),
                            RawMode::Number(n) => u32::try_from(n)
                                .ok()
                                .filter(|n| *n <= 0o777)
                                .ok_or_else(|| {
                                    format!("invalid mode {n:#o}: must be at most 0777")
                                }),
                        }
                    })?)
                }
            },
            socket_group: self.opt(d.socket_group, "daemon.socket_group", non_empty)?,
            state_dir: self.opt(d.state_dir, "daemon.state_dir", |v| self.path_value(v))?,
            host: self.opt(d.host, "daemon.host", non_empty)?,
            stall_after: self.opt(d.stall_after, "daemon.stall_after", |v| {
                parse_positive_duration(&v)
            })?,
            heartbeat: self.opt(d.heartbeat, "daemon.heartbeat", |v| {
                parse_positive_duration(&v)
            })?,
            shutdown_grace: self.opt(d.shutdown_grace, "daemon.shutdown_grace", |v| {
                parse_duration(&v)
            })?,
            max_line: self.opt(d.max_line, "daemon.max_line", positive_usize)?,
            max_request: self.opt(d.max_request, "daemon.max_request", positive_usize)?,
            max_connections: self.opt(
                d.max_connections,
                "daemon.max_connections",
                positive_usize,
            )?,
            log_level: self.opt(d.log_level, "daemon.log_level", |v| v.parse())?,
        };

        let s = raw.syslog;
        let syslog = FileSyslog {
            enabled: s.enabled,
            socket: self.opt(s.socket, "syslog.socket", |v| self.path_value(v))?,
            facility: self.opt(s.facility, "syslog.facility", |v| {
                parse_facility(&v).ok_or_else(|| unknown_facility(&v))
            })?,
            level: self.opt(s.level, "syslog.level", |v| {
                v.parse::<Severity>().map_err(|e| e.to_string())
            })?,
            rate_burst: self.opt(s.rate_burst, "syslog.rate_burst", |v| {
                u32::try_from(v).ok().filter(|v| *v >= 1).ok_or_else(|| {
                    format!("{v} is out of range (1..=4294967295; use enabled = false)")
                })
            })?,
            rate_window: self.opt(s.rate_window, "syslog.rate_window", |v| parse_duration(&v))?,
        };

        let sessions = FileSessions {
            rotate_bytes: raw.sessions.rotate_bytes,
            rotate_turns: raw.sessions.rotate_turns,
            flush_budget: self.opt(
                raw.sessions.flush_budget,
                "sessions.flush_budget",
                positive_usize,
            )?,
            buffer_limit: self.opt(
                raw.sessions.buffer_limit,
                "sessions.buffer_limit",
                positive_usize,
            )?,
        };

        let backoff = match raw.restart.backoff {
            None => None,
            Some(items) => {
                let mut backoff = Vec::with_capacity(items.len());
                for item in items {
                    backoff.push(self.one(item, "restart.backoff", |v| parse_duration(&v))?);
                }
                Some(backoff)
            }
        };
        let restart = FileRestart {
            backoff,
            max_restarts: self.opt(raw.restart.max_restarts, "restart.max_restarts", |v| {
                u32::try_from(v).map_err(|_| format!("{v} is out of range (0..=4294967295)"))
            })?,
        };

        let mut providers = BTreeMap::new();
        for (name, provider) in raw.providers {
            let span = provider.span();
            let key = format!("providers.{name}");
            if name.is_empty() {
                return Err(self.invalid(span, &key, "a provider needs a name".to_owned()));
            }
            let argv_key = format!("{key}.argv");
            let argv = self.one(provider.into_inner().argv, &argv_key, |argv| {
                if argv.first().is_some_and(|program| !program.is_empty()) {
                    Ok(argv)
                } else {
                    Err("must start with a program name".to_owned())
                }
            })?;
            providers.insert(name, Provider { argv });
        }

        let mut jails = BTreeMap::new();
        for (name, jail) in raw.jails {
            let span = jail.span();
            let key = format!("jails.{name}");
            if let Err(msg) = check_jail_name(&name) {
                return Err(self.invalid(span, &key, msg));
            }
            let socket = match jail.into_inner().socket {
                Some(socket) => {
                    self.one(socket, &format!("{key}.socket"), |v| self.path_value(v))?
                }
                None => default_jail_socket(&name),
            };
            jails.insert(name, JailListener { socket });
        }

        Ok(FileConfig {
            daemon,
            syslog,
            sessions,
            restart,
            providers,
            jails,
        })
    }

    fn opt<T, U>(
        &self,
        value: Option<Spanned<T>>,
        key: &str,
        check: impl FnOnce(T) -> Result<U, String>,
    ) -> Result<Option<U>, ConfigError> {
        value.map(|value| self.one(value, key, check)).transpose()
    }

    fn one<T, U>(
        &self,
        value: Spanned<T>,
        key: &str,
        check: impl FnOnce(T) -> Result<U, String>,
    ) -> Result<U, ConfigError> {
        let span = value.span();
        check(value.into_inner()).map_err(|msg| self.invalid(span, key, msg))
    }

    fn invalid(&self, span: Range<usize>, key: &str, msg: String) -> ConfigError {
        ConfigError::Invalid {
            path: Some(self.path.to_path_buf()),
            line: Some(line_column(self.text, span.start).0),
            key: key.to_owned(),
            msg,
        }
    }

    fn path_value(&self, value: String) -> Result<PathBuf, String> {
        if value.is_empty() {
            Err("must not be empty".to_owned())
        } else {
            Ok(PathBuf::from(value))
        }
    }
}

fn non_empty(value: String) -> Result<String, String> {
    if value.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(value)
    }
}

fn positive_usize(value: u64) -> Result<usize, String> {
    usize::try_from(value)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| format!("{value} is out of range (must be at least 1)"))
}

/// Parses a humantime duration (`90s`, `10m`, `1h 30m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// A duration that drives a periodic timer must not be zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        Err(format!(
            "invalid duration {text:?}: must be greater than zero"
        ))
    } else {
        Ok(d)
    }
}

/// Parses a file mode in octal: `0660`, `660` or `0o660`, at most `0777`.
pub fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    let mode = if !digits.is_empty() && digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        u32::from_str_radix(digits, 8).ok()
    } else {
        None
    };
    match mode {
        Some(mode) if mode <= 0o777 => Ok(mode),
        Some(_) => Err(format!("invalid mode {text:?}: must be at most 0777")),
        None => Err(format!("invalid mode {text:?}: not an octal number")),
    }
}

/// Jail names become a directory under [`DEFAULT_JAILS_DIR`], so they must be
/// one plain path component.
fn check_jail_name(name: &str) -> Result<(), String> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if name.is_empty() || name == "." || name == ".." || !plain {
        Err(format!(
            "invalid jail name {name:?} (letters, digits, '_', '-', '.')"
        ))
    } else {
        Ok(())
    }
}

fn parse_mode_arg(text: &str) -> Result<u32, String> {
    parse_mode(text)
}

fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

fn parse_positive_duration_arg(text: &str) -> Result<Duration, String> {
    parse_positive_duration(text)
}

fn parse_positive_usize_arg(text: &str) -> Result<usize, String> {
    let value: u64 = text
        .parse()
        .map_err(|e| format!("invalid number {text:?}: {e}"))?;
    positive_usize(value)
}

fn parse_log_level_arg(text: &str) -> Result<LogLevel, String> {
    text.parse()
}

fn parse_facility_arg(text: &str) -> Result<Facility, String> {
    parse_facility(text).ok_or_else(|| unknown_facility(text))
}

fn parse_severity_arg(text: &str) -> Result<Severity, String> {
    text.parse::<Severity>().map_err(|e| e.to_string())
}

fn parse_jail_socket_arg(text: &str) -> Result<JailSocketArg, String> {
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

fn unknown_facility(name: &str) -> String {
    format!("unknown syslog facility {name:?} (expected daemon, user, local0..local7, ...)")
}

fn system_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// 1-based line and column (in chars) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The dotted key whose name or value covers a byte offset, found by parsing
/// the document again into spanned tables (the serde error keeps its key
/// path private).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find_key(doc.get_ref(), offset, &mut path).then(|| path.join("."))
}

fn find_key(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        let in_key = key.span().contains(&offset);
        let in_value = value.span().contains(&offset);
        if !in_key && !in_value && value.get_ref().as_table().is_none() {
            continue;
        }
        path.push(key.get_ref().to_string());
        if in_key {
            return true;
        }
        if let Some(inner) = value.get_ref().as_table() {
            if find_key(inner, offset, path) {
                return true;
            }
        }
        if in_value {
            return true;
        }
        path.pop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        parse_file(Path::new("/etc/colibri.toml"), text)
    }

    fn parse_err(text: &str) -> ConfigError {
        match parse(text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e,
        }
    }

    fn resolve_with(args: &DaemonArgs, file: Option<&FileConfig>) -> Config {
        let path = Path::new("/etc/colibri.toml");
        resolve(args, file.map(|f| (path, f))).expect("resolves")
    }

    #[test]
    fn defaults_match_the_spec() {
        let config = resolve_with(&DaemonArgs::default(), None);
        let d = &config.daemon;
        assert_eq!(config.source, None);
        assert_eq!(d.socket, Path::new("/var/run/colibri/colibri.sock"));
        assert_eq!(d.socket_mode, 0o660);
        assert_eq!(d.socket_group, None);
        assert_eq!(d.state_dir, Path::new("/var/db/colibri"));
        assert_eq!(d.host, system_hostname());
        assert_eq!(d.stall_after, Duration::from_secs(600));
        assert_eq!(d.heartbeat, Duration::from_secs(30));
        assert_eq!(d.shutdown_grace, Duration::from_secs(5));
        assert_eq!(d.max_line, 1_048_576);
        assert_eq!(d.max_request, 1_048_576);
        assert_eq!(d.max_connections, 256);
        assert_eq!(d.log_level, LogLevel::Info);
        let s = &config.syslog;
        assert!(s.enabled);
        assert_eq!(s.socket, None);
        assert_eq!(facility_name(s.facility), "daemon");
        assert_eq!(s.level, Severity::Info);
        assert_eq!(s.rate_burst, 5);
        assert_eq!(s.rate_window, Duration::from_secs(60));
        assert_eq!(
            config.sessions,
            SessionsSection {
                rotate_bytes: 67_108_864,
                rotate_turns: 500,
                flush_budget: 4_194_304,
                buffer_limit: 8_388_608,
            }
        );
        let minutes: Vec<u64> = config
            .restart
            .backoff
            .iter()
            .map(|d| d.as_secs() / 60)
            .collect();
        assert_eq!(minutes, [1, 5, 15, 30, 60]);
        assert_eq!(config.restart.max_restarts, 5);
        assert_eq!(
            config.providers.keys().collect::<Vec<_>>(),
            ["anthropic", "deepseek", "openrouter"]
        );
        assert_eq!(
            config.providers["openrouter"].argv,
            [
                "pi",
                "--mode",
                "rpc",
                "--provider",
                "openrouter",
                "--model",
                "{model}"
            ]
        );
        assert!(config.jails.is_empty());
        let alert = config.alert_config();
        assert!(alert.enabled);
        assert_eq!(alert.min_level, Severity::Info);
        assert_eq!(alert.rate_burst, 5);
    }

    #[test]
    fn sample_config_from_the_spec_loads() {
        let file = parse(
            r#"
[daemon]
socket = "/tmp/c.sock"
socket_mode = "0640"
socket_group = "colibri"
state_dir = "/tmp/state"
host = "buildbox"
stall_after = "90s"
heartbeat = "15s"
shutdown_grace = "2s"
max_line = 4096
max_request = 8192
max_connections = 8
log_level = "debug"

[syslog]
enabled = true
socket = "/var/run/log"
facility = "local3"
level = "notice"
rate_burst = 2
rate_window = "30s"

[sessions]
rotate_bytes = 1000
rotate_turns = 10
flush_budget = 100
buffer_limit = 200

[restart]
backoff = ["1s", "2m"]
max_restarts = 3

[providers.deepseek]
argv = ["pi", "--provider", "deepseek", "--model", "{model}"]

[providers.local]
argv = ["ollama-agent", "{model}"]

[jails.agents1]
socket = "/var/run/colibri/jails/agents1/colibri.sock"

[jails.agents2]
"#,
        )
        .expect("sample parses");
        let config = resolve_with(&DaemonArgs::default(), Some(&file));
        assert_eq!(
            config.source.as_deref(),
            Some(Path::new("/etc/colibri.toml"))
        );
        assert_eq!(config.daemon.socket_mode, 0o640);
        assert_eq!(config.daemon.socket_group.as_deref(), Some("colibri"));
        assert_eq!(config.daemon.host, "buildbox");
        assert_eq!(config.daemon.stall_after, Duration::from_secs(90));
        assert_eq!(config.daemon.max_connections, 8);
        assert_eq!(config.daemon.log_level, LogLevel::Debug);
        assert_eq!(facility_name(config.syslog.facility), "local3");
        assert_eq!(config.syslog.level, Severity::Notice);
        assert_eq!(config.sessions.buffer_limit, 200);
        assert_eq!(
            config.restart.backoff,
            [Duration::from_secs(1), Duration::from_secs(120)]
        );
        // File providers override by name and add to the built-ins.
        assert_eq!(config.providers["deepseek"].argv[1], "--provider");
        assert_eq!(config.providers["local"].argv, ["ollama-agent", "{model}"]);
        assert!(config.providers.contains_key("anthropic"));
        assert_eq!(
            config.jails["agents2"].socket,
            Path::new("/var/run/colibri/jails/agents2/colibri.sock")
        );
        let alert = config.alert_config();
        assert_eq!(alert.socket.as_deref(), Some(Path::new("/var/run/log")));
        assert_eq!(alert.rate_window, Duration::from_secs(30));
        assert_eq!(alert.min_level, Severity::Notice);
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let file = parse(
            r#"
[daemon]
socket = "/file.sock"
state_dir = "/file/state"
stall_after = "20m"
log_level = "warn"
[syslog]
facility = "local1"
enabled = true
"#,
        )
        .expect("parses");
        let args = DaemonArgs {
            socket: Some(PathBuf::from("/flag.sock")),
            stall_after: Some(Duration::from_secs(5)),
            syslog_facility: Some(Facility::LOG_LOCAL7),
            no_syslog: true,
            ..DaemonArgs::default()
        };
        let config = resolve_with(&args, Some(&file));
        assert_eq!(config.daemon.socket, Path::new("/flag.sock"));
        assert_eq!(config.daemon.stall_after, Duration::from_secs(5));
        assert_eq!(facility_name(config.syslog.facility), "local7");
        assert!(!config.syslog.enabled);
        // Not on the command line: the file wins over the default.
        assert_eq!(config.daemon.state_dir, Path::new("/file/state"));
        assert_eq!(config.daemon.log_level, LogLevel::Warn);
        // In neither: the default.
        assert_eq!(config.daemon.heartbeat, DEFAULT_HEARTBEAT);
    }

    /// Runs in a child process with a controlled environment, so the test
    /// neither mutates nor depends on this process's environment.
    #[test]
    fn env_sits_between_flag_and_file() {
        const CHILD: &str = "COLIBRI_CONFIG_TEST_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let file = parse(concat!(
                "[daemon]\n",
                "state_dir = \"/file/state\"\n",
                "log_level = \"warn\"\n",
                "host = \"filehost\"\n",
            ))
            .expect("parses");
            let args = DaemonArgs::try_parse_from(["colibrid", "--socket", "/flag.sock"])
                .expect("args parse");
            let config = resolve_with(&args, Some(&file));
            // Flag beats env.
            assert_eq!(config.daemon.socket, Path::new("/flag.sock"));
            // Env beats file.
            assert_eq!(config.daemon.state_dir, Path::new("/env/state"));
            assert_eq!(config.daemon.log_level, LogLevel::Debug);
            // File beats default.
            assert_eq!(config.daemon.host, "filehost");
            assert_eq!(args.config.as_deref(), Some(Path::new("/env/colibri.toml")));
            return;
        }
        let exe = std::env::current_exe().expect("test binary path");
        let output = std::process::Command::new(exe)
            .args([
                "--exact",
                "config::tests::env_sits_between_flag_and_file",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("COLIBRI_SOCKET", "/env.sock")
            .env("COLIBRI_STATE_DIR", "/env/state")
            .env("COLIBRI_LOG", "debug")
            .env("COLIBRI_CONFIG", "/env/colibri.toml")
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    #[test]
    fn flags_parse_and_reject_bad_values() {
        let args = DaemonArgs::try_parse_from([
            "colibrid",
            "--socket-mode",
            "0600",
            "--stall-after",
            "90s",
            "--max-line",
            "4096",
            "--syslog-facility",
            "local0",
            "--alert-level",
            "warning",
            "--jail-socket",
            "a1=/run/a1.sock",
            "--jail-socket",
            "b2=/run/b2.sock",
            "--no-syslog",
            "--check-config",
        ])
        .expect("valid flags");
        assert_eq!(args.socket_mode, Some(0o600));
        assert_eq!(args.stall_after, Some(Duration::from_secs(90)));
        assert_eq!(args.max_line, Some(4096));
        assert!(matches!(args.syslog_facility, Some(Facility::LOG_LOCAL0)));
        assert_eq!(args.alert_level, Some(Severity::Warning));
        assert_eq!(args.jail_socket.len(), 2);
        assert_eq!(args.jail_socket[1].jail, "b2");
        assert!(args.no_syslog && args.check_config);
        for bad in [
            ["--socket-mode", "999"],
            ["--stall-after", "10x"],
            ["--stall-after", "0s"],
            ["--max-line", "0"],
            ["--syslog-facility", "daemons"],
            ["--alert-level", "loud"],
            ["--jail-socket", "nopath"],
            ["--jail-socket", "../x=/p"],
        ] {
            let result = DaemonArgs::try_parse_from(["colibrid", bad[0], bad[1]]);
            assert!(result.is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn jail_socket_flags_merge_with_the_file() {
        let file = parse(
            "[jails.a1]\nsocket = \"/file/a1.sock\"\n[jails.b2]\nsocket = \"/file/b2.sock\"\n",
        )
        .expect("parses");
        let args = DaemonArgs {
            jail_socket: vec![
                JailSocketArg {
                    jail: "b2".into(),
                    socket: "/flag/b2.sock".into(),
                },
                JailSocketArg {
                    jail: "c3".into(),
                    socket: "/flag/c3.sock".into(),
                },
            ],
            ..DaemonArgs::default()
        };
        let config = resolve_with(&args, Some(&file));
        let sockets: Vec<(&str, &Path)> = config
            .jails
            .iter()
            .map(|(name, l)| (name.as_str(), l.socket.as_path()))
            .collect();
        assert_eq!(
            sockets,
            [
                ("a1", Path::new("/file/a1.sock")),
                ("b2", Path::new("/flag/b2.sock")),
                ("c3", Path::new("/flag/c3.sock")),
            ]
        );
    }

    #[test]
    fn a_jail_cannot_share_a_socket() {
        let args = DaemonArgs {
            socket: Some("/run/op.sock".into()),
            jail_socket: vec![JailSocketArg {
                jail: "a1".into(),
                socket: "/run/op.sock".into(),
            }],
            ..DaemonArgs::default()
        };
        let err = resolve(&args, None).expect_err("clash");
        assert_eq!(
            err.to_string(),
            "jails.a1.socket: /run/op.sock is also the operator socket"
        );
        let file =
            parse("[jails.a]\nsocket = \"/s\"\n[jails.b]\nsocket = \"/s\"\n").expect("parses");
        let err = resolve(&DaemonArgs::default(), Some((Path::new("/c.toml"), &file)))
            .expect_err("clash");
        assert_eq!(
            err.to_string(),
            "/c.toml: jails.b.socket: /s is also the socket of jail \"a\""
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let err = parse_err("[daemon]\nsocket = \"/x\"\n\nstal_after = \"10m\"\n");
        match &err {
            ConfigError::Syntax {
                path,
                line,
                column,
                key,
                msg,
            } => {
                assert_eq!(path, Path::new("/etc/colibri.toml"));
                assert_eq!(*line, 4);
                assert_eq!(*column, 1);
                assert_eq!(key.as_deref(), Some("daemon.stal_after"));
                assert!(msg.contains("unknown field `stal_after`"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err
            .to_string()
            .starts_with("/etc/colibri.toml:4:1: daemon.stal_after: unknown field `stal_after`"));

        let err = parse_err("[daemon]\n[sylog]\nenabled = false\n");
        assert!(
            err.to_string()
                .starts_with("/etc/colibri.toml:2:2: sylog: unknown field `sylog`"),
            "{err}"
        );
        let err = parse_err("[providers.x]\nargv = [\"a\"]\nenv = {}\n");
        assert!(
            err.to_string()
                .starts_with("/etc/colibri.toml:3:1: providers.x.env: unknown field `env`"),
            "{err}"
        );
    }

    #[test]
    fn type_and_syntax_errors_name_the_line() {
        let err = parse_err("[daemon]\nmax_line = \"big\"\n");
        assert!(
            err.to_string()
                .starts_with("/etc/colibri.toml:2:12: daemon.max_line: invalid type"),
            "{err}"
        );
        let err = parse_err("[daemon]\nmax_line = -1\n");
        assert!(
            err.to_string()
                .starts_with("/etc/colibri.toml:2:12: daemon.max_line: "),
            "{err}"
        );
        let err = parse_err("[daemon]\nsocket = \"/x\n");
        match err {
            ConfigError::Syntax { line, key, .. } => {
                assert_eq!(line, 2);
                assert_eq!(key, None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn expect_invalid(text: &str, want_line: usize, want_key: &str, want_msg: &str) {
        let (line, key, msg) = invalid(text);
        assert_eq!(line, Some(want_line), "{text}");
        assert_eq!(key, want_key, "{text}");
        assert!(msg.contains(want_msg), "{text}: {msg}");
    }

    fn invalid(text: &str) -> (Option<usize>, String, String) {
        match parse_err(text) {
            ConfigError::Invalid {
                path,
                line,
                key,
                msg,
            } => {
                assert_eq!(path.as_deref(), Some(Path::new("/etc/colibri.toml")));
                (line, key, msg)
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let text = concat!(
            "# comment\n[daemon]\nsocket = \"/x\"\nheartbeat = \"30s\"\n",
            "\n\nstall_after = \"10x\"\n",
        );
        let err = parse_err(text);
        let shown = err.to_string();
        assert!(
            shown
                .starts_with("/etc/colibri.toml:7: daemon.stall_after: invalid duration \"10x\": "),
            "{shown}"
        );

        expect_invalid(
            "[daemon]\nsocket_mode = \"999\"\n",
            2,
            "daemon.socket_mode",
            "not an octal number",
        );
        expect_invalid(
            "[daemon]\nsocket_mode = \"01777\"\n",
            2,
            "daemon.socket_mode",
            "at most 0777",
        );
        expect_invalid(
            "[daemon]\nheartbeat = \"0s\"\n",
            2,
            "daemon.heartbeat",
            "greater than zero",
        );
        expect_invalid(
            "[daemon]\nlog_level = \"chatty\"\n",
            2,
            "daemon.log_level",
            "invalid log level",
        );
        expect_invalid(
            "\n[syslog]\nfacility = \"daemons\"\n",
            3,
            "syslog.facility",
            "unknown syslog facility",
        );
        expect_invalid(
            "[syslog]\nlevel = \"loud\"\n",
            2,
            "syslog.level",
            "unknown syslog level",
        );
        expect_invalid(
            "[syslog]\nrate_burst = 0\n",
            2,
            "syslog.rate_burst",
            "out of range",
        );
        expect_invalid(
            "[restart]\nbackoff = [\"1m\",\n  \"5q\"]\n",
            3,
            "restart.backoff",
            "invalid duration \"5q\"",
        );
        expect_invalid(
            "[providers.p]\nargv = []\n",
            2,
            "providers.p.argv",
            "program name",
        );
        let (line, key, _) = invalid("[jails.\"a/b\"]\nsocket = \"/s\"\n");
        assert_eq!((line, key.as_str()), (Some(1), "jails.a/b"));
    }

    #[test]
    fn modes_parse_as_octal() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("660"), Ok(0o660));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert!(parse_mode("").is_err());
        assert!(parse_mode("0x1ff").is_err());
        let file = parse("[daemon]\nsocket_mode = 0o640\n").expect("toml octal integer");
        assert_eq!(file.daemon.socket_mode, Some(0o640));
        // A bare integer is decimal to TOML: 660 would silently be 0o1224.
        let err = parse("[daemon]\nsocket_mode = 660\n").expect_err("a decimal integer is refused");
        assert!(err.to_string().contains("write it in octal"), "{err}");
    }

    #[test]
    fn missing_file_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent.toml");
        let args = DaemonArgs {
            config: Some(path.clone()),
            ..DaemonArgs::default()
        };
        match load(&args) {
            Err(ConfigError::Read { path: p, source }) => {
                assert_eq!(p, path);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn load_reads_the_named_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("colibri.toml");
        std::fs::write(&path, "[daemon]\nheartbeat = \"7s\"\n").expect("write config");
        let args = DaemonArgs {
            config: Some(path.clone()),
            ..DaemonArgs::default()
        };
        let config = load(&args).expect("loads");
        assert_eq!(config.source.as_deref(), Some(path.as_path()));
        assert_eq!(config.daemon.heartbeat, Duration::from_secs(7));
    }

    #[test]
    fn effective_config_renders_and_loads_back() {
        let file = parse(
            r#"
[daemon]
socket_group = "colibri"
stall_after = "90s"
[syslog]
socket = "/tmp/log"
level = "warning"
[jails.j1]
[providers.x]
argv = ["x", "{model}"]
"#,
        )
        .expect("parses");
        let config = resolve_with(&DaemonArgs::default(), Some(&file));
        let text = render_effective(&config);
        assert!(text.starts_with("# colibrid effective configuration (file: /etc/colibri.toml)\n"));
        assert!(text.contains("socket_mode = \"0660\""), "{text}");
        assert!(text.contains("stall_after = \"1m 30s\""), "{text}");
        assert!(text.contains("[providers.x]"), "{text}");

        let again = parse(&text).expect("rendered config parses");
        let round = resolve_with(&DaemonArgs::default(), Some(&again));
        assert_eq!(round.daemon, config.daemon);
        assert_eq!(round.sessions, config.sessions);
        assert_eq!(round.restart, config.restart);
        assert_eq!(round.providers, config.providers);
        assert_eq!(round.jails, config.jails);
        assert_eq!(round.syslog.socket, config.syslog.socket);
        assert_eq!(round.syslog.level, Severity::Warning);
        assert_eq!(facility_name(round.syslog.facility), "daemon");
    }
}
