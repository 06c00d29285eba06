//! Snapshots streamed (issue 12 item 3): a snapshot larger than one slice
//! comes back whole, as one line, in order with the replies around it, and
//! the panes it shows are exactly the daemon's.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Colibrid};

/// Enough panes for a v2 snapshot of several 256 KiB slices.
const PANES: usize = 600;

#[test]
fn a_snapshot_of_many_slices_is_whole_and_in_order_with_the_replies_around_it() {
    let d = Colibrid::start(&[]);
    let mut ids = BTreeSet::new();
    for _ in 0..PANES {
        ids.insert(d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({"runtime":"pi"})));
    }
    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let pipelined = [
        json!({"cmd":"status","id":"a"}),
        json!({"cmd":"snapshot","schema":"v2","id":"b"}),
        json!({"cmd":"glasspane-snapshot","id":"c"}),
        json!({"cmd":"snapshot","schema":"v2"}),
        json!({"cmd":"status","id":"e"}),
    ];
    let mut batch = Vec::new();
    for r in &pipelined {
        batch.extend_from_slice(r.to_string().as_bytes());
        batch.push(b'\n');
    }
    s.write_all(&batch).expect("send");
    let mut lines = BufReader::new(s);
    let mut replies = Vec::new();
    for _ in 0..pipelined.len() {
        let mut line = String::new();
        lines.read_line(&mut line).expect("reply line");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a reply is not one JSON line ({e}): {} bytes", line.len()));
        assert_eq!(v["ok"], json!(true), "{v}");
        replies.push(v);
    }
    let order: Vec<Value> = replies.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(
        order,
        vec![json!("a"), json!("b"), json!("c"), Value::Null, json!("e")],
        "replies in request order"
    );
    for (i, schema) in [
        (1, "clawdie.glasspane.snapshot.v2"),
        (2, "clawdie.glasspane.snapshot.v1"),
        (3, "clawdie.glasspane.snapshot.v2"),
    ] {
        let data = &replies[i]["data"];
        assert_eq!(data["schema"], json!(schema));
        let shown: BTreeSet<String> = data["panes"]
            .as_array()
            .expect("panes")
            .iter()
            .map(|p| p["id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(shown, ids, "every pane once, and no other ({schema})");
    }
    assert!(
        serde_json::to_vec(&replies[1]).expect("encode").len() > 256 << 10,
        "the v2 snapshot spans more than one slice"
    );
}

#[test]
fn a_snapshot_read_late_is_whole_while_others_are_served_and_panes_are_removed() {
    let d = Colibrid::start(&[]);
    let mut ids = Vec::new();
    for i in 0..PANES {
        let argv: &[&str] = if i < 10 {
            &["/bin/sh", "-c", "exit 0"]
        } else {
            &["/bin/sh", "-c", "exec sleep 60"]
        };
        ids.push(d.spawn(argv, json!({"runtime":"pi"})));
    }
    for id in &ids[..10] {
        d.wait_pane(id, "the short agent to exit", |p| !p["exit"].is_null());
    }
    // A client that asks for a snapshot and does not read yet: its reply
    // waits, part made, while panes leave the table and others are served.
    let mut slow = UnixStream::connect(&d.socket).expect("connect");
    slow.write_all(b"{\"cmd\":\"snapshot\",\"schema\":\"v2\"}\n")
        .expect("send");
    for id in &ids[..10] {
        d.ok(json!({"cmd":"remove-agent","agent_id":id}));
    }
    // Everyone else is served while the slow client sits.
    assert_eq!(d.request(json!({"cmd":"status"}))["ok"], json!(true));
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut line = String::new();
    BufReader::new(slow).read_line(&mut line).expect("reply");
    let v: Value = serde_json::from_str(&line).expect("one JSON line");
    let shown: Vec<&str> = v["data"]["panes"]
        .as_array()
        .expect("panes")
        .iter()
        .map(|p| p["id"].as_str().expect("id"))
        .collect();
    let unique: BTreeSet<&str> = shown.iter().copied().collect();
    assert_eq!(unique.len(), shown.len(), "no pane twice");
    for id in &ids[10..] {
        assert!(unique.contains(id.as_str()), "{id} missing");
    }
    wait_for(Duration::from_secs(10), "removed panes gone", || {
        let snap = d.snapshot();
        let n = snap["panes"].as_array().map_or(0, Vec::len);
        (n == PANES - 10).then_some(())
    });
}

/// A snapshot keeps each pane's text until the pane changes
/// (`daemon::pane_text`): a pane shown before must show every change made
/// after, whatever made it (its output, a command, its exit), in v2 and in
/// v1. In debug builds, as here, the daemon also checks each kept text it
/// writes against a fresh one.
#[test]
fn a_pane_shown_before_shows_every_change_made_after() {
    let d = Colibrid::start(&[]);
    let tool = r#"{"type":"tool_execution_start","toolCallId":"c1","toolName":"bash","args":{"command":"ls"}}"#;
    let body = format!(
        r#"printf '%s\n' '{{"type":"agent_start"}}'; read a; printf '%s\n' '{tool}'; read b; exit 3"#
    );
    let id = d.spawn(
        &["/bin/sh", "-c", &body],
        json!({"runtime":"pi","stall_after":"1h"}),
    );
    let working = d.wait_state(&id, "working");
    // Shown again unchanged: from the kept texts, and the same.
    assert_eq!(d.pane(&id), working);
    assert_eq!(d.pane(&id), working);
    let working_v1 = v1_pane(&d, &id);
    assert_eq!(working_v1["state"], json!("working"), "{working_v1}");
    assert_eq!(v1_pane(&d, &id), working_v1);

    d.ok(json!({"cmd":"pause-agent","agent_id": id}));
    let paused = d.pane(&id);
    assert_eq!(paused["paused"], json!(true), "{paused}");
    assert_eq!(d.pane(&id), paused);
    d.ok(json!({"cmd":"resume-agent","agent_id": id}));
    assert_eq!(d.pane(&id)["paused"], json!(false));

    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"go"}));
    let p = d.wait_pane(&id, "the tool shown", |p| {
        p["last_tool"]["name"] == json!("bash")
    });
    assert!(
        p["counters"]["events"].as_u64() > working["counters"]["events"].as_u64(),
        "{p}"
    );
    assert!(p["pid"].as_i64().is_some(), "{p}");

    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"go"}));
    let p = d.wait_pane(&id, "the exit shown", |p| p["exit"] == json!({"code": 3}));
    assert_eq!(p["pid"], Value::Null, "{p}");
    assert_eq!(p["supervision"]["actual"], json!("exited"), "{p}");
    assert_eq!(d.pane(&id), p);
    let exited_v1 = v1_pane(&d, &id);
    assert_ne!(exited_v1["state"], json!("working"), "{exited_v1}");
    assert_eq!(v1_pane(&d, &id), exited_v1);
}

/// Pane `id` in a v1 (`glasspane-snapshot`) snapshot.
fn v1_pane(d: &Colibrid, id: &str) -> Value {
    let snap = d.ok(json!({"cmd":"glasspane-snapshot"}));
    snap["panes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == json!(id)).cloned())
        .unwrap_or(Value::Null)
}
