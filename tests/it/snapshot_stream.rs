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
