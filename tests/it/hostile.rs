//! Hostile local clients (issue 9): idle and connect/close floods on the
//! operator's and the jails' sockets, what a jail socket tells, names that
//! pass for pane ids, a stopped daemon's stall judgement, and a bounded soak
//! whose RSS and fd count must come back.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::support::{fd_count, jail_socket, rss_kib, scaled, wait_for, Client, Colibrid};

/// A daemon with one jail-scope socket (jail `agents1`), in its own dir.
/// Bind it as `(_dir, jail_sock, d)`: the daemon stops before its dir goes.
fn with_jail_socket(extra: &[&str]) -> (tempfile::TempDir, PathBuf, Colibrid) {
    with_jail_socket_env(extra, &[])
}

fn with_jail_socket_env(
    extra: &[&str],
    env: &[(&str, &str)],
) -> (tempfile::TempDir, PathBuf, Colibrid) {
    let (jail_dir, jail_sock, arg) = jail_socket();
    let mut args = vec!["--jail-socket", arg.as_str()];
    args.extend_from_slice(extra);
    let d = Colibrid::start_with_env(&args, env);
    (jail_dir, jail_sock, d)
}

/// Reads until the daemon closes the stream; panics on a timeout. Returns
/// what it sent before closing.
fn read_until_closed(s: &mut UnixStream, limit: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("the daemon did not close the connection within {limit:?}: {e}"),
        }
    }
}

/// The daemon's fds as (sockets, pipes, devices and kernel objects; files
/// on disk), each with what it names, for comparisons and failure messages.
/// The files move on their own under load: a log rotation holds two more
/// while it runs, and the writer's index rewrite one, so a soak compares
/// the first part exactly and bounds the second.
fn fd_census(pid: i32) -> (Vec<String>, Vec<String>) {
    let fds = colibri::platform::process_fds(pid)
        .unwrap_or_else(|e| panic!("cannot list the fds of {pid}: {e}"));
    let (files, others): (Vec<_>, Vec<_>) = fds
        .into_iter()
        .partition(|f| f.kind == colibri::platform::FdKind::File);
    let names = |fds: Vec<colibri::platform::OpenFd>| {
        let mut names: Vec<String> = fds.into_iter().map(|f| f.name).collect();
        names.sort();
        names
    };
    (names(others), names(files))
}

/// [`fd_census`] taken while this test holds the daemon's only client
/// connection (its `status` says so), so no client socket is half closed
/// at the moment of counting; `None` while other connections remain.
fn census_alone(d: &Colibrid) -> Option<(Vec<String>, Vec<String>)> {
    let mut c = Client::connect(&d.socket);
    let status = c.request(&json!({"cmd":"status"}));
    // Counted with `c` still open: its socket is in the census, every time.
    let census = fd_census(d.pid());
    (status["data"]["connections"] == json!(1)).then_some(census)
}

fn rss_bytes(pid: i32) -> u64 {
    rss_kib(pid) * 1024
}

fn status_over(path: &Path) -> Value {
    Client::connect(path).request(&json!({"cmd":"status"}))
}

// See: issue 9 defect 1 (jail sockets shared the operator's cap).
#[test]
fn idle_jail_connections_never_lock_the_operator_out() {
    let (_dir, jail_sock, d) = with_jail_socket(&[]);
    let mut idle: Vec<Client> = (0..300)
        .map(|_| Client::connect_jailed(&jail_sock))
        .collect();
    // The daemon accepts in order: once the last one is answered, every
    // earlier one has been accepted or refused.
    let last = idle.last_mut().expect("connections");
    let refusal = read_until_closed(&mut last.writer, Duration::from_secs(20));
    let status = status_over(&d.socket);
    assert_eq!(
        status["ok"],
        json!(true),
        "the operator is answered: {status}"
    );
    let refusal: Value = serde_json::from_slice(&refusal).expect("a JSON refusal");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap_or("")
            .contains("too many connections from this peer"),
        "{refusal}"
    );
    // One peer's share of the jail socket (the default 32), plus the
    // operator's own connection.
    assert_eq!(status["data"]["connections"], json!(33), "{status}");
    // The operator's own user is never capped per peer on its socket.
    let mut many: Vec<Client> = (0..40).map(|_| d.client()).collect();
    for c in &mut many {
        assert_eq!(c.request(&json!({"cmd":"status"}))["ok"], json!(true));
    }
}

// See: issue 9 defect 1 (idle connections were never closed).
#[test]
fn a_connection_idle_past_the_limit_is_closed_and_a_reading_watcher_is_not() {
    let d = Colibrid::start(&["--idle-timeout", "1s", "--heartbeat", "200ms"]);
    let started = Instant::now();
    let mut silent = UnixStream::connect(&d.socket).expect("connect");
    let mut half = UnixStream::connect(&d.socket).expect("connect");
    half.write_all(b"{\"cmd\":\"sta").expect("half a request");
    let mut watcher = d.client();
    assert_eq!(watcher.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    assert!(read_until_closed(&mut silent, Duration::from_secs(20)).is_empty());
    assert!(read_until_closed(&mut half, Duration::from_secs(20)).is_empty());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the limit"
    );
    // The watcher reads its heartbeats: it is never idle, however long.
    while started.elapsed() < Duration::from_secs(4) {
        let ev = watcher.read_line().expect("the watcher stays connected");
        assert_eq!(ev["event"], json!("heartbeat"), "{ev}");
    }
}

// See: issue 9 defect 2 (hung-up connections counted until processed).
#[test]
fn a_connect_close_loop_gets_no_other_client_refused() {
    let d = Colibrid::start(&["--max-connections", "8"]);
    let stop = Arc::new(AtomicBool::new(false));
    let loops = Arc::new(AtomicUsize::new(0));
    let looper = {
        let (stop, loops, socket) = (stop.clone(), loops.clone(), d.socket.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = UnixStream::connect(&socket) {
                    drop(s);
                    loops.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let mut refused = Vec::new();
    for _ in 0..300 {
        let r = match Client::try_connect(&d.socket) {
            Ok(mut c) => c.try_request(&json!({"cmd":"status"})),
            Err(e) => Err(e.to_string()),
        };
        match r {
            Ok(v) if v["ok"] == json!(true) => {}
            other => refused.push(format!("{other:?}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    looper.join().expect("looper");
    assert!(
        loops.load(Ordering::Relaxed) > 300,
        "the loop ran alongside"
    );
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
}

// See: issue 9 defect 12 (a stopped daemon judged writing agents stalled).
#[test]
fn a_stopped_and_continued_daemon_does_not_call_writing_agents_stalled() {
    let d = Colibrid::start(&[]);
    let body = "echo '{\"type\":\"agent_start\"}'; while :; do echo '{\"type\":\"message_update\"}'; sleep 0.2; done";
    // Each agent's stall deadline falls at its own moment of the stop; with
    // several, one falls before that agent's next line.
    let ids: Vec<String> = (0..8)
        .map(|_| {
            d.spawn(
                &["/bin/sh", "-c", body],
                json!({"runtime":"pi","stall_after":"1s"}),
            )
        })
        .collect();
    for id in &ids {
        d.wait_state(id, "working");
    }
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let daemon = Pid::from_raw(d.pid());
    for _ in 0..3 {
        kill(daemon, Signal::SIGSTOP).expect("SIGSTOP");
        std::thread::sleep(Duration::from_millis(2500));
        kill(daemon, Signal::SIGCONT).expect("SIGCONT");
        assert_eq!(d.ok(json!({"cmd":"status"}))["stalled"], json!(0));
    }
    // Any stall event was published before this pane's attach event.
    let marker = d.spawn(&["/bin/sleep", "30"], json!({}));
    loop {
        let ev = w.read_line().expect("a watch event");
        assert_ne!(
            ev["event"],
            json!("stalled"),
            "a writing agent was called stalled: {ev}"
        );
        if ev["event"] == json!("attached") && ev["pane"] == json!(marker) {
            break;
        }
    }
}

// See: issue 9 defect 12 (a jail socket told host, OS, pid and log health).
#[test]
fn a_jail_socket_status_tells_nothing_about_the_host() {
    let (_dir, jail_sock, d) = with_jail_socket(&["--host", "secret-host"]);
    let op = d.ok(json!({"cmd":"status"}));
    assert_eq!(op["host"], json!("secret-host"));
    assert_eq!(op["pid"], json!(d.pid()));
    let jail = Client::connect_jailed(&jail_sock).request(&json!({"cmd":"status"}));
    assert_eq!(jail["ok"], json!(true), "{jail}");
    let data = &jail["data"];
    assert_eq!(data["scope"], json!("jail:agents1"));
    assert_eq!(data["host"], json!(""), "{data}");
    assert_eq!(data["os"], json!(""), "{data}");
    assert_eq!(data["pid"], json!(0), "{data}");
    assert_eq!(data["started_at"], json!(""), "{data}");
    assert_eq!(data["logs"]["pending_bytes"], json!(0), "{data}");
    assert_eq!(data["logs"]["last_error"], Value::Null, "{data}");
    assert_eq!(data["version"], op["version"], "what an agent may check");
    // Nor do the snapshots (the operator's name the host).
    for cmd in ["snapshot", "glasspane-snapshot"] {
        let snap = Client::connect_jailed(&jail_sock).request(&json!({"cmd": cmd}));
        assert_eq!(snap["ok"], json!(true), "{snap}");
        assert_eq!(snap["data"]["host"], json!(""), "{cmd}: {snap}");
        assert_eq!(d.ok(json!({"cmd": cmd}))["host"], json!("secret-host"));
    }
}

// See: issue 9 defect 12 (a pane could be named with another pane's id).
#[test]
fn a_pane_cannot_be_named_after_another_panes_id() {
    let d = Colibrid::start(&[]);
    let first = d.spawn(&["/bin/sleep", "30"], json!({}));
    let spawn_named =
        |name: &str| d.request(json!({"cmd":"spawn-agent","argv":["/bin/sleep","30"],"name":name}));
    for name in [first.clone(), first[..8].to_string(), uuid_shaped()] {
        let r = spawn_named(&name);
        assert_eq!(r["ok"], json!(false), "name {name:?} accepted: {r}");
        assert!(r["error"].as_str().unwrap_or("").contains("id"), "{r}");
    }
    let r = spawn_named("fixer");
    assert_eq!(r["ok"], json!(true), "{r}");
    // The id still reaches the first pane.
    assert_eq!(d.pane(&first)["id"], json!(first));
}

fn uuid_shaped() -> String {
    "0f0e0d0c-0b0a-4908-8706-050403020100".to_string()
}

/// Hostile clients for a bounded time, each kind on its own thread.
fn hostile_swarm(
    d: &Colibrid,
    jail_sock: &Path,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    // Idle connections on both sockets, held until the end.
    for path in [d.socket.clone(), jail_sock.to_path_buf()] {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let held: Vec<UnixStream> = (0..40)
                .filter_map(|_| UnixStream::connect(&path).ok())
                .collect();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(held);
        }));
    }
    // Connect/close loops, and garbage.
    for path in [d.socket.clone(), jail_sock.to_path_buf()] {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut n: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let Ok(mut s) = UnixStream::connect(&path) else {
                    continue;
                };
                if n % 4 == 0 {
                    let junk: Vec<u8> = (0..4096u32)
                        .map(|i| (n.wrapping_add(i.wrapping_mul(2_654_435_761)) >> 13) as u8)
                        .collect();
                    let _ = s.write_all(&junk);
                    let _ = s.write_all(b"\n{\"cmd\":\n\x00\xff}\n");
                }
            }
        }));
    }
    // Oversize request lines.
    {
        let (stop, path) = (stop.clone(), d.socket.clone());
        threads.push(std::thread::spawn(move || {
            let big = vec![b'x'; 2 << 20];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = UnixStream::connect(&path) {
                    let _ = s.write_all(&big);
                }
            }
        }));
    }
    // Watchers that never read, replaced as they are dropped.
    {
        let (stop, path) = (stop.clone(), d.socket.clone());
        threads.push(std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = UnixStream::connect(&path) {
                    if s.write_all(b"{\"cmd\":\"watch\"}\n").is_ok() {
                        held.push_back(s);
                    }
                }
                if held.len() > 10 {
                    held.pop_front();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
    }
    threads
}

// See: issue 9 "Beyond these cases" (a soak with mixed hostile clients).
#[test]
fn a_soak_of_hostile_clients_leaves_rss_and_fds_at_baseline_and_the_operator_answered() {
    // Tolerances: sockets, pipes and kernel objects come back exactly, files
    // within the 3 that a rotation and an index write hold while they run
    // (see `fd_census`); RSS within 16 MiB of the baseline
    // (the allocator keeps some freed memory: the watch queues alone were
    // up to 10 MiB).
    const RSS_TOLERANCE: u64 = 16 << 20;
    const SOAK: Duration = Duration::from_secs(12);
    // The watch journal keeps up to 8 MiB of events in memory by design, and
    // the busy agent fills it during the soak: a 64 KiB journal keeps that
    // bounded state out of what this test measures (leaks).
    let (_dir, jail_sock, d) = with_jail_socket_env(
        &["--idle-timeout", "2s", "--heartbeat", "500ms"],
        &[("COLIBRID_JOURNAL_BYTES", "65536")],
    );
    let pid = d.pid();
    let mut warm_up = d.client();
    for _ in 0..50 {
        assert_eq!(
            warm_up.request(&json!({"cmd":"snapshot"}))["ok"],
            json!(true)
        );
    }
    drop(warm_up);
    wait_for(
        Duration::from_secs(20),
        "only the asking connection",
        || (status_over(&d.socket)["data"]["connections"] == json!(1)).then_some(()),
    );
    // An agent whose state flips fast, so watchers that never read fill up.
    let body = "while :; do i=0; while [ $i -lt 200 ]; do echo '{\"type\":\"extension_ui_request\",\"id\":\"q\",\"method\":\"confirm\",\"title\":\"ok?\"}'; echo '{\"type\":\"tool_execution_start\",\"toolName\":\"bash\",\"args\":{\"command\":\"true '$i'\"}}'; i=$((i+1)); done; sleep 0.05; done";
    // Each tool call differs ($i), so loop detection sees work, not a loop.
    let flipper = d.spawn(&["/bin/sh", "-c", body], json!({"runtime":"pi"}));
    d.wait_pane(&flipper, "flipping", |p| {
        p["counters"]["events"].as_u64().unwrap_or(0) > 1000
    });
    // A short round of the same clients first, so whatever the daemon
    // creates once and keeps (a timer made on first need) is in the
    // baseline, and what the long round adds is what they leave behind.
    let stop = Arc::new(AtomicBool::new(false));
    let threads = hostile_swarm(&d, &jail_sock, &stop);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("hostile client");
    }
    // Measured with the agent running (its PTY, timer and log are open),
    // so only what the clients leave behind can differ.
    let (others_before, files_before) = wait_for(
        Duration::from_secs(30),
        "a census with no other client",
        || census_alone(&d),
    );
    let rss_before = rss_bytes(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = hostile_swarm(&d, &jail_sock, &stop);
    let started = Instant::now();
    let mut answered = 0;
    let mut busy = 0;
    let mut slowest = Duration::ZERO;
    while started.elapsed() < SOAK {
        let asked = Instant::now();
        // A new connection each time: one that waits longer than the idle
        // limit between requests is rightly closed. The hostile clients
        // here run as the operator's own uid, which no per-peer share
        // limits, so their connect/close loop can fill the listener's 256
        // for a moment: `busy` says "try again later", and the operator
        // does (an answer within the 10 s below is what is asserted).
        let mut r = status_over(&d.socket);
        while r["code"] == json!("busy") && asked.elapsed() < Duration::from_secs(10) {
            busy += 1;
            std::thread::sleep(Duration::from_millis(20));
            r = status_over(&d.socket);
        }
        slowest = slowest.max(asked.elapsed());
        assert_eq!(
            r["ok"],
            json!(true),
            "the operator is answered throughout: {r}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "answered in time"
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("hostile client");
    }
    assert!(answered >= 3, "the operator asked throughout ({answered})");
    // Sockets, pipes and the like come back exactly (the other clients
    // gone, this test's connection the only one). Files may be up to 3
    // more: the busy agent's log may be rotating (2 while a rotation runs)
    // and the index being rewritten (1).
    let mut now = (Vec::new(), Vec::new());
    let mut alone = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(census) = census_alone(&d) {
            (now, alone) = (census, true);
            if now.0.len() == others_before.len() && now.1.len() <= files_before.len() + 3 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the only connection at some point: {alone}; fds other than files {:?} \
             (baseline {others_before:?}); files {:?} (baseline {files_before:?})",
            now.0,
            now.1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (fds_before, fds_now) = (
        others_before.len() + files_before.len(),
        now.0.len() + now.1.len(),
    );
    d.ok(json!({"cmd":"kill-agent","agent_id":flipper}));
    let rss_after = rss_bytes(pid);
    eprintln!(
        "soak: {answered} operator rounds ({busy} busy answers retried), slowest {slowest:?}; fds {fds_before} -> {fds_now}; RSS {} KiB -> {} KiB",
        rss_before >> 10,
        rss_after >> 10
    );
    assert!(
        rss_after <= rss_before + RSS_TOLERANCE,
        "RSS {} KiB after, {} KiB before",
        rss_after >> 10,
        rss_before >> 10
    );
}

/// Sends `status` on a connection the daemon may not have accepted yet and
/// waits up to `limit` for the reply.
fn status_within(s: &mut UnixStream, limit: Duration) -> bool {
    if s.write_all(b"{\"cmd\":\"status\"}\n").is_err() {
        return false;
    }
    let _ = s.set_read_timeout(Some(limit));
    let mut byte = [0u8; 1];
    matches!(s.read(&mut byte), Ok(1))
}

/// When every fd is in use, connections wait in the listen queue; the fds
/// an ended agent frees (its pidfd, and its PTY master, closed once the
/// frames have left or at once while an accept waits for fds) go to the
/// waiting connections without waiting for the heartbeat. (The wakeups
/// that follow an exit, one per writer, also retry the accept: this test
/// does not tell the two apart.)
#[test]
fn connections_waiting_for_fds_are_accepted_as_soon_as_an_agent_ends() {
    let d = Colibrid::start(&["--heartbeat", "120s"]);
    d.spawn(&["/bin/sh", "-c", "sleep 12"], json!({"session_id": "fds"}));
    // What the agent's end frees at once: its PTY master, and on Linux its
    // pidfd (FreeBSD watches the exit with a kevent, no fd).
    let freed = 1 + usize::from(colibri::platform::EXIT_WATCH_HOLDS_FD);
    // Every fd the daemon holds now, plus room for two connections.
    let limit = fd_count(d.pid()) + 2;
    colibri::platform::set_process_fd_limit(d.pid(), limit as u64)
        .expect("lower colibrid's fd limit");
    // Connections are served until the fds run out (the count above may
    // include a client connection still being closed).
    let mut served = Vec::new();
    let mut waiting = Vec::new();
    while waiting.len() < freed {
        assert!(served.len() < 16, "the fd limit never stopped an accept");
        let mut s = UnixStream::connect(&d.socket).expect("connect");
        if status_within(&mut s, Duration::from_secs(2)) {
            assert!(waiting.is_empty(), "a later connection was served first");
            served.push(s);
        } else {
            waiting.push(s);
        }
    }
    // Nothing else wakes the daemon (no request: a new connection would
    // wait too, and one that was served would wake it): the agent's end
    // (it sleeps 12 s) must free the fds for the waiting connections.
    for (i, s) in waiting.iter_mut().enumerate() {
        let t0 = Instant::now();
        let mut byte = [0u8; 1];
        let limit = scaled(Duration::from_secs(25));
        let _ = s.set_read_timeout(Some(limit));
        assert!(
            matches!(s.read(&mut byte), Ok(1)),
            "connection {i} was not served within {limit:?} (the agent ends after 12 s)"
        );
        assert!(t0.elapsed() < limit);
    }
    // The served connections held their fds until now.
    drop(served);
}

/// An ended pane's PTY master is closed once the frames have left, and at
/// the latest a wakeup later: while agents stream, the writers are always
/// behind, and the masters of agents that end meanwhile must not pile up.
#[test]
fn ended_agents_release_their_fds_while_others_stream() {
    let d = Colibrid::start(&[]);
    let streamers: Vec<String> = (0..4)
        .map(|_| {
            d.spawn(
                &["/bin/sh", "-c", "yes '{\"type\":\"turn_start\"}'"],
                json!({"session_id": "streaming", "runtime": "pi"}),
            )
        })
        .collect();
    let streaming_fds = fd_count(d.pid());
    let ended: Vec<String> = (0..20)
        .map(|_| d.spawn(&["/bin/sh", "-c", "exit 0"], json!({"session_id": "short"})))
        .collect();
    for id in &ended {
        d.wait_pane(id, "the short agent's end", |p| p["exit"].is_object());
    }
    // Each of the 20 had a PTY master and a pidfd; a few fds may come and
    // go (connections, a log fd), never one per ended agent.
    wait_for(
        Duration::from_secs(10),
        "the ended agents' fds closed",
        || (fd_count(d.pid()) <= streaming_fds + 4).then_some(()),
    );
    // The writers were behind all along: the streamers never stopped.
    for id in &streamers {
        let p = d.pane(id);
        assert!(p["exit"].is_null(), "a streamer ended: {p}");
    }
}

#[test]
fn diagnostics_never_hold_the_loop_on_an_unread_stderr() {
    // colibrid logs each `activity` with its message on stderr. Under
    // daemon(8) stderr is a pipe: written from the loop, a 1 MB message,
    // or enough short ones to fill the pipe (64 KiB here, nobody reads),
    // would hold the loop until the pipe's reader took them: for ever.
    let d = Colibrid::start_with_unread_stderr(&[], &[("COLIBRI_LOG", "info")]);
    // A pane may post 30 at once (then 30 a minute): 50 panes post the
    // 1,503 lines.
    let panes: Vec<String> = (0..50)
        .map(|_| d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({})))
        .collect();
    let mut c = d.client();
    let mut send = |message: &str, i: usize| {
        let pane = &panes[i / 30];
        let request = json!({"cmd":"activity","pane": pane,
            "event_type":"error","message": message});
        // (Not `request`: its panic would print the message.)
        let r = c.try_request(&request);
        assert!(
            r.as_ref().is_ok_and(|r| r["ok"] == json!(true)),
            "activity {i}: {}",
            r.map_or_else(|e| e, |r| r["error"].to_string())
        );
    };
    // Cut to 4 KiB in the event and the log line.
    let huge = "E".repeat(1_000_000);
    for i in 0..3 {
        send(&huge, 1497 + i);
    }
    // Past the pipe and the stderr thread's queue of 1,024 lines (and
    // within the posts' share of the watch journal, 2 MiB).
    let long = "L".repeat(1000);
    for i in 0..1497 {
        send(&long, i);
    }
    assert!(d.ok(json!({"cmd":"status"}))["version"].is_string());
}
