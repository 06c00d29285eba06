//! Governance in the real daemon: scripted Pi agents on real PTYs that
//! spend tokens, loop, or run a destructive command, and the verdicts the
//! daemon carries out (pause, the recovery message on the agent's input,
//! the timed resume), seen on the watch stream and the snapshot.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Client, Colibrid};

/// Starts colibrid with `config` as its config file.
fn daemon_with(config: &str) -> Colibrid {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("colibri.toml");
    std::fs::write(&path, config).expect("write config");
    let d = Colibrid::start(&["--config", &path.display().to_string()]);
    // The config's directory must outlive the daemon's start only.
    drop(dir);
    d
}

/// A Pi agent that waits for the file GO, prints `lines`, then runs `tail`
/// (shell) and waits for the file END.
fn agent(d: &Colibrid, name: &str, lines: &[&str], tail: &str) -> (String, String) {
    agent_of(d, "pi", name, lines, tail)
}

/// [`agent`] speaking `runtime`'s dialect.
fn agent_of(
    d: &Colibrid,
    runtime: &str,
    name: &str,
    lines: &[&str],
    tail: &str,
) -> (String, String) {
    let go = d.path(&format!("{name}.go"));
    let end = d.path(&format!("{name}.end"));
    let mut body = format!("while [ ! -e '{}' ]; do sleep 0.05; done\n", go.display());
    for l in lines {
        body.push_str(&format!("printf '%s\\n' '{l}'\n"));
    }
    body.push_str(tail);
    body.push_str(&format!(
        "\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n",
        end.display()
    ));
    let script = d.script(&format!("{name}.sh"), &body);
    let cwd = d.dir.path().display().to_string();
    let id = d.spawn(&[&script], json!({"runtime": runtime, "cwd": cwd}));
    (id, go.display().to_string())
}

fn watch(d: &Colibrid, id: &str) -> Client {
    let mut w = d.client();
    assert_eq!(
        w.request(&json!({"cmd":"watch","panes":[id]}))["ok"],
        json!(true)
    );
    w
}

/// The next watch event of `kind` (and, for verdicts, `action`).
fn next(w: &mut Client, kind: &str, action: Option<&str>) -> Value {
    loop {
        let ev = w.read_line().unwrap_or_else(|| panic!("no {kind} event"));
        if ev["event"] != json!(kind) {
            continue;
        }
        if action.is_none_or(|a| ev["verdict"]["action"] == json!(a)) {
            return ev;
        }
    }
}

/// The pane's logged bytes once they stop moving: the same in five reads
/// 100 ms apart. A pause stops the process, but what its PTY already held
/// is still read and logged, at whatever pace this host allows.
fn settled_bytes(d: &Colibrid, id: &str) -> u64 {
    let bytes = || d.pane(id)["counters"]["bytes"].as_u64().unwrap_or(0);
    let (mut last, mut same) = (bytes(), 0);
    wait_for(
        Duration::from_secs(30),
        "the logged bytes to settle",
        || {
            std::thread::sleep(Duration::from_millis(100));
            let now = bytes();
            same = if now == last { same + 1 } else { 0 };
            last = now;
            (same >= 5).then_some(now)
        },
    )
}

/// Lets a second of the daemon's own clock pass: a control agent that says
/// one line and then nothing, with a 1 s stall threshold, is stalled. A
/// paused agent that could print has had that second to print in.
fn a_daemon_second(d: &Colibrid) {
    let control = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; exec sleep 60",
        ],
        json!({"stall_after":"1s"}),
    );
    d.wait_pane(&control, "the control agent to stall", |p| {
        p["stalled"] == json!(true)
    });
    d.ok(json!({"cmd":"kill-agent","agent_id": control}));
}

fn go(path: &str) {
    std::fs::write(path, b"").expect("write go file");
}

#[test]
fn a_destructive_command_pauses_the_agent_and_escalates() {
    let d = Colibrid::start(&[]);
    let (id, gate) = agent(
        &d,
        "guard",
        &[
            r#"{"type":"agent_start"}"#,
            r#"{"type":"tool_execution_start","toolCallId":"t1","toolName":"bash","args":{"command":"rm -rf ./build"}}"#,
            r#"{"type":"tool_execution_start","toolCallId":"t2","toolName":"bash","args":{"command":"sh -c \"rm -fr /\""}}"#,
        ],
        "",
    );
    let mut w = watch(&d, &id);
    go(&gate);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["policy"], json!("guard"));
    assert_eq!(pause["verdict"]["rule"], json!("rm_outside_cwd"));
    assert_eq!(pause["verdict"]["line"], json!(3));
    assert!(pause["verdict"].get("until").is_none(), "{pause}");
    let esc = next(&mut w, "verdict", Some("escalate"));
    assert_eq!(esc["verdict"]["line"], json!(3));
    d.wait_pane(&id, "the agent to be paused", |p| {
        p["paused"] == json!(true)
    });
    // Only an operator resumes it.
    d.ok(json!({"cmd":"resume-agent","agent_id": id}));
    assert_eq!(d.pane(&id)["paused"], json!(false));
}

#[test]
fn a_looping_agent_is_paused_told_to_reassess_on_its_input_and_resumed_after_the_backoff() {
    let d = daemon_with("[loops]\nbackoff = [\"1s\", \"2s\"]\n");
    let got = d.path("got");
    let read = r#"{"type":"tool_execution_start","toolCallId":"t","toolName":"read","args":{"path":"a.txt"}}"#;
    let (id, gate) = agent(
        &d,
        "loop",
        &[r#"{"type":"agent_start"}"#, read, read, read, read, read],
        &format!("read msg; printf '%s\\n' \"$msg\" > '{}'", got.display()),
    );
    let mut w = watch(&d, &id);
    go(&gate);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["policy"], json!("loop"));
    assert_eq!(pause["verdict"]["rule"], json!("action_repeat"));
    assert_eq!(pause["verdict"]["line"], json!(6));
    assert!(pause["verdict"]["until"].is_string(), "{pause}");
    next(&mut w, "paused", None);
    let msg = next(&mut w, "verdict", Some("message"));
    assert_eq!(
        msg["verdict"]["text"],
        json!("You appear stuck. Compact your session and reassess.")
    );
    let resume = next(&mut w, "verdict", Some("resume"));
    assert_eq!(resume["verdict"]["rule"], json!("backoff"));
    next(&mut w, "resumed", None);
    // The agent read the message (Pi's RPC prompt command) on its input.
    let text = wait_for(
        Duration::from_secs(30),
        "the agent to read its input",
        || std::fs::read_to_string(&got).ok().filter(|t| !t.is_empty()),
    );
    let prompt: Value = serde_json::from_str(text.trim()).expect("a JSON prompt");
    assert_eq!(prompt["type"], json!("prompt"));
    assert_eq!(
        prompt["message"],
        json!("You appear stuck. Compact your session and reassess.")
    );
}

#[test]
fn each_loop_type_is_detected_in_the_daemon() {
    let d = daemon_with(
        "[loops]\nbackoff = [\"1h\"]\nerror_repeat = 3\nburn_messages = 3\nburn_tokens = 300\nthrash_alternations = 2\n",
    );
    let err = r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"overloaded"}}"#;
    let burn = r#"{"type":"turn_start"}"#;
    let used = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":100,"output":50,"cacheRead":0,"cacheWrite":0,"totalTokens":150,"cost":{"total":0.001}}}}"#;
    let edit_a = r#"{"type":"tool_execution_start","toolCallId":"e","toolName":"edit","args":{"path":"x.rs","oldText":"a","newText":"b"}}"#;
    let edit_b = r#"{"type":"tool_execution_start","toolCallId":"e","toolName":"edit","args":{"path":"x.rs","oldText":"b","newText":"a"}}"#;
    let cases: [(&str, Vec<&str>); 3] = [
        ("error_loop", vec![err, err, err]),
        ("token_burn", vec![burn, used, burn, used, burn, used]),
        ("thrashing", vec![edit_a, edit_b, edit_a, edit_b]),
    ];
    for (rule, lines) in cases {
        let mut all = vec![r#"{"type":"agent_start"}"#];
        all.extend(lines);
        let (id, gate) = agent(&d, rule, &all, "");
        let mut w = watch(&d, &id);
        go(&gate);
        let pause = next(&mut w, "verdict", Some("pause"));
        assert_eq!(pause["verdict"]["rule"], json!(rule), "{pause}");
        d.wait_pane(&id, "the looping agent to be paused", |p| {
            p["paused"] == json!(true)
        });
    }
}

#[test]
fn a_budget_pauses_the_agent_at_the_line_that_reaches_the_cap_and_resumes_when_the_window_rolls() {
    let d = daemon_with("[budgets.burst]\ntokens = 1000\nwindow = \"3s\"\nwarn_at = 0.5\n");
    let used = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":300,"output":100,"cacheRead":0,"cacheWrite":0,"totalTokens":400,"cost":{"total":0.001}}}}"#;
    let (id, gate) = agent(
        &d,
        "budget",
        &[r#"{"type":"agent_start"}"#, used, used, used],
        "",
    );
    let mut w = watch(&d, &id);
    go(&gate);
    let warn = next(&mut w, "verdict", Some("warn"));
    assert_eq!(warn["verdict"]["line"], json!(3));
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["policy"], json!("budget"));
    assert_eq!(pause["verdict"]["rule"], json!("burst"));
    assert_eq!(pause["verdict"]["line"], json!(4));
    assert!(pause["verdict"]["until"].is_string());
    next(&mut w, "paused", None);
    let resume = next(&mut w, "verdict", Some("resume"));
    assert_eq!(resume["verdict"]["rule"], json!("burst"));
    next(&mut w, "resumed", None);
    assert_eq!(d.pane(&id)["paused"], json!(false));
}

#[test]
fn tokens_of_a_harness_without_costs_are_priced_by_the_model_its_header_names() {
    // Gemini prints tokens only; its `init` names the model. The model's
    // price makes the line reach the cap; the runtime's would not.
    let d = daemon_with(concat!(
        "[budgets.dollars]\nusd = 1.0\nwindow = \"1h\"\n",
        "[prices.gemini]\noutput = 1.0\n",
        "[prices.\"gemini-2.5-pro\"]\noutput = 10.0\n",
    ));
    let (id, gate) = agent_of(
        &d,
        "gemini",
        "priced",
        &[
            r#"{"type":"init","session_id":"c0ffee00-1234-4abc-9def-001122334455","model":"gemini-2.5-pro"}"#,
            r#"{"type":"result","status":"success","stats":{"input_tokens":0,"output_tokens":100000}}"#,
        ],
        "",
    );
    let mut w = watch(&d, &id);
    go(&gate);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["rule"], json!("dollars"));
    assert_eq!(pause["verdict"]["line"], json!(2));
    let shown = d.ok(json!({"cmd":"budget"}));
    let spent = shown["budgets"][0]["spent"].as_f64().expect("spent");
    assert!((spent - 1.0).abs() < 1e-9, "{shown}");
}

#[test]
fn an_operator_raises_the_cap_and_the_paused_agent_resumes() {
    let d = daemon_with("[budgets.hour]\ntokens = 500\nwindow = \"1h\"\n");
    let used = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":300,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":600,"cost":{"total":0.001}}}}"#;
    let (id, gate) = agent(&d, "raise", &[r#"{"type":"agent_start"}"#, used], "");
    let mut w = watch(&d, &id);
    go(&gate);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["line"], json!(2));
    next(&mut w, "paused", None);
    let shown = d.ok(json!({"cmd":"budget"}));
    assert_eq!(shown["budgets"][0]["budget"], json!("hour"));
    assert_eq!(shown["budgets"][0]["spent"], json!(600.0));
    assert_eq!(shown["budgets"][0]["paused"], json!(true));
    // The control plane's `state` tells the agent the same standing.
    let st = d.ok(json!({"cmd":"state","pane": id}));
    let budget = &st["agents"][0]["budget"];
    assert_eq!(budget["configured"], json!(true), "{st}");
    assert_eq!(budget["daily_tokens"], json!(500), "{st}");
    assert_eq!(budget["spent_today"], json!(600), "{st}");
    assert_eq!(budget["remaining"], json!(0), "{st}");
    assert_eq!(budget["hard_limit_exceeded"], json!(true), "{st}");
    let bad = d.request(json!({"cmd":"budget","action":"raise","budget":"nope","cap":1000}));
    assert_eq!(bad["ok"], json!(false), "{bad}");
    let raised = d.ok(json!({"cmd":"budget","action":"raise","budget":"hour","cap":1000}));
    assert_eq!(raised["resumed"], json!(1));
    assert_eq!(raised["budgets"][0]["paused"], json!(false));
    next(&mut w, "resumed", None);
    assert_eq!(d.pane(&id)["paused"], json!(false));
}

#[test]
fn a_reload_turns_the_guard_on() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.relaunch_with_config("govern.toml", "[guard]\nenabled = false\n");
    let rm = r#"{"type":"tool_execution_start","toolCallId":"t","toolName":"bash","args":{"command":"rm -rf /"}}"#;
    let (off, gate) = agent(
        &d,
        "off",
        &[r#"{"type":"agent_start"}"#, rm, r#"{"type":"turn_start"}"#],
        "",
    );
    go(&gate);
    // Every line is read (the turn after the call) and nothing paused it.
    d.wait_pane(&off, "the agent's lines", |p| {
        p["counters"]["events"] == json!(3)
    });
    assert_eq!(d.pane(&off)["paused"], json!(false));

    std::fs::write(&cfg, "[guard]\nenabled = true\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(20));
    let (on, gate) = agent(&d, "on", &[r#"{"type":"agent_start"}"#, rm], "");
    go(&gate);
    d.wait_pane(&on, "the guard to pause the agent", |p| {
        p["paused"] == json!(true)
    });
}

/// An agent printing in a loop is paused by the output budget once its
/// session log has taken the cap, and prints no more until an operator
/// raises the cap; then it goes on to the new cap.
#[test]
fn an_agent_printing_in_a_loop_is_paused_by_the_output_budget_until_the_cap_is_raised() {
    const MIB: u64 = 1 << 20;
    let d = daemon_with("[budgets.output]\nbytes = 1048576\nwindow = \"1h\"\n");
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    let cwd = d.dir.path().display().to_string();
    let id = d.spawn(
        &["/bin/sh", "-c", &format!("yes '{delta}'")],
        json!({"runtime":"pi","cwd": cwd}),
    );
    let mut w = watch(&d, &id);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["policy"], json!("budget"), "{pause}");
    assert_eq!(pause["verdict"]["rule"], json!("output"), "{pause}");
    let reason = pause["verdict"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("of 1.0 MiB of output"), "{reason}");
    next(&mut w, "paused", None);
    let spent = |d: &Colibrid| {
        let shown = d.ok(json!({"cmd":"budget"}));
        shown["budgets"][0]["spent"].as_f64().unwrap_or(0.0) as u64
    };
    // What the PTY held when the agent stopped is still read and logged;
    // then nothing more comes.
    let logged = settled_bytes(&d, &id);
    let held = spent(&d);
    assert!(
        (MIB..2 * MIB).contains(&held),
        "{held} log bytes at the pause"
    );
    a_daemon_second(&d);
    assert_eq!(
        d.pane(&id)["counters"]["bytes"].as_u64(),
        Some(logged),
        "a paused agent printed on"
    );
    let shown = d.ok(json!({"cmd":"budget"}));
    let ledger = &shown["budgets"][0];
    assert_eq!(
        (
            &ledger["budget"],
            &ledger["unit"],
            &ledger["key"],
            &ledger["paused"]
        ),
        (&json!("output"), &json!("bytes"), &json!(id), &json!(true)),
        "{shown}"
    );
    let status = d.ok(json!({"cmd":"status"}));
    assert_eq!(status["paused"], json!(1), "{status}");
    // A byte budget is not the agent's token budget.
    let st = d.ok(json!({"cmd":"state","pane": id}));
    assert_eq!(
        st["agents"][0]["budget"]["configured"],
        json!(false),
        "{st}"
    );
    let raised = d.ok(json!({"cmd":"budget","action":"raise","budget":"output","cap":4 * MIB}));
    assert_eq!(raised["resumed"], json!(1), "{raised}");
    next(&mut w, "resumed", None);
    next(&mut w, "paused", None);
    settled_bytes(&d, &id);
    let held = spent(&d);
    assert!(
        (4 * MIB..5 * MIB).contains(&held),
        "{held} log bytes at the second pause"
    );
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}

/// Without configuration the output budget counts each pane's output
/// against 1 GiB an hour; removing the pane drops its ledger.
#[test]
fn the_output_budget_applies_without_configuration_and_leaves_with_the_pane() {
    let d = Colibrid::start(&[]);
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    // 3,000 lines of 97 bytes, 183 in the log each: eight whole steps of
    // 64 KiB.
    let id = d.spawn(
        &["/bin/sh", "-c", &format!("yes '{delta}' | head -n 3000")],
        json!({"runtime":"pi"}),
    );
    let ledger = wait_for(Duration::from_secs(10), "eight steps of output", || {
        let shown = d.ok(json!({"cmd":"budget"}));
        let b = shown["budgets"].get(0).cloned()?;
        (b["spent"].as_f64()? >= 8.0 * 65536.0).then_some(b)
    });
    assert_eq!(
        (
            &ledger["budget"],
            &ledger["unit"],
            &ledger["key"],
            &ledger["cap"]
        ),
        (
            &json!("output"),
            &json!("bytes"),
            &json!(id),
            &json!(1073741824.0)
        ),
        "{ledger}"
    );
    wait_for(Duration::from_secs(10), "the agent's exit", || {
        d.pane(&id)["exit"].is_object().then_some(())
    });
    // What is counted is what the session log took, less the step not
    // yet full (the log also holds the attach and exit records).
    let sessions = d.ok(json!({"cmd":"list-sessions"}));
    let log = sessions
        .as_array()
        .and_then(|s| s.iter().find(|s| s["panes"].to_string().contains(&id)))
        .and_then(|s| s["bytes"].as_f64())
        .unwrap_or(0.0);
    let spent = ledger["spent"].as_f64().unwrap_or(0.0);
    assert!(
        spent <= log && spent > log - 65536.0 - 1024.0,
        "{spent} of {log}"
    );
    d.ok(json!({"cmd":"remove-agent","agent_id": id}));
    let shown = d.ok(json!({"cmd":"budget"}));
    assert_eq!(shown["budgets"], json!([]), "{shown}");
}

/// A pause reaches what the agent left running in the background: a
/// printer that called `setsid` and whose parent exited is re-parented to
/// colibrid, outside the agent's tree, and printed on through the output
/// budget's pause until the operator removed it by hand.
#[test]
fn the_output_budget_pauses_a_printer_the_agent_left_behind() {
    let d = daemon_with("[budgets.output]\nbytes = 1048576\nwindow = \"1h\"\n");
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    let cwd = d.dir.path().display().to_string();
    // The subshell exits at once: `yes` is an orphan in its own session.
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!(
                "({} yes '{delta}' &); exec sleep 600",
                crate::support::setsid()
            ),
        ],
        json!({"runtime":"pi","cwd": cwd}),
    );
    let mut w = watch(&d, &id);
    next(&mut w, "paused", None);
    let logged = settled_bytes(&d, &id);
    a_daemon_second(&d);
    let after = d.pane(&id)["counters"]["bytes"].as_u64().unwrap_or(0);
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    assert_eq!(
        after, logged,
        "the orphan printed on while its pane was paused"
    );
}

/// A reload that raises a budget's cap resumes what it paused at once, as
/// `budget raise` does; one that turns the budget off (or changes its
/// scope, unit or period) resumes what that budget held paused. Before,
/// the first waited for the old window to roll, and the second left the
/// agent stopped for good, its ledger gone.
#[test]
fn a_reload_that_raises_or_drops_a_budget_resumes_what_it_paused() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.relaunch_with_config(
        "budget.toml",
        "[budgets.output]\nbytes = 1048576\nwindow = \"1h\"\n",
    );
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    let cwd = d.dir.path().display().to_string();
    let id = d.spawn(
        &["/bin/sh", "-c", &format!("yes '{delta}'")],
        json!({"runtime":"pi","cwd": cwd}),
    );
    let mut w = watch(&d, &id);
    next(&mut w, "paused", None);
    std::fs::write(&cfg, "[budgets.output]\nbytes = 4194304\nwindow = \"1h\"\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(10));
    next(&mut w, "resumed", None);
    next(&mut w, "paused", None);
    std::fs::write(&cfg, "[budgets.output]\nenabled = false\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(10));
    next(&mut w, "resumed", None);
    assert_eq!(d.pane(&id)["paused"], json!(false), "{}", d.pane(&id));
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}

/// Each pane a budget paused is resumed when its own window rolls, also
/// when another pane's resume came first: a resume re-arms the next one.
/// Before, the second pane's timer was set to the first pane's time, and
/// once it fired nothing was armed again: the second pane stayed stopped.
#[test]
fn panes_paused_at_different_times_are_each_resumed_when_their_window_rolls() {
    let d = daemon_with("[budgets.output]\nbytes = 1048576\nwindow = \"3s\"\n");
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    let cwd = d.dir.path().display().to_string();
    // 6,000 lines of 183 log bytes: a little over the cap, then quiet.
    let argv = format!("yes '{delta}' | head -n 6000; exec sleep 600");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = d.spawn(
            &["/bin/sh", "-c", &argv],
            json!({"runtime":"pi","cwd": cwd}),
        );
        d.wait_pane(&id, "paused", |p| p["paused"] == json!(true));
        ids.push(id);
        std::thread::sleep(Duration::from_millis(1000));
    }
    for (i, id) in ids.iter().enumerate() {
        d.wait_pane(id, &format!("pane {i} resumed"), |p| {
            p["paused"] == json!(false)
        });
    }
    for id in &ids {
        d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    }
}

/// A budget shared by a runtime pauses all its panes, and its timed
/// resume is armed on the pane whose output crossed the cap. That pane
/// ending (here killed while paused) must not take the resume with it:
/// before, its exit released every timer it held, and the other pane
/// stayed stopped for good.
#[test]
fn a_shared_budgets_resume_outlives_the_pane_that_armed_it() {
    let d =
        daemon_with("[budgets.shared]\nscope = \"runtime:pi\"\nbytes = 1048576\nwindow = \"3s\"\n");
    let delta = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"again and again"}}"#;
    let cwd = d.dir.path().display().to_string();
    let quiet = d.spawn(
        &["/bin/sh", "-c", "exec sleep 600"],
        json!({"runtime":"pi","cwd": cwd}),
    );
    // 6,000 lines of 183 log bytes: a little over the cap, then quiet.
    let printer = d.spawn(
        &[
            "/bin/sh",
            "-c",
            &format!("yes '{delta}' | head -n 6000; exec sleep 600"),
        ],
        json!({"runtime":"pi","cwd": cwd}),
    );
    d.wait_pane(&printer, "the printer paused", |p| {
        p["paused"] == json!(true)
    });
    d.wait_pane(&quiet, "the quiet pane paused", |p| {
        p["paused"] == json!(true)
    });
    d.ok(json!({"cmd":"kill-agent","agent_id": printer}));
    d.wait_pane(&printer, "the printer's exit", |p| p["exit"].is_object());
    d.wait_pane(&quiet, "the quiet pane resumed", |p| {
        p["paused"] == json!(false)
    });
    d.ok(json!({"cmd":"kill-agent","agent_id": quiet}));
}

/// A pane the guard stopped stays stopped when a global budget that
/// paused every pane meanwhile resumes them: each policy lifts only its
/// own hold, and only the operator lifts the guard's.
#[test]
fn a_budgets_resume_does_not_continue_a_pane_the_guard_stopped() {
    let d = daemon_with("[budgets.all]\nscope = \"global\"\ntokens = 1000\nwindow = \"2s\"\n");
    let (guarded, gate) = agent(
        &d,
        "guarded",
        &[
            r#"{"type":"agent_start"}"#,
            r#"{"type":"tool_execution_start","toolCallId":"t2","toolName":"bash","args":{"command":"sh -c \"rm -fr /\""}}"#,
        ],
        "",
    );
    let mut w = watch(&d, &guarded);
    go(&gate);
    let pause = next(&mut w, "verdict", Some("pause"));
    assert_eq!(pause["verdict"]["policy"], json!("guard"), "{pause}");
    d.wait_pane(&guarded, "the guard's pause", |p| {
        p["paused"] == json!(true)
    });
    let used = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":900,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":1200,"cost":{"total":0.001}}}}"#;
    let (spender, gate) = agent(&d, "spender", &[r#"{"type":"agent_start"}"#, used], "");
    let mut ws = watch(&d, &spender);
    go(&gate);
    next(&mut ws, "paused", None);
    // The window rolls: the budget resumes every pane it holds.
    next(&mut ws, "resumed", None);
    a_daemon_second(&d);
    assert_eq!(
        d.pane(&guarded)["paused"],
        json!(true),
        "the guard's pause held"
    );
    d.ok(json!({"cmd":"resume-agent","agent_id": guarded}));
    assert_eq!(d.pane(&guarded)["paused"], json!(false));
}

/// A pane that starts while a shared budget holds its scope paused waits
/// with the others, and goes on when they do (before, it spent freely
/// until the window rolled).
#[test]
fn a_pane_started_during_a_shared_budgets_pause_waits_with_the_others() {
    let d = daemon_with("[budgets.all]\nscope = \"global\"\ntokens = 1000\nwindow = \"3s\"\n");
    let used = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":900,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":1200,"cost":{"total":0.001}}}}"#;
    let (spender, gate) = agent(&d, "spender", &[r#"{"type":"agent_start"}"#, used], "");
    let mut ws = watch(&d, &spender);
    go(&gate);
    next(&mut ws, "paused", None);
    let late = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({"name":"late"}));
    let p = d.wait_pane(&late, "the late pane to wait", |p| {
        p["paused"] == json!(true)
    });
    assert!(p["exit"].is_null(), "{p}");
    d.wait_pane(&late, "the late pane to go on with the others", |p| {
        p["paused"] == json!(false)
    });
    assert_eq!(d.pane(&spender)["paused"], json!(false));
}

/// Why a pane is paused is said wherever paused is: each hold (who or
/// which rule, what the agent did, since when, until when) in snapshot
/// v2 and in `colibri snapshot`; an operator's resume lifts them all.
#[test]
fn every_hold_of_a_paused_pane_is_shown_with_its_reason() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"wrecker", "runtime":"pi"}),
    );
    d.ok(json!({"cmd":"emit","agent_id": id, "event":{"type":"agent_start"}}));
    d.ok(
        json!({"cmd":"emit","agent_id": id, "event":{"type":"tool_execution_start",
        "toolCallId":"t","toolName":"bash","args":{"command":"rm -rf /"}}}),
    );
    let p = d.wait_pane(&id, "the guard's pause", |p| p["paused"] == json!(true));
    let holds = p["holds"].as_array().cloned().unwrap_or_default();
    assert_eq!(holds.len(), 1, "{p}");
    assert_eq!(holds[0]["by"], json!("guard"), "{p}");
    assert_eq!(holds[0]["rule"], json!("rm_outside_cwd"), "{p}");
    assert!(
        holds[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("rm -rf /")),
        "{p}"
    );
    assert!(holds[0]["until"].is_null(), "until an operator: {p}");
    d.ok(json!({"cmd":"pause-agent","agent_id": id}));
    let p = d.pane(&id);
    let by: Vec<&str> = p["holds"]
        .as_array()
        .map(|h| h.iter().filter_map(|h| h["by"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(by, ["guard", "operator"], "{p}");
    let o = std::process::Command::new(crate::support::COLIBRI)
        .args(["snapshot"])
        .env("COLIBRI_SOCKET", &d.socket)
        .output()
        .expect("colibri snapshot");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("wrecker paused by the guard (rm_outside_cwd) since ")
            && text.contains("rm -rf /; until an operator resumes it")
            && text.contains("wrecker paused by the operator since "),
        "{text}"
    );
    d.ok(json!({"cmd":"resume-agent","agent_id": id}));
    let p = d.pane(&id);
    assert_eq!(p["paused"], json!(false), "{p}");
    assert!(p["holds"].is_null(), "{p}");
}

/// A pane's spend over its whole life, restarts included, is in snapshot
/// v2's `usage_total` (each run's own `usage` starts over), so the board's
/// charts do not drop at a restart; over the panes, it sums to what a
/// global budget counted.
#[test]
fn a_panes_lifetime_spend_survives_its_restarts_and_sums_to_the_global_budget() {
    let mut d = Colibrid::start(&[]);
    d.relaunch_with_config(
        "budget.toml",
        "[restart]\nbackoff = [\"100ms\"]\n[budgets.everything]\nscope = \"global\"\nusd = 100.0\ndaily = true\n",
    );
    let spend = r#"{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":1000,"output":100,"cacheRead":0,"cacheWrite":0,"totalTokens":1100,"cost":{"total":0.25}}}}"#;
    let script = d.script(
        "spender",
        &format!("printf '%s\\n' '{spend}'\nsleep 0.3\nexit 0"),
    );
    let id = d.spawn(
        &[&script],
        json!({"name":"spender","runtime":"pi","restart":"always","max_restarts":2}),
    );
    let p = d.wait_pane(&id, "three runs' spend", |p| {
        p["usage_total"]["cost_usd"].as_f64() >= Some(0.75)
    });
    assert_eq!(p["usage_total"]["input_tokens"], json!(3000), "{p}");
    assert!(
        p["usage"]["cost_usd"].as_f64() <= Some(0.25),
        "this run's own: {p}"
    );
    let budget = d.ok(json!({"cmd":"budget"}));
    let global = budget["budgets"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["budget"] == json!("everything")))
        .cloned()
        .unwrap_or_default();
    let spent = global["spent"].as_f64().unwrap_or(-1.0);
    let total = p["usage_total"]["cost_usd"].as_f64().unwrap_or(0.0);
    assert!((spent - total).abs() < 1e-9, "budget {global} vs pane {p}");
}

/// A pause holds: something that continues a paused agent behind the
/// operator's back (here the test, as a helper of the agent's would, sends
/// SIGCONT to its process group) finds it stopped again at once, the
/// snapshot still says paused, and the operator is told (`pause_broken`).
/// Before, it printed at full speed while every view said paused.
#[test]
fn a_paused_agent_continued_behind_the_operators_back_is_stopped_again() {
    let d = Colibrid::start(&[]);
    let mut w = watch_all(&d);
    let id = d.spawn(
        &["/bin/sh", "-c", "while :; do echo tick; sleep 0.05; done"],
        json!({"name":"ticker"}),
    );
    d.wait_pane(&id, "some output", |p| {
        p["counters"]["bytes"].as_u64() > Some(20)
    });
    d.ok(json!({"cmd":"pause-agent","agent_id": id}));
    let pid = d.pane(&id)["pid"].as_i64().expect("pid") as i32;
    wait_for(Duration::from_secs(10), "the agent stopped", || {
        stopped_in_effect(pid).then_some(())
    });
    // Past the pause's grace (250 ms), the "helper" continues the group.
    a_daemon_second(&d);
    // SAFETY: kill(2) of the test's own agent's process group.
    let rc = unsafe { libc::kill(-pid, libc::SIGCONT) };
    assert_eq!(rc, 0, "SIGCONT to the group");
    let ev = wait_for(Duration::from_secs(30), "the pause_broken event", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("pause_broken")).then_some(ev)
    });
    assert_eq!(ev["pane"], json!(id), "{ev}");
    wait_for(Duration::from_secs(10), "the agent stopped again", || {
        stopped_in_effect(pid).then_some(())
    });
    let p = d.pane(&id);
    assert_eq!(p["paused"], json!(true), "{p}");
    // It stays stopped: no more output.
    let before = settled_bytes(&d, &id);
    a_daemon_second(&d);
    assert_eq!(d.pane(&id)["counters"]["bytes"].as_u64(), Some(before));
}

/// Whether the agent's shell no longer runs: stopped, or (as colibrid's own
/// check reads it) in neither the run nor the sleep state. A shell stopped
/// between its `vfork` and its child's `exec` waits in `D` for the child,
/// which the same signal stopped, and stays there: stopped in effect (the
/// tests then check that no output comes).
fn stopped_in_effect(pid: i32) -> bool {
    use colibri::platform::ProcessState;
    crate::support::process(pid).is_some_and(|p| {
        !matches!(
            p.state,
            ProcessState::Running | ProcessState::Sleeping | ProcessState::Zombie
        )
    })
}

fn watch_all(d: &Colibrid) -> Client {
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    w
}

/// The guard's scope rule in the daemon: a Claude-shaped agent in `work`
/// with `../shared` in its scope writes in both (nothing), then outside
/// them with its `Write` tool (a warning naming the file) and with its
/// shell (a pause and an escalation, as the guard's pauses). `colibri
/// fold` of its session log shows the same verdicts at the lines of the
/// log that hold those writes.
#[test]
fn a_write_outside_the_scope_warns_then_pauses_and_the_fold_of_the_log_shows_it() {
    let d = Colibrid::start(&[]);
    let work = d.path("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let (work_s, root) = (work.display().to_string(), d.dir.path().display());
    let assistant = |id: u32, name: &str, input: Value| {
        json!({"type":"assistant","message":{"id":format!("m{id}"),"role":"assistant",
            "content":[{"type":"tool_use","id":format!("t{id}"),"name":name,"input":input}]},
            "parent_tool_use_id":null,"session_id":"s"})
        .to_string()
    };
    let outside = format!("{root}/elsewhere/notes.md");
    let lines = [
        json!({"type":"system","subtype":"init","session_id":"s","cwd":work_s,"model":"m","tools":[]})
            .to_string(),
        assistant(1, "Write", json!({"file_path": format!("{work_s}/src/a.rs"), "content":"x"})),
        assistant(2, "Edit", json!({"file_path": format!("{root}/shared/b.rs"), "old_string":"a", "new_string":"b"})),
        assistant(3, "Write", json!({"file_path": outside, "content":"first-outside"})),
        assistant(4, "Bash", json!({"command":"echo second-outside > /var/tmp/colibri-scope.txt"})),
    ];
    let go_file = d.path("scope.go");
    let mut body = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done\n",
        go_file.display()
    );
    for l in &lines {
        body.push_str(&format!("printf '%s\\n' '{l}'\n"));
    }
    body.push_str("exec sleep 60\n");
    let script = d.script("scope.sh", &body);
    let id = d.spawn(
        &[&script],
        json!({"runtime":"claude","cwd":work_s,"scope":["../shared"]}),
    );
    let mut w = watch(&d, &id);
    go(&go_file.display().to_string());

    let warn = next(&mut w, "verdict", None);
    let v = &warn["verdict"];
    assert_eq!(
        (&v["policy"], &v["rule"], &v["action"], &v["line"]),
        (
            &json!("guard"),
            &json!("write_outside_scope"),
            &json!("warn"),
            &json!(4)
        ),
        "{warn}"
    );
    assert_eq!(v["path"], json!(outside), "{warn}");
    let pause = next(&mut w, "verdict", None);
    assert_eq!(pause["verdict"]["action"], json!("pause"), "{pause}");
    assert_eq!(pause["verdict"]["line"], json!(5), "{pause}");
    assert_eq!(
        pause["verdict"]["path"],
        json!("/var/tmp/colibri-scope.txt")
    );
    assert_eq!(
        next(&mut w, "verdict", None)["verdict"]["action"],
        json!("escalate")
    );
    let p = d.wait_pane(&id, "the scope rule's pause", |p| {
        p["paused"] == json!(true)
    });
    assert_eq!(p["holds"][0]["rule"], json!("write_outside_scope"), "{p}");

    // The session log, once it holds the second write: its attach record
    // names the scope, and the fold replays the verdicts at its lines.
    let (log, text) = wait_for(
        Duration::from_secs(30),
        "the log to hold the writes",
        || {
            std::fs::read_dir(d.state.join("sessions"))
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find_map(|p| {
                    let t = std::fs::read_to_string(&p).ok()?;
                    t.contains("second-outside").then_some((p, t))
                })
        },
    );
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .map(|i| i as u64 + 1)
            .expect("the line is logged")
    };
    let attach: Value = serde_json::from_str(
        text.lines()
            .find(|l| l.contains("\"colibri\":\"attach\""))
            .expect("an attach record"),
    )
    .expect("json");
    assert_eq!(attach["scope"], json!(["../shared"]), "{attach}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["fold", "--json"])
        .arg(&log)
        .output()
        .expect("fold");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).expect("fold report");
    let folded: Vec<(u64, String, String)> = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| {
            (
                v["line"].as_u64().unwrap_or(0),
                v["rule"].as_str().unwrap_or("").to_string(),
                v["action"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let (first, second) = (line_of("first-outside"), line_of("second-outside"));
    let scope = "write_outside_scope".to_string();
    assert_eq!(
        folded,
        [
            (first, scope.clone(), "warn".to_string()),
            (second, scope.clone(), "pause".to_string()),
            (second, scope, "escalate".to_string()),
        ],
        "{report}"
    );
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}

/// The scope rule as colibri.toml sets it: a declared Pi-shaped agent
/// whose `scope` names `../shared`, with `[guard] scope_paths` adding a
/// scratch directory for every pane and `scope_pause_after = 1`. Its
/// writes in its directory, its declared path and the scratch directory
/// (its `write` tool, its shell's `>>`) give nothing; its first `edit`
/// outside them pauses it at once, naming the file.
#[test]
fn a_declared_agents_scope_and_the_guards_scope_settings_come_from_colibri_toml() {
    let mut d = Colibrid::start(&[]);
    let (work, shared, scratch) = (d.path("work"), d.path("shared"), d.path("scratch"));
    for dir in [&work, &shared, &scratch] {
        std::fs::create_dir_all(dir).expect("dir");
    }
    let outside = d.path("elsewhere/b.txt").display().to_string();
    let call = |id: u32, tool: &str, args: Value| {
        json!({"type":"tool_execution_start","toolCallId":format!("t{id}"),"toolName":tool,"args":args})
            .to_string()
    };
    let lines = [
        r#"{"type":"agent_start"}"#.to_string(),
        call(1, "write", json!({"path":"src/a.txt","content":"x"})),
        call(2, "write", json!({"path":"../shared/a.txt","content":"x"})),
        call(
            3,
            "bash",
            json!({"command": format!("echo x >> {}/log", scratch.display())}),
        ),
        call(
            4,
            "edit",
            json!({"path": outside, "oldText":"a","newText":"b"}),
        ),
    ];
    let gate = d.path("declared.go");
    let mut body = format!("while [ ! -e '{}' ]; do sleep 0.05; done\n", gate.display());
    for l in &lines {
        body.push_str(&format!("printf '%s\\n' '{l}'\n"));
    }
    body.push_str("exec sleep 60\n");
    let script = d.script("declared.sh", &body);
    d.relaunch_with_config(
        "scope.toml",
        &format!(
            r#"
[guard]
scope_pause_after = 1
scope_paths = ["{scratch}"]

[agents.w]
argv = ["{script}"]
runtime = "pi"
cwd = "{work}"
scope = ["../shared"]
"#,
            scratch = scratch.display(),
            work = work.display(),
        ),
    );
    let p = d.wait_named("w", "the declared agent", |p| p["pid"].is_number());
    let id = p["id"].as_str().expect("pane id").to_string();
    let mut w = watch(&d, &id);
    go(&gate.display().to_string());

    let first = next(&mut w, "verdict", None);
    let v = &first["verdict"];
    assert_eq!(
        (&v["rule"], &v["action"], &v["line"], &v["path"]),
        (
            &json!("write_outside_scope"),
            &json!("pause"),
            &json!(5),
            &json!(outside)
        ),
        "{first}"
    );
    assert_eq!(
        next(&mut w, "verdict", None)["verdict"]["action"],
        json!("escalate")
    );
    let p = d.wait_pane(&id, "the scope rule's pause", |p| {
        p["paused"] == json!(true)
    });
    assert_eq!(p["holds"][0]["rule"], json!("write_outside_scope"), "{p}");
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}
