//! `colibri attach` and `colibri top` in a real terminal: tmux runs the
//! CLI, `send-keys` types and `capture-pane` reads the screen, against
//! the real daemon and real agents on PTYs.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::support::{children_of, pid_alive, wait_for, Client, Colibrid, COLIBRI};

/// A tmux server of its own (a private socket), killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// `None` (with a loud message) only when tmux is not installed.
    fn start(d: &Colibrid, cmd: &str) -> Option<Tmux> {
        let found = Command::new("tmux").arg("-V").output().is_ok();
        if !crate::support::tool_present(found, "tmux", "apt-get install tmux") {
            return None;
        }
        let t = Tmux {
            socket: d.path("tmux.sock"),
        };
        let ok = t
            .tmux(&["new-session", "-d", "-x", "80", "-y", "24", "-s", "v", cmd])
            .status
            .success();
        assert!(ok, "tmux new-session failed");
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "v"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "v"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success(), "send-keys {keys:?}");
    }

    fn wait_screen(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        wait_for(Duration::from_secs(30), what, || {
            let s = self.screen();
            cond(&s).then_some(s)
        })
    }

    fn alive(&self) -> bool {
        self.tmux(&["has-session", "-t", "v"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn cli(d: &Colibrid, args: &str) -> String {
    format!("{COLIBRI} --socket {} {args}", d.socket.display())
}

/// An agent that reads lines and answers each. It sets nothing on its
/// terminal: Enter (`\r` from attach) must end a line as on a fresh one.
fn echo_agent(d: &Colibrid) -> String {
    let script = d.script(
        "echo-agent",
        "echo booted-and-ready\nwhile read l; do echo \"got:$l\"; done",
    );
    d.spawn(&[&script], json!({"name": "echoer"}))
}

#[test]
fn attach_shows_output_forwards_input_and_detach_leaves_the_agent_running() {
    let d = Colibrid::start(&[]);
    let id = echo_agent(&d);
    let Some(t) = Tmux::start(&d, &cli(&d, "attach echoer")) else {
        return;
    };
    t.wait_screen("the agent's earlier output", |s| {
        s.contains("booted-and-ready")
    });
    t.keys(&["hello-there", "Enter"]);
    t.wait_screen("the agent's answer to typed input", |s| {
        s.contains("got:hello-there")
    });
    t.keys(&["C-]"]);
    wait_for(Duration::from_secs(30), "attach to exit on Ctrl-]", || {
        (!t.alive()).then_some(())
    });
    let pane = d.pane(&id);
    assert!(pane["exit"].is_null(), "the agent ended: {pane}");
    let pid = pane["pid"].as_i64().expect("pid") as i32;
    assert!(pid_alive(pid), "the agent's process is gone after a detach");
}

/// attach is a terminal for a program that reads lines, as tmux is: what
/// is typed shows (the agent's terminal does not echo), Backspace edits
/// the line, Enter submits it, and the program's `\n`-only output starts
/// each line at the left edge, while its session log keeps the bytes it
/// wrote (no `\r` added). Before, Enter arrived as `\r` and the program
/// never got its line, and its output staircased.
#[test]
fn attach_is_a_terminal_for_a_line_reading_program() {
    let d = Colibrid::start(&[]);
    let script = d.script(
        "asker",
        "printf 'first\\nsecond\\nname? '\nread name\nprintf 'hello %s\\nbye\\n' \"$name\"\nsleep 60",
    );
    let id = d.spawn(&[&script], json!({"name": "asker"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "attach asker")) else {
        return;
    };
    // capture-pane drops trailing blanks.
    t.wait_screen("the question", |s| s.contains("name?"));
    t.keys(&["wrold", "BSpace", "BSpace", "BSpace", "BSpace", "orld"]);
    t.wait_screen("the typing echoed and edited", |s| {
        s.contains("name? world")
    });
    t.keys(&["Enter"]);
    let screen = t.wait_screen("the answer", |s| s.contains("bye"));
    let lines: Vec<&str> = screen.lines().collect();
    for want in ["first", "second", "name? world", "hello world", "bye"] {
        assert!(
            lines.contains(&want),
            "{want:?} is not a line of its own at the left edge:\n{screen}"
        );
    }
    // The log holds what the program wrote, `\n` and all, no `\r`, and
    // nothing typed (only the program's own bytes: no echo came back).
    let log = std::fs::read_dir(d.state.join("sessions"))
        .expect("sessions")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .find(|t| t.contains(&id) && t.contains("hello world"))
        .expect("the session log");
    assert!(log.contains(r#""raw":"name? hello world""#), "{log}");
    assert!(!log.contains("\\r"), "a \\r reached the log: {log}");
}

/// A program that takes its terminal raw (as a TUI does) gets each key as
/// typed, Enter as `\r`, and nothing is echoed for it by attach.
#[test]
fn attach_passes_keys_as_typed_to_a_raw_mode_program() {
    let d = Colibrid::start(&[]);
    let script = d.script(
        "tui",
        "stty raw -echo\necho raw-ready\ndd bs=1 count=3 2>/dev/null | od -An -tx1\nsleep 60",
    );
    d.spawn(&[&script], json!({"name": "tui"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "attach tui")) else {
        return;
    };
    t.wait_screen("the program to go raw", |s| s.contains("raw-ready"));
    t.keys(&["a", "C-c", "Enter"]);
    let screen = t.wait_screen("the bytes it read", |s| s.contains("61 03 0d"));
    assert!(
        !screen.contains("^C"),
        "attach echoed for a raw program:\n{screen}"
    );
}

fn attach_on(d: &Colibrid, id: &str, input: bool) -> (Client, Value) {
    let mut c = Client::connect(&d.socket);
    let r =
        c.request(&json!({"cmd":"attach","agent_id": id, "input": input, "cols": 100, "rows": 40}));
    assert_eq!(r["ok"], json!(true), "attach: {r}");
    (c, r["data"].clone())
}

/// A request on an attached connection: its reply, past the frames.
fn call(c: &mut Client, v: Value) -> Value {
    c.send_raw(format!("{v}\n").as_bytes());
    wait_for(Duration::from_secs(30), "a reply among the frames", || {
        let line = c.read_line()?;
        line.get("ok").is_some().then_some(line)
    })
}

fn decode(s: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.as_str().expect("base64 string"))
        .expect("base64");
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn one_attacher_owns_the_input_and_the_others_read_only() {
    let d = Colibrid::start(&[]);
    let id = echo_agent(&d);
    let (mut owner, first) = attach_on(&d, &id, true);
    assert_eq!(first["input"], json!(true));
    let (mut reader, second) = attach_on(&d, &id, true);
    assert_eq!(second["input"], json!(false), "a second owner: {second}");
    // The backlog first, then live frames, until the agent is ready.
    let mut seen = decode(&second["data"]);
    wait_for(Duration::from_secs(30), "the agent's first line", || {
        if seen.contains("booted-and-ready") {
            return Some(());
        }
        let line = reader.read_line()?;
        if line["attach"] == json!("output") {
            seen.push_str(&decode(&line["data"]));
        }
        None
    });
    let refused = call(&mut reader, json!({"cmd":"attach-input","data":"aGkK"}));
    assert_eq!(refused["code"], json!("forbidden"), "{refused}");
    let data = base64::engine::general_purpose::STANDARD.encode(b"ping\r");
    let r = call(&mut owner, json!({"cmd":"attach-input","data": data}));
    assert_eq!(r["data"]["written"], json!(5), "{r}");
    // The reader sees the answer as output frames.
    wait_for(
        Duration::from_secs(30),
        "the answer on the read-only attacher",
        || {
            let line = reader.read_line()?;
            if line["attach"] == json!("output") {
                seen.push_str(&decode(&line["data"]));
            }
            seen.contains("got:ping").then_some(())
        },
    );
    // The owner leaves: the input is free for the next one who types.
    drop(owner);
    let r = wait_for(Duration::from_secs(30), "the input to be free", || {
        let r = call(&mut reader, json!({"cmd":"attach-input","data":"cG9uZw0="}));
        (r["ok"] == json!(true)).then_some(r)
    });
    assert_eq!(r["data"]["written"], json!(5));
    let r = call(
        &mut reader,
        json!({"cmd":"attach-resize","cols": 120, "rows": 50}),
    );
    assert_eq!(r["ok"], json!(true), "{r}");
}

/// The screen's row for a pane name.
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.contains(name))
}

#[test]
fn top_shows_state_changes_and_a_key_pauses_the_agent() {
    let d = Colibrid::start(&[]);
    let script = d.script("waiter", "read l\nexit 3");
    let id = d.spawn(&[&script], json!({"name": "waiter"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "top")) else {
        return;
    };
    let first = d.pane(&id)["state"].as_str().unwrap_or("").to_string();
    t.wait_screen("top to list the pane", |s| {
        row(s, "waiter").is_some_and(|r| r.contains(&first)) && s.contains("a approve")
    });
    // Up and silent so far: the detail view gives the seed's health word,
    // `starting`.
    t.keys(&["v"]);
    t.wait_screen("the detail view's health word", |s| {
        s.contains("health starting")
    });
    t.keys(&["v"]);
    t.wait_screen("the table again", |s| s.contains("TOOL / APPROVAL"));
    t.keys(&["p"]);
    d.wait_pane(&id, "the pane paused by the p key", |p| {
        p["paused"] == json!(true)
    });
    t.wait_screen("the row to say paused", |s| {
        row(s, "waiter").is_some_and(|r| r.contains("paused"))
    });
    t.keys(&["r"]);
    d.wait_pane(&id, "the pane resumed by the r key", |p| {
        p["paused"] == json!(false)
    });
    // The agent ends: the row follows the watch stream to its final state.
    d.ok(json!({"cmd":"send-input","agent_id": id, "text": "bye"}));
    let last = d.wait_pane(&id, "the agent to exit", |p| !p["exit"].is_null());
    let last = last["state"].as_str().expect("state").to_string();
    assert_ne!(last, first);
    let screen = t.wait_screen("the row to show the final state", |s| {
        row(s, "waiter").is_some_and(|r| r.contains(&last) && !r.contains("paused"))
    });
    assert!(screen.lines().count() <= 24);
}

/// top's `a` and `d` keys answer the selected pane's pending approval, and
/// the agent reads the exact reply its protocol wants.
#[test]
fn top_approve_and_deny_keys_answer_the_agent() {
    let d = Colibrid::start(&[]);
    let got = d.path("asker.got").display().to_string();
    let ask = |id: &str| {
        format!(
            r#"printf '%s\n' '{{"type":"extension_ui_request","id":"{id}","method":"confirm","title":"Go?"}}'
IFS= read -r line
printf '%s\n' "$line" >> {got}
"#
        )
    };
    let body = format!("{}{}exec sleep 60", ask("q1"), ask("q2"));
    let script = d.script("asker", &body);
    let id = d.spawn(&[&script], json!({"runtime": "pi", "name": "asker"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "top")) else {
        return;
    };
    t.wait_screen("top to list the pane", |s| row(s, "asker").is_some());
    d.wait_pane(&id, "the first question", |p| p["approvals"].is_array());
    t.keys(&["a"]);
    let answered = |n: usize| {
        wait_for(
            Duration::from_secs(30),
            "the agent to read the answer",
            || {
                let text = std::fs::read_to_string(&got).ok()?;
                (text.lines().count() >= n).then_some(text)
            },
        )
    };
    assert_eq!(
        answered(1).lines().next(),
        Some(r#"{"type":"extension_ui_response","id":"q1","confirmed":true}"#)
    );
    t.wait_screen("top to say the approve worked", |s| {
        s.contains("approve: ok")
    });
    // The first approval closed when it was answered: an open one is q2.
    d.wait_pane(&id, "the second question", |p| p["approvals"].is_array());
    t.keys(&["d"]);
    assert_eq!(
        answered(2).lines().nth(1),
        Some(r#"{"type":"extension_ui_response","id":"q2","confirmed":false}"#)
    );
}

#[test]
fn top_reconnects_after_a_daemon_restart() {
    let mut d = Colibrid::start(&[]);
    let script = d.script("long", "sleep 300");
    d.spawn(&[&script], json!({"name": "before"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "top")) else {
        return;
    };
    t.wait_screen("top to list the pane", |s| {
        s.contains("before") && s.contains("live")
    });
    d.terminate();
    t.wait_screen("top to notice the daemon is gone", |s| {
        s.contains("reconnecting")
    });
    d.launch();
    let script = d.script("long2", "sleep 300");
    d.spawn(&[&script], json!({"name": "after"}));
    t.wait_screen("top to resume on the new daemon", |s| {
        s.contains("after") && s.contains("live")
    });
}

#[test]
fn an_attacher_that_does_not_read_is_dropped_and_the_agent_goes_on() {
    let d = Colibrid::start(&[]);
    // Endless output, plain text (not JSON): only counted and logged.
    let script = d.script(
        "flood",
        "while :; do echo 0123456789abcdefghijklmnopqrstuvwxyz0123456789; done",
    );
    let id = d.spawn(&[&script], json!({"name": "flood"}));
    let (mut idle, _) = attach_on(&d, &id, false);
    // The agent keeps writing far past what the attacher's queue holds.
    let limit = 1u64 << 20;
    d.wait_pane(&id, "the agent to write well past the attach queue", |p| {
        p["counters"]["bytes"].as_u64().unwrap_or(0) > 8 * limit
    });
    // The attacher finds a last line saying it was dropped, then the end.
    let last = wait_for(Duration::from_secs(60), "the detached frame", || {
        let line = idle.read_line()?;
        (line["attach"] == json!("detached")).then_some(line)
    });
    assert!(
        last["reason"].as_str().unwrap_or("").contains("behind"),
        "{last}"
    );
    assert!(idle.read_line().is_none(), "the connection stays open");
    d.ok(json!({"cmd":"kill-agent","agent_id": id}));
}

#[test]
fn enter_in_top_attaches_and_detaching_comes_back_to_top() {
    let d = Colibrid::start(&[]);
    let id = echo_agent(&d);
    let Some(t) = Tmux::start(&d, &cli(&d, "top")) else {
        return;
    };
    t.wait_screen("top to list the pane", |s| row(s, "echoer").is_some());
    t.keys(&["Enter"]);
    t.wait_screen("the agent's terminal", |s| {
        s.contains("attached to") && s.contains("booted-and-ready")
    });
    t.keys(&["from-top", "Enter"]);
    t.wait_screen("the answer in the attached terminal", |s| {
        s.contains("got:from-top")
    });
    t.keys(&["C-]"]);
    t.wait_screen("top again after the detach", |s| {
        s.contains("a approve") && s.contains("detached") && row(s, "echoer").is_some()
    });
    assert!(d.pane(&id)["exit"].is_null(), "the agent ended");
}

#[test]
fn attach_events_renders_json_lines_readably() {
    let d = Colibrid::start(&[]);
    let script = d.script(
        "talker",
        "echo '{\"type\":\"message_update\",\"text\":\"halfway through\"}'\nsleep 300",
    );
    d.spawn(&[&script], json!({"name": "talker"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "attach --events --read-only talker")) else {
        return;
    };
    let screen = t.wait_screen("the rendered event", |s| {
        s.contains("message_update  halfway through")
    });
    assert!(screen.contains("read only"), "{screen}");
    assert!(!screen.contains("{\"type\""), "raw JSON shown: {screen}");
}

#[test]
fn the_attached_window_size_reaches_the_agent() {
    let d = Colibrid::start(&[]);
    let script = d.script(
        "sizer",
        "trap 'echo size:$(stty size)' WINCH\necho ready\nwhile :; do sleep 0.2; done",
    );
    d.spawn(&[&script], json!({"name": "sizer"}));
    let Some(t) = Tmux::start(&d, &cli(&d, "attach sizer")) else {
        return;
    };
    // Attaching sets the attacher's size (80x24), which signals the agent.
    t.wait_screen("the agent to see the attacher's size", |s| {
        s.contains("size:24 80")
    });
    let resized = t.tmux(&["resize-window", "-t", "v", "-x", "100", "-y", "30"]);
    assert!(resized.status.success(), "tmux resize-window failed");
    t.wait_screen("the agent to see the new size", |s| {
        s.contains("size:30 100")
    });
}

/// A SIGTERM (`timeout`, a closed session's SIGHUP) ends top through its
/// own exit, which puts the terminal back: cooked, off the alternate
/// screen (before, the default action left it raw on the alternate one).
#[test]
fn top_ended_by_a_signal_puts_the_terminal_back() {
    let d = Colibrid::start(&[]);
    let shell = format!(
        "sh -c '{}; echo top-exit=$?; stty -a; sleep 60'",
        cli(&d, "top")
    );
    let Some(t) = Tmux::start(&d, &shell) else {
        return;
    };
    t.wait_screen("top to draw", |s| s.contains("a approve"));
    let sh: i32 =
        String::from_utf8_lossy(&t.tmux(&["display", "-p", "-t", "v", "#{pane_pid}"]).stdout)
            .trim()
            .parse()
            .expect("the pane's pid");
    let top = wait_for(Duration::from_secs(10), "top's process", || {
        children_of(sh).first().copied()
    });
    // SAFETY: a plain kill(2) of our own test child.
    assert_eq!(unsafe { libc::kill(top, libc::SIGTERM) }, 0);
    let screen = t.wait_screen("the shell after top", |s| s.contains("top-exit="));
    assert!(screen.contains("top-exit=143"), "{screen}");
    assert!(
        !screen.contains("-icanon") && !screen.contains("-echo "),
        "left raw: {screen}"
    );
    let alt = t.tmux(&["display", "-p", "-t", "v", "#{alternate_on}"]);
    assert_eq!(
        String::from_utf8_lossy(&alt.stdout).trim(),
        "0",
        "left on the alternate screen"
    );
}

/// Its terminal hung up (the tmux server, an ssh session gone), top ends:
/// SIGHUP keeps its default action. (A handler that only set a flag left
/// top spinning on the dead terminal's reads, at half a CPU, for ever.)
#[test]
fn top_ends_when_its_terminal_hangs_up() {
    let d = Colibrid::start(&[]);
    let Some(t) = Tmux::start(&d, &cli(&d, "top")) else {
        return;
    };
    t.wait_screen("top to draw", |s| s.contains("a approve"));
    let top: i32 =
        String::from_utf8_lossy(&t.tmux(&["display", "-p", "-t", "v", "#{pane_pid}"]).stdout)
            .trim()
            .parse()
            .expect("the pane's pid");
    assert!(pid_alive(top));
    drop(t);
    wait_for(
        Duration::from_secs(10),
        "top to end with its terminal",
        || (!pid_alive(top)).then_some(()),
    );
}
