//! `colibri_hosts.<host>`: the host's row, rewritten every `--heartbeat`
//! whether or not events flow, so a fleet view tells a quiet host from a
//! gone one (three missed rows: unreachable).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{kv, Context};
use async_nats::HeaderMap;
use colibri::client::Client as Socket;
use colibri::core::time::Timestamp;
use colibri::protocol::Command;
use serde_json::{json, Value};

/// How long colibrid has to answer the row's `status`.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// What the bridge knows of the host between two rows.
pub struct HostState<'a> {
    pub host: &'a str,
    /// The bridge instance writing (`Colibri-Bridge`).
    pub bridge: &'a str,
    pub journal_id: &'a str,
    /// colibrid's run.
    pub epoch: &'a str,
    /// The host seq of the last message stored for the host.
    pub seq: u64,
    /// Its stream sequence.
    pub stream_seq: u64,
    pub heartbeat: Duration,
}

/// colibrid's `status` data, asked off the runtime (the socket blocks).
async fn status(socket: &Path) -> Result<Value, String> {
    let socket: PathBuf = socket.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Socket::connect(&socket, STATUS_TIMEOUT)
            .and_then(|mut s| s.call(&Command::Status))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The row: where the host's stream is, colibrid's version and its pane
/// counts (`null`, with `status_error`, when colibrid did not answer).
pub fn row(s: &HostState, status: Result<Value, String>, at: Timestamp) -> Value {
    let mut row = json!({
        "host": s.host,
        "bridge": s.bridge,
        "journal_id": s.journal_id,
        "epoch": s.epoch,
        "seq": s.seq,
        "stream_seq": s.stream_seq,
        "at": at.to_rfc3339(),
        "heartbeat_ms": u64::try_from(s.heartbeat.as_millis()).unwrap_or(u64::MAX),
        "bridge_version": env!("CARGO_PKG_VERSION"),
        "version": null,
        "counts": null,
    });
    match status {
        Ok(st) => {
            row["version"] = st["version"].clone();
            row["counts"] = json!({
                "agents": st["agents"],
                "running": st["running"],
                "paused": st["paused"],
                "stalled": st["stalled"],
                "states": st["states"],
            });
        }
        Err(e) => row["status_error"] = json!(e),
    }
    row
}

/// How long a row outlives its last rewrite where the bucket allows
/// per-message TTLs (`colibri-bridge init` on nats-server >= 2.11): the
/// fleet view's own "unreachable" horizon, three heartbeats, in the whole
/// seconds `Nats-TTL` counts in.
pub fn row_ttl(heartbeat: Duration) -> Duration {
    let ms = heartbeat.as_millis().saturating_mul(3);
    Duration::from_secs(u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX).max(1))
}

/// Writes the host's row; best effort, like every key-value write. On a
/// bucket that allows it the row carries a TTL, so a host whose bridge
/// stopped leaves no row behind that looks current to a new view.
pub async fn beat(
    hosts: &kv::Store,
    js: &Context,
    socket: &Path,
    s: &HostState<'_>,
) -> Result<(), String> {
    let st = status(socket).await;
    let row = row(s, st, Timestamp::from_system(SystemTime::now()));
    let why = |e: &dyn std::fmt::Display| format!("{}.{}: {e}", crate::nats::HOSTS_BUCKET, s.host);
    // The bucket's configuration as the bridge found it (no request).
    let ttl = hosts
        .status()
        .await
        .is_ok_and(|st| st.info.config.allow_message_ttl);
    if !ttl {
        return hosts
            .put(s.host, row.to_string().into())
            .await
            .map(|_| ())
            .map_err(|e| why(&e));
    }
    let prefix = hosts.put_prefix.as_ref().unwrap_or(&hosts.prefix);
    let mut headers = HeaderMap::new();
    let ttl = row_ttl(s.heartbeat).as_secs().to_string();
    headers.insert("Nats-TTL", ttl.as_str());
    js.publish_with_headers(
        format!("{prefix}{}", s.host),
        headers,
        row.to_string().into(),
    )
    .await
    .map_err(|e| why(&e))?
    .await
    .map(|_| ())
    .map_err(|e| why(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> HostState<'static> {
        HostState {
            host: "db1",
            bridge: "db1/7/1",
            journal_id: "c41d",
            epoch: "e9",
            seq: 42,
            stream_seq: 1042,
            heartbeat: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_row_lives_three_heartbeats_in_whole_seconds() {
        assert_eq!(row_ttl(Duration::from_secs(10)), Duration::from_secs(30));
        assert_eq!(row_ttl(Duration::from_millis(1500)), Duration::from_secs(5));
        assert_eq!(row_ttl(Duration::from_millis(100)), Duration::from_secs(1));
    }

    #[test]
    fn a_row_says_where_the_stream_is_and_what_runs() {
        let at = Timestamp::from_system(SystemTime::UNIX_EPOCH);
        let st = json!({"version":"0.1.0","agents":3,"running":2,"paused":1,"stalled":0,
            "states":{"working":2,"exited":1}});
        let r = row(&state(), Ok(st), at);
        assert_eq!(r["seq"], json!(42));
        assert_eq!(r["stream_seq"], json!(1042));
        assert_eq!(r["epoch"], json!("e9"));
        assert_eq!(r["heartbeat_ms"], json!(10_000));
        assert_eq!(r["version"], json!("0.1.0"));
        assert_eq!(r["counts"]["agents"], json!(3));
        assert_eq!(r["counts"]["states"]["working"], json!(2));
        assert_eq!(r["at"], json!("1970-01-01T00:00:00.000Z"));
        let r = row(&state(), Err("no socket".into()), at);
        assert_eq!(r["counts"], Value::Null);
        assert_eq!(r["status_error"], json!("no socket"));
    }
}
