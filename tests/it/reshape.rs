//! Regressions pinned while reshaping the daemon's top layer (issue 8):
//! what a finished pane keeps, what a spent restart policy reports.

use std::time::Duration;

use colibri::daemon::store::MAX_OPEN_LOGS;
use serde_json::json;

use crate::support::{wait_for, Colibrid, SyslogSink};

/// Open fds of a process, from /proc.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

// See: issue 9 defect 7 (a finished pane kept its timer fd).
#[test]
fn finished_agents_do_not_grow_the_daemons_fd_count() {
    let d = Colibrid::start(&[]);
    let running = |d: &Colibrid| d.ok(json!({"cmd":"status"}))["running"].as_u64();
    // The store keeps up to MAX_OPEN_LOGS session logs open (an LRU cache,
    // bounded by design): fill it first so the baseline holds it.
    let warm: Vec<String> = (0..MAX_OPEN_LOGS)
        .map(|_| d.spawn(&["/bin/sh", "-c", "exit 0"], json!({})))
        .collect();
    for id in &warm {
        d.wait_state(id, "done");
    }
    wait_for(Duration::from_secs(20), "every agent reaped", || {
        (running(&d) == Some(0)).then_some(())
    });
    let before = fd_count(d.pid());
    assert!(before > 0, "read no fds of colibrid from /proc");
    let ids: Vec<String> = (0..30)
        .map(|_| {
            d.spawn(
                &["/bin/sh", "-c", "echo '{\"type\":\"agent_start\"}'"],
                json!({"stall_after":"1h"}),
            )
        })
        .collect();
    for id in &ids {
        d.wait_state(id, "done");
    }
    wait_for(Duration::from_secs(20), "every agent reaped", || {
        (running(&d) == Some(0)).then_some(())
    });
    let after = fd_count(d.pid());
    // A little slack for client connections still being closed.
    assert!(
        after <= before + 4,
        "30 finished agents grew colibrid's fds from {before} to {after}"
    );
}

// See: issue 9 (running out of restarts was only a log line).
#[test]
fn spent_restarts_raise_a_watch_event_and_an_alert() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let mut d = Colibrid::start(&[]);
    let cfg = d.path("fast.toml");
    std::fs::write(&cfg, "[restart]\nbackoff = [\"100ms\"]\nmax_restarts = 1\n").expect("cfg");
    d.terminate();
    d.args = vec![
        "--config".into(),
        cfg.display().to_string(),
        format!("--syslog-socket={}", sink.path.display()),
    ];
    d.launch();
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let id = d.spawn(
        &["/bin/sh", "-c", "exit 3"],
        json!({"restart":"on-failure"}),
    );
    let ev = wait_for(Duration::from_secs(20), "restarts_exhausted", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("restarts_exhausted")).then_some(ev)
    });
    assert_eq!(ev["pane"], json!(id));
    assert_eq!(ev["attempts"], json!(1));
    let mut seen = Vec::new();
    let m = sink.wait_for(" restarts_exhausted ", &mut seen);
    assert!(m.contains(&format!("pane={id}")), "{m}");
    let p = d.pane(&id);
    assert_eq!(p["generation"], json!(1));
    assert!(p["restart"]["next_at"].is_null(), "{p}");
}

// See: issue 9 item 12 ("every failure sends two identical alerts").
#[test]
fn each_failure_sends_exactly_one_alert() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let d = Colibrid::start(&[&arg]);
    let failed = d.spawn(&["/bin/sh", "-c", "exit 3"], json!({}));
    d.wait_state(&failed, "error");
    let killed = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({}));
    d.ok(json!({"cmd":"kill-agent","agent_id": killed}));
    d.wait_pane(&killed, "the killed agent reaped", |p| {
        p["state"] == json!("error") && p["exit"]["signal"] == json!(9)
    });
    // Alerts leave in order: once a later pane's alert is in, every alert
    // of the two failures is in too.
    let marker = d.spawn(&["/bin/sh", "-c", "exit 0"], json!({}));
    let mut seen = Vec::new();
    sink.wait_for(&format!("pane={marker}"), &mut seen);
    for id in [&failed, &killed] {
        let mine: Vec<&String> = seen
            .iter()
            .filter(|m| m.contains(&format!("pane={id}")))
            .collect();
        assert_eq!(mine.len(), 1, "one alert per failure: {mine:#?}");
    }
}
