//! Per-pane named deadlines over one kernel timer for the whole daemon.
//!
//! A pane waits on several things at once: its stall deadline, the drain
//! of its PTY after the process exited, a restart backoff. Each is a named
//! [`Deadline`] with its own due time ([`PaneTimers`]); the pane's earliest
//! is queued in the daemon's [`TimerQueue`], whose one `KernelTimer` is
//! armed for the earliest of all, so setting one deadline never displaces
//! another. A new kind of wait (an approval's timeout, a budget window) is
//! a new variant.
//!
//! One kernel timer, not one per pane: FreeBSD holds at most
//! `kern.kq_calloutmax` (4,096 by default) timer notes on the whole host,
//! and a daemon of 10,000 agents would silently lose the rest; on Linux
//! each timer is a file descriptor. The queue costs a B-tree update when
//! a pane's earliest deadline moves, which deadlines do rarely (the stall
//! deadline is re-set only when it comes due).

use std::collections::BTreeSet;
use std::io;

use mio::Registry;

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
    /// Its reads are held by the logs: ask whether its agent is exiting
    /// (`Daemon::held_read_check`).
    HeldRead,
    /// Its heartbeat prompt is due (`daemon::heartbeat`).
    Heartbeat,
}

const ALL: [Deadline; 9] = [
    Deadline::Stall,
    Deadline::Drain,
    Deadline::Backoff,
    Deadline::StopGrace,
    Deadline::ApprovalExpiry,
    Deadline::ApprovalEscalation,
    Deadline::Govern,
    Deadline::HeldRead,
    Deadline::Heartbeat,
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
        Deadline::HeldRead => 7,
        Deadline::Heartbeat => 8,
    }
}

/// A pane's named deadlines.
#[derive(Debug, Default)]
pub struct PaneTimers {
    due: [Option<Timestamp>; ALL.len()],
    /// The earliest of `due` as the queue holds it.
    queued: Option<Timestamp>,
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
        queue: &mut TimerQueue,
        key: PaneKey,
    ) -> io::Result<()> {
        self.due[slot(d)] = Some(at);
        self.requeue(now, queue, key)
    }

    pub fn clear(&mut self, d: Deadline, now: Timestamp, queue: &mut TimerQueue, key: PaneKey) {
        self.due[slot(d)] = None;
        // Clearing never needs a timer it does not have: no error to give.
        let _ = self.requeue(now, queue, key);
    }

    /// The queue said the pane is due: takes and returns every deadline now
    /// due, and queues the rest. One that moved later since it was queued
    /// returns nothing.
    pub fn fired(&mut self, now: Timestamp, queue: &mut TimerQueue, key: PaneKey) -> Vec<Deadline> {
        let limit = now.plus(std::time::Duration::from_millis(SLACK_MS));
        let mut fired = Vec::new();
        for d in ALL {
            if self.due[slot(d)].is_some_and(|at| at <= limit) {
                self.due[slot(d)] = None;
                fired.push(d);
            }
        }
        // The queue dropped this pane's entry when it came due.
        self.queued = None;
        if let Err(e) = self.requeue(now, queue, key) {
            crate::daemon::diag::log_warn!("cannot arm the deadline timer: {e}");
        }
        fired
    }

    /// The pane waits on nothing any more.
    pub fn release(&mut self, queue: &mut TimerQueue, key: PaneKey) {
        self.due = [None; ALL.len()];
        if let Some(at) = self.queued.take() {
            queue.entries.remove(&(at, key));
        }
    }

    fn earliest(&self) -> Option<Timestamp> {
        self.due.iter().flatten().min().copied()
    }

    fn requeue(&mut self, now: Timestamp, queue: &mut TimerQueue, key: PaneKey) -> io::Result<()> {
        let earliest = self.earliest();
        if earliest == self.queued {
            return Ok(());
        }
        if let Some(at) = self.queued.take() {
            queue.entries.remove(&(at, key));
        }
        if let Some(at) = earliest {
            queue.entries.insert((at, key));
            self.queued = Some(at);
        }
        queue.rearm(now)
    }
}

/// Every pane's earliest deadline, in order, and the one kernel timer armed
/// for the first of them.
#[derive(Debug)]
pub struct TimerQueue {
    timer: KernelTimer,
    registry: Registry,
    entries: BTreeSet<(Timestamp, PaneKey)>,
    /// What the kernel timer is armed for.
    armed: Option<Timestamp>,
}

impl TimerQueue {
    /// The queue's timer reports to `token` (a [`Source::Timers`]).
    pub fn new(registry: &Registry, tokens: &mut Tokens) -> io::Result<TimerQueue> {
        let token = tokens.insert(Source::Timers);
        let timer = KernelTimer::new(registry, token)?;
        Ok(TimerQueue {
            timer,
            registry: registry.try_clone()?,
            entries: BTreeSet::new(),
            armed: None,
        })
    }

    /// The kernel timer fired: takes the panes now due, in deadline order,
    /// and re-arms for the rest. Each taken pane must be given
    /// [`PaneTimers::fired`], which queues its next deadline. A stale
    /// expiry (one that belonged to an earlier arm) takes nothing.
    pub fn fired(&mut self, now: Timestamp) -> Vec<PaneKey> {
        if self.timer.acknowledge() == 0 {
            return Vec::new();
        }
        self.armed = None;
        let limit = now.plus(std::time::Duration::from_millis(SLACK_MS));
        let mut due = Vec::new();
        while let Some(&(at, key)) = self.entries.first() {
            if at > limit {
                break;
            }
            self.entries.pop_first();
            due.push(key);
        }
        if let Err(e) = self.rearm(now) {
            crate::daemon::diag::log_warn!("cannot arm the deadline timer: {e}");
        }
        due
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn rearm(&mut self, now: Timestamp) -> io::Result<()> {
        let first = self.entries.first().map(|&(at, _)| at);
        if first == self.armed {
            return Ok(());
        }
        let Some(at) = first else {
            self.armed = None;
            return self.timer.disarm(&self.registry);
        };
        let after = at.since(now).max(std::time::Duration::from_millis(1));
        self.timer.arm_oneshot(&self.registry, after)?;
        self.armed = Some(at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};
    use std::time::{Duration, Instant};

    fn key(n: usize) -> PaneKey {
        PaneKey::new(u32::try_from(n).expect("small"), 0)
    }

    #[test]
    fn one_kernel_timer_serves_every_panes_deadlines_in_order() {
        let mut poll = Poll::new().expect("poll");
        let mut tokens = Tokens::default();
        let mut q = TimerQueue::new(poll.registry(), &mut tokens).expect("queue");
        let t0 = Timestamp::from_millis(1_000_000);
        let started = Instant::now();
        let at = |ms| t0.plus(Duration::from_millis(ms));
        let mut panes: Vec<PaneTimers> = (0..4).map(|_| PaneTimers::default()).collect();
        let set = |panes: &mut Vec<PaneTimers>, q: &mut TimerQueue, n: usize, d, ms| {
            panes[n].set(d, at(ms), t0, q, key(n)).expect("set");
        };
        set(&mut panes, &mut q, 0, Deadline::Stall, 90);
        set(&mut panes, &mut q, 0, Deadline::Drain, 30);
        set(&mut panes, &mut q, 1, Deadline::Backoff, 60);
        // Cleared and released deadlines never fire.
        set(&mut panes, &mut q, 2, Deadline::Stall, 45);
        panes[2].clear(Deadline::Stall, t0, &mut q, key(2));
        set(&mut panes, &mut q, 3, Deadline::Govern, 50);
        panes[3].release(&mut q, key(3));
        // Moved later: fires at its new time only.
        set(&mut panes, &mut q, 1, Deadline::Backoff, 75);

        let mut heard = Vec::new();
        let mut events = Events::with_capacity(8);
        while heard.len() < 3 && started.elapsed() < Duration::from_secs(10) {
            poll.poll(&mut events, Some(Duration::from_secs(1)))
                .expect("poll");
            if events.is_empty() {
                continue;
            }
            let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let now = at(elapsed);
            for k in q.fired(now) {
                let n = k.index() as usize;
                for d in panes[n].fired(now, &mut q, k) {
                    // No deadline fires before it is due (the slack aside).
                    assert!(now.plus(Duration::from_millis(SLACK_MS)) >= panes_due(d, n));
                    heard.push((n, d));
                }
            }
        }
        assert_eq!(
            heard,
            [
                (0, Deadline::Drain),
                (1, Deadline::Backoff),
                (0, Deadline::Stall)
            ]
        );
        assert!(q.is_empty(), "nothing left to wait on");
    }

    /// When each deadline of the test above was due, in ms after t0.
    fn panes_due(d: Deadline, pane: usize) -> Timestamp {
        let ms = match (pane, d) {
            (0, Deadline::Drain) => 30,
            (0, Deadline::Stall) => 90,
            (1, Deadline::Backoff) => 75,
            _ => 0,
        };
        Timestamp::from_millis(1_000_000 + ms)
    }
}
