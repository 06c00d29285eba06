//! `get-session` streamed: the reply line made from the log a slice at a
//! time as the client drains it, so a client that does not read holds one
//! slice, not the whole log, and the loop reads and checks at most
//! [`SLICE_BYTES`] of it per turn.
//!
//! Everything the reply shows is fixed when it is asked
//! ([`SessionStore::open_dump`](crate::daemon::store::SessionStore::open_dump)):
//! the open log (compaction, rotation or a deletion cannot change what the
//! fd reads), how much of it is written, and a copy of the records still
//! buffered. The line is byte for byte what the in-memory dump serialised
//! to (the store's tests compare them), so clients see no difference.

use std::fs::File;
use std::io::{self, Read};

use serde::Serialize;
use serde_json::Value;

use crate::core::time::Timestamp;
use crate::daemon::conn::{BodyProgress, BodySources, Conn, ReplyBody};
use crate::daemon::diag::log_warn;
use crate::daemon::event_loop::Daemon;
use crate::daemon::source::ConnId;
use crate::daemon::store::{DumpSource, RecordScanner};

/// Log bytes read and checked per slice (about a millisecond of parsing).
pub const SLICE_BYTES: usize = 256 << 10;

#[derive(Debug, Copy, Clone, PartialEq, Eq)]
enum Stage {
    /// The envelope and the session's entry, up to `"records":[`.
    Head,
    /// The log's records, from the fd opened at request time.
    Log,
    /// The records that were still buffered, from the copy.
    Unflushed,
    Done,
}

/// One `get-session` reply being made.
#[derive(Debug)]
pub struct SessionStream {
    src: DumpSource,
    rid: Option<Value>,
    stage: Stage,
    /// Log bytes not read yet (of those the store counted as written).
    log_left: u64,
    /// Bytes of `src.unflushed` already scanned.
    unflushed_at: usize,
    scanner: RecordScanner,
    records: u64,
    /// The last `attach` record's system prompt so far.
    system_prompt: Option<String>,
    buf: Vec<u8>,
}

impl SessionStream {
    /// `max_line`: the longest line the log can hold as a record; a longer
    /// one is damage, counted corrupt without being held in memory.
    pub fn new(src: DumpSource, rid: Option<Value>, max_line: usize) -> SessionStream {
        SessionStream {
            log_left: src.log_bytes,
            src,
            rid,
            stage: Stage::Head,
            unflushed_at: 0,
            scanner: RecordScanner::new(max_line),
            records: 0,
            system_prompt: None,
            buf: Vec::new(),
        }
    }

    fn head(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(br#"{"ok":true,"error":null,"data":{"session":"#);
        write_json(out, &self.src.session)?;
        out.extend_from_slice(br#","records":["#);
        self.stage = Stage::Log;
        Ok(())
    }

    /// Reads and scans the next slice of the log.
    fn log(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(file) = self.src.log.as_mut() else {
            self.stage = Stage::Unflushed;
            return Ok(());
        };
        let want = self.log_left.min(SLICE_BYTES as u64) as usize;
        self.buf.resize(want, 0);
        let n = read_full(file, &mut self.buf)?;
        self.log_left -= n as u64;
        if n < want {
            // The file is shorter than the store counted (a torn tail cut
            // since): what is there is all there is.
            self.log_left = 0;
        }
        let (scanner, records, prompt) = (
            &mut self.scanner,
            &mut self.records,
            &mut self.system_prompt,
        );
        scanner.feed(&self.buf[..n], |r| {
            push_record(out, records, prompt, r.get())
        });
        if self.log_left == 0 {
            // Done with the file: close it and give the buffer back now,
            // not when the client has read the rest.
            self.src.log = None;
            self.buf = Vec::new();
            self.stage = Stage::Unflushed;
        }
        Ok(())
    }

    /// Scans the next slice of the buffered records' copy.
    fn unflushed(&mut self, out: &mut Vec<u8>) {
        let rest = &self.src.unflushed[self.unflushed_at..];
        let piece = &rest[..rest.len().min(SLICE_BYTES)];
        self.unflushed_at += piece.len();
        let (scanner, records, prompt) = (
            &mut self.scanner,
            &mut self.records,
            &mut self.system_prompt,
        );
        scanner.feed(piece, |r| push_record(out, records, prompt, r.get()));
        if self.unflushed_at == self.src.unflushed.len() {
            self.stage = Stage::Done;
        }
    }

    /// Closes the records and the envelope: the same fields, in the same
    /// order, as `protocol::ok_line` of the `SessionDump`.
    fn tail(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(br#"],"corrupt_lines":"#);
        write_json(out, &self.scanner.corrupt_lines())?;
        out.extend_from_slice(br#","unflushed_bytes":"#);
        write_json(out, &self.src.unflushed.len())?;
        out.extend_from_slice(br#","flush_error":"#);
        write_json(out, &self.src.flush_error)?;
        out.extend_from_slice(br#","log_replaced":"#);
        write_json(out, &self.src.log_replaced)?;
        out.extend_from_slice(br#","system_prompt":"#);
        write_json(out, &self.system_prompt)?;
        out.push(b'}');
        if let Some(rid) = &self.rid {
            out.extend_from_slice(br#","id":"#);
            write_json(out, rid)?;
        }
        out.extend_from_slice(b"}\n");
        self.src.unflushed = Vec::new();
        Ok(())
    }
}

impl ReplyBody for SessionStream {
    fn next_slice(
        &mut self,
        _src: &mut BodySources<'_>,
        out: &mut Vec<u8>,
    ) -> io::Result<BodyProgress> {
        self.slice(out)
    }
}

impl SessionStream {
    /// The next slice: all a session's reply needs was taken when it was
    /// asked, so the daemon is not read.
    pub fn slice(&mut self, out: &mut Vec<u8>) -> io::Result<BodyProgress> {
        match self.stage {
            Stage::Head => self.head(out)?,
            Stage::Log => self.log(out)?,
            Stage::Unflushed => self.unflushed(out),
            Stage::Done => {}
        }
        if self.stage == Stage::Done {
            self.tail(out)?;
            return Ok(BodyProgress::Done);
        }
        Ok(BodyProgress::More)
    }
}

fn push_record(out: &mut Vec<u8>, records: &mut u64, prompt: &mut Option<String>, text: &str) {
    if let Some(p) = crate::daemon::store::attach_system_prompt(text) {
        *prompt = p;
    }
    if *records > 0 {
        out.push(b',');
    }
    out.extend_from_slice(text.as_bytes());
    *records += 1;
}

fn write_json(out: &mut Vec<u8>, v: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, v).map_err(io::Error::other)
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Daemon {
    /// Makes `body` the next reply on `conn` (after what is queued there).
    pub(crate) fn stream_reply(&mut self, conn: ConnId, body: Box<dyn ReplyBody>) {
        if let Some(c) = self.conns.get_mut(conn.0) {
            c.start_body(body);
            self.dirty_conns.insert(conn.0);
        }
    }

    /// A streamed reply has room for its next slice: the loop should come
    /// back without sleeping.
    pub(crate) fn streams_want_more(&self) -> bool {
        self.conns.iter().any(|(_, c)| c.body_wants_more())
    }

    /// Queues the next slice of each streamed reply whose client has room
    /// (one slice per client per pass); its frames are stamped with the
    /// pass's marks like every other frame.
    pub(crate) fn pump_streams(&mut self, t: Timestamp) {
        if !self.streams_want_more() {
            return;
        }
        let ready: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.body_wants_more())
            .map(|(id, _)| id)
            .collect();
        for id in ready {
            let Some(mut body) = self.conns.get_mut(id).and_then(Conn::take_body) else {
                continue;
            };
            let mut slice = Vec::new();
            let mut src = BodySources {
                panes: &mut self.panes,
                approvals: &self.approvals,
                stall_after: self.settings.daemon.stall_after,
                host: &self.settings.daemon.host,
            };
            let progress = body.next_slice(&mut src, &mut slice);
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if let Err(e) = c.queue_slice(body, slice, progress) {
                // The reply is cut short: closing says so to the client.
                log_warn!("streaming a reply: {e}; closing the connection");
                c.close_after_flush(t);
            }
            self.dirty_conns.insert(id);
        }
    }
}
