//! `colibri-bridge gateway`: colibri's own socket protocol, served from
//! the fleet, so `colibri top`, `web` and `notify` show every host
//! without the `colibri` binary linking NATS (docs/FLEET.md, "The fleet
//! views").
//!
//! - `snapshot` and `status`: the pane rows of `colibri_panes`, each with
//!   its `host`, ids as `HOST/PANE`, and `unreachable_since` for a host
//!   whose `colibri_hosts` row is older than three heartbeats.
//! - `watch`: the stream `COLIBRI_EVENTS` from an ordered consumer, `seq`
//!   being the stream sequence, so `watch since N` resumes after N.
//! - `approvals` from every host, and the actions on a pane or an
//!   approval, sent to `colibri.cmd.<host>` and answered as the host's
//!   bridge answered.
//! - Anything else: `forbidden`, at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, consumer, stream::Stream};
use async_nats::Client;
use colibri::core::time::Timestamp;
use colibri::protocol::{
    err_line, ok_line, AlertHealth, ApprovalsArgs, Command, ErrorCode, LogHealth, Request,
    RequestError, StatusData, WatchArgs, WatchReply, SNAPSHOT_V1, SNAPSHOT_V2,
};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};

use crate::args::GatewayOpts;
use crate::fleet::{self, fleet_id, split_id, Bucket, Fleet};
use crate::nats::{self, HOSTS_BUCKET, PANES_BUCKET, STREAM};

/// Connections at once; past it a client is told `busy` and closed.
const MAX_CONNECTIONS: usize = 64;
/// A request line longer than this is refused and the connection closed.
const MAX_LINE: u64 = 1 << 20;
/// How long a host's bridge has to answer a relayed request (its own
/// wait on colibrid is 10 s).
const HOST_TIMEOUT: Duration = Duration::from_secs(12);
/// How long one host may take to list its approvals before the
/// aggregate goes on without it.
const APPROVALS_TIMEOUT: Duration = Duration::from_secs(3);

/// The commands the gateway serves, by wire name (the allow-list of
/// `colibri.cmd.<host>` for actions, and the reads made from the fleet).
pub const SERVED: [&str; 13] = [
    "status",
    "snapshot",
    "watch",
    "approvals",
    "approve",
    "deny",
    "answer",
    "pause-agent",
    "resume-agent",
    "start-agent",
    "stop-agent",
    "restart-agent",
    "kill-agent",
];

struct Gateway {
    client: Client,
    events: Stream,
    fleet: fleet::Shared,
    started: SystemTime,
}

pub async fn run(o: &GatewayOpts) -> Result<(), String> {
    let client = nats::connect(&o.nats, "colibri-bridge gateway", None).await?;
    let js = jetstream::new(client.clone());
    let init_first =
        |what: &str, e: String| format!("{what}: {e} (was `colibri-bridge init` run?)");
    let events = js
        .get_stream(STREAM)
        .await
        .map_err(|e| init_first(&format!("stream {STREAM}"), e.to_string()))?;
    let fleet = Arc::new(std::sync::Mutex::new(Fleet::new(o.heartbeat)));
    for (bucket, which) in [(PANES_BUCKET, Bucket::Panes), (HOSTS_BUCKET, Bucket::Hosts)] {
        let store = js
            .get_key_value(bucket)
            .await
            .map_err(|e| init_first(&format!("bucket {bucket}"), e.to_string()))?;
        fleet::load(&store, which, &fleet)
            .await
            .map_err(|e| format!("bucket {bucket}: {e}"))?;
        tokio::spawn(fleet::follow(store, which, fleet.clone()));
    }
    let listener = bind(&o.listen)?;
    if o.until_stdin_closes {
        tokio::spawn(exit_when_stdin_closes(o.listen.clone()));
    }
    eprintln!(
        "colibri-bridge gateway: serving the fleet on {}",
        o.listen.display()
    );
    let g = Arc::new(Gateway {
        client,
        events,
        fleet,
        started: SystemTime::now(),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((conn, _)) => match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let g = g.clone();
                    tokio::spawn(async move {
                        serve(g, conn).await;
                        drop(slot);
                    });
                }
                Err(_) => {
                    let busy = err_line(
                        None,
                        ErrorCode::Busy,
                        &format!("the gateway serves {MAX_CONNECTIONS} connections already"),
                    );
                    // Never waited on: a client that does not read is not
                    // worth a task.
                    let _ = conn.try_write(&busy);
                }
            },
            Err(e) => {
                eprintln!("colibri-bridge gateway: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Ends the process once standard input reaches EOF: the parent that
/// holds the pipe's other end is gone, however it ended.
async fn exit_when_stdin_closes(socket: std::path::PathBuf) {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    let _ = std::fs::remove_file(&socket);
    std::process::exit(0);
}

/// The socket, mode 0600: it answers as the operator on every host.
fn bind(path: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    let listener = UnixListener::bind(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(listener)
}

/// One connection: a request per line, a reply per line; a `watch` turns
/// it into the event stream for the rest of its life.
async fn serve(g: Arc<Gateway>, conn: UnixStream) {
    let (read, mut write) = conn.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut read)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') && line.len() as u64 > MAX_LINE {
            let _ = write
                .write_all(&err_line(None, ErrorCode::BadRequest, "request too long"))
                .await;
            return;
        }
        let req = match Request::parse(&line) {
            Ok(req) => req,
            Err((id, e)) => {
                let code = match e {
                    RequestError::UnknownCommand(_) => ErrorCode::UnknownCommand,
                    RequestError::BadArgs { .. } => ErrorCode::Invalid,
                    _ => ErrorCode::BadRequest,
                };
                if write
                    .write_all(&err_line(id.as_ref(), code, &e.to_string()))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        if let Command::Watch(args) = &req.command {
            let args = args.clone();
            watch(&g, req.id.as_ref(), args, read, write).await;
            return;
        }
        let reply = answer(&g, req).await;
        if write.write_all(&reply).await.is_err() {
            return;
        }
    }
}

async fn answer(g: &Gateway, mut req: Request) -> Vec<u8> {
    let id = req.id.clone();
    let id = id.as_ref();
    match &mut req.command {
        Command::Status => ok_line(id, &status(g)),
        Command::Snapshot(args) => snapshot(g, id, args.schema.as_deref()),
        Command::Approvals(args) => {
            let args = args.clone();
            approvals(g, id, args).await
        }
        Command::Approve(a) | Command::Deny(a) | Command::Answer(a) => {
            let target = std::mem::take(&mut a.approval);
            match split_id(&target) {
                Some((host, local)) => {
                    let host = host.to_string();
                    a.approval = local.to_string();
                    relay(g, &host, &req).await
                }
                None => unrouted(id, "an approval", &target),
            }
        }
        Command::PauseAgent(a)
        | Command::ResumeAgent(a)
        | Command::StartAgent(a)
        | Command::StopAgent(a)
        | Command::RestartAgent(a)
        | Command::KillAgent(a) => {
            let target = std::mem::take(&mut a.agent_id);
            match split_id(&target) {
                Some((host, local)) => {
                    let host = host.to_string();
                    a.agent_id = local.to_string();
                    relay(g, &host, &req).await
                }
                None => unrouted(id, "a pane", &target),
            }
        }
        other => err_line(
            id,
            ErrorCode::Forbidden,
            &format!(
                "{} is not served by the fleet gateway: it serves {}",
                other.name(),
                SERVED.join(", ")
            ),
        ),
    }
}

fn unrouted(id: Option<&Value>, what: &str, target: &str) -> Vec<u8> {
    err_line(
        id,
        ErrorCode::Invalid,
        &format!("{target:?} names no host: on the fleet, {what} is HOST/ID, as snapshot gives it"),
    )
}

/// Sends the request to the host's bridge and returns its reply line as
/// it came. A host with no bridge answers "no responders" at once.
async fn relay(g: &Gateway, host: &str, req: &Request) -> Vec<u8> {
    let id = req.id.as_ref();
    let payload = match req.to_line() {
        Ok(p) => p,
        Err(e) => return err_line(id, ErrorCode::Internal, &format!("encode: {e}")),
    };
    match ask(&g.client, host, payload, HOST_TIMEOUT).await {
        Ok(mut line) => {
            line.push(b'\n');
            line
        }
        Err((code, msg)) => err_line(id, code, &msg),
    }
}

/// One request on `colibri.cmd.<host>`: the reply's bytes, or why none.
async fn ask(
    client: &Client,
    host: &str,
    payload: Vec<u8>,
    limit: Duration,
) -> Result<Vec<u8>, (ErrorCode, String)> {
    let subject = crate::cmd::subject(host);
    match tokio::time::timeout(limit, client.request(subject.clone(), payload.into())).await {
        Ok(Ok(msg)) => Ok(msg.payload.to_vec()),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Err((
            ErrorCode::Os,
            format!("host {host} is unreachable: no bridge serves {subject} (no responders)"),
        )),
        Ok(Err(e)) => Err((ErrorCode::Os, format!("host {host}: {subject}: {e}"))),
        Err(_) => Err((
            ErrorCode::Timeout,
            format!("host {host} did not answer within {limit:?}"),
        )),
    }
}

/// `approvals` of every host (or of the one a `HOST/PANE` names), ids
/// made fleet ids. A host that does not answer is left out, not waited
/// for: its approvals are still in its pane rows.
async fn approvals(g: &Gateway, id: Option<&Value>, args: ApprovalsArgs) -> Vec<u8> {
    let (hosts, local) = match args.agent_id.as_deref() {
        Some(target) => match split_id(target) {
            Some((h, p)) => (vec![h.to_string()], Some(p.to_string())),
            None => return unrouted(id, "a pane", target),
        },
        None => (fleet::lock(&g.fleet).hosts(), None),
    };
    let req = Request {
        id: None,
        command: Command::Approvals(ApprovalsArgs {
            agent_id: local.clone(),
            after: None,
            limit: args.limit,
        }),
    };
    let line = match req.to_line() {
        Ok(l) => l,
        Err(e) => return err_line(id, ErrorCode::Internal, &format!("encode: {e}")),
    };
    // All hosts at once: a slow one costs its timeout once, not per host.
    let mut asked = tokio::task::JoinSet::new();
    for host in hosts {
        let (client, line) = (g.client.clone(), line.clone());
        asked.spawn(async move {
            let reply = ask(&client, &host, line, APPROVALS_TIMEOUT).await;
            (host, reply)
        });
    }
    let mut replies = Vec::new();
    while let Some(done) = asked.join_next().await {
        if let Ok((host, Ok(reply))) = done {
            if let Ok(reply) = serde_json::from_slice::<Value>(&reply) {
                replies.push((host, reply));
            }
        }
    }
    replies.sort_by(|a, b| a.0.cmp(&b.0));
    let mut pending = Vec::new();
    let mut approved = Vec::new();
    for (host, reply) in replies {
        if reply["ok"] != json!(true) {
            if local.is_some() {
                // One pane asked for: its host's refusal is the answer.
                let mut line = serde_json::to_vec(&reply).unwrap_or_default();
                line.push(b'\n');
                return line;
            }
            continue;
        }
        for mut a in reply["data"]["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            fleet::rewrite_approval(&mut a, &host);
            a["host"] = Value::from(host.as_str());
            pending.push(a);
        }
        for mut a in reply["data"]["approved"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            for field in ["pane", "approval_id"] {
                if let Some(v) = a[field].as_str() {
                    a[field] = Value::from(fleet_id(&host, v));
                }
            }
            a["host"] = Value::from(host.as_str());
            approved.push(a);
        }
    }
    ok_line(id, &json!({"approvals": pending, "approved": approved}))
}

fn now_rfc3339() -> String {
    Timestamp::from_system(SystemTime::now()).to_rfc3339()
}

fn snapshot(g: &Gateway, id: Option<&Value>, schema: Option<&str>) -> Vec<u8> {
    let rows = fleet::lock(&g.fleet).rows(SystemTime::now());
    match schema {
        Some("v2") => ok_line(
            id,
            &json!({"schema": SNAPSHOT_V2, "host": "fleet", "observed_at": now_rfc3339(), "panes": rows}),
        ),
        None | Some("v1") => {
            // The glasspane contract's fields only, as colibrid gives them.
            let panes: Vec<Value> = rows.iter().map(v1_row).collect();
            ok_line(
                id,
                &json!({"schema": SNAPSHOT_V1, "host": "fleet", "observed_at": now_rfc3339(), "panes": panes}),
            )
        }
        Some(other) => err_line(
            id,
            ErrorCode::Invalid,
            &format!("unknown schema {other:?} (v1 or v2)"),
        ),
    }
}

fn v1_row(p: &Value) -> Value {
    let mut row = json!({"id": p["id"], "agent": p["agent"], "state": p["state"]});
    for (to, from) in [
        ("pi_session_id", "session_id"),
        ("last_event_at", "last_event_at"),
        ("cwd", "cwd"),
    ] {
        if p[from].is_string() {
            row[to] = p[from].clone();
        }
    }
    if p["stalled"] == json!(true) {
        row["stalled"] = json!(true);
    }
    row
}

/// colibrid's `status`, summed over the fleet's pane rows.
fn status(g: &Gateway) -> StatusData {
    let f = fleet::lock(&g.fleet);
    let now = SystemTime::now();
    let rows = f.rows(now);
    let mut states = BTreeMap::new();
    for r in &rows {
        if let Some(s) = r["state"].as_str() {
            *states.entry(s.to_string()).or_insert(0) += 1;
        }
    }
    let count = |pred: &dyn Fn(&Value) -> bool| rows.iter().filter(|r| pred(r)).count();
    let hosts = f.hosts();
    let unreachable = hosts
        .iter()
        .filter(|h| f.unreachable_since(h, now).is_some())
        .count();
    StatusData {
        host: format!("fleet ({} hosts, {unreachable} unreachable)", hosts.len()),
        os: String::new(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        started_at: Timestamp::from_system(g.started).to_rfc3339(),
        agents: rows.len(),
        running: count(&|r| r["pid"].is_u64()),
        sessions: 0,
        connections: 0,
        watchers: 0,
        states,
        stalled: count(&|r| r["stalled"] == json!(true)),
        paused: count(&|r| r["paused"] == json!(true)),
        stall_after_ms: 0,
        scope: "operator".to_string(),
        logs: LogHealth::default(),
        reloads: 0,
        reload_errors: 0,
        restart_needed: Vec::new(),
        alerts: AlertHealth::default(),
        signals: BTreeMap::new(),
        alerts_unreachable: None,
    }
}

/// An event as the fleet names it: its pane and approval as fleet ids,
/// its `host`, the host's own seq as `host_seq`, and `seq` the stream
/// sequence (the cursor `watch since` takes).
fn fleet_event(subject: &str, stream_seq: u64, mut ev: Value) -> Option<Value> {
    let host = subject.split('.').nth(2)?.to_string();
    if !ev.is_object() {
        return None;
    }
    ev["host_seq"] = ev["seq"].take();
    ev["seq"] = Value::from(stream_seq);
    if let Some(p) = ev["pane"].as_str() {
        ev["pane"] = Value::from(fleet_id(&host, p));
    }
    if let Some(a) = ev["approval"].as_str() {
        ev["approval"] = Value::from(fleet_id(&host, a));
    } else if ev["approval"].is_object() {
        fleet::rewrite_approval(&mut ev["approval"], &host);
    }
    ev["host"] = Value::from(host);
    Some(ev)
}

/// The `gap` line for a `since` older than the stream's first message.
fn gap(since: Option<u64>, first: u64, messages: u64) -> Option<Vec<u8>> {
    let since = since?;
    if messages == 0 || since.saturating_add(1) >= first {
        return None;
    }
    let mut line = serde_json::to_vec(&json!({
        "seq": first - 1, "at": now_rfc3339(), "event": "gap", "since": since, "resumes_at": first
    }))
    .ok()?;
    line.push(b'\n');
    Some(line)
}

/// The stream from after `since` (or from now), one event per line, until
/// the client goes.
async fn watch(
    g: &Gateway,
    id: Option<&Value>,
    args: WatchArgs,
    mut read: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: OwnedWriteHalf,
) {
    let mut events = g.events.clone();
    let info = match events.info().await {
        Ok(i) => i.clone(),
        Err(e) => {
            let _ = write
                .write_all(&err_line(
                    id,
                    ErrorCode::Os,
                    &format!("stream {STREAM}: {e}"),
                ))
                .await;
            return;
        }
    };
    let last = info.state.last_sequence;
    let start = args.since.unwrap_or(last).saturating_add(1);
    let ordered = events
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: "colibri.evt.>".to_string(),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await;
    let mut messages = match ordered {
        Ok(c) => match c.messages().await {
            Ok(m) => m,
            Err(e) => {
                let _ = write
                    .write_all(&err_line(id, ErrorCode::Os, &format!("consumer: {e}")))
                    .await;
                return;
            }
        },
        Err(e) => {
            let _ = write
                .write_all(&err_line(id, ErrorCode::Os, &format!("consumer: {e}")))
                .await;
            return;
        }
    };
    let reply = WatchReply {
        watching: true,
        seq: last,
        epoch: None,
        // The stream's numbering: it starts over only with a new stream.
        journal_id: Some(format!("{STREAM}:{}", info.created.unix_timestamp_nanos())),
    };
    if write.write_all(&ok_line(id, &reply)).await.is_err() {
        return;
    }
    // Aged out of the stream (`max_age`): said, as colibrid says a
    // journal that no longer reaches back.
    if let Some(gap) = gap(args.since, info.state.first_sequence, info.state.messages) {
        if write.write_all(&gap).await.is_err() {
            return;
        }
    }
    let panes = args.panes.unwrap_or_default();
    let mut sink = [0u8; 512];
    loop {
        let msg = tokio::select! {
            m = messages.next() => m,
            // The client may send nothing more; EOF means it is gone.
            r = read.read(&mut sink) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
        };
        let Some(Ok(msg)) = msg else {
            let _ = write
                .write_all(&err_line(None, ErrorCode::Os, "the fleet stream ended"))
                .await;
            return;
        };
        let Ok(meta) = msg.info() else { continue };
        let seq = meta.stream_sequence;
        let Ok(ev) = serde_json::from_slice::<Value>(&msg.payload) else {
            continue;
        };
        let Some(ev) = fleet_event(&msg.subject, seq, ev) else {
            continue;
        };
        if !panes.is_empty()
            && !ev["pane"]
                .as_str()
                .is_some_and(|p| panes.iter().any(|w| w == p))
        {
            continue;
        }
        let mut line = serde_json::to_vec(&ev).unwrap_or_default();
        line.push(b'\n');
        if write.write_all(&line).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_since_older_than_the_stream_is_a_gap() {
        assert!(gap(None, 50, 10).is_none());
        assert!(gap(Some(49), 50, 10).is_none());
        assert!(gap(Some(3), 1, 0).is_none());
        let line = gap(Some(3), 50, 10).expect("a gap");
        let v: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(
            (
                v["seq"].clone(),
                v["event"].clone(),
                v["since"].clone(),
                v["resumes_at"].clone()
            ),
            (json!(49), json!("gap"), json!(3), json!(50))
        );
    }

    #[test]
    fn an_event_is_named_as_the_fleet_names_it() {
        let ev = json!({"seq": 7, "event": "approval_opened", "pane": "p1",
            "approval": {"id": "p1-1", "pane": "p1"}});
        let out = fleet_event("colibri.evt.h2.p1.approval_opened", 1042, ev).expect("event");
        assert_eq!(out["seq"], 1042);
        assert_eq!(out["host_seq"], 7);
        assert_eq!(out["host"], "h2");
        assert_eq!(out["pane"], "h2/p1");
        assert_eq!(out["approval"]["id"], "h2/p1-1");
        let gap = json!({"seq": 9, "event": "gap"});
        let out = fleet_event("colibri.evt.h1._.gap", 5, gap).expect("gap");
        assert!(out["pane"].is_null());
        assert_eq!(out["host"], "h1");
        assert!(fleet_event("colibri", 1, json!({})).is_none());
    }
}
