//! Bad input and bad neighbours: oversize and malformed lines, clients that
//! never read, floods, failing disks, 200 agents, jail-socket scope, the
//! connection cap.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

#[test]
fn oversize_request_gets_an_error_and_a_close() {
    let d = Colibrid::start(&["--max-request", "4096"]);
    let mut c = d.client();
    let mut big = br#"{"cmd":"status","pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 10_000));
    big.extend(b"\"}\n");
    c.send_raw(&big);
    let e = c.read_line().expect("error line");
    assert_eq!(e["ok"], json!(false));
    assert!(e["error"].as_str().unwrap_or("").contains("exceeds"), "{e}");
    assert!(c.read_line().is_none(), "then the connection is closed");
    // The daemon is fine.
    assert_eq!(d.request(json!({"cmd":"status"}))["ok"], json!(true));
}

#[test]
fn a_client_that_never_reads_never_blocks_the_loop() {
    let d = Colibrid::start(&[]);
    for i in 0..20 {
        d.spawn(
            &[
                "/bin/sh",
                "-c",
                "echo '{\"type\":\"agent_start\"}'; sleep 60",
            ],
            json!({"name": format!("a{i}")}),
        );
    }
    // Pipeline thousands of snapshot requests and never read a reply.
    let mut hog = UnixStream::connect(&d.socket).expect("connect");
    hog.set_nonblocking(true).expect("nonblocking");
    let req = b"{\"cmd\":\"snapshot\",\"schema\":\"v2\"}\n".repeat(200);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if hog.write(&req).is_err() {
            break;
        }
    }
    // A watcher that never reads either.
    let mut lazy = UnixStream::connect(&d.socket).expect("connect");
    lazy.write_all(b"{\"cmd\":\"watch\"}\n").expect("watch");
    // Everyone else is served promptly.
    for _ in 0..20 {
        let t = Instant::now();
        let snap = d.snapshot();
        assert_eq!(snap["panes"].as_array().map(Vec::len), Some(20));
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "snapshot took {:?}",
            t.elapsed()
        );
    }
    drop(hog);
    drop(lazy);
}

#[test]
fn a_watcher_that_falls_behind_is_dropped_with_a_final_error() {
    let d = Colibrid::start(&["--heartbeat", "1s"]);
    let mut w = UnixStream::connect(&d.socket).expect("connect");
    w.write_all(b"{\"cmd\":\"watch\"}\n").expect("watch");
    // Many panes changing state produce far more than a watcher's queue.
    // Each tool call differs (`true $i`): the same call 3000 times in a
    // row is a loop the default loop detection pauses.
    let body = "i=0; while [ $i -lt 3000 ]; do echo '{\"type\":\"extension_ui_request\",\"id\":\"q\",\"method\":\"confirm\",\"title\":\"ok?\"}'; printf '{\"type\":\"tool_execution_start\",\"toolName\":\"bash\",\"args\":{\"command\":\"true %s\"}}\\n' $i; i=$((i+1)); done; sleep 5";
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(d.spawn(&["/bin/sh", "-c", body], json!({"runtime":"pi"})));
    }
    for id in &ids {
        d.wait_pane(id, "all lines", |p| p["counters"]["events"] == json!(6000));
    }
    // It took nothing for a while with more than its limit queued: the
    // daemon drops it (checked as the heartbeat passes).
    wait_for(Duration::from_secs(30), "the watcher to be dropped", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(0)).then_some(())
    });
    // Now read everything the daemon queued: the stream must end with the error line.
    w.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut all = Vec::new();
    let _ = w.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    let last = text.lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(last).unwrap_or(Value::Null);
    assert_eq!(v["ok"], json!(false), "last line: {last}");
    assert!(
        v["error"].as_str().unwrap_or("").contains("fell behind"),
        "{last}"
    );
}

#[test]
fn a_flooding_agent_starves_neither_agents_nor_clients() {
    let d = Colibrid::start(&[]);
    let flood = d.spawn(
        &["/bin/sh", "-c", "yes '{\"type\":\"message_update\",\"assistantMessageEvent\":{\"type\":\"text_delta\",\"delta\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}'"],
        json!({"runtime":"pi"}),
    );
    d.wait_pane(&flood, "flooding", |p| {
        p["counters"]["events"].as_u64().unwrap_or(0) > 10_000
    });
    let quiet = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "while read x; do echo '{\"type\":\"turn_start\"}'; done",
        ],
        json!({"runtime":"pi"}),
    );
    for _ in 0..10 {
        let t = Instant::now();
        d.ok(json!({"cmd":"send-input","agent_id": quiet, "text":"go"}));
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "reply took {:?}",
            t.elapsed()
        );
    }
    d.wait_pane(&quiet, "ten answers", |p| {
        p["counters"]["events"] == json!(10)
    });
    let t = Instant::now();
    let snap = d.snapshot();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "snapshot took {:?}",
        t.elapsed()
    );
    assert_eq!(snap["panes"].as_array().map(Vec::len), Some(2));
    d.ok(json!({"cmd":"kill-agent","agent_id": flood}));
}

#[test]
fn two_hundred_agents_all_finish_with_every_line_counted() {
    let d = Colibrid::start(&[]);
    // Under emulation (COLIBRI_TEST_SLOW) fewer: FreeBSD discards what an
    // exiting agent wrote once its PTY has gone unread for a second (see
    // docs/RELIABILITY.md), a window of the kernel's that does not scale,
    // and a burst of 200 spawns keeps an emulated loop busy for longer.
    let agents = (200.0 / slow_factor()).max(20.0) as usize;
    let lines = 50;
    let body = format!(
        "echo '{{\"type\":\"session\",\"id\":\"s\"}}'; i=0; while [ $i -lt {lines} ]; do echo '{{\"type\":\"turn_start\"}}'; i=$((i+1)); done; echo '{{\"type\":\"agent_end\",\"messages\":[]}}'"
    );
    let ids: Vec<String> = (0..agents)
        .map(|_| d.spawn(&["/bin/sh", "-c", &body], json!({"runtime":"pi"})))
        .collect();
    wait_for(Duration::from_secs(60), "every agent done", || {
        let snap = d.snapshot();
        let panes = snap["panes"].as_array()?.clone();
        (panes.len() == agents
            && panes
                .iter()
                .all(|p| p["state"] == json!("done") && !p["exit"].is_null()))
        .then_some(())
    });
    let snap = d.snapshot();
    for p in snap["panes"].as_array().expect("panes") {
        assert!(ids.contains(&p["id"].as_str().unwrap_or("").to_string()));
        assert_eq!(p["counters"]["events"], json!(lines + 2), "{p}");
        assert_eq!(p["counters"]["malformed"], json!(0), "{p}");
        assert_eq!(p["exit"], json!({"code": 0}));
    }
}

#[test]
fn malformed_and_oversize_agent_lines_are_counted_and_skipped() {
    let d = Colibrid::start(&["--max-line", "1000"]);
    let body = "echo '{\"type\":\"agent_start\"}'; echo 'not json at all'; printf '%02000d\\n' 7; printf '{\"type\":\"turn_start\"}\\r\\n'; printf '\\377\\376\\n'; echo '{\"type\":\"agent_end\",\"messages\":[]}'";
    let id = d.spawn(&["/bin/sh", "-c", body], json!({"runtime":"pi"}));
    let p = d.wait_state(&id, "done");
    assert_eq!(p["counters"]["events"], json!(3), "{p}");
    assert_eq!(p["counters"]["malformed"], json!(2), "{p}");
    assert_eq!(p["counters"]["oversize"], json!(1), "{p}");
}

#[test]
fn jail_socket_has_agent_scope_only() {
    let jail_sock = tempfile::tempdir().expect("dir");
    let path = jail_sock.path().join("colibri.sock");
    let arg = format!("agents1={}", path.display());
    let d = Colibrid::start(&["--jail-socket", &arg]);
    let host_pane = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 30",
        ],
        json!({}),
    );
    d.wait_state(&host_pane, "working");
    let mut c = Client::connect_jailed(&path);
    let who = c.request(&json!({"cmd":"whoami"}));
    assert_eq!(who["data"]["scope"], json!("jail:agents1"), "{who}");
    assert_eq!(who["data"]["panes"], json!([]));
    let snap = c.request(&json!({"cmd":"glasspane-snapshot"}));
    assert_eq!(
        snap["data"]["panes"],
        json!([]),
        "other panes are invisible"
    );
    for cmd in [
        json!({"cmd":"spawn-agent","argv":["true"]}),
        json!({"cmd":"kill-agent","agent_id": host_pane}),
        json!({"cmd":"pause-agent","agent_id": host_pane}),
        json!({"cmd":"send-input","agent_id": host_pane, "text":"x"}),
        json!({"cmd":"list-sessions"}),
    ] {
        let r = c.request(&cmd);
        assert_eq!(r["ok"], json!(false), "{cmd} must be refused: {r}");
        assert!(
            r["error"].as_str().unwrap_or("").contains("not permitted"),
            "{r}"
        );
    }
    let e = c.request(&json!({"cmd":"emit","agent_id": host_pane, "event":{"type":"agent_end"}}));
    assert_eq!(e["ok"], json!(false), "cannot emit for another jail's pane");
    // The operator socket still has full scope: it spawns into the jail on
    // FreeBSD, and a jail request is a clear error on Linux.
    let r = d.request(json!({"cmd":"spawn-agent","argv":["true"],"jail":"agents1"}));
    if colibri::platform::JAILS_SUPPORTED {
        assert_eq!(r["ok"], json!(true), "{r}");
    } else {
        assert_eq!(r["ok"], json!(false));
        assert!(r["error"].as_str().unwrap_or("").contains("FreeBSD"), "{r}");
    }
}

#[test]
fn connection_cap_refuses_with_a_clear_error() {
    let d = Colibrid::start(&["--max-connections", "4"]);
    // Poll over one connection until the start-up probe's is gone.
    let mut first = d.client();
    wait_for(Duration::from_secs(5), "one connection", || {
        (first.request(&json!({"cmd":"status"}))["data"]["connections"] == json!(1)).then_some(())
    });
    let mut held: Vec<Client> = (0..3).map(|_| d.client()).collect();
    for c in &mut held {
        assert_eq!(c.request(&json!({"cmd":"status"}))["ok"], json!(true));
    }
    let mut extra = d.client();
    let e = extra.read_line().expect("refusal");
    assert!(
        e["error"]
            .as_str()
            .unwrap_or("")
            .contains("too many connections"),
        "{e}"
    );
    assert!(extra.read_line().is_none(), "closed after the refusal");
    drop(held);
    wait_for(Duration::from_secs(5), "a free slot", || {
        Client::try_connect(&d.socket)
            .ok()
            .and_then(|mut c| c.try_request(&json!({"cmd":"status"})).ok())
            .filter(|r| r["ok"] == json!(true))
    });
    assert_eq!(first.request(&json!({"cmd":"status"}))["ok"], json!(true));
}

#[test]
fn a_client_sending_blank_lines_cannot_monopolise_the_loop() {
    let d = Colibrid::start(&[]);
    let socket = d.socket.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let flooder = std::thread::spawn(move || {
        let mut s = UnixStream::connect(&socket).expect("connect");
        let blanks = vec![b'\n'; 64 * 1024];
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if s.write_all(&blanks).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(d.request(json!({"cmd":"status"}))["ok"], json!(true));
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "status took {:?} during the flood",
            t.elapsed()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flooder.join();
}

#[test]
fn failing_log_writes_raise_one_alert_and_never_spin() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let d = Colibrid::start(&[&arg]);
    // A session whose log is /dev/full: every write fails with ENOSPC.
    let sessions = d.state.join("sessions");
    std::os::unix::fs::symlink("/dev/full", sessions.join("full1.jsonl")).expect("symlink");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "yes '{\"type\":\"turn_start\"}' | head -c 20000000",
        ],
        json!({"session_id":"full1","runtime":"pi"}),
    );
    let mut seen = Vec::new();
    let m = sink.wait_for(" log_write ", &mut seen);
    assert!(
        m.contains("bytes lost") || m.contains("bytes waiting"),
        "{m}"
    );
    wait_for(Duration::from_secs(20), "failed writes in status", || {
        let st = d.ok(json!({"cmd":"status"}));
        (st["logs"]["failed_writes"].as_u64().unwrap_or(0) > 0).then_some(())
    });
    // Until the buffer is full the daemon is busy for good reason: it reads
    // and parses the agent's output. Once the pending bytes stop growing the
    // agent is held back (backpressure), and from then on the daemon must not
    // spin. (Requests are served before bulk reads, so the status above can
    // come back while that first burst is still being read.)
    let pending = || d.ok(json!({"cmd":"status"}))["logs"]["pending_bytes"].as_u64();
    wait_for(
        Duration::from_secs(30),
        "the log buffer to stop growing",
        || {
            let a = pending()?;
            std::thread::sleep(Duration::from_millis(300));
            (a > 0 && pending()? == a).then_some(())
        },
    );
    // A reading that cannot be taken fails (see `cpu_time`): 0 is a
    // measurement here, never a default.
    let before = cpu_time(d.pid());
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time(d.pid()).saturating_sub(before);
    let share = used.as_secs_f64() / window.elapsed().as_secs_f64();
    assert!(
        share < 0.3,
        "colibrid used {used:?} of CPU in {:?} while its disk failed",
        window.elapsed()
    );
    assert_ne!(
        d.pane(&id)["state"],
        json!("done"),
        "the agent waits on its PTY"
    );
    assert_eq!(
        d.request(json!({"cmd":"status"}))["ok"],
        json!(true),
        "and everyone else is served"
    );
}

/// colibrid with `buffer_limit` set to `limit`, and `n` agents streaming
/// 20 MB each into sessions `full0`.. whose logs are `/dev/full` (every
/// write fails); the config's dir, the daemon and the agents' ids.
fn agents_on_failing_logs(limit: u64, n: usize) -> (tempfile::TempDir, Colibrid, Vec<String>) {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("colibri.toml");
    std::fs::write(&cfg, format!("[sessions]\nbuffer_limit = {limit}\n")).expect("config");
    let d = Colibrid::start(&["--config", &cfg.display().to_string()]);
    let sessions = d.state.join("sessions");
    let ids = (0..n)
        .map(|i| {
            let session = format!("full{i}");
            std::os::unix::fs::symlink("/dev/full", sessions.join(format!("{session}.jsonl")))
                .expect("symlink");
            d.spawn(
                &[
                    "/bin/sh",
                    "-c",
                    "yes '{\"type\":\"turn_start\"}' | head -c 20000000",
                ],
                json!({"session_id": session, "runtime": "pi"}),
            )
        })
        .collect();
    (dir, d, ids)
}

/// Agents keep being read while the log writer writes (the two overlap),
/// but what all sessions hold unwritten together is capped at twice
/// `buffer_limit` (plus what each session may hold below its 64 KiB
/// allowance): four agents on failing disks, each allowed `buffer_limit`,
/// stop at about two of them, not four.
#[test]
fn sessions_together_buffer_at_most_twice_the_buffer_limit() {
    const LIMIT: u64 = 1024 * 1024;
    let (_config, d, ids) = agents_on_failing_logs(LIMIT, 4);
    let pending = || d.ok(json!({"cmd":"status"}))["logs"]["pending_bytes"].as_u64();
    let total = wait_for(
        Duration::from_secs(30),
        "the log buffers to stop growing",
        || {
            let a = pending()?;
            std::thread::sleep(Duration::from_millis(300));
            (a > LIMIT && pending()? == a).then_some(a)
        },
    );
    // A session that started late reads up to its 64 KiB allowance past
    // the total, and one read (a quantum of 8 KiB, some 36 KiB of records)
    // may land before a check stops it: at most 100 KiB per session.
    assert!(
        (2 * LIMIT..2 * LIMIT + 4 * 100 * 1024).contains(&total),
        "{total} bytes buffered by four sessions of limit {LIMIT}"
    );
    for id in &ids {
        assert_ne!(
            d.pane(id)["state"],
            json!("done"),
            "every agent waits on its PTY"
        );
    }
}

/// Sessions whose own logs fail fill the total that all sessions may
/// buffer together, but an agent of another session is still read: the
/// total holds only sessions that hold a share of it (64 KiB) themselves.
/// (After a failed batch every session's writes wait for the heartbeat's
/// retry, so the other agent's 300 lines stay buffered meanwhile.)
#[test]
fn failing_logs_that_fill_the_total_do_not_hold_the_agents_of_other_sessions() {
    const LIMIT: u64 = 256 * 1024;
    let (_config, d, _) = agents_on_failing_logs(LIMIT, 2);
    wait_for(
        Duration::from_secs(30),
        "the failing logs to fill the total",
        || {
            let st = d.ok(json!({"cmd":"status"}));
            (st["logs"]["pending_bytes"].as_u64()? >= 2 * LIMIT).then_some(())
        },
    );
    let lines = 300;
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!("yes '{{\"type\":\"turn_start\"}}' | head -n {lines}; sleep 60"),
        ],
        json!({"session_id": "other", "runtime": "pi"}),
    );
    d.wait_pane(&id, "every line of the other agent read", |p| {
        p["counters"]["events"] == json!(lines)
    });
}

/// A session whose log fails is retried at the next heartbeat (30 s), so
/// a full disk is not hammered; the other sessions' logs are written
/// meanwhile, not held in memory until then.
#[test]
fn a_failing_log_does_not_delay_the_logs_of_other_sessions() {
    const LIMIT: u64 = 256 * 1024;
    let (_config, d, _) = agents_on_failing_logs(LIMIT, 1);
    wait_for(Duration::from_secs(20), "a failed log write", || {
        let st = d.ok(json!({"cmd":"status"}));
        (st["logs"]["failed_writes"].as_u64()? > 0).then_some(())
    });
    let lines = 300;
    d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!("yes '{{\"type\":\"turn_start\"}}' | head -n {lines}; sleep 60"),
        ],
        json!({"session_id": "other", "runtime": "pi"}),
    );
    let log = d.state.join("sessions").join("other.jsonl");
    // Well inside the first heartbeat: the test is a few seconds old.
    wait_for(
        Duration::from_secs(10),
        "the other session's lines on disk",
        || {
            let text = std::fs::read_to_string(&log).ok()?;
            let records = text.matches(r#""ev":{"type":"turn_start"}"#).count();
            (records == lines).then_some(())
        },
    );
}

/// User plus system CPU time of a process. A missing reading fails the
/// test rather than measuring nothing.
fn cpu_time(pid: i32) -> Duration {
    process(pid)
        .unwrap_or_else(|| panic!("no process {pid} to measure"))
        .cpu
}

/// Dead for our purposes: gone, or a zombie waiting for a reaper (once the
/// daemon has exited, init reaps it whenever it gets round to it).
fn dead(pid: i32) -> bool {
    process(pid).is_none_or(|p| p.state == colibri::platform::ProcessState::Zombie)
}

/// Waits for the pid a script wrote to `file`.
fn pid_from_file(d: &Colibrid, file: &str) -> i32 {
    let path = d.path(file);
    wait_for(Duration::from_secs(20), "the descendant's pid file", || {
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
    })
}

/// An agent whose child calls setsid (leaving the agent's session and
/// process group) and sleeps; the agent sleeps too.
fn spawn_with_setsid_child(d: &Colibrid) -> (String, i32) {
    let pidfile = d.path("escapee.pid");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "{} /bin/sh -c 'echo $$ > {}; exec sleep 1000' & exec sleep 1000",
                setsid(),
                pidfile.display()
            ),
        ],
        json!({}),
    );
    let pid = pid_from_file(d, "escapee.pid");
    assert!(!dead(pid), "the escapee {pid} runs before the kill");
    (id, pid)
}

#[test]
fn kill_agent_kills_a_descendant_that_called_setsid() {
    let d = Colibrid::start(&[]);
    let (id, escapee) = spawn_with_setsid_child(&d);
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    wait_for(
        Duration::from_secs(20),
        "the setsid descendant to die with its agent",
        || dead(escapee).then_some(()),
    );
}

// See: an attacker's try (an ended agent's leftovers had no command to
// kill them: kill and signal said "not running", remove left them).
#[test]
fn an_ended_agents_leftovers_are_killed_by_kill_and_by_remove() {
    let d = Colibrid::start(&[]);
    // Each agent starts a sleeper in a session of its own and exits once
    // the sleeper is there (before, the hangup at the agent's exit would
    // end it): the sleeper outlives it and is re-parented to colibrid.
    let leave_one = |name: &str| {
        let file = d.path(&format!("{name}.pid"));
        let script = format!(
            "{s} /bin/sh -c 'echo $$ > {f}; exec sleep 1000' & \
             while [ ! -s {f} ]; do sleep 0.05; done; exit 0",
            s = setsid(),
            f = file.display()
        );
        let id = d.spawn(&["/bin/sh", "-c", &script], json!({ "name": name }));
        let pid = pid_from_file(&d, &format!("{name}.pid"));
        d.wait_state(&id, "done");
        wait_for(
            Duration::from_secs(20),
            "the leftover to reach colibrid",
            || children_of(d.pid()).contains(&pid).then_some(()),
        );
        (id, pid)
    };
    let (killed, first) = leave_one("killed");
    let (removed, second) = leave_one("removed");
    let r = d.ok(json!({"cmd":"kill-agent","agent_id": killed}));
    assert_eq!(r["status"], json!("leftovers_killed"), "{r}");
    wait_for(Duration::from_secs(20), "the leftover killed", || {
        dead(first).then_some(())
    });
    assert!(!dead(second), "another pane's leftover was killed too");
    // Nothing is left: a second kill says so.
    let again = d.request(json!({"cmd":"kill-agent","agent_id": killed}));
    assert_eq!(again["ok"], json!(false), "{again}");
    assert_eq!(again["code"], json!("not_running"), "{again}");
    d.ok(json!({"cmd":"remove-agent","agent_id": removed}));
    wait_for(
        Duration::from_secs(20),
        "the removed pane's leftover killed",
        || dead(second).then_some(()),
    );
}

#[test]
fn shutdown_kills_setsid_descendants_and_orphans() {
    let mut d = Colibrid::start(&["--shutdown-grace", "5s"]);
    let (_, escapee) = spawn_with_setsid_child(&d);
    // The orphan's parent (a subshell) exits at once: it is re-parented to
    // colibrid, the subreaper, and no longer names its agent.
    let orphan_file = d.path("orphan.pid");
    d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "({} /bin/sh -c 'echo $$ > {}; exec sleep 1000' &); exec sleep 1000",
                setsid(),
                orphan_file.display()
            ),
        ],
        json!({}),
    );
    let orphan = pid_from_file(&d, "orphan.pid");
    wait_for(
        Duration::from_secs(20),
        "the orphan to reach colibrid",
        || children_of(d.pid()).contains(&orphan).then_some(()),
    );
    let status = d.terminate();
    assert!(status.success(), "colibrid exited {status}");
    for pid in [escapee, orphan] {
        wait_for(
            Duration::from_secs(20),
            "every descendant to die at shutdown",
            || dead(pid).then_some(()),
        );
    }
}

/// Every signal whose default action would end colibrid is received and
/// counted, and the daemon goes on answering.
#[test]
fn signals_that_would_terminate_are_counted_and_survived() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let d = Colibrid::start(&[]);
    let pid = Pid::from_raw(d.pid());
    // The portable set must be watched; each system may add its own
    // (Linux: POLL, PWR, STKFLT), and all of them are sent.
    let watched = colibri::platform::DaemonSignal::watched_names();
    for name in [
        "USR1", "USR2", "ALRM", "VTALRM", "PROF", "XCPU", "XFSZ", "HUP",
    ] {
        assert!(
            watched.iter().any(|(_, n)| *n == name),
            "SIG{name} is not watched: {watched:?}"
        );
    }
    let stopping = ["TERM", "INT", "QUIT", "CHLD"];
    for (signo, name) in watched.iter().filter(|(_, n)| !stopping.contains(n)) {
        let sig = Signal::try_from(*signo).expect("a known signal");
        kill(pid, sig).expect("send the signal");
        wait_for(
            Duration::from_secs(20),
            &format!("SIG{name} in status"),
            || {
                let st = d.ok(json!({"cmd":"status"}));
                (st["signals"][*name] == json!(1)).then_some(())
            },
        );
    }
    kill(pid, Signal::SIGPIPE).expect("SIGPIPE");
    let st = d.ok(json!({"cmd":"status"}));
    assert_eq!(st["pid"], json!(d.pid()), "{st}");
    assert!(!dead(d.pid()), "colibrid survived every signal");
}

#[test]
fn sigquit_stops_colibrid_in_order() {
    let mut d = Colibrid::start(&[]);
    let child = d.child.take().expect("running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGQUIT,
    )
    .expect("SIGQUIT");
    d.child = Some(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            break st;
        }
        assert!(Instant::now() < deadline, "colibrid ignored SIGQUIT");
        std::thread::sleep(Duration::from_millis(10));
    };
    d.child = None;
    assert_eq!(status.code(), Some(0), "an orderly stop, not a core dump");
    assert!(!d.socket.exists(), "the socket file is removed");
}

/// A control character other than tab and newline, DEL, or a C1 character
/// (UTF-8 C2 80..C2 9F) in `out`.
fn raw_control(out: &[u8]) -> Option<usize> {
    out.iter().enumerate().position(|(i, &b)| {
        (b < 0x20 && b != b'\t' && b != b'\n')
            || b == 0x7f
            || (b == 0xc2 && out.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })
}

fn run_colibri(d: &Colibrid, args: &[&str]) -> std::process::Output {
    std::process::Command::new(COLIBRI)
        .args(args)
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run colibri")
}

/// An agent that prints OSC 52 (clipboard), OSC 0 (title), clear-screen and
/// C1 CSI sequences in its tool call, its error and a raw line: no human
/// view of `colibri` passes them to the operator's terminal; JSON stays JSON.
#[test]
fn agent_escape_sequences_never_reach_the_operators_terminal() {
    let mut d = Colibrid::start(&[]);
    let watch = std::process::Command::new(COLIBRI)
        .args(["watch"])
        .env("COLIBRI_SOCKET", &d.socket)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("watch");
    wait_for(Duration::from_secs(20), "the watcher", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(1)).then_some(())
    });
    let lines = d.path("hostile.jsonl");
    std::fs::write(
        &lines,
        concat!(
            "{\"type\":\"agent_start\"}\n",
            "{\"type\":\"tool_execution_start\",\"toolCallId\":\"t1\",\"toolName\":\"bash\",",
            "\"args\":{\"command\":\"\\u001b]52;c;cHduZWQ=\\u0007\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m\"}}\n",
            "{\"type\":\"tool_execution_end\",\"toolCallId\":\"t1\",\"toolName\":\"bash\",\"result\":{},\"isError\":false}\n",
            "{\"type\":\"message_end\",\"message\":{\"role\":\"assistant\",\"content\":[],",
            "\"usage\":{\"input\":1,\"output\":1,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":2,\"cost\":{\"total\":0}},",
            "\"stopReason\":\"error\",\"errorMessage\":\"\\u001b]0;title\\u0007\\u001b[2Jboom\"}}\n",
            "{\"type\":\"turn_end\",\"message\":{\"role\":\"assistant\",\"content\":[],\"stopReason\":\"error\"},\"toolResults\":[]}\n",
            "{\"type\":\"agent_end\",\"messages\":[],\"willRetry\":false}\n",
            "{\"type\":\"agent_settled\"}\n",
        ),
    )
    .expect("write the agent's lines");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "cat {}; printf '\\033]0;raw\\007\\n'; exec sleep 1000",
                lines.display()
            ),
        ],
        // A control character in a name is refused at spawn; a bidi
        // override is taken, and every view must escape it.
        json!({"runtime":"pi","session_id":"hostile","name":"n\u{202e}t"}),
    );
    let refused = d.request(json!({"cmd":"spawn-agent","argv":["true"],"name":"n\u{1b}]0;t\u{7}"}));
    assert_eq!(refused["code"], json!("invalid"), "{refused}");
    d.wait_state(&id, "error");
    let session = "hostile";

    let snapshot = run_colibri(&d, &["snapshot"]);
    assert!(snapshot.status.success());
    let views = [
        ("snapshot", snapshot.stdout),
        (
            "snapshot v1",
            run_colibri(&d, &["snapshot", "--schema", "v1"]).stdout,
        ),
        ("sessions", run_colibri(&d, &["sessions"]).stdout),
        ("status", run_colibri(&d, &["status"]).stdout),
        (
            "fold",
            run_colibri(
                &d,
                &[
                    "fold",
                    d.state
                        .join("sessions")
                        .join(format!("{session}.jsonl"))
                        .to_str()
                        .expect("utf-8 path"),
                ],
            )
            .stdout,
        ),
    ];
    let json_snapshot = run_colibri(&d, &["snapshot", "--json"]);
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    d.terminate();
    let watched = watch.wait_with_output().expect("watch output");
    for (what, out) in views.iter().chain([&("watch", watched.stdout.clone())]) {
        let text = String::from_utf8_lossy(out);
        assert!(
            raw_control(out).is_none(),
            "{what} passed a control character through: {text:?}"
        );
    }
    let text = |o: &[u8]| String::from_utf8_lossy(o).into_owned();
    assert!(
        text(&views[0].1).contains("n\\u{202e}t"),
        "{}",
        text(&views[0].1)
    );
    assert!(
        text(&views[0].1).contains("\\x1b]52;c"),
        "{}",
        text(&views[0].1)
    );
    assert!(
        text(&views[4].1).contains("\\x1b]0;title\\x07\\x1b[2Jboom"),
        "{}",
        text(&views[4].1)
    );
    assert!(
        text(&views[4].1).contains("\\u{9b}31m"),
        "{}",
        text(&views[4].1)
    );
    assert!(
        text(&watched.stdout).contains("\\x1b"),
        "{}",
        text(&watched.stdout)
    );
    // JSON output stays JSON, with the agent's text intact once decoded.
    let decoded: Value = serde_json::from_slice(&json_snapshot.stdout).expect("--json is JSON");
    assert_eq!(
        decoded["panes"][0]["name"],
        json!("n\u{202e}t"),
        "{decoded}"
    );
}

/// colibrid on `dir`, with its stderr in `dir/stderr`, outside `Colibrid`
/// (whose start helper inherits stderr and panics on an early exit).
fn colibrid_with_stderr(dir: &std::path::Path, extra: &[&str]) -> std::process::Child {
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    std::process::Command::new(COLIBRID)
        .arg("--socket")
        .arg(dir.join("c.sock"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(extra)
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_CONFIG")
        .env("COLIBRI_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start colibrid")
}

fn stop(mut child: std::process::Child) -> std::process::ExitStatus {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_for(Duration::from_secs(20), "colibrid to stop", || {
        child.try_wait().ok().flatten()
    })
}

#[test]
fn a_missing_syslog_socket_is_said_once_on_stderr_and_in_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-syslog.sock");
    let child = colibrid_with_stderr(
        dir.path(),
        &["--syslog-socket", missing.to_str().expect("utf-8")],
    );
    let sock = dir.path().join("c.sock");
    let mut client = wait_for(Duration::from_secs(20), "colibrid to listen", || {
        Client::try_connect(&sock).ok()
    });
    let st = client.request(&json!({"cmd":"status"}));
    let why = st["data"]["alerts_unreachable"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("no-such-syslog.sock"),
        "status names the socket: {st}"
    );
    // Alerts that find no socket (three failing agents, each exit alerted;
    // the first retries the connect at once): still one line on stderr.
    for _ in 0..3 {
        let r = client.request(&json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","exit 3"]}));
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    wait_for(Duration::from_secs(20), "the agents to exit", || {
        let snap = client.request(&json!({"cmd":"snapshot","schema":"v2"}));
        let panes = snap["data"]["panes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (panes.len() == 3 && panes.iter().all(|p| !p["exit"].is_null())).then_some(())
    });
    drop(client);
    assert!(stop(child).success());
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).expect("stderr");
    let told = stderr.matches("alerts cannot reach syslog").count();
    assert_eq!(told, 1, "said once: {stderr}");
    assert!(stderr.contains("no-such-syslog.sock"), "{stderr}");
}

#[test]
fn a_world_writable_state_dir_of_ours_is_fixed_and_said() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let child = colibrid_with_stderr(dir.path(), &["--no-syslog"]);
    let sock = dir.path().join("c.sock");
    wait_for(Duration::from_secs(20), "colibrid to listen", || {
        Client::try_connect(&sock).ok()
    });
    let mode = std::fs::metadata(&state)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode & 0o002, 0, "o+w cleared: {mode:o}");
    assert!(stop(child).success());
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).expect("stderr");
    assert!(stderr.contains("was writable by every user"), "{stderr}");
}

#[test]
fn a_world_writable_state_dir_of_someone_else_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        // Giving a directory away takes root; CI runs as root.
        eprintln!("skipped: needs root to chown");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).expect("chown");
    let mut child = colibrid_with_stderr(dir.path(), &["--no-syslog"]);
    let status = wait_for(Duration::from_secs(20), "colibrid to refuse", || {
        child.try_wait().ok().flatten()
    });
    assert!(!status.success(), "refused: {status}");
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).expect("stderr");
    assert!(
        stderr.contains("writable by every user") && stderr.contains("state"),
        "a clear error: {stderr}"
    );
}

/// An agent whose subshell starts a setsid'ed sleep and exits at once: the
/// sleep is re-parented to colibrid and no longer descends from its agent.
fn spawn_with_orphan(d: &Colibrid, file: &str) -> (String, i32) {
    let path = d.path(file);
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "({} /bin/sh -c 'echo $$ > {}; exec sleep 1000' &); exec sleep 1000",
                setsid(),
                path.display()
            ),
        ],
        json!({}),
    );
    let orphan = pid_from_file(d, file);
    wait_for(
        Duration::from_secs(20),
        "the orphan to reach colibrid",
        || children_of(d.pid()).contains(&orphan).then_some(()),
    );
    (id, orphan)
}

#[test]
fn kill_agent_kills_its_orphans_and_no_one_elses() {
    let d = Colibrid::start(&[]);
    let (id, orphan) = spawn_with_orphan(&d, "mine.pid");
    let (_, other) = spawn_with_orphan(&d, "theirs.pid");
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    wait_for(
        Duration::from_secs(20),
        "the killed agent's orphan to die",
        || dead(orphan).then_some(()),
    );
    d.wait_pane(&id, "exit", |p| !p["exit"].is_null());
    assert!(!dead(other), "another agent's orphan {other} was killed");
}
