//! Read-only queries: status, the snapshots, the session list, whoami.
//! The read models themselves are in `daemon::views`.

use crate::daemon::conn::Scope;
use crate::daemon::event_loop::Daemon;
use crate::platform;
use crate::protocol::{Command, CommandError, Reply, WhoamiReply, SNAPSHOT_V1, SNAPSHOT_V2};

use super::{mismatch, Call};

pub(super) fn status(d: &mut Daemon, call: &Call, _c: Command) -> Result<Reply, CommandError> {
    Ok(Reply::Status(Box::new(d.status_data(&call.scope, call.t))))
}

pub(super) fn glasspane_snapshot(
    d: &mut Daemon,
    call: &Call,
    _c: Command,
) -> Result<Reply, CommandError> {
    Ok(Reply::SnapshotV1(d.snapshot_v1(&call.scope, call.t)))
}

pub(super) fn snapshot(d: &mut Daemon, call: &Call, c: Command) -> Result<Reply, CommandError> {
    let Command::Snapshot(a) = c else {
        return Err(mismatch(&c));
    };
    match a.schema.as_deref() {
        None | Some("v1") | Some(SNAPSHOT_V1) => {
            Ok(Reply::SnapshotV1(d.snapshot_v1(&call.scope, call.t)))
        }
        Some("v2") | Some(SNAPSHOT_V2) => Ok(Reply::SnapshotV2(d.snapshot_v2(&call.scope, call.t))),
        Some(other) => Err(CommandError::invalid(format!(
            "unknown schema {other:?} (v1 or v2)"
        ))),
    }
}

pub(super) fn list_sessions(
    d: &mut Daemon,
    _call: &Call,
    _c: Command,
) -> Result<Reply, CommandError> {
    Ok(Reply::Sessions(d.sessions()))
}

pub(super) fn whoami(d: &mut Daemon, call: &Call, _c: Command) -> Result<Reply, CommandError> {
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
        jail: match scope {
            Scope::Jail(j) => Some(j.clone()),
            Scope::Operator => None,
        },
        peer_pid: peer.as_ref().and_then(|p| p.pid),
        peer_uid: peer.as_ref().map(|p| p.uid),
        panes,
    }))
}
