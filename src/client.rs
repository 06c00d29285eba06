//! A small blocking client for the daemon socket: one request line out,
//! one reply line back, or a `watch` stream of event lines.
//!
//! The CLI is a short-lived process, so blocking I/O with timeouts is the
//! simplest correct shape here (the daemon, not this client, must never
//! block). Every reply line is read with a hard cap so a broken or hostile
//! peer cannot make the client allocate without bound.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::protocol::{Command, Request, Response, WatchArgs};

/// The operator socket when neither `--socket` nor `COLIBRI_SOCKET` names one.
pub const DEFAULT_SOCKET: &str = "/var/run/colibri/colibri.sock";

/// The environment variable that names the socket (also set for agents).
pub const SOCKET_ENV: &str = "COLIBRI_SOCKET";

/// Longest reply line accepted. `get-session` returns whole session dumps,
/// so this is far above the daemon's request cap, but still finite.
pub const DEFAULT_MAX_REPLY: usize = 256 << 20;

/// Why a request did not produce a usable reply.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {}: {source} (is colibrid running? use --socket or COLIBRI_SOCKET)", path.display())]
    Connect { path: PathBuf, source: io::Error },
    #[error("socket I/O failed: {0}")]
    Io(#[source] io::Error),
    #[error("the daemon did not answer within {0:?}")]
    Timeout(Duration),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("{0}")]
    Daemon(String),
}

impl ClientError {
    /// The CLI's exit code for this error: 3 when the daemon cannot be
    /// reached at all, 1 for everything that happened after connecting.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Connect { .. } => 3,
            ClientError::Io(_)
            | ClientError::Timeout(_)
            | ClientError::Protocol(_)
            | ClientError::Daemon(_) => 1,
        }
    }
}

/// The socket to use: the explicit path (from `--socket`, which clap also
/// fills from `COLIBRI_SOCKET`), else a non-empty `COLIBRI_SOCKET`, else
/// [`DEFAULT_SOCKET`].
pub fn resolve_socket(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// The longest a connect is retried while the daemon's listen queue is full.
pub const BUSY_RETRY: Duration = Duration::from_secs(2);

/// Connects to the daemon's socket, waiting out a full listen queue.
///
/// FreeBSD refuses a Unix-socket connect with `ECONNREFUSED` while the
/// listener's queue holds `kern.ipc.soacceptqueue` connections (128 by
/// default), where Linux makes the client wait; a client in a tight
/// connect-and-close loop can keep it full between two wakeups of the
/// daemon. A busy daemon is not a missing one: the connect is retried,
/// with a growing pause, for up to `min(timeout, BUSY_RETRY)`, as long as
/// the socket file is there.
pub fn connect_stream(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    connect_stream_within(path, timeout.min(BUSY_RETRY))
}

/// The receive buffer colibri's clients ask for. FreeBSD paces a Unix
/// stream by the reader's receive buffer (64 KiB by default; measured in
/// the FreeBSD VM: the writer's send buffer changes nothing), where Linux
/// paces it by the writer's: a watcher that reads as fast as it can but
/// takes 64 KiB a wakeup fell behind a burst there and was dropped. The
/// kernel caps it (`kern.ipc.maxsockbuf`, `net.core.rmem_max`).
pub const RECEIVE_BUFFER: usize = 1024 * 1024;

/// [`connect_stream`] with the whole retry window given (a slow machine's
/// tests scale it).
pub fn connect_stream_within(path: &Path, window: Duration) -> io::Result<UnixStream> {
    let give_up = std::time::Instant::now() + window;
    let mut pause = Duration::from_millis(1);
    loop {
        match UnixStream::connect(path) {
            Ok(stream) => {
                // A smaller buffer only slows a reader down: not an error.
                let _ = nix::sys::socket::setsockopt(
                    &stream,
                    nix::sys::socket::sockopt::RcvBuf,
                    &RECEIVE_BUFFER,
                );
                return Ok(stream);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::WouldBlock
                ) && path.exists()
                    && std::time::Instant::now() + pause < give_up =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// One connection to the daemon.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    timeout: Duration,
    max_reply: usize,
}

impl Client {
    /// Connects and sets `timeout` on both reads and writes.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, ClientError> {
        let stream = connect_stream(path, timeout).map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        // A zero timeout means "none" to std; callers never want that here.
        let timeout = timeout.max(Duration::from_millis(1));
        stream
            .set_read_timeout(Some(timeout))
            .map_err(ClientError::Io)?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ClientError::Io)?;
        Ok(Client {
            reader: BufReader::new(stream),
            timeout,
            max_reply: DEFAULT_MAX_REPLY,
        })
    }

    /// Changes the reply line cap (tests use a small one).
    pub fn with_max_reply(mut self, max_reply: usize) -> Client {
        self.max_reply = max_reply.max(1);
        self
    }

    /// Sends one request and reads its reply envelope, whatever `ok` says.
    pub fn request(&mut self, cmd: &Command) -> Result<Response<Value>, ClientError> {
        self.request_as(cmd)
    }

    /// Sends one request and returns its `data` as the daemon wrote it
    /// (`null` when absent); a reply with `ok:false` becomes
    /// [`ClientError::Daemon`]. For replies that carry agent lines
    /// (`get-session`'s records): one that nests past serde_json's
    /// recursion limit (kept: it stops a hostile line from overflowing the
    /// stack) would fail the whole reply as a `Value`, and a raw value is
    /// scanned without recursion.
    pub fn call_raw(&mut self, cmd: &Command) -> Result<Box<RawValue>, ClientError> {
        let resp = self.request_as::<Box<RawValue>>(cmd)?;
        if !resp.ok {
            return Err(refusal(resp.error));
        }
        match resp.data {
            Some(data) => Ok(data),
            None => RawValue::from_string("null".to_string())
                .map_err(|e| ClientError::Protocol(format!("cannot make a null: {e}"))),
        }
    }

    fn request_as<T: DeserializeOwned>(
        &mut self,
        cmd: &Command,
    ) -> Result<Response<T>, ClientError> {
        self.send(cmd)?;
        let line = match read_line_capped(&mut self.reader, self.max_reply) {
            Ok(Some(line)) => line,
            Ok(None) => {
                return Err(ClientError::Protocol(
                    "the daemon closed the connection without a reply".into(),
                ))
            }
            Err(e) => return Err(self.read_error(e)),
        };
        serde_json::from_slice::<Response<T>>(&line)
            .map_err(|e| ClientError::Protocol(format!("reply is not a response envelope: {e}")))
    }

    /// Sends one request and returns its `data` (null when absent); a reply
    /// with `ok:false` becomes [`ClientError::Daemon`] with its message.
    pub fn call(&mut self, cmd: &Command) -> Result<Value, ClientError> {
        into_data(self.request(cmd)?)
    }

    /// Subscribes to the watch stream, first replaying the journaled events
    /// after `since` (a seq from an earlier event line; `None` for live
    /// events only), and returns the `watch` reply's data. Read the events
    /// with [`Client::stream`]; a `gap` event says the journal no longer
    /// reached back to `since`.
    pub fn watch_from(
        &mut self,
        panes: &[String],
        since: Option<u64>,
    ) -> Result<Value, ClientError> {
        self.call(&Command::Watch(WatchArgs {
            panes: (!panes.is_empty()).then(|| panes.to_vec()),
            since,
            ..WatchArgs::default()
        }))
    }

    /// The event lines that follow a `watch` reply, until the daemon closes
    /// the connection. A line with `"ok":false` (a watcher that fell behind)
    /// is yielded as [`ClientError::Daemon`] and ends the stream. Events can
    /// be minutes apart, so reads wait without a timeout.
    pub fn stream(&mut self) -> impl Iterator<Item = Result<Value, ClientError>> + '_ {
        let no_timeout = self
            .reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(ClientError::Io);
        let mut failed = no_timeout.err();
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            if let Some(e) = failed.take() {
                done = true;
                return Some(Err(e));
            }
            let item = match read_line_capped(&mut self.reader, self.max_reply) {
                Ok(None) => {
                    done = true;
                    return None;
                }
                Ok(Some(line)) => match serde_json::from_slice::<Value>(&line) {
                    Ok(v) => match stream_error(&v) {
                        Some(msg) => Err(ClientError::Daemon(msg)),
                        None => Ok(v),
                    },
                    Err(e) => Err(ClientError::Protocol(format!(
                        "stream line is not JSON: {e}"
                    ))),
                },
                Err(e) => Err(self.read_error(e)),
            };
            done = item.is_err();
            Some(item)
        })
    }

    /// Sends `request` (its `id` too) and returns the reply line as the
    /// daemon wrote it, without its newline: for a relay that hands the
    /// reply on untouched (the fleet bridge's `colibri.cmd.<host>`).
    pub fn relay(&mut self, request: &Request) -> Result<Vec<u8>, ClientError> {
        let line = request
            .to_line()
            .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
        self.send_line(&line)?;
        match read_line_capped(&mut self.reader, self.max_reply) {
            Ok(Some(line)) => Ok(line),
            Ok(None) => Err(ClientError::Protocol(
                "the daemon closed the connection without a reply".into(),
            )),
            Err(e) => Err(self.read_error(e)),
        }
    }

    fn send(&mut self, cmd: &Command) -> Result<(), ClientError> {
        let line = cmd
            .to_line()
            .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
        self.send_line(&line)
    }

    fn send_line(&mut self, line: &[u8]) -> Result<(), ClientError> {
        let stream = self.reader.get_mut();
        stream
            .write_all(line)
            .map_err(|e| io_error(e, self.timeout))?;
        stream.flush().map_err(|e| io_error(e, self.timeout))
    }

    fn read_error(&self, e: ReadError) -> ClientError {
        match e {
            ReadError::Io(e) => io_error(e, self.timeout),
            ReadError::TooLong => {
                ClientError::Protocol(format!("reply line longer than {} bytes", self.max_reply))
            }
            ReadError::Truncated => {
                ClientError::Protocol("the daemon closed the connection mid-line".into())
            }
        }
    }
}

/// The `data` of a reply, or its error when `ok` is false.
pub fn into_data(resp: Response<Value>) -> Result<Value, ClientError> {
    if resp.ok {
        Ok(resp.data.unwrap_or(Value::Null))
    } else {
        Err(refusal(resp.error))
    }
}

/// The error of a reply with `ok:false`.
fn refusal(error: Option<String>) -> ClientError {
    ClientError::Daemon(
        error.unwrap_or_else(|| "the daemon refused the request (no message)".into()),
    )
}

/// A stream line that is an error envelope rather than an event.
fn stream_error(v: &Value) -> Option<String> {
    match v.get("ok") {
        Some(Value::Bool(false)) => Some(
            v.get("error")
                .and_then(Value::as_str)
                .unwrap_or("the daemon ended the stream")
                .to_string(),
        ),
        _ => None,
    }
}

fn io_error(e: io::Error, timeout: Duration) -> ClientError {
    match e.kind() {
        // A socket read timeout surfaces as EAGAIN on Unix.
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout(timeout),
        _ => ClientError::Io(e),
    }
}

#[derive(Debug)]
enum ReadError {
    Io(io::Error),
    TooLong,
    Truncated,
}

/// Reads one `\n`-terminated line (without it) of at most `max` bytes.
/// `Ok(None)` is a clean end of stream between lines.
fn read_line_capped(reader: &mut impl BufRead, max: usize) -> Result<Option<Vec<u8>>, ReadError> {
    let mut line = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(ReadError::Truncated)
            };
        }
        let (chunk, found) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + chunk.len() > max {
            return Err(ReadError::TooLong);
        }
        line.extend_from_slice(chunk);
        let used = found.unwrap_or(buf.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::thread;

    /// A one-connection fake daemon: records the request line, then writes
    /// `reply` verbatim.
    fn fake_daemon(
        reply: &'static [u8],
    ) -> (tempfile::TempDir, PathBuf, thread::JoinHandle<Vec<u8>>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("d.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let handle = thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(conn);
            let request = read_line_capped(&mut reader, 1 << 20)
                .expect("read")
                .unwrap_or_default();
            let _ = reader.get_mut().write_all(reply);
            request
        });
        (dir, path, handle)
    }

    #[test]
    fn request_writes_one_line_and_reads_the_envelope() {
        let (_dir, path, server) =
            fake_daemon(b"{\"ok\":true,\"error\":null,\"data\":{\"agents\":2}}\n");
        let mut c = Client::connect(&path, Duration::from_secs(5)).expect("connect");
        let data = c.call(&Command::Status).expect("reply");
        assert_eq!(data["agents"], 2);
        assert_eq!(
            server.join().expect("server"),
            br#"{"cmd":"status"}"#.to_vec()
        );
    }

    #[test]
    fn ok_false_is_a_daemon_error_with_its_message() {
        let (_dir, path, _server) =
            fake_daemon(b"{\"ok\":false,\"error\":\"no such agent: x\",\"data\":null}\n");
        let mut c = Client::connect(&path, Duration::from_secs(5)).expect("connect");
        let resp = c
            .request(&Command::KillAgent(crate::protocol::AgentArgs {
                agent_id: "x".into(),
            }))
            .expect("envelope");
        assert!(!resp.ok);
        match into_data(resp) {
            Err(e @ ClientError::Daemon(_)) => {
                assert_eq!(e.to_string(), "no such agent: x");
                assert_eq!(e.exit_code(), 1);
            }
            other => panic!("expected a daemon error, got {other:?}"),
        }
    }

    #[test]
    fn missing_socket_is_a_connect_error_with_exit_code_3() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = Client::connect(&dir.path().join("none.sock"), Duration::from_secs(1))
            .expect_err("no daemon");
        assert!(matches!(err, ClientError::Connect { .. }));
        assert_eq!(err.exit_code(), 3);
        assert!(err.to_string().contains("none.sock"), "{err}");
    }

    #[test]
    fn an_overlong_reply_is_refused() {
        let (_dir, path, _server) = fake_daemon(
            b"{\"ok\":true,\"error\":null,\"data\":\"0123456789012345678901234567890123456789\"}\n",
        );
        let mut c = Client::connect(&path, Duration::from_secs(5))
            .expect("connect")
            .with_max_reply(32);
        let err = c.call(&Command::Status).expect_err("too long");
        assert!(
            matches!(err, ClientError::Protocol(ref m) if m.contains("longer than 32")),
            "{err}"
        );
    }

    #[test]
    fn a_silent_daemon_times_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("d.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        // The listener accepts (backlog) but never answers.
        let mut c = Client::connect(&path, Duration::from_millis(100)).expect("connect");
        let err = c.call(&Command::Status).expect_err("no reply");
        assert!(matches!(err, ClientError::Timeout(_)), "{err:?}");
        drop(listener);
    }

    #[test]
    fn stream_yields_events_then_ends_on_eof_or_error_line() {
        let (_dir, path, _server) = fake_daemon(
            b"{\"ok\":true,\"error\":null,\"data\":{\"watching\":true,\"seq\":4}}\n\
              {\"seq\":5,\"at\":\"2026-01-01T00:00:00.000Z\",\"event\":\"heartbeat\",\"panes\":0}\n\
              {\"ok\":false,\"error\":\"watcher fell behind\",\"data\":null}\n\
              {\"seq\":6}\n",
        );
        let mut c = Client::connect(&path, Duration::from_secs(5)).expect("connect");
        let ack = c.call(&Command::Watch(WatchArgs::default())).expect("ack");
        assert_eq!(ack["watching"], true);
        let items: Vec<_> = c.stream().collect();
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(
            items[0].as_ref().ok().and_then(|v| v["seq"].as_u64()),
            Some(5)
        );
        assert!(matches!(&items[1], Err(ClientError::Daemon(m)) if m == "watcher fell behind"));
    }

    #[test]
    fn resolve_socket_prefers_the_explicit_path() {
        assert_eq!(
            resolve_socket(Some(Path::new("/tmp/x.sock"))),
            PathBuf::from("/tmp/x.sock")
        );
    }

    #[test]
    fn capped_reader_handles_split_and_truncated_lines() {
        let mut r = io::BufReader::with_capacity(3, &b"abcdef\nxy"[..]);
        assert_eq!(
            read_line_capped(&mut r, 100).ok().flatten(),
            Some(b"abcdef".to_vec())
        );
        assert!(matches!(
            read_line_capped(&mut r, 100),
            Err(ReadError::Truncated)
        ));
        let mut r = &b""[..];
        assert!(matches!(read_line_capped(&mut r, 100), Ok(None)));
    }
}
