//! `colibri demo`: a private daemon supervising six sample agents, live.
//!
//! It starts the `colibrid` next to this executable on a socket, state
//! directory and alert socket inside a fresh temporary directory, spawns
//! one `colibri replay <sample>` per recording in `samples/`, redraws a
//! table from `snapshot v2` every 250 ms, answers the agent that blocks on
//! a dialog, and ends with a summary once every pane is done or failed.
//! Everything it starts it stops: the daemon gets SIGTERM and is waited for
//! (also on error paths, through [`DaemonProcess`]'s `Drop`), and the
//! temporary directory is removed unless `--keep` is given.
//!
//! The decisions (when to answer, when the demo is over, which changes to
//! print) live in the pure [`Tracker`] and [`changes`] so they can be tested
//! with hand-built panes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::render::{self, format_cost, format_exit, format_tokens, Table};
use crate::cli::{CliError, DemoArgs};
use crate::client::{Client, ClientError};
use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;
use crate::protocol::request;
use crate::protocol::{self as wire, PaneV2, SnapshotV2, SpawnData};

/// The sample recordings the demo plays, with the dialect each speaks.
pub const SAMPLES: [(&str, Runtime); 6] = [
    ("pi-success", Runtime::Pi),
    ("pi-dialog", Runtime::Pi),
    ("claude-error", Runtime::Claude),
    ("codex-success", Runtime::Codex),
    ("zot-stall", Runtime::Zot),
    ("gemini-crash", Runtime::Gemini),
];

/// What the demo types into the blocked Pi RPC agent: the answer to its
/// `extension_ui_request` confirm dialog (`pi-dialog.jsonl` asks `dlg-1`).
pub const DIALOG_ANSWER: &str = r#"{"type":"extension_ui_response","id":"dlg-1","confirmed":true}"#;

const REDRAW_EVERY: Duration = Duration::from_millis(250);
const MAX_RUN: Duration = Duration::from_secs(60);
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// After every pane is final, how long to wait for the exits to be reported.
const EXIT_GRACE: Duration = Duration::from_secs(2);
const ALERTS_SHOWN: usize = 8;

/// At speed 1: stall threshold, heartbeat and answer delay (each divided by
/// the speed, so the story plays the same at any speed).
const STALL_AFTER_MS: f64 = 3000.0;
const HEARTBEAT_MS: f64 = 1000.0;
const ANSWER_AFTER_MS: f64 = 2000.0;

/// Decides what the demo does from successive snapshots.
#[derive(Debug)]
pub struct Tracker {
    answer_after: Duration,
    blocked_since: HashMap<String, Instant>,
    answered: Vec<String>,
    all_final_since: Option<Instant>,
}

impl Tracker {
    pub fn new(answer_after: Duration) -> Tracker {
        Tracker {
            answer_after,
            blocked_since: HashMap::new(),
            answered: Vec::new(),
            all_final_since: None,
        }
    }

    /// Notes the panes' states; returns the panes to answer now (each once,
    /// `answer_after` after it was first seen blocked).
    pub fn observe(&mut self, panes: &[PaneV2], now: Instant) -> Vec<String> {
        let mut answer = Vec::new();
        for p in panes {
            if p.state != AgentState::Blocked {
                self.blocked_since.remove(&p.id);
                continue;
            }
            let since = *self.blocked_since.entry(p.id.clone()).or_insert(now);
            if now.duration_since(since) >= self.answer_after && !self.answered.contains(&p.id) {
                self.answered.push(p.id.clone());
                answer.push(p.id.clone());
            }
        }
        let all_final = !panes.is_empty() && panes.iter().all(|p| p.state.is_final());
        self.all_final_since = if all_final {
            Some(self.all_final_since.unwrap_or(now))
        } else {
            None
        };
        answer
    }

    /// Every pane is done or failed, and its exit is known (or has had
    /// [`EXIT_GRACE`] to arrive).
    pub fn finished(&self, panes: &[PaneV2], now: Instant) -> bool {
        match self.all_final_since {
            Some(since) => {
                panes.iter().all(|p| p.exit.is_some()) || now.duration_since(since) >= EXIT_GRACE
            }
            None => false,
        }
    }
}

/// Plain lines describing what changed between two snapshots (used when
/// stdout is not a terminal, instead of redrawing).
pub fn changes(prev: &[PaneV2], cur: &[PaneV2]) -> Vec<String> {
    let before: BTreeMap<&str, &PaneV2> = prev.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut lines = Vec::new();
    for p in cur {
        let who = p
            .name
            .clone()
            .unwrap_or_else(|| render::short_id(&p.id).to_string());
        let old = before.get(p.id.as_str());
        let old_state = old.map(|o| render::state_cell(o));
        let new_state = render::state_cell(p);
        if old_state.as_deref() != Some(new_state.as_str()) {
            let mut line = match old_state {
                Some(o) => format!("{who}: {o} → {new_state}"),
                None => format!("{who}: {new_state}"),
            };
            if p.state == AgentState::Blocked {
                if let Some(r) = &p.blocked_reason {
                    line.push_str(&format!(" ({r})"));
                }
            }
            lines.push(line);
        }
        if let (Some(e), false) = (&p.exit, old.is_some_and(|o| o.exit.is_some())) {
            lines.push(format!("{who}: exited ({})", format_exit(e)));
        }
    }
    lines
}

/// The closing table: what each agent ended as.
pub fn summary(panes: &[PaneV2]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "RUNTIME",
        "STATE",
        "EVENTS",
        "TOKENS in/out",
        "COST",
        "EXIT",
        "NOTE",
    ]);
    for p in panes {
        t.row(vec![
            p.name
                .clone()
                .unwrap_or_else(|| render::short_id(&p.id).to_string()),
            p.runtime
                .map_or_else(|| p.agent.clone(), |r| r.as_str().to_string()),
            render::state_cell(p),
            p.counters.events.to_string(),
            format!(
                "{}/{}",
                format_tokens(p.usage.input_tokens),
                format_tokens(p.usage.output_tokens)
            ),
            format_cost(p.usage.cost_usd),
            p.exit.as_ref().map_or_else(|| "-".into(), format_exit),
            p.last_error.clone().unwrap_or_default(),
        ]);
    }
    t.render()
}

/// The first directory that holds every sample: `$COLIBRI_SAMPLES`, the
/// source tree this binary was built from, or `samples/` beside the binary.
pub fn samples_dir(exe: &Path) -> Result<PathBuf, CliError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("COLIBRI_SAMPLES").filter(|d| !d.is_empty()) {
        candidates.push(dir.into());
    } else {
        candidates.push(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/samples"
        )));
        candidates.push(exe.with_file_name("samples"));
    }
    for dir in &candidates {
        if SAMPLES
            .iter()
            .all(|(stem, _)| dir.join(format!("{stem}.jsonl")).is_file())
        {
            return std::path::absolute(dir)
                .map_err(|e| CliError::io("cannot resolve the samples directory", e));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    Err(CliError::Runtime(format!(
        "no samples directory found (looked in {}; set COLIBRI_SAMPLES)",
        looked.join(", ")
    )))
}

/// The demo's temporary directory, removed on drop unless kept.
struct DemoDir {
    path: PathBuf,
    keep: bool,
}

impl DemoDir {
    fn create(keep: bool) -> Result<DemoDir, CliError> {
        let path = std::env::temp_dir().join(format!("colibri-demo-{}", std::process::id()));
        // A leftover from a crashed run with a recycled pid is ours to reuse.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| CliError::io(format!("cannot create {}", path.display()), e))?;
        Ok(DemoDir { path, keep })
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The private colibrid. Dropping it stops it, so an error anywhere in the
/// demo does not leave a daemon behind.
struct DaemonProcess {
    child: Child,
    log: PathBuf,
}

impl DaemonProcess {
    /// SIGTERM, wait up to [`STOP_TIMEOUT`], then SIGKILL. A CLI may wait
    /// here; only the daemon's loop must never block.
    fn stop(&mut self) -> io::Result<std::process::ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()
    }

    /// The end of the daemon's log, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        if tail.is_empty() {
            String::new()
        } else {
            format!("\n--- last lines of {} ---\n{tail}", self.log.display())
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Set by the signal handler: the operator pressed Ctrl-C, the terminal
/// closed (SIGHUP) or somebody asked the demo to end (SIGTERM).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Which of those signals came (the exit status is 128 + it).
static INTERRUPTED_BY: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    INTERRUPTED_BY.store(sig, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C, a closed terminal and SIGTERM end the live view early; the demo
/// still stops its daemon (in a process group of its own, so the
/// terminal's SIGINT and SIGHUP reach only the demo), its agents with it,
/// and removes its scratch directory. Left at their default, SIGHUP and
/// SIGTERM killed the demo and left all three behind. After a hang-up the
/// summary cannot be printed; the failed write takes the same way out.
fn catch_stop_signals() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGHUP, Signal::SIGTERM] {
        // SAFETY: the handler only stores to atomics, which is
        // async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

fn scaled(ms_at_speed_1: f64, speed: f64, floor_ms: u64) -> Duration {
    Duration::from_millis(((ms_at_speed_1 / speed) as u64).max(floor_ms))
}

fn call(socket: &Path, req: &wire::Command) -> Result<serde_json::Value, ClientError> {
    Client::connect(socket, CALL_TIMEOUT)?.call(req)
}

pub fn run(args: DemoArgs) -> Result<u8, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::io("cannot find the colibri executable", e))?;
    let colibrid = exe.with_file_name("colibrid");
    if !colibrid.is_file() {
        return Err(CliError::Runtime(format!(
            "the demo needs colibrid next to colibri, and {} does not exist (build both: cargo build)",
            colibrid.display()
        )));
    }
    let samples = samples_dir(&exe)?;
    let dir = DemoDir::create(args.keep)?;
    let socket = dir.path.join("colibri.sock");
    let alerts_path = dir.path.join("alerts.sock");
    let state_dir = dir.path.join("state");
    let config = dir.path.join("colibri.toml");
    let log = dir.path.join("colibrid.log");

    // Bound before the daemon starts so no alert is lost.
    let alerts = UnixDatagram::bind(&alerts_path)
        .map_err(|e| CliError::io(format!("cannot bind {}", alerts_path.display()), e))?;
    alerts
        .set_nonblocking(true)
        .map_err(|e| CliError::io("cannot set the alert socket non-blocking", e))?;
    // An empty config keeps the host's /usr/local/etc/colibri.toml out of it.
    std::fs::write(&config, "# colibri demo: defaults and flags only\n")
        .map_err(|e| CliError::io(format!("cannot write {}", config.display()), e))?;
    let log_file = File::create(&log)
        .map_err(|e| CliError::io(format!("cannot create {}", log.display()), e))?;
    let log_err = log_file
        .try_clone()
        .map_err(|e| CliError::io("cannot duplicate the log file", e))?;

    let speed = args.speed;
    let stall_after = scaled(STALL_AFTER_MS, speed, 200);
    let heartbeat = scaled(HEARTBEAT_MS, speed, 100);
    let child = Command::new(&colibrid)
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state_dir)
        .arg("--stall-after")
        .arg(format!("{}ms", stall_after.as_millis()))
        .arg("--heartbeat")
        .arg(format!("{}ms", heartbeat.as_millis()))
        .arg("--syslog-socket")
        .arg(&alerts_path)
        .env_remove("COLIBRI_SOCKET")
        .env_remove("COLIBRI_CONFIG")
        .env_remove("COLIBRI_STATE_DIR")
        .stdin(Stdio::null())
        .process_group(0)
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(|e| CliError::io(format!("cannot start {}", colibrid.display()), e))?;
    let mut daemon = DaemonProcess { child, log };
    catch_stop_signals();

    let stdout = io::stdout();
    let tty = stdout.is_terminal();
    let mut out = stdout.lock();
    writeln!(
        out,
        "colibri demo: private colibrid on {} (stall after {stall_after:?}, speed {speed})",
        socket.display()
    )
    .map_err(CliError::Stdout)?;

    wait_for_daemon(&mut daemon, &socket)?;
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for (stem, runtime) in SAMPLES {
        let file = samples.join(format!("{stem}.jsonl"));
        let req = wire::SpawnArgs {
            argv: Some(vec![
                exe.to_string_lossy().into_owned(),
                "replay".into(),
                file.to_string_lossy().into_owned(),
                "--speed".into(),
                speed.to_string(),
            ]),
            runtime: Some(runtime),
            name: Some(stem.to_string()),
            cwd: Some(dir.path.to_string_lossy().into_owned()),
            ..wire::SpawnArgs::default()
        };
        let data = call(&socket, &wire::Command::SpawnAgent(Box::new(req))).map_err(|e| {
            CliError::Runtime(format!("spawning {stem} failed: {e}{}", daemon.log_tail()))
        })?;
        let spawned: SpawnData = serde_json::from_value(data).map_err(|e| {
            CliError::Client(ClientError::Protocol(format!(
                "unexpected spawn reply: {e}"
            )))
        })?;
        names.insert(spawned.agent_id, stem.to_string());
    }

    let started = Instant::now();
    let mut tracker = Tracker::new(scaled(ANSWER_AFTER_MS, speed, 100));
    let mut alert_lines: Vec<String> = Vec::new();
    let mut actions: Vec<String> = Vec::new();
    let mut prev: Vec<PaneV2> = Vec::new();
    let mut timed_out = false;
    let mut first_frame = true;
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        let now = Instant::now();
        let snap: SnapshotV2 = call(&socket, &request::snapshot("v2"))
            .map_err(|e| CliError::Runtime(format!("snapshot failed: {e}{}", daemon.log_tail())))
            .and_then(|d| {
                serde_json::from_value(d).map_err(|e| {
                    CliError::Client(ClientError::Protocol(format!("unexpected snapshot: {e}")))
                })
            })?;
        let fresh_alerts = drain_alerts(&alerts);
        for id in tracker.observe(&snap.panes, now) {
            let who = names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| render::short_id(&id).to_string());
            call(&socket, &request::send_input(&id, DIALOG_ANSWER, true))?;
            actions.push(format!("answered {who}'s dialog with {DIALOG_ANSWER}"));
            if !tty {
                writeln!(out, "demo: {}", actions[actions.len() - 1]).map_err(CliError::Stdout)?;
            }
        }
        if tty {
            alert_lines.extend(fresh_alerts);
            let mut frame = frame(&snap, &alert_lines, &actions, started.elapsed());
            if std::mem::take(&mut first_frame) {
                // Start from a clean screen; later frames overwrite in place.
                frame.insert_str(0, "\x1b[2J");
            }
            out.write_all(frame.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CliError::Stdout)?;
        } else {
            for line in changes(&prev, &snap.panes) {
                writeln!(out, "{}", render::escape_controls(&line)).map_err(CliError::Stdout)?;
            }
            for a in &fresh_alerts {
                writeln!(out, "alert: {}", render::escape_controls(a)).map_err(CliError::Stdout)?;
            }
            alert_lines.extend(fresh_alerts);
            out.flush().map_err(CliError::Stdout)?;
        }
        if tracker.finished(&snap.panes, now) {
            prev = snap.panes;
            break;
        }
        prev = snap.panes;
        if started.elapsed() >= MAX_RUN {
            timed_out = true;
            break;
        }
        thread::sleep(REDRAW_EVERY);
    }
    // Alerts sent while the last panes finished.
    alert_lines.extend(drain_alerts(&alerts));

    writeln!(
        out,
        "\nSummary after {:.1} s:",
        started.elapsed().as_secs_f64()
    )
    .map_err(CliError::Stdout)?;
    out.write_all(summary(&prev).as_bytes())
        .map_err(CliError::Stdout)?;
    writeln!(
        out,
        "{} alert(s) received on {}",
        alert_lines.len(),
        alerts_path.display()
    )
    .map_err(CliError::Stdout)?;
    let status = daemon
        .stop()
        .map_err(|e| CliError::io("cannot stop colibrid", e))?;
    writeln!(out, "colibrid stopped ({status})").map_err(CliError::Stdout)?;
    if args.keep {
        writeln!(
            out,
            "kept {} (session logs under state/sessions, daemon log colibrid.log)",
            dir.path.display()
        )
        .map_err(CliError::Stdout)?;
    }
    out.flush().map_err(CliError::Stdout)?;
    if INTERRUPTED.load(Ordering::SeqCst) {
        // The shell's convention for "ended by a signal".
        let sig = INTERRUPTED_BY.load(Ordering::SeqCst);
        return Ok(u8::try_from(128 + sig).unwrap_or(130));
    }
    if timed_out {
        return Err(CliError::Runtime(format!(
            "the agents did not all finish within {} s",
            MAX_RUN.as_secs()
        )));
    }
    Ok(0)
}

/// Polls `status` until the daemon answers, failing early if it exits.
fn wait_for_daemon(daemon: &mut DaemonProcess, socket: &Path) -> Result<(), CliError> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            return Err(CliError::Runtime(format!(
                "colibrid exited at startup ({status}){}",
                daemon.log_tail()
            )));
        }
        match call(socket, &request::status()) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(CliError::Runtime(format!(
                    "colibrid did not answer within {STARTUP_TIMEOUT:?}: {e}{}",
                    daemon.log_tail()
                )))
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Every datagram waiting on the alert socket, as text.
fn drain_alerts(sock: &UnixDatagram) -> Vec<String> {
    let mut buf = [0u8; 8192];
    let mut lines = Vec::new();
    while let Ok(n) = sock.recv(&mut buf) {
        lines.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string());
    }
    lines
}

/// One redraw: cursor home, each line cleared to its end, rest of screen
/// cleared (no full-screen clear, so the table does not flicker).
fn frame(snap: &SnapshotV2, alerts: &[String], actions: &[String], elapsed: Duration) -> String {
    let mut text = format!(
        "colibri demo — {:.1} s (Ctrl-C to stop)\n\n",
        elapsed.as_secs_f64()
    );
    text.push_str(&render::snapshot_table(snap));
    if !actions.is_empty() {
        text.push('\n');
        for a in actions {
            text.push_str(&format!("demo: {a}\n"));
        }
    }
    text.push_str(&format!("\nalerts ({}):\n", alerts.len()));
    for a in &alerts[alerts.len().saturating_sub(ALERTS_SHOWN)..] {
        text.push_str(&format!("  {a}\n"));
    }
    let mut framed = String::from("\x1b[H");
    // Our own cursor codes go between the lines; the lines are escaped.
    for line in text.lines() {
        framed.push_str(&render::escape_controls(line));
        framed.push_str("\x1b[K\n");
    }
    framed.push_str("\x1b[J");
    framed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::render::tests::pane;
    use crate::protocol::WireExit;

    #[test]
    fn a_blocked_pane_is_answered_once_after_the_delay() {
        let mut t = Tracker::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let mut p = pane("a", AgentState::Blocked);
        assert!(t.observe(std::slice::from_ref(&p), t0).is_empty());
        assert!(t
            .observe(std::slice::from_ref(&p), t0 + Duration::from_millis(1999))
            .is_empty());
        assert_eq!(
            t.observe(std::slice::from_ref(&p), t0 + Duration::from_secs(2)),
            ["a"]
        );
        assert!(t
            .observe(std::slice::from_ref(&p), t0 + Duration::from_secs(3))
            .is_empty());
        p.state = AgentState::Working;
        assert!(t
            .observe(std::slice::from_ref(&p), t0 + Duration::from_secs(4))
            .is_empty());
    }

    #[test]
    fn finished_needs_every_pane_final_and_exited_or_a_grace() {
        let mut t = Tracker::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let mut a = pane("a", AgentState::Done);
        let b = pane("b", AgentState::Working);
        t.observe(&[a.clone(), b.clone()], t0);
        assert!(!t.finished(&[a.clone(), b], t0));
        let b = pane("b", AgentState::Error);
        t.observe(&[a.clone(), b.clone()], t0);
        assert!(!t.finished(&[a.clone(), b.clone()], t0 + Duration::from_millis(100)));
        assert!(t.finished(&[a.clone(), b.clone()], t0 + EXIT_GRACE));
        a.exit = Some(WireExit {
            code: Some(0),
            signal: None,
        });
        let mut b = b;
        b.exit = Some(WireExit {
            code: Some(2),
            signal: None,
        });
        assert!(t.finished(&[a, b], t0));
        assert!(!Tracker::new(Duration::ZERO).finished(&[], t0));
    }

    #[test]
    fn changes_report_states_flags_and_exits() {
        let mut a0 = pane("a", AgentState::Working);
        a0.name = Some("zot-stall".into());
        let mut a1 = a0.clone();
        a1.stalled = true;
        let mut b1 = pane("bbbbbbbbbbbb", AgentState::Blocked);
        b1.blocked_reason = Some("Apply?".into());
        assert_eq!(
            changes(&[a0.clone()], &[a1.clone(), b1]),
            [
                "zot-stall: working → working stalled",
                "bbbbbbbb: blocked (Apply?)"
            ]
        );
        let mut a2 = a1.clone();
        a2.state = AgentState::Done;
        a2.stalled = false;
        a2.exit = Some(WireExit {
            code: Some(0),
            signal: None,
        });
        assert_eq!(
            changes(&[a1], &[a2.clone()]),
            [
                "zot-stall: working stalled → done",
                "zot-stall: exited (code 0)"
            ]
        );
        assert!(changes(&[a2.clone()], &[a2]).is_empty());
    }

    #[test]
    fn alerts_are_drained_as_text() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("alerts.sock");
        let sock = UnixDatagram::bind(&path).expect("bind");
        sock.set_nonblocking(true).expect("non-blocking");
        assert!(drain_alerts(&sock).is_empty());
        let sender = UnixDatagram::unbound().expect("sender");
        sender
            .send_to(b"<28>colibri: zot-stall stalled\n", &path)
            .expect("send");
        sender
            .send_to(b"<27>colibri: gemini-crash error", &path)
            .expect("send");
        assert_eq!(
            drain_alerts(&sock),
            [
                "<28>colibri: zot-stall stalled",
                "<27>colibri: gemini-crash error"
            ]
        );
    }

    #[test]
    fn the_shipped_samples_are_found() {
        let dir =
            samples_dir(Path::new("/nonexistent/colibri")).expect("samples in the source tree");
        assert!(dir.join("pi-dialog.jsonl").is_file());
    }
}
