"""The synchronous producer facade: :class:`AsyncProducer` on a private event loop.

``start()`` creates one event loop and one daemon thread (``rocketq-producer-<group>``) that runs
it; every method submits the matching coroutine to that loop and waits for its result in the
calling thread. ``shutdown()`` shuts the producer down, stops the loop and joins the thread.
There is no other hidden thread or global loop; several ``Producer`` objects own one each.
Methods may be called from any thread, but not from the facade's own loop (selectors run there).
"""

from __future__ import annotations

from typing import Any

from rocketq.client._facade import BlockingFacade, blocking, takes_arguments_of
from rocketq.client.aio import AsyncProducer


class Producer(BlockingFacade[AsyncProducer]):
    """A RocketMQ producer with blocking methods; same arguments as :class:`AsyncProducer`.

    >>> p = Producer("PG", namesrv_addr="127.0.0.1:9876"); p.start()   # doctest: +SKIP
    >>> p.send(Message("T", b"hello"), sharding_key="order-42")       # doctest: +SKIP
    >>> p.shutdown()                                                   # doctest: +SKIP
    """

    @takes_arguments_of(AsyncProducer)
    def __init__(self, group: str, **kwargs: Any) -> None:
        BlockingFacade.__init__(
            self, AsyncProducer(group, **kwargs), f"rocketq-producer-{group}", f"producer {group}"
        )

    @property
    def group(self) -> str:
        return self._core.group

    send = blocking(AsyncProducer.send)
    send_oneway = blocking(AsyncProducer.send_oneway)
    send_batch = blocking(AsyncProducer.send_batch)


__all__ = ["Producer"]
