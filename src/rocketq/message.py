"""Messages as RocketMQ defines them: properties codec, message ids, tags hash.

Properties string (``MessageDecoder.messageProperties2String``)::

    name \\x01 value \\x02  name \\x01 value \\x02 ...      (UTF-8)

Parsing follows RocketMQ 4.9/5.x exactly: split on ``\\x02``, skip pieces shorter than 3 chars,
split at the first ``\\x01``, keep the pair only when key and value are both non-empty.

Offset message id (``MessageDecoder.createMessageId``): ``store ip (4|16) ‖ port i32 ‖ offset i64``
as uppercase hex, 32 chars for IPv4 and 56 for IPv6.

Client unique id (``UNIQ_KEY``, ``MessageClientIDSetter``): ``ip (4|16) ‖ pid i16 ‖ classloader
hash i32 ‖ ms since start of month i32 ‖ counter i16`` as uppercase hex. The time field is
Java's ``(int) (now - monthStart)``: from about 20:31 on the 25th of a month (local time) it passes
2^31 - 1 and wraps negative, so it is written as 32 bits and read back unsigned.

Tags code: Java ``String.hashCode`` of the whole ``TAGS`` value, sign-extended to 64 bits.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import os
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketq import speedups as _speedups
from rocketq.errors import MessageIllegal, TopicNameInvalid
from rocketq.wallclock import local_month_bounds_ms, wall_clock_ms

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# MessageConst property names used by the store and the clients.
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_CRC32 = "__CRC32#"
#: The receipt handle of a popped message (POP_MESSAGE answers).
PROPERTY_POP_CK = "POP_CK"
KEY_SEPARATOR = " "

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
#: A V2 record stores the topic length in a signed 16-bit field.
MAX_TOPIC_BYTES_V2 = 32767


def validate_topic(topic: str, max_length: int = MAX_TOPIC_BYTES_V2) -> None:
    """RocketMQ's ``TopicValidator`` rules: non-empty, ``[%|a-zA-Z0-9_-]``, bounded length."""
    if not topic:
        raise TopicNameInvalid("topic name is empty")
    if len(topic) > max_length:
        raise TopicNameInvalid(f"topic name of {len(topic)} chars exceeds max {max_length} chars")
    if TOPIC_PATTERN.fullmatch(topic) is None:  # match() would accept a trailing "\n"
        raise TopicNameInvalid(f"topic name {topic[:64]!r} has characters outside [%|a-zA-Z0-9_-]")


# -- properties ----------------------------------------------------------------------------
def encode_properties(props: Mapping[str, str]) -> str:
    """Encode a property map as RocketMQ's ``name\\x01value\\x02`` string."""
    parts = []
    for key, value in props.items():
        if value is None:
            continue
        if (
            NAME_VALUE_SEPARATOR in key
            or PROPERTY_SEPARATOR in key
            or NAME_VALUE_SEPARATOR in value
            or PROPERTY_SEPARATOR in value
        ):
            raise MessageIllegal(
                f"property {key[:64]!r} contains a reserved separator character (\\x01 or \\x02)"
            )
        parts.append(f"{key}\x01{value}\x02")
    text = "".join(parts)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800"): not encodable as UTF-8
            name = next(k for k, v in props.items() if v is not None and exc.object[exc.start] in k + v)
            raise MessageIllegal(
                f"property {name[:64]!r} contains a lone surrogate (U+{ord(exc.object[exc.start]):04X}), "
                "which UTF-8 cannot encode"
            ) from None
    return text


def number_property(raw: str, default: int) -> int:
    """A numeric property value (a delay level, a check count, a queue offset) as an int when it
    is a plain decimal of ASCII digits, else ``default``. ``str.isdigit`` alone also takes
    Unicode digits such as ``'¹'``, which ``int()`` refuses."""
    return int(raw) if raw.isascii() and raw.isdigit() else default


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string exactly as RocketMQ 4.9/5.x does."""
    result: dict[str, str] = {}
    if not text:
        return result
    for piece in text.split(PROPERTY_SEPARATOR):
        if len(piece) < 3:
            continue
        key, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            result[key] = value
    return result


# -- tags hash -----------------------------------------------------------------------------
def java_string_hash_once(text: str) -> int:
    """Java ``String.hashCode`` as a signed 32-bit int (UTF-16 code units), not cached: for
    strings seen once (index keys carry a unique id), where a cache only costs."""
    h = 0
    if text.isascii():
        # h stays exact (unbounded int) and is reduced once: cheaper than a mask per step
        for ch in text.encode("ascii"):
            h = 31 * h + ch
        h &= 0xFFFFFFFF
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


#: :func:`java_string_hash_once` behind a cache, for strings seen again and again (tags, topics,
#: sharding keys).
java_string_hash = functools.lru_cache(maxsize=4096)(java_string_hash_once)


_POW31: list[int] = [1]


def _powers(n: int) -> NDArray[np.uint64]:
    import numpy as np  # noqa: PLC0415 (see java_string_hashes)

    while len(_POW31) < n:
        _POW31.append((_POW31[-1] * 31) & 0xFFFFFFFF)
    return np.array(_POW31[n - 1 :: -1] if n else [], dtype=np.uint64)


def java_string_hashes(texts: list[str]) -> list[int]:
    """:func:`java_string_hash` of many strings at once (vectorised for ASCII strings).

    Left-padding with zero code units does not change ``h = 31*h + c``, so all strings are padded
    to one length and hashed as one matrix product modulo 2**32.
    """
    if len(texts) < 8:
        return [java_string_hash_once(t) for t in texts]
    # imported here: a client process (producers and consumers import this module) never needs
    # numpy, whose import also starts an OpenBLAS thread in the process
    import numpy as np  # noqa: PLC0415

    encoded = [t.encode("ascii", "surrogateescape") if t.isascii() else b"" for t in texts]
    width = max((len(b) for b in encoded), default=0)
    if width == 0:
        return [java_string_hash_once(t) for t in texts]
    matrix = np.frombuffer(b"".join(b.rjust(width, b"\0") for b in encoded), dtype=np.uint8)
    hashes = (matrix.reshape(len(texts), width).astype(np.uint64) @ _powers(width)) & np.uint64(0xFFFFFFFF)
    out = hashes.astype(np.int64)
    out[out >= 1 << 31] -= 1 << 32
    result: list[int] = out.tolist()
    for i, t in enumerate(texts):
        if not t.isascii():
            result[i] = java_string_hash_once(t)
    return result


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tags code: 0 for no tags, else the Java hash sign-extended."""
    if not tags:
        return 0
    return java_string_hash(tags)


# -- socket addresses ----------------------------------------------------------------------
def split_host_port(addr: str) -> tuple[str, int]:
    """``"1.2.3.4:10911"`` or ``"[::1]:10911"`` → (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr!r} has no port")
    host = host.strip("[]")
    return host, int(port)


@functools.lru_cache(maxsize=1024)
def pack_socket_addr(addr: str) -> bytes:
    """Pack ``host:port`` as RocketMQ does: 4 or 16 address bytes then a big-endian int32 port."""
    host, port = split_host_port(addr)
    ip = ipaddress.ip_address(host)
    return ip.packed + struct.pack(">i", port)


def unpack_socket_addr(raw: bytes) -> str:
    """Inverse of :func:`pack_socket_addr`."""
    if len(raw) == 8:
        return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{struct.unpack('>i', raw[4:])[0]}"
    if len(raw) == 20:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw[:16])}]:{struct.unpack('>i', raw[16:])[0]}"
    raise ValueError(f"socket address of {len(raw)} bytes is neither IPv4 (8) nor IPv6 (20)")


# -- message ids ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def born_host_of(remote_address: str) -> bytes:
    """The packed born host for a peer address, always in the IPv4 layout (spec §3.7)."""
    try:
        host, port = split_host_port(remote_address)
        ip = ipaddress.ip_address(host)
    except ValueError:
        return pack_socket_addr("127.0.0.1:0")
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip4 = ip.ipv4_mapped
        elif ip.is_loopback:
            ip4 = ipaddress.IPv4Address("127.0.0.1")
        else:
            ip4 = ipaddress.IPv4Address("0.0.0.0")
        return ip4.packed + struct.pack(">i", port)
    return ip.packed + struct.pack(">i", port)


def create_offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """Offset message id: packed store host ‖ int64 physical offset, uppercase hex."""
    return (store_host + physical_offset.to_bytes(8, "big", signed=True)).hex().upper()


@dataclass(frozen=True, slots=True)
class OffsetMessageId:
    address: str
    offset: int


def decode_offset_msg_id(msg_id: str) -> OffsetMessageId:
    """Parse an offset message id (32 hex chars for IPv4, 56 for IPv6)."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset message id {msg_id[:64]!r} is not 32 or 56 hex chars")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"offset message id {msg_id[:64]!r} is not hex") from None
    ip_len = 4 if len(raw) == 16 else 16
    address = unpack_socket_addr(raw[: ip_len + 4])
    return OffsetMessageId(address, int.from_bytes(raw[ip_len + 4 :], "big", signed=True))


def local_ip() -> str:
    """The IPv4 address of the interface that routes outwards (127.0.0.1 when there is none): the
    default of client ids, message ids and a broker's ``brokerIP1``."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


_seq_lock = threading.Lock()


def pure_seq_take(seq: list[int], n: int) -> int:
    """The sequence number held in ``seq`` (a list of one int in 0..0xFFFF), which becomes that
    plus ``n`` (16 bits) in the same step: ``n`` numbers in a row taken by one caller."""
    with _seq_lock:
        first = seq[0]
        seq[0] = (first + n) & 0xFFFF
    return first


#: :func:`pure_seq_take`, compiled when the C accelerator is in use: there the GIL held across
#: the call makes the step atomic (no lock), and the blocking producer's compiled plain send
#: (:mod:`rocketq.client.send_plain`) takes its ids from the same list the same way.
seq_take: Callable[[list[int], int], int] = (
    _speedups.COMPILED.seq_take if _speedups.COMPILED is not None else pure_seq_take
)


class UniqueIdGenerator:
    """Generates ``UNIQ_KEY`` client ids with RocketMQ's layout (thread-safe).

    ``clock_ms`` (epoch milliseconds) is the wall clock unless a test fixes it; the month the
    time field counts from is the local-time month of that clock, from its first midnight as
    ``Calendar`` places it (with that day's UTC offset, not today's: in a month whose daylight-saving
    change has passed, the field counts the hour the clocks skipped or repeated as Java does).
    The counter is ``_seq`` (see :func:`seq_take`): an id takes one number, a batch's
    :meth:`next_ids` ``n`` in a row.
    """

    def __init__(self, ip: bytes | None = None, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._clock_ms = clock_ms
        ip = ip if ip is not None else socket.inet_aton(local_ip())
        fixed = ip + struct.pack(">hi", os.getpid() & 0x7FFF, random.getrandbits(31))
        self._prefix = fixed.hex().upper()
        self._seq = [random.getrandbits(15)]
        self._lock = threading.Lock()
        #: (month start, next month start) in epoch ms, replaced as one value (read without lock)
        self._month: tuple[int, int] = (0, 0)

    def _month_of(self, now_ms: int) -> tuple[int, int]:
        """The month bounds holding ``now_ms`` (rolled over under the lock when it has passed)."""
        month = self._month
        if not month[0] <= now_ms < month[1]:
            with self._lock:
                month = self._month
                if not month[0] <= now_ms < month[1]:
                    month = self._month = local_month_bounds_ms(now_ms)
        return month

    def offset_ms(self) -> int:
        """The time field of an id made now: ms since the month's start, as 32 bits."""
        now_ms = self._clock_ms()
        month = self._month
        if not month[0] <= now_ms < month[1]:
            month = self._month_of(now_ms)
        return (now_ms - month[0]) & 0xFFFFFFFF

    def next_id(self) -> str:
        now_ms = self._clock_ms()
        month = self._month
        if not month[0] <= now_ms < month[1]:
            month = self._month_of(now_ms)
        seq = seq_take(self._seq, 1)
        return f"{self._prefix}{(now_ms - month[0]) & 0xFFFFFFFF:08X}{seq:04X}"

    def next_ids(self, n: int) -> list[str]:
        """``n`` ids as ``n`` calls of :meth:`next_id` in a row within one millisecond give them
        (consecutive sequence numbers; one clock reading and one counter step for all: a batch's)."""
        now_ms = self._clock_ms()
        month = self._month_of(now_ms)
        first = seq_take(self._seq, n)  # consecutive: no other thread's id in between
        head = f"{self._prefix}{(now_ms - month[0]) & 0xFFFFFFFF:08X}"
        return [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(n)]


# -- message objects -----------------------------------------------------------------------
@dataclass(slots=True)
class Message:
    """A message to send or store.

    ``tags``, ``keys`` and ``delay_level`` are stored as the ``TAGS``, ``KEYS`` and ``DELAY``
    properties, exactly as RocketMQ's ``Message`` does.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: Iterable[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0

    def all_properties(self) -> dict[str, str]:
        """The property map that goes on the wire and into the record."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = [k for k in self.keys if k]
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        return props


class PropertyAccessors:
    """``tags``, ``keys`` and ``uniq_key`` of anything with a ``properties`` map."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class MessageExt(PropertyAccessors):
    """A stored message as decoded from a CommitLog record (RocketMQ ``MessageExt``)."""

    topic: str
    body: bytes
    properties: dict[str, str]
    flag: int = 0
    queue_id: int = 0
    store_size: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    commit_log_offset: int = 0
    body_crc: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    msg_id: str = ""

    @property
    def client_msg_id(self) -> str:
        """``MessageClientExt.getMsgId``: the UNIQ_KEY if present, else the offset id."""
        return self.uniq_key or self.msg_id


LOOPBACK_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


@dataclass(slots=True)
class BrokerMessage:
    """A message as the broker hands it to the store (RocketMQ ``MessageExtBrokerInner``).

    The properties are already encoded (``k\\x01v\\x02`` UTF-8), as they arrive on the wire, and
    the born host is packed (:func:`pack_socket_addr`).
    """

    topic: str
    body: bytes
    properties: bytes = b""
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = LOOPBACK_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @classmethod
    def from_message(
        cls,
        msg: Message,
        queue_id: int = 0,
        *,
        born_host: bytes = LOOPBACK_HOST,
        born_timestamp: int | None = None,
        sys_flag: int = 0,
    ) -> BrokerMessage:
        return cls(
            topic=msg.topic,
            body=msg.body,
            properties=encode_properties(msg.all_properties()).encode("utf-8"),
            queue_id=queue_id,
            flag=msg.flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp if born_timestamp is not None else time.time_ns() // 1_000_000,
            born_host=born_host,
        )

    @classmethod
    def from_ext(
        cls,
        ext: MessageExt,
        *,
        topic: str,
        queue_id: int,
        properties: Mapping[str, str],
        born_host: bytes | None = None,
        sys_flag: int | None = None,
        reconsume_times: int | None = None,
        prepared_transaction_offset: int = 0,
    ) -> BrokerMessage:
        """A stored message written again elsewhere (retry, delay delivery, transaction commit):
        same body, flag and born time; the given topic, queue and properties."""
        return cls(
            topic=topic,
            body=ext.body,
            properties=encode_properties(properties).encode("utf-8"),
            queue_id=queue_id,
            flag=ext.flag,
            sys_flag=ext.sys_flag if sys_flag is None else sys_flag,
            born_timestamp=ext.born_timestamp,
            born_host=born_host if born_host is not None else born_host_of(ext.born_host),
            reconsume_times=ext.reconsume_times if reconsume_times is None else reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )

    def parked_in(self, topic: str, queue_id: int, properties: dict[str, str]) -> BrokerMessage:
        """This message held in a system topic until it is due (delay level, timer): same body,
        flags and born fields; ``properties`` (changed in place) plus REAL_TOPIC / REAL_QUEUE_ID
        naming where it goes then."""
        properties[PROPERTY_REAL_TOPIC] = self.topic
        properties[PROPERTY_REAL_QUEUE_ID] = str(self.queue_id)
        encoded = encode_properties(properties).encode("utf-8")
        return dataclasses.replace(self, topic=topic, queue_id=queue_id, properties=encoded)

    def property_map(self) -> dict[str, str]:
        return decode_properties(self.properties.decode("utf-8", "replace"))
