"""MessageStore: the façade of the embedded storage engine.

Lifecycle::

    MessageStore(config)
      start():  lock the directory (``lock``, exclusive; a second opener gets StoreLocked)
                → load segments → recover (abnormal when the ``abort`` file exists)
                → start services → create ``abort``
      put_message / put_messages / look_message_by_offset / ...
      shutdown(): stop services, flush everything, delete ``abort``, unlock

The ``abort`` file exists exactly while the store runs, so finding it at start means the last run
did not shut down cleanly.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Sequence
from types import TracebackType

from rocketq.config import StoreConfig
from rocketq.errors import StoreLocked
from rocketq.message import BrokerMessage, Message, MessageExt, pack_socket_addr
from rocketq.store.commitlog import CommitLog, PutMessageResult
from rocketq.store.recovery import RecoveryReport, recover_commitlog

log = logging.getLogger(__name__)


class MessageStore:
    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        self.root = self.config.store_path_root_dir
        self.commitlog = CommitLog(self.config)
        self._lock_fd: int | None = None
        self._born_host = pack_socket_addr(self.config.store_host)
        self.last_exit_ok = True
        self.recovery: RecoveryReport | None = None
        self.started = False

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    @property
    def abort_file(self) -> str:
        return os.path.join(self.root, "abort")

    def _lock_dir(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"store directory {self.root} is in use by another process (lock held)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _unlock_dir(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def start(self) -> None:
        self._lock_dir()
        try:
            self.last_exit_ok = not os.path.exists(self.abort_file)
            self.commitlog.load()
            self.recovery = recover_commitlog(self.commitlog, check_crc=self.config.check_crc_on_recover)
            self._rebuild_queue_table()
            self.commitlog.start()
            with open(self.abort_file, "w") as f:
                f.write(str(os.getpid()))
        except BaseException:
            self.commitlog.queue.shutdown()
            self._unlock_dir()
            raise
        self.started = True
        log.info(
            "MessageStore started in %s (%s shutdown last time)",
            self.root,
            "clean" if self.last_exit_ok else "unclean",
        )

    def _rebuild_queue_table(self) -> None:
        table = self.commitlog.topic_queue_table
        table.clear()
        first = self.commitlog.queue.first()
        if first is None:
            return
        for _, view in self.commitlog.iter_records(first.file_from_offset):
            if view.sys_flag & 0xC in (0x4, 0xC):
                continue
            key = (view.topic, view.queue_id)
            if view.queue_offset + 1 > table.get(key, 0):
                table[key] = view.queue_offset + 1

    def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        self.commitlog.shutdown()
        try:
            os.unlink(self.abort_file)
        except FileNotFoundError:
            pass
        self._unlock_dir()
        log.info("MessageStore shut down")

    # -- writes -----------------------------------------------------------------------------
    def _inner(self, msg: Message | BrokerMessage, queue_id: int | None) -> BrokerMessage:
        if isinstance(msg, BrokerMessage):
            if queue_id is not None:
                msg.queue_id = queue_id
            return msg
        return BrokerMessage.from_message(msg, queue_id or 0, born_host=self._born_host)

    def put_message(self, msg: Message | BrokerMessage, queue_id: int | None = None) -> PutMessageResult:
        """Store one message in ``queue_id`` (default 0; a BrokerMessage keeps its own)."""
        return self.commitlog.put_message(self._inner(msg, queue_id))

    def put_messages(
        self, msgs: Sequence[Message | BrokerMessage], queue_id: int | None = None
    ) -> PutMessageResult:
        """Store a batch under one lock acquisition; consecutive queue offsets per queue."""
        return self.commitlog.put_messages([self._inner(m, queue_id) for m in msgs])

    # -- reads ------------------------------------------------------------------------------
    def look_message_by_offset(self, physical_offset: int, size: int | None = None) -> MessageExt | None:
        return self.commitlog.get_message(physical_offset, size)

    def get_max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    def get_min_phy_offset(self) -> int:
        return self.commitlog.min_offset
