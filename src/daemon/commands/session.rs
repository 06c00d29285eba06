//! Session logs: `get-session` and `compact-session`, and what compaction
//! may drop.

use crate::daemon::compaction::store_error;
use crate::daemon::event_loop::Daemon;
use crate::daemon::session_stream::SessionStream;
use crate::protocol::SessionArgs;
use crate::protocol::{CommandError, Reply};

use super::Call;

/// Streamed (`daemon::session_stream`): the reply is made from the log a
/// slice at a time as the client reads it, never held whole.
pub(super) fn get(d: &mut Daemon, call: &Call, a: SessionArgs) -> Result<Reply, CommandError> {
    let src = d
        .store
        .open_dump(&a.session_id)
        .map_err(|e| store_error(&e))?;
    let body = SessionStream::new(src, call.rid.clone(), longest_record(d));
    d.stream_reply(call.conn, Box::new(body));
    Ok(Reply::Deferred)
}

/// The longest line a log can hold as a record: an agent line (or an
/// `emit` request) at its cap, every byte escaped as `\u00XX`, plus the
/// record's own fields. Anything longer is damage.
fn longest_record(d: &Daemon) -> usize {
    let line = d
        .settings
        .daemon
        .max_line
        .max(d.settings.daemon.max_request);
    line.saturating_mul(6).saturating_add(64 << 10)
}

/// Answered when the compaction ends (`daemon::compaction`): the log is
/// compacted a slice per wakeup, never in one go on the loop.
pub(super) fn compact(d: &mut Daemon, call: &Call, a: SessionArgs) -> Result<Reply, CommandError> {
    d.compact_session(&a.session_id, call.conn, call.rid.clone())?;
    Ok(Reply::Deferred)
}
