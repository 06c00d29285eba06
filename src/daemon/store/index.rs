//! `index.json`: a cache of session metadata, encoded by pure functions.
//!
//! The index exists for what a log cannot tell: turn counts (the daemon
//! counts turns, the log does not mark them), how often a log was compacted,
//! and the rotation baselines. Everything else is rebuilt from the logs at
//! open. Writing it (to `index.json.new`, fsync, rename) is the store's job;
//! this module only turns values into bytes and back.

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
