from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Iterator

import pytest

from rocketq.config import StoreConfig
from rocketq.errors import (
    MessageBodyTooLarge,
    MessageIllegal,
    PropertiesTooLarge,
    StoreLocked,
    StoreNotWritable,
    StoreShutdown,
    TopicNameInvalid,
)
from rocketq.message import BrokerMessage, Message, decode_offset_msg_id, pack_socket_addr
from rocketq.protocol import record as rec
from rocketq.store import MessageStore, PutMessageStatus
from rocketq.store.mapped_file import MappedFileQueue

SEG = 64 * 1024


@pytest.fixture
def store(store_config: StoreConfig) -> Iterator[MessageStore]:
    with MessageStore(store_config) as s:
        yield s


def msg(topic: str = "T", body: bytes = b"hello", **kw: object) -> Message:
    return Message(topic, body, **kw)  # type: ignore[arg-type]


def test_put_and_read_back(store: MessageStore) -> None:
    r = store.put_message(msg(tags="TagA", keys=["k1", "k2"], properties={"a": "b"}), queue_id=3)
    assert r.status is PutMessageStatus.PUT_OK
    assert r.physical_offset == 0
    assert r.queue_offset == 0
    m = store.look_message_by_offset(r.physical_offset)
    assert m is not None
    assert (m.topic, m.body, m.queue_id, m.queue_offset) == ("T", b"hello", 3, 0)
    assert m.tags == "TagA"
    assert m.keys == ["k1", "k2"]
    assert m.properties["a"] == "b"
    assert m.commit_log_offset == 0
    assert m.store_size == r.size
    assert m.msg_id == r.msg_id
    assert decode_offset_msg_id(r.msg_id).offset == 0
    assert m.store_timestamp == r.store_timestamp


def test_a_single_put_s_result_does_not_depend_on_the_path_that_took_it(store: MessageStore) -> None:
    """The first put of a topic goes through the batch path, the next ones through the fast
    path (or the compiled lane): the same fields, ``physical_offsets`` None on every one."""
    results = [store.put_message(msg("SingleResultT", b"m%d" % i)) for i in range(3)]
    assert [r.physical_offsets for r in results] == [None, None, None]
    assert [r.msg_num for r in results] == [1, 1, 1]
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert results[1].physical_offset == results[0].next_offset
    assert [len(r.msg_ids) for r in results] == [1, 1, 1]


def test_queue_offsets_are_per_topic_queue(store: MessageStore) -> None:
    seen = {}
    for i in range(30):
        topic = "A" if i % 2 else "B"
        qid = i % 3
        r = store.put_message(msg(topic), queue_id=qid)
        seen.setdefault((topic, qid), []).append(r.queue_offset)
    for offsets in seen.values():
        assert offsets == list(range(len(offsets)))


def test_physical_offsets_are_contiguous_and_roll_with_blank(store: MessageStore) -> None:
    body = b"x" * 1000
    results = [store.put_message(msg(body=body)) for _ in range(200)]  # ~3 segments of 64 KiB
    for a, b in itertools.pairwise(results):
        if a.next_offset // SEG == b.physical_offset // SEG:
            assert b.physical_offset == a.next_offset
        else:  # rolled: the next record starts a new segment and a BLANK fills the old one
            assert b.physical_offset % SEG == 0
            head = store.commitlog.read(a.next_offset, 8)
            assert head is not None
            size, magic = (
                int.from_bytes(head[:4], "big", signed=True),
                int.from_bytes(head[4:], "big", signed=True),
            )
            assert magic == rec.BLANK_MAGIC_CODE
            assert size == SEG - a.next_offset % SEG
    # No record ends within the last 8 bytes of its segment.
    for r in results:
        assert SEG - (r.next_offset % SEG or SEG) >= 8 or r.next_offset % SEG == 0
    assert len(store.commitlog.queue.files) >= 3


def test_rejected_messages_write_nothing(store: MessageStore, store_config: StoreConfig) -> None:
    store.put_message(msg())
    end = store.get_max_phy_offset()
    table = dict(store.commitlog.topic_queue_table)
    too_big = b"x" * (store_config.max_message_size + 1)
    with pytest.raises(
        MessageBodyTooLarge, match=f"{len(too_big)} B exceeds max {store_config.max_message_size} B"
    ):
        store.put_message(msg(body=too_big))
    with pytest.raises(PropertiesTooLarge, match="exceed max 32767 B"):
        store.put_message(msg(properties={"p": "v" * 40_000}))
    with pytest.raises(TopicNameInvalid):
        store.put_message(msg(topic="bad topic!"))
    with pytest.raises(TopicNameInvalid):
        store.put_message(msg(topic=""))
    with pytest.raises(MessageIllegal, match="exceeds the limit"):
        store.put_message(msg(body=b"x" * SEG))  # larger than a segment
    with pytest.raises(MessageIllegal):
        store.put_messages([msg(), msg(body=too_big)])  # one bad message rejects the batch
    assert store.get_max_phy_offset() == end
    assert store.commitlog.topic_queue_table == table


def test_errors_carry_wire_codes() -> None:
    assert MessageBodyTooLarge.code == 13
    assert StoreNotWritable.code == 14
    assert StoreShutdown.code == 14


def test_long_topic_uses_v2_and_ipv6_hosts(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, store_host="[::1]:10911")
    with MessageStore(cfg) as store:
        topic = "t" * 200
        born = pack_socket_addr("[2001:db8::1]:5555")
        r = store.put_message(BrokerMessage(topic, b"v2 body", b"KEYS\x01k\x02", born_host=born))
        data = store.commitlog.read(r.physical_offset, r.size)
        assert data is not None
        view = rec.decode_record(data)
        assert view.kind is rec.RecordKind.MESSAGE
        assert view.v2 and view.topic == topic
        assert view.sys_flag & (rec.BORNHOST_V6_FLAG | rec.STOREHOSTADDRESS_V6_FLAG) == 0x30
        assert len(r.msg_id) == 56
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None and m.born_host == "[2001:db8::1]:5555" and m.store_host == "[::1]:10911"
        short = store.put_message(msg(topic="s" * 127))
        view2 = rec.decode_record(store.commitlog.read(short.physical_offset, short.size) or b"")
        assert not view2.v2


def test_batch_is_contiguous_with_consecutive_queue_offsets(store: MessageStore) -> None:
    store.put_message(msg(), queue_id=1)
    r = store.put_messages([msg(body=bytes([i]) * 10) for i in range(32)], queue_id=1)
    assert r.msg_num == 32
    assert r.queue_offset == 1
    assert r.physical_offsets is not None and len(r.physical_offsets) == 32
    assert len(r.msg_ids) == 32
    assert r.msg_id.count(",") == 31
    for i, off in enumerate(r.physical_offsets):
        m = store.look_message_by_offset(off)
        assert m is not None and m.queue_offset == 1 + i and m.body == bytes([i]) * 10
    assert r.next_offset == store.get_max_phy_offset()


def test_batch_that_does_not_fit_goes_whole_to_next_segment(store: MessageStore) -> None:
    filler = store.put_message(msg(body=b"f" * (SEG - 3000)))
    r = store.put_messages([msg(body=b"b" * 500) for _ in range(8)])  # ~4.8 KiB, does not fit
    assert filler.physical_offset // SEG == 0
    assert r.physical_offset == SEG
    assert r.physical_offsets is not None and all(o // SEG == 1 for o in r.physical_offsets)


def test_transaction_prepared_and_rollback_take_no_queue_offset(store: MessageStore) -> None:
    base = {"topic": "TX", "body": b"half", "properties": b""}
    a = store.put_message(BrokerMessage(**base, sys_flag=rec.TRANSACTION_PREPARED_TYPE))  # type: ignore[arg-type]
    b = store.put_message(BrokerMessage(**base, sys_flag=rec.TRANSACTION_ROLLBACK_TYPE))  # type: ignore[arg-type]
    c = store.put_message(BrokerMessage(**base, sys_flag=rec.TRANSACTION_COMMIT_TYPE))  # type: ignore[arg-type]
    d = store.put_message(BrokerMessage(**base))  # type: ignore[arg-type]
    assert (a.queue_offset, b.queue_offset, c.queue_offset, d.queue_offset) == (0, 0, 0, 1)


def test_sync_flush_returns_only_when_durable(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        for _ in range(20):
            r = store.put_message(msg(body=b"s" * 300))
            assert r.status is PutMessageStatus.PUT_OK
            assert store.commitlog.flushed_where >= r.next_offset


def test_sync_flush_group_commit_serves_concurrent_writers(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=1 << 20)
    with MessageStore(cfg) as store:
        per_thread = 50
        errors: list[BaseException] = []
        results = []

        def writer(i: int) -> None:
            try:
                for _ in range(per_thread):
                    r = store.put_message(msg(body=b"g" * 100), queue_id=i)
                    assert store.commitlog.flushed_where >= r.next_offset
                    results.append(r.status)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert results == [PutMessageStatus.PUT_OK] * (8 * per_thread)
        gc = store.commitlog.group_commit
        assert gc is not None
        assert gc.rounds < 8 * per_thread  # at least some syncs served several writers


def test_sync_flush_timeout_reports_status_and_keeps_message(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=50)
    with MessageStore(cfg) as store:
        store.put_message(msg())  # allocate the first segment
        release = threading.Event()
        real_flush = MappedFileQueue.flush
        waiter_started = threading.Event()

        def stuck_flush(self: MappedFileQueue, least_pages: int) -> bool:
            waiter_started.set()
            release.wait(10)
            return real_flush(self, least_pages)

        monkeypatch.setattr(MappedFileQueue, "flush", stuck_flush)
        results = []
        t1 = threading.Thread(target=lambda: results.append(store.put_message(msg(body=b"first"))))
        t1.start()
        assert waiter_started.wait(5)
        r = store.put_message(msg(body=b"second"))  # queued behind a stuck sync
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        release.set()
        t1.join()
        monkeypatch.setattr(MappedFileQueue, "flush", real_flush)
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None and m.body == b"second"


def test_write_buffer_pool_commits_and_survives_restart(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, transient_store_pool_enable=True, transient_store_pool_size=3)
    offsets = []
    with MessageStore(cfg) as store:
        assert store.commitlog.transient_pool is not None
        for i in range(150):
            offsets.append(store.put_message(msg(body=str(i).encode() * 50)).physical_offset)
        assert store.commitlog.commit_service is not None
    with MessageStore(cfg) as store:
        for i, off in enumerate(offsets):
            m = store.look_message_by_offset(off)
            assert m is not None and m.body == str(i).encode() * 50
        r = store.put_message(msg(body=b"after"))
        assert r.physical_offset > offsets[-1]


def test_write_buffer_pool_only_with_async_flush(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH")
    assert not cfg.transient_store_pool_active


def test_second_open_of_same_directory_is_refused(store: MessageStore, store_config: StoreConfig) -> None:
    with pytest.raises(StoreLocked, match="in use by another process"):
        MessageStore(store_config).start()


def test_not_writable_and_shutdown_errors(store_config: StoreConfig) -> None:
    store = MessageStore(store_config)
    store.start()
    store.commitlog.set_writable(False, "disk full: 91% used, limit 90%")
    with pytest.raises(StoreNotWritable, match="disk full"):
        store.put_message(msg())
    store.commitlog.set_writable(True)
    store.put_message(msg())
    store.shutdown()
    with pytest.raises(StoreShutdown):
        store.commitlog.put_message(BrokerMessage("T", b"x"))


def test_shutdown_flushes_and_removes_abort(store_config: StoreConfig) -> None:
    store = MessageStore(store_config)
    store.start()
    abort = os.path.join(store_config.store_path_root_dir, "abort")
    assert os.path.exists(abort)
    r = store.put_message(msg())
    store.shutdown()
    assert not os.path.exists(abort)
    assert store.commitlog.queue.flushed_where >= r.next_offset
    with MessageStore(store_config) as again:
        assert again.last_exit_ok
        assert again.get_max_phy_offset() == r.next_offset
        assert again.put_message(msg()).queue_offset == 1


def test_iter_records_spans_segments(store: MessageStore) -> None:
    sent = [store.put_message(msg(body=bytes([i % 251]) * 700)).physical_offset for i in range(300)]
    seen = [off for off, _ in store.commitlog.iter_records(0, check_crc=True)]
    assert seen == sent


def test_batch_across_queues_and_topics_takes_the_general_path(store: MessageStore) -> None:
    batch = [
        BrokerMessage("A", b"a0", queue_id=0),
        BrokerMessage("B", b"b0", queue_id=1),
        BrokerMessage("A", b"a1", queue_id=0),
        BrokerMessage("A", b"half", queue_id=0, sys_flag=rec.TRANSACTION_PREPARED_TYPE),
        BrokerMessage("t" * 130, b"v2", queue_id=2),  # V2 layout inside a batch
    ]
    r = store.commitlog.put_messages(batch)
    assert r.msg_num == 5 and r.physical_offsets is not None
    got = [store.look_message_by_offset(o) for o in r.physical_offsets]
    assert [(m.topic[:1], m.queue_id, m.queue_offset, m.body) for m in got if m] == [
        ("A", 0, 0, b"a0"),
        ("B", 1, 0, b"b0"),
        ("A", 0, 1, b"a1"),
        ("A", 0, 0, b"half"),
        ("t", 2, 0, b"v2"),
    ]
    assert store.commitlog.topic_queue_table[("A", 0)] == 2
