//! One supervised agent: its state, what it has said, and what it cost.
//!
//! A [`Pane`] owns the framing of its byte stream, the harness adapter (or
//! the detector that will pick one), and every derived fact the snapshots
//! report. It is fed bytes with a time and returns state transitions; it
//! never reads a clock.

use std::collections::VecDeque;
use std::time::Duration;

use crate::core::approval::{
    AgentRequest, AnswerChannel, Approval, ApprovalEvent, ApprovalOutcome, ApprovalRequest,
    Decision, ExpiryReason, LoggedAnswer, LoggedApproval, Resolves,
};
use crate::core::ingest::{is_blank, Frame, FramedLine, LineFramer};
use crate::core::policy::{raw_log_bytes, LineFacts, ToolFacts, LOG_RECORD_BYTES, OUTPUT_STEP};
use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::state::{self, AgentState};
use crate::core::taxonomy::detect::{detect, Detection};
use crate::core::taxonomy::{Adapter, Runtime};
use crate::core::time::Timestamp;
use crate::core::tool;
use crate::core::usage::Usage;

/// The daemon-assigned pane id (equal to the agent id, a UUIDv4 string).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaneId(pub String);

impl PaneId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Lets a map keyed by `PaneId` be searched with a `&str` (no allocation
/// per lookup); the derived `Hash` of the one field hashes like a `str`.
impl std::borrow::Borrow<str> for PaneId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PaneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How an agent process ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// The process was gone before its status could be read (reaped
    /// elsewhere, or the daemon restarted).
    Unknown,
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

/// Line and byte counts. `events + malformed + oversize` equals the number
/// of non-blank lines seen (held lines of an undetected stream excepted).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub bytes: u64,
    pub events: u64,
    pub malformed: u64,
    pub oversize: u64,
    /// Events of a type the adapter does not know (included in `events`).
    pub unknown: u64,
}

/// The last tool call, kept short.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRecord {
    pub name: String,
    pub summary: String,
    pub at: Timestamp,
}

/// What one framed line turned out to be.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// A JSON object the runtime's adapter parsed whole.
    Event,
    /// Kept for runtime detection, not parsed yet: an event as far as the
    /// pane can tell.
    Held,
    /// Not JSON, not an object, or not UTF-8.
    Malformed,
    /// Longer than the cap; its bytes were dropped.
    Oversize,
    /// Only white space.
    Blank,
}

/// A state change, with the line count at which it happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: AgentState,
    pub to: AgentState,
    pub at: Timestamp,
    /// Non-blank lines seen so far when it happened (0: not caused by a line).
    pub line: u64,
}

/// A harness's approvals pending at once; one more drops the oldest, so a
/// harness that asks without end cannot grow the pane.
pub const MAX_PENDING_APPROVALS: usize = 32;
/// An agent's own requests pending at once (beside its harness's): one more
/// is refused, never dropped, so no request the agent waits on vanishes.
pub const MAX_AGENT_APPROVALS: usize = 16;

/// An agent's request refused: it has [`MAX_AGENT_APPROVALS`] pending.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TooManyRequests;

/// Whether a harness asked `a` (its own lines settle it), not the agent
/// through colibri (only an answer, its wait or its agent's end does).
fn from_harness(a: &Approval) -> bool {
    a.channel != AnswerChannel::Reply
}
/// Approval events kept until [`Pane::take_approval_events`] drains them.
pub const MAX_APPROVAL_EVENTS: usize = 256;

/// Held lines of a stream whose runtime is not known yet.
const DETECT_MAX_LINES: usize = 64;
const DETECT_MAX_BYTES: usize = 256 * 1024;

#[derive(Debug)]
enum Dialect {
    Known(Adapter),
    Detecting {
        held: Vec<(Vec<u8>, Timestamp)>,
        bytes: usize,
    },
}

#[derive(Debug)]
pub struct Pane {
    pub id: PaneId,
    /// The agent binary's name (`pi`, `claude`, …), as the v1 snapshot shows.
    pub agent: String,
    pub name: Option<String>,
    /// The control plane's role (budgets scoped `role:ROLE` count it).
    pub role: Option<String>,
    pub started_at: Timestamp,
    /// Per-pane stall threshold; the supervisor's default when `None`.
    pub stall_after: Option<Duration>,
    /// Paused panes (SIGSTOP) are never stalled.
    pub paused: bool,
    dialect: Dialect,
    framer: LineFramer,
    state: AgentState,
    state_since: Timestamp,
    last_event_at: Option<Timestamp>,
    /// Silence is measured from here: the later of start, the last line of
    /// any kind, a resume, and a re-base after suspend.
    quiet_since: Timestamp,
    session_id: Option<String>,
    cwd: Option<String>,
    /// The model the harness's header named, for pricing its tokens.
    model: Option<String>,
    counters: Counters,
    lines: u64,
    turns: u64,
    usage: Usage,
    last_tool: Option<ToolRecord>,
    last_error: Option<String>,
    blocked_reason: Option<String>,
    exit: Option<ExitStatus>,
    approvals: PendingApprovals,
    /// What each line meant to the policies, kept only when asked for
    /// ([`Pane::record_facts`]) and drained by the caller.
    facts: Option<Vec<LineFacts>>,
    /// Log bytes framed since the policies were last told of output
    /// (counted per frame, not per read, so a fold of the log counts the
    /// same steps at the same lines as the daemon did).
    output_unreported: u64,
}

/// The approvals a pane waits on, and what happened to them since the
/// owner last looked.
#[derive(Debug, Default)]
struct PendingApprovals {
    pending: Vec<Approval>,
    /// Approvals opened so far; numbers the ids.
    opened: u64,
    events: VecDeque<ApprovalEvent>,
    /// Events dropped because nobody drained them in time.
    events_dropped: u64,
}

impl Pane {
    pub fn new(
        id: PaneId,
        agent: String,
        runtime: Option<Runtime>,
        max_line: usize,
        now: Timestamp,
    ) -> Pane {
        let dialect = match runtime {
            Some(rt) => Dialect::Known(Adapter::new(rt)),
            None => Dialect::Detecting {
                held: Vec::new(),
                bytes: 0,
            },
        };
        Pane {
            id,
            agent,
            name: None,
            role: None,
            started_at: now,
            stall_after: None,
            paused: false,
            dialect,
            framer: LineFramer::new(max_line),
            state: AgentState::Idle,
            state_since: now,
            last_event_at: None,
            quiet_since: now,
            session_id: None,
            model: None,
            cwd: None,
            counters: Counters::default(),
            lines: 0,
            turns: 0,
            usage: Usage::default(),
            last_tool: None,
            last_error: None,
            blocked_reason: None,
            exit: None,
            approvals: PendingApprovals::default(),
            facts: None,
            output_unreported: 0,
        }
    }

    /// Keeps each line's [`LineFacts`] for the policy engine, to be taken
    /// with [`Pane::take_facts`] after each ingest call.
    pub fn record_facts(&mut self) {
        self.facts.get_or_insert_with(Vec::new);
    }

    /// [`Pane::record_facts`], into `buf` (emptied) unless the pane holds a
    /// buffer already. A caller that gives each taken buffer back this way
    /// keeps one allocation for every read of every pane; a new buffer per
    /// read grew by doubling, copying its facts at each step (about 5 % of
    /// the daemon's instructions on a stream of short lines).
    pub fn record_facts_in(&mut self, mut buf: Vec<LineFacts>) {
        match &mut self.facts {
            Some(f) if f.capacity() > 0 => {}
            facts => {
                buf.clear();
                *facts = Some(buf);
            }
        }
    }

    /// The facts of the lines ingested since the last call.
    pub fn take_facts(&mut self) -> Vec<LineFacts> {
        match &mut self.facts {
            Some(f) => std::mem::take(f),
            None => Vec::new(),
        }
    }

    pub fn state(&self) -> AgentState {
        self.state
    }
    pub fn state_since(&self) -> Timestamp {
        self.state_since
    }
    pub fn last_event_at(&self) -> Option<Timestamp> {
        self.last_event_at
    }
    pub fn quiet_since(&self) -> Timestamp {
        self.quiet_since
    }
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Turns started (model calls or prompt rounds, per the dialect).
    pub fn turns(&self) -> u64 {
        self.turns
    }
    pub fn usage(&self) -> &Usage {
        &self.usage
    }
    pub fn last_tool(&self) -> Option<&ToolRecord> {
        self.last_tool.as_ref()
    }
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    pub fn blocked_reason(&self) -> Option<&str> {
        self.blocked_reason.as_deref()
    }
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }
    /// Requests waiting for the operator, oldest first.
    pub fn pending_approvals(&self) -> &[Approval] {
        &self.approvals.pending
    }
    pub fn approval(&self, id: &str) -> Option<&Approval> {
        self.approvals.pending.iter().find(|a| a.id == id)
    }
    /// When the next pending approval times out by itself, if any does.
    pub fn next_approval_expiry(&self) -> Option<Timestamp> {
        self.approvals
            .pending
            .iter()
            .filter_map(|a| a.expires_at)
            .min()
    }
    /// Approval events since the last call, oldest first.
    pub fn take_approval_events(&mut self) -> Vec<ApprovalEvent> {
        self.approvals.events.drain(..).collect()
    }

    /// Records that the operator's `decision` was written to the agent;
    /// returns the approval it closed, `None` if `id` is not pending.
    pub fn answered(&mut self, id: &str, decision: &Decision, now: Timestamp) -> Option<Approval> {
        let outcome = ApprovalOutcome::Answered {
            decision: decision.clone(),
        };
        let closed = self.close_approvals(|a| a.id == id, &outcome, now, 0);
        closed.into_iter().next()
    }

    /// Replays an answer its session log recorded (`colibri fold`, the
    /// daemon's recovery): closes the pending approval it names as
    /// answered, as [`Pane::answered`] did when it was given, and writes
    /// nothing anywhere. Matched by the per-pane count, not the whole id:
    /// the id's prefix is the logging pane's, which a fold's pane is not.
    /// `None` when no pending approval has that count (the request never
    /// reached this pane, or the harness settled it first).
    pub fn replay_answer(&mut self, answer: &LoggedAnswer, now: Timestamp) -> Option<Approval> {
        let id = self.pending_with_count(answer.count())?;
        self.answered(&id, &answer.decision, now)
    }

    /// The pending approval whose per-pane count is `count`.
    fn pending_with_count(&self, count: &str) -> Option<String> {
        self.approvals
            .pending
            .iter()
            .find(|a| a.id.rsplit_once('-').is_some_and(|(_, n)| n == count))
            .map(|a| a.id.clone())
    }

    /// Replays an approval record of a session log (`colibri fold`, the
    /// daemon's recovery) as the daemon lived it: an agent's request opens
    /// the pane's next approval ([`Pane::request_approval`]), an answer
    /// closes the approval it names ([`Pane::replay_answer`]), an expiry
    /// closes it unanswered. Returns the approval opened or closed; `None`
    /// when the record finds nothing to act on.
    pub fn replay(&mut self, record: &LoggedApproval, now: Timestamp) -> Option<Approval> {
        match record {
            LoggedApproval::Requested { request, .. } => self.request_approval(request, now).ok(),
            LoggedApproval::Answered(answer) => self.replay_answer(answer, now),
            LoggedApproval::Expired { reason, .. } => {
                let id = self.pending_with_count(record.count())?;
                let outcome = ApprovalOutcome::Expired { reason: *reason };
                self.close_approvals(|a| a.id == id, &outcome, now, 0)
                    .into_iter()
                    .next()
            }
        }
    }

    /// Opens an agent's own request as the pane's next approval (numbered
    /// with its harness's), answered on [`AnswerChannel::Reply`]. Refused
    /// while [`MAX_AGENT_APPROVALS`] of them are pending.
    pub fn request_approval(
        &mut self,
        req: &AgentRequest,
        now: Timestamp,
    ) -> Result<Approval, TooManyRequests> {
        let open = self
            .approvals
            .pending
            .iter()
            .filter(|a| !from_harness(a))
            .count();
        if open >= MAX_AGENT_APPROVALS {
            return Err(TooManyRequests);
        }
        Ok(self.open_request(req, now))
    }

    /// colibrid's own question in the agent's name (the escalation
    /// ladder's decide item, one at a time per pane): past the agent's
    /// cap, so an agent that keeps its requests at the cap cannot keep the
    /// question from the operator.
    pub fn request_reserved_approval(&mut self, req: &AgentRequest, now: Timestamp) -> Approval {
        self.open_request(req, now)
    }

    /// Closes pending approval `id` as resolved: what it asked no longer
    /// stands (the ladder's decide item once the agent works again).
    pub fn resolve_approval(&mut self, id: &str, now: Timestamp) -> bool {
        let resolved = ApprovalOutcome::Expired {
            reason: ExpiryReason::Resolved,
        };
        let line = self.lines;
        !self
            .close_approvals(|a| a.id == id, &resolved, now, line)
            .is_empty()
    }

    fn open_request(&mut self, req: &AgentRequest, now: Timestamp) -> Approval {
        let id = self.next_approval_id();
        let approval = Approval::from_agent(id, req, now, self.lines);
        self.approvals.pending.push(approval.clone());
        self.push_approval_event(ApprovalEvent::Opened(approval.clone()));
        approval
    }

    /// The id the next approval gets: the pane id's first 8 characters and
    /// a per-pane count.
    fn next_approval_id(&mut self) -> String {
        self.approvals.opened += 1;
        let prefix: String = self.id.as_str().chars().take(8).collect();
        format!("{prefix}-{}", self.approvals.opened)
    }

    /// Sets when a pending approval gives up by itself (a waiting hook's
    /// timeout); false if `id` is not pending.
    pub fn set_approval_expiry(&mut self, id: &str, at: Timestamp) -> bool {
        match self.approvals.pending.iter_mut().find(|a| a.id == id) {
            Some(a) => {
                a.expires_at = Some(at);
                true
            }
            None => false,
        }
    }

    /// Closes the approvals whose own timeout has passed (the harness
    /// answered them with its default); returns how many.
    pub fn expire_approvals(&mut self, now: Timestamp) -> usize {
        let outcome = ApprovalOutcome::Expired {
            reason: ExpiryReason::TimedOut,
        };
        self.close_approvals(|a| a.expires_at.is_some_and(|t| t <= now), &outcome, now, 0)
            .len()
    }
    pub fn runtime(&self) -> Option<Runtime> {
        match &self.dialect {
            Dialect::Known(a) => Some(a.runtime()),
            Dialect::Detecting { .. } => None,
        }
    }

    /// Takes over what the adapter of `earlier` (this pane's previous
    /// process, replaced on a restart) knew that the next stream builds on:
    /// a resumed Codex thread reports its whole running total again.
    pub fn carry_over(&mut self, earlier: &Pane) {
        if let (Dialect::Known(now), Dialect::Known(before)) = (&mut self.dialect, &earlier.dialect)
        {
            now.carry_over(before);
        }
    }

    /// Sets the working directory the daemon started the agent in; a session
    /// header's `cwd` replaces it.
    pub fn set_cwd(&mut self, cwd: Option<String>) {
        self.cwd = cwd;
    }

    /// Whether the pane has been silent for `stall_after` while it should be
    /// making progress.
    pub fn is_stalled(&self, now: Timestamp, default_stall_after: Duration) -> bool {
        match self.stall_deadline(default_stall_after) {
            Some(deadline) => now >= deadline,
            None => false,
        }
    }

    /// When the pane will count as stalled if nothing more arrives.
    pub fn stall_deadline(&self, default_stall_after: Duration) -> Option<Timestamp> {
        if !self.state.can_stall() || self.paused {
            return None;
        }
        Some(
            self.quiet_since
                .plus(self.stall_after.unwrap_or(default_stall_after)),
        )
    }

    /// Restarts the silence clock (on resume, or after the host slept).
    pub fn rebase_quiet(&mut self, now: Timestamp) {
        self.quiet_since = self.quiet_since.max(now);
    }

    /// Feeds a chunk of the agent's output.
    pub fn ingest(&mut self, chunk: &[u8], now: Timestamp, out: &mut Vec<Transition>) {
        self.ingest_with(chunk, now, out, |_, _| {});
    }

    /// The single ingest entry, shared by the daemon, `emit` and `fold`:
    /// counts the bytes, frames them with the pane's own framer, folds each
    /// line, and hands each frame with its kind to `on_line` (the daemon
    /// writes its session log there; fold passes a no-op).
    pub fn ingest_with(
        &mut self,
        chunk: &[u8],
        now: Timestamp,
        out: &mut Vec<Transition>,
        mut on_line: impl FnMut(Frame<'_>, LineKind),
    ) {
        self.counters.bytes += chunk.len() as u64;
        let mut framer = std::mem::replace(&mut self.framer, LineFramer::new(1));
        framer.feed(chunk, |frame| {
            let kind = self.on_frame(frame, now, out);
            on_line(frame, kind);
        });
        self.framer = framer;
    }

    /// Feeds one complete line (without its newline).
    pub fn ingest_line(
        &mut self,
        line: &[u8],
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) -> LineKind {
        self.ingest_line_with(line, now, out, |_, _| {})
    }

    /// [`Pane::ingest_with`] for one line that arrived whole (`emit`): the
    /// same counting and the same oversize cap as a framed line.
    pub fn ingest_line_with(
        &mut self,
        line: &[u8],
        now: Timestamp,
        out: &mut Vec<Transition>,
        mut on_line: impl FnMut(Frame<'_>, LineKind),
    ) -> LineKind {
        self.counters.bytes += line.len() as u64 + 1;
        let frame = if line.len() > self.framer.max_line() {
            Frame::Oversize
        } else {
            Frame::Line(FramedLine::new(line))
        };
        let kind = self.on_frame(frame, now, out);
        on_line(frame, kind);
        kind
    }

    /// The line cap of the pane's framer.
    pub fn max_line(&self) -> usize {
        self.framer.max_line()
    }

    /// The stream ended: a last line without a newline still counts, and
    /// lines held for detection are interpreted with the default dialect.
    pub fn finish_stream(&mut self, now: Timestamp, out: &mut Vec<Transition>) {
        self.finish_stream_with(now, out, |_, _| {});
    }

    /// [`Pane::finish_stream`], handing the last frame to `on_line`.
    pub fn finish_stream_with(
        &mut self,
        now: Timestamp,
        out: &mut Vec<Transition>,
        mut on_line: impl FnMut(Frame<'_>, LineKind),
    ) {
        let mut framer = std::mem::replace(&mut self.framer, LineFramer::new(1));
        framer.finish(|frame| {
            let kind = self.on_frame(frame, now, out);
            on_line(frame, kind);
        });
        self.framer = framer;
        // Lines held undecided are read in the seed contract's dialect;
        // a program that printed no JSON (`sh`, `yes`) has no runtime, and
        // calling it `pi` once it ended named a harness it never was.
        if matches!(&self.dialect, Dialect::Detecting { held, .. } if !held.is_empty()) {
            self.settle_dialect(Runtime::Pi, out);
        }
    }

    /// The agent process ended: the stream is finished, then the exit is
    /// folded in as the contract's `agent_end` (success) or `error`.
    pub fn exited(&mut self, status: ExitStatus, now: Timestamp, out: &mut Vec<Transition>) {
        self.finish_stream(now, out);
        self.exit = Some(status);
        self.close_all_approvals(ExpiryReason::Exited, now, 0);
        let signal = match &mut self.dialect {
            Dialect::Known(a) => a.on_exit(status.success()),
            Dialect::Detecting { .. } => Signal::Exited {
                success: status.success(),
            },
        };
        if !status.success() && self.last_error.is_none() {
            self.last_error = Some(match status {
                ExitStatus::Code(c) => format!("exited with status {c}"),
                ExitStatus::Signal(s) => format!("killed by signal {s}"),
                ExitStatus::Unknown => "exit status unknown".to_string(),
            });
        }
        self.transition(&signal, now, 0, out);
    }

    /// The process ended because colibri stopped it on purpose (a planned
    /// stop: `stop-agent`, `restart-agent`, a reload, an orderly
    /// shutdown). The SIGTERM's exit is no failure of the agent's: the
    /// pane ends `done` (unless it had already failed on its own), and its
    /// open approvals close as `stopped`, not as abandoned.
    pub fn stopped(&mut self, status: ExitStatus, now: Timestamp, out: &mut Vec<Transition>) {
        self.finish_stream(now, out);
        self.exit = Some(status);
        self.close_all_approvals(ExpiryReason::Stopped, now, 0);
        self.transition(&Signal::Exited { success: true }, now, 0, out);
    }

    /// Records a failure that did not come from the agent (a failed spawn,
    /// a daemon restart that lost the agent).
    pub fn fail(&mut self, reason: String, now: Timestamp, out: &mut Vec<Transition>) {
        self.last_error = Some(reason);
        self.close_all_approvals(ExpiryReason::Exited, now, 0);
        self.transition(&Signal::Failed, now, 0, out);
    }

    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) -> LineKind {
        let kind = self.fold_frame(frame, now, out);
        // What the session log takes for it: a blank line is not logged,
        // an oversize one is logged as its length alone, a malformed one
        // as an escaped string.
        let logged = match (kind, frame) {
            (LineKind::Blank, _) => 0,
            (_, Frame::Oversize) => LOG_RECORD_BYTES,
            (LineKind::Malformed, Frame::Line(l)) => raw_log_bytes(l.bytes()),
            (_, Frame::Line(l)) => l.bytes().len() as u64 + LOG_RECORD_BYTES,
        };
        self.count_output(logged);
        kind
    }

    /// Adds a line's log bytes to the output not yet reported, and reports it
    /// (a fact of bytes alone) once it reaches [`OUTPUT_STEP`].
    fn count_output(&mut self, bytes: u64) {
        self.output_unreported += bytes;
        if self.output_unreported < OUTPUT_STEP {
            return;
        }
        let bytes = std::mem::take(&mut self.output_unreported);
        if let Some(facts) = &mut self.facts {
            facts.push(LineFacts {
                line: self.lines,
                bytes,
                ..LineFacts::default()
            });
        }
    }

    fn fold_frame(
        &mut self,
        frame: Frame<'_>,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) -> LineKind {
        let line = match frame {
            Frame::Oversize => {
                self.lines += 1;
                self.counters.oversize += 1;
                self.quiet_since = self.quiet_since.max(now);
                return LineKind::Oversize;
            }
            Frame::Line(l) => l,
        };
        if is_blank(line.bytes()) {
            return LineKind::Blank;
        }
        self.lines += 1;
        self.quiet_since = self.quiet_since.max(now);
        match &mut self.dialect {
            Dialect::Known(_) => self.observe_known(line, now, out),
            Dialect::Detecting { held, bytes } => match detect(line.bytes()) {
                Detection::Malformed => {
                    self.counters.malformed += 1;
                    LineKind::Malformed
                }
                Detection::Found(rt) => {
                    self.settle_dialect(rt, out);
                    self.observe_known(line, now, out)
                }
                Detection::Undecided => {
                    held.push((line.bytes().to_vec(), now));
                    *bytes += line.bytes().len();
                    if held.len() >= DETECT_MAX_LINES || *bytes >= DETECT_MAX_BYTES {
                        // The seed contract's taxonomy is Pi's.
                        self.settle_dialect(Runtime::Pi, out);
                    }
                    LineKind::Held
                }
            },
        }
    }

    fn observe_known(
        &mut self,
        line: FramedLine<'_>,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) -> LineKind {
        let Dialect::Known(adapter) = &mut self.dialect else {
            return LineKind::Held;
        };
        // By reference: binding the observation out of the result copied
        // its 264 bytes on every line.
        match &adapter.observe_line(line) {
            Ok(obs) => {
                self.apply(obs, now, out);
                LineKind::Event
            }
            Err(_) => {
                self.counters.malformed += 1;
                LineKind::Malformed
            }
        }
    }

    fn settle_dialect(&mut self, rt: Runtime, out: &mut Vec<Transition>) {
        let held = match std::mem::replace(&mut self.dialect, Dialect::Known(Adapter::new(rt))) {
            Dialect::Detecting { held, .. } => held,
            Dialect::Known(a) => {
                self.dialect = Dialect::Known(a);
                return;
            }
        };
        // Held lines were counted in `lines` already; replay without recount.
        let lines_now = self.lines;
        for (i, (line, at)) in held.iter().enumerate() {
            self.lines = lines_now - (held.len() as u64) + i as u64;
            let _ = self.observe_known(FramedLine::new(line), *at, out);
        }
        self.lines = lines_now;
    }

    fn apply(&mut self, obs: &Observation<'_>, now: Timestamp, out: &mut Vec<Transition>) {
        self.counters.events += 1;
        self.last_event_at = Some(now);
        if obs.signal == Signal::Unknown {
            self.counters.unknown += 1;
        }
        if obs.turn {
            self.turns += 1;
        }
        let before = self.usage;
        obs.usage.apply_to(&mut self.usage);
        if let Some(facts) = &mut self.facts {
            if let Some(mut f) = line_facts(obs, &before, &self.usage, self.lines) {
                if f.tool.is_some() {
                    f.cwd = self.cwd.clone();
                }
                facts.push(f);
            }
        }
        if let Some(t) = &obs.tool {
            self.last_tool = Some(tool_record(t, now));
        }
        if let Some(e) = &obs.error {
            self.last_error = Some(tool::truncate(e));
        }
        // A sub-agent's request still waits for an answer: approvals are
        // kept before the sub-agent line is set aside.
        self.track_approvals(obs, now);
        if obs.subagent {
            return;
        }
        if let Signal::Session(h) = &obs.signal {
            let SessionHeader { id, cwd, model, .. } = &**h;
            self.session_id = id.as_ref().map(|s| s.to_string());
            if let Some(c) = cwd {
                self.cwd = Some(c.to_string());
            }
            if let Some(m) = model {
                self.model = Some(m.to_string());
            }
            self.last_error = None;
            self.exit = None;
        }
        if obs.signal == Signal::Blocked {
            self.blocked_reason = obs.reason.as_ref().map(|r| tool::truncate(r));
        }
        let line = self.lines;
        self.transition(&obs.signal, now, line, out);
    }

    /// Applies what one line says about approvals: the harness settling
    /// some (a new session settles all), then a new request.
    fn track_approvals(&mut self, obs: &Observation<'_>, now: Timestamp) {
        self.expire_approvals(now);
        let line = self.lines;
        let resolved = ApprovalOutcome::Expired {
            reason: ExpiryReason::Resolved,
        };
        let new_session = !obs.subagent && matches!(obs.signal, Signal::Session(_));
        // The harness settles only what it asked: an agent's own request
        // waits for its answer across turns and sessions.
        match &obs.resolves {
            _ if new_session => {
                self.close_approvals(from_harness, &resolved, now, line);
            }
            Resolves::Nothing => {}
            Resolves::Cancelled(id) => {
                let cancelled = ApprovalOutcome::Expired {
                    reason: ExpiryReason::Cancelled,
                };
                let asked = |a: &Approval| from_harness(a) && a.request_id == id.as_ref();
                self.close_approvals(asked, &cancelled, now, line);
            }
            Resolves::ToolUses(ids) => {
                let settled = |a: &Approval| {
                    a.tool_use_id
                        .as_deref()
                        .is_some_and(|t| ids.iter().any(|id| id.as_ref() == t))
                };
                self.close_approvals(settled, &resolved, now, line);
            }
            Resolves::All => {
                self.close_approvals(from_harness, &resolved, now, line);
            }
        }
        if let Some(req) = &obs.approval {
            self.open_approval(req, now, line);
        }
    }

    fn open_approval(&mut self, req: &ApprovalRequest<'_>, now: Timestamp, line: u64) {
        // The same request again (a harness that repeats itself) stays one.
        let again =
            |a: &Approval| a.request_id == req.request_id.as_ref() && a.channel == req.channel;
        if !req.request_id.is_empty() && self.approvals.pending.iter().any(again) {
            return;
        }
        let mut asked = self.approvals.pending.iter().filter(|a| from_harness(a));
        if asked.clone().count() >= MAX_PENDING_APPROVALS {
            let oldest = asked.next().map(|a| a.id.clone());
            let overflow = ApprovalOutcome::Expired {
                reason: ExpiryReason::Overflow,
            };
            self.close_approvals(|a| Some(&a.id) == oldest.as_ref(), &overflow, now, line);
        }
        let id = self.next_approval_id();
        let approval = Approval::from_request(id, req, now, line);
        self.approvals.pending.push(approval.clone());
        self.push_approval_event(ApprovalEvent::Opened(approval));
    }

    fn close_all_approvals(&mut self, reason: ExpiryReason, now: Timestamp, line: u64) {
        self.close_approvals(|_| true, &ApprovalOutcome::Expired { reason }, now, line);
    }

    /// Closes every pending approval `which` selects, in the order asked.
    fn close_approvals(
        &mut self,
        which: impl Fn(&Approval) -> bool,
        outcome: &ApprovalOutcome,
        now: Timestamp,
        line: u64,
    ) -> Vec<Approval> {
        if self.approvals.pending.is_empty() {
            return Vec::new();
        }
        let (closed, kept): (Vec<Approval>, Vec<Approval>) =
            std::mem::take(&mut self.approvals.pending)
                .into_iter()
                .partition(|a| which(a));
        self.approvals.pending = kept;
        for a in &closed {
            self.push_approval_event(ApprovalEvent::Closed {
                approval: a.clone(),
                outcome: outcome.clone(),
                at: now,
                line,
            });
        }
        closed
    }

    fn push_approval_event(&mut self, event: ApprovalEvent) {
        if self.approvals.events.len() >= MAX_APPROVAL_EVENTS {
            self.approvals.events.pop_front();
            self.approvals.events_dropped += 1;
        }
        self.approvals.events.push_back(event);
    }

    fn transition(
        &mut self,
        signal: &Signal<'_>,
        now: Timestamp,
        line: u64,
        out: &mut Vec<Transition>,
    ) {
        let next = state::apply(self.state, signal);
        if next == self.state {
            return;
        }
        if self.state == AgentState::Blocked {
            self.blocked_reason = None;
        }
        out.push(Transition {
            from: self.state,
            to: next,
            at: now,
            line,
        });
        self.state = next;
        self.state_since = now;
    }
}

/// One line's facts: the usage it added (a replaced running total counts
/// as its increase), its tool call and error.
/// The line's facts for the policies, or `None` for a line that can move
/// none of them ([`LineFacts::is_inert`]). Most lines of a stream (the
/// streamed deltas) are such lines, and are judged before anything is
/// built for them.
fn line_facts(
    obs: &Observation<'_>,
    before: &Usage,
    after: &Usage,
    line: u64,
) -> Option<LineFacts> {
    let usage = Usage {
        input_tokens: after.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: after.output_tokens.saturating_sub(before.output_tokens),
        cache_read_tokens: after
            .cache_read_tokens
            .saturating_sub(before.cache_read_tokens),
        cache_write_tokens: after
            .cache_write_tokens
            .saturating_sub(before.cache_write_tokens),
        cost_usd: (after.cost_usd - before.cost_usd).max(0.0),
    };
    let finished = !obs.subagent && obs.signal == Signal::Finished;
    if usage.is_zero() && obs.tool.is_none() && obs.error.is_none() && !obs.turn && !finished {
        return None;
    }
    let tool = obs.tool.as_ref().map(|t| {
        // The arguments when there are any: a write tool's path is in
        // them, and a shell tool's command is read out of them too.
        let mut facts = match (&t.command, t.args) {
            (_, Some(args)) => ToolFacts::new(&t.name, args.get()),
            (Some(cmd), None) => ToolFacts::new(&t.name, cmd),
            (None, None) => ToolFacts::new(&t.name, ""),
        };
        facts.gated = obs.tool_gated;
        facts
    });
    let facts = LineFacts {
        line,
        usage,
        cost_reported: after.cost_usd > 0.0,
        tool,
        error: obs.error.as_ref().map(|e| e.to_string()),
        turn: obs.turn,
        finished,
        cwd: None,
        bytes: 0,
    };
    debug_assert!(!facts.is_inert(), "an inert line passed the early test");
    Some(facts)
}

fn tool_record(t: &ToolCall<'_>, now: Timestamp) -> ToolRecord {
    let summary = match (&t.command, t.args) {
        (Some(cmd), _) => tool::summarize_command(cmd),
        (None, Some(args)) => tool::summarize_args(args),
        (None, None) => String::new(),
    };
    ToolRecord {
        name: tool::truncate(&t.name),
        summary,
        at: now,
    }
}

#[cfg(test)]
mod approval_tests {
    use super::*;
    use crate::core::approval::{encode_answer, ApprovalKind, ExpiryReason};

    fn pane(runtime: Runtime) -> Pane {
        Pane::new(
            PaneId("3f2a9c1d-0000-4000-8000-000000000001".into()),
            "agent".into(),
            Some(runtime),
            1 << 20,
            Timestamp::from_millis(1_000),
        )
    }

    fn feed(p: &mut Pane, line: &str, ms: u64) {
        let mut out = Vec::new();
        p.ingest_line(line.as_bytes(), Timestamp::from_millis(ms), &mut out);
    }

    /// The facts go into the buffer the caller lends, not a new one that
    /// grows line by line; a pane that holds one keeps it.
    #[test]
    fn facts_go_into_the_lent_buffer() {
        let mut p = pane(Runtime::Pi);
        p.record_facts_in(Vec::with_capacity(1000));
        for ms in 0..3 {
            feed(&mut p, r#"{"type":"turn_start"}"#, 2_000 + ms);
        }
        p.record_facts_in(Vec::new());
        feed(&mut p, r#"{"type":"turn_start"}"#, 2_010);
        let facts = p.take_facts();
        assert_eq!(facts.len(), 4);
        assert!(facts.iter().all(|f| f.turn));
        assert!(facts.capacity() >= 1000, "the lent buffer, kept");
        // Taken: the next read gets the buffer lent then.
        p.record_facts_in(facts);
        feed(&mut p, r#"{"type":"turn_start"}"#, 2_020);
        let again = p.take_facts();
        assert_eq!(again.len(), 1, "the lent buffer comes emptied");
        assert!(again.capacity() >= 1000);
    }

    /// Output is reported in steps of `OUTPUT_STEP` at the line that
    /// completes a step, whether the bytes came in one read (the daemon)
    /// or line by line (a fold of the log): both see the same facts.
    #[test]
    fn output_is_reported_in_steps_at_the_same_lines_however_it_is_read() {
        let line = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"xxxxxxxxxxxxxxxxxxxx"}}"#;
        let record = line.len() as u64 + LOG_RECORD_BYTES;
        let per_step = OUTPUT_STEP.div_ceil(record);
        let n = 3 * per_step + 7;
        let mut chunked = pane(Runtime::Pi);
        chunked.record_facts();
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(line);
            text.push('\n');
        }
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(4096) {
            chunked.ingest(chunk, Timestamp::from_millis(2_000), &mut out);
        }
        let mut by_line = pane(Runtime::Pi);
        by_line.record_facts();
        for _ in 0..n {
            feed(&mut by_line, line, 2_000);
        }
        let steps = |p: &mut Pane| -> Vec<(u64, u64)> {
            p.take_facts()
                .iter()
                .filter(|f| f.bytes > 0)
                .map(|f| (f.line, f.bytes))
                .collect()
        };
        let got = steps(&mut chunked);
        assert_eq!(got, steps(&mut by_line));
        let step = per_step * record;
        assert_eq!(
            got,
            [(per_step, step), (2 * per_step, step), (3 * per_step, step)]
        );
    }

    /// A malformed line is counted as its log record takes it, escapes
    /// and all: 1,000 control bytes are a record of 6,089 bytes, not 1,086.
    #[test]
    fn a_malformed_line_of_control_bytes_counts_as_its_escaped_record() {
        let mut p = pane(Runtime::Pi);
        p.record_facts();
        let line = [1u8; 1000];
        let record = 6 * 1000 + LOG_RECORD_BYTES + 3;
        let n = OUTPUT_STEP.div_ceil(record);
        let mut out = Vec::new();
        for _ in 0..n {
            p.ingest_line(&line, Timestamp::from_millis(2_000), &mut out);
        }
        let counted: u64 = p.take_facts().iter().map(|f| f.bytes).sum();
        assert_eq!(counted, n * record);
    }

    /// A program that printed no JSON has no runtime when it ends; lines
    /// held undecided are read as the seed's Pi.
    #[test]
    fn a_plain_program_ends_without_a_runtime_and_undecided_lines_are_pi() {
        let plain = |lines: &[&str]| {
            let mut p = Pane::new(
                PaneId("p".into()),
                "sh".into(),
                None,
                1 << 20,
                Timestamp::from_millis(1_000),
            );
            let mut out = Vec::new();
            for l in lines {
                p.ingest_line(l.as_bytes(), Timestamp::from_millis(1_001), &mut out);
            }
            p.exited(ExitStatus::Code(0), Timestamp::from_millis(1_002), &mut out);
            p.runtime()
        };
        assert_eq!(plain(&["y", "y", "hello"]), None);
        assert_eq!(plain(&[]), None);
        assert_eq!(plain(&[r#"{"hello":1}"#]), Some(Runtime::Pi));
    }

    /// Facts are made for the lines that can move a policy (a tool call,
    /// spend, a message start, an error, a finish) and for no other.
    #[test]
    fn only_lines_that_can_move_a_policy_leave_facts() {
        let mut p = pane(Runtime::Pi);
        p.record_facts();
        let lines = [
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"ok"}}"#,
            r#"{"type":"tool_execution_start","toolCallId":"t1","toolName":"bash","args":{"command":"ls"}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"ok"}}"#,
            r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":5,"output":7},"stopReason":"toolUse"}}"#,
            r#"{"type":"turn_start"}"#,
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"overloaded"}}"#,
            r#"{"type":"tool_execution_end","toolCallId":"t1","toolName":"bash"}"#,
        ];
        for (i, line) in lines.iter().enumerate() {
            feed(&mut p, line, 2_000 + i as u64);
        }
        let facts = p.take_facts();
        let got: Vec<(u64, bool, bool, bool, bool)> = facts
            .iter()
            .map(|f| {
                (
                    f.line,
                    f.tool.is_some(),
                    !f.usage.is_zero(),
                    f.turn,
                    f.error.is_some(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (2, true, false, false, false),
                (4, false, true, false, false),
                (5, false, false, true, false),
                (6, false, false, false, true),
            ]
        );
    }

    const PI_CONFIRM: &str = r#"{"type":"extension_ui_request","id":"ui-1","method":"confirm","title":"Push?","message":"to main","timeout":5000}"#;

    #[test]
    fn an_answer_closes_the_approval_and_is_recorded() {
        let mut p = pane(Runtime::Pi);
        feed(&mut p, PI_CONFIRM, 2_000);
        let a = p.pending_approvals()[0].clone();
        assert_eq!(a.id, "3f2a9c1d-1");
        assert_eq!(
            (a.kind, a.request_id.as_str()),
            (ApprovalKind::Confirm, "ui-1")
        );
        assert_eq!(a.asked_at, Timestamp::from_millis(2_000));
        assert_eq!(a.expires_at, Some(Timestamp::from_millis(7_000)));
        assert_eq!(p.state(), AgentState::Blocked);
        let reply = encode_answer(Runtime::Pi, &a, &Decision::Approve).expect("answerable");
        assert_eq!(
            reply,
            b"{\"type\":\"extension_ui_response\",\"id\":\"ui-1\",\"confirmed\":true}\n"
        );

        let closed = p.answered(&a.id, &Decision::Approve, Timestamp::from_millis(3_000));
        assert_eq!(closed.map(|c| c.id), Some(a.id.clone()));
        assert!(p.pending_approvals().is_empty());
        assert!(p
            .answered(&a.id, &Decision::Approve, Timestamp::from_millis(3_000))
            .is_none());
        let events = p.take_approval_events();
        assert_eq!(events.len(), 2);
        assert!(matches!(&events[0], ApprovalEvent::Opened(o) if o.id == a.id));
        assert!(matches!(
            &events[1],
            ApprovalEvent::Closed { outcome: ApprovalOutcome::Answered { decision: Decision::Approve }, at, .. }
                if *at == Timestamp::from_millis(3_000)
        ));
        assert!(p.take_approval_events().is_empty());
    }

    #[test]
    fn a_dialog_times_out_at_its_own_deadline() {
        let mut p = pane(Runtime::Pi);
        feed(&mut p, PI_CONFIRM, 2_000);
        assert_eq!(
            p.next_approval_expiry(),
            Some(Timestamp::from_millis(7_000))
        );
        assert_eq!(p.expire_approvals(Timestamp::from_millis(6_999)), 0);
        assert_eq!(p.expire_approvals(Timestamp::from_millis(7_000)), 1);
        assert_eq!(p.next_approval_expiry(), None);
        let events = p.take_approval_events();
        assert!(matches!(
            events.last(),
            Some(ApprovalEvent::Closed {
                outcome: ApprovalOutcome::Expired {
                    reason: ExpiryReason::TimedOut
                },
                ..
            })
        ));
    }

    #[test]
    fn a_repeated_request_stays_one_and_exit_expires_it() {
        let mut p = pane(Runtime::Pi);
        feed(&mut p, PI_CONFIRM, 2_000);
        feed(&mut p, PI_CONFIRM, 2_100);
        assert_eq!(p.pending_approvals().len(), 1);
        let mut out = Vec::new();
        p.exited(ExitStatus::Code(0), Timestamp::from_millis(4_000), &mut out);
        assert!(p.pending_approvals().is_empty());
        assert!(matches!(
            p.take_approval_events().last(),
            Some(ApprovalEvent::Closed {
                outcome: ApprovalOutcome::Expired {
                    reason: ExpiryReason::Exited
                },
                line: 0,
                ..
            })
        ));
    }

    #[test]
    fn pending_approvals_and_undrained_events_are_bounded() {
        let mut p = pane(Runtime::Claude);
        let total = MAX_APPROVAL_EVENTS + 10;
        for i in 0..total {
            let line = format!(
                r#"{{"type":"control_request","request_id":"req_{i}","request":{{"subtype":"can_use_tool","tool_name":"Bash","input":{{"command":"echo {i}"}},"tool_use_id":"toolu_{i}"}}}}"#
            );
            feed(&mut p, &line, 2_000);
        }
        assert_eq!(p.pending_approvals().len(), MAX_PENDING_APPROVALS);
        // The oldest were dropped; the newest is still answerable.
        let last = p.pending_approvals().last().expect("one pending");
        assert_eq!(last.request_id, format!("req_{}", total - 1));
        assert!(p.approvals.events_dropped > 0);
        assert_eq!(p.take_approval_events().len(), MAX_APPROVAL_EVENTS);
    }

    #[test]
    fn a_new_session_settles_what_the_old_one_asked() {
        let mut p = pane(Runtime::Claude);
        feed(
            &mut p,
            r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}"#,
            2_000,
        );
        feed(
            &mut p,
            r#"{"type":"system","subtype":"init","session_id":"s2","cwd":"/r"}"#,
            3_000,
        );
        assert!(p.pending_approvals().is_empty());
    }

    fn request(op: &str) -> AgentRequest {
        AgentRequest {
            operation: op.into(),
            reasoning: Some("a conflict".into()),
            task_id: Some(2),
            estimated_tokens: Some(8500),
        }
    }

    #[test]
    fn an_agents_request_is_numbered_with_the_harness_and_capped_not_dropped() {
        let mut p = pane(Runtime::Pi);
        feed(&mut p, PI_CONFIRM, 2_000);
        let a = p
            .request_approval(&request("merge PR #42"), Timestamp::from_millis(2_500))
            .expect("opened");
        assert_eq!(a.id, "3f2a9c1d-2", "numbered after the harness's");
        assert_eq!(a.channel, AnswerChannel::Reply);
        assert_eq!(a.title.as_deref(), Some("merge PR #42"));
        assert_eq!(a.message.as_deref(), Some("a conflict"));
        assert_eq!((a.task_id, a.estimated_tokens), (Some(2), Some(8500)));
        assert_eq!(a.line, 1, "asked after the first line");
        for n in 1..MAX_AGENT_APPROVALS {
            let opened =
                p.request_approval(&request(&format!("op {n}")), Timestamp::from_millis(3_000));
            assert!(opened.is_ok(), "request {n}");
        }
        assert_eq!(
            p.request_approval(&request("one too many"), Timestamp::from_millis(3_000)),
            Err(TooManyRequests)
        );
        // The harness's own approvals are bounded apart: a flood of them
        // drops its own oldest, never an agent's request.
        let mut c = pane(Runtime::Claude);
        c.request_approval(&request("keep me"), Timestamp::from_millis(1_500))
            .expect("opened");
        for i in 0..MAX_PENDING_APPROVALS + 3 {
            let line = format!(
                r#"{{"type":"control_request","request_id":"req_{i}","request":{{"subtype":"can_use_tool","tool_name":"Bash","input":{{"command":"echo {i}"}},"tool_use_id":"toolu_{i}"}}}}"#
            );
            feed(&mut c, &line, 2_000);
        }
        assert_eq!(c.pending_approvals().len(), MAX_PENDING_APPROVALS + 1);
        assert_eq!(c.pending_approvals()[0].title.as_deref(), Some("keep me"));
    }

    #[test]
    fn the_harness_settles_only_what_it_asked() {
        let mut p = pane(Runtime::Claude);
        p.request_approval(&request("deploy"), Timestamp::from_millis(1_500))
            .expect("opened");
        feed(
            &mut p,
            r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}"#,
            2_000,
        );
        // A cancel naming no request id, a turn's end, a new session.
        feed(
            &mut p,
            r#"{"type":"control_cancel_request","request_id":""}"#,
            2_100,
        );
        feed(
            &mut p,
            r#"{"type":"result","subtype":"success","is_error":false}"#,
            2_200,
        );
        feed(
            &mut p,
            r#"{"type":"system","subtype":"init","session_id":"s2","cwd":"/r"}"#,
            3_000,
        );
        let left: Vec<&str> = p
            .pending_approvals()
            .iter()
            .map(|a| a.title.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(left, ["deploy"]);
        // Its agent's end closes it.
        p.exited(
            ExitStatus::Code(0),
            Timestamp::from_millis(4_000),
            &mut Vec::new(),
        );
        assert!(p.pending_approvals().is_empty());
    }

    #[test]
    fn a_replay_opens_answers_and_expires_agents_requests_as_they_were() {
        use crate::core::approval::LoggedAnswer;
        let t = Timestamp::from_millis(2_000);
        let mut p = pane(Runtime::Pi);
        let asked = |id: &str, op: &str| LoggedApproval::Requested {
            approval: id.into(),
            request: request(op),
        };
        assert!(p.replay(&asked("aaaa1111-1", "first"), t).is_some());
        assert!(p.replay(&asked("aaaa1111-2", "second"), t).is_some());
        let answered = LoggedApproval::Answered(LoggedAnswer {
            approval: "aaaa1111-1".into(),
            decision: Decision::Deny { message: None },
            by: Some("operator".into()),
            uid: None,
        });
        let closed = p.replay(&answered, t).expect("the first answered");
        assert_eq!(closed.title.as_deref(), Some("first"));
        let expired = LoggedApproval::Expired {
            approval: "aaaa1111-2".into(),
            reason: ExpiryReason::TimedOut,
        };
        assert!(p.replay(&expired, t).is_some());
        assert!(p.replay(&expired, t).is_none(), "nothing left to expire");
        assert!(p.pending_approvals().is_empty());
        let outcomes: Vec<Option<ApprovalOutcome>> = p
            .take_approval_events()
            .into_iter()
            .map(|e| match e {
                ApprovalEvent::Opened(_) => None,
                ApprovalEvent::Closed { outcome, .. } => Some(outcome),
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                None,
                None,
                Some(ApprovalOutcome::Answered {
                    decision: Decision::Deny { message: None }
                }),
                Some(ApprovalOutcome::Expired {
                    reason: ExpiryReason::TimedOut
                }),
            ]
        );
    }
}
