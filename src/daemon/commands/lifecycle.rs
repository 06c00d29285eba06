//! The supervisor's commands: `start-agent`, `stop-agent`,
//! `restart-agent`, `remove-agent` (see `daemon::supervise`).

use crate::core::spec::{Actual, StopCause};
use crate::daemon::conn::Scope;
use crate::daemon::diag::log_info;
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::PaneKey;
use crate::protocol::AgentArgs;
use crate::protocol::{CommandError, ErrorCode, LifecycleReply, Reply};

use super::Call;

pub(super) fn start(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    refuse_while_stopping(d)?;
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    let actual = actual(d, key)?;
    if actual == Actual::Running {
        return Err(CommandError::invalid(format!(
            "agent {} is already running",
            a.agent_id
        )));
    }
    if d.panes.agent(key).is_some_and(|a| a.recipe.is_none()) {
        return Err(CommandError::invalid(format!(
            "agent {} has no recipe to start (recovered from the logs of an unnamed spawn)",
            a.agent_id
        )));
    }
    d.start_now(key, call.t);
    reply(d, key, "started")
}

pub(super) fn stop(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    let was = actual(d, key)?;
    let who = StopCause::Operator {
        who: format!("stop-agent on connection {}", call.conn.0),
    };
    d.stop_planned(key, who, None, call.t);
    reply(
        d,
        key,
        if was == Actual::Running {
            "stopping"
        } else {
            "stopped"
        },
    )
}

pub(super) fn restart(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    refuse_while_stopping(d)?;
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    if d.panes.agent(key).is_some_and(|a| a.recipe.is_none()) {
        return Err(CommandError::invalid(format!(
            "agent {} has no recipe to restart",
            a.agent_id
        )));
    }
    d.restart_agent(key, call.t);
    reply(d, key, "restarting")
}

pub(super) fn remove(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    if actual(d, key)?.is_alive() {
        return Err(CommandError::invalid(format!(
            "agent {} is still running or waiting to restart: stop it first",
            a.agent_id
        )));
    }
    let out = lifecycle_reply(d, key, "removed")?;
    // Once the pane is gone nothing could name what its agent left
    // running, so it goes with it.
    let left = d.signal_leftovers(&[&out.agent_id], libc::SIGKILL);
    if left > 0 {
        log_info!(
            "remove {}: killed {left} process(es) its agent left running",
            out.agent_id
        );
    }
    d.remove_pane(key, call.t);
    Ok(Reply::Lifecycle(out))
}

fn refuse_while_stopping(d: &Daemon) -> Result<(), CommandError> {
    if d.is_stopping() {
        return Err(CommandError::new(
            ErrorCode::Stopping,
            "colibrid is stopping",
        ));
    }
    Ok(())
}

fn actual(d: &Daemon, key: PaneKey) -> Result<Actual, CommandError> {
    d.panes
        .agent(key)
        .map(|a| a.actual())
        .ok_or_else(|| CommandError::new(ErrorCode::NotFound, "the pane is gone"))
}

fn lifecycle_reply(d: &Daemon, key: PaneKey, status: &str) -> Result<LifecycleReply, CommandError> {
    let pane = d
        .panes
        .pane(key)
        .ok_or_else(|| CommandError::new(ErrorCode::NotFound, "the pane is gone"))?;
    Ok(LifecycleReply {
        agent_id: pane.id.0.clone(),
        name: pane.name.clone(),
        status: status.to_string(),
    })
}

fn reply(d: &Daemon, key: PaneKey, status: &str) -> Result<Reply, CommandError> {
    lifecycle_reply(d, key, status).map(Reply::Lifecycle)
}
