"""A DLedger store's start resumes dispatch at the checkpoint's dispatched position (a group of
one, real files): units and index entries before it are kept, those from it on are cut and
dispatched again, and nothing points past the committed position."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import struct

import pytest

from rocketq.config import StoreConfig
from rocketq.ha import entry_format as fmt
from rocketq.message import Message
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import MessageStore, open_message_store
from rocketq.store.store_queries import GetMessageStatus

_UNIT = struct.Struct(">qiq")
N = 3000


@pytest.fixture
def dl_config(store_config: StoreConfig) -> StoreConfig:
    return dataclasses.replace(
        store_config,
        enable_dleger_commit_log=True,
        d_leger_self_id="n0",
        mapped_file_size_consume_queue=20 * 1000,
        max_index_num=4096,
    )


def fill(cfg: StoreConfig, n: int = N) -> list[int]:
    """``n`` messages over queues 0 and 1 (key ``k<i>``, body ``m<i>``); their physical offsets."""
    with open_message_store(cfg) as s:
        assert isinstance(s, DLedgerMessageStore)
        offsets = [
            s.put_message(Message("T", f"m{i}".encode(), keys=[f"k{i}"]), queue_id=i % 2).physical_offset
            for i in range(n)
        ]
        assert s.wait_dispatched(10)
    return offsets


def bodies(store: MessageStore, qid: int) -> list[bytes]:
    """Every message of queue ``qid``, read by queue offset from 0 (each unit once)."""
    assert store.wait_dispatched(10)
    out: list[bytes] = []
    offset, end = 0, store.get_max_offset("T", qid)
    while offset < end:
        r = store.get_message("G", "T", qid, offset, 32)
        assert r.status is GetMessageStatus.FOUND, (qid, offset, r.status)
        assert [m.queue_offset for m in r.messages] == list(range(offset, offset + len(r.messages)))
        out += [m.body for m in r.messages]
        offset = r.next_begin_offset
    return out


def expect(n: int, qid: int) -> list[bytes]:
    return [f"m{i}".encode() for i in range(qid, n, 2)]


def cq_files(cfg: StoreConfig, qid: int) -> list[str]:
    d = os.path.join(cfg.store_path_root_dir, "consumequeue", "T", str(qid))
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def units(cfg: StoreConfig, qid: int) -> list[tuple[int, int]]:
    """(physical offset, size) of every written unit of queue ``qid``."""
    out = []
    for path in cq_files(cfg, qid):
        with open(path, "rb") as f:
            data = f.read()
        for at in range(0, len(data), 20):
            off, size, _ = _UNIT.unpack_from(data, at)
            if off == 0 and size == 0:
                break
            out.append((off, size))
    return out


def cut_units(cfg: StoreConfig, qid: int, count: int) -> list[tuple[int, int]]:
    """Zero the last ``count`` units of queue ``qid`` (what a crash before their flush leaves)."""
    kept = units(cfg, qid)
    gone = kept[-count:]
    per_file = cfg.mapped_file_size_consume_queue // 20
    for i in range(len(kept) - count, len(kept)):
        path = cq_files(cfg, qid)[i // per_file]
        with open(path, "r+b") as f:
            f.seek(i % per_file * 20)
            f.write(bytes(20))
    return gone


def set_dispatched(cfg: StoreConfig, value: int) -> None:
    cp = StoreCheckpoint(os.path.join(cfg.store_path_root_dir, "checkpoint"))
    cp.dispatched_phy_offset = value
    cp.shutdown()


def test_a_clean_restart_dispatches_nothing_again(dl_config: StoreConfig) -> None:
    fill(dl_config)
    with open_message_store(dl_config) as s:
        assert s.reput is not None and s.reput.dispatched_records == 0
        assert bodies(s, 0) == expect(N, 0) and bodies(s, 1) == expect(N, 1)
        for i in (0, 1234, N - 1):
            found = s.query_messages_by_key("T", f"k{i}").messages
            assert [m.body for m in found] == [f"m{i}".encode()]
        s.put_message(Message("T", b"next", keys=["next"]), queue_id=0)
        assert bodies(s, 0)[-1] == b"next" and len(bodies(s, 0)) == N // 2 + 1


def test_a_queue_tail_lost_in_a_crash_is_dispatched_again(dl_config: StoreConfig) -> None:
    offsets = fill(dl_config)
    gone = cut_units(dl_config, 1, 50)
    # the checkpoint of the last flush before the crash: 120 messages earlier
    resume = offsets[N - 120] - fmt.BODY_OFFSET
    assert resume <= gone[0][0]
    set_dispatched(dl_config, resume)
    with open_message_store(dl_config) as s:
        assert s.reput is not None and s.reput.dispatched_records == 120
        assert bodies(s, 0) == expect(N, 0) and bodies(s, 1) == expect(N, 1)
        found = s.query_messages_by_key("T", f"k{N - 1}").messages
        assert [m.body for m in found] == [f"m{N - 1}".encode()]
    assert units(dl_config, 1)[-50:] == gone


def test_units_past_the_committed_position_are_cut(dl_config: StoreConfig) -> None:
    fill(dl_config, 100)
    committed = max(off + size for off, size in units(dl_config, 0) + units(dl_config, 1))
    # a unit for a record the log does not hold (an entry a new leader would have truncated)
    path = cq_files(dl_config, 0)[-1]
    at = len(units(dl_config, 0)) * 20
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(_UNIT.pack(committed + 100, 120, 0))
    set_dispatched(dl_config, committed + 400)  # past the committed end as well
    with open_message_store(dl_config) as s:
        assert s.reput is not None and s.reput.dispatched_records == 0
        assert s.get_max_offset("T", 0) == 50
        assert bodies(s, 0) == expect(100, 0)
        r = s.put_message(Message("T", b"next"), queue_id=0)
        assert r.queue_offset == 50
        assert bodies(s, 0) == [*expect(100, 0), b"next"]
    assert all(off + size <= r.physical_offset + r.size for off, size in units(dl_config, 0))


def test_a_checkpoint_at_the_end_of_a_data_file_resumes_after_the_padding(dl_config: StoreConfig) -> None:
    """Dispatch can stop after a data file's last entry, whose end is then the checkpoint's
    dispatched position: the next entry begins the next file, past the padding. The restart
    resumes there instead of rebuilding everything (it did rebuild, in about one crash in ten
    under load)."""
    fill(dl_config)
    records = sorted(units(dl_config, 0) + units(dl_config, 1))
    file_size = dl_config.mapped_file_size_commit_log
    ends = [
        (k, off + size)
        for k, ((off, size), (nxt, _)) in enumerate(itertools.pairwise(records))
        if (nxt - fmt.BODY_OFFSET) % file_size == 0 and off + size < nxt - fmt.BODY_OFFSET
    ]
    assert len(ends) >= 2, "the messages fill several data files, each ending in padding"
    k, end = ends[1]
    set_dispatched(dl_config, end)
    with open_message_store(dl_config) as s:
        assert s.reput is not None and s.reput.dispatched_records == N - k - 1
        assert bodies(s, 0) == expect(N, 0) and bodies(s, 1) == expect(N, 1)


@pytest.mark.parametrize("why", ["missing", "not an entry start", "no consumequeue", "no index"])
def test_an_unusable_checkpoint_rebuilds_everything(dl_config: StoreConfig, why: str) -> None:
    offsets = fill(dl_config, 200)
    if why in ("missing", "not an entry start"):
        set_dispatched(dl_config, -1 if why == "missing" else offsets[100] - fmt.BODY_OFFSET + 7)
    else:  # what an operator deletes to have them built again
        shutil.rmtree(os.path.join(dl_config.store_path_root_dir, why.split()[1]))
    with open_message_store(dl_config) as s:
        assert s.reput is not None and s.reput.dispatched_records == 200
        assert bodies(s, 0) == expect(200, 0) and bodies(s, 1) == expect(200, 1)
        found = s.query_messages_by_key("T", "k7").messages
        assert [m.body for m in found] == [b"m7"]
