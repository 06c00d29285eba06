//! Reading session logs back: record parsing, the start-up scan, and the
//! recovery set handed to the daemon.
//!
//! The log is the truth. A scan walks one log line by line, learns the
//! session's panes and exits, finds a torn last line (the daemon was killed
//! mid-write) and collects each pane's events for refolding. Lines that do
//! not parse are counted and skipped, never fatal.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::approval::LoggedApproval;
use crate::core::time::Timestamp;

use super::{RecoveredApproval, RecoveredPane, Recovery};

/// The recovered event bytes kept across all panes. Past it, the events of
/// finished panes are released first (oldest exit first), then new events
/// of live panes are not kept; both are counted in `Recovery`.
pub const RECOVERY_EVENT_CAP: u64 = 256 << 20;

/// The top-level fields of any record; unknown fields are ignored.
#[derive(Deserialize, Default)]
pub(super) struct RecordFields<'a> {
    #[serde(borrow, default)]
    pub ts: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub pane: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub ev: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub colibri: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub agent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub runtime: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub cwd: Option<Cow<'a, str>>,
    #[serde(default)]
    pub generation: Option<u32>,
    #[serde(borrow, default)]
    pub jail: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub state: Option<Cow<'a, str>>,
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    /// An exit record's planned stop.
    #[serde(default)]
    pub planned: bool,
    #[serde(default)]
    pub dropped: Option<u64>,
    /// What tests compare a raw line with.
    #[cfg(any(test, fuzzing))]
    #[serde(borrow, default)]
    pub raw: Option<Cow<'a, str>>,
}

impl<'a> RecordFields<'a> {
    /// Parses one line; `None` if it is not a JSON object.
    pub(super) fn parse(line: &'a [u8]) -> Option<RecordFields<'a>> {
        serde_json::from_slice(line).ok()
    }

    pub(super) fn timestamp(&self) -> Option<Timestamp> {
        let ts = self.ts.as_deref()?;
        humantime::parse_rfc3339(ts)
            .ok()
            .map(Timestamp::from_system)
    }

    pub(super) fn pane(&self) -> &str {
        self.pane.as_deref().unwrap_or("")
    }

    pub(super) fn is(&self, kind: &str) -> bool {
        self.colibri.as_deref() == Some(kind)
    }
}

/// The complete lines of `bytes` (up to its last `\n`) that parse as JSON,
/// each verbatim, and the count of those that do not. The check is the
/// one recovery applies, and it accepts any JSON text: no depth limit, no
/// range check on numbers, lone surrogate escapes kept as written.
#[cfg(any(test, fuzzing))]
pub(super) fn complete_records(bytes: &[u8]) -> (Vec<Box<RawValue>>, u64) {
    let mut records = Vec::new();
    let mut scanner = RecordScanner::new(usize::MAX);
    scanner.feed(bytes, |r| records.push(r));
    (records, scanner.corrupt_lines())
}

/// [`complete_records`] slice by slice: feed a log's bytes in pieces of
/// any size, get the same records in the same order and the same count of
/// corrupt lines. A line cut by a slice is carried to the next (so the
/// carry holds at most one line); bytes after the last `\n` are never a
/// record. A line longer than `max_line` is counted corrupt and skipped
/// without being held: the store writes no record that long, so only a
/// damaged file has one, and it must not cost a reader its size in memory.
#[derive(Debug)]
pub struct RecordScanner {
    partial: Vec<u8>,
    /// The line being carried passed `max_line`: skip to its end.
    skipping: bool,
    max_line: usize,
    corrupt: u64,
}

impl RecordScanner {
    pub fn new(max_line: usize) -> RecordScanner {
        RecordScanner {
            partial: Vec::new(),
            skipping: false,
            max_line,
            corrupt: 0,
        }
    }

    /// Complete lines that were not records so far.
    pub fn corrupt_lines(&self) -> u64 {
        self.corrupt
    }

    /// Scans the next bytes of the log, calling `record` with each record
    /// completed by them, verbatim.
    pub fn feed(&mut self, mut bytes: &[u8], mut record: impl FnMut(Box<RawValue>)) {
        if self.skipping || !self.partial.is_empty() {
            let Some(end) = memchr::memchr(b'\n', bytes) else {
                self.carry(bytes);
                return;
            };
            self.carry(&bytes[..end]);
            bytes = &bytes[end + 1..];
            if self.skipping {
                self.skipping = false;
                self.corrupt += 1;
            } else {
                let line = std::mem::take(&mut self.partial);
                self.line(&line, &mut record);
                // Reuse the allocation for the next carried line.
                self.partial = line;
                self.partial.clear();
            }
        }
        let complete = memchr::memrchr(b'\n', bytes).map_or(0, |p| p + 1);
        for line in bytes[..complete].split(|&b| b == b'\n') {
            self.line(line, &mut record);
        }
        self.carry(&bytes[complete..]);
    }

    fn line(&mut self, line: &[u8], record: &mut impl FnMut(Box<RawValue>)) {
        if line.is_empty() {
            return;
        }
        match record_text(line) {
            Some(raw) => record(raw),
            None => self.corrupt += 1,
        }
    }

    /// Keeps the start of a line cut by the slice, up to `max_line`.
    fn carry(&mut self, bytes: &[u8]) {
        if self.skipping || bytes.is_empty() {
            return;
        }
        if self.partial.len() + bytes.len() > self.max_line {
            self.partial = Vec::new();
            self.skipping = true;
            return;
        }
        self.partial.extend_from_slice(bytes);
    }
}

/// Whether an agent line embedded as `ev` will read back: it must be one
/// JSON value by the reader's own rule (the taxonomy that classified it
/// may be more lenient, and the log must never hold a line its reader
/// drops).
pub(super) fn reads_back(line: &[u8]) -> bool {
    serde_json::from_slice::<&RawValue>(line).is_ok()
}

/// The deepest nesting an embedded line may have. serde_json's default
/// recursion limit is 128 (Python's `json` stops near 1,000, JavaScript
/// engines some thousands later), and `get-session`'s reply wraps each
/// record four levels deep (envelope, `data`, `records`, the record): a
/// line nested past 120 would fail a standard client's parse of the whole
/// reply. The daemon reads a deeper line without recursion; it is logged
/// as `raw` text, like a line that is not JSON, and folds the same.
pub const MAX_EMBED_DEPTH: usize = 120;

/// Whether the arrays and objects of `line` nest at most
/// [`MAX_EMBED_DEPTH`] deep. A line with no more opening brackets than
/// that (every event line in practice) passes on one counting scan that
/// vectorises; any other is walked, strings and escapes skipped.
pub(super) fn nesting_within_limit(line: &[u8]) -> bool {
    let opens = line
        .iter()
        .fold(0usize, |n, &b| n + usize::from(b == b'[' || b == b'{'));
    if opens <= MAX_EMBED_DEPTH {
        return true;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_EMBED_DEPTH {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// [`reads_back`] for a line serde_json already parsed whole into an
/// adapter's struct, which [`super::record::embeddable_event`] also
/// passed (UTF-8). The reader's parse (`&RawValue`: serde_json's
/// `ignore_value`, then UTF-8) accepts all the typed parse accepts, with
/// one exception: a string read as bytes (the adapters' lenient text
/// fields) may hold a raw control byte, which JSON forbids in strings. So
/// a line without any byte below 0x20 reads back; one with such a byte
/// (which may also be white space between tokens) gets the full check.
/// Numbers, escapes, nesting depth and trailing bytes are checked at least
/// as strictly by the typed parse. `check_log_roundtrip` (fuzzed, and a
/// property test) holds this to the full check.
pub(super) fn parsed_reads_back(line: &[u8]) -> bool {
    // A fold, not `any`: without an early exit the scan vectorises.
    let control = line.iter().fold(false, |seen, &b| seen | (b < 0x20));
    !control || reads_back(line)
}

/// One log line as a JSON value kept verbatim, if it is a JSON object
/// (what every record is).
fn record_text(line: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(line).ok()?;
    RecordFields::parse(line)?;
    RawValue::from_string(text.to_string()).ok()
}

/// What the scan of one log found about its session.
#[derive(Debug, Default)]
pub(super) struct LogSummary {
    /// File length as found.
    pub len: u64,
    /// Length up to and including the last `\n`.
    pub complete_len: u64,
    /// The bytes after the last `\n` form a whole record that only lacks
    /// its newline: keep it and append `\n` instead of truncating.
    pub tail_is_record: bool,
    pub panes: Vec<String>,
    pub runtime: Option<String>,
    pub cwd: Option<String>,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
    /// Panes attached and not yet exited, in attach order.
    pub live: Vec<String>,
    /// The last exit record, kept only while no pane is live.
    pub last_exit: Option<(String, Option<i32>, Option<i32>)>,
    pub corrupt_lines: u64,
    pub compacted: bool,
    /// Answer records that cannot be replayed (kept in the log, skipped at
    /// recovery), and why the first could not.
    pub bad_answers: u64,
    pub bad_answer: Option<String>,
}

impl LogSummary {
    fn note_pane(&mut self, pane: &str) {
        if !pane.is_empty() && !self.panes.iter().any(|p| p == pane) {
            self.panes.push(pane.to_string());
        }
    }
}

/// Accumulates recovered panes across all logs, under [`RECOVERY_EVENT_CAP`].
#[derive(Debug, Default)]
pub(super) struct RecoveryBuilder {
    panes: Vec<RecoveredPane>,
    event_bytes: u64,
    events_dropped: u64,
    /// Finished panes in exit order: the first to give up their events.
    finished: VecDeque<usize>,
    cap: u64,
}

impl RecoveryBuilder {
    pub(super) fn new(cap: u64) -> Self {
        RecoveryBuilder {
            cap,
            ..Default::default()
        }
    }

    pub(super) fn finish(self, recovery: &mut Recovery) {
        recovery.panes = self.panes;
        recovery.events_dropped_bytes = self.events_dropped;
    }

    fn push_event(&mut self, idx: usize, ts: Timestamp, ev: &[u8]) {
        let len = ev.len() as u64;
        while self.event_bytes + len > self.cap {
            let Some(victim) = self.finished.pop_front() else {
                break;
            };
            let p = &mut self.panes[victim];
            if p.exit.is_none() || p.events.is_empty() {
                continue;
            }
            let freed: u64 = p.events.iter().map(|(_, e)| e.len() as u64).sum();
            p.events = Vec::new();
            // Their approvals went with the events.
            p.approval_records = Vec::new();
            p.events_truncated = true;
            self.event_bytes -= freed;
            self.events_dropped += freed;
        }
        if self.event_bytes + len > self.cap {
            self.panes[idx].events_truncated = true;
            self.events_dropped += len;
            return;
        }
        self.event_bytes += len;
        self.panes[idx].events.push((ts, ev.to_vec()));
    }
}

/// Per-log state of the scan: which recovered pane each pane id maps to.
struct PaneSlots<'r> {
    session: &'r str,
    slots: HashMap<String, usize>,
}

impl PaneSlots<'_> {
    fn slot(&mut self, rb: &mut RecoveryBuilder, pane: &str, ts: Timestamp) -> usize {
        if let Some(&i) = self.slots.get(pane) {
            return i;
        }
        rb.panes.push(RecoveredPane {
            session: self.session.to_string(),
            pane: pane.to_string(),
            agent: String::new(),
            runtime: None,
            name: None,
            cwd: None,
            generation: 0,
            jail: None,
            role: None,
            attached_at: ts,
            exit: None,
            events: Vec::new(),
            events_truncated: false,
            approval_records: Vec::new(),
            removed: false,
            planned_exit: false,
        });
        let i = rb.panes.len() - 1;
        self.slots.insert(pane.to_string(), i);
        i
    }
}

/// The longest line read back from a log: a record is at most an agent
/// line under the 1 MiB default cap (escaped up to 6× when stored as `raw`)
/// plus its wrapper; anything longer is corrupt and skipped unbuffered.
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Scans one log. A record whose `ts` does not parse takes the previous
/// record's time.
pub(super) fn scan_log(
    path: &Path,
    session: &str,
    rb: &mut RecoveryBuilder,
) -> io::Result<LogSummary> {
    // Not a symlink, not a FIFO (which would block start-up), not a device:
    // only a regular file is read as a log.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut sum = LogSummary::default();
    let mut slots = PaneSlots {
        session,
        slots: HashMap::new(),
    };
    let mut line = Vec::with_capacity(4096);
    let mut offset: u64 = 0;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_RECORD_BYTES)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if n as u64 == MAX_RECORD_BYTES && line.last() != Some(&b'\n') {
            // No record is this long: skip to the next line, bounded memory.
            offset += n as u64 + reader.skip_until(b'\n')? as u64;
            sum.corrupt_lines += 1;
            sum.complete_len = offset;
            continue;
        }
        offset += n as u64;
        let complete = line.last() == Some(&b'\n');
        let body = if complete { &line[..n - 1] } else { &line[..] };
        let parsed = RecordFields::parse(body);
        if complete {
            sum.complete_len = offset;
        } else {
            // A torn tail: use it only if it is a whole record that lacks
            // just its newline.
            sum.tail_is_record = parsed.is_some();
        }
        match parsed {
            Some(rec) => apply_record(&rec, body, &mut sum, &mut slots, rb),
            None if complete && !body.is_empty() => sum.corrupt_lines += 1,
            None => {}
        }
    }
    sum.len = offset;
    Ok(sum)
}

fn apply_record(
    rec: &RecordFields<'_>,
    line: &[u8],
    sum: &mut LogSummary,
    slots: &mut PaneSlots<'_>,
    rb: &mut RecoveryBuilder,
) {
    let ts = rec.timestamp().or(sum.last_ts).unwrap_or_default();
    sum.first_ts = Some(sum.first_ts.map_or(ts, |f| f.min(ts)));
    sum.last_ts = Some(sum.last_ts.map_or(ts, |l| l.max(ts)));
    let pane = rec.pane();
    if rec.is("compacted") {
        sum.compacted = true;
        return;
    }
    if pane.is_empty() {
        return;
    }
    sum.note_pane(pane);
    if rec.is("attach") {
        if sum.runtime.is_none() {
            sum.runtime = rec.runtime.as_deref().map(str::to_string);
        }
        if sum.cwd.is_none() {
            sum.cwd = rec.cwd.as_deref().map(str::to_string);
        }
        if !sum.live.iter().any(|p| p == pane) {
            sum.live.push(pane.to_string());
        }
        sum.last_exit = None;
        let i = slots.slot(rb, pane, ts);
        let freed: u64 = rb.panes[i].events.iter().map(|(_, e)| e.len() as u64).sum();
        rb.event_bytes -= freed;
        let p = &mut rb.panes[i];
        // A new attach (a restart) starts the pane's state over.
        p.agent = rec.agent.as_deref().unwrap_or("").to_string();
        p.runtime = rec.runtime.as_deref().map(str::to_string);
        p.name = rec.name.as_deref().map(str::to_string);
        p.cwd = rec.cwd.as_deref().map(str::to_string);
        p.generation = rec.generation.unwrap_or(0);
        p.jail = rec.jail.as_deref().map(str::to_string);
        p.role = rec.role.as_deref().map(str::to_string);
        p.attached_at = ts;
        p.exit = None;
        p.events = Vec::new();
        p.events_truncated = false;
        p.approval_records = Vec::new();
        p.removed = false;
        p.planned_exit = false;
    } else if rec.is("removed") {
        let i = slots.slot(rb, pane, ts);
        rb.panes[i].removed = true;
    } else if rec.is("exit") {
        let state = rec.state.as_deref().unwrap_or("error").to_string();
        sum.live.retain(|p| p != pane);
        let exit = (state, rec.code, rec.signal);
        if sum.live.is_empty() {
            sum.last_exit = Some(exit.clone());
        }
        let i = slots.slot(rb, pane, ts);
        rb.panes[i].exit = Some(exit);
        rb.panes[i].planned_exit = rec.planned;
        if !rb.panes[i].events.is_empty() {
            rb.finished.push_back(i);
        }
    } else if rec.is("answer") || rec.is("approval_request") || rec.is("approval_expired") {
        // An approval record acts on approvals of a pane its records
        // started: one of a pane with no record before it makes no pane.
        let i = slots.slots.get(pane).copied();
        note_approval(line, ts, sum, i, rb);
    } else if let Some(ev) = rec.ev {
        let i = slots.slot(rb, pane, ts);
        rb.push_event(i, ts, ev.get().as_bytes());
    }
}

/// Keeps an approval record for pane `i`'s replay, at its place among the
/// pane's events (`None`: a pane not seen yet, whose record has nothing to
/// act on); one that cannot be read is counted, not fatal.
fn note_approval(
    line: &[u8],
    ts: Timestamp,
    sum: &mut LogSummary,
    i: Option<usize>,
    rb: &mut RecoveryBuilder,
) {
    match LoggedApproval::from_record(line) {
        Ok(Some(record)) => {
            let Some(i) = i else { return };
            let p = &mut rb.panes[i];
            // Past a dropped event the approvals' numbers may have shifted
            // (the dropped one may have opened one): a later record could
            // act on the wrong approval, so none is kept. Its approvals end
            // as the pane ends, unpublished.
            if p.events_truncated {
                return;
            }
            p.approval_records.push(RecoveredApproval {
                after_events: p.events.len(),
                ts,
                record,
            });
        }
        // An answer the daemon gave a hook call itself: nothing to replay.
        Ok(None) => {}
        Err(why) => {
            sum.bad_answers += 1;
            sum.bad_answer.get_or_insert_with(|| why.to_string());
        }
    }
}
