"""``MessageQueue``: one queue of a topic on one broker, as clients, brokers and admin tools name it.

JSON (fastjson writes bean fields alphabetically; a map keyed by queues writes each key as this
object, see :mod:`rocketq.protocol.fastjson`)::

    {"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}

Queues order by (topic, broker name, queue id), the order Java's ``MessageQueue.compareTo`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocketq.protocol.fastjson import ObjectKey, as_int, as_str


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        """Tolerant: a missing topic or broker name reads as "", a missing queue id as -1."""
        return cls(
            as_str(obj.get("topic"), ""), as_str(obj.get("brokerName"), ""), as_int(obj.get("queueId"), -1)
        )


def message_queue_table(table: object) -> dict[MessageQueue, Any]:
    """A parsed ``offsetTable`` (:func:`~rocketq.protocol.fastjson.loads_object_keys`) →
    ``{MessageQueue: value}``; keys that are not objects are skipped."""
    if not isinstance(table, dict):
        return {}
    return {
        MessageQueue.from_json(key.as_dict()): value
        for key, value in table.items()
        if isinstance(key, ObjectKey)
    }


__all__ = ["MessageQueue", "message_queue_table"]
