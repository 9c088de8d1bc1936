"""QueryRoute answers: message queues, permissions, endpoints and accepted message types.

Topic message types are RocketMQ 5's topic attribute ``message.type`` (set with
``rocketq admin updateTopic -a +message.type=FIFO``)::

    attribute value       accept_message_types           a send of another type
    --------------------  -----------------------------  ---------------------------------
    NORMAL (or absent)    NORMAL                         MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    FIFO                  FIFO                           (40014), as the RocketMQ 5 proxy
    DELAY                 DELAY
    TRANSACTION           TRANSACTION
    MIXED                 NORMAL FIFO DELAY TRANSACTION  accepted

A topic without the attribute is a NORMAL topic, as in RocketMQ 5 (``TopicConfig
.getTopicMessageType`` defaults to NORMAL).

Queues (``genMessageQueueFromQueueData``): with r read and w write queues, ids
``0 .. min(r, w)-1`` are READ_WRITE, then ``r - min`` READ-only ids, then ``w - min`` WRITE-only
ids; a topic without the read (write) permission turns them into WRITE (READ) or NONE.
"""

from __future__ import annotations

import ipaddress

from rocketq.errors import InvalidParameter
from rocketq.protocol.topic import TopicConfig, is_readable, is_writeable
from rocketq.proxy.convert import MessageTypeError, type_name
from rocketq.proxy.v2 import definition_pb2 as pb

MESSAGE_TYPE_ATTRIBUTE = "message.type"
TOPIC_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")

_ACCEPT: dict[str, tuple[pb.MessageType, ...]] = {
    "NORMAL": (pb.NORMAL,),
    "FIFO": (pb.FIFO,),
    "DELAY": (pb.DELAY,),
    "TRANSACTION": (pb.TRANSACTION,),
    "MIXED": (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION),
}


def topic_message_type(tc: TopicConfig) -> str:
    """The topic's message type (``NORMAL`` when the attribute is absent or empty)."""
    raw = tc.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "").strip().upper()
    return raw if raw in _ACCEPT else "NORMAL"


def accept_message_types(topic_type: str) -> tuple[pb.MessageType, ...]:
    return _ACCEPT.get(topic_type, _ACCEPT["NORMAL"])


def check_message_type(topic: str, topic_type: str, message_type: pb.MessageType) -> None:
    """Refuse a send whose type the topic does not accept (:class:`MessageTypeError`)."""
    if message_type not in accept_message_types(topic_type):
        raise MessageTypeError(
            f"topic {topic} is a {topic_type} topic and does not accept "
            f"{type_name(message_type)} messages (set its message.type attribute)"
        )


def endpoints(host: str, port: int) -> pb.Endpoints:
    """Endpoints of ``host:port`` with the address scheme the SDKs expect."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        scheme = pb.DOMAIN_NAME
    else:
        scheme = pb.IPv4 if ip.version == 4 else pb.IPv6
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def parse_endpoint(text: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[h]:port``) → (host, port); :class:`InvalidParameter` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InvalidParameter(f"endpoint {text!r} is not host:port")
    return host.strip("[]"), int(port)


def _permission(readable: bool, writeable: bool) -> pb.Permission:
    if readable and writeable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writeable:
        return pb.WRITE
    return pb.NONE


def queue_permissions(tc: TopicConfig) -> list[pb.Permission]:
    """The permission of each queue id of ``tc`` (see the module docstring)."""
    r, w = tc.read_queue_nums, tc.write_queue_nums
    both = min(r, w)
    readable, writeable = is_readable(tc.perm), is_writeable(tc.perm)
    perms = [_permission(readable, writeable)] * both
    perms += [_permission(readable, False)] * (r - both)
    perms += [_permission(False, writeable)] * (w - both)
    return perms


def message_queues(
    tc: TopicConfig, *, broker_name: str, broker_endpoints: pb.Endpoints, namespace: str = ""
) -> list[pb.MessageQueue]:
    accept = accept_message_types(topic_message_type(tc))
    topic = pb.Resource(name=tc.topic_name, resource_namespace=namespace)
    broker = pb.Broker(name=broker_name, id=0, endpoints=broker_endpoints)
    return [
        pb.MessageQueue(topic=topic, id=i, permission=perm, broker=broker, accept_message_types=accept)
        for i, perm in enumerate(queue_permissions(tc))
    ]


def assignments(queues: list[pb.MessageQueue]) -> list[pb.Assignment]:
    """The QueryAssignment answer: one assignment per readable queue."""
    return [pb.Assignment(message_queue=q) for q in queues if q.permission in (pb.READ, pb.READ_WRITE)]


__all__ = [
    "MESSAGE_TYPE_ATTRIBUTE",
    "TOPIC_TYPES",
    "accept_message_types",
    "assignments",
    "check_message_type",
    "endpoints",
    "message_queues",
    "parse_endpoint",
    "queue_permissions",
    "topic_message_type",
]
