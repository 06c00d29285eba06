//! The operator's and the jails' sockets: binding, accepting (with the
//! connection cap and the jail peer check), reading requests, queueing
//! replies, and handing events to the bus.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;

use mio::net::UnixListener;
use mio::net::UnixStream;
use mio::Interest;

use crate::core::time::Timestamp;
use crate::daemon::conn::{Conn, Scope, Seat};
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::{
    Daemon, DaemonError, Listener, Pending, CONN_STEPS_PER_WAKEUP, LINGER,
};

/// Connections accepted (or refused) per listener per wakeup.
const ACCEPTS_PER_WAKEUP: usize = 64;
use crate::daemon::source::{ConnId, Source};
use crate::platform::{self, PeerKey};
use crate::protocol::{self, ErrorCode};

impl Daemon {
    pub(crate) fn bind(&mut self, path: &Path, scope: Scope) -> Result<(), DaemonError> {
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
            // Listeners are bound for the operator or a jail; an agent's
            // scope is found per connection.
            Scope::Agent { .. } => 0o600,
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
            peers: Default::default(),
        });
        Ok(())
    }

    pub(crate) fn accept(&mut self, i: usize, t: Timestamp) {
        if self.is_stopping() {
            return;
        }
        // Clients connecting in a tight loop must not keep the loop here:
        // what is left is accepted on the next turn, via `pending`.
        let mut budget = ACCEPTS_PER_WAKEUP;
        let mut reap = true;
        loop {
            if budget == 0 {
                self.push_pending(Pending::Accept(i));
                return;
            }
            budget -= 1;
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
                    self.wake.accept_blocked = true;
                    self.wake.accept_starved = true;
                    return;
                }
            };
            if let Scope::Jail(jail) = &scope {
                if let Err(why) = self.check_jail_peer(&stream, jail) {
                    log_warn!("refused a connection on the socket of jail {jail}: {why}");
                    let line = protocol::err_line(None, ErrorCode::Forbidden, &why);
                    let _ = io::Write::write(&mut stream, &line);
                    continue;
                }
            }
            // Told from the peer's session now; in full (a walk up its
            // process tree) at its first request, or now when the socket
            // is busy enough for the agents' caps to matter: a
            // connect-and-close flood costs no walk.
            let pid = peer_pid(&stream);
            let quick = self.identify(pid, (i, &scope), true, t);
            let peer = platform::peer_key(stream.as_fd()).ok();
            let reap_now = std::mem::take(&mut reap);
            let seen = quick.clone().unwrap_or_else(|| scope.clone());
            if let Some(why) = self.refusal(i, &seen, peer, reap_now, t) {
                let line = protocol::err_line(None, ErrorCode::Busy, why);
                let _ = io::Write::write(&mut stream, &line);
                continue;
            }
            let busy = self
                .conns
                .iter()
                .filter(|(_, c)| c.seat.listener == i)
                .count()
                >= self.settings.daemon.max_connections / 2;
            let (scope, identified) = match quick {
                Some(told) => (told, true),
                None if busy => {
                    let told = self.identify(pid, (i, &scope), false, t).unwrap_or(scope);
                    if let Some(why) = told.agent().and_then(|_| self.over_cap(i, &told, peer)) {
                        let line = protocol::err_line(None, ErrorCode::Busy, why);
                        let _ = io::Write::write(&mut stream, &line);
                        continue;
                    }
                    (told, true)
                }
                None => (scope, false),
            };
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
            let mut conn = Conn::new(stream, token, scope, self.settings.daemon.max_request);
            conn.identified = identified;
            conn.seat = Seat {
                listener: i,
                peer,
                last_progress: Some(t),
            };
            entry.insert(conn);
            reap = true;
            // Data may have arrived before registration; edge-triggered
            // polling would not report it again.
            self.push_pending(Pending::Conn(id));
        }
    }

    /// Why a new connection on listener `i` is refused, if it is. Each
    /// listener has its own cap, so jail sockets never take the operator's
    /// room; each peer has a share of it. Connections whose peer already
    /// hung up are finished first (when `reap`: once per connection
    /// accepted, so refusals stay cheap), so they are never counted.
    fn refusal(
        &mut self,
        i: usize,
        scope: &Scope,
        peer: Option<PeerKey>,
        reap: bool,
        t: Timestamp,
    ) -> Option<&'static str> {
        let why = self.over_cap(i, scope, peer)?;
        if !reap {
            return Some(why);
        }
        self.finish_hung_up(i, t);
        self.over_cap(i, scope, peer)
    }

    fn over_cap(&self, i: usize, scope: &Scope, peer: Option<PeerKey>) -> Option<&'static str> {
        let d = &self.settings.daemon;
        let on_listener = self.conns.iter().filter(|(_, c)| c.seat.listener == i);
        if on_listener.clone().count() >= d.max_connections {
            return Some("too many connections; try again later");
        }
        // Agents never take the operator's room: together they hold at
        // most three quarters of a socket's connections, and each agent a
        // per-peer share of them, however many it opens (idle or busy).
        if let Some(me) = scope.agent() {
            let agents = on_listener
                .clone()
                .filter(|(_, c)| c.scope.agent().is_some());
            if agents.clone().count() >= d.max_connections - d.max_connections / 4 {
                return Some("too many agent connections; try again later");
            }
            let mine = agents.filter(|(_, c)| c.scope.agent() == Some(me)).count();
            return (mine >= d.max_connections_per_peer)
                .then_some("too many connections from this agent; try again later");
        }
        if is_the_operator(scope, peer) {
            return None;
        }
        let same_peer = on_listener.filter(|(_, c)| c.seat.peer == peer).count();
        (same_peer >= d.max_connections_per_peer)
            .then_some("too many connections from this peer; try again later")
    }

    /// Serves what hung-up clients of listener `i` sent and closes them now,
    /// instead of when their hang-up comes round in the event queue.
    fn finish_hung_up(&mut self, i: usize, t: Timestamp) {
        let gone: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.seat.listener == i && platform::peer_hung_up(c.stream.as_fd()))
            .map(|(k, _)| ConnId(k))
            .collect();
        for id in gone {
            self.conn_readable(id, t);
            self.flush_conn(id, t);
        }
    }

    /// Closes connections idle for longer than `idle_timeout`: a client that
    /// connects and says nothing (or stops reading) gives its slot back. A
    /// `colibri hook` waiting for its approval's answer is not idle.
    pub(crate) fn close_idle_conns(&mut self, t: Timestamp) {
        let limit = self.settings.daemon.idle_timeout;
        let idle: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(k, c)| c.is_idle(limit, t) && !self.awaits_reply(ConnId(*k)))
            .map(|(k, _)| ConnId(k))
            .collect();
        for id in idle {
            log_info!("closing a connection idle for {}s", limit.as_secs());
            self.close_conn(id);
        }
    }

    /// Who a connection speaks for, from the kernel's word on its peer
    /// (`SO_PEERCRED`, `LOCAL_PEERCRED`'s `cr_pid`): a process in an agent's
    /// tree is that agent, on whichever socket; an orphan colibrid took in
    /// as the agents' subreaper is the agent its `COLIBRI_PANE_ID` names,
    /// or none (a stray, refused everything an agent is not allowed), and
    /// so is a peer gone before it could be told; the notify satellite's
    /// tree and every other peer keep the listener's scope (the operator's,
    /// or a jail's). With `quick`, only the one-call case (a process in its
    /// agent's own session) is told, and `None` means "ask again".
    pub(crate) fn identify(
        &mut self,
        peer_pid: Option<platform::Pid>,
        seat: (usize, &Scope),
        quick: bool,
        t: Timestamp,
    ) -> Option<Scope> {
        let (i, listener) = seat;
        let Some(pid) = peer_pid else {
            return Some(listener.clone());
        };
        // Each agent leads a session of its own.
        if let Some(key) = platform::session_of(pid).and_then(|sid| self.panes.by_pid(sid)) {
            return Some(self.agent_scope(key, listener));
        }
        let known = self.listeners.get(i).and_then(|l| l.peers.recall(pid, t));
        if known.is_some() || quick {
            return known;
        }
        let told = self.walk_up(pid, listener);
        if let (Some(told), Some(l)) = (&told, self.listeners.get_mut(i)) {
            l.peers.remember(pid, told.clone(), t);
        }
        Some(told.unwrap_or_else(|| stray(listener)))
    }

    /// The scope of `pid` from its process tree; `None` when it cannot be
    /// told (a process of its chain is gone: a stray, not remembered).
    fn walk_up(&self, pid: platform::Pid, listener: &Scope) -> Option<Scope> {
        let me = platform::Pid::try_from(std::process::id()).unwrap_or(0);
        let (chain, end) = platform::ancestry(pid, me, MAX_ANCESTRY);
        match end {
            platform::AncestryEnd::Init => return Some(listener.clone()),
            platform::AncestryEnd::Gone | platform::AncestryEnd::Deep => return None,
            platform::AncestryEnd::Stop => {}
        }
        // Below colibrid, the process it started (an agent) or took in.
        let [.., top, _me] = chain.as_slice() else {
            // The peer is colibrid itself.
            return Some(listener.clone());
        };
        let key = self.panes.by_pid(*top).or_else(|| {
            [*top, pid]
                .iter()
                .find_map(|p| platform::process_env_var(*p, "COLIBRI_PANE_ID"))
                .and_then(|id| self.panes.key(&id))
        });
        Some(key.map_or_else(|| stray(listener), |key| self.agent_scope(key, listener)))
    }

    /// The scope of connection `id`, told in full the first time it is
    /// asked (a connection that never sends a request costs no walk).
    pub(crate) fn conn_scope(&mut self, id: ConnId, t: Timestamp) -> Option<Scope> {
        let conn = self.conns.get(id.0)?;
        if conn.identified {
            return Some(conn.scope.clone());
        }
        let (listener, scope) = (conn.seat.listener, conn.scope.clone());
        let pid = peer_pid(&conn.stream);
        let scope = self
            .identify(pid, (listener, &scope), false, t)
            .unwrap_or(scope);
        let conn = self.conns.get_mut(id.0)?;
        conn.scope = scope.clone();
        conn.identified = true;
        Some(scope)
    }

    /// Pane `key`'s scope, or the listener's for the notify satellite.
    fn agent_scope(&self, key: crate::daemon::source::PaneKey, listener: &Scope) -> Scope {
        match (self.panes.pane(key), self.panes.agent(key)) {
            (_, Some(agent)) if agent.satellite => listener.clone(),
            (Some(pane), agent) => Scope::Agent {
                pane: pane.id.0.clone(),
                jail: agent.and_then(|a| a.jail.clone()),
            },
            (None, _) => listener.clone(),
        }
    }

    /// On FreeBSD the peer's process must run in the jail the socket
    /// belongs to; elsewhere the per-jail socket's visibility is the check.
    pub(crate) fn check_jail_peer(&self, stream: &UnixStream, jail: &str) -> Result<(), String> {
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
    pub(crate) fn conn_readable(&mut self, id: ConnId, t: Timestamp) {
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
                conn.seat.last_progress = Some(t);
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
                    ErrorCode::BadRequest,
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

    pub(crate) fn serve_line(&mut self, id: ConnId, line: &[u8], t: Timestamp) {
        if crate::core::ingest::is_blank(line) {
            return;
        }
        let (reply, observed) = match protocol::Request::parse(line) {
            Ok(req) => {
                let observed = is_observation(&req.command);
                (self.handle(id, req, t), observed)
            }
            Err((rid, e)) => (
                Some(protocol::err_line(rid.as_ref(), e.code(), &e.to_string())),
                true,
            ),
        };
        let Some(reply) = reply else {
            return;
        };
        if observed {
            self.send_observation(id, Rc::from(reply), t);
        } else {
            self.send(id, Rc::from(reply), t);
        }
    }

    /// [`Daemon::send`] for a reply that waits for no writer.
    fn send_observation(&mut self, id: ConnId, frame: Rc<[u8]>, t: Timestamp) {
        let Some(conn) = self.conns.get_mut(id.0) else {
            return;
        };
        if !conn.enqueue_observation(frame) && conn.watch.is_none() {
            refuse_backlog(conn, t);
        }
        self.dirty_conns.insert(id.0);
    }

    /// Queues a reply; a client far behind on plain replies is closed.
    pub(crate) fn send(&mut self, id: ConnId, frame: Rc<[u8]>, t: Timestamp) {
        let Some(conn) = self.conns.get_mut(id.0) else {
            return;
        };
        if !conn.enqueue(frame) && conn.watch.is_none() {
            refuse_backlog(conn, t);
        }
        self.dirty_conns.insert(id.0);
    }

    pub(crate) fn flush_conn(&mut self, id: ConnId, t: Timestamp) {
        // A client that sent its request and shut down its writing side
        // (`nc -U`, `socat`) still gets the reply it waits for.
        let awaiting = self.conns.get(id.0).is_some_and(|c| c.closing) && self.awaits_reply(id);
        let Some(conn) = self.conns.get_mut(id.0) else {
            return;
        };
        let queued = conn.queued_bytes();
        let failed = conn.flush_logged(self.confirmed).is_err();
        // Progress for the idle close: the peer took some of its queue.
        if conn.queued_bytes() < queued {
            conn.seat.last_progress = Some(t);
        }
        if conn.waits_for_log(self.confirmed) {
            self.dirty_conns.insert(id.0);
        }
        if conn.watch_fell_behind(t) {
            self.bus.drop_watcher(id, conn, t);
        }
        let linger_over = conn.closing_since.is_some_and(|s| t.since(s) >= LINGER);
        if failed || (conn.closing && !awaiting && (conn.is_flushed() || linger_over)) {
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

    /// Whether `id` waits for a reply that comes later: an approval's
    /// decision (`colibri hook`), a compaction's end or a host
    /// operation's.
    fn awaits_reply(&self, id: ConnId) -> bool {
        self.approvals.is_waiting(id) || self.compaction_waiting(id) || self.hostop_waiting(id)
    }

    pub(crate) fn close_conn(&mut self, id: ConnId) {
        if !self.conns.contains(id.0) {
            return;
        }
        let mut conn = self.conns.remove(id.0);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.tokens.remove(conn.token);
        self.bus.unsubscribe(id, &self.conns);
        self.detach_conn(id);
        self.approvals.forget_conn(id);
        self.forget_compaction_waiter(id);
        self.hostops.forget_conn(id);
        self.wake.accept_blocked = true;
    }
}

/// The operator (root, or the daemon's own user on its host) on the
/// operator socket is never capped per peer: it always has room.
/// The pid the kernel recorded for a socket's peer at its connect.
fn peer_pid(stream: &UnixStream) -> Option<platform::Pid> {
    platform::peer_cred(stream.as_fd()).ok().and_then(|c| c.pid)
}

/// A peer in an agent's care that names no agent (or that is gone before
/// it could be told): no operator, and no agent either.
fn stray(listener: &Scope) -> Scope {
    Scope::Agent {
        pane: String::new(),
        jail: listener.jail().map(str::to_string),
    }
}

/// The deepest process tree under an agent that identity follows up.
const MAX_ANCESTRY: usize = 64;

fn is_the_operator(scope: &Scope, peer: Option<PeerKey>) -> bool {
    *scope == Scope::Operator
        && peer.is_some_and(|p| p.jail == 0 && (p.uid == 0 || p.uid == platform::effective_uid()))
}

/// A client far behind on plain replies is closed.
fn refuse_backlog(conn: &mut crate::daemon::conn::Conn, t: Timestamp) {
    log_warn!("closing a client that does not read its replies");
    conn.drop_backlog_and_close(
        Rc::from(protocol::err_line(
            None,
            ErrorCode::Busy,
            "reply queue full; closing",
        )),
        t,
    );
}

/// Commands whose reply reports the daemon's state now and acknowledges
/// nothing logged: answered without waiting for the log and journal
/// writers (`Marks::OBSERVED`). Every other reply (a spawn, an emit, an
/// answer, a task's change) leaves only once what it did is written.
fn is_observation(c: &protocol::Command) -> bool {
    use protocol::Command as C;
    match c {
        C::Status
        | C::GlasspaneSnapshot
        | C::Snapshot(_)
        | C::ListSessions
        | C::Whoami
        | C::State(_)
        | C::Tasks(_)
        | C::Approvals(_)
        | C::Watch(_) => true,
        C::Budget(b) => b.action.as_deref().is_none_or(|a| a == "show"),
        _ => false,
    }
}
