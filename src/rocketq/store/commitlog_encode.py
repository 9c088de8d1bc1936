"""Record encoding of the CommitLog's general put path: a message checked against every limit
and turned into the layout its record is packed with, before the put lock is taken.

``_encode`` validates one message (topic, body, properties, born host, record and segment
size) and returns the compiled ``struct`` layout, the record length, the body CRC, the sys flag
and whether the message takes a queue offset; it raises before anything is written. Along the
way it compiles and caches, per topic, the layouts of (body, properties) length pairs that pass
every limit with an IPv4 born host: the put fast paths in ``commitlog.py`` trust that cache and
skip this module entirely, so a put of a known shape costs no call here.
"""

from __future__ import annotations

import struct
import zlib

from rocketq.errors import MessageBodyTooLarge, MessageIllegal, PropertiesTooLarge
from rocketq.message import BrokerMessage, validate_topic
from rocketq.protocol import record as rec
from rocketq.protocol.record import MESSAGE_MAGIC_CODE
from rocketq.store.queue_offsets import QueueOffsetTable

_crc32 = zlib.crc32
_NOT_IN_QUEUE = frozenset((rec.TRANSACTION_PREPARED_TYPE, rec.TRANSACTION_ROLLBACK_TYPE))
#: RocketMQ's encoder allows a whole record up to maxMessageSize + 64 KiB.
RECORD_SLACK = 64 * 1024

# (message, layout, record length, body CRC, sys flag, in ConsumeQueue?, topic bytes, properties, magic)
Encoded = tuple[BrokerMessage, struct.Struct, int, int, int, bool, bytes, bytes, int]

#: Per topic: UTF-8 bytes, needs V2, compiled V1/IPv4 layouts keyed ``body_len << 16 | props_len``
#: (only shapes within every limit), and the topic's next queue offsets (queue id → offset).
TopicInfo = tuple[bytes, bool, dict[int, tuple[struct.Struct, int]], dict[int, int]]


class RecordEncoder:
    """The encoding half of :class:`~rocketq.store.commitlog.CommitLog` (a base class of it)."""

    file_size: int
    topic_queue_table: QueueOffsetTable
    _topic_cache: dict[str, TopicInfo]
    _max_body: int
    _max_record: int
    _max_props: int
    _prop_crc: bool
    _store_host_len: int
    _store_v6: int
    _v1_base_len: int

    def _topic_info(self, topic: str) -> TopicInfo:
        info = self._topic_cache.get(topic)
        if info is None:
            validate_topic(topic)
            info = (
                topic.encode("utf-8"),
                len(topic) > rec.MAX_TOPIC_LENGTH_V1,
                {},
                self.topic_queue_table.of_topic(topic),
            )
            if len(self._topic_cache) > 100_000:
                self._topic_cache.clear()
            self._topic_cache[topic] = info
        return info

    def _encode(self, m: BrokerMessage) -> Encoded:
        """Validate one message and compute its layout; raises before anything is written."""
        topic = m.topic
        info = self._topic_cache.get(topic)
        if info is None:
            info = self._topic_info(topic)
        topic_b, v2, shapes, _ = info
        body = m.body
        bl = len(body)
        props = m.properties
        pl = len(props)
        born = m.born_host
        tl = len(topic_b)
        length = self._v1_base_len + bl + tl + pl
        if (
            not v2
            and len(born) == 8
            and not self._prop_crc
            and bl <= self._max_body
            and pl <= self._max_props
            and length <= self._max_record
            and length + rec.END_FILE_MIN_BLANK_LENGTH <= self.file_size
        ):
            # Only shapes that passed every limit are cached: the put fast path trusts them.
            shape = shapes.get(bl << 16 | pl)
            if shape is not None:
                fmt = shape[0]
            else:
                fmt = rec.record_layout(8, self._store_host_len, False, bl, tl, pl)
                if len(shapes) >= 4096:
                    shapes.clear()
                shapes[bl << 16 | pl] = (fmt, length)
            sys_flag = (m.sys_flag & ~0x30) | self._store_v6
            tx = sys_flag & 0xC
            return (m, fmt, length, _crc32(body) & 0x7FFFFFFF, sys_flag, tx not in _NOT_IN_QUEUE,
                    topic_b, props, MESSAGE_MAGIC_CODE)  # fmt: skip
        if bl > self._max_body:
            raise MessageBodyTooLarge(f"message body {bl} B exceeds max {self._max_body} B")
        if self._prop_crc:
            props = rec.properties_with_crc_slot(props)
            pl = len(props)
        if pl > self._max_props:
            raise PropertiesTooLarge(f"message properties {pl} B exceed max {self._max_props} B")
        if len(born) not in (8, 20):
            raise MessageIllegal(f"born host of {len(born)} bytes is neither IPv4 (8) nor IPv6 (20)")
        sys_flag = (m.sys_flag & ~0x30) | (rec.BORNHOST_V6_FLAG if len(born) == 20 else 0) | self._store_v6
        length = 72 + len(born) + self._store_host_len + bl + (2 if v2 else 1) + tl + 2 + pl
        if length > self._max_record or length + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise MessageIllegal(
                f"record of {length} B exceeds the limit of {min(self._max_record, self.file_size - 8)} B"
            )
        fmt = rec.record_layout(len(born), self._store_host_len, v2, bl, tl, pl)
        tx = sys_flag & 0xC
        magic = rec.MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE
        return (
            m,
            fmt,
            length,
            _crc32(body) & 0x7FFFFFFF,
            sys_flag,
            tx not in _NOT_IN_QUEUE,
            topic_b,
            props,
            magic,
        )
