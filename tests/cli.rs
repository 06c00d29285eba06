//! The `colibri` binary, run as the operator runs it.
//!
//! Offline subcommands (`fold`, `replay`) are tested end to end on the
//! shipped samples. Daemon subcommands are tested against a fake daemon (a
//! thread answering canned reply lines on a temporary socket), which pins
//! down the request each one sends, what it prints and its exit code; the
//! real daemon is exercised by the `it` suite.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_colibri");

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("samples")
        .join(name)
}

fn colibri(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_PANE_ID");
    c
}

fn run_with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn colibri");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait colibri");
    writer.join().expect("stdin writer");
    out
}

fn output(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run colibri")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out.stdout)))
}

// ---------------------------------------------------------------------------
// fold

#[test]
fn fold_json_reports_state_runtime_and_usage_of_a_sample() {
    let path = sample("pi-success.jsonl");
    let out = output(colibri(&[
        "fold",
        "--json",
        path.to_str().expect("utf-8 path"),
    ]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["state"], "done");
    assert_eq!(r["runtime"], "pi");
    assert_eq!(r["session_id"], "019e6a10-3c2f-7b41-9d0e-5a7c2e1f4b88");
    assert_eq!(r["cwd"], "/home/ops/src/widget");
    assert_eq!(r["usage"]["input_tokens"], 5210 + 1320 + 980);
    assert_eq!(r["usage"]["output_tokens"], 184 + 96 + 241);
    assert_eq!(r["usage"]["cache_read_tokens"], 40112 + 45322 + 46642);
    let cost = r["usage"]["cost_usd"].as_f64().expect("cost");
    assert!((cost - 0.069969).abs() < 1e-6, "cost {cost}");
    assert_eq!(r["exit"]["code"], 0);
    assert_eq!(r["last_tool"]["name"], "edit");
    // Exactly one line of output.
    assert_eq!(text(&out.stdout).lines().count(), 1);
}

#[test]
fn fold_shows_the_dialog_sample_blocking_with_recording_line_numbers() {
    let path = sample("pi-dialog.jsonl");
    let out = output(colibri(&["fold", path.to_str().expect("utf-8 path")]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let steps: Vec<&str> = stdout.lines().take_while(|l| *l != "---").collect();
    // Line 6 of the file is the extension_ui_request; line 8 is the first
    // event after the answer (line 7 is the await_input).
    assert_eq!(
        steps,
        [
            "start: idle",
            "line 2: working",
            "line 6: blocked",
            "line 8: working",
            "line 15: idle",
            "exit: done"
        ]
    );
    assert!(stdout.contains("state:    done\n"), "{stdout}");
    assert!(stdout.contains("exit:     code 0\n"), "{stdout}");
}

#[test]
fn fold_of_a_session_log_takes_one_pane_and_names_the_others() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("s.jsonl");
    let line = |pane: &str, ms: u32, rest: &str| {
        format!(
            "{{\"ts\":\"2026-11-21T10:00:0{}.{:03}Z\",\"pane\":\"{pane}\",{rest}}}\n",
            ms / 1000,
            ms % 1000
        )
    };
    let (a, b) = ("aaaa1111-0000", "bbbb2222-0000");
    let ask = r#""ev":{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Go?"}"#;
    let records = [
        line(a, 0, r#""colibri":"attach","agent":"pi","runtime":"pi","argv":["pi"],"generation":0"#),
        line(b, 100, r#""colibri":"attach","agent":"pi","runtime":"pi","argv":["pi"],"generation":0"#),
        line(a, 1000, ask),
        line(b, 1500, ask),
        line(b, 2000, r#""colibri":"answer","approval":"bbbb2222-1","decision":"deny","message":"no","by":"operator""#),
        line(b, 3000, r#""colibri":"exit","state":"error","signal":9"#),
    ]
    .concat();
    std::fs::write(&log, records).expect("write log");
    let path = log.to_str().expect("utf-8 path");
    let out = output(colibri(&["fold", "--json", "--pane", "bbbb", path]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["pane"], b);
    assert_eq!(r["other_panes"], json!([a]));
    assert_eq!(r["approvals"].as_array().map(Vec::len), Some(1));
    assert_eq!(r["approvals"][0]["line"], 4);
    assert_eq!(r["approvals"][0]["outcome"]["decision"], "deny");
    assert_eq!(r["exit"]["signal"], 9);
    // Without --pane the first pane: its approval still waits (the log
    // ends before it does), and the text says which pane it folded.
    let out = output(colibri(&["fold", path]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "pane:     {a} (the log's other panes, left out; fold one with --pane: {b})\n"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("state:    blocked\n"), "{stdout}");
    let out = output(colibri(&["fold", "--pane", "cccc", path]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no pane \"cccc\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn fold_of_garbage_only_input_counts_it_and_stays_idle() {
    let out = run_with_stdin(
        colibri(&["fold", "--json", "-"]),
        b"not json\n\x01\x02\xff\n{\"broken\":\n   \n[1,2]\n",
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["state"], "idle");
    assert_eq!(r["counters"]["malformed"], 4);
    assert_eq!(r["counters"]["events"], 0);
    assert_eq!(r["timeline"], json!([{"line": 0, "state": "idle"}]));
}

#[test]
fn fold_of_a_missing_file_is_a_runtime_error() {
    let out = output(colibri(&["fold", "/nonexistent/recording.jsonl"]));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("colibri: cannot read /nonexistent/recording.jsonl:"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// replay

#[derive(Deserialize)]
struct RecordedLine<'a> {
    #[serde(borrow, default)]
    ev: Option<&'a RawValue>,
    #[serde(default)]
    raw: Option<String>,
}

/// The lines a recording should print: each `ev` verbatim, each `raw` text.
fn expected_output(recording: &str) -> String {
    let mut out = String::new();
    for line in recording.lines().filter(|l| !l.trim().is_empty()) {
        let l: RecordedLine<'_> = serde_json::from_str(line).expect("sample line");
        if let Some(ev) = l.ev {
            out.push_str(ev.get());
            out.push('\n');
        } else if let Some(raw) = l.raw {
            out.push_str(&raw);
            out.push('\n');
        }
    }
    out
}

#[test]
fn replay_reproduces_event_lines_in_order_and_exits_with_the_recorded_code() {
    for (name, code) in [
        ("claude-error.jsonl", 1),
        ("gemini-crash.jsonl", 2),
        ("codex-success.jsonl", 0),
    ] {
        let path = sample(name);
        let out = output(colibri(&[
            "replay",
            path.to_str().expect("utf-8 path"),
            "--speed",
            "100",
        ]));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: stderr {}",
            text(&out.stderr)
        );
        let recording = std::fs::read_to_string(&path).expect("sample");
        assert_eq!(text(&out.stdout), expected_output(&recording), "{name}");
    }
}

#[test]
fn replay_paces_lines_by_their_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("paced.jsonl");
    std::fs::write(
        &path,
        "{\"t\":0,\"ev\":{\"n\":1}}\n{\"t\":150,\"ev\":{\"n\":2}}\n{\"t\":300,\"ev\":{\"n\":3}}\n",
    )
    .expect("write recording");
    let started = Instant::now();
    let out = output(colibri(&["replay", path.to_str().expect("utf-8 path")]));
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n");
    assert!(
        elapsed >= Duration::from_millis(250),
        "300 ms recording took {elapsed:?}"
    );

    // At speed 0.5 the same recording lasts 600 ms.
    let started = Instant::now();
    let out = output(colibri(&[
        "replay",
        path.to_str().expect("utf-8 path"),
        "--speed",
        "0.5",
    ]));
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        elapsed >= Duration::from_millis(550),
        "600 ms at speed 0.5 took {elapsed:?}"
    );
}

#[test]
fn replay_of_plain_jsonl_prints_each_line_as_is() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("plain.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"agent_start\"}\n\nnot json at all\n{\"type\":\"agent_end\",\"b\":1,\"a\":2}",
    )
    .expect("write");
    let started = Instant::now();
    let out = output(colibri(&[
        "replay",
        path.to_str().expect("utf-8 path"),
        "--interval",
        "100",
    ]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "{\"type\":\"agent_start\"}\nnot json at all\n{\"type\":\"agent_end\",\"b\":1,\"a\":2}\n"
    );
    // Two intervals between three printed lines.
    assert!(
        started.elapsed() >= Duration::from_millis(180),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn await_input_blocks_until_stdin_has_a_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("dialog.jsonl");
    std::fs::write(&path, "{\"t\":0,\"ev\":{\"ask\":1}}\n{\"t\":0,\"await_input\":true}\n{\"t\":0,\"ev\":{\"after\":1}}\n{\"t\":0,\"exit\":5}\n")
        .expect("write");
    let mut child = colibri(&["replay", path.to_str().expect("utf-8 path")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("first line");
    assert_eq!(line, "{\"ask\":1}\n");
    // Nothing more may arrive while no answer was given.
    assert!(
        stdout.buffer().is_empty(),
        "printed past await_input: {:?}",
        text(stdout.buffer())
    );
    let mut fds = [nix::poll::PollFd::new(
        stdout.get_ref().as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ready = nix::poll::poll(&mut fds, 400u16).expect("poll");
    assert_eq!(ready, 0, "replay did not wait for input");
    stdin.write_all(b"yes\n").expect("answer");
    line.clear();
    stdout.read_line(&mut line).expect("line after the answer");
    assert_eq!(line, "{\"after\":1}\n");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(5));
}

#[test]
fn a_reader_that_leaves_early_is_not_a_failure() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("long.jsonl");
    let mut rec = String::new();
    for i in 0..20_000 {
        rec.push_str(&format!("{{\"t\":0,\"ev\":{{\"type\":\"message_update\",\"n\":{i},\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}}}}\n"));
    }
    std::fs::write(&path, rec).expect("write");
    let mut child = colibri(&["replay", path.to_str().expect("utf-8 path")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("first line");
    assert!(first.contains("\"n\":0"), "{first}");
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(stderr, "");
}

// ---------------------------------------------------------------------------
// Exit codes without a daemon

#[test]
fn a_missing_socket_exits_3_and_names_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("absent.sock");
    let out = output(colibri(&[
        "--socket",
        sock.to_str().expect("utf-8 path"),
        "status",
    ]));
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("colibri: cannot connect to {}:", sock.display())),
        "{err}"
    );
    assert!(err.contains("is colibrid running?"), "{err}");
    assert!(out.stdout.is_empty());

    // The same through the environment.
    let mut cmd = colibri(&["snapshot"]);
    cmd.env("COLIBRI_SOCKET", &sock);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("absent.sock"));
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["frobnicate"][..],
        &["spawn"],
        &["spawn", "--restart", "sometimes", "--", "x"],
        &["replay", "f.jsonl", "--speed", "0"],
        &["hint", "suspend"],
        &["fold", "--runtime", "vim", "f"],
    ] {
        let out = output(colibri(args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_hook_never_fails_even_without_a_daemon() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("absent.sock");
    let mut cmd = colibri(&[
        "--socket",
        sock.to_str().expect("utf-8 path"),
        "hook",
        "Stop",
    ]);
    cmd.env("COLIBRI_PANE_ID", "p1");
    let out = run_with_stdin(
        cmd,
        br#"{"session_id":"s","hook_event_name":"Stop","stop_hook_active":false}"#,
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "a hook must not write to stdout");
    assert!(
        text(&out.stderr).contains("cannot connect"),
        "{}",
        text(&out.stderr)
    );

    // Without a pane id, and with garbage input: still 0.
    let out = run_with_stdin(colibri(&["hook", "Stop"]), b"{}");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("COLIBRI_PANE_ID"));
    let mut cmd = colibri(&[
        "--socket",
        sock.to_str().expect("utf-8 path"),
        "hook",
        "Stop",
    ]);
    cmd.env("COLIBRI_PANE_ID", "p1");
    let out = run_with_stdin(cmd, b"not json");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("not JSON"));
}

// ---------------------------------------------------------------------------
// Against a fake daemon

/// Answers one connection per canned reply, in order, and reports each
/// request line it received.
struct FakeDaemon {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    requests: mpsc::Receiver<Value>,
}

impl FakeDaemon {
    fn start(replies: Vec<String>) -> FakeDaemon {
        FakeDaemon::start_conversations(replies.into_iter().map(|r| vec![r]).collect())
    }

    /// One connection per conversation, in order; each of its replies
    /// answers the next request line on that connection.
    fn start_conversations(conversations: Vec<Vec<String>>) -> FakeDaemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for replies in conversations {
                let Ok((conn, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(conn);
                for reply in replies {
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap_or(Value::Null));
                    let _ = reader.get_mut().write_all(reply.as_bytes());
                }
            }
        });
        FakeDaemon {
            _dir: dir,
            socket,
            requests: rx,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = colibri(&[]);
        c.arg("--socket").arg(&self.socket).args(args);
        c
    }

    fn request(&self) -> Value {
        self.requests
            .recv_timeout(Duration::from_secs(10))
            .expect("the CLI sent a request")
    }
}

fn ok(data: Value) -> String {
    format!("{}\n", json!({"ok": true, "error": null, "data": data}))
}

#[test]
fn simple_commands_send_their_request_and_print_nothing() {
    let cases: [(&[&str], Value); 6] = [
        (&["kill", "w1"], json!({"cmd":"kill-agent","agent_id":"w1"})),
        (
            &["pause", "w1"],
            json!({"cmd":"pause-agent","agent_id":"w1"}),
        ),
        (
            &["resume", "w1"],
            json!({"cmd":"resume-agent","agent_id":"w1"}),
        ),
        (
            &["signal", "w1", "HUP"],
            json!({"cmd":"signal-agent","agent_id":"w1","signal":"HUP"}),
        ),
        (
            &["send", "w1", "-y please", "--no-newline"],
            json!({"cmd":"send-input","agent_id":"w1","text":"-y please","newline":false}),
        ),
        (&["hint", "resume"], json!({"cmd":"hint","kind":"resume"})),
    ];
    for (args, expected) in cases {
        let d = FakeDaemon::start(vec![ok(Value::Null)]);
        let out = output(d.cmd(args));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(d.request(), expected, "{args:?}");
    }
}

#[test]
fn a_refusal_exits_1_with_the_daemons_message() {
    let d = FakeDaemon::start(vec![
        "{\"ok\":false,\"error\":\"no such agent: w9\",\"data\":null}\n".into(),
    ]);
    let out = output(d.cmd(&["kill", "w9"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "colibri: no such agent: w9\n");
}

#[test]
fn spawn_sends_argv_and_options_and_prints_the_id() {
    let d = FakeDaemon::start(vec![ok(
        json!({"agent_id":"0b7e5c1a-1111","status":"running","session_id":"s","pid":42}),
    )]);
    let out = output(d.cmd(&[
        "spawn",
        "--runtime",
        "zot",
        "--name",
        "w1",
        "--cwd",
        "/",
        "--env",
        "A=1",
        "--stall-after",
        "90s",
        "--restart",
        "on-failure",
        "--max-restarts",
        "2",
        "--",
        "zot",
        "--json",
        "hi",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "0b7e5c1a-1111\n");
    assert_eq!(
        d.request(),
        json!({"cmd":"spawn-agent","argv":["zot","--json","hi"],"runtime":"zot","name":"w1","cwd":"/","env":{"A":"1"},
               "stall_after":90000,"restart":"on-failure","max_restarts":2})
    );
}

#[test]
fn spawn_without_cwd_sends_the_callers_directory_but_not_into_a_jail() {
    let d = FakeDaemon::start(vec![
        ok(json!({"agent_id":"0b7e5c1a-1111","status":"running","session_id":"s","pid":42})),
        ok(json!({"agent_id":"0b7e5c1a-2222","status":"running","session_id":"s","pid":43})),
    ]);
    let here = tempfile::tempdir().expect("a directory to spawn from");
    let out = output({
        let mut c = d.cmd(&["spawn", "--", "pi"]);
        c.current_dir(here.path());
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let here_abs = std::fs::canonicalize(here.path()).expect("canonical");
    let sent = d.request();
    let cwd = sent["cwd"].as_str().expect("a cwd sent");
    assert_eq!(
        std::fs::canonicalize(cwd).expect("the sent cwd exists"),
        here_abs,
        "{sent}"
    );
    // A host path means nothing inside a jail: the daemon's default stays.
    let out = output({
        let mut c = d.cmd(&["spawn", "--jail", "agents1", "--", "pi"]);
        c.current_dir(here.path());
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        d.request(),
        json!({"cmd":"spawn-agent","argv":["pi"],"jail":"agents1"})
    );
}

#[test]
fn snapshot_renders_a_table_or_passes_json_through() {
    let snap = json!({
        "schema":"clawdie.glasspane.snapshot.v2","host":"buildbox","observed_at":"2026-05-27T12:00:10.000Z",
        "panes":[{"id":"0b7e5c1a-9d2f","name":"w1","agent":"pi","runtime":"pi","state":"blocked","stalled":false,
                  "paused":false,"state_since":"2026-05-27T12:00:07.000Z","started_at":"2026-05-27T12:00:00.000Z",
                  "last_event_at":"2026-05-27T12:00:07.000Z","stall_after_ms":600000,"generation":0,
                  "counters":{"events":5,"malformed":0,"oversize":0,"unknown":0,"bytes":900},
                  "usage":{"input_tokens":6120,"output_tokens":143,"cache_read_tokens":0,"cache_write_tokens":0,"cost_usd":0.02},
                  "blocked_reason":"Allow bash?"}]
    });
    let d = FakeDaemon::start(vec![ok(snap.clone()), ok(snap.clone())]);
    let out = output(d.cmd(&["snapshot"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(d.request(), json!({"cmd":"snapshot","schema":"v2"}));
    let table = text(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .nth(2)
        .expect("a pane row")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        row,
        ["0b7e5c1a", "w1", "pi", "blocked", "3s", "3s ago", "-", "6.1k/143", "$0.0200"]
    );

    let out = output(d.cmd(&["snapshot", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out), snap);
}

#[test]
fn watch_prints_events_then_fails_when_the_stream_ends_or_drops() {
    let events = concat!(
        "{\"ok\":true,\"error\":null,\"data\":{\"watching\":true,\"seq\":0}}\n",
        "{\"seq\":1,\"at\":\"2026-05-27T12:00:01.000Z\",\"event\":\"attached\",\"pane\":\"0b7e5c1a-9d2f\",\"agent\":\"pi\",\"name\":\"w1\",\"pid\":42,\"runtime\":\"pi\"}\n",
        "{\"seq\":2,\"at\":\"2026-05-27T12:00:02.000Z\",\"event\":\"state\",\"pane\":\"0b7e5c1a-9d2f\",\"from\":\"idle\",\"to\":\"working\"}\n",
        "{\"seq\":3,\"at\":\"2026-05-27T12:00:03.000Z\",\"event\":\"paused\",\"pane\":\"ffff0000-1111\"}\n",
    );
    let dropped = format!(
        "{events}{{\"ok\":false,\"error\":\"watcher fell behind (queue full)\",\"data\":null}}\n"
    );
    // A pane attached before the watch: only the snapshot names it.
    let snap = ok(json!({"schema":"clawdie.glasspane.snapshot.v2","panes":[
        {"id":"ffff0000-1111","name":"early"},{"id":"eeee0000-2222"}]}));
    // The snapshot on a connection of its own, then the watch's.
    let d =
        FakeDaemon::start_conversations(vec![vec![snap], vec![events.to_string()], vec![dropped]]);
    let out = output(d.cmd(&["watch", "w1"]));
    // The stream ended (the daemon stopped): everything is printed, then
    // the operator is told, and the exit status says so.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "colibri: the daemon closed the watch stream (colibrid stopped?)\n"
    );
    assert_eq!(d.request(), json!({"cmd":"snapshot","schema":"v2"}));
    assert_eq!(d.request(), json!({"cmd":"watch","panes":["w1"]}));
    assert_eq!(
        text(&out.stdout),
        "12:00:01.000 #1 0b7e5c1a attached: pi runtime pi name w1 pid 42\n12:00:02.000 #2 0b7e5c1a (w1) idle → working\n12:00:03.000 #3 ffff0000 (early) paused\n"
    );
    // --json prints what the daemon sent: no snapshot is asked for.
    let out = output(d.cmd(&["watch", "--json"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(d.request(), json!({"cmd":"watch"}));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    assert_eq!(
        text(&out.stderr),
        "colibri: watcher fell behind (queue full)\n"
    );
}

/// `colibri top` piped or under cron: a sentence naming what to use instead,
/// not the errno raw mode fails with ("terminal: No such device or
/// address"), before any daemon is looked for.
#[test]
fn top_without_a_terminal_says_so_and_names_the_alternatives() {
    let out = output(colibri(&["--socket", "/nonexistent/colibri.sock", "top"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "colibri: top needs a terminal on stdin and stdout; without one, use `colibri snapshot` or `colibri watch`\n"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn the_hook_forwards_its_input_to_the_pane() {
    let d = FakeDaemon::start(vec![ok(Value::Null)]);
    let mut cmd = d.cmd(&["hook", "Notification"]);
    cmd.env("COLIBRI_PANE_ID", "0b7e5c1a-9d2f");
    let input = json!({"session_id":"s","hook_event_name":"Notification","message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"});
    let out = run_with_stdin(cmd, input.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        d.request(),
        json!({"cmd":"emit","agent_id":"0b7e5c1a-9d2f","event":input})
    );
}

#[test]
fn emit_reads_the_event_from_an_argument_or_stdin() {
    let d = FakeDaemon::start(vec![ok(Value::Null), ok(Value::Null)]);
    let out = output(d.cmd(&["emit", "w1", r#"{"type":"agent_settled"}"#]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        d.request(),
        json!({"cmd":"emit","agent_id":"w1","event":{"type":"agent_settled"}})
    );
    let out = run_with_stdin(d.cmd(&["emit", "w1", "-"]), b"{\"type\":\"turn_start\"}\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        d.request(),
        json!({"cmd":"emit","agent_id":"w1","event":{"type":"turn_start"}})
    );
    let out = output(d.cmd(&["emit", "w1", "[1]"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "colibri: event must be a JSON object\n");
}

#[test]
fn the_hook_exits_0_even_on_a_usage_error() {
    for args in [&["hook"][..], &["hook", "--bogus"], &["hook", "a", "b"]] {
        let out = run_with_stdin(colibri(args), b"{}");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} must not block Claude Code's tool call: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why on stderr");
    }
}

#[test]
fn daemon_errors_quoting_agent_text_are_escaped() {
    let d = FakeDaemon::start(vec![
        "{\"ok\":false,\"error\":\"no such agent: \\u001b]0;pwned\\u0007\\u001b[2J\",\"data\":null}\n".into(),
    ]);
    let out = output(d.cmd(&["kill", "x"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "colibri: no such agent: \\x1b]0;pwned\\x07\\x1b[2J\n"
    );
}

/// Every subcommand and flag of `colibri` has a help line and a place in
/// colibri(1): the man page and `--help` cannot drift from the binary.
#[test]
fn every_subcommand_and_flag_is_documented_in_help_and_the_man_page() {
    use clap::CommandFactory;
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/colibri.1"))
        .expect("man/colibri.1");
    let cli = colibri::cli::Cli::command();
    let mut missing = Vec::new();
    for arg in cli.get_arguments() {
        check_arg(&cli, arg, &man, &mut missing);
    }
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        if sub
            .get_about()
            .is_none_or(|a| a.to_string().trim().is_empty())
        {
            missing.push(format!("{name}: empty --help"));
        }
        let Some(section) = man_section(&man, name) else {
            missing.push(format!("{name}: no `.It Cm {name}` in colibri(1)"));
            continue;
        };
        for arg in sub.get_arguments() {
            check_arg(sub, arg, section, &mut missing);
        }
    }
    assert!(missing.is_empty(), "undocumented: {missing:#?}");
}

/// The man page's entry for `colibri NAME`: from its `.It Cm NAME` to the
/// next command's entry.
fn man_section<'a>(man: &'a str, name: &str) -> Option<&'a str> {
    let start = man
        .match_indices(&format!(".It Cm {name}"))
        .map(|(i, _)| i)
        .find(|i| {
            let rest = &man[i + 7 + name.len()..];
            rest.starts_with(' ') || rest.starts_with('\n')
        })?;
    let body = &man[start + 1..];
    let end = body
        .match_indices("\n.It Cm ")
        .map(|(i, _)| i)
        .next()
        .unwrap_or(body.len());
    Some(&body[..end])
}

fn check_arg(cmd: &clap::Command, arg: &clap::Arg, man: &str, missing: &mut Vec<String>) {
    let id = arg.get_id().as_str();
    if id == "help" || id == "version" {
        return;
    }
    let at = format!("{} {id}", cmd.get_name());
    if arg
        .get_help()
        .is_none_or(|h| h.to_string().trim().is_empty())
    {
        missing.push(format!("{at}: empty --help"));
    }
    if let Some(long) = arg.get_long() {
        if !man.contains(&format!("Fl -{long}")) {
            missing.push(format!("{at}: no `Fl -{long}` in colibri(1)"));
        }
    }
}
