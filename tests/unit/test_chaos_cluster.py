"""rocketq.testing.chaos.cluster without processes: the power-loss cut of an entry store and the
arguments ChaosGroup refuses."""

from __future__ import annotations

import pathlib
import random

import pytest

from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.ha.entry_store import EntryStore
from rocketq.testing.chaos.cluster import ChaosGroup, NodeState, _log_tail, _Node
from rocketq.testing.chaos.power_loss import cut_unsynced

DATA_FILE = 4096
INDEX_FILE = 32 * 1024


@pytest.mark.parametrize("seed", range(12))
def test_a_power_loss_keeps_the_flushed_entries_and_a_prefix_of_the_rest(
    tmp_path: pathlib.Path, seed: int
) -> None:
    store = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
    bodies = [bytes([65 + i % 26]) * (100 + 37 * i % 300) for i in range(40)]
    for body in bodies[:10]:
        store.append(1, body)
    store.flush()
    store.persist_checkpoint()  # flushedIndex 9: what a power loss cannot take
    for body in bodies[10:]:
        store.append(2, body)  # spans several data files; written, never fsynced here
    written_end = store.write_pos
    home = store.home
    del store  # no close: a close would fsync and checkpoint the rest

    lost = cut_unsynced(home, {"mappedFileSizeCommitLog": str(DATA_FILE)}, random.Random(seed))
    assert lost.flushed_index == 9 and lost.written_end == written_end
    assert lost.durable_end <= lost.cut_at <= lost.written_end
    assert 9 <= lost.kept_index <= 39

    reopened = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
    try:
        assert reopened.ledger_end_index == lost.kept_index  # a torn last entry is cut on recovery
        assert [reopened.get(i).body for i in range(lost.kept_index + 1)] == bodies[: lost.kept_index + 1]
        if lost.kept_index >= 0:
            last = reopened.get(lost.kept_index)
            assert last.pos + BODY_OFFSET + len(last.body) <= lost.cut_at  # kept whole before the cut
    finally:
        reopened.close()


def test_a_power_loss_without_a_checkpoint_may_take_everything(tmp_path: pathlib.Path) -> None:
    store = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
    for i in range(5):
        store.append(1, b"x" * (50 + i))
    home = store.home
    del store
    cuts = set()
    for seed in range(30):
        lost = cut_unsynced(home, {"mappedFileSizeCommitLog": str(DATA_FILE)}, random.Random(seed))
        cuts.add(lost.cut_at)
        assert lost.flushed_index == -1 and lost.durable_end == 0
        if lost.written_end == 0:
            break  # everything went
    reopened = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
    try:
        assert reopened.ledger_end_index < 4  # the last cut took at least part of the tail
    finally:
        reopened.close()


def test_chaos_group_refuses_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        ChaosGroup(tmp_path, size=0)
    with pytest.raises(ValueError, match="ASYNC_FLUSH"):
        ChaosGroup(tmp_path, flush="SOMETIMES")
    with pytest.raises(ValueError, match=r"\[3\] are not in 0 \.\. 2"):
        ChaosGroup(tmp_path, tmpfs_nodes=(3,))
    group = ChaosGroup(tmp_path)
    with pytest.raises(ValueError, match="not one of"):
        group.broker_addr(0)  # not started: no nodes yet
    group.stop()  # nothing started: nothing to stop


def test_an_exited_nodes_error_carries_the_end_of_its_log(tmp_path: pathlib.Path) -> None:
    """The error of a node that exited quotes its log's last bytes: the test directory holding
    the log may be rotated away before anyone reads it."""
    log = tmp_path / "broker-n2.log"
    log.write_bytes(b"x" * 5000 + b"\ncannot start: the port is in use\n")
    tail = _log_tail(log)
    assert tail.endswith("cannot start: the port is in use\n") and len(tail) == 2000
    assert _log_tail(tmp_path / "missing.log").startswith("(unreadable: ")


def test_describe_names_each_members_view(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what a recovery that timed out quotes: a member's role, term, leader and committed
    # position, or why there is none (dead, paused, not answering)
    group = ChaosGroup(tmp_path)
    props = {
        "bindAddress": "127.0.0.1",
        "listenPort": "1",
        "dLegerPeers": "n0-127.0.0.1:2;n1-127.0.0.1:3;n2-127.0.0.1:4",
        "storePathRootDir": str(tmp_path),
    }
    group._nodes = [_Node(i, f"n{i}", str(tmp_path / f"n{i}.conf"), props, str(tmp_path)) for i in range(3)]
    group._nodes[1].paused = True
    views = {0: NodeState("LEADER", 4, "n0", 100), 2: None}
    monkeypatch.setattr(group, "alive", lambda node: True)
    monkeypatch.setattr(group, "state", lambda node, timeout_s=0.0: views.get(node))
    assert group.describe() == "n0 LEADER term 4 leader n0 committed 100; n1 paused; n2 not answering"
    monkeypatch.setattr(group, "alive", lambda node: node != 2)
    assert group.describe().endswith("; n2 dead")
