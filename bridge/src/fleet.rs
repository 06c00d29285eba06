//! The gateway's picture of the fleet: every host's pane rows from
//! `colibri_panes` and every host's heartbeat from `colibri_hosts`, kept
//! current by a watch on each bucket (all current values, then updates).
//!
//! Ids are made unique across hosts as `HOST/PANE`: a host id is one
//! subject token (`[a-z0-9_-]`), so the first `/` always ends it, and the
//! CLI and `top` pass an id through as written.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv;
use colibri::core::time::Timestamp;
use futures_util::StreamExt;
use serde_json::Value;

/// A host is unreachable when its row is older than this many heartbeats.
pub const MISSED_BEATS: u32 = 3;

/// `HOST/ID`: a pane or approval id unique across the fleet.
pub fn fleet_id(host: &str, id: &str) -> String {
    format!("{host}/{id}")
}

/// The host and the host's own id in a fleet id.
pub fn split_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/')
        .filter(|(h, rest)| crate::args::valid_token(h) && !rest.is_empty())
}

/// One host's last heartbeat: when the server stored it, and the period
/// the bridge promised.
#[derive(Clone, Debug)]
struct Beat {
    at: SystemTime,
    heartbeat: Duration,
}

#[derive(Default)]
pub struct Fleet {
    /// `(host, pane)` to the pane's `snapshot --schema v2` row.
    panes: BTreeMap<(String, String), Value>,
    hosts: BTreeMap<String, Beat>,
    /// The heartbeat assumed for a host row that does not give its own.
    pub default_heartbeat: Duration,
}

pub type Shared = Arc<Mutex<Fleet>>;

/// Never held across an await; a poisoned lock still holds good data.
pub fn lock(f: &Shared) -> std::sync::MutexGuard<'_, Fleet> {
    f.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Fleet {
    pub fn new(default_heartbeat: Duration) -> Fleet {
        Fleet {
            default_heartbeat,
            ..Fleet::default()
        }
    }

    fn apply_pane(&mut self, e: &kv::Entry) {
        let Some((host, pane)) = e.key.split_once('.') else {
            return;
        };
        let key = (host.to_string(), pane.to_string());
        match e.operation {
            kv::Operation::Put => match serde_json::from_slice::<Value>(&e.value) {
                Ok(row) if row.is_object() => {
                    self.panes.insert(key, row);
                }
                _ => {}
            },
            kv::Operation::Delete | kv::Operation::Purge => {
                self.panes.remove(&key);
            }
        }
    }

    fn apply_host(&mut self, e: &kv::Entry) {
        match e.operation {
            kv::Operation::Put => {
                let row: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                let heartbeat = row["heartbeat_ms"]
                    .as_u64()
                    .filter(|ms| *ms > 0)
                    .map_or(self.default_heartbeat, Duration::from_millis);
                // The server's clock, not the host's: hosts' clocks may
                // disagree, the server stamps every write the same way.
                let at = SystemTime::from(e.created);
                self.hosts.insert(e.key.clone(), Beat { at, heartbeat });
            }
            // The row expired (its TTL, three heartbeats) or was removed:
            // the host's last beat stands, so it reads as unreachable since
            // then rather than as a host that never beat.
            kv::Operation::Delete | kv::Operation::Purge => {}
        }
    }

    /// Every host that has a row or a pane.
    pub fn hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.hosts.keys().cloned().collect();
        for (h, _) in self.panes.keys() {
            if !out.contains(h) {
                out.push(h.clone());
            }
        }
        out.sort();
        out
    }

    /// When the host stopped beating (its last heartbeat), if it is
    /// unreachable at `now`.
    pub fn unreachable_since(&self, host: &str, now: SystemTime) -> Option<String> {
        let beat = self.hosts.get(host)?;
        let late = now.duration_since(beat.at).unwrap_or_default();
        (late > beat.heartbeat * MISSED_BEATS).then(|| Timestamp::from_system(beat.at).to_rfc3339())
    }

    /// Every pane row with its fleet id, `host` and, for an unreachable
    /// host, `unreachable_since`; in host, then pane order.
    pub fn rows(&self, now: SystemTime) -> Vec<Value> {
        self.panes
            .iter()
            .map(|((host, pane), row)| {
                let mut row = row.clone();
                row["id"] = Value::from(fleet_id(host, pane));
                row["host"] = Value::from(host.as_str());
                if let Some(since) = self.unreachable_since(host, now) {
                    row["unreachable_since"] = Value::from(since);
                }
                if let Some(approvals) = row.get_mut("approvals").and_then(Value::as_array_mut) {
                    for a in approvals {
                        rewrite_approval(a, host);
                    }
                }
                row
            })
            .collect()
    }
}

/// An approval's `id` and `pane` as fleet ids.
pub fn rewrite_approval(a: &mut Value, host: &str) {
    for field in ["id", "pane"] {
        if let Some(id) = a[field].as_str() {
            a[field] = Value::from(fleet_id(host, id));
        }
    }
}

/// Which bucket an entry updates.
#[derive(Clone, Copy)]
pub enum Bucket {
    Panes,
    Hosts,
}

/// Loads the bucket's current values, then follows it until the watch
/// ends (the connection's own reconnects keep it alive).
pub async fn load(store: &kv::Store, which: Bucket, fleet: &Shared) -> Result<(), String> {
    let mut keys = store.keys().await.map_err(|e| e.to_string())?;
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| e.to_string())?;
        if let Ok(Some(e)) = store.entry(key).await {
            apply(fleet, which, &e);
        }
    }
    Ok(())
}

fn apply(fleet: &Shared, which: Bucket, e: &kv::Entry) {
    let mut f = lock(fleet);
    match which {
        Bucket::Panes => f.apply_pane(e),
        Bucket::Hosts => f.apply_host(e),
    }
}

/// Follows the bucket's updates for good (all current values first, so a
/// change made between `load` and here is not missed).
pub async fn follow(store: kv::Store, which: Bucket, fleet: Shared) {
    loop {
        match store.watch_with_history(">").await {
            Ok(mut w) => {
                while let Some(e) = w.next().await {
                    match e {
                        Ok(e) => apply(&fleet, which, &e),
                        Err(e) => {
                            eprintln!("colibri-bridge gateway: watch: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => eprintln!("colibri-bridge gateway: watch: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_id_splits_at_the_host() {
        assert_eq!(fleet_id("h2", "9f0c-1"), "h2/9f0c-1");
        assert_eq!(split_id("h2/9f0c-1"), Some(("h2", "9f0c-1")));
        assert_eq!(split_id("h2/a/b"), Some(("h2", "a/b")));
        for bad in ["9f0c", "/x", "h2/", "H2/x", "a.b/x"] {
            assert_eq!(split_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_host_three_beats_late_is_unreachable_since_its_last_beat() {
        let mut f = Fleet::new(Duration::from_secs(10));
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        f.hosts.insert(
            "h1".into(),
            Beat {
                at: t,
                heartbeat: Duration::from_secs(1),
            },
        );
        f.panes
            .insert(("h1".into(), "p1".into()), serde_json::json!({"id":"p1"}));
        assert_eq!(f.unreachable_since("h1", t + Duration::from_secs(3)), None);
        let late = t + Duration::from_millis(3001);
        let since = f.unreachable_since("h1", late).expect("unreachable");
        assert!(since.starts_with("2027-01-15T08:00:00"), "{since}");
        let rows = f.rows(late);
        assert_eq!(rows[0]["id"], "h1/p1");
        assert_eq!(rows[0]["host"], "h1");
        assert_eq!(rows[0]["unreachable_since"], Value::from(since));
    }
}
