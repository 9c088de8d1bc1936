"""A server process freezes what its start built (``gc.freeze``) once it is up; embedded use
never does; ``ROCKETQ_GC_FREEZE=0`` turns it off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from rocketq.namesrv.config import NamesrvConfig
from rocketq.namesrv.run import serve_namesrv
from rocketq.remoting import eventloop


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freeze_moves_the_live_heap_to_the_permanent_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.GC_FREEZE_ENV, raising=False)
    assert gc.get_freeze_count() == 0
    assert eventloop.freeze_start_heap()
    assert gc.get_freeze_count() > 0
    cycle: list[object] = []
    cycle.append(cycle)  # made after the freeze: a full collection still finds it
    del cycle
    assert gc.collect() >= 1


def test_rocketq_gc_freeze_0_leaves_the_heap_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.GC_FREEZE_ENV, "0")
    assert not eventloop.freeze_start_heap()
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("own_process", [True, False], ids=["process", "embedded"])
def test_a_name_server_freezes_only_as_a_process_of_its_own(
    monkeypatch: pytest.MonkeyPatch, own_process: bool
) -> None:
    calls: list[int] = []

    def freeze() -> bool:
        calls.append(1)
        return True

    monkeypatch.setattr(eventloop, "freeze_start_heap", freeze)

    async def main() -> None:
        stop = asyncio.Event()
        stop.set()
        await serve_namesrv(NamesrvConfig(listen_port=0), stop, freeze_heap=own_process)

    asyncio.run(main())
    assert calls == ([1] if own_process else [])
