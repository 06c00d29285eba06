#!/usr/bin/env python3
"""A watcher that reads, while flooding agents are killed all at once:
the check of docs/PERFORMANCE.md ("End to end, next to C floors") that
the per-watcher event limit does not drop a watcher that keeps reading.

Starts `colibrid` on a fresh socket and state dir, connects one watcher
that reads as fast as Python can, spawns N agents whose every line flips
the pane's state (`bench/streamer` is not needed: a Python loop writes
the lines), lets them flood for a while, kills them all back to back, and
reports how many events the watcher read and whether it was dropped.

Usage: bench/kill_flood_watch.py [--agents N] [--flood S] COLIBRID
"""
import argparse
import json
import shutil
import sys
import threading
import time

from ab_stream import connect, start_daemon

FLOOD = ("import os,time\n"
         "os.write(1,b'{\"type\":\"response\"}\\n')\n"
         "a=b'{\"type\":\"agent_start\"}\\n{\"type\":\"agent_settled\"}\\n'*500\n"
         "while True: os.write(1,a)\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--flood", type=float, default=2.0)
    ap.add_argument("colibrid")
    args = ap.parse_args()
    p, d, sock = start_daemon(args.colibrid, "colibri-killflood-")
    try:
        w, wf = connect(sock)
        w.sendall(b'{"cmd":"watch"}\n')
        wf.readline()
        read = [0]
        dropped = []

        def reader():
            for line in wf:
                read[0] += 1
                if line.startswith(b'{"ok":false'):
                    dropped.append(line[:200])

        threading.Thread(target=reader, daemon=True).start()
        c, cf = connect(sock)

        def req(o):
            c.sendall((json.dumps(o) + "\n").encode())
            return json.loads(cf.readline())

        ids = [req({"cmd": "spawn-agent", "argv": [sys.executable, "-c", FLOOD], "runtime": "pi"})["data"]["agent_id"]
               for _ in range(args.agents)]
        time.sleep(args.flood)
        for i in ids:
            req({"cmd": "kill-agent", "agent_id": i})
        time.sleep(2)
        watchers = req({"cmd": "status"})["data"]["watchers"]
        print(f"{args.agents} flooding agents killed at once: the watcher read {read[0]:,} events; "
              f"dropped: {'yes ' + str(dropped[0]) if dropped else 'no'}; watchers still connected: {watchers}")
    finally:
        p.terminate()
        p.wait(timeout=120)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
