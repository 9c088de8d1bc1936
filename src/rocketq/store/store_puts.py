"""The write API of the MessageStore: ``put_message``, ``put_messages`` and their conversions.

* A ``Message`` nothing parks (no delay level, none of :data:`_PARKING_KEYS` among its
  properties) becomes its ``BrokerMessage`` directly: compiled (``message_inner``) where the
  C accelerator is built, else in one constructor call; a batch of them of one topic is laid out
  in C (``plan_messages``) and packed by the CommitLog's ``batch_write`` as a broker's batch
  send is (:mod:`rocketq.store.packed_batch`). The pure conversion stays the reference and takes
  every message the compiled one hands back.
* Any other message goes through :meth:`StorePuts._inner`: the timer topic for timer
  properties, the schedule topic for a delay level; one whose properties name neither (the
  usual BrokerMessage of a broker's send) is taken as it is after one pass over them
  (``may_be_timed``, compiled; :func:`pure_may_be_timed`).
* A single put of either kind that the CommitLog's compiled lane takes (a plain CommitLog,
  ASYNC_FLUSH, a topic and shape seen before, no roll, no ConsumeQueue file to reserve, put
  latency not sampled, the lag not due for a look) is one call (``PutLane.store_put``, see
  :mod:`rocketq.store.commitlog`): the conversion, the record and this module's bookkeeping.
  Whatever it hands back (None, nothing done) goes the way described here.
* Back-pressure: every 256 KiB put the dispatch lag is looked at (:meth:`StorePuts._throttle`:
  yield the GIL above ``dispatch_yield_lag_bytes``, wait, bounded, above
  ``max_dispatch_lag_bytes``). The bytes put since the last look are counted in
  ``_lag_count.since``: the lane itself where there is one (its puts count there too), else a
  :class:`LagCount`.

:class:`StorePuts` is a base class of :class:`~rocketq.store.message_store.MessageStore` and
holds no state of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

from rocketq import message as _message
from rocketq import speedups as _speedups
from rocketq.config import StoreConfig
from rocketq.errors import SystemBusy
from rocketq.message import PROPERTY_DELAY_TIME_LEVEL, BrokerMessage, Message
from rocketq.store.commitlog import CommitLog, PutMessageResult
from rocketq.store.commitlog_lifecycle import PutLane
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.packed_batch import PackedBatch
from rocketq.store.schedule import delay_level_of, to_schedule_topic
from rocketq.store.store_queries import StoreStats
from rocketq.store.timer import (
    PROPERTY_START_DELIVER_TIME,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    TimerPolicy,
    may_be_timer,
    to_timer_topic,
)

#: the façade's logger: put problems read as the store's
log = logging.getLogger("rocketq.store.message_store")

#: One put in this many is timed for ``put_latency``: two clock reads per put would cost the
#: send path more than every counter of the broker together (docs/metrics.md, Cost).
_time_ns = time.time_ns


#: Property names that can park a message in the delay-level or timer topic. A ``Message`` with
#: none of them (and no ``delay_level``) is stored as it is: its put skips the timer and delay
#: checks, which look for these names in the encoded properties.
_PARKING_KEYS = frozenset(
    (
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_START_DELIVER_TIME,
    )
)


#: The conversions of the puts of Messages nothing parks, compiled (``rocketq._speedups``:
#: ``message_inner``, the BrokerMessage ``put_message`` makes of one, and ``plan_messages``, a
#: batch of one topic laid out for ``batch_write`` as a :class:`PackedBatch`); None: the pure
#: conversion below, which stays the reference and takes every message these hand back.
_message_inner: Callable[[Message | BrokerMessage, int, int, bytes], BrokerMessage | None] | None = None
_Planned = tuple[bytes, tuple[bytes, int, int, int, int, int, int]]
_plan_messages: Callable[[list[Message]], _Planned | None] | None = None
if _speedups.COMPILED is not None and hasattr(_speedups.COMPILED, "plan_messages"):
    # (importing rocketq.store.commitlog above bound the compiled module to BrokerMessage)
    _speedups.COMPILED.setup_message_put(Message, tuple(sorted(_PARKING_KEYS)))
    _message_inner = _speedups.COMPILED.message_inner
    _plan_messages = _speedups.COMPILED.plan_messages


def pure_may_be_timed(properties: bytes) -> bool:
    """Whether a put with these encoded properties may park (:meth:`StorePuts._inner` then
    makes its timer and delay checks): a timer's names (:func:`~rocketq.store.timer.may_be_timer`)
    or a delay level's anywhere in them. The reference of the compiled ``may_be_timed``, which
    makes the three tests in one pass over the bytes."""
    return b"TIMER_" in properties or b"__STARTDELIVERTIME\x01" in properties or b"DELAY\x01" in properties


#: :func:`pure_may_be_timed`, compiled where the C accelerator is in use (and has it)
_may_be_timed: Callable[[bytes], bool] = (
    getattr(_speedups.COMPILED, "may_be_timed", None) or pure_may_be_timed
)
#: Whether the compiled lane can do the store's part of a single put (its counters bound).
LANE_STORE_PUT = _speedups.COMPILED is not None and hasattr(_speedups.COMPILED, "setup_lane_stats")
if LANE_STORE_PUT:
    _speedups.COMPILED.setup_lane_stats(StoreStats)  # type: ignore[union-attr]


def lag_look_every(config: StoreConfig) -> int:
    """How many bytes are put between two looks at the dispatch lag: a sixteenth of the smaller
    of its two limits (``dispatch_yield_lag_bytes``, ``max_dispatch_lag_bytes``), at most
    256 KiB; both limits off: never (2**62). Looking costs a put more than the rest of its
    bookkeeping together; between two looks dispatch may fall this much further behind."""
    smallest = min(
        (n for n in (config.dispatch_yield_lag_bytes, config.max_dispatch_lag_bytes) if n > 0),
        default=1 << 62,
    )
    return min(smallest // 16, 256 * 1024) if smallest < 1 << 62 else 1 << 62


class LagCount:
    """The bytes put since the dispatch lag was last looked at, where no compiled lane counts
    them (a :class:`~rocketq.store.commitlog_lifecycle.PutLane` has the same ``since``)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since = 0


class StorePuts:
    """The write side of the MessageStore (see the module docstring)."""

    config: StoreConfig
    commitlog: CommitLog
    reput: ReputMessageService | None
    stats: StoreStats
    delay_levels: dict[int, int]
    _born_host: bytes
    _timer_policy: TimerPolicy
    _lag_count: LagCount | PutLane
    _lane: PutLane | None  # the compiled single put; None: the Python path below
    _throttle_every: int
    _put_samples: Iterator[int]
    _plan_messages: Callable[[list[Message]], _Planned | None] | None
    _dispatch_limit: Callable[[], int]
    _put_timed: Callable[[int], None]  # PutLatencySampling's

    # -- writes -----------------------------------------------------------------------------
    def _inner(self, msg: Message | BrokerMessage, queue_id: int | None) -> BrokerMessage:
        if isinstance(msg, BrokerMessage):
            if queue_id is not None:
                msg.queue_id = queue_id
            inner = msg
        else:
            inner = BrokerMessage.from_message(msg, queue_id or 0, born_host=self._born_host)
        if not _may_be_timed(inner.properties):  # the usual message: nothing parks it
            return inner
        if may_be_timer(inner.properties):
            inner = to_timer_topic(inner, self._timer_policy, time.time_ns() // 1_000_000)
        if b"DELAY\x01" in inner.properties and delay_level_of(inner.properties) > 0:
            inner = to_schedule_topic(inner, len(self.delay_levels))
        return inner

    def _throttle(self) -> None:
        """Back-pressure: dispatch must not fall unboundedly behind the writers.

        Soft: above ``dispatch_yield_lag_bytes`` a put first yields the GIL. A writer that never
        blocks (a tight put loop in this interpreter) would otherwise hold the GIL while the
        dispatch thread gets it only at the switch interval (5 ms) and loses it again at every
        NumPy call that releases it, so dispatch would crawl although it is faster than the
        writer. Hard: a writer that finds dispatch more than ``max_dispatch_lag_bytes`` behind
        waits until it is under half that."""
        reput = self.reput
        if reput is None:
            return
        lag = self.commitlog.max_offset - reput.reput_from_offset
        soft = self.config.dispatch_yield_lag_bytes
        if 0 < soft < lag:
            time.sleep(0)
        limit = self.config.max_dispatch_lag_bytes
        if limit <= 0 or lag <= limit:
            return
        target = self.commitlog.max_offset - limit // 2
        if not reput.wait_dispatched(target, self.config.put_message_timeout_ms / 1000):
            lag = self.commitlog.max_offset - reput.reput_from_offset
            raise SystemBusy(
                f"dispatch is {lag} B behind the CommitLog (limit {limit} B) after waiting "
                f"{self.config.put_message_timeout_ms} ms; try again later"
            )

    def _put_begin(self) -> int:
        """Before a put: the dispatch-lag check when due, and the start of the put's latency
        sample (one put in :data:`PUT_LATENCY_SAMPLE` while metrics count; 0: not sampled)."""
        if self._lag_count.since >= self._throttle_every:
            self._throttle()  # a refused put (SystemBusy) leaves the count: the next one looks too
            self._lag_count.since = 0
        return next(self._put_samples)

    def put_message(self, msg: Message | BrokerMessage, queue_id: int | None = None) -> PutMessageResult:
        """Store one message in ``queue_id`` (default 0; a BrokerMessage keeps its own)."""
        lane = self._lane
        if lane is not None:
            done = lane.store_put(msg, queue_id)  # the usual put in one call; None: nothing done
            if done is not None:
                return done
        began = self._put_begin()
        try:
            if type(msg) is not Message:  # a BrokerMessage (a broker's send): one type test
                inner = self._inner(msg, queue_id)
            elif (
                _message_inner is not None
                and (inner_c := _message_inner(msg, queue_id or 0, _time_ns() // 1_000_000, self._born_host))
                is not None
            ):
                # a Message nothing parks, converted in C (None for any other)
                inner = inner_c
            elif not msg.delay_level and _PARKING_KEYS.isdisjoint(msg.properties):
                # a Message nothing parks (see _PARKING_KEYS): what _inner makes of it, without
                # from_message's keyword call and the timer and delay scans
                inner = BrokerMessage(
                    msg.topic,
                    msg.body,
                    _message.encode_properties(msg.all_properties()).encode(),
                    queue_id or 0,
                    msg.flag,
                    0,
                    _time_ns() // 1_000_000,
                    self._born_host,
                )
            else:
                inner = self._inner(msg, queue_id)
            r = self.commitlog.put_message(inner)
        except Exception:
            self.stats.put_failures += 1
            raise
        size = r[2]
        self._lag_count.since += size
        stats = self.stats
        stats.put_count += 1
        stats.put_bytes += size
        if began:
            self._put_timed(began)
        return r

    def put_messages(
        self, msgs: Sequence[Message | BrokerMessage], queue_id: int | None = None
    ) -> PutMessageResult:
        """Store a batch under one lock acquisition; consecutive queue offsets per queue."""
        began = self._put_begin()
        try:
            if type(msgs) is PackedBatch and queue_id is None:
                # a batch send as it arrived: its plan checked that nothing in it parks
                r = self.commitlog.put_messages(msgs)
            else:
                r = self._put_converted(msgs, queue_id)
        except Exception:
            self.stats.put_failures += 1
            raise
        self._lag_count.since += r[2]
        stats = self.stats
        stats.put_count += r[6]
        stats.put_bytes += r[2]
        if began:
            self._put_timed(began)
        return r

    def _put_converted(
        self, msgs: Sequence[Message | BrokerMessage], queue_id: int | None
    ) -> PutMessageResult:
        """:meth:`put_messages`' put of a batch given as messages, born at the same millisecond
        (a batch is handed over at once, as a broker stamps a MessageBatch)."""
        qid = queue_id or 0
        born_at = _time_ns() // 1_000_000
        born_host = self._born_host
        plan_messages = self._plan_messages
        if plan_messages is not None and type(msgs) is list:
            planned = plan_messages(msgs)
            if planned is not None:
                # one topic, every message plain: packed by batch_write as a broker's batch send
                data, plan = planned
                batch = PackedBatch(msgs[0].topic, qid, 0, born_at, born_host, data, b"", plan)
                return self.commitlog.put_messages(batch)
        # the Messages of a batch that nothing parks as put_message converts them
        inner: list[BrokerMessage] = []
        add = inner.append
        encode = _message.encode_properties
        parking = _PARKING_KEYS
        for m in msgs:
            if type(m) is Message and not m.delay_level and parking.isdisjoint(m.properties):
                add(
                    BrokerMessage(
                        m.topic,
                        m.body,
                        encode(m.all_properties()).encode(),
                        qid,
                        m.flag,
                        0,
                        born_at,
                        born_host,
                    )
                )
            else:
                add(self._inner(m, queue_id))
        return self.commitlog.put_messages(inner)

    def put_redelivered(self, msg: BrokerMessage) -> bool:
        """Re-put used by delayed delivery; False when the store refuses it now."""
        try:
            self.commitlog.put_message(msg)
        except Exception as exc:
            log.warning("re-put of a delayed message to %s failed: %s", msg.topic, exc)
            return False
        return True

    def wait_dispatched(self, timeout_s: float = 10.0) -> bool:
        """Block until every stored message is in its ConsumeQueue and the index."""
        assert self.reput is not None
        return self.reput.wait_dispatched(self._dispatch_limit(), timeout_s)
