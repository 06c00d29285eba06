//! The loop: one thread, one `mio::Poll`, one token space.
//!
//! [`Daemon`] owns everything: the poll, the token slab, the listeners and
//! connections, the pane table, the bus, the session store and the
//! alerter; its `impl` is spread by concern over the verb files (`server`,
//! `proc`, `life`, `signals`, `publish`, `commands/`...). This file is the
//! dispatcher: start, run, dispatch, pending work. Each wakeup dispatches
//! every event on what its token names (urgent work is done there, PTY
//! reads only queued), then serves the scheduler (`sched.rs`: urgent work
//! first, then PTY reads round robin), hands the session logs to the
//! writer, and writes only the replies whose log mark the writer has
//! confirmed, so no client ever sees an event that is not in its log yet.
//!
//! **Invariant:** nothing here blocks. Every fd is non-blocking; child exit
//! and deadlines are kernel events (`platform::ExitWatch`, `KernelTimer`);
//! reads are budgeted per source and unfinished readiness is remembered in
//! the scheduler so edge-triggered sources are never forgotten.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use mio::{Events, Poll, Token};
use slab::Slab;

use crate::core::pane::Transition;
use crate::core::time::Timestamp;
use crate::daemon::alert::Alerter;
use crate::daemon::bus::Bus;
use crate::daemon::conn::{Conn, Marks, Scope};
use crate::daemon::diag::{log_debug, log_info, log_warn};
use crate::daemon::journal::{Journal, JournalConfig};
use crate::daemon::log_flow::closes::DeferredCloses;
use crate::daemon::panes::PaneTable;
use crate::daemon::settings::Settings;
use crate::daemon::source::{ConnId, Source, Tokens};
use crate::daemon::store::{CompactionProgress, SessionStore};
use crate::daemon::timers::TimerQueue;
use crate::platform::{self, KernelTimer, SignalSource};

use crate::daemon::sched::{
    BulkPass, Sched, StoreWork, Wakeups, COMPACTION_STEP_BYTES, PTY_PASS_BUDGET, READ_BUF,
};
pub(crate) use crate::daemon::sched::{Pending, CONN_STEPS_PER_WAKEUP, LINGER};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("another colibrid is serving {0}")]
    SocketInUse(PathBuf),
    #[error("{what} {path}: {source}")]
    Path {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{0}: {1}")]
    Os(&'static str, io::Error),
    #[error("session store: {0}")]
    Store(String),
}

/// Wakes the loop when the log writer (or the watch journal's writer)
/// finished a batch; outside the token table, so dispatch ignores it and
/// the wakeup's flush collects the batch.
const WRITER_TOKEN: Token = Token(usize::MAX);

pub(crate) use crate::daemon::listener::Listener;

#[derive(Debug)]
pub(crate) enum RunState {
    Running,
    /// SIGTERM sent to every agent; `killed` once SIGKILL followed.
    Stopping {
        killed: bool,
        hard_deadline: Option<Timestamp>,
    },
}

pub struct Daemon {
    pub(crate) settings: Settings,
    pub(crate) poll: Poll,
    pub(crate) tokens: Tokens,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) conns: Slab<Conn>,
    pub(crate) panes: PaneTable,
    pub(crate) store: SessionStore,
    pub(crate) alerter: Alerter,
    /// Agents' `activity` posts, limited per pane.
    pub(crate) activity: crate::daemon::activity::ActivityLimiter,
    pub(crate) signals: SignalSource,
    pub(crate) heartbeat: KernelTimer,
    /// Every pane's deadlines over one kernel timer.
    pub(crate) timerq: TimerQueue,
    /// The timer, its token, and when it is due (monotonic): see
    /// `shutdown_timer_fired` for why the due time is kept.
    pub(crate) shutdown_timer: Option<(KernelTimer, Token, std::time::Instant)>,
    /// Work a budget cut short, and PTY reads, by class (`sched.rs`).
    pub(crate) sched: Sched,
    /// Whether the loop may sleep, and until when (`sched::Wakeups`).
    pub(crate) wake: Wakeups,
    pub(crate) dirty_conns: BTreeSet<usize>,
    /// Frames with marks up to these may leave (`after_wakeup`).
    pub(crate) confirmed: Marks,
    pub(crate) bus: Bus,
    pub(crate) attached: crate::daemon::attach::ring::Attached,
    pub(crate) transitions: Vec<Transition>,
    /// The facts buffer lent to the pane being read (`govern.rs`).
    pub(crate) facts_spare: Vec<crate::core::policy::LineFacts>,
    pub(crate) read_buf: Vec<u8>,
    pub(crate) run_state: RunState,
    pub(crate) started_at: Timestamp,
    /// The kernel's name and release, read once at start.
    pub(crate) os: String,
    /// Signals received since start, by name (`status` shows them).
    pub(crate) signals_received: std::collections::BTreeMap<&'static str, u64>,
    pub(crate) reloader: crate::daemon::Reloader,
    pub(crate) control: crate::daemon::control_plane::ControlPlane,
    pub(crate) records: crate::daemon::supervise::records::RecordsWriter,
    /// PTY masters of panes that ended, closed once the frames are sent.
    pub(crate) deferred_closes: DeferredCloses,
    pub(crate) approvals: crate::daemon::approvals::desk::ApprovalDesk,
    /// Connections waiting for a `compact-session` to end.
    pub(crate) compact_waiters: Vec<crate::daemon::compaction::waiter::CompactWaiter>,
    /// The policies and their state (`daemon::govern` carries them out).
    pub(crate) governor: crate::core::policy::Governor,
    /// Host operations running for `hostop` requests.
    pub(crate) hostops: crate::daemon::hostops::runs::HostRuns,
}

pub fn now() -> Timestamp {
    Timestamp::from_system(SystemTime::now())
}

impl Daemon {
    /// Binds the sockets, opens the store and recovers what a previous
    /// daemon left. Nothing is spawned yet.
    pub fn start(
        settings: Settings,
        reloader: crate::daemon::Reloader,
    ) -> Result<Daemon, DaemonError> {
        let t0 = now();
        match platform::raise_fd_limit() {
            Ok(n) => log_debug!("file descriptor limit {n}"),
            Err(e) => log_warn!("cannot raise the file descriptor limit: {e}"),
        }
        if let Err(e) = platform::become_subreaper() {
            log_warn!(
                "cannot become a subreaper (orphaned grandchildren will not be reaped here): {e}"
            );
        }
        let poll = Poll::new().map_err(|e| DaemonError::Os("creating the poll", e))?;
        let mut tokens = Tokens::default();
        let sig_token = tokens.insert(Source::Signals);
        let signals = SignalSource::register(poll.registry(), sig_token)
            .map_err(|e| DaemonError::Os("watching signals", e))?;
        let hb_token = tokens.insert(Source::Heartbeat);
        let mut heartbeat = KernelTimer::new(poll.registry(), hb_token)
            .map_err(|e| DaemonError::Os("creating the heartbeat timer", e))?;
        heartbeat
            .arm_periodic(poll.registry(), settings.daemon.heartbeat)
            .map_err(|e| DaemonError::Os("arming the heartbeat", e))?;
        let timerq = TimerQueue::new(poll.registry(), &mut tokens)
            .map_err(|e| DaemonError::Os("creating the deadline timer", e))?;

        let (mut store, recovery) = SessionStore::open(settings.store.clone())
            .map_err(|e| DaemonError::Store(e.to_string()))?;
        store.set_classifier(Box::new(crate::daemon::classify::classify_line));
        if let Err(e) = store.start_writer(poll.registry(), WRITER_TOKEN) {
            log_warn!("cannot start the log writer thread (writing on the loop): {e}");
        }
        for p in &recovery.problems {
            log_warn!("session store: {p}");
        }
        if recovery.corrupt_lines > 0 {
            log_warn!(
                "session store: skipped {} corrupt log line(s)",
                recovery.corrupt_lines
            );
        }
        let mut journal = Journal::open(JournalConfig::in_dir(&settings.daemon.state_dir), t0);
        // Its wakeups reach the loop through the store writer's waker.
        let started = store.waker().map(|w| journal.start_writer(w));
        if let Some(Err(e)) = started {
            log_warn!("cannot start the watch journal thread (writing on the loop): {e}");
        }
        let mut alerter = Alerter::new(settings.alert.clone());
        // Sent once the frames of their wakeup have left (log_flow.rs).
        alerter.hold_sends();
        if settings.alert.enabled
            && settings.alert.socket.is_none()
            && !crate::daemon::alert::SYSTEM_LOG_SOCKETS
                .iter()
                .any(|p| Path::new(p).exists())
        {
            // Otherwise alerts would vanish without a word.
            log_warn!(
                "no system log socket ({}); alerts are dropped until one appears (see --syslog-socket, --no-syslog)",
                crate::daemon::alert::SYSTEM_LOG_SOCKETS.join(", ")
            );
        }
        let state_dir = settings.daemon.state_dir.clone();
        let ack_timeout = settings.orchestrator.ack_timeout;
        let governor = crate::core::policy::Governor::new(settings.governance.clone());
        let mut d = Daemon {
            governor,
            panes: PaneTable::default(),
            settings,
            poll,
            tokens,
            listeners: Vec::new(),
            conns: Slab::new(),
            store,
            alerter,
            activity: Default::default(),
            signals,
            heartbeat,
            timerq,
            shutdown_timer: None,
            sched: Sched::default(),
            wake: Wakeups::default(),
            dirty_conns: BTreeSet::new(),
            confirmed: Marks { log: 0, journal: 0 },
            bus: Bus::new(uuid::Uuid::new_v4().simple().to_string(), journal),
            attached: Default::default(),
            transitions: Vec::new(),
            facts_spare: Vec::new(),
            read_buf: vec![0; READ_BUF],
            run_state: RunState::Running,
            started_at: t0,
            os: platform::os_release(),
            signals_received: std::collections::BTreeMap::new(),
            reloader,
            control: crate::daemon::control_plane::ControlPlane::open(&state_dir, ack_timeout),
            records: Default::default(),
            deferred_closes: DeferredCloses::default(),
            approvals: crate::daemon::approvals::desk::ApprovalDesk::default(),
            compact_waiters: Vec::new(),
            hostops: Default::default(),
        };
        d.rearm_task_timer(t0);
        d.recover(recovery, t0);
        let operator = d.settings.daemon.socket.clone();
        d.bind(&operator, Scope::Operator)?;
        d.start_notify_satellite(t0);
        d.start_fleet_bridge(t0);
        for (jail, path) in d.settings.jail_sockets.clone() {
            d.bind(&path, Scope::Jail(jail))?;
        }
        log_info!(
            "listening on {} ({} jail socket(s)), state in {}",
            operator.display(),
            d.settings.jail_sockets.len(),
            d.settings.daemon.state_dir.display()
        );
        d.supervise_at_start(t0);
        // What recovery and the start changed, now: the first wakeup may be
        // a heartbeat away.
        d.write_records();
        Ok(d)
    }

    /// Runs until an orderly shutdown completes.
    pub fn run(mut self) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if self.must_not_sleep() {
                Some(Duration::ZERO)
            } else {
                let due = self.wake.due(self.alerter.held_due());
                due.map(|due| due.since(now()))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(DaemonError::Os("polling", e));
            }
            let t = now();
            for ev in events.iter() {
                self.dispatch(
                    ev.token(),
                    ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                    ev.is_writable(),
                    t,
                );
            }
            self.run_pending(t);
            self.after_wakeup(t);
            if self.ready_to_exit(t) {
                break;
            }
        }
        self.finish_shutdown()
    }

    /// Work is left that the next wakeup must not wait for: queued work,
    /// the store's, a replay or a streamed reply with room for more.
    fn must_not_sleep(&self) -> bool {
        let store = StoreWork {
            writer_busy: self.store.waiting_for_writer(),
            compaction: self.store.compaction_active(),
            index: self.store.index_pending(),
        };
        !self.sched.is_empty()
            || self.wake.store_busy(store)
            || self.bus.replay_wants_more(&self.conns)
            || self.streams_want_more()
    }

    pub(crate) fn dispatch(&mut self, token: Token, readable: bool, writable: bool, t: Timestamp) {
        let Some(source) = self.tokens.get(token) else {
            return;
        };
        match source {
            Source::Listener(i) => self.accept(i, t),
            Source::Conn(id) => {
                if writable {
                    self.dirty_conns.insert(id.0);
                }
                if readable {
                    self.conn_readable(id, t);
                }
            }
            Source::Pty(key) => {
                if writable {
                    self.write_input(key);
                }
                if readable {
                    // Bulk work: read after every urgent event of the pass.
                    if let Some(p) = self.panes.agent_mut(key).and_then(|a| a.proc.as_mut()) {
                        p.read_pending = true;
                    }
                    self.push_pending(Pending::Pty(key));
                }
            }
            Source::Exit(key) => self.exit_notice(key, t),
            Source::Timers => self.timers_fired(t),
            Source::Heartbeat => {
                if self.heartbeat.acknowledge() > 0 {
                    self.on_heartbeat(t);
                }
            }
            Source::Shutdown => self.shutdown_timer_fired(t),
            Source::Signals => self.on_signals(t),
            Source::TaskAck => self.task_ack_due(t),
            Source::Hostop(id, wake) => self.hostop_woke(id, wake, t),
        }
    }

    pub(crate) fn push_pending(&mut self, p: Pending) {
        self.sched.push(p);
    }

    /// Serves the urgent work a budget cut short, then the PTYs, round
    /// robin, a quantum a turn, until the pass's budget is spent
    /// (`sched::BulkPass`).
    pub(crate) fn run_pending(&mut self, t: Timestamp) {
        for p in self.sched.take_urgent() {
            match p {
                Pending::Conn(id) => self.conn_readable(id, t),
                Pending::Exit(key) => self.exit_notice(key, t),
                // Accepts left by the budget; a still busy listener is
                // queued again for the next pass (`accept`).
                Pending::Accept(i) => self.accept(i, t),
                Pending::Pty(key) => self.push_pending(Pending::Pty(key)),
                Pending::Hostop(id) => self.hostop_step(id, t),
            }
        }
        self.retry_store_blocked();
        let mut bulk = BulkPass::new(PTY_PASS_BUDGET);
        while let Some((key, quantum)) = bulk.next(&mut self.sched) {
            let read = self.read_pty(key, quantum, t);
            bulk.spent(read);
        }
    }

    pub(crate) fn after_wakeup(&mut self, t: Timestamp) {
        // Before the flush: an exit the sweep finds is logged, published
        // and sent in this wakeup (its pidfd event is gone with the reap).
        self.sweep_orphans_if_due(t);
        // Logs first: a reply never reports an event its log does not hold.
        self.flush_logs(t);
        if self.store.compaction_active() {
            // At least twice what a flush may append per wakeup, so the
            // copy of the log's tail always catches up.
            let budget =
                COMPACTION_STEP_BYTES.max(self.settings.store.flush_budget.saturating_mul(2));
            if let Some(CompactionProgress::Done { rotation, .. }) =
                self.store.compaction_step(budget)
            {
                log_info!("{rotation:?}");
                self.compaction_ended(&rotation, t);
            }
        }
        self.answer_given_up_compactions(t);
        self.log_retired_sessions();
        self.bus.end_pass(&mut self.conns, &mut self.dirty_conns, t);
        // No reply or watch event leaves before its log holds the lines it
        // reports and the watch journal the events (a crash could lose
        // them): each frame queued in this pass gets the marks of what is
        // buffered now (log batch, bus seq), and leaves once both writers
        // have confirmed that far. Agents are read meanwhile; a burst's
        // events go out as the writers confirm them, not only once idle.
        let journaled = self.bus.sync_journal();
        self.bus
            .pump_replays(&mut self.conns, &mut self.dirty_conns, t);
        self.pump_streams(t);
        let mark = Marks {
            log: self.store.log_mark(),
            journal: self.bus.seq(),
        };
        self.confirmed = Marks {
            log: if self.wake.store_pending {
                self.store.logged_through()
            } else {
                u64::MAX
            },
            journal: journaled,
        };
        let dirty: Vec<usize> = std::mem::take(&mut self.dirty_conns).into_iter().collect();
        for id in dirty {
            if let Some(c) = self.conns.get_mut(id) {
                c.stamp(mark);
            }
            self.flush_conn(ConnId(id), t);
        }
        if self.wake.accept_starved {
            // The fds an accept waits for: not after the frames.
            self.deferred_closes.close_all();
        }
        if self.wake.accept_blocked && !self.is_stopping() {
            self.wake.accept_blocked = false;
            self.wake.accept_starved = false;
            for i in 0..self.listeners.len() {
                self.accept(i, t);
            }
        }
        // Last: encoding every agent's record takes milliseconds with
        // thousands of agents, and the frames above are on their way (their
        // writers confirm meanwhile) rather than waiting behind it.
        let writers_behind = self.confirmed.log < mark.log || self.confirmed.journal < mark.journal;
        self.deferred_closes.end_of_wakeup(writers_behind);
        self.send_alerts_after_frames(writers_behind, t);
        self.write_records_after_frames(writers_behind, t);
    }
}
