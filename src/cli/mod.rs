//! The operator CLI, `colibri`: argument parsing, dispatch and exit codes.
//!
//! `main` parses with clap, `run` executes one subcommand and returns an
//! exit code or a [`CliError`], and `main` turns that into the process exit
//! (the ripgrep shape). Submodules:
//! - `request`: the JSON request of each daemon subcommand (pure);
//! - `render`: tables, summaries and event lines (pure);
//! - `remote`: the subcommands that talk to the daemon;
//! - `recording`, `replay`, `fold`: the offline subcommands;
//! - `demo`: a private daemon running the sample recordings.
//!
//! Exit status:
//! - 0: success (also when stdout was closed early: `EPIPE` is not a failure);
//! - 1: the daemon replied `ok:false`, or a runtime error (bad input, I/O);
//! - 2: usage error (clap's);
//! - 3: the daemon cannot be reached (no socket, connection refused).
//!
//! `replay` exits with the code its recording names; `approval-request`
//! with the decision (`approval_request.rs`).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::ClientError;
use crate::core::ingest::DEFAULT_MAX_LINE;
use crate::core::spec::RestartPolicy;
use crate::core::taxonomy::Runtime;
use crate::protocol::request;
use crate::protocol::Command as Wire;

pub mod approval_request;
#[cfg(feature = "tui")]
pub mod attach;
pub mod budget;
pub mod demo;
pub mod fleet;
pub mod fold;
#[cfg(feature = "notify-http")]
pub mod notify;
pub mod recording;
pub mod remote;
pub mod render;
pub mod replay;
pub mod task;
#[cfg(feature = "tui")]
pub mod top;

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Writing our own output failed; `EPIPE` here means the reader left.
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] io::Error),
    #[error("{0}")]
    Runtime(String),
}

impl CliError {
    /// A command this build left out (`cargo build --no-default-features`).
    #[cfg(not(all(feature = "tui", feature = "web", feature = "notify-http")))]
    fn without_feature(command: &str, feature: &str) -> CliError {
        CliError::Runtime(format!(
            "colibri {command}: this build has no `{feature}` feature (rebuild with --features {feature})"
        ))
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> CliError {
        CliError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(e) => e.exit_code(),
            CliError::Io { .. } | CliError::Stdout(_) | CliError::Runtime(_) => 1,
        }
    }

    /// The reader of our stdout went away (`colibri snapshot | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Stdout(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Operator CLI for colibrid, the AI coding agent supervisor.
#[derive(Debug, Parser)]
#[command(name = "colibri", version, about, propagate_version = true)]
pub struct Cli {
    /// The daemon's socket [default: /var/run/colibri/colibri.sock].
    #[arg(long, global = true, env = "COLIBRI_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daemon's health: agents by state, sessions, clients.
    Status {
        /// Print the raw reply data as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every pane as a table (state, ages, last tool, tokens, cost).
    Snapshot {
        /// Print the raw snapshot as JSON.
        #[arg(long)]
        json: bool,
        /// Snapshot schema: v1 is the glasspane contract, v2 colibri's own.
        #[arg(long, value_enum, default_value_t = Schema::V2)]
        schema: Schema,
    },
    /// Start an agent under the daemon; prints its id.
    Spawn(SpawnArgs),
    /// Kill an agent and every process it started (SIGKILL); for an agent
    /// that has ended, what it left running.
    Kill {
        /// The pane's id or name.
        id: String,
    },
    /// Start a stopped, exited or given-up agent again with its recipe.
    Start {
        /// The pane's name, id, or a unique id prefix (4 characters or more).
        id: String,
    },
    /// Stop an agent (SIGTERM) and keep it down until `start` or colibrid's next start; no alert.
    Stop {
        /// The pane's name, id, or a unique id prefix (4 characters or more).
        id: String,
    },
    /// Stop an agent and start it again with its recipe.
    Restart {
        /// The pane's name, id, or a unique id prefix (4 characters or more).
        id: String,
    },
    /// Forget a finished pane: it leaves the snapshot, its logs stay, its name is free.
    Remove {
        /// The pane's name, id, or a unique id prefix (4 characters or more).
        id: String,
    },
    /// Suspend an agent and its processes (SIGSTOP); a paused agent is never stalled.
    Pause {
        /// The pane's id or name.
        id: String,
    },
    /// Continue a paused agent.
    Resume {
        /// The pane's id or name.
        id: String,
    },
    /// Send a signal to an agent and every process it started.
    Signal {
        /// The pane's id or name.
        id: String,
        /// A name (TERM, SIGINT) or a number.
        sig: String,
    },
    /// Type text into an agent's terminal.
    Send {
        /// The pane's id or name.
        id: String,
        /// The text to type (a Pi RPC agent expects one JSON object).
        #[arg(allow_hyphen_values = true)]
        text: String,
        /// Do not press Enter after the text.
        #[arg(long)]
        no_newline: bool,
    },
    /// The agent's terminal, live: recent output, then the stream; typed
    /// input goes to the agent (one attacher owns the input). Ctrl-] detaches.
    Attach {
        /// The pane's id or name.
        id: String,
        /// Render the agent's JSON lines readably instead of raw bytes.
        #[arg(long)]
        events: bool,
        /// Watch only: never take the input.
        #[arg(long)]
        read_only: bool,
    },
    /// A live view of every pane (a TUI): state, cost, approvals, keys to
    /// steer; updates from the watch stream.
    Top {
        /// Every host's panes, through `colibri-bridge gateway` (NATS from
        /// [fleet] in colibri.toml, or COLIBRI_NATS_URL).
        #[arg(long)]
        fleet: bool,
    },
    /// Follow state changes as they happen (all panes, or the ones named).
    Watch {
        /// Only these panes (ids or names); all when none is given.
        ids: Vec<String>,
        /// Print each event as its JSON line.
        #[arg(long)]
        json: bool,
        /// First replay the journaled events after this seq (resume).
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
    },
    /// The daemon's sessions as a table.
    Sessions {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One session's full dump, as pretty JSON.
    Session {
        /// The session id.
        id: String,
    },
    /// Compact a session's log: rewrite it without the streaming deltas of
    /// finished turns (turns, tool calls, usage, attach and exit records stay).
    Compact {
        /// The session id.
        id: String,
    },
    /// Feed an event (a JSON object, or - for stdin) to an agent's pane.
    Emit {
        /// The pane's id or name.
        id: String,
        /// The event as a JSON object in the pane's dialect, or - for stdin.
        json: String,
    },
    /// Claude Code hook forwarder: reads the hook input on stdin and emits
    /// it to the pane in COLIBRI_PANE_ID. Always exits 0 (problems go to
    /// stderr), even on a usage error, so it never blocks a tool call by
    /// failing; a `PreToolUse` the command guard flags is denied on stdout.
    Hook {
        /// The hook's event name (informational; defaults to the input's
        /// hook_event_name).
        event: Option<String>,
        /// How long a `PermissionRequest` waits for the operator's decision
        /// (0: do not wait). Keep it under the hook's own `timeout` in
        /// Claude Code's settings (60 s unless set).
        #[arg(long, default_value = "50s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
        /// What to print when nobody decides in time: `deny` the tool call,
        /// or `none` (Claude Code asks in its terminal as usual).
        #[arg(long = "default", value_enum, default_value = "deny")]
        default_answer: HookDefault,
    },
    /// Pending approvals: what each agent is asking (all, or one agent's).
    Approvals {
        /// The pane's name, id or id prefix.
        id: Option<String>,
        /// Also the latest that ended (approved, denied, expired), oldest
        /// first, after the pending ones.
        #[arg(long)]
        history: bool,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending approval (by its id, or by its agent when that
    /// agent has exactly one pending).
    Approve {
        /// An approval id, or a pane's name, id or id prefix.
        target: String,
    },
    /// Deny a pending approval, optionally saying why.
    Deny {
        /// An approval id, or a pane's name, id or id prefix.
        target: String,
        /// The reason given to the agent.
        #[arg(short, long)]
        message: Option<String>,
    },
    /// Answer a question: free text, or one of a select's options (its
    /// text or its 1-based number).
    Answer {
        /// An approval id, or a pane's name, id or id prefix.
        target: String,
        /// The answer.
        text: String,
    },
    /// (agent) Ask the operator to approve an operation and wait for the
    /// decision. Exits 0 approved, 4 denied, 5 no decision (the wait ran
    /// out, the agent stopped), 6 left pending (--wait 0).
    ApprovalRequest(approval_request::ApprovalRequestCmd),
    /// Deliver watch events to the [[notify]] sinks of colibri.toml
    /// (exec, webhook, ntfy), resuming from a saved cursor; runs until killed.
    Notify {
        /// The file with the [[notify]] sinks.
        #[arg(long, env = "COLIBRI_CONFIG", default_value = crate::config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// Where the last handled event's seq is kept.
        #[arg(long, default_value = NOTIFY_CURSOR)]
        cursor: PathBuf,
        /// Every host's events, through `colibri-bridge gateway` (NATS from
        /// [fleet] in --config, or COLIBRI_NATS_URL); the cursor is then the
        /// fleet stream's sequence (default notify-fleet.cursor beside --cursor).
        #[arg(long)]
        fleet: bool,
    },
    /// Show the budget ledgers, or raise a budget's cap or resume it once
    /// (docs/GOVERNANCE.md).
    Budget {
        #[command(subcommand)]
        action: Option<budget::BudgetAction>,
        /// Print the reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a host operation the operator declared ([hostops.NAME]), with
    /// its parameters as key=value; prints its output and exits with its
    /// status (1 when colibrid refused it or it timed out).
    Hostop {
        /// The op's name.
        op: String,
        /// One key=value per declared parameter.
        #[arg(value_parser = parse_param)]
        params: Vec<(String, String)>,
        /// Print the reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tell the daemon something about the host.
    Hint {
        /// What happened to the host.
        #[arg(value_enum)]
        kind: HintKind,
    },
    /// The control plane's task queue: add, ls, show, cancel (operators);
    /// claim, ack, done, fail (agents, as $COLIBRI_PANE_ID).
    Task {
        #[command(subcommand)]
        cmd: task::TaskCommand,
    },
    /// Fold a stream or recording offline and print its state timeline.
    Fold(FoldArgs),
    /// Play a recording back to stdout, paced, as a fake agent.
    Replay(ReplayArgs),
    /// Run a private daemon with sample agents and show it live.
    Demo(DemoArgs),
    /// Serve the web board (live panes, approvals, charts, activity) over HTTP.
    Web(WebArgs),
}

/// What `colibri hook` prints when no decision comes in time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookDefault {
    /// Deny the tool call.
    Deny,
    /// Print nothing: Claude Code asks in its terminal.
    None,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Schema {
    /// The glasspane contract's snapshot.
    V1,
    /// colibri's own snapshot, with every fact it has.
    V2,
}

impl Schema {
    pub fn as_str(self) -> &'static str {
        match self {
            Schema::V1 => "v1",
            Schema::V2 => "v2",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum HintKind {
    /// The host slept: restart every stall clock.
    Resume,
}

#[derive(Debug, Args)]
pub struct SpawnArgs {
    /// The agent's JSONL dialect (detected from its output when absent).
    #[arg(long, value_parser = parse_runtime)]
    pub runtime: Option<Runtime>,
    /// A name to address the agent by instead of its id.
    #[arg(long)]
    pub name: Option<String>,
    /// Working directory (made absolute here, since the daemon's differs)
    /// [default: the current directory; with --jail, the jail's /].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Extra environment, repeatable.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Silence after which a working or blocked agent counts as stalled.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub stall_after: Option<crate::protocol::DurationArg>,
    /// Restart the agent when it exits: never (the default), on-failure
    /// (after an exit in the error state) or always.
    #[arg(long, value_name = "POLICY", value_parser = parse_restart)]
    pub restart: Option<RestartPolicy>,
    /// Give up restarting after this many restarts.
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<u32>,
    /// Run inside this running jail (FreeBSD).
    #[arg(long, value_name = "NAME")]
    pub jail: Option<String>,
    /// Run as this user.
    #[arg(long, value_name = "U")]
    pub user: Option<String>,
    /// The agent's control-plane role (budgets scoped role:ROLE count it).
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// Give the idle agent the heartbeat prompt this often (at least 1s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub heartbeat: Option<crate::protocol::DurationArg>,
    /// A system prompt, given the way the harness takes one (Pi, Claude
    /// Code, zot: --append-system-prompt; Codex: -c developer_instructions).
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// A path in the agent's scope besides its working directory (the
    /// guard's scope rule), repeatable; made absolute here, as --cwd is
    /// (with --jail, sent as given: the jail's paths are not ours).
    #[arg(long = "scope", value_name = "PATH")]
    pub scope: Vec<PathBuf>,
    /// The command line, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "ARGV")]
    pub argv: Vec<String>,
}

#[derive(Debug, Args)]
pub struct FoldArgs {
    /// The dialect to read (detected from the stream when absent).
    #[arg(long, value_parser = parse_runtime)]
    pub runtime: Option<Runtime>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Longest agent line kept, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_LINE)]
    pub max_line: usize,
    /// Of a session log with several panes, fold this one (its id or the
    /// start of it; default: the first).
    #[arg(long, value_name = "ID")]
    pub pane: Option<String>,
    /// Govern with this colibri.toml's policies (its budgets, loop and
    /// guard settings), as colibrid did; default: the built-in ones.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// A JSONL stream or recording; - for stdin.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A recording (or a plain JSONL file); - for stdin.
    pub file: PathBuf,
    /// Play this many times faster.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,
    /// Delay between lines of a plain JSONL file, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub interval: u64,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the demo's temporary directory (socket, state, logs).
    #[arg(long)]
    pub keep: bool,
    /// Play the sample agents this many times faster.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,
}

fn parse_runtime(s: &str) -> Result<Runtime, String> {
    Runtime::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
        format!("unknown runtime {s:?} (one of: {})", names.join(", "))
    })
}

fn parse_restart(s: &str) -> Result<RestartPolicy, String> {
    RestartPolicy::parse(s)
        .ok_or_else(|| format!("unknown restart policy {s:?} (one of: never, on-failure, always)"))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not K=V")),
    }
}

/// Checks a humantime duration but keeps the operator's spelling for the wire.
fn parse_duration_arg(s: &str) -> Result<crate::protocol::DurationArg, String> {
    humantime::parse_duration(s)
        .map(crate::protocol::DurationArg)
        .map_err(|e| format!("bad duration {s:?}: {e}"))
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// How long a normal request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The process entry point: parse, run, map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are "errors" that print to stdout and exit 0.
            let _ = e.print();
            // Claude Code treats a hook's exit 2 as "block this tool call":
            // a mistyped hook line must not stop the agent.
            if invoked_as_hook(std::env::args().skip(1)) {
                return ExitCode::SUCCESS;
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        // The reader of our output went away; that is how pipes end.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            // Errors quote the daemon and, through it, agents: escape them.
            let text = render::escape_controls(&e.to_string()).into_owned();
            let _ = writeln!(io::stderr(), "colibri: {text}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Whether the subcommand (the first argument that is neither a global
/// option nor its value) is `hook`.
fn invoked_as_hook(mut args: impl Iterator<Item = String>) -> bool {
    while let Some(arg) = args.next() {
        if arg == "--socket" {
            args.next();
            continue;
        }
        if arg.starts_with('-') {
            continue;
        }
        return arg == "hook";
    }
    false
}

/// Runs one subcommand, writing to the process's stdout.
pub fn run(cli: Cli) -> Result<u8, CliError> {
    let socket = cli.socket.as_deref();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Status { json } => remote::status(socket, json, &mut out),
        Command::Snapshot { json, schema } => remote::snapshot(socket, schema, json, &mut out),
        Command::Spawn(args) => remote::spawn(socket, args, &mut out),
        Command::Kill { id } => remote::simple(socket, &request::agent(Wire::KillAgent, &id)),
        Command::Start { id } => remote::simple(socket, &request::agent(Wire::StartAgent, &id)),
        Command::Stop { id } => remote::simple(socket, &request::agent(Wire::StopAgent, &id)),
        Command::Restart { id } => remote::simple(socket, &request::agent(Wire::RestartAgent, &id)),
        Command::Remove { id } => remote::simple(socket, &request::agent(Wire::RemoveAgent, &id)),
        Command::Pause { id } => remote::simple(socket, &request::agent(Wire::PauseAgent, &id)),
        Command::Resume { id } => remote::simple(socket, &request::agent(Wire::ResumeAgent, &id)),
        Command::Signal { id, sig } => remote::simple(socket, &request::signal(&id, &sig)),
        Command::Send {
            id,
            text,
            no_newline,
        } => remote::simple(socket, &request::send_input(&id, &text, !no_newline)),
        Command::Watch { ids, json, since } => remote::watch(socket, &ids, since, json, &mut out),
        Command::Attach {
            id,
            events,
            read_only,
        } => {
            drop(out);
            attach_cmd(socket, &id, events, read_only)
        }
        Command::Top { fleet } => {
            drop(out);
            let gateway = fleet
                .then(|| fleet::start(&config_path(), fleet::Messages::File))
                .transpose()?;
            top_cmd(gateway.as_ref().map(|g| g.socket.as_path()).or(socket))
        }
        Command::Sessions { json } => remote::sessions(socket, json, &mut out),
        Command::Session { id } => remote::session(socket, &id, &mut out),
        Command::Compact { id } => remote::compact(socket, &id, &mut out),
        Command::Emit { id, json } => remote::emit(socket, &id, &json),
        Command::Hook {
            event,
            wait,
            default_answer,
        } => Ok(remote::hook(
            socket,
            &remote::HookOptions {
                event: event.as_deref(),
                wait,
                default_answer,
            },
            &mut io::stdin().lock(),
            &mut out,
            &mut io::stderr(),
        )),
        Command::Notify {
            config,
            cursor,
            fleet,
        } => {
            let gateway = fleet
                .then(|| fleet::start(&config, fleet::Messages::Stderr))
                .transpose()?;
            let cursor = match &gateway {
                // Another numbering: never the one host's cursor.
                Some(_) if cursor == std::path::Path::new(NOTIFY_CURSOR) => {
                    cursor.with_file_name("notify-fleet.cursor")
                }
                _ => cursor,
            };
            let socket = gateway.as_ref().map(|g| g.socket.as_path()).or(socket);
            notify_cmd(socket, &config, &cursor)
        }
        Command::Approvals { id, history, json } => {
            remote::approvals(socket, id.as_deref(), history, json, &mut out)
        }
        Command::Approve { target } => remote::decide(
            socket,
            &request::decide(Wire::Approve, &target, None, None),
            &mut out,
        ),
        Command::Deny { target, message } => remote::decide(
            socket,
            &request::decide(Wire::Deny, &target, message.as_deref(), None),
            &mut out,
        ),
        Command::Answer { target, text } => remote::decide(
            socket,
            &request::decide(Wire::Answer, &target, None, Some(&text)),
            &mut out,
        ),
        Command::ApprovalRequest(cmd) => approval_request::run(socket, &cmd, &mut out),
        Command::Budget { action, json } => budget::run(socket, action.as_ref(), json, &mut out),
        Command::Hint {
            kind: HintKind::Resume,
        } => remote::hint_resume(socket),
        Command::Hostop { op, params, json } => remote::hostop(socket, &op, params, json, &mut out),
        Command::Task { cmd } => task::run(socket, &cmd, &mut out),
        Command::Fold(args) => fold_cmd(args, &mut out),
        Command::Replay(args) => replay_cmd(args, &mut out),
        Command::Demo(args) => {
            drop(out);
            demo::run(args)
        }
        Command::Web(args) => {
            let gateway = args
                .fleet
                .then(|| fleet::start(&config_path(), fleet::Messages::Stderr))
                .transpose()?;
            let socket = gateway.as_ref().map(|g| g.socket.as_path()).or(socket);
            web_cmd(socket, args, &mut out)
        }
    }
}

#[derive(Debug, Args)]
pub struct WebArgs {
    /// The address to serve on; loopback by default (see docs/WEB.md for
    /// a TLS reverse proxy in front of it).
    #[arg(long, default_value = "127.0.0.1:8765", value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
    /// The token's file (created 0600 at first start)
    /// [default: ~/.config/colibri/web-token].
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The key that signs phone action URLs, shared with colibri notify
    /// (created 0600 at first start) [default: ~/.config/colibri/web-action-key].
    #[arg(long, value_name = "PATH")]
    pub action_key_file: Option<PathBuf>,
    /// Every host's panes, through `colibri-bridge gateway` (NATS from
    /// [fleet] in colibri.toml, or COLIBRI_NATS_URL).
    #[arg(long)]
    pub fleet: bool,
}

/// notify's default cursor (one host's numbering).
const NOTIFY_CURSOR: &str = "/var/db/colibri/notify.cursor";

/// colibri.toml, where `--fleet` reads `[fleet]`.
fn config_path() -> PathBuf {
    std::env::var_os("COLIBRI_CONFIG")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || PathBuf::from(crate::config::DEFAULT_CONFIG_PATH),
            PathBuf::from,
        )
}

#[cfg(feature = "tui")]
fn attach_cmd(
    socket: Option<&std::path::Path>,
    id: &str,
    events: bool,
    read_only: bool,
) -> Result<u8, CliError> {
    attach::run(socket, id, attach::AttachOptions { events, read_only })
}

#[cfg(not(feature = "tui"))]
fn attach_cmd(_: Option<&std::path::Path>, _: &str, _: bool, _: bool) -> Result<u8, CliError> {
    Err(CliError::without_feature("attach", "tui"))
}

#[cfg(feature = "tui")]
fn top_cmd(socket: Option<&std::path::Path>) -> Result<u8, CliError> {
    top::run(socket)
}

#[cfg(not(feature = "tui"))]
fn top_cmd(_: Option<&std::path::Path>) -> Result<u8, CliError> {
    Err(CliError::without_feature("top", "tui"))
}

#[cfg(feature = "notify-http")]
fn notify_cmd(
    socket: Option<&std::path::Path>,
    config: &std::path::Path,
    cursor: &std::path::Path,
) -> Result<u8, CliError> {
    notify::run(socket, config, cursor)
}

#[cfg(not(feature = "notify-http"))]
fn notify_cmd(
    _: Option<&std::path::Path>,
    _: &std::path::Path,
    _: &std::path::Path,
) -> Result<u8, CliError> {
    Err(CliError::without_feature("notify", "notify-http"))
}

#[cfg(not(feature = "web"))]
fn web_cmd(_: Option<&std::path::Path>, _: WebArgs, _: &mut impl Write) -> Result<u8, CliError> {
    Err(CliError::without_feature("web", "web"))
}

#[cfg(feature = "web")]
fn web_cmd(
    socket: Option<&std::path::Path>,
    args: WebArgs,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let opts = crate::web::WebOptions {
        socket: crate::client::resolve_socket(socket),
        listen: args.listen,
        token_file: args
            .token_file
            .unwrap_or_else(crate::config::web_token_path),
        action_key_file: args
            .action_key_file
            .unwrap_or_else(crate::config::action_key_path),
    };
    crate::web::run(&opts, out).map_err(|e| CliError::Runtime(e.to_string()))?;
    Ok(0)
}

/// Writes to our stdout and flushes; a failure stays [`CliError::Stdout`].
pub(crate) fn print(out: &mut impl Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

/// A `key=value` of `colibri hostop`; the value may hold `=`.
fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not key=value")),
    }
}

fn read_input(path: &std::path::Path) -> Result<Vec<u8>, CliError> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        io::Read::read_to_end(&mut io::stdin().lock(), &mut buf)
            .map_err(|e| CliError::io("cannot read stdin", e))?;
        Ok(buf)
    } else {
        std::fs::read(path).map_err(|e| CliError::io(format!("cannot read {}", path.display()), e))
    }
}

fn fold_cmd(args: FoldArgs, out: &mut impl Write) -> Result<u8, CliError> {
    let policies = match &args.config {
        Some(path) => crate::config::load_file(path)
            .map_err(|e| CliError::Runtime(e.to_string()))?
            .governance
            .unwrap_or_default(),
        None => crate::core::policy::Policies::default(),
    };
    let input = read_input(&args.file)?;
    if fold::is_task_journal(&input) {
        return fold_journal(&input, args.json, out);
    }
    let report = fold::fold_input_governed(
        input,
        args.runtime,
        args.max_line,
        args.pane.as_deref(),
        policies,
    )?;
    let text = if args.json {
        let mut s = serde_json::to_string(&report)
            .map_err(|e| CliError::Runtime(format!("cannot encode: {e}")))?;
        s.push('\n');
        s
    } else {
        render::fold_text(&report)
    };
    print(out, &text)?;
    Ok(0)
}

/// `colibri fold tasks.jsonl`: the dispatch plans the journal recorded,
/// each run again. Exit 1 when one comes out differently.
fn fold_journal(input: &[u8], json: bool, out: &mut impl Write) -> Result<u8, CliError> {
    let replay = crate::core::dispatch_replay::replay_journal(input.split(|&b| b == b'\n'));
    let text = if json {
        let mut s = serde_json::to_string(&replay)
            .map_err(|e| CliError::Runtime(format!("cannot encode: {e}")))?;
        s.push('\n');
        s
    } else {
        render::journal_replay_text(&replay)
    };
    print(out, &text)?;
    Ok(u8::from(!replay.all_same()))
}

fn replay_cmd(args: ReplayArgs, out: &mut impl Write) -> Result<u8, CliError> {
    let opts = replay::ReplayOptions {
        speed: args.speed,
        interval: Duration::from_millis(args.interval),
    };
    let stdin = io::stdin();
    if args.file.as_os_str() == "-" {
        // The recording comes on stdin, so there is nothing to answer from.
        let mut none: &[u8] = b"";
        return replay::replay(&mut stdin.lock(), &mut none, out, opts);
    }
    let file = std::fs::File::open(&args.file)
        .map_err(|e| CliError::io(format!("cannot open {}", args.file.display()), e))?;
    replay::replay(&mut io::BufReader::new(file), &mut stdin.lock(), out, opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn spawn_needs_argv_after_the_separator() {
        let cli = Cli::try_parse_from([
            "colibri",
            "spawn",
            "--runtime",
            "pi",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--restart",
            "on-failure",
            "--",
            "pi",
            "--mode",
            "json",
        ])
        .expect("parses");
        let Command::Spawn(a) = cli.command else {
            panic!("not spawn")
        };
        assert_eq!(a.argv, ["pi", "--mode", "json"]);
        assert_eq!(
            a.env,
            [
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), "x=y".to_string())
            ]
        );
        assert_eq!(a.restart, Some(RestartPolicy::OnFailure));
        assert!(Cli::try_parse_from(["colibri", "spawn"]).is_err());
        assert!(Cli::try_parse_from(["colibri", "spawn", "--env", "noequals", "--", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["colibri", "spawn", "--stall-after", "soon", "--", "x"]).is_err()
        );
        assert!(Cli::try_parse_from(["colibri", "spawn", "--runtime", "vim", "--", "x"]).is_err());
    }

    #[test]
    fn the_hook_subcommand_is_found_behind_global_options() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(invoked_as_hook(args(&["hook", "--bogus"]).into_iter()));
        assert!(invoked_as_hook(
            args(&["--socket", "/s", "hook"]).into_iter()
        ));
        assert!(!invoked_as_hook(args(&["send", "x", "hook"]).into_iter()));
        assert!(!invoked_as_hook(args(&["--socket", "hook"]).into_iter()));
    }

    #[test]
    fn speeds_must_be_positive() {
        assert!(Cli::try_parse_from(["colibri", "replay", "f", "--speed", "0"]).is_err());
        assert!(Cli::try_parse_from(["colibri", "replay", "f", "--speed", "nan"]).is_err());
        assert!(Cli::try_parse_from(["colibri", "replay", "f", "--speed", "2.5"]).is_ok());
    }
}
