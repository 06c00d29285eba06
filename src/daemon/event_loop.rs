//! The loop: one thread, one `mio::Poll`, one token space.
//!
//! [`Daemon`] owns everything: the poll, the token slab, the listeners and
//! connections, the supervisor (the pure core), one [`Agent`] per pane, the
//! session store and the alerter. Each wakeup dispatches every event on
//! what its token names, then finishes the work a budget cut short, writes
//! the session logs, and only then flushes replies, so no client ever sees
//! an event that is not in its log yet.
//!
//! **Invariant:** nothing here blocks. Every fd is non-blocking; child exit
//! and deadlines are kernel events (`platform::ExitWatch`, `KernelTimer`);
//! reads are budgeted per source and unfinished readiness is remembered in
//! `pending` so edge-triggered sources are never forgotten.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use mio::net::{UnixListener, UnixStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::core::ingest::{Frame, LineFramer};
use crate::core::pane::{ExitStatus, LineKind, Transition};
use crate::core::state::AgentState;
use crate::core::supervisor::{PaneKey, Supervisor};
use crate::core::time::Timestamp;
use crate::daemon::agent::{Agent, Proc, Recipe, TimerMode};
use crate::daemon::alert::{AlertFields, AlertKind, Alerter};
use crate::daemon::conn::{Conn, Scope};
use crate::daemon::diag::{log_debug, log_error, log_info, log_warn};
use crate::daemon::settings::{Settings, DRAIN_GRACE};
use crate::daemon::source::{ConnId, Source, Tokens};
use crate::daemon::store::{CompactionProgress, ExitRecord, LineRecord, SessionStore};
use crate::platform::{self, DaemonSignal, KernelTimer, ReadOutcome, SignalSource};
use crate::protocol::{self, WatchEvent, WatchKind};

/// Bytes read from one PTY per wakeup before other sources get a turn.
const PTY_READ_BUDGET: usize = 256 * 1024;
const READ_BUF: usize = 64 * 1024;
/// Log bytes a running rotation may read per wakeup. Compaction reads a log
/// twice; 125 MB took 0.5 s in one piece, so this is about 10 ms of work.
const COMPACTION_STEP_BYTES: usize = 4 << 20;
/// Requests served plus reads made for one client per wakeup.
const CONN_STEPS_PER_WAKEUP: usize = 64;
/// A connection marked for closing is closed after this long even if its
/// peer never reads the last lines.
const LINGER: Duration = Duration::from_secs(5);

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

/// Work left over from a wakeup because a budget ran out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Pending {
    Pty(PaneKey),
    Conn(ConnId),
    /// An exit noticed at registration (the child died before we watched).
    Exit(PaneKey),
}

#[derive(Debug)]
struct Listener {
    /// `None` once shutdown has begun: closing the socket makes new
    /// connects fail at once instead of waiting in the backlog.
    socket: Option<UnixListener>,
    path: PathBuf,
    scope: Scope,
}

#[derive(Debug)]
enum Life {
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
    listeners: Vec<Listener>,
    pub(crate) conns: Slab<Conn>,
    pub(crate) sup: Supervisor,
    pub(crate) agents: Vec<Agent>,
    pub(crate) store: SessionStore,
    pub(crate) alerter: Alerter,
    signals: SignalSource,
    heartbeat: KernelTimer,
    shutdown_timer: Option<(KernelTimer, Token)>,
    pending: VecDeque<Pending>,
    pending_set: BTreeSet<Pending>,
    dirty_conns: BTreeSet<usize>,
    pub(crate) watchers: Vec<ConnId>,
    pub(crate) seq: u64,
    pub(crate) transitions: Vec<Transition>,
    read_buf: Vec<u8>,
    life: Life,
    accept_blocked: bool,
    pub(crate) started_at: Timestamp,
    /// The kernel's name and release, read once at start.
    pub(crate) os: String,
    /// Signals received since start, by name (`status` shows them).
    pub(crate) signals_received: BTreeMap<&'static str, u64>,
    /// Panes whose reads wait for their session log to drain.
    store_blocked: BTreeSet<PaneKey>,
    /// The last flush hit its budget: come back without sleeping.
    store_pending: bool,
    /// The last flush failed (disk full or failing): retried at the next
    /// wakeup of any kind (at the latest the heartbeat), never in a spin.
    store_failing: bool,
    reloader: crate::daemon::Reloader,
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

        let (mut store, recovery) = SessionStore::open(settings.store.clone())
            .map_err(|e| DaemonError::Store(e.to_string()))?;
        store.set_classifier(Box::new(crate::daemon::commands::classify_line));
        for p in &recovery.problems {
            log_warn!("session store: {p}");
        }
        if recovery.corrupt_lines > 0 {
            log_warn!(
                "session store: skipped {} corrupt log line(s)",
                recovery.corrupt_lines
            );
        }
        let alerter = Alerter::new(settings.alert.clone());
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
        let mut d = Daemon {
            sup: Supervisor::new(settings.daemon.max_line),
            settings,
            poll,
            tokens,
            listeners: Vec::new(),
            conns: Slab::new(),
            agents: Vec::new(),
            store,
            alerter,
            signals,
            heartbeat,
            shutdown_timer: None,
            pending: VecDeque::new(),
            pending_set: BTreeSet::new(),
            dirty_conns: BTreeSet::new(),
            watchers: Vec::new(),
            seq: 0,
            transitions: Vec::new(),
            read_buf: vec![0; READ_BUF],
            life: Life::Running,
            accept_blocked: false,
            started_at: t0,
            os: platform::os_release(),
            signals_received: BTreeMap::new(),
            store_blocked: BTreeSet::new(),
            store_pending: false,
            store_failing: false,
            reloader,
        };
        d.recover(recovery, t0);
        let operator = d.settings.daemon.socket.clone();
        d.bind(&operator, Scope::Operator)?;
        for (jail, path) in d.settings.jail_sockets.clone() {
            d.bind(&path, Scope::Jail(jail))?;
        }
        log_info!(
            "listening on {} ({} jail socket(s)), state in {}",
            operator.display(),
            d.settings.jail_sockets.len(),
            d.settings.daemon.state_dir.display()
        );
        Ok(d)
    }

    fn bind(&mut self, path: &Path, scope: Scope) -> Result<(), DaemonError> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|e| DaemonError::Path {
                    what: "creating",
                    path: dir.to_path_buf(),
                    source: e,
                })?;
            }
        }
        if path.exists() {
            // A live daemon answers a connect; a stale socket file refuses it.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(DaemonError::SocketInUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|e| DaemonError::Path {
                what: "removing stale socket",
                path: path.to_path_buf(),
                source: e,
            })?;
            log_info!("replaced stale socket {}", path.display());
        }
        let mut socket = UnixListener::bind(path).map_err(|e| DaemonError::Path {
            what: "binding",
            path: path.to_path_buf(),
            source: e,
        })?;
        let mode = match scope {
            Scope::Operator => self.settings.daemon.socket_mode,
            // Jailed agents connect as users of the jail; the listener itself
            // is the authorisation (it is visible only in that jail).
            Scope::Jail(_) => 0o666,
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
            DaemonError::Path {
                what: "setting the mode of",
                path: path.to_path_buf(),
                source: e,
            }
        })?;
        if let (Scope::Operator, Some(group)) = (&scope, &self.settings.daemon.socket_group) {
            match nix::unistd::Group::from_name(group) {
                Ok(Some(g)) => {
                    if let Err(e) = nix::unistd::chown(path, None, Some(g.gid)) {
                        log_warn!("cannot give {} to group {group}: {e}", path.display());
                    }
                }
                _ => log_warn!("socket group {group} does not exist"),
            }
        }
        let token = self.tokens.insert(Source::Listener(self.listeners.len()));
        self.poll
            .registry()
            .register(&mut socket, token, Interest::READABLE)
            .map_err(|e| DaemonError::Os("registering a listener", e))?;
        self.listeners.push(Listener {
            socket: Some(socket),
            path: path.to_path_buf(),
            scope,
        });
        Ok(())
    }

    /// Runs until an orderly shutdown completes.
    pub fn run(mut self) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(1024);
        loop {
            // Panes blocked on a failing disk are retried at the next wakeup
            // of any kind (the heartbeat at the latest), not in a spin.
            let busy = !self.pending.is_empty()
                || self.store_pending
                || self.store.compaction_active()
                || (!self.store_blocked.is_empty() && !self.store_failing);
            let timeout = if busy { Some(Duration::ZERO) } else { None };
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
        self.finish_shutdown();
        Ok(())
    }

    fn dispatch(&mut self, token: Token, readable: bool, writable: bool, t: Timestamp) {
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
                    if let Some(p) = self
                        .agents
                        .get_mut(key.0 as usize)
                        .and_then(|a| a.proc.as_mut())
                    {
                        p.read_pending = true;
                    }
                    self.read_pty(key, t);
                }
            }
            Source::Exit(key) => self.exit_notice(key, t),
            Source::PaneTimer(key) => self.pane_timer(key, t),
            Source::Heartbeat => {
                if self.heartbeat.acknowledge() > 0 {
                    self.on_heartbeat(t);
                }
            }
            Source::Shutdown => self.shutdown_timer_fired(t),
            Source::Signals => self.on_signals(t),
        }
    }

    fn push_pending(&mut self, p: Pending) {
        if self.pending_set.insert(p) {
            self.pending.push_back(p);
        }
    }

    /// Serves each source a budget cut short once more, round robin.
    fn run_pending(&mut self, t: Timestamp) {
        let n = self.pending.len();
        for _ in 0..n {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.pending_set.remove(&p);
            match p {
                Pending::Pty(key) => self.read_pty(key, t),
                Pending::Conn(id) => self.conn_readable(id, t),
                Pending::Exit(key) => self.exit_notice(key, t),
            }
        }
        if !self.store_blocked.is_empty() {
            let blocked: Vec<PaneKey> = self.store_blocked.iter().copied().collect();
            for key in blocked {
                let session = &self.agents[key.0 as usize].session;
                if !self.store_pending && !self.store.over_limit(session) {
                    self.store_blocked.remove(&key);
                    self.read_pty(key, t);
                }
            }
        }
    }

    fn after_wakeup(&mut self, t: Timestamp) {
        // Logs first: a reply never reports an event its log does not hold.
        let report = self.store.flush(self.settings.store.flush_budget);
        // A failing disk is retried at the next wakeup or heartbeat, not in
        // a tight loop.
        self.store_pending = report.pending && report.failed.is_none();
        match (report.failed, self.store_failing) {
            (Some(kind), false) => {
                // Said once per episode; status shows the running counts.
                log_warn!("session log writes fail ({kind:?}); data stays buffered and is retried");
                self.log_write_alert(t);
                self.store_failing = true;
            }
            (None, true) if report.written > 0 => {
                log_info!("session log writes succeed again");
                self.store_failing = false;
            }
            _ => {}
        }
        if self.store.compaction_active() {
            // At least twice what a flush may append per wakeup, so the
            // copy of the log's tail always catches up.
            let budget =
                COMPACTION_STEP_BYTES.max(self.settings.store.flush_budget.saturating_mul(2));
            if let Some(CompactionProgress::Done { rotation, .. }) =
                self.store.compaction_step(budget)
            {
                log_info!("{rotation:?}");
            }
        }
        // Until the flush has caught up, no reply or watch event leaves: one
        // could report a line that a crash would lose. Agents are not read
        // meanwhile (see `read_pty`), so the log catches up in a few wakeups.
        if !self.store_pending {
            let dirty: Vec<usize> = std::mem::take(&mut self.dirty_conns).into_iter().collect();
            for id in dirty {
                self.flush_conn(ConnId(id), t);
            }
        }
        if self.accept_blocked && !self.is_stopping() {
            self.accept_blocked = false;
            for i in 0..self.listeners.len() {
                self.accept(i, t);
            }
        }
    }

    /// Tells the operator the logs are failing, with what is lost so far.
    /// Rate-limited like a pane's alerts (under the pseudo-pane `colibrid`).
    fn log_write_alert(&mut self, t: Timestamp) {
        let h = self.store.health();
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
        self.alerter.alert(AlertKind::LogWrite, &fields, t);
    }

    // -----------------------------------------------------------------------
    // Connections

    fn accept(&mut self, i: usize, t: Timestamp) {
        if self.is_stopping() {
            return;
        }
        loop {
            let Some(l) = self.listeners.get(i) else {
                return;
            };
            let Some(socket) = l.socket.as_ref() else {
                return;
            };
            let (mut stream, scope) = match socket.accept() {
                Ok((s, _)) => (s, l.scope.clone()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE/ENFILE: the listener stays readable but no new
                    // edge will come; retry after something closes.
                    log_warn!("accept on {}: {e}", l.path.display());
                    self.accept_blocked = true;
                    return;
                }
            };
            if self.conns.len() >= self.settings.daemon.max_connections {
                let line = protocol::err_line(None, "too many connections; try again later");
                let _ = io::Write::write(&mut stream, &line);
                continue;
            }
            if let Scope::Jail(jail) = &scope {
                if let Err(why) = self.check_jail_peer(&stream, jail) {
                    log_warn!("refused a connection on the socket of jail {jail}: {why}");
                    let line = protocol::err_line(None, &why);
                    let _ = io::Write::write(&mut stream, &line);
                    continue;
                }
            }
            let entry = self.conns.vacant_entry();
            let id = ConnId(entry.key());
            let token = self.tokens.insert(Source::Conn(id));
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)
            {
                log_warn!("registering a connection: {e}");
                self.tokens.remove(token);
                continue;
            }
            entry.insert(Conn::new(
                stream,
                token,
                scope,
                self.settings.daemon.max_request,
            ));
            // Data may have arrived before registration; edge-triggered
            // polling would not report it again.
            self.push_pending(Pending::Conn(id));
            let _ = t;
        }
    }

    /// On FreeBSD the peer's process must run in the jail the socket
    /// belongs to; elsewhere the per-jail socket's visibility is the check.
    fn check_jail_peer(&self, stream: &UnixStream, jail: &str) -> Result<(), String> {
        let cred = platform::peer_cred(stream.as_fd())
            .map_err(|e| format!("cannot read peer credentials: {e}"))?;
        let Some(pid) = cred.pid else { return Ok(()) };
        let peer_jid = match platform::pid_jail(pid) {
            Ok(j) => j,
            Err(e) => return Err(format!("cannot find the jail of pid {pid}: {e}")),
        };
        if !platform::JAILS_SUPPORTED {
            return Ok(());
        }
        let expected =
            platform::resolve_jail(jail).map_err(|e| format!("jail {jail} is not running: {e}"))?;
        if peer_jid != expected.jid {
            return Err(format!(
                "peer pid {pid} runs in jail id {peer_jid}, not in {jail}"
            ));
        }
        Ok(())
    }

    /// Serves queued requests while the client keeps up with its replies,
    /// and reads more only when none are queued.
    fn conn_readable(&mut self, id: ConnId, t: Timestamp) {
        // One budget per call for requests served and reads made, so no
        // client (not even one sending blank lines, which get no reply) can
        // keep the loop to itself; what is left is revisited via `pending`.
        let mut budget = CONN_STEPS_PER_WAKEUP;
        loop {
            if budget == 0 {
                self.push_pending(Pending::Conn(id));
                self.dirty_conns.insert(id.0);
                return;
            }
            budget -= 1;
            let Some(conn) = self.conns.get_mut(id.0) else {
                return;
            };
            if conn.closing {
                return;
            }
            if !conn.accepts_requests() {
                // Resumed by `flush_conn` once the client has read.
                conn.read_pending = true;
                return;
            }
            if let Some(line) = conn.requests.pop_front() {
                self.serve_line(id, &line, t);
                continue;
            }
            if conn.eof {
                conn.close_after_flush(t);
                self.dirty_conns.insert(id.0);
                return;
            }
            conn.read_pending = false;
            let got = conn.receive(&mut self.read_buf);
            if got.oversize {
                conn.requests.clear();
                let line = protocol::err_line(
                    None,
                    &format!(
                        "request line exceeds {} bytes; closing",
                        self.settings.daemon.max_request
                    ),
                );
                conn.enqueue(Rc::from(line));
                conn.close_after_flush(t);
                self.dirty_conns.insert(id.0);
                return;
            }
            conn.eof = got.eof;
            if conn.requests.is_empty() && !got.eof {
                if got.more {
                    self.push_pending(Pending::Conn(id));
                }
                self.dirty_conns.insert(id.0);
                return;
            }
        }
    }

    fn serve_line(&mut self, id: ConnId, line: &[u8], t: Timestamp) {
        if crate::core::ingest::is_blank(line) {
            return;
        }
        let reply = match protocol::Request::parse(line) {
            Ok(req) => self.handle(id, req, t),
            Err((rid, e)) => Some(protocol::err_line(rid.as_ref(), &e.to_string())),
        };
        if let Some(reply) = reply {
            self.send(id, Rc::from(reply), t);
        }
    }

    /// Queues a reply; a client far behind on plain replies is closed.
    pub(crate) fn send(&mut self, id: ConnId, frame: Rc<[u8]>, t: Timestamp) {
        let Some(conn) = self.conns.get_mut(id.0) else {
            return;
        };
        if !conn.enqueue(frame) && conn.watch.is_none() {
            log_warn!("closing a client that does not read its replies");
            conn.drop_backlog_and_close(
                Rc::from(protocol::err_line(None, "reply queue full; closing")),
                t,
            );
        }
        self.dirty_conns.insert(id.0);
    }

    fn flush_conn(&mut self, id: ConnId, t: Timestamp) {
        let Some(conn) = self.conns.get_mut(id.0) else {
            return;
        };
        let failed = conn.flush().is_err();
        let linger_over = conn.closing_since.is_some_and(|s| t.since(s) >= LINGER);
        if failed || (conn.closing && (conn.is_flushed() || linger_over)) {
            self.close_conn(id);
            return;
        }
        if let Err(e) = conn.update_interest(self.poll.registry()) {
            log_warn!("updating a connection's interest: {e}");
            self.close_conn(id);
            return;
        }
        if conn.read_pending && conn.accepts_requests() {
            self.push_pending(Pending::Conn(id));
        }
    }

    fn close_conn(&mut self, id: ConnId) {
        if !self.conns.contains(id.0) {
            return;
        }
        let mut conn = self.conns.remove(id.0);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.tokens.remove(conn.token);
        self.watchers.retain(|w| *w != id);
        self.accept_blocked = true;
    }

    // -----------------------------------------------------------------------
    // Watch

    /// Numbers an event and queues it to every watcher that wants it. A
    /// watcher whose queue is full is dropped with a final error line; the
    /// agents never wait for it.
    pub(crate) fn publish(&mut self, kind: WatchKind, t: Timestamp) {
        self.seq += 1;
        if self.watchers.is_empty() {
            return;
        }
        let pane_jail = kind
            .pane()
            .and_then(|p| self.sup.key(p))
            .and_then(|k| self.agents.get(k.0 as usize))
            .and_then(|a| a.jail.clone());
        let ev = WatchEvent {
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
            let Some(conn) = self.conns.get_mut(id.0) else {
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
                conn.drop_backlog_and_close(Rc::from(protocol::err_line(None, &msg)), t);
                dropped.push(id);
            }
            self.dirty_conns.insert(id.0);
        }
        if !dropped.is_empty() {
            log_warn!("dropped {} watcher(s) that fell behind", dropped.len());
            self.watchers.retain(|w| !dropped.contains(w));
        }
    }

    // -----------------------------------------------------------------------
    // Agents: output

    fn read_pty(&mut self, key: PaneKey, t: Timestamp) {
        let k = key.0 as usize;
        let mut budget = PTY_READ_BUDGET;
        loop {
            let Some(agent) = self.agents.get_mut(k) else {
                return;
            };
            if self.store_pending || self.store.over_limit(&agent.session) {
                // Backpressure: while its log (or the flush) is behind, the
                // agent waits on its PTY; nothing is lost.
                self.store_blocked.insert(key);
                return;
            }
            let Some(proc_) = agent.proc.as_mut() else {
                return;
            };
            if proc_.eof || !proc_.read_pending {
                return;
            }
            if budget == 0 {
                self.push_pending(Pending::Pty(key));
                return;
            }
            let outcome = platform::read_master(proc_.master.as_fd(), &mut self.read_buf);
            match outcome {
                Ok(ReadOutcome::Data(n)) => {
                    budget = budget.saturating_sub(n);
                    self.ingest_chunk(key, n, t);
                }
                Ok(ReadOutcome::WouldBlock) => {
                    proc_.read_pending = false;
                    break;
                }
                Ok(ReadOutcome::Eof) => {
                    proc_.read_pending = false;
                    proc_.eof = true;
                    self.pty_eof(key, t);
                    break;
                }
                Err(e) => {
                    log_warn!("reading the PTY of pane {}: {e}", agent.pane_id);
                    proc_.read_pending = false;
                    proc_.eof = true;
                    self.pty_eof(key, t);
                    break;
                }
            }
        }
        self.after_ingest(key, t);
    }

    /// Frames `read_buf[..n]`, feeds each line to the pane and its log.
    fn ingest_chunk(&mut self, key: PaneKey, n: usize, t: Timestamp) {
        let k = key.0 as usize;
        let (Some(agent), Some(pane)) = (self.agents.get_mut(k), self.sup.get_mut(key)) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        pane.count_bytes(n);
        let turns_before = pane.turns();
        let mut sink = LineSink {
            max_line: proc_.framer.max_line() as u64,
            store: &mut self.store,
            session: &agent.session,
            pane_id: &agent.pane_id,
            pane,
            out: &mut self.transitions,
            t,
        };
        proc_.framer.feed(&self.read_buf[..n], |frame| {
            sink.take(frame);
        });
        for _ in turns_before..pane.turns() {
            self.store.note_turn(&agent.session);
        }
    }

    /// Feeds one line that did not come from the PTY (`emit`).
    pub(crate) fn ingest_external(&mut self, key: PaneKey, line: &[u8], t: Timestamp) -> LineKind {
        let k = key.0 as usize;
        let (Some(agent), Some(pane)) = (self.agents.get_mut(k), self.sup.get_mut(key)) else {
            return LineKind::Malformed;
        };
        let turns_before = pane.turns();
        pane.count_bytes(line.len() + 1);
        let frame = if line.len() > self.settings.daemon.max_line {
            Frame::Oversize
        } else {
            Frame::Line(line)
        };
        let kind = LineSink {
            max_line: self.settings.daemon.max_line as u64,
            store: &mut self.store,
            session: &agent.session,
            pane_id: &agent.pane_id,
            pane: &mut *pane,
            out: &mut self.transitions,
            t,
        }
        .take(frame);
        if pane.turns() > turns_before {
            self.store.note_turn(&agent.session);
        }
        self.after_ingest(key, t);
        kind
    }

    /// Publishes the transitions a batch of lines caused and keeps the
    /// pane's stall deadline and alerts up to date.
    pub(crate) fn after_ingest(&mut self, key: PaneKey, t: Timestamp) {
        let transitions = std::mem::take(&mut self.transitions);
        for tr in &transitions {
            self.on_transition(key, tr, t);
        }
        self.transitions = transitions;
        self.transitions.clear();
        self.index_runtime(key, t);
        self.refresh_stall(key, t);
    }

    fn on_transition(&mut self, key: PaneKey, tr: &Transition, t: Timestamp) {
        let Some(pane) = self.sup.get(key) else {
            return;
        };
        let reason = match tr.to {
            AgentState::Blocked => pane.blocked_reason().map(str::to_string),
            AgentState::Error => pane.last_error().map(str::to_string),
            _ => None,
        };
        let pane_id = pane.id.0.clone();
        match tr.to {
            AgentState::Blocked => self.alert(key, AlertKind::Blocked, reason.as_deref(), t),
            AgentState::Error => self.alert(key, AlertKind::Error, reason.as_deref(), t),
            _ => {}
        }
        self.publish(
            WatchKind::State {
                pane: pane_id,
                from: tr.from,
                to: tr.to,
                reason,
            },
            t,
        );
    }

    /// Records a detected runtime in the session index, once per pane.
    fn index_runtime(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        if agent.runtime_indexed {
            return;
        }
        let Some(rt) = self.sup.get(key).and_then(|p| p.runtime()) else {
            return;
        };
        agent.runtime_indexed = true;
        self.store
            .ensure_session(&agent.session, Some(rt.as_str()), None, t);
    }

    pub(crate) fn alert(
        &mut self,
        key: PaneKey,
        kind: AlertKind,
        reason: Option<&str>,
        t: Timestamp,
    ) {
        let (Some(pane), Some(agent)) = (self.sup.get(key), self.agents.get(key.0 as usize)) else {
            return;
        };
        let exit = pane.exit();
        let fields = AlertFields {
            pane: pane.id.as_str(),
            name: pane.name.as_deref(),
            runtime: pane.runtime().map(|r| r.as_str()),
            state: pane.state().as_str(),
            session: Some(agent.session.as_str()),
            cwd: pane.cwd(),
            jail: agent.jail.as_deref(),
            reason,
            exit_code: match exit {
                Some(ExitStatus::Code(c)) => Some(c),
                _ => None,
            },
            exit_signal: match exit {
                Some(ExitStatus::Signal(s)) => Some(s),
                _ => None,
            },
        };
        self.alerter.alert(kind, &fields, t);
    }

    // -----------------------------------------------------------------------
    // Agents: stall deadlines

    /// Arms the pane's timer for its stall deadline if nothing else holds
    /// it, and ends a reported stall once the pane is heard from again.
    /// Events never re-arm a running timer: it is re-armed when it fires.
    pub(crate) fn refresh_stall(&mut self, key: PaneKey, t: Timestamp) {
        let default = self.settings.daemon.stall_after;
        let Some(pane) = self.sup.get(key) else {
            return;
        };
        let deadline = pane.stall_deadline(default);
        let quiet = pane.quiet_since();
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        if let Some(at) = agent.stalled_at_quiet {
            if quiet != at || deadline.is_none() {
                agent.stalled_at_quiet = None;
                let pane_id = agent.pane_id.clone();
                self.alert(key, AlertKind::Unstalled, None, t);
                self.publish(WatchKind::Unstalled { pane: pane_id }, t);
            } else {
                return;
            }
        }
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        if agent.timer_mode != TimerMode::Disarmed {
            return;
        }
        let Some(deadline) = deadline else { return };
        self.arm_pane_timer(key, TimerMode::Stall, deadline.since(t), t);
    }

    fn arm_pane_timer(&mut self, key: PaneKey, mode: TimerMode, after: Duration, t: Timestamp) {
        let k = key.0 as usize;
        let Some(agent) = self.agents.get_mut(k) else {
            return;
        };
        if agent.timer.is_none() {
            let token = self.tokens.insert(Source::PaneTimer(key));
            match KernelTimer::new(self.poll.registry(), token) {
                Ok(timer) => agent.timer = Some((timer, token)),
                Err(e) => {
                    self.tokens.remove(token);
                    log_warn!("cannot create a timer for pane {}: {e}", agent.pane_id);
                    return;
                }
            }
        }
        let Some((timer, _)) = agent.timer.as_mut() else {
            return;
        };
        let after = after.max(Duration::from_millis(1));
        match timer.arm_oneshot(self.poll.registry(), after) {
            Ok(()) => {
                agent.timer_mode = mode;
                agent.timer_due = Some(t.plus(after));
            }
            Err(e) => log_warn!("cannot arm the timer of pane {}: {e}", agent.pane_id),
        }
    }

    pub(crate) fn disarm_pane_timer(&mut self, key: PaneKey) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        agent.timer_mode = TimerMode::Disarmed;
        agent.timer_due = None;
        if let Some((timer, _)) = agent.timer.as_mut() {
            let _ = timer.disarm(self.poll.registry());
        }
    }

    fn pane_timer(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        let fired = agent
            .timer
            .as_mut()
            .map_or(0, |(timer, _)| timer.acknowledge());
        if fired == 0 {
            return;
        }
        // The wall clock is read once per wakeup in milliseconds; allow for
        // that rounding, but not for an event that belongs to an earlier arm.
        if let Some(due) = agent.timer_due {
            if t.plus(Duration::from_millis(5)) < due {
                let (mode, left) = (agent.timer_mode, due.since(t));
                self.arm_pane_timer(key, mode, left, t);
                return;
            }
        }
        agent.timer_due = None;
        let mode = std::mem::replace(&mut agent.timer_mode, TimerMode::Disarmed);
        match mode {
            TimerMode::Disarmed => {}
            TimerMode::Stall => self.stall_check(key, t),
            TimerMode::Drain => {
                // A grandchild still holds the PTY: end its group and finish.
                // The agent is reaped, so only its group id is still safe.
                if let Some(p) = agent.proc.as_ref() {
                    let _ = platform::signal_group(p.pid, libc::SIGKILL);
                }
                self.finish(key, t);
            }
            TimerMode::Restart => self.restart_now(key, t),
        }
    }

    fn stall_check(&mut self, key: PaneKey, t: Timestamp) {
        let Some(pane) = self.sup.get(key) else {
            return;
        };
        let Some(deadline) = pane.stall_deadline(self.settings.daemon.stall_after) else {
            return;
        };
        if t < deadline {
            self.arm_pane_timer(key, TimerMode::Stall, deadline.since(t), t);
            return;
        }
        let quiet = pane.quiet_since();
        let silent_ms = t.since(quiet).as_millis() as u64;
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        if agent.stalled_at_quiet.is_some() {
            return;
        }
        agent.stalled_at_quiet = Some(quiet);
        let pane_id = agent.pane_id.clone();
        let reason = format!(
            "silent for {}",
            humantime::format_duration(Duration::from_secs(silent_ms / 1000))
        );
        self.alert(key, AlertKind::Stalled, Some(&reason), t);
        self.publish(
            WatchKind::Stalled {
                pane: pane_id,
                silent_ms,
            },
            t,
        );
    }

    // -----------------------------------------------------------------------
    // Agents: exit

    fn exit_notice(&mut self, key: PaneKey, t: Timestamp) {
        let Some(pid) = self
            .agents
            .get(key.0 as usize)
            .and_then(|a| a.running_pid())
        else {
            return;
        };
        match platform::reap(pid) {
            Ok(Some(status)) => self.process_exited(key, status, t),
            Ok(None) => log_debug!("spurious exit notice for pid {pid}"),
            Err(e) => log_warn!("reaping pid {pid}: {e}"),
        }
    }

    /// The process is gone (reaped): drain the PTY, then finish the pane
    /// once the PTY has reached its end too.
    pub(crate) fn process_exited(&mut self, key: PaneKey, status: ExitStatus, t: Timestamp) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        if proc_.status.is_some() {
            return;
        }
        proc_.status = Some(status);
        proc_.read_pending = true;
        if let Some(w) = proc_.exit_watch.take() {
            w.deregister(self.poll.registry());
        }
        let exit_token = proc_.exit_token;
        self.tokens.remove(exit_token);
        log_debug!(
            "pane {} pid {} exited: {status:?}",
            agent.pane_id,
            proc_.pid
        );
        self.read_pty(key, t);
        let Some(agent) = self.agents.get(key.0 as usize) else {
            return;
        };
        let Some(proc_) = agent.proc.as_ref() else {
            return;
        };
        if proc_.eof {
            self.finish(key, t);
        } else {
            // Until the PTY's end of file (reads cut short by a budget or a
            // log backlog continue meanwhile), but never longer than this.
            self.arm_pane_timer(key, TimerMode::Drain, DRAIN_GRACE, t);
        }
    }

    fn pty_eof(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        if proc_.pty_registered {
            let fd = proc_.master.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            proc_.pty_registered = false;
        }
        if proc_.status.is_some() {
            self.finish(key, t);
        }
        // Otherwise the agent closed its terminal but lives on; its exit
        // notice will finish the pane.
    }

    /// Both the exit and the end of output have happened: fold the exit,
    /// log it, release the fds, and decide on a restart.
    fn finish(&mut self, key: PaneKey, t: Timestamp) {
        let k = key.0 as usize;
        let Some(agent) = self.agents.get_mut(k) else {
            return;
        };
        let Some(mut proc_) = agent.proc.take() else {
            return;
        };
        if proc_.pty_registered {
            let fd = proc_.master.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        }
        self.tokens.remove(proc_.pty_token);
        if agent.timer_mode == TimerMode::Drain || agent.timer_mode == TimerMode::Stall {
            agent.timer_mode = TimerMode::Disarmed;
            if let Some((timer, _)) = agent.timer.as_mut() {
                let _ = timer.disarm(self.poll.registry());
            }
        }
        let status = proc_.status.unwrap_or(ExitStatus::Unknown);
        let Some(pane) = self.sup.get_mut(key) else {
            return;
        };
        // A last line without a newline is still a line.
        let mut sink = LineSink {
            max_line: proc_.framer.max_line() as u64,
            store: &mut self.store,
            session: &agent.session,
            pane_id: &agent.pane_id,
            pane: &mut *pane,
            out: &mut self.transitions,
            t,
        };
        proc_.framer.finish(|frame| {
            sink.take(frame);
        });
        pane.exited(status, t, &mut self.transitions);
        if agent.paused {
            agent.paused = false;
            pane.paused = false;
        }
        let state = pane.state();
        let reason = agent
            .stopped_by
            .clone()
            .or_else(|| pane.last_error().map(str::to_string));
        let (code, signal) = match status {
            ExitStatus::Code(c) => (Some(c), None),
            ExitStatus::Signal(s) => (None, Some(s)),
            ExitStatus::Unknown => (None, None),
        };
        self.store.exit(
            &agent.session,
            &ExitRecord {
                pane: &agent.pane_id,
                state: state.as_str(),
                code,
                signal,
                reason: reason.as_deref(),
            },
            t,
        );
        let pane_id = agent.pane_id.clone();
        let ran_for = t.since(proc_.started);
        drop(proc_);
        self.after_ingest(key, t);
        let kind = AlertKind::Exited;
        self.alert(key, kind, reason.as_deref(), t);
        self.publish(
            WatchKind::Exited {
                pane: pane_id,
                code,
                signal,
            },
            t,
        );
        self.maybe_schedule_restart(key, state, ran_for, t);
        self.accept_blocked = true;
    }

    fn maybe_schedule_restart(
        &mut self,
        key: PaneKey,
        state: AgentState,
        ran_for: Duration,
        t: Timestamp,
    ) {
        if !matches!(self.life, Life::Running) {
            return;
        }
        let backoff = self.settings.restart_backoff.clone();
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        if agent.stopped_by.is_some() || agent.recipe.is_none() {
            return;
        }
        let wanted = match agent.restart.policy {
            crate::daemon::agent::RestartPolicy::Never => false,
            crate::daemon::agent::RestartPolicy::OnFailure => state == AgentState::Error,
            crate::daemon::agent::RestartPolicy::Always => true,
        };
        if !wanted {
            return;
        }
        // A run that outlived the longest backoff step was healthy: the
        // count of consecutive restarts starts over.
        if backoff.last().is_some_and(|last| ran_for >= *last) {
            agent.restart.attempts = 0;
        }
        let Some(delay) = agent.restart_delay(&backoff) else {
            log_info!(
                "pane {} will not be restarted: {} restarts used",
                agent.pane_id,
                agent.restart.attempts
            );
            agent.restart.next_at = None;
            return;
        };
        agent.restart.attempts += 1;
        let next_at = t.plus(delay);
        agent.restart.next_at = Some(next_at);
        let (pane, attempt) = (agent.pane_id.clone(), agent.restart.attempts);
        log_info!(
            "pane {pane} restarts in {} (attempt {attempt})",
            humantime::format_duration(delay)
        );
        self.arm_pane_timer(key, TimerMode::Restart, delay, t);
        self.publish(
            WatchKind::RestartScheduled {
                pane,
                attempt,
                next_at: next_at.to_rfc3339(),
            },
            t,
        );
    }

    fn restart_now(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        agent.restart.next_at = None;
        let Some(recipe) = agent.recipe.clone() else {
            return;
        };
        agent.generation += 1;
        agent.stalled_at_quiet = None;
        let generation = agent.generation;
        let runtime = recipe.runtime;
        let _ = self.sup.reattach(key, runtime, t);
        match self.start_process(key, &recipe, t) {
            Ok(pid) => {
                let pane = self.agents[key.0 as usize].pane_id.clone();
                self.log_attach(key, &recipe, t);
                self.publish(
                    WatchKind::Restarted {
                        pane,
                        generation,
                        pid,
                    },
                    t,
                );
            }
            Err(why) => {
                if let Some(pane) = self.sup.get_mut(key) {
                    pane.fail(format!("restart failed: {why}"), t, &mut self.transitions);
                }
                self.after_ingest(key, t);
                self.maybe_schedule_restart(key, AgentState::Error, Duration::ZERO, t);
            }
        }
    }

    /// Opens a PTY and starts the recipe on it; registers the PTY and the
    /// exit watch. The pane must exist already.
    pub(crate) fn start_process(
        &mut self,
        key: PaneKey,
        recipe: &Recipe,
        t: Timestamp,
    ) -> Result<i32, String> {
        let pair = platform::open_pty(recipe.cols, recipe.rows)
            .map_err(|e| format!("cannot open a PTY: {e}"))?;
        let jail = match &recipe.jail {
            Some(name) => {
                Some(platform::resolve_jail(name).map_err(|e| format!("jail {name}: {e}"))?)
            }
            None => None,
        };
        let user = match &recipe.user {
            Some(u) => {
                let root = jail
                    .as_ref()
                    .map_or_else(|| PathBuf::from("/"), |j| j.root.clone());
                Some(platform::lookup_user(&root, u).map_err(|e| format!("user {u}: {e}"))?)
            }
            None => None,
        };
        let pane_id = self.agents[key.0 as usize].pane_id.clone();
        let socket = if jail.is_some() {
            "/var/colibri/colibri.sock".to_string()
        } else {
            self.settings.daemon.socket.display().to_string()
        };
        let mut env = recipe.env.clone();
        if !env.iter().any(|(k, _)| k == "TERM") {
            env.push(("TERM".into(), "dumb".into()));
        }
        env.push(("COLIBRI_PANE_ID".into(), pane_id.clone()));
        env.push(("COLIBRI_SOCKET".into(), socket));
        let spec = platform::SpawnSpec {
            argv: recipe.argv.clone(),
            env,
            clear_env: false,
            cwd: recipe.cwd.clone(),
            jail,
            user,
        };
        let pid = platform::spawn_on_pty(&spec, &pair.slave).map_err(|e| e.to_string())?;
        // The agent holds the slave now; ours must close for EOF to come.
        drop(pair.slave);
        let pty_token = self.tokens.insert(Source::Pty(key));
        let exit_token = self.tokens.insert(Source::Exit(key));
        let master = pair.master;
        let fd = master.as_raw_fd();
        let pty_registered =
            match self
                .poll
                .registry()
                .register(&mut SourceFd(&fd), pty_token, Interest::READABLE)
            {
                Ok(()) => true,
                Err(e) => {
                    log_warn!("registering the PTY of pane {pane_id}: {e}");
                    false
                }
            };
        let (exit_watch, already) =
            match platform::ExitWatch::register(self.poll.registry(), pid, exit_token) {
                Ok(w) => {
                    let gone = w.already_exited();
                    (Some(w), gone)
                }
                Err(e) => {
                    log_warn!("cannot watch pid {pid} for exit ({e}); relying on SIGCHLD");
                    (None, false)
                }
            };
        let proc_ = Proc {
            pid,
            started: t,
            master,
            pty_token,
            pty_registered,
            eof: false,
            read_pending: true,
            exit_watch,
            exit_token,
            status: None,
            framer: LineFramer::new(self.settings.daemon.max_line),
            input: VecDeque::new(),
            write_interest: false,
        };
        let agent = &mut self.agents[key.0 as usize];
        agent.proc = Some(proc_);
        agent.paused = false;
        self.push_pending(Pending::Pty(key));
        if already {
            self.push_pending(Pending::Exit(key));
        }
        Ok(pid)
    }

    pub(crate) fn log_attach(&mut self, key: PaneKey, recipe: &Recipe, t: Timestamp) {
        let Some(agent) = self.agents.get(key.0 as usize) else {
            return;
        };
        let Some(pane) = self.sup.get(key) else {
            return;
        };
        let rec = crate::daemon::store::AttachRecord {
            pane: &agent.pane_id,
            agent: &pane.agent,
            runtime: recipe.runtime.map(|r| r.as_str()),
            name: pane.name.as_deref(),
            cwd: pane.cwd(),
            argv: &recipe.argv,
            generation: agent.generation,
            jail: agent.jail.as_deref(),
        };
        self.store.attach(&agent.session, &rec, t);
    }

    // -----------------------------------------------------------------------
    // Agents: input

    /// Writes queued `send-input` bytes; write interest only while some wait.
    pub(crate) fn write_input(&mut self, key: PaneKey) {
        let Some(agent) = self.agents.get_mut(key.0 as usize) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        while !proc_.input.is_empty() {
            let (front, _) = proc_.input.as_slices();
            match platform::write_nonblocking(proc_.master.as_fd(), front) {
                Ok(Some(n)) => {
                    proc_.input.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    log_warn!("writing input to pane {}: {e}", agent.pane_id);
                    proc_.input.clear();
                    break;
                }
            }
        }
        let want = !proc_.input.is_empty();
        if want != proc_.write_interest && proc_.pty_registered {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let fd = proc_.master.as_raw_fd();
            if self
                .poll
                .registry()
                .reregister(&mut SourceFd(&fd), proc_.pty_token, interest)
                .is_ok()
            {
                proc_.write_interest = want;
            }
        }
    }

    // -----------------------------------------------------------------------
    // Signals, heartbeat, shutdown

    fn on_signals(&mut self, t: Timestamp) {
        let mut sigs = Vec::new();
        self.signals.drain(&mut sigs);
        for s in sigs {
            if s != DaemonSignal::Child {
                *self.signals_received.entry(s.name()).or_default() += 1;
            }
            match s {
                DaemonSignal::Terminate | DaemonSignal::Interrupt | DaemonSignal::Quit => {
                    self.begin_shutdown(t)
                }
                DaemonSignal::Hangup => self.reload(),
                DaemonSignal::Child => self.reap_children(t),
                DaemonSignal::User1 => self.log_summary(),
                DaemonSignal::User2 | DaemonSignal::Ignored(_) => {
                    log_info!("received SIG{}: ignored", s.name());
                }
            }
        }
    }

    /// SIGUSR1: one line on the daemon's log saying what it supervises.
    fn log_summary(&self) {
        let running = self
            .agents
            .iter()
            .filter(|a| a.running_pid().is_some())
            .count();
        let health = self.store.health();
        log_info!(
            "SIGUSR1: {} pane(s), {running} running, {} connection(s), {} watcher(s), \
             {} byte(s) waiting for the session logs, {} failed write(s)",
            self.sup.len(),
            self.conns.len(),
            self.watchers.len(),
            health.pending_bytes,
            health.failed_writes
        );
    }

    /// A subreaper inherits orphans; reap everything, routing agents'
    /// statuses to their panes (their exit watch may still fire: ignored).
    fn reap_children(&mut self, t: Timestamp) {
        while let Some((pid, status)) = platform::reap_any() {
            let key = self
                .agents
                .iter()
                .position(|a| a.running_pid() == Some(pid))
                .map(|i| PaneKey(i as u32));
            match key {
                Some(key) => self.process_exited(key, status, t),
                None => {
                    log_debug!("reaped orphan pid {pid}: {status:?}");
                }
            }
        }
    }

    fn reload(&mut self) {
        match (self.reloader)() {
            Ok(new) => {
                log_info!("reloaded configuration");
                self.alerter.reconfigure(new.alert.clone());
                if new.daemon.heartbeat != self.settings.daemon.heartbeat {
                    let _ = self
                        .heartbeat
                        .arm_periodic(self.poll.registry(), new.daemon.heartbeat);
                }
                self.settings.daemon.stall_after = new.daemon.stall_after;
                self.settings.daemon.heartbeat = new.daemon.heartbeat;
                self.settings.daemon.shutdown_grace = new.daemon.shutdown_grace;
                self.settings.restart_backoff = new.restart_backoff;
                self.settings.max_restarts = new.max_restarts;
                self.settings.providers = new.providers;
                self.settings.alert = new.alert;
            }
            Err(e) => log_error!("reload failed, keeping the running configuration: {e}"),
        }
    }

    fn on_heartbeat(&mut self, t: Timestamp) {
        let n = self.sup.len();
        self.publish(WatchKind::Heartbeat { panes: n }, t);
        if let Some(session) = self.store.heartbeat(t) {
            log_info!("rotating session {session}");
        }
        // Close lingering connections whose peer never read their last line.
        let lingering: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closing_since.is_some_and(|s| t.since(s) >= LINGER))
            .map(|(i, _)| i)
            .collect();
        for id in lingering {
            self.close_conn(ConnId(id));
        }
    }

    fn begin_shutdown(&mut self, t: Timestamp) {
        if matches!(self.life, Life::Stopping { .. }) {
            return;
        }
        log_info!("stopping: no new connections, TERM to every agent");
        self.life = Life::Stopping {
            killed: false,
            hard_deadline: None,
        };
        for l in &mut self.listeners {
            if let Some(mut socket) = l.socket.take() {
                let _ = self.poll.registry().deregister(&mut socket);
            }
        }
        for i in 0..self.agents.len() {
            let agent = &mut self.agents[i];
            agent
                .stopped_by
                .get_or_insert_with(|| "daemon shutdown".to_string());
            if agent.timer_mode == TimerMode::Restart {
                agent.timer_mode = TimerMode::Disarmed;
                agent.restart.next_at = None;
            }
            if let Some(pid) = agent.running_pid() {
                if agent.paused {
                    let _ = platform::signal_tree(pid, libc::SIGCONT);
                }
            }
        }
        // Orphans first: once the agents die, their own descendants become
        // orphans too and would get the signal twice.
        self.signal_orphans(libc::SIGTERM);
        let running: Vec<platform::Pid> =
            self.agents.iter().filter_map(|a| a.running_pid()).collect();
        let _ = platform::signal_trees(&running, libc::SIGTERM);
        let token = self.tokens.insert(Source::Shutdown);
        match KernelTimer::new(self.poll.registry(), token) {
            Ok(mut timer) => {
                let _ = timer.arm_oneshot(
                    self.poll.registry(),
                    self.settings
                        .daemon
                        .shutdown_grace
                        .max(Duration::from_millis(1)),
                );
                self.shutdown_timer = Some((timer, token));
            }
            Err(e) => {
                log_warn!("no shutdown timer ({e}); killing agents now");
                self.kill_all();
                self.life = Life::Stopping {
                    killed: true,
                    hard_deadline: Some(t.plus(DRAIN_GRACE)),
                };
            }
        }
    }

    /// Descendants re-parented to the daemon after their own parent exited
    /// belong to no agent any more; at shutdown they get the agents' signal.
    fn signal_orphans(&self, sig: i32) {
        let agents: Vec<platform::Pid> =
            self.agents.iter().filter_map(|a| a.running_pid()).collect();
        let hit = platform::signal_orphans(&agents, sig);
        if hit > 0 {
            log_info!("signalled {hit} orphaned descendant(s) of finished agents");
        }
    }

    fn kill_all(&mut self) {
        self.signal_orphans(libc::SIGKILL);
        let running: Vec<platform::Pid> =
            self.agents.iter().filter_map(|a| a.running_pid()).collect();
        let _ = platform::signal_trees(&running, libc::SIGKILL);
        for a in &self.agents {
            // Reaped: its pid may be reused; its group id may not.
            if let Some(p) = a.proc.as_ref().filter(|p| p.status.is_some()) {
                let _ = platform::signal_group(p.pid, libc::SIGKILL);
            }
        }
    }

    fn shutdown_timer_fired(&mut self, t: Timestamp) {
        let fired = self
            .shutdown_timer
            .as_mut()
            .map_or(0, |(timer, _)| timer.acknowledge());
        if fired == 0 {
            return;
        }
        match self.life {
            Life::Stopping { killed: false, .. } => {
                let left = self.agents.iter().filter(|a| a.proc.is_some()).count();
                log_warn!("grace period over: KILL to {left} agent(s)");
                self.kill_all();
                if let Some((timer, _)) = self.shutdown_timer.as_mut() {
                    let _ = timer.arm_oneshot(self.poll.registry(), DRAIN_GRACE);
                }
                self.life = Life::Stopping {
                    killed: true,
                    hard_deadline: Some(t.plus(DRAIN_GRACE)),
                };
            }
            Life::Stopping { killed: true, .. } => {
                self.life = Life::Stopping {
                    killed: true,
                    hard_deadline: Some(t),
                };
            }
            Life::Running => {}
        }
    }

    fn ready_to_exit(&self, t: Timestamp) -> bool {
        let Life::Stopping { hard_deadline, .. } = self.life else {
            return false;
        };
        let all_done = self.agents.iter().all(|a| a.proc.is_none());
        all_done || hard_deadline.is_some_and(|d| t >= d)
    }

    fn finish_shutdown(&mut self) {
        if let Err(e) = self.store.sync() {
            log_error!("final flush of the session logs failed: {e}");
        }
        let ids: Vec<usize> = self.conns.iter().map(|(i, _)| i).collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(id) {
                let _ = c.flush();
            }
            self.close_conn(ConnId(id));
        }
        for l in &self.listeners {
            if let Err(e) = std::fs::remove_file(&l.path) {
                log_warn!("removing {}: {e}", l.path.display());
            }
        }
        log_info!("stopped");
    }

    pub(crate) fn is_stopping(&self) -> bool {
        matches!(self.life, Life::Stopping { .. })
    }
}

/// Where a framed line goes: into the pane (which classifies it), then into
/// its session log as the pane classified it.
struct LineSink<'a> {
    store: &'a mut SessionStore,
    session: &'a str,
    pane_id: &'a str,
    pane: &'a mut crate::core::pane::Pane,
    out: &'a mut Vec<Transition>,
    max_line: u64,
    t: Timestamp,
}

impl LineSink<'_> {
    fn take(&mut self, frame: Frame<'_>) -> LineKind {
        let kind = self.pane.ingest_frame(frame, self.t, self.out);
        let rec = match (kind, frame) {
            (LineKind::Event, Frame::Line(l)) => LineRecord::Event(l),
            (LineKind::Malformed, Frame::Line(l)) => LineRecord::Raw(l),
            (LineKind::Oversize, _) | (_, Frame::Oversize) => LineRecord::Oversize(self.max_line),
            (LineKind::Blank, _) => return kind,
        };
        self.store.append(self.session, self.pane_id, rec, self.t);
        kind
    }
}
