//! Shutdown: the last flush, retried, and the rescue directory for records
//! that still cannot reach their logs, so that no acknowledged record is
//! dropped without a word.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::core::time::Timestamp;

use super::compact;
use super::flush::FlushReport;
use super::index::IndexDraft;
use super::{SessionStore, LOG_SUFFIX};

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

impl SessionStore {
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
        self.link.waiting_bytes = 0;
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

    pub(super) fn try_shutdown_flush(&mut self, now: Timestamp) -> ShutdownOutcome {
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
    pub(super) fn rescue(
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
    pub(super) fn write_rescue(&self, dir: &Path) -> io::Result<()> {
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
}
