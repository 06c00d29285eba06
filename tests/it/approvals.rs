//! Approvals on the real daemon: scripted agents that speak each harness's
//! protocol ask, the operator answers through the CLI or the socket, and
//! the agent reads the exact reply on its input.

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
    let report: Value = serde_json::from_slice(&o.stdout).expect("fold report");
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
    let input = json!({"session_id":"s1","hook_event_name":"PermissionRequest",
        "tool_name":"Bash","tool_input":{"command":command}});
    stdin
        .write_all(input.to_string().as_bytes())
        .expect("write");
    hook
}

// See: issue 15 ("a tool call denied before it runs through a Claude hook").
#[test]
fn the_command_guard_denies_a_destructive_tool_call_before_it_runs() {
    let d = Colibrid::start(&[]);
    let work = tempfile::tempdir().expect("cwd");
    let cwd = work.path().display().to_string();
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 60"],
        json!({"runtime":"claude","cwd":cwd}),
    );
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
    // No daemon: still exit 0, nothing printed, at once.
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
    assert!(out.stdout.is_empty());
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
    let mut c = Client::connect(&jail_sock);
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
