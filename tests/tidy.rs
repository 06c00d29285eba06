//! Repository invariants that code review would otherwise have to catch:
//! every socket command and watch event is documented in docs/PROTOCOL.md
//! (and the jail sockets' list is the agent scope's),
//! `cfg(target_os)` appears only under src/platform/, the core stays pure,
//! the top-level modules import each other without a circle, and
//! colibri.toml(5) marks exactly the keys SIGHUP reloads.

use colibri::core::state::AgentState;
use colibri::protocol::{
    CommandScope, ErrorCode, WatchKind, WireApproval, COMMANDS, COMMAND_NAMES,
};

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

/// The "Jail sockets" section lists exactly the commands an agent socket
/// serves: what the daemon's scope check lets through, and nothing else.
#[test]
fn the_jail_socket_section_lists_exactly_the_agent_commands() {
    let doc = read("docs/PROTOCOL.md");
    let start = doc
        .find("## Jail sockets")
        .expect("docs/PROTOCOL.md has a Jail sockets section");
    let section = &doc[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let section = &section[..end];
    for info in COMMANDS {
        let named = section.contains(&format!("`{}`", info.name));
        match info.scope {
            CommandScope::Agent => assert!(
                named,
                "docs/PROTOCOL.md, Jail sockets: `{}` is served there but not listed",
                info.name
            ),
            CommandScope::Operator => assert!(
                !named,
                "docs/PROTOCOL.md, Jail sockets: `{}` is listed but refused there",
                info.name
            ),
        }
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
            runtime: None,
        },
        WatchKind::Runtime {
            pane: p(),
            runtime: colibri::core::taxonomy::Runtime::Pi,
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
        WatchKind::PauseBroken {
            pane: p(),
            reason: p(),
        },
        WatchKind::Resumed { pane: p() },
        WatchKind::Exited {
            pane: p(),
            code: Some(0),
            signal: None,
            planned: false,
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
        WatchKind::Task {
            task_id: 1,
            status: colibri::core::tasks::TaskStatus::Claimed,
            pane: Some(p()),
        },
        WatchKind::TaskCompleted {
            pane: p(),
            task_id: Some(1),
            message: None,
            tokens: None,
        },
        WatchKind::ApprovalRequest {
            pane: p(),
            task_id: None,
            message: None,
            detail: None,
            tokens: None,
        },
        WatchKind::AgentError {
            pane: p(),
            task_id: None,
            message: None,
            detail: None,
            tokens: None,
        },
        WatchKind::Gap {
            since: 1,
            resumes_at: 9,
        },
        WatchKind::Removed { pane: p() },
        WatchKind::ApprovalOpened {
            pane: p(),
            approval: Box::new(WireApproval {
                id: p(),
                pane: p(),
                name: None,
                kind: p(),
                channel: p(),
                question: p(),
                tool: None,
                summary: None,
                title: None,
                message: None,
                options: Vec::new(),
                asked_at: p(),
                expires_at: None,
                escalated: false,
                task_id: None,
                estimated_tokens: None,
            }),
        },
        WatchKind::ApprovalAnswered {
            pane: p(),
            approval: p(),
            decision: p(),
            message: None,
            text: None,
            by: p(),
        },
        WatchKind::ApprovalExpired {
            pane: p(),
            approval: p(),
            reason: p(),
        },
        WatchKind::ApprovalEscalated {
            pane: p(),
            approval: p(),
            pending_ms: 1,
        },
        WatchKind::Verdict {
            pane: p(),
            verdict: colibri::protocol::WireVerdict {
                line: 1,
                policy: colibri::core::policy::PolicyKind::Guard,
                rule: "rm_outside_cwd".into(),
                action: "pause".into(),
                target: "pane".into(),
                until: None,
                text: None,
                reason: p(),
                path: None,
            },
        },
        WatchKind::Hostop {
            pane: Some(p()),
            op: p(),
            by: p(),
            params: Default::default(),
            outcome: "ok".into(),
            exit_code: Some(0),
            signal: None,
            ms: 1,
            output_bytes: 1,
        },
    ];
    for k in &all {
        match k {
            WatchKind::Attached { .. }
            | WatchKind::Runtime { .. }
            | WatchKind::State { .. }
            | WatchKind::Stalled { .. }
            | WatchKind::Unstalled { .. }
            | WatchKind::Paused { .. }
            | WatchKind::PauseBroken { .. }
            | WatchKind::Resumed { .. }
            | WatchKind::Exited { .. }
            | WatchKind::RestartScheduled { .. }
            | WatchKind::Restarted { .. }
            | WatchKind::RestartsExhausted { .. }
            | WatchKind::Heartbeat { .. }
            | WatchKind::Task { .. }
            | WatchKind::TaskCompleted { .. }
            | WatchKind::ApprovalRequest { .. }
            | WatchKind::AgentError { .. }
            | WatchKind::Gap { .. }
            | WatchKind::Removed { .. }
            | WatchKind::ApprovalOpened { .. }
            | WatchKind::ApprovalAnswered { .. }
            | WatchKind::ApprovalExpired { .. }
            | WatchKind::ApprovalEscalated { .. }
            | WatchKind::Verdict { .. }
            | WatchKind::Hostop { .. } => {}
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

/// Every `.rs` file under `src/<dir>` (or the file `src/<dir>.rs`), with its
/// code lines: comment lines dropped, so prose may name what code may not use.
fn rust_sources_in(dir: &str) -> Vec<(String, Vec<String>)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![root.join(dir)];
    let file = root.join(format!("{dir}.rs"));
    if file.is_file() {
        stack.push(file);
    }
    let mut out = Vec::new();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            stack.extend(entries.flatten().map(|e| e.path()));
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let code = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(str::to_owned)
            .collect();
        let shown = path.strip_prefix(&root).unwrap_or(&path);
        out.push((format!("src/{}", shown.display()), code));
    }
    assert!(!out.is_empty(), "no Rust sources under src/{dir}");
    out
}

/// Whether `word` occurs in `line` as a whole identifier path segment.
fn mentions_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let before = line[..i].chars().next_back().is_none_or(|c| !ident(c));
        let after = line[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !ident(c));
        before && after
    })
}

/// The core decides; it never does I/O, calls the OS or reads a clock (time
/// is an argument), so it can be tested and replayed deterministically.
#[test]
fn the_core_does_no_io_and_reads_no_clock() {
    // Paths that mean I/O, OS calls, clocks or the daemon. The core needs
    // none, not even `std::io::Write`: it returns values.
    const DENIED: [&str; 14] = [
        "std::fs",
        "std::io",
        "std::net",
        "std::os",
        "std::process",
        "std::thread",
        "std::env",
        "SystemTime::now",
        "Instant::now",
        "crate::daemon",
        "crate::platform",
        "crate::config",
        "mio::",
        "tokio",
    ];
    const DENIED_CRATES: [&str; 2] = ["libc", "nix"];
    // `use std::{fs, io::Read}` names a module without `std::fs`.
    const DENIED_IN_GROUPS: [&str; 7] = ["fs", "io", "net", "os", "process", "thread", "env"];
    let mut offenders = Vec::new();
    for (file, code) in rust_sources_in("core") {
        let joined: String = code.join(" ");
        for line in &code {
            for denied in DENIED {
                if line.contains(denied) {
                    offenders.push(format!("{file}: `{denied}` in {:?}", line.trim()));
                }
            }
            for krate in DENIED_CRATES {
                if mentions_word(line, krate) {
                    offenders.push(format!("{file}: `{krate}` in {:?}", line.trim()));
                }
            }
        }
        let flat: String = joined.split_whitespace().collect();
        for group in flat.split("std::{").skip(1) {
            let items = group.split('}').next().unwrap_or("");
            for item in items.split(',') {
                let module = item.split("::").next().unwrap_or("");
                if DENIED_IN_GROUPS.contains(&module) {
                    offenders.push(format!("{file}: `std::{{{module}, ..}}`"));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "src/core/ must stay pure:\n{}",
        offenders.join("\n")
    );
}

/// The parts picture as data: each top-level module of src/ and the modules
/// it may import (`crate::NAME`). A new edge fails here until someone adds
/// it to this table (and to docs/ARCHITECTURE.md's picture), so a layer
/// never grows an upward arrow by accident: `config` once imported
/// `daemon::alert` while the daemon imported `config`, and the daemon once
/// imported the CLI's text escaper.
const ALLOWED_IMPORTS: &[(&str, &[&str])] = &[
    // Leaves.
    ("core", &[]),
    ("syslog", &[]),
    ("terminal_text", &[]),
    // The wire and the OS edge sit on the core.
    ("protocol", &["core"]),
    ("platform", &["core"]),
    ("config", &["core", "platform", "syslog"]),
    ("fold", &["core", "protocol"]),
    // colibrid.
    (
        "daemon",
        &[
            "core",
            "protocol",
            "platform",
            "config",
            "syslog",
            "terminal_text",
        ],
    ),
    // Clients of the wire.
    ("client", &["protocol"]),
    ("web", &["client", "protocol", "config"]),
    (
        "cli",
        &[
            "client",
            "protocol",
            "core",
            "config",
            "fold",
            "terminal_text",
            "web",
            "platform",
        ],
    ),
];

/// Modules that must never import each other, whatever the table says.
const NEVER: &[(&str, &str)] = &[
    ("core", "daemon"),
    ("core", "platform"),
    ("core", "protocol"),
    ("core", "config"),
    ("protocol", "daemon"),
    ("config", "daemon"),
    ("platform", "daemon"),
    ("client", "daemon"),
    ("cli", "daemon"),
    ("web", "daemon"),
    ("daemon", "cli"),
    ("daemon", "web"),
    ("daemon", "client"),
];

/// Which top-level modules each module's code names (`crate::NAME`).
fn imports_of(
    modules: &[&'static str],
) -> std::collections::BTreeMap<&'static str, std::collections::BTreeSet<&'static str>> {
    let mut imports: std::collections::BTreeMap<_, std::collections::BTreeSet<_>> =
        Default::default();
    for &module in modules {
        let deps = imports.entry(module).or_default();
        for (_, code) in rust_sources_in(module) {
            for line in &code {
                for &other in modules {
                    let path = format!("crate::{other}");
                    if other != module
                        && line.match_indices(&path).any(|(i, _)| {
                            !line[i + path.len()..]
                                .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                        })
                    {
                        deps.insert(other);
                    }
                }
            }
        }
    }
    imports
}

#[test]
fn top_level_modules_import_only_what_the_parts_picture_allows() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: Vec<&'static str> = ALLOWED_IMPORTS.iter().map(|(m, _)| *m).collect();
    // Every module of src/ is on the picture (the binaries are not modules).
    for entry in std::fs::read_dir(&src).expect("read src").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        if ["lib", "bin"].contains(&module) {
            continue;
        }
        assert!(
            modules.contains(&module),
            "src/{name} is not on the parts picture: add it to ALLOWED_IMPORTS"
        );
    }
    let imports = imports_of(&modules);
    let mut offenders = Vec::new();
    for (module, allowed) in ALLOWED_IMPORTS {
        for dep in &imports[module] {
            if !allowed.contains(dep) {
                offenders.push(format!("{module} -> {dep} is not on the picture"));
            }
        }
    }
    for (from, to) in NEVER {
        if imports[from].contains(to) {
            offenders.push(format!("{from} -> {to} must never be"));
        }
        let allowed = ALLOWED_IMPORTS.iter().find(|(m, _)| m == from);
        assert!(
            allowed.is_some_and(|(_, deps)| !deps.contains(to)),
            "ALLOWED_IMPORTS allows {from} -> {to}, which NEVER forbids"
        );
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
    // The table itself has no circle: depth-first search for a back edge.
    fn visit<'a>(
        m: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) {
        if let Some(start) = path.iter().position(|p| *p == m) {
            panic!("import circle: {} -> {m}", path[start..].join(" -> "));
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        let deps = ALLOWED_IMPORTS
            .iter()
            .find(|(name, _)| *name == m)
            .map_or(&[][..], |(_, deps)| *deps);
        for dep in deps {
            visit(dep, path, done);
        }
        path.pop();
    }
    let mut done = Default::default();
    for module in &modules {
        visit(module, &mut Vec::new(), &mut done);
    }
}

/// colibri.toml(5) marks with `reload` exactly the keys SIGHUP applies.
#[test]
fn the_reload_marks_in_colibri_toml_5_match_the_code() {
    let man = read("man/colibri.toml.5");
    let mut section = String::new();
    let mut checked = 0;
    for line in man.lines() {
        if let Some(name) = line.strip_prefix(".Ss [") {
            section = name.trim_end_matches(']').to_owned();
            continue;
        }
        let Some(item) = line.strip_prefix(".It Ic ") else {
            continue;
        };
        if !["daemon", "syslog", "sessions", "restart"].contains(&section.as_str()) {
            continue;
        }
        let key = format!("{section}.{}", item.split_whitespace().next().unwrap_or(""));
        let marked = item.contains(", reload") || item.ends_with("reload");
        assert_eq!(
            marked,
            colibri::config::is_reloadable(&key),
            "colibri.toml(5) {} `{key}` as reloaded on SIGHUP; config::RELOADABLE_KEYS does {}",
            if marked { "marks" } else { "does not mark" },
            if marked { "not" } else { "" }
        );
        checked += 1;
    }
    assert!(checked > 20, "only {checked} keys found in colibri.toml(5)");
    assert!(colibri::config::is_reloadable("providers.any"));
    assert!(!colibri::config::is_reloadable("jails.any"));
}
#[test]
fn every_error_code_is_documented() {
    let doc = read("docs/PROTOCOL.md");
    for code in ErrorCode::ALL {
        let wire = serde_json::to_value(code).expect("serialises");
        assert_eq!(wire, serde_json::json!(code.as_str()));
        // A table row whatever its padding (Prettier aligns the columns).
        let cell = format!("| `{}`", code.as_str());
        let has_row = doc.lines().any(|l| {
            l.strip_prefix(cell.as_str())
                .is_some_and(|rest| rest.trim_start().starts_with('|'))
        });
        assert!(
            has_row,
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

/// The code lines of every `.rs` file under src/, test modules left out (a
/// `#[cfg(test)] mod` runs to the end of its file here, and `tests.rs` files
/// are test modules).
fn production_sources() -> Vec<(String, Vec<String>)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&src).expect("read src").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
        if module == "lib" {
            continue;
        }
        for (file, code) in rust_sources_in(&module) {
            if file.ends_with("/tests.rs") {
                continue;
            }
            let end = code
                .windows(2)
                .position(|w| {
                    w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod ")
                })
                .unwrap_or(code.len());
            out.push((file, code[..end].to_vec()));
        }
    }
    out
}

/// `core` is public (fold, the fixtures and the property tests use it), so
/// the compiler's dead-code lint never sees its functions: a `pub fn` that
/// only its own tests call would live on as a twin of the real one (as
/// `after_exit` did beside `plan_restart`). Every `pub fn` under src/core/
/// must be named by production code somewhere other than its definition.
#[test]
fn every_pub_fn_in_the_core_is_used_outside_tests() {
    let sources = production_sources();
    let mut unused = Vec::new();
    for (file, code) in sources.iter().filter(|(f, _)| f.starts_with("src/core/")) {
        for (i, line) in code.iter().enumerate() {
            let Some(rest) = line.trim_start().strip_prefix("pub fn ") else {
                continue;
            };
            // A test helper shared across modules says so.
            if i > 0 && code[i - 1].trim() == "#[cfg(test)]" {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let uses = sources
                .iter()
                .flat_map(|(_, code)| code)
                .filter(|l| mentions_word(l, &name))
                .count();
            // One mention is the definition itself.
            if uses < 2 {
                unused.push(format!("{file}: pub fn {name}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "pub fns in src/core/ that only tests use (delete them, or make them #[cfg(test)]):\n{}",
        unused.join("\n")
    );
}

/// Tests read process facts (fds, children, RSS, CPU time, liveness) only
/// through `colibri::platform`'s probes, which read `/proc` on Linux and
/// `kern.proc` on FreeBSD and fail when they cannot measure. A test that
/// read `/proc` itself would pass on FreeBSD measuring nothing.
#[test]
fn no_code_outside_the_platform_reads_proc() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    let mut stack = vec![root.join("src"), root.join("tests")];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if path.ends_with("platform") {
                continue;
            }
            let entries = std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            stack.extend(entries.flatten().map(|e| e.path()));
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") || path.ends_with("tidy.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") && line.contains("\"/proc") {
                offenders.push(format!("{}:{}", path.display(), n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "/proc read outside src/platform (use the platform probes): {offenders:?}"
    );
}

/// Each daemon module (`panes`, `attach::ring`; `""` for `mod.rs`) with its
/// file and its code: comments and the trailing `#[cfg(test)]` module
/// left out (tests may build a daemon; the code under test may not).
fn daemon_modules() -> std::collections::BTreeMap<String, (String, Vec<String>)> {
    let mut out = std::collections::BTreeMap::new();
    for (file, code) in rust_sources_in("daemon") {
        let rel = file
            .trim_start_matches("src/daemon")
            .trim_start_matches('/')
            .trim_end_matches(".rs");
        if rel == "tests" || rel.ends_with("/tests") {
            continue;
        }
        let module = if rel.is_empty() || rel == "mod" {
            String::new()
        } else {
            rel.replace('/', "::")
        };
        let code: Vec<String> = code
            .into_iter()
            .take_while(|l| l.trim() != "#[cfg(test)]")
            .map(|l| match l.find(" //") {
                Some(i) if !l[..i].contains('"') => l[..i].to_string(),
                _ => l,
            })
            .collect();
        out.insert(module, (file, code));
    }
    out
}

/// The daemon modules `code` (in `module`) imports: `crate::daemon::a::b`
/// and `super::x` paths, each resolved to the longest module it names.
fn daemon_imports(
    module: &str,
    code: &[String],
    modules: &std::collections::BTreeMap<String, (String, Vec<String>)>,
) -> std::collections::BTreeSet<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut deps = std::collections::BTreeSet::new();
    for line in code {
        for (prefix, base) in [("crate::daemon::", ""), ("super::", parent)] {
            for (i, _) in line.match_indices(prefix) {
                if prefix == "super::"
                    && line[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
                {
                    continue;
                }
                let mut found = base.to_string();
                let mut at = base.to_string();
                for seg in line[i + prefix.len()..].split("::") {
                    let seg: String = seg
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if seg.is_empty() {
                        break;
                    }
                    at = if at.is_empty() {
                        seg
                    } else {
                        format!("{at}::{seg}")
                    };
                    if !modules.contains_key(&at) {
                        break;
                    }
                    found = at.clone();
                }
                if found != module {
                    deps.insert(found);
                }
            }
        }
    }
    deps
}

/// The owners below the daemon's verbs: every daemon module that defines
/// a type stored in a `Daemon` field, what those import from the daemon,
/// and their child modules (`store/*`), closed under both. `event_loop`
/// itself is the daemon (its `Listener` and `RunState` are its own).
fn daemon_owners(
    modules: &std::collections::BTreeMap<String, (String, Vec<String>)>,
) -> std::collections::BTreeSet<String> {
    let event_loop = read("src/daemon/event_loop.rs");
    let start = event_loop
        .find("pub struct Daemon {")
        .expect("`pub struct Daemon {` in event_loop.rs");
    let body = &event_loop[start..];
    let body = &body[..body.find("\n}").expect("the end of `struct Daemon`")];
    let mut types = std::collections::BTreeSet::new();
    for line in body.lines().skip(1) {
        let line = line.trim();
        if line.starts_with("//") {
            continue;
        }
        let Some((_, ty)) = line.split_once(':') else {
            continue;
        };
        for word in ty.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.starts_with(|c: char| c.is_ascii_uppercase()) {
                types.insert(word.to_string());
            }
        }
    }
    let mut owners = std::collections::BTreeSet::new();
    for (module, (_, code)) in modules {
        if module == "event_loop" {
            continue;
        }
        let defines = |ty: &str| {
            code.iter().any(|l| {
                ["struct", "enum"].iter().any(|kw| {
                    mentions_word(l, &format!("{kw} {ty}")) || l.contains(&format!("{kw} {ty}<"))
                })
            })
        };
        if types.iter().any(|ty| defines(ty)) {
            owners.insert(module.clone());
        }
    }
    loop {
        let mut more = std::collections::BTreeSet::new();
        for owner in &owners {
            more.extend(daemon_imports(owner, &modules[owner].1, modules));
            let child = format!("{owner}::");
            more.extend(modules.keys().filter(|m| m.starts_with(&child)).cloned());
        }
        if more.is_subset(&owners) {
            return owners;
        }
        owners.extend(more);
    }
}

/// Owners never name the daemon: a file that holds both a type stored in a
/// `Daemon` field and `impl Daemon` code put the pane table, the bus and
/// the connection in the daemon's import circle (review 3, §2), so none
/// could be read or tested alone. Their verbs live in other files.
#[test]
fn daemon_owners_never_name_the_daemon() {
    // Owners allowed to name `Daemon` for now, with why. Empty: keep it so.
    const ALLOWED: &[(&str, &str)] = &[];
    let modules = daemon_modules();
    let owners = daemon_owners(&modules);
    let mut offenders = Vec::new();
    for owner in &owners {
        let (file, code) = &modules[owner];
        if ALLOWED.iter().any(|(m, _)| m == owner) {
            continue;
        }
        if let Some(line) = code.iter().find(|l| mentions_word(l, "Daemon")) {
            offenders.push(format!("{file}: {:?}", line.trim()));
        }
    }
    let files: Vec<&str> = owners.iter().map(|m| modules[m].0.as_str()).collect();
    assert!(
        offenders.is_empty(),
        "owner files name `Daemon` (move the verb to an `impl Daemon` file, or pass the owner what it needs):\n{}\nowner files: {}",
        offenders.join("\n"),
        files.join(" ")
    );
}

/// The owners import each other without a circle: they are a layer below
/// the verbs, each readable from the ones it imports.
#[test]
fn daemon_owners_import_each_other_without_a_circle() {
    let modules = daemon_modules();
    let owners = daemon_owners(&modules);
    let imports: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> = owners
        .iter()
        .map(|m| {
            let deps = daemon_imports(m, &modules[m].1, &modules);
            (
                m.as_str(),
                deps.into_iter().filter(|d| owners.contains(d)).collect(),
            )
        })
        .collect();
    fn visit<'a>(
        m: &'a str,
        imports: &'a std::collections::BTreeMap<&'a str, std::collections::BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) {
        if let Some(start) = path.iter().position(|p| *p == m) {
            panic!(
                "import circle among the daemon's owners: {} -> {m}",
                path[start..].join(" -> ")
            );
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        for dep in &imports[m] {
            visit(dep, imports, path, done);
        }
        path.pop();
    }
    let mut done = Default::default();
    for owner in imports.keys() {
        visit(owner, &imports, &mut Vec::new(), &mut done);
    }
}

/// Claude Code's terminal starts in "auto" permission mode with a fresh
/// configuration (2.1.332) and then never sends `PermissionRequest`: every
/// place that tells users to wire `colibri hook` must say to start it with
/// `--permission-mode default`.
#[test]
fn every_hook_wiring_note_says_to_start_claude_in_the_default_permission_mode() {
    for (path, needle) in [
        ("README.md", "--permission-mode default"),
        ("docs/TAXONOMY.md", "--permission-mode default"),
        ("docs/GOVERNANCE.md", "--permission-mode default"),
        ("man/colibri.1", ".Fl -permission-mode Cm default"),
    ] {
        assert!(
            read(path).contains(needle),
            "{path} tells how to wire the PermissionRequest hook without {needle:?}"
        );
    }
}
