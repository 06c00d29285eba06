//! A socket colibrid listens on, and whom its recent peers were told to be.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use mio::net::UnixListener;

use crate::core::time::Timestamp;
use crate::daemon::conn::Scope;
use crate::platform::Pid;

#[derive(Debug)]
pub(crate) struct Listener {
    /// `None` once shutdown has begun: closing the socket makes new
    /// connects fail at once instead of waiting in the backlog.
    pub(crate) socket: Option<UnixListener>,
    pub(crate) path: PathBuf,
    pub(crate) scope: Scope,
    pub(crate) peers: PeerMemory,
}

/// How long a peer's scope is remembered.
const REMEMBERED_FOR: Duration = Duration::from_secs(5);
/// Peers remembered at most; past it the memory starts over.
const REMEMBERED: usize = 4096;

/// The scope a walk up a peer's process tree told, by pid, for a short
/// while: a process's place among the agents' trees cannot change
/// (colibrid is every agent's subreaper: none leaves one, and no other
/// process enters one), so a client that connects again and again is
/// walked up once, not at every connection.
#[derive(Debug, Default)]
pub(crate) struct PeerMemory {
    told: HashMap<Pid, (Scope, Timestamp)>,
}

impl PeerMemory {
    pub(crate) fn recall(&self, pid: Pid, now: Timestamp) -> Option<Scope> {
        let (scope, at) = self.told.get(&pid)?;
        (now.since(*at) < REMEMBERED_FOR).then(|| scope.clone())
    }

    pub(crate) fn remember(&mut self, pid: Pid, scope: Scope, now: Timestamp) {
        if self.told.len() >= REMEMBERED {
            self.told.clear();
        }
        self.told.insert(pid, (scope, now));
    }
}
