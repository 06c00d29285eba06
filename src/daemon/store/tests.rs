//! Store tests on real files in a temp directory.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use super::flush::Writer;
use super::session::SPARE_SESSION_BUFS;
use super::*;

const T0: u64 = 1_779_883_200_000;

fn at(n: u64) -> Timestamp {
    Timestamp::from_millis(T0 + n)
}

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        dir: dir.join("sessions"),
        flush_budget: 1 << 20,
        buffer_limit: 1 << 20,
        rotate_bytes: 0,
        rotate_turns: 0,
        retain: Duration::ZERO,
    }
}

fn open(cfg: &StoreConfig) -> (SessionStore, Recovery) {
    SessionStore::open(cfg.clone()).expect("store opens")
}

fn log_path(cfg: &StoreConfig, id: &str) -> PathBuf {
    cfg.dir.join(format!("{id}.jsonl"))
}

/// Every line of the log, parsed; panics (failing the test) on a line that
/// is not JSON or a missing final newline.
fn parsed_lines(path: &Path) -> Vec<Value> {
    let bytes = fs::read(path).expect("log readable");
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "log ends with a newline"
    );
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l)
                .unwrap_or_else(|e| panic!("line {:?} parses: {e}", String::from_utf8_lossy(l)))
        })
        .collect()
}

fn open_fds(store: &SessionStore) -> usize {
    match &store.link.writer {
        Writer::Inline(w) => w.fds.entries.len(),
        Writer::Thread(_) => panic!("the tests run the writer inline"),
    }
}

/// The `get-session` dump as a JSON tree (for dumps of ordinary JSON).
fn dump_json(store: &mut SessionStore, id: &str) -> Value {
    let d = store.dump(id).expect("dump");
    serde_json::to_value(&d).expect("dump serialises")
}

fn attach_rec<'a>(pane: &'a str, argv: &'a [String]) -> AttachRecord<'a> {
    AttachRecord {
        pane,
        agent: "pi",
        runtime: Some("pi"),
        name: Some("worker"),
        cwd: Some("/repo"),
        argv,
        generation: 1,
        jail: None,
        system_prompt: None,
        role: None,
        scope: &[],
    }
}

fn drain(store: &mut SessionStore) {
    loop {
        let r = store.flush(usize::MAX);
        assert_eq!(r.failed, None, "flush succeeds");
        if !r.pending {
            break;
        }
    }
}

#[test]
fn append_flush_reopen_recovers_every_event_byte_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string(), "--mode".into(), "json".into()];
    let events: Vec<&[u8]> = vec![
        br#"{"type":"session","id":"pi-1","cwd":"/repo"}"#,
        br#"{"type":"turn_start"}"#,
        "{\"type\":\"message_update\",\"text\":\"h\u{e9}llo \\\"q\\\" \u{2028}\"}".as_bytes(),
        br#"{ "type" : "turn_end" , "n" : [1, 2.50, 1e3] }"#,
    ];
    {
        let (mut store, rec) = open(&cfg);
        assert!(rec.panes.is_empty());
        store.ensure_session("s1", Some("pi"), Some("/repo"), at(0));
        store.attach("s1", &attach_rec("p1", &argv), at(1));
        store.attach("s1", &attach_rec("p2", &argv), at(2));
        for (n, ev) in events.iter().enumerate() {
            store.append("s1", "p1", LineRecord::Event(ev), at(10 + n as u64));
        }
        store.append("s1", "p1", LineRecord::Raw(b"not json \xff"), at(20));
        store.append("s1", "p1", LineRecord::Oversize(5_000_000), at(21));
        // Surrounding whitespace (a CR from the PTY) is trimmed.
        store.append(
            "s1",
            "p2",
            LineRecord::Event(b"{\"type\":\"agent_start\"}\r"),
            at(22),
        );
        store.exit(
            "s1",
            &ExitRecord {
                pane: "p1",
                state: "done",
                code: Some(0),
                signal: None,
                reason: None,
                planned: false,
            },
            at(30),
        );
        drain(&mut store);
        assert_eq!(store.health().pending_bytes, 0);
    }
    let lines = parsed_lines(&log_path(&cfg, "s1"));
    assert_eq!(lines.len(), 10);
    let raw = fs::read_to_string(log_path(&cfg, "s1")).expect("log text");
    assert!(raw.contains(&format!(
        "{{\"ts\":\"{}\",\"pane\":\"p1\",\"ev\":{{ \"type\" : \"turn_end\" , \"n\" : [1, 2.50, 1e3] }}}}\n",
        at(13).to_rfc3339()
    )));
    assert_eq!(lines[6]["raw"], "not json \u{fffd}");
    assert_eq!(lines[7]["oversize"], 5_000_000);

    let (store, rec) = open(&cfg);
    assert_eq!(rec.sessions, 1);
    assert!(rec.repaired.is_empty());
    assert_eq!(rec.panes.len(), 2);
    let p1 = rec
        .panes
        .iter()
        .find(|p| p.pane == "p1")
        .expect("p1 recovered");
    assert_eq!(p1.session, "s1");
    assert_eq!(p1.agent, "pi");
    assert_eq!(p1.name.as_deref(), Some("worker"));
    assert_eq!(p1.attached_at, at(1));
    assert_eq!(p1.exit, Some(("done".to_string(), Some(0), None)));
    let want: Vec<(Timestamp, Vec<u8>)> = events
        .iter()
        .enumerate()
        .map(|(n, e)| (at(10 + n as u64), e.to_vec()))
        .collect();
    assert_eq!(p1.events, want);
    let p2 = rec
        .panes
        .iter()
        .find(|p| p.pane == "p2")
        .expect("p2 recovered");
    assert_eq!(p2.exit, None, "p2 died with the daemon");
    assert_eq!(
        p2.events,
        vec![(at(22), b"{\"type\":\"agent_start\"}".to_vec())]
    );
    let meta = store.get("s1").expect("meta");
    assert_eq!(meta.panes, vec!["p1", "p2"]);
    assert_eq!(meta.final_state, None, "p2 is still live");
    assert_eq!(meta.created_at, at(1));
    assert_eq!(
        meta.bytes,
        fs::metadata(log_path(&cfg, "s1")).expect("stat").len()
    );
}

#[test]
fn torn_last_line_is_ignored_and_truncated_before_appending() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    {
        let (mut store, _) = open(&cfg);
        store.append(
            "s1",
            "p1",
            LineRecord::Event(br#"{"type":"turn_start"}"#),
            at(1),
        );
        drain(&mut store);
    }
    let path = log_path(&cfg, "s1");
    let good_len = fs::metadata(&path).expect("stat").len();
    let mut f = OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open log");
    f.write_all(br#"{"ts":"2026-05-27T12:00:00.002Z","pane":"p1","ev":{"type":"mess"#)
        .expect("write torn tail");
    drop(f);

    let (mut store, rec) = open(&cfg);
    assert_eq!(rec.repaired, vec!["s1"]);
    assert_eq!(
        rec.panes[0].events.len(),
        1,
        "the torn line is not recovered"
    );
    assert_eq!(
        fs::metadata(&path).expect("stat").len(),
        good_len,
        "torn tail cut at open"
    );
    store.append(
        "s1",
        "p1",
        LineRecord::Event(br#"{"type":"turn_end"}"#),
        at(3),
    );
    drain(&mut store);
    let lines = parsed_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["ev"]["type"], "turn_end");
    assert_eq!(
        store.get("s1").expect("meta").bytes,
        fs::metadata(&path).expect("stat").len()
    );
}

#[test]
fn torn_tail_that_is_a_whole_record_is_kept_and_terminated() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    fs::create_dir_all(&cfg.dir).expect("mkdir");
    let path = log_path(&cfg, "s1");
    fs::write(
        &path,
        br#"{"ts":"2026-05-27T12:00:00.001Z","pane":"p1","ev":{"type":"turn_start"}}"#,
    )
    .expect("write log");
    let (mut store, rec) = open(&cfg);
    assert_eq!(rec.repaired, vec!["s1"]);
    assert_eq!(
        rec.panes[0].events,
        vec![(at(1), br#"{"type":"turn_start"}"#.to_vec())]
    );
    store.append(
        "s1",
        "p1",
        LineRecord::Event(br#"{"type":"turn_end"}"#),
        at(2),
    );
    drain(&mut store);
    let lines = parsed_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["ev"]["type"], "turn_start");
}

#[test]
fn flush_budget_bounds_bytes_written_per_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    for n in 0..200 {
        let id = if n % 2 == 0 { "a" } else { "b" };
        store.append(
            id,
            "p",
            LineRecord::Event(br#"{"type":"message_update","delta":"0123456789"}"#),
            at(n),
        );
    }
    let total = store.health().pending_bytes;
    assert!(total > 10_000);
    let mut written = 0;
    let mut calls = 0;
    loop {
        let r = store.flush(1000);
        assert!(r.written <= 1000, "budget respected: {}", r.written);
        assert_eq!(r.failed, None);
        written += r.written;
        calls += 1;
        if !r.pending {
            break;
        }
        assert_eq!(r.written, 1000, "a pending flush used its whole budget");
    }
    assert_eq!(written, total);
    assert_eq!(calls, total.div_ceil(1000));
    assert_eq!(parsed_lines(&log_path(&cfg, "a")).len(), 100);
    assert_eq!(parsed_lines(&log_path(&cfg, "b")).len(), 100);
    assert_eq!(
        store.flush(0),
        FlushReport {
            written: 0,
            pending: false,
            failed: None,
            release_frames: false,
            replaced_logs: 0,
        }
    );
}

#[test]
fn over_limit_turns_on_at_buffer_limit_and_off_after_flush() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.buffer_limit = 1000;
    let (mut store, _) = open(&cfg);
    let line = br#"{"type":"message_update","delta":"0123456789"}"#;
    let mut n = 0;
    while store.pending_bytes("s1") < 1000 {
        assert!(!store.over_limit("s1"));
        store.append("s1", "p", LineRecord::Event(line), at(n));
        n += 1;
    }
    assert!(store.over_limit("s1"));
    assert!(!store.over_limit("other"));
    assert_eq!(
        store.health().lost_bytes,
        0,
        "reaching the soft limit loses nothing"
    );
    drain(&mut store);
    assert!(!store.over_limit("s1"));
    assert_eq!(parsed_lines(&log_path(&cfg, "s1")).len(), n as usize);
}

#[test]
fn write_failures_are_counted_data_kept_then_dropped_and_store_keeps_going() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.buffer_limit = 2000;
    let (mut store, _) = open(&cfg);
    let line = br#"{"type":"message_update","delta":"0123456789"}"#;
    store.ensure_session("full", None, None, at(0));
    store.redirect_writes("full", Some(PathBuf::from("/dev/full")));
    store.append("full", "p", LineRecord::Event(line), at(1));
    store.append("ok", "q", LineRecord::Event(line), at(1));
    let r = store.flush(1 << 20);
    assert!(r.failed.is_some(), "ENOSPC reported");
    assert!(r.pending);
    assert!(r.written > 0, "the healthy session was still written");
    assert_eq!(parsed_lines(&log_path(&cfg, "ok")).len(), 1);
    let h = store.health();
    assert_eq!(h.failed_writes, 1);
    assert_eq!(h.lost_bytes, 0, "failed data stays buffered");
    assert!(h.last_error.as_deref().is_some_and(|e| e.contains("full")));

    // Keep appending while writes fail: past 1.5 × buffer_limit new lines
    // are dropped and counted.
    let mut appended = 1;
    for n in 0..200 {
        store.append("full", "p", LineRecord::Event(line), at(2 + n));
        appended += 1;
        let r = store.flush(1 << 20);
        assert!(r.failed.is_some());
    }
    let h = store.health();
    assert!(h.failed_writes > 1);
    assert!(h.lost_records > 0 && h.lost_bytes > 0);
    assert!(
        store.pending_bytes("full") <= 3000 + 200,
        "bounded: {}",
        store.pending_bytes("full")
    );
    assert!(store.over_limit("full"));
    // Lifecycle records are never dropped.
    store.exit(
        "full",
        &ExitRecord {
            pane: "p",
            state: "error",
            code: None,
            signal: Some(9),
            reason: Some("killed"),
            planned: false,
        },
        at(500),
    );
    // The healthy session is unaffected.
    store.append("ok", "q", LineRecord::Event(line), at(501));

    store.redirect_writes("full", None);
    drain(&mut store);
    let lines = parsed_lines(&log_path(&cfg, "full"));
    let kept = appended - h.lost_records as usize;
    assert_eq!(lines.len(), kept + 1);
    assert_eq!(lines.last().expect("exit line")["colibri"], "exit");
    assert_eq!(parsed_lines(&log_path(&cfg, "ok")).len(), 2);
    assert_eq!(store.health().pending_bytes, 0);
    assert_eq!(store.health().lost_records, h.lost_records);
}

fn classify(_runtime: Option<&str>, ev: &[u8]) -> LineClass {
    let v: Value = serde_json::from_slice(ev).expect("classifier gets the verbatim event");
    match v["type"].as_str() {
        Some("delta") => LineClass::Delta,
        Some("turn_end") => LineClass::Boundary,
        _ => LineClass::Keep,
    }
}

fn ev_types(lines: &[Value], pane: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["pane"] == pane)
        .filter_map(|l| {
            l["ev"]["type"].as_str().map(|t| {
                format!(
                    "{t}{}",
                    l["ev"]["n"]
                        .as_u64()
                        .map_or(String::new(), |n| n.to_string())
                )
            })
        })
        .collect()
}

fn ev(kind: &str, n: u64) -> Vec<u8> {
    format!("{{\"type\":\"{kind}\",\"n\":{n}}}").into_bytes()
}

#[test]
fn compaction_drops_only_deltas_of_finished_turns() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("a", &argv), at(0));
    store.attach("s1", &attach_rec("b", &argv), at(0));
    let script: &[(&str, &str, u64)] = &[
        ("a", "turn_start", 1),
        ("a", "delta", 1),
        ("b", "delta", 1),
        ("a", "delta", 2),
        ("a", "tool", 1),
        ("a", "delta", 3),
        ("a", "turn_end", 1),
        ("a", "turn_start", 2),
        ("a", "delta", 4),
        ("b", "tool", 2),
    ];
    for (n, (pane, kind, k)) in script.iter().enumerate() {
        store.append(
            "s1",
            pane,
            LineRecord::Event(&ev(kind, *k)),
            at(1 + n as u64),
        );
    }
    // Unflushed records are flushed by compaction itself.
    let before_len = store.pending_bytes("s1") as u64;
    let report = store.compact("s1", &classify).expect("compacts");
    assert_eq!(report.before_bytes, before_len);
    assert_eq!(
        report.dropped_lines, 3,
        "a's three deltas before its turn_end"
    );
    let path = log_path(&cfg, "s1");
    assert_eq!(report.after_bytes, fs::metadata(&path).expect("stat").len());
    let lines = parsed_lines(&path);
    assert_eq!(lines[0]["colibri"], "compacted");
    assert_eq!(lines[0]["dropped"], 3);
    assert_eq!(
        ev_types(&lines, "a"),
        ["turn_start1", "tool1", "turn_end1", "turn_start2", "delta4"]
    );
    assert_eq!(
        ev_types(&lines, "b"),
        ["delta1", "tool2"],
        "b never finished a turn"
    );
    assert_eq!(lines.iter().filter(|l| l["colibri"] == "attach").count(), 2);
    let meta = store.get("s1").expect("meta");
    assert_eq!(meta.rotated, 1);
    assert_eq!(meta.bytes, report.after_bytes);

    // Appending after compaction goes to the new file; a second
    // compaction accumulates the count under a single marker.
    store.append("s1", "a", LineRecord::Event(&ev("turn_end", 2)), at(50));
    let again = store.compact("s1", &classify).expect("compacts again");
    assert_eq!(again.dropped_lines, 1);
    let lines = parsed_lines(&path);
    assert_eq!(
        lines.iter().filter(|l| l["colibri"] == "compacted").count(),
        1
    );
    assert_eq!(lines[0]["dropped"], 4);
    assert_eq!(
        ev_types(&lines, "a"),
        [
            "turn_start1",
            "tool1",
            "turn_end1",
            "turn_start2",
            "turn_end2"
        ]
    );
    // Nothing left to drop: the log is not rewritten.
    let none = store.compact("s1", &classify).expect("no-op");
    assert_eq!(none.dropped_lines, 0);
    assert_eq!(none.before_bytes, none.after_bytes);
    store.sync().expect("sync writes the index");
    drop(store);

    let (store, rec) = open(&cfg);
    assert_eq!(rec.corrupt_lines, 0);
    let a = rec.panes.iter().find(|p| p.pane == "a").expect("a");
    assert_eq!(a.events.len(), 5);
    assert_eq!(store.get("s1").expect("meta").rotated, 2);
}

#[test]
fn leftovers_of_interrupted_compaction_and_index_writes_are_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    {
        let (mut store, _) = open(&cfg);
        store.append("s1", "p", LineRecord::Event(&ev("turn_start", 1)), at(1));
        store.sync().expect("sync");
    }
    let path = log_path(&cfg, "s1");
    let log_before = fs::read(&path).expect("log");
    let stale = cfg.dir.join("s1.jsonl.compact.new");
    fs::write(
        &stale,
        b"{\"ts\":\"2026-05-27T12:00:00.000Z\",\"pane\":\"\",\"colibri\":\"compacted\"",
    )
    .expect("stale");
    fs::write(cfg.dir.join("index.json.new"), b"{torn").expect("stale index");
    let (store, rec) = open(&cfg);
    assert!(rec.problems.is_empty(), "{:?}", rec.problems);
    assert!(!stale.exists());
    assert!(!cfg.dir.join("index.json.new").exists());
    assert_eq!(fs::read(&path).expect("log"), log_before);
    assert_eq!(store.list().len(), 1, "the .new file is not a session");
    assert_eq!(rec.panes[0].events.len(), 1);
}

/// Steps the running rotation to its end; returns it and the number of
/// steps taken. Every step reads at most `budget` bytes.
fn finish_rotation(store: &mut SessionStore, budget: usize) -> (RotationDone, usize) {
    let mut steps = 0;
    loop {
        steps += 1;
        match store
            .compaction_step(budget)
            .expect("a rotation is running")
        {
            CompactionProgress::Working { read_bytes } => {
                assert!(read_bytes <= budget, "step read {read_bytes} > {budget}");
                assert!(read_bytes > 0, "every step makes progress");
            }
            CompactionProgress::Done {
                read_bytes,
                rotation,
            } => {
                assert!(read_bytes <= budget, "step read {read_bytes} > {budget}");
                return (rotation, steps);
            }
        }
    }
}

/// Two panes with their own runtimes, an earlier marker, a corrupt line,
/// finished and unfinished turns: what both compactions get.
fn rotation_fixture(cfg: &StoreConfig) {
    fs::create_dir_all(&cfg.dir).expect("mkdir");
    let mut log = Vec::new();
    log.extend_from_slice(
        b"{\"ts\":\"2026-05-27T12:00:00.000Z\",\"pane\":\"\",\"colibri\":\"compacted\",\"dropped\":7}\n",
    );
    log.extend_from_slice(b"garbage {\n");
    fs::write(log_path(cfg, "s1"), &log).expect("write log");
    let (mut store, _) = open(cfg);
    let argv = vec!["pi".to_string()];
    store.attach("s1", &attach_rec("a", &argv), at(0));
    store.attach("s1", &attach_rec("b", &argv), at(0));
    for n in 0..300 {
        let pane = if n % 3 == 0 { "b" } else { "a" };
        let kind = match n % 17 {
            16 => "turn_end",
            5 => "tool",
            _ => "delta",
        };
        store.append("s1", pane, LineRecord::Event(&ev(kind, n)), at(1 + n));
    }
    store.append("s1", "a", LineRecord::Event(&ev("delta", 999)), at(400));
    drain(&mut store);
}

#[test]
fn rotation_in_small_steps_matches_synchronous_compaction() {
    let sync_dir = tempfile::tempdir().expect("tempdir");
    let sync_cfg = config(sync_dir.path());
    rotation_fixture(&sync_cfg);
    let (mut store, _) = open(&sync_cfg);
    store.heartbeat(at(1000));
    let want = store.compact("s1", &classify).expect("compacts");
    assert!(want.dropped_lines > 100, "{want:?}");
    let want_log = fs::read(log_path(&sync_cfg, "s1")).expect("log");

    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 1000;
    rotation_fixture(&cfg);
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    assert_eq!(store.heartbeat(at(1000)).as_deref(), Some("s1"));
    let budget = 200;
    let (done, steps) = finish_rotation(&mut store, budget);
    let report = done.outcome.expect("rotation succeeded");
    assert_eq!(report, want);
    // Two passes over the log, `budget` bytes at a time.
    assert!(
        steps as u64 >= 2 * want.before_bytes / budget as u64,
        "{steps} steps"
    );
    assert_eq!(fs::read(log_path(&cfg, "s1")).expect("log"), want_log);
    assert!(!cfg.dir.join("s1.jsonl.compact.new").exists());
    let meta = store.get("s1").expect("s1");
    assert_eq!(meta.bytes, want.after_bytes);
    assert_eq!(meta.rotated, 2, "the fixture's marker counts as one");
    assert!(store.compaction_step(budget).is_none(), "no job left");
}

#[test]
fn appends_during_a_rotation_all_survive_in_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 1000;
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    for n in 0..100 {
        store.append("s1", "p", LineRecord::Event(&ev("delta", n)), at(n));
    }
    store.append("s1", "p", LineRecord::Event(&ev("turn_end", 100)), at(100));
    drain(&mut store);
    assert_eq!(store.heartbeat(at(101)).as_deref(), Some("s1"));
    // One append per step, deltas included: the tail is copied verbatim.
    let mut n = 200;
    let done = loop {
        store.append("s1", "p", LineRecord::Event(&ev("delta", n)), at(n));
        n += 1;
        // A flush budget smaller than the step's, as in the daemon.
        store.flush(60);
        match store.compaction_step(120).expect("running") {
            CompactionProgress::Working { .. } => {}
            CompactionProgress::Done { rotation, .. } => break rotation,
        }
        assert!(n < 10_000, "the tail copy catches up");
    };
    let report = done.outcome.expect("rotation succeeded");
    assert_eq!(report.dropped_lines, 100);
    for k in 0..3 {
        store.append("s1", "p", LineRecord::Event(&ev("delta", n + k)), at(n));
    }
    drain(&mut store);
    let appended: Vec<String> = (200..n + 3).map(|k| format!("delta{k}")).collect();
    let mut want = vec!["turn_end100".to_string()];
    want.extend(appended);
    let path = log_path(&cfg, "s1");
    let lines = parsed_lines(&path);
    assert_eq!(lines[0]["colibri"], "compacted");
    assert_eq!(ev_types(&lines, "p"), want);
    assert_eq!(
        store.get("s1").expect("s1").bytes,
        fs::metadata(&path).expect("stat").len()
    );
    store.sync().expect("sync");
    drop(store);
    let (_, rec) = open(&cfg);
    assert_eq!(rec.corrupt_lines, 0);
    assert_eq!(rec.panes[0].events.len(), want.len());
}

#[test]
fn a_crash_mid_rotation_leaves_the_log_intact_and_usable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 1000;
    let path = log_path(&cfg, "s1");
    let before = {
        let (mut store, _) = open(&cfg);
        store.set_classifier(Box::new(classify));
        for n in 0..100 {
            store.append("s1", "p", LineRecord::Event(&ev("delta", n)), at(n));
        }
        store.append("s1", "p", LineRecord::Event(&ev("turn_end", 100)), at(100));
        drain(&mut store);
        assert!(store.heartbeat(at(101)).is_some());
        let size = fs::metadata(&path).expect("stat").len() as usize;
        // Past the scan, into the write pass: the .new file exists.
        let mut read = 0;
        while read < size + size / 2 {
            match store.compaction_step(500).expect("running") {
                CompactionProgress::Working { read_bytes } => read += read_bytes,
                CompactionProgress::Done { .. } => panic!("finished too early"),
            }
        }
        assert!(cfg.dir.join("s1.jsonl.compact.new").exists());
        store.append("s1", "p", LineRecord::Event(&ev("delta", 200)), at(200));
        drain(&mut store);
        fs::read(&path).expect("log")
        // The store is dropped here, mid-job, as in a crash.
    };
    let (mut store, rec) = open(&cfg);
    assert!(rec.problems.is_empty(), "{:?}", rec.problems);
    assert!(!cfg.dir.join("s1.jsonl.compact.new").exists());
    assert_eq!(
        fs::read(&path).expect("log"),
        before,
        "the log is untouched"
    );
    assert_eq!(rec.panes[0].events.len(), 102);
    store.set_classifier(Box::new(classify));
    store.append("s1", "p", LineRecord::Event(&ev("tool", 201)), at(201));
    drain(&mut store);
    assert!(
        store.heartbeat(at(300)).is_some(),
        "due again after the crash"
    );
    let (done, _) = finish_rotation(&mut store, 500);
    assert_eq!(done.outcome.expect("rotation succeeded").dropped_lines, 100);
    assert_eq!(
        ev_types(&parsed_lines(&path), "p"),
        ["turn_end100", "delta200", "tool201"]
    );
}

#[test]
fn heartbeat_rotates_a_log_past_rotate_bytes_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 2000;
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    store.append("small", "p", LineRecord::Event(&ev("delta", 0)), at(0));
    for n in 0..40 {
        store.append("big", "p", LineRecord::Event(&ev("delta", n)), at(n));
    }
    store.append("big", "p", LineRecord::Event(&ev("turn_end", 1)), at(41));
    drain(&mut store);
    let before = store.get("big").expect("big").bytes;
    assert!(before > 2000);
    assert_eq!(store.heartbeat(at(100)).as_deref(), Some("big"));
    assert!(store.compaction_active());
    let (done, _) = finish_rotation(&mut store, usize::MAX);
    assert!(!store.compaction_active());
    assert_eq!(done.session, "big");
    let report = done.outcome.as_ref().expect("rotation succeeded");
    assert_eq!(report.dropped_lines, 40);
    assert_eq!(report.before_bytes, before);
    let lines = parsed_lines(&log_path(&cfg, "big"));
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0]["ts"],
        at(100).to_rfc3339(),
        "the marker carries the heartbeat's time"
    );
    assert_eq!(store.get("big").expect("big").rotated, 1);
    assert!(
        store.heartbeat(at(200)).is_none(),
        "not due again until it grows rotate_bytes more"
    );
    // The heartbeat wrote the index.
    let index: Value =
        serde_json::from_slice(&fs::read(cfg.dir.join("index.json")).expect("index"))
            .expect("index parses");
    assert_eq!(index["sessions"].as_array().expect("sessions").len(), 2);
}

#[test]
fn heartbeat_rotates_on_turns_and_index_keeps_turn_counts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_turns = 3;
    {
        let (mut store, _) = open(&cfg);
        store.append("s1", "p", LineRecord::Event(&ev("turn_start", 1)), at(0));
        // Rotation does not flush (that is the daemon's per-wakeup flush).
        drain(&mut store);
        store.note_turns("s1", 1);
        store.note_turns("s1", 1);
        assert!(store.heartbeat(at(1)).is_none());
        store.note_turns("s1", 1);
        assert_eq!(store.heartbeat(at(2)).as_deref(), Some("s1"));
        let (done, _) = finish_rotation(&mut store, usize::MAX);
        assert!(done.outcome.is_ok());
        store.note_turns("s1", 1);
        assert!(store.heartbeat(at(3)).is_none());
    }
    let (store, _) = open(&cfg);
    assert_eq!(store.get("s1").expect("s1").turn_count, 4, "from the index");
}

#[test]
fn list_get_and_dump() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.ensure_session("s1", Some("pi"), Some("/repo"), at(0));
    store.ensure_session("s2", None, None, at(5));
    store.ensure_session("s1", Some("codex"), None, at(6));
    store.attach("s1", &attach_rec("p1", &argv), at(1));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(2));
    store.note_turns("s1", 1);
    store.exit(
        "s1",
        &ExitRecord {
            pane: "p1",
            state: "done",
            code: Some(0),
            signal: None,
            reason: None,
            planned: false,
        },
        at(3),
    );
    let ids: Vec<&str> = store.list().iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"]);
    let m = store.get("s1").expect("s1");
    assert_eq!(
        m.runtime.as_deref(),
        Some("pi"),
        "ensure_session reuses, keeps the first runtime"
    );
    assert_eq!(m.final_state.as_deref(), Some("done"));
    assert_eq!(m.exit_code, Some(0));
    assert_eq!(m.turn_count, 1);
    assert!(store.get("nope").is_none());

    // dump shows the buffered records too, and says they are unwritten.
    let d = dump_json(&mut store, "s1");
    assert_eq!(d["records"].as_array().map(Vec::len), Some(3));
    assert!(d["unflushed_bytes"].as_u64() > Some(0));
    store.flush(usize::MAX);
    let d = dump_json(&mut store, "s1");
    let records = d["records"].as_array().expect("records");
    assert_eq!(records.len(), 3);
    assert_eq!(records[1]["ev"]["type"], "turn_start");
    assert_eq!(d["session"]["id"], "s1");
    assert_eq!(d["session"]["turn_count"], 1);
    assert_eq!(d["session"]["created_at"], at(0).to_rfc3339());
    assert_eq!(d["unflushed_bytes"], 0);
    assert_eq!(
        dump_json(&mut store, "s2")["records"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    assert!(matches!(
        store.dump("nope"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.dump("../etc"),
        Err(StoreError::InvalidSessionId { .. })
    ));

    // A log over the dump limit is refused (sparse file, no real I/O).
    let f = OpenOptions::new()
        .write(true)
        .open(log_path(&cfg, "s1"))
        .expect("open log");
    f.set_len(MAX_DUMP_BYTES + 1).expect("grow sparse");
    let err = store.dump("s1").expect_err("too large");
    assert!(matches!(err, StoreError::TooLarge { .. }));
    assert!(err.to_string().contains("limit"));
}

#[test]
fn invalid_session_ids_are_rejected() {
    for ok in [
        "s",
        "sess-1",
        "019e5e59-6645.x_y",
        "a.jsonl",
        &"x".repeat(128),
    ] {
        assert!(SessionStore::valid_session_id(ok), "{ok}");
    }
    for bad in [
        "",
        ".hidden",
        "..",
        "a/b",
        "../x",
        "a b",
        "é",
        "a\0",
        &"x".repeat(129),
    ] {
        assert!(!SessionStore::valid_session_id(bad), "{bad:?}");
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.ensure_session("../evil", None, None, at(0));
    store.append("../evil", "p", LineRecord::Event(b"{}"), at(0));
    assert!(store.list().is_empty());
    assert_eq!(store.health().lost_records, 1);
    assert!(store.health().last_error.is_some());
    assert!(matches!(
        store.compact("a/b", &classify),
        Err(StoreError::InvalidSessionId { .. })
    ));
    drain(&mut store);
    assert!(!tmp.path().join("evil.jsonl").exists());
}

#[test]
fn open_fds_stay_bounded_and_steady_state_buffers_are_reused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    for n in 0..(MAX_OPEN_LOGS as u64 * 2) {
        store.append(
            &format!("s{n}"),
            "p",
            LineRecord::Event(&ev("turn_start", n)),
            at(n),
        );
        drain(&mut store);
        assert!(open_fds(&store) <= MAX_OPEN_LOGS);
    }
    assert_eq!(open_fds(&store), MAX_OPEN_LOGS);
    assert_eq!(store.list().len(), MAX_OPEN_LOGS * 2);

    // After warm-up, append + flush cycles allocate no buffer: s0 gives its
    // buffer back once all is written, and its next line goes into the
    // largest spare, taken from the pool (not a fresh buffer).
    let line = ev("message_update", 7);
    let i = store.by_id["s0"];
    for n in 0..100 {
        drain(&mut store);
        assert_eq!(
            store.sessions[i].buf.capacity(),
            0,
            "given back at cycle {n}"
        );
        let spares = store.session_spares.len();
        let largest = store.session_spares.iter().map(Vec::capacity).max();
        assert!(spares > 0 && largest >= Some(line.len()), "cycle {n}");
        store.append("s0", "p", LineRecord::Event(&line), at(1000 + n));
        assert_eq!(
            store.session_spares.len(),
            spares - 1,
            "a spare taken at cycle {n}"
        );
        assert_eq!(Some(store.sessions[i].buf.capacity()), largest, "cycle {n}");
    }
    drain(&mut store);
    assert_eq!(parsed_lines(&log_path(&cfg, "s0")).len(), 101);
}

#[test]
fn sync_writes_the_index_and_a_corrupt_index_is_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    {
        let (mut store, _) = open(&cfg);
        store.append("s1", "p", LineRecord::Event(&ev("turn_start", 1)), at(1));
        store.note_turns("s1", 1);
        store.sync().expect("sync");
    }
    assert!(cfg.dir.join("index.json").exists());
    assert_eq!(open(&cfg).0.get("s1").expect("s1").turn_count, 1);
    fs::write(cfg.dir.join("index.json"), b"{not json").expect("corrupt index");
    let (store, rec) = open(&cfg);
    assert_eq!(rec.problems.len(), 1, "{:?}", rec.problems);
    let m = store.get("s1").expect("rebuilt from the log");
    assert_eq!(m.panes, vec!["p"]);
    assert_eq!(m.turn_count, 0, "turns live only in the index");
}

#[test]
fn recovery_caps_event_bytes_releasing_finished_panes_first() {
    let mut rb = scan::RecoveryBuilder::new(100);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    {
        let (mut store, _) = open(&cfg);
        store.attach("s1", &attach_rec("done", &argv), at(0));
        store.append(
            "s1",
            "done",
            LineRecord::Event(&ev("delta", 1234567)),
            at(1),
        );
        store.append(
            "s1",
            "done",
            LineRecord::Event(&ev("delta", 1234567)),
            at(2),
        );
        store.exit(
            "s1",
            &ExitRecord {
                pane: "done",
                state: "done",
                code: Some(0),
                signal: None,
                reason: None,
                planned: false,
            },
            at(3),
        );
        store.attach("s1", &attach_rec("live", &argv), at(4));
        for n in 0..5 {
            store.append(
                "s1",
                "live",
                LineRecord::Event(&ev("delta", 1234567)),
                at(5 + n),
            );
        }
        drain(&mut store);
    }
    scan::scan_log(&log_path(&cfg, "s1"), "s1", &mut rb).expect("scan");
    let mut rec = Recovery::default();
    rb.finish(&mut rec);
    let done = rec.panes.iter().find(|p| p.pane == "done").expect("done");
    let live = rec.panes.iter().find(|p| p.pane == "live").expect("live");
    assert!(
        done.events.is_empty() && done.events_truncated,
        "finished pane released first"
    );
    assert_eq!(live.events.len(), 3, "28-byte events under a 100-byte cap");
    assert!(live.events_truncated);
    assert_eq!(rec.events_dropped_bytes, 4 * 28);
}

#[test]
fn a_corrupt_middle_line_is_skipped_counted_and_compacted_away() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    fs::create_dir_all(&cfg.dir).expect("mkdir");
    let path = log_path(&cfg, "s1");
    let mut log = Vec::new();
    log.extend_from_slice(b"{\"ts\":\"2026-05-27T12:00:00.001Z\",\"pane\":\"p\",\"ev\":{\"type\":\"delta\",\"n\":1}}\n");
    log.extend_from_slice(b"garbage {\n");
    log.extend_from_slice(b"{\"ts\":\"2026-05-27T12:00:00.002Z\",\"pane\":\"p\",\"ev\":{\"type\":\"turn_end\",\"n\":1}}\n");
    fs::write(&path, &log).expect("write log");
    let (mut store, rec) = open(&cfg);
    assert_eq!(rec.corrupt_lines, 1);
    assert_eq!(rec.panes[0].events.len(), 2);
    assert_eq!(dump_json(&mut store, "s1")["corrupt_lines"], 1);
    let report = store.compact("s1", &classify).expect("compacts");
    assert_eq!(
        report.dropped_lines, 2,
        "the finished delta and the corrupt line"
    );
    let lines = parsed_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["ev"]["type"], "turn_end");
}

#[test]
fn open_skips_fifos_and_symlinks_instead_of_blocking_or_following() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path());
    std::fs::create_dir_all(&cfg.dir).expect("dir");
    // A FIFO would block a plain open for ever; a symlink could point at a
    // device. Neither is read as a log.
    nix::unistd::mkfifo(
        &cfg.dir.join("fifo.jsonl"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    std::os::unix::fs::symlink("/dev/zero", cfg.dir.join("zero.jsonl")).expect("symlink");
    let (store, recovery) = open(&cfg);
    assert!(store.list().is_empty(), "neither became a session");
    assert_eq!(
        recovery.problems.len(),
        2,
        "both reported: {:?}",
        recovery.problems
    );
}

#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path());
    let (first, _) = open(&cfg);
    match SessionStore::open(cfg.clone()) {
        Err(StoreError::Locked { .. }) => {}
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    drop(first);
    assert!(
        SessionStore::open(cfg).is_ok(),
        "free again once the first is gone"
    );
}

/// JSON a serde `Value` refuses but agents print: deeper than serde's
/// recursion limit, a number out of f64 range, a lone surrogate escape.
fn hostile_events() -> Vec<Vec<u8>> {
    // As deep as a line may be and still be embedded (a deeper one is
    // logged as text: `a_line_nested_too_deep_is_logged_as_text`).
    let depth = scan::MAX_EMBED_DEPTH - 1;
    let deep = format!("{{\"d\":{}1{}}}", "[".repeat(depth), "]".repeat(depth));
    vec![
        deep.into_bytes(),
        br#"{"type":"x","n":1e400}"#.to_vec(),
        br#"{"type":"message_update","t":"\ud83d"}"#.to_vec(),
        br#"{"t":"\udc00\ud83d tail"}"#.to_vec(),
    ]
}

#[test]
fn a_line_nested_too_deep_is_logged_as_text() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &["pi".to_string()]), at(0));
    let depth = scan::MAX_EMBED_DEPTH;
    let nest = |n: usize| format!("{{\"d\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    // The object counts one level: `nest(depth - 1)` is `depth` deep.
    let (fits, deeper) = (nest(depth - 1), nest(depth));
    for (n, line) in [&fits, &deeper].iter().enumerate() {
        let l = line.as_bytes();
        store.append("s1", "p1", LineRecord::Parsed(l), at(1 + n as u64));
        store.append("s1", "p1", LineRecord::Event(l), at(1 + n as u64));
    }
    let dump = store.dump("s1").expect("dump");
    let kinds: Vec<(bool, bool)> = dump.records[1..]
        .iter()
        .map(|r| {
            let f = scan::RecordFields::parse(r.get().as_bytes()).expect("a record");
            (f.ev.is_some(), f.raw.as_deref() == Some(deeper.as_str()))
        })
        .collect();
    assert_eq!(
        kinds,
        [(true, false), (true, false), (false, true), (false, true)]
    );
    // The whole reply parses with serde_json's default recursion limit.
    let reply = crate::protocol::ok_line(None, &dump);
    assert!(serde_json::from_slice::<serde_json::Value>(&reply).is_ok());
}

#[test]
fn json_that_serde_values_refuse_reads_back_byte_exact() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let events = hostile_events();
    {
        let (mut store, _) = open(&cfg);
        store.attach("s1", &attach_rec("p1", &argv), at(0));
        for (n, e) in events.iter().enumerate() {
            store.append("s1", "p1", LineRecord::Event(e), at(1 + n as u64));
        }
        let dump = store.dump("s1").expect("dump");
        assert_eq!(dump.corrupt_lines, 0);
        assert_eq!(dump.records.len(), 1 + events.len());
        for (rec, e) in dump.records[1..].iter().zip(&events) {
            let text = rec.get();
            let start = text.find(",\"ev\":").expect("an ev record") + 6;
            assert_eq!(&text.as_bytes()[start..text.len() - 1], &e[..]);
        }
        // The reply as the daemon sends it carries the same bytes.
        let reply = crate::protocol::ok_line(None, &dump);
        for e in &events {
            assert!(reply.windows(e.len()).any(|w| w == &e[..]));
        }
        store.flush(usize::MAX);
    }
    let (_, rec) = open(&cfg);
    assert_eq!(rec.corrupt_lines, 0);
    let got: Vec<&[u8]> = rec.panes[0]
        .events
        .iter()
        .map(|(_, e)| e.as_slice())
        .collect();
    let want: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
    assert_eq!(got, want);
}

#[test]
fn a_log_deleted_under_the_store_is_noticed_counted_and_started_anew() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(1));
    assert_eq!(store.flush(usize::MAX).replaced_logs, 0);
    fs::remove_file(log_path(&cfg, "s1")).expect("delete the log");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    let report = store.flush(usize::MAX);
    assert_eq!(report.replaced_logs, 1);
    assert_eq!(report.failed, None);
    assert!(report.pending, "the new log is written next");
    assert_eq!(store.flush(usize::MAX).replaced_logs, 0);
    assert_eq!(store.health().replaced_logs, 1);
    assert!(store
        .health()
        .last_error
        .is_some_and(|e| e.contains("deleted")));
    let lines = parsed_lines(&log_path(&cfg, "s1"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["colibri"], "log_replaced");
    assert_eq!(lines[1]["ev"]["type"], "turn_end");
    let d = dump_json(&mut store, "s1");
    assert_eq!(d["log_replaced"], 1);
    assert_eq!(d["records"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_log_moved_away_is_noticed_by_the_heartbeat() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    store.flush(usize::MAX);
    let away = tmp.path().join("moved.jsonl");
    fs::rename(log_path(&cfg, "s1"), &away).expect("move the log");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(2));
    store.heartbeat(at(1));
    assert_eq!(store.flush(usize::MAX).replaced_logs, 1);
    let lines = parsed_lines(&log_path(&cfg, "s1"));
    assert_eq!(lines[0]["colibri"], "log_replaced");
    assert_eq!(lines[1]["ev"]["type"], "turn_start");
    assert_eq!(parsed_lines(&away).len(), 1, "the moved file is left alone");
}

#[test]
fn records_that_cannot_reach_their_log_at_shutdown_are_rescued_byte_exact() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("ok", &attach_rec("p0", &argv), at(0));
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(1));
    // A directory where the log belongs: every open fails, even for root.
    fs::create_dir_all(log_path(&cfg, "s1")).expect("block the log path");
    let mut expected = Vec::new();
    {
        let s = &store.sessions[store.by_id["s1"]];
        expected.extend_from_slice(&s.buf[s.head..]);
    }
    assert!(store.sync().is_err());
    let unusable = tmp.path().join("no-such-dir").join("deeper");
    let base = tmp.path().join("rescue-base");
    fs::create_dir_all(&base).expect("mkdir");
    let pending = store.health().pending_bytes as u64;
    let outcome = store.rescue(at(2), &[unusable, base.clone()], pending, "boom".into());
    let ShutdownOutcome::Rescued { dir, bytes, .. } = &outcome else {
        panic!("not rescued: {outcome:?}");
    };
    assert!(dir.starts_with(&base), "{}", dir.display());
    assert_eq!(*bytes, expected.len() as u64);
    assert_eq!(
        fs::read(dir.join("s1.jsonl")).expect("rescued log"),
        expected
    );
    assert!(
        !dir.join("ok.jsonl").exists(),
        "the written session needs no rescue"
    );
    assert!(fs::read_to_string(dir.join("README")).is_ok_and(|t| t.contains("append")));
    assert!(!outcome.data_safe());
    assert!(outcome.to_string().contains(&dir.display().to_string()));

    // Nowhere to put it: said, not hidden.
    let lost = store.rescue(at(2), &[tmp.path().join("nope/x")], pending, "boom".into());
    assert!(matches!(lost, ShutdownOutcome::Lost { .. }), "{lost:?}");
    assert!(lost.to_string().contains("lost"));
}

#[test]
fn shutdown_flush_is_clean_when_every_log_takes_its_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    assert_eq!(store.shutdown_flush(at(1)), ShutdownOutcome::Clean);
    assert_eq!(parsed_lines(&log_path(&cfg, "s1")).len(), 1);
}

mod roundtrip {
    use proptest::prelude::*;

    use super::*;

    /// JSON object text with what agents really print and serde's `Value`
    /// refuses: deep nesting, out-of-range numbers, lone surrogates,
    /// escapes, raw U+2028, surrounding whitespace.
    fn leaf() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("1e400".to_string()),
            Just("-0.0e-999".to_string()),
            Just(r#""\ud83d""#.to_string()),
            Just(r#""\udc00\ud83d\u0000\n\"""#.to_string()),
            Just("\"\u{2028}é\"".to_string()),
            // Raw control bytes, which JSON forbids in strings and Pi's
            // lenient `title` lets through.
            Just("\"a\tb\u{1}\"".to_string()),
            Just(r#""turn_start""#.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "[a-z\\\\\"]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
            (0usize..200).prop_map(|d| format!("{}null{}", "[".repeat(d), "]".repeat(d))),
        ]
    }

    fn object_text() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec(
                (
                    prop_oneof![
                        "[a-z]{1,4}",
                        Just("type".to_string()),
                        Just("title".to_string())
                    ],
                    leaf(),
                ),
                0..6,
            ),
            " {0,2}",
            "[ \t]{0,2}",
        )
            .prop_map(|(fields, pre, post)| {
                let body: Vec<String> =
                    fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{pre}{{{}}}{post}", body.join(",")).into_bytes()
            })
    }

    /// A line Pi's adapter accepts, its lenient `title` holding any leaf,
    /// or bytes that are not UTF-8 (a stray byte, a cut character).
    fn pi_line() -> impl Strategy<Value = Vec<u8>> {
        let title = prop_oneof![
            4 => leaf().prop_map(String::into_bytes),
            1 => Just(b"\"a\xffb\"".to_vec()),
            1 => Just(b"\"\xce\"".to_vec()),
        ];
        (object_text(), title).prop_map(|(rest, title)| {
            let mut l = br#"{"type":"extension_ui_request","title":"#.to_vec();
            l.extend_from_slice(&title);
            let rest = record::trim_json_ws(&rest);
            if rest.len() > 2 {
                l.push(b',');
                l.extend_from_slice(&rest[1..]);
            } else {
                l.push(b'}');
            }
            l
        })
    }

    fn line() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            object_text(),
            pi_line(),
            any::<Vec<u8>>(),
            // Near misses: an object with a byte changed.
            (object_text(), any::<u8>(), any::<prop::sample::Index>()).prop_map(|(mut t, b, i)| {
                if !t.is_empty() {
                    let at = i.index(t.len());
                    t[at] = b;
                }
                t
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn anything_logged_reads_back_the_same(l in line()) {
            check_log_roundtrip(&l);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Through the real store, files and recovery: every event line
        /// comes back byte for byte, in order, and no line is corrupt.
        #[test]
        fn the_store_recovers_every_event_as_written(lines in prop::collection::vec(line(), 1..20)) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let cfg = config(tmp.path());
            let argv = vec!["pi".to_string()];
            let mut want = Vec::new();
            {
                let (mut store, _) = open(&cfg);
                store.attach("s1", &attach_rec("p1", &argv), at(0));
                for (n, l) in lines.iter().enumerate() {
                    store.append("s1", "p1", LineRecord::Event(l), at(1 + n as u64));
                    let t = record::trim_json_ws(l);
                    if record::embeddable_event(t)
                        && scan::reads_back(t)
                        && scan::nesting_within_limit(t)
                    {
                        want.push(t.to_vec());
                    }
                }
                let dump = store.dump("s1").expect("dump");
                prop_assert_eq!(dump.corrupt_lines, 0);
                prop_assert_eq!(dump.records.len(), 1 + lines.len());
                store.flush(usize::MAX);
            }
            let (_, rec) = open(&cfg);
            prop_assert_eq!(rec.corrupt_lines, 0);
            let got: Vec<Vec<u8>> = rec.panes[0].events.iter().map(|(_, e)| e.clone()).collect();
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn the_log_mark_is_reached_only_once_everything_buffered_before_it_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    let line = br#"{"type":"message_update","delta":"0123456789"}"#;
    for n in 0..100 {
        let id = if n % 2 == 0 { "a" } else { "b" };
        store.append(id, "p", LineRecord::Event(line), at(n));
    }
    let mark = store.log_mark();
    assert!(store.logged_through() < mark, "nothing is written yet");
    // Partial flushes (under a small budget) never reach the mark early.
    let mut calls = 0;
    loop {
        let r = store.flush(1000);
        calls += 1;
        if !r.pending {
            break;
        }
        assert!(store.logged_through() < mark || store.log_mark() <= store.logged_through());
        // Records buffered meanwhile get a later mark.
        if calls == 2 {
            store.append("a", "p", LineRecord::Event(line), at(200));
            assert!(store.log_mark() > mark || store.log_mark() > store.logged_through());
        }
    }
    assert!(calls > 2);
    assert!(store.logged_through() >= mark);
    assert!(store.log_mark() <= store.logged_through());
    assert_eq!(parsed_lines(&log_path(&cfg, "a")).len(), 51);
}

/// The streamed `get-session` reply (`daemon::session_stream`), its slices
/// joined; checks no slice reads more than its bound.
fn streamed(store: &SessionStore, id: &str, rid: Option<Value>) -> Vec<u8> {
    use crate::daemon::conn::BodyProgress;
    use crate::daemon::session_stream::{SessionStream, SLICE_BYTES};
    let src = store.open_dump(id).expect("open dump");
    let mut body = SessionStream::new(src, rid, 1 << 20);
    let mut out = Vec::new();
    loop {
        let mut slice = Vec::new();
        let progress = body.slice(&mut slice).expect("slice");
        // A slice is what it read (plus one carried record and the commas).
        assert!(slice.len() <= 2 * SLICE_BYTES, "{} bytes", slice.len());
        out.extend_from_slice(&slice);
        if progress == BodyProgress::Done {
            return out;
        }
    }
}

/// The reply line as it was made before streaming: the whole dump in
/// memory, through the same envelope as every other reply.
fn in_memory(store: &mut SessionStore, id: &str, rid: Option<Value>) -> Vec<u8> {
    let dump = store.dump(id).expect("dump");
    crate::protocol::ok_line(
        rid.as_ref(),
        &crate::protocol::Reply::Session(Box::new(dump)),
    )
}

#[test]
fn the_streamed_dump_is_the_in_memory_reply_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    fs::create_dir_all(&cfg.dir).expect("mkdir");
    // Enough records, one of them larger than a slice, that the stream's
    // slices cut lines and the carry is exercised; a corrupt middle line.
    let mut log = Vec::new();
    let big = format!(
        "{{\"ts\":\"2026-05-27T12:00:00.000Z\",\"pane\":\"p\",\"ev\":{{\"type\":\"big\",\"t\":\"{}\"}}}}\n",
        "x".repeat(300 << 10)
    );
    for n in 0..9_000 {
        let odd = match n % 4 {
            0 => "{ \"type\" : \"delta\" , \"n\" : [1, 2.50, 1e400] }".to_string(),
            1 => format!(
                "{{\"type\":\"deep\",\"d\":{}1{}}}",
                "[".repeat(130),
                "]".repeat(130)
            ),
            2 => r#"{"type":"message_update","t":"\ud83d"}"#.to_string(),
            _ => format!("{{\"type\":\"delta\",\"n\":{n}}}"),
        };
        log.extend_from_slice(
            format!("{{\"ts\":\"2026-05-27T12:00:00.001Z\",\"pane\":\"p\",\"ev\":{odd}}}\n")
                .as_bytes(),
        );
        if n == 4_000 {
            log.extend_from_slice(b"garbage {\n\n");
            log.extend_from_slice(big.as_bytes());
        }
    }
    fs::write(log_path(&cfg, "s1"), &log).expect("write log");
    let (mut store, rec) = open(&cfg);
    assert_eq!(rec.corrupt_lines, 1);
    // Records still buffered come after the log's, as in the dump.
    store.append("s1", "p", LineRecord::Event(br#"{"type":"late"}"#), at(1));
    store.append("s1", "p", LineRecord::Raw(b"late raw"), at(2));
    for rid in [
        None,
        Some(serde_json::json!(7)),
        Some(serde_json::json!({"k": "v"})),
    ] {
        let want = in_memory(&mut store, "s1", rid.clone());
        let got = streamed(&store, "s1", rid);
        assert!(got == want, "streamed reply differs from the in-memory one");
    }
    #[derive(serde::Deserialize)]
    struct Dump<'a> {
        #[serde(borrow)]
        records: Vec<&'a serde_json::value::RawValue>,
        corrupt_lines: u64,
        unflushed_bytes: usize,
    }
    let line = streamed(&store, "s1", None);
    let reply: crate::protocol::Response<Dump<'_>> =
        serde_json::from_slice(&line).expect("reply parses");
    let dump = reply.data.expect("data");
    assert_eq!(dump.corrupt_lines, 1);
    assert_eq!(dump.records.len(), 9_000 + 1 + 2);
    assert!(dump.unflushed_bytes > 0);
    drain(&mut store);
    assert_eq!(
        streamed(&store, "s1", None),
        in_memory(&mut store, "s1", None)
    );
    // No log yet: just the buffered records.
    store.ensure_session("s2", Some("pi"), None, at(3));
    store.append("s2", "p", LineRecord::Event(br#"{"type":"only"}"#), at(4));
    assert_eq!(
        streamed(&store, "s2", None),
        in_memory(&mut store, "s2", None)
    );
}

#[test]
fn a_stream_reads_the_log_as_it_was_asked_even_if_it_is_deleted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.ensure_session("s1", Some("pi"), None, at(0));
    for n in 0..1_000 {
        let ev = format!("{{\"type\":\"delta\",\"n\":{n}}}");
        store.append("s1", "p", LineRecord::Event(ev.as_bytes()), at(n));
    }
    drain(&mut store);
    let want = in_memory(&mut store, "s1", None);
    use crate::daemon::conn::BodyProgress;
    let src = store.open_dump("s1").expect("open dump");
    let mut body = crate::daemon::session_stream::SessionStream::new(src, None, 1 << 20);
    fs::remove_file(log_path(&cfg, "s1")).expect("rm log");
    store.append(
        "s1",
        "p",
        LineRecord::Event(br#"{"type":"after"}"#),
        at(2_000),
    );
    drain(&mut store);
    let mut got = Vec::new();
    while body.slice(&mut got).expect("slice") == BodyProgress::More {}
    assert!(got == want, "the stream shows the log as it was when asked");
}

#[test]
fn records_scanned_slice_by_slice_are_those_of_the_whole() {
    let mut log = Vec::new();
    for n in 0..500 {
        let line = match n % 7 {
            0 => "not json".to_string(),
            1 => String::new(),
            2 => format!("{{\"n\":{n},\"pad\":\"{}\"}}", "y".repeat(n)),
            3 => "[1,2]".to_string(),
            _ => format!("{{ \"n\" : {n} }}"),
        };
        log.extend_from_slice(line.as_bytes());
        log.push(b'\n');
    }
    log.extend_from_slice(b"{\"torn\":");
    let (want, want_corrupt) = scan::complete_records(&log);
    let want: Vec<String> = want.iter().map(|r| r.get().to_string()).collect();
    for step in [1, 2, 3, 7, 64, 1000, log.len()] {
        let mut scanner = RecordScanner::new(usize::MAX);
        let mut got = Vec::new();
        for piece in log.chunks(step) {
            scanner.feed(piece, |r| got.push(r.get().to_string()));
        }
        assert_eq!(got, want, "slices of {step}");
        assert_eq!(scanner.corrupt_lines(), want_corrupt, "slices of {step}");
    }
    // A line past the bound is counted corrupt and never held.
    let mut scanner = RecordScanner::new(10);
    let mut got = Vec::new();
    for piece in b"{\"a\":1}\n{\"long\":\"0123456789\"}\n{\"b\":2}\n".chunks(4) {
        scanner.feed(piece, |r| got.push(r.get().to_string()));
    }
    assert_eq!(got, [r#"{"a":1}"#, r#"{"b":2}"#]);
    assert_eq!(scanner.corrupt_lines(), 1);
}

/// Pi reads `title` leniently, so its adapter accepts bytes that are not
/// UTF-8 there; the log must not embed such a line as `ev`, and the one
/// scan for plain lines must not let it through.
#[test]
fn a_parsed_line_with_bytes_that_are_not_utf8_reads_back() {
    let mut pi = crate::core::taxonomy::Adapter::new(crate::core::taxonomy::Runtime::Pi);
    for line in [
        &b"{\"type\":\"extension_ui_request\",\"title\":\"a\xffb\"}"[..],
        &b"{\"type\":\"extension_ui_request\",\"title\":\"\xce\"}"[..],
    ] {
        assert!(pi.observe(line).is_ok(), "Pi's adapter takes it");
        check_log_roundtrip(line);
    }
}

#[test]
fn a_parsed_line_with_a_raw_control_byte_in_a_lenient_string_is_logged_raw() {
    // Pi reads `title` leniently (as bytes), so its adapter accepts a raw
    // tab inside it; the log's reader does not, so the cheap check for
    // parsed lines must send it to `raw`, and a clean line to `ev`.
    let tab = b"{\"type\":\"extension_ui_request\",\"title\":\"a\tb\"}";
    let clean = br#"{"type":"turn_start","pad":"x"}"#;
    let mut pi = crate::core::taxonomy::Adapter::new(crate::core::taxonomy::Runtime::Pi);
    assert!(pi.observe(tab).is_ok(), "Pi's adapter takes the raw tab");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    store.append("s1", "p1", LineRecord::Parsed(tab), at(1));
    store.append("s1", "p1", LineRecord::Parsed(clean), at(2));
    let dump = store.dump("s1").expect("dump");
    assert_eq!(dump.corrupt_lines, 0);
    let texts: Vec<&str> = dump.records[1..].iter().map(|r| r.get()).collect();
    assert!(
        texts[0].contains(r#","raw":"{\"type\":\"extension_ui_request\",\"title\":\"a\tb\"}""#),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].ends_with(r#","ev":{"type":"turn_start","pad":"x"}}"#),
        "{}",
        texts[1]
    );
}

/// A store whose writes run on the writer thread, as in the daemon (the
/// other tests run them inline), with pane `p1` attached to session `s1`;
/// the poll is the one the thread wakes.
fn threaded_store(cfg: &StoreConfig) -> (SessionStore, mio::Poll) {
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(cfg);
    let poll = mio::Poll::new().expect("poll");
    store
        .start_writer(poll.registry(), mio::Token(0))
        .expect("writer thread");
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    (store, poll)
}

/// Flushes with `budget` as the loop does, waiting for the writer's wakeup
/// while a batch is out, until `done`.
fn flush_until(
    store: &mut SessionStore,
    poll: &mut mio::Poll,
    budget: usize,
    done: impl Fn(&SessionStore) -> bool,
) {
    let mut events = mio::Events::with_capacity(4);
    let mut flushes = 0;
    while !done(store) {
        flushes += 1;
        assert!(flushes <= 10_000, "not done after {flushes} flushes");
        if store.waiting_for_writer() {
            poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
                .expect("poll");
        }
        store.flush(budget);
    }
}

#[test]
fn the_read_ahead_fills_only_while_a_batch_is_with_the_writer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = StoreConfig {
        buffer_limit: 64 << 20,
        flush_budget: 64 << 20,
        ..config(tmp.path())
    };
    let (mut store, mut poll) = threaded_store(&cfg);
    let line = br#"{"type":"message_update","delta":"0123456789abcdef0123456789abcdef"}"#;
    let fill = |store: &mut SessionStore, bytes: usize| {
        let before = store.health().pending_bytes;
        while store.health().pending_bytes < before + bytes {
            store.append("s1", "p1", LineRecord::Parsed(line), at(1));
        }
    };
    // Nothing with the writer: however much is buffered, no read-ahead
    // holds the agents (buffer_limit does).
    fill(&mut store, READ_AHEAD * 2);
    assert!(!store.read_ahead_full());
    store.flush(usize::MAX);
    assert!(store.waiting_for_writer());
    fill(&mut store, READ_AHEAD / 2);
    assert!(!store.read_ahead_full(), "under the read-ahead");
    fill(&mut store, READ_AHEAD / 2);
    assert!(store.read_ahead_full(), "the read-ahead is full");
    // The batch is done: what was read ahead goes to the writer and agents
    // are read again.
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        !(s.waiting_for_writer() && s.read_ahead_full())
    });
    assert!(!store.read_ahead_full());
}

#[test]
fn a_line_buffered_while_a_batch_is_out_is_not_covered_by_that_batch() {
    // The loop reads agents while the writer writes; a line buffered then
    // is in the next batch, so a frame that reports it must wait for that
    // one, even though its session is already in the batch out (and so not
    // queued again).
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, mut poll) = threaded_store(&config(tmp.path()));
    store.append("s1", "p1", LineRecord::Parsed(&ev("turn_start", 1)), at(1));
    store.flush(usize::MAX);
    assert!(store.waiting_for_writer());
    let covered = store.log_mark();
    store.append("s1", "p1", LineRecord::Parsed(&ev("turn_end", 2)), at(2));
    let mark = store.log_mark();
    assert!(mark > covered, "the batch out does not hold the new line");
    // Collect only (budget 0): the batch out finishes, no new one starts.
    flush_until(&mut store, &mut poll, 0, |s| s.logged_through() >= covered);
    assert!(
        store.logged_through() < mark || store.pending_bytes("s1") == 0,
        "frames marked {mark} may leave (logged through {}) with {} bytes unwritten",
        store.logged_through(),
        store.pending_bytes("s1")
    );
    // The next batch holds it, and reaches the mark.
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        s.logged_through() >= mark
    });
    assert_eq!(store.pending_bytes("s1"), 0);
}

/// A writer thread that dies with a batch in hand: the loop writes inline
/// from then on, and the batch's records are written again, not left in
/// memory for good.
#[test]
fn a_batch_lost_with_a_dead_writer_thread_is_written_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.ensure_session("s1", Some("pi"), Some("/repo"), at(0));
    store.attach("s1", &attach_rec("p1", &argv), at(1));
    drain(&mut store);
    if let Writer::Inline(w) = &mut store.link.writer {
        w.panic_on_batch = true;
    }
    let poll = mio::Poll::new().expect("poll");
    store
        .start_writer(poll.registry(), mio::Token(0))
        .expect("writer thread starts");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(2));
    store.flush(usize::MAX);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while matches!(store.link.writer, Writer::Thread(_)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer thread died"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        store.flush(usize::MAX);
    }
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(3));
    drain(&mut store);
    store.sync().expect("sync");
    let lines = parsed_lines(&log_path(&cfg, "s1"));
    assert_eq!(ev_types(&lines, "p1"), ["turn_start1", "turn_end2"]);
}

/// Thread mode with session `s2` on a failing log (`/dev/full`) waiting
/// for its retry, and `s1` healthy.
fn one_log_failing(tmp: &Path) -> (SessionStore, mio::Poll) {
    let cfg = config(tmp);
    let (mut store, mut poll) = threaded_store(&cfg);
    let argv = vec!["pi".to_string()];
    store.attach("s2", &attach_rec("p2", &argv), at(0));
    store.redirect_writes("s2", Some(PathBuf::from("/dev/full")));
    store.append("s2", "p2", LineRecord::Event(&ev("turn_start", 1)), at(1));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(1));
    // The append to /dev/full failed, and no batch is out.
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        s.link.failing_sessions > 0 && !s.waiting_for_writer()
    });
    (store, poll)
}

/// A writer thread that dies while a session waits for its retry: inline,
/// the session is retried at each flush, so the loop neither spins on a
/// store that says "pending, not failing" nor holds replies until the
/// heartbeat.
#[test]
fn a_session_waiting_for_its_retry_when_the_writer_thread_dies_is_retried_inline() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, _poll) = one_log_failing(tmp.path());
    store.writer_died(&std::io::Error::other("the log writer has stopped"));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    for _ in 0..3 {
        let r = store.flush(usize::MAX);
        let frames_wait = store.log_mark() > store.logged_through();
        assert!(
            !(r.pending && r.failed.is_none() && frames_wait),
            "pending, not failing, and frames held: the loop would spin"
        );
    }
}

/// The failing episode lasts until the failed log takes an append: a
/// batch of the other session's records that succeeds meanwhile does not
/// end it (which would say "writes succeed again", then alert again).
#[test]
fn a_failure_episode_ends_only_when_the_failed_log_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, mut poll) = one_log_failing(tmp.path());
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    assert!(store.flush(usize::MAX).failed.is_some());
    store.heartbeat(at(3));
    let mut events = mio::Events::with_capacity(4);
    for _ in 0..6 {
        if store.waiting_for_writer() {
            poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
                .expect("poll");
        }
        let r = store.flush(usize::MAX);
        assert!(
            r.failed.is_some(),
            "reported as recovered while s2 still fails ({} bytes written)",
            r.written
        );
    }
}

/// `get-session` of the failing session says why its records are not on
/// disk, though the other session's appends succeed; the healthy one's
/// says nothing of it.
#[test]
fn the_flush_error_of_a_dump_is_its_own_sessions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, mut poll) = one_log_failing(tmp.path());
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        s.pending_bytes("s1") == 0 && !s.waiting_for_writer()
    });
    assert!(store.pending_bytes("s2") > 0);
    let failing = store.dump("s2").expect("dump s2");
    assert!(failing.flush_error.is_some(), "s2's records are stuck");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 3)), at(4));
    let healthy = store.dump("s1").expect("dump s1");
    assert!(healthy.flush_error.is_none(), "{:?}", healthy.flush_error);
}

/// While one log waits for its retry, the other sessions' frames still
/// wait for their own records (the loop holds a frame while `pending` and
/// not `release_frames`, until `logged_through` reaches its mark); the
/// waiting log's records alone keep nothing pending, so nothing spins.
#[test]
fn a_log_waiting_for_its_retry_does_not_release_the_other_sessions_frames() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, mut poll) = one_log_failing(tmp.path());
    let r = store.flush(usize::MAX);
    assert!(r.failed.is_some(), "the episode goes on");
    assert!(!r.pending, "only the waiting log's records are buffered");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    let r = store.flush(usize::MAX);
    let mark = store.log_mark();
    assert!(r.pending && !r.release_frames, "{r:?}");
    assert!(
        store.logged_through() < mark,
        "the frame waits for s1's record"
    );
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        !s.waiting_for_writer() && s.pending_bytes("s1") == 0
    });
    assert!(store.logged_through() >= mark, "s1's record is on disk");
    assert!(store.pending_bytes("s2") > 0);
}

/// The backlog of a log waiting for its retry was buffered before the
/// batch out: it is not read-ahead, so it does not hold the running agents
/// of the other sessions while the batch is written.
#[test]
fn a_waiting_logs_backlog_is_not_read_ahead() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, _poll) = one_log_failing(tmp.path());
    let mut n = 10;
    while store.pending_bytes("s2") < 2 * READ_AHEAD {
        store.append("s2", "p2", LineRecord::Event(&ev("turn_start", n)), at(2));
        n += 1;
    }
    store.flush(usize::MAX);
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(3));
    store.flush(usize::MAX);
    assert!(store.waiting_for_writer(), "s1's batch is out");
    assert!(!store.read_ahead_full());
}

/// An append to a log waiting for its retry does not move the mark of the
/// other sessions' frames past the batch that is out.
#[test]
fn a_waiting_logs_append_does_not_push_back_the_others_marks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut store, _poll) = one_log_failing(tmp.path());
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 2)), at(2));
    store.flush(usize::MAX);
    assert!(store.waiting_for_writer(), "s1's batch is out");
    let mark = store.log_mark();
    store.append("s2", "p2", LineRecord::Event(&ev("turn_end", 2)), at(3));
    assert_eq!(store.log_mark(), mark);
}

/// What session `id` holds in its buffer, as capacity.
fn buffer_capacity(store: &SessionStore, id: &str) -> usize {
    store.sessions[store.by_id[id]].buf.capacity()
}

#[test]
fn a_session_whose_records_are_all_written_gives_its_buffer_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    store.attach("s1", &attach_rec("p1", &argv), at(0));
    store.attach("s2", &attach_rec("p2", &argv), at(0));
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(1));
    drain(&mut store);
    // Idle now: neither holds a buffer; both wait as spares.
    assert_eq!(buffer_capacity(&store, "s1"), 0);
    assert_eq!(buffer_capacity(&store, "s2"), 0);
    assert_eq!(store.session_spares.len(), 2);
    // The next session to write takes a spare rather than a new buffer.
    let spare = store.session_spares.last().map(|b| b.as_ptr());
    store.append("s2", "p2", LineRecord::Event(&ev("turn_start", 2)), at(2));
    assert_eq!(store.session_spares.len(), 1);
    assert_eq!(
        Some(store.sessions[store.by_id["s2"]].buf.as_ptr()),
        spare,
        "s2 writes into the spare"
    );
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 3)), at(3));
    drain(&mut store);
    store.sync().expect("sync");
    assert_eq!(
        ev_types(&parsed_lines(&log_path(&cfg, "s1")), "p1"),
        ["turn_start1", "turn_end3"]
    );
    assert_eq!(
        ev_types(&parsed_lines(&log_path(&cfg, "s2")), "p2"),
        ["turn_start2"]
    );
    // The spares are bounded in number.
    for n in 0..2 * SPARE_SESSION_BUFS {
        let id = format!("x{n}");
        store.attach(&id, &attach_rec(&format!("q{n}"), &argv), at(4));
    }
    drain(&mut store);
    assert_eq!(store.session_spares.len(), SPARE_SESSION_BUFS);
    // A streaming session's larger buffer is not crowded out by the idle
    // ones', and it is the one the next writer takes.
    let big = vec![b'x'; 64 << 10];
    store.append("s1", "p1", LineRecord::Raw(&big), at(5));
    let big_cap = buffer_capacity(&store, "s1");
    drain(&mut store);
    assert_eq!(store.session_spares.len(), SPARE_SESSION_BUFS);
    assert!(store.session_spares.iter().any(|b| b.capacity() == big_cap));
    store.append("s2", "p2", LineRecord::Event(&ev("turn_end", 6)), at(6));
    assert_eq!(buffer_capacity(&store, "s2"), big_cap);
}

#[test]
fn the_index_of_many_sessions_is_encoded_a_step_at_a_time_and_written_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let (mut store, _) = open(&cfg);
    let n = 2 * index::ENTRIES_PER_STEP + 10;
    for i in 0..n {
        store.attach(
            &format!("s{i}"),
            &attach_rec(&format!("p{i}"), &argv),
            at(1),
        );
    }
    drain(&mut store);
    let index_path = cfg.dir.join(INDEX_FILE);
    let _ = fs::remove_file(&index_path);
    let read_index =
        || index::decode(&fs::read(&index_path).expect("index written")).expect("index reads");

    // The heartbeat encodes one step; each flush after it one more; the
    // file is written once, whole.
    store.heartbeat(at(2));
    let mut steps = 1;
    while store.index_pending() {
        assert!(!index_path.exists(), "written before the draft was done");
        store.flush(usize::MAX);
        steps += 1;
        assert!(steps <= n, "the draft never ends");
    }
    assert_eq!(steps, n.div_ceil(index::ENTRIES_PER_STEP));
    let ids: Vec<String> = read_index().into_iter().map(|e| e.id).collect();
    let expected: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    assert_eq!(ids, expected);

    // Nothing changed: the next heartbeat starts no draft.
    store.heartbeat(at(3));
    assert!(!store.index_pending());
    // A change, even one made while a draft runs past its session, is in
    // the index the next heartbeat writes.
    store.note_turns("s0", 1);
    store.heartbeat(at(4));
    store.note_turns("s0", 1);
    while store.index_pending() {
        store.flush(usize::MAX);
    }
    store.heartbeat(at(5));
    while store.index_pending() {
        store.flush(usize::MAX);
    }
    let s0 = read_index().into_iter().find(|e| e.id == "s0").expect("s0");
    assert_eq!(s0.turn_count, 2);
}

fn answer_rec<'a>(
    approval: &'a str,
    decision: &'a str,
    message: Option<&'a str>,
) -> AnswerRecord<'a> {
    AnswerRecord {
        pane: "p1",
        approval,
        decision,
        message,
        text: None,
        by: "operator",
        uid: Some(1001),
        hook: None,
    }
}

/// An answer of a pane no record named before it makes no pane; one past
/// an event the recovery cap dropped is not kept (the dropped event may
/// have opened an approval, so the numbers after it may not match).
#[test]
fn answers_of_an_unseen_pane_or_past_a_dropped_event_are_not_kept() {
    let mut rb = scan::RecoveryBuilder::new(100);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    {
        let (mut store, _) = open(&cfg);
        store.attach("s1", &attach_rec("p1", &argv), at(0));
        let stray = AnswerRecord {
            pane: "p2",
            ..answer_rec("p2abcdef-1", "approve", None)
        };
        store.answer("s1", &stray, at(1));
        store.append("s1", "p1", LineRecord::Event(&ev("delta", 1)), at(2));
        store.answer("s1", &answer_rec("p1abcdef-1", "approve", None), at(3));
        // Over the cap: dropped, and the smaller ones after it are kept.
        store.append(
            "s1",
            "p1",
            LineRecord::Event(&ev("x".repeat(60).as_str(), 1)),
            at(4),
        );
        store.append("s1", "p1", LineRecord::Event(&ev("delta", 2)), at(5));
        store.answer("s1", &answer_rec("p1abcdef-2", "approve", None), at(6));
        drain(&mut store);
    }
    scan::scan_log(&log_path(&cfg, "s1"), "s1", &mut rb).expect("scan");
    let mut rec = Recovery::default();
    rb.finish(&mut rec);
    let panes: Vec<&str> = rec.panes.iter().map(|p| p.pane.as_str()).collect();
    assert_eq!(panes, ["p1"], "no pane for p2's stray answer");
    let p1 = &rec.panes[0];
    assert!(p1.events_truncated, "{:?}", p1.events);
    assert_eq!(p1.events.len(), 2);
    let kept: Vec<&str> = p1
        .approval_records
        .iter()
        .map(|a| a.record.approval())
        .collect();
    assert_eq!(kept, ["p1abcdef-1"], "only the answer before the drop");
}

#[test]
fn approval_records_come_back_at_their_place_and_unreadable_ones_are_counted_not_fatal() {
    use crate::core::approval::{
        AgentRequest, Decision, ExpiryReason, LoggedAnswer, LoggedApproval,
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    {
        let (mut store, _) = open(&cfg);
        store.ensure_session("s1", Some("pi"), None, at(0));
        store.attach("s1", &attach_rec("p1", &argv), at(1));
        store.append("s1", "p1", LineRecord::Event(b"{\"type\":\"a\"}"), at(2));
        store.answer("s1", &answer_rec("p1abcdef-1", "deny", Some("no")), at(3));
        store.answer("s1", &answer_rec("p1abcdef-2", "shrug", None), at(4));
        store.append("s1", "p1", LineRecord::Event(b"{\"type\":\"b\"}"), at(5));
        store.answer("s1", &answer_rec("p1abcdef-3", "approve", None), at(6));
        let request = RequestRecord {
            pane: "p1",
            approval: "p1abcdef-4",
            operation: "merge PR #42",
            reasoning: Some("a conflict in \"src\""),
            task_id: Some(2),
            estimated_tokens: Some(8500),
        };
        store.approval_request("s1", &request, at(7));
        store.approval_expired("s1", "p1", "p1abcdef-4", "timed_out", at(8));
        store.approval_expired("s1", "p1", "p1abcdef-4", "bored", at(9));
        drain(&mut store);
    }
    let (_, rec) = open(&cfg);
    let p1 = rec.panes.iter().find(|p| p.pane == "p1").expect("p1");
    assert_eq!(p1.events.len(), 2, "every event is still there");
    let got: Vec<(usize, Timestamp, LoggedApproval)> = p1
        .approval_records
        .iter()
        .map(|a| (a.after_events, a.ts, a.record.clone()))
        .collect();
    let answer = |approval: &str, decision| {
        LoggedApproval::Answered(LoggedAnswer {
            approval: approval.into(),
            decision,
            by: Some("operator".into()),
            uid: Some(1001),
        })
    };
    assert_eq!(
        got,
        vec![
            (
                1,
                at(3),
                answer(
                    "p1abcdef-1",
                    Decision::Deny {
                        message: Some("no".into())
                    }
                )
            ),
            (2, at(6), answer("p1abcdef-3", Decision::Approve)),
            (
                2,
                at(7),
                LoggedApproval::Requested {
                    approval: "p1abcdef-4".into(),
                    request: AgentRequest {
                        operation: "merge PR #42".into(),
                        reasoning: Some("a conflict in \"src\"".into()),
                        task_id: Some(2),
                        estimated_tokens: Some(8500),
                    },
                }
            ),
            (
                2,
                at(8),
                LoggedApproval::Expired {
                    approval: "p1abcdef-4".into(),
                    reason: ExpiryReason::TimedOut,
                }
            ),
        ]
    );
    assert_eq!(rec.corrupt_lines, 0, "an unreadable answer is a record");
    assert!(
        rec.problems.iter().any(|p| p.contains("s1")
            && p.contains("2 approval record")
            && p.contains("\"shrug\"")),
        "{:?}",
        rec.problems
    );
}

#[test]
fn an_asked_for_compaction_waits_for_the_running_rotation_then_runs_in_steps() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 1000;
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    for s in ["s1", "s2"] {
        for n in 0..100 {
            store.append(s, "p", LineRecord::Event(&ev("delta", n)), at(n));
        }
        store.append(s, "p", LineRecord::Event(&ev("turn_end", 100)), at(100));
    }
    drain(&mut store);
    let rotating = store.heartbeat(at(101)).expect("a rotation started");
    let asked = if rotating == "s1" { "s2" } else { "s1" };
    assert!(store.request_compaction("nope").is_err());
    store.request_compaction(asked).expect("asked");
    assert!(store.compaction_pending(asked), "waits its turn");
    // The running rotation ends first; the asked-for one starts at once.
    let (first, _) = finish_rotation(&mut store, 200);
    assert_eq!(first.session, rotating);
    assert!(store.compaction_pending(asked));
    let (second, steps) = finish_rotation(&mut store, 200);
    assert_eq!(second.session, asked);
    assert_eq!(second.outcome.expect("compacted").dropped_lines, 100);
    assert!(steps > 2, "in steps, not in one go ({steps})");
    assert!(!store.compaction_pending(asked));
    // Asking while that session's own rotation runs joins it.
    for n in 0..100 {
        store.append(asked, "p", LineRecord::Event(&ev("delta", n)), at(200 + n));
    }
    store.append(asked, "p", LineRecord::Event(&ev("turn_end", 0)), at(300));
    drain(&mut store);
    store.request_compaction(asked).expect("asked again");
    store.request_compaction(asked).expect("asked twice");
    let (third, _) = finish_rotation(&mut store, 200);
    assert_eq!(third.session, asked);
    assert!(
        store.compaction_step(200).is_none(),
        "one job for both asks"
    );
}

/// A finished session's fd is put down at the heartbeat; its log deleted
/// meanwhile and then written again (a declared agent restarted into the
/// session) must read as replaced, as under an open fd, not be created
/// anew unannounced.
#[test]
fn a_deleted_log_of_a_finished_session_is_noticed_when_written_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 1)), at(1));
    drain(&mut store);
    // No live pane, nothing buffered: the heartbeat puts the fd down.
    store.heartbeat(at(2));
    drain(&mut store);
    fs::remove_file(log_path(&cfg, "s1")).expect("delete the log");
    store.append("s1", "p1", LineRecord::Event(&ev("turn_end", 3)), at(3));
    assert_eq!(store.flush(usize::MAX).replaced_logs, 1);
    drain(&mut store);
    let lines = parsed_lines(&log_path(&cfg, "s1"));
    assert_eq!(lines[0]["colibri"], "log_replaced", "{lines:?}");
    assert_eq!(lines[1]["ev"]["type"], "turn_end");
    // A log left in place is simply written on.
    store.heartbeat(at(4));
    drain(&mut store);
    store.append("s1", "p1", LineRecord::Event(&ev("turn_start", 5)), at(5));
    assert_eq!(store.flush(usize::MAX).replaced_logs, 0);
    drain(&mut store);
    assert_eq!(parsed_lines(&log_path(&cfg, "s1")).len(), 3);
}

/// The review: an asked-for compaction waits for its log's torn tail to be
/// cut; if the cut keeps failing it must end, not leave its client waiting.
#[test]
fn an_asked_for_compaction_behind_a_tail_that_cannot_be_cut_is_given_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.append("s1", "p", LineRecord::Event(&ev("turn_end", 1)), at(1));
    drain(&mut store);
    // A torn tail whose cut keeps failing (no batch ever takes it here).
    let i = store.by_id["s1"];
    store.sessions[i].repair = Some(0);
    store.request_compaction("s1").expect("asked");
    assert!(store.compaction_pending("s1"), "waits for the cut");
    assert!(!store.compaction_active(), "and does not spin meanwhile");
    for n in 0..COMPACT_REPAIR_HEARTBEATS {
        assert!(store.take_given_up_compactions().is_empty());
        store.heartbeat(at(10 + n));
    }
    let given_up = store.take_given_up_compactions();
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].0, "s1");
    assert!(given_up[0].1.contains("torn last line"), "{given_up:?}");
    assert!(!store.compaction_pending("s1"));
}

/// A compaction whose log is replaced while it runs ends without a
/// `RotationDone`: it is reported given up, so its client is answered.
#[test]
fn a_compaction_whose_log_is_replaced_meanwhile_is_reported_given_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    for n in 0..100 {
        store.append("s1", "p", LineRecord::Event(&ev("delta", n)), at(n));
    }
    store.append("s1", "p", LineRecord::Event(&ev("turn_end", 100)), at(100));
    drain(&mut store);
    store.request_compaction("s1").expect("asked");
    assert!(matches!(
        store.compaction_step(200),
        Some(CompactionProgress::Working { .. })
    ));
    fs::remove_file(log_path(&cfg, "s1")).expect("delete the log");
    store.append("s1", "p", LineRecord::Event(&ev("delta", 200)), at(200));
    assert_eq!(store.flush(usize::MAX).replaced_logs, 1);
    let given_up = store.take_given_up_compactions();
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].0, "s1");
    assert!(given_up[0].1.contains("replaced"), "{given_up:?}");
    assert!(!store.compaction_pending("s1"));
    assert!(store.compaction_step(200).is_none(), "no job left");
}

/// A log rotation cannot shrink (no finished turn's deltas) is not read
/// whole every `rotate_bytes`: once it is past `rotate_bytes`, the next
/// rotation waits until it grew by half, so rotations read the log a
/// bounded number of times over, not a number growing with its size.
#[test]
fn a_log_with_nothing_to_drop_is_rotated_geometrically_not_every_rotate_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.rotate_bytes = 4096;
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    let (mut read, mut rotations) = (0u64, 0u64);
    for n in 0..4000u64 {
        // Tool calls are kept: nothing to drop.
        store.append("s1", "p", LineRecord::Event(&ev("tool", n)), at(n));
        if n % 20 != 19 {
            continue;
        }
        drain(&mut store);
        let before = store.get("s1").expect("s1").bytes;
        if store.heartbeat(at(n)).is_some() {
            let (done, _) = finish_rotation(&mut store, usize::MAX);
            let report = done.outcome.as_ref().expect("rotated");
            assert_eq!(report.dropped_lines, 0);
            read += before;
            rotations += 1;
        }
    }
    let appended = store.get("s1").expect("s1").bytes;
    // Every rotate_bytes, 66 rotations read 33 times the log; so, 10
    // rotations read it 2.4 times.
    assert!(rotations <= 12, "{rotations} rotations");
    assert!(
        read <= 3 * appended,
        "rotations read {read} of a {appended}-byte log"
    );
    assert!(rotations >= 5, "the log is still rotated: {rotations}");
}

/// A compaction asked for while the log writer is stalled (a frozen
/// filesystem) cannot take a step: its client is told so after
/// `COMPACT_REPAIR_HEARTBEATS` heartbeats, once, and the job goes on once
/// writes resume; one queued behind it is given up.
#[test]
fn compactions_under_a_stalled_writer_are_answered_and_the_running_one_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let (mut store, _) = open(&cfg);
    store.set_classifier(Box::new(classify));
    for s in ["s1", "s2"] {
        for n in 0..20 {
            store.append(s, "p", LineRecord::Event(&ev("delta", n)), at(n));
        }
        store.append(s, "p", LineRecord::Event(&ev("turn_end", 20)), at(20));
    }
    drain(&mut store);
    // A batch with the writer that never finishes.
    store.link.in_flight = true;
    store.link.stalled = true;
    store.request_compaction("s1").expect("asked");
    store.request_compaction("s2").expect("asked");
    assert!(matches!(
        store.compaction_step(1 << 20),
        Some(CompactionProgress::Working { read_bytes: 0 })
    ));
    for n in 0..COMPACT_REPAIR_HEARTBEATS {
        assert!(store.take_given_up_compactions().is_empty());
        store.heartbeat(at(100 + n));
    }
    let mut given_up = store.take_given_up_compactions();
    given_up.sort();
    let sessions: Vec<&str> = given_up.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(sessions, ["s1", "s2"], "{given_up:?}");
    assert!(
        given_up[0].1.contains("goes on when they resume"),
        "{given_up:?}"
    );
    assert!(given_up[1].1.contains("stalled"), "{given_up:?}");
    assert!(!store.compaction_pending("s2"), "the queued one is dropped");
    store.heartbeat(at(200));
    assert!(store.take_given_up_compactions().is_empty(), "told once");
    // The writer recovers: the running job ends as usual.
    store.link.in_flight = false;
    store.link.stalled = false;
    let (done, _) = finish_rotation(&mut store, 1 << 20);
    assert_eq!(done.session, "s1");
    assert_eq!(done.outcome.as_ref().expect("compacted").dropped_lines, 20);
}

fn finished(store: &mut SessionStore, session: &str, pane: &str, t: Timestamp) {
    let argv = vec!["pi".to_string()];
    store.attach(session, &attach_rec(pane, &argv), t);
    store.append(session, pane, LineRecord::Event(&ev("turn_end", 1)), t);
    store.exit(
        session,
        &ExitRecord {
            pane,
            state: "done",
            code: Some(0),
            signal: None,
            reason: None,
            planned: false,
        },
        t,
    );
}

fn real_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    Timestamp::from_millis(since.as_millis() as u64)
}

/// `[sessions] retain`: a finished session whose log was last written
/// before the cutoff has its log deleted and leaves the list and the
/// index; a running one and a recent one stay; the freed slot takes the
/// next new session, and the same id later starts a new log, not a
/// "replaced" one.
#[test]
fn retain_deletes_finished_logs_older_than_the_cutoff_and_forgets_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.retain = Duration::from_secs(86_400);
    let (mut store, _) = open(&cfg);
    let t = real_now();
    finished(&mut store, "old", "p1", t);
    finished(&mut store, "recent", "p2", t);
    let argv = vec!["pi".to_string()];
    store.attach("running", &attach_rec("p3", &argv), t);
    drain(&mut store);
    // `old` was last written ten days ago, and so was `running` (a quiet
    // agent); `recent` now.
    let ten_days = SystemTime::now() - Duration::from_secs(10 * 86_400);
    for s in ["old", "running"] {
        let f = fs::File::options()
            .append(true)
            .open(log_path(&cfg, s))
            .expect("open log");
        f.set_modified(ten_days).expect("set mtime");
    }
    store.heartbeat(t);
    drain(&mut store);
    let mut ids: Vec<&str> = store.list().iter().map(|m| m.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["recent", "running"]);
    assert!(!log_path(&cfg, "old").exists());
    assert!(log_path(&cfg, "running").exists());
    assert_eq!(store.health().retired_sessions, 1);
    assert_eq!(store.take_retired(), ["old"]);
    assert!(store.get("old").is_none());
    // The slot is reused; the old id is a new, empty session.
    let slots = store.sessions.len();
    finished(&mut store, "new", "p4", t);
    store.append("old", "p5", LineRecord::Event(&ev("turn_start", 2)), t);
    drain(&mut store);
    assert_eq!(store.sessions.len(), slots + 1, "one slot reused");
    let lines = parsed_lines(&log_path(&cfg, "old"));
    assert_eq!(lines.len(), 1, "a new log, no replaced marker: {lines:?}");
    assert_eq!(store.health().replaced_logs, 0);
    // The index written at shutdown holds what the list does.
    drop(store);
    let (store, _) = open(&cfg);
    let mut ids: Vec<&str> = store.list().iter().map(|m| m.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["new", "old", "recent", "running"]);
    assert_eq!(
        store.get("old").expect("old").bytes,
        fs::metadata(log_path(&cfg, "old")).expect("log").len()
    );
}

/// Sets the modification time of session `id`'s log to ten days ago.
fn age_log(cfg: &StoreConfig, id: &str) {
    let ten_days = SystemTime::now() - Duration::from_secs(10 * 86_400);
    fs::File::options()
        .append(true)
        .open(log_path(cfg, id))
        .expect("open log")
        .set_modified(ten_days)
        .expect("set mtime");
}

/// A compact-session asked for while the batch that deletes the log for
/// `retain` is with the writer: the session is forgotten, so its
/// compaction is given up with a reason (its client is answered), not run
/// on the freed slot, where it failed under an empty session id (nobody
/// answered) or compacted the next session to take the slot.
#[test]
fn a_compaction_asked_for_while_retain_deletes_the_log_is_given_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.retain = Duration::from_secs(86_400);
    let (mut store, mut poll) = threaded_store(&cfg);
    let t = real_now();
    store.exit(
        "s1",
        &ExitRecord {
            pane: "p1",
            state: "done",
            code: Some(0),
            signal: None,
            reason: None,
            planned: false,
        },
        t,
    );
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        !s.waiting_for_writer() && s.pending_bytes("s1") == 0
    });
    age_log(&cfg, "s1");
    // The heartbeat hands the writer the log to delete; the request comes
    // before the loop has its answer.
    store.heartbeat(t);
    assert!(store.waiting_for_writer());
    store.request_compaction("s1").expect("s1 is still listed");
    flush_until(&mut store, &mut poll, usize::MAX, |s| {
        !s.waiting_for_writer()
    });
    assert_eq!(store.take_retired(), ["s1"]);
    let given_up = store.take_given_up_compactions();
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].0, "s1");
    assert!(given_up[0].1.contains("retain"), "{given_up:?}");
    // Nothing runs on the freed slot, now or once a new session takes it.
    store.append("s2", "p2", LineRecord::Event(&ev("turn_start", 1)), t);
    assert!(store.compaction_step(1 << 20).is_none(), "no job left");
    store.heartbeat(t);
    assert!(store.compaction_step(1 << 20).is_none(), "no job started");
}

/// A shutdown whose last batch both deletes a log for `retain` and
/// fsyncs it (written this run, so unsynced) leaves no empty log behind:
/// the fsync reopened the deleted path with O_CREAT, and the next start
/// listed the forgotten session again.
#[test]
fn a_log_retired_at_shutdown_is_not_recreated_by_its_fsync() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.retain = Duration::from_secs(86_400);
    let (mut store, _) = open(&cfg);
    let t = real_now();
    finished(&mut store, "old", "p1", t);
    drain(&mut store);
    age_log(&cfg, "old");
    // A heartbeat ran while a batch was with the writer: the next batch,
    // the shutdown's, carries the paths to check and the logs to retire.
    store.link.check_paths_due = true;
    store.sync().expect("sync");
    assert_eq!(store.take_retired(), ["old"]);
    assert!(!log_path(&cfg, "old").exists(), "the log stays deleted");
    drop(store);
    let (store, _) = open(&cfg);
    assert!(store.get("old").is_none(), "{:?}", store.list());
}

/// A `hostop` record is one line `colibri fold` reads back (the same text
/// as `cli::fold`'s test), and recovery passes it by: the pane comes back
/// with its events alone.
#[test]
fn a_hostop_record_is_one_line_that_recovery_passes_by() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = config(tmp.path());
    let argv = vec!["pi".to_string()];
    let params = [("name".to_string(), "before \"x\"".to_string())].into();
    {
        let (mut store, _) = open(&cfg);
        store.attach("s1", &attach_rec("p1", &argv), at(0));
        store.append("s1", "p1", LineRecord::Event(&ev("delta", 1)), at(1));
        let rec = HostopRecord {
            pane: "p1",
            op: "zfs-snapshot",
            by: "agent:p1",
            params: &params,
            outcome: "failed",
            exit_code: Some(3),
            signal: None,
            ms: 12,
            output_bytes: 40,
        };
        store.hostop("s1", &rec, at(2));
        drain(&mut store);
    }
    let text = fs::read_to_string(log_path(&cfg, "s1")).expect("log");
    let line = text.lines().nth(2).expect("the record");
    assert_eq!(
        line,
        r#"{"ts":"2026-05-27T12:00:00.002Z","pane":"p1","colibri":"hostop","op":"zfs-snapshot","by":"agent:p1","params":{"name":"before \"x\""},"outcome":"failed","exit_code":3,"ms":12,"output_bytes":40}"#
    );
    let (_, rec) = open(&cfg);
    let p1 = rec.panes.iter().find(|p| p.pane == "p1").expect("p1");
    assert_eq!(p1.events.len(), 1, "{:?}", p1.events);
}
