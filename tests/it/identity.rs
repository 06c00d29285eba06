//! Agents are who the kernel says they are: a connection from a pane's
//! process tree (or an orphan colibrid took in from one) speaks as that
//! agent on any socket, and holds no operator power.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Colibrid, COLIBRI};

/// Runs `body` as an agent (`/bin/sh -c`) and waits for `done` in its
/// output directory, which it gets as `$OUT`.
fn agent_running(d: &Colibrid, name: &str, body: &str) -> (String, std::path::PathBuf) {
    let out = d.path(&format!("{name}-out"));
    std::fs::create_dir_all(&out).expect("out dir");
    let script = format!(
        "OUT={out}; C={colibri}; SOCK={sock}\n{body}\ntouch \"$OUT/done\"\nexec sleep 60",
        out = out.display(),
        colibri = COLIBRI,
        sock = d.socket.display(),
    );
    let id = d.spawn(
        &["/bin/sh", "-c", &script],
        json!({"name": name, "runtime":"pi"}),
    );
    wait_for(Duration::from_secs(60), "the agent's script", || {
        out.join("done").exists().then_some(())
    });
    (id, out)
}

fn read(out: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(out.join(name)).unwrap_or_default()
}

/// From inside an agent, on the operator socket its `$COLIBRI_SOCKET`
/// names, every operator power is refused (another pane's kill, a task
/// added, its own approval answered), and it speaks as itself without
/// naming its pane; its answer attempt is logged. Before, a host agent was
/// the operator: it killed other panes and approved its own request.
#[test]
fn an_agent_on_the_operator_socket_is_that_agent_and_no_operator() {
    let d = Colibrid::start_with_env(&[], &[("COLIBRI_LOG", "info")]);
    let other = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({"name":"other"}));
    let body = format!(
        r#"printf '%s\n' '{{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Delete build/?"}}'
"$C" kill {other} > "$OUT/kill" 2>&1; echo "rc=$?" >> "$OUT/kill"
"$C" task add "from an agent" > "$OUT/add" 2>&1; echo "rc=$?" >> "$OUT/add"
sleep 1
"$C" approve "$COLIBRI_PANE_ID" > "$OUT/approve" 2>&1; echo "rc=$?" >> "$OUT/approve"
"$C" status --json > "$OUT/status" 2>&1
"$C" task claim > "$OUT/claim" 2>&1; echo "rc=$?" >> "$OUT/claim""#
    );
    let (id, out) = agent_running(&d, "asker", &body);
    for (file, what) in [
        ("kill", "kill"),
        ("add", "task-add"),
        ("approve", "approve"),
    ] {
        let text = read(&out, file);
        assert!(
            text.contains("rc=") && !text.contains("rc=0"),
            "{what}: {text}"
        );
        assert!(text.contains("operator"), "{what}: {text}");
    }
    let status: Value = serde_json::from_str(&read(&out, "status")).expect("status JSON");
    assert_eq!(status["scope"], json!(format!("agent:{id}")), "{status}");
    assert_eq!(status["agents"], json!(1), "an agent sees itself only");
    // Agent commands need no pane: it is the connection's own.
    assert!(
        read(&out, "claim").contains("rc=0"),
        "{}",
        read(&out, "claim")
    );
    // The operator's powers are intact, and the approval still waits.
    assert!(d.pane(&other)["exit"].is_null(), "the other pane lives");
    let pending = d.ok(json!({"cmd":"approvals","agent_id": id}));
    assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(1));
    d.ok(json!({"cmd":"kill-agent","agent_id": other}));
}

/// A helper an agent left behind in a new session with an empty
/// environment is still no operator: colibrid, the agents' subreaper,
/// took it in, and a process it took in that names no pane is a stray
/// that may do nothing an agent may not.
#[test]
fn an_orphan_with_an_empty_environment_is_no_operator() {
    let d = Colibrid::start(&[]);
    let other = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({"name":"other"}));
    let body = format!(
        r#"( env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin {setsid} /bin/sh -c "sleep 1; '$C' --socket '$SOCK' kill {other} > '$OUT/stray' 2>&1; echo rc=\$? >> '$OUT/stray'; touch '$OUT/stray-done'" & )
while [ ! -e "$OUT/stray-done" ]; do sleep 0.1; done"#,
        setsid = crate::support::setsid(),
    );
    let (_id, out) = agent_running(&d, "leaver", &body);
    let text = read(&out, "stray");
    assert!(!text.contains("rc=0"), "the stray killed a pane: {text}");
    assert!(text.contains("operator"), "{text}");
    assert!(d.pane(&other)["exit"].is_null(), "the other pane lives");
}

/// An agent's connections never take the operator's room: each agent
/// holds a per-peer share, all agents together three quarters of a
/// socket's connections, and the operator is answered (`kill-agent`
/// included) while agents hold every connection they may.
#[test]
fn agents_holding_connections_never_lock_the_operator_out() {
    let d = Colibrid::start(&["--max-connections", "16", "--max-connections-per-peer", "4"]);
    // Each agent starts 8 watchers; 4 of each are taken.
    let watchers =
        r#"i=0; while [ $i -lt 8 ]; do "$C" watch > /dev/null 2>&1 & i=$((i+1)); done; sleep 2"#;
    let ids: Vec<String> = (0..4)
        .map(|i| agent_running(&d, &format!("holder{i}"), watchers).0)
        .collect();
    let status = d.ok(json!({"cmd":"status"}));
    let held = status["connections"].as_u64().unwrap_or(0);
    assert!(held <= 12 + 1, "agents hold {held} of 16 connections");
    // The operator's own room: four more connections, all answered.
    let mut mine: Vec<crate::support::Client> = (0..4).map(|_| d.client()).collect();
    for c in &mut mine {
        assert_eq!(c.request(&json!({"cmd":"status"}))["ok"], json!(true));
    }
    drop(mine);
    for id in ids {
        d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    }
}
