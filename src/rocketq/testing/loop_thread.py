"""A private event loop on a background thread, as the in-process cluster and the fault proxy
run theirs.

:func:`run_loop` is the thread's target: it runs the loop until ``loop.stop()`` (called through
``call_soon_threadsafe`` by the owner), then cancels what is still pending, waits for it, shuts
down async generators and the default executor, and closes the loop. Nothing of the loop
outlives the thread.
"""

from __future__ import annotations

import asyncio


def run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` on the calling thread until it is stopped, then close it cleanly."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


__all__ = ["run_loop"]
