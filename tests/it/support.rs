//! Test support: a real `colibrid` on a temporary socket, and a client.
//!
//! `Colibrid` starts the daemon binary with its socket and state dir in a
//! fresh temp dir and stops it on drop (SIGTERM, then SIGKILL if it hangs).
//! Tests wait on conditions with deadlines (`wait_for`), never on fixed
//! sleeps.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

pub const COLIBRID: &str = env!("CARGO_BIN_EXE_colibrid");

/// How much slower than a native machine this one is: every wait in these
/// tests is multiplied by `COLIBRI_TEST_SLOW` (a number, default 1), which
/// the FreeBSD lane sets for its emulated CPUs. Waits only: a bound a test
/// asserts (a reply's size, a count) never scales.
pub fn slow_factor() -> f64 {
    static FACTOR: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *FACTOR.get_or_init(|| {
        std::env::var("COLIBRI_TEST_SLOW")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f >= 1.0)
            .unwrap_or(1.0)
    })
}

/// `d` on this machine: `d` times [`slow_factor`].
pub fn scaled(d: Duration) -> Duration {
    d.mul_f64(slow_factor())
}
pub const COLIBRI: &str = env!("CARGO_BIN_EXE_colibri");

pub struct Colibrid {
    pub dir: TempDir,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub child: Option<Child>,
    pub args: Vec<String>,
    /// Extra environment for every launch (e.g. a small journal bound).
    pub env: Vec<(String, String)>,
    /// colibrid's stderr goes to a pipe nobody reads (kept open in
    /// `child`), not to the test's.
    pub stderr_unread: bool,
}

impl Colibrid {
    /// Starts colibrid with test-friendly defaults plus `extra` flags.
    pub fn start(extra: &[&str]) -> Colibrid {
        Colibrid::start_with_env(extra, &[])
    }

    /// Like `start`, with extra environment variables for colibrid.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Colibrid {
        Colibrid::start_as(extra, env, false)
    }

    /// Like `start_with_env`, with colibrid's stderr a pipe nobody reads.
    pub fn start_with_unread_stderr(extra: &[&str], env: &[(&str, &str)]) -> Colibrid {
        Colibrid::start_as(extra, env, true)
    }

    /// Like `start`, with the state directory at `state` (a file system
    /// of the test's own).
    pub fn start_with_state(state: &Path, extra: &[&str]) -> Colibrid {
        Colibrid::start_in(Some(state), extra, &[], false)
    }

    fn start_as(extra: &[&str], env: &[(&str, &str)], stderr_unread: bool) -> Colibrid {
        Colibrid::start_in(None, extra, env, stderr_unread)
    }

    fn start_in(
        state: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
        stderr_unread: bool,
    ) -> Colibrid {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("colibri.sock");
        let state = state.map_or_else(|| dir.path().join("state"), Path::to_path_buf);
        let mut d = Colibrid {
            dir,
            socket,
            state,
            child: None,
            args: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stderr_unread,
        };
        d.launch();
        d
    }

    /// Starts another daemon on the same dirs (after a crash).
    pub fn launch(&mut self) {
        let mut cmd = Command::new(COLIBRID);
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state);
        if !self.args.iter().any(|a| a.starts_with("--syslog-socket")) {
            cmd.arg("--no-syslog");
        }
        cmd.args(&self.args)
            .env_remove("COLIBRI_SOCKET")
            .env_remove("COLIBRI_CONFIG")
            .env("COLIBRI_LOG", "warn")
            // Rescue files of a failed final flush land in the test's own
            // dir, not in the machine's /var/tmp.
            .env("TMPDIR", self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if self.stderr_unread {
                Stdio::piped()
            } else {
                Stdio::inherit()
            });
        let child = cmd.spawn().expect("start colibrid");
        self.child = Some(child);
        let deadline = Instant::now() + scaled(Duration::from_secs(20));
        loop {
            if let Ok(mut c) = Client::try_connect(&self.socket) {
                if c.try_request(&json!({"cmd":"status"})).is_ok() {
                    return;
                }
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("colibrid exited during start: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "colibrid did not answer within {:?}",
                scaled(Duration::from_secs(20))
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).expect("running")
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Restarts colibrid with a config file `name` in its temp dir holding
    /// `toml`; returns the file's path, to rewrite before a reload.
    pub fn relaunch_with_config(&mut self, name: &str, toml: &str) -> PathBuf {
        let cfg = self.path(name);
        std::fs::write(&cfg, toml).expect("cfg");
        self.terminate();
        self.args = vec!["--config".into(), cfg.display().to_string()];
        self.launch();
        cfg
    }

    /// Sends SIGHUP and waits up to `limit` until `status` counts the
    /// outcome in `counter` (`reloads` or `reload_errors`); returns that
    /// status.
    pub fn hup_and_wait(&self, counter: &str, limit: Duration) -> Value {
        let before = self.ok(json!({"cmd":"status"}))[counter]
            .as_u64()
            .expect("status counts reloads");
        let pid = nix::unistd::Pid::from_raw(self.pid());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("hup");
        wait_for(limit, counter, || {
            let st = self.ok(json!({"cmd":"status"}));
            (st[counter].as_u64() == Some(before + 1)).then_some(st)
        })
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + scaled(Duration::from_secs(20));
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "colibrid did not stop within {:?} of SIGTERM",
                    scaled(Duration::from_secs(20))
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL, as a crash would.
    pub fn crash(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn request(&self, v: Value) -> Value {
        self.client().request(&v)
    }

    /// `data` of an ok reply; panics with the error otherwise.
    pub fn ok(&self, v: Value) -> Value {
        let r = self.request(v.clone());
        assert_eq!(r["ok"], json!(true), "request {v} failed: {r}");
        r["data"].clone()
    }

    pub fn snapshot(&self) -> Value {
        self.ok(json!({"cmd":"snapshot","schema":"v2"}))
    }

    pub fn pane(&self, id: &str) -> Value {
        let snap = self.snapshot();
        snap["panes"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["id"] == json!(id)).cloned())
            .unwrap_or(Value::Null)
    }

    /// Spawns `argv` (plus spawn-agent fields in `extra`); returns the agent id.
    pub fn spawn(&self, argv: &[&str], extra: Value) -> String {
        let mut req = json!({"cmd":"spawn-agent","argv": argv});
        if let (Some(m), Some(e)) = (req.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        let data = self.ok(req);
        data["agent_id"].as_str().expect("agent_id").to_string()
    }

    /// The pane named `name` in the v2 snapshot (`Null` when absent).
    pub fn named(&self, name: &str) -> Value {
        self.snapshot()["panes"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == json!(name)).cloned())
            .unwrap_or(Value::Null)
    }

    /// Polls the v2 snapshot until `cond` holds for the pane named `name`.
    pub fn wait_named(&self, name: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        wait_for(Duration::from_secs(30), what, || {
            let p = self.named(name);
            cond(&p).then_some(p)
        })
    }

    /// Polls the v2 snapshot until `cond` holds for the pane, or panics.
    pub fn wait_pane(&self, id: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        wait_for(Duration::from_secs(30), what, || {
            let p = self.pane(id);
            if cond(&p) {
                Some(p)
            } else {
                None
            }
        })
    }

    pub fn wait_state(&self, id: &str, state: &str) -> Value {
        self.wait_pane(id, &format!("pane {id} to be {state}"), |p| {
            p["state"] == json!(state)
        })
    }

    /// Writes an executable shell script into the temp dir.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    }
}

impl Drop for Colibrid {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + scaled(Duration::from_secs(10));
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The command that starts the rest of a shell command line in a new
/// session: util-linux's `setsid` where there is one, else FreeBSD's
/// `daemon` (which forks first: the detached program's pid is the one it
/// writes itself, never `$!`).
pub fn setsid() -> &'static str {
    static CMD: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    CMD.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path).any(|dir| dir.join("setsid").is_file());
        if found {
            "setsid"
        } else {
            "daemon"
        }
    })
}

/// Whether a test that needs an outside program (`tool`) can run here.
/// Under CI (`CI` set; .ci/run installs them all) a missing one fails the
/// test; elsewhere the test says on the terminal, past the test harness's
/// capture, that it skipped and how to install the tool, so the README's
/// `cargo test` runs everything else on a fresh machine.
pub fn tool_present(found: bool, tool: &str, install: &str) -> bool {
    if found {
        return true;
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    assert!(!ci, "{tool} is missing under CI: {install}");
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {tool} is not installed ({install}); CI installs it ***\n"
    );
    false
}

/// What the kernel says about `pid` right now (`None`: no such process),
/// through the platform probes the daemon uses, on Linux and FreeBSD alike.
pub fn process(pid: i32) -> Option<colibri::platform::ProcessInfo> {
    colibri::platform::process_info(pid)
        .unwrap_or_else(|e| panic!("the kernel did not describe process {pid}: {e}"))
}

/// Resident set size of `pid` in KiB.
pub fn rss_kib(pid: i32) -> u64 {
    process(pid)
        .map(|p| p.rss_bytes / 1024)
        .unwrap_or_else(|| panic!("no process {pid}"))
}

/// The largest resident set `pid` has had so far, in KiB.
pub fn peak_rss_kib(pid: i32) -> u64 {
    process(pid)
        .map(|p| p.peak_rss_bytes / 1024)
        .unwrap_or_else(|| panic!("no process {pid}"))
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: i32) -> usize {
    colibri::platform::process_fds(pid)
        .unwrap_or_else(|e| panic!("cannot count the fds of {pid}: {e}"))
        .len()
}

/// Polls `f` until it returns `Some`, or panics after `limit` (scaled by
/// [`slow_factor`]).
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + scaled(limit);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One NDJSON connection.
pub struct Client {
    pub reader: BufReader<UnixStream>,
    pub writer: UnixStream,
    /// A connection made from inside a jail keeps its connecting process.
    pub jailed: Option<colibri::platform::JailConnection>,
}

impl Client {
    /// Connects as colibri's own clients do ([`colibri::client::connect_stream`]:
    /// a full listen queue is waited out, a missing daemon is not).
    pub fn try_connect(path: &Path) -> std::io::Result<Client> {
        let s = colibri::client::connect_stream_within(path, scaled(colibri::client::BUSY_RETRY))?;
        s.set_read_timeout(Some(scaled(Duration::from_secs(20))))?;
        let w = s.try_clone()?;
        Ok(Client {
            reader: BufReader::new(s),
            writer: w,
            jailed: None,
        })
    }

    pub fn connect(path: &Path) -> Client {
        Client::try_connect(path).expect("connect to colibrid")
    }

    /// Connects to a jail's socket as a process of jail [`JAIL`]: on
    /// FreeBSD from inside the real jail (colibrid checks the peer's jail),
    /// on Linux like any client.
    pub fn connect_jailed(path: &Path) -> Client {
        Client::try_connect_jailed(path).expect("connect to the jail's socket from the jail")
    }

    pub fn try_connect_jailed(path: &Path) -> std::io::Result<Client> {
        if !colibri::platform::JAILS_SUPPORTED {
            return Client::try_connect(path);
        }
        ensure_test_jail();
        let jail = colibri::platform::resolve_jail(JAIL).map_err(std::io::Error::other)?;
        let conn = colibri::platform::connect_in_jail(path, jail.jid)?;
        let s = conn.stream.try_clone()?;
        s.set_read_timeout(Some(scaled(Duration::from_secs(20))))?;
        let w = s.try_clone()?;
        Ok(Client {
            reader: BufReader::new(s),
            writer: w,
            jailed: Some(conn),
        })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write request");
    }

    pub fn read_line(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line:?}")),
            ),
        }
    }

    pub fn try_request(&mut self, v: &Value) -> Result<Value, String> {
        let mut bytes = serde_json::to_vec(v).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        self.writer.write_all(&bytes).map_err(|e| e.to_string())?;
        self.read_line().ok_or_else(|| "no reply".to_string())
    }

    pub fn request(&mut self, v: &Value) -> Value {
        self.try_request(v)
            .unwrap_or_else(|e| panic!("request {v}: {e}"))
    }
}

/// A datagram socket standing in for syslogd.
pub struct SyslogSink {
    pub sock: UnixDatagram,
    pub path: PathBuf,
}

impl SyslogSink {
    pub fn bind(dir: &Path) -> SyslogSink {
        let path = dir.join("syslog.sock");
        let sock = UnixDatagram::bind(&path).expect("bind syslog sink");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        SyslogSink { sock, path }
    }

    /// Collects messages until one contains `needle`, or panics.
    pub fn wait_for(&self, needle: &str, seen: &mut Vec<String>) -> String {
        wait_for(
            Duration::from_secs(20),
            &format!("a syslog message with {needle:?}"),
            || {
                if let Some(m) = seen.iter().find(|m| m.contains(needle)) {
                    return Some(m.clone());
                }
                let mut buf = vec![0u8; 65536];
                if let Ok(n) = self.sock.recv(&mut buf) {
                    seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
                None
            },
        )
    }
}

/// Pids of processes whose parent is `ppid`.
pub fn children_of(ppid: i32) -> Vec<i32> {
    colibri::platform::process_children(ppid)
        .unwrap_or_else(|e| panic!("cannot list the children of {ppid}: {e}"))
}

/// Whether `pid` exists; a zombie is dead but not reaped, and counts as
/// alive so tests catch it.
pub fn pid_alive(pid: i32) -> bool {
    process(pid).is_some()
}

/// The jail every jail-socket test names, and the pane recovered into it.
pub const JAIL: &str = "agents1";
pub const JAILED_PANE: &str = "11111111-2222-4333-8444-555555555555";

/// On FreeBSD, a real jail named [`JAIL`] (made once per test run, rooted
/// at `/` so it sees the tests' paths, and left for the next run); Linux
/// has no jails, and colibrid serves any peer on a jail's socket there.
fn ensure_test_jail() {
    static MADE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if !colibri::platform::JAILS_SUPPORTED {
        return;
    }
    MADE.get_or_init(|| {
        if colibri::platform::resolve_jail(JAIL).is_ok() {
            return;
        }
        let out = Command::new("jail")
            .args(["-c", &format!("name={JAIL}"), "path=/", "persist"])
            .output()
            .expect("jail(8): the jail-socket tests need root and jail(8) on FreeBSD");
        assert!(
            out.status.success() || colibri::platform::resolve_jail(JAIL).is_ok(),
            "jail -c name={JAIL} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// A socket path for jail `agents1` in a directory of its own (kept alive
/// by the returned guard), and the `--jail-socket` value that binds it.
pub fn jail_socket() -> (TempDir, PathBuf, String) {
    ensure_test_jail();
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("colibri.sock");
    let arg = format!("{JAIL}={}", sock.display());
    (dir, sock, arg)
}

/// Jailed agents cannot be started on Linux, but a pane's jail survives in
/// its session log: stops `d`, writes the log of pane `inside` of jail
/// `agents1` as colibrid writes them (its attach record, then `lines`, each
/// a record without its `\n`), and starts `d` again, which recovers it.
pub fn recover_jailed_pane(d: &mut Colibrid, lines: &[&str]) {
    ensure_test_jail();
    assert!(d.terminate().success(), "colibrid stops cleanly");
    let sessions = d.state.join("sessions");
    std::fs::create_dir_all(&sessions).expect("sessions dir");
    let mut log = format!(
        r#"{{"ts":"2026-11-21T10:00:00.000Z","pane":"{JAILED_PANE}","colibri":"attach","agent":"pi","runtime":"pi","name":"inside","cwd":"/work","argv":["pi"],"generation":0,"jail":"{JAIL}"}}"#
    );
    log.push('\n');
    for l in lines {
        log.push_str(l);
        log.push('\n');
    }
    std::fs::write(sessions.join("jailed.jsonl"), log).expect("write log");
    d.launch();
}

/// The record of the pane's first event, as `recover_jailed_pane` takes it.
pub const JAILED_AGENT_START: &str = r#"{"ts":"2026-11-21T10:00:01.000Z","pane":"11111111-2222-4333-8444-555555555555","ev":{"type":"agent_start"}}"#;

/// Whether a session of `list-sessions` holds pane `id` (logs outlive
/// their panes).
pub fn sessions_hold_pane(d: &Colibrid, id: &str) -> bool {
    let sessions = d.ok(json!({"cmd":"list-sessions"}));
    sessions.as_array().is_some_and(|s| {
        s.iter().any(|s| {
            s["panes"]
                .as_array()
                .is_some_and(|p| p.contains(&json!(id)))
        })
    })
}
