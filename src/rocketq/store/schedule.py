"""Delay levels: messages stored now, delivered to their topic later (RocketMQ ScheduleMessageService).

Put side (:func:`to_schedule_topic`): a message with ``DELAY`` = level L > 0 (clamped to the highest
level) is stored in ``SCHEDULE_TOPIC_XXXX``, queue L−1, with its real destination kept in the
``REAL_TOPIC`` / ``REAL_QID`` properties. Dispatch writes its ConsumeQueue unit with the delivery
time (store time + delay of level L) as the tags code.

Delivery side (:class:`ScheduleMessageService`, one thread): for each level, walk its schedule
queue from the persisted offset; a unit whose delivery time has come is re-put to the real topic
and queue (``DELAY`` cleared, ``REAL_*`` kept, as RocketMQ does) and the level's offset advances.
A unit not yet due stops that level until its time. The thread sleeps until the earliest due
time and is woken when a new delayed message is dispatched.

Progress is persisted in ``config/delayOffset.json`` (``{"offsetTable":{1:5,2:0}}``, fastjson
style) every ``persist_interval_s`` and at shutdown. A crash between a re-put and the next persist
delivers those messages again on restart (at least once), as RocketMQ does.

Clock skew guard (RocketMQ ``correctDeliverTimestamp``): a delivery time further away than the
level's delay is treated as due now.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from rocketq.errors import DiskFull
from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    BrokerMessage,
    MessageExt,
    decode_properties,
)
from rocketq.protocol import fastjson
from rocketq.protocol import record as rec
from rocketq.store.record_scan import SCHEDULE_TOPIC, DispatchRequest
from rocketq.store.service import ServiceThread

log = logging.getLogger(__name__)

_DELAY_MARK = b"DELAY\x01"


def delay_level_of(properties: bytes) -> int:
    """The DELAY property of an encoded properties string, or 0 (cheap when absent)."""
    pos = properties.find(_DELAY_MARK)
    if pos < 0 or (pos > 0 and properties[pos - 1] != 2):
        return 0
    end = properties.find(b"\x02", pos)
    raw = properties[pos + len(_DELAY_MARK) : end if end >= 0 else len(properties)]
    return int(raw) if raw.isdigit() else 0  # bytes: ASCII digits only


def to_schedule_topic(msg: BrokerMessage, max_level: int) -> BrokerMessage:
    """Redirect a delayed message to SCHEDULE_TOPIC_XXXX (only NOT_TYPE/COMMIT messages)."""
    if msg.sys_flag & rec.TRANSACTION_MASK not in (rec.TRANSACTION_NOT_TYPE, rec.TRANSACTION_COMMIT_TYPE):
        return msg
    level = delay_level_of(msg.properties)
    if level <= 0 or max_level <= 0:
        return msg
    level = min(level, max_level)
    props = decode_properties(msg.properties.decode("utf-8", "replace"))
    props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    return msg.parked_in(SCHEDULE_TOPIC, level - 1, props)


def message_time_up(ext: MessageExt, born_host: bytes) -> BrokerMessage:
    """RocketMQ ``messageTimeup``: the message as it goes to its real topic when due."""
    props = dict(ext.properties)
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    topic = props.get(PROPERTY_REAL_TOPIC, ext.topic)
    queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
    return BrokerMessage.from_ext(
        ext,
        topic=topic,
        queue_id=queue_id,
        properties=props,
        born_host=born_host,
        sys_flag=ext.sys_flag & ~(rec.BORNHOST_V6_FLAG | rec.STOREHOSTADDRESS_V6_FLAG),
    )


class ScheduleStore(Protocol):
    """What the schedule service needs from the message store."""

    def schedule_queue_units(
        self, queue_id: int, start: int, max_count: int
    ) -> list[tuple[int, int, int]]: ...
    def schedule_queue_bounds(self, queue_id: int) -> tuple[int, int]: ...
    def look_message_by_offset(self, physical_offset: int, size: int | None = None) -> MessageExt | None: ...
    def put_redelivered(self, msg: BrokerMessage) -> bool: ...


class RePutService(ServiceThread):
    """A thread that re-puts the messages of one system topic when due and persists its progress
    (``persist``): woken by an arrival on ``wake_topic``, persisting once more at shutdown."""

    wake_topic: str
    #: What shutdown's log line says was not persisted, and what that means after a restart.
    persisted_what: str
    lost_at_restart: str

    def persist(self) -> None:
        raise NotImplementedError

    def may_persist(self) -> bool:
        """False while writing would overwrite state this instance has not read."""
        return True

    # -- lifecycle --------------------------------------------------------------------------
    def shutdown(self) -> None:
        super().shutdown()
        if self.may_persist():
            try:
                self.persist()
            except OSError as exc:  # a full disk must not turn a clean shutdown into a crash
                log.error(
                    "%s not persisted at shutdown (%s); %s", self.persisted_what, exc, self.lost_at_restart
                )

    def on_dispatch(self, reqs: list[DispatchRequest]) -> None:
        """Arrival listener: a new message of ``wake_topic`` may be due before the next wake-up."""
        wake_topic = self.wake_topic
        if not self._wakeup.is_set() and any(r.topic == wake_topic for r in reqs):
            self._wakeup.set()


class ScheduleMessageService(RePutService):
    """Delivers delayed messages when due; persists the level offsets every ``persist_interval_s``."""

    name = "ScheduleMessageService"
    wake_topic = SCHEDULE_TOPIC
    persisted_what = "delay offsets"
    lost_at_restart = "delayed messages delivered since the last write are delivered again after the restart"

    def __init__(
        self,
        store: ScheduleStore,
        delay_levels: dict[int, int],
        config_dir: str,
        *,
        born_host: bytes,
        persist_interval_s: float = 10.0,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        super().__init__(persist_interval_s)
        self._store = store
        self.delay_levels = delay_levels
        self.max_level = max(delay_levels) if delay_levels else 0
        self.path = os.path.join(config_dir, "delayOffset.json")
        self._born_host = born_host
        self._persist_interval_s = persist_interval_s
        self._clock_ms = clock_ms
        self.offset_table: dict[int, int] = {}
        self._lock = threading.Lock()
        self.delivered = 0
        self._dirty = False
        self._persist_failing = False
        self._last_persist = time.monotonic()
        self._next_wait_ms = 0

    # -- persistence ------------------------------------------------------------------------
    def load(self) -> None:
        data = fastjson.load_file(self.path)
        table: dict[int, int] = {}
        if isinstance(data, dict):
            for key, value in (data.get("offsetTable") or {}).items():
                try:
                    table[int(key)] = int(value)
                except (TypeError, ValueError):
                    log.warning("ignoring bad entry %r: %r in %s", key, value, self.path)
        self.offset_table = table

    def persist(self) -> None:
        with self._lock:
            table = dict(sorted(self.offset_table.items()))
            self._dirty = False
        try:
            fastjson.persist(self.path, fastjson.dumps({"offsetTable": table}))
        except OSError:
            self._dirty = True  # written by the next attempt
            raise

    def adopt_offsets(self, table: dict[int, int]) -> None:
        """Take another broker's progress as this one's (a DLedger follower copies its leader's,
        RocketMQ's ``syncDelayOffset``); written by the next persist."""
        with self._lock:
            if table != self.offset_table:
                self.offset_table = dict(table)
                self._dirty = True

    # -- delivery ---------------------------------------------------------------------------
    def on_start(self) -> None:
        log.info("ScheduleMessageService started with %d levels", self.max_level)
        self._last_persist = time.monotonic()

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        log.exception("delayed delivery failed")
        self._next_wait_ms = 1000

    def step(self) -> None:
        """Deliver what is due; persist the offsets when changed and the interval has passed."""
        self._next_wait_ms = self.deliver_due()
        if self._dirty and time.monotonic() - self._last_persist >= self._persist_interval_s:
            try:
                self.persist()
            except DiskFull as exc:  # retried at the next interval; logged once
                if not self._persist_failing:
                    log.error("delay offsets not persisted: %s", exc)
                self._persist_failing = True
            else:
                if self._persist_failing:
                    log.warning("delay offsets persisted again")
                self._persist_failing = False
            self._last_persist = time.monotonic()

    def idle_seconds(self) -> float:
        return max(0.001, min(self._next_wait_ms, self._persist_interval_s * 1000) / 1000)

    def deliver_due(self) -> int:
        """Deliver every due message of every level; returns ms until the next one is due."""
        next_wait = 3_600_000
        for level in range(1, self.max_level + 1):
            next_wait = min(next_wait, self._deliver_level(level))
        return next_wait

    def _deliver_level(self, level: int) -> int:
        queue_id = level - 1
        low, high = self._store.schedule_queue_bounds(queue_id)
        offset = max(self.offset_table.get(level, 0), low)
        delay = self.delay_levels[level]
        while offset < high:
            units = self._store.schedule_queue_units(queue_id, offset, 32)
            if not units:
                break
            for phy, size, tags_code in units:
                if phy < 0:  # pre-blank filler unit
                    offset += 1
                    continue
                now = self._clock_ms()
                deliver_at = tags_code
                if deliver_at > now + delay:  # clock moved back: deliver now
                    deliver_at = now
                if deliver_at > now:
                    self._set_offset(level, offset)
                    return deliver_at - now
                ext = self._store.look_message_by_offset(phy, size)
                if ext is not None:
                    if not self._store.put_redelivered(message_time_up(ext, self._born_host)):
                        self._set_offset(level, offset)
                        return 100  # store refused: retry shortly
                    self.delivered += 1
                else:
                    log.warning("delayed message at offset %d is gone; skipping it", phy)
                offset += 1
            self._set_offset(level, offset)
        self._set_offset(level, offset)
        return 3_600_000

    def _set_offset(self, level: int, offset: int) -> None:
        with self._lock:
            if self.offset_table.get(level) != offset:
                self.offset_table[level] = offset
                self._dirty = True
