"""asyncio task helpers shared by the servers and the clients."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel every task (None entries are skipped), then wait for each to finish: a task's
    CancelledError is swallowed, any other exception it ends with propagates."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError):
            await task


__all__ = ["cancel_and_wait"]
