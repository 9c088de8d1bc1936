"""Which event loop the servers run on: asyncio's own, or uvloop on request.

``rocketq serve``, ``rocketq broker`` and ``rocketq namesrv`` start through :func:`run`.
Everything in rocketq is written against the asyncio API only, so both loops run the same code.

====================================  =========================================================
unset / ``asyncio`` (default)         asyncio's default loop
``ROCKETQ_EVENT_LOOP=uvloop``         uvloop (``pip install uvloop``); an error if it is missing
``ROCKETQ_EVENT_LOOP=auto``           uvloop when importable, else asyncio
====================================  =========================================================

Any other value is an error naming the accepted ones. asyncio's loop runs on
:class:`~rocketq.remoting.timer_selector.TimerfdSelector` where Linux's timerfd is there (its
waits carry no timeout: the loop's next timer is a timerfd; ``ROCKETQ_LOOP_TIMERFD=0`` gives the
plain selector). Why uvloop is not the default: on the
2-CPU benchmark machine it cut the broker's CPU per single send by about 15-20 %, but under the
end-to-end latency case (pipelined sends plus long-polling pulls on a busy machine) the broker on
uvloop fell seconds behind and sends timed out where asyncio's loop kept up (docs/benchmarks.md).
Re-measured after the compiled send path ("The send path after the codecs" there): no gain
beyond the noise at the send path's rates, and the fall-behind neither reproduced nor explained.
Library code never switches loops itself: this applies only to processes started through
:func:`run`.

The heap of a server process (:func:`freeze_start_heap`): once a server command is up, what
its start built (modules, classes, configs, topic and queue tables, the segments' objects) is
collected once and moved to the collector's permanent generation (``gc.freeze``), so that the
full collections of a busy broker no longer walk it. On a DLedger leader at 128 concurrent
senders, full collections took 1.0-1.5 us of its loop per message and paused it about 21 ms
each (docs/benchmarks.md, "A member's dispatch thread per message"). ``ROCKETQ_GC_FREEZE=0``
leaves the heap as it is. Embedded brokers and clients never freeze the application's heap.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar, cast

from rocketq.errors import RocketqError
from rocketq.remoting import timer_selector

T = TypeVar("T")

#: Environment variable that picks the loop (see the module docstring).
EVENT_LOOP_ENV: Final = "ROCKETQ_EVENT_LOOP"
EVENT_LOOP_CHOICES: Final = ("asyncio", "uvloop", "auto")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice`` (default: the environment variable, else ``asyncio``);
    None means asyncio's default loop. asyncio's loop comes from
    :func:`rocketq.remoting.timer_selector.new_event_loop` where timerfd is available."""
    name = (choice if choice is not None else os.environ.get(EVENT_LOOP_ENV, "asyncio")).strip().lower()
    if name not in EVENT_LOOP_CHOICES:
        raise RocketqError(
            f"{EVENT_LOOP_ENV}={name!r} is not an event loop choice; "
            f"use one of {', '.join(EVENT_LOOP_CHOICES)}"
        )
    if name == "asyncio":
        return timer_selector.new_event_loop if timer_selector.available() else None
    try:
        # optional dependency, imported by name so that type checks do not need it installed
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if name == "uvloop":
            raise RocketqError(f"{EVENT_LOOP_ENV}=uvloop but uvloop is not installed") from None
        return None
    return cast(Callable[[], asyncio.AbstractEventLoop], uvloop.new_event_loop)


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``"uvloop"`` or ``"asyncio"``: what ``loop`` is (for start-up lines and tests)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


#: Environment variable that turns :func:`freeze_start_heap` off (``0``).
GC_FREEZE_ENV: Final = "ROCKETQ_GC_FREEZE"


def freeze_start_heap() -> bool:
    """For a server process that is up: one full collection, then every object still alive
    moved to the collector's permanent generation (``gc.freeze``), unless ``ROCKETQ_GC_FREEZE=0``.
    True when it froze. Objects made later are collected as always; the frozen ones stay (what a
    server builds at start lives as long as the process)."""
    if os.environ.get(GC_FREEZE_ENV, "1").strip() == "0":
        return False
    gc.collect()
    gc.freeze()
    return True


def run(main: Coroutine[Any, Any, T], *, choice: str | None = None) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    try:
        factory = loop_factory(choice)
    except RocketqError:
        main.close()  # never started: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


__all__ = [
    "EVENT_LOOP_CHOICES",
    "EVENT_LOOP_ENV",
    "GC_FREEZE_ENV",
    "freeze_start_heap",
    "loop_factory",
    "loop_name",
    "run",
]
