//! The daemon's one way out for events: [`Daemon::publish`] lends the bus
//! the outlets it writes to (connections, panes, alerter) and the bus does
//! the rest (seq, journal, watchers, alerts).
//!
//! A verb, not the bus's: `bus.rs` is an owner below the daemon and never
//! names it, so the split borrow of the daemon's fields is made here.

use crate::core::time::Timestamp;
use crate::daemon::bus::Outlets;
use crate::daemon::event_loop::Daemon;
use crate::protocol::WatchKind;

impl Daemon {
    /// Hands an event to the bus: the one way out to watchers and syslog.
    pub(crate) fn publish(&mut self, kind: WatchKind, t: Timestamp) {
        let out = Outlets {
            conns: &mut self.conns,
            panes: &mut self.panes,
            alerter: &mut self.alerter,
            dirty: &mut self.dirty_conns,
        };
        self.bus.emit(kind, t, out);
    }
}
