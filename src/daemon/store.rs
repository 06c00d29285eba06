//! Durable session logs: one append-only JSONL file per daemon session,
//! `<state_dir>/sessions/<id>.jsonl`, plus `index.json`, a metadata cache.
//!
//! The event loop hands every agent line to [`SessionStore::append`] before
//! it reports the event to clients. `append` only encodes the record into
//! the session's memory buffer (no syscall, no allocation once the buffer
//! has grown); [`SessionStore::flush`], called once per loop wakeup, writes
//! buffered bytes under a byte budget. The store owns the log fds (opened
//! `O_APPEND|O_CLOEXEC`, at most [`MAX_OPEN_LOGS`] at a time, least recently
//! used closed first).
//!
//! **Invariants.** Every line of a log is one complete JSON record, except a
//! torn last line left by a crash, which `open` repairs before anything is
//! appended. Written data is lost in exactly one way: a session whose writes
//! keep failing accumulates more than its hard limit (1.5 × `buffer_limit`)
//! of unwritten bytes, and then new event lines are dropped and counted in
//! [`StoreHealth::lost_bytes`]. Attach and exit records are never dropped.
//! The store reads no clock: every time is passed in.

mod compact;
mod index;
mod record;
mod scan;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::core::time::Timestamp;

use self::index::IndexEntry;
use self::record::TsText;

pub use self::scan::RECOVERY_EVENT_CAP;

/// Log fds kept open at once; there may be thousands of sessions.
pub const MAX_OPEN_LOGS: usize = 64;
/// `dump` refuses logs larger than this (the dump is built in memory).
pub const MAX_DUMP_BYTES: u64 = 64 << 20;
/// Failed writes after which one `flush` call gives up (the disk is
/// probably full; trying every session again would only burn the wakeup).
const MAX_FAILURES_PER_FLUSH: u32 = 8;
/// Heartbeats to wait before retrying a failed rotation.
const ROTATE_RETRY_HEARTBEATS: u64 = 10;
/// A drained buffer with more capacity than this is shrunk back.
const SHRINK_ABOVE: usize = 256 << 10;
const SHRINK_TO: usize = 64 << 10;
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
    /// Turns counted by the daemon via [`SessionStore::note_turn`]. The log
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

/// One line an agent emitted, as the framer classified it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineRecord<'a> {
    /// A valid JSON object line, embedded verbatim as `"ev"` (surrounding
    /// JSON whitespace trimmed). A line that is not one `{...}` without
    /// newlines is stored as `raw` instead, so the log stays valid.
    Event(&'a [u8]),
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
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlushReport {
    pub written: usize,
    pub pending: bool,
    pub failed: Option<io::ErrorKind>,
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
}

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
    live: Vec<String>,
    rotate_base_bytes: u64,
    rotate_base_turns: u64,
    /// Heartbeat count before which a failed rotation is not retried.
    rotate_retry_at: u64,
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
            live: Vec::new(),
            rotate_base_bytes: 0,
            rotate_base_turns: 0,
            rotate_retry_at: 0,
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

    fn index_entry(&self) -> IndexEntry {
        IndexEntry {
            id: self.meta.id.clone(),
            panes: self.meta.panes.clone(),
            runtime: self.meta.runtime.clone(),
            cwd: self.meta.cwd.clone(),
            created_at_ms: self.meta.created_at.as_millis(),
            turn_count: self.meta.turn_count,
            bytes: self.meta.bytes,
            final_state: self.meta.final_state.clone(),
            exit_code: self.meta.exit_code,
            exit_signal: self.meta.exit_signal,
            rotated: self.meta.rotated,
            rotate_base_bytes: self.rotate_base_bytes,
            rotate_base_turns: self.rotate_base_turns,
        }
    }
}

/// The open log fds, least recently used closed first.
#[derive(Debug)]
struct FdCache {
    entries: Vec<FdEntry>,
    tick: u64,
}

#[derive(Debug)]
struct FdEntry {
    session: usize,
    file: File,
    used: u64,
}

impl FdCache {
    fn get(&mut self, session: usize, path: &Path) -> io::Result<&mut File> {
        self.tick += 1;
        let pos = match self.entries.iter().position(|e| e.session == session) {
            Some(pos) => pos,
            None => {
                let file = open_log(path)?;
                if self.entries.len() >= MAX_OPEN_LOGS {
                    if let Some(lru) = self
                        .entries
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, e)| e.used)
                        .map(|(i, _)| i)
                    {
                        // Dropping the File closes it; close(2) on a regular
                        // file does not block on I/O.
                        self.entries.swap_remove(lru);
                    }
                }
                self.entries.push(FdEntry {
                    session,
                    file,
                    used: 0,
                });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[pos];
        entry.used = self.tick;
        Ok(&mut entry.file)
    }

    fn peek(&mut self, session: usize) -> Option<&mut File> {
        self.entries
            .iter_mut()
            .find(|e| e.session == session)
            .map(|e| &mut e.file)
    }

    fn close(&mut self, session: usize) {
        self.entries.retain(|e| e.session != session);
    }
}

fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(LOG_MODE)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
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
    fds: FdCache,
    ts: TsText,
    health: StoreHealth,
    index_dirty: bool,
    /// The latest time passed in; stamps the `compacted` marker.
    last_now: Timestamp,
    heartbeats: u64,
    classifier: Option<Box<Classifier>>,
    /// The rotation in progress, if any: `(session, job)`.
    rotation: Option<(usize, compact::Job)>,
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
            fds: FdCache {
                entries: Vec::new(),
                tick: 0,
            },
            ts: TsText::default(),
            health: StoreHealth::default(),
            // Rewrite the index once after open so it matches the logs.
            index_dirty: true,
            last_now: Timestamp::default(),
            heartbeats: 0,
            classifier: None,
            rotation: None,
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
        let before = s.buf.len();
        record::encode_attach(&mut s.buf, &mut self.ts, now, rec);
        self.index_dirty = true;
        self.commit(i, before, false);
    }

    /// Buffers one agent line. Allocation-free once the session's buffer
    /// has grown to its working size; no syscall.
    pub fn append(&mut self, session: &str, pane: &str, line: LineRecord<'_>, now: Timestamp) {
        self.note_now(now);
        let Some(i) = self.session_index(session, now) else {
            let len = match line {
                LineRecord::Event(l) | LineRecord::Raw(l) => l.len(),
                LineRecord::Oversize(_) => 0,
            };
            self.reject(session, len);
            return;
        };
        let s = &mut self.sessions[i];
        s.note_pane(pane);
        let before = s.buf.len();
        match line {
            LineRecord::Event(l) => {
                let l = record::trim_json_ws(l);
                if record::embeddable_event(l) {
                    record::encode_event(&mut s.buf, &mut self.ts, now, pane, l);
                } else {
                    record::encode_raw(&mut s.buf, &mut self.ts, now, pane, l);
                }
            }
            LineRecord::Raw(l) => record::encode_raw(&mut s.buf, &mut self.ts, now, pane, l),
            LineRecord::Oversize(n) => {
                record::encode_oversize(&mut s.buf, &mut self.ts, now, pane, n)
            }
        }
        self.commit(i, before, true);
    }

    /// Counts one turn for the session (the daemon's taxonomy decides).
    pub fn note_turn(&mut self, session: &str) {
        if let Some(&i) = self.by_id.get(session) {
            self.sessions[i].meta.turn_count += 1;
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
        let before = s.buf.len();
        record::encode_exit(&mut s.buf, &mut self.ts, now, rec);
        self.index_dirty = true;
        self.commit(i, before, false);
    }

    /// Writes buffered records, at most `budget` bytes, sessions in the
    /// order they got data. A failing session is moved to the back and the
    /// others still get their turn; after a few failures the call stops.
    pub fn flush(&mut self, budget: usize) -> FlushReport {
        let mut report = FlushReport {
            written: 0,
            pending: false,
            failed: None,
        };
        let mut failures = 0;
        let mut rounds = self.dirty.len();
        while rounds > 0 && report.written < budget {
            rounds -= 1;
            let Some(i) = self.dirty.pop_front() else {
                break;
            };
            let (n, err) = self.write_session(i, budget - report.written);
            report.written += n;
            if let Some(e) = err {
                report.failed = Some(e.kind());
                self.dirty.push_back(i);
                failures += 1;
                if failures >= MAX_FAILURES_PER_FLUSH {
                    break;
                }
            } else if self.sessions[i].pending() > 0 || self.sessions[i].repair.is_some() {
                // The budget ran out mid-session: it goes first next time.
                self.dirty.push_front(i);
                break;
            } else {
                self.sessions[i].queued = false;
            }
        }
        report.pending = !self.dirty.is_empty();
        report
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

    /// Writes everything (no budget), fsyncs every log written since the
    /// last sync, and writes the index. For shutdown. Returns the first
    /// error; everything else is still attempted.
    pub fn sync(&mut self) -> io::Result<()> {
        let mut first: Option<io::Error> = None;
        for _ in 0..self.dirty.len() {
            let Some(i) = self.dirty.pop_front() else {
                break;
            };
            let (_, err) = self.write_session(i, usize::MAX);
            match err {
                Some(e) => {
                    first.get_or_insert(e);
                    self.dirty.push_back(i);
                }
                None => self.sessions[i].queued = false,
            }
        }
        for i in 0..self.sessions.len() {
            if !self.sessions[i].unsynced {
                continue;
            }
            let res = match self.fds.peek(i) {
                Some(f) => f.sync_all(),
                None => open_log(self.sessions[i].write_path()).and_then(|f| f.sync_all()),
            };
            match res {
                Ok(()) => self.sessions[i].unsynced = false,
                Err(e) => {
                    self.record_error(format!("fsync {}: {e}", self.sessions[i].path.display()));
                    first.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.write_index() {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    /// The session_rotation tick: unless a rotation is already running,
    /// starts one for the log that grew furthest past `rotate_bytes` (or
    /// `rotate_turns`) since its last rotation, and returns its session.
    /// The work itself is done by [`SessionStore::compaction_step`]. Then
    /// writes the index if anything changed.
    pub fn heartbeat(&mut self, now: Timestamp) -> Option<String> {
        self.note_now(now);
        self.heartbeats += 1;
        let mut started = None;
        if self.rotation.is_none() {
            if let Some(i) = self.due_for_rotation() {
                let s = &self.sessions[i];
                let job = compact::Job::new(&s.path, s.meta.runtime.as_deref(), self.last_now);
                started = Some(s.meta.id.clone());
                self.rotation = Some((i, job));
            }
        }
        if self.index_dirty {
            if let Err(e) = self.write_index() {
                self.record_error(format!(
                    "writing {}: {e}",
                    self.cfg.dir.join(INDEX_FILE).display()
                ));
            }
        }
        started
    }

    /// True while a rotation is running: the daemon calls
    /// [`SessionStore::compaction_step`] every wakeup and polls without
    /// sleeping until it turns false.
    pub fn compaction_active(&self) -> bool {
        self.rotation.is_some()
    }

    /// Advances the running rotation by at most `budget_bytes` of log
    /// reads (and the writes they imply). `None` if no rotation is running.
    ///
    /// The log keeps receiving appends meanwhile; the last steps copy them
    /// to the new file, and the step that renames it over the log also
    /// closes the session's fd, so the next write goes to the new file.
    pub fn compaction_step(&mut self, budget_bytes: usize) -> Option<CompactionProgress> {
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
        self.sessions.iter().map(|s| &s.meta).collect()
    }

    pub fn get(&self, id: &str) -> Option<&SessionMeta> {
        self.by_id.get(id).map(|&i| &self.sessions[i].meta)
    }

    /// The `get-session` dump: `{"session":{meta},"records":[every record,
    /// parsed],"corrupt_lines":n,"unflushed_bytes":n,"flush_error":s|null}`.
    /// The session is flushed first; if that fails the dump still shows
    /// what is on disk and says so. Refuses logs over [`MAX_DUMP_BYTES`].
    pub fn dump(&mut self, id: &str) -> Result<serde_json::Value, StoreError> {
        let i = self.lookup(id)?;
        let mut flush_error = None;
        if self.sessions[i].pending() > 0 || self.sessions[i].repair.is_some() {
            if let (_, Some(e)) = self.write_session(i, usize::MAX) {
                flush_error = Some(e.to_string());
            }
        }
        let s = &self.sessions[i];
        let mut bytes = Vec::new();
        match File::open(&s.path) {
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
                // Bounded even if the file grows under us.
                f.take(MAX_DUMP_BYTES)
                    .read_to_end(&mut bytes)
                    .map_err(|e| StoreError::io("read", &s.path, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("open", &s.path, e)),
        }
        let mut records = Vec::new();
        let mut corrupt: u64 = 0;
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        for line in bytes[..complete].split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(v) => records.push(v),
                Err(_) => corrupt += 1,
            }
        }
        Ok(json!({
            "session": meta_json(&s.meta),
            "records": records,
            "corrupt_lines": corrupt,
            "unflushed_bytes": s.pending(),
            "flush_error": flush_error,
        }))
    }

    /// compact-session: see the `compact` module. The session is flushed
    /// first; the report counts dropped lines (0 means the log was left
    /// untouched).
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
        };
        let path = self.cfg.dir.join(format!("{id}{LOG_SUFFIX}"));
        self.sessions.push(Session::new(meta, path));
        let i = self.sessions.len() - 1;
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
    }

    /// Writes up to `max` bytes of session `i`. Returns what was written and
    /// the error that stopped it, if any (the fd is then closed, so the next
    /// attempt reopens the path).
    fn write_session(&mut self, i: usize, max: usize) -> (usize, Option<io::Error>) {
        let s = &mut self.sessions[i];
        let mut written = 0;
        let mut failure = None;
        match self.fds.get(i, s.write_path()) {
            Err(e) => failure = Some(e),
            Ok(file) => {
                if let Some(len) = s.repair {
                    match file.set_len(len) {
                        Ok(()) => {
                            s.repair = None;
                            s.meta.bytes = len;
                        }
                        Err(e) => failure = Some(e),
                    }
                }
                while failure.is_none() && written < max && s.head < s.buf.len() {
                    let end = s.buf.len().min(s.head.saturating_add(max - written));
                    match file.write(&s.buf[s.head..end]) {
                        Ok(0) => failure = Some(io::Error::from(io::ErrorKind::WriteZero)),
                        Ok(n) => {
                            s.head += n;
                            written += n;
                            s.meta.bytes += n as u64;
                            s.unsynced = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => failure = Some(e),
                    }
                }
            }
        }
        s.reclaim();
        self.health.pending_bytes -= written;
        if written > 0 {
            self.index_dirty = true;
        }
        if let Some(e) = &failure {
            self.health.failed_writes += 1;
            let msg = format!(
                "writing session {} to {}: {e}",
                s.meta.id,
                s.write_path().display()
            );
            self.fds.close(i);
            self.record_error(msg);
        }
        (written, failure)
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
                (rb > 0 && s.meta.bytes >= s.rotate_base_bytes.saturating_add(rb))
                    || (rt > 0 && s.meta.turn_count >= s.rotate_base_turns.saturating_add(rt))
            })
            .max_by_key(|(_, s)| s.meta.bytes.saturating_sub(s.rotate_base_bytes))
            .map(|(i, _)| i)
    }

    /// compact-session: the whole job in one call. A rotation of the same
    /// session is abandoned first (its offsets would not survive the
    /// rewrite); the next heartbeat starts it again if still due.
    fn compact_index(
        &mut self,
        i: usize,
        classify: &Classifier,
    ) -> Result<CompactReport, StoreError> {
        if self.sessions[i].pending() > 0 || self.sessions[i].repair.is_some() {
            if let (_, Some(e)) = self.write_session(i, usize::MAX) {
                return Err(StoreError::io("flush", &self.sessions[i].path, e));
            }
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
        self.fds.close(i);
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

    fn write_index(&mut self) -> io::Result<()> {
        let entries = self.sessions.iter().map(Session::index_entry).collect();
        write_atomic(
            &self.cfg.dir,
            INDEX_FILE,
            INDEX_TMP,
            &index::encode(entries),
        )?;
        self.index_dirty = false;
        Ok(())
    }

    /// Test hook: sends one session's writes to `to` (e.g. `/dev/full`), or
    /// back to its log with `None`.
    #[cfg(test)]
    pub(crate) fn redirect_writes(&mut self, session: &str, to: Option<PathBuf>) {
        if let Some(&i) = self.by_id.get(session) {
            self.fds.close(i);
            self.sessions[i].redirect = to;
        }
    }
}

fn meta_json(m: &SessionMeta) -> serde_json::Value {
    json!({
        "id": m.id,
        "panes": m.panes,
        "runtime": m.runtime,
        "cwd": m.cwd,
        "created_at": record::rfc3339(m.created_at),
        "turn_count": m.turn_count,
        "bytes": m.bytes,
        "final_state": m.final_state,
        "exit_code": m.exit_code,
        "exit_signal": m.exit_signal,
        "rotated": m.rotated,
    })
}
