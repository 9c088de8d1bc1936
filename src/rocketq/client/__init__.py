"""The rocketq client SDK: one asyncio implementation, two faces.

* the asyncio classes (:class:`AsyncProducer`, :class:`AsyncTransactionProducer`,
  :class:`AsyncPushConsumer`, :class:`AsyncLitePullConsumer`, :class:`AsyncAdmin`), used from a
  running event loop;
* the synchronous facades (:class:`Producer`, :class:`TransactionProducer`,
  :class:`PushConsumer`, :class:`LitePullConsumer`, :class:`Admin`), which run the asyncio class
  on a private event loop in one thread they start and stop themselves, with the same keyword
  arguments and methods.

Settings shared by every client are a :class:`ClientConfig` (``config=``); the consumers'
``consume_from_where`` and ``message_model`` are :class:`ConsumeFromWhere` and
:class:`MessageModel` (RocketMQ's strings are accepted too).

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
from rocketq.client.aio import AsyncProducer, QueueSelector, SendResult, SendStatus
from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel
from rocketq.client.lite_pull import AsyncLitePullConsumer, LitePullConsumer
from rocketq.client.sync import Producer
from rocketq.message import Message

__all__ = [
    "AsyncLitePullConsumer",
    "AsyncProducer",
    "ClientConfig",
    "ConsumeFromWhere",
    "LitePullConsumer",
    "Message",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "QueueSelector",
    "SendResult",
    "SendStatus",
]

from rocketq.client.admin import Admin, AsyncAdmin

__all__ += ["Admin", "AsyncAdmin"]

from rocketq.client.orderly import ConsumeOrderlyStatus  # noqa: E402
from rocketq.client.push import AsyncPushConsumer, ConsumeStatus, PushConsumer  # noqa: E402

__all__ += ["AsyncPushConsumer", "ConsumeOrderlyStatus", "ConsumeStatus", "PushConsumer"]

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
