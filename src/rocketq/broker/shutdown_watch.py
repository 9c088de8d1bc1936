"""A watch over a server process's shutdown: what it is waiting for when it takes too long, and
a bound on how long it may take.

Theory of operation::

    SIGTERM/SIGINT ─► stop set ─► ShutdownWatch.arm()  (once; a thread of its own, daemon)
        + report_s: WARNING "shutdown still running after N s", then every thread's stack
                    (faulthandler, written by that thread: shown even while the event loop is
                    blocked) and every asyncio task's stack (logged on the loop, if it turns)
        + limit_s:  ERROR "shutdown did not finish within N s; exiting without it", then
                    os._exit(EXIT_CODE): the store's ``abort`` file is left in place, so the next
                    start recovers as after a crash (nothing acknowledged is lost: the written
                    data is in the page cache, as after a SIGKILL)
        + backstop_s (server commands: BACKSTOP_S): faulthandler's watchdog, a C thread that
                    needs no Python thread to run (one may hold the GIL in a C call, or the
                    interpreter may be past the point where Python threads run, at its exit),
                    writes every thread's stack and exits with status 1
    shutdown finished ─► ShutdownWatch.disarm(): the thread ends, nothing is reported

The shutdown's own steps are bounded (the broker's: ``Broker.shutdown``); the watch names the
step that was not, and keeps the process from outliving a supervisor's patience.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger(__name__)

#: After this long a shutdown still running is reported with every thread's and task's stack.
SHUTDOWN_REPORT_S = 15.0
#: After this long the process exits without finishing its shutdown (``EXIT_CODE``).
SHUTDOWN_LIMIT_S = 25.0
#: The exit status of a process whose shutdown did not finish within ``SHUTDOWN_LIMIT_S``.
EXIT_CODE = 3
#: The server commands' backstop: after this long the process ends even if no Python thread can
#: run (faulthandler's watchdog: the stacks, then exit status 1), before a 30 s supervisor.
BACKSTOP_S = 28.0


def task_stacks(loop: asyncio.AbstractEventLoop) -> str:
    """Every unfinished task of ``loop`` with its stack (call on the loop)."""
    out = io.StringIO()
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    out.write(f"{len(tasks)} asyncio tasks:\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        task.print_stack(limit=12, file=out)
    return out.getvalue()


class ShutdownWatch:
    """See the module docstring. ``exit_process`` (tests) replaces ``os._exit``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        report_s: float = SHUTDOWN_REPORT_S,
        limit_s: float = SHUTDOWN_LIMIT_S,
        stream: TextIO | None = None,
        exit_process: Callable[[int], object] | None = None,
        backstop_s: float | None = None,
    ) -> None:
        if not 0 < report_s <= limit_s:
            raise ValueError(f"report_s={report_s} must be > 0 and <= limit_s={limit_s}")
        if backstop_s is not None and backstop_s <= limit_s:
            raise ValueError(f"backstop_s={backstop_s} must be > limit_s={limit_s}")
        #: faulthandler's exit after this long (None: none); process-wide, so server commands only
        self.backstop_s = backstop_s
        self._backstop_armed = False
        self.loop = loop
        self.report_s = report_s
        self.limit_s = limit_s
        self._stream = stream
        self._exit: Callable[[int], object] = exit_process or os._exit
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        return self._thread is not None

    def arm(self) -> None:
        """Start watching (the shutdown begins now); a second call does nothing."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="shutdown-watch", daemon=True)
        self._thread.start()
        if self.backstop_s is not None:
            try:
                faulthandler.dump_traceback_later(self.backstop_s, exit=True, file=self._stream or sys.stderr)
                self._backstop_armed = True
            except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no descriptor
                log.warning("shutdown backstop not armed: the log stream has no file descriptor")

    def disarm(self) -> None:
        """The shutdown finished: stop watching."""
        self._done.set()
        if self._backstop_armed:
            faulthandler.cancel_dump_traceback_later()
            self._backstop_armed = False

    def join(self, timeout_s: float) -> bool:
        """Wait for the watch's thread to end (after :meth:`disarm`, or its exit); True if it did."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def _watch(self) -> None:
        if self._done.wait(self.report_s):
            return
        self._report()
        if self._done.wait(self.limit_s - self.report_s):
            return
        log.error(
            "shutdown did not finish within %.0f s of its start; exiting without it (code %d; the "
            "next start recovers as after a crash)",
            self.limit_s,
            EXIT_CODE,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._exit(EXIT_CODE)

    def _report(self) -> None:
        stream = self._stream or sys.stderr
        log.warning(
            "shutdown still running after %.0f s (the process exits anyway at %.0f s); "
            "every thread's stack and every task's follow",
            self.report_s,
            self.limit_s,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        try:
            stream.flush()
            faulthandler.dump_traceback(file=stream, all_threads=True)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no descriptor
            log.warning("thread stacks not written: the log stream has no file descriptor")
        loop = self.loop
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._log_tasks)
            except RuntimeError:  # closed meanwhile
                pass

    def _log_tasks(self) -> None:
        log.warning("shutdown: %s", task_stacks(self.loop))


__all__ = ["BACKSTOP_S", "EXIT_CODE", "SHUTDOWN_LIMIT_S", "SHUTDOWN_REPORT_S", "ShutdownWatch", "task_stacks"]
