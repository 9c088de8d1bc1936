"""Dispatch: from CommitLog records to ConsumeQueue units and index entries (ReputMessageService).

::

    CommitLog ──append──► wake ──► ReputMessageService (one thread)
                                     reput_from → decode record (no body) → DispatchRequest
                                       → dispatchers in order: ConsumeQueue, IndexService
                                       → arrival listeners (long-polling pulls)
                                     reput_from += record size

* The dispatcher reads only what is safe to expose: up to the flushed offset under SYNC_FLUSH
  (a consumer never sees a message a crash could take back), up to the readable end otherwise.
* Beyond RocketMQ: the service is woken by appends (and by flush rounds under SYNC_FLUSH) instead
  of polling every millisecond; it waits at most ``idle_wait_s`` when nothing happens.
* ``dispatch_behind_bytes`` (limit − reput_from) is the dispatch lag.
* A BLANK marker moves to the next segment; a record that does not decode inside readable data
  is a bug or damage: it is logged and skipped by its size when the size is plausible, exactly
  as RocketMQ does, otherwise dispatch stops there until new data arrives.
* After a restart dispatch resumes from the recovered high-water mark; re-dispatching a record
  that is already in a ConsumeQueue or the index is harmless (both skip it).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable

from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_properties,
    java_string_hash,
)
from rocketq.store import record as rec
from rocketq.store.commitlog import CommitLog

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


class DispatchRequest:
    """One CommitLog record as the dispatchers see it (RocketMQ ``DispatchRequest``).

    ``properties`` is decoded from ``properties_raw`` on first access: the dispatchers themselves
    only need the tags code, the keys and the unique key, which the parser extracts directly.
    """

    __slots__ = (
        "_properties",
        "commit_log_offset",
        "consume_queue_offset",
        "keys",
        "msg_size",
        "prepared_transaction_offset",
        "properties_raw",
        "queue_id",
        "store_timestamp",
        "sys_flag",
        "tags_code",
        "topic",
        "uniq_key",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        commit_log_offset: int,
        msg_size: int,
        tags_code: int,
        store_timestamp: int,
        consume_queue_offset: int,
        keys: str = "",
        uniq_key: str | None = None,
        sys_flag: int = 0,
        prepared_transaction_offset: int = 0,
        properties: dict[str, str] | None = None,
        properties_raw: bytes = b"",
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.commit_log_offset = commit_log_offset
        self.msg_size = msg_size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.consume_queue_offset = consume_queue_offset
        self.keys = keys
        self.uniq_key = uniq_key
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset
        self._properties = properties
        self.properties_raw = properties_raw

    @property
    def properties(self) -> dict[str, str]:
        if self._properties is None:
            self._properties = decode_properties(self.properties_raw.decode("utf-8", "replace"))
        return self._properties

    def __repr__(self) -> str:
        return (
            f"DispatchRequest({self.topic!r}, queue={self.queue_id}, offset={self.commit_log_offset}, "
            f"size={self.msg_size}, cq_offset={self.consume_queue_offset})"
        )


#: A dispatcher receives the requests of one read window, in CommitLog order.
Dispatcher = Callable[[list[DispatchRequest]], object]


def parse_delay_levels(spec: str) -> dict[int, int]:
    """``"1s 5s 10s 1m 2h"`` → {level: delay ms} (RocketMQ ``parseDelayLevel``; units s/m/h/d)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    table: dict[int, int] = {}
    for level, item in enumerate(spec.split(), start=1):
        unit = units.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise ValueError(f"delay level {level} {item!r} is not a number followed by s, m, h or d")
        table[level] = int(item[:-1]) * unit
    return table


def compute_deliver_timestamp(levels: dict[int, int], level: int, store_timestamp: int) -> int:
    """Tags code of a SCHEDULE_TOPIC_XXXX unit: when the message is due."""
    max_level = max(levels) if levels else 0
    level = min(level, max_level)
    delay = levels.get(level)
    if delay is None:
        return store_timestamp + 1000
    return store_timestamp + delay


def build_dispatch_request(
    offset: int, view: rec.RecordView, delay_levels: dict[int, int] | None = None
) -> DispatchRequest:
    """RocketMQ ``checkMessageAndReturnSize`` → ``DispatchRequest`` for a decoded MESSAGE record."""
    props = decode_properties(view.properties)
    topic = view.topic
    tags_code = 0
    if delay_levels is not None and topic == SCHEDULE_TOPIC:
        level = props.get(PROPERTY_DELAY_TIME_LEVEL)
        if level is not None and level.isdigit() and int(level) > 0:
            tags_code = compute_deliver_timestamp(delay_levels, int(level), view.store_timestamp)
    else:
        tags = props.get(PROPERTY_TAGS)
        if tags:
            tags_code = java_string_hash(tags)
    return DispatchRequest(
        topic,
        view.queue_id,
        offset,
        view.size,
        tags_code,
        view.store_timestamp,
        view.queue_offset,
        props.get(PROPERTY_KEYS, ""),
        props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        view.sys_flag,
        view.prepared_transaction_offset,
        props,
        view.properties.encode("utf-8"),
    )


_HEAD = struct.Struct(">iiiiiqqiq")  # size, magic, crc, queue id, flag, queue offset, phys, sysflag, born
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"


def _prop(props: bytes, name: bytes) -> bytes | None:
    """The value of one property in an encoded properties string, without decoding the rest."""
    pos = props.find(name)
    while pos > 0 and props[pos - 1] != 2:  # must start a pair
        pos = props.find(name, pos + 1)
    if pos < 0:
        return None
    start = pos + len(name)
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)]


_V1_HEAD = struct.Struct(">iiiiiqqiq8sq8siqi")  # V1 with IPv4 hosts, up to BODY LENGTH (88 bytes)
_tags_codes: dict[bytes, int] = {}
_topics: dict[bytes, str] = {}


def _tags_code_of(raw: bytes) -> int:
    code = _tags_codes.get(raw)
    if code is None:
        code = java_string_hash(raw.decode("utf-8", "replace"))
        if len(_tags_codes) > 65536:
            _tags_codes.clear()
        _tags_codes[raw] = code
    return code


def _topic_of(raw: bytes) -> str:
    topic = _topics.get(raw)
    if topic is None:
        topic = raw.decode("utf-8", "replace")
        if len(_topics) > 65536:
            _topics.clear()
        _topics[raw] = topic
    return topic


def parse_window(
    data: bytes, base: int, delay_levels: dict[int, int] | None = None
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """Parse consecutive MESSAGE records at the start of ``data`` (which begins at CommitLog
    offset ``base``) into dispatch requests.

    Returns (requests, bytes consumed, what stopped the parse: BLANK, END, CORRUPT, or None
    when the window ended, possibly inside a record). The common layout (V1, IPv4 hosts) is
    parsed with one ``unpack_from`` and a few ``find`` calls on the properties; anything else
    goes through :func:`rec.decode_record`.
    """
    out: list[DispatchRequest] = []
    append = out.append
    head = _V1_HEAD.unpack_from
    n = len(data)
    p = 0
    while p + 8 <= n:
        if p + 91 <= n:
            (size, magic, _crc, qid, _flag, qoff, _phys, sys_flag, _born, _bh, store_ts, _sh, _re,
             prepared, body_len) = head(data, p)  # fmt: skip
            fast = magic == -626843481 and not sys_flag & 0x30 and 91 <= size <= n - p
        else:
            size, magic = _BLANK_HEAD(data, p)
            fast = False
        if not fast:
            if magic == rec.BLANK_MAGIC_CODE:
                return out, p, rec.RecordKind.BLANK
            if size == 0 and magic == 0:
                return out, p, rec.RecordKind.END
            if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2) or size < 8:
                return out, p, rec.RecordKind.CORRUPT
            if p + size > n:
                return out, p, None  # the window ends inside this record
            view = rec.decode_record(data[p : p + size], 0, check_crc=False, read_body=False)
            if view.kind is not rec.RecordKind.MESSAGE:
                return out, p, view.kind
            append(build_dispatch_request(base + p, view, delay_levels))
            p += size
            continue
        end = p + size
        q = p + 88 + body_len
        if body_len < 0 or q + 3 > end:
            return out, p, rec.RecordKind.CORRUPT
        tl = data[q]
        topic = _topic_of(data[q + 1 : q + 1 + tl])
        q += 1 + tl
        pl = (data[q] << 8) | data[q + 1] if q + 2 <= end else -1
        if tl == 0 or tl > 127 or q + 2 + pl != end:
            return out, p, rec.RecordKind.CORRUPT
        props = data[q + 2 : end]
        tags_code = 0
        if delay_levels is not None and topic == SCHEDULE_TOPIC:
            level = _prop(props, b"DELAY\x01")
            if level is not None and level.isdigit() and int(level) > 0:
                tags_code = compute_deliver_timestamp(delay_levels, int(level), store_ts)
        else:
            t = props.find(b"TAGS\x01")
            if t == 0 or (t > 0 and props[t - 1] == 2):
                e = props.find(b"\x02", t)
                raw = props[t + 5 : e] if e >= 0 else props[t + 5 :]
                if raw:
                    tags_code = _tags_code_of(raw)
            elif t > 0:
                raw2 = _prop(props, _TAGS)
                if raw2:
                    tags_code = _tags_code_of(raw2)
        uniq: str | None = None
        if props.find(b"UNIQ_KEY\x01") >= 0:
            raw3 = _prop(props, _UNIQ)
            uniq = raw3.decode("utf-8", "replace") if raw3 else None
        keys = ""
        if props.find(b"KEYS\x01") >= 0:
            raw4 = _prop(props, _KEYS)
            keys = raw4.decode("utf-8", "replace") if raw4 else ""
        req = DispatchRequest(
            topic, qid, base + p, size, tags_code, store_ts, qoff, keys, uniq, sys_flag, prepared
        )
        req.properties_raw = props
        append(req)
        p = end
    if p < n and not any(data[p:n]):
        return out, p, rec.RecordKind.END
    return out, p, None


def _BLANK_HEAD(data: bytes, p: int) -> tuple[int, int]:
    size, magic = struct.unpack_from(">ii", data, p)
    return size, magic


class ReputMessageService:
    """Builds ConsumeQueue units and index entries from the CommitLog, in CommitLog order."""

    def __init__(
        self,
        commitlog: CommitLog,
        dispatchers: list[Dispatcher],
        *,
        limit: Callable[[], int],
        roll_next_file: Callable[[int], int],
        min_offset: Callable[[], int],
        delay_levels: dict[int, int] | None = None,
        idle_wait_s: float = 1.0,
    ) -> None:
        self._commitlog = commitlog
        self.dispatchers = dispatchers
        self.arrival_listeners: list[Dispatcher] = []
        self._limit = limit
        self._roll_next_file = roll_next_file
        self._min_offset = min_offset
        self._delay_levels = delay_levels
        self._idle_wait_s = idle_wait_s
        self.reput_from_offset = 0
        self.dispatched_records = 0
        self.window_bytes = 1 << 20
        self._stopped_hard = False
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="ReputMessageService", daemon=True)
        self.error: BaseException | None = None

    # -- control ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    def shutdown(self) -> None:
        """Stop after dispatching what is available (RocketMQ waits up to 5 s the same way)."""
        deadline = time.monotonic() + 5
        while self.behind() > 0 and time.monotonic() < deadline and self._thread.is_alive():
            self.wakeup()
            self.wait_dispatched(self._limit(), 0.05)
        self._stopped.set()
        self._wakeup.set()
        if self._thread.is_alive():
            self._thread.join(10)
        if self.behind() > 0:
            self.do_reput()  # the thread is gone: finish in the caller

    def behind(self) -> int:
        """Dispatch lag in bytes."""
        return max(0, self._limit() - self.reput_from_offset)

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until everything before ``offset`` is dispatched (or the timeout passes)."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while self.reput_from_offset < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.wakeup()
                self._progress.wait(min(remaining, 0.1))
        return True

    # -- work -------------------------------------------------------------------------------
    def _run(self) -> None:
        log.info("ReputMessageService started at offset %d", self.reput_from_offset)
        while not self._stopped.is_set():
            self._wakeup.wait(self._idle_wait_s)
            self._wakeup.clear()
            try:
                self.do_reput()
            except Exception as exc:  # keep the service alive; the error is visible
                self.error = exc
                log.exception("dispatch failed at offset %d", self.reput_from_offset)
                self._stopped.wait(0.05)
        log.info("ReputMessageService stopped at offset %d", self.reput_from_offset)

    def do_reput(self) -> int:
        """Dispatch every record between ``reput_from_offset`` and the limit; returns the count."""
        count = 0
        min_offset = self._min_offset()
        if self.reput_from_offset < min_offset:
            log.warning(
                "dispatch offset %d is below the CommitLog minimum %d; skipping ahead",
                self.reput_from_offset,
                min_offset,
            )
            self.reput_from_offset = min_offset
        queue = self._commitlog.queue
        file_size = self._commitlog.file_size
        while not self._stopped_hard:
            limit = self._limit()
            start = self.reput_from_offset
            if start >= limit:
                break
            mf = queue.find_by_offset(start)
            if mf is None:
                break
            pos = start - mf.file_from_offset
            readable = min(mf.read_position, limit - mf.file_from_offset)
            if pos >= readable:
                if readable >= file_size:
                    self.reput_from_offset = self._roll_next_file(start)
                    continue
                break
            data = mf.read(pos, min(readable - pos, self.window_bytes))
            if data is not None and len(data) >= 4:
                first = int.from_bytes(data[:4], "big", signed=True)
                if len(data) < first <= readable - pos:  # a record larger than the window
                    data = mf.read(pos, first)
            if data is None:
                break
            reqs, used, stop = parse_window(data, start, self._delay_levels)
            if reqs:
                for dispatcher in self.dispatchers:
                    dispatcher(reqs)
                for listener in self.arrival_listeners:
                    listener(reqs)
                count += len(reqs)
                self.reput_from_offset = start + used
                self._notify_progress()
            if stop is rec.RecordKind.BLANK:
                self.reput_from_offset = self._roll_next_file(start + used)
            elif stop is rec.RecordKind.CORRUPT:
                if not self._skip_damage(start + used, limit):
                    break
            elif stop is rec.RecordKind.END or not reqs:
                break
        self.dispatched_records += count
        self._notify_progress()
        return count

    def _skip_damage(self, start: int, limit: int) -> bool:
        """A record inside readable data that does not decode: a bug or damage. Like RocketMQ,
        log it and skip it by its size when the size is plausible."""
        head = self._commitlog.read(start, 8)
        if head is None:
            return False
        size = int.from_bytes(head[:4], "big", signed=True)
        if size > 0 and start + size <= limit:
            log.error("[BUG] record at offset %d does not decode; skipping its %d bytes", start, size)
            self.reput_from_offset = start + size
            return True
        log.error("[BUG] record at offset %d does not decode; dispatch waits here", start)
        return False

    def _notify_progress(self) -> None:
        with self._progress:
            self._progress.notify_all()
