"""A follower's dispatch learns of the leader's commits from the Raft driver's commit callback
(``RaftGroupLog.on_commit``), not by polling: three DLedger stores in this process (each log on
its own loop thread), real sockets on 127.0.0.1 and real files, with the dispatch thread's
fallback look pushed out to an hour, so only the callback can bring a follower's ConsumeQueue
up to date within the test's bound."""

from __future__ import annotations

import dataclasses
import pathlib
import struct
from collections.abc import Iterator

import pytest

from _support.procs import free_port
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.entry_format import MAGIC_NORMAL
from rocketq.message import Message
from rocketq.store import dledger_reput
from rocketq.store.dledger_reput import DLedgerReputService
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store
from rocketq.store.record_scan import DispatchRequest

IDS = ("n0", "n1", "n2")
TOPIC = "T"


@pytest.fixture
def stores(
    tmp_path: pathlib.Path, store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, DLedgerMessageStore]]:
    monkeypatch.setattr(dledger_reput, "COMMIT_WAKE_FALLBACK_S", 3600.0)
    monkeypatch.setattr(dledger_reput, "FOLLOWER_POLL_S", 3600.0)
    peers = ";".join(f"{i}-127.0.0.1:{free_port()}" for i in IDS)
    out: dict[str, DLedgerMessageStore] = {}
    try:
        for i in IDS:
            cfg = dataclasses.replace(
                store_config,
                store_path_root_dir=str(tmp_path / i),
                enable_dleger_commit_log=True,
                d_leger_group="g",
                d_leger_peers=peers,
                d_leger_self_id=i,
                enable_batch_push=True,
                d_leger_election_timeout_ms=1000,
                d_leger_heartbeat_interval_ms=100,
            )
            store = open_message_store(cfg)
            assert isinstance(store, DLedgerMessageStore)
            store.start()
            out[i] = store
        yield out
    finally:
        for store in out.values():
            store.shutdown()


def test_followers_dispatch_committed_entries_without_polling(stores: dict[str, DLedgerMessageStore]) -> None:
    def leader() -> DLedgerMessageStore | None:
        found = [s for s in stores.values() if s.ledger is not None and s.leads_caught_up()]
        return found[0] if len(found) == 1 else None

    first = wait_until(leader, "one leader", 30)
    # the followers' dispatch threads made their first look at start and now wait an hour
    for round_ in range(3):
        for n in range(5):
            first.put_message(Message(TOPIC, f"{round_}:{n}".encode()), queue_id=0)
        sent = 5 * (round_ + 1)
        for sid, store in stores.items():
            wait_until(
                lambda s=store, sent=sent: s.get_max_offset(TOPIC, 0) == sent,
                f"member {sid}'s ConsumeQueue to hold the {sent} messages",
                10,
            )
    follower = next(s for s in stores.values() if s is not first)
    r = follower.get_message("g", TOPIC, 0, 0, 32)
    assert [m.body for m in r.messages] == [f"{a}:{b}".encode() for a in range(3) for b in range(5)]


def test_dispatch_takes_committed_runs_in_one_scan_across_data_files(
    stores: dict[str, DLedgerMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every member dispatches the committed entries from runs of the data files' bytes, one scan
    each (``parse_entry_run``), never entry by entry, into ConsumeQueues and an index that hold
    every message, over entries that fill more than one 64 KiB data file; and the runs the log
    gives are whole entries of one data file within the window's limits, the entries that
    ``entries_from`` gives one by one."""
    taken: list[int] = []
    one_by_one: list[int] = []
    checked_from: list[int | None] = []
    scan = dledger_reput.parse_entry_run

    def counting_scan(
        data: bytes, pos: int, index: int, levels: dict[int, int] | None, written_from: int | None = None
    ) -> list[DispatchRequest] | None:
        reqs = scan(data, pos, index, levels, written_from)
        taken.append(-1 if reqs is None else len(reqs))
        checked_from.append(written_from)
        return reqs

    general = DLedgerReputService._dispatch_entries

    def counting_general(self: DLedgerReputService, bodies: list[bytes], offsets: list[int]) -> int:
        one_by_one.extend(offsets)
        return general(self, bodies, offsets)

    monkeypatch.setattr(dledger_reput, "parse_entry_run", counting_scan)
    monkeypatch.setattr(DLedgerReputService, "_dispatch_entries", counting_general)

    def leader() -> DLedgerMessageStore | None:
        found = [s for s in stores.values() if s.ledger is not None and s.leads_caught_up()]
        return found[0] if len(found) == 1 else None

    first = wait_until(leader, "one leader", 30)
    n = 300
    for i in range(n):
        first.put_message(Message(TOPIC, b"m%d-" % i + bytes(120), tags=f"t{i % 3}", keys=[f"k{i}"]), i % 2)
    for sid, store in stores.items():
        wait_until(
            lambda s=store: s.get_max_offset(TOPIC, 0) + s.get_max_offset(TOPIC, 1) == n,
            f"member {sid}'s ConsumeQueues to hold the {n} messages",
            20,
        )
        for q in (0, 1):
            got = store.get_message("g", TOPIC, q, 0, n)
            assert [m.body for m in got.messages] == [b"m%d-" % i + bytes(120) for i in range(q, n, 2)]
        assert [m.body for m in store.query_messages_by_key(TOPIC, "k123").messages] == [
            b"m123-" + bytes(120)
        ]
    assert -1 not in taken and sum(taken) == 3 * n
    assert one_by_one == []
    # the entries each member wrote itself are not checked against their CRCs again
    written = set()
    for store in stores.values():
        assert isinstance(store.ledger, RaftGroupLog)
        written.add(store.ledger.store.written_from)
    assert set(checked_from) == written

    log = first.ledger
    assert isinstance(log, RaftGroupLog)
    limit = log.committed_pos
    file_size = first.config.mapped_file_size_commit_log
    want = list(log.entries_from(0))
    assert want[-1][0] > file_size  # the entries fill more than one data file
    got: list[tuple[int, bytes]] = []
    pos = 0
    while (run := log.committed_run(pos, limit, 7, 2000)) is not None:
        index, start, data = run
        assert start >= pos and start // file_size == (start + len(data) - 1) // file_size  # one data file
        entries = at = 0
        while at < len(data):
            magic, size, e_index, _term, e_pos = struct.unpack_from(">iiqqq", data, at)
            assert (e_index, e_pos) == (index + entries, start + at)
            got.append((e_pos, data[at + 48 : at + size] if magic == MAGIC_NORMAL else b""))
            at += size
            entries += 1
        assert at == len(data) and 1 <= entries <= 7 and (len(data) <= 2000 or entries == 1)
        pos = start + len(data)
    assert got == want
    # the dispatch limit: whole entries ending by it, none when the first does not
    i = next(i for i in range(len(want) - 2, 0, -1) if want[i][0] // file_size == want[i - 1][0] // file_size)
    (p0, b0), (p1, b1) = want[i - 1], want[i]  # two entries of one data file
    end1 = p1 + 48 + len(b1)
    run = log.committed_run(p0, end1 + 47, 1024, 4 << 20)
    assert run is not None and run[1] == p0 and run[1] + len(run[2]) == end1
    assert log.committed_run(p0, p0 + 48 + len(b0) - 1, 1024, 4 << 20) is None
    assert log.committed_run(limit, limit, 1024, 4 << 20) is None


def test_regression_a_queue_rebuilt_on_a_raft_member_keeps_every_committed_message(
    stores: dict[str, DLedgerMessageStore],
) -> None:
    """Issue 17: a ConsumeQueue rebuild walked the CommitLog's segments only and left a DLedger
    store's queue empty; it walks the committed entries (the driver's runs of them here), on the
    leader as on the followers."""

    def leader() -> DLedgerMessageStore | None:
        found = [s for s in stores.values() if s.ledger is not None and s.leads_caught_up()]
        return found[0] if len(found) == 1 else None

    first = wait_until(leader, "one leader", 30)
    for n in range(8):
        first.put_message(Message(TOPIC, f"r{n}".encode()), queue_id=0)
    want = [f"r{n}".encode() for n in range(8)]
    for sid, store in stores.items():
        wait_until(lambda s=store: s.get_max_offset(TOPIC, 0) == 8, f"member {sid}'s queue to hold 8", 10)
        store.rebuild_queues({(TOPIC, 0): "a test"})
        got = store.get_message("G", TOPIC, 0, 0, 32)
        assert [m.body for m in got.messages] == want, sid
        assert store.get_max_offset(TOPIC, 0) == 8
