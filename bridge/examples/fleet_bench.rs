//! The fleet benchmarks of docs/PERFORMANCE.md, run by `bench/fleet.sh`:
//!
//! - **exit → fleet view**: three colibrid instances, each with its
//!   bridge, on one nats-server; agents exit one after another on the
//!   three hosts, each stamping CLOCK_MONOTONIC just before `_exit`
//!   (`bench/stamp_exit.c`). A fleet viewer in its own process (this
//!   program, `viewer URL`: an ordered consumer on `colibri.evt.>`) and a
//!   local `bench/watch_client` on each host stamp the `exited` event on
//!   receipt. Both latencies come from the same exits.
//! - **catch-up**: with the server down, each host makes 10,000 events
//!   (agents that exit at once); the time from the server listening again
//!   until the stream holds every host's last event.
//!
//! Usage: `fleet_bench [EXITS] [CATCHUP_EVENTS]` (defaults 300 and 10000);
//! the binaries come from the environment (`NATS_SERVER`, `COLIBRID`,
//! `BRIDGE`, `BENCH_BIN` for the C programs), as bench/fleet.sh sets them.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy};
use futures_util::StreamExt;
use serde_json::{json, Value};

const HOSTS: [&str; 3] = ["h1", "h2", "h3"];

type Res<T> = Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("viewer") => viewer(args.get(1).map_or("", String::as_str)),
        _ => bench(
            number(args.first(), 300),
            number(args.get(1), 10_000) as u64,
        ),
    };
    if let Err(e) = result {
        eprintln!("fleet_bench: {e}");
        std::process::exit(1);
    }
}

fn number(arg: Option<&String>, default: usize) -> usize {
    arg.and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// CLOCK_MONOTONIC in ns: the clock bench/stamp_exit.c and
/// bench/watch_client.c stamp with, comparable across processes.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The fleet view: prints "ready" once its consumer exists, then
/// "PANE NS" for every `exited` event, NS taken on receipt.
fn viewer(url: &str) -> Res<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
        let js = jetstream::new(client);
        let stream = js
            .get_stream("COLIBRI_EVENTS")
            .await
            .map_err(|e| e.to_string())?;
        let consumer = stream
            .create_consumer(OrderedConfig {
                filter_subject: "colibri.evt.>".to_string(),
                deliver_policy: DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
        while let Some(msg) = messages.next().await {
            let msg = msg.map_err(|e| e.to_string())?;
            let at = mono_ns();
            // colibri.evt.<host>.<pane>.<event>
            let mut tokens = msg.subject.split('.').skip(3);
            if let (Some(pane), Some("exited")) = (tokens.next(), tokens.next()) {
                writeln!(out, "{pane} {at}")
                    .and_then(|()| out.flush())
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })
}

fn env_path(name: &str) -> Res<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .ok_or(format!("set {name} (bench/fleet.sh does)"))
}

/// Children killed when the run ends, however it ends.
#[derive(Default)]
struct Kids(Vec<Child>);

impl Kids {
    fn add(&mut self, c: Child) -> usize {
        self.0.push(c);
        self.0.len() - 1
    }
    fn kill(&mut self, i: usize) {
        let _ = self.0[i].kill();
        let _ = self.0[i].wait();
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn request(socket: &Path, req: &Value) -> Res<Value> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let reply: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
    if reply["ok"] != json!(true) {
        return Err(format!("{req} -> {reply}"));
    }
    Ok(reply["data"].clone())
}

fn head(socket: &Path) -> Res<u64> {
    request(socket, &json!({"cmd":"watch"}))?["seq"]
        .as_u64()
        .ok_or("no seq in the watch reply".into())
}

fn wait<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Res<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads "PANE NS" lines from a stamping process into `tx` after its
/// "ready"; returns once it is ready.
fn follow(out: ChildStdout, who: &'static str, tx: mpsc::Sender<(String, u64)>) -> Res<()> {
    let mut lines = BufReader::new(out).lines();
    match lines.next() {
        Some(Ok(l)) if l == "ready" => {}
        other => return Err(format!("{who} did not start: {other:?}")),
    }
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Some((pane, ns)) = line.split_once(' ') {
                if let Ok(ns) = ns.parse() {
                    let _ = tx.send((pane.to_string(), ns));
                }
            }
        }
    });
    Ok(())
}

struct Nats {
    bin: PathBuf,
    store: PathBuf,
    port: u16,
    kid: Option<usize>,
}

impl Nats {
    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
    fn launch(&mut self, kids: &mut Kids) -> Res<()> {
        let child = Command::new(&self.bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server: {e}"))?;
        self.kid = Some(kids.add(child));
        wait(Duration::from_secs(20), "nats-server", || {
            TcpStream::connect(("127.0.0.1", self.port)).ok()
        })?;
        Ok(())
    }
}

fn percentiles(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "n={} p50={:.2} ms p99={:.2} ms max={:.2} ms",
        v.len(),
        at(0.5),
        at(0.99),
        v[v.len() - 1]
    )
}

fn bench(exits: usize, catchup: u64) -> Res<()> {
    let nats_bin = env_path("NATS_SERVER")?;
    let colibrid = env_path("COLIBRID")?;
    let bridge = env_path("BRIDGE")?;
    let c_bin = env_path("BENCH_BIN")?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut kids = Kids::default();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut nats = Nats {
        bin: nats_bin,
        store: dir.path().join("js"),
        port,
        kid: None,
    };
    nats.launch(&mut kids)?;
    let url = nats.url();
    let init = Command::new(&bridge)
        .args(["init", "--nats", &url])
        .output()
        .map_err(|e| e.to_string())?;
    if !init.status.success() {
        return Err(format!("init: {init:?}"));
    }
    let mut sockets = Vec::new();
    let (watch_tx, watch_rx) = mpsc::channel();
    for h in HOSTS {
        let home = dir.path().join(h);
        std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
        let socket = home.join("colibri.sock");
        kids.add(
            Command::new(&colibrid)
                .arg("--socket")
                .arg(&socket)
                .arg("--state-dir")
                .arg(home.join("state"))
                .arg("--no-syslog")
                .env("COLIBRI_LOG", "warn")
                .env("TMPDIR", &home)
                .env_remove("COLIBRI_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("colibrid: {e}"))?,
        );
        wait(Duration::from_secs(20), "colibrid", || {
            request(&socket, &json!({"cmd":"status"})).ok()
        })?;
        let log = std::fs::File::create(home.join("bridge.log")).map_err(|e| e.to_string())?;
        kids.add(
            Command::new(&bridge)
                .args(["run", "--host", h, "--nats", &url, "--socket"])
                .arg(&socket)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("bridge: {e}"))?,
        );
        let mut watch = Command::new(c_bin.join("watch_client"))
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("watch_client: {e}"))?;
        let out = watch.stdout.take().ok_or("watch_client's stdout")?;
        kids.add(watch);
        follow(out, "watch_client", watch_tx.clone())?;
        sockets.push(socket);
    }
    let mut view = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(["viewer", &url])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("viewer: {e}"))?;
    let view_out = view.stdout.take().ok_or("the viewer's stdout")?;
    kids.add(view);
    let (view_tx, view_rx) = mpsc::channel();
    follow(view_out, "the viewer", view_tx)?;

    // Exit → view: one agent at a time, round the hosts; the first three
    // (one per host) warm up and are not counted.
    let stamps = dir.path().join("stamps");
    let mut viewed = HashMap::new();
    let mut watched = HashMap::new();
    let mut counted = Vec::new();
    for i in 0..exits + HOSTS.len() {
        let socket = &sockets[i % HOSTS.len()];
        let data = request(
            socket,
            &json!({"cmd":"spawn-agent","argv":[c_bin.join("stamp_exit"), &stamps, "20000", "0", "pane"]}),
        )?;
        let pane = data["agent_id"].as_str().ok_or("no agent_id")?.to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(viewed.contains_key(&pane) && watched.contains_key(&pane)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("pane {pane}'s exit never arrived"));
            }
            if let Ok((p, ns)) = view_rx.recv_timeout(left.min(Duration::from_millis(5))) {
                viewed.insert(p, ns);
            }
            while let Ok((p, ns)) = watch_rx.try_recv() {
                watched.insert(p, ns);
            }
        }
        if i >= HOSTS.len() {
            counted.push(pane);
        }
    }
    let stamped: HashMap<String, u64> = std::fs::read_to_string(&stamps)
        .map_err(|e| e.to_string())?
        .lines()
        .filter_map(|l| {
            let (p, ns) = l.split_once(' ')?;
            Some((p.to_string(), ns.parse().ok()?))
        })
        .collect();
    let latency = |seen: &HashMap<String, u64>| -> Vec<f64> {
        counted
            .iter()
            .filter_map(|p| Some((*seen.get(p)? as f64 - *stamped.get(p)? as f64) / 1e6))
            .collect()
    };
    println!("exit -> seen, {exits} exits round 3 hosts (child's stamp before _exit -> receipt):");
    println!(
        "  fleet viewer (ordered consumer, own process): {}",
        percentiles(latency(&viewed))
    );
    println!(
        "  local watch client on the exiting host:      {}",
        percentiles(latency(&watched))
    );

    // Catch-up: the server down while each host makes `catchup` events.
    let Some(kid) = nats.kid.take() else {
        return Err("nats-server is not running".into());
    };
    kids.kill(kid);
    let down = Instant::now();
    let base: Vec<u64> = sockets.iter().map(|s| head(s)).collect::<Res<_>>()?;
    std::thread::scope(|s| -> Res<()> {
        let workers: Vec<_> = sockets
            .iter()
            .zip(&base)
            .map(|(socket, base)| {
                s.spawn(move || -> Res<()> {
                    while head(socket)? < base + catchup {
                        for _ in 0..50 {
                            request(socket, &json!({"cmd":"spawn-agent","argv":["/bin/true"]}))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a spawner panicked")??;
        }
        Ok(())
    })?;
    // Every agent's exit in the journal before the server returns.
    std::thread::sleep(Duration::from_millis(500));
    let heads: Vec<u64> = sockets.iter().map(|s| head(s)).collect::<Res<_>>()?;
    let outage = down.elapsed();
    nats.launch(&mut kids)?;
    let back = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let caught = rt.block_on(async {
        let client = async_nats::connect(url.as_str())
            .await
            .map_err(|e| e.to_string())?;
        let js = jetstream::new(client);
        let stream = js
            .get_stream("COLIBRI_EVENTS")
            .await
            .map_err(|e| e.to_string())?;
        let mut done = vec![None; HOSTS.len()];
        while done.iter().any(Option::is_none) {
            for (i, h) in HOSTS.iter().enumerate() {
                if done[i].is_some() {
                    continue;
                }
                let filter = format!("colibri.evt.{h}.>");
                if let Ok(m) = stream.get_last_raw_message_by_subject(&filter).await {
                    let seq = serde_json::from_slice::<Value>(&m.payload)
                        .ok()
                        .and_then(|v| v["seq"].as_u64());
                    if seq >= Some(heads[i]) {
                        done[i] = Some(back.elapsed());
                    }
                }
            }
            if back.elapsed() > Duration::from_secs(120) {
                return Err("the stream never caught up".to_string());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok::<_, String>(done.into_iter().flatten().collect::<Vec<_>>())
    })?;
    let missed: Vec<u64> = heads.iter().zip(&base).map(|(h, b)| h - b).collect();
    println!(
        "catch-up: {missed:?} events missed per host during a {:.1} s outage; \
         all stored {:.2} s after the server listened again (per host: {})",
        outage.as_secs_f64(),
        caught.iter().max().map_or(0.0, Duration::as_secs_f64),
        caught
            .iter()
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
