//! Governance: policies over a pane's event stream, giving verdicts.
//!
//! A [`Governor`] holds the configured [`Policy`] set and their state. The
//! pane reports what each line meant ([`LineFacts`]: tokens and cost spent,
//! the tool call, the error); [`Governor::observe`] turns that and the time
//! into [`Verdict`]s (warn, pause for how long, write a message to the
//! agent, resume, kill, deny, escalate), and [`Governor::tick`] resumes what
//! a rolled window or an elapsed backoff releases. Nothing here reads a
//! clock, so `colibri fold` replays a log through the same governor and
//! shows the same verdicts at the same lines; the daemon only carries them
//! out (`daemon::govern`).

pub mod budget;
pub mod guard;
pub mod loops;
pub mod scope;

use std::collections::BTreeMap;

use crate::core::time::Timestamp;
use crate::core::usage::Usage;

pub use budget::{BudgetRule, Budgets, FleetBudget, Period, Price, Scope, Unit, OUTPUT_BUDGET};
pub use guard::{GuardHit, GuardRule};
pub use loops::{LoopSettings, LoopState};
pub use scope::{ScopeMode, ScopeSettings};

/// What one line of an agent's stream meant to the policies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineFacts {
    /// The pane's non-blank line count at this line (1-based).
    pub line: u64,
    /// What this line added to the pane's usage (a running total the
    /// harness replaced counts as the increase, never negative).
    pub usage: Usage,
    /// The harness reports cost itself (else the price table prices tokens).
    pub cost_reported: bool,
    pub tool: Option<ToolFacts>,
    pub error: Option<String>,
    /// The line starts a message (a model call or prompt round).
    pub turn: bool,
    /// The task finished cleanly (productive work: loop counts reset).
    pub finished: bool,
    /// The pane's working directory at this line, with a tool call only
    /// (the guard judges `rm` targets against it; `None`: not known yet).
    pub cwd: Option<String>,
    /// Log bytes ([`LOG_RECORD_BYTES`]) of the pane's output since its last
    /// such count: set on a line
    /// that crossed [`OUTPUT_STEP`] more bytes, 0 on every other line, so
    /// the stream's common lines stay inert.
    pub bytes: u64,
}

/// How much output a pane writes between two byte counts for the
/// policies (a budget in bytes sees its spend in steps of this size).
pub const OUTPUT_STEP: u64 = 64 * 1024;

/// What the session log adds around a line it logs: the record
/// `{"ts":"<24-character time>","pane":"<36-character id>","ev":` before
/// it and `}` and a newline after (a raw line's record is 3 bytes more,
/// with its escapes). Output is counted in log bytes, line plus this, as
/// the disk sees it: a `yes` writes 2-byte lines, and 88-byte records.
pub const LOG_RECORD_BYTES: u64 = 86;

/// The bytes a malformed line's record takes in the session log: its
/// text as a JSON string (`"raw":"…"`, 3 bytes more than an event's
/// `"ev":`), each C0 control escaped to 6 bytes (`\u001b`) or 2 (`\n`,
/// `\t`, …), a quote or backslash to 2, and each invalid UTF-8 sequence
/// made U+FFFD (3). Counted so, an agent printing control bytes (or a
/// TUI's ANSI colours) cannot log six times its output budget.
pub fn raw_log_bytes(line: &[u8]) -> u64 {
    let mut n = LOG_RECORD_BYTES + 3;
    for chunk in line.utf8_chunks() {
        for &b in chunk.valid().as_bytes() {
            n += match b {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
                0x00..=0x1f => 6,
                _ => 1,
            };
        }
        if !chunk.invalid().is_empty() {
            n += 3;
        }
    }
    n
}

impl LineFacts {
    /// Nothing here can move any policy: no spend, no tool call, no
    /// error, no message start, no finish, no step of output.
    pub fn is_inert(&self) -> bool {
        self.usage.is_zero()
            && self.bytes == 0
            && self.tool.is_none()
            && self.error.is_none()
            && !self.turn
            && !self.finished
    }

    /// Tokens spent: input, output and cache writes (see [`Unit::Tokens`]).
    pub fn tokens(&self) -> u64 {
        self.usage
            .input_tokens
            .saturating_add(self.usage.output_tokens)
            .saturating_add(self.usage.cache_write_tokens)
    }
}

/// The most of a tool's arguments kept for the guard.
pub const MAX_ARGS: usize = 64 * 1024;

/// A tool call as the policies need it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolFacts {
    pub name: String,
    /// The arguments as given (raw JSON, or a bare command), cut to
    /// [`MAX_ARGS`] bytes.
    pub args: String,
    /// A hash of the whole arguments: equal arguments, equal hash.
    pub args_hash: u64,
    /// The file the call works on, when its arguments name one.
    pub path: Option<String>,
    /// The harness waits for colibri's answer before it runs the call
    /// (`Observation::tool_gated`): the guard denies it instead of
    /// stopping the tree.
    pub gated: bool,
}

impl ToolFacts {
    pub fn new(name: &str, args: &str) -> ToolFacts {
        let mut cut = args.len().min(MAX_ARGS);
        while !args.is_char_boundary(cut) {
            cut -= 1;
        }
        ToolFacts {
            name: name.to_string(),
            args: args[..cut].to_string(),
            args_hash: fnv1a(args.as_bytes()),
            path: file_path(args),
            gated: false,
        }
    }
}

fn file_path(args: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Paths {
        #[serde(default)]
        file_path: Option<String>,
        #[serde(default)]
        path: Option<String>,
        #[serde(default, rename = "filePath")]
        file_path_camel: Option<String>,
    }
    let p: Paths = serde_json::from_str(args).ok()?;
    p.file_path.or(p.file_path_camel).or(p.path)
}

/// FNV-1a: stable across runs and builds (a replay must hash alike).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Cuts text for a verdict's reason.
fn clip(s: &str) -> String {
    crate::core::tool::truncate(s)
}

/// Who a pane is, for scoping budgets and resolving rm targets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PaneInfo {
    pub id: String,
    pub name: Option<String>,
    pub role: Option<String>,
    pub runtime: Option<String>,
    /// The model, when the daemon knows it (prices are looked up by it).
    pub model: Option<String>,
    /// The pane's working directory now (informational: the guard uses
    /// the line's own, [`LineFacts::cwd`]).
    pub cwd: Option<String>,
    /// The paths in the pane's scope besides its working directory, as
    /// declared (absolute, or relative to the working directory): the
    /// guard's scope rule (`scope`).
    pub scope: Vec<String>,
}

/// Which policy gave a verdict.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    Budget,
    Loop,
    Guard,
}

/// The seed's loop types.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    ActionRepeat,
    ErrorLoop,
    TokenBurn,
    Thrashing,
}

impl LoopKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::ActionRepeat => "action_repeat",
            LoopKind::ErrorLoop => "error_loop",
            LoopKind::TokenBurn => "token_burn",
            LoopKind::Thrashing => "thrashing",
        }
    }
}

/// What the daemon is asked to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Tell the operator (an alert and a watch event); nothing stops.
    Warn,
    /// Stop the target's process trees; `until` is when a timed resume is
    /// due (`None`: until an operator resumes).
    Pause {
        until: Option<Timestamp>,
    },
    /// Write this text to the agent's input (it reads it on resume).
    Message {
        text: String,
    },
    Resume,
    Kill,
    /// Refuse the tool call before it runs (approvals only).
    Deny,
    /// Ask an operator for a decision.
    Escalate,
}

impl Action {
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Pause { .. } => "pause",
            Action::Message { .. } => "message",
            Action::Resume => "resume",
            Action::Kill => "kill",
            Action::Deny => "deny",
            Action::Escalate => "escalate",
        }
    }
}

/// Whose agents a verdict acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pane(String),
    /// Every pane with this name or role.
    Name(String),
    /// Every pane with this role.
    Role(String),
    /// Every pane of this runtime.
    Runtime(String),
    All,
}

/// One decision, with the line that caused it.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The pane whose line caused it.
    pub pane: String,
    /// That pane's non-blank line count (0: not caused by a line).
    pub line: u64,
    pub at: Timestamp,
    pub policy: PolicyKind,
    /// The budget's name, the loop type or the guard rule.
    pub rule: String,
    pub target: Target,
    pub action: Action,
    pub reason: String,
    /// The file a scope verdict is about (resolved where it could be).
    pub path: Option<String>,
}

/// What the guard does when a tool call matches.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum GuardResponse {
    /// Stop the tree and ask an operator (the default).
    #[default]
    Pause,
    Kill,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GuardSettings {
    pub enabled: bool,
    pub response: GuardResponse,
    /// Rules turned off.
    pub disabled: Vec<GuardRule>,
    /// The scope rule (`write_outside_scope`).
    pub scope: ScopeSettings,
}

impl GuardSettings {
    /// [`guard::check`] under these settings: the hit, unless the guard or
    /// the rule it matched is turned off.
    pub fn check(&self, tool: &str, args: &str, cwd: Option<&str>) -> Option<GuardHit> {
        self.check_in(tool, args, guard::Dirs::same(cwd))
    }

    /// [`GuardSettings::check`] with the call's own directory
    /// ([`guard::check_in`]).
    pub fn check_in(&self, tool: &str, args: &str, dirs: guard::Dirs<'_>) -> Option<GuardHit> {
        self.read(tool, args, dirs).hit
    }

    /// [`guard::read`] under these settings: nothing when the guard is
    /// off, and no hit of a rule turned off.
    pub fn read(&self, tool: &str, args: &str, dirs: guard::Dirs<'_>) -> guard::Reading {
        if !self.enabled {
            return guard::Reading::default();
        }
        let mut reading = guard::read(tool, args, dirs);
        if reading
            .hit
            .as_ref()
            .is_some_and(|h| self.disabled.contains(&h.rule))
        {
            reading.hit = None;
        }
        reading
    }

    /// A pane's scope: its working directory, its declared paths and
    /// `[guard] scope_paths`, resolved against the directory.
    pub fn roots(&self, cwd: Option<&str>, declared: &[String]) -> scope::Roots {
        scope::Roots::resolve(cwd, declared, &self.scope.paths)
    }

    /// Whether the scope rule judges writes at all.
    fn scope_on(&self) -> bool {
        self.enabled
            && self.scope.mode != ScopeMode::Off
            && !self.disabled.contains(&GuardRule::WriteOutsideScope)
    }
}

impl Default for GuardSettings {
    fn default() -> Self {
        GuardSettings {
            enabled: true,
            response: GuardResponse::Pause,
            disabled: Vec::new(),
            scope: ScopeSettings::default(),
        }
    }
}

/// The closed set of policies.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    Budget(BudgetRule),
    Loops(LoopSettings),
    Guard(GuardSettings),
}

/// Every policy the daemon (or a fold) applies.
#[derive(Clone, Debug, PartialEq)]
pub struct Policies {
    pub budgets: Vec<BudgetRule>,
    pub loops: LoopSettings,
    pub guard: GuardSettings,
    /// Prices by model, then by runtime name, for harnesses that print
    /// tokens only.
    pub prices: BTreeMap<String, Price>,
}

/// Without configuration: the guard, loop detection and the output
/// budget ([`BudgetRule::output`]), which keeps a runaway agent from
/// filling the disk with its session log.
impl Default for Policies {
    fn default() -> Policies {
        Policies {
            budgets: vec![BudgetRule::output()],
            loops: LoopSettings::default(),
            guard: GuardSettings::default(),
            prices: BTreeMap::new(),
        }
    }
}

impl Policies {
    /// The policies as the closed set.
    pub fn list(&self) -> Vec<Policy> {
        let mut out: Vec<Policy> = self.budgets.iter().cloned().map(Policy::Budget).collect();
        out.push(Policy::Loops(self.loops.clone()));
        out.push(Policy::Guard(self.guard.clone()));
        out
    }
}

#[derive(Clone, Debug, Default)]
struct PaneGovernance {
    loops: LoopState,
    /// A loop pause's timed resume.
    loop_resume_at: Option<Timestamp>,
    loop_line: u64,
    /// Tool calls that wrote outside the pane's scope so far.
    scope_strikes: u32,
    /// The last tool call's name and arguments, hashed: the same call
    /// reported twice in a row (Claude Code's `PreToolUse`, then its
    /// `PermissionRequest` or the stream's `tool_use`) counts once.
    last_call: Option<(u64, u64)>,
}

/// The policies and their state, for all panes.
#[derive(Clone, Debug, Default)]
pub struct Governor {
    loops: LoopSettings,
    guard: GuardSettings,
    prices: BTreeMap<String, Price>,
    budgets: Budgets,
    panes: BTreeMap<String, PaneGovernance>,
}

impl Governor {
    pub fn new(policies: Policies) -> Governor {
        Governor {
            loops: policies.loops,
            guard: policies.guard,
            prices: policies.prices,
            budgets: Budgets::new(policies.budgets),
            panes: BTreeMap::new(),
        }
    }

    /// One line's verdicts.
    pub fn observe(&mut self, pane: &PaneInfo, facts: &LineFacts, now: Timestamp) -> Vec<Verdict> {
        self.observe_lines(pane, std::slice::from_ref(facts), now)
    }

    /// The verdicts of one pane's lines, in order: those of [`Governor::observe`]
    /// line by line, with the pane's state looked up once (a read of a
    /// streaming agent brings hundreds of lines, and the search of the
    /// pane map by its id was a twentieth of a short line's cost).
    pub fn observe_lines(
        &mut self,
        pane: &PaneInfo,
        lines: &[LineFacts],
        now: Timestamp,
    ) -> Vec<Verdict> {
        let mut out = Vec::new();
        if lines.is_empty() {
            return out;
        }
        let state = match self.panes.get_mut(&pane.id) {
            Some(state) => state,
            None => self.panes.entry(pane.id.clone()).or_default(),
        };
        for facts in lines {
            let cost = line_cost(&self.prices, pane, facts);
            self.budgets.observe(pane, facts, cost, now, &mut out);
            guard_line(&self.guard, state, pane, facts, now, &mut out);
            loop_line(&self.loops, state, pane, facts, now, &mut out);
        }
        out
    }

    /// Timed resumes that are due.
    pub fn tick(&mut self, now: Timestamp) -> Vec<Verdict> {
        let mut out = Vec::new();
        self.budgets.tick(now, &mut out);
        for (id, state) in self.panes.iter_mut() {
            let Some(at) = state.loop_resume_at else {
                continue;
            };
            if now < at {
                continue;
            }
            state.loop_resume_at = None;
            out.push(Verdict {
                pane: id.clone(),
                line: state.loop_line,
                at: now,
                policy: PolicyKind::Loop,
                rule: "backoff".into(),
                target: Target::Pane(id.clone()),
                action: Action::Resume,
                reason: "loop backoff elapsed".into(),
                path: None,
            });
        }
        out
    }

    /// When [`Governor::tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let loops = self.panes.values().filter_map(|p| p.loop_resume_at).min();
        match (loops, self.budgets.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// New policies (a reloaded config), keeping the state that still
    /// applies: loop counts, pauses under way, and the spend of budgets
    /// that keep their name and meaning. Returns the resumes it makes: of
    /// panes a dropped budget held paused, and (as after `budget raise`)
    /// of those a raised cap releases.
    pub fn reconfigure(&mut self, policies: Policies, now: Timestamp) -> Vec<Verdict> {
        self.loops = policies.loops;
        self.guard = policies.guard;
        self.prices = policies.prices;
        let mut out = Vec::new();
        self.budgets.replace_rules(policies.budgets, now, &mut out);
        out.extend(self.tick(now));
        out
    }

    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    pub fn budgets_mut(&mut self) -> &mut Budgets {
        &mut self.budgets
    }

    /// What `usage` cost in dollars: the harness's own figure, else its
    /// tokens priced as a budget prices them (model, runtime, `default`),
    /// else 0.
    pub fn usage_cost(&self, pane: &PaneInfo, usage: &Usage) -> f64 {
        let facts = LineFacts {
            usage: *usage,
            ..LineFacts::default()
        };
        line_cost(&self.prices, pane, &facts)
    }

    /// The pane is gone: drop its loop state (budget ledgers stay: a
    /// name's or the global spend outlives one pane).
    pub fn forget(&mut self, pane: &str) {
        self.panes.remove(pane);
        self.budgets.forget_pane(pane);
    }
}

/// Makes the verdicts `policy` gives at `facts`' line on its pane, one
/// per action, with the same rule and reason.
fn line_verdict<'a>(
    pane: &'a PaneInfo,
    facts: &'a LineFacts,
    now: Timestamp,
    policy: PolicyKind,
    rule: &'a str,
    reason: String,
) -> impl Fn(Action) -> Verdict + 'a {
    move |action| Verdict {
        pane: pane.id.clone(),
        line: facts.line,
        at: now,
        policy,
        rule: rule.to_string(),
        target: Target::Pane(pane.id.clone()),
        action,
        reason: reason.clone(),
        path: None,
    }
}

/// The guard's verdicts on one line's tool call, if any: a destructive
/// rule's, else the scope rule's.
fn guard_line(
    guard: &GuardSettings,
    state: &mut PaneGovernance,
    pane: &PaneInfo,
    facts: &LineFacts,
    now: Timestamp,
    out: &mut Vec<Verdict>,
) {
    let Some(tool) = &facts.tool else { return };
    let call = (fnv1a(tool.name.as_bytes()), tool.args_hash);
    let again = state.last_call.replace(call) == Some(call);
    // The directory at this line, not the pane's latest: a replay cut
    // into other chunks must judge the line alike.
    let cwd = facts.cwd.as_deref();
    let roots = guard.roots(cwd, &pane.scope);
    let dirs = guard::Dirs {
        root: cwd,
        here: cwd,
        scope: roots.others(),
    };
    let reading = guard.read(&tool.name, &tool.args, dirs);
    let Some(hit) = reading.hit else {
        if !again {
            scope_line(guard, state, pane, facts, &roots, reading.writes, now, out);
        }
        return;
    };
    let verdict = line_verdict(
        pane,
        facts,
        now,
        PolicyKind::Guard,
        hit.rule.as_str(),
        format!("{}: {}", hit.rule.as_str(), clip(&hit.command)),
    );
    // A call the harness holds for the guard's answer is refused there
    // (`colibri hook` prints the deny): it never runs, and the agent goes
    // on, told why.
    out.push(verdict(match (tool.gated, guard.response) {
        (true, _) => Action::Deny,
        (false, GuardResponse::Pause) => Action::Pause { until: None },
        (false, GuardResponse::Kill) => Action::Kill,
    }));
    out.push(verdict(Action::Escalate));
}

/// The scope rule on one tool call: the first file it writes outside the
/// pane's scope is a strike; the strikes before `pause_after` warn, that
/// one and later ones pause (and escalate, as the guard's pauses do).
#[allow(clippy::too_many_arguments)]
fn scope_line(
    guard: &GuardSettings,
    state: &mut PaneGovernance,
    pane: &PaneInfo,
    facts: &LineFacts,
    roots: &scope::Roots,
    shell_writes: Vec<String>,
    now: Timestamp,
    out: &mut Vec<Verdict>,
) {
    let Some(tool) = &facts.tool else { return };
    // A pane whose directory is not known, and given no path, has no
    // scope to judge by.
    if !guard.scope_on() || roots.is_empty() {
        return;
    }
    let cwd = facts.cwd.as_deref();
    let mut writes = scope::tool_writes(&tool.name, &tool.args);
    writes.extend(shell_writes);
    let Some(outside) = writes
        .iter()
        .filter(|w| !w.is_empty() && !scope::is_device(w, cwd))
        .find(|w| !roots.holds(w, cwd))
    else {
        return;
    };
    state.scope_strikes = state.scope_strikes.saturating_add(1);
    let strikes = state.scope_strikes;
    let path = scope::resolve(outside, cwd).unwrap_or_else(|| outside.clone());
    let pauses = guard.scope.mode == ScopeMode::Pause && strikes >= guard.scope.pause_after;
    let rule = GuardRule::WriteOutsideScope.as_str();
    let then = match guard.scope.mode {
        ScopeMode::Pause if !pauses => format!("; the {} pauses", ordinal(guard.scope.pause_after)),
        _ => String::new(),
    };
    let reason = format!(
        "{rule}: {} {} ({} outside the scope{then})",
        tool.name,
        clip(&path),
        ordinal(strikes),
    );
    let verdict = |action| Verdict {
        path: Some(path.clone()),
        ..line_verdict(pane, facts, now, PolicyKind::Guard, rule, reason.clone())(action)
    };
    if pauses {
        out.push(verdict(Action::Pause { until: None }));
        out.push(verdict(Action::Escalate));
    } else {
        out.push(verdict(Action::Warn));
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The loop detector's verdicts on one line: a pause with its backoff,
/// and the message on the harness's input.
fn loop_line(
    settings: &LoopSettings,
    state: &mut PaneGovernance,
    pane: &PaneInfo,
    facts: &LineFacts,
    now: Timestamp,
    out: &mut Vec<Verdict>,
) {
    let Some(hit) = state.loops.observe(settings, facts) else {
        return;
    };
    let until = now.plus(hit.backoff);
    state.loop_resume_at = Some(until);
    state.loop_line = facts.line;
    let verdict = line_verdict(
        pane,
        facts,
        now,
        PolicyKind::Loop,
        hit.kind.as_str(),
        format!(
            "{} (loop {} in a row; paused {}s): {}",
            hit.kind.as_str(),
            hit.consecutive,
            hit.backoff.as_secs(),
            hit.detail
        ),
    );
    out.push(verdict(Action::Pause { until: Some(until) }));
    out.push(verdict(Action::Message {
        text: settings.message.clone(),
    }));
}

/// The line's cost: the harness's figure, else the price table's.
fn line_cost(prices: &BTreeMap<String, Price>, pane: &PaneInfo, facts: &LineFacts) -> f64 {
    if facts.cost_reported || facts.usage.cost_usd > 0.0 {
        return facts.usage.cost_usd;
    }
    // Most lines spend nothing: no price to look up.
    if facts.usage.is_zero() {
        return 0.0;
    }
    let price = pane
        .model
        .as_deref()
        .and_then(|m| prices.get(m))
        .or_else(|| pane.runtime.as_deref().and_then(|r| prices.get(r)))
        .or_else(|| prices.get("default"));
    price.map(|p| p.cost(facts)).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> PaneInfo {
        PaneInfo {
            id: "p".into(),
            cwd: Some("/work/repo".into()),
            ..PaneInfo::default()
        }
    }

    fn tool_line(line: u64, name: &str, args: &str) -> LineFacts {
        LineFacts {
            line,
            tool: Some(ToolFacts::new(name, args)),
            ..LineFacts::default()
        }
    }

    #[test]
    fn a_guarded_command_pauses_and_escalates_at_its_line() {
        let mut g = Governor::new(Policies::default());
        let v = g.observe(
            &info(),
            &tool_line(7, "bash", r#"{"command":"rm -rf /"}"#),
            Timestamp::from_millis(5),
        );
        let got: Vec<(u64, PolicyKind, &str)> = v
            .iter()
            .map(|v| (v.line, v.policy, v.action.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (7, PolicyKind::Guard, "pause"),
                (7, PolicyKind::Guard, "escalate")
            ]
        );
        assert_eq!(v[0].action, Action::Pause { until: None });
        let ok = g.observe(
            &info(),
            &tool_line(8, "bash", r#"{"command":"rm -rf ./build"}"#),
            Timestamp::from_millis(6),
        );
        assert!(ok.is_empty());
    }

    #[test]
    fn a_call_the_harness_holds_for_the_guard_is_denied_not_paused() {
        let mut g = Governor::new(Policies::default());
        let mut line = tool_line(3, "Bash", r#"{"command":"rm -rf /"}"#);
        if let Some(tool) = &mut line.tool {
            tool.gated = true;
        }
        let v = g.observe(&info(), &line, Timestamp::from_millis(5));
        let actions: Vec<&str> = v.iter().map(|v| v.action.as_str()).collect();
        assert_eq!(actions, ["deny", "escalate"]);
    }

    #[test]
    fn the_guard_can_kill_or_skip_a_rule() {
        let mut p = Policies::default();
        p.guard.response = GuardResponse::Kill;
        let mut g = Governor::new(p.clone());
        let v = g.observe(
            &info(),
            &tool_line(1, "bash", r#"{"command":"git push -f"}"#),
            Timestamp::default(),
        );
        assert_eq!(v[0].action, Action::Kill);
        p.guard.disabled = vec![GuardRule::GitForcePush];
        let mut g = Governor::new(p);
        assert!(g
            .observe(
                &info(),
                &tool_line(1, "bash", r#"{"command":"git push -f"}"#),
                Timestamp::default()
            )
            .is_empty());
    }

    #[test]
    fn a_loop_pauses_with_the_message_and_resumes_after_the_backoff() {
        let mut g = Governor::new(Policies::default());
        let t0 = Timestamp::from_millis(1_000);
        let mut verdicts = Vec::new();
        for line in 1..=5 {
            verdicts.extend(g.observe(&info(), &tool_line(line, "read", r#"{"path":"a"}"#), t0));
        }
        let got: Vec<(u64, &str)> = verdicts
            .iter()
            .map(|v| (v.line, v.action.as_str()))
            .collect();
        assert_eq!(got, [(5, "pause"), (5, "message")]);
        assert_eq!(
            verdicts[1].action,
            Action::Message {
                text: loops::RECOVERY_MESSAGE.into()
            }
        );
        let due = t0.plus(std::time::Duration::from_secs(60));
        assert_eq!(g.next_deadline(), Some(due));
        assert!(g
            .tick(Timestamp::from_millis(due.as_millis() - 1))
            .is_empty());
        let resumed = g.tick(due);
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].action, Action::Resume);
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn the_price_table_prices_token_only_harnesses() {
        let mut p = Policies::default();
        p.budgets.push(BudgetRule {
            name: "dollars".into(),
            scope: Scope::Global,
            unit: Unit::Usd,
            period: Period::Day,
            cap: 1.0,
            warn_at: 0.5,
        });
        p.prices.insert(
            "codex".into(),
            Price {
                input: 1.0,
                output: 10.0,
                ..Price::default()
            },
        );
        let mut g = Governor::new(p);
        let pane = PaneInfo {
            runtime: Some("codex".into()),
            ..info()
        };
        let mut f = LineFacts {
            line: 3,
            ..LineFacts::default()
        };
        f.usage.output_tokens = 100_000; // $1.00
        let v = g.observe(&pane, &f, Timestamp::default());
        assert_eq!(v[0].action.as_str(), "pause");
        assert_eq!(v[0].target, Target::All);
        // A pane's whole usage is priced the same way; the harness's own
        // figure wins where it gave one.
        assert_eq!(g.usage_cost(&pane, &f.usage), 1.0);
        assert_eq!(g.usage_cost(&info(), &f.usage), 0.0, "no price for pi");
        f.usage.cost_usd = 0.25;
        assert_eq!(g.usage_cost(&pane, &f.usage), 0.25);
    }

    /// Two panes' lines: a loop of identical reads, a guarded command,
    /// spend that passes a token budget, and plain lines between.
    fn mixed_lines() -> Vec<(PaneInfo, LineFacts)> {
        let other = PaneInfo {
            id: "q".into(),
            ..info()
        };
        let mut lines = Vec::new();
        for n in 1..=36u64 {
            let (pane, f) = match n % 12 {
                0..=5 => (info(), tool_line(n, "read", r#"{"path":"a"}"#)),
                6 => (info(), tool_line(n, "bash", r#"{"command":"rm -rf /"}"#)),
                7 | 8 => (other.clone(), tool_line(n, "read", r#"{"path":"b"}"#)),
                9 => {
                    let mut f = LineFacts {
                        line: n,
                        turn: true,
                        ..LineFacts::default()
                    };
                    f.usage.output_tokens = 20_000;
                    (other.clone(), f)
                }
                _ => (
                    info(),
                    LineFacts {
                        line: n,
                        ..LineFacts::default()
                    },
                ),
            };
            lines.push((pane, f));
        }
        lines
    }

    fn policies() -> Policies {
        let mut p = Policies::default();
        p.budgets.push(budget::BudgetRule::token_throttle());
        p
    }

    #[test]
    fn one_pane_s_lines_together_get_the_verdicts_of_each_line_alone() {
        let lines = mixed_lines();
        let mut alone = Governor::new(policies());
        let mut together = Governor::new(policies());
        let (mut want, mut got) = (Vec::new(), Vec::new());
        // Runs of one pane's lines, as reads bring them, at one time each.
        let mut i = 0;
        while i < lines.len() {
            let pane = &lines[i].0;
            let run = lines[i..]
                .iter()
                .take_while(|(p, _)| p.id == pane.id)
                .count();
            let facts: Vec<LineFacts> = lines[i..i + run].iter().map(|(_, f)| f.clone()).collect();
            let at = Timestamp::from_millis(1_000 + lines[i].1.line * 10_000);
            for f in &facts {
                want.extend(alone.observe(pane, f, at));
            }
            got.extend(together.observe_lines(pane, &facts, at));
            i += run;
        }
        for kind in [PolicyKind::Loop, PolicyKind::Guard, PolicyKind::Budget] {
            assert!(
                want.iter().any(|v| v.policy == kind),
                "the lines trip {kind:?}: {want:?}"
            );
        }
        assert_eq!(got, want);
        assert_eq!(together.next_deadline(), alone.next_deadline());
    }

    /// A pane in `/work/repo` with `../shared` in its scope, and a tool
    /// call there: the verdicts of a fresh governor, as (rule, action).
    fn first_verdicts(tool: &str, args: &str) -> Vec<(String, &'static str)> {
        let pane = PaneInfo {
            scope: vec!["../shared".into()],
            ..info()
        };
        let mut facts = tool_line(3, tool, args);
        facts.cwd = pane.cwd.clone();
        Governor::new(Policies::default())
            .observe(&pane, &facts, Timestamp::default())
            .into_iter()
            .map(|v| (v.rule, v.action.as_str()))
            .collect()
    }

    fn bash(cmd: &str) -> String {
        serde_json::json!({ "command": cmd }).to_string()
    }

    /// The (rule, action) pairs a call is expected to give.
    type Expected = &'static [(&'static str, &'static str)];

    #[test]
    fn scope_verdicts_for_each_rule() {
        const WARN: Expected = &[("write_outside_scope", "warn")];
        const NONE: Expected = &[];
        let guard =
            |rule: &'static str| -> Vec<(&str, &str)> { vec![(rule, "pause"), (rule, "escalate")] };
        let writes: &[(&str, String, Expected)] = &[
            // A harness's write and edit tools.
            ("Write", r#"{"file_path":"/etc/motd","content":"x"}"#.into(), WARN),
            ("Write", r#"{"file_path":"src/new.rs","content":"x"}"#.into(), NONE),
            ("Edit", r#"{"file_path":"/work/shared/a.md"}"#.into(), NONE),
            ("NotebookEdit", r#"{"notebook_path":"/home/u/n.ipynb"}"#.into(), WARN),
            ("write", r#"{"path":"../elsewhere/x"}"#.into(), WARN),
            ("write_file", r#"{"file_path":"/work/repo/ok"}"#.into(), NONE),
            ("replace", r#"{"file_path":"/opt/app/main.py"}"#.into(), WARN),
            ("edit", r#"{"filePath":"/tmp/x.ts"}"#.into(), WARN),
            (
                "patch",
                r#"{"patchText":"*** Begin Patch\n*** Update File: a.rs\n*** Add File: /srv/x\n*** End Patch"}"#.into(),
                WARN,
            ),
            ("file_change", r#"[{"path":"/work/repo/src/lib.rs","kind":"update"}]"#.into(), NONE),
            ("file_change", r#"[{"path":"/var/tmp/x","kind":"add"}]"#.into(), WARN),
            // Shell redirections and the programs that write a named file.
            ("bash", bash("echo x > /tmp/out"), WARN),
            ("bash", bash("make >> ../elsewhere/build.log"), WARN),
            ("bash", bash("cargo test 2>/dev/null > out.txt"), NONE),
            ("bash", bash("ls | tee /var/tmp/list"), WARN),
            ("bash", bash("ls | tee -a ./list"), NONE),
            ("bash", bash("cp a.txt /opt/"), WARN),
            ("bash", bash("cp -r src ../shared/backup"), NONE),
            ("bash", bash("mv build /srv/"), WARN),
            ("bash", bash("sed -i 's/a/b/' /home/u/.profile"), WARN),
            ("bash", bash("sed -i '' -e 's/a/b/' src/x.rs"), NONE),
            ("bash", bash("dd if=/dev/zero of=/var/tmp/img bs=1M count=1"), WARN),
            ("bash", bash("echo hi > \"$OUT\""), WARN),
            (
                "bash",
                bash("apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: /etc/cron.d/x\n+* * * * * true\n*** End Patch\nEOF"),
                WARN,
            ),
            ("bash", bash("cat /etc/hosts > ./hosts"), NONE),
            // Reading outside is no write.
            ("Read", r#"{"file_path":"/etc/passwd"}"#.into(), NONE),
            ("bash", bash("grep -r x /usr/share/doc"), NONE),
        ];
        let mut wrong = Vec::new();
        for (tool, args, want) in writes {
            let got = first_verdicts(tool, args);
            let got: Vec<(&str, &str)> = got.iter().map(|(r, a)| (r.as_str(), *a)).collect();
            if got != *want {
                wrong.push(format!("{tool} {args}: want {want:?}, got {got:?}"));
            }
        }
        // The destructive rules that honour the scope; outside it they
        // pause and escalate at once.
        let destructive: &[(&str, Vec<(&str, &str)>)] = &[
            ("git reset --hard", guard("git_discard")),
            (
                "git -C /srv/other reset --hard HEAD~1",
                guard("git_discard"),
            ),
            ("git clean -fdx", guard("git_discard")),
            ("find /srv -name '*.log' -delete", guard("rm_outside_cwd")),
            ("find ../shared/cache -delete", vec![]),
            ("find . -name '*.o' -delete", vec![]),
            ("rm -rf ../shared/tmp", vec![]),
            ("rm -rf ../shared", guard("rm_outside_cwd")),
            ("chmod -R 777 /srv", guard("chmod_outside_scope")),
            ("chmod -R -w /srv", guard("chmod_outside_scope")),
            ("chmod --recursive a+r ..", guard("chmod_outside_scope")),
            ("chown -R me:staff /home/u", guard("chmod_outside_scope")),
            ("chgrp -R staff /var/www", guard("chmod_outside_scope")),
            ("sudo chown -R root /", guard("chmod_outside_scope")),
            (
                "chmod -R --reference=a.txt /opt",
                guard("chmod_outside_scope"),
            ),
            ("chmod -R u+w .", vec![]),
            ("chmod -R 755 /work/repo", vec![]),
            ("chown -R me ../shared", vec![]),
            ("chmod 644 /etc/x.conf", vec![]),
            ("chmod -R 755 $DIR", guard("chmod_outside_scope")),
            // A write the destructive guard pauses for is not also a strike.
            ("echo x > /etc/hosts", guard("system_config")),
        ];
        for (cmd, want) in destructive {
            let got = first_verdicts("bash", &bash(cmd));
            let got: Vec<(&str, &str)> = got.iter().map(|(r, a)| (r.as_str(), *a)).collect();
            if got != *want {
                wrong.push(format!("{cmd}: want {want:?}, got {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// One pane's outside-scope writes in a row, under `policies`: the
    /// actions of each call's verdicts.
    fn strikes(policies: Policies, calls: &[(&str, &str)]) -> Vec<Vec<&'static str>> {
        let mut g = Governor::new(policies);
        calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| {
                let mut f = tool_line(i as u64 + 1, tool, args);
                f.cwd = info().cwd;
                g.observe(&info(), &f, Timestamp::default())
                    .iter()
                    .map(|v| v.action.as_str())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_first_write_outside_the_scope_warns_the_second_pauses() {
        let etc = r#"{"file_path":"/etc/motd"}"#;
        let tmp = r#"{"file_path":"/tmp/x"}"#;
        let inside = r#"{"file_path":"src/a.rs"}"#;
        let calls = [
            ("Write", etc),
            // The same call again at once (a hook, then the stream): once.
            ("Write", etc),
            ("Write", inside),
            ("Write", tmp),
            ("Edit", etc),
        ];
        let got = strikes(Policies::default(), &calls);
        assert_eq!(
            got,
            [
                vec!["warn"],
                vec![],
                vec![],
                vec!["pause", "escalate"],
                vec!["pause", "escalate"]
            ]
        );
        // The verdict names the rule and the file, resolved.
        let mut g = Governor::new(Policies::default());
        let mut f = tool_line(9, "write", r#"{"path":"../x/../y"}"#);
        f.cwd = info().cwd;
        let v = g.observe(&info(), &f, Timestamp::default());
        assert_eq!(v[0].rule, "write_outside_scope");
        assert_eq!(v[0].path.as_deref(), Some("/work/y"));
        assert_eq!(
            v[0].reason,
            "write_outside_scope: write /work/y (1st outside the scope; the 2nd pauses)"
        );
        assert_eq!(v[0].line, 9);

        // Warn-only never pauses; a later N pauses later; off, or the rule
        // disabled, or the guard off, says nothing.
        let mut warn_only = Policies::default();
        warn_only.guard.scope.mode = ScopeMode::Warn;
        let three = [("Write", etc), ("Write", tmp), ("Edit", etc)];
        assert_eq!(strikes(warn_only, &three), [["warn"], ["warn"], ["warn"]]);
        let mut third = Policies::default();
        third.guard.scope.pause_after = 3;
        assert_eq!(
            strikes(third, &three),
            [vec!["warn"], vec!["warn"], vec!["pause", "escalate"]]
        );
        let mut off = Policies::default();
        off.guard.scope.mode = ScopeMode::Off;
        let mut disabled = Policies::default();
        disabled.guard.disabled = vec![GuardRule::WriteOutsideScope];
        let mut guard_off = Policies::default();
        guard_off.guard.enabled = false;
        for p in [off, disabled, guard_off] {
            assert!(strikes(p, &three).iter().all(Vec::is_empty));
        }
        // `[guard] scope_paths` widen every pane's scope.
        let mut tmp_ok = Policies::default();
        tmp_ok.guard.scope.paths = vec!["/tmp".into()];
        assert_eq!(strikes(tmp_ok, &[("Write", tmp)]), [Vec::<&str>::new()]);
    }

    #[test]
    fn a_pane_with_no_known_directory_and_no_scope_is_not_judged() {
        let mut g = Governor::new(Policies::default());
        let f = tool_line(1, "Write", r#"{"file_path":"/etc/motd"}"#);
        assert!(g.observe(&info(), &f, Timestamp::default()).is_empty());
        // A declared path is enough to judge by.
        let pane = PaneInfo {
            scope: vec!["/srv/data".into()],
            ..info()
        };
        let v = g.observe(
            &pane,
            &tool_line(2, "Write", r#"{"file_path":"/etc/x"}"#),
            Timestamp::default(),
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].action, Action::Warn);
    }

    #[test]
    fn hashes_are_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
