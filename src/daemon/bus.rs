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
    /// How many watchers want state changes only.
    coalescing: usize,
    /// State changes held for them until the end of the pass.
    held: Vec<Held>,
    journal: Journal,
    /// Watchers still being replayed to, with the last seq each has (its
    /// `since`, then what replay sent; not the next seq, which would not
    /// fit for a `since` of u64::MAX); live events (and coalesced state
    /// changes) skip them: the journal holds those too, in order.
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
            coalescing: 0,
            held: Vec::new(),
            journal,
            replays: Vec::new(),
        }
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Hands this wakeup's events to the journal writer; the seq up to
    /// which every event is on disk, so replies and watch lines reporting
    /// events up to it may leave (`Conn::stamp`).
    pub fn sync_journal(&mut self) -> u64 {
        self.journal.submit();
        self.journal.journaled_through()
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

    /// Subscribes a watcher from now on; its filter (`conn.watch`) is set
    /// already, so the count of watchers of changes only stays right.
    pub fn subscribe(&mut self, id: ConnId, conns: &Slab<Conn>) {
        if !self.watchers.contains(&id) {
            self.watchers.push(id);
        }
        self.count_coalescing(conns);
    }

    pub fn unsubscribe(&mut self, id: ConnId, conns: &Slab<Conn>) {
        self.watchers.retain(|w| *w != id);
        self.replays.retain(|(w, _)| *w != id);
        self.count_coalescing(conns);
    }

    /// Subscribes a watcher that saw everything up to `since`: it is
    /// replayed what the journal holds after that (a gap marker first if
    /// the journal no longer reaches back to `since + 1`), then goes live.
    /// Replay sends every journaled event the watcher's panes and scope
    /// allow, each `state` event too: a watcher of changes only gets the
    /// journal as it was written, and coalesced changes once it is live.
    pub fn subscribe_since(&mut self, id: ConnId, since: u64, conns: &Slab<Conn>) {
        self.subscribe(id, conns);
        self.replays.retain(|(w, _)| *w != id);
        // A `since` ahead of `seq` is a cursor from a journal that is gone
        // (a reset state dir): it gets the gap marker.
        if since != self.seq {
            self.replays.push((id, since));
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
            let (id, seen) = self.replays[i];
            let Some(conn) = conns.get_mut(id.0) else {
                done.push(id);
                continue;
            };
            if conn.queued_bytes() >= REPLAY_LOW_WATER {
                continue;
            }
            let seen = self.replay_slice(conn, seen, t);
            dirty.insert(id.0);
            if seen >= self.seq {
                done.push(id);
            } else {
                self.replays[i].1 = seen;
            }
        }
        self.replays.retain(|(w, _)| !done.contains(w));
    }

    /// Queues the events after `seen` (the last seq the watcher has), up
    /// to a slice; returns the last seq it now has. A `seen` the journal
    /// no longer follows on from, or one ahead of `seq`, gets the gap
    /// marker first, naming that `seen` as its `since`.
    fn replay_slice(&self, conn: &mut Conn, mut seen: u64, t: Timestamp) -> u64 {
        let first = self.journal.first_seq();
        let resumes = first.saturating_sub(1);
        if seen < resumes || seen > self.seq {
            let gap = WatchEvent {
                epoch: Some(self.epoch.clone()),
                seq: resumes,
                at: t.to_rfc3339(),
                kind: WatchKind::Gap {
                    since: seen,
                    resumes_at: first,
                },
            };
            if let Ok(mut line) = serde_json::to_vec(&gap) {
                line.push(b'\n');
                conn.enqueue(Rc::from(line));
            }
            seen = resumes;
        }
        let mut sent = 0;
        let mut i = self.journal.position(seen.saturating_add(1));
        while sent < REPLAY_SLICE_BYTES {
            let Some(e) = self.journal.get(i) else { break };
            i += 1;
            seen = e.seq;
            if !wants(conn, e.jail.as_deref(), e.pane.as_deref()) {
                continue;
            }
            sent += e.frame.len();
            conn.enqueue(e.frame.clone());
        }
        if self.journal.get(i).is_none() {
            seen = self.seq;
        }
        seen
    }

    /// Numbers an event, raises its alert, journals it, and queues it to
    /// every live watcher that wants it. A watcher whose queue passes the
    /// hard limit is dropped with a final error line; the agents never
    /// wait for it. Watchers of state changes only get a pane's `state`
    /// events at the end of the pass (`end_pass`), coalesced.
    pub fn emit(&mut self, kind: WatchKind, t: Timestamp, out: Outlets<'_>) {
        self.seq += 1;
        let slot = kind
            .pane()
            .and_then(|p| out.panes.key(p))
            .and_then(|k| out.panes.get_mut(k));
        let pane_jail = slot.as_ref().and_then(|s| s.agent.jail.clone());
        derive_alert(&kind, slot, out.alerter, t);
        let is_state = matches!(kind, WatchKind::State { .. });
        if self.coalescing > 0 {
            if is_state {
                self.hold_state(&kind, pane_jail.clone(), t);
            } else {
                // Held state changes go first, so the stream stays in order.
                self.deliver_held(out.conns, out.dirty, t);
            }
        }
        let ev = WatchEvent {
            epoch: Some(self.epoch.clone()),
            seq: self.seq,
            at: t.to_rfc3339(),
            kind,
        };
        // Every event is journaled, watched or not: a later `since` replays it.
        let Some(frame) = encode(&ev) else { return };
        self.journal
            .append(self.seq, t, pane_jail.as_deref(), frame.clone());
        if self.watchers.is_empty() {
            return;
        }
        let audience = if is_state {
            Audience::Every
        } else {
            Audience::All
        };
        let to = Delivery {
            frame,
            seq: ev.seq,
            pane: ev.kind.pane(),
            pane_jail: pane_jail.as_deref(),
            audience,
        };
        self.deliver(&to, out.conns, out.dirty, t);
    }

    /// Ends a loop pass: the coalesced state changes go to the watchers of
    /// changes only.
    pub fn end_pass(&mut self, conns: &mut Slab<Conn>, dirty: &mut BTreeSet<usize>, t: Timestamp) {
        if !self.held.is_empty() {
            self.deliver_held(conns, dirty, t);
        }
    }

    fn hold_state(&mut self, kind: &WatchKind, jail: Option<String>, t: Timestamp) {
        let WatchKind::State {
            pane,
            from,
            to,
            reason,
        } = kind
        else {
            return;
        };
        if let Some(h) = self.held.iter_mut().find(|h| &h.pane == pane) {
            h.to = *to;
            h.reason.clone_from(reason);
            h.seq = self.seq;
            h.at = t;
            return;
        }
        self.held.push(Held {
            pane: pane.clone(),
            jail,
            from: *from,
            to: *to,
            reason: reason.clone(),
            seq: self.seq,
            at: t,
        });
    }

    /// The coalesced changes are not journaled themselves: each `state`
    /// event they fold was, under its own seq.
    fn deliver_held(&mut self, conns: &mut Slab<Conn>, dirty: &mut BTreeSet<usize>, t: Timestamp) {
        for h in std::mem::take(&mut self.held) {
            if h.from == h.to {
                continue;
            }
            let ev = WatchEvent {
                epoch: Some(self.epoch.clone()),
                seq: h.seq,
                at: h.at.to_rfc3339(),
                kind: WatchKind::State {
                    pane: h.pane.clone(),
                    from: h.from,
                    to: h.to,
                    reason: h.reason,
                },
            };
            let Some(frame) = encode(&ev) else { continue };
            let to = Delivery {
                frame,
                seq: h.seq,
                pane: Some(&h.pane),
                pane_jail: h.jail.as_deref(),
                audience: Audience::ChangesOnly,
            };
            self.deliver(&to, conns, dirty, t);
        }
    }

    fn deliver(
        &mut self,
        to: &Delivery<'_>,
        conns: &mut Slab<Conn>,
        dirty: &mut BTreeSet<usize>,
        t: Timestamp,
    ) {
        let mut dropped = Vec::new();
        for &id in &self.watchers {
            // A replaying watcher gets this from the journal, in order.
            if self.replays.iter().any(|(w, _)| *w == id) {
                continue;
            }
            let Some(conn) = conns.get_mut(id.0) else {
                continue;
            };
            let Some(filter) = &conn.watch else { continue };
            let wanted = match to.audience {
                Audience::All => true,
                Audience::Every => !filter.changes_only,
                Audience::ChangesOnly => filter.changes_only,
            };
            if !wanted || !wants(conn, to.pane_jail, to.pane) {
                continue;
            }
            if !conn.enqueue(to.frame.clone()) {
                drop_behind(conn, to.seq, t);
                dropped.push(id);
            }
            dirty.insert(id.0);
        }
        if !dropped.is_empty() {
            log_warn!("dropped {} watcher(s) that fell behind", dropped.len());
            self.watchers.retain(|w| !dropped.contains(w));
            self.count_coalescing(conns);
        }
    }

    fn count_coalescing(&mut self, conns: &Slab<Conn>) {
        self.coalescing = self
            .watchers
            .iter()
            .filter(|id| {
                conns
                    .get(id.0)
                    .and_then(|c| c.watch.as_ref())
                    .is_some_and(|f| f.changes_only)
            })
            .count();
        if self.coalescing == 0 {
            self.held.clear();
        }
    }
}

/// Which watchers an event goes to.
#[derive(Copy, Clone)]
enum Audience {
    /// Every watcher (all but `state` events).
    All,
    /// Watchers of every event (a `state` event as it happens).
    Every,
    /// Watchers of state changes only (a coalesced `state` event).
    ChangesOnly,
}

/// One encoded event on its way to the live watchers.
struct Delivery<'a> {
    frame: Rc<[u8]>,
    seq: u64,
    pane: Option<&'a str>,
    pane_jail: Option<&'a str>,
    audience: Audience,
}

/// An event as one watch line.
fn encode(ev: &WatchEvent) -> Option<Rc<[u8]>> {
    match serde_json::to_vec(ev) {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            Some(Rc::from(bytes))
        }
        Err(e) => {
            log_error!("cannot encode a watch event: {e}");
            None
        }
    }
}

/// A pane's state changes of this pass, held for the watchers of changes
/// only: the state before the first, the last, and the last one's stamp.
#[derive(Debug)]
struct Held {
    pane: String,
    jail: Option<String>,
    from: AgentState,
    to: AgentState,
    reason: Option<String>,
    seq: u64,
    at: Timestamp,
}

impl Bus {
    /// Drops a watcher that stayed behind (see `Conn::watch_fell_behind`).
    pub fn drop_watcher(&mut self, id: ConnId, conn: &mut Conn, t: Timestamp) {
        let was_coalescing = conn.watch.as_ref().is_some_and(|f| f.changes_only);
        drop_behind(conn, self.seq, t);
        self.watchers.retain(|w| *w != id);
        self.replays.retain(|(w, _)| *w != id);
        self.coalescing = self.coalescing.saturating_sub(usize::from(was_coalescing));
        log_warn!("dropped a watcher that fell behind");
    }
}

/// Discards what a watcher has not started to receive and ends its stream
/// with one line that says why.
fn drop_behind(conn: &mut Conn, seq: u64, t: Timestamp) {
    let msg = format!("watcher fell behind at seq {seq}; dropped (reconnect and take a snapshot)");
    conn.drop_backlog_and_close(Rc::from(protocol::err_line(None, ErrorCode::Busy, &msg)), t);
}

/// Whether a watcher receives an event of this pane (of this jail).
fn wants(conn: &Conn, pane_jail: Option<&str>, pane: Option<&str>) -> bool {
    let Some(filter) = &conn.watch else {
        return false;
    };
    // A jail sees its own panes, an agent itself, neither anything
    // daemon-wide.
    match &conn.scope {
        Scope::Operator => {}
        Scope::Jail(j) if pane_jail != Some(j.as_str()) => return false,
        Scope::Jail(_) => {}
        Scope::Agent { pane: me, .. } if pane != Some(me.as_str()) => return false,
        Scope::Agent { .. } => {}
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
        WatchKind::PauseBroken { reason, .. } => Some((
            AlertKind::Policy,
            Some(format!("ran while paused ({reason}); stopped again")),
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
        | WatchKind::Runtime { .. }
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
        | WatchKind::Removed { .. }
        // Raised by `hostop_alert`, with or without a pane.
        | WatchKind::Hostop { .. } => None,
    }
}

fn derive_alert(kind: &WatchKind, slot: Option<&mut Slot>, alerter: &mut Alerter, t: Timestamp) {
    if let WatchKind::Hostop { .. } = kind {
        hostop_alert(kind, slot.as_deref(), alerter, t);
        return;
    }
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

/// A host operation that did not end well: its pane's alert, or the
/// daemon's (pseudo-pane `colibrid`) for the operator's and a jail
/// socket's, which have no pane.
fn hostop_alert(kind: &WatchKind, slot: Option<&Slot>, alerter: &mut Alerter, t: Timestamp) {
    let WatchKind::Hostop {
        op,
        by,
        outcome,
        exit_code,
        signal,
        ..
    } = kind
    else {
        return;
    };
    if outcome == "ok" {
        return;
    }
    let reason = format!("hostop {op} asked by {by}: {outcome}");
    let mut fields = AlertFields {
        pane: "colibrid",
        state: "running",
        reason: Some(&reason),
        exit_code: *exit_code,
        exit_signal: *signal,
        ..AlertFields::default()
    };
    if let Some(slot) = slot {
        fields.pane = slot.pane.id.as_str();
        fields.name = slot.pane.name.as_deref();
        fields.state = slot.pane.state().as_str();
        fields.jail = slot.agent.jail.as_deref();
    }
    alerter.alert(AlertKind::Hostop, &fields, t);
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
