//! Approvals on the real daemon: scripted agents that speak each harness's
//! protocol ask, the operator answers through the CLI or the socket, and
//! the agent reads the exact reply on its input.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;

fn colibri(d: &Colibrid, args: &[&str]) -> Output {
    Command::new(COLIBRI)
        .args(args)
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .output()
        .expect("run colibri")
}

/// An agent that prints `request`, writes the line it reads back to
/// `got`, then prints `after` and stays alive.
fn asking_agent(d: &Colibrid, name: &str, request: &str, after: &str) -> (String, String) {
    let got = d.path(&format!("{name}.got")).display().to_string();
    let script = d.script(
        name,
        &format!(
            "printf '%s\\n' '{request}'\nIFS= read -r line\nprintf '%s\\n' \"$line\" > {got}.tmp\nmv {got}.tmp {got}\nprintf '%s\\n' '{after}'\nexec sleep 60"
        ),
    );
    (script, got)
}

fn read_when_there(path: &str) -> String {
    wait_for(
        Duration::from_secs(30),
        &format!("{path} to be written"),
        || std::fs::read_to_string(path).ok(),
    )
}

fn pending(d: &Colibrid, id: &str) -> Vec<Value> {
    let data = d.ok(json!({"cmd":"approvals","agent_id": id}));
    data["approvals"].as_array().cloned().unwrap_or_default()
}

fn wait_pending(d: &Colibrid, id: &str) -> Value {
    wait_for(Duration::from_secs(30), "an approval to open", || {
        pending(d, id).into_iter().next()
    })
}

/// `colibri fold --json` of the session log holding an answer record.
fn fold_the_answered_log(d: &Colibrid) -> Value {
    let log = std::fs::read_dir(d.state.join("sessions"))
        .expect("sessions dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("\"colibri\":\"answer\"")))
        .expect("the log with the answer");
    let o = Command::new(COLIBRI)
        .args(["fold", "--json"])
        .arg(&log)
        .output()
        .expect("fold");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("fold report")
}

/// The session log's `colibri` records of kind `answer`.
fn answer_records(d: &Colibrid) -> Vec<Value> {
    let mut out = Vec::new();
    let dir = d.state.join("sessions");
    for e in std::fs::read_dir(&dir).expect("sessions dir").flatten() {
        if e.path().extension().and_then(|x| x.to_str()) != Some("jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if v["colibri"] == json!("answer") {
                    out.push(v);
                }
            }
        }
    }
    out
}

#[test]
fn a_pi_confirm_is_approved_through_the_cli_and_the_agent_goes_on() {
    let d = Colibrid::start(&[]);
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    let (script, got) = asking_agent(
        &d,
        "pi-confirm",
        r#"{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Delete x?","message":"rm -rf x"}"#,
        r#"{"type":"agent_end","messages":[]}"#,
    );
    let id = d.spawn(&[&script], json!({"runtime":"pi","name":"pi1"}));
    let a = wait_pending(&d, &id);
    assert_eq!(a["kind"], json!("confirm"));
    assert_eq!(a["pane"], json!(id));
    // Snapshot v2 lists it on its pane.
    let p = d.pane(&id);
    assert_eq!(p["approvals"][0]["id"], a["id"]);

    // By the pane's name: it has exactly one pending approval.
    let o = colibri(&d, &["approve", "pi1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        read_when_there(&got).trim_end(),
        r#"{"type":"extension_ui_response","id":"q1","confirmed":true}"#
    );
    d.wait_pane(&id, "the agent to go on after the answer", |p| {
        p["counters"]["events"].as_u64() >= Some(2) && p["approvals"].is_null()
    });
    assert!(pending(&d, &id).is_empty());

    // The watch stream saw it open and answered, in order.
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let ev = w.read_line().expect("watch event");
        let k = ev["event"].as_str().unwrap_or_default().to_string();
        if k.starts_with("approval_") {
            kinds.push((k, ev));
        }
    }
    assert_eq!(kinds[0].0, "approval_opened");
    assert_eq!(kinds[0].1["approval"]["id"], a["id"]);
    assert_eq!(kinds[1].0, "approval_answered");
    assert_eq!(kinds[1].1["decision"], json!("approve"));
    assert_eq!(kinds[1].1["by"], json!("operator"));

    // Logged as a colibri record, with the peer's uid.
    let recs = wait_for(Duration::from_secs(30), "the answer record", || {
        let r = answer_records(&d);
        (!r.is_empty()).then_some(r)
    });
    assert_eq!(recs[0]["approval"], a["id"]);
    assert_eq!(recs[0]["decision"], json!("approve"));
    assert_eq!(recs[0]["by"], json!("operator"));
    assert_eq!(recs[0]["uid"], json!(nix::unistd::geteuid().as_raw()));

    // `colibri fold` replays the record: the approval closes as answered.
    let report = fold_the_answered_log(&d);
    assert_eq!(report["approvals"][0]["request_id"], json!("q1"));
    assert_eq!(
        report["approvals"][0]["outcome"],
        json!({"event":"answered","decision":"approve"})
    );
}

#[test]
fn pi_deny_select_and_free_text_get_their_exact_replies() {
    let d = Colibrid::start(&[]);
    let cases = [
        (
            "deny",
            r#"{"type":"extension_ui_request","id":"c1","method":"confirm","title":"Push?"}"#,
            vec!["deny", "APPROVAL", "-m", "not now"],
            r#"{"type":"extension_ui_response","id":"c1","confirmed":false}"#,
        ),
        (
            "select",
            r#"{"type":"extension_ui_request","id":"s1","method":"select","title":"Which?","options":["alpha","beta","gamma"]}"#,
            vec!["answer", "APPROVAL", "2"],
            r#"{"type":"extension_ui_response","id":"s1","value":"beta"}"#,
        ),
        (
            "input",
            r#"{"type":"extension_ui_request","id":"i1","method":"input","title":"Name?"}"#,
            vec!["answer", "APPROVAL", "a free text"],
            r#"{"type":"extension_ui_response","id":"i1","value":"a free text"}"#,
        ),
    ];
    for (name, request, args, expected) in cases {
        let (script, got) = asking_agent(&d, name, request, r#"{"type":"agent_end"}"#);
        let id = d.spawn(&[&script], json!({"runtime":"pi"}));
        let a = wait_pending(&d, &id);
        let approval = a["id"].as_str().expect("id").to_string();
        let args: Vec<&str> = args
            .iter()
            .map(|s| {
                if *s == "APPROVAL" {
                    approval.as_str()
                } else {
                    s
                }
            })
            .collect();
        let o = colibri(&d, &args);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(read_when_there(&got).trim_end(), expected, "{name}");
    }
}

#[test]
fn a_decision_the_request_does_not_take_is_a_typed_error() {
    let d = Colibrid::start(&[]);
    let (script, _got) = asking_agent(
        &d,
        "pi-confirm",
        r#"{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Ok?"}"#,
        r#"{"type":"agent_end"}"#,
    );
    let id = d.spawn(&[&script], json!({"runtime":"pi"}));
    let a = wait_pending(&d, &id);
    let r = d.request(json!({"cmd":"answer","approval": a["id"],"text":"yes"}));
    assert_eq!(r["ok"], json!(false));
    assert_eq!(r["code"], json!("unanswerable"), "{r}");
    // Still pending: nothing was written.
    assert_eq!(pending(&d, &id).len(), 1);
    let r = d.request(json!({"cmd":"approve","approval":"nosuch-1"}));
    assert_eq!(r["code"], json!("not_found"), "{r}");
}

#[test]
fn a_claude_can_use_tool_request_is_answered_with_a_control_response() {
    let d = Colibrid::start(&[]);
    let (script, got) = asking_agent(
        &d,
        "claude-sdk",
        r#"{"type":"control_request","request_id":"r-7","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"tu1"}}"#,
        r#"{"type":"result","subtype":"success","is_error":false}"#,
    );
    let id = d.spawn(&[&script], json!({"runtime":"claude"}));
    let a = wait_pending(&d, &id);
    assert_eq!(a["kind"], json!("tool_permission"));
    assert_eq!(a["tool"], json!("Bash"));
    let data = d.ok(json!({"cmd":"approve","approval": id}));
    assert_eq!(data["channel"], json!("agent_input"));
    assert_eq!(
        read_when_there(&got).trim_end(),
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"r-7","response":{"behavior":"allow","updatedInput":{"command":"ls"}}}}"#
    );
}

fn permission_hook(d: &Colibrid, pane: &str, extra: &[&str]) -> std::process::Child {
    bash_permission_hook(d, pane, extra, "make")
}

/// `colibri hook` on a Claude Code `PermissionRequest` for `Bash command`.
fn bash_permission_hook(
    d: &Colibrid,
    pane: &str,
    extra: &[&str],
    command: &str,
) -> std::process::Child {
    let input = json!({"session_id":"s1","hook_event_name":"PermissionRequest",
        "tool_name":"Bash","tool_input":{"command":command}});
    hook_with(d, pane, extra, &input)
}

/// `colibri hook` on a Claude Code `PreToolUse` for `Bash command`.
fn bash_pre_tool_use_hook(
    d: &Colibrid,
    pane: &str,
    extra: &[&str],
    command: &str,
) -> std::process::Child {
    let input = json!({"session_id":"s1","hook_event_name":"PreToolUse","permission_mode":"bypassPermissions",
        "tool_name":"Bash","tool_input":{"command":command},"tool_use_id":"toolu_g1"});
    hook_with(d, pane, extra, &input)
}

/// `colibri hook` reading `input` on its stdin.
fn hook_with(d: &Colibrid, pane: &str, extra: &[&str], input: &Value) -> std::process::Child {
    let mut hook = Command::new(COLIBRI)
        .arg("hook")
        .args(extra)
        .env("COLIBRI_SOCKET", &d.socket)
        .env("COLIBRI_PANE_ID", pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook");
    let mut stdin = hook.stdin.take().expect("stdin");
    stdin
        .write_all(input.to_string().as_bytes())
        .expect("write");
    hook
}

/// What `colibri hook` prints for a `PreToolUse` the guard refuses.
const PRE_TOOL_USE_DENY: &str = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"colibri's command guard refused this (rm_outside_cwd): rm -rf /"}}"#;

/// Runs a `PreToolUse` hook for `command` to its end: what it printed, and
/// how long it took.
fn run_pre_tool_use(d: &Colibrid, pane: &str, command: &str) -> (Output, Duration) {
    let started = std::time::Instant::now();
    let hook = bash_pre_tool_use_hook(d, pane, &["--wait", "60s"], command);
    let out = hook.wait_with_output().expect("hook exits");
    (out, started.elapsed())
}

/// A Claude pane (a sleeping stand-in) whose working directory is a fresh
/// temporary one, kept alive by the returned guard.
fn claude_pane_in_a_temp_dir(d: &Colibrid) -> (tempfile::TempDir, String) {
    let work = tempfile::tempdir().expect("cwd");
    let cwd = work.path().display().to_string();
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude","cwd":cwd}),
    );
    (work, id)
}

// In bypassPermissions mode Claude Code sends no `PermissionRequest`, but
// it still runs `PreToolUse` hooks and obeys their deny.
#[test]
fn the_command_guard_denies_a_destructive_pre_tool_use_before_it_runs() {
    let d = Colibrid::start(&[]);
    let (_work, id) = claude_pane_in_a_temp_dir(&d);
    let (out, took) = run_pre_tool_use(&d, &id, "rm -rf /");
    assert!(out.status.success());
    assert!(
        took < Duration::from_secs(30),
        "the guard answers at once: {took:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        PRE_TOOL_USE_DENY,
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nobody is asked: no approval opens.
    assert!(pending(&d, &id).is_empty());
    // Logged as the guard's answer, named by the tool call.
    let recs = wait_for(Duration::from_secs(30), "the guard's answer record", || {
        let r = answer_records(&d);
        (!r.is_empty()).then_some(r)
    });
    assert_eq!(recs[0]["approval"], json!("toolu_g1"));
    assert_eq!(recs[0]["decision"], json!("deny"));
    assert_eq!(recs[0]["by"], json!("policy"));
    assert_eq!(
        recs[0]["message"],
        json!("colibri's command guard refused this (rm_outside_cwd): rm -rf /")
    );
    assert!(recs[0].get("uid").is_none());
    // Denied where it waits, the agent is not stopped: it hears the deny.
    let p = d.pane(&id);
    assert_eq!(p["paused"], json!(false), "{p}");
    // `colibri fold` reads the log: the answer closes no approval.
    let report = fold_the_answered_log(&d);
    assert!(
        report["approvals"].as_array().is_none_or(Vec::is_empty),
        "{report}"
    );

    // Harmless, or below the working directory: nothing printed, at once.
    for command in ["ls -la", "rm -rf ./build"] {
        let (out, took) = run_pre_tool_use(&d, &id, command);
        assert!(out.status.success());
        assert!(out.stdout.is_empty(), "{command}: {:?}", out.stdout);
        assert!(
            took < Duration::from_secs(10),
            "{command}: the hook waited {took:?}"
        );
    }
    assert!(pending(&d, &id).is_empty());
    assert_eq!(answer_records(&d).len(), 1);
}

#[test]
fn a_pre_tool_use_is_denied_only_while_the_guard_is_on() {
    let mut d = Colibrid::start(&[]);
    let cfg = d.relaunch_with_config("guard.toml", "[guard]\nenabled = false\n");
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude"}),
    );
    let (out, _) = run_pre_tool_use(&d, &id, "rm -rf /");
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "the guard is off: {:?}", out.stdout);

    std::fs::write(&cfg, "[guard]\nenabled = true\n").expect("cfg");
    d.hup_and_wait("reloads", Duration::from_secs(20));
    let (out, _) = run_pre_tool_use(&d, &id, "rm -rf /");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        PRE_TOOL_USE_DENY
    );

    // No daemon: fail open, as every forward does. Nothing printed, exit 0.
    d.terminate();
    let (out, took) = run_pre_tool_use(&d, &id, "rm -rf /");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(took < Duration::from_secs(10), "{took:?}");
}

// See: issue 15 ("a tool call denied before it runs through a Claude hook").
#[test]
fn the_command_guard_denies_a_destructive_tool_call_before_it_runs() {
    let d = Colibrid::start(&[]);
    let (_work, id) = claude_pane_in_a_temp_dir(&d);
    // Outside the working directory: denied at once, without an operator.
    let started = std::time::Instant::now();
    let hook = bash_permission_hook(&d, &id, &["--wait", "60s"], "sudo rm -r -f /srv/data");
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the guard answers without waiting for the operator"
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("a JSON decision");
    let decision = &printed["hookSpecificOutput"]["decision"];
    assert_eq!(decision["behavior"], json!("deny"), "{printed}");
    assert!(
        decision["message"]
            .as_str()
            .is_some_and(|m| m.contains("rm_outside_cwd")),
        "{printed}"
    );
    assert!(pending(&d, &id).is_empty());
    // Inside the working directory: the operator decides as usual.
    let mut hook = bash_permission_hook(&d, &id, &["--wait", "60s"], "rm -rf ./build");
    let a = wait_pending(&d, &id);
    assert_eq!(a["tool"], json!("Bash"));
    assert!(
        hook.try_wait().expect("try_wait").is_none(),
        "still waiting"
    );
    let o = colibri(&d, &["approve", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = hook.wait_with_output().expect("hook exits");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("a JSON decision");
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"],
        json!("allow"),
        "{printed}"
    );
}

#[test]
fn colibri_hook_waits_for_the_operators_decision() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude"}),
    );
    let mut hook = permission_hook(&d, &id, &["--wait", "60s"]);
    let a = wait_pending(&d, &id);
    assert_eq!(a["channel"], json!("hook_output"));
    // The hook is still waiting: it has not exited.
    assert!(hook.try_wait().expect("try_wait").is_none());
    let o = colibri(&d, &["deny", &id, "-m", "not on Fridays"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not on Fridays"}}}"#
    );
    assert!(pending(&d, &id).is_empty());
}

#[test]
fn a_hook_waiting_past_the_idle_timeout_still_gets_its_answer() {
    // The hook's connection takes nothing while it waits: it must not be
    // closed as idle (the hook would print nothing, its --default unused,
    // and the approval would be left with no one to answer).
    let d = Colibrid::start(&["--idle-timeout", "1s", "--heartbeat", "200ms"]);
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude"}),
    );
    let mut hook = permission_hook(&d, &id, &["--wait", "60s"]);
    wait_pending(&d, &id);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        hook.try_wait().expect("try_wait").is_none(),
        "still waiting"
    );
    let o = colibri(&d, &["approve", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"],
        json!("allow")
    );
}

#[test]
fn colibri_hook_prints_its_default_when_nobody_answers() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude"}),
    );
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    let hook = permission_hook(&d, &id, &["--wait", "1s"]);
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).expect("a JSON decision");
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"],
        json!("deny")
    );
    // The daemon expired the approval itself.
    let ev = wait_for(Duration::from_secs(30), "approval_expired", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("approval_expired")).then_some(ev)
    });
    assert_eq!(ev["reason"], json!("timed_out"));

    // `--default none` prints nothing: Claude Code then asks in its terminal.
    let hook = permission_hook(&d, &id, &["--wait", "1s", "--default", "none"]);
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    // colibrid dies while the hook waits: the default, at once (before,
    // nothing: Claude Code then asked in a terminal nobody watches).
    let mut dying = Colibrid::start(&[]);
    let pane = dying.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude"}),
    );
    let hook = permission_hook(&dying, &pane, &["--wait", "60s"]);
    wait_for(Duration::from_secs(30), "the hook's approval", || {
        let data = dying.ok(json!({"cmd":"approvals"}));
        data["approvals"]
            .as_array()
            .filter(|a| !a.is_empty())
            .map(|_| ())
    });
    let asked = std::time::Instant::now();
    dying.crash();
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("the default decision");
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"],
        json!("deny"),
        "{printed}"
    );
    // No daemon at all: still exit 0, and the default deny at once.
    let mut lost = Colibrid::start(&[]);
    let socket = lost.socket.clone();
    lost.terminate();
    let mut hook = Command::new(COLIBRI)
        .args(["hook", "--wait", "60s"])
        .env("COLIBRI_SOCKET", &socket)
        .env("COLIBRI_PANE_ID", &id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook");
    hook.stdin
        .take()
        .expect("stdin")
        .write_all(br#"{"hook_event_name":"PermissionRequest","tool_name":"Bash"}"#)
        .expect("write");
    let out = hook.wait_with_output().expect("hook exits");
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).expect("the default decision");
    let reason = printed["hookSpecificOutput"]["decision"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("could not be asked"), "{printed}");
}

#[test]
fn agent_scope_sees_only_its_own_panes_approvals() {
    let (_jail_dir, jail_sock, arg) = jail_socket();
    let mut d = Colibrid::start(&["--jail-socket", &arg]);
    recover_jailed_pane(&mut d, &[]);
    let (script, _) = asking_agent(
        &d,
        "host",
        r#"{"type":"extension_ui_request","id":"h","method":"confirm","title":"Host?"}"#,
        r#"{"type":"agent_end"}"#,
    );
    let host = d.spawn(&[&script], json!({"runtime":"pi"}));
    wait_pending(&d, &host);
    let mut c = Client::connect_jailed(&jail_sock);
    let e = c.request(&json!({"cmd":"emit","agent_id":"inside","event":{"type":"extension_ui_request","id":"j","method":"confirm","title":"Inside?"}}));
    assert_eq!(e["ok"], json!(true), "{e}");
    let all = d.ok(json!({"cmd":"approvals"}));
    assert_eq!(all["approvals"].as_array().map(Vec::len), Some(2), "{all}");
    let mine = c.request(&json!({"cmd":"approvals"}));
    let list = mine["data"]["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(list.len(), 1, "{mine}");
    assert_eq!(list[0]["pane"], json!(JAILED_PANE));
    assert_eq!(list[0]["title"], json!("Inside?"));
    let r = c.request(&json!({"cmd":"approvals","agent_id": host}));
    assert_eq!(r["code"], json!("not_found"), "another jail's pane: {r}");
    // Answering is the operator's.
    let r = c.request(&json!({"cmd":"approve","approval":"inside"}));
    assert_eq!(r["code"], json!("forbidden"), "{r}");
}

#[test]
fn an_unanswered_approval_escalates_then_is_denied_by_default() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("colibri.toml");
    std::fs::write(
        &cfg,
        "[approvals]\nescalate_after = \"1s\"\ndefault_answer = \"deny\"\ndefault_after = \"1s\"\n",
    )
    .expect("write config");
    let cfg = cfg.display().to_string();
    let d = Colibrid::start(&["--config", &cfg]);
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    let (script, got) = asking_agent(
        &d,
        "pi-slow",
        r#"{"type":"extension_ui_request","id":"e1","method":"confirm","title":"Anyone?"}"#,
        r#"{"type":"agent_end"}"#,
    );
    let id = d.spawn(&[&script], json!({"runtime":"pi"}));
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &Value| e["event"] == json!("approval_answered"))
    {
        let ev = w.read_line().expect("watch event");
        if ev["event"]
            .as_str()
            .is_some_and(|k| k.starts_with("approval_"))
        {
            seen.push(ev);
        }
    }
    let kinds: Vec<&str> = seen.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        kinds,
        ["approval_opened", "approval_escalated", "approval_answered"]
    );
    assert!(seen[1]["pending_ms"].as_u64() >= Some(1000), "{}", seen[1]);
    assert_eq!(seen[2]["decision"], json!("deny"));
    assert_eq!(seen[2]["by"], json!("policy"));
    assert_eq!(
        read_when_there(&got).trim_end(),
        r#"{"type":"extension_ui_response","id":"e1","confirmed":false}"#
    );
    assert!(pending(&d, &id).is_empty());
    let recs = wait_for(
        Duration::from_secs(30),
        "the policy's answer record",
        || {
            let r = answer_records(&d);
            (!r.is_empty()).then_some(r)
        },
    );
    assert_eq!(recs[0]["by"], json!("policy"));
    assert!(recs[0].get("uid").is_none());
}

/// Every approval's story as the watch journal tells it, across restarts:
/// for each (pane, approval), its events in order. Read from the start of
/// the journal up to the `attached` event of a pane spawned now, so it
/// holds everything published before.
fn approval_stories(d: &Colibrid) -> BTreeMap<(String, String), Vec<String>> {
    let mut stories: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ev in approval_events(d) {
        let approval = match &ev["approval"] {
            Value::String(id) => id.clone(),
            a => a["id"].as_str().unwrap_or_default().to_string(),
        };
        let pane = ev["pane"].as_str().unwrap_or_default().to_string();
        let kind = ev["event"].as_str().unwrap_or_default().to_string();
        stories.entry((pane, approval)).or_default().push(kind);
    }
    stories
}

/// Every `approval_*` event the journal holds, in order: read from seq 0
/// up to a sentinel pane's attach.
fn approval_events(d: &Colibrid) -> Vec<Value> {
    let mut w = d.client();
    w.request(&json!({"cmd":"watch","since":0}));
    let sentinel = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let mut events = Vec::new();
    loop {
        let ev = w.read_line().expect("watch event");
        let kind = ev["event"].as_str().unwrap_or_default();
        if kind == "attached" && ev["pane"] == json!(sentinel) {
            return events;
        }
        if kind.starts_with("approval_") {
            events.push(ev);
        }
    }
}

/// The pane's fields a restart must not change (its process, its state and
/// the lines emitted between restarts aside).
fn kept_fields(p: &Value) -> Value {
    json!([
        p["name"],
        p["runtime"],
        p["started_at"],
        p["counters"]["malformed"],
        p["approvals"]
    ])
}

#[test]
fn an_answered_approval_stays_answered_after_a_stop_and_after_a_crash() {
    let mut d = Colibrid::start(&[]);
    // It prints nothing after the reply: the answer is the pane's last record.
    let got_path = d.path("asker.got").display().to_string();
    let asker = d.script(
        "asker",
        &format!(
            "printf '%s\\n' '{{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"Delete x?\"}}'\nIFS= read -r line\nprintf '%s\\n' \"$line\" >> {got_path}\nexec sleep 600"
        ),
    );
    let id = d.spawn(&[&asker], json!({"runtime":"pi","name":"asker"}));
    // An agent that comes back in its own pane after each restart (asking
    // only the first time): recovery must write it no second reply.
    let keeper_got = d.path("keeper.got").display().to_string();
    let marker = d.path("keeper.asked").display().to_string();
    let keeper = d.script(
        "keeper",
        &format!(
            "if [ -e {marker} ]; then echo '{{\"type\":\"agent_start\"}}'; else touch {marker}\nprintf '%s\\n' '{{\"type\":\"extension_ui_request\",\"id\":\"k1\",\"method\":\"confirm\",\"title\":\"Push?\"}}'; fi\nwhile IFS= read -r line; do printf '%s\\n' \"$line\" >> {keeper_got}; done\nexec sleep 600"
        ),
    );
    let kid = d.spawn(
        &[&keeper],
        json!({"runtime":"pi","name":"keeper","restart":"always"}),
    );
    wait_pending(&d, &id);
    wait_pending(&d, &kid);
    let o = colibri(&d, &["approve", "asker"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = colibri(&d, &["deny", "keeper", "-m", "not now"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let replies = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    wait_for(Duration::from_secs(30), "both replies", || {
        (!replies(&got_path).is_empty() && !replies(&keeper_got).is_empty()).then_some(())
    });
    wait_for(Duration::from_secs(30), "both answer records", || {
        (answer_records(&d).len() == 2).then_some(())
    });
    let before = d.pane(&id);
    assert_eq!(
        before["state"],
        json!("blocked"),
        "answered, no line since: {before}"
    );
    assert!(pending(&d, &id).is_empty());
    let told_once = |pane: &str| {
        let a = format!("{}-1", &pane[..8]);
        (
            (pane.to_string(), a),
            vec![
                "approval_opened".to_string(),
                "approval_answered".to_string(),
            ],
        )
    };
    let expected: BTreeMap<_, _> = [told_once(&id), told_once(&kid)].into_iter().collect();
    assert_eq!(approval_stories(&d), expected);

    // The keeper's process and last line: both new once it is back.
    let k = d.pane(&kid);
    let mut keeper_run = [k["pid"].clone(), k["last_event_at"].clone()];
    for (round, how) in ["an orderly stop", "a crash"].into_iter().enumerate() {
        if round == 0 {
            assert!(d.terminate().success(), "colibrid stops cleanly");
        } else {
            d.crash();
        }
        d.launch();
        let all = d.ok(json!({"cmd":"approvals"}));
        assert_eq!(all["approvals"], json!([]), "after {how}: nothing pending");
        let p = d.pane(&id);
        assert_eq!(kept_fields(&p), kept_fields(&before), "after {how}: {p}");
        if round == 0 {
            assert_eq!(p["last_event_at"], before["last_event_at"], "{p}");
        }
        // One event logged, plus the line emitted after each earlier round.
        assert_eq!(
            p["counters"]["events"],
            json!(1 + round),
            "after {how}: {p}"
        );
        // The orderly stop ended it on purpose: a planned stop, `done`
        // (and the crash after it does not change what was recorded).
        assert_eq!(
            p["state"],
            json!("done"),
            "the agent was stopped with colibrid: {p}"
        );
        let k = d.wait_pane(&kid, &format!("keeper back after {how}"), |k| {
            k["pid"] != keeper_run[0] && k["last_event_at"] != keeper_run[1]
        });
        keeper_run = [k["pid"].clone(), k["last_event_at"].clone()];

        // Each pane's next line (the keeper's own, an emit for the asker):
        // before the fix it published the answered approval as opened
        // again, then expired, for `colibri notify` to ask once more.
        d.ok(json!({"cmd":"emit","agent_id": id, "event": {"type":"agent_start"}}));
        assert_eq!(approval_stories(&d), expected, "after {how}");
        assert!(pending(&d, &id).is_empty() && pending(&d, &kid).is_empty());
    }
    // No second reply reached either agent, and no second answer was logged.
    assert_eq!(
        replies(&got_path).lines().count(),
        1,
        "{}",
        replies(&got_path)
    );
    assert_eq!(
        replies(&keeper_got).lines().count(),
        1,
        "{}",
        replies(&keeper_got)
    );
    assert_eq!(answer_records(&d).len(), 2);
}

const LOGGED_PANE: &str = "22222222-3333-4444-8555-666666666666";

#[test]
fn answer_records_that_are_malformed_or_name_no_approval_do_not_break_recovery() {
    let mut d = Colibrid::start(&[]);
    assert!(d.terminate().success());
    let rec = |ts: &str, body: &str| {
        format!(r#"{{"ts":"2026-11-21T10:00:0{ts}.000Z","pane":"{LOGGED_PANE}",{body}}}"#)
    };
    let lines = [
        rec(
            "0",
            r#""colibri":"attach","agent":"pi","runtime":"pi","name":"logged","cwd":"/w","argv":["pi"],"generation":0"#,
        ),
        rec(
            "1",
            r#""ev":{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Go?"}"#,
        ),
        rec(
            "2",
            r#""colibri":"answer","approval":"22222222-1","decision":"maybe","by":"operator""#,
        ),
        rec(
            "3",
            r#""colibri":"answer","decision":"approve","by":"operator""#,
        ),
        rec(
            "4",
            r#""colibri":"answer","approval":"22222222-7","decision":"approve","by":"operator""#,
        ),
        rec(
            "5",
            r#""colibri":"answer","approval":42,"decision":"approve","by":"operator""#,
        ),
        rec(
            "6",
            r#""colibri":"answer","approval":"22222222-1","decision":"deny","message":"no","by":"operator""#,
        ),
        rec("7", r#""colibri":"exit","state":"error","signal":15"#),
    ];
    let sessions = d.state.join("sessions");
    std::fs::create_dir_all(&sessions).expect("sessions dir");
    std::fs::write(sessions.join("logged.jsonl"), lines.join("\n") + "\n").expect("log");
    d.launch();

    let p = d.pane(LOGGED_PANE);
    assert_eq!(p["counters"]["events"], json!(1), "{p}");
    assert_eq!(p["state"], json!("error"), "{p}");
    assert_eq!(d.ok(json!({"cmd":"approvals"}))["approvals"], json!([]));
    d.ok(json!({"cmd":"emit","agent_id": LOGGED_PANE, "event": {"type":"agent_start"}}));
    assert_eq!(approval_stories(&d), BTreeMap::new());
    // Nothing is lost: the log still holds every record as written.
    let dump = d.ok(json!({"cmd":"get-session","session_id":"logged"}));
    let records = dump["records"].as_array().expect("records");
    for l in &lines {
        let v: Value = serde_json::from_str(l).expect("json");
        assert!(records.contains(&v), "{l} kept");
    }
    assert_eq!(dump["corrupt_lines"], json!(0));
}

#[test]
fn after_a_crash_an_end_the_journal_missed_is_announced_from_the_log_or_as_expired() {
    // The session log and the watch journal are written apart: a crash
    // can leave the log holding an approval's answer the journal never
    // got, or take the log that held the approval away.
    for how in ["its answer logged", "its log deleted"] {
        let mut d = Colibrid::start(&[]);
        let id = asking_pi_pane(&d);
        let approval = format!("{}-1", &id[..8]);
        wait_opening_journaled(&d);
        d.crash();
        let log = log_holding(&d, &id);
        if how == "its log deleted" {
            std::fs::remove_file(&log).expect("remove the log");
        } else {
            let text = std::fs::read_to_string(&log).expect("read the log");
            let last: Value = text
                .lines()
                .last()
                .and_then(|l| serde_json::from_str(l).ok())
                .expect("a last record");
            let answer = json!({"ts": last["ts"], "pane": id, "colibri": "answer",
                "approval": approval, "decision": "deny", "message": "not now",
                "by": "operator", "uid": 1001});
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .expect("open the log");
            writeln!(f, "{answer}").expect("append the answer");
        }
        d.launch();
        let ends: Vec<Value> = approval_events(&d)
            .into_iter()
            .filter(|e| e["pane"] == json!(id) && e["event"] != "approval_opened")
            .collect();
        let want = if how == "its log deleted" {
            json!([{"event": "approval_expired", "approval": approval, "reason": "exited"}])
        } else {
            json!([{"event": "approval_answered", "approval": approval, "decision": "deny",
                "message": "not now", "by": "operator"}])
        };
        let got: Vec<Value> = ends
            .iter()
            .map(|e| {
                let mut e = e.clone();
                for k in ["seq", "at", "epoch", "pane", "uid"] {
                    e.as_object_mut().map(|o| o.remove(k));
                }
                e
            })
            .collect();
        assert_eq!(json!(got), want, "after a crash, {how}");
        assert_eq!(d.ok(json!({"cmd":"approvals"}))["approvals"], json!([]));
    }
}

/// A Pi pane that asks one confirm and waits: its id, once the approval is
/// pending.
fn asking_pi_pane(d: &Colibrid) -> String {
    let asker = d.script(
        "asker",
        "printf '%s\\n' '{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"Go?\"}'\nexec sleep 600",
    );
    let id = d.spawn(&[&asker], json!({"runtime":"pi","name":"asker"}));
    wait_pending(d, &id);
    id
}

/// The journal is written off the loop: waits until it holds the opening,
/// as a client that saw it would.
fn wait_opening_journaled(d: &Colibrid) {
    wait_for(Duration::from_secs(30), "the opening journaled", || {
        approval_stories(d)
            .values()
            .any(|s| s == &["approval_opened".to_string()])
            .then_some(())
    });
}

/// The session log that holds pane `id`'s records.
fn log_holding(d: &Colibrid, id: &str) -> std::path::PathBuf {
    let dir = d.state.join("sessions");
    std::fs::read_dir(&dir)
        .expect("sessions dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "jsonl")
                && std::fs::read_to_string(p).is_ok_and(|t| t.contains(id))
        })
        .expect("a log holds the pane")
}

/// An approval still pending when colibrid stops ends once on the watch
/// stream: after a crash, recovery announces its end (the daemon that
/// opened it could not); after an orderly stop, what the stopping daemon
/// said is not said again.
#[test]
fn a_pending_approval_s_end_is_announced_once_after_a_stop_and_after_a_crash() {
    for how in ["an orderly stop", "a crash"] {
        let mut d = Colibrid::start(&[]);
        let id = asking_pi_pane(&d);
        if how == "a crash" {
            wait_opening_journaled(&d);
            d.crash();
        } else {
            assert!(d.terminate().success());
        }
        d.launch();
        let stories = approval_stories(&d);
        let story = stories
            .get(&(id.clone(), format!("{}-1", &id[..8])))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            story,
            ["approval_opened", "approval_expired"],
            "after {how}: {stories:?}"
        );
        assert_eq!(d.ok(json!({"cmd":"approvals"}))["approvals"], json!([]));
    }
}

/// `approvals` comes in pages, oldest first, each resuming after the last
/// one's `next` even when approvals were answered in between; `colibri
/// approvals` reads every page.
#[test]
fn approvals_come_in_pages_that_resume_after_answers() {
    let d = Colibrid::start(&[]);
    let lines: String = (0..12)
        .map(|i| {
            format!(
                "{}\n",
                json!({"type":"extension_ui_request","id": format!("q{i}"),
                    "method":"confirm","title": format!("question {i}")})
            )
        })
        .collect();
    let file = d.path("questions.jsonl");
    std::fs::write(&file, lines).expect("questions");
    let argv = format!("cat {}; exec sleep 60", file.display());
    let panes: Vec<String> = (0..2)
        .map(|_| d.spawn(&["/bin/sh", "-c", &argv], json!({"runtime":"pi"})))
        .collect();
    wait_for(Duration::from_secs(30), "24 approvals", || {
        let all = d.ok(json!({"cmd":"approvals"}));
        (all["approvals"].as_array()?.len() == 24).then_some(())
    });
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut req = json!({"cmd":"approvals","limit": 7});
        if let Some(a) = &after {
            req["after"] = json!(a);
        }
        let page = d.ok(req);
        let ids: Vec<String> = page["approvals"]
            .as_array()
            .expect("approvals")
            .iter()
            .filter_map(|a| a["id"].as_str().map(str::to_string))
            .collect();
        assert!(ids.len() <= 7, "{ids:?}");
        if pages == 0 {
            // Answered between pages: the next page does not shift.
            d.ok(json!({"cmd":"approve","approval": ids[0]}));
        }
        seen.extend(ids);
        pages += 1;
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 4, "24 approvals in pages of 7");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 24, "each approval once: {seen:?}");
    let out = colibri(&d, &["approvals", "--json"]);
    assert!(out.status.success());
    let all: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(all["approvals"].as_array().map(Vec::len), Some(23));
    assert!(all.get("next").is_none(), "{all}");
    for pane in panes {
        d.ok(json!({"cmd":"kill-agent","agent_id": pane}));
    }
}

/// An agent whose script runs `body` (with `$C` the real `colibri` and
/// `$OUT` a directory of its own) and then stays alive.
pub(crate) fn scripted_agent(d: &Colibrid, name: &str, body: &str) -> (String, std::path::PathBuf) {
    let out = d.path(&format!("{name}-out"));
    std::fs::create_dir_all(&out).expect("out dir");
    let script = d.script(
        name,
        &format!(
            "OUT={out}; C={COLIBRI}\n{body}\nexec sleep 120",
            out = out.display()
        ),
    );
    let id = d.spawn(&[&script], json!({"name": name}));
    (id, out)
}

/// Shell: `ask FILE ARGS…` runs `colibri approval-request ARGS…` and
/// leaves its output and exit status in `$OUT/FILE`, whole once there.
pub(crate) const ASK: &str = r#"ask() { f=$1; shift; "$C" approval-request "$@" > "$OUT/$f.tmp" 2>&1; echo "rc=$?" >> "$OUT/$f.tmp"; mv "$OUT/$f.tmp" "$OUT/$f"; }"#;

/// What `ask` left in `$OUT/file`, once it is there.
pub(crate) fn asked(out: &std::path::Path, file: &str) -> String {
    read_when_there(&out.join(file).display().to_string())
}

/// The pending approval of pane `id` whose title is `op`.
fn pending_titled(d: &Colibrid, id: &str, op: &str) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("{op:?} to be asked"),
        || pending(d, id).into_iter().find(|a| a["title"] == json!(op)),
    )
}

/// An agent asks through `colibri approval-request` from inside its pane
/// and waits: approved from the CLI it exits 0, denied 4, and a wait that
/// runs out 5. Nobody else sees or answers it (a second pane of the same
/// uid is refused both), its `approvals` history shows the three ends, the
/// watch stream announces them like a harness's, and `colibri fold` of the
/// session log replays the same decisions.
#[test]
fn an_agents_own_request_is_answered_from_the_cli_and_reaches_it() {
    let d = Colibrid::start(&[]);
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    let body = format!(
        r#"{ASK}
ask one --wait 60s --task 2 --tokens 8500 -r "a conflict in src/index.ts" "merge PR #42"
ask two --wait 60s "drop the table"
ask three --wait 1s "rewrite history"
"$C" approvals --json > "$OUT/list.tmp" 2>&1; mv "$OUT/list.tmp" "$OUT/list""#
    );
    let (id, out) = scripted_agent(&d, "asker", &body);
    let a = pending_titled(&d, &id, "merge PR #42");
    let approval = a["id"].as_str().expect("id").to_string();
    assert_eq!(a["channel"], json!("reply"));
    assert_eq!(a["kind"], json!("confirm"));
    assert_eq!(a["message"], json!("a conflict in src/index.ts"));
    assert_eq!(
        (&a["task_id"], &a["estimated_tokens"]),
        (&json!(2), &json!(8500))
    );
    assert!(a["expires_at"].is_string(), "its wait's end: {a}");

    // Another agent of the same uid neither sees nor answers it, nor asks
    // as the first.
    let nosy = format!(
        r#""$C" approvals --json > "$OUT/list" 2>&1
"$C" approve {approval} > "$OUT/approve" 2>&1; echo "rc=$?" >> "$OUT/approve"
"$C" approval-request --wait 0 --pane {id} "as the other" > "$OUT/as" 2>&1; echo "rc=$?" >> "$OUT/as"
touch "$OUT/done""#
    );
    let (_, nosy_out) = scripted_agent(&d, "nosy", &nosy);
    read_when_there(&nosy_out.join("done").display().to_string());
    let seen: Value = serde_json::from_str(&asked(&nosy_out, "list")).expect("list JSON");
    assert_eq!(seen["approvals"], json!([]), "{seen}");
    assert_eq!(seen["approved"], json!([]), "{seen}");
    let refused = asked(&nosy_out, "approve");
    assert!(
        refused.contains("rc=1") && refused.contains("operator"),
        "{refused}"
    );
    let refused = asked(&nosy_out, "as");
    assert!(
        refused.contains("rc=1") && refused.contains("cannot act as"),
        "{refused}"
    );
    assert_eq!(pending(&d, &id).len(), 1, "still waiting");

    // Approved from the CLI: the agent's command says so and exits 0.
    let o = colibri(&d, &["approve", &approval]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reply = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(reply.contains("0 bytes to reply"), "{reply}");
    assert_eq!(
        asked(&out, "one"),
        format!("{approval}: approved by operator\nrc=0\n")
    );

    // Denied with a reason: exit 4.
    let b = pending_titled(&d, &id, "drop the table");
    let second = b["id"].as_str().expect("id").to_string();
    let o = colibri(&d, &["deny", &second, "-m", "not today"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        asked(&out, "two"),
        format!("{second}: denied by operator: not today\nrc=4\n")
    );
    // An answer is no decision an agent's request takes.
    let c = pending_titled(&d, &id, "rewrite history");
    let third = c["id"].as_str().expect("id").to_string();
    let o = colibri(&d, &["answer", &third, "maybe"]);
    assert!(!o.status.success(), "an answer to a yes/no request");
    // Nobody decides the third: its wait runs out, exit 5.
    assert_eq!(
        asked(&out, "three"),
        format!("{third}: no decision (timed_out)\nrc=5\n")
    );

    // Its history, as the agent reads it (its own only).
    let list: Value = serde_json::from_str(&asked(&out, "list")).expect("list JSON");
    assert_eq!(list["approvals"], json!([]), "{list}");
    let ends: Vec<(Value, Value, Value, Value)> = list["approved"]
        .as_array()
        .expect("history")
        .iter()
        .map(|e| {
            (
                e["approval_id"].clone(),
                e["status"].clone(),
                e["operator_approved"].clone(),
                e["by"].clone(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            (
                json!(approval),
                json!("approved"),
                json!(true),
                json!("operator")
            ),
            (
                json!(second),
                json!("denied"),
                json!(false),
                json!("operator")
            ),
            (json!(third), json!("expired"), json!(false), Value::Null),
        ]
    );
    let first = &list["approved"][0];
    assert_eq!(first["operation"], json!("merge PR #42"));
    assert_eq!(
        (&first["task_id"], &first["estimated_tokens"]),
        (&json!(2), &json!(8500))
    );
    assert!(first["approved_at"].is_string(), "{first}");
    assert_eq!(list["approved"][1]["message"], json!("not today"));
    assert_eq!(list["approved"][2]["reason"], json!("timed_out"));
    // The operator's `approvals` holds them too, beside the other pane's none.
    let all = d.ok(json!({"cmd":"approvals"}));
    assert_eq!(all["approved"].as_array().map(Vec::len), Some(3), "{all}");

    // The watch stream told them like a harness's approvals.
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let ev = w.read_line().expect("watch event");
        let kind = ev["event"].as_str().unwrap_or_default().to_string();
        if kind.starts_with("approval_") {
            seen.push((kind, ev));
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "approval_opened",
            "approval_answered",
            "approval_opened",
            "approval_answered",
            "approval_opened",
            "approval_expired"
        ]
    );
    assert_eq!(seen[0].1["approval"]["channel"], json!("reply"));
    assert_eq!(seen[5].1["reason"], json!("timed_out"));

    // `colibri fold` of the session log replays the same three ends.
    let log = log_holding(&d, &id);
    let o = Command::new(COLIBRI)
        .args(["fold", "--json", "--pane", &id])
        .arg(&log)
        .output()
        .expect("fold");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).expect("fold report");
    let folded: Vec<(Value, Value)> = report["approvals"]
        .as_array()
        .expect("approvals")
        .iter()
        .map(|a| (a["title"].clone(), a["outcome"].clone()))
        .collect();
    assert_eq!(
        folded,
        [
            (
                json!("merge PR #42"),
                json!({"event":"answered","decision":"approve"})
            ),
            (
                json!("drop the table"),
                json!({"event":"answered","decision":"deny","message":"not today"})
            ),
            (
                json!("rewrite history"),
                json!({"event":"expired","reason":"timed_out"})
            ),
        ]
    );
}

/// The bounds: at most 16 requests of one agent pending (the next is
/// refused, `busy`), `activity` `approval_request` opens one as well, and
/// an agent that ends has its requests closed and its waiting requests
/// answered.
#[test]
fn an_agents_requests_are_capped_and_end_with_it() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 120"],
        json!({"name":"worker"}),
    );
    // The operator may ask as a pane it names, as with `activity`.
    let mut waiting = Client::connect(&d.socket);
    waiting.send_raw(
        format!(
            "{}\n",
            json!({"id":7,"cmd":"approval-request","pane": id,"operation":"deploy","wait_ms": 60_000})
        )
        .as_bytes(),
    );
    pending_titled(&d, &id, "deploy");
    let posted = d.ok(
        json!({"cmd":"activity","pane": id,"event_type":"approval_request",
        "message":"vacuum the db","detail":"it is locked","tokens": 1200}),
    );
    let via_activity = posted["approval"].as_str().expect("the approval it opened");
    let a = pending_titled(&d, &id, "vacuum the db");
    assert_eq!(a["id"], json!(via_activity));
    assert_eq!(a["estimated_tokens"], json!(1200));
    for n in 2..16 {
        let r = d.ok(json!({"cmd":"approval-request","pane": id,"operation": format!("op {n}")}));
        assert_eq!(r["status"], json!("pending"), "{r}");
    }
    let refused =
        d.request(json!({"cmd":"approval-request","pane": id,"operation":"one too many"}));
    assert_eq!(refused["ok"], json!(false), "{refused}");
    assert_eq!(refused["code"], json!("busy"), "{refused}");
    assert_eq!(pending(&d, &id).len(), 16);

    // The agent ends: every request closes, and the waiting one hears it.
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    let reply = waiting.read_line().expect("the held reply");
    assert_eq!(reply["id"], json!(7), "{reply}");
    assert_eq!(reply["data"]["status"], json!("expired"), "{reply}");
    assert_eq!(reply["data"]["reason"], json!("exited"), "{reply}");
    assert!(pending(&d, &id).is_empty());
    let list = d.ok(json!({"cmd":"approvals","agent_id": id}));
    let ends = list["approved"].as_array().expect("history");
    assert_eq!(ends.len(), 16);
    assert!(
        ends.iter().all(|e| e["reason"] == json!("exited")),
        "{list}"
    );
    // A pane that does not run asks nothing (once its process is gone).
    d.wait_pane(&id, "the killed agent's exit", |p| !p["exit"].is_null());
    let r = d.request(json!({"cmd":"approval-request","pane": id,"operation":"late"}));
    assert_eq!(r["code"], json!("not_running"), "{r}");
}

/// The `[approvals]` policy treats an agent's own request as a harness's:
/// escalated after `escalate_after`, then denied by default, which the
/// waiting agent hears (exit 4, by the policy).
#[test]
fn an_agents_unanswered_request_escalates_then_is_denied_by_default() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("colibri.toml");
    std::fs::write(
        &cfg,
        "[approvals]\nescalate_after = \"1s\"\ndefault_answer = \"deny\"\ndefault_after = \"1s\"\n",
    )
    .expect("write config");
    let cfg = cfg.display().to_string();
    let d = Colibrid::start(&["--config", &cfg]);
    let mut w = Client::connect(&d.socket);
    w.request(&json!({"cmd":"watch"}));
    let body = format!("{ASK}\nask one --wait 60s \"rotate the keys\"");
    let (_, out) = scripted_agent(&d, "patient", &body);
    let reply = asked(&out, "one");
    assert!(
        reply.contains(": denied by policy: Denied by colibri: no answer within 2s.")
            && reply.ends_with("rc=4\n"),
        "{reply}"
    );
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        let ev = w.read_line().expect("watch event");
        if let Some(k) = ev["event"].as_str().filter(|k| k.starts_with("approval_")) {
            kinds.push(k.to_string());
        }
    }
    assert_eq!(
        kinds,
        ["approval_opened", "approval_escalated", "approval_answered"]
    );
}
