"""The synchronous producer facade: :class:`AsyncProducer` on a private event loop.

``start()`` creates one event loop and one daemon thread (``rocketq-producer-<group>``) that runs
it; every method submits the matching coroutine to that loop and waits for its result in the
calling thread. ``shutdown()`` shuts the producer down, stops the loop and joins the thread.
There is no other hidden thread or global loop; several ``Producer`` objects own one each.
Methods may be called from any thread, but not from the facade's own loop (selectors run there).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from rocketq.client._routes import MessageQueue
from rocketq.client.aio import (
    DEFAULT_COMPRESS_THRESHOLD_BYTES,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_TIMEOUT_MS,
    AsyncProducer,
    QueueSelector,
    SendResult,
)
from rocketq.errors import ClientStateError
from rocketq.message import Message

T = TypeVar("T")


class Producer:
    """A RocketMQ producer with blocking methods; same arguments as :class:`AsyncProducer`.

    >>> p = Producer("PG", namesrv_addr="127.0.0.1:9876"); p.start()   # doctest: +SKIP
    >>> p.send(Message("T", b"hello"), sharding_key="order-42")       # doctest: +SKIP
    >>> p.shutdown()                                                   # doctest: +SKIP
    """

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str],
        send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS,
        retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
        compress_threshold_bytes: int = DEFAULT_COMPRESS_THRESHOLD_BYTES,
        **options: Any,
    ) -> None:
        self._core = AsyncProducer(
            group,
            namesrv_addr=namesrv_addr,
            send_timeout_ms=send_timeout_ms,
            retry_times_when_send_failed=retry_times_when_send_failed,
            compress_threshold_bytes=compress_threshold_bytes,
            **options,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def core(self) -> AsyncProducer:
        """The asyncio producer this facade drives (use it only on the facade's loop)."""
        return self._core

    @property
    def group(self) -> str:
        return self._core.group

    def start(self) -> None:
        """Start the private event-loop thread and the producer on it."""
        with self._lock:
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=run, name=f"rocketq-producer-{self.group}", daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
        try:
            self._call(self._core.start())
        except BaseException:
            self._stop_loop()
            raise

    def shutdown(self) -> None:
        """Shut the producer down and stop its thread; idempotent."""
        if self._loop is None:
            return
        try:
            self._call(self._core.shutdown())
        finally:
            self._stop_loop()

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def send(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and return the broker's result (see :meth:`AsyncProducer.send`)."""
        return self._call(self._core.send(msg, sharding_key=sharding_key, selector=selector, queue=queue))

    def send_oneway(self, msg: Message, *, sharding_key: str | None = None) -> None:
        """Send one message without waiting for an answer."""
        self._call(self._core.send_oneway(msg, sharding_key=sharding_key))

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send messages of one topic as one batch."""
        return self._call(self._core.send_batch(msgs))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise ClientStateError(f"producer {self.group} is not started")
        if self._thread is threading.current_thread():
            coro.close()
            raise RuntimeError("a blocking Producer method was called on the producer's own event loop")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _stop_loop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()
        loop.close()


__all__ = ["Producer"]
