//! Agent processes from spawn to exit: statuses, whole-tree kills, stalls,
//! pause, restarts, signals, reaping, and an orderly SIGTERM.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

#[test]
fn exit_codes_and_signals_are_recorded() {
    let d = Colibrid::start(&[]);
    let ok = d.spawn(
        &["/bin/sh", "-c", "echo '{\"type\":\"agent_start\"}'; exit 0"],
        json!({"runtime":"pi"}),
    );
    let bad = d.spawn(
        &["/bin/sh", "-c", "echo '{\"type\":\"agent_start\"}'; exit 3"],
        json!({}),
    );
    let sig = d.spawn(&["/bin/sh", "-c", "kill -TERM $$"], json!({}));
    let p = d.wait_state(&ok, "done");
    assert_eq!(p["exit"], json!({"code": 0}));
    let p = d.wait_state(&bad, "error");
    assert_eq!(p["exit"], json!({"code": 3}));
    assert!(p["last_error"].as_str().unwrap_or("").contains('3'), "{p}");
    let p = d.wait_state(&sig, "error");
    assert_eq!(p["exit"], json!({"signal": 15}));
}

#[test]
fn kill_agent_kills_the_whole_tree() {
    let d = Colibrid::start(&[]);
    let pidfile = d.path("grandchild.pid");
    let body = format!(
        "sleep 300 & echo $! > {}; echo '{{\"type\":\"agent_start\"}}'; wait",
        pidfile.display()
    );
    let id = d.spawn(&["/bin/sh", "-c", &body], json!({}));
    d.wait_state(&id, "working");
    let grandchild: i32 = wait_for(Duration::from_secs(10), "the pid file", || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    });
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    let p = d.wait_pane(&id, "exit", |p| !p["exit"].is_null());
    assert_eq!(p["state"], json!("error"));
    assert_eq!(p["last_error"], json!("killed by operator"));
    wait_for(Duration::from_secs(10), "the grandchild to be gone", || {
        (!pid_alive(grandchild)).then_some(())
    });
}

#[test]
fn stall_is_reported_and_ends_on_new_output() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; read x; echo '{\"type\":\"turn_start\"}'; read y",
        ],
        json!({"stall_after": "300ms", "runtime": "pi"}),
    );
    let mut w = d.client();
    assert_eq!(
        w.request(&json!({"cmd":"watch","panes":[id]}))["ok"],
        json!(true)
    );
    let started = Instant::now();
    // Wait for the stall timer's event (the snapshot's flag is derived from
    // the clock and can show a few milliseconds earlier).
    let next_event = |w: &mut Client, kind: &str| loop {
        let ev = w.read_line().expect("a watch event");
        if ev["event"] == json!(kind) {
            return ev;
        }
    };
    let ev = next_event(&mut w, "stalled");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "not before the threshold"
    );
    assert!(ev["silent_ms"].as_u64().unwrap_or(0) >= 300, "{ev}");
    let p = d.pane(&id);
    assert_eq!(p["state"], json!("working"));
    assert_eq!(p["stalled"], json!(true));
    let v1 = d.ok(json!({"cmd":"glasspane-snapshot"}));
    assert_eq!(v1["panes"][0]["stalled"], json!(true));
    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"more"}));
    next_event(&mut w, "unstalled");
    let p = d.pane(&id);
    assert_eq!(p["stalled"], json!(false));
    assert_eq!(p["counters"]["events"], json!(2));
}

#[test]
fn paused_agents_are_stopped_and_never_stalled() {
    let d = Colibrid::start(&[]);
    let counter = d.path("ticks");
    let body = format!(
        "echo '{{\"type\":\"agent_start\"}}'; while :; do echo x >> {}; sleep 0.05; done",
        counter.display()
    );
    let id = d.spawn(&["/bin/sh", "-c", &body], json!({"stall_after":"200ms"}));
    d.wait_state(&id, "working");
    d.ok(json!({"cmd":"pause-agent","agent_id": id}));
    // Stopped: the tick file stops growing.
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let a = wait_for(Duration::from_secs(5), "a stable size", || {
        let a = size(&counter);
        std::thread::sleep(Duration::from_millis(200));
        (size(&counter) == a).then_some(a)
    });
    // A control agent with the same threshold, started after the pause and
    // silent from then on: once it is stalled, the paused agent has been
    // silent past the threshold too, and would be stalled if it could.
    let control = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 60",
        ],
        json!({"stall_after":"200ms"}),
    );
    d.wait_pane(&control, "the control agent to stall", |p| {
        p["stalled"] == json!(true)
    });
    let p = d.pane(&id);
    assert_eq!(p["paused"], json!(true));
    assert_eq!(p["stalled"], json!(false), "paused is never stalled");
    assert_eq!(size(&counter), a);
    d.ok(json!({"cmd":"resume-agent","agent_id": id}));
    wait_for(Duration::from_secs(5), "ticks again", || {
        (size(&counter) > a).then_some(())
    });
    assert_eq!(d.pane(&id)["paused"], json!(false));
}

#[test]
fn restart_on_failure_keeps_the_pane_with_a_new_generation() {
    let d = Colibrid::start(&[]);
    let runs = d.path("runs");
    let body = format!(
        "echo run >> {}; echo '{{\"type\":\"agent_start\"}}'; exit 1",
        runs.display()
    );
    let id = d.spawn(
        &["/bin/sh", "-c", &body],
        json!({"restart":"on-failure","max_restarts":2}),
    );
    // The default schedule starts at one minute: too slow for a test, so
    // this checks the schedule is visible, then kills the wait short.
    let p = d.wait_pane(&id, "a scheduled restart", |p| {
        !p["restart"]["next_at"].is_null()
    });
    assert_eq!(p["restart"]["policy"], json!("on-failure"));
    assert_eq!(p["restart"]["attempts"], json!(1));
    assert_eq!(p["generation"], json!(0));
    let k = d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    assert_eq!(k["status"], json!("stopped"));
    assert!(d.pane(&id)["restart"]["next_at"].is_null());
}

#[test]
fn restart_backoff_from_config_restarts_quickly() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.path("fast.toml");
    std::fs::write(
        &cfg,
        "[restart]\nbackoff = [\"100ms\", \"200ms\"]\nmax_restarts = 2\n",
    )
    .expect("cfg");
    d.terminate();
    d.args = vec!["--config".into(), cfg.display().to_string()];
    d.launch();
    let runs = d.path("runs");
    let body = format!(
        "echo run >> {}; echo '{{\"type\":\"agent_start\"}}'; exit 1",
        runs.display()
    );
    let id = d.spawn(&["/bin/sh", "-c", &body], json!({"restart":"on-failure"}));
    let p = d.wait_pane(&id, "two restarts used", |p| {
        p["generation"] == json!(2)
            && p["state"] == json!("error")
            && p["restart"]["next_at"].is_null()
    });
    assert_eq!(p["restart"]["attempts"], json!(2));
    let n = std::fs::read_to_string(&runs)
        .map(|s| s.lines().count())
        .unwrap_or(0);
    assert_eq!(n, 3, "first run plus two restarts");
}

#[test]
fn sigterm_leaves_no_process_no_zombie_no_socket() {
    let mut d = Colibrid::start(&[]);
    // One agent ignores TERM: the grace period must end it with KILL.
    let stubborn = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "trap '' TERM; echo '{\"type\":\"agent_start\"}'; while :; do sleep 1; done",
        ],
        json!({}),
    );
    let plain = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 300",
        ],
        json!({}),
    );
    d.wait_state(&stubborn, "working");
    d.wait_state(&plain, "working");
    let daemon = d.pid();
    let kids = children_of(daemon);
    assert!(kids.len() >= 2, "agents are children of colibrid: {kids:?}");
    let mut all = kids.clone();
    for k in &kids {
        all.extend(children_of(*k));
    }
    let started = Instant::now();
    let status = d.terminate();
    assert!(status.success(), "exit 0 on SIGTERM: {status}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(!d.socket.exists(), "socket removed");
    wait_for(
        Duration::from_secs(5),
        "every agent process to be gone",
        || all.iter().all(|p| !pid_alive(*p)).then_some(()),
    );
}

#[test]
fn a_second_daemon_refuses_a_live_socket_and_replaces_a_stale_one() {
    let mut d = Colibrid::start(&[]);
    let out = std::process::Command::new(COLIBRID)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--state-dir")
        .arg(d.path("other"))
        .arg("--no-syslog")
        .output()
        .expect("run second daemon");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another colibrid"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another socket but the same state dir: the lock refuses it.
    let out = std::process::Command::new(COLIBRID)
        .arg("--socket")
        .arg(d.path("second.sock"))
        .arg("--state-dir")
        .arg(&d.state)
        .arg("--no-syslog")
        .output()
        .expect("run third daemon");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use by another colibrid"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!d.path("second.sock").exists(), "it bound nothing");
    d.crash();
    assert!(d.socket.exists(), "a crash leaves the socket file");
    d.launch();
    assert_eq!(d.request(json!({"cmd":"status"}))["ok"], json!(true));
}

#[test]
fn agents_hold_only_fds_0_to_2_and_get_their_environment() {
    let d = Colibrid::start(&[]);
    let out = d.path("env");
    let body = format!(
        "echo \"$COLIBRI_PANE_ID $COLIBRI_SOCKET\" > {o}; echo '{{\"type\":\"agent_start\"}}'; exec sleep 60",
        o = out.display()
    );
    let id = d.spawn(&["/bin/sh", "-c", &body], json!({}));
    let pane = d.wait_state(&id, "working");
    let pid = pane["pid"].as_i64().expect("a running pane has a pid") as i32;
    // Read from the kernel once the shell has become `sleep`: what the
    // agent itself holds, not what a shell opened for a redirection.
    let fds = wait_for(Duration::from_secs(10), "the agent to exec sleep", || {
        let text = std::fs::read_to_string(&out).ok()?;
        (text.trim() == format!("{id} {}", d.socket.display())).then_some(())?;
        let fds = colibri::platform::process_fds(pid).expect("the agent's fds");
        (fds.len() == 3).then_some(fds)
    });
    let numbers: Vec<i32> = fds.iter().map(|f| f.fd).collect();
    assert_eq!(numbers, [0, 1, 2], "only 0-2 inherited: {fds:?}");
    for f in &fds {
        assert!(
            f.kind == colibri::platform::FdKind::Device && f.name.starts_with("/dev/pts/"),
            "fd {} is the PTY: {f:?}",
            f.fd
        );
    }
    assert_eq!(fds[0].name, fds[2].name, "one terminal on 0-2: {fds:?}");
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}

#[test]
fn send_input_reaches_the_agent_and_emit_drives_state() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "read line; echo \"$line\"; sleep 30"],
        json!({"runtime":"claude","name":"hooked"}),
    );
    d.ok(json!({"cmd":"send-input","agent_id":"hooked","text":"{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\",\"cwd\":\"/w\"}"}));
    d.wait_pane(&id, "the echoed line", |p| p["session_id"] == json!("s1"));
    // A Claude hook reports a permission prompt through emit.
    let r = d.ok(json!({"cmd":"emit","agent_id": id, "event": {"hook_event_name":"Notification","notification_type":"permission_prompt","message":"Claude needs your permission to use Bash","session_id":"s1"}}));
    assert_eq!(r["accepted"], json!(true));
    let p = d.wait_state(&id, "blocked");
    assert_eq!(p["name"], json!("hooked"));
    let e = d.request(json!({"cmd":"emit","agent_id": id, "event": [1,2]}));
    assert_eq!(e["ok"], json!(false));
}

#[test]
fn orphaned_grandchildren_are_reaped_not_left_as_zombies() {
    let d = Colibrid::start(&[]);
    // The agent leaves a grandchild behind, detached from its terminal, and
    // exits: the grandchild is re-parented to colibrid (a subreaper).
    let pidfile = d.path("orphan.pid");
    let body = format!(
        "sh -c 'sleep 0.3' </dev/null >/dev/null 2>&1 & echo $! > {}; echo '{{\"type\":\"agent_start\"}}'; exit 0",
        pidfile.display()
    );
    let id = d.spawn(&["/bin/sh", "-c", &body], json!({}));
    d.wait_state(&id, "done");
    let orphan: i32 = wait_for(Duration::from_secs(5), "the pid file", || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    });
    wait_for(
        Duration::from_secs(10),
        "the orphan to be reaped (no zombie)",
        || (!pid_alive(orphan)).then_some(()),
    );
    // Whatever else the agent's tree left (the orphan's own child, killed
    // with the tree) is reaped too, within a sweep or two (the `waitpid`
    // sweep runs at most every 100 ms), and no zombie stays.
    let daemon = d.pid();
    let zombies = || {
        children_of(daemon)
            .into_iter()
            .filter(|kid| {
                process(*kid).is_some_and(|p| p.state == colibri::platform::ProcessState::Zombie)
            })
            .collect::<Vec<i32>>()
    };
    wait_for(
        Duration::from_secs(5),
        "no zombie child of colibrid",
        || zombies().is_empty().then_some(()),
    );
}

#[test]
fn signal_agent_delivers_named_and_numbered_signals() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "t() { echo '{\"type\":\"turn_start\"}'; }; u() { echo '{\"type\":\"turn_end\"}'; }; trap t USR1; trap u USR2; echo '{\"type\":\"agent_start\"}'; while :; do sleep 0.05; done"],
        json!({"runtime":"pi"}),
    );
    d.wait_state(&id, "working");
    let r = d.ok(json!({"cmd":"signal-agent","agent_id": id, "signal":"USR1"}));
    assert_eq!(r["signal"], json!(libc::SIGUSR1));
    d.wait_pane(&id, "the trap's line", |p| {
        p["counters"]["events"] == json!(2)
    });
    // Delivered once, not once to the group and again to its leader. USR2,
    // sent after, is a fence: its line follows any second USR1 line, so once
    // it is counted, a second delivery would have been counted too.
    d.ok(json!({"cmd":"signal-agent","agent_id": id, "signal":"USR2"}));
    let p = d.wait_pane(&id, "the fence's line", |p| {
        p["counters"]["events"].as_u64() >= Some(3)
    });
    assert_eq!(p["counters"]["events"], json!(3), "{p}");
    let bad = d.request(json!({"cmd":"signal-agent","agent_id": id, "signal":"SIGNOPE"}));
    assert_eq!(bad["ok"], json!(false));
    d.ok(json!({"cmd":"signal-agent","agent_id": id, "signal": 15}));
    let p = d.wait_pane(&id, "exit", |p| !p["exit"].is_null());
    assert_eq!(p["exit"], json!({"signal": 15}));
}

#[test]
fn no_connection_is_accepted_once_shutdown_begins() {
    let mut d = Colibrid::start(&["--shutdown-grace", "3s"]);
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "trap '' TERM; echo '{\"type\":\"agent_start\"}'; while :; do sleep 1; done",
        ],
        json!({}),
    );
    d.wait_state(&id, "working");
    let pid = nix::unistd::Pid::from_raw(d.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("term");
    // During the grace period the agent is still alive, but nobody new gets in.
    wait_for(Duration::from_secs(5), "connects to be refused", || {
        std::os::unix::net::UnixStream::connect(&d.socket)
            .is_err()
            .then_some(())
    });
    let status = d.terminate();
    assert!(status.success());
}

/// A program not on the agent's PATH: the error names the PATH searched and
/// how to change it (colibrid's, or the spawn's own when it sets one).
#[test]
fn a_program_not_found_names_the_path_searched_and_how_to_change_it() {
    let d = Colibrid::start(&["--agent-path", "/usr/bin:/bin"]);
    let r = d.request(json!({"cmd":"spawn-agent","argv":["colibri-no-such-agent"]}));
    let why = r["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("colibri-no-such-agent: not found in PATH /usr/bin:/bin")
            && why.contains("--agent-path")
            && why.contains("COLIBRI_AGENT_PATH"),
        "{r}"
    );
    let r = d.request(json!({"cmd":"spawn-agent","argv":["colibri-no-such-agent"],
        "env":{"PATH":"/bin"}}));
    let why = r["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("not found in PATH /bin (the spawn's own PATH"),
        "{r}"
    );
}

/// A name held by another pane: which case it is, and for an ended pane
/// how to free it.
#[test]
fn a_used_name_says_who_holds_it_and_how_to_free_it() {
    let d = Colibrid::start(&[]);
    let argv = ["/bin/sh", "-c", "sleep 60"];
    let id = d.spawn(&argv, json!({"name":"x"}));
    let again = || {
        d.request(json!({"cmd":"spawn-agent","argv": argv,"name":"x"}))["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let why = again();
    assert!(
        why.contains(&format!("already used by running pane {}", &id[..8])),
        "{why}"
    );
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    d.wait_pane(&id, "the exit", |p| !p["exit"].is_null());
    let why = again();
    assert!(
        why.contains("not running") && why.contains("`colibri remove x` frees the name"),
        "{why}"
    );
    let r = d.request(json!({"cmd":"spawn-agent","argv": argv,"name":""}));
    assert_eq!(r["error"], json!("name is empty"), "{r}");
    // A newline would break a syslog line and notify's ntfy title header.
    for bad in ["two\nlines".to_string(), "x".repeat(257)] {
        let r = d.request(json!({"cmd":"spawn-agent","argv": argv,"name": bad}));
        assert_eq!(r["code"], json!("invalid"), "{r}");
        let why = r["error"].as_str().unwrap_or_default();
        assert!(
            why.contains("control character or is longer than 256"),
            "{why}"
        );
    }
    d.ok(json!({"cmd":"remove-agent","agent_id":"x"}));
    d.spawn(&argv, json!({"name":"x"}));
}
