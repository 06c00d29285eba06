//! The log writer: every blocking write, fsync and index rename of the
//! session logs, run on a thread of its own so that a stuck disk (a frozen
//! filesystem, a hung NFS mount) stalls the logs, not the event loop.
//!
//! The loop hands over one [`Batch`] at a time (a bounded queue of one:
//! it never sends another before the previous one is [`Done`]); the thread
//! runs it and wakes the loop through a `mio::Waker`. The loop applies the
//! outcome and only then counts the bytes as written, so replies that wait
//! for the log still wait for the disk. Unit tests run the same
//! [`LogWriter`] inline, without a thread.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{LOG_MODE, MAX_OPEN_LOGS};

/// Failed writes after which one batch gives up on the rest (the disk is
/// probably full; trying every session again would only burn time).
const MAX_FAILURES_PER_BATCH: u32 = 8;
/// A batch the writer has not finished after this long counts as stalled
/// (a frozen or hung filesystem): the loop then treats the logs like a
/// failing disk, and replies stop waiting for them.
pub const STALL_AFTER: Duration = Duration::from_secs(1);
/// How often the test stall hook looks at its file.
const STALL_POLL: Duration = Duration::from_millis(10);
/// Test hook: while the file named by this variable exists, the writer
/// thread waits before each batch, as on a frozen filesystem. Read once
/// when the thread starts; unset in production.
pub const STALL_ENV: &str = "COLIBRI_TEST_WRITER_STALL";

/// Bytes for the end of one session's log.
#[derive(Debug)]
pub(super) struct Append {
    pub session: usize,
    pub path: PathBuf,
    /// Truncate the file to this length first (a torn tail).
    pub repair: Option<u64>,
    pub bytes: Vec<u8>,
}

/// One unit of work for the writer, in this order: drop fds, check open
/// logs against their paths, append, fsync, write the index.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub close: Vec<usize>,
    /// Logs whose fd is put down until they are written again (their
    /// sessions have no live pane and nothing buffered).
    pub put_down: Vec<usize>,
    pub check_paths: Vec<(usize, PathBuf)>,
    pub appends: Vec<Append>,
    pub sync: Vec<(usize, PathBuf)>,
    /// `(directory, encoded index)`.
    pub index: Option<(PathBuf, Vec<u8>)>,
    /// Finished sessions' logs to delete if last written before
    /// `retire_before` (`[sessions] retain`).
    pub retire: Vec<(usize, PathBuf)>,
    pub retire_before: Option<SystemTime>,
}

impl Batch {
    pub(super) fn is_empty(&self) -> bool {
        self.close.is_empty()
            && self.put_down.is_empty()
            && self.check_paths.is_empty()
            && self.appends.is_empty()
            && self.sync.is_empty()
            && self.index.is_none()
            && self.retire.is_empty()
    }
}

#[derive(Debug)]
pub(super) struct AppendDone {
    pub session: usize,
    pub written: usize,
    /// The torn tail was cut.
    pub repaired: bool,
    /// The open log had been deleted or replaced: nothing was written.
    pub replaced: bool,
    /// Not attempted (too many failures before it in the batch).
    pub skipped: bool,
    pub error: Option<io::Error>,
    /// The batch's buffer, handed back for reuse.
    pub buf: Vec<u8>,
}

#[derive(Debug, Default)]
pub(super) struct Done {
    pub appends: Vec<AppendDone>,
    pub synced: Vec<(usize, io::Result<()>)>,
    pub index: Option<io::Result<()>>,
    /// Open logs whose path now names another file (or none).
    pub moved: Vec<usize>,
    /// Sessions whose log was deleted for `retain`, or found gone.
    pub retired: Vec<usize>,
}

/// The open log fds, least recently used closed first.
#[derive(Debug, Default)]
pub(super) struct FdCache {
    pub entries: Vec<FdEntry>,
    tick: u64,
    /// `(device, inode)` of logs whose fd was put down while the file
    /// stayed theirs (the LRU, an idle session): a reopen that finds
    /// another file, or none, is a replaced log, not a log to create.
    put_down: HashMap<usize, (u64, u64)>,
}

#[derive(Debug)]
pub(super) struct FdEntry {
    pub session: usize,
    file: File,
    used: u64,
}

impl FdCache {
    /// Whether `session`'s log, whose fd was put down, is no longer the
    /// file at `path` (deleted or replaced meanwhile). Forgets the file.
    fn replaced_while_down(&mut self, session: usize, path: &Path) -> bool {
        let Some((dev, ino)) = self.put_down.remove(&session) else {
            return false;
        };
        match std::fs::metadata(path) {
            Ok(m) => m.dev() != dev || m.ino() != ino,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Closes `session`'s fd, remembering its file for the next open.
    fn put_down(&mut self, session: usize) {
        if let Some(pos) = self.entries.iter().position(|e| e.session == session) {
            let entry = self.entries.swap_remove(pos);
            if let Ok(m) = entry.file.metadata() {
                if m.nlink() > 0 {
                    self.put_down.insert(session, (m.dev(), m.ino()));
                }
            }
        }
    }

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
                        .map(|(_, e)| e.session)
                    {
                        self.put_down(lru);
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

    /// Closes `session`'s fd and forgets its file: the path is to be
    /// opened as it is (after a rotation renamed a new file over it).
    fn close(&mut self, session: usize) {
        self.entries.retain(|e| e.session != session);
        self.put_down.remove(&session);
    }
}

pub(super) fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(LOG_MODE)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Deletes the log at `path` if it was last written before `before`;
/// true if it is gone now (deleted here, or before by someone else).
fn retire_log(path: &Path, before: SystemTime) -> bool {
    match std::fs::metadata(path) {
        Ok(m) if m.modified().is_ok_and(|t| t < before) => match std::fs::remove_file(path) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        },
        Ok(_) => false,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Writes the index to `dir/name` atomically: `tmp_name`, then rename.
/// Readers never see a torn index. It is not fsynced: the index is a cache
/// the logs can rebuild (a corrupt or stale one is ignored at open), and two
/// fsyncs on every heartbeat with activity would block the loop for nothing.
pub(super) fn write_atomic(dir: &Path, name: &str, tmp_name: &str, bytes: &[u8]) -> io::Result<()> {
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
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, dir.join(name))
}

/// Runs batches. Owns the log fds.
#[derive(Debug, Default)]
pub(super) struct LogWriter {
    pub fds: FdCache,
    stall_file: Option<PathBuf>,
    /// Tests: the thread panics on its next batch.
    #[cfg(test)]
    pub(super) panic_on_batch: bool,
}

impl LogWriter {
    pub(super) fn run(&mut self, batch: Batch) -> Done {
        #[cfg(test)]
        if self.panic_on_batch {
            panic!("test: the log writer thread dies with a batch in hand");
        }
        if let Some(f) = &self.stall_file {
            while f.exists() {
                std::thread::sleep(STALL_POLL);
            }
        }
        let mut done = Done::default();
        for s in batch.close {
            self.fds.close(s);
        }
        for s in batch.put_down {
            self.fds.put_down(s);
        }
        for (s, path) in batch.check_paths {
            if self.moved(s, &path) {
                self.fds.close(s);
                done.moved.push(s);
            }
        }
        if let Some(before) = batch.retire_before {
            for (s, path) in batch.retire {
                if retire_log(&path, before) {
                    // The slot may be a new session's next: no fd, no
                    // remembered file.
                    self.fds.close(s);
                    done.retired.push(s);
                }
            }
        }
        let mut failures = 0;
        for a in batch.appends {
            // A moved log gets its `log_replaced` record first.
            let skip = failures >= MAX_FAILURES_PER_BATCH || done.moved.contains(&a.session);
            let d = if skip {
                AppendDone {
                    session: a.session,
                    written: 0,
                    repaired: false,
                    replaced: false,
                    skipped: true,
                    error: None,
                    buf: a.bytes,
                }
            } else {
                self.append(a)
            };
            if d.error.is_some() {
                failures += 1;
            }
            done.appends.push(d);
        }
        for (s, path) in batch.sync {
            if done.retired.contains(&s) {
                // Deleted above: opening it to fsync would create it anew.
                continue;
            }
            let res = match self.fds.peek(s) {
                Some(f) => f.sync_all(),
                None => open_log(&path).and_then(|f| f.sync_all()),
            };
            done.synced.push((s, res));
        }
        if let Some((dir, bytes)) = batch.index {
            done.index = Some(write_atomic(
                &dir,
                super::INDEX_FILE,
                super::INDEX_TMP,
                &bytes,
            ));
        }
        done
    }

    /// Whether session `s`'s open fd no longer is the file at `path`.
    fn moved(&mut self, s: usize, path: &Path) -> bool {
        let Some(file) = self.fds.peek(s) else {
            return false;
        };
        let Ok(open) = file.metadata() else {
            return false;
        };
        let moved = match std::fs::metadata(path) {
            Ok(m) => m.dev() != open.dev() || m.ino() != open.ino(),
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        };
        moved || open.nlink() == 0
    }

    fn append(&mut self, a: Append) -> AppendDone {
        let mut d = AppendDone {
            session: a.session,
            written: 0,
            repaired: false,
            replaced: false,
            skipped: false,
            error: None,
            buf: Vec::new(),
        };
        let result = (|| {
            // A log deleted while its fd was down is noticed as one deleted
            // under an open fd is (below), not created anew unannounced.
            if self.fds.replaced_while_down(a.session, &a.path) {
                d.replaced = true;
                return Ok(());
            }
            let file = self.fds.get(a.session, &a.path)?;
            // fstat only, cheap enough for every write: a log unlinked
            // under the daemon would otherwise swallow every later write.
            if file.metadata().is_ok_and(|m| m.nlink() == 0) {
                d.replaced = true;
                return Ok(());
            }
            if let Some(len) = a.repair {
                file.set_len(len)?;
                d.repaired = true;
            }
            while d.written < a.bytes.len() {
                match file.write(&a.bytes[d.written..]) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => d.written += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            // The next attempt reopens the path.
            self.fds.close(a.session);
            d.error = Some(e);
        }
        if d.replaced {
            self.fds.close(a.session);
        }
        d.buf = a.bytes;
        d
    }
}

/// Batch numbers shared by the loop, the writer and its watchdog.
#[derive(Debug, Default)]
struct Progress {
    /// The last batch the writer finished.
    done: AtomicU64,
    /// The last batch the watchdog found unfinished after [`STALL_AFTER`].
    overdue: AtomicU64,
}

/// The loop's end of a writer thread.
#[derive(Debug)]
pub(super) struct WriterThread {
    tx: Option<SyncSender<Batch>>,
    rx: Receiver<Done>,
    join: Option<std::thread::JoinHandle<()>>,
    /// Tells the watchdog when each batch was sent.
    watch: Option<Sender<(u64, Instant)>>,
    progress: Arc<Progress>,
    sent: u64,
    /// Shared with the watch journal's writer: mio allows one per poll.
    waker: Arc<mio::Waker>,
}

impl WriterThread {
    /// Starts the thread, which takes over `writer` (and its open fds).
    pub(super) fn start(mut writer: LogWriter, waker: mio::Waker) -> io::Result<WriterThread> {
        writer.stall_file = std::env::var_os(STALL_ENV).map(PathBuf::from);
        let waker = Arc::new(waker);
        let progress = Arc::new(Progress::default());
        let (tx, batches) = mpsc::sync_channel::<Batch>(1);
        let (results, rx) = mpsc::channel::<Done>();
        let (watch, sent_at) = mpsc::channel::<(u64, Instant)>();
        let (w_waker, w_progress) = (Arc::clone(&waker), Arc::clone(&progress));
        let join = std::thread::Builder::new()
            .name("colibri-log-writer".into())
            .spawn(move || {
                let mut n = 0;
                while let Ok(batch) = batches.recv() {
                    n += 1;
                    let done = writer.run(batch);
                    w_progress.done.store(n, Ordering::Release);
                    if results.send(done).is_err() {
                        break;
                    }
                    // A failed wake leaves the result to the next wakeup
                    // (the heartbeat at the latest).
                    let _ = w_waker.wake();
                }
            })?;
        let d_progress = Arc::clone(&progress);
        let d_waker = Arc::clone(&waker);
        std::thread::Builder::new()
            .name("colibri-log-watchdog".into())
            .spawn(move || watchdog(&sent_at, &d_progress, &d_waker))?;
        Ok(WriterThread {
            tx: Some(tx),
            rx,
            join: Some(join),
            watch: Some(watch),
            progress,
            sent: 0,
            waker,
        })
    }

    /// True once the batch in flight is overdue (see [`STALL_AFTER`]).
    pub(super) fn stalled(&self) -> bool {
        self.sent > self.progress.done.load(Ordering::Acquire)
            && self.progress.overdue.load(Ordering::Acquire) >= self.sent
    }

    /// Hands a batch over; the loop sends one only after the previous one
    /// is done, so the queue of one is never full.
    pub(super) fn send(&mut self, batch: Batch) -> io::Result<()> {
        let Some(tx) = &self.tx else {
            return Err(io::Error::other("the log writer has stopped"));
        };
        tx.try_send(batch)
            .map_err(|_| io::Error::other("the log writer has stopped or is busy"))?;
        self.sent += 1;
        if let Some(w) = &self.watch {
            let _ = w.send((self.sent, Instant::now()));
        }
        Ok(())
    }

    /// The finished batch, if any.
    pub(super) fn waker(&self) -> Arc<mio::Waker> {
        Arc::clone(&self.waker)
    }

    pub(super) fn try_done(&self) -> Result<Option<Done>, io::Error> {
        match self.rx.try_recv() {
            Ok(d) => Ok(Some(d)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(io::Error::other("the log writer has stopped")),
        }
    }

    /// Waits at most `limit` for the finished batch (shutdown only).
    pub(super) fn wait_done(&self, limit: Duration) -> Option<Done> {
        self.rx.recv_timeout(limit).ok()
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        // Closing the queue ends the thread once its batch is done; a
        // thread stuck on a frozen disk is not waited for.
        self.tx = None;
        self.watch = None;
        if let Some(j) = self.join.take() {
            if j.is_finished() {
                let _ = j.join();
            }
        }
    }
}

/// Wakes the loop when the newest batch sent is not done [`STALL_AFTER`]
/// after it was sent, so that a stuck disk is noticed without a clock read
/// on the loop. Ends when the loop's end is dropped.
fn watchdog(sent_at: &Receiver<(u64, Instant)>, progress: &Progress, waker: &mio::Waker) {
    while let Ok(mut latest) = sent_at.recv() {
        while let Ok(newer) = sent_at.try_recv() {
            latest = newer;
        }
        let (n, at) = latest;
        std::thread::sleep((at + STALL_AFTER).saturating_duration_since(Instant::now()));
        if progress.done.load(Ordering::Acquire) < n {
            progress.overdue.store(n, Ordering::Release);
            let _ = waker.wake();
        }
    }
}
