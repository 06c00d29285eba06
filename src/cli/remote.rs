//! The subcommands that talk to the daemon.
//!
//! Each one connects, sends the request built in `request`, and prints the
//! reply with `render` (or as JSON). Output goes through a `Write` passed
//! in, and stdout failures stay [`CliError::Stdout`] so `main` can treat a
//! closed pipe as success.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::render;
use crate::cli::HookDefault;
use crate::cli::{print, CliError, Schema, SpawnArgs, REQUEST_TIMEOUT};
use crate::client::{resolve_socket, Client, ClientError};
use crate::core::approval::{
    encode_answer, AnswerChannel, Approval, ApprovalKind, ApprovalRequest, Decision,
};
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::protocol::request;
use crate::protocol::{
    self as wire, ApprovalsReply, DecideReply, HookReply, HostopReply, SessionSummary, SnapshotV1,
    SnapshotV2, SpawnData, StatusData, WatchEvent, WatchKind,
};

/// Hooks and hints must not hold up whoever runs them.
const SHORT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `compact` waits for the daemon's answer.
const COMPACT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long `hostop` waits: the longest an op may run, and a margin for
/// its reply.
const HOSTOP_TIMEOUT: Duration =
    Duration::from_secs(crate::config::MAX_HOSTOP_TIMEOUT.as_secs() + 30);

/// The hook input Claude Code sends is small; this only bounds a runaway.
const MAX_HOOK_INPUT: u64 = 16 << 20;

pub fn connect(socket: Option<&Path>, timeout: Duration) -> Result<Client, ClientError> {
    Client::connect(&resolve_socket(socket), timeout)
}

fn call(socket: Option<&Path>, req: &wire::Command) -> Result<Value, ClientError> {
    connect(socket, REQUEST_TIMEOUT)?.call(req)
}

/// JSON as the daemon sent it, with what a terminal would act on escaped.
fn print_json_line(out: &mut impl Write, v: &Value) -> Result<(), CliError> {
    print(
        out,
        &format!("{}\n", render::json_for_terminal(&v.to_string())),
    )
}

fn decode<T: DeserializeOwned>(what: &str, data: Value) -> Result<T, CliError> {
    serde_json::from_value(data).map_err(|e| {
        CliError::Client(ClientError::Protocol(format!(
            "unexpected {what} reply: {e} (try --json)"
        )))
    })
}

/// A command whose reply carries nothing to show.
pub fn simple(socket: Option<&Path>, req: &wire::Command) -> Result<u8, CliError> {
    call(socket, req)?;
    Ok(0)
}

pub fn status(socket: Option<&Path>, json: bool, out: &mut impl Write) -> Result<u8, CliError> {
    let data = call(socket, &request::status())?;
    if json {
        print_json_line(out, &data)?;
    } else {
        let s: StatusData = decode("status", data)?;
        print(out, &render::status_summary(&s, SystemTime::now()))?;
    }
    Ok(0)
}

pub fn snapshot(
    socket: Option<&Path>,
    schema: Schema,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let data = call(socket, &request::snapshot(schema.as_str()))?;
    let text = match (json, schema) {
        (true, _) => format!("{}\n", render::json_for_terminal(&data.to_string())),
        (false, Schema::V2) => render::snapshot_table(&decode::<SnapshotV2>("snapshot", data)?),
        (false, Schema::V1) => render::snapshot_v1_table(&decode::<SnapshotV1>("snapshot", data)?),
    };
    print(out, &text)?;
    Ok(0)
}

pub fn spawn(socket: Option<&Path>, args: SpawnArgs, out: &mut impl Write) -> Result<u8, CliError> {
    let cwd = match args.cwd {
        // The daemon resolves paths against its own directory, not ours.
        Some(dir) => Some(
            std::path::absolute(&dir)
                .map_err(|e| CliError::io(format!("cannot resolve {}", dir.display()), e))?
                .to_string_lossy()
                .into_owned(),
        ),
        // A jail's directories are not the host's: the caller's directory
        // means nothing inside it, so the daemon's default (the jail's `/`)
        // stays.
        None if args.jail.is_some() => None,
        // Without --cwd the agent works where the caller is, as a command
        // run from this shell would, not in the daemon's directory (`/`
        // under rc.d).
        None => Some(
            std::env::current_dir()
                .map_err(|e| CliError::io("cannot read the current directory (give --cwd)", e))?
                .to_string_lossy()
                .into_owned(),
        ),
    };
    let mut scope = Vec::with_capacity(args.scope.len());
    for p in &args.scope {
        let p = match args.jail {
            Some(_) => p.clone(),
            None => std::path::absolute(p)
                .map_err(|e| CliError::io(format!("cannot resolve {}", p.display()), e))?,
        };
        scope.push(p.to_string_lossy().into_owned());
    }
    let req = wire::SpawnArgs {
        argv: Some(args.argv),
        runtime: args.runtime,
        name: args.name,
        cwd,
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
        stall_after: args.stall_after,
        restart: args.restart.map(|r| r.as_str().to_string()),
        max_restarts: args.max_restarts,
        jail: args.jail,
        user: args.user,
        role: args.role,
        heartbeat: args.heartbeat,
        system_prompt: args.system_prompt,
        scope: (!scope.is_empty()).then_some(scope),
        ..wire::SpawnArgs::default()
    };
    let data = call(socket, &wire::Command::SpawnAgent(Box::new(req)))?;
    let spawned: SpawnData = decode("spawn", data)?;
    print(out, &format!("{}\n", spawned.agent_id))?;
    Ok(0)
}

pub fn watch(
    socket: Option<&Path>,
    panes: &[String],
    since: Option<u64>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    // Panes attached before the watch began have no `attached` event in a
    // live stream: a snapshot first names them. Names only decorate the
    // lines, so a refused snapshot leaves the ids bare and the watch goes on.
    // On a connection of its own: a reply that came after a timeout must
    // not be read as the watch's.
    let mut names = if json {
        BTreeMap::new()
    } else {
        connect(socket, REQUEST_TIMEOUT)
            .and_then(|mut c| c.call(&request::snapshot("v2")))
            .map(|snap| names_in_snapshot(&snap))
            .unwrap_or_default()
    };
    let mut client = connect(socket, REQUEST_TIMEOUT)?;
    client.watch_from(panes, since)?;
    for item in client.stream() {
        let v = item?;
        if json {
            print_json_line(out, &v)?;
            continue;
        }
        match serde_json::from_value::<WatchEvent>(v.clone()) {
            Ok(ev) => {
                if let WatchKind::Attached {
                    pane,
                    name: Some(name),
                    ..
                } = &ev.kind
                {
                    names.insert(pane.clone(), name.clone());
                }
                print(out, &format!("{}\n", render::watch_line(&ev, &names)))?;
            }
            // An event kind newer than this CLI: show it rather than hide it.
            Err(_) => print_json_line(out, &v)?,
        }
    }
    // A watch never ends on its own: the daemon stopped or dropped us.
    Err(CliError::Runtime(
        "the daemon closed the watch stream (colibrid stopped?)".into(),
    ))
}

/// Pane id → name for every named pane of a v2 snapshot's data, read
/// field by field so a snapshot newer than this CLI still names them.
fn names_in_snapshot(snap: &Value) -> BTreeMap<String, String> {
    snap["panes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["id"].as_str()?.to_string(),
                p["name"].as_str()?.to_string(),
            ))
        })
        .collect()
}

pub fn sessions(socket: Option<&Path>, json: bool, out: &mut impl Write) -> Result<u8, CliError> {
    let data = call(socket, &request::list_sessions())?;
    if json {
        print_json_line(out, &data)?;
        return Ok(0);
    }
    // Accept a bare list or `{"sessions":[...]}`.
    let list = match data {
        Value::Object(mut m) if m.contains_key("sessions") => {
            m.remove("sessions").unwrap_or(Value::Null)
        }
        other => other,
    };
    let list: Vec<SessionSummary> = decode("list-sessions", list)?;
    print(out, &render::sessions_table(&list))?;
    Ok(0)
}

pub fn session(socket: Option<&Path>, id: &str, out: &mut impl Write) -> Result<u8, CliError> {
    // Raw: the records are agent lines, which may nest past what a
    // `Value` may hold (see `Client::call_raw`).
    let data = connect(socket, REQUEST_TIMEOUT)?.call_raw(&request::get_session(id))?;
    let text = render::session_dump(&data)
        .map_err(|e| CliError::Runtime(format!("cannot encode: {e}")))?;
    print(out, &format!("{text}\n"))?;
    Ok(0)
}

pub fn compact(socket: Option<&Path>, id: &str, out: &mut impl Write) -> Result<u8, CliError> {
    // The daemon answers once the whole log is done, a slice per wakeup:
    // for a log of gigabytes, tens of seconds.
    let data = connect(socket, COMPACT_TIMEOUT)?.call(&request::compact_session(id))?;
    if !data.is_null() {
        print_json_line(out, &data)?;
    }
    Ok(0)
}

/// `colibri hostop NAME key=value...`: the op's output on stdout (its
/// control characters escaped, unless `--json`), and its exit status as
/// ours (a status past 255, or none, is 1).
pub fn hostop(
    socket: Option<&Path>,
    op: &str,
    params: Vec<(String, String)>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let params: BTreeMap<String, String> = params.into_iter().collect();
    let data = connect(socket, HOSTOP_TIMEOUT)?.call(&request::hostop(op, params))?;
    if json {
        print_json_line(out, &data)?;
    }
    let reply: HostopReply = decode("hostop", data)?;
    if !json {
        print(out, &render::escape_lines(&reply.output))?;
        if reply.truncated {
            eprintln!(
                "colibri: hostop {}: output cut at the op's output_max",
                render::escape_controls(op)
            );
        }
    }
    Ok(u8::try_from(reply.exit_code).unwrap_or(1))
}

/// Parses an event given on the command line (or `-` for stdin).
pub fn parse_event(text: &str) -> Result<Value, CliError> {
    let v: Value = serde_json::from_str(text.trim())
        .map_err(|e| CliError::Runtime(format!("event is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(CliError::Runtime("event must be a JSON object".into()));
    }
    Ok(v)
}

pub fn emit(socket: Option<&Path>, id: &str, json: &str) -> Result<u8, CliError> {
    let text = if json == "-" {
        let mut s = String::new();
        std::io::stdin()
            .lock()
            .read_to_string(&mut s)
            .map_err(|e| CliError::io("cannot read stdin", e))?;
        s
    } else {
        json.to_string()
    };
    simple(socket, &request::emit(id, parse_event(&text)?))
}

pub fn hint_resume(socket: Option<&Path>) -> Result<u8, CliError> {
    connect(socket, SHORT_TIMEOUT)?.call(&request::hint_resume())?;
    Ok(0)
}

/// What `colibri hook` was asked to do.
pub struct HookOptions<'a> {
    pub event: Option<&'a str>,
    /// How long a permission request waits for the operator (0: not at all).
    pub wait: Duration,
    pub default_answer: HookDefault,
}

/// Time on top of the wait for the daemon's own timeout reply to arrive.
const HOOK_REPLY_GRACE: Duration = Duration::from_secs(3);

/// `colibri hook EVENT`: forwards Claude Code hook input to the pane, for
/// a `PermissionRequest` waits for the operator's decision, and for a
/// `PreToolUse` prints the command guard's deny when it has one.
///
/// Always returns 0. Claude Code runs hooks synchronously and reads their
/// exit status: exit 2 blocks the tool call or the prompt and feeds stderr
/// to the model, other failures are shown to the user. A supervisor that is
/// down or busy must never change what the agent does, so every problem is
/// reported on stderr only and the exit status stays 0. Stdout carries only
/// a decision (Claude Code parses a hook's stdout as instructions): the
/// operator's, the guard's, or the `--default` when nobody answered: the
/// wait ran out, or colibrid could not be asked or went away while it
/// waited (a permission is not granted because the supervisor is down).
/// Other events with the daemon absent print nothing (a `PreToolUse`
/// runs the tool).
pub fn hook(
    socket: Option<&Path>,
    opts: &HookOptions<'_>,
    stdin: &mut impl Read,
    stdout: &mut impl Write,
    stderr: &mut impl Write,
) -> u8 {
    let line = match forward_hook(socket, opts, stdin) {
        Ok(line) => line,
        Err(HookFailure { error, fallback }) => {
            let text = format!("colibri hook {}: {error}", opts.event.unwrap_or("-"));
            let _ = writeln!(stderr, "{}", render::escape_controls(&text));
            fallback
        }
    };
    if let Some(line) = line {
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    }
    0
}

/// Why a hook got no answer, and what it prints instead: for a permission
/// it waits on, the `--default` decision (the daemon gone, the connection
/// lost, no reply: nobody answered, as when the wait runs out); else
/// nothing.
struct HookFailure {
    error: CliError,
    fallback: Option<String>,
}

impl<E: Into<CliError>> From<E> for HookFailure {
    fn from(e: E) -> HookFailure {
        HookFailure {
            error: e.into(),
            fallback: None,
        }
    }
}

/// The decision line to print, if any.
fn forward_hook(
    socket: Option<&Path>,
    opts: &HookOptions<'_>,
    stdin: &mut impl Read,
) -> Result<Option<String>, HookFailure> {
    let pane = match std::env::var("COLIBRI_PANE_ID") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            return Err(CliError::Runtime(
                "COLIBRI_PANE_ID is not set (not running under colibrid?)".into(),
            )
            .into())
        }
    };
    let mut text = String::new();
    stdin
        .take(MAX_HOOK_INPUT)
        .read_to_string(&mut text)
        .map_err(|e| CliError::io("cannot read the hook input", e))?;
    let mut ev = parse_event(&text)?;
    // The event name is informational, but a hand-made input without one
    // still deserves to be recognised as a hook.
    if let (Value::Object(m), Some(event)) = (&mut ev, opts.event) {
        m.entry("hook_event_name")
            .or_insert_with(|| Value::from(event));
    }
    let event = ev.get("hook_event_name").and_then(Value::as_str);
    if event == Some("PreToolUse") {
        // The guard's verdict comes back at once and nobody is waited for:
        // a deny line, or nothing. A daemon that is down or slower than
        // the short timeout fails open, like every forward: the call goes
        // on (and the stream guard still sees it in the pane).
        let reply = connect(socket, SHORT_TIMEOUT)?.call(&request::hook(&pane, ev, 0))?;
        let reply: HookReply = decode("hook", reply)?;
        return Ok(reply.output);
    }
    let asks = event == Some("PermissionRequest");
    if !asks || opts.wait.is_zero() {
        connect(socket, SHORT_TIMEOUT)?.call(&request::emit(&pane, ev))?;
        return Ok(None);
    }
    let wait_ms = u64::try_from(opts.wait.as_millis()).unwrap_or(u64::MAX);
    let unanswered = |error: CliError| HookFailure {
        error,
        fallback: default_decision(opts, true),
    };
    let mut client =
        connect(socket, opts.wait + HOOK_REPLY_GRACE).map_err(|e| unanswered(e.into()))?;
    let reply = match client.call(&request::hook(&pane, ev, wait_ms)) {
        Ok(v) => v,
        // The daemon took the request but never answered in time.
        Err(ClientError::Timeout(_)) => return Ok(default_decision(opts, false)),
        // Gone while it waited (stopped, crashed, the connection cut).
        Err(e) => return Err(unanswered(e.into())),
    };
    let reply: HookReply = decode("hook", reply).map_err(unanswered)?;
    if let Some(out) = reply.output {
        return Ok(Some(out));
    }
    match reply.reason.as_deref() {
        Some("timed_out") => Ok(default_decision(opts, false)),
        _ => Ok(None),
    }
}

/// What to print when nobody decided: Claude Code's deny, built by the
/// same encoder the daemon uses, or nothing.
fn default_decision(opts: &HookOptions<'_>, unreachable: bool) -> Option<String> {
    if opts.default_answer == HookDefault::None {
        return None;
    }
    let mut req = ApprovalRequest::new(ApprovalKind::ToolPermission, "".into());
    req.channel = AnswerChannel::HookOutput;
    let approval = Approval::from_request(String::new(), &req, Timestamp::from_millis(0), 0);
    let message = if unreachable {
        "The supervisor (colibrid) could not be asked; denied by default.".to_string()
    } else {
        format!(
            "No answer from the operator within {}; denied by default.",
            humantime::format_duration(opts.wait)
        )
    };
    let line = encode_answer(
        Runtime::Claude,
        &approval,
        &Decision::Deny {
            message: Some(message),
        },
    )
    .ok()?;
    Some(String::from_utf8_lossy(&line).trim_end().to_string())
}

/// `colibri approvals [AGENT] [--history]`.
pub fn approvals(
    socket: Option<&Path>,
    agent: Option<&str>,
    history: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    // Every page (a page holds less when agents made the approvals large).
    let mut list = ApprovalsReply {
        approvals: Vec::new(),
        next: None,
        approved: Vec::new(),
    };
    let mut client = connect(socket, REQUEST_TIMEOUT)?;
    loop {
        let req = request::approvals_after(agent, list.next.as_deref());
        let page: ApprovalsReply = decode("approvals", client.call(&req)?)?;
        list.approvals.extend(page.approvals);
        list.approved.extend(page.approved);
        list.next = page.next;
        if list.next.is_none() {
            break;
        }
    }
    if json {
        let data = serde_json::to_value(&list).unwrap_or_default();
        return print_json_line(out, &data).map(|()| 0);
    }
    let mut text = String::new();
    for a in &list.approvals {
        let who = a.name.as_deref().unwrap_or(&a.pane);
        let mut line = format!("{}  {}  {}  {}", a.id, who, a.kind, a.question);
        if !a.options.is_empty() {
            line.push_str(&format!("  [{}]", a.options.join(" | ")));
        }
        if a.escalated {
            line.push_str("  (escalated)");
        }
        text.push_str(&render::escape_controls(&line));
        text.push('\n');
    }
    for e in list.approved.iter().filter(|_| history) {
        let who = e.name.as_deref().unwrap_or(&e.pane);
        let end = e.reason.as_deref().unwrap_or(&e.status);
        let when = e.approved_at.as_deref().unwrap_or("");
        let mut line = format!("{}  {}  {end}  {when}  {}", e.approval_id, who, e.operation);
        if let Some(by) = &e.by {
            line.push_str(&format!("  (by {by})"));
        }
        text.push_str(&render::escape_controls(&line));
        text.push('\n');
    }
    print(out, &text)?;
    Ok(0)
}

/// `colibri approve|deny|answer`.
pub fn decide(
    socket: Option<&Path>,
    req: &wire::Command,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let data = call(socket, req)?;
    let r: DecideReply = decode("decide", data)?;
    print(
        out,
        &format!(
            "{}: {} ({} bytes to {})\n",
            r.approval, r.decision, r.bytes, r.channel
        ),
    )?;
    Ok(0)
}
