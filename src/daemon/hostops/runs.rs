//! The host operations running now: for each, its process, the pipe its
//! output comes on, its exit watch and timer, the output kept so far and
//! the connection waiting for the reply.
//!
//! An owner below the daemon's verbs (`hostops.rs` drives it); it knows
//! its connection only by id and its sources only by token.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::Token;
use serde_json::Value;

use crate::core::pane::ExitStatus;
use crate::core::time::Timestamp;
use crate::daemon::source::{ConnId, HostRunId};
use crate::platform::{self, ExitWatch, KernelTimer, Pid, ReadOutcome};

/// Host operations running at once, all callers together.
pub(crate) const MAX_RUNNING: usize = 8;

/// Who asked for a run, as its events and the per-caller bound name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Asker {
    /// `operator`, `jail:NAME` or `agent:ID`: one run at a time for each
    /// but the operator.
    pub by: String,
    /// The agent's pane id, when an agent asked.
    pub pane: Option<String>,
}

/// One running host operation.
#[derive(Debug)]
pub(crate) struct HostRun {
    pub id: HostRunId,
    pub op: String,
    pub params: BTreeMap<String, String>,
    pub asker: Asker,
    pub pid: Pid,
    /// The read end of its stdout and stderr.
    pub out: OwnedFd,
    pub tokens: [Token; 3],
    pub exit_watch: Option<ExitWatch>,
    pub timer: Option<KernelTimer>,
    /// When the timeout is due (monotonic): a timer event before it is
    /// a stale one.
    pub deadline: Instant,
    pub timeout: Duration,
    pub started: Timestamp,
    /// What is kept for the reply, at most `output_max` bytes.
    pub output: Vec<u8>,
    pub output_max: usize,
    /// Every byte read, kept or not.
    pub output_bytes: u64,
    pub eof: bool,
    pub status: Option<ExitStatus>,
    /// Killed at its timeout.
    pub timed_out: bool,
    /// The connection waiting for the reply, and the request's `id`;
    /// `None` once it closed (the op still runs to its end).
    pub reply_to: Option<(ConnId, Option<Value>)>,
}

/// What a read of a run's pipe left.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Nothing more to read now.
    Dry,
    /// The budget ran out with more to read.
    More,
}

impl HostRun {
    /// Reads its pipe until it would block, ends, or `budget` bytes were
    /// read, keeping up to `output_max` bytes and counting the rest.
    pub(crate) fn read_output(&mut self, buf: &mut [u8], budget: usize) -> Drained {
        let mut left = budget;
        while !self.eof {
            if left == 0 {
                return Drained::More;
            }
            let want = left.min(buf.len());
            match platform::read_master(self.out.as_fd(), &mut buf[..want]) {
                Ok(ReadOutcome::Data(n)) => {
                    left = left.saturating_sub(n);
                    self.output_bytes += n as u64;
                    let room = self.output_max.saturating_sub(self.output.len());
                    self.output.extend_from_slice(&buf[..n.min(room)]);
                }
                Ok(ReadOutcome::WouldBlock) => return Drained::Dry,
                Ok(ReadOutcome::Eof) | Err(_) => self.eof = true,
            }
        }
        Drained::Dry
    }

    /// More came than was kept.
    pub(crate) fn truncated(&self) -> bool {
        self.output_bytes > self.output.len() as u64
    }
}

/// Every running host operation.
#[derive(Debug, Default)]
pub(crate) struct HostRuns {
    runs: Vec<HostRun>,
    next: u64,
}

impl HostRuns {
    /// A new run's id.
    pub(crate) fn next_id(&mut self) -> HostRunId {
        self.next += 1;
        HostRunId(self.next)
    }

    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether `by` has a run going (the operator is never busy this way).
    pub(crate) fn busy_for(&self, by: &str) -> bool {
        by != "operator" && self.runs.iter().any(|r| r.asker.by == by)
    }

    pub(crate) fn insert(&mut self, run: HostRun) {
        self.runs.push(run);
    }

    pub(crate) fn get_mut(&mut self, id: HostRunId) -> Option<&mut HostRun> {
        self.runs.iter_mut().find(|r| r.id == id)
    }

    pub(crate) fn remove(&mut self, id: HostRunId) -> Option<HostRun> {
        let i = self.runs.iter().position(|r| r.id == id)?;
        Some(self.runs.swap_remove(i))
    }

    /// The run whose process is `pid`, not reaped yet.
    pub(crate) fn by_pid(&self, pid: Pid) -> Option<HostRunId> {
        self.runs
            .iter()
            .find(|r| r.pid == pid && r.status.is_none())
            .map(|r| r.id)
    }

    /// The process groups of the runs still running.
    pub(crate) fn running_pids(&self) -> Vec<Pid> {
        self.runs
            .iter()
            .filter(|r| r.status.is_none())
            .map(|r| r.pid)
            .collect()
    }

    /// Whether `conn` waits for a run's reply (so it is not idle).
    pub(crate) fn waiting(&self, conn: ConnId) -> bool {
        self.runs
            .iter()
            .any(|r| r.reply_to.as_ref().is_some_and(|(c, _)| *c == conn))
    }

    /// A closed connection waits for nothing (its id may be reused); its
    /// runs go on to their end, reported in the journal alone.
    pub(crate) fn forget_conn(&mut self, conn: ConnId) {
        for r in &mut self.runs {
            if r.reply_to.as_ref().is_some_and(|(c, _)| *c == conn) {
                r.reply_to = None;
            }
        }
    }
}
