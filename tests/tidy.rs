//! Repository invariants that code review would otherwise have to catch:
//! every socket command and watch event is documented in docs/PROTOCOL.md,
//! and `cfg(target_os)` appears only under src/platform/.

use colibri::core::state::AgentState;
use colibri::protocol::{WatchKind, COMMAND_NAMES};

fn read(path: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_command_has_a_section_in_protocol_md() {
    let doc = read("docs/PROTOCOL.md");
    for cmd in COMMAND_NAMES {
        let heading = doc
            .lines()
            .any(|l| l.starts_with('#') && l.contains(&format!("`{cmd}`")));
        assert!(heading, "docs/PROTOCOL.md has no heading for `{cmd}`");
        assert!(
            doc.contains(&format!("\"cmd\":\"{cmd}\"")),
            "docs/PROTOCOL.md has no example request for `{cmd}`"
        );
    }
}

/// One value of every watch event; adding a variant fails to compile here
/// until it is listed (and therefore documented).
fn every_watch_kind() -> Vec<WatchKind> {
    let p = || "p".to_string();
    let all = vec![
        WatchKind::Attached {
            pane: p(),
            agent: p(),
            name: None,
            pid: None,
        },
        WatchKind::State {
            pane: p(),
            from: AgentState::Idle,
            to: AgentState::Working,
            reason: None,
        },
        WatchKind::Stalled {
            pane: p(),
            silent_ms: 1,
        },
        WatchKind::Unstalled { pane: p() },
        WatchKind::Paused { pane: p() },
        WatchKind::Resumed { pane: p() },
        WatchKind::Exited {
            pane: p(),
            code: Some(0),
            signal: None,
        },
        WatchKind::RestartScheduled {
            pane: p(),
            attempt: 1,
            next_at: p(),
        },
        WatchKind::Restarted {
            pane: p(),
            generation: 1,
            pid: 1,
        },
        WatchKind::RestartsExhausted {
            pane: p(),
            attempts: 3,
        },
        WatchKind::Heartbeat { panes: 0 },
    ];
    for k in &all {
        match k {
            WatchKind::Attached { .. }
            | WatchKind::State { .. }
            | WatchKind::Stalled { .. }
            | WatchKind::Unstalled { .. }
            | WatchKind::Paused { .. }
            | WatchKind::Resumed { .. }
            | WatchKind::Exited { .. }
            | WatchKind::RestartScheduled { .. }
            | WatchKind::Restarted { .. }
            | WatchKind::RestartsExhausted { .. }
            | WatchKind::Heartbeat { .. } => {}
        }
    }
    all
}

#[test]
fn every_watch_event_is_documented() {
    let doc = read("docs/PROTOCOL.md");
    for k in every_watch_kind() {
        let v = serde_json::to_value(&k).expect("serialises");
        let name = v["event"].as_str().expect("event name").to_string();
        assert!(
            doc.contains(&format!("\"event\":\"{name}\"")),
            "docs/PROTOCOL.md shows no `{name}` event"
        );
    }
}

#[test]
fn target_os_cfg_lives_only_in_platform() {
    let mut offenders = Vec::new();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut stack = vec![std::path::PathBuf::from(root)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !path.ends_with("platform") {
                    stack.push(path);
                }
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            if code
                .into_iter()
                .any(|l| l.contains("cfg(target_os") || l.contains("cfg!(target_os"))
            {
                offenders.push(path.display().to_string());
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "cfg(target_os) outside src/platform: {offenders:?}"
    );
}
