"""Pop consumption (RocketMQ 5 SimpleConsumer / PushConsumer): receive with an invisible time,
ack or change the invisible time by receipt handle, redelivery with attempt counting, DLQ.

:class:`~rocketq.broker.pop.service.PopService` is the engine; ``state`` is its pure in-memory
model, ``journal`` its durable log, ``receipt`` the handle codec.
"""

from rocketq.broker.pop.service import PoppedMessage, PopService

__all__ = ["PopService", "PoppedMessage"]
