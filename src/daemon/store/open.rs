//! Opening the store, once, before the loop: the directory made safe and
//! locked, leftovers of interrupted writes removed, every log scanned (the
//! log is the truth, the index only a cache) and torn tails repaired, and
//! the [`Recovery`] the daemon rebuilds its panes from.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::core::approval::LoggedApproval;
use crate::core::time::Timestamp;

use super::flush::WriterLink;
use super::index::{self, IndexEntry};
use super::record::{self, TsText};
use super::retain::Retention;
use super::rotation::Rotations;
use super::scan::{self, RECOVERY_EVENT_CAP};
use super::session::Session;
use super::{
    SessionMeta, SessionStore, StoreConfig, StoreError, StoreHealth, COMPACT_SUFFIX, INDEX_FILE,
    INDEX_TMP, LOG_SUFFIX,
};

const DIR_MODE: u32 = 0o750;

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
    pub role: Option<String>,
    pub attached_at: Timestamp,
    /// `(state, code, signal)` of the exit after the last attach.
    pub exit: Option<(String, Option<i32>, Option<i32>)>,
    /// The `ev` lines since the last attach, verbatim, in order.
    pub events: Vec<(Timestamp, Vec<u8>)>,
    /// Some events were not kept because of [`RECOVERY_EVENT_CAP`].
    pub events_truncated: bool,
    /// The approval records (answers, agents' own requests and their
    /// expiries) since the last attach, each at its place among `events`
    /// (dropped with them when the cap releases them).
    pub approval_records: Vec<RecoveredApproval>,
    /// A `removed` record follows the last attach: not rebuilt.
    pub removed: bool,
    /// The exit record says colibri ended the run on purpose.
    pub planned_exit: bool,
}

/// An approval record of a recovered pane (an answer, an agent's own
/// request or its expiry), as its log recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredApproval {
    /// How many of the pane's `events` came before it.
    pub after_events: usize,
    pub ts: Timestamp,
    pub record: LoggedApproval,
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
        let logs = list_logs(&cfg.dir, &mut recovery)?;
        let mut cached = read_index(&cfg.dir, &mut recovery);
        let mut store = SessionStore {
            _lock: lock,
            cfg,
            sessions: Vec::new(),
            by_id: HashMap::new(),
            dirty: VecDeque::new(),
            link: WriterLink::inline(),
            index_draft: None,
            // Rewrite the index once after open so it matches the logs.
            index_dirty: true,
            session_spares: Vec::new(),
            ts: TsText::default(),
            read_head: record::RecordHead::default(),
            reads: 0,
            health: StoreHealth::default(),
            last_now: Timestamp::default(),
            heartbeats: 0,
            classifier: None,
            rotation: Rotations::default(),
            retention: Retention::default(),
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
            if let Some(last) = sum.last_ts {
                store.last_now = store.last_now.max(last);
            }
            let from_index = cached.remove(&id);
            loaded.push(load_session(id, path, sum, from_index, &mut recovery));
        }
        rb.finish(&mut recovery);
        recovery.panes.sort_by_key(|p| p.attached_at);
        store.adopt(loaded);
        recovery.sessions = store.sessions.len();
        Ok((store, recovery))
    }

    /// Takes the loaded sessions in creation order; those with a buffered
    /// newline or a tail still to cut are queued for the first flush.
    fn adopt(&mut self, mut loaded: Vec<Session>) {
        loaded
            .sort_by(|a, b| (a.meta.created_at, &a.meta.id).cmp(&(b.meta.created_at, &b.meta.id)));
        for (i, mut s) in loaded.into_iter().enumerate() {
            if s.pending() > 0 || s.repair.is_some() {
                self.health.pending_bytes += s.pending();
                s.queued = true;
                self.dirty.push_back(i);
            }
            self.by_id.insert(s.meta.id.clone(), i);
            self.sessions.push(s);
        }
    }
}

/// The session logs in `dir`, sorted by id; leftovers of interrupted
/// compactions and index writes are deleted on the way.
fn list_logs(dir: &Path, recovery: &mut Recovery) -> Result<Vec<(String, PathBuf)>, StoreError> {
    let mut logs: Vec<(String, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io("read directory", dir, e))? {
        let entry = entry.map_err(|e| StoreError::io("read directory", dir, e))?;
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
    Ok(logs)
}

/// The index's entries by session id; an unreadable index is a problem
/// to report, not an error (the logs rebuild it).
fn read_index(dir: &Path, recovery: &mut Recovery) -> HashMap<String, IndexEntry> {
    let index_path = dir.join(INDEX_FILE);
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
    cached
}

/// One session as its scanned log says, completed by its index entry
/// (turn counts and rotation baselines are not in the log).
fn load_session(
    id: String,
    path: PathBuf,
    sum: scan::LogSummary,
    from_index: Option<IndexEntry>,
    recovery: &mut Recovery,
) -> Session {
    recovery.corrupt_lines += sum.corrupt_lines;
    if let Some(why) = &sum.bad_answer {
        recovery.problems.push(format!(
            "session {id}: {} approval record(s) not replayed (the first: {why}); the log keeps them",
            sum.bad_answers
        ));
    }
    let created_at = match (&from_index, sum.first_ts) {
        (Some(e), Some(first)) if e.created_at_ms > 0 => {
            Timestamp::from_millis(e.created_at_ms).min(first)
        }
        (_, Some(first)) => first,
        (Some(e), None) => Timestamp::from_millis(e.created_at_ms),
        (None, None) => Timestamp::default(),
    };
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
    session
}
