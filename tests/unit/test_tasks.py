"""``rocketq.tasks.settle``: a future gets its outcome once, an exception as its exception, and
one whose waiter gave up is left alone (asyncio and concurrent futures alike)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from rocketq.tasks import settle


def test_settle_sets_a_result_or_an_exception_once_and_skips_a_done_future() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ok: asyncio.Future[int] = loop.create_future()
        settle(ok, 7)
        assert ok.result() == 7
        settle(ok, 8)  # done already: unchanged, no InvalidStateError
        assert ok.result() == 7
        failed: asyncio.Future[int] = loop.create_future()
        settle(failed, KeyError("k"))
        with pytest.raises(KeyError):
            failed.result()
        gave_up: asyncio.Future[int] = loop.create_future()
        gave_up.cancel()
        settle(gave_up, 9)
        assert gave_up.cancelled()

    asyncio.run(main())
    threaded: concurrent.futures.Future[int] = concurrent.futures.Future()
    settle(threaded, RuntimeError("stopped"))
    with pytest.raises(RuntimeError, match="stopped"):
        threaded.result(0)
