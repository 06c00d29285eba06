#!/usr/bin/env bash
# End-to-end benchmarks: colibrid measured the way supervisors are measured,
# next to C floors run in the same run (see bench/e2e.py and
# docs/PERFORMANCE.md). Builds the C programs with cc -O2 and colibrid
# --release, raises kernel.pty.max and RLIMIT_NOFILE for the 10,000-agent run
# (kernel.pty.max is restored on exit), and prints one table.
# Usage: bench/e2e.sh [--quick] [--only exit|scale|stream] [--scale 100,1000]
# Linux only (pidfds, /proc). The full run takes about 10 minutes, --quick
# under 2.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_BIN:-target/bench-c}
mkdir -p "$out"
for prog in stamp_exit streamer idle_agent watch_client floor_pidfd floor_spawn floor_read floor_log; do
  cc -O2 -Wall -Wextra -o "$out/$prog" "bench/$prog.c"
done
cargo build --release --quiet --bin colibrid

# 10,000 agents need 10,000 PTYs (Linux's default kernel.pty.max is 4096,
# and a non-initial devpts instance may use only max - reserve of them) and
# about 2 fds each in the daemon.
want_ptys=16384
pty_max=$(cat /proc/sys/kernel/pty/max)
if [ "$pty_max" -lt "$want_ptys" ]; then
  if sysctl -qw kernel.pty.max="$want_ptys" 2>/dev/null; then
    echo "raised kernel.pty.max from $pty_max to $want_ptys for this run (restored on exit)"
    trap 'sysctl -qw kernel.pty.max='"$pty_max"'; echo "restored kernel.pty.max to '"$pty_max"'"' EXIT
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
echo "RLIMIT_NOFILE: $(ulimit -n) (soft raised to the hard limit)"
echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/e2e.py --colibrid target/release/colibrid --bin "$out" "$@"
