//! `colibri attach PANE`: the agent's terminal, live.
//!
//! One socket carries everything (see `protocol::attach`): the reply
//! brings the recent output, frames bring the rest; typed bytes go back as
//! `attach-input` requests and window changes (SIGWINCH) as
//! `attach-resize`. Three threads, each blocking on one thing: the socket
//! (this one, writing to the terminal), the keyboard, and the signal.
//! Ctrl-] detaches, as in telnet: the socket is shut down and the agent
//! keeps running.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::cli::render::escape_controls;
use crate::cli::CliError;
use crate::client::{resolve_socket, ClientError};
use crate::protocol::attach::{self as wire, AttachFrame, AttachReply};
use crate::protocol::{AttachArgs, AttachInputArgs, AttachResizeArgs, Command};

/// Ctrl-]: detaches (never sent to the agent).
pub const DETACH_KEY: u8 = 0x1d;

/// What `attach` shows.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttachOptions {
    /// Render JSON lines readably instead of the raw terminal bytes.
    pub events: bool,
    /// Never ask for the input.
    pub read_only: bool,
}

/// Puts the terminal in raw mode for as long as it lives.
struct RawMode(bool);

impl RawMode {
    fn enter() -> RawMode {
        RawMode(crossterm::terminal::enable_raw_mode().is_ok())
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.0 {
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

type Writer = Arc<Mutex<UnixStream>>;

fn send(w: &Writer, v: &Command) -> io::Result<()> {
    let line = v.to_line().map_err(io::Error::other)?;
    let mut s = w.lock().map_err(|_| io::Error::other("writer poisoned"))?;
    s.write_all(&line)
}

pub fn run(socket: Option<&Path>, pane: &str, opts: AttachOptions) -> Result<u8, CliError> {
    let path = resolve_socket(socket);
    let stream = UnixStream::connect(&path).map_err(|source| ClientError::Connect {
        path: path.clone(),
        source,
    })?;
    let writer: Writer = Arc::new(Mutex::new(
        stream.try_clone().map_err(|e| CliError::io("socket", e))?,
    ));
    let size = terminal_size();
    let req = Command::Attach(AttachArgs {
        agent_id: pane.to_string(),
        input: Some(!opts.read_only),
        cols: size.map(|(cols, _)| cols),
        rows: size.map(|(_, rows)| rows),
    });
    send(&writer, &req).map_err(|e| CliError::io("sending attach", e))?;
    let mut reader = BufReader::new(stream);
    let reply = read_reply(&mut reader)?;
    let tty = crossterm::tty::IsTty::is_tty(&io::stdin());
    let raw = if tty { Some(RawMode::enter()) } else { None };
    // Not locked for the session: the keyboard thread echoes through it.
    let mut out = io::stdout();
    let mut screen = Screen::new(opts.events);
    let line_mode = Arc::new(AtomicBool::new(reply.line_mode));
    let role = if reply.input { "input" } else { "read only" };
    screen.note(
        &mut out,
        &format!("attached to {} ({role}); Ctrl-] detaches", reply.pane),
    )?;
    let recent = wire::decode(&reply.data).unwrap_or_default();
    screen.bytes(&mut out, &recent, reply.line_mode)?;
    // What is typed is echoed here in line mode (the agent's terminal does
    // not echo: the daemon's own input must not come back as output).
    let echo = if tty && reply.input {
        Some(Arc::clone(&line_mode))
    } else {
        None
    };
    spawn_keyboard(writer.clone(), reader.get_ref().try_clone().ok(), echo);
    if tty {
        spawn_resizer(writer.clone());
    }
    let code = follow(&mut reader, &mut screen, &mut out, &line_mode)?;
    drop(raw);
    Ok(code)
}

fn read_reply(reader: &mut impl BufRead) -> Result<AttachReply, CliError> {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| CliError::io("reading the attach reply", e))?;
    let v: Value = serde_json::from_str(&line)
        .map_err(|e| ClientError::Protocol(format!("bad attach reply: {e}")))?;
    if v.get("ok") != Some(&Value::Bool(true)) {
        let msg = v
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("attach failed");
        return Err(ClientError::Daemon(msg.to_string()).into());
    }
    serde_json::from_value(v.get("data").cloned().unwrap_or(Value::Null))
        .map_err(|e| ClientError::Protocol(format!("bad attach reply: {e}")).into())
}

/// Draws the stream until the daemon or the detach key closes it.
fn follow(
    reader: &mut impl BufRead,
    screen: &mut Screen,
    out: &mut impl Write,
    line_mode: &AtomicBool,
) -> Result<u8, CliError> {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The keyboard thread shut the socket down: a detach.
            Err(_) => break,
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v.get("attach").is_none() {
            // A reply to our input or resize: only failures matter.
            if v.get("ok") == Some(&Value::Bool(false)) {
                let msg = v.get("error").and_then(Value::as_str).unwrap_or("error");
                screen.note(out, msg)?;
            }
            continue;
        }
        match serde_json::from_value::<AttachFrame>(v) {
            Ok(AttachFrame::Output {
                data,
                line_mode: lines,
            }) => {
                line_mode.store(lines, Ordering::Relaxed);
                screen.bytes(out, &wire::decode(&data).unwrap_or_default(), lines)?
            }
            Ok(AttachFrame::Exited { code, signal }) => {
                let how = match (code, signal) {
                    (Some(c), _) => format!("code {c}"),
                    (_, Some(s)) => format!("signal {s}"),
                    _ => "unknown status".to_string(),
                };
                screen.note(out, &format!("the agent exited ({how}); Ctrl-] detaches"))?;
            }
            Ok(AttachFrame::Detached { reason }) => {
                screen.note(out, &format!("detached by the daemon: {reason}"))?;
                return Ok(1);
            }
            Err(_) => {}
        }
    }
    screen.note(out, "detached")?;
    Ok(0)
}

/// Reads the keyboard and forwards it; the detach key ends the session.
/// With `echo`, what is typed is shown while the agent's terminal is in
/// line mode.
fn spawn_keyboard(writer: Writer, socket: Option<UnixStream>, echo: Option<Arc<AtomicBool>>) {
    std::thread::spawn(move || {
        let mut stdin = io::stdin();
        let mut buf = [0u8; 4096];
        let mut line = LineEcho::default();
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let typed = &buf[..n];
            let detach = typed.iter().position(|b| *b == DETACH_KEY);
            let before = &typed[..detach.unwrap_or(n)];
            if echo.as_ref().is_some_and(|e| e.load(Ordering::Relaxed)) {
                let shown = line.echo(before);
                let _ = io::stdout().lock().write_all(&shown);
                let _ = io::stdout().flush();
            } else {
                line = LineEcho::default();
            }
            if !before.is_empty() {
                let req = Command::AttachInput(AttachInputArgs {
                    data: wire::encode(before),
                });
                if send(&writer, &req).is_err() {
                    return;
                }
            }
            if detach.is_some() {
                if let Some(s) = &socket {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
        }
    });
}

/// This terminal's size, when it has one: a terminal that reports 0x0 (a
/// serial console, some multiplexers' panes while they start) leaves the
/// agent's size as it is rather than having the attach refused.
fn terminal_size() -> Option<(u16, u16)> {
    usable_size(crossterm::terminal::size().ok()?)
}

fn usable_size((cols, rows): (u16, u16)) -> Option<(u16, u16)> {
    (cols > 0 && rows > 0).then_some((cols, rows))
}

/// Passes every window change on to the agent's PTY.
fn spawn_resizer(writer: Writer) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH])
    else {
        return;
    };
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if let Some((cols, rows)) = terminal_size() {
                let req = Command::AttachResize(AttachResizeArgs { cols, rows });
                if send(&writer, &req).is_err() {
                    return;
                }
            }
        }
    });
}

/// What a line-mode terminal would echo for typed bytes: the text, a new
/// line at Enter, Backspace erasing what this line typed, `^C` for an
/// interrupt. The agent's own terminal echoes nothing (see
/// `platform::TerminalMode`), so attach shows the operator their typing.
#[derive(Debug, Default)]
struct LineEcho {
    /// Characters typed on the current line (what Backspace may erase).
    typed: usize,
    /// Inside a key's escape sequence (an arrow, a function key): not shown.
    escape: Escape,
}

#[derive(Debug, Default, PartialEq)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Started,
    /// After ESC `[`: up to the final byte.
    Csi,
}

impl LineEcho {
    fn echo(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + 2);
        for &b in bytes {
            match self.escape {
                Escape::Started => {
                    self.escape = if b == b'[' || b == b'O' {
                        Escape::Csi
                    } else {
                        Escape::None
                    };
                    continue;
                }
                Escape::Csi => {
                    if (0x40..=0x7e).contains(&b) {
                        self.escape = Escape::None;
                    }
                    continue;
                }
                Escape::None => {}
            }
            match b {
                0x1b => self.escape = Escape::Started,
                b'\r' | b'\n' => {
                    out.extend_from_slice(b"\r\n");
                    self.typed = 0;
                }
                0x7f | 0x08 if self.typed > 0 => {
                    out.extend_from_slice(b"\x08 \x08");
                    self.typed -= 1;
                }
                0x7f | 0x08 => {}
                0x03 => {
                    out.extend_from_slice(b"^C\r\n");
                    self.typed = 0;
                }
                0x15 => {
                    out.extend(
                        std::iter::repeat_n(b"\x08 \x08".iter().copied(), self.typed).flatten(),
                    );
                    self.typed = 0;
                }
                // UTF-8 continuation bytes belong to the character begun.
                0x80..=0xbf => out.push(b),
                b if b >= 0x20 => {
                    out.push(b);
                    self.typed += 1;
                }
                // Other controls (arrows' escapes too) are not echoed.
                _ => {}
            }
        }
        out
    }
}

/// The local side of the terminal: raw bytes, or JSON lines rendered.
struct Screen {
    events: bool,
    partial: Vec<u8>,
    /// The last byte written was `\r` (a `\r\n` split across frames).
    after_cr: bool,
}

impl Screen {
    fn new(events: bool) -> Screen {
        Screen {
            events,
            partial: Vec::new(),
            after_cr: false,
        }
    }

    /// In line mode the program's `\n` is a new line; the attacher's raw
    /// terminal needs `\r\n` for it (what `ONLCR` would have written), or
    /// the output staircases. Raw output (a TUI's) is passed as it is.
    fn newlines(&mut self, bytes: &[u8], line_mode: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + 8);
        for &b in bytes {
            if line_mode && b == b'\n' && !self.after_cr {
                out.push(b'\r');
            }
            out.push(b);
            self.after_cr = b == b'\r';
        }
        out
    }

    fn note(&mut self, out: &mut impl Write, msg: &str) -> Result<(), CliError> {
        let text = format!("\r\n[colibri: {}]\r\n", escape_controls(msg));
        write_all(out, text.as_bytes())
    }

    fn bytes(
        &mut self,
        out: &mut impl Write,
        bytes: &[u8],
        line_mode: bool,
    ) -> Result<(), CliError> {
        if !self.events {
            let shown = self.newlines(bytes, line_mode);
            return write_all(out, &shown);
        }
        self.partial.extend_from_slice(bytes);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            let shown = format!("{}\r\n", render_event_line(text));
            write_all(out, shown.as_bytes())?;
        }
        Ok(())
    }
}

fn write_all(out: &mut impl Write, bytes: &[u8]) -> Result<(), CliError> {
    out.write_all(bytes).map_err(CliError::Stdout)?;
    out.flush().map_err(CliError::Stdout)
}

/// One agent line made readable: a JSON event as its type and its most
/// telling text field; anything else as the escaped line.
pub fn render_event_line(line: &str) -> String {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line) else {
        return escape_controls(line).into_owned();
    };
    let kind = ["type", "event", "kind", "hook_event_name"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))
        .unwrap_or("event");
    let detail = [
        "text", "message", "content", "delta", "name", "tool", "result", "error",
    ]
    .iter()
    .find_map(|k| map.get(*k).map(summary));
    let mut s = match detail {
        Some(d) => format!("{kind:>12}  {d}"),
        None => format!("{kind:>12}"),
    };
    if s.chars().count() > 200 {
        s = s.chars().take(199).collect::<String>() + "…";
    }
    escape_controls(&s).into_owned()
}

fn summary(v: &Value) -> String {
    match v {
        Value::String(s) => s.replace('\n', " "),
        Value::Object(m) => ["text", "name", "message", "type"]
            .iter()
            .find_map(|k| m.get(*k).map(summary))
            .unwrap_or_else(|| v.to_string()),
        Value::Array(a) => a.iter().map(summary).collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_of_no_size_sends_none() {
        assert_eq!(usable_size((0, 0)), None);
        assert_eq!(usable_size((80, 0)), None);
        assert_eq!(usable_size((120, 40)), Some((120, 40)));
    }

    #[test]
    fn line_mode_output_gets_its_carriage_returns_and_raw_output_none() {
        let mut s = Screen::new(false);
        assert_eq!(s.newlines(b"a\nb\r\nc\r", true), b"a\r\nb\r\nc\r");
        // A `\r\n` cut between two frames stays one.
        assert_eq!(s.newlines(b"\nd\n", true), b"\nd\r\n");
        assert_eq!(s.newlines(b"x\ny", false), b"x\ny");
    }

    #[test]
    fn typing_is_echoed_as_a_line_mode_terminal_would() {
        let mut e = LineEcho::default();
        assert_eq!(e.echo(b"hel"), b"hel");
        assert_eq!(e.echo(b"\x7f\x7fy"), b"\x08 \x08\x08 \x08y");
        assert_eq!(e.echo("é\r".as_bytes()), "é\r\n".as_bytes());
        // Nothing left on the new line to erase; a key's escape sequence
        // (an arrow, even cut between reads) is not shown.
        assert_eq!(e.echo(b"\x7f\x1b["), b"");
        assert_eq!(e.echo(b"Az"), b"z");
    }

    #[test]
    fn events_render_as_type_and_text() {
        let l = render_event_line(r#"{"type":"message_update","text":"hello\nworld"}"#);
        assert_eq!(l.trim(), "message_update  hello world");
        let l = render_event_line(r#"{"type":"tool","name":{"name":"bash"}}"#);
        assert!(l.ends_with("bash"), "{l}");
        assert_eq!(
            render_event_line("plain \u{1b}[31mtext"),
            "plain \\x1b[31mtext"
        );
    }
}
