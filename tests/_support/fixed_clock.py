"""The store's clock fixed, for tests that compare two stores' files byte for byte: every
place a put reads the time (the CommitLog's and the put path's ``_time_ns``, ``BrokerMessage``'s
born time, the timer topic's delivery time) reads ``NOW_NS``."""

from __future__ import annotations

import time

import pytest

from rocketq import message as message_module
from rocketq.store import commitlog as commitlog_module
from rocketq.store import store_puts as store_module

NOW_NS = 1_700_000_000_000 * 1_000_000


class FixedTime:
    """The ``time`` module with ``time_ns`` fixed at ``NOW_NS``."""

    def time_ns(self) -> int:
        return NOW_NS

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def fix_store_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock a put reads, fixed at ``NOW_NS`` (undone with ``monkeypatch``)."""
    monkeypatch.setattr(commitlog_module, "_time_ns", lambda: NOW_NS)
    monkeypatch.setattr(store_module, "_time_ns", lambda: NOW_NS)
    monkeypatch.setattr(message_module, "time", FixedTime())
    monkeypatch.setattr(store_module, "time", FixedTime())
