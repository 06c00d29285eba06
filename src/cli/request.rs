//! Request lines for each daemon subcommand, built from parsed arguments.
//!
//! Pure functions from arguments to JSON, so the wire shape of every
//! command can be tested against `protocol::Request::parse` (the daemon's
//! own parser) without a daemon.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::core::taxonomy::Runtime;

/// Everything `colibri spawn` can say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpawnRequest {
    pub argv: Vec<String>,
    pub runtime: Option<Runtime>,
    pub name: Option<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stall_after: Option<String>,
    pub restart: Option<String>,
    pub max_restarts: Option<u32>,
    pub jail: Option<String>,
    pub user: Option<String>,
}

pub fn status() -> Value {
    json!({"cmd": "status"})
}

pub fn snapshot(schema: &str) -> Value {
    json!({"cmd": "snapshot", "schema": schema})
}

pub fn list_sessions() -> Value {
    json!({"cmd": "list-sessions"})
}

pub fn spawn(s: &SpawnRequest) -> Value {
    let mut m = Map::new();
    m.insert("cmd".into(), "spawn-agent".into());
    m.insert("argv".into(), json!(s.argv));
    let mut opt = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    opt("runtime", s.runtime.map(|r| r.as_str().into()));
    opt("name", s.name.clone().map(Value::from));
    opt("cwd", s.cwd.clone().map(Value::from));
    opt("env", (!s.env.is_empty()).then(|| json!(s.env)));
    opt("stall_after", s.stall_after.clone().map(Value::from));
    opt("restart", s.restart.clone().map(Value::from));
    opt("max_restarts", s.max_restarts.map(Value::from));
    opt("jail", s.jail.clone().map(Value::from));
    opt("user", s.user.clone().map(Value::from));
    Value::Object(m)
}

/// `kill-agent`, `pause-agent`, `resume-agent`, `start-agent`, `stop-agent`,
/// `restart-agent`, `remove-agent`: the commands that take only an agent.
pub fn agent(cmd: &str, agent_id: &str) -> Value {
    json!({"cmd": cmd, "agent_id": agent_id})
}

/// A signal given as a number stays a number; a name is sent as written.
pub fn signal(agent_id: &str, sig: &str) -> Value {
    let signal = match sig.parse::<i64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(sig),
    };
    json!({"cmd": "signal-agent", "agent_id": agent_id, "signal": signal})
}

pub fn send_input(agent_id: &str, text: &str, newline: bool) -> Value {
    json!({"cmd": "send-input", "agent_id": agent_id, "text": text, "newline": newline})
}

pub fn watch(panes: &[String]) -> Value {
    if panes.is_empty() {
        json!({"cmd": "watch"})
    } else {
        json!({"cmd": "watch", "panes": panes})
    }
}

pub fn get_session(session_id: &str) -> Value {
    json!({"cmd": "get-session", "session_id": session_id})
}

pub fn compact_session(session_id: &str) -> Value {
    json!({"cmd": "compact-session", "session_id": session_id})
}

pub fn emit(agent_id: &str, event: Value) -> Value {
    json!({"cmd": "emit", "agent_id": agent_id, "event": event})
}

pub fn approvals(agent_id: Option<&str>) -> Value {
    match agent_id {
        Some(a) => json!({"cmd": "approvals", "agent_id": a}),
        None => json!({"cmd": "approvals"}),
    }
}

/// `approve`, `deny` or `answer`.
pub fn decide(cmd: &str, target: &str, message: Option<&str>, text: Option<&str>) -> Value {
    let mut v = json!({"cmd": cmd, "approval": target});
    if let Some(m) = message {
        v["message"] = Value::from(m);
    }
    if let Some(t) = text {
        v["text"] = Value::from(t);
    }
    v
}

pub fn hook(agent_id: &str, event: Value, wait_ms: u64) -> Value {
    json!({"cmd": "hook", "agent_id": agent_id, "event": event, "wait_ms": wait_ms})
}

pub fn hint_resume() -> Value {
    json!({"cmd": "hint", "kind": "resume"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Command, Request};

    /// Every request must be accepted by the daemon's parser.
    fn parsed(v: &Value) -> Command {
        let line = serde_json::to_vec(v).expect("encodes");
        match Request::parse(&line) {
            Ok(r) => r.command,
            Err((_, e)) => panic!("daemon would refuse {v}: {e}"),
        }
    }

    #[test]
    fn spawn_carries_every_option_in_wire_form() {
        let mut env = BTreeMap::new();
        env.insert("K".to_string(), "v=1".to_string());
        let req = SpawnRequest {
            argv: vec!["pi".into(), "--mode".into(), "json".into()],
            runtime: Some(Runtime::Pi),
            name: Some("w1".into()),
            cwd: Some("/repo".into()),
            env,
            stall_after: Some("90s".into()),
            restart: Some("on-failure".into()),
            max_restarts: Some(3),
            jail: Some("agents1".into()),
            user: Some("agent".into()),
        };
        let Command::SpawnAgent(a) = parsed(&spawn(&req)) else {
            panic!("not a spawn")
        };
        assert_eq!(a.argv, Some(req.argv.clone()));
        assert_eq!(a.runtime, Some(Runtime::Pi));
        assert_eq!(a.name.as_deref(), Some("w1"));
        assert_eq!(a.cwd.as_deref(), Some("/repo"));
        assert_eq!(
            a.env.as_ref().and_then(|e| e.get("K")).map(String::as_str),
            Some("v=1")
        );
        assert_eq!(
            a.stall_after.map(|d| d.0),
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(a.restart.as_deref(), Some("on-failure"));
        assert_eq!(a.max_restarts, Some(3));
        assert_eq!(a.jail.as_deref(), Some("agents1"));
        assert_eq!(a.user.as_deref(), Some("agent"));
        // Absent options are omitted, not sent as null.
        let bare = spawn(&SpawnRequest {
            argv: vec!["x".into()],
            ..SpawnRequest::default()
        });
        assert_eq!(bare, json!({"cmd":"spawn-agent","argv":["x"]}));
    }

    #[test]
    fn simple_commands_parse_as_the_daemon_expects() {
        assert_eq!(parsed(&status()), Command::Status);
        assert_eq!(parsed(&list_sessions()), Command::ListSessions);
        assert!(
            matches!(parsed(&snapshot("v2")), Command::Snapshot(a) if a.schema.as_deref() == Some("v2"))
        );
        assert!(
            matches!(parsed(&agent("kill-agent", "w1")), Command::KillAgent(a) if a.agent_id == "w1")
        );
        assert!(matches!(
            parsed(&agent("pause-agent", "w1")),
            Command::PauseAgent(_)
        ));
        assert!(matches!(
            parsed(&agent("resume-agent", "w1")),
            Command::ResumeAgent(_)
        ));
        assert!(matches!(parsed(&get_session("s")), Command::GetSession(a) if a.session_id == "s"));
        assert!(matches!(
            parsed(&compact_session("s")),
            Command::CompactSession(_)
        ));
        assert!(matches!(parsed(&hint_resume()), Command::Hint(a) if a.kind == "resume"));
        assert!(matches!(parsed(&watch(&[])), Command::Watch(a) if a.panes.is_none()));
        assert!(
            matches!(parsed(&watch(&["a".into()])), Command::Watch(a) if a.panes == Some(vec!["a".into()]))
        );
    }

    #[test]
    fn signal_input_and_emit_keep_their_types() {
        assert!(
            matches!(parsed(&signal("w", "15")), Command::SignalAgent(a) if a.signal == json!(15))
        );
        assert!(
            matches!(parsed(&signal("w", "TERM")), Command::SignalAgent(a) if a.signal == json!("TERM"))
        );
        assert!(matches!(
            parsed(&send_input("w", "yes", false)),
            Command::SendInput(a) if a.text == "yes" && a.newline == Some(false)
        ));
        let ev = json!({"hook_event_name":"Stop"});
        assert!(matches!(parsed(&emit("w", ev.clone())), Command::Emit(a) if a.event == ev));
    }
}
