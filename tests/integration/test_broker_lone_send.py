"""A read that is one plain SEND_MESSAGE_V2 (one request in flight) is answered by the send
processor's lone handler, without the frame decoder and the dispatch: the same answers, errors
and records as the general path, which still takes every other read (several frames, a partial
frame, other codes, the unusual sends)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from test_broker_server import WAIT_S, dispatched, run, running_broker

from _support.requests import create_topic_request, pull_request, pulled_records, send_request
from rocketq.broker import Broker
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.protocol import record as rec
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection
from rocketq.speedups import COMPILED

TOPIC = "LoneT"


class Counted:
    """The broker's lone handler, counting the reads it answered and the ones it left."""

    def __init__(self, lone: Callable[[Connection, bytes, int], bytes | None]) -> None:
        self.lone = lone
        self.answered = 0
        self.left = 0

    def __call__(self, conn: Connection, data: bytes, max_body: int) -> bytes | None:
        frame = self.lone(conn, data, max_body)
        if frame is None:
            self.left += 1
        else:
            self.answered += 1
        return frame


def count_lone(broker: Broker) -> Counted:
    server = broker._server  # the test reaches in on purpose: connections made from now on
    assert server is not None and server.lone is not None
    counted = Counted(server.lone)
    server.lone = counted
    return counted


def frame_of(cmd: RemotingCommand, opaque: int) -> bytes:
    cmd.opaque = opaque
    return encode(cmd)


async def partial_frame_held(broker: Broker) -> bool:
    """Whether a connection of the broker holds part of a frame (polled, bounded)."""
    assert broker._server is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while loop.time() < deadline:
        if any(conn.buffered for conn in broker._server.connections):
            return True
        await asyncio.sleep(0.001)
    return False


async def exchange(
    port: int, reads: list[bytes], answers: int, after_write: Callable[[], Awaitable[bool]] | None = None
) -> list[RemotingCommand]:
    """Write each of ``reads`` on its own (waiting for the answers to the frames written so far
    before the next, so each arrives as one read; ``after_write`` awaited once, after the first),
    then read until ``answers`` answers came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    decoder, written = FrameDecoder(), FrameDecoder()
    got: list[RemotingCommand] = []
    want = 0
    try:
        for data in reads:
            want += len(written.feed(data))
            writer.write(data)
            await writer.drain()
            if after_write is not None:
                assert await after_write()
                after_write = None
            while len(got) < min(want, answers):
                chunk = await asyncio.wait_for(reader.read(1 << 16), WAIT_S)
                assert chunk, "the broker closed the connection"
                got += decoder.feed(chunk)
        while len(got) < answers:
            chunk = await asyncio.wait_for(reader.read(1 << 16), WAIT_S)
            assert chunk, "the broker closed the connection"
            got += decoder.feed(chunk)
    finally:
        writer.close()
    return got


async def records(broker: Broker, client: Any, addr: str, queue_id: int, n: int) -> list[rec.RecordView]:
    await dispatched(broker)
    pulled = await client.invoke(
        addr, pull_request(TOPIC, 0, queue_id=queue_id, expression_type="TAG", suspend_ms=0, max_msgs=n)
    )
    assert pulled.code == ResponseCode.SUCCESS
    return pulled_records(pulled.body)


def stable(view: rec.RecordView) -> tuple[Any, ...]:
    """What a record holds that does not depend on when or where it was written."""
    return (view.topic, view.body, view.properties, view.flag, view.sys_flag, view.born_timestamp,
            view.reconsume_times, view.queue_offset)  # fmt: skip


def test_lone_sends_are_answered_and_stored_as_pipelined_ones(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=2))).code == 0
            for queue_id in (0, 1):  # the topic's name is checked once, by the general path
                assert (await client.invoke(addr, send_request(TOPIC, b"w", queue_id=queue_id))).code == 0
            counted = count_lone(broker)
            props = {"UNIQ_KEY": "AB", "TAGS": "t", "KEYS": "k1 k2", "WAIT": "true"}
            requests = [send_request(TOPIC, b"m%d" % i, queue_id=0, properties=props) for i in range(3)]
            lone = [frame_of(request, i) for i, request in enumerate(requests)]
            for request in requests:  # the same sends (born at the same ms) to queue 1
                request.ext_fields["e"] = "1"
            piped = [frame_of(request, 10 + i) for i, request in enumerate(requests)]
            alone = await exchange(broker.port, lone, 3)
            assert counted.answered == 3 and counted.left == 0
            together = await exchange(broker.port, [b"".join(piped)], 3)
            assert counted.answered == 3 and counted.left == 1  # several frames: the general path
            assert [a.opaque for a in alone] == [0, 1, 2] and [a.opaque for a in together] == [10, 11, 12]
            for a, b in zip(alone, together, strict=True):
                assert (a.code, a.flag, a.language, a.version, a.remark) == (
                    b.code, b.flag, b.language, b.version, b.remark,
                )  # fmt: skip
                assert list(a.ext_fields) == list(b.ext_fields)
                assert a.ext_fields["queueOffset"] == b.ext_fields["queueOffset"]
                assert a.ext_fields["transactionId"] == b.ext_fields["transactionId"] == "AB"
                assert (a.ext_fields["queueId"], b.ext_fields["queueId"]) == ("0", "1")
            first = await records(broker, client, addr, 0, 4)
            second = await records(broker, client, addr, 1, 4)
            assert [stable(v) for v in first[1:]] == [stable(v) for v in second[1:]]
            assert [v.body for v in first] == [b"w", b"m0", b"m1", b"m2"]

    run(main())


def test_lone_send_errors_are_the_general_paths(store_config: StoreConfig) -> None:
    small = dataclasses.replace(store_config, max_message_size=1024)

    async def main() -> None:
        async with running_broker(small) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == 0
            ok = frame_of(send_request(TOPIC, b"ok"), 1)
            assert (await exchange(broker.port, [ok], 1))[0].code == ResponseCode.SUCCESS  # name checked
            counted = count_lone(broker)
            assert broker.store is not None
            big = b"x" * (broker.store.config.max_message_size + 1)
            alone = await exchange(broker.port, [frame_of(send_request(TOPIC, big), 2)], 1)
            assert counted.answered == 1  # taken: the put refused it
            piped = await exchange(
                broker.port,
                [frame_of(send_request(TOPIC, big), 3) + frame_of(send_request(TOPIC, b"y"), 4)],
                2,
            )
            assert counted.answered == 1 and counted.left == 1
            assert alone[0].code == piped[0].code == ResponseCode.MESSAGE_ILLEGAL
            assert alone[0].remark == piped[0].remark and alone[0].remark
            assert (alone[0].opaque, piped[0].opaque, piped[1].opaque) == (2, 3, 4)
            assert piped[1].code == ResponseCode.SUCCESS

    run(main())


def test_unusual_reads_and_sends_are_left_to_the_general_path(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == 0
            counted = count_lone(broker)
            plain = frame_of(send_request(TOPIC, b"a"), 1)
            reads = [
                frame_of(send_request("NewTopicOfThisRead", b"b"), 2),  # creates its topic
                frame_of(send_request(TOPIC, b"c", v2=False), 3),  # SEND_MESSAGE
                frame_of(send_request(TOPIC, b"d", properties={"TRAN_MSG": "true"}), 4),  # a half message
                frame_of(send_request(TOPIC, b"e", queue_id=-1), 5),  # any queue
                frame_of(send_request(TOPIC, b"f", queue_id=7), 6),  # a queue the topic does not have
                frame_of(send_request(TOPIC, b"g", sys_flag=0x1), 7),  # compressed: checked
            ]
            answers = await exchange(broker.port, [plain, *reads], 1 + len(reads))
            # the first send to a topic checks its name on the general path; the rest left too
            assert counted.answered == 0 and counted.left == 1 + len(reads)
            codes = [a.code for a in answers]
            assert codes[:5] == [ResponseCode.SUCCESS] * 5
            assert codes[5] == ResponseCode.INVALID_PARAMETER and codes[6] == ResponseCode.MESSAGE_ILLEGAL
            # a frame cut in two reads, then one whole: the decoder keeps the cut one
            cut = frame_of(send_request(TOPIC, b"h"), 8)
            answers = await exchange(
                broker.port,
                [cut[:10], cut[10:], frame_of(send_request(TOPIC, b"i"), 9)],
                2,
                lambda: partial_frame_held(broker),
            )
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 2
            assert counted.answered == 1 and counted.left == 2 + len(reads)  # the cut one's first read

    run(main())


def test_no_lone_handler_with_request_timing(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(
            store_config, metrics_exporter_type="PROM", metrics_prom_exporter_port=0
        ) as (
            broker,
            _client,
            _addr,
        ):
            assert broker._server is not None and broker._server.lone is None

    run(main())


def test_an_error_before_the_put_leaves_the_read_to_the_general_path(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == 0
            assert (await client.invoke(addr, send_request(TOPIC, b"w"))).code == 0  # name checked
            counted = count_lone(broker)
            send = broker._send
            assert send is not None

            def broken() -> bool:
                raise RuntimeError("topics.json state unreadable")

            send._topics_pending = broken  # type: ignore[method-assign]
            try:
                answers = await exchange(broker.port, [frame_of(send_request(TOPIC, b"x"), 5)], 1)
            finally:
                del send._topics_pending
            # left, then answered as the general path answers a handler's exception
            assert counted.answered == 0 and counted.left == 1
            assert answers[0].code == ResponseCode.SYSTEM_ERROR and answers[0].opaque == 5
            assert answers[0].remark == "topics.json state unreadable"
            again = await exchange(broker.port, [frame_of(send_request(TOPIC, b"y"), 6)], 1)
            assert again[0].code == ResponseCode.SUCCESS and counted.answered == 1

    run(main())


class CountedPuts:
    """A store's compiled single put, counting the puts it took and the ones it handed back."""

    def __init__(self, lane: Any) -> None:
        self.lane = lane
        self.taken = 0
        self.left = 0

    def store_put(self, msg: Any, queue_id: int | None) -> Any:
        r = self.lane.store_put(msg, queue_id)
        if r is None:
            self.left += 1
        else:
            self.taken += 1
        return r


@pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "put_lane"), reason="the compiled module is not in use"
)
def test_a_lone_send_is_stored_by_the_compiled_single_put(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == 0
            for i in range(2):  # the topic's name checked, its shape cached, queue offset 0 taken
                assert (await client.invoke(addr, send_request(TOPIC, b"w%d" % i, queue_id=0))).code == 0
            store = broker.store
            assert store is not None and store._lane is not None
            counted = CountedPuts(store._lane)
            store._lane = counted  # type: ignore[assignment]
            lone = count_lone(broker)
            answers = await exchange(
                broker.port, [frame_of(send_request(TOPIC, b"m%d" % i), i) for i in range(5)], 5
            )
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 5
            assert lone.answered == 5 and (counted.taken, counted.left) == (5, 0)
            assert [a.ext_fields["queueOffset"] for a in answers] == ["2", "3", "4", "5", "6"]
            assert [v.body for v in await records(broker, client, addr, 0, 8)] == [b"w0", b"w1"] + [
                b"m%d" % i for i in range(5)
            ]

    run(main())
