//! What the daemon keeps per pane beyond the core's view: the process, its
//! PTY, its life (`core::lifecycle`), its deadlines and its restart policy.
//!
//! An [`Agent`] lives as long as its pane. Its [`Proc`] exists while the
//! agent process or its PTY is alive and owns their fds (the PTY master,
//! the exit watch); dropping a `Proc` only closes fds, it never waits.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use mio::Token;

use crate::core::lifecycle::{Life, RestartRule};
use crate::core::pane::ExitStatus;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::timers::PaneTimers;
use crate::platform::{ExitWatch, Pid};

/// How long after a pause output may still come (written before the stop
/// took, read after): only output later than this gives a pause away.
pub const PAUSE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);
/// One `pause_broken` event per pane in this long, at most.
pub const PAUSE_BROKEN_QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// Input queued for an agent's PTY beyond this is refused.
pub const INPUT_QUEUE_LIMIT: usize = 256 * 1024;

pub use crate::core::lifecycle::RestartPolicy;

/// Everything needed to start (and restart) an agent.
#[derive(Clone, Debug)]
pub struct Recipe {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    pub jail: Option<String>,
    pub user: Option<String>,
    pub cols: u16,
    pub rows: u16,
    pub runtime: Option<Runtime>,
    /// The system prompt `argv` gives the harness (or, for a harness that
    /// takes none, only `COLIBRI_SYSTEM_PROMPT` does): logged with each
    /// start, so `get-session` returns it.
    pub system_prompt: Option<String>,
    /// The paths in the agent's scope besides its working directory (the
    /// guard's scope rule), as given.
    pub scope: Vec<String>,
}

/// An agent's heartbeat: its schedule and the prompt it is given.
#[derive(Clone, Debug)]
pub struct AgentHeartbeat {
    pub schedule: crate::core::heartbeat::Heartbeat,
    pub prompt: String,
}

#[derive(Clone, Debug)]
pub struct RestartState {
    pub policy: RestartPolicy,
    pub max: u32,
    /// Consecutive restarts so far.
    pub attempts: u32,
}

/// A running (or just exited) agent process and its PTY.
#[derive(Debug)]
pub struct Proc {
    pub pid: Pid,
    pub started: Timestamp,
    pub master: OwnedFd,
    pub pty_token: Token,
    pub pty_registered: bool,
    /// The PTY reported end of file (every slave fd closed).
    pub eof: bool,
    /// A readable edge not fully consumed.
    pub read_pending: bool,
    pub exit_watch: Option<ExitWatch>,
    pub exit_token: Token,
    pub status: Option<ExitStatus>,
    /// The kernel says the process has begun to exit, before its exit is
    /// reported (see `Daemon::held_read_check`): its output is read on
    /// while the logs hold running agents'.
    pub exiting: bool,
    pub input: VecDeque<u8>,
    pub write_interest: bool,
    /// Where `input` goes instead of the PTY: the write end of the
    /// agent's stdin pipe (see `platform::SpawnSpec::stdin`).
    pub input_pipe: Option<std::os::fd::OwnedFd>,
}

/// The agent's input queue has no room for what was to be queued: it is
/// not reading. Nothing was queued.
#[derive(Debug, thiserror::Error)]
#[error("input queue is full ({INPUT_QUEUE_LIMIT} bytes); the agent is not reading")]
pub struct InputFull;

impl InputFull {
    /// As a command's answer: the request is refused for now (`busy`), the
    /// pane named so the client knows which.
    pub fn refusal(&self, pane_id: &str) -> crate::protocol::CommandError {
        crate::protocol::CommandError::new(
            crate::protocol::ErrorCode::Busy,
            format!("input queue of {pane_id} is full ({INPUT_QUEUE_LIMIT} bytes); the agent is not reading"),
        )
    }
}

impl Proc {
    /// Queues `bytes` for the PTY whole or not at all, within
    /// [`INPUT_QUEUE_LIMIT`]: a harness message cut in two would be read
    /// as two broken ones. The caller then asks the loop to write it
    /// (`Daemon::write_input`).
    pub fn queue_input(&mut self, bytes: &[u8]) -> Result<(), InputFull> {
        if self.input.len() + bytes.len() > INPUT_QUEUE_LIMIT {
            return Err(InputFull);
        }
        self.input.extend(bytes);
        Ok(())
    }
}

#[derive(Debug)]
pub struct Agent {
    pub pane_id: String,
    pub session: String,
    pub jail: Option<String>,
    pub generation: u32,
    /// `None` for panes recovered from logs after a restart of colibrid.
    pub recipe: Option<Recipe>,
    pub restart: RestartState,
    pub proc: Option<Proc>,
    /// Where the process is in its life (see `core::lifecycle`).
    pub life: Life,
    pub timers: PaneTimers,
    /// Set while reported stalled: the pane's `quiet_since` at that moment.
    pub stalled_at_quiet: Option<Timestamp>,
    /// Why the operator or the daemon ended it (kill, shutdown): no restart.
    pub stopped_by: Option<String>,
    /// The session index has this pane's runtime (given or detected).
    pub runtime_indexed: bool,
    /// This run's failure was alerted (the bus alerts one per failure).
    pub failure_alerted: bool,
    /// What keeps the process stopped: a policy's resume lifts its own
    /// hold only, and the process continues once none is left (a global
    /// budget's resume must not continue a pane the guard stopped). An
    /// operator's resume lifts them all.
    pub holds: Holds,
    /// When a broken pause was last told (one event per
    /// [`PAUSE_BROKEN_QUIET`]: a helper that continues it in a loop must
    /// not flood the watchers).
    pub pause_broken_told: Option<Timestamp>,
    /// What the pane's earlier runs spent (each restart starts its pane's
    /// own usage over): with this run's, the pane's whole life.
    pub usage_earlier: crate::core::usage::Usage,
    /// Bytes the pane's earlier runs wrote on their terminals.
    pub bytes_earlier: u64,
    /// Recipe, origin, wanted state (`daemon::supervise`).
    pub supervision: crate::daemon::supervise::records::Supervision,
    /// The raw output ring and the attached clients (`daemon::attach`).
    pub attach: crate::daemon::attach::ring::PaneAttach,
    /// colibrid's own satellite (`colibri notify`): its tree speaks as the
    /// operator, not as an agent.
    pub satellite: bool,
    /// Given the heartbeat prompt on a schedule (`daemon::heartbeat`).
    pub heartbeat: Option<AgentHeartbeat>,
}

impl Agent {
    /// The paths in the agent's scope besides its working directory (none
    /// for a pane recovered without a recipe).
    pub fn scope(&self) -> &[String] {
        self.recipe.as_ref().map_or(&[], |r| r.scope.as_slice())
    }

    /// A pane's daemon state before its first process starts.
    pub fn new(
        pane_id: String,
        session: String,
        jail: Option<String>,
        recipe: Option<Recipe>,
        restart: RestartState,
    ) -> Agent {
        Agent {
            pane_id,
            session,
            jail,
            generation: 0,
            recipe,
            restart,
            proc: None,
            life: Life::Idle,
            timers: PaneTimers::default(),
            stalled_at_quiet: None,
            stopped_by: None,
            runtime_indexed: false,
            failure_alerted: false,
            holds: Holds::default(),
            pause_broken_told: None,
            usage_earlier: crate::core::usage::Usage::default(),
            bytes_earlier: 0,
            supervision: Default::default(),
            attach: Default::default(),
            satellite: false,
            heartbeat: None,
        }
    }

    /// Its process has exited or has begun to: what its PTY holds is the
    /// last it will write, and is read even while the logs hold running
    /// agents ([`crate::daemon::store::SessionStore::holds_reads`]).
    pub fn is_ending(&self) -> bool {
        self.proc
            .as_ref()
            .is_some_and(|p| p.status.is_some() || p.exiting)
    }

    /// Whether its terminal is in line mode now (`platform::TerminalMode`):
    /// what an attacher needs to show its output and echo its typing.
    pub fn line_mode(&self) -> bool {
        self.proc.as_ref().is_some_and(|p| {
            crate::platform::line_mode(std::os::fd::AsFd::as_fd(&p.master)).unwrap_or(false)
        })
    }

    /// When its pause began: the oldest hold (see `Daemon::hold_pause`).
    pub fn paused_since(&self) -> Option<Timestamp> {
        self.holds.iter().map(|h| h.since).min()
    }

    /// What its process is doing, as the supervisor shows it.
    pub fn actual(&self) -> crate::core::spec::Actual {
        let backing_off = matches!(self.life, Life::Backoff { .. });
        self.supervision.actual(self.proc.is_some(), backing_off)
    }

    pub fn running_pid(&self) -> Option<Pid> {
        self.proc
            .as_ref()
            .filter(|p| p.status.is_none())
            .map(|p| p.pid)
    }

    /// When a scheduled restart is due.
    pub fn next_restart_at(&self) -> Option<Timestamp> {
        match self.life {
            Life::Backoff { until, .. } => Some(until),
            _ => None,
        }
    }

    pub fn rule(&self) -> RestartRule {
        RestartRule {
            policy: self.restart.policy,
            max: self.restart.max,
        }
    }
}

/// One reason a pane is paused.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// What lifts it: `operator`, `guard`, `loop` or `budget:NAME` (a
    /// resume of the same key).
    pub key: String,
    /// The guard rule, loop type or budget name that paused it.
    pub rule: Option<String>,
    /// What the agent did (the verdict's reason), or who paused it.
    pub reason: Option<String>,
    pub since: Timestamp,
    /// A timed resume; `None`: until an operator.
    pub until: Option<Timestamp>,
}

impl Hold {
    /// As a v2 snapshot lists it.
    pub fn wire(&self) -> crate::protocol::WireHold {
        let by = self.key.split(':').next().unwrap_or_default();
        crate::protocol::WireHold {
            by: by.to_string(),
            rule: self.rule.clone(),
            reason: self.reason.clone(),
            since: self.since.to_rfc3339(),
            until: self.until.map(|t| t.to_rfc3339()),
        }
    }
}

/// What keeps a pane's process stopped, one [`Hold`] per key: the one
/// place holds are put and lifted, so the operator's pause, the policies'
/// and a process's end agree on what "still held" means.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Holds(Vec<Hold>);

impl Holds {
    /// Puts `hold`; a hold of the same key already there takes its reason
    /// and its end (the same policy again: its latest word stands).
    /// Returns whether the key was new.
    pub fn add(&mut self, hold: Hold) -> bool {
        match self.0.iter_mut().find(|h| h.key == hold.key) {
            Some(held) => {
                held.reason = hold.reason;
                held.until = hold.until;
                false
            }
            None => {
                self.0.push(hold);
                true
            }
        }
    }

    /// Lifts the hold of `key`; returns whether any hold is left.
    pub fn lift(&mut self, key: &str) -> bool {
        self.0.retain(|h| h.key != key);
        !self.0.is_empty()
    }

    /// Lifts every hold: the operator's resume, or the process's end.
    pub fn lift_all(&mut self) {
        self.0.clear();
    }

    pub fn holds(&self, key: &str) -> bool {
        self.0.iter().any(|h| h.key == key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Hold> {
        self.0.iter()
    }
}
