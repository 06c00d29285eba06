//! `[[notify]]` sinks of colibri.toml, read by `colibri notify` (colibrid
//! only notes that some exist, to supervise that process).
//!
//! ```toml
//! [[notify]]
//! kind = "webhook"                 # or "exec", "ntfy"
//! url = "https://example.org/hook"
//! states = ["blocked", "error"]    # default ["blocked"]
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The pane colibrid runs `colibri notify` in; its own events never notify.
pub const NOTIFY_PANE: &str = "colibri-notify";
pub const DEFAULT_STATES: &[&str] = &["blocked"];
pub const DEFAULT_DEDUPE: Duration = Duration::from_secs(600);
pub const DEFAULT_RATE_PER_MINUTE: u32 = 10;
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_EXEC_CONCURRENCY: usize = 4;
pub const DEFAULT_NTFY_PRIORITY: u8 = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkKind {
    /// argv; the event goes on stdin and into `COLIBRI_*` variables.
    Exec {
        command: Vec<String>,
        timeout: Duration,
        concurrency: usize,
    },
    Webhook {
        url: String,
    },
    Ntfy {
        url: String,
        priority: u8,
        /// The board the approve/deny buttons call (`<board>/act?…`,
        /// signed: `web::action`).
        board_url: Option<String>,
        /// The key that signs them, shared with `colibri web`.
        action_key: PathBuf,
        /// How long a button may be used.
        action_ttl: Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sink {
    /// `notify[N]` or the `name` key: for messages.
    pub label: String,
    pub kind: SinkKind,
    /// Event names (`stalled`, `exited`, `restarts_exhausted`), states
    /// entered (`blocked`, `error`, `idle`, ...) and policies whose
    /// verdicts notify (`guard`, `loop`, `budget`, or `verdict` for all).
    pub states: Vec<String>,
    /// Approval events (`approval_*`) notify too.
    pub approvals: bool,
    /// Only panes of these runtimes / with these names; all when empty.
    pub runtimes: Vec<String>,
    pub names: Vec<String>,
    /// The same pane, event and reason again within this window is dropped.
    pub dedupe: Duration,
    /// Deliveries per minute at most; the rest are dropped and counted.
    pub rate_per_minute: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFileNotify {
    #[serde(default)]
    notify: Vec<RawSink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    concurrency: Option<usize>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    board_url: Option<String>,
    #[serde(default)]
    action_key: Option<PathBuf>,
    #[serde(default)]
    action_ttl: Option<String>,
    #[serde(default)]
    states: Option<Vec<String>>,
    #[serde(default)]
    approvals: Option<bool>,
    #[serde(default)]
    runtimes: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    dedupe: Option<String>,
    #[serde(default)]
    rate_per_minute: Option<u32>,
}

/// The `[[notify]]` entries of a whole colibri.toml (other tables are
/// ignored here: colibrid checks them).
pub fn parse_sinks(text: &str) -> Result<Vec<Sink>, String> {
    let value: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let Some(notify) = value.get("notify") else {
        return Ok(Vec::new());
    };
    let mut only = toml::Table::new();
    only.insert("notify".into(), notify.clone());
    let raw: RawFileNotify = only
        .try_into()
        .map_err(|e: toml::de::Error| format!("notify: {e}"))?;
    raw.notify
        .into_iter()
        .enumerate()
        .map(|(i, r)| sink(i, r))
        .collect()
}

pub fn load_sinks(path: &Path) -> Result<Vec<Sink>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_sinks(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn duration(key: &str, v: Option<String>, default: Duration) -> Result<Duration, String> {
    match v {
        None => Ok(default),
        Some(s) => humantime::parse_duration(&s).map_err(|e| format!("{key}: {e}: {s:?}")),
    }
}

fn sink(i: usize, r: RawSink) -> Result<Sink, String> {
    let label = r.name.clone().unwrap_or_else(|| format!("notify[{i}]"));
    let need_url = |what: &str| {
        r.url
            .clone()
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .ok_or_else(|| format!("{label}: a {what} sink needs an http(s) url"))
    };
    let kind = match r.kind.as_str() {
        "exec" => {
            let command = r
                .command
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| format!("{label}: an exec sink needs command = [..]"))?;
            SinkKind::Exec {
                command,
                timeout: duration(
                    &format!("{label}.timeout"),
                    r.timeout.clone(),
                    DEFAULT_EXEC_TIMEOUT,
                )?,
                concurrency: r.concurrency.unwrap_or(DEFAULT_EXEC_CONCURRENCY).max(1),
            }
        }
        "webhook" => SinkKind::Webhook {
            url: need_url("webhook")?,
        },
        "ntfy" => SinkKind::Ntfy {
            url: need_url("ntfy")?,
            priority: r.priority.unwrap_or(DEFAULT_NTFY_PRIORITY).clamp(1, 5),
            board_url: r.board_url.clone(),
            action_key: r.action_key.clone().unwrap_or_else(super::action_key_path),
            action_ttl: duration(
                &format!("{label}.action_ttl"),
                r.action_ttl.clone(),
                super::DEFAULT_ACTION_TTL,
            )?,
        },
        other => {
            return Err(format!(
                "{label}: kind {other:?} is not one of exec, webhook, ntfy"
            ))
        }
    };
    Ok(Sink {
        kind,
        states: r
            .states
            .unwrap_or_else(|| DEFAULT_STATES.iter().map(|s| s.to_string()).collect()),
        approvals: r.approvals.unwrap_or(true),
        runtimes: r.runtimes,
        names: r.names,
        dedupe: duration(&format!("{label}.dedupe"), r.dedupe, DEFAULT_DEDUPE)?,
        rate_per_minute: r.rate_per_minute.unwrap_or(DEFAULT_RATE_PER_MINUTE),
        label,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_parse_with_their_defaults() {
        let sinks = parse_sinks(
            r#"
            [daemon]
            stall_after = "5m"
            [[notify]]
            kind = "webhook"
            url = "http://127.0.0.1:9/hook"
            [[notify]]
            kind = "exec"
            command = ["/bin/sh", "-c", "cat"]
            timeout = "2s"
            names = ["fixer"]
            [[notify]]
            kind = "ntfy"
            url = "https://ntfy.sh/my-agents"
            board_url = "https://board.example"
            priority = 9
            "#,
        )
        .expect("valid");
        assert_eq!(sinks.len(), 3);
        assert_eq!(sinks[0].states, vec!["blocked".to_string()]);
        assert_eq!(sinks[0].dedupe, DEFAULT_DEDUPE);
        assert!(
            matches!(&sinks[1].kind, SinkKind::Exec { timeout, .. } if *timeout == Duration::from_secs(2))
        );
        assert_eq!(sinks[1].names, vec!["fixer".to_string()]);
        assert!(matches!(&sinks[2].kind, SinkKind::Ntfy { priority: 5, .. }));
    }

    #[test]
    fn a_bad_sink_is_named_in_the_error() {
        let e = parse_sinks("[[notify]]\nkind = \"webhook\"\nurl = \"ftp://x\"\n").unwrap_err();
        assert!(e.contains("notify[0]") && e.contains("http"), "{e}");
        let e = parse_sinks("[[notify]]\nkind = \"mail\"\n").unwrap_err();
        assert!(e.contains("mail"), "{e}");
        let e =
            parse_sinks("[[notify]]\nkind = \"exec\"\ncommand = [\"x\"]\nwhat = 1\n").unwrap_err();
        assert!(e.contains("what"), "{e}");
    }

    #[test]
    fn no_notify_table_means_no_sinks() {
        assert_eq!(parse_sinks("[daemon]\n").expect("valid"), Vec::new());
    }
}
