"""Pulls that find messages are answered inside ``data_received`` (no task); pulls that find
nothing are held as before and answered when a message arrives; both answer alike."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from test_broker_server import dispatched, run, running_broker

from _support.requests import create_topic_request, pull_request, send_request
from _support.wait import wait_until_async
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.protocol import record as rec
from rocketq.remoting.command import RemotingCommand

TOPIC = "PullNowT"


def pull(offset: int, commit_offset: int) -> RemotingCommand:
    return pull_request(
        TOPIC, offset, suspend=True, commit_offset=commit_offset, suspend_ms=20_000, expression_type="TAG"
    )


def bodies(body: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        assert view.body is not None
        out.append(view.body)
        pos += view.size
    return out


class TaskCounter:
    """Counts the request tasks (``Connection._serve``) the running loop creates; the server
    and the client share the loop here, and only the server serves requests."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self.names: list[str] = []
        loop.set_task_factory(self._factory)

    def _factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        name = getattr(coro, "__qualname__", repr(coro))
        self.names.append(name)
        if name == "Connection._serve":
            self.count += 1
        return asyncio.Task(coro, loop=loop, **kwargs)


def test_pull_with_messages_is_answered_without_a_task_and_empty_pull_is_held(
    store_config: StoreConfig,
) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            created = await client.invoke(addr, create_topic_request(TOPIC, queues=1))
            assert created.code == ResponseCode.SUCCESS
            for i in range(5):
                answer = await client.invoke(addr, send_request(TOPIC, b"m%d" % i))
                assert answer.code == ResponseCode.SUCCESS
            await dispatched(broker)
            await client.connection(addr)
            assert broker.ctx is not None

            tasks = TaskCounter(asyncio.get_running_loop())
            found = await client.invoke(addr, pull(0, commit_offset=3))
            assert tasks.count == 0, tasks.names  # answered inside data_received
            assert found.code == ResponseCode.SUCCESS
            assert bodies(found.body) == [b"m%d" % i for i in range(5)]
            assert found.ext_fields["nextBeginOffset"] == "5"
            assert found.ext_fields["minOffset"] == "0" and found.ext_fields["maxOffset"] == "5"
            assert broker.ctx.offsets.query_offset("CG", TOPIC, 0) == 3  # COMMIT_OFFSET applied

            # nothing at offset 5: the pull is held (a task) until a message arrives
            held = asyncio.ensure_future(client.invoke(addr, pull(5, commit_offset=5), 30.0))
            hold = broker.ctx.hold
            await wait_until_async(lambda: hold.held_count == 1, "the pull to be held", 10, 0.005)
            assert tasks.count == 1, tasks.names  # the held pull
            answer = await client.invoke(addr, send_request(TOPIC, b"late"))
            assert answer.code == ResponseCode.SUCCESS
            woken = await held
            assert woken.code == ResponseCode.SUCCESS
            assert bodies(woken.body) == [b"late"]
            assert woken.ext_fields["nextBeginOffset"] == "6"
            assert broker.ctx.offsets.query_offset("CG", TOPIC, 0) == 5

            # a pull the checks refuse (the topic made write-only) gets the same answer whether
            # its offset has data (answered at once) or not (the task path)
            updated = await client.invoke(addr, create_topic_request(TOPIC, queues=1, perm=2))
            assert updated.code == ResponseCode.SUCCESS
            refused = [await client.invoke(addr, pull(offset, commit_offset=0)) for offset in (0, 6)]
            assert refused[0].code == refused[1].code == ResponseCode.NO_PERMISSION
            assert refused[0].remark == refused[1].remark and TOPIC in (refused[0].remark or "")

    run(main())
