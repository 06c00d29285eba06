//! `get-session` streamed (issue 9 defect 3): clients that ask for a large
//! session and never read cost the daemon a bounded amount each, the loop
//! keeps answering meanwhile, and a client that reads gets every record
//! the log holds.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{fd_count, peak_rss_kib, rss_kib, wait_for, Colibrid};

/// Lines of about 1 KiB the loud agent prints: a log of about 52 MB,
/// under the 64 MiB `get-session` limit.
const LOUD_LINES: usize = 48_000;

/// Spawns an agent that prints `lines` lines into session `session` and
/// waits until it exited and its log is all on disk; returns the log.
fn loud_session(d: &Colibrid, session: &str, lines: usize, corrupt_at: Option<usize>) -> Vec<u8> {
    let pad = "x".repeat(1000);
    let script = d.script(
        "loud.sh",
        &format!(
            "yes '{{\"type\":\"message_update\",\"pad\":\"{pad}\"}}' | head -n {lines}\nexit 0"
        ),
    );
    d.spawn(
        &[script.as_str()],
        json!({"session_id": session, "runtime": "pi"}),
    );
    let log_path = wait_logged(d, session);
    let mut log = std::fs::read(&log_path).expect("read the log");
    if let Some(at) = corrupt_at {
        // Damage one line in the middle, as a disk might: the daemon reads
        // the log back at start and counts it.
        let cut = nth_line_start(&log, at);
        log.splice(cut..cut, b"{\"damaged\": tru\n".iter().copied());
    }
    log
}

/// Waits until `session`'s agent has exited and its log is all on disk;
/// returns the log's path.
fn wait_logged(d: &Colibrid, session: &str) -> PathBuf {
    let log_path = d.state.join("sessions").join(format!("{session}.jsonl"));
    wait_for(Duration::from_secs(120), "the agent's whole log", || {
        let sessions = d.ok(json!({"cmd":"list-sessions"}));
        let entry = sessions
            .as_array()?
            .iter()
            .find(|s| s["id"] == json!(session))?
            .clone();
        let on_disk = std::fs::metadata(&log_path).ok()?.len();
        (!entry["exit"].is_null() && entry["bytes"].as_u64() == Some(on_disk)).then_some(())
    });
    log_path
}

/// A Pi agent that prints one finished turn of `deltas` streaming deltas
/// of about 1 KiB each (all of which compaction drops) into `session`;
/// returns its log once it is all on disk.
fn finished_turn_session(d: &Colibrid, session: &str, deltas: usize) -> PathBuf {
    let pad = "x".repeat(1000);
    let script = d.script(
        &format!("{session}.sh"),
        &format!(
            "echo '{{\"type\":\"turn_start\"}}'\n\
             yes '{{\"type\":\"message_update\",\"pad\":\"{pad}\"}}' | head -n {deltas}\n\
             echo '{{\"type\":\"turn_end\"}}'\nexit 0"
        ),
    );
    d.spawn(
        &[script.as_str()],
        json!({"session_id": session, "runtime": "pi"}),
    );
    wait_logged(d, session)
}

fn nth_line_start(log: &[u8], n: usize) -> usize {
    log.split_inclusive(|&b| b == b'\n')
        .take(n)
        .map(<[u8]>::len)
        .sum()
}

/// The complete lines of a log that are JSON records, and those that are
/// not: what `get-session` must return.
fn log_records(log: &[u8]) -> (usize, u64) {
    let mut good = 0;
    let mut bad = 0;
    for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<&serde_json::value::RawValue>(line) {
            Ok(r) if r.get().starts_with('{') => good += 1,
            _ => bad += 1,
        }
    }
    (good, bad)
}

/// `get-session` read to its end: the reply line, unparsed.
fn read_dump(path: &Path, session: &str) -> Vec<u8> {
    let mut s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(
        format!("{{\"cmd\":\"get-session\",\"session_id\":\"{session}\",\"id\":9}}\n").as_bytes(),
    )
    .expect("request");
    let mut line = Vec::new();
    BufReader::new(s)
        .read_until(b'\n', &mut line)
        .expect("the reply");
    line
}

#[derive(serde::Deserialize)]
struct Dump<'a> {
    ok: bool,
    id: Option<u64>,
    #[serde(borrow)]
    data: DumpData<'a>,
}

#[derive(serde::Deserialize)]
struct DumpData<'a> {
    #[serde(borrow)]
    records: Vec<&'a serde_json::value::RawValue>,
    corrupt_lines: u64,
    unflushed_bytes: u64,
    session: Value,
}

// See: issue 9 defect 3 (12 clients that did not read took RSS to 1 GB).
#[test]
fn clients_that_never_read_a_large_session_cost_a_bounded_amount_each() {
    let d = Colibrid::start(&[]);
    let pid = d.pid();
    let log = loud_session(&d, "loud", LOUD_LINES, None);
    assert!(log.len() > 48_000_000, "a {}-byte log", log.len());
    let baseline_rss = rss_kib(pid);
    let baseline_fds = fd_count(pid);

    let mut sitting: Vec<UnixStream> = (0..12)
        .map(|_| {
            let mut s = UnixStream::connect(&d.socket).expect("connect");
            s.write_all(b"{\"cmd\":\"get-session\",\"session_id\":\"loud\"}\n")
                .expect("request");
            s
        })
        .collect();
    // Asked right behind the 12 dumps: the loop serves them in order, so
    // this waits for whatever work they do on it.
    let asked = Instant::now();
    let status = d.ok(json!({"cmd":"status"}));
    let answered_in = asked.elapsed();
    assert!(
        answered_in < Duration::from_secs(3),
        "status took {answered_in:?} behind 12 dumps: {status}"
    );
    // Each reply has begun (so each request was served); then nobody reads.
    for s in &mut sitting {
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut head = [0u8; 15];
        s.read_exact(&mut head).expect("the reply begins");
        assert_eq!(&head, b"{\"ok\":true,\"err");
    }
    // The 12 and the one asking (earlier askers' closes may still be on
    // their way).
    wait_for(Duration::from_secs(20), "13 connections", || {
        (d.ok(json!({"cmd":"status"}))["connections"] == json!(13)).then_some(())
    });
    let rss = rss_kib(pid);
    let peak = peak_rss_kib(pid);
    eprintln!(
        "12 clients not reading a {} MB session: RSS {baseline_rss} -> {rss} KiB (peak {peak} KiB)",
        log.len() >> 20
    );
    assert!(
        rss < baseline_rss + 64 * 1024,
        "RSS grew from {baseline_rss} KiB to {rss} KiB for 12 clients that do not read"
    );

    // One that reads gets every record the log holds.
    let line = read_dump(&d.socket, "loud");
    let dump: Dump<'_> = serde_json::from_slice(&line).expect("the reply parses");
    assert!(dump.ok);
    assert_eq!(dump.id, Some(9));
    let (records, corrupt) = log_records(&log);
    assert_eq!(dump.data.records.len(), records);
    assert_eq!(dump.data.corrupt_lines, corrupt);
    assert_eq!(dump.data.unflushed_bytes, 0);
    assert_eq!(dump.data.session["id"], json!("loud"));
    let events = dump
        .data
        .records
        .iter()
        .filter(|r| r.get().contains("\"ev\":{\"type\":\"message_update\""))
        .count();
    assert_eq!(events, LOUD_LINES);

    // Those that leave mid-stream take their log fds and slices with them.
    drop(sitting);
    wait_for(Duration::from_secs(20), "the streams' fds to close", || {
        (fd_count(pid) <= baseline_fds).then_some(())
    });
    wait_for(Duration::from_secs(20), "only the one asking left", || {
        (d.ok(json!({"cmd":"status"}))["connections"] == json!(1)).then_some(())
    });
}

#[test]
fn a_client_that_reads_gets_exactly_the_records_of_the_log_and_its_corrupt_line() {
    let mut d = Colibrid::start(&[]);
    // Several slices' worth, so records are cut between slices.
    let log = loud_session(&d, "damaged", 3_000, Some(1_500));
    let path = d.state.join("sessions").join("damaged.jsonl");
    d.terminate();
    std::fs::write(&path, &log).expect("write the damaged log");
    d.launch();

    let line = read_dump(&d.socket, "damaged");
    let dump: Dump<'_> = serde_json::from_slice(&line).expect("the reply parses");
    assert!(dump.ok);
    let (records, corrupt) = log_records(&log);
    assert_eq!(corrupt, 1);
    assert_eq!(dump.data.corrupt_lines, 1);
    assert_eq!(dump.data.records.len(), records);
    // Verbatim, in order: the records are the log's good lines.
    let want: Vec<&[u8]> = log
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"{\"damaged\""))
        .collect();
    let got: Vec<&[u8]> = dump
        .data
        .records
        .iter()
        .map(|r| r.get().as_bytes())
        .collect();
    assert!(got == want, "records differ from the log's lines");

    // Requests after it on the same connection are answered after it, in
    // order.
    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(
        b"{\"cmd\":\"get-session\",\"session_id\":\"damaged\",\"id\":1}\n{\"cmd\":\"status\",\"id\":2}\n",
    )
    .expect("requests");
    let mut r = BufReader::new(s);
    let mut first = Vec::new();
    r.read_until(b'\n', &mut first).expect("first reply");
    let mut second = String::new();
    r.read_line(&mut second).expect("second reply");
    let first: Dump<'_> = serde_json::from_slice(&first).expect("the dump parses");
    assert_eq!(first.id, Some(1));
    assert_eq!(first.data.records.len(), records);
    let second: Value = serde_json::from_str(&second).expect("status parses");
    assert_eq!(second["id"], json!(2), "{second}");
    assert_eq!(second["ok"], json!(true), "{second}");
}

// See: an attacker's try (compact-session on a 3.7 GB log held the loop
// for 9.7 s: the whole job ran before the reply).
#[test]
fn compact_session_runs_in_slices_and_the_loop_answers_meanwhile() {
    let d = Colibrid::start(&[]);
    // One finished turn of about 40 MB of streaming deltas: all dropped.
    let log_path = finished_turn_session(&d, "big", 40_000);
    let mut asker = UnixStream::connect(&d.socket).expect("connect");
    asker
        .write_all(b"{\"cmd\":\"compact-session\",\"session_id\":\"big\",\"id\":7}\n")
        .expect("ask");
    asker
        .set_read_timeout(Some(Duration::from_millis(5)))
        .expect("timeout");
    let mut reply = Vec::new();
    let mut answered_meanwhile = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !reply.ends_with(b"\n") {
        assert!(Instant::now() < deadline, "no compact-session reply");
        if read_some(&mut asker, &mut reply) {
            continue;
        }
        // Still compacting: another client asks. It counts only if the
        // compaction's reply is not there after its answer (a loop that
        // compacted in one go would have sent that reply first).
        let status = d.request(json!({"cmd":"status"}));
        assert_eq!(status["ok"], json!(true), "{status}");
        if !read_some(&mut asker, &mut reply) {
            answered_meanwhile += 1;
        }
    }
    let r: Value = serde_json::from_slice(&reply).expect("a JSON reply");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["id"], json!(7), "{r}");
    assert!(
        r["data"]["dropped_lines"].as_u64() >= Some(40_000),
        "the finished turn's deltas are dropped: {r}"
    );
    assert!(r["data"]["after_bytes"].as_u64() < Some(1 << 20), "{r}");
    assert!(
        answered_meanwhile > 0,
        "no status was answered while the 40 MB log was compacted"
    );
    // The log on disk is the compacted one.
    assert_eq!(
        std::fs::metadata(&log_path).map(|m| m.len()).ok(),
        r["data"]["after_bytes"].as_u64()
    );
}

/// Reads what has arrived within the socket's read timeout; false if
/// nothing had.
fn read_some(s: &mut UnixStream, into: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => panic!("the daemon closed the connection"),
        Ok(n) => {
            into.extend_from_slice(&buf[..n]);
            true
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(e) => panic!("reading the reply: {e}"),
    }
}

/// An agent line nested near serde_json's recursion limit (128) is valid
/// JSON, but a reply embedding it fails a standard client's parse of the
/// whole reply (serde_json: "recursion limit exceeded"; Python's `json`:
/// `RecursionError`). Such a line is logged as `raw` text, so `get-session`
/// parses everywhere, and `colibri session` shows it; a line 500,000 levels
/// deep overflows no stack on the way.
#[test]
fn a_line_nested_past_128_levels_is_logged_as_text_and_every_reply_parses() {
    let d = Colibrid::start(&[]);
    let deep = |n: usize| {
        format!(
            "{{\"type\":\"agent_start\",\"x\":{}{}}}",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    let lines = [
        deep(118),
        deep(130),
        deep(500_000),
        r#"{"type":"message_update","n":1}"#.to_string(),
        r#"{"type":"agent_settled"}"#.to_string(),
    ];
    let file = d.path("deep.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write lines");
    let id = d.spawn(
        &["/bin/sh", "-c", &format!("cat {}", file.display())],
        json!({"session_id": "deep", "runtime": "pi"}),
    );
    d.wait_pane(&id, "the agent's exit", |p| !p["exit"].is_null());
    // The reply as a client reads it: one line, parsed whole by
    // serde_json's default (recursion-limited) parser.
    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.write_all(b"{\"cmd\":\"get-session\",\"session_id\":\"deep\"}\n")
        .expect("ask");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut reply = String::new();
    std::io::BufReader::new(&s)
        .read_line(&mut reply)
        .expect("the reply line");
    let r: Value =
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("the reply does not parse: {e}"));
    let records = r["data"]["records"].as_array().expect("records");
    let ev_of = |want: &str| {
        records
            .iter()
            .any(|rec| rec["ev"].to_string().as_str() == want || rec["raw"] == json!(want))
    };
    for l in &lines[..3] {
        assert!(ev_of(l), "not logged: {}", &l[..l.len().min(60)]);
    }
    let shallow = records.iter().filter(|rec| rec["ev"].is_object()).count();
    let texts = records.iter().filter(|rec| rec["raw"].is_string()).count();
    assert_eq!(shallow, 3, "119 deep and the last two are embedded");
    assert_eq!(texts, 2, "130 and 500,000 deep are text");
    // Python's json, where the machine has it, reads the same reply.
    if let Ok(mut py) = std::process::Command::new("python3")
        .args([
            "-c",
            "import json,sys; d=json.loads(sys.stdin.read()); print(len(d['data']['records']))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        if let Some(mut stdin) = py.stdin.take() {
            stdin.write_all(reply.as_bytes()).expect("feed python");
        }
        let o = py.wait_with_output().expect("python");
        assert!(o.status.success(), "python's json failed on the reply");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            records.len().to_string()
        );
    }
    let o = std::process::Command::new(crate::support::COLIBRI)
        .args(["session", "deep"])
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run colibri");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "colibri session failed: {err}");
    let shown: Value = serde_json::from_slice(&o.stdout).expect("colibri session prints JSON");
    assert_eq!(
        shown["records"].as_array().map(Vec::len),
        Some(records.len())
    );
}

// See: the review of compact-session in slices (a client that half-closed
// after its request, as `nc -U` does, got no reply: its connection was
// closed as soon as nothing was queued).
#[test]
fn compact_session_is_answered_to_a_client_that_half_closed() {
    let d = Colibrid::start(&[]);
    finished_turn_session(&d, "half", 12_000);
    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.write_all(b"{\"cmd\":\"compact-session\",\"session_id\":\"half\"}\n")
        .expect("ask");
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read to the end");
    let r: Value = serde_json::from_str(reply.trim()).unwrap_or(Value::Null);
    assert_eq!(r["ok"], json!(true), "reply: {reply:?}");
    assert!(r["data"]["dropped_lines"].as_u64() >= Some(12_000), "{r}");
}

/// compact-session under a log writer that stalls (a frozen filesystem)
/// is answered with an error a few heartbeats on, not left waiting; the
/// compaction goes on once the writer thaws.
#[test]
fn compact_session_under_a_stalled_writer_is_answered_and_runs_after_the_thaw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stall = dir.path().join("stall");
    let stall_env = stall.display().to_string();
    let d = Colibrid::start_with_env(
        &["--heartbeat", "200ms"],
        &[("COLIBRI_TEST_WRITER_STALL", &stall_env)],
    );
    let log_path = finished_turn_session(&d, "frozen", 200);
    let before = std::fs::metadata(&log_path).expect("log").len();
    std::fs::write(&stall, "").expect("freeze the log writer");
    // A batch for the writer, which freezes on it.
    d.spawn(
        &["/bin/sh", "-c", "echo hello; sleep 60"],
        json!({"session_id":"other"}),
    );
    wait_for(Duration::from_secs(10), "the writer's stall", || {
        let st = d.request(json!({"cmd":"status"}));
        st["data"]["logs"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("stalled"))
            .then_some(())
    });
    let mut asker = UnixStream::connect(&d.socket).expect("connect");
    asker
        .write_all(b"{\"cmd\":\"compact-session\",\"session_id\":\"frozen\",\"id\":3}\n")
        .expect("ask");
    asker
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut line = String::new();
    BufReader::new(&asker)
        .read_line(&mut line)
        .expect("an answer within 10 s");
    let reply: Value = serde_json::from_str(&line).expect("a JSON reply");
    assert_eq!(reply["ok"], json!(false), "{reply}");
    assert_eq!(reply["id"], json!(3), "{reply}");
    let msg = reply["error"].as_str().unwrap_or_default();
    assert!(msg.contains("stalled") && msg.contains("goes on"), "{msg}");
    std::fs::remove_file(&stall).expect("thaw");
    wait_for(
        Duration::from_secs(20),
        "the compaction after the thaw",
        || {
            let now = std::fs::metadata(&log_path).ok()?.len();
            (now < before / 10).then_some(())
        },
    );
}

/// `[sessions] retain`: the log of a finished session last written longer
/// ago than that is deleted at a heartbeat and the session is forgotten;
/// a finished session written since stays.
#[test]
fn retain_deletes_old_finished_logs_and_keeps_recent_ones() {
    let conf = tempfile::tempdir().expect("tempdir");
    let config = conf.path().join("colibri.toml");
    std::fs::write(&config, "[sessions]\nretain = \"1d\"\n").expect("config");
    let d = Colibrid::start(&[
        "--config",
        &config.display().to_string(),
        "--heartbeat",
        "200ms",
    ]);
    let old = finished_turn_session(&d, "old", 10);
    let recent = finished_turn_session(&d, "recent", 10);
    let ten_days = std::time::SystemTime::now() - Duration::from_secs(10 * 86_400);
    std::fs::File::options()
        .append(true)
        .open(&old)
        .expect("open the log")
        .set_modified(ten_days)
        .expect("age the log");
    wait_for(
        Duration::from_secs(10),
        "the old session's retirement",
        || {
            let sessions = d.ok(json!({"cmd":"list-sessions"}));
            let ids: Vec<&str> = sessions
                .as_array()?
                .iter()
                .filter_map(|s| s["id"].as_str())
                .collect();
            (!ids.contains(&"old")).then_some(())
        },
    );
    assert!(!old.exists(), "the old log is deleted");
    assert!(recent.exists(), "the recent log stays");
    let gone = d.request(json!({"cmd":"get-session","session_id":"old"}));
    assert_eq!(gone["ok"], json!(false), "{gone}");
    assert_eq!(gone["code"], json!("not_found"), "{gone}");
    let status = d.ok(json!({"cmd":"status"}));
    assert_eq!(status["logs"]["retired_sessions"], json!(1), "{status}");
}
