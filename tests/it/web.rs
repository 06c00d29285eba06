//! `colibri web` against the real daemon: its token, its event stream, and
//! the page in a real headless browser (Debian's chromium driven through
//! chromedriver over the WebDriver protocol).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{wait_for, Colibrid, COLIBRI};

/// A running `colibri web` on an ephemeral loopback port.
struct Web {
    child: Child,
    addr: String,
    token: String,
}

impl Web {
    fn start(d: &Colibrid) -> Web {
        Web::start_with(d, Command::new(COLIBRI))
    }

    /// A board that may hold at most `fds` file descriptors.
    fn start_with_fd_limit(d: &Colibrid, fds: u32) -> Web {
        let mut sh = Command::new("/bin/sh");
        sh.args([
            "-c",
            &format!("ulimit -n {fds} && exec \"$0\" \"$@\""),
            COLIBRI,
        ]);
        Web::start_with(d, sh)
    }

    fn start_with(d: &Colibrid, mut command: Command) -> Web {
        let token_file = d.path("web-token");
        let mut child = command
            .arg("--socket")
            .arg(&d.socket)
            .args(["web", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .arg("--action-key-file")
            .arg(d.path("web-action-key"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn colibri web");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a banner").expect("read banner");
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .expect("an address in the banner")
            .to_string();
        let second = lines.next().expect("token line").expect("read");
        assert!(second.contains("printed once"), "{second}");
        let url = lines.next().expect("login URL").expect("read");
        let token = std::fs::read_to_string(&token_file)
            .expect("token file")
            .trim()
            .to_string();
        assert!(url.ends_with(&format!("?token={token}")), "{url}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        Web { child, addr, token }
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A chunked body's bytes (tiny_http chunks a large reply).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .expect("a chunk size");
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
    out
}

/// One HTTP/1.1 request on a fresh connection; returns (status, headers, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    // Read the head, then Content-Length bytes: chromedriver keeps its
    // connections open whatever the request asks.
    let mut reader = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read a header");
        if n == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let mut raw = Vec::new();
    match length {
        Some(n) => {
            raw.resize(n, 0);
            reader.read_exact(&mut raw).expect("read the body");
        }
        None => {
            reader.read_to_end(&mut raw).expect("read the body");
        }
    }
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if chunked {
        raw = dechunk(&raw);
    }
    let body = String::from_utf8_lossy(&raw).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (status, head, body)
}

#[test]
fn web_refuses_without_the_token_and_serves_with_it() {
    let d = Colibrid::start(&[]);
    let web = Web::start(&d);
    let bearer = format!("Bearer {}", web.token);
    for path in ["/events", "/api/snapshot"] {
        let (status, _, _) = http(&web.addr, "GET", path, &[], "");
        assert_eq!(status, 401, "{path} without a token");
    }
    // The page and its assets hold no data: anyone may load them.
    for path in ["/", "/board.js", "/board.css"] {
        let (status, _, _) = http(&web.addr, "GET", path, &[], "");
        assert_eq!(status, 200, "{path}");
    }
    let (status, _, _) = http(
        &web.addr,
        "GET",
        "/api/snapshot",
        &[("Authorization", "Bearer nope")],
        "",
    );
    assert_eq!(status, 401, "a wrong bearer token");
    let (status, _, _) = http(&web.addr, "POST", "/api/pause", &[], r#"{"pane":"x"}"#);
    assert_eq!(status, 401, "an action without a token");
    let (status, _, body) = http(
        &web.addr,
        "GET",
        "/api/snapshot",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(status, 200, "{body}");

    // Login: the token in the query opens a session, handed to the page in
    // the URL's fragment; no cookie (a cookie reaches every port of the
    // host, where the board's once reached an agent's dev server).
    let (status, _, _) = http(&web.addr, "GET", "/?token=wrong", &[], "");
    assert_eq!(status, 401);
    let (status, head, _) = http(&web.addr, "GET", &format!("/?token={}", web.token), &[], "");
    assert_eq!(status, 303);
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    assert!(!head.contains(&web.token), "the token came back: {head}");
    let session = head
        .lines()
        .find_map(|l| l.split_once("#session=").map(|(_, s)| s.trim().to_string()))
        .unwrap_or_else(|| panic!("no session in {head}"));
    let as_session = format!("Bearer {session}");
    let (status, _, _) = http(
        &web.addr,
        "GET",
        "/api/snapshot",
        &[("Authorization", &as_session)],
        "",
    );
    assert_eq!(status, 200, "the session's own requests");

    // An action reaches the daemon and returns its reply; one a page of
    // another origin makes (another port of the same host) is refused,
    // whatever credential it holds.
    let id = d.spawn(&["sh", "-c", "sleep 600"], json!({"name":"sleeper"}));
    let pause = json!({"pane": id}).to_string();
    for (name, value) in [
        ("Origin", "http://127.0.0.1:3000"),
        ("Sec-Fetch-Site", "same-site"),
    ] {
        let (status, _, body) = http(
            &web.addr,
            "POST",
            "/api/pause",
            &[("Authorization", &as_session), (name, value)],
            &pause,
        );
        assert_eq!(status, 403, "{name}: {value}: {body}");
    }
    assert_eq!(d.pane(&id)["paused"], json!(false));
    let own = format!("http://{}", web.addr);
    let (status, _, body) = http(
        &web.addr,
        "POST",
        "/api/pause",
        &[
            ("Authorization", &as_session),
            ("Origin", &own),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &pause,
    );
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(reply["ok"], json!(true), "{reply}");
    assert_eq!(d.pane(&id)["paused"], json!(true));
}

/// Reads SSE messages until one's data satisfies `cond`.
fn read_sse_until(
    reader: &mut BufReader<TcpStream>,
    what: &str,
    cond: impl Fn(&str, &Value) -> bool,
) -> (String, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut event, mut id) = (String::new(), String::new());
    loop {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read the event stream");
        assert!(n > 0, "the event stream ended while waiting for {what}");
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("event: ") {
            event = v.to_string();
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            let data: Value = serde_json::from_str(v).expect("data is JSON");
            if cond(&event, &data) {
                return (id, data);
            }
        }
    }
}

fn open_events(web: &Web, last_id: Option<&str>) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(&web.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!(
        "GET /events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n",
        web.addr, web.token
    );
    if let Some(id) = last_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send");
    let mut reader = BufReader::new(s);
    let mut status = String::new();
    reader.read_line(&mut status).expect("status line");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    reader
}

fn blocking_hook(d: &Colibrid, id: &str) {
    d.ok(json!({"cmd":"emit","agent_id":id,"event":{
        "hook_event_name":"Notification","notification_type":"permission_prompt",
        "message":"Claude needs your permission to use Bash"}}));
}

fn has_event(data: &Value, pane: &str, kind: &str) -> bool {
    data.as_array().is_some_and(|items| {
        items
            .iter()
            .any(|i| i["t"] == "event" && i["ev"]["pane"] == pane && i["ev"]["event"] == kind)
    })
}

#[test]
fn web_sse_delivers_a_state_change_and_resumes_after_last_event_id() {
    let d = Colibrid::start(&[]);
    let id = d.spawn(
        &["sh", "-c", "sleep 600"],
        json!({"name":"asker","runtime":"claude"}),
    );
    let web = Web::start(&d);
    let mut events = open_events(&web, None);
    // The first message is a snapshot; the pane is in it, or follows as a
    // `pane` item once the board's first refresh is done.
    let (snap_id, _) = read_sse_until(&mut events, "the pane on the board", |e, data| {
        let in_snapshot = e == "snapshot"
            && data["panes"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["info"]["id"] == json!(id)));
        let as_item = e == "batch"
            && data.as_array().is_some_and(|items| {
                items
                    .iter()
                    .any(|i| i["t"] == "pane" && i["pane"]["id"] == json!(id))
            });
        in_snapshot || as_item
    });
    blocking_hook(&d, &id);
    let (batch_id, data) = read_sse_until(&mut events, "the state change", |e, data| {
        e == "batch"
            && data.as_array().is_some_and(|items| {
                items.iter().any(|i| {
                    i["ev"]["event"] == "state"
                        && i["ev"]["pane"] == json!(id)
                        && i["ev"]["to"] == "blocked"
                })
            })
    });
    assert!(data.is_array());
    drop(events);

    // A page that reconnects with Last-Event-ID gets what it missed, not a snapshot.
    d.ok(json!({"cmd":"pause-agent","agent_id":id}));
    let mut events = open_events(&web, Some(&batch_id));
    let (_, data) = read_sse_until(&mut events, "the missed pause", |e, data| {
        assert_ne!(e, "snapshot", "a resumable page was sent a snapshot");
        has_event(data, &id, "paused")
    });
    assert!(data.is_array());
    // A position from another run gets a snapshot.
    let mut events = open_events(&web, Some("elsewhere:1"));
    read_sse_until(&mut events, "a snapshot", |e, _| e == "snapshot");
    assert_ne!(snap_id, batch_id);
}

// --- the browser -----------------------------------------------------------

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// chromedriver and one headless chromium session, spoken to over HTTP.
struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

impl Browser {
    /// `None` (the test skips, saying so) where chromedriver is missing
    /// outside CI.
    fn start() -> Option<Browser> {
        let driver_bin = find_program(&["chromedriver"]);
        let install = "apt-get install -y chromium chromium-driver";
        if !crate::support::tool_present(driver_bin.is_some(), "chromedriver", install) {
            return None;
        }
        let driver_bin = driver_bin?;
        let port = free_port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr = format!("127.0.0.1:{port}");
        wait_for(Duration::from_secs(30), "chromedriver to listen", || {
            TcpStream::connect(&addr).ok()
        });
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
        };
        let caps = json!({"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{
            "args":["--headless=new","--no-sandbox","--disable-gpu","--disable-dev-shm-usage","--window-size=1400,900"]}}}});
        let v = b.call("POST", "/session", &caps);
        b.session = v["sessionId"].as_str().expect("a session id").to_string();
        Some(b)
    }

    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if method == "GET" {
            String::new()
        } else {
            body.to_string()
        };
        let (status, _, text) = http(
            &self.addr,
            method,
            path,
            &[("Content-Type", "application/json")],
            &body,
        );
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(status, 200, "WebDriver {method} {path}: {text}");
        v["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: &Value) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn go(&self, url: &str) {
        self.session_call("POST", "/url", &json!({"url": url}));
    }

    /// Runs `script` in the page and returns its value.
    fn eval(&self, script: &str) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            &json!({"script": script, "args": []}),
        )
    }

    fn wait_eval(&self, what: &str, script: &str, cond: impl Fn(&Value) -> bool) -> Value {
        wait_for(Duration::from_secs(30), what, || {
            let v = self.eval(script);
            cond(&v).then_some(v)
        })
    }

    /// Clicks the element `css` names. The board redraws rows as events
    /// arrive, so a WebDriver element reference can go stale between finding
    /// and clicking it: the page finds and clicks in one script instead,
    /// retried until the element is there.
    fn click(&self, css: &str) {
        let selector = serde_json::to_string(css).expect("a JSON string");
        self.wait_eval(
            &format!("a click on {css}"),
            &format!(
                "const e = document.querySelector({selector}); \
                 if (!e) return false; e.click(); return true;"
            ),
            |v| *v == json!(true),
        );
    }

    fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.session_call("GET", "/screenshot", &Value::Null);
        let png = base64_decode(b64.as_str().expect("base64 png"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let dir = artifacts_dir();
        std::fs::create_dir_all(&dir).expect("artifacts dir");
        let path = dir.join(name);
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = http(&self.addr, "DELETE", &path, &[], "");
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn artifacts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("web-artifacts")
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits: Vec<u32> = s.bytes().filter_map(val).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | d << (18 - 6 * i));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

/// The approval the browser test answers: a Pi RPC confirm.
const PI_CONFIRM: &str = r#"{"type":"extension_ui_request","id":"w1","method":"confirm","title":"Delete x?","message":"rm -rf x"}"#;
/// Pi's exact reply to an approved `PI_CONFIRM`.
const PI_CONFIRMED: &str = r#"{"type":"extension_ui_response","id":"w1","confirmed":true}"#;

/// A Pi agent in RPC mode that asks `PI_CONFIRM` once a line arrives on its
/// input (so the test can time the state change), writes the next line it
/// reads (the answer) to the returned file, then ends its run.
fn pi_asking_agent(d: &Colibrid) -> (String, String) {
    pi_asking_agent_named(d, "pi-asker")
}

fn pi_asking_agent_named(d: &Colibrid, name: &str) -> (String, String) {
    let got = d.path(&format!("{name}.answer")).display().to_string();
    let script = d.script(
        name,
        &format!(
            "IFS= read -r cue\nprintf '%s\\n' '{PI_CONFIRM}'\nIFS= read -r line\nprintf '%s\\n' \"$line\" > {got}.tmp\nmv {got}.tmp {got}\nprintf '%s\\n' '{{\"type\":\"agent_end\",\"messages\":[]}}'\nexec sleep 600"
        ),
    );
    (script, got)
}

/// An agent's own request (`colibri approval-request --wait` from inside
/// its pane) shows on the board like a harness's, and the board's approve
/// (the POST its button sends) reaches the waiting agent, which exits 0;
/// the history says who answered.
#[test]
fn an_agents_own_request_is_approved_from_the_board_and_reaches_it() {
    use crate::approvals::{asked, scripted_agent, ASK};
    let d = Colibrid::start(&[]);
    let web = Web::start(&d);
    let bearer = format!("Bearer {}", web.token);
    let body = format!("{ASK}\nask one --wait 60s --tokens 300 \"restart the db jail\"");
    let (id, out) = scripted_agent(&d, "asker", &body);
    let shown = wait_for(Duration::from_secs(30), "the request on the board", || {
        let (status, _, body) = http(
            &web.addr,
            "GET",
            "/api/snapshot",
            &[("Authorization", &bearer)],
            "",
        );
        assert_eq!(status, 200, "{body}");
        let snap: Value = serde_json::from_str(&body).ok()?;
        snap["board"]["approvals"]
            .as_array()?
            .iter()
            .find(|a| a["pane"] == json!(id))
            .cloned()
    });
    assert_eq!(shown["channel"], json!("reply"), "{shown}");
    assert_eq!(shown["question"], json!("restart the db jail"), "{shown}");
    let approval = shown["id"].as_str().expect("id").to_string();
    let (status, _, reply) = http(
        &web.addr,
        "POST",
        "/api/approve",
        &[("Authorization", &bearer)],
        &json!({"pane": id, "approval": approval}).to_string(),
    );
    assert_eq!(status, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).expect("json");
    assert_eq!(reply["ok"], json!(true), "{reply}");
    assert_eq!(
        asked(&out, "one"),
        format!("{approval}: approved by operator via board\nrc=0\n")
    );
    let list = d.ok(json!({"cmd":"approvals","agent_id": id}));
    assert_eq!(
        list["approved"][0]["by"],
        json!("operator via board"),
        "{list}"
    );
    assert_eq!(
        list["approved"][0]["estimated_tokens"],
        json!(300),
        "{list}"
    );
}

#[test]
fn web_board_in_a_headless_browser() {
    let d = Colibrid::start(&[]);
    let (script, got) = pi_asking_agent(&d);
    let id = d.spawn(&[&script], json!({"name":"asker","runtime":"pi"}));
    let web = Web::start(&d);
    let Some(browser) = Browser::start() else {
        return;
    };
    let base = format!("http://{}", web.addr);

    // Without the token: refused.
    browser.go(&format!("{base}/"));
    let text = browser.eval("return document.body.innerText;");
    assert!(text.as_str().is_some_and(|t| t.contains("401")), "{text}");
    browser.screenshot("refused.png");

    // Logged in: the board shows the pane.
    browser.go(&format!("{base}/?token={}", web.token));
    let row = format!("#panes tr[data-pane='{id}']");
    browser.wait_eval(
        "the pane's row",
        &format!("return document.querySelector(\"{row}\") !== null;"),
        |v| *v == json!(true),
    );
    // The session lives in the tab: no cookie, and not in the address.
    let kept = browser.eval("return [document.cookie, location.href];");
    assert_eq!(kept[0], json!(""), "a cookie was set: {kept}");
    assert!(
        kept[1]
            .as_str()
            .is_some_and(|u| !u.contains("session") && !u.contains("token")),
        "{kept}"
    );

    // A state change in the daemon reaches the page: the cue makes the
    // agent ask, which blocks the pane.
    let state_js = format!("return document.querySelector(\"{row}\").dataset.state;");
    let started = Instant::now();
    d.ok(json!({"cmd":"send-input","agent_id":id,"text":"ask"}));
    browser.wait_eval("the row to show blocked", &state_js, |v| {
        *v == json!("blocked")
    });
    // With the seed's health word for it.
    let health_js = format!("return document.querySelector(\"{row}\").dataset.health;");
    browser.wait_eval("the row's health word", &health_js, |v| {
        *v == json!("waiting_permission")
    });
    let latency = started.elapsed();
    eprintln!("web board: state change on the page after {latency:?}");

    // The daemon opened an approval for the request, and the page lists
    // that approval (not only the blocked pane's fallback buttons).
    let pending = wait_for(Duration::from_secs(30), "the approval to open", || {
        let data = d.ok(json!({"cmd":"approvals","agent_id":id}));
        data["approvals"]
            .as_array()
            .and_then(|a| a.first().cloned())
    });
    assert_eq!(pending["kind"], json!("confirm"), "{pending}");
    let approval = pending["id"].as_str().expect("an approval id").to_string();
    let approve_button = format!("#approvals li[data-pane='{id}'] button.approve");
    browser.wait_eval(
        "the approvals list to offer the approval",
        &format!(
            "return approvals.some((a) => a.id === '{approval}' && a.pane === '{id}') \
             && document.querySelector(\"{approve_button}\") !== null;"
        ),
        |v| *v == json!(true),
    );
    let shot = browser.screenshot("board-blocked.png");
    assert!(std::fs::metadata(&shot).expect("screenshot").len() > 1000);

    // A click on pause reaches the agent (it is stopped), and one on
    // resume lets it go on.
    browser.click(&format!("{row} button.pause"));
    wait_for(
        Duration::from_secs(30),
        "the click to pause the agent",
        || (d.pane(&id)["paused"] == json!(true)).then_some(()),
    );
    let pause_label = format!("return document.querySelector(\"{row} button.pause\").textContent;");
    browser.wait_eval("the row's button to offer resume", &pause_label, |v| {
        *v == json!("resume")
    });
    // The row says why: the operator's hold (the next snapshot brings it).
    browser.wait_eval(
        "the row to say who paused it",
        &format!(
            "const f = document.querySelector(\"{row} span.flag\"); return f ? f.textContent : '';"
        ),
        |v| *v == json!("paused by the operator"),
    );
    browser.click(&format!("{row} button.pause"));
    wait_for(
        Duration::from_secs(30),
        "the click to resume the agent",
        || (d.pane(&id)["paused"] == json!(false)).then_some(()),
    );
    browser.wait_eval("the row's button to offer pause", &pause_label, |v| {
        *v == json!("pause")
    });

    // An approve click reaches the agent: it reads Pi's exact reply to its
    // request on its input, goes on, and the page shows the pane leave
    // `blocked` with the approval gone and no error.
    browser.click(&approve_button);
    let answer = wait_for(
        Duration::from_secs(30),
        "the agent to read the answer",
        || std::fs::read_to_string(&got).ok(),
    );
    assert_eq!(answer, format!("{PI_CONFIRMED}\n"));
    let state = browser.wait_eval("the row to leave blocked", &state_js, |v| {
        v.as_str().is_some_and(|s| s != "blocked")
    });
    assert_eq!(
        state,
        json!("idle"),
        "the agent's agent_end settles the pane"
    );
    assert_eq!(d.pane(&id)["state"], json!("idle"));
    browser.wait_eval(
        "the approvals list to drop the answered approval",
        &format!("return document.querySelector(\"#approvals li[data-pane='{id}']\") === null;"),
        |v| *v == json!(true),
    );
    let error_shown = browser.eval("return !document.getElementById('action-error').hidden;");
    assert_eq!(error_shown, json!(false), "the page shows an action error");
    let left = d.ok(json!({"cmd":"approvals","agent_id":id}));
    let left = left["approvals"].as_array().cloned().unwrap_or_default();
    assert!(left.is_empty(), "still pending: {left:?}");
    browser.screenshot("board-after-actions.png");

    // A planned stop reads "stopped", not the red "error" of its SIGTERM,
    // and a pane with no process offers no pause.
    d.ok(json!({"cmd":"stop-agent","agent_id":id}));
    browser.wait_eval("the row to say stopped", &state_js, |v| {
        *v == json!("stopped")
    });
    browser.wait_eval(
        "the pause button to go",
        &format!("return document.querySelector(\"{row} button.pause\").hidden;"),
        |v| *v == json!(true),
    );
    browser.screenshot("board-stopped.png");

    // A select question is answered on the board with one of its options,
    // and the agent reads Pi's exact reply for it.
    let got2 = d.path("chooser.answer").display().to_string();
    let select = r#"{"type":"extension_ui_request","id":"s1","method":"select","title":"Which?","options":["alpha","beta","gamma"]}"#;
    let script = d.script(
        "chooser",
        &format!(
            "printf '%s\\n' '{select}'\nIFS= read -r line\nprintf '%s\\n' \"$line\" > {got2}.tmp\nmv {got2}.tmp {got2}\nexec sleep 600"
        ),
    );
    let chooser = d.spawn(&[&script], json!({"name":"chooser","runtime":"pi"}));
    let item = format!("#approvals li[data-pane='{chooser}']");
    browser.wait_eval(
        "the select question with its options",
        &format!("return document.querySelectorAll(\"{item} select option\").length;"),
        |v| *v == json!(3),
    );
    browser.eval(&format!(
        "document.querySelector(\"{item} select\").value = 'beta'; return true;"
    ));
    browser.click(&format!("{item} button.answer"));
    let answer = wait_for(Duration::from_secs(30), "the chosen option", || {
        std::fs::read_to_string(&got2).ok()
    });
    assert_eq!(
        answer,
        "{\"type\":\"extension_ui_response\",\"id\":\"s1\",\"value\":\"beta\"}\n"
    );
}

/// A stand-in for an ntfy server: each published message's headers go to
/// the channel, answered 200 as ntfy does.
fn ntfy_server(listener: TcpListener, got: std::sync::mpsc::Sender<String>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { return };
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let (mut head, mut len) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
        }
        let mut body = vec![0; len];
        let _ = reader.read_exact(&mut body);
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        if got.send(head).is_err() {
            return;
        }
    }
}

/// The `http` actions of an ntfy `Actions` header: (label, method, URL).
fn ntfy_actions(head: &str) -> Vec<(String, String, String)> {
    let header = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("Actions: ")
                .or_else(|| l.strip_prefix("actions: "))
        })
        .unwrap_or_default();
    header
        .split(';')
        .filter_map(|a| {
            let parts: Vec<&str> = a.split(',').map(str::trim).collect();
            let method = parts
                .iter()
                .find_map(|p| p.strip_prefix("method="))
                .unwrap_or("POST");
            (parts.first() == Some(&"http")).then(|| {
                (
                    parts[1].to_string(),
                    method.to_string(),
                    parts[2].to_string(),
                )
            })
        })
        .collect()
}

/// The phone's Approve and Deny buttons work, and only as meant: `colibri
/// notify` publishes to ntfy two signed URLs for one approval, and the test
/// performs each exactly as the ntfy app does (the action's method and
/// URL, no headers, no body) against the real board. Approve reaches the
/// agent; the same URL again, and the Deny of an answered approval, are
/// refused; a URL changed in any field is refused; the login token never
/// appears in what ntfy received. Before, the buttons pointed at
/// `/approve/<pane>`, a route the board did not serve, and answered 401.
#[test]
fn a_phone_action_answers_one_approval_once_as_ntfy_performs_it() {
    let d = Colibrid::start(&[]);
    let (script, got) = pi_asking_agent(&d);
    let id = d.spawn(&[&script], json!({"name":"asker","runtime":"pi"}));
    let web = Web::start(&d);
    let ntfy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let ntfy_addr = ntfy.local_addr().expect("addr");
    let (tx, published) = std::sync::mpsc::channel();
    std::thread::spawn(move || ntfy_server(ntfy, tx));
    let config = d.path("notify.toml");
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nkind = \"ntfy\"\nurl = \"http://{ntfy_addr}/colibri\"\nboard_url = \"http://{}\"\naction_key = \"{}\"\n",
            web.addr,
            d.path("web-action-key").display()
        ),
    )
    .expect("config");
    let cursor = d.path("notify.cursor");
    let mut notify = Command::new(COLIBRI)
        .arg("--socket")
        .arg(&d.socket)
        .arg("notify")
        .arg("--config")
        .arg(&config)
        .arg("--cursor")
        .arg(&cursor)
        .stdout(Stdio::null())
        .spawn()
        .expect("colibri notify");
    wait_for(Duration::from_secs(20), "notify to watch", || {
        cursor.exists().then_some(())
    });
    d.ok(json!({"cmd":"send-input","agent_id":id,"text":"ask"}));
    let head = published
        .recv_timeout(Duration::from_secs(30))
        .expect("a message published to ntfy");
    let _ = notify.kill();
    let _ = notify.wait();
    assert!(
        !head.contains(&web.token),
        "the login token went to ntfy: {head}"
    );
    let actions = ntfy_actions(&head);
    let labels: Vec<&str> = actions.iter().map(|(l, _, _)| l.as_str()).collect();
    assert_eq!(labels, ["Approve", "Deny"], "{head}");
    let perform = |method: &str, url: &str| {
        let path = url
            .strip_prefix(&format!("http://{}", web.addr))
            .unwrap_or_else(|| panic!("{url} is not on the board"));
        http(&web.addr, method, path, &[], "")
    };
    let (_, approve_method, approve_url) = &actions[0];
    let (_, deny_method, deny_url) = &actions[1];
    // A changed URL: the decision swapped into the Approve URL's signature.
    let forged = approve_url.replace("&d=approve&", "&d=deny&");
    let (status, _, body) = perform(approve_method, &forged);
    assert_eq!(status, 403, "{body}");
    // A link preview's GET decides nothing.
    let (status, _, _) = perform("GET", approve_url);
    assert_eq!(status, 405);
    assert!(!d.ok(json!({"cmd":"approvals"}))["approvals"]
        .as_array()
        .is_none_or(Vec::is_empty));
    let (status, _, body) = perform(approve_method, approve_url);
    assert_eq!(status, 200, "{body}");
    let answer = wait_for(
        Duration::from_secs(30),
        "the agent to read the answer",
        || std::fs::read_to_string(&got).ok(),
    );
    assert_eq!(answer, format!("{PI_CONFIRMED}\n"));
    // Once only: the same button again, and the other button, find
    // nothing to answer.
    let (status, _, body) = perform(approve_method, approve_url);
    assert_eq!(status, 410, "{body}");
    let (status, _, body) = perform(deny_method, deny_url);
    assert_eq!(status, 410, "{body}");
    // The answer's record says how it was given.
    let answered = std::fs::read_dir(d.state.join("sessions"))
        .expect("sessions")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .find(|t| t.contains("\"colibri\":\"answer\""))
        .expect("an answer record");
    assert!(
        answered.contains("\"by\":\"operator via phone action\""),
        "{answered}"
    );

    // A second agent's Deny button denies its approval.
    let (script, got2) = pi_asking_agent_named(&d, "second");
    let id2 = d.spawn(&[&script], json!({"name":"second","runtime":"pi"}));
    let mut notify = Command::new(COLIBRI)
        .arg("--socket")
        .arg(&d.socket)
        .args(["notify", "--config"])
        .arg(&config)
        .arg("--cursor")
        .arg(&cursor)
        .stdout(Stdio::null())
        .spawn()
        .expect("colibri notify");
    d.ok(json!({"cmd":"send-input","agent_id":id2,"text":"ask"}));
    let head = loop {
        let head = published
            .recv_timeout(Duration::from_secs(30))
            .expect("the second message");
        if head.contains(&format!("pane={id2}")) {
            break head;
        }
    };
    let _ = notify.kill();
    let _ = notify.wait();
    let actions = ntfy_actions(&head);
    let (_, deny_method, deny_url) = &actions[1];
    let (status, _, body) = perform(deny_method, deny_url);
    assert_eq!(status, 200, "{body}");
    let answer = wait_for(Duration::from_secs(30), "the denial", || {
        std::fs::read_to_string(&got2).ok()
    });
    assert_eq!(
        answer,
        "{\"type\":\"extension_ui_response\",\"id\":\"w1\",\"confirmed\":false}\n"
    );
}

/// An agent's dialogs cost the board what it keeps, not what the agent
/// wrote: 60 open permission requests carrying 200 KB tool inputs leave
/// `colibri web` small, end to end (the daemon's approval view and the
/// board's own caps, `lib web::board` tests, both bound it).
#[test]
fn an_agents_large_dialogs_leave_the_board_small() {
    const DIALOGS: usize = 60;
    let d = Colibrid::start(&[]);
    let web = Web::start(&d);
    let big = "x".repeat(200_000);
    let lines: String = (0..DIALOGS)
        .map(|i| {
            json!({"type":"control_request","request_id": format!("r{i}"),
                "request":{"subtype":"can_use_tool","tool_name":"Bash",
                "input":{"command": big},"tool_use_id": format!("tu{i}")}})
            .to_string()
                + "\n"
        })
        .collect();
    // Two agents: a pane holds at most 32 pending approvals.
    let halves = lines.split_inclusive('\n').collect::<Vec<_>>();
    let ids: Vec<String> = halves
        .chunks(DIALOGS / 2)
        .enumerate()
        .map(|(i, half)| {
            let file = d.path(&format!("dialogs{i}.jsonl"));
            std::fs::write(&file, half.concat()).expect("dialogs");
            d.spawn(
                &[
                    "/bin/sh",
                    "-c",
                    &format!("cat {}; exec sleep 600", file.display()),
                ],
                json!({"runtime":"claude"}),
            )
        })
        .collect();
    let bearer = format!("Bearer {}", web.token);
    let snap = wait_for(Duration::from_secs(60), "every dialog on the board", || {
        let (status, _, body) = http(
            &web.addr,
            "GET",
            "/api/snapshot",
            &[("Authorization", &bearer)],
            "",
        );
        let snap: Value = serde_json::from_str(&body).ok()?;
        let shown = snap["board"]["approvals"].as_array()?.len();
        (status == 200 && shown == DIALOGS).then_some(snap)
    });
    let kept = snap["board"]["approvals"][0].to_string().len();
    assert!(
        kept < 80 << 10,
        "one dialog keeps {kept} bytes on the board"
    );
    let rss = crate::support::rss_kib(web.child.id() as i32);
    assert!(
        rss < 96 << 10,
        "colibri web holds {rss} KiB for {DIALOGS} dialogs"
    );
    for id in ids {
        d.ok(json!({"cmd":"kill-agent","agent_id": id}));
    }
}

/// The board outlives what any local user can do to it: connections past
/// its fd limit (it answers again once they close) and a head past 16 KiB
/// (431, at once, without reading it all). Before, tiny_http stopped
/// accepting for good at its first accept error (516 idle connections at
/// a 1,024 fd limit killed the listener while the process lived on) and
/// read heads without a limit (three 128 MiB headers added 384 MiB).
#[test]
fn the_board_outlives_connections_past_its_fd_limit_and_refuses_huge_heads() {
    let d = Colibrid::start(&[]);
    let web = Web::start_with_fd_limit(&d, 64);
    let addr: std::net::SocketAddr = web.addr.parse().expect("an address");
    let idle: Vec<TcpStream> = (0..150)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect();
    assert!(idle.len() > 64, "only {} connections opened", idle.len());
    drop(idle);
    wait_for(Duration::from_secs(30), "the board to answer again", || {
        let (status, _, _) = http(&web.addr, "GET", "/board.css", &[], "");
        (status == 200).then_some(())
    });
    // The board answers and closes after 16 KiB: the rest of the write may
    // fail, the answer is there to read.
    let mut s = TcpStream::connect(&web.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let huge = format!("GET / HTTP/1.1\r\nX-Huge: {}\r\n\r\n", "a".repeat(1 << 20));
    let _ = s.write_all(huge.as_bytes());
    let mut answer = [0u8; 12];
    s.read_exact(&mut answer).expect("an answer");
    assert_eq!(&answer, b"HTTP/1.1 431");
    let rss = crate::support::rss_kib(web.child.id() as i32);
    assert!(rss < 64 << 10, "colibri web holds {rss} KiB");
}
