//! The resumable watch (a journal that keeps `seq` across restarts, replay
//! with `since`, the gap marker) and `colibri notify`, its first client.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Client, Colibrid};

/// Reads watch lines until one satisfies `stop`; every line read.
fn read_until(c: &mut Client, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let ev = c
            .read_line()
            .unwrap_or_else(|| panic!("the stream ended; seen so far: {seen:?}"));
        let done = stop(&ev);
        seen.push(ev);
        if done {
            return seen;
        }
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

fn attached(id: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["event"] == json!("attached") && e["pane"] == json!(id)
}

#[test]
fn a_watch_resumes_across_a_restart_with_no_gap_and_no_duplicate() {
    let mut d = Colibrid::start(&[]);
    let mut first = d.client();
    assert_eq!(first.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let a = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"one"}));
    let before = read_until(&mut first, attached(&a));
    let cursor = *seqs(&before).last().expect("a seq");
    // Events this watcher never reads: the second agent, then the
    // shutdown's exits.
    let b = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"two"}));
    assert!(d.terminate().success());
    d.launch();
    let c = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"three"}));

    let mut resumed = d.client();
    let ack = resumed.request(&json!({"cmd":"watch","since": cursor}));
    assert_eq!(ack["ok"], json!(true), "{ack}");
    let replayed = read_until(&mut resumed, attached(&c));
    assert!(
        replayed.iter().all(|e| e["event"] != json!("gap")),
        "no gap: {replayed:?}"
    );
    let got = seqs(&replayed);
    let want: Vec<u64> = (cursor + 1..cursor + 1 + got.len() as u64).collect();
    assert_eq!(got, want, "every event after the cursor, once, in order");
    assert!(
        replayed.iter().any(attached(&b)),
        "the event missed before the restart is replayed: {replayed:?}"
    );
    assert!(
        replayed
            .iter()
            .any(|e| e["event"] == json!("exited") && e["pane"] == json!(a)),
        "the shutdown's exits are replayed: {replayed:?}"
    );
    // Live events follow the replay without a seam.
    d.ok(json!({"cmd":"pause-agent","agent_id": c}));
    let live = read_until(&mut resumed, |e| e["event"] == json!("paused"));
    assert_eq!(
        seqs(&live).first().copied(),
        got.last().map(|s| s + 1),
        "{live:?}"
    );
}

#[test]
fn a_since_older_than_the_journal_gets_the_gap_marker_first() {
    let mut d = Colibrid::start(&[]);
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let mut panes = Vec::new();
    for n in 0..4 {
        panes.push(d.spawn(
            &["/bin/sh", "-c", "sleep 30"],
            json!({"name": format!("p{n}")}),
        ));
    }
    let last = panes.last().expect("a pane").clone();
    let events = read_until(&mut w, attached(&last));
    assert!(d.terminate().success());
    // As the age bound would: the oldest journaled events are gone.
    let path = d.state.join("watch.journal");
    let text = std::fs::read_to_string(&path).expect("the journal");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= events.len(), "{} lines", lines.len());
    let kept = lines[3..].join("\n") + "\n";
    std::fs::write(&path, kept).expect("trim");
    let oldest: Value = serde_json::from_str(lines[3]).expect("a journal line");
    let oldest = oldest["ev"]["seq"].as_u64().expect("seq");
    d.launch();

    let mut late = d.client();
    assert_eq!(
        late.request(&json!({"cmd":"watch","since": 1}))["ok"],
        json!(true)
    );
    let gap = late.read_line().expect("the gap marker");
    assert_eq!(gap["event"], json!("gap"), "{gap}");
    assert_eq!(gap["since"], json!(1));
    assert_eq!(gap["resumes_at"], json!(oldest));
    assert_eq!(gap["seq"], json!(oldest - 1));
    let next = late.read_line().expect("the oldest kept event");
    assert_eq!(next["seq"], json!(oldest), "{next}");

    // A cursor the journal never reached (a reset state dir) gets one too.
    let mut ahead = d.client();
    let ack = ahead.request(&json!({"cmd":"watch","since": 1_000_000}));
    assert_eq!(ack["ok"], json!(true));
    let marker = ahead.read_line().expect("the gap marker");
    assert_eq!(marker["event"], json!("gap"), "{marker}");
    assert_eq!(marker["resumes_at"], json!(oldest));
    wait_for(Duration::from_secs(10), "status", || {
        (d.ok(json!({"cmd":"status"}))["watchers"].as_u64() >= Some(2)).then_some(())
    });
}
