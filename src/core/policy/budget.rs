//! Budgets: tokens, dollars or bytes of output per pane, name, role,
//! runtime or all panes, over a rolling window or a UTC calendar day.
//!
//! Each rule keeps one ledger per scope key (the pane id, the name, the
//! role, the runtime, or one for all). Spending is added as lines arrive; the ledger
//! warns once when the spend crosses `warn_at` of the cap, pauses when it
//! reaches the cap, and resumes (from [`Budgets::tick`]) when the window has
//! rolled below the cap, the day changed, or an operator raised the cap or
//! resumed once (the override lasts until the period rolls).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::core::time::Timestamp;

use super::{Action, LineFacts, PaneInfo, PolicyKind, Target, Verdict};

const DAY_MS: u64 = 86_400_000;
/// The name of the budget [`BudgetRule::output`] makes.
pub const OUTPUT_BUDGET: &str = "output";
/// A window's spends are kept in at most about this many slots: spends in
/// the same slot of time (the window's width over this) share one, dated
/// by the latest, so
/// a ledger's memory is bounded whatever the line rate, and a slot leaves
/// the window at most a slot's width late (never early).
const WINDOW_SLOTS: u32 = 64;

/// What a budget counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Input, output and cache-write tokens (cache reads are excluded: a
    /// long context re-read on every call would swamp the count).
    Tokens,
    /// US dollars: the harness's figure, else the price table's.
    Usd,
    /// Bytes the agent's output takes in its session log (each line and
    /// its record, [`super::LOG_RECORD_BYTES`]; a malformed line with its
    /// escapes, [`super::raw_log_bytes`]), counted in steps of
    /// [`super::OUTPUT_STEP`]: a runaway printer is paused before it
    /// fills the disk.
    Bytes,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Tokens => "tokens",
            Unit::Usd => "usd",
            Unit::Bytes => "bytes",
        }
    }
}

/// Over what time a budget counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Period {
    /// The last `Duration` (Coleo's TokenThrottle: 10 minutes).
    Window(Duration),
    /// The current UTC calendar day (00:00 to 24:00 UTC).
    Day,
}

/// Whom a budget covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Each pane on its own.
    Pane,
    /// The panes with this name or role, together.
    Name(String),
    /// The panes with this role, together: the control plane's per-role
    /// allocation (`state`'s `budget.allocation`).
    Role(String),
    /// The panes of this runtime (`claude`, `pi`, …), together.
    Runtime(String),
    /// All panes together.
    Global,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BudgetRule {
    /// The rule's name in config and on the wire (`budget raise NAME`).
    pub name: String,
    pub scope: Scope,
    pub unit: Unit,
    pub period: Period,
    pub cap: f64,
    /// The warning threshold as a fraction of the cap (0.7).
    pub warn_at: f64,
}

impl BudgetRule {
    /// Coleo's TokenThrottle: 50,000 tokens per pane in 10 minutes, a
    /// warning at 70 %; the tests' sample rule.
    #[cfg(test)]
    pub fn token_throttle() -> BudgetRule {
        BudgetRule {
            name: "throttle".into(),
            scope: Scope::Pane,
            unit: Unit::Tokens,
            period: Period::Window(Duration::from_secs(600)),
            cap: 50_000.0,
            warn_at: 0.7,
        }
    }

    /// The budget that applies without configuration: 1 GiB of session
    /// log per pane in an hour, a warning at 70 %. An agent that logs more
    /// is printing in a loop (a chatty harness logs tens of MB an hour),
    /// and unpaused it fills the disk its session log is on.
    pub fn output() -> BudgetRule {
        BudgetRule {
            name: OUTPUT_BUDGET.into(),
            scope: Scope::Pane,
            unit: Unit::Bytes,
            period: Period::Window(Duration::from_secs(3600)),
            cap: (1u64 << 30) as f64,
            warn_at: 0.7,
        }
    }

    /// The ledger key for `pane`, or `None` if the rule does not cover it.
    fn key(&self, pane: &PaneInfo) -> Option<String> {
        match &self.scope {
            Scope::Pane => Some(pane.id.clone()),
            Scope::Name(n) => {
                let hit = pane.name.as_deref() == Some(n) || pane.role.as_deref() == Some(n);
                hit.then(|| n.clone())
            }
            Scope::Role(r) => (pane.role.as_deref() == Some(r)).then(|| r.clone()),
            Scope::Runtime(r) => (pane.runtime.as_deref() == Some(r)).then(|| r.clone()),
            Scope::Global => Some(String::new()),
        }
    }

    fn target(&self, key: &str) -> Target {
        match &self.scope {
            Scope::Pane => Target::Pane(key.to_string()),
            Scope::Name(n) => Target::Name(n.clone()),
            Scope::Role(r) => Target::Role(r.clone()),
            Scope::Runtime(r) => Target::Runtime(r.clone()),
            Scope::Global => Target::All,
        }
    }
}

/// Per-million-token prices for a harness that prints tokens only.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Price {
    pub fn cost(&self, facts: &LineFacts) -> f64 {
        let u = &facts.usage;
        (u.input_tokens as f64 * self.input
            + u.output_tokens as f64 * self.output
            + u.cache_read_tokens as f64 * self.cache_read
            + u.cache_write_tokens as f64 * self.cache_write)
            / 1_000_000.0
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Status {
    Under,
    Warned,
    /// Paused at the cap; `until` is when the spend then would have
    /// rolled below it.
    Paused {
        until: Timestamp,
    },
    /// Resumed by an operator: spend on until the period rolls.
    Overridden {
        until: Timestamp,
    },
}

#[derive(Clone, Debug)]
struct Ledger {
    spends: VecDeque<(Timestamp, f64)>,
    day: u64,
    day_total: f64,
    status: Status,
    /// The pane, line and time that last changed the status (for verdicts
    /// made by `tick`).
    pane: String,
    line: u64,
}

impl Ledger {
    fn new(pane: &str) -> Ledger {
        Ledger {
            spends: VecDeque::new(),
            day: 0,
            day_total: 0.0,
            status: Status::Under,
            pane: pane.to_string(),
            line: 0,
        }
    }

    fn roll(&mut self, period: Period, now: Timestamp) {
        match period {
            Period::Window(w) => {
                while let Some(&(at, _)) = self.spends.front() {
                    if at.plus(w) <= now {
                        self.spends.pop_front();
                    } else {
                        break;
                    }
                }
            }
            Period::Day => {
                let day = now.as_millis() / DAY_MS;
                if day != self.day {
                    self.day = day;
                    self.day_total = 0.0;
                }
            }
        }
    }

    fn total(&self, period: Period) -> f64 {
        match period {
            Period::Window(_) => self.spends.iter().map(|(_, v)| v).sum(),
            Period::Day => self.day_total,
        }
    }

    fn add(&mut self, period: Period, now: Timestamp, amount: f64) {
        match period {
            Period::Window(w) => {
                let slot_ms = (w.as_millis() as u64 / u64::from(WINDOW_SLOTS)).max(1);
                let slot = |t: Timestamp| t.as_millis() / slot_ms;
                match self.spends.back_mut() {
                    Some((at, spent)) if slot(*at) == slot(now) => {
                        *at = (*at).max(now);
                        *spent += amount;
                    }
                    _ => self.spends.push_back((now, amount)),
                }
            }
            Period::Day => self.day_total += amount,
        }
    }

    /// When the spend will be back under `cap` with nothing more spent.
    fn under_cap_at(&self, period: Period, cap: f64, now: Timestamp) -> Timestamp {
        match period {
            Period::Day => Timestamp::from_millis((now.as_millis() / DAY_MS + 1) * DAY_MS),
            Period::Window(w) => {
                let mut total = self.total(period);
                for &(at, amount) in &self.spends {
                    total -= amount;
                    if total < cap {
                        return at.plus(w);
                    }
                }
                now
            }
        }
    }
}

/// Every budget rule's ledgers.
#[derive(Clone, Debug, Default)]
pub struct Budgets {
    rules: Vec<BudgetRule>,
    /// Cap overrides from `budget raise`, by rule name.
    raised: BTreeMap<String, f64>,
    ledgers: BTreeMap<(usize, String), Ledger>,
}

/// Why an operator command on budgets failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("no budget named {0:?}")]
    NoSuchBudget(String),
    #[error("the cap must be a positive number")]
    BadCap,
}

impl Budgets {
    pub fn new(rules: Vec<BudgetRule>) -> Budgets {
        Budgets {
            rules,
            ..Budgets::default()
        }
    }

    pub fn rules(&self) -> &[BudgetRule] {
        &self.rules
    }

    /// New rules (a reloaded config): the ledgers and raised caps of rules
    /// that keep their name and meaning carry over, the others start anew.
    /// What a ledger that goes held paused is resumed (the verdicts in
    /// `out`): nothing else would ever continue it.
    pub fn replace_rules(
        &mut self,
        rules: Vec<BudgetRule>,
        now: Timestamp,
        out: &mut Vec<Verdict>,
    ) {
        let old = std::mem::take(&mut self.ledgers);
        for ((i, key), ledger) in old {
            let Some(prev) = self.rules.get(i) else {
                continue;
            };
            let same = |r: &BudgetRule| {
                r.name == prev.name
                    && r.scope == prev.scope
                    && r.unit == prev.unit
                    && r.period == prev.period
            };
            if let Some(j) = rules.iter().position(same) {
                self.ledgers.insert((j, key), ledger);
            } else if matches!(ledger.status, Status::Paused { .. }) {
                out.push(Verdict {
                    pane: ledger.pane.clone(),
                    line: ledger.line,
                    at: now,
                    policy: PolicyKind::Budget,
                    rule: prev.name.clone(),
                    target: prev.target(&key),
                    action: Action::Resume,
                    reason: format!("budget {}: changed or removed by a reload", prev.name),
                    path: None,
                });
            }
        }
        self.raised
            .retain(|name, _| rules.iter().any(|r| &r.name == name));
        self.rules = rules;
    }

    fn cap(&self, i: usize) -> f64 {
        let rule = &self.rules[i];
        self.raised.get(&rule.name).copied().unwrap_or(rule.cap)
    }

    /// Adds one line's spend and says what it crossed.
    pub fn observe(
        &mut self,
        pane: &PaneInfo,
        facts: &LineFacts,
        cost: f64,
        now: Timestamp,
        out: &mut Vec<Verdict>,
    ) {
        let tokens = facts.tokens() as f64;
        for i in 0..self.rules.len() {
            let rule = &self.rules[i];
            let Some(key) = rule.key(pane) else { continue };
            let amount = match rule.unit {
                Unit::Tokens => tokens,
                Unit::Usd => cost,
                Unit::Bytes => facts.bytes as f64,
            };
            if amount <= 0.0 {
                continue;
            }
            let cap = self.cap(i);
            let rule = &self.rules[i];
            let ledger = self
                .ledgers
                .entry((i, key.clone()))
                .or_insert_with(|| Ledger::new(&pane.id));
            ledger.roll(rule.period, now);
            ledger.add(rule.period, now, amount);
            let total = ledger.total(rule.period);
            let verdict = |action: Action, reason: String| Verdict {
                pane: pane.id.clone(),
                line: facts.line,
                at: now,
                policy: PolicyKind::Budget,
                rule: rule.name.clone(),
                target: rule.target(&key),
                action,
                reason,
                path: None,
            };
            let spent = describe(rule.unit, total, cap);
            match ledger.status {
                Status::Overridden { .. } => {}
                // Spending while paused: the PTY's last bytes, or an
                // operator continued the agent (`resume-agent`). Once
                // the pause's period has rolled, that spend counts anew.
                Status::Paused { until } if now < until => {}
                Status::Under | Status::Warned | Status::Paused { .. } if total >= cap => {
                    let until = ledger.under_cap_at(rule.period, cap, now);
                    ledger.status = Status::Paused { until };
                    ledger.pane = pane.id.clone();
                    ledger.line = facts.line;
                    out.push(verdict(
                        Action::Pause { until: Some(until) },
                        format!("budget {}: {spent}, at the cap", rule.name),
                    ));
                    out.push(verdict(
                        Action::Escalate,
                        format!("budget {}: raise the cap or resume once", rule.name),
                    ));
                }
                Status::Under if total >= cap * rule.warn_at => {
                    ledger.status = Status::Warned;
                    out.push(verdict(
                        Action::Warn,
                        format!("budget {}: {spent}", rule.name),
                    ));
                }
                _ => {}
            }
        }
    }

    /// Resumes what a rolled window, a new day or a raised cap released.
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Verdict>) {
        let caps: Vec<f64> = (0..self.rules.len()).map(|i| self.cap(i)).collect();
        for ((i, key), ledger) in self.ledgers.iter_mut() {
            let rule = &self.rules[*i];
            let cap = caps[*i];
            ledger.roll(rule.period, now);
            let total = ledger.total(rule.period);
            match ledger.status {
                Status::Paused { .. } if total < cap => {}
                Status::Overridden { until } if now >= until => {
                    ledger.status = Status::Under;
                    continue;
                }
                _ => continue,
            }
            ledger.status = if total >= cap * rule.warn_at {
                Status::Warned
            } else {
                Status::Under
            };
            out.push(Verdict {
                pane: ledger.pane.clone(),
                line: ledger.line,
                at: now,
                policy: PolicyKind::Budget,
                rule: rule.name.clone(),
                target: rule.target(key),
                action: Action::Resume,
                reason: format!("budget {}: {}", rule.name, describe(rule.unit, total, cap)),
                path: None,
            });
        }
    }

    /// The next time [`Budgets::tick`] may resume something.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.ledgers
            .iter()
            .filter_map(|((i, _), l)| {
                let rule = &self.rules[*i];
                match l.status {
                    // The midnight after the day it counted (a day's
                    // ledger keeps no spends to date it by).
                    Status::Paused { .. } if rule.period == Period::Day => {
                        Some(Timestamp::from_millis((l.day + 1) * DAY_MS))
                    }
                    Status::Paused { .. } => {
                        let now = l.spends.back().map(|s| s.0).unwrap_or_default();
                        Some(l.under_cap_at(rule.period, self.cap(*i), now))
                    }
                    Status::Overridden { until } => Some(until),
                    _ => None,
                }
            })
            .min()
    }

    /// An operator raised (or lowered) a rule's cap; call `tick` after.
    pub fn raise(&mut self, name: &str, cap: f64) -> Result<(), BudgetError> {
        if !(cap.is_finite() && cap > 0.0) {
            return Err(BudgetError::BadCap);
        }
        if !self.rules.iter().any(|r| r.name == name) {
            return Err(BudgetError::NoSuchBudget(name.to_string()));
        }
        self.raised.insert(name.to_string(), cap);
        Ok(())
    }

    /// An operator let every paused ledger of `name` spend on until its
    /// period rolls; returns the resume verdicts.
    pub fn resume_once(&mut self, name: &str, now: Timestamp) -> Result<Vec<Verdict>, BudgetError> {
        let Some(i) = self.rules.iter().position(|r| r.name == name) else {
            return Err(BudgetError::NoSuchBudget(name.to_string()));
        };
        let rule = &self.rules[i];
        let mut out = Vec::new();
        for ((_, key), ledger) in self
            .ledgers
            .range_mut((i, String::new())..(i + 1, String::new()))
        {
            if !matches!(ledger.status, Status::Paused { .. }) {
                continue;
            }
            let until = match rule.period {
                Period::Day => Timestamp::from_millis((now.as_millis() / DAY_MS + 1) * DAY_MS),
                Period::Window(w) => now.plus(w),
            };
            ledger.status = Status::Overridden { until };
            out.push(Verdict {
                pane: ledger.pane.clone(),
                line: ledger.line,
                at: now,
                policy: PolicyKind::Budget,
                rule: rule.name.clone(),
                target: rule.target(key),
                action: Action::Resume,
                reason: format!("budget {}: resumed once by an operator", rule.name),
                path: None,
            });
        }
        Ok(out)
    }

    /// The pauses of shared budgets (a name, a runtime, all panes) that
    /// cover `pane` and still hold at `now`, as verdicts for that pane
    /// alone: a pane that starts while its scope is paused waits with the
    /// others (else it spent freely until the window rolled).
    pub fn paused_for(&self, pane: &PaneInfo, now: Timestamp) -> Vec<Verdict> {
        let mut out = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.scope == Scope::Pane {
                continue;
            }
            let Some(key) = rule.key(pane) else { continue };
            let Some(ledger) = self.ledgers.get(&(i, key)) else {
                continue;
            };
            let Status::Paused { until } = ledger.status else {
                continue;
            };
            if now >= until {
                continue;
            }
            out.push(Verdict {
                pane: pane.id.clone(),
                line: 0,
                at: now,
                policy: PolicyKind::Budget,
                rule: rule.name.clone(),
                target: Target::Pane(pane.id.clone()),
                action: Action::Pause { until: Some(until) },
                reason: format!(
                    "budget {}: paused for its scope; a pane that starts meanwhile waits too",
                    rule.name
                ),
                path: None,
            });
        }
        out
    }

    /// Drops the ledgers of per-pane rules kept for `pane` (it left the
    /// table): without this every pane that ever spent kept one.
    pub fn forget_pane(&mut self, pane: &str) {
        let rules = &self.rules;
        self.ledgers
            .retain(|(i, key), _| !(key == pane && rules[*i].scope == Scope::Pane));
    }

    /// What each ledger has spent, for `colibri budget` and agents' `state`.
    pub fn usage(&self, now: Timestamp) -> Vec<BudgetUsage> {
        self.ledgers
            .iter()
            .map(|((i, key), l)| {
                let rule = &self.rules[*i];
                let mut l = l.clone();
                l.roll(rule.period, now);
                BudgetUsage {
                    rule: rule.name.clone(),
                    unit: rule.unit,
                    key: key.clone(),
                    spent: l.total(rule.period),
                    cap: self.cap(*i),
                    paused: matches!(l.status, Status::Paused { .. }),
                }
            })
            .collect()
    }
}

/// The whole fleet's token budget, as the control plane's `state` shows
/// it: the global daily (else tightest global) token budget, and what each
/// role is allotted by its `role:ROLE` token budgets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetBudget {
    /// The global token budget's cap, spend and pause, once one is
    /// configured (its spend is 0 until it has counted any).
    pub global: Option<BudgetUsage>,
    /// Per role, the cap of its token budget (the daily one where it has
    /// one, else its tightest; a raised cap counts as raised).
    pub allocation: BTreeMap<String, f64>,
}

impl FleetBudget {
    /// The roles' allotments together: more than the global cap means the
    /// roles may spend more between them than the fleet may.
    pub fn allocated(&self) -> f64 {
        self.allocation.values().sum()
    }
}

impl Budgets {
    /// The fleet's token budget at `now` (see [`FleetBudget`]).
    pub fn fleet(&self, now: Timestamp) -> FleetBudget {
        let mut fleet = FleetBudget::default();
        // Daily budgets first, then the tightest cap: the seed's figures
        // are per day.
        let preference = |i: usize| (self.rules[i].period != Period::Day, self.cap(i));
        let mut best_global: Option<usize> = None;
        let mut best_role: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.unit != Unit::Tokens {
                continue;
            }
            match &rule.scope {
                Scope::Global if best_global.is_none_or(|b| preference(i) < preference(b)) => {
                    best_global = Some(i);
                }
                Scope::Role(r) => {
                    let slot = best_role.entry(r.as_str()).or_insert(i);
                    if preference(i) < preference(*slot) {
                        *slot = i;
                    }
                }
                _ => {}
            }
        }
        fleet.global = best_global.map(|i| {
            let rule = &self.rules[i];
            // A budget that has counted nothing yet has no ledger.
            let (spent, paused) = match self.ledgers.get(&(i, String::new())) {
                Some(l) => {
                    let mut l = l.clone();
                    l.roll(rule.period, now);
                    (
                        l.total(rule.period),
                        matches!(l.status, Status::Paused { .. }),
                    )
                }
                None => (0.0, false),
            };
            BudgetUsage {
                rule: rule.name.clone(),
                unit: rule.unit,
                key: String::new(),
                spent,
                cap: self.cap(i),
                paused,
            }
        });
        fleet.allocation = best_role
            .into_iter()
            .map(|(role, i)| (role.to_string(), self.cap(i)))
            .collect();
        fleet
    }
}

/// One ledger's standing.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetUsage {
    pub rule: String,
    pub unit: Unit,
    pub key: String,
    pub spent: f64,
    pub cap: f64,
    pub paused: bool,
}

fn describe(unit: Unit, total: f64, cap: f64) -> String {
    match unit {
        Unit::Tokens => format!("{total:.0} of {cap:.0} tokens"),
        Unit::Usd => format!("${total:.4} of ${cap:.4}"),
        Unit::Bytes => format!("{} of {} of output", mib(total), mib(cap)),
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / 1_048_576.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pane(id: &str) -> PaneInfo {
        PaneInfo {
            id: id.into(),
            name: Some("worker".into()),
            role: None,
            runtime: Some("pi".into()),
            model: None,
            cwd: None,
            scope: Vec::new(),
        }
    }

    fn spend(line: u64, tokens: u64) -> LineFacts {
        let mut f = LineFacts {
            line,
            ..LineFacts::default()
        };
        f.usage.output_tokens = tokens;
        f
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_millis(secs * 1000)
    }

    fn actions(v: &[Verdict]) -> Vec<(u64, Action)> {
        v.iter().map(|v| (v.line, v.action.clone())).collect()
    }

    fn output(line: u64, bytes: u64) -> LineFacts {
        LineFacts {
            line,
            bytes,
            ..LineFacts::default()
        }
    }

    /// The default output budget pauses a pane at 1 GiB in an hour, and
    /// lets it go on when that output has left the window.
    #[test]
    fn the_output_budget_pauses_a_pane_at_a_gib_an_hour_and_resumes_it_an_hour_on() {
        let mut b = Budgets::new(vec![BudgetRule::output()]);
        let p = pane("p1");
        let mut out = Vec::new();
        let step = super::super::OUTPUT_STEP;
        let steps = (1u64 << 30) / step;
        for i in 1..steps {
            b.observe(&p, &output(i, step), 0.0, at(i / 1000), &mut out);
        }
        assert_eq!(out.len(), 1, "the warning alone");
        assert_eq!(out[0].action, Action::Warn);
        assert!(
            out[0].reason.contains("of 1024.0 MiB of output"),
            "{}",
            out[0].reason
        );
        out.clear();
        b.observe(&p, &output(steps, step), 0.0, at(20), &mut out);
        let until = at(20 + 3600);
        assert_eq!(
            actions(&out),
            [
                (steps, Action::Pause { until: Some(until) }),
                (steps, Action::Escalate)
            ]
        );
        let mut resumed = Vec::new();
        b.tick(at(3600 + 19), &mut resumed);
        assert!(resumed.is_empty(), "{resumed:?}");
        b.tick(until, &mut resumed);
        assert_eq!(actions(&resumed), [(steps, Action::Resume)]);
    }

    /// However many spends a window sees, a ledger keeps a bounded number
    /// of slots, and a slot leaves the window no earlier than its last
    /// spend would have.
    #[test]
    fn a_window_ledger_keeps_a_bounded_number_of_slots() {
        let rule = BudgetRule {
            cap: 1e12,
            ..BudgetRule::token_throttle()
        };
        let mut b = Budgets::new(vec![rule]);
        let p = pane("p1");
        let mut out = Vec::new();
        for ms in 0..600_000u64 {
            b.observe(&p, &spend(ms, 1), 0.0, Timestamp::from_millis(ms), &mut out);
        }
        let ledger = b.ledgers.values().next().expect("a ledger");
        assert!(ledger.spends.len() <= 65, "{} slots", ledger.spends.len());
        assert_eq!(
            ledger.total(Period::Window(Duration::from_secs(600))),
            600_000.0
        );
        // Exactly counted, the first ms's spend has left the window; a slot
        // leaves with its latest spend, so none has yet.
        let usage = b.usage(Timestamp::from_millis(600_001));
        assert_eq!(usage[0].spent, 600_000.0);
        // 10 s on, exactly counted 590,000 remain: the first slot (ms 0 to
        // 9,374, dated 9,374) has left, the second not.
        let usage = b.usage(Timestamp::from_millis(610_000));
        assert_eq!(usage[0].spent, 600_000.0 - 9_375.0);
    }

    #[test]
    fn throttle_warns_at_seventy_percent_pauses_at_the_cap_and_resumes_when_the_window_rolls() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let p = pane("p1");
        let mut out = Vec::new();
        b.observe(&p, &spend(1, 20_000), 0.0, at(0), &mut out);
        b.observe(&p, &spend(2, 20_000), 0.0, at(60), &mut out);
        assert_eq!(actions(&out), [(2, Action::Warn)]);
        out.clear();
        b.observe(&p, &spend(3, 10_000), 0.0, at(120), &mut out);
        // 50,000 in the window: paused until the first 20,000 leave it.
        assert_eq!(
            actions(&out),
            [
                (
                    3,
                    Action::Pause {
                        until: Some(at(600))
                    }
                ),
                (3, Action::Escalate)
            ]
        );
        assert_eq!(out[0].target, Target::Pane("p1".into()));
        assert_eq!(b.next_deadline(), Some(at(600)));
        out.clear();
        b.tick(at(599), &mut out);
        assert!(out.is_empty());
        b.tick(at(600), &mut out);
        assert_eq!(actions(&out), [(3, Action::Resume)]);
    }

    #[test]
    fn a_raised_cap_resumes_at_the_next_tick() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let p = pane("p1");
        let mut out = Vec::new();
        b.observe(&p, &spend(1, 60_000), 0.0, at(0), &mut out);
        assert!(matches!(out[0].action, Action::Pause { .. }));
        assert_eq!(
            b.raise("nope", 1.0),
            Err(BudgetError::NoSuchBudget("nope".into()))
        );
        assert_eq!(b.raise("throttle", -1.0), Err(BudgetError::BadCap));
        b.raise("throttle", 100_000.0).expect("raised");
        out.clear();
        b.tick(at(1), &mut out);
        assert_eq!(actions(&out), [(1, Action::Resume)]);
    }

    #[test]
    fn resume_once_lets_spend_on_until_the_period_rolls() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let p = pane("p1");
        let mut out = Vec::new();
        b.observe(&p, &spend(1, 60_000), 0.0, at(0), &mut out);
        let resumed = b.resume_once("throttle", at(10)).expect("known rule");
        assert_eq!(resumed.len(), 1);
        out.clear();
        b.observe(&p, &spend(2, 60_000), 0.0, at(20), &mut out);
        assert!(out.is_empty(), "overridden: {out:?}");
        b.tick(at(610), &mut out);
        assert!(out.is_empty());
        b.observe(&p, &spend(3, 60_000), 0.0, at(700), &mut out);
        assert!(matches!(out[0].action, Action::Pause { .. }));
    }

    /// An agent an operator continued with a plain `resume-agent` spends
    /// on; once the window has rolled past the pause and its spend
    /// reaches the cap anew, it is paused again (before, a ledger left
    /// paused never paused again while the agent kept spending).
    #[test]
    fn an_agent_resumed_by_hand_is_paused_again_once_the_window_rolled_and_the_cap_is_reached() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let p = pane("p1");
        let mut out = Vec::new();
        b.observe(&p, &spend(1, 60_000), 0.0, at(0), &mut out);
        assert!(matches!(out[0].action, Action::Pause { .. }));
        out.clear();
        // `resume-agent`: the ledger is not told; 10,000 tokens a minute
        // for two hours, 100,000 in every window.
        let mut pauses = Vec::new();
        for m in 1..=120u64 {
            b.observe(&p, &spend(1 + m, 10_000), 0.0, at(m * 60), &mut out);
            b.tick(at(m * 60), &mut out);
            pauses.extend(
                out.drain(..)
                    .filter(|v| matches!(v.action, Action::Pause { .. }))
                    .map(|v| v.line),
            );
        }
        assert_eq!(pauses.first(), Some(&11), "{pauses:?}");
    }

    #[test]
    fn a_daily_cost_budget_for_a_name_pauses_every_pane_of_it_until_utc_midnight() {
        let rule = BudgetRule {
            name: "daily".into(),
            scope: Scope::Name("worker".into()),
            unit: Unit::Usd,
            period: Period::Day,
            cap: 1.0,
            warn_at: 0.8,
        };
        let mut b = Budgets::new(vec![rule]);
        let mut out = Vec::new();
        let noon = Timestamp::from_millis(20_000 * DAY_MS + DAY_MS / 2);
        b.observe(&pane("a"), &spend(1, 1), 0.6, noon, &mut out);
        b.observe(&pane("b"), &spend(1, 1), 0.5, noon, &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].target, Target::Name("worker".into()));
        assert_eq!(
            out[0].action,
            Action::Pause {
                until: Some(Timestamp::from_millis(20_001 * DAY_MS))
            }
        );
        let other = PaneInfo {
            name: Some("other".into()),
            ..pane("c")
        };
        out.clear();
        b.observe(&other, &spend(1, 1), 5.0, noon, &mut out);
        assert!(out.is_empty());
        // The timed resume is armed for UTC midnight (before: for the
        // first midnight of 1970, a time long past).
        assert_eq!(
            b.next_deadline(),
            Some(Timestamp::from_millis(20_001 * DAY_MS))
        );
        b.tick(Timestamp::from_millis(20_001 * DAY_MS), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].action, Action::Resume);
    }

    fn rule(name: &str, scope: Scope, unit: Unit, period: Period, cap: f64) -> BudgetRule {
        BudgetRule {
            name: name.into(),
            scope,
            unit,
            period,
            cap,
            warn_at: 0.7,
        }
    }

    fn with_role(id: &str, role: &str) -> PaneInfo {
        PaneInfo {
            name: None,
            role: Some(role.into()),
            ..pane(id)
        }
    }

    #[test]
    fn a_role_budget_holds_every_pane_of_the_role_and_no_other() {
        let mut b = Budgets::new(vec![rule(
            "ops",
            Scope::Role("sysadmin".into()),
            Unit::Tokens,
            Period::Day,
            1000.0,
        )]);
        let mut out = Vec::new();
        let noon = Timestamp::from_millis(20_000 * DAY_MS + DAY_MS / 2);
        b.observe(
            &with_role("a", "sysadmin"),
            &spend(1, 600),
            0.0,
            noon,
            &mut out,
        );
        // A pane named like the role is not of it: `role:` is the role only.
        let named = PaneInfo {
            name: Some("sysadmin".into()),
            ..pane("n")
        };
        b.observe(&named, &spend(1, 5000), 0.0, noon, &mut out);
        assert!(out.iter().all(|v| v.pane == "a"), "{out:?}");
        out.clear();
        b.observe(
            &with_role("b", "sysadmin"),
            &spend(1, 500),
            0.0,
            noon,
            &mut out,
        );
        let pause = out
            .iter()
            .find(|v| matches!(v.action, Action::Pause { .. }));
        let pause = pause.expect("the role's spend together reached the cap");
        assert_eq!(pause.target, Target::Role("sysadmin".into()));
        // A pane of the role that starts now waits with the others.
        assert_eq!(b.paused_for(&with_role("c", "sysadmin"), noon).len(), 1);
        assert!(b.paused_for(&with_role("d", "db-admin"), noon).is_empty());
    }

    #[test]
    fn the_fleet_budget_is_the_global_daily_cap_and_each_roles_allotment() {
        let day = Period::Day;
        let hour = Period::Window(Duration::from_secs(3600));
        let mut b = Budgets::new(vec![
            rule("burst", Scope::Global, Unit::Tokens, hour, 5_000.0),
            rule("fleet", Scope::Global, Unit::Tokens, day, 100_000.0),
            rule("fleet-usd", Scope::Global, Unit::Usd, day, 1.0),
            rule(
                "orch",
                Scope::Role("orchestrator".into()),
                Unit::Tokens,
                day,
                80_000.0,
            ),
            rule(
                "ops",
                Scope::Role("sysadmin".into()),
                Unit::Tokens,
                day,
                10_000.0,
            ),
            // A window beside the day: the day's cap is the allotment.
            rule(
                "ops-burst",
                Scope::Role("sysadmin".into()),
                Unit::Tokens,
                hour,
                2_000.0,
            ),
            rule(
                "dba",
                Scope::Role("db-admin".into()),
                Unit::Tokens,
                hour,
                5_000.0,
            ),
            rule(
                "dba-usd",
                Scope::Role("db-admin".into()),
                Unit::Usd,
                day,
                1.0,
            ),
            rule(
                "named",
                Scope::Name("git-admin".into()),
                Unit::Tokens,
                day,
                5_000.0,
            ),
        ]);
        let noon = Timestamp::from_millis(20_000 * DAY_MS + DAY_MS / 2);
        // Nothing spent yet: the cap shows, with nothing spent.
        let fleet = b.fleet(noon);
        let global = fleet.global.clone().expect("a global token budget");
        assert_eq!(
            (global.rule.as_str(), global.cap, global.spent),
            ("fleet", 100_000.0, 0.0)
        );
        assert_eq!(
            fleet.allocation,
            BTreeMap::from([
                ("db-admin".to_string(), 5_000.0),
                ("orchestrator".to_string(), 80_000.0),
                ("sysadmin".to_string(), 10_000.0),
            ])
        );
        assert_eq!(fleet.allocated(), 95_000.0);
        let mut out = Vec::new();
        b.observe(
            &with_role("a", "sysadmin"),
            &spend(1, 25_000),
            0.0,
            noon,
            &mut out,
        );
        let global = b.fleet(noon).global.expect("global");
        assert_eq!((global.spent, global.paused), (25_000.0, false));
        // The next day starts at nothing.
        let tomorrow = Timestamp::from_millis(20_001 * DAY_MS + 1);
        assert_eq!(b.fleet(tomorrow).global.map(|g| g.spent), Some(0.0));
        b.raise("ops", 12_000.0).expect("raise");
        assert_eq!(b.fleet(noon).allocation["sysadmin"], 12_000.0);
        assert_eq!(
            Budgets::new(vec![BudgetRule::output()]).fleet(noon),
            FleetBudget::default()
        );
    }

    #[test]
    fn a_reload_keeps_the_spend_of_budgets_that_stay() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let p = pane("p1");
        let mut out = Vec::new();
        b.observe(&p, &spend(1, 30_000), 0.0, at(0), &mut out);
        let other = BudgetRule {
            name: "other".into(),
            ..BudgetRule::token_throttle()
        };
        b.replace_rules(vec![other, BudgetRule::token_throttle()], at(1), &mut out);
        assert!(out.is_empty(), "nothing was paused: {out:?}");
        b.observe(&p, &spend(2, 30_000), 0.0, at(1), &mut out);
        // The throttle had 30,000 already: 60,000 reaches its cap; the new
        // rule counts from zero.
        let paused: Vec<&str> = out
            .iter()
            .filter(|v| matches!(v.action, Action::Pause { .. }))
            .map(|v| v.rule.as_str())
            .collect();
        assert_eq!(paused, ["throttle"]);
    }

    /// A reload that drops a budget, or changes its meaning, resumes what
    /// its ledgers held paused; one that keeps it keeps the pause.
    #[test]
    fn a_reload_that_drops_a_paused_budget_resumes_its_panes() {
        let mut b = Budgets::new(vec![BudgetRule::token_throttle()]);
        let mut out = Vec::new();
        b.observe(&pane("p1"), &spend(1, 60_000), 0.0, at(0), &mut out);
        out.clear();
        b.replace_rules(vec![BudgetRule::token_throttle()], at(1), &mut out);
        assert!(out.is_empty(), "kept: {out:?}");
        let longer = BudgetRule {
            period: Period::Window(Duration::from_secs(1200)),
            ..BudgetRule::token_throttle()
        };
        b.replace_rules(vec![longer], at(2), &mut out);
        assert_eq!(actions(&out), [(1, Action::Resume)]);
        assert_eq!(out[0].target, Target::Pane("p1".into()));
        assert!(b.usage(at(2)).is_empty());
    }

    #[test]
    fn prices_turn_tokens_into_dollars() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        };
        let mut f = LineFacts::default();
        f.usage.input_tokens = 1_000_000;
        f.usage.output_tokens = 100_000;
        assert!((price.cost(&f) - 4.5).abs() < 1e-9);
    }
}
