"""A batch send held as it arrived: the SEND_BATCH_MESSAGE body and a plan of its messages.

The usual batch of a RocketMQ client (one topic and queue; every message's properties ASCII
``name\\x01value\\x02`` pieces with a UNIQ_KEY, nothing a store parks, see
:func:`rocketq.broker.send_properties.properties_as_sent`) needs no per-message objects on its
way into the CommitLog: the compiled ``batch_plan`` checks the body in one pass and notes where
each message's body and properties lie, and :meth:`CommitLog.put_messages
<rocketq.store.commitlog.CommitLog.put_messages>` packs the records straight from the body
(``batch_write``). A record's properties are the message's text as sent plus the CLUSTER pair,
byte for byte what the general path writes.

:class:`PackedBatch` is still a ``list[BrokerMessage]`` (a
:class:`~rocketq.store.lazy_list.LazyList`) for everything else (traces, the DLedger path, a
put that falls back to the general path): the messages are built from the plan
on first element access and kept; ``len`` does not build them. Without the compiled module
:func:`plan_batch` gives None and the broker builds the messages as before (the reference
path; ``tests/property/test_packed_batch_equivalence.py`` holds the two to the same bytes).

An embedded store's ``put_messages`` of plain ``Message`` objects of one topic comes this way
too: the compiled ``plan_messages`` lays their bodies and properties texts out as such a body
and plan (no suffix), see :mod:`rocketq.store.store_puts`.
"""

from __future__ import annotations

import struct

from rocketq.message import BrokerMessage
from rocketq.speedups import COMPILED
from rocketq.store.lazy_list import LazyList

_batch_plan = getattr(COMPILED, "batch_plan", None)
#: the compiled packer, or None (the pure path)
batch_write = getattr(COMPILED, "batch_write", None)

_PLAN = struct.Struct(">qqqqq")  # body start, body length, properties start, properties length, flag


class PackedBatch(LazyList[BrokerMessage]):
    """The messages of one batch send to one topic and queue (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: bytes,
        data: bytes,
        suffix: bytes,
        planned: tuple[bytes, int, int, int, int, int, int],
    ) -> None:
        super().__init__()
        self.topic = topic
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.data = data
        #: what every record's properties end with (the CLUSTER pair)
        self.suffix = suffix
        (
            self.plan,
            self.msg_count,
            self.body_bytes,
            self.props_bytes,
            self.max_body,
            self.max_props,
            self.max_payload,
        ) = planned
        self._count = self.msg_count
        self._built = False

    def _items(self) -> list[BrokerMessage]:
        data = self.data
        suffix = self.suffix
        return [
            BrokerMessage(
                self.topic,
                data[bs : bs + bl],
                data[ps : ps + pl] + suffix,
                self.queue_id,
                flag,
                self.sys_flag,
                self.born_timestamp,
                self.born_host,
            )
            for bs, bl, ps, pl, flag in _PLAN.iter_unpack(self.plan)
        ]


def plan_batch(
    data: bytes,
    suffix: bytes,
    shared: tuple[bytes, ...],
    *,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
) -> PackedBatch | None:
    """The batch as a :class:`PackedBatch` when the compiled module takes it (the usual batch,
    see the module docstring; ``shared``: the names of the batch-wide properties every message
    must already have), else None: the caller builds the messages itself."""
    if _batch_plan is None or type(data) is not bytes:
        return None
    planned = _batch_plan(data, suffix, shared)
    if planned is None:
        return None
    return PackedBatch(topic, queue_id, sys_flag, born_timestamp, born_host, data, suffix, planned)
