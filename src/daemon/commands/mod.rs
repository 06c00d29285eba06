//! Socket commands: one handler per command, found through one table.
//!
//! `protocol::COMMANDS` names every command and its scope; [`HANDLERS`]
//! holds the handler for each row, in the same order (a unit test keeps
//! them in step). Dispatch, the jail-scope check and the docs tidy test all
//! derive from those two tables, as tmux's `cmd_table` does.
//!
//! A handler takes the daemon and the [`Call`] and returns a typed
//! [`Reply`] or a [`CommandError`] with a stable code; it never writes to
//! the client itself. Groups: `query` (status, snapshots, sessions,
//! whoami), `agents` (spawn), `control` (kill, pause, signal, input, hint),
//! `watch` (watch, emit), `session` (get and compact a session log).

mod agents;
mod approvals;
mod attach;
mod budget;
mod control;
mod control_plane;
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
use crate::protocol::{
    self, Command, CommandError, CommandScope, ErrorCode, Reply, Request, COMMANDS,
};

/// Who called, on which socket, when.
pub(crate) struct Call {
    pub conn: ConnId,
    pub scope: Scope,
    pub t: Timestamp,
    /// The request's `id`, for a reply sent later (`hook`).
    pub rid: Option<serde_json::Value>,
}

type Handler = fn(&mut Daemon, &Call, Command) -> Result<Reply, CommandError>;

/// One handler per row of `protocol::COMMANDS`, in its order, each named
/// for the row it serves (the unit test below checks the names).
const HANDLERS: [(&str, Handler); COMMANDS.len()] = [
    ("status", query::status),
    ("glasspane-snapshot", query::glasspane_snapshot),
    ("snapshot", query::snapshot),
    ("list-sessions", query::list_sessions),
    ("spawn-agent", agents::spawn),
    ("kill-agent", control::kill),
    ("get-session", session::get),
    ("compact-session", session::compact),
    ("watch", watch::watch),
    ("pause-agent", control::pause),
    ("resume-agent", control::resume),
    ("signal-agent", control::signal),
    ("send-input", control::send_input),
    ("emit", watch::emit),
    ("whoami", query::whoami),
    ("hint", control::hint),
    ("state", control_plane::state),
    ("tasks", control_plane::tasks),
    ("task-add", control_plane::add),
    ("task-claim", control_plane::claim),
    ("task-ack", control_plane::act),
    ("task-done", control_plane::act),
    ("task-fail", control_plane::act),
    ("task-cancel", control_plane::act),
    ("activity", control_plane::activity),
    ("start-agent", lifecycle::start),
    ("stop-agent", lifecycle::stop),
    ("restart-agent", lifecycle::restart),
    ("remove-agent", lifecycle::remove),
    ("attach", attach::attach),
    ("attach-input", attach::input),
    ("attach-resize", attach::resize_cmd),
    ("approvals", approvals::list),
    ("approve", approvals::approve),
    ("deny", approvals::deny),
    ("answer", approvals::answer),
    ("hook", approvals::hook),
    ("budget", budget::budget),
];

/// A handler reached with another command's arguments: the tables are out
/// of step (a bug the unit test below catches first).
fn mismatch(c: &Command) -> CommandError {
    CommandError::new(
        ErrorCode::Internal,
        format!("no handler for {} in this row", c.name()),
    )
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
        let (_, handler) = HANDLERS[req.command.index()];
        // Large typed replies (snapshots, status, sessions) are serialised
        // straight into the reply line, never through a `Value` tree.
        Some(match handler(self, &call, req.command) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_table_follows_the_command_table() {
        let rows: Vec<&str> = HANDLERS.iter().map(|(name, _)| *name).collect();
        assert_eq!(rows, protocol::COMMAND_NAMES.to_vec());
        for (i, info) in COMMANDS.iter().enumerate() {
            let line = format!("{{\"cmd\":\"{}\"}}", info.name);
            if let Ok(req) = Request::parse(line.as_bytes()) {
                assert_eq!(req.command.index(), i, "{}", info.name);
            }
        }
    }
}
