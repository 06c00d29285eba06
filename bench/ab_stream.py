#!/usr/bin/env python3
"""Two or more colibrid binaries, one PTY stream each, taking turns: the
paired figures of the third pass (in git history of docs/PERFORMANCE.md).

Each round starts each binary on a fresh socket and state dir, spawns one
`bench/streamer LINES` (42-byte Pi lines) with `runtime: pi`, and times the
spawn request to the `exited` event on a watch connection; the daemon's CPU
(utime + stime of all its threads, /proc/PID/stat) over the same span.
Linux only. Build the C programs first (bench/e2e.sh does).

With --instructions, each binary runs under valgrind's callgrind instead
(Debian package `valgrind`), once with LINES and once with 1,000 lines, and
the figure is the daemon's user-space instructions per line (all threads,
the difference of the two runs over the difference of their lines): within
about 1.5 % from run to run of a binary, where time and CPU on a shared
host moved by 20-40 %. The kernel's work (PTY reads, log writes) is not counted.

Usage: bench/ab_stream.py [--rounds N] [--bin DIR] [--instructions] LINES COLIBRID...
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s, s.makefile("rb")


def start_daemon(colibrid, prefix, extra=(), wrap=()):
    """Starts `colibrid` (under the `wrap` command, if any) on a fresh
    socket and state dir (in a new temp dir) and waits for its socket;
    returns (process, dir, socket path)."""
    d = tempfile.mkdtemp(prefix=prefix)
    sock = os.path.join(d, "sock")
    p = subprocess.Popen([*wrap, colibrid, "--socket", sock, "--state-dir", os.path.join(d, "state"), "--no-syslog",
                          *extra], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(f"{colibrid} did not start")
        time.sleep(0.01)
    return p, d, sock


def run(colibrid, streamer, lines, wrap=()):
    p, d, sock = start_daemon(colibrid, "colibri-ab-", wrap=wrap)
    try:
        w, wf = connect(sock)
        w.sendall(b'{"cmd":"watch"}\n')
        wf.readline()
        c, cf = connect(sock)
        c0, t0 = cpu_ms(p.pid), time.monotonic()
        c.sendall((json.dumps({"cmd": "spawn-agent", "argv": [streamer, str(lines)], "runtime": "pi"}) + "\n").encode())
        agent = json.loads(cf.readline())["data"]["agent_id"]
        while True:
            ev = json.loads(wf.readline())
            if ev.get("event") == "exited" and ev.get("pane") == agent:
                break
        secs, cpu = time.monotonic() - t0, cpu_ms(p.pid) - c0
        return lines * 42 / secs / 1048576, cpu
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def instructions(colibrid, streamer, lines):
    """The daemon's instructions per line under callgrind (see above)."""
    totals = {}
    with tempfile.TemporaryDirectory(prefix="colibri-cg-") as tmp:
        for n in (1000, lines):
            out = os.path.join(tmp, f"callgrind.{n}")
            run(colibrid, streamer, n, wrap=("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"))
            with open(out) as f:
                totals[n] = next(int(l.split()[1]) for l in f if l.startswith("totals:"))
    return (totals[lines] - totals[1000]) / (lines - 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="target/bench-c")
    ap.add_argument("--instructions", action="store_true", help="instructions per line under callgrind")
    ap.add_argument("lines", type=int)
    ap.add_argument("colibrid", nargs="+")
    args = ap.parse_args()
    streamer = os.path.abspath(os.path.join(args.bin, "streamer"))
    if args.instructions and args.lines <= 1000:
        ap.error("--instructions needs more than 1,000 lines (a 1,000-line run is the baseline)")
    if args.instructions:
        for b in args.colibrid:
            print(f"{b}: {instructions(b, streamer, args.lines):.0f} instructions a line", flush=True)
        return
    results = {b: [] for b in args.colibrid}
    for _ in range(args.rounds):
        for b in args.colibrid:
            results[b].append(run(b, streamer, args.lines))
    for b, rs in results.items():
        print(f"{b}: MiB/s " + " ".join(f"{m:.1f}" for m, _ in rs)
              + "  daemon CPU ms " + " ".join(f"{c:.0f}" for _, c in rs))


if __name__ == "__main__":
    main()
