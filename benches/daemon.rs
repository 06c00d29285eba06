//! Benchmarks of the real daemon: each scenario starts `colibrid` on a
//! temporary socket, drives it as a client would, and prints figures.
//!
//! Run one: `cargo build --release --bin colibrid && cargo bench -p
//! colibri-benches --bench daemon -- exit` (or `spawn`, `snapshot`,
//! `idle`, `rss`, `ingest`, `all`). `bench/run.sh` runs them all. Linux
//! only: it reads /proc for the daemon's RSS, CPU time and context switches,
//! and uses a pidfd to see an agent's exit independently of the daemon.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The daemon under test: `$COLIBRID`, or the release build beside this
/// bench's own binary (`target/release/colibrid`, which `bench/run.sh`
/// builds first). The benches are their own package, so cargo does not
/// build colibrid for them.
fn colibrid() -> PathBuf {
    if let Some(path) = std::env::var_os("COLIBRID") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|release| release.join("colibrid"))
        .expect("the bench runs from target/<profile>/deps");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --release --bin colibrid` first, or set COLIBRID",
        path.display()
    );
    path
}

struct Daemon {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    child: Child,
}

impl Daemon {
    /// `BENCH_DIR` picks where the socket and state dir go (for example a
    /// tmpfs, to leave the file system's cost out); default: the temp dir.
    fn start(extra: &[&str]) -> Daemon {
        let dir = match std::env::var_os("BENCH_DIR") {
            Some(parent) => tempfile::tempdir_in(parent).expect("tempdir"),
            None => tempfile::tempdir().expect("tempdir"),
        };
        let socket = dir.path().join("c.sock");
        let child = Command::new(colibrid())
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--no-syslog")
            .args(extra)
            .env("COLIBRI_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start colibrid");
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "colibrid did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        Daemon {
            _dir: dir,
            socket,
            child,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn conn(&self) -> Conn {
        Conn::new(&self.socket)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

struct Conn {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Conn {
    fn new(p: &Path) -> Conn {
        let s = UnixStream::connect(p).expect("connect");
        let w = s.try_clone().expect("clone");
        Conn {
            r: BufReader::new(s),
            w,
        }
    }
    fn send(&mut self, v: &Value) {
        let mut b = serde_json::to_vec(v).expect("json");
        b.push(b'\n');
        self.w.write_all(&b).expect("write");
    }
    fn line(&mut self) -> Value {
        let mut s = String::new();
        self.r.read_line(&mut s).expect("read");
        serde_json::from_str(&s).expect("reply json")
    }
    fn req(&mut self, v: Value) -> Value {
        self.send(&v);
        let r = self.line();
        assert_eq!(r["ok"], json!(true), "{v} -> {r}");
        r["data"].clone()
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn proc_field(pid: i32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// utime + stime in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let g = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    g(11) + g(12)
}

fn wait_all(c: &mut Conn, n: usize, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let snap = c.req(json!({"cmd":"snapshot","schema":"v2"}));
        let panes = snap["panes"].as_array().cloned().unwrap_or_default();
        if panes.len() >= n && panes.iter().all(&pred) {
            return snap;
        }
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Our own kernel exit notice for an agent (pidfd on Linux, EVFILT_PROC
/// on FreeBSD), independent of the daemon's.
fn wait_exit(pid: i32) {
    let mut poll = mio::Poll::new().expect("poll");
    let watch =
        colibri::platform::ExitWatch::register(poll.registry(), pid, mio::Token(1)).expect("watch");
    if !watch.already_exited() {
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(10)))
            .expect("poll");
        assert!(!events.is_empty(), "agent did not exit");
    }
    watch.deregister(poll.registry());
}

/// Child exit (seen through our own exit watch, in a thread blocked on it)
/// to the arrival of the daemon's `exited` event (seen by a thread blocked
/// reading the watch stream). Both threads are woken by the kernel.
///
/// The clock starts after the kernel has woken our own watcher of the
/// exit, and the daemon runs with `--no-syslog`: this is the daemon's side
/// only, useful to compare commits, not what a client sees. The end-to-end
/// figure (a child that stamps before `_exit`, a separate watch client,
/// syslog on) is `bench/e2e.sh`.
fn exit_notice() {
    let d = Daemon::start(&[]);
    let mut c = d.conn();
    let mut w = d.conn();
    w.req(json!({"cmd":"watch"}));
    let (tx, rx) = std::sync::mpsc::channel::<(String, Instant)>();
    std::thread::spawn(move || loop {
        let mut s = String::new();
        if w.r.read_line(&mut s).unwrap_or(0) == 0 {
            return;
        }
        let at = Instant::now();
        let ev: Value = serde_json::from_str(&s).unwrap_or(Value::Null);
        if ev["event"] == json!("exited") {
            let _ = tx.send((ev["pane"].as_str().unwrap_or("").to_string(), at));
        }
    });
    let n = 300;
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let data = c.req(json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","read x"]}));
        let pid = data["pid"].as_i64().expect("pid") as i32;
        let id = data["agent_id"].as_str().expect("id").to_string();
        let watcher = std::thread::spawn(move || {
            wait_exit(pid);
            Instant::now()
        });
        c.req(json!({"cmd":"send-input","agent_id": id, "text":"x"}));
        let t_exit = watcher.join().expect("watcher");
        let t_notice = loop {
            let (pane, at) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("exited event");
            if pane == id {
                break at;
            }
        };
        lat.push(t_notice.saturating_duration_since(t_exit).as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "exit_notice (daemon side only, --no-syslog; end to end: bench/e2e.sh): {n} exits, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
}

/// 1,000 spawn requests pipelined on one connection, until every agent has
/// exec'd: the agents are `sleep 600` and "exec'd" is read from
/// /proc/PID/comm, so the figure is the daemon's work plus one exec each
/// and nothing else. `shared` puts every agent in one session (one log
/// file) instead of a new session, and a new file, each.
fn spawn_1000(shared: bool) {
    let d = Daemon::start(&[]);
    let mut c = d.conn();
    let n = 1000;
    let t0 = Instant::now();
    for _ in 0..n {
        let mut req = json!({"cmd":"spawn-agent","argv":["/bin/sleep","600"]});
        if shared {
            req["session_id"] = json!("bench");
        }
        c.send(&req);
    }
    let mut pids = Vec::with_capacity(n);
    for _ in 0..n {
        let r = c.line();
        assert_eq!(r["ok"], json!(true), "{r}");
        pids.push(r["data"]["pid"].as_i64().expect("pid") as i32);
    }
    let replies = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left: Vec<i32> = pids;
    while !left.is_empty() {
        left.retain(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map_or(true, |c| c.trim() != "sleep")
        });
        assert!(Instant::now() < deadline, "agents did not exec");
    }
    let all = t0.elapsed();
    println!(
        "spawn_1000 ({}): all {n} spawn replies in {:.0} ms; all {n} exec'd in {:.0} ms",
        if shared {
            "one shared session"
        } else {
            "a new session log each"
        },
        replies.as_secs_f64() * 1000.0,
        all.as_secs_f64() * 1000.0
    );
}

fn idle_agents(c: &mut Conn, n: usize) {
    for _ in 0..n {
        c.send(&json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","echo '{\"type\":\"session\",\"id\":\"s\"}'; exec sleep 3600"],"runtime":"pi"}));
    }
    for _ in 0..n {
        let r = c.line();
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    wait_all(c, n, Duration::from_secs(60), |p| {
        p["counters"]["events"] == json!(1)
    });
}

/// Round trip of `glasspane-snapshot` with 1,000 panes.
fn snapshot_1000() {
    let d = Daemon::start(&[]);
    let mut c = d.conn();
    idle_agents(&mut c, 1000);
    let mut lat = Vec::new();
    let mut bytes = 0;
    for _ in 0..500 {
        let t = Instant::now();
        c.send(&json!({"cmd":"glasspane-snapshot"}));
        let mut s = String::new();
        c.r.read_line(&mut s).expect("read");
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        bytes = s.len();
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "snapshot_1000: {} round trips, {} bytes each, p50 {:.3} ms, p99 {:.3} ms",
        lat.len(),
        bytes,
        pct(&lat, 0.5),
        pct(&lat, 0.99)
    );
    let mut lat = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        c.send(&json!({"cmd":"snapshot","schema":"v2"}));
        let mut s = String::new();
        c.r.read_line(&mut s).expect("read");
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        bytes = s.len();
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "snapshot_v2_1000: {} bytes each, p50 {:.3} ms, p99 {:.3} ms",
        bytes,
        pct(&lat, 0.5),
        pct(&lat, 0.99)
    );
}

/// Context switches and CPU of the daemon over 60 s with 100 idle agents.
fn idle_60s() {
    let secs: u64 = std::env::var("IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let d = Daemon::start(&[]);
    {
        let mut c = d.conn();
        idle_agents(&mut c, 100);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (v0, n0, cpu0) = (
        proc_field(d.pid(), "voluntary_ctxt_switches"),
        proc_field(d.pid(), "nonvoluntary_ctxt_switches"),
        cpu_ticks(d.pid()),
    );
    std::thread::sleep(Duration::from_secs(secs));
    let (v1, n1, cpu1) = (
        proc_field(d.pid(), "voluntary_ctxt_switches"),
        proc_field(d.pid(), "nonvoluntary_ctxt_switches"),
        cpu_ticks(d.pid()),
    );
    println!(
        "idle_{secs}s: 100 idle agents, heartbeat 30s: {} voluntary + {} involuntary context switches, {} CPU ticks (1 tick = 10 ms)",
        v1 - v0,
        n1 - n0,
        cpu1 - cpu0
    );
}

fn rss() {
    for n in [10usize, 100, 1000] {
        let d = Daemon::start(&[]);
        let mut c = d.conn();
        idle_agents(&mut c, n);
        let kb = proc_field(d.pid(), "VmRSS");
        let hwm = proc_field(d.pid(), "VmHWM");
        println!(
            "rss_{n}: {:.1} MiB resident ({:.1} MiB peak)",
            kb as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
}

/// 100 agents each writing `lines` 42-byte JSON lines as fast as a PTY takes them.
fn ingest_100() {
    let lines: u64 = std::env::var("INGEST_LINES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let d = Daemon::start(&[]);
    let mut c = d.conn();
    let line = r#"{"type":"turn_start","pad":"xxxxxxxxxxx"}"#;
    assert_eq!(line.len() + 1, 42);
    let body = format!("yes '{line}' | head -n {lines}");
    let t0 = Instant::now();
    for _ in 0..100 {
        c.send(&json!({"cmd":"spawn-agent","argv":["/bin/sh","-c", body],"runtime":"pi"}));
    }
    for _ in 0..100 {
        let r = c.line();
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    let snap = wait_all(&mut c, 100, Duration::from_secs(600), |p| {
        !p["exit"].is_null()
    });
    let el = t0.elapsed().as_secs_f64();
    let mut total = 0;
    for p in snap["panes"].as_array().expect("panes") {
        let ev = p["counters"]["events"].as_u64().unwrap_or(0);
        assert_eq!(ev, lines, "no line lost: {p}");
        assert_eq!(p["counters"]["malformed"], json!(0));
        total += ev;
    }
    println!(
        "ingest_100: {total} lines of 42 bytes from 100 agents in {el:.2} s: {:.2} M events/s, {:.0} MiB/s, none lost",
        total as f64 / el / 1e6,
        total as f64 * 42.0 / el / 1048576.0
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let which = args.first().map(String::as_str).unwrap_or("all");
    let run = |name: &str| which == "all" || which == name;
    if run("exit") {
        exit_notice();
    }
    if run("spawn") {
        spawn_1000(false);
        spawn_1000(true);
    }
    if run("snapshot") {
        snapshot_1000();
    }
    if run("rss") {
        rss();
    }
    if run("ingest") {
        ingest_100();
    }
    if run("idle") {
        idle_60s();
    }
}
