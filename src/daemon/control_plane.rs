//! The control plane for agents: the task queue, its journal, the
//! acknowledgement deadline, and the budget view `state` reports.
//!
//! The queue is `core::tasks::TaskQueue` (pure). Each change is a
//! `TaskEvent`, appended to `<state_dir>/tasks.jsonl` and replayed through
//! the same `TaskQueue::apply` at start, so the queue survives restarts.
//! The journal is written by its own thread (`colibri-task-journal`)
//! through a bounded queue: the loop never calls `write` or `fsync` on it,
//! so a frozen filesystem cannot stop supervision (the log writer's rule).
//! The loop only `try_send`s into a queue of 1,024 lines; each line is
//! written and `fdatasync`ed before the next. A change reaches the journal
//! after its reply has left: a crash in between loses that change (a lost
//! claim is simply claimable again).
//!
//! The claim handshake's deadline is one kernel timer (`Source::TaskAck`)
//! armed for the earliest unacknowledged claim.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Registry, Token};

use crate::core::tasks::{TaskEvent, TaskQueue, ACK_TIMEOUT};
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::platform::KernelTimer;
use crate::protocol::control_plane::WireBudget;
use crate::protocol::WatchKind;

/// Journal lines queued for the writer thread at most.
const JOURNAL_QUEUE: usize = 1024;
/// How long an orderly stop waits for the journal's last lines.
const JOURNAL_DRAIN: Duration = Duration::from_secs(2);
/// Test hook, read once at start: the acknowledgement window in ms.
pub const ACK_TIMEOUT_ENV: &str = "COLIBRI_TEST_TASK_ACK_TIMEOUT_MS";

/// An agent's budget standing as `state` reports it (from the policy
/// engine's ledgers, see `commands/control_plane.rs::governed_budget`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BudgetView {
    pub daily: u64,
    pub spent: u64,
    pub remaining: u64,
    pub exceeded: bool,
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
    tx: Option<SyncSender<Vec<u8>>>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Journal {
    fn start(path: PathBuf) -> io::Result<Journal> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(JOURNAL_QUEUE);
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("colibri-task-journal".into())
            .spawn(move || {
                write_journal(file, &path, rx);
                let _ = done_tx.send(());
            })?;
        Ok(Journal {
            tx: Some(tx),
            done,
            thread: Some(thread),
        })
    }
}

fn write_journal(mut file: File, path: &Path, rx: Receiver<Vec<u8>>) {
    let mut failing = false;
    while let Ok(line) = rx.recv() {
        let result = file.write_all(&line).and_then(|()| file.sync_data());
        match (result, failing) {
            (Err(e), false) => {
                log_warn!("task journal {}: {e}", path.display());
                failing = true;
            }
            (Ok(()), true) => failing = false,
            _ => {}
        }
    }
}

impl Drop for Journal {
    /// Closes the queue and waits (boundedly) for the lines already in it.
    fn drop(&mut self) {
        self.tx = None;
        if self.done.recv_timeout(JOURNAL_DRAIN).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        } else {
            log_warn!("the task journal did not drain in {JOURNAL_DRAIN:?}");
        }
    }
}

pub struct ControlPlane {
    pub queue: TaskQueue,
    pub ack_timeout: Duration,
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
    pub fn open(state_dir: &Path) -> ControlPlane {
        let path = state_dir.join("tasks.jsonl");
        let mut queue = TaskQueue::new();
        let (applied, skipped, torn) = replay(&path, &mut queue);
        if applied > 0 || skipped > 0 {
            log_info!(
                "task journal: {applied} event(s) replayed, {skipped} unreadable line(s) skipped"
            );
        }
        let journal = match Journal::start(path.clone()) {
            Ok(j) => Some(j),
            Err(e) => {
                log_warn!("cannot open the task journal {}: {e}", path.display());
                None
            }
        };
        let ack_timeout = std::env::var(ACK_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(ACK_TIMEOUT);
        let mut cp = ControlPlane {
            queue,
            ack_timeout,
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

    fn record(&mut self, ev: &TaskEvent) {
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

    fn send(&mut self, line: Vec<u8>) {
        let Some(tx) = self.journal.as_ref().and_then(|j| j.tx.as_ref()) else {
            return;
        };
        match tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => log_warn!("task journal queue full; event lost"),
            Err(TrySendError::Disconnected(_)) => log_warn!("task journal writer gone"),
        }
    }

    /// Arms the acknowledgement timer for the earliest open claim.
    fn rearm(&mut self, now: Timestamp, registry: &Registry, token: impl FnOnce() -> Token) {
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

/// Applies every readable line of the journal; a torn last line (a crash
/// mid-write) or a hand-edited one is skipped and counted.
/// Returns the events applied, the lines skipped, and whether the last
/// line lacks its newline.
fn replay(path: &Path, queue: &mut TaskQueue) -> (usize, usize, bool) {
    let Ok(file) = File::open(path) else {
        return (0, 0, false);
    };
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
        match serde_json::from_slice::<TaskEvent>(&line) {
            Ok(ev) => {
                queue.apply(&ev);
                applied += 1;
            }
            Err(_) => skipped += 1,
        }
    }
    (applied, skipped, torn)
}

fn status_event(ev: &TaskEvent, queue: &TaskQueue) -> Option<WatchKind> {
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

impl Daemon {
    /// Records a change the queue already made: the journal, the watch
    /// stream, and the acknowledgement timer.
    pub(crate) fn task_changed(&mut self, ev: TaskEvent, t: Timestamp) {
        self.control.record(&ev);
        if let Some(kind) = status_event(&ev, &self.control.queue) {
            self.publish(kind, t);
        }
        self.rearm_task_timer(t);
    }

    pub(crate) fn rearm_task_timer(&mut self, t: Timestamp) {
        let tokens = &mut self.tokens;
        self.control.rearm(t, self.poll.registry(), || {
            tokens.insert(crate::daemon::source::Source::TaskAck)
        });
    }

    /// The acknowledgement timer fired: release every overdue claim.
    pub(crate) fn task_ack_due(&mut self, t: Timestamp) {
        if let Some((timer, _)) = self.control.timer.as_mut() {
            timer.acknowledge();
        }
        self.control.armed = None;
        for ev in self.control.queue.expire(t) {
            log_info!("task {} released: its claim was not acknowledged", ev.id());
            self.task_changed(ev, t);
        }
        self.rearm_task_timer(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tasks::{Actor, NewTask};

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    #[test]
    fn the_journal_brings_the_queue_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut cp = ControlPlane::open(dir.path());
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
                .claim("p1", None, at(1), ACK_TIMEOUT)
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
        let mut cp = ControlPlane::open(dir.path());
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
        let cp = ControlPlane::open(dir.path());
        assert_eq!(cp.queue.get(1).map(|t| t.status), Some(Done));
    }
}
