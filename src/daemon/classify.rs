//! What session-log compaction may drop, by the session's runtime: a pure
//! function of a runtime and a line, kept in a leaf module so both the
//! loop (which hands it to the store) and `compact-session` use it without
//! depending on each other.

use crate::core::taxonomy::{self, Runtime};
use crate::daemon::store::LineClass;

/// What log compaction may drop, by the session's runtime (Pi's taxonomy
/// when unknown): streaming deltas, but never turn boundaries.
pub(crate) fn classify_line(runtime: Option<&str>, line: &[u8]) -> LineClass {
    let rt = runtime.and_then(Runtime::parse).unwrap_or(Runtime::Pi);
    if taxonomy::is_turn_boundary(rt, line) {
        LineClass::Boundary
    } else if taxonomy::is_stream_delta(rt, line) {
        LineClass::Delta
    } else {
        LineClass::Keep
    }
}
