//! The control plane for agents: the task queue, its journal, the
//! acknowledgement deadline, and the budget view `state` reports.
//!
//! The queue is `core::tasks::TaskQueue` (pure). Each change is a
//! `TaskEvent`, appended to `<state_dir>/tasks.jsonl` and replayed through
//! the same `TaskQueue::apply` at start, so the queue survives restarts.
//! The journal is written by its own thread (`colibri-task-journal`): the
//! loop never calls `write` or `fsync` on it, so a frozen filesystem cannot
//! stop supervision (the log writer's rule). The loop hands each line over
//! and counts the bytes not yet written; the thread writes what has come
//! and `fdatasync`s once per batch (a burst of changes is one sync, not
//! one each). No line is dropped: a failed write is retried (after a
//! newline that ends whatever part of a line reached the file) until it
//! succeeds, and while more than [`JOURNAL_BEHIND_MAX`] bytes wait, changes
//! to the queue are refused with `busy` instead of being taken and lost.
//! A change reaches the journal after its reply has left: a crash in
//! between loses that change (a lost claim is simply claimable again).
//!
//! The claim handshake's deadline is one kernel timer (`Source::TaskAck`)
//! armed for the earliest unacknowledged claim.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Registry, Token};

use crate::core::dispatch::Dispatcher;
use crate::core::dispatch_replay::{JournalLine, PlanLine, PlanRecord, RunnersRecord};
use crate::core::tasks::{TaskEvent, TaskQueue};
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_error, log_info, log_warn};
use crate::platform::KernelTimer;
use crate::protocol::control_plane::WireBudget;
use crate::protocol::WatchKind;

/// Bytes handed to the journal's writer and not yet written past which
/// changes to the queue are refused (`busy`): the loop's memory stays
/// bounded while the disk is slow or failing.
pub const JOURNAL_BEHIND_MAX: usize = 16 << 20;
/// The most the writer puts in one write and sync.
const JOURNAL_BATCH: usize = 1 << 20;
/// How long a failed write waits before it is tried again.
const JOURNAL_RETRY: Duration = Duration::from_millis(500);
/// How long an orderly stop waits for the journal's last lines.
const JOURNAL_DRAIN: Duration = Duration::from_secs(2);
/// Test hook, read once at start: the acknowledgement window in ms.
pub const ACK_TIMEOUT_ENV: &str = "COLIBRI_TEST_TASK_ACK_TIMEOUT_MS";
/// Test hook, read once at start: a slow disk, this many ms a batch.
pub const JOURNAL_DELAY_ENV: &str = "COLIBRI_TEST_TASK_JOURNAL_DELAY_MS";
/// Finished tasks kept (the last to finish): the rest are forgotten, in
/// memory once twice this many have finished, and in the journal, which
/// is compacted to the queue's own events at start.
pub const FINISHED_TASKS_KEPT: usize = 1000;

/// An agent's budget standing as `state` reports it (from the policy
/// engine's ledgers, see `commands/control_plane.rs::governed_budget`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BudgetView {
    pub daily: u64,
    pub spent: u64,
    pub remaining: u64,
    pub exceeded: bool,
}

impl BudgetView {
    /// A ledger's cap and spend, in whole tokens; exceeded once spent up
    /// or paused by it.
    pub fn of(cap: f64, spent: f64, paused: bool) -> BudgetView {
        BudgetView {
            daily: cap.max(0.0) as u64,
            spent: spent.max(0.0) as u64,
            remaining: (cap - spent).max(0.0) as u64,
            exceeded: paused || spent >= cap,
        }
    }
}

pub fn wire_budget(view: Option<BudgetView>) -> WireBudget {
    match view {
        None => WireBudget::default(),
        Some(b) => WireBudget {
            configured: true,
            daily_tokens: Some(b.daily),
            spent_today: Some(b.spent),
            remaining: Some(b.remaining),
            hard_limit_exceeded: b.exceeded,
        },
    }
}

/// The journal's writer thread and the sending end of its queue.
struct Journal {
    tx: Option<Sender<Vec<u8>>>,
    /// Bytes sent and not yet written.
    behind: Arc<AtomicUsize>,
    /// Set when the daemon stops: a failing write is then given up.
    closing: Arc<AtomicBool>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Journal {
    fn start(path: PathBuf, delay: Duration) -> io::Result<Journal> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let (done_tx, done) = mpsc::channel();
        let behind = Arc::new(AtomicUsize::new(0));
        let closing = Arc::new(AtomicBool::new(false));
        let writer = JournalWriter {
            file,
            path,
            rx,
            behind: Arc::clone(&behind),
            closing: Arc::clone(&closing),
            delay,
            mid_line: false,
        };
        let thread = std::thread::Builder::new()
            .name("colibri-task-journal".into())
            .spawn(move || {
                writer.run();
                let _ = done_tx.send(());
            })?;
        Ok(Journal {
            tx: Some(tx),
            behind,
            closing,
            done,
            thread: Some(thread),
        })
    }
}

/// The writer thread's side of the journal.
struct JournalWriter {
    file: File,
    path: PathBuf,
    rx: Receiver<Vec<u8>>,
    behind: Arc<AtomicUsize>,
    closing: Arc<AtomicBool>,
    /// [`JOURNAL_DELAY_ENV`]: zero but in tests.
    delay: Duration,
    /// The file ends inside a line (a batch given up part way).
    mid_line: bool,
}

impl JournalWriter {
    fn run(mut self) {
        let mut batch = Vec::new();
        while let Ok(first) = self.rx.recv() {
            batch.clear();
            batch.extend_from_slice(&first);
            // Whatever else has come joins the same write and sync.
            while batch.len() < JOURNAL_BATCH {
                match self.rx.try_recv() {
                    Ok(line) => batch.extend_from_slice(&line),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.write(&batch);
            if !self.delay.is_zero() {
                std::thread::sleep(self.delay);
            }
            self.behind.fetch_sub(batch.len(), Ordering::AcqRel);
        }
    }

    /// Writes and syncs `batch`, retrying until it succeeds or the daemon
    /// stops. A failed write(2) wrote nothing, so a retry goes on from the
    /// bytes that did reach the file: no line is written twice. A failed
    /// sync writes the whole batch again: the kernel may have dropped the
    /// pages whose writeback failed and still report the next sync clean
    /// (Linux does), so its lines may be replayed twice rather than lost.
    fn write(&mut self, batch: &[u8]) {
        let mut written = 0;
        let mut failed = false;
        loop {
            let result = self.append(batch, &mut written).and_then(|()| {
                self.file.sync_data().inspect_err(|_| {
                    written = 0;
                })
            });
            match result {
                Ok(()) => {
                    if failed {
                        log_info!("task journal {}: written again", self.path.display());
                    }
                    return;
                }
                Err(e) if self.closing.load(Ordering::Acquire) => {
                    log_error!(
                        "task journal {}: {e}; {} byte(s) of task changes not written",
                        self.path.display(),
                        batch.len() - written
                    );
                    return;
                }
                Err(e) => {
                    if !failed {
                        log_warn!(
                            "task journal {}: {e}; retrying (task changes are refused once {} MiB wait)",
                            self.path.display(),
                            JOURNAL_BEHIND_MAX >> 20
                        );
                    }
                    failed = true;
                    std::thread::sleep(JOURNAL_RETRY);
                }
            }
        }
    }

    /// Appends `batch[*written..]`. Starting a batch, a line an earlier
    /// batch's give-up at shutdown left cut (`mid_line`) is ended first, so
    /// the batch's first line starts its own.
    fn append(&mut self, batch: &[u8], written: &mut usize) -> io::Result<()> {
        if self.mid_line && *written == 0 {
            self.file.write_all(b"\n")?;
            self.mid_line = false;
        }
        while *written < batch.len() {
            match self.file.write(&batch[*written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    *written += n;
                    self.mid_line = batch[*written - 1] != b'\n';
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Drop for Journal {
    /// Closes the queue and waits (boundedly) for the lines already in it.
    fn drop(&mut self) {
        self.tx = None;
        self.closing.store(true, Ordering::Release);
        if self.done.recv_timeout(JOURNAL_DRAIN).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        } else {
            log_warn!(
                "the task journal did not drain in {JOURNAL_DRAIN:?}; {} byte(s) of task changes may be lost",
                self.behind.load(Ordering::Acquire)
            );
        }
    }
}

pub struct ControlPlane {
    pub queue: TaskQueue,
    pub ack_timeout: Duration,
    /// [`ACK_TIMEOUT_ENV`] was set: it wins over the configuration.
    ack_from_env: bool,
    /// The orchestrator's hold-offs (`core::dispatch`).
    pub dispatcher: Dispatcher,
    /// Each climbing agent's place on the escalation ladder, by pane id
    /// (`core::escalation`); dropped when it works again or is removed.
    pub ladders: std::collections::HashMap<String, crate::core::escalation::Ladder>,
    /// The ladder's open decide items: approval id to pane id. Only the
    /// operator answers them; the answer is carried out once the approval
    /// has closed (`decided`).
    pub decide_items: std::collections::HashMap<String, String>,
    /// Decide items answered and not yet carried out: pane id, whether
    /// the answer was to let it go on, and who answered.
    pub decided: Vec<(String, bool, String)>,
    /// The agents started at colibrid's start, left alone until the time
    /// given (`orchestrator.grace`); `None` once it has passed.
    grace: Option<(Timestamp, std::collections::HashSet<String>)>,
    /// colibrid is starting its agents: nobody is given anything yet.
    pub starting: bool,
    /// Each task source's last read error, said once until it changes.
    pub source_errors: std::collections::HashMap<PathBuf, String>,
    /// The project's plan files the last scan found: only these (and the
    /// named `plan_file`) are ever ticked or rewritten.
    pub scanned_plans: std::collections::HashSet<PathBuf>,
    /// The last dispatch and runners plans journalled, their times zeroed.
    last_plan: Option<PlanRecord>,
    last_runners: Option<RunnersRecord>,
    /// Roles whose runner failed to start an agent, and until when no
    /// other start is tried (`daemon::runners`).
    pub runner_holdoff: std::collections::HashMap<String, Timestamp>,
    /// A runner step is being carried out: a spawn dispatches, and the
    /// dispatch must not plan runners again under it.
    pub running_runners: bool,
    journal: Option<Journal>,
    timer: Option<(KernelTimer, Token)>,
    armed: Option<Timestamp>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("tasks", &self.queue.iter().count())
            .field("ack_timeout", &self.ack_timeout)
            .finish()
    }
}

impl ControlPlane {
    /// Replays `<state_dir>/tasks.jsonl` and starts its writer. Runs once
    /// before the loop; a journal that cannot be opened leaves the queue
    /// in memory only (and says so).
    pub fn open(state_dir: &Path, ack_timeout: Duration) -> ControlPlane {
        let path = state_dir.join("tasks.jsonl");
        let mut queue = TaskQueue::new();
        let (applied, skipped, mut torn) = replay(&path, &mut queue);
        if applied > 0 || skipped > 0 {
            log_info!(
                "task journal: {applied} event(s) replayed, {skipped} unreadable line(s) skipped"
            );
        }
        let forgotten = queue.forget_finished(FINISHED_TASKS_KEPT);
        let events = queue.events();
        // A journal of mostly forgotten or superseded events is rewritten
        // as the queue's own; one that cannot be stays as it is (it
        // replays to the same queue, only longer).
        if forgotten > 0 || applied + skipped > 2 * events.len() + 100 {
            match compact_journal(&path, &events) {
                Ok(()) => {
                    torn = false;
                    log_info!(
                        "task journal: compacted to {} event(s) ({forgotten} finished task(s) forgotten, {FINISHED_TASKS_KEPT} kept)",
                        events.len()
                    );
                }
                Err(e) => log_warn!("task journal {}: not compacted: {e}", path.display()),
            }
        }
        let delay = std::env::var(JOURNAL_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        let journal = match Journal::start(path.clone(), delay) {
            Ok(j) => Some(j),
            Err(e) => {
                log_warn!("cannot open the task journal {}: {e}", path.display());
                None
            }
        };
        let from_env = std::env::var(ACK_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        let mut cp = ControlPlane {
            queue,
            ack_timeout: from_env.unwrap_or(ack_timeout),
            ack_from_env: from_env.is_some(),
            dispatcher: Dispatcher::default(),
            ladders: Default::default(),
            decide_items: Default::default(),
            decided: Vec::new(),
            grace: None,
            starting: false,
            source_errors: Default::default(),
            scanned_plans: Default::default(),
            last_plan: None,
            last_runners: None,
            runner_holdoff: Default::default(),
            running_runners: false,
            journal,
            timer: None,
            armed: None,
        };
        if torn {
            // End the torn line, so the next event starts a line of its own.
            cp.send(b"\n".to_vec());
        }
        cp
    }

    /// The agents `panes` came up with colibrid: left alone until `until`.
    pub(crate) fn start_grace(
        &mut self,
        until: Timestamp,
        panes: std::collections::HashSet<String>,
    ) {
        self.starting = false;
        self.grace = (!panes.is_empty()).then_some((until, panes));
    }

    /// The agents in their start's grace period at `now`, if any
    /// (forgetting the grace once it has passed).
    pub(crate) fn in_grace(
        &mut self,
        now: Timestamp,
    ) -> Option<&std::collections::HashSet<String>> {
        if self.grace.as_ref().is_some_and(|(until, _)| now >= *until) {
            self.grace = None;
        }
        self.grace.as_ref().map(|(_, panes)| panes)
    }

    /// A reload's `orchestrator.ack_timeout` (the test hook still wins).
    /// Claims already made keep their deadline.
    pub(crate) fn set_ack_timeout(&mut self, ack_timeout: Duration) {
        if !self.ack_from_env {
            self.ack_timeout = ack_timeout;
        }
    }

    pub(crate) fn record(&mut self, ev: &TaskEvent) {
        let mut line = match serde_json::to_vec(ev) {
            Ok(l) => l,
            Err(e) => {
                log_warn!("cannot encode a task event: {e}");
                return;
            }
        };
        line.push(b'\n');
        self.send(line);
    }

    /// Journals a run of the dispatch plan (`core::dispatch_replay`).
    /// A plan the same as the last one journalled (its hand-overs failed,
    /// say, an agent's input full) is not journalled again: it would add
    /// a record per heartbeat for as long as it repeats.
    pub(crate) fn record_plan(&mut self, record: PlanRecord) {
        let again = PlanRecord {
            at: 0,
            ..record.clone()
        };
        if self.last_plan.as_ref() == Some(&again) {
            return;
        }
        self.last_plan = Some(again);
        self.record_line(&PlanLine::Planned(record));
    }

    /// Journals a run of the runners' plan.
    /// As [`ControlPlane::record_plan`]: a runner whose start keeps failing
    /// plans the same start each minute, journalled once.
    pub(crate) fn record_runners(&mut self, record: RunnersRecord) {
        let again = RunnersRecord {
            at: 0,
            ..record.clone()
        };
        if self.last_runners.as_ref() == Some(&again) {
            return;
        }
        self.last_runners = Some(again);
        self.record_line(&PlanLine::Runners(record));
    }

    /// Journals what the escalation ladder saw or did (`stuck`,
    /// `productive`, `ladder_resumed`).
    pub(crate) fn record_ladder(&mut self, line: PlanLine) {
        self.record_line(&line);
    }

    fn record_line(&mut self, line: &PlanLine) {
        match serde_json::to_vec(line) {
            Ok(mut line) => {
                line.push(b'\n');
                self.send(line);
            }
            Err(e) => log_warn!("cannot encode an orchestrator plan: {e}"),
        }
    }

    fn send(&mut self, line: Vec<u8>) {
        let Some(j) = self.journal.as_ref() else {
            return;
        };
        let Some(tx) = j.tx.as_ref() else { return };
        let len = line.len();
        j.behind.fetch_add(len, Ordering::AcqRel);
        if tx.send(line).is_err() {
            j.behind.fetch_sub(len, Ordering::AcqRel);
            log_error!("the task journal's writer is gone; a task change was not written");
        }
    }

    /// Bytes of task changes not yet in the journal, when more than
    /// [`JOURNAL_BEHIND_MAX`]: the caller refuses the change.
    pub fn journal_behind(&self) -> Option<usize> {
        let behind = self.journal.as_ref()?.behind.load(Ordering::Acquire);
        (behind > JOURNAL_BEHIND_MAX).then_some(behind)
    }

    /// Arms the acknowledgement timer for the earliest open claim.
    /// The acknowledgement timer fired: it is no longer armed.
    pub(crate) fn ack_timer_fired(&mut self) {
        if let Some((timer, _)) = self.timer.as_mut() {
            timer.acknowledge();
        }
        self.armed = None;
    }

    pub(crate) fn rearm(
        &mut self,
        now: Timestamp,
        registry: &Registry,
        token: impl FnOnce() -> Token,
    ) {
        let due = self.queue.next_ack_due();
        if due == self.armed {
            return;
        }
        if self.timer.is_none() {
            let token = token();
            match KernelTimer::new(registry, token) {
                Ok(t) => self.timer = Some((t, token)),
                Err(e) => {
                    log_warn!("cannot create the task acknowledgement timer: {e}");
                    return;
                }
            }
        }
        let Some((timer, _)) = self.timer.as_mut() else {
            return;
        };
        self.armed = None;
        match due {
            None => {
                let _ = timer.disarm(registry);
            }
            Some(at) => {
                let after = at.since(now).max(Duration::from_millis(1));
                if timer.arm_oneshot(registry, after).is_ok() {
                    self.armed = Some(at);
                }
            }
        }
    }
}

/// Writes `events` as the journal at `path`: a new file, synced, renamed
/// over it, the directory synced. A failure leaves the journal as it was
/// and removes the new file (a full disk would keep it otherwise).
fn compact_journal(path: &Path, events: &[TaskEvent]) -> io::Result<()> {
    let tmp = path.with_extension("jsonl.new");
    keep_previous(path);
    write_and_rename(&tmp, path, events).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Keeps the journal about to be compacted as `tasks.jsonl.1`, a link to
/// the same file, so its history (the dispatch plans `colibri fold`
/// replays) outlives one compaction. A file system without links keeps
/// none; the compaction goes on.
fn keep_previous(path: &Path) {
    let previous = path.with_extension("jsonl.1");
    let _ = std::fs::remove_file(&previous);
    if let Err(e) = std::fs::hard_link(path, &previous) {
        log_warn!(
            "task journal {}: its history is not kept before compaction: {e}",
            path.display()
        );
    }
}

fn write_and_rename(tmp: &Path, path: &Path, events: &[TaskEvent]) -> io::Result<()> {
    let mut text = Vec::new();
    for ev in events {
        serde_json::to_writer(&mut text, ev).map_err(io::Error::other)?;
        text.push(b'\n');
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    f.write_all(&text)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

/// Applies every readable line of the journal; a torn last line (a crash
/// mid-write) or a hand-edited one is skipped and counted.
/// Returns the events applied, the lines skipped, and whether the last
/// line lacks its newline.
fn replay(path: &Path, queue: &mut TaskQueue) -> (usize, usize, bool) {
    let Ok(file) = File::open(path) else {
        return (0, 0, false);
    };
    // A device or a FIFO in its place would be read for ever.
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        log_warn!(
            "task journal {}: not a regular file; not replayed",
            path.display()
        );
        return (0, 0, false);
    }
    let (mut applied, mut skipped, mut torn) = (0, 0, false);
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => {
                skipped += 1;
                break;
            }
        }
        torn = line.last() != Some(&b'\n');
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<JournalLine>(&line) {
            Ok(JournalLine::Task(ev)) => {
                queue.apply(&ev);
                applied += 1;
            }
            // A plan's record is history for `colibri fold`; the queue is
            // the task events'. Counted, so a journal of many is compacted.
            Ok(JournalLine::Plan(_)) => applied += 1,
            Err(_) => skipped += 1,
        }
    }
    (applied, skipped, torn)
}

pub(crate) fn status_event(ev: &TaskEvent, queue: &TaskQueue) -> Option<WatchKind> {
    let t = queue.get(ev.id())?;
    let pane = match ev {
        TaskEvent::Released { .. } | TaskEvent::Added { .. } => None,
        _ => t.claimed_by.clone(),
    };
    Some(WatchKind::Task {
        task_id: t.id,
        status: t.status,
        pane,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tasks::{Actor, NewTask, ACK_TIMEOUT};

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    /// A compaction that fails leaves the journal as it was and no new
    /// file behind.
    #[test]
    fn a_failed_compaction_leaves_no_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Nothing can be renamed over a directory that holds a file.
        let path = dir.path().join("tasks.jsonl");
        std::fs::create_dir(&path).expect("dir");
        std::fs::write(path.join("keep"), b"x").expect("file");
        let ev = TaskEvent::Cancelled { id: 1, at: 1 };
        assert!(compact_journal(&path, &[ev]).is_err());
        assert!(!dir.path().join("tasks.jsonl.new").exists());
        assert!(path.join("keep").exists());
    }

    /// The journal before a compaction stays as `tasks.jsonl.1`, with the
    /// plans `colibri fold` replays; the one before that is gone.
    #[test]
    fn a_compaction_keeps_the_journal_it_replaces_as_its_previous() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tasks.jsonl");
        let previous = dir.path().join("tasks.jsonl.1");
        std::fs::write(&previous, b"older\n").expect("older");
        let history = b"{\"ev\":\"planned\",\"at\":1,\"idle\":[],\"given\":[]}\n";
        std::fs::write(&path, history).expect("journal");
        let ev = TaskEvent::Cancelled { id: 1, at: 1 };
        compact_journal(&path, &[ev]).expect("compacted");
        assert_eq!(std::fs::read(&previous).expect("previous"), history);
        let now = std::fs::read_to_string(&path).expect("journal");
        assert!(now.starts_with("{\"ev\":\"cancelled\""), "{now}");
    }

    #[test]
    fn a_write_cut_short_goes_on_where_it_stopped_and_writes_no_line_twice() {
        use std::io::Read;
        // A non-blocking pipe takes 64 KiB, then refuses (EAGAIN): a short
        // write followed by a failed one, as a filling disk gives.
        let (r, w) = nix::unistd::pipe().unwrap();
        let flags = nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
        let (_tx, rx) = mpsc::channel();
        let mut writer = JournalWriter {
            file: File::from(w),
            path: PathBuf::from("pipe"),
            rx,
            behind: Arc::default(),
            closing: Arc::default(),
            delay: Duration::ZERO,
            mid_line: false,
        };
        let line = b"{\"ev\":\"released\",\"id\":1,\"at\":\"2026-11-23T17:00:00.000Z\"}\n";
        let batch: Vec<u8> = line
            .iter()
            .copied()
            .cycle()
            .take(line.len() * 2000)
            .collect();
        let mut written = 0;
        assert!(
            writer.append(&batch, &mut written).is_err(),
            "the pipe fills"
        );
        assert!(written > 0 && written < batch.len());
        let mut got = Vec::new();
        let mut reader = File::from(r);
        let mut chunk = vec![0u8; batch.len()];
        let n = reader.read(&mut chunk).unwrap();
        got.extend_from_slice(&chunk[..n]);
        writer.append(&batch, &mut written).expect("the rest fits");
        drop(writer);
        reader.read_to_end(&mut got).unwrap();
        // (Not assert_eq: it would print 124 KB.)
        assert!(
            got == batch,
            "every byte once, in order: {} bytes read of {}",
            got.len(),
            batch.len()
        );
    }

    #[test]
    fn a_failing_journal_keeps_its_lines_and_says_when_to_refuse_changes() {
        let dir = tempfile::tempdir().unwrap();
        // Every write to /dev/full fails (ENOSPC): the writer retries, so
        // what it was given stays counted as not yet written.
        std::os::unix::fs::symlink("/dev/full", dir.path().join("tasks.jsonl")).unwrap();
        let mut cp = ControlPlane::open(dir.path(), ACK_TIMEOUT);
        assert_eq!(cp.journal_behind(), None);
        let line = vec![b'x'; 1 << 20];
        for _ in 0..(JOURNAL_BEHIND_MAX >> 20) {
            cp.send(line.clone());
        }
        assert_eq!(cp.journal_behind(), None, "at the bound, not past it");
        cp.send(b"{}\n".to_vec());
        let behind = cp.journal_behind().expect("past the bound: refuse");
        assert_eq!(behind, JOURNAL_BEHIND_MAX + 3);
        // Dropping gives the failing writes up (said on stderr), in time.
        let started = std::time::Instant::now();
        drop(cp);
        assert!(started.elapsed() < JOURNAL_DRAIN + Duration::from_secs(2));
    }

    #[test]
    fn the_journal_brings_the_queue_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut cp = ControlPlane::open(dir.path(), ACK_TIMEOUT);
            let add = |cp: &mut ControlPlane, title: &str| {
                let ev = cp
                    .queue
                    .add(
                        NewTask {
                            title: title.into(),
                            ..NewTask::default()
                        },
                        at(0),
                    )
                    .unwrap();
                cp.record(&ev);
            };
            add(&mut cp, "one");
            add(&mut cp, "two");
            let ev = cp
                .queue
                .claim("p1", None, None, at(1), ACK_TIMEOUT)
                .unwrap()
                .unwrap();
            cp.record(&ev);
            let ev = cp.queue.ack(ev.id(), Actor::Agent("p1"), at(2)).unwrap();
            cp.record(&ev);
        }
        // A torn last line, as a crash mid-write leaves it.
        let path = dir.path().join("tasks.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"ev\":\"done\",\"id\":1,").unwrap();
        drop(f);
        let mut cp = ControlPlane::open(dir.path(), ACK_TIMEOUT);
        let tasks: Vec<_> = cp.queue.iter().map(|t| (t.id, t.status)).collect();
        use crate::core::tasks::TaskStatus::*;
        assert_eq!(tasks, vec![(1, Working), (2, Pending)]);
        assert_eq!(cp.queue.held_by("p1").map(|t| t.id), Some(1));
        let ev = cp
            .queue
            .finish(1, Actor::Agent("p1"), true, None, at(4))
            .unwrap();
        cp.record(&ev);
        drop(cp);
        let cp = ControlPlane::open(dir.path(), ACK_TIMEOUT);
        assert_eq!(cp.queue.get(1).map(|t| t.status), Some(Done));
    }
}
