//! `[budgets.NAME]`, `[loops]`, `[guard]` and `[prices.MODEL]`: the policy
//! engine's settings (`core::policy`), read from the config file.
//!
//! The guard, loop detection and the `output` budget are on without any of
//! these sections, with thresholds no normal run trips; other budgets
//! apply only once configured.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::Validator;
use super::parse_positive_duration;
use crate::core::policy::{
    BudgetRule, GuardResponse, GuardRule, LoopSettings, Period, Policies, Price, Scope, ScopeMode,
    ScopeSettings, Unit, OUTPUT_BUDGET,
};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawLoops {
    enabled: Option<bool>,
    action_repeat: Option<u32>,
    error_repeat: Option<u32>,
    burn_messages: Option<u32>,
    burn_tokens: Option<u64>,
    thrash_alternations: Option<u32>,
    productive_reset: Option<u32>,
    backoff: Option<Spanned<Vec<String>>>,
    message: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawGuard {
    enabled: Option<bool>,
    response: Option<Spanned<String>>,
    disable: Option<Spanned<Vec<String>>>,
    /// The scope rule: `pause` (warn, then pause), `warn` or `off`.
    scope: Option<Spanned<String>>,
    scope_pause_after: Option<Spanned<u64>>,
    scope_paths: Option<Spanned<Vec<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawBudget {
    /// `false` turns the budget off (the default `output` budget too).
    enabled: Option<bool>,
    #[serde(default)]
    scope: Option<Spanned<String>>,
    tokens: Option<Spanned<f64>>,
    usd: Option<Spanned<f64>>,
    bytes: Option<Spanned<f64>>,
    window: Option<Spanned<String>>,
    #[serde(default)]
    daily: bool,
    warn_at: Option<Spanned<f64>>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawPrice {
    #[serde(default)]
    input: f64,
    #[serde(default)]
    output: f64,
    #[serde(default)]
    cache_read: f64,
    #[serde(default)]
    cache_write: f64,
}

/// The governance sections as the file gave them.
#[derive(Default)]
pub(super) struct RawGovernance {
    pub loops: Option<RawLoops>,
    pub guard: Option<RawGuard>,
    pub budgets: BTreeMap<String, Spanned<RawBudget>>,
    pub prices: BTreeMap<String, Spanned<RawPrice>>,
}

impl Validator<'_> {
    pub(super) fn governance(&mut self, raw: RawGovernance) -> Policies {
        let mut budgets = Vec::new();
        if !raw.budgets.contains_key(OUTPUT_BUDGET) {
            budgets.push(BudgetRule::output());
        }
        budgets.extend(
            raw.budgets
                .into_iter()
                .filter_map(|(name, b)| self.budget(name, b)),
        );
        Policies {
            loops: raw.loops.map(|l| self.loops(l)).unwrap_or_default(),
            guard: raw.guard.map(|g| self.guard(g)).unwrap_or_default(),
            budgets,
            prices: raw
                .prices
                .into_iter()
                .filter_map(|(name, p)| {
                    let span = p.span();
                    let p = p.into_inner();
                    let all = [p.input, p.output, p.cache_read, p.cache_write];
                    if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
                        let key = format!("prices.{name}");
                        self.invalid(span, &key, "prices must be non-negative numbers".into());
                        return None;
                    }
                    Some((
                        name,
                        Price {
                            input: p.input,
                            output: p.output,
                            cache_read: p.cache_read,
                            cache_write: p.cache_write,
                        },
                    ))
                })
                .collect(),
        }
    }

    fn loops(&mut self, l: RawLoops) -> LoopSettings {
        let d = LoopSettings::default();
        let backoff = self
            .opt(l.backoff, "loops.backoff", |list| {
                if list.is_empty() {
                    return Err("must list at least one duration".to_string());
                }
                list.iter()
                    .map(|t| parse_positive_duration(t))
                    .collect::<Result<Vec<Duration>, String>>()
            })
            .unwrap_or(d.backoff);
        let message = self
            .opt(l.message, "loops.message", |m| {
                if m.trim().is_empty() {
                    Err("must not be empty".to_string())
                } else {
                    Ok(m)
                }
            })
            .unwrap_or(d.message);
        LoopSettings {
            enabled: l.enabled.unwrap_or(d.enabled),
            action_repeat: l.action_repeat.unwrap_or(d.action_repeat),
            error_repeat: l.error_repeat.unwrap_or(d.error_repeat),
            burn_messages: l.burn_messages.unwrap_or(d.burn_messages),
            burn_tokens: l.burn_tokens.unwrap_or(d.burn_tokens),
            thrash_alternations: l.thrash_alternations.unwrap_or(d.thrash_alternations),
            productive_reset: l.productive_reset.unwrap_or(d.productive_reset),
            backoff,
            message,
        }
    }

    fn guard(&mut self, g: RawGuard) -> crate::core::policy::GuardSettings {
        let response = self
            .opt(g.response, "guard.response", |r| match r.as_str() {
                "pause" => Ok(GuardResponse::Pause),
                "kill" => Ok(GuardResponse::Kill),
                other => Err(format!("invalid response {other:?}: pause or kill")),
            })
            .unwrap_or_default();
        let disabled = self
            .opt(g.disable, "guard.disable", |names| {
                names
                    .iter()
                    .map(|n| guard_rule(n))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap_or_default();
        let d = ScopeSettings::default();
        let mode = self
            .opt(g.scope, "guard.scope", |m| {
                ScopeMode::parse(&m)
                    .ok_or_else(|| format!("invalid scope rule {m:?}: pause, warn or off"))
            })
            .unwrap_or(d.mode);
        let pause_after = self
            .opt(g.scope_pause_after, "guard.scope_pause_after", |n| {
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("{n} is out of range (1..=4294967295)"))
            })
            .unwrap_or(d.pause_after);
        let paths = self
            .opt(g.scope_paths, "guard.scope_paths", |paths| {
                if paths.len() > crate::core::spec::MAX_SCOPE_PATHS {
                    return Err(format!(
                        "at most {} paths",
                        crate::core::spec::MAX_SCOPE_PATHS
                    ));
                }
                paths
                    .into_iter()
                    .map(check_scope_path)
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap_or_default();
        crate::core::policy::GuardSettings {
            enabled: g.enabled.unwrap_or(true),
            response,
            disabled,
            scope: ScopeSettings {
                mode,
                pause_after,
                paths,
            },
        }
    }

    fn budget(&mut self, name: String, raw: Spanned<RawBudget>) -> Option<BudgetRule> {
        let key = format!("budgets.{name}");
        let span = raw.span();
        let b = raw.into_inner();
        if b.enabled == Some(false) {
            return None;
        }
        let scope = self
            .opt(b.scope, &format!("{key}.scope"), |s| parse_scope(&s))
            .unwrap_or(Scope::Pane);
        let default = BudgetRule::output();
        // `[budgets.output]` naming no unit tunes the default budget
        // (`enabled = true`, a scope, a warning level).
        let tunes_default =
            name == OUTPUT_BUDGET && b.tokens.is_none() && b.usd.is_none() && b.bytes.is_none();
        let (unit, cap) = match (b.tokens, b.usd, b.bytes) {
            (Some(t), None, None) => (Unit::Tokens, t),
            (None, Some(u), None) => (Unit::Usd, u),
            (None, None, Some(n)) => (Unit::Bytes, n),
            (None, None, None) if tunes_default => {
                (default.unit, toml::Spanned::new(span.clone(), default.cap))
            }
            _ => {
                self.invalid(
                    span,
                    &key,
                    "give exactly one of tokens, usd or bytes".into(),
                );
                return None;
            }
        };
        let cap_span = cap.span();
        let cap = cap.into_inner();
        if !(cap.is_finite() && cap > 0.0) {
            self.invalid(cap_span, &key, "the cap must be a positive number".into());
            return None;
        }
        let period = match (b.window, b.daily) {
            (Some(w), false) => Period::Window(
                self.one(w, &format!("{key}.window"), |w| parse_positive_duration(&w))?,
            ),
            (None, true) => Period::Day,
            (None, false) if tunes_default => default.period,
            _ => {
                self.invalid(
                    span,
                    &key,
                    "give exactly one of window or daily = true".into(),
                );
                return None;
            }
        };
        let warn_at = self
            .opt(b.warn_at, &format!("{key}.warn_at"), |w| {
                if (0.0..=1.0).contains(&w) {
                    Ok(w)
                } else {
                    Err("must be a fraction between 0 and 1".to_string())
                }
            })
            .unwrap_or(0.7);
        Some(BudgetRule {
            name,
            scope,
            unit,
            period,
            cap,
            warn_at,
        })
    }
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    match s.split_once(':') {
        None if s == "pane" => Ok(Scope::Pane),
        None if s == "global" => Ok(Scope::Global),
        Some(("name", n)) if !n.is_empty() => Ok(Scope::Name(n.to_string())),
        Some(("role", r)) => crate::core::spec::check_role(r).map(|()| Scope::Role(r.to_string())),
        Some(("runtime", r)) if !r.is_empty() => Ok(Scope::Runtime(r.to_string())),
        _ => Err(format!(
            "invalid scope {s:?}: pane, global, name:NAME, role:ROLE or runtime:RUNTIME"
        )),
    }
}

/// A path of a scope (`[guard] scope_paths`, an agent's `scope`).
pub(super) fn check_scope_path(path: String) -> Result<String, String> {
    crate::core::spec::check_scope_path(&path).map(|()| path)
}

fn guard_rule(name: &str) -> Result<GuardRule, String> {
    GuardRule::ALL
        .into_iter()
        .find(|r| r.as_str() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = GuardRule::ALL.iter().map(|r| r.as_str()).collect();
            format!("unknown guard rule {name:?}: {}", names.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(text: &str) -> Result<Policies, String> {
        crate::config::parse_file(Path::new("/t.toml"), text)
            .map(|layer| layer.governance.unwrap_or_default())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn without_sections_the_guard_loops_and_the_output_budget_apply() {
        let p = parse("").expect("empty parses");
        assert!(p.guard.enabled && p.loops.enabled);
        assert_eq!(p.budgets, [BudgetRule::output()]);
        assert_eq!(p, Policies::default());
    }

    #[test]
    fn the_output_budget_is_replaced_or_turned_off_by_its_section() {
        let p = parse(
            "[budgets.output]
bytes = 1048576
daily = true
",
        )
        .expect("parses");
        assert_eq!(p.budgets.len(), 1);
        let b = &p.budgets[0];
        assert_eq!(
            (b.name.as_str(), b.unit, b.period, b.cap),
            ("output", Unit::Bytes, Period::Day, 1_048_576.0)
        );
        let p = parse(
            "[budgets.output]
enabled = false
",
        )
        .expect("parses");
        assert!(p.budgets.is_empty());
        // Naming no unit tunes the default.
        let p = parse("[budgets.output]\nenabled = true\n").expect("parses");
        assert_eq!(p.budgets, [BudgetRule::output()]);
        let p = parse("[budgets.output]\nscope = \"global\"\nwarn_at = 0.5\n").expect("parses");
        assert_eq!(
            p.budgets,
            [BudgetRule {
                scope: Scope::Global,
                warn_at: 0.5,
                ..BudgetRule::output()
            }]
        );
        let p = parse(
            "[budgets.t]
enabled = false
tokens = 5
window = \"1m\"
",
        )
        .expect("parses");
        assert_eq!(p.budgets, [BudgetRule::output()]);
    }

    #[test]
    fn every_section_reads() {
        let p = parse(
            r#"
[loops]
action_repeat = 8
backoff = ["30s", "2m"]
message = "Stop and think."

[guard]
response = "kill"
disable = ["sql_drop"]

[budgets.throttle]
tokens = 50000
window = "10m"

[budgets.daily]
scope = "name:worker"
usd = 20.0
daily = true
warn_at = 0.8

[prices.gpt-5]
input = 1.25
output = 10.0
"#,
        )
        .expect("parses");
        assert_eq!(p.loops.action_repeat, 8);
        assert_eq!(
            p.loops.backoff,
            [Duration::from_secs(30), Duration::from_secs(120)]
        );
        assert_eq!(p.loops.message, "Stop and think.");
        assert_eq!(p.guard.response, GuardResponse::Kill);
        assert_eq!(p.guard.disabled, [GuardRule::SqlDrop]);
        assert_eq!(p.budgets.len(), 3);
        assert_eq!(p.budgets[0], BudgetRule::output());
        let daily = &p.budgets[1];
        assert_eq!(
            (
                daily.name.as_str(),
                &daily.scope,
                daily.unit,
                daily.period,
                daily.warn_at
            ),
            (
                "daily",
                &Scope::Name("worker".into()),
                Unit::Usd,
                Period::Day,
                0.8
            )
        );
        assert_eq!(p.budgets[2], BudgetRule::token_throttle());
        assert_eq!(p.prices["gpt-5"].output, 10.0);
    }

    #[test]
    fn bad_values_name_their_line_and_key() {
        let err = parse("[budgets.b]\ntokens = 5\nusd = 1.0\nwindow = \"1m\"\n").unwrap_err();
        assert!(err.contains("/t.toml:1: budgets.b"), "{err}");
        let err = parse("[budgets.b]\ntokens = 5\nwindow = \"soon\"\n").unwrap_err();
        assert!(err.contains(":3: budgets.b.window"), "{err}");
        let err = parse("[guard]\nresponse = \"shout\"\n").unwrap_err();
        assert!(err.contains(":2: guard.response"), "{err}");
        let err = parse("[guard]\ndisable = [\"rm\"]\n").unwrap_err();
        assert!(err.contains("unknown guard rule"), "{err}");
        let err =
            parse("[budgets.b]\ntokens = 5\nwindow = \"1m\"\nscope = \"team\"\n").unwrap_err();
        assert!(err.contains(":4: budgets.b.scope"), "{err}");
        let err = parse("[loops]\nrepeat = 3\n").unwrap_err();
        assert!(err.contains("repeat"), "{err}");
        let err = parse("[guard]\nscope = \"loud\"\n").unwrap_err();
        assert!(err.contains(":2: guard.scope: invalid scope rule"), "{err}");
        let err = parse("[guard]\nscope_pause_after = 0\n").unwrap_err();
        assert!(err.contains(":2: guard.scope_pause_after"), "{err}");
        let err = parse("[guard]\nscope_paths = [\"$TMPDIR\"]\n").unwrap_err();
        assert!(err.contains(":2: guard.scope_paths"), "{err}");
    }

    #[test]
    fn the_scope_rule_is_on_by_default_and_tuned_or_turned_off_in_guard() {
        let d = parse("").expect("parses").guard.scope;
        assert_eq!(
            (d.mode, d.pause_after, d.paths.len()),
            (ScopeMode::Pause, 2, 0)
        );
        let p = parse(
            "[guard]\nscope = \"warn\"\nscope_pause_after = 3\nscope_paths = [\"/tmp\", \"../cache\"]\n",
        )
        .expect("parses");
        assert_eq!(
            p.guard.scope,
            ScopeSettings {
                mode: ScopeMode::Warn,
                pause_after: 3,
                paths: vec!["/tmp".into(), "../cache".into()],
            }
        );
        let off = parse("[guard]\nscope = \"off\"\n").expect("parses");
        assert_eq!(off.guard.scope.mode, ScopeMode::Off);
        let disabled =
            parse("[guard]\ndisable = [\"write_outside_scope\", \"chmod_outside_scope\"]\n")
                .expect("parses");
        assert_eq!(
            disabled.guard.disabled,
            [GuardRule::WriteOutsideScope, GuardRule::ChmodOutsideScope]
        );
    }
}
