#!/usr/bin/env bash
#
# freebsd-vm-test.sh: the FreeBSD lane. Cross-builds colibri and its test
# binaries for x86_64-unknown-freebsd, boots the shared FreeBSD VM (a 15.1
# kernel with a 13.2 userland under QEMU's software emulation) with them, runs
# inside it the library's unit tests, the integration tests, the CLI, fixture
# and packaging tests and scripts/freebsd-smoke.sh, and prints a summary.
#
# Usage: scripts/freebsd-vm-test.sh [SUITE...]
#   SUITE is one of: lib it cli fixtures freebsd_dist governance_defaults
#   smoke (default: all of them), or bench: the exit notice end to end,
#   release colibrid next to a kqueue C floor (bench/freebsd_exit.sh; not in
#   the default set). FREEBSD_VM_TEST_FILTER passes a name filter to every
#   test binary (e.g. "platform::" or "lifecycle::").
# Environment:
#   FREEBSD_VM_DIR    the VM's folder (default: ../shared/freebsd-vm beside
#                     the repository)
#   COLIBRI_TEST_SLOW the slow-machine factor every wait in the tests is
#                     multiplied by inside the VM (default 8)
#   FREEBSD_VM_TIMEOUT seconds the whole VM run may take (default 2400)
#   FREEBSD_VM_TEST_THREADS test threads per binary (default 4)
# Exit status: 0 if every suite passed, 1 if one failed, 2 on a host error.
#
# What runs only on Linux (pure logic, property tests, the docs' tidy
# checks) is not repeated here: the lane runs what touches the kernel.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
vm=${FREEBSD_VM_DIR:-$repo/../shared/freebsd-vm}
vm=$(cd "$vm" 2>/dev/null && pwd) || {
    echo "freebsd-vm-test: no FreeBSD VM at ${FREEBSD_VM_DIR:-$repo/../shared/freebsd-vm}" >&2
    exit 2
}
triple=x86_64-unknown-freebsd
suites=("$@")
[[ ${#suites[@]} -gt 0 ]] || suites=(lib it cli fixtures freebsd_dist governance_defaults smoke)

for tool in cargo clang-14 ld.lld-14 qemu-system-x86_64 zstd python3; do
    command -v "$tool" >/dev/null || {
        echo "freebsd-vm-test: $tool is missing (.ci/run installs it)" >&2
        exit 2
    }
done

# The lane's own target dir and profile: no debug info (the payload stays
# small) and opt-level 1 (emulation is 10-50x slower than native; unoptimised
# code would spend the lane's time in the tests' own loops). Overflow checks
# and debug assertions stay on.
export CARGO_TARGET_DIR=$repo/target/freebsd-vm
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_DEV_OPT_LEVEL=1
export CARGO_TARGET_X86_64_UNKNOWN_FREEBSD_LINKER=$vm/cc-freebsd
export CC_x86_64_unknown_freebsd=$vm/cc-freebsd

work=$(mktemp -d "${TMPDIR:-/tmp}/colibri-fbsd.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/payload/bin"

echo "=== building the FreeBSD test binaries"
start=$SECONDS
(cd "$repo" && cargo test --no-run --locked --target "$triple" --message-format=json) \
    >"$work/artifacts.json"
echo "built in $((SECONDS - start)) s"

# test name -> executable, from cargo's own report (hashes change per build).
python3 - "$work/artifacts.json" "$work/payload/bin" <<'PY'
import json, os, shutil, sys
src, dest = sys.argv[1], sys.argv[2]
for line in open(src):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if not m["profile"]["test"]:
        continue
    name = "lib" if "lib" in t["kind"] else t["name"]
    if "bin" in t["kind"]:
        name = "bin-" + t["name"]
    shutil.copy2(m["executable"], os.path.join(dest, name))
PY

# The VM's userland lacks a few base tools the tests' agents use.
mkdir -p "$work/payload/tools"
for tool in "$repo"/tests/guest/*.c; do
    "$vm/cc-freebsd" -O2 -Wall -Wextra -Werror -o "$work/payload/tools/$(basename "$tool" .c)" "$tool"
done

# The benchmark: release binaries and the C programs it times against.
for suite in "${suites[@]}"; do
    [[ $suite == bench ]] || continue
    echo "=== building the FreeBSD benchmark (release)"
    (cd "$repo" && cargo build --release --locked --target "$triple" --bins)
    mkdir -p "$work/payload/benchbin"
    cp "$CARGO_TARGET_DIR/$triple/release/colibrid" "$CARGO_TARGET_DIR/$triple/release/colibri" \
        "$work/payload/benchbin/"
    for prog in floor_kqueue stamp_exit watch_client; do
        "$vm/cc-freebsd" -O2 -Wall -Wextra -Werror -o "$work/payload/benchbin/$prog" "$repo/bench/$prog.c"
    done
done

bin_dir=$CARGO_TARGET_DIR/$triple/debug
# The tests find colibrid, colibri and their fixtures by the absolute paths
# compiled into them: the guest gets the same paths.
mirror="$bin_dir/colibrid $bin_dir/colibri"
for entry in "$repo"/*; do
    case $(basename "$entry") in
        target | fuzz) ;;
        *) mirror="$mirror $entry" ;;
    esac
done

slow=${COLIBRI_TEST_SLOW:-8}
threads=${FREEBSD_VM_TEST_THREADS:-2}
filter=${FREEBSD_VM_TEST_FILTER:-}

# Tests that cannot measure in this guest, each with the reason (printed
# with the summary; the test binaries capture a test's own "SKIPPED" line).
no_tmux="the guest has no tmux, which drives colibri's terminal views; they run under tmux on Linux"
skips=(
    "web::web_board_in_a_headless_browser|the guest has no browser; the board runs in Debian's chromium on Linux"
)
for name in attach_events_renders_json_lines_readably \
    attach_shows_output_forwards_input_and_detach_leaves_the_agent_running \
    enter_in_top_attaches_and_detaching_comes_back_to_top \
    the_attached_window_size_reaches_the_agent top_ended_by_a_signal_puts_the_terminal_back \
    top_ends_when_its_terminal_hangs_up top_reconnects_after_a_daemon_restart \
    top_shows_state_changes_and_a_key_pauses_the_agent; do
    skips+=("views::$name|$no_tmux")
done
skip_args=""
for entry in "${skips[@]}"; do
    skip_args="$skip_args --skip ${entry%%|*}"
done
cat >"$work/payload/run.sh" <<EOF
# Runs inside the FreeBSD guest as root (see ../shared/freebsd-vm/README.md).
export COLIBRI_TEST_SLOW=$slow RUST_BACKTRACE=1 HOME=/root USER=root
export PATH=/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin
# The root image has about 200 MB free; the tests' state dirs go to memory.
mount -t tmpfs -o size=1g tmpfs /tmp || echo "note: /tmp stays on the root disk"
chmod 1777 /tmp
for tool in /payload/tools/*; do
    command -v "\$(basename "\$tool")" >/dev/null || install -m 755 "\$tool" /usr/local/bin/
done
echo "guest: \$(uname -sr), kern.osreldate \$(sysctl -n kern.osreldate), hw.ncpu \$(sysctl -n hw.ncpu), userland \$(uname -U)"
cd $repo

# Runs a test binary; a test that fails is run again alone, and passes the
# lane if it passes then (named as flaky in the summary): under emulation
# a machine-wide stall can outlast FreeBSD's one-second PTY window or a
# test's wait. A test that fails alone too fails the lane.
run_tests() {
    bin=\$1
    shift
    { "/payload/bin/\$bin" "\$@"; echo \$? >/tmp/lane-rc; } 2>&1 | tee /tmp/lane-out
    rc=\$(cat /tmp/lane-rc)
    [ "\$rc" -ne 0 ] || return 0
    failed=\$(sed -n 's/^test \(.*\) \.\.\. FAILED\$/\1/p' /tmp/lane-out | awk '!seen[\$0]++')
    [ -n "\$failed" ] || return "\$rc"
    rc=0
    for t in \$failed; do
        if "/payload/bin/\$bin" --exact "\$t" --test-threads=1 >/tmp/lane-retry 2>&1; then
            echo "LANE-FLAKY \$bin \$t: failed, then passed alone"
        else
            cat /tmp/lane-retry
            echo "LANE-FAILED \$bin \$t"
            rc=1
        fi
    done
    return "\$rc"
}

status=0
for suite in ${suites[*]}; do
    start=\$(date +%s)
    if [ "\$suite" = smoke ]; then
        COLIBRID=$bin_dir/colibrid COLIBRI=$bin_dir/colibri sh scripts/freebsd-smoke.sh
        rc=\$?
    elif [ "\$suite" = bench ]; then
        sh bench/freebsd_exit.sh /payload/benchbin /payload/benchbin/colibrid /payload/benchbin/colibri 100
        rc=\$?
    elif [ "\$suite" = lib ] && [ -z "$filter" ]; then
        # The PTY tests by themselves: FreeBSD discards an exiting child's
        # unread output after one second, and under emulation the other
        # unit tests' load can keep a test's reader off the CPU that long.
        run_tests lib --test-threads=$threads --skip platform::
        rc=\$?
        run_tests lib --test-threads=$threads platform:: || rc=1
    else
        run_tests "\$suite" --test-threads=$threads$skip_args $filter
        rc=\$?
    fi
    echo "LANE-SUITE \$suite rc=\$rc seconds=\$((\$(date +%s) - start))"
    [ \$rc -eq 0 ] || status=1
done
exit \$status
EOF

echo "=== booting FreeBSD (suites: ${suites[*]})"
set +e
FREEBSD_VM_MIRROR=$mirror "$vm/run-vm.sh" "$work/payload" "${FREEBSD_VM_TIMEOUT:-2400}" \
    | tee "$work/console.log"
rc=${PIPESTATUS[0]}
set -e

echo
echo "=== FreeBSD lane summary"
tr -d '\r' <"$work/console.log" |
    grep -E '^(guest: |LANE-SUITE |LANE-FLAKY |LANE-FAILED |test result: |[0-9]+ passed, [0-9]+ failed|floor_kqueue: |colibrid: +[0-9]|ratio )' || true
tr -d '\r' <"$work/console.log" | grep -E '^(FAIL |test .* \.\.\. FAILED$)' | sort -u || true
echo "${#skips[@]} tests skipped in the guest:"
for entry in "${skips[@]}"; do
    echo "  ${entry%%|*}: ${entry#*|}"
done
case $rc in
    0) echo "FreeBSD lane: every suite passed" ;;
    124) echo "FreeBSD lane: the VM timed out" ;;
    *) echo "FreeBSD lane: failed (status $rc)" ;;
esac
[[ $rc == 0 ]] || exit 1
