//! Compaction of one session log: drop the streaming deltas of finished
//! turns, keep everything else, and replace the log crash-safely.
//!
//! A [`Job`] makes two passes over the log, a bounded slice per
//! [`Job::step`]. The scan classifies every event line and remembers, per
//! pane, the offset of its last line that closes a turn (a `Boundary`); a
//! `Delta` line is dropped only if a later `Boundary` of the same pane
//! exists, because only then is its turn finished. The write pass copies
//! the kept lines to `<id>.jsonl.compact.new` behind a `compacted` marker.
//! The store keeps appending to the log meanwhile, so the job then copies
//! that tail verbatim (it needs no compaction), fsyncs the new file,
//! renames it over the log and fsyncs the directory. A crash before the
//! rename leaves the old log intact; the `.new` file is deleted at the next
//! open.
//!
//! Memory is bounded: a few numbers per pane, one read buffer and the
//! longest line. A step reads at most its budget.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::core::time::Timestamp;

use super::record::{encode_compacted, TsText};
use super::scan::RecordFields;
use super::{CompactReport, LineClass, LOG_MODE};

/// Bytes read per `read` call; a step makes as many as its budget allows.
const READ_CHUNK: usize = 64 << 10;

/// The result of a finished [`Job`]: the report, and whether the log was
/// replaced (nothing to drop means no rewrite).
#[derive(Debug)]
pub(super) struct Compacted {
    pub report: CompactReport,
    pub rewritten: bool,
}

/// What one [`Job::step`] did.
#[derive(Debug)]
pub(super) enum Step {
    /// More work remains; `read` bytes were read from the log.
    Working { read: usize },
    /// The job is over.
    Finished { read: usize, done: Compacted },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// The log is not open yet.
    Start,
    /// Pass 1 over `[0, end)`: classify.
    Scan,
    /// Pass 2 over `[0, complete_len)`: copy what is kept.
    Write,
    /// Copy what the store appended since the job started.
    Tail,
}

/// One compaction of one log, run a bounded slice at a time.
#[derive(Debug)]
pub(super) struct Job {
    log: PathBuf,
    tmp: PathBuf,
    /// Classifies lines of panes that have no `attach` record.
    default_runtime: Option<String>,
    /// Stamps the `compacted` marker.
    now: Timestamp,
    phase: Phase,
    reader: Option<File>,
    out: Option<BufWriter<File>>,
    /// Next offset to read.
    pos: u64,
    /// Log length when the job started: the scan stops there.
    end: u64,
    /// End of the last complete line before `end`. The write pass stops
    /// there and the tail copy starts there, so a line that was still
    /// being written at the start is copied whole with the tail.
    complete_len: u64,
    /// Offset of `carry[0]` in the log.
    carry_at: u64,
    /// Bytes read but not yet processed: the start of a line.
    carry: Vec<u8>,
    chunk: Vec<u8>,
    panes: Vec<PaneMark>,
    prev_dropped: u64,
    dropped_lines: u64,
    after_bytes: u64,
}

struct PaneMark {
    pane: String,
    runtime: Option<String>,
    /// Offset of the pane's last `Boundary` line (after the scan).
    last_boundary: Option<u64>,
    /// Deltas since the last `Boundary` seen by the scan.
    open_deltas: u64,
}

impl std::fmt::Debug for PaneMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaneMark")
            .field("pane", &self.pane)
            .field("last_boundary", &self.last_boundary)
            .finish_non_exhaustive()
    }
}

impl Job {
    pub(super) fn new(log: &Path, default_runtime: Option<&str>, now: Timestamp) -> Job {
        let mut tmp = log.to_path_buf().into_os_string();
        tmp.push(super::COMPACT_SUFFIX);
        Job {
            log: log.to_path_buf(),
            tmp: PathBuf::from(tmp),
            default_runtime: default_runtime.map(str::to_string),
            now,
            phase: Phase::Start,
            reader: None,
            out: None,
            pos: 0,
            end: 0,
            complete_len: 0,
            carry_at: 0,
            carry: Vec::new(),
            chunk: Vec::new(),
            panes: Vec::new(),
            prev_dropped: 0,
            dropped_lines: 0,
            after_bytes: 0,
        }
    }

    /// Does at most `budget` bytes of reads (at least one byte, so every
    /// step makes progress) and the writes they imply. On an error the
    /// `.new` file is removed (best effort) and the log is left as it was,
    /// unless the error is the directory fsync after the rename.
    pub(super) fn step(
        &mut self,
        budget: usize,
        classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass,
        ts: &mut TsText,
    ) -> io::Result<Step> {
        let result = self.run(budget.max(1), classify, ts);
        if result.is_err() && self.phase != Phase::Start {
            self.abandon();
        }
        result
    }

    /// Drops the `.new` file of an unfinished job (best effort: the next
    /// open deletes it anyway).
    pub(super) fn abandon(&mut self) {
        self.out = None;
        if self.phase != Phase::Start {
            let _ = fs::remove_file(&self.tmp);
        }
    }

    fn run(
        &mut self,
        budget: usize,
        classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass,
        ts: &mut TsText,
    ) -> io::Result<Step> {
        let mut read = 0;
        loop {
            match self.phase {
                Phase::Start => {
                    let file = match File::open(&self.log) {
                        Ok(f) => f,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            return Ok(Step::Finished {
                                read,
                                done: Compacted {
                                    report: CompactReport::default(),
                                    rewritten: false,
                                },
                            });
                        }
                        Err(e) => return Err(e),
                    };
                    self.end = file.metadata()?.len();
                    self.reader = Some(file);
                    self.chunk = vec![0; READ_CHUNK];
                    self.phase = Phase::Scan;
                }
                Phase::Scan if self.pos >= self.end => {
                    // What is left in `carry` is an unfinished line.
                    self.complete_len = self.carry_at;
                    self.carry.clear();
                    if self.dropped_lines == 0 {
                        return Ok(Step::Finished {
                            read,
                            done: Compacted {
                                report: CompactReport {
                                    before_bytes: self.end,
                                    after_bytes: self.end,
                                    dropped_lines: 0,
                                },
                                rewritten: false,
                            },
                        });
                    }
                    self.start_write(ts)?;
                }
                Phase::Write if self.pos >= self.complete_len => {
                    self.phase = Phase::Tail;
                }
                Phase::Scan | Phase::Write => {
                    if read >= budget {
                        return Ok(Step::Working { read });
                    }
                    let limit = if self.phase == Phase::Scan {
                        self.end
                    } else {
                        self.complete_len
                    };
                    let want = (budget - read)
                        .min(READ_CHUNK)
                        .min(usize::try_from(limit - self.pos).unwrap_or(usize::MAX));
                    let n = self.read_chunk(want)?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the log shrank during compaction",
                        ));
                    }
                    read += n;
                    self.carry.extend_from_slice(&self.chunk[..n]);
                    self.lines(classify)?;
                }
                Phase::Tail => {
                    if read >= budget {
                        return Ok(Step::Working { read });
                    }
                    let want = (budget - read).min(READ_CHUNK);
                    let n = self.read_chunk(want)?;
                    read += n;
                    if n > 0 {
                        if let Some(out) = &mut self.out {
                            out.write_all(&self.chunk[..n])?;
                        }
                        self.after_bytes += n as u64;
                        continue;
                    }
                    // Caught up with the log: nothing is appended to it
                    // between here and the caller reopening its fd.
                    let done = self.finish()?;
                    return Ok(Step::Finished { read, done });
                }
            }
        }
    }

    fn read_chunk(&mut self, want: usize) -> io::Result<usize> {
        let Some(file) = &self.reader else {
            return Ok(0);
        };
        loop {
            match file.read_at(&mut self.chunk[..want], self.pos) {
                Ok(n) => {
                    self.pos += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn start_write(&mut self, ts: &mut TsText) -> io::Result<()> {
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(LOG_MODE)
            .custom_flags(libc::O_CLOEXEC)
            .open(&self.tmp)?;
        self.phase = Phase::Write;
        let mut out = BufWriter::with_capacity(READ_CHUNK, out);
        let mut head = Vec::with_capacity(96);
        encode_compacted(
            &mut head,
            ts,
            self.now,
            self.prev_dropped.saturating_add(self.dropped_lines),
        );
        out.write_all(&head)?;
        self.out = Some(out);
        self.after_bytes = head.len() as u64;
        // The write pass replays the attach records from the start.
        for p in &mut self.panes {
            p.runtime = None;
        }
        self.pos = 0;
        self.carry_at = 0;
        self.carry.clear();
        Ok(())
    }

    /// Processes the complete lines in `carry`.
    fn lines(&mut self, classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass) -> io::Result<()> {
        let carry = std::mem::take(&mut self.carry);
        let mut start = 0;
        let mut result = Ok(());
        while let Some(nl) = carry[start..].iter().position(|&b| b == b'\n') {
            let line = &carry[start..start + nl + 1];
            let at = self.carry_at + start as u64;
            start += nl + 1;
            if self.phase == Phase::Scan {
                self.scan_line(at, line, classify);
            } else if self.keeps(at, line, classify) {
                if let Some(out) = &mut self.out {
                    if let Err(e) = out.write_all(line) {
                        result = Err(e);
                        break;
                    }
                }
                self.after_bytes += line.len() as u64;
            }
        }
        self.carry = carry;
        self.carry.drain(..start);
        self.carry_at += start as u64;
        result
    }

    fn scan_line(
        &mut self,
        at: u64,
        line: &[u8],
        classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass,
    ) {
        match RecordFields::parse(&line[..line.len() - 1]) {
            // Compaction drops a line that does not parse, so the log
            // stays valid.
            None => self.dropped_lines += 1,
            Some(rec) if rec.is("compacted") => {
                // An earlier marker, replaced by the new one.
                self.prev_dropped = self.prev_dropped.saturating_add(rec.dropped.unwrap_or(0));
            }
            Some(rec) if rec.is("attach") => {
                let slot = pane_slot(&mut self.panes, rec.pane());
                self.panes[slot].runtime = rec.runtime.as_deref().map(str::to_string);
            }
            Some(rec) => {
                if let Some(ev) = rec.ev {
                    let slot = pane_slot(&mut self.panes, rec.pane());
                    let p = &mut self.panes[slot];
                    let runtime = p.runtime.as_deref().or(self.default_runtime.as_deref());
                    match classify(runtime, ev.get().as_bytes()) {
                        LineClass::Delta => p.open_deltas += 1,
                        LineClass::Boundary => {
                            p.last_boundary = Some(at);
                            self.dropped_lines += p.open_deltas;
                            p.open_deltas = 0;
                        }
                        LineClass::Keep => {}
                    }
                }
            }
        }
    }

    /// The write pass's verdict on the line at offset `at`. Attach records
    /// are replayed so each line is classified with the same runtime as in
    /// the scan.
    fn keeps(
        &mut self,
        at: u64,
        line: &[u8],
        classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass,
    ) -> bool {
        match RecordFields::parse(&line[..line.len() - 1]) {
            None => false,
            Some(rec) if rec.is("compacted") => false,
            Some(rec) if rec.is("attach") => {
                let slot = pane_slot(&mut self.panes, rec.pane());
                self.panes[slot].runtime = rec.runtime.as_deref().map(str::to_string);
                true
            }
            Some(rec) => match rec.ev {
                Some(ev) => {
                    let slot = pane_slot(&mut self.panes, rec.pane());
                    let p = &self.panes[slot];
                    let runtime = p.runtime.as_deref().or(self.default_runtime.as_deref());
                    match classify(runtime, ev.get().as_bytes()) {
                        LineClass::Delta => p.last_boundary.is_none_or(|b| at >= b),
                        LineClass::Boundary | LineClass::Keep => true,
                    }
                }
                None => true,
            },
        }
    }

    /// fsync, rename over the log, fsync the directory.
    fn finish(&mut self) -> io::Result<Compacted> {
        self.reader = None;
        if let Some(out) = self.out.take() {
            let out = out.into_inner().map_err(|e| e.into_error())?;
            out.sync_all()?;
        }
        fs::rename(&self.tmp, &self.log)?;
        // From here the log is replaced: the caller must reopen its fd even
        // if the directory fsync fails, so that error is not returned here.
        let report = CompactReport {
            before_bytes: self.end,
            after_bytes: self.after_bytes,
            dropped_lines: self.dropped_lines,
        };
        self.phase = Phase::Start;
        Ok(Compacted {
            report,
            rewritten: true,
        })
    }

    /// The directory holding the log, to fsync after the rename.
    pub(super) fn dir(&self) -> Option<&Path> {
        self.log.parent()
    }
}

/// Makes a rename in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn pane_slot(panes: &mut Vec<PaneMark>, pane: &str) -> usize {
    if let Some(i) = panes.iter().position(|p| p.pane == pane) {
        return i;
    }
    panes.push(PaneMark {
        pane: pane.to_string(),
        runtime: None,
        last_boundary: None,
        open_deltas: 0,
    });
    panes.len() - 1
}
