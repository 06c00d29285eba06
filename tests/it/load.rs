//! The loop under load: watchers that keep reading through a burst, exits
//! reported while other agents flood, and watchers of state changes only.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{peak_rss_kib, rss_kib, wait_for, Colibrid};

/// A Pi RPC `response` first (so `agent_settled` reads as idle, not done),
/// then `lines` lines that each change the pane's state.
fn state_changing_lines(lines: usize) -> String {
    let mut s = String::from("{\"type\":\"response\"}\n");
    for i in 0..lines {
        if i % 2 == 0 {
            s.push_str("{\"type\":\"turn_start\"}\n");
        } else {
            s.push_str("{\"type\":\"agent_settled\"}\n");
        }
    }
    s
}

/// Connects, sends `watch` with `args`, and reads every line on a thread
/// until the stream ends or `stop_after_exits` `exited` events arrived.
fn watcher(d: &Colibrid, args: Value, stop_after_exits: usize) -> mpsc::Receiver<Vec<Value>> {
    // As colibri's own clients connect (their receive buffer included).
    let mut s =
        colibri::client::connect_stream(&d.socket, Duration::from_secs(20)).expect("connect");
    let mut req = json!({"cmd":"watch"});
    if let (Some(m), Some(a)) = (req.as_object_mut(), args.as_object()) {
        for (k, v) in a {
            m.insert(k.clone(), v.clone());
        }
    }
    let mut line = serde_json::to_vec(&req).expect("encode");
    line.push(b'\n');
    s.write_all(&line).expect("send watch");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let mut r = BufReader::new(s);
    let mut first = String::new();
    r.read_line(&mut first).expect("watch reply");
    let reply: Value = serde_json::from_str(&first).expect("reply is JSON");
    assert_eq!(reply["ok"], json!(true), "{first}");
    let (tx, rx) = mpsc::channel();
    // The thread only reads and keeps the lines (parsing comes after), so
    // it takes the stream as fast as the daemon writes it.
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut exits = 0;
        for l in r.lines() {
            let Ok(l) = l else { break };
            if l.contains("\"event\":\"exited\"") {
                exits += 1;
            }
            let end = l.starts_with("{\"ok\":false");
            lines.push(l);
            if end || exits >= stop_after_exits {
                break;
            }
        }
        let seen = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect();
        let _ = tx.send(seen);
    });
    rx
}

fn state_events<'a>(seen: &'a [Value], pane: &str) -> Vec<&'a Value> {
    seen.iter()
        .filter(|v| v["event"] == json!("state") && v["pane"] == json!(pane))
        .collect()
}

#[test]
fn a_watcher_that_keeps_reading_is_not_dropped_in_a_burst() {
    let d = Colibrid::start(&[]);
    let file = d.path("burst.jsonl");
    std::fs::write(&file, state_changing_lines(20_000)).expect("write lines");
    let watch = watcher(&d, json!({}), 10);
    wait_for(Duration::from_secs(20), "the watcher", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(1)).then_some(())
    });
    let cmd = format!("cat {}", file.display());
    for _ in 0..10 {
        d.spawn(&["/bin/sh", "-c", &cmd], json!({"runtime":"pi"}));
    }
    let seen = watch
        .recv_timeout(Duration::from_secs(180))
        .expect("the watcher saw 10 exits");
    let dropped: Vec<&Value> = seen.iter().filter(|v| v["ok"] == json!(false)).collect();
    assert!(dropped.is_empty(), "the watcher was dropped: {dropped:?}");
    let exits = seen
        .iter()
        .filter(|v| v["event"] == json!("exited"))
        .count();
    assert_eq!(exits, 10);
    // It saw every state change of every pane, in order, with no gap.
    let states = seen.iter().filter(|v| v["event"] == json!("state")).count();
    assert!(states >= 10 * 19_999, "only {states} state events");
    let seqs: Vec<u64> = seen.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "a gap in the stream"
    );
}

#[test]
fn an_exit_is_reported_while_other_agents_flood() {
    let d = Colibrid::start(&[]);
    let flood_line = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"xxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}"#;
    let flood = format!("yes '{flood_line}'");
    let floods: Vec<String> = (0..4)
        .map(|_| d.spawn(&["/bin/sh", "-c", &flood], json!({"runtime":"pi"})))
        .collect();
    for f in &floods {
        d.wait_pane(f, "flooding", |p| {
            p["counters"]["events"].as_u64().unwrap_or(0) > 5_000
        });
    }
    let quick = d.spawn(
        &["/bin/sh", "-c", "read x; exit 3"],
        json!({"runtime":"pi"}),
    );
    let watch = watcher(&d, json!({"panes":[quick]}), 1);
    let before: Vec<u64> = floods
        .iter()
        .map(|f| d.pane(f)["counters"]["events"].as_u64().unwrap_or(0))
        .collect();
    d.ok(json!({"cmd":"send-input","agent_id": quick, "text":"go"}));
    let seen = watch
        .recv_timeout(Duration::from_secs(60))
        .expect("the exit is reported");
    let exit = seen
        .iter()
        .find(|v| v["event"] == json!("exited"))
        .expect("an exited event");
    assert_eq!(exit["pane"], json!(quick));
    assert_eq!(exit["code"], json!(3));
    // Every flooding agent is still read: none starves the others.
    for (f, b) in floods.iter().zip(before) {
        d.wait_pane(f, "the flood to go on", |p| {
            p["counters"]["events"].as_u64().unwrap_or(0) > b
        });
        assert_eq!(d.pane(f)["exit"], Value::Null, "flooder {f} ended");
    }
}

#[test]
fn a_watcher_of_state_changes_gets_the_net_change_not_one_per_line() {
    let d = Colibrid::start(&[]);
    let lines = 4_000;
    let file = d.path("states.jsonl");
    std::fs::write(&file, state_changing_lines(lines)).expect("write lines");
    let every = watcher(&d, json!({}), 1);
    let changes = watcher(&d, json!({"mode":"changes"}), 1);
    wait_for(Duration::from_secs(20), "the watchers", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(2)).then_some(())
    });
    let cmd = format!("cat {}; read x", file.display());
    let id = d.spawn(&["/bin/sh", "-c", &cmd], json!({"runtime":"pi"}));
    d.wait_pane(&id, "every line", |p| {
        p["counters"]["events"].as_u64() == Some(lines as u64 + 1)
    });
    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"go"}));
    let every = every.recv_timeout(Duration::from_secs(60)).expect("every");
    let changes = changes
        .recv_timeout(Duration::from_secs(60))
        .expect("changes");
    let all = state_events(&every, &id);
    let net = state_events(&changes, &id);
    assert!(all.len() >= lines - 1, "only {} state events", all.len());
    assert!(!net.is_empty(), "no state change reported");
    assert!(
        net.len() * 10 < all.len(),
        "{} coalesced events for {} changes",
        net.len(),
        all.len()
    );
    // The coalesced events still chain: each starts where the last ended,
    // none is a no-op, and the last ends where the full stream ends.
    for w in net.windows(2) {
        assert_eq!(w[0]["to"], w[1]["from"], "{w:?}");
    }
    assert!(net.iter().all(|v| v["from"] != v["to"]));
    assert_eq!(net.last().map(|v| &v["to"]), all.last().map(|v| &v["to"]));
    // No event arrives out of order: the exit comes after the last state.
    let seqs: Vec<u64> = changes.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(changes.last().map(|v| &v["event"]), Some(&json!("exited")));
}

/// Watchers that never read cost the daemon a bounded amount each: each
/// queued event is an entry of the watcher's own (40 bytes), so a watcher
/// is dropped at `WATCH_FRAME_LIMIT` (16,384) of them, at most 640 KiB,
/// whatever the events' size. Before, only the bytes counted, and in the
/// 2 s it was given 100 watchers took a debug build from 11 to 234 MiB
/// (200 took a release build to 773 MB); now to 81 MiB.
#[test]
fn watchers_that_never_read_cost_a_bounded_amount_each() {
    const WATCHERS: u64 = 100;
    let d = Colibrid::start(&[]);
    let pid = d.pid();
    let baseline = rss_kib(pid);
    // Connected and watching, never read (the sockets are kept open).
    let silent: Vec<UnixStream> = (0..WATCHERS)
        .map(|_| {
            let mut s = UnixStream::connect(&d.socket).expect("connect");
            s.write_all(b"{\"cmd\":\"watch\"}\n").expect("send watch");
            s
        })
        .collect();
    wait_for(Duration::from_secs(20), "the watchers", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(WATCHERS)).then_some(())
    });
    // Every line flips the pane's state: one event each, as fast as it can.
    let flip = d.script(
        "flip.sh",
        "echo '{\"type\":\"response\"}'\nyes '{\"type\":\"agent_start\"}\n{\"type\":\"agent_settled\"}'",
    );
    d.spawn(&[flip.as_str()], json!({"runtime":"pi"}));
    wait_for(Duration::from_secs(60), "every watcher dropped", || {
        (d.ok(json!({"cmd":"status"}))["watchers"] == json!(0)).then_some(())
    });
    let peak = peak_rss_kib(pid);
    // 640 KiB of entries per watcher (768 KiB: the allocator's rounding),
    // and 32 MiB for what the flood costs with no watcher at all (18 MiB
    // measured: the journal's ring, the log's buffers) plus the frames the
    // watchers share (16,384 events of about 180 bytes, 3 MiB).
    let bound = baseline + WATCHERS * 768 + 32 * 1024;
    eprintln!("{WATCHERS} watchers not reading: RSS {baseline} KiB -> peak {peak} KiB");
    assert!(
        peak < bound,
        "peak RSS {peak} KiB, over {bound} KiB ({baseline} KiB before)"
    );
    drop(silent);
}
