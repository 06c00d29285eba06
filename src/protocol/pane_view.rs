//! The snapshot panes as the daemon writes them: borrowed from the pane
//! table and written straight into the reply as JSON text.
//!
//! [`super::PaneV1`] and [`super::PaneV2`] are the owned wire types clients
//! read. Building one per pane per snapshot cost a dozen `String` copies
//! and three formatted timestamps, and serde_json then spent about half of
//! what was left escaping field names one call at a time: at 10,000 panes a
//! v2 snapshot cost the loop about 1.6 µs per pane. These views have the
//! same fields and write them in the same order with the same omissions, so
//! their text is byte for byte the owned types' (the tests below hold them
//! to it).

use std::borrow::Cow;
use std::time::Duration;

use super::json_text::Object;
use super::{WireApproval, WireCounters, WireExit, WireHold, WireUsage};
use crate::core::pane::{Pane, ToolRecord};
use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;

/// [`super::PaneV1`], borrowed.
#[derive(Debug)]
pub struct PaneV1View<'a> {
    pub id: &'a str,
    pub agent: &'a str,
    pub state: AgentState,
    pub pi_session_id: Option<&'a str>,
    pub last_event_at: Option<Timestamp>,
    pub cwd: Option<&'a str>,
    pub stalled: bool,
}

impl<'a> PaneV1View<'a> {
    /// What [`super::PaneV1::from_pane`] makes, borrowed.
    pub fn from_pane(p: &'a Pane, now: Timestamp, default_stall_after: Duration) -> Self {
        PaneV1View {
            id: &p.id.0,
            agent: &p.agent,
            state: p.state(),
            pi_session_id: p.session_id(),
            last_event_at: p.last_event_at(),
            cwd: p.cwd(),
            stalled: p.is_stalled(now, default_stall_after),
        }
    }

    /// Appends the pane's JSON object to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut o = Object::begin(out);
        o.str("id", self.id);
        o.str("agent", self.agent);
        o.str("state", self.state.as_str());
        o.opt_str("pi_session_id", self.pi_session_id);
        o.opt_time("last_event_at", self.last_event_at);
        o.opt_str("cwd", self.cwd);
        // The contract omits `stalled` when false.
        if self.stalled {
            o.bool("stalled", true);
        }
        o.end();
    }
}

/// [`super::PaneV2`], borrowed. The daemon fills the fields only it knows
/// (pid, jail, supervision, restart), as it does on the owned type.
#[derive(Debug)]
pub struct PaneV2View<'a> {
    pub id: &'a str,
    pub name: Option<&'a str>,
    pub agent: &'a str,
    pub runtime: Option<Runtime>,
    pub state: AgentState,
    pub stalled: bool,
    pub paused: bool,
    pub state_since: Timestamp,
    pub started_at: Timestamp,
    pub last_event_at: Option<Timestamp>,
    pub stall_after_ms: u64,
    pub session_id: Option<&'a str>,
    pub daemon_session: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub jail: Option<&'a str>,
    pub pid: Option<i32>,
    pub generation: u32,
    pub counters: WireCounters,
    pub usage: WireUsage,
    pub usage_total: Option<WireUsage>,
    pub last_tool: Option<&'a ToolRecord>,
    pub last_error: Option<&'a str>,
    pub blocked_reason: Option<&'a str>,
    pub exit: Option<WireExit>,
    pub restart: Option<RestartView>,
    pub supervision: Option<SupervisionView<'a>>,
    /// Owned: pending approvals are few, and most panes have none (an empty
    /// `Vec` does not allocate).
    pub approvals: Vec<WireApproval>,
    /// Owned too: a paused pane has one or two.
    pub holds: Vec<WireHold>,
}

impl<'a> PaneV2View<'a> {
    /// What [`super::PaneV2::from_pane`] makes, borrowed.
    pub fn from_pane(p: &'a Pane, now: Timestamp, default_stall_after: Duration) -> Self {
        PaneV2View {
            id: &p.id.0,
            name: p.name.as_deref(),
            agent: &p.agent,
            runtime: p.runtime(),
            state: p.state(),
            stalled: p.is_stalled(now, default_stall_after),
            paused: p.paused,
            state_since: p.state_since(),
            started_at: p.started_at,
            last_event_at: p.last_event_at(),
            stall_after_ms: p.stall_after.unwrap_or(default_stall_after).as_millis() as u64,
            session_id: p.session_id(),
            daemon_session: None,
            cwd: p.cwd(),
            jail: None,
            pid: None,
            generation: 0,
            counters: WireCounters::from(p.counters()),
            usage: WireUsage::from(p.usage()),
            usage_total: None,
            last_tool: p.last_tool(),
            last_error: p.last_error(),
            blocked_reason: p.blocked_reason(),
            exit: p.exit().map(WireExit::from),
            restart: None,
            supervision: None,
            approvals: p
                .pending_approvals()
                .iter()
                .map(|a| WireApproval::new(a, p.id.as_str(), p.name.as_deref(), false))
                .collect(),
            holds: Vec::new(),
        }
    }

    /// Appends the pane's JSON object to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        self.write_json_marked(out).map(|_| ())
    }

    /// Appends the pane's JSON object to `out` and returns where, counted
    /// from the object's `{`, the value of `stalled` begins: the one field
    /// that changes with the clock alone, so a kept copy of the text can be
    /// brought up to date by rewriting it (`daemon::pane_text`).
    pub fn write_json_marked(&self, out: &mut Vec<u8>) -> serde_json::Result<usize> {
        let start = out.len();
        let mut o = Object::begin(out);
        o.str("id", self.id);
        o.opt_str("name", self.name);
        o.str("agent", self.agent);
        o.opt_str("runtime", self.runtime.map(Runtime::as_str));
        o.str("state", self.state.as_str());
        let value = o.key("stalled");
        let stalled_at = value.len() - start;
        value.extend_from_slice(if self.stalled { b"true" } else { b"false" });
        o.bool("paused", self.paused);
        o.time("state_since", self.state_since);
        o.time("started_at", self.started_at);
        o.opt_time("last_event_at", self.last_event_at);
        o.uint("stall_after_ms", self.stall_after_ms);
        o.opt_str("session_id", self.session_id);
        o.opt_str("daemon_session", self.daemon_session);
        o.opt_str("cwd", self.cwd);
        o.opt_str("jail", self.jail);
        o.opt_int("pid", self.pid.map(i64::from));
        o.uint("generation", u64::from(self.generation));
        let c = &self.counters;
        let mut counters = o.object("counters");
        counters.uint("events", c.events);
        counters.uint("malformed", c.malformed);
        counters.uint("oversize", c.oversize);
        counters.uint("unknown", c.unknown);
        counters.uint("bytes", c.bytes);
        counters.end();
        write_usage(&mut o, "usage", &self.usage)?;
        if let Some(total) = &self.usage_total {
            write_usage(&mut o, "usage_total", total)?;
        }
        if let Some(t) = self.last_tool {
            let mut tool = o.object("last_tool");
            tool.str("name", &t.name);
            tool.str("summary", &t.summary);
            tool.time("at", t.at);
            tool.end();
        }
        o.opt_str("last_error", self.last_error);
        o.opt_str("blocked_reason", self.blocked_reason);
        if let Some(e) = &self.exit {
            let mut exit = o.object("exit");
            exit.opt_int("code", e.code.map(i64::from));
            exit.opt_int("signal", e.signal.map(i64::from));
            exit.end();
        }
        if let Some(r) = &self.restart {
            let mut restart = o.object("restart");
            restart.str("policy", r.policy);
            restart.uint("attempts", u64::from(r.attempts));
            restart.opt_time("next_at", r.next_at);
            restart.end();
        }
        if let Some(s) = &self.supervision {
            let mut sup = o.object("supervision");
            sup.str("wanted", s.wanted);
            sup.str("actual", s.actual);
            sup.opt_str("stopped_by", s.stopped_by.as_deref());
            sup.opt_str("stop_reason", s.stop_reason);
            sup.bool("declared", s.declared);
            sup.end();
        }
        if !self.approvals.is_empty() {
            o.value("approvals", &self.approvals)?;
        }
        if !self.holds.is_empty() {
            o.value("holds", &self.holds)?;
        }
        o.end();
        Ok(stalled_at)
    }
}

fn write_usage(o: &mut Object<'_>, key: &str, u: &WireUsage) -> serde_json::Result<()> {
    let mut usage = o.object(key);
    usage.uint("input_tokens", u.input_tokens);
    usage.uint("output_tokens", u.output_tokens);
    usage.uint("cache_read_tokens", u.cache_read_tokens);
    usage.uint("cache_write_tokens", u.cache_write_tokens);
    // Floats as serde_json prints them (shortest round trip).
    usage.value("cost_usd", &u.cost_usd)?;
    usage.end();
    Ok(())
}

/// [`super::WireRestart`], borrowed.
#[derive(Debug)]
pub struct RestartView {
    pub policy: &'static str,
    pub attempts: u32,
    pub next_at: Option<Timestamp>,
}

/// [`super::WireSupervision`], borrowed.
#[derive(Debug)]
pub struct SupervisionView<'a> {
    pub wanted: &'static str,
    pub actual: &'static str,
    pub stopped_by: Option<Cow<'a, str>>,
    pub stop_reason: Option<&'a str>,
    pub declared: bool,
}

// The owned types stay the reference: what a view writes must read back as
// the owned type and write again unchanged, and equal what the owned type
// built from the same pane writes.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::pane::PaneId;
    use crate::protocol::{PaneV1, PaneV2, WireRestart, WireSupervision};

    /// Panes with every optional field in turn absent and present.
    fn panes() -> Vec<Pane> {
        let t0 = Timestamp::from_millis(1_700_000_000_123);
        let mut out = Vec::new();
        for i in 0..4 {
            let id = PaneId(format!("p\"{i}\\\u{1}é"));
            let runtime = (i % 2 == 0).then_some(Runtime::Pi);
            let mut p = Pane::new(id, format!("agent {i}\n"), runtime, 1 << 20, t0);
            if i > 0 {
                p.name = Some(format!("name-{i}"));
                p.paused = i == 2;
                p.stall_after = Some(Duration::from_secs(7));
                let lines = [
                    r#"{"type":"session","version":3,"id":"s-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w\u00e9"}"#,
                    r#"{"type":"agent_start"}"#,
                    r#"{"type":"tool_execution_start","toolCallId":"c1","toolName":"bash","args":{"command":"ls"}}"#,
                    r#"{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":12,"output":3,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"total":0.25}},"stopReason":"error","errorMessage":"400 \"bad\""}}"#,
                ];
                for (n, line) in lines.iter().enumerate() {
                    let at = t0.plus(Duration::from_millis(n as u64 * 1001));
                    p.ingest_line(line.as_bytes(), at, &mut Vec::new());
                }
            }
            if i == 3 {
                p.exited(
                    crate::core::pane::ExitStatus::Signal(9),
                    t0.plus(Duration::from_secs(30)),
                    &mut Vec::new(),
                );
            }
            out.push(p);
        }
        out
    }

    fn json(v: &impl serde::Serialize) -> String {
        serde_json::to_string(v).expect("serialise")
    }

    fn v1_text(v: &PaneV1View<'_>) -> String {
        let mut out = Vec::new();
        v.write_json(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    fn v2_text(v: &PaneV2View<'_>) -> String {
        let mut out = Vec::new();
        v.write_json(&mut out).expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    fn fill_v2_daemon_fields<'a>(v: &mut PaneV2View<'a>, i: usize, reason: &'a str) {
        if i == 0 {
            return;
        }
        v.daemon_session = Some("sess-1");
        v.jail = (i == 2).then_some("j1");
        v.pid = Some(4242);
        v.generation = 3;
        v.restart = Some(RestartView {
            policy: "on-failure",
            attempts: 2,
            next_at: (i == 3).then_some(Timestamp::from_millis(1_700_000_099_001)),
        });
        v.supervision = Some(SupervisionView {
            wanted: "down",
            actual: "stopped",
            stopped_by: Some(Cow::Owned(format!("operator ({i})"))),
            stop_reason: (i == 1).then_some(reason),
            declared: i == 2,
        });
    }

    fn fill_owned_daemon_fields(v: &mut PaneV2, i: usize, reason: &str) {
        if i == 0 {
            return;
        }
        v.daemon_session = Some("sess-1".into());
        v.jail = (i == 2).then(|| "j1".into());
        v.pid = Some(4242);
        v.generation = 3;
        v.restart = Some(WireRestart {
            policy: "on-failure".into(),
            attempts: 2,
            next_at: (i == 3).then(|| Timestamp::from_millis(1_700_000_099_001).to_rfc3339()),
        });
        v.supervision = Some(WireSupervision {
            wanted: "down".into(),
            actual: "stopped".into(),
            stopped_by: Some(format!("operator ({i})")),
            stop_reason: (i == 1).then(|| reason.into()),
            declared: i == 2,
        });
    }

    #[test]
    fn a_view_writes_what_the_owned_pane_writes() {
        let now = Timestamp::from_millis(1_700_000_500_000);
        let stall = Duration::from_secs(120);
        let ps = panes();
        let mut tools = 0;
        for (i, p) in ps.iter().enumerate() {
            let v1 = v1_text(&PaneV1View::from_pane(p, now, stall));
            assert_eq!(v1, json(&PaneV1::from_pane(p, now, stall)), "v1 pane {i}");

            let mut view = PaneV2View::from_pane(p, now, stall);
            fill_v2_daemon_fields(&mut view, i, "went \"away\"");
            let mut owned = PaneV2::from_pane(p, now, stall);
            fill_owned_daemon_fields(&mut owned, i, "went \"away\"");
            let v2 = v2_text(&view);
            assert_eq!(v2, json(&owned), "v2 pane {i}");
            // And it reads back as the owned type, unchanged.
            let back: PaneV2 = serde_json::from_str(&v2).expect("reads back");
            assert_eq!(back, owned, "v2 pane {i}");
            tools += usize::from(owned.last_tool.is_some());
        }
        // The panes do exercise the optional parts.
        assert!(tools > 0, "no pane had a last tool");
        assert!(ps.iter().any(|p| p.exit().is_some()));
        assert!(ps.iter().any(|p| p.last_error().is_some()));
        assert!(ps
            .iter()
            .any(|p| p.session_id().is_some() && p.cwd().is_some()));
    }

    #[test]
    fn a_pending_approval_is_written_as_the_owned_pane_writes_it() {
        let now = Timestamp::from_millis(1_700_000_500_000);
        let stall = Duration::from_secs(120);
        let mut p = panes().remove(1);
        let line = r#"{"type":"extension_ui_request","id":"q1","method":"input","message":"Which branch?","placeholder":"main"}"#;
        p.ingest_line(line.as_bytes(), now, &mut Vec::new());
        assert!(!p.pending_approvals().is_empty(), "the pane asks nothing");
        let view = v2_text(&PaneV2View::from_pane(&p, now, stall));
        assert_eq!(view, json(&PaneV2::from_pane(&p, now, stall)));
        assert!(view.contains(r#""approvals":["#), "{view}");
    }
}
