"""A producer thread for the DLedger group tests: SYNC sends one at a time, a new body each.

What it records: each acknowledged body with a time (when its send began, or when its
acknowledgement came: ``stamp``) and the address of the broker that stored it (from the offset
message id), each send's latency, and each body whose send failed or came back with another
status (indeterminate: it may or may not be stored). ``kind`` is the real client it drives: the
blocking :class:`~rocketq.client.Producer`, or an :class:`~rocketq.client.aio.AsyncProducer` on an
event loop of the thread's own. An error outside the sends (the producer's start, say) is raised
again when the writer stops.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

from _support.wait import wait_until
from rocketq.client import Message, Producer, SendStatus
from rocketq.client.aio import AsyncProducer, SendResult
from rocketq.errors import RocketqError
from rocketq.message import decode_offset_msg_id


class Writer:
    """``with Writer(namesrv, "prefix", topic) as w:`` sends ``prefix-0``, ``prefix-1``, ... to
    ``topic`` until the block ends; ``producer_options`` go to the producer (e.g. its route
    refresh interval)."""

    def __init__(
        self,
        namesrv: str,
        prefix: str,
        topic: str,
        *,
        kind: Literal["blocking", "async"] = "blocking",
        stamp: Literal["began", "acked"] = "acked",
        pad: int = 0,
        **producer_options: Any,
    ) -> None:
        self.namesrv = namesrv
        self.prefix = prefix
        self.topic = topic
        self.kind = kind
        self.stamp = stamp
        self.pad = b"." * pad
        self.options = producer_options
        #: (body, time: when its send began or its acknowledgement came, storing broker's address)
        self.acked: list[tuple[bytes, float, str]] = []
        self.latencies: list[float] = []
        self.failed: set[bytes] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{prefix}")

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        assert not self._thread.is_alive(), "the writer did not stop"
        assert self.error is None, self.error

    @property
    def bodies(self) -> set[bytes]:
        return {b for b, _, _ in self.acked}

    def first_ack_on(self, addr: str, after: float) -> float | None:
        """The time of the first acknowledgement from the broker at ``addr`` after ``after``."""
        return next((t for _, t, a in list(self.acked) if a == addr and t > after), None)

    def wait_acked(self, more: int, what: str, timeout_s: float = 60.0) -> None:
        target = len(self.acked) + more
        wait_until(lambda: len(self.acked) >= target, f"{more} more acknowledgements {what}", timeout_s)

    # -- the thread ------------------------------------------------------------------------
    def _bodies(self) -> Iterator[bytes]:
        i = 0
        while not self._stop.is_set():
            yield f"{self.prefix}-{i}".encode() + self.pad
            i += 1

    def _note(self, body: bytes, began: float, result: SendResult) -> None:
        if result.status is not SendStatus.SEND_OK:
            self.failed.add(body)
            return
        now = time.monotonic()
        self.latencies.append(now - began)
        addr = decode_offset_msg_id(result.offset_msg_id).address
        self.acked.append((body, began if self.stamp == "began" else now, addr))

    def _run(self) -> None:
        try:
            if self.kind == "blocking":
                self._run_blocking()
            else:
                asyncio.run(self._run_async())
        except BaseException as exc:  # raised again by stop()
            self.error = exc

    def _run_blocking(self) -> None:
        with Producer(f"{self.prefix}PG", namesrv_addr=self.namesrv, **self.options) as producer:
            for body in self._bodies():
                began = time.monotonic()
                try:
                    self._note(body, began, producer.send(Message(self.topic, body)))
                except RocketqError:
                    self.failed.add(body)

    async def _run_async(self) -> None:
        async with AsyncProducer(f"{self.prefix}PG", namesrv_addr=self.namesrv, **self.options) as producer:
            for body in self._bodies():
                began = time.monotonic()
                try:
                    self._note(body, began, await producer.send(Message(self.topic, body)))
                except RocketqError:
                    self.failed.add(body)
