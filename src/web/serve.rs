//! The board's process: the threads that follow the daemon (a `watch`
//! stream, a snapshot refresh) and feed [`Board`], and the HTTP server
//! that serves it. Built with the `web` feature.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::client::{Client, ClientError};
use crate::protocol::request;
use crate::protocol::Command;

pub use super::board::Board;
use super::http;
use super::{action, auth, server};

/// How often usage, cost and approvals are refreshed from a snapshot.
pub const REFRESH: Duration = Duration::from_secs(2);
/// How long to wait before calling a daemon that went away again.
const RETRY: Duration = Duration::from_secs(1);
/// A request to the daemon that takes longer than this has failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What `colibri web` was asked to do.
#[derive(Clone, Debug)]
pub struct WebOptions {
    pub socket: PathBuf,
    pub listen: SocketAddr,
    pub token_file: PathBuf,
    /// The key of phone action URLs (`action`), shared with `colibri
    /// notify`.
    pub action_key_file: PathBuf,
}

/// Why the board could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("cannot listen on {addr}: {msg}")]
    Listen { addr: SocketAddr, msg: String },
    #[error(transparent)]
    Token(#[from] auth::TokenError),
    #[error(transparent)]
    ActionKey(#[from] action::KeyError),
}

/// Runs the board until the process is killed.
pub fn run(opts: &WebOptions, out: &mut impl std::io::Write) -> Result<(), WebError> {
    let (token, created) = auth::load_or_create(&opts.token_file)?;
    let action_key = action::ActionKey::load_or_create(&opts.action_key_file)?;
    let listener = std::net::TcpListener::bind(opts.listen).map_err(|e| WebError::Listen {
        addr: opts.listen,
        msg: e.to_string(),
    })?;
    let addr = listener
        .local_addr()
        .map_or_else(|_| opts.listen.to_string(), |a| a.to_string());
    let board = Arc::new(Board::new(new_run_id()));
    spawn_followers(&opts.socket, &board);
    // Printed once: the address, and the token the first time only.
    let banner = if created {
        format!(
            "colibri web: listening on http://{addr}/\n\
             colibri web: new token (printed once; kept in {}):\n\
             http://{addr}/?token={token}\n",
            opts.token_file.display()
        )
    } else {
        format!(
            "colibri web: listening on http://{addr}/ (token in {})\n",
            opts.token_file.display()
        )
    };
    let _ = out.write_all(banner.as_bytes());
    let _ = out.flush();
    let ctx = Arc::new(http::Ctx {
        token,
        sessions: auth::Sessions::default(),
        socket: opts.socket.clone(),
        board,
        action_key,
    });
    // SSE responses last as long as the page: each connection its thread.
    let handle: Arc<dyn Fn(server::Request) + Send + Sync> =
        Arc::new(move |req| http::handle(&ctx, req));
    server::serve(listener, server::Limits::default(), handle).map_err(|e| WebError::Listen {
        addr: opts.listen,
        msg: e.to_string(),
    })
}

fn new_run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

fn spawn_followers(socket: &Path, board: &Arc<Board>) {
    let (s, b) = (socket.to_path_buf(), Arc::clone(board));
    std::thread::spawn(move || follow_watch(&s, &b));
    let (s, b) = (socket.to_path_buf(), Arc::clone(board));
    std::thread::spawn(move || refresh_loop(&s, &b));
}

/// Keeps one watch connection open, reconnecting after a daemon restart.
fn follow_watch(socket: &Path, board: &Board) {
    let mut epoch: Option<String> = None;
    loop {
        let err = match watch_once(socket, board, &mut epoch) {
            Ok(()) => "the daemon closed the watch stream".to_string(),
            Err(e) => e.to_string(),
        };
        board.update(|s| s.set_connected(false, Some(err)));
        std::thread::sleep(RETRY);
    }
}

fn watch_once(socket: &Path, board: &Board, epoch: &mut Option<String>) -> Result<(), ClientError> {
    let mut client = Client::connect(socket, REQUEST_TIMEOUT)?;
    let data = client.call(&request::watch(&[], None))?;
    let new_epoch = data
        .get("epoch")
        .and_then(Value::as_str)
        .map(str::to_string);
    let restarted = epoch.is_some() && *epoch != new_epoch;
    *epoch = new_epoch;
    refresh(socket, board)?;
    board.update(|s| {
        if restarted {
            s.restart(new_run_id());
        }
        s.set_connected(true, None);
    });
    for line in client.stream() {
        let ev = line?;
        board.update(|s| s.apply_event(ev));
    }
    Ok(())
}

fn refresh_loop(socket: &Path, board: &Board) {
    loop {
        std::thread::sleep(REFRESH);
        // A failure shows through the watch thread's status.
        let _ = refresh(socket, board);
    }
}

/// Takes a v2 snapshot and the pending approvals into the board.
fn refresh(socket: &Path, board: &Board) -> Result<(), ClientError> {
    let snap = Client::connect(socket, REQUEST_TIMEOUT)?.call(&request::snapshot("v2"))?;
    let now = snap.get("observed_at").and_then(Value::as_str).map_or_else(
        || humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        str::to_string,
    );
    let panes = snap
        .get("panes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let approvals = Client::connect(socket, REQUEST_TIMEOUT)?
        .call(&request::approvals(None))
        .ok()
        .and_then(|d| {
            d.get("approvals")
                .or_else(|| d.get("pending"))
                .and_then(Value::as_array)
                .cloned()
        });
    board.update(|s| {
        s.apply_snapshot(&panes, &now);
        if let Some(list) = approvals {
            s.set_approvals(list);
        }
    });
    Ok(())
}

/// Sends one operator request; the reply envelope goes back to the page
/// as the daemon wrote it (so an unknown command shows the daemon's error).
pub fn forward(socket: &Path, req: &Command) -> Value {
    let reply = Client::connect(socket, REQUEST_TIMEOUT).and_then(|mut c| c.request(req));
    match reply {
        Ok(resp) => serde_json::to_value(&resp)
            .unwrap_or_else(|e| json!({"ok":false,"error":e.to_string(),"data":null})),
        Err(e) => json!({"ok":false,"error":e.to_string(),"code":"unreachable","data":null}),
    }
}
