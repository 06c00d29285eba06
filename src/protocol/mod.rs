//! Every type that crosses the socket or is printed as JSON.
//!
//! **Invariant:** wire names are decided here and nowhere else. The v1
//! snapshot follows `clawdie.glasspane.snapshot.v1` field for field
//! (optionals omitted when absent, `stalled` omitted when false, RFC 3339
//! UTC with milliseconds); everything else is colibri's own and documented
//! in `docs/PROTOCOL.md`.

pub mod json_text;
mod pane_view;
/// Client-side constructors of [`Command`] values (the CLI, top, the board).
pub mod request;
pub use pane_view::{PaneV1View, PaneV2View, RestartView, SupervisionView};
mod watch_mode;
pub use watch_mode::WatchMode;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::core::pane::{Counters, ExitStatus, ToolRecord};
use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::core::usage::Usage;

mod approvals;
pub use approvals::{
    fold_approvals, ApprovalRequestArgs, ApprovalsArgs, ApprovalsReply, DecideArgs, DecideReply,
    FoldApproval, HookArgs, HookReply, WireApproval, WireApprovalStatus, WireOutcome,
};
pub mod control_plane;
pub use control_plane::{
    ActivityArgs, ActivityReply, CallerArgs, StateReply, TaskActArgs, TaskAddArgs, TaskClaimArgs,
    TaskMoveArgs, TaskReply, TasksArgs, TasksReply,
};
mod lifecycle;
pub use lifecycle::{LifecycleReply, WireSupervision};
pub mod attach;
pub use attach::{
    AttachArgs, AttachInputArgs, AttachInputReply, AttachReply, AttachResizeArgs, AttachResizeReply,
};
mod governance;
pub use governance::{BudgetArgs, BudgetReply, WireBudget, WireHold, WireVerdict};
mod hostops;
pub use hostops::{HostopArgs, HostopReply};

/// The most items a `tasks` or `approvals` page holds.
pub const PAGE_ITEMS: usize = 1000;
/// About the most bytes of items a page holds: agents choose how large a
/// task or an approval is, and a reply must stay well under a client's
/// limit (64 MiB for colibri's own) whatever they chose.
pub const PAGE_BYTES: usize = 4 << 20;

/// The first items of `items` that fit a page of `limit` items and
/// [`PAGE_BYTES`] (always at least one), each weighed by `size`; `true`
/// when some were left out.
pub fn page<T>(items: Vec<T>, limit: Option<usize>, size: impl Fn(&T) -> usize) -> (Vec<T>, bool) {
    let limit = limit.unwrap_or(PAGE_ITEMS).clamp(1, PAGE_ITEMS);
    let total = items.len();
    let mut bytes = 0;
    let mut out = Vec::with_capacity(total.min(limit));
    for item in items {
        bytes += size(&item);
        if out.len() == limit || (!out.is_empty() && bytes > PAGE_BYTES) {
            break;
        }
        out.push(item);
    }
    let more = out.len() < total;
    (out, more)
}

pub const SNAPSHOT_V1: &str = "clawdie.glasspane.snapshot.v1";
pub const SNAPSHOT_V2: &str = "clawdie.glasspane.snapshot.v2";

impl Serialize for AgentState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AgentState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        AgentState::parse(&s).ok_or_else(|| D::Error::custom(format!("unknown state {s:?}")))
    }
}

impl Serialize for Runtime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Runtime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Runtime::parse(&s).ok_or_else(|| {
            D::Error::custom(format!(
                "unknown runtime {s:?} (pi, zot, claude, codex, gemini, opencode)"
            ))
        })
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn rfc3339(t: Timestamp) -> String {
    t.to_rfc3339()
}

// ---------------------------------------------------------------------------
// Snapshots

/// `clawdie.glasspane.snapshot.v1`, exactly as the contract gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotV1 {
    pub schema: String,
    pub host: String,
    pub observed_at: String,
    pub panes: Vec<PaneV1>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaneV1 {
    pub id: String,
    pub agent: String,
    pub state: AgentState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub stalled: bool,
}

impl PaneV1 {
    /// The owned pane, built field by field: the reference the daemon's
    /// [`PaneV1View`] is held to (tests only; the daemon writes the view).
    #[cfg(test)]
    pub fn from_pane(
        p: &crate::core::pane::Pane,
        now: Timestamp,
        default_stall_after: Duration,
    ) -> PaneV1 {
        PaneV1 {
            id: p.id.0.clone(),
            agent: p.agent.clone(),
            state: p.state(),
            pi_session_id: p.session_id().map(str::to_string),
            last_event_at: p.last_event_at().map(rfc3339),
            cwd: p.cwd().map(str::to_string),
            stalled: p.is_stalled(now, default_stall_after),
        }
    }
}

/// colibri's richer snapshot: everything a pane records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotV2 {
    pub schema: String,
    pub host: String,
    pub observed_at: String,
    pub panes: Vec<PaneV2>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaneV2 {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    pub state: AgentState,
    pub stalled: bool,
    pub paused: bool,
    pub state_since: String,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_at: Option<String>,
    pub stall_after_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub generation: u32,
    pub counters: WireCounters,
    pub usage: WireUsage,
    /// The pane's whole life, its earlier runs (restarts) included; absent
    /// while it equals `usage` (no earlier run spent anything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_total: Option<WireUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tool: Option<WireTool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<WireExit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<WireRestart>,
    /// Wanted beside actual state (see `protocol::lifecycle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervision: Option<WireSupervision>,
    /// Pending approvals, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<WireApproval>,
    /// Why it is paused: each hold, oldest first (none while not paused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<WireHold>,
    /// The fleet gateway's rows only (docs/FLEET.md): the host the pane
    /// runs on; colibrid never sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The fleet gateway's rows only: the host's last heartbeat, once it
    /// is three heartbeats old (the row is kept, the host is unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_since: Option<String>,
}

impl PaneV2 {
    /// The core's view of a pane, owned; daemon-only fields (pid, jail,
    /// restart) are left to fill. The reference the daemon's [`PaneV2View`]
    /// is held to (tests only; the daemon writes the view).
    #[cfg(test)]
    pub fn from_pane(
        p: &crate::core::pane::Pane,
        now: Timestamp,
        default_stall_after: Duration,
    ) -> PaneV2 {
        PaneV2 {
            id: p.id.0.clone(),
            name: p.name.clone(),
            agent: p.agent.clone(),
            runtime: p.runtime(),
            state: p.state(),
            stalled: p.is_stalled(now, default_stall_after),
            paused: p.paused,
            state_since: rfc3339(p.state_since()),
            started_at: rfc3339(p.started_at),
            last_event_at: p.last_event_at().map(rfc3339),
            stall_after_ms: p.stall_after.unwrap_or(default_stall_after).as_millis() as u64,
            session_id: p.session_id().map(str::to_string),
            daemon_session: None,
            cwd: p.cwd().map(str::to_string),
            jail: None,
            pid: None,
            generation: 0,
            counters: WireCounters::from(p.counters()),
            usage: WireUsage::from(p.usage()),
            usage_total: None,
            last_tool: p.last_tool().map(WireTool::from),
            last_error: p.last_error().map(str::to_string),
            blocked_reason: p.blocked_reason().map(str::to_string),
            exit: p.exit().map(WireExit::from),
            restart: None,
            supervision: None,
            approvals: p
                .pending_approvals()
                .iter()
                .map(|a| WireApproval::new(a, p.id.as_str(), p.name.as_deref(), false))
                .collect(),
            holds: Vec::new(),
            host: None,
            unreachable_since: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireCounters {
    pub events: u64,
    pub malformed: u64,
    pub oversize: u64,
    pub unknown: u64,
    pub bytes: u64,
}

impl From<&Counters> for WireCounters {
    fn from(c: &Counters) -> Self {
        WireCounters {
            events: c.events,
            malformed: c.malformed,
            oversize: c.oversize,
            unknown: c.unknown,
            bytes: c.bytes,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

impl From<&Usage> for WireUsage {
    fn from(u: &Usage) -> Self {
        WireUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireTool {
    pub name: String,
    pub summary: String,
    pub at: String,
}

impl From<&ToolRecord> for WireTool {
    fn from(t: &ToolRecord) -> Self {
        WireTool {
            name: t.name.clone(),
            summary: t.summary.clone(),
            at: rfc3339(t.at),
        }
    }
}

/// An exit status: `code` for a normal exit, `signal` for a kill.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

impl From<ExitStatus> for WireExit {
    fn from(e: ExitStatus) -> Self {
        match e {
            ExitStatus::Code(c) => WireExit {
                code: Some(c),
                signal: None,
            },
            ExitStatus::Signal(s) => WireExit {
                code: None,
                signal: Some(s),
            },
            ExitStatus::Unknown => WireExit::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireRestart {
    pub policy: String,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<String>,
}

// ---------------------------------------------------------------------------
// `colibri fold --json`

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoldReport {
    /// The pane of a session log folded (`--pane`, or its first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
    /// The log's other panes, left out of the fold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_panes: Vec<String>,
    pub state: AgentState,
    pub stalled: bool,
    #[serde(default)]
    pub runtime: Option<Runtime>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    pub usage: WireUsage,
    pub counters: WireCounters,
    pub timeline: Vec<FoldStep>,
    #[serde(default)]
    pub last_tool: Option<WireTool>,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub blocked_reason: Option<String>,
    #[serde(default)]
    pub exit: Option<WireExit>,
    /// Every approval the stream asked for, and how it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<FoldApproval>,
    /// Policy verdicts (guard, loops, budgets) at the lines that caused them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<WireVerdict>,
    /// Host operations the agent ran (a session log's `hostop` records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostops: Vec<FoldHostop>,
    /// Prompts colibrid wrote to the agent (a session log's `prompt`
    /// records: the heartbeat), at their lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<FoldPrompt>,
}

/// A prompt the daemon wrote to the agent, as its session log recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoldPrompt {
    /// The line of the log.
    pub line: u64,
    /// What sent it: `heartbeat`.
    pub by: String,
    pub text: String,
}

/// A host operation in a fold: the log line of its record and how it
/// ended (as the `hostop` watch event says).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldHostop {
    pub line: u64,
    pub op: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// One state change in a fold; `line` is the 1-based non-blank line that
/// caused it (0: caused by the end of the stream or the exit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoldStep {
    pub line: u64,
    pub state: AgentState,
}

// ---------------------------------------------------------------------------
// Requests

/// One request line. `id`, when present, is echoed in the reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub id: Option<Value>,
    pub command: Command,
}

/// Every socket command. Unknown fields are ignored so that newer clients
/// can talk to older daemons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Command {
    Status,
    GlasspaneSnapshot,
    Snapshot(SnapshotArgs),
    ListSessions,
    SpawnAgent(Box<SpawnArgs>),
    KillAgent(AgentArgs),
    GetSession(SessionArgs),
    CompactSession(SessionArgs),
    Watch(WatchArgs),
    PauseAgent(AgentArgs),
    ResumeAgent(AgentArgs),
    SignalAgent(SignalArgs),
    SendInput(InputArgs),
    Emit(EmitArgs),
    Whoami,
    Hint(HintArgs),
    State(CallerArgs),
    Tasks(TasksArgs),
    TaskAdd(Box<TaskAddArgs>),
    TaskClaim(TaskClaimArgs),
    TaskAck(TaskActArgs),
    TaskDone(TaskActArgs),
    TaskFail(TaskActArgs),
    TaskCancel(TaskActArgs),
    Activity(ActivityArgs),
    StartAgent(AgentArgs),
    StopAgent(AgentArgs),
    RestartAgent(AgentArgs),
    RemoveAgent(AgentArgs),
    Attach(AttachArgs),
    AttachInput(AttachInputArgs),
    AttachResize(AttachResizeArgs),
    Approvals(ApprovalsArgs),
    Approve(DecideArgs),
    Deny(DecideArgs),
    Answer(DecideArgs),
    Hook(HookArgs),
    Budget(BudgetArgs),
    Hostop(HostopArgs),
    ApprovalRequest(ApprovalRequestArgs),
    TaskMove(TaskMoveArgs),
    TaskRemove(TaskActArgs),
}

/// Who may use a command.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CommandScope {
    /// The operator socket only.
    Operator,
    /// Also a jail's agent socket (on that jail's panes only).
    Agent,
}

/// One row of the command table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommandInfo {
    pub name: &'static str,
    pub scope: CommandScope,
}

const fn cmd(name: &'static str, scope: CommandScope) -> CommandInfo {
    CommandInfo { name, scope }
}

/// The command table (tmux's `cmd_table`): the wire name and the scope of
/// every command, in [`Command::index`] order. Names, the jail-scope check
/// and the docs tidy test derive from it; the daemon's handler table is
/// checked against it row by row.
pub const COMMANDS: [CommandInfo; 42] = {
    use CommandScope::{Agent, Operator};
    [
        cmd("status", Agent),
        cmd("glasspane-snapshot", Agent),
        cmd("snapshot", Agent),
        cmd("list-sessions", Operator),
        cmd("spawn-agent", Operator),
        cmd("kill-agent", Operator),
        cmd("get-session", Operator),
        cmd("compact-session", Operator),
        cmd("watch", Agent),
        cmd("pause-agent", Operator),
        cmd("resume-agent", Operator),
        cmd("signal-agent", Operator),
        cmd("send-input", Operator),
        cmd("emit", Agent),
        cmd("whoami", Agent),
        cmd("hint", Operator),
        cmd("state", Agent),
        cmd("tasks", Agent),
        cmd("task-add", Operator),
        cmd("task-claim", Agent),
        cmd("task-ack", Agent),
        cmd("task-done", Agent),
        cmd("task-fail", Agent),
        cmd("task-cancel", Operator),
        cmd("activity", Agent),
        cmd("start-agent", Operator),
        cmd("stop-agent", Operator),
        cmd("restart-agent", Operator),
        cmd("remove-agent", Operator),
        cmd("attach", Operator),
        cmd("attach-input", Operator),
        cmd("attach-resize", Operator),
        cmd("approvals", Agent),
        cmd("approve", Operator),
        cmd("deny", Operator),
        cmd("answer", Operator),
        cmd("hook", Agent),
        cmd("budget", Operator),
        // Who of the agents may run which op is the op's own list
        // (`[hostops.NAME] jails`, `roles`), checked by the handler.
        cmd("hostop", Agent),
        cmd("approval-request", Agent),
        cmd("task-move", Operator),
        cmd("task-remove", Operator),
    ]
};

const fn command_names() -> [&'static str; COMMANDS.len()] {
    let mut out = [""; COMMANDS.len()];
    let mut i = 0;
    while i < COMMANDS.len() {
        out[i] = COMMANDS[i].name;
        i += 1;
    }
    out
}

pub const COMMAND_NAMES: [&str; COMMANDS.len()] = command_names();

impl Command {
    /// The request line a client sends: the command as JSON and a newline.
    /// The daemon's [`Request::parse`] reads it back to the same value.
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }

    /// The command's row in [`COMMANDS`].
    pub fn index(&self) -> usize {
        match self {
            Command::Status => 0,
            Command::GlasspaneSnapshot => 1,
            Command::Snapshot(_) => 2,
            Command::ListSessions => 3,
            Command::SpawnAgent(_) => 4,
            Command::KillAgent(_) => 5,
            Command::GetSession(_) => 6,
            Command::CompactSession(_) => 7,
            Command::Watch(_) => 8,
            Command::PauseAgent(_) => 9,
            Command::ResumeAgent(_) => 10,
            Command::SignalAgent(_) => 11,
            Command::SendInput(_) => 12,
            Command::Emit(_) => 13,
            Command::Whoami => 14,
            Command::Hint(_) => 15,
            Command::State(_) => 16,
            Command::Tasks(_) => 17,
            Command::TaskAdd(_) => 18,
            Command::TaskClaim(_) => 19,
            Command::TaskAck(_) => 20,
            Command::TaskDone(_) => 21,
            Command::TaskFail(_) => 22,
            Command::TaskCancel(_) => 23,
            Command::Activity(_) => 24,
            Command::StartAgent(_) => 25,
            Command::StopAgent(_) => 26,
            Command::RestartAgent(_) => 27,
            Command::RemoveAgent(_) => 28,
            Command::Attach(_) => 29,
            Command::AttachInput(_) => 30,
            Command::AttachResize(_) => 31,
            Command::Approvals(_) => 32,
            Command::Approve(_) => 33,
            Command::Deny(_) => 34,
            Command::Answer(_) => 35,
            Command::Hook(_) => 36,
            Command::Budget(_) => 37,
            Command::Hostop(_) => 38,
            Command::ApprovalRequest(_) => 39,
            Command::TaskMove(_) => 40,
            Command::TaskRemove(_) => 41,
        }
    }

    pub fn info(&self) -> CommandInfo {
        COMMANDS[self.index()]
    }

    /// The wire name, for errors and logs.
    pub fn name(&self) -> &'static str {
        self.info().name
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotArgs {
    /// `v1` (default) or `v2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpawnArgs {
    /// Contract: `local` runs `model` as the executable; other providers
    /// run the argv template configured for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// colibri: the full command line (overrides provider/model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A humantime duration (`90s`, `10m`) or milliseconds as a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_after: Option<DurationArg>,
    /// `never` (default), `on-failure`, `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// Run inside this running jail (FreeBSD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    /// Switch to this user (inside the jail, when one is named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    /// The control plane's role (budgets scoped `role:ROLE` count it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Give the agent the heartbeat prompt this often while it is idle
    /// (at least a second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<DurationArg>,
    /// The heartbeat's text (default: the control plane's loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_prompt: Option<String>,
    /// Paths in the agent's scope besides `cwd` (the guard's scope rule):
    /// absolute, or relative to `cwd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Vec<String>>,
}

/// A duration given as `"90s"` or as milliseconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DurationArg(pub Duration);

/// Sent as whole milliseconds, which every daemon version reads.
impl Serialize for DurationArg {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ms = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        s.serialize_u64(ms)
    }
}

impl<'de> Deserialize<'de> for DurationArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_u64()
                .map(|ms| DurationArg(Duration::from_millis(ms)))
                .ok_or_else(|| {
                    D::Error::custom("duration in milliseconds must be a non-negative integer")
                }),
            Value::String(s) => humantime::parse_duration(&s)
                .map(DurationArg)
                .map_err(|e| D::Error::custom(format!("bad duration {s:?}: {e}"))),
            _ => Err(D::Error::custom(
                "duration must be a string like \"90s\" or milliseconds",
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentArgs {
    /// The pane id, or a pane name.
    pub agent_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalArgs {
    pub agent_id: String,
    /// A name (`TERM`, `SIGINT`) or a number.
    pub signal: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputArgs {
    pub agent_id: String,
    pub text: String,
    /// Append a newline (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newline: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmitArgs {
    pub agent_id: String,
    /// The event as a JSON object, in the pane's dialect (or Claude hook
    /// input, which the Claude adapter reads).
    pub event: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionArgs {
    pub session_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchArgs {
    /// Only these panes (ids or names); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panes: Option<Vec<String>>,
    /// `all` (the default) or `changes`: state changes only.
    #[serde(default, skip_serializing_if = "WatchMode::is_all")]
    pub mode: WatchMode,
    /// Replay the journaled events after this seq first (see `watch.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HintArgs {
    /// `resume`: the host slept; re-base every stall deadline.
    pub kind: String,
}

/// Why a request line could not be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RequestError {
    #[error("malformed JSON: {0}")]
    Json(String),
    #[error("a request must be a JSON object")]
    NotObject,
    #[error("missing \"cmd\"")]
    MissingCmd,
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("bad arguments for {cmd}: {msg}")]
    BadArgs { cmd: String, msg: String },
}

impl Request {
    /// The request line a relay sends on (the fleet bridge): the command
    /// with its `id`, and a newline; [`Request::parse`] reads it back.
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut value = serde_json::to_value(&self.command)?;
        if let (Some(id), Value::Object(map)) = (&self.id, &mut value) {
            map.insert("id".to_string(), id.clone());
        }
        let mut line = serde_json::to_vec(&value)?;
        line.push(b'\n');
        Ok(line)
    }

    /// Parses one request line. On error, the `id` (if one could be read)
    /// is returned too so the error reply can echo it.
    pub fn parse(line: &[u8]) -> Result<Request, (Option<Value>, RequestError)> {
        let value: Value =
            serde_json::from_slice(line).map_err(|e| (None, RequestError::Json(e.to_string())))?;
        let Value::Object(mut map) = value else {
            return Err((None, RequestError::NotObject));
        };
        let id = map.remove("id");
        let cmd = match map.get("cmd") {
            Some(Value::String(s)) => s.clone(),
            Some(_) | None => return Err((id, RequestError::MissingCmd)),
        };
        if !COMMAND_NAMES.contains(&cmd.as_str()) {
            return Err((id, RequestError::UnknownCommand(cmd)));
        }
        match serde_json::from_value::<Command>(Value::Object(map)) {
            Ok(command) => Ok(Request { id, command }),
            Err(e) => Err((
                id,
                RequestError::BadArgs {
                    cmd,
                    msg: e.to_string(),
                },
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors

/// What kind of failure an error reply reports, stable on the wire as
/// `code`, so a client tells "not found" from "not running" without
/// parsing English.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request line is not JSON, not an object, or has no `cmd`.
    BadRequest,
    /// `cmd` names no command.
    UnknownCommand,
    /// The arguments do not fit the command, or a value is out of range.
    Invalid,
    /// No such agent (or session) in the caller's scope.
    NotFound,
    /// The agent exists but has no running process.
    NotRunning,
    /// The command is not permitted on this socket.
    Forbidden,
    /// colibrid is shutting down.
    Stopping,
    /// A queue or a limit is full (connections, input, replies, watchers).
    Busy,
    /// The session store failed.
    Store,
    /// The operating system refused (spawn, signal, PTY).
    Os,
    /// A bug: the daemon could not encode its own reply.
    Internal,
    /// A short id prefix names more than one pane; the message lists them.
    Ambiguous,
    /// The approval cannot take this decision, or its harness has no
    /// answer channel.
    Unanswerable,
    /// `hostop` names no op of colibrid's configuration.
    UnknownOp,
    /// A `hostop` parameter is unknown, missing, or does not match its
    /// pattern; nothing ran.
    BadParam,
    /// The host operation ran past its timeout and was killed.
    Timeout,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::BadRequest,
        ErrorCode::UnknownCommand,
        ErrorCode::Invalid,
        ErrorCode::NotFound,
        ErrorCode::NotRunning,
        ErrorCode::Forbidden,
        ErrorCode::Stopping,
        ErrorCode::Busy,
        ErrorCode::Store,
        ErrorCode::Os,
        ErrorCode::Internal,
        ErrorCode::Ambiguous,
        ErrorCode::Unanswerable,
        ErrorCode::UnknownOp,
        ErrorCode::BadParam,
        ErrorCode::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownCommand => "unknown_command",
            ErrorCode::Invalid => "invalid",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotRunning => "not_running",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Stopping => "stopping",
            ErrorCode::Busy => "busy",
            ErrorCode::Store => "store",
            ErrorCode::Os => "os",
            ErrorCode::Internal => "internal",
            ErrorCode::Ambiguous => "ambiguous",
            ErrorCode::Unanswerable => "unanswerable",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::BadParam => "bad_param",
            ErrorCode::Timeout => "timeout",
        }
    }
}

/// A failed command: its code and the message for humans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandError {
    pub code: ErrorCode,
    pub message: String,
}

impl CommandError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> CommandError {
        CommandError::new(ErrorCode::Invalid, message)
    }

    pub fn not_found(agent_id: &str) -> CommandError {
        CommandError::new(ErrorCode::NotFound, format!("no agent {agent_id:?}"))
    }

    pub fn not_running(agent_id: &str) -> CommandError {
        CommandError::new(
            ErrorCode::NotRunning,
            format!("agent {agent_id} is not running"),
        )
    }

    pub fn os(message: impl Into<String>) -> CommandError {
        CommandError::new(ErrorCode::Os, message)
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl RequestError {
    pub fn code(&self) -> ErrorCode {
        match self {
            RequestError::UnknownCommand(_) => ErrorCode::UnknownCommand,
            RequestError::BadArgs { .. } => ErrorCode::Invalid,
            RequestError::Json(_) | RequestError::NotObject | RequestError::MissingCmd => {
                ErrorCode::BadRequest
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Replies

/// The contract's envelope: `{"ok","error","data"}`, plus `id` when the
/// request had one. `data` is null when `ok` is false.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response<T> {
    pub ok: bool,
    pub error: Option<String>,
    /// The error's stable [`ErrorCode`], next to `error` (absent on success,
    /// so success replies are byte for byte the contract's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    pub data: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
}

/// Serialises a success reply as one line (with its `\n`).
pub fn ok_line<T: Serialize>(id: Option<&Value>, data: &T) -> Vec<u8> {
    let resp = Response {
        ok: true,
        error: None,
        code: None,
        data: Some(data),
        id: id.cloned(),
    };
    let mut v = serde_json::to_vec(&resp).unwrap_or_else(|e| {
        err_line(
            id,
            ErrorCode::Internal,
            &format!("cannot encode reply: {e}"),
        )
    });
    if v.last() != Some(&b'\n') {
        v.push(b'\n');
    }
    v
}

/// Serialises an error reply as one line (with its `\n`).
pub fn err_line(id: Option<&Value>, code: ErrorCode, error: &str) -> Vec<u8> {
    let resp: Response<()> = Response {
        ok: false,
        error: Some(error.to_string()),
        code: Some(code),
        data: None,
        id: id.cloned(),
    };
    let mut v = serde_json::to_vec(&resp)
        .unwrap_or_else(|_| br#"{"ok":false,"error":"internal","data":null}"#.to_vec());
    v.push(b'\n');
    v
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusData {
    pub host: String,
    /// The kernel, e.g. `FreeBSD 14.1-RELEASE`.
    #[serde(default)]
    pub os: String,
    pub version: String,
    pub pid: u32,
    pub started_at: String,
    pub agents: usize,
    pub running: usize,
    pub sessions: usize,
    pub connections: usize,
    pub watchers: usize,
    pub states: BTreeMap<String, usize>,
    pub stalled: usize,
    /// Running agents stopped (by the operator or a policy).
    #[serde(default)]
    pub paused: usize,
    pub stall_after_ms: u64,
    pub scope: String,
    /// Session-log health: what could not be written, and what waits.
    pub logs: LogHealth,
    /// SIGHUP reloads that read a valid configuration.
    #[serde(default)]
    pub reloads: u64,
    /// SIGHUP reloads refused (the running configuration was kept).
    #[serde(default)]
    pub reload_errors: u64,
    /// Keys changed in the file that apply only after a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
    /// Syslog alert counters since start (daemon-wide: zero on a jail socket).
    #[serde(default)]
    pub alerts: AlertHealth,
    /// Signals the daemon received since start, by name without `SIG`
    /// (`TERM`, `HUP`, `USR1`, `ALRM`, …; SIGCHLD is not counted).
    /// Operator scope only; omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signals: BTreeMap<String, u64>,
    /// Why alerts cannot reach syslog (no socket, a wrong `--syslog-socket`),
    /// while they cannot. Operator scope only; omitted when alerts flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts_unreachable: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertHealth {
    pub sent: u64,
    pub rate_limited: u64,
    pub dropped: u64,
    /// Alerts sent with values cut to fit one syslog datagram.
    pub truncated: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogHealth {
    pub pending_bytes: u64,
    pub failed_writes: u64,
    /// Bytes that could not be written and were dropped (disk full for long).
    pub lost_bytes: u64,
    /// Logs found deleted or replaced under the daemon (each started anew).
    #[serde(default)]
    pub replaced_logs: u64,
    /// Finished sessions whose logs `[sessions] retain` deleted.
    #[serde(default)]
    pub retired_sessions: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpawnData {
    pub agent_id: String,
    pub status: String,
    pub session_id: String,
    pub pid: i32,
}

/// `kill-agent`: `status` is `killed`, or `stopped` for a pending restart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KillReply {
    pub agent_id: String,
    pub status: String,
}

/// `pause-agent`, `resume-agent`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseReply {
    pub agent_id: String,
    pub paused: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalReply {
    pub agent_id: String,
    pub signal: i32,
}

/// `send-input`: bytes queued (the text plus its newline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputReply {
    pub agent_id: String,
    pub queued: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmitReply {
    pub accepted: bool,
    pub state: AgentState,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchReply {
    pub watching: bool,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// Names this numbering of `seq`: it changes exactly when `seq` starts
    /// over at 1 (a new or emptied journal), so `journal_id` and `seq`
    /// together name an event for good (the fleet bridge's message ids).
    /// Absent from daemons older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompactReply {
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub dropped_lines: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhoamiReply {
    pub scope: String,
    pub jail: Option<String>,
    pub peer_pid: Option<i32>,
    pub peer_uid: Option<u32>,
    pub panes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HintReply {
    pub rebased: usize,
}

/// The `get-session` reply's data (streamed by `daemon::session_stream`).
#[derive(Clone, Debug, Serialize)]
pub struct SessionDump {
    pub session: serde_json::Value,
    /// Each record exactly as the log holds it.
    pub records: Vec<Box<serde_json::value::RawValue>>,
    pub corrupt_lines: u64,
    pub unflushed_bytes: usize,
    pub flush_error: Option<String>,
    /// Times the log was found deleted or replaced under this daemon
    /// (records before each `log_replaced` record are missing).
    pub log_replaced: u32,
    /// The system prompt of the session's last start (its last `attach`
    /// record's), `null` when it had none.
    pub system_prompt: Option<String>,
}

/// Records compare by their exact bytes (`RawValue` has no `PartialEq`).
impl PartialEq for SessionDump {
    fn eq(&self, other: &Self) -> bool {
        self.session == other.session
            && self.records.len() == other.records.len()
            && self
                .records
                .iter()
                .zip(&other.records)
                .all(|(a, b)| a.get() == b.get())
            && self.corrupt_lines == other.corrupt_lines
            && self.unflushed_bytes == other.unflushed_bytes
            && self.flush_error == other.flush_error
            && self.log_replaced == other.log_replaced
            && self.system_prompt == other.system_prompt
    }
}

/// Every reply's data, one variant per reply type; serialised as the
/// variant's own shape (the wire has no tag).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    Status(Box<StatusData>),
    SnapshotV1(SnapshotV1),
    SnapshotV2(SnapshotV2),
    Sessions(Vec<SessionSummary>),
    /// `get-session`: the session store's dump.
    Session(Box<SessionDump>),
    Spawn(SpawnData),
    Kill(KillReply),
    Pause(PauseReply),
    Signal(SignalReply),
    Input(InputReply),
    Emit(EmitReply),
    Watch(WatchReply),
    Compact(CompactReply),
    Whoami(WhoamiReply),
    Hint(HintReply),
    State(StateReply),
    Tasks(TasksReply),
    Task(TaskReply),
    Activity(ActivityReply),
    Lifecycle(LifecycleReply),
    Attach(AttachReply),
    AttachInput(AttachInputReply),
    AttachResize(AttachResizeReply),
    Approvals(ApprovalsReply),
    Decide(DecideReply),
    Hook(HookReply),
    /// No reply now: the handler sends it later (`hook` waiting for a
    /// decision). Never serialised.
    Deferred,
    Budget(BudgetReply),
    Hostop(HostopReply),
    /// `approval-request`: the approval, pending or decided.
    ApprovalRequest(Box<WireApprovalStatus>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub id: String,
    pub turn_count: u64,
    pub bytes: u64,
    pub panes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<AgentState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<WireExit>,
}

// ---------------------------------------------------------------------------
// `watch` events

/// One line of a `watch` stream. `seq` increases by one per event across the
/// whole daemon, so a gap tells a watcher it missed something.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// Names the daemon's run; `seq` starts over in a new epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    pub seq: u64,
    pub at: String,
    #[serde(flatten)]
    pub kind: WatchKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchKind {
    Attached {
        pane: String,
        /// The executable's basename, not the runtime: `colibri spawn
        /// --runtime pi -- node pi.js` says `node` here.
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<i32>,
        /// The pane's runtime when its recipe names one (`spawn --runtime`,
        /// a declared agent's `runtime`); absent when it is detected from
        /// the output later. Consumers keyed on the runtime (notify's
        /// filters) read this, never `agent`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        runtime: Option<Runtime>,
    },
    /// A pane's runtime, detected from its output: sent once, for a pane
    /// whose `attached` named none (`colibri spawn -- node pi.js`).
    Runtime {
        pane: String,
        runtime: Runtime,
    },
    State {
        pane: String,
        from: AgentState,
        to: AgentState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Stalled {
        pane: String,
        silent_ms: u64,
    },
    Unstalled {
        pane: String,
    },
    Paused {
        pane: String,
    },
    Resumed {
        pane: String,
    },
    /// A paused pane's process (or one its agent left running) was found
    /// running: something continued it behind the operator's back. It was
    /// stopped again; `reason` says what gave it away.
    PauseBroken {
        pane: String,
        reason: String,
    },
    Exited {
        pane: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// colibri stopped it on purpose (a planned stop); absent if not.
        #[serde(default, skip_serializing_if = "is_false")]
        planned: bool,
    },
    RestartScheduled {
        pane: String,
        attempt: u32,
        next_at: String,
    },
    Restarted {
        pane: String,
        generation: u32,
        pid: i32,
    },
    /// The restart policy wanted another run but `attempts` are used up.
    RestartsExhausted {
        pane: String,
        attempts: u32,
    },
    Heartbeat {
        panes: usize,
    },
    /// A control-plane task changed status; `pane` is the agent holding
    /// (or that held) it.
    Task {
        task_id: u64,
        status: crate::core::tasks::TaskStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pane: Option<String>,
    },
    /// `activity`: an agent reports a finished task.
    TaskCompleted {
        pane: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
    },
    /// `activity`: an agent asks the operator to approve an operation.
    ApprovalRequest {
        pane: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
    },
    /// `activity`: an agent reports an error (and what it did about it).
    #[serde(rename = "error")]
    AgentError {
        pane: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
    },
    /// A `watch` with `since` asked for events the journal no longer
    /// holds: those after `since` and before `resumes_at` are lost.
    Gap {
        since: u64,
        resumes_at: u64,
    },
    /// `remove-agent` forgot the pane (its session logs stay).
    Removed {
        pane: String,
    },
    /// A harness asked the operator something.
    ApprovalOpened {
        pane: String,
        approval: Box<WireApproval>,
    },
    /// The operator (or the default policy) answered.
    ApprovalAnswered {
        pane: String,
        approval: String,
        decision: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// `operator`, `jail:NAME` or `policy`.
        by: String,
    },
    /// It ended without colibri's answer (`reason`: `cancelled`,
    /// `resolved`, `timed_out`, `exited`, `overflow`).
    ApprovalExpired {
        pane: String,
        approval: String,
        reason: String,
    },
    /// Pending longer than `[approvals] escalate_after`.
    ApprovalEscalated {
        pane: String,
        approval: String,
        pending_ms: u64,
    },
    /// A policy's verdict (docs/GOVERNANCE.md), carried out already.
    Verdict {
        pane: String,
        verdict: WireVerdict,
    },
    /// A host operation (`hostop`) ended, or could not start. `pane` is
    /// the agent that asked (absent for the operator and a jail socket).
    Hostop {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pane: Option<String>,
        op: String,
        /// `operator`, `jail:NAME` or `agent:ID`.
        by: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        params: BTreeMap<String, String>,
        /// `ok` (exit 0), `failed` (another exit, or a signal), `timeout`
        /// (killed at its timeout) or `error` (it could not start).
        outcome: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// How long it ran.
        ms: u64,
        /// Output it wrote, kept or not.
        output_bytes: u64,
    },
}

impl WatchKind {
    pub fn pane(&self) -> Option<&str> {
        match self {
            WatchKind::Attached { pane, .. }
            | WatchKind::Runtime { pane, .. }
            | WatchKind::State { pane, .. }
            | WatchKind::Stalled { pane, .. }
            | WatchKind::Unstalled { pane }
            | WatchKind::Paused { pane }
            | WatchKind::Resumed { pane }
            | WatchKind::PauseBroken { pane, .. }
            | WatchKind::Exited { pane, .. }
            | WatchKind::RestartScheduled { pane, .. }
            | WatchKind::Restarted { pane, .. }
            | WatchKind::RestartsExhausted { pane, .. }
            | WatchKind::TaskCompleted { pane, .. }
            | WatchKind::ApprovalRequest { pane, .. }
            | WatchKind::AgentError { pane, .. }
            | WatchKind::Removed { pane }
            | WatchKind::ApprovalOpened { pane, .. }
            | WatchKind::ApprovalAnswered { pane, .. }
            | WatchKind::ApprovalExpired { pane, .. }
            | WatchKind::ApprovalEscalated { pane, .. }
            | WatchKind::Verdict { pane, .. } => Some(pane),
            WatchKind::Task { pane, .. } | WatchKind::Hostop { pane, .. } => pane.as_deref(),
            WatchKind::Heartbeat { .. } | WatchKind::Gap { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_its_limit_or_its_bytes_and_always_one_item() {
        let items: Vec<usize> = (0..10).collect();
        assert_eq!(page(items.clone(), Some(3), |_| 1), (vec![0, 1, 2], true));
        assert_eq!(page(items.clone(), None, |_| 1), (items.clone(), false));
        assert_eq!(
            page(items.clone(), Some(0), |_| 1).0,
            vec![0],
            "a limit of 0 is 1"
        );
        let half = PAGE_BYTES / 2;
        assert_eq!(page(items.clone(), None, |_| half), (vec![0, 1], true));
        assert_eq!(
            page(items, None, |_| PAGE_BYTES * 2),
            (vec![0], true),
            "one item larger than a page still comes"
        );
    }

    /// One of every command, each field set where it has one, so a field
    /// that serializes under another name than it parses fails here.
    fn one_of_each() -> Vec<Command> {
        use crate::core::tasks::{Priority, TaskStatus};
        let agent = || AgentArgs {
            agent_id: "w1".into(),
        };
        let session = || SessionArgs {
            session_id: "s1".into(),
        };
        let act = || TaskActArgs {
            task_id: 3,
            pane: Some("w1".into()),
            note: Some("n".into()),
        };
        let decide = || DecideArgs {
            approval: "a-1".into(),
            message: Some("m".into()),
            text: Some("t".into()),
            via: Some("board".into()),
        };
        let mut env = BTreeMap::new();
        env.insert("K".to_string(), "v".to_string());
        vec![
            Command::Status,
            Command::GlasspaneSnapshot,
            Command::Snapshot(SnapshotArgs {
                schema: Some("v2".into()),
            }),
            Command::ListSessions,
            Command::SpawnAgent(Box::new(SpawnArgs {
                provider: Some("local".into()),
                model: Some("m".into()),
                session_id: Some("s".into()),
                system_prompt: Some("be brief".into()),
                argv: Some(vec!["pi".into(), "--mode".into()]),
                cwd: Some("/repo".into()),
                env: Some(env),
                runtime: Some(Runtime::Pi),
                name: Some("w1".into()),
                stall_after: Some(DurationArg(Duration::from_millis(90_500))),
                restart: Some("always".into()),
                max_restarts: Some(4),
                jail: Some("j".into()),
                user: Some("u".into()),
                cols: Some(100),
                rows: Some(30),
                role: Some("sysadmin".into()),
                heartbeat: Some(DurationArg(Duration::from_secs(600))),
                heartbeat_prompt: Some("check in".into()),
                scope: Some(vec!["/srv/data".into(), "../shared".into()]),
            })),
            Command::KillAgent(agent()),
            Command::GetSession(session()),
            Command::CompactSession(session()),
            Command::Watch(WatchArgs {
                panes: Some(vec!["w1".into()]),
                mode: WatchMode::Changes,
                since: Some(9),
            }),
            Command::PauseAgent(agent()),
            Command::ResumeAgent(agent()),
            Command::SignalAgent(SignalArgs {
                agent_id: "w1".into(),
                signal: Value::from("TERM"),
            }),
            Command::SendInput(InputArgs {
                agent_id: "w1".into(),
                text: "hi".into(),
                newline: Some(false),
            }),
            Command::Emit(EmitArgs {
                agent_id: "w1".into(),
                event: serde_json::json!({"type": "agent_end"}),
            }),
            Command::Whoami,
            Command::Hint(HintArgs {
                kind: "resume".into(),
            }),
            Command::State(CallerArgs {
                pane: Some("w1".into()),
            }),
            Command::Tasks(TasksArgs {
                pane: Some("w1".into()),
                task_id: Some(2),
                status: Some(TaskStatus::Pending),
                after: Some(1),
                limit: Some(10),
            }),
            Command::TaskAdd(Box::new(TaskAddArgs {
                title: "t".into(),
                description: Some("d".into()),
                priority: Some(Priority::Urgent),
                role: Some("r".into()),
                context: Some(serde_json::json!({"k": 1})),
                jail: Some("j".into()),
            })),
            Command::TaskClaim(TaskClaimArgs {
                pane: "w1".into(),
                role: Some("r".into()),
            }),
            Command::TaskAck(act()),
            Command::TaskDone(act()),
            Command::TaskFail(act()),
            Command::TaskCancel(act()),
            Command::TaskMove(TaskMoveArgs {
                task_id: 4,
                to: crate::core::tasks::Place::Top,
            }),
            Command::TaskRemove(act()),
            Command::Activity(ActivityArgs {
                pane: "w1".into(),
                event_type: control_plane::ActivityType::ApprovalRequest,
                task_id: Some(3),
                message: Some("m".into()),
                detail: Some("d".into()),
                tokens: Some(12),
            }),
            Command::StartAgent(agent()),
            Command::StopAgent(agent()),
            Command::RestartAgent(agent()),
            Command::RemoveAgent(agent()),
            Command::Attach(AttachArgs {
                agent_id: "w1".into(),
                input: Some(true),
                cols: Some(80),
                rows: Some(24),
            }),
            Command::AttachInput(AttachInputArgs {
                data: "aGk=".into(),
            }),
            Command::AttachResize(AttachResizeArgs { cols: 81, rows: 25 }),
            Command::Approvals(ApprovalsArgs {
                agent_id: Some("w1".into()),
                after: Some("0000001764331200000/w1-1".into()),
                limit: Some(10),
            }),
            Command::Approve(decide()),
            Command::Deny(decide()),
            Command::Answer(decide()),
            Command::Hook(HookArgs {
                agent_id: "w1".into(),
                event: serde_json::json!({"hook_event_name": "Stop"}),
                wait_ms: Some(100),
            }),
            Command::Budget(BudgetArgs {
                action: Some("raise".into()),
                budget: Some("b".into()),
                cap: Some(2.5),
            }),
            Command::Hostop(HostopArgs {
                op: "zfs-snapshot".into(),
                params: [("name".to_string(), "before".to_string())].into(),
            }),
            Command::ApprovalRequest(ApprovalRequestArgs {
                pane: Some("w1".into()),
                operation: "merge PR #42".into(),
                reasoning: Some("conflict in src/index.ts".into()),
                task_id: Some(2),
                estimated_tokens: Some(8500),
                wait_ms: Some(60_000),
            }),
        ]
    }

    #[test]
    fn every_command_reads_back_as_it_was_sent() {
        let all = one_of_each();
        let mut rows: Vec<usize> = all.iter().map(Command::index).collect();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), COMMANDS.len(), "one of each command");
        for sent in all {
            let line = sent.to_line().unwrap_or_default();
            match Request::parse(&line) {
                Ok(got) => assert_eq!(got.command, sent),
                Err((_, e)) => panic!("{} does not read back: {e}", sent.name()),
            }
            let text = String::from_utf8_lossy(&line);
            assert!(
                text.starts_with(&format!("{{\"cmd\":\"{}\"", sent.name())),
                "{text}"
            );
        }
    }

    // A summed cost whose shortest form serde_json's default float parser
    // reads back one ulp off: clients must see the daemon's cost exactly.
    #[test]
    fn a_cost_survives_the_wire_bit_for_bit() {
        let sent = WireUsage {
            cost_usd: 0.00645 + 0.002595,
            ..WireUsage::default()
        };
        let text = serde_json::to_string(&sent).unwrap_or_default();
        let got: Option<WireUsage> = serde_json::from_str(&text).ok();
        assert_eq!(
            got.map(|u| u.cost_usd.to_bits()),
            Some(sent.cost_usd.to_bits()),
            "{text}"
        );
    }

    #[test]
    fn v1_omits_optionals_and_false_stalled() {
        let p = PaneV1 {
            id: "a".into(),
            agent: "pi".into(),
            state: AgentState::Working,
            pi_session_id: None,
            last_event_at: None,
            cwd: None,
            stalled: false,
        };
        assert_eq!(
            serde_json::to_string(&p).ok().as_deref(),
            Some(r#"{"id":"a","agent":"pi","state":"working"}"#)
        );
        let p = PaneV1 {
            stalled: true,
            cwd: Some("/r".into()),
            ..p
        };
        assert_eq!(
            serde_json::to_string(&p).ok().as_deref(),
            Some(r#"{"id":"a","agent":"pi","state":"working","cwd":"/r","stalled":true}"#)
        );
    }

    #[test]
    fn parses_contract_lines_verbatim() {
        let r = Request::parse(br#"{"cmd":"glasspane-snapshot"}"#).expect("parses");
        assert_eq!(r.command, Command::GlasspaneSnapshot);
        let r = Request::parse(br#"{"cmd":"spawn-agent","provider":"deepseek","model":"deepseek-chat","session_id":"sess-1","system_prompt":"You are a helpful assistant."}"#).expect("parses");
        let Command::SpawnAgent(a) = r.command else {
            panic!("not spawn")
        };
        assert_eq!(a.provider.as_deref(), Some("deepseek"));
        assert_eq!(a.session_id.as_deref(), Some("sess-1"));
        let r = Request::parse(br#"{"cmd":"kill-agent","agent_id":"x","id":7}"#).expect("parses");
        assert_eq!(r.id, Some(Value::from(7)));
        // A relay sends it on with its id, and it reads back the same.
        let line = r.to_line().expect("encodes");
        assert_eq!(Request::parse(&line), Ok(r));
        assert!(line.ends_with(b"\n"));
    }

    #[test]
    fn request_errors_are_specific() {
        assert!(matches!(
            Request::parse(b"{nope"),
            Err((None, RequestError::Json(_)))
        ));
        assert!(matches!(
            Request::parse(b"[1]"),
            Err((None, RequestError::NotObject))
        ));
        assert!(matches!(
            Request::parse(br#"{"cmd":"fly","id":"q"}"#),
            Err((Some(_), RequestError::UnknownCommand(_)))
        ));
        assert!(matches!(
            Request::parse(br#"{"cmd":"kill-agent"}"#),
            Err((None, RequestError::BadArgs { .. }))
        ));
    }

    #[test]
    fn envelope_has_all_three_fields() {
        // `code` is additive: next to `error`, only on errors.
        let line = err_line(None, ErrorCode::NotFound, "boom");
        assert_eq!(
            line,
            b"{\"ok\":false,\"error\":\"boom\",\"code\":\"not_found\",\"data\":null}\n".to_vec()
        );
        let line = ok_line(Some(&Value::from("r1")), &serde_json::json!({"x":1}));
        assert_eq!(
            line,
            b"{\"ok\":true,\"error\":null,\"data\":{\"x\":1},\"id\":\"r1\"}\n".to_vec()
        );
    }
}
