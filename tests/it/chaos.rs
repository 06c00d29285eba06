//! Chaos: while agents stream, the daemon is killed, stopped and continued,
//! and its disk frozen; no acknowledged line may be missing afterwards.
//!
//! A line is acknowledged when a `get-session` reply returned it with
//! nothing left unwritten (`unflushed_bytes` 0, no `flush_error`): from
//! then on, the daemon promises it is in the log (docs/RELIABILITY.md).
//! A full disk is simulated by the writer stall hook (a small tmpfs needs
//! root): both leave lines buffered, unacknowledged, under backpressure.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::support::*;

/// Starts (or restarts) colibrid on `d`'s dirs with the stall hook armed.
fn launch(d: &mut Colibrid, stall: &Path) {
    let child = Command::new(COLIBRID)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--state-dir")
        .arg(&d.state)
        .arg("--no-syslog")
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_CONFIG")
        .env("COLIBRI_LOG", "error")
        .env("COLIBRI_TEST_WRITER_STALL", stall)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start colibrid");
    d.child = Some(child);
    wait_for(Duration::from_secs(20), "colibrid up", || {
        let mut c = Client::try_connect(&d.socket).ok()?;
        c.try_request(&json!({"cmd":"status"})).ok()
    });
}

/// The `n` of every event line in a session's log file, in order.
fn logged(d: &Colibrid, session: &str) -> Vec<u64> {
    let path = d.state.join("sessions").join(format!("{session}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["ev"]["n"].as_u64())
        .collect()
}

/// The highest line number `get-session` acknowledged, if it had nothing
/// left unwritten.
fn acknowledged(d: &Colibrid, session: &str) -> Option<u64> {
    let r = d
        .client()
        .try_request(&json!({"cmd":"get-session","session_id": session}))
        .ok()?;
    let data = &r["data"];
    if data["unflushed_bytes"] != json!(0) || !data["flush_error"].is_null() {
        return None;
    }
    data["records"]
        .as_array()?
        .iter()
        .filter_map(|rec| rec["ev"]["n"].as_u64())
        .max()
}

fn spawn_streamers(d: &Colibrid, round: usize, sessions: &mut Vec<String>) {
    // Bursts of 20 lines, so that the log is sometimes fully written.
    let body = "i=0; while :; do j=0; while [ $j -lt 20 ]; do echo \"{\\\"type\\\":\\\"message_update\\\",\\\"n\\\":$i}\"; i=$((i+1)); j=$((j+1)); done; sleep 0.05; done";
    for k in 0..2 {
        let session = format!("chaos-{round}-{k}");
        d.spawn(
            &["/bin/sh", "-c", body],
            json!({"session_id": session, "runtime":"pi"}),
        );
        sessions.push(session);
    }
}

#[test]
fn kill_stop_and_freeze_while_agents_stream_lose_no_acknowledged_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stall = dir.path().join("stall");
    let mut d = Colibrid {
        socket: dir.path().join("colibri.sock"),
        state: dir.path().join("state"),
        dir,
        child: None,
        args: Vec::new(),
        env: Vec::new(),
        stderr_unread: false,
    };
    launch(&mut d, &stall);
    let mut sessions = Vec::new();
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    let note_acks = |d: &Colibrid, sessions: &[String], acked: &mut BTreeMap<String, u64>| {
        for s in sessions {
            if let Some(n) = acknowledged(d, s) {
                let e = acked.entry(s.clone()).or_insert(0);
                *e = (*e).max(n);
            }
        }
    };
    spawn_streamers(&d, 0, &mut sessions);
    for round in 0..6 {
        // Let the agents stream, and take acknowledgements.
        wait_for(Duration::from_secs(30), "lines acknowledged", || {
            note_acks(&d, &sessions, &mut acked);
            (acked.len() >= 2).then_some(())
        });
        let pid = Pid::from_raw(d.pid());
        match round % 3 {
            0 => {
                // Freeze the disk: acknowledgements stop, the loop does not.
                std::fs::write(&stall, "").expect("freeze");
                let snap = d.ok(json!({"cmd":"snapshot","schema":"v2"}));
                assert!(snap["panes"].is_array());
                note_acks(&d, &sessions, &mut acked);
                std::fs::remove_file(&stall).expect("thaw");
            }
            1 => {
                let _ = kill(pid, Signal::SIGSTOP);
                std::thread::sleep(Duration::from_millis(200));
                let _ = kill(pid, Signal::SIGCONT);
                note_acks(&d, &sessions, &mut acked);
            }
            _ => {
                note_acks(&d, &sessions, &mut acked);
                d.crash();
                launch(&mut d, &stall);
                // The streamers died with the daemon: start new ones.
                spawn_streamers(&d, round + 1, &mut sessions);
            }
        }
    }
    note_acks(&d, &sessions, &mut acked);
    d.crash();
    assert!(acked.values().any(|&n| n > 0), "{acked:?}");
    for (session, &max) in &acked {
        let got = logged(&d, session);
        assert!(
            got.len() as u64 > max && got[..=max as usize] == (0..=max).collect::<Vec<u64>>()[..],
            "session {session}: acknowledged up to {max}, the log holds {} lines",
            got.len()
        );
    }
}
