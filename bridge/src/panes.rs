//! `colibri_panes.<host>.<pane>`: each pane's current `snapshot --schema
//! v2` row. Rewritten 100 ms after a pane's event (coalesced) and every
//! 2 s regardless (usage and cost are not on the watch stream), never
//! more than a tenth of the time (`PACE`); only rows
//! that changed are written, and a pane gone from the snapshot (removed,
//! or lost in a gap) has its key deleted. After a gap the keys therefore
//! equal a fresh snapshot.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{kv, Context};
use colibri::client::Client as Socket;
use colibri::protocol::{Command, SnapshotArgs};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::nats::PANES_BUCKET;

/// How long events of a burst are gathered into one snapshot.
pub const COALESCE: Duration = Duration::from_millis(100);
/// How often rows are refreshed with no event.
pub const REFRESH: Duration = Duration::from_secs(2);
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// The rows may take at most about 1 / (1 + PACE) of the bridge's time:
/// after a sync that took `d`, the next waits at least `PACE × d`. On a
/// host with thousands of panes a snapshot takes long enough that syncing
/// every 100 ms through a burst (a catch-up after an outage) would starve
/// the publishing the rows are only a view of.
const PACE: u32 = 9;

pub struct Panes {
    /// What each of the host's keys holds, as this bridge wrote or found it.
    written: HashMap<String, String>,
    /// Whether the bucket's keys for the host were read since start.
    primed: bool,
    dirty_since: Option<Instant>,
    next_refresh: Instant,
    /// No sync before this (`PACE`).
    not_before: Instant,
}

impl Panes {
    pub fn new(now: Instant) -> Panes {
        Panes {
            written: HashMap::new(),
            primed: false,
            dirty_since: None,
            next_refresh: now,
            not_before: now,
        }
    }

    /// A pane's event came: rows are due soon.
    pub fn touch(&mut self, now: Instant) {
        self.dirty_since.get_or_insert(now);
    }

    /// When the rows are next due.
    pub fn due(&self) -> Instant {
        let due = match self.dirty_since {
            Some(t) => (t + COALESCE).min(self.next_refresh),
            None => self.next_refresh,
        };
        due.max(self.not_before)
    }

    /// Brings the host's keys to colibrid's current snapshot.
    pub async fn sync(
        &mut self,
        js: &Context,
        bucket: &kv::Store,
        socket: &Path,
        host: &str,
    ) -> Result<(), String> {
        let now = Instant::now();
        self.dirty_since = None;
        self.next_refresh = now + REFRESH;
        let result = self.write(js, bucket, socket, host).await;
        self.not_before = Instant::now() + now.elapsed() * PACE;
        result
    }

    async fn write(
        &mut self,
        js: &Context,
        bucket: &kv::Store,
        socket: &Path,
        host: &str,
    ) -> Result<(), String> {
        if !self.primed {
            self.prime(js, host).await?;
            self.primed = true;
        }
        let rows = snapshot(socket).await?;
        let mut seen = std::collections::HashSet::new();
        for row in rows {
            let Some(id) = row["id"].as_str().filter(|id| token(id)) else {
                continue;
            };
            seen.insert(id.to_string());
            let text = row.to_string();
            if self.written.get(id) == Some(&text) {
                continue;
            }
            bucket
                .put(format!("{host}.{id}"), text.clone().into())
                .await
                .map_err(|e| format!("{PANES_BUCKET}.{host}.{id}: {e}"))?;
            self.written.insert(id.to_string(), text);
        }
        let gone: Vec<String> = self
            .written
            .keys()
            .filter(|id| !seen.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            bucket
                .delete(format!("{host}.{id}"))
                .await
                .map_err(|e| format!("{PANES_BUCKET}.{host}.{id}: {e}"))?;
            self.written.remove(&id);
        }
        Ok(())
    }

    /// The host's keys in the bucket (a bridge before this one wrote
    /// them): so those of panes gone meanwhile are deleted.
    async fn prime(&mut self, js: &Context, host: &str) -> Result<(), String> {
        let stream = js
            .get_stream(format!("KV_{PANES_BUCKET}"))
            .await
            .map_err(|e| format!("bucket {PANES_BUCKET}: {e}"))?;
        let prefix = format!("$KV.{PANES_BUCKET}.{host}.");
        let mut subjects = stream
            .info_with_subjects(format!("{prefix}>"))
            .await
            .map_err(|e| format!("bucket {PANES_BUCKET}: {e}"))?;
        let mut ids = Vec::new();
        while let Some(s) = subjects.next().await {
            let (subject, _) = s.map_err(|e| format!("bucket {PANES_BUCKET}: {e}"))?;
            if let Some(id) = subject.strip_prefix(&prefix) {
                ids.push(id.to_string());
            }
        }
        // Unknown content: rewritten if the pane is there, deleted if not
        // (a key already deleted keeps one marker: history 1).
        for id in ids {
            self.written.entry(id).or_default();
        }
        Ok(())
    }
}

/// A pane id as a key token (pane ids are UUIDs).
fn token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `snapshot --schema v2`'s rows, asked off the runtime.
async fn snapshot(socket: &Path) -> Result<Vec<Value>, String> {
    let socket: PathBuf = socket.to_path_buf();
    let data = tokio::task::spawn_blocking(move || {
        Socket::connect(&socket, SNAPSHOT_TIMEOUT)
            .and_then(|mut s| {
                s.call(&Command::Snapshot(SnapshotArgs {
                    schema: Some("v2".to_string()),
                }))
            })
            .map_err(|e| format!("snapshot: {e}"))
    })
    .await
    .map_err(|e| e.to_string())??;
    match data["panes"].as_array() {
        Some(rows) => Ok(rows.clone()),
        None => Err("snapshot: no panes in the reply".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_due_after_a_burst_or_on_the_refresh() {
        let t = Instant::now();
        let mut p = Panes::new(t);
        p.next_refresh = t + REFRESH;
        assert_eq!(p.due(), t + REFRESH);
        p.touch(t + Duration::from_millis(10));
        p.touch(t + Duration::from_millis(50));
        assert_eq!(p.due(), t + Duration::from_millis(10) + COALESCE);
        // After a slow sync the next one waits its pace, burst or not.
        p.not_before = t + Duration::from_secs(1);
        assert_eq!(p.due(), t + Duration::from_secs(1));
        assert!(token("0f9e-aa_1") && !token("a.b") && !token(""));
    }
}
