//! Test-only references the production paths are checked against: the
//! whole `get-session` dump in memory (the streamed reply must match it
//! byte for byte) and the whole compaction in one call (the stepped job
//! must match it); plus a hook that sends a session's writes elsewhere.

use std::path::PathBuf;

use super::compact;
use super::flush::FlushReport;
use super::scan;
use super::writer::{Append, Batch};
use super::{Classifier, CompactReport, SessionDump, SessionStore, StoreError};

impl SessionStore {
    /// Whether a compaction of session `id` runs or waits its turn: false
    /// once it ended, or was given up.
    pub fn compaction_pending(&self, id: &str) -> bool {
        let Some(&i) = self.by_id.get(id) else {
            return false;
        };
        self.rotation.runs(i) || self.rotation.requested(i)
    }

    /// The whole `get-session` dump in memory: the reference the streamed
    /// reply (`daemon::session_stream`) is checked against, byte for byte.
    /// Records are checked as JSON but never re-serialised, so each comes
    /// back byte for byte as the log holds it, whatever JSON the agent
    /// printed (deep nesting, `1e400`, lone surrogate escapes).
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
        let system_prompt = records
            .iter()
            .rev()
            .find_map(|r| super::attach_system_prompt(r.get()))
            .flatten();
        Ok(SessionDump {
            session: src.session,
            records,
            corrupt_lines: corrupt,
            unflushed_bytes: src.unflushed.len(),
            flush_error: src.flush_error,
            log_replaced: src.log_replaced,
            system_prompt,
        })
    }

    /// The whole compaction in one call (the reference the stepped one is
    /// tested against): see the `compact` module. The session is flushed
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

    /// [`SessionStore::compact`]: the whole job in one call. A rotation of
    /// the same session is abandoned first (its offsets would not survive
    /// the rewrite); the next heartbeat starts it again if still due.
    pub(super) fn compact_index(
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
                close: std::mem::take(&mut self.link.close_next),
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
        if self.rotation.runs(i) {
            if let Some((_, mut job)) = self.rotation.job.take() {
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

    /// Test hook: sends one session's writes to `to` (e.g. `/dev/full`), or
    /// back to its log with `None`.
    pub(crate) fn redirect_writes(&mut self, session: &str, to: Option<PathBuf>) {
        if let Some(&i) = self.by_id.get(session) {
            self.link.close_next.push(i);
            self.sessions[i].redirect = to;
        }
    }
}
