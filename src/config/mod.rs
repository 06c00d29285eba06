//! colibrid's configuration: flags, environment, the TOML file and defaults.
//!
//! Every source is read into the same [`Layer`] (every value optional):
//! [`flags`] turns the command line and environment (clap merges those two)
//! into one, [`file`] reads and validates the TOML file into another. They
//! are merged once, `flags.or(file)`, and resolved once over the defaults of
//! SPEC.md into a [`Config`] with nothing optional that has a default. Each
//! section is declared once by [`layered!`]: one line per key gives its
//! resolved type, its default and how `--check-config` renders it, and
//! generates the layer, the merge and the resolution from it. [`load`] does
//! it all for colibrid, at start and again on SIGHUP; [`plan`] then says
//! which changed keys the running daemon applies and which need a restart.
//!
//! Every file error names the file, the line and the dotted key
//! (`/usr/local/etc/colibri.toml:7: daemon.stall_after: invalid duration
//! "10x": ...`), and every invalid value in a file is reported, not only the
//! first: unknown keys are rejected (`deny_unknown_fields`) so a typo cannot
//! silently fall back to a default, syntax and type errors are placed from
//! the parser's byte span, and values checked here (durations, modes,
//! facilities, levels) carry their span through `toml::Spanned`.
//!
//! This module depends on nothing in `daemon` (`tests/tidy.rs` holds that):
//! syslog names come from the leaf [`crate::syslog`].

mod agents;
mod file;
mod flags;
pub mod fleet;
mod governance;
mod hostops;
pub mod notify;
mod render;
mod roles;
pub use roles::{RoleRunner, DEFAULT_IDLE_STOP};

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::core::spec::AgentSpec;
use crate::syslog::{Facility, Severity};

pub use agents::{default_resume, AgentDecl, Launch, ResumeRecipe, LOCAL_PROVIDER};
pub use file::{load_file, parse_file};
pub use flags::{DaemonArgs, JailSocketArg};
pub use hostops::{
    HostOp, ParamError, ParamPattern, DEFAULT_HOSTOP_OUTPUT, DEFAULT_HOSTOP_TIMEOUT,
    MAX_HOSTOP_OUTPUT, MAX_HOSTOP_TIMEOUT, MAX_PARAM_BYTES,
};
pub use render::render_effective;

/// The config file read when neither `--config` nor `COLIBRI_CONFIG` is set,
/// if it exists.
pub const DEFAULT_CONFIG_PATH: &str = "/usr/local/etc/colibri.toml";
pub const DEFAULT_SOCKET: &str = "/var/run/colibri/colibri.sock";
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
pub const DEFAULT_STATE_DIR: &str = "/var/db/colibri";
/// Per-jail listeners live here unless `[jails.NAME] socket` says otherwise.
pub const DEFAULT_JAILS_DIR: &str = "/var/run/colibri/jails";
/// The board's login token (`colibri web`):
/// `$XDG_CONFIG_HOME/colibri/web-token`, else `~/.config/colibri/web-token`.
pub fn web_token_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("colibri").join("web-token")
}

/// `web-action-key` beside the board's token: the key that signs the phone
/// action URLs (`web::action`), shared by `colibri notify` and the board.
pub fn action_key_path() -> PathBuf {
    web_token_path().with_file_name("web-action-key")
}

/// How long a published action URL may be used (`[[notify]] action_ttl`).
pub const DEFAULT_ACTION_TTL: Duration = Duration::from_secs(3600);
/// The contract's stall threshold was 4 hours; an operator learns nothing
/// useful that late, so colibri defaults to 10 minutes.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX_LINE: usize = crate::core::ingest::DEFAULT_MAX_LINE;
pub const DEFAULT_MAX_REQUEST: usize = 1_048_576;
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Connections one peer (a uid; on FreeBSD a uid in one jail) may hold on
/// one listener; the daemon's own uid and root are exempt on the operator socket.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 32;
/// A connection without a complete request (or a reply or event it reads)
/// for this long is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_LOG_LEVEL: LogLevel = LogLevel::Info;
/// The PATH an agent gets when its spawn request does not set one.
pub use crate::platform::DEFAULT_AGENT_PATH;
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
/// The longest duration any setting or request accepts. Far beyond any
/// useful timer, and far enough below the overflow of a deadline computed as
/// `now + duration` (a `stall_after` of `u64::MAX` milliseconds).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 60 * 60);

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

/// Declares one config section once: the resolved struct (one field per
/// key, with its default and its `--check-config` rendering), the layer of
/// optional values every source fills, the merge of two layers and the
/// resolution over the defaults.
macro_rules! layered {
    (
        $(#[$meta:meta])*
        $section:ident / $layer:ident {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty = $default:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Serialize)]
        pub struct $section {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        #[doc = concat!("One source's values for [`", stringify!($section), "`]; `None` means \"not given by this source\".")]
        #[derive(Debug, Clone, Default)]
        pub struct $layer {
            $( pub $field: Option<$ty>, )*
        }

        impl $layer {
            /// This layer's values where it has them, else `lower`'s.
            pub fn or(self, lower: $layer) -> $layer {
                $layer { $( $field: self.$field.or(lower.$field), )* }
            }

            /// Every value still missing takes its default.
            pub fn resolve(self) -> $section {
                $section { $( $field: self.$field.unwrap_or_else(|| $default), )* }
            }
        }
    };
}

layered! {
    /// `[daemon]`, resolved.
    #[derive(Debug, Clone, PartialEq, Eq)]
    DaemonSection / DaemonLayer {
        socket: PathBuf = PathBuf::from(DEFAULT_SOCKET),
        #[serde(serialize_with = "render::mode")]
        socket_mode: u32 = DEFAULT_SOCKET_MODE,
        #[serde(skip_serializing_if = "Option::is_none")]
        socket_group: Option<String> = None,
        state_dir: PathBuf = PathBuf::from(DEFAULT_STATE_DIR),
        host: String = system_hostname(),
        #[serde(serialize_with = "render::duration")]
        stall_after: Duration = DEFAULT_STALL_AFTER,
        #[serde(serialize_with = "render::duration")]
        heartbeat: Duration = DEFAULT_HEARTBEAT,
        #[serde(serialize_with = "render::duration")]
        shutdown_grace: Duration = DEFAULT_SHUTDOWN_GRACE,
        /// Finished panes older than this leave the snapshot (their logs
        /// stay); zero keeps them until `remove-agent`.
        #[serde(serialize_with = "render::duration")]
        retain_finished: Duration = Duration::ZERO,
        max_line: usize = DEFAULT_MAX_LINE,
        max_request: usize = DEFAULT_MAX_REQUEST,
        max_connections: usize = DEFAULT_MAX_CONNECTIONS,
        max_connections_per_peer: usize = DEFAULT_MAX_CONNECTIONS_PER_PEER,
        #[serde(serialize_with = "render::duration")]
        idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT,
        #[serde(serialize_with = "render::log_level")]
        log_level: LogLevel = DEFAULT_LOG_LEVEL,
        /// The PATH given to agents whose request sets none.
        agent_path: String = DEFAULT_AGENT_PATH.to_owned(),
    }
}

layered! {
    /// `[syslog]`, resolved: what `daemon::alert` sends with.
    #[derive(Debug, Clone)]
    SyslogSection / SyslogLayer {
        enabled: bool = true,
        /// The datagram socket to send to; `None` means the system log, the
        /// first of `daemon::alert::SYSTEM_LOG_SOCKETS` that exists.
        #[serde(skip_serializing_if = "Option::is_none")]
        socket: Option<PathBuf> = None,
        #[serde(serialize_with = "render::facility")]
        facility: Facility = DEFAULT_SYSLOG_FACILITY,
        /// The least severe level still sent (`Info` sends all but debug).
        /// The file calls it `level`.
        #[serde(rename = "level", serialize_with = "render::severity")]
        min_level: Severity = DEFAULT_ALERT_LEVEL,
        /// Alerts a pane may send in a burst; 0 is treated as 1.
        rate_burst: u32 = DEFAULT_RATE_BURST,
        /// Time for an empty bucket to refill completely; zero disables the
        /// limit.
        #[serde(serialize_with = "render::duration")]
        rate_window: Duration = DEFAULT_RATE_WINDOW,
    }
}

impl Default for SyslogSection {
    /// The defaults of SPEC.md: enabled, system log, daemon, info, 5 per 1m.
    fn default() -> Self {
        SyslogLayer::default().resolve()
    }
}

layered! {
    /// `[sessions]`, resolved.
    #[derive(Debug, Clone, PartialEq, Eq)]
    SessionsSection / SessionsLayer {
        rotate_bytes: u64 = DEFAULT_ROTATE_BYTES,
        rotate_turns: u64 = DEFAULT_ROTATE_TURNS,
        flush_budget: usize = DEFAULT_FLUSH_BUDGET,
        buffer_limit: usize = DEFAULT_BUFFER_LIMIT,
        #[serde(serialize_with = "render::duration")]
        retain: Duration = Duration::ZERO,
    }
}

layered! {
    /// `[restart]`, resolved.
    #[derive(Debug, Clone, PartialEq, Eq)]
    RestartSection / RestartLayer {
        #[serde(serialize_with = "render::durations")]
        backoff: Vec<Duration> = DEFAULT_RESTART_BACKOFF.to_vec(),
        max_restarts: u32 = DEFAULT_MAX_RESTARTS,
    }
}

layered! {
    /// `[approvals]`, resolved: what happens to approvals nobody answers.
    #[derive(Debug, Clone, PartialEq, Eq)]
    ApprovalsSection / ApprovalsLayer {
        /// Escalate an approval pending this long; zero: never.
        #[serde(serialize_with = "render::duration")]
        escalate_after: Duration = Duration::ZERO,
        /// `none`, or `deny`: answered by default `default_after` after the
        /// escalation.
        default_answer: String = "none".to_owned(),
        #[serde(serialize_with = "render::duration")]
        default_after: Duration = Duration::ZERO,
    }
}

layered! {
    /// `[orchestrator]`, resolved: whether colibrid hands pending tasks to
    /// idle agents itself (`core::dispatch`), and how.
    #[derive(Debug, Clone, PartialEq, Eq)]
    OrchestratorSection / OrchestratorLayer {
        /// Off by default: a deployment that has its agents claim for
        /// themselves keeps doing so.
        dispatch: bool = false,
        /// Climb the stuck-loop escalation ladder (docs/ORCHESTRATOR.md).
        escalate: bool = false,
        /// How long the agents colibrid starts or resumes at its own start
        /// are left alone (no task given, no rung climbed): the seed's
        /// grace period for arms found working.
        #[serde(serialize_with = "render::duration")]
        grace: Duration = Duration::from_secs(300),
        /// A plan file (`.project/plan.md`) whose open checkbox items
        /// become tasks; a task done ticks its line.
        #[serde(skip_serializing_if = "Option::is_none")]
        plan_file: Option<PathBuf> = None,
        /// A project directory: its `.project/plan.md`, `**/*.plan.md` and
        /// `**/plans/*.md` are plan files, and its `.project/inbox.md` an
        /// inbox whose headers and items become tasks.
        #[serde(skip_serializing_if = "Option::is_none")]
        project: Option<PathBuf> = None,
        /// The claim handshake's window: a claim not acknowledged in it
        /// goes back to pending.
        #[serde(serialize_with = "render::duration")]
        ack_timeout: Duration = crate::core::tasks::ACK_TIMEOUT,
        /// How long an agent that let a dispatched claim lapse is not
        /// offered that task again.
        #[serde(serialize_with = "render::duration")]
        retry_after: Duration = crate::core::dispatch::DEFAULT_RETRY_AFTER,
        /// The text an agent is given with its task (`{id}`, `{title}`,
        /// `{description}`).
        prompt: String = crate::core::dispatch::DEFAULT_PROMPT.to_owned(),
    }
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

/// The effective configuration: every default resolved. Serializing it
/// gives the `--check-config` output, and [`plan`] compares two of them key
/// by key through the same serialization.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The file that was read, if any (SIGHUP reads it again).
    #[serde(skip)]
    pub source: Option<PathBuf>,
    pub daemon: DaemonSection,
    pub syslog: SyslogSection,
    pub sessions: SessionsSection,
    pub restart: RestartSection,
    pub approvals: ApprovalsSection,
    pub orchestrator: OrchestratorSection,
    pub providers: BTreeMap<String, Provider>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub jails: BTreeMap<String, JailListener>,
    /// Resume templates by runtime name, colibri's defaults under the
    /// file's `[resume.RUNTIME]`.
    pub resume: BTreeMap<String, ResumeRecipe>,
    /// `[agents.NAME]`, resolved: argv expanded, resume template chosen.
    #[serde(
        serialize_with = "agents::render",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub agents: BTreeMap<String, AgentSpec>,
    /// `[hostops.NAME]`: what jail agents may ask colibrid to run on the
    /// host (docs/JAILS.md, "Host operations").
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hostops: BTreeMap<String, HostOp>,
    /// `[roles.NAME]`: how the orchestrator starts an agent for a role
    /// with work and no agent (docs/ORCHESTRATOR.md, "Runners").
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, RoleRunner>,
    /// `[fleet]`: colibrid then supervises the bridge (docs/FLEET.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<fleet::FleetConfig>,
    /// `[budgets.*]`, `[loops]`, `[guard]`, `[prices.*]` (docs/GOVERNANCE.md).
    #[serde(skip)]
    pub governance: crate::core::policy::Policies,
}

/// Every source's values; the file gives one, the flags and environment
/// another. Providers, jails, agents and resume templates are maps: a
/// layer's entries replace the lower layer's entries of the same name.
#[derive(Debug, Clone, Default)]
pub struct Layer {
    pub daemon: DaemonLayer,
    pub syslog: SyslogLayer,
    pub sessions: SessionsLayer,
    pub restart: RestartLayer,
    pub approvals: ApprovalsLayer,
    pub orchestrator: OrchestratorLayer,
    pub providers: BTreeMap<String, Provider>,
    pub jails: BTreeMap<String, JailListener>,
    pub agents: BTreeMap<String, AgentDecl>,
    /// Runtime name to template; empty means never resume.
    pub resume: BTreeMap<String, Vec<String>>,
    /// The file's governance sections (only a file sets them).
    pub governance: Option<crate::core::policy::Policies>,
    /// `[hostops.NAME]` (only a file sets them).
    pub hostops: BTreeMap<String, HostOp>,
    /// `[roles.NAME]` (only a file sets them).
    pub roles: BTreeMap<String, RoleRunner>,
    /// `[fleet]` (only a file sets it).
    pub fleet: Option<fleet::FleetLayer>,
}

impl Layer {
    /// This layer's values where it has them, else `lower`'s.
    pub fn or(self, lower: Layer) -> Layer {
        let mut providers = lower.providers;
        providers.extend(self.providers);
        let mut jails = lower.jails;
        jails.extend(self.jails);
        let mut agents = lower.agents;
        agents.extend(self.agents);
        let mut resume = lower.resume;
        resume.extend(self.resume);
        let mut hostops = lower.hostops;
        hostops.extend(self.hostops);
        let mut roles = lower.roles;
        roles.extend(self.roles);
        Layer {
            daemon: self.daemon.or(lower.daemon),
            syslog: self.syslog.or(lower.syslog),
            sessions: self.sessions.or(lower.sessions),
            restart: self.restart.or(lower.restart),
            approvals: self.approvals.or(lower.approvals),
            orchestrator: self.orchestrator.or(lower.orchestrator),
            providers,
            jails,
            agents,
            resume,
            governance: self.governance.or(lower.governance),
            hostops,
            roles,
            fleet: self.fleet.or(lower.fleet),
        }
    }

    /// The layer over the defaults; `source` is the file it came from.
    pub fn resolve(self, source: Option<PathBuf>) -> Result<Config, ConfigError> {
        let mut providers = default_providers();
        providers.extend(self.providers);
        let mut resume = default_resume();
        resume.extend(
            self.resume
                .into_iter()
                .map(|(runtime, argv)| (runtime, ResumeRecipe { argv })),
        );
        let (agents, mut errors) =
            agents::resolve_agents(self.agents, &providers, &resume, source.as_ref());
        let daemon = self.daemon.resolve();
        let fleet = match self.fleet.map(|f| f.resolve(&daemon.host)) {
            None => None,
            Some(Ok(f)) => Some(f),
            Some(Err((key, msg))) => {
                errors.push(ConfigError::Invalid {
                    path: source.clone(),
                    line: None,
                    key,
                    msg,
                });
                None
            }
        };
        let config = Config {
            source,
            daemon,
            syslog: self.syslog.resolve(),
            sessions: self.sessions.resolve(),
            restart: self.restart.resolve(),
            approvals: self.approvals.resolve(),
            orchestrator: self.orchestrator.resolve(),
            providers,
            jails: self.jails,
            resume,
            agents,
            hostops: self.hostops,
            roles: self.roles,
            fleet,
            governance: self.governance.unwrap_or_default(),
        };
        errors.extend(check_listeners(&config));
        match ConfigError::from_list(errors) {
            Some(errors) => Err(errors),
            None => Ok(config),
        }
    }
}

/// Why the configuration could not be loaded. Display is one line per error
/// that starts with `file:line:` whenever a file is involved.
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
    /// More than one invalid value, in file order.
    #[error("{}", lines(.0))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// Each single error, in order.
    pub fn each(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Several(all) => all.iter().flat_map(ConfigError::each).collect(),
            one => vec![one],
        }
    }

    /// One error for a list that is not empty.
    fn from_list(mut list: Vec<ConfigError>) -> Option<ConfigError> {
        match list.len() {
            0 => None,
            1 => list.pop(),
            _ => Some(ConfigError::Several(list)),
        }
    }
}

fn lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
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
    let path = config_path(args);
    let file = match &path {
        Some(path) => load_file(path)?,
        None => Layer::default(),
    };
    args.layer().or(file).resolve(path)
}

/// Two listeners on one path would make the second bind fail or, worse,
/// hand a jail the operator socket.
fn check_listeners(config: &Config) -> Vec<ConfigError> {
    let mut seen: BTreeMap<&Path, &str> = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, listener) in &config.jails {
        let clash = if listener.socket == config.daemon.socket {
            Some("the operator socket".to_owned())
        } else {
            seen.get(listener.socket.as_path())
                .map(|other| format!("the socket of jail {other:?}"))
        };
        if let Some(clash) = clash {
            errors.push(ConfigError::Invalid {
                path: config.source.clone(),
                line: None,
                key: format!("jails.{name}.socket"),
                msg: format!("{} is also {clash}", listener.socket.display()),
            });
        }
        seen.insert(&listener.socket, name);
    }
    errors
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

// ---------------------------------------------------------------------------
// Values: one check per kind, shared by the file, the flags and requests.

/// Parses a humantime duration (`90s`, `10m`, `1h 30m`), at most
/// [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))?;
    check_duration(d).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// A duration that drives a periodic timer must not be zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    check_positive_duration(d).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// The one check of a duration however it was written.
pub fn check_duration(d: Duration) -> Result<Duration, String> {
    if d > MAX_DURATION {
        Err(format!(
            "must be at most {}",
            humantime::format_duration(MAX_DURATION)
        ))
    } else {
        Ok(d)
    }
}

/// [`check_duration`], and not zero.
pub fn check_positive_duration(d: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    check_duration(d)
}

/// A stall threshold, from `[daemon] stall_after`, `--stall-after` or a
/// `spawn-agent` request: zero would call every pane stalled at once.
pub fn check_stall_after(d: Duration) -> Result<Duration, String> {
    check_positive_duration(d)
}

/// Parses a stall threshold written as a duration (file and flag).
pub fn parse_stall_after(text: &str) -> Result<Duration, String> {
    check_stall_after(parse_duration(text)?).map_err(|e| format!("invalid duration {text:?}: {e}"))
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

fn positive_usize(value: u64) -> Result<usize, String> {
    usize::try_from(value)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| format!("{value} is out of range (must be at least 1)"))
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

/// A PATH for agents: absolute directories separated by `:`.
fn check_agent_path(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    match value.split(':').find(|dir| !dir.starts_with('/')) {
        Some(dir) => Err(format!(
            "{dir:?} is not an absolute directory (a relative PATH entry runs whatever the agent's working directory holds)"
        )),
        None => Ok(value.to_owned()),
    }
}

fn system_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

// ---------------------------------------------------------------------------
// Reload

/// Keys a running colibrid takes over on SIGHUP (`Daemon::reload` and the
/// binary's reloader apply exactly these); a whole section when the name
/// ends with a dot. Every other key needs a restart. `agents.NAME` keys are
/// applied by reconciling ([`crate::core::reconcile::plan`]): the agent
/// starts, stops, restarts or takes its new policy, as `supervisorctl
/// update` does; `resume.` templates are read at the next resume;
/// `hostops.` apply to the next request (a run keeps what it started with);
/// `roles.` to the next agent a runner starts.
pub const RELOADABLE_KEYS: [&str; 13] = [
    "daemon.stall_after",
    "daemon.heartbeat",
    "daemon.shutdown_grace",
    "daemon.retain_finished",
    "daemon.log_level",
    "syslog.",
    "restart.",
    "providers.",
    "agents.",
    "resume.",
    "hostops.",
    "orchestrator.",
    "roles.",
];

/// What a reload does with what changed in the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Changed keys the running daemon takes over now.
    pub applied: Vec<String>,
    /// Keys whose new value differs from what the daemon started with and
    /// that only a restart puts into effect.
    pub restart_needed: Vec<String>,
}

impl ReloadPlan {
    /// The declared agents among the applied keys (`agents.NAME`): the
    /// names whose tables were added, removed or changed, which the daemon
    /// reconciles.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.applied
            .iter()
            .filter_map(|key| key.strip_prefix("agents."))
    }
}

/// Compares a newly loaded configuration with the one loaded before
/// (`previous`, whose reloadable keys are in effect) and the one the daemon
/// started with (`started`, whose other keys are in effect).
pub fn plan(started: &Config, previous: &Config, new: &Config) -> ReloadPlan {
    ReloadPlan {
        applied: changed_keys(previous, new)
            .into_iter()
            .filter(|key| is_reloadable(key))
            .collect(),
        restart_needed: changed_keys(started, new)
            .into_iter()
            .filter(|key| !is_reloadable(key))
            .collect(),
    }
}

/// Whether SIGHUP applies a dotted key (`daemon.stall_after`).
pub fn is_reloadable(key: &str) -> bool {
    RELOADABLE_KEYS.iter().any(|k| match k.strip_suffix('.') {
        Some(section) => key
            .strip_prefix(section)
            .is_some_and(|rest| rest.starts_with('.')),
        None => key == *k,
    })
}

/// The dotted keys (`daemon.socket`, `providers.NAME`) whose values differ,
/// sorted, compared through the same serialization `--check-config` prints.
pub fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    let (a, b) = (render::keyed(a), render::keyed(b));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|key| a.get(*key) != b.get(*key))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests;
