//! Session logs: `get-session` and `compact-session`, and what compaction
//! may drop.

use crate::daemon::classify::classify_line;
use crate::daemon::event_loop::Daemon;
use crate::daemon::store::StoreError;
use crate::protocol::{Command, CommandError, CompactReply, ErrorCode, Reply};

use super::{mismatch, Call};

pub(super) fn get(d: &mut Daemon, _call: &Call, c: Command) -> Result<Reply, CommandError> {
    let Command::GetSession(a) = c else {
        return Err(mismatch(&c));
    };
    d.store
        .dump(&a.session_id)
        .map(|dump| Reply::Session(Box::new(dump)))
        .map_err(store_error)
}

pub(super) fn compact(d: &mut Daemon, _call: &Call, c: Command) -> Result<Reply, CommandError> {
    let Command::CompactSession(a) = c else {
        return Err(mismatch(&c));
    };
    let r = d
        .store
        .compact(&a.session_id, &classify_line)
        .map_err(store_error)?;
    Ok(Reply::Compact(CompactReply {
        before_bytes: r.before_bytes,
        after_bytes: r.after_bytes,
        dropped_lines: r.dropped_lines,
    }))
}

fn store_error(e: StoreError) -> CommandError {
    let code = match &e {
        StoreError::NotFound { .. } => ErrorCode::NotFound,
        StoreError::InvalidSessionId { .. } | StoreError::TooLarge { .. } => ErrorCode::Invalid,
        StoreError::Locked { .. } | StoreError::Io { .. } | StoreError::WorldWritable { .. } => {
            ErrorCode::Store
        }
    };
    CommandError::new(code, e.to_string())
}
