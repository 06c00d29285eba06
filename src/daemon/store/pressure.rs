//! When the PTY reads of a session's panes wait for the logs. Memory is
//! bounded by not reading agents whose records cannot be written fast
//! enough; the rules are pure functions of a few counters ([`Pressure`]),
//! so they are tested as a table, apart from any disk.

use super::SessionStore;

/// Bytes buffered while a batch is with the writer before running agents
/// wait for it ([`SessionStore::read_ahead_full`]): about half a
/// millisecond of parsing for the loop, so reading and writing overlap,
/// while the next batch, which carries the exits and replies buffered
/// meanwhile, stays a write of a fraction of a millisecond. (256 KiB read
/// as fast and made the exit notice under 10 streaming agents 0.3 ms
/// slower at p50.)
pub const READ_AHEAD: usize = 64 * 1024;

/// What a session may always hold unwritten before the total of all
/// sessions holds its agents ([`SessionStore::held_by_total`]).
pub const SESSION_ALLOWANCE: usize = 64 * 1024;

/// The counters the holds are decided on, as they stand now.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Pressure {
    /// Unwritten bytes of the session asked about (0 if none).
    pub(super) session: usize,
    /// Unwritten bytes across all sessions.
    pub(super) total: usize,
    /// `[sessions] buffer_limit`.
    pub(super) buffer_limit: usize,
    /// A batch is with the writer thread.
    pub(super) in_flight: bool,
    /// Bytes of that batch.
    pub(super) in_flight_bytes: usize,
    /// What the logs waiting for the retry of a failed append held when
    /// the batch was built.
    pub(super) waiting_bytes: usize,
}

impl Pressure {
    /// See [`SessionStore::over_limit`].
    pub(super) fn over_limit(&self) -> bool {
        self.session >= self.buffer_limit.max(1)
    }

    /// See [`SessionStore::held_by_total`].
    pub(super) fn held_by_total(&self) -> bool {
        self.total >= self.buffer_limit.saturating_mul(2).max(1)
            && self.session >= SESSION_ALLOWANCE.min(self.buffer_limit)
    }

    /// See [`SessionStore::read_ahead_full`].
    pub(super) fn read_ahead_full(&self) -> bool {
        self.in_flight
            && self
                .total
                .saturating_sub(self.in_flight_bytes)
                .saturating_sub(self.waiting_bytes)
                >= READ_AHEAD
    }

    /// See [`SessionStore::holds_reads`].
    pub(super) fn holds_reads(&self, exited: bool) -> bool {
        self.over_limit() || (!exited && (self.held_by_total() || self.read_ahead_full()))
    }
}

impl SessionStore {
    /// The counters, for a session holding `session` unwritten bytes.
    fn pressure(&self, session: usize) -> Pressure {
        Pressure {
            session,
            total: self.health.pending_bytes,
            buffer_limit: self.cfg.buffer_limit,
            in_flight: self.link.in_flight,
            in_flight_bytes: self.link.in_flight_bytes,
            waiting_bytes: self.link.waiting_bytes,
        }
    }

    /// Unwritten bytes of a session (0 if unknown).
    pub fn pending_bytes(&self, session: &str) -> usize {
        self.by_id
            .get(session)
            .map_or(0, |&i| self.sessions[i].pending())
    }

    /// True while the session holds `buffer_limit` or more unwritten bytes:
    /// the daemon must not read its panes' PTYs until it turns false.
    pub fn over_limit(&self, session: &str) -> bool {
        self.pressure(self.pending_bytes(session)).over_limit()
    }

    /// True while all sessions together hold twice `buffer_limit` or more
    /// unwritten bytes and this one holds [`SESSION_ALLOWANCE`] or more:
    /// its running agents are not read until it turns false. This bounds
    /// what many agents may buffer together when the disk is slow or
    /// failing, while a session that keeps up (a few sessions whose own
    /// logs fail fill the total) is still read.
    pub fn held_by_total(&self, session: &str) -> bool {
        self.pressure(self.pending_bytes(session)).held_by_total()
    }

    /// Whether the PTY reads of a pane of `session` wait for the logs: its
    /// session is over `buffer_limit`, or, for an agent still running, all
    /// sessions are over their total ([`SessionStore::held_by_total`]) or
    /// the read-ahead is full ([`SessionStore::read_ahead_full`]). An agent
    /// that has exited is drained past those two: its exit is reported
    /// only after its last output.
    pub fn holds_reads(&self, session: &str, exited: bool) -> bool {
        self.pressure(self.pending_bytes(session))
            .holds_reads(exited)
    }

    /// True while a batch is with the writer and [`READ_AHEAD`] bytes or
    /// more have been buffered since: running agents are not read until
    /// the batch is done. Reading on while the writer writes keeps one
    /// stream from waiting on the disk; reading on without bound would make
    /// the next batch, and the wait of the replies and exits it carries,
    /// as long as the writer is slow.
    /// The backlog of logs waiting for the retry of a failed append was
    /// buffered before the batch and is not read-ahead.
    pub fn read_ahead_full(&self) -> bool {
        // The read-ahead is the store's, not a session's.
        self.pressure(0).read_ahead_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    fn at(session: usize, total: usize) -> Pressure {
        Pressure {
            session,
            total,
            buffer_limit: LIMIT,
            ..Pressure::default()
        }
    }

    fn in_flight(total: usize, in_flight_bytes: usize, waiting_bytes: usize) -> Pressure {
        Pressure {
            in_flight: true,
            in_flight_bytes,
            waiting_bytes,
            ..at(0, total)
        }
    }

    #[test]
    fn a_session_at_its_buffer_limit_is_held() {
        let zero_limit = Pressure {
            session: 1,
            ..Pressure::default()
        };
        let table = [
            (at(0, 0), false),
            (at(LIMIT - 1, LIMIT - 1), false),
            (at(LIMIT, LIMIT), true),
            (at(LIMIT + 1, 3 * LIMIT), true),
            // A zero limit still lets an empty session be read.
            (Pressure::default(), false),
            (zero_limit, true),
        ];
        for (p, held) in table {
            assert_eq!(p.over_limit(), held, "{p:?}");
        }
    }

    #[test]
    fn the_total_holds_only_sessions_past_their_allowance() {
        let table = [
            (at(SESSION_ALLOWANCE, 2 * LIMIT - 1), false),
            (at(SESSION_ALLOWANCE - 1, 2 * LIMIT), false),
            (at(SESSION_ALLOWANCE, 2 * LIMIT), true),
            (at(0, 10 * LIMIT), false),
        ];
        for (p, held) in table {
            assert_eq!(p.held_by_total(), held, "{p:?}");
        }
        // A limit below the allowance is the allowance.
        let small = Pressure {
            buffer_limit: 1000,
            ..at(1000, 2000)
        };
        assert!(small.held_by_total());
    }

    #[test]
    fn read_ahead_counts_only_what_was_buffered_after_the_batch() {
        let table = [
            (at(0, 10 * READ_AHEAD), false),
            (in_flight(READ_AHEAD - 1, 0, 0), false),
            (in_flight(READ_AHEAD, 0, 0), true),
            (in_flight(2 * READ_AHEAD, READ_AHEAD + 1, 0), false),
            (in_flight(3 * READ_AHEAD, READ_AHEAD, READ_AHEAD + 1), false),
            (in_flight(3 * READ_AHEAD, READ_AHEAD, READ_AHEAD), true),
            // Counters that disagree for a moment do not wrap around.
            (in_flight(0, READ_AHEAD, READ_AHEAD), false),
        ];
        for (p, full) in table {
            assert_eq!(p.read_ahead_full(), full, "{p:?}");
        }
    }

    #[test]
    fn an_exited_agent_is_held_only_by_its_own_limit() {
        let over = at(LIMIT, LIMIT);
        let by_total = at(SESSION_ALLOWANCE, 2 * LIMIT);
        let read_ahead = in_flight(READ_AHEAD, 0, 0);
        let table = [
            (over, false, true),
            (over, true, true),
            (by_total, false, true),
            (by_total, true, false),
            (read_ahead, false, true),
            (read_ahead, true, false),
            (at(0, 0), false, false),
        ];
        for (p, exited, held) in table {
            assert_eq!(p.holds_reads(exited), held, "{p:?} exited={exited}");
        }
    }
}
