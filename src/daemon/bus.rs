//! The event bus: the one way out for everything that happens to a pane.
//!
//! Handlers, the ingest path and the lifecycle hand a [`WatchKind`] to
//! [`Bus::emit`]. Only the bus stamps it (`epoch`, `seq`, time), derives the
//! syslog alert from it, journals it (`journal.rs`: `seq` goes on across
//! restarts) and fans it out to the watchers, so the watch stream and
//! syslog can never disagree. A watcher that asked for `since` is served
//! from the journal in slices as it drains, and joins the live stream once
//! it has caught up.
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
use crate::daemon::journal::Journal;
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
    journal: Journal,
    /// Watchers still being replayed to, with the next seq each gets; live
    /// events skip them (the journal holds those too, in order).
    replays: Vec<(ConnId, u64)>,
}

/// A replaying watcher is given more once its queue is below this.
const REPLAY_LOW_WATER: usize = 64 << 10;
/// Bytes of replay queued to one watcher per wakeup.
const REPLAY_SLICE_BYTES: usize = 128 << 10;

/// What an event reaches besides the bus's own state.
pub struct Outlets<'a> {
    pub conns: &'a mut Slab<Conn>,
    pub panes: &'a mut PaneTable,
    pub alerter: &'a mut Alerter,
    /// Connections with output queued by this event.
    pub dirty: &'a mut BTreeSet<usize>,
}

impl Bus {
    pub fn new(epoch: String, journal: Journal) -> Bus {
        Bus {
            epoch,
            seq: journal.last_seq(),
            watchers: Vec::new(),
            journal,
            replays: Vec::new(),
        }
    }

    pub fn journal_mut(&mut self) -> &mut Journal {
        &mut self.journal
    }

    /// Hands this wakeup's events to the journal writer; true once every
    /// event is on disk, so replies and watch lines may leave.
    pub fn sync_journal(&mut self) -> bool {
        self.journal.submit();
        self.journal.caught_up()
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
        self.replays.retain(|(w, _)| *w != id);
    }

    /// Subscribes a watcher that saw everything up to `since`: it is
    /// replayed what the journal holds after that (a gap marker first if
    /// the journal no longer reaches back to `since + 1`), then goes live.
    pub fn subscribe_since(&mut self, id: ConnId, since: u64) {
        self.subscribe(id);
        self.replays.retain(|(w, _)| *w != id);
        // A `since` ahead of `seq` is a cursor from a journal that is gone
        // (a reset state dir): it gets the gap marker.
        if since != self.seq {
            self.replays.push((id, since.saturating_add(1)));
        }
    }

    /// A replaying watcher has room and more to get: the loop should come
    /// back without sleeping. Not while the journal writer is busy: it
    /// wakes the loop when done.
    pub fn replay_wants_more(&self, conns: &Slab<Conn>) -> bool {
        self.journal.caught_up()
            && self.replays.iter().any(|(id, _)| {
                conns
                    .get(id.0)
                    .is_some_and(|c| c.queued_bytes() < REPLAY_LOW_WATER)
            })
    }

    /// Queues the next slice of replay to each watcher with room for it.
    pub fn pump_replays(
        &mut self,
        conns: &mut Slab<Conn>,
        dirty: &mut BTreeSet<usize>,
        t: Timestamp,
    ) {
        let mut done = Vec::new();
        for i in 0..self.replays.len() {
            let (id, next) = self.replays[i];
            let Some(conn) = conns.get_mut(id.0) else {
                done.push(id);
                continue;
            };
            if conn.queued_bytes() >= REPLAY_LOW_WATER {
                continue;
            }
            let next = self.replay_slice(conn, next, t);
            dirty.insert(id.0);
            if next > self.seq {
                done.push(id);
            } else {
                self.replays[i].1 = next;
            }
        }
        self.replays.retain(|(w, _)| !done.contains(w));
    }

    /// Queues events from `next` on, up to a slice; the next seq to send.
    fn replay_slice(&self, conn: &mut Conn, mut next: u64, t: Timestamp) -> u64 {
        let first = self.journal.first_seq();
        if next < first || next > self.seq + 1 {
            let gap = WatchEvent {
                epoch: Some(self.epoch.clone()),
                seq: first - 1,
                at: t.to_rfc3339(),
                kind: WatchKind::Gap {
                    since: next.saturating_sub(1),
                    resumes_at: first,
                },
            };
            if let Ok(mut line) = serde_json::to_vec(&gap) {
                line.push(b'\n');
                conn.enqueue(Rc::from(line));
            }
            next = first;
        }
        let mut sent = 0;
        let mut i = self.journal.position(next);
        while sent < REPLAY_SLICE_BYTES {
            let Some(e) = self.journal.get(i) else { break };
            i += 1;
            next = e.seq + 1;
            if !wants(conn, e.jail.as_deref(), e.pane.as_deref()) {
                continue;
            }
            sent += e.frame.len();
            conn.enqueue(e.frame.clone());
        }
        if self.journal.get(i).is_none() {
            next = self.seq + 1;
        }
        next
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
        self.journal
            .append(self.seq, t, pane_jail.as_deref(), frame.clone());
        let mut dropped = Vec::new();
        for &id in &self.watchers {
            if self.replays.iter().any(|(w, _)| *w == id) {
                continue;
            }
            let Some(conn) = out.conns.get_mut(id.0) else {
                continue;
            };
            if !wants(conn, pane_jail.as_deref(), ev.kind.pane()) {
                continue;
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

/// Whether a watcher receives an event of this pane (of this jail).
fn wants(conn: &Conn, pane_jail: Option<&str>, pane: Option<&str>) -> bool {
    let Some(filter) = &conn.watch else {
        return false;
    };
    // Agent scope sees its own jail's panes and nothing daemon-wide.
    if let Scope::Jail(j) = &conn.scope {
        if pane_jail != Some(j.as_str()) {
            return false;
        }
    }
    if let (Some(panes), Some(p)) = (&filter.panes, pane) {
        if !panes.iter().any(|x| x == p) {
            return false;
        }
    }
    true
}

/// The alert an event raises, if any, with its reason.
fn alert_of(kind: &WatchKind, slot: &mut Slot) -> Option<(AlertKind, Option<String>)> {
    let agent = &mut slot.agent;
    // A stop somebody asked for (shutdown, stop-agent, a reload) pages no one.
    if agent.supervision.planned_stop()
        && matches!(
            kind,
            WatchKind::Exited { .. }
                | WatchKind::State {
                    to: AgentState::Error,
                    ..
                }
        )
    {
        return None;
    }
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
        // One request, one alert: a pane that became blocked by it has
        // alerted already (the blocked state is published first).
        WatchKind::ApprovalOpened { .. } if slot.pane.state() == AgentState::Blocked => None,
        WatchKind::ApprovalOpened { approval, .. } => {
            Some((AlertKind::Approval, Some(approval.question.clone())))
        }
        WatchKind::ApprovalEscalated {
            approval,
            pending_ms,
            ..
        } => Some((
            AlertKind::ApprovalEscalated,
            Some(format!(
                "approval {approval} unanswered for {}",
                humantime::format_duration(std::time::Duration::from_secs(pending_ms / 1000))
            )),
        )),
        WatchKind::State { .. }
        | WatchKind::ApprovalAnswered { .. }
        | WatchKind::ApprovalExpired { .. }
        | WatchKind::Paused { .. }
        | WatchKind::Resumed { .. }
        | WatchKind::RestartScheduled { .. }
        | WatchKind::Heartbeat { .. }
        // Control-plane events reach operators on the watch stream.
        | WatchKind::Task { .. }
        | WatchKind::TaskCompleted { .. }
        | WatchKind::ApprovalRequest { .. }
        | WatchKind::AgentError { .. }
        | WatchKind::Gap { .. }
        | WatchKind::Removed { .. } => None,
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
