//! Request values for each daemon subcommand, built from a client's
//! arguments (the CLI's, top's, the board's).
//!
//! Each is a [`protocol::Command`](crate::protocol::Command), the type the
//! daemon parses, so a client cannot send a field the daemon does not read:
//! a renamed field fails to compile here instead of failing at run time.

use serde_json::Value;

use crate::protocol::{
    AgentArgs, ApprovalsArgs, Command, DecideArgs, EmitArgs, HintArgs, HookArgs, HostopArgs,
    InputArgs, SessionArgs, SignalArgs, SnapshotArgs, WatchArgs,
};

pub fn status() -> Command {
    Command::Status
}

pub fn snapshot(schema: &str) -> Command {
    Command::Snapshot(SnapshotArgs {
        schema: Some(schema.to_string()),
    })
}

pub fn list_sessions() -> Command {
    Command::ListSessions
}

/// The commands that take only an agent, named by their variant:
/// `agent(Command::KillAgent, "w1")`.
pub fn agent(verb: fn(AgentArgs) -> Command, agent_id: &str) -> Command {
    verb(AgentArgs {
        agent_id: agent_id.to_string(),
    })
}

/// A signal given as a number stays a number; a name is sent as written.
pub fn signal(agent_id: &str, sig: &str) -> Command {
    let signal = match sig.parse::<i64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(sig),
    };
    Command::SignalAgent(SignalArgs {
        agent_id: agent_id.to_string(),
        signal,
    })
}

pub fn send_input(agent_id: &str, text: &str, newline: bool) -> Command {
    Command::SendInput(InputArgs {
        agent_id: agent_id.to_string(),
        text: text.to_string(),
        newline: Some(newline),
    })
}

/// `watch` of these panes (all when empty), replaying the journal after
/// `since` first when it is given.
pub fn watch(panes: &[String], since: Option<u64>) -> Command {
    Command::Watch(WatchArgs {
        panes: (!panes.is_empty()).then(|| panes.to_vec()),
        since,
        ..WatchArgs::default()
    })
}

pub fn get_session(session_id: &str) -> Command {
    Command::GetSession(SessionArgs {
        session_id: session_id.to_string(),
    })
}

pub fn compact_session(session_id: &str) -> Command {
    Command::CompactSession(SessionArgs {
        session_id: session_id.to_string(),
    })
}

pub fn emit(agent_id: &str, event: Value) -> Command {
    Command::Emit(EmitArgs {
        agent_id: agent_id.to_string(),
        event,
    })
}

pub fn approvals(agent_id: Option<&str>) -> Command {
    approvals_after(agent_id, None)
}

/// The page of `approvals` after the previous page's `next`.
pub fn approvals_after(agent_id: Option<&str>, after: Option<&str>) -> Command {
    Command::Approvals(ApprovalsArgs {
        agent_id: agent_id.map(str::to_string),
        after: after.map(str::to_string),
        limit: None,
    })
}

/// `approve`, `deny` or `answer`, named by their variant.
pub fn decide(
    verb: fn(DecideArgs) -> Command,
    target: &str,
    message: Option<&str>,
    text: Option<&str>,
) -> Command {
    verb(DecideArgs {
        approval: target.to_string(),
        message: message.map(str::to_string),
        text: text.map(str::to_string),
        via: None,
    })
}

pub fn hook(agent_id: &str, event: Value, wait_ms: u64) -> Command {
    Command::Hook(HookArgs {
        agent_id: agent_id.to_string(),
        event,
        wait_ms: Some(wait_ms),
    })
}

pub fn hint_resume() -> Command {
    Command::Hint(HintArgs {
        kind: "resume".to_string(),
    })
}

/// `hostop`: run the declared host operation `op` with `params`.
pub fn hostop(op: &str, params: std::collections::BTreeMap<String, String>) -> Command {
    Command::Hostop(HostopArgs {
        op: op.to_string(),
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Request;
    use serde_json::json;

    /// What the daemon reads from the line this client sends.
    fn parsed(c: &Command) -> Command {
        let line = c.to_line().expect("encodes");
        match Request::parse(&line) {
            Ok(r) => r.command,
            Err((_, e)) => panic!("daemon would refuse {c:?}: {e}"),
        }
    }

    #[test]
    fn every_constructor_reaches_the_daemon_unchanged() {
        let all = [
            status(),
            list_sessions(),
            snapshot("v2"),
            agent(Command::KillAgent, "w1"),
            agent(Command::PauseAgent, "w1"),
            agent(Command::RemoveAgent, "w1"),
            signal("w", "15"),
            signal("w", "TERM"),
            send_input("w", "yes", false),
            watch(&[], None),
            watch(&["a".into()], Some(7)),
            get_session("s"),
            compact_session("s"),
            emit("w", json!({"hook_event_name":"Stop"})),
            approvals(None),
            approvals(Some("w")),
            decide(Command::Approve, "a-1", None, None),
            decide(Command::Deny, "a-1", Some("no"), None),
            decide(Command::Answer, "a-1", None, Some("2")),
            hook("w", json!({"hook_event_name":"PreToolUse"}), 500),
            hint_resume(),
        ];
        for c in all {
            assert_eq!(parsed(&c), c);
        }
    }

    #[test]
    fn absent_options_are_omitted_not_sent_as_null() {
        let line = watch(&[], None).to_line().expect("encodes");
        assert_eq!(line, b"{\"cmd\":\"watch\"}\n");
        let line = approvals(None).to_line().expect("encodes");
        assert_eq!(line, b"{\"cmd\":\"approvals\"}\n");
    }

    #[test]
    fn a_signal_number_stays_a_number() {
        assert!(matches!(signal("w", "15"), Command::SignalAgent(a) if a.signal == json!(15)));
        assert!(
            matches!(signal("w", "TERM"), Command::SignalAgent(a) if a.signal == json!("TERM"))
        );
    }
}
