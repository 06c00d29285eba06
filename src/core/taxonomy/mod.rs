//! One taxonomy, many harnesses.
//!
//! Each submodule is the adapter for one agent's JSONL dialect. An adapter
//! parses only the fields it needs (borrowing from the line, skipping the
//! rest), keeps the little per-pane memory its dialect requires (the last
//! stop reason, usage already counted), and returns an [`Observation`].
//! The state machine in `core::state` never sees a harness-specific name.

use std::borrow::Cow;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::ingest::FramedLine;
use crate::core::signal::{Observation, Signal};

pub mod claude;
pub mod codex;
pub mod detect;
pub(crate) mod fields;
pub mod gemini;
pub mod input;
pub mod opencode;
pub mod pi;
pub mod zot;

/// The agent harnesses colibri understands, by their wire names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Pi,
    Zot,
    Claude,
    Codex,
    Gemini,
    OpenCode,
}

impl Runtime {
    pub const ALL: [Runtime; 6] = [
        Runtime::Pi,
        Runtime::Zot,
        Runtime::Claude,
        Runtime::Codex,
        Runtime::Gemini,
        Runtime::OpenCode,
    ];

    /// Whether `argv` asks a harness for JSON lines on its input, whatever
    /// runtime the spawn named (or did not): Claude Code's `--input-format
    /// stream-json`, Pi's `--mode rpc`. Such an agent needs a raw terminal
    /// from the start: Claude prints nothing before its first input, so its
    /// runtime is not detected in time for it.
    pub fn argv_reads_json_input(argv: &[String]) -> bool {
        let flag_is = |flag: &str, value: &str| {
            argv.windows(2).any(|w| w[0] == flag && w[1] == value)
                || argv.iter().any(|a| *a == format!("{flag}={value}"))
        };
        flag_is("--input-format", "stream-json") || flag_is("--mode", "rpc")
    }

    /// Whether `argv` asks for input that must come through a pipe, not a
    /// terminal: Claude Code's `--input-format stream-json` refuses a
    /// terminal as stdin ("Input must be provided either through stdin or
    /// as a prompt argument", Claude Code 2.1.332). Pi's `--mode rpc` reads
    /// its terminal fine and keeps it.
    pub fn argv_needs_piped_input(argv: &[String]) -> bool {
        argv.windows(2)
            .any(|w| w[0] == "--input-format" && w[1] == "stream-json")
            || argv.iter().any(|a| a == "--input-format=stream-json")
    }

    /// Whether colibri writes JSON lines to this harness's input (Pi's RPC
    /// commands, Claude's stream-json user messages), which its terminal
    /// must pass whatever their length (`platform::TerminalMode::Raw`).
    pub const fn reads_json_input(self) -> bool {
        matches!(self, Runtime::Pi | Runtime::Claude)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Runtime::Pi => "pi",
            Runtime::Zot => "zot",
            Runtime::Claude => "claude",
            Runtime::Codex => "codex",
            Runtime::Gemini => "gemini",
            Runtime::OpenCode => "opencode",
        }
    }

    pub fn parse(s: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The line is not a JSON object (invalid UTF-8, invalid JSON, or a
/// scalar/array at top level, or an object without a usable `type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Malformed;

/// A harness adapter with its per-pane memory.
#[derive(Debug)]
pub enum Adapter {
    Pi(pi::PiState),
    Zot(zot::ZotState),
    Claude(claude::ClaudeState),
    Codex(codex::CodexState),
    Gemini(gemini::GeminiState),
    OpenCode(opencode::OpenCodeState),
}

impl Adapter {
    pub fn new(runtime: Runtime) -> Adapter {
        match runtime {
            Runtime::Pi => Adapter::Pi(Default::default()),
            Runtime::Zot => Adapter::Zot(Default::default()),
            Runtime::Claude => Adapter::Claude(Default::default()),
            Runtime::Codex => Adapter::Codex(Default::default()),
            Runtime::Gemini => Adapter::Gemini(Default::default()),
            Runtime::OpenCode => Adapter::OpenCode(Default::default()),
        }
    }

    pub fn runtime(&self) -> Runtime {
        match self {
            Adapter::Pi(_) => Runtime::Pi,
            Adapter::Zot(_) => Runtime::Zot,
            Adapter::Claude(_) => Runtime::Claude,
            Adapter::Codex(_) => Runtime::Codex,
            Adapter::Gemini(_) => Runtime::Gemini,
            Adapter::OpenCode(_) => Runtime::OpenCode,
        }
    }

    /// Interprets one complete, non-blank line.
    #[inline]
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        self.observe_line(FramedLine::new(line))
    }

    /// [`Adapter::observe`] for a framed line, whose text (when the framer
    /// checked it) spares Pi's reader a UTF-8 check of its own.
    #[inline]
    pub fn observe_line<'a>(
        &mut self,
        framed: FramedLine<'a>,
    ) -> Result<Observation<'a>, Malformed> {
        let line = framed.bytes();
        match self {
            Adapter::Pi(s) => s.observe_line(framed),
            Adapter::Zot(s) => s.observe(line),
            Adapter::Claude(s) => s.observe(line),
            Adapter::Codex(s) => s.observe(line),
            Adapter::Gemini(s) => s.observe(line),
            Adapter::OpenCode(s) => s.observe(line),
        }
    }

    /// Takes over from the adapter of the pane's earlier process what the
    /// next process's stream builds on (Codex's running total of a resumed
    /// thread); nothing for the others, or across harnesses.
    pub fn carry_over(&mut self, earlier: &Adapter) {
        if let (Adapter::Codex(now), Adapter::Codex(before)) = (self, earlier) {
            now.carry_over(before);
        }
    }

    /// The signal for the agent's process exit. Most harnesses leave this
    /// to the exit status; Pi in JSON mode exits 0 even when its last
    /// message failed, and OpenCode after a rejected permission stopped its
    /// run, so their adapters turn that exit into a failure.
    pub fn on_exit(&mut self, success: bool) -> Signal<'static> {
        match self {
            Adapter::Pi(s) => s.on_exit(success),
            Adapter::OpenCode(s) => s.on_exit(success),
            _ => Signal::Exited { success },
        }
    }
}

/// The few fields [`is_stream_delta`] and [`is_turn_boundary`] look at.
#[derive(Deserialize)]
struct KindProbe<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    /// A bool on Gemini `message`, a string on zot `text_delta`.
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    hook_event_name: Option<Cow<'a, str>>,
}

fn probe(line: &[u8]) -> Option<KindProbe<'_>> {
    from_object(line).ok()
}

/// True for a streaming-delta line: one that only repeats or extends what a
/// later line states in full, so a log compactor may drop it without losing
/// state, usage or tool records.
pub fn is_stream_delta(runtime: Runtime, line: &[u8]) -> bool {
    let Some(p) = probe(line) else {
        return false;
    };
    let Some(kind) = p.kind.as_deref() else {
        return false;
    };
    match runtime {
        Runtime::Pi => matches!(kind, "message_update" | "tool_execution_update"),
        Runtime::Zot => matches!(kind, "text_delta" | "tool_use_args" | "tool_progress"),
        // `thinking_tokens` only estimates what the message usage states.
        Runtime::Claude => {
            kind == "stream_event"
                || (kind == "system" && p.subtype.as_deref() == Some("thinking_tokens"))
        }
        Runtime::Codex => matches!(kind, "item.updated" | "item.plan.delta"),
        Runtime::Gemini => kind == "message" && p.delta.is_some_and(|d| d.get() == "true"),
        // OpenCode prints finished parts only.
        Runtime::OpenCode => false,
    }
}

/// True for a line that starts or ends a turn (one model call or prompt
/// round, per the dialect); the session store cuts and counts logs there.
pub fn is_turn_boundary(runtime: Runtime, line: &[u8]) -> bool {
    let Some(p) = probe(line) else {
        return false;
    };
    if runtime == Runtime::Claude {
        if let Some(hook) = p.hook_event_name.as_deref() {
            return matches!(hook, "UserPromptSubmit" | "Stop" | "StopFailure");
        }
    }
    let Some(kind) = p.kind.as_deref() else {
        return false;
    };
    match runtime {
        Runtime::Pi | Runtime::Zot => matches!(kind, "turn_start" | "turn_end"),
        Runtime::Claude => {
            kind == "result" || (kind == "system" && p.subtype.as_deref() == Some("init"))
        }
        Runtime::Codex => matches!(kind, "turn.started" | "turn.completed" | "turn.failed"),
        Runtime::Gemini => match kind {
            "init" | "result" => true,
            "message" => p.role.as_deref() == Some("user"),
            _ => false,
        },
        Runtime::OpenCode => matches!(kind, "step_start" | "step_finish"),
    }
}

/// Parses a line that must be one JSON object. serde's derived structs also
/// accept a JSON array (fields by position), which no harness prints, so the
/// first byte is checked before parsing.
pub(crate) fn from_object<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Result<T, Malformed> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(Malformed);
    }
    serde_json::from_slice(line).map_err(|_| Malformed)
}

/// A JSON string as text; `None` for any other JSON value.
pub(crate) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()
}

/// Reads an optional text field leniently: JavaScript harnesses print lone
/// UTF-16 surrogate escapes (`"\ud83d"`) when a stream splits an emoji,
/// which serde refuses as `str`, costing the whole line. Read as bytes
/// instead, they come back with each lone surrogate as U+FFFD.
pub(crate) fn de_text_lenient<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct TextVisitor;

    impl<'de> Visitor<'de> for TextVisitor {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_string())))
        }
        fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
            Ok(Some(match std::str::from_utf8(v) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => Cow::Owned(lossy_wtf8(v)),
            }))
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(lossy_wtf8(v))))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }

    d.deserialize_bytes(TextVisitor)
}

/// serde_json hands a lone surrogate over as its 3-byte WTF-8 form
/// (`ED A0..BF 80..BF`), which `from_utf8_lossy` would turn into three
/// U+FFFD: here it is one, like any other invalid sequence.
fn lossy_wtf8(v: &[u8]) -> String {
    const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();
    let mut fixed = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if let [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..] = v[i..] {
            fixed.extend_from_slice(REPLACEMENT);
            i += 3;
        } else {
            fixed.push(v[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&fixed).into_owned()
}

/// A JSON string as text, lone surrogates as U+FFFD; `None` for any other
/// JSON value.
pub(crate) fn raw_str_lenient(raw: &RawValue) -> Option<Cow<'_, str>> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de_text_lenient(&mut de).ok().flatten()
}

/// Reads a token count leniently: harnesses written in JavaScript may print
/// `12.0` or `null` where a count belongs, and one odd number must not cost
/// the whole line. Negative and non-finite values count as 0.
pub(crate) fn de_count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct CountVisitor;

    impl<'de> Visitor<'de> for CountVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a token count")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            Ok(u64::try_from(v).unwrap_or(0))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            // `as` saturates at u64::MAX and maps NaN to 0.
            Ok(if v > 0.0 { v as u64 } else { 0 })
        }
        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
        fn visit_none<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
    }

    d.deserialize_any(CountVisitor)
}

/// An error message that carries an API error body as JSON, as harnesses
/// pass provider errors through: Codex's whole message is the body, Pi's is
/// `400 {"type":"error","error":{…}}` (the SDK's status and body), Gemini
/// CLI's `{"error":{"code":400,"message":"…","status":"…"}}`, at times
/// inside `[API Error: …]` or a list. The inner message is kept, with
/// ` (HTTP <status>)` when a status is known; text without a readable body
/// stays as it is.
pub(crate) fn readable_error(msg: Cow<'_, str>) -> Cow<'_, str> {
    let Some(start) = msg.find('{') else {
        return msg;
    };
    let Some((inner, code)) = api_error_message(&msg[start..], 0) else {
        return msg;
    };
    let code = code.or_else(|| leading_status(&msg[..start]));
    Cow::Owned(match code {
        Some(c) => format!("{inner} (HTTP {c})"),
        None => inner,
    })
}

#[derive(Deserialize)]
struct ApiErrorBody<'a> {
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
}

/// The message inside the first JSON object of `text` (what follows it is
/// ignored), and an HTTP status if the body states one. A message that is
/// itself such a body is read in turn, a few levels deep.
fn api_error_message(text: &str, depth: u8) -> Option<(String, Option<u64>)> {
    let raw = serde_json::Deserializer::from_str(text)
        .into_iter::<&RawValue>()
        .next()?
        .ok()?;
    let body = serde_json::from_str::<ApiErrorBody<'_>>(raw.get()).ok()?;
    let status = |v: Option<&RawValue>| v.and_then(|r| r.get().parse::<u64>().ok());
    let mut code = status(body.status).or_else(|| status(body.code));
    let msg = match body.error {
        Some(e) => match raw_str(e) {
            Some(s) => s.into_owned(),
            None => {
                let inner = serde_json::from_str::<ApiErrorBody<'_>>(e.get()).ok()?;
                code = code
                    .or_else(|| status(inner.code))
                    .or_else(|| status(inner.status));
                inner.message?.into_owned()
            }
        },
        None => body.message?.into_owned(),
    };
    match msg.find('{') {
        Some(i) if depth < 3 => match api_error_message(&msg[i..], depth + 1) {
            Some((m, c)) => Some((m, c.or(code))),
            None => Some((msg, code)),
        },
        _ => Some((msg, code)),
    }
}

/// An HTTP status written before the body (`400 {…}`, `got status: 429 …`).
fn leading_status(prefix: &str) -> Option<u64> {
    prefix
        .split(|c: char| !c.is_ascii_digit())
        .find(|w| w.len() == 3)
        .and_then(|w| w.parse().ok())
        .filter(|c| (100..600).contains(c))
}

/// Reads a USD amount leniently: `null` and non-finite values are 0.
pub(crate) fn de_cost<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    Ok(v.filter(|c| c.is_finite()).unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_body_in_an_error_message_becomes_its_message() {
        let r = |m: &str| readable_error(Cow::Borrowed(m)).into_owned();
        // Pi 0.73.1 over the Anthropic SDK: status, then the body.
        assert_eq!(
            r(
                r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"},"request_id":"req_1"}"#
            ),
            "prompt is too long (HTTP 400)"
        );
        // Gemini CLI 0.61.0: the Gemini API's body, also wrapped.
        assert_eq!(
            r(
                r#"{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}"#
            ),
            "Resource has been exhausted (HTTP 429)"
        );
        assert_eq!(
            r(
                r#"[API Error: [{"error":{"code":400,"message":"API key not valid","status":"INVALID_ARGUMENT"}}]]"#
            ),
            "API key not valid (HTTP 400)"
        );
        // A body whose message is itself a body.
        assert_eq!(
            r(r#"{"error":{"message":"{\"error\":{\"message\":\"quota\",\"code\":403}}"}}"#),
            "quota (HTTP 403)"
        );
        for plain in ["Connection error.", "{not json", "bad {x} here", ""] {
            assert_eq!(r(plain), plain);
        }
    }

    #[test]
    fn only_claudes_stream_json_input_asks_for_a_pipe() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Runtime::argv_needs_piped_input(&a(&[
            "claude",
            "-p",
            "--input-format",
            "stream-json"
        ])));
        assert!(Runtime::argv_needs_piped_input(&a(&[
            "claude",
            "--input-format=stream-json"
        ])));
        assert!(!Runtime::argv_needs_piped_input(&a(&[
            "claude", "-p", "hi"
        ])));
        assert!(!Runtime::argv_needs_piped_input(&a(&[
            "pi", "--mode", "rpc"
        ])));
    }

    #[test]
    fn an_argv_that_asks_for_json_input_is_known_before_any_output() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Runtime::argv_reads_json_input(&argv(&[
            "claude",
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json"
        ])));
        assert!(Runtime::argv_reads_json_input(&argv(&[
            "claude",
            "--input-format=stream-json"
        ])));
        assert!(Runtime::argv_reads_json_input(&argv(&[
            "pi", "--mode", "rpc"
        ])));
        assert!(!Runtime::argv_reads_json_input(&argv(&[
            "pi", "--mode", "json", "fix it"
        ])));
        assert!(!Runtime::argv_reads_json_input(&argv(&[
            "sh",
            "-c",
            "echo --mode rpc"
        ])));
    }

    #[test]
    fn a_pi_dialog_whose_title_splits_an_emoji_is_blocked() {
        let mut a = Adapter::new(Runtime::Pi);
        for line in [
            br#"{"type":"extension_ui_request","id":"1","method":"confirm","title":"Delete build/? \ud83d"}"#.as_slice(),
            br#"{"type":"extension_ui_request","id":"2","method":"select","message":"\udc00 pick"}"#.as_slice(),
        ] {
            let obs = a.observe(line).expect("not malformed");
            assert!(matches!(obs.signal, Signal::Blocked), "{:?}", obs.signal);
            let reason = obs.reason.as_deref().unwrap_or("");
            assert_eq!(reason.matches('\u{FFFD}').count(), 1, "{reason:?}");
        }
    }

    #[test]
    fn stream_deltas_by_dialect() {
        assert!(is_stream_delta(
            Runtime::Pi,
            br#"{"type":"message_update","usage":{}}"#
        ));
        assert!(!is_stream_delta(Runtime::Pi, br#"{"type":"message_end"}"#));
        assert!(is_stream_delta(
            Runtime::Zot,
            br#"{"type":"text_delta","delta":"hi"}"#
        ));
        assert!(is_stream_delta(
            Runtime::Claude,
            br#"{"type":"stream_event","event":{}}"#
        ));
        assert!(is_stream_delta(
            Runtime::Claude,
            br#"{"type":"system","subtype":"thinking_tokens","estimated_tokens":50}"#
        ));
        assert!(!is_stream_delta(
            Runtime::Claude,
            br#"{"type":"system","subtype":"status","status":"compacting"}"#
        ));
        assert!(is_stream_delta(
            Runtime::Codex,
            br#"{"type":"item.plan.delta","delta":"x"}"#
        ));
        assert!(is_stream_delta(
            Runtime::Gemini,
            br#"{"type":"message","role":"assistant","delta":true}"#
        ));
        assert!(!is_stream_delta(
            Runtime::Gemini,
            br#"{"type":"message","role":"assistant","delta":false}"#
        ));
        assert!(!is_stream_delta(
            Runtime::Gemini,
            br#"{"type":"message","role":"assistant"}"#
        ));
        assert!(!is_stream_delta(Runtime::Pi, b"not json"));
    }

    #[test]
    fn turn_boundaries_by_dialect() {
        assert!(is_turn_boundary(
            Runtime::Pi,
            br#"{"type":"turn_end","message":{}}"#
        ));
        assert!(is_turn_boundary(
            Runtime::Claude,
            br#"{"type":"result","is_error":false}"#
        ));
        assert!(is_turn_boundary(
            Runtime::Claude,
            br#"{"hook_event_name":"Stop"}"#
        ));
        assert!(!is_turn_boundary(
            Runtime::Claude,
            br#"{"type":"assistant"}"#
        ));
        assert!(is_turn_boundary(
            Runtime::Codex,
            br#"{"type":"turn.started"}"#
        ));
        assert!(is_turn_boundary(
            Runtime::Gemini,
            br#"{"type":"message","role":"user","content":"x"}"#
        ));
        assert!(!is_turn_boundary(
            Runtime::Gemini,
            br#"{"type":"message","role":"assistant"}"#
        ));
        assert!(is_turn_boundary(
            Runtime::OpenCode,
            br#"{"type":"step_start","sessionID":"s"}"#
        ));
        assert!(!is_turn_boundary(Runtime::Zot, b"[]"));
    }

    #[test]
    fn lenient_counts() {
        #[derive(Deserialize)]
        struct C {
            #[serde(deserialize_with = "de_count")]
            n: u64,
        }
        let n = |s: &str| serde_json::from_str::<C>(s).map(|c| c.n).ok();
        assert_eq!(n(r#"{"n":12}"#), Some(12));
        assert_eq!(n(r#"{"n":12.9}"#), Some(12));
        assert_eq!(n(r#"{"n":-3}"#), Some(0));
        assert_eq!(n(r#"{"n":null}"#), Some(0));
        assert_eq!(n(r#"{"n":"12"}"#), None);
    }
}
