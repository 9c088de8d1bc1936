"""The local offset store of a broadcasting consumer: one JSON file per client and group.

In broadcasting mode every consumer reads every queue, so its progress is its own and is not
kept by the broker. It lives in a file (RocketMQ ``LocalFileOffsetStore``), by default
``~/.rocketmq_offsets/<client id>/<group>/offsets.json`` — with the default instance name of a
broadcasting consumer ``~/.rocketmq_offsets/<ip>@DEFAULT/<group>/offsets.json`` — in RocketMQ's format (an
``OffsetSerializeWrapper`` as fastjson writes it, with queue objects as map keys)::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:42, ...}}

Writes are atomic: the table goes to ``offsets.json.tmp``, is fsync'd and renamed over
``offsets.json``, and the directory is fsync'd; the previous file is kept as
``offsets.json.bak``. A reader therefore sees the old table or the new one, never a mix.
Writes from several threads of the process (periodic commit, shutdown) go one at a time.
Loading a file that does not parse falls back to the ``.bak`` copy; when that is bad too the
store refuses to start with :class:`~rocketq.errors.BodyFormatError` naming the file (it does
not silently restart every queue from ``consume_from_where``).

Offsets only move forward through :meth:`LocalOffsetStore.update` unless ``increase_only`` is
False (a seek or an offset reset).
"""

from __future__ import annotations

import logging
import os
import threading

from rocketq.errors import BodyFormatError
from rocketq.fileio import durable_replace
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.queue import MessageQueue, message_queue_table

log = logging.getLogger(__name__)

#: Default root of broadcasting offset files (RocketMQ's ``rocketmq.client.localOffsetStoreDir``).
DEFAULT_OFFSET_STORE_DIR = os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")


def default_offset_path(root_dir: str, client_id: str, group: str) -> str:
    """``<root_dir>/<client_id>/<group>/offsets.json`` (the client id is ``<ip>@<instance name>``)."""
    return os.path.join(root_dir, client_id, group, "offsets.json")


def encode_offsets(table: dict[MessageQueue, int]) -> bytes:
    return OBJECT_KEYS.dumps({"offsetTable": dict(sorted(table.items()))}).encode()


def decode_offsets(data: bytes, what: str) -> dict[MessageQueue, int]:
    """The offset table of an ``offsets.json``; BodyFormatError naming ``what`` when bad."""
    try:
        doc = OBJECT_KEYS.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        table = message_queue_table(doc.get("offsetTable") or {})
        out: dict[MessageQueue, int] = {}
        for mq, value in table.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"offset of {mq} is {value!r}, not an integer")
            out[mq] = value
    except ValueError as exc:
        raise BodyFormatError(f"offset file {what} is not valid: {exc}") from None
    return out


class LocalOffsetStore:
    """Offsets of one broadcasting consumer, kept in ``path``. Thread-safe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._table: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()  # the table
        self._write_lock = threading.Lock()  # one write of the file at a time
        self._dirty = False

    def load(self) -> None:
        """Read the file (or its ``.bak`` copy); a missing file is an empty table."""
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            try:
                table = decode_offsets(data, candidate)
            except BodyFormatError:
                if candidate == self.path and os.path.exists(self.path + ".bak"):
                    log.warning("offset file %s is damaged; reading %s.bak", self.path, self.path)
                    continue
                raise
            with self._lock:
                self._table = table
            return

    def read(self, mq: MessageQueue) -> int:
        """The stored offset of ``mq``, -1 when there is none."""
        with self._lock:
            return self._table.get(mq, -1)

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        with self._lock:
            old = self._table.get(mq, -1)
            if increase_only and offset <= old:
                return
            if offset != old:
                self._table[mq] = offset
                self._dirty = True

    def table(self) -> dict[MessageQueue, int]:
        with self._lock:
            return dict(self._table)

    def persist(self) -> None:
        """Write the table atomically when it changed since the last write.

        Writes are serialised: a consumer persists from its periodic commit and from shutdown,
        each in a worker thread, and two writes interleaved through the one temporary file (each
        moving the live file to ``.bak`` before renaming its own copy in) could leave no
        ``offsets.json`` at all. Under the write lock the table is taken last, so the final
        file holds every update made before the last call began."""
        with self._write_lock:
            with self._lock:
                if not self._dirty:
                    return
                data = encode_offsets(self._table)
                self._dirty = False
            try:
                self._write(data)
            except OSError:
                with self._lock:
                    self._dirty = True
                raise

    def _write(self, data: bytes) -> None:
        durable_replace(self.path, data, keep_backup=True)


__all__ = [
    "DEFAULT_OFFSET_STORE_DIR",
    "LocalOffsetStore",
    "decode_offsets",
    "default_offset_path",
    "encode_offsets",
]
