"""A call's result handed to the task that awaits it within the read that brought it.

asyncio runs a future's done callbacks through ``call_soon``: a task that awaits a call's
future resumes one loop iteration after the read that completed it, an ``epoll_wait`` and a
pass over the loop's ready queue later. A caller with one call in flight pays that iteration
on every call, and its next request leaves that much later, by which time the serving side has
often gone to sleep and pays a wake-up of its own (docs/benchmarks.md, "The asyncio producer's
answer resumes its task in the read").

:func:`complete_resuming` sets the future's result and, when the future's one done callback is
an asyncio Task's wake-up and no task of the loop is running (the case of a transport's read
callback), runs that wake-up at once in the task's own context: the task goes on from its
``await`` inside the read, before the read returns, much as Python 3.12's eager tasks run a new
task's first step inside ``create_task``. Anything else is completed as asyncio does it.

Invariants:

* the future gets the same result and the task sees the same value; only the moment at which
  the task runs differs;
* a task's step never runs inside another task's step (entering one would be an error), so
  with a task running the wake-up is scheduled as usual;
* only a Task's own wake-up is run in place; any other done callback (a ``gather``, a
  ``wait_for``, an application's) keeps asyncio's ``call_soon``, which code may rely on;
* the caller of :func:`complete_resuming` must expect the task's code to run before it returns:
  it may write on the same connection or close it, so the caller completes the future last,
  with its own state already settled.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

__all__ = ["complete_resuming"]

_current_task = asyncio.current_task
_Task: Final = asyncio.Task
#: the names of a Task's wake-up: ``task_wakeup`` for the C Task, ``__wakeup`` for asyncio's
#: pure-Python Task, which is ``asyncio.Task`` only where the C module is missing (elsewhere a
#: pure-Python task is not an ``asyncio.Task`` and is completed as usual)
_WAKEUP_NAMES: Final = frozenset({"task_wakeup", "__wakeup"})


def complete_resuming(future: asyncio.Future[Any], result: object, loop: asyncio.AbstractEventLoop) -> None:
    """Set ``future``'s ``result`` (it must not be done) and resume the task awaiting it now
    when that is safe (module docstring), else as asyncio would."""
    callbacks = future._callbacks  # None (C) or [] (pure Python) when there are none
    if callbacks and len(callbacks) == 1:
        wakeup, context = callbacks[0]
        if (
            isinstance(getattr(wakeup, "__self__", None), _Task)
            and getattr(wakeup, "__name__", None) in _WAKEUP_NAMES
            and _current_task(loop) is None
        ):
            future.remove_done_callback(wakeup)
            future.set_result(result)
            context.run(wakeup, future)
            return
    future.set_result(result)
