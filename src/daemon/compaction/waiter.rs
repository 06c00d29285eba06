//! A connection waiting for the end of a session's compaction: what the
//! loop keeps for `compact-session` until its reply can be sent.
//!
//! An owner below the daemon's verbs (`compaction.rs` answers it); it
//! knows its connection only by id.

use serde_json::Value;

use crate::daemon::source::ConnId;

/// A connection waiting for the end of a session's compaction.
#[derive(Debug)]
pub(crate) struct CompactWaiter {
    pub(crate) session: String,
    pub(crate) conn: ConnId,
    pub(crate) rid: Option<Value>,
}
