//! Short, human-readable forms of tool calls.
//!
//! The pane keeps the last tool call an agent made so an operator can see
//! what a blocked or stalled agent was doing. Arguments can be megabytes
//! (a whole file for `write`), so only a short summary is kept: the shell
//! command, else the path, else a truncated compact JSON.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The longest summary kept, in characters.
pub const SUMMARY_CHARS: usize = 160;

#[derive(Deserialize, Default)]
struct CommonArgs<'a> {
    #[serde(borrow, default)]
    command: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    file_path: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    path: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    pattern: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    query: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    url: Option<std::borrow::Cow<'a, str>>,
}

/// Summarises a tool's arguments (a JSON object, usually).
pub fn summarize_args(args: &RawValue) -> String {
    let raw = args.get();
    if let Ok(common) = serde_json::from_str::<CommonArgs<'_>>(raw) {
        let pick = common
            .command
            .or(common.file_path)
            .or(common.path)
            .or(common.pattern)
            .or(common.query)
            .or(common.url);
        if let Some(s) = pick {
            return truncate(&s);
        }
    }
    truncate(raw)
}

/// Summarises a shell command given as one string, unwrapping the
/// `bash -lc '…'` wrapper Codex puts around every command.
pub fn summarize_command(command: &str) -> String {
    truncate(unwrap_shell(command))
}

fn unwrap_shell(command: &str) -> &str {
    for prefix in [
        "bash -lc ",
        "bash -c ",
        "sh -c ",
        "/bin/bash -lc ",
        "/bin/sh -c ",
        "zsh -lc ",
    ] {
        if let Some(rest) = command.strip_prefix(prefix) {
            let rest = rest.trim();
            for q in ['\'', '"'] {
                if rest.len() >= 2 && rest.starts_with(q) && rest.ends_with(q) {
                    return &rest[1..rest.len() - 1];
                }
            }
            return rest;
        }
    }
    command
}

/// Collapses white space and cuts to [`SUMMARY_CHARS`] characters.
pub fn truncate(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(SUMMARY_CHARS + 3));
    let mut count = 0;
    let mut last_space = false;
    for ch in s.chars() {
        let ch = if ch.is_whitespace() { ' ' } else { ch };
        if ch == ' ' && last_space {
            continue;
        }
        last_space = ch == ' ';
        if count == SUMMARY_CHARS {
            out.push('…');
            return out;
        }
        out.push(ch);
        count += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).expect("valid json")
    }

    #[test]
    fn prefers_command_then_path() {
        assert_eq!(
            summarize_args(&raw(r#"{"command":"make  test","timeout":5}"#)),
            "make test"
        );
        assert_eq!(
            summarize_args(&raw(r#"{"file_path":"/a/b.rs","content":"x"}"#)),
            "/a/b.rs"
        );
        assert_eq!(summarize_args(&raw(r#"{"x":1}"#)), r#"{"x":1}"#);
    }

    #[test]
    fn unwraps_codex_shell_and_truncates() {
        assert_eq!(
            summarize_command("bash -lc 'rm -rf node_modules && npm ci'"),
            "rm -rf node_modules && npm ci"
        );
        let long = "y".repeat(500);
        let s = truncate(&long);
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
    }
}
