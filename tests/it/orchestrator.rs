//! The orchestrator's dispatch (`[orchestrator] dispatch = true`): a
//! pending task reaches an idle agent by itself, through the agent's own
//! input protocol, claimed on its behalf; the agent acknowledges it with
//! `colibri task ack`, or the claim lapses and the task goes elsewhere.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{scaled, wait_for, Client, Colibrid, COLIBRI};

/// An agent that keeps each line it reads on its input in `inputs` and,
/// when `acks`, acknowledges the task the line names (`TASK <id>:`, the
/// tests' dispatch text) as itself, through `$COLIBRI_SOCKET`.
fn agent(d: &Colibrid, name: &str, acks: bool) -> (String, std::path::PathBuf) {
    let inputs = d.path(&format!("{name}.inputs"));
    let ack = if acks {
        format!(
            r#"id=$(printf '%s' "$line" | sed -n 's/.*TASK \([0-9]*\):.*/\1/p')
  [ -n "$id" ] && {COLIBRI} task ack "$id" >/dev/null"#
        )
    } else {
        ":".to_string()
    };
    let script = d.script(
        &format!("{name}.sh"),
        &format!(
            r#"while IFS= read -r line; do
  printf '%s\n' "$line" >> '{inputs}'
  {ack}
done"#,
            inputs = inputs.display()
        ),
    );
    (script, inputs)
}

fn pane_named(d: &Colibrid, name: &str) -> String {
    wait_for(Duration::from_secs(30), "the declared agent", || {
        let snap = d.snapshot();
        snap["panes"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == json!(name) && p["pid"].is_number())
            .and_then(|p| p["id"].as_str().map(str::to_string))
    })
}

fn task(d: &Colibrid, id: u64) -> Value {
    d.ok(json!({"cmd":"tasks","task_id": id}))["tasks"][0].clone()
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect()
}

fn watch(d: &Colibrid) -> Client {
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    w
}

#[test]
fn a_task_reaches_an_idle_agent_through_its_protocol_within_a_second_and_is_acknowledged() {
    let mut d = Colibrid::start(&[]);
    let (pi, pi_inputs) = agent(&d, "pi", true);
    let (cc, cc_inputs) = agent(&d, "cc", true);
    d.relaunch_with_config(
        "orch.toml",
        &format!(
            r#"
[orchestrator]
dispatch = true
prompt = "TASK {{id}}: {{title}}"

[agents.pi]
argv = ["{pi}"]
runtime = "pi"

[agents.cc]
argv = ["{cc}"]
runtime = "claude"
"#
        ),
    );
    let pi_pane = pane_named(&d, "pi");
    let cc_pane = pane_named(&d, "cc");
    let mut w = watch(&d);
    let started = Instant::now();
    let first = d.ok(json!({"cmd":"task-add","title":"first"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    // It is written to one agent's input within a second of being added.
    let (to, line) = wait_for(Duration::from_secs(1), "the task on an input", || {
        let pi = lines(&pi_inputs);
        let cc = lines(&cc_inputs);
        pi.first()
            .map(|l| (pi_pane.clone(), l.clone()))
            .or_else(|| cc.first().map(|l| (cc_pane.clone(), l.clone())))
    });
    assert!(started.elapsed() < scaled(Duration::from_secs(1)));
    // The second task goes to the other agent: one task per agent.
    let second = d.ok(json!({"cmd":"task-add","title":"second"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    wait_for(Duration::from_secs(10), "both tasks on inputs", || {
        (lines(&pi_inputs).len() == 1 && lines(&cc_inputs).len() == 1).then_some(())
    });
    // Each in its agent's own protocol: Pi's RPC prompt, a Claude
    // stream-json user message.
    let (pi_task, cc_task) = if to == pi_pane {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(
        line,
        lines(if to == pi_pane {
            &pi_inputs
        } else {
            &cc_inputs
        })[0]
    );
    assert_eq!(
        lines(&pi_inputs)[0],
        json!({"type":"prompt","message": format!("TASK {pi_task}: {}", if pi_task == first {"first"} else {"second"})})
    );
    let cc_line = &lines(&cc_inputs)[0];
    assert_eq!(cc_line["type"], json!("user"), "{cc_line}");
    assert_eq!(cc_line["message"]["role"], json!("user"), "{cc_line}");
    assert_eq!(
        cc_line["message"]["content"],
        json!(format!(
            "TASK {cc_task}: {}",
            if cc_task == first { "first" } else { "second" }
        ))
    );
    // Both acknowledged by their agents: working, each held by its own.
    for (id, pane) in [(pi_task, &pi_pane), (cc_task, &cc_pane)] {
        let t = wait_for(Duration::from_secs(30), "the acknowledgement", || {
            let t = task(&d, id);
            (t["status"] == json!("working")).then_some(t)
        });
        assert_eq!(t["assigned_to"], json!(pane), "{t}");
    }
    // The watch stream saw the first task claimed for its agent.
    let ev = wait_for(Duration::from_secs(10), "the claimed event", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("task")
            && ev["task_id"] == json!(first)
            && ev["status"] == json!("claimed"))
        .then_some(ev)
    });
    assert_eq!(ev["pane"], json!(to));
    // Recorded: a `dispatched` event in the task journal, and a `prompt`
    // record (by dispatch) in the agent's session log.
    let journal = std::fs::read_to_string(d.state.join("tasks.jsonl")).expect("journal");
    let dispatched = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["ev"] == json!("dispatched"))
        .count();
    assert_eq!(dispatched, 2, "{journal}");
    let session = d.pane(&to)["daemon_session"]
        .as_str()
        .expect("daemon session")
        .to_string();
    let dump = d.ok(json!({"cmd":"get-session","session_id": session}));
    let prompts: Vec<&Value> = dump["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["colibri"] == json!("prompt"))
        .collect();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert_eq!(prompts[0]["by"], json!("dispatch"));
    assert_eq!(prompts[0]["text"], json!("TASK 1: first"));
}

#[test]
fn an_unacknowledged_dispatch_returns_to_pending_and_goes_to_another_agent() {
    let mut d = Colibrid::start(&[]);
    let (mute, mute_inputs) = agent(&d, "mute", false);
    let (acker, acker_inputs) = agent(&d, "acker", true);
    let base = format!(
        r#"
[orchestrator]
dispatch = true
ack_timeout = "1s"
retry_after = "10m"
prompt = "TASK {{id}}: {{title}}"

[agents.mute]
argv = ["{mute}"]
runtime = "pi"
"#
    );
    let cfg = d.relaunch_with_config("orch.toml", &base);
    let mute_pane = pane_named(&d, "mute");
    let mut w = watch(&d);
    let id = d.ok(json!({"cmd":"task-add","title":"needs an ack"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    wait_for(Duration::from_secs(5), "the task on mute's input", || {
        (lines(&mute_inputs).len() == 1).then_some(())
    });
    // Added (pending), dispatched (claimed), lapsed (pending again).
    let mut seen = Vec::new();
    let ev = wait_for(Duration::from_secs(30), "the lapse", || {
        let ev = w.read_line()?;
        if ev["event"] != json!("task") {
            return None;
        }
        seen.push(ev["status"].as_str().unwrap_or("").to_string());
        (seen.len() == 3).then_some(ev)
    });
    assert_eq!(seen, ["pending", "claimed", "pending"]);
    assert_eq!(ev["task_id"], json!(id));
    let t = task(&d, id);
    assert_eq!(t["status"], json!("pending"), "{t}");
    assert_eq!(t["releases"], json!(1), "{t}");
    // A second agent comes: the task goes to it, not back to mute, which
    // has been idle longer but let the claim lapse.
    std::fs::write(
        &cfg,
        format!("{base}\n[agents.acker]\nargv = [\"{acker}\"]\nruntime = \"pi\"\n"),
    )
    .expect("config");
    d.hup_and_wait("reloads", Duration::from_secs(10));
    let acker_pane = pane_named(&d, "acker");
    let t = wait_for(
        Duration::from_secs(30),
        "the acker's acknowledgement",
        || {
            let t = task(&d, id);
            (t["status"] == json!("working")).then_some(t)
        },
    );
    assert_eq!(t["assigned_to"], json!(acker_pane), "{t}");
    assert_ne!(acker_pane, mute_pane);
    assert_eq!(lines(&acker_inputs).len(), 1);
    assert_eq!(
        lines(&mute_inputs).len(),
        1,
        "mute was not offered it again"
    );
}
