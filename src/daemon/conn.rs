//! One client connection: framed requests in, a bounded queue of replies out.
//!
//! A `Conn` owns its stream and its registration. Requests are framed with
//! the same capped [`LineFramer`] the agents' output uses; replies and watch
//! events are shared `Rc<[u8]>` frames queued with a byte count, and write
//! interest is registered only while that queue is non-empty. The loop
//! never waits for a client: a client that does not read fills its queue,
//! stops having its requests served, and (when watching) is dropped.
//!
//! A reply too large to hold (`get-session`'s dump) is a [`ReplyBody`]: the
//! connection carries it and the loop asks it for the next slice only while
//! the queue is below [`BODY_LOW_WATER`], so a client that does not read
//! costs one slice, not the whole reply.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::rc::Rc;

use mio::net::UnixStream;
use mio::{Interest, Registry, Token};

use crate::core::ingest::{Frame, LineFramer};
use crate::core::time::Timestamp;
use crate::daemon::approvals::desk::ApprovalDesk;
use crate::daemon::panes::PaneTable;
use crate::platform::PeerKey;

/// Queued reply bytes above which no further requests of this client are
/// served until it reads (pipelined requests wait; nothing is dropped).
pub const PAUSE_REQUESTS_AT: usize = 1 << 20;
/// A watcher with this much unsent output is behind; it is dropped once it
/// has taken nothing for `WATCH_BEHIND_GRACE`. The limit applies to what the
/// client failed to take across passes, never to what one pass queued: a
/// burst may queue more than this in one pass, and a watcher that reads as
/// fast as the daemon writes takes it in the passes that follow.
pub const WATCH_QUEUE_LIMIT: usize = 1 << 20;
/// How long a watcher more than `WATCH_QUEUE_LIMIT` behind may take
/// nothing before it is dropped.
pub const WATCH_BEHIND_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// A watcher this far behind is dropped at once, whatever its pace. The
/// frames' bytes are shared between the watchers they go to; what each
/// watcher holds on its own is bounded by `WATCH_FRAME_LIMIT`.
pub const WATCH_HARD_LIMIT: usize = 16 << 20;
/// A watcher with this many frames queued is dropped at once, whatever its
/// pace. Each queued frame is an entry of the watcher's own (a pointer to
/// the shared frame and its marks, 40 bytes), which the byte limits do not
/// see: with events of 150 bytes a watcher reached `WATCH_HARD_LIMIT`
/// only after 110,000 of them, over 4 MiB of entries per watcher, and 200
/// watchers that never read took the daemon to 773 MB. At this count a
/// watcher's entries are at most 640 KiB (the queue's capacity is a power
/// of two and stops here), while a pass queues a few thousand events (its
/// 32 KiB of agent output, 1,500 state-changing lines of 22 bytes; what
/// waits for the log writer is bounded by backpressure) and an exit's
/// drain of 256 KiB some 11,000, so a watcher that keeps up is not
/// dropped for it.
pub const WATCH_FRAME_LIMIT: usize = 16 << 10;
/// A non-watching client this far behind is not reading at all: closed.
pub const REPLY_QUEUE_LIMIT: usize = 64 << 20;
/// Bytes read from one client per wakeup before others get a turn.
const READ_BUDGET: usize = 256 * 1024;

/// A streamed reply's next slice is made only while less than this is
/// queued: a client that stops reading holds at most this plus one slice.
pub const BODY_LOW_WATER: usize = 256 << 10;

/// What a streamed reply reads while it makes its slices, borrowed apart
/// from the connection table (the body is taken out of its connection
/// meanwhile): sozu's split borrow, so a reply body never holds the whole
/// daemon and this module never names it.
pub struct BodySources<'a> {
    pub panes: &'a mut PaneTable,
    pub approvals: &'a ApprovalDesk,
    /// The default stall threshold (`[daemon] stall_after`).
    pub stall_after: std::time::Duration,
    /// The host name, shown to the operator only.
    pub host: &'a str,
}

/// A reply made a slice at a time as its client drains (see
/// `daemon::session_stream`). Each call does a bounded amount of work and
/// appends the next bytes of the one reply line to `out`; the slices of a
/// reply, concatenated, are exactly the reply line (with its `\n`).
pub trait ReplyBody: std::fmt::Debug {
    /// Appends the next slice; `Done` once the reply is complete. An error
    /// leaves the reply cut short: the connection must be closed. `d` is
    /// the daemon as it is now (a snapshot reads its panes from it, and
    /// keeps their text: `daemon::pane_text`).
    fn next_slice(
        &mut self,
        src: &mut BodySources<'_>,
        out: &mut Vec<u8>,
    ) -> io::Result<BodyProgress>;

    /// An observation of the daemon's state now (a snapshot), which waits
    /// for no writer ([`Marks::OBSERVED`]).
    fn observation(&self) -> bool {
        false
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BodyProgress {
    More,
    Done,
}

/// A queued frame: shared between clients (events, fanned out), or this
/// client's own (a streamed reply's slice, moved in without a copy).
#[derive(Debug)]
enum OutFrame {
    Shared(Rc<[u8]>),
    Owned(Vec<u8>),
}

impl std::ops::Deref for OutFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            OutFrame::Shared(f) => f,
            OutFrame::Owned(f) => f,
        }
    }
}

/// Frames handed to one `writev` (at most `IOV_MAX`, 1024 on both systems).
const WRITE_SLICES: usize = 256;

/// What a frame waits for before it may leave: the session log batch
/// that holds the lines it reports (`SessionStore::log_mark`) and the watch
/// journal's seq that holds the events it reports (`Bus::seq`). The same
/// pair, as confirmed by the two writers, says what may leave now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Marks {
    pub log: u64,
    pub journal: u64,
}

impl Marks {
    /// A frame queued in this pass, before the pass's flushes; also "all
    /// confirmed" (shutdown, once the logs are final).
    pub const ALL: Marks = Marks {
        log: u64::MAX,
        journal: u64::MAX,
    };

    /// A reply that reports the daemon's state now (`status`, a snapshot,
    /// `approvals`, …) and acknowledges nothing: it leaves as soon as the
    /// frames before it have. Held for the writers, it waited on the state
    /// file system, and a frozen one (`fsfreeze`, a stalled NFS server)
    /// left the operator with no answer at all.
    pub const OBSERVED: Marks = Marks { log: 0, journal: 0 };

    /// Whether both writers have confirmed what a frame with these marks
    /// waits for.
    fn within(self, confirmed: Marks) -> bool {
        self.log <= confirmed.log && self.journal <= confirmed.journal
    }
}

/// The marks of a frame queued in this pass, before the pass's flushes.
const UNSTAMPED: Marks = Marks::ALL;

/// What a connection may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The operator socket: every command.
    Operator,
    /// A per-jail socket: agent commands, and only for that jail's panes.
    Jail(String),
    /// A peer the kernel places in an agent's process tree, on any socket:
    /// agent commands, as that agent (`pane`, its id), and only its own
    /// pane. `pane` is empty for a stray: a process colibrid reaped into
    /// its care (an agent's orphan) that names no pane.
    Agent { pane: String, jail: Option<String> },
}

impl Scope {
    pub fn name(&self) -> String {
        match self {
            Scope::Operator => "operator".to_string(),
            Scope::Jail(j) => format!("jail:{j}"),
            Scope::Agent { pane, .. } if pane.is_empty() => "agent:unknown".to_string(),
            Scope::Agent { pane, .. } => format!("agent:{pane}"),
        }
    }

    /// The agent a connection speaks as, if it is one.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Scope::Agent { pane, .. } => Some(pane),
            _ => None,
        }
    }

    /// The jail a connection is confined to, if any.
    pub fn jail(&self) -> Option<&str> {
        match self {
            Scope::Jail(j) => Some(j),
            Scope::Agent { jail, .. } => jail.as_deref(),
            Scope::Operator => None,
        }
    }
}

/// Which events a watcher receives.
#[derive(Clone, Debug, Default)]
pub struct WatchFilter {
    /// Pane ids; every pane when `None`.
    pub panes: Option<Vec<String>>,
    /// State events coalesced per pane and pass (`watch`'s `mode`).
    pub changes_only: bool,
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
    /// `scope` is told in full (the peer's process tree walked), not only
    /// from its session at accept.
    pub identified: bool,
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
    /// Frames with the marks they wait for: a frame leaves only once the
    /// session log and the watch journal hold what it reports.
    out: VecDeque<(OutFrame, Marks)>,
    out_bytes: usize,
    /// Bytes of `out.front()` already written.
    head_written: usize,
    write_interest: bool,
    /// Since when a watcher more than `WATCH_QUEUE_LIMIT` behind has taken
    /// nothing.
    behind_since: Option<Timestamp>,
    /// Bytes written by the last flush.
    last_written: usize,
    /// The streamed reply still being made; requests wait until it is done.
    body: Option<Box<dyn ReplyBody>>,
    /// Frames queued while a body is being made (watch events, attach
    /// output, a deferred reply): they follow the body's whole line, never
    /// cut into it. Counted in `out_bytes`, so the queue limits see them.
    held: VecDeque<Rc<[u8]>>,
    held_bytes: usize,
    /// The last frame written whole did not end a line (a streamed
    /// reply's slice).
    line_open: bool,
}

impl Conn {
    pub fn new(stream: UnixStream, token: Token, scope: Scope, max_request: usize) -> Conn {
        Conn {
            stream,
            token,
            scope,
            identified: false,
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
            behind_since: None,
            last_written: 0,
            body: None,
            held: VecDeque::new(),
            held_bytes: 0,
            line_open: false,
        }
    }

    pub fn queued_bytes(&self) -> usize {
        self.out_bytes
    }

    /// Whether requests should be served now (the client keeps up, and
    /// no streamed reply is still being made: replies stay in order).
    pub fn accepts_requests(&self) -> bool {
        !self.closing && self.body.is_none() && self.out_bytes < PAUSE_REQUESTS_AT
    }

    /// Makes `body` the next reply, after what is queued.
    pub fn start_body(&mut self, body: Box<dyn ReplyBody>) {
        self.body = Some(body);
    }

    /// A streamed reply has more to make and the client room for it.
    pub fn body_wants_more(&self) -> bool {
        self.body.is_some() && !self.closing && self.out_bytes - self.held_bytes < BODY_LOW_WATER
    }

    /// Takes the streamed reply out to make its next slice when the client
    /// has room for it (`None` otherwise); hand the slice and the body back
    /// with [`Conn::queue_slice`]. Out, because making a slice may read the
    /// whole daemon (a snapshot's panes), this connection included.
    pub fn take_body(&mut self) -> Option<Box<dyn ReplyBody>> {
        if !self.body_wants_more() {
            return None;
        }
        self.body.take()
    }

    /// Queues a slice made by the body `take_body` gave out; keeps the body
    /// for the next one, or drops it once complete (a log's fd closes with
    /// it) and releases what waited behind it. On an error the body is
    /// dropped too and the caller closes the connection.
    pub fn queue_slice(
        &mut self,
        body: Box<dyn ReplyBody>,
        slice: Vec<u8>,
        progress: io::Result<BodyProgress>,
    ) -> io::Result<()> {
        if !slice.is_empty() {
            self.out_bytes += slice.len();
            let marks = if body.observation() {
                Marks::OBSERVED
            } else {
                UNSTAMPED
            };
            self.out.push_back((OutFrame::Owned(slice), marks));
        }
        match progress {
            Ok(BodyProgress::More) => {
                self.body = Some(body);
                return Ok(());
            }
            Ok(BodyProgress::Done) => {
                for frame in self.held.drain(..) {
                    self.out.push_back((OutFrame::Shared(frame), UNSTAMPED));
                }
            }
            Err(_) => {
                // The connection is closed: what waited for the body goes.
                self.out_bytes -= self.held_bytes;
                self.held.clear();
            }
        }
        self.held_bytes = 0;
        progress.map(|_| ())
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
                Frame::Line(l) => requests.push_back(l.bytes().to_vec()),
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
        self.enqueue_marked(frame, UNSTAMPED)
    }

    /// [`Conn::enqueue`] for a reply that waits for no writer
    /// ([`Marks::OBSERVED`]).
    pub fn enqueue_observation(&mut self, frame: Rc<[u8]>) -> bool {
        self.enqueue_marked(frame, Marks::OBSERVED)
    }

    fn enqueue_marked(&mut self, frame: Rc<[u8]>, marks: Marks) -> bool {
        self.out_bytes += frame.len();
        if self.body.is_some() {
            self.held_bytes += frame.len();
            self.held.push_back(frame);
        } else {
            self.out.push_back((OutFrame::Shared(frame), marks));
        }
        if self.watch.is_none() {
            return self.out_bytes <= REPLY_QUEUE_LIMIT;
        }
        // Refused on reaching the count, not past it: the push that passed
        // it would double the queue's capacity first.
        self.out_bytes <= WATCH_HARD_LIMIT && self.queued_frames() < WATCH_FRAME_LIMIT
    }

    /// Frames queued, those held behind a streamed reply included.
    fn queued_frames(&self) -> usize {
        self.out.len() + self.held.len()
    }

    /// Drops every queued frame not yet started (the one being written is
    /// kept, and a line left open ended, so the stream stays line-framed),
    /// then queues `last` and marks the connection for closing.
    pub fn drop_backlog_and_close(&mut self, last: Rc<[u8]>, now: Timestamp) {
        let head = if self.head_written > 0 {
            self.out.pop_front()
        } else {
            None
        };
        // New queues, not cleared ones: the peer may not read its last
        // line for `LINGER`, and a cleared queue keeps its capacity (up to
        // `WATCH_FRAME_LIMIT` entries) that long.
        self.out = VecDeque::new();
        self.out_bytes = 0;
        // A streamed reply may be cut mid-line (its slices are frames):
        // the line is ended so that `last` is a line of its own.
        let open = match &head {
            Some(h) => !h.0.ends_with(b"\n"),
            None => self.line_open,
        };
        if let Some(h) = head {
            self.out_bytes += h.0.len();
            self.out.push_back(h);
        }
        if open {
            self.out_bytes += 1;
            self.out
                .push_back((OutFrame::Owned(b"\n".to_vec()), UNSTAMPED));
        }
        self.out_bytes += last.len();
        self.out.push_back((OutFrame::Shared(last), UNSTAMPED));
        self.watch = None;
        self.body = None;
        self.held = VecDeque::new();
        self.held_bytes = 0;
        self.close_after_flush(now);
    }

    pub fn close_after_flush(&mut self, now: Timestamp) {
        if !self.closing {
            self.closing = true;
            self.closing_since = Some(now);
        }
    }

    /// Gives the frames queued since the last call the marks that cover
    /// what they report.
    pub fn stamp(&mut self, mark: Marks) {
        for f in self.out.iter_mut().rev() {
            if f.1 == Marks::OBSERVED {
                continue;
            }
            if f.1 != UNSTAMPED {
                break;
            }
            f.1 = mark;
        }
    }

    /// Writes all queued output until the socket would block (at shutdown,
    /// once the logs are final).
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_logged(Marks::ALL)
    }

    /// Writes the frames whose marks are `confirmed` until the socket
    /// would block.
    pub fn flush_logged(&mut self, confirmed: Marks) -> io::Result<()> {
        self.last_written = 0;
        loop {
            // Many frames per `writev`: one small write per frame would
            // fill the socket's buffer with per-write overhead (on Linux
            // about 50 KiB of 140-byte events fit where 200 KiB could).
            let mut slices = Vec::with_capacity(WRITE_SLICES);
            for (i, (frame, mark)) in self.out.iter().enumerate() {
                if slices.len() == WRITE_SLICES
                    || (i > 0 || self.head_written == 0) && !mark.within(confirmed)
                {
                    break;
                }
                let from = if i == 0 { self.head_written } else { 0 };
                slices.push(IoSlice::new(&frame[from..]));
            }
            if slices.is_empty() {
                return Ok(());
            }
            match self.stream.write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.last_written += n;
                    self.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Forgets `n` written bytes from the front of the queue.
    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let Some((front, _)) = self.out.front() else {
                return;
            };
            let rest = front.len() - self.head_written;
            if n < rest {
                self.head_written += n;
                return;
            }
            n -= rest;
            self.out_bytes -= front.len();
            self.line_open = !front.ends_with(b"\n");
            self.out.pop_front();
            self.head_written = 0;
        }
    }

    /// After a flush: whether this watcher has fallen behind for good
    /// (more than `WATCH_QUEUE_LIMIT` unsent, and nothing taken for
    /// `WATCH_BEHIND_GRACE`).
    pub fn watch_fell_behind(&mut self, now: Timestamp) -> bool {
        if self.watch.is_none() || self.out_bytes <= WATCH_QUEUE_LIMIT || self.last_written > 0 {
            self.behind_since = None;
            return false;
        }
        let since = *self.behind_since.get_or_insert(now);
        now.since(since) >= WATCH_BEHIND_GRACE
    }

    /// Whether a frame waits for its log or the journal (revisit once
    /// they advance).
    pub fn waits_for_log(&self, confirmed: Marks) -> bool {
        self.out.front().is_some_and(|f| !f.1.within(confirmed))
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

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn conn() -> (Conn, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        ours.set_nonblocking(true).expect("nonblocking");
        (
            Conn::new(UnixStream::from_std(ours), Token(1), Scope::Operator, 1024),
            theirs,
        )
    }

    fn read_all(peer: &mut std::os::unix::net::UnixStream) -> Vec<u8> {
        peer.set_nonblocking(true).expect("nonblocking");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match peer.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => return out,
            }
        }
    }

    /// Marks of a frame (or confirmations) about the session log only.
    fn log(n: u64) -> Marks {
        Marks { log: n, journal: 0 }
    }

    #[test]
    fn a_frame_waits_for_the_journal_as_for_the_log() {
        let (mut c, mut peer) = conn();
        c.enqueue(Rc::from(&b"event 7\n"[..]));
        c.stamp(Marks { log: 2, journal: 7 });
        c.flush_logged(Marks { log: 9, journal: 6 }).expect("flush");
        assert!(read_all(&mut peer).is_empty());
        assert!(c.waits_for_log(Marks { log: 9, journal: 6 }));
        c.flush_logged(Marks { log: 1, journal: 9 }).expect("flush");
        assert!(read_all(&mut peer).is_empty());
        c.flush_logged(Marks { log: 2, journal: 7 }).expect("flush");
        assert_eq!(read_all(&mut peer), b"event 7\n");
        assert!(c.is_flushed());
    }

    #[test]
    fn a_frame_leaves_only_once_its_log_mark_is_reached() {
        let (mut c, mut peer) = conn();
        c.enqueue(Rc::from(&b"first\n"[..]));
        c.stamp(log(3));
        c.enqueue(Rc::from(&b"second\n"[..]));
        c.stamp(log(5));
        c.flush_logged(log(2)).expect("flush");
        assert!(read_all(&mut peer).is_empty());
        assert!(c.waits_for_log(log(2)));
        c.flush_logged(log(4)).expect("flush");
        assert_eq!(read_all(&mut peer), b"first\n");
        assert!(c.waits_for_log(log(4)));
        c.flush_logged(log(5)).expect("flush");
        assert_eq!(read_all(&mut peer), b"second\n");
        assert!(c.is_flushed());
        assert_eq!(c.queued_bytes(), 0);
    }

    #[test]
    fn frames_queued_after_a_stamp_wait_for_their_own() {
        let (mut c, mut peer) = conn();
        c.enqueue(Rc::from(&b"a\n"[..]));
        c.stamp(log(1));
        c.enqueue(Rc::from(&b"b\n"[..]));
        // Not stamped yet: only a final flush (shutdown) sends it.
        c.flush_logged(log(1)).expect("flush");
        assert_eq!(read_all(&mut peer), b"a\n");
        assert!(!c.is_flushed());
        c.flush().expect("flush");
        assert_eq!(read_all(&mut peer), b"b\n");
    }

    /// A body of `slices` slices of `len` bytes each, then `\n`. The test
    /// makes its slices itself (`make`): the trait's `next_slice` wants a
    /// whole daemon, which a unit test has not got.
    #[derive(Debug)]
    struct Pieces {
        slices: usize,
        len: usize,
    }

    impl Pieces {
        fn make(&mut self, out: &mut Vec<u8>) -> io::Result<BodyProgress> {
            if self.slices == 0 {
                out.push(b'\n');
                return Ok(BodyProgress::Done);
            }
            self.slices -= 1;
            out.resize(out.len() + self.len, b'b');
            Ok(BodyProgress::More)
        }
    }

    impl ReplyBody for Pieces {
        fn next_slice(
            &mut self,
            _src: &mut BodySources<'_>,
            out: &mut Vec<u8>,
        ) -> io::Result<BodyProgress> {
            self.make(out)
        }
    }

    /// What the loop's `pump_streams` does for one connection.
    fn pump(c: &mut Conn, pieces: &mut Pieces) {
        let Some(body) = c.take_body() else {
            return;
        };
        let mut slice = Vec::new();
        let progress = pieces.make(&mut slice);
        c.queue_slice(body, slice, progress).expect("slice");
    }

    #[test]
    fn a_body_is_made_only_while_the_client_drains_and_nothing_cuts_into_it() {
        let (mut c, mut peer) = conn();
        c.enqueue(Rc::from(&b"before\n"[..]));
        let mut pieces = Pieces {
            slices: 40,
            len: 64 << 10,
        };
        // The boxed body only stands for the stream; `pieces` makes it.
        c.start_body(Box::new(Pieces { slices: 0, len: 0 }));
        assert!(!c.accepts_requests(), "requests wait for the body");
        // Not read: the body stops at the low-water mark.
        while c.body_wants_more() {
            pump(&mut c, &mut pieces);
        }
        let made = c.queued_bytes();
        assert!(made < BODY_LOW_WATER + (64 << 10), "{made} bytes made");
        // A watch event queued meanwhile waits for the body's whole line.
        c.enqueue(Rc::from(&b"event\n"[..]));
        let mut got = Vec::new();
        loop {
            pump(&mut c, &mut pieces);
            c.stamp(log(0));
            c.flush_logged(log(0)).expect("flush");
            got.extend(read_all(&mut peer));
            if c.is_flushed() && !c.body_wants_more() {
                break;
            }
        }
        let mut want = b"before\n".to_vec();
        want.resize(want.len() + 40 * (64 << 10), b'b');
        want.extend_from_slice(b"\nevent\n");
        assert!(
            got == want,
            "{} bytes, not the {} expected",
            got.len(),
            want.len()
        );
        assert!(c.accepts_requests());
        assert_eq!(c.queued_bytes(), 0);
    }

    #[test]
    fn a_connection_dropped_mid_stream_ends_the_open_line_before_its_last() {
        let (mut c, mut peer) = conn();
        c.start_body(Box::new(Pieces { slices: 0, len: 0 }));
        let mut pieces = Pieces {
            slices: 3,
            len: 100,
        };
        // One slice of the line leaves; the line is open.
        pump(&mut c, &mut pieces);
        c.stamp(log(0));
        c.flush_logged(log(0)).expect("flush");
        let mut got = read_all(&mut peer);
        assert_eq!(got.len(), 100);
        pump(&mut c, &mut pieces);
        c.drop_backlog_and_close(
            Rc::from(&b"{\"ok\":false}\n"[..]),
            Timestamp::from_millis(1),
        );
        c.stamp(log(0));
        c.flush_logged(log(0)).expect("flush");
        got.extend(read_all(&mut peer));
        let text = String::from_utf8(got).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        assert_eq!(
            lines[1], "{\"ok\":false}",
            "the last line is a line of its own"
        );
    }

    /// 200 watchers that never read took the daemon to 773 MB: each held
    /// an entry of its own per event, and only the events' bytes counted.
    #[test]
    fn a_watcher_that_does_not_read_is_refused_at_the_frame_limit() {
        let (mut c, mut peer) = conn();
        c.watch = Some(WatchFilter::default());
        let mut event = vec![b'e'; 149];
        event.push(b'\n');
        let event: Rc<[u8]> = Rc::from(event);
        for i in 1..WATCH_FRAME_LIMIT {
            assert!(c.enqueue(event.clone()), "refused at frame {i}");
        }
        assert!(!c.enqueue(event.clone()), "not refused at the frame limit");
        // Far below the byte limits: the count is what stopped it.
        assert!(c.queued_bytes() < WATCH_HARD_LIMIT / 4);
        // What the watcher holds of its own is what the limit's doc says.
        let own = c.out.capacity() * std::mem::size_of::<(OutFrame, Marks)>();
        assert!(own <= 640 << 10, "{own} bytes of entries");
        // Dropped, it keeps none of that while its last line waits.
        c.drop_backlog_and_close(Rc::from(&b"last\n"[..]), Timestamp::from_millis(1));
        assert!(c.out.capacity() < 16, "{} entries kept", c.out.capacity());
        c.stamp(log(0));
        c.flush_logged(log(0)).expect("flush");
        assert_eq!(read_all(&mut peer), b"last\n");
    }

    #[test]
    fn many_frames_go_out_in_order_across_partial_writes() {
        let (mut c, mut peer) = conn();
        let mut want = Vec::new();
        for i in 0..5_000 {
            let line = format!("{{\"seq\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 300));
            want.extend_from_slice(line.as_bytes());
            c.enqueue(Rc::from(line.into_bytes()));
        }
        c.stamp(log(0));
        let mut got = Vec::new();
        while !c.is_flushed() {
            c.flush_logged(log(0)).expect("flush");
            got.extend(read_all(&mut peer));
        }
        assert_eq!(got, want);
        assert_eq!(c.queued_bytes(), 0);
    }
}
