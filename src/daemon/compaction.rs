//! `compact-session`'s replies, and what the store's other jobs on whole
//! logs (retention) report. The compaction runs as the store's
//! rotation job, a bounded slice per wakeup (`SessionStore::
//! request_compaction`), so compacting a log of gigabytes never holds the
//! loop; the request is answered when the job ends, echoing its `id`.
//! Other requests on the same connection are served meanwhile.

pub(crate) mod waiter;

use serde_json::Value;

use crate::core::time::Timestamp;
use crate::daemon::diag::log_info;
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::store::{RotationDone, StoreError};
use crate::protocol::{self, CommandError, CompactReply, ErrorCode, Reply};
use waiter::CompactWaiter;

/// The error a store failure gives a client.
pub(crate) fn store_error(e: &StoreError) -> CommandError {
    let code = match e {
        StoreError::NotFound { .. } => ErrorCode::NotFound,
        StoreError::InvalidSessionId { .. } | StoreError::TooLarge { .. } => ErrorCode::Invalid,
        StoreError::Locked { .. } | StoreError::Io { .. } | StoreError::WorldWritable { .. } => {
            ErrorCode::Store
        }
    };
    CommandError::new(code, e.to_string())
}

impl Daemon {
    /// Starts (or joins) the compaction of `session`; the reply follows
    /// its end.
    pub(crate) fn compact_session(
        &mut self,
        session: &str,
        conn: ConnId,
        rid: Option<Value>,
    ) -> Result<(), CommandError> {
        self.store
            .request_compaction(session)
            .map_err(|e| store_error(&e))?;
        self.compact_waiters.push(CompactWaiter {
            session: session.to_string(),
            conn,
            rid,
        });
        Ok(())
    }

    /// A rotation ended: answers whoever waits for that session's
    /// compaction with its report, or its error.
    pub(crate) fn compaction_ended(&mut self, done: &RotationDone, t: Timestamp) {
        for w in self.take_compact_waiters(&done.session) {
            let line = match &done.outcome {
                Ok(r) => protocol::ok_line(
                    w.rid.as_ref(),
                    &Reply::Compact(CompactReply {
                        before_bytes: r.before_bytes,
                        after_bytes: r.after_bytes,
                        dropped_lines: r.dropped_lines,
                    }),
                ),
                Err(e) => {
                    let e = store_error(e);
                    protocol::err_line(w.rid.as_ref(), e.code, &e.message)
                }
            };
            self.send(w.conn, line.into(), t);
        }
    }

    /// Answers the waiters of every compaction the store gave up (its
    /// log's torn tail could not be cut, or the log was replaced while it
    /// ran), so none waits for ever.
    pub(crate) fn answer_given_up_compactions(&mut self, t: Timestamp) {
        for (session, why) in self.store.take_given_up_compactions() {
            for w in self.take_compact_waiters(&session) {
                let msg = format!("the compaction of session {session}: {why}");
                let line = protocol::err_line(w.rid.as_ref(), ErrorCode::Store, &msg);
                self.send(w.conn, line.into(), t);
            }
        }
    }

    /// Says which finished sessions `[sessions] retain` deleted.
    pub(crate) fn log_retired_sessions(&mut self) {
        let retired = self.store.take_retired();
        if retired.is_empty() {
            return;
        }
        let retain = humantime::format_duration(self.settings.store.retain);
        log_info!(
            "deleted the logs of {} finished session(s) last written over {retain} ago ([sessions] retain): {}",
            retired.len(),
            retired.join(", ")
        );
    }

    /// Removes and returns the waiters of `session`'s compaction.
    fn take_compact_waiters(&mut self, session: &str) -> Vec<CompactWaiter> {
        let (taken, waiting) = std::mem::take(&mut self.compact_waiters)
            .into_iter()
            .partition(|w| w.session == session);
        self.compact_waiters = waiting;
        taken
    }

    /// A closed connection waits for nothing (its id may be reused).
    pub(crate) fn forget_compaction_waiter(&mut self, conn: ConnId) {
        self.compact_waiters.retain(|w| w.conn != conn);
    }

    /// Connections waiting for a compaction: not idle.
    pub(crate) fn compaction_waiting(&self, conn: ConnId) -> bool {
        self.compact_waiters.iter().any(|w| w.conn == conn)
    }
}
