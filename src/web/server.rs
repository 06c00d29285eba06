//! The board's HTTP/1.1 server: one request per connection, every part of
//! it bounded, because any local user can connect to it.
//!
//! tiny_http, which served the board before, read request heads without a
//! limit (three 128 MiB headers added 384 MiB), kept idle connections for
//! ever, and stopped accepting for good at the first `accept` error (516
//! idle connections at a 1,024 fd limit killed the listener while the
//! process lived on). Here the accept loop waits out such errors; at most
//! [`Limits::connections`] connections are open at once (past it, a `503`
//! at once); a head must arrive whole within [`Limits::head_time`] and
//! [`Limits::head_bytes`] (else `408` or `431`), a body within
//! [`Limits::body_bytes`] (`413`); writes time out. Heads are parsed by
//! `httparse`, the parser hyper uses.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a connection may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, event streams included.
    pub connections: usize,
    /// The request line and headers together.
    pub head_bytes: usize,
    /// How long the whole head (and then the body) may take to arrive.
    pub head_time: Duration,
    pub body_bytes: usize,
    /// A write that makes no progress for this long ends the connection.
    pub write_time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 384,
            head_bytes: 16 << 10,
            head_time: Duration::from_secs(10),
            body_bytes: 64 << 10,
            write_time: Duration::from_secs(30),
        }
    }
}

/// The most headers a request may carry.
const MAX_HEADERS: usize = 64;
/// After a refusal, at most this much of the client's input is read and
/// dropped, for at most this long.
const LINGER_BYTES: usize = 2 << 20;
const LINGER_TIME: Duration = Duration::from_secs(2);
/// How long the accept loop waits after an error (out of fds, say) before
/// it tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Other(String),
}

/// A request read whole (head and body); answered through
/// [`Request::respond`], or taken over as a stream ([`Request::into_stream`]).
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    stream: TcpStream,
}

impl Request {
    pub fn method(&self) -> &Method {
        &self.method
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Writes the whole response and closes the connection. A browser
    /// that went away is nobody to tell.
    pub fn respond(mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let _ = write_response(&mut self.stream, status, headers, body);
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// The connection, for a response written as it goes (an event
    /// stream); its writes time out like every other.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

fn write_response(
    w: &mut impl Write,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (k, v) in headers {
        // A header value never carries a line break (it would end the head).
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// Why a request was not read, as the status that says so.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The peer closed or failed before a whole head: nothing to answer.
    Gone,
    Status(u16),
}

/// Reads one request within `limits`.
fn read_request(mut stream: TcpStream, limits: &Limits) -> Result<Request, (TcpStream, Refusal)> {
    let deadline = Instant::now() + limits.head_time;
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(end) = find_head_end(&buf) {
            break end;
        }
        if buf.len() >= limits.head_bytes {
            return Err((stream, Refusal::Status(431)));
        }
        let room = limits.head_bytes - buf.len();
        if let Err(why) = read_more(&mut stream, deadline, &mut buf, room) {
            return Err((stream, why));
        }
    };
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(&buf[..head_end]) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err((stream, Refusal::Status(431))),
        _ => return Err((stream, Refusal::Status(400))),
    }
    let method = match parsed.method {
        Some("GET") => Method::Get,
        Some("POST") => Method::Post,
        Some(other) => Method::Other(other.to_string()),
        None => return Err((stream, Refusal::Status(400))),
    };
    let url = parsed.path.unwrap_or("/").to_string();
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if find("Transfer-Encoding").is_some() {
        // The board's own page sends lengths; a chunked body is refused.
        return Err((stream, Refusal::Status(411)));
    }
    let length = match find("Content-Length") {
        None => 0,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n <= limits.body_bytes => n,
            Ok(_) => return Err((stream, Refusal::Status(413))),
            Err(_) => return Err((stream, Refusal::Status(400))),
        },
    };
    let mut body = buf.split_off(head_end);
    body.truncate(length);
    while body.len() < length {
        let want = length - body.len();
        if let Err(why) = read_more(&mut stream, deadline, &mut body, want) {
            return Err((stream, why));
        }
    }
    // Reads from here on belong to an event stream, which reads nothing.
    let _ = stream.set_read_timeout(None);
    Ok(Request {
        method,
        url,
        headers,
        body,
        stream,
    })
}

/// Closes after a refusal the way a browser can read it: a socket closed
/// with unread input sends a reset, which can reach the client before it
/// read the answer. So the sending side ends, and a bounded amount of what
/// the client still sends is read and dropped first.
fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(LINGER_TIME));
    let deadline = Instant::now() + LINGER_TIME;
    let mut sink = [0u8; 16 << 10];
    let mut left = LINGER_BYTES;
    while left > 0 && Instant::now() < deadline {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Appends to `buf` what one read brings, at most `want` bytes, before
/// `deadline`: `408` when time is up, `Gone` when the peer closed or failed.
fn read_more(
    stream: &mut TcpStream,
    deadline: Instant,
    buf: &mut Vec<u8>,
    want: usize,
) -> Result<(), Refusal> {
    let mut chunk = [0u8; 4096];
    let want = want.min(chunk.len());
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(Refusal::Status(408));
        }
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Err(Refusal::Gone),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Refusal::Status(408))
            }
            Err(_) => return Err(Refusal::Gone),
        }
    }
}

/// Where the head ends (past its blank line), if it has arrived.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4)
}

/// One open connection, counted while it lives.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts for ever, each connection on a thread of its own, and hands
/// every request read whole to `handle`. Returns only if the listener
/// itself is gone.
pub fn serve(
    listener: TcpListener,
    limits: Limits,
    handle: Arc<dyn Fn(Request) + Send + Sync>,
) -> io::Result<()> {
    let open = Arc::new(AtomicUsize::new(0));
    let mut told = false;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Out of fds or memory: those in use end, then room comes
                // back. Said once per spell.
                if !told {
                    eprintln!("colibri web: accept: {e}; retrying");
                    told = true;
                }
                std::thread::sleep(ACCEPT_RETRY);
                continue;
            }
        };
        told = false;
        let _ = stream.set_write_timeout(Some(limits.write_time));
        if open.fetch_add(1, Ordering::SeqCst) >= limits.connections {
            open.fetch_sub(1, Ordering::SeqCst);
            let mut stream = stream;
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = write_response(
                &mut stream,
                503,
                &[("Content-Type", "text/plain"), ("Retry-After", "1")],
                b"503: too many connections to the board\n",
            );
            continue;
        }
        let slot = Slot(Arc::clone(&open));
        let handle = Arc::clone(&handle);
        let spawned = std::thread::Builder::new()
            .name("web-conn".into())
            .spawn(move || {
                let _slot = slot;
                match read_request(stream, &limits) {
                    Ok(req) => handle(req),
                    Err((_, Refusal::Gone)) => {}
                    Err((mut stream, Refusal::Status(status))) => {
                        let text = format!("{status} {}\n", reason(status));
                        let _ = write_response(
                            &mut stream,
                            status,
                            &[("Content-Type", "text/plain")],
                            text.as_bytes(),
                        );
                        linger(stream);
                    }
                }
            });
        if let Err(e) = spawned {
            // The connection (and its slot) went with the closure.
            eprintln!("colibri web: cannot start a connection thread: {e}");
            std::thread::sleep(ACCEPT_RETRY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on an ephemeral port with `limits`, answering every
    /// request with its body.
    fn start(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let echo: Arc<dyn Fn(Request) + Send + Sync> = Arc::new(|req: Request| {
            let body = req.body().to_vec();
            req.respond(200, &[("Content-Type", "text/plain")], &body)
        });
        std::thread::spawn(move || serve(listener, limits, echo));
        addr
    }

    fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        // A refused request may close before all of it is written.
        let _ = s.write_all(bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_request_is_read_whole_and_answered() {
        let addr = start(Limits::default());
        let got = exchange(
            addr,
            b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nhello"), "{got}");
    }

    #[test]
    fn heads_and_bodies_past_their_limits_are_refused() {
        let addr = start(Limits {
            head_bytes: 1024,
            body_bytes: 16,
            ..Limits::default()
        });
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(4096));
        assert!(exchange(addr, long.as_bytes()).starts_with("HTTP/1.1 431"));
        let big = b"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n0123456789abcdefg";
        assert!(exchange(addr, big).starts_with("HTTP/1.1 413"));
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(exchange(addr, chunked).starts_with("HTTP/1.1 411"));
        assert!(exchange(addr, b"NOT HTTP\r\n\r\n").starts_with("HTTP/1.1 400"));
    }

    #[test]
    fn a_head_that_does_not_arrive_in_time_is_answered_408() {
        let addr = start(Limits {
            head_time: Duration::from_millis(300),
            ..Limits::default()
        });
        let started = Instant::now();
        let got = exchange(addr, b"GET / HTTP/1.1\r\n");
        assert!(got.starts_with("HTTP/1.1 408"), "{got}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn connections_past_the_cap_get_503_and_the_server_goes_on() {
        let addr = start(Limits {
            connections: 4,
            head_time: Duration::from_secs(60),
            ..Limits::default()
        });
        let idle: Vec<TcpStream> = (0..4)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        // The four are counted once their threads run.
        let refused = (0..50).find_map(|_| {
            let got = exchange(addr, b"GET / HTTP/1.1\r\n\r\n");
            if got.starts_with("HTTP/1.1 503") {
                return Some(got);
            }
            std::thread::sleep(Duration::from_millis(50));
            None
        });
        assert!(refused.is_some(), "a fifth connection was served");
        drop(idle);
        let served = (0..100).find_map(|_| {
            let got = exchange(addr, b"GET / HTTP/1.1\r\n\r\n");
            if got.starts_with("HTTP/1.1 200") {
                return Some(());
            }
            std::thread::sleep(Duration::from_millis(50));
            None
        });
        assert!(served.is_some(), "the server came back once they closed");
    }
}
