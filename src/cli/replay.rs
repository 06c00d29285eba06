//! `colibri replay`: play a recording back as a fake agent.
//!
//! The demo and the integration tests spawn `colibri replay FILE` under the
//! daemon, so this must behave like a real agent on a PTY: one line per
//! write, flushed at once, paced by the recording's clock, blocking on stdin
//! where the recording waited for a human. Timing is scheduled against the
//! start (not summed per line) so pacing does not drift, and time spent
//! waiting for input shifts the rest of the schedule.

use std::io::{self, BufRead, Write};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::recording::{self, Action, Clock};
use crate::cli::CliError;
use crate::core::ingest::is_blank;

#[derive(Copy, Clone, Debug)]
pub struct ReplayOptions {
    /// Every delay is divided by this (> 0).
    pub speed: f64,
    /// Delay between lines of a plain JSONL file.
    pub interval: Duration,
}

/// Plays `input` to `out`, reading answers from `answers`. Returns the exit
/// code the recording asks for (0 when it has none).
pub fn replay(
    input: &mut impl BufRead,
    answers: &mut impl BufRead,
    out: &mut impl Write,
    opts: ReplayOptions,
) -> Result<u8, CliError> {
    let mut player = Player {
        start: Instant::now(),
        shift: Duration::ZERO,
        speed: opts.speed,
    };
    let mut clock = Clock::default();
    let mut recording: Option<bool> = None;
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut printed_plain = false;
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(|e| CliError::io("cannot read the recording", e))?;
        if n == 0 {
            return Ok(0);
        }
        line_no += 1;
        let line = strip_newline(&buf);
        if is_blank(line) {
            continue;
        }
        let is_recording = *recording.get_or_insert_with(|| recording::is_recording_line(line));
        if !is_recording {
            // Plain JSONL: the first line at once, then one per interval.
            if printed_plain {
                player.pause(opts.interval);
            }
            emit(out, line)?;
            printed_plain = true;
            continue;
        }
        let entry = clock
            .parse(line)
            .map_err(|e| CliError::Runtime(format!("replay: line {line_no}: {e}")))?;
        player.wait_until(entry.at_ms);
        match entry.action {
            Action::Event(json) => emit(out, json.as_bytes())?,
            Action::Raw(text) => emit(out, text.as_bytes())?,
            Action::AwaitInput => {
                let waited = Instant::now();
                await_line(answers).map_err(|e| CliError::io("cannot read stdin", e))?;
                player.shift += waited.elapsed();
            }
            Action::Exit(code) => return Ok(recording::exit_code(code)),
            // As a shell reports a death by signal.
            Action::Killed(sig)
            | Action::Stopped {
                signal: Some(sig), ..
            } => return Ok(recording::exit_code(128 + sig)),
            Action::Stopped { code, .. } => return Ok(recording::exit_code(code.unwrap_or(0))),
            // A player plays one agent's lines: the log's own records of
            // runs are not its to act on.
            Action::Skip | Action::Ended | Action::Attach => {}
        }
    }
}

struct Player {
    start: Instant,
    /// Time spent waiting for input, added to every later due time.
    shift: Duration,
    speed: f64,
}

impl Player {
    fn scaled(&self, ms: f64) -> Duration {
        Duration::try_from_secs_f64(ms / 1000.0 / self.speed).unwrap_or(Duration::MAX)
    }

    fn wait_until(&self, at_ms: f64) {
        let due = self.start.checked_add(self.shift + self.scaled(at_ms));
        if let Some(due) = due {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
        }
    }

    fn pause(&self, d: Duration) {
        thread::sleep(self.scaled(d.as_secs_f64() * 1000.0));
    }
}

fn strip_newline(buf: &[u8]) -> &[u8] {
    let buf = buf.strip_suffix(b"\n").unwrap_or(buf);
    buf.strip_suffix(b"\r").unwrap_or(buf)
}

/// Writes one line and flushes it, as an agent on a PTY would.
fn emit(out: &mut impl Write, line: &[u8]) -> Result<(), CliError> {
    out.write_all(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

/// Consumes one line of input (ended by `\n`, `\r` or `\r\n`, since a PTY in
/// raw mode passes Enter through as `\r`), or returns at end of input.
fn await_line(input: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                let crlf = buf[i] == b'\r' && buf.get(i + 1) == Some(&b'\n');
                input.consume(i + 1 + usize::from(crlf));
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(recording: &str, answers: &str, speed: f64) -> (Result<u8, CliError>, String) {
        let mut out = Vec::new();
        let opts = ReplayOptions {
            speed,
            interval: Duration::from_millis(1),
        };
        let code = replay(
            &mut recording.as_bytes(),
            &mut answers.as_bytes(),
            &mut out,
            opts,
        );
        (code, String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn recording_prints_events_and_raw_then_exits_with_its_code() {
        let rec = "{\"t\":0,\"ev\":{\"type\":\"a\",\"z\":1,\"b\":[1, 2]}}\n\n{\"t\":1,\"raw\":\"plain text\"}\n{\"t\":2,\"exit\":3}\n{\"t\":3,\"raw\":\"never\"}\n";
        let (code, out) = run(rec, "", 1000.0);
        assert_eq!(code.ok(), Some(3));
        assert_eq!(out, "{\"type\":\"a\",\"z\":1,\"b\":[1, 2]}\nplain text\n");
    }

    #[test]
    fn plain_jsonl_is_printed_as_is() {
        let (code, out) = run("{\"type\":\"x\"}\r\nnot json\n{\"type\":\"y\"}", "", 1.0);
        assert_eq!(code.ok(), Some(0));
        assert_eq!(out, "{\"type\":\"x\"}\nnot json\n{\"type\":\"y\"}\n");
    }

    #[test]
    fn a_bad_recording_line_is_an_error_naming_it() {
        let (code, out) = run("{\"t\":0,\"ev\":{}}\n{\"type\":\"x\"}\n", "", 1.0);
        assert_eq!(out, "{}\n");
        match code {
            Err(CliError::Runtime(m)) => assert!(m.contains("line 2"), "{m}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn await_line_accepts_every_line_ending() {
        let mut input: &[u8] = b"yes\r\nno\rmaybe\nrest";
        await_line(&mut input).expect("first");
        assert_eq!(input, b"no\rmaybe\nrest");
        await_line(&mut input).expect("second");
        assert_eq!(input, b"maybe\nrest");
        await_line(&mut input).expect("third");
        assert_eq!(input, b"rest");
        await_line(&mut input).expect("eof");
        assert!(input.is_empty());
    }
}
