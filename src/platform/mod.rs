//! Every OS-specific line of colibri, behind one interface.
//!
//! This module owns the kernel-facing edge of the daemon: PTY pairs, spawning
//! an agent on its PTY (optionally inside a FreeBSD jail), child-exit notices,
//! kernel timers and signals delivered through the one mio poll, reaping,
//! killing a process tree, peer credentials and a few host facts.
//!
//! **Invariant:** this is the only module in the crate with `cfg(target_os)`.
//! The shared types live here; `posix.rs` holds the code that is identical on
//! both systems; `linux.rs` and `freebsd.rs` implement the rest with the same
//! signatures, and the re-export lists below are the whole interface (a name
//! missing from one back end fails to compile on that target).
//!
//! Event sources (`ExitWatch`, `KernelTimer`, `SignalSource`) register in the
//! caller's `mio::Registry` under the caller's `mio::Token`: on Linux as file
//! descriptors (pidfd, timerfd, signalfd), on FreeBSD as kevents added to the
//! kqueue mio owns, with `udata` = the token. mio's `Event` predicates mean
//! nothing for those kevents: dispatch on the token alone.
//!
//! `freebsd.rs` runs on a FreeBSD kernel in CI's FreeBSD lane
//! (`scripts/freebsd-vm-test.sh`); its module comment says what that checks.

#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
compile_error!("colibri's platform layer supports Linux and FreeBSD only");

mod posix;

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;

#[cfg(target_os = "freebsd")]
#[path = "freebsd.rs"]
mod os;

#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub use crate::core::pane::ExitStatus;

pub use os::{
    become_subreaper, connect_in_jail, open_pty, os_release, parent_pid, peer_cred, pid_jail,
    process_children, process_env_var, process_fds, process_info, resolve_jail, self_rss_bytes,
    set_process_fd_limit, signal_orphans, signal_orphans_with_env, signal_tree, signal_trees,
    spawn_on_pty, spawn_piped, ExitWatch, KernelTimer, SignalSource,
};
pub use posix::{
    effective_uid, ensure_std_fds, hostname, input_pipe, line_mode, lookup_user, open_dir_beneath,
    open_file_at, peer_hung_up, raise_fd_limit, read_master, reap, reap_any, replace_file_at,
    session_of, set_raw, set_window_size, signal_group, utc_offset_seconds, write_nonblocking,
};

/// Where a walk up a process's parents ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AncestryEnd {
    /// At `stop`, the last of the chain.
    Stop,
    /// At init: the process is not below `stop`.
    Init,
    /// A process of the chain is gone (the peer itself, say): who it was
    /// below cannot be told.
    Gone,
    /// `max` steps without an end.
    Deep,
}

/// `pid` and its parents, nearest first, up to `stop` (included when
/// reached), init, or a process that is gone; at most `max` of them, and
/// how the walk ended. The daemon finds which agent a peer belongs to by
/// walking up to a pane's process (colibrid is every agent's subreaper, so
/// an orphaned descendant's chain ends at colibrid, `stop`).
pub fn ancestry(pid: Pid, stop: Pid, max: usize) -> (Vec<Pid>, AncestryEnd) {
    let mut chain = Vec::new();
    let mut at = pid;
    loop {
        if at <= 1 {
            return (chain, AncestryEnd::Init);
        }
        if chain.len() == max {
            return (chain, AncestryEnd::Deep);
        }
        chain.push(at);
        if at == stop {
            return (chain, AncestryEnd::Stop);
        }
        match parent_pid(at) {
            Some(parent) => at = parent,
            None => return (chain, AncestryEnd::Gone),
        }
    }
}

/// Who holds the other end of a local socket, for per-peer caps: the uid,
/// and on FreeBSD the jail (a uid is jail-local there). `jail` is 0 on the
/// host and on Linux, -1 when the kernel did not say which process it is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey {
    pub uid: u32,
    pub jail: i32,
}

/// The [`PeerKey`] of a connected local socket.
pub fn peer_key(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<PeerKey> {
    let cred = peer_cred(fd)?;
    let jail = match cred.pid {
        Some(pid) => pid_jail(pid).unwrap_or(-1),
        None => -1,
    };
    Ok(PeerKey {
        uid: cred.uid,
        jail,
    })
}

/// A process id, as the kernel and `libc::pid_t` spell it.
pub type Pid = i32;

/// What the kernel says about one process ([`process_info`]), read the same
/// way on both systems: Linux from `/proc/PID/stat`, FreeBSD from
/// `kinfo_proc` (sysctl `kern.proc.pid`). The daemon asks whether an agent
/// has begun to exit; the tests ask what colibrid left running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub ppid: Pid,
    pub state: ProcessState,
    /// The process has begun to exit: FreeBSD's `P_WEXIT` (set while the
    /// exiting process still closes its files, before the exit is
    /// reported), or a zombie.
    pub exiting: bool,
    /// Resident set size.
    pub rss_bytes: u64,
    /// The largest resident set size so far (Linux `VmHWM`, FreeBSD
    /// `ru_maxrss`).
    pub peak_rss_bytes: u64,
    /// User plus system CPU time so far.
    pub cpu: std::time::Duration,
}

/// One open file descriptor of a process ([`process_fds`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFd {
    pub fd: i32,
    pub kind: FdKind,
    /// What it names: a path for files and devices (when the kernel still
    /// knows it), otherwise the kernel's own label (Linux's
    /// `socket:[inode]`; on FreeBSD the kind and the descriptor number).
    pub name: String,
}

/// What an open file descriptor refers to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A file or directory on disk.
    File,
    /// A device node (a terminal, `/dev/null`).
    Device,
    Socket,
    Pipe,
    /// kqueue, eventfd, timerfd, pidfd, a PTY master, ...
    Other,
}

/// A connection made from inside a jail ([`connect_in_jail`]). The process
/// that connected stays alive, waiting, until this is dropped: the daemon
/// checks a jail socket's peer by the pid the kernel recorded at connect
/// time, and a peer that is gone by the time it is accepted is refused.
#[derive(Debug)]
pub struct JailConnection {
    pub stream: std::os::unix::net::UnixStream,
    /// Our end of the pair the connecting child waits on.
    keeper: Option<std::os::unix::net::UnixStream>,
    child: Pid,
}

impl Drop for JailConnection {
    fn drop(&mut self) {
        // The child reads until end of file, then exits; the kill makes
        // sure of it, so this never waits on a child that did not.
        drop(self.keeper.take());
        let child = nix::unistd::Pid::from_raw(self.child);
        let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(child, None);
    }
}

/// A process's scheduling state, as far as both systems agree.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProcessState {
    Running,
    Sleeping,
    /// Stopped by a signal (or traced).
    Stopped,
    /// Exited, not yet reaped.
    Zombie,
    /// Being created, or a state only one system has.
    Other,
}

/// Whether the kernel discards a terminal's unread output soon after the
/// last process holding it closes it. FreeBSD's last close waits about a
/// second for the master to read (`tty_drain(tp, 1)` in `sys/kern/tty.c`),
/// then frees the queue, and only then is the exit reported; Linux keeps
/// the bytes readable until the master drains them.
pub const EXIT_DISCARDS_UNREAD_OUTPUT: bool = cfg!(target_os = "freebsd");

/// Whether an [`ExitWatch`] holds a file descriptor: Linux's pidfd does,
/// FreeBSD's `EVFILT_PROC` kevent does not. A running agent costs the
/// daemon its PTY master, plus this.
pub const EXIT_WATCH_HOLDS_FD: bool = cfg!(target_os = "linux");

/// Whether `spawn-agent {"jail": …}` can work here: jails are FreeBSD's.
pub const JAILS_SUPPORTED: bool = cfg!(target_os = "freebsd");

/// How an agent's terminal starts (the program may change it, as a TUI
/// does when it takes the screen).
///
/// Neither mode echoes or post-processes output: what the daemon writes
/// must not come back as agent output, and the agent's `\n` must reach the
/// log as `\n`. They differ in the input:
/// - `Raw` (`cfmakeraw`): bytes as written, no line limit. For harnesses
///   colibri speaks JSON to (Pi's RPC, Claude's stream-json): a terminal
///   in canonical mode cuts a line at 4,095 bytes on Linux (`N_TTY`), and
///   FreeBSD waits for a newline that cannot fit its 23 KB input queue,
///   where a prompt or a task is often longer.
/// - `Line`: canonical input with `ICRNL` and signals, as a fresh terminal
///   has it, so a program that reads lines (`read`, `input()`, a REPL)
///   gets one when the operator presses Enter in `colibri attach` (which
///   sends `\r`), Backspace edits, and Ctrl-C interrupts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TerminalMode {
    Raw,
    Line,
}

/// A PTY pair. The master is non-blocking and close-on-exec; the slave is
/// close-on-exec, in the [`TerminalMode`] asked for, and has its window
/// size set.
///
/// The caller hands `slave` to [`spawn_on_pty`] and must drop it right after:
/// the master reports EOF only once every slave descriptor is closed.
#[derive(Debug)]
pub struct PtyPair {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// The result of one [`read_master`] call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were read into the front of the buffer.
    Data(usize),
    /// Nothing to read now (edge-triggered: wait for the next readiness event).
    WouldBlock,
    /// Every slave descriptor is closed and the buffered output is drained.
    Eof,
}

/// The agent's `PATH` when neither the spawn's `env` nor the daemon's
/// configuration gives one (the `[daemon] agent_path` default). rc(8) and
/// service(8) start the daemon with `PATH=/sbin:/bin:/usr/sbin:/usr/bin`,
/// where `pi`, `claude`, `codex` and `node` (all in `/usr/local/bin` on
/// FreeBSD) are not found; the daemon's own PATH is never the agent's.
pub const DEFAULT_AGENT_PATH: &str = "/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin";

/// What to start on a PTY, and as whom.
#[derive(Clone, Debug, Default)]
pub struct SpawnSpec {
    /// Program and arguments; `argv[0]` is looked up before fork in the
    /// agent's `PATH` (see `agent_path`), in the jail's view of the
    /// filesystem when `jail` is set.
    pub argv: Vec<String>,
    /// Variables set on top of the inherited (or cleared) environment; they
    /// win over everything the spawn fills in (`PATH`, `HOME`, `USER`, ...).
    pub env: Vec<(String, String)>,
    /// The agent's `PATH` when `env` has none, also used to find `argv[0]`
    /// before fork; `None` means [`DEFAULT_AGENT_PATH`].
    pub agent_path: Option<String>,
    /// Start from an empty environment instead of the daemon's (`PATH` and
    /// the account's `HOME`, `USER`, `LOGNAME`, `SHELL` are still set).
    pub clear_env: bool,
    /// Working directory; with `jail` it is a path inside the jail (default `/`).
    pub cwd: Option<PathBuf>,
    /// Attach the child to this running jail before exec (FreeBSD only).
    pub jail: Option<JailTarget>,
    /// Drop to these ids before exec (resolved by the caller, before fork).
    pub user: Option<UserIds>,
    /// The child's stdin instead of the PTY slave: the read end of an
    /// [`input_pipe`], for a harness that refuses a terminal as its input
    /// (Claude Code's `--input-format stream-json`). The caller keeps it
    /// open across the spawn and closes it right after; stdout and stderr
    /// stay on the PTY, which stays the controlling terminal.
    pub stdin: Option<std::os::fd::RawFd>,
}

/// A running jail, resolved by name at spawn time (jail ids change on every
/// jail start, names do not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JailTarget {
    pub name: String,
    pub jid: i32,
    /// The jail's root directory as seen from the host.
    pub root: PathBuf,
}

/// Numeric credentials for a child, looked up before fork (a child between
/// fork and exec may not allocate or read files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserIds {
    /// Login name from the passwd entry (the agent's `USER` and `LOGNAME`).
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, primary group first.
    pub groups: Vec<u32>,
    /// Home directory as the passwd file says (inside the jail for a jail's
    /// passwd file).
    pub home: Option<PathBuf>,
    /// Login shell from the passwd entry (the agent's `SHELL`).
    pub shell: Option<PathBuf>,
}

/// Why [`spawn_on_pty`] or [`resolve_jail`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("empty argv: nothing to execute")]
    EmptyArgv,
    /// The named part of the spec contains a NUL byte, which no C string can hold.
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
    /// A system call failed: in the daemon, in the child before exec (std
    /// reports pre_exec and exec failures through its CLOEXEC pipe), or the
    /// jail lookup.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("unsupported on this system: {0}")]
    Unsupported(&'static str),
    /// A program named without `/` is in no directory of the agent's
    /// `PATH` (`path`, as searched), checked before fork.
    #[error("{program}: not found in PATH {path}")]
    NotInPath { program: String, path: String },
}

/// The signals the daemon acts on, delivered through the poll by [`SignalSource`].
///
/// Every signal whose default action would end the daemon (and so leave its
/// agents unsupervised, its socket file behind and its logs unflushed) is
/// either acted on or received and counted here; SIGPIPE alone is set to
/// SIG_IGN (a write to a closed peer then fails with EPIPE, which the caller
/// handles).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DaemonSignal {
    Terminate,
    Interrupt,
    Quit,
    Hangup,
    /// SIGCHLD, with the pid of the child that raised it when the system
    /// says (Linux's signalfd does; FreeBSD's kqueue only counts). SIGCHLD
    /// is not queued: one signal may stand for several children.
    Child(Option<Pid>),
    /// SIGUSR1: write a one-line summary of the daemon to its log.
    User1,
    /// SIGUSR2: no meaning yet; received, counted, otherwise ignored.
    User2,
    /// A signal whose default action terminates, received and counted only
    /// (ALRM, VTALRM, PROF, XCPU, XFSZ, and the Linux-only POLL, PWR, STKFLT).
    Ignored(&'static str),
}

impl DaemonSignal {
    /// The signal numbers [`SignalSource`] watches on every system, in one
    /// place for both back ends (each may add its own in `os::EXTRA_SIGNALS`).
    const ALL: [(libc::c_int, DaemonSignal); 12] = [
        (libc::SIGTERM, DaemonSignal::Terminate),
        (libc::SIGINT, DaemonSignal::Interrupt),
        (libc::SIGQUIT, DaemonSignal::Quit),
        (libc::SIGHUP, DaemonSignal::Hangup),
        (libc::SIGCHLD, DaemonSignal::Child(None)),
        (libc::SIGUSR1, DaemonSignal::User1),
        (libc::SIGUSR2, DaemonSignal::User2),
        (libc::SIGALRM, DaemonSignal::Ignored("ALRM")),
        (libc::SIGVTALRM, DaemonSignal::Ignored("VTALRM")),
        (libc::SIGPROF, DaemonSignal::Ignored("PROF")),
        (libc::SIGXCPU, DaemonSignal::Ignored("XCPU")),
        (libc::SIGXFSZ, DaemonSignal::Ignored("XFSZ")),
    ];

    /// Every watched signal of this system: the portable ones and the back
    /// end's own.
    fn watched() -> impl Iterator<Item = (libc::c_int, DaemonSignal)> {
        DaemonSignal::ALL
            .into_iter()
            .chain(os::EXTRA_SIGNALS.iter().copied())
    }

    fn from_signo(signo: libc::c_int) -> Option<DaemonSignal> {
        DaemonSignal::watched()
            .find(|(n, _)| *n == signo)
            .map(|(_, s)| s)
    }

    /// Every signal number colibrid watches on this system, with the name
    /// `status` counts it under (SIGCHLD included).
    pub fn watched_names() -> Vec<(libc::c_int, &'static str)> {
        DaemonSignal::watched()
            .map(|(signo, s)| (signo, s.name()))
            .collect()
    }

    /// The signal's name without `SIG`, as `status` counts it.
    pub fn name(self) -> &'static str {
        match self {
            DaemonSignal::Terminate => "TERM",
            DaemonSignal::Interrupt => "INT",
            DaemonSignal::Quit => "QUIT",
            DaemonSignal::Hangup => "HUP",
            DaemonSignal::Child(_) => "CHLD",
            DaemonSignal::User1 => "USR1",
            DaemonSignal::User2 => "USR2",
            DaemonSignal::Ignored(name) => name,
        }
    }
}

/// Credentials of the process at the other end of a connected Unix stream,
/// as of its `connect()`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// `None` when the kernel did not report one (FreeBSD before 13).
    pub pid: Option<i32>,
    /// Effective uid. Jail-local on FreeBSD: authorize by jail, not by uid.
    pub uid: u32,
    pub gid: u32,
}
