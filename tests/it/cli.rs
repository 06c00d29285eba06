//! The operator CLI against the real daemon, SIGHUP reload, devd's resume
//! hint, the demo, and own-jail scope.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

fn colibri(d: &Colibrid, args: &[&str]) -> Output {
    Command::new(COLIBRI)
        .args(args)
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .output()
        .expect("run colibri")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_cli_drives_the_real_daemon() {
    let d = Colibrid::start(&[]);
    let o = colibri(
        &d,
        &[
            "spawn",
            "--runtime",
            "pi",
            "--name",
            "worker",
            "--",
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; while read l; do echo \"$l\"; done",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let id = stdout(&o).trim().to_string();
    assert_eq!(id.len(), 36, "prints the agent id: {id}");
    d.wait_state(&id, "working");

    let o = colibri(&d, &["snapshot"]);
    assert!(o.status.success());
    let table = stdout(&o);
    assert!(
        table.contains("worker") && table.contains("working"),
        "{table}"
    );

    let o = colibri(&d, &["snapshot", "--json", "--schema", "v1"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], json!("clawdie.glasspane.snapshot.v1"));

    assert!(colibri(&d, &["send", "worker", "{\"type\":\"extension_ui_request\",\"id\":\"1\",\"method\":\"confirm\",\"title\":\"ok?\"}"]).status.success());
    d.wait_state(&id, "blocked");
    assert!(colibri(&d, &["emit", "worker", "{\"type\":\"tool_execution_start\",\"toolName\":\"bash\",\"args\":{\"command\":\"ls -l\"}}"]).status.success());
    let p = d.wait_state(&id, "working");
    assert_eq!(p["last_tool"]["summary"], json!("ls -l"));

    assert!(colibri(&d, &["pause", "worker"]).status.success());
    assert_eq!(d.pane(&id)["paused"], json!(true));
    assert!(colibri(&d, &["resume", "worker"]).status.success());
    assert!(colibri(&d, &["hint", "resume"]).status.success());

    let o = colibri(&d, &["status"]);
    assert!(stdout(&o).contains("1 working"), "{}", stdout(&o));
    assert!(colibri(&d, &["kill", "worker"]).status.success());
    d.wait_pane(&id, "exit", |p| !p["exit"].is_null());

    let o = colibri(&d, &["sessions", "--json"]);
    let sessions: Value = serde_json::from_slice(&o.stdout).expect("json");
    let sid = sessions[0]["id"].as_str().expect("session id").to_string();
    let o = colibri(&d, &["session", &sid]);
    assert!(o.status.success() && stdout(&o).contains("agent_start"));

    let o = colibri(&d, &["kill", "nobody"]);
    assert_eq!(o.status.code(), Some(1), "the daemon said no");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no agent"));
    // Too short to be a prefix: the message says what would do.
    let o = colibri(&d, &["kill", "693"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("at least 4 characters"), "{err}");
}

/// `colibri stop` is a planned stop: the v1 snapshot says `done`, and the
/// table and `status` must not call it `error`.
#[test]
fn a_planned_stop_is_not_an_error_in_the_table_or_the_status_counts() {
    let d = Colibrid::start(&[]);
    let mut watch = Client::connect(&d.socket);
    watch.request(&json!({"cmd":"watch"}));
    // `restart = always`: the stop must also keep it down, and still read
    // as no failure (v2 said `error` here).
    let id = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"halt", "restart": "always"}),
    );
    let o = colibri(&d, &["stop", "halt"]);
    assert!(o.status.success(), "{o:?}");
    let p = d.wait_pane(&id, "the planned stop", |p| {
        p["supervision"]["actual"] == json!("stopped")
    });
    assert_eq!(p["state"], json!("done"), "v2 reads the planned stop: {p}");
    assert!(p["last_error"].is_null(), "no error of the agent's: {p}");
    let exited = wait_for(Duration::from_secs(30), "the exited event", || {
        let ev = watch.read_line()?;
        (ev["event"] == json!("exited")).then_some(ev)
    });
    assert_eq!(exited["planned"], json!(true), "{exited}");
    let o = colibri(&d, &["snapshot", "--json", "--schema", "v1"]);
    let v1: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v1["panes"][0]["state"], json!("done"), "{v1}");
    let table = stdout(&colibri(&d, &["snapshot"]));
    let row = table
        .lines()
        .find(|l| l.contains("halt"))
        .unwrap_or_else(|| panic!("no row for halt: {table}"));
    assert!(row.contains("stopped") && !row.contains("error"), "{table}");
    let status = stdout(&colibri(&d, &["status"]));
    assert!(
        status.contains("1 done") && !status.contains("error"),
        "{status}"
    );
}

/// A live human watch names panes that attached before it began, as a
/// replay (`--since 0`), which sees their `attached` events, does.
#[test]
fn a_live_watch_names_panes_attached_before_it() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(&["/bin/sh", "-c", "sleep 60"], json!({"name":"early"}));
    let mut watch = Command::new(COLIBRI)
        .arg("watch")
        .env("COLIBRI_SOCKET", &d.socket)
        .stdout(Stdio::piped())
        .spawn()
        .expect("watch");
    let lines = std::io::BufReader::new(watch.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in lines.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    wait_for(Duration::from_secs(10), "the watcher", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(1)).then_some(())
    });
    d.ok(json!({"cmd":"pause-agent","agent_id": id}));
    let short = &id[..8];
    let line = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the paused line");
        if line.contains("paused") {
            break line;
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(line.contains(&format!("{short} (early) paused")), "{line}");
}

#[test]
fn watch_prints_events_and_hint_resume_rebases_stall_deadlines() {
    let mut d = Colibrid::start(&[]);
    let watch = Command::new(COLIBRI)
        .args(["watch", "--json"])
        .env("COLIBRI_SOCKET", &d.socket)
        .stdout(Stdio::piped())
        .spawn()
        .expect("watch");
    wait_for(Duration::from_secs(10), "the watcher", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(1)).then_some(())
    });
    // Our own watcher too: the snapshot's `stalled` is derived from the clock
    // and may show a few milliseconds before the stall timer's event does.
    let mut events = d.client();
    assert_eq!(events.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 30",
        ],
        json!({"stall_after":"1s","runtime":"pi"}),
    );
    d.wait_state(&id, "working");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    // As devd would on resume: the silence so far does not count.
    let hinted = Instant::now();
    assert!(colibri(&d, &["hint", "resume"]).status.success());
    loop {
        let ev = events.read_line().expect("a watch event");
        if ev["event"] == json!("stalled") && ev["pane"] == json!(id) {
            break;
        }
    }
    assert!(
        hinted.elapsed() >= Duration::from_millis(950),
        "stalled only a full threshold after the hint ({:?} after start)",
        t0.elapsed()
    );
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    d.wait_pane(&id, "exit", |p| !p["exit"].is_null());
    // Stopping the daemon ends the stream; `colibri watch` prints everything
    // it was sent, then says the daemon went away and exits 1.
    assert!(d.terminate().success());
    let out = watch.wait_with_output().expect("watch output");
    assert_eq!(
        out.status.code(),
        Some(1),
        "watch fails when the daemon ends the stream"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for k in ["attached", "state", "stalled", "exited"] {
        assert!(kinds.contains(&k), "watch printed {k}: {kinds:?}");
    }
}

#[test]
fn sighup_reloads_the_configuration() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.relaunch_with_config("reload.toml", "[daemon]\nstall_after = \"10m\"\n");
    let st = d.ok(json!({"cmd":"status"}));
    assert_eq!(st["stall_after_ms"], json!(600_000));
    assert_eq!(
        (&st["reloads"], &st["reload_errors"]),
        (&json!(0), &json!(0))
    );
    assert!(st.get("restart_needed").is_none(), "{st}");

    // A reloadable key is applied; a key only a restart can apply is named.
    std::fs::write(&cfg, "[daemon]\nstall_after = \"90s\"\nmax_line = 4096\n").expect("cfg");
    let st = d.hup_and_wait("reloads", Duration::from_secs(10));
    assert_eq!(st["stall_after_ms"], json!(90_000));
    assert_eq!(st["reload_errors"], json!(0));
    assert_eq!(st["restart_needed"], json!(["daemon.max_line"]));

    // A broken file keeps the running configuration, and is counted.
    std::fs::write(&cfg, "[daemon]\nstall_after = \"soon\"\n").expect("cfg");
    let st = d.hup_and_wait("reload_errors", Duration::from_secs(10));
    assert_eq!(st["reloads"], json!(1));
    assert_eq!(st["stall_after_ms"], json!(90_000));
    assert_eq!(st["restart_needed"], json!(["daemon.max_line"]));

    // Back to the file colibrid started with: nothing waits for a restart.
    std::fs::write(&cfg, "[daemon]\nstall_after = \"10m\"\n").expect("cfg");
    let st = d.hup_and_wait("reloads", Duration::from_secs(10));
    assert_eq!(st["stall_after_ms"], json!(600_000));
    assert!(st.get("restart_needed").is_none(), "{st}");
}

#[test]
fn check_config_prints_every_error_and_exits_2() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("three.toml");
    std::fs::write(
        &cfg,
        concat!(
            "[daemon]\n",
            "stall_after = \"0s\"\n",
            "heartbeat = \"30s\"\n",
            "socket_mode = 660\n",
            "[syslog]\n",
            "facility = \"daemons\"\n",
        ),
    )
    .expect("write");
    let out = Command::new(COLIBRID)
        .arg("--config")
        .arg(&cfg)
        .arg("--check-config")
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_STATE_DIR")
        .output()
        .expect("run colibrid");
    assert_eq!(out.status.code(), Some(2), "the documented exit status");
    assert!(out.stdout.is_empty(), "no configuration is printed");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let at = |n: u32, key: &str| format!("colibrid: {}:{n}: {key}: ", cfg.display());
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].starts_with(&at(2, "daemon.stall_after")), "{err}");
    assert!(lines[1].starts_with(&at(4, "daemon.socket_mode")), "{err}");
    assert!(lines[2].starts_with(&at(6, "syslog.facility")), "{err}");
}

#[test]
fn check_config_validates_and_prints_declared_agents() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        concat!(
            "[agents.cafe]\n",
            "argv = [\"x\"]\n",
            "[agents.fixer]\n",
            "argv = [\"claude\", \"-p\"]\n",
            "restart = \"sometimes\"\n",
            "[agents.reviewer]\n",
            "provider = \"nowhere\"\n",
        ),
    )
    .expect("write");
    let check = |cfg: &std::path::Path| {
        Command::new(COLIBRID)
            .arg("--config")
            .arg(cfg)
            .arg("--check-config")
            .env_remove("COLIBRI_SOCKET")
            .env_remove("COLIBRI_STATE_DIR")
            .output()
            .expect("run colibrid")
    };
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let at = |n: u32, key: &str| format!("colibrid: {}:{n}: {key}: ", bad.display());
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].starts_with(&at(1, "agents.cafe")), "{err}");
    assert!(
        lines[1].starts_with(&at(5, "agents.fixer.restart")),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&at(7, "agents.reviewer.provider")),
        "{err}"
    );

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        concat!(
            "[agents.fixer]\n",
            "argv = [\"claude\", \"-p\"]\n",
            "restart = \"always\"\n",
        ),
    )
    .expect("write");
    let out = check(&good);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[agents.fixer]"), "{text}");
    assert!(text.contains("restart = \"always\""), "{text}");
    assert!(
        text.contains(r#"resume = ["{argv}", "--resume", "{session}"]"#),
        "the default resume template is shown: {text}"
    );
}

#[test]
fn spawn_refuses_the_stall_thresholds_the_config_refuses() {
    let d = Colibrid::start(&[]);
    let o = colibri(
        &d,
        &[
            "spawn",
            "--stall-after",
            "0s",
            "--",
            "/bin/sh",
            "-c",
            "sleep 30",
        ],
    );
    assert!(!o.status.success(), "0s was accepted: {}", stdout(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("stall_after: must be greater than zero"),
        "{err}"
    );
    for stall in [json!(0), json!("0ms"), json!(u64::MAX), json!("400years")] {
        let r = d.request(
            json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","sleep 30"],"stall_after": stall}),
        );
        assert_eq!(
            r["ok"],
            json!(false),
            "stall_after {stall} was accepted: {r}"
        );
        assert!(
            r["error"]
                .as_str()
                .unwrap_or("")
                .starts_with("stall_after: "),
            "{r}"
        );
    }
    assert_eq!(
        d.ok(json!({"cmd":"status"}))["agents"],
        json!(0),
        "no pane was made"
    );
    let r = d.request(
        json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","sleep 30"],"stall_after": 90_000}),
    );
    assert_eq!(r["ok"], json!(true), "{r}");
}

#[test]
fn the_demo_runs_to_its_summary() {
    let out = Command::new(COLIBRI)
        .args(["demo", "--speed", "4"])
        .stdin(Stdio::null())
        .output()
        .expect("run demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Summary"), "{text}");
    for (name, state) in [
        ("pi-success", "done"),
        ("claude-error", "error"),
        ("gemini-crash", "error"),
        ("zot-stall", "done"),
    ] {
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with(name))
            .unwrap_or("");
        assert!(line.contains(state), "{name} ends {state}: {line:?}");
    }
    assert!(
        text.contains("blocked") && text.contains("stalled"),
        "the story shows a block and a stall"
    );
    assert!(text.contains("colibrid stopped (exit status: 0)"), "{text}");
}

#[test]
fn a_jail_socket_sees_and_feeds_only_its_own_jails_panes() {
    let (_jail_dir, jail_sock, arg) = jail_socket();
    let mut d = Colibrid::start(&["--jail-socket", &arg]);
    let host = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 30",
        ],
        json!({}),
    );
    d.wait_state(&host, "working");
    recover_jailed_pane(&mut d, &[JAILED_AGENT_START]);
    let mut c = Client::connect_jailed(&jail_sock);
    let snap = c.request(&json!({"cmd":"glasspane-snapshot"}));
    let panes = snap["data"]["panes"].as_array().expect("panes");
    assert_eq!(panes.len(), 1, "only its own jail's pane: {snap}");
    assert_eq!(panes[0]["id"], json!(JAILED_PANE));
    let v2 = c.request(&json!({"cmd":"snapshot","schema":"v2"}));
    assert_eq!(v2["data"]["panes"][0]["jail"], json!("agents1"));
    let who = c.request(&json!({"cmd":"whoami"}));
    assert_eq!(who["data"]["panes"], json!([JAILED_PANE]));
    let e = c.request(&json!({"cmd":"emit","agent_id":"inside","event":{"type":"turn_start"}}));
    assert_eq!(e["ok"], json!(true), "{e}");
    let e = c.request(&json!({"cmd":"emit","agent_id": host, "event":{"type":"turn_start"}}));
    assert_eq!(e["ok"], json!(false), "another pane is invisible: {e}");
    let mut w = Client::connect_jailed(&jail_sock);
    let watch = w.request(&json!({"cmd":"watch"}));
    assert_eq!(watch["ok"], json!(true), "{watch}");
    d.ok(json!({"cmd":"emit","agent_id": host, "event":{"type":"turn_start"}}));
    c.request(&json!({"cmd":"emit","agent_id":"inside","event":{"type":"session","id":"s2"}}));
    let ev = w.read_line().expect("event");
    assert_eq!(
        ev["pane"],
        json!(JAILED_PANE),
        "the host pane's events are not shown: {ev}"
    );
}

#[test]
fn colibri_hook_forwards_claude_hook_input_for_its_pane() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"runtime":"claude"}));
    let mut hook = Command::new(COLIBRI)
        .args(["hook", "Notification"])
        .env("COLIBRI_SOCKET", &d.socket)
        .env("COLIBRI_PANE_ID", &id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hook");
    {
        use std::io::Write;
        let mut stdin = hook.stdin.take().expect("stdin");
        stdin
            .write_all(br#"{"session_id":"s1","cwd":"/w","hook_event_name":"Notification","message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"}"#)
            .expect("write");
    }
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "a hook prints nothing on stdout");
    let p = d.wait_state(&id, "blocked");
    assert_eq!(
        p["blocked_reason"],
        json!("Claude needs your permission to use Bash")
    );
    // Without a reachable daemon the hook still exits 0: it must never
    // disturb the agent it runs for.
    let out = Command::new(COLIBRI)
        .args(["hook", "Stop"])
        .env("COLIBRI_SOCKET", d.path("nowhere.sock"))
        .env("COLIBRI_PANE_ID", &id)
        .stdin(Stdio::null())
        .output()
        .expect("hook");
    assert!(out.status.success());
}

/// Kept v2 snapshot texts (`daemon::pane_text`) follow the clock (a pane
/// passing its stall deadline between two snapshots) and a reload of the
/// default stall threshold; in debug builds the daemon checks each kept
/// write against a fresh one, so every snapshot here is checked.
#[test]
fn kept_snapshot_texts_follow_the_clock_and_a_reloaded_stall_threshold() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.relaunch_with_config("reload.toml", "[daemon]\nstall_after = \"10m\"\n");
    let body = r#"printf '%s\n' '{"type":"agent_start"}'; sleep 60"#;
    let a = d.spawn(&["/bin/sh", "-c", body], json!({"runtime":"pi"}));
    let b = d.spawn(
        &["/bin/sh", "-c", body],
        json!({"runtime":"pi","stall_after":"700ms"}),
    );
    d.wait_state(&a, "working");
    d.wait_state(&b, "working");
    assert_eq!(d.pane(&a)["stall_after_ms"], json!(600_000));
    // Snapshots back to back across b's deadline.
    let snapshots_for_a_while = |d: &Colibrid| {
        let until = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < until {
            let _ = d.snapshot();
        }
    };
    snapshots_for_a_while(&d);
    assert_eq!(d.pane(&b)["stalled"], json!(true));
    std::fs::write(&cfg, "[daemon]\nstall_after = \"1s\"\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(10));
    let pa = d.pane(&a);
    assert_eq!(pa["stall_after_ms"], json!(1000), "{pa}");
    snapshots_for_a_while(&d);
    assert_eq!(d.pane(&a)["stalled"], json!(true));
    std::fs::write(&cfg, "[daemon]\nstall_after = \"10m\"\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(10));
    let pa = d.pane(&a);
    assert_eq!(pa["stalled"], json!(false), "{pa}");
    assert_eq!(d.ok(json!({"cmd":"status"}))["reloads"], json!(2));
}

/// U+009B is a one-byte CSI to many terminals even when it arrives UTF-8
/// encoded; JSON encoders leave it raw inside strings. Every output of the
/// CLI that carries agent text, JSON included, shows it escaped, and the
/// JSON still reads back to the agent's exact text.
#[test]
fn c1_controls_from_an_agent_never_reach_the_terminal_raw() {
    let d = Colibrid::start(&[]);
    let evil = "x\u{9b}2J\u{202e}gnp.exe\u{7f}";
    let line = json!({"type": "session", "id": "c1", "cwd": format!("/{evil}")}).to_string();
    let file = d.path("c1.jsonl");
    std::fs::write(&file, format!("{line}\n")).expect("write line");
    let id = d.spawn(
        &["/bin/sh", "-c", &format!("cat {}", file.display())],
        json!({"session_id": "c1", "runtime": "pi", "name": "c1"}),
    );
    d.wait_pane(&id, "the agent's exit", |p| !p["exit"].is_null());
    let raw_c1 = |o: &Output| o.stdout.windows(2).any(|w| w == [0xc2, 0x9b]);
    let o = colibri(&d, &["session", "c1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!raw_c1(&o), "colibri session printed a raw CSI");
    let shown: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let rec = shown["records"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["ev"]["type"] == json!("session")))
        .expect("the session line");
    assert_eq!(rec["ev"]["cwd"], json!(format!("/{evil}")));
    for args in [
        &["snapshot", "--json", "--schema", "v2"][..],
        &["snapshot", "--schema", "v2"][..],
        &["sessions"][..],
        &["sessions", "--json"][..],
    ] {
        let o = colibri(&d, args);
        assert!(o.status.success(), "{args:?}");
        assert!(!raw_c1(&o), "{args:?} printed a raw CSI: {}", stdout(&o));
    }
}

/// The demo ended by SIGTERM or by its terminal closing (SIGHUP) stops its
/// private colibrid and the agents under it and removes its scratch
/// directory, as Ctrl-C does; before, both signals killed the demo and
/// left all three behind.
#[test]
fn the_demo_cleans_up_when_ended_by_sigterm_or_sighup() {
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGHUP, "HUP")] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut demo = Command::new(COLIBRI)
            .args(["demo", "--speed", "0.2"])
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run demo");
        let pid = i32::try_from(demo.id()).expect("pid");
        // Running: its colibrid is up with agents under it.
        let daemon = wait_for(Duration::from_secs(60), "the demo's colibrid", || {
            children_of(pid)
                .into_iter()
                .find(|&c| !children_of(c).is_empty())
        });
        let agents = children_of(daemon);
        let scratch: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("tmp")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(scratch.len(), 1, "one scratch directory: {scratch:?}");
        // SAFETY: a plain kill(2) of the child this test spawned.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill -{name}");
        let status = wait_for(Duration::from_secs(60), "the demo to end", || {
            demo.try_wait().expect("wait")
        });
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            None,
            "SIG{name} killed the demo before it could clean up"
        );
        wait_for(
            Duration::from_secs(30),
            &format!("colibrid and its agents gone after SIG{name}"),
            || (!pid_alive(daemon) && agents.iter().all(|&a| !pid_alive(a))).then_some(()),
        );
        assert!(
            !scratch[0].exists(),
            "SIG{name} left {}",
            scratch[0].display()
        );
    }
}

/// `colibri fold --config` governs with the file's budgets, so a budget's
/// pause is replayed like the guard's: the sample's first message (5,394
/// tokens, cache reads aside) trips a 5,000-token budget at its line.
#[test]
fn fold_with_a_config_shows_budget_pauses_like_guard_pauses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("colibri.toml");
    std::fs::write(&config, "[budgets.tight]\ntokens = 5000\nwindow = \"1h\"\n").expect("config");
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/pi-success.jsonl");
    let fold = |extra: &[&str]| {
        let o = Command::new(COLIBRI)
            .arg("fold")
            .arg("--json")
            .args(extra)
            .arg(&sample)
            .output()
            .expect("fold");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).expect("report")
    };
    let plain = fold(&[]);
    let budget_verdicts = |r: &Value| -> Vec<Value> {
        r["verdicts"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter(|v| v["policy"] == json!("budget"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(budget_verdicts(&plain).is_empty(), "{plain}");
    let governed = fold(&["--config", &config.display().to_string()]);
    let paused = budget_verdicts(&governed)
        .into_iter()
        .find(|v| v["action"] == json!("pause"))
        .unwrap_or_else(|| panic!("no budget pause: {governed}"));
    assert_eq!(paused["rule"], json!("tight"), "{paused}");
    assert_eq!(paused["line"], json!(7), "the first message_end: {paused}");
    // The human text names it as it names a guard pause.
    let o = Command::new(COLIBRI)
        .args(["fold", "--config", &config.display().to_string()])
        .arg(&sample)
        .output()
        .expect("fold");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("budget pause (tight)"), "{text}");
}
