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
    let p = d.wait_named(name, "the declared agent", |p| p["pid"].is_number());
    p["id"].as_str().expect("pane id").to_string()
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
grace = "0s"
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
    // Up and silent so far: the seed's health word is `starting`.
    let st = d.ok(json!({"cmd":"state","pane": pi_pane}));
    assert_eq!(st["agents"][0]["health"], json!("starting"), "{st}");
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
grace = "0s"
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
    fold_replays_both_plans(&d, id, &mute_pane, &acker_pane);
}

/// `colibri fold tasks.jsonl` runs each recorded plan again: mute got the
/// task alone, then acker got it because mute was held off. Without the
/// hold-off in the record, the replay gives it to mute (idle longer) and
/// fold says the decision differs.
fn fold_replays_both_plans(d: &Colibrid, id: u64, mute: &str, acker: &str) {
    let journal = d.state.join("tasks.jsonl");
    let fold = fold_journal;
    let (code, r) = wait_for(Duration::from_secs(10), "two plans journalled", || {
        let (code, r) = fold(&journal);
        (r["plans"].as_array().map(Vec::len) == Some(2)).then_some((code, r))
    });
    assert_eq!(code, Some(0), "{r}");
    let given = |i: usize| r["plans"][i]["given"].clone();
    assert_eq!(given(0), json!([{"task": id, "pane": mute}]), "{r}");
    assert_eq!(given(1), json!([{"task": id, "pane": acker}]), "{r}");
    for i in 0..2 {
        assert_eq!(r["plans"][i]["replayed"], given(i), "{r}");
        assert_eq!(r["plans"][i]["handed_over"], given(i), "{r}");
    }
    assert_eq!(r["plans"][1]["idle"], json!(2), "{r}");
    assert_eq!(r["unplanned"], json!(0), "{r}");

    let text = std::fs::read_to_string(&journal).expect("journal");
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            if v["ev"] == json!("planned") && v.get("held_off").is_some() {
                v["held_off"] = json!([]);
                return v.to_string();
            }
            l.to_string()
        })
        .collect();
    let copy = d.path("edited-tasks.jsonl");
    std::fs::write(&copy, edited.join("\n")).expect("copy");
    let (code, r) = fold(&copy);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(
        r["plans"][1]["replayed"],
        json!([{"task": id, "pane": mute}]),
        "{r}"
    );
}

/// A Pi agent that reads the same file over and over (a loop the loop
/// policy catches), keeps what it reads on its input in `inputs`, and
/// counts its starts in `starts`.
fn looping_agent(d: &Colibrid) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let inputs = d.path("loop.inputs");
    let starts = d.path("loop.starts");
    let script = d.script(
        "loop.sh",
        &format!(
            r#"echo start >> '{starts}'
exec 3<&0
cat <&3 >> '{inputs}' &
echo '{{"type":"agent_start"}}'
n=0
while :; do
  n=$((n+1))
  echo '{{"type":"tool_execution_start","toolCallId":"t'$n'","toolName":"read","args":{{"path":"a.txt"}}}}'
  sleep 0.05
done"#,
            starts = starts.display(),
            inputs = inputs.display()
        ),
    );
    (script, inputs, starts)
}

/// The next escalation verdict (rule `escalation_<level>`) on `w`, and
/// every `task` event seen before it.
fn next_rung(w: &mut Client) -> (Value, Vec<Value>) {
    let mut tasks = Vec::new();
    let ev = wait_for(Duration::from_secs(60), "an escalation verdict", || {
        let ev = w.read_line()?;
        if ev["event"] == json!("task") {
            tasks.push(ev.clone());
        }
        let rule = ev["verdict"]["rule"].as_str().unwrap_or("");
        (ev["event"] == json!("verdict") && rule.starts_with("escalation_")).then_some(ev)
    });
    (ev, tasks)
}

/// A daemon with the ladder on (`escalate`, a 1 s loop backoff) and the
/// looping agent declared as `loop`: the daemon, a watch, the pane, and
/// the agent's inputs and starts files.
fn on_the_ladder() -> (
    Colibrid,
    Client,
    String,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let mut d = Colibrid::start(&[]);
    let (script, inputs, starts) = looping_agent(&d);
    d.relaunch_with_config(
        "ladder.toml",
        &format!(
            r#"
[orchestrator]
grace = "0s"
escalate = true

[loops]
backoff = ["1s"]

[agents.loop]
argv = ["{script}"]
runtime = "pi"
"#
        ),
    );
    let w = watch(&d);
    let pane = pane_named(&d, "loop");
    (d, w, pane, inputs, starts)
}

#[test]
fn a_looping_agent_climbs_the_ladder_in_order_and_productive_work_resets_it() {
    let (d, mut w, pane, inputs, starts) = on_the_ladder();
    let mut rungs = Vec::new();
    for n in 0..4 {
        let (ev, _) = next_rung(&mut w);
        if n == 0 {
            // On the ladder: `state` says it is looping.
            let st = d.ok(json!({"cmd":"state","pane": pane}));
            assert_eq!(st["agents"][0]["health"], json!("looping"), "{st}");
        }
        assert_eq!(ev["verdict"]["policy"], json!("loop"), "{ev}");
        rungs.push((
            ev["verdict"]["rule"].as_str().unwrap_or("").to_string(),
            ev["verdict"]["action"].as_str().unwrap_or("").to_string(),
        ));
    }
    let rungs: Vec<(&str, &str)> = rungs
        .iter()
        .map(|(r, a)| (r.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        rungs,
        [
            ("escalation_0", "message"),
            ("escalation_1", "message"),
            ("escalation_2", "kill"),
            ("escalation_3", "escalate"),
        ]
    );
    // Level 0 interrupted it (Pi's RPC abort) and gave a different
    // prompt; level 1 asked for Pi's RPC compaction; level 2 respawned it.
    // (The loop policy's own message comes first, at each pause.)
    let read: Vec<Value> = wait_for(Duration::from_secs(10), "the inputs", || {
        let read = lines(&inputs);
        read.contains(&json!({"type":"compact"})).then_some(read)
    });
    let abort = read
        .iter()
        .position(|l| *l == json!({"type":"abort"}))
        .unwrap_or_else(|| panic!("no abort: {read:?}"));
    let prompt = read[abort + 1]["message"].as_str().unwrap_or("");
    assert!(prompt.starts_with("colibri: you appear stuck"), "{read:?}");
    let compact = read
        .iter()
        .position(|l| *l == json!({"type":"compact"}))
        .unwrap_or(0);
    assert!(compact > abort, "{read:?}");
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    assert!(started.lines().count() >= 2, "respawned: {started:?}");
    // Productive work: it acknowledges a task. The next catch is level 0
    // again, and the task the looping agent held goes back to the queue.
    assert_eq!(pane_named(&d, "loop"), pane, "respawned in the same pane");
    let id = d.ok(json!({"cmd":"task-add","title":"work"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(claimed["task"]["task_id"], json!(id), "{claimed}");
    d.ok(json!({"cmd":"task-ack","task_id": id,"pane": pane}));
    // Past the acknowledgement in the stream, the next rung is level 0.
    wait_for(
        Duration::from_secs(30),
        "the acknowledgement's event",
        || {
            let ev = w.read_line()?;
            (ev["event"] == json!("task") && ev["status"] == json!("working")).then_some(())
        },
    );
    let (ev, tasks) = next_rung(&mut w);
    assert_eq!(ev["verdict"]["rule"], json!("escalation_0"), "{ev}");
    assert!(
        tasks
            .iter()
            .any(|e| e["task_id"] == json!(id) && e["status"] == json!("pending")),
        "{tasks:?}"
    );
    let t = task(&d, id);
    assert_eq!(t["status"], json!("pending"), "{t}");
    assert_eq!(t["releases"], json!(1), "{t}");
    // Fold climbs the ladder again from the journal: the four rungs, the
    // productive reset, then the bottom again. Without the reset in the
    // journal, the fifth catch would be the top.
    let journal = d.state.join("tasks.jsonl");
    let (code, r) = wait_for(Duration::from_secs(10), "five climbs journalled", || {
        let (code, r) = fold_journal(&journal);
        (r["rungs"].as_array()?.len() >= 5).then_some((code, r))
    });
    assert_eq!(code, Some(0), "{r}");
    let rungs: Vec<&str> = r["rungs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| x["replayed"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        rungs[..5],
        ["interrupt", "compact", "respawn", "notify", "interrupt"],
        "{r}"
    );
    let text = std::fs::read_to_string(&journal).expect("journal");
    let without_reset: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"ev\":\"productive\""))
        .collect();
    assert!(
        without_reset.len() < text.lines().count(),
        "a productive line"
    );
    let copy = d.path("no-reset.jsonl");
    std::fs::write(&copy, without_reset.join("\n")).expect("copy");
    let (code, r) = fold_journal(&copy);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["rungs"][4]["replayed"], json!("notify"), "{r}");
}

/// The seed's grace: an agent that came up with colibrid is given no task
/// before `orchestrator.grace` has passed (then at the next daemon
/// heartbeat, here every second); one spawned later is given one at once.
#[test]
fn agents_that_came_up_with_colibrid_get_their_grace_before_a_task() {
    let mut d = Colibrid::start(&[]);
    let (early, early_inputs) = agent(&d, "early", true);
    d.relaunch_with_config(
        "grace.toml",
        &format!(
            r#"
[daemon]
heartbeat = "1s"

[orchestrator]
dispatch = true
grace = "4s"
prompt = "TASK {{id}}: {{title}}"

[agents.early]
argv = ["{early}"]
runtime = "pi"
"#
        ),
    );
    let pane = pane_named(&d, "early");
    let started = Instant::now();
    let id = d.ok(json!({"cmd":"task-add","title":"after the grace"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    let t = wait_for(Duration::from_secs(30), "the task acknowledged", || {
        let t = task(&d, id);
        (t["status"] == json!("working")).then_some(t)
    });
    assert_eq!(t["assigned_to"], json!(pane), "{t}");
    // Not before the grace (counted from colibrid's start, before
    // `started`), and only once.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "given after {:?}",
        started.elapsed()
    );
    assert_eq!(lines(&early_inputs).len(), 1);
    // A second task and an agent spawned now: no grace for it.
    let (late, late_inputs) = agent(&d, "late", true);
    let second = d.ok(json!({"cmd":"task-add","title":"at once"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    let late_pane = d.spawn(&[&late], json!({"runtime":"pi"}));
    let t = wait_for(Duration::from_secs(10), "the late agent's task", || {
        let t = task(&d, second);
        (t["status"] == json!("working")).then_some(t)
    });
    assert_eq!(t["assigned_to"], json!(late_pane), "{t}");
    assert_eq!(lines(&late_inputs).len(), 1);
}

/// A plan file's open checkbox items become tasks, once each; a task from
/// it that is done ticks its line.
#[test]
fn a_plan_files_open_items_become_tasks_and_a_done_task_ticks_its_line() {
    let mut d = Colibrid::start(&[]);
    let plan = d.path("plan.md");
    std::fs::write(
        &plan,
        "# Plan\n- [ ] alpha\n- [x] done before\n- [ ] beta\n",
    )
    .expect("plan");
    d.relaunch_with_config(
        "plan.toml",
        &format!(
            r#"
[daemon]
heartbeat = "1s"

[orchestrator]
plan_file = "{}"
"#,
            plan.display()
        ),
    );
    let titles = |d: &Colibrid| -> Vec<String> {
        d.ok(json!({"cmd":"tasks"}))["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["title"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_for(Duration::from_secs(30), "the plan's items as tasks", || {
        (titles(&d).len() == 2).then_some(())
    });
    assert_eq!(titles(&d), ["alpha", "beta"]);
    // Read again at each heartbeat: nothing is added twice.
    let mut w = watch(&d);
    wait_for(Duration::from_secs(30), "two more heartbeats", || {
        let mut n = 0;
        while n < 2 {
            let ev = w.read_line()?;
            if ev["event"] == json!("heartbeat") {
                n += 1;
            }
        }
        Some(())
    });
    assert_eq!(titles(&d), ["alpha", "beta"]);
    // An agent takes alpha and finishes it: its line is ticked.
    let pane = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    let id = claimed["task"]["task_id"].as_u64().expect("claimed");
    assert_eq!(claimed["task"]["title"], json!("alpha"));
    d.ok(json!({"cmd":"task-done","task_id": id,"pane": pane}));
    let text = std::fs::read_to_string(&plan).expect("plan");
    assert_eq!(text, "# Plan\n- [x] alpha\n- [x] done before\n- [ ] beta\n");
}

/// A project directory's sources: its `.project/plan.md`, `*.plan.md` and
/// `plans/*.md` items and its inbox's headers and items become tasks, once
/// each; the inbox is emptied once read; a done task ticks its own file's
/// line, and a task whose context names a file that is no source ticks
/// nothing.
#[test]
fn a_projects_plans_and_inbox_become_tasks_and_a_done_task_ticks_its_file() {
    let mut d = Colibrid::start(&[]);
    let root = d.path("project");
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(&p, text).expect("write");
        p
    };
    write(".project/plan.md", "# Plan\n- [ ] alpha\n- [x] old\n");
    let release = write("docs/release.plan.md", "- [ ] beta\n- [ ] alpha\n");
    write("svc/plans/migrate.md", "* [ ] gamma\n");
    write("notes.md", "- [ ] not a plan\n");
    let inbox = write(
        ".project/inbox.md",
        "# Inbox\n## Fix login\nIt 500s.\n- [ ] delta\n- alpha\n",
    );
    let outsider = d.path("elsewhere.md");
    std::fs::write(&outsider, "- [ ] forged\n").expect("outsider");
    // A directory of the project that is a link to one outside it: its
    // plan-shaped file is no source, whatever a task's context says.
    let beyond = d.path("beyond");
    std::fs::create_dir_all(&beyond).expect("beyond");
    std::fs::write(beyond.join("x.plan.md"), "- [ ] linked\n").expect("linked plan");
    std::os::unix::fs::symlink(&beyond, root.join("linked")).expect("link");
    d.relaunch_with_config(
        "project.toml",
        &format!(
            r#"
[daemon]
heartbeat = "1s"

[orchestrator]
project = "{}"
"#,
            root.display()
        ),
    );
    let tasks = |d: &Colibrid| -> Vec<Value> {
        d.ok(json!({"cmd":"tasks"}))["tasks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let titled = |d: &Colibrid, title: &str| -> Value {
        tasks(d)
            .into_iter()
            .find(|t| t["title"] == json!(title))
            .unwrap_or(Value::Null)
    };
    wait_for(
        Duration::from_secs(30),
        "the sources' items as tasks",
        || (tasks(&d).len() == 5).then_some(()),
    );
    let mut titles: Vec<String> = tasks(&d)
        .iter()
        .map(|t| t["title"].as_str().unwrap_or("").to_string())
        .collect();
    titles.sort();
    assert_eq!(titles, ["Fix login", "alpha", "beta", "delta", "gamma"]);
    assert_eq!(titled(&d, "Fix login")["description"], json!("It 500s."));
    // The inbox is read once and emptied; the plans stay as they were.
    wait_for(Duration::from_secs(30), "the inbox emptied", || {
        std::fs::read_to_string(&inbox)
            .ok()?
            .is_empty()
            .then_some(())
    });
    // Read again at each heartbeat: nothing is added twice.
    let mut w = watch(&d);
    wait_for(Duration::from_secs(30), "two more heartbeats", || {
        let mut n = 0;
        while n < 2 {
            let ev = w.read_line()?;
            if ev["event"] == json!("heartbeat") {
                n += 1;
            }
        }
        Some(())
    });
    assert_eq!(tasks(&d).len(), 5);
    // beta is done: docs/release.plan.md ticks it, nothing else changes.
    // (The others are cancelled first, so the claim takes beta.)
    let pane = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let beta = titled(&d, "beta")["task_id"].as_u64().expect("beta");
    for task in tasks(&d) {
        let id = task["task_id"].as_u64().expect("id");
        if id != beta {
            d.ok(json!({"cmd":"task-cancel","task_id": id}));
        }
    }
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(claimed["task"]["task_id"], json!(beta));
    d.ok(json!({"cmd":"task-done","task_id": beta,"pane": pane}));
    assert_eq!(
        std::fs::read_to_string(&release).expect("release"),
        "- [x] beta\n- [ ] alpha\n"
    );
    // A task that says it came from a file no source names ticks nothing.
    let forged = d.ok(json!({"cmd":"task-add","title":"forged",
        "context": {"plan_file": outsider.display().to_string()}}))["task"]["task_id"]
        .as_u64()
        .expect("forged");
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(claimed["task"]["task_id"], json!(forged));
    d.ok(json!({"cmd":"task-done","task_id": forged,"pane": pane}));
    assert_eq!(
        std::fs::read_to_string(&outsider).expect("outsider"),
        "- [ ] forged\n"
    );
    let linked = root.join("linked/x.plan.md");
    let forged = d.ok(json!({"cmd":"task-add","title":"linked",
        "context": {"plan_file": linked.display().to_string()}}))["task"]["task_id"]
        .as_u64()
        .expect("linked");
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(claimed["task"]["task_id"], json!(forged));
    d.ok(json!({"cmd":"task-done","task_id": forged,"pane": pane}));
    assert_eq!(
        std::fs::read_to_string(beyond.join("x.plan.md")).expect("linked plan"),
        "- [ ] linked\n"
    );
}

/// A role with work and no agent gets one started by its runner
/// (`[roles.NAME]`), never more than `max` at once; the agent is handed the
/// work like any idle agent, and once it has sat idle for `idle_stop` with
/// nothing left for its role it is stopped (planned) and its pane goes.
#[test]
fn a_role_with_work_and_no_agent_gets_one_started_and_stopped_when_idle() {
    let mut d = Colibrid::start(&[]);
    let done = d.path("done.log");
    // Acknowledges and finishes each task it is given, as itself.
    let worker = d.script(
        "worker.sh",
        &format!(
            r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*TASK \([0-9]*\):.*/\1/p')
  [ -n "$id" ] || continue
  {COLIBRI} task ack "$id" >/dev/null
  printf '%s %s\n' "$id" "$COLIBRI_PANE_ID" >> '{done}'
  {COLIBRI} task done "$id" built >/dev/null
done"#,
            done = done.display()
        ),
    );
    d.relaunch_with_config(
        "runners.toml",
        &format!(
            r#"
[daemon]
heartbeat = "1s"

[orchestrator]
grace = "0s"
dispatch = true
prompt = "TASK {{id}}: {{title}}"

[roles.builder]
argv = ["{worker}"]
runtime = "pi"
max = 1
idle_stop = "2s"
"#
        ),
    );
    let runner_panes = |d: &Colibrid| -> Vec<Value> {
        d.snapshot()["panes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("builder-runner-"))
            })
            .cloned()
            .collect()
    };
    assert!(runner_panes(&d).is_empty(), "no work, no agent");
    // A task of another role, or of none, starts nothing.
    let other = d.ok(json!({"cmd":"task-add","title":"review it","role":"reviewer"}))["task"]
        ["task_id"]
        .as_u64()
        .expect("task_id");
    let ids: Vec<u64> = ["one", "two", "three"]
        .iter()
        .map(|title| {
            d.ok(json!({"cmd":"task-add","title": title,"role":"builder"}))["task"]["task_id"]
                .as_u64()
                .expect("task_id")
        })
        .collect();
    let mut most = 0;
    wait_for(Duration::from_secs(30), "the builder tasks done", || {
        most = most.max(runner_panes(&d).len());
        ids.iter()
            .all(|id| task(&d, *id)["status"] == json!("done"))
            .then_some(())
    });
    assert_eq!(most, 1, "max = 1: one runner agent at a time");
    // All three by the one agent it started, with the role and the name.
    let by: Vec<String> = std::fs::read_to_string(&done)
        .expect("done log")
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap_or("").to_string())
        .collect();
    assert_eq!(by.len(), 3, "{by:?}");
    assert!(by.iter().all(|p| p == &by[0]), "{by:?}");
    let st = d.ok(json!({"cmd":"state","pane": by[0]}));
    assert_eq!(st["agents"][0]["role"], json!("builder"), "{st}");
    assert_eq!(task(&d, other)["status"], json!("pending"));
    // Idle with nothing left for its role: stopped, planned, and its pane
    // leaves the table.
    let session = d.pane(&by[0])["daemon_session"]
        .as_str()
        .expect("daemon session")
        .to_string();
    wait_for(
        Duration::from_secs(30),
        "the idle runner agent gone",
        || runner_panes(&d).is_empty().then_some(()),
    );
    let dump = d.ok(json!({"cmd":"get-session","session_id": session}));
    let exit = dump["records"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["colibri"] == json!("exit"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(exit["planned"], json!(true), "{exit}");
    // New work starts a new one.
    let again = d.ok(json!({"cmd":"task-add","title":"four","role":"builder"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    wait_for(Duration::from_secs(30), "the fourth task done", || {
        (task(&d, again)["status"] == json!("done")).then_some(())
    });
    // Every start and stop was journalled with what the plan saw, and
    // runs again to the same steps.
    let (code, r) = fold_journal(&d.state.join("tasks.jsonl"));
    assert_eq!(code, Some(0), "{r}");
    let steps: Vec<Value> = r["runners"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            assert_eq!(p["replayed"], p["steps"], "{p}");
            p["steps"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    let start = json!({"start": {"role": "builder"}});
    let stop = json!({"stop": {"pane": by[0]}});
    assert_eq!(steps.iter().filter(|s| **s == start).count(), 2, "{r}");
    assert!(steps.contains(&stop), "{r}");
}

/// `colibri fold --json` of a task journal: its exit code and report.
fn fold_journal(path: &std::path::Path) -> (Option<i32>, Value) {
    let out = std::process::Command::new(COLIBRI)
        .args(["fold", "--json"])
        .arg(path)
        .output()
        .expect("colibri fold");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v)
}

/// A permission request the harness asked and nobody answered within
/// `approvals.escalate_after` climbs the ladder too; an agent's own
/// request does not (it is a question to a human, not a stuck agent).
#[test]
fn an_unanswered_permission_request_climbs_the_ladder() {
    let mut d = Colibrid::start(&[]);
    let inputs = d.path("asker.inputs");
    let asker = d.script(
        "asker.sh",
        &format!(
            r#"printf '%s\n' '{{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Push?"}}'
exec cat >> '{}'"#,
            inputs.display()
        ),
    );
    d.relaunch_with_config(
        "unanswered.toml",
        &format!(
            r#"
[approvals]
escalate_after = "1s"

[orchestrator]
grace = "0s"
escalate = true

[agents.asker]
argv = ["{asker}"]
runtime = "pi"
"#
        ),
    );
    let mut w = watch(&d);
    let pane = pane_named(&d, "asker");
    let (ev, _) = next_rung(&mut w);
    assert_eq!(ev["pane"], json!(pane), "{ev}");
    assert_eq!(ev["verdict"]["rule"], json!("escalation_0"), "{ev}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("unanswered permission request"), "{ev}");
    // Level 0 carried out on its input: Pi's abort, then the prompt.
    let got = wait_for(
        Duration::from_secs(10),
        "the interrupt on its input",
        || {
            let l = lines(&inputs);
            (l.len() >= 2).then_some(l)
        },
    );
    assert_eq!(got[0], json!({"type":"abort"}));
    assert_eq!(got[1]["type"], json!("prompt"));
    // Its own request, unanswered as long, climbs nothing.
    let mut own = Client::connect(&d.socket);
    let asked = own.request(&json!({"cmd":"approval-request","pane": pane,
        "operation":"merge PR #42"}));
    assert_eq!(asked["ok"], json!(true), "{asked}");
    let own_id = asked["data"]["approval_id"].clone();
    wait_for(Duration::from_secs(10), "its own request escalated", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("approval_escalated") && ev["approval"] == own_id).then_some(())
    });
    // Whatever else comes in the next two seconds, no rung.
    w.reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let more: Vec<Value> = std::iter::from_fn(|| w.read_line()).collect();
    let rungs: Vec<&Value> = more
        .iter()
        .filter(|e| e["event"] == json!("verdict"))
        .collect();
    assert!(rungs.is_empty(), "{rungs:?}");
}

/// An operator moves a task to the top: the next claim takes it before an
/// urgent one; to the bottom: after a task added later. `task-remove` takes
/// a plan task's line out of its file and cancels it, and refuses a task
/// from no plan file.
#[test]
fn a_moved_task_is_given_first_and_a_removed_one_leaves_its_plan() {
    let mut d = Colibrid::start(&[]);
    let plan = d.path("plan.md");
    std::fs::write(&plan, "# Plan\n- [ ] from the plan\n- [ ] keep me\n").expect("plan");
    d.relaunch_with_config(
        "move.toml",
        &format!(
            r#"
[daemon]
heartbeat = "1s"

[orchestrator]
plan_file = "{}"
"#,
            plan.display()
        ),
    );
    let titles = |d: &Colibrid| -> Vec<String> {
        d.ok(json!({"cmd":"tasks"}))["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["title"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_for(Duration::from_secs(30), "the plan's items as tasks", || {
        (titles(&d).len() == 2).then_some(())
    });
    let id_of = |d: &Colibrid, title: &str| -> u64 {
        d.ok(json!({"cmd":"tasks"}))["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["title"] == json!(title))
            .and_then(|t| t["task_id"].as_u64())
            .expect("task id")
    };
    let add = |d: &Colibrid, title: &str, priority: &str| -> u64 {
        d.ok(json!({"cmd":"task-add","title": title,"priority": priority}))["task"]["task_id"]
            .as_u64()
            .expect("task_id")
    };
    let urgent = add(&d, "urgent", "urgent");
    let low = add(&d, "low", "low");
    // The low one to the top: taken before the urgent one. The urgent one
    // to the bottom: after a task added later.
    let moved = d.ok(json!({"cmd":"task-move","task_id": low,"to":"top"}));
    assert_eq!(moved["task"]["rank"], json!(-1), "{moved}");
    d.ok(json!({"cmd":"task-move","task_id": urgent,"to":"bottom"}));
    let later = add(&d, "later", "medium");
    // Removed from the plan: its line goes, it is cancelled.
    let from_plan = id_of(&d, "from the plan");
    let removed = d.ok(json!({"cmd":"task-remove","task_id": from_plan}));
    assert_eq!(removed["task"]["status"], json!("cancelled"), "{removed}");
    assert_eq!(
        std::fs::read_to_string(&plan).expect("plan"),
        "# Plan\n- [ ] keep me\n"
    );
    // A task from no plan file: refused, left as it was.
    let refused = d
        .client()
        .request(&json!({"cmd":"task-remove","task_id": later}));
    assert_eq!(refused["code"], json!("invalid"), "{refused}");
    // Claims follow the order: low, keep me, later, urgent.
    let keep = id_of(&d, "keep me");
    let mut got = Vec::new();
    for _ in 0..4 {
        let pane = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
        let c = d.ok(json!({"cmd":"task-claim","pane": pane}));
        got.push(c["task"]["task_id"].as_u64().unwrap_or(0));
    }
    assert_eq!(got, [low, keep, later, urgent]);
    // The order outlives a restart: the journal kept the moves.
    let rank = |d: &Colibrid, id: u64| task(d, id)["rank"].clone();
    d.terminate();
    d.launch();
    assert_eq!(rank(&d, low), json!(-1));
    assert_eq!(rank(&d, urgent), json!(1));
}

/// An agent's place on the ladder outlives a restart of colibrid: caught
/// twice (interrupt, compact) before, its next catch after is the respawn.
#[test]
fn a_stuck_agents_rung_outlives_a_restart_of_colibrid() {
    let (mut d, mut w, pane, _inputs, _starts) = on_the_ladder();
    for want in ["escalation_0", "escalation_1"] {
        let (ev, _) = next_rung(&mut w);
        assert_eq!(ev["verdict"]["rule"], json!(want), "{ev}");
    }
    // The records are written at the end of the wakeup that climbed.
    let records = d.state.join("agents.jsonl");
    wait_for(
        Duration::from_secs(10),
        "the rung in the agent records",
        || {
            let text = std::fs::read_to_string(&records).ok()?;
            text.contains("\"escalation\":2").then_some(())
        },
    );
    d.terminate();
    // It may have climbed once more before it stopped: the records say
    // where it stood when colibrid stopped.
    let text = std::fs::read_to_string(&records).expect("records");
    let level = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|r| r["record"]["escalation"].as_u64())
        .expect("a rung kept");
    assert!(level >= 2, "{text}");
    d.launch();
    let mut w = watch(&d);
    assert_eq!(pane_named(&d, "loop"), pane, "the same pane comes back");
    let (ev, _) = next_rung(&mut w);
    let want = format!("escalation_{}", level.min(3));
    assert_eq!(ev["verdict"]["rule"], json!(want), "{ev}");
    // The journal holds every climb and the rung colibrid came back with:
    // fold climbs the ladder again to the same rungs, across the restart.
    let journal = d.state.join("tasks.jsonl");
    let (code, r) = wait_for(Duration::from_secs(10), "the climb journalled", || {
        let (code, r) = fold_journal(&journal);
        let rungs = r["rungs"].as_array()?;
        rungs
            .iter()
            .any(|x| x["rung"] == json!(RUNGS[level.min(3) as usize]))
            .then_some((code, r))
    });
    assert_eq!(code, Some(0), "{r}");
    let recorded: Vec<&str> = r["rungs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| {
            assert_eq!(x["replayed"], x["rung"], "{x}");
            assert_eq!(x["pane"], json!(pane), "{x}");
            x["rung"].as_str().unwrap_or("")
        })
        .collect();
    assert_eq!(recorded[..2], ["interrupt", "compact"], "{r}");
    // The rung it came back with is journalled too, for a journal that
    // was compacted at the start and so holds no climb before it.
    let text = std::fs::read_to_string(&journal).expect("journal");
    assert!(text.contains("\"ev\":\"ladder_resumed\""), "{text}");
}

/// At the top of the ladder a human decides: a decide item opens on the
/// agent's pane like an approval. The operator's approve lets it go on
/// (its next catch is level 0 again); deny stops it, planned. Nobody else
/// may answer it, and the journal keeps the answer for fold.
#[test]
fn at_the_ladders_top_the_operator_decides_to_let_it_go_on_or_stop_it() {
    let (d, mut w, pane, _inputs, _starts) = on_the_ladder();
    let decide_item = |w: &mut Client, from: usize| -> Value {
        for want in &[
            "escalation_0",
            "escalation_1",
            "escalation_2",
            "escalation_3",
        ][from..]
        {
            let (ev, _) = next_rung(w);
            assert_eq!(ev["verdict"]["rule"], json!(want), "{ev}");
        }
        wait_for(Duration::from_secs(10), "the decide item", || {
            let list = d.ok(json!({"cmd":"approvals"}));
            list["approvals"]
                .as_array()?
                .iter()
                .find(|a| a["pane"] == json!(pane))
                .cloned()
        })
    };
    let item = decide_item(&mut w, 0);
    let title = item["title"].as_str().unwrap_or("");
    assert!(title.contains("top of the escalation ladder"), "{item}");
    let id = item["approval"]
        .as_str()
        .or(item["id"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(!id.is_empty(), "{item}");
    // An agent's own request may not pass for one.
    let forged = d.request(json!({"cmd":"approval-request","pane": pane,
        "operation":"colibri: fake, deny to stop it"}));
    assert_eq!(forged["ok"], json!(false), "{forged}");
    // The operator resumes it by hand: the item no longer asks anything
    // and closes. Still at the top, its next catch opens a new one.
    d.ok(json!({"cmd":"resume-agent","agent_id": pane}));
    let pending = |id: &str| {
        d.ok(json!({"cmd":"approvals"}))["approvals"]
            .as_array()
            .is_some_and(|l| {
                l.iter()
                    .any(|a| a["approval"] == json!(id) || a["id"] == json!(id))
            })
    };
    assert!(!pending(&id), "resolved by the resume");
    let (ev, _) = next_rung(&mut w);
    assert_eq!(ev["verdict"]["rule"], json!("escalation_3"), "{ev}");
    let item = wait_for(Duration::from_secs(10), "a new decide item", || {
        let list = d.ok(json!({"cmd":"approvals"}));
        list["approvals"]
            .as_array()?
            .iter()
            .find(|a| a["pane"] == json!(pane))
            .cloned()
    });
    let id = item["approval"]
        .as_str()
        .or(item["id"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(!id.is_empty(), "{item}");
    // Let it go on: the next catch starts at the bottom again.
    d.ok(json!({"cmd":"approve","approval": id}));
    let (ev, _) = next_rung(&mut w);
    assert_eq!(ev["verdict"]["rule"], json!("escalation_0"), "{ev}");
    // Back at the top, stop it: a planned stop, and the agent stays down.
    let item = decide_item(&mut w, 1);
    let id = item["approval"]
        .as_str()
        .or(item["id"].as_str())
        .unwrap_or("")
        .to_string();
    d.ok(json!({"cmd":"deny","approval": id}));
    wait_for(Duration::from_secs(15), "the agent stopped", || {
        let p = d.named("loop");
        (p["pid"].is_null() && p["state"] != json!("working")).then_some(())
    });
    let (code, r) = fold_journal(&d.state.join("tasks.jsonl"));
    assert_eq!(code, Some(0), "{r}");
    let text = std::fs::read_to_string(d.state.join("tasks.jsonl")).expect("journal");
    assert!(
        text.contains("\"ev\":\"decided\"") && text.contains("\"go_on\":false"),
        "{text}"
    );
}

/// The rungs by level, as the journal names them.
const RUNGS: [&str; 4] = ["interrupt", "compact", "respawn", "notify"];
