//! The board's routes: the page, its event stream and its actions.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::action::{self, ActionKey};
use super::auth;
use super::board::{Board, Catchup};
use super::server::{Method, Request};
use crate::protocol::request;
use crate::protocol::Command as Wire;

const PAGE: &str = include_str!("assets/board.html");
const SCRIPT: &str = include_str!("assets/board.js");
const STYLE: &str = include_str!("assets/board.css");

/// Events that arrive within this window go to the page as one message, so
/// a burst over 1,000 panes costs the browser one update, not thousands.
const COALESCE: Duration = Duration::from_millis(100);
/// A comment line this often tells a dead page from a quiet board.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Open event streams beyond this are refused (503).
const MAX_STREAMS: usize = 256;

pub struct Ctx {
    pub token: String,
    pub sessions: auth::Sessions,
    pub socket: PathBuf,
    pub board: Arc<Board>,
    /// Checks phone action URLs (`super::action`).
    pub action_key: ActionKey,
}

static STREAMS: AtomicUsize = AtomicUsize::new(0);

fn reply(req: Request, status: u16, content_type: &str, body: impl Into<Vec<u8>>) {
    let headers = [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        (
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    ];
    req.respond(status, &headers, &body.into());
}

fn header_value<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.header(name)
}

fn query_value<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    action::query_field(url.split_once('?')?.1, key)
}

pub fn handle(ctx: &Ctx, req: Request) {
    let url = req.url().to_string();
    let path = url.split('?').next().unwrap_or("/").to_string();
    // A phone action carries its own credential (its signature), never the
    // login token: it is checked before, and instead of, the login.
    if path == action::ROUTE {
        return phone_action(ctx, req, &url);
    }
    let text = "text/plain; charset=utf-8";
    let method = req.method().clone();
    // The page and its assets hold no data: served to anyone. A login URL
    // (`/?token=…`) opens a session the page keeps in its tab.
    match (&method, path.as_str()) {
        (Method::Get, "/") => {
            if let Some(given) = query_value(&url, "token") {
                if !auth::same(given, &ctx.token) {
                    return reply(req, 401, text, UNAUTHORIZED);
                }
                return login(req, &ctx.sessions.open());
            }
            return reply(req, 200, "text/html; charset=utf-8", PAGE);
        }
        (Method::Get, "/board.js") => {
            return reply(req, 200, "text/javascript; charset=utf-8", SCRIPT)
        }
        (Method::Get, "/board.css") => return reply(req, 200, "text/css; charset=utf-8", STYLE),
        _ => {}
    }
    // An `EventSource` cannot send a header: its session is in the URL.
    let credential = auth::bearer(header_value(&req, "Authorization")).or_else(|| {
        (path == "/events")
            .then(|| query_value(&url, "session"))
            .flatten()
    });
    if !auth::authorized(credential, &ctx.token, &ctx.sessions) {
        return reply(req, 401, text, UNAUTHORIZED);
    }
    match (method, path.as_str()) {
        (Method::Get, "/api/snapshot") => {
            let (snap, seq) = ctx.board.snapshot();
            let body = json!({"run": ctx.board.run(), "seq": seq, "board": snap});
            reply(req, 200, "application/json", body.to_string())
        }
        (Method::Get, "/events") => events(ctx, req),
        (Method::Post, p) if p.starts_with("/api/") => {
            if let Err(why) = same_origin(&req) {
                return reply(req, 403, text, format!("403: {why}\n"));
            }
            action(ctx, req, &p["/api/".len()..])
        }
        _ => reply(req, 404, text, "404 not found\n"),
    }
}

const UNAUTHORIZED: &str = "401 unauthorized: open the URL colibri web printed (…/?token=…), \
                            or send Authorization: Bearer TOKEN\n";

/// A state-changing request must come from the board's own page (or from
/// a script, which sends neither header): a browser says where a request
/// comes from in `Origin` and `Sec-Fetch-Site`, and a page of another
/// origin (another port of the same host included) is refused, whatever
/// credential it found.
fn same_origin(req: &Request) -> Result<(), String> {
    if let Some(site) = header_value(req, "Sec-Fetch-Site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(format!("a request from another site ({site})"));
        }
    }
    let Some(origin) = header_value(req, "Origin") else {
        return Ok(());
    };
    let authority = origin.split_once("://").map_or(origin, |(_, a)| a);
    match header_value(req, "Host") {
        Some(host) if host.eq_ignore_ascii_case(authority) => Ok(()),
        host => Err(format!(
            "a request from {origin}, not from the board ({})",
            host.unwrap_or("no Host")
        )),
    }
}

/// `POST /act?pane=…&at=…&d=…&exp=…&sig=…`: one decision on one
/// approval, as a push notification's button sends it. Refused unless the
/// signature holds, the time has not passed, and the pane still waits on
/// the approval it asked at `at` (so a URL answers once).
fn phone_action(ctx: &Ctx, req: Request, url: &str) {
    let text = "text/plain; charset=utf-8";
    if *req.method() != Method::Post {
        // A link preview or prefetch must not decide anything.
        return reply(req, 405, text, "405: phone actions are POSTed\n");
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let Some((act, sig)) = action::Action::parse_query(query) else {
        return reply(req, 400, text, "400: not an action URL\n");
    };
    if !ctx.action_key.verify(&act, &sig) {
        return reply(
            req,
            403,
            text,
            "403: the action's signature does not hold\n",
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now > act.expires {
        return reply(req, 410, text, "410: this action has expired\n");
    }
    let Some(approval) = pending_asked_at(ctx, &act) else {
        return reply(
            req,
            410,
            text,
            "410: nothing to answer: the approval was answered or is no longer pending\n",
        );
    };
    let verb = match act.decision {
        action::Decision::Approve => Wire::Approve,
        action::Decision::Deny => Wire::Deny,
    };
    let mut cmd = request::decide(verb, &approval, None, None);
    set_via(&mut cmd, "phone action");
    let resp = super::forward(&ctx.socket, &cmd);
    if resp["ok"] == json!(true) {
        let done = format!("{}: {approval}\n", act.decision.as_str());
        return reply(req, 200, text, done);
    }
    let why = resp["error"].as_str().unwrap_or("the daemon refused");
    reply(req, 409, text, format!("409: {why}\n"))
}

/// The id of the approval `act.pane` asked at `act.asked_ms` and still
/// waits on; `None` if there is none, or more than one (never a guess).
fn pending_asked_at(ctx: &Ctx, act: &action::Action) -> Option<String> {
    let data = super::forward(&ctx.socket, &request::approvals(Some(&act.pane)));
    let list = data["data"]["approvals"].as_array()?;
    let asked_ms = |a: &Value| {
        let at = humantime::parse_rfc3339(a["asked_at"].as_str()?).ok()?;
        let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
        u64::try_from(ms).ok()
    };
    let mut matching = list
        .iter()
        .filter(|a| a["pane"] == json!(act.pane) && asked_ms(a) == Some(act.asked_ms));
    let first = matching.next()?;
    if matching.next().is_some() {
        return None;
    }
    first["id"].as_str().map(str::to_string)
}

/// Records how an operator decided (`board`, `phone action`).
fn set_via(cmd: &mut Wire, how: &str) {
    if let Wire::Approve(a) | Wire::Deny(a) | Wire::Answer(a) = cmd {
        a.via = Some(how.to_string());
    }
}

/// Sends the browser to `/` with the new session in the fragment, which
/// never leaves the browser: the page moves it into its tab's storage and
/// drops it from the address (never a path from the request: `//host`
/// there would be a redirect off the board). No cookie is set.
fn login(req: Request, session: &str) {
    let location = format!("/#session={session}");
    let headers = [
        ("Location", location.as_str()),
        ("Cache-Control", "no-store"),
        ("Referrer-Policy", "no-referrer"),
    ];
    req.respond(303, &headers, b"");
}

/// The daemon request an action posts: `approve`, `deny`, `answer` (the
/// approvals commands, which take an approval id or a pane), `pause`,
/// `resume`.
fn daemon_request(action: &str, body: &Value) -> Option<Wire> {
    let pane = body.get("pane").and_then(Value::as_str)?;
    let target = body.get("approval").and_then(Value::as_str).unwrap_or(pane);
    let text_of = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
    };
    Some(match action {
        "approve" => request::decide(Wire::Approve, target, None, None),
        "deny" => request::decide(Wire::Deny, target, text_of("message"), None),
        "answer" => request::decide(Wire::Answer, target, None, Some(text_of("text")?)),
        "pause" => request::agent(Wire::PauseAgent, pane),
        "resume" => request::agent(Wire::ResumeAgent, pane),
        _ => return None,
    })
}

fn action(ctx: &Ctx, req: Request, action: &str) {
    // Read whole, within the server's body limit.
    let parsed: Value = serde_json::from_slice(req.body()).unwrap_or(Value::Null);
    let Some(cmd) = daemon_request(action, &parsed) else {
        let msg = json!({"ok":false,"error":format!("unknown action {action:?} or no \"pane\"")});
        return reply(req, 400, "application/json", msg.to_string());
    };
    let mut cmd = cmd;
    set_via(&mut cmd, "board");
    let resp = super::forward(&ctx.socket, &cmd);
    reply(req, 200, "application/json", resp.to_string())
}

fn parse_last_id(req: &Request) -> Option<(String, u64)> {
    let v = header_value(req, "Last-Event-ID")?;
    let (run, seq) = v.split_once(':')?;
    Some((run.to_string(), seq.parse().ok()?))
}

fn events(ctx: &Ctx, req: Request) {
    if STREAMS.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
        return reply(req, 503, "text/plain", "too many open boards\n");
    }
    let last = parse_last_id(&req);
    let mut w = req.into_stream();
    // The stream ends when the page goes (a write fails).
    let _ = stream(ctx, &mut w, last);
    STREAMS.fetch_sub(1, Ordering::SeqCst);
}

fn stream(ctx: &Ctx, w: &mut dyn Write, last: Option<(String, u64)>) -> std::io::Result<()> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
          X-Accel-Buffering: no\r\nConnection: close\r\n\r\nretry: 1000\n\n",
    )?;
    w.flush()?;
    // A page that names no position (or a stale one) starts from a snapshot.
    let (mut run, mut seq) = last.unwrap_or_default();
    loop {
        match ctx.board.after(&run, seq, KEEPALIVE) {
            Catchup::Snapshot(snap, last) => {
                run = ctx.board.run();
                seq = last;
                send(w, "snapshot", &run, seq, &snap)?;
            }
            Catchup::Items(items, last) if items.is_empty() => {
                seq = last;
                w.write_all(b": keepalive\n\n")?;
                w.flush()?;
            }
            Catchup::Items(items, last) => {
                seq = last;
                send(w, "batch", &run, seq, &Value::Array(items))?;
            }
        }
        std::thread::sleep(COALESCE);
    }
}

fn send(w: &mut dyn Write, event: &str, run: &str, seq: u64, data: &Value) -> std::io::Result<()> {
    // serde_json never writes a raw newline inside a value: one data line.
    write!(w, "id: {run}:{seq}\nevent: {event}\ndata: {data}\n\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_become_daemon_requests() {
        let b = json!({"pane":"p1"});
        let sent = |action: &str, body: &Value| {
            daemon_request(action, body).map(|c| {
                serde_json::from_slice::<Value>(&c.to_line().expect("encodes")).expect("JSON")
            })
        };
        assert_eq!(
            sent("approve", &b),
            Some(json!({"cmd":"approve","approval":"p1"}))
        );
        assert_eq!(
            sent(
                "deny",
                &json!({"pane":"p1","approval":"a-1","message":"no"})
            ),
            Some(json!({"cmd":"deny","approval":"a-1","message":"no"}))
        );
        assert_eq!(
            sent("pause", &b),
            Some(json!({"cmd":"pause-agent","agent_id":"p1"}))
        );
        assert_eq!(
            sent("answer", &json!({"pane":"p1","text":"2"})),
            Some(json!({"cmd":"answer","approval":"p1","text":"2"}))
        );
        assert_eq!(sent("answer", &b), None, "an answer needs its text");
        assert_eq!(daemon_request("rm", &b), None);
        assert_eq!(daemon_request("pause", &json!({})), None);
    }

    #[test]
    fn the_login_token_is_read_from_the_query() {
        assert_eq!(query_value("/?token=abc&x=1", "token"), Some("abc"));
        assert_eq!(query_value("/?x=1", "token"), None);
        assert_eq!(query_value("/", "token"), None);
    }
}
