//! `colibri fold`: fold a stream offline, without a daemon.
//!
//! The input is a plain agent JSONL stream or a recording (the samples and
//! session logs). A recording is unwrapped first: its `ev` and `raw` lines
//! become the agent's stream and its `exit` the process exit, and the
//! timeline's line numbers are mapped back to lines of the recording file
//! so they point at what the operator can open.

use crate::cli::recording::{self, Action, Clock};
use crate::cli::CliError;
use crate::core::ingest::is_blank;
use crate::core::pane::ExitStatus;
use crate::core::taxonomy::Runtime;
use crate::fold::fold_bytes;
use crate::protocol::FoldReport;

/// An input ready to fold.
#[derive(Debug, Default, PartialEq)]
pub struct Unwrapped {
    /// The agent's stream.
    pub stream: Vec<u8>,
    /// For each non-blank line of `stream`, its 1-based line in the input.
    /// Empty for plain input, whose numbering is already the input's.
    pub line_map: Vec<u64>,
    pub exit: Option<ExitStatus>,
}

/// Unwraps a recording; returns plain input unchanged.
pub fn unwrap_input(input: Vec<u8>) -> Result<Unwrapped, CliError> {
    let first = input.split(|&b| b == b'\n').find(|l| !is_blank(l));
    if !first.is_some_and(recording::is_recording_line) {
        return Ok(Unwrapped {
            stream: input,
            line_map: Vec::new(),
            exit: None,
        });
    }
    let mut out = Unwrapped::default();
    let mut clock = Clock::default();
    for (i, line) in input.split(|&b| b == b'\n').enumerate() {
        let line_no = i as u64 + 1;
        if is_blank(line) {
            continue;
        }
        let entry = clock
            .parse(line)
            .map_err(|e| CliError::Runtime(format!("fold: line {line_no}: {e}")))?;
        let text: &[u8] = match &entry.action {
            Action::Event(json) => json.as_bytes(),
            Action::Raw(text) => text.as_bytes(),
            Action::Exit(code) => {
                out.exit = Some(ExitStatus::Code(i32::try_from(*code).unwrap_or(i32::MAX)));
                break;
            }
            Action::Killed(sig) => {
                out.exit = Some(ExitStatus::Signal(i32::try_from(*sig).unwrap_or(i32::MAX)));
                break;
            }
            Action::AwaitInput | Action::Skip => continue,
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
    Ok(out)
}

/// Folds `input` into a report (line numbers refer to `input`).
pub fn fold_input(
    input: Vec<u8>,
    runtime: Option<Runtime>,
    max_line: usize,
) -> Result<FoldReport, CliError> {
    let u = unwrap_input(input)?;
    let mut report = fold_bytes(runtime, max_line, &u.stream, u.exit);
    if !u.line_map.is_empty() {
        let map = |line: u64| match line {
            0 => 0,
            n => {
                let idx = usize::try_from(n - 1).unwrap_or(usize::MAX);
                u.line_map.get(idx).copied().unwrap_or(n)
            }
        };
        for step in &mut report.timeline {
            step.line = map(step.line);
        }
        for verdict in &mut report.verdicts {
            verdict.line = map(verdict.line);
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
        let r = fold_input(log.as_bytes().to_vec(), None, 1 << 20).expect("folds");
        assert_eq!(r.state, AgentState::Error);
        assert_eq!(r.exit.and_then(|e| e.signal), Some(9));
        assert_eq!(r.counters.events, 1);
        assert_eq!(r.counters.malformed, 1);
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
        let r = fold_input(rec.as_bytes().to_vec(), None, 1 << 20).expect("folds");
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

    #[test]
    fn plain_input_is_not_touched() {
        let u = unwrap_input(b"{\"type\":\"agent_start\"}\n".to_vec()).expect("plain");
        assert_eq!(
            u,
            Unwrapped {
                stream: b"{\"type\":\"agent_start\"}\n".to_vec(),
                line_map: vec![],
                exit: None
            }
        );
    }
}
