"""The bounded poll the tests share (tests/_support/wait.py)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from _support.wait import collect_until, collect_until_async, wait_until, wait_until_async


def test_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "done", "three tries", 5.0, 0) == "done"
    assert next(counter) == 4


def test_timeout_names_the_wait_the_deadline_and_the_last_value() -> None:
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"after 0.05 s waiting for the answer \(last value: \[\]\)"):
        wait_until(list, "the answer", 0.05, 0.01)
    assert time.monotonic() - began >= 0.05
    state = {"n": 0}

    def tick() -> bool:
        state["n"] += 1
        return False

    with pytest.raises(AssertionError, match=r"waiting for \d+ ticks"):
        wait_until(tick, lambda: f"{state['n']} ticks", 0.02, 0.005)


def test_check_ends_the_wait_early() -> None:
    def dead() -> None:
        raise RuntimeError("the watched process died")

    with pytest.raises(RuntimeError, match="died"):
        wait_until(lambda: False, "never", 30.0, 0.01, check=dead)


def test_collect_until_gathers_batches_until_the_count() -> None:
    batches = iter([[1], [], [2, 3], [4]])
    assert collect_until(lambda: next(batches), 3, "numbers", 5.0) == [1, 2, 3]
    once = iter([[0]])
    with pytest.raises(AssertionError, match=r"5 numbers \(got 1\)"):
        collect_until(lambda: next(once, []), 5, "numbers", 0.02, 0.005)


def test_async_variants_take_plain_and_async_predicates() -> None:
    async def main() -> None:
        flag = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, flag.set)
        assert await wait_until_async(flag.is_set, "the flag", 5.0, 0) is True

        async def probe() -> int:
            await asyncio.sleep(0)
            return 7

        assert await wait_until_async(probe, "the probe", 5.0) == 7
        with pytest.raises(AssertionError, match=r"waiting for nothing \(last value: 0\)"):
            await wait_until_async(lambda: 0, "nothing", 0.02, 0.005)

        async def fetch() -> list[str]:
            return ["a"]

        assert await collect_until_async(fetch, 2, "letters", 5.0) == ["a", "a"]

    asyncio.run(main())
