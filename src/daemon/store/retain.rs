//! `[sessions] retain`: finished, idle sessions are handed to the writer
//! (a bounded round robin per heartbeat), which deletes each log last
//! written before the cutoff; the store then forgets the session and
//! reuses its slot, so session indices held elsewhere stay valid.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::session::Session;
use super::writer::Batch;
use super::{SessionMeta, SessionStore};

/// Most sessions a heartbeat hands the writer to delete for `retain`, and
/// most it looks at (round robin), so one heartbeat's work stays small.
const RETIRE_PER_HEARTBEAT: usize = 64;
const RETIRE_SCAN_PER_HEARTBEAT: usize = 4096;

/// What `retain` forgot, and where it looks next.
#[derive(Debug, Default)]
pub(super) struct Retention {
    /// Slots of retired sessions, reused by new ones.
    pub(super) free_slots: Vec<usize>,
    /// Sessions retired since [`SessionStore::take_retired`] last ran.
    pub(super) retired_now: Vec<String>,
    /// Where the next heartbeat's look for sessions past `retain` starts.
    pub(super) cursor: usize,
}

impl SessionStore {
    /// Up to [`RETIRE_PER_HEARTBEAT`] finished sessions, round robin, for
    /// the writer to delete if their log was last written before the
    /// `retain` cutoff (it reads the file's time: no stat on the loop).
    pub(super) fn retire_candidates(&mut self, batch: &mut Batch) {
        let retain = self.cfg.retain;
        let now_ms = self.last_now.as_millis();
        if retain.is_zero() || now_ms <= retain.as_millis() as u64 || self.sessions.is_empty() {
            return;
        }
        let cutoff = SystemTime::UNIX_EPOCH + Duration::from_millis(now_ms) - retain;
        let n = self.sessions.len();
        let start = self.retention.cursor % n;
        for k in 0..n.min(RETIRE_SCAN_PER_HEARTBEAT) {
            let i = (start + k) % n;
            if self.retirable(i) {
                batch.retire.push((i, self.sessions[i].path.clone()));
                if batch.retire.len() >= RETIRE_PER_HEARTBEAT {
                    break;
                }
            }
        }
        self.retention.cursor = start + n.min(RETIRE_SCAN_PER_HEARTBEAT);
        if !batch.retire.is_empty() {
            batch.retire_before = Some(cutoff);
        }
    }

    /// Whether session `i` is finished and idle: no live pane, nothing
    /// buffered or with the writer, no torn tail, no compaction.
    pub(super) fn retirable(&self, i: usize) -> bool {
        let s = &self.sessions[i];
        !s.retired
            && s.live.is_empty()
            && s.pending() == 0
            && s.inflight == 0
            && !s.queued
            && s.repair.is_none()
            && self.rotation.job.as_ref().is_none_or(|(r, _)| *r != i)
            && !self.rotation.requested(i)
    }

    /// The writer deleted session `i`'s log (or found it gone): forget the
    /// session, unless a pane started writing to it meanwhile; then it is
    /// a new log under the same id.
    pub(super) fn retire(&mut self, i: usize) {
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
        let running = self.rotation.runs(i);
        if running {
            self.rotation.job = None;
        }
        let queued = self.rotation.requests.len();
        self.rotation.requests.retain(|&(r, _)| r != i);
        if running || self.rotation.requests.len() < queued {
            self.rotation.given_up.push((
                id.clone(),
                "given up: its log was deleted ([sessions] retain)".to_string(),
            ));
        }
        self.retention.free_slots.push(i);
        self.retention.retired_now.push(id);
    }

    /// Sessions forgotten by `retain` since the last call, for the log.
    pub fn take_retired(&mut self) -> Vec<String> {
        std::mem::take(&mut self.retention.retired_now)
    }
}
