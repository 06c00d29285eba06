//! The config file: read, parsed with spans, and validated into a [`Layer`].
//!
//! serde checks the shape (unknown keys and wrong types stop the parse at
//! the first); [`Validator`] then checks every value serde cannot and
//! collects every error, each naming the file, the line and the key.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::agents::{RawAgent, RawResume};
use super::governance::{RawBudget, RawGovernance, RawGuard, RawLoops, RawPrice};
use super::hostops::RawHostOp;
use super::roles::RawRole;
use super::{
    check_agent_path, check_jail_name, default_jail_socket, parse_duration, parse_mode,
    parse_positive_duration, parse_stall_after, positive_usize, ApprovalsLayer, ConfigError,
    DaemonLayer, JailListener, Layer, OrchestratorLayer, Provider, RestartLayer, SessionsLayer,
    SyslogLayer,
};
use crate::syslog::{parse_facility, unknown_facility, Severity};

/// Reads and validates one config file.
pub fn load_file(path: &Path) -> Result<Layer, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_file(path, &text)
}

/// Parses config text; `path` only labels errors.
pub fn parse_file(path: &Path, text: &str) -> Result<Layer, ConfigError> {
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
    let mut validator = Validator {
        path,
        text,
        errors: Vec::new(),
    };
    let layer = validator.file(raw);
    // Sections are checked one after another; report in the file's order.
    validator.errors.sort_by_key(|e| match e {
        ConfigError::Invalid { line, .. } => *line,
        _ => None,
    });
    match ConfigError::from_list(validator.errors) {
        Some(errors) => Err(errors),
        None => Ok(layer),
    }
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
    approvals: RawApprovals,
    #[serde(default)]
    orchestrator: RawOrchestrator,
    #[serde(default)]
    providers: BTreeMap<String, Spanned<RawProvider>>,
    #[serde(default)]
    jails: BTreeMap<String, Spanned<RawJail>>,
    #[serde(default)]
    agents: BTreeMap<String, Spanned<RawAgent>>,
    #[serde(default)]
    resume: BTreeMap<String, Spanned<RawResume>>,
    #[serde(default)]
    hostops: BTreeMap<String, Spanned<RawHostOp>>,
    #[serde(default)]
    roles: BTreeMap<String, Spanned<RawRole>>,
    fleet: Option<Spanned<super::fleet::RawFleet>>,
    /// `[[notify]]` sinks: read and checked by `colibri notify`
    /// (`config/notify.rs`); colibrid only passes the file on.
    #[serde(default, rename = "notify")]
    _notify: Option<serde::de::IgnoredAny>,
    loops: Option<RawLoops>,
    guard: Option<RawGuard>,
    #[serde(default)]
    budgets: BTreeMap<String, Spanned<RawBudget>>,
    #[serde(default)]
    prices: BTreeMap<String, Spanned<RawPrice>>,
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
    retain_finished: Option<Spanned<String>>,
    max_line: Option<Spanned<u64>>,
    max_request: Option<Spanned<u64>>,
    max_connections: Option<Spanned<u64>>,
    max_connections_per_peer: Option<Spanned<u64>>,
    idle_timeout: Option<Spanned<String>>,
    log_level: Option<Spanned<String>>,
    agent_path: Option<Spanned<String>>,
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
    retain: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawRestart {
    backoff: Option<Vec<Spanned<String>>>,
    max_restarts: Option<Spanned<u64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawApprovals {
    escalate_after: Option<Spanned<String>>,
    default_answer: Option<Spanned<String>>,
    default_after: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawOrchestrator {
    dispatch: Option<Spanned<bool>>,
    escalate: Option<Spanned<bool>>,
    grace: Option<Spanned<String>>,
    plan_file: Option<Spanned<String>>,
    project: Option<Spanned<String>>,
    ack_timeout: Option<Spanned<String>>,
    retry_after: Option<Spanned<String>>,
    prompt: Option<Spanned<String>>,
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

/// Checks the values serde cannot, and keeps every failure, each naming
/// file, line and key.
pub(super) struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn file(&mut self, raw: RawFile) -> Layer {
        let providers = self.providers(raw.providers);
        let governance = self.governance(RawGovernance {
            loops: raw.loops,
            guard: raw.guard,
            budgets: raw.budgets,
            prices: raw.prices,
        });
        Layer {
            governance: Some(governance),
            daemon: self.daemon(raw.daemon),
            syslog: self.syslog(raw.syslog),
            sessions: self.sessions(raw.sessions),
            restart: self.restart(raw.restart),
            approvals: self.approvals(raw.approvals),
            orchestrator: self.orchestrator(raw.orchestrator),
            agents: self.agents(raw.agents, &providers),
            roles: self.roles(raw.roles, &providers),
            resume: self.resume(raw.resume),
            providers,
            jails: self.jails(raw.jails),
            hostops: self.hostops(raw.hostops),
            fleet: self.fleet(raw.fleet),
        }
    }

    fn daemon(&mut self, d: RawDaemon) -> DaemonLayer {
        let socket_mode = d.socket_mode.and_then(|v| {
            // A bare `socket_mode = 660` is decimal 660 to TOML: a silent
            // wrong mode. Integers must be written in octal.
            let written = self.text.get(v.span()).unwrap_or("").trim().to_string();
            self.one(v, "daemon.socket_mode", |v| match v {
                RawMode::Text(text) => parse_mode(&text),
                RawMode::Number(_) if !written.starts_with("0o") => Err(format!(
                    "invalid mode {written}: write it in octal, as \"0660\" or 0o660"
                )),
                RawMode::Number(n) => u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= 0o777)
                    .ok_or_else(|| format!("invalid mode {n:#o}: must be at most 0777")),
            })
        });
        DaemonLayer {
            socket: self.opt(d.socket, "daemon.socket", path_value),
            socket_mode,
            socket_group: self
                .opt(d.socket_group, "daemon.socket_group", non_empty)
                .map(Some),
            state_dir: self.opt(d.state_dir, "daemon.state_dir", path_value),
            host: self.opt(d.host, "daemon.host", non_empty),
            stall_after: self.opt(d.stall_after, "daemon.stall_after", |v| {
                parse_stall_after(&v)
            }),
            heartbeat: self.opt(d.heartbeat, "daemon.heartbeat", |v| {
                parse_positive_duration(&v)
            }),
            shutdown_grace: self.opt(d.shutdown_grace, "daemon.shutdown_grace", |v| {
                parse_duration(&v)
            }),
            retain_finished: self.opt(d.retain_finished, "daemon.retain_finished", |v| {
                parse_duration(&v)
            }),
            max_line: self.opt(d.max_line, "daemon.max_line", positive_usize),
            max_request: self.opt(d.max_request, "daemon.max_request", positive_usize),
            max_connections: self.opt(d.max_connections, "daemon.max_connections", positive_usize),
            max_connections_per_peer: self.opt(
                d.max_connections_per_peer,
                "daemon.max_connections_per_peer",
                positive_usize,
            ),
            idle_timeout: self.opt(d.idle_timeout, "daemon.idle_timeout", |v| {
                parse_positive_duration(&v)
            }),
            log_level: self.opt(d.log_level, "daemon.log_level", |v| v.parse()),
            agent_path: self.opt(d.agent_path, "daemon.agent_path", |v| check_agent_path(&v)),
        }
    }

    fn syslog(&mut self, s: RawSyslog) -> SyslogLayer {
        SyslogLayer {
            enabled: s.enabled,
            socket: self.opt(s.socket, "syslog.socket", path_value).map(Some),
            facility: self.opt(s.facility, "syslog.facility", |v| {
                parse_facility(&v).ok_or_else(|| unknown_facility(&v))
            }),
            min_level: self.opt(s.level, "syslog.level", |v| {
                v.parse::<Severity>().map_err(|e| e.to_string())
            }),
            rate_burst: self.opt(s.rate_burst, "syslog.rate_burst", |v| {
                u32::try_from(v).ok().filter(|v| *v >= 1).ok_or_else(|| {
                    format!("{v} is out of range (1..=4294967295; use enabled = false)")
                })
            }),
            rate_window: self.opt(s.rate_window, "syslog.rate_window", |v| parse_duration(&v)),
        }
    }

    fn sessions(&mut self, s: RawSessions) -> SessionsLayer {
        SessionsLayer {
            rotate_bytes: s.rotate_bytes,
            rotate_turns: s.rotate_turns,
            flush_budget: self.opt(s.flush_budget, "sessions.flush_budget", positive_usize),
            buffer_limit: self.opt(s.buffer_limit, "sessions.buffer_limit", positive_usize),
            retain: self.opt(s.retain, "sessions.retain", |v| parse_duration(&v)),
        }
    }

    fn restart(&mut self, r: RawRestart) -> RestartLayer {
        let backoff = r.backoff.map(|items| {
            items
                .into_iter()
                .filter_map(|item| self.one(item, "restart.backoff", |v| parse_duration(&v)))
                .collect()
        });
        RestartLayer {
            backoff,
            max_restarts: self.opt(r.max_restarts, "restart.max_restarts", |v| {
                u32::try_from(v).map_err(|_| format!("{v} is out of range (0..=4294967295)"))
            }),
        }
    }

    fn approvals(&mut self, a: RawApprovals) -> ApprovalsLayer {
        ApprovalsLayer {
            escalate_after: self.opt(a.escalate_after, "approvals.escalate_after", |v| {
                parse_duration(&v)
            }),
            default_answer: self.opt(a.default_answer, "approvals.default_answer", |v| {
                match v.as_str() {
                    "deny" | "none" => Ok(v),
                    _ => Err(format!("{v:?} is not deny or none")),
                }
            }),
            default_after: self.opt(a.default_after, "approvals.default_after", |v| {
                parse_duration(&v)
            }),
        }
    }

    fn orchestrator(&mut self, o: RawOrchestrator) -> OrchestratorLayer {
        OrchestratorLayer {
            dispatch: self.opt(o.dispatch, "orchestrator.dispatch", Ok),
            escalate: self.opt(o.escalate, "orchestrator.escalate", Ok),
            grace: self.opt(o.grace, "orchestrator.grace", |v| parse_duration(&v)),
            plan_file: self.opt(o.plan_file, "orchestrator.plan_file", absolute_path),
            project: self.opt(o.project, "orchestrator.project", absolute_path),
            ack_timeout: self.opt(o.ack_timeout, "orchestrator.ack_timeout", |v| {
                parse_positive_duration(&v)
            }),
            retry_after: self.opt(o.retry_after, "orchestrator.retry_after", |v| {
                parse_duration(&v)
            }),
            prompt: self.opt(o.prompt, "orchestrator.prompt", |v| {
                crate::core::heartbeat::check_prompt(&v)
                    .map(|()| v)
                    .map_err(|e| format!("the dispatch prompt {e}"))
            }),
        }
    }

    fn providers(
        &mut self,
        raw: BTreeMap<String, Spanned<RawProvider>>,
    ) -> BTreeMap<String, Provider> {
        let mut providers = BTreeMap::new();
        for (name, provider) in raw {
            let span = provider.span();
            let key = format!("providers.{name}");
            if name.is_empty() {
                self.invalid(span, &key, "a provider needs a name".to_owned());
                continue;
            }
            let argv = self.one(provider.into_inner().argv, &format!("{key}.argv"), |argv| {
                if argv.first().is_some_and(|program| !program.is_empty()) {
                    Ok(argv)
                } else {
                    Err("must start with a program name".to_owned())
                }
            });
            if let Some(argv) = argv {
                providers.insert(name, Provider { argv });
            }
        }
        providers
    }

    fn jails(&mut self, raw: BTreeMap<String, Spanned<RawJail>>) -> BTreeMap<String, JailListener> {
        let mut jails = BTreeMap::new();
        for (name, jail) in raw {
            let span = jail.span();
            let key = format!("jails.{name}");
            if let Err(msg) = check_jail_name(&name) {
                self.invalid(span, &key, msg);
                continue;
            }
            let socket = match jail.into_inner().socket {
                Some(socket) => self.one(socket, &format!("{key}.socket"), path_value),
                None => Some(default_jail_socket(&name)),
            };
            if let Some(socket) = socket {
                jails.insert(name, JailListener { socket });
            }
        }
        jails
    }

    /// The checked value, or `None` when absent or invalid (then recorded).
    pub(super) fn opt<T, U>(
        &mut self,
        value: Option<Spanned<T>>,
        key: &str,
        check: impl FnOnce(T) -> Result<U, String>,
    ) -> Option<U> {
        value.and_then(|value| self.one(value, key, check))
    }

    pub(super) fn one<T, U>(
        &mut self,
        value: Spanned<T>,
        key: &str,
        check: impl FnOnce(T) -> Result<U, String>,
    ) -> Option<U> {
        let span = value.span();
        match check(value.into_inner()) {
            Ok(value) => Some(value),
            Err(msg) => {
                self.invalid(span, key, msg);
                None
            }
        }
    }

    pub(super) fn invalid(&mut self, span: Range<usize>, key: &str, msg: String) {
        self.errors.push(ConfigError::Invalid {
            path: Some(self.path.to_path_buf()),
            line: Some(self.line_of(span.start)),
            key: key.to_owned(),
            msg,
        });
    }

    /// The 1-based line of a byte offset of the file.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        line_column(self.text, offset).0
    }

    pub(super) fn error_count(&self) -> usize {
        self.errors.len()
    }
}

fn path_value(value: String) -> Result<PathBuf, String> {
    if value.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(PathBuf::from(value))
    }
}

fn non_empty(value: String) -> Result<String, String> {
    if value.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(value)
    }
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

/// An absolute path, as `Some` for an optional setting.
fn absolute_path(v: String) -> Result<Option<PathBuf>, String> {
    let path = PathBuf::from(v);
    if path.is_absolute() {
        Ok(Some(path))
    } else {
        Err(format!("{} is not an absolute path", path.display()))
    }
}
