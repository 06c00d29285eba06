//! Process control: kill, pause and resume, signals, input, and the
//! resume-from-sleep hint.

use crate::protocol::{AgentArgs, HintArgs, InputArgs, SignalArgs};
use std::str::FromStr;

use serde_json::Value;

use crate::core::lifecycle::{Life, LifeEvent};
use crate::daemon::agent::Hold;
use crate::daemon::conn::Scope;
use crate::daemon::event_loop::Daemon;
use crate::daemon::panes::{PaneKey, Slot};
use crate::daemon::timers::Deadline;
use crate::platform;
use crate::protocol::{
    CommandError, HintReply, InputReply, KillReply, PauseReply, Reply, SignalReply,
};

use super::Call;

pub(super) fn kill(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    let t = call.t;
    let agent = d
        .panes
        .agent_mut(key)
        .ok_or_else(|| CommandError::not_found(&a.agent_id))?;
    let pane_id = agent.pane_id.clone();
    if matches!(agent.life, Life::Backoff { .. }) {
        agent.stopped_by = Some("killed by operator".into());
        d.life_event(key, LifeEvent::Stop, t);
        return Ok(Reply::Kill(KillReply {
            agent_id: pane_id,
            status: "stopped".into(),
        }));
    }
    let Some(pid) = agent.running_pid() else {
        // The agent has ended, but what it left running (descendants that
        // outlived it, now colibrid's) is still the operator's to kill.
        if d.signal_leftovers(&[&pane_id], libc::SIGKILL) == 0 {
            return Err(CommandError::not_running(&pane_id));
        }
        return Ok(Reply::Kill(KillReply {
            agent_id: pane_id,
            status: "leftovers_killed".into(),
        }));
    };
    agent.stopped_by = Some("killed by operator".into());
    platform::signal_tree(pid, libc::SIGKILL)
        .map_err(|e| CommandError::os(format!("kill: {e}")))?;
    // Descendants whose parent exited before the kill now hang off the
    // daemon; their environment still names the pane.
    d.signal_leftovers(&[&pane_id], libc::SIGKILL);
    // The contract: a forced kill is folded as an error at once.
    if let Some(p) = d.panes.pane_mut(key) {
        p.fail("killed by operator".into(), t, &mut d.transitions);
    }
    d.after_ingest(key, t);
    Ok(Reply::Kill(KillReply {
        agent_id: pane_id,
        status: "killed".into(),
    }))
}

pub(super) fn pause(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    set_paused(d, &a.agent_id, true, call)
}

pub(super) fn resume(d: &mut Daemon, call: &Call, a: AgentArgs) -> Result<Reply, CommandError> {
    set_paused(d, &a.agent_id, false, call)
}

/// The hold an operator's `pause-agent` puts (see `Agent::holds`).
const OPERATOR_HOLD: &str = "operator";

fn set_paused(
    d: &mut Daemon,
    agent_id: &str,
    pause: bool,
    call: &Call,
) -> Result<Reply, CommandError> {
    let t = call.t;
    let key = d.resolve(&Scope::Operator, agent_id)?;
    if !pause {
        let agent_id = d.resume_agent(key, t)?;
        d.resolve_decide_item(&agent_id, t);
        return Ok(Reply::Pause(PauseReply {
            agent_id,
            paused: false,
        }));
    }
    let Some(Slot { pane, agent }) = d.panes.get_mut(key) else {
        return Err(CommandError::not_found(agent_id));
    };
    let pane_id = agent.pane_id.clone();
    let Some(pid) = agent.running_pid() else {
        return Err(CommandError::not_running(&pane_id));
    };
    // The operator's pause holds the agent until the operator resumes it
    // (a policy's resume does not); the operator's resume lifts every hold.
    if !agent.holds.holds(OPERATOR_HOLD) {
        agent.holds.add(Hold {
            key: OPERATOR_HOLD.to_string(),
            rule: None,
            reason: Some(format!("pause-agent on connection {}", call.conn.0)),
            since: t,
            until: None,
        });
    }
    let reply = |paused| {
        Reply::Pause(PauseReply {
            agent_id: pane_id.clone(),
            paused,
        })
    };
    if pane.paused {
        return Ok(reply(true));
    }
    d.signal_pane(pid, &pane_id, libc::SIGSTOP)
        .map_err(|e| CommandError::os(format!("signal: {e}")))?;
    d.mark_paused(key, true, t);
    Ok(reply(true))
}

pub(super) fn signal(d: &mut Daemon, _call: &Call, a: SignalArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    let sig = parse_signal(&a.signal).map_err(CommandError::invalid)?;
    let agent = d
        .panes
        .agent(key)
        .ok_or_else(|| CommandError::not_found(&a.agent_id))?;
    let Some(pid) = agent.running_pid() else {
        // As for kill: an ended agent's leftovers still take signals.
        let pane_id = agent.pane_id.clone();
        if d.signal_leftovers(&[&pane_id], sig) == 0 {
            return Err(CommandError::not_running(&pane_id));
        }
        return Ok(Reply::Signal(SignalReply {
            agent_id: pane_id,
            signal: sig,
        }));
    };
    platform::signal_tree(pid, sig).map_err(|e| CommandError::os(format!("signal: {e}")))?;
    Ok(Reply::Signal(SignalReply {
        agent_id: agent.pane_id.clone(),
        signal: sig,
    }))
}

pub(super) fn send_input(
    d: &mut Daemon,
    _call: &Call,
    a: InputArgs,
) -> Result<Reply, CommandError> {
    let key = d.resolve(&Scope::Operator, &a.agent_id)?;
    let agent = d
        .panes
        .agent_mut(key)
        .ok_or_else(|| CommandError::not_found(&a.agent_id))?;
    let pane_id = agent.pane_id.clone();
    let Some(proc_) = agent.proc.as_mut().filter(|p| p.status.is_none()) else {
        return Err(CommandError::not_running(&pane_id));
    };
    let mut bytes = a.text.into_bytes();
    if a.newline.unwrap_or(true) {
        bytes.push(b'\n');
    }
    let n = bytes.len();
    proc_.queue_input(&bytes).map_err(|e| e.refusal(&pane_id))?;
    d.write_input(key);
    Ok(Reply::Input(InputReply {
        agent_id: pane_id,
        queued: n,
    }))
}

pub(super) fn hint(d: &mut Daemon, call: &Call, a: HintArgs) -> Result<Reply, CommandError> {
    if a.kind != "resume" {
        return Err(CommandError::invalid(format!(
            "unknown hint {:?} (resume)",
            a.kind
        )));
    }
    let t = call.t;
    // The host slept: silence during the sleep is not the agents' fault.
    let keys: Vec<PaneKey> = d.panes.keys();
    for &k in &keys {
        if let Some(p) = d.panes.pane_mut(k) {
            p.rebase_quiet(t);
        }
        d.clear_deadline(k, Deadline::Stall, t);
        d.refresh_stall(k, t);
    }
    Ok(Reply::Hint(HintReply {
        rebased: keys.len(),
    }))
}

/// `TERM`, `SIGTERM` or `15`.
fn parse_signal(v: &Value) -> Result<i32, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| nix::sys::signal::Signal::try_from(*n).is_ok())
            .ok_or_else(|| format!("bad signal number {n}")),
        Value::String(s) => {
            let up = s.to_ascii_uppercase();
            let name = if up.starts_with("SIG") {
                up
            } else {
                format!("SIG{up}")
            };
            nix::sys::signal::Signal::from_str(&name)
                .map(|s| s as i32)
                .map_err(|_| format!("unknown signal {s:?}"))
        }
        _ => Err("signal must be a name or a number".into()),
    }
}
