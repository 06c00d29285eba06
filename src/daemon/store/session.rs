//! One session as the store holds it: its metadata, the buffer of records
//! not written yet, and where its log stands with the writer, rotation and
//! retention. Also the pool of spare buffers that idle sessions give back,
//! so thousands of idle agents hold no buffer memory.

use std::path::{Path, PathBuf};

use super::index::IndexEntryView;
use super::SessionMeta;

/// A drained buffer with more capacity than this is shrunk back.
const SHRINK_ABOVE: usize = 256 << 10;
const SHRINK_TO: usize = 64 << 10;
/// Session buffers given back once all they held is written, kept for the
/// next session that writes: at most this many, none larger than
/// `SHRINK_ABOVE` (2 MiB in all at worst).
pub(super) const SPARE_SESSION_BUFS: usize = 8;

/// Gives a session that gave its buffer back the largest spare, if there
/// is one: a streaming session gets back a buffer of its working size, not
/// an idle session's small one.
pub(super) fn refill(buf: &mut Vec<u8>, spares: &mut Vec<Vec<u8>>) {
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
pub(super) fn park(spent: Vec<u8>, spares: &mut Vec<Vec<u8>>) {
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
pub(super) struct Session {
    pub(super) meta: SessionMeta,
    pub(super) path: PathBuf,
    /// Encoded records; `buf[head..]` is not written yet.
    pub(super) buf: Vec<u8>,
    pub(super) head: usize,
    /// In the store's `dirty` queue.
    pub(super) queued: bool,
    /// Truncate the log to this length before the next write (a torn tail
    /// that could not be cut at open).
    pub(super) repair: Option<u64>,
    /// Written since the last fsync.
    pub(super) unsynced: bool,
    /// `buf[head..head + inflight]` is with the writer thread.
    pub(super) inflight: usize,
    /// A short write left `buf[head..]` starting inside a record (kept
    /// apart from `head`, which `reclaim` resets).
    pub(super) mid_record: bool,
    pub(super) live: Vec<String>,
    /// An append was sent since the writer last closed this log's fd:
    /// the writer may hold it open.
    pub(super) fd_open: bool,
    pub(super) rotate_base_bytes: u64,
    pub(super) rotate_base_turns: u64,
    /// Heartbeat count before which a failed rotation is not retried.
    pub(super) rotate_retry_at: u64,
    /// Thread mode, after a failed append: heartbeat count before which
    /// this session's records are not sent again (its log only: the
    /// others' go on being written).
    pub(super) append_retry_at: u64,
    /// Its last append failed (cleared once one succeeds).
    pub(super) append_failed: bool,
    /// Times this session's log was found deleted or replaced.
    pub(super) replaced: u32,
    /// Its log was deleted by `retain` and it was forgotten: the slot is
    /// free for the next new session (indices elsewhere stay valid).
    pub(super) retired: bool,
    /// Test hook: write this session's records to another file
    /// (`/dev/full` simulates ENOSPC).
    #[cfg(test)]
    pub(super) redirect: Option<PathBuf>,
}

impl Session {
    pub(super) fn new(meta: SessionMeta, path: PathBuf) -> Session {
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

    pub(super) fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    pub(super) fn write_path(&self) -> &Path {
        #[cfg(test)]
        if let Some(p) = &self.redirect {
            return p;
        }
        &self.path
    }

    pub(super) fn note_pane(&mut self, pane: &str) {
        // The common case is the pane that wrote last.
        if self.meta.panes.last().is_some_and(|p| p == pane) || pane.is_empty() {
            return;
        }
        if !self.meta.panes.iter().any(|p| p == pane) {
            self.meta.panes.push(pane.to_string());
        }
    }

    /// Returns buffer space once written bytes pile up at the front.
    pub(super) fn reclaim(&mut self) {
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

    pub(super) fn index_entry(&self) -> IndexEntryView<'_> {
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
