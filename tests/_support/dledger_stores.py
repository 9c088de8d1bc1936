"""In-process groups of three embedded DLedger stores (``DLedgerMessageStore`` with the Raft
driver) on 127.0.0.1 ports the OS picked, real files, short election timeouts.

``store_group`` opens, starts and finally shuts down the members (``open_store`` makes one from
its config: ``open_message_store`` by default); ``caught_up_leader`` is the one member that
leads its log's term and takes puts (its queue-offset table rebuilt for that term), or None.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Callable, Iterator

from _support.procs import free_port
from rocketq.config import StoreConfig
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store

MEMBER_IDS = ("n0", "n1", "n2")


def group_configs(store_config: StoreConfig, root: pathlib.Path) -> list[StoreConfig]:
    """The members' configs: group ``g``, batch push on, 300 ms election timeout, 50 ms heartbeats,
    1 MiB segments, each member's data under ``root/<self id>``."""
    peers = ";".join(f"{i}-127.0.0.1:{free_port()}" for i in MEMBER_IDS)
    return [
        dataclasses.replace(
            store_config,
            store_path_root_dir=str(root / i),
            mapped_file_size_commit_log=1 << 20,
            enable_dleger_commit_log=True,
            d_leger_group="g",
            d_leger_peers=peers,
            d_leger_self_id=i,
            enable_batch_push=True,
            d_leger_election_timeout_ms=300,
            d_leger_heartbeat_interval_ms=50,
        )
        for i in MEMBER_IDS
    ]


def _open(cfg: StoreConfig) -> DLedgerMessageStore:
    store = open_message_store(cfg)
    assert isinstance(store, DLedgerMessageStore)
    return store


@contextlib.contextmanager
def store_group(
    store_config: StoreConfig,
    root: pathlib.Path,
    *,
    open_store: Callable[[StoreConfig], DLedgerMessageStore] = _open,
    before_start: Callable[[DLedgerMessageStore], object] | None = None,
) -> Iterator[list[DLedgerMessageStore]]:
    """The three members, started (``before_start`` runs on each first); shut down at the end."""
    stores: list[DLedgerMessageStore] = []
    try:
        for cfg in group_configs(store_config, root):
            store = open_store(cfg)
            if before_start is not None:
                before_start(store)
            store.start()
            stores.append(store)
        yield stores
    finally:
        for store in stores:
            store.shutdown()


def caught_up_leader(stores: list[DLedgerMessageStore]) -> DLedgerMessageStore | None:
    """The one member that leads and takes puts, or None."""
    leaders = [s for s in stores if s.ledger is not None and s.leads_caught_up()]
    return leaders[0] if len(leaders) == 1 else None
