//! One client connection: framed requests in, a bounded queue of replies out.
//!
//! A `Conn` owns its stream and its registration. Requests are framed with
//! the same capped [`LineFramer`] the agents' output uses; replies and watch
//! events are shared `Rc<[u8]>` frames queued with a byte count, and write
//! interest is registered only while that queue is non-empty. The loop
//! never waits for a client: a client that does not read fills its queue,
//! stops having its requests served, and (when watching) is dropped.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::rc::Rc;

use mio::net::UnixStream;
use mio::{Interest, Registry, Token};

use crate::core::ingest::{Frame, LineFramer};
use crate::core::time::Timestamp;
use crate::platform::PeerKey;

/// Queued reply bytes above which no further requests of this client are
/// served until it reads (pipelined requests wait; nothing is dropped).
pub const PAUSE_REQUESTS_AT: usize = 1 << 20;
/// A watcher with this much unsent output has fallen behind and is dropped.
pub const WATCH_QUEUE_LIMIT: usize = 1 << 20;
/// A non-watching client this far behind is not reading at all: closed.
pub const REPLY_QUEUE_LIMIT: usize = 64 << 20;
/// Bytes read from one client per wakeup before others get a turn.
const READ_BUDGET: usize = 256 * 1024;

/// What a connection may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The operator socket: every command.
    Operator,
    /// A per-jail socket: agent commands, and only for that jail's panes.
    Jail(String),
}

impl Scope {
    pub fn name(&self) -> String {
        match self {
            Scope::Operator => "operator".to_string(),
            Scope::Jail(j) => format!("jail:{j}"),
        }
    }
}

/// Which events a watcher receives.
#[derive(Clone, Debug, Default)]
pub struct WatchFilter {
    /// Pane ids; every pane when `None`.
    pub panes: Option<Vec<String>>,
}

/// The result of reading what a client sent.
#[derive(Debug, Default)]
pub struct Received {
    /// A request line passed the cap: reply with an error and close.
    pub oversize: bool,
    /// The client closed its side.
    pub eof: bool,
    /// The read budget ran out before `WouldBlock`: come back to it.
    pub more: bool,
}

/// Where a connection came from and when it last did anything: for the
/// per-listener and per-peer caps and the idle close (see `server`).
#[derive(Copy, Clone, Debug, Default)]
pub struct Seat {
    /// Index of the listener it was accepted on.
    pub listener: usize,
    /// `None` when the kernel would not say who the peer is.
    pub peer: Option<PeerKey>,
    /// The last complete request received, or reply bytes the peer took.
    pub last_progress: Option<Timestamp>,
}

#[derive(Debug)]
pub struct Conn {
    pub stream: UnixStream,
    pub token: Token,
    pub scope: Scope,
    pub watch: Option<WatchFilter>,
    /// Close once the queue is flushed; no more requests are read.
    pub closing: bool,
    pub closing_since: Option<Timestamp>,
    /// Readable edge not fully consumed (budget hit, or requests paused).
    pub read_pending: bool,
    /// Complete request lines not served yet (the client sent faster than
    /// it reads replies). Nothing more is read while any wait here.
    pub requests: VecDeque<Vec<u8>>,
    /// The client closed its side: serve what is queued, then close.
    pub eof: bool,
    pub seat: Seat,
    framer: LineFramer,
    out: VecDeque<Rc<[u8]>>,
    out_bytes: usize,
    /// Bytes of `out.front()` already written.
    head_written: usize,
    write_interest: bool,
}

impl Conn {
    pub fn new(stream: UnixStream, token: Token, scope: Scope, max_request: usize) -> Conn {
        Conn {
            stream,
            token,
            scope,
            watch: None,
            closing: false,
            closing_since: None,
            read_pending: false,
            requests: VecDeque::new(),
            eof: false,
            seat: Seat::default(),
            framer: LineFramer::new(max_request),
            out: VecDeque::new(),
            out_bytes: 0,
            head_written: 0,
            write_interest: false,
        }
    }

    pub fn queued_bytes(&self) -> usize {
        self.out_bytes
    }

    /// Whether requests should be served now (the client keeps up).
    pub fn accepts_requests(&self) -> bool {
        !self.closing && self.out_bytes < PAUSE_REQUESTS_AT
    }

    /// Reads up to the budget, queueing complete request lines.
    pub fn receive(&mut self, buf: &mut [u8]) -> Received {
        let mut got = Received::default();
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                got.more = true;
                return got;
            }
            let n = match self.stream.read(buf) {
                Ok(0) => {
                    got.eof = true;
                    return got;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    got.eof = true;
                    return got;
                }
            };
            budget = budget.saturating_sub(n);
            let oversize = &mut got.oversize;
            let requests = &mut self.requests;
            self.framer.feed(&buf[..n], |frame| match frame {
                Frame::Line(l) => requests.push_back(l.to_vec()),
                Frame::Oversize => *oversize = true,
            });
            if got.oversize || !self.requests.is_empty() {
                return got;
            }
        }
    }

    /// Queues a frame. Returns false when the queue passed its limit (the
    /// caller decides: drop a watcher, close a non-reader).
    pub fn enqueue(&mut self, frame: Rc<[u8]>) -> bool {
        self.out_bytes += frame.len();
        self.out.push_back(frame);
        let limit = if self.watch.is_some() {
            WATCH_QUEUE_LIMIT
        } else {
            REPLY_QUEUE_LIMIT
        };
        self.out_bytes <= limit
    }

    /// Drops every queued frame not yet started (the one being written is
    /// kept so the stream stays line-framed), then queues `last` and marks
    /// the connection for closing.
    pub fn drop_backlog_and_close(&mut self, last: Rc<[u8]>, now: Timestamp) {
        let head = if self.head_written > 0 {
            self.out.pop_front()
        } else {
            None
        };
        self.out.clear();
        self.out_bytes = 0;
        if let Some(h) = head {
            self.out_bytes += h.len();
            self.out.push_back(h);
        }
        self.out_bytes += last.len();
        self.out.push_back(last);
        self.watch = None;
        self.close_after_flush(now);
    }

    pub fn close_after_flush(&mut self, now: Timestamp) {
        if !self.closing {
            self.closing = true;
            self.closing_since = Some(now);
        }
    }

    /// Writes queued output until the socket would block.
    pub fn flush(&mut self) -> io::Result<()> {
        while let Some(front) = self.out.front() {
            match self.stream.write(&front[self.head_written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.head_written += n;
                    if self.head_written == front.len() {
                        self.out_bytes -= front.len();
                        self.out.pop_front();
                        self.head_written = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Idle: nothing received or taken for `limit`. A watcher with nothing
    /// queued waits on us, not we on it, so it is never idle.
    pub fn is_idle(&self, limit: std::time::Duration, now: Timestamp) -> bool {
        if self.closing || (self.watch.is_some() && self.out.is_empty()) {
            return false;
        }
        self.seat
            .last_progress
            .is_some_and(|since| now.since(since) >= limit)
    }

    pub fn is_flushed(&self) -> bool {
        self.out.is_empty()
    }

    /// Keeps write interest registered exactly while output is queued.
    pub fn update_interest(&mut self, registry: &Registry) -> io::Result<()> {
        let want = !self.out.is_empty();
        if want == self.write_interest {
            return Ok(());
        }
        let interest = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        registry.reregister(&mut self.stream, self.token, interest)?;
        self.write_interest = want;
        Ok(())
    }
}
