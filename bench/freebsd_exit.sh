#!/bin/sh
#
# freebsd_exit.sh: the exit notice end to end on FreeBSD, colibrid next to
# the kqueue floor (floor_kqueue.c) in the same machine and the same run,
# as bench/e2e.sh measures it on Linux: from a stamp the agent takes just
# before _exit to the moment a separate watch client process reads the
# event. Plain sh and awk, for the FreeBSD test VM (no Python there);
# `scripts/freebsd-vm-test.sh bench` builds everything and runs it.
#
# Usage: sh bench/freebsd_exit.sh BINDIR COLIBRID COLIBRI [EXITS=100]
#   BINDIR holds stamp_exit, watch_client and floor_kqueue built for FreeBSD.
# Prints one line per side (p50, p99, mean in ms) and the ratios; under
# emulation only the ratios mean anything.

set -eu

bindir=$1
colibrid=$2
colibri=$3
exits=${4:-100}
tmp=$(mktemp -d /tmp/exitbench.XXXXXX)
pids=""
cleanup() {
	for p in $pids; do
		kill "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

wait_file() {
	tries=0
	until [ -e "$1" ]; do
		tries=$((tries + 1))
		[ "$tries" -lt 600 ] || { echo "freebsd_exit: $1 never appeared" >&2; exit 1; }
		sleep 0.05
	done
}

# Lines in FILE matching PATTERN, waiting up to a minute for COUNT of them.
wait_lines() {
	tries=0
	while [ "$(grep -c "$2" "$1" 2>/dev/null || true)" -lt "$3" ]; do
		tries=$((tries + 1))
		[ "$tries" -lt 1200 ] || { echo "freebsd_exit: $3 lines of $2 never came in $1" >&2; exit 1; }
		sleep 0.05
	done
}

# Latencies in ms: receipts "KEY NS" (after the "ready" line) joined with
# stamps "KEY NS".
latencies() {
	awk 'NR == FNR { stamp[$1] = $2; next }
	     ($1 in stamp) { printf "%.4f\n", ($2 - stamp[$1]) / 1e6 }' "$1" "$2"
}

# p50 p99 mean of the numbers on stdin (an insertion sort: awk has none).
summary() {
	awk '{ v[n++] = $1; s += $1 }
	     END {
		for (i = 1; i < n; i++) { x = v[i]; j = i - 1
			while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j-- }
			v[j + 1] = x }
		p50 = v[int((n - 1) * 0.50)]; p99 = v[int((n - 1) * 0.99)]
		printf "%d %.3f %.3f %.3f\n", n, p50, p99, s / n }'
}

# The floor: one C loop, kqueue, no logging.
"$bindir/floor_kqueue" "$tmp/floor.sock" "$bindir/stamp_exit" "$tmp/floor.stamps" "$exits" &
floor=$!
pids="$pids $floor"
wait_file "$tmp/floor.sock"
"$bindir/watch_client" "$tmp/floor.sock" >"$tmp/floor.recv" &
pids="$pids $!"
wait "$floor"
wait_lines "$tmp/floor.recv" '^[0-9]' "$exits"
floor_row=$(latencies "$tmp/floor.stamps" "$tmp/floor.recv" | summary)

# colibrid, as an operator runs it (logs on disk, no syslog), with one
# agent after the other.
"$colibrid" --socket "$tmp/c.sock" --state-dir "$tmp/state" --no-syslog 2>"$tmp/colibrid.err" &
pids="$pids $!"
wait_file "$tmp/c.sock"
"$bindir/watch_client" "$tmp/c.sock" >"$tmp/c.recv" &
pids="$pids $!"
wait_lines "$tmp/c.recv" '^ready' 1
i=0
while [ "$i" -lt "$exits" ]; do
	i=$((i + 1))
	"$colibri" --socket "$tmp/c.sock" spawn -- "$bindir/stamp_exit" "$tmp/c.stamps" 20000 0 pane >/dev/null
	wait_lines "$tmp/c.recv" '^[0-9a-f]\{8\}-' "$i"
done
colibri_row=$(latencies "$tmp/c.stamps" "$tmp/c.recv" | summary)

echo "$floor_row" | awk '{ printf "floor_kqueue: %d exits, p50 %.3f ms, p99 %.3f ms, mean %.3f ms\n", $1, $2, $3, $4 }'
echo "$colibri_row" | awk '{ printf "colibrid:     %d exits, p50 %.3f ms, p99 %.3f ms, mean %.3f ms\n", $1, $2, $3, $4 }'
printf '%s %s\n' "$floor_row" "$colibri_row" |
	awk '{ printf "ratio colibrid/floor: p50 %.2fx, p99 %.2fx, mean %.2fx\n", $6 / $2, $7 / $3, $8 / $4 }'
