"""In-process DLedger groups for tests: n :class:`RaftGroupLog` members on 127.0.0.1, real files.

:class:`LocalGroup` starts the members on ports the OS picked, waits for a leader, restarts a
member on its data directory, and compares the members' data bytes. Every wait is a bounded poll.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from dataclasses import replace
from typing import Any

from _support.procs import free_port
from _support.wait import wait_until_async
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import AppendResult

OFFSET = struct.Struct(">q")


def record(payload: bytes) -> Any:
    """An encoder: the record is ``be64(physical offset) + payload`` (as a CommitLog record names
    its own offset)."""
    return lambda off: OFFSET.pack(off) + payload


class LocalGroup:
    def __init__(self, data_dir: str, n: int = 3, **settings: Any) -> None:
        ids = [f"n{i}" for i in range(n)]
        peers = tuple((i, f"127.0.0.1:{free_port()}") for i in ids)
        base = {
            "election_timeout_ms": 300,
            "heartbeat_interval_ms": 50,
            "data_file_size": 1 << 20,
            "index_file_size": 32 * 4096,
        }
        base.update(settings)
        self.configs = {
            i: DLedgerConfig(self_id=i, peers=peers, data_dir=data_dir, seed=k, **base)
            for k, i in enumerate(ids)
        }
        self.members: dict[str, RaftGroupLog] = {}

    async def start(self, *ids: str) -> None:
        for i in ids or tuple(self.configs):
            m = RaftGroupLog(self.configs[i])
            await m.start()
            self.members[i] = m

    async def stop(self, *ids: str) -> None:
        for i in ids or tuple(self.members):
            m = self.members.pop(i)
            await m.stop()

    async def restart(self, i: str, **changes: Any) -> None:
        if i in self.members:
            await self.stop(i)
        if changes:
            self.configs[i] = replace(self.configs[i], **changes)
        await self.start(i)

    async def leader(self, timeout_s: float = 10.0, not_in: tuple[str, ...] = ()) -> RaftGroupLog:
        def find() -> RaftGroupLog | None:
            leaders = [m for i, m in self.members.items() if m.state.role is Role.LEADER and i not in not_in]
            return leaders[0] if len(leaders) == 1 else None

        found: RaftGroupLog = await wait_until_async(find, "one leader", timeout_s)
        return found

    async def append(self, payload: bytes, timeout_s: float = 10.0) -> AppendResult:
        """Append through whoever leads, retrying on NOT_LEADER and indeterminate outcomes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leader = await self.leader(max(0.1, deadline - loop.time()))
            result = await leader.append(record(payload))
            if result.status.value == "OK" or loop.time() > deadline:
                return result
            await asyncio.sleep(0.01)  # retry pace while leadership moves (not a synchronisation)

    async def wait_committed(self, pos: int, timeout_s: float = 10.0) -> None:
        await wait_until_async(
            lambda: all(m.committed_pos >= pos for m in self.members.values()),
            lambda: f"committed_pos >= {pos} on all: {[m.committed_pos for m in self.members.values()]}",
            timeout_s,
        )

    def digest(self, i: str, upto: int) -> str:
        m = self.members[i]
        return hashlib.sha256(m.read(m.store.start_offset, upto - m.store.start_offset)).hexdigest()
