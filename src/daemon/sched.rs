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
//! no agent starves another. Rounds go on while the pass's budget lasts
//! ([`BulkPass`]), so one busy agent alone gets the whole pass rather than
//! a quantum of it: every pass costs a poll and a batch for the log writer
//! thread (whose CPU on one stream of 42-byte lines fell by a third when
//! passes took their whole budget). The loop stays single-threaded.
//!
//! Why these numbers: parsing, folding and logging cost about 23 µs per KiB
//! of agent output (256 KiB took about 6 ms), so a pass's bulk budget of
//! 32 KiB is under 1 ms of work, the exit notice's target under load being
//! 2 ms at p50.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::core::time::Timestamp;
use crate::daemon::source::ConnId;
use crate::daemon::source::HostRunId;
use crate::daemon::source::PaneKey;

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
    /// Urgent: a host operation's output left by its read budget, or its
    /// exit noticed at registration.
    Hostop(HostRunId),
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
            Pending::Conn(_) | Pending::Exit(_) | Pending::Accept(_) | Pending::Hostop(_) => {
                self.urgent.push_back(p)
            }
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

/// What a wakeup leaves for the next one besides queued work: whether the
/// loop may sleep, and until when. Kept here, not on `Daemon`, so the loop's
/// sleep decision reads one owner ([`Wakeups::must_not_sleep`],
/// [`Wakeups::due`]) and each flag has one home.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    /// Panes whose reads wait for their session log to drain.
    pub(crate) store_blocked: BTreeSet<PaneKey>,
    /// The first pane held since `retry_store_blocked` last ran: the next
    /// retry starts with it.
    pub(crate) store_blocked_first: Option<PaneKey>,
    /// The last flush hit its budget: come back without sleeping.
    pub(crate) store_pending: bool,
    /// The last flush failed (disk full or failing): retried at the next
    /// wakeup of any kind (at the latest the heartbeat), never in a spin.
    pub(crate) store_failing: bool,
    /// An accept was cut short (budget, or want of fds): retried after the
    /// frames of this wakeup.
    pub(crate) accept_blocked: bool,
    /// An accept failed for want of fds (EMFILE/ENFILE): the PTY masters
    /// kept in `deferred_closes` are closed before it is retried.
    pub(crate) accept_starved: bool,
    /// The agent records changed since they were last written.
    pub(crate) records_dirty: bool,
    /// Written by then at the latest, even if frames still wait for the
    /// writers (`supervise::write_records_after_frames`).
    pub(crate) records_due: Option<Timestamp>,
    /// When the next `waitpid(-1)` sweep for orphans is due, and when the
    /// last one ran (see `signals::on_child_signal`).
    pub(crate) orphan_sweep_at: Option<Timestamp>,
    pub(crate) last_orphan_sweep: Option<Timestamp>,
}

/// The store's side of the sleep decision, as the store reports it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct StoreWork {
    /// A batch is with the log writer: its completion wakes the loop.
    pub(crate) writer_busy: bool,
    pub(crate) compaction: bool,
    pub(crate) index: bool,
}

impl Wakeups {
    /// Whether the store has work the loop must come back for at once.
    /// Panes blocked on a failing disk are retried at the next wakeup of
    /// any kind (the heartbeat at the latest), not in a spin; while the
    /// writer holds a batch, its completion is the wakeup.
    pub(crate) fn store_busy(&self, store: StoreWork) -> bool {
        if store.writer_busy {
            return false;
        }
        self.store_pending
            || store.compaction
            || store.index
            || (!self.store_blocked.is_empty() && !self.store_failing)
    }

    /// The earliest put-off work: an orphan sweep after a SIGCHLD, agent
    /// records put off behind the frames, and `also` (the alerter's).
    pub(crate) fn due(&self, also: Option<Timestamp>) -> Option<Timestamp> {
        [self.orphan_sweep_at, self.records_due, also]
            .into_iter()
            .flatten()
            .min()
    }
}

/// The quantum of the next pane's turn, with `left` of the pass's budget.
pub(crate) fn quantum(left: usize) -> usize {
    PTY_QUANTUM.min(left)
}

/// One pass's bulk turns: round robin over the panes queued, a quantum
/// each, rounds after rounds until the budget is spent, so one busy agent
/// alone gets the whole pass. A round that reads nothing ends the pass
/// (its panes blocked or drained). A pane queued again during a round
/// waits for the next one, behind the panes already queued.
#[derive(Debug)]
pub(crate) struct BulkPass {
    left: usize,
    /// Turns left in this round.
    round: usize,
    /// `left` when this round began; `None` before the first.
    round_start: Option<usize>,
}

impl BulkPass {
    pub(crate) fn new(budget: usize) -> BulkPass {
        BulkPass {
            left: budget,
            round: 0,
            round_start: None,
        }
    }

    /// The next pane to read and the most it may read, or `None` when the
    /// pass is over. Report what the read took with [`BulkPass::spent`].
    pub(crate) fn next(&mut self, sched: &mut Sched) -> Option<(PaneKey, usize)> {
        if self.left == 0 {
            return None;
        }
        if self.round == 0 {
            if self.round_start == Some(self.left) {
                return None;
            }
            self.round = sched.bulk_len();
            self.round_start = Some(self.left);
        }
        self.round = self.round.checked_sub(1)?;
        let key = sched.next_bulk()?;
        Some((key, quantum(self.left)))
    }

    pub(crate) fn spent(&mut self, bytes: usize) {
        self.left = self.left.saturating_sub(bytes);
    }
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

    /// Runs one pass: each pane reads what `ready` says it has (at most
    /// its quantum) and is queued again if that filled its quantum, as
    /// `read_pty` does. Returns the turns taken.
    fn pass(s: &mut Sched, ready: &mut [usize]) -> Vec<(u32, usize)> {
        let mut turns = Vec::new();
        let mut bulk = BulkPass::new(PTY_PASS_BUDGET);
        while let Some((key, quantum)) = bulk.next(s) {
            let i = key.index() as usize;
            let n = ready[i].min(quantum);
            ready[i] -= n;
            turns.push((key.index(), n));
            bulk.spent(n);
            if n == quantum {
                s.push(Pending::Pty(key));
            }
        }
        turns
    }

    fn queue(s: &mut Sched, panes: u32) {
        for i in 0..panes {
            s.push(Pending::Pty(PaneKey::new(i, 0)));
        }
    }

    #[test]
    fn one_busy_pane_gets_the_whole_pass_in_quanta() {
        let mut s = Sched::default();
        queue(&mut s, 1);
        let turns = pass(&mut s, &mut [1 << 20]);
        assert_eq!(turns, vec![(0, PTY_QUANTUM); PTY_PASS_BUDGET / PTY_QUANTUM]);
        assert_eq!(s.bulk_len(), 1, "still busy: first in the next pass");
    }

    #[test]
    fn busy_panes_share_a_pass_round_robin_and_the_next_pass_goes_on() {
        let mut s = Sched::default();
        queue(&mut s, 6);
        let mut ready = [1 << 20; 6];
        let first: Vec<u32> = pass(&mut s, &mut ready).iter().map(|t| t.0).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        let second: Vec<u32> = pass(&mut s, &mut ready).iter().map(|t| t.0).collect();
        assert_eq!(second, vec![4, 5, 0, 1], "no pane waits two passes");
    }

    #[test]
    fn a_pass_ends_when_its_panes_are_drained() {
        let mut s = Sched::default();
        queue(&mut s, 2);
        // Pane 0 has two quanta and a bit, pane 1 a bit: then both block.
        let turns = pass(&mut s, &mut [2 * PTY_QUANTUM + 10, 10]);
        assert_eq!(
            turns,
            vec![(0, PTY_QUANTUM), (1, 10), (0, PTY_QUANTUM), (0, 10)]
        );
        assert_eq!(s.bulk_len(), 0);
    }

    #[test]
    fn a_round_that_reads_nothing_ends_the_pass() {
        let mut s = Sched::default();
        queue(&mut s, 2);
        let mut bulk = BulkPass::new(PTY_PASS_BUDGET);
        let mut turns = 0;
        // Panes queued again without reading (held by backpressure, say):
        // one round, then the pass is over.
        while let Some((key, _)) = bulk.next(&mut s) {
            turns += 1;
            bulk.spent(0);
            s.push(Pending::Pty(key));
        }
        assert_eq!(turns, 2);
    }

    #[test]
    fn a_turn_never_exceeds_what_is_left_of_the_pass() {
        assert_eq!(quantum(PTY_PASS_BUDGET), PTY_QUANTUM);
        assert_eq!(quantum(100), 100);
    }
}
