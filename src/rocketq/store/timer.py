"""Timed delivery: a message held until any point in time (RocketMQ 5 ``TimerMessageStore``).

Put side (:func:`to_timer_topic`, RocketMQ ``HookUtils.handleScheduleMessage``). A message of
transaction type NOT_TYPE or COMMIT whose properties ask for a delivery time is a timer message:

===================== ===================================== ==================
property              meaning                               priority
===================== ===================================== ==================
``TIMER_DELAY_SEC``   seconds after the put                 1 (RocketMQ)
``TIMER_DELAY_MS``    milliseconds after the put            2 (RocketMQ)
``TIMER_DELIVER_MS``  epoch milliseconds                    3 (RocketMQ)
``__STARTDELIVERTIME`` epoch milliseconds (Aliyun ONS)      4 (beyond RocketMQ)
===================== ===================================== ==================

* A delay level (``DELAY`` > 0) wins: the three ``TIMER_*`` properties are removed and the level
  applies, as RocketMQ does. A message that already carries ``TIMER_OUT_MS`` (it went through a
  timer before) or sits in the timer topic is not converted again.
* A value that is not a decimal integer → :class:`~rocketq.errors.TimerMessageIllegal`.
* Delivery time at or before now → the message is stored in its own topic at once, unchanged.
* More than ``timer_max_delay_sec`` ahead (3 days) → :class:`~rocketq.errors.TimerMessageIllegal`.
* Otherwise it is stored in ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``/``REAL_QID`` and
  ``TIMER_OUT_MS`` = the delivery time rounded down to ``timer_precision_ms`` (one step lower
  when it is an exact multiple), all as RocketMQ writes it, so either broker can deliver it.
* Beyond RocketMQ: transaction half messages (``RMQ_SYS_TRANS_HALF_TOPIC``) are not converted;
  the committed message is, so the delay counts from the commit.

Delivery side (:class:`TimerMessageService`, one thread). The pending table is a binary heap of
Python ints ``due_ms << 64 | commit-log offset`` (about 48 B per pending timer), where ``due_ms``
= ``TIMER_OUT_MS + timer_precision_ms``: the first precision step at or after the time asked
for, which is when RocketMQ's wheel reads that slot. Ties are broken by commit-log offset, so
timers due together are delivered in put order. The thread

1. reads new units of the timer ConsumeQueue from its ``cq_offset`` and pushes them (it is woken
   when dispatch writes such a unit);
2. pops every due entry and re-puts the message to ``REAL_TOPIC``/``REAL_QID``: properties kept
   (``UNIQ_KEY`` too, so the client message id is unchanged) except ``REAL_TOPIC``/``REAL_QID``,
   plus ``TIMER_ENQUEUE_MS`` (the timer record's store time) and ``TIMER_DEQUEUE_MS`` (now); the
   new record gets a new store timestamp;
3. sleeps until the earliest due time, a wake-up, or the next snapshot.

Rolling (RocketMQ ``MAGIC_ROLL``): a timer due more than ``timer_roll_window_slot`` ×
``timer_precision_ms`` (2 days) after its record was stored is written again into the timer topic
when that window has passed (``TIMER_ROLL_TIMES`` + 1), so its copy stays younger than the
CommitLog retention (72 h). A timer whose record was deleted anyway (forced cleaning on a full
disk) is lost, with a warning, as in RocketMQ.

Persistence: the snapshot file ``<root>/timer/pending`` (previous version ``pending.bak``),
replaced atomically every ``timer_snapshot_interval_ms`` when something changed, and at shutdown::

    offset  size  field (big-endian)
    0       4     magic b"RQTM"
    4       4     version = 1
    8       8     cq_offset: timer ConsumeQueue units below it are in the table or delivered
    16      8     count
    24      4     CRC-32 (zlib) of the entry bytes
    28      4     reserved (0)
    32      16·n  entries: due_ms i64, commit-log offset i64 (heap order)

Recovery loads the snapshot (entries at or past the CommitLog end are dropped: a crash took their
records) and then reads the timer ConsumeQueue from ``cq_offset``, so its time is proportional to
the pending timers plus the arrivals since the last snapshot, not to the store size. Delivery is
at least once: timers delivered after the last snapshot are delivered again after a crash (a
clean shutdown writes a final snapshot, so it causes no duplicates). Without any readable
snapshot (first start, or a store written by Apache RocketMQ, whose ``timerlog``/``timerwheel``
are not read) the whole timer ConsumeQueue is read: timers already delivered are delivered again.
An entry's record is checked before delivery (a record must start at that offset and be in the
timer topic), so a stale offset never delivers another message.

Not supported: RocketMQ's timer deletion markers (``TIMER_DEL_UNIQKEY``); such a message is never
delivered (RocketMQ does not deliver it either) but it cancels nothing.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rocketq.errors import DiskFull, TimerMessageIllegal
from rocketq.fileio import durable_replace
from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    BrokerMessage,
    MessageExt,
    decode_properties,
    encode_properties,
    number_property,
)
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueue
from rocketq.store.schedule import RePutService

log = logging.getLogger(__name__)

#: RocketMQ ``TimerMessageStore.TIMER_TOPIC`` (``rmq_sys_`` + ``wheel_timer``).
TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: Aliyun ONS clients (ali-ons, the ONS Java/.NET SDKs): deliver at this epoch ms.
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"

_TRANSACTION_HALF_TOPICS = frozenset({"RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})
_LEVEL_CLEARS = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
_JAVA_LONG = re.compile(r"[+-]?[0-9]{1,19}")
_LONG_MAX = (1 << 63) - 1
_OFFSET_MASK = (1 << 64) - 1
_NEVER_MS = 3_600_000


def may_be_timer(properties: bytes) -> bool:
    """Cheap pre-check on an encoded properties string (the put path calls it for every message)."""
    return b"TIMER_" in properties or b"__STARTDELIVERTIME\x01" in properties


def parse_java_long(name: str, raw: str) -> int:
    """``Long.parseLong``: optional sign, decimal digits, within int64; else TimerMessageIllegal."""
    if _JAVA_LONG.fullmatch(raw) is None or not -_LONG_MAX - 1 <= int(raw) <= _LONG_MAX:
        raise TimerMessageIllegal(f"timer message illegal: {name}={raw[:64]!r} is not a 64-bit integer")
    return int(raw)


def requested_deliver_ms(props: dict[str, str], now_ms: int) -> int | None:
    """The delivery time (epoch ms) the properties ask for, or None for an ordinary message."""
    if PROPERTY_TIMER_DELAY_SEC in props:
        return now_ms + parse_java_long(PROPERTY_TIMER_DELAY_SEC, props[PROPERTY_TIMER_DELAY_SEC]) * 1000
    if PROPERTY_TIMER_DELAY_MS in props:
        return now_ms + parse_java_long(PROPERTY_TIMER_DELAY_MS, props[PROPERTY_TIMER_DELAY_MS])
    if PROPERTY_TIMER_DELIVER_MS in props:
        return parse_java_long(PROPERTY_TIMER_DELIVER_MS, props[PROPERTY_TIMER_DELIVER_MS])
    if PROPERTY_START_DELIVER_TIME in props:
        return parse_java_long(PROPERTY_START_DELIVER_TIME, props[PROPERTY_START_DELIVER_TIME])
    return None


def timer_out_ms(deliver_ms: int, precision_ms: int) -> int:
    """RocketMQ's ``TIMER_OUT_MS``: rounded down to the precision, one step lower on a multiple."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


@dataclass(frozen=True, slots=True)
class TimerPolicy:
    """The put-side settings (from :class:`~rocketq.config.StoreConfig`)."""

    enabled: bool = True
    max_delay_sec: int = 3 * 24 * 3600
    precision_ms: int = 1000


def to_timer_topic(msg: BrokerMessage, policy: TimerPolicy, now_ms: int) -> BrokerMessage:
    """The put hook: ``msg`` redirected to the timer topic when it asks for a later delivery.

    Returns ``msg`` itself when it is not a timer message (its properties may have lost the timer
    fields when a delay level wins). Raises :class:`TimerMessageIllegal`; nothing is stored then.
    """
    if msg.sys_flag & rec.TRANSACTION_MASK not in (rec.TRANSACTION_NOT_TYPE, rec.TRANSACTION_COMMIT_TYPE):
        return msg
    if msg.topic == TIMER_TOPIC or msg.topic in _TRANSACTION_HALF_TOPICS:
        return msg
    props = decode_properties(msg.properties.decode("utf-8", "replace"))
    if number_property(props.get(PROPERTY_DELAY_TIME_LEVEL, ""), 0) > 0:
        if any(k in props for k in _LEVEL_CLEARS):
            for key in _LEVEL_CLEARS:
                props.pop(key, None)
            msg.properties = encode_properties(props).encode("utf-8")
        return msg
    if PROPERTY_TIMER_OUT_MS in props:
        return msg
    deliver_ms = requested_deliver_ms(props, now_ms)
    if deliver_ms is None:
        return msg
    if not policy.enabled:
        raise TimerMessageIllegal("accurate timer message is not enabled, timer_wheel_enable is false")
    if deliver_ms <= now_ms:
        return msg
    if deliver_ms - now_ms > policy.max_delay_sec * 1000:
        raise TimerMessageIllegal(
            f"timer message illegal: delivery {deliver_ms - now_ms} ms ahead exceeds the max delay "
            f"{policy.max_delay_sec * 1000} ms (timer_max_delay_sec={policy.max_delay_sec})"
        )
    props[PROPERTY_TIMER_OUT_MS] = str(timer_out_ms(deliver_ms, policy.precision_ms))
    return msg.parked_in(TIMER_TOPIC, 0, props)


def timer_time_up(ext: MessageExt, now_ms: int) -> BrokerMessage | None:
    """RocketMQ ``convert``/``convertMessage``: the message as it goes to its real topic.

    None when the record does not name a usable real topic and queue."""
    props = dict(ext.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, "")
    qid = props.pop(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not qid.isdigit():
        return None
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(ext.store_timestamp)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    return BrokerMessage.from_ext(
        ext,
        topic=topic,
        queue_id=int(qid),
        properties=props,
        sys_flag=ext.sys_flag & ~(rec.BORNHOST_V6_FLAG | rec.STOREHOSTADDRESS_V6_FLAG),
    )


def timer_roll(ext: MessageExt, now_ms: int) -> BrokerMessage:
    """The fresh copy of a long timer written back into the timer topic (``MAGIC_ROLL``)."""
    props = dict(ext.properties)
    rolled = props.get(PROPERTY_TIMER_ROLL_TIMES, "0")
    props[PROPERTY_TIMER_ROLL_TIMES] = str(int(rolled) + 1 if rolled.isdigit() else 1)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    return BrokerMessage.from_ext(
        ext,
        topic=ext.topic,
        queue_id=ext.queue_id,
        properties=props,
        sys_flag=ext.sys_flag & ~(rec.BORNHOST_V6_FLAG | rec.STOREHOSTADDRESS_V6_FLAG),
    )


# -- snapshot codec (sans-IO) -----------------------------------------------------------------
SNAPSHOT_MAGIC = b"RQTM"
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">4sIqqII")


class SnapshotError(ValueError):
    """A snapshot file that is not one (bad magic, version, length or CRC)."""


def encode_snapshot(cq_offset: int, keys: Iterable[int]) -> bytes:
    """The snapshot bytes for heap keys ``due_ms << 64 | offset``."""
    items = list(keys)
    arr = np.empty((len(items), 2), dtype=">i8")
    if items:
        arr[:, 0] = [k >> 64 for k in items]
        arr[:, 1] = [k & _OFFSET_MASK for k in items]
    body = arr.tobytes()
    head = _SNAP_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, cq_offset, len(items), zlib.crc32(body), 0)
    return head + body


def decode_snapshot(data: bytes) -> tuple[int, list[int]]:
    """(cq_offset, heap keys) of a snapshot; raises :class:`SnapshotError`."""
    if len(data) < _SNAP_HEAD.size:
        raise SnapshotError(f"timer snapshot of {len(data)} B is shorter than its {_SNAP_HEAD.size} B header")
    magic, version, cq_offset, count, crc, _ = _SNAP_HEAD.unpack_from(data)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise SnapshotError(f"not a timer snapshot (magic {magic!r}, version {version})")
    body = data[_SNAP_HEAD.size :]
    if count < 0 or len(body) != count * 16:
        raise SnapshotError(f"timer snapshot claims {count} entries but holds {len(body)} B")
    if zlib.crc32(body) != crc:
        raise SnapshotError("timer snapshot entries fail their CRC")
    if cq_offset < 0:
        raise SnapshotError(f"timer snapshot has a negative ConsumeQueue offset {cq_offset}")
    arr = np.frombuffer(body, dtype=">i8").reshape(-1, 2)
    keys = [(d << 64) | p for d, p in zip(arr[:, 0].tolist(), arr[:, 1].tolist(), strict=True) if p >= 0]
    return cq_offset, keys


# -- delivery service -------------------------------------------------------------------------
class TimerStore(Protocol):
    """What the timer service needs from the message store."""

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None: ...
    def select_one_message_by_offset(self, physical_offset: int, size: int | None = None) -> bytes | None: ...
    def put_redelivered(self, msg: BrokerMessage) -> bool: ...
    def get_max_phy_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TimerServiceConfig:
    precision_ms: int = 1000
    roll_window_ms: int = 2 * 24 * 3600 * 1000
    snapshot_interval_ms: int = 5000


class TimerMessageService(RePutService):
    """Holds timer messages and re-puts them to their topics when due (see the module docstring)."""

    name = "TimerMessageService"
    wake_topic = TIMER_TOPIC
    persisted_what = "timer snapshot"
    lost_at_restart = (
        "the restart re-reads timers from the previous snapshot (due ones may be delivered twice)"
    )

    def __init__(
        self,
        store: TimerStore,
        directory: str,
        config: TimerServiceConfig | None = None,
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.config = config or TimerServiceConfig()
        super().__init__(self.config.snapshot_interval_ms / 1000)
        self._store = store
        self.path = os.path.join(directory, "pending")
        self._clock_ms = clock_ms
        self._heap: list[int] = []
        self.cq_offset = 0
        self.delivered = 0
        self.rolled = 0
        self.skipped = 0
        self._dirty = False
        self._loaded = False
        self._persist_failing = False
        self._io_lock = threading.Lock()
        self._last_persist = time.monotonic()
        self._next_wait_s = 0.0

    @property
    def pending(self) -> int:
        """Timers held (enqueued, not yet delivered)."""
        return len(self._heap)

    def next_due_ms(self) -> int | None:
        heap = self._heap
        return heap[0] >> 64 if heap else None

    # -- persistence ------------------------------------------------------------------------
    def load(self) -> None:
        """Read the snapshot (or its backup); drop entries a crash took the records of."""
        loaded: tuple[int, list[int]] | None = None
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    loaded = decode_snapshot(f.read())
                break
            except FileNotFoundError:
                continue
            except SnapshotError as exc:
                log.warning("%s: %s; trying the backup", candidate, exc)
        self._loaded = True
        if loaded is None:
            self.cq_offset = 0
            self._heap = []
            return
        cq_offset, keys = loaded
        end = self._store.get_max_phy_offset()
        kept = [k for k in keys if (k & _OFFSET_MASK) < end]
        if len(kept) < len(keys):
            log.warning("%d timers point past the CommitLog end %d; dropped", len(keys) - len(kept), end)
        cq = self._store.find_consume_queue(TIMER_TOPIC, 0)
        high = cq.max_offset_in_queue if cq is not None else 0
        if cq_offset > high:
            log.warning("timer snapshot is at queue offset %d beyond the queue end %d", cq_offset, high)
            cq_offset = high
        heapq.heapify(kept)
        self._heap = kept
        self.cq_offset = cq_offset
        log.info("loaded %d pending timers; reading the timer queue from offset %d", len(kept), cq_offset)

    def persist(self) -> None:
        """Write the snapshot atomically (tmp file, fsync, rename; the previous one kept as .bak)."""
        with self._io_lock:
            data = encode_snapshot(self.cq_offset, list(self._heap))
            self._dirty = False
            try:
                durable_replace(self.path, data, keep_backup=True)
            except OSError:
                self._dirty = True  # written by the next attempt
                raise

    # -- lifecycle --------------------------------------------------------------------------
    def may_persist(self) -> bool:
        return self._loaded  # never overwrite a snapshot this instance did not read

    def on_start(self) -> None:
        log.info("TimerMessageService started: %d pending, queue offset %d", len(self._heap), self.cq_offset)
        self._last_persist = time.monotonic()

    def on_stopped(self) -> None:
        log.info("TimerMessageService stopped: %d pending", len(self._heap))

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        log.exception("timer delivery failed")
        self._after_delivery(1000)

    def step(self) -> None:
        """Take new timers from the queue, deliver the due ones, write the snapshot when due."""
        self.enqueue()
        self._after_delivery(self.deliver_due())

    def _after_delivery(self, wait_ms: int) -> None:
        """The snapshot when dirty for an interval, and the next wait (``wait_ms`` at most)."""
        interval_s = self.config.snapshot_interval_ms / 1000
        since = time.monotonic() - self._last_persist
        if self._dirty and since >= interval_s:
            try:
                self.persist()
            except DiskFull as exc:  # retried at the next interval; logged once
                if not self._persist_failing:
                    log.error("timer snapshot not written: %s", exc)
                self._persist_failing = True
            except OSError:
                log.exception("writing %s failed", self.path)
            else:
                self._persist_failing = False
            self._last_persist = time.monotonic()
            since = 0.0
        wait_s = wait_ms / 1000
        if self._dirty:
            wait_s = min(wait_s, interval_s - since)
        self._next_wait_s = max(0.001, wait_s)

    def idle_seconds(self) -> float:
        return self._next_wait_s

    # -- work -------------------------------------------------------------------------------
    def enqueue(self) -> int:
        """Move new units of the timer ConsumeQueue into the table; returns how many."""
        cq = self._store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            return 0
        low = cq.min_offset_in_queue
        if self.cq_offset < low:
            log.warning(
                "timer queue offset %d is below the queue minimum %d; skipping ahead", self.cq_offset, low
            )
            self.cq_offset = low
            self._dirty = True
        added = 0
        while self.cq_offset < cq.max_offset_in_queue and not self._stopped.is_set():
            units = cq.get_units(self.cq_offset, 1024)
            if len(units) == 0:
                break
            for phy, size in zip(units["offset"].tolist(), units["size"].tolist(), strict=True):
                # Push before advancing: a snapshot taken in between holds the entry twice at
                # worst (delivered twice), never zero times.
                key = None if size == FILLER_SIZE or size <= 0 else self._key_of(phy, size)
                if key is not None:
                    heapq.heappush(self._heap, key)
                    added += 1
                self.cq_offset += 1
            self._dirty = True
        return added

    def _read(self, phy: int, size: int | None) -> rec.RecordView | None:
        data = self._store.select_one_message_by_offset(phy, size)
        if data is None:
            return None
        view = rec.decode_record(data, 0, check_crc=False)
        if view.kind is not rec.RecordKind.MESSAGE or view.topic != TIMER_TOPIC:
            return None
        return view

    def _due_of(self, view: rec.RecordView) -> int | None:
        raw = decode_properties(view.properties).get(PROPERTY_TIMER_OUT_MS, "")
        if _JAVA_LONG.fullmatch(raw) is None:
            return None
        return int(raw) + self.config.precision_ms

    def _key_of(self, phy: int, size: int) -> int | None:
        view = self._read(phy, size)
        if view is None:
            log.warning("timer unit at commit-log offset %d has no timer record; skipped", phy)
            self.skipped += 1
            return None
        due = self._due_of(view)
        if due is None:
            log.error(
                "timer record at commit-log offset %d has no valid %s; skipped", phy, PROPERTY_TIMER_OUT_MS
            )
            self.skipped += 1
            return None
        roll_at = view.store_timestamp + self.config.roll_window_ms
        return (min(due, roll_at) << 64) | phy

    def deliver_due(self) -> int:
        """Re-put every due timer; returns ms until the next one is due."""
        heap = self._heap
        while heap and not self._stopped.is_set():
            now = self._clock_ms()
            key = heap[0]
            at = key >> 64
            if at > now:
                return at - now
            phy = key & _OFFSET_MASK
            view = self._read(phy, None)
            if view is None:
                log.warning("timer record at commit-log offset %d is gone; not delivered", phy)
                heapq.heappop(heap)
                self.skipped += 1
                self._dirty = True
                continue
            ext = view_to_message(view)
            due = self._due_of(view)
            if due is not None and due > now:
                out = timer_roll(ext, now)
                outcome = "rolled"
            elif PROPERTY_TIMER_DEL_UNIQKEY in ext.properties:
                out = None
                outcome = "skipped"
            else:
                out = timer_time_up(ext, now)
                outcome = "delivered"
                if out is None:
                    log.error("timer record at commit-log offset %d names no real topic/queue", phy)
                    outcome = "skipped"
            if out is not None and not self._store.put_redelivered(out):
                return 1000  # the store refused it now (full, shutting down): retry later
            heapq.heappop(heap)
            self._dirty = True
            if outcome == "delivered":
                self.delivered += 1
            elif outcome == "rolled":
                self.rolled += 1
            else:
                self.skipped += 1
        return _NEVER_MS
