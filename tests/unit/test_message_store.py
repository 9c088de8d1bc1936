from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from _support.files import tree_bytes
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import DiskFull, ServiceNotAvailable, SystemBusy
from rocketq.message import (
    BrokerMessage,
    Message,
    UniqueIdGenerator,
    encode_properties,
    tags_code,
    unpack_socket_addr,
)
from rocketq.store import MessageStore
from rocketq.store.dispatch import parse_delay_levels
from rocketq.store.message_store import open_message_store
from rocketq.store.record_scan import SCHEDULE_TOPIC
from rocketq.store.retention import decide, is_delete_hour
from rocketq.store.store_queries import GetMessageStatus


@pytest.fixture
def store(store_config: StoreConfig) -> Iterator[MessageStore]:
    with MessageStore(store_config) as s:
        yield s


def put_n(store: MessageStore, n: int, topic: str = "T", queues: int = 2) -> list[int]:
    ids = UniqueIdGenerator()
    offsets = []
    for i in range(n):
        m = Message(topic, f"m{i}".encode(), tags="A" if i % 3 == 0 else "B", keys=[f"k{i}", "shared"])
        m.properties["UNIQ_KEY"] = ids.next_id()
        offsets.append(store.put_message(m, queue_id=i % queues).physical_offset)
    assert store.wait_dispatched(10)
    return offsets


def test_get_message_found_and_next_offset(store: MessageStore) -> None:
    put_n(store, 40)
    g = store.get_message("G", "T", 0, 0, 5)
    assert g.status is GetMessageStatus.FOUND
    assert [m.body for m in g.messages] == [b"m0", b"m2", b"m4", b"m6", b"m8"]
    assert g.queue_offsets == [0, 1, 2, 3, 4]
    assert g.next_begin_offset == 5
    assert (g.min_offset, g.max_offset) == (0, 20)
    assert [m.queue_offset for m in g.messages] == [0, 1, 2, 3, 4]


def test_get_message_statuses_outside_range(store: MessageStore) -> None:
    put_n(store, 10)
    assert store.get_message("G", "nope", 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    one = store.get_message("G", "T", 0, 5)
    assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 5
    bad = store.get_message("G", "T", 0, 99)
    assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert bad.next_begin_offset == 0  # min offset is 0: RocketMQ corrects to the minimum
    neg = store.get_message("G", "T", 0, -1)
    assert neg.status is GetMessageStatus.OFFSET_TOO_SMALL and neg.next_begin_offset == 0


def test_get_message_tag_filter(store: MessageStore) -> None:
    put_n(store, 30, queues=1)
    g = store.get_message("G", "T", 0, 0, 32, [tags_code("A")])
    assert g.status is GetMessageStatus.FOUND
    assert [m.tags for m in g.messages] == ["A"] * 10
    assert g.next_begin_offset == 30
    none = store.get_message("G", "T", 0, 1, 1, [tags_code("nope")])
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert none.next_begin_offset > 1  # the scan moved forward


def test_min_max_and_offset_by_time(store: MessageStore) -> None:
    put_n(store, 6, queues=1)
    before = time.time_ns() // 1_000_000
    # Messages stored in the same millisecond share a store time; wait for the clock to move.
    wait_until(
        lambda: time.time_ns() // 1_000_000 > before + 1, "the clock to pass a millisecond", 10.0, 0.005
    )
    store.put_message(Message("T", b"late"), queue_id=0)
    assert store.wait_dispatched()
    assert store.get_min_offset("T", 0) == 0
    assert store.get_max_offset("T", 0) == 7
    assert store.get_offset_by_time("T", 0, before + 1) == 6
    assert store.get_offset_by_time("T", 0, 0) == 0
    assert store.get_offset_by_time("T", 0, 2**62) == 7
    assert store.get_earliest_message_time("T", 0) > 0


def test_query_by_key_and_uniq_key_and_id(store: MessageStore) -> None:
    offsets = put_n(store, 20)
    q = store.query_messages_by_key("T", "k7")
    assert [m.body for m in q.messages] == [b"m7"]
    shared = store.query_messages_by_key("T", "shared", max_count=50)
    assert len(shared.messages) == 20
    assert [m.commit_log_offset for m in shared.messages] == offsets
    uniq = shared.messages[3].uniq_key
    assert uniq is not None
    assert [m.body for m in store.query_messages_by_key("T", uniq).messages] == [b"m3"]
    assert store.query_messages_by_key("Other", "k7").messages == []
    assert (
        store.query_messages_by_key("T", "k7", begin_ms=time.time_ns() // 1_000_000 + 10_000).messages == []
    )
    m = store.look_message_by_id(shared.messages[5].msg_id)
    assert m is not None and m.body == b"m5"
    assert store.look_message_by_id("not-an-id") is None


def test_restart_keeps_queues_and_offsets(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        put_n(s, 1200)  # several segments
        assert len(s.commitlog.queue.files) >= 3
    with MessageStore(store_config) as s:
        assert s.last_exit_ok
        # The whole log is within clean_recover_verify_bytes: all of it is verified again.
        assert s.recovery is not None
        assert s.recovery.start_offset == 0
    bounded = dataclasses.replace(store_config, clean_recover_verify_bytes=1)
    with MessageStore(bounded) as s:
        # Only the segment holding the checkpointed offset is verified again, not the whole log.
        assert s.recovery is not None
        assert s.recovery.start_offset >= s.commitlog.queue.files[-1].file_from_offset > 0
        assert s.get_max_offset("T", 0) == 600
        r = s.put_message(Message("T", b"next"), queue_id=0)
        assert r.queue_offset == 600
        assert s.query_messages_by_key("T", "k1199").messages[0].body == b"m1199"


def test_abnormal_restart_redispatches(store_config: StoreConfig) -> None:
    s = MessageStore(store_config)
    s.start()
    put_n(s, 30)
    # Simulate a crash after the CommitLog was written but before the queues were flushed:
    # the queues and index are removed, the abort file stays.
    s.commitlog.shutdown()
    s.consume_queues.shutdown()
    assert s.index_service is not None
    s.index_service.shutdown()
    assert s.checkpoint is not None
    s.checkpoint.shutdown()
    s._unlock_dir()
    for stop in (s.reput, s.schedule, s.retention):
        assert stop is not None
        stop.shutdown()
    assert os.path.exists(s.abort_file)
    shutil.rmtree(os.path.join(store_config.store_path_root_dir, "consumequeue"))
    with MessageStore(store_config) as again:
        assert not again.last_exit_ok
        assert again.get_max_offset("T", 0) == 15
        assert again.get_max_offset("T", 1) == 15
        assert [m.body for m in again.get_message("G", "T", 1, 0, 3).messages] == [b"m1", b"m3", b"m5"]
        assert again.put_message(Message("T", b"x"), queue_id=1).queue_offset == 15


def test_deleting_queues_and_index_rebuilds_them_identically(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        put_n(s, 400, queues=3)  # several CQ files and index files
    root = store_config.store_path_root_dir
    cq_before = tree_bytes(os.path.join(root, "consumequeue"))
    index_before = sorted(tree_bytes(os.path.join(root, "index")).values())
    assert len(index_before) >= 2
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))
    with MessageStore(store_config) as s:
        assert s.get_max_offset("T", 2) == 133
    assert tree_bytes(os.path.join(root, "consumequeue")) == cq_before
    assert sorted(tree_bytes(os.path.join(root, "index")).values()) == index_before


def test_transactions_prepared_not_in_queue(store: MessageStore) -> None:
    store.put_message(BrokerMessage("TX", b"half", b"", sys_flag=0x4))
    store.put_message(BrokerMessage("TX", b"commit", b"", sys_flag=0x8))
    assert store.wait_dispatched()
    assert store.get_max_offset("TX", 0) == 1
    assert [m.body for m in store.get_message("G", "TX", 0, 0).messages] == [b"commit"]


def test_delay_level_message_goes_through_schedule_topic(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, message_delay_level="1s 2s")
    with MessageStore(cfg) as s:
        r = s.put_message(Message("D", b"later", delay_level=1, keys=["dk"]), queue_id=3)
        assert s.wait_dispatched()
        cq = s.find_consume_queue(SCHEDULE_TOPIC, 0)
        assert cq is not None
        unit = cq.get_unit(0)
        assert unit is not None and unit.offset == r.physical_offset
        # The tags code of a schedule unit is the delivery time: store time + 1 s.
        assert unit.tags == r.store_timestamp + 1000
        assert s.get_max_offset("D", 3) == 0
        wait_until(lambda: s.get_max_offset("D", 3) == 1, "D/3 to reach offset 1", 10, 0.005)
        delivered = s.get_message("G", "D", 3, 0).messages[0]
        assert delivered.body == b"later"
        assert delivered.store_timestamp >= r.store_timestamp + 1000
        assert "DELAY" not in delivered.properties
        assert delivered.properties["REAL_TOPIC"] == "D"
        # Levels above the maximum are clamped to it.
        big = s.put_message(Message("D", b"max", delay_level=99))
        assert s.look_message_by_offset(big.physical_offset).properties["DELAY"] == "2"  # type: ignore[union-attr]
        assert s.schedule is not None
    with MessageStore(cfg) as again:
        assert again.schedule is not None and again.schedule.offset_table.get(1) == 1
        text = pathlib.Path(cfg.store_path_root_dir, "config", "delayOffset.json").read_text()
        assert '"offsetTable":{' in text and "\t1:1" in text  # fastjson style: unquoted int keys


def test_parse_delay_levels() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18 and levels[1] == 1000 and levels[18] == 7_200_000
    with pytest.raises(ValueError, match="delay level 2"):
        parse_delay_levels("1s 5x")


def test_retention_rules() -> None:
    cfg = StoreConfig()
    assert decide(cfg, 0.50, delete_hour=False) == decide(cfg, 0.50, False)
    quiet = decide(cfg, 0.50, delete_hour=False)
    assert not quiet.delete and not quiet.force and not quiet.disk_full
    assert decide(cfg, 0.50, delete_hour=True).delete
    early = decide(cfg, 0.80, delete_hour=False)
    assert early.delete and not early.force
    forced = decide(cfg, 0.86, delete_hour=False)
    assert forced.delete and forced.force and not forced.disk_full
    full = decide(cfg, 0.91, delete_hour=False)
    assert full.disk_full and full.force
    assert is_delete_hour("04", dt.datetime(2026, 1, 1, 4, 30))
    assert is_delete_hour("03;04", dt.datetime(2026, 1, 1, 3, 0))
    assert not is_delete_hour("04", dt.datetime(2026, 1, 1, 5, 0))


def test_disk_full_watermark_refuses_writes_then_recovers(
    store: MessageStore, store_config: StoreConfig
) -> None:
    usage = [0.95]
    svc = store.retention_service(usage=lambda: usage[0], now=lambda: dt.datetime(2026, 1, 1, 12, 0))
    svc.run_once()
    with pytest.raises(DiskFull, match="disk full: 95% used, limit 90%"):
        store.put_message(Message("T", b"x"))
    usage[0] = 0.5
    svc.run_once()
    assert store.put_message(Message("T", b"x")).ok


def test_retention_deletes_expired_segments_and_queue_files(
    store: MessageStore, store_config: StoreConfig
) -> None:
    put_n(store, 3000, queues=1)  # many 64 KiB segments
    files = store.commitlog.queue.files
    assert len(files) > 4
    old = 1_000_000
    for mf in files[:-2]:
        os.utime(mf.file_name, (old, old))
    svc = store.retention_service(
        usage=lambda: 0.1,
        now=lambda: dt.datetime(2026, 1, 1, 4, 0),  # the delete hour
    )
    svc.run_once()
    assert svc.deleted_segments == min(10, len(files) - 2)
    low = store.commitlog.min_offset
    assert low > 0
    min_q = store.get_min_offset("T", 0)
    assert min_q > 0
    g = store.get_message("G", "T", 0, 0)
    assert g.status is GetMessageStatus.OFFSET_TOO_SMALL and g.next_begin_offset == min_q
    first = store.get_message("G", "T", 0, min_q, 1).messages[0]
    assert first.commit_log_offset >= low


def _mount_tmpfs(path: pathlib.Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False, capture_output=True
    )
    return r.returncode == 0


def test_real_disk_full_gives_clear_error_and_loses_nothing(tmp_path: pathlib.Path) -> None:
    mnt = tmp_path / "small-disk"
    if not _mount_tmpfs(mnt, "1m"):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        cfg = StoreConfig(
            store_path_root_dir=str(mnt / "store"),
            mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=2000,
            max_hash_slot_num=16,
            max_index_num=32,
            message_index_enable=False,
        )
        stored = []
        with MessageStore(cfg) as s:
            props = encode_properties({"k": "v"}).encode()
            with pytest.raises(DiskFull, match="disk full"):
                for i in range(100_000):
                    r = s.put_message(BrokerMessage("T", bytes([i % 251]) * 2000, props))
                    stored.append((r.physical_offset, i))
            assert len(stored) > 100
        with MessageStore(cfg) as s:
            for off, i in stored:
                m = s.look_message_by_offset(off)
                assert m is not None and m.body == bytes([i % 251]) * 2000
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)  # lazy: never leave it mounted


def test_runtime_info(store: MessageStore) -> None:
    put_n(store, 5)
    info = store.runtime_info()
    assert info["putMessageTimesTotal"] == "5"
    assert info["dispatchBehindBytes"] == "0"
    assert int(info["commitLogMaxOffset"]) == store.get_max_phy_offset()


def test_whole_record_crc_catches_damage_the_body_crc_misses(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, enabled_append_prop_crc=True)
    with MessageStore(cfg) as s:
        first = s.put_message(Message("T", b"kept", keys=["a"]))
        last = s.put_message(Message("T", b"damaged", keys=["b"]))
    # Flip a byte of the last record's properties: its body CRC still matches.
    seg = pathlib.Path(cfg.commit_log_dir, f"{0:020d}")
    data = bytearray(seg.read_bytes())
    pos = last.physical_offset + last.size - 25  # inside the properties, before the CRC field
    data[pos] ^= 0x01
    seg.write_bytes(bytes(data))
    with MessageStore(cfg) as s:
        assert s.get_max_phy_offset() == first.next_offset
        assert s.look_message_by_offset(last.physical_offset) is None


def test_clean_restart_verifies_a_bounded_tail(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, clean_recover_verify_bytes=10_000)
    with MessageStore(cfg) as s:
        offsets = put_n(s, 400, queues=3)
        end = s.get_max_phy_offset()
    with MessageStore(cfg) as s:
        assert s.recovery is not None
        start = s.recovery.start_offset
        # A record start about 10 000 B before the end, not a segment start.
        assert start in offsets
        assert end - 10_000 - 200 <= start <= end - 10_000
        assert start % cfg.mapped_file_size_commit_log != 0
        assert s.recovery.records_scanned == len([o for o in offsets if o >= start])
    # Damage inside that tail is still found after a clean shutdown: the damaged record is
    # quarantined, the two after it stay.
    victim = offsets[-3]
    seg = pathlib.Path(cfg.commit_log_dir, f"{victim - victim % cfg.mapped_file_size_commit_log:020d}")
    data = bytearray(seg.read_bytes())
    data[victim % cfg.mapped_file_size_commit_log + 90] ^= 0xFF  # inside the body
    seg.write_bytes(bytes(data))
    with MessageStore(cfg) as s:
        assert s.recovery is not None
        assert [(r.offset, r.end) for r in s.recovery.plan.quarantined] == [(victim, offsets[-2])]
        assert s.get_max_phy_offset() == end
        got = s.look_message_by_offset(victim)
        assert got is None or got.topic == "%QUARANTINE%"
        for off in offsets[-2:]:
            m = s.look_message_by_offset(off)
            assert m is not None and m.commit_log_offset == off


@pytest.mark.parametrize(("yield_lag_bytes", "expect_yields"), [(1, True), (0, False), (1 << 40, False)])
def test_put_yields_the_gil_to_dispatch_only_above_the_soft_lag(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch, yield_lag_bytes: int, expect_yields: bool
) -> None:
    """A tight put loop never blocks, so it yields the GIL (``time.sleep(0)``) while dispatch is
    more than ``dispatch_yield_lag_bytes`` behind; never when disabled (0) or below the limit."""
    yields: list[float] = []
    real_sleep = time.sleep

    def counting_sleep(seconds: float) -> None:
        yields.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", counting_sleep)  # the store calls time.sleep
    cfg = dataclasses.replace(store_config, dispatch_yield_lag_bytes=yield_lag_bytes)
    with MessageStore(cfg) as s:
        put_n(s, 300)
        assert s.wait_dispatched(10)
    assert (0 in yields) is expect_yields


def _record_fields(store: MessageStore, offset: int) -> tuple[object, ...]:
    ext = store.look_message_by_offset(offset)
    assert ext is not None
    return (ext.topic, ext.body, ext.properties, ext.queue_id, ext.flag, ext.sys_flag, ext.born_host)


@pytest.mark.parametrize("batched", [False, True])
def test_plain_message_is_stored_as_from_message_makes_it(store_config: StoreConfig, batched: bool) -> None:
    """A ``Message`` that nothing parks takes the store's short conversion; its record must be
    the one ``BrokerMessage.from_message`` gives (properties in the same order, same flag, born
    host, queue), and messages that a delay level or a timer property parks still are parked."""
    msgs = [
        Message("T", b"a", tags="A", keys=["k1", "k2"], properties={"UNIQ_KEY": "U1", "X": "y"}, flag=3),
        Message("T", b"b", properties={"TAGS": "first", "Z": "1"}, tags="later"),  # TAGS keeps its place
        Message("T", b"c", properties={"WAIT": "TIMER_X"}),  # a value mentioning TIMER_ parks nothing
        Message("T", b"d", delay_level=2),
        Message("T", b"e", properties={"DELAY": "1"}),
        Message("T", b"f", properties={"TIMER_DELAY_SEC": "30"}),
    ]
    with MessageStore(store_config) as s:
        host = s._born_host
        if batched:
            r = s.put_messages(msgs[:3], queue_id=1)
            offsets = list(r.physical_offsets)
            offsets += [s.put_message(m, queue_id=1).physical_offset for m in msgs[3:]]
        else:
            offsets = [s.put_message(m, queue_id=1).physical_offset for m in msgs]
        got = [_record_fields(s, off) for off in offsets]
    for m, fields in zip(msgs[:3], got[:3], strict=True):
        want = BrokerMessage.from_message(m, 1, born_host=host)
        assert fields == ("T", m.body, want.property_map(), 1, m.flag, 0, unpack_socket_addr(host))
        ext_props = encode_properties(fields[2]).encode()  # type: ignore[arg-type]
        assert ext_props == want.properties
    assert [f[0] for f in got[3:]] == [SCHEDULE_TOPIC, SCHEDULE_TOPIC, "rmq_sys_wheel_timer"]


def test_pull_body_is_the_records_joined_and_leaves_no_views_on_segments(
    store_config: StoreConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """``get_message`` joins the records from slices of the mapped CommitLog: the body is the
    records one after another, ``buffers`` cut from it are the records, a filter that replaces
    the buffers changes the body, and no slice outlives the read (a segment closes cleanly)."""
    caplog.set_level(logging.WARNING, logger="rocketq.store")
    with MessageStore(store_config) as s:
        put_n(s, 60)
        g = s.get_message("G", "T", 1, 3, 8)
        assert g.status is GetMessageStatus.FOUND and g.message_count == 8
        assert g.queue_offsets == list(range(3, 11))
        records = [s.commitlog.read(m.commit_log_offset, m.store_size) for m in g.messages]
        assert g.body == b"".join(r or b"" for r in records)
        assert g.buffers == records and g.buffer_total_size == len(g.body)
        assert [m.body for m in g.messages] == [f"m{i}".encode() for i in range(7, 23, 2)]
        g.buffers = g.buffers[2:4]
        assert g.body == b"".join(records[2:4]) and g.message_count == 2
        assert all(mf.ref_count == 1 for mf in s.commitlog.queue.files)
    assert not [r for r in caplog.records if "exported views" in r.getMessage()]


def test_puts_are_refused_once_dispatch_is_too_far_behind(store_config: StoreConfig) -> None:
    """The lag is looked at once per a sixteenth of the limit put, so a writer whose dispatch has
    stopped is refused (SystemBusy) no later than a sixteenth of the limit past it, and nothing
    refused is written."""
    cfg = dataclasses.replace(
        store_config, max_dispatch_lag_bytes=64 * 1024, dispatch_yield_lag_bytes=0, put_message_timeout_ms=50
    )
    with MessageStore(cfg) as s:
        assert s.reput is not None
        s.reput.stop()
        s.reput._thread.join(10)
        start = s.get_max_phy_offset()
        with pytest.raises(SystemBusy, match="dispatch is"):
            for i in range(10_000):
                s.put_message(Message("T", b"x" * 100, properties={"UNIQ_KEY": f"U{i}"}), queue_id=0)
        lag = s.get_max_phy_offset() - start
        assert 64 * 1024 < lag <= 64 * 1024 + 64 * 1024 // 16 + 200
        end = s.get_max_phy_offset()
        with pytest.raises(SystemBusy):
            s.put_message(Message("T", b"refused"), queue_id=0)
        assert s.get_max_phy_offset() == end


@pytest.mark.parametrize("dledger", [False, True], ids=["plain", "dledger"])
def test_a_started_store_checkpoints_its_dispatched_position_at_its_first_flush(
    store_config: StoreConfig, dledger: bool
) -> None:
    """The first ConsumeQueue flush after a start is thorough (as RocketMQ's, whose last flush
    time starts at 0): the checkpoint holds a dispatched position within a flush interval, not a
    thorough interval (a minute) later, so a store killed in its first minute resumes dispatch
    from there instead of rebuilding every ConsumeQueue and the index."""
    cfg = dataclasses.replace(
        store_config,
        flush_interval_consume_queue_ms=50,
        enable_dleger_commit_log=dledger,
        d_leger_self_id="n0" if dledger else "",
    )
    assert cfg.flush_consume_queue_thorough_interval_ms == 60_000
    with open_message_store(cfg) as s:
        r = s.put_message(Message("T", b"first"), queue_id=0)
        assert s.wait_dispatched(10)
        cp = s.checkpoint
        assert cp is not None
        wait_until(lambda: cp.dispatched_phy_offset > r.physical_offset, "the first thorough flush", 10)


@pytest.mark.parametrize("dledger", [False, True], ids=["plain", "dledger"])
def test_a_store_whose_first_flush_came_before_any_put_checkpoints_its_first_dispatch(
    store_config: StoreConfig, dledger: bool
) -> None:
    """The first flush after a start may run before anything is put (a store opened and left
    idle, or a put that comes late): the first flush after dispatch has moved on is thorough as
    well, so the checkpoint does not wait a thorough interval (a minute) for the first messages."""
    cfg = dataclasses.replace(
        store_config,
        flush_interval_consume_queue_ms=50,
        enable_dleger_commit_log=dledger,
        d_leger_self_id="n0" if dledger else "",
    )
    with open_message_store(cfg) as s:
        cp = s.checkpoint
        assert cp is not None
        flushes: list[int] = []
        checkpoint_flush = cp.flush

        def counted() -> None:
            checkpoint_flush()
            flushes.append(cp.dispatched_phy_offset)

        cp.flush = counted  # type: ignore[method-assign]
        wait_until(lambda: flushes, "the first thorough flush, before any put", 10)
        r = s.put_message(Message("T", b"late"), queue_id=0)
        assert s.wait_dispatched(10)
        wait_until(lambda: flushes[-1] > r.physical_offset, "a thorough flush after the put", 10)


@pytest.mark.parametrize("clean", [True, False], ids=["shutdown", "abort"])
def test_a_queue_whose_first_file_was_reserved_but_never_written_is_not_in_the_table(
    store_config: StoreConfig, clean: bool
) -> None:
    """A put reserves a queue's first ConsumeQueue file before its record is written; a store
    killed in between reopens with an empty queue, which the queue-offset table leaves out
    (next offset 0 either way), so the table names exactly the queues that have messages."""
    s = MessageStore(store_config)
    s.start()
    r = s.put_message(Message("Written", b"x"), queue_id=0)
    assert r.ok
    s.consume_queues.reserve("Reserved", 2, 0)
    assert os.listdir(os.path.join(s.consume_queues.directory, "Reserved", "2"))
    s.shutdown()
    if not clean:  # as a killed writer leaves it: the abort file there, recovery abnormal
        pathlib.Path(store_config.store_path_root_dir, "abort").touch()
    with open_message_store(store_config) as again:
        assert again.last_exit_ok is clean
        assert dict(again.commitlog.topic_queue_table) == {("Written", 0): 1}
        assert again.put_message(Message("Reserved", b"y"), queue_id=2).queue_offset == 0


@pytest.mark.parametrize(
    ("cause", "clean"), [("role", True), ("disk", False), ("store", False)], ids=["role", "disk", "store"]
)
def test_a_shutdown_refused_writes_for_a_fault_leaves_the_abort_file(
    store_config: StoreConfig, cause: str, clean: bool
) -> None:
    """A DLedger follower refuses writes for its role only: its clean stop is a clean stop (the
    next start recovers normally); a full disk or a store error at shutdown is not."""
    s = MessageStore(store_config)
    s.start()
    put_n(s, 5)
    s.commitlog.set_writable(False, f"refused: {cause}", cause=cause)
    s.shutdown()
    assert os.path.exists(s.abort_file) is not clean
    with MessageStore(store_config) as again:
        assert again.last_exit_ok is clean
        assert again.get_max_offset("T", 0) + again.get_max_offset("T", 1) == 5


def test_write_refusals_of_different_causes_are_independent(store: MessageStore) -> None:
    cl = store.commitlog
    cl.set_writable(
        False, "this broker is a DLedger follower; the leader is n1", error=ServiceNotAvailable, cause="role"
    )
    store._set_disk_full(True, "disk full: 97% used, limit 90%")
    with pytest.raises(Exception, match="DLedger follower") as refused:
        store.put_message(Message("T", b"x"))
    assert type(refused.value).__name__ == "ServiceNotAvailable", "the role's refusal names the leader"
    store._set_disk_full(False, "")  # room again: still a follower
    assert not cl.writable and "DLedger follower" in cl.not_writable_reason
    assert not cl.refused_for_a_fault()
    store._set_disk_full(True, "disk full: 97% used, limit 90%")
    cl.set_writable(True, cause="role")  # leader now, the disk still full
    assert not cl.writable and cl.refused_for_a_fault()
    with pytest.raises(DiskFull, match="disk full"):
        store.put_message(Message("T", b"x"))
    store._set_disk_full(False, "")
    assert cl.writable and not cl.refused_for_a_fault()
    assert store.put_message(Message("T", b"x")).status.name == "PUT_OK"
