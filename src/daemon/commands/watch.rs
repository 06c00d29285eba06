//! `watch` (subscribe a connection to the bus) and `emit` (a line from
//! outside the PTY, through the same ingest entry).

use crate::core::pane::LineKind;
use crate::core::state::AgentState;
use crate::daemon::conn::WatchFilter;
use crate::daemon::event_loop::Daemon;
use crate::protocol::{CommandError, EmitReply, ErrorCode, Reply, WatchMode, WatchReply};
use crate::protocol::{EmitArgs, WatchArgs};

use super::Call;

pub(super) fn watch(d: &mut Daemon, call: &Call, a: WatchArgs) -> Result<Reply, CommandError> {
    let panes = match a.panes {
        None => None,
        Some(list) => {
            let mut ids = Vec::with_capacity(list.len());
            for p in &list {
                let key = d.resolve(&call.scope, p)?;
                if let Some(agent) = d.panes.agent(key) {
                    ids.push(agent.pane_id.clone());
                }
            }
            Some(ids)
        }
    };
    let Some(conn) = d.conns.get_mut(call.conn.0) else {
        return Err(CommandError::new(ErrorCode::Internal, "connection closed"));
    };
    conn.watch = Some(WatchFilter {
        panes,
        changes_only: a.mode == WatchMode::Changes,
    });
    match a.since {
        Some(since) => d.bus.subscribe_since(call.conn, since, &d.conns),
        None => d.bus.subscribe(call.conn, &d.conns),
    }
    Ok(Reply::Watch(WatchReply {
        watching: true,
        seq: d.bus.seq(),
        epoch: Some(d.bus.epoch().to_string()),
        journal_id: Some(d.bus.journal().id().to_string()),
    }))
}

pub(super) fn emit(d: &mut Daemon, call: &Call, a: EmitArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&call.scope, &a.agent_id)?;
    if !a.event.is_object() {
        return Err(CommandError::invalid("event must be a JSON object"));
    }
    let line = serde_json::to_vec(&a.event)
        .map_err(|e| CommandError::new(ErrorCode::Internal, e.to_string()))?;
    let kind = d.ingest_external(key, &line, call.t);
    let state = d.panes.pane(key).map_or(AgentState::Idle, |p| p.state());
    Ok(Reply::Emit(EmitReply {
        accepted: matches!(kind, LineKind::Event | LineKind::Held),
        state,
    }))
}
