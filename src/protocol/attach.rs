//! The wire types of `attach`: a client joins an agent's terminal.
//!
//! The socket stays NDJSON for every client. After the `attach` reply,
//! (which carries the recent output) the daemon writes one [`AttachFrame`] per line: the PTY's bytes as
//! base64 (a PTY carries any bytes, JSON strings carry only UTF-8), and a
//! last frame when the attacher is dropped. The client keeps sending
//! request lines on the same connection (`attach-input`, `attach-resize`);
//! their replies are ordinary reply lines (with `ok`) between the frames.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachArgs {
    pub agent_id: String,
    /// Ask to own the input (granted when nobody else owns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<bool>,
    /// The attacher's window, passed to the PTY when it owns the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachInputArgs {
    /// The bytes typed, base64.
    pub data: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachResizeArgs {
    pub cols: u16,
    pub rows: u16,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachReply {
    pub attached: bool,
    pub pane: String,
    /// Whether this client owns the input; the others read only.
    pub input: bool,
    /// How many bytes of recent output `data` holds.
    pub backlog: usize,
    /// The recent output (the pane's ring), base64: what the screen was
    /// showing before the live frames that follow.
    pub data: String,
    /// The terminal is in line mode (canonical input, no output
    /// processing; `platform::TerminalMode`): a `\n` the program writes
    /// is a new line, which the attacher's own terminal (raw, for the
    /// keys) needs as `\r\n`, and nothing typed is echoed by the agent's
    /// terminal. False once the program takes the terminal raw (a TUI).
    #[serde(default)]
    pub line_mode: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachInputReply {
    pub written: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachResizeReply {
    pub cols: u16,
    pub rows: u16,
}

/// One line of the attach stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "attach", rename_all = "snake_case")]
pub enum AttachFrame {
    /// PTY output, base64; `line_mode` as in [`AttachReply`], read when
    /// the output was.
    Output {
        data: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        line_mode: bool,
    },
    /// The agent's process ended; the stream stays open (a restart may
    /// follow) until the client leaves.
    Exited {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// The daemon stopped serving this attacher (it fell behind, or the
    /// pane is gone); the connection closes after this line.
    Detached { reason: String },
}

impl AttachFrame {
    pub fn output(bytes: &[u8], line_mode: bool) -> AttachFrame {
        AttachFrame::Output {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            line_mode,
        }
    }

    /// The frame as one line, with its `\n`.
    pub fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// Decodes base64 from a frame or an `attach-input` request.
pub fn decode(data: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("data is not base64: {e}"))
}

/// Encodes bytes for an `attach-input` request.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_frames_carry_any_bytes() {
        let bytes = [0u8, 0xff, b'\n', 0x1b, b'['];
        let line = AttachFrame::output(&bytes, false).line();
        assert_eq!(line.last(), Some(&b'\n'));
        let back: AttachFrame = serde_json::from_slice(&line).expect("parses");
        let AttachFrame::Output { data, .. } = back else {
            panic!("not output");
        };
        assert_eq!(decode(&data).expect("decodes"), bytes);
        assert!(String::from_utf8_lossy(&line).starts_with(r#"{"attach":"output","data":"#));
    }
}
