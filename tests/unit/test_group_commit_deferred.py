"""GroupCommitService.put_deferred: a SYNC_FLUSH put that notes its durability wait instead of
blocking, and the future that tells when the record is durable."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore, PutMessageStatus
from rocketq.store.flush import IDLE_CHECK_S, GroupCommitService
from rocketq.store.mapped_file import MappedFileQueue

WAIT_S = 10.0


def group_commit(store: MessageStore) -> GroupCommitService:
    service = store.commitlog.group_commit
    assert isinstance(service, GroupCommitService)
    return service


def test_deferred_put_returns_before_the_sync_and_its_future_after(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=50)
    with MessageStore(cfg) as store:
        store.put_message(Message("T", b"first"))  # the first segment exists and is durable
        service = group_commit(store)
        gate, entered = threading.Event(), threading.Event()
        real_flush = MappedFileQueue.flush

        def held_flush(self: MappedFileQueue, least_pages: int) -> bool:
            entered.set()
            gate.wait(WAIT_S)
            return real_flush(self, least_pages)

        monkeypatch.setattr(MappedFileQueue, "flush", held_flush)
        try:
            # the flush is held, the timeout 50 ms: a waiting put would answer FLUSH_DISK_TIMEOUT
            result, offset = service.put_deferred(store.put_message, Message("T", b"second"))
            assert result.status is PutMessageStatus.PUT_OK
            assert offset == result.next_offset > store.commitlog.queue.flushed_where
            durable = service.submit(offset)
            assert entered.wait(WAIT_S)
            assert not durable.done()
            # a put on another thread meanwhile still waits (the deferral is this thread's only)
            other = []
            writer = threading.Thread(target=lambda: other.append(store.put_message(Message("T", b"third"))))
            writer.start()
            writer.join(WAIT_S)
            assert other[0].status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        finally:
            gate.set()
        assert durable.result(WAIT_S) is True
        assert store.commitlog.queue.flushed_where >= offset
        # outside put_deferred the store's put waits again, and an already durable offset is 0
        monkeypatch.setattr(MappedFileQueue, "flush", real_flush)
        assert store.put_message(Message("T", b"fourth")).status is PutMessageStatus.PUT_OK
        assert service.put_deferred(lambda: 7) == (7, 0)


def test_deferred_put_that_raises_leaves_no_deferral_behind(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        service = group_commit(store)

        def failing() -> None:
            raise ValueError("refused")

        with pytest.raises(ValueError, match="refused"):
            service.put_deferred(failing)
        r = store.put_message(Message("T", b"x"))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.commitlog.queue.flushed_where >= r.next_offset  # it waited for its sync


def test_group_commit_thread_polls_only_while_something_appended_is_not_durable(
    store_config: StoreConfig,
) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        service = group_commit(store)
        store.put_message(Message("T", b"durable"))  # waits for its round
        assert service.idle_seconds() == IDLE_CHECK_S
        _, offset = service.put_deferred(store.put_message, Message("T", b"appended"))
        if store.commitlog.queue.flushed_where < offset:  # not synced by a round yet
            assert service.idle_seconds() == service.interval_s == 0.01
        assert service.submit(offset).result(WAIT_S) is True
        assert service.idle_seconds() == IDLE_CHECK_S
