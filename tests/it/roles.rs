//! Roles, heartbeats and system prompts: declared agents with a role are
//! held by their role's budget, `state` has the control-plane seed's
//! shape, an idle agent is given its heartbeat prompt on its input, and a
//! system prompt reaches the harness's command line and comes back from
//! `get-session`.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Client, Colibrid};

/// A Pi message of 400 tokens (300 in, 100 out) costing $0.001.
const SPEND: &str = r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":300,"output":100,"cacheRead":0,"cacheWrite":0,"totalTokens":400,"cost":{"total":0.001}}}}"#;

/// A script that waits for the file `gate`, prints `lines`, then sleeps.
fn spender(d: &Colibrid, name: &str, gate: &Path, lines: &[&str]) -> String {
    let mut body = format!("while [ ! -e '{}' ]; do sleep 0.05; done\n", gate.display());
    for l in lines {
        body.push_str(&format!("printf '%s\\n' '{l}'\n"));
    }
    body.push_str("exec sleep 60\n");
    d.script(name, &body)
}

fn pane_named(d: &Colibrid, name: &str) -> String {
    let p = d.wait_named(name, "the declared agent", |p| p["pid"].is_number());
    p["id"].as_str().expect("pane id").to_string()
}

fn watch(d: &Colibrid) -> Client {
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    w
}

/// The next `verdict` event whose action is `action`.
fn next_verdict(w: &mut Client, action: &str) -> Value {
    loop {
        let ev = w.read_line().expect("a verdict event");
        if ev["event"] == json!("verdict") && ev["verdict"]["action"] == json!(action) {
            return ev;
        }
    }
}

#[test]
fn a_role_budget_holds_every_agent_of_the_role_and_no_other() {
    let mut d = Colibrid::start(&[]);
    let gate = d.path("spend.go");
    let ops = spender(&d, "ops.sh", &gate, &[SPEND, SPEND]);
    let dba = spender(&d, "dba.sh", &gate, &[SPEND, SPEND, SPEND]);
    d.relaunch_with_config(
        "roles.toml",
        &format!(
            r#"
[budgets.ops]
scope = "role:sysadmin"
tokens = 1000
daily = true

[agents.ops-a]
argv = ["{ops}"]
runtime = "pi"
role = "sysadmin"

[agents.ops-b]
argv = ["{ops}"]
runtime = "pi"
role = "sysadmin"

[agents.dba]
argv = ["{dba}"]
runtime = "pi"
role = "db-admin"
"#
        ),
    );
    let a = pane_named(&d, "ops-a");
    let b = pane_named(&d, "ops-b");
    let dba = pane_named(&d, "dba");
    let mut w = watch(&d);
    std::fs::write(&gate, b"").expect("open the gate");
    // 800 tokens each: the role's 1,600 pass its 1,000 together.
    let pause = next_verdict(&mut w, "pause");
    assert_eq!(pause["verdict"]["rule"], json!("ops"), "{pause}");
    assert_eq!(
        pause["verdict"]["target"],
        json!("role:sysadmin"),
        "{pause}"
    );
    for id in [&a, &b] {
        d.wait_pane(id, "the role's agents to be paused", |p| {
            p["paused"] == json!(true)
        });
    }
    // The db admin spent more than either (1,200) and runs on.
    let p = d.wait_pane(&dba, "the db admin's spend", |p| {
        p["usage"]["output_tokens"] == json!(300)
    });
    assert_eq!(p["paused"], json!(false), "{p}");
    // `state` shows the role's budget as the one that holds them.
    let st = d.ok(json!({"cmd":"state","pane": a}));
    let me = &st["agents"][0];
    assert_eq!(me["role"], json!("sysadmin"), "{st}");
    assert_eq!(me["budget"]["daily_tokens"], json!(1000), "{st}");
    assert_eq!(me["budget"]["hard_limit_exceeded"], json!(true), "{st}");
    assert_eq!(
        st["budget"]["allocation"],
        json!({"sysadmin": 1000}),
        "{st}"
    );
    // A spawned agent of the role starts into the role's pause.
    let late = spender(&d, "late.sh", &gate, &[]);
    let id = d.spawn(&[&late], json!({"runtime":"pi","role":"sysadmin"}));
    d.wait_pane(
        &id,
        "a new agent of the role to wait with the others",
        |p| p["paused"] == json!(true),
    );
    let other = d.spawn(&[&late], json!({"runtime":"pi","role":"db-admin"}));
    d.wait_pane(&other, "another role's agent to run", |p| {
        p["pid"].is_number()
    });
    assert_eq!(d.pane(&other)["paused"], json!(false));
}

#[test]
fn state_has_the_control_plane_seeds_shape() {
    let mut d = Colibrid::start(&[]);
    let gate = d.path("spend.go");
    let sys = spender(&d, "sys.sh", &gate, &[SPEND]);
    let orch = spender(&d, "orch.sh", &gate, &[]);
    d.relaunch_with_config(
        "seed.toml",
        &format!(
            r#"
[budgets.fleet]
scope = "global"
tokens = 100000
daily = true

[budgets.orchestrator]
scope = "role:orchestrator"
tokens = 80000
daily = true

[budgets.sysadmin]
scope = "role:sysadmin"
tokens = 10000
daily = true

[agents.clawdie]
argv = ["{orch}"]
runtime = "pi"
role = "orchestrator"

[agents.sysadmin]
argv = ["{sys}"]
runtime = "pi"
role = "sysadmin"
heartbeat = "10m"
"#
        ),
    );
    let sys_pane = pane_named(&d, "sysadmin");
    pane_named(&d, "clawdie");
    std::fs::write(&gate, b"").expect("open the gate");
    d.wait_pane(&sys_pane, "the spend", |p| {
        p["usage"]["output_tokens"] == json!(100)
    });
    let st = d.ok(json!({"cmd":"state"}));
    let mut agents: Vec<Value> = st["agents"].as_array().cloned().unwrap_or_default();
    agents.sort_by_key(|a| a["id"].as_str().unwrap_or("").to_string());
    let seed: Vec<Value> = agents
        .iter()
        .map(|a| json!({"id": a["id"], "role": a["role"], "heartbeat_enabled": a["heartbeat_enabled"]}))
        .collect();
    assert_eq!(
        seed,
        [
            json!({"id":"clawdie","role":"orchestrator","heartbeat_enabled":false}),
            json!({"id":"sysadmin","role":"sysadmin","heartbeat_enabled":true}),
        ],
        "{st}"
    );
    assert_eq!(
        st["budget"],
        json!({
            "configured": true,
            "daily_tokens": 100000,
            "spent_today": 400,
            "remaining": 99600,
            "hard_limit_exceeded": false,
            "allocation": {"orchestrator": 80000, "sysadmin": 10000},
            "allocated": 90000
        }),
        "{st}"
    );
    // A pane's own spend, whether or not a budget caps it.
    let spend = &agents[1]["spend"];
    assert_eq!(spend["tokens"], json!(400), "{st}");
    assert!(
        (spend["usd"].as_f64().unwrap_or(0.0) - 0.001).abs() < 1e-12,
        "{st}"
    );
    assert!(
        spend["output_bytes"].as_u64().unwrap_or(0) >= SPEND.len() as u64,
        "{st}"
    );
    assert_eq!(agents[0]["spend"]["tokens"], json!(0), "{st}");
    // The existing fields stay.
    assert_eq!(agents[1]["pane"], json!(sys_pane), "{st}");
    assert_eq!(agents[1]["active"], json!(true), "{st}");
    assert_eq!(agents[1]["budget"]["configured"], json!(true), "{st}");
    // Without a global budget: no figures, still the allocation.
    let plain = Colibrid::start(&[]);
    let st = plain.ok(json!({"cmd":"state"}));
    assert_eq!(
        st["budget"],
        json!({"configured": false, "hard_limit_exceeded": false, "allocation": {}, "allocated": 0})
    );
}

/// The `prompt` records of a session's log.
fn prompts_logged(d: &Colibrid, session: &str) -> Vec<Value> {
    let dump = d.ok(json!({"cmd":"get-session","session_id": session}));
    dump["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["colibri"] == json!("prompt"))
        .cloned()
        .collect()
}

#[test]
fn an_idle_agent_is_given_its_heartbeat_prompt_on_its_input_and_a_busy_one_later() {
    let mut d = Colibrid::start(&[]);
    let inputs = d.path("inputs");
    let done = d.path("done.go");
    // A Pi in RPC mode: idle until its first prompt, then working until
    // the test opens `done`, then idle again. Each input line is kept.
    let script = d.script(
        "hb.sh",
        &format!(
            r#"n=0
while IFS= read -r line; do
  n=$((n+1))
  printf '%s\n' "$line" >> '{inputs}'
  if [ $n -eq 1 ]; then
    echo '{{"type":"response","command":"prompt","success":true}}'
    echo '{{"type":"agent_start"}}'
    while [ ! -e '{done}' ]; do sleep 0.05; done
    echo '{{"type":"agent_settled"}}'
  fi
done"#,
            inputs = inputs.display(),
            done = done.display()
        ),
    );
    d.relaunch_with_config(
        "hb.toml",
        &format!(
            r#"
[agents.hb]
argv = ["{script}"]
runtime = "pi"
role = "sysadmin"
heartbeat = "1s"
heartbeat_prompt = "HB-CHECK: run your loop"
stall_after = "2s"
"#
        ),
    );
    let id = pane_named(&d, "hb");
    let session = d.pane(&id)["daemon_session"]
        .as_str()
        .expect("daemon session")
        .to_string();
    let read = || std::fs::read_to_string(&inputs).unwrap_or_default();
    let first = wait_for(Duration::from_secs(30), "the first heartbeat", || {
        read().lines().next().map(str::to_string)
    });
    // In the agent's own input protocol: Pi's RPC prompt command.
    let first: Value = serde_json::from_str(&first).expect("a JSON line");
    assert_eq!(
        first,
        json!({"type":"prompt","message":"HB-CHECK: run your loop"})
    );
    // Working and silent for two seconds (stalled): the prompts due
    // meanwhile were owed, not sent.
    d.wait_pane(&id, "the busy agent to stall", |p| {
        p["stalled"] == json!(true)
    });
    let logged = prompts_logged(&d, &session);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["by"], json!("heartbeat"));
    assert_eq!(logged[0]["text"], json!("HB-CHECK: run your loop"));
    // Idle again: the owed prompt goes at once.
    std::fs::write(&done, b"").expect("done");
    wait_for(Duration::from_secs(30), "the owed heartbeat", || {
        (read().lines().count() >= 2).then_some(())
    });
    assert!(prompts_logged(&d, &session).len() >= 2);
    let st = d.ok(json!({"cmd":"state","pane": id}));
    assert_eq!(st["agents"][0]["heartbeat_enabled"], json!(true), "{st}");
}

/// A program named like a harness that records its argv and its
/// `COLIBRI_SYSTEM_PROMPT`, one NUL-terminated item each, then waits.
fn recorder(d: &Colibrid, bin: &Path, name: &str) -> std::path::PathBuf {
    let out = d.path(&format!("{name}.argv"));
    let body = format!(
        "for a in \"$0\" \"$@\"; do printf '%s\\0' \"$a\"; done > '{out}.tmp'\n\
         printf 'env=%s\\0' \"$COLIBRI_SYSTEM_PROMPT\" >> '{out}.tmp'\n\
         mv '{out}.tmp' '{out}'\nexec sleep 60",
        out = out.display()
    );
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write recorder");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    out
}

fn recorded(path: &Path) -> Vec<String> {
    let bytes = wait_for(Duration::from_secs(30), "the recorded argv", || {
        std::fs::read(path).ok()
    });
    bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[test]
fn a_system_prompt_reaches_the_harness_argv_and_comes_back_in_get_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let mut d = Colibrid::start(&["--agent-path", &path]);
    let pi_out = recorder(&d, &bin, "pi");
    let codex_out = recorder(&d, &bin, "codex");
    let gemini_out = recorder(&d, &bin, "gemini");
    let prompt = "You are \"sysadmin\".\nKeep the jails up; --no-flags here.";

    // The built-in provider runs Pi: `--append-system-prompt`.
    let r = d.ok(
        json!({"cmd":"spawn-agent","provider":"deepseek","model":"deepseek-chat",
        "session_id":"sp-pi","system_prompt": prompt}),
    );
    let pi_id = r["agent_id"].as_str().expect("id").to_string();
    let argv = recorded(&pi_out);
    assert_eq!(
        argv[1..],
        [
            "--mode",
            "rpc",
            "--provider",
            "deepseek",
            "--model",
            "deepseek-chat",
            "--append-system-prompt",
            prompt,
            &format!("env={prompt}"),
        ],
        "{argv:?}"
    );
    // Codex: a TOML string under -c developer_instructions.
    d.spawn(
        &["codex", "exec", "--json"],
        json!({"session_id":"sp-codex","system_prompt": prompt}),
    );
    let argv = recorded(&codex_out);
    assert_eq!(argv[3], "-c", "{argv:?}");
    let toml_value: toml::Table = toml::from_str(&argv[4]).expect("a TOML key = value");
    assert_eq!(
        toml_value["developer_instructions"].as_str(),
        Some(prompt),
        "{argv:?}"
    );
    // Gemini takes none on its command line: its argv is untouched, the
    // prompt is in its environment and in the session.
    d.spawn(
        &["gemini"],
        json!({"session_id":"sp-gemini","system_prompt": prompt}),
    );
    let argv = recorded(&gemini_out);
    assert_eq!(argv.len(), 2, "{argv:?}");
    assert_eq!(argv[1], format!("env={prompt}"));

    for session in ["sp-pi", "sp-codex", "sp-gemini"] {
        let dump = d.ok(json!({"cmd":"get-session","session_id": session}));
        assert_eq!(dump["system_prompt"], json!(prompt), "{session}: {dump}");
        let attach = dump["records"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["colibri"] == json!("attach")).cloned())
            .expect("an attach record");
        assert_eq!(attach["system_prompt"], json!(prompt), "{attach}");
    }
    // A session without one says so.
    d.spawn(&["/bin/sleep", "60"], json!({"session_id":"sp-none"}));
    let dump = d.ok(json!({"cmd":"get-session","session_id":"sp-none"}));
    assert_eq!(dump["system_prompt"], Value::Null, "{dump}");

    // The log is the record: a new colibrid returns it too.
    d.ok(json!({"cmd":"kill-agent","agent_id": pi_id}));
    d.terminate();
    d.launch();
    let dump = d.ok(json!({"cmd":"get-session","session_id":"sp-pi"}));
    assert_eq!(dump["system_prompt"], json!(prompt), "{dump}");
}

#[test]
fn a_declared_agents_system_prompt_and_bad_spawn_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let mut d = Colibrid::start(&["--agent-path", &path]);
    let out = recorder(&d, &bin, "claude");
    d.relaunch_with_config(
        "declared.toml",
        &format!(
            r#"
[daemon]
agent_path = "{path}"

[agents.reviewer]
argv = ["claude", "-p", "review"]
system_prompt = "Review only."
"#
        ),
    );
    let argv = recorded(&out);
    assert_eq!(
        argv[1..],
        [
            "-p",
            "review",
            "--append-system-prompt",
            "Review only.",
            "env=Review only."
        ],
        "{argv:?}"
    );
    let id = pane_named(&d, "reviewer");
    let session = d.pane(&id)["daemon_session"]
        .as_str()
        .expect("session")
        .to_string();
    let dump = d.ok(json!({"cmd":"get-session","session_id": session}));
    assert_eq!(dump["system_prompt"], json!("Review only."));

    for (extra, want) in [
        (json!({"role":"two words"}), "role"),
        (json!({"heartbeat":"10ms"}), "heartbeat"),
        (json!({"heartbeat_prompt":"  "}), "heartbeat_prompt"),
        (json!({"system_prompt":"a\u{0}b"}), "NUL"),
        (
            json!({"system_prompt": "x".repeat(64 * 1024 + 1)}),
            "command line",
        ),
    ] {
        let mut req = json!({"cmd":"spawn-agent","argv":["/bin/true"]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            req[k] = v.clone();
        }
        let r = d.request(req);
        assert_eq!(r["ok"], json!(false), "{extra}: {r}");
        assert!(
            r["error"].as_str().unwrap_or("").contains(want),
            "{extra}: {r}"
        );
    }
}

/// A pane's role is in its start's log record, so the pane colibrid
/// rebuilds from the logs after a restart keeps it.
#[test]
fn a_panes_role_survives_a_restart_of_colibrid() {
    let mut d = Colibrid::start(&[]);
    let id = d.spawn(
        &["/bin/sh", "-c", "exec sleep 600"],
        json!({"name": "keeper", "role": "sysadmin"}),
    );
    d.wait_pane(&id, "keeper running", |p| p["pid"].is_i64());
    assert!(d.terminate().success());
    d.launch();
    let st = d.ok(json!({"cmd":"state"}));
    let agent = st["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["pane"] == json!(id))
        .cloned()
        .unwrap_or_default();
    assert_eq!(agent["role"], json!("sysadmin"), "{st}");
}
