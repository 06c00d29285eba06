//! `colibri fold`: fold a stream offline, without a daemon.
//!
//! The input is a plain agent JSONL stream or a recording (the samples and
//! session logs). A recording is unwrapped first: its `ev` and `raw` lines
//! become the agent's stream and its `exit` the process exit, and the
//! timeline's line numbers are mapped back to lines of the recording file
//! so they point at what the operator can open.

use crate::cli::recording::{self, Action, Clock};
use crate::cli::CliError;
use crate::core::approval::LoggedApproval;
use crate::core::ingest::is_blank;
use crate::core::pane::ExitStatus;
use crate::core::policy::Policies;
use crate::core::taxonomy::Runtime;
use crate::fold::{fold_answered, Attached, RecordedApproval};
use crate::protocol::{FoldHostop, FoldPrompt, FoldReport};

/// An input ready to fold.
#[derive(Debug, Default, PartialEq)]
pub struct Unwrapped {
    /// The agent's stream.
    pub stream: Vec<u8>,
    /// For each non-blank line of `stream`, its 1-based line in the input.
    /// Empty for plain input, whose numbering is already the input's.
    pub line_map: Vec<u64>,
    pub exit: Option<ExitStatus>,
    /// The exit was a planned stop (colibri ended the agent on purpose).
    pub planned_stop: bool,
    /// The approval records a session log kept (answers, agents' own
    /// requests and their expiries), at their place in `stream`.
    pub approval_records: Vec<RecordedApproval>,
    /// The host operations a session log recorded for the pane.
    pub hostops: Vec<FoldHostop>,
    /// The prompts the daemon wrote to the agent (the heartbeat), with
    /// their lines in the input.
    pub prompts: Vec<FoldPrompt>,
    /// The pane of a session log folded: the one asked for, or the first.
    pub pane: Option<String>,
    /// The log's other panes, in the order they first appear: each is an
    /// agent of its own, with its own approvals and exit, so their lines
    /// are left out (folded together they would be one made-up agent).
    pub other_panes: Vec<String>,
    /// Where the folded run started and its scope (its `attach` record).
    pub attached: Attached,
}

/// The working directory and scope an `attach` record names; a record
/// that does not say is a run with neither.
fn attached(line: &[u8]) -> Attached {
    #[derive(serde::Deserialize)]
    struct Record {
        #[serde(default)]
        cwd: Option<String>,
        #[serde(default)]
        scope: Vec<String>,
    }
    serde_json::from_slice::<Record>(line)
        .map(|r| Attached {
            cwd: r.cwd,
            scope: r.scope,
        })
        .unwrap_or_default()
}

/// A session log's approval record at `offset` of the stream. One that
/// cannot be read is skipped: the fold shows its approval as if it had not
/// been written.
fn recorded_approval(line: &[u8], offset: usize) -> Option<RecordedApproval> {
    let record = LoggedApproval::from_record(line).ok()??;
    Some(RecordedApproval { offset, record })
}

/// A session log's `colibri` `hostop` record on line `line`; `None` for
/// any other record, or one that cannot be read.
fn recorded_hostop(record: &[u8], line: u64) -> Option<FoldHostop> {
    #[derive(serde::Deserialize)]
    struct Record {
        colibri: String,
        op: String,
        #[serde(default)]
        params: std::collections::BTreeMap<String, String>,
        outcome: String,
        exit_code: Option<i32>,
        signal: Option<i32>,
    }
    let r: Record = serde_json::from_slice(record).ok()?;
    (r.colibri == "hostop").then_some(FoldHostop {
        line,
        op: r.op,
        params: r.params,
        outcome: r.outcome,
        exit_code: r.exit_code,
        signal: r.signal,
    })
}

/// A session log's `colibri` `prompt` record, on line `line` of the log.
fn recorded_prompt(line: &[u8], line_no: u64) -> Option<FoldPrompt> {
    #[derive(serde::Deserialize)]
    struct Prompt {
        colibri: String,
        by: String,
        text: String,
    }
    let p: Prompt = serde_json::from_slice(line).ok()?;
    (p.colibri == "prompt").then_some(FoldPrompt {
        line: line_no,
        by: p.by,
        text: p.text,
    })
}

/// Which pane's lines of a session log a fold takes.
struct PanePick<'w> {
    /// `--pane`: a pane id or the start of one.
    want: Option<&'w str>,
    chosen: Option<String>,
    others: Vec<String>,
}

impl PanePick<'_> {
    /// Whether a line of `pane` (`None`: of no pane) is folded.
    fn takes(&mut self, pane: Option<&str>) -> bool {
        let Some(p) = pane else { return true };
        match &self.chosen {
            Some(c) if c == p => return true,
            None if self.want.is_none_or(|w| p.starts_with(w)) => {
                self.chosen = Some(p.to_string());
                return true;
            }
            _ => {}
        }
        if !self.others.iter().any(|o| o == p) {
            self.others.push(p.to_string());
        }
        false
    }

    fn finish(self, out: &mut Unwrapped) -> Result<(), CliError> {
        if let Some(w) = self.want {
            let Some(chosen) = &self.chosen else {
                let seen = if self.others.is_empty() {
                    "no pane".to_string()
                } else {
                    self.others.join(", ")
                };
                return Err(CliError::Runtime(format!(
                    "fold: no pane {w:?} in this log (it holds {seen})"
                )));
            };
            let alike: Vec<&str> = self
                .others
                .iter()
                .filter(|o| o.starts_with(w))
                .map(String::as_str)
                .collect();
            if !alike.is_empty() {
                return Err(CliError::Runtime(format!(
                    "fold: --pane {w:?} names more than one pane ({chosen}, {}); give more of the id",
                    alike.join(", ")
                )));
            }
        }
        out.pane = self.chosen;
        out.other_panes = self.others;
        Ok(())
    }
}

/// Whether `input` is colibrid's task journal (`<state_dir>/tasks.jsonl`)
/// rather than an agent's stream: one of its first lines is a task event
/// or an orchestrator record (a torn or hand-edited first line must not
/// turn a journal into an empty agent stream).
pub fn is_task_journal(input: &[u8]) -> bool {
    input
        .split(|&b| b == b'\n')
        .filter(|l| !is_blank(l))
        .take(8)
        .any(crate::core::dispatch_replay::is_journal_line)
}

/// Unwraps a recording; returns plain input unchanged. Of a session log
/// with several panes, only the lines of `pane` (a pane id or its start),
/// or of the first pane, are taken.
pub fn unwrap_input(input: Vec<u8>, pane: Option<&str>) -> Result<Unwrapped, CliError> {
    let first = input.split(|&b| b == b'\n').find(|l| !is_blank(l));
    if !first.is_some_and(recording::is_recording_line) {
        if let Some(w) = pane {
            return Err(CliError::Runtime(format!(
                "fold: --pane {w:?} needs a session log; this is a plain stream"
            )));
        }
        return Ok(Unwrapped {
            stream: input,
            ..Unwrapped::default()
        });
    }
    let mut out = Unwrapped::default();
    let mut clock = Clock::default();
    let mut pick = PanePick {
        want: pane,
        chosen: None,
        others: Vec::new(),
    };
    // After the folded pane's exit the rest is read only for the panes it
    // names.
    let mut ended = false;
    // The folded pane's attach record was seen: another one is a restart.
    let mut started = false;
    for (i, line) in input.split(|&b| b == b'\n').enumerate() {
        let line_no = i as u64 + 1;
        if is_blank(line) {
            continue;
        }
        let entry = match clock.parse(line) {
            Ok(entry) => entry,
            Err(_) if ended => continue,
            Err(e) => return Err(CliError::Runtime(format!("fold: line {line_no}: {e}"))),
        };
        if !pick.takes(entry.pane.as_deref()) || ended {
            continue;
        }
        let text: &[u8] = match &entry.action {
            Action::Event(json) => json.as_bytes(),
            Action::Raw(text) => text.as_bytes(),
            Action::Exit(code) => {
                out.exit = Some(ExitStatus::Code(i32::try_from(*code).unwrap_or(i32::MAX)));
                ended = true;
                continue;
            }
            Action::Killed(sig) => {
                out.exit = Some(ExitStatus::Signal(i32::try_from(*sig).unwrap_or(i32::MAX)));
                ended = true;
                continue;
            }
            Action::Ended => {
                out.exit = Some(ExitStatus::Unknown);
                ended = true;
                continue;
            }
            Action::Stopped { code, signal } => {
                let narrow = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
                out.exit = Some(match (code, signal) {
                    (_, Some(sig)) => ExitStatus::Signal(narrow(*sig)),
                    (Some(c), None) => ExitStatus::Code(narrow(*c)),
                    (None, None) => ExitStatus::Unknown,
                });
                out.planned_stop = true;
                ended = true;
                continue;
            }
            // The pane started again (a restart): its first run is over,
            // and the next is a run of its own (the daemon starts its
            // pane afresh).
            Action::Attach if started || !out.stream.is_empty() => {
                ended = true;
                continue;
            }
            Action::Attach => {
                started = true;
                out.attached = attached(line);
                continue;
            }
            Action::Skip => {
                let record = recorded_approval(line, out.stream.len());
                out.approval_records.extend(record);
                out.hostops.extend(recorded_hostop(line, line_no));
                out.prompts.extend(recorded_prompt(line, line_no));
                continue;
            }
            Action::AwaitInput => continue,
        };
        // A raw text may hold several lines; each counts where the pane
        // would count it.
        for part in text.split(|&b| b == b'\n') {
            if !is_blank(part) {
                out.line_map.push(line_no);
            }
        }
        out.stream.extend_from_slice(text);
        out.stream.push(b'\n');
    }
    pick.finish(&mut out)?;
    Ok(out)
}

/// Folds `input` into a report (line numbers refer to `input`), under
/// the built-in policies.
pub fn fold_input(
    input: Vec<u8>,
    runtime: Option<Runtime>,
    max_line: usize,
    pane: Option<&str>,
) -> Result<FoldReport, CliError> {
    fold_input_governed(input, runtime, max_line, pane, Policies::default())
}

/// [`fold_input`] under the given policies (`colibri fold --config`).
pub fn fold_input_governed(
    input: Vec<u8>,
    runtime: Option<Runtime>,
    max_line: usize,
    pane: Option<&str>,
    policies: Policies,
) -> Result<FoldReport, CliError> {
    let u = unwrap_input(input, pane)?;
    let mut report = fold_answered(
        runtime,
        max_line,
        &u.stream,
        &u.approval_records,
        u.exit.map(|status| (status, u.planned_stop)),
        policies,
        &u.attached,
    );
    report.pane = u.pane.clone();
    report.other_panes = u.other_panes.clone();
    report.hostops = u.hostops.clone();
    report.prompts = u.prompts.clone();
    if !u.line_map.is_empty() {
        let to_file_line = |line: u64| {
            if line == 0 {
                return 0;
            }
            let idx = usize::try_from(line - 1).unwrap_or(usize::MAX);
            u.line_map.get(idx).copied().unwrap_or(line)
        };
        for step in &mut report.timeline {
            step.line = to_file_line(step.line);
        }
        for a in &mut report.approvals {
            a.line = to_file_line(a.line);
            a.closed_line = a.closed_line.map(to_file_line);
        }
        for verdict in &mut report.verdicts {
            verdict.line = to_file_line(verdict.line);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::AgentState;

    #[test]
    fn a_session_log_folds_to_the_state_the_daemon_had() {
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"p\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"name\":null,\"cwd\":null,\"argv\":[\"pi\"],\"generation\":0}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"p\",\"ev\":{\"type\":\"agent_start\"}}\n",
            "{\"ts\":\"2026-11-21T10:00:01.500Z\",\"pane\":\"p\",\"raw\":\"warning: something\"}\n",
            "{\"ts\":\"2026-11-21T10:00:02.000Z\",\"pane\":\"p\",\"colibri\":\"exit\",\"state\":\"error\",\"signal\":9}\n",
        );
        let r = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("folds");
        assert_eq!(r.state, AgentState::Error);
        assert_eq!(r.exit.and_then(|e| e.signal), Some(9));
        assert_eq!(r.counters.events, 1);
        assert_eq!(r.counters.malformed, 1);
    }

    #[test]
    fn a_heartbeat_prompt_in_the_log_shows_in_the_fold_at_its_line() {
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"p\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"argv\":[\"pi\"],\"generation\":0,\"system_prompt\":\"be brief\"}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"p\",\"ev\":{\"type\":\"agent_start\"}}\n",
            "{\"ts\":\"2026-11-21T10:10:01.000Z\",\"pane\":\"q\",\"colibri\":\"prompt\",\"by\":\"heartbeat\",\"text\":\"not this pane's\"}\n",
            "{\"ts\":\"2026-11-21T10:10:01.000Z\",\"pane\":\"p\",\"colibri\":\"prompt\",\"by\":\"heartbeat\",\"text\":\"run your loop\"}\n",
        );
        let r = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("folds");
        assert_eq!(
            r.prompts,
            [FoldPrompt {
                line: 4,
                by: "heartbeat".into(),
                text: "run your loop".into()
            }]
        );
        let text = crate::cli::render::fold_text(&r);
        assert!(
            text.contains("prompt:   line 4: heartbeat: run your loop"),
            "{text}"
        );
    }

    #[test]
    fn a_recording_folds_like_its_stream_with_file_line_numbers() {
        let rec = concat!(
            "{\"t\":0,\"ev\":{\"type\":\"session\",\"version\":3,\"id\":\"s1\",\"cwd\":\"/r\"}}\n",
            "{\"t\":5,\"await_input\":true}\n",
            "{\"t\":10,\"ev\":{\"type\":\"agent_start\"}}\n",
            "{\"t\":20,\"ev\":{\"type\":\"agent_end\",\"messages\":[],\"willRetry\":false}}\n",
            "{\"t\":30,\"ev\":{\"type\":\"agent_settled\"}}\n",
            "{\"t\":40,\"exit\":0}\n",
        );
        let r = fold_input(rec.as_bytes().to_vec(), None, 1 << 20, None).expect("folds");
        assert_eq!(r.state, AgentState::Done);
        assert_eq!(r.runtime, Some(Runtime::Pi));
        assert_eq!(r.session_id.as_deref(), Some("s1"));
        assert_eq!(r.exit.and_then(|e| e.code), Some(0));
        let steps: Vec<(u64, AgentState)> = r.timeline.iter().map(|s| (s.line, s.state)).collect();
        assert_eq!(
            steps,
            [
                (0, AgentState::Idle),
                (3, AgentState::Working),
                (5, AgentState::Done)
            ]
        );
    }

    /// A session log's `hostop` record (as the store writes it: the same
    /// text as its test) is listed with its line.
    #[test]
    fn a_logged_hostop_is_listed_in_the_fold() {
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"p1\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"argv\":[\"pi\"],\"generation\":0}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"p1\",\"ev\":{\"type\":\"agent_start\"}}\n",
            r#"{"ts":"2026-05-27T12:00:00.002Z","pane":"p1","colibri":"hostop","op":"zfs-snapshot","by":"agent:p1","params":{"name":"before \"x\""},"outcome":"failed","exit_code":3,"ms":12,"output_bytes":40}"#,
            "\n",
            "{\"ts\":\"2026-11-21T10:00:03.000Z\",\"pane\":\"other\",\"colibri\":\"hostop\",\"op\":\"x\",\"by\":\"agent:other\",\"outcome\":\"ok\",\"exit_code\":0,\"ms\":1,\"output_bytes\":0}\n",
        );
        let r = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("folds");
        assert_eq!(
            r.hostops,
            [FoldHostop {
                line: 3,
                op: "zfs-snapshot".into(),
                params: [("name".to_string(), "before \"x\"".to_string())].into(),
                outcome: "failed".into(),
                exit_code: Some(3),
                signal: None,
            }],
            "the other pane's is left out"
        );
        let text = crate::cli::render::fold_text(&r);
        assert!(
            text.contains("hostop:   line 3: zfs-snapshot name=before \"x\": failed (exit 3)"),
            "{text}"
        );
    }

    #[test]
    fn a_logged_answer_closes_its_approval_in_the_fold() {
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"name\":null,\"cwd\":null,\"argv\":[\"pi\"],\"generation\":0}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"3f2a9c1d-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"Go?\"}}\n",
            "{\"ts\":\"2026-11-21T10:00:02.000Z\",\"pane\":\"3f2a9c1d-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q2\",\"method\":\"confirm\",\"title\":\"Really?\"}}\n",
            "{\"ts\":\"2026-11-21T10:00:03.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"answer\",\"approval\":\"3f2a9c1d-2\",\"decision\":\"deny\",\"message\":\"no\",\"by\":\"operator\",\"uid\":1001}\n",
        );
        let report = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("fold");
        assert_eq!(report.approvals.len(), 2);
        assert_eq!(report.approvals[0].outcome, None, "q1 is still pending");
        let closed = report.approvals[1].outcome.as_ref().expect("q2 answered");
        assert_eq!(closed.event, "answered");
        assert_eq!(closed.decision.as_deref(), Some("deny"));
        assert_eq!(closed.message.as_deref(), Some("no"));
    }

    #[test]
    fn an_agents_own_requests_open_and_end_in_the_fold_where_they_were_logged() {
        // The agent asks twice, between a harness's dialog and its turn's
        // end: the first is approved, the second's wait runs out; the
        // harness's dialog is numbered between them, and the turn's end
        // settles only the harness's.
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"argv\":[\"pi\"],\"generation\":0}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"approval_request\",\"approval\":\"3f2a9c1d-1\",\"operation\":\"merge PR #42\",\"task_id\":2}\n",
            "{\"ts\":\"2026-11-21T10:00:02.000Z\",\"pane\":\"3f2a9c1d-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"Go?\"}}\n",
            "{\"ts\":\"2026-11-21T10:00:03.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"approval_request\",\"approval\":\"3f2a9c1d-3\",\"operation\":\"drop the table\"}\n",
            "{\"ts\":\"2026-11-21T10:00:04.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"answer\",\"approval\":\"3f2a9c1d-1\",\"decision\":\"approve\",\"by\":\"operator via board\"}\n",
            "{\"ts\":\"2026-11-21T10:00:05.000Z\",\"pane\":\"3f2a9c1d-0000\",\"ev\":{\"type\":\"agent_end\",\"messages\":[]}}\n",
            "{\"ts\":\"2026-11-21T10:00:06.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"approval_expired\",\"approval\":\"3f2a9c1d-3\",\"reason\":\"timed_out\"}\n",
        );
        let report = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("fold");
        let got: Vec<(&str, Option<&str>, Option<&str>)> = report
            .approvals
            .iter()
            .map(|a| {
                let o = a.outcome.as_ref();
                (
                    a.title.as_deref().unwrap_or(""),
                    a.channel.as_deref(),
                    o.and_then(|o| o.decision.as_deref().or(o.reason.as_deref())),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("merge PR #42", Some("reply"), Some("approve")),
                ("Go?", None, Some("resolved")),
                ("drop the table", Some("reply"), Some("timed_out")),
            ]
        );
    }

    #[test]
    fn a_guard_deny_of_a_pre_tool_use_closes_no_approval_in_the_fold() {
        // Even one whose tool call id reads like the approval's: the
        // `hook` mark, not the id's shape, says it answered no approval.
        let log = concat!(
            "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"name\":null,\"cwd\":null,\"argv\":[\"pi\"],\"generation\":0}\n",
            "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"3f2a9c1d-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"Go?\"}}\n",
            "{\"ts\":\"2026-11-21T10:00:02.000Z\",\"pane\":\"3f2a9c1d-0000\",\"colibri\":\"answer\",\"approval\":\"3f2a9c1d-1\",\"hook\":\"PreToolUse\",\"decision\":\"deny\",\"message\":\"colibri's command guard refused this (rm_outside_cwd): rm -rf /\",\"by\":\"policy\"}\n",
        );
        let u = unwrap_input(log.as_bytes().to_vec(), None).expect("unwrap");
        assert!(u.approval_records.is_empty(), "{:?}", u.approval_records);
        let report = fold_input(log.as_bytes().to_vec(), None, 1 << 20, None).expect("fold");
        assert_eq!(report.approvals.len(), 1);
        assert_eq!(report.approvals[0].outcome, None, "q1 is still pending");
    }

    /// Two panes of one session, interleaved: each asks one approval and
    /// exits its own way.
    const TWO_PANES: &str = concat!(
        "{\"ts\":\"2026-11-21T10:00:00.000Z\",\"pane\":\"aaaa1111-0000\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"argv\":[\"pi\"],\"generation\":0}\n",
        "{\"ts\":\"2026-11-21T10:00:00.100Z\",\"pane\":\"bbbb2222-0000\",\"colibri\":\"attach\",\"agent\":\"pi\",\"runtime\":\"pi\",\"argv\":[\"pi\"],\"generation\":0}\n",
        "{\"ts\":\"2026-11-21T10:00:01.000Z\",\"pane\":\"aaaa1111-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"A?\"}}\n",
        "{\"ts\":\"2026-11-21T10:00:01.500Z\",\"pane\":\"bbbb2222-0000\",\"ev\":{\"type\":\"extension_ui_request\",\"id\":\"q1\",\"method\":\"confirm\",\"title\":\"B?\"}}\n",
        "{\"ts\":\"2026-11-21T10:00:02.000Z\",\"pane\":\"bbbb2222-0000\",\"colibri\":\"answer\",\"approval\":\"bbbb2222-1\",\"decision\":\"approve\",\"by\":\"operator\"}\n",
        "{\"ts\":\"2026-11-21T10:00:03.000Z\",\"pane\":\"bbbb2222-0000\",\"colibri\":\"exit\",\"state\":\"error\",\"signal\":9}\n",
        "{\"ts\":\"2026-11-21T10:00:04.000Z\",\"pane\":\"aaaa1111-0000\",\"ev\":{\"type\":\"agent_start\"}}\n",
        "{\"ts\":\"2026-11-21T10:00:05.000Z\",\"pane\":\"aaaa1111-0000\",\"colibri\":\"exit\",\"state\":\"done\",\"code\":0}\n",
    );

    #[test]
    fn a_log_of_several_panes_folds_one_pane_and_names_the_others() {
        let first = fold_input(TWO_PANES.as_bytes().to_vec(), None, 1 << 20, None).expect("fold");
        assert_eq!(first.pane.as_deref(), Some("aaaa1111-0000"));
        assert_eq!(first.other_panes, ["bbbb2222-0000"]);
        // Its own approval, ended by its own exit: the other pane's answer
        // is not its, nor the other pane's kill its exit.
        assert_eq!(first.approvals.len(), 1);
        assert_eq!(first.approvals[0].line, 3);
        let ended = first.approvals[0].outcome.as_ref().expect("ended");
        assert_eq!(
            (ended.event.as_str(), ended.reason.as_deref()),
            ("expired", Some("exited"))
        );
        assert_eq!(first.exit.as_ref().and_then(|e| e.code), Some(0));
        let lines: Vec<u64> = first.timeline.iter().map(|s| s.line).collect();
        // Its own events' file lines; the exit comes from no line (0).
        assert_eq!(lines, [0, 3, 7, 0]);
        assert_eq!(first.state, crate::core::state::AgentState::Done);

        let second = fold_input(TWO_PANES.as_bytes().to_vec(), None, 1 << 20, Some("bbbb"))
            .expect("fold the second");
        assert_eq!(second.pane.as_deref(), Some("bbbb2222-0000"));
        assert_eq!(second.other_panes, ["aaaa1111-0000"]);
        assert_eq!(second.approvals.len(), 1);
        assert_eq!(second.approvals[0].line, 4);
        let answered = second.approvals[0].outcome.as_ref().expect("answered");
        assert_eq!(answered.event, "answered");
        assert_eq!(second.exit.as_ref().and_then(|e| e.signal), Some(9));
    }

    #[test]
    fn a_run_ends_at_its_lost_exit_or_at_the_panes_restart() {
        let line = |ms: u32, rest: &str| {
            format!(
                "{{\"ts\":\"2026-11-21T10:00:0{}.{:03}Z\",\"pane\":\"aaaa1111-0000\",{rest}}}\n",
                ms / 1000,
                ms % 1000
            )
        };
        let attach =
            r#""colibri":"attach","agent":"pi","runtime":"pi","argv":["pi"],"generation":0"#;
        let ask =
            r#""ev":{"type":"extension_ui_request","id":"q1","method":"confirm","title":"Go?"}"#;
        // The daemon crashed: recovery logged the lost agent's end with no
        // status. The restart's answer is to the restart's own approval.
        let lost = [
            line(0, attach),
            line(1000, ask),
            line(2000, r#""colibri":"exit","state":"error","reason":"lost""#),
            line(3000, attach),
            line(4000, ask),
            line(5000, r#""colibri":"answer","approval":"aaaa1111-1","decision":"approve","by":"operator""#),
        ]
        .concat();
        let r = fold_input(lost.clone().into_bytes(), None, 1 << 20, None).expect("fold");
        assert_eq!(
            r.exit,
            Some(crate::protocol::WireExit::from(ExitStatus::Unknown))
        );
        assert_eq!(r.approvals.len(), 1);
        let ended = r.approvals[0].outcome.as_ref().expect("ended by the loss");
        assert_eq!(
            ended.event, "expired",
            "not answered by the next run's answer"
        );
        // No end record at all: the restart's attach ends the first run.
        let cut: String = lost
            .lines()
            .filter(|l| !l.contains("\"exit\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = fold_input(cut.into_bytes(), None, 1 << 20, None).expect("fold");
        assert_eq!(r.approvals.len(), 1);
        assert_eq!(
            r.approvals[0].outcome, None,
            "the next run's answer is not its"
        );
        assert_eq!(
            r.timeline.last().map(|s| s.line),
            Some(2),
            "nothing past the restart"
        );
    }

    #[test]
    fn a_pane_not_in_the_log_or_named_ambiguously_is_an_error() {
        let fold = |pane| fold_input(TWO_PANES.as_bytes().to_vec(), None, 1 << 20, Some(pane));
        let missing = fold("cccc").expect_err("no such pane").to_string();
        assert!(missing.contains("no pane \"cccc\""), "{missing}");
        assert!(
            missing.contains("aaaa1111-0000, bbbb2222-0000"),
            "{missing}"
        );
        let twice = fold("").expect_err("ambiguous").to_string();
        assert!(twice.contains("more than one pane"), "{twice}");
        let plain = fold_input(
            b"{\"type\":\"agent_start\"}\n".to_vec(),
            None,
            1 << 20,
            Some("a"),
        )
        .expect_err("a plain stream has no panes")
        .to_string();
        assert!(plain.contains("plain stream"), "{plain}");
    }

    #[test]
    fn plain_input_is_not_touched() {
        let u = unwrap_input(b"{\"type\":\"agent_start\"}\n".to_vec(), None).expect("plain");
        assert_eq!(
            u,
            Unwrapped {
                stream: b"{\"type\":\"agent_start\"}\n".to_vec(),
                ..Unwrapped::default()
            }
        );
    }
}
