//! Approvals: a harness asking a human, and the reply it understands.
//!
//! An adapter that reads a permission request, a dialog or a question in
//! its agent's stream fills an [`ApprovalRequest`] in the line's
//! observation; the pane keeps it as a pending [`Approval`] until the
//! operator answers it, the harness resolves it itself (a cancel, a
//! timeout, a run that went on), or the agent exits. [`encode_answer`]
//! writes the exact reply each harness expects on its input.
//!
//! Which harness can be answered how, and what was checked against which
//! source, is recorded in `docs/TAXONOMY.md`, section "Approvals".

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::core::policy::GuardSettings;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::core::tool;

/// What kind of answer a request wants.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ApprovalKind {
    /// May this tool run with these arguments? Approve or deny.
    ToolPermission,
    /// A yes/no question.
    Confirm,
    /// Pick one of `options`.
    Select,
    /// Free text (Pi's `input` and `editor`, a Codex question without options).
    Input,
}

impl ApprovalKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::ToolPermission => "tool_permission",
            ApprovalKind::Confirm => "confirm",
            ApprovalKind::Select => "select",
            ApprovalKind::Input => "input",
        }
    }
}

/// Where the reply goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AnswerChannel {
    /// One JSON line on the agent's own input (Pi RPC, Claude stream-json).
    AgentInput,
    /// The standard output of the hook command that is waiting for a
    /// decision (Claude Code's `PermissionRequest` hook, via `colibri hook`).
    HookOutput,
    /// The agent asked colibri itself (`approval-request`, `activity`
    /// `approval_request`): the decision goes to its waiting request and
    /// to the `approvals` history, never onto its input in a harness's
    /// protocol.
    Reply,
}

impl AnswerChannel {
    pub const fn as_str(self) -> &'static str {
        match self {
            AnswerChannel::AgentInput => "agent_input",
            AnswerChannel::HookOutput => "hook_output",
            AnswerChannel::Reply => "reply",
        }
    }
}

/// A request as an adapter read it from one line; borrows from the line.
#[derive(Clone, Debug)]
pub struct ApprovalRequest<'a> {
    pub kind: ApprovalKind,
    pub channel: AnswerChannel,
    /// The harness's own id, needed to answer (Pi `id`, Claude
    /// `request_id`, Codex `call_id`).
    pub request_id: Cow<'a, str>,
    pub tool: Option<Cow<'a, str>>,
    /// The tool's input as the harness sent it; Claude's allow reply must
    /// echo it back as `updatedInput`.
    pub input: Option<&'a RawValue>,
    pub title: Option<Cow<'a, str>>,
    pub message: Option<Cow<'a, str>>,
    pub options: Vec<Cow<'a, str>>,
    /// The harness answers by itself after this long (Pi `timeout`).
    pub timeout: Option<Duration>,
    /// The tool call this permission is for (Claude `tool_use_id`): a
    /// result for it means the request was settled elsewhere.
    pub tool_use_id: Option<Cow<'a, str>>,
}

impl<'a> ApprovalRequest<'a> {
    pub fn new(kind: ApprovalKind, request_id: Cow<'a, str>) -> Self {
        ApprovalRequest {
            kind,
            channel: AnswerChannel::AgentInput,
            request_id,
            tool: None,
            input: None,
            title: None,
            message: None,
            options: Vec::new(),
            timeout: None,
            tool_use_id: None,
        }
    }
}

/// What an agent asks the operator itself (`approval-request`, `activity`
/// `approval_request`): may it go on with `operation`? Answered approve or
/// deny on [`AnswerChannel::Reply`]; no harness line is involved, so the
/// daemon logs it as a `colibri` `approval_request` record, which `fold`
/// and recovery replay ([`LoggedApproval::Requested`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRequest {
    pub operation: String,
    pub reasoning: Option<String>,
    pub task_id: Option<u64>,
    pub estimated_tokens: Option<u64>,
}

/// Which pending approvals a line settles without the operator.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Resolves<'a> {
    #[default]
    Nothing,
    /// The harness withdrew this request (Claude `control_cancel_request`).
    Cancelled(Cow<'a, str>),
    /// These tool calls have results: their permissions were settled.
    ToolUses(Vec<Cow<'a, str>>),
    /// The harness went on (a run settled, a turn ended): nothing pending
    /// can still be answered.
    All,
}

/// The longest title, message or option kept, in characters.
const TEXT_CHARS: usize = 500;
/// The most options kept for a select.
const MAX_OPTIONS: usize = 32;
/// The largest tool input kept to echo back (bytes); a larger one is not
/// kept and the request cannot be approved through colibri.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;

/// A pending request, owned by its pane.
#[derive(Clone, Debug, PartialEq)]
pub struct Approval {
    /// colibri's id: the pane id's first 8 characters, `-`, a per-pane count.
    pub id: String,
    pub kind: ApprovalKind,
    pub channel: AnswerChannel,
    pub request_id: String,
    pub tool: Option<String>,
    /// A short form of the tool's input.
    pub summary: Option<String>,
    pub title: Option<String>,
    pub message: Option<String>,
    pub options: Vec<String>,
    pub asked_at: Timestamp,
    /// When the harness answers by itself (Pi's dialog timeout).
    pub expires_at: Option<Timestamp>,
    /// The non-blank line of the stream that asked.
    pub line: u64,
    pub tool_use_id: Option<String>,
    /// The control plane's task an agent's own request is about.
    pub task_id: Option<u64>,
    /// What the agent expects the operation to cost, in tokens.
    pub estimated_tokens: Option<u64>,
    /// The raw tool input, when small enough to echo back.
    input: Option<KeptInput>,
    input_too_big: bool,
}

/// A tool input kept verbatim; equal when its JSON text is.
#[derive(Clone, Debug)]
struct KeptInput(Box<RawValue>);

impl PartialEq for KeptInput {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Approval {
    /// The tool's input as the harness sent it (JSON text), when kept.
    pub fn input_json(&self) -> Option<&str> {
        self.input.as_ref().map(|i| i.0.get())
    }

    /// Owns what `req` borrows, trimming text to bounded sizes.
    pub fn from_request(id: String, req: &ApprovalRequest<'_>, now: Timestamp, line: u64) -> Self {
        let (input, input_too_big) = match req.input {
            Some(raw) if raw.get().len() <= MAX_INPUT_BYTES => {
                (Some(KeptInput(raw.to_owned())), false)
            }
            Some(_) => (None, true),
            None => (None, false),
        };
        Approval {
            id,
            kind: req.kind,
            channel: req.channel,
            request_id: req.request_id.to_string(),
            tool: req.tool.as_deref().map(tool::truncate),
            summary: req.input.map(tool::summarize_args),
            title: req.title.as_deref().map(bounded),
            message: req.message.as_deref().map(bounded),
            options: req
                .options
                .iter()
                .take(MAX_OPTIONS)
                .map(|o| bounded(o))
                .collect(),
            asked_at: now,
            expires_at: req.timeout.map(|t| now.plus(t)),
            line,
            tool_use_id: req.tool_use_id.as_deref().map(str::to_string),
            task_id: None,
            estimated_tokens: None,
            input,
            input_too_big,
        }
    }

    /// An agent's own request, answered on [`AnswerChannel::Reply`]: a
    /// yes/no question whose title is the operation and whose message the
    /// agent's reasoning, both bounded like a harness's.
    pub fn from_agent(id: String, req: &AgentRequest, now: Timestamp, line: u64) -> Self {
        Approval {
            id,
            kind: ApprovalKind::Confirm,
            channel: AnswerChannel::Reply,
            request_id: String::new(),
            tool: None,
            summary: None,
            title: Some(bounded(&req.operation)),
            message: req.reasoning.as_deref().map(bounded),
            options: Vec::new(),
            asked_at: now,
            expires_at: None,
            line,
            tool_use_id: None,
            task_id: req.task_id,
            estimated_tokens: req.estimated_tokens,
            input: None,
            input_too_big: false,
        }
    }

    /// One line saying what is asked, for a reason or a notification.
    pub fn question(&self) -> String {
        if let Some(t) = &self.tool {
            return match &self.summary {
                Some(s) if !s.is_empty() => format!("permission: {t}: {s}"),
                _ => format!("permission: {t}"),
            };
        }
        let text = self.title.as_deref().or(self.message.as_deref());
        tool::truncate(text.unwrap_or(self.kind.as_str()))
    }
}

/// Keeps at most [`TEXT_CHARS`] characters, whole characters only.
pub fn bounded(s: &str) -> String {
    match s.char_indices().nth(TEXT_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

/// The operator's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny {
        message: Option<String>,
    },
    /// Free text, or one of a select's options (its text, or its 1-based
    /// number).
    Answer {
        text: String,
    },
}

impl Decision {
    pub const fn as_str(&self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny { .. } => "deny",
            Decision::Answer { .. } => "answer",
        }
    }
}

/// An answer as a session log keeps it: the daemon's `colibri` `answer`
/// record (`daemon::store::record::encode_answer`), read back. `colibri
/// fold` and the daemon's recovery both read it here and replay it with
/// [`crate::core::pane::Pane::replay_answer`], so for one pane's run they
/// close the same approvals the same way. (Recovery replays each pane's
/// answers since its last attach; `fold` takes one pane of a log, its
/// lines up to its first exit.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedAnswer {
    /// colibri's id of the approval answered (`3f2a9c1d-2`).
    pub approval: String,
    pub decision: Decision,
    /// Who gave it (`operator`, `jail:NAME`, `policy`), when recorded.
    pub by: Option<String>,
    /// The answering peer's effective uid, when recorded.
    pub uid: Option<u32>,
}

/// Why a session log's approval record (`answer`, `approval_request`,
/// `approval_expired`) cannot be replayed. The record stays in its log as
/// it is; only its replay is skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadAnswer {
    /// Not a JSON object with string fields where the record has them.
    Unreadable,
    /// No `approval`, or one without the `-N` count that names it in its pane.
    NoApproval,
    /// A `decision` other than `approve`, `deny` or `answer`.
    UnknownDecision(String),
    /// An `approval_request` without its `operation`.
    NoOperation,
    /// An `approval_expired` whose `reason` is none of [`ExpiryReason`]'s.
    UnknownReason(String),
}

impl std::fmt::Display for BadAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadAnswer::Unreadable => write!(f, "not a readable approval record"),
            BadAnswer::NoApproval => write!(f, "it names no approval"),
            BadAnswer::UnknownDecision(d) => write!(f, "unknown decision {d:?}"),
            BadAnswer::NoOperation => write!(f, "an approval request without its operation"),
            BadAnswer::UnknownReason(r) => write!(f, "unknown expiry reason {r:?}"),
        }
    }
}

impl std::error::Error for BadAnswer {}

/// The fields of an approval record that its replay reads.
#[derive(serde::Deserialize)]
struct AnswerFields<'a> {
    #[serde(borrow, default)]
    colibri: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    approval: Option<Cow<'a, str>>,
    /// Set on an answer the daemon gave a hook call itself.
    #[serde(borrow, default)]
    hook: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    decision: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    by: Option<Cow<'a, str>>,
    #[serde(default)]
    uid: Option<u32>,
    /// `approval_request`: what the agent asked.
    #[serde(borrow, default)]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    task_id: Option<u64>,
    #[serde(default)]
    estimated_tokens: Option<u64>,
    /// `approval_expired`: why.
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
}

impl AnswerFields<'_> {
    /// The approval the record names, with the count a replay matches on.
    fn counted_approval(&self) -> Result<String, BadAnswer> {
        self.approval
            .as_deref()
            .filter(|a| a.rsplit_once('-').is_some_and(|(_, n)| !n.is_empty()))
            .map(str::to_string)
            .ok_or(BadAnswer::NoApproval)
    }
}

impl LoggedAnswer {
    /// Reads one session-log record: `Ok(None)` when it is a record of
    /// another kind, or an answer the daemon gave a hook call itself (a
    /// `hook` field: the command guard's deny of a Claude Code
    /// `PreToolUse`, which opened no approval, so there is nothing to
    /// replay); an error when it cannot be read as an answer.
    pub fn from_record(line: &[u8]) -> Result<Option<LoggedAnswer>, BadAnswer> {
        let f: AnswerFields<'_> =
            serde_json::from_slice(line).map_err(|_| BadAnswer::Unreadable)?;
        if f.colibri.as_deref() != Some("answer") {
            return Ok(None);
        }
        LoggedAnswer::from_fields(f)
    }

    fn from_fields(f: AnswerFields<'_>) -> Result<Option<LoggedAnswer>, BadAnswer> {
        if f.hook.is_some() {
            return Ok(None);
        }
        let approval = f.counted_approval()?;
        let decision = match f.decision.as_deref() {
            Some("approve") => Decision::Approve,
            Some("deny") => Decision::Deny {
                message: f.message.map(Cow::into_owned),
            },
            Some("answer") => Decision::Answer {
                text: f.text.map(Cow::into_owned).unwrap_or_default(),
            },
            other => return Err(BadAnswer::UnknownDecision(other.unwrap_or("").to_string())),
        };
        Ok(Some(LoggedAnswer {
            approval,
            decision,
            by: f.by.map(Cow::into_owned),
            uid: f.uid,
        }))
    }

    /// The approval's per-pane count: what a replay matches on.
    pub fn count(&self) -> &str {
        count_of(&self.approval)
    }
}

/// The per-pane count of approval id `id` (`3f2a9c1d-2`: `2`).
fn count_of(id: &str) -> &str {
    id.rsplit_once('-').map_or("", |(_, n)| n)
}

/// An approval record of a session log, read back for `colibri fold` and
/// recovery, which replay each at its place among the pane's lines
/// ([`crate::core::pane::Pane::replay`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoggedApproval {
    /// `colibri` `approval_request`: an agent asked the operator itself.
    /// The replay opens it as the next approval of the pane, as the daemon
    /// did; `approval` is the id it had there.
    Requested {
        approval: String,
        request: AgentRequest,
    },
    /// `colibri` `answer`.
    Answered(LoggedAnswer),
    /// `colibri` `approval_expired`: an agent's request ended unanswered
    /// while its agent ran on (its wait ran out). A harness's timeout needs
    /// no record: the harness's own lines settle it in the replay too.
    Expired {
        approval: String,
        reason: ExpiryReason,
    },
}

impl LoggedApproval {
    /// Reads one session-log record: `Ok(None)` for a record of another
    /// kind (or an answer no approval holds); an error when it is an
    /// approval record that cannot be read.
    pub fn from_record(line: &[u8]) -> Result<Option<LoggedApproval>, BadAnswer> {
        let f: AnswerFields<'_> =
            serde_json::from_slice(line).map_err(|_| BadAnswer::Unreadable)?;
        match f.colibri.as_deref() {
            Some("answer") => Ok(LoggedAnswer::from_fields(f)?.map(LoggedApproval::Answered)),
            Some("approval_request") => {
                let approval = f.counted_approval()?;
                let operation = f.operation.ok_or(BadAnswer::NoOperation)?.into_owned();
                Ok(Some(LoggedApproval::Requested {
                    approval,
                    request: AgentRequest {
                        operation,
                        reasoning: f.reasoning.map(Cow::into_owned),
                        task_id: f.task_id,
                        estimated_tokens: f.estimated_tokens,
                    },
                }))
            }
            Some("approval_expired") => {
                let approval = f.counted_approval()?;
                let given = f.reason.as_deref().unwrap_or("");
                let reason = ExpiryReason::parse(given)
                    .ok_or_else(|| BadAnswer::UnknownReason(given.to_string()))?;
                Ok(Some(LoggedApproval::Expired { approval, reason }))
            }
            _ => Ok(None),
        }
    }

    /// The id of the approval the record is about.
    pub fn approval(&self) -> &str {
        match self {
            LoggedApproval::Requested { approval, .. }
            | LoggedApproval::Expired { approval, .. } => approval,
            LoggedApproval::Answered(a) => &a.approval,
        }
    }

    /// The approval's per-pane count: what a replay matches on.
    pub fn count(&self) -> &str {
        count_of(self.approval())
    }
}

/// Why no reply could be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// The harness offers no way to answer on its input in this mode.
    NoAnswerChannel { runtime: Runtime, why: &'static str },
    /// This kind of request does not take this decision (an `answer` to a
    /// yes/no confirm, an `approve` to a free-text question).
    WrongDecision {
        kind: ApprovalKind,
        decision: &'static str,
    },
    /// The answer names none of the select's options.
    NotAnOption { given: String, options: Vec<String> },
    /// The tool input was too large to keep, so it cannot be echoed back.
    InputNotKept,
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::NoAnswerChannel { runtime, why } => {
                write!(f, "{runtime} cannot be answered: {why}")
            }
            AnswerError::WrongDecision { kind, decision } => {
                write!(f, "a {} request does not take {decision}", kind.as_str())
            }
            AnswerError::NotAnOption { given, options } => write!(
                f,
                "{given:?} is not one of the options ({})",
                options.join(", ")
            ),
            AnswerError::InputNotKept => write!(
                f,
                "the tool input is larger than {MAX_INPUT_BYTES} bytes and was not kept"
            ),
        }
    }
}

impl std::error::Error for AnswerError {}

/// Claude's clarifying-question tool, asked through `can_use_tool` and
/// answered with `answers` in `updatedInput`.
pub const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// What to deny with when the operator gives no reason: Claude shows the
/// message to the model, and an empty one says nothing.
pub const DEFAULT_DENY_MESSAGE: &str = "Denied by the operator.";

/// The exact bytes (one JSON line and `\n`) that answer `approval` with
/// `decision` on the channel the approval names.
pub fn encode_answer(
    runtime: Runtime,
    approval: &Approval,
    decision: &Decision,
) -> Result<Vec<u8>, AnswerError> {
    let mut line = match (runtime, approval.channel) {
        (_, AnswerChannel::Reply) => {
            check_reply(approval, decision)?;
            return Ok(Vec::new());
        }
        (Runtime::Pi, AnswerChannel::AgentInput) => pi_response(approval, decision)?,
        (Runtime::Claude, AnswerChannel::AgentInput) => claude_control_response(approval, decision)?,
        (Runtime::Claude, AnswerChannel::HookOutput) => claude_hook_decision(approval, decision)?,
        (Runtime::Codex, _) => {
            return Err(AnswerError::NoAnswerChannel {
                runtime,
                why: "`codex exec` rejects every approval and question itself and reads no answers on its input",
            })
        }
        _ => {
            return Err(AnswerError::NoAnswerChannel {
                runtime,
                why: "no documented answer channel",
            })
        }
    };
    line.push(b'\n');
    Ok(line)
}

/// Whether `decision` answers an agent's own request ([`AnswerChannel::Reply`]):
/// it asks to approve or deny, nothing else. Nothing is written anywhere:
/// the daemon hands the decision to the agent's waiting request.
pub fn check_reply(approval: &Approval, decision: &Decision) -> Result<(), AnswerError> {
    match decision {
        Decision::Approve | Decision::Deny { .. } => Ok(()),
        Decision::Answer { .. } => Err(AnswerError::WrongDecision {
            kind: approval.kind,
            decision: decision.as_str(),
        }),
    }
}

/// Serialises a reply built from borrowed structs; their fields are
/// strings, bools and raw JSON, which always serialise.
fn to_line<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

#[derive(Serialize)]
struct PiResponse<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    confirmed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<bool>,
}

/// Pi RPC `extension_ui_response`: `confirmed` for a confirm, `value` for
/// a select, input or editor, `cancelled:true` to dismiss any of them.
fn pi_response(approval: &Approval, decision: &Decision) -> Result<Vec<u8>, AnswerError> {
    let mut r = PiResponse {
        kind: "extension_ui_response",
        id: &approval.request_id,
        value: None,
        confirmed: None,
        cancelled: None,
    };
    let wrong = || AnswerError::WrongDecision {
        kind: approval.kind,
        decision: decision.as_str(),
    };
    match (approval.kind, decision) {
        (ApprovalKind::Confirm, Decision::Approve) => r.confirmed = Some(true),
        (ApprovalKind::Confirm, Decision::Deny { .. }) => r.confirmed = Some(false),
        (ApprovalKind::Select | ApprovalKind::Input, Decision::Deny { .. }) => {
            r.cancelled = Some(true)
        }
        (ApprovalKind::Select, Decision::Answer { text }) => {
            r.value = Some(pick_option(approval, text)?)
        }
        (ApprovalKind::Input, Decision::Answer { text }) => r.value = Some(text),
        _ => return Err(wrong()),
    }
    Ok(to_line(&r))
}

/// The option an answer names: its exact text, else its 1-based number.
fn pick_option<'a>(approval: &'a Approval, given: &'a str) -> Result<&'a str, AnswerError> {
    if let Some(o) = approval.options.iter().find(|o| o.as_str() == given) {
        return Ok(o);
    }
    let numbered = given
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| approval.options.get(i));
    numbered
        .map(String::as_str)
        .ok_or_else(|| AnswerError::NotAnOption {
            given: given.to_string(),
            options: approval.options.clone(),
        })
}

#[derive(Serialize)]
struct ClaudeControlResponse<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    response: ClaudeControlSuccess<'a>,
}

#[derive(Serialize)]
struct ClaudeControlSuccess<'a> {
    subtype: &'static str,
    request_id: &'a str,
    response: PermissionResult<'a>,
}

#[derive(Serialize)]
#[serde(tag = "behavior", rename_all = "lowercase")]
enum PermissionResult<'a> {
    Allow {
        #[serde(rename = "updatedInput")]
        updated_input: UpdatedInput<'a>,
    },
    Deny {
        message: &'a str,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum UpdatedInput<'a> {
    Raw(&'a RawValue),
    /// The input with `answers` added (an `AskUserQuestion` answered).
    Answered(serde_json::Map<String, serde_json::Value>),
    /// A request that carried no input is allowed with `{}`.
    Empty(serde_json::Map<String, serde_json::Value>),
}

/// Claude stream-json `control_response` to a `can_use_tool` request, as
/// the Agent SDK writes it: allow echoes the tool input unchanged as
/// `updatedInput`; deny carries a message for the model.
fn claude_control_response(
    approval: &Approval,
    decision: &Decision,
) -> Result<Vec<u8>, AnswerError> {
    if approval.kind != ApprovalKind::ToolPermission {
        return claude_question_response(approval, decision);
    }
    let result = match decision {
        Decision::Approve => {
            if approval.input_too_big {
                return Err(AnswerError::InputNotKept);
            }
            PermissionResult::Allow {
                updated_input: match &approval.input {
                    Some(kept) => UpdatedInput::Raw(&kept.0),
                    None => UpdatedInput::Empty(serde_json::Map::new()),
                },
            }
        }
        Decision::Deny { message } => PermissionResult::Deny {
            message: deny_message(message),
        },
        Decision::Answer { .. } => {
            return Err(AnswerError::WrongDecision {
                kind: approval.kind,
                decision: decision.as_str(),
            })
        }
    };
    Ok(claude_control_line(approval, result))
}

/// A `control_response` line answering `approval`'s `can_use_tool` request.
fn claude_control_line(approval: &Approval, result: PermissionResult<'_>) -> Vec<u8> {
    to_line(&ClaudeControlResponse {
        kind: "control_response",
        response: ClaudeControlSuccess {
            subtype: "success",
            request_id: &approval.request_id,
            response: result,
        },
    })
}

/// The reply to an `AskUserQuestion` with one question: allow, with the
/// input passed through and `answers` mapping the question's text to the
/// chosen option's label (or the operator's own text); deny as usual.
fn claude_question_response(
    approval: &Approval,
    decision: &Decision,
) -> Result<Vec<u8>, AnswerError> {
    let result = match decision {
        Decision::Answer { text } => PermissionResult::Allow {
            updated_input: UpdatedInput::Answered(answered_input(approval, text)?),
        },
        Decision::Deny { message } => PermissionResult::Deny {
            message: deny_message(message),
        },
        Decision::Approve => {
            return Err(AnswerError::WrongDecision {
                kind: approval.kind,
                decision: decision.as_str(),
            })
        }
    };
    Ok(claude_control_line(approval, result))
}

/// The kept input with `answers` added. The key is the question's full
/// text, read again from the input (the approval's copy is shortened).
fn answered_input(
    approval: &Approval,
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, AnswerError> {
    use serde_json::Value;
    let kept = approval.input.as_ref().ok_or(AnswerError::InputNotKept)?;
    let mut input: serde_json::Map<String, Value> =
        serde_json::from_str(kept.0.get()).map_err(|_| AnswerError::InputNotKept)?;
    let question = input
        .get("questions")
        .and_then(|q| q.get(0))
        .and_then(|q| q.get("question"))
        .and_then(Value::as_str)
        .ok_or(AnswerError::InputNotKept)?
        .to_string();
    // A number picks an option; any other text is the operator's own
    // answer, which the question accepts as free text.
    let answer = match approval.kind {
        ApprovalKind::Select => pick_option(approval, text).unwrap_or(text),
        _ => text,
    };
    let mut answers = serde_json::Map::new();
    answers.insert(question, Value::String(answer.to_string()));
    input.insert("answers".into(), Value::Object(answers));
    Ok(input)
}

fn deny_message(message: &Option<String>) -> &str {
    match message.as_deref() {
        Some(m) if !m.trim().is_empty() => m,
        _ => DEFAULT_DENY_MESSAGE,
    }
}

#[derive(Serialize)]
struct HookOutput<'a> {
    #[serde(rename = "hookSpecificOutput")]
    hook_specific_output: HookSpecific<'a>,
}

#[derive(Serialize)]
struct HookSpecific<'a> {
    #[serde(rename = "hookEventName")]
    hook_event_name: &'static str,
    decision: HookDecision<'a>,
}

#[derive(Serialize)]
#[serde(tag = "behavior", rename_all = "lowercase")]
enum HookDecision<'a> {
    Allow,
    Deny { message: &'a str },
}

/// Claude Code `PermissionRequest` hook output: what `colibri hook` prints
/// for the operator's decision.
fn claude_hook_decision(approval: &Approval, decision: &Decision) -> Result<Vec<u8>, AnswerError> {
    let d = match decision {
        Decision::Approve => HookDecision::Allow,
        Decision::Deny { message } => HookDecision::Deny {
            message: deny_message(message),
        },
        Decision::Answer { .. } => {
            return Err(AnswerError::WrongDecision {
                kind: approval.kind,
                decision: decision.as_str(),
            })
        }
    };
    Ok(to_line(&HookOutput {
        hook_specific_output: HookSpecific {
            hook_event_name: "PermissionRequest",
            decision: d,
        },
    }))
}

/// A Claude Code `PreToolUse` the command guard denies before the tool
/// runs. No approval opens: the verdict is the guard's alone, at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreToolUseDenial {
    /// The hook input's `tool_use_id` (empty without one): what the
    /// session log's answer record names in place of an approval.
    pub tool_use_id: String,
    /// The deny message: the rule and the command.
    pub message: String,
    /// The exact line `colibri hook` prints, without its newline.
    pub output: String,
}

#[derive(Serialize)]
struct PreToolUseOutput<'a> {
    #[serde(rename = "hookSpecificOutput")]
    hook_specific_output: PreToolUseDecision<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PreToolUseDecision<'a> {
    hook_event_name: &'static str,
    permission_decision: &'static str,
    permission_decision_reason: &'a str,
}

/// The command guard on a Claude Code hook input: for a `PreToolUse` whose
/// `tool_input` the guard flags, the deny Claude
/// Code reads on the hook's output (`permissionDecision: "deny"`, which
/// blocks the call even where no permission is asked). `None` for any
/// other event, a harmless call, or a guard (or rule) turned off: the
/// hook prints nothing and the call goes on.
///
/// `rm` targets are resolved from the input's own `cwd` (where Claude Code
/// runs the call, which a `cd` in an earlier call may have moved) and must
/// lie below the agent's `cwd` (which stands in for the input's when that
/// has none; without the agent's, only relative targets that stay below
/// the input's `cwd` pass), or below a path of the pane's `scope` (its
/// declared paths and `[guard] scope_paths`). The scope rule's writes
/// outside the scope are the stream's to judge (warn, then pause), not
/// denied here.
pub fn guard_pre_tool_use(
    guard: &GuardSettings,
    event: &serde_json::Value,
    cwd: Option<&str>,
    scope: &[String],
) -> Option<PreToolUseDenial> {
    if event.get("hook_event_name")?.as_str()? != "PreToolUse" {
        return None;
    }
    let tool = event.get("tool_name")?.as_str()?;
    let args = event.get("tool_input")?.to_string();
    let here = event.get("cwd").and_then(serde_json::Value::as_str);
    // The hook's `cwd` moves with `cd`: it never stands in as the bound, so
    // without the pane's directory an absolute target is still outside.
    let roots = guard.roots(cwd, scope);
    let dirs = crate::core::policy::guard::Dirs {
        root: cwd,
        here: here.or(cwd),
        scope: roots.others(),
    };
    let message = guard.check_in(tool, &args, dirs)?.refusal();
    let output = PreToolUseOutput {
        hook_specific_output: PreToolUseDecision {
            hook_event_name: "PreToolUse",
            permission_decision: "deny",
            permission_decision_reason: &message,
        },
    };
    let output = String::from_utf8_lossy(&to_line(&output)).into_owned();
    let tool_use_id = event
        .get("tool_use_id")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string();
    Some(PreToolUseDenial {
        tool_use_id,
        message,
        output,
    })
}

/// How an approval stopped being pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// colibri wrote the operator's reply.
    Answered { decision: Decision },
    /// It can no longer be answered.
    Expired { reason: ExpiryReason },
}

/// Why an approval expired.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExpiryReason {
    /// The harness withdrew the request.
    Cancelled,
    /// The harness went on without colibri's answer (answered elsewhere,
    /// or the run it belonged to ended).
    Resolved,
    /// Its own timeout passed; the harness answered with its default.
    TimedOut,
    /// The agent exited.
    Exited,
    /// colibri stopped the agent on purpose (`stop-agent`, a restart, an
    /// orderly shutdown): nobody abandoned it, and nobody need act on it.
    Stopped,
    /// Too many were pending; the oldest was dropped.
    Overflow,
}

impl ExpiryReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            ExpiryReason::Cancelled => "cancelled",
            ExpiryReason::Resolved => "resolved",
            ExpiryReason::TimedOut => "timed_out",
            ExpiryReason::Exited => "exited",
            ExpiryReason::Stopped => "stopped",
            ExpiryReason::Overflow => "overflow",
        }
    }

    /// The reason [`ExpiryReason::as_str`] names.
    pub fn parse(s: &str) -> Option<ExpiryReason> {
        [
            ExpiryReason::Cancelled,
            ExpiryReason::Resolved,
            ExpiryReason::TimedOut,
            ExpiryReason::Exited,
            ExpiryReason::Stopped,
            ExpiryReason::Overflow,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One change to a pane's approvals, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalEvent {
    Opened(Approval),
    Closed {
        approval: Approval,
        outcome: ApprovalOutcome,
        at: Timestamp,
        /// Non-blank lines seen when it closed (0: not caused by a line).
        line: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> &RawValue {
        serde_json::from_str(s).expect("valid raw JSON")
    }

    fn approval(kind: ApprovalKind, request_id: &str) -> Approval {
        Approval::from_request(
            "fold-1".into(),
            &ApprovalRequest::new(kind, Cow::Borrowed(request_id)),
            Timestamp::from_millis(0),
            1,
        )
    }

    fn text(bytes: Result<Vec<u8>, AnswerError>) -> String {
        String::from_utf8(bytes.expect("encodes")).expect("UTF-8")
    }

    #[test]
    fn pi_replies_match_rpc_md() {
        let mut a = approval(ApprovalKind::Confirm, "uuid-2");
        assert_eq!(
            text(encode_answer(Runtime::Pi, &a, &Decision::Approve)),
            "{\"type\":\"extension_ui_response\",\"id\":\"uuid-2\",\"confirmed\":true}\n"
        );
        assert_eq!(
            text(encode_answer(
                Runtime::Pi,
                &a,
                &Decision::Deny { message: None }
            )),
            "{\"type\":\"extension_ui_response\",\"id\":\"uuid-2\",\"confirmed\":false}\n"
        );
        a.kind = ApprovalKind::Select;
        a.options = vec!["Allow".into(), "Block".into()];
        assert_eq!(
            text(encode_answer(
                Runtime::Pi,
                &a,
                &Decision::Answer { text: "2".into() }
            )),
            "{\"type\":\"extension_ui_response\",\"id\":\"uuid-2\",\"value\":\"Block\"}\n"
        );
        assert_eq!(
            text(encode_answer(
                Runtime::Pi,
                &a,
                &Decision::Deny { message: None }
            )),
            "{\"type\":\"extension_ui_response\",\"id\":\"uuid-2\",\"cancelled\":true}\n"
        );
        assert!(matches!(
            encode_answer(
                Runtime::Pi,
                &a,
                &Decision::Answer {
                    text: "Maybe".into()
                }
            ),
            Err(AnswerError::NotAnOption { .. })
        ));
        assert!(matches!(
            encode_answer(Runtime::Pi, &a, &Decision::Approve),
            Err(AnswerError::WrongDecision { .. })
        ));
    }

    #[test]
    fn pi_free_text_is_escaped_json() {
        let a = approval(ApprovalKind::Input, "uuid-3");
        assert_eq!(
            text(encode_answer(
                Runtime::Pi,
                &a,
                &Decision::Answer {
                    text: "line \"one\"\nline two".into()
                }
            )),
            "{\"type\":\"extension_ui_response\",\"id\":\"uuid-3\",\"value\":\"line \\\"one\\\"\\nline two\"}\n"
        );
    }

    #[test]
    fn claude_allow_echoes_the_input_and_deny_carries_a_message() {
        let mut req = ApprovalRequest::new(ApprovalKind::ToolPermission, Cow::Borrowed("req_9"));
        req.tool = Some(Cow::Borrowed("Bash"));
        req.input = Some(raw(r#"{"command":"rm -rf build"}"#));
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 3);
        assert_eq!(a.summary.as_deref(), Some("rm -rf build"));
        assert_eq!(
            text(encode_answer(Runtime::Claude, &a, &Decision::Approve)),
            "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"req_9\",\"response\":{\"behavior\":\"allow\",\"updatedInput\":{\"command\":\"rm -rf build\"}}}}\n"
        );
        assert_eq!(
            text(encode_answer(
                Runtime::Claude,
                &a,
                &Decision::Deny {
                    message: Some("not on main".into())
                }
            )),
            "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"req_9\",\"response\":{\"behavior\":\"deny\",\"message\":\"not on main\"}}}\n"
        );
        assert_eq!(
            text(encode_answer(Runtime::Claude, &a, &Decision::Deny { message: None })),
            "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"req_9\",\"response\":{\"behavior\":\"deny\",\"message\":\"Denied by the operator.\"}}}\n"
        );
    }

    #[test]
    fn claude_hook_decisions() {
        let mut a = approval(ApprovalKind::ToolPermission, "");
        a.channel = AnswerChannel::HookOutput;
        assert_eq!(
            text(encode_answer(Runtime::Claude, &a, &Decision::Approve)),
            "{\"hookSpecificOutput\":{\"hookEventName\":\"PermissionRequest\",\"decision\":{\"behavior\":\"allow\"}}}\n"
        );
        assert_eq!(
            text(encode_answer(
                Runtime::Claude,
                &a,
                &Decision::Deny {
                    message: Some("no".into())
                }
            )),
            "{\"hookSpecificOutput\":{\"hookEventName\":\"PermissionRequest\",\"decision\":{\"behavior\":\"deny\",\"message\":\"no\"}}}\n"
        );
    }

    #[test]
    fn the_guard_denies_a_destructive_pre_tool_use_on_the_hooks_output() {
        let guard = GuardSettings::default();
        let ev = serde_json::json!({"hook_event_name":"PreToolUse","tool_name":"Bash",
            "tool_input":{"command":"rm -rf /"},"tool_use_id":"toolu_g1"});
        let denial = guard_pre_tool_use(&guard, &ev, Some("/srv/app"), &[]).expect("denied");
        assert_eq!(denial.tool_use_id, "toolu_g1");
        assert_eq!(
            denial.message,
            "colibri's command guard refused this (rm_outside_cwd): rm -rf /"
        );
        assert_eq!(
            denial.output,
            "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"deny\",\"permissionDecisionReason\":\"colibri's command guard refused this (rm_outside_cwd): rm -rf /\"}}"
        );
        // A harmless call, a call below the working directory: nothing.
        let harmless = |command: &str| {
            serde_json::json!({"hook_event_name":"PreToolUse","tool_name":"Bash",
                "tool_input":{"command":command}})
        };
        assert_eq!(
            guard_pre_tool_use(&guard, &harmless("ls -la"), Some("/srv/app"), &[]),
            None
        );
        assert_eq!(
            guard_pre_tool_use(&guard, &harmless("rm -rf ./build"), Some("/srv/app"), &[]),
            None
        );
        // Another event with the same input is not this path's to answer.
        let mut asked = ev.clone();
        asked["hook_event_name"] = serde_json::json!("PermissionRequest");
        assert_eq!(
            guard_pre_tool_use(&guard, &asked, Some("/srv/app"), &[]),
            None
        );
        // The guard off, or the rule off: never denied.
        let off = GuardSettings {
            enabled: false,
            ..GuardSettings::default()
        };
        assert_eq!(guard_pre_tool_use(&off, &ev, Some("/srv/app"), &[]), None);
        let rule_off = GuardSettings {
            disabled: vec![crate::core::policy::GuardRule::RmOutsideCwd],
            ..GuardSettings::default()
        };
        assert_eq!(
            guard_pre_tool_use(&rule_off, &ev, Some("/srv/app"), &[]),
            None
        );
    }

    #[test]
    fn a_pre_tool_use_is_judged_where_it_runs_within_the_agents_directory() {
        let guard = GuardSettings::default();
        let call = |command: &str, cwd: &str| {
            serde_json::json!({"hook_event_name":"PreToolUse","tool_name":"Bash",
                "tool_input":{"command":command},"cwd":cwd,"tool_use_id":"toolu_c"})
        };
        let app = Some("/srv/app");
        // The agent moved to /: `etc` is /etc.
        let denial =
            guard_pre_tool_use(&guard, &call("rm -rf etc", "/"), app, &[]).expect("denied");
        assert!(denial.message.contains("rm -rf etc"), "{}", denial.message);
        // In a subdirectory, `../build` is the project's own build dir.
        assert_eq!(
            guard_pre_tool_use(&guard, &call("rm -rf ../build", "/srv/app/src"), app, &[]),
            None
        );
        // The pane's directory unknown: the call's stands in.
        assert_eq!(
            guard_pre_tool_use(&guard, &call("rm -rf build", "/srv/app"), None, &[]),
            None
        );
        // The pane's scope holds more than its directory: what lies below
        // a declared path is the agent's too, for `rm` and `chmod -R`.
        let scope = ["../cache".to_string()];
        for (command, rule) in [
            ("rm -rf /srv/cache/old", "rm_outside_cwd"),
            ("chmod -R a+w /srv/cache", "chmod_outside_scope"),
        ] {
            let denial =
                guard_pre_tool_use(&guard, &call(command, "/srv/app"), app, &[]).expect("denied");
            assert!(denial.message.contains(rule), "{}", denial.message);
            assert_eq!(
                guard_pre_tool_use(&guard, &call(command, "/srv/app"), app, &scope),
                None,
                "{command} is in scope"
            );
        }
        // A write outside the scope is the stream's to judge, not denied.
        let write = serde_json::json!({"hook_event_name":"PreToolUse","tool_name":"Write",
            "tool_input":{"file_path":"/etc/motd","content":"hi"},"tool_use_id":"toolu_w"});
        assert_eq!(guard_pre_tool_use(&guard, &write, app, &[]), None);
    }

    #[test]
    fn an_input_too_big_to_keep_cannot_be_approved() {
        let big = format!("{{\"content\":\"{}\"}}", "x".repeat(MAX_INPUT_BYTES));
        let mut req = ApprovalRequest::new(ApprovalKind::ToolPermission, Cow::Borrowed("r"));
        req.input = Some(raw(&big));
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 1);
        assert_eq!(
            encode_answer(Runtime::Claude, &a, &Decision::Approve),
            Err(AnswerError::InputNotKept)
        );
        assert!(encode_answer(Runtime::Claude, &a, &Decision::Deny { message: None }).is_ok());
    }

    #[test]
    fn codex_and_others_have_no_answer_channel() {
        let a = approval(ApprovalKind::Input, "call_7");
        for rt in [
            Runtime::Codex,
            Runtime::Zot,
            Runtime::Gemini,
            Runtime::OpenCode,
        ] {
            assert!(matches!(
                encode_answer(rt, &a, &Decision::Answer { text: "yes".into() }),
                Err(AnswerError::NoAnswerChannel { .. })
            ));
        }
    }

    #[test]
    fn long_texts_are_bounded_on_a_character_boundary() {
        let mut req = ApprovalRequest::new(ApprovalKind::Confirm, Cow::Borrowed("x"));
        let long = "é".repeat(TEXT_CHARS + 10);
        req.title = Some(Cow::Owned(long));
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 1);
        let title = a.title.expect("title kept");
        assert_eq!(title.chars().count(), TEXT_CHARS + 1);
        assert!(title.ends_with('…'));
    }

    #[test]
    fn the_question_says_what_is_asked_in_one_line() {
        let mut req = ApprovalRequest::new(ApprovalKind::ToolPermission, Cow::Borrowed("r"));
        req.tool = Some(Cow::Borrowed("Bash"));
        req.input = Some(raw(r#"{"command":"git push --force"}"#));
        let a = Approval::from_request("p-1".into(), &req, Timestamp::from_millis(0), 1);
        assert_eq!(a.question(), "permission: Bash: git push --force");
        let mut req = ApprovalRequest::new(ApprovalKind::Confirm, Cow::Borrowed("u"));
        req.message = Some(Cow::Borrowed("All messages\nwill be lost."));
        let a = Approval::from_request("p-2".into(), &req, Timestamp::from_millis(0), 1);
        assert_eq!(a.question(), "All messages will be lost.");
        let a = approval(ApprovalKind::Input, "v");
        assert_eq!(a.question(), "input");
    }

    #[test]
    fn an_agents_request_takes_approve_or_deny_and_writes_nothing() {
        let req = AgentRequest {
            operation: "x".repeat(TEXT_CHARS + 5),
            reasoning: None,
            task_id: None,
            estimated_tokens: Some(10),
        };
        let a = Approval::from_agent("p-1".into(), &req, Timestamp::from_millis(0), 0);
        assert_eq!(a.question().chars().count(), 161, "one line, shortened");
        assert_eq!(
            a.title.as_deref().map(|t| t.chars().count()),
            Some(TEXT_CHARS + 1)
        );
        for rt in [Runtime::Pi, Runtime::Claude, Runtime::Codex, Runtime::Zot] {
            assert_eq!(encode_answer(rt, &a, &Decision::Approve), Ok(Vec::new()));
            let deny = Decision::Deny { message: None };
            assert_eq!(encode_answer(rt, &a, &deny), Ok(Vec::new()));
        }
        assert!(matches!(
            check_reply(&a, &Decision::Answer { text: "y".into() }),
            Err(AnswerError::WrongDecision { .. })
        ));
    }

    #[test]
    fn an_agents_request_and_its_expiry_read_back_or_say_why_not() {
        let read = |line: &str| LoggedApproval::from_record(line.as_bytes());
        assert_eq!(
            read(
                r#"{"ts":"t","pane":"p","colibri":"approval_request","approval":"3f2a9c1d-4","operation":"merge","reasoning":"why","task_id":2,"estimated_tokens":8500}"#
            ),
            Ok(Some(LoggedApproval::Requested {
                approval: "3f2a9c1d-4".into(),
                request: AgentRequest {
                    operation: "merge".into(),
                    reasoning: Some("why".into()),
                    task_id: Some(2),
                    estimated_tokens: Some(8500),
                },
            }))
        );
        let expired = read(
            r#"{"ts":"t","pane":"p","colibri":"approval_expired","approval":"3f2a9c1d-4","reason":"timed_out"}"#,
        );
        assert_eq!(
            expired,
            Ok(Some(LoggedApproval::Expired {
                approval: "3f2a9c1d-4".into(),
                reason: ExpiryReason::TimedOut,
            }))
        );
        assert_eq!(
            expired.ok().flatten().map(|r| r.count().to_string()),
            Some("4".into())
        );
        assert!(matches!(
            read(r#"{"colibri":"answer","approval":"a-1","decision":"approve"}"#),
            Ok(Some(LoggedApproval::Answered(_)))
        ));
        assert_eq!(read(r#"{"colibri":"exit","state":"done"}"#), Ok(None));
        assert_eq!(
            read(r#"{"colibri":"approval_request","approval":"a-1"}"#),
            Err(BadAnswer::NoOperation)
        );
        assert_eq!(
            read(r#"{"colibri":"approval_request","operation":"x"}"#),
            Err(BadAnswer::NoApproval)
        );
        assert_eq!(
            read(r#"{"colibri":"approval_expired","approval":"a-1","reason":"bored"}"#),
            Err(BadAnswer::UnknownReason("bored".into()))
        );
        for r in [
            ExpiryReason::Cancelled,
            ExpiryReason::Resolved,
            ExpiryReason::TimedOut,
            ExpiryReason::Exited,
            ExpiryReason::Stopped,
            ExpiryReason::Overflow,
        ] {
            assert_eq!(ExpiryReason::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn an_answer_record_reads_back_or_says_why_not() {
        let read = |line: &str| LoggedAnswer::from_record(line.as_bytes());
        assert_eq!(
            read(
                r#"{"ts":"t","pane":"p","colibri":"answer","approval":"3f2a9c1d-2","decision":"answer","text":"beta","by":"operator"}"#
            ),
            Ok(Some(LoggedAnswer {
                approval: "3f2a9c1d-2".into(),
                decision: Decision::Answer {
                    text: "beta".into()
                },
                by: Some("operator".into()),
                uid: None,
            }))
        );
        assert_eq!(
            read(r#"{"pane":"p","colibri":"exit","state":"done"}"#),
            Ok(None)
        );
        // The guard's deny of a PreToolUse: an answer no approval holds.
        assert_eq!(
            read(
                r#"{"pane":"p","colibri":"answer","approval":"toolu_01","hook":"PreToolUse","decision":"deny","message":"m","by":"policy"}"#
            ),
            Ok(None)
        );
        assert_eq!(
            read(r#"{"colibri":"answer","decision":"approve"}"#),
            Err(BadAnswer::NoApproval)
        );
        assert_eq!(
            read(r#"{"colibri":"answer","approval":"nocount","decision":"approve"}"#),
            Err(BadAnswer::NoApproval)
        );
        assert_eq!(
            read(r#"{"colibri":"answer","approval":"a-1","decision":"maybe"}"#),
            Err(BadAnswer::UnknownDecision("maybe".into()))
        );
        assert_eq!(
            read(r#"{"colibri":"answer","approval":7,"decision":"approve"}"#),
            Err(BadAnswer::Unreadable)
        );
    }
}
