//! Nothing lost: every line in its session log, recovery after SIGKILL,
//! syslog alerts, configuration errors.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

/// Every complete line of a session log, parsed. A crash (SIGKILL) can cut
/// the writer's last `write` short: a torn last line, without its newline,
/// is what the store's invariant allows (and repairs at the next start),
/// so it is left out; any other line that does not parse fails the test.
fn log_lines(d: &Colibrid, session: &str) -> Vec<Value> {
    let path = d.state.join("sessions").join(format!("{session}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l:?}: {e}")))
        .collect()
}

#[test]
fn every_line_is_logged_with_its_arrival_time() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "echo '{\"type\":\"agent_start\"}'; echo garbage; echo '{\"type\":\"agent_end\",\"messages\":[]}'"],
        json!({"session_id":"log-1"}),
    );
    d.wait_state(&id, "done");
    // `done` comes with the agent's last line, before its exit: the exit
    // record follows once the process has been reaped.
    let lines = wait_for(Duration::from_secs(10), "the exit record", || {
        let lines = log_lines(&d, "log-1");
        lines
            .iter()
            .any(|l| l["colibri"] == json!("exit"))
            .then_some(lines)
    });
    // The runtime was detected from the stream and reaches the session index.
    let sessions = d.ok(json!({"cmd":"list-sessions"}));
    assert_eq!(sessions[0]["runtime"], json!("pi"), "{sessions}");
    let evs: Vec<&Value> = lines.iter().filter(|l| l.get("ev").is_some()).collect();
    assert_eq!(evs.len(), 2, "{lines:?}");
    assert_eq!(evs[0]["ev"], json!({"type":"agent_start"}));
    assert!(lines.iter().any(|l| l["raw"] == json!("garbage")));
    assert!(lines
        .iter()
        .all(|l| l["ts"].as_str().is_some_and(|s| s.ends_with('Z'))));
    assert!(lines.iter().any(|l| l["colibri"] == json!("attach")));
    assert!(lines
        .iter()
        .any(|l| l["colibri"] == json!("exit") && l["code"] == json!(0)));
    // Folding the log offline gives what the daemon computed live.
    let path = d.state.join("sessions").join("log-1.jsonl");
    let out = std::process::Command::new(COLIBRI)
        .arg("fold")
        .arg("--json")
        .arg(&path)
        .output()
        .expect("fold");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("fold json");
    let live = d.pane(&id);
    assert_eq!(report["state"], live["state"]);
    assert_eq!(report["counters"]["events"], live["counters"]["events"]);
    assert_eq!(
        report["counters"]["malformed"],
        live["counters"]["malformed"]
    );
    assert_eq!(report["exit"], live["exit"]);
}

#[test]
fn sigkill_of_the_daemon_loses_no_reported_line_and_recovery_fails_the_lost_agents() {
    let mut d = Colibrid::start(&[]);
    let n = 500;
    let body = format!("i=0; while [ $i -lt {n} ]; do echo \"{{\\\"type\\\":\\\"turn_start\\\",\\\"n\\\":$i}}\"; i=$((i+1)); done; sleep 300");
    let ids: Vec<String> = (0..3)
        .map(|i| {
            d.spawn(
                &["/bin/sh", "-c", &body],
                json!({"session_id": format!("crash-{i}"), "runtime":"pi"}),
            )
        })
        .collect();
    for id in &ids {
        d.wait_pane(id, "every line reported", |p| {
            p["counters"]["events"] == json!(n)
        });
    }
    d.crash();
    for i in 0..3 {
        let lines = log_lines(&d, &format!("crash-{i}"));
        let seen: Vec<u64> = lines.iter().filter_map(|l| l["ev"]["n"].as_u64()).collect();
        assert_eq!(
            seen,
            (0..n).collect::<Vec<u64>>(),
            "session crash-{i} holds every reported line in order"
        );
    }
    d.launch();
    let snap = d.snapshot();
    let panes = snap["panes"].as_array().expect("panes");
    assert_eq!(panes.len(), 3, "recovered from the logs");
    for p in panes {
        assert_eq!(p["state"], json!("error"));
        assert_eq!(p["counters"]["events"], json!(n), "refolded: {p}");
        assert!(
            p["last_error"].as_str().unwrap_or("").contains("lost"),
            "{p}"
        );
    }
    // A second restart does not fail them again or duplicate them.
    d.terminate();
    d.launch();
    assert_eq!(d.snapshot()["panes"].as_array().map(Vec::len), Some(3));
    let sessions = d.ok(json!({"cmd":"list-sessions"}));
    assert_eq!(sessions.as_array().map(Vec::len), Some(3));
}

#[test]
fn syslog_alerts_for_blocked_stalled_error_and_exit() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let d = Colibrid::start(&[&arg]);
    let mut seen = Vec::new();
    let id = d.spawn(
        &["/bin/sh", "-c", "echo '{\"type\":\"extension_ui_request\",\"id\":\"1\",\"method\":\"confirm\",\"title\":\"Delete build?\"}'; read x; echo '{\"type\":\"tool_execution_start\",\"toolName\":\"bash\",\"args\":{\"command\":\"ls\"}}'; read y; exit 4"],
        json!({"runtime":"pi","name":"worker","stall_after":"300ms"}),
    );
    let m = sink.wait_for(" blocked ", &mut seen);
    assert!(
        m.contains(&format!("pane={id}")) && m.contains("name=worker") && m.contains("runtime=pi"),
        "{m}"
    );
    assert!(m.contains("Delete build?"), "{m}");
    assert!(m.contains("colibri"), "{m}");
    sink.wait_for(" stalled ", &mut seen);
    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"y"}));
    sink.wait_for(" unstalled ", &mut seen);
    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"y"}));
    // One failure, one alert: the error state carries the exit.
    let e = sink.wait_for(" error ", &mut seen);
    assert!(e.contains("exit_code=4"), "{e}");
}

#[test]
fn check_config_names_the_file_line_and_key() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[daemon]\nheartbeat = \"30s\"\nstall_after = \"10x\"\n",
    )
    .expect("write");
    let out = std::process::Command::new(COLIBRID)
        .arg("--config")
        .arg(&cfg)
        .arg("--check-config")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains(":3") && err.contains("daemon.stall_after"),
        "{err}"
    );
    std::fs::write(&cfg, "[daemon]\nstall_after = \"90s\"\n").expect("write");
    let out = std::process::Command::new(COLIBRID)
        .arg("--config")
        .arg(&cfg)
        .arg("--check-config")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1m 30s")
            || String::from_utf8_lossy(&out.stdout).contains("90s")
    );
}

#[test]
fn no_reply_reports_a_line_before_its_log_holds_it() {
    // A small flush budget leaves the log behind during a burst; a reply to
    // `emit` (which reports the emitted line) must still wait for the log.
    let mut d = Colibrid::start(&[]);
    let cfg = d.path("small-flush.toml");
    std::fs::write(&cfg, "[sessions]\nflush_budget = 65536\n").expect("cfg");
    d.terminate();
    d.args = vec!["--config".into(), cfg.display().to_string()];
    d.launch();
    let id = d.spawn(
        &["/bin/sh", "-c", "yes '{\"type\":\"message_update\",\"assistantMessageEvent\":{\"type\":\"text_delta\",\"delta\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}' | head -n 200000; sleep 60"],
        json!({"session_id":"burst","runtime":"pi"}),
    );
    d.wait_pane(&id, "a burst under way", |p| {
        p["counters"]["events"].as_u64().unwrap_or(0) > 1000
    });
    let r = d.ok(json!({"cmd":"emit","agent_id": id, "event":{"type":"marker","n":42}}));
    assert_eq!(r["accepted"], json!(true));
    d.crash();
    let lines = log_lines(&d, "burst");
    assert!(
        lines
            .iter()
            .any(|l| l["ev"] == json!({"type":"marker","n":42})),
        "the emitted line is in the log once its reply was sent"
    );
}

#[test]
fn long_alert_values_are_cut_and_status_counts_them() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let d = Colibrid::start(&[&arg]);
    let mut seen = Vec::new();
    // A working directory of some 800 bytes: longer than an alert value may
    // be (512), within FreeBSD's PATH_MAX (1,024), so the cwd value is cut.
    let mut cwd = dir.path().to_path_buf();
    for i in 0..3 {
        cwd.push(format!("{i}{}", "d".repeat(249)));
    }
    std::fs::create_dir_all(&cwd).expect("long cwd");
    let line = r#"{"type":"extension_ui_request","id":"1","method":"confirm","title":"ok?"}"#;
    let script = format!("echo '{line}'; read x");
    d.spawn(
        &["/bin/sh", "-c", &script],
        json!({"runtime":"pi", "cwd": cwd.display().to_string()}),
    );
    let m = sink.wait_for(" blocked ", &mut seen);
    assert!(m.len() <= 2048, "{} bytes", m.len());
    let cut: usize = m
        .rsplit_once(" truncated=")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no truncated=N in {m}"));
    assert!(cut >= cwd.as_os_str().len() - 512, "cut {cut} of {m}");
    assert!(m.contains("…"), "{m}");
    let status = d.ok(json!({"cmd":"status"}));
    assert_eq!(status["alerts"]["truncated"], json!(1), "{status}");
    assert!(
        status["alerts"]["sent"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
}

/// `get-session`'s reply line, unparsed: a `Value` would refuse the very
/// records these tests are about.
fn get_session_raw(d: &Colibrid, session: &str) -> String {
    use std::io::BufRead as _;
    let mut c = d.client();
    c.send_raw(format!("{{\"cmd\":\"get-session\",\"session_id\":\"{session}\"}}\n").as_bytes());
    let mut line = String::new();
    c.reader.read_line(&mut line).expect("get-session reply");
    line
}

#[derive(serde::Deserialize)]
struct RawDump<'a> {
    ok: bool,
    #[serde(borrow)]
    data: RawDumpData<'a>,
}

#[derive(serde::Deserialize)]
struct RawDumpData<'a> {
    #[serde(borrow)]
    records: Vec<&'a serde_json::value::RawValue>,
    corrupt_lines: u64,
    #[serde(default)]
    log_replaced: u64,
}

/// The `ev` texts of a raw get-session reply, verbatim.
fn dumped_events(reply: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Rec<'a> {
        #[serde(borrow, default)]
        ev: Option<&'a serde_json::value::RawValue>,
    }
    let dump: RawDump<'_> = serde_json::from_str(reply).expect("reply parses as raw JSON");
    assert!(dump.ok, "{reply}");
    assert_eq!(dump.data.corrupt_lines, 0, "{reply}");
    dump.data
        .records
        .iter()
        .filter_map(|r| serde_json::from_str::<Rec<'_>>(r.get()).ok()?.ev)
        .map(|ev| ev.get().to_string())
        .collect()
}

#[test]
fn json_a_value_parser_refuses_is_logged_and_read_back_byte_exact() {
    let mut d = Colibrid::start(&[]);
    // As deep as an embedded line may be (a deeper one is logged as text:
    // `session_stream::a_line_nested_past_128_levels_is_logged_as_text_...`).
    let deep = format!(
        "{{\"type\":\"deep\",\"d\":{}1{}}}",
        "[".repeat(119),
        "]".repeat(119)
    );
    let lines = [
        deep.as_str(),
        r#"{"type":"message_update","n":1e400}"#,
        r#"{"type":"message_update","t":"\ud83d"}"#,
        r#"{"type":"message_update","t":"\udc00\ud83d tail"}"#,
    ];
    let file = d.path("hostile.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write lines");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!("cat {}; sleep 300", file.display()),
        ],
        json!({"session_id":"hostile","runtime":"pi"}),
    );
    let before = d.wait_pane(&id, "every line seen", |p| {
        p["counters"]["events"] == json!(lines.len())
    });
    assert_eq!(dumped_events(&get_session_raw(&d, "hostile")), lines);
    d.crash();
    d.launch();
    // Recovery reads the same bytes back and refolds them.
    assert_eq!(dumped_events(&get_session_raw(&d, "hostile")), lines);
    let after = d.pane(&id);
    assert_eq!(
        after["counters"]["events"], before["counters"]["events"],
        "{after}"
    );
    assert_eq!(after["counters"]["malformed"], json!(0), "{after}");
}

#[test]
fn a_session_log_deleted_under_the_daemon_is_restarted_counted_and_alerted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SyslogSink::bind(dir.path());
    let sock = format!("--syslog-socket={}", sink.path.display());
    let d = Colibrid::start(&[&sock]);
    let trigger = d.path("go");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "echo '{{\"type\":\"turn_start\"}}'; while [ ! -e {t} ]; do sleep 0.05; done; echo '{{\"type\":\"turn_end\"}}'; sleep 300",
                t = trigger.display()
            ),
        ],
        json!({"session_id":"deleted","runtime":"pi"}),
    );
    d.wait_pane(&id, "the first line", |p| {
        p["counters"]["events"] == json!(1)
    });
    let log = d.state.join("sessions").join("deleted.jsonl");
    wait_for(
        std::time::Duration::from_secs(20),
        "the first line on disk",
        || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|t| t.contains("turn_start"))
        },
    );
    std::fs::remove_file(&log).expect("delete the log");
    std::fs::write(&trigger, "").expect("trigger");
    d.wait_pane(&id, "the second line", |p| {
        p["counters"]["events"] == json!(2)
    });
    // `status` reports the writer's progress as it stands (it waits for no
    // writer): the replacement shows once the line's write found the log gone.
    let status = wait_for(
        std::time::Duration::from_secs(20),
        "the replaced log counted",
        || {
            let s = d.ok(json!({"cmd":"status"}));
            (s["logs"]["pending_bytes"] == json!(0)).then_some(s)
        },
    );
    assert_eq!(status["logs"]["replaced_logs"], json!(1), "{status}");
    let reply = get_session_raw(&d, "deleted");
    let dump: RawDump<'_> = serde_json::from_str(&reply).expect("reply");
    assert_eq!(dump.data.log_replaced, 1, "{reply}");
    assert!(reply.contains("\"colibri\":\"log_replaced\""), "{reply}");
    assert_eq!(dumped_events(&reply), [r#"{"type":"turn_end"}"#]);
    let text = std::fs::read_to_string(&log).expect("the log exists again");
    assert!(text.contains("turn_end"), "{text}");
    let mut seen = Vec::new();
    sink.wait_for("deleted or replaced", &mut seen);
}

#[test]
fn sigterm_with_an_unwritable_log_exits_non_zero_and_rescues_every_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let rescue_base = dir.path().join("tmp");
    std::fs::create_dir_all(state.join("sessions")).expect("mkdir");
    std::fs::create_dir_all(&rescue_base).expect("mkdir");
    // A directory where the session's log belongs: every write to it
    // fails, as on a read-only state dir, even for root.
    std::fs::create_dir(state.join("sessions").join("stuck.jsonl")).expect("block the log");
    let (daemon, mut c) = launch_with_env(dir.path(), &[("TMPDIR", &rescue_base)]);
    let r = c.request(&json!({"cmd":"spawn-agent","argv":["/bin/sh","-c","i=0; while [ $i -lt 50 ]; do echo \"{\\\"type\\\":\\\"turn_start\\\",\\\"n\\\":$i}\"; i=$((i+1)); done; sleep 300"],"session_id":"stuck","runtime":"pi"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    let id = r["data"]["agent_id"]
        .as_str()
        .expect("agent id")
        .to_string();
    wait_for(
        std::time::Duration::from_secs(20),
        "50 acknowledged lines",
        || {
            let snap = c.request(&json!({"cmd":"snapshot","schema":"v2"}));
            let panes = snap["data"]["panes"].as_array()?.clone();
            panes
                .iter()
                .find(|p| p["id"] == json!(id) && p["counters"]["events"] == json!(50))
                .map(|_| ())
        },
    );
    let status = c.request(&json!({"cmd":"status"}));
    let failed = status["data"]["logs"]["failed_writes"]
        .as_u64()
        .unwrap_or(0);
    // Retried at wakeups and heartbeats, not in a spin with the writer.
    assert!((1..200).contains(&failed), "{status}");
    drop(c);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = daemon
        .into_child()
        .wait_with_output()
        .expect("colibrid exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "exit 0 with unwritten records: {stderr}"
    );
    let rescued: Vec<std::path::PathBuf> = std::fs::read_dir(&rescue_base)
        .expect("rescue base")
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    assert_eq!(rescued.len(), 1, "{rescued:?} {stderr}");
    assert!(
        stderr.contains(&rescued[0].display().to_string()),
        "stderr names the rescue dir: {stderr}"
    );
    let text = std::fs::read_to_string(rescued[0].join("stuck.jsonl")).expect("rescued records");
    let seen: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a whole record"))
        .filter_map(|l| l["ev"]["n"].as_u64())
        .collect();
    assert_eq!(seen, (0..50).collect::<Vec<u64>>(), "{text}");
    assert!(text.contains("\"colibri\":\"attach\""));
}

/// colibrid on `dir/colibri.sock` and `dir/state` with extra environment
/// and its stderr captured; returns it (killed when dropped, so a failed
/// assertion does not leave it running) and a connected client.
fn launch_with_env(
    dir: &std::path::Path,
    env: &[(&str, &std::path::Path)],
) -> (KillOnDrop, Client) {
    launch_with_env_and_syslog(dir, env, None)
}

/// [`launch_with_env`], alerting to `syslog` (else `--no-syslog`).
fn launch_with_env_and_syslog(
    dir: &std::path::Path,
    env: &[(&str, &std::path::Path)],
    syslog: Option<&std::path::Path>,
) -> (KillOnDrop, Client) {
    use std::process::{Command, Stdio};
    let socket = dir.join("colibri.sock");
    let mut cmd = Command::new(COLIBRID);
    cmd.arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"));
    match syslog {
        Some(path) => cmd.arg(format!("--syslog-socket={}", path.display())),
        None => cmd.arg("--no-syslog"),
    };
    cmd.env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_CONFIG")
        .env("COLIBRI_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let daemon = KillOnDrop(Some(cmd.spawn().expect("start colibrid")));
    let c = wait_for(std::time::Duration::from_secs(20), "colibrid up", || {
        let mut c = Client::try_connect(&socket).ok()?;
        c.try_request(&json!({"cmd":"status"})).ok()?;
        Some(c)
    });
    (daemon, c)
}

/// Alerts are sent once the frames of their wakeup have left, and at the
/// latest 50 ms after they were raised: a log writer that never confirms
/// does not keep them back.
#[test]
fn alerts_reach_syslog_while_the_log_writer_is_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SyslogSink::bind(dir.path());
    let stall = dir.path().join("stall");
    let (_daemon, mut c) = launch_with_env_and_syslog(
        dir.path(),
        &[("COLIBRI_TEST_WRITER_STALL", &stall)],
        Some(&sink.path),
    );
    let limit = std::time::Duration::from_secs(10);
    // The writer freezes after the spawn's reply (which waits for the log)
    // and before the agent's exit.
    let id = spawned_id(
        &mut c,
        json!({"cmd":"spawn-agent","session_id":"frozen","argv":["/bin/sh","-c","sleep 0.3; exit 3"]}),
        limit,
    );
    std::fs::write(&stall, "").expect("freeze the log writer");
    let mut seen = Vec::new();
    let alert = sink.wait_for(" error ", &mut seen);
    assert!(
        alert.contains(&format!("pane={id}")) && alert.contains("exit_code=3"),
        "{alert}"
    );
    // Before the writer counts as stalled (1 s), when replies stop waiting
    // for it: the alert did not wait for that either.
    let status = answered_within(&mut c, json!({"cmd":"status"}), limit);
    assert!(
        !status["logs"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("stalled")),
        "{status}"
    );
    let log = dir.path().join("state/sessions/frozen.jsonl");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(r#""colibri":"exit""#),
        "the writer was still frozen when the alert came"
    );
    std::fs::remove_file(&stall).expect("thaw");
}

/// A colibrid killed and reaped however the test ends.
struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    /// The child, for a test that waits for it to end by itself.
    fn into_child(mut self) -> std::process::Child {
        self.0.take().expect("a child until taken")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `agent_id` of a `spawn-agent` answered within `limit`.
fn spawned_id(c: &mut Client, spawn: Value, limit: std::time::Duration) -> String {
    answered_within(c, spawn, limit)["agent_id"]
        .as_str()
        .expect("id")
        .to_string()
}

/// Sends one request and fails the test unless the reply comes within
/// `limit` (a loop blocked on the disk would not answer at all).
fn answered_within(c: &mut Client, req: Value, limit: std::time::Duration) -> Value {
    let t0 = std::time::Instant::now();
    let r = c.request(&req);
    assert!(t0.elapsed() < limit, "{req} took {:?}", t0.elapsed());
    assert_eq!(r["ok"], json!(true), "{r}");
    r["data"].clone()
}

#[test]
fn a_stuck_disk_leaves_status_snapshots_and_exits_live_and_loses_no_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stall = dir.path().join("stall");
    let (_daemon, mut c) = launch_with_env(dir.path(), &[("COLIBRI_TEST_WRITER_STALL", &stall)]);
    let limit = std::time::Duration::from_secs(10);
    std::fs::write(&stall, "").expect("freeze the log writer");
    let mut watch = Client::connect(&dir.path().join("colibri.sock"));
    assert_eq!(watch.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let n = 300;
    let streamer = spawned_id(
        &mut c,
        json!({"cmd":"spawn-agent","session_id":"frozen","runtime":"pi","argv":["/bin/sh","-c",
            format!("i=0; while [ $i -lt {n} ]; do echo \"{{\\\"type\\\":\\\"turn_start\\\",\\\"n\\\":$i}}\"; i=$((i+1)); done; sleep 300")]}),
        limit,
    );
    let quick = spawned_id(
        &mut c,
        json!({"cmd":"spawn-agent","session_id":"quick","argv":["/bin/sh","-c","exit 3"]}),
        limit,
    );
    // The exit event reaches the watcher while the disk is stuck.
    wait_for(std::time::Duration::from_secs(20), "the exit event", || {
        let ev = watch.read_line()?;
        (ev["event"] == json!("exited") && ev["pane"] == json!(quick)).then_some(())
    });
    let status = answered_within(&mut c, json!({"cmd":"status"}), limit);
    assert!(
        status["logs"]["pending_bytes"].as_u64() > Some(0),
        "lines stay buffered: {status}"
    );
    assert!(
        status["logs"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("stalled")),
        "{status}"
    );
    let snap = answered_within(&mut c, json!({"cmd":"snapshot","schema":"v2"}), limit);
    assert!(
        snap["panes"].as_array().is_some_and(|p| p.len() == 2),
        "{snap}"
    );
    let log = dir.path().join("state/sessions/frozen.jsonl");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("turn_start"),
        "nothing reached the frozen disk"
    );
    std::fs::remove_file(&stall).expect("thaw");
    let seen = wait_for(
        std::time::Duration::from_secs(30),
        "every line on disk",
        || {
            let text = std::fs::read_to_string(&log).ok()?;
            let seen: Vec<u64> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["ev"]["n"].as_u64())
                .collect();
            (seen.len() == n).then_some(seen)
        },
    );
    assert_eq!(seen, (0..n as u64).collect::<Vec<u64>>());
    let p = c.request(&json!({"cmd":"snapshot","schema":"v2"}));
    let events = p["data"]["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|x| x["id"] == json!(streamer)).cloned())
        .expect("streamer pane");
    assert_eq!(events["counters"]["events"], json!(n), "{events}");
}

#[test]
fn a_pi_dialog_whose_title_splits_an_emoji_blocks_and_is_logged_verbatim() {
    let d = Colibrid::start(&[]);
    let line = r#"{"type":"extension_ui_request","id":"1","method":"confirm","title":"Delete build/? \ud83d"}"#;
    let file = d.path("dialog.jsonl");
    std::fs::write(&file, format!("{line}\n")).expect("write line");
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!("cat {}; sleep 300", file.display()),
        ],
        json!({"session_id":"dialog","runtime":"pi"}),
    );
    let p = d.wait_state(&id, "blocked");
    assert!(
        p["blocked_reason"].as_str() == Some("Delete build/? \u{FFFD}"),
        "{p}"
    );
    assert_eq!(dumped_events(&get_session_raw(&d, "dialog")), [line]);
}

/// An agent lost with a crashed colibrid is announced by the next run: a
/// `state` event to `error` saying so, and its alert, so notify's sinks
/// and syslog hear of it (before, the snapshot alone showed it); a
/// restart after that announces nothing again.
#[test]
fn an_agent_lost_in_a_crash_is_announced_and_alerted_by_the_next_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SyslogSink::bind(dir.path());
    let syslog = format!("--syslog-socket={}", sink.path.display());
    let mut d = Colibrid::start(&[&syslog]);
    let id = d.spawn(
        &["/bin/sh", "-c", "echo hi; exec sleep 60"],
        json!({"name":"doomed"}),
    );
    d.wait_pane(&id, "the agent's first line", |p| {
        p["counters"]["bytes"].as_u64() > Some(0)
    });
    d.crash();
    d.launch();
    let mut seen = Vec::new();
    let alert = sink.wait_for(&format!("pane={id}"), &mut seen);
    assert!(
        alert.contains(" error ") && alert.contains("lost"),
        "{alert}"
    );
    let mut w = d.client();
    w.request(&json!({"cmd":"watch","since":0}));
    let ev = wait_for(
        std::time::Duration::from_secs(10),
        "the lost agent's state event",
        || {
            let ev = w.read_line()?;
            (ev["event"] == json!("state") && ev["pane"] == json!(id)).then_some(ev)
        },
    );
    assert_eq!(ev["to"], json!("error"), "{ev}");
    assert!(
        ev["reason"].as_str().unwrap_or_default().contains("lost"),
        "{ev}"
    );
    // Said once: an orderly restart finds the exit record and says nothing.
    let seq = d.client().request(&json!({"cmd":"watch"}))["data"]["seq"].clone();
    assert!(d.terminate().success());
    d.launch();
    let mut w = d.client();
    let reply = w.request(&json!({"cmd":"watch","since": seq}));
    assert_eq!(reply["ok"], json!(true), "{reply}");
    w.reader
        .get_ref()
        .set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .expect("timeout");
    while let Some(ev) = w.read_line() {
        assert!(
            !(ev["event"] == json!("state") && ev["pane"] == json!(id)),
            "announced again: {ev}"
        );
    }
}

/// An agent that ends while the log writer is stuck and its reads are held
/// still has its last lines read. FreeBSD's last close of a terminal waits
/// about a second for the master to read what is left, then discards it,
/// and the exit is reported only after that close; colibrid asks the kernel
/// whether a held agent is exiting and reads it on. (Linux keeps the bytes
/// until they are read, and reports the exit first.)
#[test]
fn an_agent_ending_while_its_reads_are_held_loses_no_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stall = dir.path().join("stall");
    let stall_env = stall.display().to_string();
    let d = Colibrid::start_with_env(&[], &[("COLIBRI_TEST_WRITER_STALL", &stall_env)]);
    let line = format!(r#"{{"type":"message_update","text":"{}"}}"#, "x".repeat(60));
    let marker = r#"{"type":"agent_end","messages":[],"marker":"last"}"#;
    // 15 KB (some 32 KB of log records) go into a batch the stuck writer
    // holds; of the next 40 KB, the read-ahead (64 KiB of records) takes
    // all but a few KB, which wait in the PTY with the last line when the
    // agent exits.
    let script = format!(
        "sleep {pause}; yes '{line}' | head -c 15000; echo; sleep {pause}; \
         yes '{line}' | head -c 40000; echo; sleep 2; echo '{marker}'; exit 0",
        pause = scaled(Duration::from_millis(1500)).as_secs_f64()
    );
    let id = d.spawn(
        &["/bin/sh", "-c", &script],
        json!({"session_id":"held", "runtime":"pi"}),
    );
    let pid = d.pane(&id)["pid"].as_i64().expect("a pid") as i32;
    std::fs::write(&stall, "").expect("freeze the log writer");
    wait_for(Duration::from_secs(30), "the reads to be held", || {
        let pending = d.ok(json!({"cmd":"status"}))["logs"]["pending_bytes"].as_u64()?;
        (pending >= 90 * 1024).then_some(())
    });
    wait_for(
        Duration::from_secs(30),
        "the agent to exit while the writer is stuck",
        || process(pid).is_none().then_some(()),
    );
    assert!(stall.exists(), "the writer was stuck throughout");
    std::fs::remove_file(&stall).expect("thaw");
    d.wait_state(&id, "done");
    let lines = wait_for(Duration::from_secs(20), "the exit record on disk", || {
        let lines = log_lines(&d, "held");
        lines
            .iter()
            .any(|l| l["colibri"] == json!("exit"))
            .then_some(lines)
    });
    assert!(
        lines.iter().any(|l| l["ev"]["marker"] == json!("last")),
        "the last line, written as the agent exited, is in the log ({} lines)",
        lines.len()
    );
}

/// A frozen state file system (`fsfreeze`; a stalled NFS server is the
/// same to colibrid) holds the log and journal writers, never the loop:
/// `status`, `snapshot` and a `watch` subscription answer within a few
/// milliseconds throughout a 10 s freeze while an agent keeps writing, and
/// what it wrote is all logged once the freeze ends. Before, every reply
/// waited for the log writer: 1 of 4 `status` answered within 2 s. Needs
/// root and a loop device (Linux); skipped with a message elsewhere.
#[test]
fn a_frozen_state_file_system_does_not_stall_the_answers() {
    let Some(fs) = FrozenFs::mount() else {
        return;
    };
    let d = Colibrid::start_with_state(&fs.mount.join("state"), &[]);
    // Dropped first, should an assertion fail while frozen: colibrid's
    // shutdown flush must find the file system thawed.
    let _thaw = Thaw(&fs);
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo \"{\\\"type\\\":\\\"tick\\\",\\\"n\\\":$i}\"; sleep 0.05; done; sleep 60",
        ],
        json!({"name":"ticker"}),
    );
    d.wait_pane(&id, "the first lines", |p| {
        p["counters"]["events"].as_u64() > Some(5)
    });
    fs.freeze();
    let mut worst = Duration::ZERO;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        for cmd in [
            json!({"cmd":"status"}),
            json!({"cmd":"snapshot","schema":"v2"}),
            json!({"cmd":"watch"}),
        ] {
            let asked = Instant::now();
            let mut c = Client::connect(&d.socket);
            let r = c.request(&cmd);
            worst = worst.max(asked.elapsed());
            assert_eq!(r["ok"], json!(true), "{cmd} during the freeze: {r}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let seen = d.pane(&id)["counters"]["events"].as_u64().unwrap_or(0);
    fs.thaw();
    eprintln!("frozen state fs: slowest answer {worst:?}; {seen} lines read meanwhile");
    assert!(
        worst < crate::support::scaled(Duration::from_millis(500)),
        "an answer took {worst:?} during the freeze"
    );
    // The loop read on during the freeze, and every line reaches the log.
    assert!(seen > 100, "the agent's lines were not read: {seen}");
    d.wait_pane(&id, "all 400 lines read", |p| {
        p["counters"]["events"].as_u64() == Some(400)
    });
    let logged = wait_for(Duration::from_secs(60), "all 400 lines logged", || {
        let text = std::fs::read_dir(d.state.join("sessions"))
            .ok()?
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .find(|t| t.contains(&id))?;
        let n = text.matches("\"type\":\"tick\"").count();
        (n == 400).then_some(n)
    });
    assert_eq!(logged, 400);
}

/// An ext4 image on a loop device, mounted for the test; thawed and
/// unmounted on drop.
struct FrozenFs {
    /// Holds the image and the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
    mount: PathBuf,
    frozen: std::cell::Cell<bool>,
}

impl FrozenFs {
    fn mount() -> Option<FrozenFs> {
        let skip = |why: &str| {
            eprintln!("\n*** SKIPPED: the freeze test needs {why} ***\n");
            None
        };
        if !cfg!(target_os = "linux") {
            return skip("Linux's fsfreeze (FreeBSD has no file system freeze)");
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return skip("root (mount and fsfreeze)");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("state.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("mount point");
        let ok = |cmd: &mut Command| cmd.output().is_ok_and(|o| o.status.success());
        if !ok(Command::new("truncate").arg("-s").arg("64M").arg(&image))
            || !ok(Command::new("mkfs.ext4").arg("-q").arg(&image))
        {
            return skip("mkfs.ext4 (e2fsprogs)");
        }
        if !ok(Command::new("mount")
            .arg("-o")
            .arg("loop")
            .arg(&image)
            .arg(&mount))
        {
            return skip("a loop device (mount -o loop failed: a container without one?)");
        }
        Some(FrozenFs {
            _dir: dir,
            mount,
            frozen: std::cell::Cell::new(false),
        })
    }

    fn freeze(&self) {
        let o = Command::new("fsfreeze")
            .arg("-f")
            .arg(&self.mount)
            .output()
            .expect("fsfreeze");
        assert!(o.status.success(), "fsfreeze -f: {o:?}");
        self.frozen.set(true);
    }

    fn thaw(&self) {
        if self.frozen.replace(false) {
            let _ = Command::new("fsfreeze").arg("-u").arg(&self.mount).output();
        }
    }
}

struct Thaw<'a>(&'a FrozenFs);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        self.thaw();
        let _ = Command::new("umount").arg("-l").arg(&self.mount).output();
    }
}
