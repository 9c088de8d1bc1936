"""RemotingClient: a connection attempt that outlives its caller's wait ends quietly.

A caller's wait for a connection (``invoke(..., timeout_s)``) may run out while the attempt goes
on (its own bound is the client's connect timeout). When the attempt then fails, nobody awaits
it any more; asyncio would report its exception as an error ("Task exception was never
retrieved") in the process's log. The client takes that outcome itself.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from rocketq.errors import RemotingConnectError, RemotingTimeout
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.command import RemotingCommand


def test_a_late_connect_failure_is_not_reported_as_never_retrieved() -> None:
    reported: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        release = asyncio.Event()

        async def slow_refusal(*args: object, **kwargs: object) -> object:
            await release.wait()
            raise ConnectionRefusedError(111, "Connection refused")

        loop.create_connection = slow_refusal  # type: ignore[method-assign,assignment]
        client = RemotingClient(connect_timeout_s=30.0)
        with pytest.raises(RemotingTimeout, match="took longer than"):
            await client.invoke("127.0.0.1:9", RemotingCommand(0), timeout_s=0.01)
        attempt = next(iter(client._connecting.values()))
        release.set()
        await asyncio.wait([attempt])  # done (its outcome not taken here: that would hide a report)
        del attempt
        await client.close()

    asyncio.run(main())
    gc.collect()
    assert [ctx for ctx in reported if "never retrieved" in str(ctx.get("message"))] == []


def test_without_taking_it_asyncio_would_report_it() -> None:
    # the check above can fail: the same late failure, its outcome left untaken, is reported
    reported: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))

        async def fails() -> None:
            raise RemotingConnectError("cannot connect")

        task = loop.create_task(fails())
        await asyncio.wait([task])
        del task
        gc.collect()

    asyncio.run(main())
    gc.collect()
    assert [ctx for ctx in reported if "never retrieved" in str(ctx.get("message"))]
