//! Tests of the platform interface against the real kernel, written only in
//! terms of the public functions so they compile for both back ends (they
//! run on Linux here; on FreeBSD they are the first thing to run).
//!
//! Every wait is a poll on a condition with a deadline. Tests run in parallel
//! threads of one process, so process-wide state is handled with care: the
//! signal test sends thread-directed signals to its own thread (see there),
//! and the tree-kill test makes the test process a subreaper, which only
//! means orphans of other tests become (harmless) zombies here.

use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::*;

const DEADLINE: Duration = Duration::from_secs(10);
const PTY: Token = Token(1);
const EXIT: Token = Token(2);
const TIMER: Token = Token(3);
const SIGNALS: Token = Token(4);

/// Held from opening a PTY until this process has dropped its slave. Tests
/// run on threads of one process, and a child forked by one test holds every
/// fd the process had until it execs: another test's slave among them. On
/// FreeBSD a session leader that exits while any other process holds its
/// terminal has the terminal revoked, which discards unread output
/// (`killjobc` in `kern_proc.c`), so a concurrent fork would eat this
/// test's output. colibrid itself spawns from one thread and keeps no
/// slave past a spawn.
static SLAVE_OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn slave_lock() -> std::sync::MutexGuard<'static, ()> {
    SLAVE_OPEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// Polls once with the time left before `deadline`, retrying EINTR.
fn poll_until(poll: &mut Poll, events: &mut Events, deadline: Instant) {
    let left = deadline
        .checked_duration_since(Instant::now())
        .expect("deadline passed while waiting for an event");
    loop {
        match poll.poll(events, Some(left)) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other.expect("poll"),
        }
    }
}

/// Reads the master until it would block; returns true at EOF.
fn drain_master(master: &OwnedFd, out: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match read_master(master.as_fd(), &mut buf).expect("read master") {
            ReadOutcome::Data(n) => out.extend_from_slice(&buf[..n]),
            ReadOutcome::WouldBlock => return false,
            ReadOutcome::Eof => return true,
        }
    }
}

/// A child running on a PTY, watched through a real mio poll the way the
/// daemon watches it.
struct PtyChild {
    poll: Poll,
    events: Events,
    master: OwnedFd,
    pid: Pid,
    watch: Option<ExitWatch>,
    output: Vec<u8>,
    exited: bool,
    eof: bool,
}

impl PtyChild {
    fn spawn(spec: &SpawnSpec) -> PtyChild {
        let poll = Poll::new().expect("poll");
        let spawning = slave_lock();
        let pair = open_pty(80, 24, super::TerminalMode::Raw).expect("open_pty");
        let pid = spawn_on_pty(spec, &pair.slave).expect("spawn_on_pty");
        // The master reports EOF only once every slave descriptor is closed.
        drop(pair.slave);
        drop(spawning);
        poll.registry()
            .register(
                &mut SourceFd(&pair.master.as_raw_fd()),
                PTY,
                Interest::READABLE,
            )
            .expect("register pty");
        let watch = ExitWatch::register(poll.registry(), pid, EXIT).expect("exit watch");
        let exited = watch.already_exited();
        PtyChild {
            poll,
            events: Events::with_capacity(16),
            master: pair.master,
            pid,
            watch: Some(watch),
            output: Vec::new(),
            exited,
            eof: false,
        }
    }

    /// Runs the loop until `done` holds (checked after each wakeup).
    fn run_until(&mut self, done: impl Fn(&PtyChild) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !done(self) {
            poll_until(&mut self.poll, &mut self.events, deadline);
            let mut readable = false;
            for event in self.events.iter() {
                match event.token() {
                    PTY => readable = true,
                    EXIT => self.exited = true,
                    other => panic!("unexpected token {other:?}"),
                }
            }
            if readable && !self.eof {
                self.eof = drain_master(&self.master, &mut self.output);
            }
        }
    }

    /// Waits for exit and EOF (two events: a pane is finished when both
    /// happened), reaps, and returns the output and status.
    fn finish(mut self) -> (Vec<u8>, ExitStatus) {
        self.run_until(|c| c.exited && c.eof);
        let status = reap(self.pid)
            .expect("reap")
            .expect("an exited child is reapable at once");
        if let Some(watch) = self.watch.take() {
            watch.deregister(self.poll.registry());
        }
        (self.output, status)
    }
}

/// Runs `argv` on a PTY to completion: (output, status).
pub(crate) fn run_on_pty(args: &[&str]) -> (Vec<u8>, ExitStatus) {
    PtyChild::spawn(&SpawnSpec {
        argv: argv(args),
        ..SpawnSpec::default()
    })
    .finish()
}

fn fd_flags(fd: &OwnedFd) -> (bool, bool) {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    let status = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL).expect("F_GETFL"));
    let descriptor = FdFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFD).expect("F_GETFD"));
    (
        status.contains(OFlag::O_NONBLOCK),
        descriptor.contains(FdFlag::FD_CLOEXEC),
    )
}

/// A line-mode terminal hands a reader its line at Enter (`\r` becomes
/// `\n`), echoes nothing back and leaves output as written; a raw one
/// passes `\r` as it is. The master reports the mode, and `set_raw`
/// changes it.
#[test]
fn line_mode_reads_enter_as_a_newline_and_set_raw_leaves_it() {
    let pair = open_pty(80, 24, super::TerminalMode::Line).expect("open_pty");
    assert_eq!(line_mode(pair.master.as_fd()).ok(), Some(true));
    write_all_master(&pair.master, b"hi\r");
    let mut buf = [0u8; 16];
    let n = read_slave_within(&pair.slave, &mut buf, Duration::from_secs(5));
    assert_eq!(&buf[..n], b"hi\n", "Enter submits the line");
    // No echo: the master has nothing to read.
    let mut out = [0u8; 16];
    assert!(
        matches!(
            read_master(pair.master.as_fd(), &mut out),
            Ok(ReadOutcome::WouldBlock)
        ),
        "nothing echoed"
    );
    set_raw(pair.master.as_fd()).expect("set_raw");
    assert_eq!(line_mode(pair.master.as_fd()).ok(), Some(false));
    write_all_master(&pair.master, b"x\r");
    let n = read_slave_within(&pair.slave, &mut buf, Duration::from_secs(5));
    assert_eq!(&buf[..n], b"x\r", "raw: as written");
}

fn write_all_master(master: &OwnedFd, bytes: &[u8]) {
    let mut done = 0;
    while done < bytes.len() {
        match write_nonblocking(master.as_fd(), &bytes[done..]) {
            Ok(Some(n)) => done += n,
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("writing the master: {e}"),
        }
    }
}

/// One read of the slave, waiting up to `within` for bytes.
fn read_slave_within(slave: &OwnedFd, buf: &mut [u8], within: Duration) -> usize {
    let mut fds = [nix::poll::PollFd::new(
        slave.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = i32::try_from(within.as_millis()).unwrap_or(i32::MAX);
    let ready = nix::poll::poll(
        &mut fds,
        nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
    );
    assert!(
        matches!(ready, Ok(n) if n > 0),
        "the slave had nothing to read"
    );
    nix::unistd::read(slave.as_fd(), buf).expect("read the slave")
}

#[test]
fn open_pty_sets_flags_and_window_size() {
    let pair = open_pty(132, 43, super::TerminalMode::Raw).expect("open_pty");
    assert_eq!(
        fd_flags(&pair.master),
        (true, true),
        "master must be O_NONBLOCK and FD_CLOEXEC"
    );
    assert!(fd_flags(&pair.slave).1, "slave must be FD_CLOEXEC");
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize through the pointer; the fd is live.
    let rc = unsafe {
        libc::ioctl(
            pair.master.as_raw_fd(),
            libc::TIOCGWINSZ,
            &mut size as *mut libc::winsize,
        )
    };
    assert_eq!(rc, 0, "TIOCGWINSZ: {}", std::io::Error::last_os_error());
    assert_eq!((size.ws_col, size.ws_row), (132, 43));
    // FreeBSD sizes the PTY's queues by the line speed (23 KB at this one).
    #[cfg(target_os = "freebsd")]
    {
        let t = nix::sys::termios::tcgetattr(&pair.slave).expect("tcgetattr");
        assert_eq!(nix::sys::termios::cfgetospeed(&t), os::PTY_SPEED as u32);
    }
}

#[test]
fn child_output_is_raw_and_exit_code_is_reported() {
    let (output, status) = run_on_pty(&["/bin/sh", "-c", r#"printf '{"a":1}\n'; exit 3"#]);
    // Exactly the bytes written: no "\r\n" from ONLCR, no echo.
    assert_eq!(String::from_utf8_lossy(&output), "{\"a\":1}\n");
    assert_eq!(status, ExitStatus::Code(3));
}

#[test]
fn child_killed_by_signal_is_reported() {
    let (_, status) = run_on_pty(&["/bin/sh", "-c", "kill -KILL $$"]);
    assert_eq!(status, ExitStatus::Signal(libc::SIGKILL));
}

#[test]
fn child_is_session_leader_with_the_pty_as_controlling_terminal() {
    let spec = SpawnSpec {
        argv: argv(&[
            "/bin/sh",
            "-c",
            "ps -o sid= -p $$; echo via-dev-tty > /dev/tty",
        ]),
        ..SpawnSpec::default()
    };
    let child = PtyChild::spawn(&spec);
    let pid = child.pid;
    let (output, status) = child.finish();
    let text = String::from_utf8_lossy(&output);
    assert_eq!(status, ExitStatus::Code(0), "output: {text}");
    let sid: Pid = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("sid line");
    assert_eq!(sid, pid, "the child must lead its own session");
    // /dev/tty opens only with a controlling terminal, and the line arrives
    // on our master, so that terminal is our PTY.
    assert!(text.lines().any(|l| l == "via-dev-tty"), "output: {text}");
}

#[test]
fn spawn_applies_env_cwd_and_clear_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().canonicalize().expect("canonical tempdir");
    let spec = SpawnSpec {
        argv: argv(&[
            "/bin/sh",
            "-c",
            // `pwd` runs in the shell itself: a `$(pwd)` child could still
            // hold the terminal when the shell exits, and FreeBSD's revoke
            // of a departed session leader's terminal would discard the
            // line (docs/RELIABILITY.md).
            r#"printf '%s|%s|' "$FOO" "${HOME:-unset}"; pwd"#,
        ]),
        env: vec![("FOO".into(), "bar".into())],
        clear_env: true,
        cwd: Some(cwd.clone()),
        ..SpawnSpec::default()
    };
    let (output, status) = PtyChild::spawn(&spec).finish();
    assert_eq!(status, ExitStatus::Code(0));
    // A cleared environment still gets the account's HOME (see agent_env):
    // the passwd entry of our own uid, when the host has one.
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let home = lookup_user(std::path::Path::new("/"), &euid.to_string())
        .ok()
        .filter(|u| u.uid == euid)
        .map_or_else(
            || "unset".to_owned(),
            |u| {
                u.home
                    .map_or_else(|| "/".to_owned(), |h| h.display().to_string())
            },
        );
    assert_eq!(
        String::from_utf8_lossy(&output),
        format!("bar|{home}|{}\n", cwd.display())
    );
}

/// What rc(8) and service(8) hand an rc script (and so colibrid): no login.
fn rc_environment() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vec![
        ("PATH".into(), "/sbin:/bin:/usr/sbin:/usr/bin".into()),
        ("HOME".into(), "/".into()),
        ("RC_PID".into(), "17".into()),
    ]
}

fn account(name: &str, uid: u32, home: &str, shell: &str) -> UserIds {
    UserIds {
        name: name.into(),
        uid,
        gid: uid,
        groups: vec![uid],
        home: Some(home.into()),
        shell: Some(shell.into()),
    }
}

fn env_value<'a>(
    env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    key: &str,
) -> Option<&'a str> {
    let mut found = env.iter().filter(|(k, _)| k == key);
    let value = found.next().map(|(_, v)| v.to_str().expect("UTF-8 value"));
    assert!(found.next().is_none(), "{key} set twice in {env:?}");
    value
}

#[test]
fn agent_env_under_rc_gets_the_agent_path_and_the_users_account() {
    let spec = SpawnSpec {
        argv: argv(&["pi"]),
        user: Some(account("agent", 1001, "/home/agent", "/bin/sh")),
        ..SpawnSpec::default()
    };
    let env = posix::agent_env(rc_environment(), &spec, || {
        panic!("the daemon's own account is not needed with a user")
    });
    assert_eq!(env_value(&env, "PATH"), Some(DEFAULT_AGENT_PATH));
    assert!(DEFAULT_AGENT_PATH.split(':').any(|d| d == "/usr/local/bin"));
    assert_eq!(env_value(&env, "HOME"), Some("/home/agent"));
    assert_eq!(env_value(&env, "USER"), Some("agent"));
    assert_eq!(env_value(&env, "LOGNAME"), Some("agent"));
    assert_eq!(env_value(&env, "SHELL"), Some("/bin/sh"));
    assert_eq!(env_value(&env, "RC_PID"), Some("17"));
}

#[test]
fn agent_env_under_rc_without_user_takes_the_daemons_own_account() {
    let spec = SpawnSpec {
        argv: argv(&["pi"]),
        agent_path: Some("/opt/bin:/usr/bin:/bin".into()),
        ..SpawnSpec::default()
    };
    let env = posix::agent_env(rc_environment(), &spec, || {
        Some(account("root", 0, "/root", "/bin/csh"))
    });
    assert_eq!(env_value(&env, "PATH"), Some("/opt/bin:/usr/bin:/bin"));
    assert_eq!(env_value(&env, "HOME"), Some("/root"));
    assert_eq!(env_value(&env, "USER"), Some("root"));
    assert_eq!(env_value(&env, "LOGNAME"), Some("root"));
    assert_eq!(env_value(&env, "SHELL"), Some("/bin/csh"));
}

#[test]
fn agent_env_keeps_a_logged_in_daemons_account_and_the_spawns_own_values() {
    let inherited = vec![
        ("PATH".into(), "/home/op/bin:/usr/bin".into()),
        ("HOME".into(), "/home/op".into()),
        ("USER".into(), "op".into()),
    ];
    let spec = SpawnSpec {
        argv: argv(&["pi"]),
        env: vec![
            ("PATH".into(), "/custom/bin".into()),
            ("SHELL".into(), "/bin/zsh".into()),
        ],
        ..SpawnSpec::default()
    };
    let env = posix::agent_env(inherited, &spec, || {
        panic!("a daemon with a real HOME keeps its own account")
    });
    assert_eq!(env_value(&env, "PATH"), Some("/custom/bin"));
    assert_eq!(env_value(&env, "HOME"), Some("/home/op"));
    assert_eq!(env_value(&env, "USER"), Some("op"));
    assert_eq!(env_value(&env, "LOGNAME"), None);
    assert_eq!(env_value(&env, "SHELL"), Some("/bin/zsh"));
}

#[test]
fn spawn_finds_and_passes_the_agent_path_not_the_daemons() {
    let bin = tempfile::tempdir().expect("tempdir");
    let probe = bin.path().join("colibri-path-probe");
    std::fs::write(&probe, "#!/bin/sh\nprintf '%s' \"$PATH\"\n").expect("write probe");
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod probe");
    let agent_path = format!("{}:/usr/bin:/bin", bin.path().display());
    assert!(
        std::env::var("PATH").map_or(true, |p| !p.contains(&bin.path().display().to_string())),
        "the test process's PATH must not already find the probe"
    );
    let spec = SpawnSpec {
        argv: argv(&["colibri-path-probe"]),
        agent_path: Some(agent_path.clone()),
        ..SpawnSpec::default()
    };
    let (output, status) = PtyChild::spawn(&spec).finish();
    assert_eq!(status, ExitStatus::Code(0));
    assert_eq!(String::from_utf8_lossy(&output), agent_path);
}

#[test]
fn spawn_switches_user_when_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (uid, gid, groups) = if root {
        (65534, 65533, vec![65533, 4242])
    } else {
        // SAFETY: getuid/getgid have no preconditions.
        let (u, g) = unsafe { (libc::getuid(), libc::getgid()) };
        (u, g, vec![g])
    };
    let user = UserIds {
        name: "agent".into(),
        uid,
        gid,
        groups: groups.clone(),
        home: None,
        shell: None,
    };
    let spec = SpawnSpec {
        argv: argv(&["/bin/sh", "-c", "id -u; id -g; id -G"]),
        user: Some(user),
        ..SpawnSpec::default()
    };
    let (output, status) = PtyChild::spawn(&spec).finish();
    let text = String::from_utf8_lossy(&output);
    assert_eq!(status, ExitStatus::Code(0), "output: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(uid.to_string().as_str()),
        "output: {text}"
    );
    assert_eq!(
        lines.get(1).copied(),
        Some(gid.to_string().as_str()),
        "output: {text}"
    );
    if root {
        let mut seen: Vec<u32> = lines
            .get(2)
            .unwrap_or(&"")
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            vec![4242, 65533],
            "supplementary groups, output: {text}"
        );
    }
}

#[test]
fn spawn_rejects_bad_specs() {
    let pair = open_pty(80, 24, super::TerminalMode::Raw).expect("open_pty");
    assert!(matches!(
        spawn_on_pty(&SpawnSpec::default(), &pair.slave),
        Err(SpawnError::EmptyArgv)
    ));
    let nul = SpawnSpec {
        argv: argv(&["/bin/sh", "a\0b"]),
        ..SpawnSpec::default()
    };
    assert!(matches!(
        spawn_on_pty(&nul, &pair.slave),
        Err(SpawnError::Nul("argv"))
    ));
    let nul_cwd = SpawnSpec {
        argv: argv(&["/bin/sh"]),
        cwd: Some("/tmp/a\0b".into()),
        ..SpawnSpec::default()
    };
    assert!(matches!(
        spawn_on_pty(&nul_cwd, &pair.slave),
        Err(SpawnError::Nul("cwd"))
    ));
    let missing = SpawnSpec {
        argv: argv(&["/nonexistent/colibri-test-program"]),
        ..SpawnSpec::default()
    };
    match spawn_on_pty(&missing, &pair.slave) {
        Err(SpawnError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        other => panic!("expected an exec failure, got {other:?}"),
    }
}

#[test]
fn exit_watch_on_a_reaped_child_reports_already_exited() {
    let spawning = slave_lock();
    let pair = open_pty(80, 24, super::TerminalMode::Raw).expect("open_pty");
    let pid = spawn_on_pty(
        &SpawnSpec {
            argv: argv(&["/bin/sh", "-c", "exit 0"]),
            ..SpawnSpec::default()
        },
        &pair.slave,
    )
    .expect("spawn");
    drop(pair.slave);
    drop(spawning);
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = reap(pid).expect("reap") {
            break status;
        }
        assert!(Instant::now() < deadline, "child {pid} did not exit");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status, ExitStatus::Code(0));
    assert_eq!(
        reap(pid).expect("second reap"),
        Some(ExitStatus::Unknown),
        "ECHILD means Unknown"
    );
    let poll = Poll::new().expect("poll");
    let watch = ExitWatch::register(poll.registry(), pid, EXIT).expect("register on a reaped pid");
    assert!(watch.already_exited());
    watch.deregister(poll.registry());
}

/// Collects the total expiration count for TIMER over `window`.
fn timer_fires_within(poll: &mut Poll, timer: &mut KernelTimer, window: Duration) -> u64 {
    let mut events = Events::with_capacity(8);
    let end = Instant::now() + window;
    let mut total = 0;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match poll.poll(&mut events, Some(left)) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => other.expect("poll"),
        }
        for event in events.iter() {
            assert_eq!(event.token(), TIMER);
            total += timer.acknowledge();
        }
    }
    total
}

/// Waits until TIMER has fired `at_least` times; returns the count seen.
fn wait_for_timer(poll: &mut Poll, timer: &mut KernelTimer, at_least: u64) -> u64 {
    let mut events = Events::with_capacity(8);
    let deadline = Instant::now() + DEADLINE;
    let mut total = 0;
    while total < at_least {
        poll_until(poll, &mut events, deadline);
        for event in events.iter() {
            assert_eq!(event.token(), TIMER);
            total += timer.acknowledge();
        }
    }
    total
}

#[test]
fn oneshot_timer_fires_once() {
    let mut poll = Poll::new().expect("poll");
    let mut timer = KernelTimer::new(poll.registry(), TIMER).expect("timer");
    let armed = Instant::now();
    timer
        .arm_oneshot(poll.registry(), Duration::from_millis(20))
        .expect("arm");
    assert_eq!(wait_for_timer(&mut poll, &mut timer, 1), 1);
    assert!(
        armed.elapsed() >= Duration::from_millis(20),
        "fired early: {:?}",
        armed.elapsed()
    );
    assert_eq!(
        timer_fires_within(&mut poll, &mut timer, Duration::from_millis(150)),
        0,
        "a oneshot fires once"
    );
    timer.deregister(poll.registry());
}

#[test]
fn zero_oneshot_still_fires() {
    let mut poll = Poll::new().expect("poll");
    let mut timer = KernelTimer::new(poll.registry(), TIMER).expect("timer");
    timer
        .arm_oneshot(poll.registry(), Duration::ZERO)
        .expect("arm");
    assert_eq!(wait_for_timer(&mut poll, &mut timer, 1), 1);
    timer.deregister(poll.registry());
}

#[test]
fn rearming_a_oneshot_moves_its_deadline() {
    let mut poll = Poll::new().expect("poll");
    let mut timer = KernelTimer::new(poll.registry(), TIMER).expect("timer");
    timer
        .arm_oneshot(poll.registry(), Duration::from_secs(3600))
        .expect("arm far");
    let kicked = Instant::now();
    timer
        .arm_oneshot(poll.registry(), Duration::from_millis(30))
        .expect("re-arm near");
    assert_eq!(wait_for_timer(&mut poll, &mut timer, 1), 1);
    assert!(kicked.elapsed() < Duration::from_secs(5));
    timer.deregister(poll.registry());
}

#[test]
fn periodic_timer_repeats_until_disarmed() {
    let mut poll = Poll::new().expect("poll");
    let mut timer = KernelTimer::new(poll.registry(), TIMER).expect("timer");
    timer
        .arm_periodic(poll.registry(), Duration::from_millis(10))
        .expect("arm");
    assert!(wait_for_timer(&mut poll, &mut timer, 3) >= 3);
    timer.disarm(poll.registry()).expect("disarm");
    // An event queued just before the disarm may still arrive; it must
    // acknowledge as 0 (spurious).
    assert_eq!(
        timer_fires_within(&mut poll, &mut timer, Duration::from_millis(100)),
        0,
        "disarmed timer fired"
    );
    // And it can be armed again after a disarm.
    timer
        .arm_oneshot(poll.registry(), Duration::from_millis(5))
        .expect("re-arm");
    assert_eq!(wait_for_timer(&mut poll, &mut timer, 1), 1);
    timer.deregister(poll.registry());
}

/// The signal source tells HUP and TERM apart.
///
/// Registering changes process-wide state (Linux: the blocked mask of this
/// thread; FreeBSD: SIG_IGN dispositions), and a process-directed SIGHUP
/// would be delivered to some other test thread that does not block it and
/// kill the test binary. So the signals are sent with pthread_kill to this
/// thread only, where they stay pending for the signalfd (Linux) or are
/// recorded by EVFILT_SIGNAL (FreeBSD, which records thread-directed
/// signals too). The mask dies with the test thread.
#[test]
fn signal_source_reports_each_signal() {
    let mut poll = Poll::new().expect("poll");
    let mut signals = SignalSource::register(poll.registry(), SIGNALS).expect("register signals");
    for sig in [libc::SIGHUP, libc::SIGTERM] {
        // SAFETY: pthread_self is this live thread; the signal is blocked
        // (Linux) or ignored (FreeBSD) here, so nothing runs on delivery.
        let rc = unsafe { libc::pthread_kill(libc::pthread_self(), sig) };
        assert_eq!(rc, 0, "pthread_kill");
    }
    let mut events = Events::with_capacity(8);
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while !(seen.contains(&DaemonSignal::Hangup) && seen.contains(&DaemonSignal::Terminate)) {
        poll_until(&mut poll, &mut events, deadline);
        for event in events.iter() {
            assert_eq!(event.token(), SIGNALS);
            signals.drain(&mut seen);
        }
    }
    assert!(
        !seen.contains(&DaemonSignal::Interrupt),
        "no SIGINT was sent: {seen:?}"
    );
    signals.deregister(poll.registry());
}

#[test]
fn signal_tree_kills_a_background_grandchild() {
    // As subreaper we inherit the grandchild once its shell dies, so we can
    // reap it and read how it died.
    become_subreaper().expect("become subreaper");
    let spec = SpawnSpec {
        argv: argv(&["/bin/sh", "-c", "sleep 100 & echo $!; wait"]),
        ..SpawnSpec::default()
    };
    let mut child = PtyChild::spawn(&spec);
    child.run_until(|c| c.output.contains(&b'\n'));
    let text = String::from_utf8_lossy(&child.output).into_owned();
    let grandchild: Pid = text.trim().parse().expect("grandchild pid");
    signal_tree(child.pid, libc::SIGKILL).expect("signal_tree");
    let (_, status) = child.finish();
    assert_eq!(status, ExitStatus::Signal(libc::SIGKILL));
    // The shell is reaped, so its orphan has been re-parented to us; it may
    // still be dying, hence the poll.
    let deadline = Instant::now() + DEADLINE;
    let grandchild_status = loop {
        match reap(grandchild).expect("reap grandchild") {
            Some(ExitStatus::Unknown) | None => {}
            Some(status) => break status,
        }
        assert!(
            Instant::now() < deadline,
            "grandchild {grandchild} survived signal_tree"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // The tree's SIGKILL, or the hangup FreeBSD's kernel sends the
    // terminal's process group when the session leader (killed in the same
    // call) exits: a process with both pending takes the lower-numbered
    // first (`sig_ffs` in `issignal`), so on a slow machine the grandchild
    // may die of SIGHUP. Either way it is dead.
    assert!(
        matches!(grandchild_status, ExitStatus::Signal(s) if s == libc::SIGKILL || s == libc::SIGHUP),
        "grandchild ended by {grandchild_status:?}"
    );
    assert!(
        signal_tree(child_pid_gone(), libc::SIGTERM).is_ok(),
        "ESRCH is not an error"
    );
    assert!(
        signal_tree(0, libc::SIGTERM).is_err(),
        "pid 0 would be our own group"
    );
    assert!(
        signal_tree(-1, libc::SIGTERM).is_err(),
        "pid -1 would be every process"
    );
}

/// A pid that is very unlikely to exist (above the default pid_max of both systems).
fn child_pid_gone() -> Pid {
    99_999_999
}

#[test]
fn write_nonblocking_reports_would_block() {
    let pair = open_pty(80, 24, super::TerminalMode::Raw).expect("open_pty");
    let chunk = [b'x'; 4096];
    // Nobody reads the slave, so its input queue fills up.
    let blocked = (0..10_000).any(|_| {
        write_nonblocking(pair.master.as_fd(), &chunk)
            .expect("write")
            .is_none()
    });
    assert!(blocked, "a full PTY input queue must report WouldBlock");
}

#[test]
fn raise_fd_limit_does_not_lower_and_reports_the_limit_in_force() {
    use nix::sys::resource::{getrlimit, Resource};
    let (before, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let soft = raise_fd_limit().expect("raise");
    let (now, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    assert_eq!(Some(soft), Some(posix::rlim_to_u64(now)));
    assert!(
        Some(soft) >= Some(posix::rlim_to_u64(before)),
        "lowered from {before} to {soft}"
    );
}

#[test]
fn lookup_user_parses_passwd_and_group() {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(root.path().join("etc")).expect("mkdir etc");
    let mut passwd = std::fs::File::create(root.path().join("etc/passwd")).expect("passwd");
    writeln!(
        passwd,
        "# comment\nroot:*:0:0:Charlie &:/root:/bin/sh\n\nagent:*:1001:1001:Agent:/home/agent:/bin/sh\n+:::::::"
    )
    .expect("write passwd");
    let mut group = std::fs::File::create(root.path().join("etc/group")).expect("group");
    writeln!(group, "wheel:*:0:root\nagent:*:1001:\nbuild:*:2000:other,agent\nagentx:*:3000:agentx\nvideo:*:44:agent").expect("write group");

    let agent = lookup_user(root.path(), "agent").expect("agent");
    assert_eq!(
        agent,
        UserIds {
            name: "agent".into(),
            uid: 1001,
            gid: 1001,
            groups: vec![1001, 2000, 44],
            home: Some("/home/agent".into()),
            shell: Some("/bin/sh".into()),
        }
    );
    let by_uid = lookup_user(root.path(), "1001").expect("by uid");
    assert_eq!(by_uid, agent);
    let root_user = lookup_user(root.path(), "root").expect("root");
    assert_eq!(root_user.groups, vec![0]);
    let missing = lookup_user(root.path(), "nobody").expect_err("no such user");
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
}

/// A Bastille thin jail: base directories are symlinks into `/.bastille`,
/// which resolve only inside the jail.
fn thin_jail() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let base = root.path().join(".bastille");
    for dir in ["bin", "usr/bin", "usr/local/bin"] {
        std::fs::create_dir_all(base.join(dir)).expect("mkdir base");
    }
    std::fs::create_dir_all(root.path().join("usr/local")).expect("mkdir usr/local");
    std::os::unix::fs::symlink("/.bastille/bin", root.path().join("bin")).expect("ln bin");
    std::os::unix::fs::symlink("/.bastille/usr/bin", root.path().join("usr/bin"))
        .expect("ln usr/bin");
    // A relative link with more `..` than there are levels: stays at the root.
    std::os::unix::fs::symlink(
        "../../../../../.bastille/usr/local/bin",
        root.path().join("usr/local/bin"),
    )
    .expect("ln usr/local/bin");
    for tool in ["bin/sh", "usr/bin/env", "usr/local/bin/node"] {
        let path = base.join(tool);
        std::fs::write(&path, "#!/bin/sh\n").expect("write tool");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod tool");
    }
    root
}

#[test]
fn thin_jail_programs_resolve_through_symlinks_inside_the_jail() {
    let jail = thin_jail();
    let root = jail.path();
    let path = b"/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin";
    let found = |program: &str| posix::resolve_program(program, path, root, None, true);
    assert_eq!(found("sh").expect("sh"), std::path::Path::new("/bin/sh"));
    assert_eq!(
        found("env").expect("env"),
        std::path::Path::new("/usr/bin/env")
    );
    assert_eq!(
        found("node").expect("node"),
        std::path::Path::new("/usr/local/bin/node")
    );
    assert_eq!(
        found("/usr/bin/env").expect("absolute env"),
        std::path::Path::new("/usr/bin/env")
    );
    let missing = found("claude").expect_err("not in the jail");
    assert!(
        missing.to_string().contains("not found in PATH"),
        "{missing}"
    );
    assert_eq!(
        posix::resolve_in_root(root, std::path::Path::new("/usr/bin/env")).expect("resolve"),
        root.join(".bastille/usr/bin/env")
    );
}

#[test]
fn jail_symlinks_cannot_point_outside_the_jail_root() {
    let outer = tempfile::tempdir().expect("tempdir");
    let host_tool = outer.path().join("host-only");
    std::fs::write(&host_tool, "#!/bin/sh\n").expect("write host tool");
    std::fs::set_permissions(
        &host_tool,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod host tool");
    let root = outer.path().join("jail");
    std::fs::create_dir_all(root.join("usr/bin")).expect("mkdir");
    // On the host this climbs out of the jail to `host-only`; inside it,
    // `..` stops at the root and an absolute target starts there.
    std::os::unix::fs::symlink("../../../host-only", root.join("usr/bin/up")).expect("ln up");
    std::os::unix::fs::symlink(&host_tool, root.join("usr/bin/abs")).expect("ln abs");
    std::os::unix::fs::symlink("loop", root.join("usr/bin/loop")).expect("ln loop");
    for program in ["up", "abs", "loop"] {
        let err = posix::resolve_program(program, b"/usr/bin", &root, None, true)
            .expect_err("a link out of the jail must not resolve to the host file");
        assert!(err.to_string().contains("not found"), "{program}: {err}");
    }
    let looped = posix::resolve_in_root(&root, std::path::Path::new("/usr/bin/loop"))
        .expect_err("a symlink loop");
    assert_eq!(looped.raw_os_error(), Some(libc::ELOOP));
}

#[test]
fn a_partial_reaper_kill_is_not_followed_by_a_group_kill() {
    let eperm = || Some(std::io::Error::from_raw_os_error(libc::EPERM));
    let esrch = || Some(std::io::Error::from_raw_os_error(libc::ESRCH));
    assert!(matches!(
        posix::after_reaper_kill(None, 3),
        posix::AfterReaperKill::Done(Ok(()))
    ));
    match posix::after_reaper_kill(eperm(), 2) {
        posix::AfterReaperKill::Done(Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        other => panic!("partial failure must not signal again: {other:?}"),
    }
    match posix::after_reaper_kill(eperm(), 0) {
        posix::AfterReaperKill::SignalGroup {
            reaper_error: Some(e),
        } => {
            assert_eq!(e.raw_os_error(), Some(libc::EPERM))
        }
        other => panic!("nobody signalled: fall back to the group: {other:?}"),
    }
    assert!(matches!(
        posix::after_reaper_kill(esrch(), 0),
        posix::AfterReaperKill::SignalGroup { reaper_error: None }
    ));
}

#[test]
fn peer_cred_reports_our_own_process() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let cred = peer_cred(a.as_fd()).expect("peer_cred");
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!(
        cred,
        PeerCred {
            pid: Some(std::process::id() as i32),
            uid,
            gid
        }
    );
}

#[test]
fn host_facts_are_available() {
    assert!(!hostname().is_empty());
    assert!(self_rss_bytes().expect("rss") > 0);
    assert!(pid_jail(std::process::id() as i32).expect("pid_jail") >= 0);
}

#[test]
fn orphans_are_the_live_descendants_outside_the_running_agents_subtrees() {
    use posix::Descendant;
    let d = |pid, subtree, child, zombie| Descendant {
        pid,
        subtree,
        child,
        zombie,
    };
    let all = [
        d(100, 100, true, false),  // a running agent
        d(101, 100, false, false), // its child
        d(102, 100, true, false),  // its orphan, re-parented to the reaper
        d(200, 200, true, false),  // an orphan of finished agent 200
        d(201, 200, false, false), // its child
        d(202, 200, false, true),  // a zombie: nothing to signal
        d(300, 300, true, false),  // an orphan of finished agent 300
    ];
    let (pids, orphans) = posix::orphans_to_signal(&all, &[100], |_| true);
    assert_eq!(pids, [200, 201, 300]);
    assert_eq!(orphans, 2);
    // The choice is made per finished agent: one member's yes takes its
    // kin (201 may have cleared its environment), and no one else.
    let mut asked = Vec::new();
    let (pids, orphans) = posix::orphans_to_signal(&all, &[100], |members| {
        asked.push(members.to_vec());
        members.contains(&200)
    });
    assert_eq!(pids, [200, 201]);
    assert_eq!(orphans, 1);
    assert_eq!(asked, [vec![200, 201], vec![300]]);
    // No agent running: everything live goes.
    let (pids, _) = posix::orphans_to_signal(&all, &[], |_| true);
    assert_eq!(pids, [100, 101, 102, 200, 201, 300]);
}

#[test]
fn a_childs_ancestry_reaches_this_process_and_its_environment_is_read() {
    let me = i32::try_from(std::process::id()).expect("pid");
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .env("COLIBRI_TEST_MARK", "ancestry")
        .spawn()
        .expect("sleep");
    let pid = i32::try_from(child.id()).expect("pid");
    let (chain, end) = super::ancestry(pid, me, 64);
    assert_eq!(chain, vec![pid, me], "the child, then its parent");
    assert_eq!(end, super::AncestryEnd::Stop);
    // Until the exec, the child still has this process's environment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mark = loop {
        let mark = super::process_env_var(pid, "COLIBRI_TEST_MARK");
        if mark.is_some() || std::time::Instant::now() > deadline {
            break mark;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(mark.as_deref(), Some("ancestry"));
    assert_eq!(super::process_env_var(pid, "COLIBRI_TEST_NONE"), None);
    // Past `stop`'s absence, the chain climbs to init.
    let (up, end) = super::ancestry(me, 0, 64);
    assert_eq!(up.first(), Some(&me));
    assert_eq!(end, super::AncestryEnd::Init);
    let _ = child.kill();
    let _ = child.wait();
    let (gone, end) = super::ancestry(pid, me, 64);
    assert_eq!(
        (gone, end),
        (vec![pid], super::AncestryEnd::Gone),
        "a reaped child"
    );
}

#[test]
fn an_input_pipe_becomes_the_childs_stdin_and_the_pty_stays_its_terminal() {
    let (read, write) = super::input_pipe().expect("input pipe");
    let spec = SpawnSpec {
        argv: argv(&[
            "/bin/sh",
            "-c",
            // Not a terminal on 0, the PTY on 1 and as /dev/tty.
            r#"if [ -t 0 ]; then echo stdin-tty; else echo stdin-pipe; fi; read x; echo "got:$x"; [ -t 1 ] && echo out-tty >/dev/tty"#,
        ]),
        stdin: Some(read.as_raw_fd()),
        ..SpawnSpec::default()
    };
    let child = PtyChild::spawn(&spec);
    drop(read);
    let mut buf: &[u8] = b"hello\n";
    while !buf.is_empty() {
        if let Some(n) = super::write_nonblocking(write.as_fd(), buf).expect("write") {
            buf = &buf[n..];
        }
    }
    drop(write);
    let (output, status) = child.finish();
    let text = String::from_utf8_lossy(&output);
    assert_eq!(status, ExitStatus::Code(0), "output: {text}");
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    assert_eq!(
        lines,
        ["stdin-pipe", "got:hello", "out-tty"],
        "output: {text}"
    );
}

/// A piped child (a host operation): stdout and stderr on the pipe, stdin
/// on /dev/null, a session and process group of its own without a
/// terminal, and nothing of our environment but the `PATH` it is given.
#[test]
fn a_piped_child_writes_to_its_pipe_in_a_session_of_its_own_without_a_terminal() {
    std::env::set_var("COLIBRI_PIPED_TEST_SECRET", "leak");
    let spec = SpawnSpec {
        argv: argv(&[
            "/bin/sh",
            "-c",
            "ps -o sid= -o pgid= -p $$; echo to-stderr >&2; cat; env; \
             (: < /dev/tty) 2>/dev/null && echo has-a-tty; exit 5",
        ]),
        agent_path: Some("/bin:/usr/bin".into()),
        ..SpawnSpec::default()
    };
    let (pid, out) = spawn_piped(&spec).expect("spawn");
    let mut text = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut buf = [0u8; 4096];
        match read_master(out.as_fd(), &mut buf).expect("read") {
            ReadOutcome::Data(n) => text.extend_from_slice(&buf[..n]),
            ReadOutcome::Eof => break,
            ReadOutcome::WouldBlock => {
                assert!(Instant::now() < deadline, "no end of output");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let status = loop {
        if let Some(status) = reap(pid).expect("reap") {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit");
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = String::from_utf8_lossy(&text);
    assert_eq!(status, ExitStatus::Code(5), "{text}");
    let ids: Vec<Pid> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(ids, [pid, pid], "session and group of its own: {text}");
    assert!(text.contains("to-stderr\n"), "{text}");
    assert!(text.contains("PATH=/bin:/usr/bin\n"), "{text}");
    assert!(!text.contains("COLIBRI_PIPED_TEST_SECRET"), "{text}");
    assert!(!text.contains("HOME="), "{text}");
    assert!(!text.contains("has-a-tty"), "{text}");
}
