//! The default policies (the destructive-command guard and loop detection,
//! on by default) must not trip on any normal run: every shipped sample,
//! every adapter fixture and every stream under `tests/real` folds with no
//! verdict, except the one fixture that records a destructive command on
//! purpose (Pi's `rpc-dialog`: an extension asks before `git push --force`),
//! where the guard must catch exactly that. A fold of a stream that does misbehave shows its verdicts at
//! the right lines.

mod common;

use std::path::Path;

use colibri::cli::fold::fold_input;
use colibri::core::ingest::DEFAULT_MAX_LINE;
use common::jsonl_under;

#[test]
fn no_shipped_sample_fixture_or_real_stream_trips_the_default_policies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["samples", "tests/fixtures", "tests/real"] {
        files.extend(jsonl_under(&root.join(dir)));
    }
    assert!(files.len() > 20, "too few streams found: {}", files.len());
    let mut tripped = Vec::new();
    for path in &files {
        let input = std::fs::read(path).expect("readable stream");
        let report = fold_input(input, None, DEFAULT_MAX_LINE, None)
            .unwrap_or_else(|e| panic!("{} does not fold: {e}", path.display()));
        for v in &report.verdicts {
            tripped.push(format!(
                "{}:{}: {} {}: {}",
                path.display(),
                v.line,
                v.rule,
                v.action,
                v.reason
            ));
        }
    }
    let expected: Vec<String> = ["pause", "escalate"]
        .iter()
        .map(|action| {
            format!(
                "{}:4: git_force_push {action}: git_force_push: git push --force origin main",
                root.join("tests/fixtures/pi/rpc-dialog.jsonl").display()
            )
        })
        .collect();
    assert_eq!(
        tripped,
        expected,
        "default policies tripped:\n{}",
        tripped.join("\n")
    );
}

#[test]
fn a_destructive_command_and_a_loop_show_in_the_fold_at_their_lines() {
    // A Claude stream: a header with the working directory, a harmless
    // `rm -rf ./build`, then `rm -rf ~`, then the same Read five times.
    let header = r#"{"type":"system","subtype":"init","session_id":"s","cwd":"/home/dev/p","tools":[],"model":"m"}"#;
    let tool = |id: u32, name: &str, input: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m{id}","role":"assistant","content":[{{"type":"tool_use","id":"t{id}","name":"{name}","input":{input}}}]}},"session_id":"s"}}"#
        )
    };
    let mut lines = vec![header.to_string()];
    lines.push(tool(1, "Bash", r#"{"command":"rm -rf ./build"}"#));
    lines.push(tool(2, "Bash", r#"{"command":"bash -c 'rm -fr ~'"}"#));
    for i in 0..5 {
        lines.push(tool(10 + i, "Read", r#"{"file_path":"/home/dev/p/a.rs"}"#));
    }
    let stream = lines.join("\n") + "\n";
    let report = fold_input(stream.into_bytes(), None, DEFAULT_MAX_LINE, None).expect("folds");
    let got: Vec<(u64, &str, &str)> = report
        .verdicts
        .iter()
        .map(|v| (v.line, v.rule.as_str(), v.action.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "rm_outside_cwd", "pause"),
            (3, "rm_outside_cwd", "escalate"),
            (8, "action_repeat", "pause"),
            (8, "action_repeat", "message"),
        ]
    );
    assert_eq!(
        report.verdicts[3].text.as_deref(),
        Some("You appear stuck. Compact your session and reassess.")
    );
}

/// A session log of one pane that ran `runtime` in `/srv/app` with
/// `../shared` in its scope (its `attach` record, line 1), then `events`.
fn scoped_log(runtime: &str, events: &[String]) -> Vec<u8> {
    let mut log = format!(
        concat!(
            r#"{{"ts":"2026-11-21T10:00:00.000Z","pane":"aaaa1111-0000","colibri":"attach","agent":"{rt}","#,
            r#""runtime":"{rt}","name":"w","cwd":"/srv/app","argv":["{rt}"],"generation":0,"scope":["../shared"]}}"#,
            "\n"
        ),
        rt = runtime
    );
    for (i, ev) in events.iter().enumerate() {
        log.push_str(&format!(
            "{{\"ts\":\"2026-11-21T10:00:{:02}.000Z\",\"pane\":\"aaaa1111-0000\",\"ev\":{ev}}}\n",
            i + 1
        ));
    }
    log.into_bytes()
}

/// Every harness's own shape of a write in its working directory, one in
/// its declared scope, and two outside (one by its write or edit tool,
/// one by its shell): the first outside warns, the second pauses.
#[test]
fn every_harness_s_writes_outside_its_scope_warn_then_pause_in_the_fold() {
    let claude = |id: u32, name: &str, input: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m{id}","role":"assistant","content":[{{"type":"tool_use","id":"t{id}","name":"{name}","input":{input}}}]}},"parent_tool_use_id":null,"session_id":"s"}}"#
        )
    };
    let pi = |id: u32, name: &str, args: &str| {
        format!(
            r#"{{"type":"tool_execution_start","toolCallId":"t{id}","toolName":"{name}","args":{args}}}"#
        )
    };
    let zot = |id: u32, name: &str, args: &str| {
        format!(r#"{{"type":"tool_call","id":"c{id}","name":"{name}","args":{args}}}"#)
    };
    let codex = |id: u32, item: &str| {
        format!(r#"{{"type":"item.completed","item":{{"id":"item_{id}",{item}}}}}"#)
    };
    let gemini = |id: u32, name: &str, params: &str| {
        format!(
            r#"{{"type":"tool_use","timestamp":"2026-06-02T10:00:0{id}.000Z","tool_name":"{name}","tool_id":"{name}-{id}","parameters":{params}}}"#
        )
    };
    let opencode = |id: u32, tool: &str, input: &str| {
        format!(
            r#"{{"type":"tool_use","timestamp":178119001{id}000,"sessionID":"ses_1","part":{{"id":"prt_{id}","sessionID":"ses_1","messageID":"msg_1","type":"tool","callID":"call_{id}","tool":"{tool}","state":{{"status":"completed","input":{input},"output":""}}}}}}"#
        )
    };
    let streams: Vec<(&str, Vec<String>)> = vec![
        (
            "claude",
            vec![
                r#"{"type":"system","subtype":"init","session_id":"s","cwd":"/srv/app","model":"m","tools":[]}"#.into(),
                claude(1, "Write", r#"{"file_path":"/srv/app/src/a.rs","content":"x"}"#),
                claude(2, "MultiEdit", r#"{"file_path":"/srv/shared/b.rs","edits":[]}"#),
                claude(3, "Edit", r#"{"file_path":"/etc/motd","old_string":"a","new_string":"b"}"#),
                claude(4, "Bash", r#"{"command":"make >> /var/tmp/build.log"}"#),
            ],
        ),
        (
            "pi",
            vec![
                r#"{"type":"session","version":3,"id":"s","timestamp":"2026-07-21T09:14:03.512Z","cwd":"/srv/app"}"#.into(),
                pi(1, "write", r#"{"path":"src/a.rs","content":"x"}"#),
                pi(2, "edit", r#"{"path":"../shared/b.rs","oldText":"a","newText":"b"}"#),
                pi(3, "edit", r#"{"path":"/home/u/.bashrc","oldText":"a","newText":"b"}"#),
                pi(4, "bash", r#"{"command":"cp out.txt /opt/"}"#),
            ],
        ),
        (
            "zot",
            vec![
                r#"{"type":"turn_start","step":1}"#.into(),
                zot(1, "write", r#"{"path":"main.go","content":"x"}"#),
                zot(2, "edit", r#"{"path":"/srv/shared/lib.go","edits":[]}"#),
                zot(3, "write", r#"{"path":"../other/x.go","content":"x"}"#),
                zot(4, "bash", r#"{"command":"go test ./... > /tmp/test.log"}"#),
            ],
        ),
        (
            "codex",
            vec![
                r#"{"type":"thread.started","thread_id":"019a7c31-5e2b-7d90-b1f4-2c8e6a0d9f13"}"#.into(),
                codex(1, r#""type":"file_change","changes":[{"path":"/srv/app/src/lib.rs","kind":"update"}],"status":"completed""#),
                codex(2, r#""type":"file_change","changes":[{"path":"/srv/shared/x","kind":"add"}],"status":"completed""#),
                codex(3, r#""type":"file_change","changes":[{"path":"src/ok.rs","kind":"add"},{"path":"/srv/other/y","kind":"add"}],"status":"completed""#),
                r#"{"type":"item.started","item":{"id":"item_4","type":"command_execution","command":"bash -lc 'echo x | tee /var/tmp/y'","aggregated_output":"","status":"in_progress"}}"#.into(),
            ],
        ),
        (
            "gemini",
            vec![
                r#"{"type":"init","timestamp":"2026-06-02T10:00:00.120Z","session_id":"c0ffee00-1234-4abc-9def-001122334455","model":"gemini-2.5-pro"}"#.into(),
                gemini(1, "write_file", r#"{"file_path":"/srv/app/notes.md","content":"x"}"#),
                gemini(2, "replace", r#"{"file_path":"../shared/c.py","old_string":"a","new_string":"b"}"#),
                gemini(3, "replace", r#"{"file_path":"/opt/app/main.py","old_string":"a","new_string":"b"}"#),
                gemini(4, "run_shell_command", r#"{"command":"mv a.txt /srv/public/"}"#),
            ],
        ),
        (
            "opencode",
            vec![
                r#"{"type":"step_start","timestamp":1781190010000,"sessionID":"ses_1","part":{"id":"prt_0","sessionID":"ses_1","messageID":"msg_1","type":"step-start"}}"#.into(),
                opencode(1, "write", r#"{"filePath":"/srv/app/a.ts","content":"x"}"#),
                opencode(2, "edit", r#"{"filePath":"/srv/shared/b.ts","oldString":"a","newString":"b"}"#),
                opencode(3, "edit", r#"{"filePath":"/home/u/x.ts","oldString":"a","newString":"b"}"#),
                opencode(4, "patch", r#"{"patchText":"*** Begin Patch\n*** Add File: /etc/cron.d/job\n+* * * * * true\n*** End Patch"}"#),
            ],
        ),
    ];
    for (runtime, events) in streams {
        let rt = colibri::core::taxonomy::Runtime::parse(runtime).expect("a runtime");
        let report = fold_input(
            scoped_log(runtime, &events),
            Some(rt),
            DEFAULT_MAX_LINE,
            None,
        )
        .unwrap_or_else(|e| panic!("{runtime}: {e}"));
        let got: Vec<(u64, &str, &str)> = report
            .verdicts
            .iter()
            .map(|v| (v.line, v.rule.as_str(), v.action.as_str()))
            .collect();
        // The attach record is line 1, the header line 2: the outside
        // writes are lines 5 and 6.
        assert_eq!(
            got,
            [
                (5, "write_outside_scope", "warn"),
                (6, "write_outside_scope", "pause"),
                (6, "write_outside_scope", "escalate"),
            ],
            "{runtime}: {:#?}",
            report.verdicts
        );
        assert!(
            report.verdicts.iter().all(|v| v.path.is_some()),
            "{runtime}: each names its file"
        );
    }
}

/// A recorded stream as the session log keeps it: an `attach` record
/// starting it in `/srv/app` (line 1), then each line as an event (a JSON
/// line) or raw text (what the harness printed that is not JSON).
fn logged(stream: &[u8]) -> Vec<u8> {
    let mut log = String::from(concat!(
        r#"{"ts":"2026-11-21T10:00:00.000Z","pane":"aaaa1111-0000","colibri":"attach","agent":"x","#,
        r#""runtime":null,"name":"w","cwd":"/srv/app","argv":["x"],"generation":0}"#,
        "\n"
    ));
    for line in stream.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let head = r#"{"ts":"2026-11-21T10:00:01.000Z","pane":"aaaa1111-0000","#;
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(_) => log.push_str(&format!(
                "{head}\"ev\":{}}}\n",
                String::from_utf8_lossy(line)
            )),
            Err(_) => log.push_str(&format!(
                "{head}\"raw\":{}}}\n",
                serde_json::Value::from(String::from_utf8_lossy(line).into_owned())
            )),
        }
    }
    log.into_bytes()
}

/// The real harnesses' own streams (tests/recorded: each ran one shell
/// command in its working directory) give the scope rule nothing; the
/// same streams with that command's output sent to a file outside the
/// directory give a warning naming the file, at the line of the call, so
/// the rule reads every harness's real shell-call shape.
#[test]
fn every_recorded_harness_stream_is_judged_by_the_scope_rule() {
    const OUTSIDE: &str = "/var/tmp/colibri-outside.txt";
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/recorded");
    let streams = jsonl_under(&root);
    assert!(streams.len() >= 10, "too few recordings: {}", streams.len());
    let mut runtimes = std::collections::BTreeSet::new();
    for path in &streams {
        let expect: serde_json::Value = serde_json::from_slice(
            &std::fs::read(path.with_extension("expect.json")).expect("its expect file"),
        )
        .expect("expect json");
        let runtime = expect["runtime"].as_str().expect("a runtime");
        runtimes.insert(runtime.to_string());
        let rt = colibri::core::taxonomy::Runtime::parse(runtime);
        let stream = std::fs::read(path).expect("readable");
        let fold = |bytes: &[u8]| {
            fold_input(logged(bytes), rt, DEFAULT_MAX_LINE, None)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let plain = fold(&stream);
        assert!(
            plain.verdicts.is_empty(),
            "{}: {:#?}",
            path.display(),
            plain.verdicts
        );
        let text = String::from_utf8(stream).expect("utf-8");
        let redirected = text
            .replace("echo scripted-ok", &format!("echo scripted-ok >{OUTSIDE}"))
            .replace("touch never-made", &format!("touch never-made >{OUTSIDE}"));
        assert_ne!(redirected, text, "{}: no shell command", path.display());
        // The attach record is line 1: the stream's line n is line n+1.
        let call_line = 2 + redirected
            .lines()
            .position(|l| l.contains(OUTSIDE))
            .expect("the call") as u64;
        let folded = fold(redirected.as_bytes());
        let first = folded
            .verdicts
            .first()
            .unwrap_or_else(|| panic!("{}: no verdict", path.display()));
        assert_eq!(
            (
                first.rule.as_str(),
                first.action.as_str(),
                first.path.as_deref()
            ),
            ("write_outside_scope", "warn", Some(OUTSIDE)),
            "{}: {:#?}",
            path.display(),
            folded.verdicts
        );
        // At the call, or at a later line that reports it (Pi's
        // `tool_execution_start` after its streamed message).
        assert!(
            first.line >= call_line,
            "{}: verdict at {} before the call at {call_line}",
            path.display(),
            first.line,
        );
        assert!(
            folded
                .verdicts
                .iter()
                .all(|v| v.rule == "write_outside_scope"),
            "{}: {:#?}",
            path.display(),
            folded.verdicts
        );
    }
    assert_eq!(
        runtimes.into_iter().collect::<Vec<_>>(),
        ["claude", "codex", "gemini", "opencode", "pi"],
        "a harness without a recording"
    );
}
