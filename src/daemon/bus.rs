//! The event bus: the one way out for everything that happens to a pane.
//!
//! Handlers, the ingest path and the lifecycle hand a [`WatchKind`] to
//! [`Bus::emit`]. Only the bus stamps it (`epoch`, `seq`, time), derives the
//! syslog alert from it, and fans it out to the watchers, so the watch
//! stream and syslog can never disagree. A later consumer (the journal, a
//! notification sink) subscribes here too.
//!
//! One failure, one alert: an error state and the exit that follows it are
//! the same failure, so the first of them alerts and the other is folded in.

use std::collections::BTreeSet;
use std::rc::Rc;

use slab::Slab;

use crate::core::pane::ExitStatus;
use crate::core::state::AgentState;
use crate::core::time::Timestamp;
use crate::daemon::alert::{AlertFields, AlertKind, Alerter};
use crate::daemon::conn::{Conn, Scope};
use crate::daemon::diag::{log_error, log_warn};
use crate::daemon::panes::{PaneTable, Slot};
use crate::daemon::source::ConnId;
use crate::daemon::store::StoreHealth;
use crate::protocol::{self, ErrorCode, WatchEvent, WatchKind};

#[derive(Debug)]
pub struct Bus {
    /// Names this daemon's run, so a client can tell a restart (new epoch,
    /// `seq` from 1) from events it missed (same epoch, a gap).
    epoch: String,
    seq: u64,
    watchers: Vec<ConnId>,
}

/// What an event reaches besides the bus's own state.
pub struct Outlets<'a> {
    pub conns: &'a mut Slab<Conn>,
    pub panes: &'a mut PaneTable,
    pub alerter: &'a mut Alerter,
    /// Connections with output queued by this event.
    pub dirty: &'a mut BTreeSet<usize>,
}

impl Bus {
    pub fn new(epoch: String) -> Bus {
        Bus {
            epoch,
            seq: 0,
            watchers: Vec::new(),
        }
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    pub fn watchers(&self) -> usize {
        self.watchers.len()
    }

    pub fn subscribe(&mut self, id: ConnId) {
        if !self.watchers.contains(&id) {
            self.watchers.push(id);
        }
    }

    pub fn unsubscribe(&mut self, id: ConnId) {
        self.watchers.retain(|w| *w != id);
    }

    /// Numbers an event, raises its alert, and queues it to every watcher
    /// that wants it. A watcher whose queue is full is dropped with a final
    /// error line; the agents never wait for it.
    pub fn emit(&mut self, kind: WatchKind, t: Timestamp, out: Outlets<'_>) {
        self.seq += 1;
        let slot = kind
            .pane()
            .and_then(|p| out.panes.key(p))
            .and_then(|k| out.panes.get_mut(k));
        let pane_jail = slot.as_ref().and_then(|s| s.agent.jail.clone());
        derive_alert(&kind, slot, out.alerter, t);
        if self.watchers.is_empty() {
            return;
        }
        let ev = WatchEvent {
            epoch: Some(self.epoch.clone()),
            seq: self.seq,
            at: t.to_rfc3339(),
            kind,
        };
        let mut bytes = match serde_json::to_vec(&ev) {
            Ok(b) => b,
            Err(e) => {
                log_error!("cannot encode a watch event: {e}");
                return;
            }
        };
        bytes.push(b'\n');
        let frame: Rc<[u8]> = Rc::from(bytes);
        let mut dropped = Vec::new();
        for &id in &self.watchers {
            let Some(conn) = out.conns.get_mut(id.0) else {
                continue;
            };
            let Some(filter) = &conn.watch else { continue };
            // Agent scope sees its own jail's panes and nothing daemon-wide.
            if let Scope::Jail(j) = &conn.scope {
                if pane_jail.as_deref() != Some(j.as_str()) {
                    continue;
                }
            }
            if let (Some(panes), Some(p)) = (&filter.panes, ev.kind.pane()) {
                if !panes.iter().any(|x| x == p) {
                    continue;
                }
            }
            if !conn.enqueue(frame.clone()) {
                let msg = format!(
                    "watcher fell behind at seq {}; dropped (reconnect and take a snapshot)",
                    ev.seq
                );
                conn.drop_backlog_and_close(
                    Rc::from(protocol::err_line(None, ErrorCode::Busy, &msg)),
                    t,
                );
                dropped.push(id);
            }
            out.dirty.insert(id.0);
        }
        if !dropped.is_empty() {
            log_warn!("dropped {} watcher(s) that fell behind", dropped.len());
            self.watchers.retain(|w| !dropped.contains(w));
        }
    }
}

/// The alert an event raises, if any, with its reason.
fn alert_of(kind: &WatchKind, slot: &mut Slot) -> Option<(AlertKind, Option<String>)> {
    let agent = &mut slot.agent;
    match kind {
        WatchKind::State {
            to: AgentState::Blocked,
            reason,
            ..
        } => Some((AlertKind::Blocked, reason.clone())),
        WatchKind::State {
            to: AgentState::Error,
            reason,
            ..
        } => {
            if std::mem::replace(&mut agent.failure_alerted, true) {
                return None;
            }
            Some((AlertKind::Error, reason.clone()))
        }
        WatchKind::Stalled { silent_ms, .. } => Some((
            AlertKind::Stalled,
            Some(format!(
                "silent for {}",
                humantime::format_duration(std::time::Duration::from_secs(silent_ms / 1000))
            )),
        )),
        WatchKind::Unstalled { .. } => Some((AlertKind::Unstalled, None)),
        WatchKind::Exited { .. } => {
            // The run's failure was alerted already (as its error state).
            if agent.failure_alerted {
                return None;
            }
            let reason = agent
                .stopped_by
                .clone()
                .or_else(|| slot.pane.last_error().map(str::to_string));
            Some((AlertKind::Exited, reason))
        }
        WatchKind::RestartsExhausted { attempts, .. } => Some((
            AlertKind::RestartsExhausted,
            Some(format!("{attempts} restarts used; not restarted again")),
        )),
        WatchKind::Verdict { verdict, .. } => match verdict.action.as_str() {
            "warn" | "pause" | "kill" | "escalate" => {
                Some((AlertKind::Policy, Some(verdict.reason.clone())))
            }
            _ => None,
        },
        WatchKind::Attached { .. } | WatchKind::Restarted { .. } => {
            // A new run: its failure is a new one.
            agent.failure_alerted = false;
            None
        }
        WatchKind::State { .. }
        | WatchKind::Paused { .. }
        | WatchKind::Resumed { .. }
        | WatchKind::RestartScheduled { .. }
        | WatchKind::Heartbeat { .. } => None,
    }
}

fn derive_alert(kind: &WatchKind, slot: Option<&mut Slot>, alerter: &mut Alerter, t: Timestamp) {
    let Some(slot) = slot else { return };
    let Some((alert, reason)) = alert_of(kind, slot) else {
        return;
    };
    let (pane, agent) = (&slot.pane, &slot.agent);
    let exit = pane.exit();
    let fields = AlertFields {
        pane: pane.id.as_str(),
        name: pane.name.as_deref(),
        runtime: pane.runtime().map(|r| r.as_str()),
        state: pane.state().as_str(),
        session: Some(agent.session.as_str()),
        cwd: pane.cwd(),
        jail: agent.jail.as_deref(),
        reason: reason.as_deref(),
        exit_code: match exit {
            Some(ExitStatus::Code(c)) => Some(c),
            _ => None,
        },
        exit_signal: match exit {
            Some(ExitStatus::Signal(s)) => Some(s),
            _ => None,
        },
    };
    alerter.alert(alert, &fields, t);
}

/// Tells the operator the session logs are failing, with what is lost so
/// far: a daemon-wide alert with no pane event (under the pseudo-pane
/// `colibrid`), rate-limited like a pane's.
pub fn log_write_alert(alerter: &mut Alerter, h: &StoreHealth, t: Timestamp) {
    let reason = format!(
        "{}; {} bytes waiting, {} bytes lost",
        h.last_error.as_deref().unwrap_or("write failed"),
        h.pending_bytes,
        h.lost_bytes
    );
    let fields = AlertFields {
        pane: "colibrid",
        state: "running",
        reason: Some(&reason),
        ..AlertFields::default()
    };
    alerter.alert(AlertKind::LogWrite, &fields, t);
}
