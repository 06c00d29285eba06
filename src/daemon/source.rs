//! The token space: one slab whose entries say what each mio token names.
//!
//! Every registered thing (listeners, connections, PTY masters, exit
//! watches, timers, the signal source) takes its token from this slab, so
//! an event dispatches on `sources[token]` alone. An event whose slot is
//! vacant is stale (the source was removed in the same wakeup) and is
//! dropped; mio allows spurious events.

use mio::Token;
use slab::Slab;

/// A pane in the pane table: its slot's index and the generation the slot
/// had when the pane was added. Defined here, with the other things a
/// token names, so the token space depends on nothing above it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaneKey {
    index: u32,
    generation: u32,
}

impl PaneKey {
    pub(crate) fn new(index: u32, generation: u32) -> PaneKey {
        PaneKey { index, generation }
    }

    pub(crate) fn index(self) -> u32 {
        self.index
    }

    pub(crate) fn generation(self) -> u32 {
        self.generation
    }
}

/// A host operation's run (`hostop`): a serial number, never reused, so a
/// late event of a finished run finds nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostRunId(pub u64);

/// Which of a host operation's sources woke the loop.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HostopWake {
    /// Its output pipe is readable (or closed).
    Output,
    /// The kernel's exit notice for its process.
    Exit,
    /// Its timeout's timer.
    Timeout,
}

/// Index of a client connection in the daemon's connection slab.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub usize);

/// What a token names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A listening socket; the index is into the daemon's listener list.
    Listener(usize),
    Conn(ConnId),
    /// The PTY master of a pane's agent.
    Pty(PaneKey),
    /// The kernel's exit notice for a pane's agent.
    Exit(PaneKey),
    /// The deadline timer of every pane (stall, drain after exit, restart
    /// backoff): `timers::TimerQueue`.
    Timers,
    Heartbeat,
    /// The shutdown grace deadline.
    Shutdown,
    Signals,
    /// The control plane's claim acknowledgement deadline.
    TaskAck,
    /// A running host operation's output, exit or timeout.
    Hostop(HostRunId, HostopWake),
}

#[derive(Debug, Default)]
pub struct Tokens {
    slab: Slab<Source>,
}

impl Tokens {
    pub fn insert(&mut self, source: Source) -> Token {
        Token(self.slab.insert(source))
    }

    pub fn get(&self, token: Token) -> Option<Source> {
        self.slab.get(token.0).copied()
    }

    pub fn remove(&mut self, token: Token) {
        if self.slab.contains(token.0) {
            self.slab.remove(token.0);
        }
    }
}
