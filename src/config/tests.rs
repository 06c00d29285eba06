//! The configuration's unit tests: layers, validation, rendering, reload.

use super::*;
use crate::core::spec::RestartPolicy;
use crate::core::taxonomy::Runtime;
use crate::syslog::facility_name;
use clap::Parser as _;

fn parse(text: &str) -> Result<Layer, ConfigError> {
    parse_file(Path::new("/etc/colibri.toml"), text)
}

fn parse_err(text: &str) -> ConfigError {
    match parse(text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

fn resolve(args: &DaemonArgs, file: Option<(&Path, &Layer)>) -> Result<Config, ConfigError> {
    let source = file.map(|(path, _)| path.to_path_buf());
    let file = file.map(|(_, layer)| layer.clone()).unwrap_or_default();
    args.layer().or(file).resolve(source)
}

fn resolve_with(args: &DaemonArgs, file: Option<&Layer>) -> Config {
    let path = Path::new("/etc/colibri.toml");
    resolve(args, file.map(|f| (path, f))).expect("resolves")
}

#[test]
fn defaults_match_the_spec() {
    let config = resolve_with(&DaemonArgs::default(), None);
    let d = &config.daemon;
    assert_eq!(config.source, None);
    assert_eq!(d.socket, Path::new("/var/run/colibri/colibri.sock"));
    assert_eq!(d.socket_mode, 0o660);
    assert_eq!(d.socket_group, None);
    assert_eq!(d.state_dir, Path::new("/var/db/colibri"));
    assert_eq!(d.host, system_hostname());
    assert_eq!(d.stall_after, Duration::from_secs(600));
    assert_eq!(d.heartbeat, Duration::from_secs(30));
    assert_eq!(d.shutdown_grace, Duration::from_secs(5));
    assert_eq!(d.max_line, 1_048_576);
    assert_eq!(d.max_request, 1_048_576);
    assert_eq!(d.max_connections, 256);
    assert_eq!(d.log_level, LogLevel::Info);
    assert_eq!(
        d.agent_path,
        "/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin"
    );
    let s = &config.syslog;
    assert!(s.enabled);
    assert_eq!(s.socket, None);
    assert_eq!(facility_name(s.facility), "daemon");
    assert_eq!(s.min_level, Severity::Info);
    assert_eq!(s.rate_burst, 5);
    assert_eq!(s.rate_window, Duration::from_secs(60));
    assert_eq!(
        config.sessions,
        SessionsSection {
            rotate_bytes: 67_108_864,
            rotate_turns: 500,
            flush_budget: 4_194_304,
            buffer_limit: 8_388_608,
            retain: Duration::ZERO,
        }
    );
    let minutes: Vec<u64> = config
        .restart
        .backoff
        .iter()
        .map(|d| d.as_secs() / 60)
        .collect();
    assert_eq!(minutes, [1, 5, 15, 30, 60]);
    assert_eq!(config.restart.max_restarts, 5);
    assert_eq!(
        config.providers.keys().collect::<Vec<_>>(),
        ["anthropic", "deepseek", "openrouter"]
    );
    assert_eq!(
        config.providers["openrouter"].argv,
        [
            "pi",
            "--mode",
            "rpc",
            "--provider",
            "openrouter",
            "--model",
            "{model}"
        ]
    );
    assert!(config.jails.is_empty());
    let alert = &config.syslog;
    assert!(alert.enabled);
    assert_eq!(alert.min_level, Severity::Info);
    assert_eq!(alert.rate_burst, 5);
}

#[test]
fn sample_config_from_the_spec_loads() {
    let file = parse(
        r#"
[daemon]
socket = "/tmp/c.sock"
socket_mode = "0640"
socket_group = "colibri"
state_dir = "/tmp/state"
host = "buildbox"
stall_after = "90s"
heartbeat = "15s"
shutdown_grace = "2s"
max_line = 4096
max_request = 8192
max_connections = 8
log_level = "debug"

[syslog]
enabled = true
socket = "/var/run/log"
facility = "local3"
level = "notice"
rate_burst = 2
rate_window = "30s"

[sessions]
rotate_bytes = 1000
rotate_turns = 10
flush_budget = 100
buffer_limit = 200

[restart]
backoff = ["1s", "2m"]
max_restarts = 3

[providers.deepseek]
argv = ["pi", "--provider", "deepseek", "--model", "{model}"]

[providers.local]
argv = ["ollama-agent", "{model}"]

[jails.agents1]
socket = "/var/run/colibri/jails/agents1/colibri.sock"

[jails.agents2]
"#,
    )
    .expect("sample parses");
    let config = resolve_with(&DaemonArgs::default(), Some(&file));
    assert_eq!(
        config.source.as_deref(),
        Some(Path::new("/etc/colibri.toml"))
    );
    assert_eq!(config.daemon.socket_mode, 0o640);
    assert_eq!(config.daemon.socket_group.as_deref(), Some("colibri"));
    assert_eq!(config.daemon.host, "buildbox");
    assert_eq!(config.daemon.stall_after, Duration::from_secs(90));
    assert_eq!(config.daemon.max_connections, 8);
    assert_eq!(config.daemon.log_level, LogLevel::Debug);
    assert_eq!(facility_name(config.syslog.facility), "local3");
    assert_eq!(config.syslog.min_level, Severity::Notice);
    assert_eq!(config.sessions.buffer_limit, 200);
    assert_eq!(
        config.restart.backoff,
        [Duration::from_secs(1), Duration::from_secs(120)]
    );
    // File providers override by name and add to the built-ins.
    assert_eq!(config.providers["deepseek"].argv[1], "--provider");
    assert_eq!(config.providers["local"].argv, ["ollama-agent", "{model}"]);
    assert!(config.providers.contains_key("anthropic"));
    assert_eq!(
        config.jails["agents2"].socket,
        Path::new("/var/run/colibri/jails/agents2/colibri.sock")
    );
    let alert = &config.syslog;
    assert_eq!(alert.socket.as_deref(), Some(Path::new("/var/run/log")));
    assert_eq!(alert.rate_window, Duration::from_secs(30));
    assert_eq!(alert.min_level, Severity::Notice);
}

#[test]
fn flag_beats_file_beats_default() {
    let file = parse(
        r#"
[daemon]
socket = "/file.sock"
state_dir = "/file/state"
stall_after = "20m"
log_level = "warn"
[syslog]
facility = "local1"
enabled = true
"#,
    )
    .expect("parses");
    let args = DaemonArgs {
        socket: Some(PathBuf::from("/flag.sock")),
        stall_after: Some(Duration::from_secs(5)),
        syslog_facility: Some(Facility::LOG_LOCAL7),
        no_syslog: true,
        ..DaemonArgs::default()
    };
    let config = resolve_with(&args, Some(&file));
    assert_eq!(config.daemon.socket, Path::new("/flag.sock"));
    assert_eq!(config.daemon.stall_after, Duration::from_secs(5));
    assert_eq!(facility_name(config.syslog.facility), "local7");
    assert!(!config.syslog.enabled);
    // Not on the command line: the file wins over the default.
    assert_eq!(config.daemon.state_dir, Path::new("/file/state"));
    assert_eq!(config.daemon.log_level, LogLevel::Warn);
    // In neither: the default.
    assert_eq!(config.daemon.heartbeat, DEFAULT_HEARTBEAT);
}

/// Runs in a child process with a controlled environment, so the test
/// neither mutates nor depends on this process's environment.
#[test]
fn env_sits_between_flag_and_file() {
    const CHILD: &str = "COLIBRI_CONFIG_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let file = parse(concat!(
            "[daemon]\n",
            "state_dir = \"/file/state\"\n",
            "log_level = \"warn\"\n",
            "host = \"filehost\"\n",
            "agent_path = \"/file/bin\"\n",
        ))
        .expect("parses");
        let args =
            DaemonArgs::try_parse_from(["colibrid", "--socket", "/flag.sock"]).expect("args parse");
        let config = resolve_with(&args, Some(&file));
        // Flag beats env.
        assert_eq!(config.daemon.socket, Path::new("/flag.sock"));
        // Env beats file.
        assert_eq!(config.daemon.state_dir, Path::new("/env/state"));
        assert_eq!(config.daemon.log_level, LogLevel::Debug);
        // File beats default.
        assert_eq!(config.daemon.host, "filehost");
        assert_eq!(config.daemon.agent_path, "/env/bin:/usr/bin");
        assert_eq!(args.config.as_deref(), Some(Path::new("/env/colibri.toml")));
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let output = std::process::Command::new(exe)
        .args([
            "--exact",
            "config::tests::env_sits_between_flag_and_file",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("COLIBRI_SOCKET", "/env.sock")
        .env("COLIBRI_STATE_DIR", "/env/state")
        .env("COLIBRI_LOG", "debug")
        .env("COLIBRI_AGENT_PATH", "/env/bin:/usr/bin")
        .env("COLIBRI_CONFIG", "/env/colibri.toml")
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn flags_parse_and_reject_bad_values() {
    let args = DaemonArgs::try_parse_from([
        "colibrid",
        "--socket-mode",
        "0600",
        "--stall-after",
        "90s",
        "--max-line",
        "4096",
        "--syslog-facility",
        "local0",
        "--alert-level",
        "warning",
        "--jail-socket",
        "a1=/run/a1.sock",
        "--jail-socket",
        "b2=/run/b2.sock",
        "--no-syslog",
        "--check-config",
    ])
    .expect("valid flags");
    assert_eq!(args.socket_mode, Some(0o600));
    assert_eq!(args.stall_after, Some(Duration::from_secs(90)));
    assert_eq!(args.max_line, Some(4096));
    assert!(matches!(args.syslog_facility, Some(Facility::LOG_LOCAL0)));
    assert_eq!(args.alert_level, Some(Severity::Warning));
    assert_eq!(args.jail_socket.len(), 2);
    assert_eq!(args.jail_socket[1].jail, "b2");
    assert!(args.no_syslog && args.check_config);
    for bad in [
        ["--socket-mode", "999"],
        ["--stall-after", "10x"],
        ["--stall-after", "0s"],
        ["--max-line", "0"],
        ["--syslog-facility", "daemons"],
        ["--alert-level", "loud"],
        ["--jail-socket", "nopath"],
        ["--jail-socket", "../x=/p"],
    ] {
        let result = DaemonArgs::try_parse_from(["colibrid", bad[0], bad[1]]);
        assert!(result.is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn jail_socket_flags_merge_with_the_file() {
    let file =
        parse("[jails.a1]\nsocket = \"/file/a1.sock\"\n[jails.b2]\nsocket = \"/file/b2.sock\"\n")
            .expect("parses");
    let args = DaemonArgs {
        jail_socket: vec![
            JailSocketArg {
                jail: "b2".into(),
                socket: "/flag/b2.sock".into(),
            },
            JailSocketArg {
                jail: "c3".into(),
                socket: "/flag/c3.sock".into(),
            },
        ],
        ..DaemonArgs::default()
    };
    let config = resolve_with(&args, Some(&file));
    let sockets: Vec<(&str, &Path)> = config
        .jails
        .iter()
        .map(|(name, l)| (name.as_str(), l.socket.as_path()))
        .collect();
    assert_eq!(
        sockets,
        [
            ("a1", Path::new("/file/a1.sock")),
            ("b2", Path::new("/flag/b2.sock")),
            ("c3", Path::new("/flag/c3.sock")),
        ]
    );
}

#[test]
fn a_jail_cannot_share_a_socket() {
    let args = DaemonArgs {
        socket: Some("/run/op.sock".into()),
        jail_socket: vec![JailSocketArg {
            jail: "a1".into(),
            socket: "/run/op.sock".into(),
        }],
        ..DaemonArgs::default()
    };
    let err = resolve(&args, None).expect_err("clash");
    assert_eq!(
        err.to_string(),
        "jails.a1.socket: /run/op.sock is also the operator socket"
    );
    let file = parse("[jails.a]\nsocket = \"/s\"\n[jails.b]\nsocket = \"/s\"\n").expect("parses");
    let err =
        resolve(&DaemonArgs::default(), Some((Path::new("/c.toml"), &file))).expect_err("clash");
    assert_eq!(
        err.to_string(),
        "/c.toml: jails.b.socket: /s is also the socket of jail \"a\""
    );
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let err = parse_err("[daemon]\nsocket = \"/x\"\n\nstal_after = \"10m\"\n");
    match &err {
        ConfigError::Syntax {
            path,
            line,
            column,
            key,
            msg,
        } => {
            assert_eq!(path, Path::new("/etc/colibri.toml"));
            assert_eq!(*line, 4);
            assert_eq!(*column, 1);
            assert_eq!(key.as_deref(), Some("daemon.stal_after"));
            assert!(msg.contains("unknown field `stal_after`"), "{msg}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err
        .to_string()
        .starts_with("/etc/colibri.toml:4:1: daemon.stal_after: unknown field `stal_after`"));

    let err = parse_err("[daemon]\n[sylog]\nenabled = false\n");
    assert!(
        err.to_string()
            .starts_with("/etc/colibri.toml:2:2: sylog: unknown field `sylog`"),
        "{err}"
    );
    let err = parse_err("[providers.x]\nargv = [\"a\"]\nenv = {}\n");
    assert!(
        err.to_string()
            .starts_with("/etc/colibri.toml:3:1: providers.x.env: unknown field `env`"),
        "{err}"
    );
}

#[test]
fn type_and_syntax_errors_name_the_line() {
    let err = parse_err("[daemon]\nmax_line = \"big\"\n");
    assert!(
        err.to_string()
            .starts_with("/etc/colibri.toml:2:12: daemon.max_line: invalid type"),
        "{err}"
    );
    let err = parse_err("[daemon]\nmax_line = -1\n");
    assert!(
        err.to_string()
            .starts_with("/etc/colibri.toml:2:12: daemon.max_line: "),
        "{err}"
    );
    let err = parse_err("[daemon]\nsocket = \"/x\n");
    match err {
        ConfigError::Syntax { line, key, .. } => {
            assert_eq!(line, 2);
            assert_eq!(key, None);
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn expect_invalid(text: &str, want_line: usize, want_key: &str, want_msg: &str) {
    let (line, key, msg) = invalid(text);
    assert_eq!(line, Some(want_line), "{text}");
    assert_eq!(key, want_key, "{text}");
    assert!(msg.contains(want_msg), "{text}: {msg}");
}

fn invalid(text: &str) -> (Option<usize>, String, String) {
    match parse_err(text) {
        ConfigError::Invalid {
            path,
            line,
            key,
            msg,
        } => {
            assert_eq!(path.as_deref(), Some(Path::new("/etc/colibri.toml")));
            (line, key, msg)
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn bad_values_name_key_and_line() {
    let text = concat!(
        "# comment\n[daemon]\nsocket = \"/x\"\nheartbeat = \"30s\"\n",
        "\n\nstall_after = \"10x\"\n",
    );
    let err = parse_err(text);
    let shown = err.to_string();
    assert!(
        shown.starts_with("/etc/colibri.toml:7: daemon.stall_after: invalid duration \"10x\": "),
        "{shown}"
    );

    expect_invalid(
        "[agents.a]\nargv = [\"x\"]\nscope = [\"/srv\", \"~/x\"]\n",
        3,
        "agents.a.scope",
        "no ~, no $",
    );
    expect_invalid(
        "[daemon]\nsocket_mode = \"999\"\n",
        2,
        "daemon.socket_mode",
        "not an octal number",
    );
    expect_invalid(
        "[daemon]\nsocket_mode = \"01777\"\n",
        2,
        "daemon.socket_mode",
        "at most 0777",
    );
    expect_invalid(
        "[daemon]\nheartbeat = \"0s\"\n",
        2,
        "daemon.heartbeat",
        "greater than zero",
    );
    expect_invalid(
        "[daemon]\nlog_level = \"chatty\"\n",
        2,
        "daemon.log_level",
        "invalid log level",
    );
    expect_invalid(
        "\n[syslog]\nfacility = \"daemons\"\n",
        3,
        "syslog.facility",
        "unknown syslog facility",
    );
    expect_invalid(
        "[syslog]\nlevel = \"loud\"\n",
        2,
        "syslog.level",
        "unknown syslog level",
    );
    expect_invalid(
        "[syslog]\nrate_burst = 0\n",
        2,
        "syslog.rate_burst",
        "out of range",
    );
    expect_invalid(
        "[restart]\nbackoff = [\"1m\",\n  \"5q\"]\n",
        3,
        "restart.backoff",
        "invalid duration \"5q\"",
    );
    expect_invalid(
        "[providers.p]\nargv = []\n",
        2,
        "providers.p.argv",
        "program name",
    );
    let (line, key, _) = invalid("[jails.\"a/b\"]\nsocket = \"/s\"\n");
    assert_eq!((line, key.as_str()), (Some(1), "jails.a/b"));
}

#[test]
fn modes_parse_as_octal() {
    assert_eq!(parse_mode("0660"), Ok(0o660));
    assert_eq!(parse_mode("660"), Ok(0o660));
    assert_eq!(parse_mode("0o600"), Ok(0o600));
    assert!(parse_mode("").is_err());
    assert!(parse_mode("0x1ff").is_err());
    let file = parse("[daemon]\nsocket_mode = 0o640\n").expect("toml octal integer");
    assert_eq!(file.daemon.socket_mode, Some(0o640));
    // A bare integer is decimal to TOML: 660 would silently be 0o1224.
    let err = parse("[daemon]\nsocket_mode = 660\n").expect_err("a decimal integer is refused");
    assert!(err.to_string().contains("write it in octal"), "{err}");
}

#[test]
fn missing_file_is_a_read_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent.toml");
    let args = DaemonArgs {
        config: Some(path.clone()),
        ..DaemonArgs::default()
    };
    match load(&args) {
        Err(ConfigError::Read { path: p, source }) => {
            assert_eq!(p, path);
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn load_reads_the_named_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("colibri.toml");
    std::fs::write(&path, "[daemon]\nheartbeat = \"7s\"\n").expect("write config");
    let args = DaemonArgs {
        config: Some(path.clone()),
        ..DaemonArgs::default()
    };
    let config = load(&args).expect("loads");
    assert_eq!(config.source.as_deref(), Some(path.as_path()));
    assert_eq!(config.daemon.heartbeat, Duration::from_secs(7));
}

#[test]
fn effective_config_renders_and_loads_back() {
    let file = parse(
        r#"
[daemon]
socket_group = "colibri"
stall_after = "90s"
[syslog]
socket = "/tmp/log"
level = "warning"
[jails.j1]
[providers.x]
argv = ["x", "{model}"]
[sessions]
retain = "90d"
"#,
    )
    .expect("parses");
    let config = resolve_with(&DaemonArgs::default(), Some(&file));
    let text = render_effective(&config);
    assert!(text.starts_with("# colibrid effective configuration (file: /etc/colibri.toml)\n"));
    assert!(text.contains("socket_mode = \"0660\""), "{text}");
    assert!(text.contains("stall_after = \"1m 30s\""), "{text}");
    // Whole days as days, not humantime's "2months 29days 2h 52m 48s".
    assert!(text.contains("retain = \"90d\""), "{text}");
    // The budgets in force, the default one included.
    assert!(
        text.contains("[budgets.output]\nbytes = 1073741824\n"),
        "{text}"
    );
    assert!(text.contains("[providers.x]"), "{text}");

    let again = parse(&text).expect("rendered config parses");
    let round = resolve_with(&DaemonArgs::default(), Some(&again));
    assert_eq!(round.governance.budgets, config.governance.budgets);
    assert_eq!(round.daemon, config.daemon);
    assert_eq!(round.sessions, config.sessions);
    assert_eq!(round.restart, config.restart);
    assert_eq!(round.providers, config.providers);
    assert_eq!(round.jails, config.jails);
    assert_eq!(round.syslog.socket, config.syslog.socket);
    assert_eq!(round.syslog.min_level, Severity::Warning);
    assert_eq!(facility_name(round.syslog.facility), "daemon");
}

/// A configuration that turned the default output budget off renders so
/// that it loads back off: a missing `[budgets.output]` would turn it on.
#[test]
fn effective_config_keeps_the_output_budget_off() {
    let file = parse("[budgets.output]\nenabled = false\n").expect("parses");
    let config = resolve_with(&DaemonArgs::default(), Some(&file));
    assert!(config.governance.budgets.is_empty());
    let text = render_effective(&config);
    let again = parse(&text).expect("rendered config parses");
    let round = resolve_with(&DaemonArgs::default(), Some(&again));
    assert!(round.governance.budgets.is_empty(), "{text}");
}

#[test]
fn every_invalid_value_in_the_file_is_reported() {
    let text = concat!(
        "[daemon]\n",
        "stall_after = \"0s\"\n",
        "socket_mode = \"999\"\n",
        "[syslog]\n",
        "level = \"loud\"\n",
    );
    let err = parse_err(text);
    let each: Vec<String> = err.each().iter().map(|e| e.to_string()).collect();
    assert_eq!(each.len(), 3, "{each:#?}");
    assert!(
        each[0].starts_with("/etc/colibri.toml:2: daemon.stall_after: "),
        "{each:#?}"
    );
    assert!(each[0].contains("greater than zero"), "{each:#?}");
    assert!(
        each[1].starts_with("/etc/colibri.toml:3: daemon.socket_mode: "),
        "{each:#?}"
    );
    assert!(
        each[2].starts_with("/etc/colibri.toml:5: syslog.level: "),
        "{each:#?}"
    );
    assert_eq!(err.to_string(), each.join("\n"));
}

#[test]
fn a_stall_threshold_has_one_check_for_file_flag_and_request() {
    for bad in ["0s", "0ms", "400years"] {
        let file = format!("[daemon]\nstall_after = \"{bad}\"\n");
        let (line, key, _) = invalid(&file);
        assert_eq!(
            (line, key.as_str()),
            (Some(2), "daemon.stall_after"),
            "{bad}"
        );
        let flag = DaemonArgs::try_parse_from(["colibrid", "--stall-after", bad]);
        assert!(flag.is_err(), "--stall-after {bad} was accepted");
    }
    // What `spawn-agent {"stall_after": 18446744073709551615}` asks for.
    assert!(check_stall_after(Duration::from_millis(u64::MAX)).is_err());
    assert!(check_stall_after(Duration::ZERO).is_err());
    assert_eq!(
        check_stall_after(Duration::from_secs(90)),
        Ok(Duration::from_secs(90))
    );
    assert!(check_stall_after(MAX_DURATION).is_ok());
    // Other durations share the upper bound.
    expect_invalid(
        "[restart]\nbackoff = [\"1m\", \"1000years\"]\n",
        2,
        "restart.backoff",
        "must be at most",
    );
}

#[test]
fn agent_path_comes_from_file_or_flag_and_must_be_absolute() {
    let file = parse("[daemon]\nagent_path = \"/opt/bin:/usr/bin\"\n").expect("parses");
    let config = resolve_with(&DaemonArgs::default(), Some(&file));
    assert_eq!(config.daemon.agent_path, "/opt/bin:/usr/bin");
    let args =
        DaemonArgs::try_parse_from(["colibrid", "--agent-path", "/flag/bin"]).expect("valid flag");
    assert_eq!(
        resolve_with(&args, Some(&file)).daemon.agent_path,
        "/flag/bin"
    );
    expect_invalid(
        "[daemon]\nagent_path = \"/bin:bin\"\n",
        2,
        "daemon.agent_path",
        "not an absolute directory",
    );
    expect_invalid(
        "[daemon]\nagent_path = \"\"\n",
        2,
        "daemon.agent_path",
        "empty",
    );
    assert!(DaemonArgs::try_parse_from(["colibrid", "--agent-path", "."]).is_err());
}

fn config_of(text: &str) -> Config {
    resolve_with(&DaemonArgs::default(), Some(&parse(text).expect("parses")))
}

#[test]
fn reload_plan_applies_what_it_can_and_names_the_rest() {
    let started = config_of("[daemon]\nsocket = \"/run/a.sock\"\n");
    let same = config_of("[daemon]\nsocket = \"/run/a.sock\"\n");
    assert_eq!(plan(&started, &started, &same), ReloadPlan::default());

    let new = config_of(concat!(
        "[daemon]\n",
        "socket = \"/run/b.sock\"\n",
        "stall_after = \"90s\"\n",
        "max_line = 4096\n",
        "log_level = \"debug\"\n",
        "[syslog]\n",
        "level = \"warning\"\n",
        "[sessions]\n",
        "rotate_turns = 7\n",
        "[providers.local2]\n",
        "argv = [\"x\"]\n",
        "[jails.j1]\n",
    ));
    let first = plan(&started, &started, &new);
    assert_eq!(
        first.applied,
        [
            "daemon.log_level",
            "daemon.stall_after",
            "providers.local2",
            "syslog.level"
        ]
    );
    assert_eq!(
        first.restart_needed,
        [
            "daemon.max_line",
            "daemon.socket",
            "jails.j1",
            "sessions.rotate_turns"
        ]
    );
    // Loaded again unchanged: nothing new to apply, and the keys that wait
    // for a restart are still named.
    let again = plan(&started, &new, &new);
    assert!(again.applied.is_empty(), "{again:?}");
    assert_eq!(again.restart_needed, first.restart_needed);
    // Put back as started: nothing waits any more.
    let back = plan(&started, &new, &same);
    assert!(back.restart_needed.is_empty(), "{back:?}");
    assert!(back.applied.contains(&"daemon.stall_after".to_owned()));
}

#[test]
fn every_reloadable_key_names_a_real_key() {
    let keys = render::keyed(&config_of(
        "[agents.a]\nargv = [\"x\"]\n[hostops.h]\nargv = [\"/bin/true\"]\n[roles.r]\nargv = [\"x\"]\n",
    ));
    for reloadable in RELOADABLE_KEYS {
        assert!(
            keys.keys()
                .any(|key| key == reloadable || key.starts_with(reloadable)),
            "{reloadable} is not a key of the configuration"
        );
    }
}

// ---------------------------------------------------------------------------
// [agents.NAME] and [resume.RUNTIME]

const DECLARED: &str = r#"
[agents.fixer]
argv = ["/usr/local/bin/claude", "-p", "--output-format", "stream-json", "--verbose"]
cwd = "/src/repo"
env = { TERM = "xterm-256color", LANG = "C.UTF-8" }
user = "agent"
restart = "on-failure"
backoff = ["10s", "1m"]
max_restarts = 3
stall_after = "15m"
scope = ["/srv/shared", "../cache"]

[agents.reviewer]
provider = "deepseek"
model = "deepseek-chat"
autostart = false

[agents.tool]
provider = "local"
model = "/opt/bin/my-agent"
runtime = "zot"
resume = ["{program}", "--again", "{session}"]
"#;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn declared_agents_resolve_into_specs() {
    let config = config_of(DECLARED);
    assert_eq!(
        config.agents.keys().collect::<Vec<_>>(),
        ["fixer", "reviewer", "tool"]
    );

    let fixer = &config.agents["fixer"];
    assert_eq!(fixer.name, "fixer");
    assert_eq!(fixer.argv[0], "/usr/local/bin/claude");
    assert_eq!(fixer.runtime, None);
    assert_eq!(fixer.cwd.as_deref(), Some(Path::new("/src/repo")));
    assert_eq!(fixer.env["TERM"], "xterm-256color");
    assert_eq!(fixer.user.as_deref(), Some("agent"));
    assert_eq!(fixer.restart, RestartPolicy::OnFailure);
    assert_eq!(
        fixer.backoff,
        Some(vec![Duration::from_secs(10), Duration::from_secs(60)])
    );
    assert_eq!(fixer.max_restarts, Some(3));
    assert_eq!(fixer.stall_after, Some(Duration::from_secs(15 * 60)));
    assert_eq!(fixer.scope, strings(&["/srv/shared", "../cache"]));
    assert!(fixer.autostart);
    // No runtime given: the program's base name says Claude, whose default
    // resume template applies.
    assert_eq!(
        fixer.resume,
        Some(strings(&["{argv}", "--resume", "{session}"]))
    );
    assert_eq!(
        crate::core::spec::resume_argv(fixer, "abc-123").map(|argv| argv[4..].to_vec()),
        Some(strings(&["--verbose", "--resume", "abc-123"]))
    );

    // A provider expands through its template, as spawn-agent does.
    let reviewer = &config.agents["reviewer"];
    assert_eq!(
        reviewer.argv,
        strings(&[
            "pi",
            "--mode",
            "rpc",
            "--provider",
            "deepseek",
            "--model",
            "deepseek-chat"
        ])
    );
    assert!(!reviewer.autostart);
    assert_eq!(reviewer.restart, RestartPolicy::Never);
    assert_eq!(
        reviewer.resume,
        Some(strings(&["{argv}", "--session", "{session}"]))
    );

    // The contract's "local" provider runs the model as the executable.
    let tool = &config.agents["tool"];
    assert_eq!(tool.argv, ["/opt/bin/my-agent"]);
    assert_eq!(tool.runtime, Some(Runtime::Zot));
    assert_eq!(
        tool.resume,
        Some(strings(&["{program}", "--again", "{session}"]))
    );
}

#[test]
fn resume_sections_override_and_disable_the_defaults() {
    let config = config_of(concat!(
        "[resume.zot]\n",
        "argv = [\"{argv}\", \"--session\", \"{session}\"]\n",
        "[resume.claude]\n",
        "argv = []\n",
        "[agents.z]\n",
        "argv = [\"zot\", \"--json\"]\n",
        "[agents.c]\n",
        "argv = [\"claude\", \"-p\"]\n",
        "[agents.plain]\n",
        "argv = [\"my-agent\"]\n",
    ));
    assert_eq!(
        config.agents["z"].resume,
        Some(strings(&["{argv}", "--session", "{session}"]))
    );
    assert_eq!(config.agents["c"].resume, None, "resume.claude = []");
    assert_eq!(config.agents["plain"].resume, None, "no known harness");
    assert!(config.resume["claude"].argv.is_empty());
    assert_eq!(config.resume["codex"].argv[2], "resume");
    // Without a config, every harness with a default has it.
    let defaults = config_of("");
    assert!(defaults.agents.is_empty());
    assert!(defaults.resume["zot"].argv.is_empty());
    assert!(!defaults.resume["pi"].argv.is_empty());
}

#[test]
fn bad_agent_values_name_key_and_line() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[agents.cafe]\nargv = [\"x\"]\n",
            1,
            "agents.cafe",
            "reads as a pane id",
        ),
        (
            "[agents.\"1x\"]\nargv = [\"x\"]\n",
            1,
            "agents.1x",
            "invalid agent name",
        ),
        (
            "[agents.a]\nuser = \"u\"\n",
            1,
            "agents.a",
            "needs argv, or provider",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nprovider = \"deepseek\"\n",
            2,
            "agents.a",
            "not both",
        ),
        (
            "[agents.a]\nargv = []\n",
            2,
            "agents.a.argv",
            "program name",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nmodel = \"m\"\n",
            3,
            "agents.a.model",
            "provider",
        ),
        (
            "[agents.a]\nprovider = \"nowhere\"\nmodel = \"m\"\n",
            2,
            "agents.a.provider",
            "unknown provider",
        ),
        (
            "[agents.a]\nprovider = \"local\"\n",
            2,
            "agents.a.provider",
            "needs model",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nruntime = \"vim\"\n",
            3,
            "agents.a.runtime",
            "unknown runtime",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\ncwd = \"src\"\n",
            3,
            "agents.a.cwd",
            "absolute",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nenv = { \"A-B\" = \"1\" }\n",
            3,
            "agents.a.env",
            "invalid variable name",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\njail = \"a/b\"\n",
            3,
            "agents.a.jail",
            "jail name",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nrestart = \"sometimes\"\n",
            3,
            "agents.a.restart",
            "restart policy",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nbackoff = [\"1m\", \"soon\"]\n",
            3,
            "agents.a.backoff",
            "invalid duration",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nmax_restarts = 5000000000\n",
            3,
            "agents.a.max_restarts",
            "out of range",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nstall_after = \"0s\"\n",
            3,
            "agents.a.stall_after",
            "greater than zero",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nresume = [\"x\", \"--continue\"]\n",
            3,
            "agents.a.resume",
            "{session}",
        ),
        (
            "[resume.vim]\nargv = [\"vim\", \"{session}\"]\n",
            1,
            "resume.vim",
            "unknown runtime",
        ),
        (
            "[resume.pi]\nargv = [\"pi\"]\n",
            2,
            "resume.pi.argv",
            "{session}",
        ),
    ];
    for (text, line, key, msg) in cases {
        expect_invalid(text, *line, key, msg);
    }
    // Types and unknown keys are serde's, with the key named.
    let err = parse_err("[agents.a]\nargv = [\"x\"]\ncolour = \"red\"\n");
    assert!(err.to_string().contains("colour"), "{err}");
    assert!(err.to_string().starts_with("/etc/colibri.toml:3:"), "{err}");
}

#[test]
fn every_bad_agent_value_is_reported_in_file_order() {
    let text = concat!(
        "[agents.one]\n",
        "argv = [\"x\"]\n",
        "restart = \"maybe\"\n",
        "stall_after = \"0s\"\n",
        "[agents.two]\n",
        "provider = \"nowhere\"\n",
        "[daemon]\n",
        "heartbeat = \"0s\"\n",
    );
    let err = parse_err(text);
    let each: Vec<String> = err.each().iter().map(|e| e.to_string()).collect();
    assert_eq!(
        each,
        [
            "/etc/colibri.toml:3: agents.one.restart: invalid restart policy \"maybe\" (never, on-failure, always)",
            "/etc/colibri.toml:4: agents.one.stall_after: invalid duration \"0s\": must be greater than zero",
            "/etc/colibri.toml:6: agents.two.provider: unknown provider \"nowhere\": configure [providers.nowhere] argv = [...]",
            "/etc/colibri.toml:8: daemon.heartbeat: invalid duration \"0s\": must be greater than zero",
        ]
    );
}

#[test]
fn declared_agents_render_and_load_back() {
    let config = config_of(DECLARED);
    let text = render_effective(&config);
    assert!(text.contains("[agents.fixer]"), "{text}");
    assert!(text.contains("stall_after = \"15m\""), "{text}");
    assert!(text.contains("[resume.codex]"), "{text}");
    assert!(
        !text.contains("provider = \"deepseek\""),
        "the argv is rendered: {text}"
    );
    let again = parse(&text).expect("rendered config parses");
    let round = resolve_with(&DaemonArgs::default(), Some(&again));
    assert_eq!(round.agents, config.agents);
    assert_eq!(round.resume, config.resume);
}

const CONTROL_PLANE_AGENTS: &str = r#"
[providers.custom]
argv = ["pi", "--system-prompt", "{system_prompt}", "--model", "{model}"]

[agents.ops]
provider = "deepseek"
model = "deepseek-chat"
role = "sysadmin"
heartbeat = "10m"
system_prompt = "You keep the jails up."

[agents.coder]
argv = ["codex", "exec", "--json"]
role = "coder"
heartbeat = "1s"
heartbeat_prompt = "Any tasks?"
system_prompt = 'say "hi"'

[agents.gem]
argv = ["gemini"]
system_prompt = "unheard"

[agents.custom]
provider = "custom"
model = "m"
system_prompt = "all yours"
"#;

#[test]
fn declared_agents_take_roles_heartbeats_and_system_prompts() {
    let config = config_of(CONTROL_PLANE_AGENTS);
    let ops = &config.agents["ops"];
    assert_eq!(ops.role.as_deref(), Some("sysadmin"));
    assert_eq!(ops.heartbeat, Some(Duration::from_secs(600)));
    assert_eq!(ops.heartbeat_prompt, None);
    // The built-in provider runs Pi: the prompt goes as Pi takes it.
    assert_eq!(
        ops.argv[ops.argv.len() - 2..],
        strings(&["--append-system-prompt", "You keep the jails up."])
    );
    assert_eq!(ops.system_prompt.as_deref(), Some("You keep the jails up."));
    let coder = &config.agents["coder"];
    assert_eq!(coder.heartbeat, Some(Duration::from_secs(1)));
    assert_eq!(coder.heartbeat_prompt.as_deref(), Some("Any tasks?"));
    assert_eq!(
        coder.argv,
        strings(&[
            "codex",
            "exec",
            "--json",
            "-c",
            r#"developer_instructions="say \"hi\"""#
        ])
    );
    // Gemini takes none on its command line: only the environment has it.
    assert_eq!(config.agents["gem"].argv, ["gemini"]);
    assert_eq!(
        config.agents["gem"].system_prompt.as_deref(),
        Some("unheard")
    );
    // A template that places the prompt itself is followed, not added to.
    assert_eq!(
        config.agents["custom"].argv,
        strings(&["pi", "--system-prompt", "all yours", "--model", "m"])
    );
    let again = parse(&render_effective(&config)).expect("rendered config parses");
    let round = resolve_with(&DaemonArgs::default(), Some(&again));
    assert_eq!(round.agents, config.agents);
}

#[test]
fn bad_roles_heartbeats_and_prompts_name_their_line() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[agents.a]\nargv = [\"x\"]\nrole = \"two words\"\n",
            3,
            "agents.a.role",
            "invalid role",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nheartbeat = \"500ms\"\n",
            3,
            "agents.a.heartbeat",
            "once a second",
        ),
        (
            "[agents.a]\nargv = [\"x\"]\nheartbeat_prompt = \" \"\n",
            3,
            "agents.a.heartbeat_prompt",
            "empty",
        ),
        (
            "[budgets.b]\nscope = \"role:a b\"\ntokens = 5\ndaily = true\n",
            2,
            "budgets.b.scope",
            "invalid role",
        ),
    ];
    for (text, line, key, msg) in cases {
        expect_invalid(text, *line, key, msg);
    }
}

#[test]
fn reload_reconciles_declared_agents() {
    let started = config_of(DECLARED);
    let changed = config_of(&DECLARED.replace("max_restarts = 3", "max_restarts = 4"));
    let reload = plan(&started, &started, &changed);
    assert_eq!(reload.applied, ["agents.fixer"]);
    assert!(reload.restart_needed.is_empty(), "{reload:?}");
    assert_eq!(reload.agents().collect::<Vec<_>>(), ["fixer"]);

    let fewer = config_of(concat!("[agents.fixer]\n", "argv = [\"claude\"]\n"));
    let reload = plan(&started, &started, &fewer);
    assert_eq!(
        reload.agents().collect::<Vec<_>>(),
        ["fixer", "reviewer", "tool"]
    );
    assert!(reload.restart_needed.is_empty(), "{reload:?}");

    // What the daemon then does, agent by agent.
    let declared: Vec<_> = fewer.agents.values().cloned().collect();
    let table: Vec<_> = started
        .agents
        .values()
        .map(|spec| crate::core::reconcile::TableEntry {
            name: spec.name.clone(),
            fingerprint: spec.fingerprint(),
            origin: crate::core::reconcile::Origin::Declared,
            wanted: crate::core::spec::Wanted::Up,
            actual: crate::core::spec::Actual::Running,
        })
        .collect();
    let names: Vec<String> =
        crate::core::reconcile::plan(&declared, &table, crate::core::reconcile::Occasion::Reload)
            .iter()
            .map(|change| {
                use crate::core::reconcile::AgentChange;
                let kind = match change {
                    AgentChange::Start(_) => "start",
                    AgentChange::Declare(_) => "declare",
                    AgentChange::Stop { .. } => "stop",
                    AgentChange::Restart(_) => "restart",
                    AgentChange::Update(_) => "update",
                    AgentChange::Clash { .. } => "clash",
                };
                format!("{kind} {}", change.name())
            })
            .collect();
    assert_eq!(names, ["stop reviewer", "stop tool", "restart fixer"]);
}

#[test]
fn the_approvals_section_parses_and_rejects_an_unknown_default() {
    let layer = parse(
        "[approvals]\nescalate_after = \"10m\"\ndefault_answer = \"deny\"\ndefault_after = \"5m\"\n",
    )
    .expect("parses");
    let cfg = resolve_with(&DaemonArgs::default(), Some(&layer));
    assert_eq!(cfg.approvals.escalate_after, Duration::from_secs(600));
    assert_eq!(cfg.approvals.default_answer, "deny");
    assert_eq!(cfg.approvals.default_after, Duration::from_secs(300));
    let none = resolve_with(&DaemonArgs::default(), None);
    assert_eq!(none.approvals.escalate_after, Duration::ZERO);
    assert_eq!(none.approvals.default_answer, "none");
    expect_invalid(
        "[approvals]\ndefault_answer = \"allow\"\n",
        2,
        "approvals.default_answer",
        "not deny or none",
    );
}

/// Dispatch is off unless asked for; its durations and text are checked,
/// and a changed key takes effect on reload.
#[test]
fn the_orchestrator_section_is_off_by_default_and_checked() {
    let none = resolve_with(&DaemonArgs::default(), None);
    assert!(!none.orchestrator.dispatch);
    assert!(!none.orchestrator.escalate);
    assert_eq!(none.orchestrator.grace, Duration::from_secs(300));
    assert_eq!(none.orchestrator.plan_file, None);
    expect_invalid(
        "[orchestrator]\nplan_file = \"plan.md\"\n",
        2,
        "orchestrator.plan_file",
        "not an absolute path",
    );
    assert_eq!(none.orchestrator.project, None);
    expect_invalid(
        "[orchestrator]\nproject = \"src\"\n",
        2,
        "orchestrator.project",
        "not an absolute path",
    );
    assert_eq!(none.orchestrator.ack_timeout, Duration::from_secs(180));
    assert_eq!(none.orchestrator.retry_after, Duration::from_secs(600));
    assert_eq!(
        none.orchestrator.prompt,
        crate::core::dispatch::DEFAULT_PROMPT
    );
    let layer = parse(
        "[orchestrator]\ndispatch = true\nescalate = true\nack_timeout = \"30s\"\nretry_after = \"0s\"\nprompt = \"do {id}\"\n",
    )
    .expect("parses");
    let cfg = resolve_with(&DaemonArgs::default(), Some(&layer));
    assert!(cfg.orchestrator.dispatch);
    assert!(cfg.orchestrator.escalate);
    assert_eq!(cfg.orchestrator.ack_timeout, Duration::from_secs(30));
    assert_eq!(cfg.orchestrator.retry_after, Duration::ZERO);
    assert_eq!(cfg.orchestrator.prompt, "do {id}");
    expect_invalid(
        "[orchestrator]\nack_timeout = \"0s\"\n",
        2,
        "orchestrator.ack_timeout",
        "",
    );
    expect_invalid(
        "[orchestrator]\nprompt = \" \"\n",
        2,
        "orchestrator.prompt",
        "empty",
    );
    assert!(crate::config::is_reloadable("orchestrator.dispatch"));
}

// ---------------------------------------------------------------------------
// [hostops.NAME]

const HOSTOPS: &str = r#"
[hostops.snap]
argv = ["/sbin/zfs", "snapshot", "zroot/jails/{jail}@{name}"]
params.jail = "[a-z0-9-]{1,32}"
params.name = "[a-z0-9-]{1,32}"
jails = ["agents1"]
roles = ["sysadmin"]
timeout = "2m"
output_max = 4096
cwd = "/"

[hostops.list]
argv = ["/usr/local/bin/bastille", "list"]
jails = ["agents1", "db"]
"#;

#[test]
fn hostops_are_read_checked_and_rendered_back() {
    let config = config_of(HOSTOPS);
    let snap = &config.hostops["snap"];
    assert_eq!(snap.jails, ["agents1"]);
    assert_eq!(snap.roles, ["sysadmin"]);
    assert_eq!(snap.timeout, Duration::from_secs(120));
    assert_eq!(snap.output_max, 4096);
    assert_eq!(snap.cwd.as_deref(), Some(Path::new("/")));
    let list = &config.hostops["list"];
    assert_eq!(list.timeout, DEFAULT_HOSTOP_TIMEOUT);
    assert_eq!(list.output_max, DEFAULT_HOSTOP_OUTPUT);
    let given: BTreeMap<String, String> = [("jail", "db"), ("name", "before-upgrade")]
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    assert_eq!(
        snap.argv_for(&given).expect("fits"),
        ["/sbin/zfs", "snapshot", "zroot/jails/db@before-upgrade"]
    );

    let text = render_effective(&config);
    assert!(text.contains("[hostops.snap]"), "{text}");
    let round = resolve_with(&DaemonArgs::default(), Some(&parse(&text).expect("parses")));
    assert_eq!(render_effective(&round), text);
}

#[test]
fn a_bad_hostop_is_refused_with_its_line() {
    expect_invalid(
        "[hostops.x]\nargv = [\"echo\", \"hi\"]\n",
        2,
        "hostops.x.argv",
        "absolute",
    );
    expect_invalid(
        "[hostops.x]\nargv = [\"/bin/echo\", \"{who}\"]\n",
        2,
        "hostops.x.argv",
        "no pattern",
    );
    expect_invalid(
        "[hostops.x]\nargv = [\"/bin/echo\", \"{who}\"]\nparams.who = \"(\"\n",
        3,
        "hostops.x.params.who",
        "invalid pattern",
    );
    expect_invalid(
        "[hostops.x]\nargv = [\"/bin/echo\"]\ntimeout = \"2h\"\n",
        3,
        "hostops.x.timeout",
        "longer than",
    );
    expect_invalid(
        "[hostops.x]\nargv = [\"/bin/echo\"]\noutput_max = 0\n",
        3,
        "hostops.x.output_max",
        "out of range",
    );
    expect_invalid(
        "[hostops.x]\nargv = [\"/bin/echo\"]\njails = [\"../etc\"]\n",
        3,
        "hostops.x.jails",
        "invalid jail name",
    );
    expect_invalid(
        "[hostops.\"a b\"]\nargv = [\"/bin/echo\"]\n",
        1,
        "hostops.a b",
        "invalid op name",
    );
    // A key the table does not have is a typo, not a default.
    assert!(parse("[hostops.x]\nargv = [\"/bin/echo\"]\njail = [\"a\"]\n").is_err());
}

#[test]
fn a_changed_hostop_is_applied_on_reload() {
    let started = config_of(HOSTOPS);
    let new = config_of(&HOSTOPS.replace("timeout = \"2m\"", "timeout = \"3m\""));
    let p = plan(&started, &started, &new);
    assert_eq!(p.applied, ["hostops.snap"]);
    assert!(p.restart_needed.is_empty(), "{p:?}");
}

// [roles.NAME]

const ROLES: &str = r#"
[roles.builder]
argv = ["pi", "--mode", "rpc"]
runtime = "pi"
cwd = "/srv/project"
env = { TERM = "dumb" }
max = 3
idle_stop = "90s"

[roles.reviewer]
provider = "anthropic"
model = "claude-sonnet-4"
"#;

#[test]
fn role_runners_are_read_checked_and_rendered_back() {
    let config = config_of(ROLES);
    let builder = &config.roles["builder"];
    assert_eq!(builder.max, 3);
    assert_eq!(builder.idle_stop, Duration::from_secs(90));
    let argv = ["pi", "--mode", "rpc"].map(String::from);
    assert_eq!(builder.argv.as_deref(), Some(&argv[..]));
    assert_eq!(builder.cwd.as_deref(), Some("/srv/project"));
    assert_eq!(builder.env["TERM"], "dumb");
    let reviewer = &config.roles["reviewer"];
    assert_eq!(reviewer.max, 1);
    assert_eq!(reviewer.idle_stop, crate::config::DEFAULT_IDLE_STOP);
    assert_eq!(reviewer.provider.as_deref(), Some("anthropic"));

    let text = render_effective(&config);
    assert!(text.contains("[roles.builder]"), "{text}");
    let round = resolve_with(&DaemonArgs::default(), Some(&parse(&text).expect("parses")));
    assert_eq!(render_effective(&round), text);
    // A reload applies a changed runner to the next agent it starts.
    let new = config_of(&ROLES.replace("max = 3", "max = 4"));
    let p = plan(&config, &config, &new);
    assert_eq!(p.applied, ["roles.builder"]);
}

#[test]
fn a_bad_role_runner_is_refused_with_its_line() {
    expect_invalid("[roles.b]\nmax = 1\n", 1, "roles.b", "needs argv");
    expect_invalid(
        "[roles.b]\nargv = [\"x\"]\nmax = 0\n",
        3,
        "roles.b.max",
        "out of range",
    );
    expect_invalid(
        "[roles.b]\nargv = [\"x\"]\nidle_stop = \"0s\"\n",
        3,
        "roles.b.idle_stop",
        "",
    );
    expect_invalid(
        "[roles.b]\nargv = [\"x\"]\ncwd = \"rel\"\n",
        3,
        "roles.b.cwd",
        "absolute",
    );
    expect_invalid(
        "[roles.\"a b\"]\nargv = [\"x\"]\n",
        1,
        "roles.a b",
        "invalid role",
    );
    assert!(parse("[roles.b]\nargv = [\"x\"]\nmaximum = 2\n").is_err());
}

// [fleet]

#[test]
fn fleet_is_read_checked_and_rendered_back() {
    let config = config_of(concat!(
        "[daemon]\nhost = \"DB1.example.org\"\n",
        "[fleet]\nurl = \"tls://hub-a:4222, tls://hub-b:4222\"\n",
        "creds = \"/usr/local/etc/colibri/db1.creds\"\n",
        "tls_ca = \"/usr/local/etc/colibri/ca.pem\"\nheartbeat = \"5s\"\n",
    ));
    let fleet = config.fleet.clone().expect("[fleet]");
    assert_eq!(fleet.url, "tls://hub-a:4222,tls://hub-b:4222");
    // The host name made one subject token.
    assert_eq!(fleet.host_id, "db1-example-org");
    assert_eq!(
        fleet.creds.as_deref(),
        Some(Path::new("/usr/local/etc/colibri/db1.creds"))
    );
    assert_eq!(fleet.heartbeat, Duration::from_secs(5));
    let text = render_effective(&config);
    assert!(text.contains("[fleet]"), "{text}");
    let round = resolve_with(&DaemonArgs::default(), Some(&parse(&text).expect("parses")));
    assert_eq!(render_effective(&round), text);
    // Without the table: no fleet, nothing rendered.
    let none = config_of("");
    assert_eq!(none.fleet, None);
    assert!(!render_effective(&none).contains("fleet"));
    // Defaults.
    let f = config_of("[fleet]\nurl = \"nats://hub:4222\"\nhost_id = \"db1\"\n")
        .fleet
        .expect("[fleet]");
    assert_eq!(f.heartbeat, crate::config::fleet::DEFAULT_FLEET_HEARTBEAT);
    assert_eq!((f.creds, f.tls_ca), (None, None));
}

#[test]
fn a_bad_fleet_is_refused_with_its_line() {
    expect_invalid("[fleet]\nhost_id = \"db1\"\n", 1, "fleet.url", "needs url");
    expect_invalid(
        "[fleet]\nurl = \"http://hub:4222\"\n",
        2,
        "fleet.url",
        "not a NATS URL",
    );
    expect_invalid(
        "[fleet]\nurl = \"nats://hub\"\nhost_id = \"db1.example\"\n",
        3,
        "fleet.host_id",
        "split the NATS subject",
    );
    expect_invalid(
        "[fleet]\nurl = \"nats://hub\"\ncreds = \"db1.creds\"\n",
        3,
        "fleet.creds",
        "absolute",
    );
    expect_invalid(
        "[fleet]\nurl = \"nats://hub\"\nheartbeat = \"0s\"\n",
        3,
        "fleet.heartbeat",
        "",
    );
    assert!(matches!(
        parse_err("[fleet]\nurl = \"nats://hub\"\nhots_id = \"x\"\n"),
        ConfigError::Syntax { line: 3, .. }
    ));
    // A host name that makes no host id needs host_id.
    let layer =
        parse("[daemon]\nhost = \"db*1\"\n[fleet]\nurl = \"nats://hub\"\n").expect("parses");
    let e = resolve(
        &DaemonArgs::default(),
        Some((Path::new("/etc/colibri.toml"), &layer)),
    )
    .expect_err("no host id");
    assert!(e.to_string().contains("fleet.host_id"), "{e}");
}

#[test]
fn a_changed_fleet_needs_a_restart() {
    let a = config_of("[fleet]\nurl = \"nats://a:4222\"\nhost_id = \"db1\"\n");
    let b = config_of("[fleet]\nurl = \"nats://b:4222\"\nhost_id = \"db1\"\n");
    let p = plan(&a, &a, &b);
    assert_eq!(p.restart_needed, ["fleet.url"]);
    assert!(p.applied.is_empty());
}
