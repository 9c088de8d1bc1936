"""The background threads of the store (RocketMQ ``ServiceThread``), on one base class.

A :class:`ServiceThread` owns one daemon thread that repeats::

    [idle]  (only when wait_first: the first wait comes before the first step)
    loop until stopped:
        more = step()           one unit of work, no waiting; True: work is left, run again
        if not more: idle()     wait up to idle_seconds() for a wakeup() (or the stop)
    on_shutdown()               in the thread, after the loop (a final flush, say)

Subclasses implement :meth:`step` (flush, commit, dispatch, retention, delay levels, timers,
segment pre-allocation) and choose how they idle. Tests drive a service without its thread by
calling :meth:`step` directly.

Errors: an exception from ``step`` is kept in :attr:`ServiceThread.error`, logged by
:meth:`on_error` (which backs off ``error_backoff_s``) and the loop goes on after its usual
idle; the thread never dies of an error.

Fault injection: :meth:`run_step` is the only caller of ``step`` in the loop, and it first
calls :attr:`ServiceThread.fault_hook` with the service when one is set. Set it on an instance
(one service) or on a class (every service of that class, subclasses included); a hook that
raises makes the step fail exactly as a failing step would, one that sleeps delays it.

Stopping: :meth:`stop` signals (the loop ends after the current step, the idle wait returns at
once); :meth:`shutdown` signals and joins. Subclasses that persist state on shutdown extend
``shutdown`` (work in the caller after the join) or ``on_shutdown`` (work in the thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ClassVar

log = logging.getLogger(__name__)

FaultHook = Callable[["ServiceThread"], None]


class ServiceThread:
    """One background loop of the store (see the module docstring)."""

    #: Thread name and log name.
    name: ClassVar[str] = "ServiceThread"
    #: Wait before the first step, as services that act "every interval" do.
    wait_first: ClassVar[bool] = False
    #: Pause after a failed step, before the usual idle.
    error_backoff_s: ClassVar[float] = 0.01
    #: How long :meth:`shutdown` waits for the thread.
    join_timeout_s: ClassVar[float] = 10.0
    #: Called with the service before every step of the loop; see the module docstring.
    fault_hook: FaultHook | None = None

    def __init__(self, interval_s: float | None) -> None:
        #: Default idle wait between steps, in seconds (None: until woken).
        self.interval_s: float | None = interval_s
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        #: The last exception a step raised, None while none did.
        self.error: BaseException | None = None

    # -- control ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        """End the current idle wait (or the next one) early."""
        if not self._wakeup.is_set():
            self._wakeup.set()

    def stop(self) -> None:
        """Ask the loop to end; returns at once."""
        self._stopped.set()
        self._wakeup.set()

    def shutdown(self) -> None:
        """Stop and wait for the thread (up to ``join_timeout_s``)."""
        self.stop()
        if self._thread.is_alive():
            self._thread.join(self.join_timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # -- waiting ----------------------------------------------------------------------------
    def wait_for_running(self, timeout_s: float | None) -> None:
        """Wait until woken, stopped or ``timeout_s`` passed; consumes the wakeup."""
        self._wakeup.wait(timeout_s)
        self._wakeup.clear()

    def idle_seconds(self) -> float | None:
        """How long the next idle wait lasts; the interval unless a subclass knows better."""
        return self.interval_s

    def idle(self) -> None:
        """The wait between steps: a wakeup ends it early."""
        self.wait_for_running(self.idle_seconds())

    # -- work -------------------------------------------------------------------------------
    def step(self) -> bool | None:
        """One unit of work, without waiting. True when more work is ready at once."""
        raise NotImplementedError

    def run_step(self) -> bool | None:
        """The fault hook (if any), then :meth:`step`."""
        # An instance's own hook first; a class's hook read through the class, so that a plain
        # function stored there is not bound as a method.
        hook = self.__dict__.get("fault_hook") or type(self).fault_hook
        if hook is not None:
            hook(self)
        return self.step()

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        log.exception("%s failed", self.name)
        self._stopped.wait(self.error_backoff_s)

    def on_start(self) -> None:
        log.info("%s started", self.name)

    def on_shutdown(self) -> None:
        """Runs in the thread once the loop has ended."""

    def on_stopped(self) -> None:
        log.info("%s stopped", self.name)

    def _run(self) -> None:
        self.on_start()
        if self.wait_first and not self._stopped.is_set():
            self.idle()
        while not self._stopped.is_set():
            try:
                more = self.run_step()
            except Exception as exc:  # keep serving; the error is visible to callers
                self.on_error(exc)
                more = False
            if not more and not self._stopped.is_set():
                self.idle()
        try:
            self.on_shutdown()
        except Exception:
            log.exception("%s failed during shutdown", self.name)
        self.on_stopped()


__all__ = ["FaultHook", "ServiceThread"]
