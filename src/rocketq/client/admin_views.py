"""What the admin answers: result records and the stored messages it reads.

The records (:class:`BrokerEntry`, :class:`QueueStatus`, :class:`QueueProgress`,
:class:`ConsumerProgress`) are frozen dataclasses built from the name servers' and brokers'
answers. :func:`decode_messages` reads the stored records of a PULL/QUERY/VIEW response body
(spec §3.9) into :class:`MessageView` objects: unlike a consumer's decode, a poison message (body
CRC mismatch, a body that does not inflate) is shown with its body as stored and the reason in
``undecodable``, since an operator looks at it to find out what went wrong. ``_int`` reads the
loosely typed numbers of the brokers' JSON answers.
"""

from __future__ import annotations

import base64
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any

from rocketq.errors import BodyFormatError
from rocketq.message import PropertyAccessors, create_offset_msg_id, decode_properties, unpack_socket_addr
from rocketq.protocol.record import RecordKind, body_crc, decode_record

log = logging.getLogger(__name__)


_SYS_FLAG_COMPRESSED = 0x1


# -- results -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BrokerEntry:
    """One broker instance of a cluster (``clusterList``)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    #: DLedger mode: the broker's role in its group and the term (its runtime info; else "")
    dledger_role: str = ""
    dledger_term: str = ""


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's offsets (``topicStatus``)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue's consumption by a group (``consumerProgress``)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    """A group's consumption over its queues, with totals."""

    group: str
    queues: tuple[QueueProgress, ...]
    consume_tps: float = 0.0

    @property
    def total_broker_offset(self) -> int:
        return sum(q.broker_offset for q in self.queues)

    @property
    def total_consumer_offset(self) -> int:
        return sum(q.consumer_offset for q in self.queues)

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True, slots=True)
class MessageView(PropertyAccessors):
    """A stored message as admin tools show it; ``msg_id`` is the offset message id."""

    topic: str
    msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    #: Why the record is a poison message (CRC mismatch, a body marked compressed that does not
    #: inflate), "" when it decoded; ``body`` is then the body as stored.
    undecodable: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the body as UTF-8 text (``body``) and exactly (``bodyBase64``);
        ``undecodable`` only for a poison message."""
        out = {
            "topic": self.topic,
            "msgId": self.msg_id,
            "uniqKey": self.uniq_key,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.commit_log_offset,
            "tags": self.tags,
            "keys": self.keys,
            "properties": dict(self.properties),
            "flag": self.flag,
            "sysFlag": self.sys_flag,
            "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host,
            "storeTimestamp": self.store_timestamp,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "body": self.body.decode("utf-8", "replace"),
            "bodyBase64": base64.b64encode(self.body).decode("ascii"),
        }
        if self.undecodable:
            out["undecodable"] = self.undecodable
        return out


def decode_messages(body: bytes, what: str) -> list[MessageView]:
    """The stored records of a PULL/QUERY/VIEW response body (spec §3.9), in order. A poison
    message (body CRC mismatch, a body marked compressed that does not inflate) comes back with
    its body as stored and the reason in ``undecodable`` (logged at WARNING), not as an error;
    a record that does not parse at all raises BodyFormatError."""
    out: list[MessageView] = []
    pos = 0
    while pos < len(body):
        view = decode_record(body, pos, check_crc=False)
        if view.kind is RecordKind.END:
            break
        if view.kind is not RecordKind.MESSAGE or view.size <= 0:
            raise BodyFormatError(
                f"{what}: undecodable record at byte {pos}: {view.reason or view.kind.name}"
            )
        raw = view.body or b""
        undecodable = ""
        if body_crc(raw) != view.body_crc:
            undecodable = f"body CRC mismatch: stored {view.body_crc}, computed {body_crc(raw)}"
        elif view.sys_flag & _SYS_FLAG_COMPRESSED:
            ctype = (view.sys_flag & 0x700) >> 8
            if ctype not in (0, 3):
                undecodable = (
                    f"body compressed with type {ctype} (sysFlag 0x{view.sys_flag:X}); only zlib is supported"
                )
            else:
                try:
                    raw = zlib.decompress(raw)
                except zlib.error as exc:
                    undecodable = (
                        f"body marked compressed (sysFlag 0x{view.sys_flag:X}) does not inflate: {exc}"
                    )
        if undecodable:
            log.warning(
                "%s: poison message at offset %d of %s/%d (commit-log offset %d): %s; body left as stored",
                what, view.queue_offset, view.topic, view.queue_id, view.physical_offset, undecodable,
            )  # fmt: skip
        out.append(
            MessageView(
                topic=view.topic,
                msg_id=create_offset_msg_id(view.store_host, view.physical_offset),
                queue_id=view.queue_id,
                queue_offset=view.queue_offset,
                commit_log_offset=view.physical_offset,
                body=raw,
                properties=decode_properties(view.properties),
                flag=view.flag,
                sys_flag=view.sys_flag,
                born_timestamp=view.born_timestamp,
                born_host=_host(view.born_host),
                store_timestamp=view.store_timestamp,
                store_host=_host(view.store_host),
                reconsume_times=view.reconsume_times,
                undecodable=undecodable,
            )
        )
        pos += view.size
    return out


def _host(raw: bytes) -> str:
    try:
        return unpack_socket_addr(raw)
    except ValueError:
        return ""


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default
