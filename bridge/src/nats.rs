//! The JetStream side: `init` creates the stream and buckets, `run`
//! publishes one host's events exactly once per seq.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream, Context};
use async_nats::HeaderMap;
use serde_json::{json, Value};

use crate::args::{InitOpts, RunOpts};
use crate::watch::{self, Item, Resume};

pub const STREAM: &str = "COLIBRI_EVENTS";
pub const PANES_BUCKET: &str = "colibri_panes";
pub const HOSTS_BUCKET: &str = "colibri_hosts";
/// Long enough to cover a bridge restart and an ack timeout with margin.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

pub async fn init(o: &InitOpts) -> Result<(), String> {
    let js = connect(&o.url, "colibri-bridge init").await?;
    let cfg = stream::Config {
        name: STREAM.to_string(),
        subjects: vec!["colibri.evt.>".to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::Old,
        max_age: o.max_age,
        num_replicas: o.replicas,
        duplicate_window: DUPLICATE_WINDOW,
        deny_delete: true,
        deny_purge: true,
        allow_direct: true,
        ..Default::default()
    };
    js.get_or_create_stream(cfg)
        .await
        .map_err(|e| format!("stream {STREAM}: {e}"))?;
    for bucket in [PANES_BUCKET, HOSTS_BUCKET] {
        js.create_key_value(kv::Config {
            bucket: bucket.to_string(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: o.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("bucket {bucket}: {e}"))?;
    }
    println!("stream {STREAM} and buckets {PANES_BUCKET}, {HOSTS_BUCKET} are ready");
    Ok(())
}

async fn connect(url: &str, name: &str) -> Result<Context, String> {
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .connect(url)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    Ok(jetstream::new(client))
}

/// Publishes until stopped. A NATS error (the server gone, an ack that
/// never came) resyncs from the stream rather than retrying blind: what
/// the server stored is the truth, so a publish it took before dying is
/// not sent again after the duplicate window closed.
pub async fn run(o: &RunOpts) -> Result<(), String> {
    let js = connect(&o.url, &format!("colibri-bridge {}", o.host)).await?;
    let mut backoff = RETRY_MIN;
    let mut first = true;
    loop {
        let pass = session(&js, o, first).await;
        first = false;
        match pass {
            Ok(()) => return Ok(()),
            Err(Failure::Fatal(msg)) => return Err(msg),
            Err(Failure::Retry { msg, published }) => {
                if published > 0 {
                    backoff = RETRY_MIN;
                }
                eprintln!("colibri-bridge: {msg}; resyncing in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
    }
}

enum Failure {
    /// Worth another try after a pause (the server or colibrid away).
    Retry { msg: String, published: u64 },
    /// Retrying cannot help (no stream at start: `init` was never run;
    /// later, a server coming back may briefly not know it yet).
    Fatal(String),
}

fn retry(msg: String) -> Failure {
    Failure::Retry { msg, published: 0 }
}

/// One pass: the host's last stored message, then `watch since` it, each
/// event published and acked before the next.
async fn session(js: &Context, o: &RunOpts, first: bool) -> Result<(), Failure> {
    let stream = match js.get_stream(STREAM).await {
        Ok(s) => s,
        Err(e) => {
            let missing = matches!(
                e.kind(),
                jetstream::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            );
            let msg = format!("stream {STREAM}: {e}");
            return Err(if missing && first {
                Failure::Fatal(format!("{msg}: run `colibri-bridge init` first"))
            } else {
                retry(msg)
            });
        }
    };
    let resume = last_stored(&stream, &o.host).await.map_err(retry)?;
    let hosts = js
        .get_key_value(HOSTS_BUCKET)
        .await
        .map_err(|e| retry(format!("bucket {HOSTS_BUCKET}: {e}")))?;
    let panes = js
        .get_key_value(PANES_BUCKET)
        .await
        .map_err(|e| retry(format!("bucket {PANES_BUCKET}: {e}")))?;
    let mut rx = watch::follow(&o.socket, resume);
    let mut journal_id = String::new();
    let mut published = 0u64;
    let fail = |msg: String, published: u64| Failure::Retry { msg, published };
    while let Some(item) = rx.recv().await {
        let ev = match item {
            Item::Started {
                journal_id: id,
                since,
            } => {
                eprintln!(
                    "colibri-bridge: host {} publishing journal {id} after seq {since}",
                    o.host
                );
                journal_id = id;
                continue;
            }
            Item::Failed(msg) => return Err(fail(msg, published)),
            Item::Event(ev) => ev,
        };
        let out = Outgoing::of(&o.host, &journal_id, &ev).map_err(|m| fail(m, published))?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", out.msg_id.as_str());
        let payload =
            serde_json::to_vec(&ev).map_err(|e| fail(format!("encode event: {e}"), published))?;
        let ack = js
            .publish_with_headers(out.subject, headers, payload.into())
            .await
            .map_err(|e| fail(format!("publish seq {}: {e}", out.seq), published))?;
        ack.await
            .map_err(|e| fail(format!("ack of seq {}: {e}", out.seq), published))?;
        published += 1;
        // Current state is best effort: the stream is the record, and
        // the next heartbeat or pane event writes it again.
        if let Err(e) = current_state(&hosts, &panes, &o.host, &journal_id, &ev).await {
            eprintln!(
                "colibri-bridge: key-value update after seq {}: {e}",
                out.seq
            );
        }
    }
    Err(fail("the watch thread ended".into(), published))
}

/// The host's last stored message: a wildcard last-by-subject read.
async fn last_stored(stream: &stream::Stream, host: &str) -> Result<Option<Resume>, String> {
    let subject = format!("colibri.evt.{host}.>");
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(msg) => {
            let id = msg
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            parse_msg_id(host, &id).map(Some).ok_or(format!(
                "the last message on {subject} has no colibri message id ({id:?})"
            ))
        }
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(format!("last message on {subject}: {e}")),
    }
}

/// `<host>:<journal_id>:<seq>`, the message id of an event.
pub fn msg_id(host: &str, journal_id: &str, seq: u64) -> String {
    format!("{host}:{journal_id}:{seq}")
}

fn parse_msg_id(host: &str, id: &str) -> Option<Resume> {
    let rest = id.strip_prefix(host)?.strip_prefix(':')?;
    let (journal_id, seq) = rest.rsplit_once(':')?;
    Some(Resume {
        journal_id: journal_id.to_string(),
        seq: seq.parse().ok()?,
    })
}

/// Where one event goes.
#[derive(Debug, PartialEq)]
struct Outgoing {
    subject: String,
    msg_id: String,
    seq: u64,
}

impl Outgoing {
    fn of(host: &str, journal_id: &str, ev: &Value) -> Result<Outgoing, String> {
        let seq = ev["seq"]
            .as_u64()
            .ok_or_else(|| format!("a watch line without a seq: {ev}"))?;
        let event = ev["event"]
            .as_str()
            .filter(|e| subject_token(e))
            .unwrap_or("_");
        let pane = ev["pane"]
            .as_str()
            .filter(|p| subject_token(p))
            .unwrap_or("_");
        Ok(Outgoing {
            subject: format!("colibri.evt.{host}.{pane}.{event}"),
            msg_id: msg_id(host, journal_id, seq),
            seq,
        })
    }
}

/// Safe as one subject token (pane ids are UUIDs; event names words).
fn subject_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `colibri_hosts.<host>` on each heartbeat; `colibri_panes.<host>.<pane>`
/// holds the pane's last event, deleted when the pane is removed.
async fn current_state(
    hosts: &kv::Store,
    panes: &kv::Store,
    host: &str,
    journal_id: &str,
    ev: &Value,
) -> Result<(), String> {
    let event = ev["event"].as_str().unwrap_or_default();
    if event == "heartbeat" {
        let row = json!({
            "host": host,
            "journal_id": journal_id,
            "epoch": ev["epoch"],
            "seq": ev["seq"],
            "at": ev["at"],
            "version": env!("CARGO_PKG_VERSION"),
        });
        hosts
            .put(host, row.to_string().into())
            .await
            .map_err(|e| e.to_string())?;
    }
    let Some(pane) = ev["pane"].as_str().filter(|p| subject_token(p)) else {
        return Ok(());
    };
    let key = format!("{host}.{pane}");
    if event == "removed" {
        panes.delete(&key).await.map_err(|e| e.to_string())?;
    } else {
        panes
            .put(&key, ev.to_string().into())
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_goes_to_its_host_pane_and_name_with_a_lasting_id() {
        let ev = json!({"seq": 42, "event": "exited", "pane": "9f0c", "code": 3});
        assert_eq!(
            Outgoing::of("db1", "c41d", &ev),
            Ok(Outgoing {
                subject: "colibri.evt.db1.9f0c.exited".into(),
                msg_id: "db1:c41d:42".into(),
                seq: 42,
            })
        );
        let gap = json!({"seq": 8999, "event": "gap", "since": 3, "resumes_at": 9000});
        let out = Outgoing::of("db1", "c41d", &gap).expect("a gap");
        assert_eq!(out.subject, "colibri.evt.db1._.gap");
        // A token that would split or widen a subject never reaches one.
        let odd = json!({"seq": 1, "event": "x.y", "pane": "a>"});
        let out = Outgoing::of("db1", "c41d", &odd).expect("odd");
        assert_eq!(out.subject, "colibri.evt.db1._._");
        assert!(Outgoing::of("db1", "c41d", &json!({"event": "x"})).is_err());
    }

    #[test]
    fn a_message_id_reads_back_as_where_to_resume() {
        let id = msg_id("db1", "c41d", 42);
        assert_eq!(
            parse_msg_id("db1", &id),
            Some(Resume {
                journal_id: "c41d".into(),
                seq: 42
            })
        );
        assert_eq!(parse_msg_id("db2", &id), None);
        assert_eq!(parse_msg_id("db1", "db1:c41d:x"), None);
        assert_eq!(parse_msg_id("db1", "db1c41d42"), None);
    }
}
