//! Durable session logs: one append-only JSONL file per daemon session,
//! `<state_dir>/sessions/<id>.jsonl`, plus `index.json`, a metadata cache.
//!
//! The event loop hands every agent line to [`SessionStore::append`] before
//! it reports the event to clients. `append` only encodes the record into
//! the session's memory buffer (no syscall, no allocation once the buffer
//! has grown); [`SessionStore::flush`], called once per loop wakeup, hands
//! buffered bytes under a byte budget to the log writer thread (see
//! `writer.rs`), which owns the log fds (opened `O_APPEND|O_CLOEXEC`, at
//! most [`MAX_OPEN_LOGS`] at a time, least recently used closed first) and
//! wakes the loop when they are written. The loop never blocks on the disk.
//!
//! **Invariants.** Every line of a log is one complete JSON record, except a
//! torn last line left by a crash, which `open` repairs before anything is
//! appended. Written data is lost in exactly one way: a session whose writes
//! keep failing accumulates more than its hard limit (1.5 × `buffer_limit`)
//! of unwritten bytes, and then new event lines are dropped and counted in
//! [`StoreHealth::lost_bytes`]. Attach and exit records are never dropped.
//! A log deleted under the daemon loses what was written to it before that
//! was noticed (at the next write), and is started anew. At shutdown,
//! records that cannot reach their logs go to a rescue directory.
//! The store reads no clock: every time is passed in (the writer's
//! watchdog, on its own thread, times a stuck batch).

mod compact;
mod index;
mod record;
mod scan;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::core::approval::LoggedAnswer;
use crate::core::time::Timestamp;

use self::index::{IndexDraft, IndexEntry, IndexEntryView};
use self::record::TsText;
use self::writer::{Append, Batch, Done, LogWriter, WriterThread};

pub use self::scan::{RecordScanner, RECOVERY_EVENT_CAP};
pub use self::writer::STALL_ENV as WRITER_STALL_ENV;

/// Log fds kept open at once; there may be thousands of sessions.
pub const MAX_OPEN_LOGS: usize = 64;
/// `get-session` refuses logs larger than this. colibrid streams the reply
/// (it holds a slice, not the log), but a client reads it as one line and
/// parses it whole (`colibri session`, `client.rs` caps a reply at 256 MiB).
pub const MAX_DUMP_BYTES: u64 = 64 << 20;
/// How long `sync` (shutdown) and `compact-session` wait for the writer.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Spare batch buffers kept for reuse, and the largest kept.
const SPARE_BUFS: usize = 4;
const SPARE_BUF_MAX: usize = 1 << 20;
/// Heartbeats an asked-for compaction waits for its log's torn tail to be
/// cut before it is given up.
pub const COMPACT_REPAIR_HEARTBEATS: u64 = 2;
/// Most sessions a heartbeat hands the writer to delete for `retain`, and
/// most it looks at (round robin), so one heartbeat's work stays small.
const RETIRE_PER_HEARTBEAT: usize = 64;
const RETIRE_SCAN_PER_HEARTBEAT: usize = 4096;
/// Heartbeats to wait before retrying a failed rotation.
const ROTATE_RETRY_HEARTBEATS: u64 = 10;
/// A drained buffer with more capacity than this is shrunk back.
const SHRINK_ABOVE: usize = 256 << 10;
const SHRINK_TO: usize = 64 << 10;
/// Session buffers given back once all they held is written, kept for the
/// next session that writes: at most this many, none larger than
/// `SHRINK_ABOVE` (2 MiB in all at worst).
const SPARE_SESSION_BUFS: usize = 8;
const DIR_MODE: u32 = 0o750;
const LOG_MODE: u32 = 0o640;
const LOG_SUFFIX: &str = ".jsonl";
const COMPACT_SUFFIX: &str = ".compact.new";
const INDEX_FILE: &str = "index.json";
const INDEX_TMP: &str = "index.json.new";

/// The `[sessions]` part of the configuration, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// `<state_dir>/sessions`.
    pub dir: PathBuf,
    /// Bytes [`SessionStore::flush`] may write per call (the daemon passes it).
    pub flush_budget: usize,
    /// Unwritten bytes per session at which [`SessionStore::over_limit`]
    /// turns true and the daemon stops reading that session's panes.
    pub buffer_limit: usize,
    /// A log this much larger than after its last rotation is compacted by
    /// the heartbeat; 0 disables.
    pub rotate_bytes: u64,
    /// ... or after this many more turns; 0 disables.
    pub rotate_turns: u64,
    /// A finished session whose log was last written longer ago than this
    /// is deleted (its log) and forgotten; zero keeps every log.
    pub retain: Duration,
}

/// A state directory every user may write to would let anyone plant,
/// replace or delete session logs: clear `o+w` when the directory is ours
/// (and say so), refuse it otherwise.
fn secure_dir(dir: &Path) -> Result<Option<String>, StoreError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = fs::metadata(dir).map_err(|e| StoreError::io("inspect", dir, e))?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 == 0 {
        return Ok(None);
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(StoreError::WorldWritable {
            path: dir.to_path_buf(),
            mode,
            owner: meta.uid(),
        });
    }
    let safe = mode & !0o002;
    fs::set_permissions(dir, fs::Permissions::from_mode(safe))
        .map_err(|e| StoreError::io("chmod", dir, e))?;
    Ok(Some(format!(
        "{} was writable by every user (mode {mode:o}); changed to {safe:o}",
        dir.display()
    )))
}

/// What the store knows about one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionMeta {
    pub id: String,
    /// Pane ids in order of first appearance.
    pub panes: Vec<String>,
    pub runtime: Option<String>,
    pub cwd: Option<String>,
    pub created_at: Timestamp,
    /// Turns counted by the daemon via [`SessionStore::note_turns`]. The log
    /// does not mark turns, so after a crash this comes from the last index
    /// written and may be a little low.
    pub turn_count: u64,
    /// Bytes in the log file (written, not merely buffered).
    pub bytes: u64,
    /// Set once every pane of the session has exited: the last exit's state.
    pub final_state: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Times the log was compacted.
    pub rotated: u32,
}

impl SessionMeta {
    /// An empty session's metadata (no id), created at `now`.
    fn new_at(now: Timestamp) -> SessionMeta {
        SessionMeta {
            id: String::new(),
            panes: Vec::new(),
            runtime: None,
            cwd: None,
            created_at: now,
            turn_count: 0,
            bytes: 0,
            final_state: None,
            exit_code: None,
            exit_signal: None,
            rotated: 0,
        }
    }
}

/// Bytes buffered while a batch is with the writer before running agents
/// wait for it ([`SessionStore::read_ahead_full`]): about half a
/// millisecond of parsing for the loop, so reading and writing overlap,
/// while the next batch, which carries the exits and replies buffered
/// meanwhile, stays a write of a fraction of a millisecond. (256 KiB read
/// as fast and made the exit notice under 10 streaming agents 0.3 ms
/// slower at p50.)
pub const READ_AHEAD: usize = 64 * 1024;

/// What a session may always hold unwritten before the total of all
/// sessions holds its agents ([`SessionStore::held_by_total`]).
pub const SESSION_ALLOWANCE: usize = 64 * 1024;

/// Where the lines of one read go (see [`SessionStore::begin_read`]):
/// the session (`None` for an invalid id) and which read it is.
#[derive(Copy, Clone, Debug)]
pub(crate) struct ReadSlot {
    session: Option<usize>,
    read: u64,
}

/// One line an agent emitted, as the framer classified it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineRecord<'a> {
    /// A valid JSON object line, embedded verbatim as `"ev"` (surrounding
    /// JSON whitespace trimmed). A line that is not one `{...}` without
    /// newlines is stored as `raw` instead, so the log stays valid.
    Event(&'a [u8]),
    /// An `Event` line one of the runtime adapters parsed whole (serde_json,
    /// into a typed struct). The log's check that it reads back is then
    /// a scan for control bytes, not a second parse (see
    /// `scan::parsed_reads_back`).
    Parsed(&'a [u8]),
    /// A malformed line, stored as a `"raw"` string (lossy UTF-8).
    Raw(&'a [u8]),
    /// A line over the cap: only its size is recorded.
    Oversize(u64),
}

#[derive(Copy, Clone, Debug)]
pub struct AttachRecord<'a> {
    pub pane: &'a str,
    pub agent: &'a str,
    pub runtime: Option<&'a str>,
    pub name: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub argv: &'a [String],
    pub generation: u32,
    pub jail: Option<&'a str>,
}

#[derive(Copy, Clone, Debug)]
pub struct ExitRecord<'a> {
    pub pane: &'a str,
    /// `done` or `error`.
    pub state: &'a str,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<&'a str>,
    /// colibri ended it on purpose (`Pane::stopped`): recovery and `colibri
    /// fold` fold it the same way.
    pub planned: bool,
}

/// An answer to an approval, as the session log keeps it (`fold` replays it).
#[derive(Copy, Clone, Debug)]
pub struct AnswerRecord<'a> {
    pub pane: &'a str,
    pub approval: &'a str,
    /// `approve`, `deny` or `answer`.
    pub decision: &'a str,
    pub message: Option<&'a str>,
    pub text: Option<&'a str>,
    /// `operator`, `jail:NAME` or `policy`.
    pub by: &'a str,
    /// The hook event the daemon answered itself, with no approval
    /// (`PreToolUse`); `approval` then holds the tool call's id.
    pub hook: Option<&'a str>,
    /// The peer's effective uid (absent for the policy).
    pub uid: Option<u32>,
}

/// How compaction treats one event line (the taxonomy decides).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineClass {
    /// A streaming delta: dropped once a later `Boundary` of the same pane
    /// shows its turn finished.
    Delta,
    /// A line that ends a turn.
    Boundary,
    /// Everything else (tool calls, usage, headers): always kept.
    Keep,
}

/// `classify(runtime, ev_line)`: `runtime` is the pane's runtime from its
/// attach record (or the session's), `ev_line` the verbatim event.
pub type Classifier = dyn Fn(Option<&str>, &[u8]) -> LineClass;

/// The outcome of one [`SessionStore::flush`].
///
/// `pending && failed.is_none()` means the budget ran out: flush again soon
/// (poll with a zero timeout). With `failed` set, do **not** retry at once
/// (the disk is full or failing); the next ordinary wakeup or heartbeat
/// retries, and the data stays buffered meanwhile.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    pub written: usize,
    /// Records are buffered or with the writer, other than those of
    /// sessions waiting for the retry of a failed append: replies and
    /// events wait for `logged_through` (unless `release_frames`).
    pub pending: bool,
    /// The failure episode: an append failed and not every failed log has
    /// taken one since; `TimedOut` when a batch has been with the writer
    /// thread for [`writer::STALL_AFTER`] (a stuck disk).
    pub failed: Option<io::ErrorKind>,
    /// Replies and events must not wait for the logs: the writer is stuck,
    /// or (inline) an append failed and is retried at each flush. A failed
    /// log waiting for its retry (thread mode) does not release them: its
    /// records are left out of `log_mark`, the other sessions' are not.
    pub release_frames: bool,
    /// Logs found deleted or replaced under the daemon since the last
    /// flush (each is started anew): the daemon alerts.
    pub replaced_logs: u64,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub dropped_lines: u64,
}

/// One rotation started by [`SessionStore::heartbeat`], ended.
#[derive(Debug)]
pub struct RotationDone {
    pub session: String,
    pub outcome: Result<CompactReport, StoreError>,
}

/// What one [`SessionStore::compaction_step`] did.
#[derive(Debug)]
pub enum CompactionProgress {
    /// The rotation goes on: call again at the next wakeup.
    Working { read_bytes: usize },
    /// The rotation ended (the log replaced, left as it was, or failed).
    Done {
        read_bytes: usize,
        rotation: RotationDone,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreHealth {
    /// Write (or repair) syscalls that failed.
    pub failed_writes: u64,
    /// Bytes of records dropped because a session was past its hard limit.
    pub lost_bytes: u64,
    /// Records dropped (the same events as `lost_bytes`).
    pub lost_records: u64,
    pub last_error: Option<String>,
    /// Unwritten bytes across all sessions.
    pub pending_bytes: usize,
    /// Logs found deleted or replaced while the daemon wrote them; the
    /// records written to the lost file before that was noticed are gone.
    pub replaced_logs: u64,
    /// Finished sessions whose logs `retain` deleted.
    pub retired_sessions: u64,
}

/// How [`SessionStore::shutdown_flush`] left the acknowledged records.
#[derive(Debug, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// Every record is in its log and fsynced.
    Clean,
    /// Every record is in its log and fsynced, but the index (a cache the
    /// logs rebuild) could not be written.
    IndexNotWritten { error: String },
    /// Every record was written but an fsync failed: a power loss now
    /// could lose some.
    NotSynced { error: String },
    /// Some records could not be written to their logs; they are in
    /// `dir`, one `<session>.jsonl` per session holding exactly the bytes
    /// missing from the end of that session's log.
    Rescued {
        dir: PathBuf,
        bytes: u64,
        error: String,
    },
    /// Some records could be written nowhere.
    Lost {
        bytes: u64,
        error: String,
        rescue_error: String,
    },
}

impl ShutdownOutcome {
    /// True if no acknowledged record can be missing from the logs.
    pub fn data_safe(&self) -> bool {
        matches!(
            self,
            ShutdownOutcome::Clean | ShutdownOutcome::IndexNotWritten { .. }
        )
    }
}

impl std::fmt::Display for ShutdownOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShutdownOutcome::Clean => write!(f, "session logs written and synced"),
            ShutdownOutcome::IndexNotWritten { error } => {
                write!(f, "session logs synced; the index was not written ({error})")
            }
            ShutdownOutcome::NotSynced { error } => write!(
                f,
                "session logs written but not synced ({error}): a power loss could lose recent records"
            ),
            ShutdownOutcome::Rescued { dir, bytes, error } => write!(
                f,
                "{bytes} bytes of session records could not be written to the state dir ({error}); \
                 they were saved in {}: append each <session>.jsonl there to the session's log",
                dir.display()
            ),
            ShutdownOutcome::Lost {
                bytes,
                error,
                rescue_error,
            } => write!(
                f,
                "{bytes} bytes of session records are lost: the state dir failed ({error}) \
                 and no rescue file could be written ({rescue_error})"
            ),
        }
    }
}

/// Tries of the final flush before its records go to a rescue file.
const SHUTDOWN_ATTEMPTS: u32 = 3;
const SHUTDOWN_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
const RESCUE_README: &str = "colibrid could not write these session records to its state \
directory at shutdown.\nEach <session>.jsonl here holds exactly the bytes missing from the \
end of <state_dir>/sessions/<session>.jsonl: once that directory is writable again, append \
it (cat <session>.jsonl >> <state_dir>/sessions/<session>.jsonl) before starting colibrid.\n";

/// What `open` found, for the daemon to rebuild its supervisor.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Every pane of every log, ordered by attach time: live ones (an
    /// attach without a later exit: the agent died with the daemon) and
    /// finished ones.
    pub panes: Vec<RecoveredPane>,
    /// Logs loaded.
    pub sessions: usize,
    /// Sessions whose torn last line was repaired (or will be before the
    /// next write).
    pub repaired: Vec<String>,
    /// Complete lines that did not parse (skipped).
    pub corrupt_lines: u64,
    /// Event bytes not returned because of [`RECOVERY_EVENT_CAP`].
    pub events_dropped_bytes: u64,
    /// Logs that could not be read, an unusable index, leftovers that could
    /// not be removed: worth a warning, not fatal.
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredPane {
    pub session: String,
    pub pane: String,
    /// Empty if the log holds events of this pane but no attach record.
    pub agent: String,
    pub runtime: Option<String>,
    pub name: Option<String>,
    pub cwd: Option<String>,
    pub generation: u32,
    pub jail: Option<String>,
    pub attached_at: Timestamp,
    /// `(state, code, signal)` of the exit after the last attach.
    pub exit: Option<(String, Option<i32>, Option<i32>)>,
    /// The `ev` lines since the last attach, verbatim, in order.
    pub events: Vec<(Timestamp, Vec<u8>)>,
    /// Some events were not kept because of [`RECOVERY_EVENT_CAP`].
    pub events_truncated: bool,
    /// The answer records since the last attach, each at its place among
    /// `events` (dropped with them when the cap releases them).
    pub answers: Vec<RecoveredAnswer>,
    /// A `removed` record follows the last attach: not rebuilt.
    pub removed: bool,
    /// The exit record says colibri ended the run on purpose.
    pub planned_exit: bool,
}

/// An answer to one of a recovered pane's approvals, as its log recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredAnswer {
    /// How many of the pane's `events` came before it.
    pub after_events: usize,
    pub ts: Timestamp,
    pub answer: LoggedAnswer,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid session id {id:?}: use 1 to 128 characters of [A-Za-z0-9._-], not starting with '.'")]
    InvalidSessionId { id: String },
    #[error("no session {id:?}")]
    NotFound { id: String },
    #[error("session {id:?}: log is {bytes} bytes, over the {max}-byte limit")]
    TooLarge { id: String, bytes: u64, max: u64 },
    #[error("{} is in use by another colibrid (its lock is held)", path.display())]
    Locked { path: PathBuf },
    #[error(
        "{} is writable by every user (mode {mode:o}) and owned by uid {owner}, not colibrid's: \
         refusing to keep session logs there (chmod o-w it, or choose another --state-dir)",
        path.display()
    )]
    WorldWritable {
        path: PathBuf,
        mode: u32,
        owner: u32,
    },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl StoreError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> StoreError {
        StoreError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Gives a session that gave its buffer back the largest spare, if there
/// is one: a streaming session gets back a buffer of its working size, not
/// an idle session's small one.
fn refill(buf: &mut Vec<u8>, spares: &mut Vec<Vec<u8>>) {
    if buf.capacity() > 0 {
        return;
    }
    let largest = (0..spares.len()).max_by_key(|&i| spares[i].capacity());
    if let Some(i) = largest {
        *buf = spares.swap_remove(i);
    }
}

/// Keeps an emptied session buffer as a spare, in place of a smaller one
/// when there are `SPARE_SESSION_BUFS` already (so many idle sessions do
/// not crowd out a streaming one's buffer); drops it otherwise.
fn park(spent: Vec<u8>, spares: &mut Vec<Vec<u8>>) {
    if spent.capacity() == 0 || spent.capacity() > SHRINK_ABOVE {
        return;
    }
    if spares.len() < SPARE_SESSION_BUFS {
        spares.push(spent);
        return;
    }
    let smallest = (0..spares.len()).min_by_key(|&i| spares[i].capacity());
    if let Some(i) = smallest.filter(|&i| spares[i].capacity() < spent.capacity()) {
        spares[i] = spent;
    }
}

/// One session: its metadata, its unwritten bytes and its rotation state.
#[derive(Debug)]
struct Session {
    meta: SessionMeta,
    path: PathBuf,
    /// Encoded records; `buf[head..]` is not written yet.
    buf: Vec<u8>,
    head: usize,
    /// In the store's `dirty` queue.
    queued: bool,
    /// Truncate the log to this length before the next write (a torn tail
    /// that could not be cut at open).
    repair: Option<u64>,
    /// Written since the last fsync.
    unsynced: bool,
    /// `buf[head..head + inflight]` is with the writer thread.
    inflight: usize,
    /// A short write left `buf[head..]` starting inside a record (kept
    /// apart from `head`, which `reclaim` resets).
    mid_record: bool,
    live: Vec<String>,
    /// An append was sent since the writer last closed this log's fd:
    /// the writer may hold it open.
    fd_open: bool,
    rotate_base_bytes: u64,
    rotate_base_turns: u64,
    /// Heartbeat count before which a failed rotation is not retried.
    rotate_retry_at: u64,
    /// Thread mode, after a failed append: heartbeat count before which
    /// this session's records are not sent again (its log only: the
    /// others' go on being written).
    append_retry_at: u64,
    /// Its last append failed (cleared once one succeeds).
    append_failed: bool,
    /// Times this session's log was found deleted or replaced.
    replaced: u32,
    /// Its log was deleted by `retain` and it was forgotten: the slot is
    /// free for the next new session (indices elsewhere stay valid).
    retired: bool,
    /// Test hook: write this session's records to another file
    /// (`/dev/full` simulates ENOSPC).
    #[cfg(test)]
    redirect: Option<PathBuf>,
}

impl Session {
    fn new(meta: SessionMeta, path: PathBuf) -> Session {
        Session {
            meta,
            path,
            buf: Vec::new(),
            head: 0,
            queued: false,
            repair: None,
            unsynced: false,
            inflight: 0,
            mid_record: false,
            live: Vec::new(),
            fd_open: false,
            rotate_base_bytes: 0,
            rotate_base_turns: 0,
            rotate_retry_at: 0,
            append_retry_at: 0,
            append_failed: false,
            replaced: 0,
            retired: false,
            #[cfg(test)]
            redirect: None,
        }
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    fn write_path(&self) -> &Path {
        #[cfg(test)]
        if let Some(p) = &self.redirect {
            return p;
        }
        &self.path
    }

    fn note_pane(&mut self, pane: &str) {
        // The common case is the pane that wrote last.
        if self.meta.panes.last().is_some_and(|p| p == pane) || pane.is_empty() {
            return;
        }
        if !self.meta.panes.iter().any(|p| p == pane) {
            self.meta.panes.push(pane.to_string());
        }
    }

    /// Returns buffer space once written bytes pile up at the front.
    fn reclaim(&mut self) {
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
            if self.meta.final_state.is_some() {
                // Finished: nothing more is expected, give the memory back.
                self.buf = Vec::new();
            } else if self.buf.capacity() > SHRINK_ABOVE {
                self.buf.shrink_to(SHRINK_TO);
            }
        } else if self.head > self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    fn index_entry(&self) -> IndexEntryView<'_> {
        IndexEntryView {
            id: &self.meta.id,
            panes: &self.meta.panes,
            runtime: self.meta.runtime.as_deref(),
            cwd: self.meta.cwd.as_deref(),
            created_at_ms: self.meta.created_at.as_millis(),
            turn_count: self.meta.turn_count,
            bytes: self.meta.bytes,
            final_state: self.meta.final_state.as_deref(),
            exit_code: self.meta.exit_code,
            exit_signal: self.meta.exit_signal,
            rotated: self.meta.rotated,
            rotate_base_bytes: self.rotate_base_bytes,
            rotate_base_turns: self.rotate_base_turns,
        }
    }
}

/// Takes the directory's lock file (`.lock`) without waiting.
fn lock_dir(dir: &Path) -> Result<nix::fcntl::Flock<File>, StoreError> {
    let path = dir.join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .mode(0o600)
        .open(&path)
        .map_err(|e| StoreError::io("open", &path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| {
            if errno == nix::errno::Errno::EWOULDBLOCK {
                StoreError::Locked {
                    path: dir.to_path_buf(),
                }
            } else {
                StoreError::io("lock", &path, errno.into())
            }
        },
    )
}

/// Writes the index to `dir/name` atomically: `tmp_name`, then rename.
/// Readers never see a torn index. It is not fsynced: the index is a cache
/// the logs can rebuild (a corrupt or stale one is ignored at open), and two
/// fsyncs on every heartbeat with activity would block the loop for nothing.
fn write_atomic(dir: &Path, name: &str, tmp_name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(LOG_MODE)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, dir.join(name))
}

/// Where the log writes run.
#[derive(Debug)]
enum Writer {
    Inline(LogWriter),
    Thread(WriterThread),
}

fn keep_all(_: Option<&str>, _: &[u8]) -> LineClass {
    LineClass::Keep
}

/// The durable session logs and their index. See the module docs.
pub struct SessionStore {
    /// Held for the store's life: two daemons on one state dir would fail
    /// each other's live panes at recovery and interleave the index.
    _lock: nix::fcntl::Flock<File>,
    cfg: StoreConfig,
    sessions: Vec<Session>,
    by_id: HashMap<String, usize>,
    /// Sessions with unwritten bytes, in flush order.
    dirty: VecDeque<usize>,
    writer: Writer,
    /// A batch is with the writer thread.
    in_flight: bool,
    /// Bytes of the batch in flight (see `read_ahead_full`).
    in_flight_bytes: usize,
    /// Something was buffered since the batch in flight was handed over:
    /// that batch does not cover it, even if no session is in `dirty` (a
    /// session in the batch stays `queued`). See `log_mark`.
    appended_in_flight: bool,
    /// Batches handed to the writer so far; a batch's number is the count
    /// once it was handed over.
    batches: u64,
    /// The batch in flight, when it holds every record buffered before it.
    in_flight_covers: Option<u64>,
    /// The last batch that held every record buffered before it and was
    /// written: each record buffered before it was handed over is logged.
    logged_through: u64,
    /// The batch in flight is older than [`writer::STALL_AFTER`].
    stalled: bool,
    /// Sessions whose last append failed (`Session::append_failed`).
    failing_sessions: usize,
    /// What the sessions waiting for the retry of a failed append held
    /// when the last batch was built (not read-ahead).
    waiting_bytes: usize,
    /// Fds the writer must drop before its next appends (a compaction
    /// renamed a new file over the log).
    close_next: Vec<usize>,
    /// The heartbeat asked for the open logs to be checked against their
    /// paths.
    check_paths_due: bool,
    /// The index being encoded, a step per batch built, since the heartbeat
    /// that found it changed (`index::IndexDraft`).
    index_draft: Option<IndexDraft>,
    /// Thread mode: the last wakeup applied a batch while a rotation runs,
    /// so the next one is the rotation's turn (it must not run while the
    /// writer appends to the file it reads).
    compaction_turn: bool,
    spare_bufs: Vec<Vec<u8>>,
    /// An idle session holds no buffer: at 10,000 idle agents each held
    /// about 500 bytes of spent capacity, and one that once streamed up to
    /// `SHRINK_ABOVE`. Sessions that write now and then take one of these
    /// instead of growing a new one.
    session_spares: Vec<Vec<u8>>,
    last_failure: io::ErrorKind,
    ts: TsText,
    /// The head of the records of the read last begun, and its number.
    read_head: record::RecordHead,
    reads: u64,
    health: StoreHealth,
    index_dirty: bool,
    /// The latest time passed in; stamps the `compacted` marker.
    last_now: Timestamp,
    heartbeats: u64,
    classifier: Option<Box<Classifier>>,
    /// The rotation in progress, if any: `(session, job)`.
    rotation: Option<(usize, compact::Job)>,
    /// Slots of retired sessions, reused by new ones.
    free_slots: Vec<usize>,
    /// Sessions retired since [`SessionStore::take_retired`] last ran.
    retired_now: Vec<String>,
    /// Where the next heartbeat's look for sessions past `retain` starts.
    retire_cursor: usize,
    /// The heartbeat count when the rotation in progress started, and
    /// whether its waiters were told the log writer stalled under it.
    rotation_since: u64,
    rotation_stall_told: bool,
    /// Sessions `compact-session` asked for, oldest first, with the
    /// heartbeat count when asked: each started as the rotation once none
    /// runs and its log has no torn tail to cut.
    compact_requests: VecDeque<(usize, u64)>,
    /// Compactions given up, with why, for the daemon to answer whoever
    /// waits for them.
    compactions_given_up: Vec<(String, String)>,
    /// Replaced logs not yet reported by a [`FlushReport`].
    unreported_replacements: u64,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("dir", &self.cfg.dir)
            .field("sessions", &self.sessions.len())
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

impl SessionStore {
    /// Creates the directory (0750), deletes leftovers of interrupted
    /// compactions and index writes, loads `index.json` if usable, scans
    /// every log (the log is the truth) and repairs torn last lines.
    pub fn open(cfg: StoreConfig) -> Result<(SessionStore, Recovery), StoreError> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&cfg.dir)
            .map_err(|e| StoreError::io("create", &cfg.dir, e))?;
        let mut recovery = Recovery::default();
        let state_dir = cfg.dir.parent().filter(|p| !p.as_os_str().is_empty());
        for dir in state_dir.into_iter().chain([cfg.dir.as_path()]) {
            if let Some(fixed) = secure_dir(dir)? {
                recovery.problems.push(fixed);
            }
        }
        let lock = lock_dir(&cfg.dir)?;
        let mut logs: Vec<(String, PathBuf)> = Vec::new();
        for entry in
            fs::read_dir(&cfg.dir).map_err(|e| StoreError::io("read directory", &cfg.dir, e))?
        {
            let entry = entry.map_err(|e| StoreError::io("read directory", &cfg.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(COMPACT_SUFFIX) || name == INDEX_TMP {
                // An interrupted compaction or index write: the log or the
                // old index is still whole, the leftover is garbage.
                if let Err(e) = fs::remove_file(entry.path()) {
                    recovery
                        .problems
                        .push(format!("cannot remove {}: {e}", entry.path().display()));
                }
            } else if let Some(id) = name.strip_suffix(LOG_SUFFIX) {
                if SessionStore::valid_session_id(id) {
                    logs.push((id.to_string(), entry.path()));
                }
            }
        }
        logs.sort();

        let index_path = cfg.dir.join(INDEX_FILE);
        let mut cached: HashMap<String, IndexEntry> = HashMap::new();
        match fs::read(&index_path) {
            Ok(bytes) => match index::decode(&bytes) {
                Ok(entries) => cached.extend(entries.into_iter().map(|e| (e.id.clone(), e))),
                Err(e) => recovery
                    .problems
                    .push(format!("ignoring {}: {e}", index_path.display())),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => recovery
                .problems
                .push(format!("ignoring {}: {e}", index_path.display())),
        }

        let mut store = SessionStore {
            _lock: lock,
            cfg,
            sessions: Vec::new(),
            by_id: HashMap::new(),
            dirty: VecDeque::new(),
            writer: Writer::Inline(LogWriter::default()),
            in_flight: false,
            in_flight_bytes: 0,
            appended_in_flight: false,
            batches: 0,
            in_flight_covers: None,
            logged_through: 0,
            stalled: false,
            failing_sessions: 0,
            waiting_bytes: 0,
            close_next: Vec::new(),
            check_paths_due: false,
            index_draft: None,
            compaction_turn: false,
            spare_bufs: Vec::new(),
            session_spares: Vec::new(),
            last_failure: io::ErrorKind::Other,
            ts: TsText::default(),
            read_head: record::RecordHead::default(),
            reads: 0,
            health: StoreHealth::default(),
            // Rewrite the index once after open so it matches the logs.
            index_dirty: true,
            last_now: Timestamp::default(),
            heartbeats: 0,
            classifier: None,
            rotation: None,
            free_slots: Vec::new(),
            retired_now: Vec::new(),
            retire_cursor: 0,
            rotation_since: 0,
            rotation_stall_told: false,
            compact_requests: VecDeque::new(),
            compactions_given_up: Vec::new(),
            unreported_replacements: 0,
        };
        let mut rb = scan::RecoveryBuilder::new(RECOVERY_EVENT_CAP);
        let mut loaded: Vec<Session> = Vec::new();
        for (id, path) in logs {
            let sum = match scan::scan_log(&path, &id, &mut rb) {
                Ok(sum) => sum,
                Err(e) => {
                    recovery
                        .problems
                        .push(format!("cannot read {}: {e}", path.display()));
                    continue;
                }
            };
            recovery.corrupt_lines += sum.corrupt_lines;
            if let Some(why) = &sum.bad_answer {
                recovery.problems.push(format!(
                    "session {id}: {} answer record(s) not replayed (the first: {why}); the log keeps them",
                    sum.bad_answers
                ));
            }
            let from_index = cached.remove(&id);
            let created_at = match (&from_index, sum.first_ts) {
                (Some(e), Some(first)) if e.created_at_ms > 0 => {
                    Timestamp::from_millis(e.created_at_ms).min(first)
                }
                (_, Some(first)) => first,
                (Some(e), None) => Timestamp::from_millis(e.created_at_ms),
                (None, None) => Timestamp::default(),
            };
            if let Some(last) = sum.last_ts {
                store.last_now = store.last_now.max(last);
            }
            let mut meta = SessionMeta {
                id: id.clone(),
                panes: sum.panes,
                runtime: sum.runtime,
                cwd: sum.cwd,
                created_at,
                turn_count: 0,
                bytes: sum.complete_len,
                final_state: None,
                exit_code: None,
                exit_signal: None,
                rotated: u32::from(sum.compacted),
            };
            if let Some((state, code, signal)) = sum.last_exit {
                meta.final_state = Some(state);
                meta.exit_code = code;
                meta.exit_signal = signal;
            }
            let mut session = Session::new(meta, path);
            session.live = sum.live;
            if let Some(e) = from_index {
                let m = &mut session.meta;
                m.turn_count = e.turn_count;
                m.rotated = m.rotated.max(e.rotated);
                m.runtime = m.runtime.take().or(e.runtime);
                m.cwd = m.cwd.take().or(e.cwd);
                for p in e.panes {
                    if !m.panes.contains(&p) {
                        m.panes.push(p);
                    }
                }
                session.rotate_base_bytes = e.rotate_base_bytes;
                session.rotate_base_turns = e.rotate_base_turns;
            }
            if sum.len > sum.complete_len {
                recovery.repaired.push(id.clone());
                if sum.tail_is_record {
                    // The record is whole and was recovered; it lacks only
                    // its newline, which goes first in the buffer.
                    session.meta.bytes = sum.len;
                    session.buf.push(b'\n');
                } else {
                    let cut = OpenOptions::new()
                        .write(true)
                        .open(&session.path)
                        .and_then(|f| f.set_len(sum.complete_len));
                    if let Err(e) = cut {
                        recovery.problems.push(format!(
                            "cannot truncate the torn tail of {} (retried before the next write): {e}",
                            session.path.display()
                        ));
                        session.repair = Some(sum.complete_len);
                    }
                }
            }
            loaded.push(session);
        }
        rb.finish(&mut recovery);
        recovery.panes.sort_by_key(|p| p.attached_at);
        loaded
            .sort_by(|a, b| (a.meta.created_at, &a.meta.id).cmp(&(b.meta.created_at, &b.meta.id)));
        for (i, mut s) in loaded.into_iter().enumerate() {
            if s.pending() > 0 || s.repair.is_some() {
                store.health.pending_bytes += s.pending();
                s.queued = true;
                store.dirty.push_back(i);
            }
            store.by_id.insert(s.meta.id.clone(), i);
            store.sessions.push(s);
        }
        recovery.sessions = store.sessions.len();
        Ok((store, recovery))
    }

    /// `[A-Za-z0-9._-]{1,128}`, not starting with `.` (no hidden files, no
    /// `..`, no path separators).
    pub fn valid_session_id(id: &str) -> bool {
        (1..=128).contains(&id.len())
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    }

    /// Sets the classifier the heartbeat's rotation compacts with. Without
    /// one, rotation drops nothing (every line is `Keep`).
    pub fn set_classifier(&mut self, classify: Box<Classifier>) {
        self.classifier = Some(classify);
    }

    /// Creates the session, or reuses it (filling in a missing runtime/cwd).
    pub fn ensure_session(
        &mut self,
        id: &str,
        runtime: Option<&str>,
        cwd: Option<&str>,
        now: Timestamp,
    ) {
        self.note_now(now);
        let Some(i) = self.session_index(id, now) else {
            self.reject(id, 0);
            return;
        };
        let m = &mut self.sessions[i].meta;
        if m.runtime.is_none() && runtime.is_some() {
            m.runtime = runtime.map(str::to_string);
            self.index_dirty = true;
        }
        if m.cwd.is_none() && cwd.is_some() {
            m.cwd = cwd.map(str::to_string);
            self.index_dirty = true;
        }
    }

    /// Records a pane attaching (spawn or restart). Never dropped.
    pub fn attach(&mut self, session: &str, rec: &AttachRecord<'_>, now: Timestamp) {
        self.note_now(now);
        let Some(i) = self.session_index(session, now) else {
            self.reject(session, 0);
            return;
        };
        let s = &mut self.sessions[i];
        s.note_pane(rec.pane);
        if !s.live.iter().any(|p| p == rec.pane) {
            s.live.push(rec.pane.to_string());
        }
        let m = &mut s.meta;
        m.final_state = None;
        m.exit_code = None;
        m.exit_signal = None;
        if m.runtime.is_none() {
            m.runtime = rec.runtime.map(str::to_string);
        }
        if m.cwd.is_none() {
            m.cwd = rec.cwd.map(str::to_string);
        }
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        record::encode_attach(&mut s.buf, &mut self.ts, now, rec);
        self.index_dirty = true;
        self.commit(i, before, false);
    }

    /// Buffers one agent line; no syscall. Allocation-free in the steady
    /// state: a session that keeps writing keeps its buffer, and one that
    /// gave it back (all written) takes a spare.
    pub fn append(&mut self, session: &str, pane: &str, line: LineRecord<'_>, now: Timestamp) {
        let read = self.begin_read(session, pane, now);
        self.append_read(read, session, line);
    }

    /// Starts the records of one read's lines, which share their session,
    /// pane and time ([`SessionStore::append_read`]): the session is looked
    /// up (or made) and the pane noted once, and the head of the records
    /// (`{"ts":…,"pane":…`) is made once, not per line. A session is
    /// retired (its slot freed) only when a batch is applied, never within
    /// a read, so the slot stays valid; the head, until the next read
    /// begins.
    pub(crate) fn begin_read(&mut self, session: &str, pane: &str, now: Timestamp) -> ReadSlot {
        self.note_now(now);
        let slot = self.session_index(session, now);
        if let Some(i) = slot {
            self.sessions[i].note_pane(pane);
        }
        self.read_head.set(&mut self.ts, now, pane);
        self.reads += 1;
        ReadSlot {
            session: slot,
            read: self.reads,
        }
    }

    /// [`SessionStore::append`] for a line of the read last begun.
    pub(crate) fn append_read(&mut self, read: ReadSlot, session: &str, line: LineRecord<'_>) {
        debug_assert_eq!(read.read, self.reads, "a line of a read already ended");
        let Some(i) = read.session else {
            let len = match line {
                LineRecord::Event(l) | LineRecord::Parsed(l) | LineRecord::Raw(l) => l.len(),
                LineRecord::Oversize(_) => 0,
            };
            self.reject(session, len);
            return;
        };
        let s = &mut self.sessions[i];
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        let out = &mut s.buf;
        out.extend_from_slice(self.read_head.bytes());
        match line {
            LineRecord::Event(l) | LineRecord::Parsed(l) => {
                let parsed = matches!(line, LineRecord::Parsed(_));
                let l = record::trim_json_ws(l);
                // Most parsed lines pass in one scan; the rest take the
                // full checks.
                let embed = ((parsed && record::plain_object(l))
                    || (record::embeddable_event(l)
                        && if parsed {
                            scan::parsed_reads_back(l)
                        } else {
                            scan::reads_back(l)
                        }))
                    && scan::nesting_within_limit(l);
                if embed {
                    record::event_tail(out, l);
                } else {
                    record::raw_tail(out, l);
                }
            }
            LineRecord::Raw(l) => record::raw_tail(out, l),
            LineRecord::Oversize(n) => record::oversize_tail(out, n),
        }
        self.commit(i, before, true);
    }

    /// Counts `turns` turns for the session (the daemon's taxonomy decides).
    pub fn note_turns(&mut self, session: &str, turns: u64) {
        if turns == 0 {
            return;
        }
        if let Some(&i) = self.by_id.get(session) {
            self.sessions[i].meta.turn_count += turns;
            self.index_dirty = true;
        }
    }

    /// Records a pane's exit. Never dropped.
    pub fn exit(&mut self, session: &str, rec: &ExitRecord<'_>, now: Timestamp) {
        self.note_now(now);
        let Some(i) = self.session_index(session, now) else {
            self.reject(session, 0);
            return;
        };
        let s = &mut self.sessions[i];
        s.note_pane(rec.pane);
        s.live.retain(|p| p != rec.pane);
        if s.live.is_empty() {
            s.meta.final_state = Some(rec.state.to_string());
            s.meta.exit_code = rec.code;
            s.meta.exit_signal = rec.signal;
        }
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        record::encode_exit(&mut s.buf, &mut self.ts, now, rec);
        self.index_dirty = true;
        self.commit(i, before, false);
    }

    /// Records that the pane was removed (`remove-agent`, retention), so a
    /// later start does not rebuild it from the log and its name is free.
    /// Never dropped.
    pub fn removed(&mut self, session: &str, pane: &str, now: Timestamp) {
        self.note_now(now);
        // A session retention already deleted holds nothing to rebuild:
        // its log is not made anew for this one record.
        let Some(&i) = self.by_id.get(session) else {
            return;
        };
        let s = &mut self.sessions[i];
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        record::encode_removed(&mut s.buf, &mut self.ts, now, pane);
        self.commit(i, before, false);
    }

    /// Records an answer to an approval. Never dropped.
    pub fn answer(&mut self, session: &str, rec: &AnswerRecord<'_>, now: Timestamp) {
        self.note_now(now);
        let Some(i) = self.session_index(session, now) else {
            self.reject(session, 0);
            return;
        };
        let s = &mut self.sessions[i];
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        record::encode_answer(&mut s.buf, &mut self.ts, now, rec);
        self.commit(i, before, false);
    }

    /// Hands buffered records to the writer, at most `budget` bytes,
    /// sessions in the order they got data, and applies the outcome of the
    /// batch the writer finished (if any). Without a writer thread (unit
    /// tests) the batch runs inline. Bytes count as written only once the
    /// writer says so: `pending` stays true until then.
    pub fn flush(&mut self, budget: usize) -> FlushReport {
        let mut report = FlushReport::default();
        self.collect(&mut report);
        // After a failed append the thread's wakeup must not send the same
        // records again at once (a full disk would ping-pong at full
        // speed): a failed session waits for the next heartbeat
        // (`build_batch`); the others' records go on being written.
        // The episode (status, alerts) lasts until every log that failed
        // has taken an append again: a batch of the other sessions' records
        // that succeeds meanwhile does not end it.
        let failing = matches!(self.writer, Writer::Thread(_)) && self.failing_sessions > 0;
        if failing && report.failed.is_none() {
            report.failed = Some(self.last_failure);
        }
        let hold = self.rotation.is_some() && self.compaction_turn;
        if !self.in_flight && !hold {
            let batch = self.build_batch(budget);
            if !batch.is_empty() {
                self.batches += 1;
                // A session cut short by the budget leaves `dirty` too
                // (it goes back when the batch is applied).
                let covers = !self.writable_dirty()
                    && batch.appends.iter().all(|a| {
                        let s = &self.sessions[a.session];
                        s.pending() == s.inflight
                    });
                self.in_flight_covers = covers.then_some(self.batches);
                self.dispatch(batch, &mut report);
            }
        }
        if let (Writer::Thread(t), true) = (&self.writer, self.in_flight) {
            if !self.stalled && t.stalled() {
                self.stalled = true;
                self.record_error(format!(
                    "session log writes stalled for over {} s (a frozen or hung filesystem?); records stay buffered",
                    writer::STALL_AFTER.as_secs()
                ));
            }
        }
        let stuck = self.stalled && self.in_flight;
        if stuck && report.failed.is_none() {
            report.failed = Some(io::ErrorKind::TimedOut);
        }
        let inline = matches!(self.writer, Writer::Inline(_));
        report.release_frames = stuck || (inline && report.failed.is_some());
        report.pending = self.writable_dirty() || self.in_flight;
        report.replaced_logs = std::mem::take(&mut self.unreported_replacements);
        report
    }

    /// The mark of what is buffered now: once `logged_through` reaches it,
    /// every record buffered until now is in its log (replies and watch
    /// events that report them may leave). Call after `flush`.
    pub fn log_mark(&self) -> u64 {
        if self.writable_dirty() || self.appended_in_flight {
            return self.batches + 1;
        }
        if self.in_flight {
            return self.in_flight_covers.unwrap_or(self.batches + 1);
        }
        self.logged_through
    }

    /// Whether a queued session is not waiting for the retry of a failed
    /// append: its records go in the next batch. The waiting ones are at
    /// the front of the queue, and few.
    fn writable_dirty(&self) -> bool {
        self.dirty
            .iter()
            .any(|&i| self.sessions[i].append_retry_at <= self.heartbeats)
    }

    /// See `log_mark`.
    pub fn logged_through(&self) -> u64 {
        self.logged_through
    }

    /// True while a batch is with the writer thread: the loop waits for
    /// its wakeup instead of polling without sleeping.
    pub fn waiting_for_writer(&self) -> bool {
        self.in_flight
    }

    /// Moves the log writes to a thread of their own that wakes the loop
    /// through `registry` with `token` when a batch is done. Until called
    /// (and if it fails) the writes run inline.
    pub fn start_writer(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        if matches!(self.writer, Writer::Thread(_)) {
            return Ok(());
        }
        let waker = mio::Waker::new(registry, token)?;
        let inline = match std::mem::replace(&mut self.writer, Writer::Inline(LogWriter::default()))
        {
            Writer::Inline(w) => w,
            Writer::Thread(t) => {
                self.writer = Writer::Thread(t);
                return Ok(());
            }
        };
        match WriterThread::start(inline, waker) {
            Ok(t) => {
                self.writer = Writer::Thread(t);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The writer thread's loop waker, for another thread that must wake
    /// the loop (mio allows one waker per poll).
    pub fn waker(&self) -> Option<std::sync::Arc<mio::Waker>> {
        match &self.writer {
            Writer::Thread(t) => Some(t.waker()),
            Writer::Inline(_) => None,
        }
    }

    /// Applies the batch the writer thread finished, if any.
    fn collect(&mut self, report: &mut FlushReport) {
        let Writer::Thread(t) = &self.writer else {
            return;
        };
        match t.try_done() {
            Ok(Some(done)) => {
                self.compaction_turn = self.rotation.is_some();
                self.apply(done, report);
            }
            Ok(None) => {}
            Err(e) => self.writer_died(&e),
        }
    }

    /// The thread is gone (it panicked): write inline from now on. Inline,
    /// a failed append is retried at the next flush, as it was before the
    /// thread started.
    fn writer_died(&mut self, e: &io::Error) {
        self.record_error(format!("log writer: {e}"));
        self.writer = Writer::Inline(LogWriter::default());
        self.release_in_flight();
        for s in &mut self.sessions {
            s.append_retry_at = 0;
        }
        self.waiting_bytes = 0;
    }

    /// Forgets the batch in flight: its bytes are sent again. Its sessions
    /// left `dirty` when the batch was built and are still `queued`, which
    /// keeps later appends from queueing them, so they go back first here
    /// (else their records would wait in memory for good).
    fn release_in_flight(&mut self) {
        // The lost batch may have carried the index: the next heartbeat
        // writes it again.
        self.index_dirty = true;
        self.in_flight = false;
        self.in_flight_bytes = 0;
        self.in_flight_covers = None;
        self.appended_in_flight = false;
        self.stalled = false;
        let mut in_dirty = vec![false; self.sessions.len()];
        for &i in &self.dirty {
            in_dirty[i] = true;
        }
        let mut back = Vec::new();
        for (i, s) in self.sessions.iter_mut().enumerate() {
            s.inflight = 0;
            if s.queued && !in_dirty[i] {
                back.push(i);
            }
        }
        for i in back.into_iter().rev() {
            self.dirty.push_front(i);
        }
    }

    fn dispatch(&mut self, batch: Batch, report: &mut FlushReport) -> Option<io::Error> {
        match &mut self.writer {
            Writer::Inline(w) => {
                let done = w.run(batch);
                self.apply(done, report)
            }
            Writer::Thread(t) => match t.send(batch) {
                Ok(()) => {
                    // Everything buffered so far is in this batch or still
                    // in `dirty`.
                    self.appended_in_flight = false;
                    self.in_flight = true;
                    None
                }
                Err(e) => {
                    self.record_error(format!("log writer: {e}"));
                    self.release_in_flight();
                    report.failed = Some(e.kind());
                    Some(e)
                }
            },
        }
    }

    /// The next batch: fds to close, paths to check, appends under
    /// `budget`, the index when due.
    fn build_batch(&mut self, budget: usize) -> Batch {
        let mut batch = Batch {
            close: std::mem::take(&mut self.close_next),
            ..Batch::default()
        };
        if std::mem::take(&mut self.check_paths_due) {
            batch.check_paths = self
                .sessions
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.live.is_empty() || s.pending() > 0)
                .map(|(i, s)| (i, s.write_path().to_path_buf()))
                .collect();
            // A finished session's log needs no fd until it is written
            // again: an operator who deletes it gets the space back.
            for (i, s) in self.sessions.iter_mut().enumerate() {
                if s.fd_open && s.live.is_empty() && s.pending() == 0 {
                    s.fd_open = false;
                    batch.put_down.push(i);
                }
            }
            self.retire_candidates(&mut batch);
        }
        let mut left = budget;
        let mut rounds = self.dirty.len();
        // Sessions whose log failed wait for their retry, first in line.
        let mut waiting = Vec::new();
        while rounds > 0 {
            rounds -= 1;
            let Some(i) = self.dirty.pop_front() else {
                break;
            };
            let s = &mut self.sessions[i];
            if s.pending() == 0 && s.repair.is_none() {
                s.queued = false;
                continue;
            }
            if s.append_retry_at > self.heartbeats {
                waiting.push(i);
                continue;
            }
            let n = s.pending().min(left);
            if n == 0 && (s.repair.is_none() || left == 0) {
                self.dirty.push_front(i);
                break;
            }
            let mut bytes = self.spare_bufs.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(&s.buf[s.head..s.head + n]);
            s.inflight = n;
            left -= n;
            self.in_flight_bytes += n;
            s.fd_open = true;
            batch.appends.push(Append {
                session: i,
                path: s.write_path().to_path_buf(),
                repair: s.repair,
                bytes,
            });
        }
        self.waiting_bytes = waiting.iter().map(|&i| self.sessions[i].pending()).sum();
        for i in waiting.into_iter().rev() {
            self.dirty.push_front(i);
        }
        self.step_index(&mut batch);
        batch
    }

    /// Applies a finished batch; returns its first error.
    fn apply(&mut self, done: Done, report: &mut FlushReport) -> Option<io::Error> {
        self.in_flight = false;
        self.in_flight_bytes = 0;
        self.stalled = false;
        let covers = self.in_flight_covers.take();
        let mut all_written = true;
        let mut first: Option<io::Error> = None;
        let mut front = Vec::new();
        for d in done.appends {
            let i = d.session;
            let s = &mut self.sessions[i];
            let sent = s.inflight;
            s.inflight = 0;
            if d.repaired {
                if let Some(len) = s.repair.take() {
                    s.meta.bytes = len;
                }
            }
            s.head += d.written;
            s.meta.bytes += d.written as u64;
            if d.written > 0 {
                s.mid_record = s.buf[s.head - 1] != b'\n';
                s.unsynced = true;
                self.index_dirty = true;
            }
            self.health.pending_bytes -= d.written;
            report.written += d.written;
            s.reclaim();
            if s.buf.is_empty() {
                // A streaming session's buffer is often drained whole when
                // its batch returns: kept, it is taken back at once, with
                // no regrowth.
                park(std::mem::take(&mut s.buf), &mut self.session_spares);
            }
            if d.buf.capacity() <= SPARE_BUF_MAX && self.spare_bufs.len() < SPARE_BUFS {
                self.spare_bufs.push(d.buf);
            }
            if d.replaced {
                self.log_replaced(i);
                all_written = false;
                continue;
            }
            if let Some(e) = d.error {
                self.health.failed_writes += 1;
                let thread = matches!(self.writer, Writer::Thread(_));
                let s = &mut self.sessions[i];
                if thread {
                    s.append_retry_at = self.heartbeats + 1;
                }
                if !s.append_failed {
                    s.append_failed = true;
                    self.failing_sessions += 1;
                }
                self.last_failure = e.kind();
                let s = &self.sessions[i];
                let msg = format!(
                    "writing session {} to {}: {e}",
                    s.meta.id,
                    s.write_path().display()
                );
                self.record_error(msg);
                report.failed = Some(e.kind());
                first.get_or_insert(e);
                self.dirty.push_back(i);
                all_written = false;
                continue;
            }
            let s = &mut self.sessions[i];
            if s.append_failed && !d.skipped {
                s.append_failed = false;
                self.failing_sessions -= 1;
            }
            if d.skipped || s.pending() > 0 || s.repair.is_some() {
                // Not finished: it goes first next time.
                front.push(i);
                // Records buffered while the batch was out are not its own.
                if d.skipped || d.written < sent || s.repair.is_some() {
                    all_written = false;
                }
            } else {
                s.queued = false;
            }
        }
        for i in front.into_iter().rev() {
            self.dirty.push_front(i);
        }
        for (i, res) in done.synced {
            match res {
                Ok(()) => self.sessions[i].unsynced = false,
                Err(e) => {
                    self.record_error(format!("fsync {}: {e}", self.sessions[i].path.display()));
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(Err(e)) = done.index {
            self.index_dirty = true;
            self.record_error(format!(
                "writing {}: {e}",
                self.cfg.dir.join(INDEX_FILE).display()
            ));
            first.get_or_insert(e);
        }
        for i in done.moved {
            self.log_replaced(i);
        }
        for i in done.retired {
            self.retire(i);
        }
        if let (Some(n), true) = (covers, all_written) {
            self.logged_through = n;
        }
        first
    }

    /// Waits (bounded) for the batch with the writer thread and applies it.
    fn settle(&mut self, report: &mut FlushReport) -> io::Result<()> {
        if !self.in_flight {
            return Ok(());
        }
        let Writer::Thread(t) = &self.writer else {
            self.release_in_flight();
            return Ok(());
        };
        match t.wait_done(SETTLE_WAIT) {
            Some(done) => self.apply(done, report).map_or(Ok(()), Err),
            None => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the session log writer is stuck (a frozen or hung filesystem?)",
            )),
        }
    }

    /// Runs one batch to its end: inline, or on the thread waiting at
    /// most [`SETTLE_WAIT`].
    fn run_now(&mut self, batch: Batch) -> io::Result<()> {
        let mut report = FlushReport::default();
        if let Some(e) = self.dispatch(batch, &mut report) {
            return Err(e);
        }
        self.settle(&mut report)?;
        if self.in_flight {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        match report.failed {
            Some(kind) => Err(io::Error::new(
                kind,
                self.health.last_error.clone().unwrap_or_default(),
            )),
            None => Ok(()),
        }
    }

    /// Unwritten bytes of a session (0 if unknown).
    pub fn pending_bytes(&self, session: &str) -> usize {
        self.by_id
            .get(session)
            .map_or(0, |&i| self.sessions[i].pending())
    }

    /// True while the session holds `buffer_limit` or more unwritten bytes:
    /// the daemon must not read its panes' PTYs until it turns false.
    pub fn over_limit(&self, session: &str) -> bool {
        self.pending_bytes(session) >= self.cfg.buffer_limit.max(1)
    }

    /// True while all sessions together hold twice `buffer_limit` or more
    /// unwritten bytes and this one holds [`SESSION_ALLOWANCE`] or more:
    /// its running agents are not read until it turns false. This bounds
    /// what many agents may buffer together when the disk is slow or
    /// failing, while a session that keeps up (a few sessions whose own
    /// logs fail fill the total) is still read.
    pub fn held_by_total(&self, session: &str) -> bool {
        self.health.pending_bytes >= self.cfg.buffer_limit.saturating_mul(2).max(1)
            && self.pending_bytes(session) >= SESSION_ALLOWANCE.min(self.cfg.buffer_limit)
    }

    /// Whether the PTY reads of a pane of `session` wait for the logs: its
    /// session is over `buffer_limit`, or, for an agent still running, all
    /// sessions are over their total ([`SessionStore::held_by_total`]) or
    /// the read-ahead is full ([`SessionStore::read_ahead_full`]). An agent
    /// that has exited is drained past those two: its exit is reported
    /// only after its last output.
    pub fn holds_reads(&self, session: &str, exited: bool) -> bool {
        self.over_limit(session)
            || (!exited && (self.held_by_total(session) || self.read_ahead_full()))
    }

    /// True while a batch is with the writer and [`READ_AHEAD`] bytes or
    /// more have been buffered since: running agents are not read until
    /// the batch is done. Reading on while the writer writes keeps one
    /// stream from waiting on the disk; reading on without bound would make
    /// the next batch, and the wait of the replies and exits it carries,
    /// as long as the writer is slow.
    /// The backlog of logs waiting for the retry of a failed append was
    /// buffered before the batch and is not read-ahead.
    pub fn read_ahead_full(&self) -> bool {
        self.in_flight
            && self
                .health
                .pending_bytes
                .saturating_sub(self.in_flight_bytes)
                .saturating_sub(self.waiting_bytes)
                >= READ_AHEAD
    }

    /// Writes everything (no budget), fsyncs every log written since the
    /// last sync, and writes the index. For shutdown: it waits for the
    /// writer thread, at most [`SETTLE_WAIT`] per batch. Returns the first
    /// error; everything else is still attempted.
    pub fn sync(&mut self) -> io::Result<()> {
        let mut report = FlushReport::default();
        let mut first = self.settle(&mut report).err();
        // Everything is tried now, failed logs included: a log that works
        // again takes its records rather than the rescue directory.
        for s in &mut self.sessions {
            s.append_retry_at = 0;
        }
        self.waiting_bytes = 0;
        self.index_draft = None;
        let mut batch = self.build_batch(usize::MAX);
        let appended: Vec<usize> = batch.appends.iter().map(|a| a.session).collect();
        batch.sync = self
            .sessions
            .iter()
            .enumerate()
            .filter(|(i, s)| s.unsynced || appended.contains(i))
            .map(|(i, s)| (i, s.write_path().to_path_buf()))
            .collect();
        if let Err(e) = self.run_now(batch) {
            first.get_or_insert(e);
        }
        // The index last, so that it holds the final lengths: all of it,
        // in this one batch.
        self.index_draft = Some(IndexDraft::new(usize::MAX));
        self.index_dirty = false;
        let batch = self.build_batch(0);
        if let Err(e) = self.run_now(batch) {
            first.get_or_insert(e);
        }
        if first.is_none() && !self.dirty.is_empty() {
            first = Some(io::Error::other(
                self.health
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "records left unwritten".into()),
            ));
        }
        first.map_or(Ok(()), Err)
    }

    /// The last flush, at shutdown: [`SessionStore::sync`], retried a few
    /// times; records that still cannot reach their logs are written to a
    /// rescue directory (`$TMPDIR`, else `/var/tmp`, else `/tmp`) so that
    /// no acknowledged record is dropped without a word. Blocks briefly
    /// between tries: the loop is over.
    pub fn shutdown_flush(&mut self, now: Timestamp) -> ShutdownOutcome {
        let outcome = self.try_shutdown_flush(now);
        if !outcome.data_safe() {
            // The alert the daemon raises quotes the last error.
            self.record_error(outcome.to_string());
        }
        outcome
    }

    fn try_shutdown_flush(&mut self, now: Timestamp) -> ShutdownOutcome {
        let mut error = String::new();
        for attempt in 0..SHUTDOWN_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(SHUTDOWN_RETRY_PAUSE);
            }
            match self.sync() {
                Ok(()) => return ShutdownOutcome::Clean,
                Err(e) => error = e.to_string(),
            }
        }
        let pending: u64 = self.sessions.iter().map(|s| s.pending() as u64).sum();
        if pending == 0 {
            return if self.sessions.iter().any(|s| s.unsynced) {
                ShutdownOutcome::NotSynced { error }
            } else {
                ShutdownOutcome::IndexNotWritten { error }
            };
        }
        let mut bases: Vec<PathBuf> = Vec::new();
        if let Some(tmp) = std::env::var_os("TMPDIR").filter(|t| !t.is_empty()) {
            bases.push(PathBuf::from(tmp));
        }
        bases.push(PathBuf::from("/var/tmp"));
        bases.push(PathBuf::from("/tmp"));
        self.rescue(now, &bases, pending, error)
    }

    /// Saves the unwritten records in the first of `bases` that takes them.
    fn rescue(
        &mut self,
        now: Timestamp,
        bases: &[PathBuf],
        pending: u64,
        error: String,
    ) -> ShutdownOutcome {
        let name = format!(
            "colibri-rescue-{}-{}",
            std::process::id(),
            now.as_millis() / 1000
        );
        let mut rescue_errors = Vec::new();
        for base in bases {
            let dir = base.join(&name);
            match self.write_rescue(&dir) {
                Ok(()) => {
                    return ShutdownOutcome::Rescued {
                        dir,
                        bytes: pending,
                        error,
                    }
                }
                Err(e) => rescue_errors.push(format!("{}: {e}", dir.display())),
            }
        }
        ShutdownOutcome::Lost {
            bytes: pending,
            error,
            rescue_error: rescue_errors.join("; "),
        }
    }

    /// Writes every session's unwritten bytes to `dir/<session>.jsonl`
    /// (created 0700, files 0600, all fsynced).
    fn write_rescue(&self, dir: &Path) -> io::Result<()> {
        DirBuilder::new().mode(0o700).create(dir)?;
        let create = |name: &str| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(dir.join(name))
        };
        let mut readme = create("README")?;
        readme.write_all(RESCUE_README.as_bytes())?;
        for s in self.sessions.iter().filter(|s| s.pending() > 0) {
            let mut f = create(&format!("{}{LOG_SUFFIX}", s.meta.id))?;
            f.write_all(&s.buf[s.head..])?;
            f.sync_all()?;
        }
        compact::sync_dir(dir)
    }

    /// The session_rotation tick: unless a rotation is already running,
    /// starts one for the log that grew furthest past `rotate_bytes` (or
    /// `rotate_turns`) since its last rotation, and returns its session.
    /// The work itself is done by [`SessionStore::compaction_step`]. Then
    /// writes the index if anything changed.
    pub fn heartbeat(&mut self, now: Timestamp) -> Option<String> {
        self.note_now(now);
        self.heartbeats += 1;
        self.check_paths_due = true;
        self.give_up_blocked_compactions();
        let mut started = self.start_requested_compaction();
        if self.rotation.is_none() {
            if let Some(i) = self.due_for_rotation() {
                let s = &self.sessions[i];
                let job = compact::Job::new(&s.path, s.meta.runtime.as_deref(), self.last_now);
                started = Some(s.meta.id.clone());
                self.start_job(i, job);
            }
        }
        if self.index_dirty && self.index_draft.is_none() {
            // A change from now on is caught by the next draft.
            self.index_draft = Some(IndexDraft::new(index::ENTRIES_PER_STEP));
            self.index_dirty = false;
        }
        if !self.in_flight {
            // Paths and index now; appends stay with flush and its budget.
            let batch = self.build_batch(0);
            if !batch.is_empty() {
                let mut report = FlushReport::default();
                self.dispatch(batch, &mut report);
            }
        }
        started
    }

    /// True while the index is being encoded: the daemon polls without
    /// sleeping (each flush that builds a batch takes a step) until it
    /// turns false.
    pub fn index_pending(&self) -> bool {
        self.index_draft.is_some()
    }

    /// Encodes the next step of the index draft; the batch carries the
    /// index once the draft has every session.
    fn step_index(&mut self, batch: &mut Batch) {
        let Some(draft) = &mut self.index_draft else {
            return;
        };
        let end = draft
            .next
            .saturating_add(draft.per_step)
            .min(self.sessions.len());
        for s in &self.sessions[draft.next..end] {
            if s.retired {
                draft.skip();
            } else {
                draft.push(&s.index_entry());
            }
        }
        if draft.next < self.sessions.len() {
            return;
        }
        match self.index_draft.take().map(IndexDraft::finish) {
            Some(Some(bytes)) => batch.index = Some((self.cfg.dir.clone(), bytes)),
            Some(None) => {
                self.record_error(
                    "encoding the session index failed; it is written at the next heartbeat".into(),
                );
                self.index_dirty = true;
            }
            None => {}
        }
    }

    /// True while a rotation is running: the daemon calls
    /// [`SessionStore::compaction_step`] every wakeup and polls without
    /// sleeping until it turns false.
    pub fn compaction_active(&self) -> bool {
        self.rotation.is_some()
    }

    /// compact-session: compacts session `id` as the rotation does, a
    /// bounded slice per wakeup ([`SessionStore::compaction_step`]), so a
    /// log of gigabytes never holds the loop. Starts now unless another
    /// session's rotation runs or the log has a torn tail to cut first;
    /// then it waits its turn (the end of that rotation, or a heartbeat).
    /// A rotation of this session already running is the compaction
    /// asked for. Its end is the [`RotationDone`] naming the session.
    pub fn request_compaction(&mut self, id: &str) -> Result<(), StoreError> {
        let i = self.lookup(id)?;
        let running = self.rotation.as_ref().is_some_and(|(r, _)| *r == i);
        if !running && !self.compact_requests.iter().any(|r| r.0 == i) {
            self.compact_requests.push_back((i, self.heartbeats));
            self.start_requested_compaction();
        }
        Ok(())
    }

    /// The compactions given up since the last call, with why (or, for
    /// one under a stalled writer, why it is not finished yet): every job
    /// that ends without a [`RotationDone`] is here.
    pub fn take_given_up_compactions(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.compactions_given_up)
    }

    /// Gives up the asked-for compactions still waiting
    /// [`COMPACT_REPAIR_HEARTBEATS`] heartbeats after they were asked for,
    /// for their log's torn tail to be cut (the cut keeps failing: a
    /// read-only or failing disk) or for a stalled log writer (a frozen
    /// filesystem), so no client waits for ever. A compaction already
    /// running under a stalled writer goes on once writes resume; its
    /// waiters are told so, once.
    fn give_up_blocked_compactions(&mut self) {
        let now = self.heartbeats;
        let writer_stuck = self.stalled && self.in_flight;
        let sessions = &self.sessions;
        let (stuck, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.compact_requests)
            .into_iter()
            .partition(|&(i, at)| {
                (sessions[i].repair.is_some() || writer_stuck)
                    && now >= at.saturating_add(COMPACT_REPAIR_HEARTBEATS)
            });
        self.compact_requests = waiting.into();
        let error = match &self.health.last_error {
            Some(e) => format!(" ({e})"),
            None => String::new(),
        };
        for (i, _) in stuck {
            let why = if self.sessions[i].repair.is_some() {
                format!("given up: its torn last line could not be cut{error}")
            } else {
                format!("given up: session log writes have stalled{error}")
            };
            self.compactions_given_up
                .push((self.sessions[i].meta.id.clone(), why));
        }
        let Some((i, _)) = &self.rotation else {
            return;
        };
        if writer_stuck
            && !self.rotation_stall_told
            && now
                >= self
                    .rotation_since
                    .saturating_add(COMPACT_REPAIR_HEARTBEATS)
        {
            self.rotation_stall_told = true;
            let why = format!(
                "not finished: session log writes have stalled{error}; it goes on when they resume"
            );
            self.compactions_given_up
                .push((self.sessions[*i].meta.id.clone(), why));
        }
    }

    /// Whether a compaction of session `id` runs or waits its turn: false
    /// once it ended, or was given up.
    #[cfg(test)]
    pub fn compaction_pending(&self, id: &str) -> bool {
        let Some(&i) = self.by_id.get(id) else {
            return false;
        };
        self.rotation.as_ref().is_some_and(|(r, _)| *r == i)
            || self.compact_requests.iter().any(|r| r.0 == i)
    }

    /// Starts the oldest asked-for compaction that can start, if no
    /// rotation runs; returns its session.
    fn start_requested_compaction(&mut self) -> Option<String> {
        if self.rotation.is_some() {
            return None;
        }
        let pos = self
            .compact_requests
            .iter()
            .position(|&(i, _)| self.sessions[i].repair.is_none())?;
        let (i, _) = self.compact_requests.remove(pos)?;
        let s = &self.sessions[i];
        let job = compact::Job::new(&s.path, s.meta.runtime.as_deref(), self.last_now);
        let id = s.meta.id.clone();
        self.start_job(i, job);
        Some(id)
    }

    fn start_job(&mut self, i: usize, job: compact::Job) {
        self.rotation = Some((i, job));
        self.rotation_since = self.heartbeats;
        self.rotation_stall_told = false;
    }

    /// Advances the running rotation by at most `budget_bytes` of log
    /// reads (and the writes they imply). `None` if no rotation is running.
    ///
    /// The log keeps receiving appends meanwhile; the last steps copy them
    /// to the new file, and the step that renames it over the log also
    /// closes the session's fd, so the next write goes to the new file.
    pub fn compaction_step(&mut self, budget_bytes: usize) -> Option<CompactionProgress> {
        if self.rotation.is_some() && self.in_flight {
            // The writer may be appending to the file the job reads.
            return Some(CompactionProgress::Working { read_bytes: 0 });
        }
        self.compaction_turn = false;
        let (i, job) = self.rotation.as_mut()?;
        let i = *i;
        let step = match &self.classifier {
            Some(c) => job.step(budget_bytes, &**c, &mut self.ts),
            None => job.step(budget_bytes, &keep_all, &mut self.ts),
        };
        let (read_bytes, outcome) = match step {
            Ok(compact::Step::Working { read }) => {
                return Some(CompactionProgress::Working { read_bytes: read });
            }
            Ok(compact::Step::Finished { read, done }) => (read, Ok(done)),
            Err(e) => (0, Err(e)),
        };
        let (_, job) = self.rotation.take()?;
        let outcome = self.finish_compaction(i, &job, outcome);
        let s = &mut self.sessions[i];
        match &outcome {
            Ok(_) => {
                s.rotate_base_bytes = s.meta.bytes;
                s.rotate_base_turns = s.meta.turn_count;
            }
            Err(e) => {
                s.rotate_retry_at = self.heartbeats + ROTATE_RETRY_HEARTBEATS;
                let msg = format!("rotating session {}: {e}", s.meta.id);
                self.record_error(msg);
            }
        }
        self.index_dirty = true;
        // The next asked-for compaction need not wait for a heartbeat.
        self.start_requested_compaction();
        Some(CompactionProgress::Done {
            read_bytes,
            rotation: RotationDone {
                session: self.sessions[i].meta.id.clone(),
                outcome,
            },
        })
    }

    /// Sessions in creation order.
    pub fn list(&self) -> Vec<&SessionMeta> {
        self.sessions
            .iter()
            .filter(|s| !s.retired)
            .map(|s| &s.meta)
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<&SessionMeta> {
        self.by_id.get(id).map(|&i| &self.sessions[i].meta)
    }

    /// What `get-session` streams (`daemon::session_stream`), taken now:
    /// the session's metadata, the log opened (the fd keeps this content
    /// readable even if compaction or rotation renames the file, or it is
    /// deleted), the length the store counts as written (the writer may be
    /// appending the buffered records right now), and a copy of the records
    /// still buffered. That copy is bounded by the store's own cap on
    /// unwritten bytes (1.5 × `buffer_limit`, see [`SessionStore::append`]'s
    /// hard limit), so a stream never holds more than that plus a slice.
    /// Refuses logs over [`MAX_DUMP_BYTES`].
    pub fn open_dump(&self, id: &str) -> Result<DumpSource, StoreError> {
        let i = self.lookup(id)?;
        let s = &self.sessions[i];
        let flush_error = if s.pending() > 0 && (self.stalled || s.append_failed) {
            self.health.last_error.clone()
        } else {
            None
        };
        let log = match File::open(&s.path) {
            Ok(f) => {
                let len = f
                    .metadata()
                    .map_err(|e| StoreError::io("stat", &s.path, e))?
                    .len();
                if len > MAX_DUMP_BYTES {
                    return Err(StoreError::TooLarge {
                        id: id.to_string(),
                        bytes: len,
                        max: MAX_DUMP_BYTES,
                    });
                }
                Some(f)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io("open", &s.path, e)),
        };
        Ok(DumpSource {
            session: meta_json(&s.meta),
            path: s.path.clone(),
            log,
            log_bytes: s.meta.bytes.min(MAX_DUMP_BYTES),
            unflushed: s.buf[s.head..].to_vec(),
            flush_error,
            log_replaced: s.replaced,
        })
    }

    /// The whole `get-session` dump in memory: the reference the streamed
    /// reply (`daemon::session_stream`) is checked against, byte for byte.
    /// Records are checked as JSON but never re-serialised, so each comes
    /// back byte for byte as the log holds it, whatever JSON the agent
    /// printed (deep nesting, `1e400`, lone surrogate escapes).
    #[cfg(test)]
    pub fn dump(&mut self, id: &str) -> Result<SessionDump, StoreError> {
        use std::io::Read as _;
        let mut src = self.open_dump(id)?;
        let mut bytes = Vec::new();
        if let Some(f) = src.log.take() {
            f.take(src.log_bytes)
                .read_to_end(&mut bytes)
                .map_err(|e| StoreError::io("read", &src.path, e))?;
        }
        bytes.extend_from_slice(&src.unflushed);
        let (records, corrupt) = scan::complete_records(&bytes);
        Ok(SessionDump {
            session: src.session,
            records,
            corrupt_lines: corrupt,
            unflushed_bytes: src.unflushed.len(),
            flush_error: src.flush_error,
            log_replaced: src.log_replaced,
        })
    }

    /// The whole compaction in one call (the reference the stepped one is
    /// tested against): see the `compact` module. The session is flushed
    /// first; the report counts dropped lines (0 means the log was left
    /// untouched).
    #[cfg(test)]
    pub fn compact(
        &mut self,
        id: &str,
        classify: &Classifier,
    ) -> Result<CompactReport, StoreError> {
        let i = self.lookup(id)?;
        self.compact_index(i, classify)
    }

    pub fn health(&self) -> StoreHealth {
        self.health.clone()
    }

    // -- internals ---------------------------------------------------------

    fn note_now(&mut self, now: Timestamp) {
        self.last_now = self.last_now.max(now);
    }

    fn lookup(&self, id: &str) -> Result<usize, StoreError> {
        if !SessionStore::valid_session_id(id) {
            return Err(StoreError::InvalidSessionId { id: id.to_string() });
        }
        self.by_id
            .get(id)
            .copied()
            .ok_or_else(|| StoreError::NotFound { id: id.to_string() })
    }

    /// The session's slot, created if new; `None` for an invalid id.
    fn session_index(&mut self, id: &str, now: Timestamp) -> Option<usize> {
        if let Some(&i) = self.by_id.get(id) {
            return Some(i);
        }
        if !SessionStore::valid_session_id(id) {
            return None;
        }
        let meta = SessionMeta {
            id: id.to_string(),
            ..SessionMeta::new_at(now)
        };
        let path = self.cfg.dir.join(format!("{id}{LOG_SUFFIX}"));
        let session = Session::new(meta, path);
        let i = match self.free_slots.pop() {
            Some(i) => {
                self.sessions[i] = session;
                i
            }
            None => {
                self.sessions.push(session);
                self.sessions.len() - 1
            }
        };
        self.by_id.insert(id.to_string(), i);
        self.index_dirty = true;
        Some(i)
    }

    /// A caller passed an invalid session id; its data cannot be stored.
    fn reject(&mut self, id: &str, bytes: usize) {
        if bytes > 0 {
            self.health.lost_bytes += bytes as u64;
            self.health.lost_records += 1;
        }
        self.record_error(format!("invalid session id {id:?}: record not stored"));
    }

    fn record_error(&mut self, msg: String) {
        self.health.last_error = Some(msg);
    }

    /// Accepts the record just encoded at `buf[before..]`, or, for a
    /// droppable record past the hard limit, takes it back and counts it.
    fn commit(&mut self, i: usize, before: usize, droppable: bool) {
        let hard_limit = self
            .cfg
            .buffer_limit
            .saturating_add(self.cfg.buffer_limit / 2)
            .max(1);
        let s = &mut self.sessions[i];
        let added = s.buf.len() - before;
        if droppable && s.pending() > hard_limit {
            s.buf.truncate(before);
            self.health.lost_bytes += added as u64;
            self.health.lost_records += 1;
            let msg = format!(
                "session {}: dropped a {added}-byte record, {} bytes unwritten (hard limit {hard_limit})",
                s.meta.id,
                s.pending()
            );
            self.record_error(msg);
            return;
        }
        self.health.pending_bytes += added;
        if !s.queued {
            s.queued = true;
            self.dirty.push_back(i);
        }
        // A log waiting for its retry is in no batch until then; marks
        // leave it out (`writable_dirty`), so its appends do too.
        if self.in_flight && s.append_retry_at <= self.heartbeats {
            self.appended_in_flight = true;
        }
    }

    /// Starts session `i`'s log anew after its file was deleted or
    /// replaced: the fd is dropped (the next write creates the path again)
    /// and the new log opens with a `log_replaced` record, so a reader sees
    /// that earlier records are missing instead of a silently short log.
    fn log_replaced(&mut self, i: usize) {
        if self.rotation.as_ref().is_some_and(|(r, _)| *r == i) {
            if let Some((_, mut job)) = self.rotation.take() {
                job.abandon();
                // Whoever asked for it hears why it will not end.
                self.compactions_given_up.push((
                    self.sessions[i].meta.id.clone(),
                    "given up: its log was replaced meanwhile; ask again".to_string(),
                ));
            }
        }
        let now = self.last_now;
        let s = &mut self.sessions[i];
        s.replaced += 1;
        s.meta.bytes = 0;
        s.rotate_base_bytes = 0;
        s.unsynced = false;
        s.repair = None;
        if s.mid_record {
            s.mid_record = false;
            // A short write left a record half in the lost file: its rest
            // alone would be a corrupt line.
            let rest = memchr::memchr(b'\n', &s.buf[s.head..]).map_or(s.pending(), |p| p + 1);
            s.head += rest;
            self.health.pending_bytes -= rest;
            self.health.lost_bytes += rest as u64;
            self.health.lost_records += 1;
        }
        let mut marker = Vec::new();
        record::encode_log_replaced(&mut marker, &mut self.ts, now, s.replaced);
        let added = marker.len();
        s.buf.splice(s.head..s.head, marker);
        let msg = format!(
            "session {}: log {} was deleted or replaced under the daemon; \
             records written to the old file are lost; starting a new log",
            s.meta.id,
            s.path.display()
        );
        s.queued = true;
        // Rare: a scan of the queue is fine (the session may be in it, or
        // just taken out for the batch that found the log gone).
        if !self.dirty.contains(&i) {
            self.dirty.push_back(i);
        }
        self.health.pending_bytes += added;
        self.health.replaced_logs += 1;
        self.unreported_replacements += 1;
        self.index_dirty = true;
        self.record_error(msg);
    }

    /// Up to [`RETIRE_PER_HEARTBEAT`] finished sessions, round robin, for
    /// the writer to delete if their log was last written before the
    /// `retain` cutoff (it reads the file's time: no stat on the loop).
    fn retire_candidates(&mut self, batch: &mut Batch) {
        let retain = self.cfg.retain;
        let now_ms = self.last_now.as_millis();
        if retain.is_zero() || now_ms <= retain.as_millis() as u64 || self.sessions.is_empty() {
            return;
        }
        let cutoff = SystemTime::UNIX_EPOCH + Duration::from_millis(now_ms) - retain;
        let n = self.sessions.len();
        let start = self.retire_cursor % n;
        for k in 0..n.min(RETIRE_SCAN_PER_HEARTBEAT) {
            let i = (start + k) % n;
            if self.retirable(i) {
                batch.retire.push((i, self.sessions[i].path.clone()));
                if batch.retire.len() >= RETIRE_PER_HEARTBEAT {
                    break;
                }
            }
        }
        self.retire_cursor = start + n.min(RETIRE_SCAN_PER_HEARTBEAT);
        if !batch.retire.is_empty() {
            batch.retire_before = Some(cutoff);
        }
    }

    /// Whether session `i` is finished and idle: no live pane, nothing
    /// buffered or with the writer, no torn tail, no compaction.
    fn retirable(&self, i: usize) -> bool {
        let s = &self.sessions[i];
        !s.retired
            && s.live.is_empty()
            && s.pending() == 0
            && s.inflight == 0
            && !s.queued
            && s.repair.is_none()
            && self.rotation.as_ref().is_none_or(|(r, _)| *r != i)
            && !self.compact_requests.iter().any(|r| r.0 == i)
    }

    /// The writer deleted session `i`'s log (or found it gone): forget the
    /// session, unless a pane started writing to it meanwhile; then it is
    /// a new log under the same id.
    fn retire(&mut self, i: usize) {
        let now = self.last_now;
        let s = &mut self.sessions[i];
        if s.retired {
            return;
        }
        self.index_dirty = true;
        if !s.live.is_empty() || s.pending() > 0 || s.queued {
            s.meta = SessionMeta {
                id: std::mem::take(&mut s.meta.id),
                panes: s.live.clone(),
                runtime: s.meta.runtime.take(),
                cwd: s.meta.cwd.take(),
                ..SessionMeta::new_at(now)
            };
            s.rotate_base_bytes = 0;
            s.rotate_base_turns = 0;
            return;
        }
        self.by_id.remove(&s.meta.id);
        self.health.retired_sessions += 1;
        let id = std::mem::take(&mut s.meta.id);
        *s = Session::new(SessionMeta::new_at(now), PathBuf::new());
        s.retired = true;
        // A compaction asked for while the writer deleted the log has no
        // log left to compact, and must not run on the slot's next session.
        let running = self.rotation.as_ref().is_some_and(|(r, _)| *r == i);
        if running {
            self.rotation = None;
        }
        let queued = self.compact_requests.len();
        self.compact_requests.retain(|&(r, _)| r != i);
        if running || self.compact_requests.len() < queued {
            self.compactions_given_up.push((
                id.clone(),
                "given up: its log was deleted ([sessions] retain)".to_string(),
            ));
        }
        self.free_slots.push(i);
        self.retired_now.push(id);
    }

    /// Sessions forgotten by `retain` since the last call, for the log.
    pub fn take_retired(&mut self) -> Vec<String> {
        std::mem::take(&mut self.retired_now)
    }

    /// The session most overdue for rotation, if any.
    fn due_for_rotation(&self) -> Option<usize> {
        let (rb, rt) = (self.cfg.rotate_bytes, self.cfg.rotate_turns);
        self.sessions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.rotate_retry_at <= self.heartbeats)
            // A torn tail is cut by the next write; rotate after that.
            .filter(|(_, s)| s.repair.is_none())
            .filter(|(_, s)| {
                let base = s.rotate_base_bytes;
                let grown = s.meta.bytes.saturating_sub(base);
                // A rotation reads the whole log. Once the log is larger
                // than `rotate_bytes` (it kept most of itself: a chatty
                // agent with no deltas to drop), the next waits until it
                // grew by half, so a growing log is read about 3 times in
                // all, not once every `rotate_bytes` (quadratic).
                let floor = if rb > 0 && base > rb { base / 2 } else { 0 };
                (rb > 0 && grown >= rb.max(floor))
                    || (rt > 0
                        && s.meta.turn_count >= s.rotate_base_turns.saturating_add(rt)
                        && grown >= floor)
            })
            .max_by_key(|(_, s)| s.meta.bytes.saturating_sub(s.rotate_base_bytes))
            .map(|(i, _)| i)
    }

    /// [`SessionStore::compact`]: the whole job in one call. A rotation of
    /// the same session is abandoned first (its offsets would not survive
    /// the rewrite); the next heartbeat starts it again if still due.
    #[cfg(test)]
    fn compact_index(
        &mut self,
        i: usize,
        classify: &Classifier,
    ) -> Result<CompactReport, StoreError> {
        let path = self.sessions[i].path.clone();
        let mut report = FlushReport::default();
        self.settle(&mut report)
            .map_err(|e| StoreError::io("flush", &path, e))?;
        if self.sessions[i].pending() > 0 || self.sessions[i].repair.is_some() {
            let batch = Batch {
                close: std::mem::take(&mut self.close_next),
                appends: vec![Append {
                    session: i,
                    path: self.sessions[i].write_path().to_path_buf(),
                    repair: self.sessions[i].repair,
                    bytes: self.sessions[i].buf[self.sessions[i].head..].to_vec(),
                }],
                ..Batch::default()
            };
            self.sessions[i].inflight = self.sessions[i].pending();
            if let Some(pos) = self.dirty.iter().position(|&d| d == i) {
                self.dirty.remove(pos);
            }
            self.run_now(batch)
                .map_err(|e| StoreError::io("flush", &path, e))?;
        }
        if self.rotation.as_ref().is_some_and(|(r, _)| *r == i) {
            if let Some((_, mut job)) = self.rotation.take() {
                job.abandon();
            }
        }
        let s = &self.sessions[i];
        let mut job = compact::Job::new(&s.path, s.meta.runtime.as_deref(), self.last_now);
        let outcome = loop {
            match job.step(usize::MAX, classify, &mut self.ts) {
                Ok(compact::Step::Working { .. }) => {}
                Ok(compact::Step::Finished { done, .. }) => break Ok(done),
                Err(e) => break Err(e),
            }
        };
        self.finish_compaction(i, &job, outcome)
    }

    /// Applies the end of a compaction job to session `i`: after a rewrite
    /// the cached fd (still on the old inode) is closed, the metadata
    /// updated and the directory fsynced.
    fn finish_compaction(
        &mut self,
        i: usize,
        job: &compact::Job,
        outcome: io::Result<compact::Compacted>,
    ) -> Result<CompactReport, StoreError> {
        let path = self.sessions[i].path.clone();
        let done = outcome.map_err(|e| StoreError::io("compact", &path, e))?;
        if !done.rewritten {
            return Ok(done.report);
        }
        // The writer's fd is on the old inode.
        self.close_next.push(i);
        let s = &mut self.sessions[i];
        s.meta.bytes = done.report.after_bytes;
        s.meta.rotated += 1;
        // The new file was fsynced whole, the tail included.
        s.unsynced = false;
        self.index_dirty = true;
        if let Some(dir) = job.dir() {
            compact::sync_dir(dir).map_err(|e| StoreError::io("fsync", dir, e))?;
        }
        Ok(done.report)
    }

    /// Test hook: sends one session's writes to `to` (e.g. `/dev/full`), or
    /// back to its log with `None`.
    #[cfg(test)]
    pub(crate) fn redirect_writes(&mut self, session: &str, to: Option<PathBuf>) {
        if let Some(&i) = self.by_id.get(session) {
            self.close_next.push(i);
            self.sessions[i].redirect = to;
        }
    }
}

/// The session log's round trip, for the fuzzer and the property test:
/// `line`, logged as an agent line classified `Event` and again as `Raw`,
/// must read back as the log reader returns it: an `Event` that is a JSON
/// object byte for byte (without surrounding JSON whitespace), anything
/// else as its lossy UTF-8 text. A line one of the runtime adapters
/// accepts is logged as `Parsed` too, whose cheaper checks (the control
/// byte scan, and the one-scan `record::plain_object`) must then agree.
/// Panics on a mismatch.
#[doc(hidden)]
pub fn check_log_roundtrip(line: &[u8]) {
    use crate::core::taxonomy::{Adapter, Runtime};

    let mut ts = TsText::default();
    let now = Timestamp::from_millis(1_779_883_200_123);
    let trimmed = record::trim_json_ws(line);
    let as_event = record::embeddable_event(trimmed)
        && scan::reads_back(trimmed)
        && scan::nesting_within_limit(trimmed);
    let parsed = Runtime::ALL
        .iter()
        .any(|&rt| Adapter::new(rt).observe(line).is_ok());
    if parsed && record::embeddable_event(trimmed) {
        assert_eq!(
            scan::parsed_reads_back(trimmed) && scan::nesting_within_limit(trimmed),
            as_event,
            "the parsed line's check disagrees: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    if parsed && record::plain_object(trimmed) && scan::nesting_within_limit(trimmed) {
        assert!(
            as_event,
            "a plain parsed line that does not read back: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    let mut log = Vec::new();
    if as_event {
        record::encode_event(&mut log, &mut ts, now, "p", trimmed);
    } else {
        record::encode_raw(&mut log, &mut ts, now, "p", trimmed);
    }
    record::encode_raw(&mut log, &mut ts, now, "p", line);
    let (records, corrupt) = scan::complete_records(&log);
    assert_eq!(
        corrupt,
        0,
        "a record the reader rejects: {:?}",
        String::from_utf8_lossy(&log)
    );
    assert_eq!(records.len(), 2);
    let fields: Vec<scan::RecordFields<'_>> = records
        .iter()
        .map(|r| scan::RecordFields::parse(r.get().as_bytes()))
        .collect::<Option<_>>()
        .unwrap_or_else(|| panic!("records parse: {records:?}"));
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if as_event {
        let ev = fields[0].ev.map(|e| e.get().as_bytes().to_vec());
        assert_eq!(ev.as_deref(), Some(trimmed), "ev verbatim");
    } else {
        assert_eq!(fields[0].raw.as_deref(), Some(lossy(trimmed).as_str()));
    }
    assert_eq!(fields[1].raw.as_deref(), Some(lossy(line).as_str()));
}

pub use crate::protocol::SessionDump;

/// What a `get-session` reply is made of, taken at request time
/// ([`SessionStore::open_dump`]); `daemon::session_stream` reads it out.
#[derive(Debug)]
pub struct DumpSource {
    /// The index entry, as `get-session` shows it.
    pub session: serde_json::Value,
    /// For error messages only: the file may have been renamed since.
    pub path: PathBuf,
    /// The log as it was when asked; `None` if there was no file yet.
    pub log: Option<File>,
    /// How much of `log` the store counts as written.
    pub log_bytes: u64,
    /// The records still buffered, copied.
    pub unflushed: Vec<u8>,
    pub flush_error: Option<String>,
    pub log_replaced: u32,
}

fn meta_json(m: &SessionMeta) -> serde_json::Value {
    json!({
        "id": m.id,
        "panes": m.panes,
        "runtime": m.runtime,
        "cwd": m.cwd,
        "created_at": m.created_at.to_rfc3339(),
        "turn_count": m.turn_count,
        "bytes": m.bytes,
        "final_state": m.final_state,
        "exit_code": m.exit_code,
        "exit_signal": m.exit_signal,
        "rotated": m.rotated,
    })
}
