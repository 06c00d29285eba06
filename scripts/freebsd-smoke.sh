#!/bin/sh
#
# freebsd-smoke.sh: exercise every FreeBSD path of colibri for real.
#
# Run as root on a FreeBSD 14 host that may be changed for a while (a CI VM,
# a test machine): it builds colibri, runs private daemons, creates a
# throwaway jail, and installs the rc script, syslog.d, newsyslog and devd
# files only where nothing of the same name exists yet. Everything it made
# is removed at the end, also after a failure or an interrupt.
#
# One line per path: "PASS <path>" or "FAIL <path>: <why>"; the last line
# is a summary. Exit status 0 if every path passed, 1 otherwise, 2 if it
# could not start (not root, not FreeBSD, a tool missing).
#
# Paths (see docs/PACKAGING.md, "Smoke test on FreeBSD"):
#   build            cargo build --release --locked (or $COLIBRID/$COLIBRI)
#   exit-code        EVFILT_PROC: an agent's exit status 3 is reported
#   exit-signal      EVFILT_PROC: an agent killed by SIGTERM is reported
#   stall            EVFILT_TIMER: a quiet working agent becomes stalled
#   pty-eof          all 64 KiB an exiting agent wrote are read (EOF on the master)
#   reaper-kill      PROC_REAP_KILL: killing an agent kills a descendant
#                    that left its session (daemon(8) -f calls setsid)
#   hint-resume      the devd action, colibri hint resume, is accepted
#   reload           EVFILT_SIGNAL: SIGHUP re-reads the config file
#   shutdown         EVFILT_SIGNAL: SIGTERM stops the daemon and its agents
#   jail-spawn       jail_attach: an agent spawned into a `jail -c` jail
#                    runs jailed (security.jail.jailed = 1)
#   jail-peer-inside LOCAL_PEERCRED: a process in the jail is served on the
#                    jail's socket and sees only the jail's panes
#   jail-peer-outside a host process is refused on the jail's socket
#   rc-start, rc-status, rc-reload, rc-stop
#                    rc.d/colibri through service(8), under daemon(8)
#   syslog-route     an alert of the rc-started daemon reaches
#                    /var/log/colibri.log through syslog.d/colibri.conf
#   newsyslog        newsyslog -n parses newsyslog.conf.d/colibri.conf
#   devd-parse       devd restarts with devd/colibri.conf installed
#
# Environment: COLIBRID, COLIBRI (prebuilt binaries: skip the build);
# SMOKE_KEEP=1 keeps the temporary directory for a post-mortem.
# Needs: jq (pkg install jq), and cargo unless COLIBRID/COLIBRI are given.

set -u

repo_root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
jail_name="colibri-smoke$$"
# A sleep whose command line names this run only (pgrep -f finds it).
detached_sleep="sleep $((3000000 + $$))"
passed=0
failed=0
failures=""

pass() {
	passed=$((passed + 1))
	echo "PASS $1"
}

fail() {
	failed=$((failed + 1))
	failures="$failures${failures:+ }$1"
	echo "FAIL $1: $2"
}

not() {
	! "$@"
}

# Runs "$@" every 0.2 s until it succeeds or $1 seconds have passed.
wait_for() {
	wait_seconds=$1
	shift
	tries=$((wait_seconds * 5))
	while [ "$tries" -gt 0 ]; do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
		tries=$((tries - 1))
	done
	return 1
}

# --- preflight -------------------------------------------------------------

if [ "$(uname -s)" != FreeBSD ]; then
	echo "freebsd-smoke.sh: this is $(uname -s); it runs on FreeBSD 14 only" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "freebsd-smoke.sh: run as root (jails, rc.d, syslogd, devd)" >&2
	exit 2
fi
for tool in jq jail jexec service newsyslog devd logger daemon pgrep; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "freebsd-smoke.sh: $tool not found (pkg install jq for jq)" >&2
		exit 2
	fi
done

tmp=$(mktemp -d /tmp/colibri-smoke.XXXXXX) || exit 2
chmod 0755 "$tmp"
# What cleanup must undo, recorded as it is made.
undo_list="$tmp/undo"
: >"$undo_list"
undo() { # a command line to run at cleanup, last made first
	printf '%s\n' "$*" >>"$undo_list"
}

cleanup() {
	trap - EXIT INT TERM HUP
	for pidfile in "$tmp"/daemon-*.pid; do
		[ -f "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		kill -TERM "$pid" 2>/dev/null && wait_for 10 not kill -0 "$pid"
		kill -KILL "$pid" 2>/dev/null
	done
	# Undo in reverse order.
	tail -r "$undo_list" | while IFS= read -r line; do
		sh -c "$line" >/dev/null 2>&1
	done
	pkill -f "$detached_sleep" 2>/dev/null
	if [ "${SMOKE_KEEP:-0}" = 1 ]; then
		echo "kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# --- build -----------------------------------------------------------------

if [ -n "${COLIBRID:-}" ] && [ -n "${COLIBRI:-}" ]; then
	colibrid=$COLIBRID
	colibri=$COLIBRI
	pass "build (using $colibrid and $colibri)"
else
	if (cd "$repo_root" && cargo build --release --locked) >"$tmp/build.log" 2>&1; then
		colibrid="$repo_root/target/release/colibrid"
		colibri="$repo_root/target/release/colibri"
		pass build
	else
		fail build "cargo build --release --locked failed; see the end of its log:"
		tail -n 20 "$tmp/build.log"
		exit 1
	fi
fi

# --- a private daemon ------------------------------------------------------

# start_daemon NAME [colibrid flags...]: runs colibrid in the background on
# $tmp/NAME.sock with its own state, pid in $tmp/daemon-NAME.pid.
start_daemon() {
	name=$1
	shift
	"$colibrid" --socket "$tmp/$name.sock" --state-dir "$tmp/$name-state" \
		--no-syslog "$@" >"$tmp/$name.log" 2>&1 &
	echo $! >"$tmp/daemon-$name.pid"
	wait_for 10 test -S "$tmp/$name.sock"
}

# pane NAME FILTER: jq FILTER applied to pane NAME of the main daemon.
pane() {
	"$colibri" --socket "$tmp/main.sock" snapshot --json |
		jq -er --arg n "$1" ".panes[] | select(.name == \$n) | $2"
}

cat >"$tmp/main.toml" <<EOF
[daemon]
stall_after = "10m"
shutdown_grace = "3s"
EOF
if ! start_daemon main --config "$tmp/main.toml" --heartbeat 1s \
	--jail-socket "$jail_name=$tmp/jail.sock"; then
	fail daemon "colibrid did not create its socket; its output:"
	cat "$tmp/main.log"
	exit 1
fi
spawn() { # spawn NAME [spawn flags] -- ARGV...
	name=$1
	shift
	"$colibri" --socket "$tmp/main.sock" spawn --name "$name" "$@" >/dev/null
}

# exit-code, exit-signal
spawn ex3 -- /bin/sh -c 'echo exiting; exit 3'
spawn sig -- /bin/sh -c 'kill -TERM $$'
if wait_for 10 pane ex3 '.exit.code == 3'; then
	pass exit-code
else
	fail exit-code "no exit code 3 in $(pane ex3 '.' 2>&1)"
fi
if wait_for 10 pane sig '.exit.signal == 15'; then
	pass exit-signal
else
	fail exit-signal "no signal 15 in $(pane sig '.' 2>&1)"
fi

# stall: working after agent_start, then quiet past its 1 s threshold.
spawn quiet --runtime pi --stall-after 1s -- \
	/bin/sh -c 'echo "{\"type\":\"agent_start\"}"; sleep 60'
if wait_for 15 pane quiet '.stalled == true'; then
	pass stall
else
	fail stall "not stalled after 15 s: $(pane quiet '{state, stalled}' 2>&1)"
fi

# pty-eof: every byte written right before exit is read.
spawn burst -- /bin/sh -c 'head -c 65536 /dev/zero | tr "\0" a; exit 0'
if wait_for 10 pane burst '.exit.code == 0 and .counters.bytes == 65536'; then
	pass pty-eof
else
	fail pty-eof "expected exit 0 after 65536 bytes: $(pane burst '{exit, counters}' 2>&1)"
fi

# reaper-kill: daemon -f forks, setsid()s and execs the sleep, which leaves
# the agent's session and process group; only the reaper reaches it.
cat >"$tmp/detach.sh" <<EOF
#!/bin/sh
daemon -f $detached_sleep
sleep 600
EOF
chmod 0755 "$tmp/detach.sh"
spawn detacher -- "$tmp/detach.sh"
detached_alive() {
	pgrep -f "$detached_sleep"
}
if ! wait_for 10 detached_alive; then
	fail reaper-kill "the detached sleep never started"
else
	detached=$(pgrep -f "$detached_sleep")
	detached_session=$(ps -o sid= -p "$detached" | tr -d ' ')
	agent_pid=$(pane detacher '.pid' 2>/dev/null)
	agent_session=$(ps -o sid= -p "$agent_pid" 2>/dev/null | tr -d ' ')
	"$colibri" --socket "$tmp/main.sock" kill detacher >/dev/null 2>&1
	if [ "$detached_session" = "$agent_session" ]; then
		fail reaper-kill "the sleep did not leave the agent's session ($agent_session)"
	elif wait_for 10 not detached_alive; then
		pass reaper-kill
	else
		fail reaper-kill "pid $detached (session $detached_session) survived kill-agent"
	fi
fi

# hint-resume: what the devd rule runs.
if "$colibri" --socket "$tmp/main.sock" hint resume >"$tmp/hint.out" 2>&1; then
	pass hint-resume
else
	fail hint-resume "$(cat "$tmp/hint.out")"
fi

# reload: SIGHUP re-reads stall_after.
main_pid=$(cat "$tmp/daemon-main.pid")
sed 's/stall_after = "10m"/stall_after = "7m"/' "$tmp/main.toml" >"$tmp/main.toml.new" &&
	mv "$tmp/main.toml.new" "$tmp/main.toml"
kill -HUP "$main_pid"
status_stall() {
	"$colibri" --socket "$tmp/main.sock" status --json | jq -e '.stall_after_ms == 420000'
}
if wait_for 10 status_stall; then
	pass reload
else
	fail reload "stall_after_ms is not 420000 after SIGHUP: $("$colibri" --socket "$tmp/main.sock" status --json 2>&1)"
fi

# jail-spawn, jail-peer-inside, jail-peer-outside: a persistent jail on the
# host's root (nothing to install), removed at cleanup.
if jail -c name="$jail_name" path=/ host.hostname="$jail_name" persist >"$tmp/jail.out" 2>&1; then
	undo "jail -r $jail_name"
	# Exit status 11 if the agent runs jailed, 10 if not.
	# shellcheck disable=SC2016 # expanded by the agent's shell, in the jail.
	spawn jailed --jail "$jail_name" -- \
		/bin/sh -c 'exit $((10 + $(sysctl -n security.jail.jailed)))'
	if wait_for 10 pane jailed '.exit.code == 11'; then
		pass jail-spawn
	else
		fail jail-spawn "$(pane jailed '{state, exit, last_error, counters}' 2>&1)"
	fi
	if jexec "$jail_name" "$colibri" --socket "$tmp/jail.sock" snapshot --json >"$tmp/inside.json" 2>&1 &&
		jq -e '[.panes[].name] == ["jailed"]' "$tmp/inside.json" >/dev/null; then
		pass jail-peer-inside
	else
		fail jail-peer-inside "$(cat "$tmp/inside.json")"
	fi
	if "$colibri" --socket "$tmp/jail.sock" snapshot --json >"$tmp/outside.json" 2>&1; then
		fail jail-peer-outside "a host process was served: $(cat "$tmp/outside.json")"
	else
		pass jail-peer-outside
	fi
else
	for path in jail-spawn jail-peer-inside jail-peer-outside; do
		fail "$path" "jail -c failed: $(cat "$tmp/jail.out")"
	done
fi

# shutdown: SIGTERM ends the daemon, its agents and its socket.
quiet_pid=$(pane quiet '.pid' 2>/dev/null)
kill -TERM "$main_pid"
if wait_for 20 not kill -0 "$main_pid" && [ ! -e "$tmp/main.sock" ] &&
	! kill -0 "$quiet_pid" 2>/dev/null; then
	rm -f "$tmp/daemon-main.pid"
	pass shutdown
else
	fail shutdown "daemon $main_pid or agent $quiet_pid still running, or the socket is left"
fi

# --- rc.d, syslog, newsyslog, devd: installed files ------------------------

# install_new SRC DST: copies SRC to DST unless DST exists; returns 1 then.
install_new() {
	if [ -e "$2" ]; then
		return 1
	fi
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2" && undo "rm -f '$2'"
}

rc_ok=yes
for pair in "$colibrid:/usr/local/sbin/colibrid" "$colibri:/usr/local/bin/colibri" \
	"$repo_root/rc.d/colibri:/usr/local/etc/rc.d/colibri"; do
	if ! install_new "${pair%%:*}" "${pair#*:}"; then
		rc_ok="no: ${pair#*:} exists (colibri is installed here); not replacing it"
	fi
done
if ! pw groupshow colibri >/dev/null 2>&1; then
	pw groupadd colibri && undo "pw groupdel colibri"
fi
[ -e /var/run/colibri ] || undo "rm -rf /var/run/colibri"
mkdir -p /etc/rc.conf.d
cat >"$tmp/rc.toml" <<EOF
[daemon]
stall_after = "10m"
EOF
if [ -e /etc/rc.conf.d/colibri ]; then
	rc_ok="no: /etc/rc.conf.d/colibri exists; not replacing it"
else
	cat >/etc/rc.conf.d/colibri <<EOF
colibri_config="$tmp/rc.toml"
colibri_socket="$tmp/rc.sock"
colibri_state_dir="$tmp/rc-state"
EOF
	undo "rm -f /etc/rc.conf.d/colibri"
fi

# syslog.d first, so the rc-started daemon's alerts are routed.
syslog_ok=yes
undo "service syslogd reload" # after the file's removal (undo runs in reverse)
if ! install_new "$repo_root/dist/syslog.d/colibri.conf" /usr/local/etc/syslog.d/colibri.conf; then
	syslog_ok="no: /usr/local/etc/syslog.d/colibri.conf exists; not replacing it"
fi
if [ ! -e /var/log/colibri.log ]; then
	: >/var/log/colibri.log && chmod 0640 /var/log/colibri.log && undo "rm -f /var/log/colibri.log"
fi
service syslogd reload >/dev/null 2>&1

if [ "$rc_ok" != yes ]; then
	for path in rc-start rc-status rc-reload rc-stop syslog-route; do
		fail "$path" "$rc_ok"
	done
else
	undo "service colibri onestop"
	if service colibri onestart >"$tmp/rc-start.out" 2>&1 && wait_for 10 test -S "$tmp/rc.sock"; then
		pass rc-start
	else
		fail rc-start "$(cat "$tmp/rc-start.out")"
	fi
	if service colibri onestatus >"$tmp/rc-status.out" 2>&1 &&
		grep -q "is running as pid" "$tmp/rc-status.out"; then
		pass rc-status
	else
		fail rc-status "$(cat "$tmp/rc-status.out")"
	fi
	sed 's/stall_after = "10m"/stall_after = "7m"/' "$tmp/rc.toml" >"$tmp/rc.toml.new" &&
		mv "$tmp/rc.toml.new" "$tmp/rc.toml"
	rc_stall() {
		"$colibri" --socket "$tmp/rc.sock" status --json | jq -e '.stall_after_ms == 420000'
	}
	if service colibri onereload >"$tmp/rc-reload.out" 2>&1 && wait_for 10 rc_stall; then
		pass rc-reload
	else
		fail rc-reload "$(cat "$tmp/rc-reload.out")"
	fi
	# syslog-route: the exit alert of an agent, found by its id.
	if [ "$syslog_ok" != yes ]; then
		fail syslog-route "$syslog_ok"
	else
		routed_id=$("$colibri" --socket "$tmp/rc.sock" spawn --name routed -- /bin/sh -c 'exit 4')
		if wait_for 15 grep -q "pane=$routed_id" /var/log/colibri.log; then
			pass syslog-route
		else
			fail syslog-route "no alert for pane $routed_id in /var/log/colibri.log"
		fi
	fi
	if service colibri onestop >"$tmp/rc-stop.out" 2>&1 && [ ! -e "$tmp/rc.sock" ] &&
		! pgrep -f "^/usr/local/sbin/colibrid" >/dev/null; then
		pass rc-stop
	else
		fail rc-stop "$(cat "$tmp/rc-stop.out")"
	fi
fi

# newsyslog: -n only prints what it would do; a bad line is an error.
if newsyslog -nv -f "$repo_root/dist/newsyslog.conf.d/colibri.conf" >"$tmp/newsyslog.out" 2>&1 &&
	grep -q /var/log/colibri.log "$tmp/newsyslog.out" &&
	! grep -qi "malformed\|error\|illegal" "$tmp/newsyslog.out"; then
	pass newsyslog
else
	fail newsyslog "$(cat "$tmp/newsyslog.out")"
fi

# devd-parse: devd exits on a syntax error in any file it reads.
undo "service devd restart" # after the file's removal
if install_new "$repo_root/dist/devd/colibri.conf" /usr/local/etc/devd/colibri.conf; then
	if service devd restart >"$tmp/devd.out" 2>&1 && sleep 1 && service devd status >>"$tmp/devd.out" 2>&1; then
		pass devd-parse
	else
		fail devd-parse "$(cat "$tmp/devd.out")"
	fi
else
	fail devd-parse "/usr/local/etc/devd/colibri.conf exists; not replacing it"
fi

echo "freebsd-smoke: $passed passed, $failed failed${failures:+ ($failures)}"
[ "$failed" -eq 0 ]
