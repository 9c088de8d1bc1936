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

from typing import TYPE_CHECKING

from rocketq._lazy import lazy_exports

if TYPE_CHECKING:
    from rocketq.client.admin import Admin, AsyncAdmin
    from rocketq.client.aio import AsyncProducer, QueueSelector, SendResult, SendStatus
    from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel
    from rocketq.client.lite_pull import AsyncLitePullConsumer, LitePullConsumer
    from rocketq.client.orderly import ConsumeOrderlyStatus
    from rocketq.client.push import AsyncPushConsumer, ConsumeStatus, PushConsumer
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
    "AsyncLitePullConsumer": "rocketq.client.lite_pull",
    "AsyncProducer": "rocketq.client.aio",
    "AsyncPushConsumer": "rocketq.client.push",
    "AsyncTransactionProducer": "rocketq.client.transaction",
    "ClientConfig": "rocketq.client.config",
    "ConsumeFromWhere": "rocketq.client.config",
    "ConsumeOrderlyStatus": "rocketq.client.orderly",
    "ConsumeStatus": "rocketq.client.push",
    "LitePullConsumer": "rocketq.client.lite_pull",
    "LocalTransactionState": "rocketq.client.transaction",
    "Message": "rocketq.message",
    "MessageModel": "rocketq.client.config",
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
    "AsyncLitePullConsumer",
    "AsyncProducer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "ClientConfig",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PushConsumer",
    "QueueSelector",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
