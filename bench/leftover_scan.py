#!/usr/bin/env python3
"""What finding an ended agent's leftovers costs the loop: the figure in
docs/RELIABILITY.md H10.

Starts `colibrid` on a fresh socket and state dir, spawns N agents that
sleep and one that exits at once, then times `kill-agent` on the ended
pane (answered `not_running`: the scan of colibrid's children for
processes it left finds none) and `remove-agent` (the same scan, then the
removal), each a round trip on one connection. Linux only; N over about
4,000 needs `kernel.pty.max` raised.

Usage: bench/leftover_scan.py [--agents N] [--rounds R] COLIBRID
"""
import argparse
import json
import shutil
import statistics
import time

from ab_stream import connect, start_daemon


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("colibrid")
    args = ap.parse_args()
    p, d, sock = start_daemon(args.colibrid, "colibri-leftovers-")
    try:
        c, cf = connect(sock)

        def req(o):
            c.sendall((json.dumps(o) + "\n").encode())
            return json.loads(cf.readline())

        for _ in range(args.agents):
            req({"cmd": "spawn-agent", "argv": ["/bin/sleep", "600"]})
        ended = req({"cmd": "spawn-agent", "argv": ["/bin/sh", "-c", "exit 0"]})["data"]["agent_id"]
        while req({"cmd": "status"})["data"]["running"] > args.agents:
            time.sleep(0.05)
        kills = []
        for _ in range(args.rounds):
            t0 = time.monotonic()
            r = req({"cmd": "kill-agent", "agent_id": ended})
            kills.append((time.monotonic() - t0) * 1000)
            if r.get("code") != "not_running":
                raise RuntimeError(f"unexpected reply: {r}")
        t0 = time.monotonic()
        r = req({"cmd": "remove-agent", "agent_id": ended})
        removed = (time.monotonic() - t0) * 1000
        if not r["ok"]:
            raise RuntimeError(f"remove failed: {r}")
        print(f"{args.agents} agents: kill-agent on the ended pane p50 {statistics.median(kills):.2f} ms, "
              f"max {max(kills):.2f} ms ({args.rounds} rounds); remove-agent {removed:.2f} ms")
    finally:
        p.terminate()
        p.wait(timeout=120)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
