"""Persisting broker metadata tables (``config/*.json``) without blocking the event loop.

A table (topics, subscription groups, consumer offsets) lives in memory and is changed on the
event loop. Writing it is two steps with different homes::

    encode()  on the event loop: a consistent snapshot of the table as fastjson text
    persist   in a worker thread: tmp file → fsync → old file kept as .bak → rename → fsync dir

:class:`PersistScheduler` coalesces requests: while one write runs, any number of further
requests cause exactly one more write, of the newest snapshot. ``await flush()`` returns once
everything requested so far is on disk. Writes of one file never overlap, so the file on disk
only moves forward. A failed write (a full disk: :class:`~rocketq.errors.DiskFull`) is logged
at ERROR, kept in ``last_error`` and retried on the next request or ``flush``; ``flush`` raises
it when the write it waited for failed, so a request whose change must be on disk (a send that
created its topic, UPDATE_AND_CREATE_TOPIC, a consumer-offset commit while writes fail) is
answered with that error instead of success.

Without a running event loop (tools, tests) ``request`` writes synchronously.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from rocketq.errors import DiskFull, StoreError
from rocketq.protocol import fastjson

log = logging.getLogger(__name__)

T = TypeVar("T")


def load_json_file(path: str) -> dict[str, Any] | None:
    """The parsed file (``.bak`` when the main file is missing, empty or unparsable), or None
    when there is nothing usable; a top-level value that is not an object counts as unusable."""
    obj = fastjson.load_file(path)
    if obj is None:
        return None
    if not isinstance(obj, dict):
        log.warning("%s holds a JSON %s, not an object; ignoring it", path, type(obj).__name__)
        return None
    return obj


def named_objects(
    obj: dict[str, Any], key: str, from_json: Callable[[str, dict[str, Any]], T]
) -> dict[str, T]:
    """The name → JSON-object map under ``key`` (``topicConfigTable``, ``subscriptionGroupTable``)
    read with ``from_json(name, value)``; entries that are not objects or have no name are skipped,
    and so is a ``key`` that holds no map."""
    table = obj.get(key)
    if not isinstance(table, dict):
        return {}
    return {
        str(name): from_json(str(name), value)
        for name, value in table.items()
        if isinstance(value, dict) and name
    }


class JsonConfigFile:
    """Base of the managers kept in one ``config/*.json`` file (RocketMQ ``ConfigManager``):
    ``load`` reads the file (or its ``.bak``) and hands the object to ``decode``."""

    path: str | None

    def decode(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def loaded_summary(self) -> str:
        """What was loaded, for the log line."""
        return type(self).__name__

    def load(self) -> bool:
        """Merge the file's content in; False when there was no usable file."""
        if self.path is None:
            return False
        obj = load_json_file(self.path)
        if obj is None:
            return False
        self.decode(obj)
        log.info("loaded %s from %s", self.loaded_summary(), self.path)
        return True


class PersistScheduler:
    """Writes ``encode()`` to ``path`` on request, one write at a time, newest snapshot wins."""

    def __init__(
        self, path: str, encode: Callable[[], str], *, on_written: Callable[[], None] | None = None
    ) -> None:
        self.path = path
        self._encode = encode
        #: Called (on the loop) after a write of the last ``encode()`` snapshot succeeded.
        self._on_written = on_written
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self.writes = 0
        #: The error of the last write, None once a write succeeded.
        self.last_error: OSError | None = None

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def pending(self) -> bool:
        """A requested write has not finished yet (queued or running)."""
        return self._dirty or (self._task is not None and not self._task.done())

    def request(self) -> None:
        """Ask for the current table to be written (soon, off the event loop)."""
        self._dirty = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.persist_now()
            return
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())

    @property
    def failing(self) -> bool:
        """The last write failed and a change is still waiting to be written."""
        return self.last_error is not None and self._dirty

    def persist_now(self) -> None:
        """Write synchronously, in the calling thread (startup, tools, tests)."""
        self._dirty = False
        try:
            fastjson.persist(self.path, self._encode())
        except OSError as exc:
            self._dirty = True
            self.last_error = exc
            raise
        self.last_error = None
        self.writes += 1
        if self._on_written is not None:
            self._on_written()

    async def flush(self) -> None:
        """Return once every write requested so far is on disk. Concurrent callers share one
        write task (writes of one file never overlap). Raises :class:`~rocketq.errors.DiskFull`
        (or :class:`~rocketq.errors.StoreError` for another I/O error) when that write failed;
        the change stays queued and is written by the next successful attempt."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.shield(task)
        if self._dirty:
            task = self._task
            if task is None or task.done():
                task = self._task = asyncio.get_running_loop().create_task(self._run())
            await asyncio.shield(task)
        error = self.last_error
        if error is not None and self._dirty:
            if isinstance(error, DiskFull):
                raise DiskFull(str(error))
            raise StoreError(f"persisting {self.path} failed: {error}")

    async def _run(self) -> None:
        while self._dirty:
            self._dirty = False
            text = self._encode()
            try:
                await asyncio.to_thread(fastjson.persist, self.path, text)
                self.writes += 1
                if self._on_written is not None:
                    self._on_written()  # ``text`` is still the newest encode() snapshot
                if self.last_error is not None:
                    log.warning("persisting %s works again", self.path)
                self.last_error = None
            except OSError as exc:
                if self.last_error is None:
                    log.error("persisting %s failed: %s", self.path, exc)
                self.last_error = exc
                self._dirty = True  # retried on the next request or flush
                return
