//! Offline folding of a recorded stream: what `colibri fold` prints and
//! what the fixture tests assert.
//!
//! A recording has no clock, so every line is stamped with one fixed time;
//! the timeline is reported by line number instead.

use std::time::Duration;

use crate::core::approval::{ApprovalEvent, LoggedApproval};
use crate::core::pane::{ExitStatus, Pane, PaneId, Transition};
use crate::core::policy::{Governor, PaneInfo, Policies, Verdict};
use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::protocol::{
    fold_approvals, FoldReport, FoldStep, WireCounters, WireExit, WireTool, WireUsage, WireVerdict,
};

/// What a session log's `attach` record says of the run folded: where it
/// ran and its scope, as the daemon judged its tool calls by them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attached {
    pub cwd: Option<String>,
    pub scope: Vec<String>,
}

/// An approval record a session log kept (a `colibri` `answer`,
/// `approval_request` or `approval_expired` record), after `offset` bytes
/// of the stream.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedApproval {
    pub offset: usize,
    pub record: LoggedApproval,
}

/// Folds `bytes` with the approval records the daemon kept, each replayed
/// where it happened (`Pane::replay`, as the daemon's recovery does), so
/// the approvals agents asked for open, and those answered or expired
/// close, in the fold too. `exit` is how the run
/// ended, and whether colibri stopped it on purpose (as the daemon folds a
/// planned stop: `Pane::stopped`). `attached` is the run's start as its
/// log recorded it (a plain stream has none: `Attached::default()`).
pub fn fold_answered(
    runtime: Option<Runtime>,
    max_line: usize,
    bytes: &[u8],
    records: &[RecordedApproval],
    exit: Option<(ExitStatus, bool)>,
    policies: Policies,
    attached: &Attached,
) -> FoldReport {
    let t0 = Timestamp::from_millis(0);
    let mut pane = Pane::new(PaneId("fold".into()), "fold".into(), runtime, max_line, t0);
    // As the daemon starts a pane: in its directory, which a harness's
    // header may then replace.
    pane.set_cwd(attached.cwd.clone());
    pane.record_facts();
    let scope = attached.scope.as_slice();
    let mut governor = Governor::new(policies);
    let mut verdicts: Vec<Verdict> = Vec::new();
    let mut transitions: Vec<Transition> = Vec::new();
    let mut approvals: Vec<ApprovalEvent> = Vec::new();
    let mut at = 0;
    for r in records {
        let end = r.offset.clamp(at, bytes.len());
        pane.ingest(&bytes[at..end], t0, &mut transitions);
        govern(&mut pane, scope, &mut governor, t0, &mut verdicts);
        at = end;
        pane.replay(&r.record, t0);
        approvals.extend(pane.take_approval_events());
    }
    pane.ingest(&bytes[at..], t0, &mut transitions);
    match exit {
        Some((status, true)) => pane.stopped(status, t0, &mut transitions),
        Some((status, false)) => pane.exited(status, t0, &mut transitions),
        None => pane.finish_stream(t0, &mut transitions),
    }
    approvals.extend(pane.take_approval_events());
    govern(&mut pane, scope, &mut governor, t0, &mut verdicts);
    let mut report = report(&pane, &transitions, &approvals);
    report.verdicts = verdicts.iter().map(WireVerdict::from).collect();
    report
}

/// Folds `chunks` (a stream cut anywhere) into a report, under the default
/// policies (the guard and loop detection; no budgets). `exit`, when given,
/// is folded in after the stream as the daemon would on process exit;
/// without it the stream's end is still flushed (a last line without `\n`).
pub fn fold_chunks<'a>(
    runtime: Option<Runtime>,
    max_line: usize,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    exit: Option<ExitStatus>,
) -> (Pane, FoldReport) {
    fold_chunks_governed(runtime, max_line, chunks, exit, Policies::default())
}

/// [`fold_chunks`] under the given policies.
pub fn fold_chunks_governed<'a>(
    runtime: Option<Runtime>,
    max_line: usize,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    exit: Option<ExitStatus>,
    policies: Policies,
) -> (Pane, FoldReport) {
    let t0 = Timestamp::from_millis(0);
    let mut pane = Pane::new(PaneId("fold".into()), "fold".into(), runtime, max_line, t0);
    pane.record_facts();
    let mut governor = Governor::new(policies);
    let mut verdicts: Vec<Verdict> = Vec::new();
    let mut transitions: Vec<Transition> = Vec::new();
    // Drained after every chunk, as the daemon would, so none is dropped.
    let mut approvals: Vec<ApprovalEvent> = Vec::new();
    for c in chunks {
        pane.ingest(c, t0, &mut transitions);
        approvals.extend(pane.take_approval_events());
        govern(&mut pane, &[], &mut governor, t0, &mut verdicts);
    }
    match exit {
        Some(status) => pane.exited(status, t0, &mut transitions),
        None => pane.finish_stream(t0, &mut transitions),
    }
    approvals.extend(pane.take_approval_events());
    govern(&mut pane, &[], &mut governor, t0, &mut verdicts);
    let mut report = report(&pane, &transitions, &approvals);
    report.verdicts = verdicts.iter().map(WireVerdict::from).collect();
    (pane, report)
}

/// Runs the policies over the lines the pane took in since the last call.
fn govern(
    pane: &mut Pane,
    scope: &[String],
    governor: &mut Governor,
    now: Timestamp,
    out: &mut Vec<Verdict>,
) {
    let info = PaneInfo {
        id: pane.id.to_string(),
        name: pane.name.clone(),
        runtime: pane.runtime().map(|r| r.as_str().to_string()),
        model: pane.model().map(str::to_string),
        cwd: pane.cwd().map(str::to_string),
        scope: scope.to_vec(),
        ..PaneInfo::default()
    };
    for facts in pane.take_facts() {
        out.extend(governor.observe(&info, &facts, now));
    }
}

/// Folds one whole buffer.
pub fn fold_bytes(
    runtime: Option<Runtime>,
    max_line: usize,
    bytes: &[u8],
    exit: Option<ExitStatus>,
) -> FoldReport {
    fold_chunks(runtime, max_line, [bytes], exit).1
}

fn report(pane: &Pane, transitions: &[Transition], approvals: &[ApprovalEvent]) -> FoldReport {
    let mut timeline = vec![FoldStep {
        line: 0,
        state: AgentState::Idle,
    }];
    timeline.extend(transitions.iter().map(|t| FoldStep {
        line: t.line,
        state: t.to,
    }));
    FoldReport {
        pane: None,
        other_panes: Vec::new(),
        state: pane.state(),
        // Stall is silence on a live stream; a recording is never stalled.
        stalled: pane.is_stalled(Timestamp::from_millis(0), Duration::MAX),
        runtime: pane.runtime(),
        session_id: pane.session_id().map(str::to_string),
        cwd: pane.cwd().map(str::to_string),
        usage: WireUsage::from(pane.usage()),
        counters: WireCounters::from(pane.counters()),
        timeline,
        last_tool: pane.last_tool().map(WireTool::from),
        last_error: pane.last_error().map(str::to_string),
        blocked_reason: pane.blocked_reason().map(str::to_string),
        exit: pane.exit().map(WireExit::from),
        approvals: fold_approvals(approvals),
        verdicts: Vec::new(),
        hostops: Vec::new(),
        prompts: Vec::new(),
    }
}
