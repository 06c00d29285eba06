//! The glasspane contract: its example lines verbatim, the v1 snapshot's
//! exact shape, the reply envelope and request errors.

use serde_json::{json, Value};

use crate::support::*;

const SMOKE: &str = r#"printf '%s\n' '{"type":"session","id":"pi-1","cwd":"/repo"}' '{"type":"turn_start"}' '{"type":"queue_update","steering":[],"followUp":[]}' '{"type":"turn_start"}' '{"type":"turn_end"}'
read answer
exit 0"#;

fn is_rfc3339_ms(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && b[23] == b'Z'
}

#[test]
fn smoke_agent_states_and_v1_snapshot_shape() {
    let d = Colibrid::start(&[]);
    let agent = d.script("colibri-smoke-agent", SMOKE);
    let mut watch = d.client();
    let w = watch.request(&json!({"cmd":"watch"}));
    assert_eq!(w["ok"], json!(true), "{w}");
    // The contract's own line, verbatim: provider local runs `model`.
    let r = d.request(json!({"cmd":"spawn-agent","provider":"local","model": agent}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["error"], Value::Null);
    assert_eq!(r["data"]["status"], json!("running"));
    let id = r["data"]["agent_id"]
        .as_str()
        .expect("agent_id")
        .to_string();
    assert_eq!(id.len(), 36, "a UUIDv4: {id}");
    d.wait_pane(&id, "all five lines", |p| {
        p["counters"]["events"] == json!(5)
    });

    let snap = d.ok(json!({"cmd":"glasspane-snapshot"}));
    assert_eq!(snap["schema"], json!("clawdie.glasspane.snapshot.v1"));
    assert!(
        is_rfc3339_ms(snap["observed_at"].as_str().unwrap_or("")),
        "{snap}"
    );
    let pane = &snap["panes"][0];
    let mut keys: Vec<&str> = pane
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    assert_eq!(
        keys,
        vec![
            "agent",
            "cwd",
            "id",
            "last_event_at",
            "pi_session_id",
            "state"
        ],
        "stalled omitted when false"
    );
    assert_eq!(pane["id"], json!(id));
    assert_eq!(pane["agent"], json!("colibri-smoke-agent"));
    assert_eq!(
        pane["state"],
        json!("working"),
        "queue_update is not blocked; turn_end is mid-run"
    );
    assert_eq!(pane["pi_session_id"], json!("pi-1"));
    assert_eq!(pane["cwd"], json!("/repo"));
    assert!(is_rfc3339_ms(pane["last_event_at"].as_str().unwrap_or("")));
    assert_ne!(pane["id"], pane["pi_session_id"]);

    d.ok(json!({"cmd":"send-input","agent_id": id, "text":"go"}));
    let p = d.wait_state(&id, "done");
    assert_eq!(p["exit"], json!({"code": 0}));

    // The watch stream saw idle→working→done with consecutive numbers.
    let mut states = Vec::new();
    let mut last_seq = w["data"]["seq"].as_u64().expect("seq");
    while states.last().map(String::as_str) != Some("done") {
        let ev = watch.read_line().expect("watch event");
        let seq = ev["seq"].as_u64().expect("seq");
        assert_eq!(seq, last_seq + 1, "no gaps: {ev}");
        last_seq = seq;
        if ev["event"] == json!("state") && ev["pane"] == json!(id) {
            states.push(ev["to"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(states, vec!["working", "done"]);
}

#[test]
fn contract_example_lines_get_contract_answers() {
    let mut d = Colibrid::start(&[]);
    let agent = d.script("fake-pi", "echo \"{\\\"type\\\":\\\"session\\\",\\\"id\\\":\\\"x\\\",\\\"model\\\":\\\"$1\\\"}\"; sleep 30");
    let cfg = d.path("colibri.toml");
    std::fs::write(
        &cfg,
        format!("[providers.deepseek]\nargv = [\"{agent}\", \"{{model}}\"]\n"),
    )
    .expect("config");
    d.terminate();
    d.args = vec!["--config".into(), cfg.display().to_string()];
    d.launch();

    let mut c = d.client();
    let st = c.request(&json!({"cmd":"status"}));
    assert_eq!(st["ok"], json!(true));
    assert!(st["data"]["agents"].is_u64(), "{st}");

    let line = br#"{"cmd":"spawn-agent","provider":"deepseek","model":"deepseek-chat","session_id":"sess-1","system_prompt":"You are a helpful assistant."}"#;
    c.send_raw(line);
    c.send_raw(b"\n");
    let r = c.read_line().expect("reply");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["data"]["status"], json!("running"));
    assert_eq!(r["data"]["session_id"], json!("sess-1"));
    let id = r["data"]["agent_id"].as_str().expect("id").to_string();
    d.wait_pane(&id, "the header", |p| p["session_id"] == json!("x"));

    let sessions = c.request(&json!({"cmd":"list-sessions"}));
    let list = sessions["data"].as_array().expect("list");
    let s = list
        .iter()
        .find(|s| s["id"] == json!("sess-1"))
        .expect("sess-1 listed");
    assert!(
        s["turn_count"].is_u64() && s["bytes"].as_u64().unwrap_or(0) > 0,
        "{s}"
    );

    let k = c.request(&json!({"cmd":"kill-agent","agent_id": id}));
    assert_eq!(k["ok"], json!(true), "{k}");
    let p = d.wait_pane(&id, "killed", |p| p["exit"]["signal"] == json!(9));
    assert_eq!(p["state"], json!("error"));

    let dump = c.request(&json!({"cmd":"get-session","session_id":"sess-1"}));
    assert_eq!(dump["ok"], json!(true), "{dump}");
    let text = dump["data"].to_string();
    assert!(
        text.contains("deepseek-chat"),
        "the agent's line is in the dump: {text}"
    );
    let comp = c.request(&json!({"cmd":"compact-session","session_id":"sess-1"}));
    assert_eq!(comp["ok"], json!(true), "{comp}");
    let missing = c.request(&json!({"cmd":"get-session","session_id":"nope"}));
    assert_eq!(missing["ok"], json!(false));
    assert_eq!(missing["data"], Value::Null);
}

#[test]
fn request_id_is_echoed_and_errors_keep_the_connection() {
    let d = Colibrid::start(&[]);
    let mut c = d.client();
    let r = c.request(&json!({"cmd":"status","id":"abc"}));
    assert_eq!(r["id"], json!("abc"));
    c.send_raw(b"{not json\n");
    let e = c.read_line().expect("error reply");
    assert_eq!(e["ok"], json!(false));
    assert!(
        e["error"].as_str().unwrap_or("").contains("malformed JSON"),
        "{e}"
    );
    assert_eq!(e["data"], Value::Null);
    let e = c.request(&json!({"cmd":"fly","id":3}));
    assert_eq!(e["ok"], json!(false));
    assert_eq!(e["id"], json!(3));
    assert!(
        e["error"]
            .as_str()
            .unwrap_or("")
            .contains("unknown command"),
        "{e}"
    );
    let e = c.request(&json!({"cmd":"kill-agent"}));
    assert!(
        e["error"].as_str().unwrap_or("").contains("agent_id"),
        "{e}"
    );
    // Still alive after three errors.
    assert_eq!(c.request(&json!({"cmd":"status"}))["ok"], json!(true));
}
