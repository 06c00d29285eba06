//! Repository invariants that code review would otherwise have to catch:
//! every socket command and watch event is documented in docs/PROTOCOL.md,
//! and `cfg(target_os)` appears only under src/platform/.

use colibri::core::state::AgentState;
use colibri::protocol::{ErrorCode, WatchKind, COMMAND_NAMES};

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

#[test]
fn every_error_code_is_documented() {
    let doc = read("docs/PROTOCOL.md");
    for code in ErrorCode::ALL {
        let wire = serde_json::to_value(code).expect("serialises");
        assert_eq!(wire, serde_json::json!(code.as_str()));
        assert!(
            doc.contains(&format!("| `{}` |", code.as_str())),
            "docs/PROTOCOL.md has no row for error code `{}`",
            code.as_str()
        );
    }
}

/// Reply shapes are typed in `protocol`; the daemon builds none by hand.
/// The session store's `get-session` dump (a `Value` tree) is the one
/// exception left, until the store's reader is reworked.
#[test]
fn no_json_macro_in_the_daemon_outside_tests() {
    let mut offenders = Vec::new();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src/daemon");
    let mut stack = vec![std::path::PathBuf::from(root)];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/daemon").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !path.ends_with("store") {
                    stack.push(path);
                }
                continue;
            }
            if path.ends_with("store.rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Test modules come last in every file.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            if code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains("json!"))
            {
                offenders.push(path.display().to_string());
            }
        }
    }
    assert!(files > 10, "read only {files} files under src/daemon");
    assert!(
        offenders.is_empty(),
        "json! outside tests in: {offenders:?}"
    );
}
