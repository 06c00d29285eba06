//! POSIX code that is the same on Linux and FreeBSD.
//!
//! PTY set-up (raw mode, window size), master reads and writes, the spawn
//! (the agent's environment and program lookup before fork, then fork and an
//! async-signal-safe child), reaping, `killpg`, resource limits and
//! passwd/group parsing. The OS files call in
//! here for the common part and keep only what really differs.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::pty::PtyMaster;
use nix::sys::stat::Mode;
use nix::sys::termios::{
    cfmakeraw, cfsetspeed, tcgetattr, tcsetattr, BaudRate, InputFlags, LocalFlags, SetArg,
};

use super::{
    ExitStatus, Pid, PtyPair, ReadOutcome, SpawnError, SpawnSpec, TerminalMode, UserIds,
    DEFAULT_AGENT_PATH,
};

/// Opens a PTY pair; `pts_name` (the slave's path) and `speed` (the line
/// speed to set, where the kernel sizes the PTY's queues by it) are the
/// OS-specific steps.
pub(super) fn open_pty_with(
    cols: u16,
    rows: u16,
    mode: TerminalMode,
    pts_name: fn(&PtyMaster) -> io::Result<String>,
    speed: Option<BaudRate>,
) -> io::Result<PtyPair> {
    // O_NONBLOCK is set afterwards: FreeBSD's posix_openpt rejects it (EINVAL).
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let slave_path = pts_name(&master)?;
    let master = OwnedFd::from(master);
    set_nonblocking(master.as_fd())?;
    let slave = nix::fcntl::open(
        slave_path.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // Raw first: no ONLCR (`\n` stays `\n`), no echo of what the daemon
    // writes (it would come back as agent output), no IXON (a ^S in the
    // input would stall the agent's output).
    let mut termios = tcgetattr(&slave)?;
    cfmakeraw(&mut termios);
    if mode == TerminalMode::Line {
        termios.input_flags |= InputFlags::ICRNL;
        // Backspace erases a whole UTF-8 character, not its last byte.
        #[cfg(target_os = "linux")]
        {
            termios.input_flags |= InputFlags::IUTF8;
        }
        termios.local_flags |= LocalFlags::ICANON | LocalFlags::ISIG | LocalFlags::IEXTEN;
    }
    if let Some(speed) = speed {
        cfsetspeed(&mut termios, speed)?;
    }
    tcsetattr(&slave, SetArg::TCSANOW, &termios)?;
    set_window_size(slave.as_fd(), cols, rows)?;
    Ok(PtyPair { master, slave })
}

/// Whether the terminal is in canonical (line) input mode now: the mode
/// it started in, or one its program set. Read through the master, which
/// reports the slave's settings on Linux and FreeBSD alike.
pub fn line_mode(master: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(tcgetattr(master)?.local_flags.contains(LocalFlags::ICANON))
}

/// Puts the terminal in [`TerminalMode::Raw`] (a harness colibri speaks
/// JSON to was detected on a pane that started in line mode).
pub fn set_raw(master: BorrowedFd<'_>) -> io::Result<()> {
    let mut termios = tcgetattr(master)?;
    termios.input_flags.remove(InputFlags::ICRNL);
    termios
        .local_flags
        .remove(LocalFlags::ICANON | LocalFlags::ISIG | LocalFlags::IEXTEN);
    tcsetattr(master, SetArg::TCSANOW, &termios)?;
    Ok(())
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Sets the terminal size (TIOCSWINSZ) on a master or slave. Set it before
/// spawning: TUIs read it at start; later changes SIGWINCH the foreground group.
pub fn set_window_size(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: fd is a live descriptor; TIOCSWINSZ reads one winsize from the pointer.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCSWINSZ,
            &size as *const libc::winsize,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How many more reads an EIO from the master gets before it counts as the
/// end of output (see [`read_master`]).
const EIO_RECHECKS: u32 = 2;

/// Reads the PTY master once. EINTR is retried; EAGAIN is `WouldBlock`. EOF
/// is `read() == 0` (FreeBSD) or EIO (Linux: the slave side is closed and the
/// queued output has been drained). An empty `buf` gives `Data(0)`, never a
/// false EOF.
///
/// Linux can answer EIO while the slave's last bytes are still on their way
/// to the master's read buffer (the TTY_OTHER_CLOSED flag is seen before
/// the input worker has pushed them; alacritty and the kernel's own "pty:
/// Fix input race when closing" describe it). A C loop of the same reads
/// (`bench/pty_eio_race.c`) met it once in some 200,000 short agents, and a
/// CI run lost the last 32 lines of one agent of 200 to it. Each read makes the kernel flush that
/// worker again, so an EIO is checked by [`EIO_RECHECKS`] more reads (two
/// syscalls at the end of each agent) before it ends the stream.
pub fn read_master(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<ReadOutcome> {
    if buf.is_empty() {
        return Ok(ReadOutcome::Data(0));
    }
    let mut eio_left = EIO_RECHECKS;
    loop {
        return match nix::unistd::read(fd, buf) {
            Ok(0) => Ok(ReadOutcome::Eof),
            Ok(n) => Ok(ReadOutcome::Data(n)),
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => Ok(ReadOutcome::WouldBlock),
            Err(Errno::EIO) if eio_left > 0 => {
                eio_left -= 1;
                continue;
            }
            Err(Errno::EIO) => Ok(ReadOutcome::Eof),
            Err(e) => Err(e.into()),
        };
    }
}

/// Writes once to a non-blocking descriptor: `Ok(Some(n))` bytes written,
/// `Ok(None)` if it would block. EINTR is retried.
pub fn write_nonblocking(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<Option<usize>> {
    loop {
        return match nix::unistd::write(fd, buf) {
            Ok(n) => Ok(Some(n)),
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
}

/// A pipe for an agent's input: `(read, write)`, both close-on-exec (the
/// spawn's dup2 onto fd 0 clears it on the child's copy), the write end
/// non-blocking for the daemon's event loop.
pub fn input_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    set_nonblocking(write.as_fd())?;
    Ok((read, write))
}

/// Decodes a wait(2) status word. `None` for stop/continue reports, which the
/// daemon never asks for (no WUNTRACED/WCONTINUED).
fn decode_wait_status(status: libc::c_int) -> Option<ExitStatus> {
    if libc::WIFEXITED(status) {
        Some(ExitStatus::Code(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(ExitStatus::Signal(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// `waitpid(pid, WNOHANG)`: `Ok(None)` while it runs, `Ok(Some(status))` once
/// reaped, `Ok(Some(Unknown))` on ECHILD (already reaped elsewhere, e.g. by a
/// `reap_any` sweep that ran first).
pub fn reap(pid: Pid) -> io::Result<Option<ExitStatus>> {
    if pid <= 0 {
        // waitpid(0 or negative) would reap any child of a group.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("reap: invalid pid {pid}"),
        ));
    }
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: status is a valid out-pointer for the duration of the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == 0 {
            return Ok(None);
        }
        if rc == -1 {
            return match Errno::last() {
                Errno::EINTR => continue,
                Errno::ECHILD => Ok(Some(ExitStatus::Unknown)),
                e => Err(e.into()),
            };
        }
        return Ok(decode_wait_status(status));
    }
}

/// `waitpid(-1, WNOHANG)` once: the next exited child (an agent, or an orphan
/// inherited as subreaper), or `None` when nothing is waiting to be reaped.
pub fn reap_any() -> Option<(Pid, ExitStatus)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: status is a valid out-pointer for the duration of the call.
        let rc = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if rc > 0 {
            return Some((
                rc,
                decode_wait_status(status).unwrap_or(ExitStatus::Unknown),
            ));
        }
        if rc == -1 && Errno::last() == Errno::EINTR {
            continue;
        }
        return None;
    }
}

/// Signals the agent's process group once: the agent is a session and group
/// leader (setsid in the child), so its group holds its ordinary
/// descendants. The leader is signalled on its own only if it has left its
/// group, so nobody gets a signal twice (two SIGINTs mean "force quit" to
/// some agents). ESRCH is not an error (the target is already gone).
pub(super) fn signal_group_and_leader(pid: Pid, sig: i32) -> io::Result<()> {
    check_tree_pid(pid)?;
    // SAFETY: getpgid, killpg and kill take plain integers; pid > 1 was
    // checked, so neither names our own group nor "every process".
    let pgid = unsafe { libc::getpgid(pid) };
    // SAFETY: as above.
    let group_rc = unsafe { libc::killpg(pid, sig) };
    let group_err = (group_rc == -1).then(Errno::last);
    let mut leader_err = None;
    if pgid != pid {
        // SAFETY: as above.
        let leader_rc = unsafe { libc::kill(pid, sig) };
        leader_err = (leader_rc == -1).then(Errno::last);
    }
    for err in [group_err, leader_err].into_iter().flatten() {
        if err != Errno::ESRCH {
            return Err(err.into());
        }
    }
    Ok(())
}

/// What `signal_tree` does after a PROC_REAP_KILL (FreeBSD).
// Used by freebsd.rs; compiled everywhere so the decision is tested on Linux.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
#[derive(Debug)]
pub(super) enum AfterReaperKill {
    /// The subtree got the signal (or some of it did): send nothing more.
    Done(io::Result<()>),
    /// Nobody was signalled: fall back to the process group, then report
    /// `reaper_error` if there was one worth reporting.
    SignalGroup { reaper_error: Option<io::Error> },
}

/// Decides from procctl's result (`None` = success) and `rk_killed`.
/// A success means the subtree, which holds the agent's process group,
/// was signalled: one delivery each. A failure with `rk_killed > 0` is
/// partial: cr_cansignal refused some member, but every process counted in
/// `rk_killed` got the signal (reap_kill_proc_locked in
/// sys/kern/kern_procctl.c counts each pksignal), so a group kill would
/// signal those twice, and two SIGINTs mean "force quit" to some agents:
/// report the error instead. ESRCH with nobody signalled is not an error.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
pub(super) fn after_reaper_kill(failure: Option<io::Error>, killed: u32) -> AfterReaperKill {
    let Some(err) = failure else {
        return AfterReaperKill::Done(Ok(()));
    };
    if killed > 0 {
        return AfterReaperKill::Done(Err(err));
    }
    let reaper_error = (err.raw_os_error() != Some(libc::ESRCH)).then_some(err);
    AfterReaperKill::SignalGroup { reaper_error }
}

/// One descendant of the reaper, as FreeBSD's PROC_REAP_GETPIDS reports
/// it: `subtree` is the reaper's direct child it descends from, kept when
/// its own parent exits (the kernel's `p_reapsubtree`), so an orphan still
/// names the agent it came from, even after that agent was reaped.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Descendant {
    pub pid: Pid,
    pub subtree: Pid,
    /// A direct child of the reaper (an agent, or an orphan re-parented).
    pub child: bool,
    pub zombie: bool,
}

/// Which descendants an orphan signal reaches: every live one outside the
/// subtrees of the running `agents` whose subtree `pick` accepts (asked
/// once per subtree, with the subtree's members), and how many orphans
/// (the reaper's direct children among them) that is. A subtree is one
/// finished agent's leftovers: `pick` accepting one member takes them all,
/// so a descendant that cleared its environment goes with its kin.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
pub(super) fn orphans_to_signal(
    all: &[Descendant],
    agents: &[Pid],
    mut pick: impl FnMut(&[Pid]) -> bool,
) -> (Vec<Pid>, usize) {
    // Thousands of agents, thousands more descendants: a set, not a scan.
    let agents: std::collections::HashSet<Pid> = agents.iter().copied().collect();
    let mut subtrees: Vec<Pid> = all
        .iter()
        .filter(|d| !d.zombie && !agents.contains(&d.subtree) && !agents.contains(&d.pid))
        .map(|d| d.subtree)
        .collect();
    subtrees.sort_unstable();
    subtrees.dedup();
    let mut out = Vec::new();
    let mut orphans = 0;
    for subtree in subtrees {
        let members: Vec<Pid> = all
            .iter()
            .filter(|d| d.subtree == subtree && !d.zombie && !agents.contains(&d.pid))
            .map(|d| d.pid)
            .collect();
        if members.is_empty() || !pick(&members) {
            continue;
        }
        orphans += all
            .iter()
            .filter(|d| d.child && members.contains(&d.pid))
            .count();
        out.extend(members);
    }
    (out, orphans)
}

/// Signals only the process group `pgid` (the group of an agent that has
/// already been reaped: its pid may be reused, its group id may not while
/// the group has members). ESRCH (an empty group) is not an error.
pub fn signal_group(pgid: Pid, sig: i32) -> io::Result<()> {
    check_tree_pid(pgid)?;
    // SAFETY: killpg takes plain integers; pgid > 1 was checked.
    if unsafe { libc::killpg(pgid, sig) } == -1 && Errno::last() != Errno::ESRCH {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The local time zone's offset from UTC, in seconds east, at `unix_secs`
/// (localtime_r's `tm_gmtoff`, from TZ or /etc/localtime). Not a clock read:
/// the caller passes the instant. `None` if the time cannot be converted.
pub fn utc_offset_seconds(unix_secs: i64) -> Option<i32> {
    let t = libc::time_t::try_from(unix_secs).ok()?;
    // SAFETY: tm is plain data (integers and a pointer); all-zero is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r writes only tm.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    i32::try_from(tm.tm_gmtoff).ok()
}

/// Opens /dev/null on any of fds 0-2 that is closed, so that no descriptor
/// the daemon opens later (a PTY slave) lands there by accident: an agent's
/// slave at fd 0 would keep its close-on-exec flag through dup2(0, 0).
pub fn ensure_std_fds() -> io::Result<()> {
    for fd in 0..3 {
        // SAFETY: F_GETFD on an integer fd has no pointer arguments.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 || Errno::last() != Errno::EBADF {
            continue;
        }
        // SAFETY: a static NUL-terminated path; open returns the lowest free
        // fd, which is `fd` since every lower one is open.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if got == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Refuses pids that would turn a tree kill into a group-wide or system-wide
/// one (0 = our own group, -1 = everything, 1 = init).
pub(super) fn check_tree_pid(pid: Pid) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal the tree of pid {pid}"),
        ));
    }
    Ok(())
}

/// Raises the RLIMIT_NOFILE soft limit to the hard limit and returns the
/// soft limit now in force (the kernel may clamp it, e.g. FreeBSD's
/// kern.maxfilesperproc).
pub fn raise_fd_limit() -> io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(rlim_to_u64(soft))
}

/// rlim_t is u64 on Linux and i64 on FreeBSD (never negative in practice).
#[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
pub(super) fn rlim_to_u64(value: libc::rlim_t) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// This host's name (gethostname), or `"localhost"` if the kernel will not say.
pub fn hostname() -> String {
    match nix::unistd::gethostname() {
        Ok(name) if !name.is_empty() => name.to_string_lossy().into_owned(),
        _ => String::from("localhost"),
    }
}

/// Looks `user` up in `<root>/etc/passwd` and `<root>/etc/group` by parsing
/// the files (no NSS, so a jail's own files can be read from the host; root
/// `/` is the host). `user` is a login name, or a numeric uid when no name
/// matches. Groups are the primary group followed by every group that lists
/// the user as a member. The files are read before fork: a child may not.
pub fn lookup_user(root: &Path, user: &str) -> io::Result<UserIds> {
    let passwd_path = root.join("etc/passwd");
    let passwd = std::fs::read(&passwd_path)?;
    let passwd = String::from_utf8_lossy(&passwd);
    let entry = find_passwd_entry(&passwd, user).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user {user:?} in {}", passwd_path.display()),
        )
    })?;
    let fields: Vec<&str> = entry.split(':').collect();
    let malformed = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed entry for {user:?} in {}", passwd_path.display()),
        )
    };
    if fields.len() < 7 {
        return Err(malformed());
    }
    let name = fields[0];
    let uid: u32 = fields[2].parse().map_err(|_| malformed())?;
    let gid: u32 = fields[3].parse().map_err(|_| malformed())?;
    let home = (!fields[5].is_empty()).then(|| fields[5].into());
    let shell = (!fields[6].is_empty()).then(|| fields[6].into());

    let mut groups = vec![gid];
    let group_path = root.join("etc/group");
    match std::fs::read(&group_path) {
        Ok(bytes) => {
            for gid in supplementary_groups(&String::from_utf8_lossy(&bytes), name) {
                if !groups.contains(&gid) {
                    groups.push(gid);
                }
            }
        }
        // A root without /etc/group still has a usable primary group.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(UserIds {
        name: name.to_owned(),
        uid,
        gid,
        groups,
        home,
        shell,
    })
}

/// Lines of a passwd/group file that carry entries: no blanks, no comments,
/// no NIS `+`/`-` lines.
fn entry_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim_end).filter(|l| {
        !l.is_empty() && !l.starts_with('#') && !l.starts_with('+') && !l.starts_with('-')
    })
}

fn find_passwd_entry<'a>(passwd: &'a str, user: &str) -> Option<&'a str> {
    let by_name = entry_lines(passwd).find(|l| l.split(':').next() == Some(user));
    by_name.or_else(|| {
        let uid: u32 = user.parse().ok()?;
        entry_lines(passwd)
            .find(|l| l.split(':').nth(2).and_then(|f| f.parse::<u32>().ok()) == Some(uid))
    })
}

fn supplementary_groups<'a>(group: &'a str, user: &'a str) -> impl Iterator<Item = u32> + 'a {
    entry_lines(group).filter_map(move |line| {
        let mut fields = line.split(':');
        let (_name, _pw, gid, members) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let gid: u32 = gid.parse().ok()?;
        members.split(',').any(|m| m.trim() == user).then_some(gid)
    })
}

/// What the child must do to enter a jail; `attach` is the OS's jail_attach
/// and runs between fork and exec, so it must be async-signal-safe.
pub(super) struct JailEntry {
    pub jid: i32,
    /// Working directory inside the jail, chdir'ed to after the attach.
    pub cwd: CString,
    pub attach: fn(i32) -> io::Result<()>,
}

/// Numeric credentials in the form the child's system calls take.
struct ChildCreds {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

/// Starts `spec.argv` on the PTY slave. Everything that allocates happens
/// here, before fork; the `pre_exec` closure only makes system calls.
///
/// `close_inherited` is the OS's way to close every descriptor from 3 up in
/// the child (see [`close_fds_from_3_by_loop`]).
pub(super) fn spawn_with(
    spec: &SpawnSpec,
    slave: &OwnedFd,
    jail: Option<JailEntry>,
    close_inherited: fn() -> io::Result<()>,
    start_child: fn(&ChildPlan<'_>) -> io::Result<Pid>,
) -> Result<Pid, SpawnError> {
    let output = ChildOutput::Terminal(slave.as_raw_fd());
    spawn_onto(spec, output, jail, close_inherited, start_child)
}

/// Where a child's stdout and stderr go.
#[derive(Copy, Clone, Debug)]
enum ChildOutput {
    /// A PTY slave, which becomes its controlling terminal.
    Terminal(RawFd),
    /// A pipe's write end: no terminal, and an environment of `PATH`
    /// (and `spec.env`) alone.
    Pipe(RawFd),
}

/// Starts `spec.argv` on the host with stdin on `/dev/null` and stdout and
/// stderr on one pipe, whose read end is returned, non-blocking and
/// close-on-exec. The child leads a session and a process group of its own
/// (its pid: `signal_group(pid, ..)` reaches what it started) and has no
/// terminal; its environment is `PATH` (`spec.agent_path`, else
/// [`DEFAULT_AGENT_PATH`]) and `spec.env`, nothing of the daemon's. A
/// failure between fork and exec is written to the pipe and the child
/// exits 127.
pub(super) fn spawn_piped_with(
    spec: &SpawnSpec,
    close_inherited: fn() -> io::Result<()>,
    start_child: fn(&ChildPlan<'_>) -> io::Result<Pid>,
) -> Result<(Pid, OwnedFd), SpawnError> {
    if spec.jail.is_some() || spec.user.is_some() || spec.stdin.is_some() {
        return Err(SpawnError::Unsupported(
            "a piped child runs on the host as the daemon, its stdin on /dev/null",
        ));
    }
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    set_nonblocking(read.as_fd())?;
    let null = std::fs::File::open("/dev/null")?;
    let spec = SpawnSpec {
        stdin: Some(null.as_raw_fd()),
        ..spec.clone()
    };
    let pid = spawn_onto(
        &spec,
        ChildOutput::Pipe(write.as_raw_fd()),
        None,
        close_inherited,
        start_child,
    )?;
    // The child holds its copies; the read end sees EOF once they close.
    drop(write);
    Ok((pid, read))
}

fn spawn_onto(
    spec: &SpawnSpec,
    output: ChildOutput,
    jail: Option<JailEntry>,
    close_inherited: fn() -> io::Result<()>,
    start_child: fn(&ChildPlan<'_>) -> io::Result<Pid>,
) -> Result<Pid, SpawnError> {
    let (program, args) = spec.argv.split_first().ok_or(SpawnError::EmptyArgv)?;
    if spec.argv.iter().any(|a| a.contains('\0')) {
        return Err(SpawnError::Nul("argv"));
    }
    if spec
        .env
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(SpawnError::Nul("env"));
    }
    if spec
        .cwd
        .as_ref()
        .is_some_and(|c| c.as_os_str().as_bytes().contains(&0))
    {
        return Err(SpawnError::Nul("cwd"));
    }
    if let Some(bad) = spec
        .env
        .iter()
        .find(|(k, _)| k.is_empty() || k.contains('='))
    {
        return Err(SpawnError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid environment variable name {:?}", bad.0),
        )));
    }

    // Everything that allocates or can fail for a reason worth a clear
    // reply happens here, before fork: the child only makes system calls.
    let root = spec
        .jail
        .as_ref()
        .map_or_else(|| Path::new("/").to_path_buf(), |j| j.root.clone());
    let inherited = if spec.clear_env {
        Vec::new()
    } else {
        std::env::vars_os().collect()
    };
    let (out_fd, terminal) = match output {
        ChildOutput::Terminal(fd) => (fd, true),
        ChildOutput::Pipe(fd) => (fd, false),
    };
    let env = if terminal {
        agent_env(inherited, spec, || own_account(&root))
    } else {
        piped_env(spec)
    };
    let search_path = env
        .iter()
        .find(|(k, _)| k.as_bytes() == b"PATH")
        .map_or_else(
            || DEFAULT_AGENT_PATH.as_bytes().to_vec(),
            |(_, v)| v.as_bytes().to_vec(),
        );
    let exe = resolve_program(
        program,
        &search_path,
        &root,
        spec.cwd.as_deref(),
        jail.is_some(),
    )?;
    let exe = CString::new(exe.into_os_string().into_vec()).map_err(|_| SpawnError::Nul("argv"))?;
    let argv_c: Vec<CString> = std::iter::once(program)
        .chain(args.iter())
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| SpawnError::Nul("argv"))?;
    let env_c: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv)
        })
        .collect::<Result<_, _>>()
        .map_err(|_| SpawnError::Nul("env"))?;
    let mut argv_p: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env_c.iter().map(|c| c.as_ptr()).collect();
    env_p.push(std::ptr::null());
    let cwd = match (&jail, &spec.cwd) {
        // With a jail the attach resets the directory; JailEntry has its own.
        (None, Some(c)) => {
            Some(CString::new(c.as_os_str().as_bytes()).map_err(|_| SpawnError::Nul("cwd"))?)
        }
        _ => None,
    };
    let creds = spec.user.as_ref().map(child_creds);

    let plan = ChildPlan {
        slave_fd: out_fd,
        stdin_fd: spec.stdin.unwrap_or(out_fd),
        terminal,
        close_inherited,
        jail: jail.as_ref(),
        creds: creds.as_ref(),
        cwd: cwd.as_deref(),
        exe: &exe,
        argv: &argv_p,
        envp: &env_p,
    };
    start_child(&plan).map_err(SpawnError::Io)
}

/// Everything the child does between fork and exec, prepared before it:
/// the child only makes system calls on this data (no allocation, no
/// locks), so it is sound whether the child has a copy of the daemon's
/// memory (fork) or shares it until exec (Linux's vfork-style clone).
pub(super) struct ChildPlan<'a> {
    /// Fds 1 and 2: the PTY slave, or a pipe (`terminal` false).
    slave_fd: RawFd,
    /// Fd 0's source: the slave, or the caller's input pipe.
    stdin_fd: RawFd,
    /// Make fd 1 the controlling terminal (TIOCSCTTY).
    terminal: bool,
    close_inherited: fn() -> io::Result<()>,
    jail: Option<&'a JailEntry>,
    creds: Option<&'a ChildCreds>,
    cwd: Option<&'a CStr>,
    exe: &'a CStr,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
}

impl ChildPlan<'_> {
    /// Runs in the child: sets it up and execs, or reports the failed
    /// stage on the agent's terminal and exits 127, which the daemon
    /// reports like any failed agent.
    pub(super) fn run(&self) -> ! {
        let stage = child_main(
            self.slave_fd,
            self.stdin_fd,
            self.terminal,
            self.close_inherited,
            self.jail,
            self.creds,
            self.cwd,
            self.exe,
            self.argv,
            self.envp,
        );
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        report_child_failure(stage, errno);
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(127) }
    }
}

/// Starts the child with fork(2). Not std::process::Command: it blocks
/// until the child has exec'd (to report exec errors), which serialises
/// spawns at roughly a millisecond each. Here the parent returns right
/// after fork.
// The Linux half starts children with clone (see `linux::clone_child`).
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub(super) fn fork_child(plan: &ChildPlan<'_>) -> io::Result<Pid> {
    // SAFETY: fork has no arguments. The child only runs `plan.run`, which
    // calls async-signal-safe functions on data prepared before fork, so it
    // is sound even if the parent had other threads.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        plan.run();
    }
    Ok(pid)
}

type EnvVars = Vec<(OsString, OsString)>;

/// The agent's environment, built before fork from `inherited` (the
/// daemon's, or nothing with `clear_env`):
/// - `PATH` is `spec.agent_path` (else [`DEFAULT_AGENT_PATH`]), never the
///   daemon's: under rc(8) that is `/sbin:/bin:/usr/sbin:/usr/bin`.
/// - With `spec.user`, `HOME`, `USER`, `LOGNAME` and `SHELL` come from that
///   user's passwd entry (the daemon's values belong to another account).
/// - Without it the agent runs as the daemon's own uid. The daemon's values
///   are kept when it has a real `HOME`; when `HOME` is missing or `/` (what
///   rc(8) and service(8) set), the daemon was started without a login, so
///   the four come from the passwd entry of the daemon's own uid
///   (`own_account`, only called then), each one only if it is missing
///   (`HOME` also when it is `/`).
/// - `spec.env` goes on top and wins over all of the above.
pub(super) fn agent_env(
    inherited: EnvVars,
    spec: &SpawnSpec,
    own_account: impl FnOnce() -> Option<UserIds>,
) -> EnvVars {
    let mut env = inherited;
    let path = spec.agent_path.as_deref().unwrap_or(DEFAULT_AGENT_PATH);
    set_var(&mut env, "PATH", path.into());
    match &spec.user {
        Some(user) => {
            for (key, value) in account_vars(user) {
                set_var(&mut env, key, value);
            }
        }
        None => {
            let home_is_rc_default = get_var(&env, "HOME").is_none_or(|h| h.as_bytes() == b"/");
            if home_is_rc_default {
                for (key, value) in own_account().iter().flat_map(account_vars) {
                    let missing = match get_var(&env, key) {
                        None => true,
                        Some(v) => key == "HOME" && v.as_bytes() == b"/",
                    };
                    if missing {
                        set_var(&mut env, key, value);
                    }
                }
            }
        }
    }
    for (k, v) in &spec.env {
        set_var(&mut env, k, v.into());
    }
    env
}

/// A piped child's environment: `PATH` and `spec.env`, nothing inherited
/// (a host operation sees none of the daemon's variables).
fn piped_env(spec: &SpawnSpec) -> EnvVars {
    let path = spec.agent_path.as_deref().unwrap_or(DEFAULT_AGENT_PATH);
    let mut env = vec![(OsString::from("PATH"), OsString::from(path))];
    for (k, v) in &spec.env {
        set_var(&mut env, k, v.into());
    }
    env
}

/// HOME, USER, LOGNAME and SHELL as login(1) sets them from a passwd entry.
/// An empty home is `/` and an empty shell `/bin/sh`, as login(1) does.
fn account_vars(user: &UserIds) -> [(&'static str, OsString); 4] {
    let home = user
        .home
        .as_ref()
        .map_or_else(|| OsString::from("/"), |h| h.clone().into_os_string());
    let shell = user
        .shell
        .as_ref()
        .map_or_else(|| OsString::from("/bin/sh"), |s| s.clone().into_os_string());
    [
        ("HOME", home),
        ("USER", OsString::from(&user.name)),
        ("LOGNAME", OsString::from(&user.name)),
        ("SHELL", shell),
    ]
}

/// The passwd entry of the daemon's effective uid in `<root>/etc/passwd`
/// (the jail's file for a jailed spawn, where the agent runs as that uid).
fn own_account(root: &Path) -> Option<UserIds> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    lookup_user(root, &euid.to_string())
        .ok()
        .filter(|u| u.uid == euid)
}

fn get_var<'a>(env: &'a EnvVars, key: &str) -> Option<&'a OsString> {
    env.iter()
        .find(|(k, _)| k.as_bytes() == key.as_bytes())
        .map(|(_, v)| v)
}

/// Replaces every `key` entry (an inherited environment may repeat one) with
/// one at the end.
fn set_var(env: &mut EnvVars, key: &str, value: OsString) {
    env.retain(|(k, _)| k.as_bytes() != key.as_bytes());
    env.push((key.into(), value));
}

/// Finds the program to exec as `execvp` would, but before fork, so that a
/// missing program is an error the spawn request can report. A name without
/// `/` is searched in `search_path`. With `jailed`, paths are the jail's
/// view: they are checked under `root` with every symlink resolved inside
/// the jail ([`resolve_in_root`]), and the path returned is the jail's view.
pub(super) fn resolve_program(
    program: &str,
    search_path: &[u8],
    root: &Path,
    cwd: Option<&Path>,
    jailed: bool,
) -> Result<PathBuf, SpawnError> {
    // The host file a candidate names, or None if it does not exist.
    let host_view = |candidate: &Path| -> Option<PathBuf> {
        if jailed {
            let jail_cwd = cwd.unwrap_or(Path::new("/"));
            resolve_in_root(root, &jail_cwd.join(candidate)).ok()
        } else {
            Some(cwd.map_or_else(|| candidate.to_path_buf(), |c| c.join(candidate)))
        }
    };
    let is_exec = |p: &Path| -> bool {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let not_found = |what: String| SpawnError::Io(io::Error::new(io::ErrorKind::NotFound, what));
    if program.contains('/') {
        let p = Path::new(program);
        if host_view(p).is_some_and(|h| is_exec(&h)) {
            return Ok(p.to_path_buf());
        }
        return Err(not_found(format!("{program}: no such executable file")));
    }
    for dir in search_path.split(|b| *b == b':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(std::ffi::OsStr::from_bytes(dir))
        };
        let candidate = dir.join(program);
        if host_view(&candidate).is_some_and(|h| is_exec(&h)) {
            return Ok(candidate);
        }
    }
    Err(SpawnError::NotInPath {
        program: program.to_string(),
        path: String::from_utf8_lossy(search_path).into_owned(),
    })
}

/// The symlink budget of one lookup: FreeBSD's MAXSYMLINKS (sys/sys/param.h)
/// is 32, Linux's 40; the smaller one errs on the side of "not found".
const MAX_SYMLINKS: usize = 32;

/// The host path of `path` as a process chrooted to `root` would reach it:
/// every symlink on the way is read and followed inside `root` (an absolute
/// target restarts at `root`, `..` never climbs above it), which is what
/// namei(9) does after jail_attach(2). Following them on the host instead
/// breaks Bastille thin jails, whose `/bin`, `/usr/bin`, ... are symlinks
/// such as `/usr/bin -> /.bastille/usr/bin` that only resolve inside the
/// jail. The result has no symlinks left in it; an error means the path
/// does not resolve (missing component, not a directory, symlink loop).
pub(super) fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut resolved = PathBuf::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        let host = root.join(&next);
        if !std::fs::symlink_metadata(&host)?.file_type().is_symlink() {
            resolved = next;
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let target = std::fs::read_link(&host)?;
        if target.is_absolute() {
            resolved = PathBuf::new();
        }
        push_components(&mut pending, &target);
    }
    Ok(root.join(resolved))
}

/// Pushes `path`'s components onto a stack so that the first one pops
/// first; `/` and `.` are dropped, `..` is kept for the walk to apply.
fn push_components(stack: &mut Vec<OsString>, path: &Path) {
    use std::path::Component;
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    stack.extend(parts.into_iter().rev());
}

/// Runs in the child between fork and exec. Returns (only on failure) the
/// name of the step that failed, with errno set.
#[allow(clippy::too_many_arguments)]
fn child_main(
    slave_fd: RawFd,
    stdin_fd: RawFd,
    terminal: bool,
    close_inherited: fn() -> io::Result<()>,
    jail: Option<&JailEntry>,
    creds: Option<&ChildCreds>,
    cwd: Option<&CStr>,
    exe: &CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> &'static str {
    for target in 0..3 {
        let source = if target == 0 { stdin_fd } else { slave_fd };
        // SAFETY: dup2 takes two integers; the result clears FD_CLOEXEC.
        if unsafe { libc::dup2(source, target) } == -1 {
            return "dup2";
        }
    }
    if let Some(c) = cwd {
        // SAFETY: c is a NUL-terminated string prepared before fork.
        if unsafe { libc::chdir(c.as_ptr()) } == -1 {
            return "chdir";
        }
    }
    if child_setup(close_inherited, terminal, jail, creds).is_err() {
        return "setup (setsid, TIOCSCTTY, jail, credentials)";
    }
    // SAFETY: exe, argv and envp are NUL-terminated strings and arrays built
    // before fork and alive for the whole call; execve returns only on error.
    unsafe { libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    "execve"
}

/// Writes `colibri: cannot start the agent: <stage> failed (errno N)` to the
/// agent's terminal (or a piped child's output) without allocating, so the
/// daemon logs why.
fn report_child_failure(stage: &str, errno: i32) {
    let mut buf = [0u8; 160];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < buf.len() {
                buf[n] = b;
                n += 1;
            }
        }
    };
    put(b"colibri: cannot start the agent: ");
    put(stage.as_bytes());
    put(b" failed (errno ");
    let mut digits = [0u8; 12];
    let mut d = digits.len();
    let mut e = errno.unsigned_abs();
    loop {
        d -= 1;
        digits[d] = b'0' + (e % 10) as u8;
        e /= 10;
        if e == 0 || d == 0 {
            break;
        }
    }
    put(&digits[d..]);
    put(b")\n");
    // SAFETY: buf holds n initialised bytes; fd 2 is the terminal (or
    // whatever it was); a failed write has nowhere better to go.
    unsafe { libc::write(2, buf.as_ptr().cast(), n) };
}

fn child_creds(user: &UserIds) -> ChildCreds {
    // An empty list would mean setgroups(0, ..), which FreeBSD releases
    // before 14.3 treat differently (groups[0] is the egid there).
    let groups = if user.groups.is_empty() {
        vec![user.gid]
    } else {
        user.groups.clone()
    };
    ChildCreds {
        uid: user.uid,
        gid: user.gid,
        groups,
    }
}

/// Runs in the child between fork and exec. Async-signal-safe calls only.
fn child_setup(
    close_inherited: fn() -> io::Result<()>,
    terminal: bool,
    jail: Option<&JailEntry>,
    creds: Option<&ChildCreds>,
) -> io::Result<()> {
    reset_signals()?;
    // Our own descriptors are all CLOEXEC, but the daemon may have inherited
    // some that are not (seen in practice: a supervisor's pipe at fd 251).
    // Closed, not only marked close-on-exec, and before jail_attach: FreeBSD's
    // jail_attach(2) fails EPERM while the process holds any open directory
    // descriptor, close-on-exec or not (do_jail_attach -> pwd_chroot_chdir
    // in sys/kern/kern_descrip.c calls chroot_refuse_vdir_fds
    // unconditionally, unlike chroot(2)), and no host descriptor may follow
    // the agent into a jail. Nothing after fork needs fds 3 and up: the
    // slave is already on 0-2 and a failure is reported on fd 2.
    close_inherited()?;
    // A new session without a controlling terminal, so TIOCSCTTY can take the
    // PTY. (Never combine with Command::process_group: setsid fails EPERM for
    // a group leader.)
    // SAFETY: setsid has no pointer arguments.
    if unsafe { libc::setsid() } == -1 {
        return Err(io::Error::last_os_error());
    }
    // fd 1 is the slave (fd 0 may be an input pipe instead), unless the
    // output is a pipe and the child has no terminal at all. Linux: 0 = do
    // not steal it from another session; FreeBSD ignores the argument.
    // SAFETY: TIOCSCTTY takes an integer argument, no pointer.
    if terminal && unsafe { libc::ioctl(1, libc::TIOCSCTTY, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    if let Some(jail) = jail {
        (jail.attach)(jail.jid)?;
        // SAFETY: cwd is a NUL-terminated string owned by the closure.
        if unsafe { libc::chdir(jail.cwd.as_ptr()) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(creds) = creds {
        drop_privileges(creds)?;
    }
    Ok(())
}

/// Gives the child the signal state of a fresh process: an empty mask (the
/// Linux daemon blocks every signal it watches for its signalfd, and masks
/// survive exec) and default dispositions (the FreeBSD daemon sets them to
/// SIG_IGN, and ignored dispositions survive exec; SIGPIPE is ignored on both).
fn reset_signals() -> io::Result<()> {
    let watched = super::DaemonSignal::watched().map(|(signo, _)| signo);
    for signo in watched.chain([libc::SIGPIPE]) {
        // SAFETY: SIG_DFL is a valid disposition for these catchable signals.
        if unsafe { libc::signal(signo, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; sigprocmask then
    // reads that initialised set and takes a null old-set pointer.
    let rc = unsafe {
        libc::sigemptyset(empty.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut())
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// setgroups, setgid, setuid, in that order (setuid last: afterwards the
/// others are no longer permitted). A non-root daemon asked to run a child as
/// itself skips the calls it could not make anyway.
fn drop_privileges(creds: &ChildCreds) -> io::Result<()> {
    // SAFETY: geteuid/getegid have no arguments and cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid != 0 && creds.uid == euid && creds.gid == egid {
        return Ok(());
    }
    // SAFETY: the pointer and length describe the Vec prepared before fork.
    if unsafe { raw_setgroups(creds.groups.len(), creds.groups.as_ptr()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setgid/setuid take plain integers.
    if unsafe { raw_setgid(creds.gid) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { raw_setuid(creds.uid) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// On Linux the system calls themselves, not glibc's wrappers: in a process
// with several threads (the daemon has its writer threads) the wrappers run
// __nptl_setxid, which takes a glibc lock and marks every other thread, in
// memory the child shares with the daemon until it execs (clone with
// CLONE_VM); a child killed there would leave the daemon's lock held. The
// child is one thread and only its own ids should change. FreeBSD's libc
// wrappers are the system calls (credentials are per process there).
#[cfg(target_os = "linux")]
unsafe fn raw_setgroups(len: usize, groups: *const libc::gid_t) -> libc::c_long {
    // SAFETY: the caller passes a valid pointer and length.
    unsafe { libc::syscall(libc::SYS_setgroups, len, groups) }
}
#[cfg(target_os = "linux")]
unsafe fn raw_setgid(gid: libc::gid_t) -> libc::c_long {
    // SAFETY: an integer argument.
    unsafe { libc::syscall(libc::SYS_setgid, gid) }
}
#[cfg(target_os = "linux")]
unsafe fn raw_setuid(uid: libc::uid_t) -> libc::c_long {
    // SAFETY: an integer argument.
    unsafe { libc::syscall(libc::SYS_setuid, uid) }
}
#[cfg(not(target_os = "linux"))]
unsafe fn raw_setgroups(len: usize, groups: *const libc::gid_t) -> libc::c_int {
    // SAFETY: the caller passes a valid pointer and length.
    unsafe { libc::setgroups(len as _, groups) }
}
#[cfg(not(target_os = "linux"))]
unsafe fn raw_setgid(gid: libc::gid_t) -> libc::c_int {
    // SAFETY: an integer argument.
    unsafe { libc::setgid(gid) }
}
#[cfg(not(target_os = "linux"))]
unsafe fn raw_setuid(uid: libc::uid_t) -> libc::c_int {
    // SAFETY: an integer argument.
    unsafe { libc::setuid(uid) }
}

/// Closes descriptors 3.. one by one, up to the RLIMIT_NOFILE soft limit
/// (capped at 65536). The fallback for kernels without close_range(2); runs
/// in the child, async-signal-safe.
pub(super) fn close_fds_from_3_by_loop() -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: limit is a valid out-pointer.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        libc::c_int::try_from(rlim_to_u64(limit.rlim_cur).min(65_536)).unwrap_or(1024)
    } else {
        1024
    };
    for fd in 3..top {
        // SAFETY: close on a descriptor number; EBADF for unused numbers is expected.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// The session `pid` belongs to (getsid(2)); `None` when it is gone. Each
/// agent leads a session of its own, so a peer in it is that agent's.
pub fn session_of(pid: Pid) -> Option<Pid> {
    nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid)))
        .ok()
        .map(|p| p.as_raw())
}

/// The value of `key` in an environment block of NUL-ended `KEY=VALUE`
/// strings (as `/proc/PID/environ` and `KERN_PROC_ENV` give it).
pub fn env_var_in(env: &[u8], key: &str) -> Option<String> {
    env.split(|b| *b == 0).find_map(|kv| {
        let value = kv.strip_prefix(key.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Whether the peer of a connected socket has closed it (POLLHUP), even
/// with unread data left: a closed client must not hold a connection slot
/// while its hang-up waits in the event queue.
pub fn peer_hung_up(fd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
        _ => false,
    }
}

/// The daemon's effective uid (the operator socket's owner).
pub fn effective_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Opens `rel`, a directory below `root`, one component at a time with
/// `O_NOFOLLOW`: a component that is a link (put there after any check)
/// fails the open instead of leading out of `root`. `root` itself is
/// the caller's and is opened as named. Only plain components are taken.
pub fn open_dir_beneath(root: &Path, rel: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, openat};
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let mut dir = open(root, flags, Mode::empty())?;
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a path below the directory has only plain components",
            ));
        };
        dir = openat(&dir, name, flags | OFlag::O_NOFOLLOW, Mode::empty())?;
    }
    Ok(dir)
}

/// Opens file `name` of directory `dir` to read, following no link and
/// never blocking (a FIFO put in its place would hold the caller).
pub fn open_file_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    use nix::fcntl::openat;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    Ok(std::fs::File::from(openat(
        dir,
        name,
        flags,
        Mode::empty(),
    )?))
}

/// Replaces file `name` of directory `dir` with `bytes`: a new file `tmp`
/// created there (never opened: `O_EXCL` follows no link), given `mode`
/// and, where the caller may, `owner`, synced, then renamed over `name`
/// within the same directory. On an error the new file is removed.
pub fn replace_file_at(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    tmp: &std::ffi::OsStr,
    bytes: &[u8],
    mode: u32,
    owner: (u32, u32),
) -> io::Result<()> {
    use nix::fcntl::{openat, renameat};
    use std::io::Write;
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC;
    let perm = Mode::from_bits_truncate((mode & 0o777) as libc::mode_t);
    let written = (|| -> io::Result<()> {
        let mut file = std::fs::File::from(openat(dir, tmp, flags, perm)?);
        file.write_all(bytes)?;
        nix::sys::stat::fchmod(&file, perm)?;
        // Only root may give a file away; as anyone else it is ours already.
        let _ = nix::unistd::fchown(
            &file,
            Some(nix::unistd::Uid::from_raw(owner.0)),
            Some(nix::unistd::Gid::from_raw(owner.1)),
        );
        file.sync_all()?;
        renameat(dir, tmp, dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = nix::unistd::unlinkat(dir, tmp, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    written
}
