//! Host operations (`hostop`, `[hostops.NAME]`): a jail's agents run the
//! operator's declared commands on the host and nothing else; each
//! parameter is held to its pattern before anything runs; a run is
//! supervised (timeout, output cap) and never holds the loop.
//!
//! The jail is the jail socket's (`--jail-socket agents1=…`): a real jail
//! on FreeBSD, any peer on Linux, which has none (`Client::connect_jailed`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    jail_socket, pid_alive, scaled, wait_for, Client, Colibrid, SyslogSink, COLIBRI,
};

/// A daemon with the test's ops, a jail socket for `agents1`, and `extra`
/// flags; the ops' marker files go to `dir`.
struct Ops {
    d: Colibrid,
    jail_sock: PathBuf,
    dir: PathBuf,
    _dirs: [tempfile::TempDir; 2],
}

fn ops_config(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"
[hostops.echo]
argv = ["/bin/echo", "hello", "{{name}}"]
params.name = "[a-z]{{1,16}}"
jails = ["agents1"]

[hostops.touch]
argv = ["/usr/bin/touch", "{dir}/marker-{{name}}"]
params.name = "[a-z]{{1,16}}"
jails = ["agents1"]

[hostops.greet]
argv = ["/bin/echo", "greetings"]
roles = ["sysadmin"]

[hostops.fail]
argv = ["/bin/sh", "-c", "echo oops; echo to-stderr >&2; exit 3"]
jails = ["agents1"]

[hostops.env]
argv = ["/usr/bin/env"]
jails = ["agents1"]

[hostops.sleepy]
argv = ["/bin/sh", "-c", "echo $$ > {dir}/sleepy.pid; echo started; exec sleep 60"]
jails = ["agents1"]
timeout = "1s"

[hostops.gate]
argv = ["/bin/sh", "-c", "while [ ! -e {dir}/go ]; do sleep 0.05; done; echo released"]
jails = ["agents1"]
timeout = "1m"

[hostops.flood]
argv = ["/usr/bin/awk", "BEGIN {{{{ for (i = 0; i < 300000; i++) printf \"x\" }}}}"]
jails = ["agents1"]
output_max = 1000

[hostops.elsewhere]
argv = ["/bin/echo", "not yours"]
jails = ["db"]
"#
    )
}

fn start(extra: &[&str]) -> Ops {
    let (jail_dir, jail_sock, jail_arg) = jail_socket();
    let markers = tempfile::tempdir().expect("dir");
    let dir = markers.path().to_path_buf();
    let cfg = dir.join("colibri.toml");
    std::fs::write(&cfg, ops_config(&dir)).expect("config");
    let cfg = cfg.display().to_string();
    let mut args = vec!["--config", &cfg, "--jail-socket", &jail_arg];
    args.extend_from_slice(extra);
    let d = Colibrid::start(&args);
    Ops {
        d,
        jail_sock,
        dir,
        _dirs: [jail_dir, markers],
    }
}

impl Ops {
    fn jailed(&self) -> Client {
        Client::connect_jailed(&self.jail_sock)
    }
}

fn hostop(c: &mut Client, op: &str, params: Value) -> Value {
    c.request(&json!({"cmd":"hostop","op": op,"params": params}))
}

/// An allowed jail runs its op and gets its output and exit status, in
/// the seed's shape; stdout and stderr come together; the op's
/// environment is `PATH` alone; the operator may run every op.
#[test]
fn an_allowed_jail_runs_a_declared_op_and_gets_its_output_and_status() {
    let o = start(&[]);
    let mut c = o.jailed();
    let r = hostop(&mut c, "echo", json!({"name":"world"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(
        r["data"],
        json!({"ok": true, "output": "hello world\n", "exitCode": 0}),
        "{r}"
    );

    let r = hostop(&mut c, "fail", json!({}));
    assert_eq!(r["ok"], json!(true), "the request was served: {r}");
    assert_eq!(r["data"]["ok"], json!(false), "{r}");
    assert_eq!(r["data"]["exitCode"], json!(3), "{r}");
    let out = r["data"]["output"].as_str().unwrap_or_default();
    assert!(out.contains("oops\n") && out.contains("to-stderr\n"), "{r}");

    let r = hostop(&mut c, "env", json!({}));
    let env = r["data"]["output"].as_str().unwrap_or_default();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert_eq!(names, ["PATH"], "nothing of colibrid's environment: {env}");

    // The operator: every declared op, even one no jail of its lists.
    let r = o.d.request(json!({"cmd":"hostop","op":"elsewhere"}));
    assert_eq!(r["data"]["output"], json!("not yours\n"), "{r}");
}

/// A value that does not match its pattern, an unknown or a missing
/// parameter is refused with `bad_param`, and nothing runs: the op would
/// have made a marker file. A matching value makes it.
#[test]
fn a_parameter_must_match_its_pattern_or_nothing_runs() {
    let o = start(&[]);
    let mut c = o.jailed();
    for (params, what) in [
        (json!({"name":"../../etc/x"}), "a path"),
        (json!({"name":"a b"}), "a space"),
        (json!({"name":"abc;touch"}), "a shell word"),
        (json!({"name":"Abc"}), "an upper case letter"),
        (json!({"name":""}), "empty"),
        (json!({"name":"abc\nxyz"}), "two lines"),
        (json!({"name":"abc","other":"x"}), "an unknown parameter"),
        (json!({}), "a missing parameter"),
    ] {
        let r = hostop(&mut c, "touch", params.clone());
        assert_eq!(r["code"], json!("bad_param"), "{what}: {r}");
    }
    let markers = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("marker"))
            .collect()
    };
    assert!(markers(&o.dir).is_empty(), "{:?}", markers(&o.dir));
    assert!(!o.dir.join("../../etc/x").exists());

    let r = hostop(&mut c, "touch", json!({"name":"good"}));
    assert_eq!(r["data"]["exitCode"], json!(0), "{r}");
    assert_eq!(markers(&o.dir), ["marker-good"]);
}

/// A jail an op does not list, a host agent (no jail, no role) and an op
/// nobody declared are refused, and the refusal says which.
#[test]
fn only_the_jails_an_op_lists_may_run_it_and_only_declared_ops_exist() {
    let o = start(&[]);
    let mut c = o.jailed();
    let r = hostop(&mut c, "elsewhere", json!({}));
    assert_eq!(r["code"], json!("forbidden"), "{r}");
    let r = hostop(&mut c, "rm-rf", json!({}));
    assert_eq!(r["code"], json!("unknown_op"), "{r}");

    // A host agent asks through the CLI, as its own tree: it is that
    // agent (not the operator), in no jail, with no role.
    let out = o.d.path("agent-out");
    let script = format!(
        "{COLIBRI} --socket {} hostop echo name=abc > {out} 2>&1; echo rc=$? >> {out}; touch {out}.done; exec sleep 60",
        o.d.socket.display(),
        out = out.display()
    );
    o.d.spawn(&["/bin/sh", "-c", &script], json!({"name":"host-agent"}));
    let done = PathBuf::from(format!("{}.done", out.display()));
    wait_for(
        scaled(Duration::from_secs(30)),
        "the agent's hostop",
        || done.exists().then_some(()),
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        text.contains("not allowed") && !text.contains("rc=0"),
        "{text}"
    );
    assert!(!text.contains("hello"), "{text}");
}

/// A host agent whose role an op lists runs it; one of another role does
/// not.
#[test]
fn an_agent_of_a_role_an_op_lists_may_run_it_and_another_role_may_not() {
    let o = start(&[]);
    let run_as = |role: &str| -> String {
        let out = o.d.path(&format!("out-{role}"));
        let script = format!(
            "{COLIBRI} --socket {} hostop greet > {out} 2>&1; echo rc=$? >> {out}; touch {out}.done; exec sleep 60",
            o.d.socket.display(),
            out = out.display()
        );
        o.d.spawn(
            &["/bin/sh", "-c", &script],
            json!({"name": role, "role": role}),
        );
        let done = PathBuf::from(format!("{}.done", out.display()));
        wait_for(
            scaled(Duration::from_secs(30)),
            "the agent's hostop",
            || done.exists().then_some(()),
        );
        std::fs::read_to_string(&out).unwrap_or_default()
    };
    let text = run_as("sysadmin");
    assert!(
        text.contains("greetings") && text.contains("rc=0"),
        "{text}"
    );
    let text = run_as("db-admin");
    assert!(
        text.contains("not allowed") && !text.contains("greetings"),
        "{text}"
    );
}

/// An op that runs past its timeout is killed with its process group and
/// reported as `timeout`, on the reply, the watch stream and syslog.
#[test]
fn an_op_past_its_timeout_is_killed_and_reported() {
    let dir = tempfile::tempdir().expect("dir");
    let sink = SyslogSink::bind(dir.path());
    let arg = format!("--syslog-socket={}", sink.path.display());
    let o = start(&[&arg]);
    let mut w = o.d.client();
    w.request(&json!({"cmd":"watch"}));
    let mut c = o.jailed();
    let t0 = Instant::now();
    let r = hostop(&mut c, "sleepy", json!({}));
    let took = t0.elapsed();
    assert_eq!(r["code"], json!("timeout"), "{r}");
    assert!(took >= Duration::from_millis(900), "killed early: {took:?}");
    assert!(took < scaled(Duration::from_secs(15)), "{took:?}");
    let pid: i32 = std::fs::read_to_string(o.dir.join("sleepy.pid"))
        .expect("the op wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(!pid_alive(pid), "the op's sleep {pid} still runs");

    let ev = wait_for(scaled(Duration::from_secs(10)), "the hostop event", || {
        let ev = w.read_line()?;
        (ev["event"] == json!("hostop")).then_some(ev)
    });
    assert_eq!(ev["op"], json!("sleepy"), "{ev}");
    assert_eq!(ev["by"], json!("jail:agents1"), "{ev}");
    assert_eq!(ev["outcome"], json!("timeout"), "{ev}");
    assert_eq!(ev["signal"], json!(9), "{ev}");
    let mut seen = Vec::new();
    let m = sink.wait_for(" hostop ", &mut seen);
    assert!(m.contains("sleepy") && m.contains("timeout"), "{m}");
}

/// Output past `output_max` is read and dropped: the reply holds the
/// first `output_max` bytes and says it was cut, and the op (which would
/// block on a full pipe otherwise) ends normally.
#[test]
fn output_past_the_cap_is_dropped_and_the_op_still_ends() {
    let o = start(&[]);
    let mut c = o.jailed();
    let r = hostop(&mut c, "flood", json!({}));
    assert_eq!(r["data"]["exitCode"], json!(0), "{r}");
    assert_eq!(r["data"]["truncated"], json!(true), "{r}");
    assert_eq!(r["data"]["output"], json!("x".repeat(1000)));
}

/// While an op runs the loop serves everyone (the operator's `status`),
/// the same jail is `busy` until its run ends, and the run's reply comes
/// when its process ends.
#[test]
fn the_loop_serves_others_while_an_op_runs_and_one_run_per_caller() {
    let o = start(&[]);
    let mut a = o.jailed();
    a.send_raw(b"{\"cmd\":\"hostop\",\"op\":\"gate\",\"id\":7}\n");
    // The run has started once the jail is busy.
    let mut b = o.jailed();
    wait_for(
        scaled(Duration::from_secs(10)),
        "the gate op running",
        || {
            let r = hostop(&mut b, "echo", json!({"name":"second"}));
            (r["code"] == json!("busy")).then_some(())
        },
    );
    let t0 = Instant::now();
    let st = o.d.ok(json!({"cmd":"status"}));
    assert!(st["agents"].is_u64(), "{st}");
    assert!(
        t0.elapsed() < scaled(Duration::from_secs(2)),
        "status took {:?} while an op ran",
        t0.elapsed()
    );
    std::fs::write(o.dir.join("go"), "").expect("release the op");
    let r = a.read_line().expect("the op's reply");
    assert_eq!(r["id"], json!(7), "{r}");
    assert_eq!(r["data"]["output"], json!("released\n"), "{r}");
    let r = hostop(&mut b, "echo", json!({"name":"second"}));
    assert_eq!(r["data"]["output"], json!("hello second\n"), "{r}");
}

/// `colibri hostop NAME key=value` prints the op's output and exits with
/// its status.
#[test]
fn the_cli_prints_the_output_and_exits_with_the_ops_status() {
    let o = start(&[]);
    let run = |args: &[&str]| {
        Command::new(COLIBRI)
            .arg("--socket")
            .arg(&o.d.socket)
            .arg("hostop")
            .args(args)
            .output()
            .expect("run colibri")
    };
    let ok = run(&["echo", "name=cli"]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "hello cli\n");
    let failed = run(&["fail"]);
    assert_eq!(failed.status.code(), Some(3), "{failed:?}");
    assert!(String::from_utf8_lossy(&failed.stdout).contains("oops"));
    let bad = run(&["echo", "name=NO"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("does not match"),
        "{bad:?}"
    );
}

/// A reload takes a changed `[hostops]` over; a bad one is refused and
/// the ops in force stay.
#[test]
fn a_reload_changes_the_ops_and_a_bad_one_keeps_them() {
    let mut o = start(&[]);
    let cfg = o.dir.join("colibri.toml");
    let with_new = format!(
        "{}\n[hostops.late]\nargv = [\"/bin/echo\", \"late\"]\njails = [\"agents1\"]\n",
        ops_config(&o.dir)
    );
    std::fs::write(&cfg, &with_new).expect("config");
    o.d.hup_and_wait("reloads", scaled(Duration::from_secs(10)));
    let mut c = o.jailed();
    let r = hostop(&mut c, "late", json!({}));
    assert_eq!(r["data"]["output"], json!("late\n"), "{r}");

    std::fs::write(
        &cfg,
        format!("{with_new}\n[hostops.broken]\nargv = [\"relative\"]\n"),
    )
    .expect("config");
    o.d.hup_and_wait("reload_errors", scaled(Duration::from_secs(10)));
    let r = hostop(&mut c, "late", json!({}));
    assert_eq!(r["data"]["output"], json!("late\n"), "{r}");
    let r = hostop(&mut c, "broken", json!({}));
    assert_eq!(r["code"], json!("unknown_op"), "{r}");
    o.d.terminate();
}
