//! The watch journal: every bus event, stamped, kept on disk so its `seq`
//! survives a restart and a watcher can resume where it left off.
//!
//! Two append-only segments in the state dir, `watch.journal` (current) and
//! `watch.journal.1` (previous): when the current one passes half of
//! `max_bytes` it becomes the previous one (the older previous is deleted),
//! and a previous segment whose newest line is older than `max_age` is
//! deleted. An in-memory ring mirrors what the segments hold, bounded the
//! same way, so a replay never reads the disk on the loop.
//!
//! Writes run on a thread of their own (the pattern of the session store's
//! writer): the loop appends encoded lines to a buffer, hands the buffer
//! over once per wakeup, and the thread wakes the loop when it is written.
//! Until then no reply or watch line leaves ([`Journal::caught_up`]), the
//! same rule as for the session logs, so no client ever holds a `seq` that
//! a crash could hand out again.
//!
//! A line is `{"t":<ms>,"jail":<name or absent>,"ev":<the watch line>}`.
//! A torn last line (a crash mid-write) is cut off at start.

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};

pub const JOURNAL_FILE: &str = "watch.journal";
pub const JOURNAL_PREVIOUS: &str = "watch.journal.1";
/// Holds the journal's id ([`Journal::id`]), one line.
pub const JOURNAL_ID_FILE: &str = "watch.journal.id";
const JOURNAL_ID_TMP: &str = ".watch.journal.id.tmp";
/// Overrides [`DEFAULT_MAX_BYTES`] (bytes); for small hosts and tests.
pub const MAX_BYTES_ENV: &str = "COLIBRID_JOURNAL_BYTES";
pub const DEFAULT_MAX_BYTES: u64 = 8 << 20;
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
const FILE_MODE: u32 = 0o640;
/// How long dropping the journal (shutdown) waits for the writer.
const SETTLE_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    /// The state dir; the segments live directly in it.
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub max_age: Duration,
}

impl JournalConfig {
    pub fn in_dir(dir: &Path) -> JournalConfig {
        let max_bytes = std::env::var(MAX_BYTES_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n >= 1024)
            .unwrap_or(DEFAULT_MAX_BYTES);
        JournalConfig {
            dir: dir.to_path_buf(),
            max_bytes,
            max_age: DEFAULT_MAX_AGE,
        }
    }
}

/// One journaled event, as the ring keeps it for replay.
#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: u64,
    pub at: Timestamp,
    /// The jail of the event's pane, so replay to an agent socket filters
    /// as the live stream does.
    pub jail: Option<String>,
    pub pane: Option<String>,
    /// The watch line, newline included.
    pub frame: Rc<[u8]>,
}

#[derive(Serialize)]
struct LineOut<'a> {
    t: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    jail: Option<&'a str>,
    ev: &'a RawValue,
}

#[derive(Deserialize)]
struct LineIn<'a> {
    t: u64,
    #[serde(default)]
    jail: Option<String>,
    #[serde(borrow)]
    ev: &'a RawValue,
}

#[derive(Deserialize)]
struct EventHead {
    seq: u64,
    #[serde(default)]
    pane: Option<String>,
}

pub struct Journal {
    cfg: JournalConfig,
    ring: VecDeque<Entry>,
    ring_bytes: usize,
    last_seq: u64,
    /// Encoded lines not yet handed to the writer, and the last seq in them.
    pending: Vec<u8>,
    pending_seq: u64,
    /// The last seq handed to the writer.
    submitted_seq: u64,
    writer: Option<WriterHandle>,
    /// Writes run inline until the thread is started (tests, failure).
    inline: Option<SegmentWriter>,
    /// See [`Journal::id`].
    id: String,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("last_seq", &self.last_seq)
            .field("ring", &self.ring.len())
            .finish()
    }
}

struct WriterHandle {
    tx: Option<Sender<(Vec<u8>, u64)>>,
    written: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Journal {
    /// Reads what the segments hold (cutting a torn last line), fills the
    /// ring and takes up the numbering after the last journaled event.
    pub fn open(cfg: JournalConfig, now: Timestamp) -> Journal {
        let mut j = Journal {
            ring: VecDeque::new(),
            ring_bytes: 0,
            last_seq: 0,
            pending: Vec::new(),
            pending_seq: 0,
            submitted_seq: 0,
            writer: None,
            inline: None,
            id: String::new(),
            cfg,
        };
        for name in [JOURNAL_PREVIOUS, JOURNAL_FILE] {
            let path = j.cfg.dir.join(name);
            if let Err(e) = j.load(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    log_warn!("watch journal {}: {e}", path.display());
                }
            }
        }
        j.trim(now);
        j.id = journal_id(&j.cfg.dir, j.last_seq);
        j.pending_seq = j.last_seq;
        j.submitted_seq = j.last_seq;
        j.inline = Some(SegmentWriter::new(j.cfg.clone()));
        if j.last_seq > 0 {
            log_info!(
                "watch journal: {} event(s) kept, numbering goes on after seq {}",
                j.ring.len(),
                j.last_seq
            );
        }
        j
    }

    fn load(&mut self, path: &Path) -> io::Result<()> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut reader = BufReader::new(&file);
        let mut good_len: u64 = 0;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // Torn by a crash mid-write: cut, so the next append
                // starts a line of its own.
                file.set_len(good_len)?;
                log_warn!("watch journal {}: cut a torn last line", path.display());
                break;
            }
            good_len += n as u64;
            if let Some(e) = parse_line(&line) {
                if e.seq > MAX_SEQ {
                    // Only a hand edit gets here (2^63 events is some
                    // 290,000 years at a million a second); numbering on
                    // from it would overflow.
                    log_warn!(
                        "watch journal {}: skipped an event with seq {} (past 2^63)",
                        path.display(),
                        e.seq
                    );
                    continue;
                }
                if e.seq > self.last_seq {
                    self.last_seq = e.seq;
                    self.push(e);
                }
            }
        }
        Ok(())
    }

    /// The bytes the journal keeps before it forgets its oldest events.
    pub fn max_bytes(&self) -> u64 {
        self.cfg.max_bytes
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Names this numbering of `seq`. A `seq` alone is not unique for good:
    /// an emptied journal (a reset state dir, or every segment aged out
    /// while colibrid was down) numbers from 1 again. The id is minted
    /// exactly then and kept in [`JOURNAL_ID_FILE`] otherwise, so
    /// `(id, seq)` never names two events.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The oldest seq a replay can start at: everything from it up to
    /// [`Journal::last_seq`] is held.
    pub fn first_seq(&self) -> u64 {
        self.ring.front().map_or(self.last_seq + 1, |e| e.seq)
    }

    /// Moves the writes to their own thread, waking the loop through
    /// `waker` when a batch is on disk.
    pub fn start_writer(&mut self, waker: Arc<mio::Waker>) -> io::Result<()> {
        let Some(seg) = self.inline.take() else {
            return Ok(());
        };
        let written = Arc::new(AtomicU64::new(self.submitted_seq));
        let (tx, rx) = mpsc::channel::<(Vec<u8>, u64)>();
        let w = Arc::clone(&written);
        let spawned = std::thread::Builder::new()
            .name("colibrid-journal".into())
            .spawn(move || {
                let mut seg = seg;
                while let Ok((bytes, upto)) = rx.recv() {
                    seg.write(&bytes);
                    w.store(upto, Ordering::Release);
                    let _ = waker.wake();
                }
            });
        match spawned {
            Ok(thread) => {
                self.writer = Some(WriterHandle {
                    tx: Some(tx),
                    written,
                    thread: Some(thread),
                });
                Ok(())
            }
            Err(e) => {
                self.inline = Some(SegmentWriter::new(self.cfg.clone()));
                Err(e)
            }
        }
    }

    /// Records an event: into the ring at once, onto disk at the next
    /// [`Journal::submit`].
    pub fn append(&mut self, seq: u64, at: Timestamp, jail: Option<&str>, frame: Rc<[u8]>) {
        let body = frame.strip_suffix(b"\n").unwrap_or(&frame);
        let encoded = std::str::from_utf8(body)
            .ok()
            .and_then(|s| serde_json::from_str::<&RawValue>(s).ok())
            .and_then(|ev| {
                serde_json::to_vec(&LineOut {
                    t: at.as_millis(),
                    jail,
                    ev,
                })
                .ok()
            });
        match encoded {
            Some(line) => {
                self.pending.extend_from_slice(&line);
                self.pending.push(b'\n');
            }
            None => log_warn!("watch journal: cannot encode event {seq}"),
        }
        self.pending_seq = seq;
        self.last_seq = seq;
        let pane = serde_json::from_slice::<EventHead>(body)
            .ok()
            .and_then(|h| h.pane);
        self.push(Entry {
            seq,
            at,
            jail: jail.map(str::to_string),
            pane,
            frame,
        });
        self.trim(at);
    }

    fn push(&mut self, e: Entry) {
        self.ring_bytes += e.frame.len();
        self.ring.push_back(e);
    }

    /// Drops what the disk no longer holds either: the ring keeps at most
    /// `max_bytes` and nothing older than `max_age`.
    fn trim(&mut self, now: Timestamp) {
        let max = usize::try_from(self.cfg.max_bytes).unwrap_or(usize::MAX);
        while let Some(front) = self.ring.front() {
            let too_big = self.ring_bytes > max;
            let too_old = now.since(front.at) > self.cfg.max_age;
            if !too_big && !too_old {
                break;
            }
            self.ring_bytes -= front.frame.len();
            self.ring.pop_front();
        }
    }

    /// Hands what was appended since the last call to the writer (or
    /// writes it inline without one).
    pub fn submit(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.pending);
        let upto = self.pending_seq;
        if let Some(w) = &self.writer {
            if let Some(tx) = &w.tx {
                if tx.send((bytes, upto)).is_ok() {
                    self.submitted_seq = upto;
                    return;
                }
            }
            // The thread is gone: nothing is written any more, but the
            // watchers must not wait for it forever.
            log_warn!("watch journal writer stopped; events are no longer journaled");
            self.writer = None;
            self.inline = Some(SegmentWriter::new(self.cfg.clone()));
            return;
        }
        if let Some(seg) = &mut self.inline {
            seg.write(&bytes);
        }
        self.submitted_seq = upto;
    }

    /// Everything appended is on disk (or failed and was given up on).
    pub fn caught_up(&self) -> bool {
        if !self.pending.is_empty() {
            return false;
        }
        match &self.writer {
            Some(w) => w.written.load(Ordering::Acquire) >= self.submitted_seq,
            None => true,
        }
    }

    /// Every event up to this seq is on disk (all of them once caught up):
    /// a frame reporting events up to it may leave.
    pub fn journaled_through(&self) -> u64 {
        if self.caught_up() {
            return u64::MAX;
        }
        match &self.writer {
            Some(w) => w.written.load(Ordering::Acquire),
            None => self.submitted_seq,
        }
    }

    /// The index of the first held event with `seq >= from`.
    pub fn position(&self, from: u64) -> usize {
        self.ring.partition_point(|e| e.seq < from)
    }

    pub fn get(&self, index: usize) -> Option<&Entry> {
        self.ring.get(index)
    }

    /// The approvals (pane id, approval id) whose last event the journal
    /// holds opened or escalated them: what its watchers last heard of
    /// them is that they wait for an answer.
    pub fn open_approvals(&self) -> HashSet<(String, String)> {
        let mut open = HashSet::new();
        for e in &self.ring {
            if memchr::memmem::find(&e.frame, b"\"approval_").is_none() {
                continue;
            }
            let Ok(ev) = serde_json::from_slice::<ApprovalFrame<'_>>(&e.frame) else {
                continue;
            };
            let Some(pane) = ev.pane else { continue };
            let id = match ev.approval {
                Some(ApprovalField::Id(id)) => id,
                Some(ApprovalField::Object { id }) => id,
                None => continue,
            };
            let key = (pane.into_owned(), id.into_owned());
            match ev.event.as_ref() {
                "approval_opened" | "approval_escalated" => {
                    open.insert(key);
                }
                "approval_answered" | "approval_expired" => {
                    open.remove(&key);
                }
                _ => {}
            }
        }
        open
    }
}

/// The id kept in `dir` when the journal goes on numbering after
/// `last_seq`, else (numbering starts at 1, or no usable id is kept, as
/// after an upgrade from a colibrid that had none) a new one, written
/// down. If it cannot be written it still names this run's numbering; the
/// next run mints another, which costs a fleet re-publish, never a clash.
fn journal_id(dir: &Path, last_seq: u64) -> String {
    let path = dir.join(JOURNAL_ID_FILE);
    if last_seq > 0 {
        match fs::read_to_string(&path) {
            Ok(text) if valid_journal_id(text.trim()) => return text.trim().to_string(),
            Ok(_) => log_warn!("{}: not a journal id; minting a new one", path.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log_warn!("{}: {e}; minting a new journal id", path.display()),
        }
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    if let Err(e) = write_id(dir, &id) {
        log_warn!("cannot write {}: {e}", path.display());
    }
    id
}

fn valid_journal_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Temp file, fsync, rename: a crash leaves the old id or the new one.
fn write_id(dir: &Path, id: &str) -> io::Result<()> {
    let tmp = dir.join(JOURNAL_ID_TMP);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)?;
    f.write_all(format!("{id}\n").as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(JOURNAL_ID_FILE))
}

/// The fields of an approval watch line that [`Journal::open_approvals`]
/// reads.
#[derive(Deserialize)]
struct ApprovalFrame<'a> {
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(borrow, default)]
    pane: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    approval: Option<ApprovalField<'a>>,
}

/// `approval`: the approval itself (`approval_opened`), or its id.
#[derive(Deserialize)]
#[serde(untagged)]
enum ApprovalField<'a> {
    Id(#[serde(borrow)] Cow<'a, str>),
    Object {
        #[serde(borrow)]
        id: Cow<'a, str>,
    },
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.submit();
        let Some(mut w) = self.writer.take() else {
            return;
        };
        // Closing the channel ends the thread once the queue is written.
        w.tx = None;
        let deadline = Instant::now() + SETTLE_WAIT;
        while w.written.load(Ordering::Acquire) < self.submitted_seq {
            if Instant::now() > deadline {
                log_warn!("watch journal writer did not finish within 2 s; the tail may be lost");
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(t) = w.thread.take() {
            let _ = t.join();
        }
    }
}

/// The largest seq a journal line may carry to be replayed.
const MAX_SEQ: u64 = 1 << 63;

fn parse_line(line: &[u8]) -> Option<Entry> {
    let rec: LineIn<'_> = serde_json::from_slice(line).ok()?;
    let head: EventHead = serde_json::from_str(rec.ev.get()).ok()?;
    let mut frame = rec.ev.get().as_bytes().to_vec();
    frame.push(b'\n');
    Some(Entry {
        seq: head.seq,
        at: Timestamp::from_millis(rec.t),
        jail: rec.jail,
        pane: head.pane,
        frame: Rc::from(frame),
    })
}

/// The disk side: appends to the current segment, rotates it at half the
/// size bound, and deletes a previous segment past the age bound.
struct SegmentWriter {
    cfg: JournalConfig,
    file: Option<File>,
    size: u64,
    failing: bool,
}

impl SegmentWriter {
    fn new(cfg: JournalConfig) -> SegmentWriter {
        SegmentWriter {
            cfg,
            file: None,
            size: 0,
            failing: false,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        match self.try_write(bytes) {
            Ok(()) => {
                if self.failing {
                    log_info!("watch journal writes succeed again");
                    self.failing = false;
                }
            }
            Err(e) => {
                self.file = None;
                if !self.failing {
                    log_warn!("watch journal write failed ({e}); those events cannot be replayed");
                    self.failing = true;
                }
            }
        }
    }

    fn try_write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let current = self.cfg.dir.join(JOURNAL_FILE);
        if self.size >= self.cfg.max_bytes / 2 && self.file.is_some() {
            self.file = None;
            fs::rename(&current, self.cfg.dir.join(JOURNAL_PREVIOUS))?;
        }
        self.expire_previous();
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(FILE_MODE)
                .custom_flags(libc::O_CLOEXEC)
                .open(&current)?;
            self.size = f.metadata()?.len();
            self.file = Some(f);
        }
        if let Some(f) = &mut self.file {
            f.write_all(bytes)?;
            self.size += bytes.len() as u64;
        }
        Ok(())
    }

    fn expire_previous(&self) {
        let previous = self.cfg.dir.join(JOURNAL_PREVIOUS);
        let Ok(modified) = fs::metadata(&previous).and_then(|m| m.modified()) else {
            return;
        };
        let old = modified
            .elapsed()
            .map(|age| age > self.cfg.max_age)
            .unwrap_or(false);
        if old {
            let _ = fs::remove_file(previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn cfg(dir: &Path, max_bytes: u64) -> JournalConfig {
        JournalConfig {
            dir: dir.to_path_buf(),
            max_bytes,
            max_age: Duration::from_secs(3600),
        }
    }

    fn frame(seq: u64) -> Rc<[u8]> {
        Rc::from(
            format!("{{\"seq\":{seq},\"at\":\"x\",\"event\":\"paused\",\"pane\":\"p{seq}\"}}\n")
                .into_bytes(),
        )
    }

    #[test]
    fn numbering_and_events_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        {
            let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
            for s in 1..=5 {
                j.append(s, t, if s == 3 { Some("j1") } else { None }, frame(s));
            }
            j.submit();
            assert!(j.caught_up());
        }
        let j = Journal::open(cfg(dir.path(), 1 << 20), t);
        assert_eq!(j.last_seq(), 5);
        assert_eq!(j.first_seq(), 1);
        let third = j.get(j.position(3)).expect("seq 3 held");
        assert_eq!(third.seq, 3);
        assert_eq!(third.jail.as_deref(), Some("j1"));
        assert_eq!(third.pane.as_deref(), Some("p3"));
        assert_eq!(&*third.frame, &*frame(3));
    }

    fn journal_with_events(dir: &Path, t: Timestamp, upto: u64) -> String {
        let mut j = Journal::open(cfg(dir, 1 << 20), t);
        for s in j.last_seq() + 1..=upto {
            j.append(s, t, None, frame(s));
        }
        j.submit();
        assert!(j.caught_up());
        j.id().to_string()
    }

    #[test]
    fn the_journal_id_lasts_as_long_as_its_numbering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        let first = journal_with_events(dir.path(), t, 3);
        assert!(valid_journal_id(&first), "{first}");
        // Numbering goes on after seq 3: same id.
        assert_eq!(journal_with_events(dir.path(), t, 5), first);
        let kept = fs::read_to_string(dir.path().join(JOURNAL_ID_FILE)).expect("id file");
        assert_eq!(kept.trim(), first);
        // Emptied journal (a reset state dir keeps nothing else): seq
        // starts over at 1, so the id must change.
        for name in [JOURNAL_FILE, JOURNAL_PREVIOUS] {
            let _ = fs::remove_file(dir.path().join(name));
        }
        let j = Journal::open(cfg(dir.path(), 1 << 20), t);
        assert_eq!(j.last_seq(), 0);
        assert_ne!(j.id(), first);
    }

    #[test]
    fn a_journal_without_a_usable_id_file_gets_one_that_then_lasts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        let first = journal_with_events(dir.path(), t, 2);
        // An older colibrid's state dir, or a hand-edited file.
        fs::write(dir.path().join(JOURNAL_ID_FILE), "Not An Id!\n").expect("write");
        let second = journal_with_events(dir.path(), t, 4);
        assert_ne!(second, first);
        fs::remove_file(dir.path().join(JOURNAL_ID_FILE)).expect("remove");
        let third = journal_with_events(dir.path(), t, 6);
        assert_ne!(third, second);
        assert_eq!(journal_with_events(dir.path(), t, 7), third);
    }

    #[test]
    fn a_seq_past_two_to_the_63_is_skipped_so_numbering_cannot_wrap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        {
            let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
            for s in [1, 2, u64::MAX] {
                j.append(s, t, None, frame(s));
            }
            j.submit();
            assert!(j.caught_up());
        }
        let j = Journal::open(cfg(dir.path(), 1 << 20), t);
        assert_eq!(j.last_seq(), 2);
        assert_eq!(j.first_seq(), 1);
    }

    #[test]
    fn open_approvals_are_those_last_opened_or_escalated_after_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        let lines = [
            r#"{"seq":1,"at":"x","event":"approval_opened","pane":"p1","approval":{"id":"p1-1","kind":"confirm"}}"#,
            r#"{"seq":2,"at":"x","event":"approval_opened","pane":"p1","approval":{"id":"p1-2","kind":"confirm"}}"#,
            r#"{"seq":3,"at":"x","event":"approval_opened","pane":"p2","approval":{"id":"p2-1","kind":"confirm"}}"#,
            r#"{"seq":4,"at":"x","event":"approval_answered","pane":"p1","approval":"p1-1","decision":"approve","by":"operator"}"#,
            r#"{"seq":5,"at":"x","event":"approval_escalated","pane":"p1","approval":"p1-2","pending_ms":60000}"#,
            r#"{"seq":6,"at":"x","event":"approval_expired","pane":"p2","approval":"p2-1","reason":"exited"}"#,
            r#"{"seq":7,"at":"x","event":"approval_opened","pane":"p3","approval":{"id":"p3-1","kind":"input"}}"#,
            r#"{"seq":8,"at":"x","event":"paused","pane":"p3","approval_count":1}"#,
            r#"{"seq":9,"at":"x","event":"approval_answered","pane":"p9","approval":"p3-1","decision":"approve","by":"operator"}"#,
        ];
        {
            let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
            for (i, l) in lines.iter().enumerate() {
                j.append(
                    i as u64 + 1,
                    t,
                    None,
                    Rc::from(format!("{l}\n").into_bytes()),
                );
            }
            j.submit();
        }
        let j = Journal::open(cfg(dir.path(), 1 << 20), t);
        let open: BTreeSet<(String, String)> = j.open_approvals().into_iter().collect();
        // p1-1 answered and p2-1 expired are closed; p1-2 is open (its
        // escalation says it still waits); another pane's answer with the
        // same id does not close p3-1.
        let want: BTreeSet<(String, String)> = [("p1", "p1-2"), ("p3", "p3-1")]
            .iter()
            .map(|(p, a)| (p.to_string(), a.to_string()))
            .collect();
        assert_eq!(open, want);
    }

    #[test]
    fn a_torn_last_line_is_cut_and_appends_start_a_new_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        {
            let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
            j.append(1, t, None, frame(1));
            j.submit();
        }
        let path = dir.path().join(JOURNAL_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(b"{\"t\":1,\"ev\":{\"seq\":2").expect("tear");
        drop(f);
        {
            let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
            assert_eq!(j.last_seq(), 1);
            j.append(2, t, None, frame(2));
            j.submit();
        }
        let j = Journal::open(cfg(dir.path(), 1 << 20), t);
        assert_eq!(j.last_seq(), 2);
        assert_eq!(j.first_seq(), 1);
    }

    #[test]
    fn the_size_bound_rotates_and_forgets_the_oldest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        let max = 4096;
        {
            let mut j = Journal::open(cfg(dir.path(), max), t);
            for s in 1..=400 {
                j.append(s, t, None, frame(s));
                j.submit();
            }
            assert!(j.first_seq() > 1, "the ring forgot the oldest");
            assert_eq!(j.last_seq(), 400);
        }
        let on_disk: u64 = [JOURNAL_FILE, JOURNAL_PREVIOUS]
            .iter()
            .filter_map(|n| fs::metadata(dir.path().join(n)).ok())
            .map(|m| m.len())
            .sum();
        assert!(on_disk <= max + 512, "journal holds {on_disk} bytes");
        let j = Journal::open(cfg(dir.path(), max), t);
        assert_eq!(j.last_seq(), 400);
        assert!(j.first_seq() > 1);
    }

    #[test]
    fn events_past_the_age_bound_are_dropped_from_the_ring() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Timestamp::from_millis(1_000_000);
        let mut j = Journal::open(cfg(dir.path(), 1 << 20), t);
        j.append(1, t, None, frame(1));
        let later = t.plus(Duration::from_secs(7200));
        j.append(2, later, None, frame(2));
        assert_eq!(j.first_seq(), 2);
        assert_eq!(j.last_seq(), 2);
    }
}
