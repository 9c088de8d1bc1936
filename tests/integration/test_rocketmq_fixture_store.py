"""MessageStore opens a store directory laid out exactly as Apache RocketMQ writes it.

The directory is built by ``rocketmq_fixture`` straight from ``spec/store-format.md`` with
``struct``, independently of rocketq's codecs; rocketq is only used through ``MessageStore`` and
``StoreConfig`` to read it back, append to it and recover it.
"""

from __future__ import annotations

import json
import pathlib
import re
import struct
import time
import zlib

import pytest

from _support.rocketmq_fixture import (
    BLANK_MAGIC_CODE,
    CHECKPOINT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    SCHEDULE_TOPIC,
    TOPIC_A,
    TOPIC_B,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    RocketMQFixture,
    StoredMessage,
    build_standard_fixture,
    encode_v1_record,
    index_key_hash,
    java_string_hash,
    pack_host,
    tags_code,
)
from rocketq.message import Message, MessageExt
from rocketq.store import MessageStore, StoreConfig
from rocketq.store.store_queries import GetMessageStatus

COMMITLOG_FILE_SIZE = 64 * 1024
CQ_FILE_SIZE = 20 * 50
HASH_SLOT_NUM = 32
INDEX_NUM = 64
STORE_IP = "10.0.0.5"
STORE_PORT = 10911
GROUP = "fixture-consumer"


def store_config(root: pathlib.Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=COMMITLOG_FILE_SIZE,
        mapped_file_size_consume_queue=CQ_FILE_SIZE,
        max_hash_slot_num=HASH_SLOT_NUM,
        max_index_num=INDEX_NUM,
        store_host=f"{STORE_IP}:{STORE_PORT}",
    )


def build(root: pathlib.Path, *, abort: bool, **kwargs: object) -> tuple[RocketMQFixture, dict[str, bytes]]:
    fx = build_standard_fixture(
        time.time_ns() // 1_000_000,
        commitlog_file_size=COMMITLOG_FILE_SIZE,
        cq_file_size=CQ_FILE_SIZE,
        hash_slot_num=HASH_SLOT_NUM,
        index_num=INDEX_NUM,
        store_ip=STORE_IP,
        store_port=STORE_PORT,
        **kwargs,  # type: ignore[arg-type]
    )
    return fx, fx.write(str(root), abort=abort)


# -- assertions ----------------------------------------------------------------------------------
def assert_same_message(ext: MessageExt | None, m: StoredMessage) -> None:
    assert ext is not None, f"no message at {m.physical_offset}"
    got = (
        ext.topic,
        ext.queue_id,
        ext.queue_offset,
        ext.commit_log_offset,
        ext.store_size,
        ext.flag,
        ext.sys_flag,
        ext.body_crc,
        ext.born_timestamp,
        ext.born_host,
        ext.store_timestamp,
        ext.store_host,
        ext.msg_id,
    )
    want = (
        m.topic,
        m.queue_id,
        m.queue_offset,
        m.physical_offset,
        m.size,
        m.flag,
        m.sys_flag,
        m.body_crc,
        m.born_timestamp,
        m.born_host,
        m.store_timestamp,
        m.store_host,
        m.msg_id,
    )
    assert got == want
    assert ext.body == m.body
    assert ext.properties == m.props
    assert ext.tags == m.tags
    assert ext.keys == m.keys
    assert ext.uniq_key == m.uniq_key


def read_whole_queue(store: MessageStore, topic: str, queue_id: int, page: int = 16) -> list[bytes]:
    """Page through a queue with get_message, checking statuses and next_begin_offset."""
    max_offset = store.get_max_offset(topic, queue_id)
    records: list[bytes] = []
    offset = store.get_min_offset(topic, queue_id)
    while offset < max_offset:
        r = store.get_message(GROUP, topic, queue_id, offset, page)
        n = min(page, max_offset - offset)
        assert r.status is GetMessageStatus.FOUND
        assert r.queue_offsets == list(range(offset, offset + n))
        assert r.next_begin_offset == offset + n
        assert (r.min_offset, r.max_offset) == (0, max_offset)
        records.extend(r.buffers)
        offset = r.next_begin_offset
    end = store.get_message(GROUP, topic, queue_id, max_offset, page)
    assert end.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert end.next_begin_offset == max_offset
    return records


def expected_query(fx: RocketMQFixture, topic: str, key: str) -> list[int]:
    return sorted(m.physical_offset for m in fx.intact() if m.topic == topic and key in m.index_keys)


def verify_fixture(store: MessageStore, fx: RocketMQFixture) -> list[str]:
    """Every intact record of the fixture reads back through every public read path.

    Key queries are checked last and their mismatches returned as readable lines, so a caller
    can run its other checks before asserting that none occurred.
    """
    for topic, qid in fx.queues():
        expected = fx.queue(topic, qid)
        assert store.get_min_offset(topic, qid) == 0
        assert store.get_max_offset(topic, qid) >= len(expected)
        r = store.get_message(GROUP, topic, qid, 0, len(expected))
        assert r.status is GetMessageStatus.FOUND
        assert [m.queue_offset for m in r.messages] == list(range(len(expected)))
        assert r.buffers == [m.record for m in expected]
        for ext, m in zip(r.messages, expected, strict=True):
            assert_same_message(ext, m)

    prepared = [m for m in fx.intact() if m.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED]
    assert len(prepared) == 1
    half = prepared[0]
    queued = {
        ext.commit_log_offset
        for topic, qid in fx.queues()
        for ext in store.get_message(GROUP, topic, qid, 0, 10_000).messages
    }
    assert half.physical_offset not in queued
    ext = store.look_message_by_offset(half.physical_offset)
    assert_same_message(ext, half)
    assert ext is not None and ext.queue_offset == 0

    for m in fx.intact():
        assert_same_message(store.look_message_by_offset(m.physical_offset), m)
        assert_same_message(store.look_message_by_offset(m.physical_offset, m.size), m)
        assert_same_message(store.look_message_by_id(m.msg_id), m)

    # Every index key of every record: UNIQ_KEY and each KEYS piece (PREPARED records are indexed).
    mismatches = []
    for topic, key in sorted({(m.topic, k) for m in fx.intact() for k in m.index_keys}):
        got = [x.commit_log_offset for x in store.query_messages_by_key(topic, key).messages]
        want = expected_query(fx, topic, key)
        if got != want:
            missing = sorted(set(want) - set(got))
            unexpected = sorted(set(got) - set(want))
            detail = (
                f"records at {missing} missing, at {unexpected} unexpected"
                if missing or unexpected
                else f"records out of order: {got}"
            )
            mismatches.append(f"query {topic}#{key}: {detail}")
    return mismatches


def fixture_queue_lengths(fx: RocketMQFixture) -> dict[tuple[str, int], int]:
    return {q: len(fx.queue(*q)) for q in fx.queues()}


def parse_fastjson(text: str) -> object:
    """Enough of fastjson for the config files here: quote bare integer map keys, then JSON."""
    return json.loads(re.sub(r"([{,]\s*)(-?\d+)(\s*:)", r'\1"\2"\3', text))


def held_bytes(fx: RocketMQFixture, rel: str) -> int:
    """How many leading bytes of a fixture file hold data that must never be rewritten."""
    kind, _, rest = rel.partition("/")
    if kind == "commitlog":
        start = int(rest)
        return min(COMMITLOG_FILE_SIZE, max(0, fx.data_end - start))
    if kind == "consumequeue":
        topic, qid, name = rest.split("/")
        units = [u for u in fx.cq_units[(topic, int(qid))] if u[0] < fx.data_end]
        return min(CQ_FILE_SIZE, max(0, len(units) * 20 - int(name)))
    raise AssertionError(rel)


# -- the builder itself follows the spec -----------------------------------------------------------
def test_builder_follows_spec_vectors(tmp_path: pathlib.Path) -> None:
    # §4 and §1.5 check vectors.
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("TopicTest#KEY1") == -1656969516
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("a😀") == 1866116
    assert index_key_hash("polygenelubricants") == 0
    assert tags_code("a😀") == 1866116 and tags_code(None) == 0
    assert zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF == 1774740973

    # §1.2 offsets of the IPv4/IPv4 layout, and +12 after an IPv6 born host.
    common: dict[str, object] = {
        "topic": "T", "queue_id": 3, "flag": 0, "queue_offset": 9, "physical_offset": 77,
        "born_timestamp": 1, "store_timestamp": 0x0102030405060708,
        "store_host": pack_host("10.0.0.5", 10911), "reconsume_times": 0,
        "prepared_transaction_offset": 0, "body": b"xyz", "properties": "",
    }  # fmt: skip
    v4 = encode_v1_record(sys_flag=0, born_host=pack_host("1.2.3.4", 5), **common)  # type: ignore[arg-type]
    assert len(v4) == 91 + 3 + 1
    assert v4[4:8].hex().upper() == "DAA320A7"
    assert struct.unpack_from(">q", v4, 56)[0] == 0x0102030405060708
    assert v4[64:68] == bytes([10, 0, 0, 5])
    assert struct.unpack_from(">i", v4, 84)[0] == 3 and v4[88:91] == b"xyz"
    v6 = encode_v1_record(sys_flag=0x10, born_host=pack_host("2001:db8::7", 5), **common)  # type: ignore[arg-type]
    assert len(v6) == len(v4) + 12
    assert struct.unpack_from(">q", v6, 68)[0] == 0x0102030405060708

    fx, files = build(tmp_path, abort=False)
    # Segment 0 ends with the 8-byte BLANK after the last record that fits, then zeros.
    [(blank_at, left)] = fx.blanks
    seg0 = files[f"commitlog/{0:020d}"]
    assert blank_at + left == COMMITLOG_FILE_SIZE and left > 8
    assert struct.unpack_from(">ii", seg0, blank_at) == (left, BLANK_MAGIC_CODE)
    assert seg0[blank_at + 4 : blank_at + 8].hex().upper() == "CBD43194"
    assert seg0[blank_at + 8 :] == bytes(left - 8)
    assert sorted(n for n in files if n.startswith("commitlog/")) == [
        "commitlog/00000000000000000000",
        "commitlog/00000000000000065536",
    ]
    assert all(len(d) == COMMITLOG_FILE_SIZE for n, d in files.items() if n.startswith("commitlog/"))
    # What the fixture is meant to exercise is really in it.
    assert any(m.sys_flag & 0x10 for m in fx.messages)
    assert any(zlib.crc32(m.body) >= 2**31 for m in fx.messages), "no body CRC needs masking"
    assert any(m.tags_code < 0 for m in fx.messages), "no negative tags code"
    assert len(fx.cq_units[(TOPIC_A, 0)]) > CQ_FILE_SIZE // 20, "TopicA-0 fits one ConsumeQueue file"
    assert "consumequeue/TopicA/0/00000000000000001000" in files
    assert len(fx.index_files) >= 2 and fx.index_files[0].is_full() and not fx.index_files[-1].is_full()
    index_size = INDEX_HEADER_SIZE + HASH_SLOT_NUM * 4 + INDEX_NUM * INDEX_ENTRY_SIZE
    assert all(len(files[f"index/{f.name}"]) == index_size for f in fx.index_files)
    assert all(re.fullmatch(r"\d{17}", f.name) for f in fx.index_files)
    assert len(files["checkpoint"]) == CHECKPOINT_SIZE
    assert parse_fastjson(files["config/consumerOffset.json"].decode()) == {
        "offsetTable": {
            "TopicA@orders-consumer": {"0": 12, "1": 4},
            "TopicB@orders-consumer": {"0": 2, "1": 0},
            "%RETRY%orders-consumer@orders-consumer": {"0": 0},
        }
    }
    delay = files["config/delayOffset.json"].decode()
    assert "\t" in delay and "{18:1" in delay  # tab indentation, bare int key
    assert parse_fastjson(delay)["offsetTable"] == {"18": 1}  # type: ignore[index]


# -- clean shutdown --------------------------------------------------------------------------------
def test_clean_rocketmq_store_reads_appends_and_keeps_bytes(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    fx, files = build(root, abort=False)
    cfg = store_config(root)
    lengths = fixture_queue_lengths(fx)
    new: list[tuple[str, int, int, bytes]] = []  # topic, queue id, queue offset, body

    with MessageStore(cfg) as store:
        assert store.last_exit_ok
        assert verify_fixture(store, fx) == []
        for (topic, qid), n in lengths.items():
            assert store.get_max_offset(topic, qid) == n
            assert read_whole_queue(store, topic, qid) == [m.record for m in fx.queue(topic, qid)]
        assert store.get_min_phy_offset() == 0
        assert store.get_max_phy_offset() == fx.data_end
        assert store.get_message(GROUP, "NoSuchTopic", 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE

        # Tags filtering by the CQ tags code, including a tag whose hash is negative.
        for tag in ("a😀", "TagRefund", "TagB"):
            matched: list[int] = []
            offset, max_offset = 0, store.get_max_offset(TOPIC_A, 0)
            while offset < max_offset:
                r = store.get_message(GROUP, TOPIC_A, 0, offset, 4, [tags_code(tag)])
                assert r.next_begin_offset > offset
                matched += [m.commit_log_offset for m in r.messages]
                offset = r.next_begin_offset
            assert matched == [m.physical_offset for m in fx.queue(TOPIC_A, 0) if m.tags == tag]

        # Delayed messages: CQ tags code = delivery time; delayOffset.json says level 18 is at 1.
        sched = fx.queue(SCHEDULE_TOPIC, 17)
        r = store.get_message(GROUP, SCHEDULE_TOPIC, 17, 0, 32, [sched[1].tags_code])
        assert [m.commit_log_offset for m in r.messages] == [sched[1].physical_offset]
        assert store.schedule is not None
        assert store.schedule.offset_table.get(18) == 1
        store.schedule.deliver_due()  # the first one is due, but was delivered before
        assert store.wait_dispatched()
        assert store.get_max_offset(TOPIC_A, 0) == lengths[(TOPIC_A, 0)]

        # New puts continue the queue offsets and land after the fixture's last record.
        expected_phy = fx.data_end
        for n, (topic, qid) in enumerate(q for q in lengths if q[0] != SCHEDULE_TOPIC):
            body = f"after-rocketmq-{n}".encode()
            msg = Message(topic, body, tags="TagNew", keys=[f"new-{n}", "new-shared"])
            res = store.put_message(msg, queue_id=qid)
            assert res.ok
            assert res.queue_offset == lengths[(topic, qid)]
            assert res.physical_offset == expected_phy
            assert COMMITLOG_FILE_SIZE <= res.physical_offset < 2 * COMMITLOG_FILE_SIZE
            expected_phy += res.size
            new.append((topic, qid, res.queue_offset, body))
        assert store.wait_dispatched()
        verify_new(store, new, lengths)

    assert not (root / "abort").exists()
    assert_fixture_bytes_kept(root, fx, files)

    with MessageStore(cfg) as store:
        assert store.last_exit_ok
        assert verify_fixture(store, fx) == []
        verify_new(store, new, lengths)


def verify_new(
    store: MessageStore, new: list[tuple[str, int, int, bytes]], lengths: dict[tuple[str, int], int]
) -> None:
    for topic, qid, qoff, body in new:
        assert store.get_max_offset(topic, qid) == lengths[(topic, qid)] + 1
        r = store.get_message(GROUP, topic, qid, qoff, 8)
        assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == qoff + 1
        [ext] = r.messages
        assert (ext.topic, ext.queue_id, ext.queue_offset, ext.body) == (topic, qid, qoff, body)
    for topic in (TOPIC_A, TOPIC_B):
        got = [m.body for m in store.query_messages_by_key(topic, "new-shared").messages]
        assert got == [b for t, _, _, b in new if t == topic]


def assert_fixture_bytes_kept(
    root: pathlib.Path, fx: RocketMQFixture, files: dict[str, bytes], *, after_crash: bool = False
) -> None:
    """The fixture's records, CQ units and index entries are byte-for-byte where they were.

    After a crash the newest index file is not full, so it ends after the checkpoint's index time
    and is destroyed (§6.4); the full ones must survive untouched.
    """
    last_index = fx.index_files[-1].name
    for rel, original in files.items():
        path = root / rel
        if rel == "abort":
            assert not path.exists()
            continue
        if after_crash and rel == f"index/{last_index}":
            assert not path.exists()
            continue
        if rel == "checkpoint":
            data = path.read_bytes()
            assert len(data) == CHECKPOINT_SIZE
            physic, logics = struct.unpack_from(">qq", data, 0)
            assert physic >= fx.physic_msg_timestamp and logics >= fx.logics_msg_timestamp
            continue
        if rel == "config/delayOffset.json":
            table = parse_fastjson(path.read_text())["offsetTable"]  # type: ignore[index]
            assert table["18"] == 1
            continue
        data = path.read_bytes()
        assert len(data) == len(original), rel
        if rel.startswith(("commitlog/", "consumequeue/")):
            held = held_bytes(fx, rel)
            assert data[:held] == original[:held], rel
            if rel == "commitlog/00000000000000000000":
                assert data == original  # BLANK and the zeros after it included
        elif rel == f"index/{last_index}":
            f = fx.index_files[-1]
            begin = f.entries_pos + INDEX_ENTRY_SIZE
            end = f.entries_pos + f.index_count * INDEX_ENTRY_SIZE
            assert data[begin:end] == original[begin:end], rel
            assert data[0:8] == original[0:8] and data[16:24] == original[16:24], rel
        else:  # full index files, consumerOffset.json
            assert data == original, rel


# -- abnormal shutdown -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param({"undispatched_tail": 2, "torn_tail": True}, id="dispatch-lagged"),
        pytest.param({"torn_tail": True, "dispatch_torn": True}, id="cq-unit-for-torn-record"),
    ],
)
def test_abort_file_recovery_keeps_intact_records_and_cuts_torn_one(
    tmp_path: pathlib.Path, scenario: dict[str, object]
) -> None:
    root = tmp_path / "store"
    fx, files = build(root, abort=True, **scenario)
    torn = fx.messages[-1]
    assert torn.torn and torn.physical_offset == fx.data_end
    cfg = store_config(root)
    lengths = fixture_queue_lengths(fx)
    key = (torn.topic, torn.queue_id)

    with MessageStore(cfg) as store:
        assert not store.last_exit_ok
        lost_after_crash = verify_fixture(store, fx)
        for (topic, qid), n in lengths.items():
            assert store.get_max_offset(topic, qid) == n
            assert read_whole_queue(store, topic, qid) == [m.record for m in fx.queue(topic, qid)]
        assert store.get_max_phy_offset() == fx.data_end
        assert store.look_message_by_offset(torn.physical_offset) is None
        assert store.look_message_by_id(torn.msg_id) is None
        for k in torn.index_keys:
            found = [m.commit_log_offset for m in store.query_messages_by_key(torn.topic, k).messages]
            assert found == expected_query(fx, torn.topic, k)
            assert torn.physical_offset not in found

        body = b"written where the torn record was"
        res = store.put_message(Message(torn.topic, body, tags="TagNew", keys=["after-crash"]), torn.queue_id)
        assert res.ok
        assert res.physical_offset == torn.physical_offset
        assert res.queue_offset == lengths[key]
        assert store.wait_dispatched()
        new = [(torn.topic, torn.queue_id, res.queue_offset, body)]
        r = store.get_message(GROUP, torn.topic, torn.queue_id, res.queue_offset, 4)
        assert [m.body for m in r.messages] == [body]

    assert not (root / "abort").exists()
    assert_fixture_bytes_kept(root, fx, files, after_crash=True)
    with MessageStore(cfg) as store:
        assert store.last_exit_ok
        lost_after_restart = verify_fixture(store, fx)
        for topic, qid, qoff, b in new:
            [ext] = store.get_message(GROUP, topic, qid, qoff, 4).messages
            assert ext.body == b
        got = store.query_messages_by_key(torn.topic, "after-crash").messages
        assert [m.body for m in got] == [body]
    # Every key query finds exactly the intact records indexed under it (see the test below).
    assert lost_after_crash == []
    assert lost_after_restart == []


def test_abort_recovery_reindexes_message_split_across_index_files(tmp_path: pathlib.Path) -> None:
    """RocketMQ's putKey rolls to a new index file in the middle of a message when the file fills
    up (§6.3), so a message's keys can span two files. After a crash the newest, not yet full
    file is destroyed (§6.4: endTimestamp > checkpoint indexMsgTimestamp) and recovery must index
    that message again: RocketMQ re-dispatches it, and buildIndex only skips messages *below* the
    newest file's endPhyOffset (§6.2), so all its keys are back."""
    root = tmp_path / "store"
    fx, _files = build(root, abort=True, undispatched_tail=2, torn_tail=True)
    full = [f for f in fx.index_files if f.is_full()][-1]
    newest = fx.index_files[-1]
    assert fx.index_msg_timestamp == full.end_timestamp < newest.end_timestamp
    split_at = full.end_phy_offset
    in_full = [k for _, k, phy in full.entries if phy == split_at]
    in_newest = [k for _, k, phy in newest.entries if phy == split_at]
    assert in_full and in_newest, "the fixture must split a message across the last two index files"

    with MessageStore(store_config(root)) as store:
        assert not store.last_exit_ok
        for index_key in in_full + in_newest:
            topic, _, key = index_key.partition("#")
            found = [m.commit_log_offset for m in store.query_messages_by_key(topic, key).messages]
            assert split_at in found, f"key {key!r} of the message at {split_at} is lost"


def test_abnormal_recovery_of_rocketmq_store_starts_where_rocketmq_would(tmp_path: pathlib.Path) -> None:
    """A checkpoint written by RocketMQ has no rocketq extension, so the CommitLog scan must start
    by RocketMQ's recoverAbnormally rule (§9.2): the last segment whose first record was stored no
    later than min(physicMsgTimestamp, logicsMsgTimestamp) - 3 s. Here that is segment 1."""
    root = tmp_path / "store"
    fx, _files = build(root, abort=True, undispatched_tail=2, torn_tail=True)
    [seg1_first] = [m for m in fx.messages if m.physical_offset == COMMITLOG_FILE_SIZE]
    assert seg1_first.store_timestamp <= min(fx.physic_msg_timestamp, fx.logics_msg_timestamp) - 3000
    with MessageStore(store_config(root)) as store:
        assert store.recovery is not None
        assert store.recovery.process_offset == fx.data_end
        assert store.recovery.start_offset == COMMITLOG_FILE_SIZE
