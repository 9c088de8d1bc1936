"""A store directory laid out byte for byte as Apache RocketMQ writes it.

Everything here is built with :mod:`struct` straight from the tables of
``spec/store-format.md`` and deliberately shares no code with ``rocketq.store``: the record
layout (§1.2), the end-of-segment BLANK (§1.3), the properties string (§2), offset message ids
(§3.1), client unique ids (§3.2), the tags code and Java ``String.hashCode`` (§4), ConsumeQueue
units (§5.1, §5.2), index files with RocketMQ's ``putKey`` and roll rules (§6), the checkpoint
(§7.1) and fastjson config files (§7.3).

The builder mimics the Java writer step by step: :meth:`RocketMQFixture.put` appends a record as
``CommitLog.DefaultAppendMessageCallback.doAppend`` would (rolling to the next segment behind an
8-byte BLANK when ``length + 8`` does not fit), and :meth:`RocketMQFixture.dispatch` does what
``ReputMessageService`` does with it (ConsumeQueue unit, then index entries).
"""

from __future__ import annotations

import calendar
import ipaddress
import os
import random
import struct
import time
import zlib
from dataclasses import dataclass, field

# §1.1 magic codes, as signed big-endian int32.
MESSAGE_MAGIC_CODE_V1 = -626843481
BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8

# §1.4 SYSFLAG bits.
TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

# §5.1 / §6.1 / §7.1 sizes.
CQ_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
CHECKPOINT_SIZE = 4096

INT32_MAX = 0x7FFFFFFF
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


# -- §4: Java String.hashCode ------------------------------------------------------------------
def java_string_hash(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units, int32 wrap-around, as a signed int."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h >= 0x8000_0000 else h


def tags_code(tags: str | None) -> int:
    """``tagsString2tagsCode``: 0 for no tags, else the hash sign-extended to 64 bits."""
    return java_string_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: ``Math.abs(hashCode)``; a still negative result gives 0."""
    h = java_string_hash(key)
    if h == -0x8000_0000:  # Math.abs(Integer.MIN_VALUE) is Integer.MIN_VALUE
        return 0
    return abs(h)


def parse_delay_levels(text: str) -> dict[int, int]:
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return {level: int(item[:-1]) * units[item[-1]] for level, item in enumerate(text.split(), start=1)}


# -- §1.2 hosts, §2 properties, §3 ids -----------------------------------------------------------
def pack_host(ip: str, port: int) -> bytes:
    """4 or 16 address bytes followed by an int32 port."""
    return ipaddress.ip_address(ip).packed + struct.pack(">i", port)


def host_text(ip: str, port: int) -> str:
    addr = ipaddress.ip_address(ip)
    return f"[{addr.compressed}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def properties_string(pairs: list[tuple[str, str]]) -> str:
    """``name \\x01 value \\x02`` for every pair, concatenated."""
    return "".join(f"{name}\x01{value}\x02" for name, value in pairs)


def offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """§3.1: store ip ‖ port ‖ int64 offset as uppercase hex."""
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()


def java_calendar_local_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Epoch ms of a local wall-clock time as ``java.util.Calendar`` resolves it: of two instants
    (the hour repeated when clocks go back) the later one, standard time; in the hour skipped when
    they go forward, the instant the offset in force before the change gives."""
    as_utc = calendar.timegm((year, month, day, hour, minute, 0))
    before = time.localtime(as_utc - 86_400).tm_gmtoff
    after = time.localtime(as_utc + 86_400).tm_gmtoff
    wall = (year, month, day, hour, minute)
    valid = [t for t in (as_utc - before, as_utc - after) if tuple(time.localtime(t)[:5]) == wall]
    return (max(valid) if valid else as_utc - before) * 1000


def client_unique_id(ip: bytes, pid: int, loader_hash: int, born_ms: int, counter: int) -> str:
    """§3.2 ``MessageClientIDSetter``: ip ‖ short pid ‖ int classloader hash ‖ int ms since the
    start of the month (local time) ‖ short counter, uppercase hex."""
    born = time.localtime(born_ms // 1000)
    since_month = born_ms - java_calendar_local_ms(born.tm_year, born.tm_mon, 1)
    # Java's ``(int) (current - startTime)``: from about 20:31 on the 25th the milliseconds since
    # the month's start pass 2^31 - 1 and the field wraps to a negative int
    as_java_int = (since_month + 2**31) % 2**32 - 2**31
    raw = ip + struct.pack(">hiih", pid, loader_hash, as_java_int, counter & 0xFFFF)
    return raw.hex().upper()


def time_millis_to_human_string(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


# -- §1.2: one CommitLog record, field by field ----------------------------------------------------
def assemble_record(
    *,
    magic: bytes,
    body_crc_value: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
    topic_len_width: int,
) -> bytes:
    """The fields of spec §1.2 in their order, each as given (no checks): TOTALSIZE counts the
    record, the TOPIC LENGTH takes ``topic_len_width`` bytes (1 in V1 records, 2 in V2)."""
    topic_len = struct.pack(">b", len(topic)) if topic_len_width == 1 else struct.pack(">h", len(topic))
    fields = [
        magic,  # 2 MAGICCODE
        struct.pack(">i", body_crc_value),  # 3 BODYCRC
        struct.pack(">i", queue_id),  # 4 QUEUEID
        struct.pack(">i", flag),  # 5 FLAG
        struct.pack(">q", queue_offset),  # 6 QUEUEOFFSET
        struct.pack(">q", physical_offset),  # 7 PHYSICALOFFSET
        struct.pack(">i", sys_flag),  # 8 SYSFLAG
        struct.pack(">q", born_timestamp),  # 9 BORNTIMESTAMP
        born_host,  # 10 BORNHOST
        struct.pack(">q", store_timestamp),  # 11 STORETIMESTAMP
        store_host,  # 12 STOREHOST
        struct.pack(">i", reconsume_times),  # 13 RECONSUMETIMES
        struct.pack(">q", prepared_transaction_offset),  # 14 PREPARED TRANSACTION OFFSET
        struct.pack(">i", len(body)),  # 15 BODY LENGTH
        body,  # 16 BODY
        topic_len,  # 17 TOPIC LENGTH
        topic,  # 18 TOPIC
        struct.pack(">h", len(properties)),  # 19 PROPERTIES LENGTH
        properties,  # 20 PROPERTIES
    ]
    rest = b"".join(fields)
    return struct.pack(">i", 4 + len(rest)) + rest  # 1 TOTALSIZE


def encode_v1_record(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: str,
) -> bytes:
    topic_bytes = topic.encode("utf-8")
    props_bytes = properties.encode("utf-8")
    assert len(topic_bytes) <= 127 and len(props_bytes) <= 32767
    assert len(born_host) == (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    assert len(store_host) == (20 if sys_flag & STOREHOST_V6_FLAG else 8)
    # calMsgLength: 72 + BH + SH + bodyLen + TL(1) + topicLen + 2 + propLen
    total = 72 + len(born_host) + len(store_host) + len(body) + 1 + len(topic_bytes) + 2 + len(props_bytes)
    record = assemble_record(
        magic=struct.pack(">i", MESSAGE_MAGIC_CODE_V1),
        body_crc_value=zlib.crc32(body) & 0x7FFFFFFF,  # masked
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        body=body,
        topic=topic_bytes,
        properties=props_bytes,
        topic_len_width=1,  # V1: 1 signed byte
    )
    assert len(record) == total
    return record


# -- §6: one index file ----------------------------------------------------------------------------
class IndexFileImage:
    """An index file built by RocketMQ's ``IndexFile.putKey`` rules (§6.3)."""

    def __init__(self, name: str, hash_slot_num: int, index_num: int, end_phy: int, end_ts: int) -> None:
        self.name = name
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.buf = bytearray(
            INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE
        )
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        # A new file starts where the previous one ended (IndexFile constructor).
        if end_phy > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy
        if end_ts > 0:
            self.begin_timestamp = self.end_timestamp = end_ts
        #: (entry number, key, physical offset) of every entry, in order.
        self.entries: list[tuple[int, str, int]] = []

    @property
    def entries_pos(self) -> int:
        return INDEX_HEADER_SIZE + self.hash_slot_num * INDEX_SLOT_SIZE

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        if self.is_full():
            return False
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE
        (slot_value,) = struct.unpack_from(">i", self.buf, slot_pos)
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = int((store_timestamp - self.begin_timestamp) / 1000)  # Java long division
            time_diff = min(max(time_diff, 0), INT32_MAX)
        entry_pos = self.entries_pos + self.index_count * INDEX_ENTRY_SIZE
        struct.pack_into(">i", self.buf, entry_pos, key_hash)
        struct.pack_into(">q", self.buf, entry_pos + 4, phy_offset)
        struct.pack_into(">i", self.buf, entry_pos + 12, time_diff)
        struct.pack_into(">i", self.buf, entry_pos + 16, slot_value)
        struct.pack_into(">i", self.buf, slot_pos, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == 0:
            self.hash_slot_count += 1
        self.entries.append((self.index_count, key, phy_offset))
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def image(self) -> bytes:
        header = struct.pack(
            ">qqqqii",
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        return header + bytes(self.buf[INDEX_HEADER_SIZE:])


# -- the store -------------------------------------------------------------------------------------
@dataclass
class StoredMessage:
    """One record of the fixture and every value a reader must get back from it."""

    topic: str
    queue_id: int
    body: bytes
    properties: list[tuple[str, str]]
    flag: int
    sys_flag: int
    queue_offset: int
    physical_offset: int
    size: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    msg_id: str
    body_crc: int
    in_queue: bool
    tags_code: int
    record: bytes
    dispatched: bool = False
    torn: bool = False

    @property
    def props(self) -> dict[str, str]:
        return dict(self.properties)

    @property
    def tags(self) -> str | None:
        return self.props.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.props.get("KEYS", "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        return self.props.get("UNIQ_KEY")

    @property
    def index_keys(self) -> list[str]:
        """What ``IndexService.buildIndex`` indexes: UNIQ_KEY, then every KEYS piece."""
        out = [self.uniq_key] if self.uniq_key else []
        return out + self.keys


@dataclass
class RocketMQFixture:
    commitlog_file_size: int
    cq_file_size: int
    hash_slot_num: int
    index_num: int
    store_ip: str
    store_port: int
    delay_levels: dict[int, int] = field(default_factory=lambda: parse_delay_levels(DEFAULT_DELAY_LEVELS))

    def __post_init__(self) -> None:
        self.store_host = pack_host(self.store_ip, self.store_port)
        self.segments: dict[int, bytearray] = {}
        self.write_offset = 0  # next physical offset to write
        self.messages: list[StoredMessage] = []
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.cq_units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.cq_max_physic: dict[tuple[str, int], int] = {}
        self.index_files: list[IndexFileImage] = []
        self.blanks: list[tuple[int, int]] = []  # (offset, bytes declared unused)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.consumer_offsets: dict[str, dict[int, int]] = {}
        self.delay_offsets: dict[int, int] = {}

    # -- CommitLog writer --------------------------------------------------------------------------
    def _segment(self, start: int) -> bytearray:
        if start not in self.segments:
            self.segments[start] = bytearray(self.commitlog_file_size)
        return self.segments[start]

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: list[tuple[str, str]],
        *,
        store_timestamp: int,
        born_timestamp: int,
        born_ip: str,
        born_port: int,
        flag: int = 0,
        sys_flag: int = 0,
        dispatch: bool = True,
    ) -> StoredMessage:
        born_host = pack_host(born_ip, born_port)
        if len(born_host) == 20:
            sys_flag |= BORNHOST_V6_FLAG
        tx = sys_flag & TRANSACTION_MASK
        in_queue = tx not in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK)
        key = (topic, queue_id)
        queue_offset = self.queue_offsets.get(key, 0) if in_queue else 0
        # Length first, so the roll decision uses the real record size.
        probe = encode_v1_record(
            topic=topic, queue_id=queue_id, flag=flag, queue_offset=queue_offset, physical_offset=0,
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            store_timestamp=store_timestamp, store_host=self.store_host, reconsume_times=0,
            prepared_transaction_offset=0, body=body, properties=properties_string(properties),
        )  # fmt: skip
        length = len(probe)
        seg_start = self.write_offset - self.write_offset % self.commitlog_file_size
        pos = self.write_offset - seg_start
        seg = self._segment(seg_start)
        max_blank = self.commitlog_file_size - pos
        if length + END_FILE_MIN_BLANK_LENGTH > max_blank:
            # §1.3: int32 bytes left ‖ int32 BLANK magic; the rest of the file stays zero.
            struct.pack_into(">i", seg, pos, max_blank)
            struct.pack_into(">i", seg, pos + 4, BLANK_MAGIC_CODE)
            self.blanks.append((self.write_offset, max_blank))
            self.write_offset = seg_start + self.commitlog_file_size
            seg_start = self.write_offset
            pos = 0
            seg = self._segment(seg_start)
        record = encode_v1_record(
            topic=topic, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
            physical_offset=self.write_offset, sys_flag=sys_flag, born_timestamp=born_timestamp,
            born_host=born_host, store_timestamp=store_timestamp, store_host=self.store_host,
            reconsume_times=0, prepared_transaction_offset=0, body=body,
            properties=properties_string(properties),
        )  # fmt: skip
        seg[pos : pos + length] = record
        props = dict(properties)
        if topic == SCHEDULE_TOPIC and "DELAY" in props:
            # §5.2: a delayed message's tags code is its delivery time.
            level = min(int(props["DELAY"]), max(self.delay_levels))
            code = store_timestamp + self.delay_levels.get(level, 1000)
        else:
            code = tags_code(props.get("TAGS"))
        msg = StoredMessage(
            topic=topic,
            queue_id=queue_id,
            body=body,
            properties=properties,
            flag=flag,
            sys_flag=sys_flag,
            queue_offset=queue_offset,
            physical_offset=self.write_offset,
            size=length,
            born_timestamp=born_timestamp,
            born_host=host_text(born_ip, born_port),
            store_timestamp=store_timestamp,
            store_host=host_text(self.store_ip, self.store_port),
            msg_id=offset_msg_id(self.store_host, self.write_offset),
            body_crc=zlib.crc32(body) & 0x7FFFFFFF,
            in_queue=in_queue,
            tags_code=code,
            record=record,
        )
        self.messages.append(msg)
        self.write_offset += length
        if in_queue:
            self.queue_offsets[key] = queue_offset + 1
        if dispatch:
            self.dispatch(msg)
        return msg

    def tear(self, msg: StoredMessage) -> None:
        """Zero the second half of ``msg``'s record, as a crash in the middle of a write leaves it."""
        seg_start = msg.physical_offset - msg.physical_offset % self.commitlog_file_size
        pos = msg.physical_offset - seg_start
        half = msg.size // 2
        self.segments[seg_start][pos + half : pos + msg.size] = bytes(msg.size - half)
        msg.torn = True

    # -- ReputMessageService: ConsumeQueue, then index ----------------------------------------------
    def dispatch(self, msg: StoredMessage) -> None:
        msg.dispatched = True
        if msg.in_queue:
            key = (msg.topic, msg.queue_id)
            if msg.physical_offset + msg.size > self.cq_max_physic.get(key, -1):
                units = self.cq_units.setdefault(key, [])
                assert len(units) == msg.queue_offset
                units.append((msg.physical_offset, msg.size, msg.tags_code))
                self.cq_max_physic[key] = msg.physical_offset + msg.size
                self.logics_msg_timestamp = msg.store_timestamp
        self._build_index(msg)

    def _last_index_file(self, now_ms: int) -> IndexFileImage:
        last = self.index_files[-1] if self.index_files else None
        if last is not None and not last.is_full():
            return last
        end_phy = last.end_phy_offset if last is not None else 0
        end_ts = last.end_timestamp if last is not None else 0
        name = time_millis_to_human_string(now_ms)
        while self.index_files and name <= self.index_files[-1].name:
            now_ms += 1
            name = time_millis_to_human_string(now_ms)
        f = IndexFileImage(name, self.hash_slot_num, self.index_num, end_phy, end_ts)
        self.index_files.append(f)
        if last is not None:
            # The full file is flushed, and its end time becomes the checkpoint's index time.
            self.index_msg_timestamp = last.end_timestamp
        return f

    def _build_index(self, msg: StoredMessage) -> None:
        f = self._last_index_file(msg.store_timestamp)
        if msg.physical_offset < f.end_phy_offset:
            return
        if msg.sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK:
            return
        for key in msg.index_keys:
            index_key = f"{msg.topic}#{key}"
            while not f.put_key(index_key, msg.physical_offset, msg.store_timestamp):
                f = self._last_index_file(msg.store_timestamp)

    # -- files ---------------------------------------------------------------------------------------
    def write(self, root: str, *, abort: bool) -> dict[str, bytes]:
        """Write the store under ``root``; returns every file written, by relative path."""
        files: dict[str, bytes] = {}
        for start, seg in sorted(self.segments.items()):
            files[f"commitlog/{start:020d}"] = bytes(seg)
        for (topic, qid), units in self.cq_units.items():
            data = b"".join(struct.pack(">qiq", *u) for u in units)
            for start in range(0, max(len(data), 1), self.cq_file_size):
                chunk = data[start : start + self.cq_file_size]
                files[f"consumequeue/{topic}/{qid}/{start:020d}"] = chunk.ljust(self.cq_file_size, b"\0")
        for f in self.index_files:
            files[f"index/{f.name}"] = f.image()
        checkpoint = struct.pack(
            ">qqq", self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        files["checkpoint"] = checkpoint.ljust(CHECKPOINT_SIZE, b"\0")
        files["config/consumerOffset.json"] = fastjson_consumer_offsets(self.consumer_offsets).encode()
        files["config/delayOffset.json"] = fastjson_delay_offsets(self.delay_offsets).encode()
        if abort:
            files["abort"] = b""  # 4.x writes an empty file
        for rel, data in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(data)
        return files

    # -- views for the assertions --------------------------------------------------------------------
    def intact(self) -> list[StoredMessage]:
        return [m for m in self.messages if not m.torn]

    def queue(self, topic: str, queue_id: int) -> list[StoredMessage]:
        """The intact records of one queue, in queue-offset order."""
        out = [m for m in self.intact() if m.in_queue and (m.topic, m.queue_id) == (topic, queue_id)]
        return sorted(out, key=lambda m: m.queue_offset)

    def queues(self) -> list[tuple[str, int]]:
        return sorted({(m.topic, m.queue_id) for m in self.messages if m.in_queue})

    @property
    def data_end(self) -> int:
        """End of the last intact record."""
        last = self.intact()[-1]
        return last.physical_offset + last.size


def fastjson_consumer_offsets(table: dict[str, dict[int, int]]) -> str:
    """``consumerOffset.json`` as fastjson pretty-prints it: tabs, bare int keys."""
    lines = ["{", '\t"offsetTable":{']
    items = list(table.items())
    for n, (name, offsets) in enumerate(items):
        inner = ",".join(f"{qid}:{off}" for qid, off in offsets.items())
        lines.append(f'\t\t"{name}":{{{inner}')
        lines.append("\t\t}" + ("," if n < len(items) - 1 else ""))
    lines += ["\t}", "}"]
    return "\n".join(lines)


def fastjson_delay_offsets(table: dict[int, int]) -> str:
    """``delayOffset.json`` (5.x shape, with a dataVersion first: bean properties are sorted)."""
    inner = ",".join(f"{level}:{off}" for level, off in table.items())
    return "\n".join(
        [
            "{",
            '\t"dataVersion":{',
            '\t\t"counter":7,',
            '\t\t"stateVersion":0,',
            '\t\t"timestamp":1714521600000',
            "\t},",
            f'\t"offsetTable":{{{inner}',
            "\t}",
            "}",
        ]
    )


# -- the standard fixture ----------------------------------------------------------------------------
TOPIC_A = "TopicA"
TOPIC_B = "TopicB"
CLIENT_IP = bytes([10, 1, 2, 3])
BORN_V4 = ("10.1.2.3", 52311)
BORN_V6 = ("2001:db8::7", 53001)


def _route(i: int) -> tuple[str, int]:
    """TopicA queue 0 gets three messages in five (enough to need a second ConsumeQueue file)."""
    r = i % 5
    if r < 3:
        return TOPIC_A, 0
    if r == 3:
        return TOPIC_A, 1
    return TOPIC_B, (i // 5) % 2


def build_standard_fixture(
    now_ms: int,
    *,
    commitlog_file_size: int,
    cq_file_size: int,
    hash_slot_num: int,
    index_num: int,
    store_ip: str,
    store_port: int,
    normal_count: int = 92,
    undispatched_tail: int = 0,
    torn_tail: bool = False,
    dispatch_torn: bool = False,
) -> RocketMQFixture:
    """Two topics with two queues each, two delayed messages, one PREPARED record, one record with
    an IPv6 born host; segment 0 ends with a BLANK. ``undispatched_tail`` leaves the last intact
    records out of ConsumeQueue and index (dispatch lagged at the crash); ``torn_tail`` appends a
    record whose second half is zeros (dispatched or not)."""
    rng = random.Random(20240501)
    fx = RocketMQFixture(commitlog_file_size, cq_file_size, hash_slot_num, index_num, store_ip, store_port)
    counter = 0

    def uniq(born: int) -> str:
        nonlocal counter
        counter += 1
        return client_unique_id(CLIENT_IP, 4242, 0x1B6D3586, born, counter)

    common = [("CLUSTER", "DefaultCluster"), ("TRACE_ON", "true"), ("MSG_REGION", "DefaultRegion")]

    # Two delayed messages (level 18 = 2 h): the first was due long ago and delivered already
    # (delayOffset.json says 1 for level 18), the second is not due yet.
    for n, ts in enumerate((now_ms - 3 * 3_600_000, now_ms - 40 * 60_000)):
        born = ts - 3
        fx.put(
            SCHEDULE_TOPIC,
            17,
            f"delayed-{n}".encode(),
            [
                ("UNIQ_KEY", uniq(born)),
                ("KEYS", f"delay-{n}"),
                ("WAIT", "true"),
                ("DELAY", "18"),
                ("TAGS", "TagD"),
                ("REAL_TOPIC", TOPIC_A),
                ("REAL_QID", "0"),
                *common,
            ],
            store_timestamp=ts,
            born_timestamp=born,
            born_ip=BORN_V4[0],
            born_port=BORN_V4[1],
        )
    fx.delay_offsets = {18: 1}

    base = now_ms - 30 * 60_000
    tags_cycle = ["TagA", "TagB", "TagRefund", "a😀"]
    total = normal_count + undispatched_tail + (1 if torn_tail else 0)
    for i in range(total):
        ts = base + i * 700 + rng.randrange(0, 300)
        born = ts - rng.randrange(1, 50)
        topic, qid = _route(i)
        keys = f"order-{i} cust-{i % 7}" if i % 6 else f"order-{i}"
        props = [("UNIQ_KEY", uniq(born)), ("KEYS", keys), ("WAIT", "true" if i % 4 else "false")]
        if i != 41:  # one record without tags: tags code 0
            props.append(("TAGS", tags_cycle[i % len(tags_cycle)]))
        props += common
        sys_flag = 0
        if i == 20:
            sys_flag = TRANSACTION_PREPARED
            props += [("TRAN_MSG", "true"), ("PGROUP", "tx-producer-group")]
        born_ip, born_port = BORN_V6 if i == 33 else BORN_V4
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(300, 1700)))
        is_torn = torn_tail and i == total - 1
        lagging = i >= normal_count and not is_torn
        fx.put(
            topic,
            qid,
            body,
            props,
            store_timestamp=ts,
            born_timestamp=born,
            born_ip=born_ip,
            born_port=born_port,
            flag=i % 3,
            sys_flag=sys_flag,
            dispatch=not lagging and (not is_torn or dispatch_torn),
        )
        if is_torn:
            fx.tear(fx.messages[-1])
    intact = fx.intact()
    fx.physic_msg_timestamp = intact[-1].store_timestamp
    fx.consumer_offsets = {
        f"{TOPIC_A}@orders-consumer": {0: 12, 1: 4},
        f"{TOPIC_B}@orders-consumer": {0: 2, 1: 0},
        "%RETRY%orders-consumer@orders-consumer": {0: 0},
    }
    return fx
