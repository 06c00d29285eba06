//! The supervisor: declared agents, reload, stop/start/restart/remove,
//! planned stops that raise no alert, resume after colibrid restarts, given
//! up panes, and ids by unique prefix.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use colibri::core::spec::{AgentRecord, AgentSpec, Wanted};
use colibri::daemon::{write_records, RECORDS_FILE};

use crate::support::{pid_alive, sessions_hold_pane, wait_for, Colibrid, SyslogSink};

fn running(p: &Value) -> bool {
    p["supervision"]["actual"] == json!("running") && p["pid"].is_i64()
}

/// A colibrid (not yet started) reading `config` from its temp dir.
fn with_config(config: &str, extra: &[&str]) -> Colibrid {
    let mut d = Colibrid::start(extra);
    let cfg = d.path("colibri.toml");
    std::fs::write(&cfg, config).expect("config");
    d.terminate();
    d.args.push("--config".into());
    d.args.push(cfg.display().to_string());
    d
}

fn hup(d: &Colibrid) {
    d.hup_and_wait("reloads", Duration::from_secs(10));
}

fn agent_table(name: &str, argv: &[&str], rest: &str) -> String {
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!("[agents.{name}]\nargv = [{}]\n{rest}\n", argv.join(", "))
}

#[test]
fn declared_agents_start_at_startup_and_a_reload_adds_removes_changes_and_leaves_alone() {
    let mut d = with_config("", &[]);
    let sleeper = d.script("sleeper.sh", "exec sleep 600");
    let config = [
        agent_table("alpha", &[&sleeper], "restart = \"always\""),
        agent_table("bravo", &[&sleeper, "one"], ""),
        agent_table("charlie", &[&sleeper], ""),
        agent_table("quiet", &[&sleeper], "autostart = false"),
    ]
    .concat();
    std::fs::write(d.path("colibri.toml"), &config).expect("config");
    d.launch();
    for name in ["alpha", "bravo", "charlie"] {
        let p = d.wait_named(name, &format!("{name} running"), running);
        assert_eq!(p["supervision"]["declared"], json!(true), "{p}");
        assert_eq!(p["supervision"]["wanted"], json!("up"), "{p}");
    }
    let quiet = d.named("quiet");
    assert_eq!(quiet["supervision"]["wanted"], json!("down"), "{quiet}");
    assert_eq!(quiet["supervision"]["stopped_by"], json!("no-autostart"));
    assert!(quiet["pid"].is_null(), "{quiet}");

    let bravo_pid = d.named("bravo")["pid"].clone();
    let charlie = d.named("charlie");
    // alpha leaves, bravo's launch changes, charlie stays, delta arrives.
    let config = [
        agent_table("bravo", &[&sleeper, "two"], ""),
        agent_table("charlie", &[&sleeper], ""),
        agent_table("delta", &[&sleeper], ""),
        agent_table("quiet", &[&sleeper], "autostart = false"),
    ]
    .concat();
    std::fs::write(d.path("colibri.toml"), &config).expect("config");
    hup(&d);
    let alpha = d.wait_named("alpha", "alpha stopped", |p| {
        p["supervision"]["actual"] == json!("stopped")
    });
    assert_eq!(
        alpha["supervision"]["stopped_by"],
        json!("removed"),
        "{alpha}"
    );
    d.wait_named("bravo", "bravo restarted", |p| {
        running(p) && p["pid"] != bravo_pid
    });
    d.wait_named("delta", "delta running", running);
    let now = d.named("charlie");
    assert_eq!(
        (&now["pid"], &now["generation"]),
        (&charlie["pid"], &charlie["generation"]),
        "charlie was left alone"
    );
}

#[test]
fn an_always_agent_comes_back_resumed_after_sigterm_and_after_sigkill() {
    let mut d = with_config("", &[]);
    let log = d.path("argv.log");
    let agent = d.script(
        "resumable.sh",
        &format!(
            "echo \"run $*\" >> {}\necho '{{\"type\":\"session\",\"id\":\"sess-42\",\"cwd\":\"/tmp\"}}'\nexec sleep 600",
            log.display()
        ),
    );
    let config = agent_table(
        "keeper",
        &[&agent],
        "runtime = \"pi\"\nrestart = \"always\"\nstall_after = \"7m\"\nresume = [\"{argv}\", \"--session\", \"{session}\"]",
    );
    std::fs::write(d.path("colibri.toml"), config).expect("config");
    d.launch();
    let first = d.wait_named("keeper", "keeper's session", |p| {
        running(p) && p["session_id"] == json!("sess-42")
    });
    let id = first["id"].clone();

    // An orderly stop, then a start: resumed in its own session.
    assert!(d.terminate().success());
    d.launch();
    let p = d.wait_named("keeper", "keeper back after SIGTERM", running);
    assert_eq!(p["id"], id, "the same pane");
    assert!(
        p["exit"].is_null(),
        "the last run's end is not this run's: {p}"
    );
    assert_ne!(p["state"], json!("error"), "{p}");
    assert_eq!(
        p["stall_after_ms"],
        json!(420_000),
        "its declared stall_after: {p}"
    );
    let runs = |n: usize| {
        wait_for(Duration::from_secs(30), "the agent's runs", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            (lines.len() >= n).then_some(lines)
        })
    };
    assert_eq!(runs(2)[1], "run --session sess-42");
    d.wait_named("keeper", "keeper's session again", |p| {
        p["session_id"] == json!("sess-42")
    });

    // A crash of colibrid, then a start: resumed as well, from what the
    // records file held (written off the loop: wait until it is there).
    let records = d.state.join(RECORDS_FILE);
    wait_for(
        Duration::from_secs(30),
        "the session in the records",
        || {
            let text = std::fs::read_to_string(&records).unwrap_or_default();
            (text.contains("sess-42") && text.contains("\"wanted\":\"up\"")).then_some(())
        },
    );
    d.crash();
    d.launch();
    let p = d.wait_named("keeper", "keeper back after SIGKILL", running);
    assert_eq!(p["id"], id);
    assert_eq!(runs(3)[2], "run --session sess-42");
}

#[test]
fn a_planned_stop_raises_no_alert_while_a_crash_does_and_remove_frees_the_name() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let mut d = with_config("", &[&arg]);
    let sleeper = d.script("sleeper.sh", "exec sleep 600");
    std::fs::write(
        d.path("colibri.toml"),
        agent_table("calm", &[&sleeper], "restart = \"always\""),
    )
    .expect("config");
    d.launch();
    let calm = d.wait_named("calm", "calm running", running);
    let calm_id = calm["id"].as_str().expect("id").to_string();

    let r = d.ok(json!({"cmd":"stop-agent","agent_id":"calm"}));
    assert_eq!(r["status"], json!("stopping"), "{r}");
    let p = d.wait_named("calm", "calm stopped", |p| {
        p["supervision"]["actual"] == json!("stopped")
    });
    assert_eq!(p["supervision"]["wanted"], json!("down"));
    assert!(
        p["supervision"]["stopped_by"]
            .as_str()
            .is_some_and(|s| s.starts_with("operator")),
        "{p}"
    );
    // The v1 snapshot keeps the contract's states: a planned stop is done.
    let v1 = d.ok(json!({"cmd":"snapshot"}));
    let v1_calm = v1["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == json!(calm_id)).cloned())
        .expect("calm in v1");
    assert_eq!(v1_calm["state"], json!("done"), "{v1_calm}");

    // A crash alerts; the stop before it did not (datagrams arrive in order).
    let crasher = d.spawn(&["/bin/sh", "-c", "exit 3"], json!({"name":"crasher"}));
    let mut seen = Vec::new();
    sink.wait_for(&format!("pane={crasher}"), &mut seen);
    let about_calm: Vec<&String> = seen.iter().filter(|m| m.contains(&calm_id)).collect();
    assert!(
        about_calm.is_empty(),
        "a planned stop alerted: {about_calm:?}"
    );

    // `colibri start` brings it back; stop again, then remove frees the name.
    let out = std::process::Command::new(crate::support::COLIBRI)
        .args(["start", &calm_id[..8]])
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("colibri start");
    assert!(out.status.success(), "{out:?}");
    d.wait_named("calm", "calm started again", running);
    let e = d.request(json!({"cmd":"remove-agent","agent_id":"calm"}));
    assert_eq!(e["ok"], json!(false), "a running agent is not removed: {e}");
    d.ok(json!({"cmd":"stop-agent","agent_id":"calm"}));
    d.wait_named("calm", "calm stopped again", |p| {
        p["supervision"]["actual"] == json!("stopped")
    });
    let r = d.ok(json!({"cmd":"remove-agent","agent_id":"calm"}));
    assert_eq!(r["status"], json!("removed"));
    assert!(d.named("calm").is_null());
    let again = d.spawn(&[&sleeper], json!({"name":"calm"}));
    assert_ne!(again, calm_id);
    // Its session logs stay.
    assert!(
        sessions_hold_pane(&d, &calm_id),
        "no session holds {calm_id}"
    );
    // A pane removed stays removed when colibrid starts again from the
    // same logs (it came back, holding its name, before the removal was
    // recorded), and the name still belongs to the new pane alone.
    d.ok(json!({"cmd":"kill-agent","agent_id": again}));
    d.wait_pane(&again, "the new calm to end", |p| !p["exit"].is_null());
    d.ok(json!({"cmd":"remove-agent","agent_id": again}));
    assert!(d.terminate().success(), "colibrid stops cleanly");
    d.launch();
    assert!(d.pane(&calm_id).is_null(), "the removed pane came back");
    assert!(d.pane(&again).is_null(), "the removed pane came back");
    // `calm` is still declared: the name is its new pane's alone.
    let declared = d.wait_named("calm", "the declared calm to start", running);
    let id = declared["id"].as_str().unwrap_or_default();
    assert!(id != calm_id && id != again, "{declared}");
    drop(d);
}

#[test]
fn a_pane_whose_restarts_are_exhausted_is_given_up_and_alerted() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let mut d = with_config("", &[&arg]);
    std::fs::write(
        d.path("colibri.toml"),
        [
            // Every failure alerts; none may be rate-limited away here.
            "[syslog]\nrate_burst = 100\n".to_string(),
            agent_table(
                "flaky",
                &["/bin/sh", "-c", "exit 1"],
                "restart = \"always\"\nmax_restarts = 2\nbackoff = [\"50ms\"]",
            ),
        ]
        .concat(),
    )
    .expect("config");
    d.launch();
    let p = d.wait_named("flaky", "flaky given up", |p| {
        p["supervision"]["actual"] == json!("given-up")
    });
    assert_eq!(p["supervision"]["wanted"], json!("up"), "{p}");
    let mut seen = Vec::new();
    let m = sink.wait_for("restarts_exhausted", &mut seen);
    assert!(m.contains("name=flaky"), "{m}");
    // v1 shows a given-up pane as an error.
    let v1 = d.ok(json!({"cmd":"snapshot"}));
    let state = v1["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|x| x["id"] == p["id"]))
        .map(|x| x["state"].clone());
    assert_eq!(state, Some(json!("error")));
}

fn record(name: &str, argv: &str, pane_id: &str) -> (bool, AgentRecord) {
    (
        true,
        AgentRecord {
            spec: AgentSpec::new(name, vec![argv.to_string()]),
            wanted: Wanted::Up,
            pane_id: Some(pane_id.to_string()),
            harness_session: None,
            escalation: 0,
        },
    )
}

#[test]
fn ids_resolve_by_unique_prefix_and_an_ambiguous_prefix_lists_the_candidates() {
    let mut d = with_config("", &[]);
    let sleeper = d.script("sleeper.sh", "exec sleep 600");
    let config = [
        agent_table("left", &[&sleeper], ""),
        agent_table("right", &[&sleeper], ""),
    ]
    .concat();
    std::fs::write(d.path("colibri.toml"), config).expect("config");
    // Records from a "previous run" give the panes ids sharing a prefix.
    let left = "abcd1111-0000-4000-8000-000000000001";
    let right = "abcd2222-0000-4000-8000-000000000002";
    std::fs::create_dir_all(&d.state).expect("state dir");
    write_records(
        &Path::new(&d.state).join(RECORDS_FILE),
        &[
            record("left", &sleeper, left),
            record("right", &sleeper, right),
        ],
    )
    .expect("records");
    d.launch();
    d.wait_named("left", "left running", running);
    d.wait_named("right", "right running", running);
    assert_eq!(d.named("left")["id"], json!(left));

    let e = d.request(json!({"cmd":"pause-agent","agent_id":"abcd"}));
    assert_eq!(e["code"], json!("ambiguous"), "{e}");
    let msg = e["error"].as_str().unwrap_or_default();
    assert!(msg.contains(left) && msg.contains(right), "{msg}");
    let r = d.ok(json!({"cmd":"pause-agent","agent_id":"ABCD2"}));
    assert_eq!(r["agent_id"], json!(right));
    let e = d.request(json!({"cmd":"pause-agent","agent_id":"abc"}));
    assert_eq!(
        e["code"],
        json!("not_found"),
        "three characters are too few: {e}"
    );
    let r = d.ok(json!({"cmd":"restart-agent","agent_id":"abcd1"}));
    assert_eq!(r["agent_id"], json!(left));
}

#[test]
fn a_named_spawned_agent_with_a_policy_comes_back_after_colibrid_restarts() {
    let mut d = Colibrid::start(&[]);
    let sleeper = d.script("sleeper.sh", "exec sleep 600");
    let kept = d.spawn(&[&sleeper], json!({"name":"kept","restart":"always"}));
    let lost = d.spawn(&[&sleeper], json!({"name":"lost"}));
    d.wait_pane(&kept, "kept running", running);
    d.wait_pane(&lost, "lost running", running);
    assert!(d.terminate().success());
    d.launch();
    let p = d.wait_pane(&kept, "kept back", running);
    assert_eq!(p["supervision"]["declared"], json!(false), "{p}");
    // A new run in the old pane: nothing of the last run's end is shown
    // as the running agent's.
    assert!(p["exit"].is_null(), "{p}");
    assert!(p["last_error"].is_null(), "{p}");
    assert_ne!(p["state"], json!("error"), "{p}");
    // A `never` policy does not come back: its pane is history.
    let l = d.pane(&lost);
    assert!(l["pid"].is_null(), "{l}");
}

#[test]
fn finished_panes_older_than_retain_finished_leave_the_snapshot_and_declared_ones_stay() {
    let mut d = with_config("", &["--heartbeat", "200ms"]);
    std::fs::write(
        d.path("colibri.toml"),
        [
            // Scaled: under emulation an exec can outlast 300 ms, and a
            // leftover caught mid-exec shows no environment to match.
            format!(
                "[daemon]\nretain_finished = \"{}ms\"\n",
                crate::support::scaled(Duration::from_millis(300)).as_millis()
            ),
            agent_table("resident", &["/bin/sh", "-c", "exit 0"], ""),
        ]
        .concat(),
    )
    .expect("config");
    d.launch();
    let gone = d.spawn(&["/bin/sh", "-c", "exit 0"], json!({"name":"passing"}));
    // One that leaves a process running: it goes with its pane (the
    // review: retirement removed panes without it, leaving it nameless).
    let pidfile = d.path("left.pid");
    let script = format!(
        "{s} /bin/sh -c 'echo $$ > {f}; exec sleep 1000' & \
         while [ ! -s {f} ]; do sleep 0.05; done; exit 0",
        s = crate::support::setsid(),
        f = pidfile.display()
    );
    let leaver = d.spawn(&["/bin/sh", "-c", &script], json!({"name":"leaver"}));
    let left: i32 = wait_for(Duration::from_secs(20), "the leftover's pid", || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    });
    wait_for(
        Duration::from_secs(30),
        "the finished pane to leave",
        || d.pane(&gone).is_null().then_some(()),
    );
    wait_for(
        Duration::from_secs(30),
        "the leaver's pane to leave, and its leftover with it",
        || (d.pane(&leaver).is_null() && !pid_alive(left)).then_some(()),
    );
    let resident = d.named("resident");
    assert_eq!(
        resident["supervision"]["actual"],
        json!("exited"),
        "{resident}"
    );
    // Its session log stays.
    assert!(sessions_hold_pane(&d, &gone), "no session holds {gone}");
    // Retired is removed: a restart of colibrid does not bring it back.
    assert!(d.terminate().success(), "colibrid stops cleanly");
    d.launch();
    assert!(d.pane(&gone).is_null(), "a retired pane came back");
    assert!(d.pane(&leaver).is_null(), "a retired pane came back");
    d.spawn(&["/bin/sh", "-c", "exit 0"], json!({"name":"passing"}));
}

#[test]
fn stop_agent_kills_an_agent_that_ignores_sigterm_after_the_grace() {
    let mut d = with_config("", &[]);
    let stubborn = d.script(
        "stubborn.sh",
        "trap '' TERM\necho trapped\nwhile :; do sleep 1; done",
    );
    std::fs::write(
        d.path("colibri.toml"),
        [
            "[daemon]\nshutdown_grace = \"300ms\"\n".to_string(),
            agent_table("stubborn", &[&stubborn], ""),
        ]
        .concat(),
    )
    .expect("config");
    d.launch();
    // Only once its trap is set does SIGTERM leave it running.
    d.wait_named("stubborn", "stubborn's trap", |p| {
        running(p) && p["counters"]["bytes"].as_u64().is_some_and(|b| b > 0)
    });
    d.ok(json!({"cmd":"stop-agent","agent_id":"stubborn"}));
    let p = d.wait_named("stubborn", "stubborn stopped", |p| {
        p["supervision"]["actual"] == json!("stopped")
    });
    assert_eq!(p["exit"]["signal"], json!(9), "{p}");
}

/// A declared agent that names no runtime: the runtime detected from its
/// output is told in a `runtime` event after every start of colibrid, not
/// only the first. Its pane, recovered from the log at the next start,
/// was taken as told already, while its new run's `attached` names none:
/// notify's `runtimes` filters and the board lost it for good.
#[test]
fn a_declared_agents_detected_runtime_is_told_again_after_colibrid_restarts() {
    let mut d = with_config("", &[]);
    let go = d.path("go");
    let agent = d.script(
        "pi-like.sh",
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done\necho '{{\"type\":\"session\",\"version\":3,\"id\":\"s-1\",\"cwd\":\"/tmp\"}}'\nexec sleep 600",
            go.display()
        ),
    );
    std::fs::write(d.path("colibri.toml"), agent_table("finder", &[&agent], "")).expect("config");
    for run in 0..2 {
        let _ = std::fs::remove_file(&go);
        d.launch();
        let id = d.wait_named("finder", "finder running", running)["id"].clone();
        let mut w = d.client();
        assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
        std::fs::write(&go, "").expect("go");
        loop {
            let ev = w
                .read_line()
                .unwrap_or_else(|| panic!("no runtime event in run {run}"));
            if ev["event"] == json!("runtime") {
                assert_eq!((&ev["pane"], &ev["runtime"]), (&id, &json!("pi")), "{ev}");
                break;
            }
        }
        assert!(d.terminate().success());
    }
}

/// A declared agent that could not start ran nothing, so the next
/// colibrid has no lost agent to announce or alert: the failed start is
/// logged as its run's end, as a failed `spawn-agent` is (before, every
/// orderly restart announced it `error`, "the agent was lost").
#[test]
fn a_declared_agent_that_failed_to_start_is_not_announced_lost_after_a_restart() {
    let mut d = with_config(
        &agent_table("broken", &["no-such-program-colibri-test"], ""),
        &[],
    );
    d.launch();
    d.wait_named("broken", "broken's start failed", |p| {
        p["state"] == json!("error")
    });
    let seq = d.client().request(&json!({"cmd":"watch"}))["data"]["seq"].clone();
    assert!(d.terminate().success());
    d.launch();
    d.wait_named("broken", "broken's start failed again", |p| {
        p["state"] == json!("error")
    });
    let mut w = d.client();
    let reply = w.request(&json!({"cmd":"watch","since": seq}));
    assert_eq!(reply["ok"], json!(true), "{reply}");
    w.reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    while let Some(ev) = w.read_line() {
        let reason = ev["reason"].as_str().unwrap_or_default();
        assert!(!reason.contains("lost"), "announced lost: {ev}");
    }
}
