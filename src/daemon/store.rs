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
//!
//! This file is the facade: the records (`append`, `attach`, `exit`,
//! `answer`), the configuration, errors and health. The rest lives beside
//! it in `store/`: `open.rs` (recovery), `flush.rs` (the writer protocol),
//! `pressure.rs` (when reads wait for the logs), `rotation.rs` and
//! `retain.rs` (heartbeat work), `rescue.rs` (shutdown), `dump.rs`
//! (`get-session`), `session.rs` (one session's buffer).

mod compact;
mod dump;
mod flush;
mod index;
mod open;
mod pressure;
mod record;
#[cfg(test)]
mod reference;
mod rescue;
mod retain;
mod rotation;
mod scan;
mod session;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::core::time::Timestamp;

use self::flush::WriterLink;
use self::index::IndexDraft;
use self::record::TsText;
use self::retain::Retention;
use self::rotation::Rotations;
use self::session::{refill, Session};

#[cfg(test)]
pub use self::dump::MAX_DUMP_BYTES;
pub use self::dump::{attach_system_prompt, DumpSource};
pub use self::flush::FlushReport;
pub use self::open::{RecoveredApproval, RecoveredPane, Recovery};
#[cfg(test)]
pub use self::pressure::READ_AHEAD;
#[cfg(any(test, fuzzing))]
pub use self::record::check_log_roundtrip;
pub use self::rescue::ShutdownOutcome;
#[cfg(test)]
pub use self::rotation::COMPACT_REPAIR_HEARTBEATS;
pub use self::rotation::{CompactReport, CompactionProgress, RotationDone};
pub use self::scan::RecordScanner;
#[cfg(test)]
pub use crate::protocol::SessionDump;

/// Log fds kept open at once; there may be thousands of sessions.
pub const MAX_OPEN_LOGS: usize = 64;
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
    /// The system prompt this start gave the agent.
    pub system_prompt: Option<&'a str>,
    /// The control plane's role (kept so a recovered pane keeps it).
    pub role: Option<&'a str>,
    /// The agent's scope besides its working directory (left out of the
    /// record when empty).
    pub scope: &'a [String],
}

/// A prompt the daemon itself wrote to an agent's input (the heartbeat).
#[derive(Copy, Clone, Debug)]
pub struct PromptRecord<'a> {
    pub pane: &'a str,
    /// What sent it: `heartbeat`.
    pub by: &'a str,
    pub text: &'a str,
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

/// A host operation the pane's agent ran (`hostop`), as its session log
/// keeps it (`colibri fold` lists it).
#[derive(Copy, Clone, Debug)]
pub struct HostopRecord<'a> {
    pub pane: &'a str,
    pub op: &'a str,
    /// `agent:ID`.
    pub by: &'a str,
    pub params: &'a std::collections::BTreeMap<String, String>,
    /// `ok`, `failed`, `timeout` or `error`.
    pub outcome: &'a str,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub ms: u64,
    pub output_bytes: u64,
}

/// An agent's own approval request, as the session log keeps it (`fold`
/// and recovery replay it: `core::approval::LoggedApproval`).
#[derive(Copy, Clone, Debug)]
pub struct RequestRecord<'a> {
    pub pane: &'a str,
    pub approval: &'a str,
    pub operation: &'a str,
    pub reasoning: Option<&'a str>,
    pub task_id: Option<u64>,
    pub estimated_tokens: Option<u64>,
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
    /// The writer, the batch it holds and what the next one must carry.
    link: WriterLink,
    /// The index being encoded, a step per batch built, since the heartbeat
    /// that found it changed (`index::IndexDraft`).
    index_draft: Option<IndexDraft>,
    index_dirty: bool,
    /// An idle session holds no buffer: at 10,000 idle agents each held
    /// about 500 bytes of spent capacity, and one that once streamed up to
    /// `SHRINK_ABOVE`. Sessions that write now and then take one of these
    /// instead of growing a new one.
    session_spares: Vec<Vec<u8>>,
    ts: TsText,
    /// The head of the records of the read last begun, and its number.
    read_head: record::RecordHead,
    reads: u64,
    health: StoreHealth,
    /// The latest time passed in; stamps the `compacted` marker.
    last_now: Timestamp,
    heartbeats: u64,
    classifier: Option<Box<Classifier>>,
    /// The rotation running and the compactions waiting for their turn.
    rotation: Rotations,
    /// What `retain` forgot, and where it looks next.
    retention: Retention,
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
    /// `[A-Za-z0-9._-]{1,128}`, not starting with `.` (no hidden files, no
    /// `..`, no path separators).
    pub fn valid_session_id(id: &str) -> bool {
        (1..=128).contains(&id.len())
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
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
        self.record(session, now, |buf, ts| {
            record::encode_answer(buf, ts, now, rec)
        });
    }

    /// Records an agent's own approval request. Never dropped.
    pub fn approval_request(&mut self, session: &str, rec: &RequestRecord<'_>, now: Timestamp) {
        self.record(session, now, |buf, ts| {
            record::encode_request(buf, ts, now, rec)
        });
    }

    /// Records that an agent's own request ended unanswered (`reason`)
    /// while its agent ran on. Never dropped.
    pub fn approval_expired(
        &mut self,
        session: &str,
        pane: &str,
        approval: &str,
        reason: &str,
        now: Timestamp,
    ) {
        self.record(session, now, |buf, ts| {
            record::encode_expired(buf, ts, now, pane, approval, reason)
        });
    }

    /// Records a host operation the pane's agent ran. Never dropped.
    pub fn hostop(&mut self, session: &str, rec: &HostopRecord<'_>, now: Timestamp) {
        self.record(session, now, |buf, ts| {
            record::encode_hostop(buf, ts, now, rec)
        });
    }

    /// Records a prompt the daemon wrote to an agent (a heartbeat). Never
    /// dropped.
    pub fn prompt(&mut self, session: &str, rec: &PromptRecord<'_>, now: Timestamp) {
        self.record(session, now, |buf, ts| {
            record::encode_prompt(buf, ts, now, rec)
        });
    }

    /// Appends one of colibrid's own records, never dropped, to the log of
    /// `session` (opened anew if retention closed it).
    fn record(
        &mut self,
        session: &str,
        now: Timestamp,
        encode: impl FnOnce(&mut Vec<u8>, &mut TsText),
    ) {
        self.note_now(now);
        let Some(i) = self.session_index(session, now) else {
            self.reject(session, 0);
            return;
        };
        let s = &mut self.sessions[i];
        refill(&mut s.buf, &mut self.session_spares);
        let before = s.buf.len();
        encode(&mut s.buf, &mut self.ts);
        self.commit(i, before, false);
    }

    /// The session_rotation tick: unless a rotation is already running,
    /// starts one for the log that grew furthest past `rotate_bytes` (or
    /// `rotate_turns`) since its last rotation, and returns its session.
    /// The work itself is done by [`SessionStore::compaction_step`]. Then
    /// writes the index if anything changed.
    pub fn heartbeat(&mut self, now: Timestamp) -> Option<String> {
        self.note_now(now);
        self.heartbeats += 1;
        self.link.check_paths_due = true;
        self.give_up_blocked_compactions();
        let mut started = self.start_requested_compaction();
        if self.rotation.job.is_none() {
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
        if !self.link.in_flight {
            // Paths and index now; appends stay with flush and its budget.
            let batch = self.build_batch(0);
            if !batch.is_empty() {
                let mut report = FlushReport::default();
                self.dispatch(batch, &mut report);
            }
        }
        started
    }

    pub fn health(&self) -> StoreHealth {
        self.health.clone()
    }

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
        let i = match self.retention.free_slots.pop() {
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
        if self.link.in_flight && s.append_retry_at <= self.heartbeats {
            self.link.appended_in_flight = true;
        }
    }
}
