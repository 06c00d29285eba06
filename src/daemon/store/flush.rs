//! The writer protocol: how buffered records become batches for the log
//! writer (`writer.rs`), and how a finished batch is applied. Bytes count
//! as written only once the writer says so. [`WriterLink`] is the store's
//! side of that link: the batch in flight, the marks replies wait for, and
//! the failure episode. The loop waits for the writer only at shutdown
//! (`settle`).

use std::io;

use super::index::IndexDraft;
use super::record;
use super::session::park;
use super::writer::{self, Append, Batch, Done, LogWriter, WriterThread};
use super::{SessionStore, INDEX_FILE};

/// How long `sync` (shutdown) and `compact-session` wait for the writer.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Spare batch buffers kept for reuse, and the largest kept.
const SPARE_BUFS: usize = 4;
const SPARE_BUF_MAX: usize = 1 << 20;

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

/// Where the log writes run.
#[derive(Debug)]
pub(super) enum Writer {
    Inline(LogWriter),
    Thread(WriterThread),
}

/// The store's side of the log writer: what is with it, what the next
/// batch must carry, and how far the logs are known to be written.
#[derive(Debug)]
pub(super) struct WriterLink {
    pub(super) writer: Writer,
    /// A batch is with the writer thread.
    pub(super) in_flight: bool,
    /// Bytes of the batch in flight (see `read_ahead_full`).
    pub(super) in_flight_bytes: usize,
    /// Something was buffered since the batch in flight was handed over:
    /// that batch does not cover it, even if no session is in `dirty` (a
    /// session in the batch stays `queued`). See `log_mark`.
    pub(super) appended_in_flight: bool,
    /// Batches handed to the writer so far; a batch's number is the count
    /// once it was handed over.
    pub(super) batches: u64,
    /// The batch in flight, when it holds every record buffered before it.
    pub(super) in_flight_covers: Option<u64>,
    /// The last batch that held every record buffered before it and was
    /// written: each record buffered before it was handed over is logged.
    pub(super) logged_through: u64,
    /// The batch in flight is older than [`writer::STALL_AFTER`].
    pub(super) stalled: bool,
    /// Sessions whose last append failed (`Session::append_failed`).
    pub(super) failing_sessions: usize,
    /// What the sessions waiting for the retry of a failed append held
    /// when the last batch was built (not read-ahead).
    pub(super) waiting_bytes: usize,
    pub(super) last_failure: io::ErrorKind,
    /// Fds the writer must drop before its next appends (a compaction
    /// renamed a new file over the log).
    pub(super) close_next: Vec<usize>,
    /// The heartbeat asked for the open logs to be checked against their
    /// paths.
    pub(super) check_paths_due: bool,
    pub(super) spare_bufs: Vec<Vec<u8>>,
}

impl WriterLink {
    /// Writes run inline until [`SessionStore::start_writer`] moves them
    /// to a thread.
    pub(super) fn inline() -> WriterLink {
        WriterLink {
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
            last_failure: io::ErrorKind::Other,
            close_next: Vec::new(),
            check_paths_due: false,
            spare_bufs: Vec::new(),
        }
    }
}

impl SessionStore {
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
        let failing =
            matches!(self.link.writer, Writer::Thread(_)) && self.link.failing_sessions > 0;
        if failing && report.failed.is_none() {
            report.failed = Some(self.link.last_failure);
        }
        let hold = self.rotation.job.is_some() && self.rotation.turn;
        if !self.link.in_flight && !hold {
            let batch = self.build_batch(budget);
            if !batch.is_empty() {
                self.link.batches += 1;
                // A session cut short by the budget leaves `dirty` too
                // (it goes back when the batch is applied).
                let covers = !self.writable_dirty()
                    && batch.appends.iter().all(|a| {
                        let s = &self.sessions[a.session];
                        s.pending() == s.inflight
                    });
                self.link.in_flight_covers = covers.then_some(self.link.batches);
                self.dispatch(batch, &mut report);
            }
        }
        if let (Writer::Thread(t), true) = (&self.link.writer, self.link.in_flight) {
            if !self.link.stalled && t.stalled() {
                self.link.stalled = true;
                self.record_error(format!(
                    "session log writes stalled for over {} s (a frozen or hung filesystem?); records stay buffered",
                    writer::STALL_AFTER.as_secs()
                ));
            }
        }
        let stuck = self.link.stalled && self.link.in_flight;
        if stuck && report.failed.is_none() {
            report.failed = Some(io::ErrorKind::TimedOut);
        }
        let inline = matches!(self.link.writer, Writer::Inline(_));
        report.release_frames = stuck || (inline && report.failed.is_some());
        report.pending = self.writable_dirty() || self.link.in_flight;
        report.replaced_logs = std::mem::take(&mut self.unreported_replacements);
        report
    }

    /// The mark of what is buffered now: once `logged_through` reaches it,
    /// every record buffered until now is in its log (replies and watch
    /// events that report them may leave). Call after `flush`.
    pub fn log_mark(&self) -> u64 {
        if self.writable_dirty() || self.link.appended_in_flight {
            return self.link.batches + 1;
        }
        if self.link.in_flight {
            return self.link.in_flight_covers.unwrap_or(self.link.batches + 1);
        }
        self.link.logged_through
    }

    /// Whether a queued session is not waiting for the retry of a failed
    /// append: its records go in the next batch. The waiting ones are at
    /// the front of the queue, and few.
    pub(super) fn writable_dirty(&self) -> bool {
        self.dirty
            .iter()
            .any(|&i| self.sessions[i].append_retry_at <= self.heartbeats)
    }

    /// See `log_mark`.
    pub fn logged_through(&self) -> u64 {
        self.link.logged_through
    }

    /// True while a batch is with the writer thread: the loop waits for
    /// its wakeup instead of polling without sleeping.
    pub fn waiting_for_writer(&self) -> bool {
        self.link.in_flight
    }

    /// Moves the log writes to a thread of their own that wakes the loop
    /// through `registry` with `token` when a batch is done. Until called
    /// (and if it fails) the writes run inline.
    pub fn start_writer(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        if matches!(self.link.writer, Writer::Thread(_)) {
            return Ok(());
        }
        let waker = mio::Waker::new(registry, token)?;
        let inline =
            match std::mem::replace(&mut self.link.writer, Writer::Inline(LogWriter::default())) {
                Writer::Inline(w) => w,
                Writer::Thread(t) => {
                    self.link.writer = Writer::Thread(t);
                    return Ok(());
                }
            };
        match WriterThread::start(inline, waker) {
            Ok(t) => {
                self.link.writer = Writer::Thread(t);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The writer thread's loop waker, for another thread that must wake
    /// the loop (mio allows one waker per poll).
    pub fn waker(&self) -> Option<std::sync::Arc<mio::Waker>> {
        match &self.link.writer {
            Writer::Thread(t) => Some(t.waker()),
            Writer::Inline(_) => None,
        }
    }

    /// Applies the batch the writer thread finished, if any.
    pub(super) fn collect(&mut self, report: &mut FlushReport) {
        let Writer::Thread(t) = &self.link.writer else {
            return;
        };
        match t.try_done() {
            Ok(Some(done)) => {
                self.rotation.turn = self.rotation.job.is_some();
                self.apply(done, report);
            }
            Ok(None) => {}
            Err(e) => self.writer_died(&e),
        }
    }

    /// The thread is gone (it panicked): write inline from now on. Inline,
    /// a failed append is retried at the next flush, as it was before the
    /// thread started.
    pub(super) fn writer_died(&mut self, e: &io::Error) {
        self.record_error(format!("log writer: {e}"));
        self.link.writer = Writer::Inline(LogWriter::default());
        self.release_in_flight();
        for s in &mut self.sessions {
            s.append_retry_at = 0;
        }
        self.link.waiting_bytes = 0;
    }

    /// Forgets the batch in flight: its bytes are sent again. Its sessions
    /// left `dirty` when the batch was built and are still `queued`, which
    /// keeps later appends from queueing them, so they go back first here
    /// (else their records would wait in memory for good).
    pub(super) fn release_in_flight(&mut self) {
        // The lost batch may have carried the index: the next heartbeat
        // writes it again.
        self.index_dirty = true;
        self.link.in_flight = false;
        self.link.in_flight_bytes = 0;
        self.link.in_flight_covers = None;
        self.link.appended_in_flight = false;
        self.link.stalled = false;
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

    pub(super) fn dispatch(&mut self, batch: Batch, report: &mut FlushReport) -> Option<io::Error> {
        match &mut self.link.writer {
            Writer::Inline(w) => {
                let done = w.run(batch);
                self.apply(done, report)
            }
            Writer::Thread(t) => match t.send(batch) {
                Ok(()) => {
                    // Everything buffered so far is in this batch or still
                    // in `dirty`.
                    self.link.appended_in_flight = false;
                    self.link.in_flight = true;
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
    pub(super) fn build_batch(&mut self, budget: usize) -> Batch {
        let mut batch = Batch {
            close: std::mem::take(&mut self.link.close_next),
            ..Batch::default()
        };
        if std::mem::take(&mut self.link.check_paths_due) {
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
            let mut bytes = self.link.spare_bufs.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(&s.buf[s.head..s.head + n]);
            s.inflight = n;
            left -= n;
            self.link.in_flight_bytes += n;
            s.fd_open = true;
            batch.appends.push(Append {
                session: i,
                path: s.write_path().to_path_buf(),
                repair: s.repair,
                bytes,
            });
        }
        self.link.waiting_bytes = waiting.iter().map(|&i| self.sessions[i].pending()).sum();
        for i in waiting.into_iter().rev() {
            self.dirty.push_front(i);
        }
        self.step_index(&mut batch);
        batch
    }

    /// Applies a finished batch; returns its first error.
    pub(super) fn apply(&mut self, done: Done, report: &mut FlushReport) -> Option<io::Error> {
        self.link.in_flight = false;
        self.link.in_flight_bytes = 0;
        self.link.stalled = false;
        let covers = self.link.in_flight_covers.take();
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
            if d.buf.capacity() <= SPARE_BUF_MAX && self.link.spare_bufs.len() < SPARE_BUFS {
                self.link.spare_bufs.push(d.buf);
            }
            if d.replaced {
                self.log_replaced(i);
                all_written = false;
                continue;
            }
            if let Some(e) = d.error {
                self.health.failed_writes += 1;
                let thread = matches!(self.link.writer, Writer::Thread(_));
                let s = &mut self.sessions[i];
                if thread {
                    s.append_retry_at = self.heartbeats + 1;
                }
                if !s.append_failed {
                    s.append_failed = true;
                    self.link.failing_sessions += 1;
                }
                self.link.last_failure = e.kind();
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
                self.link.failing_sessions -= 1;
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
            self.link.logged_through = n;
        }
        first
    }

    /// Waits (bounded) for the batch with the writer thread and applies it.
    pub(super) fn settle(&mut self, report: &mut FlushReport) -> io::Result<()> {
        if !self.link.in_flight {
            return Ok(());
        }
        let Writer::Thread(t) = &self.link.writer else {
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
    pub(super) fn run_now(&mut self, batch: Batch) -> io::Result<()> {
        let mut report = FlushReport::default();
        if let Some(e) = self.dispatch(batch, &mut report) {
            return Err(e);
        }
        self.settle(&mut report)?;
        if self.link.in_flight {
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

    /// True while the index is being encoded: the daemon polls without
    /// sleeping (each flush that builds a batch takes a step) until it
    /// turns false.
    pub fn index_pending(&self) -> bool {
        self.index_draft.is_some()
    }

    /// Encodes the next step of the index draft; the batch carries the
    /// index once the draft has every session.
    pub(super) fn step_index(&mut self, batch: &mut Batch) {
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

    /// Starts session `i`'s log anew after its file was deleted or
    /// replaced: the fd is dropped (the next write creates the path again)
    /// and the new log opens with a `log_replaced` record, so a reader sees
    /// that earlier records are missing instead of a silently short log.
    pub(super) fn log_replaced(&mut self, i: usize) {
        if self.rotation.runs(i) {
            if let Some((_, mut job)) = self.rotation.job.take() {
                job.abandon();
                // Whoever asked for it hears why it will not end.
                self.rotation.given_up.push((
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
}
