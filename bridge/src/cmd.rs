//! `colibri.cmd.<host>`: the subject only the host's live bridge serves.
//!
//! - A request carrying the daemon protocol's request JSON is relayed to
//!   colibrid over the operator socket, if its command is on the fleet's
//!   allow-list, and colibrid's reply line goes back as it came. Anything
//!   else is refused here and never reaches the daemon. Nothing is
//!   queued for a host without a bridge: NATS answers "no responders".
//! - A ping (the `Colibri-Ping` header) is answered with the bridge's
//!   instance id: a bridge about to write asks first, and an answer means
//!   another bridge writes for this host.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, HeaderMap, Message};
use colibri::client::Client as Socket;
use colibri::protocol::{err_line, Command, ErrorCode, Request, RequestError};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::replies::{self, changes_something, Replies};

/// The header that makes a request on `colibri.cmd.<host>` a ping: the
/// live bridge answers it with its instance id and nothing else.
pub const PING_HEADER: &str = "Colibri-Ping";
/// How long the server has to confirm a subscription.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a bridge standing by asks again whether the writer is gone.
const STANDBY_POLL: Duration = Duration::from_secs(1);

pub fn subject(host: &str) -> String {
    format!("colibri.cmd.{host}")
}

/// How long a ping waits for every live bridge's answer (an empty
/// subject answers "no responders" at once).
const PING_WINDOW: Duration = Duration::from_millis(250);

/// The other bridges that answer a ping for `host` (none when the
/// server cannot be asked: the sequence chain still refuses a second
/// writer's publish).
async fn others(client: &Client, host: &str, me: &str) -> Vec<String> {
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else {
        return Vec::new();
    };
    let mut headers = HeaderMap::new();
    headers.insert(PING_HEADER, me);
    if client
        .publish_with_reply_and_headers(subject(host), inbox, headers, "".into())
        .await
        .is_err()
    {
        return Vec::new();
    }
    let deadline = tokio::time::Instant::now() + PING_WINDOW;
    let mut out = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await {
        if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            break;
        }
        let who = String::from_utf8_lossy(&msg.payload).into_owned();
        // Its own answer, from a subscription this bridge holds or just left.
        if who != me {
            out.push(who);
        }
    }
    out
}

/// A pause of up to half a second, different for each bridge and each
/// time: two bridges that yielded to each other do not meet again.
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(u64::from(nanos % 500))
}

/// Returns once no other bridge answers for `host`, saying once that it
/// waits.
pub async fn stand_by(client: &Client, host: &str, me: &str) {
    let mut told = false;
    loop {
        let others = others(client, host, me).await;
        let Some(other) = others.first() else { break };
        if !told {
            eprintln!(
                "colibri-bridge: another bridge ({other}) writes for host {host}: \
                 standing by until it stops"
            );
            told = true;
        }
        tokio::time::sleep(STANDBY_POLL + jitter()).await;
    }
    if told {
        eprintln!("colibri-bridge: no other bridge answers for host {host}: taking over");
    }
}

/// After subscribing: whether this bridge is the only one serving
/// `host`. Two that asked at the same moment both found nobody; now each
/// sees the other and both yield, then come back after a different pause.
pub async fn alone(client: &Client, host: &str, me: &str) -> bool {
    match others(client, host, me).await.first() {
        None => true,
        Some(other) => {
            eprintln!(
                "colibri-bridge: another bridge ({other}) began serving host {host} \
                 with this one: standing by"
            );
            tokio::time::sleep(jitter()).await;
            false
        }
    }
}

/// The commands `colibri.cmd.<host>` carries, by wire name: answering
/// approvals, and steering and reading panes. Nothing that starts a new
/// process from a request's own argv (`spawn-agent`), types into a pane,
/// or holds a connection open (`watch`, `attach`).
pub const ALLOWED: [&str; 12] = [
    "approve",
    "deny",
    "answer",
    "pause-agent",
    "resume-agent",
    "start-agent",
    "stop-agent",
    "restart-agent",
    "kill-agent",
    "snapshot",
    "approvals",
    "status",
];

fn allowed(c: &Command) -> bool {
    matches!(
        c,
        Command::Approve(_)
            | Command::Deny(_)
            | Command::Answer(_)
            | Command::PauseAgent(_)
            | Command::ResumeAgent(_)
            | Command::StartAgent(_)
            | Command::StopAgent(_)
            | Command::RestartAgent(_)
            | Command::KillAgent(_)
            | Command::Snapshot(_)
            | Command::Approvals(_)
            | Command::Status
    )
}

/// Who sent a request, as far as the server tells: the `user` of the
/// `Nats-Request-Info` header the server adds across accounts, else
/// `nats`. Core NATS does not name a publisher otherwise; the name is
/// trusted because only operators may publish on `colibri.cmd.*`.
fn requester(headers: Option<&HeaderMap>) -> String {
    let user = headers
        .and_then(|h| h.get("Nats-Request-Info"))
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v.as_str()).ok())
        .and_then(|info| info["user"].as_str().map(str::to_string))
        .filter(|u| !u.is_empty());
    let user: String = user
        .unwrap_or_else(|| "nats".to_string())
        .chars()
        .filter(|c| !c.is_control())
        .take(48)
        .collect();
    format!("fleet:{user}")
}

/// The request colibrid gets, or the refusal line to answer with.
pub fn admit(payload: &[u8], headers: Option<&HeaderMap>, host: &str) -> Result<Request, Vec<u8>> {
    let forbidden = |id: Option<&serde_json::Value>, name: &str| {
        err_line(
            id,
            ErrorCode::Forbidden,
            &format!(
                "{name} is not carried by colibri.cmd.{host}: the fleet may send {}",
                ALLOWED.join(", ")
            ),
        )
    };
    let mut req = Request::parse(payload).map_err(|(id, e)| match e {
        // Refused by name, whatever its arguments.
        RequestError::BadArgs { ref cmd, .. } if !ALLOWED.contains(&cmd.as_str()) => {
            forbidden(id.as_ref(), cmd)
        }
        RequestError::UnknownCommand(_) => {
            err_line(id.as_ref(), ErrorCode::UnknownCommand, &e.to_string())
        }
        RequestError::BadArgs { .. } => err_line(id.as_ref(), ErrorCode::Invalid, &e.to_string()),
        _ => err_line(id.as_ref(), ErrorCode::BadRequest, &e.to_string()),
    })?;
    if !allowed(&req.command) {
        return Err(forbidden(req.id.as_ref(), req.command.name()));
    }
    // The answer's record names the fleet path: `operator via fleet:USER`.
    if let Command::Approve(a) | Command::Deny(a) | Command::Answer(a) = &mut req.command {
        a.via = Some(requester(headers));
    }
    Ok(req)
}

/// How long colibrid has to answer a relayed request.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests waiting for colibrid; past it a request is refused as busy
/// rather than queued behind a slow daemon.
const PENDING: usize = 16;

/// Relays `req` to colibrid and returns its reply line as it came.
async fn relay(socket: &Path, req: Request, host: &str) -> Vec<u8> {
    let socket = socket.to_path_buf();
    let id = req.id.clone();
    let asked = tokio::task::spawn_blocking(move || {
        Socket::connect(&socket, DAEMON_TIMEOUT).and_then(|mut s| s.relay(&req))
    })
    .await;
    match asked {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => err_line(
            id.as_ref(),
            ErrorCode::Os,
            &format!("colibrid on host {host}: {e}"),
        ),
        Err(e) => err_line(id.as_ref(), ErrorCode::Internal, &format!("relay: {e}")),
    }
}

/// The tasks serving `colibri.cmd.<host>`, stopped (and the subject left)
/// when dropped.
pub struct Server(JoinHandle<()>, JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
        self.1.abort();
    }
}

/// The replies kept across sessions: a request whose reply was lost with
/// the connection is retried after the resync.
pub type Shared = Arc<Mutex<Replies>>;

/// Never held across an await; a poisoned lock (a panic elsewhere) still
/// holds good data.
fn lock(r: &Shared) -> std::sync::MutexGuard<'_, Replies> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Answers one relayed request after another: colibrid's socket is
/// local, and order is what an operator sent.
async fn relay_loop(
    client: Client,
    mut rx: mpsc::Receiver<Message>,
    host: String,
    socket: PathBuf,
    replies: Shared,
) {
    while let Some(msg) = rx.recv().await {
        let Some(reply) = msg.reply else { continue };
        let line = match admit(&msg.payload, msg.headers.as_ref(), &host) {
            Ok(req) => {
                let id = req.id.clone();
                // A repeated request (same id and body) gets the first reply.
                let kept = (id.is_some() && changes_something(&req.command))
                    .then(|| replies::key(&msg.payload));
                let now = std::time::Instant::now();
                let earlier = kept.and_then(|k| lock(&replies).get(k, now));
                let line = match earlier {
                    Some(line) => line,
                    None => {
                        let line = relay(&socket, req, &host).await;
                        if let Some(k) = kept {
                            lock(&replies).keep(k, &line, now);
                        }
                        line
                    }
                };
                let max = client.server_info().max_payload;
                if max > 0 && line.len() > max {
                    err_line(
                        id.as_ref(),
                        ErrorCode::Busy,
                        &format!(
                            "the reply is {} bytes, more than the server's max_payload {max}",
                            line.len()
                        ),
                    )
                } else {
                    line
                }
            }
            Err(refusal) => refusal,
        };
        let _ = client.publish(reply, trim_newline(line).into()).await;
    }
}

fn trim_newline(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    line
}

/// Subscribes to `colibri.cmd.<host>` and answers there until dropped.
pub async fn serve(
    client: &Client,
    host: &str,
    me: &str,
    socket: &Path,
    replies: &Shared,
) -> Result<Server, String> {
    let mut sub = client
        .subscribe(subject(host))
        .await
        .map_err(|e| format!("subscribe {}: {e}", subject(host)))?;
    // The subscription must be in place before this bridge writes: a
    // second bridge's ping then finds it.
    // Bounded: a flush sent while the connection is down may never end.
    match tokio::time::timeout(FLUSH_TIMEOUT, client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("subscribe {}: {e}", subject(host))),
        Err(_) => {
            return Err(format!(
                "subscribe {}: the server did not answer",
                subject(host)
            ))
        }
    }
    let (tx, rx) = mpsc::channel(PENDING);
    let relaying = tokio::spawn(relay_loop(
        client.clone(),
        rx,
        host.to_string(),
        socket.to_path_buf(),
        replies.clone(),
    ));
    let client = client.clone();
    let me = me.to_string();
    let host = host.to_string();
    // Pings are answered here, never behind a slow relayed request.
    let serving = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Some(reply) = msg.reply.clone() else {
                continue;
            };
            let is_ping = msg
                .headers
                .as_ref()
                .is_some_and(|h| h.get(PING_HEADER).is_some());
            if is_ping {
                let _ = client.publish(reply, me.clone().into()).await;
                continue;
            }
            if let Err(mpsc::error::TrySendError::Full(msg)) = tx.try_send(msg) {
                let id = Request::parse(&msg.payload).ok().and_then(|r| r.id);
                let busy = err_line(
                    id.as_ref(),
                    ErrorCode::Busy,
                    &format!("the bridge for host {host} has {PENDING} requests waiting"),
                );
                let _ = client.publish(reply, trim_newline(busy).into()).await;
            }
        }
    });
    Ok(Server(serving, relaying))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn refusal(line: Vec<u8>) -> Value {
        serde_json::from_slice(&line).expect("a reply envelope")
    }

    #[test]
    fn the_allow_list_is_the_commands_it_names() {
        for name in colibri::protocol::COMMAND_NAMES {
            let line = format!(r#"{{"cmd":"{name}"}}"#);
            // Arguments aside, a command is admitted exactly when listed.
            let refused_as_forbidden = match admit(line.as_bytes(), None, "h1") {
                Ok(_) => false,
                Err(l) => refusal(l)["code"] == json!("forbidden"),
            };
            assert_eq!(!refused_as_forbidden, ALLOWED.contains(&name), "{name}");
        }
    }

    #[test]
    fn a_refusal_says_why_and_echoes_the_id() {
        let r = refusal(
            admit(br#"{"cmd":"spawn-agent","argv":["sh"],"id":7}"#, None, "h1")
                .expect_err("refused"),
        );
        assert_eq!(r["ok"], json!(false));
        assert_eq!(r["code"], json!("forbidden"));
        assert_eq!(r["id"], json!(7));
        let msg = r["error"].as_str().expect("a message");
        assert!(
            msg.contains("spawn-agent") && msg.contains("colibri.cmd.h1"),
            "{msg}"
        );
        let r = refusal(admit(b"{nope", None, "h1").expect_err("refused"));
        assert_eq!(r["code"], json!("bad_request"));
    }

    #[test]
    fn an_answer_names_the_fleet_path() {
        let mut h = HeaderMap::new();
        h.insert("Nats-Request-Info", r#"{"acc":"COLIBRI","user":"alice"}"#);
        let req = admit(
            br#"{"cmd":"approve","approval":"p1","via":"board"}"#,
            Some(&h),
            "h1",
        )
        .expect("admitted");
        let Command::Approve(a) = req.command else {
            panic!("not approve")
        };
        assert_eq!(a.via.as_deref(), Some("fleet:alice"));
        let req = admit(br#"{"cmd":"deny","approval":"p1"}"#, None, "h1").expect("admitted");
        let Command::Deny(a) = req.command else {
            panic!("not deny")
        };
        assert_eq!(a.via.as_deref(), Some("fleet:nats"));
    }
}
