//! Agent processes: spawning on a PTY, reading its output into the pane's
//! single ingest entry (and the session log), writing queued input, and
//! pairing the process's exit with its PTY's end of file.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::Interest;

use crate::core::ingest::Frame;
use crate::core::lifecycle::LifeEvent;
use crate::core::pane::{ExitStatus, LineKind, Transition};
use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::agent::{Proc, Recipe};
use crate::daemon::diag::{log_debug, log_warn};
use crate::daemon::event_loop::{Daemon, Pending};
use crate::daemon::log_flow::HELD_READ_CHECK;
use crate::daemon::panes::{PaneKey, Slot};
use crate::daemon::sched::EXIT_DRAIN_BUDGET;
use crate::daemon::source::Source;
use crate::daemon::store::{ExitRecord, LineRecord, ReadSlot, SessionStore};
use crate::daemon::timers::Deadline;
use crate::platform::{self, ReadOutcome};
use crate::protocol::WatchKind;

impl Daemon {
    /// Signals what the agents of the panes `pane_ids` left running:
    /// colibrid's children (re-parented to it, the subreaper, when their
    /// parent exited) that are no running agent and whose environment
    /// names one of those panes, with everything under them. Returns how
    /// many such children there were.
    pub(crate) fn signal_leftovers(&self, pane_ids: &[&str], sig: i32) -> usize {
        let agents: Vec<platform::Pid> = self
            .panes
            .agents()
            .filter_map(|a| a.running_pid())
            .collect();
        platform::signal_orphans_with_env(&agents, "COLIBRI_PANE_ID", pane_ids, sig)
    }

    /// Signals a running agent's tree and what it left running
    /// ([`Daemon::signal_leftovers`]): a pause that stopped the tree alone
    /// left a printer that had called `setsid` and lost its parent writing
    /// to the pane's PTY, through the output budget's pause.
    pub(crate) fn signal_pane(
        &self,
        pid: platform::Pid,
        pane_id: &str,
        sig: i32,
    ) -> std::io::Result<()> {
        platform::signal_tree(pid, sig)?;
        self.signal_leftovers(&[pane_id], sig);
        Ok(())
    }

    /// Reads up to `budget` bytes of the pane's PTY; returns the bytes read.
    /// Readiness left over goes back to the scheduler's round robin.
    pub(crate) fn read_pty(&mut self, key: PaneKey, budget: usize, t: Timestamp) -> usize {
        let mut left = budget;
        let mut read_any = false;
        loop {
            let Some(agent) = self.panes.agent_mut(key) else {
                return budget - left;
            };
            if self.store.holds_reads(&agent.session, agent.is_ending()) {
                // Backpressure: the agent waits on its PTY; nothing is lost
                // while it runs (see `held_read_check` for its exit).
                let watch_exit = platform::EXIT_DISCARDS_UNREAD_OUTPUT
                    && !agent.is_ending()
                    && agent.timers.due(Deadline::HeldRead).is_none();
                self.wake.store_blocked.insert(key);
                self.wake.store_blocked_first.get_or_insert(key);
                if watch_exit {
                    self.set_deadline(key, Deadline::HeldRead, t.plus(HELD_READ_CHECK), t);
                }
                break;
            }
            let Some(proc_) = agent.proc.as_mut() else {
                break;
            };
            if proc_.eof || !proc_.read_pending {
                break;
            }
            if left == 0 {
                self.push_pending(Pending::Pty(key));
                break;
            }
            let want = left.min(self.read_buf.len());
            let outcome = platform::read_master(proc_.master.as_fd(), &mut self.read_buf[..want]);
            read_any = true;
            match outcome {
                Ok(ReadOutcome::Data(n)) => {
                    left = left.saturating_sub(n);
                    self.ingest_chunk(key, n, t);
                }
                Ok(ReadOutcome::WouldBlock) => {
                    proc_.read_pending = false;
                    break;
                }
                Ok(ReadOutcome::Eof) => {
                    proc_.read_pending = false;
                    proc_.eof = true;
                    self.pty_eof(key, t);
                    break;
                }
                Err(e) => {
                    log_warn!("reading the PTY of pane {}: {e}", agent.pane_id);
                    proc_.read_pending = false;
                    proc_.eof = true;
                    self.pty_eof(key, t);
                    break;
                }
            }
        }
        if read_any {
            self.after_ingest(key, t);
            if self.panes.pane(key).is_some_and(|p| p.paused) && budget > left {
                self.hold_pause(key, true, t);
            }
        }
        budget - left
    }

    /// Feeds `read_buf[..n]` to the pane (the single ingest entry), which
    /// hands each line back, classified, for the session log.
    pub(crate) fn ingest_chunk(&mut self, key: PaneKey, n: usize, t: Timestamp) {
        self.attach_output(key, n, t);
        let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
            return;
        };
        if agent.proc.is_none() {
            return;
        }
        let turns_before = pane.turns();
        pane.record_facts_in(std::mem::take(&mut self.facts_spare));
        let mut log = LogSink::new(&mut self.store, &agent.session, &agent.pane_id, pane, t);
        pane.ingest_with(&self.read_buf[..n], t, &mut self.transitions, |f, k| {
            log.line(f, k)
        });
        self.store
            .note_turns(&agent.session, pane.turns() - turns_before);
    }

    /// Feeds one line that did not come from the PTY (`emit`), through the
    /// same entry as PTY output.
    pub(crate) fn ingest_external(&mut self, key: PaneKey, line: &[u8], t: Timestamp) -> LineKind {
        let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
            return LineKind::Malformed;
        };
        let turns_before = pane.turns();
        pane.record_facts_in(std::mem::take(&mut self.facts_spare));
        let mut log = LogSink::new(&mut self.store, &agent.session, &agent.pane_id, pane, t);
        let kind = pane.ingest_line_with(line, t, &mut self.transitions, |f, k| log.line(f, k));
        self.store
            .note_turns(&agent.session, pane.turns() - turns_before);
        self.after_ingest(key, t);
        kind
    }

    /// Publishes the transitions a batch of lines caused and keeps the
    /// pane's stall deadline and alerts up to date.
    pub(crate) fn after_ingest(&mut self, key: PaneKey, t: Timestamp) {
        self.govern(key, t);
        let transitions = std::mem::take(&mut self.transitions);
        for tr in &transitions {
            self.on_transition(key, tr, t);
        }
        // An agent that was idle already was offered every task it fits
        // when it turned idle (and on each heartbeat since): planning
        // again for each line it prints would cost a pass over the queue
        // per batch and change nothing.
        let turned_idle = transitions.iter().any(|tr| tr.to == AgentState::Idle);
        self.transitions = transitions;
        self.transitions.clear();
        self.index_runtime(key, t);
        self.note_harness_session(key);
        self.refresh_stall(key, t);
        self.after_approvals(key, t);
        self.heartbeat_if_owed(key, t);
        if turned_idle {
            self.dispatch_if_idle(key, t);
        }
    }

    pub(crate) fn on_transition(&mut self, key: PaneKey, tr: &Transition, t: Timestamp) {
        let Some(pane) = self.panes.pane(key) else {
            return;
        };
        let reason = match tr.to {
            AgentState::Blocked => pane.blocked_reason().map(str::to_string),
            AgentState::Error => pane.last_error().map(str::to_string),
            _ => None,
        };
        let pane_id = pane.id.0.clone();
        self.publish(
            WatchKind::State {
                pane: pane_id,
                from: tr.from,
                to: tr.to,
                reason,
            },
            t,
        );
    }

    /// Records a detected runtime in the session index, once per pane.
    pub(crate) fn index_runtime(&mut self, key: PaneKey, t: Timestamp) {
        let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
            return;
        };
        if agent.runtime_indexed {
            return;
        }
        let Some(rt) = pane.runtime() else {
            return;
        };
        agent.runtime_indexed = true;
        self.store
            .ensure_session(&agent.session, Some(rt.as_str()), None, t);
        // Detected from the output: a harness colibri writes JSON to needs
        // the raw terminal it would have started with.
        if rt.reads_json_input() {
            if let Some(proc_) = agent.proc.as_ref() {
                if let Err(e) = platform::set_raw(proc_.master.as_fd()) {
                    log_warn!("pane {}: cannot make its terminal raw: {e}", agent.pane_id);
                }
            }
        }
        // `attached` carried the runtime the recipe named; one detected
        // from the output is told now (notify's `runtimes` filters need it).
        if agent.recipe.as_ref().is_some_and(|r| r.runtime.is_none()) {
            let pane = agent.pane_id.clone();
            self.publish(WatchKind::Runtime { pane, runtime: rt }, t);
        }
    }

    pub(crate) fn exit_notice(&mut self, key: PaneKey, t: Timestamp) {
        let Some(pid) = self.panes.agent(key).and_then(|a| a.running_pid()) else {
            return;
        };
        match platform::reap(pid) {
            Ok(Some(status)) => self.process_exited(key, status, t),
            Ok(None) => log_debug!("spurious exit notice for pid {pid}"),
            Err(e) => log_warn!("reaping pid {pid}: {e}"),
        }
    }

    /// The process is gone (reaped): read what its PTY still holds; the
    /// pane finishes once the PTY has reached its end too.
    pub(crate) fn process_exited(&mut self, key: PaneKey, status: ExitStatus, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        if proc_.status.is_some() {
            return;
        }
        proc_.status = Some(status);
        proc_.read_pending = true;
        if let Some(w) = proc_.exit_watch.take() {
            w.deregister(self.poll.registry());
        }
        let exit_token = proc_.exit_token;
        self.tokens.remove(exit_token);
        log_debug!(
            "pane {} pid {} exited: {status:?}",
            agent.pane_id,
            proc_.pid
        );
        // Reads cut short by a budget or a log backlog continue meanwhile;
        // an end of file reached here comes before the exit in the table.
        self.read_pty(key, EXIT_DRAIN_BUDGET, t);
        self.life_event(key, LifeEvent::Exited, t);
    }

    pub(crate) fn pty_eof(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        if proc_.pty_registered {
            let fd = proc_.master.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            proc_.pty_registered = false;
        }
        self.life_event(key, LifeEvent::PtyEof, t);
    }

    /// Both the exit and the end of output have happened: fold the exit,
    /// log it, release the process's fds, and decide on a restart.
    pub(crate) fn finish(&mut self, key: PaneKey, t: Timestamp) {
        let Some(Slot { pane, agent }) = self.panes.get_mut(key) else {
            return;
        };
        let Some(proc_) = agent.proc.take() else {
            return;
        };
        if proc_.pty_registered {
            let fd = proc_.master.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        }
        self.tokens.remove(proc_.pty_token);
        agent
            .timers
            .clear(Deadline::Drain, t, &mut self.timerq, key);
        agent
            .timers
            .clear(Deadline::StopGrace, t, &mut self.timerq, key);
        agent
            .timers
            .clear(Deadline::Stall, t, &mut self.timerq, key);
        agent
            .timers
            .clear(Deadline::HeldRead, t, &mut self.timerq, key);
        // The next process's start arms it again.
        agent
            .timers
            .clear(Deadline::Heartbeat, t, &mut self.timerq, key);
        let status = proc_.status.unwrap_or(ExitStatus::Unknown);
        // A last line without a newline is still a line.
        let mut log = LogSink::new(&mut self.store, &agent.session, &agent.pane_id, pane, t);
        pane.finish_stream_with(t, &mut self.transitions, |f, k| log.line(f, k));
        let planned = agent.supervision.planned_stop();
        if planned {
            pane.stopped(status, t, &mut self.transitions);
        } else {
            pane.exited(status, t, &mut self.transitions);
        }
        // An exited process is not stopped any more.
        pane.paused = false;
        agent.holds.lift_all();
        let state = pane.state();
        let reason = agent
            .stopped_by
            .clone()
            .or_else(|| pane.last_error().map(str::to_string));
        let (code, signal) = match status {
            ExitStatus::Code(c) => (Some(c), None),
            ExitStatus::Signal(s) => (None, Some(s)),
            ExitStatus::Unknown => (None, None),
        };
        self.store.exit(
            &agent.session,
            &ExitRecord {
                pane: &agent.pane_id,
                state: state.as_str(),
                code,
                signal,
                reason: reason.as_deref(),
                planned,
            },
            t,
        );
        let pane_id = agent.pane_id.clone();
        let ran_for = t.since(proc_.started);
        self.deferred_closes.push(proc_.master);
        self.after_ingest(key, t);
        self.publish(
            WatchKind::Exited {
                pane: pane_id,
                code,
                signal,
                planned,
            },
            t,
        );
        self.kick_writers(t);
        self.attach_exited(key, code, signal, t);
        let restart = self.restart_plan(key, state, ran_for, t);
        self.life_event(key, LifeEvent::Ended { restart }, t);
        self.after_end(key, t);
        self.wake.accept_blocked = true;
    }

    pub(crate) fn restart_now(&mut self, key: PaneKey, t: Timestamp) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(recipe) = agent.recipe.clone() else {
            return;
        };
        agent.generation += 1;
        agent.stalled_at_quiet = None;
        let generation = agent.generation;
        let pane = agent.pane_id.clone();
        self.panes
            .reattach(key, recipe.runtime, self.settings.daemon.max_line, t);
        match self.start_process(key, &recipe, t) {
            Ok(pid) => {
                self.life_event(key, LifeEvent::Spawned, t);
                self.log_attach(key, &recipe, t);
                self.publish(
                    WatchKind::Restarted {
                        pane,
                        generation,
                        pid,
                    },
                    t,
                );
                self.join_budget_pauses(key, t);
            }
            Err(why) => {
                if let Some(pane) = self.panes.pane_mut(key) {
                    pane.fail(format!("restart failed: {why}"), t, &mut self.transitions);
                }
                self.after_ingest(key, t);
                let restart = self.restart_plan(key, AgentState::Error, Duration::ZERO, t);
                self.life_event(key, LifeEvent::SpawnFailed { restart }, t);
            }
        }
    }

    /// Opens a PTY and starts the recipe on it; registers the PTY and the
    /// exit watch. The pane must exist already.
    pub(crate) fn start_process(
        &mut self,
        key: PaneKey,
        recipe: &Recipe,
        t: Timestamp,
    ) -> Result<i32, String> {
        // The harnesses colibri writes JSON to get a raw terminal; every
        // other program a terminal in line mode, as a fresh one is.
        let runtime = recipe
            .runtime
            .or_else(|| self.panes.pane(key).and_then(|p| p.runtime()));
        let json_input = runtime.is_some_and(Runtime::reads_json_input)
            || Runtime::argv_reads_json_input(&recipe.argv);
        // Claude Code's stream-json input refuses a terminal ("Input must
        // be provided either through stdin or as a prompt argument"): its
        // input goes through a pipe, its output still through the PTY.
        let input_pipe = if Runtime::argv_needs_piped_input(&recipe.argv) {
            Some(platform::input_pipe().map_err(|e| format!("cannot open an input pipe: {e}"))?)
        } else {
            None
        };
        let mode = if json_input {
            platform::TerminalMode::Raw
        } else {
            platform::TerminalMode::Line
        };
        let pair = platform::open_pty(recipe.cols, recipe.rows, mode)
            .map_err(|e| format!("cannot open a PTY: {e}"))?;
        let jail = match &recipe.jail {
            Some(name) => {
                Some(platform::resolve_jail(name).map_err(|e| format!("jail {name}: {e}"))?)
            }
            None => None,
        };
        let user = match &recipe.user {
            Some(u) => {
                let root = jail
                    .as_ref()
                    .map_or_else(|| PathBuf::from("/"), |j| j.root.clone());
                Some(platform::lookup_user(&root, u).map_err(|e| format!("user {u}: {e}"))?)
            }
            None => None,
        };
        let pane_id = self
            .panes
            .agent(key)
            .map(|a| a.pane_id.clone())
            .ok_or_else(|| "the pane is gone".to_string())?;
        let socket = if jail.is_some() {
            "/var/colibri/colibri.sock".to_string()
        } else {
            self.settings.daemon.socket.display().to_string()
        };
        let mut env = recipe.env.clone();
        if !env.iter().any(|(k, _)| k == "TERM") {
            env.push(("TERM".into(), "dumb".into()));
        }
        env.push(("COLIBRI_PANE_ID".into(), pane_id.clone()));
        env.push(("COLIBRI_SOCKET".into(), socket));
        let spec = platform::SpawnSpec {
            argv: recipe.argv.clone(),
            env,
            agent_path: Some(self.settings.daemon.agent_path.clone()),
            clear_env: false,
            cwd: recipe.cwd.clone(),
            jail,
            user,
            stdin: input_pipe.as_ref().map(|(read, _)| read.as_raw_fd()),
        };
        let pid = platform::spawn_on_pty(&spec, &pair.slave).map_err(|e| match e {
            // Say where that PATH came from, so the fix is one step away.
            platform::SpawnError::NotInPath { .. }
                if recipe.env.iter().any(|(k, _)| k == "PATH") =>
            {
                format!("{e} (the spawn's own PATH; give the program's full path or another PATH)")
            }
            platform::SpawnError::NotInPath { .. } => format!(
                "{e} (colibrid's agent PATH: change it with colibrid --agent-path, \
                 COLIBRI_AGENT_PATH or [daemon] agent_path, or give the program's full path)"
            ),
            e => e.to_string(),
        })?;
        // The agent holds the slave now; ours must close for EOF to come.
        drop(pair.slave);
        let input_pipe = input_pipe.map(|(read, write)| {
            drop(read);
            write
        });
        let pty_token = self.tokens.insert(Source::Pty(key));
        let exit_token = self.tokens.insert(Source::Exit(key));
        let master = pair.master;
        let fd = master.as_raw_fd();
        let pty_registered =
            match self
                .poll
                .registry()
                .register(&mut SourceFd(&fd), pty_token, Interest::READABLE)
            {
                Ok(()) => true,
                Err(e) => {
                    log_warn!("registering the PTY of pane {pane_id}: {e}");
                    false
                }
            };
        let (exit_watch, already) =
            match platform::ExitWatch::register(self.poll.registry(), pid, exit_token) {
                Ok(w) => {
                    let gone = w.already_exited();
                    (Some(w), gone)
                }
                Err(e) => {
                    log_warn!("cannot watch pid {pid} for exit ({e}); relying on SIGCHLD");
                    (None, false)
                }
            };
        let proc_ = Proc {
            pid,
            started: t,
            master,
            pty_token,
            pty_registered,
            eof: false,
            read_pending: true,
            exit_watch,
            exit_token,
            status: None,
            exiting: false,
            input: VecDeque::new(),
            write_interest: false,
            input_pipe,
        };
        if let Some(agent) = self.panes.agent_mut(key) {
            agent.proc = Some(proc_);
        }
        self.push_pending(Pending::Pty(key));
        if already {
            self.push_pending(Pending::Exit(key));
        }
        self.heartbeat_started(key, t);
        self.dispatch_if_idle(key, t);
        Ok(pid)
    }

    pub(crate) fn log_attach(&mut self, key: PaneKey, recipe: &Recipe, t: Timestamp) {
        let Some(agent) = self.panes.agent(key) else {
            return;
        };
        let Some(pane) = self.panes.pane(key) else {
            return;
        };
        let rec = crate::daemon::store::AttachRecord {
            pane: &agent.pane_id,
            agent: &pane.agent,
            runtime: recipe.runtime.map(|r| r.as_str()),
            name: pane.name.as_deref(),
            cwd: pane.cwd(),
            argv: &recipe.argv,
            generation: agent.generation,
            jail: agent.jail.as_deref(),
            system_prompt: recipe.system_prompt.as_deref(),
            role: pane.role.as_deref(),
            scope: &recipe.scope,
        };
        self.store.attach(&agent.session, &rec, t);
    }

    /// Writes queued `send-input` bytes; write interest only while some wait.
    pub(crate) fn write_input(&mut self, key: PaneKey) {
        let Some(agent) = self.panes.agent_mut(key) else {
            return;
        };
        let Some(proc_) = agent.proc.as_mut() else {
            return;
        };
        while !proc_.input.is_empty() {
            let (front, _) = proc_.input.as_slices();
            let to = proc_
                .input_pipe
                .as_ref()
                .map_or(proc_.master.as_fd(), |p| p.as_fd());
            match platform::write_nonblocking(to, front) {
                Ok(Some(n)) => {
                    proc_.input.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    log_warn!("writing input to pane {}: {e}", agent.pane_id);
                    proc_.input.clear();
                    break;
                }
            }
        }
        let want = !proc_.input.is_empty();
        if let Some(pipe) = &proc_.input_pipe {
            // The pipe is watched (under the PTY's token) only while input
            // waits; closing it at the exit leaves the poll set on its own.
            if want != proc_.write_interest {
                let fd = pipe.as_raw_fd();
                let registry = self.poll.registry();
                let done = if want {
                    registry.register(&mut SourceFd(&fd), proc_.pty_token, Interest::WRITABLE)
                } else {
                    registry.deregister(&mut SourceFd(&fd))
                };
                if done.is_ok() {
                    proc_.write_interest = want;
                }
            }
            return;
        }
        if want != proc_.write_interest && proc_.pty_registered {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let fd = proc_.master.as_raw_fd();
            if self
                .poll
                .registry()
                .reregister(&mut SourceFd(&fd), proc_.pty_token, interest)
                .is_ok()
            {
                proc_.write_interest = want;
            }
        }
    }
}

/// Where a classified line goes: into its session log, as the pane
/// classified it (`Event`, `Raw` or `Oversize`).
struct LogSink<'a> {
    store: &'a mut SessionStore,
    /// Begun at the first line, for all the lines of the read.
    read: Option<ReadSlot>,
    session: &'a str,
    pane_id: &'a str,
    max_line: u64,
    t: Timestamp,
}

impl<'a> LogSink<'a> {
    fn new(
        store: &'a mut SessionStore,
        session: &'a str,
        pane_id: &'a str,
        pane: &crate::core::pane::Pane,
        t: Timestamp,
    ) -> LogSink<'a> {
        LogSink {
            store,
            read: None,
            session,
            pane_id,
            max_line: pane.max_line() as u64,
            t,
        }
    }

    fn line(&mut self, frame: Frame<'_>, kind: LineKind) {
        let rec = match (kind, frame) {
            (LineKind::Event, Frame::Line(l)) => LineRecord::Parsed(l.bytes()),
            (LineKind::Held, Frame::Line(l)) => LineRecord::Event(l.bytes()),
            (LineKind::Malformed, Frame::Line(l)) => LineRecord::Raw(l.bytes()),
            (LineKind::Oversize, _) | (_, Frame::Oversize) => LineRecord::Oversize(self.max_line),
            (LineKind::Blank, _) => return,
        };
        let read = match self.read {
            Some(read) => read,
            None => *self
                .read
                .insert(self.store.begin_read(self.session, self.pane_id, self.t)),
        };
        self.store.append_read(read, self.session, rec);
    }
}
