//! Pi (`pi --mode json` and `pi --mode rpc`), current and older wire.
//!
//! Deviations from the seed contract's table, each for a reason recorded in
//! `docs/TAXONOMY.md`: `turn_end` is mid-run (working), `queue_update` is
//! operator input already queued (no change), Pi has no `error` event (a
//! failure is `stopReason:"error"` on the last assistant message), and
//! `agent_end` is final only on older Pi, which has no `willRetry` field.

use std::borrow::Cow;

use serde::de::MapAccess;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::approval::{ApprovalKind, ApprovalRequest, Resolves};
use crate::core::ingest::FramedLine;
use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::taxonomy::fields::{
    opt_text, opt_text_lenient, read_object, set, skip, ObjectFields, Text,
};
use crate::core::taxonomy::{raw_str, readable_error, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

/// Whether the stream is one-shot JSON mode or a long-lived RPC session.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum PiMode {
    #[default]
    Json,
    Rpc,
}

#[derive(Debug, Default)]
pub struct PiState {
    mode: PiMode,
    /// Stop reason of the last assistant `message_end`.
    last_stop: Option<StopReason>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum StopReason {
    Error,
    Aborted,
    Other,
}

/// The fields of a Pi line that any event type uses, read in place
/// ([`ObjectFields`]); `type` is required.
#[derive(Default)]
struct Line<'a> {
    kind: Cow<'a, str>,
    id: Option<Cow<'a, str>>,
    cwd: Option<Cow<'a, str>>,
    /// An object on `message_*`/`turn_end`, a string on UI requests.
    message: Option<&'a RawValue>,
    tool_name: Option<Cow<'a, str>>,
    args: Option<&'a RawValue>,
    will_retry: Option<bool>,
    success: Option<bool>,
    final_error: Option<Cow<'a, str>>,
    error_message: Option<Cow<'a, str>>,
    method: Option<Cow<'a, str>>,
    /// Read leniently: see [`super::de_text_lenient`].
    title: Option<Cow<'a, str>>,
    /// A `select` dialog's choices (strings).
    options: Option<&'a RawValue>,
    /// A dialog's own timeout in milliseconds.
    timeout: Option<&'a RawValue>,
    /// `compaction_end.result` carries the summariser's usage.
    result: Option<&'a RawValue>,
}

impl<'a> ObjectFields<'a> for Line<'a> {
    const REQUIRED: u32 = 1;

    fn read<A: MapAccess<'a>>(&mut self, key: &str, map: &mut A) -> Result<u32, A::Error> {
        let bit = match key {
            "type" => set(&mut self.kind, map.next_value::<Text<'a>>()?.0, 0),
            "id" => set(&mut self.id, opt_text(map)?, 1),
            "cwd" => set(&mut self.cwd, opt_text(map)?, 2),
            "message" => set(&mut self.message, map.next_value()?, 3),
            "toolName" => set(&mut self.tool_name, opt_text(map)?, 4),
            "args" => set(&mut self.args, map.next_value()?, 5),
            "willRetry" => set(&mut self.will_retry, map.next_value()?, 6),
            "success" => set(&mut self.success, map.next_value()?, 7),
            "finalError" => set(&mut self.final_error, opt_text(map)?, 8),
            "errorMessage" => set(&mut self.error_message, opt_text(map)?, 9),
            "method" => set(&mut self.method, opt_text(map)?, 10),
            "title" => set(&mut self.title, opt_text_lenient(map)?, 11),
            "options" => set(&mut self.options, map.next_value()?, 12),
            "timeout" => set(&mut self.timeout, map.next_value()?, 13),
            "result" => set(&mut self.result, map.next_value()?, 14),
            _ => skip(map)?,
        };
        Ok(bit)
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<PiUsage>,
    #[serde(borrow, default, rename = "stopReason")]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "errorMessage")]
    error_message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CompactionResult {
    #[serde(default)]
    usage: Option<PiUsage>,
}

#[derive(Deserialize, Default)]
struct PiUsage {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
    #[serde(default, rename = "cacheRead")]
    cache_read: u64,
    #[serde(default, rename = "cacheWrite")]
    cache_write: u64,
    #[serde(default)]
    cost: Option<PiCost>,
}

#[derive(Deserialize, Default)]
struct PiCost {
    #[serde(default)]
    total: f64,
}

impl PiUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input,
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            cost_usd: self.cost.as_ref().map_or(0.0, |c| c.total),
        }
    }
}

/// The dialog methods of an RPC `extension_ui_request` that wait for an answer.
const DIALOG_METHODS: [&str; 4] = ["select", "confirm", "input", "editor"];

impl PiState {
    pub fn mode(&self) -> PiMode {
        self.mode
    }

    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        self.observe_line(FramedLine::new(line))
    }

    /// [`PiState::observe`] for a framed line, read as its text if the
    /// framer checked it.
    pub fn observe_line<'a>(&mut self, line: FramedLine<'a>) -> Result<Observation<'a>, Malformed> {
        let mut l = Line::default();
        read_object(line, &mut l)?;
        let obs = match l.kind.as_ref() {
            "session" | "session_started" => {
                self.mode = PiMode::Json;
                self.last_stop = None;
                Observation::new(Signal::session(SessionHeader {
                    id: l.id,
                    cwd: l.cwd,
                    running: false,
                    model: None,
                }))
            }
            "turn_start" => Observation::new(Signal::Working).turn(true),
            "agent_start"
            | "message_start"
            | "message_update"
            | "tool_execution_update"
            | "tool_execution_end"
            | "turn_end"
            | "compaction_start"
            | "auto_compaction_start"
            | "auto_retry_start"
            | "summarization_retry_scheduled"
            | "summarization_retry_attempt_start"
            | "summarization_retry_finished" => Observation::new(Signal::Working),
            "tool_execution_start" => {
                let mut obs = Observation::new(Signal::Working);
                if let Some(name) = l.tool_name {
                    obs = obs.with_tool(ToolCall {
                        name,
                        args: l.args,
                        command: None,
                    });
                }
                obs
            }
            "message_end" => self.message_end(l.message),
            "compaction_end" | "auto_compaction_end" => {
                let usage = l
                    .result
                    .and_then(|r| serde_json::from_str::<CompactionResult>(r.get()).ok())
                    .and_then(|r| r.usage)
                    .map_or(UsageUpdate::None, |u| UsageUpdate::Add(u.to_usage()));
                let err = l.error_message;
                Observation::new(Signal::Working)
                    .with_usage(usage)
                    .with_error(err)
            }
            "auto_retry_end" => {
                if l.success == Some(false) {
                    Observation::new(Signal::Failed).with_error(l.final_error.map(readable_error))
                } else {
                    Observation::new(Signal::Working)
                }
            }
            "agent_end" => self.agent_end(l.will_retry),
            "agent_settled" => self.settled(),
            "extension_ui_request" => {
                self.mode = PiMode::Rpc;
                let method = l.method.as_deref().unwrap_or("");
                if DIALOG_METHODS.contains(&method) {
                    let request = dialog_request(method, &l);
                    let reason = l
                        .title
                        .or_else(|| l.message.and_then(super::raw_str_lenient));
                    Observation::new(Signal::Blocked)
                        .with_reason(reason)
                        .with_approval(request)
                } else {
                    Observation::new(Signal::Meta)
                }
            }
            "response" => {
                self.mode = PiMode::Rpc;
                Observation::new(Signal::Meta)
            }
            "queue_update"
            | "entry_appended"
            | "session_info_changed"
            | "thinking_level_changed"
            | "bash_execution_update"
            | "extension_error" => Observation::new(Signal::Meta),
            // Not a Pi event: the seed contract's daemon-injected failure, and
            // what a generic agent speaking the seed taxonomy may print.
            "error" => {
                let msg = l
                    .error_message
                    .or_else(|| l.message.and_then(raw_string))
                    .map(readable_error);
                Observation::new(Signal::Failed).with_error(msg)
            }
            _ => Observation::unknown(),
        };
        Ok(obs)
    }

    fn message_end<'a>(&mut self, message: Option<&'a RawValue>) -> Observation<'a> {
        let Some(m) = message.and_then(|raw| serde_json::from_str::<Message<'a>>(raw.get()).ok())
        else {
            return Observation::new(Signal::Working);
        };
        if m.role.as_deref() != Some("assistant") {
            return Observation::new(Signal::Working);
        }
        self.last_stop = Some(match m.stop_reason.as_deref() {
            Some("error") => StopReason::Error,
            Some("aborted") => StopReason::Aborted,
            _ => StopReason::Other,
        });
        // Usage is counted here, once per assistant message; `turn_end` and
        // `agent_end` repeat the same message and are not counted again.
        let usage = m
            .usage
            .map_or(UsageUpdate::None, |u| UsageUpdate::Add(u.to_usage()));
        let error = if self.last_stop == Some(StopReason::Error) {
            m.error_message.map(readable_error)
        } else {
            None
        };
        Observation::new(Signal::Working)
            .with_usage(usage)
            .with_error(error)
    }

    fn agent_end(&mut self, will_retry: Option<bool>) -> Observation<'static> {
        match will_retry {
            // Newer Pi: more may follow (a retry, an overflow compaction, a
            // queued follow-up); `agent_settled` is the final word.
            Some(_) => Observation::new(Signal::Working),
            // Older Pi has neither `willRetry` nor `agent_settled`.
            None => self.settled(),
        }
    }

    fn settled(&mut self) -> Observation<'static> {
        if self.mode == PiMode::Rpc {
            // A long-lived RPC agent waits for its next prompt; a dialog
            // of the run that settled was answered, or timed out.
            return Observation::new(Signal::Idle).resolving(Resolves::All);
        }
        match self.last_stop {
            Some(StopReason::Error) => Observation::new(Signal::Failed),
            _ => Observation::new(Signal::Finished),
        }
    }

    pub fn on_exit(&mut self, success: bool) -> Signal<'static> {
        if success && self.mode == PiMode::Json && self.last_stop == Some(StopReason::Error) {
            // JSON mode exits 0 after an errored final message.
            return Signal::Failed;
        }
        Signal::Exited { success }
    }
}

/// The approval an RPC dialog asks for; `None` without the `id` an
/// `extension_ui_response` must carry.
fn dialog_request<'a>(method: &str, l: &Line<'a>) -> Option<ApprovalRequest<'a>> {
    let kind = match method {
        "confirm" => ApprovalKind::Confirm,
        "select" => ApprovalKind::Select,
        // `editor` is multi-line free text; the reply is the same `value`.
        _ => ApprovalKind::Input,
    };
    let mut req = ApprovalRequest::new(kind, l.id.clone()?);
    req.title = l.title.clone();
    req.message = l.message.and_then(raw_str);
    req.options = l
        .options
        .and_then(|raw| serde_json::from_str::<Vec<Cow<'a, str>>>(raw.get()).ok())
        .unwrap_or_default();
    req.timeout = l
        .timeout
        .and_then(|raw| serde_json::from_str::<f64>(raw.get()).ok())
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        // `as` saturates; a timeout beyond u64 milliseconds is no timeout.
        .map(|ms| std::time::Duration::from_millis(ms as u64));
    Some(req)
}

fn raw_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(st: &mut PiState, line: &str) -> Signal<'static> {
        match st.observe(line.as_bytes()).expect("valid line").signal {
            Signal::Session(h) => Signal::session(SessionHeader {
                running: h.running,
                ..SessionHeader::default()
            }),
            Signal::Working => Signal::Working,
            Signal::Blocked => Signal::Blocked,
            Signal::Idle => Signal::Idle,
            Signal::Finished => Signal::Finished,
            Signal::Failed => Signal::Failed,
            Signal::Exited { success } => Signal::Exited { success },
            Signal::Meta => Signal::Meta,
            Signal::Unknown => Signal::Unknown,
        }
    }

    #[test]
    fn turn_end_is_mid_run_and_queue_update_is_meta() {
        let mut st = PiState::default();
        assert_eq!(
            sig(
                &mut st,
                r#"{"type":"turn_end","message":{"role":"assistant","stopReason":"toolUse"}}"#
            ),
            Signal::Working
        );
        assert_eq!(
            sig(
                &mut st,
                r#"{"type":"queue_update","steering":[],"followUp":[]}"#
            ),
            Signal::Meta
        );
    }

    #[test]
    fn error_stop_reason_fails_at_settle_and_exit() {
        let mut st = PiState::default();
        sig(
            &mut st,
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"529"}}"#,
        );
        assert_eq!(
            sig(
                &mut st,
                r#"{"type":"agent_end","messages":[],"willRetry":false}"#
            ),
            Signal::Working
        );
        assert_eq!(st.on_exit(true), Signal::Failed);
        assert_eq!(sig(&mut st, r#"{"type":"agent_settled"}"#), Signal::Failed);
    }

    #[test]
    fn non_objects_are_malformed() {
        let mut st = PiState::default();
        assert!(st.observe(b"[1,2]").is_err());
        assert!(st.observe(br#"["turn_start"]"#).is_err());
        assert!(st.observe(b"{\"type\":").is_err());
        assert!(st.observe(b"{\"no_type\":1}").is_err());
        assert!(st.observe(b"\xff\xfe").is_err());
    }

    #[test]
    fn dialogs_open_approvals_and_a_settled_rpc_run_resolves_them() {
        use crate::core::approval::{ApprovalKind, Resolves};
        let mut st = PiState::default();
        let obs = st
            .observe(br#"{"type":"extension_ui_request","id":"uuid-1","method":"select","title":"Allow dangerous command?","options":["Allow","Block"],"timeout":10000}"#)
            .expect("valid");
        let req = obs.approval.expect("a select asks");
        assert_eq!(req.kind, ApprovalKind::Select);
        assert_eq!(req.request_id, "uuid-1");
        assert_eq!(req.options, ["Allow", "Block"]);
        assert_eq!(req.timeout, Some(std::time::Duration::from_secs(10)));
        let obs = st
            .observe(br#"{"type":"extension_ui_request","id":"uuid-4","method":"editor","title":"Edit","prefill":"a"}"#)
            .expect("valid");
        assert_eq!(obs.approval.map(|a| a.kind), Some(ApprovalKind::Input));
        // Fire-and-forget methods ask nothing; a dialog without an id
        // cannot be answered.
        for line in [
            &br#"{"type":"extension_ui_request","id":"uuid-5","method":"notify","message":"hi"}"#[..],
            br#"{"type":"extension_ui_request","method":"confirm","title":"?"}"#,
        ] {
            assert!(st.observe(line).expect("valid").approval.is_none());
        }
        // An odd `options` or `timeout` costs neither the line nor the dialog.
        let obs = st
            .observe(br#"{"type":"extension_ui_request","id":"u","method":"select","title":"t","options":[1,2],"timeout":"soon"}"#)
            .expect("valid");
        let req = obs.approval.expect("still asks");
        assert!(req.options.is_empty() && req.timeout.is_none());
        assert_eq!(
            st.observe(br#"{"type":"agent_settled"}"#)
                .expect("valid")
                .resolves,
            Resolves::All
        );
    }
}

/// The in-place [`Line`] against serde's derived reading of the same
/// fields, which it replaced: the same lines are malformed, and the rest
/// read the same values.
#[cfg(test)]
mod derived_oracle {
    use super::*;
    use proptest::prelude::*;

    #[derive(Deserialize)]
    struct Derived<'a> {
        #[serde(borrow, rename = "type")]
        kind: Cow<'a, str>,
        #[serde(borrow, default)]
        id: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        cwd: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        message: Option<&'a RawValue>,
        #[serde(borrow, default, rename = "toolName")]
        tool_name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        args: Option<&'a RawValue>,
        #[serde(default, rename = "willRetry")]
        will_retry: Option<bool>,
        #[serde(default)]
        success: Option<bool>,
        #[serde(borrow, default, rename = "finalError")]
        final_error: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "errorMessage")]
        error_message: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        method: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "super::super::de_text_lenient")]
        title: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        options: Option<&'a RawValue>,
        #[serde(borrow, default)]
        timeout: Option<&'a RawValue>,
        #[serde(borrow, default)]
        result: Option<&'a RawValue>,
    }

    type Fields = (
        String,
        Vec<Option<String>>,
        Vec<Option<String>>,
        (Option<bool>, Option<bool>),
    );

    /// The fields of `Line` and `Derived`, which share their names.
    macro_rules! fields {
        ($l:expr) => {
            (
                $l.kind.to_string(),
                [
                    &$l.id,
                    &$l.cwd,
                    &$l.tool_name,
                    &$l.final_error,
                    &$l.error_message,
                    &$l.method,
                    &$l.title,
                ]
                .map(text)
                .to_vec(),
                [$l.message, $l.args, $l.options, $l.timeout, $l.result]
                    .map(raw)
                    .to_vec(),
                ($l.will_retry, $l.success),
            )
        };
    }

    fn raw(r: Option<&RawValue>) -> Option<String> {
        r.map(|r| r.get().to_string())
    }

    fn text(c: &Option<Cow<'_, str>>) -> Option<String> {
        c.as_ref().map(|c| c.to_string())
    }

    /// Read as the framer's text, as the daemon reads a line.
    fn in_place(line: &str) -> Option<Fields> {
        let mut l = Line::default();
        read_object(FramedLine::from_text(line), &mut l).ok()?;
        Some(fields!(l))
    }

    fn derived(line: &str) -> Option<Fields> {
        derived_bytes(line.as_bytes())
    }

    fn in_place_bytes(line: &[u8]) -> Option<Fields> {
        let mut l = Line::default();
        read_object(FramedLine::new(line), &mut l).ok()?;
        Some(fields!(l))
    }

    fn derived_bytes(line: &[u8]) -> Option<Fields> {
        let l: Derived<'_> = super::super::from_object(line).ok()?;
        Some(fields!(l))
    }

    /// Lines that are UTF-8 are read as text, others as bytes: both read
    /// what the derived struct reads from the bytes.
    #[test]
    fn lines_that_are_not_utf8_read_as_the_derived_struct_reads_them() {
        let skipped: &[u8] = b"{\"type\":\"x\",\"other\":\"\xff\"}";
        let lines: [&[u8]; 6] = [
            skipped,
            b"{\"type\":\"x\",\"id\":\"\xff\"}",
            b"{\"type\":\"\xc3\x28\"}",
            b"{\"\xff\":1,\"type\":\"x\"}",
            b"{\"type\":\"caf\xc3\xa9\",\"cwd\":\"/w\"}",
            b"{\"type\":\"x\"}\xff",
        ];
        for line in lines {
            assert_eq!(
                in_place_bytes(line),
                derived_bytes(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(
            in_place_bytes(skipped).is_some(),
            "a skipped value that is not UTF-8 is skipped, as by the derived struct"
        );
        assert!(in_place_bytes(lines[1]).is_none(), "a kept one is refused");
    }

    #[test]
    fn reads_what_the_derived_struct_reads() {
        let lines = [
            r#"{"type":"turn_start","pad":"xxxxxxxxxxx"}"#,
            r#"{"type":"session","id":"s1","cwd":"/w\n"}"#,
            r#"{"type":"tool_execution_start","toolName":"bash","args":{"command":"ls"}}"#,
            r#"{"type":"extension_ui_request","id":"u1","method":"select","title":"Pick \ud83d","options":["a","b"],"timeout":5000}"#,
            r#"{"type":"agent_end","willRetry":false,"message":null,"id":null}"#,
            r#"{"ty\u0070e":"turn_end"}"#,
            r#"  {"type":"x"}  "#,
            // Malformed, for both.
            r#"{"type":"x","type":"y"}"#,
            r#"{"type":"x","id":null,"id":"again"}"#,
            r#"{"id":"no type"}"#,
            r#"{"type":7}"#,
            r#"{"type":"x","cwd":7}"#,
            r#"{"type":"x","willRetry":"yes"}"#,
            r#"{"type":"x","id":"\ud83d"}"#,
            r#"["turn_start"]"#,
            r#"{"type":"x"} trailing"#,
            r#"{"type":"x""#,
            "",
            "null",
        ];
        for line in lines {
            assert_eq!(in_place(line), derived(line), "{line}");
        }
        assert!(
            in_place(r#"{"type":"x","type":"y"}"#).is_none(),
            "duplicates refused"
        );
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("12".to_string()),
            Just("{\"a\":[1,\"b\"]}".to_string()),
            "[a-z\\\\\"]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
            Just("\"\\ud83d\"".to_string()),
        ]
    }

    proptest! {
        #[test]
        fn any_object_reads_the_same(fields in proptest::collection::vec(
            (prop_oneof![
                Just("type"), Just("id"), Just("cwd"), Just("message"), Just("toolName"),
                Just("args"), Just("willRetry"), Just("success"), Just("finalError"),
                Just("errorMessage"), Just("method"), Just("title"), Just("options"),
                Just("timeout"), Just("result"), Just("other"),
            ], value()),
            0..6,
        )) {
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let line = format!("{{{}}}", body.join(","));
            prop_assert_eq!(in_place(&line), derived(&line), "{}", line);
        }
    }
}
