#!/usr/bin/env python3
"""End-to-end benchmarks of colibrid, measured the way supervisors are
measured, each next to a C floor measured the same way in the same run.

Run it through bench/e2e.sh, which builds the C programs and colibrid and
raises the limits 10,000 PTYs need. Every latency is between two
processes other than the daemon: a child (bench/stamp_exit) reads
CLOCK_MONOTONIC just before _exit, and a watch client in its own process
(bench/watch_client) reads it when the `exited` event arrives. The daemon
runs with syslog alerts on, sent to a datagram socket this script owns.
Standard library only.
"""

import argparse
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round((len(s) - 1) * p))]


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def loop_cpu_ms(pid):
    """The CPU time in ms of a daemon's event loop (its main thread), from
    /proc/PID/task/PID/schedstat; None where the kernel does not have it.
    The rest of the process's time is its log writer threads'."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


def cpu_ms(pid):
    """A process's CPU time in ms, all its threads (the event loop and the
    log writers): the sum of /proc/PID/task/*/schedstat (ns, the time on
    CPU) where the kernel has it, else utime + stime from /proc/PID/stat
    (clock ticks, 10 ms: too coarse for 100 spawns). /proc/PID/schedstat
    alone is the main thread's."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e6
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) * TICK_MS


def comm_is(pid, name):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == name[:15]
    except OSError:
        return False


class SyslogSink:
    """A datagram socket standing in for syslogd; counts what arrives."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.count = 0
        self.by_kind = {}
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        while True:
            try:
                msg = self.sock.recv(65536)
            except OSError:
                return
            self.count += 1
            # RFC 5424: <PRI>1 TIME HOST APP PID MSGID ...
            parts = msg.split(b" ", 6)
            kind = parts[5].decode(errors="replace") if len(parts) > 5 else "?"
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


class Conn:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.r = self.sock.makefile("rb", buffering=1 << 20)

    def send(self, obj):
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def line(self):
        raw = self.r.readline()
        if not raw:
            raise RuntimeError("daemon closed the connection")
        return raw

    def req(self, obj):
        self.send(obj)
        reply = json.loads(self.line())
        if not reply.get("ok"):
            raise RuntimeError(f"{obj} -> {reply}")
        return reply["data"]

    def close(self):
        self.sock.close()


class Daemon:
    def __init__(self, bench):
        self.dir = tempfile.mkdtemp(prefix="colibri-e2e-", dir=bench.tmp)
        self.socket = os.path.join(self.dir, "c.sock")
        self.sink = SyslogSink(os.path.join(self.dir, "log"))
        env = dict(os.environ, COLIBRI_LOG="warn")
        self.bench = bench
        self.stderr_path = os.path.join(self.dir, "colibrid.stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [bench.colibrid, "--socket", self.socket, "--state-dir", os.path.join(self.dir, "state")]
                + (["--no-syslog"] if bench.args.no_syslog else ["--syslog-socket", self.sink.path]),
                env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 30
        while True:
            try:
                Conn(self.socket).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("colibrid did not start")
                time.sleep(0.01)
        self.pid = self.proc.pid

    def conn(self):
        return Conn(self.socket)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sink.sock.close()
        self.bench.daemon_warnings(self.stderr_path)
        shutil.rmtree(self.dir, ignore_errors=True)


class WatchClient:
    """bench/watch_client in its own process; yields (pane, ns) per exit."""

    def __init__(self, bench, socket_path, request=None):
        argv = [bench.bin("watch_client"), socket_path] + ([request] if request else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        self.buf = b""
        first = self.next_line(30)
        if first != "ready":
            raise RuntimeError(f"watch client: {first}")

    def next_line(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError("watch client: no event in time")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("watch client ended (dropped, or the daemon closed it)")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def wait_exit(self, pane, timeout=30):
        while True:
            line = self.next_line(timeout)
            if line.startswith("dropped"):
                raise RuntimeError(f"watcher dropped: {line}")
            got, ns = line.split()
            if got == pane:
                return int(ns)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def wait_for_listener(proc, path, seconds, what):
    """Waits until `path` exists (the C floors bind a temporary name and
    rename it once listening); fails at once if `proc` died first."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}) before it listened")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen")
        time.sleep(0.005)


def end_process(proc, grace):
    """Waits up to `grace` seconds for `proc` to end, then kills it: a C
    floor is never left running (with its agents) past a failure."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_stamps(path):
    with open(path) as f:
        return {int(p): int(ns) for p, ns in (line.split() for line in f if line.strip())}


class Bench:
    def __init__(self, args):
        self.args = args
        self.bindir = args.bin
        self.colibrid = args.colibrid
        self.tmp = tempfile.mkdtemp(prefix="colibri-e2e-")
        self.rows = []  # (what, measured, target, floor)
        self.notes = []
        self.current = ""  # the scenario running, for notes

    def daemon_warnings(self, path):
        """The daemon's warnings, each kind once with a count, as notes."""
        try:
            with open(path, errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            return
        counts = {}
        for line in lines:
            counts[line] = counts.get(line, 0) + 1
        for line, n in counts.items():
            times = f" ({n}x)" if n > 1 else ""
            self.notes.append(f"{self.current}: colibrid said{times}: {line}")

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def row(self, what, measured, target="", floor=""):
        self.rows.append((what, measured, target, floor))
        print(f"  {what}: {measured}" + (f"  [floor {floor}]" if floor else ""), flush=True)

    # -- exit notice ------------------------------------------------------

    def start_streamers(self, conn, n):
        ids = []
        for _ in range(n):
            d = conn.req({"cmd": "spawn-agent", "argv": [self.bin("streamer")], "runtime": "pi",
                          "session_id": "streamers"})
            ids.append(d["agent_id"])
        return ids

    def colibri_exits(self, d, n, watch, conn, code=0):
        """n agents in a row, each exiting 20 ms after it starts; the
        latency from its stamp to the watch client's receipt."""
        stamps = os.path.join(d.dir, f"stamps-{time.monotonic_ns()}")
        got = {}
        for _ in range(n):
            data = conn.req({"cmd": "spawn-agent", "argv": [self.bin("stamp_exit"), stamps, "20000", str(code)],
                             "session_id": "exits"})
            got[data["pid"]] = watch.wait_exit(data["agent_id"])
        stamped = read_stamps(stamps)
        return [(got[p] - stamped[p]) / 1e6 for p in got if p in stamped]

    def colibri_exit_notice(self, n, streamers):
        self.current = f"exit notice, {streamers} streaming"
        d = Daemon(self)
        try:
            conn = d.conn()
            ids = []
            if streamers:
                ids = self.start_streamers(conn, streamers)
                time.sleep(0.5)
            watch = WatchClient(self, d.socket)
            alerts0 = d.sink.count
            lat = self.colibri_exits(d, n, watch, conn)
            watch.stop()
            # The default output budget (1 GiB a pane an hour) pauses an
            # agent that prints on and on: a paused streamer would make
            # this row a quiet one.
            snap = conn.req({"cmd": "snapshot", "schema": "v2"})
            paused = [p["id"] for p in snap["panes"] if p["id"] in ids and p["paused"]]
            if paused:
                raise RuntimeError(f"{len(paused)} streamers were paused during the exits")
            # An alert leaves after its exit's frame, up to 50 ms later
            # while the writers are behind: the last ones get a second.
            deadline = time.monotonic() + 1
            while not self.args.no_syslog and d.sink.count - alerts0 < len(lat) and time.monotonic() < deadline:
                time.sleep(0.01)
            return lat, d.sink.count - alerts0
        finally:
            d.stop()

    def floor_exit_notice(self, n, streamers, idle=0):
        """The floor's exit notices; with `idle`, among that many idle
        agents the floor started (and holds) first."""
        sock = os.path.join(self.tmp, f"floor-{time.monotonic_ns()}.sock")
        stamps = sock + ".stamps"
        extra = [str(idle), self.bin("idle_agent")] if idle else []
        floor = subprocess.Popen([self.bin("floor_pidfd"), sock, self.bin("stamp_exit"), stamps, str(n),
                                  str(streamers), self.bin("streamer")] + extra, stderr=subprocess.PIPE)
        watch = None
        try:
            wait_for_listener(floor, sock, 10 + idle * 0.01, "floor_pidfd")
            watch = WatchClient(self, sock)
            got = {}
            for _ in range(n):
                line = watch.next_line(30)
                pane, ns = line.split()
                got[int(pane)] = int(ns)
            floor.wait(timeout=30 + idle * 0.005)
        finally:
            end_process(floor, 0)
            if watch:
                watch.stop()
        stamped = read_stamps(stamps)
        return [(got[p] - stamped[p]) / 1e6 for p in got if p in stamped]

    def exit_notice(self):
        n = self.args.exits
        print(f"exit notice end to end: {n} exits (child stamps before _exit -> watch client process stamps on receipt)",
              flush=True)
        # Floor and colibrid take turns, a quarter of the exits each time,
        # so a change in the host's load (other guests) falls on both.
        turns = 4
        for streamers, label in [(0, "quiet"), (10, "10 agents streaming")]:
            floor, lat, alerts = [], [], 0
            for _ in range(turns):
                floor += self.floor_exit_notice(n // turns, streamers)
                l, a = self.colibri_exit_notice(n // turns, streamers)
                lat += l
                alerts += a
            fl = f"p50 {pct(floor, .5):.3f} ms, p99 {pct(floor, .99):.3f} ms"
            target = ("p50 <= 1.5x floor, p99 <= 2 ms" if not streamers else "p50 <= 2 ms, p99 <= 10 ms")
            self.row(f"exit notice, {label}",
                     f"p50 {pct(lat, .5):.3f} ms, p99 {pct(lat, .99):.3f} ms, max {pct(lat, 1):.3f} ms "
                     f"({len(lat)} exits, {alerts} syslog alerts)", target, fl)

    # -- scale ------------------------------------------------------------

    def spawn_many(self, d, n):
        """n idle agents pipelined on one connection (a writer thread, so
        neither side waits on a full socket buffer); returns their pids."""
        conn = d.conn()
        req = json.dumps({"cmd": "spawn-agent", "argv": [self.bin("idle_agent")], "runtime": "pi"}).encode() + b"\n"

        def writer():
            for _ in range(n):
                conn.sock.sendall(req)

        t = threading.Thread(target=writer)
        t.start()
        pids = []
        for _ in range(n):
            reply = json.loads(conn.line())
            if not reply.get("ok"):
                raise RuntimeError(f"spawn {len(pids)}: {reply}")
            pids.append(reply["data"]["pid"])
        t.join()
        conn.close()
        return pids

    def snapshot_lat(self, d, cmd, rounds):
        """Round trips of one snapshot request on a connection of its own,
        each followed by one round trip of the same size to floor_send (the
        C floor: the same bytes moved with no work), so both see the host
        in the same state. Replies are read with recv_into into one
        preallocated buffer until the newline: a buffered readline cost
        the client about a third of the time measured (0.9 vs 1.4 ms for a
        0.6 MB reply), which is not the daemon's. Returns colibrid's
        latencies, the reply size, the loop's CPU per snapshot and the
        floor's latencies."""
        fsock = os.path.join(self.tmp, f"send-{time.monotonic_ns()}.sock")
        floor = subprocess.Popen([self.bin("floor_send"), fsock])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fconn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        buf = bytearray(64 << 20)
        view = memoryview(buf)
        req = json.dumps(cmd).encode() + b"\n"

        def round_trip(s, request):
            t0 = time.monotonic_ns()
            s.sendall(request)
            size = 0
            while size == 0 or buf[size - 1] != 10:
                got = s.recv_into(view[size:])
                if got == 0:
                    raise RuntimeError("the server closed the connection")
                size += got
            return (time.monotonic_ns() - t0) / 1e6, size

        lat, floor_lat, size = [], [], 0
        # The event loop's own time: what a snapshot holds the loop for.
        loop_cpu = lambda: loop_cpu_ms(d.pid) or cpu_ms(d.pid)  # noqa: E731
        cpu_spent = 0.0
        try:
            wait_for_listener(floor, fsock, 10, "floor_send")
            sock.connect(d.socket)
            fconn.connect(fsock)
            # The client's own garbage collector off while it times: with it
            # on, 55 collections ran during 200 v2 rounds at 9,800 panes (the
            # first reply, parsed whole, leaves many objects to trace), the
            # longest 14.3 ms, and they made the p99 of colibrid and of
            # floor_send alike (15.8 and 15.0 ms; off: 1.75 and 1.12 ms).
            # `--client-gc` leaves it on and counts its collections.
            collections = []
            if self.args.client_gc:
                gc.callbacks.append(lambda phase, _info: collections.append((phase, time.monotonic_ns())))
            else:
                gc.disable()
            for _ in range(rounds):
                cpu0 = loop_cpu()
                ms, size = round_trip(sock, req)
                cpu_spent += loop_cpu() - cpu0
                lat.append(ms)
                # Parsed in full once; after that the envelope's head is
                # enough: parsing a 6 MB reply allocates and frees about
                # 50 MB a round, and on a VM that hands freed memory back
                # to its host (free page reporting), the kernel's socket
                # buffers then land on pages the host must fault in again,
                # which slowed the next rounds (colibrid's and the floor's
                # alike) for a while.
                if len(lat) == 1:
                    ok = json.loads(bytes(view[:size])).get("ok")
                else:
                    ok = bytes(view[:10]) == b'{"ok":true'
                if not ok:
                    raise RuntimeError(f"{cmd} failed")
                floor_lat.append(round_trip(fconn, f"{size}\n".encode())[0])
            if self.args.client_gc:
                starts = [at for phase, at in collections if phase == "start"]
                stops = [at for phase, at in collections if phase == "stop"]
                longest = max((b - a for a, b in zip(starts, stops)), default=0) / 1e6
                print(f"    client gc during {len(lat)} {cmd.get('schema', 'v1')} rounds: "
                      f"{len(starts)} collections, the longest {longest:.1f} ms", flush=True)
        finally:
            gc.callbacks.clear()
            gc.enable()
            view.release()
            sock.close()
            fconn.close()
            # It ends at the EOF; one still in accept (a failed connect)
            # is killed.
            end_process(floor, 1)
        return lat, size, cpu_spent / rounds, floor_lat

    def scale_one(self, n, asked=None):
        """Scale figures at n agents; the issue's 10,000-agent targets apply
        when 10,000 were asked for, even if the fd limit allowed fewer."""
        big = (asked or n) >= 10000
        print(f"scale: {n} agents", flush=True)
        self.current = f"scale {n}"
        fl = subprocess.run([self.bin("floor_spawn"), str(n), self.bin("idle_agent")], capture_output=True,
                            text=True, timeout=300)
        floor = dict(kv.split("=") for kv in fl.stdout.split()[1:])
        d = Daemon(self)
        pids = []
        try:
            cpu0 = cpu_ms(d.pid)
            t0 = time.monotonic()
            pids.extend(self.spawn_many(d, n))
            t_replies = time.monotonic() - t0
            deadline = time.monotonic() + 120
            left = list(pids)
            while left and time.monotonic() < deadline:
                left = [p for p in left if not comm_is(p, "idle_agent")]
            t_exec = time.monotonic() - t0
            spawn_cpu = (cpu_ms(d.pid) - cpu0) / n
            if left:
                self.notes.append(f"{len(left)} of {n} agents had not exec'd after 120 s")
            conn = d.conn()
            # Every pane has read its header before snapshots are timed.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                snap = conn.req({"cmd": "snapshot", "schema": "v2"})
                if sum(1 for p in snap["panes"] if p["counters"]["events"] >= 1) >= n:
                    break
                time.sleep(0.05)
            # Enough rounds that a p99 is not simply the slowest one: `pct`
            # of 50 rounds at .99 is the largest (the v2 rounds at 10,000
            # agents were 50 until the thirteenth pass), of 200 the third.
            rounds = 100 if self.args.quick else max(200, min(300, 200_000 // n))
            v1, v1_size, v1_cpu, v1_floor = self.snapshot_lat(d, {"cmd": "glasspane-snapshot"}, rounds)
            v2, v2_size, v2_cpu, v2_floor = self.snapshot_lat(d, {"cmd": "snapshot", "schema": "v2"}, rounds)
            rss = proc_status(d.pid, "VmRSS") / 1024
            hwm = proc_status(d.pid, "VmHWM") / 1024
            # The exit notice while another client loops snapshots.
            stop = threading.Event()
            looped = [0]

            def looper():
                c = d.conn()
                while not stop.is_set():
                    c.send({"cmd": "glasspane-snapshot"})
                    c.line()
                    looped[0] += 1
                c.close()

            lt = threading.Thread(target=looper)
            lt.start()
            watch = WatchClient(self, d.socket)
            exits = self.colibri_exits(d, self.args.scale_exits, watch, conn)
            stop.set()
            lt.join()
            watch.stop()
            conn.close()
        finally:
            d.stop()
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        # The floor's exit notice among as many idle agents (started and
        # held by the floor), after colibrid's are gone: what the host
        # itself gives with that many processes alive.
        floor_exits = self.floor_exit_notice(self.args.scale_exits, 0, idle=n)
        f_exec = float(floor["execd_ms"])
        self.row(f"spawn {n} agents until all exec'd",
                 f"{t_exec * 1000:.0f} ms ({t_exec * 1000 / f_exec:.2f}x floor; replies in {t_replies * 1000:.0f} ms), "
                 f"daemon CPU {spawn_cpu:.3f} ms/spawn",
                 "<= 1.3x floor" if big else "",
                 f"{f_exec:.0f} ms, {float(floor['cpu_ms_per_spawn']):.3f} ms CPU/spawn")
        self.row(f"glasspane-snapshot (v1) at {n}", f"p50 {pct(v1, .5):.2f} ms, p99 {pct(v1, .99):.2f} ms "
                 f"({v1_size} B, {len(v1)} rounds; daemon CPU {v1_cpu:.2f} ms each)",
                 "p99 <= 15 ms" if big else "", f"moving the same bytes (floor_send): p50 {pct(v1_floor, .5):.2f} ms, "
                 f"p99 {pct(v1_floor, .99):.2f} ms")
        self.row(f"snapshot v2 at {n}", f"p50 {pct(v2, .5):.2f} ms, p99 {pct(v2, .99):.2f} ms "
                 f"({v2_size} B, {len(v2)} rounds; daemon CPU {v2_cpu:.2f} ms each)", "p99 <= 15 ms" if big else "",
                 f"moving the same bytes (floor_send): p50 {pct(v2_floor, .5):.2f} ms, p99 {pct(v2_floor, .99):.2f} ms")
        self.row(f"exit notice at {n}, a client looping snapshots",
                 f"p50 {pct(exits, .5):.3f} ms, p99 {pct(exits, .99):.3f} ms ({len(exits)} exits, "
                 f"{looped[0]} snapshots meanwhile)", "p99 <= 5 ms" if big else "",
                 f"p50 {pct(floor_exits, .5):.3f} ms, p99 {pct(floor_exits, .99):.3f} ms among {n} idle agents "
                 f"(no snapshots)")
        self.row(f"daemon RSS at {n}", f"{rss:.1f} MiB (peak {hwm:.1f} MiB)", "<= 50 MB" if big else "")

    # -- state-change burst ----------------------------------------------

    def burst_one(self, watchers, lines):
        """10 agents print `lines` lines each, every one a state change,
        while `watchers` watch clients read continuously; counts the
        watchers dropped and those that got all 10 exits."""
        self.current = f"burst, {watchers} watcher" + ("s" if watchers > 1 else "")
        d = Daemon(self)
        clients = []
        try:
            clients = [WatchClient(self, d.socket) for _ in range(watchers)]
            conn = d.conn()
            ids = set()
            for _ in range(10):
                data = conn.req({"cmd": "spawn-agent", "argv": [self.bin("streamer"), str(lines), "states"],
                                 "runtime": "pi", "session_id": "burst"})
                ids.add(data["agent_id"])
            exits = {c: 0 for c in clients}
            dropped = {}
            open_ = {c.proc.stdout.fileno(): c for c in clients}
            deadline = time.monotonic() + 180
            while open_ and time.monotonic() < deadline:
                ready = select.select(list(open_), [], [], 1)[0]
                for fd in ready:
                    c = open_[fd]
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        del open_[fd]
                        continue
                    c.buf += chunk
                    *done, c.buf = c.buf.split(b"\n")
                    for line in done:
                        word = line.split(b" ", 2)
                        if word[0] == b"dropped":
                            dropped[c] = int(word[1])
                        elif word[0].decode() in ids:
                            exits[c] += 1
                    if c in dropped or exits[c] == len(ids):
                        del open_[fd]
            complete = sum(1 for c in clients if exits[c] == len(ids))
            status = conn.req({"cmd": "status"})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                panes = conn.req({"cmd": "snapshot", "schema": "v2"})["panes"]
                if sum(1 for p in panes if p["id"] in ids and p.get("exit") is not None) == len(ids):
                    break
                time.sleep(0.05)
            published = d.conn().req({"cmd": "watch"})["seq"]
        finally:
            for c in clients:
                c.stop()
            d.stop()
        where = ""
        if dropped:
            lo, hi = min(dropped.values()), max(dropped.values())
            where = f" (after {lo} lines)" if lo == hi else f" (after {lo}-{hi} lines)"
        self.row(f"state-change burst, 10 agents x {lines:,} lines, {watchers} watcher{'s' if watchers > 1 else ''}",
                 f"{len(dropped)} of {watchers} dropped{where}; {complete} of {watchers} saw all 10 exits; "
                 f"{status.get('watchers', '?')} still watching at the end; {published:,} events published",
                 "no watcher that reads continuously is dropped")

    def burst(self):
        lines = self.args.burst_lines
        print(f"state-change burst: 10 agents, {lines} state-changing lines each", flush=True)
        for watchers in (1, 100):
            self.burst_one(watchers, lines)

    # -- one stream -------------------------------------------------------

    def stream(self):
        lines = self.args.stream_lines
        turns = 3
        print(f"one PTY stream: {lines} lines of 42 bytes; the floors and colibrid take turns, {turns} runs each, "
              "medians", flush=True)
        self.current = "stream"
        floors, log_floors, runs = [], [], []
        log = os.path.join(self.tmp, "floor_log.jsonl")
        for _ in range(turns):
            floors.append(self.floor_stream("floor_read", lines))
            log_floors.append(self.floor_stream("floor_log", lines, log))
            os.unlink(log)
            runs.append(self.stream_once(lines))
        mib_s, cpu = pct([r[0] for r in runs], .5), pct([r[1] for r in runs], .5)
        events = min(r[2] for r in runs)
        # Each run's own split, then the medians: the median of the rest is
        # not the median total less the median loop of other runs.
        splits = [(r[3], r[1] - r[3]) for r in runs if r[3] is not None]
        split = ""
        if splits:
            loop, rest = pct([x[0] for x in splits], .5), pct([x[1] for x in splits], .5)
            split = f" (event loop {loop:.0f} ms, log writers and the rest {rest:.0f} ms)"
        f_mib, f_cpu = pct([f[0] for f in floors], .5), pct([f[1] for f in floors], .5)
        l_mib, l_cpu = pct([f[0] for f in log_floors], .5), pct([f[1] for f in log_floors], .5)
        self.row("one PTY stream of 42-byte lines",
                 f"{mib_s:.1f} MiB/s ({mib_s / f_mib:.2f}x floor, {mib_s / l_mib:.2f}x the logging floor), "
                 f"daemon CPU {cpu:.0f} ms{split} ({cpu / f_cpu:.2f}x floor, {cpu / l_cpu:.2f}x the logging "
                 f"floor), {events} of {lines} lines parsed and logged (fewest of {turns} runs)",
                 ">= floor speed, <= 1.5x floor CPU",
                 f"{f_mib:.1f} MiB/s, {f_cpu:.0f} ms CPU; reading and logging each line (floor_log): "
                 f"{l_mib:.1f} MiB/s, {l_cpu:.0f} ms CPU")

    def floor_stream(self, prog, lines, *rest):
        """One run of a C stream floor: (MiB/s, CPU ms)."""
        fl = subprocess.run([self.bin(prog), str(lines), self.bin("streamer"), *rest], capture_output=True,
                            text=True, timeout=300, check=True)
        floor = dict(kv.split("=") for kv in fl.stdout.split()[1:])
        if int(floor["lines"]) != lines:
            raise RuntimeError(f"{prog} counted {floor['lines']} of {lines} lines")
        return float(floor["mib_s"]), float(floor["cpu_ms"])

    def stream_once(self, lines):
        """One run under colibrid: MiB/s, daemon CPU ms, events counted, the
        event loop's CPU ms (None where /proc does not split threads)."""
        d = Daemon(self)
        try:
            conn = d.conn()
            watch = Conn(d.socket)
            watch.req({"cmd": "watch"})
            cpu0, loop0 = cpu_ms(d.pid), loop_cpu_ms(d.pid)
            t0 = time.monotonic()
            data = conn.req({"cmd": "spawn-agent", "argv": [self.bin("streamer"), str(lines)], "runtime": "pi"})
            while True:
                ev = json.loads(watch.line())
                if ev.get("event") == "exited" and ev.get("pane") == data["agent_id"]:
                    break
            secs = time.monotonic() - t0
            cpu, loop1 = cpu_ms(d.pid) - cpu0, loop_cpu_ms(d.pid)
            loop = loop1 - loop0 if loop0 is not None and loop1 is not None else None
            snap = conn.req({"cmd": "snapshot", "schema": "v2"})
            pane = next(p for p in snap["panes"] if p["id"] == data["agent_id"])
            events = pane["counters"]["events"]
        finally:
            d.stop()
        return lines * 42 / secs / 1048576, cpu, events, loop


# The daemon holds about 2 fds per agent (its PTY master and its pidfd),
# plus sockets, logs and the like; this much is kept free for those.
FD_HEADROOM = 400


def fit_fd_limit(bench, n):
    """The largest agent count up to n that RLIMIT_NOFILE allows, with a
    note in the table when that is fewer than n."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    fits = (limit - FD_HEADROOM) // 2
    if fits >= n:
        return n
    bench.notes.append(f"{n:,} agents need about {2 * n + FD_HEADROOM:,} fds in the daemon; RLIMIT_NOFILE "
                       f"is {limit:,} here (a hard limit this user cannot raise), so that run used {fits:,} agents")
    return fits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--colibrid", required=True)
    ap.add_argument("--bin", required=True, help="directory of the built C programs")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and agents; under 2 minutes")
    ap.add_argument("--only", choices=["exit", "burst", "scale", "stream"], action="append")
    ap.add_argument("--scale", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--scale-exits", type=int, help="exits timed at each scale while a client loops "
                    "snapshots (default 100, --quick 20); more gives a p99 that is not the maximum")
    ap.add_argument("--client-gc", action="store_true", help="leave the bench client's garbage collector on "
                    "while it times snapshots, and count its collections")
    ap.add_argument("--no-syslog", action="store_true", help="run colibrid with --no-syslog (what sending "
                    "alerts costs, against the default run)")
    args = ap.parse_args()
    scale_exits = args.scale_exits
    if args.quick:
        args.exits, args.scale_exits, args.stream_lines, args.burst_lines = 50, 20, 500_000, 2_000
        args.scale = args.scale or [100, 1000]
    else:
        args.exits, args.scale_exits, args.stream_lines, args.burst_lines = 200, 100, 2_000_000, 10_000
        args.scale = args.scale or [100, 1000, 4000, 10000]
    args.scale_exits = scale_exits or args.scale_exits
    only = set(args.only or ["exit", "burst", "scale", "stream"])
    b = Bench(args)
    started = time.monotonic()
    try:
        if "exit" in only:
            b.exit_notice()
        if "burst" in only:
            b.burst()
        if "scale" in only:
            for n in args.scale:
                try:
                    b.scale_one(fit_fd_limit(b, n), n)
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    b.row(f"scale {n}", f"FAILED: {e}")
        if "stream" in only:
            b.stream()
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)
    print()
    print(f"| what | measured | target (issue 12) | C floor, same run |")
    print(f"| --- | --- | --- | --- |")
    for what, measured, target, floor in b.rows:
        print(f"| {what} | {measured} | {target} | {floor} |")
    for note in b.notes:
        print(f"note: {note}")
    print(f"({time.monotonic() - started:.0f} s; load average at the end: "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])})")


if __name__ == "__main__":
    sys.exit(main())
