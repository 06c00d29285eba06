//! Compaction of one session log: drop the streaming deltas of finished
//! turns, keep everything else, and replace the log crash-safely.
//!
//! Two passes over the log. The first classifies every event line and
//! remembers, per pane, the last line that closes a turn (a `Boundary`);
//! a `Delta` line is dropped only if a later `Boundary` of the same pane
//! exists, because only then is its turn finished. The second pass copies
//! the kept lines to `<id>.jsonl.compact.new` behind a `compacted` marker,
//! fsyncs it, renames it over the log and fsyncs the directory. A crash
//! before the rename leaves the old log intact; the `.new` file is deleted
//! at the next open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::core::time::Timestamp;

use super::record::{encode_compacted, TsText};
use super::scan::RecordFields;
use super::{CompactReport, LineClass, LOG_MODE};

/// Per-line fate from the first pass.
const FATE_KEEP: u32 = u32::MAX;
/// A line that does not parse; compaction drops it so the log stays valid.
const FATE_CORRUPT: u32 = u32::MAX - 1;
/// An earlier `compacted` marker, replaced by the new one.
const FATE_MARKER: u32 = u32::MAX - 2;

/// The result of [`compact_log`]: the report, and whether the log was
/// replaced (nothing to drop means no rewrite).
pub(super) struct Compacted {
    pub report: CompactReport,
    pub rewritten: bool,
}

/// Compacts `log` in place via `tmp`. `default_runtime` classifies lines of
/// panes that have no `attach` record.
pub(super) fn compact_log(
    log: &Path,
    tmp: &Path,
    default_runtime: Option<&str>,
    classify: &dyn Fn(Option<&str>, &[u8]) -> LineClass,
    ts: &mut TsText,
    now: Timestamp,
) -> io::Result<Compacted> {
    let before_bytes = fs::metadata(log)?.len();

    // Pass 1: classify.
    let mut panes: Vec<PaneMark> = Vec::new();
    let mut fates: Vec<u32> = Vec::new();
    let mut prev_dropped: u64 = 0;
    let mut complete_len: u64 = 0;
    let mut reader = BufReader::with_capacity(1 << 16, File::open(log)?);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            // End of file, or a torn tail that is not copied.
            break;
        }
        complete_len += n as u64;
        let idx = fates.len() as u64;
        let fate = match RecordFields::parse(&line[..n - 1]) {
            None => FATE_CORRUPT,
            Some(rec) if rec.is("compacted") => {
                prev_dropped = prev_dropped.saturating_add(rec.dropped.unwrap_or(0));
                FATE_MARKER
            }
            Some(rec) if rec.is("attach") => {
                let slot = pane_slot(&mut panes, rec.pane());
                panes[slot].runtime = rec.runtime.as_deref().map(str::to_string);
                FATE_KEEP
            }
            Some(rec) => match rec.ev {
                Some(ev) => {
                    let slot = pane_slot(&mut panes, rec.pane());
                    let runtime = panes[slot].runtime.as_deref().or(default_runtime);
                    match classify(runtime, ev.get().as_bytes()) {
                        LineClass::Delta => slot as u32,
                        LineClass::Boundary => {
                            panes[slot].last_boundary = Some(idx);
                            FATE_KEEP
                        }
                        LineClass::Keep => FATE_KEEP,
                    }
                }
                None => FATE_KEEP,
            },
        };
        fates.push(fate);
    }
    drop(reader);

    let drops = |idx: usize, fate: u32| -> bool {
        match fate {
            FATE_KEEP => false,
            FATE_CORRUPT | FATE_MARKER => true,
            slot => panes
                .get(slot as usize)
                .and_then(|p| p.last_boundary)
                .is_some_and(|b| (idx as u64) < b),
        }
    };
    let dropped_lines = fates
        .iter()
        .enumerate()
        .filter(|&(i, &f)| f != FATE_MARKER && drops(i, f))
        .count() as u64;
    if dropped_lines == 0 {
        return Ok(Compacted {
            report: CompactReport {
                before_bytes,
                after_bytes: before_bytes,
                dropped_lines: 0,
            },
            rewritten: false,
        });
    }

    // Pass 2: copy what is kept.
    let result = (|| -> io::Result<u64> {
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(LOG_MODE)
            .custom_flags(libc::O_CLOEXEC)
            .open(tmp)?;
        let mut out = BufWriter::with_capacity(1 << 16, out);
        let mut head = Vec::with_capacity(96);
        encode_compacted(
            &mut head,
            ts,
            now,
            prev_dropped.saturating_add(dropped_lines),
        );
        out.write_all(&head)?;
        let mut after_bytes = head.len() as u64;
        let mut reader = BufReader::with_capacity(1 << 16, File::open(log)?.take(complete_len));
        for (idx, &fate) in fates.iter().enumerate() {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            if !drops(idx, fate) {
                out.write_all(&line)?;
                after_bytes += line.len() as u64;
            }
        }
        let out = out.into_inner().map_err(|e| e.into_error())?;
        out.sync_all()?;
        Ok(after_bytes)
    })();
    let after_bytes = match result {
        Ok(n) => n,
        Err(e) => {
            // Best effort: the next open deletes it anyway.
            let _ = fs::remove_file(tmp);
            return Err(e);
        }
    };
    fs::rename(tmp, log)?;
    if let Some(dir) = log.parent() {
        sync_dir(dir)?;
    }
    Ok(Compacted {
        report: CompactReport {
            before_bytes,
            after_bytes,
            dropped_lines,
        },
        rewritten: true,
    })
}

/// Makes a rename in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

struct PaneMark {
    pane: String,
    runtime: Option<String>,
    last_boundary: Option<u64>,
}

fn pane_slot(panes: &mut Vec<PaneMark>, pane: &str) -> usize {
    if let Some(i) = panes.iter().position(|p| p.pane == pane) {
        return i;
    }
    panes.push(PaneMark {
        pane: pane.to_string(),
        runtime: None,
        last_boundary: None,
    });
    panes.len() - 1
}
