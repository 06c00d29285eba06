//! When logs are rotated and asked-for compactions run: at most one
//! [`compact::Job`] at a time, started by the heartbeat or by
//! `compact-session`, a bounded step per wakeup, taking turns with the
//! writer (which must not append to the file the job reads). `compact.rs`
//! does the rewriting; [`Rotations`] holds the schedule.

use std::collections::VecDeque;
use std::io;

use super::compact;
use super::{Classifier, LineClass, SessionStore, StoreError};

/// Heartbeats an asked-for compaction waits for its log's torn tail to be
/// cut before it is given up.
pub const COMPACT_REPAIR_HEARTBEATS: u64 = 2;

/// Heartbeats to wait before retrying a failed rotation.
const ROTATE_RETRY_HEARTBEATS: u64 = 10;

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

/// The rotation running and the compactions waiting for their turn.
#[derive(Debug, Default)]
pub(super) struct Rotations {
    /// The rotation in progress, if any: `(session, job)`.
    pub(super) job: Option<(usize, compact::Job)>,
    /// Thread mode: the last wakeup applied a batch while a rotation runs,
    /// so the next one is the rotation's turn (it must not run while the
    /// writer appends to the file it reads).
    pub(super) turn: bool,
    /// The heartbeat count when the rotation in progress started, and
    /// whether its waiters were told the log writer stalled under it.
    pub(super) since: u64,
    pub(super) stall_told: bool,
    /// Sessions `compact-session` asked for, oldest first, with the
    /// heartbeat count when asked: each started as the rotation once none
    /// runs and its log has no torn tail to cut.
    pub(super) requests: VecDeque<(usize, u64)>,
    /// Compactions given up, with why, for the daemon to answer whoever
    /// waits for them.
    pub(super) given_up: Vec<(String, String)>,
}

impl Rotations {
    /// Whether session `i`'s log is the one being rotated.
    pub(super) fn runs(&self, i: usize) -> bool {
        self.job.as_ref().is_some_and(|(r, _)| *r == i)
    }

    /// Whether a compaction of session `i` waits its turn.
    pub(super) fn requested(&self, i: usize) -> bool {
        self.requests.iter().any(|r| r.0 == i)
    }
}

fn keep_all(_: Option<&str>, _: &[u8]) -> LineClass {
    LineClass::Keep
}

impl SessionStore {
    /// Sets the classifier the heartbeat's rotation compacts with. Without
    /// one, rotation drops nothing (every line is `Keep`).
    pub fn set_classifier(&mut self, classify: Box<Classifier>) {
        self.classifier = Some(classify);
    }

    /// True while a rotation is running: the daemon calls
    /// [`SessionStore::compaction_step`] every wakeup and polls without
    /// sleeping until it turns false.
    pub fn compaction_active(&self) -> bool {
        self.rotation.job.is_some()
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
        let running = self.rotation.runs(i);
        if !running && !self.rotation.requested(i) {
            self.rotation.requests.push_back((i, self.heartbeats));
            self.start_requested_compaction();
        }
        Ok(())
    }

    /// The compactions given up since the last call, with why (or, for
    /// one under a stalled writer, why it is not finished yet): every job
    /// that ends without a [`RotationDone`] is here.
    pub fn take_given_up_compactions(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.rotation.given_up)
    }

    /// Gives up the asked-for compactions still waiting
    /// [`COMPACT_REPAIR_HEARTBEATS`] heartbeats after they were asked for,
    /// for their log's torn tail to be cut (the cut keeps failing: a
    /// read-only or failing disk) or for a stalled log writer (a frozen
    /// filesystem), so no client waits for ever. A compaction already
    /// running under a stalled writer goes on once writes resume; its
    /// waiters are told so, once.
    pub(super) fn give_up_blocked_compactions(&mut self) {
        let now = self.heartbeats;
        let writer_stuck = self.link.stalled && self.link.in_flight;
        let sessions = &self.sessions;
        let (stuck, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.rotation.requests)
            .into_iter()
            .partition(|&(i, at)| {
                (sessions[i].repair.is_some() || writer_stuck)
                    && now >= at.saturating_add(COMPACT_REPAIR_HEARTBEATS)
            });
        self.rotation.requests = waiting.into();
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
            self.rotation
                .given_up
                .push((self.sessions[i].meta.id.clone(), why));
        }
        let Some((i, _)) = &self.rotation.job else {
            return;
        };
        if writer_stuck
            && !self.rotation.stall_told
            && now
                >= self
                    .rotation
                    .since
                    .saturating_add(COMPACT_REPAIR_HEARTBEATS)
        {
            self.rotation.stall_told = true;
            let why = format!(
                "not finished: session log writes have stalled{error}; it goes on when they resume"
            );
            self.rotation
                .given_up
                .push((self.sessions[*i].meta.id.clone(), why));
        }
    }

    /// Starts the oldest asked-for compaction that can start, if no
    /// rotation runs; returns its session.
    pub(super) fn start_requested_compaction(&mut self) -> Option<String> {
        if self.rotation.job.is_some() {
            return None;
        }
        let pos = self
            .rotation
            .requests
            .iter()
            .position(|&(i, _)| self.sessions[i].repair.is_none())?;
        let (i, _) = self.rotation.requests.remove(pos)?;
        let s = &self.sessions[i];
        let job = compact::Job::new(&s.path, s.meta.runtime.as_deref(), self.last_now);
        let id = s.meta.id.clone();
        self.start_job(i, job);
        Some(id)
    }

    pub(super) fn start_job(&mut self, i: usize, job: compact::Job) {
        self.rotation.job = Some((i, job));
        self.rotation.since = self.heartbeats;
        self.rotation.stall_told = false;
    }

    /// Advances the running rotation by at most `budget_bytes` of log
    /// reads (and the writes they imply). `None` if no rotation is running.
    ///
    /// The log keeps receiving appends meanwhile; the last steps copy them
    /// to the new file, and the step that renames it over the log also
    /// closes the session's fd, so the next write goes to the new file.
    pub fn compaction_step(&mut self, budget_bytes: usize) -> Option<CompactionProgress> {
        if self.rotation.job.is_some() && self.link.in_flight {
            // The writer may be appending to the file the job reads.
            return Some(CompactionProgress::Working { read_bytes: 0 });
        }
        self.rotation.turn = false;
        let (i, job) = self.rotation.job.as_mut()?;
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
        let (_, job) = self.rotation.job.take()?;
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

    /// The session most overdue for rotation, if any.
    pub(super) fn due_for_rotation(&self) -> Option<usize> {
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

    /// Applies the end of a compaction job to session `i`: after a rewrite
    /// the cached fd (still on the old inode) is closed, the metadata
    /// updated and the directory fsynced.
    pub(super) fn finish_compaction(
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
        self.link.close_next.push(i);
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
}
