//! The normalised signal set every harness adapter produces.
//!
//! An adapter reads one JSONL line of its agent and returns one
//! [`Observation`]: the [`Signal`] that drives the state machine plus the
//! metadata the pane records (usage, the tool call, an error message). Fields
//! borrow from the line so that nothing is copied unless the pane keeps it.

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::core::approval::{ApprovalRequest, Resolves};
use crate::core::usage::UsageUpdate;

/// What one line means for the pane's state.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal<'a> {
    /// A session header. Boxed: it comes once a session and is the
    /// largest signal, and every line's signal is moved on its way to the
    /// pane.
    Session(Box<SessionHeader<'a>>),
    /// Active work: streaming, tools, compaction, retries.
    Working,
    /// A human must answer before the agent can go on.
    Blocked,
    /// A long-lived agent is waiting for its next prompt.
    Idle,
    /// The task finished cleanly.
    Finished,
    /// The task failed.
    Failed,
    /// The agent process exited; injected by the daemon, never parsed.
    Exited { success: bool },
    /// A recognised line that does not change state (metadata only).
    Meta,
    /// A line whose type this adapter does not know. Never changes state.
    Unknown,
}

/// What a harness's session header says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionHeader<'a> {
    pub id: Option<Cow<'a, str>>,
    pub cwd: Option<Cow<'a, str>>,
    /// True for harnesses whose header is printed after a prompt is
    /// already in flight (Claude, Codex, Gemini).
    pub running: bool,
    /// The model the harness names in its header (Claude, Gemini):
    /// budgets price a harness's tokens by it.
    pub model: Option<Cow<'a, str>>,
}

impl<'a> Signal<'a> {
    pub fn session(header: SessionHeader<'a>) -> Signal<'a> {
        Signal::Session(Box::new(header))
    }
}

/// A tool invocation as the agent reported it.
#[derive(Clone, Debug)]
pub struct ToolCall<'a> {
    pub name: Cow<'a, str>,
    /// The arguments as raw JSON, summarised only if the pane keeps them;
    /// the policies read these when given.
    pub args: Option<&'a RawValue>,
    /// Codex reports a shell command as a bare string rather than an
    /// object; its file changes come with both (the paths here, for the
    /// summary; the changes in `args`, for the policies).
    pub command: Option<Cow<'a, str>>,
}

/// Everything the pane learns from one line.
#[derive(Clone, Debug)]
pub struct Observation<'a> {
    pub signal: Signal<'a>,
    /// The line belongs to a sub-agent (Claude `parent_tool_use_id`); its
    /// signal must not drive the pane's own state. Usage still counts.
    pub subagent: bool,
    pub usage: UsageUpdate,
    pub tool: Option<ToolCall<'a>>,
    /// A failure message worth showing an operator.
    pub error: Option<Cow<'a, str>>,
    /// Why the agent is blocked (dialog title, tool awaiting permission).
    pub reason: Option<Cow<'a, str>>,
    /// The line starts a new turn (one model call or prompt round); the
    /// session index counts these.
    pub turn: bool,
    /// The line asks a human something the harness can be answered on.
    /// Boxed: it is rare and large, and every line's observation is moved
    /// a few times on its way to the pane.
    pub approval: Option<Box<ApprovalRequest<'a>>>,
    /// Pending approvals the harness settled itself with this line.
    pub resolves: Resolves<'a>,
    /// The harness waits for colibri's answer before it runs this line's
    /// tool call (a Claude Code `PreToolUse` that `colibri hook`
    /// forwards): the guard refuses the call there, so stopping the tree
    /// would only stop the hook from hearing it.
    pub tool_gated: bool,
}

impl<'a> Observation<'a> {
    pub fn new(signal: Signal<'a>) -> Self {
        Observation {
            signal,
            subagent: false,
            usage: UsageUpdate::None,
            tool: None,
            error: None,
            reason: None,
            turn: false,
            approval: None,
            resolves: Resolves::Nothing,
            tool_gated: false,
        }
    }

    pub fn unknown() -> Self {
        Observation::new(Signal::Unknown)
    }

    pub fn with_usage(mut self, usage: UsageUpdate) -> Self {
        self.usage = usage;
        self
    }

    pub fn with_tool(mut self, tool: ToolCall<'a>) -> Self {
        self.tool = Some(tool);
        self
    }

    /// See [`Observation::tool_gated`].
    pub fn gated(mut self) -> Self {
        self.tool_gated = true;
        self
    }

    pub fn with_error(mut self, error: Option<Cow<'a, str>>) -> Self {
        self.error = error;
        self
    }

    pub fn with_reason(mut self, reason: Option<Cow<'a, str>>) -> Self {
        self.reason = reason;
        self
    }

    pub fn turn(mut self, yes: bool) -> Self {
        self.turn = yes;
        self
    }

    pub fn with_approval(mut self, request: Option<ApprovalRequest<'a>>) -> Self {
        self.approval = request.map(Box::new);
        self
    }

    pub fn resolving(mut self, resolves: Resolves<'a>) -> Self {
        self.resolves = resolves;
        self
    }

    pub fn subagent(mut self, yes: bool) -> Self {
        self.subagent = yes;
        self
    }
}
