"""DLedger replication: appends through a 3-member Raft group vs a group of one, and fail-over time.

    python bench/replication.py                       # both ack policies, 3 members vs 1, fail-over
    python bench/replication.py --seconds 2 --failovers 1 --policies page_cache

Appends: every member of a group runs in this process (one event loop, real sockets on 127.0.0.1,
real files in a temporary directory, ``--dir`` to choose where); ``--concurrency`` appenders each
await one ``RaftGroupLog.append`` at a time of a ``--size``-byte record (the record names its own
physical offset, as a CommitLog record does) for ``--seconds``. The group of one is the same
driver with one member, so the difference is the replication: the peer transport and the
followers' writes, which here share the one core (the whole group runs on one CPU thread of a
2-core machine). Batch push is on (``enableBatchPush=true``, 64 KiB batches). Figures: appends/s
and the p50/p99 latency of an append, from the call to its acknowledgement.

Fail-over: three ``python -m rocketq.ha.node`` processes; a client appends in sequence to the
leader; after 50 acknowledged appends the leader is killed with SIGKILL, and the time from the
kill to the first acknowledged append on the new leader is reported (``--failovers`` rounds,
each on a fresh group). The election timeout and heartbeat are printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from rocketq.errors import RocketqError
from rocketq.ha import node as ctl
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.raft_types import AckPolicy, Role
from rocketq.ha.replicated_log import AppendStatus
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.command import RemotingCommand

OFFSET = struct.Struct(">q")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _leader(members: list[RaftGroupLog], timeout_s: float = 10.0) -> RaftGroupLog:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [m for m in members if m.state.role is Role.LEADER]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.01)
    raise SystemExit("no leader elected within the deadline")


async def appends(
    root: str, n: int, policy: AckPolicy, args: argparse.Namespace
) -> tuple[float, float, float]:
    ids = [f"n{i}" for i in range(n)]
    peers = tuple((i, f"127.0.0.1:{free_port()}") for i in ids)
    data = tempfile.mkdtemp(dir=root)
    members = [
        RaftGroupLog(
            DLedgerConfig(
                self_id=i,
                peers=peers,
                data_dir=data,
                seed=k,
                ack_policy=policy,
                election_timeout_ms=1000,
                heartbeat_interval_ms=100,
                enable_batch_push=True,
                max_batch_bytes=64 * 1024,
                data_file_size=256 << 20,
            )
        )
        for k, i in enumerate(ids)
    ]
    for m in members:
        await m.start()
    try:
        leader = await _leader(members)
        payload = b"x" * (args.size - OFFSET.size)
        lat: list[float] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + args.seconds

        async def appender() -> None:
            while loop.time() < end:
                t0 = time.perf_counter()
                r = await leader.append(lambda off: OFFSET.pack(off) + payload)
                if r.status is not AppendStatus.OK:
                    raise SystemExit(f"append failed: {r}")
                lat.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(appender() for _ in range(args.concurrency)))
        took = time.perf_counter() - t0
        lat.sort()
        return len(lat) / took, 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99)]
    finally:
        for m in members:
            await m.stop()
        shutil.rmtree(data, ignore_errors=True)


async def failover(root: str, timeout_ms: int, heartbeat_ms: int) -> float:
    ids = ["n0", "n1", "n2"]
    addr = {i: f"127.0.0.1:{free_port()}" for i in ids}
    peers = ";".join(f"{i}-{a}" for i, a in addr.items())
    data = tempfile.mkdtemp(dir=root)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for k, i in enumerate(ids):
        cmd = [sys.executable, "-m", "rocketq.ha.node", "--self", i, "--peers", peers, "--data-dir", data]
        cmd += [
            "--seed",
            str(k),
            "--election-timeout-ms",
            str(timeout_ms),
            "--heartbeat-ms",
            str(heartbeat_ms),
        ]
        cmd += ["--data-file-size", str(16 << 20)]
        procs[i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    client = RemotingClient()

    async def call(i: str, code: int, body: bytes = b"") -> dict[str, str] | None:
        try:
            r = await client.invoke(addr[i], RemotingCommand.create_request(code, None, body), 3.0)
        except (RocketqError, OSError):
            return None
        return r.ext_fields

    async def find_leader(among: list[str]) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for i in among:
                st = await call(i, ctl.CTL_STATUS)
                if st is not None and st["role"] == "LEADER":
                    return i
            await asyncio.sleep(0.01)
        raise SystemExit("no leader")

    try:
        target = await find_leader(ids)
        acked = 0
        killed_at = 0.0
        victim = ""
        while True:
            st = await call(target, ctl.CTL_APPEND, b"payload")
            if st is not None and st["status"] == "OK":
                if killed_at:
                    return time.monotonic() - killed_at
                acked += 1
                if acked == 50:
                    victim = target
                    procs[victim].kill()
                    procs[victim].wait()
                    killed_at = time.monotonic()
            elif st is not None and st.get("leader") in addr and st.get("leader") != victim:
                target = st["leader"]
            elif killed_at:
                target = await find_leader([i for i in ids if i != victim])
    finally:
        await client.close()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(10)
        shutil.rmtree(data, ignore_errors=True)


async def main(args: argparse.Namespace) -> None:
    root = args.dir or tempfile.mkdtemp(prefix="rocketq-bench-repl-")
    os.makedirs(root, exist_ok=True)
    try:
        print(f"appends: {args.size} B records, {args.concurrency} appenders, {args.seconds:g} s per case")
        print(f"{'ack policy':<12} {'members':>7} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for name in args.policies.split(","):
            policy = AckPolicy(name)
            for n in (1, 3):
                rate, p50, p99 = await appends(root, n, policy, args)
                print(f"{policy.value:<12} {n:>7} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f}")
        if args.failovers:
            t, hb = args.election_timeout_ms, args.heartbeat_ms
            print(f"fail-over: election timeout {t} ms (randomized to [{t}, {2 * t}) ms), heartbeat {hb} ms")
            took = [await failover(root, t, hb) for _ in range(args.failovers)]
            shown = ", ".join(f"{1000 * x:.0f}" for x in took)
            print(f"  SIGKILL of the leader -> first acknowledged append on the new leader: {shown} ms")
            print(f"  median {1000 * statistics.median(took):.0f} ms")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--policies", default="page_cache,fsync")
    p.add_argument("--failovers", type=int, default=3)
    p.add_argument("--election-timeout-ms", type=int, default=500)
    p.add_argument("--heartbeat-ms", type=int, default=100)
    p.add_argument("--dir", default=None, help="where the data goes (default: a temporary directory)")
    asyncio.run(main(p.parse_args()))
