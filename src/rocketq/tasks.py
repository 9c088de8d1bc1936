"""asyncio task and future helpers shared by the servers, the clients and the store."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol, TypeVar

T_contra = TypeVar("T_contra", contravariant=True)


class Settable(Protocol[T_contra]):
    """A future's setting side: ``asyncio.Future``, ``concurrent.futures.Future`` or a waiter
    shaped like them."""

    def done(self) -> bool: ...

    def set_result(self, result: T_contra, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


def settle(fut: Settable[T_contra], outcome: T_contra | BaseException) -> None:
    """Hand ``fut`` its outcome, an exception as its exception, unless it is done already (its
    waiter gave up: cancelled, or failed by a timeout)."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel every task (None entries are skipped), then wait for each to finish: a task's
    CancelledError is swallowed, any other exception it ends with propagates."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError):
            await task


__all__ = ["Settable", "cancel_and_wait", "settle"]
