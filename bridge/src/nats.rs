//! The JetStream side: `init` creates the stream and buckets, `run`
//! publishes one host's events exactly once per seq.

use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, kv, stream, Context};
use async_nats::{Client, HeaderMap};
use serde_json::Value;

use crate::args::{InitOpts, Nats, RunOpts};
use crate::cmd;
use crate::hosts::{self, HostState};
use crate::panes::Panes;
use crate::watch::{self, Item, Resume};

pub const STREAM: &str = "COLIBRI_EVENTS";
pub const PANES_BUCKET: &str = "colibri_panes";
pub const HOSTS_BUCKET: &str = "colibri_hosts";
/// Long enough to cover a bridge restart and an ack timeout with margin.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// The longest the client waits between attempts to reach a server that
/// is gone (async-nats' own default grows to 4 s): the catch-up after an
/// outage starts at most this long after the server is back.
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// How long the marker an expired host row leaves stays: a KV watcher
/// that was away this long still learns the host's row went.
const EXPIRY_MARKER_TTL: Duration = Duration::from_secs(3600);
/// Names the bridge instance that stored a message: how a bridge tells
/// its own writes from another's when the stream moves under it.
pub const WRITER_HEADER: &str = "Colibri-Bridge";
/// The sequence chain: the stream sequence of the host's last stored
/// message, and the filter that makes it the host's (servers >= 2.11).
const EXPECTED_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";
const EXPECTED_SEQ_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

pub async fn init(o: &InitOpts) -> Result<(), String> {
    let client = connect(&o.nats, "colibri-bridge init", None).await?;
    // Connected for good once a round trip is done: only then does the
    // client know the server's version.
    client
        .flush()
        .await
        .map_err(|e| format!("{}: {e}", o.nats.url))?;
    let version = client.server_info().version;
    if !at_least(&version, (2, 10)) {
        return Err(format!(
            "nats-server {version} is older than 2.10, which colibri-bridge needs \
             (its NATS client cannot create the key-value buckets on 2.9)"
        ));
    }
    let js = jetstream::new(client);
    // Atomic batches (servers >= 2.12) let a backlog go in a round trip
    // or two; an older stream gains them on the next init.
    let atomic = batch_supported(&version);
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
        allow_atomic_publish: atomic,
        ..Default::default()
    };
    let found = js
        .get_or_create_stream(cfg)
        .await
        .map_err(|e| format!("stream {STREAM}: {e}"))?
        .cached_info()
        .config
        .clone();
    if atomic && !found.allow_atomic_publish {
        js.update_stream(stream::Config {
            allow_atomic_publish: true,
            ..found
        })
        .await
        .map_err(|e| format!("stream {STREAM}: allow atomic batches: {e}"))?;
    }
    // Host rows may expire (per-message TTLs, servers >= 2.11); an
    // older bucket gains it on the next init.
    let ttl = at_least(&version, (2, 11));
    for bucket in [PANES_BUCKET, HOSTS_BUCKET] {
        let cfg = kv::Config {
            bucket: bucket.to_string(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: o.replicas,
            limit_markers: (ttl && bucket == HOSTS_BUCKET).then_some(EXPIRY_MARKER_TTL),
            ..Default::default()
        };
        let made = if cfg.limit_markers.is_some() {
            js.create_or_update_key_value(cfg)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        } else {
            js.create_key_value(cfg)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        };
        made.map_err(|e| format!("bucket {bucket}: {e}"))?;
    }
    println!("stream {STREAM} and buckets {PANES_BUCKET}, {HOSTS_BUCKET} are ready");
    Ok(())
}

/// `inbox`: the prefix of the client's reply subjects, so that a host's
/// user may subscribe to its own replies only (`_INBOX_<host>.>`).
pub async fn connect(nats: &Nats, name: &str, inbox: Option<&str>) -> Result<Client, String> {
    // async-nats takes no user from the URL: pass it as options, and keep
    // the password out of every message.
    let (url, login) = split_login(&nats.url);
    // The client retries for ever: say what happens (a refused login, the
    // server gone), once per change, or a pane that never connects looks
    // like one that has nothing to send.
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(move |event| {
            let last = last.clone();
            async move {
                let text = event.to_string();
                let mut seen = last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *seen != text {
                    eprintln!("colibri-bridge: nats: {text}");
                    *seen = text;
                }
            }
        });
    if let Some((user, pass)) = login {
        opts = opts.user_and_password(user, pass);
    }
    if let Some(creds) = &nats.creds {
        opts = with_credentials(opts, creds).await?;
    }
    if let Some(prefix) = inbox {
        opts = opts.custom_inbox_prefix(prefix);
    }
    if let Some(ca) = &nats.tls_ca {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    // A list is a Vec to async-nats: as one string it is one bad URL.
    let servers: Vec<&str> = url.split(',').collect();
    opts.connect(servers)
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// 0 ms, then doubling from 2 ms up to `RECONNECT_MAX`.
fn reconnect_delay(attempts: usize) -> Duration {
    let doubled = 1u64 << attempts.clamp(1, 11).saturating_sub(1);
    match attempts {
        0 | 1 => Duration::ZERO,
        _ => Duration::from_millis(doubled).min(RECONNECT_MAX),
    }
}

/// The pause before a resync: `backoff`, cut short when the client, away
/// from the server as it began, is connected again, so that the bridge
/// resumes as soon as the server is back rather than up to `RETRY_MAX`
/// later.
async fn pause(client: &Client, backoff: Duration) {
    use async_nats::connection::State;
    let deadline = tokio::time::Instant::now() + backoff;
    let away = client.connection_state() != State::Connected;
    while tokio::time::Instant::now() < deadline {
        let step = deadline.saturating_duration_since(tokio::time::Instant::now());
        tokio::time::sleep(step.min(Duration::from_millis(20))).await;
        if away && client.connection_state() == State::Connected {
            return;
        }
    }
}

/// `--creds FILE`: a JWT credentials file (`nsc`, decentralised auth) or
/// a bare user nkey seed (`SU…`, the server configuration listing the
/// user's public key). A seed is one token, a creds file is not, so the
/// file's contents tell them apart; neither is ever echoed.
async fn with_credentials(
    opts: async_nats::ConnectOptions,
    path: &std::path::Path,
) -> Result<async_nats::ConnectOptions, String> {
    let why = |e: std::io::Error| format!("credentials {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(why)?;
    match user_seed(&text) {
        Some(seed) => Ok(opts.nkey(seed.to_string())),
        None => opts.credentials_file(path).await.map_err(why),
    }
}

/// The nkey seed a file holds, if it holds a user seed and nothing else.
fn user_seed(text: &str) -> Option<&str> {
    let seed = text.trim();
    (seed.starts_with("SU")
        && seed.len() > 2
        && seed
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
    .then_some(seed)
}

/// The server URLs without their `user:password@`, and the first login
/// found in them.
fn split_login(urls: &str) -> (String, Option<(String, String)>) {
    let mut login = None;
    let bare: Vec<String> = urls
        .split(',')
        .map(|u| {
            let u = u.trim();
            let Some((scheme, rest)) = u.split_once("://") else {
                return u.to_string();
            };
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rsplit_once('@') {
                Some((userinfo, host)) => {
                    if login.is_none() {
                        let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                        login = Some((user.to_string(), pass.to_string()));
                    }
                    format!("{scheme}://{host}{}", &rest[authority_end..])
                }
                None => u.to_string(),
            }
        })
        .collect();
    (bare.join(","), login)
}

/// The host's own reply subjects (docs/FLEET.md's permissions).
fn inbox_prefix(host: &str) -> String {
    format!("_INBOX_{host}")
}

/// This bridge's name on the messages it stores: unique per process.
fn instance_id(host: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}/{}/{nanos:08x}", std::process::id())
}

/// Whether the server checks `Nats-Expected-Last-Subject-Sequence`
/// against a subject filter: 2.11 and later. Older ones ignore the filter
/// header and check the exact subject, which would refuse every publish.
pub fn chain_supported(version: &str) -> bool {
    at_least(version, (2, 11))
}

/// Whether the server stores atomic batches (ADR-50): 2.12 and later.
pub fn batch_supported(version: &str) -> bool {
    at_least(version, (2, 12))
}

/// Whether a server version (`2.15.1`, `2.12.3-RC.1`) is `min` or later.
fn at_least(version: &str, min: (u64, u64)) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= min
}

/// Publishes until stopped. A NATS error (the server gone, an ack that
/// never came) resyncs from the stream rather than retrying blind: what
/// the server stored is the truth, so a publish it took before dying is
/// not sent again after the duplicate window closed.
pub async fn run(o: &RunOpts) -> Result<(), String> {
    let name = format!("colibri-bridge {}", o.host);
    let client = connect(&o.nats, &name, Some(&inbox_prefix(&o.host))).await?;
    let js = jetstream::new(client.clone());
    let me = instance_id(&o.host);
    let replies = cmd::Shared::default();
    let mut backoff = RETRY_MIN;
    let mut first = true;
    loop {
        // One writer per host: wait while another bridge serves it, then
        // serve it before writing, so the next one to start waits too.
        cmd::stand_by(&client, &o.host, &me).await;
        let server = match cmd::serve(&client, &o.host, &me, &o.socket, &replies).await {
            Ok(s) => s,
            Err(msg) => {
                eprintln!("colibri-bridge: {msg}; resyncing in {backoff:?}");
                pause(&client, backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
                continue;
            }
        };
        if !cmd::alone(&client, &o.host, &me).await {
            drop(server);
            continue;
        }
        let pass = session(&client, &js, o, &me, first).await;
        drop(server);
        first = false;
        match pass {
            Ok(()) => return Ok(()),
            Err(Failure::Fatal(msg)) => return Err(msg),
            Err(Failure::Conflict(msg)) => {
                eprintln!("colibri-bridge: {msg}: another bridge writes for this host");
            }
            Err(Failure::Retry { msg, published }) => {
                if published > 0 {
                    backoff = RETRY_MIN;
                }
                eprintln!("colibri-bridge: {msg}; resyncing in {backoff:?}");
                pause(&client, backoff).await;
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
    /// The host's stream moved under this bridge: another one stored the
    /// event, or a message this one never saw. It stands by while the
    /// other answers, then reads the last stored message and resumes.
    Conflict(String),
}

fn retry(msg: String) -> Failure {
    Failure::Retry { msg, published: 0 }
}

impl Failure {
    /// A retry that says how many events this pass stored before it.
    fn counting(self, published: u64) -> Failure {
        match self {
            Failure::Retry { msg, .. } => Failure::Retry { msg, published },
            other => other,
        }
    }
}

/// One pass: the host's last stored message, then `watch since` it, each
/// event published and acked before the next.
async fn session(
    client: &Client,
    js: &Context,
    o: &RunOpts,
    me: &str,
    first: bool,
) -> Result<(), Failure> {
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
    let last = last_stored(&stream, &o.host).await.map_err(retry)?;
    let version = client.server_info().version;
    let chain = chain_supported(&version);
    // The stream sequence the next publish must follow (0: none yet).
    let mut after = last.as_ref().map_or(0, |l| l.stream_seq);
    let resume = last.map(|l| l.resume);
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
    let mut epoch = String::new();
    let mut seq = 0u64;
    let mut started = false;
    let mut next_beat = tokio::time::Instant::now();
    let mut rows = Panes::new(next_beat);
    let mut published = 0u64;
    let mut batching = chain && batch_supported(&version);
    let mut batches = 0u64;
    let mut held = None;
    let fail = |msg: String, published: u64| Failure::Retry { msg, published };
    loop {
        // The host's row on every heartbeat, busy or quiet.
        if started && tokio::time::Instant::now() >= next_beat {
            let state = HostState {
                host: &o.host,
                bridge: me,
                journal_id: &journal_id,
                epoch: &epoch,
                seq,
                stream_seq: after,
                heartbeat: o.heartbeat,
            };
            if let Err(e) = hosts::beat(&hosts, js, &o.socket, &state).await {
                eprintln!("colibri-bridge: host row: {e}");
            }
            next_beat = tokio::time::Instant::now() + o.heartbeat;
        }
        // Current state is best effort: the stream is the record, and
        // the next pass writes the rows again.
        if started && tokio::time::Instant::now() >= rows.due() {
            if let Err(e) = rows.sync(js, &panes, &o.socket, &o.host).await {
                eprintln!("colibri-bridge: pane rows: {e}");
            }
        }
        let item = if let Some(item) = held.take() {
            Some(item)
        } else if started {
            match tokio::time::timeout_at(next_beat.min(rows.due()), rx.recv()).await {
                Err(_) => continue,
                Ok(item) => item,
            }
        } else {
            rx.recv().await
        };
        let Some(item) = item else { break };
        let ev = match item {
            Item::Started {
                journal_id: id,
                epoch: run,
                since,
            } => {
                eprintln!(
                    "colibri-bridge: host {} publishing journal {id} after seq {since} \
                     as {me} (sequence chain {}, atomic batches {}, nats-server {version}, \
                     heartbeat {:?})",
                    o.host,
                    if chain { "on" } else { "off" },
                    if batching { "on" } else { "off" },
                    o.heartbeat,
                );
                journal_id = id;
                epoch = run;
                seq = since;
                started = true;
                continue;
            }
            Item::Failed(msg) => return Err(fail(msg, published)),
            Item::Event(ev) => ev,
        };
        // A backlog (events already waiting behind this one) goes as one
        // atomic batch; the item that ends it waits for the next turn. A
        // few events go one at a time: a batch costs the server about
        // 2 ms whatever its size, a lone publish a tenth of that.
        let mut events = vec![ev];
        while batching && events.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(Item::Event(ev)) => events.push(ev),
                Ok(other) => {
                    held = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let outs = outgoing(&o.host, &journal_id, &events).map_err(|m| fail(m, published))?;
        if outs.len() >= BATCH_MIN {
            batches += 1;
            let id = batch_id(me, batches);
            match publish_batch(client, js, &outs, me, &o.host, after, &id).await {
                Ok(stored) => {
                    after = stored;
                    seq = outs.last().map_or(seq, |(out, _)| out.seq);
                    published += outs.len() as u64;
                    if events.iter().any(touches_rows) {
                        rows.touch(tokio::time::Instant::now());
                    }
                    continue;
                }
                Err(BatchError::Refused { msg, for_good }) => {
                    // Nothing of it was stored: the same events go one
                    // at a time, which tells an old copy from a conflict.
                    if for_good {
                        batching = false;
                        eprintln!("colibri-bridge: {msg}: publishing one event at a time");
                    }
                }
                Err(BatchError::Failed(f)) => return Err(f.counting(published)),
            }
        }
        for ((out, payload), ev) in outs.into_iter().zip(&events) {
            let filter = chain.then(|| host_filter(&o.host));
            let stored = publish_one(js, &out, payload, me, filter.as_deref(), after)
                .await
                .map_err(|f| f.counting(published))?;
            let Some(stored) = stored else { continue };
            after = stored;
            seq = out.seq;
            published += 1;
            // A pane changed, or a gap may have hidden changes: the rows
            // are due soon.
            if touches_rows(ev) {
                rows.touch(tokio::time::Instant::now());
            }
        }
    }
    Err(fail("the watch thread ended".into(), published))
}

/// Every subject of one host's events.
fn host_filter(host: &str) -> String {
    format!("colibri.evt.{host}.>")
}

/// Whether an event may change the pane rows: a pane's event, or a gap
/// that may have hidden some.
fn touches_rows(ev: &Value) -> bool {
    ev["pane"].is_string() || ev["event"] == "gap"
}

/// Each event's subject and id, and its bytes.
fn outgoing(
    host: &str,
    journal_id: &str,
    events: &[Value],
) -> Result<Vec<(Outgoing, Vec<u8>)>, String> {
    events
        .iter()
        .map(|ev| {
            let out = Outgoing::of(host, journal_id, ev)?;
            let payload = serde_json::to_vec(ev).map_err(|e| format!("encode event: {e}"))?;
            Ok((out, payload))
        })
        .collect()
}

/// The headers every event carries: its lasting id and its writer.
fn event_headers(out: &Outgoing, me: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", out.msg_id.as_str());
    headers.insert(WRITER_HEADER, me);
    headers
}

/// The chain: the stream sequence of the host's last stored message.
fn chain_to(headers: &mut HeaderMap, filter: &str, after: u64) {
    headers.insert(EXPECTED_SEQ, after.to_string().as_str());
    headers.insert(EXPECTED_SEQ_SUBJECT, filter);
}

/// One event, its ack awaited: the stream sequence it was stored at, or
/// `None` for an old copy (its id stored before the message it follows).
async fn publish_one(
    js: &Context,
    out: &Outgoing,
    payload: Vec<u8>,
    me: &str,
    chain: Option<&str>,
    after: u64,
) -> Result<Option<u64>, Failure> {
    let mut headers = event_headers(out, me);
    if let Some(filter) = chain {
        chain_to(&mut headers, filter, after);
    }
    let ack = js
        .publish_with_headers(out.subject.clone(), headers, payload.into())
        .await
        .map_err(|e| retry(format!("publish seq {}: {e}", out.seq)))?;
    let ack = match ack.await {
        Ok(ack) => ack,
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            return Err(refused_by_chain(out.seq, after));
        }
        Err(e) => return Err(retry(format!("ack of seq {}: {e}", out.seq))),
    };
    if !ack.duplicate {
        return Ok(Some(ack.sequence));
    }
    // Stored after the message this one is chained to: another bridge
    // wrote it. Stored before: an old copy (a journal published again
    // from its start), left as it is.
    if ack.sequence > after {
        return Err(Failure::Conflict(format!(
            "seq {} was already stored (stream seq {})",
            out.seq, ack.sequence
        )));
    }
    Ok(None)
}

fn refused_by_chain(seq: u64, after: u64) -> Failure {
    Failure::Conflict(format!(
        "seq {seq} refused: the host's last stored message is not stream seq {after}"
    ))
}

/// The most events in one atomic batch: the server's limit.
const BATCH_MAX: usize = 1000;
/// The fewest: below it a batch's fixed cost (about 2 ms on nats-server
/// 2.15.1, loopback, against 0.1 ms a publish) outweighs the round trips
/// it saves, and live events (two or three an exit) keep their latency.
const BATCH_MIN: usize = 32;

/// Why a batch was not stored.
enum BatchError {
    /// The server would not take it as a batch, and stored none of it:
    /// its events may go one at a time. `for_good`: no batch will do on
    /// this stream (not allowed, or ids refused inside batches).
    Refused { msg: String, for_good: bool },
    /// As for one event: a conflict, or a retry after a resync.
    Failed(Failure),
}

/// A batch id unique among this stream's open batches (at most 64
/// characters): the writer's instance, hashed, and a count.
fn batch_id(me: &str, n: u64) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    me.hash(&mut h);
    format!("{:016x}-{n}", h.finish())
}

/// How a refusal of a batch (ADR-50's codes) is met.
fn batch_refusal(code: u64, seq: u64, after: u64, what: &str) -> BatchError {
    match code {
        10071 => BatchError::Failed(refused_by_chain(seq, after)),
        // Batches not allowed on the stream (`init` not run since the
        // server's upgrade), or ids inside batches refused (2.12's first
        // releases).
        10174 | 10177 => BatchError::Refused {
            msg: what.to_string(),
            for_good: true,
        },
        // An id already stored (an old copy, or another writer's), a
        // batch lost on the way, too many open batches, or too large.
        10175 | 10176 | 10179 | 10199 | 10200 | 10201 | 10210 => BatchError::Refused {
            msg: what.to_string(),
            for_good: false,
        },
        _ => BatchError::Failed(retry(what.to_string())),
    }
}

/// A backlog as one atomic batch (nats-server >= 2.12, ADR-50): stored
/// whole or not at all, the first message chained to the host's last
/// stored one, each message with its own id. Only the start (a request)
/// and the commit are answered: the commit's ack names the stream
/// sequence of the batch's last message.
async fn publish_batch(
    client: &Client,
    js: &Context,
    outs: &[(Outgoing, Vec<u8>)],
    me: &str,
    host: &str,
    after: u64,
    id: &str,
) -> Result<u64, BatchError> {
    let first_seq = outs.first().map_or(0, |(out, _)| out.seq);
    let last = outs.len();
    let mut commit = None;
    for (n, (out, payload)) in outs.iter().enumerate() {
        let n = n + 1;
        let mut headers = event_headers(out, me);
        headers.insert("Nats-Batch-Id", id);
        headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
        let payload = payload.clone().into();
        let subject = out.subject.clone();
        let lost = |e: &dyn std::fmt::Display| {
            BatchError::Failed(retry(format!(
                "batch of seqs {first_seq}..={}: {e}",
                out.seq
            )))
        };
        if n == 1 {
            chain_to(&mut headers, &host_filter(host), after);
            let reply = client
                .request_with_headers(subject, headers, payload)
                .await
                .map_err(|e| lost(&e))?;
            if let Some(code) = api_error(&reply.payload) {
                let what = format!(
                    "batch of seqs {first_seq}..: refused at its start ({})",
                    String::from_utf8_lossy(&reply.payload)
                );
                return Err(batch_refusal(code, first_seq, after, &what));
            }
        } else if n < last {
            client
                .publish_with_headers(subject, headers, payload)
                .await
                .map_err(|e| lost(&e))?;
        } else {
            headers.insert("Nats-Batch-Commit", "1");
            commit = Some(
                js.publish_with_headers(subject, headers, payload)
                    .await
                    .map_err(|e| lost(&e))?,
            );
        }
    }
    let last_seq = outs.last().map_or(0, |(out, _)| out.seq);
    let Some(commit) = commit else {
        return Err(BatchError::Failed(retry("an empty batch".into())));
    };
    match commit.await {
        Ok(ack) => Ok(ack.sequence),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            Err(BatchError::Failed(refused_by_chain(first_seq, after)))
        }
        Err(e) => {
            let what = format!("ack of the batch of seqs {first_seq}..={last_seq}: {e}");
            let code = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<jetstream::Error>())
                .map(|j| j.error_code().0);
            Err(match code {
                Some(code) => batch_refusal(code, first_seq, after, &what),
                None => BatchError::Failed(retry(what)),
            })
        }
    }
}

/// The JetStream error code of an API reply, if it is an error.
fn api_error(payload: &[u8]) -> Option<u64> {
    if payload.is_empty() {
        return None;
    }
    // Anything but an empty reply is a refusal, if an unknown one.
    let v: Value = serde_json::from_slice(payload).unwrap_or(Value::Null);
    Some(v["error"]["err_code"].as_u64().unwrap_or(0))
}

/// The host's last stored message: where its journal left off, and its
/// stream sequence, which the next publish is chained to.
struct LastStored {
    resume: Resume,
    stream_seq: u64,
}

/// The host's last stored message: a wildcard last-by-subject read.
async fn last_stored(stream: &stream::Stream, host: &str) -> Result<Option<LastStored>, String> {
    let subject = host_filter(host);
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(msg) => {
            let id = msg
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            let resume = parse_msg_id(host, &id).ok_or(format!(
                "the last message on {subject} has no colibri message id ({id:?})"
            ))?;
            Ok(Some(LastStored {
                resume,
                stream_seq: msg.sequence,
            }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_creds_file_holding_only_a_user_seed_is_an_nkey() {
        let seed = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY";
        assert_eq!(user_seed(&format!("{seed}\n")), Some(seed));
        // A creds file (JWT, then the seed) and other keys' seeds are not.
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi.x.y\n------END NATS USER JWT------\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        assert_eq!(user_seed(&creds), None);
        assert_eq!(
            user_seed("SAAGS3YFKQ7U5ZQ5LRW6FXOF4PQ3GLWBYKIN4ZYGNQ3RXGBVKS6I2KQQYA"),
            None
        );
        assert_eq!(user_seed("SU"), None);
        assert_eq!(user_seed(""), None);
    }

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
    fn a_login_in_the_url_is_taken_out_of_it() {
        assert_eq!(
            split_login("nats://h1:s3cr3t@hub-a:4222, tls://hub-b:4222"),
            (
                "nats://hub-a:4222,tls://hub-b:4222".to_string(),
                Some(("h1".to_string(), "s3cr3t".to_string()))
            )
        );
        assert_eq!(
            split_login("nats://127.0.0.1:4222"),
            ("nats://127.0.0.1:4222".to_string(), None)
        );
    }

    #[test]
    fn the_chain_is_used_from_nats_server_2_11() {
        for (v, want) in [
            ("2.15.1", true),
            ("2.11.0", true),
            ("2.12.3-RC.1", true),
            ("3.0.0", true),
            ("2.10.24", false),
            ("2.9.10", false),
            ("", false),
        ] {
            assert_eq!(chain_supported(v), want, "{v}");
        }
        assert!(at_least("2.10.0", (2, 10)));
        assert!(!at_least("2.9.10", (2, 10)));
    }

    #[test]
    fn atomic_batches_from_nats_server_2_12() {
        assert!(batch_supported("2.15.1"));
        assert!(batch_supported("2.12.0"));
        assert!(!batch_supported("2.11.9"));
    }

    #[test]
    fn the_client_tries_a_gone_server_again_at_least_once_a_second() {
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(2));
        assert_eq!(reconnect_delay(5), Duration::from_millis(16));
        assert_eq!(reconnect_delay(12), RECONNECT_MAX);
        assert_eq!(reconnect_delay(usize::MAX), RECONNECT_MAX);
    }

    #[test]
    fn a_batch_start_is_refused_only_by_a_non_empty_reply() {
        assert_eq!(api_error(b""), None);
        let refused =
            br#"{"error":{"code":400,"err_code":10174,"description":"x"},"stream":"S","seq":0}"#;
        assert_eq!(api_error(refused), Some(10174));
        assert_eq!(api_error(b"garbage"), Some(0));
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
