//! Socket commands: one handler per command, chosen by one exhaustive
//! `match` on the typed [`Command`] (a new command does not compile until
//! it is served).
//!
//! `protocol::COMMANDS` names every command and its scope: the scope
//! check and the docs tidy test derive from it, as from tmux's
//! `cmd_table`.
//!
//! A handler takes the daemon, the [`Call`] and its command's own
//! arguments, and returns a typed
//! [`Reply`] or a [`CommandError`] with a stable code; it never writes to
//! the client itself. Groups: `query` (status, snapshots, sessions,
//! whoami), `agents` (spawn), `control` (kill, pause, signal, input, hint),
//! `watch` (watch, emit), `session` (get and compact a session log),
//! `hostops` (a declared host operation).

mod agents;
mod approvals;
mod attach;
mod budget;
mod control;
mod control_plane;
mod hostops;
mod lifecycle;
mod query;
mod session;
mod watch;

use crate::core::resolve::ResolveError;
use crate::core::time::Timestamp;
use crate::daemon::conn::Scope;
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::source::PaneKey;
use crate::protocol::{self, Command, CommandError, CommandScope, ErrorCode, Reply, Request};

/// Who called, on which socket, when.
pub(crate) struct Call {
    pub conn: ConnId,
    pub scope: Scope,
    pub t: Timestamp,
    /// The request's `id`, for a reply sent later (`hook`).
    pub rid: Option<serde_json::Value>,
}

/// Each command to its handler: one exhaustive `match`, so a new command
/// does not compile until it is served (`protocol::COMMANDS` keeps the
/// names, scopes and docs).
fn dispatch(d: &mut Daemon, call: &Call, command: Command) -> Result<Reply, CommandError> {
    use control_plane::TaskVerb;
    match command {
        Command::Status => query::status(d, call),
        Command::GlasspaneSnapshot => query::glasspane_snapshot(d, call),
        Command::Snapshot(a) => query::snapshot(d, call, a),
        Command::ListSessions => query::list_sessions(d, call),
        Command::SpawnAgent(a) => agents::spawn(d, call, a),
        Command::KillAgent(a) => control::kill(d, call, a),
        Command::GetSession(a) => session::get(d, call, a),
        Command::CompactSession(a) => session::compact(d, call, a),
        Command::Watch(a) => watch::watch(d, call, a),
        Command::PauseAgent(a) => control::pause(d, call, a),
        Command::ResumeAgent(a) => control::resume(d, call, a),
        Command::SignalAgent(a) => control::signal(d, call, a),
        Command::SendInput(a) => control::send_input(d, call, a),
        Command::Emit(a) => watch::emit(d, call, a),
        Command::Whoami => query::whoami(d, call),
        Command::Hint(a) => control::hint(d, call, a),
        Command::State(a) => control_plane::state(d, call, a),
        Command::Tasks(a) => control_plane::tasks(d, call, a),
        Command::TaskAdd(a) => control_plane::add(d, call, *a),
        Command::TaskClaim(a) => control_plane::claim(d, call, a),
        Command::TaskAck(a) => control_plane::act(d, call, a, TaskVerb::Ack),
        Command::TaskDone(a) => control_plane::act(d, call, a, TaskVerb::Done),
        Command::TaskFail(a) => control_plane::act(d, call, a, TaskVerb::Fail),
        Command::TaskCancel(a) => control_plane::act(d, call, a, TaskVerb::Cancel),
        Command::Activity(a) => control_plane::activity(d, call, a),
        Command::StartAgent(a) => lifecycle::start(d, call, a),
        Command::StopAgent(a) => lifecycle::stop(d, call, a),
        Command::RestartAgent(a) => lifecycle::restart(d, call, a),
        Command::RemoveAgent(a) => lifecycle::remove(d, call, a),
        Command::Attach(a) => attach::attach(d, call, a),
        Command::AttachInput(a) => attach::input(d, call, a),
        Command::AttachResize(a) => attach::resize_cmd(d, call, a),
        Command::Approvals(a) => approvals::list(d, call, a),
        Command::Approve(a) => approvals::approve(d, call, a),
        Command::Deny(a) => approvals::deny(d, call, a),
        Command::Answer(a) => approvals::answer(d, call, a),
        Command::Hook(a) => approvals::hook(d, call, a),
        Command::Budget(a) => budget::budget(d, call, a),
        Command::Hostop(a) => hostops::hostop(d, call, a),
        Command::ApprovalRequest(a) => approvals::request(d, call, a),
        Command::TaskMove(a) => control_plane::task_move(d, call, a),
        Command::TaskRemove(a) => control_plane::task_remove(d, call, a),
    }
}

impl Daemon {
    /// Serves one request; the reply line, or `None` for a closed client.
    pub(crate) fn handle(&mut self, id: ConnId, req: Request, t: Timestamp) -> Option<Vec<u8>> {
        let scope = self.conn_scope(id, t)?;
        let rid = req.id.clone();
        let info = req.command.info();
        if info.scope != CommandScope::Agent {
            let refused = match &scope {
                Scope::Operator => None,
                Scope::Jail(j) => Some(format!(
                    "{} is not permitted on the agent socket of jail {j}",
                    info.name
                )),
                Scope::Agent { .. } => Some(format!(
                    "{} is the operator's: this connection comes from {}'s process tree",
                    info.name,
                    scope.name()
                )),
            };
            if let Some(msg) = refused {
                if scope.agent().is_some() {
                    crate::daemon::diag::log_warn!("refused {} from {}", info.name, scope.name());
                }
                return Some(protocol::err_line(rid.as_ref(), ErrorCode::Forbidden, &msg));
            }
        }
        let call = Call {
            conn: id,
            scope,
            t,
            rid: rid.clone(),
        };

        // Large typed replies (snapshots, status, sessions) are serialised
        // straight into the reply line, never through a `Value` tree.
        Some(match dispatch(self, &call, req.command) {
            Ok(Reply::Deferred) => return None,
            Ok(reply) => protocol::ok_line(rid.as_ref(), &reply),
            Err(e) => protocol::err_line(rid.as_ref(), e.code, &e.message),
        })
    }

    /// A pane by name, full id, or unique id prefix (`core::resolve`),
    /// among the panes visible in `scope`.
    pub(crate) fn resolve(&self, scope: &Scope, agent_id: &str) -> Result<PaneKey, CommandError> {
        let visible = self
            .panes
            .iter()
            .filter(|(k, _)| self.visible(scope, *k))
            .map(|(k, s)| (s.pane.name.as_deref(), s.pane.id.0.as_str(), k));
        crate::core::resolve::resolve(agent_id, visible).map_err(|e| match e {
            // Its message says what a query may be (a short prefix is not).
            not_found @ ResolveError::NotFound { .. } => {
                CommandError::new(ErrorCode::NotFound, not_found.to_string())
            }
            ambiguous @ ResolveError::Ambiguous { .. } => {
                CommandError::new(ErrorCode::Ambiguous, ambiguous.to_string())
            }
        })
    }

    pub(crate) fn visible(&self, scope: &Scope, key: PaneKey) -> bool {
        crate::daemon::views::pane_visible(&self.panes, scope, key)
    }
}
