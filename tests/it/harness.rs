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

/// The versions `scripts/install-harnesses.sh` pins (same names).
const CLAUDE: (&str, &str, &str) = ("claude", "2.1.332", "claude");
const PI: (&str, &str, &str) = ("pi", "0.73.1", "pi");

/// The harness's program, or `None` (said loudly) when it is not installed.
fn harness((name, version, bin): (&str, &str, &str)) -> Option<PathBuf> {
    let dir = std::env::var_os("COLIBRI_HARNESS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/colibri-harnesses"))
        })?;
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
    let home = d.path("claude-home");
    let work = d.path("claude-work");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&work).expect("work");
    let mut env = quiet_env(&home);
    env.insert("ANTHROPIC_BASE_URL".into(), json!(provider.base_url()));
    env.insert("ANTHROPIC_API_KEY".into(), json!("sk-ant-scripted"));
    let claude = claude.display().to_string();
    let id = d.spawn(
        &[
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
        ],
        json!({"runtime":"claude","env":env,"cwd":work.display().to_string()}),
    );
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

#[test]
fn pi_runs_a_whole_turn_in_json_mode_and_its_usage_is_what_the_provider_reported() {
    let Some(pi) = harness(PI) else {
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
}
