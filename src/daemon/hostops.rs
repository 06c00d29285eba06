//! Host operations (`hostop`) in the daemon: starting a declared op's
//! process, reading its output, its timeout, its end, and the reply the
//! request waits for (the state is `hostops/runs.rs`; the request's
//! checks are `commands/hostops.rs`).
//!
//! A run is an event source of its own, never a wait: its stdout and
//! stderr come on one non-blocking pipe registered with the poll and read
//! a budget at a time (past the op's `output_max`, read and dropped, so a
//! chatty op never blocks on a full pipe nor fills the daemon's memory);
//! its exit is a kernel event like an agent's (pidfd, `EVFILT_PROC`, or
//! the SIGCHLD reaping routed here); its timeout a kernel timer that kills
//! its process group. The reply is sent when the process has ended, on the
//! connection that asked, as `compact-session`'s is.

pub(crate) mod runs;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::Interest;
use serde_json::Value;

use crate::config::HostOp;
use crate::core::pane::ExitStatus;
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::{Daemon, Pending};
use crate::daemon::source::{ConnId, HostRunId, HostopWake, Source};
use crate::daemon::store::HostopRecord;
use crate::platform::{self, ExitWatch, KernelTimer, Pid};
use crate::protocol::{self, CommandError, ErrorCode, HostopReply, Reply, WatchKind};
use runs::{Asker, Drained, HostRun};

/// Output read from one run per turn; more waits for the next pass.
const STEP_BYTES: usize = 64 << 10;
/// Output read at a run's end at most: what its process wrote before it
/// exited is in the pipe (64 KiB on Linux, up to 64 KiB on FreeBSD); a
/// helper it left in another session may write on, and is not waited for.
const FINAL_DRAIN_BYTES: usize = 1 << 20;

/// A checked `hostop` request, ready to run.
pub(crate) struct HostopStart<'a> {
    pub name: &'a str,
    pub op: &'a HostOp,
    pub argv: Vec<String>,
    pub params: BTreeMap<String, String>,
    pub asker: Asker,
    pub conn: ConnId,
    pub rid: Option<Value>,
}

impl Daemon {
    /// Starts a checked request's process and its three sources; the reply
    /// follows its end. An op that cannot start is reported (event, alert)
    /// and refused with `os`.
    pub(crate) fn start_hostop(
        &mut self,
        req: HostopStart<'_>,
        t: Timestamp,
    ) -> Result<(), CommandError> {
        let spec = platform::SpawnSpec {
            argv: req.argv,
            agent_path: Some(self.settings.daemon.agent_path.clone()),
            clear_env: true,
            cwd: req.op.cwd.clone(),
            ..platform::SpawnSpec::default()
        };
        let (pid, out) = match platform::spawn_piped(&spec) {
            Ok(started) => started,
            Err(e) => {
                let why = format!("hostop {} cannot start: {e}", req.name);
                log_warn!("{why} (asked by {})", req.asker.by);
                self.publish_hostop(req.name, &req.asker, req.params, "error", None, 0, 0, t);
                return Err(CommandError::os(why));
            }
        };
        let id = self.hostops.next_id();
        let tokens = [HostopWake::Output, HostopWake::Exit, HostopWake::Timeout]
            .map(|wake| self.tokens.insert(Source::Hostop(id, wake)));
        let mut run = HostRun {
            id,
            op: req.name.to_string(),
            params: req.params,
            asker: req.asker,
            pid,
            out,
            tokens,
            exit_watch: None,
            timer: None,
            deadline: Instant::now() + req.op.timeout,
            timeout: req.op.timeout,
            started: t,
            output: Vec::new(),
            output_max: req.op.output_max,
            output_bytes: 0,
            eof: false,
            status: None,
            timed_out: false,
            reply_to: Some((req.conn, req.rid)),
        };
        if let Err(e) = self.watch_hostop(&mut run) {
            // Not supervised, so not left running: killed, and reaped by
            // the orphan sweep.
            let _ = platform::signal_group(pid, libc::SIGKILL);
            self.release_hostop(run);
            let why = format!("hostop {}: cannot watch its process: {e}", req.name);
            log_warn!("{why}");
            return Err(CommandError::os(why));
        }
        log_info!(
            "hostop {} started for {}: pid {pid}, timeout {}",
            run.op,
            run.asker.by,
            humantime::format_duration(run.timeout)
        );
        self.hostops.insert(run);
        // Output, or an exit no watch will report (a child gone before
        // its watch), may have come before the registration.
        self.push_pending(Pending::Hostop(id));
        Ok(())
    }

    /// Registers a run's pipe, exit watch and timer. Without an exit watch
    /// the SIGCHLD reaping still finds it; without a timer it may not run.
    fn watch_hostop(&mut self, run: &mut HostRun) -> std::io::Result<()> {
        let registry = self.poll.registry();
        let [out_token, exit_token, timer_token] = run.tokens;
        registry.register(
            &mut SourceFd(&run.out.as_raw_fd()),
            out_token,
            Interest::READABLE,
        )?;
        match ExitWatch::register(registry, run.pid, exit_token) {
            Ok(w) => run.exit_watch = Some(w),
            Err(e) => log_warn!(
                "hostop {}: cannot watch pid {} for exit ({e}); relying on SIGCHLD",
                run.op,
                run.pid
            ),
        }
        let mut timer = KernelTimer::new(registry, timer_token)?;
        timer.arm_oneshot(registry, run.timeout)?;
        run.timer = Some(timer);
        Ok(())
    }

    /// One of a run's sources woke the loop.
    pub(crate) fn hostop_woke(&mut self, id: HostRunId, wake: HostopWake, t: Timestamp) {
        match wake {
            HostopWake::Timeout => self.hostop_timed_out(id),
            HostopWake::Output | HostopWake::Exit => self.hostop_step(id, t),
        }
    }

    /// Reads what the run wrote (a budget's worth; the rest next pass),
    /// reaps it if it ended, and finishes it once it has.
    pub(crate) fn hostop_step(&mut self, id: HostRunId, t: Timestamp) {
        let Some(run) = self.hostops.get_mut(id) else {
            return;
        };
        let more = run.read_output(&mut self.read_buf, STEP_BYTES) == Drained::More;
        if run.status.is_none() {
            match platform::reap(run.pid) {
                Ok(status) => run.status = status,
                Err(e) => log_warn!("reaping hostop pid {}: {e}", run.pid),
            }
        }
        let ended = run.status.is_some();
        if ended {
            self.finish_hostop(id, t);
        } else if more {
            self.push_pending(Pending::Hostop(id));
        }
    }

    /// The SIGCHLD reaping found `pid`: if it is a run's, that run ended.
    pub(crate) fn hostop_reaped(&mut self, pid: Pid, status: ExitStatus, t: Timestamp) -> bool {
        let Some(id) = self.hostops.by_pid(pid) else {
            return false;
        };
        if let Some(run) = self.hostops.get_mut(id) {
            run.status = Some(status);
        }
        self.hostop_step(id, t);
        true
    }

    /// The timeout's timer fired: the run's process group is killed, and
    /// its exit ends it.
    fn hostop_timed_out(&mut self, id: HostRunId) {
        let registry = self.poll.registry();
        let Some(run) = self.hostops.get_mut(id) else {
            return;
        };
        let Some(timer) = run.timer.as_mut() else {
            return;
        };
        if timer.acknowledge() == 0 || run.status.is_some() || run.timed_out {
            return;
        }
        // A stale event (FreeBSD: a kevent of a token used before) reads
        // as fired; the deadline says whether it is due.
        let left = run.deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            let _ = timer.arm_oneshot(registry, left);
            return;
        }
        run.timed_out = true;
        log_warn!(
            "hostop {} for {} ran past its timeout of {}: killing its process group {}",
            run.op,
            run.asker.by,
            humantime::format_duration(run.timeout),
            run.pid
        );
        if let Err(e) = platform::signal_group(run.pid, libc::SIGKILL) {
            log_warn!("killing hostop group {}: {e}", run.pid);
        }
    }

    /// A run's process has ended: what it left in its group is killed, the
    /// pipe drained, its sources released, the event published and the
    /// reply sent.
    fn finish_hostop(&mut self, id: HostRunId, t: Timestamp) {
        let Some(mut run) = self.hostops.remove(id) else {
            return;
        };
        // Its group id is not reused while the group has members, so this
        // reaches only what the op started and left behind.
        let _ = platform::signal_group(run.pid, libc::SIGKILL);
        run.read_output(&mut self.read_buf, FINAL_DRAIN_BYTES);
        let status = run.status.unwrap_or(ExitStatus::Unknown);
        let (exit_code, signal) = match status {
            ExitStatus::Code(c) => (Some(c), None),
            ExitStatus::Signal(s) => (Some(128 + s), Some(s)),
            ExitStatus::Unknown => (None, None),
        };
        let outcome = if run.timed_out {
            "timeout"
        } else if exit_code == Some(0) {
            "ok"
        } else {
            "failed"
        };
        let ms = u64::try_from(t.since(run.started).as_millis()).unwrap_or(u64::MAX);
        log_info!(
            "hostop {} for {} ended: {outcome} ({status:?}) after {ms} ms, {} byte(s) of output",
            run.op,
            run.asker.by,
            run.output_bytes
        );
        let line = self.hostop_reply_line(&run, exit_code, signal);
        let reply_to = run.reply_to.take();
        let asker = run.asker.clone();
        let params = std::mem::take(&mut run.params);
        let (op, output_bytes) = (run.op.clone(), run.output_bytes);
        self.release_hostop(run);
        self.publish_hostop(
            &op,
            &asker,
            params,
            outcome,
            Some(status),
            ms,
            output_bytes,
            t,
        );
        if let Some((conn, _)) = reply_to {
            self.send(conn, Rc::from(line), t);
        }
    }

    /// The reply line of an ended run.
    fn hostop_reply_line(
        &self,
        run: &HostRun,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> Vec<u8> {
        let rid = run.reply_to.as_ref().and_then(|(_, rid)| rid.as_ref());
        if run.timed_out {
            let msg = format!(
                "hostop {} ran past its timeout of {} and was killed ({} byte(s) of output dropped)",
                run.op,
                humantime::format_duration(run.timeout),
                run.output_bytes
            );
            return protocol::err_line(rid, ErrorCode::Timeout, &msg);
        }
        if self.is_stopping() && signal.is_some() {
            let msg = format!("hostop {}: colibrid is stopping and killed it", run.op);
            return protocol::err_line(rid, ErrorCode::Stopping, &msg);
        }
        let reply = HostopReply {
            ok: exit_code == Some(0),
            output: String::from_utf8_lossy(&run.output).into_owned(),
            exit_code: exit_code.unwrap_or(-1),
            signal,
            truncated: run.truncated(),
        };
        protocol::ok_line(rid, &Reply::Hostop(reply))
    }

    /// Deregisters a run's sources and gives back its tokens; its fds
    /// close as it drops.
    fn release_hostop(&mut self, mut run: HostRun) {
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut SourceFd(&run.out.as_raw_fd()));
        if let Some(w) = run.exit_watch.take() {
            w.deregister(registry);
        }
        if let Some(timer) = run.timer.take() {
            timer.deregister(registry);
        }
        for token in run.tokens {
            self.tokens.remove(token);
        }
    }

    /// Reports a run: a `hostop` record in the asking agent's session log
    /// (`colibri fold` lists it), and the `hostop` watch event (journaled;
    /// an alert when it did not end well).
    #[allow(clippy::too_many_arguments)]
    fn publish_hostop(
        &mut self,
        op: &str,
        asker: &Asker,
        params: BTreeMap<String, String>,
        outcome: &str,
        status: Option<ExitStatus>,
        ms: u64,
        output_bytes: u64,
        t: Timestamp,
    ) {
        let (exit_code, signal) = match status {
            Some(ExitStatus::Code(c)) => (Some(c), None),
            Some(ExitStatus::Signal(s)) => (None, Some(s)),
            Some(ExitStatus::Unknown) | None => (None, None),
        };
        let session = asker
            .pane
            .as_deref()
            .and_then(|p| self.panes.key(p))
            .and_then(|k| self.panes.agent(k))
            .map(|a| a.session.clone());
        if let (Some(pane), Some(session)) = (asker.pane.as_deref(), session) {
            let rec = HostopRecord {
                pane,
                op,
                by: &asker.by,
                params: &params,
                outcome,
                exit_code,
                signal,
                ms,
                output_bytes,
            };
            self.store.hostop(&session, &rec, t);
        }
        self.publish(
            WatchKind::Hostop {
                pane: asker.pane.clone(),
                op: op.to_string(),
                by: asker.by.clone(),
                params,
                outcome: outcome.to_string(),
                exit_code,
                signal,
                ms,
                output_bytes,
            },
            t,
        );
    }

    /// The shutdown: every run's process group is killed (a host operation
    /// is not left running without its supervisor).
    pub(crate) fn kill_hostops(&mut self) {
        for pid in self.hostops.running_pids() {
            let _ = platform::signal_group(pid, libc::SIGKILL);
        }
    }

    /// Whether `conn` waits for a run's reply.
    pub(crate) fn hostop_waiting(&self, conn: ConnId) -> bool {
        self.hostops.waiting(conn)
    }
}
