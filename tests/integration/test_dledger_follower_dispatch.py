"""A follower's dispatch learns of the leader's commits from the Raft driver's commit callback
(``RaftGroupLog.on_commit``), not by polling: three DLedger stores in this process (each log on
its own loop thread), real sockets on 127.0.0.1 and real files, with the dispatch thread's
fallback look pushed out to an hour, so only the callback can bring a follower's ConsumeQueue
up to date within the test's bound."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator

import pytest

from _support.procs import free_port
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.ha.raft_types import Role
from rocketq.message import Message
from rocketq.store import dledger_store
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store

IDS = ("n0", "n1", "n2")
TOPIC = "T"


@pytest.fixture
def stores(
    tmp_path: pathlib.Path, store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, DLedgerMessageStore]]:
    monkeypatch.setattr(dledger_store, "COMMIT_WAKE_FALLBACK_S", 3600.0, raising=False)
    monkeypatch.setattr(dledger_store, "FOLLOWER_POLL_S", 3600.0)
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
        found = [s for s in stores.values() if s.ledger is not None and s.ledger.state.role is Role.LEADER]
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
