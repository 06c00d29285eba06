//! Claude Code: `claude -p --output-format stream-json --verbose` lines and
//! the JSON objects its hooks receive on stdin (forwarded by `colibri hook`).
//!
//! Stream-json: `system/init` is the session header, printed with a prompt
//! already in flight (working). `result` ends one query and is classified on
//! `is_error`, never on `subtype` (an API error arrives as `subtype:"success"`
//! with `is_error:true`); each `result` counts as one turn. One API response
//! is split over several `assistant` lines that share `message.id` and repeat
//! its usage, so usage is added once per id, remembered in a small ring; the
//! `result` totals then replace the sum. Lines with a non-null
//! `parent_tool_use_id` belong to a sub-agent: their usage counts, their
//! state does not. Hook objects carry `hook_event_name` and no `type`.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::approval::{
    AnswerChannel, ApprovalKind, ApprovalRequest, Resolves, ASK_USER_QUESTION,
};
use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::taxonomy::{de_count, from_object, raw_str, raw_str_lenient, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

/// How many recent `message.id`s are remembered for usage deduplication.
/// Lines of one API response are adjacent (sub-agents may interleave a few),
/// so a short window is enough and memory stays bounded.
pub const SEEN_MESSAGE_IDS: usize = 16;

#[derive(Debug, Default)]
pub struct ClaudeState {
    /// Recently counted `message.id`s, oldest first.
    seen: VecDeque<Box<str>>,
    /// The token usage of every `result` so far (each covers one query).
    results: Usage,
    /// The sum of every `result.model_usage_since_last_result` so far,
    /// cost included: what this process spent, never what an earlier
    /// process of a resumed session did.
    since_last: Usage,
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    hook_event_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cwd: Option<Cow<'a, str>>,
    /// `system`/`init`'s and `SessionStart`'s model.
    /// Any JSON value: a model that is not a string is not read, and does
    /// not cost the line.
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    /// An object on `assistant`/`user`, a string on hook `Notification`.
    #[serde(borrow, default)]
    message: Option<MessageField<'a>>,
    /// `null` on the main agent's lines (and then `None` here).
    #[serde(borrow, default)]
    parent_tool_use_id: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    /// `result.result`: the final text, or the error text.
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    errors: Option<&'a RawValue>,
    #[serde(default)]
    total_cost_usd: Option<f64>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    /// `result.modelUsage`: the whole process's usage, per model.
    #[serde(borrow, default, rename = "modelUsage")]
    model_usage: Option<&'a RawValue>,
    /// `result.model_usage_since_last_result` (Claude Code 2.1.3xx):
    /// shaped like `modelUsage`, covering only the calls since the
    /// process's previous result.
    #[serde(borrow, default)]
    model_usage_since_last_result: Option<&'a RawValue>,
    /// `session_state_changed.state`.
    #[serde(borrow, default)]
    state: Option<Cow<'a, str>>,
    /// `system/status.status`: `"compacting"`, `"requesting"`, or `null`
    /// when the status clears (and then `None` here).
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    /// `system/status.compact_result` once a compaction ends.
    #[serde(borrow, default)]
    compact_result: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    compact_error: Option<Cow<'a, str>>,
    /// `control_request.request`.
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
    /// `control_request.request_id`, `control_cancel_request.request_id`.
    #[serde(borrow, default)]
    request_id: Option<Cow<'a, str>>,
    /// `assistant.error` (a category string); hook `StopFailure.error`.
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    // Hook fields.
    #[serde(borrow, default)]
    tool_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    notification_type: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<LastToolUse<'a>>,
    #[serde(default)]
    usage: Option<ClaudeUsage>,
}

/// `message` read in the line's single pass: most of a Claude line is its
/// message, so parsing it again from a `RawValue` would scan it twice.
enum MessageField<'a> {
    Object(Message<'a>),
    /// Hook input carries a human-readable string here.
    Text(Cow<'a, str>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for MessageField<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = MessageField<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message object or string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(MessageField::Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(MessageField::Text(Cow::Owned(s.to_string())))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                Message::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(MessageField::Object)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(MessageField::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(MessageField::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MessageField::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MessageField::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MessageField::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MessageField::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'a> MessageField<'a> {
    fn text(&self) -> Option<Cow<'a, str>> {
        match self {
            MessageField::Text(t) => Some(t.clone()),
            _ => None,
        }
    }
}

/// A message's `content`, keeping only its last `tool_use` block and the
/// ids its `tool_result` blocks answer: blocks are visited one by one,
/// never collected.
struct LastToolUse<'a>(Option<ToolCall<'a>>, Vec<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for LastToolUse<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = LastToolUse<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("message content")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut last = None;
                let mut results = Vec::new();
                while let Some(b) = seq.next_element::<Block<'a>>()? {
                    match b.kind.as_deref() {
                        Some("tool_use") => {
                            if let Some(name) = b.name {
                                last = Some(ToolCall {
                                    name,
                                    args: b.input,
                                    command: None,
                                });
                            }
                        }
                        Some("tool_result") => results.extend(b.tool_use_id),
                        _ => {}
                    }
                }
                Ok(LastToolUse(last, results))
            }
            // User messages may carry their content as one string.
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(LastToolUse(None, Vec::new()))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(LastToolUse(None, Vec::new()))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    /// `tool_result.tool_use_id`.
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ControlRequest<'a> {
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    /// A prompt sentence the CLI may supply (newer versions).
    #[serde(borrow, default)]
    title: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    decision_reason: Option<Cow<'a, str>>,
}

/// Anthropic usage: `input_tokens` excludes cache reads and writes.
#[derive(Deserialize)]
struct ClaudeUsage {
    #[serde(default, deserialize_with = "de_count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_read_input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_creation_input_tokens: u64,
}

impl ClaudeUsage {
    fn parse(raw: &RawValue) -> Option<Usage> {
        serde_json::from_str::<ClaudeUsage>(raw.get())
            .ok()
            .map(|u| u.to_usage())
    }

    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_creation_input_tokens,
            cost_usd: 0.0,
        }
    }
}

/// One model's entry in `result.modelUsage` (camelCase, unlike `usage`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelTotals {
    #[serde(default, deserialize_with = "de_count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_read_input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_creation_input_tokens: u64,
    #[serde(default, rename = "costUSD")]
    cost_usd: Option<f64>,
}

/// The sum over models of `result.modelUsage` (or of a map shaped like it),
/// `costUSD` included; `None` when it is absent, unreadable or empty.
fn model_usage_sum(raw: &RawValue) -> Option<Usage> {
    let models =
        serde_json::from_str::<std::collections::BTreeMap<Cow<'_, str>, ModelTotals>>(raw.get())
            .ok()?;
    if models.is_empty() {
        return None;
    }
    let mut sum = Usage::default();
    for m in models.values() {
        sum.add(&Usage {
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cache_read_tokens: m.cache_read_input_tokens,
            cache_write_tokens: m.cache_creation_input_tokens,
            cost_usd: m
                .cost_usd
                .filter(|c| c.is_finite() && *c >= 0.0)
                .unwrap_or(0.0),
        });
    }
    Some(sum)
}

/// Notification kinds that mean a human must answer.
const BLOCKING_NOTIFICATIONS: [&str; 3] = [
    "permission_prompt",
    "elicitation_dialog",
    "agent_needs_input",
];

impl ClaudeState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let mut l: Line<'a> = from_object(line)?;
        if let Some(hook) = &l.hook_event_name {
            return Ok(hook_observation(hook, &l));
        }
        let Some(kind) = l.kind.as_deref() else {
            return Err(Malformed);
        };
        let subagent = l.parent_tool_use_id.is_some();
        let obs = match kind {
            "system" => system_observation(&l),
            "assistant" => self.assistant(l.error, l.message.take()),
            "user" => user_observation(l.message.take()),
            "stream_event" => Observation::new(Signal::Working),
            // A query that ended left no permission of its own to answer.
            "result" => self.result(&l).turn(true).resolving(Resolves::All),
            "control_request" => control_request(l.request, l.request_id.take()),
            // The CLI withdrew a pending request: work goes on.
            "control_cancel_request" => {
                let resolves = l
                    .request_id
                    .take()
                    .map_or(Resolves::Nothing, Resolves::Cancelled);
                Observation::new(Signal::Working).resolving(resolves)
            }
            "rate_limit_event" | "control_response" => Observation::new(Signal::Meta),
            _ => Observation::unknown(),
        };
        Ok(obs.subagent(subagent))
    }

    fn assistant<'a>(
        &mut self,
        error: Option<&'a RawValue>,
        message: Option<MessageField<'a>>,
    ) -> Observation<'a> {
        let mut obs = Observation::new(Signal::Working).with_error(error.and_then(raw_str));
        let Some(MessageField::Object(m)) = message else {
            return obs;
        };
        if let Some(tool) = m.content.and_then(|c| c.0) {
            obs = obs.with_tool(tool);
        }
        if let Some(usage) = m.usage.as_ref().map(ClaudeUsage::to_usage) {
            if self.first_sight(m.id.as_deref()) {
                obs = obs.with_usage(UsageUpdate::Add(usage));
            }
        }
        obs
    }

    /// A `result` ends one query. Its `usage` is that query's alone, while
    /// `modelUsage` and `total_cost_usd` cover the whole process (every
    /// query, compaction summaries, side calls to small models). The totals
    /// become the session-wide `modelUsage` sum, else every result's usage
    /// so far, with the session cost; they replace what the assistant lines
    /// added up to.
    ///
    /// A resumed session's `modelUsage` and `total_cost_usd` also cover the
    /// earlier processes, whose spend the pane has counted already. Where
    /// the result states `model_usage_since_last_result` (this process's
    /// calls since its previous result), the totals are the sum of those
    /// instead, so nothing is counted twice.
    fn result<'a>(&mut self, l: &Line<'a>) -> Observation<'a> {
        let obs = result_signal(l);
        let query = l.usage.and_then(ClaudeUsage::parse);
        if let Some(u) = query {
            self.results.add(&u);
        }
        if let Some(step) = l.model_usage_since_last_result.and_then(|raw| {
            // An empty map is a result that states no new calls.
            model_usage_sum(raw).or_else(|| {
                serde_json::from_str::<std::collections::BTreeMap<Cow<'_, str>, &RawValue>>(
                    raw.get(),
                )
                .ok()
                .map(|_| Usage::default())
            })
        }) {
            self.since_last.add(&step);
            return obs.with_usage(UsageUpdate::Set {
                usage: self.since_last,
                has_cost: true,
            });
        }
        let session = l.model_usage.and_then(model_usage_sum);
        if query.is_none() && session.is_none() && l.total_cost_usd.is_none() {
            return obs;
        }
        let totals = Usage {
            cost_usd: l.total_cost_usd.filter(|c| c.is_finite()).unwrap_or(0.0),
            ..session.unwrap_or(self.results)
        };
        obs.with_usage(UsageUpdate::Set {
            usage: totals,
            has_cost: l.total_cost_usd.is_some(),
        })
    }

    /// Whether this message's usage has not been counted yet; remembers it.
    /// A message without an id cannot be deduplicated and is counted.
    fn first_sight(&mut self, id: Option<&str>) -> bool {
        let Some(id) = id else {
            return true;
        };
        if self.seen.iter().any(|s| s.as_ref() == id) {
            return false;
        }
        if self.seen.len() == SEEN_MESSAGE_IDS {
            self.seen.pop_front();
        }
        self.seen.push_back(id.into());
        true
    }
}

/// A `can_use_tool` control request blocks on the operator's permission
/// and is answered with a `control_response` carrying its `request_id`.
fn control_request<'a>(
    request: Option<&'a RawValue>,
    request_id: Option<Cow<'a, str>>,
) -> Observation<'a> {
    let Some(req) = request.and_then(|r| serde_json::from_str::<ControlRequest<'a>>(r.get()).ok())
    else {
        return Observation::new(Signal::Meta);
    };
    if req.subtype.as_deref() != Some("can_use_tool") {
        return Observation::new(Signal::Meta);
    }
    let tool = req.tool_name.as_deref().unwrap_or("tool");
    let reason = Cow::Owned(format!("permission: {tool}"));
    let question = match (req.tool_name.as_deref(), req.input) {
        (Some(ASK_USER_QUESTION), Some(input)) => single_question(input),
        _ => None,
    };
    let approval = request_id.map(|id| {
        let mut a = ApprovalRequest::new(ApprovalKind::ToolPermission, id);
        a.tool = req.tool_name.clone();
        a.input = req.input;
        a.title = req.title.clone();
        a.message = req.description.clone().or(req.decision_reason.clone());
        a.tool_use_id = req.tool_use_id.clone();
        if let Some(q) = &question {
            a.kind = if q.options.is_empty() {
                ApprovalKind::Input
            } else {
                ApprovalKind::Select
            };
            a.title = q.header.clone();
            a.message = q.question.clone();
            a.options = q.options.clone();
        }
        a
    });
    let reason = match question.and_then(|q| q.question) {
        Some(q) => q,
        None => reason,
    };
    Observation::new(Signal::Blocked)
        .with_reason(Some(reason))
        .with_approval(approval)
}

/// `AskUserQuestion`'s input: questions with options, answered through
/// `can_use_tool` with `answers` in `updatedInput`.
#[derive(Deserialize)]
struct AskInput<'a> {
    #[serde(borrow, default)]
    questions: Option<Vec<AskQuestion<'a>>>,
}

#[derive(Deserialize)]
struct AskQuestion<'a> {
    #[serde(borrow, default)]
    question: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    header: Option<Cow<'a, str>>,
    /// Read apart, so that an odd option cannot cost the question.
    #[serde(borrow, default)]
    options: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AskOption<'a> {
    #[serde(borrow)]
    label: Cow<'a, str>,
}

struct OneQuestion<'a> {
    question: Option<Cow<'a, str>>,
    header: Option<Cow<'a, str>>,
    options: Vec<Cow<'a, str>>,
}

/// The question of an `AskUserQuestion` that asks exactly one; several
/// questions stay a plain permission (one answer cannot fill them).
fn single_question(input: &RawValue) -> Option<OneQuestion<'_>> {
    let mut qs = serde_json::from_str::<AskInput<'_>>(input.get())
        .ok()?
        .questions?;
    if qs.len() != 1 {
        return None;
    }
    let q = qs.pop()?;
    let options = q
        .options
        .and_then(|raw| serde_json::from_str::<Vec<AskOption<'_>>>(raw.get()).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.label)
        .collect();
    Some(OneQuestion {
        question: q.question,
        header: q.header,
        options,
    })
}

/// A `user` line feeds tool results back; a permission whose tool has a
/// result was settled, by colibri or by someone else.
fn user_observation(message: Option<MessageField<'_>>) -> Observation<'_> {
    let obs = Observation::new(Signal::Working);
    match message {
        Some(MessageField::Object(Message {
            content: Some(LastToolUse(_, results)),
            ..
        })) if !results.is_empty() => obs.resolving(Resolves::ToolUses(results)),
        _ => obs,
    }
}

fn system_observation<'a>(l: &Line<'a>) -> Observation<'a> {
    match l.subtype.as_deref() {
        Some("init") => Observation::new(Signal::session(SessionHeader {
            id: l.session_id.clone(),
            cwd: l.cwd.clone(),
            running: true,
            model: l.model.and_then(raw_str_lenient),
        })),
        // `thinking_tokens` is a heartbeat with an estimate of the thinking
        // in flight; the real count arrives in the message's usage.
        Some("compact_boundary" | "api_retry" | "thinking_tokens") => {
            Observation::new(Signal::Working)
        }
        Some("status") => status_observation(l),
        Some("session_state_changed") => match l.state.as_deref() {
            Some("idle") => Observation::new(Signal::Idle),
            _ => Observation::new(Signal::Meta),
        },
        Some(
            "hook_started" | "hook_progress" | "hook_response" | "task_started" | "task_progress"
            | "task_notification" | "task_updated" | "commands_changed",
        ) => Observation::new(Signal::Meta),
        _ => Observation::unknown(),
    }
}

/// `system/status`: a status string means the agent is busy (compacting,
/// requesting); `null` clears it, and after a compaction carries its
/// outcome. A failed compaction is recorded, not fatal: the query goes on.
fn status_observation<'a>(l: &Line<'a>) -> Observation<'a> {
    if l.status.is_some() {
        return Observation::new(Signal::Working);
    }
    if l.compact_result.as_deref() == Some("failed") {
        let why = l.compact_error.as_deref().unwrap_or("unknown reason");
        return Observation::new(Signal::Meta)
            .with_error(Some(Cow::Owned(format!("compaction failed: {why}"))));
    }
    Observation::new(Signal::Meta)
}

fn result_signal<'a>(l: &Line<'a>) -> Observation<'a> {
    let failed = l
        .is_error
        .unwrap_or_else(|| l.subtype.as_deref().is_some_and(|s| s.starts_with("error")));
    if failed {
        let msg = l
            .errors
            .and_then(first_string)
            .or_else(|| l.result.and_then(raw_str));
        Observation::new(Signal::Failed).with_error(msg)
    } else {
        Observation::new(Signal::Finished)
    }
}

fn hook_observation<'a>(hook: &str, l: &Line<'a>) -> Observation<'a> {
    let tool = || {
        l.tool_name.clone().map(|name| ToolCall {
            name,
            args: l.tool_input,
            command: None,
        })
    };
    match hook {
        "SessionStart" => Observation::new(Signal::session(SessionHeader {
            id: l.session_id.clone(),
            cwd: l.cwd.clone(),
            running: false,
            model: l.model.and_then(raw_str_lenient),
        })),
        "UserPromptSubmit" => Observation::new(Signal::Working)
            .turn(true)
            .resolving(Resolves::All),
        "PreToolUse" => {
            let obs = Observation::new(Signal::Working);
            match tool() {
                Some(t) => obs.with_tool(t).gated(),
                None => obs,
            }
        }
        // A tool ran, failed or was denied: the terminal shows one
        // permission prompt at a time, so the one pending is over. (The
        // `PermissionRequest` input carries no `tool_use_id` to match.)
        "PostToolUse" | "PostToolUseFailure" | "PermissionDenied" => {
            Observation::new(Signal::Working).resolving(Resolves::All)
        }
        "PreCompact" => Observation::new(Signal::Working),
        "PermissionRequest" => {
            let name = l.tool_name.as_deref().unwrap_or("tool");
            let mut approval = ApprovalRequest::new(
                ApprovalKind::ToolPermission,
                l.tool_use_id.clone().unwrap_or(Cow::Borrowed("")),
            );
            approval.channel = AnswerChannel::HookOutput;
            approval.tool = l.tool_name.clone();
            approval.input = l.tool_input;
            approval.tool_use_id = l.tool_use_id.clone();
            let obs = Observation::new(Signal::Blocked)
                .with_reason(Some(Cow::Owned(format!("permission: {name}"))))
                .with_approval(Some(approval));
            match tool() {
                Some(t) => obs.with_tool(t),
                None => obs,
            }
        }
        "Notification" => match l.notification_type.as_deref() {
            Some(kind) if BLOCKING_NOTIFICATIONS.contains(&kind) => {
                let reason = l
                    .message
                    .as_ref()
                    .and_then(MessageField::text)
                    .or_else(|| Some(Cow::Owned(kind.to_string())));
                Observation::new(Signal::Blocked).with_reason(reason)
            }
            Some("idle_prompt") => Observation::new(Signal::Idle),
            _ => Observation::new(Signal::Meta),
        },
        "Stop" => Observation::new(Signal::Idle).resolving(Resolves::All),
        "StopFailure" => {
            let msg = l
                .error
                .and_then(raw_str)
                .or_else(|| l.message.as_ref().and_then(MessageField::text));
            Observation::new(Signal::Failed)
                .with_error(msg)
                .resolving(Resolves::All)
        }
        "SessionEnd" => Observation::new(Signal::Finished).resolving(Resolves::All),
        "SubagentStart" | "SubagentStop" => Observation::new(Signal::Meta),
        _ => Observation::unknown(),
    }
}

/// The first string of a JSON array of strings (`result.errors`).
fn first_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Vec<Cow<'_, str>>>(raw.get())
        .ok()?
        .into_iter()
        .find(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_counted_once_per_message_id_in_a_bounded_ring() {
        let mut st = ClaudeState::default();
        let line = |id: usize| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"msg_{id}","content":[],"usage":{{"input_tokens":1,"output_tokens":2}}}},"parent_tool_use_id":null}}"#
            )
        };
        let counted = |st: &mut ClaudeState, id: usize| {
            let l = line(id);
            matches!(
                st.observe(l.as_bytes()).expect("valid").usage,
                UsageUpdate::Add(_)
            )
        };
        assert!(counted(&mut st, 1));
        assert!(!counted(&mut st, 1));
        for id in 2..=SEEN_MESSAGE_IDS + 1 {
            assert!(counted(&mut st, id));
        }
        assert_eq!(st.seen.len(), SEEN_MESSAGE_IDS);
        // Id 1 fell out of the window; id 2 is still remembered.
        assert!(!counted(&mut st, 2));
        assert!(counted(&mut st, 1));
    }

    #[test]
    fn last_tool_use_block_wins_and_subagents_are_marked() {
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","name":"Read","input":{}},{"type":"text","text":"x"},{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":"toolu_1"}"#)
            .expect("valid");
        assert!(obs.subagent);
        assert_eq!(
            obs.tool.map(|t| t.name.into_owned()).as_deref(),
            Some("Bash")
        );
    }

    #[test]
    fn result_classified_on_is_error() {
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500","total_cost_usd":0.5}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Failed);
        assert_eq!(obs.error.as_deref(), Some("API Error: 500"));
        assert!(obs.turn);
        assert!(matches!(obs.usage, UsageUpdate::Set { has_cost: true, .. }));
        assert!(st.observe(br#"{"session_id":"s"}"#).is_err());
        assert_eq!(
            st.observe(br#"{"hook_event_name":"Stop"}"#)
                .expect("hook")
                .signal,
            Signal::Idle
        );
    }

    #[test]
    fn results_of_one_process_add_up_and_cost_is_the_sessions() {
        let mut st = ClaudeState::default();
        let result = |st: &mut ClaudeState, input: u64, output: u64, cost: f64| {
            let line = format!(
                r#"{{"type":"result","subtype":"success","is_error":false,"total_cost_usd":{cost},"usage":{{"input_tokens":{input},"output_tokens":{output},"cache_read_input_tokens":5}}}}"#
            );
            match st.observe(line.as_bytes()).expect("valid").usage {
                UsageUpdate::Set { usage, has_cost } => {
                    assert!(has_cost);
                    usage
                }
                other => panic!("expected totals, got {other:?}"),
            }
        };
        let first = result(&mut st, 1000, 2000, 0.25);
        assert_eq!((first.input_tokens, first.output_tokens), (1000, 2000));
        let second = result(&mut st, 535, 504, 0.5);
        assert_eq!((second.input_tokens, second.output_tokens), (1535, 2504));
        assert_eq!(second.cache_read_tokens, 10);
        // The cost is already the session's: it replaces, never adds.
        assert!((second.cost_usd - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_resumed_session_counts_only_what_this_process_spent() {
        // Claude Code 2.1.332 after `--resume`: `modelUsage` and
        // `total_cost_usd` carry the earlier process's 0.0116 too.
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.0232,"usage":{"input_tokens":10,"output_tokens":4},"modelUsage":{"m":{"inputTokens":20,"outputTokens":8,"costUSD":0.0232}},"model_usage_since_last_result":{"m":{"inputTokens":10,"outputTokens":4,"cacheReadInputTokens":3,"costUSD":0.0116}}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, has_cost } = obs.usage else {
            panic!("expected totals");
        };
        assert!(has_cost);
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens
            ),
            (10, 4, 3)
        );
        assert!((usage.cost_usd - 0.0116).abs() < 1e-12);
        // The next result adds its own calls; an empty map adds none.
        let obs = st
            .observe(br#"{"type":"result","is_error":false,"total_cost_usd":0.03,"modelUsage":{"m":{"inputTokens":25,"outputTokens":9,"costUSD":0.03}},"model_usage_since_last_result":{"m":{"inputTokens":5,"outputTokens":1,"costUSD":0.0068}}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, .. } = obs.usage else {
            panic!("expected totals");
        };
        assert_eq!((usage.input_tokens, usage.output_tokens), (15, 5));
        assert!((usage.cost_usd - 0.0184).abs() < 1e-12);
        let obs = st
            .observe(br#"{"type":"result","is_error":false,"total_cost_usd":0.03,"model_usage_since_last_result":{}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, .. } = obs.usage else {
            panic!("expected totals");
        };
        assert_eq!(usage.input_tokens, 15);
    }

    #[test]
    fn model_usage_is_the_session_and_wins_over_the_query() {
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"type":"result","is_error":false,"total_cost_usd":1.5,"usage":{"input_tokens":2,"output_tokens":4},"modelUsage":{"small":{"inputTokens":100,"outputTokens":1,"costUSD":0.01},"big":{"inputTokens":900,"outputTokens":70,"cacheReadInputTokens":30,"cacheCreationInputTokens":40,"costUSD":1.49}}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, .. } = obs.usage else {
            panic!("expected totals");
        };
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens
            ),
            (1000, 71, 30, 40)
        );
        // An empty modelUsage falls back to the results' own usage.
        let obs = st
            .observe(br#"{"type":"result","is_error":false,"usage":{"input_tokens":3,"output_tokens":5},"modelUsage":{}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, has_cost } = obs.usage else {
            panic!("expected totals");
        };
        assert!(!has_cost);
        assert_eq!((usage.input_tokens, usage.output_tokens), (5, 9));
    }

    #[test]
    fn status_thinking_and_failed_compaction() {
        let mut st = ClaudeState::default();
        let obs = |st: &mut ClaudeState, line: &str| {
            let o = st.observe(line.as_bytes()).expect("valid");
            (format!("{:?}", o.signal), o.error.map(|e| e.into_owned()))
        };
        assert_eq!(
            obs(
                &mut st,
                r#"{"type":"system","subtype":"status","status":"compacting","session_id":"s"}"#
            ),
            ("Working".to_string(), None)
        );
        assert_eq!(
            obs(
                &mut st,
                r#"{"type":"system","subtype":"status","status":null,"compact_result":"success"}"#
            ),
            ("Meta".to_string(), None)
        );
        assert_eq!(
            obs(
                &mut st,
                r#"{"type":"system","subtype":"status","status":null,"compact_result":"failed","compact_error":"too_few_groups"}"#
            ),
            (
                "Meta".to_string(),
                Some("compaction failed: too_few_groups".to_string())
            )
        );
        assert_eq!(
            obs(
                &mut st,
                r#"{"type":"system","subtype":"thinking_tokens","estimated_tokens":50,"estimated_tokens_delta":50}"#
            ),
            ("Working".to_string(), None)
        );
    }

    #[test]
    fn can_use_tool_opens_an_approval_that_echoes_its_input() {
        use crate::core::approval::{
            encode_answer, AnswerChannel, Approval, ApprovalKind, Decision, Resolves,
        };
        use crate::core::taxonomy::Runtime;
        use crate::core::time::Timestamp;
        let mut st = ClaudeState::default();
        let line = br#"{"type":"control_request","request_id":"req_7","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"git push","timeout":60},"tool_use_id":"toolu_7","decision_reason":"not in allow list"}}"#;
        let obs = st.observe(line).expect("valid");
        let req = obs.approval.expect("a permission request");
        assert_eq!(req.kind, ApprovalKind::ToolPermission);
        assert_eq!(req.channel, AnswerChannel::AgentInput);
        assert_eq!(req.tool.as_deref(), Some("Bash"));
        assert_eq!(req.tool_use_id.as_deref(), Some("toolu_7"));
        assert_eq!(req.message.as_deref(), Some("not in allow list"));
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 1);
        let reply = encode_answer(Runtime::Claude, &a, &Decision::Approve).expect("answerable");
        assert_eq!(
            String::from_utf8(reply).expect("UTF-8"),
            "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"req_7\",\"response\":{\"behavior\":\"allow\",\"updatedInput\":{\"command\":\"git push\",\"timeout\":60}}}}\n"
        );

        let cancel = st
            .observe(br#"{"type":"control_cancel_request","request_id":"req_7"}"#)
            .expect("valid");
        assert_eq!(cancel.resolves, Resolves::Cancelled(Cow::Borrowed("req_7")));
        let user = st
            .observe(br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_7","content":"ok"},{"type":"tool_result","tool_use_id":"toolu_8","content":"ok"}]},"parent_tool_use_id":null}"#)
            .expect("valid");
        assert_eq!(
            user.resolves,
            Resolves::ToolUses(vec![Cow::Borrowed("toolu_7"), Cow::Borrowed("toolu_8")])
        );
        // Other control requests ask nothing.
        let other = st
            .observe(br#"{"type":"control_request","request_id":"req_8","request":{"subtype":"hook_callback","callback_id":"h1"}}"#)
            .expect("valid");
        assert!(other.approval.is_none());
        assert_eq!(other.signal, Signal::Meta);
    }

    #[test]
    fn a_permission_request_hook_is_answered_on_the_hook_output() {
        use crate::core::approval::{AnswerChannel, Resolves};
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"session_id":"s","hook_event_name":"PermissionRequest","tool_name":"Edit","tool_input":{"file_path":"/a.rs"}}"#)
            .expect("valid");
        let req = obs.approval.expect("a permission request");
        assert_eq!(req.channel, AnswerChannel::HookOutput);
        assert_eq!(req.tool.as_deref(), Some("Edit"));
        let post = st
            .observe(br#"{"session_id":"s","hook_event_name":"PostToolUse","tool_name":"Edit","tool_use_id":"toolu_1"}"#)
            .expect("valid");
        assert_eq!(post.resolves, Resolves::All);
    }

    #[test]
    fn ask_user_question_with_one_question_is_answered_through_updated_input() {
        use crate::core::approval::{encode_answer, Approval, ApprovalKind, Decision};
        use crate::core::taxonomy::Runtime;
        use crate::core::time::Timestamp;
        let mut st = ClaudeState::default();
        let obs = st
            .observe(br#"{"type":"control_request","request_id":"req_q","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[{"question":"How should I format the output?","header":"Format","options":[{"label":"Summary","description":"Brief"},{"label":"Detailed","description":"Full"}],"multiSelect":false}]},"tool_use_id":"toolu_q"}}"#)
            .expect("valid");
        assert_eq!(
            obs.reason.as_deref(),
            Some("How should I format the output?")
        );
        let req = obs.approval.expect("a question");
        assert_eq!(req.kind, ApprovalKind::Select);
        assert_eq!(req.options, ["Summary", "Detailed"]);
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 1);
        let answer = |text: &str| {
            encode_answer(Runtime::Claude, &a, &Decision::Answer { text: text.into() })
                .map(|b| String::from_utf8(b).expect("UTF-8"))
        };
        // serde_json's map sorts keys: the input comes back reordered,
        // which is the same JSON.
        assert_eq!(
            answer("2").as_deref(),
            Ok("{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"req_q\",\"response\":{\"behavior\":\"allow\",\"updatedInput\":{\"answers\":{\"How should I format the output?\":\"Detailed\"},\"questions\":[{\"header\":\"Format\",\"multiSelect\":false,\"options\":[{\"description\":\"Brief\",\"label\":\"Summary\"},{\"description\":\"Full\",\"label\":\"Detailed\"}],\"question\":\"How should I format the output?\"}]}}}}\n")
        );
        assert!(answer("Bullet points")
            .is_ok_and(|l| l.contains("\"How should I format the output?\":\"Bullet points\"")));
        assert!(encode_answer(Runtime::Claude, &a, &Decision::Approve).is_err());

        // Two questions cannot take one answer: a plain permission.
        let obs = st
            .observe(br#"{"type":"control_request","request_id":"req_r","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[{"question":"A?","header":"A","options":[]},{"question":"B?","header":"B","options":[]}]}}}"#)
            .expect("valid");
        assert_eq!(
            obs.approval.map(|a| a.kind),
            Some(ApprovalKind::ToolPermission)
        );
    }
}
