//! The loop's scheduler: work left for later, by class, and every budget.
//!
//! A wakeup serves its events in two classes. **Urgent** work (child exits,
//! timers, signals, accepts, client requests) is done as its event is
//! dispatched, and what a budget cut short waits in the urgent queue, which
//! is served first in the pass that follows. **Bulk** work (reading agents'
//! PTYs) is only queued while events are dispatched, then served after all
//! urgent work, round robin, a quantum per pane and a budget per pass, so
//! the pass stays short and the next exit notice is never more than one
//! pass away. A pane its quantum cut short goes to the back of the queue:
//! no agent starves another. Rounds go on while the pass's budget lasts,
//! so one busy agent alone gets the whole pass rather than a quantum of it
//! (every pass costs a poll and a batch for the log writer thread: at a
//! quantum a pass, a stream of 42-byte lines spent a sixth of the loop's
//! time on them). The loop stays single-threaded.
//!
//! Why these numbers: parsing, folding and logging cost about 23 µs per KiB
//! of agent output (256 KiB took about 6 ms), so a pass's bulk budget of
//! 32 KiB is under 1 ms of work, the exit notice's target under load being
//! 2 ms at p50.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::daemon::panes::PaneKey;
use crate::daemon::source::ConnId;

/// Bytes read from one PTY in its turn before the next pane gets one.
pub(crate) const PTY_QUANTUM: usize = 8 * 1024;
/// Bytes read from all PTYs together in one pass of the loop.
pub(crate) const PTY_PASS_BUDGET: usize = 32 * 1024;
/// Bytes read from the PTY of an agent that just exited, at once: its
/// exit is only reported once its output is in, and what a finished agent
/// still holds is small.
pub(crate) const EXIT_DRAIN_BUDGET: usize = 256 * 1024;
/// The read buffer, shared by PTYs and clients.
pub(crate) const READ_BUF: usize = 64 * 1024;
/// Log bytes a running rotation may read per wakeup. Compaction reads a log
/// twice; 125 MB took 0.5 s in one piece, so this is about 10 ms of work.
pub(crate) const COMPACTION_STEP_BYTES: usize = 4 << 20;
/// Requests served plus reads made for one client per wakeup.
pub(crate) const CONN_STEPS_PER_WAKEUP: usize = 64;
/// A connection marked for closing is closed after this long even if its
/// peer never reads the last lines.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

// A pane's turn fits in a pass, and a pass in one read buffer.
const _: () = assert!(PTY_QUANTUM <= PTY_PASS_BUDGET && PTY_PASS_BUDGET <= READ_BUF);

/// Work left over from a wakeup because a budget ran out, or queued for
/// after the urgent work.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Pending {
    /// Bulk: read this pane's PTY.
    Pty(PaneKey),
    /// Urgent: serve this client's requests.
    Conn(ConnId),
    /// Urgent: an exit noticed at registration (the child died before we
    /// watched).
    Exit(PaneKey),
    /// Urgent: a listener with connections still waiting to be accepted
    /// (the accept budget of a wakeup ran out).
    Accept(usize),
}

/// Pending work by class; each item is queued at most once.
#[derive(Debug, Default)]
pub(crate) struct Sched {
    urgent: VecDeque<Pending>,
    bulk: VecDeque<PaneKey>,
    queued: BTreeSet<Pending>,
}

impl Sched {
    pub(crate) fn push(&mut self, p: Pending) {
        if !self.queued.insert(p) {
            return;
        }
        match p {
            Pending::Pty(key) => self.bulk.push_back(key),
            Pending::Conn(_) | Pending::Exit(_) | Pending::Accept(_) => self.urgent.push_back(p),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.urgent.is_empty() && self.bulk.is_empty()
    }

    /// The urgent work queued so far; what it queues in turn waits for the
    /// next pass, so one client cannot keep the pass to itself.
    pub(crate) fn take_urgent(&mut self) -> Vec<Pending> {
        let taken: Vec<Pending> = self.urgent.drain(..).collect();
        for p in &taken {
            self.queued.remove(p);
        }
        taken
    }

    /// How many panes wait for a turn now.
    pub(crate) fn bulk_len(&self) -> usize {
        self.bulk.len()
    }

    /// The next pane in the round robin.
    pub(crate) fn next_bulk(&mut self) -> Option<PaneKey> {
        let key = self.bulk.pop_front()?;
        self.queued.remove(&Pending::Pty(key));
        Some(key)
    }
}

/// The quantum of the next pane's turn, with `left` of the pass's budget.
pub(crate) fn quantum(left: usize) -> usize {
    PTY_QUANTUM.min(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_work_is_separate_from_bulk_and_queued_once() {
        let mut s = Sched::default();
        s.push(Pending::Conn(ConnId(1)));
        s.push(Pending::Conn(ConnId(1)));
        s.push(Pending::Conn(ConnId(2)));
        s.push(Pending::Accept(0));
        s.push(Pending::Accept(0));
        assert_eq!(s.bulk_len(), 0);
        let taken = s.take_urgent();
        assert_eq!(
            taken,
            vec![
                Pending::Conn(ConnId(1)),
                Pending::Conn(ConnId(2)),
                Pending::Accept(0)
            ]
        );
        assert!(s.is_empty());
        // Once taken, it may be queued again (a budget cut it short).
        s.push(Pending::Conn(ConnId(1)));
        assert!(!s.is_empty());
    }

    #[test]
    fn a_turn_never_exceeds_what_is_left_of_the_pass() {
        assert_eq!(quantum(PTY_PASS_BUDGET), PTY_QUANTUM);
        assert_eq!(quantum(100), 100);
    }
}
