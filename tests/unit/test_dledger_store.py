"""MessageStore in DLedger mode on a group of one (real entry store files)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib.util
import os
import struct
import weakref
from collections.abc import Iterator

import pytest

from _support.wait import wait_until
from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.errors import ConfigError, MessageIllegal, ResponseCode, RocketqError, ServiceNotAvailable
from rocketq.ha import entry_format as fmt
from rocketq.ha.group_config import LedgerSpec, open_ledger, parse_peers, slave_broker_id
from rocketq.ha.local_log import SingleNodeLog
from rocketq.ha.replicated_log import AppendResult, AppendStatus
from rocketq.message import Message
from rocketq.protocol import record as rec
from rocketq.store import index_file
from rocketq.store.dledger_appends import Expiry as _Expiry
from rocketq.store.dledger_commitlog import ReplicationError, raise_for
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import MessageStore, open_message_store
from rocketq.store.store_queries import GetMessageStatus


@pytest.fixture
def dl_config(store_config: StoreConfig) -> StoreConfig:
    return dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")


@pytest.fixture
def dl_store(dl_config: StoreConfig) -> Iterator[MessageStore]:
    with open_message_store(dl_config) as s:
        yield s


def put_n(store: MessageStore, n: int, start: int = 0, topic: str = "T") -> list[int]:
    return [
        store.put_message(Message(topic, f"m{i}".encode(), keys=[f"k{i}"]), queue_id=i % 2).physical_offset
        for i in range(start, start + n)
    ]


def bodies(store: MessageStore, qid: int, n: int = 1000) -> list[bytes]:
    assert store.wait_dispatched(10)
    g = store.get_message("G", "T", qid, 0, n)
    return [m.body for m in g.messages] if g.status is GetMessageStatus.FOUND else []


def entry_files(cfg: StoreConfig, self_id: str = "n0") -> list[str]:
    d = os.path.join(cfg.store_path_root_dir, f"dledger-{self_id}", "data")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def test_open_message_store_picks_the_dledger_variant(dl_store: MessageStore) -> None:
    assert isinstance(dl_store, DLedgerMessageStore)
    info = dl_store.runtime_info()
    assert (info["dledgerRole"], info["dledgerTerm"], info["dividedCommitlogOffset"]) == ("LEADER", "1", "0")


def test_records_live_inside_entries_at_pos_plus_48(dl_store: MessageStore, dl_config: StoreConfig) -> None:
    offsets = put_n(dl_store, 30)
    assert bodies(dl_store, 0) == [f"m{i}".encode() for i in range(0, 30, 2)]
    with open(entry_files(dl_config)[0], "rb") as f:
        data = f.read()
    pos, seen = 0, []
    while pos + fmt.BODY_OFFSET <= len(data):
        h = fmt.decode_header(data, pos)
        if h.magic != fmt.MAGIC_NORMAL:
            break
        view = rec.decode_record(data[pos + fmt.BODY_OFFSET : pos + h.size], 0, check_crc=True)
        assert view.kind is rec.RecordKind.MESSAGE
        (phys,) = struct.unpack_from(">q", data, pos + fmt.BODY_OFFSET + 28)
        assert phys == pos + fmt.BODY_OFFSET == h.pos + 48
        seen.append(phys)
        pos += h.size
    assert seen == offsets
    msg = dl_store.look_message_by_offset(offsets[3])
    assert msg is not None and msg.body == b"m3" and msg.commit_log_offset == offsets[3]
    assert dl_store.get_max_phy_offset() == pos


@pytest.mark.parametrize("prop_crc", [False, True], ids=["plain", "property-crc"])
def test_an_entry_s_record_is_the_one_a_plain_commitlog_writes(
    store_config: StoreConfig, dl_config: StoreConfig, prop_crc: bool
) -> None:
    """The same messages put in order into a DLedger store and a plain one: each record is the
    same bytes but for the physical offset and the store timestamp (properties' CRC too)."""
    records: dict[bool, list[bytes]] = {}
    for dledger, base in ((False, store_config), (True, dl_config)):
        cfg = dataclasses.replace(
            base,
            enabled_append_prop_crc=prop_crc,
            store_path_root_dir=f"{base.store_path_root_dir}-{dledger}",
        )
        with open_message_store(cfg) as s:
            got = []
            for i in range(5):
                put = s.put_message(Message("T", b"body %d" % i * (i + 1), keys=[f"k{i}"], tags="t"), i % 2)
                raw = bytearray(s.commitlog.read(put.physical_offset, put.size) or b"")
                view = rec.decode_record(raw, 0, check_crc=True, verify_prop_crc=prop_crc)
                assert view.kind is rec.RecordKind.MESSAGE and view.size == put.size
                assert (view.physical_offset, view.queue_offset) == (put.physical_offset, i // 2)
                # physical offset, born and store timestamps; the properties' CRC covers them
                raw[28:36] = raw[40:48] = raw[56:64] = bytes(8)
                if prop_crc:
                    raw[-11:-1] = bytes(10)
                got.append(bytes(raw))
            records[dledger] = got
    assert records[True] == records[False]


def test_restart_keeps_every_message_and_queue_offsets(dl_config: StoreConfig) -> None:
    with open_message_store(dl_config) as s:
        put_n(s, 20)
    with open_message_store(dl_config) as s:
        assert bodies(s, 1) == [f"m{i}".encode() for i in range(1, 20, 2)]
        r = s.put_message(Message("T", b"after"), queue_id=0)
        assert r.queue_offset == 10
        assert bodies(s, 0)[-1] == b"after"


def test_unclean_restart_rebuilds_queues_from_committed_entries(dl_config: StoreConfig) -> None:
    s = open_message_store(dl_config)
    s.start()
    put_n(s, 12)
    assert s.wait_dispatched(10)
    # a crash: nothing flushed or checkpointed; the files stay as the page cache has them
    s.consume_queues.destroy()
    s._abandon()
    with open_message_store(dl_config) as s2:
        assert not s2.last_exit_ok
        assert bodies(s2, 0) == [f"m{i}".encode() for i in range(0, 12, 2)]
        assert s2.put_message(Message("T", b"x"), queue_id=1).queue_offset == 6


def test_adopting_a_plain_store_keeps_old_offsets(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as plain:
        old = put_n(plain, 25)
        old_end = plain.get_max_phy_offset()
    dl = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    size = store_config.mapped_file_size_commit_log
    divided = fmt.divided_commitlog_offset(old_end - old_end % size, size)
    for attempt in range(2):  # the second start finds the padded segment and the entries
        with open_message_store(dl) as s:
            assert s.runtime_info()["dividedCommitlogOffset"] == str(divided)
            for i, off in enumerate(old):
                m = s.look_message_by_offset(off)
                assert m is not None and m.body == f"m{i}".encode()
            if attempt == 0:
                new = put_n(s, 6, start=25)
                assert new[0] == divided + fmt.BODY_OFFSET
                assert min(new) > max(old)
            assert bodies(s, 0) == [f"m{i}".encode() for i in range(0, 31, 2)] + [b"q"] * attempt
            assert s.query_messages_by_key("T", "k3", 5).messages[0].body == b"m3"
            assert s.query_messages_by_key("T", "k27", 5).messages[0].body == b"m27"
            assert s.put_message(Message("T", b"q"), queue_id=0).queue_offset == 16 + attempt


def test_peers_and_broker_ids() -> None:
    peers = parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912; n2-127.0.0.1:40913")
    assert peers == {"n0": "127.0.0.1:40911", "n1": "127.0.0.1:40912", "n2": "127.0.0.1:40913"}
    assert [slave_broker_id(peers, p) for p in peers] == [1, 2, 3]
    for bad in ("", "n0:40911", "n0-host;n1-h:1", "n0-h:1;n0-h:2"):
        with pytest.raises(ConfigError):
            parse_peers(bad)


def test_a_group_of_three_without_the_driver_is_a_clear_error(tmp_path: os.PathLike[str]) -> None:
    if importlib.util.find_spec("rocketq.ha.driver") is not None:
        pytest.skip("the Raft driver is present")
    spec = LedgerSpec(str(tmp_path), "g", "n0", parse_peers("n0-h:1;n1-h:2;n2-h:3"), 65536, 0, False)
    with pytest.raises(ConfigError, match="Raft driver"):
        open_ledger(spec)
    with pytest.raises(ConfigError, match="not among"):
        open_ledger(dataclasses.replace(spec, self_id="n9"))


@pytest.mark.parametrize(
    ("status", "code", "definite"),
    [
        (AppendStatus.NOT_LEADER, ResponseCode.SERVICE_NOT_AVAILABLE, True),
        (AppendStatus.BUSY, ResponseCode.SYSTEM_BUSY, True),
        (AppendStatus.TIMEOUT, ResponseCode.SYSTEM_ERROR, False),
        (AppendStatus.TERM_CHANGED, ResponseCode.SYSTEM_ERROR, False),
    ],
)
def test_append_outcomes_map_to_rocketmq_codes(status: AppendStatus, code: int, definite: bool) -> None:
    with pytest.raises(RocketqError) as caught:
        raise_for(AppendResult(status, leader_id="n2" if status is AppendStatus.NOT_LEADER else None), "h:1")
    assert caught.value.code == code and status.definite is definite
    if status is AppendStatus.NOT_LEADER:
        assert "the leader is n2 at h:1" in str(caught.value)


def test_a_follower_store_refuses_puts_and_gives_the_queue_offset_back(dl_store: MessageStore) -> None:
    assert isinstance(dl_store, DLedgerMessageStore)
    put_n(dl_store, 2)
    cl = dl_store.commitlog
    real = cl.ledger
    assert real is not None

    class Refusing:
        state = real.state
        committed_pos = real.committed_pos

        async def append(self, encode: object) -> AppendResult:
            assert callable(encode)
            encode(999)  # an encoder called, then nothing appended
            return AppendResult(AppendStatus.NOT_LEADER, leader_id="n1")

    cl.ledger = Refusing()  # type: ignore[assignment]
    try:
        with pytest.raises(ServiceNotAvailable, match="leader is n1"):
            dl_store.put_message(Message("T", b"no"), queue_id=0)
    finally:
        cl.ledger = real
    assert dl_store.put_message(Message("T", b"yes"), queue_id=0).queue_offset == 1


def test_a_record_too_large_for_an_entry_is_refused_before_anything_is_assigned(
    dl_store: MessageStore,
) -> None:
    # fits a plain 64 KiB CommitLog segment, not an entry of one (48 B header, 8 B blank)
    with pytest.raises(MessageIllegal, match="does not fit a DLedger entry"):
        dl_store.put_message(Message("T", b"x" * 65_400), queue_id=0)
    assert dl_store.put_message(Message("T", b"ok"), queue_id=0).queue_offset == 0


def test_a_batch_is_one_entry_per_message_with_consecutive_queue_offsets(dl_store: MessageStore) -> None:
    put_n(dl_store, 1)
    r = dl_store.put_messages([Message("T", f"b{i}".encode()) for i in range(3)], queue_id=1)
    assert (r.msg_num, r.queue_offset) == (3, 0)
    assert r.physical_offsets is not None and len(set(r.physical_offsets)) == 3
    for off, body in zip(r.physical_offsets, (b"b0", b"b1", b"b2"), strict=True):
        m = dl_store.look_message_by_offset(off)
        assert m is not None and m.body == body
    assert bodies(dl_store, 1) == [b"b0", b"b1", b"b2"]


def test_a_dledger_store_does_not_start_plain(dl_config: StoreConfig) -> None:
    with open_message_store(dl_config) as s:
        put_n(s, 2)
    plain = dataclasses.replace(dl_config, enable_dleger_commit_log=False)
    with pytest.raises(ConfigError, match=r"holds DLedger entries \(dledger-n0\)"):
        open_message_store(plain)


def test_dispatch_reaches_a_committed_noop(dl_store: MessageStore) -> None:
    # a new Raft leader's first entry is a NOOP: the leader waits for dispatch to reach it
    assert isinstance(dl_store, DLedgerMessageStore)
    put_n(dl_store, 3)
    ledger = dl_store.ledger
    assert isinstance(ledger, SingleNodeLog)
    index, _ = ledger.store.append(ledger.store.term, b"", magic=fmt.MAGIC_NOOP)
    ledger.store.set_committed_index(index)
    assert dl_store.wait_dispatched(10) and dl_store.dispatch_behind_bytes() == 0
    r = dl_store.put_message(Message("T", b"after-noop"), queue_id=0)
    assert r.queue_offset == 2 and bodies(dl_store, 0)[-1] == b"after-noop"


def test_delay_delivery_rewrites_through_the_log(dl_config: StoreConfig) -> None:
    cfg = dataclasses.replace(dl_config, message_delay_level="1s 2s")
    with open_message_store(cfg) as s:
        r = s.put_message(Message("D", b"later", delay_level=1), queue_id=1)
        wait_until(lambda: s.get_max_offset("D", 1) == 1, "the delayed message delivered", 10, 0.01)
        delivered = s.get_message("G", "D", 1, 0).messages[0]
        assert delivered.body == b"later" and delivered.commit_log_offset > r.physical_offset
        assert (delivered.commit_log_offset - fmt.BODY_OFFSET) in [pos for pos, _ in s.ledger.entries_from(0)]  # type: ignore[union-attr]


def test_appends_awaited_too_long_fail_as_unknown_and_answered_ones_stay() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        expiry = _Expiry(loop, 0.05)
        answered: asyncio.Future[AppendResult] = loop.create_future()
        late: asyncio.Future[AppendResult] = loop.create_future()
        expiry.add(answered)
        expiry.add(late)
        answered.set_result(AppendResult(AppendStatus.OK, 1, 0, 48))
        with pytest.raises(ReplicationError, match="did not finish in time"):
            await asyncio.wait_for(late, 5)
        assert answered.result().status is AppendStatus.OK
        again: asyncio.Future[AppendResult] = loop.create_future()
        expiry.add(again)  # the timer is armed again for later appends
        with pytest.raises(ReplicationError):
            await asyncio.wait_for(again, 5)

    asyncio.run(main())


def test_answered_appends_are_not_kept_until_the_expiry_checks() -> None:
    """A waiter answered before the end of the loop iteration that added it is let go then (no
    reference kept for the rest of the timeout); one still waiting stays and still expires."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        expiry = _Expiry(loop, 60)
        refs = []
        for _ in range(3):
            fut: asyncio.Future[AppendResult] = loop.create_future()
            expiry.add(fut)
            fut.set_result(AppendResult(AppendStatus.OK, 1, 0, 48))
            refs.append(weakref.ref(fut))
        del fut
        waiting: asyncio.Future[AppendResult] = loop.create_future()
        expiry.add(waiting)
        await asyncio.sleep(0)  # the end of the iteration that added them
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        short = _Expiry(loop, 0.05)
        short.add(waiting)
        with pytest.raises(ReplicationError, match="did not finish in time"):
            await asyncio.wait_for(waiting, 5)

    asyncio.run(main())


def test_the_waiters_of_one_loop_iteration_are_kept_as_one_entry_and_expire_together() -> None:
    """The expiry keeps the waiters added in one loop iteration as one entry with one deadline
    (not an entry per waiter); an answered one among them stays answered, the others of the
    iteration fail together, and those of a later iteration are kept as an entry of their own."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        expiry = _Expiry(loop, 0.05)
        first = [loop.create_future() for _ in range(5)]
        for fut in first:
            expiry.add(fut)
        await asyncio.sleep(0)  # the end of the iteration that added them
        later = [loop.create_future() for _ in range(3)]
        for fut in later:
            expiry.add(fut)
        await asyncio.sleep(0)
        assert len(expiry._waiting) == 2
        first[2].set_result(AppendResult(AppendStatus.OK, 1, 0, 48))
        with pytest.raises(ReplicationError, match="did not finish in time"):
            await asyncio.wait_for(first[0], 5)
        assert [f.exception() is not None for f in first] == [True, True, False, True, True]
        for fut in later:
            with pytest.raises(ReplicationError):
                await asyncio.wait_for(fut, 5)
        assert not expiry._waiting

    asyncio.run(main())


def test_dispatch_indexes_keys_with_the_hashes_of_the_compiled_scan(
    dl_store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries are parsed one by one; the index takes the key hashes the compiled scan made for
    each entry's record instead of hashing the window's keys again."""
    if speedups.COMPILED is None:
        pytest.skip("the compiled module is not built")

    def no_hashing(keys: list[str]) -> list[int]:
        raise AssertionError(f"the index hashed {len(keys)} keys again")

    monkeypatch.setattr(index_file, "java_string_hashes", no_hashing)
    put_n(dl_store, 40)
    assert dl_store.wait_dispatched(10)
    for i in (0, 1, 17, 39):
        found = dl_store.query_messages_by_key("T", f"k{i}", 5).messages
        assert [m.body for m in found] == [f"m{i}".encode()]


def test_regression_a_queue_rebuilt_in_dledger_mode_keeps_the_records_of_the_entries(
    dl_store: MessageStore,
) -> None:
    """Issue 17: a rebuild of a queue (after a unit that disagreed with its record) walked the
    CommitLog's segments only, which a DLedger store does not have: the queue came out empty and
    a master moved its consumers to offset 0 (NO_MESSAGE_IN_QUEUE). The rebuild walks the
    committed entries."""
    assert isinstance(dl_store, DLedgerMessageStore)
    put_n(dl_store, 10)
    assert bodies(dl_store, 0) == [f"m{i}".encode() for i in range(0, 10, 2)]
    dl_store.rebuild_queues({("T", 0): "a test"})
    assert dl_store.get_max_offset("T", 0) == 5
    assert bodies(dl_store, 0) == [f"m{i}".encode() for i in range(0, 10, 2)]
    assert bodies(dl_store, 1) == [f"m{i}".encode() for i in range(1, 10, 2)]  # left alone
    assert dl_store.put_message(Message("T", b"next"), queue_id=0).queue_offset == 5
    assert bodies(dl_store, 0)[-1] == b"next"


def test_regression_a_queue_offset_no_entry_holds_is_a_hole_the_rebuilt_queue_skips(
    dl_store: MessageStore,
) -> None:
    """A queue offset given out and never appended: dispatch puts the next unit one place early
    (RocketMQ's rule for a hole), the first read across it finds the unit disagreeing with its
    record and rebuilds the queue; every message is then read at its own queue offset, and the
    hole is skipped."""
    assert isinstance(dl_store, DLedgerMessageStore)
    for i in range(3):
        dl_store.put_message(Message("T", f"a{i}".encode()), queue_id=0)
    dl_store.commitlog.topic_queue_table[("T", 0)] += 1  # offset 3 given out, never appended
    assert [
        dl_store.put_message(Message("T", f"b{i}".encode()), queue_id=0).queue_offset for i in range(3)
    ] == [
        4,
        5,
        6,
    ]
    assert dl_store.wait_dispatched(10)
    rebuilt = dl_store.stats.queues_rebuilt
    got = dl_store.get_message("G", "T", 0, 0, 10)
    assert dl_store.stats.queues_rebuilt == rebuilt + 1
    assert got.status is GetMessageStatus.FOUND and got.next_begin_offset == 3
    assert [(m.queue_offset, m.body) for m in got.messages] == [(0, b"a0"), (1, b"a1"), (2, b"a2")]
    assert dl_store.get_max_offset("T", 0) == 7
    after = dl_store.get_message("G", "T", 0, 3, 10)  # the hole: skipped
    assert [(m.queue_offset, m.body) for m in after.messages] == [(4, b"b0"), (5, b"b1"), (6, b"b2")]
    assert after.next_begin_offset == 7 and dl_store.stats.queues_rebuilt == rebuilt + 1


def test_regression_a_rebuild_of_an_adopted_store_s_queue_keeps_old_and_new_records(
    store_config: StoreConfig,
) -> None:
    with MessageStore(store_config) as plain:
        put_n(plain, 9)
    dl = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with open_message_store(dl) as s:
        put_n(s, 6, start=9)
        want = [f"m{i}".encode() for i in range(0, 15, 2)]
        assert bodies(s, 0) == want
        s.rebuild_queues({("T", 0): "a test"})
        assert bodies(s, 0) == want and s.get_max_offset("T", 0) == 8


def test_dispatch_wakes_less_often_on_a_member_that_does_not_lead(dl_config: StoreConfig) -> None:
    """The broker's interval between dispatch wake-ups follows the member's role: the leader's
    while it leads (a group of one leads from its open), the longer follower's while it does
    not (``lead_term`` -1: before the open, a follower, a candidate)."""
    unopened = DLedgerMessageStore(dl_config)
    assert unopened.commitlog.lead_term == -1
    follower_s = DLedgerMessageStore.FOLLOWER_DISPATCH_WAKE_INTERVAL_S
    assert unopened.dispatch_wake_interval_s() == follower_s > DLedgerMessageStore.DISPATCH_WAKE_INTERVAL_S
    with open_message_store(dl_config) as store:
        assert isinstance(store, DLedgerMessageStore) and store.commitlog.lead_term >= 0
        assert store.dispatch_wake_interval_s() == DLedgerMessageStore.DISPATCH_WAKE_INTERVAL_S
