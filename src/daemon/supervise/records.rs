//! The supervisor's state: what each pane carries ([`Supervision`]: its
//! recipe, origin, wanted state) and the agent records file with the thread
//! that writes it ([`RecordsWriter`]).
//!
//! An owner below the daemon's verbs: the pane table holds a `Supervision`
//! per agent, so this never reaches back to the loop (`supervise.rs` holds
//! the verbs: start-up, reconcile, planned stops).

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::reconcile::Origin;
use crate::core::spec::{Actual, AgentRecord, AgentSpec, StopCause, Wanted};
use crate::daemon::diag::log_warn;
use crate::protocol::SupervisionView;

/// What the supervisor keeps on each pane.
#[derive(Clone, Debug)]
pub struct Supervision {
    /// The recipe, for declared agents and named spawned ones. Boxed: most
    /// panes of a large fleet are unnamed spawns without one, and inline it
    /// cost each of them 224 bytes (2 MiB at 10,000 panes).
    pub spec: Option<Box<AgentSpec>>,
    pub origin: Origin,
    pub wanted: Wanted,
    /// Its restarts are exhausted (supervisord's FATAL).
    pub given_up: bool,
    /// Start it again as soon as its process has ended (`restart-agent`, a
    /// reload that changed its launch).
    pub restart_after_stop: bool,
    /// The harness session last written to the records file.
    pub persisted_session: Option<String>,
}

impl Default for Supervision {
    fn default() -> Supervision {
        Supervision {
            spec: None,
            origin: Origin::Spawned,
            wanted: Wanted::Up,
            given_up: false,
            restart_after_stop: false,
            persisted_session: None,
        }
    }
}

impl Supervision {
    /// What the pane's process is doing, given whether it has a process
    /// and whether a restart waits (see `Agent::actual`).
    pub fn actual(&self, running: bool, backing_off: bool) -> Actual {
        if running {
            return Actual::Running;
        }
        if backing_off {
            return Actual::Backoff;
        }
        if self.given_up {
            return Actual::GivenUp;
        }
        if self.wanted.is_up() {
            Actual::Exited
        } else {
            Actual::Stopped
        }
    }

    /// Whether an exit now is one somebody asked for: it raises no alert.
    pub fn planned_stop(&self) -> bool {
        !self.wanted.is_up() || self.restart_after_stop
    }

    /// The supervision a v2 snapshot shows, borrowed from `self`.
    pub fn wire(&self, actual: Actual) -> SupervisionView<'_> {
        let (stopped_by, stop_reason) = match &self.wanted {
            Wanted::Up => (None, None),
            Wanted::Down { by, reason } => (Some(cause_name(by)), reason.as_deref()),
        };
        SupervisionView {
            wanted: if self.wanted.is_up() { "up" } else { "down" },
            actual: actual.as_str(),
            stopped_by,
            stop_reason,
            declared: self.origin == Origin::Declared,
        }
    }
}

pub(crate) fn cause_name(cause: &StopCause) -> Cow<'static, str> {
    match cause {
        StopCause::Shutdown => "shutdown".into(),
        StopCause::Operator { who } => format!("operator ({who})").into(),
        StopCause::Removed => "removed".into(),
        StopCause::NoAutostart => "no-autostart".into(),
    }
}

/// One line of the records file.
#[derive(Serialize, Deserialize)]
struct RecordLine {
    declared: bool,
    record: AgentRecord,
}

/// The records a previous colibrid left; lines that do not decode are
/// reported and skipped.
pub fn read_records(path: &Path) -> Vec<(bool, AgentRecord)> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            log_warn!("reading {}: {e}", path.display());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RecordLine>(line) {
            Ok(r) => out.push((r.declared, r.record)),
            Err(e) => log_warn!("{} line {}: {e}", path.display(), n + 1),
        }
    }
    out
}

/// Replaces the records file: a `.new` beside it, then a rename, so a
/// crash leaves the old file or the new one, never half of one.
pub fn write_records(path: &Path, lines: &[(bool, AgentRecord)]) -> std::io::Result<()> {
    write_atomic(path, &encode_records(lines)?)
}

pub(crate) fn encode_records(lines: &[(bool, AgentRecord)]) -> std::io::Result<Vec<u8>> {
    let mut text = Vec::new();
    for (declared, record) in lines {
        let line = RecordLine {
            declared: *declared,
            record: record.clone(),
        };
        serde_json::to_writer(&mut text, &line)?;
        text.push(b'\n');
    }
    Ok(text)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("jsonl.new");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// Writes the records file off the loop: `write`, `fsync` and `rename`
/// block on a frozen filesystem, and the loop never blocks. Only the
/// newest contents matter, so a backlog collapses to its last entry.
#[derive(Debug, Default)]
pub struct RecordsWriter {
    queue: Option<std::sync::mpsc::Sender<(PathBuf, Vec<u8>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RecordsWriter {
    pub(crate) fn send(&mut self, path: PathBuf, bytes: Vec<u8>) {
        if self.queue.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<(PathBuf, Vec<u8>)>();
            let spawned = std::thread::Builder::new()
                .name("colibri-records".into())
                .spawn(move || {
                    while let Ok(mut job) = rx.recv() {
                        while let Ok(newer) = rx.try_recv() {
                            job = newer;
                        }
                        if let Err(e) = write_atomic(&job.0, &job.1) {
                            log_warn!("writing {}: {e}", job.0.display());
                        }
                    }
                });
            match spawned {
                Ok(handle) => {
                    self.queue = Some(tx);
                    self.thread = Some(handle);
                }
                Err(e) => {
                    log_warn!("no records writer thread ({e}); writing on the loop");
                    if let Err(e) = write_atomic(&path, &bytes) {
                        log_warn!("writing {}: {e}", path.display());
                    }
                    return;
                }
            }
        }
        if let Some(queue) = &self.queue {
            if let Err(std::sync::mpsc::SendError((path, bytes))) = queue.send((path, bytes)) {
                if let Err(e) = write_atomic(&path, &bytes) {
                    log_warn!("writing {}: {e}", path.display());
                }
            }
        }
    }

    /// At the end of an orderly shutdown: the last records land before
    /// colibrid exits.
    pub fn close(&mut self) {
        self.queue = None;
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}
