//! The control plane for agents: tasks claimed, acknowledged and completed
//! by real agent processes through `$COLIBRI_SOCKET` and
//! `$COLIBRI_PANE_ID`, the claim handshake's deadline, scope, and the
//! queue across a restart.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{
    jail_socket, recover_jailed_pane, wait_for, Client, Colibrid, COLIBRI, COLIBRID,
    JAILED_AGENT_START, JAILED_PANE,
};

/// A colibrid whose claim acknowledgement window is `ack_ms` (the test
/// hook `COLIBRI_TEST_TASK_ACK_TIMEOUT_MS`), or the default 3 minutes.
fn start(ack_ms: Option<u64>, extra: &[&str]) -> Colibrid {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("colibri.sock");
    let state = dir.path().join("state");
    let mut cmd = Command::new(COLIBRID);
    cmd.arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .arg("--no-syslog")
        .args(extra)
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_CONFIG")
        .env_remove("COLIBRI_TEST_TASK_ACK_TIMEOUT_MS")
        .env("COLIBRI_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(ms) = ack_ms {
        cmd.env("COLIBRI_TEST_TASK_ACK_TIMEOUT_MS", ms.to_string());
    }
    let child = cmd.spawn().expect("start colibrid");
    let d = Colibrid {
        dir,
        socket,
        state,
        child: Some(child),
        args: extra.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        stderr_unread: false,
    };
    wait_for(Duration::from_secs(20), "colibrid to answer", || {
        let mut c = Client::try_connect(&d.socket).ok()?;
        c.try_request(&json!({"cmd":"status"})).ok()
    });
    d
}

fn add_task(d: &Colibrid, title: &str, extra: Value) -> u64 {
    let mut req = json!({"cmd":"task-add","title": title});
    if let (Some(m), Some(e)) = (req.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    d.ok(req)["task"]["task_id"].as_u64().expect("task_id")
}

/// Every task, page after page.
fn all_tasks(d: &Colibrid) -> Vec<Value> {
    let mut all = Vec::new();
    let mut req = json!({"cmd":"tasks"});
    loop {
        let page = d.ok(req.clone());
        all.extend(page["tasks"].as_array().cloned().unwrap_or_default());
        match page["next"].as_u64() {
            Some(next) => req["after"] = json!(next),
            None => return all,
        }
    }
}

fn task(d: &Colibrid, id: u64) -> Value {
    d.ok(json!({"cmd":"tasks","task_id": id}))["tasks"][0].clone()
}

/// An idle agent: it stays up so its pane stays visible.
fn idle_agent(d: &Colibrid) -> String {
    let id = d.spawn(
        &[
            "/bin/sh",
            "-c",
            "echo '{\"type\":\"agent_start\"}'; sleep 60",
        ],
        json!({}),
    );
    d.wait_state(&id, "working");
    id
}

#[test]
fn an_agent_claims_acknowledges_and_completes_a_task_through_its_socket() {
    let d = start(None, &[]);
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let low = add_task(&d, "tidy logs", json!({"priority":"low"}));
    let id = add_task(
        &d,
        "check the db jail",
        json!({"priority":"high","role":"sysadmin","context":{"jail":"db"}}),
    );
    // The agent knows only its environment: the socket and its pane id.
    let agent = d.script(
        "agent.sh",
        &format!(
            r#"set -e
C={COLIBRI}
task=$($C task claim --role sysadmin)
id=$(echo "$task" | sed -n 's/.*"task_id":\([0-9]*\).*/\1/p')
echo "$task" | grep -q '"jail":"db"'
$C task ack "$id"
$C task done "$id" "db is up"
echo '{{"type":"agent_end"}}'
sleep 60"#
        ),
    );
    let pane = d.spawn(&[&agent], json!({}));
    let done = wait_for(Duration::from_secs(30), "the agent to complete", || {
        let t = task(&d, id);
        (t["status"] == json!("done")).then_some(t)
    });
    assert_eq!(done["assigned_to"], json!(pane));
    assert_eq!(done["outcome"], json!("db is up"));
    assert_eq!(
        task(&d, low)["status"],
        json!("pending"),
        "the urgent task went first"
    );
    // The watch stream saw claimed, working, done for that pane, in order.
    let mut seen = Vec::new();
    wait_for(Duration::from_secs(30), "task events", || {
        let ev = w.read_line()?;
        // Its `pending` event (when added) names no pane.
        if ev["event"] == json!("task")
            && ev["task_id"] == json!(id)
            && ev["status"] != json!("pending")
        {
            assert_eq!(ev["pane"], json!(pane), "{ev}");
            seen.push(ev["status"].as_str().unwrap_or("").to_string());
        }
        (seen.last().map(String::as_str) == Some("done")).then_some(())
    });
    assert_eq!(seen, ["claimed", "working", "done"]);
    // state: the agent is active, holds nothing now, and has no budget.
    let st = d.ok(json!({"cmd":"state","pane": pane}));
    assert_eq!(st["agents"].as_array().map(Vec::len), Some(1), "{st}");
    assert_eq!(st["agents"][0]["active"], json!(true));
    assert_eq!(st["agents"][0]["budget"]["configured"], json!(false));
    // activity reaches the watch stream.
    let r = d.ok(
        json!({"cmd":"activity","pane": pane,"event_type":"task_completed",
        "task_id": id,"message":"db is up","tokens":420}),
    );
    assert!(r["seq"].as_u64().is_some(), "{r}");
    let ev = wait_for(Duration::from_secs(30), "task_completed", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("task_completed")).then_some(ev)
    });
    assert_eq!(ev["pane"], json!(pane));
    assert_eq!(ev["tokens"], json!(420));
}

#[test]
fn an_unacknowledged_claim_is_released_when_its_window_passes() {
    let d = start(Some(1500), &[]);
    let pane = idle_agent(&d);
    let id = add_task(&d, "needs an ack", json!({}));
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let claimed = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(claimed["task"]["task_id"], json!(id));
    assert_eq!(claimed["task"]["status"], json!("claimed"));
    let ev = wait_for(Duration::from_secs(30), "the release", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("task") && ev["status"] == json!("pending")).then_some(ev)
    });
    assert_eq!(ev["task_id"], json!(id));
    let t = task(&d, id);
    assert_eq!(t["status"], json!("pending"));
    assert_eq!(t["releases"], json!(1));
    assert!(t.get("assigned_to").is_none(), "{t}");
    // A late acknowledgement is refused; the task can be claimed afresh.
    let late = d.request(json!({"cmd":"task-ack","task_id": id,"pane": pane}));
    assert_eq!(late["ok"], json!(false), "{late}");
    let again = d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert_eq!(again["task"]["task_id"], json!(id));
    d.ok(json!({"cmd":"task-ack","task_id": id,"pane": pane}));
    assert_eq!(task(&d, id)["status"], json!("working"));
}

#[test]
fn an_agent_sees_and_moves_only_its_own_tasks() {
    let d = start(None, &[]);
    let a = idle_agent(&d);
    let b = idle_agent(&d);
    let ta = add_task(&d, "for a", json!({}));
    let tb = add_task(&d, "for b", json!({}));
    assert_eq!(
        d.ok(json!({"cmd":"task-claim","pane": a}))["task"]["task_id"],
        json!(ta)
    );
    assert_eq!(
        d.ok(json!({"cmd":"task-claim","pane": b}))["task"]["task_id"],
        json!(tb)
    );
    let r = d.request(json!({"cmd":"task-done","task_id": ta,"pane": b}));
    assert_eq!(
        (r["ok"].clone(), r["code"].clone()),
        (json!(false), json!("forbidden")),
        "{r}"
    );
    let r = d.request(json!({"cmd":"task-cancel","task_id": ta,"pane": b}));
    assert_eq!(r["ok"], json!(false), "{r}");
    // Not even its own: cancelling is the operator's.
    let r = d.request(json!({"cmd":"task-cancel","task_id": tb,"pane": b}));
    assert_eq!(r["code"], json!("forbidden"), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap_or("")
            .contains("only the operator"),
        "{r}"
    );
    assert_eq!(task(&d, ta)["status"], json!("claimed"));
    let mine = d.ok(json!({"cmd":"tasks","pane": b}));
    let ids: Vec<&Value> = mine["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| &t["task_id"])
        .collect();
    assert_eq!(ids, [&json!(tb)], "b sees only its own task: {mine}");
    let st = d.ok(json!({"cmd":"state","pane": b}));
    assert_eq!(st["agents"].as_array().map(Vec::len), Some(1));
    assert_eq!(st["agents"][0]["pane"], json!(b));
    assert_eq!(st["agents"][0]["task_id"], json!(tb));
    assert_eq!(
        d.ok(json!({"cmd":"approvals","agent_id": b})),
        json!({"approvals": [], "approved": []})
    );
    // The operator sees everything and may finish any task.
    let all = d.ok(json!({"cmd":"tasks"}));
    assert_eq!(all["tasks"].as_array().map(Vec::len), Some(2));
    d.ok(json!({"cmd":"task-fail","task_id": ta,"note":"reassigned"}));
    assert_eq!(task(&d, ta)["status"], json!("failed"));
}

#[test]
fn a_jail_socket_must_name_a_pane_of_its_own_jail() {
    let (_jail_dir, jail_sock, arg) = jail_socket();
    let d = start(None, &["--jail-socket", &arg]);
    let host = idle_agent(&d);
    let id = add_task(&d, "host work", json!({}));
    let mut c = Client::connect_jailed(&jail_sock);
    let r = c.request(&json!({"cmd":"task-claim","pane": host}));
    assert_eq!(
        r["code"],
        json!("not_found"),
        "a host pane is invisible: {r}"
    );
    let r = c.request(&json!({"cmd":"tasks"}));
    assert_eq!(
        r["code"],
        json!("invalid"),
        "an agent must say who it is: {r}"
    );
    let r = c.request(&json!({"cmd":"task-add","title":"x"}));
    assert_eq!(r["code"], json!("forbidden"), "{r}");
    let r = c.request(&json!({"cmd":"approvals","agent_id": host}));
    assert_eq!(r["code"], json!("not_found"), "{r}");
    assert_eq!(task(&d, id)["status"], json!("pending"));
}

#[test]
fn a_jailed_agent_works_a_task_through_its_jails_socket() {
    let (_jail_dir, jail_sock, arg) = jail_socket();
    let mut d = start(None, &["--jail-socket", &arg]);
    let id = add_task(&d, "inside work", json!({"role":"db"}));
    let jailed = JAILED_PANE;
    recover_jailed_pane(&mut d, &[JAILED_AGENT_START]);
    let mut w = Client::connect_jailed(&jail_sock);
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let mut c = Client::connect_jailed(&jail_sock);
    let r = c.request(&json!({"cmd":"task-claim","pane":"inside","role":"db"}));
    assert_eq!(r["data"]["task"]["task_id"], json!(id), "{r}");
    assert_eq!(r["data"]["task"]["assigned_to"], json!(jailed));
    let r = c.request(&json!({"cmd":"task-ack","pane": jailed,"task_id": id}));
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = c.request(&json!({"cmd":"task-done","pane": jailed,"task_id": id,"note":"ok"}));
    assert_eq!(r["data"]["task"]["status"], json!("done"), "{r}");
    // The jail's watcher sees its own pane's task events.
    let ev = wait_for(Duration::from_secs(30), "the jail's task event", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("task") && ev["status"] == json!("done")).then_some(ev)
    });
    assert_eq!(ev["pane"], json!(jailed));
    let mine = c.request(&json!({"cmd":"state","pane": jailed}));
    assert_eq!(
        mine["data"]["agents"][0]["active"],
        json!(false),
        "recovered, not running: {mine}"
    );
}

/// A task added for another jail is not an agent's to claim (nor counted
/// as pending for it); one for its own jail is; a jail that has no socket
/// here is refused.
#[test]
fn a_task_for_a_jail_is_claimed_only_through_that_jail() {
    let (_jail_dir, jail_sock, arg) = jail_socket();
    let mut d = start(None, &["--jail-socket", &arg]);
    let bad = d.request(json!({"cmd":"task-add","title":"x","jail":"nowhere"}));
    assert_eq!(bad["code"], json!("invalid"), "{bad}");
    let jail = arg.split('=').next().unwrap_or_default().to_string();
    recover_jailed_pane(&mut d, &[JAILED_AGENT_START]);
    let theirs = add_task(&d, "host work", json!({"priority":"urgent"}));
    let ours = add_task(&d, "inside work", json!({"jail": jail}));
    let mut c = Client::connect_jailed(&jail_sock);
    let listed = c.request(&json!({"cmd":"tasks","pane":"inside"}));
    assert_eq!(listed["data"]["pending"], json!(2), "{listed}");
    let r = c.request(&json!({"cmd":"task-claim","pane":"inside"}));
    // The urgent task is anyone's, so it comes first; then the jail's.
    assert_eq!(r["data"]["task"]["task_id"], json!(theirs), "{r}");
    let r = c.request(&json!({"cmd":"task-done","pane": JAILED_PANE,"task_id": theirs}));
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = c.request(&json!({"cmd":"task-claim","pane":"inside"}));
    assert_eq!(r["data"]["task"]["task_id"], json!(ours), "{r}");
    assert_eq!(r["data"]["task"]["jail"], json!(jail), "{r}");
    // A host agent does not get the jail's task.
    d.ok(json!({"cmd":"task-cancel","task_id": ours}));
    let again = add_task(&d, "inside again", json!({"jail": jail}));
    let host = d.spawn(&["/bin/sh", "-c", "sleep 60"], json!({"name":"host"}));
    let r = d.request(json!({"cmd":"task-claim","pane": host}));
    assert_eq!(r["data"]["task"], Value::Null, "{r}");
    let listed = d.request(json!({"cmd":"tasks","pane": host}));
    assert_eq!(listed["data"]["pending"], json!(0), "{listed}");
    assert_eq!(task(&d, again)["status"], json!("pending"));
}

/// One agent posting `activity` without pause would push every other
/// event out of the watch journal: a pane posts 30 at once, then is told
/// to wait (`busy`), and a long message is cut to 4 KiB in the event.
#[test]
fn activity_posts_are_limited_per_pane_and_their_texts_bounded() {
    let d = start(None, &[]);
    let a = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let b = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let mut w = d.client();
    w.request(&json!({"cmd":"watch","panes":[a]}));
    let post = |pane: &str, message: String| {
        d.request(json!({"cmd":"activity","pane": pane,"event_type":"error","message": message}))
    };
    let r = post(&a, "x".repeat(100_000));
    assert_eq!(r["ok"], json!(true), "{}", r["error"]);
    let ev = wait_for(Duration::from_secs(10), "the activity event", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("error")).then_some(ev)
    });
    let message = ev["message"].as_str().unwrap_or_default();
    assert!(
        message.len() <= 4096 && message.ends_with('…'),
        "{}",
        message.len()
    );
    for i in 1..30 {
        let r = post(&a, format!("post {i}"));
        assert_eq!(r["ok"], json!(true), "post {i}: {}", r["error"]);
    }
    let r = post(&a, "one too many".into());
    assert_eq!(r["code"], json!("busy"), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains("try again in"),
        "{r}"
    );
    // Another pane is not held back by the first.
    assert_eq!(post(&b, "mine".into())["ok"], json!(true));
    // An ended pane posts nothing (else each ended pane of a jail would
    // add its own 30).
    let ended = d.spawn(&["true"], json!({}));
    d.wait_pane(&ended, "the exit", |p| p["exit"].is_object());
    let r = post(&ended, "late".into());
    assert_eq!(r["code"], json!("not_running"), "{r}");
}

#[test]
fn tasks_survive_a_colibrid_restart() {
    let mut d = start(None, &[]);
    let pane = idle_agent(&d);
    let kept = add_task(
        &d,
        "kept",
        json!({"description":"stays","role":"db","context":{"n":1}}),
    );
    let working = add_task(&d, "in progress", json!({"priority":"urgent"}));
    let cancelled = add_task(&d, "dropped", json!({}));
    assert_eq!(
        d.ok(json!({"cmd":"task-claim","pane": pane}))["task"]["task_id"],
        json!(working)
    );
    d.ok(json!({"cmd":"task-ack","task_id": working,"pane": pane}));
    d.ok(json!({"cmd":"task-cancel","task_id": cancelled}));
    let before = d.ok(json!({"cmd":"tasks"}));
    assert!(d.terminate().success());
    d.launch();
    let after = d.ok(json!({"cmd":"tasks"}));
    assert_eq!(after, before);
    assert_eq!(task(&d, kept)["context"], json!({"n":1}));
    // New ids continue after the old ones.
    let next = add_task(&d, "next", json!({}));
    assert_eq!(next, cancelled + 1);
    // The operator CLI reads the same queue.
    let out = Command::new(COLIBRI)
        .args(["task", "ls"])
        .env("COLIBRI_SOCKET", &d.socket)
        .output()
        .expect("colibri task ls");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("in progress") && text.contains("working"),
        "{text}"
    );
    assert!(text.contains("cancelled"), "{text}");
}

#[test]
fn a_claims_deadline_holds_across_a_restart() {
    let mut d = start(Some(1500), &[]);
    let pane = idle_agent(&d);
    let id = add_task(&d, "claimed before the restart", json!({}));
    d.ok(json!({"cmd":"task-claim","pane": pane}));
    assert!(d.terminate().success());
    // The new daemon has the default 3-minute window, but the claim keeps
    // the deadline it was given.
    d.launch();
    let t = wait_for(Duration::from_secs(30), "the claim to lapse", || {
        let t = task(&d, id);
        (t["status"] == json!("pending")).then_some(t)
    });
    assert_eq!(t["releases"], json!(1));
}

#[test]
fn a_burst_of_acknowledged_tasks_is_all_in_the_journal_after_a_restart() {
    // Pipelined on one connection, faster than one fdatasync a line: before,
    // the journal's queue of 1,024 lines overflowed and acknowledged tasks
    // were lost (and their ids handed out again after the restart).
    const N: u64 = 3000;
    // A slow disk: a second for each write and sync, so the burst piles up.
    let mut d = Colibrid::start_with_env(&[], &[("COLIBRI_TEST_TASK_JOURNAL_DELAY_MS", "1000")]);
    let stream = std::os::unix::net::UnixStream::connect(&d.socket).expect("connect");
    let mut lines = String::new();
    for i in 1..=N {
        let req = json!({"cmd":"task-add","title": format!("t{i}"),"description":"x".repeat(200)});
        lines.push_str(&req.to_string());
        lines.push('\n');
    }
    let mut writer = stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        writer.write_all(lines.as_bytes()).expect("send the burst");
    });
    let mut reader = std::io::BufReader::new(stream);
    let mut ids = Vec::new();
    for _ in 0..N {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).expect("a reply");
        let r: Value = serde_json::from_str(&line).expect("JSON reply");
        assert_eq!(r["ok"], json!(true), "{r}");
        ids.push(r["data"]["task"]["task_id"].as_u64().expect("task_id"));
    }
    sender.join().expect("sender");
    assert_eq!(ids, (1..=N).collect::<Vec<_>>());
    assert!(d.terminate().success());
    d.launch();
    assert_eq!(all_tasks(&d).len(), N as usize);
    assert_eq!(
        add_task(&d, "after", json!({})),
        N + 1,
        "no id handed out twice"
    );
}

/// The queue keeps the last 1,000 finished tasks: a journal of more is
/// replayed, the oldest finished forgotten, and rewritten as the queue's
/// own events; open tasks and ids stay as they were.
#[test]
fn old_finished_tasks_are_forgotten_and_the_journal_compacted_at_start() {
    let mut d = start(None, &[]);
    assert!(d.terminate().success());
    let mut journal = String::new();
    for id in 1..=1200u64 {
        journal.push_str(&format!(
            "{{\"ev\":\"added\",\"id\":{id},\"at\":{},\"task\":{{\"title\":\"t{id}\"}}}}\n",
            1_700_000_000_000u64 + id
        ));
        if id < 1200 {
            journal.push_str(&format!(
                "{{\"ev\":\"cancelled\",\"id\":{id},\"at\":{}}}\n",
                1_700_000_100_000u64 + id
            ));
        }
    }
    let path = d.state.join("tasks.jsonl");
    std::fs::write(&path, &journal).expect("write the journal");
    d.launch();
    let tasks = all_tasks(&d);
    assert_eq!(tasks.len(), 1001, "1,000 finished and the open one");
    assert_eq!(tasks[0]["task_id"], json!(200), "1 to 199 forgotten");
    assert_eq!(d.ok(json!({"cmd":"tasks","limit": 1}))["pending"], json!(1));
    let lines = std::fs::read_to_string(&path)
        .expect("journal")
        .lines()
        .count();
    // The queue's events, then this start's marker for the ladder replay.
    assert_eq!(lines, 1000 * 2 + 1 + 1, "rewritten as the queue's events");
    let previous = std::fs::read_to_string(d.state.join("tasks.jsonl.1")).expect("previous");
    assert_eq!(previous, journal, "the journal before compaction is kept");
    let id = add_task(&d, "next", json!({}));
    assert_eq!(id, 1201);
    assert!(d.terminate().success());
    d.launch();
    assert_eq!(all_tasks(&d).len(), 1002);
}

/// The task list comes in pages that stay small whatever the agents wrote,
/// and `colibri task ls` reads every page; a text past the intake caps is
/// refused with the reason. Before, 80 tasks with 900 KB notes made `tasks`
/// fail for every client ("reply queue full").
#[test]
fn large_tasks_come_in_pages_and_oversized_text_is_refused_at_intake() {
    let d = start(None, &[]);
    let refused =
        d.request(json!({"cmd":"task-add","title":"big","description":"x".repeat(900_000)}));
    assert_eq!(refused["code"], json!("invalid"), "{refused}");
    let said = refused["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("description") && said.contains("at most"),
        "{said}"
    );
    let long = "d".repeat(60_000);
    let ids: Vec<u64> = (0..150)
        .map(|i| add_task(&d, &format!("task {i}"), json!({"description": long})))
        .collect();
    let first = d.ok(json!({"cmd":"tasks"}));
    let page = first["tasks"].as_array().map(Vec::len).unwrap_or(0);
    assert!(page > 0 && page < ids.len(), "one page held {page} of 150");
    let next = first["next"].as_u64().expect("a next page");
    let second = d.ok(json!({"cmd":"tasks","after": next}));
    assert_eq!(
        second["tasks"][0]["task_id"].as_u64(),
        ids.iter().copied().find(|id| *id > next),
        "the second page starts after the first"
    );
    let out = Command::new(COLIBRI)
        .args(["task", "ls", "--json"])
        .env("COLIBRI_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .output()
        .expect("colibri task ls");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout).expect("json");
    let listed: Vec<u64> = all["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["task_id"].as_u64())
        .collect();
    assert_eq!(listed, ids, "every task, once, in order");
}

/// A task held by an agent that ended and will not run again goes back to
/// the queue (before, it stayed `working` for ever); one whose agent waits
/// to be restarted by its policy stays with it.
#[test]
fn a_task_held_by_an_agent_that_ends_goes_back_to_the_queue() {
    let d = Colibrid::start(&[]);
    let pane = d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({}));
    let id = d.ok(json!({"cmd":"task-add","title":"orphaned"}))["task"]["task_id"]
        .as_u64()
        .expect("task_id");
    d.ok(json!({"cmd":"task-claim","pane": pane}));
    d.ok(json!({"cmd":"task-ack","task_id": id,"pane": pane}));
    d.ok(json!({"cmd":"stop-agent","agent_id": pane}));
    let t = crate::support::wait_for(Duration::from_secs(30), "the task released", || {
        let t = d.ok(json!({"cmd":"tasks","task_id": id}))["tasks"][0].clone();
        (t["status"] == json!("pending")).then_some(t)
    });
    assert_eq!(t["releases"], json!(1), "{t}");
    // An agent its policy restarts keeps what it holds.
    let keeper = d.spawn(
        &["/bin/sh", "-c", "sleep 1; exit 3"],
        json!({"restart":"always","max_restarts": 5}),
    );
    let claimed = d.ok(json!({"cmd":"task-claim","pane": keeper}));
    assert_eq!(claimed["task"]["task_id"], json!(id));
    d.ok(json!({"cmd":"task-ack","task_id": id,"pane": keeper}));
    // It exits; its restart is scheduled (a minute off): it keeps the task.
    d.wait_pane(&keeper, "a scheduled restart", |p| {
        !p["restart"]["next_at"].is_null()
    });
    let t = d.ok(json!({"cmd":"tasks","task_id": id}))["tasks"][0].clone();
    assert_eq!(t["status"], json!("working"), "{t}");
    assert_eq!(t["assigned_to"], json!(keeper), "{t}");
}
