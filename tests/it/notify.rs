//! The resumable watch (a journal that keeps `seq` across restarts, replay
//! with `since`, the gap marker) and `colibri notify`, its first client.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{wait_for, Client, Colibrid};

/// Reads watch lines until one satisfies `stop`; every line read.
fn read_until(c: &mut Client, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let ev = c
            .read_line()
            .unwrap_or_else(|| panic!("the stream ended; seen so far: {seen:?}"));
        let done = stop(&ev);
        seen.push(ev);
        if done {
            return seen;
        }
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

fn attached(id: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["event"] == json!("attached") && e["pane"] == json!(id)
}

#[test]
fn a_watch_resumes_across_a_restart_with_no_gap_and_no_duplicate() {
    let mut d = Colibrid::start(&[]);
    let mut first = d.client();
    assert_eq!(first.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let a = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"one"}));
    let before = read_until(&mut first, attached(&a));
    let cursor = *seqs(&before).last().expect("a seq");
    // Events this watcher never reads: the second agent, then the
    // shutdown's exits.
    let b = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"two"}));
    assert!(d.terminate().success());
    d.launch();
    let c = d.spawn(&["/bin/sh", "-c", "sleep 30"], json!({"name":"three"}));

    let mut resumed = d.client();
    let ack = resumed.request(&json!({"cmd":"watch","since": cursor}));
    assert_eq!(ack["ok"], json!(true), "{ack}");
    let replayed = read_until(&mut resumed, attached(&c));
    assert!(
        replayed.iter().all(|e| e["event"] != json!("gap")),
        "no gap: {replayed:?}"
    );
    let got = seqs(&replayed);
    let want: Vec<u64> = (cursor + 1..cursor + 1 + got.len() as u64).collect();
    assert_eq!(got, want, "every event after the cursor, once, in order");
    assert!(
        replayed.iter().any(attached(&b)),
        "the event missed before the restart is replayed: {replayed:?}"
    );
    assert!(
        replayed
            .iter()
            .any(|e| e["event"] == json!("exited") && e["pane"] == json!(a)),
        "the shutdown's exits are replayed: {replayed:?}"
    );
    // Live events follow the replay without a seam.
    d.ok(json!({"cmd":"pause-agent","agent_id": c}));
    let live = read_until(&mut resumed, |e| e["event"] == json!("paused"));
    assert_eq!(
        seqs(&live).first().copied(),
        got.last().map(|s| s + 1),
        "{live:?}"
    );
}

/// `journal_id` names one numbering of `seq`: kept across restarts while
/// numbering goes on, new once the journal is gone and `seq` starts over,
/// so `(journal_id, seq)` never names two events (the fleet bridge's
/// message ids rely on it).
#[test]
fn the_journal_id_lasts_while_numbering_goes_on_and_changes_when_it_starts_over() {
    let mut d = Colibrid::start(&[]);
    let watch = |d: &Colibrid| d.client().request(&json!({"cmd":"watch"}))["data"].clone();
    d.spawn(&["/bin/sh", "-c", "exit 0"], json!({"name":"one"}));
    let first = watch(&d);
    let id = first["journal_id"]
        .as_str()
        .expect("a journal_id")
        .to_string();
    assert!(first["seq"].as_u64() > Some(0), "{first}");
    assert!(d.terminate().success());
    d.launch();
    let again = watch(&d);
    assert_eq!(again["journal_id"], json!(id), "{again}");
    assert_ne!(again["epoch"], first["epoch"], "a new run: {again}");
    assert!(again["seq"].as_u64() >= first["seq"].as_u64(), "{again}");

    assert!(d.terminate().success());
    for name in ["watch.journal", "watch.journal.1"] {
        let _ = std::fs::remove_file(d.state.join(name));
    }
    d.launch();
    let reset = watch(&d);
    assert!(reset["seq"].as_u64() < first["seq"].as_u64(), "{reset}");
    let new_id = reset["journal_id"].as_str().expect("a journal_id");
    assert_ne!(new_id, id, "seq started over: {reset}");
}

#[test]
fn a_since_older_than_the_journal_gets_the_gap_marker_first() {
    let mut d = Colibrid::start(&[]);
    let mut w = d.client();
    assert_eq!(w.request(&json!({"cmd":"watch"}))["ok"], json!(true));
    let mut panes = Vec::new();
    for n in 0..4 {
        panes.push(d.spawn(
            &["/bin/sh", "-c", "sleep 30"],
            json!({"name": format!("p{n}")}),
        ));
    }
    let last = panes.last().expect("a pane").clone();
    let events = read_until(&mut w, attached(&last));
    assert!(d.terminate().success());
    // As the age bound would: the oldest journaled events are gone.
    let path = d.state.join("watch.journal");
    let text = std::fs::read_to_string(&path).expect("the journal");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= events.len(), "{} lines", lines.len());
    let kept = lines[3..].join("\n") + "\n";
    std::fs::write(&path, kept).expect("trim");
    let oldest: Value = serde_json::from_str(lines[3]).expect("a journal line");
    let oldest = oldest["ev"]["seq"].as_u64().expect("seq");
    d.launch();

    let mut late = d.client();
    assert_eq!(
        late.request(&json!({"cmd":"watch","since": 1}))["ok"],
        json!(true)
    );
    let gap = late.read_line().expect("the gap marker");
    assert_eq!(gap["event"], json!("gap"), "{gap}");
    assert_eq!(gap["since"], json!(1));
    assert_eq!(gap["resumes_at"], json!(oldest));
    assert_eq!(gap["seq"], json!(oldest - 1));
    let next = late.read_line().expect("the oldest kept event");
    assert_eq!(next["seq"], json!(oldest), "{next}");

    // A cursor the journal never reached (a reset state dir) gets one too.
    let mut ahead = d.client();
    let ack = ahead.request(&json!({"cmd":"watch","since": 1_000_000}));
    assert_eq!(ack["ok"], json!(true));
    let marker = ahead.read_line().expect("the gap marker");
    assert_eq!(marker["event"], json!("gap"), "{marker}");
    assert_eq!(marker["since"], json!(1_000_000));
    assert_eq!(marker["resumes_at"], json!(oldest));
    // The largest cursor there is: its marker names it, not one less.
    let mut last = d.client();
    let ack = last.request(&json!({"cmd":"watch","since": u64::MAX}));
    assert_eq!(ack["ok"], json!(true), "{ack}");
    let marker = last.read_line().expect("the gap marker");
    assert_eq!(marker["event"], json!("gap"), "{marker}");
    assert_eq!(marker["since"], json!(u64::MAX), "{marker}");
    assert_eq!(marker["resumes_at"], json!(oldest));
    wait_for(Duration::from_secs(10), "status", || {
        (d.ok(json!({"cmd":"status"}))["watchers"].as_u64() >= Some(3)).then_some(())
    });
}

/// `colibri notify` as a child, killed when dropped.
struct Notify {
    child: std::process::Child,
    stderr: std::path::PathBuf,
}

impl Notify {
    fn start(d: &Colibrid, config: &std::path::Path, cursor: &std::path::Path) -> Notify {
        let stderr = d.dir.path().join(format!(
            "notify-{}.err",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|t| t.as_nanos())
                .unwrap_or(0)
        ));
        let child = std::process::Command::new(crate::support::COLIBRI)
            .arg("notify")
            .arg("--config")
            .arg(config)
            .arg("--cursor")
            .arg(cursor)
            .env("COLIBRI_SOCKET", &d.socket)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("colibri notify");
        wait_for(Duration::from_secs(20), "notify to watch", || {
            cursor.exists().then_some(())
        });
        Notify { child, stderr }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn block(d: &Colibrid, pane: &str) {
    d.ok(json!({"cmd":"emit","agent_id": pane,
        "event":{"type":"extension_ui_request","id":"1","method":"confirm","title":"Delete build/?"}}));
    d.wait_state(pane, "blocked");
}

/// A tiny HTTP server: each request's body goes to the channel, answered 200.
fn serve(listener: std::net::TcpListener, got: std::sync::mpsc::Sender<Value>) {
    use std::io::{BufRead, BufReader, Read, Write};
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { return };
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            continue;
        }
        let _ =
            stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            if got.send(v).is_err() {
                return;
            }
        }
    }
}

#[test]
fn a_webhook_gets_one_post_per_blocked_pane_none_for_sub_agents_retried_until_up() {
    let d = Colibrid::start(&[]);
    // A port nobody listens on yet: the server is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{port}/hook\"\nstates = [\"blocked\", \"error\"]\n"
        ),
    )
    .expect("config");
    let one = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"one","runtime":"pi"}),
    );
    let two = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"two","runtime":"pi"}),
    );
    let oc = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"oc","runtime":"opencode"}),
    );
    let cursor = d.dir.path().join("cursor");
    let notify = Notify::start(&d, &config, &cursor);

    // A sub-agent's failure (another session in the pane's stream) makes
    // no event, so no POST; it comes first, so a POST for it would come
    // before the others.
    d.ok(json!({"cmd":"emit","agent_id": oc,
        "event":{"type":"step_start","sessionID":"ses_main","part":{}}}));
    d.ok(json!({"cmd":"emit","agent_id": oc,
        "event":{"type":"error","sessionID":"ses_child","error":{"name":"x","data":{"message":"child failed"}}}}));
    let p = d.wait_pane(&oc, "the sub-agent's error seen", |p| {
        p["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("child failed"))
    });
    assert_ne!(
        p["state"],
        json!("error"),
        "a sub-agent's failure is not the pane's: {p}"
    );
    block(&d, &one);
    wait_for(Duration::from_secs(20), "a failed delivery retried", || {
        notify.stderr().contains("retrying").then_some(())
    });

    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the port again");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || serve(listener, tx));
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the POST once the server is up");
    assert_eq!(first["pane"], json!(one), "{first}");
    assert_eq!(first["to"], json!("blocked"));
    assert_eq!(first["name"], json!("one"));
    assert_eq!(first["runtime"], json!("pi"));
    block(&d, &two);
    let second = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the second POST");
    assert_eq!(
        second["pane"],
        json!(two),
        "one POST per blocked pane, in order: {second}"
    );
    assert!(rx.try_recv().is_err(), "nothing else was posted");
}

#[test]
fn an_exec_sink_runs_with_the_event_and_resumes_after_a_restart_of_notify() {
    let d = Colibrid::start(&[]);
    let out = d.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"exec\"\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_NAME.tmp\\\" && printf '%s %s %s\\\\n' \\\"$COLIBRI_EVENT\\\" \\\"$COLIBRI_STATE\\\" \\\"$COLIBRI_REASON\\\" > \\\"$0/$COLIBRI_NAME.env\\\" && mv \\\"$0/$COLIBRI_NAME.tmp\\\" \\\"$0/$COLIBRI_NAME.json\\\"\", \"{}\"]\ntimeout = \"20s\"\n",
            out.display()
        ),
    )
    .expect("config");
    let a = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"alpha","runtime":"pi"}),
    );
    let b = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"beta","runtime":"pi"}),
    );
    let cursor = d.dir.path().join("cursor");
    let notify = Notify::start(&d, &config, &cursor);
    block(&d, &a);
    let json_of = |name: &str| -> Value {
        wait_for(Duration::from_secs(20), "the command's output", || {
            std::fs::read(out.join(format!("{name}.json")))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        })
    };
    let ev = json_of("alpha");
    assert_eq!(ev["pane"], json!(a), "{ev}");
    assert_eq!(ev["to"], json!("blocked"));
    let env = std::fs::read_to_string(out.join("alpha.env")).expect("env");
    assert_eq!(env.trim(), "state blocked Delete build/?");

    // notify down while beta blocks: the cursor makes the restarted one
    // deliver it.
    let handled = wait_for(
        Duration::from_secs(20),
        "the cursor past alpha's event",
        || {
            let c: u64 = std::fs::read_to_string(&cursor).ok()?.trim().parse().ok()?;
            (c >= ev["seq"].as_u64()?).then_some(c)
        },
    );
    drop(notify);
    block(&d, &b);
    assert!(!out.join("beta.json").exists());
    let _notify = Notify::start(&d, &config, &cursor);
    let ev = json_of("beta");
    assert_eq!(ev["pane"], json!(b), "{ev}");
    assert!(ev["seq"].as_u64() > Some(handled));
}

/// A pane that starts after notify is known by its `attached` event alone:
/// its runtime is the event's `runtime`, not the executable (`sh` here), so
/// a `runtimes` filter matches and the payload and environment say `pi`.
#[test]
fn a_pane_started_after_notify_has_the_runtime_it_was_spawned_with() {
    let d = Colibrid::start(&[]);
    let out = d.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"exec\"\nruntimes = [\"pi\"]\ncommand = [\"/bin/sh\", \"-c\", \"printf '%s' \\\"$COLIBRI_RUNTIME\\\" > \\\"$0/$COLIBRI_NAME.rt\\\" && cat > \\\"$0/$COLIBRI_NAME.tmp\\\" && mv \\\"$0/$COLIBRI_NAME.tmp\\\" \\\"$0/$COLIBRI_NAME.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let cursor = d.dir.path().join("cursor");
    let _notify = Notify::start(&d, &config, &cursor);
    let mut w = d.client();
    w.request(&json!({"cmd":"watch"}));
    let a = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"late","runtime":"pi"}),
    );
    let events = read_until(&mut w, attached(&a));
    let ev = events.last().expect("the attached event");
    assert_eq!(ev["agent"], json!("sh"), "{ev}");
    assert_eq!(ev["runtime"], json!("pi"), "{ev}");
    block(&d, &a);
    let got: Value = wait_for(Duration::from_secs(30), "the command's output", || {
        std::fs::read(out.join("late.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    });
    assert_eq!(got["pane"], json!(a), "{got}");
    assert_eq!(got["runtime"], json!("pi"), "{got}");
    let env = std::fs::read_to_string(out.join("late.rt")).expect("the runtime file");
    assert_eq!(env, "pi");
}

/// A pane spawned without a runtime whose output shows Pi's: the daemon
/// tells the detected runtime (a `runtime` event), so notify's `runtimes`
/// filter matches it and the payload says `pi`.
#[test]
fn a_runtime_detected_from_the_output_reaches_notify() {
    let d = Colibrid::start(&[]);
    let out = d.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"exec\"\nruntimes = [\"pi\"]\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_NAME.tmp\\\" && mv \\\"$0/$COLIBRI_NAME.tmp\\\" \\\"$0/$COLIBRI_NAME.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let cursor = d.dir.path().join("cursor");
    let _notify = Notify::start(&d, &config, &cursor);
    let mut w = d.client();
    w.request(&json!({"cmd":"watch"}));
    let a = d.spawn(&["/bin/sh", "-c", "sleep 60"], json!({"name":"found"}));
    let events = read_until(&mut w, attached(&a));
    assert!(events.last().is_some_and(|e| e.get("runtime").is_none()));
    d.ok(json!({"cmd":"emit","agent_id": a,
        "event":{"type":"session","version":3,"id":"s-1","cwd":"/tmp"}}));
    let told = read_until(&mut w, |e| e["event"] == json!("runtime"));
    let ev = told.last().expect("the runtime event");
    assert_eq!(
        (&ev["pane"], &ev["runtime"]),
        (&json!(a), &json!("pi")),
        "{ev}"
    );
    block(&d, &a);
    let got: Value = wait_for(Duration::from_secs(30), "the command's output", || {
        std::fs::read(out.join("found.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    });
    assert_eq!(got["pane"], json!(a), "{got}");
    assert_eq!(got["runtime"], json!("pi"), "{got}");
}

#[test]
fn colibrid_supervises_colibri_notify_when_sinks_are_configured() {
    let conf_dir = tempfile::tempdir().expect("tempdir");
    let out = conf_dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = conf_dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[restart]\nbackoff = [\"200ms\"]\n[[notify]]\nkind = \"exec\"\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_NAME.tmp\\\" && mv \\\"$0/$COLIBRI_NAME.tmp\\\" \\\"$0/$COLIBRI_NAME.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let d = Colibrid::start(&["--config", config.to_str().expect("utf-8 path")]);
    let satellite = |d: &Colibrid| -> Option<Value> {
        let snap = d.ok(json!({"cmd":"snapshot","schema":"v2"}));
        snap["panes"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == json!("colibri-notify"))
            .cloned()
    };
    let first = wait_for(Duration::from_secs(20), "the notify pane", || satellite(&d));
    let cursor = d.state.join("notify.cursor");
    wait_for(Duration::from_secs(20), "notify to watch", || {
        cursor.exists().then_some(())
    });
    let pid = wait_for(Duration::from_secs(20), "its pid", || {
        d.pane(first["id"].as_str()?)["pid"].as_i64()
    });
    // A failure of the satellite: colibrid runs it again.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    wait_for(Duration::from_secs(30), "notify restarted", || {
        let p = d.pane(first["id"].as_str()?);
        (p["pid"].as_i64().is_some_and(|n| n != pid) && p["state"] != json!("exited")).then_some(())
    });
    let a = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"gamma","runtime":"pi"}),
    );
    block(&d, &a);
    let ev: Value = wait_for(Duration::from_secs(30), "the command's output", || {
        std::fs::read(out.join("gamma.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    });
    assert_eq!(ev["pane"], json!(a), "{ev}");
}

#[test]
fn a_long_replay_arrives_whole_and_in_order_across_many_slices() {
    let d = Colibrid::start(&[]);
    let a = d.spawn(&["/bin/sh", "-c", "sleep 60"], json!({"name":"busy"}));
    let start = d.ok(json!({"cmd":"status"}));
    let cursor = d.client().request(&json!({"cmd":"watch"}))["data"]["seq"]
        .as_u64()
        .expect("seq");
    let mut c = d.client();
    // About 300 KB of events: more than two replay slices.
    for _ in 0..1600 {
        assert_eq!(
            c.request(&json!({"cmd":"pause-agent","agent_id": a}))["ok"],
            json!(true)
        );
        assert_eq!(
            c.request(&json!({"cmd":"resume-agent","agent_id": a}))["ok"],
            json!(true)
        );
    }
    let last = d.client().request(&json!({"cmd":"watch"}))["data"]["seq"]
        .as_u64()
        .expect("seq");
    assert!(last >= cursor + 3200, "{start}");
    let mut w = d.client();
    assert_eq!(
        w.request(&json!({"cmd":"watch","since": cursor}))["ok"],
        json!(true)
    );
    let mut expect = cursor + 1;
    while expect <= last {
        let ev = w.read_line().expect("a replayed event");
        assert_eq!(ev["seq"], json!(expect), "{ev}");
        expect += 1;
    }
}

/// A guard verdict reaches a sink that lists `guard` (a documented filter),
/// with words a person reads: what the agent tried, which rule, how to
/// resume. Before, only an undocumented `verdict` entry let it through,
/// and ntfy's text was "NAME verdict".
#[test]
fn a_guard_pause_reaches_a_sink_that_lists_guard_in_words() {
    let d = Colibrid::start(&[]);
    let out = d.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"exec\"\nstates = [\"guard\"]\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_SEQ.tmp\\\" && mv \\\"$0/$COLIBRI_SEQ.tmp\\\" \\\"$0/$COLIBRI_SEQ.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let cursor = d.dir.path().join("cursor");
    let _notify = Notify::start(&d, &config, &cursor);
    let a = d.spawn(
        &["/bin/sh", "-c", "sleep 60"],
        json!({"name":"wrecker", "runtime":"pi"}),
    );
    d.ok(json!({"cmd":"emit","agent_id": a, "event":{"type":"agent_start"}}));
    d.ok(
        json!({"cmd":"emit","agent_id": a, "event":{"type":"tool_execution_start",
        "toolCallId":"t","toolName":"bash","args":{"command":"rm -rf /"}}}),
    );
    d.wait_pane(&a, "the guard to pause the agent", |p| {
        p["paused"] == json!(true)
    });
    let got: Value = wait_for(Duration::from_secs(30), "the sink's delivery", || {
        std::fs::read_dir(&out)
            .ok()?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).ok()?).ok())
            .find(|v| v["verdict"]["action"] == json!("pause"))
    });
    assert_eq!(got["event"], json!("verdict"), "{got}");
    assert_eq!(got["verdict"]["policy"], json!("guard"), "{got}");
    let title = got["notice"]["title"].as_str().unwrap_or_default();
    let body = got["notice"]["body"].as_str().unwrap_or_default();
    assert!(
        title.starts_with("wrecker paused by the guard ("),
        "{title}"
    );
    assert!(body.contains("rm -rf /"), "what it tried: {body}");
    assert!(
        body.contains("colibri resume wrecker"),
        "how to resume: {body}"
    );
}

/// A webhook whose server takes the connection and never answers holds
/// only itself: the exec sink listed after it gets every event at once,
/// and the cursor stays before what the webhook still owes, so a restart
/// of notify sends it again. Before, every sink waited behind the
/// webhook's 10 s timeout and retries, up to 15 minutes per event.
#[test]
fn a_webhook_that_never_answers_holds_no_other_sink() {
    let d = Colibrid::start(&[]);
    // Connections complete in the kernel's backlog; nobody accepts them,
    // so every request waits for an answer that never comes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let out = d.dir.path().join("out");
    std::fs::create_dir(&out).expect("out dir");
    let config = d.dir.path().join("colibri.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{port}/hook\"\n\n\
             [[notify]]\nkind = \"exec\"\ncommand = [\"/bin/sh\", \"-c\", \"cat > \\\"$0/$COLIBRI_PANE.tmp\\\" && mv \\\"$0/$COLIBRI_PANE.tmp\\\" \\\"$0/$COLIBRI_PANE.json\\\"\", \"{}\"]\n",
            out.display()
        ),
    )
    .expect("config");
    let panes: Vec<String> = (0..3)
        .map(|i| {
            d.spawn(
                &["/bin/sh", "-c", "sleep 60"],
                json!({"name": format!("p{i}"), "runtime":"pi"}),
            )
        })
        .collect();
    let cursor = d.dir.path().join("cursor");
    let _notify = Notify::start(&d, &config, &cursor);
    for pane in &panes {
        block(&d, pane);
    }
    // Well inside the webhook's first 10 s timeout.
    let events: Vec<Value> = panes
        .iter()
        .map(|pane| {
            wait_for(Duration::from_secs(8), "the exec sink's event", || {
                std::fs::read(out.join(format!("{pane}.json")))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
            })
        })
        .collect();
    let first = events
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .min()
        .expect("seqs");
    let saved: u64 = std::fs::read_to_string(&cursor)
        .expect("cursor")
        .trim()
        .parse()
        .expect("a number");
    assert!(
        saved < first,
        "the cursor ({saved}) passed the event the webhook still owes ({first})"
    );
    drop(silent);
}

/// Agents' activity posts take at most their share of the watch journal
/// (a quarter): 40 panes posting their bursts of long texts are refused
/// with `busy` once it is spent, and a watcher resuming from the first
/// event gets every event since, no gap. Before, such posts rolled the
/// 8 MiB journal in 0.4 s and the resuming watcher got a gap.
#[test]
fn activity_floods_leave_the_journal_to_the_state_changes() {
    let d = Colibrid::start(&[]);
    let panes: Vec<String> = (0..40)
        .map(|_| d.spawn(&["/bin/sh", "-c", "exec sleep 60"], json!({})))
        .collect();
    let text = "A".repeat(4000);
    let mut c = d.client();
    let (mut taken, mut refused) = (0, 0);
    for pane in &panes {
        for _ in 0..30 {
            let r = c.request(&json!({"cmd":"activity","pane": pane,
                "event_type":"error","message": text,"detail": text}));
            if r["ok"] == json!(true) {
                taken += 1;
            } else {
                assert_eq!(r["code"], json!("busy"), "{r}");
                refused += 1;
            }
        }
    }
    assert!(
        taken > 100 && refused > 0,
        "{taken} taken, {refused} refused"
    );
    let mut late = d.client();
    assert_eq!(
        late.request(&json!({"cmd":"watch","since": 1}))["ok"],
        json!(true)
    );
    let first = late.read_line().expect("an event");
    assert_ne!(first["event"], json!("gap"), "{first}");
    assert_eq!(first["seq"], json!(2), "{first}");
}
