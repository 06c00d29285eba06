//! Per-pane named deadlines over one kernel timer.
//!
//! A pane waits on several things at once: its stall deadline, the drain
//! of its PTY after the process exited, a restart backoff. Each is a named
//! [`Deadline`] with its own due time; the pane's one `KernelTimer` is armed
//! for the earliest, so setting one deadline never displaces another. A new
//! kind of wait (an approval's timeout, a budget window) is a new variant.
//!
//! The kernel timer (a file descriptor on Linux) is created on first use
//! and released with [`PaneTimers::release`] when the pane is over, so
//! finished panes hold no timer fd.

use std::io;

use mio::{Registry, Token};

use crate::core::time::Timestamp;
use crate::daemon::source::{PaneKey, Source, Tokens};
use crate::platform::KernelTimer;

/// The wall clock is read once per wakeup in milliseconds; a deadline this
/// close to `now` counts as due.
const SLACK_MS: u64 = 5;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// Re-checked when due (the pane may have spoken since): lazily re-set.
    Stall,
    /// The process exited; wait this long for the PTY's end of file.
    Drain,
    /// Restart backoff.
    Backoff,
    /// A planned stop sent SIGTERM; SIGKILL follows if still running.
    StopGrace,
    /// The earliest pending approval's own timeout (a Pi dialog's, or the
    /// wait of a `colibri hook`).
    ApprovalExpiry,
    /// The next approval to escalate, or to answer by the default policy.
    ApprovalEscalation,
    /// A governance resume: a loop's backoff or a budget window (the
    /// governor says which when it ticks).
    Govern,
}

const ALL: [Deadline; 7] = [
    Deadline::Stall,
    Deadline::Drain,
    Deadline::Backoff,
    Deadline::StopGrace,
    Deadline::ApprovalExpiry,
    Deadline::ApprovalEscalation,
    Deadline::Govern,
];

fn slot(d: Deadline) -> usize {
    match d {
        Deadline::Stall => 0,
        Deadline::Drain => 1,
        Deadline::Backoff => 2,
        Deadline::StopGrace => 3,
        Deadline::ApprovalExpiry => 4,
        Deadline::ApprovalEscalation => 5,
        Deadline::Govern => 6,
    }
}

#[derive(Debug, Default)]
pub struct PaneTimers {
    timer: Option<(KernelTimer, Token)>,
    due: [Option<Timestamp>; ALL.len()],
    /// What the kernel timer is armed for.
    armed: Option<Timestamp>,
}

impl PaneTimers {
    pub fn due(&self, d: Deadline) -> Option<Timestamp> {
        self.due[slot(d)]
    }

    /// Sets (or moves) deadline `d` to `at`.
    pub fn set(
        &mut self,
        d: Deadline,
        at: Timestamp,
        now: Timestamp,
        registry: &Registry,
        tokens: &mut Tokens,
        key: PaneKey,
    ) -> io::Result<()> {
        self.due[slot(d)] = Some(at);
        self.rearm(now, registry, tokens, key)
    }

    pub fn clear(&mut self, d: Deadline, now: Timestamp, registry: &Registry) {
        self.due[slot(d)] = None;
        if self.earliest().is_none() {
            self.armed = None;
            if let Some((timer, _)) = self.timer.as_mut() {
                let _ = timer.disarm(registry);
            }
        } else if self.earliest() != self.armed {
            if let Some((timer, _)) = self.timer.as_mut() {
                Self::arm(timer, &mut self.armed, self.due, now, registry);
            }
        }
    }

    /// The kernel timer fired: takes and returns every deadline now due,
    /// and re-arms for the rest. A stale expiry (one that belonged to an
    /// earlier arm) returns nothing.
    pub fn fired(&mut self, now: Timestamp, registry: &Registry) -> Vec<Deadline> {
        let Some((timer, _)) = self.timer.as_mut() else {
            return Vec::new();
        };
        if timer.acknowledge() == 0 {
            return Vec::new();
        }
        let limit = now.plus(std::time::Duration::from_millis(SLACK_MS));
        let mut fired = Vec::new();
        for d in ALL {
            if self.due[slot(d)].is_some_and(|at| at <= limit) {
                self.due[slot(d)] = None;
                fired.push(d);
            }
        }
        self.armed = None;
        Self::arm(timer, &mut self.armed, self.due, now, registry);
        fired
    }

    /// Drops the kernel timer and its token: the pane waits on nothing.
    pub fn release(&mut self, registry: &Registry, tokens: &mut Tokens) {
        self.due = [None; ALL.len()];
        self.armed = None;
        if let Some((timer, token)) = self.timer.take() {
            timer.deregister(registry);
            tokens.remove(token);
        }
    }

    /// Holds a kernel timer (for tests of fd hygiene and for status).
    pub fn holds_timer(&self) -> bool {
        self.timer.is_some()
    }

    fn earliest(&self) -> Option<Timestamp> {
        self.due.iter().flatten().min().copied()
    }

    fn rearm(
        &mut self,
        now: Timestamp,
        registry: &Registry,
        tokens: &mut Tokens,
        key: PaneKey,
    ) -> io::Result<()> {
        if self.earliest() == self.armed {
            return Ok(());
        }
        if self.timer.is_none() {
            let token = tokens.insert(Source::PaneTimer(key));
            match KernelTimer::new(registry, token) {
                Ok(timer) => self.timer = Some((timer, token)),
                Err(e) => {
                    tokens.remove(token);
                    return Err(e);
                }
            }
        }
        let Some((timer, _)) = self.timer.as_mut() else {
            return Ok(());
        };
        Self::arm(timer, &mut self.armed, self.due, now, registry);
        Ok(())
    }

    fn arm(
        timer: &mut KernelTimer,
        armed: &mut Option<Timestamp>,
        due: [Option<Timestamp>; ALL.len()],
        now: Timestamp,
        registry: &Registry,
    ) {
        let Some(at) = due.iter().flatten().min().copied() else {
            let _ = timer.disarm(registry);
            return;
        };
        let after = at.since(now).max(std::time::Duration::from_millis(1));
        if timer.arm_oneshot(registry, after).is_ok() {
            *armed = Some(at);
        }
    }
}
