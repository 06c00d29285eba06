//! Read-only queries: status, the snapshots, the session list, whoami.
//! The read models themselves are in `daemon::views`.

use crate::daemon::event_loop::Daemon;
use crate::daemon::snapshot_stream::{Schema, SnapshotStream};
use crate::platform;
use crate::protocol::SnapshotArgs;
use crate::protocol::{CommandError, Reply, WhoamiReply, SNAPSHOT_V1, SNAPSHOT_V2};

use super::Call;

pub(super) fn status(d: &mut Daemon, call: &Call) -> Result<Reply, CommandError> {
    Ok(Reply::Status(Box::new(d.status_data(&call.scope, call.t))))
}

pub(super) fn glasspane_snapshot(d: &mut Daemon, call: &Call) -> Result<Reply, CommandError> {
    Ok(stream_snapshot(d, call, Schema::V1))
}

/// Snapshots are streamed (`daemon::snapshot_stream`): made a slice of
/// panes at a time as the client reads, so a large one never holds the
/// loop for long nor sits whole in memory.
fn stream_snapshot(d: &mut Daemon, call: &Call, schema: Schema) -> Reply {
    let body = SnapshotStream::new(
        &d.panes,
        schema,
        call.scope.clone(),
        call.t,
        call.rid.clone(),
    );
    d.stream_reply(call.conn, Box::new(body));
    Reply::Deferred
}

pub(super) fn snapshot(
    d: &mut Daemon,
    call: &Call,
    a: SnapshotArgs,
) -> Result<Reply, CommandError> {
    match a.schema.as_deref() {
        None | Some("v1") | Some(SNAPSHOT_V1) => Ok(stream_snapshot(d, call, Schema::V1)),
        Some("v2") | Some(SNAPSHOT_V2) => Ok(stream_snapshot(d, call, Schema::V2)),
        Some(other) => Err(CommandError::invalid(format!(
            "unknown schema {other:?} (v1 or v2)"
        ))),
    }
}

pub(super) fn list_sessions(d: &mut Daemon, _call: &Call) -> Result<Reply, CommandError> {
    Ok(Reply::Sessions(d.sessions()))
}

pub(super) fn whoami(d: &mut Daemon, call: &Call) -> Result<Reply, CommandError> {
    let scope = &call.scope;
    let peer = d
        .conns
        .get(call.conn.0)
        .and_then(|c| platform::peer_cred(std::os::fd::AsFd::as_fd(&c.stream)).ok());
    let panes: Vec<String> = d
        .panes
        .iter()
        .filter(|(k, _)| d.visible(scope, *k))
        .map(|(_, s)| s.pane.id.0.clone())
        .collect();
    Ok(Reply::Whoami(WhoamiReply {
        scope: scope.name(),
        jail: scope.jail().map(str::to_string),
        peer_pid: peer.as_ref().and_then(|p| p.pid),
        peer_uid: peer.as_ref().map(|p| p.uid),
        panes,
    }))
}
