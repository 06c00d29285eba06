//! What a harness reads on its input when the daemon (a policy) has a
//! message for its agent: Pi's RPC `prompt` command, a Claude
//! `stream-json` user message, else a plain line. Pure, beside the
//! adapters that read each harness's output, so one dialect lives in one
//! place (`core::approval::encode_answer` writes the approvals' replies).

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

#[cfg(test)]
mod tests {
    use super::*;

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
