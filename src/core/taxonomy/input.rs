//! What a harness reads on its input when the daemon (a policy, the
//! heartbeat) has a message for its agent: Pi's RPC `prompt` command, a
//! Claude `stream-json` user message, else a plain line. And how a harness
//! takes a system prompt on its command line ([`system_prompt_args`]).
//! Pure, beside the adapters that read each harness's output, so one
//! dialect lives in one place (`core::approval::encode_answer` writes the
//! approvals' replies).

use super::Runtime;

/// Pi's RPC `prompt` command.
#[derive(serde::Serialize)]
struct PiPrompt<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

/// A Claude `stream-json` user message.
#[derive(serde::Serialize)]
struct ClaudeUser<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: ClaudeContent<'a>,
}

#[derive(serde::Serialize)]
struct ClaudeContent<'a> {
    role: &'static str,
    content: &'a str,
}

/// The message as the harness reads it on its input: Pi's RPC `prompt`
/// command, a Claude `stream-json` user message, else a line of text.
pub fn input_message(runtime: Option<Runtime>, text: &str) -> Vec<u8> {
    let json = match runtime {
        Some(Runtime::Pi) => serde_json::to_string(&PiPrompt {
            kind: "prompt",
            message: text,
        }),
        Some(Runtime::Claude) => serde_json::to_string(&ClaudeUser {
            kind: "user",
            message: ClaudeContent {
                role: "user",
                content: text,
            },
        }),
        _ => Ok(text.replace('\n', " ")),
    };
    // Serialising borrowed strings cannot fail; a plain line if it did.
    let mut line = json.unwrap_or_else(|_| text.replace('\n', " "));
    line.push('\n');
    line.into_bytes()
}

/// What interrupts the agent's turn on its input: Pi's RPC `abort`, a
/// Claude `stream-json` `interrupt` control request, else ETX (Ctrl-C,
/// which the terminal of a harness that reads lines turns into SIGINT).
pub fn interrupt_input(runtime: Option<Runtime>) -> Vec<u8> {
    match runtime {
        Some(Runtime::Pi) => b"{\"type\":\"abort\"}\n".to_vec(),
        Some(Runtime::Claude) => b"{\"type\":\"control_request\",\"request_id\":\"colibri-interrupt\",\"request\":{\"subtype\":\"interrupt\"}}\n".to_vec(),
        _ => vec![0x03],
    }
}

/// What makes the harness compact its context: Pi's RPC `compact`
/// command, else the `/compact` slash command as a prompt (Claude Code's
/// own, and a plain message to a harness without one).
pub fn compact_input(runtime: Option<Runtime>) -> Vec<u8> {
    match runtime {
        Some(Runtime::Pi) => b"{\"type\":\"compact\"}\n".to_vec(),
        _ => input_message(runtime, "/compact"),
    }
}

/// The flag Pi, Claude Code and zot take a system prompt addition with:
/// added to the harness's own prompt, which stays. Each reads it anywhere
/// on its command line (Pi 0.73 and zot parse every argument; Claude Code
/// 2.1 is a commander program; zot's `rpc` must stay first, so it is
/// appended, not inserted).
pub const APPEND_SYSTEM_PROMPT: &str = "--append-system-prompt";

/// The arguments that give `runtime`'s harness `prompt` as (an addition
/// to) its system prompt, to append to its argv; `None` where the harness
/// has no way to take one on its command line.
///
/// - Pi, Claude Code, zot: `--append-system-prompt TEXT`. (Pi reads a
///   file instead when TEXT is the path of one that exists.)
/// - Codex: `-c developer_instructions="TEXT"`, a config override whose
///   value is read as TOML, so TEXT goes as a TOML string (a bare value
///   such as `true` would be refused as no string); Codex 0.171 sends it
///   as a developer message ahead of its own (checked with `codex debug
///   prompt-input`).
/// - Gemini CLI: none. `GEMINI_SYSTEM_MD` names a file that *replaces*
///   its whole system prompt.
/// - OpenCode: none. Its `instructions` config lists files; an agent's
///   `prompt` replaces the agent's.
pub fn system_prompt_args(runtime: Runtime, prompt: &str) -> Option<[String; 2]> {
    match runtime {
        Runtime::Pi | Runtime::Claude | Runtime::Zot => {
            Some([APPEND_SYSTEM_PROMPT.to_owned(), prompt.to_owned()])
        }
        Runtime::Codex => Some([
            "-c".to_owned(),
            format!("developer_instructions={}", toml_string(prompt)),
        ]),
        Runtime::Gemini | Runtime::OpenCode => None,
    }
}

/// `text` as a TOML basic string: quotes, backslashes and the control
/// characters TOML forbids raw (C0 and DEL) escaped.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_harness_takes_a_system_prompt_its_own_way() {
        for rt in [Runtime::Pi, Runtime::Claude, Runtime::Zot] {
            assert_eq!(
                system_prompt_args(rt, "be brief"),
                Some(["--append-system-prompt".to_owned(), "be brief".to_owned()]),
                "{rt:?}"
            );
        }
        assert_eq!(
            system_prompt_args(Runtime::Codex, "say \"hi\"\nthen\\stop\u{7f}"),
            Some([
                "-c".to_owned(),
                r#"developer_instructions="say \"hi\"\nthen\\stop\u007F""#.to_owned()
            ])
        );
        // A value TOML would read as another type stays a string.
        assert_eq!(
            system_prompt_args(Runtime::Codex, "true").map(|a| a[1].clone()),
            Some(r#"developer_instructions="true""#.to_owned())
        );
        assert_eq!(system_prompt_args(Runtime::Gemini, "x"), None);
        assert_eq!(system_prompt_args(Runtime::OpenCode, "x"), None);
    }

    #[test]
    fn the_codex_value_reads_back_as_the_prompt() {
        let prompt = "tabs\there, \u{1} and \u{7f}, quotes \" and \\ and é";
        let Some([_, arg]) = system_prompt_args(Runtime::Codex, prompt) else {
            panic!("codex takes a prompt");
        };
        let table: toml::Table = toml::from_str(&arg).expect("a TOML key = value");
        assert_eq!(table["developer_instructions"].as_str(), Some(prompt));
    }

    #[test]
    fn interrupt_and_compact_are_each_harness_own() {
        let pi: serde_json::Value =
            serde_json::from_slice(&interrupt_input(Some(Runtime::Pi))).expect("json");
        assert_eq!(pi, serde_json::json!({"type": "abort"}));
        let claude: serde_json::Value =
            serde_json::from_slice(&interrupt_input(Some(Runtime::Claude))).expect("json");
        assert_eq!(claude["request"]["subtype"], "interrupt");
        assert_eq!(interrupt_input(Some(Runtime::Codex)), [0x03]);
        let pi: serde_json::Value =
            serde_json::from_slice(&compact_input(Some(Runtime::Pi))).expect("json");
        assert_eq!(pi, serde_json::json!({"type": "compact"}));
        let claude: serde_json::Value =
            serde_json::from_slice(&compact_input(Some(Runtime::Claude))).expect("json");
        assert_eq!(claude["message"]["content"], "/compact");
        assert_eq!(compact_input(None), b"/compact\n");
    }

    #[test]
    fn the_message_is_the_harness_prompt_where_it_reads_json() {
        let pi: serde_json::Value =
            serde_json::from_slice(&input_message(Some(Runtime::Pi), "stop")).expect("json");
        assert_eq!(pi, serde_json::json!({"type": "prompt", "message": "stop"}));
        let claude: serde_json::Value =
            serde_json::from_slice(&input_message(Some(Runtime::Claude), "stop")).expect("json");
        assert_eq!(claude["message"]["content"], "stop");
        assert_eq!(input_message(Some(Runtime::Codex), "a\nb"), b"a b\n");
        assert_eq!(input_message(None, "x"), b"x\n");
    }
}
