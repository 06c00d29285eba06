#!/usr/bin/env bash
# End-to-end benchmarks: colibrid measured the way supervisors are measured,
# next to C floors run in the same run (see bench/e2e.py and
# docs/PERFORMANCE.md). Builds the C programs with cc -O2 and colibrid
# --release, raises kernel.pty.max and RLIMIT_NOFILE for the 10,000-agent run
# (kernel.pty.max is restored on exit), and prints one table.
# Usage: bench/e2e.sh [--quick] [--only exit|scale|stream] [--scale 100,1000]
# Linux only (pidfds, /proc). The full run takes about 2 minutes, --quick
# under 1. Set BENCH_KEEP_DAMON=1 to leave DAMON running (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_BIN:-target/bench-c}
mkdir -p "$out"
for prog in stamp_exit streamer idle_agent watch_client floor_pidfd floor_spawn floor_read floor_log floor_send; do
  cc -O2 -Wall -Wextra -o "$out/$prog" "bench/$prog.c"
done
cargo build --release --quiet --bin colibrid

# Host settings changed for the run are put back on exit, in reverse.
restore=()
put_back() {
  # Every restore is tried, whatever the one before it did.
  set +e
  local i
  for ((i = ${#restore[@]} - 1; i >= 0; i--)); do
    eval "${restore[i]}" || echo "could not restore: ${restore[i]}"
  done
}
trap put_back EXIT

# 10,000 agents need 10,000 PTYs (Linux's default kernel.pty.max is 4096,
# and a non-initial devpts instance may use only max - reserve of them) and
# about 2 fds each in the daemon.
want_ptys=16384
pty_max=$(cat /proc/sys/kernel/pty/max)
if [ "$pty_max" -lt "$want_ptys" ]; then
  if sysctl -qw kernel.pty.max="$want_ptys" 2>/dev/null; then
    echo "raised kernel.pty.max from $pty_max to $want_ptys for this run (restored on exit)"
    restore+=("sysctl -qw kernel.pty.max=$pty_max; echo 'restored kernel.pty.max to $pty_max'")
  else
    echo "could not raise kernel.pty.max ($pty_max; needs root): the 10,000-agent run will fail"
  fi
fi
# About 2 fds per agent in the daemon: 10,000 agents need more than a
# common hard limit of 20,000; root may raise it.
want_fds=24000
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want_fds" ]; then
  ulimit -Hn "$want_fds" 2>/dev/null && echo "raised the hard RLIMIT_NOFILE to $want_fds for this run"
fi
ulimit -n "$(ulimit -Hn)"
# DAMON (a Linux VM's memory reclaim, kdamond) walks the reverse map of
# every page it samples. With 10,000 processes mapping the same libc a
# walk takes milliseconds, most likely holding that file's mapping lock,
# which every exiting process needs: with it on, exits reached even the C
# floor up to 20 ms late (docs/PERFORMANCE.md). FreeBSD has no DAMON.
# Paused for the run unless BENCH_KEEP_DAMON=1, and said either way.
for state in /sys/kernel/mm/damon/admin/kdamonds/*/state; do
  [ -e "$state" ] && [ "$(cat "$state")" = on ] || continue
  if [ "${BENCH_KEEP_DAMON:-0}" = 1 ]; then
    echo "DAMON is on ($state) and kept on for this run: exit notices at scale include its lock holds"
  elif echo off >"$state" 2>/dev/null; then
    echo "paused DAMON ($state) for this run (restored on exit)"
    restore+=("echo on >'$state'; echo 'restored DAMON ($state)'")
  else
    echo "DAMON is on ($state) and could not be paused (needs root): exit notices at scale include its lock holds"
  fi
done
echo "RLIMIT_NOFILE: $(ulimit -n) (soft raised to the hard limit)"
# Each agent gets a session log: the daemons' state goes on a fresh,
# journaled ext4 (a loop mount, like a server's disk). This VM's root ext4
# has no journal, and there ext4 skips inodes freed in the last minutes,
# reading inode tables to find them: after one run had deleted its 15,000
# logs, creating a file took 0.28 ms instead of 0.027, and the log writer
# used three times the loop's CPU while agents were spawned. Skipped when
# TMPDIR is set or without root.
if [ -z "${TMPDIR:-}" ] && [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; then
  fsdir=$(mktemp -d /tmp/colibri-bench-fs.XXXXXX)
  if truncate -s 4G "$fsdir.img" && mkfs.ext4 -q -F -O has_journal "$fsdir.img" && mount -o loop "$fsdir.img" "$fsdir"; then
    export TMPDIR=$fsdir
    echo "state on a fresh journaled ext4 at $fsdir (removed on exit)"
    restore+=("{ umount '$fsdir' || umount -l '$fsdir'; } && rm -f '$fsdir.img' && rmdir '$fsdir' && echo 'removed $fsdir'")
  else
    rm -f "$fsdir.img"
    rmdir "$fsdir"
    echo "could not mount a fresh ext4: state in the default temporary directory"
  fi
fi
echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/e2e.py --colibrid target/release/colibrid --bin "$out" "$@"
