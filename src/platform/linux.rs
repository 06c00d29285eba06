//! Linux back end: pidfd, timerfd and signalfd registered in mio's epoll.
//!
//! Linux is the development system, not the shipping one; these functions
//! mirror `freebsd.rs` so the daemon can run and be tested here. Each event
//! source owns its descriptor and registers it with `SourceFd` (mio does not
//! own it); `deregister` removes it from the poll and closes it. Jails do not
//! exist here: `resolve_jail` and a spec with `jail` fail with `Unsupported`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::errno::Errno;
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use super::posix;
use super::{
    DaemonSignal, FdKind, OpenFd, PeerCred, Pid, ProcessInfo, ProcessState, PtyPair, SpawnError,
    SpawnSpec, TerminalMode,
};

/// Opens a PTY pair (see [`PtyPair`]).
pub fn open_pty(cols: u16, rows: u16, mode: TerminalMode) -> io::Result<PtyPair> {
    // Linux sizes PTY buffers without regard to the line speed.
    posix::open_pty_with(
        cols,
        rows,
        mode,
        |master| Ok(nix::pty::ptsname_r(master)?),
        None,
    )
}

/// Starts `spec.argv` on the PTY slave as a session leader whose controlling
/// terminal is the PTY; returns its pid without waiting for it.
/// A program on the host with its output on a pipe (`posix::spawn_piped_with`).
pub fn spawn_piped(spec: &SpawnSpec) -> Result<(Pid, OwnedFd), SpawnError> {
    posix::spawn_piped_with(spec, close_inherited, clone_child)
}

pub fn spawn_on_pty(spec: &SpawnSpec, slave: &OwnedFd) -> Result<Pid, SpawnError> {
    if spec.jail.is_some() {
        return Err(SpawnError::Unsupported("jails are FreeBSD-only"));
    }
    posix::spawn_with(spec, slave, None, close_inherited, clone_child)
}

/// Bytes of the stack the child runs on until exec (its calls are a few
/// small frames; the guard page below catches anything deeper).
const CHILD_STACK_BYTES: usize = 256 * 1024;

/// The child's stack, mapped once with a guard page and reused: while a
/// child runs on it its parent is suspended (CLONE_VFORK), and the lock
/// keeps two spawning threads apart.
static CHILD_STACK: std::sync::Mutex<Option<ChildStack>> = std::sync::Mutex::new(None);

struct ChildStack {
    base: *mut libc::c_void,
}

// SAFETY: the mapping is only an address range; it is used under the
// CHILD_STACK lock, by one child at a time.
unsafe impl Send for ChildStack {}

impl ChildStack {
    fn map() -> io::Result<ChildStack> {
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choice; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHILD_STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, 4096, libc::PROT_NONE) } == -1 {
            let e = io::Error::last_os_error();
            // SAFETY: unmaps exactly the mapping made above.
            unsafe { libc::munmap(base, CHILD_STACK_BYTES) };
            return Err(e);
        }
        Ok(ChildStack { base })
    }

    /// The initial stack pointer: the top of the mapping (x86-64 and
    /// aarch64 stacks grow down; the mapping is page-aligned, so 16-aligned).
    fn top(&self) -> *mut libc::c_void {
        self.base
            .cast::<u8>()
            .wrapping_add(CHILD_STACK_BYTES)
            .cast()
    }
}

/// Starts the child with clone(CLONE_VM | CLONE_VFORK), as glibc's
/// posix_spawn does: the child shares the daemon's memory until it execs,
/// and the daemon waits for that exec. fork(2) would copy the page tables
/// of the whole daemon for every agent and then take a copy-on-write fault
/// for every page the daemon touches before the child execs: measured, that
/// was about a third of the daemon's time when spawning 3,000 agents, and it
/// grows with the daemon's memory. What the child runs (`ChildPlan::run`)
/// writes nothing the daemon reads: only its own stack and, on failure,
/// errno.
fn clone_child(plan: &posix::ChildPlan<'_>) -> io::Result<Pid> {
    extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: arg is the `&ChildPlan` passed to clone below; CLONE_VFORK
        // keeps the parent (and so the plan) suspended until exec or exit.
        let plan = unsafe { &*arg.cast::<posix::ChildPlan<'_>>() };
        plan.run()
    }
    let mut slot = CHILD_STACK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(ChildStack::map()?);
    }
    let top = slot.as_ref().map(ChildStack::top).ok_or(Errno::ENOMEM)?;
    // SAFETY: child_entry runs on its own mapped stack (guard page below)
    // with the plan, which outlives the child's use of it (CLONE_VFORK);
    // every signal the daemon handles is blocked in this thread and so in
    // the child until `reset_signals` restores the defaults, so no daemon
    // handler runs on the shared memory.
    let pid = unsafe {
        libc::clone(
            child_entry,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(plan).cast_mut().cast(),
        )
    };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// close_range(3, ~0, CLOSE_RANGE_CLOEXEC) (Linux 5.11), else close_range
/// without the flag (5.9), else the close loop. Runs in the child between
/// clone and exec (see `posix::child_setup`). Marking is enough here: Linux
/// has no jails, and exec closes every marked descriptor. It also matters
/// for speed: the daemon waits while the child runs up to its exec
/// (`clone_child`), and closing thousands of descriptors one by one would
/// be in that wait, while exec closes them after the daemon has resumed.
fn close_inherited() -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    for flags in [CLOSE_RANGE_CLOEXEC, 0] {
        // SAFETY: close_range takes three integers; closing (or marking
        // close-on-exec) the child's fds 3.. is intended (nothing after
        // clone uses them).
        let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, flags) };
        if rc == 0 {
            return Ok(());
        }
    }
    posix::close_fds_from_3_by_loop()
}

/// A pidfd for one child, registered READABLE: it becomes readable when the
/// child terminates and stays so until it is reaped. It does not reap.
#[derive(Debug)]
pub struct ExitWatch {
    /// `None` when the child was already gone at registration.
    pidfd: Option<OwnedFd>,
}

impl ExitWatch {
    pub fn register(registry: &Registry, pid: Pid, token: Token) -> io::Result<ExitWatch> {
        // SAFETY: pidfd_open takes two integers (pid, flags) and returns a new
        // descriptor or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if rc == -1 {
            return match Errno::last() {
                // No such process: already reaped (or never ours). The caller
                // reaps at once and gets the status or Unknown.
                Errno::ESRCH => Ok(ExitWatch { pidfd: None }),
                e => Err(e.into()),
            };
        }
        let raw = RawFd::try_from(rc)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "pidfd out of range"))?;
        // SAFETY: raw is a fresh descriptor returned to us alone by pidfd_open
        // (always CLOEXEC); the OwnedFd becomes its only owner.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
        registry.register(&mut SourceFd(&pidfd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(ExitWatch { pidfd: Some(pidfd) })
    }

    /// True when the child was gone before the watch existed: no event will
    /// come, reap now.
    pub fn already_exited(&self) -> bool {
        self.pidfd.is_none()
    }

    /// Removes the pidfd from the poll and closes it.
    pub fn deregister(self, registry: &Registry) {
        if let Some(pidfd) = self.pidfd {
            // Closing the fd drops it from the epoll set anyway; the explicit
            // call only keeps mio's view tidy, so its error is not interesting.
            let _ = registry.deregister(&mut SourceFd(&pidfd.as_raw_fd()));
        }
    }
}

/// A CLOCK_MONOTONIC timerfd registered READABLE. Re-arming replaces the
/// previous deadline and clears the unread expiration count.
#[derive(Debug)]
pub struct KernelTimer {
    timer: TimerFd,
}

impl KernelTimer {
    pub fn new(registry: &Registry, token: Token) -> io::Result<KernelTimer> {
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        registry.register(&mut SourceFd(&timer.as_fd_raw()), token, Interest::READABLE)?;
        Ok(KernelTimer { timer })
    }

    /// Fires once, `after` from now (a zero duration fires at once).
    pub fn arm_oneshot(&mut self, _registry: &Registry, after: Duration) -> io::Result<()> {
        self.timer.set(
            Expiration::OneShot(nonzero_timespec(after)),
            TimerSetTimeFlags::empty(),
        )?;
        Ok(())
    }

    /// Fires every `every`, first after one period.
    pub fn arm_periodic(&mut self, _registry: &Registry, every: Duration) -> io::Result<()> {
        self.timer.set(
            Expiration::Interval(nonzero_timespec(every)),
            TimerSetTimeFlags::empty(),
        )?;
        Ok(())
    }

    pub fn disarm(&mut self, _registry: &Registry) -> io::Result<()> {
        self.timer.unset()?;
        Ok(())
    }

    /// Reads the expiration count: ≥1 if the timer fired since the last call,
    /// 0 for a spurious event (e.g. one queued just before a disarm).
    pub fn acknowledge(&mut self) -> u64 {
        let mut count = [0u8; 8];
        loop {
            return match nix::unistd::read(&self.timer, &mut count) {
                Ok(8) => u64::from_ne_bytes(count),
                Err(Errno::EINTR) => continue,
                // EAGAIN: nothing expired. A short read cannot happen on a timerfd.
                _ => 0,
            };
        }
    }

    pub fn deregister(self, registry: &Registry) {
        // As for ExitWatch: the close that follows is what really matters.
        let _ = registry.deregister(&mut SourceFd(&self.timer.as_fd_raw()));
    }
}

/// The raw descriptor of a TimerFd (nix implements only `AsFd` for it).
trait AsFdRaw {
    fn as_fd_raw(&self) -> RawFd;
}

impl AsFdRaw for TimerFd {
    fn as_fd_raw(&self) -> RawFd {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

/// timerfd_settime treats an all-zero value as "disarm": clamp to 1 ns.
fn nonzero_timespec(d: Duration) -> TimeSpec {
    TimeSpec::from_duration(d.max(Duration::from_nanos(1)))
}

/// Signals only Linux has whose default action terminates.
pub(super) const EXTRA_SIGNALS: &[(libc::c_int, DaemonSignal)] = &[
    (libc::SIGPOLL, DaemonSignal::Ignored("POLL")),
    (libc::SIGPWR, DaemonSignal::Ignored("PWR")),
    (libc::SIGSTKFLT, DaemonSignal::Ignored("STKFLT")),
];

/// Every watched signal (`DaemonSignal::watched`) through a signalfd.
///
/// `register` blocks them with sigprocmask (they then stay pending for the
/// signalfd instead of running a disposition) and sets SIGPIPE to SIG_IGN.
/// In a multi-threaded process the mask is per thread, and a
/// process-directed signal goes to any thread that does not block it:
/// register before any thread exists (the daemon has one). The child gets
/// an empty mask and default dispositions back in `spawn_on_pty`.
#[derive(Debug)]
pub struct SignalSource {
    fd: SignalFd,
}

impl SignalSource {
    pub fn register(registry: &Registry, token: Token) -> io::Result<SignalSource> {
        let mut mask = SigSet::empty();
        for (signo, _) in DaemonSignal::watched() {
            mask.add(Signal::try_from(signo)?);
        }
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        // SAFETY: SIG_IGN is a valid disposition for SIGPIPE.
        if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(SignalSource { fd })
    }

    /// Reads the signalfd until it would block and appends one entry per
    /// pending signal (the kernel merges repeats of one standard signal).
    pub fn drain(&mut self, out: &mut Vec<DaemonSignal>) {
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => {
                    let signo = libc::c_int::try_from(info.ssi_signo).unwrap_or(0);
                    out.extend(DaemonSignal::from_signo(signo).map(|s| match s {
                        DaemonSignal::Child(_) => {
                            DaemonSignal::Child(Pid::try_from(info.ssi_pid).ok())
                        }
                        other => other,
                    }));
                }
                Err(Errno::EINTR) => continue,
                // Ok(None) is EAGAIN: drained. Any other error leaves nothing
                // readable either; the next signal raises a new event.
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Removes the signalfd from the poll and closes it (the mask stays).
    pub fn deregister(self, registry: &Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.fd.as_raw_fd()));
    }
}

/// PR_SET_CHILD_SUBREAPER: orphaned descendants are re-parented to us, so
/// they raise SIGCHLD here and must be reaped with `reap_any`.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    Ok(())
}

/// How many times a SIGKILL walk re-reads /proc looking for descendants
/// forked after the previous pass stopped their parents. Each pass is one
/// scan of /proc; a stopped process cannot fork, so the walk converges in
/// two passes unless something outside the tree keeps adding to it.
const FREEZE_PASSES: usize = 8;

/// Signals an agent's whole tree: its process group (the agent is a
/// session and group leader), the agent itself, and every descendant found
/// by following parent links in /proc, including those that called
/// `setsid` or `setpgid` to leave the group. Each process gets the signal
/// once (two SIGINTs mean "force quit" to some agents). For SIGKILL the
/// tree is first frozen with SIGSTOP pass by pass, so nothing forks a
/// survivor between the walk and the kill. ESRCH is not an error.
///
/// A descendant whose parent exited before the walk has been re-parented
/// to the daemon (the subreaper) and no longer names its agent: see
/// [`signal_orphans`].
pub fn signal_tree(pid: Pid, sig: i32) -> io::Result<()> {
    signal_trees(&[pid], sig)
}

/// [`signal_tree`] for many agents at once, with one /proc scan per pass
/// for all of them (shutdown signals every agent in one wakeup). Every
/// valid tree is signalled; the first error is returned.
pub fn signal_trees(pids: &[Pid], sig: i32) -> io::Result<()> {
    let mut first_err = None;
    let mut roots = Vec::with_capacity(pids.len());
    for &pid in pids {
        match posix::check_tree_pid(pid) {
            Ok(()) => roots.push(pid),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let outside = if sig == libc::SIGKILL {
        freeze_trees(&roots)
    } else {
        let mut view = ProcView::new();
        roots
            .iter()
            .flat_map(|&root| {
                view.descendants(root)
                    .into_iter()
                    .filter(move |p| p.pgrp != root)
                    .map(|p| p.pid)
            })
            .collect()
    };
    for &pid in &roots {
        if let Err(e) = posix::signal_group_and_leader(pid, sig) {
            first_err.get_or_insert(e);
        }
    }
    for other in outside {
        signal_pid(other, sig);
    }
    first_err.map_or(Ok(()), Err)
}

/// Signals every process the daemon is the parent of that is not one of
/// `agents`, and everything under it: descendants re-parented to the
/// subreaper after their own parent exited. Only the daemon's shutdown may
/// use this (the orphans no longer say which agent they came from).
/// Returns how many orphans were found.
pub fn signal_orphans(agents: &[Pid], sig: i32) -> usize {
    signal_orphans_where(agents, sig, |_| true)
}

/// [`signal_orphans`] for the orphans whose environment at exec held
/// `key=value` for one of `values` only: every agent's environment names its pane, and its
/// descendants inherit it, so kill-agent reaches a descendant whose parent
/// exited before the kill. One that cleared or replaced its environment
/// before its exec is not found. Returns how many orphans were signalled.
pub fn signal_orphans_with_env(agents: &[Pid], key: &str, values: &[&str], sig: i32) -> usize {
    let wanted: HashSet<Vec<u8>> = values
        .iter()
        .map(|v| format!("{key}={v}").into_bytes())
        .collect();
    signal_orphans_where(agents, sig, |pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| wanted.contains(kv)))
    })
}

fn signal_orphans_where(agents: &[Pid], sig: i32, mut pick: impl FnMut(Pid) -> bool) -> usize {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut view = ProcView::new();
    // With 10,000 agents the daemon has 10,000 children: a set, and no
    // stat read for the agents among them (kill and remove run on the loop).
    let agents: HashSet<Pid> = agents.iter().copied().collect();
    let orphans: Vec<Pid> = view
        .child_pids(me)
        .into_iter()
        .filter(|pid| !agents.contains(pid) && pick(*pid))
        .collect();
    for &orphan in &orphans {
        signal_pid(orphan, sig);
        for d in view.descendants(orphan) {
            signal_pid(d.pid, sig);
        }
    }
    orphans.len()
}

/// SIGSTOPs every descendant of each root until a pass finds no new one;
/// returns the stopped ones outside their root's process group (the group
/// gets its signal from killpg).
fn freeze_trees(roots: &[Pid]) -> Vec<Pid> {
    let mut stopped: Vec<(Pid, ProcEntry)> = Vec::new();
    for _ in 0..FREEZE_PASSES {
        let mut view = ProcView::new();
        let mut fresh = Vec::new();
        for &root in roots {
            for d in view.descendants(root) {
                if !stopped.iter().any(|(_, s)| s.pid == d.pid) {
                    fresh.push((root, d));
                }
            }
        }
        if fresh.is_empty() {
            break;
        }
        for (_, d) in &fresh {
            signal_pid(d.pid, libc::SIGSTOP);
        }
        stopped.extend(fresh);
    }
    stopped
        .into_iter()
        .filter(|(root, p)| p.pgrp != *root)
        .map(|(_, p)| p.pid)
        .collect()
}

/// kill(2) on one process; a vanished one (ESRCH) is what we wanted anyway.
fn signal_pid(pid: Pid, sig: i32) {
    if pid <= 1 {
        return;
    }
    // SAFETY: kill takes plain integers; pid > 1 names one process.
    unsafe { libc::kill(pid, sig) };
}

/// One process as /proc/PID/stat describes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct ProcEntry {
    pid: Pid,
    ppid: Pid,
    pgrp: Pid,
}

/// The process tree as /proc shows it at one moment. Where the kernel has
/// /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN, Linux 4.2+), only the
/// tree being walked is read, so a kill costs what the tree holds, not what
/// the host runs; elsewhere the whole of /proc is scanned once per view.
struct ProcView {
    /// The whole-/proc index, built on first need when `children` files
    /// are missing.
    table: Option<HashMap<Pid, Vec<ProcEntry>>>,
}

impl ProcView {
    fn new() -> ProcView {
        ProcView { table: None }
    }

    /// The children of `parent`, with their process groups.
    fn children(&mut self, parent: Pid) -> Vec<ProcEntry> {
        if children_files_exist() {
            return read_children(parent)
                .into_iter()
                .filter_map(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    parse_stat(pid, &stat)
                })
                .collect();
        }
        self.table
            .get_or_insert_with(scan_proc)
            .get(&parent)
            .cloned()
            .unwrap_or_default()
    }

    /// The pids of `parent`'s children, without reading their stat files
    /// where the kernel lists them.
    fn child_pids(&mut self, parent: Pid) -> Vec<Pid> {
        if children_files_exist() {
            return read_children(parent);
        }
        self.children(parent).into_iter().map(|p| p.pid).collect()
    }

    /// Every descendant of `root` (not `root` itself).
    fn descendants(&mut self, root: Pid) -> Vec<ProcEntry> {
        let mut found: Vec<ProcEntry> = Vec::new();
        let mut frontier = vec![root];
        while let Some(parent) = frontier.pop() {
            for child in self.children(parent) {
                // A read racing with pid reuse may show a cycle: never loop.
                if child.pid == root || found.iter().any(|f| f.pid == child.pid) {
                    continue;
                }
                found.push(child);
                frontier.push(child.pid);
            }
        }
        found
    }
}

#[cfg(test)]
impl ProcView {
    /// `descendants` through the whole-/proc index only.
    fn descendants_from_table(&self, root: Pid) -> Vec<Pid> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut frontier = vec![root];
        while let Some(parent) = frontier.pop() {
            for child in table.get(&parent).into_iter().flatten() {
                if !found.contains(&child.pid) {
                    found.push(child.pid);
                    frontier.push(child.pid);
                }
            }
        }
        found
    }
}

/// Whether this kernel has /proc/PID/task/TID/children (checked once).
fn children_files_exist() -> bool {
    static EXIST: OnceLock<bool> = OnceLock::new();
    *EXIST.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// The children of every thread of `pid`; empty when it is gone.
fn read_children(pid: Pid) -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        out.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<Pid>().ok()),
        );
    }
    out
}

/// Every process in /proc (threads are not listed at the top level),
/// indexed by parent. A process that exits during the scan is missing.
fn scan_proc() -> HashMap<Pid, Vec<ProcEntry>> {
    let mut by_parent: HashMap<Pid, Vec<ProcEntry>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return by_parent;
    };
    let entries = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<Pid>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        });
    for entry in entries {
        by_parent.entry(entry.ppid).or_default().push(entry);
    }
    by_parent
}

/// Fields 4 (ppid) and 5 (pgrp) of /proc/PID/stat; the command in field 2
/// is in parentheses and may itself hold spaces and parentheses.
fn parse_stat(pid: Pid, stat: &str) -> Option<ProcEntry> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(1);
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcEntry { pid, ppid, pgrp })
}

/// Linux has no jails to connect from.
pub fn connect_in_jail(_path: &std::path::Path, _jid: i32) -> io::Result<super::JailConnection> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "jails are FreeBSD-only",
    ))
}

pub fn resolve_jail(_name: &str) -> Result<super::JailTarget, SpawnError> {
    Err(SpawnError::Unsupported("jails are FreeBSD-only"))
}

/// SO_PEERCRED: pid, effective uid and gid of the peer as of its connect().
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let cred = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)?;
    let pid = (cred.pid() > 0).then_some(cred.pid());
    Ok(PeerCred {
        pid,
        uid: cred.uid(),
        gid: cred.gid(),
    })
}

/// Linux has no jails: every process is on the host (jail id 0).
pub fn pid_jail(_pid: i32) -> io::Result<i32> {
    Ok(0)
}

/// Resident set size from /proc/self/statm (second field, in pages).
pub fn self_rss_bytes() -> io::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected /proc/self/statm: {statm:?}"),
            )
        })?;
    Ok(pages * page_size())
}

/// `pid`'s parent, from `/proc/PID/stat` alone; `None` when it is gone.
pub fn parent_pid(pid: Pid) -> Option<Pid> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &stat).map(|e| e.ppid)
}

/// The value of `key` in `pid`'s environment as it started
/// (`/proc/PID/environ`); `None` when it has none or it cannot be read
/// (gone, another user's).
pub fn process_env_var(pid: Pid, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    posix::env_var_in(&env, key)
}

/// One process's [`ProcessInfo`] from `/proc/PID/stat`; `None` when no
/// such process exists (reaped, or never was).
pub fn process_info(pid: Pid) -> io::Result<Option<ProcessInfo>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut info = parse_stat_info(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected /proc/{pid}/stat: {stat:?}"),
        )
    })?;
    // A zombie has no memory map and no VmHWM line.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    info.peak_rss_bytes = status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .map_or(info.rss_bytes, |kib: u64| kib * 1024);
    Ok(Some(info))
}

/// Fields 3 on of `/proc/PID/stat` (see [`parse_stat`]).
fn parse_stat_info(stat: &str) -> Option<ProcessInfo> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let state = match fields.first()?.chars().next()? {
        'R' => ProcessState::Running,
        'S' | 'D' | 'I' => ProcessState::Sleeping,
        'T' | 't' => ProcessState::Stopped,
        'Z' | 'X' => ProcessState::Zombie,
        _ => ProcessState::Other,
    };
    // Fields 14 and 15 (utime, stime) in clock ticks; field 24 (rss) in pages.
    let ticks = number(11)? + number(12)?;
    let per_second = clock_ticks_per_second();
    let cpu = Duration::from_secs(ticks / per_second)
        + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second);
    Some(ProcessInfo {
        ppid: fields.get(1)?.parse().ok()?,
        state,
        exiting: state == ProcessState::Zombie,
        rss_bytes: number(21)? * page_size(),
        peak_rss_bytes: 0,
        cpu,
    })
}

fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or(4096)
}

/// The pids whose parent is `ppid`, from a walk of `/proc`.
pub fn process_children(ppid: Pid) -> io::Result<Vec<Pid>> {
    let mut out: Vec<Pid> = scan_proc()
        .remove(&ppid)
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.pid)
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Sets another process's soft and hard limit on open files (prlimit(2)),
/// as an operator would lower a running daemon's.
pub fn set_process_fd_limit(pid: Pid, limit: u64) -> io::Result<()> {
    let value = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: value is a valid rlimit; the old-value pointer may be null.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &value, std::ptr::null_mut()) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The file descriptors `pid` holds open, from the links in `/proc/PID/fd`.
pub fn process_fds(pid: Pid) -> io::Result<Vec<OpenFd>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // An fd closed since the listing has no link any more.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let name = target.to_string_lossy().into_owned();
        let kind = if name.starts_with("/dev/") {
            FdKind::Device
        } else if name.starts_with('/') {
            FdKind::File
        } else if name.starts_with("socket:") {
            FdKind::Socket
        } else if name.starts_with("pipe:") {
            FdKind::Pipe
        } else {
            FdKind::Other
        };
        out.push(OpenFd { fd, kind, name });
    }
    out.sort_by_key(|f| f.fd);
    Ok(out)
}

/// The kernel's name and release, e.g. `Linux 6.18.4`.
pub fn os_release() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("Linux {}", release.trim())
}

#[cfg(test)]
mod tests {
    //! Linux-only checks; the portable ones are in `platform/tests.rs`.

    use std::os::fd::AsRawFd;

    use crate::platform::tests::run_on_pty;
    use crate::platform::ExitStatus;

    /// The child holds only the PTY as 0, 1, 2 (plus the directory fd `ls`
    /// opens to list /proc/self/fd): no daemon descriptor leaks across exec.
    #[test]
    fn child_inherits_only_stdio() {
        let (output, status) = run_on_pty(&["/bin/sh", "-c", "exec ls -1 /proc/self/fd"]);
        assert_eq!(status, ExitStatus::Code(0));
        let text = String::from_utf8(output).expect("utf-8 listing");
        let mut fds: Vec<u32> = text
            .lines()
            .map(|l| l.trim().parse().expect("numeric fd"))
            .collect();
        fds.sort_unstable();
        assert!(
            fds.len() <= 4,
            "unexpected descriptors in the child: {fds:?}"
        );
        assert_eq!(&fds[..3], &[0, 1, 2], "stdio missing: {fds:?}");
    }

    /// A descriptor the daemon inherited without close-on-exec (a
    /// supervisor's pipe) does not follow the agent: the child marks every
    /// descriptor from 3 up close-on-exec before exec.
    #[test]
    fn a_descriptor_without_cloexec_does_not_reach_the_child() {
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        // SAFETY: fcntl F_DUPFD on a descriptor we own; the copy (without
        // FD_CLOEXEC, which F_DUPFD never sets) is closed below.
        let leaky = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 700) };
        assert!(leaky >= 700, "dup: {}", std::io::Error::last_os_error());
        let (output, status) = run_on_pty(&["/bin/sh", "-c", "exec ls -1 /proc/self/fd"]);
        // SAFETY: closes the copy made above, which nothing else uses.
        unsafe { libc::close(leaky) };
        assert_eq!(status, ExitStatus::Code(0));
        let text = String::from_utf8(output).expect("utf-8 listing");
        assert!(
            !text.lines().any(|l| l.trim() == leaky.to_string()),
            "fd {leaky} reached the child: {text}"
        );
    }

    /// A failure after clone (here exec of a file that is no program) is
    /// written to the agent's terminal and the child exits 127; the daemon
    /// (the parent) carries on, its memory untouched by the child.
    #[test]
    fn a_failed_exec_is_reported_on_the_terminal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bogus = dir.path().join("not-a-program");
        std::fs::write(&bogus, b"\x7fELF but not really").expect("write");
        std::fs::set_permissions(&bogus, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let path = bogus.to_str().expect("utf-8 path");
        let (output, status) = run_on_pty(&[path]);
        assert_eq!(status, ExitStatus::Code(127));
        let text = String::from_utf8_lossy(&output);
        assert!(
            text.contains("colibri: cannot start the agent: execve failed (errno 8)"),
            "{text}"
        );
        // The parent spawns again normally afterwards.
        let (_, status) = run_on_pty(&["/bin/true"]);
        assert_eq!(status, ExitStatus::Code(0));
    }

    /// Linux does not clamp silently (FreeBSD may, to kern.maxfilesperproc).
    #[test]
    fn raise_fd_limit_reaches_the_hard_limit() {
        let soft = super::super::raise_fd_limit().expect("raise");
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("getrlimit");
        assert_eq!(soft, hard);
    }

    #[test]
    fn jails_are_unsupported() {
        let pair = super::open_pty(80, 24, super::TerminalMode::Raw).expect("open_pty");
        let jail = super::super::JailTarget {
            name: "j".into(),
            jid: 1,
            root: "/".into(),
        };
        let spec = super::SpawnSpec {
            argv: vec!["/bin/true".into()],
            jail: Some(jail),
            ..Default::default()
        };
        assert!(matches!(
            super::spawn_on_pty(&spec, &pair.slave),
            Err(super::SpawnError::Unsupported(_))
        ));
        assert!(matches!(
            super::resolve_jail("j"),
            Err(super::SpawnError::Unsupported(_))
        ));
        assert_eq!(super::pid_jail(1).expect("pid_jail"), 0);
    }

    /// The cheap walk (children files) and the full /proc scan agree on a
    /// real tree: a shell with a background child and a setsid'ed one.
    #[test]
    fn both_tree_walks_find_the_same_descendants() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & setsid sleep 30 & echo ready; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut ready,
        )
        .expect("ready");
        let root = child.id() as super::Pid;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let (cheap, full) = loop {
            let mut cheap: Vec<_> = super::ProcView::new()
                .descendants(root)
                .into_iter()
                .map(|p| p.pid)
                .collect();
            let mut full: Vec<_> = super::ProcView {
                table: Some(super::scan_proc()),
            }
            .descendants_from_table(root);
            cheap.sort_unstable();
            full.sort_unstable();
            // `setsid` may fork once before it execs sleep: wait for the
            // tree to settle at two sleeps.
            if cheap.len() == 2 && cheap == full || std::time::Instant::now() > deadline {
                break (cheap, full);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let _ = child.kill();
        for pid in &cheap {
            // SAFETY: kill with plain integers on our own test children.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        let _ = child.wait();
        assert!(
            super::children_files_exist(),
            "this kernel has children files"
        );
        assert_eq!(cheap.len(), 2, "{cheap:?}");
        assert_eq!(cheap, full);
    }

    #[test]
    fn rss_is_reported() {
        let rss = super::self_rss_bytes().expect("statm");
        assert!(rss > 1024 * 1024, "implausible rss {rss}");
    }
}
