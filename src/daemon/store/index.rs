//! `index.json`: a cache of session metadata, encoded by pure functions.
//!
//! The index exists for what a log cannot tell: turn counts (the daemon
//! counts turns, the log does not mark them), how often a log was compacted,
//! and the rotation baselines. Everything else is rebuilt from the logs at
//! open. Writing it (to `index.json.new`, then a rename; not fsynced) is
//! the store's job; this module only turns values into bytes and back.

use serde::{Deserialize, Serialize};

pub(super) const INDEX_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct IndexFile {
    pub version: u32,
    pub sessions: Vec<IndexEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct IndexEntry {
    pub id: String,
    #[serde(default)]
    pub panes: Vec<String>,
    #[serde(default)]
    pub runtime: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub created_at_ms: u64,
    #[serde(default)]
    pub turn_count: u64,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub final_state: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub exit_signal: Option<i32>,
    #[serde(default)]
    pub rotated: u32,
    /// Log size right after the last rotation: the next one is due
    /// `rotate_bytes` later.
    #[serde(default)]
    pub rotate_base_bytes: u64,
    /// Turn count at the last rotation.
    #[serde(default)]
    pub rotate_base_turns: u64,
}

/// [`IndexEntry`] borrowed from a session, to encode without a copy: the
/// same fields in the same order, so it reads back as an `IndexEntry`.
#[derive(Debug, Serialize)]
pub(super) struct IndexEntryView<'a> {
    pub id: &'a str,
    pub panes: &'a [String],
    pub runtime: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub created_at_ms: u64,
    pub turn_count: u64,
    pub bytes: u64,
    pub final_state: Option<&'a str>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub rotated: u32,
    pub rotate_base_bytes: u64,
    pub rotate_base_turns: u64,
}

/// Sessions a step of an [`IndexDraft`] encodes: about a quarter of a
/// millisecond of the loop. Encoded in one go, the index of 10,000
/// sessions held the loop for 8 to 30 ms at every heartbeat that followed
/// a change, and the store keeps every session it has ever seen.
pub(super) const ENTRIES_PER_STEP: usize = 256;

/// The index being encoded, a step at a time across wakeups. Each entry is
/// encoded whole at one instant; a change to an entry already encoded is
/// caught by the next draft (the index is a cache, written again at the
/// next heartbeat after any change).
#[derive(Debug)]
pub(super) struct IndexDraft {
    text: Vec<u8>,
    /// The next session to encode.
    pub next: usize,
    /// Sessions per step (`usize::MAX`: all at once, at shutdown).
    pub per_step: usize,
    /// Entries encoded so far (retired sessions' slots are skipped).
    written: usize,
    failed: bool,
}

impl IndexDraft {
    pub fn new(per_step: usize) -> IndexDraft {
        let text = format!("{{\"version\":{INDEX_VERSION},\"sessions\":[").into_bytes();
        IndexDraft {
            text,
            next: 0,
            per_step,
            written: 0,
            failed: false,
        }
    }

    /// Passes over a slot with no session in it (a retired one).
    pub fn skip(&mut self) {
        self.next += 1;
    }

    pub fn push(&mut self, entry: &IndexEntryView<'_>) {
        if self.written > 0 {
            self.text.push(b',');
        }
        self.next += 1;
        self.written += 1;
        // Plain strings and integers into a Vec: serde_json cannot refuse
        // them, but a draft that failed is dropped, not written torn.
        if serde_json::to_writer(&mut self.text, entry).is_err() {
            self.failed = true;
        }
    }

    /// The encoded index, or `None` if an entry could not be encoded.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        self.text.extend_from_slice(b"]}\n");
        (!self.failed).then_some(self.text)
    }
}

#[cfg(test)]
pub(super) fn encode(entries: Vec<IndexEntry>) -> Vec<u8> {
    let file = IndexFile {
        version: INDEX_VERSION,
        sessions: entries,
    };
    // Serialising plain strings and integers into a Vec cannot fail; fall
    // back to an empty index rather than panic if it ever did.
    let mut out = serde_json::to_vec_pretty(&file)
        .unwrap_or_else(|_| b"{\"version\":1,\"sessions\":[]}".to_vec());
    out.push(b'\n');
    out
}

/// Decodes an index; a file of another version is an error (it is only a
/// cache, so the caller rebuilds from the logs).
pub(super) fn decode(bytes: &[u8]) -> Result<Vec<IndexEntry>, String> {
    let file: IndexFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if file.version != INDEX_VERSION {
        return Err(format!(
            "index version {} (expected {INDEX_VERSION})",
            file.version
        ));
    }
    Ok(file.sessions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_reads_back_as_the_entries_it_was_given() {
        let entries: Vec<IndexEntry> = (0..3)
            .map(|i| IndexEntry {
                id: format!("s\"{i}"),
                panes: (0..i).map(|p| format!("p{p}")).collect(),
                runtime: (i > 0).then(|| "pi".into()),
                cwd: (i == 2).then(|| "/w\u{e9}".into()),
                created_at_ms: 5 + i as u64,
                turn_count: 3,
                bytes: 100,
                final_state: (i == 1).then(|| "done".into()),
                exit_code: (i == 1).then_some(0),
                exit_signal: (i == 2).then_some(9),
                rotated: 1,
                rotate_base_bytes: 50,
                rotate_base_turns: 2,
            })
            .collect();
        for n in 0..=entries.len() {
            let mut draft = IndexDraft::new(ENTRIES_PER_STEP);
            for e in &entries[..n] {
                draft.push(&IndexEntryView {
                    id: &e.id,
                    panes: &e.panes,
                    runtime: e.runtime.as_deref(),
                    cwd: e.cwd.as_deref(),
                    created_at_ms: e.created_at_ms,
                    turn_count: e.turn_count,
                    bytes: e.bytes,
                    final_state: e.final_state.as_deref(),
                    exit_code: e.exit_code,
                    exit_signal: e.exit_signal,
                    rotated: e.rotated,
                    rotate_base_bytes: e.rotate_base_bytes,
                    rotate_base_turns: e.rotate_base_turns,
                });
            }
            let text = draft.finish().expect("encoded");
            assert!(text.ends_with(b"\n"));
            assert_eq!(decode(&text), Ok(entries[..n].to_vec()));
        }
    }

    #[test]
    fn round_trips_and_rejects_other_versions() {
        let e = IndexEntry {
            id: "s1".into(),
            panes: vec!["p".into()],
            runtime: Some("pi".into()),
            cwd: None,
            created_at_ms: 5,
            turn_count: 3,
            bytes: 100,
            final_state: Some("done".into()),
            exit_code: Some(0),
            exit_signal: None,
            rotated: 1,
            rotate_base_bytes: 50,
            rotate_base_turns: 2,
        };
        assert_eq!(decode(&encode(vec![e.clone()])), Ok(vec![e]));
        assert!(decode(br#"{"version":2,"sessions":[]}"#).is_err());
        assert!(decode(b"{torn").is_err());
    }
}
