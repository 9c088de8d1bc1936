"""DLedger groups of three ``python -m rocketq.ha.node`` processes: kill -9, SIGSTOP, restarts.

Election timeout 500 ms (randomized to [500, 1000) ms), heartbeats every 100 ms, ack timeout 2 s.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from _support.raft_procs import TIMINGS, Control, NodeProcs
from _support.wait import wait_until_async
from rocketq.ha.node import record_for

# every test kills or stops member processes (kill -9, SIGSTOP): not in make fast
pytestmark = pytest.mark.slow


#: ``flushFileInterval`` a minute long: nothing written after the start is fsynced during a test,
#: so what survives a SIGKILL survives in the page cache alone
NO_FSYNC_DURING_THE_TEST = (*TIMINGS, "--flush-file-interval-ms", "60000")


def run(
    tmp_path: pathlib.Path,
    body: Callable[[NodeProcs, Control], Awaitable[None]],
    extra: tuple[str, ...] = TIMINGS,
) -> None:
    procs = NodeProcs(tmp_path, extra=extra)

    async def main() -> None:
        ctl = Control(procs)
        try:
            await body(procs, ctl)
        finally:
            await ctl.close()

    procs.start()
    try:
        asyncio.run(asyncio.wait_for(main(), 55))
    except BaseException:
        print(procs.logs())
        raise
    finally:
        procs.close()


async def _leader(ctl: Control, among: list[str], timeout_s: float = 15.0) -> str:
    found: str = await wait_until_async(lambda: ctl.leader(among), f"a leader among {among}", timeout_s, 0.05)
    return found


async def _converged(ctl: Control, ids: list[str], timeout_s: float = 15.0) -> int:
    """Wait until every member has the same committed position; return it."""

    async def same() -> int | None:
        sts = [await ctl.status(i) for i in ids]
        if any(s is None for s in sts):
            return None
        pos = {int(s["committedPos"]) for s in sts if s is not None}
        last = {int(s["lastIndex"]) for s in sts if s is not None}
        return pos.pop() if len(pos) == 1 and len(last) == 1 else None

    got: int = await wait_until_async(same, f"{ids} at the same committed position", timeout_s, 0.05)
    return got


async def _identical(ctl: Control, ids: list[str], upto: int) -> None:
    digests = {i: await ctl.digest(i, upto) for i in ids}
    assert len(set(digests.values())) == 1 and None not in digests.values(), digests


@pytest.mark.parametrize("extra", [TIMINGS, NO_FSYNC_DURING_THE_TEST], ids=["fsync-10ms", "fsync-60s"])
def test_sigkill_of_the_leader_loses_no_acknowledged_append(
    tmp_path: pathlib.Path, extra: tuple[str, ...]
) -> None:
    async def body(procs: NodeProcs, ctl: Control) -> None:
        leader = await _leader(ctl, procs.ids)
        acked: dict[int, bytes] = {}
        killed_at = first_after = 0.0
        k = 0
        target = leader
        while first_after == 0.0:
            payload = b"msg-%06d" % k
            k += 1
            r = await ctl.append(target, payload, timeout_s=3.0)
            if r is not None and r["status"] == "OK":
                acked[int(r["pos"])] = payload
                if killed_at:
                    first_after = time.monotonic()
            elif r is not None and r.get("leader") in procs.addr:
                target = r["leader"]
            else:  # no answer, or no known leader: ask around
                target = await ctl.leader([i for i in procs.ids if i in procs.procs]) or target
            if len(acked) == 50 and not killed_at:
                procs.kill(leader)
                killed_at = time.monotonic()
        survivors = [i for i in procs.ids if i != leader]
        new = await _leader(ctl, survivors)
        assert new != leader
        took = 1000 * (first_after - killed_at)
        print(f"fail-over: {took:.0f} ms from SIGKILL to the first acknowledged append")
        for _ in range(20):
            r = await ctl.append(new, b"after-%d" % k)
            assert r is not None and r["status"] == "OK", r
            acked[int(r["pos"])] = b"after-%d" % k
            k += 1
        procs.start(leader)
        upto = await _converged(ctl, procs.ids, 30)
        await _identical(ctl, procs.ids, upto)
        for pos, payload in acked.items():  # every acknowledged append is there, on every member
            want = record_for(payload, pos + 48)
            for i in procs.ids:
                assert await ctl.read(i, pos + 48, len(want)) == want, (i, pos)

    run(tmp_path, body, extra)


def test_a_paused_leader_does_not_acknowledge_and_steps_down(tmp_path: pathlib.Path) -> None:
    async def body(procs: NodeProcs, ctl: Control) -> None:
        leader = await _leader(ctl, procs.ids)
        r = await ctl.append(leader, b"before")
        assert r is not None and r["status"] == "OK"
        procs.signal(leader, signal.SIGSTOP)
        pending = [asyncio.create_task(ctl.append(leader, b"paused-%d" % k, timeout_s=20)) for k in range(5)]
        others = [i for i in procs.ids if i != leader]
        new = await _leader(ctl, others)
        r = await ctl.append(new, b"on-the-new-leader")
        assert r is not None and r["status"] == "OK"
        procs.signal(leader, signal.SIGCONT)
        results = await asyncio.gather(*pending)
        statuses = [None if x is None else x["status"] for x in results]
        assert "OK" not in statuses, statuses
        assert set(statuses) <= {"TERM_CHANGED", "TIMEOUT", "NOT_LEADER"}, statuses
        await wait_until_async(
            lambda: ctl.leader(procs.ids), "the old leader following the new one", 15, 0.05
        )
        st = await ctl.status(leader)
        assert st is not None and st["role"] == "FOLLOWER" and st.get("leader") == new, st
        upto = await _converged(ctl, procs.ids)
        await _identical(ctl, procs.ids, upto)

    run(tmp_path, body)


@pytest.mark.parametrize("extra", [TIMINGS, NO_FSYNC_DURING_THE_TEST], ids=["fsync-10ms", "fsync-60s"])
def test_sigkill_of_all_three_at_once_keeps_the_committed_data(
    tmp_path: pathlib.Path, extra: tuple[str, ...]
) -> None:
    async def body(procs: NodeProcs, ctl: Control) -> None:
        leader = await _leader(ctl, procs.ids)
        acked: dict[int, bytes] = {}
        for k in range(40):
            r = await ctl.append(leader, b"kept-%d" % k)
            assert r is not None and r["status"] == "OK", r
            acked[int(r["pos"])] = b"kept-%d" % k
        upto = max(acked) + 48 + 8 + 7
        before = await ctl.digest(leader, upto)
        for i in procs.ids:
            procs.kill(i)
        procs.start()
        new = await _leader(ctl, procs.ids)
        r = await ctl.append(new, b"after the restart")
        assert r is not None and r["status"] == "OK", r
        assert int(r["pos"]) > max(acked)
        await _converged(ctl, procs.ids)
        for i in procs.ids:
            assert await ctl.digest(i, upto) == before, i
        for pos, payload in acked.items():
            want = record_for(payload, pos + 48)
            assert await ctl.read(new, pos + 48, len(want)) == want, pos

    run(tmp_path, body, extra)
