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

from rocketq.client._routes import MessageQueue
from rocketq.client.aio import QueueSelector, SendResult, SendStatus
from rocketq.client.lite_pull import LitePullConsumer
from rocketq.client.sync import Producer
from rocketq.message import Message

__all__ = [
    "LitePullConsumer",
    "Message",
    "MessageQueue",
    "Producer",
    "QueueSelector",
    "SendResult",
    "SendStatus",
]

from rocketq.client.admin import Admin, AsyncAdmin

__all__ += ["Admin", "AsyncAdmin"]

from rocketq.client.orderly import ConsumeOrderlyStatus  # noqa: E402
from rocketq.client.push import ConsumeStatus, PushConsumer  # noqa: E402

__all__ += ["ConsumeOrderlyStatus", "ConsumeStatus", "PushConsumer"]

from rocketq.client.transaction import (  # noqa: E402
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)

__all__ += [
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
]
