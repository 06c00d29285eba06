//! `colibrid --check-config`: the effective configuration as TOML. The
//! output is itself a valid config file that loads back to the same values.
//! The same serialization lets [`super::changed_keys`] compare two
//! configurations key by key.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serializer;

use super::{Config, LogLevel};
use crate::core::policy::{BudgetRule, Period, Scope, OUTPUT_BUDGET};
use crate::syslog::{facility_name, Facility, Severity};

/// The effective configuration as TOML, headed by the file it came from.
pub fn render_effective(config: &Config) -> String {
    let mut out = String::new();
    let source = config
        .source
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "none".to_owned());
    let _ = writeln!(out, "# colibrid effective configuration (file: {source})");
    match toml::to_string(config) {
        Ok(text) => out.push_str(&text),
        Err(e) => {
            let _ = writeln!(out, "# cannot render the configuration: {e}");
        }
    }
    render_budgets(&config.governance.budgets, &mut out);
    out
}

/// The budgets in force as `[budgets.NAME]` sections (the default
/// `output` budget included), so `--check-config` shows what pauses agents.
fn render_budgets(budgets: &[BudgetRule], out: &mut String) {
    for b in budgets {
        let mut table = toml::map::Map::new();
        // A whole cap as an integer: `bytes = 1073741824`, not `….0`.
        let cap = if b.cap.fract() == 0.0 && b.cap.abs() < 9.0e15 {
            toml::Value::Integer(b.cap as i64)
        } else {
            toml::Value::Float(b.cap)
        };
        table.insert(b.unit.as_str().into(), cap);
        match b.period {
            Period::Window(w) => table.insert("window".into(), duration_text(w).into()),
            Period::Day => table.insert("daily".into(), true.into()),
        };
        let scope = match &b.scope {
            Scope::Pane => "pane".to_string(),
            Scope::Global => "global".to_string(),
            Scope::Name(n) => format!("name:{n}"),
            Scope::Role(r) => format!("role:{r}"),
            Scope::Runtime(r) => format!("runtime:{r}"),
        };
        table.insert("scope".into(), scope.into());
        table.insert("warn_at".into(), toml::Value::Float(b.warn_at));
        let mut budgets = toml::map::Map::new();
        budgets.insert(b.name.clone(), toml::Value::Table(table));
        let mut root = toml::map::Map::new();
        root.insert("budgets".into(), toml::Value::Table(budgets));
        if let Ok(text) = toml::to_string(&toml::Value::Table(root)) {
            let _ = write!(out, "\n{text}");
        }
    }
    // Absent, the default output budget would apply again when the text
    // is loaded back.
    if !budgets.iter().any(|b| b.name == OUTPUT_BUDGET) {
        let _ = write!(out, "\n[budgets.{OUTPUT_BUDGET}]\nenabled = false\n");
    }
}

/// Every `section.key` (for maps, `providers.NAME`) and its rendered value.
pub(super) fn keyed(config: &Config) -> BTreeMap<String, toml::Value> {
    let mut keys = BTreeMap::new();
    let Ok(toml::Value::Table(sections)) = toml::Value::try_from(config) else {
        return keys;
    };
    for (section, value) in sections {
        match value {
            toml::Value::Table(table) => {
                for (key, value) in table {
                    keys.insert(format!("{section}.{key}"), value);
                }
            }
            other => {
                keys.insert(section, other);
            }
        }
    }
    keys
}

pub(super) fn duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&duration_text(*d))
}

/// A duration as a config file would give it: whole days as days (`90d`,
/// where humantime says "2months 29days 2h 52m 48s"), else humantime's.
fn duration_text(d: Duration) -> String {
    const DAY: u64 = 86_400;
    let secs = d.as_secs();
    if secs > 0 && secs % DAY == 0 && d.subsec_nanos() == 0 {
        return format!("{}d", secs / DAY);
    }
    humantime::format_duration(d).to_string()
}

pub(super) fn durations<S: Serializer>(list: &[Duration], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(list.iter().map(|d| duration_text(*d)))
}

pub(super) fn mode<S: Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}

pub(super) fn log_level<S: Serializer>(level: &LogLevel, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(level.name())
}

pub(super) fn facility<S: Serializer>(facility: &Facility, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(facility_name(*facility))
}

pub(super) fn severity<S: Serializer>(level: &Severity, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(level.name())
}
