//! Syslog alerts for pane transitions, sent without ever blocking the loop.
//!
//! colibrid sends one datagram when a pane becomes blocked, stalled, un-stalled
//! or error, and when its agent exits. [`Alerter`] owns the one datagram socket
//! to the system log (an unbound `UnixDatagram`, `connect`ed and non-blocking)
//! and a per-pane token bucket. The invariants are: `alert` never blocks and
//! never panics; a full log socket drops the message and counts it; a vanished
//! syslogd (restart, missing socket) drops the socket and reconnects on a later
//! alert, at most once per second; no pane can flood the log.
//!
//! Messages are RFC 5424 (`<PRI>1 TIMESTAMP HOST colibri PID MSGID - body`)
//! because FreeBSD syslogd reads an RFC 3164 timestamp as local time while
//! every formatter stamps UTC (see notes/freebsd.md §7). TIMESTAMP carries
//! the local UTC offset (`2026-05-27T14:00:00.123+02:00`, RFC 5424 §6.2.3),
//! so alerts read like the local-time lines around them in `/var/log`; the
//! instant is the caller's `now`, only the offset is looked up.
//!
//! A message never exceeds [`MAX_DATAGRAM_BYTES`]: FreeBSD 14 refuses a
//! larger local datagram with EMSGSIZE (`net.local.dgram.maxdgram`, 2 KiB),
//! so the alert would be lost. Long values are cut, marked with `…`, and the
//! message says `truncated=N` (bytes cut); [`AlertStats::truncated`] counts
//! such alerts. The header is written here, with a word as MSGID and the
//! caller's time (a syslog crate's formatter takes a number and reads the
//! clock itself).

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use crate::core::time::Timestamp;
use crate::daemon::diag::log_warn;
pub use crate::syslog::Severity;
#[cfg(test)]
use crate::syslog::{facility_name, parse_facility, Facility};

/// The syslog APP-NAME of every alert; syslog.d routes on it.
pub const APP_NAME: &str = "colibri";

/// Where the system log listens, tried in this order when no socket is
/// configured: FreeBSD, Linux, macOS.
pub const SYSTEM_LOG_SOCKETS: [&str; 3] = ["/var/run/log", "/dev/log", "/var/run/syslog"];

/// The least time between two connection attempts, so a dead syslogd costs
/// one failed `connect` per second at most, not one per alert.
pub const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

/// The longest value kept in a message body; longer ones are cut (at a char
/// boundary) so a message stays under FreeBSD syslogd's 8 KiB line limit.
pub const MAX_VALUE_BYTES: usize = 512;

/// The longest datagram sent: FreeBSD 14's default `net.local.dgram.maxdgram`
/// (`unpdg_maxdgram = 2*1024` in sys/kern/uipc_usrreq.c; a larger send fails
/// EMSGSIZE). FreeBSD 15 raised it to 8 KiB; 2 KiB fits both.
pub const MAX_DATAGRAM_BYTES: usize = 2048;

/// Appended to a value that was cut.
const CUT_MARK: &str = "…";

/// The smallest per-value limit tried when fitting a message; at this limit
/// every message fits (see `fit_message`), the hard cut is a backstop only.
const MIN_VALUE_BYTES: usize = 32;

/// The transition an alert reports; its name is the RFC 5424 MSGID.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AlertKind {
    Blocked,
    Stalled,
    Unstalled,
    Error,
    Exited,
    /// The daemon could not write session logs (disk full or failing).
    LogWrite,
    /// An agent's restart policy is spent: it stays down.
    RestartsExhausted,
    /// A harness asks the operator something (an approval opened).
    Approval,
    /// An approval waited longer than `[approvals] escalate_after`.
    ApprovalEscalated,
    /// A governance policy warned, paused, killed or escalated.
    Policy,
    /// A host operation (`hostop`) failed, timed out or could not start.
    Hostop,
}

impl AlertKind {
    /// The MSGID written into the message.
    pub fn msgid(self) -> &'static str {
        match self {
            AlertKind::Blocked => "blocked",
            AlertKind::Stalled => "stalled",
            AlertKind::Unstalled => "unstalled",
            AlertKind::Error => "error",
            AlertKind::Exited => "exited",
            AlertKind::LogWrite => "log_write",
            AlertKind::RestartsExhausted => "restarts_exhausted",
            AlertKind::Approval => "approval",
            AlertKind::ApprovalEscalated => "approval_escalated",
            AlertKind::Policy => "policy",
            AlertKind::Hostop => "hostop",
        }
    }
}

/// What one alert says about its pane; absent keys are left out of the body.
#[derive(Copy, Clone, Debug, Default)]
pub struct AlertFields<'a> {
    pub pane: &'a str,
    pub name: Option<&'a str>,
    pub runtime: Option<&'a str>,
    pub state: &'a str,
    pub session: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub jail: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
}

/// Alert settings: the resolved `[syslog]` section, replaced on SIGHUP.
pub use crate::config::SyslogSection as AlertConfig;

/// Why a message that passed the filters was not delivered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// No log socket exists or connecting failed; a later alert retries.
    NoSocket,
    /// The receiver's buffer is full (EAGAIN/ENOBUFS).
    Full,
    /// syslogd went away (ECONNREFUSED/ENOENT/ENOTCONN/...); reconnecting later.
    Disconnected,
    /// The datagram is larger than the socket accepts (EMSGSIZE).
    TooLarge,
    /// Any other send error.
    Other(io::ErrorKind),
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::NoSocket => f.write_str("no syslog socket"),
            DropReason::Full => f.write_str("syslog socket full"),
            DropReason::Disconnected => f.write_str("syslog socket disconnected"),
            DropReason::TooLarge => f.write_str("message too large"),
            DropReason::Other(kind) => write!(f, "send failed: {kind}"),
        }
    }
}

/// What [`Alerter::alert`] did with one alert.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AlertOutcome {
    Sent,
    /// Kept to be sent after the frames of its wakeup (see
    /// [`Alerter::hold_sends`]); counted once it is sent or dropped.
    Held,
    RateLimited,
    BelowLevel,
    Disabled,
    Dropped(DropReason),
}

/// Counters since the Alerter was created (they survive `reconfigure`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertStats {
    pub sent: u64,
    pub rate_limited: u64,
    pub dropped: u64,
    /// Alerts sent with values cut short (to fit [`MAX_DATAGRAM_BYTES`], or
    /// a value over [`MAX_VALUE_BYTES`]).
    pub truncated: u64,
}

/// One pane's token bucket. `level` is in units of "token × ms / burst" so
/// refill is integer arithmetic: each ms adds `burst` units, one alert costs
/// `window_ms` units, and a full bucket holds `burst × window_ms`.
#[derive(Debug)]
struct Bucket {
    level: u128,
    refilled_at: Timestamp,
    suppressed: u64,
}

/// Sends pane alerts to syslog; see the module documentation.
#[derive(Debug)]
pub struct Alerter {
    cfg: AlertConfig,
    hostname: String,
    pid: u32,
    socket: Option<UnixDatagram>,
    /// When the last connection attempt was made by an alert; `None` lets the
    /// next alert try at once (after start, a reconfigure or a lost socket).
    last_connect_attempt: Option<Timestamp>,
    buckets: HashMap<String, Bucket>,
    stats: AlertStats,
    /// Why alerts cannot reach the log socket right now (`status` shows it).
    unreachable: Option<String>,
    /// The operator was told on stderr about the current outage: once is
    /// enough, until the socket comes back and goes away again.
    told: bool,
    /// Reused message buffer, so a steady stream of alerts does not allocate.
    message: String,
    /// The local UTC offset in seconds at an instant; tests pin it.
    utc_offset: fn(i64) -> Option<i32>,
    /// Whether alerts are kept for [`Alerter::send_held`] rather than sent
    /// at once.
    hold: bool,
    /// Alerts formatted and kept, oldest first, and when the first was kept.
    held: Vec<HeldAlert>,
    held_since: Option<Timestamp>,
}

impl Drop for Alerter {
    /// Kept alerts go out on every way out of the daemon but a crash.
    fn drop(&mut self) {
        self.send_held(Timestamp::from_system(std::time::SystemTime::now()));
    }
}

/// One formatted alert waiting to be sent.
#[derive(Debug)]
struct HeldAlert {
    datagram: Vec<u8>,
    pane: String,
    /// The rate limit's suppressed count the message reports.
    suppressed: u64,
    cut: bool,
}

/// The most alerts kept for after the frames: reaching it sends them all.
/// Below the 10 datagrams Linux queues on a Unix socket by default
/// (`net.unix.max_dgram_qlen`), so the kept alerts sent together fit in a
/// syslogd's queue even if it has not read since.
const HELD_MAX: usize = 8;

/// The longest an alert is kept for after the frames (a stalled disk keeps
/// the writers behind and must not keep alerts back).
pub const HOLD_FOR: Duration = Duration::from_millis(50);

impl Alerter {
    /// Creates the alerter and tries to connect once. Never fails: a missing
    /// socket is retried lazily by later alerts.
    pub fn new(cfg: AlertConfig) -> Alerter {
        let mut alerter = Alerter {
            cfg,
            hostname: local_hostname(),
            pid: std::process::id(),
            socket: None,
            last_connect_attempt: None,
            buckets: HashMap::new(),
            stats: AlertStats::default(),
            unreachable: None,
            told: false,
            message: String::new(),
            utc_offset: crate::platform::utc_offset_seconds,
            hold: false,
            held: Vec::new(),
            held_since: None,
        };
        if alerter.cfg.enabled {
            let first = connect(alerter.cfg.socket.as_deref());
            alerter.note_connect(first);
        }
        alerter
    }

    /// Why alerts are being dropped for want of a log socket, while they are.
    pub fn unreachable(&self) -> Option<&str> {
        self.unreachable.as_deref()
    }

    /// Keeps the socket of a successful connect, or records why it failed
    /// and says so on stderr once per outage (a missing /dev/log or a wrong
    /// `--syslog-socket` would otherwise lose every alert without a word).
    fn note_connect(&mut self, result: io::Result<UnixDatagram>) {
        match result {
            Ok(socket) => {
                self.socket = Some(socket);
                self.unreachable = None;
                self.told = false;
            }
            Err(e) => self.note_unreachable(describe_connect_error(self.cfg.socket.as_deref(), &e)),
        }
    }

    fn note_unreachable(&mut self, why: String) {
        if !self.told {
            log_warn!("alerts cannot reach syslog: {why}; they are dropped (and counted) until it is back");
            self.told = true;
        }
        self.unreachable = Some(why);
    }

    /// Applies new settings (SIGHUP). A changed socket or a disable closes the
    /// current socket; a changed rate refills every bucket under the new rule.
    pub fn reconfigure(&mut self, cfg: AlertConfig) {
        // Held alerts were raised under the old settings: they go where
        // those said (and not at all once alerts are disabled by this).
        self.send_held(Timestamp::from_system(std::time::SystemTime::now()));
        let reconnect = cfg.socket != self.cfg.socket || cfg.enabled != self.cfg.enabled;
        if reconnect {
            self.socket = None;
            self.last_connect_attempt = None;
            self.unreachable = None;
            self.told = false;
        }
        let rate_changed =
            cfg.rate_burst != self.cfg.rate_burst || cfg.rate_window != self.cfg.rate_window;
        self.cfg = cfg;
        if reconnect && self.cfg.enabled {
            let first = connect(self.cfg.socket.as_deref());
            self.note_connect(first);
        }
        if rate_changed {
            let capacity = self.capacity();
            for bucket in self.buckets.values_mut() {
                bucket.level = capacity;
            }
        }
    }

    /// Sends (or rate-limits, or drops) one alert; never blocks, never panics.
    /// `now` drives the timestamp, the rate limit and the reconnect throttle.
    pub fn alert(&mut self, kind: AlertKind, f: &AlertFields<'_>, now: Timestamp) -> AlertOutcome {
        if !self.cfg.enabled {
            return AlertOutcome::Disabled;
        }
        let severity = severity_of(kind, f);
        if severity > self.cfg.min_level {
            return AlertOutcome::BelowLevel;
        }
        let suppressed = match self.take_token(f.pane, now) {
            Some(suppressed) => suppressed,
            None => {
                self.stats.rate_limited += 1;
                return AlertOutcome::RateLimited;
            }
        };

        let mut message = std::mem::take(&mut self.message);
        let header = Header {
            pri: self.cfg.facility as u8 | severity as u8,
            timestamp: local_timestamp(now, (self.utc_offset)(unix_secs(now))),
            hostname: &self.hostname,
            pid: self.pid,
            kind,
        };
        let cut = fit_message(&mut message, &header, f, suppressed) > 0;
        if self.hold {
            // Reported by this alert: alerts suppressed from now on are
            // the next one's to report (given back if this one is lost).
            self.take_suppressed(f.pane, suppressed);
            self.held.push(HeldAlert {
                datagram: message.as_bytes().to_vec(),
                pane: f.pane.to_string(),
                suppressed,
                cut,
            });
            self.message = message;
            self.held_since.get_or_insert(now);
            if self.held.len() >= HELD_MAX {
                self.send_held(now);
            }
            return AlertOutcome::Held;
        }
        let outcome = self.send(message.as_bytes(), now);
        self.message = message;
        if outcome == AlertOutcome::Sent {
            self.take_suppressed(f.pane, suppressed);
        }
        self.count_sent(&outcome, cut);
        outcome
    }

    /// From now on, alerts are formatted (and rate-limited) when raised but
    /// kept for [`Alerter::send_held`]. The daemon sends them once the
    /// frames of their wakeup have left: an alert's datagram wakes syslogd,
    /// which on a small machine takes a CPU the log and journal writers
    /// need to confirm those frames (the exit notice was about 0.1 ms
    /// slower, measured on 2 cores, with alerts sent as raised).
    pub fn hold_sends(&mut self) {
        self.hold = true;
    }

    /// Sends every kept alert, oldest first.
    pub fn send_held(&mut self, now: Timestamp) {
        self.held_since = None;
        for alert in std::mem::take(&mut self.held) {
            let outcome = self.send(&alert.datagram, now);
            if outcome != AlertOutcome::Sent {
                // Nobody heard of them: the next alert reports them.
                if let Some(bucket) = self.buckets.get_mut(&alert.pane) {
                    bucket.suppressed += alert.suppressed;
                }
            }
            self.count_sent(&outcome, alert.cut);
        }
    }

    /// When the oldest kept alert must be sent at the latest.
    pub fn held_due(&self) -> Option<Timestamp> {
        self.held_since.map(|t| t.plus(HOLD_FOR))
    }

    fn count_sent(&mut self, outcome: &AlertOutcome, cut: bool) {
        match outcome {
            AlertOutcome::Sent => {
                self.stats.sent += 1;
                if cut {
                    self.stats.truncated += 1;
                }
            }
            _ => self.stats.dropped += 1,
        }
    }

    /// `reported` suppressed alerts of `pane` are reported: the count keeps
    /// only those suppressed since.
    fn take_suppressed(&mut self, pane: &str, reported: u64) {
        if let Some(bucket) = self.buckets.get_mut(pane) {
            bucket.suppressed = bucket.suppressed.saturating_sub(reported);
        }
    }

    pub fn stats(&self) -> AlertStats {
        self.stats
    }

    /// Frees a pane's rate-limit state (call when the pane is removed).
    pub fn forget_pane(&mut self, pane: &str) {
        self.buckets.remove(pane);
    }

    fn capacity(&self) -> u128 {
        u128::from(self.cfg.rate_burst.max(1)) * self.cfg.rate_window.as_millis()
    }

    /// Takes one token from the pane's bucket. Returns the pane's suppressed
    /// count if the alert may go out, `None` (and counts it) if it may not.
    fn take_token(&mut self, pane: &str, now: Timestamp) -> Option<u64> {
        let window_ms = self.cfg.rate_window.as_millis();
        if window_ms == 0 {
            return Some(0);
        }
        let burst = u128::from(self.cfg.rate_burst.max(1));
        let capacity = self.capacity();
        let bucket = match self.buckets.get_mut(pane) {
            Some(bucket) => bucket,
            None => self.buckets.entry(pane.to_owned()).or_insert(Bucket {
                level: capacity,
                refilled_at: now,
                suppressed: 0,
            }),
        };
        // A clock that stepped back refills nothing and restarts from `now`.
        let elapsed = u128::from(now.since(bucket.refilled_at).as_millis() as u64);
        bucket.level = bucket
            .level
            .saturating_add(elapsed.saturating_mul(burst))
            .min(capacity);
        bucket.refilled_at = now;
        if bucket.level >= window_ms {
            bucket.level -= window_ms;
            Some(bucket.suppressed)
        } else {
            bucket.suppressed += 1;
            None
        }
    }

    /// Sends one datagram, connecting first if needed.
    fn send(&mut self, bytes: &[u8], now: Timestamp) -> AlertOutcome {
        if self.socket.is_none() {
            let may_try = match self.last_connect_attempt {
                None => true,
                Some(at) => now < at || now.since(at) >= RECONNECT_INTERVAL,
            };
            if !may_try {
                return AlertOutcome::Dropped(DropReason::NoSocket);
            }
            self.last_connect_attempt = Some(now);
            let attempt = connect(self.cfg.socket.as_deref());
            self.note_connect(attempt);
        }
        let Some(socket) = self.socket.as_ref() else {
            return AlertOutcome::Dropped(DropReason::NoSocket);
        };
        // EINTR cannot really happen on a non-blocking send; retry a little
        // anyway rather than lose the message.
        let mut attempts = 0;
        let error = loop {
            match socket.send(bytes) {
                Ok(_) => return AlertOutcome::Sent,
                Err(e) if e.kind() == io::ErrorKind::Interrupted && attempts < 3 => attempts += 1,
                Err(e) => break e,
            }
        };
        let reason = classify_send_error(&error);
        if reason == DropReason::Disconnected {
            // syslogd restarted or its socket vanished: the connected socket
            // is dead for good, so connect afresh on a later alert.
            self.socket = None;
            self.last_connect_attempt = Some(now);
            self.note_unreachable(format!("the log socket went away ({error})"));
        }
        AlertOutcome::Dropped(reason)
    }
}

/// The severity an alert is sent at.
pub fn severity_of(kind: AlertKind, f: &AlertFields<'_>) -> Severity {
    match kind {
        AlertKind::Blocked
        | AlertKind::Stalled
        | AlertKind::Approval
        | AlertKind::Policy
        | AlertKind::Hostop => Severity::Warning,
        AlertKind::ApprovalEscalated => Severity::Err,
        AlertKind::Unstalled => Severity::Notice,
        AlertKind::Error | AlertKind::LogWrite | AlertKind::RestartsExhausted => Severity::Err,
        AlertKind::Exited => {
            let failed = f.exit_code.is_some_and(|code| code != 0) || f.exit_signal.is_some();
            if failed {
                Severity::Err
            } else {
                Severity::Notice
            }
        }
    }
}

fn classify_send_error(error: &io::Error) -> DropReason {
    if error.kind() == io::ErrorKind::WouldBlock {
        return DropReason::Full;
    }
    match error.raw_os_error() {
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) => DropReason::Full,
        Some(libc::ECONNREFUSED)
        | Some(libc::ENOENT)
        | Some(libc::ENOTCONN)
        | Some(libc::ECONNRESET)
        | Some(libc::EPIPE)
        | Some(libc::EDESTADDRREQ) => DropReason::Disconnected,
        Some(libc::EMSGSIZE) => DropReason::TooLarge,
        _ => DropReason::Other(error.kind()),
    }
}

/// Opens a non-blocking datagram socket connected to the log socket. On a
/// Unix datagram socket `connect` only records the peer, so it never waits.
/// What went wrong connecting, naming the socket(s) tried.
fn describe_connect_error(configured: Option<&Path>, e: &io::Error) -> String {
    match configured {
        Some(path) => format!("cannot connect to {}: {e}", path.display()),
        None if e.kind() == io::ErrorKind::NotFound => format!(
            "no system log socket ({} all missing)",
            SYSTEM_LOG_SOCKETS.join(", ")
        ),
        None => format!("cannot connect to the system log: {e}"),
    }
}

fn connect(configured: Option<&Path>) -> io::Result<UnixDatagram> {
    let path = match configured {
        Some(path) => path,
        None => SYSTEM_LOG_SOCKETS
            .iter()
            .map(Path::new)
            .find(|path| path.exists())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.connect(path)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The RFC 5424 HOSTNAME: printable ASCII without spaces, or `-` if unknown.
fn local_hostname() -> String {
    let raw = nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = raw
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    if clean.is_empty() {
        "-".to_owned()
    } else {
        clean
    }
}

/// The RFC 5424 header fields of one alert.
struct Header<'a> {
    pri: u8,
    timestamp: String,
    hostname: &'a str,
    pid: u32,
    kind: AlertKind,
}

fn unix_secs(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis() / 1000).unwrap_or(i64::MAX)
}

/// RFC 5424 TIMESTAMP in local time: `now` shifted by `offset_secs` and
/// written with that offset (`+02:00`), or `Z` when the offset is zero or
/// unknown. Offsets are whole minutes in RFC 5424 (TIME-NUMOFFSET); the
/// seconds of historic local mean times are dropped from both parts.
fn local_timestamp(now: Timestamp, offset_secs: Option<i32>) -> String {
    let offset_minutes = offset_secs.unwrap_or(0) / 60;
    if offset_minutes == 0 {
        return now.to_rfc3339();
    }
    let shift_ms = u64::from(offset_minutes.unsigned_abs()) * 60_000;
    let local_ms = if offset_minutes > 0 {
        now.as_millis().checked_add(shift_ms)
    } else {
        now.as_millis().checked_sub(shift_ms)
    };
    let Some(local_ms) = local_ms else {
        return now.to_rfc3339();
    };
    let local = Timestamp::from_millis(local_ms).to_rfc3339();
    let Some(wall) = local.strip_suffix('Z') else {
        return now.to_rfc3339();
    };
    let sign = if offset_minutes > 0 { '+' } else { '-' };
    let abs = offset_minutes.unsigned_abs();
    format!("{wall}{sign}{:02}:{:02}", abs / 60, abs % 60)
}

/// Writes the message into `out` (cleared first) so that it fits in
/// [`MAX_DATAGRAM_BYTES`], and returns the bytes cut from values (0 if
/// nothing was cut). The per-value limit halves from [`MAX_VALUE_BYTES`]
/// until the message fits; at [`MIN_VALUE_BYTES`] it always does (header at
/// most ~330 bytes, eight values of at most 4 × 32 escaped bytes), and a
/// hard cut at a char boundary is the backstop. A cut message ends with
/// `truncated=N`.
fn fit_message(
    out: &mut String,
    header: &Header<'_>,
    f: &AlertFields<'_>,
    suppressed: u64,
) -> usize {
    // Room for " truncated=<usize>".
    const TRAILER: usize = 32;
    let mut limit = MAX_VALUE_BYTES;
    let mut cut = loop {
        out.clear();
        let cut = write_message(out, header, f, suppressed, limit);
        if out.len() + TRAILER <= MAX_DATAGRAM_BYTES || limit <= MIN_VALUE_BYTES {
            break cut;
        }
        limit /= 2;
    };
    if out.len() + TRAILER > MAX_DATAGRAM_BYTES {
        let keep = floor_char_boundary(out, MAX_DATAGRAM_BYTES - TRAILER - CUT_MARK.len());
        cut += out.len() - keep;
        out.truncate(keep);
        out.push_str(CUT_MARK);
    }
    if cut > 0 {
        let _ = write!(out, " truncated={cut}");
    }
    cut
}

/// Writes `<PRI>1 TIMESTAMP HOST colibri PID MSGID - body` with every value
/// cut to `limit` bytes; returns the bytes cut.
fn write_message(
    out: &mut String,
    h: &Header<'_>,
    f: &AlertFields<'_>,
    suppressed: u64,
    limit: usize,
) -> usize {
    // Writing to a String cannot fail; the results are ignored for that reason.
    let _ = write!(
        out,
        "<{}>1 {} {} {APP_NAME} {} {} - ",
        h.pri,
        h.timestamp,
        h.hostname,
        h.pid,
        h.kind.msgid()
    );
    let mut cut = push_pair(out, "pane", f.pane, limit);
    let optional = [
        ("name", f.name),
        ("runtime", f.runtime),
        ("state", Some(f.state)),
        ("session", f.session),
        ("cwd", f.cwd),
        ("jail", f.jail),
        ("reason", f.reason),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            cut += push_pair(out, key, value, limit);
        }
    }
    if let Some(code) = f.exit_code {
        let _ = write!(out, " exit_code={code}");
    }
    if let Some(signal) = f.exit_signal {
        let _ = write!(out, " exit_signal={signal}");
    }
    if suppressed > 0 {
        let _ = write!(out, " suppressed={suppressed}");
    }
    cut
}

/// Appends ` key=value` (no leading space for the first pair), quoting the
/// value when it is empty or holds a space, quote, backslash, `=` or control
/// character, so the body always splits back into its pairs. A value over
/// `limit` bytes is cut at a char boundary and marked; returns the bytes cut.
fn push_pair(out: &mut String, key: &str, value: &str, limit: usize) -> usize {
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out.push_str(key);
    out.push('=');
    let (value, cut) = if value.len() > limit {
        let kept = truncate(value, limit.saturating_sub(CUT_MARK.len()));
        (kept, value.len() - kept.len())
    } else {
        (value, 0)
    };
    let mark = if cut > 0 { CUT_MARK } else { "" };
    let needs_quotes = value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\\' | '='));
    if !needs_quotes {
        out.push_str(value);
        out.push_str(mark);
        return cut;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push_str(mark);
    out.push('"');
    cut
}

fn truncate(value: &str, max: usize) -> &str {
    &value[..floor_char_boundary(value, max)]
}

/// The largest char boundary of `s` at or below `max`.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Instant;

    const T0: u64 = 1_779_883_200_123; // 2026-05-27T12:00:00.123Z

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(T0 + ms)
    }

    struct Receiver {
        _dir: tempfile::TempDir,
        path: PathBuf,
        socket: UnixDatagram,
    }

    impl Receiver {
        fn bind() -> Receiver {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("log");
            let socket = UnixDatagram::bind(&path).expect("bind receiver");
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("read timeout");
            Receiver {
                _dir: dir,
                path,
                socket,
            }
        }

        fn recv(&self) -> String {
            let mut buf = vec![0u8; 16 * 1024];
            let n = self.socket.recv(&mut buf).expect("a datagram");
            String::from_utf8(buf[..n].to_vec()).expect("utf-8 datagram")
        }

        fn assert_empty(&self) {
            self.socket.set_nonblocking(true).expect("nonblocking");
            let mut buf = [0u8; 1024];
            let got = self.socket.recv(&mut buf);
            assert!(
                matches!(&got, Err(e) if e.kind() == io::ErrorKind::WouldBlock),
                "unexpected datagram: {got:?}"
            );
            self.socket.set_nonblocking(false).expect("blocking");
        }
    }

    fn config(path: &Path) -> AlertConfig {
        AlertConfig {
            socket: Some(path.to_owned()),
            ..AlertConfig::default()
        }
    }

    fn fields(pane: &str) -> AlertFields<'_> {
        AlertFields {
            pane,
            state: "blocked",
            ..AlertFields::default()
        }
    }

    /// Splits an RFC 5424 message into its seven header fields and the body.
    fn split(message: &str) -> (Vec<&str>, &str) {
        let parts: Vec<&str> = message.splitn(8, ' ').collect();
        assert_eq!(parts.len(), 8, "too few fields in {message:?}");
        (parts[..7].to_vec(), parts[7])
    }

    #[test]
    fn message_is_rfc5424_with_key_value_body() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(config(&rx.path));
        alerter.utc_offset = |_| Some(0);
        let f = AlertFields {
            pane: "p1",
            name: Some("fixer"),
            runtime: Some("pi"),
            state: "blocked",
            session: Some("s-42"),
            cwd: Some("/home/dev/my project"),
            jail: Some("agents1"),
            reason: Some("waiting for \"approval\""),
            exit_code: None,
            exit_signal: None,
        };
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(0)),
            AlertOutcome::Sent
        );
        let message = rx.recv();
        let (header, body) = split(&message);
        // daemon (3) * 8 + warning (4) = 28.
        assert_eq!(header[0], "<28>1");
        assert_eq!(header[1], "2026-05-27T12:00:00.123Z");
        assert_eq!(header[2], local_hostname());
        assert_eq!(header[3], "colibri");
        assert_eq!(header[4], std::process::id().to_string());
        assert_eq!(header[5], "blocked");
        assert_eq!(header[6], "-");
        assert_eq!(
            body,
            concat!(
                r#"pane=p1 name=fixer runtime=pi state=blocked session=s-42 "#,
                r#"cwd="/home/dev/my project" jail=agents1 reason="waiting for \"approval\"""#,
            )
        );
        assert_eq!(
            alerter.stats(),
            AlertStats {
                sent: 1,
                rate_limited: 0,
                dropped: 0,
                truncated: 0,
            }
        );
    }

    #[test]
    fn timestamps_carry_the_local_offset() {
        let noon = at(0); // 2026-05-27T12:00:00.123Z
        assert_eq!(local_timestamp(noon, Some(0)), "2026-05-27T12:00:00.123Z");
        assert_eq!(local_timestamp(noon, None), "2026-05-27T12:00:00.123Z");
        assert_eq!(
            local_timestamp(noon, Some(2 * 3600)),
            "2026-05-27T14:00:00.123+02:00"
        );
        assert_eq!(
            local_timestamp(noon, Some(-(5 * 3600 + 1800))),
            "2026-05-27T06:30:00.123-05:30"
        );
        // 01:00 UTC on the 28th is still the 27th far west of Greenwich.
        assert_eq!(
            local_timestamp(at(13 * 3_600_000), Some(-14 * 3600)),
            "2026-05-27T11:00:00.123-14:00"
        );

        let rx = Receiver::bind();
        let mut alerter = Alerter::new(config(&rx.path));
        alerter.utc_offset = |_| Some(3600);
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p1"), noon),
            AlertOutcome::Sent
        );
        assert_eq!(split(&rx.recv()).0[1], "2026-05-27T13:00:00.123+01:00");
    }

    #[test]
    fn the_platform_offset_is_that_of_the_local_zone() {
        // Whatever TZ this runs under, the offset is whole minutes within
        // ±26 h and the same for one instant asked twice.
        let secs = unix_secs(at(0));
        let offset = crate::platform::utc_offset_seconds(secs).expect("localtime_r");
        assert!(offset.abs() <= 26 * 3600, "{offset}");
        assert_eq!(crate::platform::utc_offset_seconds(secs), Some(offset));
    }

    #[test]
    fn long_alerts_are_cut_to_fit_one_datagram_and_counted() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            rate_window: Duration::ZERO,
            ..config(&rx.path)
        });
        // Every value long, multi-byte and full of characters that escape
        // to four bytes: unfitted this is far over 2 KiB.
        let long = "é\u{1}\"".repeat(400);
        let f = AlertFields {
            pane: "p1",
            name: Some(&long),
            runtime: Some(&long),
            state: "blocked",
            session: Some(&long),
            cwd: Some(&long),
            jail: Some(&long),
            reason: Some(&long),
            exit_code: Some(1),
            exit_signal: None,
        };
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(0)),
            AlertOutcome::Sent
        );
        let message = rx.recv(); // panics unless valid UTF-8
        assert!(
            message.len() <= MAX_DATAGRAM_BYTES,
            "{} bytes",
            message.len()
        );
        let (header, body) = split(&message);
        assert_eq!(header[5], "blocked");
        assert!(body.starts_with("pane=p1 name=\"é"), "{body}");
        assert!(body.contains(&format!("{CUT_MARK}\" runtime=")), "{body}");
        assert!(body.contains(" exit_code=1 "), "{body}");
        let cut: usize = body
            .rsplit_once(" truncated=")
            .and_then(|(_, n)| n.parse().ok())
            .expect("a truncated=N trailer");
        assert!(cut > 6 * (long.len() - MAX_VALUE_BYTES), "cut {cut}");
        assert_eq!(alerter.stats().truncated, 1);

        // A short alert is not cut and not counted.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p1"), at(1)),
            AlertOutcome::Sent
        );
        assert!(!rx.recv().contains("truncated="));
        assert_eq!(alerter.stats().truncated, 1);
        assert_eq!(alerter.stats().sent, 2);
    }

    #[test]
    fn the_backstop_cut_keeps_utf8_and_the_limit() {
        // A header longer than the datagram (an absurd hostname) leaves no
        // room even at the smallest value limit: the hard cut applies.
        let header = Header {
            pri: 28,
            timestamp: at(0).to_rfc3339(),
            hostname: &"h".repeat(3000),
            pid: 1,
            kind: AlertKind::Blocked,
        };
        let mut out = String::new();
        let reason = "é".repeat(100);
        let f = AlertFields {
            reason: Some(&reason),
            ..fields("p1")
        };
        let cut = fit_message(&mut out, &header, &f, 0);
        assert!(out.len() <= MAX_DATAGRAM_BYTES, "{}", out.len());
        assert!(cut > 1000, "{cut}");
        assert!(
            out.ends_with(&format!("{CUT_MARK} truncated={cut}")),
            "{out}"
        );
    }

    #[test]
    fn severities_and_msgids_follow_the_kind() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            facility: Facility::LOG_LOCAL3,
            min_level: Severity::Debug,
            rate_window: Duration::ZERO,
            ..config(&rx.path)
        });
        let clean = AlertFields {
            exit_code: Some(0),
            ..fields("p1")
        };
        let failed = AlertFields {
            exit_code: Some(2),
            ..fields("p1")
        };
        let killed = AlertFields {
            exit_signal: Some(9),
            ..fields("p1")
        };
        let local3 = 19 * 8;
        let cases = [
            (AlertKind::Blocked, fields("p1"), local3 + 4, "blocked"),
            (AlertKind::Stalled, fields("p1"), local3 + 4, "stalled"),
            (AlertKind::Unstalled, fields("p1"), local3 + 5, "unstalled"),
            (AlertKind::Error, fields("p1"), local3 + 3, "error"),
            (AlertKind::Exited, clean, local3 + 5, "exited"),
            (AlertKind::Exited, failed, local3 + 3, "exited"),
            (AlertKind::Exited, killed, local3 + 3, "exited"),
        ];
        for (kind, f, pri, msgid) in cases {
            assert_eq!(alerter.alert(kind, &f, at(0)), AlertOutcome::Sent);
            let message = rx.recv();
            let (header, _) = split(&message);
            assert_eq!(header[0], format!("<{pri}>1"), "{kind:?} {f:?}");
            assert_eq!(header[5], msgid);
        }
        let last = AlertFields {
            exit_code: Some(1),
            exit_signal: Some(15),
            ..fields("p1")
        };
        alerter.alert(AlertKind::Exited, &last, at(0));
        assert!(rx
            .recv()
            .ends_with(" - pane=p1 state=blocked exit_code=1 exit_signal=15"));
    }

    #[test]
    fn values_are_quoted_only_when_needed() {
        let mut out = String::new();
        push_pair(&mut out, "a", "plain/path-1.2", MAX_VALUE_BYTES);
        push_pair(&mut out, "b", "", MAX_VALUE_BYTES);
        push_pair(&mut out, "c", "x=y", MAX_VALUE_BYTES);
        push_pair(&mut out, "d", "back\\slash", MAX_VALUE_BYTES);
        push_pair(&mut out, "e", "two\nlines", MAX_VALUE_BYTES);
        assert_eq!(
            out,
            r#" a=plain/path-1.2 b="" c="x=y" d="back\\slash" e="two\nlines""#
        );
        let long = "é".repeat(MAX_VALUE_BYTES);
        let cut = truncate(&long, MAX_VALUE_BYTES);
        assert_eq!(cut.len(), MAX_VALUE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn rate_limit_suppresses_per_pane_and_reports_the_count() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            rate_burst: 2,
            rate_window: Duration::from_secs(60),
            ..config(&rx.path)
        });
        let p1 = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(0)),
            AlertOutcome::Sent
        );
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(1)),
            AlertOutcome::Sent
        );
        for i in 0..3 {
            assert_eq!(
                alerter.alert(AlertKind::Blocked, &p1, at(2 + i)),
                AlertOutcome::RateLimited
            );
        }
        // Another pane has its own bucket.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p2"), at(3)),
            AlertOutcome::Sent
        );
        // One token comes back after window / burst = 30 s, not before.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(29_000)),
            AlertOutcome::RateLimited
        );
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(31_000)),
            AlertOutcome::Sent
        );
        let bodies: Vec<String> = (0..4).map(|_| split(&rx.recv()).1.to_owned()).collect();
        assert_eq!(
            bodies,
            [
                "pane=p1 state=blocked",
                "pane=p1 state=blocked",
                "pane=p2 state=blocked",
                "pane=p1 state=blocked suppressed=4",
            ]
        );
        // The count resets once reported.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(200_000)),
            AlertOutcome::Sent
        );
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked");
        assert_eq!(
            alerter.stats(),
            AlertStats {
                sent: 5,
                rate_limited: 4,
                dropped: 0,
                truncated: 0,
            }
        );
    }

    /// An alerter that holds its alerts, as the daemon's does.
    fn holding(cfg: AlertConfig) -> Alerter {
        let mut alerter = Alerter::new(cfg);
        alerter.hold_sends();
        alerter
    }

    #[test]
    fn held_alerts_go_out_in_order_only_when_sent_and_are_counted_then() {
        let rx = Receiver::bind();
        let mut alerter = holding(config(&rx.path));
        assert_eq!(alerter.held_due(), None);
        for (i, pane) in ["p1", "p2"].into_iter().enumerate() {
            assert_eq!(
                alerter.alert(AlertKind::Blocked, &fields(pane), at(i as u64)),
                AlertOutcome::Held
            );
        }
        rx.assert_empty();
        assert_eq!(alerter.stats().sent, 0);
        assert_eq!(alerter.held_due(), Some(at(0).plus(HOLD_FOR)));
        alerter.send_held(at(5));
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked");
        assert_eq!(split(&rx.recv()).1, "pane=p2 state=blocked");
        assert_eq!(alerter.stats().sent, 2);
        assert_eq!(alerter.held_due(), None);
        rx.assert_empty();
    }

    #[test]
    fn past_held_max_every_held_alert_is_sent_at_once() {
        let rx = Receiver::bind();
        let mut alerter = holding(config(&rx.path));
        for i in 0..HELD_MAX {
            let outcome = alerter.alert(AlertKind::Blocked, &fields(&format!("p{i}")), at(0));
            assert_eq!(outcome, AlertOutcome::Held);
        }
        for i in 0..HELD_MAX {
            assert_eq!(split(&rx.recv()).1, format!("pane=p{i} state=blocked"));
        }
        assert_eq!(alerter.held_due(), None);
    }

    #[test]
    fn alerts_suppressed_while_one_is_held_are_reported_by_the_next() {
        let rx = Receiver::bind();
        let mut alerter = holding(AlertConfig {
            rate_burst: 1,
            rate_window: Duration::from_secs(60),
            ..config(&rx.path)
        });
        let p1 = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(0)),
            AlertOutcome::Held
        );
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(1)),
            AlertOutcome::RateLimited
        );
        alerter.send_held(at(2));
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked");
        // The held alert reported none; the one rate-limited meanwhile is
        // still to be reported.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(61_000)),
            AlertOutcome::Held
        );
        alerter.send_held(at(61_001));
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked suppressed=1");
    }

    #[test]
    fn two_held_alerts_of_one_pane_never_report_the_same_suppressed_alerts() {
        let rx = Receiver::bind();
        let mut alerter = holding(AlertConfig {
            rate_burst: 2,
            rate_window: Duration::from_secs(60),
            ..config(&rx.path)
        });
        let p1 = fields("p1");
        let outcomes: Vec<AlertOutcome> = [0, 1, 2, 3, 30_003, 30_004, 60_004]
            .into_iter()
            .map(|ms| alerter.alert(AlertKind::Blocked, &p1, at(ms)))
            .collect();
        let (held, limited) = (AlertOutcome::Held, AlertOutcome::RateLimited);
        assert_eq!(
            outcomes,
            [held, held, limited, limited, held, limited, held]
        );
        alerter.send_held(at(60_005));
        let bodies: Vec<String> = (0..4).map(|_| split(&rx.recv()).1.to_owned()).collect();
        assert_eq!(
            bodies,
            [
                "pane=p1 state=blocked",
                "pane=p1 state=blocked",
                "pane=p1 state=blocked suppressed=2",
                "pane=p1 state=blocked suppressed=1",
            ]
        );
    }

    #[test]
    fn held_alerts_go_where_the_settings_they_were_raised_under_said() {
        let rx = Receiver::bind();
        let mut alerter = holding(config(&rx.path));
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p1"), at(0)),
            AlertOutcome::Held
        );
        alerter.reconfigure(AlertConfig {
            enabled: false,
            ..config(&rx.path)
        });
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked");
        assert_eq!(alerter.held_due(), None);
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p1"), at(1)),
            AlertOutcome::Disabled
        );
        alerter.send_held(at(2));
        rx.assert_empty();
        assert_eq!(alerter.stats().sent, 1);
    }

    #[test]
    fn held_alerts_are_sent_when_the_alerter_is_dropped() {
        let rx = Receiver::bind();
        let mut alerter = holding(config(&rx.path));
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &fields("p1"), at(0)),
            AlertOutcome::Held
        );
        drop(alerter);
        assert_eq!(split(&rx.recv()).1, "pane=p1 state=blocked");
    }

    #[test]
    fn forget_pane_frees_its_bucket() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            rate_burst: 1,
            ..config(&rx.path)
        });
        let p1 = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(0)),
            AlertOutcome::Sent
        );
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(1)),
            AlertOutcome::RateLimited
        );
        alerter.forget_pane("p1");
        assert!(alerter.buckets.is_empty());
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &p1, at(2)),
            AlertOutcome::Sent
        );
    }

    #[test]
    fn min_level_and_disabled_filter_before_sending() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            min_level: Severity::Warning,
            ..config(&rx.path)
        });
        let f = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Unstalled, &f, at(0)),
            AlertOutcome::BelowLevel
        );
        assert_eq!(
            alerter.alert(AlertKind::Stalled, &f, at(0)),
            AlertOutcome::Sent
        );
        assert_eq!(split(&rx.recv()).0[5], "stalled");
        rx.assert_empty();

        alerter.reconfigure(AlertConfig {
            enabled: false,
            ..config(&rx.path)
        });
        assert_eq!(
            alerter.alert(AlertKind::Error, &f, at(0)),
            AlertOutcome::Disabled
        );
        rx.assert_empty();
        alerter.reconfigure(config(&rx.path));
        assert_eq!(
            alerter.alert(AlertKind::Error, &f, at(0)),
            AlertOutcome::Sent
        );
        assert_eq!(split(&rx.recv()).0[5], "error");
        assert_eq!(alerter.stats().sent, 2);
    }

    #[test]
    fn missing_socket_recovers_once_it_appears() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mut alerter = Alerter::new(config(&path));
        let f = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(0)),
            AlertOutcome::Dropped(DropReason::NoSocket)
        );
        let rx = UnixDatagram::bind(&path).expect("bind");
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        // Within a second of the failed attempt, no new connect is tried.
        assert_eq!(
            alerter.alert(AlertKind::Stalled, &f, at(500)),
            AlertOutcome::Dropped(DropReason::NoSocket)
        );
        assert_eq!(
            alerter.alert(AlertKind::Error, &f, at(1_000)),
            AlertOutcome::Sent
        );
        let mut buf = [0u8; 2048];
        let n = rx.recv(&mut buf).expect("datagram");
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert_eq!(split(&message).0[5], "error");
        assert_eq!(
            alerter.stats(),
            AlertStats {
                sent: 1,
                rate_limited: 0,
                dropped: 2,
                truncated: 0,
            }
        );
    }

    #[test]
    fn restarted_syslogd_is_reconnected() {
        let first = Receiver::bind();
        let path = first.path.clone();
        let mut alerter = Alerter::new(config(&path));
        let f = fields("p1");
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(0)),
            AlertOutcome::Sent
        );
        assert_eq!(split(&first.recv()).0[5], "blocked");

        // syslogd exits and a new one binds the same path.
        drop(first.socket);
        std::fs::remove_file(&path).expect("remove old socket");
        let outcome = alerter.alert(AlertKind::Stalled, &f, at(10));
        assert_eq!(outcome, AlertOutcome::Dropped(DropReason::Disconnected));
        let second = UnixDatagram::bind(&path).expect("rebind");
        second
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        assert_eq!(
            alerter.alert(AlertKind::Error, &f, at(1_010)),
            AlertOutcome::Sent
        );
        let mut buf = [0u8; 2048];
        let n = second.recv(&mut buf).expect("datagram");
        assert_eq!(split(&String::from_utf8_lossy(&buf[..n])).0[5], "error");
    }

    #[test]
    fn full_socket_drops_without_blocking() {
        let rx = Receiver::bind();
        let mut alerter = Alerter::new(AlertConfig {
            rate_window: Duration::ZERO,
            ..config(&rx.path)
        });
        let reason = "r".repeat(MAX_VALUE_BYTES);
        let f = AlertFields {
            reason: Some(&reason),
            ..fields("p1")
        };
        let started = Instant::now();
        let mut first_drop = None;
        for i in 0..100_000u64 {
            match alerter.alert(AlertKind::Blocked, &f, at(i)) {
                AlertOutcome::Sent => {}
                AlertOutcome::Dropped(reason) => {
                    first_drop = Some((i, reason));
                    break;
                }
                other => panic!("unexpected outcome {other:?}"),
            }
        }
        let (sent, reason) = first_drop.expect("the receiver's buffer never filled");
        assert_eq!(reason, DropReason::Full);
        // Still full: further alerts drop too, and the socket is kept.
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(200_000)),
            AlertOutcome::Dropped(DropReason::Full)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(alerter.stats().sent, sent);
        assert_eq!(alerter.stats().dropped, 2);
        // Reading makes room again.
        let _ = rx.recv();
        assert_eq!(
            alerter.alert(AlertKind::Blocked, &f, at(200_001)),
            AlertOutcome::Sent
        );
    }

    #[test]
    fn severity_and_facility_names_round_trip() {
        for s in [
            Severity::Emerg,
            Severity::Alert,
            Severity::Crit,
            Severity::Err,
            Severity::Warning,
            Severity::Notice,
            Severity::Info,
            Severity::Debug,
        ] {
            assert_eq!(s.name().parse::<Severity>(), Ok(s));
        }
        assert_eq!("warn".parse::<Severity>(), Ok(Severity::Warning));
        assert!("loud".parse::<Severity>().is_err());
        for name in ["daemon", "user", "local0", "local7"] {
            let facility = parse_facility(name).expect("known facility");
            assert_eq!(facility_name(facility), name);
        }
        assert!(parse_facility("daemons").is_none());
    }
}
