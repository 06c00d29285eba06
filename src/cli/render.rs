//! Pure text rendering for the CLI: tables, summaries and one-line events.
//!
//! Nothing here does I/O or reads a clock; "now" is always passed in (for
//! snapshots it is the daemon's own `observed_at`, so ages are right even
//! when the operator's clock differs). That keeps every view unit-testable
//! with hand-built wire values.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::value::RawValue;

use crate::protocol::{
    FoldReport, PaneV1, PaneV2, SessionSummary, SnapshotV1, SnapshotV2, StatusData, WatchEvent,
    WatchKind, WireExit,
};

pub use crate::terminal_text::{escape_controls, escape_lines, json_for_terminal};

/// A left-aligned text table; the last column is not padded.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; control characters in a cell are escapes (one cell, one
    /// line, whatever an agent put in it).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| escape_controls(&c).into_owned())
                .collect(),
        );
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(cols) {
                if i + 1 == cols {
                    line.push_str(c);
                } else {
                    let pad = widths[i] - c.chars().count();
                    line.push_str(c);
                    line.extend(std::iter::repeat_n(' ', pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// The first 8 characters of an id (UUIDs are unique enough there).
pub fn short_id(id: &str) -> &str {
    match id.char_indices().nth(8) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// A compact age: `850ms`, `42s`, `3m05s`, `2h07m`, `3d04h`.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        format!("{}ms", d.as_millis())
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// A token count: `950`, `12.3k`, `4.5M`.
pub fn format_tokens(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        format!("{:.1}M", n as f64 / 1e6)
    }
}

/// Dollars with four decimals; `-` when nothing was spent or reported.
pub fn format_cost(usd: f64) -> String {
    if usd > 0.0 {
        format!("${usd:.4}")
    } else {
        "-".to_string()
    }
}

pub fn format_exit(e: &WireExit) -> String {
    match (e.code, e.signal) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "unknown".to_string(),
    }
}

/// Parses an RFC 3339 wire time (the daemon prints UTC with millis).
pub fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

/// `now - then` for two wire times; `-` when either does not parse.
fn age_between(now: Option<SystemTime>, then: Option<&str>) -> String {
    match (now, then.and_then(parse_time)) {
        (Some(now), Some(then)) => format_age(now.duration_since(then).unwrap_or(Duration::ZERO)),
        _ => "-".to_string(),
    }
}

/// `working`, `working stalled`, `blocked paused`…; `stopped` for a pane a
/// planned stop ended. Its own `state` then is how the stream left it (the
/// SIGTERM's exit reads as `error`), which the v1 snapshot and `status`
/// map to `done`: a planned stop is not a failure, so the table says so.
pub fn state_cell(p: &PaneV2) -> String {
    let stopped = p
        .supervision
        .as_ref()
        .is_some_and(|s| s.actual == "stopped");
    let mut s = if stopped {
        "stopped".to_string()
    } else {
        p.state.as_str().to_string()
    };
    if p.stalled {
        s.push_str(" stalled");
    }
    if p.paused {
        s.push_str(" paused");
    }
    if p.unreachable_since.is_some() {
        s.push_str(" unreachable");
    }
    s
}

/// A pane's short id; a fleet row's keeps its host (`h2/0b7e5c1a`).
fn id_cell(p: &PaneV2) -> String {
    let local = p
        .host
        .as_deref()
        .and_then(|h| p.id.strip_prefix(h)?.strip_prefix('/'));
    match (p.host.as_deref(), local) {
        (Some(h), Some(local)) => format!("{h}/{}", short_id(local)),
        _ => short_id(&p.id).to_string(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

fn tool_cell(p: &PaneV2) -> String {
    match &p.last_tool {
        Some(t) if t.summary.is_empty() => t.name.clone(),
        Some(t) => truncate(&format!("{}: {}", t.name, t.summary), 40),
        None => "-".to_string(),
    }
}

/// The `colibri snapshot` table (schema v2).
pub fn snapshot_table(snap: &SnapshotV2) -> String {
    let now = parse_time(&snap.observed_at);
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "RUNTIME",
        "STATE",
        "AGE",
        "LAST EVENT",
        "TOOL",
        "TOKENS in/out",
        "COST",
    ]);
    for p in &snap.panes {
        t.row(vec![
            id_cell(p),
            p.name.clone().unwrap_or_else(|| "-".into()),
            p.runtime
                .map_or_else(|| p.agent.clone(), |r| r.as_str().to_string()),
            state_cell(p),
            age_between(now, Some(&p.state_since)),
            match &p.last_event_at {
                Some(at) => format!("{} ago", age_between(now, Some(at))),
                None => "never".to_string(),
            },
            tool_cell(p),
            format!(
                "{}/{}",
                format_tokens(p.usage.input_tokens),
                format_tokens(p.usage.output_tokens)
            ),
            format_cost(p.usage.cost_usd),
        ]);
    }
    let mut out = format!(
        "{} — {} pane(s) at {}\n",
        snap.host,
        snap.panes.len(),
        snap.observed_at
    );
    out.push_str(&t.render());
    for p in snap.panes.iter().filter(|p| !p.holds.is_empty()) {
        let name = p
            .name
            .clone()
            .unwrap_or_else(|| short_id(&p.id).to_string());
        for h in &p.holds {
            out.push_str(&format!("{name} {}\n", hold_text(h)));
        }
    }
    escape_lines(&out)
}

/// Why a pane is paused, in one line: "paused by the guard
/// (rm_outside_cwd) since …: rm -rf /; until an operator resumes it".
pub fn hold_text(h: &crate::protocol::WireHold) -> String {
    let by = match (h.by.as_str(), h.rule.as_deref()) {
        ("operator", _) => "the operator".to_string(),
        ("budget", Some(rule)) => format!("budget {rule}"),
        ("loop", Some(rule)) => format!("loop detection ({})", rule.replace('_', " ")),
        (by, Some(rule)) => format!("the {by} ({rule})"),
        (by, None) => by.to_string(),
    };
    let mut text = format!("paused by {by} since {}", h.since);
    if let Some(reason) = &h.reason {
        text.push_str(&format!(": {reason}"));
    }
    match &h.until {
        Some(at) => text.push_str(&format!("; resumes at {at}")),
        None => text.push_str("; until an operator resumes it"),
    }
    text
}

/// The contract's v1 snapshot as a table (fewer facts than v2).
pub fn snapshot_v1_table(snap: &SnapshotV1) -> String {
    let now = parse_time(&snap.observed_at);
    let mut t = Table::new(&["ID", "AGENT", "STATE", "LAST EVENT", "CWD"]);
    for p in &snap.panes {
        let PaneV1 {
            id,
            agent,
            state,
            last_event_at,
            cwd,
            stalled,
            ..
        } = p;
        t.row(vec![
            short_id(id).to_string(),
            agent.clone(),
            if *stalled {
                format!("{state} stalled")
            } else {
                state.to_string()
            },
            match last_event_at {
                Some(at) => format!("{} ago", age_between(now, Some(at))),
                None => "never".to_string(),
            },
            cwd.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = format!(
        "{} — {} pane(s) at {}\n",
        snap.host,
        snap.panes.len(),
        snap.observed_at
    );
    out.push_str(&t.render());
    escape_lines(&out)
}

/// The `colibri status` summary; `now` is the operator's clock, used only
/// for the daemon's uptime.
pub fn status_summary(s: &StatusData, now: SystemTime) -> String {
    let mut out = String::new();
    let uptime = age_between(Some(now), Some(&s.started_at));
    let _ = writeln!(
        out,
        "colibrid {} on {} (pid {}, up {uptime}, scope {})",
        s.version, s.host, s.pid, s.scope
    );
    let states: Vec<String> = s
        .states
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let states = if states.is_empty() {
        "none".to_string()
    } else {
        states.join(", ")
    };
    let _ = writeln!(
        out,
        "agents:   {} ({} running, {} paused): {states}; {} stalled",
        s.agents, s.running, s.paused, s.stalled
    );
    let _ = writeln!(
        out,
        "stall:    after {}",
        format_age(Duration::from_millis(s.stall_after_ms))
    );
    let _ = writeln!(out, "sessions: {}", s.sessions);
    if let Some(why) = &s.alerts_unreachable {
        let _ = writeln!(out, "alerts:   not reaching syslog: {why}");
    }
    if !s.signals.is_empty() {
        let received: Vec<String> = s.signals.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "signals:  {}", received.join(", "));
    }
    if s.logs.failed_writes > 0 || s.logs.lost_bytes > 0 {
        let _ = writeln!(
            out,
            "logs:     {} failed writes, {} bytes lost, {} bytes waiting{}",
            s.logs.failed_writes,
            s.logs.lost_bytes,
            s.logs.pending_bytes,
            s.logs
                .last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    if s.reload_errors > 0 || !s.restart_needed.is_empty() {
        let waiting = match s.restart_needed.as_slice() {
            [] => String::new(),
            keys => format!("; restart to apply {}", keys.join(", ")),
        };
        let _ = writeln!(
            out,
            "config:   {} reload(s), {} refused{waiting}",
            s.reloads, s.reload_errors
        );
    }
    if s.alerts.dropped > 0 || s.alerts.truncated > 0 {
        let _ = writeln!(
            out,
            "alerts:   {} sent, {} dropped, {} cut to fit",
            s.alerts.sent, s.alerts.dropped, s.alerts.truncated
        );
    }
    let _ = writeln!(
        out,
        "clients:  {} connection(s), {} watcher(s)",
        s.connections, s.watchers
    );
    escape_lines(&out)
}

/// `get-session`'s data as `colibri session` prints it: indented, its
/// fields in key order, and each record exactly as the log holds it, one a
/// line. A record is agent text, valid JSON that a `Value` may refuse (130
/// levels of nesting, `1e400`, a lone surrogate escape; docs/RELIABILITY.md
/// S2), so records stay raw; so does any field that is not what the daemon
/// sends (printed as it came rather than refused).
pub fn session_dump(data: &RawValue) -> serde_json::Result<String> {
    /// One field of the dump, as shown.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Shown {
        Records(Vec<Box<RawValue>>),
        Parsed(serde_json::Value),
        Raw(Box<RawValue>),
    }
    let Ok(fields) = serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(data.get()) else {
        return Ok(data.get().to_string());
    };
    let shown: BTreeMap<String, Shown> = fields
        .into_iter()
        .map(|(name, raw)| {
            let parsed = if name == "records" {
                serde_json::from_str(raw.get()).map(Shown::Records)
            } else {
                serde_json::from_str(raw.get()).map(Shown::Parsed)
            };
            (name, parsed.unwrap_or(Shown::Raw(raw)))
        })
        .collect();
    serde_json::to_string_pretty(&shown).map(|t| json_for_terminal(&t).into_owned())
}

/// The `colibri sessions` table.
pub fn sessions_table(list: &[SessionSummary]) -> String {
    let mut t = Table::new(&[
        "ID", "RUNTIME", "STATE", "TURNS", "BYTES", "EXIT", "CREATED", "PANES",
    ]);
    for s in list {
        t.row(vec![
            s.id.clone(),
            s.runtime
                .map_or_else(|| "-".into(), |r| r.as_str().to_string()),
            s.state
                .map_or_else(|| "-".into(), |st| st.as_str().to_string()),
            s.turn_count.to_string(),
            s.bytes.to_string(),
            s.exit.as_ref().map_or_else(|| "-".into(), format_exit),
            s.created_at.clone(),
            s.panes
                .iter()
                .map(|p| short_id(p))
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    t.render()
}

/// An `activity` post as words: who, what, the task, the message.
fn activity_line(
    who: String,
    what: &str,
    task_id: Option<u64>,
    message: &Option<String>,
) -> String {
    let mut line = format!("{who} {what}");
    if let Some(id) = task_id {
        line.push_str(&format!(" (task {id})"));
    }
    if let Some(m) = message {
        line.push_str(": ");
        line.push_str(m);
    }
    line
}

/// One `watch` event as a readable line. `names` maps pane ids to the names
/// seen in `attached` events so later lines can show them.
pub fn watch_line(ev: &WatchEvent, names: &BTreeMap<String, String>) -> String {
    let time = ev.at.get(11..23).unwrap_or(&ev.at);
    let who = |pane: &str| match names.get(pane) {
        Some(n) => format!("{} ({n})", short_id(pane)),
        None => short_id(pane).to_string(),
    };
    let what = match &ev.kind {
        WatchKind::Attached {
            pane,
            agent,
            name,
            pid,
            runtime,
        } => {
            let mut s = format!("{} attached: {agent}", short_id(pane));
            if let Some(r) = runtime {
                let _ = write!(s, " runtime {}", r.as_str());
            }
            if let Some(n) = name {
                let _ = write!(s, " name {n}");
            }
            if let Some(p) = pid {
                let _ = write!(s, " pid {p}");
            }
            s
        }
        WatchKind::Runtime { pane, runtime } => {
            format!("{} runtime: {}", who(pane), runtime.as_str())
        }
        WatchKind::State {
            pane,
            from,
            to,
            reason,
        } => match reason {
            Some(r) => format!("{} {from} → {to} ({r})", who(pane)),
            None => format!("{} {from} → {to}", who(pane)),
        },
        WatchKind::Stalled { pane, silent_ms } => {
            format!(
                "{} stalled (silent {})",
                who(pane),
                format_age(Duration::from_millis(*silent_ms))
            )
        }
        WatchKind::ApprovalOpened { pane, approval } => {
            format!("{} asks {}: {}", who(pane), approval.id, approval.question)
        }
        WatchKind::ApprovalAnswered {
            pane,
            approval,
            decision,
            by,
            ..
        } => format!("{} {approval} answered: {decision} (by {by})", who(pane)),
        WatchKind::ApprovalExpired {
            pane,
            approval,
            reason,
        } => format!("{} {approval} expired ({reason})", who(pane)),
        WatchKind::ApprovalEscalated {
            pane,
            approval,
            pending_ms,
        } => format!(
            "{} {approval} escalated (unanswered for {})",
            who(pane),
            format_age(Duration::from_millis(*pending_ms))
        ),
        WatchKind::Unstalled { pane } => format!("{} no longer stalled", who(pane)),
        WatchKind::Removed { pane } => format!("{} removed", who(pane)),
        WatchKind::Paused { pane } => format!("{} paused", who(pane)),
        WatchKind::PauseBroken { pane, reason } => {
            format!("{} ran while paused ({reason}); stopped again", who(pane))
        }
        WatchKind::Resumed { pane } => format!("{} resumed", who(pane)),
        WatchKind::Exited {
            pane,
            code,
            signal,
            planned,
        } => {
            let how = format_exit(&WireExit {
                code: *code,
                signal: *signal,
            });
            let what = if *planned { "stopped" } else { "exited" };
            format!("{} {what} ({how})", who(pane))
        }
        WatchKind::RestartScheduled {
            pane,
            attempt,
            next_at,
        } => {
            format!("{} restart #{attempt} scheduled at {next_at}", who(pane))
        }
        WatchKind::Restarted {
            pane,
            generation,
            pid,
        } => {
            format!(
                "{} restarted (generation {generation}, pid {pid})",
                who(pane)
            )
        }
        WatchKind::RestartsExhausted { pane, attempts } => {
            format!(
                "{} not restarted again ({attempts} restarts used)",
                who(pane)
            )
        }
        WatchKind::Heartbeat { panes } => format!("heartbeat ({panes} pane(s))"),
        WatchKind::Task {
            task_id,
            status,
            pane,
        } => match pane {
            Some(p) => format!("task {task_id} {} ({})", status.as_str(), who(p)),
            None => format!("task {task_id} {}", status.as_str()),
        },
        WatchKind::TaskCompleted {
            pane,
            task_id,
            message,
            ..
        } => activity_line(who(pane), "completed a task", *task_id, message),
        WatchKind::ApprovalRequest {
            pane,
            task_id,
            message,
            ..
        } => activity_line(who(pane), "asks for approval", *task_id, message),
        WatchKind::AgentError {
            pane,
            task_id,
            message,
            ..
        } => activity_line(who(pane), "reports an error", *task_id, message),
        WatchKind::Gap { since, resumes_at } => format!(
            "gap: events after #{since} up to #{resumes_at} are no longer journaled (take a snapshot)"
        ),
        WatchKind::Verdict { pane, verdict } => format!(
            "{} {} {} ({}): {}",
            who(pane),
            verdict.policy_name(),
            verdict.action,
            verdict.rule,
            verdict.reason
        ),
        WatchKind::Hostop {
            pane,
            op,
            by,
            outcome,
            exit_code,
            signal,
            ms,
            ..
        } => {
            let by = pane.as_deref().map_or_else(|| by.clone(), who);
            let how = match (exit_code, signal) {
                (_, Some(sig)) => format!(", signal {sig}"),
                (Some(code), None) => format!(", exit {code}"),
                (None, None) => String::new(),
            };
            format!(
                "{by} hostop {op}: {outcome} ({}{how})",
                format_age(Duration::from_millis(*ms))
            )
        }
    };
    escape_controls(&format!("{time} #{} {what}", ev.seq)).into_owned()
}

/// `colibri fold tasks.jsonl` without `--json`: each recorded dispatch
/// plan, what it gave, and whether running it again gives the same.
pub fn journal_replay_text(r: &crate::core::dispatch_replay::JournalReplay) -> String {
    use crate::core::dispatch::Assignment;
    let pairs = |given: &[Assignment]| -> String {
        if given.is_empty() {
            return "nothing".to_string();
        }
        let each: Vec<String> = given
            .iter()
            .map(|a| format!("task {} to {}", a.task, escape_controls(&a.pane)))
            .collect();
        each.join(", ")
    };
    let mut out = String::new();
    for p in &r.plans {
        let at = crate::core::time::Timestamp::from_millis(p.at).to_rfc3339();
        let _ = writeln!(
            out,
            "line {}: {at}: {} idle: gave {}",
            p.line,
            p.idle,
            pairs(&p.given)
        );
        if !p.same() {
            let _ = writeln!(out, "  DIFFERS: run again it gives {}", pairs(&p.replayed));
        }
        if p.handed_over.len() < p.given.len() {
            let _ = writeln!(
                out,
                "  handed over: {} of {}",
                p.handed_over.len(),
                p.given.len()
            );
        }
    }
    let steps = |steps: &[crate::core::runners::RunnerStep]| -> String {
        use crate::core::runners::RunnerStep;
        let each: Vec<String> = steps
            .iter()
            .map(|s| match s {
                RunnerStep::Start { role } => {
                    format!("start an agent for {}", escape_controls(role))
                }
                RunnerStep::Stop { pane } => format!("stop {}", escape_controls(pane)),
            })
            .collect();
        if each.is_empty() {
            "nothing".to_string()
        } else {
            each.join(", ")
        }
    };
    for p in &r.runners {
        let at = crate::core::time::Timestamp::from_millis(p.at).to_rfc3339();
        let _ = writeln!(out, "line {}: {at}: runners: {}", p.line, steps(&p.steps));
        if !p.same() {
            let _ = writeln!(out, "  DIFFERS: run again it gives {}", steps(&p.replayed));
        }
    }
    for x in &r.rungs {
        let at = crate::core::time::Timestamp::from_millis(x.at).to_rfc3339();
        let _ = writeln!(
            out,
            "line {}: {at}: pane {} {}: level {} ({})",
            x.line,
            escape_controls(&x.pane),
            escape_controls(&x.cause),
            x.rung.level(),
            x.rung.as_str()
        );
        if x.replayed != x.rung {
            let _ = writeln!(
                out,
                "  DIFFERS: climbed again it is level {} ({})",
                x.replayed.level(),
                x.replayed.as_str()
            );
        }
    }
    // "N replayed, all the same" or "N replayed, M differ".
    let tally = |kind: &str, total: usize, differ: usize| {
        let verdict = match differ {
            0 => "all the same".to_string(),
            n => format!("{n} differ"),
        };
        format!("{kind:<9} {total} replayed, {verdict}\n")
    };
    out.push_str("---\n");
    out.push_str(&tally("plans:", r.plans.len(), r.differing().count()));
    if !r.runners.is_empty() {
        let differ = r.runners.iter().filter(|p| !p.same()).count();
        out.push_str(&tally("runners:", r.runners.len(), differ));
    }
    if !r.rungs.is_empty() {
        let differ = r.rungs.iter().filter(|x| x.replayed != x.rung).count();
        out.push_str(&tally("rungs:", r.rungs.len(), differ));
    }
    let _ = writeln!(out, "events:   {} task event(s)", r.events);
    if r.unplanned > 0 {
        let _ = writeln!(
            out,
            "unplanned: {} hand-over(s) with no plan recorded (a journal from before plans were kept, or compacted)",
            r.unplanned
        );
    }
    if r.skipped > 0 {
        let _ = writeln!(out, "skipped:  {} unreadable line(s)", r.skipped);
    }
    out
}

/// `colibri fold` without `--json`: the timeline, then a summary.
pub fn fold_text(r: &FoldReport) -> String {
    let mut out = String::new();
    // Line 0 is no line of the input: the pane's start (first) or its
    // exit (after it).
    for (i, step) in r.timeline.iter().enumerate() {
        let _ = match (step.line, i) {
            (0, 0) => writeln!(out, "start: {}", step.state),
            (0, _) => writeln!(out, "exit: {}", step.state),
            (line, _) => writeln!(out, "line {line}: {}", step.state),
        };
    }
    let _ = writeln!(out, "---");
    if let Some(pane) = &r.pane {
        let _ = write!(out, "pane:     {}", escape_controls(pane));
        if !r.other_panes.is_empty() {
            let others: Vec<_> = r.other_panes.iter().map(|p| escape_controls(p)).collect();
            let _ = write!(
                out,
                " (the log's other panes, left out; fold one with --pane: {})",
                others.join(", ")
            );
        }
        let _ = writeln!(out);
    }
    let stalled = if r.stalled { " (stalled)" } else { "" };
    let _ = writeln!(out, "state:    {}{stalled}", r.state);
    let _ = writeln!(
        out,
        "runtime:  {}",
        r.runtime.map_or("unknown", |rt| rt.as_str())
    );
    if let Some(id) = &r.session_id {
        let _ = writeln!(out, "session:  {}", escape_controls(id));
    }
    if let Some(cwd) = &r.cwd {
        let _ = writeln!(out, "cwd:      {}", escape_controls(cwd));
    }
    let c = &r.counters;
    let _ = writeln!(
        out,
        "lines:    {} event(s) ({} unknown), {} malformed, {} oversize; {} bytes",
        c.events, c.unknown, c.malformed, c.oversize, c.bytes
    );
    let u = &r.usage;
    let _ = writeln!(
        out,
        "usage:    {} in, {} out, {} cache read, {} cache write; cost {}",
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        format_cost(u.cost_usd)
    );
    if let Some(t) = &r.last_tool {
        let tool = format!("{}: {}", t.name, t.summary);
        let _ = writeln!(out, "tool:     {}", escape_controls(&tool));
    }
    if let Some(b) = &r.blocked_reason {
        let _ = writeln!(out, "blocked:  {}", escape_controls(b));
    }
    if let Some(e) = &r.last_error {
        let _ = writeln!(out, "error:    {}", escape_controls(e));
    }
    if let Some(e) = &r.exit {
        let _ = writeln!(out, "exit:     {}", format_exit(e));
    }
    for v in &r.verdicts {
        let line = format!(
            "line {}: {} {} ({}): {}",
            v.line,
            v.policy_name(),
            v.action,
            v.rule,
            v.reason
        );
        let _ = writeln!(out, "verdict:  {}", escape_controls(&line));
    }
    for h in &r.hostops {
        let how = match (h.exit_code, h.signal) {
            (_, Some(sig)) => format!(" (signal {sig})"),
            (Some(code), None) => format!(" (exit {code})"),
            (None, None) => String::new(),
        };
        let params: Vec<String> = h.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let line = format!(
            "line {}: {} {}: {}{how}",
            h.line,
            h.op,
            params.join(" "),
            h.outcome
        );
        let _ = writeln!(out, "hostop:   {}", escape_controls(&line));
    }
    for p in &r.prompts {
        let line = format!("line {}: {}: {}", p.line, p.by, truncate(&p.text, 120));
        let _ = writeln!(out, "prompt:   {}", escape_controls(&line));
    }
    escape_lines(&out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::state::AgentState;
    use crate::core::taxonomy::Runtime;
    use crate::protocol::{WireCounters, WireTool, WireUsage, SNAPSHOT_V2};
    use std::borrow::Cow;

    pub(crate) fn pane(id: &str, state: AgentState) -> PaneV2 {
        PaneV2 {
            id: id.into(),
            name: None,
            agent: "replay".into(),
            runtime: None,
            state,
            stalled: false,
            paused: false,
            state_since: "2026-05-27T12:00:00.000Z".into(),
            started_at: "2026-05-27T11:59:00.000Z".into(),
            last_event_at: None,
            stall_after_ms: 3000,
            session_id: None,
            daemon_session: None,
            cwd: None,
            jail: None,
            pid: None,
            generation: 0,
            counters: WireCounters::default(),
            usage: WireUsage::default(),
            usage_total: None,
            last_tool: None,
            last_error: None,
            blocked_reason: None,
            exit: None,
            restart: None,
            supervision: None,
            approvals: Vec::new(),
            holds: Vec::new(),
            host: None,
            unreachable_since: None,
        }
    }

    #[test]
    fn a_fleet_row_keeps_its_host_and_says_unreachable() {
        let mut p = pane("h2/0b7e5c1a-9d2f", AgentState::Idle);
        p.host = Some("h2".into());
        assert_eq!(id_cell(&p), "h2/0b7e5c1a");
        assert_eq!(state_cell(&p), "idle");
        p.unreachable_since = Some("2026-05-27T12:00:00.000Z".into());
        assert_eq!(state_cell(&p), "idle unreachable");
        assert_eq!(
            id_cell(&pane("0b7e5c1a-9d2f", AgentState::Idle)),
            "0b7e5c1a"
        );
    }

    #[test]
    fn snapshot_table_has_every_column_and_derived_flags() {
        let mut a = pane("0b7e5c1a-9d2f-4c3e-8a1b-112233445566", AgentState::Working);
        a.name = Some("zot-stall".into());
        a.runtime = Some(Runtime::Zot);
        a.stalled = true;
        a.last_event_at = Some("2026-05-27T12:00:02.500Z".into());
        a.last_tool = Some(WireTool {
            name: "bash".into(),
            summary: "go test ./...".into(),
            at: String::new(),
        });
        a.usage = WireUsage {
            input_tokens: 8123,
            output_tokens: 211,
            cost_usd: 0.0305,
            ..WireUsage::default()
        };
        let mut b = pane("ffff0000-1111", AgentState::Blocked);
        b.paused = true;
        let snap = SnapshotV2 {
            schema: SNAPSHOT_V2.into(),
            host: "buildbox".into(),
            observed_at: "2026-05-27T12:01:05.000Z".into(),
            panes: vec![a, b],
        };
        let text = snapshot_table(&snap);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "buildbox — 2 pane(s) at 2026-05-27T12:01:05.000Z");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "ID", "NAME", "RUNTIME", "STATE", "AGE", "LAST", "EVENT", "TOOL", "TOKENS",
                "in/out", "COST"
            ]
        );
        let row_a: Vec<&str> = lines[2]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            row_a,
            [
                "0b7e5c1a",
                "zot-stall",
                "zot",
                "working stalled",
                "1m05s",
                "1m02s ago",
                "bash: go test ./...",
                "8.1k/211",
                "$0.0305"
            ]
        );
        let row_b: Vec<&str> = lines[3]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            row_b,
            [
                "ffff0000",
                "-",
                "replay",
                "blocked paused",
                "1m05s",
                "never",
                "-",
                "0/0",
                "-"
            ]
        );
        // Columns line up: every row's STATE cell starts where the header's does.
        let col = lines[1].find("STATE").expect("header");
        assert_eq!(lines[2].find("working"), Some(col));
        assert_eq!(lines[3].find("blocked"), Some(col));
    }

    #[test]
    fn a_planned_stop_shows_stopped_not_the_panes_error() {
        let mut p = pane("0b7e5c1a", AgentState::Error);
        assert_eq!(state_cell(&p), "error", "a failure stays one");
        p.supervision = Some(crate::protocol::WireSupervision {
            wanted: "down".into(),
            actual: "stopped".into(),
            stopped_by: Some("operator".into()),
            stop_reason: None,
            declared: false,
        });
        assert_eq!(state_cell(&p), "stopped");
        if let Some(s) = p.supervision.as_mut() {
            s.actual = "exited".into();
        }
        assert_eq!(state_cell(&p), "error", "an exit of its own is its state");
    }

    #[test]
    fn control_characters_are_escaped_tabs_and_text_kept() {
        assert!(matches!(escape_controls("plain\ttext é"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]52;c;SGk=\u{7}\u{1b}[2J\r\n\u{7f}\u{9b}31m"),
            "\\x1b]52;c;SGk=\\x07\\x1b[2J\\x0d\\x0a\\x7f\\u{9b}31m"
        );
        assert_eq!(escape_lines("a\u{1b}c\nb\r\n"), "a\\x1bc\nb\\x0d\n");
        // A right-to-left override would show this command reversed.
        assert_eq!(
            escape_controls("rm -rf \u{202e}/ \u{2066}x\u{2069}\u{200f}"),
            "rm -rf \\u{202e}/ \\u{2066}x\\u{2069}\\u{200f}"
        );
        assert!(matches!(escape_controls("שלום عربي"), Cow::Borrowed(_)));
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x\ny".into(), "\u{1b}]0;title\u{7}".into()]);
        assert_eq!(t.render(), "A       B\nx\\x0ay  \\x1b]0;title\\x07\n");
    }

    #[test]
    fn ages_tokens_and_costs_are_compact() {
        assert_eq!(format_age(Duration::from_millis(850)), "850ms");
        assert_eq!(format_age(Duration::from_secs(42)), "42s");
        assert_eq!(format_age(Duration::from_secs(185)), "3m05s");
        assert_eq!(format_age(Duration::from_secs(7620)), "2h07m");
        assert_eq!(
            format_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d04h"
        );
        assert_eq!(format_tokens(950), "950");
        assert_eq!(format_tokens(12_345), "12.3k");
        assert_eq!(format_tokens(4_500_000), "4.5M");
        assert_eq!(format_cost(0.0), "-");
        assert_eq!(format_cost(0.41720), "$0.4172");
        assert_eq!(short_id("abc"), "abc");
    }

    #[test]
    fn watch_lines_name_the_pane_and_the_change() {
        let mut names = BTreeMap::new();
        names.insert("0b7e5c1a-9d2f".to_string(), "pi-dialog".to_string());
        let ev = WatchEvent {
            epoch: None,
            seq: 12,
            at: "2026-05-27T12:00:03.250Z".into(),
            kind: WatchKind::State {
                pane: "0b7e5c1a-9d2f".into(),
                from: AgentState::Working,
                to: AgentState::Blocked,
                reason: Some("Apply the migration?".into()),
            },
        };
        assert_eq!(
            watch_line(&ev, &names),
            "12:00:03.250 #12 0b7e5c1a (pi-dialog) working → blocked (Apply the migration?)"
        );
        let ev = WatchEvent {
            epoch: None,
            seq: 13,
            at: "x".into(),
            kind: WatchKind::Exited {
                pane: "p".into(),
                code: None,
                signal: Some(9),
                planned: false,
            },
        };
        assert_eq!(watch_line(&ev, &names), "x #13 p exited (signal 9)");
    }

    #[test]
    fn sessions_and_status_render_their_fields() {
        let s = SessionSummary {
            id: "sess-1".into(),
            turn_count: 3,
            bytes: 2048,
            panes: vec!["0b7e5c1a-9d2f".into()],
            runtime: Some(Runtime::Pi),
            cwd: None,
            created_at: "2026-05-27T12:00:00.000Z".into(),
            state: Some(AgentState::Done),
            exit: Some(WireExit {
                code: Some(0),
                signal: None,
            }),
        };
        let text = sessions_table(&[s]);
        let row: Vec<&str> = text
            .lines()
            .nth(1)
            .expect("row")
            .split_whitespace()
            .collect();
        assert_eq!(
            row,
            [
                "sess-1",
                "pi",
                "done",
                "3",
                "2048",
                "code",
                "0",
                "2026-05-27T12:00:00.000Z",
                "0b7e5c1a"
            ]
        );

        let mut states = BTreeMap::new();
        states.insert("working".to_string(), 2);
        states.insert("idle".to_string(), 0);
        states.insert("blocked".to_string(), 1);
        let st = StatusData {
            host: "buildbox".into(),
            os: "FreeBSD 14.1-RELEASE".into(),
            version: "0.1.0".into(),
            pid: 42,
            started_at: "2026-05-27T12:00:00.000Z".into(),
            agents: 3,
            running: 3,
            sessions: 1,
            connections: 1,
            watchers: 0,
            states,
            stalled: 1,
            paused: 1,
            stall_after_ms: 600_000,
            scope: "operator".into(),
            logs: Default::default(),
            reloads: 0,
            reload_errors: 0,
            restart_needed: Vec::new(),
            alerts: Default::default(),
            signals: BTreeMap::new(),
            alerts_unreachable: None,
        };
        let now = parse_time("2026-05-27T12:02:00.000Z").expect("time");
        let text = status_summary(&st, now);
        assert!(
            text.starts_with("colibrid 0.1.0 on buildbox (pid 42, up 2m00s, scope operator)\n"),
            "{text}"
        );
        assert!(
            text.contains("agents:   3 (3 running, 1 paused): 1 blocked, 2 working; 1 stalled\n"),
            "{text}"
        );
        assert!(text.contains("stall:    after 10m00s\n"), "{text}");
        assert!(!text.contains("config:"), "quiet while all is well: {text}");
        let st = StatusData {
            reloads: 2,
            reload_errors: 1,
            restart_needed: vec!["daemon.max_line".into(), "daemon.socket".into()],
            ..st
        };
        let text = status_summary(&st, now);
        assert!(
            text.contains(
                "config:   2 reload(s), 1 refused; restart to apply daemon.max_line, daemon.socket\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("alerts:"),
            "quiet while nothing was lost: {text}"
        );
        let cut = StatusData {
            alerts: crate::protocol::AlertHealth {
                sent: 9,
                truncated: 2,
                ..Default::default()
            },
            ..st
        };
        let text = status_summary(&cut, now);
        assert!(
            text.contains("alerts:   9 sent, 0 dropped, 2 cut to fit\n"),
            "{text}"
        );
        let signalled = StatusData {
            signals: BTreeMap::from([("HUP".to_string(), 2), ("USR1".to_string(), 1)]),
            alerts_unreachable: Some("cannot connect to /nope: not found".into()),
            ..cut
        };
        let text = status_summary(&signalled, now);
        assert!(text.contains("signals:  HUP 2, USR1 1\n"), "{text}");
        assert!(
            text.contains("alerts:   not reaching syslog: cannot connect to /nope: not found\n"),
            "{text}"
        );
    }

    /// A record a `Value` refuses broke `colibri session` for the whole
    /// session ("recursion limit exceeded"); each is shown as logged.
    #[test]
    fn a_session_dump_shows_records_a_value_would_refuse_as_logged() {
        let deep = |n: usize| {
            format!(
                r#"{{"ts":1,"event":{{"type":"agent_start","x":{}{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let records = [
            deep(130),
            // Deeper than any recursion would survive: scanned, not parsed.
            deep(500_000),
            r#"{"ts":2,"event":{"type":"message_update","n":1e400}}"#.to_string(),
            r#"{"ts":3,"event":{"type":"message_update","t":"\ud83d"}}"#.to_string(),
        ];
        let data = format!(
            r#"{{"session":{{"id":"s","bytes":9}},"records":[{}],"corrupt_lines":0,"unflushed_bytes":0,"flush_error":null,"log_replaced":0}}"#,
            records.join(",")
        );
        for r in &records {
            assert!(
                serde_json::from_str::<serde_json::Value>(r).is_err(),
                "{r:.80}"
            );
        }
        let raw = RawValue::from_string(data).expect("valid JSON");
        let text = session_dump(&raw).expect("shown");
        let lines: Vec<&str> = text.lines().collect();
        for r in &records {
            assert!(
                lines.iter().any(|l| l.trim_end_matches(',').trim() == r),
                "record not shown as logged: {}",
                &r[..r.len().min(80)]
            );
        }
        // The daemon's own fields are shown as before, indented, in order.
        assert!(
            text.starts_with("{\n  \"corrupt_lines\": 0,\n"),
            "{}",
            &text[..80]
        );
        assert!(text.contains("\"session\": {\n    \"bytes\": 9,\n    \"id\": \"s\"\n  },"));
    }

    #[test]
    fn a_session_dump_that_is_no_object_is_shown_as_it_came() {
        let raw = RawValue::from_string("null".into()).expect("valid JSON");
        assert_eq!(session_dump(&raw).expect("shown"), "null");
    }
}
