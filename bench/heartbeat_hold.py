#!/usr/bin/env python3
"""How long colibrid's heartbeat holds the loop with many sessions: the
paired figures of the sixth pass (in git history of docs/PERFORMANCE.md).

Each binary in turn starts on a fresh socket and state dir with a short
heartbeat, spawns N idle agents (`bench/idle_agent`, one session each) and
one agent that prints a Pi line every 100 ms (so a session changes between
any two heartbeats and the index is due at each), then times `tasks`
round trips back to back for the given seconds (an empty task list: a
reply that costs the loop next to nothing). A heartbeat that holds the
loop shows as the slowest round trips. Linux only; N over about 4,000 needs
`kernel.pty.max` raised (bench/e2e.sh does it for its own runs). Build the
C programs first (bench/e2e.sh does).

Usage: bench/heartbeat_hold.py [--agents N] [--seconds S] [--bin DIR] COLIBRID...
"""
import argparse
import json
import os
import shutil
import subprocess
import threading
import time

from ab_stream import connect, start_daemon

TICKER = "while :; do echo '{\"type\":\"turn_start\"}'; sleep 0.1; done"


def spawn_all(sock, argvs):
    """Pipelines the spawn requests from a thread while reading every reply
    (a client that sends without reading is cut off)."""
    s, f = connect(sock)

    def send():
        for argv in argvs:
            s.sendall((json.dumps({"cmd": "spawn-agent", "argv": argv, "runtime": "pi"}) + "\n").encode())

    t = threading.Thread(target=send)
    t.start()
    for _ in argvs:
        r = json.loads(f.readline())
        if not r.get("ok"):
            raise RuntimeError(f"spawn failed: {r}")
    t.join()
    s.close()


def pct(xs, q):
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def run(colibrid, bindir, agents, seconds):
    p, d, sock = start_daemon(colibrid, "colibri-hb-", ["--heartbeat", "1s"])
    try:
        spawn_all(sock, [[os.path.join(bindir, "idle_agent")]] * agents + [["/bin/sh", "-c", TICKER]])
        time.sleep(3)
        c, cf = connect(sock)
        lat = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic_ns()
            c.sendall(b'{"cmd":"tasks"}\n')
            cf.readline()
            lat.append((time.monotonic_ns() - t0) / 1e6)
        lat.sort()
        return lat
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        subprocess.run(["pkill", "-KILL", "-f", os.path.join(bindir, "idle_agent")], check=False)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=4000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--bin", default="target/bench-c")
    ap.add_argument("colibrid", nargs="+")
    args = ap.parse_args()
    for b in args.colibrid:
        lat = run(b, args.bin, args.agents, args.seconds)
        slow = sum(1 for x in lat if x > 2)
        print(f"{b}: {len(lat)} round trips, p50 {pct(lat, .5):.3f} ms, p99.9 {pct(lat, .999):.3f} ms, "
              f"max {lat[-1]:.3f} ms, {slow} over 2 ms", flush=True)


if __name__ == "__main__":
    main()
