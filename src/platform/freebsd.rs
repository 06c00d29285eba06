//! FreeBSD back end: kevents on mio's own kqueue, procctl reaping, jails.
//!
//! **Run on a FreeBSD kernel, in a VM.** colibri is developed on Linux;
//! `scripts/freebsd-vm-test.sh` runs this file's tests (`platform/tests.rs`),
//! the integration tests and `scripts/freebsd-smoke.sh` on a FreeBSD 15.1
//! kernel with a 13.2 userland under QEMU, on every CI run. FreeBSD 14 has
//! not run. What that run checks, among the rest:
//! - `ExitWatch`: EVFILT_PROC/NOTE_EXIT added to mio's kqueue comes out of
//!   `Poll::poll` with our token (mio decodes `Token(udata)`), including the
//!   immediate note when the child is already a zombie at registration.
//! - `KernelTimer`: EV_ADD on a live EVFILT_TIMER re-arms it (drops the old
//!   deadline) and EV_DELETE after a delivered EV_ONESHOT gives ENOENT.
//! - `SignalSource`: a private kqueue nested in mio's kqueue becomes readable
//!   when one of its EVFILT_SIGNAL notes fires (see the type's comment).
//! - `signal_tree`: PROC_REAP_KILL with REAPER_KILL_SUBTREE reaches setsid'ed
//!   and jailed descendants.
//! - `resolve_jail` (jail_get by name), `pid_jail`/`self_rss_bytes`
//!   (kinfo_proc size checks), `peer_cred` (xucred `cr_pid`), the process
//!   probes (`kinfo_proc`, `kinfo_file`) and `connect_in_jail`.
//!
//! Every kevent is applied with `nevents = 0`, so an error comes back as
//! -1/errno and no pending event of mio's is consumed. mio's `Event`
//! predicates are meaningless for these kevents (a process exit even reads
//! as `is_error()`): dispatch on the token alone.

use std::ffi::{CStr, CString};
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::errno::Errno;
use nix::pty::PtyMaster;

use super::posix::{self, JailEntry};
use super::{
    DaemonSignal, FdKind, JailTarget, OpenFd, PeerCred, Pid, ProcessInfo, ProcessState, PtyPair,
    SpawnError, SpawnSpec, TerminalMode,
};

/// Opens a PTY pair (see [`PtyPair`]) at [`PTY_SPEED`].
pub fn open_pty(cols: u16, rows: u16, mode: TerminalMode) -> io::Result<PtyPair> {
    posix::open_pty_with(cols, rows, mode, pts_name, Some(PTY_SPEED))
}

/// FreeBSD sizes a terminal's queues for 0.2 s of data at its line speed
/// (`tty_watermarks` in sys/kern/tty.c): at a new PTY's 9,600 baud the
/// output queue is 1,920 bytes, so a streaming agent would wait for
/// colibrid every 1.9 KB. A PTY takes at most 115,200 baud (the default
/// `ttydevsw_defparam` clamps it, and `pts` has no other), which gives
/// both queues 23,040 bytes.
pub const PTY_SPEED: nix::sys::termios::BaudRate = nix::sys::termios::BaudRate::B115200;

/// The slave's path via libc's ptsname_r (nix binds it on Linux only).
fn pts_name(master: &PtyMaster) -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for buf.len() bytes; ptsname_r writes a
    // NUL-terminated name into it or fails (0 or -1 with errno on FreeBSD).
    let rc = unsafe {
        libc::ptsname_r(
            master.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let name = CStr::from_bytes_until_nul(&buf)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "unterminated pts name"))?;
    name.to_str()
        .map(str::to_owned)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 pts name"))
}

/// Starts `spec.argv` on the PTY slave as a session leader whose controlling
/// terminal is the PTY, inside `spec.jail` if set; returns its pid without
/// waiting for it.
///
/// With a jail the child runs: setsid, TIOCSCTTY, jail_attach(jid), chdir to
/// `spec.cwd` inside the jail (default `/`), setgroups/setgid/setuid, exec
/// (PATH resolved inside the jail). std's own chdir and set*id are not used
/// there: they run before pre_exec, i.e. on the host and before the attach
/// (which then fails EPERM once root is dropped).
/// A program on the host with its output on a pipe (`posix::spawn_piped_with`).
pub fn spawn_piped(spec: &SpawnSpec) -> Result<(Pid, OwnedFd), SpawnError> {
    posix::spawn_piped_with(spec, close_inherited, posix::fork_child)
}

pub fn spawn_on_pty(spec: &SpawnSpec, slave: &OwnedFd) -> Result<Pid, SpawnError> {
    let jail = match &spec.jail {
        None => None,
        Some(target) => {
            let cwd = spec.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
            Some(JailEntry {
                jid: target.jid,
                cwd: path_cstring(&cwd, "cwd")?,
                attach: jail_attach,
            })
        }
    };
    // fork(2): FreeBSD's vfork-style paths (vfork, rfork_thread with
    // RFSPAWN) would spare the copy of the daemon's page tables, as the
    // Linux half does, but nothing here can run them, so the plain path stays.
    posix::spawn_with(spec, slave, jail, close_inherited, posix::fork_child)
}

fn path_cstring(path: &Path, what: &'static str) -> Result<CString, SpawnError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SpawnError::Nul(what))
}

/// Runs in the child: moves it into the jail (chroot to the jail root,
/// prison credential, cwd = jail root). Root only.
fn jail_attach(jid: i32) -> io::Result<()> {
    // SAFETY: jail_attach takes an integer.
    if unsafe { libc::jail_attach(jid) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// close_range(3, ~0, 0) (FreeBSD 12.2+; what libc's closefrom(3) calls),
/// else the close loop. Runs in the child between fork and exec, before
/// jail_attach (see `posix::child_setup`).
fn close_inherited() -> io::Result<()> {
    // SAFETY: close_range takes integers; closing the child's fds 3.. is
    // intended (nothing after fork uses them).
    let rc = unsafe { libc::close_range(3, u32::MAX, 0) };
    if rc == 0 {
        return Ok(());
    }
    posix::close_fds_from_3_by_loop()
}

/// One kevent change record; `udata` carries the mio token.
fn kevent_change(
    ident: usize,
    filter: i16,
    flags: u16,
    fflags: u32,
    data: i64,
    udata: usize,
) -> libc::kevent {
    // SAFETY: kevent is plain data (integers, a raw pointer, an array of
    // integers); all-zero is a valid value.
    let mut kev: libc::kevent = unsafe { mem::zeroed() };
    kev.ident = ident;
    kev.filter = filter;
    kev.flags = flags;
    kev.fflags = fflags;
    kev.data = data;
    kev.udata = udata as *mut libc::c_void;
    kev
}

/// Applies one change to a kqueue without collecting events.
fn apply_change(kq: RawFd, change: &libc::kevent) -> io::Result<()> {
    // SAFETY: change points to one initialised kevent; the event list is
    // null with nevents 0, so nothing is written and errors come back as -1.
    let rc = unsafe { libc::kevent(kq, change, 1, ptr::null_mut(), 0, ptr::null()) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_errno(err: &io::Error, errno: Errno) -> bool {
    err.raw_os_error() == Some(errno as i32)
}

/// EVFILT_PROC/NOTE_EXIT for one child, added to mio's kqueue with
/// `udata` = the token. The note only observes (reap with `reap`) and is
/// EV_ONESHOT: it is gone once delivered.
#[derive(Debug)]
pub struct ExitWatch {
    pid: Pid,
    already_exited: bool,
}

impl ExitWatch {
    pub fn register(registry: &Registry, pid: Pid, token: Token) -> io::Result<ExitWatch> {
        let ident = usize::try_from(pid).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("invalid pid {pid}"))
        })?;
        let change = kevent_change(
            ident,
            libc::EVFILT_PROC,
            libc::EV_ADD,
            libc::NOTE_EXIT,
            0,
            token.0,
        );
        match apply_change(registry.as_raw_fd(), &change) {
            Ok(()) => Ok(ExitWatch {
                pid,
                already_exited: false,
            }),
            // An unreaped zombie still attaches (and fires at once), so ESRCH
            // means the pid was already reaped: no event will come.
            Err(e) if is_errno(&e, Errno::ESRCH) => Ok(ExitWatch {
                pid,
                already_exited: true,
            }),
            Err(e) => Err(e),
        }
    }

    pub fn already_exited(&self) -> bool {
        self.already_exited
    }

    /// Removes the note only while the pid is provably still ours: once the
    /// child is reaped its pid can be reused, and an EV_DELETE on
    /// (pid, EVFILT_PROC) would then remove another pane's watch. After
    /// delivery the ONESHOT note is gone anyway; a note left behind (child
    /// reaped by a `reap_any` sweep before it was delivered) fires at most
    /// once more with a stale token, which the daemon ignores.
    pub fn deregister(self, registry: &Registry) {
        if self.already_exited || !still_our_child(self.pid) {
            return;
        }
        let Ok(ident) = usize::try_from(self.pid) else {
            return;
        };
        let change = kevent_change(ident, libc::EVFILT_PROC, libc::EV_DELETE, 0, 0, 0);
        // ENOENT: already delivered. Nothing else to do about other errors.
        let _ = apply_change(registry.as_raw_fd(), &change);
    }
}

/// True while `pid` is our child and not yet reaped (running or zombie):
/// waitid with WNOWAIT looks without reaping.
fn still_our_child(pid: Pid) -> bool {
    let id = libc::id_t::from(pid);
    // SAFETY: siginfo_t is plain data; all-zero is valid.
    let mut info: libc::siginfo_t = unsafe { mem::zeroed() };
    // SAFETY: info is a valid out-pointer for the call.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    rc == 0
}

/// Longest timer accepted: longer requests are clamped (a year is "never"
/// for a stall or heartbeat deadline, and stays far from kernel limits).
const MAX_TIMER: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum TimerMode {
    Oneshot,
    Periodic,
}

/// EVFILT_TIMER on mio's kqueue, `ident` = the token's number (timer idents
/// live in their own namespace: (ident, filter) keys a note, so timer 7 does
/// not collide with fd 7 or pid 7), `udata` = the token, NOTE_USECONDS.
///
/// Re-arming is EV_ADD on the same ident: the kernel drops the old deadline
/// and its undelivered expirations. Switching between oneshot and periodic
/// deletes first (EV_ADD does not change the EV_ONESHOT flag of a live note).
#[derive(Debug)]
pub struct KernelTimer {
    token: Token,
    /// What the timer is armed as, for `acknowledge`; `None` when disarmed
    /// or after a oneshot was acknowledged.
    armed: Option<TimerMode>,
    /// What the kernel note was last added as (it may since be gone: a fired
    /// oneshot deletes itself).
    note: Option<TimerMode>,
}

impl KernelTimer {
    /// Nothing is registered until the first arm.
    pub fn new(_registry: &Registry, token: Token) -> io::Result<KernelTimer> {
        Ok(KernelTimer {
            token,
            armed: None,
            note: None,
        })
    }

    pub fn arm_oneshot(&mut self, registry: &Registry, after: Duration) -> io::Result<()> {
        self.arm(registry, after, TimerMode::Oneshot)
    }

    pub fn arm_periodic(&mut self, registry: &Registry, every: Duration) -> io::Result<()> {
        self.arm(registry, every, TimerMode::Periodic)
    }

    fn arm(&mut self, registry: &Registry, period: Duration, mode: TimerMode) -> io::Result<()> {
        if self.note.is_some_and(|m| m != mode) {
            self.delete(registry)?;
        }
        // A zero oneshot would fire at once anyway; a zero period is treated
        // as one unit by the kernel. Clamp both to 1 µs for clarity.
        let micros = period.min(MAX_TIMER).as_micros().max(1);
        let data = i64::try_from(micros).unwrap_or(i64::MAX);
        let flags = match mode {
            TimerMode::Oneshot => libc::EV_ADD | libc::EV_ONESHOT,
            TimerMode::Periodic => libc::EV_ADD,
        };
        let change = kevent_change(
            self.token.0,
            libc::EVFILT_TIMER,
            flags,
            libc::NOTE_USECONDS,
            data,
            self.token.0,
        );
        apply_change(registry.as_raw_fd(), &change)?;
        self.note = Some(mode);
        self.armed = Some(mode);
        Ok(())
    }

    fn delete(&mut self, registry: &Registry) -> io::Result<()> {
        let change = kevent_change(
            self.token.0,
            libc::EVFILT_TIMER,
            libc::EV_DELETE,
            0,
            0,
            self.token.0,
        );
        self.note = None;
        match apply_change(registry.as_raw_fd(), &change) {
            // ENOENT: a oneshot that already fired removed itself.
            Err(e) if !is_errno(&e, Errno::ENOENT) => Err(e),
            _ => Ok(()),
        }
    }

    pub fn disarm(&mut self, registry: &Registry) -> io::Result<()> {
        self.armed = None;
        if self.note.is_some() {
            self.delete(registry)?;
        }
        Ok(())
    }

    /// mio does not expose the kevent's `data` (the expiration count), so
    /// this reports 1 for an armed timer and 0 for a disarmed one. A oneshot
    /// counts as disarmed once acknowledged. Limitation: an event already
    /// fetched in the same `poll` batch before a re-arm still reads as 1;
    /// handlers should compare their own deadline with the clock.
    pub fn acknowledge(&mut self) -> u64 {
        match self.armed {
            None => 0,
            Some(TimerMode::Periodic) => 1,
            Some(TimerMode::Oneshot) => {
                self.armed = None;
                1
            }
        }
    }

    pub fn deregister(mut self, registry: &Registry) {
        let _ = self.disarm(registry);
    }
}

/// TERM, INT, HUP and CHLD through a private kqueue nested in mio's.
///
/// Design: mio hides a kevent's `ident`, so signals registered directly on
/// mio's kqueue with one token could not be told apart. Instead a private
/// kqueue holds one EVFILT_SIGNAL note per signal, and that kqueue's
/// descriptor is registered READABLE in mio (a kqueue is readable while it
/// has pending events). `drain` then reads the private kqueue, whose events
/// do carry the signal number. EVFILT_SIGNAL notes are EV_CLEAR and record
/// every delivery attempt even for SIG_IGN, so TERM/INT/HUP are set to
/// SIG_IGN (nothing runs in a handler) and SIGCHLD stays at SIG_DFL
/// (SIG_IGN would auto-reap children, and then the note does not fire).
/// Children get default dispositions back in `spawn_on_pty`.
#[derive(Debug)]
pub struct SignalSource {
    kq: OwnedFd,
}

impl SignalSource {
    pub fn register(registry: &Registry, token: Token) -> io::Result<SignalSource> {
        // SAFETY: kqueue takes no arguments and returns a new descriptor or -1.
        let raw = unsafe { libc::kqueue() };
        if raw == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor that nothing else owns.
        let kq = unsafe { OwnedFd::from_raw_fd(raw) };
        // Kqueues are not inherited by fork; CLOEXEC keeps the rule "every daemon fd is CLOEXEC".
        nix::fcntl::fcntl(
            &kq,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )?;
        for (signo, _) in DaemonSignal::watched() {
            let ident =
                usize::try_from(signo).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            apply_change(
                kq.as_raw_fd(),
                &kevent_change(ident, libc::EVFILT_SIGNAL, libc::EV_ADD, 0, 0, 0),
            )?;
        }
        // Notes first, dispositions second: a TERM in between still stops
        // the daemon (default action) instead of being lost.
        // SIGCHLD keeps its default (ignored, but children stay reapable);
        // every other watched signal would end the daemon by default.
        let ignored = DaemonSignal::watched()
            .map(|(signo, _)| signo)
            .filter(|signo| *signo != libc::SIGCHLD);
        for signo in ignored.chain([libc::SIGPIPE]) {
            // SAFETY: SIG_IGN is a valid disposition for these catchable signals.
            if unsafe { libc::signal(signo, libc::SIG_IGN) } == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
        }
        registry.register(&mut SourceFd(&kq.as_raw_fd()), token, Interest::READABLE)?;
        Ok(SignalSource { kq })
    }

    /// Reads every pending note of the private kqueue (zero timeout) and
    /// appends one entry per signal that arrived since the last drain.
    pub fn drain(&mut self, out: &mut Vec<DaemonSignal>) {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: kevent is plain data; all-zero is valid.
        let mut events: [libc::kevent; 8] = unsafe { mem::zeroed() };
        loop {
            // SAFETY: events is writable for its length; no changes are passed;
            // the zero timeout makes the call non-blocking.
            let n = unsafe {
                libc::kevent(
                    self.kq.as_raw_fd(),
                    ptr::null(),
                    0,
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    &zero,
                )
            };
            let Ok(n) = usize::try_from(n) else {
                if Errno::last() == Errno::EINTR {
                    continue;
                }
                return;
            };
            for event in events.iter().take(n) {
                if event.filter == libc::EVFILT_SIGNAL {
                    out.extend(
                        libc::c_int::try_from(event.ident)
                            .ok()
                            .and_then(DaemonSignal::from_signo),
                    );
                }
            }
            if n < events.len() {
                return;
            }
        }
    }

    /// Removes the private kqueue from the poll and closes it (dispositions stay).
    pub fn deregister(self, registry: &Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.kq.as_raw_fd()));
    }
}

/// `struct procctl_reaper_kill` from sys/sys/procctl.h (not in the libc crate).
#[repr(C)]
struct ProcctlReaperKill {
    rk_sig: libc::c_int,
    rk_flags: libc::c_uint,
    rk_subtree: libc::pid_t,
    rk_killed: libc::c_uint,
    rk_fpid: libc::pid_t,
    rk_pad0: [libc::c_uint; 15],
}

/// `struct procctl_reaper_status` from sys/sys/procctl.h.
#[repr(C)]
struct ProcctlReaperStatus {
    rs_flags: libc::c_uint,
    rs_children: libc::c_uint,
    rs_descendants: libc::c_uint,
    rs_reaper: libc::pid_t,
    rs_pid: libc::pid_t,
    rs_pad0: [libc::c_uint; 15],
}

const REAPER_KILL_SUBTREE: libc::c_uint = 0x2;
const REAPER_STATUS_OWNED: libc::c_uint = 0x1;
const PROC_REAP_STATUS: libc::c_int = 4;

fn own_pid_id() -> libc::id_t {
    // SAFETY: getpid has no preconditions.
    libc::id_t::from(unsafe { libc::getpid() })
}

/// PROC_REAP_ACQUIRE: descendants forked from now on are re-parented to us
/// when orphaned (call before the first spawn); they must be reaped with
/// `reap_any`. Already being a reaper (EBUSY) is fine.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: PROC_REAP_ACQUIRE takes no data.
    let rc = unsafe {
        libc::procctl(
            libc::P_PID,
            own_pid_id(),
            libc::PROC_REAP_ACQUIRE,
            ptr::null_mut(),
        )
    };
    if rc == -1 && Errno::last() != Errno::EBUSY {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// PROC_REAP_STATUS of this process.
fn reaper_status() -> io::Result<ProcctlReaperStatus> {
    // SAFETY: plain-data struct; all-zero is valid.
    let mut status: ProcctlReaperStatus = unsafe { mem::zeroed() };
    // SAFETY: PROC_REAP_STATUS fills the struct the pointer refers to.
    let rc = unsafe {
        libc::procctl(
            libc::P_PID,
            own_pid_id(),
            PROC_REAP_STATUS,
            (&mut status as *mut ProcctlReaperStatus).cast(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(status)
}

fn we_are_reaper() -> bool {
    reaper_status().is_ok_and(|s| s.rs_flags & REAPER_STATUS_OWNED != 0)
}

/// Signals an agent's whole tree: PROC_REAP_KILL with REAPER_KILL_SUBTREE
/// (every descendant of that direct child, including ones that changed
/// session or entered a jail, and orphans after the agent itself exited),
/// then killpg + kill for good measure. The reaper kill is used only while we
/// are a reaper: otherwise the kernel would apply it to our reaper's tree.
/// ESRCH is not an error.
pub fn signal_tree(pid: Pid, sig: i32) -> io::Result<()> {
    posix::check_tree_pid(pid)?;
    let mut reaper_error = None;
    // rk_sig 0 is invalid for PROC_REAP_KILL; the group kill covers sig 0.
    if sig != 0 && we_are_reaper() {
        let mut request = ProcctlReaperKill {
            rk_sig: sig,
            rk_flags: REAPER_KILL_SUBTREE,
            rk_subtree: pid,
            rk_killed: 0,
            rk_fpid: -1,
            rk_pad0: [0; 15],
        };
        // SAFETY: PROC_REAP_KILL reads and updates the struct the pointer refers to.
        let rc = unsafe {
            libc::procctl(
                libc::P_PID,
                own_pid_id(),
                libc::PROC_REAP_KILL,
                (&mut request as *mut ProcctlReaperKill).cast(),
            )
        };
        let outcome = (rc == -1).then(io::Error::last_os_error);
        match posix::after_reaper_kill(outcome, request.rk_killed) {
            posix::AfterReaperKill::Done(result) => return result,
            posix::AfterReaperKill::SignalGroup { reaper_error: e } => reaper_error = e,
        }
    }
    let group_result = posix::signal_group_and_leader(pid, sig);
    match reaper_error {
        Some(e) => Err(e),
        None => group_result,
    }
}

/// MAXHOSTNAMELEN: the longest jail name the kernel accepts, with its NUL.
const JAIL_NAME_BUF: usize = 256;
/// MAXPATHLEN.
const JAIL_PATH_BUF: usize = 1024;

/// An iovec over a mutable buffer (jail_get may write to any parameter).
fn iovec_of(buf: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }
}

/// Resolves a running jail by name with jail_get(2): "name" in, "jid" and
/// "path" out (what libjail's jail_getid does, without linking libjail).
/// A name of digits is taken as a jid.
pub fn resolve_jail(name: &str) -> Result<JailTarget, SpawnError> {
    if name.contains('\0') {
        return Err(SpawnError::Nul("jail name"));
    }
    let mut name_buf = [0u8; JAIL_NAME_BUF];
    // jid 0 means "look up by name"; a non-zero jid takes precedence over the name.
    let mut jid: libc::c_int = 0;
    if let Ok(n) = name.parse::<libc::c_int>() {
        jid = n;
    } else {
        if name.is_empty() || name.len() >= JAIL_NAME_BUF {
            return Err(SpawnError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid jail name {name:?}"),
            )));
        }
        name_buf[..name.len()].copy_from_slice(name.as_bytes());
    }
    let mut jid_bytes = jid.to_ne_bytes();
    let mut path_buf = [0u8; JAIL_PATH_BUF];
    let mut errmsg = [0u8; 256];
    // Parameter names, NUL-terminated (the kernel may not write to these,
    // but iovec wants a mutable pointer, so they are mutable copies).
    let (mut name_key, mut jid_key) = (*b"name\0", *b"jid\0");
    let (mut path_key, mut errmsg_key) = (*b"path\0", *b"errmsg\0");
    let mut iov = [
        iovec_of(&mut name_key),
        iovec_of(&mut name_buf),
        iovec_of(&mut jid_key),
        iovec_of(&mut jid_bytes),
        iovec_of(&mut path_key),
        iovec_of(&mut path_buf),
        iovec_of(&mut errmsg_key),
        iovec_of(&mut errmsg),
    ];
    // SAFETY: every iovec points into a live, writable buffer of its stated
    // length; keys are NUL-terminated; the count matches the array.
    let rc = unsafe { libc::jail_get(iov.as_mut_ptr(), iov.len() as libc::c_uint, 0) };
    if rc == -1 {
        let err = io::Error::last_os_error();
        let detail = String::from_utf8_lossy(c_str_bytes(&errmsg)).into_owned();
        let message = if detail.is_empty() {
            format!("jail {name:?}: {err}")
        } else {
            format!("jail {name:?}: {detail}")
        };
        return Err(SpawnError::Io(io::Error::new(err.kind(), message)));
    }
    // The kernel wrote the jail's name (useful when looked up by jid) and path back.
    let jail_name = String::from_utf8_lossy(c_str_bytes(&name_buf)).into_owned();
    let root = PathBuf::from(std::ffi::OsStr::from_bytes(c_str_bytes(&path_buf)));
    Ok(JailTarget {
        name: if jail_name.is_empty() {
            name.to_owned()
        } else {
            jail_name
        },
        jid: rc,
        root,
    })
}

/// The bytes before the first NUL in `buf` (empty if there is none).
fn c_str_bytes(buf: &[u8]) -> &[u8] {
    CStr::from_bytes_until_nul(buf)
        .map(CStr::to_bytes)
        .unwrap_or(&[])
}

/// LOCAL_PEERCRED: the peer's effective uid, groups and (FreeBSD 13+) pid as
/// of its connect(). The uid is jail-local: authorize by jail, not by uid.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    // SAFETY: xucred is plain data (integers and a union of a pointer and a pid); all-zero is valid.
    let mut cred: libc::xucred = unsafe { mem::zeroed() };
    let mut len = libc::socklen_t::try_from(mem::size_of::<libc::xucred>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: cred/len describe a writable xucred; fd is a live socket.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_LOCAL,
            libc::LOCAL_PEERCRED,
            (&mut cred as *mut libc::xucred).cast(),
            &mut len,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    if cred.cr_version != libc::XUCRED_VERSION || cred.cr_ngroups < 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected xucred version {}", cred.cr_version),
        ));
    }
    // SAFETY: since FreeBSD 13 the kernel fills the union's cr_pid member
    // (an integer, so any bit pattern is a valid read); 0 means "not set".
    let pid = unsafe { cred.cr_pid__c_anonymous_union.cr_pid };
    Ok(PeerCred {
        pid: (pid > 0).then_some(pid),
        uid: cred.cr_uid,
        gid: cred.cr_groups[0],
    })
}

/// kinfo_proc for one pid via sysctl {CTL_KERN, KERN_PROC, KERN_PROC_PID, pid}
/// (the name "kern.proc.pid.N" does not resolve). Sizes are checked, never
/// assumed: a libc/kernel ABI mismatch is an error, not a misread.
fn kinfo_proc(pid: i32) -> io::Result<libc::kinfo_proc> {
    let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PID, pid];
    // SAFETY: kinfo_proc is plain data (integers, arrays, raw pointers); all-zero is valid.
    let mut info: libc::kinfo_proc = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::kinfo_proc>();
    // SAFETY: mib has 4 entries; info/len describe a writable buffer of len bytes.
    let rc = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            4,
            (&mut info as *mut libc::kinfo_proc).cast(),
            &mut len,
            ptr::null(),
            0,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    if len == 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    let expected = mem::size_of::<libc::kinfo_proc>();
    if len != expected || usize::try_from(info.ki_structsize).ok() != Some(expected) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "kinfo_proc size mismatch: kernel {len} (ki_structsize {}), libc {expected}",
                info.ki_structsize
            ),
        ));
    }
    Ok(info)
}

/// The jail id `pid` runs in (0 = the host).
pub fn pid_jail(pid: i32) -> io::Result<i32> {
    Ok(kinfo_proc(pid)?.ki_jid)
}

/// Resident set size: kinfo_proc.ki_rssize (pages) × the page size.
pub fn self_rss_bytes() -> io::Result<u64> {
    // SAFETY: getpid has no preconditions.
    Ok(process_info_of(&kinfo_proc(unsafe { libc::getpid() })?).rss_bytes)
}

/// One process's [`ProcessInfo`] from its `kinfo_proc`; `None` when no
/// such process exists.
pub fn process_info(pid: Pid) -> io::Result<Option<ProcessInfo>> {
    match kinfo_proc(pid) {
        Ok(info) => Ok(Some(process_info_of(&info))),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(e) => Err(e),
    }
}

fn process_info_of(info: &libc::kinfo_proc) -> ProcessInfo {
    let state = match info.ki_stat {
        libc::SRUN => ProcessState::Running,
        libc::SSLEEP | libc::SWAIT | libc::SLOCK => ProcessState::Sleeping,
        libc::SSTOP => ProcessState::Stopped,
        libc::SZOMB => ProcessState::Zombie,
        _ => ProcessState::Other,
    };
    let pages = u64::try_from(info.ki_rssize).unwrap_or(0);
    // SAFETY: getpagesize has no preconditions.
    let page_size = u64::try_from(unsafe { libc::getpagesize() }).unwrap_or(4096);
    let time = |tv: libc::timeval| {
        Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    };
    ProcessInfo {
        ppid: info.ki_ppid,
        state,
        // P_WEXIT is set when exit1() begins, before the process closes its
        // files: a PTY's last close waits there for its output to be read.
        exiting: info.ki_flag & libc::c_long::from(libc::P_WEXIT) != 0
            || state == ProcessState::Zombie,
        rss_bytes: pages * page_size,
        peak_rss_bytes: u64::try_from(info.ki_rusage.ru_maxrss).unwrap_or(0) * 1024,
        cpu: time(info.ki_rusage.ru_utime) + time(info.ki_rusage.ru_stime),
    }
}

/// The pids whose parent is `ppid`, from one snapshot of every process
/// (sysctl {CTL_KERN, KERN_PROC, KERN_PROC_PROC}).
pub fn process_children(ppid: Pid) -> io::Result<Vec<Pid>> {
    let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PROC, 0];
    let bytes = sysctl_bytes(&mib[..3])?;
    let size = mem::size_of::<libc::kinfo_proc>();
    let mut out = Vec::new();
    for record in bytes.chunks_exact(size) {
        // SAFETY: the chunk holds `size` bytes of a kinfo_proc the kernel
        // wrote; read_unaligned copes with the Vec's alignment.
        let info: libc::kinfo_proc = unsafe { ptr::read_unaligned(record.as_ptr().cast()) };
        if usize::try_from(info.ki_structsize).ok() != Some(size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "kinfo_proc size mismatch: kernel {}, libc {size}",
                    info.ki_structsize
                ),
            ));
        }
        if info.ki_ppid == ppid {
            out.push(info.ki_pid);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The file descriptors `pid` holds open: the `kinfo_file` records of
/// sysctl {CTL_KERN, KERN_PROC, KERN_PROC_FILEDESC, pid} with a descriptor
/// number (the others are its cwd, root, jail root, text and tracing vnodes).
pub fn process_fds(pid: Pid) -> io::Result<Vec<OpenFd>> {
    let mib = [
        libc::CTL_KERN,
        libc::KERN_PROC,
        libc::KERN_PROC_FILEDESC,
        pid,
    ];
    let bytes = sysctl_bytes(&mib)?;
    let path_at = mem::offset_of!(libc::kinfo_file, kf_path);
    let mut out = Vec::new();
    let mut off = 0;
    while off + 12 <= bytes.len() {
        let int_at = |at: usize| {
            let b = &bytes[at..at + 4];
            i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        };
        // Records are packed: each is kf_structsize long, its path cut short.
        let size = int_at(off);
        let Some(size) = usize::try_from(size).ok().filter(|s| *s >= 12) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kinfo_file record of size {size}"),
            ));
        };
        let record = &bytes[off..bytes.len().min(off + size)];
        off += size;
        let (kind_code, fd) = (int_at(off - size + 4), int_at(off - size + 8));
        if fd < 0 {
            continue;
        }
        let path = record
            .get(path_at..)
            .map(|p| String::from_utf8_lossy(c_str_bytes(p)).into_owned())
            .unwrap_or_default();
        let kind = match kind_code {
            libc::KF_TYPE_VNODE if path.starts_with("/dev/") => FdKind::Device,
            libc::KF_TYPE_VNODE => FdKind::File,
            libc::KF_TYPE_SOCKET => FdKind::Socket,
            libc::KF_TYPE_PIPE | libc::KF_TYPE_FIFO => FdKind::Pipe,
            libc::KF_TYPE_PTS | libc::KF_TYPE_DEV => FdKind::Device,
            _ => FdKind::Other,
        };
        let name = if path.is_empty() {
            format!("{kind:?}:{fd}").to_lowercase()
        } else {
            path
        };
        out.push(OpenFd { fd, kind, name });
    }
    out.sort_by_key(|f| f.fd);
    Ok(out)
}

/// Sets another process's soft and hard limit on open files, through
/// sysctl {CTL_KERN, KERN_PROC, KERN_PROC_RLIMIT, pid, RLIMIT_NOFILE}
/// (FreeBSD has no prlimit(2)).
pub fn set_process_fd_limit(pid: Pid, limit: u64) -> io::Result<()> {
    let resource = libc::c_int::try_from(libc::RLIMIT_NOFILE).map_err(io::Error::other)?;
    let mib = [
        libc::CTL_KERN,
        libc::KERN_PROC,
        libc::KERN_PROC_RLIMIT,
        pid,
        resource,
    ];
    let limit = libc::rlim_t::try_from(limit).map_err(io::Error::other)?;
    let value = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: mib holds 5 ints; the new value is one rlimit of the given size.
    let rc = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            5,
            ptr::null_mut(),
            ptr::null_mut(),
            (&value as *const libc::rlimit).cast(),
            mem::size_of::<libc::rlimit>(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Connects to the Unix socket at `path` as a process of jail `jid` would:
/// a forked child attaches to the jail, connects (the daemon reads the
/// peer's credentials, jail included, as of the connect) and hands the
/// connected socket back over a socketpair. For a jail's own tools and the
/// tests of the jail sockets; the jail must see `path` at the same place.
pub fn connect_in_jail(path: &Path, jid: i32) -> io::Result<super::JailConnection> {
    use std::os::unix::net::UnixStream;
    // Everything the child touches is made before the fork: after it, a
    // child of a threaded process may only make async-signal-safe calls.
    // SAFETY: sockaddr_un is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let addr_len = mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    addr.sun_len = addr_len as u8;
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmsg_buf = [0u8; 64];
    // SAFETY: fork has no preconditions; the child below only calls
    // jail_attach, socket, connect, sendmsg and _exit on memory made before
    // the fork.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls on buffers owned by this frame.
        unsafe {
            // The exit status says which step failed and its errno.
            if libc::jail_attach(jid) != 0 {
                libc::_exit(100 + (*libc::__error()).min(99));
            }
            let sock = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if sock < 0
                || libc::connect(sock, (&addr as *const libc::sockaddr_un).cast(), addr_len) != 0
            {
                libc::_exit((*libc::__error()).min(99));
            }
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let space = libc::CMSG_SPACE(mem::size_of::<libc::c_int>() as u32) as usize;
            let mut msg: libc::msghdr = mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg_buf.as_mut_ptr().cast();
            msg.msg_controllen = space as libc::socklen_t;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len =
                libc::CMSG_LEN(mem::size_of::<libc::c_int>() as u32) as libc::socklen_t;
            ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), sock);
            if libc::sendmsg(theirs_fd, &msg, 0) != 1 {
                libc::_exit(255);
            }
            // The peer of the connection lives as long as the connection
            // (see JailConnection), holding nothing else: every fd this
            // fork copied (other connections', the parent's end of the
            // pair) is closed, and it waits for the parent to close its end.
            if libc::dup2(theirs_fd, 3) != 3 {
                libc::_exit(255);
            }
            libc::closefrom(4);
            while libc::read(3, byte.as_mut_ptr().cast(), 1) > 0 {}
            libc::_exit(0);
        }
    }
    drop(theirs);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg_buf.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_buf.len() as libc::socklen_t;
    // SAFETY: msg describes buffers that live for the call.
    let got = unsafe { libc::recvmsg(ours.as_raw_fd(), &mut msg, 0) };
    if got != 1 {
        // The child failed and exited (the pair reads end of file).
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
            .map_err(io::Error::from)?;
        return Err(io::Error::other(format!(
            "connecting from jail {jid} failed in the child ({status:?}: 100 + errno \
             of jail_attach, errno of socket or connect, 255 send)"
        )));
    }
    // SAFETY: the kernel filled msg_control; CMSG_FIRSTHDR checks its length.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: cmsg is null or points into cmsg_buf, as the kernel laid it out.
    if !cmsg.is_null()
        && unsafe {
            (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        }
    {
        // SAFETY: an SCM_RIGHTS message carries at least one int; the fd
        // was installed for this process and nothing else owns it.
        let fd = unsafe { ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()) };
        // SAFETY: see above: the fd is ours alone.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        return Ok(super::JailConnection {
            stream,
            keeper: Some(ours),
            child: pid,
        });
    }
    drop(ours);
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    Err(io::Error::other("the jailed child sent no socket"))
}

/// A sysctl node's whole value: its size first, then the value with room
/// for what appeared in between (a process list grows).
fn sysctl_bytes(mib: &[libc::c_int]) -> io::Result<Vec<u8>> {
    let namelen = libc::c_uint::try_from(mib.len()).map_err(io::Error::other)?;
    for _ in 0..4 {
        let mut len = 0usize;
        // SAFETY: a NULL oldp asks for the size only; mib holds namelen ints.
        let rc = unsafe {
            libc::sysctl(
                mib.as_ptr(),
                namelen,
                ptr::null_mut(),
                &mut len,
                ptr::null(),
                0,
            )
        };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        len += len / 8 + 4096;
        let mut buf = vec![0u8; len];
        // SAFETY: buf is writable for len bytes; mib holds namelen ints.
        let rc = unsafe {
            libc::sysctl(
                mib.as_ptr(),
                namelen,
                buf.as_mut_ptr().cast(),
                &mut len,
                ptr::null(),
                0,
            )
        };
        if rc == 0 {
            buf.truncate(len);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOMEM) {
            return Err(e);
        }
    }
    Err(io::Error::other(
        "a sysctl value kept outgrowing its buffer",
    ))
}

/// The kernel's name and release, e.g. `FreeBSD 14.1-RELEASE`, read with the
/// sysctl crate (string nodes only: its `value_as` asserts on struct sizes,
/// which is why `pid_jail` uses libc instead).
pub fn os_release() -> String {
    use sysctl::Sysctl;
    let read = |name: &str| {
        sysctl::Ctl::new(name)
            .and_then(|c| c.value_string())
            .unwrap_or_default()
    };
    format!("{} {}", read("kern.ostype"), read("kern.osrelease"))
}

/// FreeBSD has no signals beyond the portable set whose default action
/// ends the process and that a daemon can be sent by accident.
pub(super) const EXTRA_SIGNALS: &[(libc::c_int, DaemonSignal)] = &[];

/// [`signal_tree`] for each agent in turn (PROC_REAP_KILL needs no scan).
pub fn signal_trees(pids: &[Pid], sig: i32) -> io::Result<()> {
    let mut first_err = None;
    for &pid in pids {
        if let Err(e) = signal_tree(pid, sig) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Signals every live descendant of the reaper outside the running
/// `agents`' subtrees: what a finished agent left behind (an orphan keeps
/// its reaper subtree id, the finished agent's pid, once its own parent
/// exits). `signal_tree` reaches only subtrees it is given, and a reaped
/// agent's pid is given to no one. Only the daemon's shutdown may use this.
/// Returns how many orphans (the reaper's direct children) were found.
pub fn signal_orphans(agents: &[Pid], sig: i32) -> usize {
    signal_orphans_where(agents, sig, |_| true)
}

/// [`signal_orphans`] for finished agents' leftovers: the subtrees whose
/// members' environment at exec held `key=value` for one of `values` (every agent's
/// environment names its pane, and its descendants inherit it), read with
/// sysctl `kern.proc.env`; one member's match takes its whole subtree.
pub fn signal_orphans_with_env(agents: &[Pid], key: &str, values: &[&str], sig: i32) -> usize {
    let wanted: std::collections::HashSet<Vec<u8>> = values
        .iter()
        .map(|v| format!("{key}={v}").into_bytes())
        .collect();
    signal_orphans_where(agents, sig, |members| {
        members.iter().any(|&pid| {
            process_env(pid).is_ok_and(|env| env.split(|b| *b == 0).any(|kv| wanted.contains(kv)))
        })
    })
}

fn signal_orphans_where(agents: &[Pid], sig: i32, pick: impl FnMut(&[Pid]) -> bool) -> usize {
    if !we_are_reaper() {
        return 0;
    }
    // As on Linux, where an unreadable /proc finds no orphan.
    let Ok(all) = reaper_descendants() else {
        return 0;
    };
    let (pids, orphans) = posix::orphans_to_signal(&all, agents, pick);
    for pid in pids {
        if pid > 1 {
            // SAFETY: kill takes plain integers; pid > 1 names one process.
            unsafe { libc::kill(pid, sig) };
        }
    }
    orphans
}

/// `struct procctl_reaper_pidinfo` from sys/sys/procctl.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProcctlReaperPidinfo {
    pi_pid: libc::pid_t,
    pi_subtree: libc::pid_t,
    pi_flags: libc::c_uint,
    pi_pad0: [libc::c_uint; 15],
}

/// `struct procctl_reaper_pids` from sys/sys/procctl.h.
#[repr(C)]
struct ProcctlReaperPids {
    rp_count: libc::c_uint,
    rp_pad0: [libc::c_uint; 15],
    rp_pids: *mut ProcctlReaperPidinfo,
}

const REAPER_PIDINFO_VALID: libc::c_uint = 0x1;
const REAPER_PIDINFO_CHILD: libc::c_uint = 0x2;
const REAPER_PIDINFO_ZOMBIE: libc::c_uint = 0x8;

/// Every descendant of this reaper (PROC_REAP_GETPIDS). The count comes
/// from PROC_REAP_STATUS first; descendants forked in between past the
/// slack are not listed (the kernel fills at most `rp_count`).
fn reaper_descendants() -> io::Result<Vec<posix::Descendant>> {
    let status = reaper_status()?;
    let room = usize::try_from(status.rs_descendants).unwrap_or(0) + 64;
    let empty = ProcctlReaperPidinfo {
        pi_pid: 0,
        pi_subtree: 0,
        pi_flags: 0,
        pi_pad0: [0; 15],
    };
    let mut infos = vec![empty; room];
    let mut request = ProcctlReaperPids {
        rp_count: libc::c_uint::try_from(room).unwrap_or(libc::c_uint::MAX),
        rp_pad0: [0; 15],
        rp_pids: infos.as_mut_ptr(),
    };
    // SAFETY: the kernel writes at most rp_count entries to rp_pids, which
    // points to `room` (>= rp_count) initialised entries that outlive the call.
    let rc = unsafe {
        libc::procctl(
            libc::P_PID,
            own_pid_id(),
            libc::PROC_REAP_GETPIDS,
            (&mut request as *mut ProcctlReaperPids).cast(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(infos
        .iter()
        .filter(|i| i.pi_flags & REAPER_PIDINFO_VALID != 0)
        .map(|i| posix::Descendant {
            pid: i.pi_pid,
            subtree: i.pi_subtree,
            child: i.pi_flags & REAPER_PIDINFO_CHILD != 0,
            zombie: i.pi_flags & REAPER_PIDINFO_ZOMBIE != 0,
        })
        .collect())
}

/// `pid`'s parent (one `kern.proc.pid` sysctl); `None` when it is gone.
pub fn parent_pid(pid: Pid) -> Option<Pid> {
    process_info(pid).ok().flatten().map(|i| i.ppid)
}

/// The value of `key` in `pid`'s environment as it started; `None` when it
/// has none or it cannot be read (gone, another user's).
pub fn process_env_var(pid: Pid, key: &str) -> Option<String> {
    let env = process_env(pid).ok()?;
    posix::env_var_in(&env, key)
}

/// A process's environment, `KEY=VALUE` strings each ended by a NUL
/// (sysctl {CTL_KERN, KERN_PROC, KERN_PROC_ENV, pid}; the kernel allows it
/// to root and to the process's own user).
fn process_env(pid: Pid) -> io::Result<Vec<u8>> {
    sysctl_bytes(&[libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_ENV, pid])
}
