"""Bounded polls: wait for a condition with a deadline, never a fixed sleep.

* :func:`wait_until` calls ``predicate()`` until it returns a truthy value and returns that value;
  after ``timeout_s`` it raises ``AssertionError`` with ``message``, the timeout and the last
  value the predicate returned.
* :func:`collect_until` gathers what ``fetch()`` returns (a consumer's ``poll``) until it has
  ``count`` items, with the same deadline and failure (it names how many arrived).
* :func:`wait_until_async` and :func:`collect_until_async` are the same inside a coroutine:
  ``predicate`` / ``fetch`` may be a plain function or return an awaitable, and the wait between
  tries is ``await asyncio.sleep(interval_s)`` (0 yields to the loop once per try).

``message`` is a string, or a function giving one at the timeout (to show state gathered while
waiting). ``check`` runs after every failed try and may raise to end the wait early (a watched
process that died).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

#: the default wait between tries
INTERVAL_S = 0.01
#: the default deadline
TIMEOUT_S = 10.0

Message = str | Callable[[], str]


def _timed_out(message: Message, timeout_s: float, last: object) -> AssertionError:
    what = message() if callable(message) else message
    shown = repr(last)
    if len(shown) > 300:
        shown = shown[:300] + "..."
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last value: {shown})")


def wait_until(
    predicate: Callable[[], T],
    message: Message = "the condition",
    timeout_s: float = TIMEOUT_S,
    interval_s: float = INTERVAL_S,
    *,
    check: Callable[[], object] | None = None,
) -> T:
    """``predicate()``'s first truthy value; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if check is not None:
            check()
        if time.monotonic() >= deadline:
            raise _timed_out(message, timeout_s, value)
        time.sleep(interval_s)


def collect_until(
    fetch: Callable[[], Iterable[T]],
    count: int,
    what: str = "items",
    timeout_s: float = TIMEOUT_S,
    interval_s: float = 0.0,
) -> list[T]:
    """Everything ``fetch()`` returned until at least ``count`` items arrived (``fetch`` itself
    usually blocks for a while, hence no wait between tries by default)."""
    got: list[T] = []

    def enough() -> bool:
        got.extend(fetch())
        return len(got) >= count

    if count > 0:
        wait_until(enough, lambda: f"{count} {what} (got {len(got)})", timeout_s, interval_s)
    return got


async def wait_until_async(
    predicate: Callable[[], T | Awaitable[T]],
    message: Message = "the condition",
    timeout_s: float = TIMEOUT_S,
    interval_s: float = INTERVAL_S,
    *,
    check: Callable[[], object] | None = None,
) -> T:
    """:func:`wait_until` in a coroutine; ``predicate`` may return an awaitable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        got = predicate()
        value: T = await got if inspect.isawaitable(got) else got  # type: ignore[assignment]
        if value:
            return value
        if check is not None:
            check()
        if loop.time() >= deadline:
            raise _timed_out(message, timeout_s, value)
        await asyncio.sleep(interval_s)


async def collect_until_async(
    fetch: Callable[[], Iterable[T] | Awaitable[Iterable[T]]],
    count: int,
    what: str = "items",
    timeout_s: float = TIMEOUT_S,
    interval_s: float = 0.0,
) -> list[T]:
    """:func:`collect_until` in a coroutine; ``fetch`` may return an awaitable."""
    got: list[T] = []

    async def enough() -> bool:
        batch = fetch()
        got.extend(await batch if inspect.isawaitable(batch) else batch)  # type: ignore[arg-type]
        return len(got) >= count

    if count > 0:
        await wait_until_async(enough, lambda: f"{count} {what} (got {len(got)})", timeout_s, interval_s)
    return got


__all__ = [
    "INTERVAL_S",
    "TIMEOUT_S",
    "collect_until",
    "collect_until_async",
    "wait_until",
    "wait_until_async",
]
