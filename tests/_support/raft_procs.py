"""DLedger members as separate processes (``python -m rocketq.ha.node``) and a control client.

:class:`NodeProcs` starts n members on ports picked up front, each with its log in
``<dir>/<id>.log``; ``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``start`` again on
the same data directory. :class:`Control` speaks the node's control codes (CTL_APPEND, ...).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

from _support.procs import child_env, free_port
from rocketq.errors import RocketqError
from rocketq.ha import node as ctl
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.command import RemotingCommand

TIMINGS = ("--election-timeout-ms", "500", "--heartbeat-ms", "100", "--ack-timeout-ms", "2000")


class NodeProcs:
    def __init__(self, root: pathlib.Path, n: int = 3, extra: tuple[str, ...] = TIMINGS) -> None:
        self.root = root
        self.ids = [f"n{i}" for i in range(n)]
        self.addr = {i: f"127.0.0.1:{free_port()}" for i in self.ids}
        self.peers = ";".join(f"{i}-{a}" for i, a in self.addr.items())
        self.extra = extra
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *ids: str) -> None:
        for k, i in enumerate(ids or self.ids):
            args = [sys.executable, "-m", "rocketq.ha.node", "--self", i, "--peers", self.peers]
            args += ["--data-dir", str(self.root / "data"), "--seed", str(k + 17 * len(self.procs))]
            args += ["--data-file-size", str(1 << 20), "--index-file-size", str(32 * 4096), *self.extra]
            with open(self.root / f"{i}.log", "ab") as out:
                self.procs[i] = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=child_env())

    def kill(self, i: str) -> None:
        p = self.procs.pop(i)
        p.kill()
        p.wait(10)

    def signal(self, i: str, sig: signal.Signals) -> None:
        os.kill(self.procs[i].pid, sig)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {i}\n{(self.root / f'{i}.log').read_text()[-3000:]}" for i in self.ids)


class Control:
    def __init__(self, procs: NodeProcs) -> None:
        self.procs = procs
        self.client = RemotingClient()

    async def call(
        self,
        i: str,
        code: int,
        ext: dict[str, object] | None = None,
        body: bytes = b"",
        timeout_s: float = 3.0,
    ) -> RemotingCommand | None:
        try:
            return await self.client.invoke(
                self.procs.addr[i], RemotingCommand.create_request(code, ext, body), timeout_s
            )
        except (RocketqError, OSError):
            return None

    async def status(self, i: str) -> dict[str, str] | None:
        r = await self.call(i, ctl.CTL_STATUS, timeout_s=1.0)
        return None if r is None else r.ext_fields

    async def leader(self, among: list[str]) -> str | None:
        """The member that says it leads, if the others among ``among`` that answer agree."""
        found = None
        for i in among:
            st = await self.status(i)
            if st is not None and st["role"] == "LEADER":
                found = i
        if found is None:
            return None
        for i in among:
            st = await self.status(i)
            if st is not None and st.get("leader") != found:
                return None
        return found

    async def append(self, i: str, payload: bytes, timeout_s: float = 5.0) -> dict[str, str] | None:
        r = await self.call(i, ctl.CTL_APPEND, body=payload, timeout_s=timeout_s)
        return None if r is None else r.ext_fields

    async def read(self, i: str, pos: int, size: int) -> bytes | None:
        r = await self.call(i, ctl.CTL_READ, {"pos": pos, "size": size})
        return None if r is None else r.body

    async def digest(self, i: str, upto: int) -> str | None:
        r = await self.call(i, ctl.CTL_DIGEST, {"upto": upto})
        return None if r is None else r.ext_fields["sha256"]

    async def close(self) -> None:
        await self.client.close()
