"""The rocketq client SDK: one asyncio implementation, two faces.

* :mod:`rocketq.client.aio` — the asyncio core (:class:`~rocketq.client.aio.AsyncProducer`;
  :class:`~rocketq.client.lite_pull.AsyncLitePullConsumer`), used from a running event loop.
* :mod:`rocketq.client` — the synchronous facades (:class:`Producer`, :class:`LitePullConsumer`),
  which run the core on a private event loop in one thread they start and stop themselves.

::

    from rocketq.client import Producer
    from rocketq.message import Message

    p = Producer("PG", namesrv_addr="127.0.0.1:9876")
    p.start()
    p.send(Message("T", b"hello", tags="TagA"))
    p.send(Message("T", b"paid"), sharding_key="order-42")
    p.shutdown()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketq.client.admin import Admin, AsyncAdmin
    from rocketq.client.aio import QueueSelector, SendResult, SendStatus
    from rocketq.client.lite_pull import LitePullConsumer
    from rocketq.client.orderly import ConsumeOrderlyStatus
    from rocketq.client.push import ConsumeStatus, PushConsumer
    from rocketq.client.sync import Producer
    from rocketq.client.transaction import (
        AsyncTransactionProducer,
        LocalTransactionState,
        TransactionProducer,
        TransactionSendResult,
    )
    from rocketq.message import Message
    from rocketq.protocol.queue import MessageQueue

# Each name is imported from its module on first use (PEP 562): ``import rocketq.client`` costs
# nothing until a class is asked for, and ``from rocketq.client import Producer`` loads the
# producer without the consumers.
_EXPORTS: dict[str, str] = {
    "Admin": "rocketq.client.admin",
    "AsyncAdmin": "rocketq.client.admin",
    "AsyncTransactionProducer": "rocketq.client.transaction",
    "ConsumeOrderlyStatus": "rocketq.client.orderly",
    "ConsumeStatus": "rocketq.client.push",
    "LitePullConsumer": "rocketq.client.lite_pull",
    "LocalTransactionState": "rocketq.client.transaction",
    "Message": "rocketq.message",
    "MessageQueue": "rocketq.protocol.queue",
    "Producer": "rocketq.client.sync",
    "PushConsumer": "rocketq.client.push",
    "QueueSelector": "rocketq.client.aio",
    "SendResult": "rocketq.client.aio",
    "SendStatus": "rocketq.client.aio",
    "TransactionProducer": "rocketq.client.transaction",
    "TransactionSendResult": "rocketq.client.transaction",
}

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncTransactionProducer",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageQueue",
    "Producer",
    "PushConsumer",
    "QueueSelector",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
