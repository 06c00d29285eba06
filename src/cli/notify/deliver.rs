//! A sink's own worker: a bounded queue and a thread that delivers from
//! it (an exec command, a webhook POST, an ntfy message), so one sink that
//! is slow or down (a webhook that takes the connection and never answers)
//! holds only its own events, never the stream or the other sinks.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::progress::Progress;
use crate::config::notify::{Sink, SinkKind};
use crate::web::action::{Action, ActionKey, Decision as ActionDecision};

/// Events a sink may have waiting; past it, new ones are dropped (and
/// said). An hour of a dead webhook at a busy host's rate, not unbounded.
pub(super) const QUEUE: usize = 256;
/// Webhook and ntfy retries: doubling from the first, capped, then given up.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(30);
const RETRY_GIVE_UP: Duration = Duration::from_secs(15 * 60);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an idle worker with commands running looks for their ends
/// and deadlines.
const REAP_EVERY: Duration = Duration::from_millis(50);

/// An event for one sink.
pub(super) struct Job {
    pub seq: u64,
    pub payload: Value,
    /// When the stream handed it over: the retry deadline counts from here.
    pub arrived: Instant,
}

/// The stream's side of a sink's worker.
pub(super) struct Worker {
    queue: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub(super) fn start(
        index: usize,
        sink: Sink,
        progress: Arc<Progress>,
    ) -> std::io::Result<Worker> {
        let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE);
        let http: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(HTTP_TIMEOUT))
            .build()
            .into();
        let delivery = Delivery {
            index,
            sink,
            http,
            action_key: None,
            running: Vec::new(),
            progress,
        };
        let thread = std::thread::Builder::new()
            .name(format!("notify-sink-{index}"))
            .spawn(move || delivery.run(jobs))?;
        Ok(Worker {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues `job`, never waiting; `Err(QUEUE)` when the queue is full (or
    /// the worker is gone).
    pub(super) fn offer(&self, job: Job) -> Result<(), usize> {
        let Some(queue) = &self.queue else {
            return Err(QUEUE);
        };
        queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) | TrySendError::Disconnected(_) => QUEUE,
        })
    }

    /// Closes the queue and waits until the worker delivered what it held
    /// and its commands ended.
    pub(super) fn finish(&mut self) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The worker's side: the sink and what delivering to it needs.
struct Delivery {
    index: usize,
    sink: Sink,
    http: ureq::Agent,
    /// The phone action key, read (or created) at the first ntfy message.
    action_key: Option<Option<ActionKey>>,
    running: Vec<(Child, Instant)>,
    progress: Arc<Progress>,
}

impl Delivery {
    fn run(mut self, jobs: Receiver<Job>) {
        loop {
            let job = if self.running.is_empty() {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            } else {
                match jobs.recv_timeout(REAP_EVERY) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => {
                        reap(&mut self.running);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            self.deliver(&job);
            self.progress.finished(self.index, job.seq);
        }
        while !self.running.is_empty() {
            reap(&mut self.running);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The key in `path`, read (or created) the first time it is asked.
    fn action_key(&mut self, path: &std::path::Path) -> Option<ActionKey> {
        self.action_key
            .get_or_insert_with(|| match ActionKey::load_or_create(path) {
                Ok(key) => Some(key),
                Err(e) => {
                    eprintln!("colibri notify: {e}; ntfy messages go without buttons");
                    None
                }
            })
            .clone()
    }

    fn deliver(&mut self, job: &Job) {
        let payload = &job.payload;
        let kind = self.sink.kind.clone();
        let label = self.sink.label.clone();
        match kind {
            SinkKind::Exec {
                command,
                timeout,
                concurrency,
            } => self.exec(&command, timeout, concurrency, payload),
            SinkKind::Webhook { url } => {
                let body = payload.to_string();
                self.post_with_retry(
                    &label,
                    &url,
                    &[("Content-Type", "application/json".into())],
                    body,
                    job.arrived,
                );
            }
            SinkKind::Ntfy {
                url,
                priority,
                board_url,
                action_key,
                action_ttl,
            } => {
                let (title, body) = super::message(payload);
                let mut headers = vec![
                    ("Title", header_text(&title)),
                    ("Priority", priority.to_string()),
                    ("Tags", "robot".to_string()),
                ];
                if let Some(board) = &board_url {
                    let key = self.action_key(&action_key);
                    if let Some(actions) = key.and_then(|k| {
                        phone_actions(&k, board, payload, SystemTime::now() + action_ttl)
                    }) {
                        headers.push(("Actions", actions));
                    }
                }
                self.post_with_retry(&label, &url, &headers, body, job.arrived);
            }
        }
    }

    /// POSTs until the server takes it (2xx), doubling the wait between
    /// tries; a 4xx other than 408 and 429 is not retried. Given up
    /// [`RETRY_GIVE_UP`] after the event `arrived`, not after the first
    /// try: events queued behind a dead server run out with the first.
    fn post_with_retry(
        &self,
        label: &str,
        url: &str,
        headers: &[(&str, String)],
        body: String,
        arrived: Instant,
    ) {
        let mut wait = RETRY_FIRST;
        loop {
            let mut req = self.http.post(url);
            for (k, v) in headers {
                req = req.header(*k, v.as_str());
            }
            match req.send(body.as_bytes()) {
                Ok(_) => return,
                Err(ureq::Error::StatusCode(code))
                    if (400..500).contains(&code) && code != 408 && code != 429 =>
                {
                    eprintln!(
                        "colibri notify: {label}: {url} refused the event ({code}); not retried"
                    );
                    return;
                }
                Err(e) => {
                    if arrived.elapsed() > RETRY_GIVE_UP {
                        eprintln!("colibri notify: {label}: {url}: {e}; given up");
                        return;
                    }
                    eprintln!("colibri notify: {label}: {url}: {e}; retrying in {wait:?}");
                }
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// Starts the command with the event on stdin and in the environment;
    /// at most `concurrency` run at once (the oldest is waited for), and
    /// one past its timeout is killed.
    fn exec(&mut self, command: &[String], timeout: Duration, concurrency: usize, payload: &Value) {
        let label = self.sink.label.clone();
        reap(&mut self.running);
        while self.running.len() >= concurrency {
            std::thread::sleep(Duration::from_millis(10));
            reap(&mut self.running);
        }
        let Some((prog, args)) = command.split_first() else {
            return;
        };
        // The whole event is on stdin; a variable is cut at ENV_VALUE_MAX
        // (an agent's reason of 200 KB passed Linux's 128 KiB limit for
        // one argument or variable, and the command never ran: E2BIG).
        let s = |k: &str| env_value(payload[k].as_str().unwrap_or_default());
        let spawned = Command::new(prog)
            .args(args)
            .env("COLIBRI_EVENT", s("event"))
            .env("COLIBRI_PANE", s("pane"))
            .env("COLIBRI_NAME", s("name"))
            .env("COLIBRI_RUNTIME", s("runtime"))
            .env("COLIBRI_STATE", s("to"))
            .env("COLIBRI_REASON", s("reason"))
            .env("COLIBRI_SEQ", payload["seq"].to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                eprintln!("colibri notify: {label}: cannot run {prog}: {e}");
                return;
            }
        };
        // The timeout counts from the start: a command that does not read a
        // large event (over a pipe's 64 KiB) held the write, and notify
        // with it, past its timeout (25 s for a 2 s timeout).
        let deadline = Instant::now() + timeout;
        if let Some(mut stdin) = child.stdin.take() {
            let line = format!("{payload}\n");
            // A thread of its own: it ends when the command reads the
            // event, exits, or is killed at its deadline (the write then
            // fails with EPIPE).
            // Non-blocking, and given up at the deadline: a command that
            // passed its stdin to a child of its own, which never reads it,
            // would otherwise keep this thread for good.
            let writer = std::thread::Builder::new()
                .name("notify-exec-stdin".into())
                .spawn(move || write_until(&mut stdin, line.as_bytes(), deadline));
            if let Err(e) = writer {
                eprintln!("colibri notify: {label}: cannot start a writer for {prog}: {e}");
            }
        }
        self.running.push((child, deadline));
    }
}

/// Writes `bytes` to a command's stdin until done, the pipe closes, or
/// `deadline` passes.
fn write_until(stdin: &mut std::process::ChildStdin, mut bytes: &[u8], deadline: Instant) {
    use std::os::fd::AsFd;
    let fd = stdin.as_fd();
    let nonblocking = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).and_then(|flags| {
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags))
    });
    if nonblocking.is_err() {
        return;
    }
    while !bytes.is_empty() && Instant::now() < deadline {
        match stdin.write(bytes) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The longest value of a `COLIBRI_*` variable an exec command gets.
const ENV_VALUE_MAX: usize = 4096;

fn env_value(text: &str) -> String {
    if text.len() <= ENV_VALUE_MAX {
        return text.to_string();
    }
    let mut end = ENV_VALUE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Collects commands that ended, killing those past their deadline.
fn reap(running: &mut Vec<(Child, Instant)>) {
    let now = Instant::now();
    running.retain_mut(|(child, deadline)| match child.try_wait() {
        Ok(Some(_)) | Err(_) => false,
        Ok(None) if now > *deadline => {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("colibri notify: a command ran past its timeout and was killed");
            false
        }
        Ok(None) => true,
    });
}

/// ntfy's `Actions` header for a pane that waits on an approval (it
/// turned `blocked`, or the approval opened): an Approve and a Deny button,
/// each a signed URL for that one decision on that one approval, usable
/// until `expires` (`web::action`). `None` for any other event.
fn phone_actions(key: &ActionKey, board: &str, ev: &Value, expires: SystemTime) -> Option<String> {
    let pane = ev["pane"].as_str()?;
    let asked = match ev["event"].as_str()? {
        "approval_opened" => ev["approval"]["asked_at"].as_str()?,
        "state" if ev["to"] == json!("blocked") => ev["at"].as_str()?,
        _ => return None,
    };
    let unix_ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis());
    let asked_ms = u64::try_from(unix_ms(humantime::parse_rfc3339(asked).ok()?)?).ok()?;
    let expires = u64::try_from(unix_ms(expires)? / 1000).ok()?;
    let url = |decision| {
        key.url(
            board,
            &Action {
                pane: pane.to_string(),
                asked_ms,
                decision,
                expires,
            },
        )
    };
    Some(format!(
        "http, Approve, {}, method=POST, clear=true; http, Deny, {}, method=POST, clear=true",
        url(ActionDecision::Approve),
        url(ActionDecision::Deny)
    ))
}

/// `text` fit for an HTTP header value: control characters (a newline
/// in a pane name, say) make the request unbuildable, and an unbuildable
/// request would be retried for [`RETRY_GIVE_UP`], holding every other
/// notification back; they become spaces.
fn header_text(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_text_turns_control_characters_into_spaces() {
        assert_eq!(header_text("fixer\r\nX-Evil: 1"), "fixer  X-Evil: 1");
        assert_eq!(header_text("café ✓"), "café ✓");
        // What ureq takes as a header value.
        let req = ureq::http::Request::post("http://127.0.0.1:9/")
            .header("Title", header_text("a\nb\x00c"))
            .body(());
        assert!(req.is_ok());
    }
}
